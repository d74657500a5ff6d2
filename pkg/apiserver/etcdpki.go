package apiserver

import (
	"crypto/x509"
	"fmt"
	"os"
	"path/filepath"
)

// EtcdPKI is the credential of an etcd that only Kiln's API server may
// talk to: a CA of its own, etcd's serving certificate, and the one client
// certificate it accepts, the server's. The standalone server keeps one
// for its embedded etcd, so that no local user can read Kiln's objects
// around the admin token; `kiln-apiserver etcd-pki` writes one for the
// etcd StatefulSet of artifacts/deploy.
//
// Its layout is that of two Kubernetes Secrets: server/ and client/ each
// hold ca.crt, tls.crt and tls.key, so `kubectl create secret generic
// --from-file=DIR/server` makes the Secret the StatefulSet mounts. The CA's
// key is not kept: to rotate, write a new set and replace both Secrets.
type EtcdPKI struct {
	CAFile, ServerCertFile, ServerKeyFile, ClientCertFile, ClientKeyFile string
}

func etcdPKIIn(dir string) EtcdPKI {
	return EtcdPKI{
		CAFile:         filepath.Join(dir, "server", "ca.crt"),
		ServerCertFile: filepath.Join(dir, "server", "tls.crt"),
		ServerKeyFile:  filepath.Join(dir, "server", "tls.key"),
		ClientCertFile: filepath.Join(dir, "client", "tls.crt"),
		ClientKeyFile:  filepath.Join(dir, "client", "tls.key"),
	}
}

// loadOrCreateEtcdPKI keeps the standalone server's credential in dir, so
// a restart with the same data directory finds it.
func loadOrCreateEtcdPKI(dir string) (EtcdPKI, error) {
	p := etcdPKIIn(dir)
	if allExist(p.CAFile, p.ServerCertFile, p.ServerKeyFile, p.ClientCertFile, p.ClientKeyFile) {
		return p, nil
	}
	return WriteEtcdPKI(dir, []string{"localhost", "127.0.0.1"})
}

// WriteEtcdPKI writes a new credential to dir (0700, keys 0600), etcd's
// serving certificate valid for hosts (DNS names or IP addresses).
func WriteEtcdPKI(dir string, hosts []string) (EtcdPKI, error) {
	p := etcdPKIIn(dir)
	for _, d := range []string{dir, filepath.Dir(p.ServerCertFile), filepath.Dir(p.ClientCertFile)} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			return p, err
		}
	}
	ca, err := newAuthority("kiln-etcd-ca")
	if err != nil {
		return p, err
	}
	// etcd's gRPC gateway dials etcd itself with the serving certificate
	// as its client certificate.
	if err := ca.issue(2, "kiln-etcd", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth, x509.ExtKeyUsageClientAuth}, hosts, p.ServerCertFile, p.ServerKeyFile); err != nil {
		return p, fmt.Errorf("etcd serving certificate: %w", err)
	}
	if err := ca.issue(3, "kiln-apiserver", []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth}, nil, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return p, fmt.Errorf("etcd client certificate: %w", err)
	}
	// The client trusts etcd by the same CA. The server's CA goes last:
	// its presence says the set is complete.
	if err := writePEM(filepath.Join(filepath.Dir(p.ClientCertFile), "ca.crt"), "CERTIFICATE", ca.der, 0o644); err != nil {
		return p, err
	}
	return p, writePEM(p.CAFile, "CERTIFICATE", ca.der, 0o644)
}

func allExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}
