// Package storage builds the etcd-backed REST storage of Instances.
package storage

import (
	"context"

	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/finalized"
	"kiln.dev/kiln/pkg/registry/gpu/instance"
	"kiln.dev/kiln/pkg/registry/gpu/status"
)

// REST is the storage of the instances resource.
type REST struct {
	*genericregistry.Store
}

// InstanceStorage groups the storage of the resource and its subresources.
type InstanceStorage struct {
	Instance *REST
	Status   *status.REST
	Start    *LifecycleREST
	Stop     *LifecycleREST
	Log      *LogREST
}

// Options are what the subresources need beyond etcd.
type Options struct {
	// Pods reads the Instances' Pods and logs from the cluster; nil in
	// standalone mode.
	Pods corev1client.PodsGetter
}

// NewStorage returns the storage of instances and its subresources status,
// start, stop and log.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter, opts Options) (InstanceStorage, error) {
	strategy := instance.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gpu.Instance{} },
		NewListFunc:               func() runtime.Object { return &gpu.InstanceList{} },
		PredicateFunc:             instance.Fields.Matcher,
		DefaultQualifiedResource:  gpu.Resource("instances"),
		SingularQualifiedResource: gpu.Resource("instance"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: instance.TableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: instance.Fields.GetAttrs, Indexers: instance.Fields.Indexers()}
	if err := store.CompleteWithOptions(options); err != nil {
		return InstanceStorage{}, err
	}
	return InstanceStorage{
		Instance: &REST{store},
		Status:   status.NewREST(store, instance.NewStatusStrategy(strategy)),
		Start:    &LifecycleREST{store: store, subresource: "start"},
		Stop:     &LifecycleREST{store: store, subresource: "stop"},
		Log:      &LogREST{instances: store, pods: opts.Pods},
	}, nil
}

var _ rest.ShortNamesProvider = &REST{}
var _ rest.CategoriesProvider = &REST{}

// ShortNames lets kubectl resolve "inst".
func (r *REST) ShortNames() []string { return []string{"inst"} }

// Categories puts Instances in "kubectl get gpu".
func (r *REST) Categories() []string { return []string{"gpu"} }

// Delete deletes an Instance without losing the finalizer kiln-controller
// may be adding at that moment (package finalized).
func (r *REST) Delete(ctx context.Context, name string, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	return finalized.Delete(ctx, r.Store, name, validate, options)
}

// DeleteCollection deletes Instances one by one through Delete.
func (r *REST) DeleteCollection(ctx context.Context, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	return finalized.DeleteCollection(ctx, r.Store, validate, options, listOptions)
}
