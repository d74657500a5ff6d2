// Package ledger accounts card-hours (issue Q): the runs of the Pods that
// hold an Instance's or a Claim's cards, closed into card-seconds by UTC
// day, and a Budget's sum of them over its period. Every figure comes
// from times an object records (when its Pod was bound, when its deletion
// was asked for), never from sampling, so a restart of any component
// neither loses nor adds a second. Quantities are kept in milli-card-
// seconds, the precision of a charged share.
package ledger

import (
	"fmt"
	"maps"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// KeepDays is how many UTC days, today included, a ledger keeps: the
// longest period a Budget counts over.
const KeepDays = 31

const dateLayout = "2006-01-02"

// Date is t's UTC day as a ledger writes it.
func Date(t time.Time) string { return t.UTC().Format(dateLayout) }

// Run is a span a Pod held cards.
type Run struct {
	Type       string
	Cards      resource.Quantity
	Start, End time.Time
	// IdleFrom is when the devices were last active in the run: the span
	// from it to End is idle. Zero when the run is never judged idle.
	IdleFrom time.Time
}

// Days splits the run at UTC midnights into card-seconds per day, in whole
// seconds.
func (r Run) Days() []v1alpha1.UsageDay {
	start, end := r.Start.UTC().Truncate(time.Second), r.End.UTC().Truncate(time.Second)
	idle := end
	if !r.IdleFrom.IsZero() {
		idle = later(r.IdleFrom.UTC().Truncate(time.Second), start)
	}
	rate := r.Cards.MilliValue()
	var out []v1alpha1.UsageDay
	for from := start; from.Before(end); {
		y, m, d := from.Date()
		to := time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
		if to.After(end) {
			to = end
		}
		idleSecs := int64(0)
		if idle.Before(to) {
			idleSecs = int64(to.Sub(later(idle, from)) / time.Second)
		}
		out = append(out, v1alpha1.UsageDay{
			Date: Date(from), InstanceType: r.Type,
			CardSeconds:     *resource.NewMilliQuantity(rate*int64(to.Sub(from)/time.Second), resource.DecimalSI),
			IdleCardSeconds: *resource.NewMilliQuantity(rate*idleSecs, resource.DecimalSI),
		})
		from = to
	}
	return out
}

// Add merges more into days, by day and type, sorted by both, and drops
// the days older than KeepDays before now.
func Add(days []v1alpha1.UsageDay, now time.Time, more ...v1alpha1.UsageDay) []v1alpha1.UsageDay {
	oldest := Date(now.UTC().AddDate(0, 0, -(KeepDays - 1)))
	out := make([]v1alpha1.UsageDay, 0, len(days)+len(more))
	for _, d := range slices.Concat(days, more) {
		if d.Date < oldest {
			continue
		}
		i := slices.IndexFunc(out, func(o v1alpha1.UsageDay) bool { return o.Date == d.Date && o.InstanceType == d.InstanceType })
		if i < 0 {
			out = append(out, v1alpha1.UsageDay{Date: d.Date, InstanceType: d.InstanceType,
				CardSeconds: d.CardSeconds.DeepCopy(), IdleCardSeconds: d.IdleCardSeconds.DeepCopy()})
			continue
		}
		out[i].CardSeconds.Add(d.CardSeconds)
		out[i].IdleCardSeconds.Add(d.IdleCardSeconds)
	}
	slices.SortFunc(out, func(a, b v1alpha1.UsageDay) int {
		if c := strings.Compare(a.Date, b.Date); c != 0 {
			return c
		}
		return strings.Compare(a.InstanceType, b.InstanceType)
	})
	return out
}

// Observation is what an object's holder shows at one sync.
type Observation struct {
	// Pod holding the cards now; empty when none does.
	PodUID types.UID
	// Since is when that Pod was bound to its node.
	Since time.Time
	Type  string
	// Cards is the share held; zero when another object is charged for
	// them (an Instance on its Claim's cards).
	Cards resource.Quantity
	// Ended is when the last holder stopped holding, if the Pod recorded
	// it (its deletion asked for, its containers ended); zero for now.
	Ended time.Time
	// LastActive is when the devices were last active; zero when not
	// measured.
	LastActive time.Time
}

// Observe moves an object's ledger on: a run whose Pod no longer holds is
// closed into its days, and a Pod that holds and has no run opens one. It
// returns prev unchanged (the same pointer) when nothing moves, so a sync
// writes no status for it.
func Observe(prev *v1alpha1.Usage, o Observation, now time.Time) *v1alpha1.Usage {
	var u v1alpha1.Usage
	if prev != nil {
		u = *prev.DeepCopy()
	}
	changed := false
	// A run closed now ends where the next may begin: a Pod that went
	// unseen, replaced by one bound before this sync, is not counted
	// twice over the same seconds.
	var closedAt time.Time
	if c := u.Current; c != nil && (c.PodUID != o.PodUID || o.Cards.IsZero()) {
		end := now
		if c.PodUID == o.PodUID || o.PodUID == "" {
			if !o.Ended.IsZero() && o.Ended.Before(now) {
				end = o.Ended
			}
		}
		u.Days = Add(u.Days, now, closed(c, end, o.LastActive).Days()...)
		u.LastPodUID, u.Current, changed, closedAt = c.PodUID, nil, true, end
	}
	if u.Current == nil && o.PodUID != "" && o.PodUID != u.LastPodUID && !o.Cards.IsZero() {
		since := later(o.Since, closedAt)
		if since.IsZero() || since.After(now) {
			since = now
		}
		u.Current = &v1alpha1.UsageRun{PodUID: o.PodUID, InstanceType: o.Type, Cards: o.Cards.DeepCopy(),
			Since: metav1.NewTime(since.UTC().Truncate(time.Second))}
		changed = true
	}
	if !changed {
		return prev
	}
	return &u
}

// closed is the run c, ended at end.
func closed(c *v1alpha1.UsageRun, end, lastActive time.Time) Run {
	r := Run{Type: c.InstanceType, Cards: c.Cards, Start: c.Since.Time, End: later(end, c.Since.Time)}
	if !lastActive.IsZero() {
		r.IdleFrom = lastActive
	}
	return r
}

// Days is the object's ledger as of now: its closed days and its run in
// progress up to now. lastActive is as in Observation.
func Days(u *v1alpha1.Usage, lastActive, now time.Time) []v1alpha1.UsageDay {
	if u == nil {
		return nil
	}
	if u.Current == nil {
		return u.Days
	}
	return Add(u.Days, now, closed(u.Current, now, lastActive).Days()...)
}

// PeriodStart is the start of the period p counts at now: the first of
// the UTC month by default, else the UTC midnight rollingDays-1 days ago.
func PeriodStart(p *v1alpha1.BudgetPeriod, now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	if p != nil && p.RollingDays > 0 {
		return time.Date(y, m, d-int(p.RollingDays-1), 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, m, 1, 0, 0, 0, 0, time.UTC)
}

// PeriodEnd is when the period counting at now gives back a day's hours:
// the next UTC midnight for rolling days, the first of next month else.
func PeriodEnd(p *v1alpha1.BudgetPeriod, now time.Time) time.Time {
	y, m, d := now.UTC().Date()
	if p != nil && p.RollingDays > 0 {
		return time.Date(y, m, d+1, 0, 0, 0, 0, time.UTC)
	}
	return time.Date(y, m+1, 1, 0, 0, 0, 0, time.UTC)
}

// Usage sums days from the period's start by type, sorted by type.
func Usage(days []v1alpha1.UsageDay, start time.Time) []v1alpha1.BudgetUsage {
	from := Date(start)
	var out []v1alpha1.BudgetUsage
	for _, d := range days {
		if d.Date < from {
			continue
		}
		i := slices.IndexFunc(out, func(u v1alpha1.BudgetUsage) bool { return u.InstanceType == d.InstanceType })
		if i < 0 {
			out = append(out, v1alpha1.BudgetUsage{InstanceType: d.InstanceType,
				CardSeconds: *resource.NewMilliQuantity(0, resource.DecimalSI), IdleCardSeconds: *resource.NewMilliQuantity(0, resource.DecimalSI)})
			i = len(out) - 1
		}
		out[i].CardSeconds.Add(d.CardSeconds)
		out[i].IdleCardSeconds.Add(d.IdleCardSeconds)
	}
	slices.SortFunc(out, func(a, b v1alpha1.BudgetUsage) int { return strings.Compare(a.InstanceType, b.InstanceType) })
	return out
}

// HoursKey says whether k is an accelerator-hours key, and which type it
// counts ("" for all).
func HoursKey(k v1alpha1.BudgetResourceName) (typ string, ok bool) {
	if k == v1alpha1.BudgetAcceleratorHours {
		return "", true
	}
	return strings.CutPrefix(string(k), v1alpha1.BudgetAcceleratorHoursPerTypePrefix)
}

// Stopping is the first Budget, by name, with onExhausted Stop that has
// spent an accelerator-hours key counting the type, and the key; nil when
// none has. kiln-apiserver's Budget loop writes consumed and usage when a
// key is spent, so the stored status is enough to say.
func Stopping(budgets []*v1alpha1.Budget, typ string) (*v1alpha1.Budget, v1alpha1.BudgetResourceName) {
	budgets = slices.Clone(budgets)
	slices.SortFunc(budgets, func(a, b *v1alpha1.Budget) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range budgets {
		if b.Spec.OnExhausted != v1alpha1.BudgetExhaustedStop {
			continue
		}
		for _, k := range slices.Sorted(maps.Keys(b.Spec.Hard)) {
			if t, ok := HoursKey(k); !ok || t != "" && t != typ {
				continue
			}
			// consumed is rounded up to the thousandth of an hour (3.6
			// s): whether the key is spent is read from the exact usage
			// it was written with.
			if _, counted := b.Status.Consumed[k]; counted && CardSeconds(b.Status.Usage, k) >= HoursOf(b.Spec.Hard[k]) {
				return b, k
			}
		}
	}
	return nil, ""
}

// StopsFor says in words which Budget of a namespace, read from its
// lister, stops what holds cards of type typ (Stopping); "" when none
// does. The Instance and Claim loops both ask it.
func StopsFor(budgets listers.BudgetNamespaceLister, typ string, now time.Time) (string, error) {
	all, err := budgets.List(labels.Everything())
	if err != nil {
		return "", err
	}
	b, k := Stopping(all, typ)
	if b == nil {
		return "", nil
	}
	return Spent(b, k, now), nil
}

// Spent says in words that b spent key k and stops what runs, and when
// card-hours come back.
func Spent(b *v1alpha1.Budget, k v1alpha1.BudgetResourceName, now time.Time) string {
	consumed, hard := b.Status.Consumed[k], b.Spec.Hard[k]
	return fmt.Sprintf("budget %s spent its %s (%s of %s card-hours this period) and has onExhausted: Stop; "+
		"card-hours come back from %s, or a cluster admin raises the limit",
		b.Name, k, consumed.String(), hard.String(), PeriodEnd(b.Spec.Period, now).Format(time.RFC3339))
}

// CardSeconds is the milli-card-seconds usage holds that key counts.
func CardSeconds(usage []v1alpha1.BudgetUsage, k v1alpha1.BudgetResourceName) int64 {
	typ, _ := HoursKey(k)
	var sum int64
	for _, u := range usage {
		if typ == "" || u.InstanceType == typ {
			sum += u.CardSeconds.MilliValue()
		}
	}
	return sum
}

// Hours is milli-card-seconds as card-hours, rounded up to the
// thousandth of an hour.
func Hours(milliCardSeconds int64) resource.Quantity {
	return *resource.NewMilliQuantity((milliCardSeconds+3599)/3600, resource.DecimalSI)
}

// HoursOf is hours in milli-card-seconds.
func HoursOf(q resource.Quantity) int64 { return q.MilliValue() * 3600 }

func later(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}
