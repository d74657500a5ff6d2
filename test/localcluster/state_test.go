package localcluster

import (
	"errors"
	"slices"
	"testing"
)

// TestResumePorts: a resumed cluster gets the ports it saved, for as many
// etcd members as it was started with, and fresh ones for its Kiln
// replicas, however many. A single-member state is what launchers before
// EtcdMembers wrote, key for key.
func TestResumePorts(t *testing.T) {
	for _, tc := range []struct {
		name                  string
		saved, members, kilns int
		wantErr               bool
	}{
		{"one member, as before", 1, 0, 0, false},
		{"one member, two replicas now", 1, 1, 2, false},
		{"three members", 3, 3, 2, false},
		{"three members resumed as one", 3, 1, 1, true},
		{"one member resumed as three", 1, 3, 1, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			p, err := newPorts(tc.saved, 1)
			if err != nil {
				t.Fatal(err)
			}
			if err := (&Cluster{Dir: dir, ports: p}).saveState(); err != nil {
				t.Fatal(err)
			}
			c := &Cluster{Dir: dir, opts: Options{Dir: dir, Resume: true, EtcdMembers: tc.members, KilnReplicas: tc.kilns}}
			err = c.prepareDir()
			if tc.wantErr {
				if !errors.Is(err, ErrCannotResume) {
					t.Fatalf("prepareDir() = %v, want ErrCannotResume", err)
				}
				return
			}
			if err != nil || !c.Resumed {
				t.Fatalf("prepareDir() = %v, resumed %v", err, c.Resumed)
			}
			if got, want := c.ports.members(), p.members(); !slices.Equal(got, want) {
				t.Errorf("etcd ports %v, want the saved %v", got, want)
			}
			kiln := c.kilnPorts()
			if len(kiln) != max(tc.kilns, 1) {
				t.Errorf("%d Kiln ports %v, want %d", len(kiln), kiln, max(tc.kilns, 1))
			}
			if tc.kilns > 1 {
				for _, n := range c.ports.named() {
					if slices.Contains(kiln, *n.port) {
						t.Errorf("a replica's port %d is %s's", *n.port, n.name)
					}
				}
			}
		})
	}
}
