package claim

import (
	"sync"

	corev1 "k8s.io/api/core/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/pool"
)

// NodePods is what the Pods bound to one node take of it, as Free counts
// them: the Pods of no Claim summed, the Pods of Claims one by one, since
// each is left out where its Claim is counted as held instead.
type NodePods struct {
	plain   []*corev1.Pod
	claimed []*corev1.Pod
	// sums memoizes the plain Pods' request of each resource asked so
	// far, in thousandths. Only placements read it, one at a time.
	sums map[corev1.ResourceName]int64
}

// newNodePods takes the Pods bound to one node; those the scheduler no
// longer counts are left out.
func newNodePods(pods []*corev1.Pod) *NodePods {
	np := &NodePods{sums: map[corev1.ResourceName]int64{}}
	for _, p := range pods {
		switch {
		case !pool.Occupies(p):
		case p.Labels[v1alpha1.LabelClaim] != "":
			np.claimed = append(np.claimed, p)
		default:
			np.plain = append(np.plain, p)
		}
	}
	return np
}

// plainRequest is what the Pods of no Claim request of name, in
// thousandths.
func (np *NodePods) plainRequest(name corev1.ResourceName) int64 {
	if v, ok := np.sums[name]; ok {
		return v
	}
	var v int64
	for _, p := range np.plain {
		v += pool.PodRequest(p, name)
	}
	np.sums[name] = v
	return v
}

// podSums keeps each node's NodePods between placements. Pod events mark
// their node stale, and a placement reads again only the stale nodes of
// its pool. Before, every placement read every Pod of its pool under the
// placement lock: with 1,000 Claims placed at once on 1,000 nodes holding
// 6,000 Pods, half of kiln-controller's CPU, and the Claims waited 15 s
// (p50) to 30 s (p99) for their holder (bench-scale at d97b7a5).
//
// The handlers see an event a moment after the informer's cache has it,
// so a placement may count a node's Pods as they were that moment before.
// The informer lags the server by more than that, and the holder goes
// through kube-scheduler, which has the last word on the node's room: a
// holder it cannot bind makes the Claim look for a node again.
type podSums struct {
	mu    sync.Mutex
	nodes map[string]*NodePods
	// marks counts each node's marks, and all the marks of every node at
	// once, so that a sum read before a mark is not kept after it.
	marks map[string]uint64
	all   uint64
}

func newPodSums() *podSums {
	return &podSums{nodes: map[string]*NodePods{}, marks: map[string]uint64{}}
}

// changed marks the node a Pod is bound to; an unbound Pod takes nothing.
func (s *podSums) changed(p *corev1.Pod) {
	if p.Spec.NodeName == "" {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	delete(s.nodes, p.Spec.NodeName)
	s.marks[p.Spec.NodeName]++
}

// changedAll marks every node: a Pod deleted while the watch was down
// comes without its last state.
func (s *podSums) changedAll() {
	s.mu.Lock()
	defer s.mu.Unlock()
	clear(s.nodes)
	s.all++
}

// pool returns the NodePods of each of nodes, reading with list the Pods
// of those not kept.
func (s *podSums) pool(nodes []*corev1.Node, list func(node string) ([]*corev1.Pod, error)) (map[string]*NodePods, error) {
	out := make(map[string]*NodePods, len(nodes))
	for _, n := range nodes {
		s.mu.Lock()
		np, ok := s.nodes[n.Name]
		mark, all := s.marks[n.Name], s.all
		s.mu.Unlock()
		if !ok {
			pods, err := list(n.Name)
			if err != nil {
				return nil, err
			}
			np = newNodePods(pods)
			s.mu.Lock()
			if s.marks[n.Name] == mark && s.all == all {
				s.nodes[n.Name] = np
			}
			s.mu.Unlock()
		}
		out[n.Name] = np
	}
	return out, nil
}
