package validation

import (
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// typeNames are the short names the tables use for error types.
var typeNames = map[field.ErrorType]string{
	field.ErrorTypeRequired:     "Required",
	field.ErrorTypeInvalid:      "Invalid",
	field.ErrorTypeNotSupported: "NotSupported",
	field.ErrorTypeDuplicate:    "Duplicate",
	field.ErrorTypeForbidden:    "Forbidden",
	field.ErrorTypeTooLong:      "TooLong",
	field.ErrorTypeTooMany:      "TooMany",
	field.ErrorTypeNotFound:     "NotFound",
	field.ErrorTypeInternal:     "Internal",
}

// render turns errors into sorted "Type field.path" lines, so a table can
// state the exact set of errors it expects.
func render(errs field.ErrorList) []string {
	out := make([]string, 0, len(errs))
	for _, e := range errs {
		name, ok := typeNames[e.Type]
		if !ok {
			name = string(e.Type)
		}
		out = append(out, name+" "+e.Field)
	}
	slices.Sort(out)
	return out
}

// expectErrors fails t unless errs are exactly want, in any order.
func expectErrors(t *testing.T, errs field.ErrorList, want []string) {
	t.Helper()
	got := render(errs)
	want = slices.Clone(want)
	slices.Sort(want)
	if !slices.Equal(got, want) {
		var details []string
		for _, e := range errs {
			details = append(details, "  "+e.Error())
		}
		t.Errorf("errors:\n got %q\nwant %q\nfull errors:\n%s", got, want, strings.Join(details, "\n"))
	}
	// Errors are for people; one with no field or no explanation is a bug.
	for _, e := range errs {
		if e.Field == "" {
			t.Errorf("error without a field: %v", e)
		}
		if e.Type == field.ErrorTypeInvalid && e.Detail == "" {
			t.Errorf("invalid-value error without a message: %v", e)
		}
	}
}

func qty(s string) resource.Quantity { return resource.MustParse(s) }

func qtyPtr(s string) *resource.Quantity {
	q := resource.MustParse(s)
	return &q
}

func ptrTo[T any](v T) *T { return &v }

var testTime = metav1.NewTime(time.Date(2026, 1, 2, 3, 4, 5, 0, time.UTC))

func condition(typ string) metav1.Condition {
	return metav1.Condition{
		Type:               typ,
		Status:             metav1.ConditionTrue,
		Reason:             "AsExpected",
		Message:            "all good",
		LastTransitionTime: testTime,
		ObservedGeneration: 1,
	}
}
