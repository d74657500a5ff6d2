// Package validation checks gpu.kiln.dev objects before they are stored.
//
// Objects reach these functions after defaulting, so a value the defaulters
// always fill is still checked: a request can carry an explicit bad value,
// and a defaulter may not know the vendor.
package validation

import (
	"fmt"
	"path"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/api/validate/content"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

const (
	// maxAccelerators bounds the cards one Instance or Claim may ask for;
	// no node holds more, and a typo like 800 should fail here rather than
	// leave a Pod pending forever.
	maxAccelerators = 64
	// maxCardMemory, maxHostCPUPerCard and maxHostBytesPerCard bound the
	// quantities of an InstanceType far above any real card or host, so
	// that a typo like 80Ei fails here and maxAccelerators cards of the
	// type are still counted exactly in int64 (bytes, and milli-units
	// when sizing).
	maxCardMemory       = "1Pi"
	maxHostCPUPerCard   = "10000"
	maxHostBytesPerCard = "64Ti"
	// maxProfileNameLength is the length of a label value: profile names
	// end up in node labels and resource names.
	maxProfileNameLength = 63
)

// profileNameRegexp matches NVIDIA MIG profile names such as "1g.10gb" and
// "1g.10gb+me", and leaves room for other vendors' schemes.
var profileNameRegexp = regexp.MustCompile(`^[0-9a-z][0-9a-z.+-]*$`)

// validateProfileName checks a partition profile name such as "1g.10gb".
func validateProfileName(name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if name == "" {
		return append(allErrs, field.Required(fldPath, "set a partition profile, e.g. 1g.10gb"))
	}
	if len(name) > maxProfileNameLength {
		allErrs = append(allErrs, field.TooLong(fldPath, name, maxProfileNameLength))
	}
	if !profileNameRegexp.MatchString(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name,
			"must be a partition profile name such as 1g.10gb or 3g.40gb: lower-case letters, digits, '.', '+' and '-', starting with a letter or digit"))
	}
	return allErrs
}

// validateDNSSubdomain checks the name of another object. Callers check
// for emptiness themselves, because only some of these names are required.
func validateDNSSubdomain(name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range apivalidation.NameIsDNSSubdomain(name, false) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	return allErrs
}

// validateRequiredDNSSubdomain is validateDNSSubdomain for a name that must
// be set; what says what kind of object it names, for the message.
func validateRequiredDNSSubdomain(name, what string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "set the name of the "+what)}
	}
	return validateDNSSubdomain(name, fldPath)
}

// validateOptionalDNSSubdomain is validateDNSSubdomain for a name that may
// be left empty.
func validateOptionalDNSSubdomain(name string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return nil
	}
	return validateDNSSubdomain(name, fldPath)
}

// validateQualifiedName checks an extended resource name such as
// "nvidia.com/gpu": a qualified name, the syntax of a label key.
func validateQualifiedName(name string, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for _, msg := range content.IsLabelKey(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	return allErrs
}

// validateRequiredResourceName is validateQualifiedName for a resource name
// that must be set; example is shown to the admin.
func validateRequiredResourceName(name, example string, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath,
			fmt.Sprintf("set the extended resource the device plugin advertises, e.g. %s", example))}
	}
	return validateQualifiedName(name, fldPath)
}

// BoundedQuantity says whether Kiln may do arithmetic on q: its digits fit
// 128 bits and its decimal exponent is between -18 and 36, as any quantity
// written like 8, 500m, 1.5, 64Gi or 2E is. A quantity such as 1e2020020020
// parses at once, but comparing it with another makes inf.Dec write the
// whole gap between their exponents out in digits: one request could hold
// a CPU for hours. Every check that compares or adds a quantity from a
// request asks this first. It calls nothing that aligns scales.
func BoundedQuantity(q resource.Quantity) bool {
	d := q.AsDec()
	return d.UnscaledBig().BitLen() <= 128 && d.Scale() >= -36 && d.Scale() <= 18
}

// ValidateBoundedQuantity refuses a quantity BoundedQuantity does not
// accept, without printing it: its canonical form is as costly as the
// comparison.
func ValidateBoundedQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if BoundedQuantity(q) {
		return nil
	}
	return field.ErrorList{field.Invalid(fldPath, field.OmitValueType{},
		"must be a quantity of at most 38 digits with an exponent from -18 to 36, such as 8, 500m, 64Gi or 2E")}
}

// validatePositiveQuantity checks a quantity that must be greater than zero.
func validatePositiveQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if errs := ValidateBoundedQuantity(q, fldPath); len(errs) > 0 {
		return errs
	}
	if q.Sign() <= 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than 0")}
	}
	return nil
}

// validateQuantityAtMost checks a quantity against a bound.
func validateQuantityAtMost(q resource.Quantity, limit string, fldPath *field.Path) field.ErrorList {
	if !BoundedQuantity(q) {
		return nil // validatePositiveQuantity or its kin says so
	}
	if q.Cmp(resource.MustParse(limit)) > 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be at most "+limit)}
	}
	return nil
}

// validateNonnegativeQuantity checks a quantity that must not be negative.
func validateNonnegativeQuantity(q resource.Quantity, fldPath *field.Path) field.ErrorList {
	if errs := ValidateBoundedQuantity(q, fldPath); len(errs) > 0 {
		return errs
	}
	if q.Sign() < 0 {
		return field.ErrorList{field.Invalid(fldPath, q.String(), "must be greater than or equal to 0")}
	}
	return nil
}

// validateOptionalPositiveQuantity is validatePositiveQuantity for a
// quantity that may be absent.
func validateOptionalPositiveQuantity(q *resource.Quantity, fldPath *field.Path) field.ErrorList {
	if q == nil {
		return nil
	}
	return validatePositiveQuantity(*q, fldPath)
}

// validateNonnegativeInt checks a count that must not be negative.
func validateNonnegativeInt(value int64, fldPath *field.Path) field.ErrorList {
	return apivalidation.ValidateNonnegativeField(value, fldPath)
}

// validateInRange checks lo <= value <= hi.
func validateInRange(value, lo, hi int64, fldPath *field.Path) field.ErrorList {
	if value < lo || value > hi {
		return field.ErrorList{field.Invalid(fldPath, value, utilvalidation.InclusiveRangeError(int(lo), int(hi)))}
	}
	return nil
}

// validateAbsolutePath checks a path in the container or on the node. A
// ".." segment is refused because it makes the path mean something other
// than what it reads as.
func validateAbsolutePath(p string, fldPath *field.Path) field.ErrorList {
	if !strings.HasPrefix(p, "/") {
		return field.ErrorList{field.Invalid(fldPath, p, "must be an absolute path, e.g. /data")}
	}
	if hasBackstep(p) {
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'; write the path without it")}
	}
	return nil
}

// validateRelativePath checks a path inside a volume, such as a key's path
// in a configMap or secret volume.
func validateRelativePath(p string, fldPath *field.Path) field.ErrorList {
	if strings.HasPrefix(p, "/") {
		return field.ErrorList{field.Invalid(fldPath, p, "must be a relative path inside the volume, e.g. config.yaml")}
	}
	if hasBackstep(p) {
		return field.ErrorList{field.Invalid(fldPath, p, "must not contain '..'; write the path without it")}
	}
	return nil
}

func hasBackstep(p string) bool {
	for _, seg := range strings.Split(p, "/") {
		if seg == ".." {
			return true
		}
	}
	return false
}

// cleanPath makes "/data" and "/data/" compare equal: both mount on the
// same directory.
func cleanPath(p string) string {
	return path.Clean(p)
}

// validateNotSupported reports value unless it is one of valid.
func validateNotSupported[T ~string](value T, valid []T, fldPath *field.Path) field.ErrorList {
	for _, v := range valid {
		if value == v {
			return nil
		}
	}
	return field.ErrorList{field.NotSupported(fldPath, value, valid)}
}

// validateOptionalEnum is validateNotSupported for a value that may be
// left empty; the empty value is not listed, as it reads as a typo.
func validateOptionalEnum[T ~string](value T, valid []T, fldPath *field.Path) field.ErrorList {
	if value == "" {
		return nil
	}
	return validateNotSupported(value, valid, fldPath)
}

// validateRequiredEnum is validateNotSupported for a value the defaulters
// fill, so an empty one is reported as missing rather than unsupported.
func validateRequiredEnum[T ~string](value T, valid []T, fldPath *field.Path) field.ErrorList {
	if value == "" {
		return field.ErrorList{field.Required(fldPath, fmt.Sprintf("set one of %s", quoteAll(valid)))}
	}
	return validateNotSupported(value, valid, fldPath)
}

func quoteAll[T ~string](values []T) string {
	quoted := make([]string, len(values))
	for i, v := range values {
		quoted[i] = fmt.Sprintf("%q", string(v))
	}
	return strings.Join(quoted, ", ")
}
