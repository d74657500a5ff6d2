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

var _ Backend = &Static{}

// Devices reads the file.
func (s *Static) Devices() ([]Device, error) {
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
	return inv.Devices, nil
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
