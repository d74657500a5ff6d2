//go:build cgo

package deviceplugin

import (
	"context"
	"fmt"
	"maps"
	"strings"
	"testing"
	"time"

	"github.com/NVIDIA/go-nvml/pkg/nvml"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/dgxa100"
	"github.com/NVIDIA/go-nvml/pkg/nvml/mock/server"
)

// dgx is go-nvml's DGX A100 mock with what it leaves out filled in as a
// real one reports it: PCI bus IDs, and NVLinks between cards 0-1 and
// 2-3 (the mock reports none).
func dgx(t *testing.T) *server.Server {
	t.Helper()
	s := dgxa100.New()
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		bus := fmt.Sprintf("0000:%02x:00.0", 0x10+i)
		dev.GetPciInfoFunc = func() (nvml.PciInfo, nvml.Return) {
			var p nvml.PciInfo
			for j, c := range bus {
				p.BusId[j] = int8(c)
			}
			return p, nvml.SUCCESS
		}
		peer := i ^ 1
		dev.GetNvLinkStateFunc = func(link int) (nvml.EnableState, nvml.Return) {
			if i > 3 || link > 0 {
				return 0, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.FEATURE_ENABLED, nvml.SUCCESS
		}
		dev.GetNvLinkRemotePciInfoFunc = func(int) (nvml.PciInfo, nvml.Return) {
			return s.Devices[peer].GetPciInfo()
		}
		// An A100 has no GPM (Hopper and later do).
		dev.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
			return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION}, nvml.SUCCESS
		}
	}
	return s
}

func TestNVMLEnumeratesADGXA100(t *testing.T) {
	n, err := NewNVML(dgx(t))
	if err != nil {
		t.Fatal(err)
	}
	devices, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if len(devices) != 8 {
		t.Fatalf("%d devices, want the 8 cards", len(devices))
	}
	seen := map[string]bool{}
	for i, d := range devices {
		if d.Resource != "nvidia.com/gpu" || d.Index != i || !strings.HasPrefix(d.UUID, "GPU-") || seen[d.UUID] || !d.Healthy() {
			t.Errorf("device %d: %+v", i, d)
		}
		seen[d.UUID] = true
		if want := fmt.Sprintf("0000:%02x:00.0", 0x10+i); d.PCIBusID != want {
			t.Errorf("device %d: PCI bus ID %q, want %q", i, d.PCIBusID, want)
		}
		// The mock names its cards "Mock NVIDIA A100-SXM4-40GB".
		if d.Model != "Mock-NVIDIA-A100-SXM4-40GB" || d.Memory.String() != "40Gi" {
			t.Errorf("device %d: model %q, memory %s", i, d.Model, d.Memory.String())
		}
	}
	if p := devices[0].NVLinkPeers; len(p) != 1 || p[0] != devices[1].UUID {
		t.Errorf("card 0's NVLink peers %v, want card 1", p)
	}
	if p := devices[5].NVLinkPeers; len(p) != 0 {
		t.Errorf("card 5's NVLink peers %v, want none", p)
	}
}

// migCard turns card i of the mock into a card in MIG mode with two
// 1g.5gb devices and one 3g.20gb, as NVML reports them.
func migCard(s *server.Server, i int) []string {
	dev := s.Devices[i].(*server.Device)
	dev.GetMigModeFunc = func() (int, int, nvml.Return) { return nvml.DEVICE_MIG_ENABLE, nvml.DEVICE_MIG_ENABLE, nvml.SUCCESS }
	type mig struct {
		uuid          string
		slices, memMB int
	}
	migs := []mig{{"MIG-a", 1, 4864}, {"MIG-b", 1, 4864}, {"MIG-c", 3, 19968}}
	dev.GetMaxMigDeviceCountFunc = func() (int, nvml.Return) { return 7, nvml.SUCCESS }
	dev.GetMigDeviceHandleByIndexFunc = func(j int) (nvml.Device, nvml.Return) {
		if j >= len(migs) {
			return nil, nvml.ERROR_NOT_FOUND
		}
		m := migs[j]
		return &mock.Device{
			GetUUIDFunc: func() (string, nvml.Return) { return m.uuid, nvml.SUCCESS },
			GetAttributesFunc: func() (nvml.DeviceAttributes, nvml.Return) {
				return nvml.DeviceAttributes{GpuInstanceSliceCount: uint32(m.slices), MemorySizeMB: uint64(m.memMB)}, nvml.SUCCESS
			},
			// GPU instances 1, 2 and 3; j GiB in use.
			GetGpuInstanceIdFunc: func() (int, nvml.Return) { return j + 1, nvml.SUCCESS },
			GetMemoryInfoFunc: func() (nvml.Memory, nvml.Return) {
				return nvml.Memory{Total: uint64(m.memMB) << 20, Used: uint64(j) << 30}, nvml.SUCCESS
			},
		}, nvml.SUCCESS
	}
	return []string{"MIG-a", "MIG-b", "MIG-c"}
}

func TestNVMLMixedMIG(t *testing.T) {
	s := dgx(t)
	migCard(s, 7)
	n, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	groups := byResource(devices)
	if len(groups["nvidia.com/gpu"]) != 7 {
		t.Errorf("%d whole cards, want 7: card 7 is in MIG mode", len(groups["nvidia.com/gpu"]))
	}
	small, large := groups["nvidia.com/mig-1g.5gb"], groups["nvidia.com/mig-3g.20gb"]
	if len(small) != 2 || len(large) != 1 {
		t.Fatalf("MIG devices %v", groups)
	}
	card7, _ := s.Devices[7].GetUUID()
	for _, d := range append(small, large...) {
		if d.Parent != card7 || d.Index != 7 || !strings.HasPrefix(d.UUID, "MIG-") {
			t.Errorf("MIG device %+v, want one of card 7 (%s)", d, card7)
		}
	}
	if large[0].Memory.String() != "19968Mi" || large[0].Profile != "3g.20gb" {
		t.Errorf("3g.20gb device %+v", large[0])
	}
}

// An XID event marks its card, and the MIG devices cut from it,
// unhealthy; an XID an application causes does not.
func TestNVMLHealthEvents(t *testing.T) {
	s := dgx(t)
	migCard(s, 7)
	events := make(chan nvml.EventData, 4)
	s.EventSetCreateFunc = func() (nvml.EventSet, nvml.Return) {
		return &mock.EventSet{
			WaitFunc: func(timeout uint32) (nvml.EventData, nvml.Return) {
				select {
				case e := <-events:
					return e, nvml.SUCCESS
				case <-time.After(time.Duration(timeout) * time.Millisecond):
					return nvml.EventData{}, nvml.ERROR_TIMEOUT
				}
			},
			FreeFunc: func() nvml.Return { return nvml.SUCCESS },
		}, nvml.SUCCESS
	}
	registered := 0
	for _, d := range s.Devices {
		d.(*server.Device).RegisterEventsFunc = func(types uint64, _ nvml.EventSet) nvml.Return {
			if types&nvml.EventTypeXidCriticalError != 0 {
				registered++
			}
			return nvml.SUCCESS
		}
	}
	n, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	changed := make(chan struct{}, 4)
	go func() { _ = n.Watch(ctx, func() { changed <- struct{}{} }) }()

	events <- nvml.EventData{Device: s.Devices[2], EventType: nvml.EventTypeXidCriticalError, EventData: 13} // an application's
	events <- nvml.EventData{Device: s.Devices[3], EventType: nvml.EventTypeXidCriticalError, EventData: 79} // fell off the bus
	events <- nvml.EventData{Device: s.Devices[7], EventType: nvml.EventTypeXidCriticalError, EventData: 48} // double-bit ECC
	for range 2 {
		select {
		case <-changed:
		case <-time.After(10 * time.Second):
			t.Fatal("no change reported for the XID events")
		}
	}
	if registered != 8 {
		t.Errorf("XID events registered on %d cards, want 8", registered)
	}
	devices, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range devices {
		want := ""
		switch {
		case d.Index == 3:
			want = "XID 79"
		case d.Index == 7:
			want = "XID 48"
		}
		if d.Unhealthy != want {
			t.Errorf("device %s (index %d): unhealthy %q, want %q", d.UUID, d.Index, d.Unhealthy, want)
		}
	}
}

func TestNVMLWithoutTheDriver(t *testing.T) {
	lib := &mock.Interface{
		InitFunc:        func() nvml.Return { return nvml.ERROR_LIBRARY_NOT_FOUND },
		ErrorStringFunc: func(nvml.Return) string { return "NVML Shared Library Not Found" },
	}
	if _, err := NewNVML(lib); err == nil || !strings.Contains(err.Error(), "is the NVIDIA driver installed") {
		t.Fatalf("error %v", err)
	}
}

// TestNVMLSample: each whole card's utilization and memory in use, as the
// mock reports them; a card that cannot say is left out, not made idle.
func TestNVMLSample(t *testing.T) {
	s := dgx(t)
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) {
			if i == 7 {
				return nvml.Utilization{}, nvml.ERROR_NOT_SUPPORTED
			}
			return nvml.Utilization{Gpu: uint32(10 * i), Memory: 0}, nvml.SUCCESS
		}
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) {
			return nvml.Memory{Total: 40 << 30, Used: uint64(i) << 30}, nvml.SUCCESS
		}
	}
	n, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	got, err := n.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 7 {
		t.Fatalf("%d cards sampled, want 7 (card 7 cannot say): %v", len(got), got)
	}
	for i, d := range devices[:7] {
		u, ok := got[d.UUID]
		if !ok || u.Utilization != int32(10*i) || u.MemoryUsed.Value() != int64(i)<<30 {
			t.Errorf("card %d: %+v, want utilization %d and %d GiB in use", i, u, 10*i, i)
		}
	}
}

// TestNVMLSampleGPM: cards that support GPM report its graphics activity
// between two samples, each MIG device of such a card by its GPU
// instance, from the second sample on (the coarse rate, for a card, on
// the first); the other cards the coarse rate; and every GPM sample is
// freed once the next has replaced it.
func TestNVMLSampleGPM(t *testing.T) {
	s := dgx(t)
	migs := migCard(s, 7)
	type stamp struct{ card, gi int }
	stamps := map[nvml.GpmSample]stamp{}
	freed := 0
	s.GpmSampleAllocFunc = func() (nvml.GpmSample, nvml.Return) {
		smp := &mock.GpmSample{}
		smp.FreeFunc = func() nvml.Return { freed++; delete(stamps, smp); return nvml.SUCCESS }
		return smp, nvml.SUCCESS
	}
	s.GpmMetricsGetFunc = func(m *nvml.GpmMetricsGetType) nvml.Return {
		a, ok1 := stamps[m.Sample1]
		b, ok2 := stamps[m.Sample2]
		if !ok1 || !ok2 || a != b || m.NumMetrics != 1 || m.Metrics[0].MetricId != uint32(nvml.GPM_METRIC_GRAPHICS_UTIL) {
			t.Errorf("GpmMetricsGet of samples %+v and %+v, metric %d", a, b, m.Metrics[0].MetricId)
			return nvml.ERROR_INVALID_ARGUMENT
		}
		// Card i is 50+i% busy; GPU instance g of card 7, 20*g%.
		m.Metrics[0].Value, m.Metrics[0].NvmlReturn = float64(50+b.card), uint32(nvml.SUCCESS)
		if b.gi > 0 {
			m.Metrics[0].Value = float64(20 * b.gi)
		}
		return nvml.SUCCESS
	}
	for i, d := range s.Devices {
		dev := d.(*server.Device)
		dev.GetUtilizationRatesFunc = func() (nvml.Utilization, nvml.Return) { return nvml.Utilization{Gpu: uint32(10 * i)}, nvml.SUCCESS }
		dev.GetMemoryInfoFunc = func() (nvml.Memory, nvml.Return) { return nvml.Memory{Total: 40 << 30}, nvml.SUCCESS }
		if i < 4 || i == 7 {
			dev.GpmQueryDeviceSupportFunc = func() (nvml.GpmSupport, nvml.Return) {
				return nvml.GpmSupport{Version: nvml.GPM_SUPPORT_VERSION, IsSupportedDevice: 1}, nvml.SUCCESS
			}
		}
		dev.GpmSampleGetFunc = func(smp nvml.GpmSample) nvml.Return { stamps[smp] = stamp{card: i}; return nvml.SUCCESS }
		dev.GpmMigSampleGetFunc = func(gi int, smp nvml.GpmSample) nvml.Return {
			stamps[smp] = stamp{card: i, gi: gi}
			return nvml.SUCCESS
		}
	}
	n, err := NewNVML(s)
	if err != nil {
		t.Fatal(err)
	}
	devices, err := n.Devices()
	if err != nil {
		t.Fatal(err)
	}
	utilization := func(got map[string]Usage) map[string]int32 {
		out := map[string]int32{}
		for uuid, u := range got {
			out[uuid] = u.Utilization
		}
		return out
	}
	want := map[string]int32{}
	for i, d := range devices[:7] {
		want[d.UUID] = int32(10 * i)
	}
	first, err := n.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if got := utilization(first); !maps.Equal(got, want) {
		t.Errorf("first sample %v, want the coarse rates of the 7 whole cards and no MIG device: %v", got, want)
	}
	for i, d := range devices[:4] {
		want[d.UUID] = int32(50 + i)
	}
	for g, uuid := range migs {
		want[uuid] = int32(20 * (g + 1))
	}
	second, err := n.Sample()
	if err != nil {
		t.Fatal(err)
	}
	if got := utilization(second); !maps.Equal(got, want) {
		t.Errorf("second sample %v, want GPM's on cards 0-3 and the MIG devices: %v", got, want)
	}
	if m := second["MIG-c"].MemoryUsed; m.Value() != 2<<30 {
		t.Errorf("MIG-c memory used %s, want 2Gi", m.String())
	}
	// Cards 0-3 and three MIG devices: seven samples of the first round.
	if freed != 7 || len(stamps) != 7 {
		t.Errorf("%d samples freed, %d held; want 7 and 7", freed, len(stamps))
	}
}
