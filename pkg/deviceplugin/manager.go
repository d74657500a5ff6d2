package deviceplugin

import (
	"context"
	"sync"
	"time"

	"k8s.io/klog/v2"
)

// Manager runs one Plugin per resource name the Backend's devices are
// served under, and passes every change of the devices on to them.
type Manager struct {
	// Backend lists the devices.
	Backend Backend
	// Dir is the kubelet's device-plugins directory,
	// /var/lib/kubelet/device-plugins on a node. Empty on a node without a
	// kubelet: the plugins are then called in-process only (the node
	// agent's --simulate).
	Dir string
	// CDI adds CDI device names (nvidia.com/gpu=<UUID>) to allocations.
	CDI bool
	// MPS runs the MPS daemons when Backend serves shares (an *MPS).
	MPS *MPSControl
	// Prefer chooses preferred allocations; nil keeps the default.
	Prefer PreferFunc
	// CheckInterval is how often each plugin looks for a kubelet restart;
	// half a second if zero.
	CheckInterval time.Duration
	// OnChange, if set, is called after every read of the devices.
	OnChange func()

	mu      sync.Mutex
	plugins map[string]*Plugin
	devices []Device
}

// Run serves until ctx is done. It fails only if the first read of the
// devices does.
func (m *Manager) Run(ctx context.Context) error {
	if m.CheckInterval == 0 {
		m.CheckInterval = 500 * time.Millisecond
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	if err := m.sync(ctx, &wg); err != nil {
		return err
	}
	err := m.Backend.Watch(ctx, func() {
		if err := m.sync(ctx, &wg); err != nil {
			// Keep serving what was last read.
			klog.FromContext(ctx).Error(err, "Reading the devices")
		}
	})
	<-ctx.Done()
	return err
}

// Devices is what the backend listed last.
func (m *Manager) Devices() []Device {
	m.mu.Lock()
	defer m.mu.Unlock()
	return append([]Device(nil), m.devices...)
}

func (m *Manager) sync(ctx context.Context, wg *sync.WaitGroup) error {
	devices, err := m.Backend.Devices()
	if err != nil {
		return err
	}
	if err := validate(devices); err != nil {
		return err
	}
	groups := byResource(devices)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.devices = devices
	if m.plugins == nil {
		m.plugins = map[string]*Plugin{}
	}
	for res, list := range groups {
		p, ok := m.plugins[res]
		if !ok {
			p = newPlugin(res, m.Dir, m.CDI, m.MPS, m.Prefer, m.CheckInterval)
			m.plugins[res] = p
			if m.Dir != "" {
				wg.Add(1)
				go func() {
					defer wg.Done()
					p.Serve(ctx)
				}()
			}
		}
		p.SetDevices(list)
	}
	// A resource whose devices are gone stays registered with none, so
	// the node's capacity of it drops to zero.
	for res, p := range m.plugins {
		if _, ok := groups[res]; !ok {
			p.SetDevices(nil)
		}
	}
	if m.OnChange != nil {
		m.OnChange()
	}
	return nil
}

// Plugin is the plugin of a resource name, nil if no device has it.
func (m *Manager) Plugin(resource string) *Plugin {
	m.mu.Lock()
	defer m.mu.Unlock()
	return m.plugins[resource]
}
