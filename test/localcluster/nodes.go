package localcluster

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// kwok manages the Nodes carrying this annotation and leaves Pods carrying
// customStatusAnnotation to whatever status a test writes.
const (
	kwokNodeAnnotation     = "kwok.x-k8s.io/node"
	CustomStatusAnnotation = "kwok.x-k8s.io/status"
)

// Node labels GPU platform teams select on, as NVIDIA's GPU feature
// discovery sets them.
const (
	LabelGPUProduct     = "nvidia.com/gpu.product"
	LabelGPUCount       = "nvidia.com/gpu.count"
	LabelGPUMemory      = "nvidia.com/gpu.memory"
	LabelMIGStrategy    = "nvidia.com/mig.strategy"
	LabelInstanceType   = "node.kubernetes.io/instance-type"
	TaintGPU            = "nvidia.com/gpu"
	ProductH100         = "NVIDIA-H100-80GB-HBM3"
	ProductL4           = "NVIDIA-L4"
	ResourceGPU         = "nvidia.com/gpu"
	ResourceGPUMem      = "nvidia.com/gpumem-percentage"
	ResourceGPUCores    = "nvidia.com/gpucores"
	ResourceGPUShared   = "nvidia.com/gpu.shared"
	ResourceMIG1g10gb   = "nvidia.com/mig-1g.10gb"
	ResourceMIG3g40gb   = "nvidia.com/mig-3g.40gb"
	simulatedNodeMarker = "fake"
)

// NodeSpec describes one simulated node.
type NodeSpec struct {
	Name   string
	Labels map[string]string
	// Resources are capacity and allocatable alike.
	Resources corev1.ResourceList
	// GPU nodes carry the nvidia.com/gpu taint, as the GPU operator sets it,
	// so only Pods that tolerate it land there.
	GPU bool
}

// DefaultInventory is what a small GPU platform looks like: two 8 × H100
// nodes, one of them also offering MIG partitions (mixed strategy), one
// 4 × L4 node whose cards are shared by memory and core percentage, and a
// CPU-only node.
func DefaultInventory() []NodeSpec {
	h100 := func(name string, extra corev1.ResourceList) NodeSpec {
		res := corev1.ResourceList{
			corev1.ResourceCPU:              resource.MustParse("192"),
			corev1.ResourceMemory:           resource.MustParse("2Ti"),
			corev1.ResourceEphemeralStorage: resource.MustParse("28Ti"),
			corev1.ResourcePods:             resource.MustParse("110"),
			ResourceGPU:                     resource.MustParse("8"),
		}
		for k, v := range extra {
			res[k] = v
		}
		return NodeSpec{
			Name: name,
			GPU:  true,
			Labels: map[string]string{
				LabelGPUProduct:   ProductH100,
				LabelGPUCount:     "8",
				LabelGPUMemory:    "81559",
				LabelMIGStrategy:  "mixed",
				LabelInstanceType: "p5.48xlarge",
			},
			Resources: res,
		}
	}
	return []NodeSpec{
		h100("gpu-h100-0", nil),
		h100("gpu-h100-1", corev1.ResourceList{
			ResourceMIG1g10gb: resource.MustParse("7"),
			ResourceMIG3g40gb: resource.MustParse("2"),
		}),
		{
			Name: "gpu-l4-0",
			GPU:  true,
			Labels: map[string]string{
				LabelGPUProduct:   ProductL4,
				LabelGPUCount:     "4",
				LabelGPUMemory:    "23034",
				LabelInstanceType: "g6.12xlarge",
			},
			Resources: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("48"),
				corev1.ResourceMemory:           resource.MustParse("192Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("3800Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
				ResourceGPU:                     resource.MustParse("4"),
				// Sharing by percentage: 100 per card, of memory and of cores.
				ResourceGPUMem:   resource.MustParse("400"),
				ResourceGPUCores: resource.MustParse("400"),
			},
		},
		{
			Name: "cpu-0",
			Labels: map[string]string{
				LabelInstanceType: "m7i.16xlarge",
			},
			Resources: corev1.ResourceList{
				corev1.ResourceCPU:              resource.MustParse("64"),
				corev1.ResourceMemory:           resource.MustParse("256Gi"),
				corev1.ResourceEphemeralStorage: resource.MustParse("500Gi"),
				corev1.ResourcePods:             resource.MustParse("110"),
			},
		},
	}
}

// Node renders the Node object kwok takes over.
func (n NodeSpec) Node() *corev1.Node {
	labels := map[string]string{
		"kubernetes.io/hostname": n.Name,
		"kubernetes.io/os":       "linux",
		"kubernetes.io/arch":     "amd64",
		"type":                   "kwok",
	}
	for k, v := range n.Labels {
		labels[k] = v
	}
	// No kwok taint: nothing but simulated nodes exists here, and Pods
	// rendered from InstanceTypes should schedule as they would in
	// production.
	var taints []corev1.Taint
	if n.GPU {
		taints = append(taints, corev1.Taint{Key: TaintGPU, Value: "present", Effect: corev1.TaintEffectNoSchedule})
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{
			Name:        n.Name,
			Labels:      labels,
			Annotations: map[string]string{kwokNodeAnnotation: simulatedNodeMarker},
		},
		Spec: corev1.NodeSpec{Taints: taints},
		Status: corev1.NodeStatus{
			Capacity:    n.Resources.DeepCopy(),
			Allocatable: n.Resources.DeepCopy(),
		},
	}
}

// NodeReady says whether a Node is Ready and without the not-ready taints.
func NodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}
