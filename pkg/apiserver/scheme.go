package apiserver

import (
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"

	"kiln.dev/kiln/pkg/apis/gpu/install"
)

var (
	// Scheme holds the internal and versioned types of gpu.kiln.dev.
	Scheme = runtime.NewScheme()
	// Codecs encodes and decodes objects of Scheme: JSON, YAML and
	// protobuf, to clients and to etcd.
	Codecs = serializer.NewCodecFactory(Scheme)
	// ParameterCodec decodes query parameters into options of Scheme.
	ParameterCodec = runtime.NewParameterCodec(Scheme)
)

func init() {
	install.Install(Scheme)

	// Options like ListOptions and DeleteOptions are decoded as meta/v1
	// whatever the group, and Status is served unversioned.
	metav1.AddToGroupVersion(Scheme, schema.GroupVersion{Version: "v1"})
	unversioned := schema.GroupVersion{Group: "", Version: "v1"}
	Scheme.AddUnversionedTypes(unversioned,
		&metav1.Status{},
		&metav1.APIVersions{},
		&metav1.APIGroupList{},
		&metav1.APIGroup{},
		&metav1.APIResourceList{},
	)
}
