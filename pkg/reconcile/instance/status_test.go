package instance

import (
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	"github.com/google/go-cmp/cmp/cmpopts"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

var started = metav1.NewTime(time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC))

// podOn is a Pod bound to node gpu-1 with the given conditions.
func podOn(phase corev1.PodPhase, conds ...corev1.PodCondition) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a", UID: "pod-1"},
		Spec:       corev1.PodSpec{NodeName: "gpu-1"},
		Status: corev1.PodStatus{
			Phase: phase, Conditions: conds, StartTime: &started,
			PodIPs: []corev1.PodIP{{IP: "10.244.1.5"}, {IP: "fd00:10:244::5"}},
		},
	}
}

func scheduled() corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionTrue}
}

func ready() corev1.PodCondition {
	return corev1.PodCondition{Type: corev1.PodReady, Status: corev1.ConditionTrue}
}

func gpuNode() *corev1.Node {
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: "gpu-1", Labels: map[string]string{corev1.LabelHostname: "gpu-1"}},
		Status: corev1.NodeStatus{Addresses: []corev1.NodeAddress{
			{Type: corev1.NodeHostName, Address: "gpu-1"},
			{Type: corev1.NodeInternalIP, Address: "10.0.0.7"},
			{Type: corev1.NodeExternalIP, Address: "203.0.113.7"},
			{Type: corev1.NodeInternalIP, Address: "fd00::7"},
			{Type: corev1.NodeExternalIP, Address: "2001:db8::7"},
		}},
	}
}

func readyCondition(t *testing.T, st v1alpha1.InstanceStatus) metav1.Condition {
	t.Helper()
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.InstanceConditionReady)
	if c == nil {
		t.Fatalf("no Ready condition in %+v", st.Conditions)
	}
	return *c
}

func TestComputeStatusPhase(t *testing.T) {
	failed := podOn(corev1.PodFailed, scheduled())
	failed.Status.Reason, failed.Status.Message = "Evicted", "The node was low on resource: memory."
	refused := podOn(corev1.PodFailed)
	refused.Status.Reason, refused.Status.Message = podAdmissionErrorReason, "Allocate failed due to no healthy devices"
	waiting := podOn(corev1.PodPending, scheduled())
	waiting.Status.ContainerStatuses = []corev1.ContainerStatus{
		{Name: "main", State: corev1.ContainerState{Waiting: &corev1.ContainerStateWaiting{Reason: "ImagePullBackOff", Message: `Back-off pulling image "pytorch"`}}},
	}
	terminating := podOn(corev1.PodRunning, scheduled(), ready())
	terminating.DeletionTimestamp = &started
	conflict := &problem{ReasonNameConflict, "Pod tenant-a/train already exists"}

	for _, tc := range []struct {
		name        string
		setup       func(*v1alpha1.Instance)
		pod         *corev1.Pod
		problem     *problem
		rebuilding  string
		claimWait   string
		nodeLost    bool
		wantPhase   v1alpha1.InstancePhase
		wantReason  string
		wantMessage string
	}{{
		name:      "no Pod yet",
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantMessage: "creating the Pod",
	}, {
		name: "unschedulable, with the scheduler's message",
		pod: podOn(corev1.PodPending, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonUnschedulable, Message: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu."}),
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonUnschedulable, wantMessage: "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.",
	}, {
		name: "waiting for the scheduler for another reason",
		pod: podOn(corev1.PodPending, corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse,
			Reason: corev1.PodReasonSchedulingGated, Message: "Scheduling is blocked due to non-empty scheduling gates"}),
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonStarting, wantMessage: "Scheduling is blocked due to non-empty scheduling gates",
	}, {
		name:      "scheduled, a container waiting with a reason",
		pod:       waiting,
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantMessage: `container main: ImagePullBackOff: Back-off pulling image "pytorch"`,
	}, {
		name:      "scheduled, not ready yet",
		pod:       podOn(corev1.PodRunning, scheduled()),
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantMessage: "scheduled on gpu-1, waiting for it to become ready",
	}, {
		name:      "ready",
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		wantPhase: v1alpha1.InstanceReady, wantReason: ReasonPodReady, wantMessage: "running on gpu-1",
	}, {
		name:      "a failed Pod with its reason and message",
		pod:       failed,
		wantPhase: v1alpha1.InstanceFailed, wantReason: "Evicted", wantMessage: "The node was low on resource: memory.",
	}, {
		name:      "a failed Pod without reason or message",
		pod:       podOn(corev1.PodFailed, scheduled()),
		wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonFailed, wantMessage: "the Pod is Failed",
	}, {
		name:      "a Pod that exited",
		pod:       podOn(corev1.PodSucceeded, scheduled()),
		wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonFailed, wantMessage: "the Pod is Succeeded",
	}, {
		name:      "the previous Pod is still going",
		pod:       terminating,
		wantPhase: v1alpha1.InstanceStarting, wantReason: ReasonStarting, wantMessage: "waiting for the previous Pod to go",
	}, {
		name:      "stopped while the Pod is there",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		wantPhase: v1alpha1.InstanceStopping, wantReason: ReasonStopping, wantMessage: "the Pod is being deleted",
	}, {
		name:      "stopped",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		wantPhase: v1alpha1.InstanceStopped, wantReason: ReasonStopped, wantMessage: "stopped; start it with kubectl gpu start, or the instances/start subresource",
	}, {
		// Budgets release a stopped Instance's cards on Stopped: it must
		// not wait on a problem, nor come while a Pod remains.
		name:      "stopped with a problem and no Pod",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		problem:   conflict,
		wantPhase: v1alpha1.InstanceStopped, wantReason: ReasonStopped, wantMessage: "stopped; start it with kubectl gpu start, or the instances/start subresource",
	}, {
		name:      "stopped with a problem while the Pod is there",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		problem:   conflict,
		wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonNameConflict, wantMessage: "Pod tenant-a/train already exists",
	}, {
		name:      "being deleted, whatever else is true",
		setup:     func(i *v1alpha1.Instance) { i.DeletionTimestamp = &started },
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		problem:   conflict,
		wantPhase: v1alpha1.InstanceDeleting, wantReason: ReasonDeleting, wantMessage: "the Instance is being deleted; its Pod and Service are removed first",
	}, {
		name:      "a problem fails the Instance with its reason",
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		problem:   conflict,
		wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonNameConflict, wantMessage: "Pod tenant-a/train already exists",
	}, {
		name:       "a refused Pod being rebuilt is Starting, not Failed",
		pod:        refused,
		rebuilding: "the kubelet refused the Pod at admission (Allocate failed due to no healthy devices); rebuilding it in 4s",
		wantPhase:  v1alpha1.InstanceStarting, wantReason: ReasonRebuilding,
		wantMessage: "the kubelet refused the Pod at admission (Allocate failed due to no healthy devices); rebuilding it in 4s",
	}, {
		name:      "waiting for its Claim, without a Pod",
		claimWait: "waiting for claim reserved, which is Bound",
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonClaimNotAttached, wantMessage: "waiting for claim reserved, which is Bound",
	}, {
		// A Pod still running while its Claim is deleted is what the
		// Instance is.
		name:      "a Claim to wait for does not hide the Pod",
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		claimWait: "claim reserved is being deleted",
		wantPhase: v1alpha1.InstanceReady, wantReason: ReasonPodReady, wantMessage: "running on gpu-1",
	}, {
		name:      "stopped, whatever its Claim says",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		claimWait: "claim reserved is being deleted",
		wantPhase: v1alpha1.InstanceStopped, wantReason: ReasonStopped, wantMessage: "stopped; start it with kubectl gpu start, or the instances/start subresource",
	}, {
		name:      "a problem comes before the Claim",
		problem:   conflict,
		claimWait: "waiting for claim reserved, which is Bound",
		wantPhase: v1alpha1.InstanceFailed, wantReason: ReasonNameConflict, wantMessage: "Pod tenant-a/train already exists",
	}, {
		// Nothing updates a Pod whose node was deleted: it still says
		// Ready until the pod garbage collector removes it.
		name:      "ready on a node that is gone",
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		nodeLost:  true,
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonNodeLost,
		wantMessage: "node gpu-1 is gone; its Pod is removed and a new one placed on another node",
	}, {
		name:      "on a Claim, on a node that is gone",
		setup:     func(i *v1alpha1.Instance) { i.Spec.ClaimName = "reserved" },
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		nodeLost:  true,
		wantPhase: v1alpha1.InstancePending, wantReason: ReasonNodeLost,
		wantMessage: "node gpu-1 is gone, and claim reserved's cards with it; stop the Instance so the Claim is placed again, then start it",
	}, {
		name:      "stopping on a node that is gone",
		setup:     func(i *v1alpha1.Instance) { i.Spec.Stopped = true },
		pod:       podOn(corev1.PodRunning, scheduled(), ready()),
		nodeLost:  true,
		wantPhase: v1alpha1.InstanceStopping, wantReason: ReasonStopping, wantMessage: "the Pod is being deleted",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Generation = 4
			if tc.setup != nil {
				tc.setup(inst)
			}
			st := computeStatus(observed{inst: inst, pod: tc.pod, problem: tc.problem, rebuilding: tc.rebuilding, claimWait: tc.claimWait, nodeLost: tc.nodeLost})
			if st.Phase != tc.wantPhase || st.Message != tc.wantMessage {
				t.Errorf("phase %q message %q, want %q %q", st.Phase, st.Message, tc.wantPhase, tc.wantMessage)
			}
			c := readyCondition(t, st)
			wantStatus := metav1.ConditionFalse
			if tc.wantPhase == v1alpha1.InstanceReady {
				wantStatus = metav1.ConditionTrue
			}
			if c.Status != wantStatus || c.Reason != tc.wantReason || c.Message != tc.wantMessage || c.ObservedGeneration != 4 {
				t.Errorf("Ready condition %+v, want %s %s %q at generation 4", c, wantStatus, tc.wantReason, tc.wantMessage)
			}
			if st.ObservedGeneration != 4 {
				t.Errorf("observedGeneration %d, want 4", st.ObservedGeneration)
			}
		})
	}
}

func TestComputeStatusReadyInstance(t *testing.T) {
	inst := sized("h100")
	inst.Generation = 7
	inst.Spec.Ports = []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888}}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001}}}}
	pod := podOn(corev1.PodRunning, scheduled(), ready())
	pod.UID = "pod-uid"
	// The node agent's report: two cards of this Pod's, listed out of
	// order, one of another Pod's, one free.
	mine := &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderInstance, PodUID: pod.UID}
	devices := &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{
		{UUID: "GPU-c", Index: 3, PCIBusID: "0000:3b:00.0", Holder: mine, Health: v1alpha1.DeviceHealthy},
		{UUID: "GPU-a", Index: 1, PCIBusID: "0000:1b:00.0", Holder: mine, Health: v1alpha1.DeviceHealthy},
		{UUID: "GPU-b", Index: 2, Holder: &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderPod, PodUID: "other"}},
		{UUID: "GPU-d", Index: 4},
	}}}

	st := computeStatus(observed{inst: inst, pod: pod, svc: svc, node: gpuNode(), devices: devices})

	want := v1alpha1.InstanceStatus{
		Phase:   v1alpha1.InstanceReady,
		Message: "running on gpu-1",
		Conditions: []metav1.Condition{{
			Type: v1alpha1.InstanceConditionDeviceHealthy, Status: metav1.ConditionTrue, Reason: ReasonDevicesHealthy,
			Message: "every device the Instance holds is healthy", ObservedGeneration: 7,
		}, {
			Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionTrue, Reason: ReasonPodReady,
			Message: "running on gpu-1", ObservedGeneration: 7,
		}},
		ObservedGeneration: 7,
		NodeName:           "gpu-1",
		HostIPs:            []string{"203.0.113.7", "2001:db8::7", "10.0.0.7", "fd00::7"},
		PodIPs:             []string{"10.244.1.5", "fd00:10:244::5"},
		Ports:              []v1alpha1.InstancePortStatus{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001}},
		Allocations: []v1alpha1.DeviceAllocation{
			{Device: "GPU-a", Index: 1, PCIBusID: "0000:1b:00.0", Mode: v1alpha1.AllocationExclusive, Isolation: v1alpha1.IsolationExclusive},
			{Device: "GPU-c", Index: 3, PCIBusID: "0000:3b:00.0", Mode: v1alpha1.AllocationExclusive, Isolation: v1alpha1.IsolationExclusive},
		},
		StartTime: &started,
	}
	if diff := cmp.Diff(want, st, cmpopts.IgnoreFields(metav1.Condition{}, "LastTransitionTime")); diff != "" {
		t.Errorf("status (-want +got):\n%s", diff)
	}
}

func TestComputeStatusPorts(t *testing.T) {
	ports := []v1alpha1.InstancePort{
		{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP},
		{Name: "tensorboard", Port: 6006},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
		{Name: "metrics", Port: 9100},
	}
	svc := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001},
		{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP, NodePort: 30002},
		{Name: "dns", Port: 53, Protocol: corev1.ProtocolTCP, NodePort: 30003},
		{Name: "metrics", Port: 9101, Protocol: corev1.ProtocolTCP, NodePort: 30004},
		{Name: "web", Port: 9100, Protocol: corev1.ProtocolTCP, NodePort: 30005},
	}}}
	for _, tc := range []struct {
		name string
		svc  *corev1.Service
		want []v1alpha1.InstancePortStatus
	}{{
		name: "node ports only where name, port and protocol match; the protocol defaults to TCP",
		svc:  svc,
		want: []v1alpha1.InstancePortStatus{
			{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001},
			{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP, NodePort: 30002},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolTCP},
		},
	}, {
		name: "no Service yet, no node ports",
		want: []v1alpha1.InstancePortStatus{
			{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP},
			{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP},
			{Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP},
			{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolTCP},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Spec.Ports = ports
			st := computeStatus(observed{inst: inst, svc: tc.svc})
			if diff := cmp.Diff(tc.want, st.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComputeStatusPlacement(t *testing.T) {
	for _, tc := range []struct {
		name          string
		stopped       bool
		pod           *corev1.Pod
		wantNode      string
		wantHostIPs   []string
		wantPodIPs    []string
		wantStartTime *metav1.Time
	}{{
		name:          "a running Pod's node, host IPs external first, and Pod IPs",
		pod:           podOn(corev1.PodRunning, scheduled(), ready()),
		wantNode:      "gpu-1",
		wantHostIPs:   []string{"203.0.113.7", "2001:db8::7", "10.0.0.7", "fd00::7"},
		wantPodIPs:    []string{"10.244.1.5", "fd00:10:244::5"},
		wantStartTime: &started,
	}, {
		name:          "stopping keeps them while the Pod is there",
		stopped:       true,
		pod:           podOn(corev1.PodRunning, scheduled(), ready()),
		wantNode:      "gpu-1",
		wantHostIPs:   []string{"203.0.113.7", "2001:db8::7", "10.0.0.7", "fd00::7"},
		wantPodIPs:    []string{"10.244.1.5", "fd00:10:244::5"},
		wantStartTime: &started,
	}, {
		name:    "stopped clears them",
		stopped: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Spec.Stopped = tc.stopped
			// A status from before the stop must not linger.
			inst.Status = v1alpha1.InstanceStatus{NodeName: "gpu-1", HostIPs: []string{"203.0.113.7"}, PodIPs: []string{"10.244.1.5"}, StartTime: &started}
			st := computeStatus(observed{inst: inst, pod: tc.pod, node: gpuNode()})
			got := []any{st.NodeName, st.HostIPs, st.PodIPs, st.StartTime}
			want := []any{tc.wantNode, tc.wantHostIPs, tc.wantPodIPs, tc.wantStartTime}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("nodeName, hostIPs, podIPs, startTime (-want +got):\n%s", diff)
			}
		})
	}
}

func TestHostIPs(t *testing.T) {
	for _, tc := range []struct {
		name  string
		addrs []corev1.NodeAddress
		want  []string
	}{
		{"external before internal, each in the node's order", gpuNode().Status.Addresses, []string{"203.0.113.7", "2001:db8::7", "10.0.0.7", "fd00::7"}},
		{"internal only", []corev1.NodeAddress{{Type: corev1.NodeInternalIP, Address: "10.0.0.8"}}, []string{"10.0.0.8"}},
		{"neither: a hostname is not an IP", []corev1.NodeAddress{{Type: corev1.NodeHostName, Address: "gpu-2"}, {Type: corev1.NodeInternalDNS, Address: "gpu-2.internal"}}, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := hostIPs(&corev1.Node{Status: corev1.NodeStatus{Addresses: tc.addrs}})
			if diff := cmp.Diff(tc.want, got); diff != "" {
				t.Errorf("hostIPs (-want +got):\n%s", diff)
			}
		})
	}
}

func TestComputeStatusKeepsTransitionTime(t *testing.T) {
	long := metav1.NewTime(time.Date(2020, 1, 1, 0, 0, 0, 0, time.UTC))
	before := time.Now().Add(-time.Second)
	for _, tc := range []struct {
		name     string
		pod      *corev1.Pod
		wantKept bool
	}{
		{"unchanged", podOn(corev1.PodRunning, scheduled()), true},
		{"a new reason and message, still not ready", podOn(corev1.PodFailed, scheduled()), true},
		{"ready flips to true", podOn(corev1.PodRunning, scheduled(), ready()), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Generation = 2
			inst.Status.Conditions = []metav1.Condition{{
				Type: v1alpha1.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: ReasonStarting,
				Message: "scheduled on gpu-1, waiting for it to become ready", ObservedGeneration: 1, LastTransitionTime: long,
			}}
			c := readyCondition(t, computeStatus(observed{inst: inst, pod: tc.pod}))
			if kept := c.LastTransitionTime.Equal(&long); kept != tc.wantKept {
				t.Errorf("lastTransitionTime %v, kept %v, want kept %v", c.LastTransitionTime, kept, tc.wantKept)
			}
			if !tc.wantKept && c.LastTransitionTime.Time.Before(before) {
				t.Errorf("lastTransitionTime %v did not move to now", c.LastTransitionTime)
			}
			if c.ObservedGeneration != 2 {
				t.Errorf("condition observedGeneration %d, want 2", c.ObservedGeneration)
			}
			if inst.Status.Conditions[0].LastTransitionTime != long || inst.Status.Conditions[0].ObservedGeneration != 1 {
				t.Errorf("computeStatus changed the Instance's own conditions: %+v", inst.Status.Conditions[0])
			}
		})
	}
}

func TestOwnedBy(t *testing.T) {
	inst := sized("h100")
	ref := func(mutate func(*metav1.OwnerReference)) []metav1.OwnerReference {
		r := OwnerReference(inst)
		mutate(&r)
		return []metav1.OwnerReference{r}
	}
	for _, tc := range []struct {
		name string
		refs []metav1.OwnerReference
		want bool
	}{
		{"the Instance's controller reference", ref(func(*metav1.OwnerReference) {}), true},
		{"no owner", nil, false},
		{"an earlier Instance of the same name", ref(func(r *metav1.OwnerReference) { r.UID = "uid-0" }), false},
		{"an owner, not the controller", ref(func(r *metav1.OwnerReference) { r.Controller = ptr.To(false) }), false},
		{"controller unset", ref(func(r *metav1.OwnerReference) { r.Controller = nil }), false},
		{"another kind with the same UID", ref(func(r *metav1.OwnerReference) { r.Kind = "Claim" }), false},
		{"an Instance of another group", ref(func(r *metav1.OwnerReference) { r.APIVersion = "example.com/v1" }), false},
		{"the Instance only as a plain owner beside another controller", []metav1.OwnerReference{
			{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "rs-1", Controller: ptr.To(true)},
			{APIVersion: "gpu.kiln.dev/v1alpha1", Kind: "Instance", Name: "train", UID: "uid-1"},
		}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a", OwnerReferences: tc.refs}}
			if got := ownedBy(pod, inst); got != tc.want {
				t.Errorf("ownedBy %v, want %v", got, tc.want)
			}
		})
	}
}

func TestConflictMessage(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a"}}
	svc := &corev1.Service{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a"}}
	const rest = " already exists and is not owned by this Instance; Kiln does not touch it: rename or delete it, or recreate the Instance under another name"
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		svc  *corev1.Service
		want string
	}{
		{"nothing in the way", nil, nil, ""},
		{"a Pod", pod, nil, "Pod tenant-a/train" + rest},
		{"a Service", nil, svc, "Service tenant-a/train" + rest},
		{"both", pod, svc, "Pod tenant-a/train and Service tenant-a/train" + rest},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := conflictMessage(sized("h100"), tc.pod, tc.svc); got != tc.want {
				t.Errorf("conflictMessage\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

// TestConditionReasonAndMessage: what a Pod reports, however odd, becomes
// a condition the API accepts, so the status write never fails forever.
func TestConditionReasonAndMessage(t *testing.T) {
	for _, tc := range []struct {
		name, reason, want string
	}{
		{"kubelet out of an extended resource", "OutOfnvidia.com/gpu", "OutOfnvidia_com_gpu"},
		{"already valid", "UnexpectedAdmissionError", "UnexpectedAdmissionError"},
		{"starts with a digit", "1stFailure", "Pod_stFailure"},
		{"ends with a colon", "Evicted:", "Evicted_"},
		{"empty", "", "Pod"},
		{"spaces and unicode", "Node lost ✗", "Node_lost____"},
		{"too long", strings.Repeat("A", 2000), strings.Repeat("A", 1024)},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := conditionReason(tc.reason)
			if got != tc.want {
				t.Errorf("conditionReason(%q) = %q, want %q", tc.reason, got, tc.want)
			}
			cond := metav1.Condition{Type: "Ready", Status: metav1.ConditionFalse, Reason: got, Message: conditionMessage(strings.Repeat("é", 20000)),
				LastTransitionTime: metav1.Now()}
			if errs := metav1validation.ValidateConditions([]metav1.Condition{cond}, field.NewPath("conditions")); len(errs) != 0 {
				t.Errorf("the API refuses the condition: %v", errs)
			}
		})
	}
}

// TestFailedPodWithAnOddReason: the Instance's Ready condition from a Pod
// the kubelet failed with "OutOfnvidia.com/gpu" is valid.
func TestFailedPodWithAnOddReason(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{Phase: corev1.PodFailed, Reason: "OutOfnvidia.com/gpu",
		Message: "Pod was rejected: Node didn't have enough resource: nvidia.com/gpu"}}
	inst := &v1alpha1.Instance{}
	st := computeStatus(observed{inst: inst, pod: pod})
	if errs := metav1validation.ValidateConditions(st.Conditions, field.NewPath("status", "conditions")); len(errs) != 0 {
		t.Fatalf("status %+v is refused: %v", st, errs)
	}
	if st.Phase != v1alpha1.InstanceFailed || st.Conditions[0].Reason != "OutOfnvidia_com_gpu" {
		t.Fatalf("status %+v, want Failed with reason OutOfnvidia_com_gpu", st)
	}
}

func TestAllocations(t *testing.T) {
	pod := podOn(corev1.PodRunning, scheduled(), ready())
	pod.UID = "pod-uid"
	mine := &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderInstance, PodUID: pod.UID}
	nd := func(node string, d ...v1alpha1.NodeDevice) *v1alpha1.NodeDevices {
		return &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: v1alpha1.NodeDevicesStatus{Devices: d}}
	}
	sliced := sized("l4")
	sliced.Spec.Resources.Slice = &v1alpha1.SliceRequest{MemoryPercent: 25, CoresPercent: 50}
	for _, tc := range []struct {
		name string
		inst *v1alpha1.Instance
		pod  *corev1.Pod
		nd   *v1alpha1.NodeDevices
		want []v1alpha1.DeviceAllocation
	}{
		{"a whole card", sized("h100"), pod, nd("gpu-1", v1alpha1.NodeDevice{UUID: "GPU-a", Index: 2, Holder: mine}),
			[]v1alpha1.DeviceAllocation{{Device: "GPU-a", Index: 2, Mode: v1alpha1.AllocationExclusive, Isolation: v1alpha1.IsolationExclusive}}},
		{"a MIG device is a partition", sized("h100"), pod, nd("gpu-1", v1alpha1.NodeDevice{UUID: "MIG-a", Index: 7, Profile: "1g.10gb", Holder: mine}),
			[]v1alpha1.DeviceAllocation{{Device: "MIG-a", Index: 7, Mode: v1alpha1.AllocationPartition, Profile: "1g.10gb", Isolation: v1alpha1.IsolationMIG}}},
		{"a slice of a card", sliced, pod, nd("gpu-1", v1alpha1.NodeDevice{UUID: "GPU-a", Holder: mine}),
			[]v1alpha1.DeviceAllocation{{Device: "GPU-a", Mode: v1alpha1.AllocationSlice, MemoryPercent: 25, CoresPercent: 50, Isolation: v1alpha1.IsolationMPS}}},
		{"another node's report says nothing of this Pod", sized("h100"), pod, nd("gpu-2", v1alpha1.NodeDevice{UUID: "GPU-a", Holder: mine}), nil},
		{"no Pod, no devices", sized("h100"), nil, nd("gpu-1", v1alpha1.NodeDevice{UUID: "GPU-a", Holder: mine}), nil},
		{"no report", sized("h100"), pod, nil, nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := allocations(tc.inst, tc.pod, tc.nd, v1alpha1.SliceIsolationMPS); !cmp.Equal(got, tc.want) {
				t.Errorf("got %+v, want %+v", got, tc.want)
			}
		})
	}
}

func TestDeviceHealthyCondition(t *testing.T) {
	pod := podOn(corev1.PodRunning, scheduled(), ready())
	pod.UID = "pod-uid"
	mine := &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderInstance, PodUID: pod.UID}
	nd := &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{
		{UUID: "GPU-a", Index: 1, Holder: mine, Health: v1alpha1.DeviceHealthy},
		{UUID: "GPU-b", Index: 2, Holder: mine, Health: v1alpha1.DeviceUnhealthy, Reason: "XID 79"},
		{UUID: "GPU-c", Index: 3, Health: v1alpha1.DeviceUnhealthy, Reason: "XID 48"},
	}}}
	inst := sized("h100")
	st := computeStatus(observed{inst: inst, pod: pod, node: gpuNode(), devices: nd})
	c := meta.FindStatusCondition(st.Conditions, v1alpha1.InstanceConditionDeviceHealthy)
	want := "device GPU-b (index 2) on gpu-1 is unhealthy: XID 79; stop and start the Instance to run on healthy devices"
	if c == nil || c.Status != metav1.ConditionFalse || c.Reason != ReasonDeviceUnhealthy || c.Message != want {
		t.Fatalf("DeviceHealthy %+v, want False saying %q", c, want)
	}
	// Stopped, it holds nothing: no condition.
	inst.Status = st
	inst.Spec.Stopped = true
	if st := computeStatus(observed{inst: inst, devices: nd}); meta.FindStatusCondition(st.Conditions, v1alpha1.InstanceConditionDeviceHealthy) != nil {
		t.Errorf("a stopped Instance keeps the DeviceHealthy condition: %+v", st.Conditions)
	}
}

func TestClaimDevicesCondition(t *testing.T) {
	pod := podOn(corev1.PodRunning, scheduled(), ready())
	pod.UID = "pod-uid"
	mine := &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderInstance, PodUID: pod.UID}
	nd := &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: "gpu-1"}, Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{
		{UUID: "GPU-a", Index: 1, Holder: mine, Health: v1alpha1.DeviceHealthy},
		{UUID: "GPU-b", Index: 2, Holder: mine, Health: v1alpha1.DeviceHealthy},
	}}}
	claimOf := func(devices ...string) *v1alpha1.Claim {
		return &v1alpha1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "reserved"}, Status: v1alpha1.ClaimStatus{Devices: devices}}
	}
	for _, tc := range []struct {
		name       string
		claim      *v1alpha1.Claim
		wantStatus metav1.ConditionStatus // "" for no condition
		wantMsg    string
	}{
		{"the Claim's devices, in any order", claimOf("GPU-b", "GPU-a"), metav1.ConditionTrue, "the Pod got the devices claim reserved holds"},
		{"other devices", claimOf("GPU-a", "GPU-c"), metav1.ConditionFalse,
			"the Pod got GPU-a, GPU-b; claim reserved holds GPU-a, GPU-c: stop and start the Instance to run on the Claim's devices"},
		{"a Claim on a node no agent reports", claimOf("reserved-hold/nvidia.com/gpu/0"), "", ""},
		{"no Claim", nil, "", ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := computeStatus(observed{inst: sized("h100"), pod: pod, node: gpuNode(), devices: nd, claim: tc.claim})
			c := meta.FindStatusCondition(st.Conditions, v1alpha1.InstanceConditionClaimDevices)
			switch {
			case tc.wantStatus == "" && c != nil:
				t.Errorf("condition %+v, want none", c)
			case tc.wantStatus != "" && (c == nil || c.Status != tc.wantStatus || c.Message != tc.wantMsg):
				t.Errorf("condition %+v, want %s %q", c, tc.wantStatus, tc.wantMsg)
			}
		})
	}
}
