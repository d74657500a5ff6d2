package e2e

import (
	"slices"
	"strings"
	"testing"
	"time"
)

// TestServerSideApply is a tenant's GitOps loop: apply, re-apply without
// change, and a second manager that tries to take a field it does not own.
func TestServerSideApply(t *testing.T) {
	t.Parallel()
	kc := tenant(tenantA)
	manifest := instance("ssa-demo", tenantA, "h100", "nvcr.io/nvidia/pytorch:24.05-py3")
	t.Cleanup(func() { kubectl(kc, "", "delete", "instance", "ssa-demo", "-n", tenantA, "--ignore-not-found") })
	// What a write by kubectl would change: the generation, if it
	// touched the spec, and the time on kubectl's managedFields entry,
	// which the field manager sets whenever that manager's request
	// changes the object. The resourceVersion cannot say: kiln-controller
	// keeps writing status (devices, health, activity) after Ready.
	// Kiln's two finalizers, as jsonpath prints metadata.finalizers.
	const kilnFinalizers = `["gpu.kiln.dev/instance-controller","gpu.kiln.dev/ledger"]`
	applied := func() string {
		return mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o",
			`jsonpath=generation {.metadata.generation}{range .metadata.managedFields[?(@.manager=="kubectl")]}, {.operation} at {.time}{end}`)
	}

	out := mustKubectl(t, kc, manifest, "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "instance.gpu.kiln.dev/ssa-demo serverside-applied") {
		t.Errorf("first apply: %s", out)
	}
	mustKubectl(t, kc, "", "wait", "--for=condition=Ready", "instance/ssa-demo", "-n", tenantA, "--timeout=90s")
	first := applied()
	// managedFields times are kept to the second: a write in the second
	// of the first apply would not show.
	stamp := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o",
		`jsonpath={.metadata.managedFields[?(@.manager=="kubectl")].time}`)
	at, err := time.Parse(time.RFC3339, stamp)
	if err != nil {
		t.Fatalf("kubectl's managedFields time %q: %v", stamp, err)
	}
	time.Sleep(time.Until(at.Add(time.Second)))
	managers := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
	if !slices.Contains(strings.Fields(managers), "kubectl") {
		t.Errorf("field managers after apply = %q, want kubectl among them", managers)
	}
	// KilnFinalizers set kiln-controller's finalizers in the create, after
	// the field manager: no manager owns them (the controller's update
	// would have), so no apply takes them off.
	finalizers := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o",
		`jsonpath={.metadata.finalizers}{"\n"}{.metadata.managedFields[*].fieldsV1}`)
	if f, owners, _ := strings.Cut(finalizers, "\n"); f != kilnFinalizers || strings.Contains(owners, "f:finalizers") {
		t.Errorf("finalizers %s, owned in %s; want Kiln's two, set at create and owned by no manager", f, owners)
	}

	mustKubectl(t, kc, manifest, "apply", "--server-side", "-f", "-")
	if again := applied(); again != first {
		t.Errorf("re-applying the same manifest wrote: %s -> %s", first, again)
	}
	if f := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "-o", "jsonpath={.metadata.finalizers}"); f != kilnFinalizers {
		t.Errorf("finalizers after the re-apply: %s", f)
	}

	other := strings.Replace(manifest, "pytorch:24.05-py3", "pytorch:25.01-py3", 1)
	_, err = kubectl(kc, other, "apply", "--server-side", "--field-manager=ci-bot", "-f", "-")
	if err == nil {
		t.Fatal("a second manager's conflicting apply succeeded")
	}
	for _, w := range []string{"conflict", `"kubectl"`, ".spec.image"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("conflict error lacks %q: %v", w, err)
		}
	}
	if after := applied(); after != first {
		t.Errorf("the refused apply wrote: %s -> %s", first, after)
	}
	managers = mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
	if slices.Contains(strings.Fields(managers), "ci-bot") {
		t.Errorf("field managers after the refused apply = %q, want no ci-bot", managers)
	}
	image := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "-o", "jsonpath={.spec.image}")
	if image != "nvcr.io/nvidia/pytorch:24.05-py3" {
		t.Errorf("spec.image = %q after the refused apply", image)
	}
}
