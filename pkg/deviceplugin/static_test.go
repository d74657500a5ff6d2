package deviceplugin

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
)

// TestStaticSample: the inventory's usage is each device's sample; a
// device it does not list is idle, and a utilization that is not a
// percentage is refused, naming the device.
func TestStaticSample(t *testing.T) {
	const devices = "devices:\n- {uuid: GPU-0, resource: nvidia.com/gpu}\n- {uuid: GPU-1, resource: nvidia.com/gpu}\n"
	for _, tc := range []struct {
		name, usage string
		want        map[string]Usage
		wantErr     string
	}{
		{name: "none listed: all idle", want: map[string]Usage{"GPU-0": {}, "GPU-1": {}}},
		{name: "one busy", usage: "usage:\n  GPU-1: {utilization: 80, memoryUsed: 20Gi}\n",
			want: map[string]Usage{"GPU-0": {}, "GPU-1": {Utilization: 80, MemoryUsed: resource.MustParse("20Gi")}}},
		{name: "a device not in the inventory is left out", usage: "usage:\n  GPU-9: {utilization: 80}\n",
			want: map[string]Usage{"GPU-0": {}, "GPU-1": {}}},
		{name: "not a percentage", usage: "usage:\n  GPU-0: {utilization: 101}\n", wantErr: "usage of GPU-0: utilization 101 is not a percentage"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.yaml")
			if err := os.WriteFile(path, []byte(devices+tc.usage), 0o644); err != nil {
				t.Fatal(err)
			}
			got, err := (&Static{Path: path}).Sample()
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("Sample: %v, want an error with %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if len(got) != len(tc.want) {
				t.Fatalf("Sample: %v, want %v", got, tc.want)
			}
			for uuid, w := range tc.want {
				g, ok := got[uuid]
				if !ok || g.Utilization != w.Utilization || g.MemoryUsed.Cmp(w.MemoryUsed) != 0 {
					t.Errorf("%s: %+v, want %+v", uuid, g, w)
				}
			}
		})
	}
}
