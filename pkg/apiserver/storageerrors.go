package apiserver

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/apiserver/pkg/storage/storagebackend"
	"k8s.io/apiserver/pkg/storage/storagebackend/factory"
	"k8s.io/client-go/tools/cache"
)

// clientErrorsOptions wraps every resource's storage in clientErrors.
type clientErrorsOptions struct{ generic.RESTOptionsGetter }

func (o clientErrorsOptions) GetRESTOptions(resource schema.GroupResource, example runtime.Object) (generic.RESTOptions, error) {
	opts, err := o.RESTOptionsGetter.GetRESTOptions(resource, example)
	if err != nil {
		return opts, err
	}
	decorate := opts.Decorator
	if decorate == nil {
		decorate = generic.UndecoratedStorage
	}
	opts.Decorator = func(config *storagebackend.ConfigForResource, prefix string, keyFunc func(runtime.Object) (string, error),
		newFunc, newListFunc func() runtime.Object, getAttrs storage.AttrFunc, trigger storage.IndexerFuncs, indexers *cache.Indexers,
	) (storage.Interface, factory.DestroyFunc, error) {
		s, destroy, err := decorate(config, prefix, keyFunc, newFunc, newListFunc, getAttrs, trigger, indexers)
		if err != nil {
			return nil, nil, err
		}
		return clientErrors{s}, destroy, nil
	}
	return opts, nil
}

// clientErrors answers a list or watch whose resourceVersion does not
// parse (?watch=1&resourceVersion=abc) with 400 naming the parameter. The
// storage reports it as a storage.InvalidError, which the generic registry
// passes on as it is and the handler turns into a 500.
type clientErrors struct{ storage.Interface }

func (s clientErrors) Watch(ctx context.Context, key string, opts storage.ListOptions) (watch.Interface, error) {
	w, err := s.Interface.Watch(ctx, key, opts)
	return w, badRequest(err)
}

func (s clientErrors) GetList(ctx context.Context, key string, opts storage.ListOptions, listObj runtime.Object) error {
	return badRequest(s.Interface.GetList(ctx, key, opts, listObj))
}

func (s clientErrors) Get(ctx context.Context, key string, opts storage.GetOptions, objPtr runtime.Object) error {
	return badRequest(s.Interface.Get(ctx, key, opts, objPtr))
}

func badRequest(err error) error {
	if err != nil && storage.IsInvalidError(err) {
		return apierrors.NewBadRequest(err.Error())
	}
	return err
}
