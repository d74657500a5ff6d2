// Package instancechange tells Kiln's admission plugins which Instance a
// request stores and which one it replaces, whether the request is a create
// or update of instances or a POST to instances/start or instances/stop.
//
// A start or stop is admitted as what it is, a CREATE of the subresource,
// by the handler's own chain; what it stores is the Instance with
// spec.stopped set. So that plugins size, check and charge it exactly like
// an update that sets spec.stopped, the two phases see that Instance:
//
//   - Mutating: the first call of Of replaces the posted body (whose content
//     is ignored, and whose UID the handler has wiped) with the stored
//     Instance as the request changes it, read with get. Mutating plugins
//     change that body; the registry stores it if the Instance has not
//     changed since (else 409).
//   - Validating: the registry runs the handler's validation inside its
//     update, passing the new Instance as the object and the stored one in
//     the context (WithStored).
package instancechange

import (
	"context"
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// Subresources that change spec.stopped, and what they set it to.
var lifecycle = map[string]bool{"start": false, "stop": true}

// Getter reads a stored Instance, consistently.
type Getter func(ctx context.Context, namespace, name string) (*gpu.Instance, error)

// Lifecycle is stored as a start or stop would store it: a copy with
// spec.stopped set.
func Lifecycle(stored *gpu.Instance, subresource string) *gpu.Instance {
	inst := stored.DeepCopy()
	inst.Spec.Stopped = lifecycle[subresource]
	return inst
}

type storedKey struct{}

// WithStored returns ctx carrying the stored Instance a start or stop
// replaces, for the validating phase.
func WithStored(ctx context.Context, stored *gpu.Instance) context.Context {
	return context.WithValue(ctx, storedKey{}, stored)
}

// reinvocationKey keeps, across the mutating plugins of one request, the
// stored Instance the body was filled from.
const reinvocationKey = "kiln.dev/instancechange"

// Of returns the Instance the request stores and the one it replaces (nil
// on a create). It returns nil, nil for requests that store no Instance
// spec: /status, instances/log, other resources. get is needed only by
// mutating plugins, which see a start or stop first.
func Of(ctx context.Context, a admission.Attributes, get Getter) (inst, old *gpu.Instance, err error) {
	if a.GetResource().GroupResource() != gpu.Resource("instances") {
		return nil, nil, nil
	}
	if a.GetSubresource() == "" {
		inst, ok := a.GetObject().(*gpu.Instance)
		if !ok {
			return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("instances: unexpected object %T", a.GetObject()))
		}
		if a.GetOperation() == admission.Update {
			old, _ = a.GetOldObject().(*gpu.Instance)
		}
		return inst, old, nil
	}
	if _, ok := lifecycle[a.GetSubresource()]; !ok {
		return nil, nil, nil
	}
	body, ok := a.GetObject().(*gpu.Instance)
	if !ok {
		return nil, nil, apierrors.NewBadRequest(fmt.Sprintf("instances/%s: unexpected object %T", a.GetSubresource(), a.GetObject()))
	}
	if stored, ok := ctx.Value(storedKey{}).(*gpu.Instance); ok {
		return body, stored, nil
	}
	if stored, ok := a.GetReinvocationContext().Value(reinvocationKey).(*gpu.Instance); ok {
		return body, stored, nil
	}
	if get == nil {
		return nil, nil, apierrors.NewInternalError(fmt.Errorf("instances/%s of %s/%s: the stored Instance was not passed to admission", a.GetSubresource(), a.GetNamespace(), a.GetName()))
	}
	stored, err := get(ctx, a.GetNamespace(), a.GetName())
	if err != nil {
		return nil, nil, err
	}
	*body = *Lifecycle(stored, a.GetSubresource())
	a.GetReinvocationContext().SetValue(reinvocationKey, stored)
	return body, stored, nil
}

// ClientGetter reads Instances through the server's loopback client.
func ClientGetter(c versioned.Interface) Getter {
	return func(ctx context.Context, namespace, name string) (*gpu.Instance, error) {
		stored, err := c.GpuV1alpha1().Instances(namespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return nil, err
		}
		inst := &gpu.Instance{}
		if err := v1alpha1.Convert_v1alpha1_Instance_To_gpu_Instance(stored, inst, nil); err != nil {
			return nil, apierrors.NewInternalError(fmt.Errorf("reading instance %s/%s: %w", namespace, name, err))
		}
		return inst, nil
	}
}
