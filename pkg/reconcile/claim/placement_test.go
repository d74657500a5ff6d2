package claim

import (
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

const (
	gpu      = corev1.ResourceName("nvidia.com/gpu")
	mig      = corev1.ResourceName("nvidia.com/mig-1g.10gb")
	h100Name = "NVIDIA-H100-80GB-HBM3"
	tenant   = "tenant-a"
)

// h100 offers whole cards and one MIG profile, on nodes labelled with the
// H100's model.
func h100() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.InstanceTypeSpec{
			Accelerator: &v1alpha1.Accelerator{
				Vendor: "nvidia", Model: h100Name, Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
				Exclusive:  &v1alpha1.ExclusiveSharing{ResourceName: string(gpu)},
				Partitions: []v1alpha1.PartitionProfile{{Name: "1g.10gb", Memory: resource.MustParse("10Gi"), ResourceName: string(mig)}},
			},
		},
	}
}

func resources(kv ...any) corev1.ResourceList {
	l := corev1.ResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[kv[i].(corev1.ResourceName)] = *resource.NewQuantity(int64(kv[i+1].(int)), resource.DecimalSI)
	}
	return l
}

// node is a Ready H100 node with allocatable (8 cards unless given).
func node(name string, opts ...func(*corev1.Node)) *corev1.Node {
	n := &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"nvidia.com/gpu.product": h100Name}},
		Status: corev1.NodeStatus{
			Allocatable: resources(gpu, 8),
			Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: corev1.ConditionTrue,
				LastTransitionTime: metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC))}},
		},
	}
	for _, o := range opts {
		o(n)
	}
	return n
}

func allocatable(kv ...any) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Status.Allocatable = resources(kv...) }
}
func model(m string) func(*corev1.Node) {
	return func(n *corev1.Node) { n.Labels["nvidia.com/gpu.product"] = m }
}
func notReady(n *corev1.Node) { n.Status.Conditions[0].Status = corev1.ConditionFalse }
func cordoned(n *corev1.Node) { n.Spec.Unschedulable = true }

// pod is a running Pod of tenant-a bound to nodeName ("" for unbound).
func pod(name, nodeName string, requests corev1.ResourceList, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant},
		Spec: corev1.PodSpec{
			NodeName:   nodeName,
			Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{Requests: requests}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning},
	}
	for _, o := range opts {
		o(p)
	}
	return p
}

func phase(ph corev1.PodPhase) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Status.Phase = ph } }
func onClaim(name string) func(*corev1.Pod) {
	return func(p *corev1.Pod) { p.Labels = map[string]string{v1alpha1.LabelClaim: name} }
}
func inNamespace(ns string) func(*corev1.Pod) { return func(p *corev1.Pod) { p.Namespace = ns } }

// claim is a claim of tenant-a for cards whole cards of h100.
func claim(name string, cards int32, opts ...func(*v1alpha1.Claim)) *v1alpha1.Claim {
	c := &v1alpha1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: tenant, UID: types.UID("uid-" + name)},
		Spec:       v1alpha1.ClaimSpec{Type: "h100", Accelerators: ptr.To(cards)},
	}
	for _, o := range opts {
		o(c)
	}
	return c
}

func partition(p string) func(*v1alpha1.Claim) {
	return func(c *v1alpha1.Claim) { c.Spec.Accelerators, c.Spec.Partition = nil, p }
}

func hold(c *v1alpha1.Claim, node string) Hold {
	ask, err := Ask(c, h100())
	if err != nil {
		panic(err)
	}
	return Hold{Claim: c, Node: node, Ask: ask}
}

// quantities and values render resources as plain numbers for diffs.
func quantities(l corev1.ResourceList) map[corev1.ResourceName]int64 {
	out := map[corev1.ResourceName]int64{}
	for name, q := range l {
		out[name] = q.Value()
	}
	return out
}

func values(free map[string]corev1.ResourceList) map[string]map[corev1.ResourceName]int64 {
	out := map[string]map[corev1.ResourceName]int64{}
	for n, l := range free {
		out[n] = quantities(l)
	}
	return out
}

func TestAsk(t *testing.T) {
	partitionsOnly := h100()
	partitionsOnly.Spec.Accelerator.Exclusive = nil
	cpuOnly := &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}
	for _, tc := range []struct {
		name    string
		claim   *v1alpha1.Claim
		typ     *v1alpha1.InstanceType
		want    corev1.ResourceList
		wantErr string
	}{
		{name: "whole cards ask the card resource", claim: claim("c", 4), typ: h100(), want: resources(gpu, 4)},
		{name: "a partition asks one of its profile's resource, no card", claim: claim("c", 0, partition("1g.10gb")), typ: h100(), want: resources(mig, 1)},
		{name: "an unknown profile", claim: claim("c", 0, partition("7g.80gb")), typ: h100(),
			wantErr: `instancetype h100 has no partition profile "7g.80gb"`},
		{name: "cards of a partitions-only type", claim: claim("c", 1), typ: partitionsOnly,
			wantErr: "instancetype h100 offers no whole cards"},
		{name: "a CPU-only type", claim: claim("c", 1), typ: cpuOnly,
			wantErr: "instancetype cpu has no accelerator to hold"},
		{name: "neither cards nor a partition", claim: claim("c", 0, func(c *v1alpha1.Claim) { c.Spec.Accelerators = nil }), typ: h100(),
			wantErr: "claim tenant-a/c asks for neither accelerators nor a partition"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := Ask(tc.claim, tc.typ)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(quantities(tc.want), quantities(got)); diff != "" {
				t.Errorf("ask (-want +got):\n%s", diff)
			}
		})
	}
}

// usesOf is each node's NodeUse of pods and holds, as readNodeUse reads
// them from the informers.
func usesOf(pods []*corev1.Pod, holds []Hold) map[string]*NodeUse {
	on := map[string][]*corev1.Pod{}
	held := map[string]map[string]corev1.ResourceList{}
	for _, p := range pods {
		if p.Spec.NodeName != "" {
			on[p.Spec.NodeName] = append(on[p.Spec.NodeName], p)
		}
	}
	for _, h := range holds {
		if held[h.Node] == nil {
			held[h.Node] = map[string]corev1.ResourceList{}
		}
		held[h.Node][h.Claim.Namespace+"/"+h.Claim.Name] = h.Ask
	}
	out := map[string]*NodeUse{}
	for n, ps := range on {
		out[n] = newNodeUse(ps, held[n])
	}
	for n, hs := range held {
		if out[n] == nil {
			out[n] = newNodeUse(nil, hs)
		}
	}
	return out
}

func TestFree(t *testing.T) {
	train := claim("train", 4)
	other := claim("other", 2)
	for _, tc := range []struct {
		name  string
		nodes []*corev1.Node
		pods  []*corev1.Pod
		holds []Hold
		// assumed are placed moments ago; skip are being placed.
		assumed []Hold
		skip    map[string]bool
		want    map[string]map[corev1.ResourceName]int64
	}{{
		name:  "an empty node",
		nodes: []*corev1.Node{node("a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 8}},
	}, {
		name:  "only Ready, uncordoned nodes of the type's model are candidates",
		nodes: []*corev1.Node{node("a"), node("l4", model("NVIDIA-L4")), node("unlabelled", func(n *corev1.Node) { n.Labels = nil }), node("down", notReady), node("cordoned", cordoned)},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 8}},
	}, {
		name:  "bound Pods count, finished and unbound ones do not",
		nodes: []*corev1.Node{node("a")},
		pods: []*corev1.Pod{
			pod("running", "a", resources(gpu, 2)),
			pod("pending-bound", "a", resources(gpu, 1), phase(corev1.PodPending)),
			pod("done", "a", resources(gpu, 4), phase(corev1.PodSucceeded)),
			pod("crashed", "a", resources(gpu, 4), phase(corev1.PodFailed)),
			pod("unbound", "", resources(gpu, 4), phase(corev1.PodPending)),
			pod("elsewhere", "l4", resources(gpu, 4)),
		},
		want: map[string]map[corev1.ResourceName]int64{"a": {gpu: 5}},
	}, {
		name:  "a hold counts though its holder is not bound yet",
		nodes: []*corev1.Node{node("a")},
		pods:  []*corev1.Pod{pod(handover.HolderName(train), "", resources(gpu, 4), onClaim("train"), phase(corev1.PodPending))},
		holds: []Hold{hold(train, "a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}},
	}, {
		name:  "a hold and its bound holder count once",
		nodes: []*corev1.Node{node("a")},
		pods:  []*corev1.Pod{pod(handover.HolderName(train), "a", resources(gpu, 4), onClaim("train"))},
		holds: []Hold{hold(train, "a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}},
	}, {
		name:  "a hold, its holder and its Instance's Pod in the hand-over count once",
		nodes: []*corev1.Node{node("a")},
		pods: []*corev1.Pod{
			pod(handover.HolderName(train), "a", resources(gpu, 4), onClaim("train")),
			pod("train-instance", "a", resources(gpu, 4, corev1.ResourceCPU, 8), onClaim("train")),
		},
		holds: []Hold{hold(train, "a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}},
	}, {
		name:  "a Pod labelled with a Claim held on another node is a Pod of its own",
		nodes: []*corev1.Node{node("a"), node("b")},
		pods:  []*corev1.Pod{pod("stray", "a", resources(gpu, 4), onClaim("train"))},
		holds: []Hold{hold(train, "b")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}, "b": {gpu: 4}},
	}, {
		name:  "a Pod labelled with a Claim held nowhere is a Pod of its own",
		nodes: []*corev1.Node{node("a")},
		pods:  []*corev1.Pod{pod("stray", "a", resources(gpu, 3), onClaim("no-such-claim"))},
		holds: []Hold{hold(other, "a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 3}},
	}, {
		name:  "a label naming the Claim from another namespace does not hide a Pod",
		nodes: []*corev1.Node{node("a")},
		pods:  []*corev1.Pod{pod("theirs", "a", resources(gpu, 4), onClaim("train"), inNamespace("tenant-b"))},
		holds: []Hold{hold(train, "a")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 0}},
	}, {
		name:  "holds on nodes that are not candidates are ignored",
		nodes: []*corev1.Node{node("a"), node("down", notReady)},
		holds: []Hold{hold(train, "down"), hold(other, "gone")},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 8}},
	}, {
		name:  "partitions are counted on their own resource",
		nodes: []*corev1.Node{node("mig", allocatable(gpu, 4, mig, 7))},
		pods:  []*corev1.Pod{pod("slice", "mig", resources(mig, 2)), pod("card", "mig", resources(gpu, 1))},
		holds: []Hold{hold(claim("p", 0, partition("1g.10gb")), "mig")},
		want:  map[string]map[corev1.ResourceName]int64{"mig": {gpu: 3, mig: 4}},
	}, {
		name:    "an assumed placement counts where nothing shows it yet",
		nodes:   []*corev1.Node{node("a"), node("b")},
		assumed: []Hold{hold(train, "a")},
		want:    map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}, "b": {gpu: 8}},
	}, {
		name:    "an assumed placement and its bound holder count once",
		nodes:   []*corev1.Node{node("a")},
		pods:    []*corev1.Pod{pod(handover.HolderName(train), "a", resources(gpu, 4), onClaim("train"))},
		assumed: []Hold{hold(train, "a")},
		want:    map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}},
	}, {
		name:    "an assumed placement the node's use already holds counts once",
		nodes:   []*corev1.Node{node("a")},
		holds:   []Hold{hold(train, "a")},
		assumed: []Hold{hold(train, "a")},
		want:    map[string]map[corev1.ResourceName]int64{"a": {gpu: 4}},
	}, {
		name:  "a Claim being placed counts as its Pods, not as its old hold",
		nodes: []*corev1.Node{node("a")},
		pods:  []*corev1.Pod{pod("train-instance", "a", resources(gpu, 1), onClaim("train"))},
		holds: []Hold{hold(train, "a"), hold(other, "a")},
		skip:  map[string]bool{"tenant-a/train": true},
		want:  map[string]map[corev1.ResourceName]int64{"a": {gpu: 5}},
	}, {
		name:    "an assumed placement of a Claim being placed does not count",
		nodes:   []*corev1.Node{node("a")},
		assumed: []Hold{hold(train, "a")},
		skip:    map[string]bool{"tenant-a/train": true},
		want:    map[string]map[corev1.ResourceName]int64{"a": {gpu: 8}},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			got := Free(h100(), resources(gpu, 1, mig, 1), tc.nodes, usesOf(tc.pods, tc.holds), tc.assumed, tc.skip)
			if diff := cmp.Diff(tc.want, values(got)); diff != "" {
				t.Errorf("free (-want +got):\n%s", diff)
			}
		})
	}
}

func TestPlace(t *testing.T) {
	busy := func(name, nodeName string, cards int) *corev1.Pod { return pod(name, nodeName, resources(gpu, cards)) }
	train := claim("train", 4)
	for _, tc := range []struct {
		name   string
		claims []*v1alpha1.Claim // placed together: their asks are summed
		pin    string
		nodes  []*corev1.Node
		pods   []*corev1.Pod
		holds  []Hold
		want   Placement
	}{{
		name:   "the fullest node that fits wins",
		claims: []*v1alpha1.Claim{claim("c", 2)},
		nodes:  []*corev1.Node{node("a"), node("b"), node("c")},
		pods:   []*corev1.Pod{busy("x", "a", 1), busy("y", "b", 5), busy("z", "c", 7)},
		want:   Placement{Node: "b"},
	}, {
		name:   "an exact fit is the fullest",
		claims: []*v1alpha1.Claim{claim("c", 3)},
		nodes:  []*corev1.Node{node("a"), node("b")},
		pods:   []*corev1.Pod{busy("x", "a", 4), busy("y", "b", 5)},
		want:   Placement{Node: "b"},
	}, {
		name:   "ties go to the first name",
		claims: []*v1alpha1.Claim{claim("c", 2)},
		nodes:  []*corev1.Node{node("c"), node("b"), node("d")},
		pods:   []*corev1.Pod{busy("x", "c", 4), busy("y", "b", 4), busy("z", "d", 4)},
		want:   Placement{Node: "b"},
	}, {
		name:   "holds count toward how full a node is",
		claims: []*v1alpha1.Claim{claim("c", 2)},
		nodes:  []*corev1.Node{node("a"), node("b")},
		holds:  []Hold{hold(train, "b")},
		want:   Placement{Node: "b"},
	}, {
		name:   "a hold and its bound holder are not counted twice",
		claims: []*v1alpha1.Claim{claim("c", 4)},
		nodes:  []*corev1.Node{node("a")},
		pods:   []*corev1.Pod{pod(handover.HolderName(train), "a", resources(gpu, 4), onClaim("train"))},
		holds:  []Hold{hold(train, "a")},
		want:   Placement{Node: "a"},
	}, {
		name:   "a hold and an Instance Pod on it are not counted twice",
		claims: []*v1alpha1.Claim{claim("c", 4)},
		nodes:  []*corev1.Node{node("a")},
		pods:   []*corev1.Pod{pod("train", "a", resources(gpu, 4), onClaim("train"))},
		holds:  []Hold{hold(train, "a")},
		want:   Placement{Node: "a"},
	}, {
		name:   "no room: the message names the most free on one node",
		claims: []*v1alpha1.Claim{claim("c", 4)},
		nodes:  []*corev1.Node{node("a"), node("b"), node("down", notReady)},
		pods:   []*corev1.Pod{busy("x", "a", 6), busy("y", "b", 5)},
		want: Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: "no node of instancetype h100's pool has room for all of claim c " +
			"(4 nvidia.com/gpu on one node); the most free on one node is 3 nvidia.com/gpu, on b"},
	}, {
		name:   "no candidate node at all",
		claims: []*v1alpha1.Claim{claim("c", 1)},
		nodes:  []*corev1.Node{node("down", notReady), node("l4", model("NVIDIA-L4"))},
		want: Placement{Reason: v1alpha1.ClaimReasonCapacity,
			Message: "instancetype h100 has no Ready, schedulable node in its pool; claim c waits for one"},
	}, {
		name:   "pinned to a node with room, though another is fuller",
		claims: []*v1alpha1.Claim{claim("c", 2)},
		pin:    "a",
		nodes:  []*corev1.Node{node("a"), node("b")},
		pods:   []*corev1.Pod{busy("y", "b", 5)},
		want:   Placement{Node: "a"},
	}, {
		name:   "pinned to a node without room waits for it",
		claims: []*v1alpha1.Claim{claim("c", 4)},
		pin:    "a",
		nodes:  []*corev1.Node{node("a"), node("b")},
		pods:   []*corev1.Pod{busy("x", "a", 5)},
		want: Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: "node a has 3 nvidia.com/gpu free, claim c needs 4 nvidia.com/gpu; " +
			"it waits until they are released, or clear spec.nodeName"},
	}, {
		name:   "pinned to a node outside the pool",
		claims: []*v1alpha1.Claim{claim("c", 1)},
		pin:    "l4",
		nodes:  []*corev1.Node{node("a"), node("l4", model("NVIDIA-L4"))},
		want: Placement{Reason: v1alpha1.ClaimReasonNodeNotFound, Message: `node "l4" is not a Ready, schedulable node of instancetype h100's pool; ` +
			"pin claim c to another node or clear spec.nodeName"},
	}, {
		name:   "pinned to a NotReady node",
		claims: []*v1alpha1.Claim{claim("c", 1)},
		pin:    "down",
		nodes:  []*corev1.Node{node("a"), node("down", notReady)},
		want: Placement{Reason: v1alpha1.ClaimReasonNodeNotFound, Message: `node "down" is not a Ready, schedulable node of instancetype h100's pool; ` +
			"pin claim c to another node or clear spec.nodeName"},
	}, {
		name:   "pinned to a cordoned node",
		claims: []*v1alpha1.Claim{claim("c", 1)},
		pin:    "cordoned",
		nodes:  []*corev1.Node{node("a"), node("cordoned", cordoned)},
		want: Placement{Reason: v1alpha1.ClaimReasonNodeNotFound, Message: `node "cordoned" is not a Ready, schedulable node of instancetype h100's pool; ` +
			"pin claim c to another node or clear spec.nodeName"},
	}, {
		name:   "pinned to a node that does not exist",
		claims: []*v1alpha1.Claim{claim("c", 1)},
		pin:    "nope",
		nodes:  []*corev1.Node{node("a")},
		want: Placement{Reason: v1alpha1.ClaimReasonNodeNotFound, Message: `node "nope" is not a Ready, schedulable node of instancetype h100's pool; ` +
			"pin claim c to another node or clear spec.nodeName"},
	}, {
		name:   "a partition goes where its profile is free",
		claims: []*v1alpha1.Claim{claim("p", 0, partition("1g.10gb"))},
		nodes:  []*corev1.Node{node("a"), node("mig", allocatable(gpu, 0, mig, 7))},
		want:   Placement{Node: "mig"},
	}, {
		name:   "whole-card room does not count for a partition",
		claims: []*v1alpha1.Claim{claim("p", 0, partition("1g.10gb"))},
		nodes:  []*corev1.Node{node("a"), node("mig", allocatable(gpu, 8, mig, 7))},
		pods:   []*corev1.Pod{pod("slices", "mig", resources(mig, 7))},
		want: Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: "no node of instancetype h100's pool has room for all of claim p " +
			"(1 nvidia.com/mig-1g.10gb on one node); the most free on one node is 0 nvidia.com/mig-1g.10gb, on a"},
	}, {
		name:   "a set goes whole to one node",
		claims: []*v1alpha1.Claim{claim("s-0", 3), claim("s-1", 3)},
		nodes:  []*corev1.Node{node("a"), node("b")},
		pods:   []*corev1.Pod{busy("x", "a", 4), busy("y", "b", 2)},
		want:   Placement{Node: "b"},
	}, {
		name:   "a set that fits only in pieces goes nowhere",
		claims: []*v1alpha1.Claim{claim("s-0", 4), claim("s-1", 4)},
		nodes:  []*corev1.Node{node("a"), node("b")},
		pods:   []*corev1.Pod{busy("x", "a", 4), busy("y", "b", 2)},
		want: Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: "no node of instancetype h100's pool has room for all of claim c " +
			"(8 nvidia.com/gpu on one node); the most free on one node is 6 nvidia.com/gpu, on b"},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var asks []corev1.ResourceList
			for _, c := range tc.claims {
				ask, err := Ask(c, h100())
				if err != nil {
					t.Fatal(err)
				}
				asks = append(asks, ask)
			}
			what := "claim " + tc.claims[0].Name
			if len(tc.claims) > 1 {
				what = "claim c"
			}
			ask := sum(asks...)
			got := Place(h100(), ask, Free(h100(), ask, tc.nodes, usesOf(tc.pods, tc.holds), nil, nil), tc.pin, what)
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("placement (-want +got):\n%s", diff)
			}
		})
	}
}

func TestSum(t *testing.T) {
	got := sum(resources(gpu, 3), resources(gpu, 2, mig, 1), nil)
	if diff := cmp.Diff(quantities(resources(gpu, 5, mig, 1)), quantities(got)); diff != "" {
		t.Errorf("sum (-want +got):\n%s", diff)
	}
}

func TestNodeLost(t *testing.T) {
	now := metav1.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))
	grace := metav1.Duration{Duration: 5 * time.Minute}
	ready := func(status corev1.ConditionStatus, ago time.Duration) *corev1.Node {
		return node("a", func(n *corev1.Node) {
			n.Status.Conditions = []corev1.NodeCondition{
				{Type: corev1.NodeMemoryPressure, Status: corev1.ConditionFalse},
				{Type: corev1.NodeReady, Status: status, LastTransitionTime: metav1.NewTime(now.Add(-ago))},
			}
		})
	}
	for _, tc := range []struct {
		name     string
		node     *corev1.Node
		wantLost bool
		wantWait time.Duration
	}{
		{"a deleted node is lost at once", nil, true, 0},
		{"a Ready node is not lost", ready(corev1.ConditionTrue, time.Hour), false, 0},
		{"NotReady within the grace: wait for the rest", ready(corev1.ConditionFalse, time.Minute), false, 4 * time.Minute},
		{"Unknown within the grace counts as NotReady", ready(corev1.ConditionUnknown, 3*time.Minute), false, 2 * time.Minute},
		{"NotReady for exactly the grace is lost", ready(corev1.ConditionFalse, 5*time.Minute), true, 0},
		{"NotReady past the grace is lost", ready(corev1.ConditionFalse, 6*time.Minute), true, 0},
		{"a node without a Ready condition is still registering", node("a", func(n *corev1.Node) { n.Status.Conditions = nil }), false, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lost, wait := nodeLost(tc.node, now, grace)
			if lost != tc.wantLost || wait.Duration != tc.wantWait {
				t.Errorf("nodeLost = %v, %v; want %v, %v", lost, wait.Duration, tc.wantLost, tc.wantWait)
			}
		})
	}
}
