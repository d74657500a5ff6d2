package v1alpha1

import "strings"

// runtimeEnv are the environment variables that decide, outside the
// device plugin, which accelerators a container gets and how much of
// them: a container runtime hook or a GPU sharing layer on the node reads
// them. An Instance's spec.env is rendered after what the device plugin
// sets, so a tenant who set one of these would override the allocation
// Kiln charged (NVIDIA_VISIBLE_DEVICES=all on a one-slice Instance asks
// the toolkit for every card of the node). A name ending in "_" is a
// prefix.
var runtimeEnv = []struct{ name, reader string }{
	{"NVIDIA_", "NVIDIA's container toolkit (NVIDIA_VISIBLE_DEVICES picks the cards, NVIDIA_DRIVER_CAPABILITIES and NVIDIA_MIG_* what of them)"},
	{"AMD_VISIBLE_DEVICES", "AMD's container toolkit, which picks the cards by it"},
	{"CUDA_MPS_", "CUDA MPS, whose memory limit and thread percentage are a shared card's share"},
	{"CUDA_DEVICE_MEMORY_", "GPU sharing layers (HAMi) that limit a slice's memory by it"},
	{"CUDA_DEVICE_SM_LIMIT", "GPU sharing layers (HAMi) that limit a slice's compute by it"},
	{"CUDA_OVERSUBSCRIBE", "GPU sharing layers (HAMi) that let a slice exceed its memory by it"},
	{"LD_PRELOAD", "the dynamic loader; sharing layers interpose the CUDA driver through it"},
}

// RuntimeEnvReader says whether an environment variable of that name is one
// a container runtime or GPU sharing layer reads to hand out or limit
// accelerators, and what reads it. Instances may not set these; the Pod
// policy refuses them on Pods Kiln did not make.
func RuntimeEnvReader(name string) (reader string, reserved bool) {
	for _, e := range runtimeEnv {
		if name == e.name || (strings.HasSuffix(e.name, "_") && strings.HasPrefix(name, e.name)) {
			return e.reader, true
		}
	}
	return "", false
}

// RuntimeEnvNames lists the reserved names; one ending in "_" is a prefix.
// The Pod policy of artifacts/policy carries the same list.
func RuntimeEnvNames() []string {
	names := make([]string, len(runtimeEnv))
	for i, e := range runtimeEnv {
		names[i] = e.name
	}
	return names
}
