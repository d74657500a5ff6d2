// Package instancetype is the controller loop that reports each
// InstanceType's pool in its status: the Nodes its Instances can run on,
// their cards, and what the Pods bound to them leave free. This file is the
// computation, a pure function of the type, the Nodes and the Pods.
package instancetype

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/pool"
)

// ConditionAvailable is True while the pool has room for one more Instance
// of the type: a free card or partition, or for a CPU-only type a node. It
// does not look at spec.hold; status.phase reports that.
const ConditionAvailable = "Available"

// Reasons of the Available condition.
const (
	ReasonCapacityAvailable = "CapacityAvailable"
	ReasonNoCapacity        = "NoCapacity"
	ReasonNoNodes           = "NoNodes"
)

// countedResources are the resources whose use changes the type's
// capacity: its card resource and its partitions'.
func countedResources(t *v1alpha1.InstanceType) []corev1.ResourceName {
	var names []corev1.ResourceName
	if r := pool.CardResource(t); r != "" {
		names = append(names, r)
	}
	if a := t.Spec.Accelerator; a != nil {
		for _, p := range a.Partitions {
			names = append(names, corev1.ResourceName(p.ResourceName))
		}
	}
	return names
}

// Phase is Draining for a type being drained or deleted, Held for one on
// hold, Active otherwise.
func Phase(t *v1alpha1.InstanceType) v1alpha1.InstanceTypePhase {
	switch {
	case t.DeletionTimestamp != nil || t.Spec.Hold == v1alpha1.HoldDrain:
		return v1alpha1.InstanceTypeDraining
	case t.Spec.Hold == v1alpha1.HoldNew:
		return v1alpha1.InstanceTypeHeld
	}
	return v1alpha1.InstanceTypeActive
}

// statusOf is the status the type should have with capacity. It starts
// from the type's current conditions and sets Available through
// meta.SetStatusCondition, so now becomes its lastTransitionTime only when
// its status flips, and an unchanged pool gives a status equal to the
// current one.
func statusOf(t *v1alpha1.InstanceType, capacity v1alpha1.InstanceTypeCapacity, now metav1.Time) v1alpha1.InstanceTypeStatus {
	st := v1alpha1.InstanceTypeStatus{
		Phase:              Phase(t),
		Capacity:           capacity,
		Conditions:         slices.Clone(t.Status.Conditions),
		ObservedGeneration: t.Generation,
	}
	cond := available(t, st.Capacity)
	cond.ObservedGeneration = t.Generation
	cond.LastTransitionTime = now
	meta.SetStatusCondition(&st.Conditions, cond)
	return st
}

// available is the Available condition for a pool of capacity c.
func available(t *v1alpha1.InstanceType, c v1alpha1.InstanceTypeCapacity) metav1.Condition {
	cond := metav1.Condition{Type: ConditionAvailable, Status: metav1.ConditionFalse}
	if c.Nodes == 0 {
		cond.Reason = ReasonNoNodes
		cond.Message = fmt.Sprintf("instancetype %s has no Ready, uncordoned node in its pool (%s): "+
			"label nodes to match spec.nodeSelector, or check spec.tolerations against their taints", t.Name, poolDescription(t))
		return cond
	}
	if t.Spec.Accelerator == nil {
		cond.Status = metav1.ConditionTrue
		cond.Reason = ReasonCapacityAvailable
		cond.Message = fmt.Sprintf("%d nodes in the pool", c.Nodes)
		return cond
	}
	free, total := c.FreeCards, c.Cards
	for _, p := range c.Partitions {
		free += p.Free
		total += p.Total
	}
	switch {
	case len(countedResources(t)) == 0:
		cond.Reason = ReasonNoCapacity
		cond.Message = fmt.Sprintf("instancetype %s names no card or partition resource in spec.accelerator to count", t.Name)
	case total == 0:
		cond.Reason = ReasonNoCapacity
		cond.Message = fmt.Sprintf("the %d nodes in the pool of instancetype %s offer none of %s: check that the device plugin runs there",
			c.Nodes, t.Name, resourceList(countedResources(t)))
	case free == 0:
		cond.Reason = ReasonNoCapacity
		cond.Message = fmt.Sprintf("everything is in use: %s", capacityDescription(c))
	default:
		cond.Status = metav1.ConditionTrue
		cond.Reason = ReasonCapacityAvailable
		cond.Message = capacityDescription(c)
	}
	return cond
}

// poolDescription lists the labels a pool node carries, for messages.
func poolDescription(t *v1alpha1.InstanceType) string {
	pairs := make([]string, 0, len(t.Spec.NodeSelector)+1)
	for k, v := range t.Spec.NodeSelector {
		pairs = append(pairs, k+"="+v)
	}
	if a := t.Spec.Accelerator; a != nil {
		if label, ok := pool.ModelLabel(a.Vendor); ok && !slices.Contains(pairs, label+"="+a.Model) {
			pairs = append(pairs, label+"="+a.Model)
		}
	}
	if len(pairs) == 0 {
		return "every node"
	}
	sort.Strings(pairs)
	return "nodes labelled " + strings.Join(pairs, ",")
}

func capacityDescription(c v1alpha1.InstanceTypeCapacity) string {
	parts := []string{fmt.Sprintf("%d of %d cards free on %d nodes", c.FreeCards, c.Cards, c.Nodes)}
	for _, p := range c.Partitions {
		parts = append(parts, fmt.Sprintf("%d of %d %s partitions free", p.Free, p.Total, p.Name))
	}
	return strings.Join(parts, ", ")
}

func resourceList(names []corev1.ResourceName) string {
	s := make([]string, len(names))
	for i, n := range names {
		s[i] = string(n)
	}
	return strings.Join(s, ", ")
}

// usesCounted reports whether requests touch any resource counted for t.
func usesCounted(t *v1alpha1.InstanceType, requests corev1.ResourceList) bool {
	for _, name := range countedResources(t) {
		if q, ok := requests[name]; ok && !q.IsZero() {
			return true
		}
	}
	return false
}

// HealthyAllocatable returns the nodes as their kubelets report them once
// each hears from its device plugin: for every resource a node's
// NodeDevices lists, allocatable is at most its healthy devices. A real
// kubelet lowers allocatable itself, and taking the lesser of the two
// counts it once; a simulated node's does not. Nodes without a report are
// returned as they are.
func HealthyAllocatable(nodes []*corev1.Node, devices func(node string) *v1alpha1.NodeDevices) []*corev1.Node {
	out := make([]*corev1.Node, 0, len(nodes))
	for _, n := range nodes {
		nd := devices(n.Name)
		if nd == nil {
			out = append(out, n)
			continue
		}
		healthy := map[corev1.ResourceName]int64{}
		for _, d := range nd.Status.Devices {
			if _, ok := healthy[corev1.ResourceName(d.Resource)]; !ok {
				healthy[corev1.ResourceName(d.Resource)] = 0
			}
			if d.Health == v1alpha1.DeviceHealthy {
				healthy[corev1.ResourceName(d.Resource)]++
			}
		}
		var cp *corev1.Node
		for name, h := range healthy {
			if a, ok := n.Status.Allocatable[name]; ok && a.Value() > h {
				if cp == nil {
					cp = n.DeepCopy()
				}
				cp.Status.Allocatable[name] = *resource.NewQuantity(h, resource.DecimalSI)
			}
		}
		if cp == nil {
			cp = n
		}
		out = append(out, cp)
	}
	return out
}
