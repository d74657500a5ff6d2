// Package instancetype holds the registry strategy of InstanceTypes: the
// main and /status strategies, their field selectors and their table columns.
package instancetype

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

// instanceTypeStrategy implements behaviour for InstanceTypeTypes on the main endpoint.
type instanceTypeStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of the main endpoint.
func NewStrategy(typer runtime.ObjectTyper) instanceTypeStrategy {
	return instanceTypeStrategy{typer, names.SimpleNameGenerator}
}

func (instanceTypeStrategy) NamespaceScoped() bool { return false }

// GetResetFields says the main endpoint owns spec and metadata, not status,
// so server-side apply never records status fields for it.
func (instanceTypeStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (instanceTypeStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(*gpu.InstanceType)
	o.Status = gpu.InstanceTypeStatus{}
	o.Generation = 1
}

func (instanceTypeStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.InstanceType), old.(*gpu.InstanceType)
	newObj.Status = oldObj.Status
	if !apiequality.Semantic.DeepEqual(newObj.Spec, oldObj.Spec) {
		newObj.Generation = oldObj.Generation + 1
	}
}

func (instanceTypeStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateInstanceType(obj.(*gpu.InstanceType))
}

func (instanceTypeStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return nil
}

func (instanceTypeStrategy) Canonicalize(obj runtime.Object) {}

func (instanceTypeStrategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

func (instanceTypeStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInstanceTypeUpdate(obj.(*gpu.InstanceType), old.(*gpu.InstanceType))
}

func (instanceTypeStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (instanceTypeStrategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

// instanceTypeStatusStrategy implements behaviour for the /status subresource.
type instanceTypeStatusStrategy struct {
	instanceTypeStrategy
}

// NewStatusStrategy returns the strategy of the /status subresource.
func NewStatusStrategy(s instanceTypeStrategy) instanceTypeStatusStrategy {
	return instanceTypeStatusStrategy{s}
}

// GetResetFields says /status owns status only.
func (instanceTypeStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (instanceTypeStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.InstanceType), old.(*gpu.InstanceType)
	newObj.Spec = oldObj.Spec
}

func (instanceTypeStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateInstanceTypeStatusUpdate(obj.(*gpu.InstanceType), old.(*gpu.InstanceType))
}

func (instanceTypeStatusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// Fields are the fields a field selector may name; v1alpha1 registers the
// same list as field label conversions.
var Fields = selection.Fields[*gpu.InstanceType]{
	Namespaced: false,
	Meta:       func(o *gpu.InstanceType) *metav1.ObjectMeta { return &o.ObjectMeta },
	Values: map[string]func(*gpu.InstanceType) string{
		"status.phase": func(o *gpu.InstanceType) string { return string(o.Status.Phase) },
	},
}
