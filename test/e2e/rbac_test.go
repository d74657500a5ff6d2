package e2e

import (
	"context"
	"fmt"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/utils/ptr"
)

type kilnResource struct {
	plural string
	// namespaced resources are scoped per tenant; instancetypes are not.
	namespaced bool
	// tenantWrites: the aggregated "edit" role lets a tenant write these
	// in its own namespace. Budgets and instancetypes are admin-only.
	tenantWrites bool
	manifest     func(name, namespace string) string
}

var kilnResources = []kilnResource{
	{plural: "instances", namespaced: true, tenantWrites: true, manifest: func(name, ns string) string {
		return instance(name, ns, "h100", "busybox:1")
	}},
	{plural: "claims", namespaced: true, tenantWrites: true, manifest: func(name, ns string) string {
		return fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Claim\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  type: h100\n  accelerators: 1\n", name, ns)
	}},
	{plural: "budgets", namespaced: true, manifest: func(name, ns string) string {
		return fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata:\n  name: %s\n  namespace: %s\nspec:\n  hard:\n    accelerators: \"8\"\n", name, ns)
	}},
	{plural: "instancetypes", manifest: func(name, _ string) string {
		return fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: InstanceType\nmetadata:\n  name: %s\nspec:\n  resourcesPerCard:\n    cpu: \"4\"\n    memory: 16Gi\n", name)
	}},
}

var readVerbs = map[string]bool{"get": true, "list": true, "watch": true}

// TestTenantRBAC walks every verb on every Kiln resource as tenant-a, in its
// own namespace, in tenant-b's and cluster-wide, and checks that the server
// and `kubectl auth can-i` agree with the roles in artifacts/rbac.
func TestTenantRBAC(t *testing.T) {
	t.Parallel()
	kc := tenant(tenantA)
	tenantCfg, err := cluster.ConfigFor(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	tenantDyn, err := dynamic.NewForConfig(tenantCfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range kilnResources {
		t.Run(r.plural, func(t *testing.T) {
			t.Parallel()
			scopes := []string{""}
			if r.namespaced {
				scopes = []string{tenantA, tenantB}
			}
			for _, ns := range scopes {
				// An object of the admin's in every scope, so get, patch and
				// delete have something to be refused on.
				fixture := "rbac-fixture-" + r.plural
				mustKubectl(t, admin(), r.manifest(fixture, ns), "create", "-f", "-")
				t.Cleanup(func() {
					kubectl(admin(), "", "delete", r.plural+".gpu.kiln.dev", fixture, nsFlag(ns), "--ignore-not-found")
				})

				own := "rbac-" + r.plural
				target := fixture
				for _, verb := range []string{"create", "get", "list", "watch", "patch", "delete"} {
					allowed := ns == tenantA && (readVerbs[verb] || r.tenantWrites) || ns == "" && readVerbs[verb]
					if verb == "create" && allowed {
						// The tenant then works on its own object.
						target = own
					}
					canI := canI(t, kc, verb, r.plural, ns)
					err := doVerb(t, kc, tenantDyn, r, verb, ns, target)
					where := fmt.Sprintf("%s %s in %q", verb, r.plural, ns)
					if canI != allowed {
						t.Errorf("kubectl auth can-i %s = %v, want %v", where, canI, allowed)
					}
					if allowed && err != nil {
						t.Errorf("%s: refused: %v", where, err)
					}
					if !allowed {
						checkForbidden(t, where, err, verb, r.plural, ns)
					}
				}
			}
			if r.namespaced {
				// Cluster-wide reads span other tenants.
				_, err := kubectl(kc, "", "get", r.plural+".gpu.kiln.dev", "--all-namespaces")
				checkForbidden(t, "list "+r.plural+" --all-namespaces", err, "list", r.plural, "")
				_, err = tenantDyn.Resource(gvr(r.plural)).Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: ptr.To[int64](1)})
				checkForbidden(t, "watch "+r.plural+" --all-namespaces", err, "watch", r.plural, "")
				if canI(t, kc, "list", r.plural, "") || canI(t, kc, "watch", r.plural, "") {
					t.Errorf("kubectl auth can-i says tenant-a may list or watch %s in all namespaces", r.plural)
				}
			}
		})
	}
}

func canI(t *testing.T, kc, verb, plural, ns string) bool {
	t.Helper()
	args := []string{"auth", "can-i", verb, plural + ".gpu.kiln.dev"}
	if ns != "" {
		args = append(args, "-n", ns)
	} else {
		args = append(args, "--all-namespaces")
	}
	out, err := kubectl(kc, "", args...)
	switch strings.TrimSpace(out) {
	case "yes":
		return true
	case "no":
		return false
	}
	t.Fatalf("kubectl auth can-i: %q %v", out, err)
	return false
}

// doVerb performs one verb with kubectl, or client-go for watch (kubectl's
// watch does not end by itself).
func doVerb(t *testing.T, kc string, dyn dynamic.Interface, r kilnResource, verb, ns, name string) error {
	t.Helper()
	res := r.plural + ".gpu.kiln.dev"
	var err error
	switch verb {
	case "create":
		_, err = kubectl(kc, r.manifest("rbac-"+r.plural, ns), "create", "-f", "-")
	case "get":
		_, err = kubectl(kc, "", "get", res, name, nsFlag(ns), "-o", "name")
	case "list":
		_, err = kubectl(kc, "", "get", res, nsFlag(ns), "-o", "name")
	case "watch":
		var w interface{ Stop() }
		w, err = resourceClient(dyn, r, ns).Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: ptr.To[int64](1)})
		if err == nil {
			w.Stop()
		}
	case "patch":
		patch := `{"metadata":{"labels":{"rbac":"patched"}}}`
		_, err = kubectl(kc, "", "patch", res, name, nsFlag(ns), "--type=merge", "-p", patch)
		// kubectl reads the object before patching it; where that read is
		// refused, send the patch itself so the server judges the patch.
		if err != nil && strings.Contains(err.Error(), "cannot get resource") {
			_, err = resourceClient(dyn, r, ns).Patch(context.Background(), name, types.MergePatchType, []byte(patch), metav1.PatchOptions{})
		}
	case "delete":
		_, err = kubectl(kc, "", "delete", res, name, nsFlag(ns), "--wait=false")
	}
	return err
}

// checkForbidden wants a 403 that names the user, the verb, the resource
// and the scope.
func checkForbidden(t *testing.T, where string, err error, verb, plural, ns string) {
	t.Helper()
	if err == nil {
		t.Errorf("%s: allowed, want Forbidden", where)
		return
	}
	scope := "at the cluster scope"
	if ns != "" {
		scope = fmt.Sprintf("in the namespace %q", ns)
	}
	want := fmt.Sprintf(`User "tenant-a" cannot %s resource %q in API group "gpu.kiln.dev" %s`, verb, plural, scope)
	if apierrors.IsForbidden(err) || strings.Contains(err.Error(), want) {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("%s: Forbidden, but the message %q lacks %q", where, err, want)
		}
		return
	}
	t.Errorf("%s: %v, want Forbidden: %s", where, err, want)
}

func resourceClient(dyn dynamic.Interface, r kilnResource, ns string) dynamic.ResourceInterface {
	if ns == "" {
		return dyn.Resource(gvr(r.plural))
	}
	return dyn.Resource(gvr(r.plural)).Namespace(ns)
}

func nsFlag(ns string) string {
	if ns == "" {
		return "--namespace=default"
	}
	return "--namespace=" + ns
}

func gvr(plural string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "gpu.kiln.dev", Version: "v1alpha1", Resource: plural}
}
