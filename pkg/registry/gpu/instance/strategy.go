// Package instance holds the registry strategy of Instances.
package instance

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
	}
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

// GetAttrs returns the labels and selectable fields of an Instance.
func GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	inst, ok := obj.(*gpu.Instance)
	if !ok {
		return nil, nil, fmt.Errorf("not an Instance: %T", obj)
	}
	return inst.Labels, SelectableFields(inst), nil
}

// SelectableFields are the fields a field selector may name; the same list
// is registered as field label conversions in v1alpha1.
func SelectableFields(inst *gpu.Instance) fields.Set {
	return generic.AddObjectMetaFieldsSet(fields.Set{
		"spec.type":       inst.Spec.Type,
		"spec.nodeName":   inst.Spec.NodeName,
		"spec.claimName":  inst.Spec.ClaimName,
		"status.phase":    string(inst.Status.Phase),
		"status.nodeName": inst.Status.NodeName,
	}, &inst.ObjectMeta, true)
}

// indexedFields are kept as watch-cache indexes, so a selector on one of
// them is answered without scanning every Instance.
var indexedFields = []string{"spec.type", "spec.nodeName", "spec.claimName", "status.phase", "status.nodeName"}

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
			inst, ok := obj.(*gpu.Instance)
			if !ok {
				return nil, fmt.Errorf("not an Instance: %T", obj)
			}
			return []string{SelectableFields(inst)[f]}, nil
		}
	}
	return &ix
}
