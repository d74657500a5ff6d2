package deviceplugin

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"time"

	"sigs.k8s.io/yaml"
)

// Inventory is the static inventory file of one node.
type Inventory struct {
	Devices []Device `json:"devices"`
	// Usage is what each device is doing, by UUID: how a test makes a
	// device busy or idle. A device not listed is idle.
	Usage map[string]Usage `json:"usage,omitempty"`
}

// Static is the Backend of a node without NVML: a simulated node, or a
// test. Its devices are those of an inventory file, read again whenever
// the file changes; editing a device's "unhealthy" there is how a device
// fails.
type Static struct {
	// Path of the inventory file (YAML).
	Path string
	// Interval between looks at the file; a second if zero.
	Interval time.Duration
}

var (
	_ Backend = &Static{}
	_ Sampler = &Static{}
)

// Devices reads the file.
func (s *Static) Devices() ([]Device, error) {
	inv, err := s.read()
	if err != nil {
		return nil, err
	}
	return inv.Devices, nil
}

// Sample reads the file's usage: every device of the inventory, idle
// where the file says nothing of it.
func (s *Static) Sample() (map[string]Usage, error) {
	inv, err := s.read()
	if err != nil {
		return nil, err
	}
	out := make(map[string]Usage, len(inv.Devices))
	for _, d := range inv.Devices {
		u, ok := inv.Usage[d.UUID]
		if ok && (u.Utilization < 0 || u.Utilization > 100) {
			return nil, fmt.Errorf("inventory %s: usage of %s: utilization %d is not a percentage", s.Path, d.UUID, u.Utilization)
		}
		out[d.UUID] = u
	}
	return out, nil
}

func (s *Static) read() (*Inventory, error) {
	data, err := os.ReadFile(s.Path)
	if err != nil {
		return nil, err
	}
	var inv Inventory
	if err := yaml.UnmarshalStrict(data, &inv); err != nil {
		return nil, fmt.Errorf("inventory %s: %w", s.Path, err)
	}
	if err := validate(inv.Devices); err != nil {
		return nil, fmt.Errorf("inventory %s: %w", s.Path, err)
	}
	return &inv, nil
}

// Watch calls changed when the file's content changes.
func (s *Static) Watch(ctx context.Context, changed func()) error {
	interval := s.Interval
	if interval == 0 {
		interval = time.Second
	}
	last, _ := os.ReadFile(s.Path)
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		cur, err := os.ReadFile(s.Path)
		if err != nil || bytes.Equal(cur, last) {
			continue
		}
		last = cur
		changed()
	}
}
