package budget

import (
	"context"
	"errors"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	kubeinformers "k8s.io/client-go/informers"
	kubefake "k8s.io/client-go/kubernetes/fake"
	core "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

// These tests call Reconcile directly on a fake clientset, with the clock
// stopped at recountTime (moved on by a case's later).

const ns = "team-a"

var (
	recountTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	budgetsGVR  = v1alpha1.SchemeGroupVersion.WithResource("budgets")
)

// list reads key, quantity pairs.
func list(kv ...string) v1alpha1.BudgetResourceList {
	l := v1alpha1.BudgetResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1alpha1.BudgetResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

// budget is a Budget whose status says every object was priced.
func budget(name string, hard, used v1alpha1.BudgetResourceList, pending ...v1alpha1.BudgetCharge) *v1alpha1.Budget {
	return &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       v1alpha1.BudgetSpec{Hard: hard},
		Status: v1alpha1.BudgetStatus{Hard: hard, Used: used, Pending: pending,
			Conditions: []metav1.Condition{counted(metav1.ConditionTrue, v1alpha1.BudgetReasonAllPriced, "every Instance and Claim of the namespace is priced by its InstanceType")}},
	}
}

func counted(status metav1.ConditionStatus, reason, message string) metav1.Condition {
	return metav1.Condition{Type: v1alpha1.BudgetConditionCounted, Status: status, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(recountTime)}
}

// charge is a pending entry for the object named name, made age before
// recountTime; rv is set for an update.
func charge(kind, name, rv string, age time.Duration, c v1alpha1.BudgetResourceList) v1alpha1.BudgetCharge {
	return v1alpha1.BudgetCharge{Kind: kind, Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv, Charge: c, Time: metav1.NewTime(recountTime.Add(-age))}
}

// instance is a stored running Instance of h100 cards at resourceVersion 41.
func instance(name string, cards int32, mutate ...func(*v1alpha1.Instance)) *v1alpha1.Instance {
	inst := &v1alpha1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "41"},
		Spec: v1alpha1.InstanceSpec{
			Type: "h100", Image: "busybox:1",
			Resources: v1alpha1.InstanceResources{Accelerators: ptr.To(cards)},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func stopped(i *v1alpha1.Instance) { i.Spec.Stopped = true }

// reported is the phase kiln-controller reported for generation observed
// of an Instance at generation 3.
func reported(p v1alpha1.InstancePhase, observed int64) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) {
		i.Generation, i.Status.Phase, i.Status.ObservedGeneration = 3, p, observed
		i.Finalizers = []string{v1alpha1.InstanceFinalizer}
	}
}

func withPorts(n int) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) {
		for p := range n {
			i.Spec.Ports = append(i.Spec.Ports, v1alpha1.InstancePort{Name: fmt.Sprintf("p%d", p), Port: int32(8000 + p)})
		}
	}
}

func onClaim(name string) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) { i.Spec.ClaimName = name }
}

func partition(profile string) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) { i.Spec.Resources.Accelerators, i.Spec.Resources.Partition = nil, profile }
}

func typed(name string) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) { i.Spec.Type = name }
}

func resourceVersion(rv string) func(*v1alpha1.Instance) {
	return func(i *v1alpha1.Instance) { i.ResourceVersion = rv }
}

// held is c with its status naming the node it holds on.
func held(c *v1alpha1.Claim, node string) *v1alpha1.Claim {
	c.Status.NodeName = node
	return c
}

func claim(name, typ string, cards int32, phase v1alpha1.ClaimPhase) *v1alpha1.Claim {
	return &v1alpha1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "41"},
		Spec:       v1alpha1.ClaimSpec{Type: typ, Accelerators: ptr.To(cards)},
		Status:     v1alpha1.ClaimStatus{Phase: phase},
	}
}

func instanceTypes() []*v1alpha1.InstanceType {
	return []*v1alpha1.InstanceType{
		{ObjectMeta: metav1.ObjectMeta{Name: "h100"}, Spec: v1alpha1.InstanceTypeSpec{Accelerator: &v1alpha1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
			Exclusive:  &v1alpha1.ExclusiveSharing{},
			Partitions: []v1alpha1.PartitionProfile{{Name: "3g.40gb", Memory: resource.MustParse("40Gi")}},
		}}},
		{ObjectMeta: metav1.ObjectMeta{Name: "a10"}, Spec: v1alpha1.InstanceTypeSpec{Accelerator: &v1alpha1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-A10", Memory: resource.MustParse("24Gi"), MaxPerInstance: 1, Exclusive: &v1alpha1.ExclusiveSharing{},
		}}},
	}
}

// newReconciler returns the reconciler over a fake clientset holding
// objects, with the InstanceType lister filled by hand and the clock
// stopped at recountTime plus later.
func newReconciler(t *testing.T, later time.Duration, objects ...runtime.Object) (*Reconciler, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	factory := kilninformers.NewSharedInformerFactory(client, 0)
	r, err := NewReconciler(client, factory, nil)
	if err != nil {
		t.Fatal(err)
	}
	indexer := factory.Gpu().V1alpha1().InstanceTypes().Informer().GetIndexer()
	for _, it := range instanceTypes() {
		if err := indexer.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	r.now = func() time.Time { return recountTime.Add(later) }
	return r, client
}

// statusWrites counts the UpdateStatus calls per Budget, and checks each
// is made under the reconciler's field manager.
func statusWrites(t *testing.T, client *fake.Clientset) map[string]int {
	t.Helper()
	writes := map[string]int{}
	for _, a := range client.Actions() {
		u, ok := a.(core.UpdateActionImpl)
		if !ok {
			continue
		}
		if a.GetResource() != budgetsGVR || a.GetSubresource() != "status" {
			t.Errorf("%s/%s written, want only budgets/status", a.GetResource().Resource, a.GetSubresource())
		}
		if fm := u.GetUpdateOptions().FieldManager; fm != "kiln-budget-reconciler" {
			t.Errorf("budget status written with field manager %q, want kiln-budget-reconciler", fm)
		}
		writes[u.GetObject().(*v1alpha1.Budget).Name]++
	}
	return writes
}

func text(l v1alpha1.BudgetResourceList) string {
	var s []string
	for k, q := range l {
		s = append(s, fmt.Sprintf("%s=%s", k, q.String()))
	}
	sort.Strings(s)
	return strings.Join(s, " ")
}

func pendingText(p []v1alpha1.BudgetCharge) string {
	var s []string
	for _, c := range p {
		s = append(s, fmt.Sprintf("{%s %s rv=%q charge=[%s] time=%s}", c.Kind, c.Name, c.ResourceVersion, text(c.Charge), c.Time.UTC().Format(time.RFC3339)))
	}
	return strings.Join(s, " ")
}

// checkBudgets compares every Budget's status with want; Budgets want
// does not name must still have their status from before.
func checkBudgets(t *testing.T, client *fake.Clientset, before []*v1alpha1.Budget, want map[string]v1alpha1.BudgetStatus) {
	t.Helper()
	for _, b := range before {
		w, ok := want[b.Name]
		if !ok {
			w = b.Status
		}
		obj, err := client.Tracker().Get(budgetsGVR, ns, b.Name)
		if err != nil {
			t.Fatal(err)
		}
		got := obj.(*v1alpha1.Budget).Status
		if !apiequality.Semantic.DeepEqual(got.Used, w.Used) {
			t.Errorf("budget %s: used %s, want %s", b.Name, text(got.Used), text(w.Used))
		}
		// Keys the Budget does not name are not recounted, so must not
		// linger from before either.
		for k := range got.Used {
			if _, ok := w.Used[k]; !ok {
				t.Errorf("budget %s: used has %s, which it does not limit", b.Name, k)
			}
		}
		if !apiequality.Semantic.DeepEqual(got.Pending, w.Pending) {
			t.Errorf("budget %s: pending %s, want %s", b.Name, pendingText(got.Pending), pendingText(w.Pending))
		}
		if w.Conditions != nil && !apiequality.Semantic.DeepEqual(got.Conditions, w.Conditions) {
			t.Errorf("budget %s: conditions\n%+v\nwant\n%+v", b.Name, got.Conditions, w.Conditions)
		}
	}
}

func TestReconcileRecount(t *testing.T) {
	allKeys := list("accelerators", "100", "accelerators.h100", "100", "accelerators.a10", "100", "accelerator-memory", "10Ti", "instances", "10")
	cards := list("accelerators", "8")
	cases := []struct {
		name    string
		objects []runtime.Object
		budgets []*v1alpha1.Budget
		// later moves the clock on from recountTime.
		later time.Duration
		// want is the status of the Budgets that end up changed.
		want map[string]v1alpha1.BudgetStatus
		// writes is the number of status updates per Budget; none for the
		// others.
		writes  map[string]int
		requeue time.Duration
		// deleted are the Instances the informer saw deleted before the
		// recount; nil stands for a deletion seen without a copy.
		deleted []*v1alpha1.Instance
	}{
		// Stored objects.
		{name: "Instances (stopped ones as Instances) and charged Claims are counted, for each key a Budget names and only those",
			objects: []runtime.Object{
				instance("train", 2),
				instance("idle", 4, stopped),
				instance("small", 1, typed("a10")),
				instance("part", 0, partition("3g.40gb")),
				claim("hold", "h100", 1, v1alpha1.ClaimBound),
				claim("fresh", "h100", 1, ""),
				claim("using", "h100", 1, v1alpha1.ClaimAttached),
				claim("lost", "h100", 4, v1alpha1.ClaimLost),
				claim("expired", "h100", 4, v1alpha1.ClaimExpired),
			},
			budgets: []*v1alpha1.Budget{
				budget("all", allKeys, list("accelerators", "50")),
				budget("cards", cards, list("accelerators", "1", "instances", "3")),
				budget("a10", list("accelerators.a10", "1"), nil),
			},
			want: map[string]v1alpha1.BudgetStatus{
				// Cards: 2 + 1 + 0.5 from Instances, 1 + 1 + 1 + 4 from Claims.
				"all": {Used: list("accelerators", "10.5", "accelerators.h100", "9.5", "accelerators.a10", "1",
					"accelerator-memory", "784Gi", "instances", "4")},
				"cards": {Used: list("accelerators", "10.5")},
				"a10":   {Used: list("accelerators.a10", "1")},
			},
			writes: map[string]int{"all": 1, "cards": 1, "a10": 1}},
		{name: "a Budget already equal is not written",
			objects: []runtime.Object{instance("train", 2)},
			budgets: []*v1alpha1.Budget{
				budget("cards", cards, list("accelerators", "2")),
				budget("instances", list("instances", "4"), list("instances", "0")),
			},
			want:   map[string]v1alpha1.BudgetStatus{"instances": {Used: list("instances", "1")}},
			writes: map[string]int{"instances": 1}},
		{name: "a stopped Instance's cards stay charged until kiln-controller reports its Pod gone for this generation",
			objects: []runtime.Object{
				instance("going", 1, stopped, reported(v1alpha1.InstanceStopping, 3)),
				instance("unseen", 1, stopped, reported(v1alpha1.InstanceReady, 2)),
				instance("restopped", 1, stopped, reported(v1alpha1.InstanceStopped, 2)),
				instance("gone", 4, stopped, reported(v1alpha1.InstanceStopped, 3)),
			},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "8"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "3", "instances", "4")}},
			writes:  map[string]int{"team": 1}},
		{name: "node ports of every Instance are counted, stopped or not",
			objects: []runtime.Object{instance("web", 1, withPorts(2)), instance("idle", 0, stopped, withPorts(3))},
			budgets: []*v1alpha1.Budget{budget("team", list("nodeports", "8"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("nodeports", "5")}},
			writes:  map[string]int{"team": 1}},
		{name: "a namespace without Budgets is left alone",
			objects: []runtime.Object{instance("train", 2)}},

		// Instances on Claims.
		{name: "an Instance on a Claim that holds it is counted once, as the Claim, and as a running Instance",
			objects: []runtime.Object{claim("held", "h100", 2, v1alpha1.ClaimBound), instance("train", 2, onClaim("held"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Instance on a Lost Claim is counted once, as the Claim",
			objects: []runtime.Object{claim("held", "h100", 2, v1alpha1.ClaimLost), instance("train", 2, onClaim("held"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Instance on a Claim of fewer cards is counted in full besides the Claim",
			objects: []runtime.Object{claim("held", "h100", 1, v1alpha1.ClaimBound), instance("train", 8, onClaim("held"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "16", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "9", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "a partition Instance on a Claim of cards is counted besides the Claim",
			objects: []runtime.Object{claim("held", "h100", 1, v1alpha1.ClaimAttached), instance("train", 0, onClaim("held"), partition("3g.40gb"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "1.5", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Instance on an Expired Claim is counted, the Claim is not",
			objects: []runtime.Object{claim("held", "h100", 2, v1alpha1.ClaimExpired), instance("train", 2, onClaim("held"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Expired Claim whose holder is not seen gone (status names its node) is counted",
			objects: []runtime.Object{held(claim("going", "h100", 2, v1alpha1.ClaimExpired), "gpu-1"), claim("gone", "h100", 4, v1alpha1.ClaimExpired)},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Instance on a Claim of another type is counted besides the Claim",
			objects: []runtime.Object{claim("held", "a10", 1, v1alpha1.ClaimBound), instance("train", 2, onClaim("held"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "3", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "an Instance naming a missing Claim is counted",
			objects: []runtime.Object{instance("train", 2, onClaim("nonesuch"))},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2", "instances", "1")}},
			writes:  map[string]int{"team": 1}},
		{name: "a stopped Instance of a missing type charges nothing to look up",
			objects: []runtime.Object{instance("train", 2, typed("nonesuch"), stopped), claim("gone", "nonesuch", 1, v1alpha1.ClaimExpired)},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"))},
			want:    map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "0")}},
			writes:  map[string]int{"team": 1}},

		// Charges in flight: creates.
		{name: "a pending create not yet stored is kept and counted",
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "0"),
				charge("Instance", "new", "", 10*time.Second, list("accelerators", "2")))},
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "new", "", 10*time.Second, list("accelerators", "2"))},
			}},
			writes:  map[string]int{"team": 1},
			requeue: 21 * time.Second},
		{name: "a pending create of a Claim not yet stored is kept and counted",
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"),
				charge("Claim", "new", "", 0, list("accelerators", "2")))},
			requeue: 31 * time.Second},
		{name: "a pending create is dropped once its object is stored, and counted once",
			objects: []runtime.Object{instance("new", 2)},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"),
				charge("Instance", "new", "", 10*time.Second, list("accelerators", "2")))},
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "2")}},
			writes: map[string]int{"team": 1}},
		{name: "a pending create is dropped once older than PendingTTL",
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"),
				charge("Instance", "new", "", 10*time.Second, list("accelerators", "2")))},
			later:  21 * time.Second,
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "0")}},
			writes: map[string]int{"team": 1}},
		// Issue O, class 10: one object used to fail every recount.
		{name: "an object its type can no longer price is counted as the whole card it runs on, and the Budget says so",
			objects: []runtime.Object{instance("train", 0, partition("7g.80gb")), instance("other", 2)},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "accelerator-memory", "640Gi"), list("accelerators", "3", "accelerator-memory", "200Gi"))},
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used: list("accelerators", "3", "accelerator-memory", "240Gi"),
				Conditions: []metav1.Condition{counted(metav1.ConditionFalse, v1alpha1.BudgetReasonUnpriced,
					`Instance train: instancetype "h100" has no partition profile "7g.80gb"; counted as 1 whole card(s) until it is stopped or changed`)},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a pending create whose object was deleted before any recount listed it is dropped at once",
			deleted: []*v1alpha1.Instance{instance("new", 2)},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"),
				charge("Instance", "new", "", 0, list("accelerators", "2")))},
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "0")}},
			writes: map[string]int{"team": 1}},
		{name: "a deletion seen without a copy leaves the charge to its TTL",
			deleted: []*v1alpha1.Instance{nil},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "2"),
				charge("Instance", "new", "", 0, list("accelerators", "2")))},
			requeue: 31 * time.Second},
		{name: "requeue is when the first pending charge of any Budget expires, plus 1s",
			budgets: []*v1alpha1.Budget{
				budget("a", cards, list("accelerators", "2"),
					charge("Instance", "young", "", 5*time.Second, list("accelerators", "1")),
					charge("Instance", "old", "", 20*time.Second, list("accelerators", "1"))),
				budget("b", cards, list("accelerators", "1"),
					charge("Instance", "middle", "", 12*time.Second, list("accelerators", "1"))),
			},
			requeue: 11 * time.Second},
		{name: "requeue follows the clock",
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "1"),
				charge("Instance", "new", "", 0, list("accelerators", "1")))},
			later:   25 * time.Second,
			requeue: 6 * time.Second},

		// Charges in flight: updates.
		{name: "a pending update is kept while its object has the charged resourceVersion, and adds only what it raises",
			objects: []runtime.Object{instance("train", 1)},
			budgets: []*v1alpha1.Budget{budget("team",
				list("accelerators", "8", "accelerator-memory", "640Gi", "instances", "4"), nil,
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3", "accelerator-memory", "240Gi", "instances", "1")))},
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "3", "accelerator-memory", "240Gi", "instances", "1"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3", "accelerator-memory", "240Gi", "instances", "1"))},
			}},
			writes:  map[string]int{"team": 1},
			requeue: 21 * time.Second},
		{name: "a pending start is counted whole while the Instance is stored stopped",
			objects: []runtime.Object{instance("train", 2, stopped)},
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil,
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "2", "instances", "1")))},
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2", "instances", "1"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", 10*time.Second, list("accelerators", "2", "instances", "1"))},
			}},
			writes:  map[string]int{"team": 1},
			requeue: 21 * time.Second},
		{name: "a pending update is dropped once its object has another resourceVersion",
			objects: []runtime.Object{instance("train", 3, resourceVersion("42"))},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "3"),
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3")))},
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "3")}},
			writes: map[string]int{"team": 1}},
		{name: "a pending update that lost its race is dropped, and the stored state counted",
			objects: []runtime.Object{instance("train", 1, resourceVersion("42"))},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "3"),
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3")))},
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "1")}},
			writes: map[string]int{"team": 1}},
		{name: "a pending update is dropped once its object is deleted",
			deleted: []*v1alpha1.Instance{instance("train", 1)},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "3"),
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3")))},
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "0")}},
			writes: map[string]int{"team": 1}},
		{name: "a pending update is dropped once older than PendingTTL",
			objects: []runtime.Object{instance("train", 1)},
			budgets: []*v1alpha1.Budget{budget("team", cards, list("accelerators", "3"),
				charge("Instance", "train", "41", 10*time.Second, list("accelerators", "3")))},
			later:  21 * time.Second,
			want:   map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "1")}},
			writes: map[string]int{"team": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			objects := tc.objects
			for _, b := range tc.budgets {
				objects = append(objects, b)
			}
			r, client := newReconciler(t, tc.later, objects...)
			for _, inst := range tc.deleted {
				byNamespace[*v1alpha1.Instance](r).OnDelete(cache.DeletedObject[*v1alpha1.Instance]{OptionalObj: inst})
			}
			requeue, err := r.Reconcile(context.Background(), ns)
			if err != nil {
				t.Fatal(err)
			}
			if requeue != tc.requeue {
				t.Errorf("requeue after %v, want %v", requeue, tc.requeue)
			}
			if writes := statusWrites(t, client); !apiequality.Semantic.DeepEqual(writes, tc.writes) {
				t.Errorf("status writes %v, want %v", writes, tc.writes)
			}
			checkBudgets(t, client, tc.budgets, tc.want)
		})
	}
}

// TestReconcileErrors: a recount that cannot be exact writes nothing and
// returns the error, so that the queue retries it.
func TestReconcileErrors(t *testing.T) {
	cases := []struct {
		name    string
		objects []runtime.Object
		// verb and resource name the calls that fail with err.
		verb, resource string
		err            error
		wantErr        string
		wantConflict   bool
		writes         map[string]int
	}{
		{name: "a running Instance of a missing type",
			objects: []runtime.Object{instance("train", 2, typed("nonesuch"))},
			wantErr: `instancetype "nonesuch" of a charged object: instancetype.gpu.kiln.dev "nonesuch" not found`},
		{name: "a held Claim of a missing type",
			objects: []runtime.Object{claim("hold", "nonesuch", 2, v1alpha1.ClaimBound)},
			wantErr: `instancetype "nonesuch" of a charged object: instancetype.gpu.kiln.dev "nonesuch" not found`},
		{name: "a failed list of Instances",
			objects: []runtime.Object{instance("train", 2)},
			verb:    "list", resource: "instances", err: errors.New("etcd is down"),
			wantErr: "etcd is down"},
		{name: "a failed list of Claims",
			objects: []runtime.Object{instance("train", 2)},
			verb:    "list", resource: "claims", err: errors.New("etcd is down"),
			wantErr: "etcd is down"},
		{name: "a conflict on every status write",
			objects: []runtime.Object{instance("train", 2)},
			verb:    "update", resource: "budgets",
			err:          apierrors.NewConflict(v1alpha1.Resource("budgets"), "team", errors.New("the object has been modified")),
			wantErr:      `Operation cannot be fulfilled on budgets.gpu.kiln.dev "team": the object has been modified`,
			wantConflict: true,
			// The Budget read again says 5 cards are used where this
			// count finds 2: not carried over, started over.
			writes: map[string]int{"team": 1}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := budget("team", list("accelerators", "8"), list("accelerators", "5"))
			r, client := newReconciler(t, 0, append(tc.objects, before)...)
			if tc.verb != "" {
				client.PrependReactor(tc.verb, tc.resource, func(core.Action) (bool, runtime.Object, error) {
					return true, nil, tc.err
				})
			}
			_, err := r.Reconcile(context.Background(), ns)
			if err == nil || err.Error() != tc.wantErr {
				t.Fatalf("error %v, want %q", err, tc.wantErr)
			}
			if apierrors.IsConflict(err) != tc.wantConflict {
				t.Errorf("IsConflict(%v) = %v, want %v", err, !tc.wantConflict, tc.wantConflict)
			}
			if writes := statusWrites(t, client); !apiequality.Semantic.DeepEqual(writes, tc.writes) {
				t.Errorf("status writes %v, want %v", writes, tc.writes)
			}
			checkBudgets(t, client, []*v1alpha1.Budget{before}, nil)
		})
	}
}

// TestReconcileRebases: a status write that conflicts because admission
// charged the Budget meanwhile is carried over the Budget read again, with
// the new charges kept, without a new list; any other change since the
// read starts the recount over.
func TestReconcileRebases(t *testing.T) {
	settled := charge("Instance", "stored", "", time.Second, list("accelerators", "2"))
	inFlight := charge("Instance", "flying", "", time.Second, list("accelerators", "1"))
	landed := charge("Instance", "landed", "", 0, list("accelerators", "1"))
	for _, tc := range []struct {
		name string
		// meanwhile changes the stored Budget before the first status
		// write, which then conflicts.
		meanwhile func(*v1alpha1.Budget)
		want      *v1alpha1.BudgetStatus
	}{
		{name: "a charge landed", meanwhile: func(b *v1alpha1.Budget) {
			b.Status.Pending = append(b.Status.Pending, landed)
			b.Status.Used = list("accelerators", "4")
		}, want: &v1alpha1.BudgetStatus{Used: list("accelerators", "4"), Pending: []v1alpha1.BudgetCharge{inFlight, landed}}},
		{name: "another recount counted an object this list does not show", meanwhile: func(b *v1alpha1.Budget) {
			// Its charge landed after the first read and went with that
			// recount: neither read shows it, but the used it wrote does.
			b.Status.Pending = []v1alpha1.BudgetCharge{inFlight}
			b.Status.Used = list("accelerators", "5")
		}},
		{name: "a charge rolled back, or settled by another replica", meanwhile: func(b *v1alpha1.Budget) {
			b.Status.Pending = []v1alpha1.BudgetCharge{inFlight}
		}, want: &v1alpha1.BudgetStatus{Used: list("accelerators", "3"), Pending: []v1alpha1.BudgetCharge{inFlight}}},
		{name: "a charge this count keeps was settled by another replica", meanwhile: func(b *v1alpha1.Budget) {
			b.Status.Pending = []v1alpha1.BudgetCharge{settled}
		}},
		{name: "a charge replaced by a later one of its object", meanwhile: func(b *v1alpha1.Budget) {
			later := inFlight
			later.Charge = list("accelerators", "2")
			b.Status.Pending = []v1alpha1.BudgetCharge{settled, later}
		}},
		{name: "the spec changed", meanwhile: func(b *v1alpha1.Budget) {
			b.Generation++
			b.Spec.Hard = list("accelerators", "9")
		}},
		{name: "the ledger moved", meanwhile: func(b *v1alpha1.Budget) {
			b.Status.FoldedUIDs = []types.UID{"uid-gone"}
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			before := budget("team", list("accelerators", "8"), list("accelerators", "3"), settled, inFlight)
			r, client := newReconciler(t, 0, before, instance("stored", 2))
			conflicted := false
			client.PrependReactor("update", "budgets", func(core.Action) (bool, runtime.Object, error) {
				if conflicted {
					return false, nil, nil
				}
				conflicted = true
				b := before.DeepCopy()
				tc.meanwhile(b)
				if err := client.Tracker().Update(budgetsGVR, b, ns); err != nil {
					t.Fatal(err)
				}
				return true, nil, apierrors.NewConflict(v1alpha1.Resource("budgets"), "team", errors.New("the object has been modified"))
			})
			_, err := r.Reconcile(context.Background(), ns)
			if tc.want == nil {
				if !apierrors.IsConflict(err) {
					t.Fatalf("Reconcile = %v, want the conflict, to start over", err)
				}
				if writes := statusWrites(t, client); writes["team"] != 1 {
					t.Errorf("status writes %v, want the one that conflicted", writes)
				}
				return
			}
			if err != nil {
				t.Fatalf("Reconcile = %v, want the count carried over", err)
			}
			lists := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "list" && a.GetResource().Resource == "instances" {
					lists++
				}
			}
			if lists != 1 {
				t.Errorf("Instances listed %d times, want once", lists)
			}
			obj, err := client.Tracker().Get(budgetsGVR, ns, "team")
			if err != nil {
				t.Fatal(err)
			}
			got := obj.(*v1alpha1.Budget).Status
			if !apiequality.Semantic.DeepEqual(got.Used, tc.want.Used) || !apiequality.Semantic.DeepEqual(got.Pending, tc.want.Pending) {
				t.Errorf("stored used %v pending %v, want used %v pending %v", got.Used, got.Pending, tc.want.Used, tc.want.Pending)
			}
		})
	}
}

// TestDeletedForgotten: the UIDs of deleted objects are kept only as long
// as a charge can stay in flight.
func TestDeletedForgotten(t *testing.T) {
	r, _ := newReconciler(t, 0)
	r.deleted("uid-old")
	r.now = func() time.Time { return recountTime.Add(r.PendingTTL + time.Second) }
	r.deleted("uid-new")
	if r.isGone("uid-old") || !r.isGone("uid-new") {
		t.Errorf("gone %v, want only uid-new", r.gone)
	}
}

// TestReconcileGuarded (issue O, class 9): a Budget says whether the Pod
// policy guards its namespace, so that an admin sees one that counts only
// what Kiln makes while Pods there could get accelerators without it.
func TestReconcileGuarded(t *testing.T) {
	const guardedMsg = "namespace team-a is labelled gpu.kiln.dev/accelerators=kiln-only: only Kiln makes Pods that get accelerators there"
	const unguardedMsg = "namespace team-a is not labelled gpu.kiln.dev/accelerators=kiln-only, so Pods there may get accelerators without Kiln, and this Budget does not count them; a cluster admin guards it with: kubectl label namespace team-a gpu.kiln.dev/accelerators=kiln-only"
	for _, tc := range []struct {
		name   string
		labels map[string]string
		absent bool
		want   *metav1.Condition
	}{
		{name: "labelled kiln-only", labels: map[string]string{v1alpha1.LabelAccelerators: v1alpha1.AcceleratorsKilnOnly},
			want: &metav1.Condition{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionTrue, Reason: v1alpha1.BudgetReasonNamespaceGuarded, Message: guardedMsg}},
		{name: "not labelled",
			want: &metav1.Condition{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonNamespaceNotGuarded, Message: unguardedMsg}},
		{name: "labelled with another value", labels: map[string]string{v1alpha1.LabelAccelerators: "any"},
			want: &metav1.Condition{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonNamespaceNotGuarded, Message: unguardedMsg}},
		{name: "a namespace not seen yet says nothing", absent: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b := budget("team", list("accelerators", "8"), list("accelerators", "0"))
			client := fake.NewSimpleClientset(b)
			kube := kubeinformers.NewSharedInformerFactory(kubefake.NewSimpleClientset(), 0)
			r, err := NewReconciler(client, kilninformers.NewSharedInformerFactory(client, 0), kube)
			if err != nil {
				t.Fatal(err)
			}
			r.now = func() time.Time { return recountTime }
			if !tc.absent {
				if err := kube.Core().V1().Namespaces().Informer().GetIndexer().Add(&corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns, Labels: tc.labels}}); err != nil {
					t.Fatal(err)
				}
			}
			if _, err := r.Reconcile(context.Background(), ns); err != nil {
				t.Fatal(err)
			}
			obj, err := client.Tracker().Get(budgetsGVR, ns, "team")
			if err != nil {
				t.Fatal(err)
			}
			got := meta.FindStatusCondition(obj.(*v1alpha1.Budget).Status.Conditions, v1alpha1.BudgetConditionGuarded)
			if tc.want == nil {
				if got != nil {
					t.Fatalf("condition %+v, want none", got)
				}
				return
			}
			if got == nil || got.Status != tc.want.Status || got.Reason != tc.want.Reason || got.Message != tc.want.Message {
				t.Fatalf("condition %+v, want %+v", got, tc.want)
			}
		})
	}
}
