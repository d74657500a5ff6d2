package e2e

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

// TestKubectlEveryVerb drives one Instance through every kubectl verb a
// tenant uses, as tenant-a, now that Kiln serves protobuf beside JSON:
// kubectl asks for tables and JSON, the namespace controller and garbage
// collector for protobuf, and each must get what it asked for.
func TestKubectlEveryVerb(t *testing.T) {
	t.Parallel()
	kc := tenant(tenantA)
	name := "verbs"
	ref := "instance/" + name
	ns := "-n=" + tenantA
	t.Cleanup(func() { kubectl(kc, "", "delete", ref, ns, "--ignore-not-found") })
	get := func(path string) string {
		t.Helper()
		return mustKubectl(t, kc, "", "get", ref, ns, "-o", "jsonpath="+path)
	}

	for _, step := range []struct {
		verb  string
		args  []string
		stdin string
		want  string
	}{
		{"create", []string{"create", "-f", "-"}, cpuInstance(name, tenantA, "cpu"), "instance.gpu.kiln.dev/verbs created"},
		{"get (table)", []string{"get", ref, ns}, "", "NAME"},
		{"get -o wide", []string{"get", "instances.gpu", ns, "-o", "wide"}, "", name},
		{"get -o yaml", []string{"get", ref, ns, "-o", "yaml"}, "", "kind: Instance"},
		{"describe", []string{"describe", ref, ns}, "", "Name:"},
		{"explain", []string{"explain", "instances.spec.resources"}, "", "accelerators"},
		{"label", []string{"label", ref, ns, "team=ml"}, "", "labeled"},
		{"annotate", []string{"annotate", ref, ns, "owner=alice"}, "", "annotated"},
		{"patch (merge)", []string{"patch", ref, ns, "--type=merge", "-p", `{"spec":{"image":"busybox:1.37"}}`}, "", "patched"},
		{"patch (json)", []string{"patch", ref, ns, "--type=json", "-p", `[{"op":"add","path":"/metadata/labels/tier","value":"dev"}]`}, "", "patched"},
		{"apply (client-side)", []string{"apply", "-f", "-"}, strings.Replace(cpuInstance(name, tenantA, "cpu"), "busybox:1", "busybox:1.36", 1), "configured"},
		{"apply (server-side)", []string{"apply", "--server-side", "--force-conflicts", "-f", "-"}, strings.Replace(cpuInstance(name, tenantA, "cpu"), "busybox:1", "busybox:1.35", 1), "serverside-applied"},
		{"wait", []string{"wait", "--for=condition=Ready", ref, ns, "--timeout=90s"}, "", "condition met"},
	} {
		out := mustKubectl(t, kc, step.stdin, step.args...)
		if !strings.Contains(out, step.want) {
			t.Errorf("%s: output lacks %q:\n%s", step.verb, step.want, out)
		}
	}
	if img := get("{.spec.image}"); img != "busybox:1.35" {
		t.Errorf("spec.image = %q after the applies, want busybox:1.35", img)
	}
	if l := get("{.metadata.labels.team}/{.metadata.labels.tier}/{.metadata.annotations.owner}"); l != "ml/dev/alice" {
		t.Errorf("labels and annotation = %q, want ml/dev/alice", l)
	}

	// kubectl's default patch type, a strategic merge patch, works on Kiln
	// (its types are Go structs in the server's scheme), where a CRD
	// refuses it.
	if out := mustKubectl(t, kc, "", "patch", ref, ns, "-p", `{"metadata":{"labels":{"smp":"yes"}}}`); !strings.Contains(out, "patched") {
		t.Errorf("strategic merge patch: %s", out)
	}
	if l := get("{.metadata.labels.smp}"); l != "yes" {
		t.Errorf("label smp = %q after the strategic merge patch", l)
	}

	// replace, from what get printed, and edit through $KUBE_EDITOR. Both
	// send the resourceVersion they read: a status write of the
	// controller in between is a 409, and they read again.
	retryConflict(t, "replace", func() (string, error) {
		current := mustKubectl(t, kc, "", "get", ref, ns, "-o", "yaml")
		return kubectl(kc, strings.Replace(current, "owner: alice", "owner: bob", 1), "replace", "-f", "-")
	})
	if o := get("{.metadata.annotations.owner}"); o != "bob" {
		t.Errorf("owner = %q after replace, want bob", o)
	}
	editor := filepath.Join(t.TempDir(), "editor.sh")
	if err := os.WriteFile(editor, []byte("#!/bin/sh\nsed -i 's/owner: bob/owner: carol/' \"$1\"\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	out := retryConflict(t, "edit", func() (string, error) {
		cmd := exec.Command(cluster.Kubectl, "--kubeconfig="+kc, "edit", ref, ns)
		cmd.Env = append(os.Environ(), "KUBE_EDITOR="+editor)
		b, err := cmd.CombinedOutput()
		return string(b), err
	})
	if !strings.Contains(out, "edited") {
		t.Errorf("edit: %s", out)
	}
	if o := get("{.metadata.annotations.owner}"); o != "carol" {
		t.Errorf("owner = %q after edit, want carol", o)
	}

	if out := mustKubectl(t, kc, "", "delete", ref, ns, "--timeout=90s"); !strings.Contains(out, "deleted") {
		t.Errorf("delete: %s", out)
	}
	if _, err := kubectl(kc, "", "get", ref, ns); err == nil || !strings.Contains(err.Error(), "NotFound") {
		t.Errorf("get after delete: %v", err)
	}
}

// retryConflict runs write until it does not fail on a conflict, at most
// five times, and fails the test on any other error.
func retryConflict(t *testing.T, what string, write func() (string, error)) string {
	t.Helper()
	for range 5 {
		out, err := write()
		if err == nil {
			return out
		}
		if !strings.Contains(out+err.Error(), "has been modified") && !strings.Contains(out+err.Error(), "Conflict") {
			t.Fatalf("%s: %v: %s", what, err, out)
		}
	}
	t.Fatalf("%s: still conflicting after five attempts", what)
	return ""
}
