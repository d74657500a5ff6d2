package e2e

import (
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"io"
	"net/http"
	"os"
	"testing"
	"time"
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
