//go:build integration

package apiserver_test

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/discovery"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// post sends what `kubectl create --raw PATH -f - <<<'{}'` sends.
func post(t *testing.T, ns, name, subresource string) (int, *gpuv1.Instance, string) {
	t.Helper()
	code, body := rawRequest(t, "POST", fmt.Sprintf("/apis/gpu.kiln.dev/v1alpha1/namespaces/%s/instances/%s/%s", ns, name, subresource),
		"application/json", "application/json", "{}")
	var inst gpuv1.Instance
	if code < 300 {
		if err := json.Unmarshal(body, &inst); err != nil {
			t.Fatalf("%s of %s/%s answered %d with %s: %v", subresource, ns, name, code, body, err)
		}
		return code, &inst, ""
	}
	var status metav1.Status
	if err := json.Unmarshal(body, &status); err != nil {
		t.Fatalf("%s of %s/%s answered %d with %s: %v", subresource, ns, name, code, body, err)
	}
	return code, nil, status.Message
}

// TestStopAndStart: the subresources flip spec.stopped through the main
// strategy (generation bumped, status kept); a flip to what is already
// stored changes nothing.
func TestStopAndStart(t *testing.T) {
	const ns = "lifecycle"
	c := ctx(t)
	insts := client.GpuV1alpha1().Instances(ns)
	created, err := insts.Create(c, instance(ns, "nb", "h100", 1), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	code, stopped, msg := post(t, ns, "nb", "stop")
	if code != http.StatusCreated || stopped == nil {
		t.Fatalf("stop: %d %s, want 201 and the Instance", code, msg)
	}
	if !stopped.Spec.Stopped || stopped.Generation != 2 || stopped.Kind != "Instance" {
		t.Errorf("stop answered kind %q stopped %v generation %d, want an Instance, true, 2", stopped.Kind, stopped.Spec.Stopped, stopped.Generation)
	}
	if got, _ := insts.Get(c, "nb", metav1.GetOptions{}); !got.Spec.Stopped || got.Spec.Image != created.Spec.Image {
		t.Errorf("stored after stop: stopped %v image %q", got.Spec.Stopped, got.Spec.Image)
	}

	// Already stopped: succeeds, stores nothing.
	code, again, msg := post(t, ns, "nb", "stop")
	if code != http.StatusCreated || again.ResourceVersion != stopped.ResourceVersion || again.Generation != 2 {
		t.Errorf("second stop: %d %s, resourceVersion %v generation %v; want 201 and no write", code, msg, again.ResourceVersion, again.Generation)
	}

	started, err := insts.Start(c, "nb", &gpuv1.Instance{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("start: %v", err)
	}
	if started.Spec.Stopped || started.Generation != 3 {
		t.Errorf("start: stopped %v generation %d, want false, 3", started.Spec.Stopped, started.Generation)
	}

	// A dry run answers what would be stored and stores nothing.
	dry, err := insts.Stop(c, "nb", &gpuv1.Instance{}, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	if err != nil || !dry.Spec.Stopped {
		t.Fatalf("dry-run stop: %v, stopped %v", err, dry != nil && dry.Spec.Stopped)
	}
	if got, _ := insts.Get(c, "nb", metav1.GetOptions{}); got.Spec.Stopped || got.Generation != 3 {
		t.Errorf("a dry-run stop was stored: stopped %v generation %d", got.Spec.Stopped, got.Generation)
	}

	for _, sub := range []string{"start", "stop"} {
		code, _, msg := post(t, ns, "nonesuch", sub)
		if want := `instances.gpu.kiln.dev "nonesuch" not found`; code != http.StatusNotFound || msg != want {
			t.Errorf("%s of a missing Instance: %d %q, want 404 %q", sub, code, msg, want)
		}
	}
}

// TestStartIsSized: the mutating chain runs on the stored Instance, so a
// start is sized again for the type as it is now, as an update starting it
// would be.
func TestStartIsSized(t *testing.T) {
	const ns = "lifecycle-sizing"
	c := ctx(t)
	types := client.GpuV1alpha1().InstanceTypes()
	it, err := types.Create(c, h100("lifecycle-h100"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	insts := client.GpuV1alpha1().Instances(ns)
	if _, err := insts.Create(c, instance(ns, "nb", it.Name, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := insts.Stop(c, "nb", &gpuv1.Instance{}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	it.Spec.ResourcesPerCard.CPU = ptr.To(resource.MustParse("20"))
	if _, err := types.Update(c, it, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// Sizing reads types from an informer: wait until it sizes by 20.
	err = wait.PollUntilContextTimeout(c, 50*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		dry, err := insts.Create(ctx, instance(ns, "probe", it.Name, 1), metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		return err == nil && dry.Spec.Resources.CPU.String() == "20", nil
	})
	if err != nil {
		t.Fatal("sizing never saw the new resourcesPerCard")
	}
	started, err := insts.Start(c, "nb", &gpuv1.Instance{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cpu := started.Spec.Resources.CPU; cpu == nil || cpu.String() != "20" {
		t.Errorf("cpu after start = %v, want 20: the start was not sized", cpu)
	}
}

// TestStartIsCharged: a start is charged like an update that starts, and
// refused with the Budget's 403 when over it; a stop is not charged.
func TestStartIsCharged(t *testing.T) {
	const ns = "lifecycle-budget"
	c := ctx(t)
	b := budget(ns, "team")
	b.Spec.Hard = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1")}
	if _, err := client.GpuV1alpha1().Budgets(ns).Create(c, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	insts := client.GpuV1alpha1().Instances(ns)
	if _, err := insts.Create(c, instance(ns, "a", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parked := instance(ns, "b", "h100", 1)
	parked.Spec.Stopped = true
	parked, err := insts.Create(c, parked, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}

	code, _, msg := post(t, ns, "b", "start")
	if want := `instances.gpu.kiln.dev "b" is forbidden: exceeds budget "team": accelerators used 1 + requested 1 > hard 1`; code != http.StatusForbidden || msg != want {
		t.Fatalf("start over budget: %d %q, want 403 %q", code, msg, want)
	}
	if got, _ := insts.Get(c, "b", metav1.GetOptions{}); !got.Spec.Stopped || got.ResourceVersion != parked.ResourceVersion {
		t.Errorf("the refused start changed the Instance: stopped %v", got.Spec.Stopped)
	}

	if code, _, msg := post(t, ns, "a", "stop"); code != http.StatusCreated {
		t.Fatalf("stop: %d %s", code, msg)
	}
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "0")
	if code, _, msg := post(t, ns, "b", "start"); code != http.StatusCreated {
		t.Fatalf("start within budget: %d %s", code, msg)
	}
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "1")

	// Stopped and started again: released, then charged again.
	if code, _, msg := post(t, ns, "b", "stop"); code != http.StatusCreated {
		t.Fatalf("second stop: %d %s", code, msg)
	}
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "0")
	if code, _, msg := post(t, ns, "b", "start"); code != http.StatusCreated {
		t.Fatalf("second start: %d %s", code, msg)
	}
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "1")
	// Starting what runs raises nothing.
	if code, _, msg := post(t, ns, "b", "start"); code != http.StatusCreated {
		t.Fatalf("start of a running Instance with the budget full: %d %s, want it admitted", code, msg)
	}
}

// TestStartIgnoresTheBody: whatever is posted to instances/start, even a
// whole Instance naming the stored one's UID and resourceVersion, only
// spec.stopped changes, and the Budget is charged for what is stored.
func TestStartIgnoresTheBody(t *testing.T) {
	const ns = "lifecycle-forged"
	c := ctx(t)
	b := budget(ns, "team")
	b.Spec.Hard = gpuv1.BudgetResourceList{gpuv1.BudgetAccelerators: resource.MustParse("1")}
	if _, err := client.GpuV1alpha1().Budgets(ns).Create(c, b, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	parked := instance(ns, "parked", "h100", 1)
	parked.Spec.Stopped = true
	parked, err := client.GpuV1alpha1().Instances(ns).Create(c, parked, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	forged := parked.DeepCopy()
	forged.Labels = map[string]string{"forged": "yes"}
	forged.Spec.Stopped = false
	forged.Spec.Image = "evil:1"
	forged.Spec.Privileged = true
	forged.Spec.Resources = gpuv1.InstanceResources{Accelerators: ptr.To[int32](8)}
	body, err := json.Marshal(forged)
	if err != nil {
		t.Fatal(err)
	}
	code, answer := rawRequest(t, "POST", fmt.Sprintf("/apis/gpu.kiln.dev/v1alpha1/namespaces/%s/instances/parked/start", ns),
		"application/json", "application/json", string(body))
	if code != http.StatusCreated {
		t.Fatalf("start with a forged body: %d %s", code, answer)
	}
	got, err := client.GpuV1alpha1().Instances(ns).Get(c, "parked", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got.Spec.Stopped || got.Spec.Image != parked.Spec.Image || got.Spec.Privileged ||
		*got.Spec.Resources.Accelerators != 1 || got.Labels["forged"] != "" {
		t.Errorf("stored after the start: labels %v, stopped %v, image %q, privileged %v, accelerators %d; want only spec.stopped changed",
			got.Labels, got.Spec.Stopped, got.Spec.Image, got.Spec.Privileged, *got.Spec.Resources.Accelerators)
	}
	waitForUsed(t, ns, "team", gpuv1.BudgetAccelerators, "1")
}

// TestStartOnHeldType: a start is refused on a type on Hold, a stop is not.
func TestStartOnHeldType(t *testing.T) {
	const ns = "lifecycle-held"
	c := ctx(t)
	types := client.GpuV1alpha1().InstanceTypes()
	it, err := types.Create(c, h100("lifecycle-held"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	insts := client.GpuV1alpha1().Instances(ns)
	for _, name := range []string{"parked", "running"} {
		if _, err := insts.Create(c, instance(ns, name, it.Name, 1), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	if code, _, msg := post(t, ns, "parked", "stop"); code != http.StatusCreated {
		t.Fatalf("stop: %d %s", code, msg)
	}
	it.Spec.Hold = gpuv1.HoldNew
	if _, err := types.Update(c, it, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	want := func(name string) string {
		return fmt.Sprintf(`instances.gpu.kiln.dev %q is forbidden: instancetype "lifecycle-held" is on Hold and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type`, name)
	}
	// The plugins read types from an informer: wait for it to see Hold
	// with dry runs, which a start that slips through first would not
	// leave running (a real start would, and every later one be a no-op).
	err = wait.PollUntilContextTimeout(c, 50*time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		code, _, _ := post(t, ns, "parked", "start?dryRun=All")
		return code == http.StatusForbidden, nil
	})
	if err != nil {
		t.Fatalf("a dry-run start on a held type was never refused: %v", err)
	}
	code, _, msg := post(t, ns, "parked", "start")
	if code != http.StatusForbidden || msg != want("parked") {
		t.Fatalf("start on a held type: %d %q, want 403 %q", code, msg, want("parked"))
	}
	if code, _, msg := post(t, ns, "running", "stop"); code != http.StatusCreated {
		t.Errorf("stop on a held type: %d %s, want it admitted", code, msg)
	}
}

// TestLogInStandalone: without a cluster there are no Pods; the log
// answers 503 and says why, after the usual checks of name and options.
func TestLogInStandalone(t *testing.T) {
	const ns = "lifecycle-log"
	c := ctx(t)
	if _, err := client.GpuV1alpha1().Instances(ns).Create(c, instance(ns, "nb", "h100", 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	base := "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns + "/instances/"
	for _, tc := range []struct {
		path string
		code int
		msg  string
	}{
		{base + "nb/log?follow=true", http.StatusServiceUnavailable,
			"instance lifecycle-log/nb: logs need cluster mode; this Kiln API server is standalone and runs no Pods"},
		{base + "nonesuch/log", http.StatusNotFound, `instances.gpu.kiln.dev "nonesuch" not found`},
		{base + "nb/log?tailLines=-1", http.StatusUnprocessableEntity,
			`InstanceLogOptions.gpu.kiln.dev "nb" is invalid: tailLines: Invalid value: -1: must be 0 or more`},
		{base + "nb/log?tailLines=ten", http.StatusBadRequest, ""},
	} {
		code, body := rawRequest(t, "GET", tc.path, "", "", "")
		var status metav1.Status
		_ = json.Unmarshal(body, &status)
		if code != tc.code || (tc.msg != "" && status.Message != tc.msg) {
			t.Errorf("GET %s: %d %q, want %d %q", tc.path, code, status.Message, tc.code, tc.msg)
		}
	}
	// Through client-go, as kubectl sees it.
	_, err := client.GpuV1alpha1().RESTClient().Get().Namespace(ns).Resource("instances").Name("nb").SubResource("log").DoRaw(c)
	if !apierrors.IsServiceUnavailable(err) {
		t.Errorf("log through client-go: %v, want 503", err)
	}
}

func TestLifecycleDiscovery(t *testing.T) {
	dc := discovery.NewDiscoveryClientForConfigOrDie(server.Config)
	list, err := dc.ServerResourcesForGroupVersion("gpu.kiln.dev/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	verbs := map[string]string{}
	for _, r := range list.APIResources {
		verbs[r.Name] = strings.Join(r.Verbs, ",")
	}
	for name, want := range map[string]string{"instances/start": "create", "instances/stop": "create", "instances/log": "get"} {
		if verbs[name] != want {
			t.Errorf("%s: verbs %q, want %q", name, verbs[name], want)
		}
	}
}
