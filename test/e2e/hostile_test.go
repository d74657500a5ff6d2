package e2e

import (
	"strings"
	"testing"
)

// TestRunawayQuantities: a quantity such as 1e2020020020 parses at once,
// and comparing it with another would hold one of Kiln's CPUs for hours.
// Every way a tenant can send one, through the aggregator, gets a 422 that
// names the field, at once; and the server goes on serving.
func TestRunawayQuantities(t *testing.T) {
	t.Parallel()
	ns := "e2e-runaway"
	createNamespace(t, ns)
	bindEdit(t, ns)
	tenantA := tenant(tenantA)

	runaway := "1e2020020020"
	withCPU := func(name, cpu string) string {
		return strings.Replace(cpuInstance(name, ns, "cpu"), "    accelerators: 0\n", "    accelerators: 0\n    cpu: \""+cpu+"\"\n", 1)
	}
	for _, tc := range []struct {
		name, manifest, field string
	}{
		{"create with a runaway cpu", withCPU("runaway-cpu", runaway), "spec.resources.cpu"},
		{"create with a runaway workspace", cpuInstance("runaway-ws", ns, "cpu") + "  workspace:\n    size: \"0e2147483647\"\n", "spec.workspace.size"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kubectl(tenantA, tc.manifest, "create", "-f", "-")
			if err == nil || !strings.Contains(err.Error(), "is invalid") || !strings.Contains(err.Error(), tc.field) {
				t.Fatalf("got %v, want a 422 naming %s", err, tc.field)
			}
		})
	}

	mustKubectl(t, tenantA, withCPU("ok", "2"), "create", "-f", "-")
	for _, patch := range []struct{ kind, body string }{
		{"merge", `{"spec":{"resources":{"cpu":"` + runaway + `"}}}`},
		{"json", `[{"op":"replace","path":"/spec/resources/cpu","value":"` + runaway + `"}]`},
		{"strategic", `{"spec":{"resources":{"memory":"` + runaway + `"}}}`},
	} {
		_, err := kubectl(tenantA, "", "patch", "instance", "ok", "-n", ns, "--type="+patch.kind, "-p", patch.body)
		if err == nil || !strings.Contains(err.Error(), "is invalid") || !strings.Contains(err.Error(), "spec.resources.") {
			t.Errorf("%s patch: got %v, want a 422 naming spec.resources", patch.kind, err)
		}
	}
	applied := withCPU("ok", runaway)
	if _, err := kubectl(tenantA, applied, "apply", "--server-side", "-f", "-"); err == nil || !strings.Contains(err.Error(), "spec.resources.cpu") {
		t.Errorf("server-side apply: got %v, want a 422 naming spec.resources.cpu", err)
	}

	// Nothing changed, and the server answers.
	if got := mustKubectl(t, tenantA, "", "get", "instance", "ok", "-n", ns, "-o", "jsonpath={.spec.resources.cpu}"); got != "2" {
		t.Errorf("cpu after the refused writes is %q, want 2", got)
	}

	// A Budget is the admin's, and is held to the same bound.
	_, err := kubectl(admin(), "apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: runaway, namespace: "+ns+"}\nspec: {hard: {instances: \""+runaway+"\"}}\n", "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "spec.hard[instances]") {
		t.Errorf("Budget: got %v, want a 422 naming spec.hard[instances]", err)
	}
}
