package deviceplugin

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"

	"golang.org/x/sys/unix"
)

// Fake cards on a real node: a node without NVIDIA's driver, whose cards
// come from a static inventory, still hands them to containers the way
// NVIDIA's container toolkit does in CDI mode. Each card gets a device node
// (a character device with /dev/null's numbers, so opening it is harmless)
// under a directory of the agent's, and a CDI spec names, per device UUID,
// the node a container gets at the path NVIDIA's driver uses. Allocate
// answers with those CDI names, and the runtime injects exactly them.

// fakeSpecFile is the CDI spec's name in the spec directory.
const fakeSpecFile = "kiln-fake-cards.json"

// cdiSpec is the part of the CDI specification (v0.6.0) a fake card needs.
type cdiSpec struct {
	Version string      `json:"cdiVersion"`
	Kind    string      `json:"kind"`
	Devices []cdiDevice `json:"devices"`
}

type cdiDevice struct {
	Name           string        `json:"name"`
	ContainerEdits cdiEditsNodes `json:"containerEdits"`
}

type cdiEditsNodes struct {
	DeviceNodes []cdiDeviceNode `json:"deviceNodes"`
}

type cdiDeviceNode struct {
	Path        string `json:"path"`
	HostPath    string `json:"hostPath"`
	Type        string `json:"type"`
	Major       int64  `json:"major"`
	Minor       int64  `json:"minor"`
	Permissions string `json:"permissions"`
}

// DriverPath is where NVIDIA's driver puts card index's device node.
func DriverPath(index int) string { return fmt.Sprintf("/dev/nvidia%d", index) }

// WriteFakeCards makes a device node under devDir for each card of devices
// and writes the CDI spec that gives each device UUID its card's node, at
// DriverPath, to specDir. A MIG device gets its card's node, as with
// NVIDIA's driver.
func WriteFakeCards(devDir, specDir string, devices []Device) error {
	if err := os.MkdirAll(devDir, 0o755); err != nil {
		return err
	}
	if err := os.MkdirAll(specDir, 0o755); err != nil {
		return err
	}
	spec := cdiSpec{Version: "0.6.0", Kind: CDIKind}
	var made []int
	for _, d := range devices {
		host := filepath.Join(devDir, filepath.Base(DriverPath(d.Index)))
		if !slices.Contains(made, d.Index) {
			if err := unix.Mknod(host, unix.S_IFCHR|0o666, int(unix.Mkdev(1, 3))); err != nil && !errors.Is(err, os.ErrExist) {
				return fmt.Errorf("device node for card %d: %w", d.Index, err)
			}
			made = append(made, d.Index)
		}
		spec.Devices = append(spec.Devices, cdiDevice{Name: d.UUID, ContainerEdits: cdiEditsNodes{DeviceNodes: []cdiDeviceNode{{
			Path: DriverPath(d.Index), HostPath: host, Type: "c", Major: 1, Minor: 3, Permissions: "rw",
		}}}})
	}
	data, err := json.MarshalIndent(spec, "", "  ")
	if err != nil {
		return err
	}
	tmp := filepath.Join(specDir, "."+fakeSpecFile)
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, filepath.Join(specDir, fakeSpecFile))
}
