package apiserver

import (
	"crypto/x509"
	"net/http"
	"slices"
	"sync"
	"time"

	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/group"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	unionauth "k8s.io/apiserver/pkg/authentication/request/union"
)

// Every request kube-apiserver's aggregator proxies to Kiln carries the
// front-proxy client certificate, and k8s.io/apiserver verifies its chain
// again on each one: an ECDSA signature check that was 7% of
// kiln-apiserver's CPU in bench-api's create profile and 16% in its get
// profile, for a certificate that does not change on the connection.
// frontProxyAuthenticator remembers a chain it verified, per connection's
// certificate and CA bundle, until the earliest NotAfter in the chain or
// verifiedFor, and then reads the identity from the request headers as
// k8s.io/apiserver's request-header authenticator does.
const (
	verifiedFor = 5 * time.Minute
	// maxVerified bounds the remembered certificates; past it, the expired
	// ones go, and then all.
	maxVerified = 1024
)

type verifiedKey struct {
	// leaf is the connection's certificate: one pointer per TLS
	// connection, shared by all its requests.
	leaf *x509.Certificate
	// roots is the front-proxy CA bundle the chain was verified against;
	// a new bundle is a new pool.
	roots *x509.CertPool
}

type frontProxyAuthenticator struct {
	config  *authenticatorfactory.RequestHeaderConfig
	headers authenticator.Request
	now     func() time.Time
	verify  func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error)

	mu       sync.Mutex
	verified map[verifiedKey]time.Time
}

// withFrontProxyCache puts an authenticator of front-proxy requests that
// verifies each connection's certificate once before the server's own
// authenticator. It answers only a request that the server's own would
// answer the same way with its first authenticator, request-header;
// anything else (no certificate, one not from the front-proxy CA, a name
// not allowed, no user header) goes to the server's own, whole.
func withFrontProxyCache(c *authenticatorfactory.RequestHeaderConfig, next authenticator.Request) authenticator.Request {
	// The server's own adds system:authenticated after its union. The mark
	// goes on last, so nothing after takes it off (proxiedauthz.go).
	return unionauth.New(markProxied(group.NewAuthenticatedGroupAdder(newFrontProxyAuthenticator(c))), next)
}

func newFrontProxyAuthenticator(c *authenticatorfactory.RequestHeaderConfig) *frontProxyAuthenticator {
	return &frontProxyAuthenticator{
		config:  c,
		headers: headerrequest.NewDynamic(c.UsernameHeaders, c.UIDHeaders, c.GroupHeaders, c.ExtraHeaderPrefixes),
		now:     time.Now,
		verify: func(leaf *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error) {
			return leaf.Verify(opts)
		},
		verified: map[verifiedKey]time.Time{},
	}
}

// AuthenticateRequest never fails a request: what it cannot answer, the
// next authenticator does.
func (f *frontProxyAuthenticator) AuthenticateRequest(req *http.Request) (*authenticator.Response, bool, error) {
	if req.TLS == nil || len(req.TLS.PeerCertificates) == 0 {
		return nil, false, nil
	}
	opts, ok := f.config.CAContentProvider.VerifyOptions()
	if !ok {
		return nil, false, nil
	}
	leaf := req.TLS.PeerCertificates[0]
	if !f.verifiedChain(leaf, req.TLS.PeerCertificates[1:], opts) {
		return nil, false, nil
	}
	if names := f.config.AllowedClientNames.Value(); len(names) > 0 && !slices.Contains(names, leaf.Subject.CommonName) {
		return nil, false, nil
	}
	return f.headers.AuthenticateRequest(req)
}

func (f *frontProxyAuthenticator) verifiedChain(leaf *x509.Certificate, intermediates []*x509.Certificate, opts x509.VerifyOptions) bool {
	key := verifiedKey{leaf: leaf, roots: opts.Roots}
	now := f.now()
	f.mu.Lock()
	until, ok := f.verified[key]
	f.mu.Unlock()
	if ok && now.Before(until) {
		return true
	}
	if opts.Intermediates == nil && len(intermediates) > 0 {
		opts.Intermediates = x509.NewCertPool()
		for _, c := range intermediates {
			opts.Intermediates.AddCert(c)
		}
	}
	opts.CurrentTime = now
	chains, err := f.verify(leaf, opts)
	if err != nil || len(chains) == 0 {
		return false
	}
	// Good until the first certificate of a chain expires: a later chain
	// through a longer-lived intermediate would only be found by verifying
	// again, which is what happens then.
	until = now.Add(verifiedFor)
	for _, chain := range chains {
		for _, c := range chain {
			if c.NotAfter.Before(until) {
				until = c.NotAfter
			}
		}
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if len(f.verified) >= maxVerified {
		for k, t := range f.verified {
			if !now.Before(t) {
				delete(f.verified, k)
			}
		}
		if len(f.verified) >= maxVerified {
			clear(f.verified)
		}
	}
	f.verified[key] = until
	return true
}
