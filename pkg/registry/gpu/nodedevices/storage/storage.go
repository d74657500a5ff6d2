// Package storage builds the etcd-backed REST storage of NodeDevices.
package storage

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/nodedevices"
	"kiln.dev/kiln/pkg/registry/gpu/status"
)

// REST is the storage of the nodedevices resource.
type REST struct {
	*genericregistry.Store
}

// NodeDevicesStorage groups the storage of the resource and /status.
type NodeDevicesStorage struct {
	NodeDevices *REST
	Status      *status.REST
}

// NewStorage returns the storage of nodedevices and nodedevices/status.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (NodeDevicesStorage, error) {
	strategy := nodedevices.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gpu.NodeDevices{} },
		NewListFunc:               func() runtime.Object { return &gpu.NodeDevicesList{} },
		DefaultQualifiedResource:  gpu.Resource("nodedevices"),
		SingularQualifiedResource: gpu.Resource("nodedevices"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: nodedevices.TableConvertor,
	}
	if err := store.CompleteWithOptions(&generic.StoreOptions{RESTOptions: optsGetter}); err != nil {
		return NodeDevicesStorage{}, err
	}
	return NodeDevicesStorage{
		NodeDevices: &REST{store},
		Status:      status.NewREST(store, nodedevices.NewStatusStrategy(strategy)),
	}, nil
}

var (
	_ rest.ShortNamesProvider = &REST{}
	_ rest.CategoriesProvider = &REST{}
)

// ShortNames lets kubectl resolve "nd".
func (r *REST) ShortNames() []string { return []string{"nd"} }

// Categories puts NodeDevices in "kubectl get gpu".
func (r *REST) Categories() []string { return []string{"gpu"} }
