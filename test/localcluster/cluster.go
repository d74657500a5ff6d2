// Package localcluster runs a real Kubernetes control plane on 127.0.0.1
// with Kiln registered in it: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok simulating GPU nodes, and the Kiln API server in
// cluster mode behind the APIService from artifacts/. `make up` and the
// end-to-end tests both start it from here.
package localcluster

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/base64"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
	corev1ac "k8s.io/client-go/applyconfigurations/core/v1"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	nodefast "sigs.k8s.io/kwok/kustomize/stage/node/fast"
	nodeheartbeat "sigs.k8s.io/kwok/kustomize/stage/node/heartbeat-with-lease"
	podfast "sigs.k8s.io/kwok/kustomize/stage/pod/fast"
)

// Options says where things are and what to create.
type Options struct {
	// Dir holds the PKI, etcd data, kubeconfigs and component logs. It is
	// wiped first, unless Resume is set.
	Dir string
	// Resume starts the cluster whose state is in Dir again, with its
	// certificates, service-account key, ports and etcd data, so its
	// objects are still there and kubeconfigs written before still work.
	// A missing or empty Dir starts a new cluster; a Dir holding anything
	// else fails with ErrCannotResume rather than guess.
	Resume bool
	// BinDir holds the binaries `make control-plane build` produced.
	BinDir string
	// RepoRoot is where artifacts/ is read from.
	RepoRoot string
	// Tenants get a namespace of their own name, a user of that name bound
	// to the "edit" ClusterRole there, and a kubeconfig.
	Tenants []string
	// Nodes are the simulated nodes; DefaultInventory if nil.
	Nodes []NodeSpec
	// Log receives progress lines.
	Log io.Writer
	// ControllerFlags are added to kiln-controller's command line.
	ControllerFlags []string
	// NoController leaves kiln-controller out: the API alone, as the API
	// benchmark measures it.
	NoController bool
	// APIServerFlags and KilnFlags are added last to kube-apiserver's and
	// kiln-apiserver's command lines, so they override the defaults here.
	APIServerFlags, KilnFlags []string
	// PersistentVolumes are created as the admin, or kept if they exist:
	// the local cluster has no provisioner.
	PersistentVolumes []*corev1.PersistentVolume
	// KilnReplicas is how many kiln-apiservers run (0 means one). More
	// than one run behind a balancer on KilnURL's port, as behind a
	// Service; each is named kiln-apiserver-N after the first.
	KilnReplicas int
	// EtcdMembers is how many etcd members run (0 means one); each is
	// named etcd-N after the first. A resumed cluster runs as many as it
	// was started with.
	EtcdMembers int
}

// Cluster is a running local control plane.
type Cluster struct {
	Dir string
	// Resumed says Start found a cluster in Dir and started it again.
	Resumed bool
	// AdminKubeconfig is a cluster admin's (system:masters).
	AdminKubeconfig string
	// AdminConfig is the same admin for client-go.
	AdminConfig *rest.Config
	// KilnURL reaches the Kiln API server directly, bypassing the
	// aggregator (through the balancer when several replicas run);
	// KilnCAFile verifies its certificate.
	KilnURL    string
	KilnCAFile string
	// FrontProxyClient is the certificate kube-apiserver presents when it
	// proxies to Kiln; only it may assert X-Remote-User.
	FrontProxyClient keyPair
	// Kubectl is the kubectl binary built with the control plane.
	Kubectl string

	opts Options
	log  io.Writer
	// mu guards procs and balancer: Supervise replaces the procs it
	// restarts.
	mu       sync.Mutex
	procs    []*process
	balancer *balancer
	// stopBackground ends what the launcher runs besides the components
	// (retryKwokDeletes).
	stopBackground context.CancelFunc
	// kube and apply act as the admin, once kube-apiserver serves.
	kube  kubernetes.Interface
	apply *applier
	ports ports
	pki   struct {
		ca, frontProxy, kiln *authority
	}
}

type ports struct {
	etcdClient, etcdPeer, apiserver, controllerManager, scheduler, kiln, controller, controllerMetrics, kwok int
	// etcdMembers are the members after the first.
	etcdMembers []memberPorts
	// kilnReplicas are where each replica listens when several run behind
	// the balancer on kiln.
	kilnReplicas []int
}

type memberPorts struct{ client, peer int }

// Start brings the whole control plane up and returns once the APIService
// is Available and the tenants can use it. On error everything started so
// far is stopped again.
func Start(ctx context.Context, opts Options) (_ *Cluster, err error) {
	if opts.Log == nil {
		opts.Log = io.Discard
	}
	if opts.Nodes == nil {
		opts.Nodes = DefaultInventory()
	}
	c := &Cluster{
		Dir:             opts.Dir,
		AdminKubeconfig: filepath.Join(opts.Dir, "kubeconfig"),
		Kubectl:         filepath.Join(opts.BinDir, "kubectl"),
		opts:            opts,
		log:             opts.Log,
	}
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kiln-apiserver", "kiln-controller", "kubectl"} {
		if _, err := os.Stat(filepath.Join(opts.BinDir, bin)); err != nil {
			return nil, fmt.Errorf("%s is missing from %s; build it with `make control-plane build`", bin, opts.BinDir)
		}
	}
	if err := c.prepareDir(); err != nil {
		return nil, err
	}
	for _, d := range []string{"pki", "logs", "etcd"} {
		if err := os.MkdirAll(filepath.Join(opts.Dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	defer func() {
		if err != nil {
			c.Stop()
			err = fmt.Errorf("%w (component logs in %s)", err, filepath.Join(opts.Dir, "logs"))
		}
	}()
	steps := []struct {
		name string
		run  func(context.Context) error
	}{
		{"certificates", c.writePKI},
		{"etcd", c.startEtcd},
		{"kube-apiserver", c.startAPIServer},
		{"kube-controller-manager", c.startControllerManager},
		{"kube-scheduler", c.startScheduler},
		{"kwok and simulated nodes", c.startKwok},
		{"Kiln RBAC and namespace from artifacts/", c.applyArtifacts},
		{"kiln-apiserver", c.startKiln},
		{"APIService v1alpha1.gpu.kiln.dev", c.registerAPIService},
		{"tenants", c.createTenants},
		{"persistent volumes", c.createVolumes},
		{"kiln-controller", c.startController},
		{"node agents of the GPU nodes", c.startNodeAgents},
	}
	for _, s := range steps {
		if s.name == "kiln-controller" && opts.NoController {
			continue
		}
		start := time.Now()
		if err := s.run(ctx); err != nil {
			return nil, fmt.Errorf("%s: %w", s.name, err)
		}
		fmt.Fprintf(c.log, "  %-42s ready in %s\n", s.name, time.Since(start).Round(100*time.Millisecond))
	}
	if !c.Resumed {
		if err := c.saveState(); err != nil {
			return nil, err
		}
	}
	return c, nil
}

// Stop ends every component the launcher started, newest first.
func (c *Cluster) Stop() {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stopBackground != nil {
		c.stopBackground()
		c.stopBackground = nil
	}
	for i := len(c.procs) - 1; i >= 0; i-- {
		if err := c.procs[i].stop(15 * time.Second); err != nil {
			fmt.Fprintf(c.log, "stopping %s: %v\n", c.procs[i].name, err)
		}
	}
	c.procs = nil
	if c.balancer != nil {
		c.balancer.close()
		c.balancer = nil
	}
}

// Alive reports the first component that has exited.
func (c *Cluster) Alive() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, p := range c.procs {
		if err := p.exited(); err != nil {
			return err
		}
	}
	return nil
}

// PID is the process ID of a component the launcher started, by its name
// (etcd, etcd-1, kube-apiserver, kiln-apiserver, kiln-apiserver-1, ...).
func (c *Cluster) PID(name string) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if p := c.find(name); p != nil {
		return p.cmd.Process.Pid, nil
	}
	return 0, fmt.Errorf("%s is not running", name)
}

// EtcdURL is the client URL of etcd's first member.
func (c *Cluster) EtcdURL() string { return c.etcdURL() }

// KubeconfigFor is the kubeconfig written for a tenant.
func (c *Cluster) KubeconfigFor(user string) string {
	return filepath.Join(c.Dir, user+".kubeconfig")
}

// ConfigFor is a tenant's client-go config.
func (c *Cluster) ConfigFor(user string) (*rest.Config, error) {
	return restConfig(c.KubeconfigFor(user))
}

func (c *Cluster) pkiDir() string { return filepath.Join(c.Dir, "pki") }
func (c *Cluster) logDir() string { return filepath.Join(c.Dir, "logs") }
func (c *Cluster) bin(n string) string {
	return filepath.Join(c.opts.BinDir, n)
}
func (c *Cluster) apiserverURL() string {
	return "https://127.0.0.1:" + strconv.Itoa(c.ports.apiserver)
}
func (c *Cluster) etcdURL() string { return "http://127.0.0.1:" + strconv.Itoa(c.ports.etcdClient) }

func (c *Cluster) start(name string, args ...string) error {
	return c.startBinary(name, name, args...)
}

// startBinary starts one of several processes of the same binary under a
// name of its own.
func (c *Cluster) startBinary(name, binary string, args ...string) error {
	p, err := startProcess(c.logDir(), name, c.bin(binary), args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
}

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

func (c *Cluster) startAPIServer(ctx context.Context) error {
	dir := c.pkiDir()
	serving, err := c.pki.ca.serving(dir, "kube-apiserver",
		[]string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc", "kubernetes.default.svc.cluster.local"},
		[]net.IP{net.ParseIP("127.0.0.1"), net.ParseIP("10.96.0.1")})
	if err != nil {
		return err
	}
	// Tokens signed before a resume stay valid: the key is the same.
	saKey := filepath.Join(dir, serviceAccountKeyFile)
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
	}, c.opts.APIServerFlags...)...)
	if err != nil {
		return err
	}
	client, err := rest.HTTPClientFor(c.AdminConfig)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, client, c.apiserverURL()+"/readyz")
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

func (c *Cluster) startControllerManager(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kube-controller-manager", "system:kube-controller-manager")
	if err != nil {
		return err
	}
	err = c.start("kube-controller-manager",
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.controllerManager),
		// No pod CIDRs to hand out and no TTL annotations wanted; node
		// lifecycle stays on, since it lifts the not-ready taint of new Nodes.
		"--controllers=*,-nodeipam,-ttl",
		"--use-service-account-credentials=true",
		"--service-account-private-key-file="+filepath.Join(c.pkiDir(), serviceAccountKeyFile),
		"--root-ca-file="+c.pki.ca.CertFile,
		"--cluster-signing-cert-file="+c.pki.ca.CertFile,
		"--cluster-signing-key-file="+filepath.Join(c.pkiDir(), "ca.key"),
		"--leader-elect=false",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, insecureClient(), "https://127.0.0.1:"+strconv.Itoa(c.ports.controllerManager)+"/healthz")
}

func (c *Cluster) startScheduler(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kube-scheduler", "system:kube-scheduler")
	if err != nil {
		return err
	}
	err = c.start("kube-scheduler",
		"--kubeconfig="+kc, "--authentication-kubeconfig="+kc, "--authorization-kubeconfig="+kc,
		"--bind-address=127.0.0.1", "--secure-port="+strconv.Itoa(c.ports.scheduler),
		"--leader-elect=false",
	)
	if err != nil {
		return err
	}
	return c.waitHTTP(ctx, insecureClient(), "https://127.0.0.1:"+strconv.Itoa(c.ports.scheduler)+"/healthz")
}

// startKwok runs kwok as the kubelet of every simulated node (one identity
// acting for many nodes, which the Node authorizer cannot express, hence
// system:masters) and creates the nodes.
func (c *Cluster) startKwok(ctx context.Context) error {
	kc, err := c.componentKubeconfig("kwok", "kwok-controller", "system:masters")
	if err != nil {
		return err
	}
	// The stages kwok ships: nodes turn Ready and renew their leases, Pods
	// go Running, complete, and are removed when deleted.
	stages := strings.Join([]string{
		nodefast.DefaultNodeInit,
		nodeheartbeat.DefaultNodeHeartbeatWithLease,
		podfast.DefaultPodReady,
		podfast.DefaultPodComplete,
		podfast.DefaultPodDelete,
	}, "\n---\n")
	// Every container's log is this file, so a log read through Kiln has
	// something to show; follow streams what is appended to it. A resumed
	// cluster keeps what it had.
	if err := writeNewFile(c.ContainerLogFile(), []byte(criLogLine("container started"))); err != nil {
		return err
	}
	stages += fmt.Sprintf(`
---
apiVersion: kwok.x-k8s.io/v1alpha1
kind: ClusterLogs
metadata:
  name: every-container
spec:
  logs:
  - logsFile: %q
    follow: true
`, c.ContainerLogFile())
	stagesFile := filepath.Join(c.Dir, "kwok-stages.yaml")
	if err := os.WriteFile(stagesFile, []byte(stages), 0o644); err != nil {
		return err
	}
	serving, err := c.pki.ca.serving(c.pkiDir(), "kwok", []string{"localhost"}, []net.IP{net.ParseIP("127.0.0.1")})
	if err != nil {
		return err
	}
	err = c.start("kwok",
		"--kubeconfig="+kc,
		"--config="+stagesFile,
		"--manage-all-nodes=false",
		"--manage-nodes-with-annotation-selector="+kwokNodeAnnotation+"="+simulatedNodeMarker,
		"--disregard-status-with-annotation-selector="+CustomStatusAnnotation+"=custom",
		"--cidr=10.244.0.1/16",
		// kwok's server is every node's kubelet endpoint (logs).
		"--node-ip=127.0.0.1",
		"--node-port="+strconv.Itoa(c.ports.kwok),
		"--server-address=127.0.0.1:"+strconv.Itoa(c.ports.kwok),
		"--tls-cert-file="+serving.CertFile, "--tls-private-key-file="+serving.KeyFile,
		"--node-lease-duration-seconds=40",
	)
	if err != nil {
		return err
	}
	background, stop := context.WithCancel(context.Background())
	c.stopBackground = stop
	go c.retryKwokDeletes(background)
	// A resumed cluster's Nodes are there already; kwok takes them over
	// by their annotation.
	for _, n := range c.opts.Nodes {
		if _, err := c.kube.CoreV1().Nodes().Create(ctx, n.Node(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	// Schedulable means Ready and without the not-ready taint the node
	// lifecycle controller lifts.
	return c.poll(ctx, 90*time.Second, func(ctx context.Context) (bool, error) {
		for _, n := range c.opts.Nodes {
			node, err := c.kube.CoreV1().Nodes().Get(ctx, n.Name, metav1.GetOptions{})
			if err != nil {
				return false, err
			}
			if !NodeReady(node) {
				return false, nil
			}
		}
		return true, nil
	})
}

// NodeReady says whether a Node is Ready and without the not-ready taints.
func NodeReady(n *corev1.Node) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == corev1.TaintNodeNotReady || t.Key == corev1.TaintNodeUnreachable {
			return false
		}
	}
	for _, cond := range n.Status.Conditions {
		if cond.Type == corev1.NodeReady {
			return cond.Status == corev1.ConditionTrue
		}
	}
	return false
}

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

// serviceAccountKubeconfig writes a kubeconfig that authenticates as a
// ServiceAccount of kiln-system with a TokenRequest token, as a Pod of that
// account would.
func (c *Cluster) serviceAccountKubeconfig(ctx context.Context, account string) (string, error) {
	expiry := int64((48 * time.Hour).Seconds())
	tok, err := c.kube.CoreV1().ServiceAccounts(kilnNamespace).CreateToken(ctx, account,
		&authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: &expiry}}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	kc := filepath.Join(c.Dir, account+".kubeconfig")
	user := "system:serviceaccount:" + kilnNamespace + ":" + account
	return kc, writeKubeconfig(kc, c.apiserverURL(), c.pki.ca.CertFile, user, "", credentials{token: tok.Status.Token})
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

// LabelAccelerators on a namespace, set to AcceleratorsKilnOnly, binds the
// policy of artifacts/policy/accelerator-pods.yaml there: only Kiln makes
// Pods that ask for accelerators. Every tenant namespace carries it.
const (
	LabelAccelerators    = "gpu.kiln.dev/accelerators"
	AcceleratorsKilnOnly = "kiln-only"
)

// createTenants gives each tenant a namespace labelled for the accelerator
// policy, the standard "edit" role in it, and a kubeconfig with a client certificate for the user. It returns
// once RBAC aggregation has folded Kiln's rules into "edit".
func (c *Cluster) createTenants(ctx context.Context) error {
	for _, t := range c.opts.Tenants {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t, Labels: map[string]string{LabelAccelerators: AcceleratorsKilnOnly}}}
		if _, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: t + "-edit", Namespace: t},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: t}},
		}
		if _, err := c.kube.RbacV1().RoleBindings(t).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cert, err := c.pki.ca.client(c.pkiDir(), t, t)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(c.KubeconfigFor(t), c.apiserverURL(), c.pki.ca.CertFile, t, t, credentials{cert: cert}); err != nil {
			return err
		}
	}
	return c.poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		for _, t := range c.opts.Tenants {
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: t,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: t, Verb: "create", Group: "gpu.kiln.dev", Resource: "instances",
				},
			}}
			res, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !res.Status.Allowed {
				return false, nil
			}
			// Pods need the namespace's default ServiceAccount.
			if _, err := c.kube.CoreV1().ServiceAccounts(t).Get(ctx, "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
		return true, nil
	})
}

// poll runs cond until it holds, failing early if a component died.
func (c *Cluster) poll(ctx context.Context, timeout time.Duration, cond wait.ConditionWithContextFunc) error {
	var last error
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		if err := c.Alive(); err != nil {
			return false, err
		}
		ok, err := cond(ctx)
		if err != nil {
			last = err
			return false, nil
		}
		return ok, nil
	})
	if err != nil && last != nil {
		return fmt.Errorf("%w (last error: %v)", err, last)
	}
	return err
}

func (c *Cluster) waitHTTP(ctx context.Context, client *http.Client, url string) error {
	return c.poll(ctx, 2*time.Minute, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			return false, fmt.Errorf("GET %s: %d %s", url, resp.StatusCode, body)
		}
		return true, nil
	})
}

// insecureClient probes the health endpoints of components that serve
// self-signed certificates of their own.
func insecureClient() *http.Client {
	return &http.Client{
		Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}},
		Timeout:   5 * time.Second,
	}
}
