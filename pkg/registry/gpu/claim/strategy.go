// Package claim holds the registry strategy of Claims: the main and
// /status strategies, their field selectors and their table columns.
package claim

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

// claimStrategy implements behaviour for Claims on the main endpoint.
type claimStrategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of the main endpoint.
func NewStrategy(typer runtime.ObjectTyper) claimStrategy {
	return claimStrategy{typer, names.SimpleNameGenerator}
}

func (claimStrategy) NamespaceScoped() bool { return true }

// GetResetFields says the main endpoint owns spec and metadata, not status,
// so server-side apply never records status fields for it.
func (claimStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

func (claimStrategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	o := obj.(*gpu.Claim)
	o.Status = gpu.ClaimStatus{}
	o.Generation = 1
}

func (claimStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.Claim), old.(*gpu.Claim)
	newObj.Status = oldObj.Status
	if !apiequality.Semantic.DeepEqual(newObj.Spec, oldObj.Spec) {
		newObj.Generation = oldObj.Generation + 1
	}
}

func (claimStrategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateClaim(obj.(*gpu.Claim))
}

func (claimStrategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string {
	return nil
}

func (claimStrategy) Canonicalize(obj runtime.Object) {}

func (claimStrategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

func (claimStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClaimUpdate(obj.(*gpu.Claim), old.(*gpu.Claim))
}

func (claimStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

func (claimStrategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

// claimStatusStrategy implements behaviour for the /status subresource.
type claimStatusStrategy struct {
	claimStrategy
}

// NewStatusStrategy returns the strategy of the /status subresource.
func NewStatusStrategy(s claimStrategy) claimStatusStrategy {
	return claimStatusStrategy{s}
}

// GetResetFields says /status owns status only.
func (claimStatusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("spec")),
	}
}

func (claimStatusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.Claim), old.(*gpu.Claim)
	newObj.Spec = oldObj.Spec
}

func (claimStatusStrategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateClaimStatusUpdate(obj.(*gpu.Claim), old.(*gpu.Claim))
}

func (claimStatusStrategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string {
	return nil
}

// Fields are the fields a field selector may name; v1alpha1 registers the
// same list as field label conversions.
var Fields = selection.Fields[*gpu.Claim]{
	Namespaced: true,
	Meta:       func(o *gpu.Claim) *metav1.ObjectMeta { return &o.ObjectMeta },
	Values: map[string]func(*gpu.Claim) string{
		"spec.type":       func(o *gpu.Claim) string { return o.Spec.Type },
		"status.phase":    func(o *gpu.Claim) string { return string(o.Status.Phase) },
		"status.nodeName": func(o *gpu.Claim) string { return o.Status.NodeName },
	},
}
