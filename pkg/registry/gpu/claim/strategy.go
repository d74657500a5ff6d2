// Package instance holds the registry strategy of Claims.
package claim

import (
	"context"
	"fmt"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/names"
	"k8s.io/client-go/tools/cache"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
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

// GetAttrs returns the labels and selectable fields of a Claim.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(*gpu.Claim)
	if !ok {
		return nil, nil, fmt.Errorf("not a Claim: %T", obj)
	}
	return o.Labels, SelectableFields(o), nil
}

// SelectableFields are the fields a field selector may name; the same list
// is registered as field label conversions in v1alpha1.
func SelectableFields(o *gpu.Claim) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"spec.type":       o.Spec.Type,
		"status.phase":    string(o.Status.Phase),
		"status.nodeName": o.Status.NodeName,
	}, &o.ObjectMeta, true)
}

// indexedFields are kept as watch-cache indexes, so a selector on one of
// them is answered without scanning every Claim.
var indexedFields = []string{"spec.type", "status.phase", "status.nodeName"}

// Matcher returns the predicate of a list or watch.
func Matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{
		Label:       label,
		Field:       field,
		GetAttrs:    GetAttrs,
		IndexFields: indexedFields,
	}
}

// Indexers returns the watch-cache indexes of the selectable fields.
func Indexers() *cache.Indexers {
	ix := cache.Indexers{}
	for _, f := range indexedFields {
		f := f
		ix[storage.FieldIndex(f)] = func(obj interface{}) ([]string, error) {
			o, ok := obj.(*gpu.Claim)
			if !ok {
				return nil, fmt.Errorf("not a Claim: %T", obj)
			}
			return []string{SelectableFields(o)[f]}, nil
		}
	}
	return &ix
}
