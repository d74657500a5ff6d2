package apiserver

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/spf13/pflag"
	"go.etcd.io/etcd/client/pkg/v3/transport"
	"go.etcd.io/etcd/server/v3/embed"
	"k8s.io/apiserver/pkg/authentication/authenticatorfactory"
	"k8s.io/apiserver/pkg/authentication/user"
	"k8s.io/apiserver/pkg/authorization/authorizerfactory"
	genericapiserver "k8s.io/apiserver/pkg/server"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	"k8s.io/klog/v2"
)

// StandaloneOptions run Kiln without a cluster: an embedded etcd in a data
// directory, a self-signed certificate, one generated admin token, all on
// loopback. Nothing is delegated, so nothing but the admin token gets in.
type StandaloneOptions struct {
	Enabled bool
	// DataDir holds the etcd data, the serving certificate, the admin token
	// and the kubeconfig, so a restart keeps all of them.
	DataDir string
	// KubeconfigPath is where the admin kubeconfig is written.
	KubeconfigPath string

	token   string
	etcd    *embed.Etcd
	etcdURL string
}

// AdminUser is the user the generated token authenticates as.
const AdminUser = "kiln-admin"

// StandalonePort is the secure port of standalone mode unless --secure-port is set.
const StandalonePort = 8443

// AddFlags adds the flags of standalone mode.
func (s *StandaloneOptions) AddFlags(fs *pflag.FlagSet) {
	fs.BoolVar(&s.Enabled, "standalone", s.Enabled,
		"Run without a cluster: embedded etcd, self-signed certificate and a generated admin token, on 127.0.0.1 only.")
	fs.StringVar(&s.DataDir, "data-dir", s.DataDir,
		"Standalone mode: directory for etcd data, certificates, the admin token and the kubeconfig.")
	fs.StringVar(&s.KubeconfigPath, "write-kubeconfig", s.KubeconfigPath,
		"Standalone mode: where to write the admin kubeconfig (default <data-dir>/kubeconfig).")
}

func (s *StandaloneOptions) complete(ro *genericoptions.RecommendedOptions, bindAddressSet, securePortSet bool) error {
	if !bindAddressSet {
		ro.SecureServing.BindAddress = net.ParseIP("127.0.0.1")
	}
	if !securePortSet {
		ro.SecureServing.BindPort = StandalonePort
	}
	if s.KubeconfigPath == "" {
		s.KubeconfigPath = filepath.Join(s.DataDir, "kubeconfig")
	}
	// Keep the certificate with the rest of the data unless --cert-dir was set.
	if dir := ro.SecureServing.ServerCert.CertDirectory; dir == "" || dir == genericoptions.NewSecureServingOptions().ServerCert.CertDirectory {
		ro.SecureServing.ServerCert.CertDirectory = filepath.Join(s.DataDir, "certs")
	}
	// No cluster to delegate to or to read flow-control and admission
	// configuration from.
	ro.Authentication = nil
	ro.Authorization = nil
	ro.CoreAPI = nil
	ro.Admission = nil
	ro.Features.EnablePriorityAndFairness = false
	return nil
}

func (s *StandaloneOptions) validate(ro *genericoptions.RecommendedOptions) []error {
	var errs []error
	if ip := ro.SecureServing.BindAddress; ip == nil || !ip.Equal(net.ParseIP("127.0.0.1")) {
		errs = append(errs, fmt.Errorf("--bind-address=%v: --standalone serves on 127.0.0.1 only; drop the flag or run in cluster mode", ip))
	}
	if len(ro.Etcd.StorageConfig.Transport.ServerList) > 0 {
		errs = append(errs, errors.New("--etcd-servers: --standalone runs its own embedded etcd; drop the flag or run in cluster mode"))
	}
	if s.DataDir == "" {
		errs = append(errs, errors.New("--data-dir: --standalone needs a directory for its data"))
	}
	errs = append(errs, ro.SecureServing.Validate()...)
	errs = append(errs, ro.Audit.Validate()...)
	errs = append(errs, ro.Features.Validate()...)
	return errs
}

// applyTo starts the embedded etcd and fills in what RecommendedOptions.ApplyTo
// would, with a token authenticator and a system:masters-only authorizer in
// place of delegation.
func (s *StandaloneOptions) applyTo(ctx context.Context, ro *genericoptions.RecommendedOptions, c *genericapiserver.RecommendedConfig) (_ *kilnClients, err error) {
	if err := os.MkdirAll(s.DataDir, 0o700); err != nil {
		return nil, fmt.Errorf("creating --data-dir: %w", err)
	}
	pki, err := loadOrCreateEtcdPKI(filepath.Join(s.DataDir, "etcd-pki"))
	if err != nil {
		return nil, fmt.Errorf("the embedded etcd's certificates: %w", err)
	}
	s.etcd, s.etcdURL, err = startEtcd(ctx, filepath.Join(s.DataDir, "etcd"), pki)
	if err != nil {
		return nil, err
	}
	tr := &ro.Etcd.StorageConfig.Transport
	tr.ServerList = []string{s.etcdURL}
	tr.CertFile, tr.KeyFile, tr.TrustedCAFile = pki.ClientCertFile, pki.ClientKeyFile, pki.CAFile
	if err := ro.Etcd.ApplyTo(&c.Config); err != nil {
		return nil, err
	}
	if err := ro.SecureServing.ApplyToConfig(&c.Config); err != nil {
		return nil, err
	}
	if err := ro.Audit.ApplyTo(&c.Config); err != nil {
		return nil, err
	}
	if err := ro.Features.ApplyTo(&c.Config, nil, nil); err != nil {
		return nil, err
	}

	if s.token, err = loadOrCreateToken(filepath.Join(s.DataDir, "admin-token")); err != nil {
		return nil, err
	}
	c.Authentication.Authenticator = authenticatorfactory.NewFromTokens(map[string]*user.DefaultInfo{
		s.token: {Name: AdminUser, Groups: []string{user.SystemPrivilegedGroup, user.AllAuthenticated}},
	}, nil)
	c.Authorization.Authorizer = authorizerfactory.NewPrivilegedGroups(user.SystemPrivilegedGroup)
	genericapiserver.AuthorizeClientBearerToken(c.LoopbackClientConfig, &c.Authentication, &c.Authorization)

	k, err := newKilnClients(c.LoopbackClientConfig, nil)
	if err != nil {
		return nil, err
	}
	if c.AdmissionControl, err = standaloneAdmission(c, k); err != nil {
		return nil, err
	}
	return k, nil
}

// stop closes the embedded etcd; the server calls it once it has drained.
func (s *StandaloneOptions) stop() {
	if s.etcd != nil {
		s.etcd.Close()
	}
}

// EtcdClientURL is the embedded etcd's client URL once the server runs;
// only the client certificate in the data directory's etcd-pki opens it.
func (s *StandaloneOptions) EtcdClientURL() string { return s.etcdURL }

// startEtcd runs a single-member etcd on loopback that serves TLS and
// takes only clients with a certificate of pki's CA, on its client and its
// peer listener alike.
func startEtcd(ctx context.Context, dir string, pki EtcdPKI) (*embed.Etcd, string, error) {
	ports, err := freePorts(2)
	if err != nil {
		return nil, "", err
	}
	client := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[0]))}
	peer := url.URL{Scheme: "https", Host: net.JoinHostPort("127.0.0.1", fmt.Sprint(ports[1]))}

	cfg := embed.NewConfig()
	cfg.Name = "kiln"
	cfg.Dir = dir
	cfg.ListenClientUrls, cfg.AdvertiseClientUrls = []url.URL{client}, []url.URL{client}
	cfg.ListenPeerUrls, cfg.AdvertisePeerUrls = []url.URL{peer}, []url.URL{peer}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	cfg.LogLevel = "error"
	cfg.ListenMetricsUrls = nil
	tls := transport.TLSInfo{CertFile: pki.ServerCertFile, KeyFile: pki.ServerKeyFile, TrustedCAFile: pki.CAFile, ClientCertAuth: true}
	cfg.ClientTLSInfo, cfg.PeerTLSInfo = tls, tls

	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, "", fmt.Errorf("starting embedded etcd in %s: %w", dir, err)
	}
	select {
	case <-e.Server.ReadyNotify():
	case err := <-e.Err():
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd in %s: %w", dir, err)
	case <-time.After(time.Minute):
		e.Close()
		return nil, "", fmt.Errorf("embedded etcd in %s not ready after a minute", dir)
	}
	klog.FromContext(ctx).Info("Embedded etcd is ready", "dir", dir, "client", client.String())
	return e, client.String(), nil
}

// freePorts asks the kernel for n unused loopback ports.
func freePorts(n int) ([]int, error) {
	var ports []int
	var listeners []net.Listener
	defer func() {
		for _, l := range listeners {
			l.Close()
		}
	}()
	for i := 0; i < n; i++ {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, fmt.Errorf("finding a free port for etcd: %w", err)
		}
		listeners = append(listeners, l)
		ports = append(ports, l.Addr().(*net.TCPAddr).Port)
	}
	return ports, nil
}

func loadOrCreateToken(path string) (string, error) {
	if b, err := os.ReadFile(path); err == nil && len(strings.TrimSpace(string(b))) > 0 {
		return strings.TrimSpace(string(b)), nil
	}
	buf := make([]byte, 32)
	if _, err := rand.Read(buf); err != nil {
		return "", err
	}
	token := hex.EncodeToString(buf)
	if err := os.WriteFile(path, []byte(token+"\n"), 0o600); err != nil {
		return "", fmt.Errorf("writing admin token: %w", err)
	}
	return token, nil
}

// writeKubeconfig writes the admin kubeconfig and returns its path.
func (s *StandaloneOptions) writeKubeconfig(ss *genericoptions.SecureServingOptionsWithLoopback) (string, error) {
	ca, err := os.ReadFile(ss.ServerCert.CertKey.CertFile)
	if err != nil {
		return "", fmt.Errorf("reading serving certificate for the kubeconfig: %w", err)
	}
	server := "https://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(ss.BindPort))
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kiln"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[AdminUser] = &clientcmdapi.AuthInfo{Token: s.token}
	cfg.Contexts["kiln"] = &clientcmdapi.Context{Cluster: "kiln", AuthInfo: AdminUser, Namespace: "default"}
	cfg.CurrentContext = "kiln"
	if err := os.MkdirAll(filepath.Dir(s.KubeconfigPath), 0o700); err != nil {
		return "", err
	}
	if err := clientcmd.WriteToFile(*cfg, s.KubeconfigPath); err != nil {
		return "", fmt.Errorf("writing kubeconfig: %w", err)
	}
	return s.KubeconfigPath, nil
}
