package claim

import (
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// A Claim is accounted from the status write that makes it Bound to the
// one that makes it Expired, through its Attached time, at its cards.
func TestClaimUsage(t *testing.T) {
	cl := newClaim("train", 4)
	f := newFixture(t, cl, h100())
	st := cl.Status
	for _, s := range []struct {
		at    time.Duration
		phase v1alpha1.ClaimPhase
	}{
		{0, v1alpha1.ClaimPending},
		{time.Minute, v1alpha1.ClaimBound},
		{time.Hour, v1alpha1.ClaimAttached},
		{2 * time.Hour, v1alpha1.ClaimBound},
		{3*time.Hour + time.Minute, v1alpha1.ClaimExpired},
		{4 * time.Hour, v1alpha1.ClaimExpired},
	} {
		st.Phase = s.phase
		step := &step{cl: cl, st: st, now: metav1.NewTime(start.Add(s.at))}
		f.c.observeUsage(step, holding(s.phase))
		st = step.st
	}
	var held int64
	for _, d := range ledger.Days(st.Usage, time.Time{}, start.Add(5*time.Hour)) {
		held += d.CardSeconds.MilliValue()
	}
	if want := int64(4 * 3 * 3600 * 1000); held != want {
		t.Errorf("held %d milli-card-seconds, want %d (4 cards, 3 hours)", held, want)
	}
	if st.Usage.Current != nil {
		t.Errorf("an Expired Claim's run is open: %+v", st.Usage.Current)
	}
}
