package instance

import (
	"context"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/record"
	"k8s.io/klog/v2/ktesting"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// eventsFixture is the controller over running informers of fake
// clientsets, to see what its event handlers queue. No worker runs.
type eventsFixture struct {
	t    *testing.T
	ctx  context.Context
	kube *kubefake.Clientset
	c    *Controller
}

func newEventsFixture(t *testing.T, instances ...*v1alpha1.Instance) *eventsFixture {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	kiln := kilnfake.NewSimpleClientset()
	for _, inst := range instances {
		if err := kiln.Tracker().Add(inst); err != nil {
			t.Fatal(err)
		}
	}
	kube := kubefake.NewClientset()
	kubeInf := kubeinformers.NewSharedInformerFactory(kube, 0)
	kilnInf := kilninformers.NewSharedInformerFactory(kiln, 0)
	c, err := NewController(kube, kiln, queue.Informers{Kube: kubeInf, Kiln: kilnInf}, record.NewFakeRecorder(10), Options{})
	if err != nil {
		t.Fatal(err)
	}
	kubeInf.Start(ctx.Done())
	kilnInf.Start(ctx.Done())
	// Cleanups run last first: stop the informers, then wait for them.
	t.Cleanup(kubeInf.Shutdown)
	t.Cleanup(kilnInf.Shutdown)
	t.Cleanup(cancel)
	if err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return c.HasSynced(), nil
	}); err != nil {
		t.Fatal("caches did not sync")
	}
	f := &eventsFixture{t: t, ctx: ctx, kube: kube, c: c}
	f.drain() // the Instances' initial adds
	return f
}

// drain empties the queue and returns its keys, sorted.
func (f *eventsFixture) drain() []string {
	var keys []string
	for f.c.queue.Len() > 0 {
		k, _ := f.c.queue.Get()
		f.c.queue.Done(k)
		keys = append(keys, k.String())
	}
	slices.Sort(keys)
	return keys
}

// waitFor waits until key is queued. Handlers of one informer see its
// events in order, so every earlier event of that informer has been
// handled by then.
func (f *eventsFixture) waitFor(key string) []string {
	f.t.Helper()
	var seen []string
	err := wait.PollUntilContextTimeout(f.ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		seen = append(seen, f.drain()...)
		return slices.Contains(seen, key), nil
	})
	if err != nil {
		f.t.Fatalf("%s was never queued; queued %v", key, seen)
	}
	slices.Sort(seen)
	return slices.Compact(seen)
}

func controlledBy(name string, uid types.UID) []metav1.OwnerReference {
	return []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Instance", Name: name, UID: uid, Controller: ptr.To(true)}}
}

func testInstance(name string, uid types.UID) *v1alpha1.Instance {
	return &v1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-a", UID: uid}, Spec: v1alpha1.InstanceSpec{Type: "h100"}}
}

// TestEventsOnlyOfControlledObjects: Pods and Services queue the Instance
// that controls them, and nothing else: not a same-named object someone
// else made, not an object another kind controls, not an Instance of
// another API group, not an owner that is no controller.
func TestEventsOnlyOfControlledObjects(t *testing.T) {
	f := newEventsFixture(t, testInstance("train", "uid-train"), testInstance("sentinel", "uid-sentinel"))
	meta := func(name string, owners ...metav1.OwnerReference) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "tenant-a", OwnerReferences: owners}
	}
	foreign := []metav1.ObjectMeta{
		meta("train"), // same name as an Instance, made by someone else
		meta("web-abc", metav1.OwnerReference{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web", UID: "rs", Controller: ptr.To(true)}),
		meta("look-alike", metav1.OwnerReference{APIVersion: "gpu.example.com/v1", Kind: "Instance", Name: "train", UID: "uid-train", Controller: ptr.To(true)}),
		meta("not-controller", metav1.OwnerReference{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Instance", Name: "train", UID: "uid-train"}),
	}
	pods, services := f.kube.CoreV1().Pods("tenant-a"), f.kube.CoreV1().Services("tenant-a")
	for _, m := range foreign {
		if _, err := pods.Create(f.ctx, &corev1.Pod{ObjectMeta: m}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := services.Create(f.ctx, &corev1.Service{ObjectMeta: m}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, m := range foreign {
		p, err := pods.Get(f.ctx, m.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		// The fake tracker keeps resourceVersions as given; a server moves them.
		p.Labels, p.ResourceVersion = map[string]string{"edited": "yes"}, "2"
		if _, err := pods.Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		// Nothing is in the way of an Instance that is not blocked.
		if err := services.Delete(f.ctx, m.Name, metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Sentinels, controlled by the Instance "sentinel": once each is
	// queued, every event before it on its informer has been handled.
	sentinel := meta("sentinel", controlledBy("sentinel", "uid-sentinel")...)
	if _, err := pods.Create(f.ctx, &corev1.Pod{ObjectMeta: sentinel}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := f.waitFor("tenant-a/sentinel")
	if _, err := services.Create(f.ctx, &corev1.Service{ObjectMeta: sentinel}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got = append(got, f.waitFor("tenant-a/sentinel")...)
	slices.Sort(got)
	if got = slices.Compact(got); !slices.Equal(got, []string{"tenant-a/sentinel"}) {
		t.Errorf("queued %v for Pods and Services no Instance controls; want only the sentinel", got)
	}

	// A Pod the Instance controls queues it, on every change.
	owned := meta("train-owned", controlledBy("train", "uid-train")...)
	if _, err := pods.Create(f.ctx, &corev1.Pod{ObjectMeta: owned}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("tenant-a/train")
	// So does an update that takes the Pod from it: the Instance must
	// see its Pod is no longer its own.
	p, err := pods.Get(f.ctx, "train-owned", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p.OwnerReferences, p.ResourceVersion = nil, "2"
	if _, err := pods.Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("tenant-a/train")
	p.OwnerReferences, p.ResourceVersion = controlledBy("train", "uid-train"), "3"
	if _, err := pods.Update(f.ctx, p, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("tenant-a/train")
	if err := pods.Delete(f.ctx, "train-owned", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	f.waitFor("tenant-a/train")
}

// TestEventsOfWhatBlocksAnInstance: a deleted object that stood in the way
// of a same-named Instance (NameConflict) queues that Instance, which can
// now make its own.
func TestEventsOfWhatBlocksAnInstance(t *testing.T) {
	blocked := testInstance("train", "uid-train")
	blocked.Status.Conditions = []metav1.Condition{{Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: ReasonNameConflict}}
	f := newEventsFixture(t, blocked, testInstance("sentinel", "uid-sentinel"))
	pods := f.kube.CoreV1().Pods("tenant-a")
	squatter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a"}}
	if _, err := pods.Create(f.ctx, squatter, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(f.ctx, "train", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitFor("tenant-a/train"); !slices.Equal(got, []string{"tenant-a/train"}) {
		t.Errorf("queued %v, want the blocked Instance", got)
	}
}

// TestEventsOfAClaimsHolderGoing: the holder of a Claim going wakes the
// Instance on that Claim, whose Pod waits behind the hand-over gate, and
// not an Instance on another Claim.
func TestEventsOfAClaimsHolderGoing(t *testing.T) {
	onClaim := testInstance("job", "uid-job")
	onClaim.Spec.ClaimName = "reserved"
	other := testInstance("other", "uid-other")
	other.Spec.ClaimName = "elsewhere"
	f := newEventsFixture(t, onClaim, other, testInstance("sentinel", "uid-sentinel"))
	pods := f.kube.CoreV1().Pods("tenant-a")
	holder := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{
		Name: "reserved-hold", Namespace: "tenant-a", Labels: map[string]string{"gpu.kiln.dev/claim": "reserved"},
		OwnerReferences: []metav1.OwnerReference{{APIVersion: v1alpha1.SchemeGroupVersion.String(), Kind: "Claim", Name: "reserved", UID: "uid-reserved", Controller: ptr.To(true)}},
	}}
	if _, err := pods.Create(f.ctx, holder, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := pods.Delete(f.ctx, "reserved-hold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if got := f.waitFor("tenant-a/job"); !slices.Equal(got, []string{"tenant-a/job"}) {
		t.Errorf("queued %v, want the Instance on the Claim only", got)
	}
}

// TestTypeChanged: a status write of the InstanceType loop (capacity moves
// with every Pod bound in the pool) wakes none of the type's Instances; a
// change of what their syncs read does.
func TestTypeChanged(t *testing.T) {
	base := &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100", Generation: 2, ResourceVersion: "7"},
		Spec:       v1alpha1.InstanceTypeSpec{NodeSelector: map[string]string{"pool": "a"}},
		Status:     v1alpha1.InstanceTypeStatus{Capacity: v1alpha1.InstanceTypeCapacity{Nodes: 2, Cards: 16, FreeCards: 9}},
	}
	for _, tc := range []struct {
		name   string
		change func(*v1alpha1.InstanceType)
		want   bool
	}{
		{"capacity", func(t *v1alpha1.InstanceType) { t.ResourceVersion, t.Status.Capacity.FreeCards = "8", 8 }, false},
		{"conditions", func(t *v1alpha1.InstanceType) {
			t.Status.Conditions = []metav1.Condition{{Type: "Available", Status: metav1.ConditionFalse}}
		}, false},
		{"spec", func(t *v1alpha1.InstanceType) { t.Generation, t.Spec.Hold = 3, v1alpha1.HoldDrain }, true},
		{"deleted", func(t *v1alpha1.InstanceType) { t.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)} }, true},
		{"labels", func(t *v1alpha1.InstanceType) { t.Labels = map[string]string{"tier": "gold"} }, true},
		{"annotations", func(t *v1alpha1.InstanceType) { t.Annotations = map[string]string{"note": "x"} }, true},
		{"finalizers", func(t *v1alpha1.InstanceType) { t.Finalizers = []string{"x"} }, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cur := base.DeepCopy()
			tc.change(cur)
			if got := typeChanged(base, cur); got != tc.want {
				t.Errorf("typeChanged = %v, want %v", got, tc.want)
			}
		})
	}
}
