// Package storage builds the etcd-backed REST storage of InstanceTypes.
package storage

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/instancetype"
	"kiln.dev/kiln/pkg/registry/gpu/status"
)

// REST is the storage of the instancetypes resource.
type REST struct {
	*genericregistry.Store
}

// InstanceTypeStorage groups the storage of the resource and its subresources.
type InstanceTypeStorage struct {
	InstanceType *REST
	Status       *status.REST
}

// NewStorage returns the storage of instancetypes and instancetypes/status.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (InstanceTypeStorage, error) {
	strategy := instancetype.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gpu.InstanceType{} },
		NewListFunc:               func() runtime.Object { return &gpu.InstanceTypeList{} },
		PredicateFunc:             instancetype.Fields.Matcher,
		DefaultQualifiedResource:  gpu.Resource("instancetypes"),
		SingularQualifiedResource: gpu.Resource("instancetype"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: instancetype.TableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: instancetype.Fields.GetAttrs, Indexers: instancetype.Fields.Indexers()}
	if err := store.CompleteWithOptions(options); err != nil {
		return InstanceTypeStorage{}, err
	}

	return InstanceTypeStorage{
		InstanceType: &REST{store},
		Status:       status.NewREST(store, instancetype.NewStatusStrategy(strategy)),
	}, nil
}

var _ rest.ShortNamesProvider = &REST{}
var _ rest.CategoriesProvider = &REST{}

// ShortNames lets kubectl resolve "it".
func (r *REST) ShortNames() []string { return []string{"it"} }

// Categories puts InstanceTypes in "kubectl get gpu".
func (r *REST) Categories() []string { return []string{"gpu"} }
