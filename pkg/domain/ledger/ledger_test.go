package ledger

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func at(s string) time.Time {
	t, err := time.Parse(time.RFC3339, s)
	if err != nil {
		panic(err)
	}
	return t
}

// cardSeconds sums what days hold from the period's start, in milli-card-
// seconds, and the idle part.
func cardSeconds(days []v1alpha1.UsageDay, from time.Time) (held, idle int64) {
	for _, u := range Usage(days, from) {
		held += u.CardSeconds.MilliValue()
		idle += u.IdleCardSeconds.MilliValue()
	}
	return held, idle
}

func TestRunDays(t *testing.T) {
	cases := []struct {
		name string
		run  Run
		want map[string]int64 // date -> milli-card-seconds
		idle int64
	}{
		{name: "an hour on one card", run: Run{Type: "h100", Cards: resource.MustParse("1"), Start: at("2026-12-06T10:00:00Z"), End: at("2026-12-06T11:00:00Z")},
			want: map[string]int64{"2026-12-06": 3600_000}},
		{name: "two cards across midnight", run: Run{Type: "h100", Cards: resource.MustParse("2"), Start: at("2026-12-06T23:30:00Z"), End: at("2026-12-07T00:15:00Z")},
			want: map[string]int64{"2026-12-06": 2 * 1800_000, "2026-12-07": 2 * 900_000}},
		{name: "a slice by its share", run: Run{Type: "a100-mig", Cards: resource.MustParse("143m"), Start: at("2026-12-06T10:00:00Z"), End: at("2026-12-06T10:00:10Z")},
			want: map[string]int64{"2026-12-06": 1430}},
		{name: "fractions of a second are dropped at both ends", run: Run{Type: "h100", Cards: resource.MustParse("1"),
			Start: at("2026-12-06T10:00:00Z").Add(900 * time.Millisecond), End: at("2026-12-06T10:00:05Z").Add(900 * time.Millisecond)},
			want: map[string]int64{"2026-12-06": 5000}},
		{name: "idle for its last ten minutes", run: Run{Type: "h100", Cards: resource.MustParse("1"), Start: at("2026-12-06T10:00:00Z"), End: at("2026-12-06T11:00:00Z"),
			IdleFrom: at("2026-12-06T10:50:00Z")},
			want: map[string]int64{"2026-12-06": 3600_000}, idle: 600_000},
		{name: "never active is idle throughout", run: Run{Type: "h100", Cards: resource.MustParse("1"), Start: at("2026-12-06T10:00:00Z"), End: at("2026-12-06T10:01:00Z"),
			IdleFrom: at("2026-12-06T09:00:00Z")},
			want: map[string]int64{"2026-12-06": 60_000}, idle: 60_000},
		{name: "an empty run", run: Run{Type: "h100", Cards: resource.MustParse("1"), Start: at("2026-12-06T10:00:00Z"), End: at("2026-12-06T10:00:00Z")}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got := map[string]int64{}
			var idle int64
			for _, d := range tc.run.Days() {
				got[d.Date] += d.CardSeconds.MilliValue()
				idle += d.IdleCardSeconds.MilliValue()
			}
			if len(got) != len(tc.want) {
				t.Fatalf("days %v, want %v", got, tc.want)
			}
			for d, v := range tc.want {
				if got[d] != v {
					t.Errorf("%s: %d milli-card-seconds, want %d", d, got[d], v)
				}
			}
			if idle != tc.idle {
				t.Errorf("idle %d, want %d", idle, tc.idle)
			}
		})
	}
}

// TestObserveAcrossRestarts drives one Instance's ledger through the
// syncs of controllers that restart: each sync starts from the stored
// status alone, as a new process does, and the ledger must hold exactly
// the intervals the Pods recorded.
func TestObserveAcrossRestarts(t *testing.T) {
	card := resource.MustParse("1")
	pod1, pod2 := types.UID("pod-1"), types.UID("pod-2")
	bound1, asked1 := at("2026-12-06T10:00:07Z"), at("2026-12-06T10:42:31Z")
	bound2 := at("2026-12-06T11:05:00Z")
	var stored *v1alpha1.Usage
	// Every step is a sync of a controller with no memory but stored.
	steps := []struct {
		now time.Time
		o   Observation
	}{
		// The first sync sees the Pod bound a while ago: the run starts
		// at the binding, not at the sync.
		{at("2026-12-06T10:00:20Z"), Observation{PodUID: pod1, Since: bound1, Type: "h100", Cards: card}},
		// A restart, then the same Pod: nothing moves.
		{at("2026-12-06T10:30:00Z"), Observation{PodUID: pod1, Since: bound1, Type: "h100", Cards: card}},
		// The controller was down when the stop was asked; the Pod, still
		// terminating, recorded when; it holds no cards of the tenant's.
		{at("2026-12-06T10:44:00Z"), Observation{PodUID: pod1, Since: bound1, Type: "h100", Ended: asked1}},
		// The terminating Pod is still seen: it opens no second run.
		{at("2026-12-06T10:44:05Z"), Observation{PodUID: pod1, Since: bound1, Type: "h100"}},
		// The next start.
		{at("2026-12-06T11:05:02Z"), Observation{PodUID: pod2, Since: bound2, Type: "h100", Cards: card}},
	}
	for i, s := range steps {
		stored = Observe(stored, s.o, s.now)
		if stored == nil {
			t.Fatalf("step %d: no ledger", i)
		}
	}
	now := at("2026-12-06T12:00:00Z")
	held, _ := cardSeconds(Days(stored, time.Time{}, now), PeriodStart(nil, now))
	want := int64(asked1.Sub(bound1)/time.Second+now.Sub(bound2)/time.Second) * 1000
	if held != want {
		t.Errorf("ledger holds %d milli-card-seconds, the Pods recorded %d", held, want)
	}
	if stored.Current == nil || stored.Current.PodUID != pod2 || stored.LastPodUID != pod1 {
		t.Errorf("ledger %+v: want pod-2 running after pod-1", stored)
	}
	// Observing what is already recorded changes nothing, so a sync
	// writes no status.
	again := Observe(stored, Observation{PodUID: pod2, Since: bound2, Type: "h100", Cards: card}, now)
	if again != stored {
		t.Errorf("an unchanged observation moved the ledger")
	}
}

func TestObserveClosesAtNowWithoutARecord(t *testing.T) {
	u := Observe(nil, Observation{PodUID: "p", Since: at("2026-12-06T10:00:00Z"), Type: "h100", Cards: resource.MustParse("500m")}, at("2026-12-06T10:00:01Z"))
	// The Pod went while no one watched, and left no record of it.
	u = Observe(u, Observation{}, at("2026-12-06T10:10:00Z"))
	held, _ := cardSeconds(u.Days, at("2026-12-01T00:00:00Z"))
	if held != 600*500 {
		t.Errorf("held %d milli-card-seconds, want %d", held, 600*500)
	}
	if u.Current != nil {
		t.Errorf("run still open: %+v", u.Current)
	}
}

// A Pod that went unseen and was replaced by one bound before the sync
// that notices: the seconds both claim are counted once.
func TestObserveReplacedPodUnseen(t *testing.T) {
	card := resource.MustParse("1")
	u := Observe(nil, Observation{PodUID: "old", Since: at("2026-12-06T10:00:00Z"), Type: "h100", Cards: card}, at("2026-12-06T10:00:00Z"))
	u = Observe(u, Observation{PodUID: "new", Since: at("2026-12-06T10:20:00Z"), Type: "h100", Cards: card}, at("2026-12-06T10:30:00Z"))
	held, _ := cardSeconds(Days(u, time.Time{}, at("2026-12-06T11:00:00Z")), at("2026-12-01T00:00:00Z"))
	if want := int64(3600_000); held != want {
		t.Errorf("held %d milli-card-seconds over an hour of one card, want %d", held, want)
	}
}

func TestPeriodBoundary(t *testing.T) {
	// A run from 30 November 23:00 to 1 December 01:00 on two cards.
	u := Observe(nil, Observation{PodUID: "p", Since: at("2026-11-30T23:00:00Z"), Type: "h100", Cards: resource.MustParse("2")}, at("2026-11-30T23:00:00Z"))
	u = Observe(u, Observation{PodUID: "p", Ended: at("2026-12-01T01:00:00Z")}, at("2026-12-01T01:00:03Z"))
	cases := []struct {
		name   string
		period *v1alpha1.BudgetPeriod
		now    time.Time
		want   int64
	}{
		{name: "November's month, on its last day", now: at("2026-11-30T23:30:00Z"), want: 2 * 1800_000},
		{name: "December's month counts from midnight", now: at("2026-12-01T02:00:00Z"), want: 2 * 3600_000},
		{name: "two rolling days take both sides", period: &v1alpha1.BudgetPeriod{RollingDays: 2}, now: at("2026-12-01T02:00:00Z"), want: 2 * 7200_000},
		{name: "one rolling day", period: &v1alpha1.BudgetPeriod{RollingDays: 1}, now: at("2026-12-01T02:00:00Z"), want: 2 * 3600_000},
		{name: "rolled out", period: &v1alpha1.BudgetPeriod{RollingDays: 1}, now: at("2026-12-02T00:00:00Z"), want: 0},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			days := Days(u, time.Time{}, tc.now)
			if tc.now.Before(at("2026-12-01T01:00:00Z")) {
				// Before the end, the run is open as of now.
				days = Days(Observe(nil, Observation{PodUID: "p", Since: at("2026-11-30T23:00:00Z"), Type: "h100", Cards: resource.MustParse("2")}, tc.now), time.Time{}, tc.now)
			}
			held, _ := cardSeconds(days, PeriodStart(tc.period, tc.now))
			if held != tc.want {
				t.Errorf("held %d milli-card-seconds, want %d", held, tc.want)
			}
		})
	}
}

func TestAddKeepsThirtyOneDays(t *testing.T) {
	now := at("2026-12-31T12:00:00Z")
	days := Add(nil, now,
		v1alpha1.UsageDay{Date: "2026-11-30", InstanceType: "h100", CardSeconds: resource.MustParse("5")},
		v1alpha1.UsageDay{Date: "2026-12-01", InstanceType: "h100", CardSeconds: resource.MustParse("7")},
		v1alpha1.UsageDay{Date: "2026-12-01", InstanceType: "h100", CardSeconds: resource.MustParse("3")},
	)
	if len(days) != 1 || days[0].Date != "2026-12-01" || days[0].CardSeconds.Value() != 10 {
		t.Errorf("days %+v, want 10 card-seconds on 2026-12-01 only", days)
	}
}

func TestHours(t *testing.T) {
	cases := []struct {
		milli int64
		want  string
	}{{0, "0"}, {3600_000, "1"}, {1, "1m"}, {5400_000, "1500m"}}
	for _, tc := range cases {
		if got := Hours(tc.milli); got.String() != tc.want {
			t.Errorf("Hours(%d) = %s, want %s", tc.milli, got.String(), tc.want)
		}
	}
}

func TestStopping(t *testing.T) {
	budget := func(name string, action v1alpha1.BudgetExhaustedAction, key, hard, consumed string) *v1alpha1.Budget {
		b := &v1alpha1.Budget{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{v1alpha1.BudgetResourceName(key): resource.MustParse(hard)}, OnExhausted: action},
		}
		if consumed != "" {
			q := resource.MustParse(consumed)
			typ, _ := HoursKey(v1alpha1.BudgetResourceName(key))
			if typ == "" {
				typ = "h100"
			}
			b.Status.Consumed = v1alpha1.BudgetResourceList{v1alpha1.BudgetResourceName(key): q}
			b.Status.Usage = []v1alpha1.BudgetUsage{{InstanceType: typ, CardSeconds: *resource.NewMilliQuantity(q.MilliValue()*3600, resource.DecimalSI)}}
		}
		return b
	}
	stop, refuse := v1alpha1.BudgetExhaustedStop, v1alpha1.BudgetExhaustedRefuse
	// rounded is a Budget whose consumed is rounded up to its limit from
	// a usage a second short of it.
	rounded := budget("r", stop, "accelerator-hours", "1", "1")
	rounded.Status.Usage[0].CardSeconds = resource.MustParse("3599")
	for _, tc := range []struct {
		name     string
		budgets  []*v1alpha1.Budget
		wantName string
		wantKey  v1alpha1.BudgetResourceName
	}{
		{name: "none"},
		{name: "spent", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours", "1", "1")}, wantName: "a", wantKey: "accelerator-hours"},
		{name: "past the limit", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours", "1", "2.5")}, wantName: "a", wantKey: "accelerator-hours"},
		{name: "hours left", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours", "1", "0.999")}},
		{name: "not counted yet", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours", "1", "")}},
		{name: "Refuse only", budgets: []*v1alpha1.Budget{budget("a", refuse, "accelerator-hours", "1", "1")}},
		{name: "its type's key", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours.h100", "1", "1")}, wantName: "a", wantKey: "accelerator-hours.h100"},
		{name: "another type's key", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerator-hours.a10", "1", "1")}},
		{name: "consumed rounded up to the limit, a second left", budgets: []*v1alpha1.Budget{rounded}},
		{name: "a card key over", budgets: []*v1alpha1.Budget{budget("a", stop, "accelerators", "1", "2")}},
		{name: "first by name", budgets: []*v1alpha1.Budget{
			budget("z", stop, "accelerator-hours", "1", "1"), budget("b", refuse, "accelerator-hours", "1", "1"), budget("m", stop, "accelerator-hours.h100", "1", "1"),
		}, wantName: "m", wantKey: "accelerator-hours.h100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			b, k := Stopping(tc.budgets, "h100")
			name := ""
			if b != nil {
				name = b.Name
			}
			if name != tc.wantName || k != tc.wantKey {
				t.Errorf("Stopping = %q %q, want %q %q", name, k, tc.wantName, tc.wantKey)
			}
		})
	}
}
