package instance

import (
	"slices"
	"strconv"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

// onClaim is running() on Claim "reserved".
func onClaim() *v1alpha1.Instance {
	inst := running()
	inst.Spec.ClaimName = "reserved"
	return inst
}

// reserved is Claim "reserved" of one h100 in phase, on node, attached to
// the Instance named attachedTo.
func reserved(phase v1alpha1.ClaimPhase, node, attachedTo string) *v1alpha1.Claim {
	return &v1alpha1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: "reserved", Namespace: "tenant-a", UID: "claim-1"},
		Spec:       v1alpha1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](1)},
		Status:     v1alpha1.ClaimStatus{Phase: phase, NodeName: node, AttachedTo: attachedTo},
	}
}

// holderOf is cl's holder Pod as the claim loop makes it, unbound and
// nominated to node ("" for not nominated).
func holderOf(cl *v1alpha1.Claim, node string) *corev1.Pod {
	pod := handover.RenderHolder(cl, h100(), "gpu-1", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1")}, "registry.k8s.io/pause:3.10")
	pod.UID = "holder-1"
	pod.Status.NominatedNodeName = node
	return pod
}

// claimPod is the Pod the controller makes for inst on its Claim on node,
// as stored: bound there and Ready.
func claimPod(t *testing.T, inst *v1alpha1.Instance, node string) *corev1.Pod {
	t.Helper()
	pod, err := RenderPod(inst, h100(), nil, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	RenderOnClaim(pod, inst.Spec.ClaimName, node)
	hash, err := podHash(pod)
	if err != nil {
		t.Fatal(err)
	}
	pod.Annotations = map[string]string{AnnotationGeneration: strconv.FormatInt(inst.Generation, 10), AnnotationPodHash: hash}
	pod.UID = "pod-1"
	pod.Spec.NodeName = node
	pod.Status = corev1.PodStatus{Phase: corev1.PodRunning, Conditions: []corev1.PodCondition{scheduled(), ready()}}
	return pod
}

// unbound is pod before the scheduler placed it, nominated to node.
func unbound(pod *corev1.Pod, node string) *corev1.Pod {
	pod.Spec.NodeName = ""
	pod.Status = corev1.PodStatus{Phase: corev1.PodPending, NominatedNodeName: node}
	return pod
}

// nominations lists the nodes of the patches of pods/status, by Pod.
func (f *fixture) nominations() []string {
	var out []string
	for _, a := range f.kube.Actions() {
		p, ok := a.(clienttesting.PatchActionImpl)
		if !ok || p.GetResource().Resource != "pods" || p.GetSubresource() != "status" {
			continue
		}
		out = append(out, p.GetName()+" "+string(p.GetPatch()))
	}
	return out
}

func nominated(pod, node string) string {
	return pod + ` {"status":{"nominatedNodeName":"` + node + `"}}`
}

func TestSyncClaimNotAttached(t *testing.T) {
	pending := reserved(v1alpha1.ClaimPending, "", "")
	pending.Status.Conditions = []metav1.Condition{{
		Type: v1alpha1.ClaimConditionWaiting, Status: metav1.ConditionTrue, Reason: v1alpha1.ClaimReasonCapacity,
		Message: "no node of instancetype h100 has 1 nvidia.com/gpu free",
	}}
	deleting := reserved(v1alpha1.ClaimAttached, "gpu-1", "train")
	deleting.DeletionTimestamp, deleting.Finalizers = &started, []string{v1alpha1.ClaimFinalizer}
	for _, tc := range []struct {
		name        string
		claim       *v1alpha1.Claim
		wantMessage string
	}{{
		name:        "a missing Claim",
		wantMessage: `claim "reserved" does not exist; create it, or delete this Instance and create one without spec.claimName`,
	}, {
		name:        "a new Claim, without a phase yet",
		claim:       reserved("", "", ""),
		wantMessage: "waiting for claim reserved, which is Pending",
	}, {
		name:        "a Pending Claim, with why it waits",
		claim:       pending,
		wantMessage: "waiting for claim reserved, which is Pending (Capacity: no node of instancetype h100 has 1 nvidia.com/gpu free)",
	}, {
		name:        "a Bound Claim not attached to it yet",
		claim:       reserved(v1alpha1.ClaimBound, "gpu-1", ""),
		wantMessage: "waiting for claim reserved, which is Bound",
	}, {
		name:        "a Claim attached to another Instance",
		claim:       reserved(v1alpha1.ClaimAttached, "gpu-1", "notebook"),
		wantMessage: "claim reserved is attached to Instance notebook; stop that one first",
	}, {
		name:        "a Lost Claim still attached to another Instance",
		claim:       reserved(v1alpha1.ClaimLost, "gpu-1", "notebook"),
		wantMessage: "claim reserved is attached to Instance notebook; stop that one first",
	}, {
		name:        "an Expired Claim",
		claim:       reserved(v1alpha1.ClaimExpired, "", ""),
		wantMessage: "waiting for claim reserved, which is Expired",
	}, {
		name:        "a Claim being deleted, even attached to it",
		claim:       deleting,
		wantMessage: "claim reserved is being deleted",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			objs := []runtime.Object{onClaim(), h100(), gpuNode()}
			if tc.claim != nil {
				objs = append(objs, tc.claim)
			}
			f := newFixture(t, Options{}, objs...)
			if after := f.sync(); after != 0 {
				t.Errorf("requeue after %s; the Claim's changes wake the Instance", after)
			}

			if f.wrote("create", "pods") || len(f.nominations()) != 0 {
				t.Errorf("an Instance whose Claim is not attached to it got a Pod: writes %v", f.writes())
			}
			got := f.wantPhase(v1alpha1.InstancePending, ReasonClaimNotAttached)
			if got.Status.Message != tc.wantMessage {
				t.Errorf("message\n got %q\nwant %q", got.Status.Message, tc.wantMessage)
			}
			if events := f.events(); !slices.Contains(events, "Warning Pending "+tc.wantMessage) {
				t.Errorf("events %v, want a Pending Warning with the message", events)
			}
		})
	}
}

// On its Claim the Pod is created kept to the Claim's node and nominated
// there at once: only then does the claim loop let its holder go.
func TestSyncClaimAttachedCreatesPod(t *testing.T) {
	inst := onClaim()
	f := newFixture(t, Options{}, inst, h100(), gpuNode(), reserved(v1alpha1.ClaimAttached, "gpu-1", "train"))
	if after := f.sync(); after != 0 {
		t.Errorf("requeue after %s, want 0", after)
	}

	pod := f.pod()
	if pod == nil {
		t.Fatal("no Pod created")
	}
	wantLabels := Labels(inst)
	wantLabels[v1alpha1.LabelClaim] = "reserved"
	if diff := cmp.Diff(wantLabels, pod.Labels); diff != "" {
		t.Errorf("Pod labels (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(handover.PinTo("gpu-1"), pod.Spec.Affinity); diff != "" {
		t.Errorf("Pod affinity (-want +got):\n%s", diff)
	}
	if pod.Spec.PriorityClassName != "kiln-claim" || pod.Spec.NodeName != "" {
		t.Errorf("priorityClassName %q nodeName %q, want kiln-claim and left to the scheduler", pod.Spec.PriorityClassName, pod.Spec.NodeName)
	}
	if pod.Status.NominatedNodeName != "gpu-1" {
		t.Errorf("nominatedNodeName %q, want gpu-1", pod.Status.NominatedNodeName)
	}
	want := []string{"create services", "create pods", "patch pods/status", "update instances/status"}
	if diff := cmp.Diff(want, f.writes()); diff != "" {
		t.Errorf("writes (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff([]string{nominated("train", "gpu-1")}, f.nominations()); diff != "" {
		t.Errorf("nominations (-want +got):\n%s", diff)
	}
	f.wantPhase(v1alpha1.InstanceStarting, ReasonStarting)

	if !handover.Gated(pod) {
		t.Errorf("scheduling gates %v, want the hand-over gate until the holder is gone", pod.Spec.SchedulingGates)
	}

	// The Claim's holder is gone: the gate goes, and then nothing more.
	f.catchUp()
	f.sync()
	if diff := cmp.Diff([]string{"update pods"}, f.writes()); diff != "" {
		t.Errorf("writes once the holder is gone (-want +got):\n%s", diff)
	}
	if handover.Gated(f.pod()) {
		t.Error("the Pod is still gated with the holder gone")
	}
	f.catchUp()
	f.sync()
	if w := f.writes(); len(w) != 0 {
		t.Errorf("a sync with nothing changed wrote %v", w)
	}
}

// A Pod named like the holder that the Claim does not control is not its
// holder: the Instance's Pod is let through.
func TestSyncClaimGateIgnoresAHolderNameSquatter(t *testing.T) {
	inst := onClaim()
	cl := reserved(v1alpha1.ClaimAttached, "gpu-1", "train")
	squatter := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: handover.HolderName(cl), Namespace: inst.Namespace}}
	f := newFixture(t, Options{}, inst, h100(), gpuNode(), cl, squatter)
	f.sync()
	f.catchUp()
	f.sync()
	f.catchUp()
	if handover.Gated(f.pod()) {
		t.Error("a Pod the Claim does not control kept the Instance's Pod gated")
	}
}

// While the Claim's holder is there, the gated Pod waits, and looks again.
func TestSyncClaimGateWaitsForTheHolder(t *testing.T) {
	inst := onClaim()
	cl := reserved(v1alpha1.ClaimAttached, "gpu-1", "train")
	holder := handover.RenderHolder(cl, h100(), "gpu-1", corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}, "pause")
	f := newFixture(t, Options{}, inst, h100(), gpuNode(), cl, holder)
	f.sync()
	f.catchUp()
	if after := f.sync(); after != handOverPoll {
		t.Errorf("requeue after %s, want %s", after, handOverPoll)
	}
	if w := f.writes(); len(w) != 0 {
		t.Errorf("wrote %v while the holder is there", w)
	}
	if !handover.Gated(f.pod()) {
		t.Error("the Pod was let through while the holder is there")
	}
}

func TestSyncClaimNominatesExistingPod(t *testing.T) {
	for _, tc := range []struct {
		name string
		pod  func(*corev1.Pod) *corev1.Pod
		want []string
	}{{
		name: "an unbound Pod not nominated yet",
		pod:  func(p *corev1.Pod) *corev1.Pod { return unbound(p, "") },
		want: []string{nominated("train", "gpu-1")},
	}, {
		name: "an unbound Pod nominated elsewhere",
		pod:  func(p *corev1.Pod) *corev1.Pod { return unbound(p, "gpu-2") },
		want: []string{nominated("train", "gpu-1")},
	}, {
		name: "an unbound Pod nominated there already",
		pod:  func(p *corev1.Pod) *corev1.Pod { return unbound(p, "gpu-1") },
	}, {
		name: "a bound Pod",
		pod:  func(p *corev1.Pod) *corev1.Pod { return p },
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := onClaim()
			f := newFixture(t, Options{}, inst, h100(), gpuNode(), reserved(v1alpha1.ClaimAttached, "gpu-1", "train"),
				tc.pod(claimPod(t, inst, "gpu-1")), ownedService(inst, nodePort("jupyter", 8888, 30001)))
			f.sync()

			if diff := cmp.Diff(tc.want, f.nominations()); diff != "" {
				t.Errorf("nominations (-want +got):\n%s", diff)
			}
			if f.wrote("create", "pods") || len(f.deletes("pods")) != 0 {
				t.Errorf("the Pod was replaced: writes %v", f.writes())
			}
		})
	}
}

// A Claim whose node was lost stays attached to the Instance that ran
// there; the Instance keeps to that node until it is stopped.
func TestSyncClaimLostKeepsItsNode(t *testing.T) {
	for _, tc := range []struct {
		name       string
		withPod    bool
		wantCreate bool
	}{
		{name: "the Pod there is kept", withPod: true},
		{name: "a missing Pod is made there", wantCreate: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := onClaim()
			objs := []runtime.Object{inst, h100(), reserved(v1alpha1.ClaimLost, "gpu-1", "train"), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.withPod {
				objs = append(objs, claimPod(t, inst, "gpu-1"))
			}
			f := newFixture(t, Options{}, objs...)
			f.sync()

			if len(f.deletes("pods")) != 0 || f.wrote("create", "pods") != tc.wantCreate {
				t.Errorf("writes %v, want a Pod created: %v and none deleted", f.writes(), tc.wantCreate)
			}
			pod := f.pod()
			if pod == nil {
				t.Fatal("no Pod")
			}
			if node := handover.PinnedNode(pod); node != "gpu-1" {
				t.Errorf("Pod pinned to %q, want gpu-1", node)
			}
			if reason := readyCondition(t, f.instance().Status).Reason; reason == ReasonClaimNotAttached {
				t.Errorf("an Instance on its Lost Claim waits: %s", f.instance().Status.Message)
			}
		})
	}
}

func TestSyncStopHandsClaimBack(t *testing.T) {
	attached := func() *v1alpha1.Claim { return reserved(v1alpha1.ClaimAttached, "gpu-1", "train") }
	deleting := attached()
	deleting.DeletionTimestamp, deleting.Finalizers = &started, []string{v1alpha1.ClaimFinalizer}
	foreignHolder := holderOf(attached(), "gpu-1")
	foreignHolder.OwnerReferences[0].UID = "claim-0"
	uncontrolledHolder := holderOf(attached(), "gpu-1")
	uncontrolledHolder.OwnerReferences[0].Controller = nil
	goingHolder := holderOf(attached(), "gpu-1")
	goingHolder.DeletionTimestamp = &started
	boundHolder := holderOf(attached(), "")
	boundHolder.Spec.NodeName = "gpu-1"

	for _, tc := range []struct {
		name   string
		claim  *v1alpha1.Claim
		holder *corev1.Pod
		// wantWait is whether the Pod stays until the holder has the
		// cards; otherwise it is deleted at once.
		wantWait bool
	}{
		{name: "an Attached Claim without its holder yet", claim: attached(), wantWait: true},
		{name: "a Bound Claim without its holder yet", claim: reserved(v1alpha1.ClaimBound, "gpu-1", ""), wantWait: true},
		{name: "the holder not nominated yet", claim: attached(), holder: holderOf(attached(), ""), wantWait: true},
		{name: "the holder nominated elsewhere", claim: attached(), holder: holderOf(attached(), "gpu-2"), wantWait: true},
		{name: "a same-named Pod of an earlier Claim", claim: attached(), holder: foreignHolder, wantWait: true},
		{name: "a same-named Pod the Claim does not control", claim: attached(), holder: uncontrolledHolder, wantWait: true},
		{name: "a holder on its way out", claim: attached(), holder: goingHolder, wantWait: true},
		{name: "the holder nominated to the node", claim: attached(), holder: holderOf(attached(), "gpu-1")},
		{name: "the holder bound on the node", claim: attached(), holder: boundHolder},
		// The Claim went on to an Instance waiting for it: the claim
		// loop keeps the node reserved, by its holder or that Instance's
		// Pod, and removes the holder once that Pod is nominated.
		{name: "a Claim attached to another Instance since", claim: reserved(v1alpha1.ClaimAttached, "gpu-1", "notebook")},
		{name: "a Claim being deleted", claim: deleting},
		{name: "a Lost Claim", claim: reserved(v1alpha1.ClaimLost, "gpu-1", "train")},
		{name: "an Expired Claim", claim: reserved(v1alpha1.ClaimExpired, "gpu-1", "")},
		{name: "a Pending Claim", claim: reserved(v1alpha1.ClaimPending, "", "")},
		{name: "a missing Claim"},
		{name: "a Claim on another node", claim: reserved(v1alpha1.ClaimBound, "gpu-2", "")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := onClaim()
			inst.Spec.Stopped = true
			objs := []runtime.Object{inst, h100(), gpuNode(), claimPod(t, inst, "gpu-1"), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.claim != nil {
				objs = append(objs, tc.claim)
			}
			if tc.holder != nil {
				objs = append(objs, tc.holder)
			}
			f := newFixture(t, Options{}, objs...)
			after := f.sync()

			wantAfter, wantDeletes := handOverPoll, []types.UID(nil)
			if !tc.wantWait {
				wantAfter, wantDeletes = 0, []types.UID{"pod-1"}
			}
			if after != wantAfter {
				t.Errorf("requeue after %s, want %s", after, wantAfter)
			}
			if diff := cmp.Diff(wantDeletes, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			f.wantPhase(v1alpha1.InstanceStopping, ReasonStopping)
		})
	}
}

// The wait ends on the sync after the holder has the cards reserved.
func TestSyncStopWaitsForHolder(t *testing.T) {
	inst := onClaim()
	inst.Spec.Stopped = true
	cl := reserved(v1alpha1.ClaimBound, "gpu-1", "")
	f := newFixture(t, Options{}, inst, h100(), gpuNode(), cl, claimPod(t, inst, "gpu-1"), ownedService(inst, nodePort("jupyter", 8888, 30001)))
	if after := f.sync(); after != handOverPoll || len(f.deletes("pods")) != 0 {
		t.Fatalf("without a holder: requeue after %s, deletes %v; want %s and the Pod kept", after, f.deletes("pods"), handOverPoll)
	}
	// The Pod still runs there: the status says where.
	if got := f.instance().Status; got.NodeName != "gpu-1" || len(got.HostIPs) == 0 {
		t.Errorf("while waiting: nodeName %q hostIPs %v, want gpu-1 and its addresses", got.NodeName, got.HostIPs)
	}

	f.catchUp()
	f.set(holderOf(cl, "gpu-1"))
	if after := f.sync(); after != 0 {
		t.Errorf("with the holder nominated: requeue after %s, want 0", after)
	}
	if diff := cmp.Diff([]types.UID{"pod-1"}, f.deletes("pods")); diff != "" {
		t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
	}
}

// finalize waits for the holder the same way, Service and all, and looks
// again after the same poll.
func TestSyncDeletionHandsClaimBack(t *testing.T) {
	for _, tc := range []struct {
		name     string
		claim    *v1alpha1.Claim
		holder   bool
		wantWait bool
	}{
		{name: "the holder has not reserved the cards", claim: reserved(v1alpha1.ClaimBound, "gpu-1", ""), wantWait: true},
		{name: "the holder has reserved the cards", claim: reserved(v1alpha1.ClaimBound, "gpu-1", ""), holder: true},
		{name: "a Lost Claim takes nothing back", claim: reserved(v1alpha1.ClaimLost, "gpu-1", "train")},
		{name: "a missing Claim takes nothing back"},
		{name: "a Claim attached to another Instance since", claim: reserved(v1alpha1.ClaimAttached, "gpu-1", "notebook")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := onClaim()
			inst.DeletionTimestamp = &started
			objs := []runtime.Object{inst, h100(), gpuNode(), claimPod(t, inst, "gpu-1"), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.claim != nil {
				objs = append(objs, tc.claim)
				if tc.holder {
					objs = append(objs, holderOf(tc.claim, "gpu-1"))
				}
			}
			f := newFixture(t, Options{}, objs...)
			after := f.sync()

			var wantDeletes []types.UID
			if !tc.wantWait {
				wantDeletes = []types.UID{"pod-1"}
			}
			if diff := cmp.Diff(wantDeletes, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			// The Service goes with the Pod; the finalizer waits for the Pod.
			if f.wrote("delete", "services") != !tc.wantWait || f.wrote("patch", "instances") || f.wrote("update", "instances") {
				t.Errorf("the Instance went on before its Pod: writes %v", f.writes())
			}
			f.wantPhase(v1alpha1.InstanceDeleting, ReasonDeleting)

			// It looks again after the poll, without an event, while the
			// Claim takes its cards back.
			if requeued := after == handOverPoll; requeued != tc.wantWait {
				t.Fatalf("requeue in %v, want a poll: %v", after, tc.wantWait)
			}
		})
	}
}

// Without spec.claimName, a Claim that names the Instance changes nothing.
func TestSyncWithoutClaimIgnoresClaims(t *testing.T) {
	for _, tc := range []struct {
		name       string
		stopped    bool
		pod        func(*testing.T, *v1alpha1.Instance) *corev1.Pod
		wantCreate bool
		wantDelete bool
	}{{
		name:       "a new Pod is not kept to a node nor nominated",
		wantCreate: true,
	}, {
		name: "an unbound Pod is not nominated",
		pod:  func(t *testing.T, i *v1alpha1.Instance) *corev1.Pod { return unbound(readyPod(t, i), "") },
	}, {
		name:       "a stop deletes the Pod at once",
		stopped:    true,
		pod:        readyPod,
		wantDelete: true,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			inst.Spec.Stopped = tc.stopped
			objs := []runtime.Object{inst, h100(), gpuNode(), reserved(v1alpha1.ClaimAttached, "gpu-1", "train"), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.pod != nil {
				objs = append(objs, tc.pod(t, inst))
			}
			f := newFixture(t, Options{}, objs...)
			if after := f.sync(); after != 0 {
				t.Errorf("requeue after %s, want 0", after)
			}

			if n := f.nominations(); len(n) != 0 {
				t.Errorf("nominated %v", n)
			}
			if f.wrote("create", "pods") != tc.wantCreate || (len(f.deletes("pods")) == 1) != tc.wantDelete {
				t.Errorf("writes %v, want a create %v, a delete %v", f.writes(), tc.wantCreate, tc.wantDelete)
			}
			if pod := f.pod(); tc.wantCreate && pod != nil {
				if _, ok := pod.Labels[v1alpha1.LabelClaim]; ok || pod.Spec.Affinity != nil || pod.Spec.PriorityClassName != "" {
					t.Errorf("labels %v affinity %v priorityClassName %q, want none of a Claim's", pod.Labels, pod.Spec.Affinity, pod.Spec.PriorityClassName)
				}
			}
		})
	}
}
