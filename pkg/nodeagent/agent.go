// Package nodeagent is Kiln's node agent, kiln-node-agent: it runs the
// device plugins of pkg/deviceplugin, reports the node's devices and what
// holds each as the node's NodeDevices, and on a simulated node (kwok's)
// stands in for the kubelet. It sits above pkg/deviceplugin, which knows
// devices and the kubelet but not Kiln's API.
package nodeagent

import (
	"context"
	"fmt"
	"reflect"
	"slices"
	"sort"
	"sync"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/credentials/insecure"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"
	"k8s.io/utils/clock"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/deviceplugin"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// Agent reports a node's devices and their holders as the node's
// NodeDevices. With Simulate, it also stands in for the kubelet of a node
// that has none (kwok's): it allocates each Pod bound to the node the
// devices it asks for, through the same plugins the kubelet would call,
// and frees them when the Pod ends.
type Agent struct {
	Manager *deviceplugin.Manager
	Kiln    versioned.Interface
	Kube    kubernetes.Interface
	Node    string
	// Simulate allocates devices to the node's Pods itself.
	Simulate bool
	// PodResources is the kubelet's pod-resources socket, which says
	// which Pod holds which device on a real node; read when not
	// simulating.
	PodResources string
	// SampleInterval is how often the devices' usage is sampled, when the
	// Manager's Backend is a deviceplugin.Sampler; ten seconds if zero.
	SampleInterval time.Duration
	// ActiveThreshold is the utilization, in percent, above which a
	// device counts as active (DefaultActiveThreshold on the command
	// line).
	ActiveThreshold int32
	// Clock is the agent's time; the real one if nil.
	Clock clock.WithTicker

	pods corelisters.PodLister

	mu sync.Mutex
	// allocated is each Pod's devices.
	allocated map[types.UID]podDevices
	// claimDevices are the devices a Claim's Pods held last, by
	// namespace/claim, so the next Pod on the Claim gets the same ones.
	// cmu guards it: allocate holds mu while the plugin asks for it.
	cmu          sync.Mutex
	claimDevices map[string][]string
	changed      chan struct{}
	// activity is the devices' use, under mu.
	activity *activity
}

type podDevices struct {
	holder  v1alpha1.DeviceHolder
	claim   string
	devices []string
}

// Run reports until ctx is done.
func (a *Agent) Run(ctx context.Context) error {
	a.allocated, a.claimDevices, a.changed = map[types.UID]podDevices{}, map[string][]string{}, make(chan struct{}, 1)
	a.activity = newActivity(a.ActiveThreshold)
	if a.Clock == nil {
		a.Clock = clock.RealClock{}
	}
	a.Manager.OnChange = func() {
		a.touch()
		if a.Simulate {
			// A Pod seen before the first read of the devices found no
			// plugin to ask, and no later event of it comes by itself.
			// (The manager calls this under its lock, which allocating
			// takes.)
			go a.allocatePending(ctx)
		}
	}
	a.Manager.Prefer = a.preferClaim
	if err := a.restore(ctx); err != nil {
		if a.Simulate {
			return err
		}
		// Only the devices' activity history is lost.
		klog.FromContext(ctx).Error(err, "Reading what the agent published before it started", "node", a.Node)
	}
	f := informers.NewSharedInformerFactoryWithOptions(a.Kube, 0, informers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("spec.nodeName", a.Node).String()
	}))
	pods := f.Core().V1().Pods().Informer()
	a.pods = f.Core().V1().Pods().Lister()
	if _, err := pods.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { a.podChanged(ctx, o) },
		UpdateFunc: func(_, o any) { a.podChanged(ctx, o) },
		DeleteFunc: func(o any) { a.podGone(o) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		a.publishLoop(ctx)
	}()
	if s, ok := a.Manager.Backend.(deviceplugin.Sampler); ok {
		wg.Add(1)
		go func() {
			defer wg.Done()
			a.sampleLoop(ctx, s)
		}()
	}
	if !a.Simulate && a.PodResources != "" {
		// One connection for the agent's life; gRPC redials when the
		// kubelet restarts.
		conn, err := grpc.NewClient("unix://"+a.PodResources, grpc.WithTransportCredentials(insecure.NewCredentials()))
		if err != nil {
			return fmt.Errorf("the kubelet's pod resources at %s: %w", a.PodResources, err)
		}
		defer conn.Close()
		lister := podresourcesapi.NewPodResourcesListerClient(conn)
		f.WaitForCacheSync(ctx.Done())
		wg.Add(1)
		go func() {
			defer wg.Done()
			wait.UntilWithContext(ctx, func(ctx context.Context) { a.readPodResources(ctx, lister) }, time.Second)
		}()
	}
	err := a.Manager.Run(ctx)
	wg.Wait()
	f.Shutdown()
	return err
}

func (a *Agent) touch() {
	select {
	case a.changed <- struct{}{}:
	default:
	}
}

// restore takes the allocations of Pods back from the NodeDevices the
// agent wrote before it restarted, when it simulates the kubelet; those
// of Pods that are gone go at the first look at the node's Pods. It also
// takes back when each device was last active, so a restart does not make
// a busy device's history vanish.
func (a *Agent) restore(ctx context.Context) error {
	nd, err := a.Kiln.GpuV1alpha1().NodeDevices().Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		return fmt.Errorf("reading NodeDevices %s: %w", a.Node, err)
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	for _, d := range nd.Status.Devices {
		if d.LastActiveTime != nil {
			a.activity.seed(d.UUID, d.LastActiveTime.Time)
		}
		if h := d.Holder; h != nil && a.Simulate {
			p := a.allocated[h.PodUID]
			p.holder = *h
			p.devices = append(p.devices, d.UUID)
			a.allocated[h.PodUID] = p
		}
	}
	return nil
}

func (a *Agent) podChanged(ctx context.Context, o any) {
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	if pod.Status.Phase == corev1.PodSucceeded || pod.Status.Phase == corev1.PodFailed {
		a.podGone(pod)
		return
	}
	if !a.Simulate {
		return
	}
	a.mu.Lock()
	_, done := a.allocated[pod.UID]
	a.mu.Unlock()
	if done {
		return
	}
	if err := a.allocate(pod); err != nil {
		// A kubelet would refuse the Pod at admission; the scheduler
		// counted what it asked for, so this is a bug or a race with a
		// device failing.
		klog.FromContext(ctx).Error(err, "Allocating devices", "pod", klog.KObj(pod))
	}
}

// allocatePending allocates devices to the node's Pods that have none yet.
func (a *Agent) allocatePending(ctx context.Context) {
	if a.pods == nil {
		return
	}
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		return
	}
	for _, pod := range pods {
		a.podChanged(ctx, pod)
	}
}

func (a *Agent) podGone(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	pod, ok := o.(*corev1.Pod)
	if !ok {
		return
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, ok := a.allocated[pod.UID]; ok {
		delete(a.allocated, pod.UID)
		a.touch()
	}
}

// allocate gives the Pod, container by container, the devices of each
// resource the agent serves that it asks for, as the kubelet's device
// manager does: GetPreferredAllocation among the free healthy devices,
// then Allocate.
func (a *Agent) allocate(pod *corev1.Pod) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if _, done := a.allocated[pod.UID]; done {
		// Its event and allocatePending both came by.
		return nil
	}
	held := map[string]bool{}
	for _, p := range a.allocated {
		for _, d := range p.devices {
			held[d] = true
		}
	}
	pd := podDevices{holder: holderOf(pod)}
	if c, ok := pod.Labels[v1alpha1.LabelClaim]; ok {
		pd.claim = pod.Namespace + "/" + c
	}
	for _, c := range append(slices.Clone(pod.Spec.InitContainers), pod.Spec.Containers...) {
		for name, q := range c.Resources.Limits {
			p := a.Manager.Plugin(string(name))
			if p == nil || q.Value() == 0 {
				continue
			}
			var free []string
			for _, d := range p.Devices() {
				if d.Healthy() && !held[d.UUID] {
					free = append(free, d.UUID)
				}
			}
			n := int(q.Value())
			if len(free) < n {
				return fmt.Errorf("%s asks for %d %s, %d free", c.Name, n, name, len(free))
			}
			ids := p.Choose(free, nil, n, pd.claim)
			if _, err := p.Allocate(context.Background(), allocateRequest(ids)); err != nil {
				return err
			}
			for _, id := range ids {
				held[id] = true
			}
			pd.devices = append(pd.devices, ids...)
		}
	}
	if len(pd.devices) == 0 {
		return nil
	}
	a.allocated[pod.UID] = pd
	if pd.claim != "" {
		a.cmu.Lock()
		a.claimDevices[pd.claim] = pd.devices
		a.cmu.Unlock()
	}
	a.touch()
	return nil
}

// preferClaim prefers, for a Pod on a Claim, the devices the Claim's Pods
// held last: its holder's, handed over to its Instance's Pod. Through the
// kubelet, which does not say which Pod asks, the Claim is that of the
// one Pod bound here and not yet given devices that asks for this many.
func (a *Agent) preferClaim(resource string, available, mustInclude []string, size int, claimKey string) []string {
	if claimKey == "" && !a.Simulate && a.pods != nil {
		claimKey = a.pendingClaim(resource, size)
	}
	a.cmu.Lock()
	want := a.claimDevices[claimKey]
	a.cmu.Unlock()
	if claimKey == "" || len(want) == 0 {
		return nil
	}
	chosen := slices.Clone(mustInclude)
	for _, id := range want {
		if len(chosen) < size && slices.Contains(available, id) && !slices.Contains(chosen, id) {
			chosen = append(chosen, id)
		}
	}
	if len(chosen) < size {
		return nil // the default choice fills it
	}
	return chosen
}

func allocateRequest(ids []string) *pluginapi.AllocateRequest {
	return &pluginapi.AllocateRequest{ContainerRequests: []*pluginapi.ContainerAllocateRequest{{DevicesIds: ids}}}
}

// holderOf names no object: the kind of the Pod's controller, if Kiln's.
func holderOf(pod *corev1.Pod) v1alpha1.DeviceHolder {
	h := v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderPod, PodUID: pod.UID}
	if ref := metav1.GetControllerOf(pod); ref != nil && ref.APIVersion == v1alpha1.SchemeGroupVersion.String() {
		switch ref.Kind {
		case "Instance":
			h.Kind = v1alpha1.DeviceHolderInstance
		case "Claim":
			h.Kind = v1alpha1.DeviceHolderClaim
		}
	}
	return h
}

// publishLoop writes NodeDevices whenever the devices or their holders
// change, and retries until it lands.
func (a *Agent) publishLoop(ctx context.Context) {
	a.touch()
	for {
		select {
		case <-ctx.Done():
			return
		case <-a.changed:
		}
		_ = wait.ExponentialBackoffWithContext(ctx, wait.Backoff{Duration: 200 * time.Millisecond, Factor: 2, Steps: 8, Cap: 10 * time.Second},
			func(ctx context.Context) (bool, error) {
				if err := a.publish(ctx); err != nil {
					klog.FromContext(ctx).Error(err, "Publishing NodeDevices", "node", a.Node)
					return false, nil
				}
				return true, nil
			})
	}
}

// sampleLoop samples the devices' usage every SampleInterval, and has
// NodeDevices written when the activity says a sample is worth it.
func (a *Agent) sampleLoop(ctx context.Context, s deviceplugin.Sampler) {
	interval := a.SampleInterval
	if interval == 0 {
		interval = 10 * time.Second
	}
	t := a.Clock.NewTicker(interval)
	defer t.Stop()
	for {
		a.sample(ctx, s)
		select {
		case <-ctx.Done():
			return
		case <-t.C():
		}
	}
}

func (a *Agent) sample(ctx context.Context, s deviceplugin.Sampler) {
	samples, err := s.Sample()
	if err != nil {
		klog.FromContext(ctx).Error(err, "Sampling the devices' usage", "node", a.Node)
		return
	}
	a.mu.Lock()
	due := a.activity.observe(a.Clock.Now(), samples)
	a.mu.Unlock()
	if due {
		a.touch()
	}
}

// Status is the NodeDevices status of the node now.
func (a *Agent) Status() v1alpha1.NodeDevicesStatus {
	a.mu.Lock()
	holders := map[string]v1alpha1.DeviceHolder{}
	for _, p := range a.allocated {
		for _, d := range p.devices {
			holders[d] = p.holder
		}
	}
	reported := map[string]reportedUsage{}
	for uuid, d := range a.activity.devices {
		if d.reported != nil {
			reported[uuid] = *d.reported
		}
	}
	a.mu.Unlock()
	var st v1alpha1.NodeDevicesStatus
	for _, d := range a.Manager.Devices() {
		nd := v1alpha1.NodeDevice{
			UUID: d.UUID, Resource: d.Resource, Index: int32(d.Index), Model: d.Model, Memory: d.Memory,
			PCIBusID: d.PCIBusID, Parent: d.Parent, Profile: d.Profile, NVLinkPeers: d.NVLinkPeers,
			Health: v1alpha1.DeviceHealthy,
		}
		if !d.Healthy() {
			nd.Health, nd.Reason = v1alpha1.DeviceUnhealthy, d.Unhealthy
		}
		if h, ok := holders[d.UUID]; ok {
			nd.Holder = &h
		}
		if r, ok := reported[d.UUID]; ok {
			nd.Utilization = &r.usage.Utilization
			mem := r.usage.MemoryUsed.DeepCopy()
			nd.MemoryUsed = &mem
			if !r.lastActive.IsZero() {
				// Whole seconds, as the API stores it, so an unchanged
				// status compares equal to the stored one.
				t := metav1.NewTime(r.lastActive.Truncate(time.Second))
				nd.LastActiveTime = &t
			}
		}
		st.Devices = append(st.Devices, nd)
	}
	sort.Slice(st.Devices, func(i, j int) bool { return st.Devices[i].UUID < st.Devices[j].UUID })
	return st
}

func (a *Agent) publish(ctx context.Context) error {
	client := a.Kiln.GpuV1alpha1().NodeDevices()
	st := a.Status()
	cur, err := client.Get(ctx, a.Node, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = client.Create(ctx, &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: a.Node}, Status: st}, metav1.CreateOptions{FieldManager: FieldManager})
		return err
	}
	if err != nil || apiequality.Semantic.DeepEqual(cur.Status, st) {
		return err
	}
	cur.Status = st
	_, err = client.UpdateStatus(ctx, cur, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}

// FieldManager owns what the agent writes.
const FieldManager = "kiln-node-agent"

// pendingClaim is the Claim (namespace/name) of the only Pod on the node
// that asks for size of resource and holds no devices yet, if that Pod is
// on a Claim.
func (a *Agent) pendingClaim(resource string, size int) string {
	pods, err := a.pods.List(labels.Everything())
	if err != nil {
		return ""
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	found := ""
	for _, p := range pods {
		if _, has := a.allocated[p.UID]; has || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		// The kubelet asks container by container.
		asks := slices.ContainsFunc(append(slices.Clone(p.Spec.InitContainers), p.Spec.Containers...), func(c corev1.Container) bool {
			q := c.Resources.Limits[corev1.ResourceName(resource)]
			return q.Value() == int64(size)
		})
		if !asks {
			continue
		}
		c, ok := p.Labels[v1alpha1.LabelClaim]
		if !ok || (found != "" && found != p.Namespace+"/"+c) {
			return ""
		}
		found = p.Namespace + "/" + c
	}
	return found
}

// readPodResources learns from the kubelet which Pod holds which device,
// and records it when it changed.
func (a *Agent) readPodResources(ctx context.Context, lister podresourcesapi.PodResourcesListerClient) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	resp, err := lister.List(ctx, &podresourcesapi.ListPodResourcesRequest{})
	if err != nil {
		klog.FromContext(ctx).Error(err, "Reading the kubelet's pod resources", "socket", a.PodResources)
		return
	}
	allocated := map[types.UID]podDevices{}
	claims := map[string][]string{}
	for _, pr := range resp.PodResources {
		pod, err := a.pods.Pods(pr.Namespace).Get(pr.Name)
		if err != nil {
			continue // not yet seen, or gone
		}
		pd := podDevices{holder: holderOf(pod)}
		for _, c := range pr.Containers {
			for _, d := range c.Devices {
				if a.Manager.Plugin(d.ResourceName) != nil {
					pd.devices = append(pd.devices, d.DeviceIds...)
				}
			}
		}
		if len(pd.devices) == 0 {
			continue
		}
		if c, ok := pod.Labels[v1alpha1.LabelClaim]; ok {
			pd.claim = pod.Namespace + "/" + c
			claims[pd.claim] = pd.devices
		}
		allocated[pod.UID] = pd
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if reflect.DeepEqual(allocated, a.allocated) {
		return
	}
	a.allocated = allocated
	a.cmu.Lock()
	for k, v := range claims {
		a.claimDevices[k] = v
	}
	a.cmu.Unlock()
	a.touch()
}
