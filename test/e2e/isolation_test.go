package e2e

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"kiln.dev/kiln/test/localcluster"
)

// TestIsolationMatrix (issue G): every resource and subresource of
// gpu.kiln.dev that discovery lists × every verb it lists × {tenant-a's
// namespace, tenant-b's, cluster-wide} × {tenant-a, anonymous, forged
// identity headers sent straight to Kiln without the front-proxy
// certificate}. A request passes authorization exactly where RBAC says
// (tenant-a's SelfSubjectAccessReview, which `kubectl auth can-i` asks,
// and `kubectl auth can-i` itself for the subresources), is refused for
// the other two identities everywhere, and no response is a redirect.
// Writes are dry runs. Then what tenant-a could reach outside
// gpu.kiln.dev: DRA claims, DaemonSets, Services with external IPs or load
// balancers, PriorityClasses.
func TestIsolationMatrix(t *testing.T) {
	t.Parallel()
	t.Run("outside gpu.kiln.dev", isolationOutsideKiln)
	ctx := context.Background()
	adminCS, _ := adminClients(t)
	// Objects of the admin's to aim at in both tenant namespaces, of a type
	// whose pool is empty, so nothing here holds cards.
	emptyPoolType(t, "matrix")
	for _, ns := range []string{tenantA, tenantB} {
		mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: matrix, namespace: %[1]s}
spec: {type: matrix, image: busybox:1, resources: {accelerators: 1}, stopped: true}
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Claim
metadata: {name: matrix, namespace: %[1]s}
spec: {type: matrix, accelerators: 1}
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Budget
metadata: {name: matrix, namespace: %[1]s}
spec: {hard: {accelerators.matrix: "8"}}
`, ns), "apply", "-f", "-")
		t.Cleanup(func() {
			for _, r := range []string{"instance", "claim", "budget"} {
				kubectl(admin(), "", "delete", r+".gpu.kiln.dev", "matrix", "-n", ns, "--wait=false", "--ignore-not-found")
			}
		})
	}

	disc, err := adminCS.Discovery().ServerResourcesForGroupVersion("gpu.kiln.dev/v1alpha1")
	if err != nil {
		t.Fatal(err)
	}
	tenantCfg, err := cluster.ConfigFor(tenantA)
	if err != nil {
		t.Fatal(err)
	}
	tenantCS := kubernetes.NewForConfigOrDie(tenantCfg)
	identities := []struct {
		name string
		do   func(method, path string, body []byte) (int, string)
	}{
		{"tenant-a", httpVia(t, tenantCfg)},
		{"anonymous", httpVia(t, rest.AnonymousClientConfig(tenantCfg))},
		{"forged headers to Kiln", forgedToKiln(t)},
	}

	checked, tenantAllowed, tenantDenied := 0, 0, 0
	for _, r := range disc.APIResources {
		resource, sub, _ := strings.Cut(r.Name, "/")
		scopes := []string{""}
		if r.Namespaced {
			scopes = []string{tenantA, tenantB, ""}
		}
		for _, verb := range r.Verbs {
			for _, ns := range scopes {
				method, path, body, ok := requestFor(resource, sub, verb, ns, r.Namespaced)
				if !ok {
					continue
				}
				review, err := tenantCS.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: ns, Verb: verb, Group: "gpu.kiln.dev", Resource: resource, Subresource: sub, Name: nameFor(verb, ns, r.Namespaced),
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				rbacAllows := review.Status.Allowed
				for _, id := range identities {
					code, msg := id.do(method, path, body)
					checked++
					where := fmt.Sprintf("%s %s %s (%s %s) as %s", verb, r.Name, scopeName(ns), method, path, id.name)
					if code >= 300 && code < 400 {
						t.Errorf("%s: redirect %d", where, code)
						continue
					}
					// An authorizer's refusal, not admission's (a Budget, say).
					denied := code == http.StatusUnauthorized ||
						(code == http.StatusForbidden && strings.Contains(msg, `User "`) && strings.Contains(msg, `" cannot `))
					want := id.name == "tenant-a" && rbacAllows
					if id.name == "tenant-a" && !denied {
						tenantAllowed++
					} else if id.name == "tenant-a" {
						tenantDenied++
					}
					if denied == want {
						t.Errorf("%s: %d %s; RBAC allows: %t", where, code, msg, want)
					}
				}
			}
		}
		// kubectl auth can-i agrees with the review in the tenant's own
		// namespace, subresources included.
		if r.Namespaced {
			for _, verb := range r.Verbs {
				review, err := tenantCS.AuthorizationV1().SelfSubjectAccessReviews().Create(ctx, &authorizationv1.SelfSubjectAccessReview{
					Spec: authorizationv1.SelfSubjectAccessReviewSpec{ResourceAttributes: &authorizationv1.ResourceAttributes{
						Namespace: tenantA, Verb: verb, Group: "gpu.kiln.dev", Resource: resource, Subresource: sub,
					}},
				}, metav1.CreateOptions{})
				if err != nil {
					t.Fatal(err)
				}
				args := []string{"auth", "can-i", verb, resource + ".gpu.kiln.dev", "-n", tenantA}
				if sub != "" {
					args = append(args, "--subresource="+sub)
				}
				out, _ := kubectl(tenant(tenantA), "", args...)
				if got := strings.TrimSpace(out) == "yes"; got != review.Status.Allowed {
					t.Errorf("kubectl auth can-i %s %s: %q, the review says %t", verb, r.Name, strings.TrimSpace(out), review.Status.Allowed)
				}
			}
		}
	}
	// Both outcomes must occur, or the matrix proves nothing.
	if checked < 100 || tenantAllowed < 20 || tenantDenied < 20 {
		t.Fatalf("%d requests checked (tenant-a allowed %d, refused %d); discovery listed %d resources",
			checked, tenantAllowed, tenantDenied, len(disc.APIResources))
	}
	t.Logf("%d requests checked over %d resources and subresources; tenant-a allowed %d, refused %d",
		checked, len(disc.APIResources), tenantAllowed, tenantDenied)
}

func scopeName(ns string) string {
	if ns == "" {
		return "cluster-wide"
	}
	return "in " + ns
}

// nameFor is the object a verb acts on: the admin's "matrix" objects, or
// none for verbs on collections.
func nameFor(verb, ns string, namespaced bool) string {
	switch verb {
	case "list", "watch", "deletecollection":
		return ""
	case "create":
		return ""
	}
	if namespaced && ns == "" {
		return ""
	}
	return "matrix"
}

// requestFor builds the request of verb on resource[/sub] in ns; ok is
// false for a combination that has no request (a named verb cluster-wide
// on a namespaced resource).
func requestFor(resource, sub, verb, ns string, namespaced bool) (method, path string, body []byte, ok bool) {
	base := "/apis/gpu.kiln.dev/v1alpha1"
	if namespaced {
		if ns != "" {
			base += "/namespaces/" + ns
		} else if verb != "list" && verb != "watch" {
			return "", "", nil, false
		}
	}
	collection := base + "/" + resource
	object := collection + "/matrix"
	if sub != "" {
		object += "/" + sub
	}
	dry := "?dryRun=All"
	switch verb {
	case "get":
		return http.MethodGet, object, nil, true
	case "list":
		return http.MethodGet, collection, nil, sub == ""
	case "watch":
		return http.MethodGet, collection + "?watch=true&timeoutSeconds=1", nil, sub == ""
	case "create":
		if sub != "" {
			// instances/start and instances/stop.
			return http.MethodPost, object + dry, []byte("{}"), true
		}
		return http.MethodPost, collection + dry, []byte(`{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"` + kindOf(resource) + `","metadata":{"name":"matrix-new"}}`), true
	case "update":
		return http.MethodPut, object + dry, []byte(`{"apiVersion":"gpu.kiln.dev/v1alpha1","kind":"` + kindOf(resource) + `","metadata":{"name":"matrix"}}`), true
	case "patch":
		return http.MethodPatch, object + dry, []byte("{}"), true
	case "delete":
		return http.MethodDelete, object + dry, nil, sub == ""
	case "deletecollection":
		return http.MethodDelete, collection + dry, nil, sub == ""
	}
	return "", "", nil, false
}

func kindOf(resource string) string {
	return map[string]string{"instances": "Instance", "claims": "Claim", "budgets": "Budget", "instancetypes": "InstanceType", "nodedevices": "NodeDevices"}[resource]
}

// httpVia sends requests through kube-apiserver and the aggregator with
// cfg's credentials, and returns the status code and the Status message.
func httpVia(t *testing.T, cfg *rest.Config) func(method, path string, body []byte) (int, string) {
	t.Helper()
	transport, err := rest.TransportFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	client := &http.Client{Transport: transport, Timeout: 20 * time.Second,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	return func(method, path string, body []byte) (int, string) {
		return send(t, client, cfg.Host, method, path, body, nil)
	}
}

// forgedToKiln sends requests straight to Kiln's port with identity
// headers of tenant-a and system:masters, without the front-proxy client
// certificate that alone may assert them.
func forgedToKiln(t *testing.T) func(method, path string, body []byte) (int, string) {
	t.Helper()
	ca, err := os.ReadFile(cluster.KilnCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Timeout: 20 * time.Second,
		Transport:     &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}},
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	headers := map[string][]string{"X-Remote-User": {tenantA}, "X-Remote-Group": {"system:masters", "system:authenticated"}}
	return func(method, path string, body []byte) (int, string) {
		return send(t, client, cluster.KilnURL, method, path, body, headers)
	}
}

func send(t *testing.T, client *http.Client, host, method, path string, body []byte, headers map[string][]string) (int, string) {
	t.Helper()
	req, err := http.NewRequest(method, strings.TrimSuffix(host, "/")+path, bytes.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, vs := range headers {
		req.Header[k] = vs
	}
	if body != nil {
		ct := "application/json"
		if method == http.MethodPatch {
			ct = "application/merge-patch+json"
		}
		req.Header.Set("Content-Type", ct)
	}
	resp, err := client.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, path, err)
	}
	defer resp.Body.Close()
	// A watch streams until its timeout; the status and the first bytes
	// are enough.
	data, _ := io.ReadAll(io.LimitReader(resp.Body, 64*1024))
	var status metav1.Status
	if json.Unmarshal(data, &status) == nil && status.Message != "" {
		return resp.StatusCode, status.Message
	}
	return resp.StatusCode, string(data[:min(len(data), 200)])
}

// isolationOutsideKiln (issue O), the matrix's rows outside gpu.kiln.dev:
// what else the edit role reaches in a tenant namespace that could get
// cards, outrank other tenants or take another's traffic. A DaemonSet
// (which reaches every node) gets no Pod that asks the runtime for cards,
// and its refusals say why; DRA claims, Services with external IPs and
// PriorityClasses are refused.
func isolationOutsideKiln(t *testing.T) {
	ns := tenantA
	for _, tc := range []struct{ name, manifest, want string }{
		{"a ResourceClaimTemplate", `apiVersion: resource.k8s.io/v1
kind: ResourceClaimTemplate
metadata: {name: iso-gpu}
spec:
  spec:
    devices:
      requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
`, "ResourceClaimTemplate iso-gpu: in namespace " + ns + " accelerators come only through Kiln, and DRA claims would get cards no Budget sees"},
		{"a ResourceClaim", `apiVersion: resource.k8s.io/v1
kind: ResourceClaim
metadata: {name: iso-gpu}
spec:
  devices:
    requests: [{name: gpu, exactly: {deviceClassName: gpu.example.com}}]
`, "ResourceClaim iso-gpu: in namespace " + ns + " accelerators come only through Kiln"},
		{"a Service with an external IP", `apiVersion: v1
kind: Service
metadata: {name: iso-capture}
spec:
  ports: [{port: 22}]
  externalIPs: [192.0.2.10]
`, "Use of external IPs is denied by admission control"},
		// Node ports are one range for every tenant: the standard quota
		// counts them, and refuses load balancers outright here.
		{"a LoadBalancer Service", `apiVersion: v1
kind: Service
metadata: {name: iso-lb}
spec:
  type: LoadBalancer
  ports: [{port: 22}]
`, "exceeded quota: " + localcluster.TenantQuota},
		{"a PriorityClass", `apiVersion: scheduling.k8s.io/v1
kind: PriorityClass
metadata: {name: iso-top}
value: 1000000000
`, `cannot create resource "priorityclasses" in API group "scheduling.k8s.io" at the cluster scope`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := kubectl(tenant(tenantA), tc.manifest, "create", "-n", ns, "-f", "-")
			if err == nil || !strings.Contains(err.Error(), "forbidden") || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("create: %v; want forbidden, saying %q", err, tc.want)
			}
		})
	}

	t.Run("a DaemonSet", func(t *testing.T) {
		mustKubectl(t, tenant(tenantA), `apiVersion: apps/v1
kind: DaemonSet
metadata: {name: iso-everywhere}
spec:
  selector: {matchLabels: {app: iso-everywhere}}
  template:
    metadata: {labels: {app: iso-everywhere}}
    spec:
      containers:
      - name: main
        image: busybox:1
        env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
`, "create", "-n", ns, "-f", "-")
		t.Cleanup(func() {
			kubectl(tenant(tenantA), "", "delete", "daemonset", "iso-everywhere", "-n", ns, "--wait=false")
		})
		want := "container main: NVIDIA_VISIBLE_DEVICES: container runtimes and GPU sharing layers read these"
		waitFor(t, "the DaemonSet's refusal in its events", time.Minute,
			func(ctx context.Context) (string, error) {
				return kubectl(tenant(tenantA), "", "get", "events", "-n", ns,
					"--field-selector=involvedObject.name=iso-everywhere,reason=FailedCreate", "-o=jsonpath={.items[*].message}")
			},
			func(events string) bool { return strings.Contains(events, want) },
			func(events string) any { return events })
		if pods := mustKubectl(t, tenant(tenantA), "", "get", "pods", "-n", ns, "-l", "app=iso-everywhere", "-o=name"); pods != "" {
			t.Errorf("the DaemonSet has Pods: %s", pods)
		}
	})
}

// emptyPoolType creates, for the test's life, an InstanceType of whole
// NVIDIA cards (up to 8) whose pool has no node: what is made of it waits,
// charged, and holds no card.
func emptyPoolType(t *testing.T, name string) {
	t.Helper()
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: %[1]s}
spec:
  accelerator: {vendor: nvidia, model: NVIDIA-%[2]s, memory: 80Gi, maxPerInstance: 8}
  resourcesPerCard: {cpu: "1", memory: 1Gi}
  nodeSelector: {kiln.dev/pool: %[1]s-none}
`, name, strings.ToUpper(name)), "apply", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", name, "--wait=false") })
}
