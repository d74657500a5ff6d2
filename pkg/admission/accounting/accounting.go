// Package accounting says how much of a card an Instance or Claim asks for,
// and what that charges a Budget. InstanceSizing sizes host resources from
// the share; the Budget plugin and its reconciler charge it, so both agree.
package accounting

import (
	"context"
	"fmt"
	"math/big"

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
	// Partition is a partition profile name.
	Partition string
}

// Equal compares two requests by value.
func (r Request) Equal(o Request) bool {
	return r.Type == o.Type && r.SlicePercent == o.SlicePercent && r.Partition == o.Partition &&
		(r.Cards == nil) == (o.Cards == nil) && (r.Cards == nil || *r.Cards == *o.Cards)
}

// InstanceRequest reads the request of an internal Instance.
func InstanceRequest(spec *gpu.InstanceSpec) Request {
	r := Request{Type: spec.Type, Cards: spec.Resources.Accelerators, Partition: spec.Resources.Partition}
	if spec.Resources.Slice != nil {
		r.SlicePercent = spec.Resources.Slice.MemoryPercent
	}
	return r
}

// ClaimRequest reads the request of an internal Claim.
func ClaimRequest(spec *gpu.ClaimSpec) Request {
	return Request{Type: spec.Type, Cards: spec.Accelerators, Partition: spec.Partition}
}

// Share is a request's part of the type's accelerators.
type Share struct {
	// MilliCards is the share of one card in thousandths: 2000 for two
	// cards, 250 for a 25% slice, 500 for a 40Gi partition of an 80Gi card.
	MilliCards int64
	// Memory is the accelerator memory the share holds.
	Memory resource.Quantity
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
				return Share{MilliCards: ceilDiv(p.Memory.Value(), 1000, cardMem), Memory: p.Memory.DeepCopy()}, nil
			}
		}
		return Share{}, fmt.Errorf("instancetype %q has no partition profile %q", t.Name, req.Partition)
	case req.SlicePercent > 0:
		mem := ceilDiv(cardMem, int64(req.SlicePercent), 100)
		return Share{MilliCards: int64(req.SlicePercent) * 10, Memory: *resource.NewQuantity(mem, resource.BinarySI)}, nil
	case req.Cards != nil:
		n := int64(*req.Cards)
		return Share{MilliCards: n * 1000, Memory: *resource.NewQuantity(n*cardMem, resource.BinarySI)}, nil
	}
	return Share{}, nil
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

// Charge is what a charged object counts against a Budget, by key:
// accelerators (cards, fractional for slices and partitions), the same
// under accelerators.<type>, accelerator-memory, and instances for an
// Instance. Whether an object is charged at all (stopped, on a Claim that
// holds it, a Claim's phase) is the Budget plugin's business.
func Charge(share Share, typeName string, instance bool) gpu.BudgetResourceList {
	cards := *resource.NewMilliQuantity(share.MilliCards, resource.DecimalSI)
	if share.MilliCards%1000 == 0 {
		cards = *resource.NewQuantity(share.MilliCards/1000, resource.DecimalSI)
	}
	c := gpu.BudgetResourceList{
		gpu.BudgetAccelerators: cards,
		gpu.BudgetResourceName(gpu.BudgetAcceleratorsPerTypePrefix + typeName): cards.DeepCopy(),
		gpu.BudgetAcceleratorMemory: share.Memory.DeepCopy(),
	}
	if instance {
		c[gpu.BudgetInstances] = *resource.NewQuantity(1, resource.DecimalSI)
	}
	return c
}

// ClaimCharged says whether a Claim in this phase holds a charge. A new
// Claim has no phase yet and is Pending.
func ClaimCharged(phase gpu.ClaimPhase) bool {
	switch phase {
	case "", gpu.ClaimPending, gpu.ClaimBound, gpu.ClaimAttached:
		return true
	}
	return false
}

// ClaimHolds says whether a Claim carries the charge of an Instance of
// typeName running on it.
func ClaimHolds(c *gpu.Claim, typeName string) bool {
	return c.Spec.Type == typeName && ClaimCharged(c.Status.Phase)
}
