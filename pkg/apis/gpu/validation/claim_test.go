package validation

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func validClaim() *gpu.Claim {
	return &gpu.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: "four-h100s", Namespace: "team-a"},
		Spec: gpu.ClaimSpec{
			Type:         "h100-80gb",
			Accelerators: ptrTo(int32(4)),
			NodeName:     "gpu-node-1",
			ExpireAfter:  &metav1.Duration{Duration: 2 * time.Hour},
		},
	}
}

func validClaimStatus() gpu.ClaimStatus {
	return gpu.ClaimStatus{
		Phase:              gpu.ClaimAttached,
		NodeName:           "gpu-node-1",
		Devices:            []string{"GPU-1", "GPU-2", "GPU-3", "GPU-4"},
		AttachedTo:         "train-1",
		ExpiresAt:          &testTime,
		Conditions:         []metav1.Condition{condition(gpu.ClaimConditionWaiting)},
		ObservedGeneration: 1,
	}
}

func TestValidateClaim(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Claim)
		want   []string
	}{
		{name: "valid", mutate: func(*gpu.Claim) {}},
		{name: "partition, no node, no expiry", mutate: func(o *gpu.Claim) {
			o.Spec = gpu.ClaimSpec{Type: "h100-80gb", Partition: "3g.40gb"}
		}},
		{name: "64 accelerators", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptrTo(int32(64)) }},

		{name: "namespace missing", mutate: func(o *gpu.Claim) { o.Namespace = "" },
			want: []string{"Required metadata.namespace"}},
		{name: "name invalid", mutate: func(o *gpu.Claim) { o.Name = "Four H100s" },
			want: []string{"Invalid metadata.name"}},
		{name: "type missing", mutate: func(o *gpu.Claim) { o.Spec.Type = "" },
			want: []string{"Required spec.type"}},
		{name: "type invalid", mutate: func(o *gpu.Claim) { o.Spec.Type = "H100" },
			want: []string{"Invalid spec.type"}},
		{name: "neither accelerators nor partition", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = nil },
			want: []string{"Required spec"}},
		{name: "accelerators and partition", mutate: func(o *gpu.Claim) { o.Spec.Partition = "1g.10gb" },
			want: []string{"Invalid spec"}},
		{name: "accelerators zero", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptrTo(int32(0)) },
			want: []string{"Invalid spec.accelerators"}},
		{name: "accelerators above 64", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptrTo(int32(65)) },
			want: []string{"Invalid spec.accelerators"}},
		{name: "partition invalid", mutate: func(o *gpu.Claim) {
			o.Spec.Accelerators = nil
			o.Spec.Partition = "3G 40GB"
		}, want: []string{"Invalid spec.partition"}},
		{name: "nodeName invalid", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "GPU_Node_1" },
			want: []string{"Invalid spec.nodeName"}},
		{name: "expireAfter zero", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{} },
			want: []string{"Invalid spec.expireAfter"}},
		{name: "expireAfter negative", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{Duration: -time.Hour} },
			want: []string{"Invalid spec.expireAfter"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validClaim()
			tc.mutate(obj)
			expectErrors(t, ValidateClaim(obj), tc.want)
		})
	}
}

func TestValidateClaimUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Claim)
		want   []string
	}{
		{name: "unchanged", mutate: func(*gpu.Claim) {}},
		{name: "expireAfter may change", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{Duration: 8 * time.Hour} }},
		{name: "expireAfter may go", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = nil }},
		{name: "labels may change", mutate: func(o *gpu.Claim) { o.Labels = map[string]string{"owner": "alice"} }},
		{name: "same count in a new pointer", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptrTo(int32(4)) }},

		{name: "type is immutable", mutate: func(o *gpu.Claim) { o.Spec.Type = "a100-40gb" },
			want: []string{"Invalid spec.type"}},
		{name: "accelerators are immutable", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptrTo(int32(8)) },
			want: []string{"Invalid spec.accelerators"}},
		{name: "switching to a partition", mutate: func(o *gpu.Claim) {
			o.Spec.Accelerators = nil
			o.Spec.Partition = "3g.40gb"
		}, want: []string{"Invalid spec.accelerators", "Invalid spec.partition"}},
		{name: "nodeName is immutable", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "gpu-node-2" },
			want: []string{"Invalid spec.nodeName"}},
		{name: "nodeName cannot be dropped", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "" },
			want: []string{"Invalid spec.nodeName"}},
		{name: "everything but expireAfter changed", mutate: func(o *gpu.Claim) {
			o.Spec = gpu.ClaimSpec{Type: "a100", Accelerators: ptrTo(int32(1)), NodeName: "gpu-node-9", ExpireAfter: o.Spec.ExpireAfter}
		}, want: []string{"Invalid spec.type", "Invalid spec.accelerators", "Invalid spec.nodeName"}},
		{name: "new spec is validated", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{} },
			want: []string{"Invalid spec.expireAfter"}},
		{name: "resourceVersion required", mutate: func(o *gpu.Claim) { o.ResourceVersion = "" },
			want: []string{"Invalid metadata.resourceVersion"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validClaim()
			old.ResourceVersion = "5"
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateClaimUpdate(obj, old), tc.want)
		})
	}
}

func TestValidateClaimUpdatePartition(t *testing.T) {
	old := validClaim()
	old.ResourceVersion = "5"
	old.Spec.Accelerators = nil
	old.Spec.Partition = "1g.10gb"
	obj := old.DeepCopy()
	obj.Spec.Partition = "3g.40gb"
	expectErrors(t, ValidateClaimUpdate(obj, old), []string{"Invalid spec.partition"})
}

func TestValidateClaimStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Claim)
		want   []string
	}{
		{name: "valid", mutate: func(*gpu.Claim) {}},
		{name: "empty status", mutate: func(o *gpu.Claim) { o.Status = gpu.ClaimStatus{} }},
		{name: "expired", mutate: func(o *gpu.Claim) { o.Status.Phase = gpu.ClaimExpired }},
		{name: "spec is not checked here", mutate: func(o *gpu.Claim) { o.Spec.Type = "" }},

		{name: "phase unknown", mutate: func(o *gpu.Claim) { o.Status.Phase = "Waiting" },
			want: []string{"NotSupported status.phase"}},
		{name: "nodeName invalid", mutate: func(o *gpu.Claim) { o.Status.NodeName = "Node 1" },
			want: []string{"Invalid status.nodeName"}},
		{name: "device empty", mutate: func(o *gpu.Claim) { o.Status.Devices[0] = "" },
			want: []string{"Required status.devices[0]"}},
		{name: "devices duplicated", mutate: func(o *gpu.Claim) { o.Status.Devices[3] = "GPU-1" },
			want: []string{"Duplicate status.devices[3]"}},
		{name: "attachedTo invalid", mutate: func(o *gpu.Claim) { o.Status.AttachedTo = "Train_1" },
			want: []string{"Invalid status.attachedTo"}},
		{name: "conditions duplicated", mutate: func(o *gpu.Claim) {
			o.Status.Conditions = append(o.Status.Conditions, condition(gpu.ClaimConditionWaiting))
		}, want: []string{"Duplicate status.conditions[1]"}},
		{name: "condition type invalid", mutate: func(o *gpu.Claim) { o.Status.Conditions[0].Type = "not a type" },
			want: []string{"Invalid status.conditions[0].type"}},
		{name: "observedGeneration negative", mutate: func(o *gpu.Claim) { o.Status.ObservedGeneration = -2 },
			want: []string{"Invalid status.observedGeneration"}},
		{name: "metadata update rules apply", mutate: func(o *gpu.Claim) { o.ResourceVersion = "" },
			want: []string{"Invalid metadata.resourceVersion"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validClaim()
			old.ResourceVersion = "5"
			old.Status = validClaimStatus()
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateClaimStatusUpdate(obj, old), tc.want)
		})
	}
}
