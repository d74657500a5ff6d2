package budget

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// The GPU-hours ledger (issue Q). kiln-controller records each Instance's
// and Claim's runs in its status.usage; this loop sums them over each
// Budget's period into status.consumed. A deleted object's ledger goes
// into the Budget's status.folded before its LedgerFinalizer is taken off,
// with its UID in status.foldedUIDs until it is gone, so that a crash
// between the two neither loses its hours nor counts them twice.

// consumedRefresh bounds how often a recount writes consumed alone: it
// moves every second something runs.
const consumedRefresh = time.Minute

// objectLedger is one stored object's card-hours.
type objectLedger struct {
	kind, name string
	uid        types.UID
	// days is its ledger as of the recount, its open run included.
	days []v1alpha1.UsageDay
	// run is its run in progress, nil if none.
	run *v1alpha1.UsageRun
	// folds says it is deleted and waits only for its ledger to be folded.
	folds bool
	// finalizerIndex is the LedgerFinalizer's index in its finalizers.
	finalizerIndex int
}

// ledgers reads the ledgers of the namespace's stored objects.
func ledgers(instances *v1alpha1.InstanceList, claims *v1alpha1.ClaimList, now time.Time) []objectLedger {
	var out []objectLedger
	add := func(kind string, m *metav1.ObjectMeta, u *v1alpha1.Usage, lastActive time.Time) {
		l := objectLedger{kind: kind, name: m.Name, uid: m.UID, days: ledger.Days(u, lastActive, now),
			finalizerIndex: slices.Index(m.Finalizers, v1alpha1.LedgerFinalizer)}
		if u != nil {
			l.run = u.Current
		}
		// Folded once nothing else holds it: the controller closes its
		// run before its own finalizer goes.
		l.folds = m.DeletionTimestamp != nil && l.finalizerIndex >= 0 && len(m.Finalizers) == 1
		out = append(out, l)
	}
	for i := range instances.Items {
		inst := &instances.Items[i]
		var lastActive time.Time
		if a := inst.Status.Activity; a != nil && a.Utilization != nil && a.LastActiveTime != nil {
			lastActive = a.LastActiveTime.Time
		}
		add("Instance", &inst.ObjectMeta, inst.Status.Usage, lastActive)
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		add("Claim", &c.ObjectMeta, c.Status.Usage, time.Time{})
	}
	return out
}

// ledgerStatus is the part of a Budget's status the ledger writes.
type ledgerStatus struct {
	periodStart  *metav1.Time
	consumed     v1alpha1.BudgetResourceList
	usage        []v1alpha1.BudgetUsage
	folded       []v1alpha1.UsageDay
	foldedUIDs   []types.UID
	exhausted    *metav1.Condition
	requeueAfter time.Duration
	// running says something counted holds cards now, so that usage
	// moves on with time.
	running bool
}

// recountLedger works out b's ledger status at now from the objects'.
func recountLedger(b *v1alpha1.Budget, objects []objectLedger, now time.Time) ledgerStatus {
	stored := map[types.UID]bool{}
	for _, o := range objects {
		stored[o.uid] = true
	}
	// A folded object no longer stored is gone for good.
	var s ledgerStatus
	for _, uid := range b.Status.FoldedUIDs {
		if stored[uid] {
			s.foldedUIDs = append(s.foldedUIDs, uid)
		}
	}
	s.folded = ledger.Add(b.Status.Folded, now)
	days := s.folded
	for _, o := range objects {
		if slices.Contains(s.foldedUIDs, o.uid) {
			continue
		}
		s.running = s.running || o.run != nil
		if o.folds {
			s.folded = ledger.Add(s.folded, now, o.days...)
			s.foldedUIDs = append(s.foldedUIDs, o.uid)
		}
		days = ledger.Add(days, now, o.days...)
	}
	start := ledger.PeriodStart(b.Spec.Period, now)
	s.periodStart = &metav1.Time{Time: start}
	s.usage = ledger.Usage(days, start)
	var spent []string
	for _, k := range hoursKeys(b.Spec.Hard) {
		held := ledger.CardSeconds(s.usage, k)
		if s.consumed == nil {
			s.consumed = v1alpha1.BudgetResourceList{}
		}
		consumed := ledger.Hours(held)
		s.consumed[k] = consumed
		hard := b.Spec.Hard[k]
		left := ledger.HoursOf(hard) - held
		if left <= 0 {
			spent = append(spent, fmt.Sprintf("%s: %s of %s card-hours used", k, consumed.String(), hard.String()))
			continue
		}
		// Wake when what runs now spends it.
		typ, _ := ledger.HoursKey(k)
		var rate int64
		for _, o := range objects {
			if o.run != nil && !slices.Contains(s.foldedUIDs, o.uid) && (typ == "" || o.run.InstanceType == typ) {
				rate += o.run.Cards.MilliValue()
			}
		}
		if rate > 0 {
			s.requeueAfter = minPositive(s.requeueAfter, time.Duration((left+rate-1)/rate)*time.Second)
		}
	}
	if s.consumed == nil {
		if len(s.usage) == 0 {
			// Nothing to say of a period nothing was used in.
			s.periodStart = nil
		}
		return s
	}
	end := ledger.PeriodEnd(b.Spec.Period, now)
	s.requeueAfter = minPositive(s.requeueAfter, end.Sub(now))
	since := fmt.Sprintf("this period (since %s)", start.Format(time.RFC3339))
	if len(spent) == 0 {
		s.exhausted = &metav1.Condition{Type: v1alpha1.BudgetConditionExhausted, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonHoursLeft,
			Message: fmt.Sprintf("no accelerator-hours key is spent %s", since)}
		return s
	}
	then := "starts and creates that hold its cards are refused"
	if b.Spec.OnExhausted == v1alpha1.BudgetExhaustedStop {
		then += ", and kiln-controller stops the Instances that run on them"
	}
	s.exhausted = &metav1.Condition{Type: v1alpha1.BudgetConditionExhausted, Status: metav1.ConditionTrue, Reason: v1alpha1.BudgetReasonHoursSpent,
		Message: fmt.Sprintf("%s %s; %s until hours return at %s, or the limit is raised", strings.Join(spent, "; "), since, then, end.Format(time.RFC3339))}
	return s
}

// hoursKeys are the accelerator-hours keys of hard, sorted.
func hoursKeys(hard v1alpha1.BudgetResourceList) []v1alpha1.BudgetResourceName {
	var out []v1alpha1.BudgetResourceName
	for k := range hard {
		if _, ok := ledger.HoursKey(k); ok {
			out = append(out, k)
		}
	}
	slices.Sort(out)
	return out
}

func minPositive(a, b time.Duration) time.Duration {
	if b > 0 && (a == 0 || b < a) {
		return b
	}
	return a
}

// apply writes s into out, and says whether that changes what is stored
// in a way worth a write: anything but consumed and usage moving on with
// time while something runs, which is written at most each
// consumedRefresh.
func (s ledgerStatus) apply(out *v1alpha1.Budget, generation int64, now time.Time) bool {
	st := &out.Status
	moved := !equality.Semantic.DeepEqual(st.Folded, s.folded) || !equality.Semantic.DeepEqual(st.FoldedUIDs, s.foldedUIDs) ||
		!equality.Semantic.DeepEqual(st.PeriodStart, s.periodStart) || (st.Consumed == nil) != (s.consumed == nil) ||
		!equality.Semantic.DeepEqual(keysOf(st.Consumed), keysOf(s.consumed))
	if s.exhausted != nil {
		c := *s.exhausted
		c.ObservedGeneration, c.LastTransitionTime = generation, metav1.NewTime(now)
		was := meta.FindStatusCondition(st.Conditions, c.Type)
		if was == nil || was.Status != c.Status || was.Reason != c.Reason || was.ObservedGeneration != c.ObservedGeneration {
			moved = true
		}
		meta.SetStatusCondition(&st.Conditions, c)
	} else if meta.RemoveStatusCondition(&st.Conditions, v1alpha1.BudgetConditionExhausted) {
		moved = true
	}
	// What no longer moves is written at once: a run just closed.
	stale := st.ConsumedTime == nil || now.Sub(st.ConsumedTime.Time) >= consumedRefresh || !s.running
	if moved || stale && !equality.Semantic.DeepEqual(st.Usage, s.usage) {
		st.PeriodStart, st.Consumed, st.Usage, st.Folded, st.FoldedUIDs = s.periodStart, s.consumed, s.usage, s.folded, s.foldedUIDs
		st.ConsumedTime = &metav1.Time{Time: now}
		return true
	}
	return false
}

func keysOf(l v1alpha1.BudgetResourceList) []v1alpha1.BudgetResourceName {
	out := make([]v1alpha1.BudgetResourceName, 0, len(l))
	for k := range l {
		out = append(out, k)
	}
	slices.Sort(out)
	return out
}

// releaseFolded takes the LedgerFinalizer off each object whose ledger
// every Budget of its namespace has folded (or that has no Budget).
func (r *Reconciler) releaseFolded(ctx context.Context, ns string, objects []objectLedger) error {
	for _, o := range objects {
		if !o.folds {
			continue
		}
		patch, err := json.Marshal([]map[string]any{
			{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", o.finalizerIndex), "value": v1alpha1.LedgerFinalizer},
			{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", o.finalizerIndex)},
		})
		if err != nil {
			return err
		}
		opts := metav1.PatchOptions{FieldManager: FieldManager}
		gpuClient := r.client.GpuV1alpha1()
		if o.kind == "Instance" {
			_, err = gpuClient.Instances(ns).Patch(ctx, o.name, types.JSONPatchType, patch, opts)
		} else {
			_, err = gpuClient.Claims(ns).Patch(ctx, o.name, types.JSONPatchType, patch, opts)
		}
		if err = ignoreNotFound(err); err != nil {
			return fmt.Errorf("releasing the ledger of %s %s/%s: %w", o.kind, ns, o.name, err)
		}
	}
	return nil
}

func ignoreNotFound(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}
