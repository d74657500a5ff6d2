package validation

import (
	"fmt"
	"slices"
	"unicode/utf8"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

const (
	maxDisplayNameLength = 256
	maxModelLength       = 256
)

var (
	supportedHoldModes          = []gpu.HoldMode{gpu.HoldNew, gpu.HoldDrain}
	supportedInstanceTypePhases = []gpu.InstanceTypePhase{gpu.InstanceTypeActive, gpu.InstanceTypeHeld, gpu.InstanceTypeDraining}
	supportedTolerationOps      = []corev1.TolerationOperator{corev1.TolerationOpEqual, corev1.TolerationOpExists}
	supportedTaintEffects       = []corev1.TaintEffect{corev1.TaintEffectNoSchedule, corev1.TaintEffectPreferNoSchedule, corev1.TaintEffectNoExecute}
)

// ValidateInstanceType validates a new InstanceType. InstanceTypes are
// cluster-scoped.
func ValidateInstanceType(obj *gpu.InstanceType) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateInstanceTypeSpec(&obj.Spec, field.NewPath("spec"))...)
}

// ValidateInstanceTypeUpdate validates an update of an InstanceType's
// metadata and spec. The whole spec may change: an admin retunes a pool
// in place, and running Instances keep the Pods they have.
func ValidateInstanceTypeUpdate(obj, old *gpu.InstanceType) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateInstanceTypeSpec(&obj.Spec, field.NewPath("spec"))...)
}

// ValidateInstanceTypeStatusUpdate validates an update of an InstanceType's
// status.
func ValidateInstanceTypeStatusUpdate(obj, old *gpu.InstanceType) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateInstanceTypeStatus(&obj.Status, field.NewPath("status"))...)
}

func validateInstanceTypeSpec(spec *gpu.InstanceTypeSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if utf8.RuneCountInString(spec.DisplayName) > maxDisplayNameLength {
		allErrs = append(allErrs, field.TooLongCharacters(fldPath.Child("displayName"), spec.DisplayName, maxDisplayNameLength))
	}
	if spec.Accelerator != nil {
		allErrs = append(allErrs, validateAccelerator(spec.Accelerator, fldPath.Child("accelerator"))...)
	}
	allErrs = append(allErrs, validateHostResources(&spec.ResourcesPerCard, fldPath.Child("resourcesPerCard"))...)
	allErrs = append(allErrs, metav1validation.ValidateLabels(spec.NodeSelector, fldPath.Child("nodeSelector"))...)
	allErrs = append(allErrs, validateTolerations(spec.Tolerations, fldPath.Child("tolerations"))...)
	if spec.RuntimeClassName != nil {
		rcPath := fldPath.Child("runtimeClassName")
		if *spec.RuntimeClassName == "" {
			allErrs = append(allErrs, field.Invalid(rcPath, "", "must not be empty; remove runtimeClassName to use the node's default runtime"))
		} else {
			allErrs = append(allErrs, validateDNSSubdomain(*spec.RuntimeClassName, rcPath)...)
		}
	}
	allErrs = append(allErrs, metav1validation.ValidateLabelSelector(spec.NamespaceSelector,
		metav1validation.LabelSelectorValidationOptions{}, fldPath.Child("namespaceSelector"))...)
	allErrs = append(allErrs, validateOptionalEnum(spec.Hold, supportedHoldModes, fldPath.Child("hold"))...)
	if spec.Idle != nil {
		allErrs = append(allErrs, validateIdlePolicy(spec.Idle, fldPath.Child("idle"))...)
	}
	return allErrs
}

func validateIdlePolicy(p *gpu.IdlePolicy, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if p.StopAfter.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("stopAfter"), p.StopAfter.Duration.String(),
			"must be greater than 0, e.g. 30m; remove idle to stop no Instance of this type for idleness"))
	}
	if p.MinRunTime != nil && p.MinRunTime.Duration < 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("minRunTime"), p.MinRunTime.Duration.String(), "must not be negative"))
	}
	if t := p.ActiveThreshold; t != nil && (*t < 0 || *t > 100) {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("activeThreshold"), *t, "must be a percentage, 0 to 100"))
	}
	return allErrs
}

func validateAccelerator(acc *gpu.Accelerator, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList

	vendorPath := fldPath.Child("vendor")
	if acc.Vendor == "" {
		allErrs = append(allErrs, field.Required(vendorPath, "set the card's vendor, e.g. nvidia, amd or intel"))
	} else {
		for _, msg := range utilvalidation.IsDNS1123Label(acc.Vendor) {
			allErrs = append(allErrs, field.Invalid(vendorPath, acc.Vendor, msg))
		}
	}

	modelPath := fldPath.Child("model")
	if acc.Model == "" {
		allErrs = append(allErrs, field.Required(modelPath, "set the card model as the node label names it, e.g. NVIDIA-H100-80GB-HBM3"))
	} else if utf8.RuneCountInString(acc.Model) > maxModelLength {
		allErrs = append(allErrs, field.TooLongCharacters(modelPath, acc.Model, maxModelLength))
	}

	memPath := fldPath.Child("memory")
	if acc.Memory.IsZero() {
		allErrs = append(allErrs, field.Required(memPath, "set the memory of one card, e.g. 80Gi"))
	} else {
		allErrs = append(allErrs, validatePositiveQuantity(acc.Memory, memPath)...)
		allErrs = append(allErrs, validateQuantityAtMost(acc.Memory, maxCardMemory, memPath)...)
	}

	allErrs = append(allErrs, validateInRange(int64(acc.MaxPerInstance), 1, maxAccelerators, fldPath.Child("maxPerInstance"))...)

	if acc.Exclusive == nil && acc.Sliced == nil && len(acc.Partitions) == 0 {
		allErrs = append(allErrs, field.Required(fldPath, "must offer the card in at least one way: set exclusive, sliced or partitions"))
	}
	if acc.Exclusive != nil {
		allErrs = append(allErrs, validateRequiredResourceName(acc.Exclusive.ResourceName, "nvidia.com/gpu",
			fldPath.Child("exclusive", "resourceName"))...)
	}
	if s := acc.Sliced; s != nil {
		allErrs = append(allErrs, validateSliced(s, fldPath.Child("sliced"))...)
	}

	seen := make(map[string]bool, len(acc.Partitions))
	for i, p := range acc.Partitions {
		idxPath := fldPath.Child("partitions").Index(i)
		namePath := idxPath.Child("name")
		allErrs = append(allErrs, validateProfileName(p.Name, namePath)...)
		if p.Name != "" {
			if seen[p.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, p.Name))
			}
			seen[p.Name] = true
		}

		memPath := idxPath.Child("memory")
		switch {
		case p.Memory.IsZero():
			allErrs = append(allErrs, field.Required(memPath, "set the memory of one partition, e.g. 10Gi"))
		case p.Memory.Sign() < 0:
			allErrs = append(allErrs, validatePositiveQuantity(p.Memory, memPath)...)
		case !BoundedQuantity(p.Memory):
			allErrs = append(allErrs, ValidateBoundedQuantity(p.Memory, memPath)...)
		case acc.Memory.Sign() > 0 && BoundedQuantity(acc.Memory) && p.Memory.Cmp(acc.Memory) > 0:
			allErrs = append(allErrs, field.Invalid(memPath, p.Memory.String(),
				fmt.Sprintf("must not exceed the card's memory (%s)", acc.Memory.String())))
		}

		allErrs = append(allErrs, validateRequiredResourceName(p.ResourceName, "nvidia.com/mig-1g.10gb", idxPath.Child("resourceName"))...)
	}
	return allErrs
}

func validateHostResources(r *gpu.HostResources, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, q := range []struct {
		name  string
		value *resource.Quantity
		limit string
	}{
		{"cpu", r.CPU, maxHostCPUPerCard},
		{"memory", r.Memory, maxHostBytesPerCard},
		{"ephemeralStorage", r.EphemeralStorage, maxHostBytesPerCard},
	} {
		allErrs = append(allErrs, validateOptionalPositiveQuantity(q.value, fldPath.Child(q.name))...)
		if q.value != nil {
			allErrs = append(allErrs, validateQuantityAtMost(*q.value, q.limit, fldPath.Child(q.name))...)
		}
	}
	return allErrs
}

// validateTolerations follows the rules the Pod will be held to, so a bad
// toleration fails here instead of when the controller creates the Pod.
func validateTolerations(tolerations []corev1.Toleration, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, t := range tolerations {
		idxPath := fldPath.Index(i)
		if t.Key != "" {
			allErrs = append(allErrs, validateQualifiedName(t.Key, idxPath.Child("key"))...)
		}
		switch t.Operator {
		case corev1.TolerationOpEqual, "":
			if t.Key == "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("operator"), t.Operator,
					"must be Exists when key is empty (which tolerates every taint); set a key or use operator: Exists"))
			}
			for _, msg := range content.IsLabelValue(t.Value) {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value, msg))
			}
		case corev1.TolerationOpExists:
			if t.Value != "" {
				allErrs = append(allErrs, field.Invalid(idxPath.Child("value"), t.Value,
					"must be empty when operator is Exists; remove value or use operator: Equal"))
			}
		default:
			allErrs = append(allErrs, field.NotSupported(idxPath.Child("operator"), t.Operator, supportedTolerationOps))
		}
		allErrs = append(allErrs, validateOptionalEnum(t.Effect, supportedTaintEffects, idxPath.Child("effect"))...)
		if t.TolerationSeconds != nil && t.Effect != corev1.TaintEffectNoExecute {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("effect"), t.Effect,
				"must be NoExecute when tolerationSeconds is set; remove tolerationSeconds or use effect: NoExecute"))
		}
	}
	return allErrs
}

func validateInstanceTypeStatus(status *gpu.InstanceTypeStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateOptionalEnum(status.Phase, supportedInstanceTypePhases, fldPath.Child("phase"))...)

	capPath := fldPath.Child("capacity")
	c := &status.Capacity
	allErrs = append(allErrs, validateNonnegativeInt(int64(c.Nodes), capPath.Child("nodes"))...)
	allErrs = append(allErrs, validateNonnegativeInt(int64(c.Cards), capPath.Child("cards"))...)
	allErrs = append(allErrs, validateNonnegativeInt(int64(c.FreeCards), capPath.Child("freeCards"))...)
	if c.Cards >= 0 && c.FreeCards > c.Cards {
		allErrs = append(allErrs, field.Invalid(capPath.Child("freeCards"), c.FreeCards,
			fmt.Sprintf("must not exceed cards (%d)", c.Cards)))
	}
	seen := make(map[string]bool, len(c.Partitions))
	for i, p := range c.Partitions {
		idxPath := capPath.Child("partitions").Index(i)
		namePath := idxPath.Child("name")
		allErrs = append(allErrs, validateProfileName(p.Name, namePath)...)
		if p.Name != "" {
			if seen[p.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, p.Name))
			}
			seen[p.Name] = true
		}
		allErrs = append(allErrs, validateNonnegativeInt(int64(p.Total), idxPath.Child("total"))...)
		allErrs = append(allErrs, validateNonnegativeInt(int64(p.Free), idxPath.Child("free"))...)
		if p.Total >= 0 && p.Free > p.Total {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("free"), p.Free,
				fmt.Sprintf("must not exceed total (%d)", p.Total)))
		}
	}

	allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, validateNonnegativeInt(status.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	return allErrs
}

// mpsShares are the shares per card an MPS pool may be cut into: each a
// whole percentage, so a slice's memoryPercent names it exactly.
var mpsShares = []int32{2, 4, 5, 10, 20, 25}

func validateSliced(s *gpu.SlicedSharing, fldPath *field.Path) field.ErrorList {
	allErrs := validateRequiredResourceName(s.ResourceName, "nvidia.com/gpu", fldPath.Child("resourceName"))
	sharesPath := fldPath.Child("sharesPerCard")
	switch s.Isolation {
	case gpu.SliceIsolationHAMi:
		allErrs = append(allErrs, validateRequiredResourceName(s.MemoryPercentResourceName, "nvidia.com/gpumem-percentage", fldPath.Child("memoryPercentResourceName"))...)
		allErrs = append(allErrs, validateRequiredResourceName(s.CoresResourceName, "nvidia.com/gpucores", fldPath.Child("coresResourceName"))...)
		if s.SharesPerCard != 0 {
			allErrs = append(allErrs, field.Forbidden(sharesPath, "only isolation MPS cuts cards into fixed shares; HAMi slices by the memory and cores resources"))
		}
	case gpu.SliceIsolationMPS:
		if !slices.Contains(mpsShares, s.SharesPerCard) {
			allErrs = append(allErrs, field.Invalid(sharesPath, s.SharesPerCard, fmt.Sprintf("must be one of %v, the --mps-shares of the pool's node agents", mpsShares)))
		}
		for _, f := range []struct {
			name, value string
		}{{"memoryPercentResourceName", s.MemoryPercentResourceName}, {"coresResourceName", s.CoresResourceName}} {
			if f.value != "" {
				allErrs = append(allErrs, field.Forbidden(fldPath.Child(f.name), "an MPS share's limits are set by the node agent's MPS server, not by a resource: remove it"))
			}
		}
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("isolation"), s.Isolation, []gpu.SliceIsolation{gpu.SliceIsolationHAMi, gpu.SliceIsolationMPS}))
	}
	return allErrs
}
