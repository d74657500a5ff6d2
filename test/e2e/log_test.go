package e2e

import (
	"bufio"
	"context"
	"os/exec"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestInstanceLog: tenant-a, bound only to Kiln's roles (no access to
// Pods at all), reads its Instance's log through instances/log, which the
// Kiln API server fetches with its own credentials; follow streams what
// the container writes next.
func TestInstanceLog(t *testing.T) {
	ns := "e2e-log"
	createNamespace(t, ns)
	cs, _ := adminClients(t)
	for _, role := range []string{"kiln:aggregate-to-view", "kiln:aggregate-to-edit"} {
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: strings.ReplaceAll(role, ":", "-"), Namespace: ns},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: role},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantA}},
		}
		if _, err := cs.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	waitCanCreateInstances(t, tenantA, ns)
	kc := tenant(tenantA)
	mustKubectl(t, kc, cpuInstance("talker", ns, "cpu"), "create", "-f", "-")
	waitInstance(t, ns, "talker", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))

	if out, _ := kubectl(kc, "", "auth", "can-i", "get", "pods/log", "-n", ns); strings.TrimSpace(out) != "no" {
		t.Fatalf("tenant-a may read pods/log in %s (%q): the test needs a tenant without Pod access", ns, out)
	}
	if _, err := kubectl(kc, "", "logs", "talker", "-n", ns); err == nil || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("kubectl logs of the Pod as tenant-a: %v, want forbidden", err)
	}

	path := "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns + "/instances/talker/log"
	if err := cluster.AppendContainerLog("epoch 1 loss 0.93"); err != nil {
		t.Fatal(err)
	}
	out := mustKubectl(t, kc, "", "get", "--raw", path)
	if !strings.Contains(out, "container started") || !strings.Contains(out, "epoch 1 loss 0.93") {
		t.Errorf("instances/log = %q, want the container's log", out)
	}
	if tail := mustKubectl(t, kc, "", "get", "--raw", path+"?tailLines=1&container=main"); strings.TrimSpace(tail) != "epoch 1 loss 0.93" {
		t.Errorf("instances/log?tailLines=1 = %q, want the last line only", tail)
	}

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	follow := exec.CommandContext(ctx, cluster.Kubectl, "--kubeconfig="+kc, "get", "--raw", path+"?follow=true")
	// Once the stream shows what was there, write more and see it arrive.
	followSeesAppended(ctx, t, follow, "epoch 1", "epoch 2 loss 0.71")
}

// followSeesAppended runs a command that follows the simulated containers'
// log until it prints a line containing seen, then appends a line
// containing later and waits, until ctx ends, for the command to print it.
func followSeesAppended(ctx context.Context, t *testing.T, follow *exec.Cmd, seen, later string) {
	t.Helper()
	stdout, err := follow.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := follow.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = follow.Process.Kill(); _ = follow.Wait() }()
	lines := make(chan string)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			case <-ctx.Done():
				return
			}
		}
	}()
	appended := false
	for {
		select {
		case line, ok := <-lines:
			if !ok {
				t.Fatalf("%s ended before it showed %q", follow, later)
			}
			if strings.Contains(line, seen) && !appended {
				if err := cluster.AppendContainerLog(later); err != nil {
					t.Fatal(err)
				}
				appended = true
			}
			if appended && strings.Contains(line, later) {
				return
			}
		case <-ctx.Done():
			t.Fatalf("%s did not show %q, written after it started", follow, later)
		}
	}
}
