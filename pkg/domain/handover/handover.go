// Package handover holds the rules by which a Claim's cards pass between
// Pods (its holder and its Instance's Pod) without another Pod taking them
// meanwhile: the holder's name, the pin to one node, the scheduling gate
// and nomination that keep the room, and when a Pod that had the cards is
// overdue to be gone. The Claim and Instance loops both follow them.
package handover

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

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

// Ungate lets the scheduler bind the Pod, writing as manager.
func Ungate(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, manager string) error {
	if !Gated(pod) {
		return nil
	}
	cp := pod.DeepCopy()
	cp.Spec.SchedulingGates = slices.DeleteFunc(cp.Spec.SchedulingGates, func(g corev1.PodSchedulingGate) bool { return g.Name == HandOverGate })
	_, err := kube.CoreV1().Pods(pod.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: manager})
	return err
}

// Nominate sets the Pod's nominatedNodeName, writing as manager. The PriorityClass's
// preemptionPolicy Never is what keeps the scheduler from clearing it
// when the Pod does not fit yet.
func Nominate(ctx context.Context, kube kubernetes.Interface, pod *corev1.Pod, node, manager string) error {
	if pod.Spec.NodeName != "" || pod.Status.NominatedNodeName == node {
		return nil
	}
	patch := fmt.Sprintf(`{"status":{"nominatedNodeName":%q}}`, node)
	_, err := kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch),
		metav1.PatchOptions{FieldManager: manager}, "status")
	if apierrors.IsInvalid(err) {
		// The scheduler bound it first: the room is the Pod's already.
		return nil
	}
	return err
}

// WaitingReason is the reason of the Claim's Waiting condition, "" if none.
func WaitingReason(cl *v1alpha1.Claim) string {
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClaimConditionWaiting); cond != nil {
		return cond.Reason
	}
	return ""
}

// WaitingMessage is the message of the Claim's Waiting condition, "" if none.
func WaitingMessage(cl *v1alpha1.Claim) string {
	if cond := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClaimConditionWaiting); cond != nil {
		return cond.Message
	}
	return ""
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
				v1alpha1.LabelClaim:            c.Name,
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
