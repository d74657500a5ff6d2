package accounting

import (
	"fmt"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// h100 has 80Gi cards and MIG profiles named in decimal gigabytes, as NVIDIA
// names them, so a 10GB partition is not a whole number of milli-cards.
func h100() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.InstanceTypeSpec{Accelerator: &v1alpha1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"),
			MaxPerInstance: 8, Exclusive: &v1alpha1.ExclusiveSharing{}, Sliced: &v1alpha1.SlicedSharing{},
			Partitions: []v1alpha1.PartitionProfile{
				{Name: "3g.40gb", Memory: resource.MustParse("40Gi")},
				{Name: "1g.10gb", Memory: resource.MustParse("10G")},
			},
		}},
	}
}

func vendor(t *v1alpha1.InstanceType, v string) *v1alpha1.InstanceType {
	t.Spec.Accelerator.Vendor = v
	return t
}

func cpuOnly() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}
}

func TestShareOf(t *testing.T) {
	cases := []struct {
		name      string
		req       Request
		t         *v1alpha1.InstanceType
		wantMilli int64
		// wantMemMilli is the memory share, when it differs from wantMilli.
		wantMemMilli int64
		wantMemory   string
		wantErr      string
	}{
		{name: "one card", req: Request{Type: "h100", Cards: ptr.To(int32(1))}, t: h100(),
			wantMilli: 1000, wantMemory: "80Gi"},
		{name: "four cards", req: Request{Type: "h100", Cards: ptr.To(int32(4))}, t: h100(),
			wantMilli: 4000, wantMemory: "320Gi"},
		{name: "zero cards", req: Request{Type: "h100", Cards: ptr.To(int32(0))}, t: h100(),
			wantMilli: 0, wantMemory: "0"},
		{name: "25% slice", req: Request{Type: "h100", SlicePercent: 25}, t: h100(),
			wantMilli: 250, wantMemory: "20Gi"},
		// 33% of 80Gi is 28346784153.6 bytes: a byte is not split.
		{name: "33% slice rounds memory up to a byte", req: Request{Type: "h100", SlicePercent: 33}, t: h100(),
			wantMilli: 330, wantMemory: "28346784154"},
		{name: "100% slice", req: Request{Type: "h100", SlicePercent: 100}, t: h100(),
			wantMilli: 1000, wantMemory: "80Gi"},
		{name: "half-card partition", req: Request{Type: "h100", Partition: "3g.40gb"}, t: h100(),
			wantMilli: 500, wantMemory: "40Gi"},
		// 10e9 / 80Gi is 116.4 milli-cards of memory, but 1 of 7 compute
		// slices is 142.9: the larger, rounded up, is charged.
		{name: "small partition is charged its compute share", req: Request{Type: "h100", Partition: "1g.10gb"}, t: h100(),
			wantMilli: 143, wantMemMilli: 117, wantMemory: "10G"},
		{name: "partition of another vendor: memory alone", req: Request{Type: "h100", Partition: "1g.10gb"}, t: vendor(h100(), "amd"),
			wantMilli: 117, wantMemMilli: 117, wantMemory: "10G"},
		{name: "slice with more cores than memory is charged its cores", req: Request{Type: "h100", SlicePercent: 25, SliceCoresPercent: 60}, t: h100(),
			wantMilli: 600, wantMemMilli: 250, wantMemory: "20Gi"},
		{name: "slice with fewer cores than memory is charged its memory", req: Request{Type: "h100", SlicePercent: 50, SliceCoresPercent: 10}, t: h100(),
			wantMilli: 500, wantMemMilli: 500, wantMemory: "40Gi"},
		{name: "unknown partition profile", req: Request{Type: "h100", Partition: "2g.20gb"}, t: h100(),
			wantErr: `instancetype "h100" has no partition profile "2g.20gb"`},
		{name: "partition wins over cards", req: Request{Type: "h100", Cards: ptr.To(int32(2)), Partition: "3g.40gb"}, t: h100(),
			wantMilli: 500, wantMemory: "40Gi"},
		{name: "GPU type, nothing asked", req: Request{Type: "h100"}, t: h100(),
			wantMilli: 0, wantMemory: "0"},
		{name: "CPU-only type holds nothing", req: Request{Type: "cpu"}, t: cpuOnly(),
			wantMilli: 0, wantMemory: "0"},
		{name: "CPU-only type ignores a card request", req: Request{Type: "cpu", Cards: ptr.To(int32(2))}, t: cpuOnly(),
			wantMilli: 0, wantMemory: "0"},
		{name: "CPU-only type ignores a partition", req: Request{Type: "cpu", Partition: "1g.10gb"}, t: cpuOnly(),
			wantMilli: 0, wantMemory: "0"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			got, err := ShareOf(tc.req, tc.t)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got.MilliCards != tc.wantMilli {
				t.Errorf("milli-cards %d, want %d", got.MilliCards, tc.wantMilli)
			}
			wantMem := tc.wantMemMilli
			if wantMem == 0 {
				wantMem = tc.wantMilli
			}
			if got.MemoryMilliCards != wantMem {
				t.Errorf("memory milli-cards %d, want %d", got.MemoryMilliCards, wantMem)
			}
			if s := got.Memory.String(); s != tc.wantMemory {
				t.Errorf("memory %s, want %s", s, tc.wantMemory)
			}
		})
	}
}

// TestShareOfHugeCardsIsExact: the memory of many cards of a type stored
// before validation bounded card memory does not wrap around int64 (the
// fuzzer found 64 cards of 7E counted as about 4.8Ei).
func TestShareOfHugeCardsIsExact(t *testing.T) {
	it := h100()
	it.Spec.Accelerator.Memory = resource.MustParse("7E")
	got, err := ShareOf(Request{Type: "h100", Cards: ptr.To(int32(64))}, it)
	if err != nil {
		t.Fatal(err)
	}
	if want := resource.MustParse("448E"); got.Memory.Cmp(want) != 0 {
		t.Errorf("64 cards of 7E hold %s, want %s", got.Memory.String(), want.String())
	}
}

func TestCountedShare(t *testing.T) {
	for _, tc := range []struct {
		name         string
		req          Request
		wantMilli    int64
		wantUnpriced bool
	}{
		{name: "priced", req: Request{Type: "h100", Partition: "3g.40gb"}, wantMilli: 500},
		{name: "a profile the type dropped", req: Request{Type: "h100", Partition: "7g.80gb"}, wantMilli: 1000, wantUnpriced: true},
		{name: "a dropped profile with cards", req: Request{Type: "h100", Partition: "7g.80gb", Cards: ptr.To(int32(2))}, wantMilli: 2000, wantUnpriced: true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			share, unpriced := CountedShare(tc.req, h100())
			if share.MilliCards != tc.wantMilli || (unpriced != nil) != tc.wantUnpriced {
				t.Errorf("CountedShare = %d milli-cards, %v; want %d, unpriced %v", share.MilliCards, unpriced, tc.wantMilli, tc.wantUnpriced)
			}
		})
	}
}

// The share must not alias the type's partition memory: the Budget plugin
// sums shares and would otherwise change the cached InstanceType.
func TestShareOfCopiesPartitionMemory(t *testing.T) {
	it := h100()
	share, err := ShareOf(Request{Partition: "3g.40gb"}, it)
	if err != nil {
		t.Fatal(err)
	}
	share.Memory.Add(resource.MustParse("1Gi"))
	if s := it.Spec.Accelerator.Partitions[0].Memory.String(); s != "40Gi" {
		t.Errorf("type's partition memory became %s", s)
	}
}

func TestCharge(t *testing.T) {
	cases := []struct {
		name     string
		share    Share
		typeName string
		want     map[gpu.BudgetResourceName]string
	}{
		{name: "two cards", share: Share{MilliCards: 2000, Memory: resource.MustParse("160Gi")}, typeName: "h100",
			want: map[gpu.BudgetResourceName]string{"accelerators": "2", "accelerators.h100": "2", "accelerator-memory": "160Gi"}},
		{name: "slice is fractional", share: Share{MilliCards: 250, Memory: resource.MustParse("20Gi")}, typeName: "h100",
			want: map[gpu.BudgetResourceName]string{"accelerators": "250m", "accelerators.h100": "250m", "accelerator-memory": "20Gi"}},
		{name: "partition is fractional", share: Share{MilliCards: 143, Memory: resource.MustParse("10G")}, typeName: "h100",
			want: map[gpu.BudgetResourceName]string{"accelerators": "143m", "accelerators.h100": "143m", "accelerator-memory": "10G"}},
		{name: "more than a card, not whole", share: Share{MilliCards: 1500, Memory: resource.MustParse("120Gi")}, typeName: "a100",
			want: map[gpu.BudgetResourceName]string{"accelerators": "1500m", "accelerators.a100": "1500m", "accelerator-memory": "120Gi"}},
		{name: "CPU-only", share: Share{}, typeName: "cpu",
			want: map[gpu.BudgetResourceName]string{"accelerators": "0", "accelerators.cpu": "0", "accelerator-memory": "0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantList(t, Charge(tc.share, tc.typeName), tc.want)
		})
	}
}

func wantList(t *testing.T, got gpu.BudgetResourceList, want map[gpu.BudgetResourceName]string) {
	t.Helper()
	if len(got) != len(want) {
		t.Errorf("keys %v, want %v", got, want)
	}
	for k, w := range want {
		q, ok := got[k]
		if !ok {
			t.Errorf("no %s", k)
			continue
		}
		if s := q.String(); s != w {
			t.Errorf("%s = %s, want %s", k, s, w)
		}
	}
}

func TestInstanceCharge(t *testing.T) {
	twoPorts := &gpu.InstanceSpec{Ports: []gpu.InstancePort{{Name: "ssh", Port: 22}, {Name: "http", Port: 80}}}
	cards := Charge(Share{MilliCards: 1000, Memory: resource.MustParse("80Gi")}, "h100")
	cases := []struct {
		name  string
		spec  *gpu.InstanceSpec
		cards gpu.BudgetResourceList
		want  map[gpu.BudgetResourceName]string
	}{
		{name: "holding cards, with ports", spec: twoPorts, cards: cards,
			want: map[gpu.BudgetResourceName]string{"accelerators": "1", "accelerators.h100": "1", "accelerator-memory": "80Gi", "instances": "1", "nodeports": "2"}},
		{name: "stopped, or on a Claim: still an Instance with its ports", spec: twoPorts,
			want: map[gpu.BudgetResourceName]string{"instances": "1", "nodeports": "2"}},
		{name: "no ports", spec: &gpu.InstanceSpec{}, cards: cards,
			want: map[gpu.BudgetResourceName]string{"accelerators": "1", "accelerators.h100": "1", "accelerator-memory": "80Gi", "instances": "1", "nodeports": "0"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			wantList(t, InstanceCharge(tc.spec, tc.cards), tc.want)
		})
	}
}

func TestInstanceHolds(t *testing.T) {
	inst := func(stopped bool, phase gpu.InstancePhase, gen, observed int64, finalizers ...string) *gpu.Instance {
		i := &gpu.Instance{Spec: gpu.InstanceSpec{Stopped: stopped}, Status: gpu.InstanceStatus{Phase: phase, ObservedGeneration: observed}}
		i.Generation, i.Finalizers = gen, finalizers
		return i
	}
	cases := []struct {
		name string
		inst *gpu.Instance
		want bool
	}{
		{"running", inst(false, gpu.InstanceReady, 1, 1), true},
		{"running, never seen", inst(false, "", 1, 0), true},
		{"stopped, the controller saw no Pod left", inst(true, gpu.InstanceStopped, 3, 3), false},
		{"stopped, the Pod is going", inst(true, gpu.InstanceStopping, 3, 3), true},
		{"stopped, status not yet updated", inst(true, gpu.InstanceReady, 3, 2), true},
		{"stopped again before the controller saw the start", inst(true, gpu.InstanceStopped, 4, 2), true},
		{"stopped and failed", inst(true, gpu.InstanceFailed, 3, 3), true},
		{"being deleted", inst(true, gpu.InstanceDeleting, 3, 3, gpu.InstanceFinalizer), true},
		{"created stopped, no controller has touched it", inst(true, "", 1, 0), false},
		{"stopped with the controller's finalizer, no status yet", inst(true, "", 2, 0, gpu.InstanceFinalizer), true},
		{"deleted while running, the controller's finalizer on", deleted(inst(false, gpu.InstanceDeleting, 1, 1, gpu.InstanceFinalizer, gpu.LedgerFinalizer)), true},
		{"deleted, only the ledger's finalizer left", deleted(inst(false, gpu.InstanceDeleting, 1, 1, gpu.LedgerFinalizer)), false},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := InstanceHolds(tc.inst); got != tc.want {
				t.Errorf("InstanceHolds = %v, want %v", got, tc.want)
			}
		})
	}
}

// A whole number of cards is stored at scale 0, as a parsed "3" is, so
// that a charge and a Budget limit written by hand compare equal even with
// reflect.DeepEqual; String() alone cannot tell (3000m prints as "3").
func TestChargeWholeCardsHaveNoMilliScale(t *testing.T) {
	got := Charge(Share{MilliCards: 3000}, "h100")
	for _, k := range []gpu.BudgetResourceName{gpu.BudgetAccelerators, "accelerators.h100"} {
		if q := got[k]; !reflect.DeepEqual(q, *resource.NewQuantity(3, resource.DecimalSI)) {
			t.Errorf("%s = %#v, want a whole quantity 3", k, q)
		}
	}
}

func TestRequestEqual(t *testing.T) {
	cases := []struct {
		name string
		a, b Request
		want bool
	}{
		{name: "empty", want: true},
		{name: "same cards, distinct pointers", a: Request{Type: "h100", Cards: ptr.To(int32(2))}, b: Request{Type: "h100", Cards: ptr.To(int32(2))}, want: true},
		{name: "different card counts", a: Request{Type: "h100", Cards: ptr.To(int32(1))}, b: Request{Type: "h100", Cards: ptr.To(int32(2))}},
		{name: "nil cards and zero cards differ", a: Request{Type: "h100"}, b: Request{Type: "h100", Cards: ptr.To(int32(0))}},
		{name: "zero cards and nil cards differ", a: Request{Type: "h100", Cards: ptr.To(int32(0))}, b: Request{Type: "h100"}},
		{name: "different types", a: Request{Type: "h100", Cards: ptr.To(int32(1))}, b: Request{Type: "a100", Cards: ptr.To(int32(1))}},
		{name: "same slice", a: Request{Type: "h100", SlicePercent: 25}, b: Request{Type: "h100", SlicePercent: 25}, want: true},
		{name: "different slices", a: Request{Type: "h100", SlicePercent: 25}, b: Request{Type: "h100", SlicePercent: 50}},
		{name: "same partition", a: Request{Type: "h100", Partition: "1g.10gb"}, b: Request{Type: "h100", Partition: "1g.10gb"}, want: true},
		{name: "different partitions", a: Request{Type: "h100", Partition: "1g.10gb"}, b: Request{Type: "h100", Partition: "3g.40gb"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := tc.a.Equal(tc.b); got != tc.want {
				t.Errorf("%+v.Equal(%+v) = %v, want %v", tc.a, tc.b, got, tc.want)
			}
		})
	}
}

// The readers give the same Request for the same spec, whatever the kind,
// and a stored (v1alpha1) spec reads the same once converted, as the
// Budget reconciler converts it.
func TestRequestReaders(t *testing.T) {
	two := ptr.To(int32(2))
	storedInstance := func(in v1alpha1.InstanceSpec) Request {
		var out gpu.InstanceSpec
		if err := v1alpha1.Convert_v1alpha1_InstanceSpec_To_gpu_InstanceSpec(&in, &out, nil); err != nil {
			t.Fatal(err)
		}
		return InstanceRequest(&out)
	}
	storedClaim := func(in v1alpha1.ClaimSpec) Request {
		var out gpu.ClaimSpec
		if err := v1alpha1.Convert_v1alpha1_ClaimSpec_To_gpu_ClaimSpec(&in, &out, nil); err != nil {
			t.Fatal(err)
		}
		return ClaimRequest(&out)
	}
	cases := []struct {
		name string
		got  Request
		want Request
	}{
		{name: "internal Instance, cards",
			got:  InstanceRequest(&gpu.InstanceSpec{Type: "h100", Resources: gpu.InstanceResources{Accelerators: two}}),
			want: Request{Type: "h100", Cards: two}},
		{name: "internal Instance, slice",
			got:  InstanceRequest(&gpu.InstanceSpec{Type: "h100", Resources: gpu.InstanceResources{Slice: &gpu.SliceRequest{MemoryPercent: 25, CoresPercent: 50}}}),
			want: Request{Type: "h100", SlicePercent: 25, SliceCoresPercent: 50}},
		{name: "internal Instance, partition",
			got:  InstanceRequest(&gpu.InstanceSpec{Type: "h100", Resources: gpu.InstanceResources{Partition: "1g.10gb"}}),
			want: Request{Type: "h100", Partition: "1g.10gb"}},
		{name: "stored Instance, cards",
			got:  storedInstance(v1alpha1.InstanceSpec{Type: "h100", Resources: v1alpha1.InstanceResources{Accelerators: two}}),
			want: Request{Type: "h100", Cards: two}},
		{name: "stored Instance, slice",
			got:  storedInstance(v1alpha1.InstanceSpec{Type: "h100", Resources: v1alpha1.InstanceResources{Slice: &v1alpha1.SliceRequest{MemoryPercent: 25}}}),
			want: Request{Type: "h100", SlicePercent: 25, SliceCoresPercent: 25}},
		{name: "internal Claim, partition",
			got:  ClaimRequest(&gpu.ClaimSpec{Type: "h100", Partition: "3g.40gb"}),
			want: Request{Type: "h100", Partition: "3g.40gb"}},
		{name: "stored Claim, cards",
			got:  storedClaim(v1alpha1.ClaimSpec{Type: "h100", Accelerators: two}),
			want: Request{Type: "h100", Cards: two}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if !tc.got.Equal(tc.want) {
				t.Errorf("got %+v, want %+v", tc.got, tc.want)
			}
		})
	}
}

// deleted marks o as being deleted.
func deleted[O metav1.Object](o O) O {
	o.SetDeletionTimestamp(ptr.To(metav1.Now()))
	return o
}

func TestClaimCharged(t *testing.T) {
	cases := []struct {
		phase      gpu.ClaimPhase
		node       string
		deleting   bool
		finalizers []string
		want       bool
	}{
		{phase: "", want: true},
		{phase: gpu.ClaimPending, want: true},
		{phase: gpu.ClaimBound, node: "gpu-1", want: true},
		{phase: gpu.ClaimAttached, node: "gpu-1", want: true},
		{phase: gpu.ClaimLost, want: true},
		{phase: gpu.ClaimExpired},
		// Its holder has not been seen gone yet.
		{phase: gpu.ClaimExpired, node: "gpu-1", want: true},
		{phase: "Unknown"},
		// Being deleted: held until the claim loop lets go of it.
		{phase: gpu.ClaimBound, node: "gpu-1", deleting: true, finalizers: []string{gpu.ClaimFinalizer, gpu.LedgerFinalizer}, want: true},
		{phase: gpu.ClaimBound, node: "gpu-1", deleting: true, finalizers: []string{gpu.LedgerFinalizer}},
	}
	for _, tc := range cases {
		t.Run(fmt.Sprintf("phase %s on %q deleting %v %v", tc.phase, tc.node, tc.deleting, tc.finalizers), func(t *testing.T) {
			c := cardsClaim(1)
			c.Status.Phase, c.Status.NodeName, c.Finalizers = tc.phase, tc.node, tc.finalizers
			if tc.deleting {
				c = deleted(c)
			}
			if got := ClaimCharged(c); got != tc.want {
				t.Errorf("ClaimCharged(%+v) = %v, want %v", c.Status, got, tc.want)
			}
		})
	}
}

func cardsClaim(n int32) *gpu.Claim {
	return &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: gpu.ClaimSpec{Type: "h100", Accelerators: ptr.To(n)}}
}

func partitionClaim(profile string) *gpu.Claim {
	return &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Name: "c"}, Spec: gpu.ClaimSpec{Type: "h100", Partition: profile}}
}

func TestClaimCovers(t *testing.T) {
	cards := func(n int32) Request { return Request{Type: "h100", Cards: ptr.To(n)} }
	part := func(p string) Request { return Request{Type: "h100", Partition: p} }
	cases := []struct {
		name    string
		claim   *gpu.Claim
		req     Request
		wantErr string
	}{
		{name: "as many cards as held", claim: cardsClaim(4), req: cards(4)},
		{name: "fewer cards than held", claim: cardsClaim(4), req: cards(1)},
		{name: "the partition held", claim: partitionClaim("1g.10gb"), req: part("1g.10gb")},

		{name: "more cards than held", claim: cardsClaim(1), req: cards(2),
			wantErr: `claim "c" holds 1 accelerator; an Instance of 2 accelerators does not fit (more than the Claim holds): ask for at most 1 accelerator, use a larger Claim, or remove spec.claimName`},
		{name: "cards on a partition", claim: partitionClaim("1g.10gb"), req: cards(8),
			wantErr: `claim "c" holds 1 partition of 1g.10gb; an Instance of 8 accelerators does not fit (a partition Claim lends no whole cards): ask for spec.resources.partition: 1g.10gb, or remove spec.claimName`},
		{name: "another partition", claim: partitionClaim("1g.10gb"), req: part("3g.40gb"),
			wantErr: `claim "c" holds 1 partition of 1g.10gb; an Instance of a partition of 3g.40gb does not fit (the Claim holds another profile): ask for spec.resources.partition: 1g.10gb, or remove spec.claimName`},
		{name: "a partition on cards", claim: cardsClaim(2), req: part("1g.10gb"),
			wantErr: `claim "c" holds 2 accelerators; an Instance of a partition of 1g.10gb does not fit (a Claim of whole cards lends no partition): ask for at most 2 accelerators, or remove spec.claimName`},
		{name: "a slice on cards", claim: cardsClaim(1), req: Request{Type: "h100", SlicePercent: 25},
			wantErr: `claim "c" holds 1 accelerator; an Instance of a 25% slice does not fit (a slice cannot run on a Claim): ask for at most 1 accelerator, or remove spec.claimName`},
		{name: "a slice on a partition", claim: partitionClaim("1g.10gb"), req: Request{Type: "h100", SlicePercent: 100},
			wantErr: `claim "c" holds 1 partition of 1g.10gb; an Instance of a 100% slice does not fit (a slice cannot run on a Claim): ask for spec.resources.partition: 1g.10gb, or remove spec.claimName`},
		{name: "another type", claim: cardsClaim(8), req: Request{Type: "a100", Cards: ptr.To(int32(1))},
			wantErr: `claim "c" is of type h100; an Instance of type a100 does not fit: use a Claim of type a100, or remove spec.claimName`},
		{name: "nothing asked", claim: cardsClaim(1), req: Request{Type: "h100"},
			wantErr: `claim "c" holds 1 accelerator; an Instance of no accelerators has no use for it: remove spec.claimName`},
		{name: "zero cards asked", claim: cardsClaim(1), req: cards(0),
			wantErr: `claim "c" holds 1 accelerator; an Instance of no accelerators has no use for it: remove spec.claimName`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			err := ClaimCovers(tc.claim, tc.req)
			switch {
			case tc.wantErr == "" && err != nil:
				t.Errorf("unexpected error: %v", err)
			case tc.wantErr != "" && (err == nil || err.Error() != tc.wantErr):
				t.Errorf("error %v,\nwant %s", err, tc.wantErr)
			}
		})
	}
}

// An Instance on a Claim goes uncharged only when the Claim is charged and
// covers all of it; otherwise it is charged in full.
func TestClaimHolds(t *testing.T) {
	phased := func(c *gpu.Claim, p gpu.ClaimPhase) *gpu.Claim { c.Status.Phase = p; return c }
	onNode := func(c *gpu.Claim, n string) *gpu.Claim { c.Status.NodeName = n; return c }
	cases := []struct {
		name  string
		claim *gpu.Claim
		req   Request
		want  bool
	}{
		{name: "covered on a new Claim", claim: cardsClaim(2), req: Request{Type: "h100", Cards: ptr.To(int32(2))}, want: true},
		{name: "covered on a Lost Claim", claim: phased(cardsClaim(2), gpu.ClaimLost), req: Request{Type: "h100", Cards: ptr.To(int32(1))}, want: true},
		{name: "covered on an Expired Claim", claim: phased(cardsClaim(2), gpu.ClaimExpired), req: Request{Type: "h100", Cards: ptr.To(int32(1))}},
		{name: "covered on an Expired Claim whose holder is going", claim: onNode(phased(cardsClaim(2), gpu.ClaimExpired), "gpu-1"), req: Request{Type: "h100", Cards: ptr.To(int32(1))}},
		{name: "eight cards on one", claim: phased(cardsClaim(1), gpu.ClaimBound), req: Request{Type: "h100", Cards: ptr.To(int32(8))}},
		{name: "eight cards on a partition", claim: phased(partitionClaim("1g.10gb"), gpu.ClaimAttached), req: Request{Type: "h100", Cards: ptr.To(int32(8))}},
		{name: "the partition held", claim: phased(partitionClaim("1g.10gb"), gpu.ClaimAttached), req: Request{Type: "h100", Partition: "1g.10gb"}, want: true},
		{name: "a slice", claim: phased(cardsClaim(1), gpu.ClaimBound), req: Request{Type: "h100", SlicePercent: 50}},
		{name: "another type", claim: phased(cardsClaim(1), gpu.ClaimBound), req: Request{Type: "a100", Cards: ptr.To(int32(1))}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			if got := ClaimHolds(tc.claim, tc.req); got != tc.want {
				t.Errorf("ClaimHolds = %v, want %v", got, tc.want)
			}
		})
	}
}
