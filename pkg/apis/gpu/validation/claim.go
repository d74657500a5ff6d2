package validation

import (
	"strings"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

var supportedClaimPhases = []gpu.ClaimPhase{gpu.ClaimPending, gpu.ClaimBound, gpu.ClaimAttached, gpu.ClaimLost, gpu.ClaimExpired}

// ValidateClaim validates a new Claim. Its name is a DNS label (at most 63
// characters), since the Pods that run on it carry it as a label value.
func ValidateClaim(obj *gpu.Claim) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, true, apivalidation.NameIsDNSLabel, field.NewPath("metadata"))
	return append(allErrs, validateClaimSpec(&obj.Spec, field.NewPath("spec"))...)
}

// ValidateClaimUpdate validates an update of a Claim's metadata and spec.
// Only expireAfter may change: the controller holds devices for what was
// asked, and a different reservation is a new Claim.
func ValidateClaimUpdate(obj, old *gpu.Claim) field.ErrorList {
	specPath := field.NewPath("spec")
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateClaimSpec(&obj.Spec, specPath)...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(obj.Spec.Type, old.Spec.Type, specPath.Child("type"))...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(obj.Spec.Accelerators, old.Spec.Accelerators, specPath.Child("accelerators"))...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(obj.Spec.Partition, old.Spec.Partition, specPath.Child("partition"))...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(obj.Spec.NodeName, old.Spec.NodeName, specPath.Child("nodeName"))...)
	return allErrs
}

// ValidateClaimStatusUpdate validates an update of a Claim's status.
func ValidateClaimStatusUpdate(obj, old *gpu.Claim) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateClaimStatus(&obj.Status, field.NewPath("status"))...)
}

func validateClaimSpec(spec *gpu.ClaimSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateRequiredDNSSubdomain(spec.Type, "InstanceType to reserve from", fldPath.Child("type"))...)

	var set []string
	if spec.Accelerators != nil {
		set = append(set, "accelerators")
		allErrs = append(allErrs, validateInRange(int64(*spec.Accelerators), 1, maxAccelerators, fldPath.Child("accelerators"))...)
	}
	if spec.Partition != "" {
		set = append(set, "partition")
		allErrs = append(allErrs, validateProfileName(spec.Partition, fldPath.Child("partition"))...)
	}
	switch len(set) {
	case 0:
		allErrs = append(allErrs, field.Required(fldPath, "must set exactly one of accelerators or partition"))
	case 1:
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, strings.Join(set, ", "),
			"must set exactly one of accelerators or partition; keep one and remove the other"))
	}

	allErrs = append(allErrs, validateOptionalDNSSubdomain(spec.NodeName, fldPath.Child("nodeName"))...)
	if spec.ExpireAfter != nil && spec.ExpireAfter.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("expireAfter"), spec.ExpireAfter.Duration.String(),
			"must be greater than 0, e.g. 2h; remove expireAfter to hold the reservation until the Claim is deleted"))
	}
	return allErrs
}

func validateClaimStatus(status *gpu.ClaimStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateOptionalEnum(status.Phase, supportedClaimPhases, fldPath.Child("phase"))...)
	allErrs = append(allErrs, validateOptionalDNSSubdomain(status.NodeName, fldPath.Child("nodeName"))...)
	seen := make(map[string]bool, len(status.Devices))
	for i, d := range status.Devices {
		idxPath := fldPath.Child("devices").Index(i)
		switch {
		case d == "":
			allErrs = append(allErrs, field.Required(idxPath, "set the device ID, e.g. a GPU UUID"))
		case seen[d]:
			allErrs = append(allErrs, field.Duplicate(idxPath, d))
		}
		seen[d] = true
	}
	allErrs = append(allErrs, validateOptionalDNSSubdomain(status.AttachedTo, fldPath.Child("attachedTo"))...)
	allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, validateNonnegativeInt(status.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	return allErrs
}
