package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
)

// applyArtifacts installs the namespace and RBAC exactly as artifacts/
// ships them (the controller's too, so its RBAC is checked against the
// cluster), the PriorityClass of Claims and the policy that keeps
// accelerators to Kiln in tenant namespaces, and the flow control of
// tenants' requests. The APIService follows once the server is up.
func (c *Cluster) applyArtifacts(ctx context.Context) error {
	art := filepath.Join(c.opts.RepoRoot, "artifacts")
	return c.apply.applyFiles(ctx,
		filepath.Join(art, "namespace.yaml"),
		filepath.Join(art, "priorityclass.yaml"),
		filepath.Join(art, "policy", "accelerator-pods.yaml"),
		filepath.Join(art, "flowcontrol.yaml"),
		filepath.Join(art, "rbac", "apiserver.yaml"),
		filepath.Join(art, "rbac", "tenant-roles.yaml"),
		filepath.Join(art, "rbac", "controller.yaml"),
		filepath.Join(art, "rbac", "node-agent.yaml"),
	)
}

const (
	kilnNamespace      = "kiln-system"
	kilnServiceAccount = "kiln-apiserver"
	kilnService        = "kiln-apiserver"
)

// startKiln runs the Kiln API server in cluster mode, as its Deployment
// would: authenticated to kube-apiserver as its ServiceAccount (so the RBAC
// in artifacts/ is what lets it delegate), storing in the cluster's etcd
// under its own prefix.
func (c *Cluster) startKiln(ctx context.Context) error {
	kc, err := c.serviceAccountKubeconfig(ctx, kilnServiceAccount)
	if err != nil {
		return err
	}
	serving, err := c.pki.kiln.serving(c.pkiDir(), "kiln-apiserver",
		[]string{kilnService + "." + kilnNamespace + ".svc", kilnService + "." + kilnNamespace + ".svc.cluster.local", "localhost"},
		[]net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	c.KilnURL = "https://127.0.0.1:" + strconv.Itoa(c.ports.kiln)
	ca, err := os.ReadFile(c.KilnCAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	client := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 5 * time.Second}
	// Every replica alike but for its port: they share etcd and identity.
	for i, port := range c.kilnPorts() {
		err = c.startBinary(kilnName(i), "kiln-apiserver", append([]string{
			"--etcd-servers=" + strings.Join(c.EtcdURLs(), ","),
			"--bind-address=127.0.0.1",
			"--secure-port=" + strconv.Itoa(port),
			"--tls-cert-file=" + serving.CertFile, "--tls-private-key-file=" + serving.KeyFile,
			"--kubeconfig=" + kc, "--authentication-kubeconfig=" + kc, "--authorization-kubeconfig=" + kc,
		}, c.opts.KilnFlags...)...)
		if err != nil {
			return err
		}
	}
	for _, url := range c.KilnReplicaURLs() {
		if err := c.waitHTTP(ctx, client, url+"/readyz"); err != nil {
			return err
		}
	}
	if err := c.startBalancer(); err != nil {
		return err
	}
	return c.waitHTTP(ctx, client, c.KilnURL+"/readyz")
}

// registerAPIService points kube-apiserver at Kiln. The APIService is the
// file from artifacts/ with the CA bundle and port filled in. The Service is
// an ExternalName one naming 127.0.0.1: an EndpointSlice may not hold a
// loopback address, but the aggregator dials an ExternalName as given and
// verifies the certificate against the Service's DNS name.
func (c *Cluster) registerAPIService(ctx context.Context) error {
	svc := corev1ac.Service(kilnService, kilnNamespace).WithSpec(corev1ac.ServiceSpec().
		WithType(corev1.ServiceTypeExternalName).
		WithExternalName("127.0.0.1").
		// The port of artifacts/deploy/apiserver.yaml's Service, so the
		// kustomization still applies over this one; the aggregator dials
		// the APIService's port, which is where Kiln listens.
		WithPorts(corev1ac.ServicePort().WithName("https").WithPort(443).WithTargetPort(intstr.FromInt32(int32(c.ports.kiln)))))
	// Applied, as a resumed cluster has it already.
	if _, err := c.kube.CoreV1().Services(kilnNamespace).Apply(ctx, svc, metav1.ApplyOptions{FieldManager: fieldManager, Force: true}); err != nil {
		return err
	}
	objs, err := readManifests(filepath.Join(c.opts.RepoRoot, "artifacts", "apiservice.yaml"))
	if err != nil {
		return err
	}
	if len(objs) != 1 || objs[0].GetKind() != "APIService" {
		return errors.New("artifacts/apiservice.yaml must hold exactly one APIService")
	}
	apisvc := objs[0]
	ca, err := os.ReadFile(c.KilnCAFile)
	if err != nil {
		return err
	}
	if err := unstructured.SetNestedField(apisvc.Object, base64.StdEncoding.EncodeToString(ca), "spec", "caBundle"); err != nil {
		return err
	}
	if err := unstructured.SetNestedField(apisvc.Object, int64(c.ports.kiln), "spec", "service", "port"); err != nil {
		return err
	}
	if err := c.apply.apply(ctx, apisvc); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	gvr := schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}
	return c.poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(gvr).Get(ctx, apisvc.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}
