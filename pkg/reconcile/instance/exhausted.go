package instance

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// ReasonBudgetExhausted is the reason of the BudgetExhausted condition
// and of the Warning Event of a stop for spent card-hours.
const ReasonBudgetExhausted = "BudgetExhausted"

// spentBy says, in words, which Budget of the namespace with onExhausted
// Stop has spent an accelerator-hours key that counts the Instance's
// type; "" when none has.
func (c *Controller) spentBy(inst *v1alpha1.Instance, now time.Time) (string, error) {
	budgets, err := c.budgets.Budgets(inst.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	b, k := ledger.Stopping(budgets, inst.Spec.Type)
	if b == nil {
		return "", nil
	}
	return ledger.Spent(b, k, now) + "; then start it again with kubectl gpu start " + inst.Name, nil
}

// exhaustStop stops a running Instance that holds cards under a spent
// key, through spec.stopped as an idle stop does. One on a Claim's cards
// stops too: the claim loop releases the Claim under the same key, and
// the Pod would otherwise run on the released cards.
func (c *Controller) exhaustStop(ctx context.Context, o *observed, t *v1alpha1.InstanceType, now time.Time) error {
	inst := o.inst
	if share := instanceShare(inst, t); inst.Spec.Stopped || share.IsZero() {
		return nil
	}
	why, err := c.spentBy(inst, now)
	if err != nil || why == "" {
		return err
	}
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
