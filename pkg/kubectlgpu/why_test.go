package kubectlgpu

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

const unschedulable = "0/4 nodes are available: 2 Insufficient nvidia.com/gpu, 2 node(s) didn't match Pod's node affinity/selector."

func TestWhy(t *testing.T) {
	teamBudget := budget("team", map[string]string{"accelerators": "8", "accelerators.h100": "4"}, map[string]string{"accelerators": "7", "accelerators.h100": "4"})
	onClaim := instance("on-claim", pending("waiting for claim big, which is Pending (Capacity: no node of instancetype h100 has 4 free cards)"), func(i *v1alpha1.Instance) { i.Spec.ClaimName = "big" })
	waitingClaim := &v1alpha1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "big", Namespace: ns},
		Spec: v1alpha1.ClaimSpec{Type: "h100"},
		Status: v1alpha1.ClaimStatus{Phase: v1alpha1.ClaimPending, Conditions: []metav1.Condition{{
			Type: v1alpha1.ClaimConditionWaiting, Status: metav1.ConditionTrue, Reason: v1alpha1.ClaimReasonCapacity,
			Message: "no node of instancetype h100 has 4 free cards"}}}}
	bound := waitingClaim.DeepCopy()
	bound.Status = v1alpha1.ClaimStatus{Phase: v1alpha1.ClaimBound, NodeName: "gpu-0", Devices: []string{"GPU-1", "GPU-2"}}
	big := instance("big", pending(unschedulable))
	for _, tc := range []struct {
		name    string
		kiln    []runtime.Object
		kube    []runtime.Object
		arg     string
		refuse  string
		want    string
		wantErr string
	}{
		{name: "ready", kiln: objs(instance("nb")), arg: "nb",
			want: "instance/nb is Ready: running on gpu-0\n"},
		{name: "pending for cards, with the scheduler's reason from the Pod",
			kiln: objs(big, h100(0), teamBudget),
			kube: objs(pod(big, &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Reason: "Unschedulable", Message: unschedulable})),
			arg:  "big",
			want: "instance/big is Pending\n" +
				"  scheduler (pod/big Unschedulable): " + unschedulable + "\n" +
				"  instancetype/h100 (Active): 0 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n" +
				"  budget/team: accelerators 7 of 8 used, 1 left; accelerators.h100 4 of 4 used, 0 left\n"},
		{name: "pending, from the FailedScheduling event when the condition is bare",
			kiln: objs(big, h100(0)),
			kube: objs(pod(big, nil), &corev1.Event{
				ObjectMeta:     metav1.ObjectMeta{Name: "big.1", Namespace: ns},
				InvolvedObject: corev1.ObjectReference{Kind: "Pod", Name: "big", Namespace: ns},
				Reason:         "FailedScheduling", Type: corev1.EventTypeWarning, Message: unschedulable,
				LastTimestamp: metav1.NewTime(time.Unix(100, 0))}),
			arg: "big",
			want: "instance/big is Pending\n" +
				"  scheduler (pod/big FailedScheduling): " + unschedulable + "\n" +
				"  instancetype/h100 (Active): 0 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "a Pod the Instance does not control is not its",
			kiln: objs(big, h100(0)),
			kube: objs(pod(instance("big", func(i *v1alpha1.Instance) { i.UID = "other" }), &corev1.PodCondition{Type: corev1.PodScheduled, Status: corev1.ConditionFalse, Message: "someone else's"})),
			arg:  "big",
			want: "instance/big is Pending: " + unschedulable + "\n" +
				"  instancetype/h100 (Active): 0 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "on a waiting Claim", kiln: objs(onClaim, waitingClaim, h100(2)), arg: "instance/on-claim",
			want: "instance/on-claim is Pending\n" +
				"  claim/big is Pending, waiting (Capacity): no node of instancetype h100 has 4 free cards\n" +
				"  instancetype/h100 (Active): 2 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "on a Claim that is gone", kiln: objs(onClaim, h100(2)), arg: "on-claim",
			want: "instance/on-claim is Pending: waiting for claim big, which is Pending (Capacity: no node of instancetype h100 has 4 free cards)\n" +
				"  claim \"big\" not found in namespace \"tenant-a\"; list them with kubectl get claims -n tenant-a\n" +
				"  instancetype/h100 (Active): 2 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "stopped, a start refused by a Budget", kiln: objs(instance("parked", stopped), h100(3), teamBudget), arg: "parked",
			refuse: `exceeds budget "team": accelerators.h100 used 4 + requested 1 > hard 4`,
			want: "instance/parked is stopped (spec.stopped is true; phase Stopped)\n" +
				"  a start would be refused: instances.gpu.kiln.dev \"parked\" is forbidden: exceeds budget \"team\": accelerators.h100 used 4 + requested 1 > hard 4\n" +
				"  instancetype/h100 (Active): 3 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n" +
				"  budget/team: accelerators 7 of 8 used, 1 left; accelerators.h100 4 of 4 used, 0 left\n"},
		{name: "stopped, a start admitted", kiln: objs(instance("parked", stopped), h100(3)), arg: "parked",
			want: "instance/parked is stopped (spec.stopped is true; phase Stopped)\n" +
				"  a start would be admitted (dry run): kubectl gpu start parked -n tenant-a --wait\n" +
				"  instancetype/h100 (Active): 3 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "stopped for idleness", kiln: objs(instance("parked", stopped, func(i *v1alpha1.Instance) {
			i.Status.Conditions = append(i.Status.Conditions, metav1.Condition{Type: v1alpha1.InstanceConditionIdleStopped, Status: metav1.ConditionTrue,
				Reason: "IdleLimit", LastTransitionTime: metav1.NewTime(time.Date(2026, 12, 6, 10, 30, 0, 0, time.UTC)),
				Message: "every device it held was idle since 2026-12-06T10:00:00Z (30m0s), past its idle limit of 30m0s (instancetype h100's spec.idle.stopAfter); start it again with kubectl gpu start parked"})
		}), h100(3)), arg: "parked",
			want: "instance/parked is stopped (spec.stopped is true; phase Stopped)\n" +
				"  kiln-controller stopped it for idleness at 2026-12-06T10:30:00Z: every device it held was idle since 2026-12-06T10:00:00Z (30m0s), past its idle limit of 30m0s (instancetype h100's spec.idle.stopAfter); start it again with kubectl gpu start parked\n" +
				"  a start would be admitted (dry run): kubectl gpu start parked -n tenant-a --wait\n" +
				"  instancetype/h100 (Active): 3 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "a held type says so", kiln: objs(big, h100(3, func(t *v1alpha1.InstanceType) {
			t.Spec.Hold, t.Status.Phase = v1alpha1.HoldNew, v1alpha1.InstanceTypeHeld
		})), arg: "big",
			want: "instance/big is Pending: " + unschedulable + "\n" +
				"  instancetype/h100 (Held): 3 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2; on Hold: no new starts\n"},
		{name: "type gone", kiln: objs(big), arg: "big",
			want: "instance/big is Pending: " + unschedulable + "\n" +
				"  instancetype/h100 does not exist; kubectl get instancetypes lists those there are\n"},
		{name: "failed, with the Instance's warnings",
			kiln: objs(instance("broken", func(i *v1alpha1.Instance) {
				i.Status.Phase, i.Status.Message = v1alpha1.InstanceFailed, "UnexpectedAdmissionError: Allocate failed"
			}), h100(1)),
			kube: objs(&corev1.Event{ObjectMeta: metav1.ObjectMeta{Name: "broken.1", Namespace: ns},
				InvolvedObject: corev1.ObjectReference{Kind: "Instance", Name: "broken", Namespace: ns},
				Reason:         "PodRejected", Type: corev1.EventTypeWarning, Message: "the kubelet refused the Pod"}),
			arg: "broken",
			want: "instance/broken is Failed: UnexpectedAdmissionError: Allocate failed\n" +
				"  event PodRejected: the kubelet refused the Pod\n" +
				"  instancetype/h100 (Active): 1 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n"},
		{name: "a Claim that waits", kiln: objs(waitingClaim, h100(2), teamBudget), arg: "claim/big",
			want: "claim/big is Pending, waiting (Capacity): no node of instancetype h100 has 4 free cards\n" +
				"  instancetype/h100 (Active): 2 of 16 cards free on 2 nodes; partitions free: 1g.10gb 7 of 7, 3g.40gb 1 of 2\n" +
				"  budget/team: accelerators 7 of 8 used, 1 left; accelerators.h100 4 of 4 used, 0 left\n"},
		{name: "a Claim by its full resource name", kiln: objs(bound), arg: "claims.gpu.kiln.dev/big",
			want: "claim/big is Bound on node gpu-0\n  holds 2 devices: GPU-1, GPU-2\n"},
		{name: "a bound Claim, with --claim", kiln: objs(bound), arg: "big --claim",
			want: "claim/big is Bound on node gpu-0\n  holds 2 devices: GPU-1, GPU-2\n"},
		{name: "not found", arg: "ghost",
			wantErr: `instance "ghost" not found in namespace "tenant-a"; list them with kubectl get instances -n tenant-a`},
		{name: "another kind", arg: "pod/x", wantErr: `why explains instances and claims, not "pod"`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kiln, tc.kube...)
			if tc.refuse != "" {
				f.kiln.PrependReactor("create", "instances", func(a k8stesting.Action) (bool, runtime.Object, error) {
					c := a.(k8stesting.CreateActionImpl)
					if a.GetSubresource() != "start" || len(c.CreateOptions.DryRun) == 0 {
						return false, nil, nil
					}
					return true, nil, errors.NewForbidden(v1alpha1.Resource("instances"), c.Name, &refusal{tc.refuse})
				})
			}
			out, _, err := f.run(t, append(append([]string{"why"}, strings.Fields(tc.arg)...), "-n", ns)...)
			if tc.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tc.wantErr) {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
			if tc.refuse != "" {
				if got, _ := f.kiln.Tracker().Get(v1alpha1.SchemeGroupVersion.WithResource("instances"), ns, "parked"); !got.(*v1alpha1.Instance).Spec.Stopped {
					t.Error("why started the Instance; the start must be a dry run")
				}
			}
		})
	}
}

type refusal struct{ msg string }

func (r *refusal) Error() string { return r.msg }
