package localcluster

import (
	"context"
	"net"
	"path/filepath"
	"strconv"
	"strings"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

func (c *Cluster) startAPIServer(ctx context.Context) error {
	dir := c.pkiDir()
	serving, err := c.pki.ca.serving(dir, "kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1"), net.ParseIP(realNodeIP)})
	if err != nil {
		return err
	}
	// Tokens signed before a resume stay valid: the key is the same.
	saKey := filepath.Join(dir, serviceAccountKeyFile)
	// Its client certificate to kubelets: a real one authenticates every
	// request and asks kube-apiserver whether this user may make it.
	kubeletClient, err := c.pki.ca.client(dir, "kube-apiserver-kubelet-client", "kube-apiserver-kubelet-client", "system:masters")
	if err != nil {
		return err
	}
	admin, err := c.pki.ca.client(dir, "admin", "kiln-admin", "system:masters")
	if err != nil {
		return err
	}
	if err := writeKubeconfig(c.AdminKubeconfig, c.apiserverURL(), c.pki.ca.CertFile, "kiln-admin", "default", credentials{cert: admin}); err != nil {
		return err
	}
	if c.AdminConfig, err = restConfig(c.AdminKubeconfig); err != nil {
		return err
	}
	if c.kube, err = kubernetes.NewForConfig(c.AdminConfig); err != nil {
		return err
	}
	if c.apply, err = newApplier(c.AdminConfig); err != nil {
		return err
	}
	err = c.start("kube-apiserver", append([]string{
		"--etcd-servers=" + strings.Join(c.EtcdURLs(), ","),
		"--bind-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(c.ports.apiserver),
		"--cert-dir=" + filepath.Join(c.Dir, "kube-apiserver"),
		"--tls-cert-file=" + serving.CertFile, "--tls-private-key-file=" + serving.KeyFile,
		"--client-ca-file=" + c.pki.ca.CertFile,
		"--authorization-mode=Node,RBAC",
		// A kubelet (real-0's) may then change only its own Node and the
		// Pods bound to it; no Service may claim an external IP, with which
		// a tenant would capture traffic meant for another's node port.
		"--enable-admission-plugins=NodeRestriction,DenyServiceExternalIPs",
		"--service-cluster-ip-range=10.96.0.0/16",
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-account-key-file=" + saKey,
		"--service-account-signing-key-file=" + saKey,
		// The aggregation layer: kube-apiserver authenticates to Kiln with
		// this client certificate and passes the user in these headers.
		"--requestheader-client-ca-file=" + c.pki.frontProxy.CertFile,
		"--requestheader-allowed-names=front-proxy-client",
		"--requestheader-username-headers=X-Remote-User",
		"--requestheader-group-headers=X-Remote-Group",
		"--requestheader-extra-headers-prefix=X-Remote-Extra-",
		"--proxy-client-cert-file=" + c.FrontProxyClient.CertFile,
		"--proxy-client-key-file=" + c.FrontProxyClient.KeyFile,
		"--allow-privileged=true",
		"--profiling=false",
		// Logs and exec go to the node's kubelet, kwok's server here; its
		// nodes have no resolvable hostname, only an address.
		"--kubelet-preferred-address-types=InternalIP",
		"--kubelet-client-certificate=" + kubeletClient.CertFile, "--kubelet-client-key=" + kubeletClient.KeyFile,
	}, append(c.inClusterFlags(), c.opts.APIServerFlags...)...)...)
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(c.AdminConfig)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, client, c.apiserverURL()+"/readyz")
}

// inClusterFlags are kube-apiserver's flags when Kiln runs as Pods on
// real-0. The aggregator dials one of the kiln-apiserver Service's Pods by
// its own address, inside real-0's namespace, not a Service address that
// nothing outside that namespace routes. The "kubernetes" Service names
// real-0's address, where the launcher forwards to kube-apiserver on
// loopback, so Pods reach it as in any cluster.
func (c *Cluster) inClusterFlags() []string {
	if !c.opts.KilnInCluster {
		return nil
	}
	return []string{"--enable-aggregator-routing=true", "--advertise-address=" + realNodeIP}
}
