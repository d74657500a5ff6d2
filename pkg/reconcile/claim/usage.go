package claim

import (
	"fmt"

	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/types"

	internal "kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/ledger"
)

// The ledger of card-hours (issue Q): a Claim is accounted while Bound or
// Attached, from the status write that says so to the one that says it no
// longer is, at the share its Budgets charge. Its holder Pod changes
// while an Instance runs on the cards, so a run is named by the Claim and
// the time it opened, not by a Pod.

// holding says whether a Claim in this phase is accounted.
func holding(phase v1alpha1.ClaimPhase) bool {
	return phase == v1alpha1.ClaimBound || phase == v1alpha1.ClaimAttached
}

// observeUsage moves the ledger in s.st on to the phase this sync
// decided; t prices the Claim (nil when its type is gone).
func (c *Controller) observeUsage(s *step, held bool) {
	ob := ledger.Observation{Type: s.cl.Spec.Type}
	if held {
		ob.Cards = c.claimShare(s.cl)
		ob.PodUID = types.UID(fmt.Sprintf("%s@%d", s.cl.UID, s.now.Unix()))
		if u := s.st.Usage; u != nil && u.Current != nil {
			ob.PodUID = u.Current.PodUID
		}
		ob.Since = s.now.Time
	}
	s.st.Usage = ledger.Observe(s.st.Usage, ob, s.now.Time)
}

// claimShare is the share of cards the Claim's Budgets charge it.
func (c *Controller) claimShare(cl *v1alpha1.Claim) resource.Quantity {
	t, err := c.types.Get(cl.Spec.Type)
	var spec internal.ClaimSpec
	if err != nil || v1alpha1.Convert_v1alpha1_ClaimSpec_To_gpu_ClaimSpec(&cl.Spec, &spec, nil) != nil {
		return resource.Quantity{}
	}
	share, _ := accounting.CountedShare(accounting.ClaimRequest(&spec), t)
	return *resource.NewMilliQuantity(share.MilliCards, resource.DecimalSI)
}
