package instancesizing

import (
	"context"
	"errors"
	"net/http"
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/diff"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

func q(s string) *resource.Quantity { return ptr.To(resource.MustParse(s)) }

func instanceType(name string, acc *v1alpha1.Accelerator, perCard v1alpha1.HostResources) *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec:       v1alpha1.InstanceTypeSpec{Accelerator: acc, ResourcesPerCard: perCard},
	}
}

func h100Accelerator() *v1alpha1.Accelerator {
	return &v1alpha1.Accelerator{
		Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
		Exclusive: &v1alpha1.ExclusiveSharing{}, Sliced: &v1alpha1.SlicedSharing{},
		Partitions: []v1alpha1.PartitionProfile{{Name: "1g.10gb", Memory: resource.MustParse("10Gi")}},
	}
}

// The types the lister knows.
func listedTypes() []runtime.Object {
	return []runtime.Object{
		instanceType("h100", h100Accelerator(),
			v1alpha1.HostResources{CPU: q("16"), Memory: q("128Gi"), EphemeralStorage: q("200Gi")}),
		// Per-card values that do not divide evenly, to see the rounding.
		instanceType("a10", &v1alpha1.Accelerator{Vendor: "nvidia", Model: "NVIDIA-A10", Memory: resource.MustParse("24Gi"), MaxPerInstance: 1, Sliced: &v1alpha1.SlicedSharing{}},
			v1alpha1.HostResources{CPU: q("7"), Memory: q("1Gi"), EphemeralStorage: q("10G")}),
		// Says nothing about cpu or ephemeral storage.
		instanceType("l4", &v1alpha1.Accelerator{Vendor: "nvidia", Model: "NVIDIA-L4", Memory: resource.MustParse("24Gi"), MaxPerInstance: 1, Exclusive: &v1alpha1.ExclusiveSharing{}},
			v1alpha1.HostResources{Memory: q("64Gi")}),
		instanceType("cpu-small", nil, v1alpha1.HostResources{CPU: q("2"), Memory: q("8Gi")}),
	}
}

// newPlugin returns the plugin with a synced lister of listedTypes and a
// client that also has "fresh", a type the lister has not seen yet.
func newPlugin(t *testing.T) *Plugin {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	factory := informers.NewSharedInformerFactory(fake.NewSimpleClientset(listedTypes()...), 0)
	fresh := instanceType("fresh", h100Accelerator(), v1alpha1.HostResources{CPU: q("8"), Memory: q("64Gi")})
	client := fake.NewSimpleClientset(append(listedTypes(), fresh)...)

	p := New()
	p.SetKilnInformerFactory(factory)
	p.SetKilnClient(client)
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	factory.Start(ctx.Done())
	for typ, ok := range factory.WaitForCacheSync(ctx.Done()) {
		if !ok {
			t.Fatalf("%v did not sync", typ)
		}
	}
	return p
}

func TestValidateInitialization(t *testing.T) {
	if err := New().ValidateInitialization(); err == nil || err.Error() != "InstanceSizing needs the InstanceType lister and a Kiln client" {
		t.Errorf("error %v", err)
	}
}

// instance is a running one-card h100 Instance with its workspace set, so
// that cases show only what they are about.
func instance(mutate ...func(*gpu.Instance)) *gpu.Instance {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"},
		Spec: gpu.InstanceSpec{
			Type:      "h100",
			Image:     "nvcr.io/nvidia/pytorch:24.05-py3",
			Resources: gpu.InstanceResources{Accelerators: ptr.To(int32(1))},
			Workspace: &gpu.Workspace{MountPath: "/workspace", EmptyDirSize: q("100Gi")},
		},
	}
	for _, m := range mutate {
		m(inst)
	}
	return inst
}

func cards(n int32) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators = ptr.To(n) }
}

// host sets cpu, memory and ephemeralStorage; "" leaves one empty.
func host(cpu, memory, storage string) func(*gpu.Instance) {
	opt := func(s string) *resource.Quantity {
		if s == "" {
			return nil
		}
		return q(s)
	}
	return func(i *gpu.Instance) {
		i.Spec.Resources.CPU, i.Spec.Resources.Memory, i.Spec.Resources.EphemeralStorage = opt(cpu), opt(memory), opt(storage)
	}
}

// sized sets the annotation; "" removes it.
func sized(fields string) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		if fields == "" {
			delete(i.Annotations, gpu.SizedResourcesAnnotation)
			return
		}
		if i.Annotations == nil {
			i.Annotations = map[string]string{}
		}
		i.Annotations[gpu.SizedResourcesAnnotation] = fields
	}
}

func slice(percent int32) func(*gpu.Instance) {
	return func(i *gpu.Instance) {
		i.Spec.Resources.Accelerators, i.Spec.Resources.Slice = nil, &gpu.SliceRequest{MemoryPercent: percent, CoresPercent: percent}
	}
}

func partition(profile string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Resources.Accelerators, i.Spec.Resources.Partition = nil, profile }
}

func noAccelerators(i *gpu.Instance) { i.Spec.Resources.Accelerators = nil }

func typeName(name string) func(*gpu.Instance) {
	return func(i *gpu.Instance) { i.Spec.Type = name }
}

func stopped(i *gpu.Instance) { i.Spec.Stopped = true }

func attributes(obj runtime.Object, old runtime.Object, resourceName, subresource string) admission.Attributes {
	op, opts := admission.Create, runtime.Object(&metav1.CreateOptions{})
	if old != nil {
		op, opts = admission.Update, &metav1.UpdateOptions{}
	}
	return admission.NewAttributesRecord(obj, old, v1alpha1.SchemeGroupVersion.WithKind("Instance"), "team-a", "train",
		v1alpha1.SchemeGroupVersion.WithResource(resourceName), subresource, op, opts, false, &user.DefaultInfo{Name: "tenant-a"})
}

// hostText renders the sized fields as the API would print them, which
// apiequality does not compare ("16" and "16000m" are equal to it).
func hostText(i *gpu.Instance) string {
	s := func(q *resource.Quantity) string {
		if q == nil {
			return "<nil>"
		}
		return q.String()
	}
	r := i.Spec.Resources
	return "cpu=" + s(r.CPU) + " memory=" + s(r.Memory) + " ephemeralStorage=" + s(r.EphemeralStorage) +
		" sized=" + i.Annotations[gpu.SizedResourcesAnnotation]
}

func TestAdmit(t *testing.T) {
	const allSized = "cpu,memory,ephemeralStorage"
	cases := []struct {
		name        string
		old         *gpu.Instance // nil for a create
		obj         *gpu.Instance
		subresource string
		// stored is what a start or stop reads.
		stored *gpu.Instance
		// want is the object after admission; nil when it must be unchanged.
		want     *gpu.Instance
		wantCode int32
		wantErr  string
	}{
		// Filling in from the share.
		{name: "one card fills all three",
			obj:  instance(),
			want: instance(host("16", "128Gi", "200Gi"), sized(allSized))},
		{name: "eight cards",
			obj:  instance(cards(8)),
			want: instance(cards(8), host("128", "1Ti", "1600Gi"), sized(allSized))},
		{name: "25% slice",
			obj:  instance(slice(25)),
			want: instance(slice(25), host("4", "32Gi", "50Gi"), sized(allSized))},
		{name: "partition of an eighth of the card",
			obj:  instance(partition("1g.10gb")),
			want: instance(partition("1g.10gb"), host("2", "16Gi", "25Gi"), sized(allSized))},
		// 33% of 7 cores is 2310m, of 1Gi 337.92Mi, of 10G 3147.2Mi.
		{name: "cpu rounds up to 100m, memory and storage to a mebibyte",
			obj:  instance(typeName("a10"), slice(33)),
			want: instance(typeName("a10"), slice(33), host("2400m", "338Mi", "3148Mi"), sized(allSized))},
		{name: "CPU-only type gives its resourcesPerCard to one Instance",
			obj:  instance(typeName("cpu-small"), noAccelerators),
			want: instance(typeName("cpu-small"), noAccelerators, host("2", "8Gi", ""), sized("cpu,memory"))},
		{name: "type without a per-card value leaves that field alone",
			obj:  instance(typeName("l4"), host("64", "", "500Gi")),
			want: instance(typeName("l4"), host("64", "64Gi", "500Gi"), sized("memory"))},
		{name: "live client finds a type the lister has not seen",
			obj:  instance(typeName("fresh"), cards(2)),
			want: instance(typeName("fresh"), cards(2), host("16", "128Gi", ""), sized("cpu,memory"))},

		// Values the user set.
		{name: "user value within the bound is kept",
			obj:  instance(host("8", "", "")),
			want: instance(host("8", "128Gi", "200Gi"), sized("memory,ephemeralStorage"))},
		{name: "user value at the bound is kept",
			obj:  instance(host("16", "128Gi", "200Gi")),
			want: instance(host("16", "128Gi", "200Gi"))},
		{name: "a sized annotation on a create does not make user values resizable",
			obj:  instance(host("12", "", ""), sized("cpu")),
			want: instance(host("12", "128Gi", "200Gi"), sized("memory,ephemeralStorage"))},
		{name: "cpu above the bound",
			obj:      instance(host("20", "", "")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.cpu: Invalid value: "20": must be at most 16: instancetype "h100" gives 16 per card and this Instance holds 1 card; ask for less, or leave it empty to get 16`},
		{name: "memory and storage above the bound of a slice",
			obj: instance(slice(25),
				host("", "64Gi", "1Ti")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr: `Instance.gpu.kiln.dev "train" is invalid: [` +
				`spec.resources.memory: Invalid value: "64Gi": must be at most 32Gi: instancetype "h100" gives 128Gi per card and this Instance holds 0.25 of a card; ask for less, or leave it empty to get 32Gi, ` +
				`spec.resources.ephemeralStorage: Invalid value: "1Ti": must be at most 50Gi: instancetype "h100" gives 200Gi per card and this Instance holds 0.25 of a card; ask for less, or leave it empty to get 50Gi]`},
		{name: "cpu above the bound of a partition",
			obj:      instance(partition("1g.10gb"), host("4", "", "")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.cpu: Invalid value: "4": must be at most 2: instancetype "h100" gives 16 per card and this Instance holds 0.125 of a card; ask for less, or leave it empty to get 2`},
		{name: "memory above the bound of a CPU-only type",
			obj:      instance(typeName("cpu-small"), noAccelerators, host("", "16Gi", "")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.memory: Invalid value: "16Gi": must be at most 8Gi: instancetype "cpu-small" gives 8Gi per card and this Instance holds one CPU-only Instance; ask for less, or leave it empty to get 8Gi`},

		// Nothing to size from.
		{name: "GPU type and no request: left to InstanceTypeAccess",
			obj: instance(noAccelerators)},
		{name: "unknown partition profile: left to InstanceTypeAccess",
			obj: instance(partition("7g.80gb"))},
		{name: "missing type: left to InstanceTypeAccess",
			obj: instance(typeName("nonesuch"))},

		// Updates.
		{name: "more cards: sized fields follow the share",
			old:  instance(host("16", "128Gi", "200Gi"), sized(allSized)),
			obj:  instance(cards(2), host("16", "128Gi", "200Gi"), sized(allSized)),
			want: instance(cards(2), host("32", "256Gi", "400Gi"), sized(allSized))},
		{name: "more cards: a user-set field is kept",
			old:  instance(host("8", "128Gi", "200Gi"), sized("memory,ephemeralStorage")),
			obj:  instance(cards(2), host("8", "128Gi", "200Gi"), sized("memory,ephemeralStorage")),
			want: instance(cards(2), host("8", "256Gi", "400Gi"), sized("memory,ephemeralStorage"))},
		{name: "fewer cards: a sized field the user changes in the same update is theirs",
			old:  instance(cards(2), host("32", "256Gi", "400Gi"), sized(allSized)),
			obj:  instance(host("32", "100Gi", "400Gi"), sized(allSized)),
			want: instance(host("16", "100Gi", "200Gi"), sized("cpu,ephemeralStorage"))},
		{name: "fewer cards: a user-set field above the new bound",
			old:      instance(cards(2), host("24", "256Gi", "400Gi"), sized("memory,ephemeralStorage")),
			obj:      instance(host("24", "256Gi", "400Gi"), sized("memory,ephemeralStorage")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.cpu: Invalid value: "24": must be at most 16: instancetype "h100" gives 16 per card and this Instance holds 1 card; ask for less, or leave it empty to get 16`},
		{name: "a field the user empties is sized",
			old:  instance(host("8", "128Gi", "200Gi"), sized("memory,ephemeralStorage")),
			obj:  instance(host("", "128Gi", "200Gi"), sized("memory,ephemeralStorage")),
			want: instance(host("16", "128Gi", "200Gi"), sized(allSized))},
		{name: "a user value raised above the bound",
			old:      instance(host("16", "128Gi", "200Gi"), sized(allSized)),
			obj:      instance(host("17", "128Gi", "200Gi"), sized(allSized)),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.cpu: Invalid value: "17": must be at most 16: instancetype "h100" gives 16 per card and this Instance holds 1 card; ask for less, or leave it empty to get 16`},
		// The stored values are from before the type was given 16 cores a
		// card; an update that does not change the request keeps them.
		{name: "an update that changes nothing relevant is not touched",
			old: instance(host("10", "128Gi", "200Gi"), sized(allSized)),
			obj: instance(host("10", "128Gi", "200Gi"), sized(allSized), func(i *gpu.Instance) {
				i.Spec.Image = "nvcr.io/nvidia/pytorch:24.06-py3"
				i.Labels = map[string]string{"team": "vision"}
			})},
		{name: "a stop is not touched",
			old: instance(host("10", "128Gi", "200Gi"), sized(allSized)),
			obj: instance(host("10", "128Gi", "200Gi"), sized(allSized), stopped)},
		{name: "a start sizes again",
			old:  instance(host("10", "128Gi", "200Gi"), sized(allSized), stopped),
			obj:  instance(host("10", "128Gi", "200Gi"), sized(allSized)),
			want: instance(host("16", "128Gi", "200Gi"), sized(allSized))},
		{name: "a start checks user values against the type as it is now",
			old:      instance(host("20", "128Gi", "200Gi"), sized("memory,ephemeralStorage"), stopped),
			obj:      instance(host("20", "128Gi", "200Gi"), sized("memory,ephemeralStorage")),
			wantCode: http.StatusUnprocessableEntity,
			wantErr:  `Instance.gpu.kiln.dev "train" is invalid: spec.resources.cpu: Invalid value: "20": must be at most 16: instancetype "h100" gives 16 per card and this Instance holds 1 card; ask for less, or leave it empty to get 16`},
		{name: "status subresource is ignored",
			old:         instance(),
			obj:         instance(cards(4), func(i *gpu.Instance) { i.Spec.Workspace = nil }),
			subresource: "status"},
		// The posted body of instances/start is replaced by the stored
		// Instance, started, and sized as in "a start sizes again".
		{name: "instances/start sizes the stored Instance, started",
			stored:      instance(host("10", "128Gi", "200Gi"), sized(allSized), stopped),
			obj:         &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"posted": "ignored"}}},
			subresource: "start",
			want:        instance(host("16", "128Gi", "200Gi"), sized(allSized))},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			p := newPlugin(t)
			if tc.stored != nil {
				p.getInstance = func(context.Context, string, string) (*gpu.Instance, error) { return tc.stored.DeepCopy(), nil }
			}
			want := tc.want
			if want == nil {
				want = tc.obj.DeepCopy()
			}
			var old runtime.Object
			if tc.old != nil {
				old = tc.old
			}
			err := p.Admit(context.Background(), attributes(tc.obj, old, "instances", tc.subresource), nil)
			if tc.wantErr != "" {
				checkError(t, err, tc.wantCode, tc.wantErr)
				return
			}
			if err != nil {
				t.Fatalf("unexpected error: %v", err)
			}
			if got, w := hostText(tc.obj), hostText(want); got != w {
				t.Errorf("got  %s\nwant %s", got, w)
			}
			if !apiequality.Semantic.DeepEqual(tc.obj, want) {
				t.Errorf("object after admission (-want +got):\n%s", diff.Diff(want, tc.obj))
			}
		})
	}
}

func TestAdmitOtherObjects(t *testing.T) {
	p := newPlugin(t)
	claim := &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "team-a"}, Spec: gpu.ClaimSpec{Type: "h100", Accelerators: ptr.To(int32(1))}}

	if err := p.Admit(context.Background(), attributes(claim.DeepCopy(), nil, "claims", ""), nil); err != nil {
		t.Errorf("a Claim: %v", err)
	}
	checkError(t, p.Admit(context.Background(), attributes(claim.DeepCopy(), nil, "instances", ""), nil),
		http.StatusBadRequest, "instances: unexpected object *gpu.Claim")
}

func TestCardsText(t *testing.T) {
	for milli, want := range map[int64]string{1000: "1", 8000: "8", 250: "0.25", 125: "0.125", 117: "0.117", 330: "0.33", 1500: "1.5"} {
		if got := cardsText(milli); got != want {
			t.Errorf("cardsText(%d) = %q, want %q", milli, got, want)
		}
	}
}

func checkError(t *testing.T, err error, code int32, msg string) {
	t.Helper()
	if err == nil {
		t.Fatalf("admitted, want %d %s", code, msg)
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		t.Fatalf("not an API error: %v", err)
	}
	if got := status.Status().Code; got != code {
		t.Errorf("code %d, want %d", got, code)
	}
	if got := err.Error(); got != msg {
		t.Errorf("message\n got %s\nwant %s", got, msg)
	}
}
