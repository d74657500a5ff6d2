package kubectlgpu

import (
	"fmt"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestCapacity(t *testing.T) {
	// header pads LIMITED BY to the width of its longest value.
	header := func(width int) string {
		return fmt.Sprintf("TYPE  PHASE   FREE CARDS  BUDGET LEFT (CARDS)  CAN START  %-*s  PARTITIONS (FREE/TOTAL, CAN START)\n", width, "LIMITED BY")
	}
	for _, tc := range []struct {
		name string
		kiln []runtime.Object
		args []string
		want string
	}{
		{name: "no Budget: the free cards", kiln: objs(h100(5), cpuType()),
			want: "TYPE  PHASE   FREE CARDS  BUDGET LEFT (CARDS)  CAN START  LIMITED BY  PARTITIONS (FREE/TOTAL, CAN START)\n" +
				"h100  Active  5/16        -                    5          cards       1g.10gb 7/7, 7; 3g.40gb 1/2, 1\n"},
		{name: "a Budget's per-type key binds", kiln: objs(h100(5),
			budget("team", map[string]string{"accelerators": "8", "accelerators.h100": "4"}, map[string]string{"accelerators": "1", "accelerators.h100": "1"})),
			// 3 cards left of accelerators.h100; a 1g.10gb partition is
			// charged 0.143 of a card (1 of 7 compute slices), so 20 fit.
			want: header(len("budget/team:accelerators.h100")) +
				"h100  Active  5/16        3                    3          budget/team:accelerators.h100  1g.10gb 7/7, 7; 3g.40gb 1/2, 1\n"},
		{name: "the smallest of several Budgets, fractional use", kiln: objs(h100(5),
			budget("a", map[string]string{"accelerators": "4"}, map[string]string{"accelerators": "1500m"}),
			budget("b", map[string]string{"instances": "10", "accelerator-memory": "160Gi"}, map[string]string{"instances": "3", "accelerator-memory": "0"})),
			want: header(len("budget/a:accelerators")) +
				"h100  Active  5/16        2                    2          budget/a:accelerators  1g.10gb 7/7, 7; 3g.40gb 1/2, 1\n"},
		{name: "a used-up Budget leaves no partitions either", kiln: objs(h100(5),
			budget("team", map[string]string{"accelerators": "2"}, map[string]string{"accelerators": "2"})),
			want: header(len("budget/team:accelerators")) +
				"h100  Active  5/16        0                    0          budget/team:accelerators  1g.10gb 7/7, 0; 3g.40gb 1/2, 0\n"},
		{name: "a held type starts nothing", kiln: objs(h100(5, func(t *v1alpha1.InstanceType) {
			t.Spec.Hold, t.Status.Phase = v1alpha1.HoldNew, v1alpha1.InstanceTypeHeld
		})),
			want: "TYPE  PHASE  FREE CARDS  BUDGET LEFT (CARDS)  CAN START  LIMITED BY   PARTITIONS (FREE/TOTAL, CAN START)\n" +
				"h100  Held   5/16        -                    0          hold (Hold)  1g.10gb 7/7, 0; 3g.40gb 1/2, 0\n"},
		{name: "none", kiln: objs(cpuType()), want: "No InstanceTypes with accelerators found.\n"},
		{name: "json", kiln: objs(h100(5, func(t *v1alpha1.InstanceType) { t.Status.Capacity.Partitions = nil })), args: []string{"-o", "json"},
			want: `[
    {
        "type": "h100",
        "phase": "Active",
        "cards": 16,
        "freeCards": 5,
        "canStart": 5,
        "limitedBy": "cards"
    }
]
`},
		{name: "yaml", kiln: objs(h100(5, func(t *v1alpha1.InstanceType) { t.Status.Capacity.Partitions = nil }),
			budget("team", map[string]string{"accelerators": "4"}, map[string]string{"accelerators": "3"})), args: []string{"-o", "yaml"},
			want: `- budgetCards: 1
  canStart: 1
  cards: 16
  freeCards: 5
  limitedBy: budget/team:accelerators
  phase: Active
  type: h100
`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kiln)
			out, _, err := f.run(t, append([]string{"capacity", "-n", ns}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
		})
	}
}

func TestCapacityRefusesUnknownOutput(t *testing.T) {
	f := newFixture(t, nil)
	if _, _, err := f.run(t, "capacity", "-o", "wide"); err == nil {
		t.Error("capacity -o wide succeeded; want an error naming json and yaml")
	}
}

// TestCapacityWarnsOfBlindBudgets (issue O, class 9): a Budget whose
// namespace the Pod policy does not guard, or that could not price an
// object, is warned about on stderr; the table stays as it is.
func TestCapacityWarnsOfBlindBudgets(t *testing.T) {
	blind := budget("team", map[string]string{"accelerators": "4"}, map[string]string{"accelerators": "1"})
	blind.Status.Conditions = []metav1.Condition{
		{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonNamespaceNotGuarded, Message: "namespace team-a is not labelled"},
		{Type: v1alpha1.BudgetConditionCounted, Status: metav1.ConditionTrue, Reason: v1alpha1.BudgetReasonAllPriced, Message: "every Instance and Claim"},
	}
	f := newFixture(t, objs(h100(5), blind))
	out, errOut, err := f.run(t, "capacity", "-n", ns)
	if err != nil {
		t.Fatal(err)
	}
	if want := "Warning: budget/team: namespace team-a is not labelled\n"; errOut != want {
		t.Errorf("stderr %q, want %q", errOut, want)
	}
	if !strings.Contains(out, "budget/team:accelerators") {
		t.Errorf("table:\n%s", out)
	}
}
