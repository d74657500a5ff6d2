// Package storage builds the etcd-backed REST storage of Claims.
package storage

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/claim"
	"kiln.dev/kiln/pkg/registry/gpu/finalized"
	"kiln.dev/kiln/pkg/registry/gpu/status"
)

// REST is the storage of the claims resource.
type REST struct {
	*genericregistry.Store
}

// ClaimStorage groups the storage of the resource and its subresources.
type ClaimStorage struct {
	Claim  *REST
	Status *status.REST
}

// NewStorage returns the storage of claims and claims/status.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (ClaimStorage, error) {
	strategy := claim.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gpu.Claim{} },
		NewListFunc:               func() runtime.Object { return &gpu.ClaimList{} },
		PredicateFunc:             claim.Fields.Matcher,
		DefaultQualifiedResource:  gpu.Resource("claims"),
		SingularQualifiedResource: gpu.Resource("claim"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: claim.TableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: claim.Fields.GetAttrs, Indexers: claim.Fields.Indexers()}
	if err := store.CompleteWithOptions(options); err != nil {
		return ClaimStorage{}, err
	}

	return ClaimStorage{
		Claim:  &REST{store},
		Status: status.NewREST(store, claim.NewStatusStrategy(strategy)),
	}, nil
}

var _ rest.CategoriesProvider = &REST{}

// Categories puts Claims in "kubectl get gpu".
func (r *REST) Categories() []string { return []string{"gpu"} }

// Delete deletes a Claim without losing the finalizer kiln-controller
// may be adding at that moment (package finalized).
func (r *REST) Delete(ctx context.Context, name string, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return finalized.Delete(ctx, r.Store, name, validate, options)
}

// DeleteCollection deletes Claims one by one through Delete.
func (r *REST) DeleteCollection(ctx context.Context, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return finalized.DeleteCollection(ctx, r.Store, validate, options, listOptions)
}
