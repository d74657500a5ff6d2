package validation

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
)

// matcher compares errors by type and field: the tables state the exact
// set of errors they expect, in any order.
var matcher = field.ErrorMatcher{}.ByType().ByField()

// expectErrors fails t unless errs are exactly want, in any order.
func expectErrors(t *testing.T, errs, want field.ErrorList) {
	t.Helper()
	matcher.Test(t, want, errs)
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
