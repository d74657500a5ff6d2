package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"kiln.dev/kiln/pkg/deviceplugin/kubeletstub"
)

// Four cards, 0-2 and 1-3 linked by NVLink, and two MIG devices of card 3.
const inventory = `devices:
- {uuid: GPU-0, resource: nvidia.com/gpu, index: 0, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:1b:00.0", nvLinkPeers: [GPU-2]}
- {uuid: GPU-1, resource: nvidia.com/gpu, index: 1, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:43:00.0", nvLinkPeers: [GPU-3]}
- {uuid: GPU-2, resource: nvidia.com/gpu, index: 2, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:52:00.0", nvLinkPeers: [GPU-0]}
- {uuid: GPU-3, resource: nvidia.com/gpu, index: 3, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:61:00.0", nvLinkPeers: [GPU-1]}
- {uuid: MIG-3a, resource: nvidia.com/mig-1g.10gb, index: 4, parent: GPU-4, profile: 1g.10gb, memory: 10Gi}
- {uuid: MIG-3b, resource: nvidia.com/mig-1g.10gb, index: 4, parent: GPU-4, profile: 1g.10gb, memory: 10Gi}
`

func ids(devices []*pluginapi.Device) map[string]string {
	out := map[string]string{}
	for _, d := range devices {
		out[d.ID] = d.Health
	}
	return out
}

// TestPluginAgainstStubKubelet drives the plugins as the kubelet does:
// registration, ListAndWatch, GetPreferredAllocation with must-include
// devices, Allocate; a device failing in the inventory reaches the stream
// within a second; a kubelet restart is followed by a new registration.
func TestPluginAgainstStubKubelet(t *testing.T) {
	dir := t.TempDir()
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte(inventory), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet := kubeletstub.Start(t, dir)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	m := &Manager{Backend: &Static{Path: inv, Interval: 100 * time.Millisecond}, Dir: dir, CDI: true, CheckInterval: 100 * time.Millisecond}
	go func() { done <- m.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})

	regs := kubelet.Registrations(2)
	gpuReg, migReg := regs["nvidia.com/gpu"], regs["nvidia.com/mig-1g.10gb"]
	if gpuReg == nil || migReg == nil || !gpuReg.Options.GetPreferredAllocationAvailable {
		t.Fatalf("registrations %v", regs)
	}
	gpus := kubelet.Dial(gpuReg)
	opts, err := gpus.GetDevicePluginOptions(ctx, &pluginapi.Empty{})
	if err != nil || !opts.GetPreferredAllocationAvailable || opts.PreStartRequired {
		t.Fatalf("options %v, %v", opts, err)
	}
	stream, err := gpus.ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	first, err := stream.Recv()
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{"GPU-0": pluginapi.Healthy, "GPU-1": pluginapi.Healthy, "GPU-2": pluginapi.Healthy, "GPU-3": pluginapi.Healthy}
	if got := ids(first.Devices); !mapsEqual(got, want) {
		t.Fatalf("ListAndWatch sent %v, want %v", got, want)
	}
	migStream, err := kubelet.Dial(migReg).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if m, err := migStream.Recv(); err != nil || len(m.Devices) != 2 {
		t.Fatalf("MIG devices %v, %v; want MIG-3a and MIG-3b", m, err)
	}

	// The kubelet asks which 2 cards, GPU-1 included: its NVLink peer.
	pref, err := gpus.GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
		AvailableDeviceIDs: []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, MustIncludeDeviceIDs: []string{"GPU-1"}, AllocationSize: 2,
	}}})
	if err != nil || !slices.Equal(pref.ContainerResponses[0].DeviceIDs, []string{"GPU-1", "GPU-3"}) {
		t.Fatalf("preferred %v, %v; want GPU-1 and its peer GPU-3", pref, err)
	}
	alloc, err := gpus.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-1", "GPU-3"}}}})
	if err != nil {
		t.Fatal(err)
	}
	c := alloc.ContainerResponses[0]
	if c.Envs[VisibleDevicesEnv] != "GPU-1,GPU-3" || len(c.CdiDevices) != 2 || c.CdiDevices[0].Name != "nvidia.com/gpu=GPU-1" {
		t.Fatalf("allocation %v", c)
	}
	if _, err := gpus.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"MIG-3a"}}}}); status.Code(err) != codes.InvalidArgument {
		t.Fatalf("allocating another resource's device: %v, want InvalidArgument", err)
	}

	// GPU-2 fails in the inventory: the stream says so within a second.
	if err := os.WriteFile(inv, []byte(strings.Replace(inventory, `nvLinkPeers: [GPU-0]}`, `nvLinkPeers: [GPU-0], unhealthy: "XID 79: fell off the bus"}`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	failed := time.Now()
	next := make(chan *pluginapi.ListAndWatchResponse, 1)
	go func() {
		r, err := stream.Recv()
		if err == nil {
			next <- r
		}
	}()
	select {
	case r := <-next:
		t.Logf("the failure reached the stream in %v", time.Since(failed))
		if got := ids(r.Devices); got["GPU-2"] != pluginapi.Unhealthy || got["GPU-0"] != pluginapi.Healthy {
			t.Fatalf("after GPU-2 failed the stream sent %v", got)
		}
	case <-time.After(time.Second):
		t.Fatal("GPU-2's failure did not reach the stream within a second")
	}
	if _, err := gpus.Allocate(ctx, &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: []string{"GPU-2"}}}}); status.Code(err) != codes.FailedPrecondition {
		t.Fatalf("allocating the failed device: %v, want FailedPrecondition", err)
	}

	// The kubelet restarts: both plugins register again, and serve.
	kubelet.Restart()
	regs = kubelet.Registrations(2)
	again, err := kubelet.Dial(regs["nvidia.com/gpu"]).ListAndWatch(ctx, &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	if r, err := again.Recv(); err != nil || ids(r.Devices)["GPU-2"] != pluginapi.Unhealthy {
		t.Fatalf("after the restart: %v, %v", r, err)
	}
}

func mapsEqual(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

func TestPreferLinked(t *testing.T) {
	p := newPlugin("nvidia.com/gpu", "", false, nil, nil, time.Second)
	p.SetDevices([]Device{
		{UUID: "GPU-0", Index: 0, NVLinkPeers: []string{"GPU-2", "GPU-3"}},
		{UUID: "GPU-1", Index: 1},
		{UUID: "GPU-2", Index: 2, NVLinkPeers: []string{"GPU-0", "GPU-3"}},
		{UUID: "GPU-3", Index: 3, NVLinkPeers: []string{"GPU-0", "GPU-2"}},
	})
	for _, tc := range []struct {
		name        string
		available   []string
		mustInclude []string
		size        int
		want        []string
	}{
		{"lowest index without links to follow", []string{"GPU-3", "GPU-1", "GPU-0"}, nil, 1, []string{"GPU-0"}},
		{"the peers of the first card", []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, nil, 3, []string{"GPU-0", "GPU-2", "GPU-3"}},
		{"must-include first, then its peers", []string{"GPU-0", "GPU-1", "GPU-2", "GPU-3"}, []string{"GPU-3"}, 2, []string{"GPU-3", "GPU-0"}},
		{"only what is available", []string{"GPU-1", "GPU-2"}, []string{"GPU-2"}, 2, []string{"GPU-2", "GPU-1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.preferLinked(tc.available, tc.mustInclude, tc.size); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}

func TestStaticRefusesABadInventory(t *testing.T) {
	for _, tc := range []struct{ name, file, want string }{
		{"no uuid", "devices: [{resource: nvidia.com/gpu}]", "devices[0]: uuid is required"},
		{"no resource", "devices: [{uuid: GPU-0}]", "devices[0] (GPU-0): resource is required"},
		{"twice", "devices: [{uuid: GPU-0, resource: r}, {uuid: GPU-0, resource: r}]", "devices[1]: uuid GPU-0 is listed twice"},
		{"an unknown field", "devices: [{uuid: GPU-0, resource: r, helth: bad}]", `unknown field "helth"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "inventory.yaml")
			if err := os.WriteFile(path, []byte(tc.file), 0o644); err != nil {
				t.Fatal(err)
			}
			if _, err := (&Static{Path: path}).Devices(); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}
