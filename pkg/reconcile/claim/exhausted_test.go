package claim

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// hoursBudget limits key to 1 card-hour, of which consumed are spent.
func hoursBudget(key v1alpha1.BudgetResourceName, consumed string, action v1alpha1.BudgetExhaustedAction) *v1alpha1.Budget {
	q := resource.MustParse(consumed)
	typ, _ := ledger.HoursKey(key)
	if typ == "" {
		typ = "h100"
	}
	return &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "hours", Namespace: tenant},
		Spec:       v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{key: resource.MustParse("1")}, OnExhausted: action},
		Status: v1alpha1.BudgetStatus{Consumed: v1alpha1.BudgetResourceList{key: q},
			Usage: []v1alpha1.BudgetUsage{{InstanceType: typ, CardSeconds: *resource.NewMilliQuantity(q.MilliValue()*3600, resource.DecimalSI)}}},
	}
}

// TestSyncBudgetExhausted (issue Q): a placed Claim under an
// accelerator-hours key spent with onExhausted Stop lets its cards go,
// whether it holds them with its holder or an Instance runs on them; its
// ledger closes then. Refuse, hours left or another type's key keep it.
func TestSyncBudgetExhausted(t *testing.T) {
	job := instance("job", "train")
	for _, tc := range []struct {
		name        string
		budget      *v1alpha1.Budget
		attached    bool
		wantRelease bool
	}{
		{name: "Bound, spent with Stop", budget: hoursBudget(v1alpha1.BudgetAcceleratorHours, "1", v1alpha1.BudgetExhaustedStop), wantRelease: true},
		{name: "Attached, spent with Stop", budget: hoursBudget(v1alpha1.BudgetAcceleratorHours, "1.2", v1alpha1.BudgetExhaustedStop), attached: true, wantRelease: true},
		{name: "its type's key spent", budget: hoursBudget("accelerator-hours.h100", "1", v1alpha1.BudgetExhaustedStop), wantRelease: true},
		{name: "another type's key spent", budget: hoursBudget("accelerator-hours.a10", "1", v1alpha1.BudgetExhaustedStop)},
		{name: "hours left", budget: hoursBudget(v1alpha1.BudgetAcceleratorHours, "0.999", v1alpha1.BudgetExhaustedStop)},
		{name: "spent, Refuse only", budget: hoursBudget(v1alpha1.BudgetAcceleratorHours, "1", v1alpha1.BudgetExhaustedRefuse), attached: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cl, h := held(newClaim("train", 4), "gpu-1")
			objs := []runtime.Object{h100(), node("gpu-1"), tc.budget}
			if tc.attached {
				objs = append(objs, attached(cl, "gpu-1", job), job, instancePod(job, "gpu-1", true))
			} else {
				objs = append(objs, cl, h)
			}
			f := newFixture(t, objs...)
			f.clock = start.Add(time.Hour)
			f.sync()
			got := f.claim("train")
			if !tc.wantRelease {
				if got.Status.Phase == v1alpha1.ClaimExpired || len(f.podDeletes()) != 0 || hasEvent(f.events(), "Warning "+ReasonBudgetExhausted) {
					t.Errorf("phase %s, deletes %v, events %v; want it kept", got.Status.Phase, f.podDeletes(), f.events())
				}
				return
			}
			wantState(t, got, v1alpha1.ClaimExpired, "")
			if !hasEvent(f.events(), "Warning "+ReasonBudgetExhausted+" Released: budget hours spent its accelerator-hours") {
				t.Errorf("events %v, want a Warning %s naming the Budget and its key", f.events(), ReasonBudgetExhausted)
			}
			if c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.ClaimConditionBudgetExhausted); c == nil || c.Status != metav1.ConditionTrue ||
				!strings.HasPrefix(c.Message, "budget hours spent its accelerator-hours") {
				t.Errorf("condition %+v, want BudgetExhausted naming the Budget and its key", c)
			}
			var wantDeletes []podDelete
			if !tc.attached {
				wantDeletes = []podDelete{{Name: h.Name, UID: h.UID}}
			}
			if diff := cmp.Diff(wantDeletes, f.podDeletes()); diff != "" {
				t.Errorf("holder deletes (-want +got):\n%s", diff)
			}
			if slices.Contains(f.writes(), "create pods") || got.Status.AttachedTo != "" {
				t.Errorf("writes %v, attachedTo %q: want no holder made and nothing attached", f.writes(), got.Status.AttachedTo)
			}
			// The Claim's run closes with the phase: an hour of 4 cards.
			if u := got.Status.Usage; u == nil || u.Current != nil || ledger.CardSeconds(ledger.Usage(u.Days, start), v1alpha1.BudgetAcceleratorHours) != 4*3600*1000 {
				t.Errorf("usage %+v, want its run closed at 4 card-hours", u)
			}
		})
	}
}
