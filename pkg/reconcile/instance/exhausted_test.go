package instance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// spentBudget is a Budget of key limited to hard card-hours, consumed
// consumed, stopping what runs once spent when stop is set.
func spentBudget(key, hard, consumed string, action v1alpha1.BudgetExhaustedAction) *v1alpha1.Budget {
	q := resource.MustParse(consumed)
	typ, _ := ledger.HoursKey(v1alpha1.BudgetResourceName(key))
	if typ == "" {
		typ = "h100"
	}
	return &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "hours", Namespace: key0.Namespace},
		Spec:       v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{v1alpha1.BudgetResourceName(key): resource.MustParse(hard)}, OnExhausted: action},
		Status: v1alpha1.BudgetStatus{Consumed: v1alpha1.BudgetResourceList{v1alpha1.BudgetResourceName(key): q},
			Usage: []v1alpha1.BudgetUsage{{InstanceType: typ, CardSeconds: *resource.NewMilliQuantity(q.MilliValue()*3600, resource.DecimalSI)}}},
	}
}

var key0 = running()

func TestSyncBudgetExhaustedStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		budget   *v1alpha1.Budget
		inst     *v1alpha1.Instance
		wantStop bool
	}{
		{name: "spent, Stop", budget: spentBudget("accelerator-hours", "10", "10", v1alpha1.BudgetExhaustedStop), inst: running(), wantStop: true},
		{name: "its type's key spent", budget: spentBudget("accelerator-hours.h100", "1", "1.5", v1alpha1.BudgetExhaustedStop), inst: running(), wantStop: true},
		{name: "another type's key spent", budget: spentBudget("accelerator-hours.a10", "1", "1", v1alpha1.BudgetExhaustedStop), inst: running()},
		{name: "hours left", budget: spentBudget("accelerator-hours", "10", "9.999", v1alpha1.BudgetExhaustedStop), inst: running()},
		{name: "spent, Refuse only", budget: spentBudget("accelerator-hours", "10", "10", v1alpha1.BudgetExhaustedRefuse), inst: running()},
		{name: "on its Claim's cards", budget: spentBudget("accelerator-hours", "10", "10", v1alpha1.BudgetExhaustedStop), inst: onClaim(), wantStop: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := readyPod(t, tc.inst)
			f := newFixture(t, Options{}, tc.inst, h100(), pod, gpuNode(), ownedService(tc.inst, nodePort("jupyter", 8888, 30001)), tc.budget)
			f.clock = at(time.Hour)
			f.sync()
			got := f.instance()
			if got.Spec.Stopped != tc.wantStop {
				t.Fatalf("stopped %v, want %v", got.Spec.Stopped, tc.wantStop)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.InstanceConditionBudgetExhausted)
			events := f.events()
			if !tc.wantStop {
				if c != nil || slices.ContainsFunc(events, func(e string) bool { return strings.Contains(e, ReasonBudgetExhausted) }) {
					t.Errorf("condition %+v, events %v; want neither", c, events)
				}
				return
			}
			if c == nil || c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "budget hours spent its accelerator-hours") {
				t.Errorf("condition %+v, want BudgetExhausted naming the Budget and its key", c)
			}
			if !slices.ContainsFunc(events, func(e string) bool {
				return strings.HasPrefix(e, "Warning "+ReasonBudgetExhausted+" Stopped: budget hours")
			}) {
				t.Errorf("events %v, want a Warning %s", events, ReasonBudgetExhausted)
			}
		})
	}
}
