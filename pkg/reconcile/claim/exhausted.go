package claim

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// ReasonBudgetExhausted is the reason of the BudgetExhausted condition
// and of the Warning Event of a Claim released for spent card-hours.
const ReasonBudgetExhausted = "BudgetExhausted"

// exhaust releases a placed Claim under a spent key, as expiry does: a
// Claim keeps its cards whether or not anything runs on them, so Stop
// must take them back from the Claim itself. An Instance running on it
// is stopped by the instance loop, under the same key.
func (c *Controller) exhaust(s *step, why string) {
	s.events = append(s.events, event{corev1.EventTypeWarning, ReasonBudgetExhausted,
		"Released: " + why + "; then create a new Claim"})
	s.st.Phase, s.st.ExpiresAt = v1alpha1.ClaimExpired, nil
	meta.SetStatusCondition(&s.st.Conditions, metav1.Condition{
		Type: v1alpha1.ClaimConditionBudgetExhausted, Status: metav1.ConditionTrue, Reason: ReasonBudgetExhausted,
		Message: why, ObservedGeneration: s.cl.Generation, LastTransitionTime: s.now,
	})
}
