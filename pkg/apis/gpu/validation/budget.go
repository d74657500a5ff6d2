package validation

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	"k8s.io/apimachinery/pkg/types"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// supportedBudgetKeys is shown when a key is unknown.
var supportedBudgetKeys = []string{
	string(gpu.BudgetAccelerators),
	string(gpu.BudgetAcceleratorMemory),
	string(gpu.BudgetInstances),
	string(gpu.BudgetNodePorts),
	gpu.BudgetAcceleratorsPerTypePrefix + "<instancetype>",
	string(gpu.BudgetAcceleratorHours),
	gpu.BudgetAcceleratorHoursPerTypePrefix + "<instancetype>",
}

// MaxRollingDays is the longest rolling period: the ledgers of Instances,
// Claims and Budgets keep 31 days.
const MaxRollingDays = 31

// ValidateBudget validates a new Budget.
func ValidateBudget(obj *gpu.Budget) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, true, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateBudgetSpec(&obj.Spec, field.NewPath("spec"))...)
}

func validateBudgetSpec(spec *gpu.BudgetSpec, fldPath *field.Path) field.ErrorList {
	allErrs := validateBudgetResourceList(spec.Hard, fldPath.Child("hard"))
	if p := spec.Period; p != nil {
		pp := fldPath.Child("period")
		switch {
		case p.Calendar != "" && p.RollingDays != 0:
			allErrs = append(allErrs, field.Invalid(pp, p, "set calendar or rollingDays, not both"))
		case p.Calendar != "" && p.Calendar != gpu.BudgetCalendarMonth:
			allErrs = append(allErrs, field.NotSupported(pp.Child("calendar"), p.Calendar, []string{string(gpu.BudgetCalendarMonth)}))
		case p.Calendar == "" && (p.RollingDays < 1 || p.RollingDays > MaxRollingDays):
			allErrs = append(allErrs, field.Invalid(pp.Child("rollingDays"), p.RollingDays, fmt.Sprintf("must be 1 to %d days, e.g. 7", MaxRollingDays)))
		}
	}
	switch spec.OnExhausted {
	case "", gpu.BudgetExhaustedRefuse, gpu.BudgetExhaustedStop:
	default:
		allErrs = append(allErrs, field.NotSupported(fldPath.Child("onExhausted"), spec.OnExhausted, []string{string(gpu.BudgetExhaustedRefuse), string(gpu.BudgetExhaustedStop)}))
	}
	return allErrs
}

// ValidateBudgetUpdate validates an update of a Budget's metadata and spec.
// Limits may change at any time; they apply from the next charge.
func ValidateBudgetUpdate(obj, old *gpu.Budget) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateBudgetSpec(&obj.Spec, field.NewPath("spec"))...)
}

// ValidateBudgetStatusUpdate validates an update of a Budget's status.
func ValidateBudgetStatusUpdate(obj, old *gpu.Budget) field.ErrorList {
	statusPath := field.NewPath("status")
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateBudgetResourceList(obj.Status.Hard, statusPath.Child("hard"))...)
	allErrs = append(allErrs, validateBudgetResourceList(obj.Status.Used, statusPath.Child("used"))...)
	allErrs = append(allErrs, validateBudgetResourceList(obj.Status.Consumed, statusPath.Child("consumed"))...)
	seen := map[types.UID]bool{}
	for i, c := range obj.Status.Pending {
		p := statusPath.Child("pending").Index(i)
		if c.Kind != "Instance" && c.Kind != "Claim" {
			allErrs = append(allErrs, field.NotSupported(p.Child("kind"), c.Kind, []string{"Instance", "Claim"}))
		}
		if c.Name == "" {
			allErrs = append(allErrs, field.Required(p.Child("name"), "the charged object's name"))
		}
		switch {
		case c.UID == "":
			allErrs = append(allErrs, field.Required(p.Child("uid"), "the charged object's uid"))
		case seen[c.UID]:
			allErrs = append(allErrs, field.Duplicate(p.Child("uid"), c.UID))
		}
		seen[c.UID] = true
		allErrs = append(allErrs, validateBudgetResourceList(c.Charge, p.Child("charge"))...)
	}
	return append(allErrs, metav1validation.ValidateConditions(obj.Status.Conditions, statusPath.Child("conditions"))...)
}

func validateBudgetResourceList(list gpu.BudgetResourceList, fldPath *field.Path) field.ErrorList {
	// Sorted, so the same object always gets the same errors in the same order.
	keys := make([]string, 0, len(list))
	for k := range list {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)

	var allErrs field.ErrorList
	for _, k := range keys {
		q := list[gpu.BudgetResourceName(k)]
		keyPath := fldPath.Key(k)
		if errs := validateBudgetKey(k, keyPath); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		if errs := validateNonnegativeQuantity(q, keyPath); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
			continue
		}
		if !isWhole(q) {
			switch gpu.BudgetResourceName(k) {
			case gpu.BudgetInstances:
				allErrs = append(allErrs, field.Invalid(keyPath, q.String(), "must be a whole number of Instances, e.g. 4"))
			case gpu.BudgetNodePorts:
				allErrs = append(allErrs, field.Invalid(keyPath, q.String(), "must be a whole number of node ports, e.g. 16"))
			}
		}
	}
	return allErrs
}

func validateBudgetKey(k string, keyPath *field.Path) field.ErrorList {
	switch gpu.BudgetResourceName(k) {
	case gpu.BudgetAccelerators, gpu.BudgetAcceleratorMemory, gpu.BudgetInstances, gpu.BudgetNodePorts, gpu.BudgetAcceleratorHours:
		return nil
	}
	prefix := gpu.BudgetAcceleratorHoursPerTypePrefix
	typeName, ok := strings.CutPrefix(k, prefix)
	if !ok {
		prefix = gpu.BudgetAcceleratorsPerTypePrefix
		if typeName, ok = strings.CutPrefix(k, prefix); !ok {
			return field.ErrorList{field.NotSupported(keyPath, k, supportedBudgetKeys)}
		}
	}
	if typeName == "" {
		return field.ErrorList{field.Invalid(keyPath, k, fmt.Sprintf("must name an InstanceType after %q, e.g. %sh100-80gb", prefix, prefix))}
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsDNS1123Subdomain(typeName) {
		allErrs = append(allErrs, field.Invalid(keyPath, k, fmt.Sprintf("the part after %q must be the name of an InstanceType: %s", prefix, msg)))
	}
	return allErrs
}

// isWhole says whether q has no fractional part.
func isWhole(q resource.Quantity) bool {
	c := q.DeepCopy()
	return c.RoundUp(0)
}
