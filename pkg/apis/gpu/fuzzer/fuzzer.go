// Package fuzzer fills gpu.kiln.dev objects with random values that
// defaulting would not change, for the round-trip tests.
package fuzzer

import (
	runtimeserializer "k8s.io/apimachinery/pkg/runtime/serializer"
	"sigs.k8s.io/randfill"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// Funcs returns the fuzzer functions of the group.
var Funcs = func(codecs runtimeserializer.CodecFactory) []interface{} {
	return []interface{}{
		func(a *gpu.Accelerator, c randfill.Continue) {
			c.FillNoCustom(a)
			// Defaulting fills these; a round trip must see them set already.
			if a.MaxPerInstance == 0 {
				a.MaxPerInstance = 1
			}
			if a.Exclusive == nil && a.Sliced == nil && len(a.Partitions) == 0 {
				a.Exclusive = &gpu.ExclusiveSharing{}
			}
			if a.Exclusive != nil && a.Exclusive.ResourceName == "" {
				a.Exclusive.ResourceName = "example.com/gpu"
			}
			if a.Sliced != nil && a.Sliced.Isolation == "" {
				a.Sliced.Isolation = gpu.SliceIsolationHAMi
			}
			if a.Sliced != nil && a.Sliced.Isolation == gpu.SliceIsolationMPS && a.Sliced.ResourceName == "" {
				a.Sliced.ResourceName = "nvidia.com/gpu.shared"
			}
			if a.Vendor == "nvidia" {
				a.Vendor = "nvidia-fuzz"
			}
		},
		func(s *gpu.InstanceSpec, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.ImagePullPolicy == "" {
				s.ImagePullPolicy = "IfNotPresent"
			}
			if s.Workspace == nil {
				s.Workspace = &gpu.Workspace{MountPath: "/workspace"}
			}
			// core/v1 marks FileKeySelector.optional "+default=false".
			for i := range s.Env {
				if vf := s.Env[i].ValueFrom; vf != nil && vf.FileKeyRef != nil && vf.FileKeyRef.Optional == nil {
					vf.FileKeyRef.Optional = new(bool)
				}
			}
		},
		func(s *gpu.SliceRequest, c randfill.Continue) {
			c.FillNoCustom(s)
			if s.CoresPercent == 0 {
				s.CoresPercent = s.MemoryPercent
			}
		},
		func(w *gpu.Workspace, c randfill.Continue) {
			c.FillNoCustom(w)
			if w.MountPath == "" {
				w.MountPath = "/workspace"
			}
		},
		func(p *gpu.InstancePort, c randfill.Continue) {
			c.FillNoCustom(p)
			if p.Protocol == "" {
				p.Protocol = "TCP"
			}
		},
	}
}
