package instance

import (
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// at is started plus d: times on the fixtures' clock.
func at(d time.Duration) time.Time { return started.Add(d) }

func mt(d time.Duration) *metav1.Time { return &metav1.Time{Time: at(d)} }

// usage is a device held by Pod "pod-1" that reports utilization u
// (nil: no figure), 1Gi in use, and was last active at last (nil: never).
func usage(uuid string, u *int32, last *metav1.Time) v1alpha1.NodeDevice {
	return v1alpha1.NodeDevice{UUID: uuid, Health: v1alpha1.DeviceHealthy,
		Holder:      &v1alpha1.DeviceHolder{Kind: v1alpha1.DeviceHolderInstance, PodUID: "pod-1"},
		Utilization: u, MemoryUsed: ptr.To(resource.MustParse("1Gi")), LastActiveTime: last}
}

func devicesOn(node string, d ...v1alpha1.NodeDevice) *v1alpha1.NodeDevices {
	return &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: node}, Status: v1alpha1.NodeDevicesStatus{Devices: d}}
}

func TestObserveActivity(t *testing.T) {
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{UID: "pod-1"}, Spec: corev1.PodSpec{NodeName: "gpu-1"},
		Status: corev1.PodStatus{StartTime: &started}}
	other := usage("GPU-other", ptr.To[int32](90), mt(50*time.Minute))
	other.Holder.PodUID = "pod-2"
	for _, tc := range []struct {
		name      string
		prev      *v1alpha1.InstanceActivity
		devices   []v1alpha1.NodeDevice
		threshold *int32
		now       time.Duration
		// want is the whole result; wantLast its exact lastActiveTime.
		wantNone     bool
		wantLast     time.Duration
		wantStored   time.Duration
		wantMeasured bool
		wantUtil     *int32
	}{
		{name: "never active: idle since the Pod started", devices: []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](0), nil)},
			now: time.Hour, wantLast: 0, wantStored: 0, wantMeasured: true, wantUtil: ptr.To[int32](0)},
		{name: "the agent's lastActiveTime", devices: []v1alpha1.NodeDevice{
			usage("GPU-a", ptr.To[int32](0), mt(10*time.Minute)), usage("GPU-b", ptr.To[int32](2), mt(20*time.Minute)), other},
			now: time.Hour, wantLast: 20 * time.Minute, wantStored: 20 * time.Minute, wantMeasured: true, wantUtil: ptr.To[int32](2)},
		{name: "busy now", devices: []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](40), mt(10*time.Minute))},
			now: time.Hour, wantLast: time.Hour, wantStored: time.Hour, wantMeasured: true, wantUtil: ptr.To[int32](40)},
		{name: "busy now, written within the minute: status keeps what it said",
			prev:    &v1alpha1.InstanceActivity{LastActiveTime: mt(59*time.Minute + 30*time.Second)},
			devices: []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](40), mt(10*time.Minute))},
			now:     time.Hour, wantLast: time.Hour, wantStored: 59*time.Minute + 30*time.Second, wantMeasured: true, wantUtil: ptr.To[int32](40)},
		{name: "a status from before this Pod's start does not count",
			prev:    &v1alpha1.InstanceActivity{LastActiveTime: mt(-time.Hour)},
			devices: []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](0), mt(-time.Hour))},
			now:     time.Hour, wantLast: 0, wantStored: 0, wantMeasured: true, wantUtil: ptr.To[int32](0)},
		{name: "a status time ahead of now is not taken",
			prev:    &v1alpha1.InstanceActivity{LastActiveTime: mt(10 * time.Hour)},
			devices: []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](0), nil)},
			now:     time.Hour, wantLast: 0, wantStored: 0, wantMeasured: true, wantUtil: ptr.To[int32](0)},
		{name: "the type's threshold judges, not the agent's word",
			devices:   []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](15), mt(59*time.Minute))},
			threshold: ptr.To[int32](20), now: time.Hour, wantLast: 0, wantStored: 0, wantMeasured: true, wantUtil: ptr.To[int32](15)},
		{name: "above the type's threshold",
			devices:   []v1alpha1.NodeDevice{usage("GPU-a", ptr.To[int32](25), nil)},
			threshold: ptr.To[int32](20), now: time.Hour, wantLast: time.Hour, wantStored: time.Hour, wantMeasured: true, wantUtil: ptr.To[int32](25)},
		{name: "a device without a figure: not measured", devices: []v1alpha1.NodeDevice{
			usage("GPU-a", ptr.To[int32](0), nil), usage("GPU-b", nil, nil)},
			now: time.Hour, wantLast: 0, wantStored: 0, wantUtil: ptr.To[int32](0)},
		{name: "no device held", devices: []v1alpha1.NodeDevice{other}, now: time.Hour, wantNone: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act := observeActivity(tc.prev, pod, devicesOn("gpu-1", tc.devices...), tc.threshold, at(tc.now))
			if tc.wantNone {
				if act.status != nil || act.measured {
					t.Errorf("activity %+v, want none", act)
				}
				return
			}
			if act.status == nil {
				t.Fatal("no activity")
			}
			if !act.last.Equal(at(tc.wantLast)) || !act.status.LastActiveTime.Equal(mt(tc.wantStored)) {
				t.Errorf("last active %s, stored %s; want %s, %s", act.last.Sub(started.Time), act.status.LastActiveTime.Sub(started.Time), tc.wantLast, tc.wantStored)
			}
			if act.measured != tc.wantMeasured {
				t.Errorf("measured %v, want %v", act.measured, tc.wantMeasured)
			}
			if diff := cmp.Diff(tc.wantUtil, act.status.Utilization); diff != "" {
				t.Errorf("utilization (-want +got):\n%s", diff)
			}
		})
	}
	// The memory of the Instance's own devices, summed.
	act := observeActivity(nil, pod, devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](0), nil), usage("GPU-b", ptr.To[int32](0), nil), other), nil, at(time.Hour))
	if m := act.status.MemoryUsed; m == nil || m.Cmp(resource.MustParse("2Gi")) != 0 {
		t.Errorf("memoryUsed %v, want 2Gi", m)
	}
}

func TestIdleVerdict(t *testing.T) {
	pod := &corev1.Pod{Status: corev1.PodStatus{StartTime: &started}}
	policy := func(stopAfter, minRun time.Duration) *v1alpha1.InstanceType {
		typ := h100()
		typ.Spec.Idle = &v1alpha1.IdlePolicy{StopAfter: metav1.Duration{Duration: stopAfter}}
		if minRun > 0 {
			typ.Spec.Idle.MinRunTime = &metav1.Duration{Duration: minRun}
		}
		return typ
	}
	ownLimit := func(d time.Duration) *v1alpha1.Instance {
		inst := running()
		inst.Spec.IdleStopAfter = &metav1.Duration{Duration: d}
		return inst
	}
	for _, tc := range []struct {
		name      string
		inst      *v1alpha1.Instance
		typ       *v1alpha1.InstanceType
		lastAt    time.Duration
		unmeasued bool
		now       time.Duration
		wantDue   bool
		wantAfter time.Duration
	}{
		{name: "idle past the type's limit", inst: running(), typ: policy(30*time.Minute, 0), now: 30 * time.Minute, wantDue: true},
		{name: "idle, not yet for the limit", inst: running(), typ: policy(30*time.Minute, 0), now: 29 * time.Minute, wantAfter: time.Minute},
		{name: "activity restarts the count", inst: running(), typ: policy(30*time.Minute, 0), lastAt: 20 * time.Minute, now: 45 * time.Minute, wantAfter: 5 * time.Minute},
		{name: "the minimum run time holds it", inst: running(), typ: policy(10*time.Minute, time.Hour), now: 30 * time.Minute, wantAfter: 30 * time.Minute},
		{name: "past the minimum run time", inst: running(), typ: policy(10*time.Minute, time.Hour), now: time.Hour, wantDue: true},
		{name: "the tenant's shorter limit", inst: ownLimit(5 * time.Minute), typ: policy(30*time.Minute, 0), now: 5 * time.Minute, wantDue: true},
		{name: "a longer limit of the tenant's is not taken", inst: ownLimit(time.Hour), typ: policy(30*time.Minute, 0), now: 30 * time.Minute, wantDue: true},
		{name: "the tenant's limit on a type without one", inst: ownLimit(5 * time.Minute), typ: h100(), now: 6 * time.Minute, wantDue: true},
		{name: "no limit at all", inst: running(), typ: h100(), now: 100 * time.Hour},
		{name: "a type that is gone takes the tenant's limit", inst: ownLimit(5 * time.Minute), now: 5 * time.Minute, wantDue: true},
		{name: "unmeasured devices are never idle", inst: running(), typ: policy(time.Minute, 0), unmeasued: true, now: 100 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			act := activity{last: at(tc.lastAt), measured: !tc.unmeasued}
			due, after := idleVerdict(tc.inst, tc.typ, pod, act, at(tc.now))
			if due != tc.wantDue || after != tc.wantAfter {
				t.Errorf("due %v after %s, want %v after %s", due, after, tc.wantDue, tc.wantAfter)
			}
		})
	}
}

// idleType is h100 with an idle limit of 30 minutes.
func idleType() *v1alpha1.InstanceType {
	typ := h100()
	typ.Spec.Idle = &v1alpha1.IdlePolicy{StopAfter: metav1.Duration{Duration: 30 * time.Minute}}
	return typ
}

func TestSyncIdleStop(t *testing.T) {
	for _, tc := range []struct {
		name     string
		devices  *v1alpha1.NodeDevices
		now      time.Duration
		wantStop bool
	}{
		{name: "idle past its limit", devices: devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](0), mt(10*time.Minute))),
			now: 41 * time.Minute, wantStop: true},
		{name: "idle, within its limit", devices: devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](0), mt(10*time.Minute))),
			now: 39 * time.Minute},
		{name: "busy", devices: devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](60), mt(10*time.Minute))),
			now: 10 * time.Hour},
		{name: "no report from the node", now: 10 * time.Hour},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			objs := []runtime.Object{inst, idleType(), readyPod(t, inst), gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001))}
			if tc.devices != nil {
				objs = append(objs, tc.devices)
			}
			f := newFixture(t, Options{}, objs...)
			f.clock = at(tc.now)
			after := f.sync()

			got := f.instance()
			events := f.events()
			if got.Spec.Stopped != tc.wantStop {
				t.Fatalf("spec.stopped %v, want %v; events %v", got.Spec.Stopped, tc.wantStop, events)
			}
			if !tc.wantStop {
				if len(f.deletes("pods")) != 0 || hasEvent(events, "Warning "+ReasonIdleLimit) {
					t.Errorf("a running Instance was touched: deletes %v events %v", f.deletes("pods"), events)
				}
				if tc.name == "idle, within its limit" && after != time.Minute {
					t.Errorf("requeue after %s, want the minute left", after)
				}
				return
			}
			want := "Warning IdleLimit Stopped: every device it held was idle since 2026-03-01T09:10:00Z (31m0s), past its idle limit of 30m0s (instancetype h100's spec.idle.stopAfter); start it again with kubectl gpu start train"
			if !slices.Contains(events, want) {
				t.Errorf("events %v, want %q", events, want)
			}
			if diff := cmp.Diff([]types.UID{"pod-1"}, f.deletes("pods")); diff != "" {
				t.Errorf("Pod deletes by UID (-want +got):\n%s", diff)
			}
			c := meta.FindStatusCondition(got.Status.Conditions, v1alpha1.InstanceConditionIdleStopped)
			if c == nil || c.Status != metav1.ConditionTrue || c.Reason != ReasonIdleLimit || !strings.Contains(c.Message, "idle since 2026-03-01T09:10:00Z") ||
				!c.LastTransitionTime.Equal(mt(41*time.Minute)) {
				t.Errorf("IdleStopped condition %+v, want True since the stop, saying since when", c)
			}
			f.wantPhase(v1alpha1.InstanceStopping, ReasonStopping)
		})
	}
}

// The activity goes into status, and the IdleStopped condition goes at
// the next start.
func TestSyncActivityStatus(t *testing.T) {
	inst := running()
	inst.Status.Conditions = []metav1.Condition{{Type: v1alpha1.InstanceConditionIdleStopped, Status: metav1.ConditionTrue, Reason: ReasonIdleLimit}}
	f := newFixture(t, Options{}, inst, idleType(), readyPod(t, inst), gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001)),
		devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](7), mt(3*time.Minute))))
	f.clock = at(5 * time.Minute)
	f.sync()
	got := f.instance().Status
	want := &v1alpha1.InstanceActivity{LastActiveTime: mt(5 * time.Minute), Utilization: ptr.To[int32](7), MemoryUsed: ptr.To(resource.MustParse("1Gi"))}
	if diff := cmp.Diff(want, got.Activity); diff != "" {
		t.Errorf("activity (-want +got):\n%s", diff)
	}
	if c := meta.FindStatusCondition(got.Conditions, v1alpha1.InstanceConditionIdleStopped); c != nil {
		t.Errorf("a running Instance keeps %+v", c)
	}
}

// An Instance on a Claim that is stopped for idleness gives its cards
// back to the Claim: its Pod stays until the holder has them reserved.
func TestSyncIdleStopOnAClaim(t *testing.T) {
	inst := onClaim()
	cl := reserved(v1alpha1.ClaimAttached, "gpu-1", "train")
	pod := claimPod(t, inst, "gpu-1")
	pod.Status.StartTime = &started
	f := newFixture(t, Options{}, inst, idleType(), gpuNode(), cl, pod, ownedService(inst, nodePort("jupyter", 8888, 30001)),
		devicesOn("gpu-1", usage("GPU-a", ptr.To[int32](0), nil)))
	f.clock = at(time.Hour)
	if after := f.sync(); after != handOverPoll {
		t.Errorf("requeue after %s, want the hand-over poll %s", after, handOverPoll)
	}
	if !f.instance().Spec.Stopped {
		t.Fatal("not stopped")
	}
	if d := f.deletes("pods"); len(d) != 0 {
		t.Errorf("Pod deleted before the Claim's holder has the cards: %v", d)
	}
}
