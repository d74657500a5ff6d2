package localcluster

import (
	"os"

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
