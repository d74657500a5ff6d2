package deviceplugin

import (
	"encoding/json"
	"os"
	"path/filepath"
	"testing"

	"github.com/google/go-cmp/cmp"
	"golang.org/x/sys/unix"
)

func TestWriteFakeCards(t *testing.T) {
	if os.Geteuid() != 0 {
		if os.Getenv("KILN_TESTS_MUST_RUN") != "" {
			t.Fatal("mknod needs root, and KILN_TESTS_MUST_RUN says CI runs every test")
		}
		t.Skip("mknod needs root; .ci/run runs as root")
	}
	dir := t.TempDir()
	devDir, specDir := filepath.Join(dir, "dev"), filepath.Join(dir, "cdi")
	devices := []Device{
		{UUID: "GPU-a", Resource: "nvidia.com/gpu", Index: 0},
		{UUID: "GPU-b", Resource: "nvidia.com/gpu", Index: 1},
		{UUID: "MIG-b1", Resource: "nvidia.com/mig-1g.10gb", Index: 1, Parent: "GPU-b"},
	}
	// Twice: a restarted agent finds its nodes there.
	for range 2 {
		if err := WriteFakeCards(devDir, specDir, devices); err != nil {
			t.Fatal(err)
		}
	}
	for _, card := range []string{"nvidia0", "nvidia1"} {
		var st unix.Stat_t
		if err := unix.Stat(filepath.Join(devDir, card), &st); err != nil {
			t.Fatal(err)
		}
		if st.Mode&unix.S_IFMT != unix.S_IFCHR || unix.Major(st.Rdev) != 1 || unix.Minor(st.Rdev) != 3 {
			t.Errorf("%s: mode %o rdev %d:%d, want a character device 1:3", card, st.Mode, unix.Major(st.Rdev), unix.Minor(st.Rdev))
		}
	}
	data, err := os.ReadFile(filepath.Join(specDir, fakeSpecFile))
	if err != nil {
		t.Fatal(err)
	}
	var spec cdiSpec
	if err := json.Unmarshal(data, &spec); err != nil {
		t.Fatal(err)
	}
	node := func(i int, card string) []cdiDeviceNode {
		return []cdiDeviceNode{{Path: DriverPath(i), HostPath: filepath.Join(devDir, card), Type: "c", Major: 1, Minor: 3, Permissions: "rw"}}
	}
	want := cdiSpec{Version: "0.6.0", Kind: CDIKind, Devices: []cdiDevice{
		{Name: "GPU-a", ContainerEdits: cdiEditsNodes{DeviceNodes: node(0, "nvidia0")}},
		{Name: "GPU-b", ContainerEdits: cdiEditsNodes{DeviceNodes: node(1, "nvidia1")}},
		{Name: "MIG-b1", ContainerEdits: cdiEditsNodes{DeviceNodes: node(1, "nvidia1")}},
	}}
	if diff := cmp.Diff(want, spec); diff != "" {
		t.Errorf("CDI spec (-want +got):\n%s", diff)
	}
}
