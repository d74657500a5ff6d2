package localcluster

import (
	"os"
	"path/filepath"
	"testing"
)

func TestNetnsDirOurs(t *testing.T) {
	tests := []struct {
		name    string
		entries []string // nil: no directory at all
		want    bool
	}{
		{name: "absent", want: true},
		{name: "empty, left by a killed launcher's last namespace", entries: []string{}, want: true},
		{name: "real-0's namespace, left by a killed launcher", entries: []string{realNetns}, want: true},
		{name: "someone else's namespace", entries: []string{"blue"}, want: false},
		{name: "real-0's and someone else's", entries: []string{realNetns, "blue"}, want: false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			dir := filepath.Join(t.TempDir(), "netns")
			if tt.entries != nil {
				if err := os.Mkdir(dir, 0o755); err != nil {
					t.Fatal(err)
				}
				for _, e := range tt.entries {
					if err := os.WriteFile(filepath.Join(dir, e), nil, 0o644); err != nil {
						t.Fatal(err)
					}
				}
			}
			if got := netnsDirOurs(dir); got != tt.want {
				t.Errorf("netnsDirOurs with %q = %v, want %v", tt.entries, got, tt.want)
			}
		})
	}
}
