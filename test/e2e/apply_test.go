package e2e

import (
	"slices"
	"strings"
	"testing"
)

// TestServerSideApply is a tenant's GitOps loop: apply, re-apply without
// change, and a second manager that tries to take a field it does not own.
func TestServerSideApply(t *testing.T) {
	t.Parallel()
	kc := tenant(tenantA)
	manifest := instance("ssa-demo", tenantA, "h100", "nvcr.io/nvidia/pytorch:24.05-py3")
	t.Cleanup(func() { kubectl(kc, "", "delete", "instance", "ssa-demo", "-n", tenantA, "--ignore-not-found") })
	rv := func() string {
		return mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "-o", "jsonpath={.metadata.resourceVersion}")
	}

	out := mustKubectl(t, kc, manifest, "apply", "--server-side", "-f", "-")
	if !strings.Contains(out, "instance.gpu.kiln.dev/ssa-demo serverside-applied") {
		t.Errorf("first apply: %s", out)
	}
	// The controller adds its finalizer and writes status; once the
	// Instance is Ready it has nothing more to write.
	mustKubectl(t, kc, "", "wait", "--for=condition=Ready", "instance/ssa-demo", "-n", tenantA, "--timeout=90s")
	first := rv()
	managers := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "--show-managed-fields", "-o", "jsonpath={.metadata.managedFields[*].manager}")
	if !slices.Contains(strings.Fields(managers), "kubectl") {
		t.Errorf("field managers after apply = %q, want kubectl among them", managers)
	}

	mustKubectl(t, kc, manifest, "apply", "--server-side", "-f", "-")
	if again := rv(); again != first {
		t.Errorf("re-applying the same manifest changed resourceVersion %s -> %s", first, again)
	}

	other := strings.Replace(manifest, "pytorch:24.05-py3", "pytorch:25.01-py3", 1)
	_, err := kubectl(kc, other, "apply", "--server-side", "--field-manager=ci-bot", "-f", "-")
	if err == nil {
		t.Fatal("a second manager's conflicting apply succeeded")
	}
	for _, w := range []string{"conflict", `"kubectl"`, ".spec.image"} {
		if !strings.Contains(err.Error(), w) {
			t.Errorf("conflict error lacks %q: %v", w, err)
		}
	}
	if after := rv(); after != first {
		t.Errorf("the refused apply changed resourceVersion %s -> %s", first, after)
	}
	image := mustKubectl(t, kc, "", "get", "instance", "ssa-demo", "-n", tenantA, "-o", "jsonpath={.spec.image}")
	if image != "nvcr.io/nvidia/pytorch:24.05-py3" {
		t.Errorf("spec.image = %q after the refused apply", image)
	}
}
