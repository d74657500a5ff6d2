package localcluster

import (
	"context"
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"crypto/x509/pkix"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"

	certutil "k8s.io/client-go/util/cert"
	"k8s.io/client-go/util/keyutil"
)

// writePKI creates the three CAs a cluster with an aggregated API has: the
// cluster CA (serving and client certificates of kube-apiserver), the
// front-proxy CA (the aggregator's client certificate) and Kiln's serving CA
// (the APIService caBundle), plus the service-account signing key. A
// resumed cluster reads them back instead. Leaf certificates are signed
// anew on every start, so a resumed cluster never runs on expired ones;
// those signed before stay valid, as their CAs are the same.
func (c *Cluster) writePKI(context.Context) error {
	dir := c.pkiDir()
	if c.Resumed {
		if err := c.readAuthorities(); err != nil {
			return fmt.Errorf("%w in %s: %v", ErrCannotResume, c.Dir, err)
		}
	} else {
		var err error
		if c.pki.ca, err = newAuthority(dir, "ca"); err != nil {
			return err
		}
		if c.pki.frontProxy, err = newAuthority(dir, "front-proxy-ca"); err != nil {
			return err
		}
		if c.pki.kiln, err = newAuthority(dir, "kiln-ca"); err != nil {
			return err
		}
		if err := writeServiceAccountKey(dir); err != nil {
			return err
		}
	}
	c.KilnCAFile = c.pki.kiln.CertFile
	var err error
	c.FrontProxyClient, err = c.pki.frontProxy.client(dir, "front-proxy-client", "front-proxy-client")
	return err
}

func (c *Cluster) readAuthorities() error {
	dir := c.pkiDir()
	var err error
	if c.pki.ca, err = loadAuthority(dir, "ca"); err != nil {
		return err
	}
	if c.pki.frontProxy, err = loadAuthority(dir, "front-proxy-ca"); err != nil {
		return err
	}
	if c.pki.kiln, err = loadAuthority(dir, "kiln-ca"); err != nil {
		return err
	}
	_, err = os.Stat(filepath.Join(dir, serviceAccountKeyFile))
	return err
}

// certValidity outlives any local session; leaf certificates are signed
// anew on every start, resumed or not.
const certValidity = 30 * 24 * time.Hour

// authority is a CA whose certificate and key are on disk, so that the
// components can be pointed at them by flag.
type authority struct {
	cert     *x509.Certificate
	key      crypto.Signer
	CertFile string
}

// keyPair is where a signed certificate and its key were written.
type keyPair struct {
	CertFile, KeyFile string
}

func newAuthority(dir, name string) (*authority, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	cert, err := certutil.NewSelfSignedCACert(certutil.Config{CommonName: name}, key)
	if err != nil {
		return nil, err
	}
	ca := &authority{cert: cert, key: key, CertFile: filepath.Join(dir, name+".crt")}
	if err := writePair(dir, name, cert, key); err != nil {
		return nil, err
	}
	return ca, nil
}

// loadAuthority reads back a CA newAuthority wrote, for a resumed cluster.
func loadAuthority(dir, name string) (*authority, error) {
	ca := &authority{CertFile: filepath.Join(dir, name+".crt")}
	certs, err := certutil.CertsFromFile(ca.CertFile)
	if err != nil {
		return nil, fmt.Errorf("reading CA %s: %w", name, err)
	}
	key, err := keyutil.PrivateKeyFromFile(filepath.Join(dir, name+".key"))
	if err != nil {
		return nil, fmt.Errorf("reading CA %s: %w", name, err)
	}
	signer, ok := key.(crypto.Signer)
	if !ok {
		return nil, fmt.Errorf("CA %s: the key in %s cannot sign", name, filepath.Join(dir, name+".key"))
	}
	ca.cert, ca.key = certs[0], signer
	return ca, nil
}

// serving signs a server certificate for the given DNS names and IPs.
func (ca *authority) serving(dir, name string, dnsNames []string, ips []net.IP) (keyPair, error) {
	return ca.sign(dir, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: name},
		DNSNames:    dnsNames,
		IPAddresses: ips,
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	})
}

// client signs a client certificate; kube-apiserver reads the user from the
// common name and the groups from the organizations.
func (ca *authority) client(dir, name, user string, groups ...string) (keyPair, error) {
	return ca.sign(dir, name, &x509.Certificate{
		Subject:     pkix.Name{CommonName: user, Organization: groups},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	})
}

func (ca *authority) sign(dir, name string, tmpl *x509.Certificate) (keyPair, error) {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return keyPair{}, err
	}
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return keyPair{}, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Minute)
	tmpl.NotAfter = time.Now().Add(certValidity)
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	der, err := x509.CreateCertificate(rand.Reader, tmpl, ca.cert, key.Public(), ca.key)
	if err != nil {
		return keyPair{}, fmt.Errorf("signing %s: %w", name, err)
	}
	cert, err := x509.ParseCertificate(der)
	if err != nil {
		return keyPair{}, err
	}
	if err := writePair(dir, name, cert, key); err != nil {
		return keyPair{}, err
	}
	return keyPair{CertFile: filepath.Join(dir, name+".crt"), KeyFile: filepath.Join(dir, name+".key")}, nil
}

func writePair(dir, name string, cert *x509.Certificate, key crypto.Signer) error {
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	certPEM, err := certutil.EncodeCertificates(cert)
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(dir, name+".crt"), certPEM, 0o644); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, name+".key"), keyPEM, 0o600)
}

// serviceAccountKeyFile is the RSA key that signs service-account tokens.
// kube-apiserver verifies with the same file: it derives the public key.
const serviceAccountKeyFile = "sa.key"

func writeServiceAccountKey(dir string) error {
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	keyPEM, err := keyutil.MarshalPrivateKeyToPEM(key)
	if err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, serviceAccountKeyFile), keyPEM, 0o600)
}
