package instancesizing

import (
	"regexp"
	"strings"
	"testing"

	inf "gopkg.in/inf.v0"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/install"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
	"kiln.dev/kiln/pkg/domain/accounting"
)

// FuzzSizeAndCharge drives sizing and accounting with arbitrary
// quantities: huge, negative, 1e308, fractional, percentages out of range.
// Sizing runs in mutating admission, before validation, so it must survive
// anything; what the Budget charges, after validation, must be exact:
// never negative, never wrapped around.
func FuzzSizeAndCharge(f *testing.F) {
	f.Add("80Gi", "10Gi", "1g.10gb", "24", "240Gi", "400Gi", "", int32(2), true, int32(0), int32(0), "")
	f.Add("24Gi", "", "", "8", "48Gi", "", "4", int32(0), false, int32(25), int32(50), "")
	f.Add("80Gi", "40Gi", "3g.40gb", "24", "240Gi", "", "", int32(0), false, int32(0), int32(0), "3g.40gb")
	f.Add("1e308", "1e307", "7g.80gb", "1e308", "8Ei", "-1", "1e308", int32(64), true, int32(0), int32(0), "")
	f.Add("8Ei", "4Ei", "1g.10gb", "0.001", "1m", "1", "0.5", int32(64), true, int32(0), int32(0), "")
	f.Add("80Gi", "10Gi", "1g.10gb", "24", "240Gi", "400Gi", "-3", int32(-1), true, int32(-50), int32(1000), "1g.10gb")
	f.Add("0.5", "0.25", "1g.10gb", "1.5", "1.5", "1.5", "", int32(2147483647), true, int32(2147483647), int32(-2147483648), "")

	scheme := runtime.NewScheme()
	install.Install(scheme)

	f.Fuzz(func(t *testing.T, cardMem, partMem, partName, perCPU, perMem, perStorage, userCPU string,
		cards int32, hasCards bool, slicePct, coresPct int32, partition string) {
		sizeAndCharge(t, scheme, cardMem, partMem, partName, perCPU, perMem, perStorage, userCPU, cards, hasCards, slicePct, coresPct, partition)
	})
}

// TestSizeAndChargeSeeds: the usual requests get past validation to the
// charge, so the fuzzer's checks of it are reached.
func TestSizeAndChargeSeeds(t *testing.T) {
	scheme := runtime.NewScheme()
	install.Install(scheme)
	for _, tc := range []struct {
		name string
		args func() bool
	}{
		{"2 of 8 cards", func() bool {
			return sizeAndCharge(t, scheme, "80Gi", "10Gi", "1g.10gb", "24", "240Gi", "400Gi", "", 2, true, 0, 0, "")
		}},
		{"a slice", func() bool {
			return sizeAndCharge(t, scheme, "24Gi", "", "", "8", "48Gi", "", "", 0, false, 25, 50, "")
		}},
		{"a partition", func() bool {
			return sizeAndCharge(t, scheme, "80Gi", "40Gi", "3g.40gb", "24", "240Gi", "", "", 0, false, 0, 0, "3g.40gb")
		}},
	} {
		if !tc.args() {
			t.Errorf("%s: refused before it was charged", tc.name)
		}
	}
}

// sizeAndCharge sizes an Instance of the request on a type of those
// quantities and checks the charge of what validation admits; it says
// whether the request got that far.
func sizeAndCharge(t *testing.T, scheme *runtime.Scheme, cardMem, partMem, partName, perCPU, perMem, perStorage, userCPU string,
	cards int32, hasCards bool, slicePct, coresPct int32, partition string) bool {
	parse := func(s string) *resource.Quantity {
		if slowToParse.MatchString(s) {
			return nil
		}
		q, err := resource.ParseQuantity(s)
		if err != nil {
			return nil // the decoder refuses it: 400 before admission
		}
		return &q
	}
	mem := parse(cardMem)
	if mem == nil {
		return false
	}
	acc := &v1alpha1.Accelerator{Vendor: "nvidia", Model: "M", Memory: *mem, MaxPerInstance: 64,
		Exclusive: &v1alpha1.ExclusiveSharing{ResourceName: "nvidia.com/gpu"},
		Sliced: &v1alpha1.SlicedSharing{Isolation: v1alpha1.SliceIsolationHAMi, ResourceName: "nvidia.com/gpu",
			MemoryPercentResourceName: "nvidia.com/gpumem-percentage", CoresResourceName: "nvidia.com/gpucores"}}
	if pm := parse(partMem); pm != nil {
		acc.Partitions = []v1alpha1.PartitionProfile{{Name: partName, Memory: *pm, ResourceName: "nvidia.com/mig-" + partName}}
	}
	typ := &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: v1alpha1.InstanceTypeSpec{
		Accelerator:      acc,
		ResourcesPerCard: v1alpha1.HostResources{CPU: parse(perCPU), Memory: parse(perMem), EphemeralStorage: parse(perStorage)},
	}}
	inst := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "i", Namespace: "ns"},
		Spec: gpu.InstanceSpec{Type: "t", Image: "busybox", ImagePullPolicy: "IfNotPresent", Resources: gpu.InstanceResources{CPU: parse(userCPU), Partition: partition}}}
	if hasCards {
		inst.Spec.Resources.Accelerators = &cards
	}
	if slicePct != 0 || coresPct != 0 {
		inst.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: slicePct, CoresPercent: coresPct}
	}

	// Before validation: no panic, and every refusal a field error
	// under spec.resources.
	sized := inst.DeepCopy()
	sizeErrs := Size(sized, nil, typ)
	checkFieldErrors(t, sizeErrs, "spec.resources.")

	var internalType gpu.InstanceType
	if err := scheme.Convert(typ, &internalType, nil); err != nil {
		t.Fatalf("converting the type: %v", err)
	}
	typeErrs := validation.ValidateInstanceType(&internalType)
	checkFieldErrors(t, typeErrs, "")
	instErrs := validation.ValidateInstance(sized)
	checkFieldErrors(t, instErrs, "")
	if len(sizeErrs) > 0 || len(typeErrs) > 0 || len(instErrs) > 0 {
		return false // refused with 422; nothing is charged
	}

	// After validation: sized values are positive and the charge exact.
	for name, v := range map[string]*resource.Quantity{"cpu": sized.Spec.Resources.CPU,
		"memory": sized.Spec.Resources.Memory, "ephemeralStorage": sized.Spec.Resources.EphemeralStorage} {
		if v != nil && v.Sign() < 0 {
			t.Errorf("sized %s is negative: %s", name, v)
		}
	}
	req := accounting.InstanceRequest(&sized.Spec)
	share, err := accounting.ShareOf(req, typ)
	if err != nil {
		return false // an unknown profile: InstanceTypeAccess refuses it
	}
	if share.MilliCards < 0 || share.MemoryMilliCards < 0 || share.Memory.Sign() < 0 {
		t.Fatalf("negative share %+v of %+v", share, req)
	}
	if req.Cards != nil {
		// Whole bytes per card, rounded up, times the cards: exact.
		perCard := new(inf.Dec).Round(mem.AsDec(), 0, inf.RoundCeil)
		want := new(inf.Dec).Mul(perCard, inf.NewDec(int64(*req.Cards), 0))
		got := share.Memory.DeepCopy()
		if got.AsDec().Cmp(want) != 0 {
			t.Fatalf("%d cards of %s hold %s, want %s", *req.Cards, mem.String(), share.Memory.String(), want)
		}
	}
	for k, v := range accounting.Charge(share, "t") {
		if v.Sign() < 0 {
			t.Fatalf("charge %s is negative: %s", k, v.String())
		}
	}
	return true
}

// slowToParse matches what resource.ParseQuantity itself takes minutes to
// parse in apimachinery v0.37 (a sub-nano value with a long negative
// exponent is rounded through a power of ten written out in full; upstream
// kubernetes#141306). That is before any of Kiln's code runs, in the
// decoder of kube-apiserver and Kiln alike, so the fuzzers leave it out.
// An exponent of ten digits or more is matched too: past int32 it wraps
// around, often to a long negative one (1e20200206020 is 1e-1274630460).
var slowToParse = regexp.MustCompile(`[eE](-0*[1-9][0-9]{5,}|\+?0*[1-9][0-9]{9,})`)

// checkFieldErrors fails unless every error names a field under prefix and
// says what is wrong.
func checkFieldErrors(t *testing.T, errs field.ErrorList, prefix string) {
	t.Helper()
	for _, e := range errs {
		if e.Field == "" || !strings.HasPrefix(e.Field, prefix) || e.Type == "" {
			t.Fatalf("error without a field under %q: %#v", prefix, e)
		}
		_ = e.Error()
	}
}
