package instance

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// Idle stop (issue Q): an Instance whose devices have all been idle past
// its limit is stopped the way Drain stops one, through spec.stopped, so
// that it stays stopped until its tenant starts it again. Idleness is what
// the node agent measures on the devices the Instance's Pod holds, never
// the Pod's own activity.

// ReasonIdleLimit is the reason of the IdleStopped condition and of the
// Warning Event of an idle stop.
const ReasonIdleLimit = "IdleLimit"

// activityRefresh is how far a device's activity must move
// status.activity.lastActiveTime forward before it is written again: a
// busy device would otherwise cost a status write at every sync.
const activityRefresh = time.Minute

// activity is what the devices a Pod holds report of their use.
type activity struct {
	// status is what the Instance's status says of it.
	status *v1alpha1.InstanceActivity
	// last is when a device was last active, exactly as known now; status
	// may keep an older time within activityRefresh of it.
	last time.Time
	// measured says every device reports a utilization: only then is the
	// Instance judged idle. A device no backend samples (an MPS share, a
	// MIG device without GPM) is never taken for an idle one.
	measured bool
}

// observeActivity sums up the devices pod holds on nd. prev is the
// Instance's status.activity so far; what it says from before the Pod
// started does not count. threshold is the type's activeThreshold.
func observeActivity(prev *v1alpha1.InstanceActivity, pod *corev1.Pod, nd *v1alpha1.NodeDevices, threshold *int32, now time.Time) activity {
	if pod == nil || pod.Status.StartTime == nil || nd == nil || nd.Name != pod.Spec.NodeName {
		return activity{}
	}
	start := pod.Status.StartTime.Time
	last := start
	// What status said counts from this Pod's start, and never past now:
	// a time ahead (a replica's clock, a bad write) would hold off the
	// idle stop for as long.
	if prev != nil && prev.LastActiveTime != nil && prev.LastActiveTime.After(last) && !prev.LastActiveTime.After(now) {
		last = prev.LastActiveTime.Time
	}
	above := int32(v1alpha1.DefaultActiveThreshold)
	if threshold != nil {
		above = *threshold
	}
	var (
		held        int
		measured    = true
		utilization *int32
		memory      = resource.Quantity{}
		memoryKnown = true
		activeNow   bool
	)
	for _, d := range nd.Status.Devices {
		if d.Holder == nil || d.Holder.PodUID != pod.UID {
			continue
		}
		held++
		if d.Utilization == nil {
			measured = false
		} else {
			if utilization == nil || *d.Utilization > *utilization {
				utilization = ptr.To(*d.Utilization)
			}
			if *d.Utilization > above {
				activeNow = true
			}
		}
		if d.MemoryUsed == nil {
			memoryKnown = false
		} else {
			memory.Add(*d.MemoryUsed)
		}
		// The agent's own word counts only when it is the judge: with
		// the type's threshold, a device busy enough for the agent may
		// still be idle for the type.
		if threshold == nil && d.LastActiveTime != nil && d.LastActiveTime.After(last) {
			// A node's clock a little ahead does not make it busy later.
			last = d.LastActiveTime.Time
			if last.After(now) {
				last = now
			}
		}
	}
	if held == 0 {
		return activity{}
	}
	stored := last
	if activeNow {
		// Busy now: the exact time is now, written once it has moved a
		// minute past what was.
		if now.Sub(last) >= activityRefresh {
			stored = now
		}
		last = now
	}
	st := &v1alpha1.InstanceActivity{LastActiveTime: &metav1.Time{Time: stored}, Utilization: utilization}
	if memoryKnown {
		st.MemoryUsed = &memory
	}
	return activity{status: st, last: last, measured: measured}
}

// idleLimit is how long the Instance's devices may sit idle, 0 for no
// limit, and where it comes from, for messages.
func idleLimit(inst *v1alpha1.Instance, t *v1alpha1.InstanceType) (time.Duration, string) {
	var limit time.Duration
	var from string
	if t != nil && t.Spec.Idle != nil {
		limit, from = t.Spec.Idle.StopAfter.Duration, fmt.Sprintf("instancetype %s's spec.idle.stopAfter", t.Name)
	}
	if l := inst.Spec.IdleStopAfter; l != nil && (limit == 0 || l.Duration < limit) {
		limit, from = l.Duration, "its spec.idleStopAfter"
	}
	return limit, from
}

// idleVerdict says whether the Instance is due to be stopped for
// idleness at now, and if not, how long until it would be, 0 for never.
// The limit counts from the last activity, or the Pod's start; no stop
// comes before the type's minRunTime has passed since that start.
func idleVerdict(inst *v1alpha1.Instance, t *v1alpha1.InstanceType, pod *corev1.Pod, act activity, now time.Time) (due bool, after time.Duration) {
	limit, _ := idleLimit(inst, t)
	if limit <= 0 || !act.measured || pod == nil || pod.Status.StartTime == nil {
		return false, 0
	}
	deadline := act.last.Add(limit)
	if t != nil && t.Spec.Idle != nil && t.Spec.Idle.MinRunTime != nil {
		if earliest := pod.Status.StartTime.Add(t.Spec.Idle.MinRunTime.Duration); earliest.After(deadline) {
			deadline = earliest
		}
	}
	if left := deadline.Sub(now); left > 0 {
		return false, left
	}
	return true, 0
}

// idleStop stops the Instance through spec.stopped and says why in a
// Warning Event; why also goes into its IdleStopped condition.
func (c *Controller) idleStop(ctx context.Context, inst *v1alpha1.Instance, t *v1alpha1.InstanceType, act activity, now time.Time) (*v1alpha1.Instance, string, error) {
	limit, from := idleLimit(inst, t)
	idleFor := now.Sub(act.last).Round(time.Second)
	why := fmt.Sprintf("every device it held was idle since %s (%s), past its idle limit of %s (%s); start it again with kubectl gpu start %s",
		act.last.UTC().Format(time.RFC3339), idleFor, limit, from, inst.Name)
	cp := inst.DeepCopy()
	cp.Spec.Stopped = true
	updated, err := c.kiln.GpuV1alpha1().Instances(inst.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy})
	if err != nil {
		return nil, "", err
	}
	c.recorder.Event(updated, corev1.EventTypeWarning, ReasonIdleLimit, "Stopped: "+why)
	return updated, why, nil
}
