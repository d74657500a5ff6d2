package validation

import (
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func validClaim() *gpu.Claim {
	return &gpu.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: "four-h100s", Namespace: "team-a"},
		Spec: gpu.ClaimSpec{
			Type:         "h100-80gb",
			Accelerators: ptr.To(int32(4)),
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
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.Claim) {}},
		{name: "partition, no node, no expiry", mutate: func(o *gpu.Claim) {
			o.Spec = gpu.ClaimSpec{Type: "h100-80gb", Partition: "3g.40gb"}
		}},
		{name: "64 accelerators", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptr.To(int32(64)) }},

		{name: "namespace missing", mutate: func(o *gpu.Claim) { o.Namespace = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "metadata.namespace"}}},
		{name: "name invalid", mutate: func(o *gpu.Claim) { o.Name = "Four H100s" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "name of 63 characters", mutate: func(o *gpu.Claim) { o.Name = strings.Repeat("a", 63) }},
		{name: "name longer than a label value", mutate: func(o *gpu.Claim) { o.Name = strings.Repeat("a", 64) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "name with a dot", mutate: func(o *gpu.Claim) { o.Name = "four.h100" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "type missing", mutate: func(o *gpu.Claim) { o.Spec.Type = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.type"}}},
		{name: "type invalid", mutate: func(o *gpu.Claim) { o.Spec.Type = "H100" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}}},
		{name: "neither accelerators nor partition", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = nil },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec"}}},
		{name: "accelerators and partition", mutate: func(o *gpu.Claim) { o.Spec.Partition = "1g.10gb" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec"}}},
		{name: "accelerators zero", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptr.To(int32(0)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerators"}}},
		{name: "accelerators above 64", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptr.To(int32(65)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerators"}}},
		{name: "partition invalid", mutate: func(o *gpu.Claim) {
			o.Spec.Accelerators = nil
			o.Spec.Partition = "3G 40GB"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.partition"}}},
		{name: "nodeName invalid", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "GPU_Node_1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeName"}}},
		{name: "expireAfter zero", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.expireAfter"}}},
		{name: "expireAfter negative", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{Duration: -time.Hour} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.expireAfter"}}},
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
		want   field.ErrorList
	}{
		{name: "unchanged", mutate: func(*gpu.Claim) {}},
		{name: "expireAfter may change", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{Duration: 8 * time.Hour} }},
		{name: "expireAfter may go", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = nil }},
		{name: "labels may change", mutate: func(o *gpu.Claim) { o.Labels = map[string]string{"owner": "alice"} }},
		{name: "same count in a new pointer", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptr.To(int32(4)) }},

		{name: "type is immutable", mutate: func(o *gpu.Claim) { o.Spec.Type = "a100-40gb" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}}},
		{name: "accelerators are immutable", mutate: func(o *gpu.Claim) { o.Spec.Accelerators = ptr.To(int32(8)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerators"}}},
		{name: "switching to a partition", mutate: func(o *gpu.Claim) {
			o.Spec.Accelerators = nil
			o.Spec.Partition = "3g.40gb"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerators"}, {Type: field.ErrorTypeInvalid, Field: "spec.partition"}}},
		{name: "nodeName is immutable", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "gpu-node-2" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeName"}}},
		{name: "nodeName cannot be dropped", mutate: func(o *gpu.Claim) { o.Spec.NodeName = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeName"}}},
		{name: "everything but expireAfter changed", mutate: func(o *gpu.Claim) {
			o.Spec = gpu.ClaimSpec{Type: "a100", Accelerators: ptr.To(int32(1)), NodeName: "gpu-node-9", ExpireAfter: o.Spec.ExpireAfter}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}, {Type: field.ErrorTypeInvalid, Field: "spec.accelerators"}, {Type: field.ErrorTypeInvalid, Field: "spec.nodeName"}}},
		{name: "new spec is validated", mutate: func(o *gpu.Claim) { o.Spec.ExpireAfter = &metav1.Duration{} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.expireAfter"}}},
		{name: "resourceVersion required", mutate: func(o *gpu.Claim) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
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
	expectErrors(t, ValidateClaimUpdate(obj, old), field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.partition"}})
}

func TestValidateClaimStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Claim)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.Claim) {}},
		{name: "empty status", mutate: func(o *gpu.Claim) { o.Status = gpu.ClaimStatus{} }},
		{name: "expired", mutate: func(o *gpu.Claim) { o.Status.Phase = gpu.ClaimExpired }},
		{name: "spec is not checked here", mutate: func(o *gpu.Claim) { o.Spec.Type = "" }},

		{name: "phase unknown", mutate: func(o *gpu.Claim) { o.Status.Phase = "Waiting" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.phase"}}},
		{name: "nodeName invalid", mutate: func(o *gpu.Claim) { o.Status.NodeName = "Node 1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.nodeName"}}},
		{name: "device empty", mutate: func(o *gpu.Claim) { o.Status.Devices[0] = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.devices[0]"}}},
		{name: "devices duplicated", mutate: func(o *gpu.Claim) { o.Status.Devices[3] = "GPU-1" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "status.devices[3]"}}},
		{name: "attachedTo invalid", mutate: func(o *gpu.Claim) { o.Status.AttachedTo = "Train_1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.attachedTo"}}},
		{name: "conditions duplicated", mutate: func(o *gpu.Claim) {
			o.Status.Conditions = append(o.Status.Conditions, condition(gpu.ClaimConditionWaiting))
		}, want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "status.conditions[1]"}}},
		{name: "condition type invalid", mutate: func(o *gpu.Claim) { o.Status.Conditions[0].Type = "not a type" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.conditions[0].type"}}},
		{name: "observedGeneration negative", mutate: func(o *gpu.Claim) { o.Status.ObservedGeneration = -2 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.observedGeneration"}}},
		{name: "metadata update rules apply", mutate: func(o *gpu.Claim) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
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
