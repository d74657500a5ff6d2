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
		Spec:       v1alpha1.BudgetSpec{Hard: map[v1alpha1.BudgetResourceName]resource.Quantity{"accelerators": q("8"), "accelerators.h100": q("4")}},
		// A key the loop has not counted yet has no used.
		Status: v1alpha1.BudgetStatus{Used: map[v1alpha1.BudgetResourceName]resource.Quantity{"accelerators": q("3")}},
	}); err != nil {
		t.Fatal(err)
	}
	c := &collector{budgets: listers.NewBudgetLister(idx)}
	want := `
# HELP kiln_budget_hard [ALPHA] The Budget's limit of a key (spec.hard).
# TYPE kiln_budget_hard gauge
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
