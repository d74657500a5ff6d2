package instance

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
	base := func() *gpu.Instance {
		return &gpu.Instance{
			ObjectMeta: metav1.ObjectMeta{Name: "x", Generation: 4},
			Spec:       gpu.InstanceSpec{Type: "h100", Image: "a"},
			Status:     gpu.InstanceStatus{Phase: gpu.InstanceReady},
		}
	}

	created := base()
	strategy.PrepareForCreate(ctx, created)
	if created.Generation != 1 {
		t.Errorf("create: generation %d, want 1", created.Generation)
	}
	if !apiequality.Semantic.DeepEqual(created.Status, gpu.InstanceStatus{}) {
		t.Errorf("create kept status %+v", created.Status)
	}

	for _, tc := range []struct {
		name   string
		status bool
		// old changes the stored Instance; the update starts from it.
		old            func(*gpu.Instance)
		mutate         func(*gpu.Instance)
		wantGeneration int64
		wantSpec       func(old, updated *gpu.Instance) bool
		wantStatus     func(old, updated *gpu.Instance) bool
	}{
		{name: "spec change bumps generation, keeps status", mutate: func(o *gpu.Instance) { o.Spec.Image = "b"; o.Status = gpu.InstanceStatus{Phase: gpu.InstanceFailed} },
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Instance) bool { return !apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus:     func(old, u *gpu.Instance) bool { return apiequality.Semantic.DeepEqual(old.Status, u.Status) }},
		// Issue O, class 10: such an edit used to count it as holding its
		// cards again, uncharged, and the next start ran for free.
		{name: "an edit of a stopped Instance reported Stopped keeps it Stopped",
			old: func(o *gpu.Instance) {
				o.Spec.Stopped, o.Status = true, gpu.InstanceStatus{Phase: gpu.InstanceStopped, ObservedGeneration: 4}
			},
			mutate:         func(o *gpu.Instance) { o.Spec.Image = "b" },
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Instance) bool { return u.Spec.Image == "b" },
			wantStatus: func(old, u *gpu.Instance) bool {
				return u.Status.Phase == gpu.InstanceStopped && u.Status.ObservedGeneration == 5
			}},
		{name: "a start of a stopped Instance is for the controller to observe",
			old: func(o *gpu.Instance) {
				o.Spec.Stopped, o.Status = true, gpu.InstanceStatus{Phase: gpu.InstanceStopped, ObservedGeneration: 4}
			},
			mutate:         func(o *gpu.Instance) { o.Spec.Stopped = false },
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Instance) bool { return !u.Spec.Stopped },
			wantStatus:     func(old, u *gpu.Instance) bool { return u.Status.ObservedGeneration == 4 }},
		{name: "an edit of a stopping Instance is for the controller to observe",
			old: func(o *gpu.Instance) {
				o.Spec.Stopped, o.Status = true, gpu.InstanceStatus{Phase: gpu.InstanceStopped, ObservedGeneration: 3}
			},
			mutate:         func(o *gpu.Instance) { o.Spec.Image = "b" },
			wantGeneration: 5,
			wantSpec:       func(old, u *gpu.Instance) bool { return u.Spec.Image == "b" },
			wantStatus:     func(old, u *gpu.Instance) bool { return u.Status.ObservedGeneration == 3 }},
		{name: "metadata change keeps generation", mutate: func(o *gpu.Instance) { o.Labels = map[string]string{"a": "b"} },
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Instance) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus:     func(old, u *gpu.Instance) bool { return apiequality.Semantic.DeepEqual(old.Status, u.Status) }},
		{name: "status endpoint keeps spec, takes status", status: true, mutate: func(o *gpu.Instance) { o.Spec.Image = "b"; o.Status = gpu.InstanceStatus{Phase: gpu.InstanceFailed} },
			wantGeneration: 4,
			wantSpec:       func(old, u *gpu.Instance) bool { return apiequality.Semantic.DeepEqual(old.Spec, u.Spec) },
			wantStatus: func(old, u *gpu.Instance) bool {
				return apiequality.Semantic.DeepEqual(gpu.InstanceStatus{Phase: gpu.InstanceFailed}, u.Status)
			}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			old := base()
			if tc.old != nil {
				tc.old(old)
			}
			updated := old.DeepCopy()
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
