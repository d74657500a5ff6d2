package instancetype

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	coreinformers "k8s.io/client-go/informers/core/v1"
	kubefake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

var syncTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// fixture is a controller over fake clientsets whose informer caches are
// filled directly, as in sample-controller's tests, so a sync sees exactly
// the objects given and the test drives it by calling sync.
type fixture struct {
	kiln *fake.Clientset
	c    *Controller
	// nodes and pods are the informers' stores.
	nodes, pods cache.Store
}

func newFixture(t testing.TB, types []*v1alpha1.InstanceType, nodes []*corev1.Node, pods []*corev1.Pod) *fixture {
	t.Helper()
	var objs []runtime.Object
	for _, it := range types {
		objs = append(objs, it)
	}
	kiln := fake.NewSimpleClientset(objs...)
	kube := kubefake.NewSimpleClientset()
	kf := kilninformers.NewSharedInformerFactory(kiln, 0)
	cf := kubeinformers.NewSharedInformerFactory(kube, 0)
	typeInformer := kf.Gpu().V1alpha1().InstanceTypes()
	nodeInformer, podInformer := cf.Core().V1().Nodes(), cf.Core().V1().Pods()

	c, err := NewController(kiln, queue.Informers{Kube: cf, Kiln: kf})
	if err != nil {
		t.Fatalf("NewController: %v", err)
	}
	c.now = func() time.Time { return syncTime }
	f := &fixture{kiln: kiln, c: c, nodes: nodeInformer.Informer().GetIndexer(), pods: podInformer.Informer().GetIndexer()}
	for _, it := range types {
		f.add(t, typeInformer.Informer().GetIndexer(), it)
	}
	for _, n := range nodes {
		f.add(t, f.nodes, n)
	}
	for _, p := range pods {
		f.add(t, f.pods, p)
	}
	return f
}

// add, update and remove change a store as an informer would, without
// calling the handlers.
func (f *fixture) add(t testing.TB, store cache.Store, obj any) {
	t.Helper()
	if err := store.Add(obj); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) update(t testing.TB, store cache.Store, obj any) {
	t.Helper()
	if err := store.Update(obj); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) remove(t testing.TB, store cache.Store, obj any) {
	t.Helper()
	if err := store.Delete(obj); err != nil {
		t.Fatal(err)
	}
}

// statusWrites are the InstanceType objects sent to /status.
func (f *fixture) statusWrites() []*v1alpha1.InstanceType {
	var writes []*v1alpha1.InstanceType
	for _, a := range f.kiln.Actions() {
		if u, ok := a.(core.UpdateAction); ok && a.GetResource().Resource == "instancetypes" && a.GetSubresource() == "status" {
			writes = append(writes, u.GetObject().(*v1alpha1.InstanceType))
		}
	}
	return writes
}

// writes are all the client's mutating calls.
func (f *fixture) writes() []core.Action {
	return slices.DeleteFunc(slices.Clone(f.kiln.Actions()), func(a core.Action) bool {
		return a.GetVerb() == "get" || a.GetVerb() == "list" || a.GetVerb() == "watch"
	})
}

func h100Pool() ([]*corev1.Node, []*corev1.Pod) {
	return []*corev1.Node{h100Node("h100-0"), h100MIGNode("h100-1"), node("l4-0", l4Model, resources(gpu, 4))},
		[]*corev1.Pod{
			pod("two", "h100-0", resources(gpu, 2)),
			pod("mig", "h100-1", resources(mig1g, 1)),
			pod("l4-user", "l4-0", resources(gpu, 4)),
		}
}

func TestSyncWritesStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes, pods := h100Pool()
	f := newFixture(t, []*v1alpha1.InstanceType{h100Type()}, nodes, pods)

	if err := f.c.sync(ctx, "h100"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	writes := f.statusWrites()
	if len(writes) != 1 || len(f.writes()) != 1 {
		t.Fatalf("want one status update and nothing else, got %v", f.kiln.Actions())
	}
	want := v1alpha1.InstanceTypeStatus{
		Phase: v1alpha1.InstanceTypeActive,
		Capacity: v1alpha1.InstanceTypeCapacity{Nodes: 2, Cards: 16, FreeCards: 14, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb", Total: 7, Free: 6}, {Name: "3g.40gb", Total: 2, Free: 2},
		}},
		Conditions: []metav1.Condition{{
			Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message:            "14 of 16 cards free on 2 nodes, 6 of 7 1g.10gb partitions free, 2 of 2 3g.40gb partitions free",
			ObservedGeneration: 3, LastTransitionTime: metav1.NewTime(syncTime),
		}},
		ObservedGeneration: 3,
	}
	if diff := cmp.Diff(want, writes[0].Status); diff != "" {
		t.Errorf("status written (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(h100Type().Spec, writes[0].Spec); diff != "" {
		t.Errorf("the status write changed the spec (-want +got):\n%s", diff)
	}
}

func TestSyncSkipsUnchangedStatus(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes, pods := h100Pool()
	current := h100Type()
	// The status as stored: a transition time from long ago, truncated to
	// seconds as the API server keeps it.
	current.Status = Status(current, nodes, pods, metav1.NewTime(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC)))
	f := newFixture(t, []*v1alpha1.InstanceType{current}, nodes, pods)

	if err := f.c.sync(ctx, "h100"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("an unchanged status was written: %v", w)
	}
}

func TestSyncOfDeletedTypeDoesNothing(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes, pods := h100Pool()
	f := newFixture(t, nil, nodes, pods)

	if err := f.c.sync(ctx, "h100"); err != nil {
		t.Fatalf("sync: %v", err)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("sync of a gone type wrote: %v", w)
	}
}

func TestSyncReturnsConflict(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	nodes, pods := h100Pool()
	f := newFixture(t, []*v1alpha1.InstanceType{h100Type()}, nodes, pods)
	f.kiln.PrependReactor("update", "instancetypes", func(core.Action) (bool, runtime.Object, error) {
		return true, nil, apierrors.NewConflict(v1alpha1.Resource("instancetypes"), "h100", errors.New("the object has been modified"))
	})

	err := f.c.sync(ctx, "h100")
	if !apierrors.IsConflict(err) {
		t.Fatalf("sync = %v, want a conflict for the queue to retry", err)
	}
	// The worker requeues it with backoff rather than dropping it.
	f.c.queue.Add("h100")
	f.c.queue.ProcessNext(ctx)
	if got := f.c.queue.NumRequeues("h100"); got != 1 {
		t.Errorf("requeues after a conflict = %d, want 1", got)
	}
}

// queued drains the queue and returns its names, sorted.
func queued(c *Controller) []string {
	var names []string
	for c.queue.Len() > 0 {
		name, _ := c.queue.Get()
		c.queue.Done(name)
		names = append(names, name)
	}
	slices.Sort(names)
	return names
}

func TestPodEventsQueueThePoolsTheyChange(t *testing.T) {
	nodes := []*corev1.Node{h100MIGNode("h100-1"), node("l4-0", l4Model, resources(gpu, 4)), node("cpu-0", "", resources("cpu", 64))}
	types := []*v1alpha1.InstanceType{h100Type(), l4Type(), cpuType()}
	for _, tc := range []struct {
		name string
		pods []*corev1.Pod
		want []string
	}{
		{name: "a card pod on an h100 node", pods: []*corev1.Pod{pod("p", "h100-1", resources(gpu, 1))}, want: []string{"h100"}},
		{name: "a MIG pod", pods: []*corev1.Pod{pod("p", "h100-1", resources(mig3g, 1))}, want: []string{"h100"}},
		{name: "a slice on the l4", pods: []*corev1.Pod{pod("p", "l4-0", resources(gpu, 1, gpuMem, 25))}, want: []string{"l4"}},
		{name: "an unbound pod", pods: []*corev1.Pod{pod("p", "", resources(gpu, 1))}},
		{name: "a finished pod", pods: []*corev1.Pod{pod("p", "h100-1", resources(gpu, 1), phase(corev1.PodSucceeded))}},
		{name: "a pod that asks for no card", pods: []*corev1.Pod{pod("p", "h100-1", resources("cpu", 1))}},
		{name: "a pod on an unknown node", pods: []*corev1.Pod{pod("p", "gone", resources(gpu, 1))}},
		{name: "a pod moved between pools", pods: []*corev1.Pod{pod("p", "h100-1", resources(gpu, 1)), pod("p", "l4-0", resources(gpu, 1))}, want: []string{"h100", "l4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, types, nodes, nil)
			f.c.enqueuePoolsUsedBy(tc.pods...)
			if diff := cmp.Diff(tc.want, queued(f.c)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeEventsQueueTheirPools(t *testing.T) {
	types := []*v1alpha1.InstanceType{h100Type(), l4Type(), cpuType()}
	relabelled := h100Node("n")
	relabelled.Labels[productLabel] = l4Model
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		want  []string
	}{
		{name: "an h100 node", nodes: []*corev1.Node{h100Node("n")}, want: []string{"cpu", "h100"}},
		{name: "a CPU node", nodes: []*corev1.Node{node("n", "", nil)}, want: []string{"cpu"}},
		{name: "a node relabelled from h100 to l4", nodes: []*corev1.Node{h100Node("n"), relabelled}, want: []string{"cpu", "h100", "l4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, types, nil, nil)
			f.c.enqueuePoolsOf(tc.nodes...)
			if diff := cmp.Diff(tc.want, queued(f.c)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
		})
	}
}

func TestNodeChanged(t *testing.T) {
	base := h100Node("n")
	for _, tc := range []struct {
		name   string
		change func(*corev1.Node)
		want   bool
	}{
		{name: "heartbeat", change: func(n *corev1.Node) {
			n.Status.Conditions[0].LastHeartbeatTime = metav1.NewTime(syncTime)
			n.ResourceVersion = "2"
		}},
		{name: "not ready", change: notReady, want: true},
		{name: "cordoned", change: cordoned, want: true},
		{name: "relabelled", change: func(n *corev1.Node) { n.Labels["pool"] = "research" }, want: true},
		{name: "allocatable", change: func(n *corev1.Node) { n.Status.Allocatable = resources(gpu, 7) }, want: true},
		{name: "tainted", change: func(n *corev1.Node) { n.Spec.Taints = nil }, want: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			if got := nodeChanged(base, cur); got != tc.want {
				t.Errorf("nodeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestPodChanged(t *testing.T) {
	base := pod("p", "h100-0", resources(gpu, 1))
	for _, tc := range []struct {
		name   string
		old    *corev1.Pod
		change func(*corev1.Pod)
		want   bool
	}{
		{name: "status churn", old: base, change: func(p *corev1.Pod) { p.Status.PodIP = "10.0.0.1"; p.Labels = map[string]string{"a": "b"} }},
		{name: "pending to running", old: pod("p", "h100-0", resources(gpu, 1), phase(corev1.PodPending)), change: func(p *corev1.Pod) {}},
		{name: "bound", old: pod("p", "", resources(gpu, 1), phase(corev1.PodPending)), change: func(p *corev1.Pod) {}, want: true},
		{name: "finished", old: base, change: phase(corev1.PodSucceeded), want: true},
		{name: "resized", old: base, change: func(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = resources(gpu, 2) }, want: true},
		{name: "unbound stays unbound", old: pod("p", "", resources(gpu, 1), phase(corev1.PodPending)), change: func(p *corev1.Pod) { p.Spec.NodeName = ""; p.Status.Phase = corev1.PodPending }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			if got := podChanged(tc.old, cur); got != tc.want {
				t.Errorf("podChanged = %v, want %v", got, tc.want)
			}
		})
	}
}

// TestRun runs the controller against started informers: it writes the
// status, and returns once its context ends.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	nodes, pods := h100Pool()
	var kubeObjs []runtime.Object
	for _, n := range nodes {
		kubeObjs = append(kubeObjs, n)
	}
	for _, p := range pods {
		kubeObjs = append(kubeObjs, p)
	}
	kiln := fake.NewSimpleClientset(h100Type())
	kube := kubefake.NewSimpleClientset(kubeObjs...)
	kf := kilninformers.NewSharedInformerFactory(kiln, 0)
	cf := kubeinformers.NewSharedInformerFactory(kube, 0)
	c, err := NewController(kiln, queue.Informers{Kube: cf, Kiln: kf})
	if err != nil {
		t.Fatal(err)
	}
	kf.Start(ctx.Done())
	cf.Start(ctx.Done())
	defer kf.Shutdown()
	defer cf.Shutdown()

	done := make(chan error)
	go func() { done <- c.Run(ctx, 2) }()

	err = wait.PollUntilContextTimeout(ctx, 10*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		it, err := kiln.GpuV1alpha1().InstanceTypes().Get(ctx, "h100", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		return it.Status.Capacity.FreeCards == 14, nil
	})
	if err != nil {
		t.Fatalf("waiting for the status: %v", err)
	}
	if !c.HasSynced() {
		t.Error("HasSynced is false after the controller has worked")
	}
	cancel()
	if err := <-done; err != nil {
		t.Errorf("Run = %v", err)
	}
}

func TestDeleteTombstones(t *testing.T) {
	types := []*v1alpha1.InstanceType{h100Type(), l4Type(), cpuType()}
	nodes := []*corev1.Node{h100Node("h100-0")}
	gone := cache.DeletedFinalStateUnknown{Key: "h100-0"}
	for _, tc := range []struct {
		name   string
		delete func(*Controller)
		want   []string
	}{
		{name: "a node", delete: func(c *Controller) { c.nodeDeleted(coreinformers.DeletedNode{OptionalObj: nodes[0]}) }, want: []string{"cpu", "h100"}},
		{name: "a node's tombstone with its last state", delete: func(c *Controller) {
			c.nodeDeleted(coreinformers.DeletedNode{OptionalObj: nodes[0], FinalStateUnknown: &gone})
		}, want: []string{"cpu", "h100"}},
		{name: "a node's tombstone without it", delete: func(c *Controller) {
			c.nodeDeleted(coreinformers.DeletedNode{FinalStateUnknown: &gone})
		}, want: []string{"cpu", "h100", "l4"}},
		{name: "a pod's tombstone with its last state", delete: func(c *Controller) {
			c.podDeleted(coreinformers.DeletedPod{OptionalObj: pod("p", "h100-0", resources(gpu, 1)), FinalStateUnknown: &gone})
		}, want: []string{"h100"}},
		{name: "a pod's tombstone without it", delete: func(c *Controller) {
			c.podDeleted(coreinformers.DeletedPod{FinalStateUnknown: &gone})
		}, want: []string{"cpu", "h100", "l4"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, types, nodes, nil)
			tc.delete(f.c)
			if diff := cmp.Diff(tc.want, queued(f.c)); diff != "" {
				t.Errorf("queued (-want +got):\n%s", diff)
			}
		})
	}
}
