package instance

import (
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	"kiln.dev/kiln/pkg/reconcile/queue"
	"kiln.dev/kiln/pkg/reconcile/reconciletest"
)

var key = cache.ObjectName{Namespace: "tenant-a", Name: "train"}

// fixture is a controller over fake clientsets whose informers are never
// started: the tests fill the indexers themselves, so a sync sees exactly
// the cache they describe.
type fixture struct {
	inf      queue.Informers
	t        *testing.T
	kube     *kubefake.Clientset
	kiln     *kilnfake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	clock    time.Time

	instances, types, claims, pods, services, nodes cache.Indexer
}

func newFixture(t *testing.T, opts Options, objs ...runtime.Object) *fixture {
	t.Helper()
	var kubeObjs, kilnObjs []runtime.Object
	for _, o := range objs {
		switch o.(type) {
		case *v1alpha1.Instance, *v1alpha1.InstanceType, *v1alpha1.Claim, *v1alpha1.NodeDevices, *v1alpha1.Budget:
			kilnObjs = append(kilnObjs, o)
		default:
			kubeObjs = append(kubeObjs, o)
		}
	}
	f := &fixture{
		t:        t,
		kube:     kubefake.NewClientset(kubeObjs...),
		kiln:     kilnfake.NewClientset(kilnObjs...),
		recorder: record.NewFakeRecorder(100),
		clock:    time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC),
	}
	kubeInf := kubeinformers.NewSharedInformerFactory(f.kube, 0)
	kilnInf := kilninformers.NewSharedInformerFactory(f.kiln, 0)
	f.inf = queue.Informers{Kube: kubeInf, Kiln: kilnInf}
	instances, instanceTypes := kilnInf.Gpu().V1alpha1().Instances(), kilnInf.Gpu().V1alpha1().InstanceTypes()
	pods, services, nodes := kubeInf.Core().V1().Pods(), kubeInf.Core().V1().Services(), kubeInf.Core().V1().Nodes()
	claims := kilnInf.Gpu().V1alpha1().Claims()
	c, err := NewController(f.kube, f.kiln, f.inf, f.recorder, opts)
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return f.clock }
	f.c = c
	f.instances, f.types, f.claims = instances.Informer().GetIndexer(), instanceTypes.Informer().GetIndexer(), claims.Informer().GetIndexer()
	f.pods, f.services, f.nodes = pods.Informer().GetIndexer(), services.Informer().GetIndexer(), nodes.Informer().GetIndexer()
	for _, o := range objs {
		if err := f.indexerFor(o).Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func (f *fixture) indexerFor(o runtime.Object) cache.Indexer {
	i, err := reconciletest.Indexer(f.inf, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return i
}

// set puts o in the cache and the client, replacing what was there; drop
// takes a Pod or Service out of both.
func (f *fixture) set(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerFor(o).Update(o); err != nil {
		f.t.Fatal(err)
	}
	tracker := f.kube.Tracker()
	switch o.(type) {
	case *v1alpha1.Instance, *v1alpha1.InstanceType, *v1alpha1.Claim, *v1alpha1.NodeDevices, *v1alpha1.Budget:
		tracker = f.kiln.Tracker()
	}
	err := tracker.Add(o)
	if apierrors.IsAlreadyExists(err) {
		// Replace rather than Update: the field-managed tracker has no
		// schema for Kiln's types to merge with.
		m := o.(metav1.Object)
		if err = tracker.Delete(f.gvrOf(o), m.GetNamespace(), m.GetName()); err == nil {
			err = tracker.Add(o)
		}
	}
	if err != nil {
		f.t.Fatal(err)
	}
}

func (f *fixture) gvrOf(o runtime.Object) schema.GroupVersionResource {
	r, err := reconciletest.Resource(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

func (f *fixture) drop(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerFor(o).Delete(o); err != nil {
		f.t.Fatal(err)
	}
	m := o.(metav1.Object)
	if err := f.kube.Tracker().Delete(f.gvrOf(o), m.GetNamespace(), m.GetName()); err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
}

// catchUp lets the informers see what the clients hold now, as they
// would after the watch events of the last sync's writes.
func (f *fixture) catchUp() {
	f.t.Helper()
	ctx := f.t.Context()
	insts, err := f.kiln.GpuV1alpha1().Instances("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	pods, err := f.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	svcs, err := f.kube.CoreV1().Services("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var items []any
	for i := range insts.Items {
		items = append(items, &insts.Items[i])
	}
	replace(f.t, f.instances, items)
	items = nil
	for i := range pods.Items {
		items = append(items, &pods.Items[i])
	}
	replace(f.t, f.pods, items)
	items = nil
	for i := range svcs.Items {
		items = append(items, &svcs.Items[i])
	}
	replace(f.t, f.services, items)
	f.kube.ClearActions()
	f.kiln.ClearActions()
}

func replace(t *testing.T, idx cache.Indexer, items []any) {
	t.Helper()
	if err := idx.Replace(items, ""); err != nil {
		t.Fatal(err)
	}
}

func (f *fixture) sync() time.Duration {
	f.t.Helper()
	after, err := f.c.sync(f.t.Context(), key)
	if err != nil {
		f.t.Fatalf("sync: %v", err)
	}
	return after
}

func (f *fixture) instance() *v1alpha1.Instance {
	f.t.Helper()
	inst, err := f.kiln.GpuV1alpha1().Instances(key.Namespace).Get(f.t.Context(), key.Name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return inst
}

// pod and service return the object the client holds, nil when there is none.
func (f *fixture) pod() *corev1.Pod {
	f.t.Helper()
	pod, err := f.kube.CoreV1().Pods(key.Namespace).Get(f.t.Context(), key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return pod
}

func (f *fixture) service() *corev1.Service {
	f.t.Helper()
	svc, err := f.kube.CoreV1().Services(key.Namespace).Get(f.t.Context(), key.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return svc
}

// events drains the events recorded so far.
func (f *fixture) events() []string { return reconciletest.Events(f.recorder) }

// writes lists the writes both clients received, as "verb resource[/sub]".
func (f *fixture) writes() []string {
	return reconciletest.Writes(append(f.kube.Actions(), f.kiln.Actions()...)...)
}

// deletes returns the UID preconditions of the deletes of a resource.
func (f *fixture) deletes(resource string) []types.UID {
	var out []types.UID
	for _, a := range f.kube.Actions() {
		d, ok := a.(clienttesting.DeleteActionImpl)
		if !ok || d.GetResource().Resource != resource {
			continue
		}
		var uid types.UID
		if p := d.DeleteOptions.Preconditions; p != nil && p.UID != nil {
			uid = *p.UID
		}
		out = append(out, uid)
	}
	return out
}

func (f *fixture) wrote(verb, resource string) bool {
	return slices.Contains(f.writes(), verb+" "+resource)
}

func (f *fixture) wantPhase(phase v1alpha1.InstancePhase, reason string) *v1alpha1.Instance {
	f.t.Helper()
	inst := f.instance()
	c := readyCondition(f.t, inst.Status)
	if inst.Status.Phase != phase || c.Reason != reason {
		f.t.Errorf("phase %q reason %q (%s), want %q %q", inst.Status.Phase, c.Reason, inst.Status.Message, phase, reason)
	}
	return inst
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// running is an h100 Instance with one port, already finalized at
// generation 1.
func running() *v1alpha1.Instance {
	inst := sized("h100")
	inst.Generation = 1
	inst.Finalizers = []string{Finalizer, v1alpha1.LedgerFinalizer}
	inst.Spec.Resources.Accelerators = ptr.To[int32](1)
	inst.Spec.Ports = []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP}}
	return inst
}

// renderedPod is the Pod the controller makes for inst, as stored: with
// its annotations, a UID and a place.
func renderedPod(t *testing.T, inst *v1alpha1.Instance, typ *v1alpha1.InstanceType, node *corev1.Node, uid types.UID) *corev1.Pod {
	t.Helper()
	pod, err := RenderPod(inst, typ, node, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	hash, err := podHash(pod)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{AnnotationGeneration: strconv.FormatInt(inst.Generation, 10), AnnotationPodHash: hash}
	pod.UID = uid
	pod.Spec.NodeName = "gpu-1"
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{scheduled()}}
	return pod
}

func readyPod(t *testing.T, inst *v1alpha1.Instance) *corev1.Pod {
	pod := renderedPod(t, inst, h100(), nil, "pod-1")
	pod.Status.Conditions = append(pod.Status.Conditions, ready())
	pod.Status.PodIPs = []corev1.PodIP{{IP: "10.244.1.5"}}
	pod.Status.StartTime = &started
	return pod
}

func ownedService(inst *v1alpha1.Instance, ports ...corev1.ServicePort) *corev1.Service {
	svc := RenderService(inst, nil)
	svc.UID = "svc-1"
	svc.Spec.Ports = ports
	return svc
}

func nodePort(name string, port, node int32) corev1.ServicePort {
	return corev1.ServicePort{Name: name, Port: port, TargetPort: intstr.FromInt32(port), Protocol: corev1.ProtocolTCP, NodePort: node}
}

func TestSyncNewInstance(t *testing.T) {
	inst := running()
	inst.Finalizers = nil
	f := newFixture(t, Options{}, inst, h100())
	f.sync()

	got := f.instance()
	if !slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("finalizers %v, want %s", got.Finalizers, Finalizer)
	}
	pod := f.pod()
	if pod == nil {
		t.Fatal("no Pod created")
	}
	want, _ := RenderPod(inst, h100(), nil, RenderOptions{})
	hash, _ := podHash(want)
	if diff := cmp.Diff(want.Spec, pod.Spec); diff != "" {
		t.Errorf("Pod spec (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(Labels(inst), pod.Labels); diff != "" {
		t.Errorf("Pod labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]metav1.OwnerReference{OwnerReference(inst)}, pod.OwnerReferences); diff != "" {
		t.Errorf("Pod owner (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(map[string]string{AnnotationGeneration: "1", AnnotationPodHash: hash}, pod.Annotations); diff != "" {
		t.Errorf("Pod annotations (-want +got):\n%s", diff)
	}
	svc := f.service()
	if svc == nil || len(svc.Spec.Ports) != 1 || svc.Spec.Ports[0].Port != 8888 || !ownedBy(svc, inst) {
		t.Errorf("Service %+v, want an owned NodePort Service for port 8888", svc)
	}
	if !f.wrote("update", "instances/status") {
		t.Errorf("no status written; writes %v", f.writes())
	}
	if got.Status.ObservedGeneration != 1 || len(got.Status.Ports) != 1 || got.Status.Ports[0].Name != "jupyter" {
		t.Errorf("status %+v, want generation 1 and the jupyter port", got.Status)
	}
}

// TestSyncMakesNoPodForAStaleInstance: the cache still shows an Instance
// that wants a Pod while the server has stopped, changed or let go of it
// (the event not yet seen): no Pod is made, since the stop may already
// have released its cards to another Instance.
func TestSyncMakesNoPodForAStaleInstance(t *testing.T) {
	for _, tt := range []struct {
		name   string
		server func(f *fixture, inst *v1alpha1.Instance)
	}{
		{name: "deleted", server: func(f *fixture, inst *v1alpha1.Instance) {
			if err := f.kiln.Tracker().Delete(f.gvrOf(inst), inst.Namespace, inst.Name); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "being deleted", server: func(f *fixture, inst *v1alpha1.Instance) {
			going := inst.DeepCopy()
			going.DeletionTimestamp = &metav1.Time{Time: f.clock}
			f.update(going)
		}},
		{name: "made again under the same name", server: func(f *fixture, inst *v1alpha1.Instance) {
			again := inst.DeepCopy()
			again.UID = "another"
			f.update(again)
		}},
		{name: "stopped and reported", server: func(f *fixture, inst *v1alpha1.Instance) {
			stopped := inst.DeepCopy()
			stopped.Generation = 2
			stopped.Spec.Stopped = true
			stopped.Status = v1alpha1.InstanceStatus{Phase: v1alpha1.InstanceStopped, ObservedGeneration: 2}
			f.update(stopped)
		}},
		{name: "spec changed", server: func(f *fixture, inst *v1alpha1.Instance) {
			bigger := inst.DeepCopy()
			bigger.Generation = 2
			bigger.Spec.Resources.Accelerators = ptr.To[int32](8)
			f.update(bigger)
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			inst := running()
			f := newFixture(t, Options{}, inst, h100())
			tt.server(f, inst)
			if _, err := f.c.sync(t.Context(), key); err == nil {
				t.Errorf("sync of an Instance the server has moved on from succeeded; writes %v", f.writes())
			}
			if f.wrote("create", "pods") {
				t.Errorf("Pod made from a stale Instance; writes %v", f.writes())
			}
		})
	}
}

// update replaces o in the client only, as a write the cache has not seen.
func (f *fixture) update(o *v1alpha1.Instance) {
	f.t.Helper()
	if err := f.kiln.Tracker().Update(f.gvrOf(o), o, o.Namespace); err != nil {
		f.t.Fatal(err)
	}
}

// An Instance created stopped is reported Stopped before it gets its
// finalizer, so that the update adding it is not charged: with the
// finalizer and no phase, it would count as holding its cards.
func TestSyncNewStoppedInstance(t *testing.T) {
	inst := running()
	inst.Finalizers, inst.Spec.Stopped = nil, true
	f := newFixture(t, Options{}, inst, h100())
	f.sync()
	got := f.wantPhase(v1alpha1.InstanceStopped, ReasonStopped)
	if slices.Contains(got.Finalizers, Finalizer) {
		t.Errorf("finalizers %v before the status said Stopped", got.Finalizers)
	}
	if f.pod() != nil {
		t.Error("a Pod was made for a stopped Instance")
	}
	// Deleted now, it would go at once and leave its Service behind.
	if f.service() != nil {
		t.Error("a Service was made before the finalizer that waits for it")
	}
	// The next look, from caches that have caught up.
	f = newFixture(t, Options{}, got, h100())
	f.sync()
	if got := f.instance(); !slices.Contains(got.Finalizers, Finalizer) || got.Status.Phase != v1alpha1.InstanceStopped {
		t.Errorf("after the next sync: finalizers %v, phase %s; want the finalizer, still Stopped", got.Finalizers, got.Status.Phase)
	}
	if svc := f.service(); svc == nil || !ownedBy(svc, got) {
		t.Errorf("after the next sync: Service %v, want one owned by the Instance", svc)
	}
}

// The Pod just created has not been looked at by the scheduler; that is
// starting, not a Pending worth a Warning on every new Instance.
func TestSyncNewInstanceIsStarting(t *testing.T) {
	inst := running()
	inst.Finalizers = nil
	f := newFixture(t, Options{}, inst, h100())
	f.sync()
	f.wantPhase(v1alpha1.InstanceStarting, ReasonStarting)
	if events := f.events(); hasEvent(events, corev1.EventTypeWarning) {
		t.Errorf("a new Instance recorded a Warning: %v", events)
	}
}

// TestSyncNewInstanceQuiet: a new Instance keeps its empty status while
// its first Pod is younger than quietFor and only starting, then says
// Starting; Ready, or a Pod the scheduler could not place, is written at
// once.
func TestSyncNewInstanceQuiet(t *testing.T) {
	unbound := func(p *corev1.Pod) {
		p.Spec.NodeName = ""
		p.Status = corev1.PodStatus{Phase: corev1.PodPending}
	}
	for _, tc := range []struct {
		name string
		// age of the Pod; none means the sync makes it.
		age    time.Duration
		noPod  bool
		pod    func(*corev1.Pod)
		status v1alpha1.InstanceStatus
		// wantPhase "" means no status write.
		wantPhase  v1alpha1.InstancePhase
		wantReason string
		wantAfter  time.Duration
		wantEvents []string
	}{{
		name: "Pod made by this sync", noPod: true, wantAfter: quietFor,
	}, {
		name: "not yet seen by the scheduler", pod: unbound, wantAfter: quietFor,
	}, {
		name: "scheduled, not ready", age: 1500 * time.Millisecond, wantAfter: 500 * time.Millisecond,
	}, {
		name: "API server's clock ahead", age: -time.Minute, pod: unbound, wantAfter: quietFor,
	}, {
		name: "quiet over", age: quietFor,
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantEvents: []string{"Normal Starting scheduled on gpu-1, waiting for it to become ready"},
	}, {
		name: "ready within quietFor", age: time.Second,
		pod:       func(p *corev1.Pod) { p.Status.Conditions = append(p.Status.Conditions, ready()) },
		wantPhase: v1alpha1.InstanceReady, wantReason: ReasonPodReady, wantEvents: []string{"Normal Ready running on gpu-1"},
	}, {
		name: "unschedulable", age: 0,
		pod: func(p *corev1.Pod) {
			unbound(p)
			p.Status.Conditions = []corev1.PodCondition{{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available"}}
		},
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonUnschedulable, wantEvents: []string{"Warning Pending 0/3 nodes are available"},
	}, {
		name: "Pod on its way out", age: 0,
		pod: func(p *corev1.Pod) {
			p.DeletionTimestamp = &metav1.Time{Time: started.Add(time.Second)}
			p.DeletionGracePeriodSeconds = ptr.To[int64](1)
		},
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantEvents: []string{"Normal Starting waiting for the previous Pod to go"},
	}, {
		name: "status written before", age: 0, pod: unbound,
		status:    v1alpha1.InstanceStatus{Phase: v1alpha1.InstanceStarting, Message: "creating the Pod"},
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			inst.Status = tc.status
			objs := []runtime.Object{inst, h100(), gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if !tc.noPod {
				pod := renderedPod(t, inst, h100(), nil, "pod-1")
				if tc.pod != nil {
					tc.pod(pod)
				}
				objs = append(objs, pod)
			}
			f := newFixture(t, Options{}, objs...)
			// As kube-apiserver stamps a Pod it creates, and one made
			// age ago.
			f.kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				a.(clienttesting.CreateAction).GetObject().(*corev1.Pod).CreationTimestamp = metav1.NewTime(f.clock)
				return false, nil, nil
			})
			if !tc.noPod {
				pod := f.pod()
				pod.CreationTimestamp = metav1.NewTime(f.clock.Add(-tc.age))
				f.set(pod)
			}
			after := f.sync()

			if tc.wantPhase == "" {
				if f.wrote("update", "instances/status") {
					t.Errorf("status written while quiet: %+v", f.instance().Status)
				}
			} else {
				f.wantPhase(tc.wantPhase, tc.wantReason)
			}
			if after != tc.wantAfter {
				t.Errorf("requeue after %v, want %v", after, tc.wantAfter)
			}
			if diff := cmp.Diff(tc.wantEvents, f.events(), cmpopts.EquateEmpty()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncReadyAndSteady(t *testing.T) {
	inst := running()
	f := newFixture(t, Options{}, inst, h100(), readyPod(t, inst), gpuNode(),
		ownedService(inst, nodePort("jupyter", 8888, 30001)))
	f.sync()

	got := f.wantPhase(v1alpha1.InstanceReady, ReasonPodReady)
	if c := readyCondition(t, got.Status); c.Status != metav1.ConditionTrue {
		t.Errorf("Ready condition %+v, want True", c)
	}
	if diff := cmp.Diff([]v1alpha1.InstancePortStatus{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001}}, got.Status.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{"203.0.113.7", "2001:db8::7", "10.0.0.7", "fd00::7"}, got.Status.HostIPs); diff != "" {
		t.Errorf("hostIPs (-want +got):\n%s", diff)
	}
	if got.Status.NodeName != "gpu-1" || !slices.Equal(got.Status.PodIPs, []string{"10.244.1.5"}) {
		t.Errorf("nodeName %q podIPs %v", got.Status.NodeName, got.Status.PodIPs)
	}
	if diff := cmp.Diff([]string{"update instances/status"}, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if events := f.events(); !slices.Equal(events, []string{"Normal Ready running on gpu-1"}) {
		t.Errorf("events %v", events)
	}

	f.catchUp()
	f.sync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a second sync with nothing changed wrote %v", w)
	}
	if events := f.events(); len(events) != 0 {
		t.Errorf("a second sync with nothing changed recorded %v", events)
	}
}

// TestSyncNodeLost: a Ready Instance whose node is deleted says so (a
// Warning), leaves the Pod to the pod garbage collector, and creates a new
// one once that Pod is gone.
func TestSyncNodeLost(t *testing.T) {
	inst := running()
	pod := readyPod(t, inst)
	f := newFixture(t, Options{}, inst, h100(), pod, gpuNode(),
		ownedService(inst, nodePort("jupyter", 8888, 30001)))
	f.sync()
	f.wantPhase(v1alpha1.InstanceReady, ReasonPodReady)
	f.catchUp()
	f.events()

	f.drop(gpuNode())
	f.sync()
	got := f.wantPhase(v1alpha1.InstancePending, ReasonNodeLost)
	if got.Status.NodeName != "gpu-1" || len(got.Status.HostIPs) != 0 {
		t.Errorf("nodeName %q hostIPs %v, want the lost node and no addresses", got.Status.NodeName, got.Status.HostIPs)
	}
	if diff := cmp.Diff([]string{"update instances/status"}, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	want := "Warning Pending node gpu-1 is gone; its Pod is removed and a new one placed on another node"
	if events := f.events(); !slices.Equal(events, []string{want}) {
		t.Errorf("events %v, want [%s]", events, want)
	}

	f.catchUp()
	f.drop(pod)
	f.sync()
	f.wantPhase(v1alpha1.InstanceStarting, ReasonStarting)
	if !f.wrote("create", "pods") {
		t.Errorf("no new Pod once the lost one was gone: %v", f.writes())
	}
}

func TestSyncStopped(t *testing.T) {
	for _, tc := range []struct {
		name      string
		withPod   bool
		unseenPod bool
		wantPhase v1alpha1.InstancePhase
	}{
		{"the owned Pod is deleted, the Service kept", true, false, v1alpha1.InstanceStopping},
		{"without a Pod it is stopped", false, false, v1alpha1.InstanceStopped},
		// Stopped releases its cards: a Pod the informer has not seen yet
		// (created moments ago, or by a create that timed out but was
		// stored) would run uncharged.
		{"a Pod only the API server has seen is deleted before it is stopped", false, true, v1alpha1.InstanceStopping},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			inst.Spec.Stopped = true
			objs := []runtime.Object{inst, h100(), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.withPod {
				objs = append(objs, readyPod(t, inst))
			}
			f := newFixture(t, Options{}, objs...)
			if tc.unseenPod {
				if err := f.kube.Tracker().Add(readyPod(t, inst)); err != nil {
					t.Fatal(err)
				}
			}
			f.sync()

			var want []types.UID
			if tc.withPod || tc.unseenPod {
				want = []types.UID{"pod-1"}
			}
			if diff := cmp.Diff(want, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			if f.pod() != nil && tc.withPod {
				t.Error("the Pod is still there")
			}
			if f.wrote("create", "pods") {
				t.Error("a stopped Instance got a Pod")
			}
			if svc := f.service(); svc == nil || svc.Spec.Ports[0].NodePort != 30001 || f.wrote("delete", "services") || f.wrote("update", "services") {
				t.Errorf("Service %v not kept as it was; writes %v", svc, f.writes())
			}
			got := f.wantPhase(tc.wantPhase, string(tc.wantPhase))
			if got.Status.Ports[0].NodePort != 30001 {
				t.Errorf("ports %+v, want node port 30001 kept while stopped", got.Status.Ports)
			}
		})
	}
}

func TestSyncNameConflict(t *testing.T) {
	foreign := func(refs ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: "train", Namespace: "tenant-a", UID: "theirs", OwnerReferences: refs}
	}
	earlier := OwnerReference(running())
	earlier.UID = "uid-0"
	for _, tc := range []struct {
		name string
		obj  runtime.Object
		want string
	}{
		{"a Pod without an owner", &corev1.Pod{ObjectMeta: foreign()}, "Pod tenant-a/train"},
		{"a Pod of an earlier Instance of the same name", &corev1.Pod{ObjectMeta: foreign(earlier)}, "Pod tenant-a/train"},
		{"a Service without an owner", &corev1.Service{ObjectMeta: foreign()}, "Service tenant-a/train"},
		{"a Service of an earlier Instance of the same name", &corev1.Service{ObjectMeta: foreign(earlier)}, "Service tenant-a/train"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, Options{}, running(), h100(), tc.obj)
			f.sync()

			for _, w := range f.writes() {
				if strings.HasSuffix(w, " pods") || strings.HasSuffix(w, " services") {
					t.Errorf("wrote %s while a foreign object is in the way", w)
				}
			}
			got := f.wantPhase(v1alpha1.InstanceFailed, ReasonNameConflict)
			if !strings.HasPrefix(got.Status.Message, tc.want+" already exists and is not owned by this Instance") {
				t.Errorf("message %q, want it to name %s", got.Status.Message, tc.want)
			}
			if events := f.events(); !hasEvent(events, "Warning NameConflict "+tc.want) {
				t.Errorf("events %v, want a NameConflict Warning", events)
			}

			// Told once: the next sync finds the reason already stored.
			f.catchUp()
			f.sync()
			if events := f.events(); hasEvent(events, "Warning NameConflict") {
				t.Errorf("the conflict was told again: %v", events)
			}
		})
	}
}

func TestSyncServicePorts(t *testing.T) {
	for _, tc := range []struct {
		name      string
		ports     []v1alpha1.InstancePort
		wantPorts []corev1.ServicePort
		wantGone  bool
	}{{
		name:  "an unchanged port keeps its node port, a removed one goes, a new one is allocated",
		ports: []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP}, {Name: "ssh", Port: 2222}},
		wantPorts: []corev1.ServicePort{
			nodePort("jupyter", 8888, 30001),
			nodePort("ssh", 2222, 0),
		},
	}, {
		name:     "no ports left, no Service",
		wantGone: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			svc := ownedService(inst, nodePort("jupyter", 8888, 30001), nodePort("tensorboard", 6006, 30002))
			inst.Spec.Ports = tc.ports
			f := newFixture(t, Options{}, inst, h100(), readyPod(t, inst), svc)
			f.sync()

			if tc.wantGone {
				if diff := cmp.Diff([]types.UID{"svc-1"}, f.deletes("services")); diff != "" {
					t.Errorf("Service deletes by UID (-want +got):\n%s", diff)
				}
				if f.service() != nil {
					t.Error("the Service is still there")
				}
				return
			}
			got := f.service()
			if got == nil {
				t.Fatal("the Service is gone")
			}
			if diff := cmp.Diff(tc.wantPorts, got.Spec.Ports); diff != "" {
				t.Errorf("Service ports (-want +got):\n%s", diff)
			}
			if got.UID != "svc-1" || f.wrote("delete", "services") || f.wrote("create", "services") {
				t.Errorf("the Service was replaced, not updated: writes %v", f.writes())
			}
		})
	}
}

func TestSyncSpecChange(t *testing.T) {
	for _, tc := range []struct {
		name string
		// edit changes the Instance after its Pod was made at generation 1.
		edit func(*v1alpha1.Instance)
		// typeEdit changes the InstanceType after that.
		typeEdit    func(*v1alpha1.InstanceType)
		wantRebuild bool
	}{{
		name:        "a new image rebuilds the Pod",
		edit:        func(i *v1alpha1.Instance) { i.Generation, i.Spec.Image = 2, "nvcr.io/nvidia/pytorch:24.06-py3" },
		wantRebuild: true,
	}, {
		name: "a generation bump that does not reach the Pod leaves it",
		edit: func(i *v1alpha1.Instance) { i.Generation, i.Spec.ClaimName = 2, "reserved" },
	}, {
		name:     "an InstanceType edit waits for the next start",
		typeEdit: addToleration,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			pod := readyPod(t, inst)
			if tc.edit != nil {
				tc.edit(inst)
			}
			typ := h100()
			if tc.typeEdit != nil {
				tc.typeEdit(typ)
			}
			f := newFixture(t, Options{}, inst, typ, pod, ownedService(inst, nodePort("jupyter", 8888, 30001)))
			f.sync()

			var want []types.UID
			if tc.wantRebuild {
				want = []types.UID{"pod-1"}
			}
			if diff := cmp.Diff(want, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			if f.wrote("create", "pods") {
				t.Errorf("writes %v", f.writes())
			}
			if events := f.events(); hasEvent(events, "Normal "+ReasonPodOutOfDate) != tc.wantRebuild {
				t.Errorf("events %v, want a PodOutOfDate event: %v", events, tc.wantRebuild)
			}
		})
	}
}

// A generation bump that did not reach the Pod leaves the Pod's generation
// annotation behind; a later InstanceType edit must not pass for an edit
// of the Instance and restart it.
func TestSyncTypeEditAfterNoOpBump(t *testing.T) {
	inst := running()
	pod := readyPod(t, inst)
	inst.Generation, inst.Spec.ClaimName = 2, "reserved"
	f := newFixture(t, Options{}, inst, h100(), pod, ownedService(inst, nodePort("jupyter", 8888, 30001)))
	f.sync()
	if d := f.deletes("pods"); len(d) != 0 {
		t.Fatalf("the bump deleted the Pod: %v", d)
	}

	f.catchUp()
	typ := h100()
	addToleration(typ)
	f.set(typ)
	f.sync()
	if d := f.deletes("pods"); len(d) != 0 {
		t.Errorf("an InstanceType edit deleted Pod %v; it should wait for the next start", d)
	}
}

func addToleration(t *v1alpha1.InstanceType) {
	t.Spec.Tolerations = append(t.Spec.Tolerations, corev1.Toleration{Key: "maintenance", Operator: corev1.TolerationOpExists})
}

func TestSyncDrain(t *testing.T) {
	for _, tc := range []struct {
		name      string
		typ       func(*v1alpha1.InstanceType)
		wantStop  bool
		wantEvent string
	}{{
		name:      "a draining type stops its Instances",
		typ:       func(t *v1alpha1.InstanceType) { t.Spec.Hold = v1alpha1.HoldDrain },
		wantStop:  true,
		wantEvent: "Normal Drained Stopped: instancetype h100 is draining",
	}, {
		name: "a type being deleted stops its Instances",
		typ: func(t *v1alpha1.InstanceType) {
			t.DeletionTimestamp = &started
			t.Finalizers = []string{"gpu.kiln.dev/instancetype"}
		},
		wantStop:  true,
		wantEvent: "Normal Drained Stopped: instancetype h100 is being deleted",
	}, {
		name: "a held type leaves running Instances alone",
		typ:  func(t *v1alpha1.InstanceType) { t.Spec.Hold = v1alpha1.HoldNew },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			typ := h100()
			tc.typ(typ)
			f := newFixture(t, Options{}, inst, typ, readyPod(t, inst), gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001)))
			f.sync()

			got := f.instance()
			if got.Spec.Stopped != tc.wantStop {
				t.Errorf("spec.stopped %v, want %v", got.Spec.Stopped, tc.wantStop)
			}
			events := f.events()
			if !tc.wantStop {
				if len(f.deletes("pods")) != 0 || f.wrote("update", "instances") || hasEvent(events, "Normal Drained") {
					t.Errorf("a held type touched a running Instance: writes %v events %v", f.writes(), events)
				}
				f.wantPhase(v1alpha1.InstanceReady, ReasonPodReady)
				return
			}
			if !slices.Contains(events, tc.wantEvent) {
				t.Errorf("events %v, want %q", events, tc.wantEvent)
			}
			if diff := cmp.Diff([]types.UID{"pod-1"}, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			f.wantPhase(v1alpha1.InstanceStopping, ReasonStopping)
		})
	}
}

func refusedPod(t *testing.T, inst *v1alpha1.Instance, uid types.UID) *corev1.Pod {
	pod := renderedPod(t, inst, h100(), nil, uid)
	pod.Status = corev1.PodStatus{Phase: corev1.PodFailed, Reason: podAdmissionErrorReason, Message: "Allocate failed due to no healthy devices"}
	return pod
}

func TestSyncAdmissionRefusals(t *testing.T) {
	inst := running()
	f := newFixture(t, Options{AdmissionBackoff: 10 * time.Second, AdmissionWindow: time.Minute},
		inst, h100(), ownedService(inst, nodePort("jupyter", 8888, 30001)))
	start := f.clock

	// Each step is a sync at a moment (seconds since the first refusal)
	// with the Pod of that UID failed in the cache.
	for _, step := range []struct {
		at         time.Duration
		pod        types.UID
		wantAfter  time.Duration
		wantDelete bool
		wantEvent  string
		wantPhase  v1alpha1.InstancePhase
		wantReason string
		wantMsg    string
	}{
		{at: 0, pod: "p1", wantAfter: 10 * time.Second, wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonRebuilding},
		{at: 4 * time.Second, pod: "p1", wantAfter: 6 * time.Second, wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonRebuilding},
		{at: 10 * time.Second, pod: "p1", wantDelete: true, wantEvent: "Warning UnexpectedAdmissionError The kubelet refused Pod train at admission (Allocate failed due to no healthy devices); rebuilding it (attempt 1)",
			wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonRebuilding},
		// The second Pod waits twice as long.
		{at: 11 * time.Second, pod: "p2", wantAfter: 20 * time.Second, wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonRebuilding},
		{at: 31 * time.Second, pod: "p2", wantDelete: true, wantEvent: "Warning UnexpectedAdmissionError The kubelet refused Pod train at admission (Allocate failed due to no healthy devices); rebuilding it (attempt 2)",
			wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonRebuilding},
		// The third would wait 40s, past the minute: the Pod stays failed.
		{at: 32 * time.Second, pod: "p3", wantEvent: "Warning UnexpectedAdmissionError Gave up after 2 rebuilds in 1m0s: Allocate failed due to no healthy devices",
			wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonAdmissionError,
			wantMsg: "the kubelet refused the Pod at admission and 2 rebuilds did not help: Allocate failed due to no healthy devices; stop and start the Instance to try again"},
		{at: 5 * time.Minute, pod: "p3", wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonAdmissionError},
	} {
		f.clock = start.Add(step.at)
		f.catchUp()
		if p := f.pod(); p == nil || p.UID != step.pod {
			if p != nil {
				f.drop(p)
			}
			f.set(refusedPod(t, inst, step.pod))
			f.kube.ClearActions()
		}
		after := f.sync()

		if after != step.wantAfter {
			t.Errorf("at %s: requeue after %s, want %s", step.at, after, step.wantAfter)
		}
		var wantDeletes []types.UID
		if step.wantDelete {
			wantDeletes = []types.UID{step.pod}
		}
		if diff := cmp.Diff(wantDeletes, f.deletes("pods")); diff != "" {
			t.Errorf("at %s: Pod deletes by UID (-want +got):\n%s", step.at, diff)
		}
		events := f.events()
		if step.wantEvent != "" && !slices.Contains(events, step.wantEvent) {
			t.Errorf("at %s: events %v, want %q", step.at, events, step.wantEvent)
		}
		if step.wantEvent == "" && hasEvent(events, "Warning UnexpectedAdmissionError") {
			t.Errorf("at %s: events %v, want no new admission event", step.at, events)
		}
		got := f.wantPhase(step.wantPhase, step.wantReason)
		if step.wantMsg != "" && got.Status.Message != step.wantMsg {
			t.Errorf("at %s: message\n got %q\nwant %q", step.at, got.Status.Message, step.wantMsg)
		}
	}

	// A stop forgets the refusals: the next start gets a new window.
	stopped := f.instance()
	stopped.Spec.Stopped = true
	f.set(stopped)
	f.sync()
	if _, ok := f.c.failures[inst.UID]; ok {
		t.Error("the stop did not forget the refusals")
	}
	f.catchUp()
	started := f.instance()
	started.Spec.Stopped = false
	f.set(started)
	if p := f.pod(); p != nil {
		f.drop(p)
	}
	f.set(refusedPod(t, inst, "p4"))
	f.clock = start.Add(6 * time.Minute)
	if after := f.sync(); after != 10*time.Second {
		t.Errorf("after a stop: requeue after %s, want a fresh 10s", after)
	}
	f.wantPhase(v1alpha1.InstanceStarting, ReasonRebuilding)
}

func TestSyncDeletion(t *testing.T) {
	terminating := func(t *testing.T, inst *v1alpha1.Instance) *corev1.Pod {
		pod := readyPod(t, inst)
		pod.DeletionTimestamp = &started
		return pod
	}
	for _, tc := range []struct {
		name      string
		finalizer bool
		pod       func(*testing.T, *v1alpha1.Instance) *corev1.Pod
		svc       bool
		// unseenPod is in the API server but not yet in the cache.
		unseenPod func(*testing.T, *v1alpha1.Instance) *corev1.Pod
		// unseenSvc is a Service in the API server only: made by the
		// last sync before the deletion, its event not yet arrived.
		unseenSvc     bool
		wantPodDelete bool
		wantSvcDelete bool
		wantFinalizer bool
	}{
		{name: "the Pod and the Service go together", finalizer: true, pod: readyPod, svc: true, wantPodDelete: true, wantSvcDelete: true, wantFinalizer: true},
		{name: "a terminating Pod is not deleted again", finalizer: true, pod: terminating, svc: true, wantSvcDelete: true, wantFinalizer: true},
		{name: "a Pod only the API server has seen keeps the Instance", finalizer: true, unseenPod: readyPod, wantFinalizer: true},
		{name: "with the Pod gone the Service goes, and the Instance with it", finalizer: true, svc: true, wantSvcDelete: true},
		{name: "a Service only the API server has seen goes before the Instance", finalizer: true, unseenSvc: true, wantSvcDelete: true, wantFinalizer: true},
		{name: "then the Instance may go", finalizer: true},
		{name: "without the finalizer nothing is ours to do", pod: readyPod, svc: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			inst.DeletionTimestamp = &started
			if !tc.finalizer {
				inst.Finalizers = []string{"someone-else"}
			}
			objs := []runtime.Object{inst, h100()}
			if tc.pod != nil {
				objs = append(objs, tc.pod(t, inst))
			}
			if tc.svc {
				objs = append(objs, ownedService(inst, nodePort("jupyter", 8888, 30001)))
			}
			f := newFixture(t, Options{}, objs...)
			if tc.unseenPod != nil {
				if err := f.kube.Tracker().Add(tc.unseenPod(t, inst)); err != nil {
					t.Fatal(err)
				}
			}
			if tc.unseenSvc {
				if err := f.kube.Tracker().Add(ownedService(inst, nodePort("jupyter", 8888, 30001))); err != nil {
					t.Fatal(err)
				}
			}
			after := f.sync()
			if tc.unseenSvc && after == 0 {
				t.Error("no look again after deleting a Service the informer never saw; its events may never come")
			}

			if !tc.finalizer {
				if w := f.writes(); len(w) != 0 {
					t.Errorf("writes %v, want none", w)
				}
				return
			}
			var wantPods, wantSvcs []types.UID
			if tc.wantPodDelete {
				wantPods = []types.UID{"pod-1"}
			}
			if tc.wantSvcDelete {
				wantSvcs = []types.UID{"svc-1"}
			}
			if diff := cmp.Diff(wantPods, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(wantSvcs, f.deletes("services")); diff != "" {
				t.Errorf("Service deletes by UID (-want +got):\n%s", diff)
			}
			if f.wrote("create", "pods") || f.wrote("create", "services") {
				t.Errorf("a deleted Instance got new objects: %v", f.writes())
			}
			got, err := f.kiln.GpuV1alpha1().Instances(key.Namespace).Get(t.Context(), key.Name, metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				if tc.wantFinalizer {
					t.Fatal("the Instance went before its Pod and Service")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if has := slices.Contains(got.Finalizers, Finalizer); has != tc.wantFinalizer {
				t.Errorf("finalizers %v, want ours kept: %v", got.Finalizers, tc.wantFinalizer)
			}
			if tc.pod != nil {
				f.wantPhase(v1alpha1.InstanceDeleting, ReasonDeleting)
			}
		})
	}
}

func TestSyncCannotRun(t *testing.T) {
	pinned := func(i *v1alpha1.Instance) { i.Spec.NodeName = "gpu-h100-1" }
	for _, tc := range []struct {
		name        string
		setup       func(*v1alpha1.Instance)
		objs        []runtime.Object
		wantMessage string
	}{{
		name:        "a missing InstanceType",
		wantMessage: `instancetype "h100" does not exist; recreate it or delete this Instance`,
	}, {
		name:        "pinned to a missing node",
		setup:       pinned,
		objs:        []runtime.Object{h100()},
		wantMessage: `spec.nodeName: node "gpu-h100-1" does not exist; pin the Instance to a node of instancetype "h100" or clear spec.nodeName`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			if tc.setup != nil {
				tc.setup(inst)
			}
			f := newFixture(t, Options{}, append(tc.objs, inst)...)
			f.sync()

			if f.wrote("create", "pods") {
				t.Error("a Pod was created for an Instance that cannot run")
			}
			got := f.wantPhase(v1alpha1.InstanceFailed, ReasonInvalid)
			if got.Status.Message != tc.wantMessage {
				t.Errorf("message\n got %q\nwant %q", got.Status.Message, tc.wantMessage)
			}
		})
	}
}

func TestSyncPinned(t *testing.T) {
	inst := running()
	inst.Spec.NodeName = "gpu-h100-1"
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-1", Labels: map[string]string{corev1.LabelHostname: "ip-10-0-0-7"}}}
	f := newFixture(t, Options{}, inst, h100(), node)
	f.sync()

	pod := f.pod()
	if pod == nil {
		t.Fatal("no Pod created")
	}
	want := map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", corev1.LabelHostname: "ip-10-0-0-7"}
	if diff := cmp.Diff(want, pod.Spec.NodeSelector); diff != "" || pod.Spec.NodeName != "" {
		t.Errorf("nodeSelector (-want +got):\n%s\nnodeName %q", diff, pod.Spec.NodeName)
	}
}

// A rebuilt Pod that is Ready for a moment does not reset the count of
// refusals while their window lasts, so a Pod flapping between Ready and
// refused still gets a bounded number of rebuilds; after the window, Ready
// forgives them.
func TestSyncReadyInsideWindowKeepsRefusals(t *testing.T) {
	inst := running()
	f := newFixture(t, Options{AdmissionBackoff: 10 * time.Second, AdmissionWindow: time.Minute},
		inst, h100(), ownedService(inst, nodePort("jupyter", 8888, 30001)), refusedPod(t, inst, "p1"))
	start := f.clock
	f.sync()
	f.clock = start.Add(10 * time.Second)
	f.sync()
	if d := f.deletes("pods"); len(d) != 1 {
		t.Fatalf("the refused Pod was not rebuilt: deletes %v", d)
	}
	for _, step := range []struct {
		at       time.Duration
		wantKept bool
	}{
		{at: 11 * time.Second, wantKept: true},
		{at: 2 * time.Minute, wantKept: false},
	} {
		f.clock = start.Add(step.at)
		f.catchUp()
		if p := f.pod(); p != nil {
			f.drop(p)
		}
		ready := readyPod(t, inst)
		ready.UID = "p2"
		f.set(ready)
		f.sync()
		_, kept := f.c.failures[inst.UID]
		if kept != step.wantKept {
			t.Errorf("at %s with the Pod Ready: refusals kept %v, want %v", step.at, kept, step.wantKept)
		}
	}
}

// A stopped or deleted Instance whose Pod stays Terminating (a kubelet
// that never confirms) looks again when the Pod should be gone, and then
// says so in its Ready condition and a Warning Event, once, and keeps
// looking; its finalizer stays.
func TestSyncPodOverdue(t *testing.T) {
	for _, tc := range []struct {
		name  string
		edit  func(*v1alpha1.Instance)
		phase v1alpha1.InstancePhase
		was   string
	}{
		{name: "stopped", edit: func(i *v1alpha1.Instance) { i.Spec.Stopped = true }, phase: v1alpha1.InstanceStopping, was: ReasonStopping},
		{name: "deleted", edit: func(i *v1alpha1.Instance) { i.DeletionTimestamp = &started }, phase: v1alpha1.InstanceDeleting, was: ReasonDeleting},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			tc.edit(inst)
			pod := readyPod(t, inst)
			// Deleted at 9:00 with 30 s of grace.
			pod.DeletionTimestamp = ptr.To(metav1.NewTime(started.Add(30 * time.Second)))
			f := newFixture(t, Options{}, inst, h100(), pod, gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001)))

			f.clock = started.Add(10 * time.Second)
			if after := f.sync(); after != 50*time.Second {
				t.Errorf("requeue in %v, want when the Pod is overdue (50s)", after)
			}
			f.wantPhase(tc.phase, tc.was)
			f.events()

			f.catchUp()
			f.clock = started.Add(2 * time.Minute)
			if after := f.sync(); after != podStuckRecheck {
				t.Errorf("requeue in %v, want %v: it keeps looking", after, podStuckRecheck)
			}
			got := f.wantPhase(tc.phase, ReasonPodTerminating)
			if want := "Pod train on gpu-1 was to be gone by 2026-03-01T09:00:30Z and is still Terminating"; !strings.HasPrefix(got.Status.Message, want) {
				t.Errorf("message %q, want it to start %q", got.Status.Message, want)
			}
			if e := f.events(); !hasEvent(e, "Warning PodTerminating Pod train") {
				t.Errorf("events %v, want a Warning", e)
			}
			if len(f.deletes("pods")) != 0 {
				t.Errorf("deleted the Terminating Pod again: %v", f.writes())
			}
			f.catchUp()
			f.sync()
			if e := f.events(); len(e) != 0 {
				t.Errorf("told again: %v", e)
			}
			if !slices.Contains(f.instance().Finalizers, Finalizer) {
				t.Error("finalizer removed while the Pod is there")
			}
		})
	}
}
