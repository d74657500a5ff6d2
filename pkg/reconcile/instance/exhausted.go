package instance

import (
	"context"
	"fmt"
	"slices"
	"strings"
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

// spentBy says which Budget of the namespace, with onExhausted Stop, has
// spent an accelerator-hours key that counts the Instance's type, in
// words; "" when none has. kiln-apiserver's Budget loop counts consumed,
// and writes it when a key is spent.
func (c *Controller) spentBy(inst *v1alpha1.Instance, now time.Time) (string, error) {
	budgets, err := c.budgets.Budgets(inst.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	slices.SortFunc(budgets, func(a, b *v1alpha1.Budget) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range budgets {
		if b.Spec.OnExhausted != v1alpha1.BudgetExhaustedStop {
			continue
		}
		keys := make([]v1alpha1.BudgetResourceName, 0, len(b.Spec.Hard))
		for k := range b.Spec.Hard {
			keys = append(keys, k)
		}
		slices.Sort(keys)
		for _, k := range keys {
			typ, ok := ledger.HoursKey(k)
			if !ok || typ != "" && typ != inst.Spec.Type {
				continue
			}
			consumed, counted := b.Status.Consumed[k]
			if hard := b.Spec.Hard[k]; counted && consumed.Cmp(hard) >= 0 {
				return fmt.Sprintf("budget %s spent its %s (%s of %s card-hours this period) and has onExhausted: Stop; "+
					"card-hours come back from %s, or a cluster admin raises the limit; then start it again with kubectl gpu start %s",
					b.Name, k, consumed.String(), hard.String(), ledger.PeriodEnd(b.Spec.Period, now).Format(time.RFC3339), inst.Name), nil
			}
		}
	}
	return "", nil
}

// exhaustStop stops a running Instance that holds cards of its own under
// a spent key, through spec.stopped as an idle stop does. One on its
// Claim's cards runs on: stopping it would free nothing, the Claim holds
// them.
func (c *Controller) exhaustStop(ctx context.Context, o *observed, t *v1alpha1.InstanceType, now time.Time) error {
	inst := o.inst
	if share := instanceShare(inst, t); inst.Spec.Stopped || inst.Spec.ClaimName != "" || share.IsZero() {
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
