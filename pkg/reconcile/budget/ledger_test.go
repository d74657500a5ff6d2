package budget

import (
	"context"
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// runningFor is a run of cards since d before recountTime.
func runningFor(cards string, d time.Duration) *v1alpha1.Usage {
	return &v1alpha1.Usage{Current: &v1alpha1.UsageRun{PodUID: "pod", InstanceType: "h100", Cards: resource.MustParse(cards),
		Since: metav1.NewTime(recountTime.Add(-d))}}
}

// closedFor is a closed run of cards that ended at recountTime, d long.
func closedFor(cards string, d time.Duration) *v1alpha1.Usage {
	return &v1alpha1.Usage{LastPodUID: "pod", Days: ledger.Run{Type: "h100", Cards: resource.MustParse(cards),
		Start: recountTime.Add(-d), End: recountTime}.Days()}
}

func hoursBudget(hard string, onExhausted v1alpha1.BudgetExhaustedAction) *v1alpha1.Budget {
	b := budget("team", list("accelerator-hours", hard), nil)
	b.Spec.OnExhausted = onExhausted
	return b
}

func readBudget(t *testing.T, r *Reconciler) *v1alpha1.Budget {
	t.Helper()
	b, err := r.client.GpuV1alpha1().Budgets(ns).Get(context.Background(), "team", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// A deleted Claim's hours go into the Budget before its finalizer goes,
// and are counted once, through the deletion and after it.
func TestReconcileLedgerFoldsDeleted(t *testing.T) {
	inst := instance("nb", 1, func(i *v1alpha1.Instance) { i.Status.Usage = runningFor("1", time.Hour) })
	gone := claim("c", "h100", 2, v1alpha1.ClaimExpired)
	gone.Status.Usage = closedFor("2", 30*time.Minute)
	gone.DeletionTimestamp = &metav1.Time{Time: recountTime}
	gone.Finalizers = []string{v1alpha1.LedgerFinalizer}
	r, client := newReconciler(t, 0, hoursBudget("10", ""), inst, gone)

	if _, err := r.Reconcile(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	b := readBudget(t, r)
	// 1 card for an hour and 2 cards for half an hour.
	if got := b.Status.Consumed["accelerator-hours"]; got.Cmp(resource.MustParse("2")) != 0 {
		t.Errorf("consumed %s, want 2", got.String())
	}
	if !slices.Equal(b.Status.FoldedUIDs, []types.UID{gone.UID}) {
		t.Errorf("foldedUIDs %v, want the Claim's", b.Status.FoldedUIDs)
	}
	c, err := client.GpuV1alpha1().Claims(ns).Get(context.Background(), "c", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Finalizers) != 0 {
		t.Errorf("finalizers %v, want the ledger's gone", c.Finalizers)
	}

	// A recount before the Claim is gone does not count it twice; one
	// after prunes its UID, and keeps its hours.
	for _, step := range []string{"still stored", "gone"} {
		if step == "gone" {
			if err := client.Tracker().Delete(v1alpha1.SchemeGroupVersion.WithResource("claims"), ns, "c"); err != nil {
				t.Fatal(err)
			}
		}
		r.now = func() time.Time { return recountTime.Add(2 * consumedRefresh) }
		if _, err := r.Reconcile(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
		b = readBudget(t, r)
		want := resource.MustParse("2034m") // and 2 minutes more of the Instance
		if got := b.Status.Consumed["accelerator-hours"]; got.Cmp(want) != 0 {
			t.Errorf("%s: consumed %s, want %s", step, got.String(), want.String())
		}
	}
	if len(b.Status.FoldedUIDs) != 0 {
		t.Errorf("foldedUIDs %v after the Claim is gone", b.Status.FoldedUIDs)
	}
}

// Spent hours set Exhausted; hours left say when they will be spent at
// the rate of what runs.
func TestReconcileLedgerExhausted(t *testing.T) {
	cases := []struct {
		name        string
		hard        string
		usage       *v1alpha1.Usage
		wantStatus  metav1.ConditionStatus
		wantRequeue time.Duration
	}{
		{name: "spent: back at the month's end", hard: "1", usage: runningFor("2", time.Hour), wantStatus: metav1.ConditionTrue,
			wantRequeue: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(recountTime) + time.Second},
		{name: "an hour left at two cards", hard: "3", usage: runningFor("2", time.Hour), wantStatus: metav1.ConditionFalse, wantRequeue: 30*time.Minute + time.Second},
		{name: "a slice spends slowly", hard: "1", usage: runningFor("250m", time.Hour), wantStatus: metav1.ConditionFalse, wantRequeue: 3*time.Hour + time.Second},
		{name: "nothing runs: at the month's end", hard: "3", usage: closedFor("2", time.Hour), wantStatus: metav1.ConditionFalse,
			wantRequeue: time.Date(2026, 4, 1, 0, 0, 0, 0, time.UTC).Sub(recountTime) + time.Second},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := instance("nb", 2, func(i *v1alpha1.Instance) { i.Status.Usage = tc.usage })
			r, _ := newReconciler(t, 0, hoursBudget(tc.hard, v1alpha1.BudgetExhaustedStop), inst)
			after, err := r.Reconcile(context.Background(), ns)
			if err != nil {
				t.Fatal(err)
			}
			c := meta.FindStatusCondition(readBudget(t, r).Status.Conditions, v1alpha1.BudgetConditionExhausted)
			if c == nil || c.Status != tc.wantStatus {
				t.Fatalf("Exhausted %+v, want %s", c, tc.wantStatus)
			}
			if after != tc.wantRequeue {
				t.Errorf("requeue after %s, want %s", after, tc.wantRequeue)
			}
		})
	}
}

// A namespace without Budgets lets a deleted object's ledger go.
func TestReconcileLedgerWithoutBudgets(t *testing.T) {
	gone := instance("nb", 1, func(i *v1alpha1.Instance) {
		i.DeletionTimestamp = &metav1.Time{Time: recountTime}
		i.Finalizers = []string{v1alpha1.LedgerFinalizer}
	})
	r, client := newReconciler(t, 0, gone)
	if _, err := r.Reconcile(context.Background(), ns); err != nil {
		t.Fatal(err)
	}
	i, err := client.GpuV1alpha1().Instances(ns).Get(context.Background(), "nb", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(i.Finalizers) != 0 {
		t.Errorf("finalizers %v, want none", i.Finalizers)
	}
}
