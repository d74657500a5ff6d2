// Package nodedevices holds the registry strategy of NodeDevices, the
// inventory each node agent reports. The object is all status: the agent
// creates it whole, then writes /status.
package nodedevices

import (
	"context"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/storage/names"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
)

type strategy struct {
	runtime.ObjectTyper
	names.NameGenerator
}

// NewStrategy returns the strategy of the main endpoint.
func NewStrategy(typer runtime.ObjectTyper) strategy {
	return strategy{typer, names.SimpleNameGenerator}
}

func (strategy) NamespaceScoped() bool { return false }

// GetResetFields: after its create, the main endpoint owns metadata only.
func (strategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("status")),
	}
}

// PrepareForCreate keeps the status: the agent creates the object with
// what it sees.
func (strategy) PrepareForCreate(ctx context.Context, obj runtime.Object) {
	obj.(*gpu.NodeDevices).Generation = 1
}

func (strategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	obj.(*gpu.NodeDevices).Status = old.(*gpu.NodeDevices).Status
}

func (strategy) Validate(ctx context.Context, obj runtime.Object) field.ErrorList {
	return validation.ValidateNodeDevices(obj.(*gpu.NodeDevices))
}

func (strategy) WarningsOnCreate(ctx context.Context, obj runtime.Object) []string { return nil }

func (strategy) Canonicalize(obj runtime.Object) {}

func (strategy) AllowCreateOnUpdate(ctx context.Context) bool { return false }

func (strategy) ValidateUpdate(ctx context.Context, obj, old runtime.Object) field.ErrorList {
	return validation.ValidateNodeDevicesUpdate(obj.(*gpu.NodeDevices), old.(*gpu.NodeDevices))
}

func (strategy) WarningsOnUpdate(ctx context.Context, obj, old runtime.Object) []string { return nil }

func (strategy) AllowUnconditionalUpdate(ctx context.Context) bool { return true }

type statusStrategy struct {
	strategy
}

// NewStatusStrategy returns the strategy of /status.
func NewStatusStrategy(s strategy) statusStrategy { return statusStrategy{s} }

// GetResetFields: /status owns status only.
func (statusStrategy) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return map[fieldpath.APIVersion]*fieldpath.Set{
		"gpu.kiln.dev/v1alpha1": fieldpath.NewSet(fieldpath.MakePathOrDie("metadata")),
	}
}

func (statusStrategy) PrepareForUpdate(ctx context.Context, obj, old runtime.Object) {
	newObj, oldObj := obj.(*gpu.NodeDevices), old.(*gpu.NodeDevices)
	status := newObj.Status
	newObj.ObjectMeta = oldObj.ObjectMeta
	newObj.Status = status
}
