package instance

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// The ledger of card-hours (issue Q): an Instance is accounted while its
// Pod holds cards, from the Pod's binding to its node until its deletion
// is asked for or its containers end, at the share its Budgets charge.
// An Instance on its Claim's cards accounts nothing: the Claim does.

// observeUsage moves the Instance's ledger on from what this sync saw.
func observeUsage(o *observed, t *v1alpha1.InstanceType, now time.Time) {
	ob := ledger.Observation{Type: o.inst.Spec.Type}
	if pod := o.pod; pod != nil {
		ob.PodUID, ob.Since = pod.UID, boundAt(pod)
		ended, gone := podEnded(pod, now)
		if !o.podDeletedAt.IsZero() {
			ended, gone = o.podDeletedAt, true
		}
		if gone {
			ob.Ended = ended
		} else if _, onClaim := pod.Labels[v1alpha1.LabelClaim]; pod.Spec.NodeName != "" && !o.nodeLost && !onClaim {
			// A Pod rendered on a Claim runs on the cards the Claim is
			// accounted for, also once the Claim lets go (released,
			// lost) while the Pod is on its way out.
			ob.Cards = instanceShare(o.inst, t)
		}
	}
	activity := o.activity
	if activity == nil {
		activity = o.inst.Status.Activity
	}
	// Only measured devices are ever judged idle.
	if activity != nil && activity.Utilization != nil && activity.LastActiveTime != nil {
		ob.LastActive = activity.LastActiveTime.Time
	}
	o.usage = ledger.Observe(o.inst.Status.Usage, ob, now)
}

// boundAt is when the Pod was bound to its node, from its PodScheduled
// condition; its start time without one (a Pod kwok or an older kubelet
// reports differently); zero when not known.
func boundAt(pod *corev1.Pod) time.Time {
	if c := podCondition(pod, corev1.PodScheduled); c != nil && c.Status == corev1.ConditionTrue && !c.LastTransitionTime.IsZero() {
		return c.LastTransitionTime.Time
	}
	if pod.Status.StartTime != nil {
		return pod.Status.StartTime.Time
	}
	return time.Time{}
}

// podEnded says whether the Pod has stopped holding its cards for its
// tenant, and since when, as the Pod records it: the moment its deletion
// was asked for, or the last of its containers ended. A Pod that ended
// without saying when ended now.
func podEnded(pod *corev1.Pod, now time.Time) (time.Time, bool) {
	if d := pod.DeletionTimestamp; d != nil {
		asked := d.Time
		if g := pod.DeletionGracePeriodSeconds; g != nil {
			asked = asked.Add(-time.Duration(*g) * time.Second)
		}
		return asked, true
	}
	if pod.Status.Phase != corev1.PodSucceeded && pod.Status.Phase != corev1.PodFailed {
		return time.Time{}, false
	}
	var last time.Time
	for _, s := range pod.Status.ContainerStatuses {
		if t := s.State.Terminated; t != nil && t.FinishedAt.After(last) {
			last = t.FinishedAt.Time
		}
	}
	if last.IsZero() {
		last = now
	}
	return last, true
}

// deletionAsked is when the API server took the deletion of pod, just
// asked for, as the Pod records it, so that the ledger closes its run on
// the same second the Pod says; now if the Pod is already gone.
func (c *Controller) deletionAsked(ctx context.Context, pod *corev1.Pod) time.Time {
	now := c.now()
	live, err := c.kube.CoreV1().Pods(pod.Namespace).Get(ctx, pod.Name, metav1.GetOptions{})
	if err != nil || live.UID != pod.UID {
		return now
	}
	if asked, ended := podEnded(live, now); ended && !asked.After(now) {
		return asked
	}
	return now
}

// instanceShare is the share of cards the Instance's Budgets charge it;
// a request its type can no longer price counts as its whole cards, as
// the Budget loop counts it.
func instanceShare(inst *v1alpha1.Instance, t *v1alpha1.InstanceType) resource.Quantity {
	var spec gpu.InstanceSpec
	if t == nil || v1alpha1.Convert_v1alpha1_InstanceSpec_To_gpu_InstanceSpec(&inst.Spec, &spec, nil) != nil {
		return resource.Quantity{}
	}
	share, _ := accounting.CountedShare(accounting.InstanceRequest(&spec), t)
	return *resource.NewMilliQuantity(share.MilliCards, resource.DecimalSI)
}
