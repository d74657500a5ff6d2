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

// authority is a CA made for one credential set and then forgotten: its
// key is never written, so rotating means a new set.
type authority struct {
	key  *ecdsa.PrivateKey
	cert *x509.Certificate
	der  []byte
	now  time.Time
}

func newAuthority(cn string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	now := time.Now()
	tmpl := &x509.Certificate{
		SerialNumber:          big.NewInt(1),
		Subject:               pkix.Name{CommonName: cn},
		NotBefore:             now.Add(-time.Hour),
		NotAfter:              now.AddDate(10, 0, 0),
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
		BasicConstraintsValid: true,
		IsCA:                  true,
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, tmpl, &key.PublicKey, key)
	if err != nil {
		return nil, err
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return nil, err
	}
	return &authority{key: key, cert: cert, der: der, now: now}, nil
}

// issue writes a certificate for cn signed by the authority, valid for
// hosts (DNS names or IP addresses), and its key (0600).
func (a *authority) issue(serial int64, cn string, usages []x509.ExtKeyUsage, hosts []string, certFile, keyFile string) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(serial),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    a.now.Add(-time.Hour),
		NotAfter:     a.now.AddDate(10, 0, 0),
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  usages,
	}
	for _, h := range hosts {
		if ip := net.ParseIP(h); ip != nil {
			tmpl.IPAddresses = append(tmpl.IPAddresses, ip)
		} else {
			tmpl.DNSNames = append(tmpl.DNSNames, h)
		}
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
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

func writePEM(path, kind string, der []byte, mode os.FileMode) error {
	return os.WriteFile(path, pem.EncodeToMemory(&pem.Block{Type: kind, Bytes: der}), mode)
}

// ServingCert is kiln-apiserver's serving certificate in a cluster and the
// CA that signed it, which the APIService's caBundle holds, laid out as a
// kubernetes.io/tls Secret's keys.
type ServingCert struct {
	CAFile, CertFile, KeyFile string
}

// WriteServingCert writes a new CA and a serving certificate for hosts to
// dir (0700, key 0600). As for etcd's, the CA's key is not kept.
func WriteServingCert(dir string, hosts []string) (ServingCert, error) {
	s := ServingCert{CAFile: filepath.Join(dir, "ca.crt"), CertFile: filepath.Join(dir, "tls.crt"), KeyFile: filepath.Join(dir, "tls.key")}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return s, err
	}
	ca, err := newAuthority("kiln-apiserver-ca")
	if err != nil {
		return s, err
	}
	if err := ca.issue(2, "kiln-apiserver", []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth}, hosts, s.CertFile, s.KeyFile); err != nil {
		return s, fmt.Errorf("serving certificate: %w", err)
	}
	return s, writePEM(s.CAFile, "CERTIFICATE", ca.der, 0o644)
}
