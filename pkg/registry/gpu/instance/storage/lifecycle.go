package storage

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/rest"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/domain/instancechange"
)

// LifecycleREST serves instances/start and instances/stop. A POST, whose
// body is ignored ("{}" will do), sets spec.stopped and answers 201 with
// the updated Instance, as any create does. Being subresources, they are
// granted apart from "update instances": verb create on instances/start.
//
// The handler's chain admits the POST as a CREATE of the subresource, and
// Kiln's plugins read it through instancechange as the update it is: the
// mutating phase fills the body with the stored Instance as the request
// changes it, and the validating phase runs here, inside the update, with
// the stored Instance beside the new one. So a start is sized, checked
// against its type and charged as `kubectl patch --type=merge -p
// '{"spec":{"stopped":false}}'` would be, by the requesting user. A write
// of the spec between admission and storage is a conflict (409); one of
// status or metadata alone is kept. Managed fields are not updated: there
// is no field manager of the main resource here.
type LifecycleREST struct {
	store rest.Updater
	// subresource is "start" or "stop".
	subresource string
}

var _ rest.NamedCreater = &LifecycleREST{}

// New returns an Instance: the body posted is decoded as one.
func (r *LifecycleREST) New() runtime.Object { return &gpu.Instance{} }

// Destroy is a no-op: the main store owns the storage backend.
func (r *LifecycleREST) Destroy() {}

// Create sets spec.stopped of the Instance name. Already so, it stores
// nothing and returns the Instance unchanged.
func (r *LifecycleREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	body, ok := obj.(*gpu.Instance)
	if !ok {
		return nil, apierrors.NewBadRequest(fmt.Sprintf("instances/%s: unexpected object %T", r.subresource, obj))
	}
	validate := func(ctx context.Context, obj, old runtime.Object) error {
		if createValidation == nil {
			return nil
		}
		return createValidation(instancechange.WithStored(ctx, old.(*gpu.Instance)), obj)
	}
	updateOptions := &metav1.UpdateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager}
	out, _, err := r.store.Update(ctx, name, lifecycleUpdate{subresource: r.subresource, body: body},
		// Never called: Instances are not created by an update.
		nil, validate, false, updateOptions)
	return out, err
}

// lifecycleUpdate is the update: the body as admission filled and mutated
// it, or, when no plugin did, the stored Instance with spec.stopped set.
type lifecycleUpdate struct {
	subresource string
	body        *gpu.Instance
}

func (u lifecycleUpdate) Preconditions() *metav1.Preconditions { return nil }

func (u lifecycleUpdate) UpdatedObject(_ context.Context, oldObj runtime.Object) (runtime.Object, error) {
	old, ok := oldObj.(*gpu.Instance)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", oldObj)
	}
	desired := instancechange.Lifecycle(old, u.subresource)
	if !desired.Spec.Stopped && old.Spec.Stopped && old.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(gpu.Resource("instances"), old.Name,
			fmt.Errorf("instance %s/%s is being deleted and cannot be started", old.Namespace, old.Name))
	}
	// The handler wipes a posted UID: a body with one was filled by
	// admission from the stored Instance.
	if u.body.UID == "" {
		return desired, nil
	}
	if u.body.UID != old.UID || u.body.Generation != old.Generation {
		return nil, apierrors.NewConflict(gpu.Resource("instances"), old.Name,
			fmt.Errorf("the spec of instance %s/%s changed while its %s was admitted; try again", old.Namespace, old.Name, u.subresource))
	}
	if u.body.ResourceVersion == old.ResourceVersion {
		return u.body.DeepCopy(), nil
	}
	// Only status or metadata moved since admission read the Instance (the
	// controller writes status all the time): keep them, and take what
	// admission decided, the spec and the record of what it sized.
	desired = old.DeepCopy()
	desired.Spec = *u.body.Spec.DeepCopy()
	if v, ok := u.body.Annotations[gpu.SizedResourcesAnnotation]; ok {
		metav1.SetMetaDataAnnotation(&desired.ObjectMeta, gpu.SizedResourcesAnnotation, v)
	} else {
		delete(desired.Annotations, gpu.SizedResourcesAnnotation)
	}
	return desired, nil
}
