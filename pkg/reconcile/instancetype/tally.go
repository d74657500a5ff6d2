package instancetype

import (
	corev1 "k8s.io/api/core/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/pool"
)

// nodeCount is what one counted node gives its pool, per counted resource
// (in countedResources' order): its allocatable units and those no Pod
// takes.
type nodeCount struct{ total, free []int64 }

// countNode counts node n for t from pods, which may hold Pods bound
// elsewhere; false when n is not counted: outside the pool, not Ready,
// cordoned, or tainted against the type. Every Pod bound to a counted node
// takes its share, whether Kiln made it or not. A node whose Pods ask for
// more than it has (it shrank under them) has none free, and does not eat
// into the others'.
//
// Cards and partitions are counted as the scheduler sees them, by the
// nodes' allocatable extended resources. A slice asks for one unit of the
// card resource besides its percentages, so it takes a card slot: an L4
// node with 4 cards and one slice has 3 free. MIG partitions are resources
// of their own next to the whole cards (as the device plugin's mixed
// strategy reports them), so they are counted independently of them.
func countNode(t *v1alpha1.InstanceType, names []corev1.ResourceName, n *corev1.Node, pods []*corev1.Pod) (nodeCount, bool) {
	if !pool.InPool(t, n) || !pool.Schedulable(t, n) {
		return nodeCount{}, false
	}
	c := nodeCount{total: make([]int64, len(names)), free: make([]int64, len(names))}
	for i, name := range names {
		// Only the counted resources are read, in thousandths.
		var used int64
		for _, p := range pods {
			if p.Spec.NodeName == n.Name && pool.Occupies(p) {
				used += pool.PodRequest(p, name)
			}
		}
		alloc := n.Status.Allocatable[name]
		// Units in use, a fraction of one rounded up as Quantity.Value does.
		inUse := (used + 999) / 1000
		c.total[i] = alloc.Value()
		c.free[i] = max(alloc.Value()-inUse, 0)
	}
	return c, true
}

// tally sums the counts of a pool's nodes, and keeps each node's so that
// a node counted again replaces what it gave before: one node's change
// costs that node, not the pool.
type tally struct {
	names       []corev1.ResourceName
	nodes       map[string]nodeCount
	total, free []int64
}

func newTally(names []corev1.ResourceName) *tally {
	return &tally{names: names, nodes: map[string]nodeCount{},
		total: make([]int64, len(names)), free: make([]int64, len(names))}
}

// set replaces what node gives the pool by c, or by nothing when it is not
// counted.
func (t *tally) set(node string, c nodeCount, counted bool) {
	if old, ok := t.nodes[node]; ok {
		for i := range t.names {
			t.total[i] -= old.total[i]
			t.free[i] -= old.free[i]
		}
		delete(t.nodes, node)
	}
	if !counted {
		return
	}
	for i := range t.names {
		t.total[i] += c.total[i]
		t.free[i] += c.free[i]
	}
	t.nodes[node] = c
}

// capacity is the pool's capacity for typ, whose countedResources the
// tally was made with.
func (t *tally) capacity(typ *v1alpha1.InstanceType) v1alpha1.InstanceTypeCapacity {
	c := v1alpha1.InstanceTypeCapacity{Nodes: int32(len(t.nodes))}
	i := 0
	if pool.CardResource(typ) != "" {
		c.Cards, c.FreeCards = int32(t.total[0]), int32(t.free[0])
		i = 1
	}
	if a := typ.Spec.Accelerator; a != nil {
		for j, p := range a.Partitions {
			c.Partitions = append(c.Partitions, v1alpha1.PartitionCapacity{Name: p.Name, Total: int32(t.total[i+j]), Free: int32(t.free[i+j])})
		}
	}
	return c
}
