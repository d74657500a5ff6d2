package deviceplugin

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/status"
	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// fakeControl is the stand-in for nvidia-cuda-mps-control that real-0
// runs too: it logs the commands it is sent.
var fakeControl, _ = filepath.Abs(filepath.Join("..", "..", "test", "node", "fake-mps-control"))

func mpsBackend(t *testing.T, command string) (*MPS, *MPSControl) {
	t.Helper()
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte(`devices:
- {uuid: GPU-0, resource: nvidia.com/gpu, index: 0, memory: 16Gi}
- {uuid: GPU-1, resource: nvidia.com/gpu, index: 1, memory: 16Gi, unhealthy: XID 79}
- {uuid: MIG-2a, resource: nvidia.com/mig-1g.10gb, index: 2, parent: GPU-2, profile: 1g.10gb, memory: 10Gi}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	control := &MPSControl{Dir: t.TempDir(), Command: command}
	return &MPS{Backend: &Static{Path: inv}, Shares: 4, Resource: "nvidia.com/gpu.shared", Control: control}, control
}

// TestMPSShares: each whole card is served as its shares, with a quarter
// of its memory each and its health; MIG devices as they are; each card's
// daemon is started once and told its limits before any share is listed.
func TestMPSShares(t *testing.T) {
	m, control := mpsBackend(t, fakeControl)
	var got []Device
	for range 2 {
		var err error
		if got, err = m.Devices(); err != nil {
			t.Fatal(err)
		}
	}
	quarter := resource.MustParse("4Gi")
	var want []Device
	for _, card := range []struct {
		uuid, unhealthy string
		index           int
	}{{"GPU-0", "", 0}, {"GPU-1", "XID 79", 1}} {
		for k := range 4 {
			want = append(want, Device{UUID: card.uuid + "::" + string(rune('0'+k)), Resource: "nvidia.com/gpu.shared",
				Index: card.index, Memory: quarter, Parent: card.uuid, Shares: 4, Unhealthy: card.unhealthy})
		}
	}
	want = append(want, Device{UUID: "MIG-2a", Resource: "nvidia.com/mig-1g.10gb", Index: 2, Parent: "GPU-2", Profile: "1g.10gb", Memory: resource.MustParse("10Gi")})
	if diff := cmp.Diff(want, got, cmp.Comparer(func(a, b resource.Quantity) bool { return a.Cmp(b) == 0 })); diff != "" {
		t.Errorf("devices (-want +got):\n%s", diff)
	}
	for _, card := range []string{"GPU-0", "GPU-1"} {
		log, err := os.ReadFile(filepath.Join(control.LogDir(card), "control.log"))
		if err != nil {
			t.Fatal(err)
		}
		wantLog := "start daemon for " + card + "\nset_default_active_thread_percentage 25\nset_default_device_pinned_mem_limit 0 4096M\n"
		if string(log) != wantLog {
			t.Errorf("%s's daemon was told:\n%s\nwant:\n%s", card, log, wantLog)
		}
	}
}

// TestMPSWithoutDaemon: a card whose daemon does not start serves its
// shares unhealthy, saying why, so no container gets an unenforced share.
func TestMPSWithoutDaemon(t *testing.T) {
	m, _ := mpsBackend(t, filepath.Join(t.TempDir(), "nvidia-cuda-mps-control"))
	got, err := m.Devices()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(got[0].Unhealthy, "MPS control daemon: starting it for GPU-0: ") || !strings.Contains(got[0].Unhealthy, "no such file") {
		t.Errorf("share %s: unhealthy %q, want the daemon's failure", got[0].UUID, got[0].Unhealthy)
	}
}

// TestMPSWithoutMemory: a card whose memory the backend could not read
// has no limit to give its daemon, so its shares are unhealthy.
func TestMPSWithoutMemory(t *testing.T) {
	control := &MPSControl{Dir: t.TempDir(), Command: fakeControl}
	err := control.Configure(Device{UUID: "GPU-0"}, 4)
	if err == nil || !strings.Contains(err.Error(), "the memory of GPU-0 is not known") {
		t.Errorf("error %v, want the card's memory unknown", err)
	}
	if _, statErr := os.Stat(filepath.Join(control.LogDir("GPU-0"), "control.log")); statErr == nil {
		t.Errorf("the daemon was started without a memory limit to give it")
	}
}

func sharesPlugin(t *testing.T) *Plugin {
	t.Helper()
	m, control := mpsBackend(t, fakeControl)
	devices, err := m.Devices()
	if err != nil {
		t.Fatal(err)
	}
	p := newPlugin("nvidia.com/gpu.shared", "", true, control, nil, time.Second)
	p.SetDevices(slices.DeleteFunc(devices, func(d Device) bool { return d.Shares == 0 }))
	return p
}

// TestAllocateShare: a share is its card (by CDI and in the variable) with
// the card's pipe directory; two shares in one container are refused.
func TestAllocateShare(t *testing.T) {
	p := sharesPlugin(t)
	resp, err := p.Allocate(context.Background(), allocate("GPU-0::2"))
	if err != nil {
		t.Fatal(err)
	}
	want := &pluginapi.ContainerAllocateResponse{
		Envs:       map[string]string{VisibleDevicesEnv: "GPU-0", "CUDA_MPS_PIPE_DIRECTORY": MPSPipeMountPath},
		Mounts:     []*pluginapi.Mount{{ContainerPath: MPSPipeMountPath, HostPath: p.mps.PipeDir("GPU-0")}},
		CdiDevices: []*pluginapi.CDIDevice{{Name: "nvidia.com/gpu=GPU-0"}},
	}
	if got := resp.ContainerResponses[0]; !cmp.Equal(got, want, cmp.Comparer(func(a, b *pluginapi.ContainerAllocateResponse) bool {
		return a.String() == b.String()
	})) {
		t.Errorf("got %v\nwant %v", got, want)
	}
	if _, err := p.Allocate(context.Background(), allocate("GPU-0::0", "GPU-0::1")); status.Code(err) != codes.InvalidArgument {
		t.Errorf("two shares: %v, want InvalidArgument", err)
	}
}

func allocate(ids ...string) *pluginapi.AllocateRequest {
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
}

// TestPreferPacked: shares fill the card with the fewest free first, so
// four quarter shares share one card and the fifth takes another.
func TestPreferPacked(t *testing.T) {
	p := sharesPlugin(t)
	all := func(card string, from int) []string {
		var out []string
		for k := from; k < 4; k++ {
			out = append(out, card+"::"+string(rune('0'+k)))
		}
		return out
	}
	for _, tc := range []struct {
		name      string
		available []string
		want      []string
	}{
		{"all free: the lowest index", append(all("GPU-1", 0), all("GPU-0", 0)...), []string{"GPU-0::0"}},
		{"one card half taken", append(all("GPU-0", 0), all("GPU-1", 2)...), []string{"GPU-1::2"}},
		{"the last share of a card before a free card", append(all("GPU-0", 3), all("GPU-1", 0)...), []string{"GPU-0::3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := p.Choose(tc.available, nil, 1, ""); !slices.Equal(got, tc.want) {
				t.Errorf("got %v, want %v", got, tc.want)
			}
		})
	}
}
