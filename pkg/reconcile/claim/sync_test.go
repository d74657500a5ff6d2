package claim

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	"kiln.dev/kiln/pkg/reconcile/queue"
	"kiln.dev/kiln/pkg/reconcile/reconciletest"
)

var (
	key   = cache.ObjectName{Namespace: tenant, Name: "train"}
	start = time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	grace = 5 * time.Minute
)

// fixture is a controller over fake clientsets whose informers are never
// started: the tests fill the indexers themselves, so a sync sees exactly
// the cache they describe, and catchUp plays the informers' part.
type fixture struct {
	inf      queue.Informers
	t        testing.TB
	kube     *kubefake.Clientset
	kiln     *kilnfake.Clientset
	recorder *record.FakeRecorder
	c        *Controller
	clock    time.Time

	claims, instances, types, budgets, pods, nodes, nodeDevices cache.Indexer
}

func newFixture(t testing.TB, objs ...runtime.Object) *fixture {
	t.Helper()
	var kubeObjs, kilnObjs []runtime.Object
	for _, o := range objs {
		if isKiln(o) {
			kilnObjs = append(kilnObjs, o)
		} else {
			kubeObjs = append(kubeObjs, o)
		}
	}
	f := &fixture{
		t:        t,
		kube:     kubefake.NewClientset(kubeObjs...),
		kiln:     kilnfake.NewClientset(kilnObjs...),
		recorder: record.NewFakeRecorder(100),
		clock:    start,
	}
	// As kube-apiserver does: a new Claim's quiet wait counts from it.
	f.kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
		if p, ok := a.(clienttesting.CreateAction).GetObject().(*corev1.Pod); ok && p.CreationTimestamp.IsZero() {
			p.CreationTimestamp = metav1.NewTime(f.clock)
		}
		return false, nil, nil
	})
	kubeInf := kubeinformers.NewSharedInformerFactory(f.kube, 0)
	kilnInf := kilninformers.NewSharedInformerFactory(f.kiln, 0)
	f.inf = queue.Informers{Kube: kubeInf, Kiln: kilnInf}
	gpu := kilnInf.Gpu().V1alpha1()
	claims, instances, instanceTypes, budgets := gpu.Claims(), gpu.Instances(), gpu.InstanceTypes(), gpu.Budgets()
	pods, nodes := kubeInf.Core().V1().Pods(), kubeInf.Core().V1().Nodes()
	c, err := NewController(f.kube, f.kiln, f.inf, f.recorder, Options{LostGrace: grace})
	if err != nil {
		t.Fatal(err)
	}
	c.now = func() time.Time { return f.clock }
	f.c = c
	f.claims, f.instances = claims.Informer().GetIndexer(), instances.Informer().GetIndexer()
	f.types, f.budgets = instanceTypes.Informer().GetIndexer(), budgets.Informer().GetIndexer()
	f.pods, f.nodes = pods.Informer().GetIndexer(), nodes.Informer().GetIndexer()
	f.nodeDevices = gpu.NodeDevices().Informer().GetIndexer()
	for _, o := range objs {
		if err := f.indexerFor(o).Add(o); err != nil {
			t.Fatal(err)
		}
	}
	return f
}

func isKiln(o runtime.Object) bool {
	switch o.(type) {
	case *v1alpha1.Claim, *v1alpha1.Instance, *v1alpha1.InstanceType, *v1alpha1.Budget:
		return true
	}
	return false
}

func (f *fixture) indexerFor(o runtime.Object) cache.Indexer {
	i, err := reconciletest.Indexer(f.inf, o)
	if err != nil {
		f.t.Fatal(err)
	}
	return i
}

func (f *fixture) gvrOf(o runtime.Object) schema.GroupVersionResource {
	r, err := reconciletest.Resource(o)
	if err != nil {
		f.t.Fatal(err)
	}
	return r
}

// set puts o in the cache and the client, replacing what was there.
func (f *fixture) set(o runtime.Object) {
	f.t.Helper()
	if err := f.indexerFor(o).Update(o); err != nil {
		f.t.Fatal(err)
	}
	// As the handlers would: the old object's nodes may be others.
	f.c.uses.changedAll()
	tracker := f.kube.Tracker()
	if isKiln(o) {
		tracker = f.kiln.Tracker()
	}
	m := o.(metav1.Object)
	// Replace rather than Update: the field-managed tracker has no schema
	// for Kiln's types to merge with.
	if err := tracker.Delete(f.gvrOf(o), m.GetNamespace(), m.GetName()); err != nil && !apierrors.IsNotFound(err) {
		f.t.Fatal(err)
	}
	if err := tracker.Add(o); err != nil {
		f.t.Fatal(err)
	}
}

// catchUp lets the informers see the Claims and Pods the clients hold
// now, as they would after the watch events of the last sync's writes,
// and forgets the writes and events so far.
func (f *fixture) catchUp() {
	f.t.Helper()
	ctx := f.t.Context()
	claims, err := f.kiln.GpuV1alpha1().Claims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	pods, err := f.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	var items []any
	for i := range claims.Items {
		items = append(items, &claims.Items[i])
	}
	if err := f.claims.Replace(items, ""); err != nil {
		f.t.Fatal(err)
	}
	items = nil
	for i := range pods.Items {
		items = append(items, &pods.Items[i])
	}
	if err := f.pods.Replace(items, ""); err != nil {
		f.t.Fatal(err)
	}
	f.c.uses.changedAll()
	f.kube.ClearActions()
	f.kiln.ClearActions()
	f.events()
}

func (f *fixture) syncKey(k cache.ObjectName) time.Duration {
	f.t.Helper()
	after, err := f.c.sync(f.t.Context(), k)
	if err != nil {
		f.t.Fatalf("sync %s: %v", k, err)
	}
	return after
}

func (f *fixture) sync() time.Duration { f.t.Helper(); return f.syncKey(key) }

// claim returns the Claim as the client holds it.
func (f *fixture) claim(name string) *v1alpha1.Claim {
	f.t.Helper()
	cl, err := f.kiln.GpuV1alpha1().Claims(tenant).Get(f.t.Context(), name, metav1.GetOptions{})
	if err != nil {
		f.t.Fatal(err)
	}
	return cl
}

// pod returns the Pod the client holds, nil when there is none.
func (f *fixture) pod(name string) *corev1.Pod {
	f.t.Helper()
	p, err := f.kube.CoreV1().Pods(tenant).Get(f.t.Context(), name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		f.t.Fatal(err)
	}
	return p
}

// bind is the scheduler binding a Pod the client holds, seen by the informer.
func (f *fixture) bind(name, node string) {
	f.t.Helper()
	p := f.pod(name)
	if p == nil {
		f.t.Fatalf("no Pod %s to bind", name)
	}
	p.Spec.NodeName = node
	f.set(p)
}

// events drains the events recorded so far.
func (f *fixture) events() []string { return reconciletest.Events(f.recorder) }

// writes lists the writes both clients received, as "verb resource[/sub]".
func (f *fixture) writes() []string {
	return reconciletest.Writes(append(f.kube.Actions(), f.kiln.Actions()...)...)
}

// podDelete is one delete of a Pod as the controller asked for it.
type podDelete struct {
	Name  string
	UID   types.UID
	Grace *int64
}

func (f *fixture) podDeletes() []podDelete {
	var out []podDelete
	for _, a := range f.kube.Actions() {
		d, ok := a.(clienttesting.DeleteActionImpl)
		if !ok || d.GetResource().Resource != "pods" {
			continue
		}
		pd := podDelete{Name: d.GetName(), Grace: d.DeleteOptions.GracePeriodSeconds}
		if p := d.DeleteOptions.Preconditions; p != nil && p.UID != nil {
			pd.UID = *p.UID
		}
		out = append(out, pd)
	}
	return out
}

// wantState checks a Claim's phase and Waiting reason ("" for none).
func wantState(t *testing.T, cl *v1alpha1.Claim, phase v1alpha1.ClaimPhase, reason string) {
	t.Helper()
	if cl.Status.Phase != phase || handover.WaitingReason(cl) != reason {
		t.Errorf("claim %s is %q waiting %q (%s), want %q waiting %q", cl.Name, cl.Status.Phase, handover.WaitingReason(cl), handover.WaitingMessage(cl), phase, reason)
	}
}

func hasEvent(events []string, prefix string) bool {
	return slices.ContainsFunc(events, func(e string) bool { return strings.HasPrefix(e, prefix) })
}

// newClaim is a finalized, Pending claim for n cards, an hour old.
func newClaim(name string, n int32, opts ...func(*v1alpha1.Claim)) *v1alpha1.Claim {
	cl := claim(name, n, opts...)
	cl.Generation = 1
	cl.CreationTimestamp = metav1.NewTime(start.Add(-time.Hour))
	cl.Finalizers = []string{v1alpha1.ClaimFinalizer, v1alpha1.LedgerFinalizer}
	return cl
}

func expireAfter(d time.Duration) func(*v1alpha1.Claim) {
	return func(cl *v1alpha1.Claim) { cl.Spec.ExpireAfter = &metav1.Duration{Duration: d} }
}

// held is cl as it stands once Bound on node, and its bound holder.
func held(cl *v1alpha1.Claim, node string) (*v1alpha1.Claim, *corev1.Pod) {
	ask, err := Ask(cl, h100())
	if err != nil {
		panic(err)
	}
	cl.Status = v1alpha1.ClaimStatus{Phase: v1alpha1.ClaimBound, NodeName: node, Devices: devices(cl, ask), ObservedGeneration: cl.Generation}
	if cl.Spec.ExpireAfter != nil {
		cl.Status.ExpiresAt = ptr.To(metav1.NewTime(start.Add(cl.Spec.ExpireAfter.Duration)))
	}
	// Accounted since it was bound.
	cl.Status.Usage = &v1alpha1.Usage{Current: &v1alpha1.UsageRun{PodUID: cl.UID + "@0", InstanceType: cl.Spec.Type,
		Cards: *resource.NewQuantity(int64(ptr.Deref(cl.Spec.Accelerators, 1)), resource.DecimalSI), Since: metav1.NewTime(start)}}
	h := handover.RenderHolder(cl, h100(), node, ask, "pause")
	h.UID = "holder-1"
	h.Spec.NodeName = node
	h.Status.Phase = corev1.PodRunning
	return cl, h
}

// attached is cl as it stands once attached to inst, its holder gone.
func attached(cl *v1alpha1.Claim, node string, inst *v1alpha1.Instance) *v1alpha1.Claim {
	cl, _ = held(cl, node)
	cl.Status.Phase, cl.Status.AttachedTo, cl.Status.ExpiresAt = v1alpha1.ClaimAttached, inst.Name, nil
	return cl
}

// instance is a running Instance of h100 on claim claimName.
func instance(name, claimName string, opts ...func(*v1alpha1.Instance)) *v1alpha1.Instance {
	inst := &v1alpha1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant, UID: types.UID("uid-" + name), CreationTimestamp: metav1.NewTime(start.Add(-time.Minute))},
		Spec:       v1alpha1.InstanceSpec{Type: "h100", ClaimName: claimName},
	}
	for _, o := range opts {
		o(inst)
	}
	return inst
}

func stopped(inst *v1alpha1.Instance) { inst.Spec.Stopped = true }

// instancePod is inst's Pod on its claim, pinned to node and bound there
// unless bound is false, when it is only nominated.
func instancePod(inst *v1alpha1.Instance, node string, bound bool) *corev1.Pod {
	p := pod(inst.Name, "", resources(gpu, 4, corev1.ResourceCPU, 8), onClaim(inst.Spec.ClaimName))
	p.UID = "pod-" + inst.UID
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Instance",
		Name: inst.Name, UID: inst.UID, Controller: ptr.To(true)}}
	p.Spec.Affinity = handover.PinTo(node)
	if bound {
		p.Spec.NodeName = node
	} else {
		p.Status.Phase = corev1.PodPending
		p.Status.NominatedNodeName = node
	}
	return p
}

func notReadyFor(d time.Duration) func(*corev1.Node) {
	return func(n *corev1.Node) {
		n.Status.Conditions = []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionFalse, LastTransitionTime: metav1.NewTime(start.Add(-d))}}
	}
}

// A Pending Claim is placed, held by a Pod the scheduler binds, and Bound
// once that Pod is bound, with its expiry counted from then.
func TestSyncPlacesThenBinds(t *testing.T) {
	cl := newClaim("train", 4, expireAfter(2*time.Hour))
	cl.Finalizers = nil
	f := newFixture(t, cl, h100(), node("gpu-1"), node("gpu-2"), pod("busy", "gpu-2", resources(gpu, 2)))

	if after := f.sync(); after != time.Second {
		t.Errorf("after placing, requeue in %v, want 1s", after)
	}
	got := f.claim("train")
	if !slices.Contains(got.Finalizers, v1alpha1.ClaimFinalizer) {
		t.Errorf("finalizers %v, want %s", got.Finalizers, v1alpha1.ClaimFinalizer)
	}
	// A new Claim's status is not written while the scheduler binds its
	// holder (quietFor): the holder says where it is placed.
	if slices.Contains(f.writes(), "update claims/status") || !equality.Semantic.DeepEqual(got.Status, v1alpha1.ClaimStatus{}) {
		t.Errorf("status %+v written while the holder waits for the scheduler; writes %v", got.Status, f.writes())
	}
	h := f.pod(handover.HolderName(cl))
	if h == nil {
		t.Fatalf("no holder Pod %s; writes %v", handover.HolderName(cl), f.writes())
	}
	if h.Spec.PriorityClassName != v1alpha1.ClaimPriorityClassName || handover.PinnedNode(h) != "gpu-2" || !controlledBy(h, cl) || h.Labels[v1alpha1.LabelClaim] != "train" {
		t.Errorf("holder priority %q pinned to %q labels %v owners %v; want kiln-claim, gpu-2, the claim's label and controller",
			h.Spec.PriorityClassName, handover.PinnedNode(h), h.Labels, h.OwnerReferences)
	}
	if diff := cmp.Diff(quantities(resources(gpu, 4)), quantities(h.Spec.Containers[0].Resources.Requests)); diff != "" {
		t.Errorf("holder requests (-want +got):\n%s", diff)
	}
	if h.Status.NominatedNodeName != "gpu-2" {
		t.Errorf("holder nominatedNodeName %q, want gpu-2", h.Status.NominatedNodeName)
	}
	if events := f.events(); len(events) != 0 {
		t.Errorf("events %v before the holder waited %v", events, quietFor)
	}

	// Its holder's add event, within quietFor: still quiet.
	f.catchUp()
	f.clock = start.Add(quietFor / 2)
	if after := f.sync(); after != quietFor/2 {
		t.Errorf("unbound within quietFor, requeue in %v, want %v", after, quietFor/2)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("wrote %v within quietFor", w)
	}

	// Not bound after quietFor: it says so, and makes no second holder.
	f.clock = start.Add(5 * time.Second)
	if after := f.sync(); after != replaceAfter {
		t.Errorf("while unbound, requeue in %v, want %v", after, replaceAfter)
	}
	if slices.Contains(f.writes(), "create pods") {
		t.Errorf("a second holder was created: %v", f.writes())
	}
	got = f.claim("train")
	wantState(t, got, v1alpha1.ClaimPending, v1alpha1.ClaimReasonScheduling)
	if got.Status.NodeName != "gpu-2" || got.Status.ExpiresAt != nil || len(got.Status.Devices) != 0 || got.Status.ObservedGeneration != 1 {
		t.Errorf("status %+v, want placed on the fuller gpu-2, no devices or expiry yet", got.Status)
	}
	if events := f.events(); !slices.Equal(events, []string{"Normal Scheduling placed on node gpu-2; waiting for the scheduler to bind holder Pod train-hold"}) {
		t.Errorf("events %v", events)
	}

	f.catchUp()
	f.bind(handover.HolderName(cl), "gpu-2")
	f.clock = start.Add(10 * time.Second)
	if after := f.sync(); after != 2*time.Hour {
		t.Errorf("once Bound, requeue in %v, want the 2h to expiry", after)
	}
	got = f.claim("train")
	wantState(t, got, v1alpha1.ClaimBound, "")
	if got.Status.ExpiresAt == nil || !got.Status.ExpiresAt.Time.Equal(f.clock.Add(2*time.Hour)) {
		t.Errorf("expiresAt %v, want %v", got.Status.ExpiresAt, f.clock.Add(2*time.Hour))
	}
	if got.Status.NodeName != "gpu-2" || len(got.Status.Devices) != 4 {
		t.Errorf("nodeName %q devices %v, want gpu-2 and 4 devices", got.Status.NodeName, got.Status.Devices)
	}
	if events := f.events(); !slices.Equal(events, []string{"Normal Bound Holding 4 nvidia.com/gpu on node gpu-2"}) {
		t.Errorf("events %v", events)
	}

	// Steady: nothing changes, nothing is written.
	f.catchUp()
	f.sync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a second sync of a Bound claim wrote %v", w)
	}
}

// A controller clock behind the API server's reads a new holder's age as
// negative: the Claim stays quiet, but looks again within quietFor.
func TestSyncQuietWaitBoundedUnderSkew(t *testing.T) {
	f := newFixture(t, newClaim("train", 4), h100(), node("gpu-1"))
	f.sync()
	f.catchUp()
	f.clock = start.Add(-time.Minute)
	if after := f.sync(); after != quietFor {
		t.Errorf("with the clock a minute behind, requeue in %v, want %v", after, quietFor)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("wrote %v", w)
	}
}

// The informer may not show a placement made moments ago: the next
// placement must still count it, or two holders would share the room.
func TestSyncCountsPlacementsNotYetSeen(t *testing.T) {
	f := newFixture(t, newClaim("train", 6), newClaim("other", 6), h100(), node("gpu-1"))
	f.sync()
	if h := f.pod(handover.HolderName(f.claim("train"))); h == nil || handover.PinnedNode(h) != "gpu-1" {
		t.Fatalf("train not placed on gpu-1: holder %v", h)
	}
	f.syncKey(cache.ObjectName{Namespace: tenant, Name: "other"})
	wantState(t, f.claim("other"), v1alpha1.ClaimPending, v1alpha1.ClaimReasonCapacity)

	// Seen, it is counted as the hold it is.
	f.catchUp()
	f.syncKey(cache.ObjectName{Namespace: tenant, Name: "other"})
	if got := f.claim("other"); got.Status.NodeName != "" || f.pod(handover.HolderName(got)) != nil {
		t.Errorf("other placed on %q beside train's hold", got.Status.NodeName)
	}
}

// A holder whose create fails leaves nothing assumed: the Claim is placed
// again, and another Claim may take the room meanwhile.
func TestSyncHolderCreateFails(t *testing.T) {
	f := newFixture(t, newClaim("train", 6), newClaim("other", 6), h100(), node("gpu-1"))
	failing := true
	f.kube.PrependReactor("create", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
		return failing, nil, errors.New("kube-apiserver is away")
	})
	if _, err := f.c.sync(t.Context(), key); err == nil {
		t.Fatal("sync with a failing holder create: no error for the queue to retry")
	}
	failing = false
	f.syncKey(cache.ObjectName{Namespace: tenant, Name: "other"})
	if h := f.pod(handover.HolderName(f.claim("other"))); h == nil || handover.PinnedNode(h) != "gpu-1" {
		t.Errorf("other not placed where train's failed placement was assumed: holder %v", h)
	}
	f.catchUp()
	f.sync()
	wantState(t, f.claim("train"), v1alpha1.ClaimPending, v1alpha1.ClaimReasonCapacity)
}

// A Claim whose holder was made but whose status never said where (the
// write lost, the controller restarted) holds the node its holder is
// pinned to: placements read Claims by node and by their pinned Pods,
// and this one is found only through its Pod.
func TestSyncCountsHolderPinnedBeforeStatus(t *testing.T) {
	train := newClaim("train", 6)
	holder := handover.RenderHolder(train, h100(), "gpu-1", resources(gpu, 6), "pause")
	holder.UID = "holder-1"
	f := newFixture(t, train, holder, newClaim("other", 6), h100(), node("gpu-1"))
	f.syncKey(cache.ObjectName{Namespace: tenant, Name: "other"})
	if got := f.claim("other"); got.Status.NodeName != "" || f.pod(handover.HolderName(got)) != nil {
		t.Errorf("other placed on %q beside train's holder", got.Status.NodeName)
	}
}

// A holder the scheduler cannot bind is given up after replaceAfter, and
// the Claim is placed again.
func TestSyncUnschedulableHolder(t *testing.T) {
	for _, tc := range []struct {
		name        string
		since       time.Duration
		wantNode    string
		wantReason  string
		wantDeleted bool
	}{
		{"within the wait it keeps its node", 10 * time.Second, "gpu-1", v1alpha1.ClaimReasonScheduling, false},
		{"past it the holder goes and the claim is placed again", replaceAfter, "", v1alpha1.ClaimReasonCapacity, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			cl.Status = v1alpha1.ClaimStatus{Phase: v1alpha1.ClaimPending, NodeName: "gpu-1", ObservedGeneration: 1}
			h.Spec.NodeName = ""
			h.Status = corev1.PodStatus{Phase: corev1.PodPending, NominatedNodeName: "gpu-1", Conditions: []corev1.PodCondition{{
				Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: corev1.PodReasonUnschedulable,
				Message: "0/1 nodes are available: 1 Insufficient nvidia.com/gpu.", LastTransitionTime: metav1.NewTime(start.Add(-tc.since)),
			}}}
			f := newFixture(t, cl, h, h100(), node("gpu-1"))
			f.sync()

			got := f.claim("train")
			wantState(t, got, v1alpha1.ClaimPending, tc.wantReason)
			if got.Status.NodeName != tc.wantNode {
				t.Errorf("nodeName %q, want %q", got.Status.NodeName, tc.wantNode)
			}
			if !strings.Contains(handover.WaitingMessage(got), "1 Insufficient nvidia.com/gpu") {
				t.Errorf("message %q, want the scheduler's word", handover.WaitingMessage(got))
			}
			var want []podDelete
			if tc.wantDeleted {
				want = []podDelete{{Name: h.Name, UID: h.UID}}
			}
			if diff := cmp.Diff(want, f.podDeletes()); diff != "" {
				t.Errorf("Pod deletes (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSyncExpiry(t *testing.T) {
	for _, tc := range []struct {
		name      string
		now       time.Duration // after the claim's expiresAt
		wantPhase v1alpha1.ClaimPhase
		wantAfter time.Duration
	}{
		{"before expiresAt it waits for the time left", -90 * time.Second, v1alpha1.ClaimBound, 90 * time.Second},
		{"at expiresAt it expires", 0, v1alpha1.ClaimExpired, 0},
		{"past expiresAt it expires", time.Minute, v1alpha1.ClaimExpired, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4, expireAfter(time.Hour)), "gpu-1")
			f := newFixture(t, cl, h, h100(), node("gpu-1"))
			f.clock = cl.Status.ExpiresAt.Add(tc.now)
			if after := f.sync(); after != tc.wantAfter {
				t.Errorf("requeue in %v, want %v", after, tc.wantAfter)
			}
			got := f.claim("train")
			wantState(t, got, tc.wantPhase, "")
			deletes, events := f.podDeletes(), f.events()
			if tc.wantPhase == v1alpha1.ClaimBound {
				if len(deletes) != 0 || len(events) != 0 || got.Status.NodeName != "gpu-1" {
					t.Errorf("before expiry: deletes %v events %v nodeName %q", deletes, events, got.Status.NodeName)
				}
				return
			}
			if diff := cmp.Diff([]podDelete{{Name: h.Name, UID: h.UID}}, deletes); diff != "" {
				t.Errorf("holder deletes (-want +got):\n%s", diff)
			}
			// Until its holder is gone, it names what the holder held, and
			// so stays charged.
			if got.Status.NodeName != "gpu-1" || len(got.Status.Devices) != 4 {
				t.Errorf("expired status %+v no longer names the node and devices while its holder is there", got.Status)
			}
			if !hasEvent(events, "Normal Expired No Instance attached for 1h0m0s") {
				t.Errorf("events %v, want Expired", events)
			}
			f.catchUp()
			f.sync()
			got = f.claim("train")
			wantState(t, got, v1alpha1.ClaimExpired, "")
			if got.Status.NodeName != "" || got.Status.Devices != nil {
				t.Errorf("expired status %+v still names the node or devices once its holder is gone", got.Status)
			}

			// Expired is final: it is not placed again.
			f.catchUp()
			f.clock = f.clock.Add(time.Hour)
			f.sync()
			if w := f.writes(); len(w) != 0 {
				t.Errorf("an Expired claim wrote %v", w)
			}
		})
	}
}

// TestSyncExpireAfterEdited: lengthening expireAfter on a Bound Claim
// restarts the clock from the edit, rather than keeping the old deadline.
func TestSyncExpireAfterEdited(t *testing.T) {
	cl, h := held(newClaim("train", 4, expireAfter(time.Hour)), "gpu-1")
	f := newFixture(t, cl, h, h100(), node("gpu-1"))
	f.clock = start.Add(50 * time.Minute)
	edited := f.claim("train").DeepCopy()
	edited.Spec.ExpireAfter = &metav1.Duration{Duration: 8 * time.Hour}
	edited.Generation++
	f.set(edited)
	if after := f.sync(); after != 8*time.Hour {
		t.Errorf("requeue in %v, want 8h from the edit", after)
	}
	got := f.claim("train")
	wantState(t, got, v1alpha1.ClaimBound, "")
	if want := f.clock.Add(8 * time.Hour); got.Status.ExpiresAt == nil || !got.Status.ExpiresAt.Time.Equal(want) {
		t.Errorf("expiresAt %v, want %v", got.Status.ExpiresAt, want)
	}
	f.catchUp()
	f.clock = f.clock.Add(time.Hour)
	if after := f.sync(); after != 7*time.Hour {
		t.Errorf("an hour after the edit: requeue in %v, want 7h", after)
	}
}

// TestSyncLostHolderSeenLate: the sync after a Claim gave up its lost node
// may still see the deleted holder; it neither tells NodeLost again nor
// takes the holder for a placement.
func TestSyncLostHolderSeenLate(t *testing.T) {
	cl, h := held(newClaim("train", 4), "gpu-1")
	f := newFixture(t, cl, h, h100(), node("gpu-2"))
	f.sync()
	if !hasEvent(f.events(), "Warning NodeLost") {
		t.Fatal("no NodeLost on the first sync")
	}
	f.set(f.claim("train"))
	if err := f.pods.Add(h); err != nil {
		t.Fatal(err)
	}
	f.c.podMoved(h)
	f.kube.ClearActions()
	f.sync()
	if events := f.events(); hasEvent(events, "Warning NodeLost") {
		t.Errorf("told NodeLost again: %v", events)
	}
	got := f.claim("train")
	wantState(t, got, v1alpha1.ClaimPending, v1alpha1.ClaimReasonCapacity)
	if got.Status.NodeName != "" {
		t.Errorf("took the stale holder for a placement on %q", got.Status.NodeName)
	}
}

func TestSyncNodeLost(t *testing.T) {
	job := instance("job", "train")
	for _, tc := range []struct {
		name string
		// node is gpu-1 as it stands, nil when deleted.
		node     *corev1.Node
		attached bool
		wantPh   v1alpha1.ClaimPhase
		wantWhy  string
		// wantAfter is the requeue; wantEvent the NodeLost Warning, if any.
		wantAfter time.Duration
		wantEvent string
	}{{
		name:      "NotReady within the grace: still Bound, looked at again when it ends",
		node:      node("gpu-1", notReadyFor(time.Minute)),
		wantPh:    v1alpha1.ClaimBound,
		wantAfter: 4 * time.Minute,
	}, {
		name:      "NotReady past the grace: lost, and placed again",
		node:      node("gpu-1", notReadyFor(6*time.Minute)),
		wantPh:    v1alpha1.ClaimPending,
		wantWhy:   v1alpha1.ClaimReasonCapacity,
		wantEvent: "Warning NodeLost Node gpu-1 was NotReady for longer than 5m0s; the cards held there are lost",
	}, {
		name:      "deleted: lost at once, and placed again",
		wantPh:    v1alpha1.ClaimPending,
		wantWhy:   v1alpha1.ClaimReasonCapacity,
		wantEvent: "Warning NodeLost Node gpu-1 was deleted; the cards held there are lost",
	}, {
		name:      "attached, NotReady within the grace: still Attached",
		node:      node("gpu-1", notReadyFor(time.Minute)),
		attached:  true,
		wantPh:    v1alpha1.ClaimAttached,
		wantAfter: 4 * time.Minute,
	}, {
		name:     "attached, NotReady past the grace: Lost while the Instance runs",
		node:     node("gpu-1", notReadyFor(6*time.Minute)),
		attached: true,
		wantPh:   v1alpha1.ClaimLost,
		wantWhy:  ReasonLost,
		wantEvent: "Warning NodeLost Node gpu-1 was NotReady for longer than 5m0s; the cards held there are lost; " +
			"the Claim is placed again once Instance job stops",
	}, {
		name:      "attached, deleted: Lost while the Instance runs",
		attached:  true,
		wantPh:    v1alpha1.ClaimLost,
		wantWhy:   ReasonLost,
		wantEvent: "Warning NodeLost Node gpu-1 was deleted; the cards held there are lost; the Claim is placed again once Instance job stops",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			objs := []runtime.Object{h100(), node("gpu-2")}
			if tc.attached {
				objs = append(objs, attached(cl, "gpu-1", job), job, instancePod(job, "gpu-1", true))
			} else {
				objs = append(objs, cl, h)
			}
			if tc.node != nil {
				objs = append(objs, tc.node)
			}
			f := newFixture(t, objs...)
			if after := f.sync(); after != tc.wantAfter {
				t.Errorf("requeue in %v, want %v", after, tc.wantAfter)
			}
			got := f.claim("train")
			wantState(t, got, tc.wantPh, tc.wantWhy)
			events := f.events()
			if (tc.wantEvent == "" && hasEvent(events, "Warning NodeLost")) || (tc.wantEvent != "" && !slices.Contains(events, tc.wantEvent)) {
				t.Errorf("events %v, want NodeLost %q", events, tc.wantEvent)
			}
			var wantDeletes []podDelete
			if tc.wantPh == v1alpha1.ClaimPending {
				// No kubelet is left to end it gracefully.
				wantDeletes = []podDelete{{Name: h.Name, UID: h.UID, Grace: ptr.To[int64](0)}}
				if got.Status.NodeName != "" || got.Status.Devices != nil {
					t.Errorf("status %+v still holds on the lost node", got.Status)
				}
			}
			if diff := cmp.Diff(wantDeletes, f.podDeletes()); diff != "" {
				t.Errorf("holder deletes (-want +got):\n%s", diff)
			}
			if tc.wantPh == v1alpha1.ClaimLost && got.Status.AttachedTo != "job" {
				t.Errorf("a Lost claim forgot its Instance: attachedTo %q", got.Status.AttachedTo)
			}

			f.catchUp()
			f.sync()
			events = f.events()
			if hasEvent(events, "Warning NodeLost") {
				t.Errorf("the next sync told NodeLost again: %v", events)
			}
			switch tc.wantPh {
			case v1alpha1.ClaimPending:
				if got := f.claim("train"); got.Status.NodeName != "gpu-2" {
					t.Errorf("the next sync placed it on %q, want gpu-2", got.Status.NodeName)
				}
			default:
				if w := f.writes(); len(w) != 0 {
					t.Errorf("the next sync wrote %v", w)
				}
			}
		})
	}
}

func TestSyncAttach(t *testing.T) {
	job := instance("job", "train")
	other := instance("other", "train")
	for _, tc := range []struct {
		name string
		// pod is the Instance's Pod, if any.
		pod        *corev1.Pod
		wantDelete bool
	}{
		{name: "no Pod yet: the holder keeps the cards"},
		{name: "a Pod only nominated elsewhere: the holder keeps them", pod: instancePod(job, "gpu-2", false)},
		{name: "a Pod of the same name not controlled by the Instance: the holder keeps them",
			pod: func() *corev1.Pod { p := instancePod(other, "gpu-1", true); p.Name = "job"; return p }()},
		{name: "the Pod nominated to the node: the holder goes", pod: instancePod(job, "gpu-1", false), wantDelete: true},
		{name: "the Pod bound there: the holder goes", pod: instancePod(job, "gpu-1", true), wantDelete: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4, expireAfter(time.Hour)), "gpu-1")
			objs := []runtime.Object{cl, h, job, h100(), node("gpu-1"), node("gpu-2")}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			f := newFixture(t, objs...)
			f.sync()

			got := f.claim("train")
			wantState(t, got, v1alpha1.ClaimAttached, "")
			if got.Status.AttachedTo != "job" || got.Status.ExpiresAt != nil || got.Status.NodeName != "gpu-1" || len(got.Status.Devices) != 4 {
				t.Errorf("status %+v, want attached to job on gpu-1 with its 4 devices and no expiry", got.Status)
			}
			if events := f.events(); !slices.Equal(events, []string{"Normal Attached Attached to Instance job on node gpu-1"}) {
				t.Errorf("events %v", events)
			}
			var want []podDelete
			if tc.wantDelete {
				want = []podDelete{{Name: h.Name, UID: h.UID}}
			}
			if diff := cmp.Diff(want, f.podDeletes()); diff != "" {
				t.Errorf("holder deletes (-want +got):\n%s", diff)
			}
			if slices.Contains(f.writes(), "create pods") {
				t.Errorf("a holder was created while one holds: %v", f.writes())
			}
		})
	}
}

func TestSyncInstancesThatDoNotAttach(t *testing.T) {
	for _, tc := range []struct {
		name string
		inst *v1alpha1.Instance
	}{
		{"stopped", instance("job", "train", stopped)},
		{"being deleted", instance("job", "train", func(i *v1alpha1.Instance) {
			i.DeletionTimestamp = ptr.To(metav1.NewTime(start))
			i.Finalizers = []string{"gpu.kiln.dev/instance"}
		})},
		{"on another claim", instance("job", "other")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			f := newFixture(t, cl, h, tc.inst, h100(), node("gpu-1"))
			f.sync()
			wantState(t, f.claim("train"), v1alpha1.ClaimBound, "")
			if w := f.writes(); len(w) != 0 {
				t.Errorf("wrote %v", w)
			}
		})
	}
}

// When the Instance lets go, a new holder takes the cards back; while it
// runs but its Pod is gone, the holder keeps them until its next Pod.
func TestSyncDetach(t *testing.T) {
	job := instance("job", "train")
	for _, tc := range []struct {
		name       string
		inst       *v1alpha1.Instance
		pod        *corev1.Pod
		wantPhase  v1alpha1.ClaimPhase
		wantHolder bool
		// wantGated: the holder waits for the Instance's Pod to go, to
		// get its devices.
		wantGated  bool
		wantExpiry bool
		wantEvents []string
	}{{
		name:       "the Instance stopped: held again, expiry restarted",
		inst:       instance("job", "train", stopped),
		pod:        instancePod(job, "gpu-1", true),
		wantPhase:  v1alpha1.ClaimBound,
		wantHolder: true,
		wantGated:  true,
		wantExpiry: true,
		wantEvents: []string{"Normal Bound Instance job let go; holding 4 nvidia.com/gpu on node gpu-1 again"},
	}, {
		// A Pod that only carries the Claim's label is no Instance's: it
		// must not keep the holder from the cards.
		name:       "the Instance is gone, a Pod of the tenant's carries the label: held again, not gated",
		pod:        &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "decoy", Namespace: tenant, Labels: map[string]string{v1alpha1.LabelClaim: "train"}}},
		wantPhase:  v1alpha1.ClaimBound,
		wantHolder: true,
		wantExpiry: true,
		wantEvents: []string{"Normal Bound Instance job let go; holding 4 nvidia.com/gpu on node gpu-1 again"},
	}, {
		name:       "the Instance is gone: held again, expiry restarted",
		wantPhase:  v1alpha1.ClaimBound,
		wantHolder: true,
		wantExpiry: true,
		wantEvents: []string{"Normal Bound Instance job let go; holding 4 nvidia.com/gpu on node gpu-1 again"},
	}, {
		name:       "the Instance runs without a Pod: held for its next one",
		inst:       job,
		wantPhase:  v1alpha1.ClaimAttached,
		wantHolder: true,
	}, {
		name:      "the Instance runs on its Pod: nothing to do",
		inst:      job,
		pod:       instancePod(job, "gpu-1", true),
		wantPhase: v1alpha1.ClaimAttached,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			cl := attached(newClaim("train", 4, expireAfter(time.Hour)), "gpu-1", job)
			objs := []runtime.Object{cl, h100(), node("gpu-1")}
			if tc.inst != nil {
				objs = append(objs, tc.inst)
			}
			if tc.pod != nil {
				objs = append(objs, tc.pod)
			}
			f := newFixture(t, objs...)
			f.clock = start.Add(3 * time.Hour)
			f.sync()

			got := f.claim("train")
			wantState(t, got, tc.wantPhase, "")
			h := f.pod(handover.HolderName(cl))
			if (h != nil) != tc.wantHolder {
				t.Fatalf("holder %v, want one: %v", h, tc.wantHolder)
			}
			if h != nil && (handover.PinnedNode(h) != "gpu-1" || h.Status.NominatedNodeName != "gpu-1") {
				t.Errorf("holder pinned to %q nominated to %q, want gpu-1", handover.PinnedNode(h), h.Status.NominatedNodeName)
			}
			if h != nil && handover.Gated(h) != tc.wantGated {
				t.Errorf("holder gated: %v, want %v", handover.Gated(h), tc.wantGated)
			}
			var wantExpiry *metav1.Time
			if tc.wantExpiry {
				wantExpiry = ptr.To(metav1.NewTime(f.clock.Add(time.Hour)))
			}
			if !got.Status.ExpiresAt.Equal(wantExpiry) {
				t.Errorf("expiresAt %v, want %v", got.Status.ExpiresAt, wantExpiry)
			}
			wantAttached := ""
			if tc.wantPhase == v1alpha1.ClaimAttached {
				wantAttached = "job"
			}
			if got.Status.AttachedTo != wantAttached || got.Status.NodeName != "gpu-1" {
				t.Errorf("attachedTo %q nodeName %q, want %q on gpu-1", got.Status.AttachedTo, got.Status.NodeName, wantAttached)
			}
			if diff := cmp.Diff(tc.wantEvents, f.events()); diff != "" {
				t.Errorf("events (-want +got):\n%s", diff)
			}
			if tc.wantGated {
				// The Instance's Pod goes: the holder is let through.
				if err := f.kube.CoreV1().Pods(tc.pod.Namespace).Delete(context.Background(), tc.pod.Name, metav1.DeleteOptions{}); err != nil {
					t.Fatal(err)
				}
				f.catchUp()
				f.sync()
				f.catchUp()
				if h := f.pod(handover.HolderName(cl)); h == nil || handover.Gated(h) {
					t.Errorf("with the Instance's Pod gone, the holder %v is still gated", h)
				}
			}
		})
	}
}

func budget(ns string, key v1alpha1.BudgetResourceName, hard, used string) *v1alpha1.Budget {
	return &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
		Spec:       v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{key: resource.MustParse(hard)}},
		Status:     v1alpha1.BudgetStatus{Used: v1alpha1.BudgetResourceList{key: resource.MustParse(used)}},
	}
}

// A Pending Claim that cannot be placed says why, and makes no holder.
func TestSyncWaitingReasons(t *testing.T) {
	onHold := h100()
	onHold.Spec.Hold = v1alpha1.HoldNew
	draining := h100()
	draining.Spec.Hold = v1alpha1.HoldDrain
	for _, tc := range []struct {
		name        string
		claim       *v1alpha1.Claim
		objs        []runtime.Object
		wantReason  string
		wantMessage string
	}{{
		name:       "room: placed",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1")},
		wantReason: v1alpha1.ClaimReasonScheduling,
	}, {
		name:       "no room",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), pod("busy", "gpu-1", resources(gpu, 6))},
		wantReason: v1alpha1.ClaimReasonCapacity,
		wantMessage: "no node of instancetype h100's pool has room for all of claim train (4 nvidia.com/gpu on one node); " +
			"the most free on one node is 2 nvidia.com/gpu, on gpu-1",
	}, {
		name:       "pinned to a full node, though another has room",
		claim:      newClaim("train", 4, func(c *v1alpha1.Claim) { c.Spec.NodeName = "gpu-1" }),
		objs:       []runtime.Object{h100(), node("gpu-1"), node("gpu-2"), pod("busy", "gpu-1", resources(gpu, 6))},
		wantReason: v1alpha1.ClaimReasonCapacity,
		wantMessage: "node gpu-1 has 2 nvidia.com/gpu free, claim train needs 4 nvidia.com/gpu; " +
			"it waits until they are released, or clear spec.nodeName",
	}, {
		name:       "pinned to a node outside the pool",
		claim:      newClaim("train", 4, func(c *v1alpha1.Claim) { c.Spec.NodeName = "gpu-9" }),
		objs:       []runtime.Object{h100(), node("gpu-1")},
		wantReason: v1alpha1.ClaimReasonNodeNotFound,
		wantMessage: `node "gpu-9" is not a Ready, schedulable node of instancetype h100's pool; ` +
			"pin claim train to another node or clear spec.nodeName",
	}, {
		name:       "a Budget over its limit",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), budget(tenant, v1alpha1.BudgetAccelerators, "4", "5")},
		wantReason: v1alpha1.ClaimReasonBudget,
		wantMessage: "budget team is over its limit: accelerators used 5 > hard 4; " +
			"raise it, or release other Instances or Claims",
	}, {
		name:       "a Budget over its limit for the claim's type",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), budget(tenant, "accelerators.h100", "4", "6")},
		wantReason: v1alpha1.ClaimReasonBudget,
		wantMessage: "budget team is over its limit: accelerators.h100 used 6 > hard 4; " +
			"raise it, or release other Instances or Claims",
	}, {
		// used counts the Claim itself, charged when it was created.
		name:       "a Budget at its limit: placed",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), budget(tenant, v1alpha1.BudgetAccelerators, "4", "4")},
		wantReason: v1alpha1.ClaimReasonScheduling,
	}, {
		name:       "a Budget of another namespace: placed",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), budget("tenant-b", v1alpha1.BudgetAccelerators, "4", "5")},
		wantReason: v1alpha1.ClaimReasonScheduling,
	}, {
		name:       "accelerator-hours spent under onExhausted Stop",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), hoursBudget(v1alpha1.BudgetAcceleratorHours, "1", v1alpha1.BudgetExhaustedStop)},
		wantReason: v1alpha1.ClaimReasonBudget,
		wantMessage: "budget hours spent its accelerator-hours (1 of 1 card-hours this period) and has onExhausted: Stop; " +
			"card-hours come back from 2026-04-01T00:00:00Z, or a cluster admin raises the limit; the Claim waits until then",
	}, {
		name:       "accelerator-hours spent, Refuse only: placed",
		claim:      newClaim("train", 4),
		objs:       []runtime.Object{h100(), node("gpu-1"), hoursBudget(v1alpha1.BudgetAcceleratorHours, "1", v1alpha1.BudgetExhaustedRefuse)},
		wantReason: v1alpha1.ClaimReasonScheduling,
	}, {
		name:        "the type on hold",
		claim:       newClaim("train", 4),
		objs:        []runtime.Object{onHold, node("gpu-1")},
		wantReason:  v1alpha1.ClaimReasonTypeHeld,
		wantMessage: `instancetype h100 is on hold ("Hold") and places no new Claims; it waits until the admin reopens it`,
	}, {
		name:        "the type draining",
		claim:       newClaim("train", 4),
		objs:        []runtime.Object{draining, node("gpu-1")},
		wantReason:  v1alpha1.ClaimReasonTypeHeld,
		wantMessage: `instancetype h100 is on hold ("Drain") and places no new Claims; it waits until the admin reopens it`,
	}, {
		name:        "no such type",
		claim:       newClaim("train", 4),
		objs:        []runtime.Object{node("gpu-1")},
		wantReason:  v1alpha1.ClaimReasonTypeNotFound,
		wantMessage: `instancetype "h100" does not exist; it waits until it is created`,
	}, {
		name:       "a partition where only whole cards are free",
		claim:      newClaim("train", 0, partition("1g.10gb")),
		objs:       []runtime.Object{h100(), node("gpu-1")},
		wantReason: v1alpha1.ClaimReasonCapacity,
		wantMessage: "no node of instancetype h100's pool has room for all of claim train (1 nvidia.com/mig-1g.10gb on one node); " +
			"the most free on one node is 0 nvidia.com/mig-1g.10gb, on gpu-1",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, append(tc.objs, tc.claim)...)
			if after := f.sync(); after <= 0 || after > recheck {
				t.Errorf("requeue in %v, want a look again within %v", after, recheck)
			}
			got := f.claim("train")
			placed := tc.wantReason == v1alpha1.ClaimReasonScheduling
			if h := f.pod(handover.HolderName(got)); (h != nil) != placed {
				t.Errorf("holder %v, want one: %v", h, placed)
			}
			if placed {
				// Its status waits for the scheduler's word (quietFor).
				wantState(t, got, "", "")
				return
			}
			wantState(t, got, v1alpha1.ClaimPending, tc.wantReason)
			if msg := handover.WaitingMessage(got); msg != tc.wantMessage {
				t.Errorf("message\n %q, want\n %q", msg, tc.wantMessage)
			}
			if got.Status.NodeName != "" {
				t.Errorf("nodeName %q while waiting", got.Status.NodeName)
			}
			if events := f.events(); !slices.Equal(events, []string{"Warning " + tc.wantReason + " " + tc.wantMessage}) {
				t.Errorf("events %v", events)
			}

			// Told once: the same reason again records nothing.
			f.catchUp()
			f.sync()
			if events := f.events(); len(events) != 0 {
				t.Errorf("the next sync recorded %v", events)
			}
		})
	}
}

// A claim set goes to one node together, once its members have all
// arrived.
func TestSyncClaimSet(t *testing.T) {
	inSet := func(c *v1alpha1.Claim) { c.Labels = map[string]string{v1alpha1.ClaimSetLabel: "pair"} }
	for _, tc := range []struct {
		name     string
		age      time.Duration // of the newest member
		wantNode string
	}{
		{"a member just arrived: wait for the rest", time.Second, ""},
		{"settled: placed together on the node with room for both", setSettle, "gpu-2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			second := newClaim("train-b", 3, inSet)
			second.CreationTimestamp = metav1.NewTime(start.Add(-tc.age))
			f := newFixture(t, newClaim("train", 3, inSet), second, h100(),
				node("gpu-1"), node("gpu-2"), pod("busy-1", "gpu-1", resources(gpu, 3)), pod("busy-2", "gpu-2", resources(gpu, 2)))
			after := f.sync()

			for _, name := range []string{"train", "train-b"} {
				got := f.claim(name)
				if name == "train" && tc.wantNode == "" {
					wantState(t, got, v1alpha1.ClaimPending, v1alpha1.ClaimReasonScheduling)
				}
				h := f.pod(handover.HolderName(got))
				if tc.wantNode == "" {
					if h != nil {
						t.Errorf("%s got a holder before the set settled", name)
					}
					continue
				}
				if h == nil || handover.PinnedNode(h) != tc.wantNode {
					t.Errorf("%s holder %v, want one on %s", name, h, tc.wantNode)
				}
			}
			if tc.wantNode == "" && after != setSettle-tc.age {
				t.Errorf("requeue in %v, want %v", after, setSettle-tc.age)
			}
		})
	}
}

func TestSyncNameConflict(t *testing.T) {
	cl := newClaim("train", 4)
	foreign := pod(handover.HolderName(cl), "gpu-1", resources(gpu, 1))
	f := newFixture(t, cl, foreign, h100(), node("gpu-1"))
	f.sync()
	got := f.claim("train")
	wantState(t, got, v1alpha1.ClaimPending, v1alpha1.ClaimReasonNameConflict)
	for _, w := range f.writes() {
		if strings.HasSuffix(w, " pods") || strings.HasPrefix(w, "patch pods") {
			t.Errorf("wrote %s while a foreign Pod has the holder's name", w)
		}
	}
}

func TestSyncDeletion(t *testing.T) {
	instanceRunning := func(cl *v1alpha1.Claim) {
		cl.Status.Conditions = []metav1.Condition{{Type: v1alpha1.ClaimConditionWaiting, Status: metav1.ConditionTrue,
			Reason: ReasonInstanceRunning, Message: "told before", ObservedGeneration: 1, LastTransitionTime: metav1.NewTime(start)}}
	}
	for _, tc := range []struct {
		name     string
		inst     *v1alpha1.Instance
		told     bool // the claim already says InstanceRunning
		noHolder bool
		wantKept bool
	}{
		{name: "an Instance runs on it: kept, and told", inst: instance("job", "train"), wantKept: true},
		{name: "an Instance runs on it, already told: kept quietly", inst: instance("job", "train"), told: true, wantKept: true},
		{name: "its Instance stopped: released once the holder is gone", inst: instance("job", "train", stopped)},
		{name: "no Instance: released once the holder is gone"},
		{name: "no Instance and no holder: released", noHolder: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			if tc.inst != nil && !tc.inst.Spec.Stopped {
				cl = attached(cl, "gpu-1", tc.inst)
			}
			cl.DeletionTimestamp = ptr.To(metav1.NewTime(start))
			if tc.told {
				instanceRunning(cl)
			}
			objs := []runtime.Object{cl, h100(), node("gpu-1")}
			if !tc.noHolder {
				objs = append(objs, h)
			}
			if tc.inst != nil {
				objs = append(objs, tc.inst)
			}
			f := newFixture(t, objs...)
			f.sync()

			kept := func() (*v1alpha1.Claim, bool) {
				got, err := f.kiln.GpuV1alpha1().Claims(tenant).Get(t.Context(), "train", metav1.GetOptions{})
				if err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
				return got, err == nil && slices.Contains(got.Finalizers, v1alpha1.ClaimFinalizer)
			}
			got, isKept := kept()
			events := f.events()
			if tc.wantKept {
				if !isKept {
					t.Fatal("finalizer removed under a running Instance")
				}
				wantState(t, got, v1alpha1.ClaimAttached, ReasonInstanceRunning)
				if !strings.Contains(handover.WaitingMessage(got), "waits for Instance job") {
					t.Errorf("message %q, want it to name the Instance", handover.WaitingMessage(got))
				}
				if told := hasEvent(events, "Warning InstanceRunning"); told == tc.told {
					t.Errorf("events %v; told before: %v", events, tc.told)
				}
				if d := f.podDeletes(); len(d) != 0 {
					t.Errorf("deleted %v under a running Instance", d)
				}
				return
			}
			if len(events) != 0 {
				t.Errorf("events %v", events)
			}
			if !tc.noHolder {
				if diff := cmp.Diff([]podDelete{{Name: h.Name, UID: h.UID}}, f.podDeletes()); diff != "" {
					t.Errorf("holder deletes (-want +got):\n%s", diff)
				}
				// The Claim's charge ends with its finalizer: not before the
				// holder is seen gone.
				if !isKept {
					t.Fatal("finalizer removed while the holder was there")
				}
				f.catchUp()
				f.sync()
				_, isKept = kept()
			}
			if isKept {
				t.Error("finalizer kept with no holder and no Instance")
			}
		})
	}
}

// A deleted or Expired Claim whose holder stays Terminating (a kubelet that
// never confirms) keeps its charge for as long as the holder is there,
// looks again when it should be gone, and then says it is stuck, once.
func TestSyncHolderStuckTerminating(t *testing.T) {
	for _, tc := range []struct {
		name    string
		deleted bool
		phase   v1alpha1.ClaimPhase
	}{
		{name: "deleted Claim", deleted: true, phase: v1alpha1.ClaimBound},
		{name: "Expired Claim", phase: v1alpha1.ClaimExpired},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			cl.Status.Phase = tc.phase
			if tc.deleted {
				cl.DeletionTimestamp = ptr.To(metav1.NewTime(start))
			}
			// Deleted a moment ago with its 1 s of grace.
			h.DeletionTimestamp = ptr.To(metav1.NewTime(start.Add(time.Second)))
			f := newFixture(t, cl, h, h100(), node("gpu-1"))

			check := func(wantReason string) {
				t.Helper()
				got := f.claim("train")
				if !slices.Contains(got.Finalizers, v1alpha1.ClaimFinalizer) || got.Status.NodeName != "gpu-1" {
					t.Fatalf("claim %+v let go of its node or finalizer while its holder is Terminating", got)
				}
				wantState(t, got, tc.phase, wantReason)
				if d := f.podDeletes(); len(d) != 0 {
					t.Errorf("deleted %v: the holder is Terminating already, and only its kubelet may end it", d)
				}
			}
			if after := f.sync(); after != time.Second+handover.StuckAfter {
				t.Errorf("requeue in %v, want when the holder is overdue (%v)", after, time.Second+handover.StuckAfter)
			}
			check("")
			if e := f.events(); len(e) != 0 {
				t.Errorf("events %v before the holder is overdue", e)
			}

			f.catchUp()
			f.clock = start.Add(time.Minute)
			if after := f.sync(); after != recheck {
				t.Errorf("requeue in %v, want %v: it keeps looking", after, recheck)
			}
			check(ReasonHolderTerminating)
			if msg := handover.WaitingMessage(f.claim("train")); !strings.Contains(msg, "holder Pod train-hold on gpu-1 was to be gone by 2026-03-01T09:00:01Z") {
				t.Errorf("message %q, want it to name the Pod, its node and its deadline", msg)
			}
			if e := f.events(); !hasEvent(e, "Warning HolderTerminating holder Pod train-hold") {
				t.Errorf("events %v, want a Warning", e)
			}
			f.catchUp()
			f.clock = start.Add(2 * time.Minute)
			f.sync()
			check(ReasonHolderTerminating)
			if e := f.events(); len(e) != 0 {
				t.Errorf("told again: %v", e)
			}

			// The kubelet confirms: the charge goes.
			if err := f.kube.Tracker().Delete(f.gvrOf(h), h.Namespace, h.Name); err != nil {
				t.Fatal(err)
			}
			f.catchUp()
			f.sync()
			got, err := f.kiln.GpuV1alpha1().Claims(tenant).Get(t.Context(), "train", metav1.GetOptions{})
			switch {
			case tc.deleted && !apierrors.IsNotFound(err) && (err != nil || slices.Contains(got.Finalizers, v1alpha1.ClaimFinalizer)):
				t.Errorf("deleted claim kept its finalizer once its holder was gone: %v", err)
			case !tc.deleted && (err != nil || got.Status.NodeName != "" || handover.WaitingReason(got) != ""):
				t.Errorf("expired claim %+v still holds once its holder is gone (%v)", got.Status, err)
			}
		})
	}
}

// The cache shows no holder, but the server has one (made moments ago):
// a deleted Claim keeps its finalizer until its add event, and the delete.
func TestSyncDeletionHolderNotYetSeen(t *testing.T) {
	cl, h := held(newClaim("train", 4), "gpu-1")
	cl.DeletionTimestamp = ptr.To(metav1.NewTime(start))
	f := newFixture(t, cl, h100(), node("gpu-1"))
	if err := f.kube.Tracker().Add(h); err != nil {
		t.Fatal(err)
	}
	if after := f.sync(); after == 0 {
		t.Error("no requeue while the server has a holder the cache has not shown")
	}
	if !slices.Contains(f.claim("train").Finalizers, v1alpha1.ClaimFinalizer) {
		t.Fatal("finalizer removed while the server has a holder")
	}
	f.catchUp()
	f.sync()
	if diff := cmp.Diff([]podDelete{{Name: h.Name, UID: h.UID}}, f.podDeletes()); diff != "" {
		t.Errorf("holder deletes once seen (-want +got):\n%s", diff)
	}
}

// A Claim reports the devices the node agent says its holder got, and
// keeps them while attached, so its Instance's Pod can be checked against
// them; on a node no agent reports it names units after its holder.
func TestSyncReportsHeldDevices(t *testing.T) {
	cl, h := held(newClaim("train", 2, expireAfter(time.Hour)), "gpu-1")
	f := newFixture(t, cl, h, h100(), node("gpu-1"))
	holder := &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderClaim, PodUID: h.UID}
	nd := &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{
		{UUID: "GPU-b", Holder: holder}, {UUID: "GPU-a", Holder: holder}, {UUID: "GPU-c"},
		{UUID: "GPU-d", Holder: &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderPod, PodUID: "someone"}},
	}}}
	if err := f.nodeDevices.Add(nd); err != nil {
		t.Fatal(err)
	}
	f.sync()
	if got := f.claim("train").Status.Devices; !slices.Equal(got, []string{"GPU-a", "GPU-b"}) {
		t.Fatalf("devices %v, want the holder's GPU-a and GPU-b", got)
	}

	// Attached, its holder gone: still the holder's devices.
	job := instance("job", "train")
	f = newFixture(t, attached(newClaim("train", 2, expireAfter(time.Hour)), "gpu-1", job), job, h100(), node("gpu-1"), instancePod(job, "gpu-1", true))
	cur := f.claim("train").DeepCopy()
	cur.Status.Devices = []string{"GPU-a", "GPU-b"}
	if err := f.claims.Update(cur); err != nil {
		t.Fatal(err)
	}
	if _, err := f.kiln.GpuV1alpha1().Claims(cur.Namespace).UpdateStatus(context.Background(), cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := f.nodeDevices.Add(nd); err != nil {
		t.Fatal(err)
	}
	f.sync()
	if got := f.claim("train").Status.Devices; !slices.Equal(got, []string{"GPU-a", "GPU-b"}) {
		t.Fatalf("attached: devices %v, want the holder's GPU-a and GPU-b kept", got)
	}
}

// TestSyncMakesNoHolderForAGoneClaim: the cache still holds a Claim the
// server has let go (its deletion not yet seen): no holder is made for it,
// since no Budget would charge the cards it took.
func TestSyncMakesNoHolderForAGoneClaim(t *testing.T) {
	for _, tt := range []struct {
		name   string
		server func(f *fixture, cl *v1alpha1.Claim)
	}{
		{name: "deleted", server: func(f *fixture, cl *v1alpha1.Claim) {
			if err := f.kiln.Tracker().Delete(f.gvrOf(cl), cl.Namespace, cl.Name); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "being deleted", server: func(f *fixture, cl *v1alpha1.Claim) {
			going := cl.DeepCopy()
			going.DeletionTimestamp = &metav1.Time{Time: start}
			if err := f.kiln.Tracker().Update(f.gvrOf(cl), going, cl.Namespace); err != nil {
				t.Fatal(err)
			}
		}},
		{name: "made again under the same name", server: func(f *fixture, cl *v1alpha1.Claim) {
			again := cl.DeepCopy()
			again.UID = "another"
			if err := f.kiln.Tracker().Update(f.gvrOf(cl), again, cl.Namespace); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tt.name, func(t *testing.T) {
			cl := newClaim("train", 4, expireAfter(2*time.Hour))
			f := newFixture(t, cl, h100(), node("gpu-1"))
			tt.server(f, cl)
			if _, err := f.c.sync(t.Context(), key); err == nil {
				t.Errorf("sync of a Claim gone from the server succeeded; writes %v", f.writes())
			}
			if h := f.pod(handover.HolderName(cl)); h != nil {
				t.Errorf("holder Pod %s made for a Claim the server has let go", h.Name)
			}
		})
	}
}
