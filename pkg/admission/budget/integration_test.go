//go:build integration

package budget_test

import (
	"context"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	budgetplugin "kiln.dev/kiln/pkg/admission/budget"
	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apiserver/testserver"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// These tests run the real server in-process, on a real embedded etcd, with
// the whole admission chain.

var client versioned.Interface

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kiln-budget-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err := testserver.Start(dir, logOut(), nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test server:", err)
		os.Exit(1)
	}
	client = versioned.NewForConfigOrDie(server.Config)
	for _, it := range []*gpuv1.InstanceType{
		{
			ObjectMeta: metav1.ObjectMeta{Name: "h100"},
			Spec: gpuv1.InstanceTypeSpec{
				Accelerator: &gpuv1.Accelerator{
					Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"),
					MaxPerInstance: 8, Exclusive: &gpuv1.ExclusiveSharing{},
					Partitions: []gpuv1.PartitionProfile{{Name: "3g.40gb", Memory: resource.MustParse("40Gi")}},
				},
				ResourcesPerCard: gpuv1.HostResources{CPU: ptr.To(resource.MustParse("24"))},
			},
		},
	} {
		if _, err := client.GpuV1alpha1().InstanceTypes().Create(context.Background(), it, metav1.CreateOptions{}); err != nil {
			fmt.Fprintln(os.Stderr, err)
			os.Exit(1)
		}
	}
	code := m.Run()
	server.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	t.Cleanup(cancel)
	return c
}

func instance(ns, name, typ string, cards int32) *gpuv1.Instance {
	return &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gpuv1.InstanceSpec{
			Type: typ, Image: "busybox:1",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To(cards)},
		},
	}
}

func createBudget(t *testing.T, ns, name string, hard gpuv1.BudgetResourceList) {
	t.Helper()
	b := &gpuv1.Budget{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns}, Spec: gpuv1.BudgetSpec{Hard: hard}}
	if _, err := client.GpuV1alpha1().Budgets(ns).Create(ctx(t), b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func budget(t *testing.T, ns, name string) *gpuv1.Budget {
	t.Helper()
	b, err := client.GpuV1alpha1().Budgets(ns).Get(ctx(t), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func used(b *gpuv1.Budget, key gpuv1.BudgetResourceName) string {
	q := b.Status.Used[key]
	return q.String()
}

// waitSettled waits until the reconciler has nothing pending and used
// equals want, and fails with what it saw otherwise.
func waitSettled(t *testing.T, ns, name string, key gpuv1.BudgetResourceName, want string, within time.Duration) {
	t.Helper()
	var b *gpuv1.Budget
	err := wait.PollUntilContextTimeout(ctx(t), 50*time.Millisecond, within, true, func(ctx context.Context) (bool, error) {
		var err error
		b, err = client.GpuV1alpha1().Budgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		q := b.Status.Used[key]
		return len(b.Status.Pending) == 0 && q.Cmp(resource.MustParse(want)) == 0, nil
	})
	if err != nil {
		t.Fatalf("budget %s/%s: used %s = %s with %d pending, want %s with none pending", ns, name, key, used(b, key), len(b.Status.Pending), want)
	}
}

// TestContendedCreates: 50 concurrent creates of one-card Instances against
// a Budget of 8 cards, ten times over. Exactly 8 get in each time, and the
// refusals say why.
func TestContendedCreates(t *testing.T) {
	for round := range 10 {
		ns := fmt.Sprintf("contention-%d", round)
		createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("8")})
		var admitted atomic.Int32
		var wg sync.WaitGroup
		errs := make(chan error, 50)
		for i := range 50 {
			wg.Add(1)
			go func() {
				defer wg.Done()
				_, err := client.GpuV1alpha1().Instances(ns).Create(ctx(t), instance(ns, fmt.Sprintf("i-%02d", i), "h100", 1), metav1.CreateOptions{})
				if err == nil {
					admitted.Add(1)
					return
				}
				errs <- err
			}()
		}
		wg.Wait()
		close(errs)
		if got := admitted.Load(); got != 8 {
			t.Errorf("round %d: %d of 50 creates admitted, want exactly 8", round, got)
		}
		for err := range errs {
			want := `exceeds budget "team": accelerators used 8 + requested 1 > hard 8`
			if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), want) {
				t.Errorf("round %d: refusal %v, want 403 %q", round, err, want)
			}
		}
		// Charged exactly once each, right after the creates.
		if got := used(budget(t, ns, "team"), gpuv1.BudgetAccelerators); got != "8" {
			t.Errorf("round %d: used accelerators = %s right after the creates, want 8", round, got)
		}
		list, err := client.GpuV1alpha1().Instances(ns).List(ctx(t), metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(list.Items) != 8 {
			t.Errorf("round %d: %d Instances stored, want 8", round, len(list.Items))
		}
		waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "8", 30*time.Second)
	}
}

// TestContendedMix: concurrent creates, stops, starts and deletes. After
// every write that succeeds, the stored Instances hold no more than 8 cards
// and number no more than 6, stopped ones included; every refusal is one
// the race explains; and afterwards used equals a recount of the stored Instances.
func TestContendedMix(t *testing.T) {
	t.Parallel()
	const ns, limit = "mix", 8
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{
		gpuv1.BudgetAccelerators: resource.MustParse(fmt.Sprint(limit)),
		gpuv1.BudgetInstances:    resource.MustParse("6"),
	})
	instances := client.GpuV1alpha1().Instances(ns)
	var (
		wg              sync.WaitGroup
		created, writes atomic.Int32
	)
	// checkStored reads the stored Instances (a consistent list) after a
	// write and fails on any over-commit.
	checkStored := func(after string) {
		list, err := instances.List(context.Background(), metav1.ListOptions{})
		if err != nil {
			t.Errorf("listing after %s: %v", after, err)
			return
		}
		if cards, _ := runningCards(list.Items); cards > limit || len(list.Items) > 6 {
			t.Errorf("after %s: %d cards in %d Instances stored, budget is %d cards and 6 Instances", after, cards, len(list.Items), limit)
		}
	}
	// expected says whether a refusal is one the race explains: the name
	// taken or gone, a write that lost a compare-and-swap, or the budget.
	expected := func(err error) bool {
		return apierrors.IsAlreadyExists(err) || apierrors.IsNotFound(err) || apierrors.IsConflict(err) ||
			(apierrors.IsForbidden(err) && strings.Contains(err.Error(), `exceeds budget "team"`))
	}
	for w := range 10 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for range 40 {
				name := fmt.Sprintf("m-%d", r.IntN(12))
				var op string
				var err error
				switch r.IntN(4) {
				case 0:
					op = "create of " + name
					cards := int32(1 + r.IntN(3))
					if _, err = instances.Create(context.Background(), instance(ns, name, "h100", cards), metav1.CreateOptions{}); err == nil {
						created.Add(1)
					}
				case 1, 2:
					op = "stop or start of " + name
					var cur *gpuv1.Instance
					if cur, err = instances.Get(context.Background(), name, metav1.GetOptions{}); err == nil {
						cur.Spec.Stopped = !cur.Spec.Stopped
						_, err = instances.Update(context.Background(), cur, metav1.UpdateOptions{})
					}
				case 3:
					op = "delete of " + name
					err = instances.Delete(context.Background(), name, metav1.DeleteOptions{})
				}
				switch {
				case err == nil:
					writes.Add(1)
					checkStored(op)
				case !expected(err):
					t.Errorf("%s: unexpected error %v", op, err)
				}
			}
		}()
	}
	wg.Wait()
	if created.Load() == 0 {
		t.Fatal("no create was admitted: the mix exercised nothing")
	}
	list, err := instances.List(ctx(t), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cards, n := runningCards(list.Items)
	t.Logf("%d writes, %d of them creates; %d Instances stored, %d running with %d cards", writes.Load(), created.Load(), len(list.Items), n, cards)
	// Creates that lost a name to another writer were charged, then failed
	// in storage; their charges go when they expire, within a minute.
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, fmt.Sprint(cards), time.Minute)
	waitSettled(t, ns, "team", gpuv1.BudgetInstances, fmt.Sprint(len(list.Items)), time.Minute)
}

func runningCards(items []gpuv1.Instance) (cards, n int) {
	for _, i := range items {
		if !i.Spec.Stopped {
			cards += int(*i.Spec.Resources.Accelerators)
			n++
		}
	}
	return cards, n
}

// TestStopReleasesAndStartIsCharged: stopping gives the cards back; a
// stopped Instance's start is charged again and refused when the budget
// filled meanwhile.
func TestStopReleasesAndStartIsCharged(t *testing.T) {
	t.Parallel()
	const ns = "stop-start"
	c := ctx(t)
	instances := client.GpuV1alpha1().Instances(ns)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("2")})
	for _, name := range []string{"a", "b"} {
		if _, err := instances.Create(c, instance(ns, name, "h100", 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, err := instances.Create(c, instance(ns, "c", "h100", 1), metav1.CreateOptions{})
	if want := `instances.gpu.kiln.dev "c" is forbidden: exceeds budget "team": accelerators used 2 + requested 1 > hard 2`; err == nil || err.Error() != want {
		t.Fatalf("third create: %v, want %q", err, want)
	}

	a, err := instances.Get(c, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	a.Spec.Stopped = true
	if a, err = instances.Update(c, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "1", 30*time.Second)
	if _, err := instances.Create(c, instance(ns, "c", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("create after the stop released a card: %v", err)
	}

	a.Spec.Stopped = false
	_, err = instances.Update(c, a, metav1.UpdateOptions{})
	if want := `instances.gpu.kiln.dev "a" is forbidden: exceeds budget "team": accelerators used 2 + requested 1 > hard 2`; err == nil || err.Error() != want {
		t.Fatalf("start with the budget full: %v, want %q", err, want)
	}
	if got, _ := instances.Get(c, "a", metav1.GetOptions{}); !got.Spec.Stopped {
		t.Error("the refused start was stored")
	}
}

// TestBudgetCreatedWhileInstancesRun (issue G, class 5): two cards run
// before there is any Budget; a Budget of two cards created then binds
// the very next create, ten times over, however soon after it comes.
func TestBudgetCreatedWhileInstancesRun(t *testing.T) {
	t.Parallel()
	c := ctx(t)
	for round := range 10 {
		ns := fmt.Sprintf("late-budget-%d", round)
		instances := client.GpuV1alpha1().Instances(ns)
		for _, name := range []string{"a", "b"} {
			if _, err := instances.Create(c, instance(ns, name, "h100", 1), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		createBudget(t, ns, "late", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("2")})
		_, err := instances.Create(c, instance(ns, "c", "h100", 1), metav1.CreateOptions{})
		if want := `instances.gpu.kiln.dev "c" is forbidden: exceeds budget "late": accelerators used 2 + requested 1 > hard 2`; err == nil || err.Error() != want {
			t.Fatalf("round %d: the first create after the Budget: %v, want %q", round, err, want)
		}
	}
}

// TestHeldTypeRefusesStart: Hold stops new Instances and starts, not edits.
func TestHeldTypeRefusesStart(t *testing.T) {
	t.Parallel()
	const ns = "held"
	c := ctx(t)
	types := client.GpuV1alpha1().InstanceTypes()
	it, err := types.Get(c, "h100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	held := it.DeepCopy()
	held.ObjectMeta = metav1.ObjectMeta{Name: "h100-held"}
	if held, err = types.Create(c, held, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	instances := client.GpuV1alpha1().Instances(ns)
	if _, err := instances.Create(c, instance(ns, "parked", "h100-held", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parked, err := instances.Get(c, "parked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	parked.Spec.Stopped = true
	if parked, err = instances.Update(c, parked, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	held.Spec.Hold = gpuv1.HoldNew
	if _, err := types.Update(c, held, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := func(name string) string {
		return fmt.Sprintf(`instances.gpu.kiln.dev %q is forbidden: instancetype "h100-held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`, name)
	}
	// The plugins read types from an informer: wait for it to see Hold.
	err = wait.PollUntilContextTimeout(c, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := instances.Create(ctx, instance(ns, "new", "h100-held", 1), metav1.CreateOptions{})
		return err != nil && err.Error() == want("new"), nil
	})
	if err != nil {
		t.Fatalf("a create on a held type was not refused with %q", want("new"))
	}
	parked.Spec.Stopped = false
	if _, err := instances.Update(c, parked, metav1.UpdateOptions{}); err == nil || err.Error() != want("parked") {
		t.Fatalf("start on a held type: %v, want %q", err, want("parked"))
	}
	parked.Spec.Stopped = true
	parked.Labels = map[string]string{"edited": "yes"}
	if _, err := instances.Update(c, parked, metav1.UpdateOptions{}); err != nil {
		t.Errorf("an edit of a stopped Instance of a held type was refused: %v", err)
	}
}

// TestDryRunIsNeverCharged: a dry run is checked, and never charged.
func TestDryRunIsNeverCharged(t *testing.T) {
	t.Parallel()
	const ns = "dry-run"
	c := ctx(t)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("4")})
	dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
	instances := client.GpuV1alpha1().Instances(ns)
	got, err := instances.Create(c, instance(ns, "fits", "h100", 4), dry)
	if err != nil {
		t.Fatalf("dry run that fits: %v", err)
	}
	if cpu := got.Spec.Resources.CPU; cpu == nil || cpu.String() != "96" {
		t.Errorf("dry run returned cpu %v, want the sized 96", cpu)
	}
	_, err = instances.Create(c, instance(ns, "too-big", "h100", 5), dry)
	if want := `instances.gpu.kiln.dev "too-big" is forbidden: exceeds budget "team": accelerators used 0 + requested 5 > hard 4`; err == nil || err.Error() != want {
		t.Errorf("dry run over the budget: %v, want %q", err, want)
	}
	b := budget(t, ns, "team")
	if q := b.Status.Used[gpuv1.BudgetAccelerators]; !q.IsZero() || len(b.Status.Pending) != 0 {
		t.Errorf("dry runs changed the budget: used %s, %d pending", q.String(), len(b.Status.Pending))
	}
	if l, _ := instances.List(c, metav1.ListOptions{}); len(l.Items) != 0 {
		t.Errorf("a dry run stored %d Instances", len(l.Items))
	}
}

// TestChargeWrittenInProcess: a charge goes to the registry's
// budgets/status storage in-process, not back through the server's own
// handler chain and field manager (which walked status.pending whole on
// every charge), so it leaves managedFields as they were.
func TestChargeWrittenInProcess(t *testing.T) {
	t.Parallel()
	const ns = "in-process"
	c := ctx(t)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("4")})
	if _, err := client.GpuV1alpha1().Instances(ns).Create(c, instance(ns, "one", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := budget(t, ns, "team")
	if q := b.Status.Used[gpuv1.BudgetAccelerators]; q.String() != "1" {
		t.Errorf("used accelerators = %s right after the create, want 1", q.String())
	}
	for _, m := range b.ManagedFields {
		if m.Manager == budgetplugin.FieldManager {
			t.Errorf("the charge went through the field manager: managedFields has %s (%s %s)", m.Manager, m.Operation, m.Subresource)
		}
	}
}

// TestReconcilerRepairs: charges whose write failed, or that drifted, are
// brought back to a recount of the stored objects.
func TestReconcilerRepairs(t *testing.T) {
	t.Parallel()
	const ns = "repair"
	c := ctx(t)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("8")})
	instances := client.GpuV1alpha1().Instances(ns)
	if _, err := instances.Create(c, instance(ns, "one", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// A create that is charged, then fails in storage: the name is taken.
	if _, err := instances.Create(c, instance(ns, "one", "h100", 3), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
		t.Fatalf("duplicate create: %v, want AlreadyExists", err)
	}
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "1", time.Minute)

	// A charge in flight whose object never appears, and drift of used.
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		b := budget(t, ns, "team")
		b.Status.Used[gpuv1.BudgetAccelerators] = resource.MustParse("7")
		b.Status.Pending = append(b.Status.Pending, gpuv1.BudgetCharge{
			Kind: "Instance", Name: "lost", UID: types.UID("lost-uid"), Time: metav1.Now(),
			Charge: gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("2")},
		})
		_, err := client.GpuV1alpha1().Budgets(ns).UpdateStatus(c, b, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	// Until the lost charge expires it is still counted: 1 stored + 2.
	waitFor(t, 10*time.Second, func() bool {
		b := budget(t, ns, "team")
		return used(b, gpuv1.BudgetAccelerators) == "3" && len(b.Status.Pending) == 1
	}, "the drift repaired, with the charge in flight kept")
	// Then it is dropped: within a minute of the failed write.
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "1", time.Minute)
}

func waitFor(t *testing.T, within time.Duration, cond func() bool, what string) {
	t.Helper()
	if err := wait.PollUntilContextTimeout(ctx(t), 50*time.Millisecond, within, true, func(context.Context) (bool, error) {
		return cond(), nil
	}); err != nil {
		t.Fatalf("waited %s for %s", within, what)
	}
}

// TestChargeKeys: every key is charged as docs/architecture.md says, several Budgets
// all apply, and a write one of them refuses is charged to none.
func TestChargeKeys(t *testing.T) {
	t.Parallel()
	const ns = "keys"
	c := ctx(t)
	createBudget(t, ns, "cards", gpuv1.BudgetResourceList{
		gpuv1.BudgetAccelerators:      resource.MustParse("10"),
		"accelerators.h100":           resource.MustParse("2"),
		gpuv1.BudgetAcceleratorMemory: resource.MustParse("120Gi"),
	})
	createBudget(t, ns, "count", gpuv1.BudgetResourceList{gpuv1.BudgetInstances: resource.MustParse("1")})
	instances := client.GpuV1alpha1().Instances(ns)

	part := instance(ns, "part", "h100", 0)
	part.Spec.Resources = gpuv1.InstanceResources{Partition: "3g.40gb"}
	if _, err := instances.Create(c, part, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	b := budget(t, ns, "cards")
	for key, want := range map[gpuv1.BudgetResourceName]string{
		gpuv1.BudgetAccelerators: "500m", "accelerators.h100": "500m", gpuv1.BudgetAcceleratorMemory: "40Gi",
	} {
		if got := used(b, key); got != want {
			t.Errorf("after a 40Gi partition of an 80Gi card, used %s = %s, want %s", key, got, want)
		}
	}

	// "count" refuses a second Instance; "cards", charged first, gives it back.
	_, err := instances.Create(c, instance(ns, "second", "h100", 1), metav1.CreateOptions{})
	if want := `instances.gpu.kiln.dev "second" is forbidden: exceeds budget "count": instances used 1 + requested 1 > hard 1`; err == nil || err.Error() != want {
		t.Fatalf("second Instance: %v, want %q", err, want)
	}
	b = budget(t, ns, "cards")
	if got := used(b, gpuv1.BudgetAccelerators); got != "500m" || len(b.Status.Pending) > 1 {
		t.Errorf("after a refused write, budget cards used %s with %d pending, want 500m and nothing new", got, len(b.Status.Pending))
	}

	// Claims charge cards and memory, not Instances.
	claim := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](2)}}
	_, err = client.GpuV1alpha1().Claims(ns).Create(c, claim, metav1.CreateOptions{})
	if want := `claims.gpu.kiln.dev "hold" is forbidden: exceeds budget "cards": accelerator-memory used 40Gi + requested 160Gi > hard 120Gi`; err == nil || err.Error() != want {
		t.Fatalf("Claim over the memory limit: %v, want %q", err, want)
	}
	claim.Spec.Accelerators = nil
	claim.Spec.Partition = "3g.40gb"
	if _, err := client.GpuV1alpha1().Claims(ns).Create(c, claim, metav1.CreateOptions{}); err != nil {
		t.Fatalf("Claim of a partition: %v", err)
	}
	waitSettled(t, ns, "cards", gpuv1.BudgetAcceleratorMemory, "80Gi", 30*time.Second)
	waitSettled(t, ns, "count", gpuv1.BudgetInstances, "1", 30*time.Second)
	if got := used(budget(t, ns, "cards"), "accelerators.h100"); got != "1" {
		t.Errorf("two half cards charged accelerators.h100 = %s, want 1", got)
	}
}

// TestInstancesOnClaims: an Instance its Claim covers is charged to the
// Claim, not again. One naming a Claim that does not exist, or one larger
// than its Claim, escapes nothing: ClaimAttach refuses it before Budget.
func TestInstancesOnClaims(t *testing.T) {
	t.Parallel()
	const ns = "on-claims"
	c := ctx(t)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("2")})
	claim := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](2)}}
	if _, err := client.GpuV1alpha1().Claims(ns).Create(c, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	instances := client.GpuV1alpha1().Instances(ns)
	on := instance(ns, "on-claim", "h100", 2)
	on.Spec.ClaimName = "hold"
	if _, err := instances.Create(c, on, metav1.CreateOptions{}); err != nil {
		t.Fatalf("an Instance on the Claim holding its cards: %v", err)
	}
	bogus := instance(ns, "bogus", "h100", 1)
	bogus.Spec.ClaimName = "no-such-claim"
	if _, err := instances.Create(c, bogus, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("an Instance naming a missing Claim: %v, want 422", err)
	}
	big := instance(ns, "big", "h100", 8)
	big.Spec.ClaimName = "hold"
	if _, err := instances.Create(c, big, metav1.CreateOptions{}); !apierrors.IsInvalid(err) {
		t.Fatalf("8 cards on a Claim of 2: %v, want 422", err)
	}
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "2", 30*time.Second)
}

// TestTakenNameIsNotCharged: a create of a name already stored is answered
// 409 without a charge. Storage finds the name taken only after admission:
// charged first, the create left a charge in status.pending with nothing
// stored, and the tenant's next create was refused for the charge's TTL
// (30 s). test/install's writers met it at every row's end.
func TestTakenNameIsNotCharged(t *testing.T) {
	t.Parallel()
	const ns = "taken"
	c := ctx(t)
	createBudget(t, ns, "team", gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("2")})
	instances := client.GpuV1alpha1().Instances(ns)
	claims := client.GpuV1alpha1().Claims(ns)
	stopped := instance(ns, "a", "h100", 1)
	stopped.Spec.Stopped = true
	if _, err := instances.Create(c, stopped, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	claim := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "c", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](1)}}
	if _, err := claims.Create(c, claim, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The plugin looks at its informers first: the recount that settles
	// the Claim's charge was woken by its informer's event, which came
	// after the Instance's.
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "1", 30*time.Second)
	for i := range 5 {
		if _, err := instances.Create(c, instance(ns, "a", "h100", 1), metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %d of Instance a, which is stored stopped: %v, want 409 AlreadyExists", i, err)
		}
		claim.ResourceVersion = ""
		if _, err := claims.Create(c, claim, metav1.CreateOptions{}); !apierrors.IsAlreadyExists(err) {
			t.Fatalf("create %d of Claim c, which is stored: %v, want 409 AlreadyExists", i, err)
		}
	}
	// The Claim holds one card of two: one more fits, at once.
	if _, err := instances.Create(c, instance(ns, "b", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatalf("a create right after the refused ones: %v (budget: %+v)", err, budget(t, ns, "team").Status)
	}
	waitSettled(t, ns, "team", gpuv1.BudgetAccelerators, "2", 30*time.Second)
}

// logOut sends the server's log to KILN_TEST_LOG when set.
func logOut() io.Writer {
	if f := os.Getenv("KILN_TEST_LOG"); f != "" {
		if w, err := os.Create(f); err == nil {
			return w
		}
	}
	return io.Discard
}
