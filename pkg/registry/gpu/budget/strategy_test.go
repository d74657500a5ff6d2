package budget

import (
	"context"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestStrategyResetsAndGeneration(t *testing.T) {
	ctx := context.Background()
	strategy := NewStrategy(runtime.NewScheme())
	statusStrategy := NewStatusStrategy(strategy)
	base := func() *gpu.Budget {
		return &gpu.Budget{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 4},
			Spec:       gpu.BudgetSpec{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("8")}},
			Status:     gpu.BudgetStatus{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("8")}, Used: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("2")}},
		}
	}

	created := base()
	strategy.PrepareForCreate(ctx, created)
	if created.Generation != 1 {
		t.Errorf("create: generation %d, want 1", created.Generation)
	}
	if !apiequality.Semantic.DeepEqual(created.Status, gpu.BudgetStatus{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("8")}}) {
		t.Errorf("create kept status %+v", created.Status)
	}

	for _, tc := range []struct {
		name           string
		status         bool
		mutate         func(*gpu.Budget)
		wantGeneration int64
		wantSpec       func(old, updated *gpu.Budget) bool
		wantStatus     func(old, updated *gpu.Budget) bool
	}{
		{name: "spec change bumps generation, keeps status", mutate: func(o *gpu.Budget) {
			o.Spec.Hard = gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("16")}
			o.Status = gpu.BudgetStatus{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("99")}, Used: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("5")}}
		},
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Budget) bool { return !apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus: func(old, u *gpu.Budget) bool {
				return apiequality.Semantic.DeepEqual(gpu.BudgetStatus{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("16")}, Used: old.Status.Used}, u.Status)
			}},
		{name: "metadata change keeps generation", mutate: func(o *gpu.Budget) { o.Labels = map[string]string{"a": "b"} },
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Budget) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus:     func(old, u *gpu.Budget) bool { return apiequality.Semantic.DeepEqual(old.Status, u.Status) }},
		{name: "status endpoint keeps spec, takes status", status: true, mutate: func(o *gpu.Budget) {
			o.Spec.Hard = gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("16")}
			o.Status = gpu.BudgetStatus{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("99")}, Used: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("5")}}
		},
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Budget) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus: func(old, u *gpu.Budget) bool {
				return apiequality.Semantic.DeepEqual(gpu.BudgetStatus{Hard: old.Spec.Hard, Used: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("5")}}, u.Status)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old, updated := base(), base()
			tc.mutate(updated)
			if tc.status {
				statusStrategy.PrepareForUpdate(ctx, updated, old)
			} else {
				strategy.PrepareForUpdate(ctx, updated, old)
			}
			if updated.Generation != tc.wantGeneration {
				t.Errorf("generation %d, want %d", updated.Generation, tc.wantGeneration)
			}
			if !tc.wantSpec(old, updated) {
				t.Errorf("spec after update: %+v", updated.Spec)
			}
			if !tc.wantStatus(old, updated) {
				t.Errorf("status after update: %+v", updated.Status)
			}
		})
	}

	if got := strategy.GetResetFields()["gpu.kiln.dev/v1alpha1"].String(); got != ".status" {
		t.Errorf("main endpoint resets %s, want .status", got)
	}
	if got := statusStrategy.GetResetFields()["gpu.kiln.dev/v1alpha1"].String(); got != ".spec" {
		t.Errorf("status endpoint resets %s, want .spec", got)
	}
}
