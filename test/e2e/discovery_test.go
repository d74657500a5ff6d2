package e2e

import (
	"path/filepath"
	"strings"
	"testing"
)

func TestAPIServiceAvailable(t *testing.T) {
	t.Parallel()
	out := mustKubectl(t, admin(), "", "get", "apiservice", "v1alpha1.gpu.kiln.dev",
		"-o", `jsonpath={.status.conditions[?(@.type=="Available")].status}`)
	if out != "True" {
		t.Fatalf("APIService Available = %q, want True", out)
	}
}

// TestAPIResources reads kubectl's own table, column by column.
func TestAPIResources(t *testing.T) {
	t.Parallel()
	out := mustKubectl(t, tenant(tenantA), "", "api-resources", "--api-group=gpu.kiln.dev", "-o", "wide")
	rows := parseTable(t, out)
	want := map[string]map[string]string{
		"instances":     {"SHORTNAMES": "inst", "KIND": "Instance", "NAMESPACED": "true", "CATEGORIES": "gpu"},
		"instancetypes": {"SHORTNAMES": "it", "KIND": "InstanceType", "NAMESPACED": "false", "CATEGORIES": "gpu"},
		"claims":        {"SHORTNAMES": "", "KIND": "Claim", "NAMESPACED": "true", "CATEGORIES": "gpu"},
		"budgets":       {"SHORTNAMES": "", "KIND": "Budget", "NAMESPACED": "true", "CATEGORIES": "gpu"},
		"nodedevices":   {"SHORTNAMES": "nd", "KIND": "NodeDevices", "NAMESPACED": "false", "CATEGORIES": "gpu"},
	}
	if len(rows) != len(want) {
		t.Errorf("api-resources listed %d resources, want %d:\n%s", len(rows), len(want), out)
	}
	for _, row := range rows {
		w, ok := want[row["NAME"]]
		if !ok {
			t.Errorf("unexpected resource %q", row["NAME"])
			continue
		}
		if row["APIVERSION"] != "gpu.kiln.dev/v1alpha1" {
			t.Errorf("%s: APIVERSION %q", row["NAME"], row["APIVERSION"])
		}
		for col, v := range w {
			if row[col] != v {
				t.Errorf("%s: %s = %q, want %q", row["NAME"], col, row[col], v)
			}
		}
	}
}

func TestExplain(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		args []string
		want []string
	}{{
		// OpenAPI v3, kubectl's default.
		args: []string{"explain", "instances.spec.resources"},
		want: []string{"KIND:       Instance", "GROUP:      gpu.kiln.dev", "FIELD: resources", "accelerators", "partition", "slice"},
	}, {
		args: []string{"explain", "instances", "--output=plaintext-openapiv2"},
		want: []string{"KIND:     Instance", "VERSION:  gpu.kiln.dev/v1alpha1", "spec", "status"},
	}, {
		args: []string{"explain", "instancetypes.spec.accelerator.partitions", "--recursive"},
		want: []string{"name", "memory", "resourceName"},
	}} {
		out := mustKubectl(t, tenant(tenantA), "", tc.args...)
		for _, w := range tc.want {
			if !strings.Contains(out, w) {
				t.Errorf("kubectl %s: output lacks %q:\n%s", strings.Join(tc.args, " "), w, out)
			}
		}
		// Field docs, not just names: every explain prints a description.
		if !strings.Contains(out, "DESCRIPTION:") {
			t.Errorf("kubectl %s printed no description:\n%s", strings.Join(tc.args, " "), out)
		}
	}
}

// TestDeployManifestsDryRun is the README's deploy step, checked by the
// server: every object of the kustomization is valid for this cluster.
func TestDeployManifestsDryRun(t *testing.T) {
	t.Parallel()
	out := mustKubectl(t, admin(), "", "apply", "--dry-run=server", "-k", filepath.Join(repoRoot, "artifacts"))
	for _, w := range []string{"deployment.apps/kiln-apiserver", "statefulset.apps/kiln-etcd", "daemonset.apps/kiln-node-agent", "apiservice.apiregistration.k8s.io/v1alpha1.gpu.kiln.dev", "clusterrole.rbac.authorization.k8s.io/kiln:aggregate-to-edit", "flowschema.flowcontrol.apiserver.k8s.io/kiln-tenants"} {
		if !strings.Contains(out, w) {
			t.Errorf("dry run did not mention %s:\n%s", w, out)
		}
	}
}

// parseTable splits kubectl's column-aligned output using the header's
// column positions, so empty cells stay empty.
func parseTable(t *testing.T, out string) []map[string]string {
	t.Helper()
	lines := strings.Split(strings.TrimRight(out, "\n"), "\n")
	if len(lines) == 0 {
		t.Fatal("empty table")
	}
	header := lines[0]
	type col struct {
		name       string
		start, end int
	}
	var cols []col
	for i := 0; i < len(header); {
		for i < len(header) && header[i] == ' ' {
			i++
		}
		start := i
		for i < len(header) && header[i] != ' ' {
			i++
		}
		if start < i {
			cols = append(cols, col{name: header[start:i], start: start})
		}
	}
	for i := range cols {
		cols[i].end = -1
		if i+1 < len(cols) {
			cols[i].end = cols[i+1].start
		}
	}
	var rows []map[string]string
	for _, line := range lines[1:] {
		row := map[string]string{}
		for _, c := range cols {
			if c.start >= len(line) {
				row[c.name] = ""
				continue
			}
			end := c.end
			if end < 0 || end > len(line) {
				end = len(line)
			}
			row[c.name] = strings.TrimSpace(line[c.start:end])
		}
		rows = append(rows, row)
	}
	return rows
}
