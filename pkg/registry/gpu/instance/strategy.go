// Package instance holds the registry strategy of Instances.
package instance

import (
	"context"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
	"kiln.dev/kiln/pkg/registry/gpu/selection"
)

// instanceStrategy implements behaviour for Instances on the main endpoint.
type instanceStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of the main endpoint.
func NewStrategy(typer runtime.ObjectTyper) instanceStrategy {
	return instanceStrategy{typer, names.SimpleNameGenerator}
}

func (instanceStrategy) NamespaceScoped() bool { return true }

// GetResetFields says the main endpoint owns spec and metadata, not status,
// so server-side apply never records status fields for it.
func (instanceStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (instanceStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	inst := obj.(*gpu.Instance)
	inst.Status = gpu.InstanceStatus{}
	inst.Generation = 1
}

func (instanceStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newInst, oldInst := obj.(*gpu.Instance), old.(*gpu.Instance)
	newInst.Status = oldInst.Status
	if !apiequality.Semantic.DeepEqual(newInst.Spec, oldInst.Spec) {
		newInst.Generation = oldInst.Generation + 1
		// An edit of an Instance kiln-controller has reported Stopped,
		// that keeps it stopped, makes no Pod: it stays Stopped. Otherwise
		// the new generation, not yet observed, would count it as holding
		// its cards again (accounting.InstanceHolds) without the Budget
		// plugin having charged anything, and the next start, charged only
		// beyond that, would run for free.
		if oldInst.Spec.Stopped && newInst.Spec.Stopped && stoppedAt(oldInst) {
			newInst.Status.ObservedGeneration = newInst.Generation
		}
	}
}

// stoppedAt says the controller reported the Instance Stopped at its
// generation: its Pod is gone.
func stoppedAt(inst *gpu.Instance) bool {
	return inst.Status.Phase == gpu.InstanceStopped && inst.Status.ObservedGeneration == inst.Generation
}

func (instanceStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateInstance(obj.(*gpu.Instance))
}

func (instanceStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return nil
}

func (instanceStrategy) Canonicalize(obj runtime.Object) {}

func (instanceStrategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

func (instanceStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInstanceUpdate(obj.(*gpu.Instance), old.(*gpu.Instance))
}

func (instanceStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (instanceStrategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

// instanceStatusStrategy implements behaviour for the /status subresource.
type instanceStatusStrategy struct {
	instanceStrategy
}

// NewStatusStrategy returns the strategy of the /status subresource.
func NewStatusStrategy(s instanceStrategy) instanceStatusStrategy {
	return instanceStatusStrategy{s}
}

// GetResetFields says /status owns status only.
func (instanceStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (instanceStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newInst, oldInst := obj.(*gpu.Instance), old.(*gpu.Instance)
	newInst.Spec = oldInst.Spec
}

func (instanceStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInstanceStatusUpdate(obj.(*gpu.Instance), old.(*gpu.Instance))
}

func (instanceStatusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// Fields are the fields a field selector may name; v1alpha1 registers the
// same list as field label conversions.
var Fields = selection.Fields[*gpu.Instance]{
	Namespaced: true,
	Meta:       func(o *gpu.Instance) *metav1.ObjectMeta { return &o.ObjectMeta },
	Values: map[string]func(*gpu.Instance) string{
		"spec.type":       func(o *gpu.Instance) string { return o.Spec.Type },
		"spec.nodeName":   func(o *gpu.Instance) string { return o.Spec.NodeName },
		"spec.claimName":  func(o *gpu.Instance) string { return o.Spec.ClaimName },
		"status.phase":    func(o *gpu.Instance) string { return string(o.Status.Phase) },
		"status.nodeName": func(o *gpu.Instance) string { return o.Status.NodeName },
	},
}
