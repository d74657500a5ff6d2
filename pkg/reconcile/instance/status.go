package instance

import (
	"fmt"
	"slices"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

// Reasons of the Ready condition and of the Events the controller records.
const (
	ReasonPodReady         = "PodReady"
	ReasonStarting         = "Starting"
	ReasonUnschedulable    = "Unschedulable"
	ReasonStopping         = "Stopping"
	ReasonStopped          = "Stopped"
	ReasonDeleting         = "Deleting"
	ReasonFailed           = "Failed"
	ReasonNameConflict     = "NameConflict"
	ReasonInvalid          = "InvalidInstance"
	ReasonAdmissionError   = "UnexpectedAdmissionError"
	ReasonRebuilding       = "Rebuilding"
	ReasonDrained          = "Drained"
	ReasonPodOutOfDate     = "PodOutOfDate"
	ReasonClaimNotAttached = "ClaimNotAttached"
	ReasonNodeLost         = "NodeLost"
	// ReasonPodTerminating: the Pod was deleted and is still there past
	// its grace period; its cards stay charged until it is gone.
	ReasonPodTerminating    = "PodTerminating"
	podAdmissionErrorReason = "UnexpectedAdmissionError"
)

// observed is what one sync saw of an Instance's world. It is all status
// is computed from, so the computation is a pure function.
type observed struct {
	inst *v1alpha1.Instance
	// pod and svc are the objects the Instance owns, nil when absent.
	pod *corev1.Pod
	svc *corev1.Service
	// node is the Node the Pod is bound to, nil when unbound or unknown.
	node *corev1.Node
	// nodeLost says the Pod is bound to a Node that no longer exists: the
	// Pod runs nowhere, whatever its status still says, until the pod
	// garbage collector removes it.
	nodeLost bool
	// problem, when set, is why the controller cannot run the Instance as
	// asked: a same-named object it does not own, a missing type, an
	// admission failure it gave up on. It makes the Instance Failed.
	problem *problem
	// rebuilding says the Pod failed kubelet admission and is rebuilt.
	rebuilding string
	// claimWait says why an Instance on a Claim does not run yet.
	claimWait string
	// devices is the NodeDevices of the Pod's node, nil when none is
	// reported.
	devices *v1alpha1.NodeDevices
	// claim is the Claim the Instance runs on, attached to it; nil if none.
	claim *v1alpha1.Claim
	// podOverdue says the Pod was to be gone by now and is still there.
	podOverdue bool
	// sliceIsolation is what enforces the type's slices, "" when the type
	// is not known or has none.
	sliceIsolation v1alpha1.SliceIsolation
	// activity sums up the use of the running Pod's devices; nil when
	// there is none to report.
	activity *v1alpha1.InstanceActivity
	// stoppedFor is the condition that says why this sync stopped the
	// Instance (IdleStopped, BudgetExhausted); nil when it did not.
	stoppedFor *metav1.Condition
	// podDeletedAt is when this sync asked for the Pod's deletion.
	podDeletedAt time.Time
	// usage is the ledger after this sync; nil keeps the stored one.
	usage *v1alpha1.Usage
}

type problem struct {
	reason, message string
}

// computeStatus derives an Instance's status from what was observed. It
// keeps the condition transition times of the current status, so an
// unchanged state writes nothing.
func computeStatus(o observed) v1alpha1.InstanceStatus {
	inst := o.inst
	st := v1alpha1.InstanceStatus{
		Conditions:         append([]metav1.Condition(nil), inst.Status.Conditions...),
		ObservedGeneration: inst.Generation,
		Allocations:        allocations(inst, o.pod, o.devices, o.sliceIsolation),
	}
	for _, p := range inst.Spec.Ports {
		v1alpha1.SetDefaults_InstancePort(&p)
		ps := v1alpha1.InstancePortStatus{Name: p.Name, Port: p.Port, Protocol: p.Protocol}
		if o.svc != nil {
			for _, sp := range o.svc.Spec.Ports {
				if sp.Name == p.Name && sp.Port == p.Port && sp.Protocol == ps.Protocol {
					ps.NodePort = sp.NodePort
				}
			}
		}
		st.Ports = append(st.Ports, ps)
	}
	if pod := o.pod; pod != nil {
		st.NodeName = pod.Spec.NodeName
		for _, ip := range pod.Status.PodIPs {
			st.PodIPs = append(st.PodIPs, ip.IP)
		}
		st.StartTime = pod.Status.StartTime
	}
	if o.node != nil {
		st.HostIPs = hostIPs(o.node)
	}
	if !inst.Spec.Stopped {
		st.Activity = o.activity
	}
	st.Usage = inst.Status.Usage
	if o.usage != nil {
		st.Usage = o.usage
	}
	if c := o.stoppedFor; c != nil {
		c.ObservedGeneration = inst.Generation
		meta.SetStatusCondition(&st.Conditions, *c)
	}
	if !inst.Spec.Stopped {
		// Started again: why it was stopped is history, in the Events.
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.InstanceConditionIdleStopped)
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.InstanceConditionBudgetExhausted)
	}

	ready := metav1.ConditionFalse
	var reason, message string
	switch {
	case (inst.DeletionTimestamp != nil || inst.Spec.Stopped) && o.podOverdue:
		st.Phase = v1alpha1.InstanceStopping
		if inst.DeletionTimestamp != nil {
			st.Phase = v1alpha1.InstanceDeleting
		}
		reason, message = ReasonPodTerminating, handover.OverdueMessage(o.pod)
	case inst.DeletionTimestamp != nil:
		st.Phase, reason, message = v1alpha1.InstanceDeleting, ReasonDeleting, "the Instance is being deleted; its Pod and Service are removed first"
	case inst.Spec.Stopped && o.pod == nil:
		// Whatever else is wrong, no Pod is left: Budgets release the
		// cards of a stopped Instance on this phase.
		st.Phase, reason, message = v1alpha1.InstanceStopped, ReasonStopped, "stopped; start it with kubectl gpu start, or the instances/start subresource"
		st.NodeName, st.PodIPs, st.HostIPs, st.StartTime = "", nil, nil, nil
	case o.problem != nil:
		st.Phase, reason, message = v1alpha1.InstanceFailed, o.problem.reason, o.problem.message
	case inst.Spec.Stopped:
		st.Phase, reason, message = v1alpha1.InstanceStopping, ReasonStopping, "the Pod is being deleted"
	case o.claimWait != "" && o.pod == nil:
		st.Phase, reason, message = v1alpha1.InstancePending, ReasonClaimNotAttached, o.claimWait
	case o.rebuilding != "":
		st.Phase, reason, message = v1alpha1.InstanceStarting, ReasonRebuilding, o.rebuilding
	case o.pod == nil:
		st.Phase, reason, message = v1alpha1.InstanceStarting, ReasonStarting, "creating the Pod"
	case o.nodeLost:
		st.Phase, reason, message = v1alpha1.InstancePending, ReasonNodeLost, nodeLostMessage(inst, o.pod.Spec.NodeName)
	default:
		st.Phase, reason, message = podPhase(o.pod)
		if st.Phase == v1alpha1.InstanceReady {
			ready = metav1.ConditionTrue
		}
	}
	setDeviceHealthy(&st, o.devices, inst.Generation)
	setClaimDevices(&st, o.claim, inst.Generation)
	message = conditionMessage(message)
	st.Message = message
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type:               v1alpha1.InstanceConditionReady,
		Status:             ready,
		Reason:             conditionReason(reason),
		Message:            message,
		ObservedGeneration: inst.Generation,
	})
	return st
}

// nodeLostMessage says what becomes of an Instance whose node is gone.
func nodeLostMessage(inst *v1alpha1.Instance, node string) string {
	if inst.Spec.ClaimName != "" {
		return fmt.Sprintf("node %s is gone, and claim %s's cards with it; stop the Instance so the Claim is placed again, then start it", node, inst.Spec.ClaimName)
	}
	return fmt.Sprintf("node %s is gone; its Pod is removed and a new one placed on another node", node)
}

// podPhase maps the phase and conditions of a running Pod to the
// Instance's.
func podPhase(pod *corev1.Pod) (v1alpha1.InstancePhase, string, string) {
	if pod.DeletionTimestamp != nil {
		return v1alpha1.InstanceStarting, ReasonStarting, "waiting for the previous Pod to go"
	}
	switch pod.Status.Phase {
	case corev1.PodFailed, corev1.PodSucceeded:
		msg := pod.Status.Message
		if msg == "" {
			msg = fmt.Sprintf("the Pod is %s", pod.Status.Phase)
		}
		reason := pod.Status.Reason
		if reason == "" {
			reason = ReasonFailed
		}
		return v1alpha1.InstanceFailed, reason, msg
	}
	switch c := podCondition(pod, corev1.PodScheduled); {
	case c == nil:
		// Just created: the scheduler has not looked yet.
		return v1alpha1.InstanceStarting, ReasonStarting, "waiting for the scheduler"
	case c.Status != corev1.ConditionTrue:
		msg := c.Message
		if msg == "" {
			msg = "waiting for the scheduler"
		}
		reason := ReasonStarting
		if c.Reason == corev1.PodReasonUnschedulable {
			reason = ReasonUnschedulable
		}
		return v1alpha1.InstancePending, reason, msg
	}
	if c := podCondition(pod, corev1.PodReady); c != nil && c.Status == corev1.ConditionTrue {
		return v1alpha1.InstanceReady, ReasonPodReady, fmt.Sprintf("running on %s", pod.Spec.NodeName)
	}
	for _, cs := range pod.Status.ContainerStatuses {
		if w := cs.State.Waiting; w != nil && w.Reason != "" {
			return v1alpha1.InstanceStarting, ReasonStarting, fmt.Sprintf("container %s: %s: %s", cs.Name, w.Reason, w.Message)
		}
	}
	return v1alpha1.InstanceStarting, ReasonStarting, fmt.Sprintf("scheduled on %s, waiting for it to become ready", pod.Spec.NodeName)
}

func podCondition(pod *corev1.Pod, t corev1.PodConditionType) *corev1.PodCondition {
	for i := range pod.Status.Conditions {
		if pod.Status.Conditions[i].Type == t {
			return &pod.Status.Conditions[i]
		}
	}
	return nil
}

// hostIPs lists a node's addresses users can reach, external ones first.
func hostIPs(node *corev1.Node) []string {
	var ips []string
	for _, t := range []corev1.NodeAddressType{corev1.NodeExternalIP, corev1.NodeInternalIP} {
		for _, a := range node.Status.Addresses {
			if a.Type == t {
				ips = append(ips, a.Address)
			}
		}
	}
	return ips
}

// admissionFailed says whether the kubelet refused the Pod at admission,
// e.g. a device plugin that could not allocate the devices.
func admissionFailed(pod *corev1.Pod) bool {
	return pod != nil && pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == podAdmissionErrorReason
}

// maxConditionMessage is the longest message metav1.Condition accepts.
const maxConditionMessage = 32 * 1024

// conditionReason makes a reason taken from a Pod, such as the kubelet's
// "OutOfnvidia.com/gpu", one that metav1.Condition accepts (a letter, then
// letters, digits, '_', ',' or ':', not ending in ',' or ':', at most 1024
// bytes): otherwise every status write would be refused, forever. Other
// characters become '_'.
func conditionReason(r string) string {
	b := []byte(r)
	if len(b) > 1024 {
		b = b[:1024]
	}
	for i, c := range b {
		switch {
		case c >= 'a' && c <= 'z', c >= 'A' && c <= 'Z':
		case i > 0 && (c >= '0' && c <= '9' || c == '_' || c == ',' || c == ':'):
		default:
			b[i] = '_'
		}
	}
	if n := len(b); n > 0 && (b[n-1] == ',' || b[n-1] == ':') {
		b[n-1] = '_'
	}
	if len(b) == 0 || b[0] == '_' {
		return "Pod" + string(b)
	}
	return string(b)
}

// conditionMessage cuts a message to the length metav1.Condition accepts,
// on a rune boundary.
func conditionMessage(m string) string {
	if len(m) <= maxConditionMessage {
		return m
	}
	const cut = "… (truncated)"
	m = m[:maxConditionMessage-len(cut)]
	for len(m) > 0 && !utf8.ValidString(m) {
		m = m[:len(m)-1]
	}
	return m + cut
}

// allocations are the devices the node agent reports the Pod holds, by
// index, with what keeps the Instance to its share of each; sliced is
// what the type says enforces its slices.
func allocations(inst *v1alpha1.Instance, pod *corev1.Pod, nd *v1alpha1.NodeDevices, sliced v1alpha1.SliceIsolation) []v1alpha1.DeviceAllocation {
	if pod == nil || nd == nil || nd.Name != pod.Spec.NodeName {
		return nil
	}
	var out []v1alpha1.DeviceAllocation
	for _, d := range nd.Status.Devices {
		if d.Holder == nil || d.Holder.PodUID != pod.UID {
			continue
		}
		a := v1alpha1.DeviceAllocation{Device: d.UUID, Index: d.Index, PCIBusID: d.PCIBusID,
			Mode: v1alpha1.AllocationExclusive, Isolation: v1alpha1.IsolationExclusive}
		switch s := inst.Spec.Resources.Slice; {
		case d.Profile != "":
			a.Mode, a.Profile, a.Isolation = v1alpha1.AllocationPartition, d.Profile, v1alpha1.IsolationMIG
		case s != nil:
			a.Mode, a.MemoryPercent, a.CoresPercent = v1alpha1.AllocationSlice, s.MemoryPercent, s.CoresPercent
			a.Isolation = v1alpha1.AllocationIsolation(sliced)
		}
		out = append(out, a)
	}
	sort.Slice(out, func(i, j int) bool {
		if out[i].Index != out[j].Index {
			return out[i].Index < out[j].Index
		}
		return out[i].Device < out[j].Device
	})
	return out
}

// Reasons of the DeviceHealthy condition.
const (
	ReasonDevicesHealthy  = "DevicesHealthy"
	ReasonDeviceUnhealthy = "DeviceUnhealthy"
)

// setDeviceHealthy reports, for the devices in st.Allocations, whether the
// node agent says each is healthy; without allocations there is no
// condition.
func setDeviceHealthy(st *v1alpha1.InstanceStatus, nd *v1alpha1.NodeDevices, generation int64) {
	if len(st.Allocations) == 0 || nd == nil {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.InstanceConditionDeviceHealthy)
		return
	}
	c := metav1.Condition{
		Type: v1alpha1.InstanceConditionDeviceHealthy, Status: metav1.ConditionTrue, ObservedGeneration: generation,
		Reason: ReasonDevicesHealthy, Message: "every device the Instance holds is healthy",
	}
	var bad []string
	for _, a := range st.Allocations {
		for _, d := range nd.Status.Devices {
			if d.UUID == a.Device && d.Health != v1alpha1.DeviceHealthy {
				bad = append(bad, fmt.Sprintf("device %s (index %d) on %s is unhealthy: %s", d.UUID, d.Index, nd.Name, d.Reason))
			}
		}
	}
	if len(bad) > 0 {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonDeviceUnhealthy
		c.Message = conditionMessage(strings.Join(bad, "; ") + "; stop and start the Instance to run on healthy devices")
	}
	meta.SetStatusCondition(&st.Conditions, c)
}

// Reasons of the ClaimDevices condition.
const (
	ReasonClaimDevices    = "ClaimDevices"
	ReasonNotClaimDevices = "NotClaimDevices"
)

// setClaimDevices checks the devices the Pod got against those its Claim
// holds, once both are reported (a Claim on a node no agent reports names
// units, not devices, and is not checked).
func setClaimDevices(st *v1alpha1.InstanceStatus, cl *v1alpha1.Claim, generation int64) {
	var got []string
	for _, a := range st.Allocations {
		got = append(got, a.Device)
	}
	if cl == nil || len(got) == 0 || len(cl.Status.Devices) == 0 || slices.ContainsFunc(cl.Status.Devices, func(d string) bool { return strings.Contains(d, "/") }) {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.InstanceConditionClaimDevices)
		return
	}
	held := slices.Sorted(slices.Values(cl.Status.Devices))
	slices.Sort(got)
	c := metav1.Condition{
		Type: v1alpha1.InstanceConditionClaimDevices, Status: metav1.ConditionTrue, ObservedGeneration: generation,
		Reason: ReasonClaimDevices, Message: fmt.Sprintf("the Pod got the devices claim %s holds", cl.Name),
	}
	if !slices.Equal(got, held) {
		c.Status, c.Reason = metav1.ConditionFalse, ReasonNotClaimDevices
		c.Message = conditionMessage(fmt.Sprintf("the Pod got %s; claim %s holds %s: stop and start the Instance to run on the Claim's devices",
			strings.Join(got, ", "), cl.Name, strings.Join(held, ", ")))
	}
	meta.SetStatusCondition(&st.Conditions, c)
}
