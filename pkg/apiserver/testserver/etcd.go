package testserver

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"os"
	"testing"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"k8s.io/apimachinery/pkg/util/wait"
	certutil "k8s.io/client-go/util/cert"
)

// EtcdTLS is the client TLS configuration of an etcd credential: its CA
// and a client key pair, as files.
func EtcdTLS(caFile, certFile, keyFile string) (*tls.Config, error) {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return nil, err
	}
	roots := x509.NewCertPool()
	if !roots.AppendCertsFromPEM(ca) {
		return nil, fmt.Errorf("no certificate in %s", caFile)
	}
	cert, err := tls.LoadX509KeyPair(certFile, keyFile)
	if err != nil {
		return nil, err
	}
	return &tls.Config{RootCAs: roots, Certificates: []tls.Certificate{cert}}, nil
}

// CheckEtcdCredential fails t unless the etcd at hostPort reads with cred,
// within startup, and refuses plain HTTP, TLS without a client certificate
// and a client certificate no CA of its signed.
func CheckEtcdCredential(t *testing.T, hostPort string, cred *tls.Config, startup time.Duration) {
	t.Helper()
	read := func(ctx context.Context, endpoint string, cfg *tls.Config) error {
		c, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, TLS: cfg, DialTimeout: 2 * time.Second})
		if err != nil {
			return err
		}
		defer c.Close()
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_, err = c.Get(ctx, "/registry", clientv3.WithPrefix(), clientv3.WithKeysOnly(), clientv3.WithLimit(1))
		return err
	}
	endpoint := "https://" + hostPort
	if err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, startup, true, func(ctx context.Context) (bool, error) {
		return read(ctx, endpoint, cred) == nil, nil
	}); err != nil {
		t.Fatalf("read with the credential: %v", read(context.Background(), endpoint, cred))
	}
	certPEM, keyPEM, err := certutil.GenerateSelfSignedCertKey("intruder", nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	intruder, err := tls.X509KeyPair(certPEM, keyPEM)
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name     string
		endpoint string
		tls      *tls.Config
	}{
		{"plain HTTP", "http://" + hostPort, nil},
		{"TLS without a client certificate", endpoint, &tls.Config{RootCAs: cred.RootCAs}},
		{"a certificate of another CA", endpoint, &tls.Config{RootCAs: cred.RootCAs, Certificates: []tls.Certificate{intruder}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if err := read(context.Background(), tc.endpoint, tc.tls); err == nil {
				t.Fatal("read etcd without the credential")
			}
		})
	}
}
