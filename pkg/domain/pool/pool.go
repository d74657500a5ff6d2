// Package pool says which Nodes make up an InstanceType's pool and what
// the scheduler counts against them: the rules the InstanceType loop counts
// capacity by and the Claim loop places by, so the two agree.
package pool

import (
	"slices"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// modelLabels names, per vendor, the node label that carries the card
// model. NVIDIA's is set by GPU feature discovery. Other vendors have no
// label we can rely on, so their pool is the nodeSelector alone and the
// admin selects the model there.
var modelLabels = map[string]string{
	"nvidia": "nvidia.com/gpu.product",
}

// InPool reports whether node carries every label of the type's
// nodeSelector and, for a vendor with a known model label, the model. It
// says nothing about whether the node can take Pods now.
func InPool(t *v1alpha1.InstanceType, node *corev1.Node) bool {
	for k, v := range t.Spec.NodeSelector {
		if got, ok := node.Labels[k]; !ok || got != v {
			return false
		}
	}
	if a := t.Spec.Accelerator; a != nil {
		if label, ok := modelLabels[a.Vendor]; ok && node.Labels[label] != a.Model {
			return false
		}
	}
	return true
}

// Schedulable reports whether the scheduler would place a Pod of the type
// on node: Ready, not cordoned, and no NoSchedule or NoExecute taint the
// type's tolerations miss. Nodes that are not contribute nothing.
func Schedulable(t *v1alpha1.InstanceType, node *corev1.Node) bool {
	if node.Spec.Unschedulable || !NodeReady(node) {
		return false
	}
	for i := range node.Spec.Taints {
		taint := &node.Spec.Taints[i]
		if taint.Effect == corev1.TaintEffectPreferNoSchedule {
			continue
		}
		// Gt and Lt tolerations only pass validation where the cluster
		// enables them, so honouring them here is safe.
		tolerated := slices.ContainsFunc(t.Spec.Tolerations, func(tol corev1.Toleration) bool {
			return tol.ToleratesTaint(klog.Background(), taint, true)
		})
		if !tolerated {
			return false
		}
	}
	return true
}

// NodeReady says whether the node reports Ready.
func NodeReady(node *corev1.Node) bool {
	for _, c := range node.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// CardResource is the extended resource that counts whole cards: the
// exclusive one, else the one slices sit on. "" for a CPU-only or a
// partitions-only type, which have no whole cards to offer.
func CardResource(t *v1alpha1.InstanceType) corev1.ResourceName {
	a := t.Spec.Accelerator
	switch {
	case a == nil:
		return ""
	case a.Exclusive != nil && a.Exclusive.ResourceName != "":
		return corev1.ResourceName(a.Exclusive.ResourceName)
	case a.Sliced != nil && a.Sliced.ResourceName != "":
		return corev1.ResourceName(a.Sliced.ResourceName)
	}
	return ""
}

// Occupies reports whether the scheduler counts the Pod against its node:
// bound and not finished.
func Occupies(p *corev1.Pod) bool {
	return p.Spec.NodeName != "" && p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed
}

// PodRequests is what the scheduler reserves for a Pod: its containers
// together or its largest init container, whichever is more, where an init
// container with restartPolicy Always (a sidecar) keeps running beside
// everything started after it; plus the runtime class overhead. It reads
// the spec only, so the allocation of a Pod being resized in place is not
// looked at.
func PodRequests(p *corev1.Pod) corev1.ResourceList {
	reqs := corev1.ResourceList{}
	for i := range p.Spec.Containers {
		AddResources(reqs, containerRequests(&p.Spec.Containers[i]))
	}
	sidecars := corev1.ResourceList{}
	initPeak := corev1.ResourceList{}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		r := containerRequests(c)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			AddResources(reqs, r)
			AddResources(sidecars, r)
			r = sidecars.DeepCopy()
		} else {
			AddResources(r, sidecars)
		}
		maxResources(initPeak, r)
	}
	maxResources(reqs, initPeak)
	AddResources(reqs, p.Spec.Overhead)
	return reqs
}

// PodRequest is PodRequests' figure for one resource, in thousandths,
// without building the list: a placement reads one or two resources of
// every Pod of a pool, and the lists were most of what it allocated.
func PodRequest(p *corev1.Pod, name corev1.ResourceName) int64 {
	var reqs, sidecars, initPeak int64
	for i := range p.Spec.Containers {
		reqs += containerRequest(&p.Spec.Containers[i], name)
	}
	for i := range p.Spec.InitContainers {
		c := &p.Spec.InitContainers[i]
		r := containerRequest(c, name)
		if c.RestartPolicy != nil && *c.RestartPolicy == corev1.ContainerRestartPolicyAlways {
			reqs += r
			sidecars += r
			r = sidecars
		} else {
			r += sidecars
		}
		initPeak = max(initPeak, r)
	}
	reqs = max(reqs, initPeak)
	if q, ok := p.Spec.Overhead[name]; ok {
		reqs += q.MilliValue()
	}
	return reqs
}

// containerRequest is one resource of containerRequests, in thousandths.
func containerRequest(c *corev1.Container, name corev1.ResourceName) int64 {
	if q, ok := c.Resources.Requests[name]; ok {
		return q.MilliValue()
	}
	if q, ok := c.Resources.Limits[name]; ok {
		return q.MilliValue()
	}
	return 0
}

// containerRequests are the container's requests, with its limits standing
// in where a request is absent, as API defaulting does.
func containerRequests(c *corev1.Container) corev1.ResourceList {
	r := c.Resources.Requests.DeepCopy()
	if r == nil {
		r = corev1.ResourceList{}
	}
	for name, q := range c.Resources.Limits {
		if _, ok := r[name]; !ok {
			r[name] = q.DeepCopy()
		}
	}
	return r
}

// AddResources adds r into into.
func AddResources(into, r corev1.ResourceList) {
	for name, q := range r {
		sum := into[name]
		sum.Add(q)
		into[name] = sum
	}
}

// maxResources raises each of into's quantities to r's where that is more.
func maxResources(into, r corev1.ResourceList) {
	for name, q := range r {
		if cur, ok := into[name]; !ok || q.Cmp(cur) > 0 {
			into[name] = q.DeepCopy()
		}
	}
}

// ModelLabel is the node label that carries the card model of vendor, if
// Kiln knows one.
func ModelLabel(vendor string) (string, bool) {
	l, ok := modelLabels[vendor]
	return l, ok
}
