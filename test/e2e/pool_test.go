package e2e

import (
	"bytes"
	"context"
	"fmt"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// kubectlStderr runs kubectl as kubeconfig's user and returns its stderr,
// where kubectl prints the server's Warning headers; it fails the test if
// kubectl does.
func kubectlStderr(t *testing.T, kubeconfig, stdin string, args ...string) string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, cluster.Kubectl, append([]string{"--kubeconfig=" + kubeconfig}, args...)...)
	cmd.Stdin = strings.NewReader(stdin)
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("kubectl %s: %v: %s", strings.Join(args, " "), err, stderr.String())
	}
	return stderr.String()
}

// TestInstanceTypePoolWarning: an admin writing an InstanceType that no
// Ready node can serve is told so by kubectl, and the type is stored all
// the same; the example catalogue, whose pools are the simulated nodes,
// draws no warning.
func TestInstanceTypePoolWarning(t *testing.T) {
	t.Parallel()
	itype := func(name, product string, tolerate bool) string {
		s := fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata:
  name: %s
spec:
  accelerator:
    vendor: nvidia
    model: %s
    memory: 80Gi
    exclusive: {}
  nodeSelector:
    nvidia.com/gpu.product: %s
`, name, product, product)
		if tolerate {
			s += `  tolerations:
  - key: nvidia.com/gpu
    operator: Exists
    effect: NoSchedule
`
		}
		return s
	}
	for _, tc := range []struct {
		name, manifest, want string
	}{
		{"e2e-pool-a100", itype("e2e-pool-a100", "NVIDIA-E2E-NONE", true),
			`Warning: instancetype "e2e-pool-a100": no Ready node matches nodeSelector nvidia.com/gpu.product=NVIDIA-E2E-NONE; Instances of this type will stay Pending`},
		{"e2e-pool-untolerated", itype("e2e-pool-untolerated", "NVIDIA-H100-80GB-HBM3", false),
			`Warning: instancetype "e2e-pool-untolerated": no Ready node matches nodeSelector nvidia.com/gpu.product=NVIDIA-H100-80GB-HBM3 whose taints its tolerations allow (`},
		{"e2e-pool-h100", itype("e2e-pool-h100", "NVIDIA-H100-80GB-HBM3", true), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Cleanup(func() {
				if _, err := kubectl(admin(), "", "delete", "instancetype", tc.name, "--ignore-not-found"); err != nil {
					t.Log(err)
				}
			})
			stderr := kubectlStderr(t, admin(), tc.manifest, "create", "-f", "-")
			if tc.want == "" && strings.Contains(stderr, "Warning") {
				t.Errorf("create warned:\n%s", stderr)
			}
			if tc.want != "" && !strings.Contains(stderr, tc.want) {
				t.Errorf("create printed\n%s\nwant a line containing\n%s", stderr, tc.want)
			}
			// Stored all the same: nodes may join later.
			mustKubectl(t, admin(), "", "get", "instancetype", tc.name)
		})
	}

	// The catalogue is installed already: create it again under other
	// names, as a dry run, which runs admission and stores nothing.
	catalogue := readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "instancetypes.yaml"))
	catalogue = strings.ReplaceAll(catalogue, "\n  name: ", "\n  name: e2e-pool-dry-")
	if stderr := kubectlStderr(t, admin(), catalogue, "create", "--dry-run=server", "-f", "-"); strings.Contains(stderr, "Warning") {
		t.Errorf("the example catalogue warned:\n%s", stderr)
	}
}
