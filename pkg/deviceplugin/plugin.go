package deviceplugin

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// KubeletSocketName is the kubelet's Registration socket in the
// device-plugins directory.
const KubeletSocketName = "kubelet.sock"

// VisibleDevicesEnv is what the NVIDIA container runtime reads to expose
// the allocated devices to a container, by UUID.
const VisibleDevicesEnv = "NVIDIA_VISIBLE_DEVICES"

// CDIKind is the CDI kind of NVIDIA's devices: whole cards and MIG devices
// are both nvidia.com/gpu=<UUID>.
const CDIKind = "nvidia.com/gpu"

// PreferFunc chooses size devices among available, including all of
// mustInclude, for resource; claim is the namespace/name of the Claim the
// Pod runs on, when known. Returning nil keeps the default choice.
type PreferFunc func(resource string, available, mustInclude []string, size int, claim string) []string

// errKubeletRestarted ends one registration: the kubelet's socket was
// recreated, or ours was removed, as the kubelet does when it restarts.
var errKubeletRestarted = errors.New("the kubelet restarted")

// Plugin serves one resource name to the kubelet over the device plugin
// API.
type Plugin struct {
	pluginapi.UnimplementedDevicePluginServer

	resource string
	// dir is the kubelet's device-plugins directory; our socket is
	// endpoint in it.
	dir, endpoint string
	cdi           bool
	// mps runs the daemons of the cards whose shares this plugin serves;
	// nil when it serves none.
	mps    *MPSControl
	prefer PreferFunc
	// check is how often the sockets are looked at for a kubelet restart.
	check time.Duration

	mu       sync.Mutex
	devices  []Device
	watchers map[chan struct{}]struct{}
}

var _ pluginapi.DevicePluginServer = &Plugin{}

func newPlugin(resource, dir string, cdi bool, mps *MPSControl, prefer PreferFunc, check time.Duration) *Plugin {
	return &Plugin{
		resource: resource, dir: dir, cdi: cdi, mps: mps, prefer: prefer, check: check,
		endpoint: "kiln-" + strings.NewReplacer("/", "_").Replace(resource) + ".sock",
		watchers: map[chan struct{}]struct{}{},
	}
}

// SetDevices replaces the device list and sends it to every ListAndWatch
// stream.
func (p *Plugin) SetDevices(devices []Device) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if slices.EqualFunc(p.devices, devices, sameDevice) {
		return
	}
	p.devices = slices.Clone(devices)
	for ch := range p.watchers {
		select {
		case ch <- struct{}{}:
		default: // already told
		}
	}
}

func sameDevice(a, b Device) bool {
	return a.UUID == b.UUID && a.Unhealthy == b.Unhealthy && a.Index == b.Index && slices.Equal(a.NVLinkPeers, b.NVLinkPeers)
}

// Serve serves the plugin and registers it with the kubelet, again after
// every kubelet restart, until ctx is done.
func (p *Plugin) Serve(ctx context.Context) {
	logger := klog.FromContext(ctx).WithValues("resource", p.resource)
	for ctx.Err() == nil {
		err := p.serveOnce(ctx)
		if ctx.Err() != nil {
			return
		}
		if errors.Is(err, errKubeletRestarted) {
			logger.Info("The kubelet restarted; registering again")
			continue
		}
		logger.Error(err, "Serving the device plugin; retrying")
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
}

func (p *Plugin) serveOnce(ctx context.Context) error {
	sock := filepath.Join(p.dir, p.endpoint)
	if err := os.Remove(sock); err != nil && !os.IsNotExist(err) {
		return err
	}
	l, err := net.Listen("unix", sock)
	if err != nil {
		return err
	}
	srv := grpc.NewServer()
	pluginapi.RegisterDevicePluginServer(srv, p)
	go func() { _ = srv.Serve(l) }()
	defer srv.Stop()

	kubelet := filepath.Join(p.dir, KubeletSocketName)
	kubeletInfo, err := os.Stat(kubelet)
	if err != nil {
		return fmt.Errorf("the kubelet's registration socket: %w", err)
	}
	ourInfo, err := os.Stat(sock)
	if err != nil {
		return err
	}
	if err := p.register(ctx, kubelet); err != nil {
		return err
	}
	klog.FromContext(ctx).Info("Registered with the kubelet", "resource", p.resource, "endpoint", p.endpoint)
	t := time.NewTicker(p.check)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		// A restarting kubelet removes the plugins' sockets and makes its
		// own anew.
		if cur, err := os.Stat(sock); err != nil || !os.SameFile(cur, ourInfo) {
			return errKubeletRestarted
		}
		if cur, err := os.Stat(kubelet); err != nil || !os.SameFile(cur, kubeletInfo) {
			return errKubeletRestarted
		}
	}
}

func (p *Plugin) register(ctx context.Context, kubelet string) error {
	conn, err := grpc.NewClient("unix://"+kubelet, grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		return err
	}
	defer conn.Close()
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	_, err = pluginapi.NewRegistrationClient(conn).Register(ctx, &pluginapi.RegisterRequest{
		Version:      pluginapi.Version,
		Endpoint:     p.endpoint,
		ResourceName: p.resource,
		Options:      &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true},
	})
	if err != nil {
		return fmt.Errorf("registering %s with the kubelet: %w", p.resource, err)
	}
	return nil
}

// GetDevicePluginOptions: preferred allocations, no PreStartContainer.
func (p *Plugin) GetDevicePluginOptions(context.Context, *pluginapi.Empty) (*pluginapi.DevicePluginOptions, error) {
	return &pluginapi.DevicePluginOptions{GetPreferredAllocationAvailable: true}, nil
}

// ListAndWatch sends the device list, and again on every change.
func (p *Plugin) ListAndWatch(_ *pluginapi.Empty, stream grpc.ServerStreamingServer[pluginapi.ListAndWatchResponse]) error {
	ch := make(chan struct{}, 1)
	p.mu.Lock()
	p.watchers[ch] = struct{}{}
	p.mu.Unlock()
	defer func() {
		p.mu.Lock()
		delete(p.watchers, ch)
		p.mu.Unlock()
	}()
	for {
		if err := stream.Send(&pluginapi.ListAndWatchResponse{Devices: p.list()}); err != nil {
			return err
		}
		select {
		case <-stream.Context().Done():
			return nil
		case <-ch:
		}
	}
}

func (p *Plugin) list() []*pluginapi.Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	out := make([]*pluginapi.Device, 0, len(p.devices))
	for _, d := range p.devices {
		out = append(out, &pluginapi.Device{ID: d.UUID, Health: d.health()})
	}
	return out
}

func (p *Plugin) lookup(id string) (Device, bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	for _, d := range p.devices {
		if d.UUID == id {
			return d, true
		}
	}
	return Device{}, false
}

// GetPreferredAllocation chooses, for each container, the must-include
// devices, then the PreferFunc's choice, else the cards with the most
// NVLinks to those already chosen, lowest index first. The kubelet does
// not say which Pod asks.
func (p *Plugin) GetPreferredAllocation(_ context.Context, req *pluginapi.PreferredAllocationRequest) (*pluginapi.PreferredAllocationResponse, error) {
	resp := &pluginapi.PreferredAllocationResponse{}
	for _, c := range req.ContainerRequests {
		ids := p.Choose(c.AvailableDeviceIDs, c.MustIncludeDeviceIDs, int(c.AllocationSize), "")
		resp.ContainerResponses = append(resp.ContainerResponses, &pluginapi.ContainerPreferredAllocationResponse{DeviceIDs: ids})
	}
	return resp, nil
}

// Choose is GetPreferredAllocation's choice for one container; claim is
// the Pod's Claim where the caller knows it, as the kubelet does not.
func (p *Plugin) Choose(available, mustInclude []string, size int, claim string) []string {
	if p.prefer != nil {
		if ids := p.prefer(p.resource, available, mustInclude, size, claim); ids != nil {
			return ids
		}
	}
	if p.shared() {
		return p.preferPacked(available, mustInclude, size)
	}
	return p.preferLinked(available, mustInclude, size)
}

// shared says the plugin serves MPS shares.
func (p *Plugin) shared() bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.devices) > 0 && p.devices[0].Shares > 0
}

// preferPacked fills the card with the fewest free shares first (then the
// lowest index), so shares pack onto cards already shared and whole cards
// stay free for the next tenant.
func (p *Plugin) preferPacked(available, mustInclude []string, size int) []string {
	chosen := slices.Clone(mustInclude)
	p.mu.Lock()
	byID := map[string]Device{}
	for _, d := range p.devices {
		byID[d.UUID] = d
	}
	p.mu.Unlock()
	free := map[string]int{}
	for _, id := range available {
		free[byID[id].Parent]++
	}
	candidates := slices.DeleteFunc(slices.Clone(available), func(id string) bool { return slices.Contains(chosen, id) })
	slices.SortFunc(candidates, func(a, b string) int {
		da, db := byID[a], byID[b]
		if fa, fb := free[da.Parent], free[db.Parent]; fa != fb {
			return fa - fb
		}
		if da.Index != db.Index {
			return da.Index - db.Index
		}
		return strings.Compare(a, b)
	})
	for _, id := range candidates {
		if len(chosen) == size {
			break
		}
		chosen = append(chosen, id)
	}
	return chosen
}

// Devices is the device list now.
func (p *Plugin) Devices() []Device {
	p.mu.Lock()
	defer p.mu.Unlock()
	return slices.Clone(p.devices)
}

func (p *Plugin) preferLinked(available, mustInclude []string, size int) []string {
	chosen := slices.Clone(mustInclude)
	p.mu.Lock()
	order := map[string]int{}
	peers := map[string][]string{}
	for i, d := range p.devices {
		order[d.UUID], peers[d.UUID] = i, d.NVLinkPeers
	}
	p.mu.Unlock()
	candidates := slices.DeleteFunc(slices.Clone(available), func(id string) bool { return slices.Contains(chosen, id) })
	slices.SortFunc(candidates, func(a, b string) int { return order[a] - order[b] })
	for len(chosen) < size && len(candidates) > 0 {
		best, bestLinks := 0, -1
		for i, id := range candidates {
			links := 0
			for _, c := range chosen {
				if slices.Contains(peers[id], c) {
					links++
				}
			}
			if links > bestLinks {
				best, bestLinks = i, links
			}
		}
		chosen = append(chosen, candidates[best])
		candidates = slices.Delete(candidates, best, best+1)
	}
	return chosen
}

// Allocate tells the container runtime which devices each container gets:
// NVIDIA_VISIBLE_DEVICES by UUID, and CDI device names when configured. An
// MPS share is its card, with the card's MPS pipe directory mounted.
func (p *Plugin) Allocate(_ context.Context, req *pluginapi.AllocateRequest) (*pluginapi.AllocateResponse, error) {
	resp := &pluginapi.AllocateResponse{}
	for _, c := range req.ContainerRequests {
		cr := &pluginapi.ContainerAllocateResponse{Envs: map[string]string{}}
		var cards []string
		for _, id := range c.DevicesIds {
			d, ok := p.lookup(id)
			switch {
			case !ok:
				return nil, status.Errorf(codes.InvalidArgument, "device %s is not a %s device of this node", id, p.resource)
			case !d.Healthy():
				return nil, status.Errorf(codes.FailedPrecondition, "device %s is unhealthy: %s", id, d.Unhealthy)
			case d.Shares > 0 && len(c.DevicesIds) > 1:
				// The daemon caps each client at one share: two would be
				// charged for two and get one.
				return nil, status.Errorf(codes.InvalidArgument, "%d %s asked for one container; an MPS share is one per container", len(c.DevicesIds), p.resource)
			case d.Shares > 0:
				id = d.Parent
				cr.Mounts = append(cr.Mounts, &pluginapi.Mount{ContainerPath: MPSPipeMountPath, HostPath: p.mps.PipeDir(d.Parent)})
				cr.Envs["CUDA_MPS_PIPE_DIRECTORY"] = MPSPipeMountPath
			}
			if p.cdi {
				cr.CdiDevices = append(cr.CdiDevices, &pluginapi.CDIDevice{Name: CDIKind + "=" + id})
			}
			cards = append(cards, id)
		}
		cr.Envs[VisibleDevicesEnv] = strings.Join(cards, ",")
		resp.ContainerResponses = append(resp.ContainerResponses, cr)
	}
	return resp, nil
}

// PreStartContainer is not required (see GetDevicePluginOptions).
func (p *Plugin) PreStartContainer(context.Context, *pluginapi.PreStartContainerRequest) (*pluginapi.PreStartContainerResponse, error) {
	return &pluginapi.PreStartContainerResponse{}, nil
}
