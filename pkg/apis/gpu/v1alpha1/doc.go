// +k8s:openapi-gen=true
// +k8s:deepcopy-gen=package
// +k8s:protobuf-gen=package
// +k8s:conversion-gen=kiln.dev/kiln/pkg/apis/gpu
// +k8s:defaulter-gen=TypeMeta
// +groupName=gpu.kiln.dev
// +k8s:openapi-model-package=dev.kiln.gpu.v1alpha1

// Package v1alpha1 is the v1alpha1 version of the gpu.kiln.dev API.
package v1alpha1
