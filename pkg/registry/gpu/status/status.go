// Package status serves the /status subresource of a kind from a copy of
// the kind's store that carries the status strategy.
package status

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	"sigs.k8s.io/structured-merge-diff/v6/fieldpath"
)

// Strategy is what a status strategy provides.
type Strategy interface {
	rest.RESTUpdateStrategy
	rest.ResetFieldsStrategy
}

// REST is the storage of <resource>/status.
type REST struct {
	store *genericregistry.Store
}

// NewREST copies store and gives the copy the status strategy, so updates
// through it keep spec and change status only.
func NewREST(store *genericregistry.Store, strategy Strategy) *REST {
	s := *store
	s.UpdateStrategy = strategy
	s.ResetFieldsStrategy = strategy
	return &REST{store: &s}
}

var (
	_ rest.Getter              = &REST{}
	_ rest.Updater             = &REST{}
	_ rest.TableConvertor      = &REST{}
	_ rest.ResetFieldsStrategy = &REST{}
)

// New returns an empty object of the kind.
func (r *REST) New() runtime.Object { return r.store.New() }

// Destroy is a no-op: the main store owns the storage backend.
func (r *REST) Destroy() {}

// Get returns the object, so clients can read before writing status.
func (r *REST) Get(ctx context.Context, name string, options *metav1.GetOptions) (runtime.Object, error) {
	return r.store.Get(ctx, name, options)
}

// Update writes status only.
func (r *REST) Update(ctx context.Context, name string, objInfo rest.UpdatedObjectInfo, createValidation rest.ValidateObjectFunc, updateValidation rest.ValidateObjectUpdateFunc, forceAllowCreate bool, options *metav1.UpdateOptions) (runtime.Object, bool, error) {
	// A subresource never creates its object.
	return r.store.Update(ctx, name, objInfo, createValidation, updateValidation, false, options)
}

// GetResetFields returns the fields /status resets.
func (r *REST) GetResetFields() map[fieldpath.APIVersion]*fieldpath.Set {
	return r.store.GetResetFields()
}

// ConvertToTable prints the object as the main endpoint does.
func (r *REST) ConvertToTable(ctx context.Context, object runtime.Object, tableOptions runtime.Object) (*metav1.Table, error) {
	return r.store.ConvertToTable(ctx, object, tableOptions)
}
