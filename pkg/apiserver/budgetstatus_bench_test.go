//go:build integration

package apiserver_test

import (
	"context"
	"fmt"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

var statusBenchRuns int

// BenchmarkBudgetStatusUpdate is one charge's write as admission makes it,
// with pending charges already in status.pending: the oldest entry goes,
// a new one comes, and used follows. Under a burst of creates in one
// namespace the list held about 200 entries, and every charge and recount
// is such a write (bench-scale, step 4).
//
//	go test -tags=integration ./pkg/apiserver -run '^$' -bench BenchmarkBudgetStatusUpdate -benchmem
func BenchmarkBudgetStatusUpdate(b *testing.B) {
	for _, pending := range []int{0, 50, 200} {
		b.Run(fmt.Sprintf("pending=%d", pending), func(b *testing.B) {
			ctx := context.Background()
			// A namespace of its own each time: -count runs it again.
			statusBenchRuns++
			ns := fmt.Sprintf("status-bench-%d", statusBenchRuns)
			budgets := client.GpuV1alpha1().Budgets(ns)
			bud, err := budgets.Create(ctx, &gpuv1.Budget{
				ObjectMeta: metav1.ObjectMeta{Name: "team"},
				Spec:       gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1G")}},
			}, metav1.CreateOptions{})
			if err != nil {
				b.Fatal(err)
			}
			// The Budget loop writes its conditions once; after that its
			// recounts (of charges still in flight, for objects it does
			// not see) agree with what this writes, and leave it be.
			if err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
				bud, err = budgets.Get(ctx, "team", metav1.GetOptions{})
				return err == nil && meta.FindStatusCondition(bud.Status.Conditions, gpuv1.BudgetConditionCounted) != nil, err
			}); err != nil {
				b.Fatal(err)
			}
			one := gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1")}
			seq := 0
			entry := func() gpuv1.BudgetCharge {
				seq++
				name := fmt.Sprintf("i-%d", seq)
				return gpuv1.BudgetCharge{Kind: "Instance", Name: name, UID: types.UID(fmt.Sprintf("00000000-0000-0000-0000-%012d", seq)),
					Charge: one, Time: metav1.Now()}
			}
			for range pending {
				bud.Status.Pending = append(bud.Status.Pending, entry())
			}
			bud.Status.Used = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: *resource.NewQuantity(int64(pending), resource.DecimalSI)}
			if bud, err = budgets.UpdateStatus(ctx, bud, metav1.UpdateOptions{FieldManager: "bench"}); err != nil {
				b.Fatal(err)
			}
			conflicts := 0
			b.ReportAllocs()
			for b.Loop() {
				if len(bud.Status.Pending) > 0 {
					bud.Status.Pending = bud.Status.Pending[1:]
				}
				bud.Status.Pending = append(bud.Status.Pending, entry())
				bud.Status.Used = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: *resource.NewQuantity(int64(len(bud.Status.Pending)), resource.DecimalSI)}
				next, err := budgets.UpdateStatus(ctx, bud, metav1.UpdateOptions{FieldManager: "kiln-budget-admission"})
				for apierrors.IsConflict(err) {
					conflicts++
					cur, gerr := budgets.Get(ctx, "team", metav1.GetOptions{})
					if gerr != nil {
						b.Fatal(gerr)
					}
					bud.ResourceVersion = cur.ResourceVersion
					next, err = budgets.UpdateStatus(ctx, bud, metav1.UpdateOptions{FieldManager: "kiln-budget-admission"})
				}
				if err != nil {
					b.Fatal(err)
				}
				bud = next
			}
			b.ReportMetric(float64(conflicts), "conflicts")
		})
	}
}
