//go:build integration

package apiserver_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	certutil "k8s.io/client-go/util/cert"
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
	pki := filepath.Join(server.DataDir, "etcd-pki")
	caPEM, err := os.ReadFile(filepath.Join(pki, "client", "ca.crt"))
	if err != nil {
		t.Fatal(err)
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(caPEM) {
		t.Fatal("no CA in etcd-pki/client/ca.crt")
	}
	clientCert, err := tls.LoadX509KeyPair(filepath.Join(pki, "client", "tls.crt"), filepath.Join(pki, "client", "tls.key"))
	if err != nil {
		t.Fatal(err)
	}
	if fi, err := os.Stat(filepath.Join(pki, "client", "tls.key")); err != nil || fi.Mode().Perm() != 0o600 {
		t.Fatalf("client key %v, mode %v; want 0600", err, fi.Mode().Perm())
	}
	hostPort := strings.TrimPrefix(server.EtcdURL, "https://")

	read := func(endpoint string, tlsConfig *tls.Config) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: tlsConfig, DialTimeout: 2 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, err = c.Get(ctx, "/registry/gpu.kiln.dev", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		return err
	}
	for _, tc := range []struct {
		name     string
		endpoint string
		tls      *tls.Config
		wantOK   bool
	}{
		{"plain HTTP", "http://" + hostPort, nil, false},
		{"TLS without a client certificate", "https://" + hostPort, &tls.Config{RootCAs: roots}, false},
		{"a certificate of another CA", "https://" + hostPort, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{selfSigned(t)}}, false},
		{"the server's client certificate", "https://" + hostPort, &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{clientCert}}, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := read(tc.endpoint, tc.tls)
			if tc.wantOK && err != nil {
				t.Fatalf("read with the credential: %v", err)
			}
			if !tc.wantOK && err == nil {
				t.Fatal("read the embedded etcd without the credential")
			}
		})
	}
}

// selfSigned is a client certificate no etcd CA signed.
func selfSigned(t *testing.T) tls.Certificate {
	t.Helper()
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("intruder", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	c, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	return c
}
