// Package accounting says how much of a card an Instance or Claim asks for,
// and what that charges a Budget. InstanceSizing sizes host resources from
// the share; the Budget plugin and its reconciler charge it, so both agree.
package accounting

import (
	"context"
	"fmt"
	"math/big"
	"slices"
	"strconv"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// LookupType reads the InstanceType a request names from the lister, and
// from the server when the lister has not seen it yet (a type created a
// moment ago). Nil, without error, if there is none.
func LookupType(ctx context.Context, l listers.InstanceTypeLister, c versioned.Interface, name string) (*v1alpha1.InstanceType, error) {
	if name == "" {
		// No type named (validation says spec.type is required); the
		// client refuses to get an empty name, and that is no server error.
		return nil, nil
	}
	t, err := l.Get(name)
	if err == nil {
		return t, nil
	}
	if !apierrors.IsNotFound(err) {
		return nil, err
	}
	t, err = c.GpuV1alpha1().InstanceTypes().Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	return t, err
}

// Request is what an object asks of its type's accelerators, whatever its
// kind or version.
type Request struct {
	Type string
	// Cards is a whole-card count; nil when the request is not for cards.
	Cards *int32
	// SlicePercent is the memory percentage of one card, 0 if not a slice.
	SlicePercent int32
	// SliceCoresPercent is the slice's percentage of the card's compute
	// (its memory percentage when not given).
	SliceCoresPercent int32
	// Partition is a partition profile name.
	Partition string
}

// Equal compares two requests by value.
func (r Request) Equal(o Request) bool {
	return r.Type == o.Type && r.SlicePercent == o.SlicePercent && r.SliceCoresPercent == o.SliceCoresPercent &&
		r.Partition == o.Partition &&
		(r.Cards == nil) == (o.Cards == nil) && (r.Cards == nil || *r.Cards == *o.Cards)
}

// InstanceRequest reads the request of an internal Instance.
func InstanceRequest(spec *gpu.InstanceSpec) Request {
	r := Request{Type: spec.Type, Cards: spec.Resources.Accelerators, Partition: spec.Resources.Partition}
	if s := spec.Resources.Slice; s != nil {
		r.SlicePercent, r.SliceCoresPercent = s.MemoryPercent, s.CoresPercent
		if r.SliceCoresPercent == 0 {
			r.SliceCoresPercent = s.MemoryPercent
		}
	}
	return r
}

// ClaimRequest reads the request of an internal Claim.
func ClaimRequest(spec *gpu.ClaimSpec) Request {
	return Request{Type: spec.Type, Cards: spec.Accelerators, Partition: spec.Partition}
}

// Share is a request's part of the type's accelerators.
type Share struct {
	// MilliCards is the share of one card in thousandths that is charged:
	// the larger of its part of the card's memory and of its compute,
	// rounded up. 2000 for two cards; 250 for a 25% slice, 500 for one of
	// 25% memory and 50% cores; 500 for a 40Gi partition of an 80Gi card;
	// 143 for a 1g.10gb partition (1 of 7 compute slices beats 10Gi of 80).
	MilliCards int64
	// MemoryMilliCards is its part of the card's memory alone, which host
	// resources are sized by.
	MemoryMilliCards int64
	// Memory is the accelerator memory the share holds.
	Memory resource.Quantity
}

// migComputeSlices is how many compute slices an NVIDIA card with MIG is
// cut into (A100, H100, H200, B200): a profile "<g>g.<memory>" holds g.
const migComputeSlices = 7

// partitionComputeMilli is a partition's part of the card's compute in
// thousandths, rounded up, read from an NVIDIA profile name such as
// "3g.40gb"; 0 when the name says nothing.
func partitionComputeMilli(t *v1alpha1.InstanceType, profile string) int64 {
	if t.Spec.Accelerator == nil || t.Spec.Accelerator.Vendor != "nvidia" {
		return 0
	}
	g, rest, ok := strings.Cut(profile, "g.")
	if !ok || rest == "" {
		return 0
	}
	n, err := strconv.Atoi(g)
	if err != nil || n <= 0 || n > migComputeSlices {
		return 0
	}
	return ceilDiv(int64(n), 1000, migComputeSlices)
}

// ShareOf computes the share. A CPU-only type, or a request for nothing,
// holds no accelerators. A partition profile the type does not list is an
// error; InstanceTypeAccess reports it to the user.
func ShareOf(req Request, t *v1alpha1.InstanceType) (Share, error) {
	acc := t.Spec.Accelerator
	if acc == nil {
		return Share{}, nil
	}
	cardMem := acc.Memory.Value()
	switch {
	case req.Partition != "":
		for _, p := range acc.Partitions {
			if p.Name == req.Partition {
				memMilli := ceilDiv(p.Memory.Value(), 1000, cardMem)
				return Share{MilliCards: max(memMilli, partitionComputeMilli(t, p.Name)), MemoryMilliCards: memMilli, Memory: p.Memory.DeepCopy()}, nil
			}
		}
		return Share{}, fmt.Errorf("instancetype %q has no partition profile %q", t.Name, req.Partition)
	case req.SlicePercent > 0:
		mem := ceilDiv(cardMem, int64(req.SlicePercent), 100)
		memMilli := int64(req.SlicePercent) * 10
		return Share{MilliCards: max(memMilli, int64(req.SliceCoresPercent)*10), MemoryMilliCards: memMilli,
			Memory: *resource.NewQuantity(mem, resource.BinarySI)}, nil
	case req.Cards != nil:
		n := int64(*req.Cards)
		// Quantity arithmetic turns exact decimal rather than wrap: a type
		// stored before validation bounded card memory still counts right.
		mem := *resource.NewQuantity(cardMem, resource.BinarySI)
		mem.Mul(n)
		return Share{MilliCards: n * 1000, MemoryMilliCards: n * 1000, Memory: mem}, nil
	}
	return Share{}, nil
}

// CountedShare is the share a recount counts: ShareOf, or, for a request
// its type can no longer price (a partition profile removed since it was
// admitted), the whole cards it runs on, the most it can hold, with why
// it was not priced.
func CountedShare(req Request, t *v1alpha1.InstanceType) (share Share, unpriced error) {
	share, unpriced = ShareOf(req, t)
	if unpriced == nil {
		return share, nil
	}
	cards := int32(1)
	if req.Cards != nil {
		cards = *req.Cards
	}
	// A count of cards always prices.
	share, _ = ShareOf(Request{Type: req.Type, Cards: &cards}, t)
	return share, unpriced
}

// ceilDiv returns ceil(a*b/c) without overflowing on large byte counts.
func ceilDiv(a, b, c int64) int64 {
	if c == 0 {
		return 0
	}
	num := new(big.Int).Mul(big.NewInt(a), big.NewInt(b))
	q, m := new(big.Int).QuoRem(num, big.NewInt(c), new(big.Int))
	if m.Sign() > 0 {
		q.Add(q, big.NewInt(1))
	}
	return q.Int64()
}

// Charge is what a share of a type's accelerators counts against a
// Budget, by key: accelerators (cards, fractional for slices and
// partitions), the same under accelerators.<type>, and accelerator-memory.
// Whether an object is charged at all (a stopped Instance, one on a Claim
// that holds it, a Claim's phase) is for the callers to say.
func Charge(share Share, typeName string) gpu.BudgetResourceList {
	cards := *resource.NewMilliQuantity(share.MilliCards, resource.DecimalSI)
	if share.MilliCards%1000 == 0 {
		cards = *resource.NewQuantity(share.MilliCards/1000, resource.DecimalSI)
	}
	return gpu.BudgetResourceList{
		gpu.BudgetAccelerators: cards,
		gpu.BudgetResourceName(gpu.BudgetAcceleratorsPerTypePrefix + typeName): cards.DeepCopy(),
		gpu.BudgetAcceleratorMemory: share.Memory.DeepCopy(),
	}
}

// InstanceCharge is the whole charge of an Instance: instances and a node
// port for each of its ports, whatever its state, since a stopped Instance
// keeps its Service; plus cards, the charge of the accelerators it holds
// (nil when it holds none, or its Claim carries them). Stopping never
// raises a charge, so a stop is never refused.
func InstanceCharge(spec *gpu.InstanceSpec, cards gpu.BudgetResourceList) gpu.BudgetResourceList {
	c := gpu.BudgetResourceList{
		gpu.BudgetInstances: *resource.NewQuantity(1, resource.DecimalSI),
		gpu.BudgetNodePorts: *resource.NewQuantity(int64(len(spec.Ports)), resource.DecimalSI),
	}
	for k, q := range cards {
		c[k] = q.DeepCopy()
	}
	return c
}

// InstanceHolds says whether an Instance may still have a Pod on
// accelerators: it runs, or it is stopped and kiln-controller has not yet
// reported that Pod gone (phase Stopped for this very generation; any
// edit of a stopped Instance counts it again for the moment until the
// controller looks, which errs on the safe side). An Instance no
// controller has touched has no Pod: kiln-controller adds its finalizer
// before it makes one. Tenants cannot write status, so they cannot
// release a charge early.
func InstanceHolds(inst *gpu.Instance) bool {
	// Being deleted, it holds until kiln-controller has seen its Pod gone
	// and taken its finalizer off; the ledger's finalizer, which stays
	// until kiln-apiserver has folded its card-hours, holds no card.
	if inst.DeletionTimestamp != nil && !slices.Contains(inst.Finalizers, gpu.InstanceFinalizer) {
		return false
	}
	if !inst.Spec.Stopped {
		return true
	}
	switch inst.Status.Phase {
	case gpu.InstanceStopped:
		return inst.Status.ObservedGeneration != inst.Generation
	case "":
		return slices.Contains(inst.Finalizers, gpu.InstanceFinalizer)
	}
	return true
}

// ClaimCharged says whether a Claim holds a charge: its phase holds or
// waits for cards (ClaimPhaseCharged), or its status still names the node
// it held on. kiln-controller clears status.nodeName of an Expired Claim
// only once its holder Pod is gone: a holder still Terminating may still
// run on the cards, and they stay charged until it is gone.
func ClaimCharged(c *gpu.Claim) bool {
	// Being deleted, as InstanceHolds: the claim loop takes its finalizer
	// off once the holder is gone.
	if c.DeletionTimestamp != nil && !slices.Contains(c.Finalizers, gpu.ClaimFinalizer) {
		return false
	}
	return ClaimPhaseCharged(c.Status.Phase) || c.Status.NodeName != ""
}

// ClaimPhaseCharged says whether a Claim in this phase holds a charge. A
// new Claim has no phase yet and is Pending. A Lost Claim is still charged:
// it waits to be placed again and takes its cards back when it is, so
// releasing its charge would let the namespace spend those cards twice.
func ClaimPhaseCharged(phase gpu.ClaimPhase) bool {
	switch phase {
	case "", gpu.ClaimPending, gpu.ClaimBound, gpu.ClaimAttached, gpu.ClaimLost:
		return true
	}
	return false
}

// ClaimCovers says whether an Instance asking req fits on the Claim, and
// if not, why, in words for the user. It must be of the Claim's type and
// ask for no more than the Claim holds, in the same form: whole cards on a
// Claim of at least as many, a partition on a Claim of that profile. A
// slice fits no Claim: the sharing device plugin serves slices, not the
// held devices. Nor does a request for no accelerators: it has no use for
// the Claim and would keep the Instance that needs it off.
func ClaimCovers(c *gpu.Claim, req Request) error {
	if req.Type != c.Spec.Type {
		return fmt.Errorf("claim %q is of type %s; an Instance of type %s does not fit: use a Claim of type %s, or remove spec.claimName",
			c.Name, c.Spec.Type, req.Type, req.Type)
	}
	why, fix := "", claimFits(c)
	switch {
	case req.Partition != "":
		switch {
		case c.Spec.Partition == "":
			why = "a Claim of whole cards lends no partition"
		case c.Spec.Partition != req.Partition:
			why = "the Claim holds another profile"
		}
	case req.SlicePercent > 0:
		why = "a slice cannot run on a Claim"
	case req.Cards != nil && *req.Cards > 0:
		switch {
		case c.Spec.Partition != "":
			why = "a partition Claim lends no whole cards"
		case c.Spec.Accelerators == nil:
			why = "the Claim holds no cards"
		case *req.Cards > *c.Spec.Accelerators:
			why, fix = "more than the Claim holds", fix+", use a larger Claim"
		}
	default:
		return fmt.Errorf("claim %q holds %s; an Instance of no accelerators has no use for it: remove spec.claimName", c.Name, claimHolding(c))
	}
	if why == "" {
		return nil
	}
	return fmt.Errorf("claim %q holds %s; an Instance of %s does not fit (%s): %s, or remove spec.claimName",
		c.Name, claimHolding(c), requestHolding(req), why, fix)
}

// ClaimHolds says whether a Claim carries the charge of an Instance asking
// req: it covers the request and its phase is charged. An Instance it does
// not cover is charged in full, beside the Claim. ClaimAttach admits no
// such Instance; one stored before it existed is charged all the same. An
// Expired Claim whose holder is still going carries only its own charge.
func ClaimHolds(c *gpu.Claim, req Request) bool {
	return ClaimPhaseCharged(c.Status.Phase) && ClaimCovers(c, req) == nil
}

func claimHolding(c *gpu.Claim) string {
	switch {
	case c.Spec.Partition != "":
		return "1 partition of " + c.Spec.Partition
	case c.Spec.Accelerators != nil:
		return cards(*c.Spec.Accelerators)
	}
	return "no accelerators"
}

func requestHolding(req Request) string {
	switch {
	case req.Partition != "":
		return "a partition of " + req.Partition
	case req.SlicePercent > 0:
		return fmt.Sprintf("a %d%% slice", req.SlicePercent)
	case req.Cards != nil:
		return cards(*req.Cards)
	}
	return "no accelerators"
}

// claimFits says what an Instance on the Claim may ask for.
func claimFits(c *gpu.Claim) string {
	switch {
	case c.Spec.Partition != "":
		return "ask for spec.resources.partition: " + c.Spec.Partition
	case c.Spec.Accelerators != nil:
		return "ask for at most " + cards(*c.Spec.Accelerators)
	}
	return "use another Claim"
}

func cards(n int32) string {
	if n == 1 {
		return "1 accelerator"
	}
	return fmt.Sprintf("%d accelerators", n)
}
