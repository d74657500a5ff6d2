// Package instance holds the registry strategy of InstanceTypeTypes.
package instancetype

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

// GetAttrs returns the labels and selectable fields of an InstanceType.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(*gpu.InstanceType)
	if !ok {
		return nil, nil, fmt.Errorf("not an InstanceType: %T", obj)
	}
	return o.Labels, SelectableFields(o), nil
}

// SelectableFields are the fields a field selector may name; the same list
// is registered as field label conversions in v1alpha1.
func SelectableFields(o *gpu.InstanceType) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"status.phase": string(o.Status.Phase),
	}, &o.ObjectMeta, false)
}

// indexedFields are kept as watch-cache indexes, so a selector on one of
// them is answered without scanning every InstanceType.
var indexedFields = []string{"status.phase"}

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
			o, ok := obj.(*gpu.InstanceType)
			if !ok {
				return nil, fmt.Errorf("not an InstanceType: %T", obj)
			}
			return []string{SelectableFields(o)[f]}, nil
		}
	}
	return &ix
}
