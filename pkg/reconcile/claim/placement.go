package claim

import (
	"fmt"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/pool"
)

// Ask is what a Claim holds on its node: the extended resources of its
// type, as its holder Pod requests them.
func Ask(c *v1alpha1.Claim, t *v1alpha1.InstanceType) (corev1.ResourceList, error) {
	acc := t.Spec.Accelerator
	if acc == nil {
		return nil, fmt.Errorf("instancetype %s has no accelerator to hold", t.Name)
	}
	switch {
	case c.Spec.Partition != "":
		for _, p := range acc.Partitions {
			if p.Name == c.Spec.Partition && p.ResourceName != "" {
				return corev1.ResourceList{corev1.ResourceName(p.ResourceName): *resource.NewQuantity(1, resource.DecimalSI)}, nil
			}
		}
		return nil, fmt.Errorf("instancetype %s has no partition profile %q", t.Name, c.Spec.Partition)
	case c.Spec.Accelerators != nil:
		name := pool.CardResource(t)
		if name == "" {
			return nil, fmt.Errorf("instancetype %s offers no whole cards", t.Name)
		}
		return corev1.ResourceList{name: *resource.NewQuantity(int64(*c.Spec.Accelerators), resource.DecimalSI)}, nil
	}
	return nil, fmt.Errorf("claim %s/%s asks for neither accelerators nor a partition", c.Namespace, c.Name)
}

// Hold is a Claim that occupies a node: placed there, and not yet released.
type Hold struct {
	Claim *v1alpha1.Claim
	Node  string
	Ask   corev1.ResourceList
}

// Free is what each schedulable node of the type's pool has left of the
// resources ask names, counting each thing once: the requests of bound Pods
// that belong to no Claim, and the asks of the Claims held there (a
// Claim's holder and its Instance's Pod are counted as the Claim, never
// besides it). uses are what each node's Pods and Claims take, as the
// informers show them (nodeUses keeps them between placements); assumed
// are the Claims placed moments ago that uses may not show yet, and the
// Claims in skip (those being placed) count only as their Pods. Only the
// asked resources are read, so that a placement allocates per node, not
// per Pod.
func Free(t *v1alpha1.InstanceType, ask corev1.ResourceList, nodes []*corev1.Node, uses map[string]*NodeUse, assumed []Hold, skip map[string]bool) map[string]corev1.ResourceList {
	assumedOn := map[string]map[string]corev1.ResourceList{}
	for _, h := range assumed {
		key := h.Claim.Namespace + "/" + h.Claim.Name
		if skip[key] {
			continue
		}
		if assumedOn[h.Node] == nil {
			assumedOn[h.Node] = map[string]corev1.ResourceList{}
		}
		assumedOn[h.Node][key] = h.Ask
	}
	free := map[string]corev1.ResourceList{}
	for _, n := range nodes {
		if !pool.InPool(t, n) || !pool.Schedulable(t, n) {
			continue
		}
		u := uses[n.Name]
		if u == nil {
			u = newNodeUse(nil, nil)
		}
		f := make(corev1.ResourceList, len(ask))
		for name := range ask {
			if q, ok := n.Status.Allocatable[name]; ok {
				q.SetMilli(q.MilliValue() - u.taken(name, skip, assumedOn[n.Name]))
				f[name] = q
			}
		}
		free[n.Name] = f
	}
	return free
}

// fits reports whether ask fits in free.
func fits(ask, free corev1.ResourceList) bool {
	for name, q := range ask {
		f, ok := free[name]
		if !ok || f.Cmp(q) < 0 {
			return false
		}
	}
	return true
}

// Placement is where a group of Claims (one, or the unplaced members of a
// claim set) goes, or why it waits.
type Placement struct {
	Node string
	// Reason and Message say why there is no node: ClaimReasonCapacity or
	// ClaimReasonNodeNotFound.
	Reason, Message string
}

// Place picks the node for ask: the pinned one if pin is set, else the
// fullest node that fits (bin-packing, so that large asks keep finding
// empty nodes), ties broken by name. what describes the ask in messages.
func Place(t *v1alpha1.InstanceType, ask corev1.ResourceList, free map[string]corev1.ResourceList, pin, what string) Placement {
	if pin != "" {
		f, ok := free[pin]
		if !ok {
			return Placement{Reason: v1alpha1.ClaimReasonNodeNotFound, Message: fmt.Sprintf(
				"node %q is not a Ready, schedulable node of instancetype %s's pool; pin %s to another node or clear spec.nodeName", pin, t.Name, what)}
		}
		if !fits(ask, f) {
			return Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: fmt.Sprintf(
				"node %s has %s free, %s needs %s; it waits until they are released, or clear spec.nodeName", pin, describe(f, ask), what, describe(ask, ask))}
		}
		return Placement{Node: pin}
	}
	names := make([]string, 0, len(free))
	for n := range free {
		names = append(names, n)
	}
	sort.Strings(names)
	best, bestLeft := "", int64(0)
	for _, n := range names {
		if !fits(ask, free[n]) {
			continue
		}
		left := int64(0)
		for name, q := range ask {
			f := free[n][name]
			left += f.Value() - q.Value()
		}
		if best == "" || left < bestLeft {
			best, bestLeft = n, left
		}
	}
	if best != "" {
		return Placement{Node: best}
	}
	if len(names) == 0 {
		return Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: fmt.Sprintf(
			"instancetype %s has no Ready, schedulable node in its pool; %s waits for one", t.Name, what)}
	}
	// The node with the most of the asked resources free, for the message.
	most, mostFree := "", int64(-1)
	for _, n := range names {
		sum := int64(0)
		for name := range ask {
			f := free[n][name]
			sum += max(f.Value(), 0)
		}
		if sum > mostFree {
			most, mostFree = n, sum
		}
	}
	return Placement{Reason: v1alpha1.ClaimReasonCapacity, Message: fmt.Sprintf(
		"no node of instancetype %s's pool has room for all of %s (%s on one node); the most free on one node is %s, on %s",
		t.Name, what, describe(ask, ask), describe(free[most], ask), most)}
}

// describe renders the resources of r that ask names, e.g. "4 nvidia.com/gpu".
func describe(r, ask corev1.ResourceList) string {
	names := make([]string, 0, len(ask))
	for name := range ask {
		names = append(names, string(name))
	}
	sort.Strings(names)
	parts := make([]string, len(names))
	for i, name := range names {
		q := r[corev1.ResourceName(name)]
		parts[i] = fmt.Sprintf("%d %s", max(q.Value(), 0), name)
	}
	return strings.Join(parts, ", ")
}

// sum adds asks together.
func sum(asks ...corev1.ResourceList) corev1.ResourceList {
	out := corev1.ResourceList{}
	for _, a := range asks {
		for name, q := range a {
			s := out[name]
			s.Add(q)
			out[name] = s
		}
	}
	return out
}

// nodeLost says whether a Claim on node must be given up: the node is
// gone, or not Ready for longer than grace. wait is how long until a node
// that is NotReady now would be, zero if it is Ready or already lost.
func nodeLost(node *corev1.Node, now metav1.Time, grace metav1.Duration) (lost bool, wait metav1.Duration) {
	if node == nil {
		return true, metav1.Duration{}
	}
	for _, c := range node.Status.Conditions {
		if c.Type != corev1.NodeReady {
			continue
		}
		if c.Status == corev1.ConditionTrue {
			return false, metav1.Duration{}
		}
		since := now.Sub(c.LastTransitionTime.Time)
		if since >= grace.Duration {
			return true, metav1.Duration{}
		}
		return false, metav1.Duration{Duration: grace.Duration - since}
	}
	// No Ready condition yet: a node still registering is not lost.
	return false, metav1.Duration{}
}
