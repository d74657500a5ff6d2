package e2e

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"testing"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// TestForgedRequestHeaders: X-Remote-User is believed only from a client
// that presents the front-proxy certificate kube-apiserver holds. Anyone
// else reaching Kiln directly is anonymous, whatever headers they send.
func TestForgedRequestHeaders(t *testing.T) {
	t.Parallel()
	ca, err := os.ReadFile(cluster.KilnCAFile)
	if err != nil {
		t.Fatal(err)
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	get := func(certs []tls.Certificate) (int, string) {
		t.Helper()
		client := &http.Client{
			Timeout:   10 * time.Second,
			Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool, Certificates: certs}},
		}
		req, err := http.NewRequest(http.MethodGet, cluster.KilnURL+"/apis/gpu.kiln.dev/v1alpha1/instances", nil)
		if err != nil {
			t.Fatal(err)
		}
		req.Header.Set("X-Remote-User", "admin")
		req.Header.Set("X-Remote-Group", "system:masters")
		resp, err := client.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}

	code, body := get(nil)
	if code != http.StatusForbidden {
		t.Fatalf("forged headers without a client certificate: %d %s, want 403", code, body)
	}
	var status struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	if err := json.Unmarshal([]byte(body), &status); err != nil {
		t.Fatalf("403 body is not a Status: %s", body)
	}
	const want = `instances.gpu.kiln.dev is forbidden: User "system:anonymous" cannot list resource "instances" in API group "gpu.kiln.dev" at the cluster scope`
	if status.Reason != "Forbidden" || len(status.Message) < len(want) || status.Message[:len(want)] != want {
		t.Errorf("403 says %q (%s), want it to start %q", status.Message, status.Reason, want)
	}

	// The same headers with the aggregator's certificate are honoured: the
	// refusal above is the certificate's doing, not a broken path.
	proxy, err := tls.LoadX509KeyPair(cluster.FrontProxyClient.CertFile, cluster.FrontProxyClient.KeyFile)
	if err != nil {
		t.Fatal(err)
	}
	if code, body := get([]tls.Certificate{proxy}); code != http.StatusOK {
		t.Errorf("headers with the front-proxy certificate: %d %s, want 200", code, body)
	}
}

// TestNamedGrantAtKiln: Kiln authorizes a request the aggregator proxied
// for any object of its resource first, and for the named object only
// when that is denied (pkg/apiserver/proxiedauthz.go). A Role granting
// one named Budget lets exactly that one through the aggregator, and
// Kiln itself, asked straight with the front-proxy certificate, refuses
// the other Budget that kube-apiserver would have refused first.
func TestNamedGrantAtKiln(t *testing.T) {
	t.Parallel()
	const ns, user = "named-grant", "named-reader"
	createNamespace(t, ns)
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Budget
metadata: {name: mine, namespace: %[1]s}
spec: {hard: {accelerators: "1"}}
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Budget
metadata: {name: other, namespace: %[1]s}
spec: {hard: {accelerators: "1"}}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: Role
metadata: {name: read-mine, namespace: %[1]s}
rules:
- {apiGroups: [gpu.kiln.dev], resources: [budgets], resourceNames: [mine], verbs: [get]}
---
apiVersion: rbac.authorization.k8s.io/v1
kind: RoleBinding
metadata: {name: read-mine, namespace: %[1]s}
roleRef: {apiGroup: rbac.authorization.k8s.io, kind: Role, name: read-mine}
subjects:
- {apiGroup: rbac.authorization.k8s.io, kind: User, name: %[2]s}
`, ns, user), "apply", "-f", "-")
	cs, _ := adminClients(t)
	review := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
		User: user, ResourceAttributes: &authorizationv1.ResourceAttributes{
			Namespace: ns, Verb: "get", Group: "gpu.kiln.dev", Resource: "budgets", Name: "mine"}}}
	// kube-apiserver's RBAC reads bindings from an informer.
	if err := wait.PollUntilContextTimeout(context.Background(), 100*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		res, err := cs.AuthorizationV1().SubjectAccessReviews().Create(ctx, review, metav1.CreateOptions{})
		return err == nil && res.Status.Allowed, nil
	}); err != nil {
		t.Fatalf("%s may not get budget %s/mine after its RoleBinding: %v", user, ns, err)
	}

	// Through the aggregator, as the user.
	cfg := rest.CopyConfig(cluster.AdminConfig)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: user, Groups: []string{"system:authenticated"}}
	kiln, err := versioned.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := kiln.GpuV1alpha1().Budgets(ns).Get(ctx, "mine", metav1.GetOptions{}); err != nil {
		t.Errorf("get budget mine through the aggregator: %v", err)
	}
	if _, err := kiln.GpuV1alpha1().Budgets(ns).Get(ctx, "other", metav1.GetOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("get budget other through the aggregator: %v, want 403", err)
	}
	if _, err := kiln.GpuV1alpha1().Budgets(ns).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("list budgets through the aggregator: %v, want 403", err)
	}

	// Straight to Kiln, as the aggregator would send it.
	client := frontProxyClient(t)
	client.Timeout = 10 * time.Second
	headers := map[string][]string{"X-Remote-User": {user}, "X-Remote-Group": {"system:authenticated"}}
	path := "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns + "/budgets/"
	if code, msg := send(t, client, cluster.KilnURL, http.MethodGet, path+"mine", nil, headers); code != http.StatusOK {
		t.Errorf("get budget mine at Kiln: %d %s, want 200", code, msg)
	}
	want := fmt.Sprintf(`budgets.gpu.kiln.dev "other" is forbidden: User %q cannot get resource "budgets" in API group "gpu.kiln.dev" in the namespace %q`, user, ns)
	if code, msg := send(t, client, cluster.KilnURL, http.MethodGet, path+"other", nil, headers); code != http.StatusForbidden || len(msg) < len(want) || msg[:len(want)] != want {
		t.Errorf("get budget other at Kiln: %d %q, want 403 starting %q", code, msg, want)
	}
}
