//go:build cgo

package deviceplugin

import (
	"context"
	"fmt"
	"math"
	"slices"
	"strings"
	"sync"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/klog/v2"
)

// applicationXIDs are XIDs an application causes (a bad kernel, an
// out-of-memory, a reset it asked for): they say nothing about the card.
// NVIDIA's device plugin skips the same ones.
var applicationXIDs = map[uint64]bool{13: true, 31: true, 43: true, 45: true, 68: true, 109: true}

// NVML is the Backend of a node with NVIDIA's driver: cards, their MIG
// devices (served in the mixed strategy, nvidia.com/mig-<profile>), PCI
// addresses, NVLink peers, and health from XID events.
type NVML struct {
	lib nvml.Interface

	mu        sync.Mutex
	unhealthy map[string]string // card UUID -> why
}

var (
	_ Backend = &NVML{}
	_ Sampler = &NVML{}
)

// NewNVMLFromSystem loads the driver's libnvidia-ml. It is the only call
// that needs the driver; the binary builds and starts without it.
func NewNVMLFromSystem() (Backend, error) {
	return NewNVML(nvml.New())
}

// NewNVML starts NVML through lib (the library, or go-nvml's mock).
func NewNVML(lib nvml.Interface) (*NVML, error) {
	if ret := lib.Init(); ret != nvml.SUCCESS {
		return nil, fmt.Errorf("starting NVML: %s; is the NVIDIA driver installed on this node?", lib.ErrorString(ret))
	}
	return &NVML{lib: lib, unhealthy: map[string]string{}}, nil
}

// Devices lists the cards, and the MIG devices of cards in MIG mode
// instead of the card itself.
func (n *NVML) Devices() ([]Device, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, n.err("counting devices", ret)
	}
	type card struct {
		dev  nvml.Device
		info Device
	}
	cards := make([]card, 0, count)
	byBus := map[string]string{}
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			return nil, n.err(fmt.Sprintf("device %d", i), ret)
		}
		info, err := n.card(d, i)
		if err != nil {
			return nil, err
		}
		byBus[info.PCIBusID] = info.UUID
		cards = append(cards, card{d, info})
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	var out []Device
	for _, c := range cards {
		c.info.NVLinkPeers = peers(c.dev, byBus)
		c.info.Unhealthy = n.unhealthy[c.info.UUID]
		migs, err := n.migDevices(c.dev, c.info)
		if err != nil {
			return nil, err
		}
		if migs == nil {
			out = append(out, c.info)
		}
		out = append(out, migs...)
	}
	return out, nil
}

func (n *NVML) card(d nvml.Device, i int) (Device, error) {
	uuid, ret := d.GetUUID()
	if ret != nvml.SUCCESS {
		return Device{}, n.err(fmt.Sprintf("device %d: uuid", i), ret)
	}
	info := Device{UUID: uuid, Resource: "nvidia.com/gpu", Index: i}
	if idx, ret := d.GetIndex(); ret == nvml.SUCCESS {
		info.Index = idx
	}
	if name, ret := d.GetName(); ret == nvml.SUCCESS {
		// As gpu-feature-discovery labels it: NVIDIA-A100-SXM4-40GB.
		info.Model = strings.ReplaceAll(name, " ", "-")
	}
	if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
		info.Memory = *resource.NewQuantity(int64(mem.Total), resource.BinarySI)
	}
	if pci, ret := d.GetPciInfo(); ret == nvml.SUCCESS {
		info.PCIBusID = busID(pci.BusId[:])
	}
	return info, nil
}

// Sample reads each whole card's utilization (NVML's coarse rate: the
// share of its last sample period a kernel ran) and memory in use. A card
// in MIG mode has no such rate and is left out, as is a card NVML cannot
// read now; its MIG devices need GPM, which this does not read yet.
func (n *NVML) Sample() (map[string]Usage, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, n.err("counting devices", ret)
	}
	out := make(map[string]Usage, count)
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if current, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		rates, ret := d.GetUtilizationRates()
		if ret != nvml.SUCCESS {
			continue
		}
		u := Usage{Utilization: int32(min(rates.Gpu, 100))}
		if mem, ret := d.GetMemoryInfo(); ret == nvml.SUCCESS {
			u.MemoryUsed = *resource.NewQuantity(int64(mem.Used), resource.BinarySI)
		}
		out[uuid] = u
	}
	return out, nil
}

// migDevices lists a card's MIG devices; nil when MIG is off.
func (n *NVML) migDevices(d nvml.Device, parent Device) ([]Device, error) {
	current, _, ret := d.GetMigMode()
	if ret != nvml.SUCCESS || current != nvml.DEVICE_MIG_ENABLE {
		return nil, nil
	}
	slots, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return nil, n.err(parent.UUID+": MIG device count", ret)
	}
	out := []Device{}
	for i := range slots {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret == nvml.ERROR_NOT_FOUND || ret == nvml.ERROR_INVALID_ARGUMENT {
			continue // an empty slot
		}
		if ret != nvml.SUCCESS {
			return nil, n.err(fmt.Sprintf("%s: MIG device %d", parent.UUID, i), ret)
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			return nil, n.err(fmt.Sprintf("%s: MIG device %d uuid", parent.UUID, i), ret)
		}
		attrs, ret := m.GetAttributes()
		if ret != nvml.SUCCESS {
			return nil, n.err(uuid+": attributes", ret)
		}
		profile := fmt.Sprintf("%dg.%dgb", attrs.GpuInstanceSliceCount, int(math.Ceil(float64(attrs.MemorySizeMB)/1024)))
		out = append(out, Device{
			UUID: uuid, Resource: "nvidia.com/mig-" + profile, Profile: profile,
			Index: parent.Index, Model: parent.Model, PCIBusID: parent.PCIBusID, Parent: parent.UUID,
			Memory:    *resource.NewQuantity(int64(attrs.MemorySizeMB)*1024*1024, resource.BinarySI),
			Unhealthy: parent.Unhealthy,
		})
	}
	return out, nil
}

// peers are the cards at the other end of the card's active NVLinks.
func peers(d nvml.Device, byBus map[string]string) []string {
	var out []string
	for link := range nvml.NVLINK_MAX_LINKS {
		state, ret := d.GetNvLinkState(link)
		if ret != nvml.SUCCESS {
			break // no more links, or none at all
		}
		if state != nvml.FEATURE_ENABLED {
			continue
		}
		pci, ret := d.GetNvLinkRemotePciInfo(link)
		if ret != nvml.SUCCESS {
			continue
		}
		if uuid, ok := byBus[busID(pci.BusId[:])]; ok && !slices.Contains(out, uuid) {
			out = append(out, uuid)
		}
	}
	return out
}

func busID(raw []int8) string {
	var b strings.Builder
	for _, c := range raw {
		if c == 0 {
			break
		}
		b.WriteByte(byte(c))
	}
	return strings.ToLower(b.String())
}

// Watch waits for XID events: a card that reports a critical one, other
// than those applications cause, is unhealthy from then on (with its MIG
// devices) until the agent restarts, as with NVIDIA's plugin.
func (n *NVML) Watch(ctx context.Context, changed func()) error {
	set, ret := n.lib.EventSetCreate()
	if ret != nvml.SUCCESS {
		return n.err("creating an event set", ret)
	}
	defer set.Free()
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return n.err("counting devices", ret)
	}
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		if ret := d.RegisterEvents(nvml.EventTypeXidCriticalError, set); ret != nvml.SUCCESS {
			// Not every card reports events; it stays healthy.
			klog.FromContext(ctx).Info("A device reports no XID events", "index", i, "error", n.lib.ErrorString(ret))
		}
	}
	for ctx.Err() == nil {
		e, ret := set.Wait(1000)
		if ret == nvml.ERROR_TIMEOUT || ret != nvml.SUCCESS || e.EventType != nvml.EventTypeXidCriticalError || applicationXIDs[e.EventData] {
			continue
		}
		uuid, ret := e.Device.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		n.mu.Lock()
		_, was := n.unhealthy[uuid]
		if !was {
			n.unhealthy[uuid] = fmt.Sprintf("XID %d", e.EventData)
		}
		n.mu.Unlock()
		if !was {
			klog.FromContext(ctx).Info("A device failed", "uuid", uuid, "xid", e.EventData)
			changed()
		}
	}
	return nil
}

func (n *NVML) err(what string, ret nvml.Return) error {
	return fmt.Errorf("NVML: %s: %s", what, n.lib.ErrorString(ret))
}
