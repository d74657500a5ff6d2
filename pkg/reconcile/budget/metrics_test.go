package budget

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/component-base/metrics/testutil"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

func TestBudgetMetrics(t *testing.T) {
	idx := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
	q := resource.MustParse
	if err := idx.Add(&v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "team-a"},
		Spec: v1alpha1.BudgetSpec{Hard: map[v1alpha1.BudgetResourceName]resource.Quantity{
			"accelerators": q("8"), "accelerators.h100": q("4"), "accelerator-hours": q("100")}},
		// A key the loop has not counted yet has no used.
		Status: v1alpha1.BudgetStatus{Used: map[v1alpha1.BudgetResourceName]resource.Quantity{"accelerators": q("3")},
			Consumed: map[v1alpha1.BudgetResourceName]resource.Quantity{"accelerator-hours": q("2500m")},
			Usage:    []v1alpha1.BudgetUsage{{InstanceType: "h100", CardSeconds: q("9000"), IdleCardSeconds: q("1800")}}},
	}); err != nil {
		t.Fatal(err)
	}
	c := &collector{budgets: listers.NewBudgetLister(idx)}
	want := `
# HELP kiln_budget_card_seconds [ALPHA] The card-seconds the Budget counts this period of one InstanceType (status.usage), and of them those held idle, as last counted.
# TYPE kiln_budget_card_seconds gauge
kiln_budget_card_seconds{budget="team",instance_type="h100",namespace="team-a",state="held"} 9000
kiln_budget_card_seconds{budget="team",instance_type="h100",namespace="team-a",state="idle"} 1800
# HELP kiln_budget_consumed_card_seconds [ALPHA] What an accelerator-hours key of the Budget has consumed this period (status.consumed), in card-seconds, as last counted.
# TYPE kiln_budget_consumed_card_seconds gauge
kiln_budget_consumed_card_seconds{budget="team",namespace="team-a",resource="accelerator-hours"} 9000
# HELP kiln_budget_hard [ALPHA] The Budget's limit of a key (spec.hard).
# TYPE kiln_budget_hard gauge
kiln_budget_hard{budget="team",namespace="team-a",resource="accelerator-hours"} 100
kiln_budget_hard{budget="team",namespace="team-a",resource="accelerators"} 8
kiln_budget_hard{budget="team",namespace="team-a",resource="accelerators.h100"} 4
# HELP kiln_budget_used [ALPHA] What the namespace's Instances and Claims hold of a key of the Budget (status.used): cards for accelerators keys, the quantity of the key for others.
# TYPE kiln_budget_used gauge
kiln_budget_used{budget="team",namespace="team-a",resource="accelerators"} 3
`
	if err := testutil.CustomCollectAndCompare(c, strings.NewReader(want)); err != nil {
		t.Error(err)
	}
}
