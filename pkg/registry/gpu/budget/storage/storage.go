// Package storage builds the etcd-backed REST storage of Budgets.
package storage

import (
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/budget"
	"kiln.dev/kiln/pkg/registry/gpu/status"
)

// REST is the storage of the budgets resource.
type REST struct {
	*genericregistry.Store
}

// BudgetStorage groups the storage of the resource and its subresources.
type BudgetStorage struct {
	Budget *REST
	Status *status.REST
}

// NewStorage returns the storage of budgets and budgets/status.
func NewStorage(scheme *runtime.Scheme, optsGetter generic.RESTOptionsGetter) (BudgetStorage, error) {
	strategy := budget.NewStrategy(scheme)
	store := &genericregistry.Store{
		NewFunc:                   func() runtime.Object { return &gpu.Budget{} },
		NewListFunc:               func() runtime.Object { return &gpu.BudgetList{} },
		PredicateFunc:             budget.Fields.Matcher,
		DefaultQualifiedResource:  gpu.Resource("budgets"),
		SingularQualifiedResource: gpu.Resource("budget"),

		CreateStrategy:      strategy,
		UpdateStrategy:      strategy,
		DeleteStrategy:      strategy,
		ResetFieldsStrategy: strategy,

		TableConvertor: budget.TableConvertor,
	}
	options := &generic.StoreOptions{RESTOptions: optsGetter, AttrFunc: budget.Fields.GetAttrs, Indexers: budget.Fields.Indexers()}
	if err := store.CompleteWithOptions(options); err != nil {
		return BudgetStorage{}, err
	}

	return BudgetStorage{
		Budget: &REST{store},
		Status: status.NewREST(store, budget.NewStatusStrategy(strategy)),
	}, nil
}

var _ rest.CategoriesProvider = &REST{}

// Categories puts Budgets in "kubectl get gpu".
func (r *REST) Categories() []string { return []string{"gpu"} }
