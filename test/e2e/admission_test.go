package e2e

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// bindEdit gives tenant-a the standard edit role in a test's namespace.
func bindEdit(t *testing.T, ns string) {
	t.Helper()
	cs, _ := adminClients(t)
	rb := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "tenant-a-edit", Namespace: ns},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: tenantA}},
	}
	if _, err := cs.RbacV1().RoleBindings(ns).Create(context.Background(), rb, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitCanCreateInstances(t, tenantA, ns)
}

// waitCanCreateInstances waits until kube-apiserver's RBAC, which reads
// bindings from an informer, lets user create Instances in ns: a request
// right after a RoleBinding's create can still be refused (a CI run saw
// a 403 at -parallel=32). Kiln asks the same kube-apiserver, so one
// allowed review answers for both.
func waitCanCreateInstances(t *testing.T, user, ns string) {
	t.Helper()
	cs, _ := adminClients(t)
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user,
		ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "create", Group: "gpu.kiln.dev", Resource: "instances",
		},
	}}
	err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, err
		}
		return res.Status.Allowed, nil
	})
	if err != nil {
		t.Fatalf("%s may not create Instances in %s after its RoleBinding: %v", user, ns, err)
	}
}

// TestBudgetUnderContentionThroughAggregator: 50 concurrent creates by a
// tenant, through kube-apiserver, against a Budget of 8 cards: exactly 8
// are admitted and the Budget says so.
func TestBudgetUnderContentionThroughAggregator(t *testing.T) {
	t.Parallel()
	ns := "e2e-budget"
	createNamespace(t, ns)
	bindEdit(t, ns)
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata:\n  name: team\n  namespace: %s\nspec:\n  hard:\n    accelerators: \"8\"\n", ns), "create", "-f", "-")

	cfg, err := cluster.ConfigFor(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var admitted atomic.Int32
	var refusals sync.Map
	var wg sync.WaitGroup
	for i := range 50 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			obj := &unstructured.Unstructured{}
			if err := yaml.Unmarshal([]byte(instance(fmt.Sprintf("c-%02d", i), ns, "h100", "busybox:1")), &obj.Object); err != nil {
				t.Error(err)
				return
			}
			_, err := dyn.Resource(gvr("instances")).Namespace(ns).Create(context.Background(), obj, metav1.CreateOptions{})
			if err == nil {
				admitted.Add(1)
				return
			}
			refusals.Store(i, err)
		}()
	}
	wg.Wait()
	if got := admitted.Load(); got != 8 {
		t.Errorf("%d of 50 creates admitted through the aggregator, want exactly 8", got)
	}
	refusals.Range(func(_, v any) bool {
		err := v.(error)
		if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), `exceeds budget "team": accelerators used 8 + requested 1 > hard 8`) {
			t.Errorf("refusal: %v", err)
		}
		return true
	})
	used := mustKubectl(t, tenant(tenantA), "", "get", "budget", "team", "-n", ns, "-o", "jsonpath={.status.used.accelerators}")
	if used != "8" {
		t.Errorf("budget used accelerators = %q, want 8", used)
	}
	row := mustKubectl(t, tenant(tenantA), "", "get", "budget", "team", "-n", ns, "--no-headers")
	if f := strings.Fields(row); len(f) < 2 || f[1] != "8/8" {
		t.Errorf("kubectl get budget: %q, want ACCELERATORS 8/8", row)
	}
}

// TestPrivilegeNeedsAGrant: tenant-a may not run a privileged Instance
// until a cluster admin binds kiln:privileged-instances for it.
func TestPrivilegeNeedsAGrant(t *testing.T) {
	t.Parallel()
	ns := "e2e-privilege"
	createNamespace(t, ns)
	bindEdit(t, ns)
	manifest := strings.Replace(instance("root", ns, "h100", "busybox:1"), "spec:\n", "spec:\n  privileged: true\n", 1)

	_, err := kubectl(tenant(tenantA), manifest, "create", "-f", "-")
	want := fmt.Sprintf(`instances.gpu.kiln.dev "root" is forbidden: spec.privileged needs "use" on instances/privileged in namespace %q, which user "tenant-a" does not have; a cluster admin can grant it by binding the ClusterRole kiln:privileged-instances`, ns)
	if err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("privileged create before the grant: %v, want %q", err, want)
	}
	if out, _ := kubectl(tenant(tenantA), "", "auth", "can-i", "use", "instances.gpu.kiln.dev/privileged", "-n", ns); strings.TrimSpace(out) != "no" {
		t.Errorf("can-i use instances/privileged before the grant: %q", out)
	}

	mustKubectl(t, admin(), "", "create", "rolebinding", "tenant-a-privileged", "-n", ns,
		"--clusterrole=kiln:privileged-instances", "--user="+tenantA)
	// Kiln caches the cluster's authorization answers for a few seconds.
	err = wait.PollUntilContextTimeout(context.Background(), time.Second, time.Minute, true, func(context.Context) (bool, error) {
		_, err := kubectl(tenant(tenantA), manifest, "create", "-f", "-")
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("tenant-a still may not create a privileged Instance a minute after the grant")
	}
	if got := mustKubectl(t, tenant(tenantA), "", "get", "instance", "root", "-n", ns, "-o", "jsonpath={.spec.privileged}"); got != "true" {
		t.Errorf("stored spec.privileged = %q", got)
	}
}

// TestDryRunShowsSizing: what admission fills in is visible before
// anything is stored.
func TestDryRunShowsSizing(t *testing.T) {
	t.Parallel()
	manifest := strings.Replace(instance("sized", tenantA, "h100", "busybox:1"), "accelerators: 1", "accelerators: 2", 1)
	out := mustKubectl(t, tenant(tenantA), manifest, "create", "--dry-run=server", "-o", "yaml", "-f", "-")
	var obj struct {
		Spec struct {
			Resources map[string]any `json:"resources"`
			Workspace map[string]any `json:"workspace"`
		} `json:"spec"`
	}
	if err := yaml.Unmarshal([]byte(out), &obj); err != nil {
		t.Fatal(err)
	}
	// The h100 example type gives 24 cores, 240Gi and 400Gi per card.
	for k, want := range map[string]any{"accelerators": float64(2), "cpu": "48", "memory": "480Gi", "ephemeralStorage": "800Gi"} {
		if got := obj.Spec.Resources[k]; got != want {
			t.Errorf("dry run resources.%s = %v, want %v\n%s", k, got, want, out)
		}
	}
	if got := obj.Spec.Workspace["mountPath"]; got != "/workspace" {
		t.Errorf("dry run workspace.mountPath = %v", got)
	}
	if _, err := kubectl(tenant(tenantA), "", "get", "instance", "sized", "-n", tenantA); err == nil {
		t.Error("the dry run stored the Instance")
	}
}

// TestPrivilegeNotRetargeted (issue O, class 6): a tenant may stop, start
// and relabel the privileged Instance an admin made for them, but any
// other change of its spec (what it runs, reads, mounts or exposes) asks
// for the grant again.
func TestPrivilegeNotRetargeted(t *testing.T) {
	t.Parallel()
	ns := "e2e-privilege-retarget"
	controllerNamespace(t, ns)
	manifest := strings.Replace(instance("root", ns, "h100", "busybox:1"), "spec:\n", "spec:\n  privileged: true\n  stopped: true\n", 1)
	mustKubectl(t, admin(), manifest, "create", "-f", "-")
	kc := tenant(tenantA)
	want := fmt.Sprintf(`instances.gpu.kiln.dev "root" is forbidden: spec.privileged with a changed spec needs "use" on instances/privileged in namespace %q, which user "tenant-a" does not have`, ns)
	for _, patch := range []string{
		`{"spec":{"env":[{"name":"SECRET_FILE","value":"/var/run/secrets/other"}]}}`,
		`{"spec":{"ports":[{"name":"shell","port":4444}]}}`,
		`{"spec":{"image":"attacker/miner:1"}}`,
	} {
		if _, err := kubectl(kc, "", "patch", "instance", "root", "-n", ns, "--type=merge", "-p", patch); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("patch %s: %v; want refused: %q", patch, err, want)
		}
	}
	mustKubectl(t, kc, "", "label", "instance", "root", "-n", ns, "team=vision")
	mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/root/start", "-f", "-")
	mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/root/stop", "-f", "-")
}
