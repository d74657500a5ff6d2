package instance

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// ReasonBudgetExhausted is the reason of the BudgetExhausted condition
// and of the Warning Event of a stop for spent card-hours.
const ReasonBudgetExhausted = "BudgetExhausted"

// exhaustStop stops a running Instance that holds cards under a spent
// key, through spec.stopped as an idle stop does. One on a Claim's cards
// stops too: the claim loop releases the Claim under the same key, and
// the Pod would otherwise run on the released cards.
func (c *Controller) exhaustStop(ctx context.Context, o *observed, t *v1alpha1.InstanceType, now time.Time) error {
	inst := o.inst
	if share := instanceShare(inst, t); inst.Spec.Stopped || share.IsZero() {
		return nil
	}
	why, err := ledger.StopsFor(c.budgets.Budgets(inst.Namespace), inst.Spec.Type, now)
	if err != nil || why == "" {
		return err
	}
	why += "; then start it again with kubectl gpu start " + inst.Name
	cp := inst.DeepCopy()
	cp.Spec.Stopped = true
	updated, err := c.kiln.GpuV1alpha1().Instances(inst.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy})
	if err != nil {
		return err
	}
	c.recorder.Event(updated, corev1.EventTypeWarning, ReasonBudgetExhausted, "Stopped: "+why)
	o.inst, o.stoppedFor = updated, &metav1.Condition{Type: v1alpha1.InstanceConditionBudgetExhausted, Status: metav1.ConditionTrue,
		Reason: ReasonBudgetExhausted, Message: why, LastTransitionTime: metav1.NewTime(now)}
	return nil
}
