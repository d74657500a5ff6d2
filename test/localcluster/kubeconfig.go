package localcluster

import (
	"context"
	"os"
	"path/filepath"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// credentials is how one user authenticates: a client certificate or a
// bearer token.
type credentials struct {
	cert  keyPair
	token string
}

// writeKubeconfig writes a self-contained kubeconfig (certificates inlined)
// so it still works if copied elsewhere.
func writeKubeconfig(file, server, caFile, user, namespace string, creds credentials) error {
	ca, err := os.ReadFile(caFile)
	if err != nil {
		return err
	}
	authInfo := &clientcmdapi.AuthInfo{Token: creds.token}
	if creds.cert.CertFile != "" {
		if authInfo.ClientCertificateData, err = os.ReadFile(creds.cert.CertFile); err != nil {
			return err
		}
		if authInfo.ClientKeyData, err = os.ReadFile(creds.cert.KeyFile); err != nil {
			return err
		}
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["kiln-local"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[user] = authInfo
	cfg.Contexts[user] = &clientcmdapi.Context{Cluster: "kiln-local", AuthInfo: user, Namespace: namespace}
	cfg.CurrentContext = user
	return clientcmd.WriteToFile(*cfg, file)
}

// restConfig loads a kubeconfig for client-go.
func restConfig(file string) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", file)
	if err != nil {
		return nil, err
	}
	// The launcher and tests create objects in bursts.
	cfg.QPS, cfg.Burst = 200, 400
	return cfg, nil
}

// componentKubeconfig writes a kubeconfig with a client certificate for a
// control-plane component's own identity, so RBAC applies to it as it
// would in a real cluster.
func (c *Cluster) componentKubeconfig(name, user string, groups ...string) (string, error) {
	cert, err := c.pki.ca.client(c.pkiDir(), name, user, groups...)
	if err != nil {
		return "", err
	}
	file := filepath.Join(c.Dir, name+".kubeconfig")
	return file, writeKubeconfig(file, c.apiserverURL(), c.pki.ca.CertFile, user, "", credentials{cert: cert})
}

// serviceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount of kiln-system with a TokenRequest token, as a Pod of that
// account would.
func (c *Cluster) serviceAccountKubeconfig(ctx context.Context, account string) (string, error) {
	return c.serviceAccountKubeconfigVia(ctx, account, filepath.Join(c.Dir, account+".kubeconfig"), c.apiserverURL(), c.pki.ca.CertFile)
}

// serviceAccountKubeconfigVia is serviceAccountKubeconfig reaching
// kube-apiserver at server, whose certificate caFile verifies.
func (c *Cluster) serviceAccountKubeconfigVia(ctx context.Context, account, kc, server, caFile string) (string, error) {
	expiry := int64((48 * time.Hour).Seconds())
	tok, err := c.kube.CoreV1().ServiceAccounts(kilnNamespace).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	user := "system:serviceaccount:" + kilnNamespace + ":" + account
	return kc, writeKubeconfig(kc, server, caFile, user, "", credentials{token: tok.Status.Token})
}
