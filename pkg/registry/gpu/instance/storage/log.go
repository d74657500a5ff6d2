package storage

import (
	"context"
	"errors"
	"fmt"
	"io"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apiserver/pkg/registry/rest"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
)

// LogREST serves instances/log, modelled on pods/log: the log of the
// Instance's Pod (same namespace and name, controlled by the Instance),
// read through kube-apiserver with the Kiln API server's own credentials,
// so a tenant needs "get" on instances/log and nothing on Pods.
type LogREST struct {
	instances rest.Getter
	// pods is nil without a cluster (standalone mode): every request then
	// answers 503, and the subresource stays in discovery.
	pods corev1client.PodsGetter
}

var (
	_ rest.GetterWithOptions = &LogREST{}
	_ rest.StorageMetadata   = &LogREST{}
)

// New returns an Instance, the kind discovery names for instances/log.
func (r *LogREST) New() runtime.Object { return &gpu.Instance{} }

// Destroy is a no-op: the main store owns the storage backend.
func (r *LogREST) Destroy() {}

// NewGetOptions returns the options the query decodes into.
func (r *LogREST) NewGetOptions() (runtime.Object, bool, string) {
	return &gpu.InstanceLogOptions{}, false, ""
}

// ProducesMIMETypes adds text/plain to what OpenAPI says the log returns.
func (r *LogREST) ProducesMIMETypes(verb string) []string { return []string{"text/plain"} }

// ProducesObject says the log is a string, not an Instance.
func (r *LogREST) ProducesObject(verb string) interface{} { return "" }

// Get checks the Instance and its Pod and returns a stream of the log,
// opened when the response is written.
func (r *LogREST) Get(ctx context.Context, name string, opts runtime.Object) (runtime.Object, error) {
	logOpts, ok := opts.(*gpu.InstanceLogOptions)
	if !ok {
		return nil, fmt.Errorf("invalid options object: %#v", opts)
	}
	if errs := validation.ValidateInstanceLogOptions(logOpts); len(errs) > 0 {
		return nil, apierrors.NewInvalid(gpu.Kind("InstanceLogOptions"), name, errs)
	}
	obj, err := r.instances.Get(ctx, name, &metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	inst := obj.(*gpu.Instance)
	if r.pods == nil {
		return nil, apierrors.NewServiceUnavailable(fmt.Sprintf(
			"instance %s/%s: logs need cluster mode; this Kiln API server is standalone and runs no Pods", inst.Namespace, inst.Name))
	}
	pods := r.pods.Pods(inst.Namespace)
	pod, err := pods.Get(ctx, inst.Name, metav1.GetOptions{})
	if err != nil {
		return nil, clusterError(inst, err)
	}
	// A Pod of the same name that the Instance does not control is someone
	// else's: its log is not the tenant's to read through Kiln.
	if !metav1.IsControlledBy(pod, inst) {
		return nil, noPod(inst)
	}
	podOpts := podLogOptions(logOpts)
	return &logStream{
		flush: logOpts.Follow,
		open: func(ctx context.Context) (io.ReadCloser, error) {
			// The request's context: the stream from kube-apiserver ends
			// when the client goes away.
			rc, err := pods.GetLogs(inst.Name, podOpts).Stream(ctx)
			if err != nil {
				return nil, clusterError(inst, err)
			}
			return rc, nil
		},
	}, nil
}

func podLogOptions(o *gpu.InstanceLogOptions) *corev1.PodLogOptions {
	container := o.Container
	if container == "" {
		container = gpu.InstanceMainContainer
	}
	return &corev1.PodLogOptions{
		Container:    container,
		Follow:       o.Follow,
		Previous:     o.Previous,
		SinceSeconds: o.SinceSeconds,
		Timestamps:   o.Timestamps,
		TailLines:    o.TailLines,
		LimitBytes:   o.LimitBytes,
	}
}

// noPod is the answer for an Instance without a Pod of its own.
func noPod(inst *gpu.Instance) error {
	if inst.Spec.Stopped {
		return apierrors.NewBadRequest(fmt.Sprintf(
			"instance %s/%s is stopped (spec.stopped is true) and has no pod to read a log from; start it with: kubectl gpu start %s -n %s --wait (or POST {} to its instances/start subresource)",
			inst.Namespace, inst.Name, inst.Name, inst.Namespace))
	}
	return apierrors.NewBadRequest(fmt.Sprintf(
		"instance %s/%s has no pod yet: the controller creates it after a start; try again shortly (kubectl get instance %s -n %s shows its phase)",
		inst.Namespace, inst.Name, inst.Name, inst.Namespace))
}

// clusterError turns what kube-apiserver answered into what the tenant
// should see: the cluster refusing Kiln's own credentials is Kiln's
// misconfiguration, not the tenant's lack of permission.
func clusterError(inst *gpu.Instance, err error) error {
	var status apierrors.APIStatus
	switch {
	case apierrors.IsNotFound(err):
		return noPod(inst)
	case apierrors.IsUnauthorized(err) || apierrors.IsForbidden(err):
		return apierrors.NewInternalError(fmt.Errorf(
			"reading the pod of instance %s/%s: the cluster refused the Kiln API server (%v); its ServiceAccount needs get on pods and pods/log, see artifacts/rbac/apiserver.yaml",
			inst.Namespace, inst.Name, err))
	case errors.As(err, &status) && status.Status().Code < 500:
		// Such as 400 for a container still waiting to start.
		s := status.Status()
		s.Message = fmt.Sprintf("instance %s/%s: %s", inst.Namespace, inst.Name, s.Message)
		s.Details = nil
		return &apierrors.StatusError{ErrStatus: s}
	default:
		return apierrors.NewInternalError(fmt.Errorf("reading the log of instance %s/%s from the cluster: %w", inst.Namespace, inst.Name, err))
	}
}

// logStream is the rest.ResourceStreamer of one log request.
type logStream struct {
	flush bool
	open  func(ctx context.Context) (io.ReadCloser, error)
}

var _ rest.ResourceStreamer = &logStream{}

func (s *logStream) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (s *logStream) DeepCopyObject() runtime.Object {
	c := *s
	return &c
}

// InputStream opens the log; with follow it is flushed as it arrives.
func (s *logStream) InputStream(ctx context.Context, apiVersion, acceptHeader string) (io.ReadCloser, bool, string, error) {
	rc, err := s.open(ctx)
	if err != nil {
		return nil, false, "", err
	}
	return rc, s.flush, "text/plain", nil
}
