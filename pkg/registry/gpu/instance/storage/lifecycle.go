package storage

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	genericapirequest "k8s.io/apiserver/pkg/endpoints/request"
	"k8s.io/apiserver/pkg/registry/rest"
	"k8s.io/apiserver/pkg/util/dryrun"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// LifecycleREST serves instances/start and instances/stop. A POST, whose
// body is ignored ("{}" will do), sets spec.stopped and answers 201 with
// the updated Instance, as any create does. Being subresources, they are
// granted apart from "update instances": verb create on instances/start.
//
// The write goes through admission as an update of the Instance itself
// (resource instances, no subresource), old and new as stored, so that a
// start is sized, checked against its type and charged as
// `kubectl patch --type=merge -p '{"spec":{"stopped":false}}'` would be,
// by the requesting user. The handler's own chain, a CREATE of
// instances/start on the posted body, runs too but sees no Instance worth
// admitting: Kiln's plugins skip subresources. Managed fields are not
// updated: there is no field manager of the main resource here.
type LifecycleREST struct {
	store   rest.Updater
	stopped bool
	admit   admission.Interface
	objects admission.ObjectInterfaces
}

var _ rest.NamedCreater = &LifecycleREST{}

// New returns an Instance: the body posted is decoded as one.
func (r *LifecycleREST) New() runtime.Object { return &gpu.Instance{} }

// Destroy is a no-op: the main store owns the storage backend.
func (r *LifecycleREST) Destroy() {}

// Create sets spec.stopped of the Instance name. Already so, it stores
// nothing and returns the Instance unchanged.
func (r *LifecycleREST) Create(ctx context.Context, name string, obj runtime.Object, createValidation rest.ValidateObjectFunc, options *metav1.CreateOptions) (runtime.Object, error) {
	if createValidation != nil {
		if err := createValidation(ctx, obj); err != nil {
			return nil, err
		}
	}
	updateOptions := &metav1.UpdateOptions{DryRun: options.DryRun, FieldManager: options.FieldManager}
	static := r.attributes(ctx, name, updateOptions)
	// Audited as the request's, like the handlers' own chain.
	admit := admission.WithAudit(r.admit)
	out, _, err := r.store.Update(ctx, name,
		setStopped{stopped: r.stopped, admit: r.mutate(admit, static)},
		// Never called: Instances are not created by an update.
		nil,
		rest.AdmissionToValidateObjectUpdateFunc(admit, static, r.objects),
		false, updateOptions)
	return out, err
}

// attributes describe the write as an update of the Instance; the objects
// are added once read.
func (r *LifecycleREST) attributes(ctx context.Context, name string, options *metav1.UpdateOptions) admission.Attributes {
	gv := v1alpha1.SchemeGroupVersion
	if info, ok := genericapirequest.RequestInfoFrom(ctx); ok && info.APIVersion != "" {
		gv.Version = info.APIVersion
	}
	user, _ := genericapirequest.UserFrom(ctx)
	return admission.NewAttributesRecord(nil, nil, gv.WithKind("Instance"), genericapirequest.NamespaceValue(ctx), name,
		gv.WithResource("instances"), "", admission.Update, options, dryrun.IsDryRun(options.DryRun), user)
}

// mutate runs the mutating chain on the new Instance, as the update
// handler does before the strategy.
func (r *LifecycleREST) mutate(admit admission.Interface, static admission.Attributes) func(context.Context, *gpu.Instance, *gpu.Instance) error {
	m, ok := admit.(admission.MutationInterface)
	if !ok || !m.Handles(admission.Update) {
		return func(context.Context, *gpu.Instance, *gpu.Instance) error { return nil }
	}
	return func(ctx context.Context, obj, old *gpu.Instance) error {
		return m.Admit(ctx, admission.NewAttributesRecord(obj, old, static.GetKind(), static.GetNamespace(), static.GetName(),
			static.GetResource(), "", admission.Update, static.GetOperationOptions(), static.IsDryRun(), static.GetUserInfo()), r.objects)
	}
}

// setStopped is the update: the stored Instance with spec.stopped set,
// mutated by admission.
type setStopped struct {
	stopped bool
	admit   func(ctx context.Context, obj, old *gpu.Instance) error
}

func (s setStopped) Preconditions() *metav1.Preconditions { return nil }

func (s setStopped) UpdatedObject(ctx context.Context, oldObj runtime.Object) (runtime.Object, error) {
	old, ok := oldObj.(*gpu.Instance)
	if !ok {
		return nil, fmt.Errorf("unexpected object %T", oldObj)
	}
	if !s.stopped && old.Spec.Stopped && old.DeletionTimestamp != nil {
		return nil, apierrors.NewConflict(gpu.Resource("instances"), old.Name,
			fmt.Errorf("instance %s/%s is being deleted and cannot be started", old.Namespace, old.Name))
	}
	inst := old.DeepCopy()
	inst.Spec.Stopped = s.stopped
	if err := s.admit(ctx, inst, old); err != nil {
		return nil, err
	}
	return inst, nil
}
