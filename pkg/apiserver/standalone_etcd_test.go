//go:build integration

package apiserver_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"kiln.dev/kiln/pkg/apiserver/testserver"
)

// TestStandaloneEtcdNeedsTheCredential (issue G, class 7): a local user
// who finds the embedded etcd's port cannot read Kiln's objects from it
// around the admin token: plain HTTP and TLS without the client
// certificate are both refused, and only the certificate the server keeps
// in its data directory (0600) reads.
func TestStandaloneEtcdNeedsTheCredential(t *testing.T) {
	if !strings.HasPrefix(server.EtcdURL, "https://127.0.0.1:") {
		t.Fatalf("embedded etcd at %q, want https on loopback", server.EtcdURL)
	}
	client := filepath.Join(server.DataDir, "etcd-pki", "client")
	if fi, err := os.Stat(filepath.Join(client, "tls.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client key %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	cred, err := testserver.EtcdTLS(filepath.Join(client, "ca.crt"), filepath.Join(client, "tls.crt"), filepath.Join(client, "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	testserver.CheckEtcdCredential(t, strings.TrimPrefix(server.EtcdURL, "https://"), cred, 5*time.Second)
}
