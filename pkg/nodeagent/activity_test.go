package nodeagent

import (
	"math/rand/v2"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"kiln.dev/kiln/pkg/deviceplugin"
)

var t0 = time.Date(2026, 12, 6, 9, 0, 0, 0, time.UTC)

func use(util int32, mem string) deviceplugin.Usage {
	return deviceplugin.Usage{Utilization: util, MemoryUsed: resource.MustParse(mem)}
}

// TestActivityObserve: which samples are worth a NodeDevices write, and
// what each device then reports, on a fake clock.
func TestActivityObserve(t *testing.T) {
	type step struct {
		after   time.Duration // since t0
		samples map[string]deviceplugin.Usage
		wantDue bool
		// wantActive is GPU-0's reported last active time, as an offset
		// from t0; -1 for never.
		wantActive time.Duration
		wantUtil   int32
	}
	one := func(u deviceplugin.Usage) map[string]deviceplugin.Usage {
		return map[string]deviceplugin.Usage{"GPU-0": u}
	}
	for _, tc := range []struct {
		name  string
		seed  time.Duration // GPU-0's seeded last active time; 0 for none
		steps []step
	}{
		{name: "idle for hours: written once", steps: []step{
			{0, one(use(0, "0")), true, -1, 0},
			{10 * time.Second, one(use(0, "0")), false, -1, 0},
			{3 * time.Hour, one(use(0, "0")), false, -1, 0},
		}},
		{name: "small wobble: at most once a minute", steps: []step{
			{0, one(use(40, "10Gi")), true, 0, 40},
			{10 * time.Second, one(use(45, "10Gi")), false, 0, 40},
			{20 * time.Second, one(use(38, "10Gi")), false, 0, 40},
			{60 * time.Second, one(use(42, "10Gi")), true, 60 * time.Second, 41},
			{70 * time.Second, one(use(42, "10Gi")), false, 60 * time.Second, 41},
		}},
		{name: "noise is smoothed; a lasting jump is written at once", steps: []step{
			{0, one(use(20, "1Gi")), true, 0, 20},
			{10 * time.Second, one(use(35, "1Gi")), false, 0, 20},
			{20 * time.Second, one(use(60, "1Gi")), true, 20 * time.Second, 35},
			{30 * time.Second, one(use(21, "1Gi")), false, 20 * time.Second, 35},
		}},
		{name: "waking up: at once", steps: []step{
			{0, one(use(3, "0")), true, -1, 3},
			{50 * time.Second, one(use(3, "2Gi")), true, -1, 3},
			{60 * time.Second, one(use(9, "2Gi")), true, 60 * time.Second, 5},
			{70 * time.Second, one(use(2, "2Gi")), false, 60 * time.Second, 5},
		}},
		{name: "memory in use moving by more than 1Gi: at once", steps: []step{
			{0, one(use(0, "1Gi")), true, -1, 0},
			{10 * time.Second, one(use(0, "1800Mi")), false, -1, 0},
			{20 * time.Second, one(use(0, "3Gi")), true, -1, 0},
		}},
		{name: "a restart keeps the last active time until the device is active", seed: -30 * time.Minute, steps: []step{
			{0, one(use(0, "0")), true, -30 * time.Minute, 0},
			{5 * time.Minute, one(use(0, "0")), false, -30 * time.Minute, 0},
			{6 * time.Minute, one(use(90, "0")), true, 6 * time.Minute, 27},
		}},
		{name: "a device gone is written", steps: []step{
			{0, map[string]deviceplugin.Usage{"GPU-0": use(0, "0"), "GPU-1": use(0, "0")}, true, -1, 0},
			{10 * time.Second, one(use(0, "0")), true, -1, 0},
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newActivity(DefaultActiveThreshold)
			if tc.seed != 0 {
				a.seed("GPU-0", t0.Add(tc.seed))
			}
			for i, s := range tc.steps {
				if due := a.observe(t0.Add(s.after), s.samples); due != s.wantDue {
					t.Errorf("step %d (+%v): due %t, want %t", i, s.after, due, s.wantDue)
				}
				r := a.devices["GPU-0"].reported
				if r == nil {
					t.Fatalf("step %d: GPU-0 reports nothing", i)
				}
				want := time.Time{}
				if s.wantActive != -1 {
					want = t0.Add(s.wantActive)
				}
				if !r.lastActive.Equal(want) || r.usage.Utilization != s.wantUtil {
					t.Errorf("step %d (+%v): reports utilization %d, last active %v; want %d, %v", i, s.after, r.usage.Utilization, r.lastActive, s.wantUtil, want)
				}
			}
			if _, ok := a.devices["GPU-1"]; ok && tc.name == "a device gone is written" {
				t.Error("GPU-1 is still tracked after it was gone")
			}
		})
	}
}

// BenchmarkNodeDevicesWrites reports the NodeDevices writes one node of
// eight cards makes per hour, sampled every 10 s for a simulated day:
// two cards idle, three steady under training (±3 points), two that
// alternate five busy minutes with five idle, and one noisy (±15). At
// 1,000 such nodes, writes/s is the figure times 1,000 / 3,600.
func BenchmarkNodeDevicesWrites(b *testing.B) {
	const interval = 10 * time.Second
	const day = 24 * time.Hour
	var writes int
	for b.Loop() {
		rng := rand.New(rand.NewPCG(1, 2))
		a := newActivity(DefaultActiveThreshold)
		writes = 0
		for at := time.Duration(0); at < day; at += interval {
			samples := map[string]deviceplugin.Usage{}
			for card := range 8 {
				var util int32
				switch {
				case card < 2:
				case card < 5:
					util = 70 + rng.Int32N(7) - 3
				case card < 7:
					if (at/(5*time.Minute))%2 == 0 {
						util = 95
					}
				default:
					util = 50 + rng.Int32N(31) - 15
				}
				// Memory in use holds steady while a job runs.
				mem := int64(0)
				if util > 0 {
					mem = 60<<30 + rng.Int64N(256<<20)
				}
				samples[string(rune('A'+card))] = deviceplugin.Usage{Utilization: util, MemoryUsed: *resource.NewQuantity(mem, resource.BinarySI)}
			}
			if a.observe(t0.Add(at), samples) {
				writes++
			}
		}
	}
	perHour := float64(writes) / day.Hours()
	b.ReportMetric(perHour, "writes/node/hour")
	b.ReportMetric(perHour*1000/3600, "writes/s@1000nodes")
}
