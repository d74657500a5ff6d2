package apiserver

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/tls"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/pem"
	"fmt"
	"math/big"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apiserver/pkg/apis/apiserver"
	"k8s.io/apiserver/pkg/authentication/authenticator"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/request/headerrequest"
	"k8s.io/apiserver/pkg/server/dynamiccertificates"
)

// rotatingCA is a CA bundle provider whose bundle a test can replace, as
// the front-proxy CA's ConfigMap or file is on rotation.
type rotatingCA struct {
	dynamiccertificates.Notifier
	current atomic.Pointer[dynamiccertificates.CAContentProvider]
}

func newRotatingCA(t testing.TB, a *authority) *rotatingCA {
	r := &rotatingCA{}
	r.rotate(t, a)
	return r
}

func (r *rotatingCA) rotate(t testing.TB, a *authority) {
	t.Helper()
	p, err := dynamiccertificates.NewStaticCAContent("front-proxy-ca", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: a.der}))
	if err != nil {
		t.Fatal(err)
	}
	r.current.Store(&p)
}

func (r *rotatingCA) Name() string                             { return "front-proxy-ca" }
func (r *rotatingCA) AddListener(dynamiccertificates.Listener) {}
func (r *rotatingCA) CurrentCABundleContent() []byte {
	return (*r.current.Load()).CurrentCABundleContent()
}
func (r *rotatingCA) VerifyOptions() (x509.VerifyOptions, bool) {
	return (*r.current.Load()).VerifyOptions()
}

// leafFor is a client certificate for cn from a, valid until notAfter.
func leafFor(t testing.TB, a *authority, cn string, notAfter time.Time) *x509.Certificate {
	t.Helper()
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	tmpl := &x509.Certificate{
		SerialNumber: big.NewInt(time.Now().UnixNano()),
		Subject:      pkix.Name{CommonName: cn},
		NotBefore:    a.now.Add(-time.Hour),
		NotAfter:     notAfter,
		KeyUsage:     x509.KeyUsageDigitalSignature,
		ExtKeyUsage:  []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, a.cert, &key.PublicKey, a.key)
	if err != nil {
		t.Fatal(err)
	}
	c, err := x509.ParseCertificate(der)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func frontProxyConfig(ca dynamiccertificates.CAContentProvider) *authenticatorfactory.RequestHeaderConfig {
	return &authenticatorfactory.RequestHeaderConfig{
		UsernameHeaders:     headerrequest.StaticStringSlice{"X-Remote-User"},
		UIDHeaders:          headerrequest.StaticStringSlice{"X-Remote-Uid"},
		GroupHeaders:        headerrequest.StaticStringSlice{"X-Remote-Group"},
		ExtraHeaderPrefixes: headerrequest.StaticStringSlice{"X-Remote-Extra-"},
		CAContentProvider:   ca,
		AllowedClientNames:  headerrequest.StaticStringSlice{"front-proxy-client"},
	}
}

// serverAuthenticator is what k8s.io/apiserver's delegating options build
// from these CAs: request-header, client certificates (clientCA, if any),
// then anonymous.
func serverAuthenticator(t testing.TB, rh *authenticatorfactory.RequestHeaderConfig, clientCA dynamiccertificates.CAContentProvider) authenticator.Request {
	t.Helper()
	server, _, err := authenticatorfactory.DelegatingAuthenticatorConfig{
		Anonymous:                          &apiserver.AnonymousAuthConfig{Enabled: true},
		RequestHeaderConfig:                rh,
		ClientCertificateCAContentProvider: clientCA,
	}.New()
	if err != nil {
		t.Fatal(err)
	}
	return server
}

func proxied(state *tls.ConnectionState, headers map[string]string) *http.Request {
	req, _ := http.NewRequest(http.MethodGet, "https://kiln.test/apis", nil)
	req.TLS = state
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	return req
}

func describe(resp *authenticator.Response, ok bool, err error) string {
	if err != nil {
		return "error"
	}
	if !ok {
		return "none"
	}
	return fmt.Sprintf("%s %q %v", resp.User.GetName(), resp.User.GetUID(), resp.User.GetGroups())
}

// The cache in front answers every request as k8s.io/apiserver's
// delegating authenticator alone does, and strips the same headers.
func TestFrontProxyAuthenticatorAnswersAsTheServer(t *testing.T) {
	proxyCA, err := newAuthority("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientCA, err := newAuthority("client-ca")
	if err != nil {
		t.Fatal(err)
	}
	clientBundle, err := dynamiccertificates.NewStaticCAContent("client-ca", pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: clientCA.der}))
	if err != nil {
		t.Fatal(err)
	}
	rh := frontProxyConfig(newRotatingCA(t, proxyCA))
	server := serverAuthenticator(t, rh, clientBundle)
	later := time.Now().AddDate(1, 0, 0)
	conn := func(c *x509.Certificate) *tls.ConnectionState {
		return &tls.ConnectionState{PeerCertificates: []*x509.Certificate{c}}
	}
	proxy := conn(leafFor(t, proxyCA, "front-proxy-client", later))
	tenant := map[string]string{"X-Remote-User": "tenant-a", "X-Remote-Uid": "u-1", "X-Remote-Group": "team-a"}
	for _, tc := range []struct {
		name    string
		tls     *tls.ConnectionState
		headers map[string]string
		want    string
		// marked: the user is proxiedUser, authorized as proxiedauthz.go says.
		marked bool
	}{
		{name: "front proxy", tls: proxy, headers: tenant, want: `tenant-a "u-1" [team-a system:authenticated]`, marked: true},
		{name: "front proxy, no user header", tls: proxy, headers: map[string]string{"X-Remote-Group": "system:masters"}, want: "error"},
		{name: "front proxy CA, name not allowed", tls: conn(leafFor(t, proxyCA, "someone", later)), headers: tenant, want: "error"},
		{name: "front proxy, expired", tls: conn(leafFor(t, proxyCA, "front-proxy-client", time.Now().Add(-time.Minute))), headers: tenant, want: "error"},
		{name: "client certificate naming another user in headers", tls: conn(leafFor(t, clientCA, "tenant-b", later)), headers: tenant, want: `tenant-b "" [system:authenticated]`},
		{name: "client CA, allowed proxy name", tls: conn(leafFor(t, clientCA, "front-proxy-client", later)), headers: tenant, want: `front-proxy-client "" [system:authenticated]`},
		{name: "no certificate", headers: tenant, want: `system:anonymous "" [system:unauthenticated]`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			cached := withFrontProxyCache(rh, server)
			for i := range 2 { // the second look may come from the cache
				alone, viaCache := proxied(tc.tls, tc.headers), proxied(tc.tls, tc.headers)
				want := describe(server.AuthenticateRequest(alone))
				resp, ok, err := cached.AuthenticateRequest(viaCache)
				got := describe(resp, ok, err)
				if ok {
					if _, marked := resp.User.(proxiedUser); marked != tc.marked {
						t.Errorf("request %d: user marked as proxied: %v, want %v", i+1, marked, tc.marked)
					}
				}
				if want != tc.want {
					t.Fatalf("the server's own authenticator: %s, the test expects %s", want, tc.want)
				}
				if got != want {
					t.Errorf("request %d: %s, the server's own authenticator %s", i+1, got, want)
				}
				for _, h := range []string{"X-Remote-User", "X-Remote-Uid", "X-Remote-Group"} {
					if a, b := alone.Header.Get(h), viaCache.Header.Get(h); a != b {
						t.Errorf("request %d: header %s left %q, the server's own %q", i+1, h, b, a)
					}
				}
			}
		})
	}
}

func TestFrontProxyVerifiesOncePerCertificate(t *testing.T) {
	proxyCA, err := newAuthority("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	ca := newRotatingCA(t, proxyCA)
	now := time.Now()
	leaf := leafFor(t, proxyCA, "front-proxy-client", now.Add(time.Hour))
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leaf}}
	inner := newFrontProxyAuthenticator(frontProxyConfig(ca))
	inner.now = func() time.Time { return now }
	verifies := 0
	inner.verify = func(c *x509.Certificate, opts x509.VerifyOptions) ([][]*x509.Certificate, error) {
		verifies++
		return c.Verify(opts)
	}
	look := func(step string, wantUser string, wantVerifies int) {
		t.Helper()
		resp, ok, err := inner.AuthenticateRequest(proxied(state, map[string]string{"X-Remote-User": "tenant-a"}))
		got := ""
		if ok && err == nil {
			got = resp.User.GetName()
		}
		if got != wantUser || verifies != wantVerifies {
			t.Errorf("%s: user %q after %d verifications, want %q after %d", step, got, verifies, wantUser, wantVerifies)
		}
	}
	look("first request", "tenant-a", 1)
	look("second request on the connection", "tenant-a", 1)
	now = now.Add(verifiedFor)
	look("verifiedFor later", "tenant-a", 2)
	other, err := newAuthority("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	ca.rotate(t, other)
	look("front-proxy CA rotated", "", 3)
	look("still rotated", "", 4)
	ca.rotate(t, proxyCA)
	look("rotated back", "tenant-a", 5)
	now = leaf.NotAfter.Add(time.Second)
	look("certificate expired", "", 6)
}

func TestFrontProxyCacheIsBounded(t *testing.T) {
	proxyCA, err := newAuthority("front-proxy-ca")
	if err != nil {
		t.Fatal(err)
	}
	f := newFrontProxyAuthenticator(frontProxyConfig(newRotatingCA(t, proxyCA)))
	f.verify = func(c *x509.Certificate, _ x509.VerifyOptions) ([][]*x509.Certificate, error) {
		return [][]*x509.Certificate{{c}}, nil
	}
	leaf := leafFor(t, proxyCA, "front-proxy-client", time.Now().Add(time.Hour))
	for range maxVerified + 10 {
		// A connection of its own: a certificate of its own.
		c := *leaf
		if _, ok, _ := f.AuthenticateRequest(proxied(&tls.ConnectionState{PeerCertificates: []*x509.Certificate{&c}}, map[string]string{"X-Remote-User": "a"})); !ok {
			t.Fatal("not authenticated")
		}
		if len(f.verified) > maxVerified {
			t.Fatalf("%d certificates remembered, want at most %d", len(f.verified), maxVerified)
		}
	}
}

// BenchmarkAuthenticateFrontProxy is the authentication of one proxied
// request on a connection that has made others: k8s.io/apiserver's
// delegating authenticator alone, and with the cache in front.
func BenchmarkAuthenticateFrontProxy(b *testing.B) {
	proxyCA, err := newAuthority("front-proxy-ca")
	if err != nil {
		b.Fatal(err)
	}
	rh := frontProxyConfig(newRotatingCA(b, proxyCA))
	server := serverAuthenticator(b, rh, nil)
	state := &tls.ConnectionState{PeerCertificates: []*x509.Certificate{leafFor(b, proxyCA, "front-proxy-client", time.Now().AddDate(1, 0, 0))}}
	headers := map[string]string{"X-Remote-User": "tenant-a", "X-Remote-Group": "team-a"}
	for _, bc := range []struct {
		name string
		auth authenticator.Request
	}{
		{"k8s.io/apiserver", server},
		{"cached", withFrontProxyCache(rh, server)},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				if _, ok, err := bc.auth.AuthenticateRequest(proxied(state, headers)); !ok || err != nil {
					b.Fatalf("not authenticated: %v", err)
				}
			}
		})
	}
}
