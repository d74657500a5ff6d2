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

	// gpm holds, per card or MIG device (by UUID), the GPM sample of the
	// last Sample: GPM's figures are of the activity between two. Only
	// Sample uses it, under gpmMu.
	gpmMu sync.Mutex
	gpm   map[string]nvml.GpmSample
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

// Sample reads each device's utilization and memory in use. Where the
// card supports GPM (Hopper and later), utilization is GPM's graphics
// activity between this sample and the last, for a whole card or for each
// MIG device (by its GPU instance); elsewhere, and on a card's first
// sample, the coarse rate (the share of its last sample period a kernel
// ran). The MIG devices of a card without GPM have no figure and are left
// out, as is a device NVML cannot read now.
func (n *NVML) Sample() (map[string]Usage, error) {
	count, ret := n.lib.DeviceGetCount()
	if ret != nvml.SUCCESS {
		return nil, n.err("counting devices", ret)
	}
	n.gpmMu.Lock()
	defer n.gpmMu.Unlock()
	if n.gpm == nil {
		n.gpm = map[string]nvml.GpmSample{}
	}
	seen := map[string]bool{}
	out := make(map[string]Usage, count)
	for i := range count {
		d, ret := n.lib.DeviceGetHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := d.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		support, ret := d.GpmQueryDeviceSupport()
		gpm := ret == nvml.SUCCESS && support.IsSupportedDevice != 0
		if current, _, ret := d.GetMigMode(); ret == nvml.SUCCESS && current == nvml.DEVICE_MIG_ENABLE {
			// A MIG device has no utilization rate of its own; GPM
			// measures each GPU instance, where the card supports it.
			if gpm {
				n.sampleMIG(d, out, seen)
			}
			continue
		}
		utilization, ok := int32(0), false
		if gpm {
			seen[uuid] = true
			utilization, ok = n.gpmUtilization(uuid, d.GpmSampleGet)
		}
		if !ok {
			// Without GPM, or before its second sample: the coarse rate,
			// the share of time a kernel ran.
			rates, ret := d.GetUtilizationRates()
			if ret != nvml.SUCCESS {
				continue
			}
			utilization = int32(min(rates.Gpu, 100))
		}
		out[uuid] = Usage{Utilization: utilization, MemoryUsed: memoryUsed(d)}
	}
	for key, s := range n.gpm {
		if !seen[key] {
			s.Free()
			delete(n.gpm, key)
		}
	}
	return out, nil
}

// sampleMIG samples the MIG devices of card d through GPM, by their GPU
// instance. A device reports from its second sample on.
func (n *NVML) sampleMIG(d nvml.Device, out map[string]Usage, seen map[string]bool) {
	slots, ret := d.GetMaxMigDeviceCount()
	if ret != nvml.SUCCESS {
		return
	}
	for i := range slots {
		m, ret := d.GetMigDeviceHandleByIndex(i)
		if ret != nvml.SUCCESS {
			continue
		}
		uuid, ret := m.GetUUID()
		if ret != nvml.SUCCESS {
			continue
		}
		gi, ret := m.GetGpuInstanceId()
		if ret != nvml.SUCCESS {
			continue
		}
		seen[uuid] = true
		utilization, ok := n.gpmUtilization(uuid, func(s nvml.GpmSample) nvml.Return { return d.GpmMigSampleGet(gi, s) })
		if !ok {
			continue
		}
		out[uuid] = Usage{Utilization: utilization, MemoryUsed: memoryUsed(m)}
	}
}

// memoryUsed is the device memory in use on a card or MIG device; zero
// when NVML cannot say.
func memoryUsed(d nvml.Device) resource.Quantity {
	mem, ret := d.GetMemoryInfo()
	if ret != nvml.SUCCESS {
		return resource.Quantity{}
	}
	return *resource.NewQuantity(int64(mem.Used), resource.BinarySI)
}

// gpmUtilization takes a GPM sample of key with get and returns the
// graphics engine's activity, in percent, since the last one; false on
// the first sample or when GPM cannot say. The caller holds gpmMu.
func (n *NVML) gpmUtilization(key string, get func(nvml.GpmSample) nvml.Return) (int32, bool) {
	cur, ret := n.lib.GpmSampleAlloc()
	if ret != nvml.SUCCESS {
		return 0, false
	}
	if get(cur) != nvml.SUCCESS {
		cur.Free()
		return 0, false
	}
	prev := n.gpm[key]
	n.gpm[key] = cur
	if prev == nil {
		return 0, false
	}
	defer prev.Free()
	metrics := nvml.GpmMetricsGetType{NumMetrics: 1, Sample1: prev, Sample2: cur}
	metrics.Metrics[0].MetricId = uint32(nvml.GPM_METRIC_GRAPHICS_UTIL)
	if n.lib.GpmMetricsGet(&metrics) != nvml.SUCCESS || nvml.Return(metrics.Metrics[0].NvmlReturn) != nvml.SUCCESS {
		return 0, false
	}
	return int32(math.Round(min(max(metrics.Metrics[0].Value, 0), 100))), true
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
