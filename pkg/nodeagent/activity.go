package nodeagent

import (
	"math"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/deviceplugin"
)

// Bounds of what a sample must change before NodeDevices is written for
// it: a node sampled every few seconds would otherwise turn every wobble
// of a busy card into a write, thousands a second across a large pool.
// Utilization is smoothed (an exponentially weighted average) before it
// is compared and reported, so noise does not pass the bound. A device
// that becomes active after a minute or more idle is written at once, so
// it is never judged idle on an old word.
const (
	// DefaultActiveThreshold is the utilization, in percent, above which
	// a sample counts as active: the API's, which kiln-controller also
	// takes for a published utilization.
	DefaultActiveThreshold = v1alpha1.DefaultActiveThreshold
	// utilizationBound is the change of smoothed utilization, in points,
	// written at once.
	utilizationBound = 10
	// smoothing is the weight of a new sample in the smoothed utilization.
	smoothing = 0.3
	// refreshAfter is how often smaller changes, and an active device's
	// later lastActiveTime, are written.
	refreshAfter = time.Minute
)

// memoryBound is the change of memory in use written at once.
var memoryBound = resource.MustParse("1Gi")

// activity is what the node agent knows of its devices' use: the last
// sample of each, when each was last active, and what NodeDevices was
// last given of both.
type activity struct {
	threshold int32
	devices   map[string]*deviceActivity
	// reportedAt is when the reported figures were last taken.
	reportedAt time.Time
}

type deviceActivity struct {
	// usage is the last sample, with its utilization smoothed.
	usage      deviceplugin.Usage
	smoothed   float64
	sampled    bool
	lastActive time.Time
	// reported is what NodeDevices is given; nil until the first sample.
	reported *reportedUsage
}

type reportedUsage struct {
	usage      deviceplugin.Usage
	lastActive time.Time
}

func newActivity(threshold int32) *activity {
	return &activity{threshold: threshold, devices: map[string]*deviceActivity{}}
}

// seed takes a device's lastActiveTime from NodeDevices as written
// before this agent started, so that a restart does not make a device
// look as if it had never been active.
func (a *activity) seed(uuid string, lastActive time.Time) {
	d := a.device(uuid)
	if lastActive.After(d.lastActive) {
		d.lastActive = lastActive
	}
}

func (a *activity) device(uuid string) *deviceActivity {
	d, ok := a.devices[uuid]
	if !ok {
		d = &deviceActivity{}
		a.devices[uuid] = d
	}
	return d
}

// observe takes a sample taken at now. It says whether NodeDevices should
// be written: a device seen for the first time or gone, one that woke up,
// a change beyond the bounds, or anything changed and refreshAfter passed
// since the last report. When it says so, the sample becomes what is
// reported.
func (a *activity) observe(now time.Time, samples map[string]deviceplugin.Usage) bool {
	due := false
	for uuid, u := range samples {
		d := a.device(uuid)
		if d.sampled {
			d.smoothed = smoothing*float64(u.Utilization) + (1-smoothing)*d.smoothed
		} else {
			d.smoothed, d.sampled = float64(u.Utilization), true
		}
		d.usage = deviceplugin.Usage{Utilization: int32(math.Round(d.smoothed)), MemoryUsed: u.MemoryUsed}
		active := u.Utilization > a.threshold
		if active {
			d.lastActive = now
		}
		r := d.reported
		if r == nil {
			due = true
			continue
		}
		moved := memoryChange(d.usage.MemoryUsed, r.usage.MemoryUsed)
		woke := active && (r.lastActive.IsZero() || now.Sub(r.lastActive) > refreshAfter)
		if woke || abs(d.usage.Utilization-r.usage.Utilization) > utilizationBound || moved.Cmp(memoryBound) > 0 {
			due = true
		}
	}
	for uuid, d := range a.devices {
		if _, ok := samples[uuid]; !ok && d.reported != nil {
			// A device the backend no longer samples.
			delete(a.devices, uuid)
			due = true
		}
	}
	if !due && now.Sub(a.reportedAt) >= refreshAfter {
		for _, d := range a.devices {
			if r := d.reported; r != nil && (r.usage.Utilization != d.usage.Utilization ||
				r.usage.MemoryUsed.Cmp(d.usage.MemoryUsed) != 0 || !r.lastActive.Equal(d.lastActive)) {
				due = true
				break
			}
		}
	}
	if !due {
		return false
	}
	for uuid, d := range a.devices {
		// A device seeded but not yet sampled has nothing to report.
		if _, sampled := samples[uuid]; sampled || d.reported != nil {
			d.reported = &reportedUsage{usage: d.usage, lastActive: d.lastActive}
		}
	}
	a.reportedAt = now
	return true
}

func abs(x int32) int32 {
	if x < 0 {
		return -x
	}
	return x
}

// memoryChange is |a-b|.
func memoryChange(a, b resource.Quantity) resource.Quantity {
	d := a.DeepCopy()
	d.Sub(b)
	if d.Sign() < 0 {
		d.Neg()
	}
	return d
}
