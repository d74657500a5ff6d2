package claim

import (
	"context"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestStrategyResetsAndGeneration(t *testing.T) {
	ctx := context.Background()
	strategy := NewStrategy(runtime.NewScheme())
	statusStrategy := NewStatusStrategy(strategy)
	base := func() *gpu.Claim {
		return &gpu.Claim{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 4},
			Spec:       gpu.ClaimSpec{Type: "h100", Partition: "1g.10gb"},
			Status:     gpu.ClaimStatus{Phase: gpu.ClaimBound},
		}
	}

	created := base()
	strategy.PrepareForCreate(ctx, created)
	if created.Generation != 1 {
		t.Errorf("create: generation %d, want 1", created.Generation)
	}
	if !apiequality.Semantic.DeepEqual(created.Status, gpu.ClaimStatus{}) {
		t.Errorf("create kept status %+v", created.Status)
	}

	for _, tc := range []struct {
		name           string
		status         bool
		mutate         func(*gpu.Claim)
		wantGeneration int64
		wantSpec       func(old, updated *gpu.Claim) bool
		wantStatus     func(old, updated *gpu.Claim) bool
	}{
		{name: "spec change bumps generation, keeps status", mutate: func(o *gpu.Claim) {
			o.Spec.ExpireAfter = &metav1.Duration{}
			o.Status = gpu.ClaimStatus{Phase: gpu.ClaimLost}
		},
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Claim) bool { return !apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus:     func(old, u *gpu.Claim) bool { return apiequality.Semantic.DeepEqual(old.Status, u.Status) }},
		{name: "metadata change keeps generation", mutate: func(o *gpu.Claim) { o.Labels = map[string]string{"a": "b"} },
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Claim) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus:     func(old, u *gpu.Claim) bool { return apiequality.Semantic.DeepEqual(old.Status, u.Status) }},
		{name: "status endpoint keeps spec, takes status", status: true, mutate: func(o *gpu.Claim) {
			o.Spec.ExpireAfter = &metav1.Duration{}
			o.Status = gpu.ClaimStatus{Phase: gpu.ClaimLost}
		},
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Claim) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus: func(old, u *gpu.Claim) bool {
				return apiequality.Semantic.DeepEqual(gpu.ClaimStatus{Phase: gpu.ClaimLost}, u.Status)
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
