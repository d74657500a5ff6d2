package pool

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/utils/ptr"
)

// PodRequest must read each resource as PodRequests does.
func TestPodRequest(t *testing.T) {
	const gpu corev1.ResourceName = "nvidia.com/gpu"
	list := func(kv ...string) corev1.ResourceList {
		l := corev1.ResourceList{}
		for i := 0; i < len(kv); i += 2 {
			l[corev1.ResourceName(kv[i])] = resource.MustParse(kv[i+1])
		}
		return l
	}
	container := func(req, lim corev1.ResourceList) corev1.Container {
		return corev1.Container{Resources: corev1.ResourceRequirements{Requests: req, Limits: lim}}
	}
	sidecar := func(c corev1.Container) corev1.Container {
		c.RestartPolicy = ptr.To(corev1.ContainerRestartPolicyAlways)
		return c
	}
	for _, tc := range []struct {
		name string
		spec corev1.PodSpec
	}{
		{"no requests", corev1.PodSpec{Containers: []corev1.Container{{}}}},
		{"containers add up", corev1.PodSpec{Containers: []corev1.Container{
			container(list("nvidia.com/gpu", "2", "cpu", "500m"), nil), container(list("nvidia.com/gpu", "1", "cpu", "1"), nil)}}},
		{"a limit stands in for a request", corev1.PodSpec{Containers: []corev1.Container{container(nil, list("nvidia.com/gpu", "3", "memory", "1Gi"))}}},
		{"a request wins over its limit", corev1.PodSpec{Containers: []corev1.Container{container(list("cpu", "250m"), list("cpu", "2"))}}},
		{"an init container larger than the rest", corev1.PodSpec{
			InitContainers: []corev1.Container{container(list("nvidia.com/gpu", "4"), nil)},
			Containers:     []corev1.Container{container(list("nvidia.com/gpu", "1"), nil)}}},
		{"sidecars run beside what follows", corev1.PodSpec{
			InitContainers: []corev1.Container{
				sidecar(container(list("nvidia.com/gpu", "1", "cpu", "100m"), nil)),
				container(list("nvidia.com/gpu", "2"), nil),
				sidecar(container(list("cpu", "300m"), nil)),
				container(list("cpu", "2"), nil)},
			Containers: []corev1.Container{container(list("nvidia.com/gpu", "1", "cpu", "1"), nil)}}},
		{"overhead", corev1.PodSpec{Overhead: list("cpu", "50m", "nvidia.com/gpu", "1"),
			Containers: []corev1.Container{container(list("cpu", "1"), nil)}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := &corev1.Pod{Spec: tc.spec}
			all := PodRequests(p)
			for _, name := range []corev1.ResourceName{gpu, corev1.ResourceCPU, corev1.ResourceMemory, "example.com/none"} {
				want := all[name]
				if got := PodRequest(p, name); got != want.MilliValue() {
					t.Errorf("PodRequest(%s) = %dm, PodRequests says %s", name, got, want.String())
				}
			}
		})
	}
}
