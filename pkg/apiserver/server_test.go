//go:build integration

package apiserver_test

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apiserver/testserver"
	"kiln.dev/kiln/pkg/domain/ledger"
	applygpu "kiln.dev/kiln/pkg/generated/applyconfiguration/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// One server for the whole package: starting etcd and the server takes
// seconds, and every test works in a namespace or on names of its own.
var (
	server *testserver.Server
	client versioned.Interface
)

func TestMain(m *testing.M) {
	dir, err := os.MkdirTemp("", "kiln-apiserver-test-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	server, err = testserver.Start(dir, io.Discard, nil)
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting test server:", err)
		os.Exit(1)
	}
	client = versioned.NewForConfigOrDie(server.Config)
	// Admission refuses Instances and Claims of unknown types: install the
	// catalogue of artifacts/examples, which the tests' objects name.
	if err := createCatalogue(); err != nil {
		fmt.Fprintln(os.Stderr, "creating the example InstanceTypes:", err)
		os.Exit(1)
	}
	code := m.Run()
	server.Stop()
	os.RemoveAll(dir)
	os.Exit(code)
}

func createCatalogue() error {
	data, err := os.ReadFile("../../artifacts/examples/instancetypes.yaml")
	if err != nil {
		return err
	}
	decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
	for {
		var it gpuv1.InstanceType
		if err := decoder.Decode(&it); err == io.EOF {
			return nil
		} else if err != nil {
			return err
		}
		if _, err := client.GpuV1alpha1().InstanceTypes().Create(context.Background(), &it, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
}

// waitForUsed waits for the budget reconciler to bring status.used[key] to want.
func waitForUsed(t *testing.T, ns, name string, key gpuv1.BudgetResourceName, want string) {
	t.Helper()
	var got resource.Quantity
	err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		b, err := client.GpuV1alpha1().Budgets(ns).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		got = b.Status.Used[key]
		return got.Cmp(resource.MustParse(want)) == 0, nil
	})
	if err != nil {
		t.Fatalf("budget %s/%s used %s = %s, want %s", ns, name, key, got.String(), want)
	}
}

func h100(name string) *gpuv1.InstanceType {
	return &gpuv1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gpuv1.InstanceTypeSpec{
			DisplayName: "NVIDIA H100 80GB",
			Accelerator: &gpuv1.Accelerator{
				Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"),
				MaxPerInstance: 8,
				Partitions:     []gpuv1.PartitionProfile{{Name: "1g.10gb", Memory: resource.MustParse("10Gi")}},
				Exclusive:      &gpuv1.ExclusiveSharing{},
			},
			ResourcesPerCard: gpuv1.HostResources{CPU: ptr.To(resource.MustParse("16")), Memory: ptr.To(resource.MustParse("128Gi"))},
		},
	}
}

func instance(ns, name, typ string, cards int32) *gpuv1.Instance {
	return &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gpuv1.InstanceSpec{
			Type:      typ,
			Image:     "nvcr.io/nvidia/pytorch:24.05-py3",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To(cards)},
			Ports:     []gpuv1.InstancePort{{Name: "jupyter", Port: 8888}},
		},
	}
}

func claim(ns, name string) *gpuv1.Claim {
	return &gpuv1.Claim{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec:       gpuv1.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](4)},
	}
}

func budget(ns, name string) *gpuv1.Budget {
	return &gpuv1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{
			gpuv1.BudgetAccelerators: resource.MustParse("8"),
			"accelerators.h100":      resource.MustParse("4"),
		}},
	}
}

func ctx(t *testing.T) context.Context {
	c, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return c
}

func TestCRUDEveryKind(t *testing.T) {
	c := ctx(t)
	gpu := client.GpuV1alpha1()

	it, err := gpu.InstanceTypes().Create(c, h100("crud-h100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create instancetype: %v", err)
	}
	if got := it.Spec.Accelerator.Exclusive.ResourceName; got != "nvidia.com/gpu" {
		t.Errorf("exclusive.resourceName defaulted to %q, want nvidia.com/gpu", got)
	}
	if got := it.Spec.Accelerator.Partitions[0].ResourceName; got != "nvidia.com/mig-1g.10gb" {
		t.Errorf("partition resourceName defaulted to %q", got)
	}
	it.Spec.DisplayName = "H100"
	if it, err = gpu.InstanceTypes().Update(c, it, metav1.UpdateOptions{}); err != nil || it.Spec.DisplayName != "H100" {
		t.Fatalf("update instancetype: %v", err)
	}
	if _, err := gpu.InstanceTypes().Get(c, "crud-h100", metav1.GetOptions{}); err != nil {
		t.Fatalf("get instancetype: %v", err)
	}

	inst, err := gpu.Instances("crud").Create(c, instance("crud", "train", "crud-h100", 2), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create instance: %v", err)
	}
	if inst.Spec.ImagePullPolicy != "IfNotPresent" || inst.Spec.Ports[0].Protocol != "TCP" {
		t.Errorf("defaults not applied: pullPolicy %q, protocol %q", inst.Spec.ImagePullPolicy, inst.Spec.Ports[0].Protocol)
	}
	inst.Spec.Image = "python:3.12"
	if inst, err = gpu.Instances("crud").Update(c, inst, metav1.UpdateOptions{}); err != nil || inst.Spec.Image != "python:3.12" {
		t.Fatalf("update instance: %v", err)
	}

	cl, err := gpu.Claims("crud").Create(c, claim("crud", "hold"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create claim: %v", err)
	}
	cl.Spec.ExpireAfter = &metav1.Duration{Duration: time.Hour}
	if _, err = gpu.Claims("crud").Update(c, cl, metav1.UpdateOptions{}); err != nil {
		t.Fatalf("update claim: %v", err)
	}

	b, err := gpu.Budgets("crud").Create(c, budget("crud", "team"), metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create budget: %v", err)
	}
	if got := b.Status.Hard[gpuv1.BudgetAccelerators]; got.String() != "8" {
		t.Errorf("budget status.hard.accelerators = %s, want 8", got.String())
	}

	for name, del := range map[string]func() error{
		"instance":     func() error { return gpu.Instances("crud").Delete(c, "train", metav1.DeleteOptions{}) },
		"claim":        func() error { return gpu.Claims("crud").Delete(c, "hold", metav1.DeleteOptions{}) },
		"budget":       func() error { return gpu.Budgets("crud").Delete(c, "team", metav1.DeleteOptions{}) },
		"instancetype": func() error { return gpu.InstanceTypes().Delete(c, "crud-h100", metav1.DeleteOptions{}) },
	} {
		if err := del(); err != nil {
			t.Errorf("delete %s: %v", name, err)
		}
	}
	if _, err := gpu.Instances("crud").Get(c, "train", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("get after delete: want NotFound, got %v", err)
	}
}

func TestStatusAndSpecAreSeparate(t *testing.T) {
	c := ctx(t)
	insts := client.GpuV1alpha1().Instances("status")
	inst, err := insts.Create(c, instance("status", "sep", "h100", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if inst.Generation != 1 {
		t.Errorf("generation after create = %d, want 1", inst.Generation)
	}

	// A status write that also tries to change spec keeps the spec.
	inst.Status.Phase = gpuv1.InstanceReady
	inst.Status.NodeName = "gpu-node-1"
	inst.Spec.Image = "evil:latest"
	got, err := insts.UpdateStatus(c, inst, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update status: %v", err)
	}
	if got.Status.Phase != gpuv1.InstanceReady || got.Spec.Image == "evil:latest" {
		t.Errorf("status update: phase %q image %q; want Ready and the old image", got.Status.Phase, got.Spec.Image)
	}
	if got.Generation != 1 {
		t.Errorf("generation after status update = %d, want 1", got.Generation)
	}

	// A spec write that also tries to change status keeps the status.
	got.Spec.Stopped = true
	got.Status.Phase = gpuv1.InstanceFailed
	got, err = insts.Update(c, got, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update: %v", err)
	}
	if !got.Spec.Stopped || got.Status.Phase != gpuv1.InstanceReady {
		t.Errorf("spec update: stopped %v phase %q; want true and Ready", got.Spec.Stopped, got.Status.Phase)
	}
	if got.Generation != 2 {
		t.Errorf("generation after spec change = %d, want 2", got.Generation)
	}

	// A metadata-only change leaves the generation alone.
	got.Labels = map[string]string{"team": "a"}
	if got, err = insts.Update(c, got, metav1.UpdateOptions{}); err != nil || got.Generation != 2 {
		t.Errorf("label update: generation %d err %v; want 2", got.Generation, err)
	}

	// Status of a Budget keeps hard in step with spec.
	b, err := client.GpuV1alpha1().Budgets("status").Create(c, budget("status", "b"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// The budget reconciler writes this status too: retry on its conflicts.
	err = retry.RetryOnConflict(retry.DefaultRetry, func() error {
		cur, err := client.GpuV1alpha1().Budgets("status").Get(c, b.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		cur.Status.Used = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("3")}
		cur.Status.Hard = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("100")}
		b, err = client.GpuV1alpha1().Budgets("status").UpdateStatus(c, cur, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	if used, hard := b.Status.Used[gpuv1.BudgetAccelerators], b.Status.Hard[gpuv1.BudgetAccelerators]; used.String() != "3" || hard.String() != "8" {
		t.Errorf("budget status: used %s hard %s; want 3 and 8", used.String(), hard.String())
	}
}

func TestConflictIs409(t *testing.T) {
	c := ctx(t)
	insts := client.GpuV1alpha1().Instances("conflict")
	inst, err := insts.Create(c, instance("conflict", "a", "h100", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	stale := inst.DeepCopy()
	inst.Spec.Image = "one"
	if _, err := insts.Update(c, inst, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	stale.Spec.Image = "two"
	_, err = insts.Update(c, stale, metav1.UpdateOptions{})
	if !apierrors.IsConflict(err) {
		t.Fatalf("stale update: want 409 Conflict, got %v", err)
	}
	if code := err.(apierrors.APIStatus).Status().Code; code != http.StatusConflict {
		t.Errorf("code %d, want 409", code)
	}
}

func TestWatchFromResourceVersion(t *testing.T) {
	c := ctx(t)
	insts := client.GpuV1alpha1().Instances("watch")
	list, err := insts.List(c, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// Make the changes first, then watch from before them: the watch must
	// replay every one in order.
	var want []string
	for i := 0; i < 10; i++ {
		name := fmt.Sprintf("w-%d", i)
		inst, err := insts.Create(c, instance("watch", name, "h100", 1), metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		want = append(want, "ADDED "+name)
		inst.Spec.Image = "changed"
		if _, err := insts.Update(c, inst, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		want = append(want, "MODIFIED "+name)
		if i%2 == 0 {
			if err := insts.Delete(c, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
			want = append(want, "DELETED "+name)
		}
	}
	w, err := insts.Watch(c, metav1.ListOptions{ResourceVersion: list.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	var got []string
	lastRV := int64(0)
	timeout := time.After(30 * time.Second)
	for len(got) < len(want) {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("watch closed after %d events", len(got))
			}
			if ev.Type == watch.Error {
				t.Fatalf("watch error: %v", apierrors.FromObject(ev.Object))
			}
			inst := ev.Object.(*gpuv1.Instance)
			var rv int64
			fmt.Sscan(inst.ResourceVersion, &rv)
			if rv <= lastRV {
				t.Errorf("resourceVersion %d after %d: out of order", rv, lastRV)
			}
			lastRV = rv
			got = append(got, string(ev.Type)+" "+inst.Name)
		case <-timeout:
			t.Fatalf("timed out with %d of %d events: %v", len(got), len(want), got)
		}
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("events:\n got %v\nwant %v", got, want)
	}
}

func TestListPagination(t *testing.T) {
	c := ctx(t)
	claims := client.GpuV1alpha1().Claims("paging")
	for i := 0; i < 500; i++ {
		if _, err := claims.Create(c, claim("paging", fmt.Sprintf("c-%03d", i)), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]bool{}
	pages := 0
	opts := metav1.ListOptions{Limit: 60}
	for {
		page, err := claims.List(c, opts)
		if err != nil {
			t.Fatal(err)
		}
		pages++
		if len(page.Items) > 60 {
			t.Fatalf("page of %d items with limit 60", len(page.Items))
		}
		for _, cl := range page.Items {
			if seen[cl.Name] {
				t.Errorf("%s listed twice", cl.Name)
			}
			seen[cl.Name] = true
		}
		if page.Continue == "" {
			break
		}
		opts.Continue = page.Continue
	}
	if len(seen) != 500 || pages != 9 {
		t.Errorf("listed %d claims in %d pages, want 500 in 9", len(seen), pages)
	}
}

func TestFieldAndLabelSelectors(t *testing.T) {
	c := ctx(t)
	gpu := client.GpuV1alpha1()
	ns := "selectors"
	mk := func(name, typ, node, claimName string, phase gpuv1.InstancePhase, statusNode string, labels map[string]string) {
		inst := instance(ns, name, typ, 1)
		inst.Labels = labels
		inst.Spec.NodeName, inst.Spec.ClaimName = node, claimName
		// ClaimAttach lets an Instance name a Claim that is not there yet,
		// or does not fit it, only while it is stopped.
		inst.Spec.Stopped = claimName != ""
		inst, err := gpu.Instances(ns).Create(c, inst, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inst.Status.Phase, inst.Status.NodeName = phase, statusNode
		if _, err := gpu.Instances(ns).UpdateStatus(c, inst, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gpu.InstanceTypes().Create(c, h100("selectors-h100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mk("a", "h100", "node-1", "", gpuv1.InstanceReady, "node-1", map[string]string{"team": "vision"})
	mk("b", "l4", "", "hold-1", gpuv1.InstancePending, "", map[string]string{"team": "nlp"})
	mk("c", "h100", "", "", gpuv1.InstanceReady, "node-2", nil)

	cl := claim(ns, "hold-1")
	cl, err := gpu.Claims(ns).Create(c, cl, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cl.Status.Phase, cl.Status.NodeName = gpuv1.ClaimBound, "node-1"
	if _, err := gpu.Claims(ns).UpdateStatus(c, cl, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gpu.Claims(ns).Create(c, &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "mig", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "selectors-h100", Partition: "1g.10gb"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	it, err := gpu.InstanceTypes().Get(c, "selectors-h100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	it.Status.Phase = gpuv1.InstanceTypeDraining
	if _, err := gpu.InstanceTypes().UpdateStatus(c, it, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	// Each lister returns the names it got, comma-separated, in list order.
	instances := func(field, label string) func() (string, error) {
		return func() (string, error) {
			l, err := gpu.Instances(ns).List(c, metav1.ListOptions{FieldSelector: field, LabelSelector: label})
			return itemNames(l, err)
		}
	}
	claims := func(field string) func() (string, error) {
		return func() (string, error) {
			l, err := gpu.Claims(ns).List(c, metav1.ListOptions{FieldSelector: field})
			return itemNames(l, err)
		}
	}
	for _, tc := range []struct {
		name string
		list func() (string, error)
		want string
	}{
		{"instances spec.type", instances("spec.type=h100", ""), "a,c"},
		{"instances spec.nodeName", instances("spec.nodeName=node-1", ""), "a"},
		{"instances spec.claimName", instances("spec.claimName=hold-1", ""), "b"},
		{"instances status.phase", instances("status.phase=Ready", ""), "a,c"},
		{"instances status.nodeName", instances("status.nodeName=node-2", ""), "c"},
		{"instances negated", instances("spec.type!=h100", ""), "b"},
		{"instances label", instances("", "team=nlp"), "b"},
		{"instances label and field", instances("status.phase=Ready", "team"), "a"},
		{"claims spec.type", claims("spec.type=selectors-h100"), "mig"},
		{"claims status.phase", claims("status.phase=Bound"), "hold-1"},
		{"claims status.nodeName", claims("status.nodeName=node-1"), "hold-1"},
		{"instancetypes status.phase", func() (string, error) {
			l, err := gpu.InstanceTypes().List(c, metav1.ListOptions{FieldSelector: "status.phase=Draining"})
			return itemNames(l, err)
		}, "selectors-h100"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := tc.list()
			if err != nil {
				t.Fatal(err)
			}
			if got != tc.want {
				t.Errorf("got %q, want %q", got, tc.want)
			}
		})
	}

	// A watch with a field selector sees only matching objects.
	l4, err := gpu.Instances(ns).List(c, metav1.ListOptions{FieldSelector: "spec.type=l4"})
	if err != nil {
		t.Fatal(err)
	}
	w, err := gpu.Instances(ns).Watch(c, metav1.ListOptions{FieldSelector: "spec.type=l4", ResourceVersion: l4.ResourceVersion})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	mk("d", "h100", "", "", gpuv1.InstancePending, "", nil)
	mk("e", "l4", "", "", gpuv1.InstancePending, "", nil)
	select {
	case ev := <-w.ResultChan():
		if inst := ev.Object.(*gpuv1.Instance); inst.Name != "e" {
			t.Errorf("watch with spec.type=l4 delivered %s", inst.Name)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("watch with field selector delivered nothing")
	}

	_, err = gpu.Instances(ns).List(c, metav1.ListOptions{FieldSelector: "spec.image=python"})
	if !apierrors.IsBadRequest(err) || !strings.Contains(err.Error(), `"spec.image" not supported`) {
		t.Errorf("unknown field selector: want 400 naming the field, got %v", err)
	}
	_, err = gpu.Budgets(ns).List(c, metav1.ListOptions{FieldSelector: "status.phase=Ready"})
	if !apierrors.IsBadRequest(err) {
		t.Errorf("budget field selector on status.phase: want 400, got %v", err)
	}
}

// itemNames returns the names of a list's items, comma-separated.
func itemNames(list runtime.Object, err error) (string, error) {
	if err != nil {
		return "", err
	}
	items, err := meta.ExtractList(list)
	if err != nil {
		return "", err
	}
	names := make([]string, 0, len(items))
	for _, item := range items {
		m, err := meta.Accessor(item)
		if err != nil {
			return "", err
		}
		names = append(names, m.GetName())
	}
	return strings.Join(names, ","), nil
}

func TestServerSideApply(t *testing.T) {
	c := ctx(t)
	insts := client.GpuV1alpha1().Instances("apply")
	cfg := applygpu.Instance("notebook", "apply").WithSpec(applygpu.InstanceSpec().
		WithType("h100").
		WithImage("jupyter/base-notebook").
		WithResources(applygpu.InstanceResources().WithAccelerators(1)).
		WithPorts(applygpu.InstancePort().WithName("jupyter").WithPort(8888)))

	created, err := insts.Apply(c, cfg, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("apply create: %v", err)
	}
	again, err := insts.Apply(c, cfg, metav1.ApplyOptions{FieldManager: "alice"})
	if err != nil {
		t.Fatalf("re-apply: %v", err)
	}
	if again.ResourceVersion != created.ResourceVersion || again.Generation != created.Generation {
		t.Errorf("re-apply changed the object: rv %s -> %s", created.ResourceVersion, again.ResourceVersion)
	}

	// Ports merge by name: a second manager may add one.
	ssh := applygpu.Instance("notebook", "apply").WithSpec(applygpu.InstanceSpec().
		WithPorts(applygpu.InstancePort().WithName("ssh").WithPort(22)))
	merged, err := insts.Apply(c, ssh, metav1.ApplyOptions{FieldManager: "bob"})
	if err != nil {
		t.Fatalf("bob adds a port: %v", err)
	}
	if len(merged.Spec.Ports) != 2 {
		t.Errorf("ports after bob's apply: %v, want jupyter and ssh", merged.Spec.Ports)
	}

	// A conflicting value for a field alice owns is refused.
	conflicting := applygpu.Instance("notebook", "apply").WithSpec(applygpu.InstanceSpec().WithImage("other:latest"))
	_, err = insts.Apply(c, conflicting, metav1.ApplyOptions{FieldManager: "bob"})
	if !apierrors.IsConflict(err) || !strings.Contains(err.Error(), "spec.image") {
		t.Fatalf("conflicting apply: want 409 naming spec.image, got %v", err)
	}

	// Status written through /status is not owned by the main endpoint's manager.
	got, _ := insts.Get(c, "notebook", metav1.GetOptions{})
	for _, mf := range got.ManagedFields {
		if mf.Subresource == "" && strings.Contains(mf.FieldsV1.GetRawString(), `"f:status"`) {
			t.Errorf("manager %s of the main endpoint owns status fields", mf.Manager)
		}
	}
}

func rawRequest(t *testing.T, method, path, accept, contentType, body string) (int, []byte) {
	t.Helper()
	transport, err := rest.TransportFor(server.Config)
	if err != nil {
		t.Fatal(err)
	}
	req, err := http.NewRequest(method, server.Config.Host+path, strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	if accept != "" {
		req.Header.Set("Accept", accept)
	}
	if contentType != "" {
		req.Header.Set("Content-Type", contentType)
	}
	resp, err := (&http.Client{Transport: transport}).Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	data, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, data
}

func TestTables(t *testing.T) {
	c := ctx(t)
	gpu := client.GpuV1alpha1()
	ns := "tables"
	if _, err := gpu.InstanceTypes().Create(c, h100("tables-h100"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	slice := instance(ns, "slice", "l4", 0)
	slice.Spec.Resources = gpuv1.InstanceResources{Slice: &gpuv1.SliceRequest{MemoryPercent: 25}}
	mig := instance(ns, "mig", "h100", 0)
	mig.Spec.Resources = gpuv1.InstanceResources{Partition: "1g.10gb"}
	for _, inst := range []*gpuv1.Instance{instance(ns, "whole", "h100", 2), slice, mig} {
		if _, err := gpu.Instances(ns).Create(c, inst, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := gpu.Claims(ns).Create(c, claim(ns, "hold"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := gpu.Budgets(ns).Create(c, budget(ns, "team"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The budget reconciler charges what was there before the Budget:
	// 2 cards, a 25% slice, a 1g.10gb partition (one of 7 compute slices,
	// more than its 10Gi of 80Gi), a 4-card Claim.
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "6393m")

	const asTable = "application/json;as=Table;v=v1;g=meta.k8s.io"
	for _, tc := range []struct {
		path    string
		columns string
		cells   map[string]string // row name -> cells of the first columns joined by "|"
	}{
		{"/apis/gpu.kiln.dev/v1alpha1/namespaces/tables/instances",
			"Name,Type,Accelerators,Phase,Node,Age,Ports,IP,Reason,Idle",
			map[string]string{"whole": "whole|h100|2", "slice": "slice|l4|25%", "mig": "mig|h100|1g.10gb"}},
		{"/apis/gpu.kiln.dev/v1alpha1/instancetypes/tables-h100",
			"Name,Model,Memory,Free,Phase,Age",
			map[string]string{"tables-h100": "tables-h100|NVIDIA-H100-80GB-HBM3|80Gi|0/0"}},
		{"/apis/gpu.kiln.dev/v1alpha1/namespaces/tables/claims",
			"Name,Type,Accelerators,Phase,Node,Attached-To,Reason,Age",
			map[string]string{"hold": "hold|h100|4"}},
		{"/apis/gpu.kiln.dev/v1alpha1/namespaces/tables/budgets",
			"Name,Accelerators,Memory,Card-Hours,Age",
			map[string]string{"team": "team|6.393/8|<none>"}},
	} {
		t.Run(tc.path, func(t *testing.T) {
			code, body := rawRequest(t, "GET", tc.path, asTable, "", "")
			if code != http.StatusOK {
				t.Fatalf("status %d: %s", code, body)
			}
			var table metav1.Table
			if err := json.Unmarshal(body, &table); err != nil {
				t.Fatal(err)
			}
			var cols []string
			for _, col := range table.ColumnDefinitions {
				cols = append(cols, col.Name)
			}
			if got := strings.Join(cols, ","); got != tc.columns {
				t.Errorf("columns %q, want %q", got, tc.columns)
			}
			if len(table.Rows) != len(tc.cells) {
				t.Fatalf("%d rows, want %d", len(table.Rows), len(tc.cells))
			}
			for _, row := range table.Rows {
				if len(row.Cells) != len(cols) {
					t.Errorf("row with %d cells for %d columns", len(row.Cells), len(cols))
				}
				name := fmt.Sprint(row.Cells[0])
				want, ok := tc.cells[name]
				if !ok {
					t.Errorf("unexpected row %q", name)
					continue
				}
				n := len(strings.Split(want, "|"))
				var got []string
				for _, cell := range row.Cells[:n] {
					got = append(got, fmt.Sprint(cell))
				}
				if strings.Join(got, "|") != want {
					t.Errorf("row %s = %q, want %q", name, strings.Join(got, "|"), want)
				}
			}
		})
	}
}

func TestDiscovery(t *testing.T) {
	dc := discovery.NewDiscoveryClientForConfigOrDie(server.Config)
	list, err := dc.ServerResourcesForGroupVersion("gpu.kiln.dev/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]metav1.APIResource{}
	for _, r := range list.APIResources {
		byName[r.Name] = r
	}
	for _, want := range []struct {
		name, kind, short string
		namespaced        bool
	}{
		{"instances", "Instance", "inst", true},
		{"instancetypes", "InstanceType", "it", false},
		{"claims", "Claim", "", true},
		{"budgets", "Budget", "", true},
		{"nodedevices", "NodeDevices", "nd", false},
	} {
		r, ok := byName[want.name]
		if !ok {
			t.Errorf("%s not discovered", want.name)
			continue
		}
		if r.Kind != want.kind || r.Namespaced != want.namespaced {
			t.Errorf("%s: kind %s namespaced %v", want.name, r.Kind, r.Namespaced)
		}
		if want.short != "" && strings.Join(r.ShortNames, ",") != want.short {
			t.Errorf("%s: short names %v, want %s", want.name, r.ShortNames, want.short)
		}
		if strings.Join(r.Categories, ",") != "gpu" {
			t.Errorf("%s: categories %v, want gpu", want.name, r.Categories)
		}
		if _, ok := byName[want.name+"/status"]; !ok {
			t.Errorf("%s/status not discovered", want.name)
		}
	}
}

func TestOpenAPIV3(t *testing.T) {
	code, body := rawRequest(t, "GET", "/openapi/v3/apis/gpu.kiln.dev/v1alpha1", "application/json", "", "")
	if code != http.StatusOK {
		t.Fatalf("status %d: %s", code, body)
	}
	var doc struct {
		Components struct {
			Schemas map[string]struct {
				Description string                     `json:"description"`
				Properties  map[string]json.RawMessage `json:"properties"`
				GVK         []map[string]string        `json:"x-kubernetes-group-version-kind"`
			} `json:"schemas"`
		} `json:"components"`
	}
	if err := json.Unmarshal(body, &doc); err != nil {
		t.Fatal(err)
	}
	for _, kind := range []string{"Instance", "InstanceType", "Claim", "Budget"} {
		s, ok := doc.Components.Schemas["dev.kiln.gpu.v1alpha1."+kind]
		if !ok {
			t.Errorf("no schema dev.kiln.gpu.v1alpha1.%s", kind)
			continue
		}
		if len(s.GVK) != 1 || s.GVK[0]["group"] != "gpu.kiln.dev" || s.GVK[0]["kind"] != kind || s.GVK[0]["version"] != "v1alpha1" {
			t.Errorf("%s: x-kubernetes-group-version-kind = %v", kind, s.GVK)
		}
		if s.Description == "" || s.Properties["spec"] == nil {
			t.Errorf("%s: description %q, spec present %v", kind, s.Description, s.Properties["spec"] != nil)
		}
	}
	res, ok := doc.Components.Schemas["dev.kiln.gpu.v1alpha1.InstanceResources"]
	if !ok || !strings.Contains(string(res.Properties["accelerators"]), "number of whole cards") {
		t.Errorf("InstanceResources.accelerators has no description: %s", res.Properties["accelerators"])
	}

	code, body = rawRequest(t, "GET", "/openapi/v2", "application/json", "", "")
	if code != http.StatusOK || !strings.Contains(string(body), "dev.kiln.gpu.v1alpha1.Instance") {
		t.Errorf("openapi v2: status %d, has Instance: %v", code, strings.Contains(string(body), "dev.kiln.gpu.v1alpha1.Instance"))
	}
}

func TestInvalidObjectIs422WithFieldPath(t *testing.T) {
	c := ctx(t)
	inst := instance("invalid", "bad", "h100", 1)
	inst.Spec.Resources.Slice = &gpuv1.SliceRequest{MemoryPercent: 150}
	inst.Spec.Ports = append(inst.Spec.Ports, gpuv1.InstancePort{Name: "jupyter", Port: 70000})
	_, err := client.GpuV1alpha1().Instances("invalid").Create(c, inst, metav1.CreateOptions{})
	if !apierrors.IsInvalid(err) {
		t.Fatalf("want 422 Invalid, got %v", err)
	}
	status := err.(apierrors.APIStatus).Status()
	if status.Code != http.StatusUnprocessableEntity {
		t.Errorf("code %d, want 422", status.Code)
	}
	fields := map[string]bool{}
	for _, cause := range status.Details.Causes {
		fields[cause.Field] = true
	}
	for _, f := range []string{"spec.resources.slice.memoryPercent", "spec.ports[1].name", "spec.ports[1].port"} {
		if !fields[f] {
			t.Errorf("no cause at %s; causes: %v", f, status.Details.Causes)
		}
	}
	if !strings.Contains(status.Message, `Instance.gpu.kiln.dev "bad" is invalid`) {
		t.Errorf("message does not name the object: %s", status.Message)
	}

	// spec.type cannot change.
	ok := instance("invalid", "good", "h100", 1)
	created, err := client.GpuV1alpha1().Instances("invalid").Create(c, ok, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	created.Spec.Type = "l4"
	_, err = client.GpuV1alpha1().Instances("invalid").Update(c, created, metav1.UpdateOptions{})
	if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), "spec.type") {
		t.Errorf("changing spec.type: want 422 at spec.type, got %v", err)
	}
}

func TestMalformedInputIs4xx(t *testing.T) {
	base := "/apis/gpu.kiln.dev/v1alpha1/namespaces/malformed/instances"
	for _, tc := range []struct {
		name, method, path, contentType, body string
	}{
		{"truncated json", "POST", base, "application/json", `{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"Instance","metadata":{"name":"x"`},
		{"not json", "POST", base, "application/json", `this is not json`},
		{"wrong type", "POST", base, "application/json", `{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"Instance","metadata":{"name":"x"},"spec":{"resources":{"accelerators":"many"}}}`},
		{"bad quantity", "POST", base, "application/json", `{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"Instance","metadata":{"name":"x"},"spec":{"type":"h100","image":"i","resources":{"accelerators":1,"cpu":"lots"}}}`},
		{"wrong kind", "POST", base, "application/json", `{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"Budget","metadata":{"name":"x"}}`},
		{"bad merge patch", "PATCH", base + "/x", "application/merge-patch+json", `{{`},
		{"bad json patch", "PATCH", base + "/x", "application/json-patch+json", `[{"op":"explode"}]`},
		{"bad apply", "PATCH", base + "/x?fieldManager=m", "application/apply-patch+yaml", "spec: [unclosed"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, body := rawRequest(t, tc.method, tc.path, "application/json", tc.contentType, tc.body)
			if code < 400 || code >= 500 {
				t.Errorf("status %d, want 4xx: %s", code, body)
			}
			var status metav1.Status
			if err := json.Unmarshal(body, &status); err != nil || status.Message == "" {
				t.Errorf("no Status with a message in the answer: %s", body)
			}
		})
	}
	// Nothing was stored by any of them.
	list, err := client.GpuV1alpha1().Instances("malformed").List(context.Background(), metav1.ListOptions{})
	if err != nil || len(list.Items) != 0 {
		t.Errorf("after malformed requests: %d instances stored, err %v", len(list.Items), err)
	}
}

func TestHealthAndMetrics(t *testing.T) {
	for path, want := range map[string]string{
		"/readyz?verbose": "[+]poststarthook/storage-readiness ok",
		"/livez?verbose":  "[+]etcd ok",
		"/readyz":         "ok",
		"/metrics":        `apiserver_request_total{`,
	} {
		code, body := rawRequest(t, "GET", path, "", "", "")
		if code != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("%s: status %d, contains %q: %v", path, code, want, strings.Contains(string(body), want))
		}
	}
	// The watch cache serves lists of Instances.
	_, body := rawRequest(t, "GET", "/metrics", "", "", "")
	if !strings.Contains(string(body), `apiserver_watch_cache_initializations_total{group="gpu.kiln.dev",resource="instances"}`) {
		t.Error("no watch cache for instances in /metrics")
	}
	// Each Budget's limits, and its use once the Budget loop counted it.
	if _, err := client.GpuV1alpha1().Budgets("metrics").Create(ctx(t), budget("metrics", "team"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	const hard, used = `kiln_budget_hard{budget="team",namespace="metrics",resource="accelerators.h100"} 4`, `kiln_budget_used{budget="team",namespace="metrics",resource="accelerators"} 0`
	err := wait.PollUntilContextTimeout(ctx(t), 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		_, body = rawRequest(t, "GET", "/metrics", "", "", "")
		return strings.Contains(string(body), hard) && strings.Contains(string(body), used), nil
	})
	if err != nil {
		t.Errorf("no %q and %q in /metrics", hard, used)
	}
}

// TestExamplesAreValid creates every Kiln object of artifacts/examples, so
// the examples in the README and the repository never rot.
func TestExamplesAreValid(t *testing.T) {
	files, err := filepath.Glob("../../artifacts/examples/*.yaml")
	if err != nil || len(files) == 0 {
		t.Fatalf("no examples found: %v", err)
	}
	type example struct {
		file string
		obj  unstructured.Unstructured
	}
	var types, others []example
	for _, file := range files {
		data, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(bytes.NewReader(data), 4096)
		for {
			var obj unstructured.Unstructured
			if err := decoder.Decode(&obj.Object); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: %v", file, err)
			}
			// The core objects the Instances mount (a Secret, a claim) are
			// no Kiln kind; test/e2e creates them on a real cluster.
			if obj.Object == nil || obj.GetAPIVersion() == "v1" {
				continue
			}
			if obj.GetKind() == "InstanceType" {
				types = append(types, example{filepath.Base(file), obj})
			} else {
				others = append(others, example{filepath.Base(file), obj})
			}
		}
	}
	dyn := dynamic.NewForConfigOrDie(server.Config)
	kinds := map[string]string{"InstanceType": "instancetypes", "Instance": "instances", "Claim": "claims", "Budget": "budgets"}
	// The standalone server has the cluster-scoped names to itself: the
	// examples' types are created under names of their own first, and the
	// Instances and Claims that name them are pointed at those.
	renamed := map[string]string{}
	created := 0
	for _, e := range append(types, others...) {
		obj := e.obj
		resource, ok := kinds[obj.GetKind()]
		if !ok {
			t.Fatalf("%s: unexpected kind %q", e.file, obj.GetKind())
		}
		if resource == "instancetypes" {
			renamed[obj.GetName()] = "examples-" + obj.GetName()
			obj.SetName(renamed[obj.GetName()])
		}
		if typ, _, _ := unstructured.NestedString(obj.Object, "spec", "type"); renamed[typ] != "" {
			if err := unstructured.SetNestedField(obj.Object, renamed[typ], "spec", "type"); err != nil {
				t.Fatal(err)
			}
		}
		gvr := gpuv1.SchemeGroupVersion.WithResource(resource)
		var client dynamic.ResourceInterface = dyn.Resource(gvr)
		if ns := obj.GetNamespace(); ns != "" {
			client = dyn.Resource(gvr).Namespace(ns)
		}
		if _, err := client.Create(context.Background(), &obj, metav1.CreateOptions{FieldValidation: "Strict"}); err != nil {
			t.Errorf("%s: %s %s: %v", e.file, obj.GetKind(), obj.GetName(), err)
		}
		created++
	}
	if created < 10 {
		t.Errorf("created %d example objects, want every one of at least 10", created)
	}
}

// TestLedgerFoldsDeleted: a deleted Instance whose only finalizer left is
// the ledger's goes once the Budget loop has folded its card-hours into
// the namespace's Budget, and at once where no Budget keeps them.
func TestLedgerFoldsDeleted(t *testing.T) {
	c := ctx(t)
	gpu := client.GpuV1alpha1()
	hours := &gpuv1.Budget{ObjectMeta: metav1.ObjectMeta{Name: "hours", Namespace: "ledger"},
		Spec: gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{gpuv1.BudgetAcceleratorHours: resource.MustParse("10")}}}
	if _, err := gpu.Budgets("ledger").Create(c, hours, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Half a card-hour today, as kiln-controller would have closed it.
	now := time.Now().UTC()
	start := time.Date(now.Year(), now.Month(), now.Day(), 0, 0, 0, 0, time.UTC)
	for _, ns := range []string{"ledger", "no-budget"} {
		inst := instance(ns, "done", "h100", 1)
		inst.Spec.Stopped = true
		inst.Finalizers = []string{gpuv1.LedgerFinalizer}
		created, err := gpu.Instances(ns).Create(c, inst, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		created.Status.Usage = &gpuv1.Usage{LastPodUID: "pod", Days: ledger.Run{Type: "h100", Cards: resource.MustParse("1"),
			Start: start, End: start.Add(30 * time.Minute)}.Days()}
		if _, err := gpu.Instances(ns).UpdateStatus(c, created, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := gpu.Instances(ns).Delete(c, "done", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := wait.PollUntilContextTimeout(c, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := gpu.Instances(ns).Get(ctx, "done", metav1.GetOptions{})
			return apierrors.IsNotFound(err), nil
		}); err != nil {
			t.Fatalf("instance %s/done still stored: its ledger's finalizer was not taken off", ns)
		}
	}
	b, err := gpu.Budgets("ledger").Get(c, "hours", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := b.Status.Consumed[gpuv1.BudgetAcceleratorHours]; got.Cmp(resource.MustParse("0.5")) != 0 || len(b.Status.Folded) != 1 {
		t.Errorf("consumed %s, folded %+v; want the deleted Instance's half card-hour", got.String(), b.Status.Folded)
	}
}
