package e2e

import (
	"context"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/localcluster"
)

// TestExamplesBecomeReady applies artifacts/examples as the README does:
// the catalogue as the admin, the Instances (and the Secret and claim they
// mount) as tenant-a, then the Claim and Budget as the admin. Every
// Instance must turn Ready and the Claim Bound, with nothing added but the
// volume `make up` provides. It runs in a namespace of its own, as TestGet
// applies the same file; its Instances and Claim are gone when it returns,
// so the cards are free for the tests after it.
func TestExamplesBecomeReady(t *testing.T) {
	ns := "e2e-examples"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	// The volume `make up` pre-binds to tenant-a/models, here for ns.
	pv := localcluster.ModelsVolume(ns)
	if _, err := cs.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := cs.CoreV1().PersistentVolumes().Delete(context.Background(), pv.Name, metav1.DeleteOptions{}); err != nil {
			t.Log(err)
		}
	})
	t.Cleanup(func() { freeExamples(t, ns) })

	examples := func(file string) string {
		return strings.ReplaceAll(readFile(t, filepath.Join(repoRoot, "artifacts", "examples", file)), "namespace: tenant-a", "namespace: "+ns)
	}
	mustKubectl(t, admin(), examples("instancetypes.yaml"), "apply", "-f", "-")
	// The RoleBinding just made reaches kube-apiserver's authorizer shortly.
	waitAllowed(t, tenant(tenantA), "create", "persistentvolumeclaims", ns)
	mustKubectl(t, tenant(tenantA), examples("instances.yaml"), "apply", "-f", "-")
	mustKubectl(t, admin(), examples("claim-and-budget.yaml"), "apply", "-f", "-")

	for _, name := range []string{"train", "notebook", "inference"} {
		waitInstance(t, ns, name, 3*time.Minute, "Ready", phaseIs(gpuv1.InstanceReady))
	}
	waitClaim(t, ns, "big-run", 2*time.Minute, "Bound", claimPhase(gpuv1.ClaimBound))
	pvc, err := cs.CoreV1().PersistentVolumeClaims(ns).Get(ctx, localcluster.ModelsClaim, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if pvc.Status.Phase != corev1.ClaimBound || pvc.Spec.VolumeName != pv.Name {
		t.Errorf("claim %s/%s is %s on volume %q, want Bound on %s", ns, pvc.Name, pvc.Status.Phase, pvc.Spec.VolumeName, pv.Name)
	}
	// The Budget loop counts what was there before the Budget.
	budgets := kilnAdmin(t).GpuV1alpha1().Budgets(ns)
	want := resource.MustParse("6.75")
	waitFor(t, "Budget team-a charging the 6.75 cards claim-and-budget.yaml says the examples take", 90*time.Second,
		func(ctx context.Context) (*gpuv1.Budget, error) {
			return budgets.Get(ctx, "team-a", metav1.GetOptions{})
		},
		func(b *gpuv1.Budget) bool {
			used, ok := b.Status.Used["accelerators"]
			return ok && used.Cmp(want) == 0
		},
		func(b *gpuv1.Budget) any { return b.Status })
}

// waitAllowed polls `kubectl auth can-i` until the user may.
func waitAllowed(t *testing.T, kubeconfig, verb, resource, ns string) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, _ := kubectl(kubeconfig, "", "auth", "can-i", verb, resource, "-n", ns)
		return strings.TrimSpace(out) == "yes", nil
	})
	if err != nil {
		t.Fatalf("may not %s %s in %s after 30 s", verb, resource, ns)
	}
}

// freeExamples deletes the examples' Instances and Claim and waits until
// their Pods are gone, so the next test finds the cards free.
func freeExamples(t *testing.T, ns string) {
	if _, err := kubectl(admin(), "", "delete", "instances,claims", "--all", "-n", ns, "--wait=true", "--timeout=2m"); err != nil {
		t.Log(err)
	}
	cs, _ := adminClients(t)
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		return err == nil && len(pods.Items) == 0, nil
	})
	if err != nil {
		t.Errorf("the examples' Pods in %s outlived them by two minutes", ns)
	}
}
