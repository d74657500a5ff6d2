// Package e2e drives Kiln the way a tenant does: the real kubectl against a
// real kube-apiserver that reaches Kiln through the aggregation layer. One
// local control plane serves every test in the package.
package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"kiln.dev/kiln/test/images"
	"kiln.dev/kiln/test/localcluster"
)

var (
	cluster  *localcluster.Cluster
	repoRoot string
	// realNodeSkip says why this host runs no real node; "" when it does.
	realNodeSkip string
)

const (
	tenantA = "tenant-a"
	tenantB = "tenant-b"
)

func TestMain(m *testing.M) {
	os.Exit(run(m))
}

func run(m *testing.M) (code int) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	repoRoot = root
	binDir := filepath.Join(root, "_output", "bin")
	dir := filepath.Join(root, "_output", "e2e")
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	fmt.Fprintln(os.Stderr, "starting the local control plane in", dir)
	if realNodeSkip = localcluster.RealNodeUnsupported(); realNodeSkip != "" {
		fmt.Fprintln(os.Stderr, "no real node:", realNodeSkip)
	}
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: binDir, RepoRoot: root,
		RealNode: realNodeSkip == "", ImageDir: filepath.Join(root, "_output", "images"),
		Tenants: []string{tenantA, tenantB},
		Log:     os.Stderr,
		// Short, so the kubelet-admission test sees rebuilds and the
		// give-up within seconds.
		ControllerFlags: []string{"--admission-failure-backoff=1s", "--admission-failure-window=12s",
			// Holders run as real containers on real-0.
			"--claim-holder-image=" + images.PauseImage},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "local control plane:", err)
		return 1
	}
	defer func() {
		c.Stop()
		// What the real node set up on the host goes with it.
		if realNodeSkip == "" {
			if err := localcluster.RealNodeLeftovers(); err != nil {
				fmt.Fprintln(os.Stderr, "after stopping the real node:", err)
				code = 1
			}
		}
	}()
	cluster = c
	// The catalogue every test uses, installed as a cluster admin would.
	if out, err := kubectl(c.AdminKubeconfig, "", "apply", "-f", filepath.Join(root, "artifacts", "examples", "instancetypes.yaml")); err != nil {
		fmt.Fprintln(os.Stderr, out, err)
		return 1
	}
	code = m.Run()
	if code != 0 {
		fmt.Fprintln(os.Stderr, "component logs are in", filepath.Join(dir, "logs"))
	}
	return code
}

// kubectl runs the real kubectl as the user of kubeconfig, with stdin if not
// empty. The error carries stderr.
func kubectl(kubeconfig, stdin string, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	if stdin != "" {
		cmd.Stdin = strings.NewReader(stdin)
	}
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		return stdout.String(), fmt.Errorf("kubectl %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(stderr.String()))
	}
	return stdout.String(), nil
}

// mustKubectl fails the test if kubectl does.
func mustKubectl(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	out, err := kubectl(kubeconfig, stdin, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func admin() string { return cluster.AdminKubeconfig }

func tenant(name string) string { return cluster.KubeconfigFor(name) }

func adminClients(t *testing.T) (kubernetes.Interface, dynamic.Interface) {
	t.Helper()
	cs, err := kubernetes.NewForConfig(cluster.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cluster.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return cs, dyn
}

// createNamespace makes a namespace for one test and removes it after.
func createNamespace(t *testing.T, name string) {
	t.Helper()
	mustKubectl(t, admin(), "", "create", "namespace", name)
	t.Cleanup(func() {
		if _, err := kubectl(admin(), "", "delete", "namespace", name, "--wait=false"); err != nil {
			t.Log(err)
		}
	})
}

// instance is a minimal valid Instance manifest.
func instance(name, namespace, typ, image string) string {
	return fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata:
  name: %s
  namespace: %s
spec:
  type: %s
  image: %s
  resources:
    accelerators: 1
`, name, namespace, typ, image)
}

// cpuInstance is a minimal valid Instance of a CPU-only type.
func cpuInstance(name, namespace, typ string) string {
	return strings.Replace(instance(name, namespace, typ, "busybox:1"), "accelerators: 1", "accelerators: 0", 1)
}
