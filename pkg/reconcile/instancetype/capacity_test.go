package instancetype

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

const (
	productLabel = "nvidia.com/gpu.product"
	h100Model    = "NVIDIA-H100-80GB-HBM3"
	l4Model      = "NVIDIA-L4"
	gpu          = "nvidia.com/gpu"
	gpuMem       = "nvidia.com/gpumem-percentage"
	mig1g        = "nvidia.com/mig-1g.10gb"
	mig3g        = "nvidia.com/mig-3g.40gb"
)

var gpuToleration = []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}

// The types are the defaulted forms of artifacts/examples/instancetypes.yaml.
func h100Type() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100", Generation: 3},
		Spec: v1alpha1.InstanceTypeSpec{
			Accelerator: &v1alpha1.Accelerator{
				Vendor: "nvidia", Model: h100Model, Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
				Exclusive: &v1alpha1.ExclusiveSharing{ResourceName: gpu},
				Partitions: []v1alpha1.PartitionProfile{
					{Name: "1g.10gb", Memory: resource.MustParse("10Gi"), ResourceName: mig1g},
					{Name: "3g.40gb", Memory: resource.MustParse("40Gi"), ResourceName: mig3g},
				},
			},
			NodeSelector: map[string]string{productLabel: h100Model},
			Tolerations:  gpuToleration,
		},
	}
}

func l4Type() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "l4", Generation: 1},
		Spec: v1alpha1.InstanceTypeSpec{
			Accelerator: &v1alpha1.Accelerator{
				Vendor: "nvidia", Model: l4Model, Memory: resource.MustParse("24Gi"), MaxPerInstance: 4,
				Exclusive: &v1alpha1.ExclusiveSharing{ResourceName: gpu},
				Sliced:    &v1alpha1.SlicedSharing{ResourceName: gpu, MemoryPercentResourceName: gpuMem, CoresResourceName: "nvidia.com/gpucores"},
			},
			NodeSelector: map[string]string{productLabel: l4Model},
			Tolerations:  gpuToleration,
		},
	}
}

func cpuType() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu", Generation: 1}}
}

func resources(kv ...any) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[corev1.ResourceName(kv[i].(string))] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return l
}

// node is a Ready node as test/localcluster simulates them: GPU nodes carry
// the product label and the nvidia.com/gpu taint.
func node(name, product string, allocatable corev1.ResourceList, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{corev1.LabelHostname: name}},
		Status: corev1.NodeStatus{
			Allocatable: allocatable,
			Conditions:  []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue}},
		},
	}
	if product != "" {
		n.Labels[productLabel] = product
		n.Spec.Taints = []corev1.Taint{{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}}
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

func h100Node(name string) *corev1.Node { return node(name, h100Model, resources(gpu, 8, "cpu", 192)) }
func h100MIGNode(name string, opts ...func(*corev1.Node)) *corev1.Node {
	return node(name, h100Model, resources(gpu, 8, mig1g, 7, mig3g, 2), opts...)
}

// pod is a Pod bound to nodeName (unbound when ""), Running, with one
// container requesting requests.
func pod(name, nodeName string, requests corev1.ResourceList, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "tenant-a"},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: requests, Limits: requests}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }

func limitsOnly(p *corev1.Pod) { p.Spec.Containers[0].Resources.Requests = nil }

// Capacity counts the type's pool from scratch, as a sync with no kept
// count does; nodes and pods may be supersets.
func Capacity(t *v1alpha1.InstanceType, nodes []*corev1.Node, pods []*corev1.Pod) v1alpha1.InstanceTypeCapacity {
	byNode := map[string][]*corev1.Pod{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			byNode[p.Spec.NodeName] = append(byNode[p.Spec.NodeName], p)
		}
	}
	tl := newTally(countedResources(t))
	for _, n := range nodes {
		c, counted := countNode(t, tl.names, n, byNode[n.Name])
		tl.set(n.Name, c, counted)
	}
	return tl.capacity(t)
}

// Status is the status the type should have, counted from scratch.
func Status(t *v1alpha1.InstanceType, nodes []*corev1.Node, pods []*corev1.Pod, now metav1.Time) v1alpha1.InstanceTypeStatus {
	return statusOf(t, Capacity(t, nodes, pods), now)
}

func TestCapacity(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   *v1alpha1.InstanceType
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  v1alpha1.InstanceTypeCapacity
	}{{
		name:  "h100 pool with whole-card and MIG pods",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0"), h100MIGNode("h100-1")},
		pods: []*corev1.Pod{
			pod("two", "h100-0", resources(gpu, 2, "cpu", 48)),
			pod("three", "h100-1", resources(gpu, 3)),
			pod("mig", "h100-1", resources(mig1g, 1)),
		},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 2, Cards: 16, FreeCards: 11, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb", Total: 7, Free: 6}, {Name: "3g.40gb", Total: 2, Free: 2},
		}},
	}, {
		name:  "a NotReady node contributes nothing",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0"), h100MIGNode("h100-1", notReady)},
		pods:  []*corev1.Pod{pod("two", "h100-0", resources(gpu, 2)), pod("three", "h100-1", resources(gpu, 3))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 6, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name:  "a cordoned node contributes nothing",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0"), h100MIGNode("h100-1", cordoned)},
		pods:  []*corev1.Pod{pod("three", "h100-1", resources(gpu, 3))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 8, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name: "a node of another model and its pods are not in the pool",
		typ:  h100Type(),
		nodes: []*corev1.Node{
			h100Node("h100-0"),
			node("l4-0", l4Model, resources(gpu, 4, gpuMem, 400)),
		},
		pods: []*corev1.Pod{pod("l4-user", "l4-0", resources(gpu, 1)), pod("one", "h100-0", resources(gpu, 1))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 7, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name: "the model is matched even when the nodeSelector leaves it out",
		typ: func() *v1alpha1.InstanceType {
			t := h100Type()
			t.Spec.NodeSelector = nil
			t.Spec.Accelerator.Partitions = nil
			return t
		}(),
		nodes: []*corev1.Node{h100Node("h100-0"), node("l4-0", l4Model, resources(gpu, 4))},
		want:  v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 8},
	}, {
		name: "every nodeSelector label must match",
		typ: func() *v1alpha1.InstanceType {
			t := h100Type()
			t.Spec.NodeSelector["pool"] = "research"
			t.Spec.Accelerator.Partitions = nil
			return t
		}(),
		nodes: []*corev1.Node{
			h100Node("h100-0"),
			node("h100-r", h100Model, resources(gpu, 8), func(n *corev1.Node) { n.Labels["pool"] = "research" }),
		},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 8},
	}, {
		name: "a taint the type does not tolerate keeps the node out",
		typ: func() *v1alpha1.InstanceType {
			t := h100Type()
			t.Spec.Tolerations = nil
			t.Spec.Accelerator.Partitions = nil
			return t
		}(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		want:  v1alpha1.InstanceTypeCapacity{},
	}, {
		name:  "finished pods take nothing",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods: []*corev1.Pod{
			pod("done", "h100-0", resources(gpu, 4), phase(corev1.PodSucceeded)),
			pod("crashed", "h100-0", resources(gpu, 2), phase(corev1.PodFailed)),
			pod("starting", "h100-0", resources(gpu, 1), phase(corev1.PodPending)),
		},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 7, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name:  "unbound pods take nothing",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods:  []*corev1.Pod{pod("pending", "", resources(gpu, 8), phase(corev1.PodPending))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 8, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name:  "limits stand in for absent requests",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100MIGNode("h100-1")},
		pods:  []*corev1.Pod{pod("limits", "h100-1", resources(gpu, 3, mig3g, 1), limitsOnly)},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 5, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb", Total: 7, Free: 7}, {Name: "3g.40gb", Total: 2, Free: 1},
		}},
	}, {
		name:  "init containers count at their peak, sidecars alongside the containers",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods: []*corev1.Pod{
			// max(init 4, main 1) = 4
			pod("init", "h100-0", resources(gpu, 1), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{Name: "warmup", Resources: corev1.ResourceRequirements{Requests: resources(gpu, 4)}}}
			}),
			// sidecar 1 + main 1 = 2
			pod("sidecar", "h100-0", resources(gpu, 1), func(p *corev1.Pod) {
				p.Spec.InitContainers = []corev1.Container{{
					Name: "monitor", RestartPolicy: ptr.To(corev1.ContainerRestartPolicyAlways),
					Resources: corev1.ResourceRequirements{Requests: resources(gpu, 1)},
				}}
			}),
		},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 8, FreeCards: 2, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name:  "an over-committed node has none free and takes none from the others",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100Node("h100-0"), h100Node("h100-1")},
		pods:  []*corev1.Pod{pod("greedy", "h100-0", resources(gpu, 10))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 2, Cards: 16, FreeCards: 8, Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}, {
		name: "a slice takes a card slot on the l4",
		typ:  l4Type(),
		nodes: []*corev1.Node{
			node("l4-0", l4Model, resources(gpu, 4, gpuMem, 400, "nvidia.com/gpucores", 400)),
			h100Node("h100-0"),
		},
		pods: []*corev1.Pod{pod("slice", "l4-0", resources(gpu, 1, gpuMem, 25, "nvidia.com/gpucores", 25))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 4, FreeCards: 3},
	}, {
		name: "a sliced-only type counts the cards its slices sit on",
		typ: func() *v1alpha1.InstanceType {
			t := l4Type()
			t.Spec.Accelerator.Exclusive = nil
			return t
		}(),
		nodes: []*corev1.Node{node("l4-0", l4Model, resources(gpu, 4, gpuMem, 400))},
		pods:  []*corev1.Pod{pod("slice", "l4-0", resources(gpu, 1, gpuMem, 50))},
		want:  v1alpha1.InstanceTypeCapacity{Nodes: 1, Cards: 4, FreeCards: 3},
	}, {
		name: "a CPU-only type counts nodes its pods can land on and no cards",
		typ:  cpuType(),
		nodes: []*corev1.Node{
			node("cpu-0", "", resources("cpu", 64)),
			node("cpu-1", "", resources("cpu", 64), notReady),
			h100Node("h100-0"), // tainted for GPU pods only
		},
		pods: []*corev1.Pod{pod("busy", "cpu-0", resources("cpu", 60))},
		want: v1alpha1.InstanceTypeCapacity{Nodes: 1},
	}, {
		name:  "no nodes",
		typ:   h100Type(),
		nodes: nil,
		want: v1alpha1.InstanceTypeCapacity{Partitions: []v1alpha1.PartitionCapacity{
			{Name: "1g.10gb"}, {Name: "3g.40gb"},
		}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Capacity(tc.typ, tc.nodes, tc.pods)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("Capacity (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPhase(t *testing.T) {
	for _, tc := range []struct {
		name     string
		hold     v1alpha1.HoldMode
		deleting bool
		want     v1alpha1.InstanceTypePhase
	}{
		{name: "open", want: v1alpha1.InstanceTypeActive},
		{name: "held", hold: v1alpha1.HoldNew, want: v1alpha1.InstanceTypeHeld},
		{name: "drained", hold: v1alpha1.HoldDrain, want: v1alpha1.InstanceTypeDraining},
		{name: "deleted", deleting: true, want: v1alpha1.InstanceTypeDraining},
		{name: "held and deleted", hold: v1alpha1.HoldNew, deleting: true, want: v1alpha1.InstanceTypeDraining},
	} {
		t.Run(tc.name, func(t *testing.T) {
			it := h100Type()
			it.Spec.Hold = tc.hold
			if tc.deleting {
				it.DeletionTimestamp = &metav1.Time{Time: time.Unix(1, 0)}
			}
			if got := Phase(it); got != tc.want {
				t.Errorf("Phase = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestStatusConditions(t *testing.T) {
	earlier := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))
	now := metav1.NewTime(time.Date(2026, 1, 2, 0, 0, 0, 0, time.UTC))
	h100NoPartitions := func() *v1alpha1.InstanceType {
		t := h100Type()
		t.Spec.Accelerator.Partitions = nil
		return t
	}
	for _, tc := range []struct {
		name  string
		typ   *v1alpha1.InstanceType
		prior []metav1.Condition
		nodes []*corev1.Node
		pods  []*corev1.Pod
		want  metav1.Condition
	}{{
		name:  "free cards",
		typ:   h100NoPartitions(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods:  []*corev1.Pod{pod("two", "h100-0", resources(gpu, 2))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message: "6 of 8 cards free on 1 nodes", ObservedGeneration: 3, LastTransitionTime: now},
	}, {
		name:  "only partitions free",
		typ:   h100Type(),
		nodes: []*corev1.Node{h100MIGNode("h100-1")},
		pods:  []*corev1.Pod{pod("all", "h100-1", resources(gpu, 8, mig3g, 2))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message:            "0 of 8 cards free on 1 nodes, 7 of 7 1g.10gb partitions free, 0 of 2 3g.40gb partitions free",
			ObservedGeneration: 3, LastTransitionTime: now},
	}, {
		name:  "all in use",
		typ:   h100NoPartitions(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods:  []*corev1.Pod{pod("all", "h100-0", resources(gpu, 8))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonNoCapacity,
			Message: "everything is in use: 0 of 8 cards free on 1 nodes", ObservedGeneration: 3, LastTransitionTime: now},
	}, {
		name:  "nodes without the device plugin's resource",
		typ:   h100NoPartitions(),
		nodes: []*corev1.Node{node("h100-0", h100Model, resources("cpu", 192))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonNoCapacity,
			Message:            "the 1 nodes in the pool of instancetype h100 offer none of nvidia.com/gpu: check that the device plugin runs there",
			ObservedGeneration: 3, LastTransitionTime: now},
	}, {
		name:  "only unschedulable nodes",
		typ:   h100NoPartitions(),
		nodes: []*corev1.Node{node("h100-0", h100Model, resources(gpu, 8), notReady)},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonNoNodes,
			Message: "instancetype h100 has no Ready, uncordoned node in its pool (nodes labelled nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3): " +
				"label nodes to match spec.nodeSelector, or check spec.tolerations against their taints",
			ObservedGeneration: 3, LastTransitionTime: now},
	}, {
		name:  "CPU-only with a node",
		typ:   cpuType(),
		nodes: []*corev1.Node{node("cpu-0", "", resources("cpu", 64))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message: "1 nodes in the pool", ObservedGeneration: 1, LastTransitionTime: now},
	}, {
		name:  "CPU-only without one",
		typ:   cpuType(),
		nodes: []*corev1.Node{h100Node("h100-0")},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonNoNodes,
			Message: "instancetype cpu has no Ready, uncordoned node in its pool (every node): " +
				"label nodes to match spec.nodeSelector, or check spec.tolerations against their taints",
			ObservedGeneration: 1, LastTransitionTime: now},
	}, {
		name: "an unchanged status keeps its transition time",
		typ:  h100NoPartitions(),
		prior: []metav1.Condition{{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message: "8 of 8 cards free on 1 nodes", ObservedGeneration: 2, LastTransitionTime: earlier}},
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods:  []*corev1.Pod{pod("one", "h100-0", resources(gpu, 1))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message: "7 of 8 cards free on 1 nodes", ObservedGeneration: 3, LastTransitionTime: earlier},
	}, {
		name: "a flip moves the transition time",
		typ:  h100NoPartitions(),
		prior: []metav1.Condition{{Type: ConditionAvailable, Status: metav1.ConditionTrue, Reason: ReasonCapacityAvailable,
			Message: "8 of 8 cards free on 1 nodes", ObservedGeneration: 3, LastTransitionTime: earlier}},
		nodes: []*corev1.Node{h100Node("h100-0")},
		pods:  []*corev1.Pod{pod("all", "h100-0", resources(gpu, 8))},
		want: metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse, Reason: ReasonNoCapacity,
			Message: "everything is in use: 0 of 8 cards free on 1 nodes", ObservedGeneration: 3, LastTransitionTime: now},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			tc.typ.Status.Conditions = tc.prior
			got := Status(tc.typ, tc.nodes, tc.pods, now)
			if diff := cmp.Diff([]metav1.Condition{tc.want}, got.Conditions); diff != "" {
				t.Errorf("conditions (-want +got):\n%s", diff)
			}
			if got.ObservedGeneration != tc.typ.Generation {
				t.Errorf("observedGeneration = %d, want %d", got.ObservedGeneration, tc.typ.Generation)
			}
			if got.Phase != v1alpha1.InstanceTypeActive {
				t.Errorf("phase = %q, want Active", got.Phase)
			}
		})
	}
}

func TestStatusKeepsOtherConditions(t *testing.T) {
	it := cpuType()
	other := metav1.Condition{Type: "Other", Status: metav1.ConditionTrue, Reason: "Set", LastTransitionTime: metav1.NewTime(time.Unix(1, 0))}
	it.Status.Conditions = []metav1.Condition{other}
	got := Status(it, []*corev1.Node{node("cpu-0", "", nil)}, nil, metav1.NewTime(time.Unix(2, 0)))
	if len(got.Conditions) != 2 || got.Conditions[0] != other {
		t.Errorf("conditions = %+v, want %q kept first", got.Conditions, other.Type)
	}
	if len(it.Status.Conditions) != 1 {
		t.Errorf("Status changed the type's own conditions: %+v", it.Status.Conditions)
	}
}

func TestHealthyAllocatable(t *testing.T) {
	node := func(name string, gpus int64) *corev1.Node {
		return &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: name}, Status: corev1.NodeStatus{Allocatable: corev1.ResourceList{
			"nvidia.com/gpu": *resource.NewQuantity(gpus, resource.DecimalSI), "cpu": resource.MustParse("8"),
		}}}
	}
	dev := func(uuid string, healthy bool) v1alpha1.NodeDevice {
		d := v1alpha1.NodeDevice{UUID: uuid, Resource: "nvidia.com/gpu", Health: v1alpha1.DeviceHealthy}
		if !healthy {
			d.Health = v1alpha1.DeviceUnhealthy
		}
		return d
	}
	reports := map[string]*v1alpha1.NodeDevices{
		// Simulated: allocatable still 3, one device failed.
		"sim": {Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{dev("a", true), dev("b", false), dev("c", true)}}},
		// Real: the kubelet already lowered allocatable to 2.
		"real": {Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{dev("a", true), dev("b", false), dev("c", true)}}},
		// All failed.
		"dead": {Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{dev("a", false)}}},
	}
	in := []*corev1.Node{node("sim", 3), node("real", 2), node("dead", 1), node("unreported", 4)}
	out := HealthyAllocatable(in, func(n string) *v1alpha1.NodeDevices { return reports[n] })
	want := map[string]int64{"sim": 2, "real": 2, "dead": 0, "unreported": 4}
	for _, n := range out {
		q := n.Status.Allocatable["nvidia.com/gpu"]
		if q.Value() != want[n.Name] {
			t.Errorf("%s: %d cards allocatable, want %d", n.Name, q.Value(), want[n.Name])
		}
	}
	if q := in[0].Status.Allocatable["nvidia.com/gpu"]; q.Value() != 3 {
		t.Errorf("the informer's Node was changed: %s", q.String())
	}
}
