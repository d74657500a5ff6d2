// +k8s:deepcopy-gen=package
// +groupName=gpu.kiln.dev

// Package gpu is the internal version of the gpu.kiln.dev API.
package gpu
