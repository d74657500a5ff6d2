// Package localcluster runs a real Kubernetes control plane on 127.0.0.1
// with Kiln registered in it: etcd, kube-apiserver, kube-controller-manager,
// kube-scheduler, kwok simulating GPU nodes, and the Kiln API server in
// cluster mode behind the APIService from artifacts/. `make up` and the
// end-to-end tests both start it from here.
package localcluster

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	// NoNodeAgents leaves out the simulated node agent each GPU node
	// otherwise gets: a process per node is more than a thousand-node
	// benchmark can run. Nothing then allocates devices or reports
	// NodeDevices; Pods still bind and run as kwok has them.
	NoNodeAgents bool
	// APIServerFlags, KilnFlags and SchedulerFlags are added last to
	// kube-apiserver's, kiln-apiserver's and kube-scheduler's command
	// lines, so they override the defaults here.
	APIServerFlags, KilnFlags, SchedulerFlags []string
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
	// RealNode adds real-0, a kubelet with containerd and runc in a
	// network namespace of its own (realnode.go), next to the kwok nodes.
	// It needs root and the images `make node-images` writes to ImageDir.
	RealNode bool
	ImageDir string
	// Images are more image tarballs real-0 imports and pins, each
	// tagged as its RepoTags say.
	Images []string
	// KilnInCluster leaves Kiln to be installed as Pods on real-0 from its
	// images and manifests (test/install): the launcher starts none of
	// Kiln's processes, applies nothing from artifacts/ and registers no
	// APIService. kube-apiserver routes to a Service's endpoints, as the
	// aggregator must to reach Kiln's Pods there, and advertises real-0's
	// address, where those Pods reach it. It needs RealNode.
	KilnInCluster bool
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
	// real is the real node's setup, while it runs.
	real *realNode
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
	for _, bin := range []string{"etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok", "kiln-apiserver", "kiln-controller", "kiln-node-agent", "kubectl"} {
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
		{"real node " + RealNodeName, c.startRealNode},
	}
	if opts.KilnInCluster && !opts.RealNode {
		return nil, fmt.Errorf("KilnInCluster needs the real node to run Kiln's Pods on")
	}
	skip := map[string]bool{"kiln-controller": opts.NoController, "real node " + RealNodeName: !opts.RealNode,
		"node agents of the GPU nodes": opts.NoNodeAgents}
	if opts.KilnInCluster {
		for _, s := range []string{"Kiln RBAC and namespace from artifacts/", "kiln-apiserver", "APIService v1alpha1.gpu.kiln.dev", "kiln-controller", "node agents of the GPU nodes"} {
			skip[s] = true
		}
	}
	for _, s := range steps {
		if skip[s.name] {
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
	c.stopRealNode()
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

func (c *Cluster) start(name string, args ...string) error {
	return c.startBinary(name, name, args...)
}

// startBinary starts one of several processes of the same binary under a
// name of its own.
func (c *Cluster) startBinary(name, binary string, args ...string) error {
	return c.startPath(name, c.bin(binary), args...)
}

// startPath starts the program at path as a component: logged under name,
// and stopped with the cluster.
func (c *Cluster) startPath(name, path string, args ...string) error {
	p, err := startProcess(c.logDir(), name, path, args...)
	if err != nil {
		return err
	}
	c.mu.Lock()
	c.procs = append(c.procs, p)
	c.mu.Unlock()
	return nil
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
