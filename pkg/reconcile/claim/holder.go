package claim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// FieldManager owns what the claim loop writes.
const FieldManager = "kiln-claim-controller"

// holderSuffix names a Claim's holder Pod after the Claim.
const holderSuffix = "-hold"

// HolderName is the name of the Pod that holds a Claim's cards. It is
// fixed, so a create the informer has not seen yet cannot make a second.
func HolderName(c *v1alpha1.Claim) string {
	name := c.Name
	if max := 253 - len(holderSuffix); len(name) > max {
		name = strings.TrimRight(name[:max], ".-")
	}
	return name + holderSuffix
}

// PinTo is the affinity that keeps a Pod to exactly one node. It names the
// node by metadata.name, as the DaemonSet controller does, so it does not
// depend on the node's labels, and the scheduler still checks the room.
func PinTo(node string) *corev1.Affinity {
	return &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{
					Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{node},
				}},
			}},
		},
	}}
}

// PinnedNode is the node a Pod made with PinTo is kept to, "" for another Pod.
func PinnedNode(pod *corev1.Pod) string {
	a := pod.Spec.Affinity
	if a == nil || a.NodeAffinity == nil || a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution == nil {
		return ""
	}
	for _, term := range a.NodeAffinity.RequiredDuringSchedulingIgnoredDuringExecution.NodeSelectorTerms {
		for _, f := range term.MatchFields {
			if f.Key == "metadata.name" && f.Operator == corev1.NodeSelectorOpIn && len(f.Values) == 1 {
				return f.Values[0]
			}
		}
	}
	return ""
}

// Reserves says whether pod has node's room for itself: bound there, or
// nominated there, which the scheduler honours for every Pod of lower
// priority (everything but other Claims' Pods).
func Reserves(pod *corev1.Pod, node string) bool {
	return pod != nil && pod.DeletionTimestamp == nil &&
		(pod.Spec.NodeName == node || (pod.Spec.NodeName == "" && pod.Status.NominatedNodeName == node))
}

// StuckAfter is how long past its deletion deadline (the deletion
// timestamp, which includes the grace period) a deleted Pod may stay before
// the loop that deleted it says it is stuck. A kubelet that stops the
// containers confirms within seconds.
const StuckAfter = 30 * time.Second

// Overdue says whether a deleted Pod is still there past StuckAfter, and
// if not yet, how long until it is; false and 0 for a Pod not deleted.
func Overdue(pod *corev1.Pod, now time.Time) (bool, time.Duration) {
	if pod == nil || pod.DeletionTimestamp == nil {
		return false, 0
	}
	left := pod.DeletionTimestamp.Add(StuckAfter).Sub(now)
	return left <= 0, max(left, 0)
}

// OverdueMessage says that an overdue Pod is stuck, and what to do.
func OverdueMessage(pod *corev1.Pod) string {
	node := pod.Spec.NodeName
	if node == "" {
		node = "no node"
	}
	return fmt.Sprintf("Pod %s on %s was to be gone by %s and is still Terminating; its cards stay charged until it is gone: check the node's kubelet, or delete the Node if it is gone for good",
		pod.Name, node, pod.DeletionTimestamp.UTC().Format(time.RFC3339))
}

// HandOverGate keeps a Pod that takes a Claim's cards over from another
// Pod of the Claim (from its holder, or back from its Instance's Pod)
// unbound until that Pod is gone. Bound at once, on a node with room for
// both, it would get other devices from the kubelet than the Claim holds;
// gated and nominated, it has the room kept meanwhile (the scheduler
// records a gated Pod's nomination too).
const HandOverGate = "gpu.kiln.dev/claim-handover"

// Gated says whether the Pod waits behind HandOverGate.
func Gated(pod *corev1.Pod) bool {
	return slices.ContainsFunc(pod.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == HandOverGate })
}

// Ungate lets the scheduler bind the Pod.
func Ungate(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod) error {
	if !Gated(pod) {
		return nil
	}
	cp := pod.DeepCopy()
	cp.Spec.SchedulingGates = slices.DeleteFunc(cp.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == HandOverGate })
	_, err := kube.CoreV1().Pods(pod.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: FieldManager})
	return err
}

// Nominate sets the Pod's nominatedNodeName. The PriorityClass's
// preemptionPolicy Never is what keeps the scheduler from clearing it
// when the Pod does not fit yet.
func Nominate(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node string) error {
	if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName == node {
		return nil
	}
	patch := fmt.Sprintf(`{"status":{"nominatedNodeName":%q}}`, node)
	_, err := kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: FieldManager}, "status")
	if apierrors.IsInvalid(err) {
		// The scheduler bound it first: the room is the Pod's already.
		return nil
	}
	return err
}

// RenderHolder builds the Pod that holds a Claim's ask on node: the
// smallest container there is, asking for exactly the claimed resources,
// at the Claims' priority, owned by the Claim.
func RenderHolder(c *v1alpha1.Claim, t *v1alpha1.InstanceType, node string, ask corev1.ResourceList, image string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Name:      HolderName(c),
			Namespace: c.Namespace,
			Labels: map[string]string{
				LabelClaim:                     c.Name,
				"app.kubernetes.io/managed-by": "kiln-controller",
			},
			OwnerReferences: []metav1.OwnerReference{{
				APIVersion:         v1alpha1.SchemeGroupVersion.String(),
				Kind:               "Claim",
				Name:               c.Name,
				UID:                c.UID,
				Controller:         ptr.To(true),
				BlockOwnerDeletion: ptr.To(true),
			}},
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name:  "hold",
				Image: image,
				Resources: corev1.ResourceRequirements{
					Requests: ask.DeepCopy(),
					Limits:   ask.DeepCopy(),
				},
			}},
			NodeSelector:                  t.Spec.NodeSelector,
			Affinity:                      PinTo(node),
			Tolerations:                   t.Spec.Tolerations,
			PriorityClassName:             v1alpha1.ClaimPriorityClassName,
			RestartPolicy:                 corev1.RestartPolicyAlways,
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			AutomountServiceAccountToken:  ptr.To(false),
			EnableServiceLinks:            ptr.To(false),
		},
	}
}

// controlledBy says whether the Claim is the controller of pod.
func controlledBy(pod *corev1.Pod, c *v1alpha1.Claim) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == c.UID
}

// heldDevices is what the Claim holds on node: the devices the node
// agent reports its holder Pod got; until the report comes, or with no
// holder (attached), what it held before; unit names made up from the
// holder's name on a node no agent reports.
func (c *Controller) heldDevices(cl *v1alpha1.Claim, ask corev1.ResourceList, node string, holder *corev1.Pod) []string {
	nd, err := c.devices.Get(node)
	if err != nil {
		return devices(cl, ask)
	}
	var got []string
	for _, d := range nd.Status.Devices {
		if holder != nil && d.Holder != nil && d.Holder.PodUID == holder.UID {
			got = append(got, d.UUID)
		}
	}
	if len(got) > 0 {
		sort.Strings(got)
		return got
	}
	if cl.Status.NodeName == node {
		return cl.Status.Devices
	}
	return nil
}

// devices names what a Claim holds on a node no agent reports: one entry
// per unit, named after the holder Pod.
func devices(c *v1alpha1.Claim, ask corev1.ResourceList) []string {
	var out []string
	for name, q := range ask {
		for i := int64(0); i < q.Value(); i++ {
			out = append(out, fmt.Sprintf("%s/%s/%d", HolderName(c), name, i))
		}
	}
	return out
}
