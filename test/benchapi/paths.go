// Package benchapi measures Kiln's API against a CustomResourceDefinition of
// the same schema on one local control plane: the CRD served by
// kube-apiserver, Kiln through kube-apiserver's aggregator, and Kiln
// directly. `make bench-api` runs it (test/cmd/bench-api); it is not part of
// `make test`, and nothing here asserts a timing.
package benchapi

import (
	"fmt"
	"net/http"
	"net/url"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// CRDGroup is the group the generated CRD serves Kiln's Instance schema
// under, beside gpu.kiln.dev on the same kube-apiserver.
const CRDGroup = "gpu.bench.kiln.dev"

// Encoding is how a path's request bodies and responses are encoded.
type Encoding string

const (
	JSON     Encoding = "application/json"
	Protobuf Encoding = "application/vnd.kubernetes.protobuf"
)

// Path is one way to the same Instance-shaped resource.
type Path struct {
	// Name is "crd", "aggregated" or "direct", with "-json" for a JSON
	// client of a Kiln that serves protobuf.
	Name string
	// Client carries the credentials and TLS of Base.
	Client *http.Client
	// Base is the server's URL: kube-apiserver, or Kiln itself.
	Base      string
	Group     string
	Namespace string
	Encoding  Encoding
}

// Collection is the URL of the path's Instances in its namespace.
func (p *Path) Collection() string {
	return fmt.Sprintf("%s/apis/%s/v1alpha1/namespaces/%s/instances", p.Base, p.Group, p.Namespace)
}

// Item is the URL of one Instance.
func (p *Path) Item(name string) string { return p.Collection() + "/" + url.PathEscape(name) }

// Name of the i-th object; names sort in creation order.
func Name(i int) string { return fmt.Sprintf("b-%05d", i) }

// Types every object refers to: most objects use the first, one in ten the
// second, so a field selector on spec.type picks a tenth.
const (
	TypeName    = "bench"
	AltTypeName = "bench-alt"
)

// Object is the i-th Instance: a CPU-only Instance with a port, labelled
// with its shard (i mod 10), the shape of a typical tenant's Instance.
func Object(group string, i int) *gpuv1.Instance {
	typ := TypeName
	if i%10 == 7 {
		typ = AltTypeName
	}
	return &gpuv1.Instance{
		TypeMeta: metav1.TypeMeta{APIVersion: group + "/v1alpha1", Kind: "Instance"},
		ObjectMeta: metav1.ObjectMeta{
			Name:   Name(i),
			Labels: map[string]string{"app.kubernetes.io/name": "bench", "shard": fmt.Sprint(i % 10)},
		},
		Spec: gpuv1.InstanceSpec{
			Type:    typ,
			Image:   "registry.example/bench/notebook:1.0",
			Command: []string{"/bin/sh", "-c", "exec sleep infinity"},
			Env:     []corev1.EnvVar{{Name: "SHARD", Value: fmt.Sprint(i % 10)}},
			Resources: gpuv1.InstanceResources{
				Accelerators: ptr.To[int32](0),
			},
			Ports: []gpuv1.InstancePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}
}

// WithStatus is obj with a status a controller would write.
func WithStatus(obj *gpuv1.Instance, i int) *gpuv1.Instance {
	obj = obj.DeepCopy()
	obj.Status = gpuv1.InstanceStatus{
		Phase:   gpuv1.InstancePhase("Pending"),
		Message: fmt.Sprintf("waiting for a node (%d)", i),
	}
	return obj
}
