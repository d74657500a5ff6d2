//go:build integration

package apiserver_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	"k8s.io/utils/ptr"

	budgetplugin "kiln.dev/kiln/pkg/admission/budget"
	"kiln.dev/kiln/pkg/admission/claimattach"
	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/admission/instanceprivilege"
	"kiln.dev/kiln/pkg/admission/instancesizing"
	"kiln.dev/kiln/pkg/admission/instancetypeaccess"
	"kiln.dev/kiln/pkg/admission/quantitybounds"
	"kiln.dev/kiln/pkg/apis/gpu"
	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apiserver"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

// BenchmarkAdmissionChain runs Kiln's five plugins, in chain order, on a
// typical create: a one-card Instance of the example h100 type, sized,
// checked against its type and charged to a Budget. The Kiln API the
// plugins read and write is an in-memory fake here, so the figure is the
// chain's own cost; BenchmarkCreateInstance measures a whole request on
// real etcd. Besides ns/op it reports the p50 and p99 of single requests.
//
//	go test -tags=integration ./pkg/apiserver -run '^$' -bench 'BenchmarkAdmissionChain|BenchmarkCreateInstance' -benchmem
func BenchmarkAdmissionChain(b *testing.B) {
	h100Type, err := client.GpuV1alpha1().InstanceTypes().Get(context.Background(), "h100", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	bud := &gpuv1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: "bench-budget", ResourceVersion: "1"},
		Spec:       gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1G")}},
		Status:     gpuv1.BudgetStatus{Used: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("0")}},
	}
	// The simple fake: the field-managed one needs the apply schema.
	kc := fake.NewSimpleClientset(h100Type, bud)
	factory := informers.NewSharedInformerFactory(kc, 0)
	plugins := []admission.Interface{quantitybounds.New(), instancesizing.New(), instancetypeaccess.New(), instanceprivilege.New(), claimattach.New(), budgetplugin.New()}
	initializers := admission.PluginInitializers{
		genericinit.New(nil, nil, nil, authorizerfactory.NewAlwaysAllowAuthorizer(), nil, nil, nil, nil),
		// No Budget loop: the Budget is counted already (status.used has
		// the key), so a charge never recounts. Its informers would watch
		// the fake's Budgets, whose watch panics once 100 events are unread.
		kilninit.New(kc, factory, func(context.Context, string) error { return nil }, kilninit.ClientBudgetLister(kc), kilninit.ClientBudgetStatusWriter(kc, budgetplugin.FieldManager), true),
	}
	for _, p := range plugins {
		initializers.Initialize(p)
		if err := admission.ValidateInitialization(p); err != nil {
			b.Fatal(err)
		}
	}
	stop := make(chan struct{})
	defer close(stop)
	factory.Start(stop)
	factory.WaitForCacheSync(stop)
	var chain admission.Interface = admission.NewChainHandler(plugins...)
	mutate, validate := chain.(admission.MutationInterface), chain.(admission.ValidationInterface)

	for _, ns := range []string{"bench-no-budget", "bench-budget"} {
		b.Run(strings.TrimPrefix(ns, "bench-"), func(b *testing.B) {
			ctx := context.Background()
			tenant := &user.DefaultInfo{Name: "tenant-a", Groups: []string{user.AllAuthenticated}}
			var durations []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				inst := benchInstance(ns, i)
				internal := &gpu.Instance{}
				if err := apiserver.Scheme.Convert(inst, internal, nil); err != nil {
					b.Fatal(err)
				}
				internal.UID = types.UID(fmt.Sprintf("%s-%d", ns, i))
				attrs := admission.NewAttributesRecord(internal, nil, gpuv1.SchemeGroupVersion.WithKind("Instance"), ns, inst.Name,
					gpuv1.SchemeGroupVersion.WithResource("instances"), "", admission.Create, &metav1.CreateOptions{}, false, tenant)
				start := time.Now()
				if err := mutate.Admit(ctx, attrs, nil); err != nil {
					b.Fatal(err)
				}
				if err := validate.Validate(ctx, attrs, nil); err != nil {
					b.Fatal(err)
				}
				durations = append(durations, time.Since(start))
				if internal.Spec.Resources.CPU == nil {
					b.Fatal("the Instance was not sized")
				}
				if ns == "bench-budget" {
					// What the reconciler does once the Instance is stored:
					// the charge is no longer in flight.
					b.StopTimer()
					settle(ctx, b, kc, ns)
					b.StartTimer()
				}
			}
			reportPercentiles(b, durations)
		})
	}
}

// BenchmarkCreateInstance is the whole request: HTTPS to the in-process
// server, the admission chain (with its reads and, with a Budget, its
// compare-and-swap charge through the server's loopback client), and the
// write to the embedded etcd, which syncs to disk.
func BenchmarkCreateInstance(b *testing.B) {
	for _, ns := range []string{"create-no-budget", "create-budget"} {
		b.Run(strings.TrimPrefix(ns, "create-"), func(b *testing.B) {
			ctx := context.Background()
			if ns == "create-budget" {
				bud := &gpuv1.Budget{
					ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
					Spec:       gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1G")}},
					Status:     gpuv1.BudgetStatus{Used: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("0")}},
				}
				if _, err := client.GpuV1alpha1().Budgets(ns).Create(ctx, bud, metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			var durations []time.Duration
			b.ReportAllocs()
			for i := 0; b.Loop(); i++ {
				start := time.Now()
				if _, err := client.GpuV1alpha1().Instances(ns).Create(ctx, benchInstance(ns, i), metav1.CreateOptions{}); err != nil {
					b.Fatal(err)
				}
				durations = append(durations, time.Since(start))
			}
			reportPercentiles(b, durations)
		})
	}
}

func settle(ctx context.Context, b *testing.B, kc *fake.Clientset, ns string) {
	cur, err := kc.GpuV1alpha1().Budgets(ns).Get(ctx, "team", metav1.GetOptions{})
	if err != nil {
		b.Fatal(err)
	}
	if len(cur.Status.Pending) != 1 {
		b.Fatalf("%d charges pending, want the one just made", len(cur.Status.Pending))
	}
	cur.Status.Pending = nil
	if _, err := kc.GpuV1alpha1().Budgets(ns).UpdateStatus(ctx, cur, metav1.UpdateOptions{}); err != nil {
		b.Fatal(err)
	}
}

func benchInstance(ns string, i int) *gpuv1.Instance {
	return &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("i-%d", i), Namespace: ns},
		Spec: gpuv1.InstanceSpec{
			Type: "h100", Image: "nvcr.io/nvidia/pytorch:24.05-py3",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)},
			Ports:     []gpuv1.InstancePort{{Name: "jupyter", Port: 8888}},
		},
	}
}

func reportPercentiles(b *testing.B, durations []time.Duration) {
	slices.Sort(durations)
	if n := len(durations); n > 0 {
		b.ReportMetric(float64(durations[n/2].Nanoseconds()), "p50-ns")
		b.ReportMetric(float64(durations[(n*99)/100].Nanoseconds()), "p99-ns")
	}
}
