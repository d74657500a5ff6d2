// Package finalized deletes objects that kiln-controller gives a
// finalizer after they are created (Instances and Claims) without losing a
// finalizer added at the same moment.
//
// The generic store decides on finalizers from the object as it read it
// at the start of a DELETE, and removes an object that had none with no
// condition on its version. A controller that added its finalizer in
// between, and went on to make the object's Pod, saw that write succeed:
// the object was then gone at once, its Pod running on cards no Budget
// charged any more (test/install's rolling upgrade, 2026-12-06: a Claim's
// holder Pod made 6 ms after the tenant's DELETE of the Claim was read,
// beside another Claim's, under a Budget of one card). Here a delete of an
// object with no finalizer is pinned to the version read, and tried again
// from what is stored when that version has moved on.
package finalized

import (
	"context"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metainternalversion "k8s.io/apimachinery/pkg/apis/meta/internalversion"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	genericregistry "k8s.io/apiserver/pkg/registry/generic/registry"
	"k8s.io/apiserver/pkg/registry/rest"
)

// attempts bounds the retries of a delete whose object keeps changing.
const attempts = 5

// Delete deletes the object name from store as store.Delete does, but
// never removes at once an object that got a finalizer after it was read.
func Delete(ctx context.Context, store *genericregistry.Store, name string, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions) (runtime.Object, bool, error) {
	var err error
	for range attempts {
		var obj runtime.Object
		obj, err = store.Get(ctx, name, &metav1.GetOptions{})
		if err != nil {
			return nil, false, err
		}
		m, merr := meta.Accessor(obj)
		if merr != nil {
			return nil, false, apierrors.NewInternalError(merr)
		}
		// The caller's own resourceVersion precondition pins it already.
		pin := len(m.GetFinalizers()) == 0 && m.GetDeletionTimestamp() == nil &&
			(options == nil || options.Preconditions == nil || options.Preconditions.ResourceVersion == nil)
		pinned := options
		if pin {
			pinned = &metav1.DeleteOptions{}
			if options != nil {
				pinned = options.DeepCopy()
			}
			if pinned.Preconditions == nil {
				pinned.Preconditions = &metav1.Preconditions{}
			}
			rv := m.GetResourceVersion()
			pinned.Preconditions.ResourceVersion = &rv
		}
		var out runtime.Object
		var deleted bool
		out, deleted, err = store.Delete(ctx, name, validate, pinned)
		if !pin || !apierrors.IsConflict(err) {
			return out, deleted, err
		}
		// The object changed since it was read, or a precondition of the
		// caller's own failed: look again, and let the store decide on
		// what is stored now.
		now, gerr := store.Get(ctx, name, &metav1.GetOptions{})
		if gerr != nil {
			return nil, false, gerr
		}
		if nm, _ := meta.Accessor(now); nm == nil || nm.GetResourceVersion() == m.GetResourceVersion() {
			return out, deleted, err
		}
	}
	return nil, false, err
}

// DeleteCollection deletes what the list options select, one object at a
// time through Delete, and returns them as listed, as the generic store
// does. A limit in the options deletes one page, as there too.
func DeleteCollection(ctx context.Context, store *genericregistry.Store, validate rest.ValidateObjectFunc, options *metav1.DeleteOptions, listOptions *metainternalversion.ListOptions) (runtime.Object, error) {
	if listOptions == nil {
		listOptions = &metainternalversion.ListOptions{}
	} else {
		listOptions = listOptions.DeepCopy()
	}
	list, err := store.List(ctx, listOptions)
	if err != nil {
		return nil, err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return nil, err
	}
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return nil, err
		}
		var opts *metav1.DeleteOptions
		if options != nil {
			opts = options.DeepCopy()
		}
		// One deleted meanwhile is taken as done, as the generic store takes it.
		if _, _, err := Delete(ctx, store, m.GetName(), validate, opts); err != nil && !apierrors.IsNotFound(err) {
			return nil, err
		}
	}
	return list, nil
}
