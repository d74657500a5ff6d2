package storage

import (
	"context"
	"errors"
	"io"
	"net/http"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/registry/rest"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// instanceGetter serves Instances from a map, as the store would.
type instanceGetter map[string]*gpu.Instance

func (g instanceGetter) Get(_ context.Context, name string, _ *metav1.GetOptions) (runtime.Object, error) {
	if i, ok := g[name]; ok {
		return i.DeepCopy(), nil
	}
	return nil, apierrors.NewNotFound(gpu.Resource("instances"), name)
}

func podOf(inst *gpu.Instance, controller bool) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: inst.Name, Namespace: inst.Namespace,
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "gpu.kiln.dev/v1alpha1", Kind: "Instance", Name: inst.Name, UID: inst.UID, Controller: ptr.To(controller)}}}}
}

func TestLogGet(t *testing.T) {
	meta := func(name string) metav1.ObjectMeta {
		return metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name)}
	}
	running := &gpu.Instance{ObjectMeta: meta("train")}
	stopped := &gpu.Instance{ObjectMeta: meta("parked"), Spec: gpu.InstanceSpec{Stopped: true}}
	starting := &gpu.Instance{ObjectMeta: meta("starting")}
	squatted := &gpu.Instance{ObjectMeta: meta("squatted")}
	instances := instanceGetter{"train": running, "parked": stopped, "starting": starting, "squatted": squatted}
	pods := []runtime.Object{podOf(running, true), podOf(squatted, false)}

	cases := []struct {
		name       string
		instance   string
		opts       gpu.InstanceLogOptions
		standalone bool
		// podsErr is what kube-apiserver answers a read of the Pod.
		podsErr  error
		wantOpts *corev1.PodLogOptions
		wantCode int32
		wantErr  string
	}{
		{name: "defaults to the main container", instance: "train",
			wantOpts: &corev1.PodLogOptions{Container: "main"}},
		{name: "every option", instance: "train",
			opts: gpu.InstanceLogOptions{Container: "ssh", Follow: true, Previous: true, Timestamps: true,
				SinceSeconds: ptr.To[int64](10), TailLines: ptr.To[int64](20), LimitBytes: ptr.To[int64](30)},
			wantOpts: &corev1.PodLogOptions{Container: "ssh", Follow: true, Previous: true, Timestamps: true,
				SinceSeconds: ptr.To[int64](10), TailLines: ptr.To[int64](20), LimitBytes: ptr.To[int64](30)}},
		{name: "invalid options", instance: "train", opts: gpu.InstanceLogOptions{TailLines: ptr.To[int64](-1)},
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `InstanceLogOptions.gpu.kiln.dev "train" is invalid: tailLines: Invalid value: -1: must be 0 or more`},
		{name: "missing Instance", instance: "nonesuch",
			wantCode: http.StatusNotFound, wantErr: `instances.gpu.kiln.dev "nonesuch" not found`},
		{name: "standalone", instance: "train", standalone: true,
			wantCode: http.StatusServiceUnavailable,
			wantErr:  "instance team-a/train: logs need cluster mode; this Kiln API server is standalone and runs no Pods"},
		{name: "stopped", instance: "parked",
			wantCode: http.StatusBadRequest,
			wantErr:  `instance team-a/parked is stopped (spec.stopped is true) and has no pod to read a log from; start it with: kubectl gpu start parked -n team-a --wait (or POST {} to its instances/start subresource)`},
		{name: "no pod yet", instance: "starting",
			wantCode: http.StatusBadRequest,
			wantErr:  "instance team-a/starting has no pod yet: the controller creates it after a start; try again shortly (kubectl get instance starting -n team-a shows its phase)"},
		{name: "a pod of the name the Instance does not control", instance: "squatted",
			wantCode: http.StatusBadRequest,
			wantErr:  "instance team-a/squatted has no pod yet: the controller creates it after a start; try again shortly (kubectl get instance squatted -n team-a shows its phase)"},
		{name: "the cluster refuses Kiln", instance: "train",
			podsErr:  apierrors.NewForbidden(corev1.Resource("pods"), "train", errors.New("RBAC")),
			wantCode: http.StatusInternalServerError,
			wantErr:  `Internal error occurred: reading the pod of instance team-a/train: the cluster refused the Kiln API server (pods "train" is forbidden: RBAC); its ServiceAccount needs get on pods and pods/log, see artifacts/rbac/apiserver.yaml`},
		{name: "the cluster's other 4xx are passed on, for the Instance", instance: "train",
			podsErr:  apierrors.NewBadRequest(`container "main" in pod "train" is waiting to start: ContainerCreating`),
			wantCode: http.StatusBadRequest,
			wantErr:  `instance team-a/train: container "main" in pod "train" is waiting to start: ContainerCreating`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			kube := kubefake.NewClientset(pods...)
			if tc.podsErr != nil {
				kube.PrependReactor("get", "pods", func(clienttesting.Action) (bool, runtime.Object, error) {
					return true, nil, tc.podsErr
				})
			}
			r := &LogREST{instances: instances, pods: kube.CoreV1()}
			if tc.standalone {
				r.pods = nil
			}
			opts := tc.opts
			obj, err := r.Get(context.Background(), tc.instance, &opts)
			if tc.wantErr != "" {
				var status apierrors.APIStatus
				if !errors.As(err, &status) || status.Status().Code != tc.wantCode || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %d %q", err, tc.wantCode, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			stream, flush, contentType, err := obj.(rest.ResourceStreamer).InputStream(context.Background(), "v1alpha1", "*/*")
			if err != nil {
				t.Fatal(err)
			}
			defer stream.Close()
			body, _ := io.ReadAll(stream)
			if string(body) != "fake logs" || contentType != "text/plain" || flush != tc.opts.Follow {
				t.Errorf("stream %q, content type %q, flush %v", body, contentType, flush)
			}
			var got *corev1.PodLogOptions
			for _, a := range kube.Actions() {
				if a.GetSubresource() == "log" {
					got, _ = a.(clienttesting.GenericAction).GetValue().(*corev1.PodLogOptions)
				}
			}
			if !apiequality.Semantic.DeepEqual(got, tc.wantOpts) {
				t.Errorf("pod log options %+v, want %+v", got, tc.wantOpts)
			}
		})
	}
}
