package budget

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strings"
	"testing"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	core "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

// These tests drive the plugin against a fake clientset; the integration
// tests cover the same rules against a real server and concurrency.

const ns = "team-a"

var (
	chargeTime = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	budgetsGVR = v1alpha1.SchemeGroupVersion.WithResource("budgets")
)

// list reads key, quantity pairs.
func list(kv ...string) v1alpha1.BudgetResourceList {
	l := v1alpha1.BudgetResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[v1alpha1.BudgetResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func budget(name string, hard, used v1alpha1.BudgetResourceList, pending ...v1alpha1.BudgetCharge) *v1alpha1.Budget {
	return &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, ResourceVersion: "7"},
		Spec:       v1alpha1.BudgetSpec{Hard: hard},
		Status:     v1alpha1.BudgetStatus{Hard: hard, Used: used, Pending: pending},
	}
}

// charge is the pending entry the plugin records for the object named
// name; rv is set for an update.
func charge(kind, name, rv string, c v1alpha1.BudgetResourceList) v1alpha1.BudgetCharge {
	return v1alpha1.BudgetCharge{Kind: kind, Name: name, UID: types.UID("uid-" + name), ResourceVersion: rv, Charge: c, Time: metav1.NewTime(chargeTime)}
}

// instance is a running Instance of h100 cards.
func instance(name string, cards int32, mutate ...func(*gpu.Instance)) *gpu.Instance {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name), ResourceVersion: "41"},
		Spec: gpu.InstanceSpec{
			Type: "h100", Image: "busybox:1",
			Resources: gpu.InstanceResources{Accelerators: ptr.To(cards)},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func stopped(i *gpu.Instance) { i.Spec.Stopped = true }

// phase is the status kiln-controller reported for the current generation.
func phase(p gpu.InstancePhase) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		i.Generation, i.Status.Phase, i.Status.ObservedGeneration = 2, p, 2
		i.Finalizers = []string{gpu.InstanceFinalizer}
	}
}

func ports(n int) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		for p := range n {
			i.Spec.Ports = append(i.Spec.Ports, gpu.InstancePort{Name: fmt.Sprintf("p%d", p), Port: int32(8000 + p)})
		}
	}
}

func onClaim(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.ClaimName = name }
}

func labelled(i *gpu.Instance) { i.Labels = map[string]string{"team": "vision"} }

func partition(profile string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators, i.Spec.Resources.Partition = nil, profile }
}

func typed(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Type = name }
}

func claim(name string, cards int32) *gpu.Claim {
	return &gpu.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec:       gpu.ClaimSpec{Type: "h100", Accelerators: ptr.To(cards)},
	}
}

// storedClaim is a Claim as the server holds it, for an Instance to name.
func storedClaim(name, typ string, phase v1alpha1.ClaimPhase) *v1alpha1.Claim {
	return &v1alpha1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.ClaimSpec{Type: typ, Accelerators: ptr.To(int32(2))},
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
		{ObjectMeta: metav1.ObjectMeta{Name: "cpu-small"}},
	}
}

// newPlugin returns the plugin over a fake clientset holding objects, with
// the InstanceType lister filled by hand and the clock stopped.
func newPlugin(t *testing.T, objects ...runtime.Object) (*Plugin, *fake.Clientset) {
	t.Helper()
	client := fake.NewSimpleClientset(objects...)
	factory := kilninformers.NewSharedInformerFactory(client, 0)
	indexer := factory.Gpu().V1alpha1().InstanceTypes().Informer().GetIndexer()
	for _, it := range instanceTypes() {
		if err := indexer.Add(it); err != nil {
			t.Fatal(err)
		}
	}
	p := New()
	p.SetKilnClient(client)
	p.SetBudgetLister(kilninit.ClientBudgetLister(client))
	p.SetBudgetStatusWriter(kilninit.ClientBudgetStatusWriter(client, FieldManager))
	p.SetKilnInformerFactory(factory)
	// The informer never runs; its indexer is already what it would hold.
	p.SetReadyFunc(func() bool { return true })
	p.now = func() time.Time { return chargeTime }
	// Tables give every Budget the used they mean; the recount is tested
	// on its own.
	p.SetBudgetRecount(func(context.Context, string) error { return nil })
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	return p, client
}

// attributes is a write of obj in ns: an update when old is set, a create
// otherwise, or a create of the subresource (a start or stop).
func attributes(obj, old runtime.Object, subresource string, dryRun bool) admission.Attributes {
	resource, kind := "instances", "Instance"
	if _, ok := obj.(*gpu.Claim); ok {
		resource, kind = "claims", "Claim"
	}
	op, opts := admission.Create, runtime.Object(&metav1.CreateOptions{})
	if old != nil {
		op, opts = admission.Update, &metav1.UpdateOptions{}
	}
	name := obj.(metav1.Object).GetName()
	return admission.NewAttributesRecord(obj, old, gpu.SchemeGroupVersion.WithKind(kind), ns, name,
		gpu.SchemeGroupVersion.WithResource(resource), subresource, op, opts, dryRun, &user.DefaultInfo{Name: "tenant-a"})
}

// statusWrites counts the UpdateStatus calls per Budget, and checks each
// is made under the plugin's field manager.
func statusWrites(t *testing.T, client *fake.Clientset) map[string]int {
	t.Helper()
	writes := map[string]int{}
	for _, a := range client.Actions() {
		u, ok := a.(core.UpdateActionImpl)
		if !ok || a.GetResource() != budgetsGVR {
			continue
		}
		if a.GetSubresource() != "status" {
			t.Errorf("budget written through %q, want the status subresource", a.GetSubresource())
		}
		if fm := u.GetUpdateOptions().FieldManager; fm != "kiln-budget-admission" {
			t.Errorf("budget status written with field manager %q, want kiln-budget-admission", fm)
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
		s = append(s, fmt.Sprintf("{%s %s uid=%s rv=%q charge=[%s] time=%s}", c.Kind, c.Name, c.UID, c.ResourceVersion, text(c.Charge), c.Time.UTC().Format(time.RFC3339)))
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
		if apierrors.IsNotFound(err) {
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		got := obj.(*v1alpha1.Budget).Status
		if !apiequality.Semantic.DeepEqual(got.Used, w.Used) {
			t.Errorf("budget %s: used %s, want %s", b.Name, text(got.Used), text(w.Used))
		}
		if !apiequality.Semantic.DeepEqual(got.Pending, w.Pending) {
			t.Errorf("budget %s: pending %s, want %s", b.Name, pendingText(got.Pending), pendingText(w.Pending))
		}
	}
}

func checkErr(t *testing.T, err error, wantCode int32, wantErr string) {
	t.Helper()
	if wantErr == "" {
		if err != nil {
			t.Fatalf("refused: %v", err)
		}
		return
	}
	var status apierrors.APIStatus
	if err == nil || !errors.As(err, &status) {
		t.Fatalf("error %v, want a %d API error %q", err, wantCode, wantErr)
	}
	if code := status.Status().Code; code != wantCode || err.Error() != wantErr {
		t.Fatalf("error %d %q, want %d %q", code, err.Error(), wantCode, wantErr)
	}
}

func TestPluginValidate(t *testing.T) {
	// The keys of one two-card h100 Instance.
	allKeys := list("accelerators", "16", "accelerators.h100", "8", "accelerator-memory", "640Gi", "instances", "4")
	twoCards := list("accelerators", "2", "accelerators.h100", "2", "accelerator-memory", "160Gi", "instances", "1")
	// A start raises the cards only: a stopped Instance counts as one.
	startCards := list("accelerators", "2", "accelerators.h100", "2", "accelerator-memory", "160Gi")
	forbidden := func(resource, name, msg string) string {
		return fmt.Sprintf("%s.gpu.kiln.dev %q is forbidden: %s", resource, name, msg)
	}
	cases := []struct {
		name    string
		budgets []*v1alpha1.Budget
		claims  []*v1alpha1.Claim
		obj     runtime.Object
		// old is the stored object an update or a start replaces.
		old         runtime.Object
		subresource string
		dryRun      bool
		wantCode    int32
		wantErr     string
		// want is the status of the Budgets that end up changed.
		want map[string]v1alpha1.BudgetStatus
		// writes is the number of status updates per Budget; none for the
		// others.
		writes map[string]int
	}{
		// Creates.
		{name: "create within the limit charges used and records it pending",
			budgets: []*v1alpha1.Budget{budget("team", allKeys, list("accelerators", "1", "accelerators.h100", "1", "accelerator-memory", "80Gi", "instances", "1"))},
			obj:     instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "3", "accelerators.h100", "3", "accelerator-memory", "240Gi", "instances", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", twoCards)},
			}},
			writes: map[string]int{"team": 1}},
		{name: "pending charge holds only the Budget's keys",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), nil)},
			obj:     instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2", "instances", "1"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2", "instances", "1"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a charge of the same object replaces its earlier pending entry, others stay",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "3"),
				charge("Instance", "other", "", list("accelerators", "1")),
				charge("Instance", "train", "40", list("accelerators", "2")))},
			obj: instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used: list("accelerators", "5"),
				Pending: []v1alpha1.BudgetCharge{
					charge("Instance", "other", "", list("accelerators", "1")),
					charge("Instance", "train", "", list("accelerators", "2")),
				},
			}},
			writes: map[string]int{"team": 1}},
		{name: "two updates in flight against one resourceVersion: the entry keeps the larger charge of each key",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "4"), list("accelerators", "3", "instances", "1"),
				charge("Instance", "train", "41", list("accelerators", "3", "instances", "1")))},
			obj: instance("train", 2), old: instance("train", 1),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "4", "instances", "1"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", list("accelerators", "3", "instances", "1"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "an update against a later resourceVersion replaces the landed one's entry",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "3"),
				charge("Instance", "train", "40", list("accelerators", "3")))},
			obj: instance("train", 2), old: instance("train", 1),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "4"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", list("accelerators", "2"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "reaching the limit exactly is admitted",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "6"))},
			obj:     instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "8"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a partition charges its share of a card",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "accelerator-memory", "640Gi"), list("accelerators", "7.5", "accelerator-memory", "0"))},
			obj:     instance("train", 0, partition("3g.40gb")),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "8", "accelerator-memory", "40Gi"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "500m", "accelerator-memory", "40Gi"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a CPU-only type charges an instance and no cards",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8", "instances", "2"), list("accelerators", "8", "instances", "1"))},
			obj:     instance("train", 0, typed("cpu-small")),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "8", "instances", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "0", "instances", "1"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "an unknown type is left to InstanceTypeAccess",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			obj:     instance("train", 2, typed("nonesuch"))},
		{name: "create over the limit is refused and writes nothing",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "7"))},
			obj:      instance("train", 2),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 7 + requested 2 > hard 8`)},
		{name: "the first key over, in name order, is the one reported",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "1", "accelerator-memory", "100Gi"), nil)},
			obj:      instance("train", 2),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerator-memory used 0 + requested 160Gi > hard 100Gi`)},

		// Several Budgets.
		{name: "every Budget naming an affected key is charged, others are not written",
			budgets: []*v1alpha1.Budget{
				budget("a-cards", list("accelerators", "8"), list("accelerators", "1")),
				budget("b-h100", list("accelerators.h100", "4"), list("accelerators.h100", "1")),
				budget("c-a10", list("accelerators.a10", "1"), list("accelerators.a10", "1")),
			},
			obj: instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{
				"a-cards": {Used: list("accelerators", "3"), Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))}},
				"b-h100":  {Used: list("accelerators.h100", "3"), Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators.h100", "2"))}},
			},
			writes: map[string]int{"a-cards": 1, "b-h100": 1}},
		{name: "a later Budget refusing refunds the earlier ones",
			budgets: []*v1alpha1.Budget{
				// Listed out of order: Budgets are charged by name.
				budget("b-h100", list("accelerators.h100", "4"), list("accelerators.h100", "3")),
				budget("a-cards", list("accelerators", "8"), list("accelerators", "2"),
					charge("Instance", "other", "", list("accelerators", "1"))),
			},
			obj:      instance("train", 2),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "b-h100": accelerators.h100 used 3 + requested 2 > hard 4`),
			// a-cards is charged, then refunded back to what it was.
			writes: map[string]int{"a-cards": 2}},

		// Dry runs.
		{name: "dry run within the limit is admitted and charges nothing",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "1"))},
			obj:     instance("train", 2),
			dryRun:  true},
		{name: "dry run over the limit is refused",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "7"))},
			obj:      instance("train", 2),
			dryRun:   true,
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 7 + requested 2 > hard 8`)},

		// Updates and starts.
		{name: "update from stopped to running charges its cards, against the old resourceVersion",
			budgets: []*v1alpha1.Budget{budget("team", allKeys, nil)},
			old:     instance("train", 2, stopped),
			obj:     instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    startCards,
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", twoCards)},
			}},
			writes: map[string]int{"team": 1}},
		{name: "instances/start charges like an update",
			budgets:     []*v1alpha1.Budget{budget("team", allKeys, nil)},
			old:         instance("train", 2, stopped),
			obj:         instancechange.Lifecycle(instance("train", 2, stopped), "start"),
			subresource: "start",
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    startCards,
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", twoCards)},
			}},
			writes: map[string]int{"team": 1}},
		{name: "instances/start over the limit is refused",
			budgets:     []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "7"))},
			old:         instance("train", 2, stopped),
			obj:         instancechange.Lifecycle(instance("train", 2, stopped), "start"),
			subresource: "start",
			wantCode:    http.StatusForbidden,
			wantErr:     forbidden("instances", "train", `exceeds budget "team": accelerators used 7 + requested 2 > hard 8`)},
		{name: "running to stopped charges nothing",
			budgets: []*v1alpha1.Budget{budget("team", allKeys, twoCards)},
			old:     instance("train", 2),
			obj:     instance("train", 2, stopped)},
		{name: "instances/stop charges nothing",
			budgets:     []*v1alpha1.Budget{budget("team", allKeys, twoCards)},
			old:         instance("train", 2),
			obj:         instancechange.Lifecycle(instance("train", 2), "stop"),
			subresource: "stop"},
		// Until kiln-controller reports the Pod gone, the reconciler counts
		// the stored spec; uncharged, a start before then would have run
		// the larger Pod for free (issue O, class 10).
		{name: "a stop that also asks for more cards is charged the growth",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "2"), list("accelerators", "2"))},
			old:      instance("train", 2, phase(gpu.InstanceReady)),
			obj:      instance("train", 4, stopped, phase(gpu.InstanceReady)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 2 + requested 2 > hard 2`)},
		{name: "an edit of a stopping Instance that grows is charged the growth",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "4"), list("accelerators", "1"))},
			old:     instance("train", 1, stopped, phase(gpu.InstanceStopping)),
			obj:     instance("train", 2, stopped, phase(gpu.InstanceStopping)),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", list("accelerators", "2"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "an edit of an Instance reported Stopped charges no cards",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "2"), list("accelerators", "2"))},
			old:     instance("train", 1, stopped, phase(gpu.InstanceStopped)),
			obj:     instance("train", 2, stopped, phase(gpu.InstanceStopped))},
		{name: "a start while the stopped Pod is still going charges nothing: it is still charged",
			budgets:     []*v1alpha1.Budget{budget("team", list("accelerators", "2"), list("accelerators", "2"))},
			old:         instance("train", 2, stopped, phase(gpu.InstanceStopping)),
			obj:         instancechange.Lifecycle(instance("train", 2, stopped, phase(gpu.InstanceStopping)), "start"),
			subresource: "start"},
		{name: "a stopped Instance counts under instances",
			budgets:  []*v1alpha1.Budget{budget("team", list("instances", "1"), list("instances", "1"))},
			obj:      instance("idle", 2, stopped),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "idle", `exceeds budget "team": instances used 1 + requested 1 > hard 1`)},
		{name: "node ports are charged on create, stopped or not",
			budgets:  []*v1alpha1.Budget{budget("team", list("nodeports", "3"), list("nodeports", "2"))},
			obj:      instance("ports", 0, stopped, ports(2)),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "ports", `exceeds budget "team": nodeports used 2 + requested 2 > hard 3`)},
		{name: "ports added to a stopped Instance charge the difference",
			budgets: []*v1alpha1.Budget{budget("team", list("nodeports", "3"), list("nodeports", "1"))},
			old:     instance("ports", 0, stopped, ports(1)),
			obj:     instance("ports", 0, stopped, ports(3)),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("nodeports", "3"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "ports", "41", list("nodeports", "3"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a label-only update charges nothing, even over the limit",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "1"), list("accelerators", "2"))},
			old:     instance("train", 2),
			obj:     instance("train", 2, labelled)},
		{name: "more cards charge only the difference",
			budgets: []*v1alpha1.Budget{budget("team",
				list("accelerators", "3", "accelerator-memory", "640Gi", "instances", "1"),
				list("accelerators", "1", "accelerator-memory", "80Gi", "instances", "1"))},
			old: instance("train", 1),
			obj: instance("train", 3),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used: list("accelerators", "3", "accelerator-memory", "240Gi", "instances", "1"),
				// The pending entry holds the whole new charge; the
				// reconciler counts what it adds beyond the stored one.
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", list("accelerators", "3", "accelerator-memory", "240Gi", "instances", "1"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a Budget of instances only is not written by more cards",
			budgets: []*v1alpha1.Budget{budget("team", list("instances", "1"), list("instances", "1"))},
			old:     instance("train", 1),
			obj:     instance("train", 3)},
		{name: "fewer cards charge nothing",
			budgets: []*v1alpha1.Budget{budget("team", allKeys, twoCards)},
			old:     instance("train", 2),
			obj:     instance("train", 1)},

		// Instances on Claims.
		{name: "an Instance on a Bound Claim of its type is not charged its cards",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimBound)},
			obj:     instance("train", 2, onClaim("held"))},
		{name: "an Instance on a Claim still counts as a running Instance",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "0", "instances", "0"), nil)},
			claims:   []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimBound)},
			obj:      instance("train", 2, onClaim("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": instances used 0 + requested 1 > hard 0`)},
		{name: "an Instance on a new Claim of its type is not charged",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", "")},
			obj:     instance("train", 2, onClaim("held"))},
		{name: "starting an Instance on an Attached Claim of its type is not charged",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimAttached)},
			old:     instance("train", 2, onClaim("held"), stopped),
			obj:     instance("train", 2, onClaim("held"))},
		{name: "an Instance naming a missing Claim is charged",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), nil)},
			obj:     instance("train", 2, onClaim("nonesuch")),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "an Instance on a Lost Claim of its type is not charged",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimLost)},
			obj:     instance("train", 2, onClaim("held"))},
		{name: "an Instance on an Expired Claim is charged",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "1"), nil)},
			claims:   []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimExpired)},
			obj:      instance("train", 2, onClaim("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 0 + requested 2 > hard 1`)},
		{name: "an Instance of more cards than its Claim holds is charged in full",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "4"), list("accelerators", "2"))},
			claims:   []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimBound)},
			obj:      instance("train", 8, onClaim("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 2 + requested 8 > hard 4`)},
		{name: "a partition Instance on a Claim of cards is charged",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "4"), list("accelerators", "2"))},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimBound)},
			obj:     instance("train", 0, onClaim("held"), partition("3g.40gb")),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2.5"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "500m"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "growing past its Claim charges the whole Instance",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "2"))},
			claims:  []*v1alpha1.Claim{storedClaim("held", "h100", v1alpha1.ClaimAttached)},
			old:     instance("train", 2, onClaim("held")),
			obj:     instance("train", 3, onClaim("held")),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "5"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "41", list("accelerators", "3"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "an Instance on a Claim of another type is charged",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "1"), nil)},
			claims:   []*v1alpha1.Claim{storedClaim("held", "a10", v1alpha1.ClaimBound)},
			obj:      instance("train", 2, onClaim("held")),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("instances", "train", `exceeds budget "team": accelerators used 0 + requested 2 > hard 1`)},

		// Claims.
		{name: "a Claim create charges cards and memory, not instances",
			budgets: []*v1alpha1.Budget{budget("team",
				list("accelerators", "8", "accelerator-memory", "640Gi", "instances", "2"),
				list("accelerators", "0", "accelerator-memory", "0", "instances", "2"))},
			obj: claim("hold", 2),
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "2", "accelerator-memory", "160Gi", "instances", "2"),
				Pending: []v1alpha1.BudgetCharge{charge("Claim", "hold", "", list("accelerators", "2", "accelerator-memory", "160Gi"))},
			}},
			writes: map[string]int{"team": 1}},
		{name: "a Claim create over the limit is refused",
			budgets:  []*v1alpha1.Budget{budget("team", list("accelerators", "8"), list("accelerators", "7"))},
			obj:      claim("hold", 2),
			wantCode: http.StatusForbidden,
			wantErr:  forbidden("claims", "hold", `exceeds budget "team": accelerators used 7 + requested 2 > hard 8`)},
		{name: "a Budget of instances only is not written by a Claim",
			budgets: []*v1alpha1.Budget{budget("team", list("instances", "0"), nil)},
			obj:     claim("hold", 2)},
		// Card-hours.
		{name: "a create within the hours is checked, not charged",
			budgets: []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours", "10"), nil), "9", time.Hour)},
			obj:     instance("train", 2)},
		{name: "a create once the hours are spent is refused",
			budgets:  []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours", "10"), nil), "10", 0)},
			obj:      instance("train", 2),
			wantCode: http.StatusForbidden,
			wantErr: forbidden("instances", "train", `exceeds budget "team": accelerator-hours consumed 10 + requested 2 card(s) > hard 10 this period `+
				`(since 2026-03-01T00:00:00Z); card-hours come back from 2026-04-01T00:00:00Z, or a cluster admin raises spec.hard[accelerator-hours]`)},
		{name: "what runs spends the hours after the last count",
			budgets: []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours", "10", "accelerators", "8"), list("accelerators", "2")), "9", time.Hour)},
			obj:     claim("hold", 1), wantCode: http.StatusForbidden,
			wantErr: forbidden("claims", "hold", `exceeds budget "team": accelerator-hours consumed 11 + requested 1 card(s) > hard 10 this period `+
				`(since 2026-03-01T00:00:00Z); card-hours come back from 2026-04-01T00:00:00Z, or a cluster admin raises spec.hard[accelerator-hours]`)},
		{name: "consumed is rounded up to the limit, the usage a second short of it: admitted",
			budgets: []*v1alpha1.Budget{heldHours(budget("team", list("accelerator-hours", "1"), nil), "1", 3599_000, 0)},
			obj:     instance("train", 2)},
		{name: "a type's hours do not bind another type",
			budgets: []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours.a10", "1"), nil), "1", 0)},
			obj:     instance("train", 2)},
		{name: "a spent key refuses a start",
			budgets:     []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours.h100", "1"), nil), "1", 0)},
			old:         instance("train", 2, stopped, phase(gpu.InstanceStopped)),
			obj:         instance("train", 2),
			subresource: "start", wantCode: http.StatusForbidden,
			wantErr: forbidden("instances", "train", `exceeds budget "team": accelerator-hours.h100 consumed 1 + requested 2 card(s) > hard 1 this period `+
				`(since 2026-03-01T00:00:00Z); card-hours come back from 2026-04-01T00:00:00Z, or a cluster admin raises spec.hard[accelerator-hours.h100]`)},
		{name: "a spent key lets a stop through",
			budgets:     []*v1alpha1.Budget{hours(budget("team", list("accelerator-hours", "1"), nil), "5", 0)},
			old:         instance("train", 2),
			obj:         instance("train", 2, stopped),
			subresource: "stop"},
		{name: "a Claim update charges nothing",
			budgets: []*v1alpha1.Budget{budget("team", list("accelerators", "0"), nil)},
			old:     claim("hold", 2),
			obj:     claim("hold", 4)},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var objects []runtime.Object
			for _, b := range tc.budgets {
				objects = append(objects, b)
			}
			for _, c := range tc.claims {
				objects = append(objects, c)
			}
			p, client := newPlugin(t, objects...)
			ctx, old := context.Background(), tc.old
			if tc.subresource != "" {
				// The registry passes the stored Instance of a start or
				// stop in the context, not as the old object.
				ctx, old = instancechange.WithStored(ctx, tc.old.(*gpu.Instance)), nil
			}
			err := p.Validate(ctx, attributes(tc.obj, old, tc.subresource, tc.dryRun), nil)
			checkErr(t, err, tc.wantCode, tc.wantErr)
			writes := statusWrites(t, client)
			if !apiequality.Semantic.DeepEqual(writes, tc.writes) {
				t.Errorf("status writes %v, want %v", writes, tc.writes)
			}
			checkBudgets(t, client, tc.budgets, tc.want)
		})
	}
}

// hours is b with consumed card-hours counted age before chargeTime, under
// each of its accelerator-hours keys, all held by the one type its keys
// name (h100 unless one names another).
func hours(b *v1alpha1.Budget, consumed string, age time.Duration) *v1alpha1.Budget {
	q := resource.MustParse(consumed)
	return heldHours(b, consumed, q.MilliValue()*3600, age)
}

// heldHours is hours with the exact usage given in milli-card-seconds,
// where consumed is that rounded up.
func heldHours(b *v1alpha1.Budget, consumed string, milliCardSeconds int64, age time.Duration) *v1alpha1.Budget {
	b.Status.Consumed = v1alpha1.BudgetResourceList{}
	typ := "h100"
	for k := range b.Spec.Hard {
		if strings.HasPrefix(string(k), "accelerator-hours") {
			b.Status.Consumed[k] = resource.MustParse(consumed)
		}
		if t, ok := strings.CutPrefix(string(k), "accelerator-hours."); ok {
			typ = t
		}
	}
	b.Status.Usage = []v1alpha1.BudgetUsage{{InstanceType: typ, CardSeconds: *resource.NewMilliQuantity(milliCardSeconds, resource.DecimalSI)}}
	b.Status.ConsumedTime = &metav1.Time{Time: chargeTime.Add(-age)}
	return b
}

// TestBudgetIsCountedFirst: a Budget created while Instances run has no
// used for its keys yet, and a counted one lags a release (an Instance
// just reported Stopped) until the Budget loop recounts. The plugin has
// the Budget counted before it charges an uncounted key or refuses, so a
// request is checked against what runs, not zero and not what ran; a
// Budget counted and with room is not recounted.
func TestBudgetIsCountedFirst(t *testing.T) {
	over := forbiddenInstance(`exceeds budget "team": accelerators used 2 + requested 1 > hard 2`)
	for _, tc := range []struct {
		name string
		used v1alpha1.BudgetResourceList
		// running is what the recount finds.
		running     string
		wantRecount int
		wantErr     string
	}{
		{name: "new Budget: counted, then refused", running: "2", wantRecount: 1, wantErr: over},
		{name: "a key added later is counted too", used: list("instances", "1"), running: "2", wantRecount: 1, wantErr: over},
		{name: "counted Budget with room: no recount", used: list("accelerators", "1"), running: "1", wantRecount: 0},
		{name: "full Budget lagging a release: counted, then admitted", used: list("accelerators", "2"), running: "1", wantRecount: 1},
		{name: "full Budget: counted, then refused", used: list("accelerators", "2"), running: "2", wantRecount: 1, wantErr: over},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, client := newPlugin(t, budget("team", list("accelerators", "2"), tc.used))
			recounts := 0
			p.SetBudgetRecount(func(ctx context.Context, namespace string) error {
				recounts++
				b, err := client.GpuV1alpha1().Budgets(namespace).Get(ctx, "team", metav1.GetOptions{})
				if err != nil {
					return err
				}
				b.Status.Used = list("accelerators", tc.running)
				_, err = client.GpuV1alpha1().Budgets(namespace).UpdateStatus(ctx, b, metav1.UpdateOptions{})
				return err
			})
			err := p.Validate(context.Background(), attributes(instance("train", 1), nil, "", false), nil)
			if tc.wantErr == "" {
				checkErr(t, err, 0, "")
			} else {
				checkErr(t, err, http.StatusForbidden, tc.wantErr)
			}
			if recounts != tc.wantRecount {
				t.Errorf("recounted %d times, want %d", recounts, tc.wantRecount)
			}
		})
	}
}

func forbiddenInstance(msg string) string {
	return fmt.Sprintf("%s.gpu.kiln.dev %q is forbidden: %s", "instances", "train", msg)
}

// TestPluginConflict: another charge lands between the plugin's list and
// its write. The plugin reads the Budget again and charges against what
// it reads.
func TestPluginConflict(t *testing.T) {
	cases := []struct {
		name string
		// landed is used after the other charge.
		landed   string
		wantCode int32
		wantErr  string
		want     map[string]v1alpha1.BudgetStatus
		writes   map[string]int
		// rereads: after the conflict, and after the recount before a
		// refusal.
		rereads int
	}{
		{name: "retry charges on top of the charge that landed",
			landed: "3",
			want: map[string]v1alpha1.BudgetStatus{"team": {
				Used:    list("accelerators", "5"),
				Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))},
			}},
			writes: map[string]int{"team": 2}, rereads: 1},
		{name: "retry refuses when the charge that landed leaves no room",
			landed:   "7",
			wantCode: http.StatusForbidden,
			wantErr:  `instances.gpu.kiln.dev "train" is forbidden: exceeds budget "team": accelerators used 7 + requested 2 > hard 8`,
			want:     map[string]v1alpha1.BudgetStatus{"team": {Used: list("accelerators", "7")}},
			writes:   map[string]int{"team": 1}, rereads: 2},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := budget("team", list("accelerators", "8"), list("accelerators", "1"))
			p, client := newPlugin(t, before)
			conflicted := false
			client.PrependReactor("update", "budgets", func(action core.Action) (bool, runtime.Object, error) {
				if conflicted {
					return false, nil, nil
				}
				conflicted = true
				// The other charge is stored first; this write then loses.
				other := before.DeepCopy()
				other.ResourceVersion = "8"
				other.Status.Used = list("accelerators", tc.landed)
				if err := client.Tracker().Update(budgetsGVR, other, ns); err != nil {
					return true, nil, err
				}
				return true, nil, apierrors.NewConflict(v1alpha1.Resource("budgets"), "team", errors.New("the object has been modified"))
			})
			err := p.Validate(context.Background(), attributes(instance("train", 2), nil, "", false), nil)
			checkErr(t, err, tc.wantCode, tc.wantErr)
			if !conflicted {
				t.Fatal("no status write was attempted")
			}
			rereads := 0
			for _, a := range client.Actions() {
				if a.GetVerb() == "get" && a.GetResource() == budgetsGVR {
					rereads++
				}
			}
			if rereads != tc.rereads {
				t.Errorf("%d reads of the Budget after the conflict, want %d", rereads, tc.rereads)
			}
			if writes := statusWrites(t, client); !apiequality.Semantic.DeepEqual(writes, tc.writes) {
				t.Errorf("status writes %v, want %v", writes, tc.writes)
			}
			checkBudgets(t, client, []*v1alpha1.Budget{before}, tc.want)
		})
	}
}

// TestPluginFailures: what the plugin does when the server fails it.
func TestPluginFailures(t *testing.T) {
	notFound := apierrors.NewNotFound(v1alpha1.Resource("budgets"), "b-h100")
	conflict := apierrors.NewConflict(v1alpha1.Resource("budgets"), "b-h100", errors.New("the object has been modified"))
	cases := []struct {
		name string
		// verb and resource name the calls that fail; budget, if set, the
		// one Budget whose status updates fail; the first failure runs
		// then, if set, once before failing (to delete the Budget, say).
		verb, resource, budget string
		err                    error
		then                   func(*fake.Clientset)
		claims                 []*v1alpha1.Claim
		obj                    *gpu.Instance
		wantCode               int32
		wantErr                string
		want                   map[string]v1alpha1.BudgetStatus
		writes                 map[string]int
	}{
		{name: "a Budget deleted before its charge lets the write through",
			verb: "update", resource: "budgets", budget: "b-h100", err: notFound,
			then: func(c *fake.Clientset) { _ = c.Tracker().Delete(budgetsGVR, ns, "b-h100") },
			obj:  instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{
				"a-cards": {Used: list("accelerators", "3"), Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))}},
			},
			writes: map[string]int{"a-cards": 1, "b-h100": 1}},
		{name: "a Budget deleted after a conflict lets the write through",
			verb: "update", resource: "budgets", budget: "b-h100", err: conflict,
			then: func(c *fake.Clientset) { _ = c.Tracker().Delete(budgetsGVR, ns, "b-h100") },
			obj:  instance("train", 2),
			want: map[string]v1alpha1.BudgetStatus{
				"a-cards": {Used: list("accelerators", "3"), Pending: []v1alpha1.BudgetCharge{charge("Instance", "train", "", list("accelerators", "2"))}},
			},
			writes: map[string]int{"a-cards": 1, "b-h100": 1}},
		{name: "a failed status write is an internal error and refunds the Budgets charged",
			verb: "update", resource: "budgets", budget: "b-h100", err: errors.New("etcd is down"),
			obj:      instance("train", 2),
			wantCode: http.StatusInternalServerError,
			wantErr:  `Internal error occurred: charging budget "b-h100": etcd is down`,
			writes:   map[string]int{"a-cards": 2, "b-h100": 1}},
		{name: "a failed list of Budgets is an internal error",
			verb: "list", resource: "budgets", err: errors.New("etcd is down"),
			obj:      instance("train", 2),
			wantCode: http.StatusInternalServerError,
			wantErr:  `Internal error occurred: reading the budgets of namespace "team-a": etcd is down`},
		{name: "a failed read of the Claim is an internal error",
			verb: "get", resource: "claims", err: errors.New("etcd is down"),
			obj:      instance("train", 2, onClaim("held")),
			wantCode: http.StatusInternalServerError,
			wantErr:  `Internal error occurred: reading claim "held": etcd is down`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			before := []*v1alpha1.Budget{
				budget("a-cards", list("accelerators", "8"), list("accelerators", "1")),
				budget("b-h100", list("accelerators.h100", "8"), list("accelerators.h100", "1")),
			}
			p, client := newPlugin(t, before[0], before[1])
			client.PrependReactor(tc.verb, tc.resource, func(action core.Action) (bool, runtime.Object, error) {
				if u, ok := action.(core.UpdateAction); ok && u.GetObject().(*v1alpha1.Budget).Name != tc.budget {
					return false, nil, nil
				}
				if tc.then != nil {
					tc.then(client)
					tc.then = nil
				}
				return true, nil, tc.err
			})
			err := p.Validate(context.Background(), attributes(tc.obj, nil, "", false), nil)
			checkErr(t, err, tc.wantCode, tc.wantErr)
			if writes := statusWrites(t, client); !apiequality.Semantic.DeepEqual(writes, tc.writes) {
				t.Errorf("status writes %v, want %v", writes, tc.writes)
			}
			checkBudgets(t, client, before, tc.want)
		})
	}
}

// TestPluginRefundRestoresReplacedCharge: two updates of one Instance are
// in flight against the same resourceVersion. The first (1 → 3 cards) is
// charged to both Budgets; the second (1 → 2) replaces its pending entry
// in a-cards, then b-h100 refuses it. The refund must leave a-cards as it
// was, with the first update's entry: without it a recount before that
// update is stored counts only the stored card, and a-cards over-commits.
// (Refund used to delete the Instance's entry outright.)
func TestPluginRefundRestoresReplacedCharge(t *testing.T) {
	first := charge("Instance", "train", "41", list("accelerators", "3"))
	first.Time = metav1.NewTime(chargeTime.Add(-time.Second))
	firstH100 := *first.DeepCopy()
	firstH100.Charge = list("accelerators.h100", "3")
	before := []*v1alpha1.Budget{
		budget("a-cards", list("accelerators", "8"), list("accelerators", "3"), first),
		budget("b-h100", list("accelerators.h100", "3"), list("accelerators.h100", "3"), firstH100),
	}
	p, client := newPlugin(t, before[0], before[1])
	err := p.Validate(context.Background(), attributes(instance("train", 2), instance("train", 1), "", false), nil)
	checkErr(t, err, http.StatusForbidden, `instances.gpu.kiln.dev "train" is forbidden: exceeds budget "b-h100": accelerators.h100 used 3 + requested 1 > hard 3`)
	if writes := statusWrites(t, client); !apiequality.Semantic.DeepEqual(writes, map[string]int{"a-cards": 2}) {
		t.Errorf("status writes %v, want a-cards charged and refunded", writes)
	}
	checkBudgets(t, client, before, nil)
}

// TestTaken: a create of a name stored already is answered 409 before it is
// charged, when the informer shows the name and the server still has it;
// otherwise it is charged as any create, and storage answers.
func TestTaken(t *testing.T) {
	storedInstance := &v1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: ns, UID: "uid-old"}}
	held := storedClaim("hold", "h100", v1alpha1.ClaimBound)
	cases := []struct {
		name string
		// cached and stored are what the informer and the server hold.
		cached, stored []runtime.Object
		obj            runtime.Object
		subresource    string
		dryRun         bool
		wantExists     bool
		writes         int
	}{
		{name: "an Instance's name, cached and stored", cached: []runtime.Object{storedInstance}, stored: []runtime.Object{storedInstance},
			obj: instance("train", 1), wantExists: true},
		{name: "a Claim's name, cached and stored", cached: []runtime.Object{held}, stored: []runtime.Object{held},
			obj: claim("hold", 1), wantExists: true},
		{name: "deleted since the informer saw it: charged", cached: []runtime.Object{storedInstance},
			obj: instance("train", 1), writes: 1},
		{name: "stored too recently for the informer: charged, left to the TTL", stored: []runtime.Object{storedInstance},
			obj: instance("train", 1), writes: 1},
		{name: "a new name: charged", cached: []runtime.Object{storedInstance}, stored: []runtime.Object{storedInstance},
			obj: instance("serve", 1), writes: 1},
		{name: "an Instance's name is not a Claim's", cached: []runtime.Object{storedInstance}, stored: []runtime.Object{storedInstance},
			obj: claim("train", 1), writes: 1},
		{name: "a start is a create of a subresource of the stored Instance", cached: []runtime.Object{storedInstance}, stored: []runtime.Object{storedInstance},
			obj: instancechange.Lifecycle(instance("train", 1, stopped), "start"), subresource: "start", writes: 1},
		{name: "a dry run is never charged, and storage answers it", cached: []runtime.Object{storedInstance}, stored: []runtime.Object{storedInstance},
			obj: instance("train", 1), dryRun: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			team := budget("team", list("accelerators", "4"), list("accelerators", "0"))
			p, client := newPlugin(t, append([]runtime.Object{team}, tc.stored...)...)
			factory := kilninformers.NewSharedInformerFactory(client, 0)
			for _, o := range tc.cached {
				var err error
				switch o.(type) {
				case *v1alpha1.Instance:
					err = factory.Gpu().V1alpha1().Instances().Informer().GetIndexer().Add(o)
				case *v1alpha1.Claim:
					err = factory.Gpu().V1alpha1().Claims().Informer().GetIndexer().Add(o)
				}
				if err != nil {
					t.Fatal(err)
				}
			}
			p.instances, p.claims = factory.Gpu().V1alpha1().Instances().Lister(), factory.Gpu().V1alpha1().Claims().Lister()
			ctx := context.Background()
			if tc.subresource == "start" {
				ctx = instancechange.WithStored(ctx, instance("train", 1, stopped))
			}
			err := p.Validate(ctx, attributes(tc.obj, nil, tc.subresource, tc.dryRun), nil)
			if got := apierrors.IsAlreadyExists(err); got != tc.wantExists || (err != nil && !got) {
				t.Fatalf("Validate: %v, want AlreadyExists %v", err, tc.wantExists)
			}
			if got := statusWrites(t, client)["team"]; got != tc.writes {
				t.Errorf("%d Budget status writes, want %d", got, tc.writes)
			}
		})
	}
}

// TestChargeSettlesStoredCreates: a charge drops from status.pending the
// creates the informer shows stored, the very objects charged, and leaves
// used as it is; what the informer cannot vouch for stays.
func TestChargeSettlesStoredCreates(t *testing.T) {
	one := list("accelerators", "1")
	renamed := charge("Instance", "renamed", "", one)
	inflight := charge("Instance", "inflight", "", one)
	updated := charge("Instance", "updated", "40", one)
	team := budget("team", list("accelerators", "16"), list("accelerators", "6"),
		charge("Instance", "stored", "", one), renamed, inflight, updated, charge("Claim", "held", "", one),
		charge("Claim", "stored", "", one))
	p, client := newPlugin(t, team)
	factory := kilninformers.NewSharedInformerFactory(client, 0)
	instances, claims := factory.Gpu().V1alpha1().Instances().Informer().GetIndexer(), factory.Gpu().V1alpha1().Claims().Informer().GetIndexer()
	for _, err := range []error{
		instances.Add(&v1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "stored", Namespace: ns, UID: "uid-stored"}}),
		// The same name stored by another create, a later one.
		instances.Add(&v1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "renamed", Namespace: ns, UID: "uid-another"}}),
		// An update is not known settled by the informer's copy.
		instances.Add(&v1alpha1.Instance{ObjectMeta: metav1.ObjectMeta{Name: "updated", Namespace: ns, UID: "uid-updated", ResourceVersion: "41"}}),
		claims.Add(storedClaim("held", "h100", v1alpha1.ClaimBound)),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
	p.instances, p.claims = factory.Gpu().V1alpha1().Instances().Lister(), factory.Gpu().V1alpha1().Claims().Lister()
	if err := p.Validate(context.Background(), attributes(instance("train", 2), nil, "", false), nil); err != nil {
		t.Fatal(err)
	}
	// The Claim "stored" is an Instance's name, not a Claim's: it stays.
	checkBudgets(t, client, []*v1alpha1.Budget{team}, map[string]v1alpha1.BudgetStatus{"team": {
		Used: list("accelerators", "8"),
		Pending: []v1alpha1.BudgetCharge{renamed, inflight, updated, charge("Claim", "stored", "", one),
			charge("Instance", "train", "", list("accelerators", "2"))},
	}})
}

func TestTurns(t *testing.T) {
	var tr turns
	ctx := t.Context()
	release, err := tr.take(ctx, "tenant-a")
	if err != nil {
		t.Fatal(err)
	}
	// Another namespace is not held up.
	other, err := tr.take(ctx, "tenant-b")
	if err != nil {
		t.Fatal(err)
	}
	other()
	// The same namespace waits for the turn, or gives up with its request.
	short, cancel := context.WithTimeout(ctx, 50*time.Millisecond)
	defer cancel()
	if _, err := tr.take(short, "tenant-a"); err == nil {
		t.Fatal("a second turn of tenant-a while the first was held")
	}
	got := make(chan error, 1)
	go func() {
		next, err := tr.take(ctx, "tenant-a")
		if err == nil {
			next()
		}
		got <- err
	}()
	release()
	if err := <-got; err != nil {
		t.Errorf("the next turn after release: %v", err)
	}
	// Nothing is kept of a namespace nobody writes to.
	if len(tr.ns) != 0 {
		t.Errorf("%d namespaces kept after every turn ended", len(tr.ns))
	}
}
