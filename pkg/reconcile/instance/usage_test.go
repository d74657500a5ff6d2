package instance

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// heldSeconds is the milli-card-seconds an Instance's ledger holds at now.
func heldSeconds(inst *v1alpha1.Instance, now time.Time) int64 {
	var sum int64
	for _, d := range ledger.Days(inst.Status.Usage, time.Time{}, now) {
		sum += d.CardSeconds.MilliValue()
	}
	return sum
}

// An Instance is accounted from its Pod's binding until the stop asks for
// its Pod's deletion, across a restart of the controller: every sync
// below is a new controller that knows only what is stored.
func TestSyncUsageAcrossRestarts(t *testing.T) {
	inst := running()
	pod := readyPod(t, inst)
	pod.Status.Conditions[0].LastTransitionTime = started
	node, svc := gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001))

	f := newFixture(t, Options{}, inst, h100(), pod, node, svc)
	f.clock = at(10 * time.Minute)
	f.sync()
	got := f.instance()
	if u := got.Status.Usage; u == nil || u.Current == nil || !u.Current.Since.Equal(&started) || u.Current.Cards.Cmp(resource.MustParse("1")) != 0 {
		t.Fatalf("usage %+v, want a run of one card since the Pod's binding", u)
	}

	// A restart, an hour later, then the stop.
	got.Spec.Stopped = true
	got.Generation++
	f = newFixture(t, Options{}, got, h100(), pod, node, svc)
	f.clock = at(time.Hour + 30*time.Second)
	f.sync()
	if d := f.deletes("pods"); len(d) != 1 {
		t.Fatalf("pod deletes %v, want one", d)
	}
	got = f.instance()
	if got.Status.Usage.Current != nil {
		t.Fatalf("run still open after the Pod's deletion: %+v", got.Status.Usage.Current)
	}

	// Another restart sees the Pod terminating: its record of when the
	// deletion was asked agrees, and nothing moves.
	terminating := pod.DeepCopy()
	terminating.DeletionTimestamp = &metav1.Time{Time: at(time.Hour + 30*time.Second + 30*time.Second)}
	terminating.DeletionGracePeriodSeconds = ptr.To[int64](30)
	f = newFixture(t, Options{}, got, h100(), terminating, node, svc)
	f.clock = at(time.Hour + 45*time.Second)
	f.sync()
	got = f.instance()
	if want := int64((time.Hour + 30*time.Second) / time.Second * 1000); heldSeconds(got, at(3*time.Hour)) != want {
		t.Errorf("ledger holds %d milli-card-seconds, want %d", heldSeconds(got, at(3*time.Hour)), want)
	}
	if got.Status.Usage.Current != nil {
		t.Errorf("the terminating Pod opened a run: %+v", got.Status.Usage.Current)
	}
}

// A partition or a slice is accounted by its share of a card.
func TestSyncUsageShare(t *testing.T) {
	for _, tc := range []struct {
		name string
		typ  *v1alpha1.InstanceType
		set  func(*v1alpha1.InstanceResources)
		want string
	}{
		// 40Gi of 80Gi beats 3 of 7 compute slices: half a card.
		{name: "partition", typ: h100(), set: func(r *v1alpha1.InstanceResources) { r.Partition = "3g.40gb" }, want: "500m"},
		{name: "slice", typ: l4(), set: func(r *v1alpha1.InstanceResources) { r.Slice = &v1alpha1.SliceRequest{MemoryPercent: 25} }, want: "250m"},
		{name: "slice with more compute than memory", typ: l4(),
			set: func(r *v1alpha1.InstanceResources) {
				r.Slice = &v1alpha1.SliceRequest{MemoryPercent: 25, CoresPercent: 40}
			}, want: "400m"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := running()
			inst.Spec.Type = tc.typ.Name
			inst.Spec.Resources.Accelerators = nil
			tc.set(&inst.Spec.Resources)
			pod := renderedPod(t, inst, tc.typ, nil, "pod-1")
			f := newFixture(t, Options{}, inst, tc.typ, pod, gpuNode(), ownedService(inst, nodePort("jupyter", 8888, 30001)))
			f.clock = at(time.Hour)
			f.sync()
			u := f.instance().Status.Usage
			if u == nil || u.Current == nil {
				t.Fatal("no run")
			}
			if want := resource.MustParse(tc.want); u.Current.Cards.Cmp(want) != 0 {
				t.Errorf("share %s, want %s", u.Current.Cards.String(), want.String())
			}
		})
	}
}

// An Instance on its Claim's cards accounts nothing; the Claim does.
// An Instance on a Claim's cards accounts nothing, also once the Claim
// let go (released for spent card-hours, say) and the Pod is still there:
// the Claim accounted for the cards.
func TestSyncUsageOnAClaim(t *testing.T) {
	for _, cl := range []*v1alpha1.Claim{
		reserved(v1alpha1.ClaimAttached, "gpu-1", "train"),
		reserved(v1alpha1.ClaimExpired, "", ""),
	} {
		t.Run(string(cl.Status.Phase), func(t *testing.T) {
			inst := onClaim()
			pod := claimPod(t, inst, "gpu-1")
			pod.Status.Phase = corev1.PodRunning
			f := newFixture(t, Options{}, inst, h100(), gpuNode(), cl, pod, ownedService(inst, nodePort("jupyter", 8888, 30001)))
			f.clock = at(time.Hour)
			f.sync()
			if u := f.instance().Status.Usage; u != nil {
				t.Errorf("usage %+v, want none", u)
			}
		})
	}
}
