package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
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
	caKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return p, err
	}
	now := time.Now()
	caTemplate := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: "kiln-etcd-ca"},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	caDER, err := x509.CreateCertificate(rand.Reader, caTemplate, caTemplate, &caKey.PublicKey, caKey)
	if err != nil {
		return p, err
	}
	ca, err := x509.ParseCertificate(caDER)
	if err != nil {
		return p, err
	}
	issue := func(serial int64, cn string, usage x509.ExtKeyUsage, certFile, keyFile string) error {
		key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
		if err != nil {
			return err
		}
		tmpl := &x509.Certificate{
			SerialNumber: big.NewInt(serial),
			Subject:      pkix.Name{CommonName: cn},
			NotBefore:    now.Add(-time.Hour),
			NotAfter:     now.AddDate(10, 0, 0),
			KeyUsage:     x509.KeyUsageDigitalSignature,
			ExtKeyUsage:  []x509.ExtKeyUsage{usage},
		}
		if usage == x509.ExtKeyUsageServerAuth {
			// etcd's gRPC gateway dials etcd itself with the serving
			// certificate as its client certificate.
			tmpl.ExtKeyUsage = append(tmpl.ExtKeyUsage, x509.ExtKeyUsageClientAuth)
			for _, h := range hosts {
				if ip := net.ParseIP(h); ip != nil {
					tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
				} else {
					tmpl.DNSNames = append(tmpl.DNSNames, h)
				}
			}
		}
		der, err := x509.CreateCertificate(rand.Reader, tmpl, ca, &key.PublicKey, caKey)
		if err != nil {
			return err
		}
		keyDER, err := x509.MarshalECPrivateKey(key)
		if err != nil {
			return err
		}
		if err := writePEM(certFile, "CERTIFICATE", der, 0o644); err != nil {
			return err
		}
		return writePEM(keyFile, "EC PRIVATE KEY", keyDER, 0o600)
	}
	if err := issue(2, "kiln-etcd", x509.ExtKeyUsageServerAuth, p.ServerCertFile, p.ServerKeyFile); err != nil {
		return p, fmt.Errorf("etcd serving certificate: %w", err)
	}
	if err := issue(3, "kiln-apiserver", x509.ExtKeyUsageClientAuth, p.ClientCertFile, p.ClientKeyFile); err != nil {
		return p, fmt.Errorf("etcd client certificate: %w", err)
	}
	// The client trusts etcd by the same CA. The server's CA goes last:
	// its presence says the set is complete.
	if err := writePEM(filepath.Join(filepath.Dir(p.ClientCertFile), "ca.crt"), "CERTIFICATE", caDER, 0o644); err != nil {
		return p, err
	}
	return p, writePEM(p.CAFile, "CERTIFICATE", caDER, 0o644)
}

func allExist(paths ...string) bool {
	for _, p := range paths {
		if _, err := os.Stat(p); err != nil {
			return false
		}
	}
	return true
}

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}
