package validation

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// validInstanceType is a defaulted type that offers every sharing mode.
func validInstanceType() *gpu.InstanceType {
	return &gpu.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100-80gb", Labels: map[string]string{"tier": "gpu"}},
		Spec: gpu.InstanceTypeSpec{
			DisplayName: "NVIDIA H100 80GB",
			Accelerator: &gpu.Accelerator{
				Vendor:         "nvidia",
				Model:          "NVIDIA-H100-80GB-HBM3",
				Memory:         qty("80Gi"),
				MaxPerInstance: 8,
				Exclusive:      &gpu.ExclusiveSharing{ResourceName: "nvidia.com/gpu"},
				Sliced: &gpu.SlicedSharing{
					Isolation:                 gpu.SliceIsolationHAMi,
					ResourceName:              "nvidia.com/gpu",
					MemoryPercentResourceName: "nvidia.com/gpumem-percentage",
					CoresResourceName:         "nvidia.com/gpucores",
				},
				Partitions: []gpu.PartitionProfile{
					{Name: "1g.10gb", Memory: qty("10Gi"), ResourceName: "nvidia.com/mig-1g.10gb"},
					{Name: "3g.40gb", Memory: qty("40Gi"), ResourceName: "nvidia.com/mig-3g.40gb"},
				},
			},
			ResourcesPerCard: gpu.HostResources{
				CPU:              qtyPtr("16"),
				Memory:           qtyPtr("128Gi"),
				EphemeralStorage: qtyPtr("200Gi"),
			},
			NodeSelector: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			Tolerations: []corev1.Toleration{
				{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule},
			},
			RuntimeClassName: ptr.To("nvidia"),
			NamespaceSelector: &metav1.LabelSelector{
				MatchLabels: map[string]string{"kiln.dev/gpu": "true"},
			},
		},
	}
}

func validInstanceTypeStatus() gpu.InstanceTypeStatus {
	return gpu.InstanceTypeStatus{
		Phase: gpu.InstanceTypeActive,
		Capacity: gpu.InstanceTypeCapacity{
			Nodes:     2,
			Cards:     16,
			FreeCards: 5,
			Partitions: []gpu.PartitionCapacity{
				{Name: "1g.10gb", Total: 14, Free: 3},
				{Name: "3g.40gb", Total: 4, Free: 0},
			},
		},
		Conditions:         []metav1.Condition{condition("Ready")},
		ObservedGeneration: 3,
	}
}

func TestValidateInstanceType(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.InstanceType)
		want   field.ErrorList
	}{
		// Accepted.
		{name: "valid", mutate: func(*gpu.InstanceType) {}},
		{name: "cpu-only type", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator = nil
			o.Spec.RuntimeClassName = nil
			o.Spec.Tolerations = nil
		}},
		{name: "empty spec", mutate: func(o *gpu.InstanceType) { o.Spec = gpu.InstanceTypeSpec{} }},
		{name: "amd exclusive only", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator = &gpu.Accelerator{
				Vendor: "amd", Model: "AMD-Instinct-MI300X", Memory: qty("192Gi"), MaxPerInstance: 1,
				Exclusive: &gpu.ExclusiveSharing{ResourceName: "amd.com/gpu"},
			}
		}},
		{name: "partitions only, with a +me profile", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Exclusive = nil
			o.Spec.Accelerator.Sliced = nil
			o.Spec.Accelerator.Partitions = []gpu.PartitionProfile{
				{Name: "1g.10gb+me", Memory: qty("10Gi"), ResourceName: "nvidia.com/mig-1g.10gb.me"},
				{Name: "7g.80gb", Memory: qty("80Gi"), ResourceName: "nvidia.com/mig-7g.80gb"},
			}
		}},
		{name: "maxPerInstance at the limit", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.MaxPerInstance = 64 }},
		{name: "quantities at their bounds", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Memory = qty("1Pi")
			o.Spec.ResourcesPerCard = gpu.HostResources{CPU: ptr.To(qty("10000")), Memory: ptr.To(qty("64Ti")), EphemeralStorage: ptr.To(qty("64Ti"))}
		}},
		// Past the bounds: typos that would wrap around when 64 cards
		// are counted.
		{name: "card memory of 7 exabytes", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Memory = qty("7E") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.memory"}}},
		{name: "host quantities per card past their bounds", mutate: func(o *gpu.InstanceType) {
			o.Spec.ResourcesPerCard = gpu.HostResources{CPU: ptr.To(qty("10001")), Memory: ptr.To(qty("1e308")), EphemeralStorage: ptr.To(qty("65Ti"))}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.cpu"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.memory"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.ephemeralStorage"},
		}},
		{name: "displayName of 256 multi-byte characters", mutate: func(o *gpu.InstanceType) {
			o.Spec.DisplayName = strings.Repeat("é", 256)
		}},
		{name: "hold", mutate: func(o *gpu.InstanceType) { o.Spec.Hold = gpu.HoldNew }},
		{name: "drain", mutate: func(o *gpu.InstanceType) { o.Spec.Hold = gpu.HoldDrain }},
		{name: "idle policy", mutate: func(o *gpu.InstanceType) {
			o.Spec.Idle = &gpu.IdlePolicy{StopAfter: metav1.Duration{Duration: time.Hour}, MinRunTime: &metav1.Duration{}, ActiveThreshold: ptr.To[int32](0)}
		}},
		{name: "tolerate everything", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations = []corev1.Toleration{{Operator: corev1.TolerationOpExists}}
		}},
		{name: "toleration with Equal, empty operator and NoExecute seconds", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations = []corev1.Toleration{
				{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "gpu", Effect: corev1.TaintEffectPreferNoSchedule},
				{Key: "dedicated", Value: "gpu"},
				{Key: "node.kubernetes.io/unreachable", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoExecute, TolerationSeconds: ptr.To(int64(300))},
			}
		}},
		{name: "namespaceSelector with expressions", mutate: func(o *gpu.InstanceType) {
			o.Spec.NamespaceSelector = &metav1.LabelSelector{MatchExpressions: []metav1.LabelSelectorRequirement{
				{Key: "team", Operator: metav1.LabelSelectorOpIn, Values: []string{"ml", "research"}},
			}}
		}},

		// Metadata.
		{name: "no name", mutate: func(o *gpu.InstanceType) { o.Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "metadata.name"}}},
		{name: "name not a DNS subdomain", mutate: func(o *gpu.InstanceType) { o.Name = "H100_80GB" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "cluster-scoped", mutate: func(o *gpu.InstanceType) { o.Namespace = "default" },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "metadata.namespace"}}},
		{name: "bad label", mutate: func(o *gpu.InstanceType) { o.Labels = map[string]string{"bad key": "x"} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.labels"}}},

		// displayName.
		{name: "displayName too long", mutate: func(o *gpu.InstanceType) { o.Spec.DisplayName = strings.Repeat("x", 257) },
			want: field.ErrorList{{Type: field.ErrorTypeTooLong, Field: "spec.displayName"}}},

		// accelerator.
		{name: "vendor missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Vendor = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.vendor"}}},
		{name: "vendor not a DNS label", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Vendor = "NVIDIA" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.vendor"}}},
		{name: "model missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Model = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.model"}}},
		{name: "model too long", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Model = strings.Repeat("m", 257) },
			want: field.ErrorList{{Type: field.ErrorTypeTooLong, Field: "spec.accelerator.model"}}},
		{name: "memory missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Memory = qty("0") },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.memory"}}},
		{name: "memory negative", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Memory = qty("-80Gi") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.memory"}}},
		{name: "maxPerInstance zero", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.MaxPerInstance = 0 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.maxPerInstance"}}},
		{name: "maxPerInstance too high", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.MaxPerInstance = 65 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.maxPerInstance"}}},
		{name: "no sharing mode", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Exclusive = nil
			o.Spec.Accelerator.Sliced = nil
			o.Spec.Accelerator.Partitions = nil
		}, want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator"}}},
		{name: "exclusive resourceName missing (unknown vendor)", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Vendor = "acme"
			o.Spec.Accelerator.Exclusive.ResourceName = ""
		}, want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.exclusive.resourceName"}}},
		{name: "exclusive resourceName not a qualified name", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Exclusive.ResourceName = "nvidia.com/gpu!"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.exclusive.resourceName"}}},
		{name: "sliced without isolation", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Sliced.Isolation = "" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.accelerator.sliced.isolation"}}},
		{name: "MPS shares", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Sliced = &gpu.SlicedSharing{Isolation: gpu.SliceIsolationMPS, ResourceName: "nvidia.com/gpu.shared", SharesPerCard: 4}
		}},
		{name: "MPS shares that are not whole percentages, with HAMi's resources", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Sliced.Isolation, o.Spec.Accelerator.Sliced.SharesPerCard = gpu.SliceIsolationMPS, 3
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.sliced.sharesPerCard"},
			{Type: field.ErrorTypeForbidden, Field: "spec.accelerator.sliced.memoryPercentResourceName"},
			{Type: field.ErrorTypeForbidden, Field: "spec.accelerator.sliced.coresResourceName"},
		}},
		{name: "shares per card without MPS", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Sliced.SharesPerCard = 4 },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.accelerator.sliced.sharesPerCard"}}},
		{name: "sliced resource names missing", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Sliced = &gpu.SlicedSharing{Isolation: gpu.SliceIsolationHAMi}
		},
			want: field.ErrorList{
				{Type: field.ErrorTypeRequired, Field: "spec.accelerator.sliced.resourceName"},
				{Type: field.ErrorTypeRequired, Field: "spec.accelerator.sliced.memoryPercentResourceName"},
				{Type: field.ErrorTypeRequired, Field: "spec.accelerator.sliced.coresResourceName"},
			}},
		{name: "sliced resource names not qualified names", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Sliced = &gpu.SlicedSharing{
				Isolation:                 gpu.SliceIsolationHAMi,
				ResourceName:              "/gpu",
				MemoryPercentResourceName: "nvidia.com/mem percent",
				CoresResourceName:         "-cores",
			}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.sliced.resourceName"},
			{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.sliced.memoryPercentResourceName"},
			{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.sliced.coresResourceName"},
		}},
		{name: "partition name missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.partitions[0].name"}}},
		{name: "partition name not a profile", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[1].Name = "3G.40GB" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.partitions[1].name"}}},
		{name: "partition name starting with a dot", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].Name = ".1g" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.partitions[0].name"}}},
		{name: "partition name too long", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].Name = strings.Repeat("a", 64) },
			want: field.ErrorList{{Type: field.ErrorTypeTooLong, Field: "spec.accelerator.partitions[0].name"}}},
		{name: "partition names duplicated", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[1].Name = "1g.10gb" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.accelerator.partitions[1].name"}}},
		{name: "partition memory missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].Memory = qty("0") },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.partitions[0].memory"}}},
		{name: "partition memory negative", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].Memory = qty("-10Gi") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.partitions[0].memory"}}},
		{name: "partition memory above the card's", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[1].Memory = qty("81Gi") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.partitions[1].memory"}}},
		{name: "partition memory equal to the card's", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[1].Memory = qty("80Gi") }},
		{name: "partition resourceName missing", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator.Partitions[0].ResourceName = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.accelerator.partitions[0].resourceName"}}},
		{name: "partition resourceName defaulted from a +me profile", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Partitions[0].Name = "1g.10gb+me"
			o.Spec.Accelerator.Partitions[0].ResourceName = "nvidia.com/mig-1g.10gb+me"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.partitions[0].resourceName"}}},

		// resourcesPerCard.
		{name: "resourcesPerCard not positive", mutate: func(o *gpu.InstanceType) {
			o.Spec.ResourcesPerCard = gpu.HostResources{CPU: qtyPtr("0"), Memory: qtyPtr("-1Gi"), EphemeralStorage: qtyPtr("0")}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.cpu"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.memory"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resourcesPerCard.ephemeralStorage"},
		}},

		// nodeSelector, tolerations, runtimeClassName, namespaceSelector, hold.
		{name: "nodeSelector key invalid", mutate: func(o *gpu.InstanceType) { o.Spec.NodeSelector = map[string]string{"gpu product": "h100"} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeSelector"}}},
		{name: "nodeSelector value invalid", mutate: func(o *gpu.InstanceType) { o.Spec.NodeSelector = map[string]string{"gpu": "H100 80GB"} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeSelector"}}},
		{name: "toleration operator unknown", mutate: func(o *gpu.InstanceType) { o.Spec.Tolerations[0].Operator = "In" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.tolerations[0].operator"}}},
		{name: "toleration effect unknown", mutate: func(o *gpu.InstanceType) { o.Spec.Tolerations[0].Effect = "NoRun" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.tolerations[0].effect"}}},
		{name: "toleration key invalid", mutate: func(o *gpu.InstanceType) { o.Spec.Tolerations[0].Key = "nvidia.com/gpu!" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].key"}}},
		{name: "toleration Exists with a value", mutate: func(o *gpu.InstanceType) { o.Spec.Tolerations[0].Value = "present" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].value"}}},
		{name: "toleration empty key with Equal", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations[0] = corev1.Toleration{Operator: corev1.TolerationOpEqual, Value: "x"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].operator"}}},
		{name: "toleration empty key with empty operator", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations[0] = corev1.Toleration{}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].operator"}}},
		{name: "toleration Equal with an invalid value", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations[0] = corev1.Toleration{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "not a label value"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].value"}}},
		{name: "toleration seconds without NoExecute", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations[0].TolerationSeconds = ptr.To(int64(60))
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.tolerations[0].effect"}}},
		{name: "second toleration is indexed", mutate: func(o *gpu.InstanceType) {
			o.Spec.Tolerations = append(o.Spec.Tolerations, corev1.Toleration{Key: "a", Operator: "Gt", Effect: "Never"})
		}, want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.tolerations[1].operator"}, {Type: field.ErrorTypeNotSupported, Field: "spec.tolerations[1].effect"}}},
		{name: "runtimeClassName invalid", mutate: func(o *gpu.InstanceType) { o.Spec.RuntimeClassName = ptr.To("Nvidia_Runtime") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.runtimeClassName"}}},
		{name: "runtimeClassName empty", mutate: func(o *gpu.InstanceType) { o.Spec.RuntimeClassName = ptr.To("") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.runtimeClassName"}}},
		{name: "namespaceSelector matchLabels invalid", mutate: func(o *gpu.InstanceType) {
			o.Spec.NamespaceSelector.MatchLabels = map[string]string{"team": "ML team"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.namespaceSelector.matchLabels"}}},
		{name: "namespaceSelector In without values", mutate: func(o *gpu.InstanceType) {
			o.Spec.NamespaceSelector.MatchExpressions = []metav1.LabelSelectorRequirement{{Key: "team", Operator: metav1.LabelSelectorOpIn}}
		}, want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.namespaceSelector.matchExpressions[0].values"}}},
		{name: "hold unknown", mutate: func(o *gpu.InstanceType) { o.Spec.Hold = "Pause" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hold"}}},
		{name: "idle policy without stopAfter", mutate: func(o *gpu.InstanceType) { o.Spec.Idle = &gpu.IdlePolicy{} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.idle.stopAfter"}}},
		{name: "idle policy out of range", mutate: func(o *gpu.InstanceType) {
			o.Spec.Idle = &gpu.IdlePolicy{StopAfter: metav1.Duration{Duration: time.Hour}, MinRunTime: &metav1.Duration{Duration: -time.Minute}, ActiveThreshold: ptr.To[int32](101)}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.idle.minRunTime"},
			{Type: field.ErrorTypeInvalid, Field: "spec.idle.activeThreshold"},
		}},

		{name: "several errors at once", mutate: func(o *gpu.InstanceType) {
			o.Spec.Accelerator.Vendor = ""
			o.Spec.Accelerator.MaxPerInstance = -1
			o.Spec.Hold = "hold"
		}, want: field.ErrorList{
			{Type: field.ErrorTypeRequired, Field: "spec.accelerator.vendor"},
			{Type: field.ErrorTypeInvalid, Field: "spec.accelerator.maxPerInstance"},
			{Type: field.ErrorTypeNotSupported, Field: "spec.hold"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validInstanceType()
			tc.mutate(obj)
			expectErrors(t, ValidateInstanceType(obj), tc.want)
		})
	}
}

func TestValidateInstanceTypeUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.InstanceType)
		want   field.ErrorList
	}{
		{name: "unchanged", mutate: func(*gpu.InstanceType) {}},
		{name: "spec may change", mutate: func(o *gpu.InstanceType) {
			o.Spec.DisplayName = "H100"
			o.Spec.Accelerator.MaxPerInstance = 4
			o.Spec.Hold = gpu.HoldDrain
			o.Spec.NodeSelector = nil
		}},
		{name: "accelerator may go", mutate: func(o *gpu.InstanceType) { o.Spec.Accelerator = nil }},
		{name: "new spec is validated", mutate: func(o *gpu.InstanceType) { o.Spec.Hold = "Pause" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hold"}}},
		{name: "name is immutable", mutate: func(o *gpu.InstanceType) { o.Name = "a100" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "resourceVersion required", mutate: func(o *gpu.InstanceType) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
		{name: "new labels are validated", mutate: func(o *gpu.InstanceType) { o.Labels = map[string]string{"a": "b c"} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.labels"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstanceType()
			old.ResourceVersion = "7"
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateInstanceTypeUpdate(obj, old), tc.want)
		})
	}
}

func TestValidateInstanceTypeStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.InstanceType)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.InstanceType) {}},
		{name: "empty status", mutate: func(o *gpu.InstanceType) { o.Status = gpu.InstanceTypeStatus{} }},
		{name: "draining", mutate: func(o *gpu.InstanceType) { o.Status.Phase = gpu.InstanceTypeDraining }},
		{name: "spec is not checked here", mutate: func(o *gpu.InstanceType) { o.Spec.Hold = "Pause" }},

		{name: "phase unknown", mutate: func(o *gpu.InstanceType) { o.Status.Phase = "Ready" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.phase"}}},
		{name: "negative counts", mutate: func(o *gpu.InstanceType) {
			o.Status.Capacity.Nodes = -1
			o.Status.Capacity.Cards = -1
			o.Status.Capacity.FreeCards = -1
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "status.capacity.nodes"},
			{Type: field.ErrorTypeInvalid, Field: "status.capacity.cards"},
			{Type: field.ErrorTypeInvalid, Field: "status.capacity.freeCards"},
		}},
		{name: "more free cards than cards", mutate: func(o *gpu.InstanceType) { o.Status.Capacity.FreeCards = 17 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.capacity.freeCards"}}},
		{name: "partition name missing", mutate: func(o *gpu.InstanceType) { o.Status.Capacity.Partitions[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.capacity.partitions[0].name"}}},
		{name: "partition names duplicated", mutate: func(o *gpu.InstanceType) { o.Status.Capacity.Partitions[1].Name = "1g.10gb" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "status.capacity.partitions[1].name"}}},
		{name: "partition counts negative", mutate: func(o *gpu.InstanceType) {
			o.Status.Capacity.Partitions[1].Total = -1
			o.Status.Capacity.Partitions[1].Free = -1
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "status.capacity.partitions[1].total"},
			{Type: field.ErrorTypeInvalid, Field: "status.capacity.partitions[1].free"},
		}},
		{name: "more free partitions than partitions", mutate: func(o *gpu.InstanceType) { o.Status.Capacity.Partitions[0].Free = 15 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.capacity.partitions[0].free"}}},
		{name: "condition without reason", mutate: func(o *gpu.InstanceType) { o.Status.Conditions[0].Reason = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.conditions[0].reason"}}},
		{name: "conditions duplicated", mutate: func(o *gpu.InstanceType) {
			o.Status.Conditions = append(o.Status.Conditions, condition("Ready"))
		}, want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "status.conditions[1]"}}},
		{name: "observedGeneration negative", mutate: func(o *gpu.InstanceType) { o.Status.ObservedGeneration = -1 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.observedGeneration"}}},
		{name: "metadata update rules apply", mutate: func(o *gpu.InstanceType) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstanceType()
			old.ResourceVersion = "7"
			old.Status = validInstanceTypeStatus()
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateInstanceTypeStatusUpdate(obj, old), tc.want)
		})
	}
}
