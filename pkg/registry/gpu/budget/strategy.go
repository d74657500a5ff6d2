// Package budget holds the registry strategy of Budgets: the main and
// /status strategies, their field selectors and their table columns.
package budget

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

// budgetStrategy implements behaviour for Budgets on the main endpoint.
type budgetStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of the main endpoint.
func NewStrategy(typer runtime.ObjectTyper) budgetStrategy {
	return budgetStrategy{typer, names.SimpleNameGenerator}
}

func (budgetStrategy) NamespaceScoped() bool { return true }

// GetResetFields says the main endpoint owns spec and metadata, not status,
// so server-side apply never records status fields for it.
func (budgetStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (budgetStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(*gpu.Budget)
	// status.hard mirrors the limits in force, as a ResourceQuota's does;
	// status.used is charged by admission.
	o.Status = gpu.BudgetStatus{Hard: o.Spec.Hard}
	o.Generation = 1
}

func (budgetStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.Budget), old.(*gpu.Budget)
	newObj.Status = oldObj.Status
	newObj.Status.Hard = newObj.Spec.Hard
	if !apiequality.Semantic.DeepEqual(newObj.Spec, oldObj.Spec) {
		newObj.Generation = oldObj.Generation + 1
	}
}

func (budgetStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateBudget(obj.(*gpu.Budget))
}

func (budgetStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return nil
}

func (budgetStrategy) Canonicalize(obj runtime.Object) {}

func (budgetStrategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

func (budgetStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateBudgetUpdate(obj.(*gpu.Budget), old.(*gpu.Budget))
}

func (budgetStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (budgetStrategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

// budgetStatusStrategy implements behaviour for the /status subresource.
type budgetStatusStrategy struct {
	budgetStrategy
}

// NewStatusStrategy returns the strategy of the /status subresource.
func NewStatusStrategy(s budgetStrategy) budgetStatusStrategy {
	return budgetStatusStrategy{s}
}

// GetResetFields says /status owns status only.
func (budgetStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (budgetStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.Budget), old.(*gpu.Budget)
	newObj.Spec = oldObj.Spec
	newObj.Status.Hard = newObj.Spec.Hard
}

func (budgetStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateBudgetStatusUpdate(obj.(*gpu.Budget), old.(*gpu.Budget))
}

func (budgetStatusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// Fields are the fields a field selector may name; v1alpha1 registers the
// same list as field label conversions.
var Fields = selection.Fields[*gpu.Budget]{
	Namespaced: true,
	Meta:       func(o *gpu.Budget) *metav1.ObjectMeta { return &o.ObjectMeta },
	Values:     nil,
}
