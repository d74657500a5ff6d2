package localcluster

import (
	"context"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/test/images"
)

// The real node: a kubelet, containerd and runc, with its address and its
// Pods' network in a network namespace of its own. Nothing on it is
// reachable but through that namespace: the host routes the node's address
// over a veth pair whose host side has no address, and the kubelet reaches
// kube-apiserver on the namespace's loopback, where the launcher forwards.
const (
	RealNodeName = "real-0"
	// LabelRealNode is on real-0, and its NoSchedule taint of the same key
	// keeps off every Pod that does not ask for it by toleration: the
	// tests' Pods on kwok nodes stay there.
	LabelRealNode = "kiln.dev/real-node"
	// realNetns is fixed, as are the kubelet's device-plugin directory and
	// its lock: one real node per machine.
	realNetns   = "kiln-real-0"
	realVethH   = "kiln-r0-h"
	realVethN   = "kiln-r0-n"
	realNodeIP  = "10.250.0.2"
	realPodCIDR = "10.250.1.0/24"
	realBridge  = "kiln0"
	// realLock is held while a real node runs, so a second cluster on the
	// machine waits for none and breaks nothing: it is refused.
	realLock = "/run/kiln-real-node.lock"
	// kubeletPort is the kubelet's inside the namespace, where no other
	// kubelet listens.
	kubeletPort = 10250
	// netnsDir is where iproute2 names network namespaces.
	netnsDir = "/run/netns"
	// realShimDir holds the shims' sockets; containerd wants that path
	// short (42 characters at most), so it is not under the cluster's dir.
	realShimDir = "/run/kiln-real-0"
)

// kernelSettings are the host-wide settings the kubelet changes; they are
// put back when the node stops.
var kernelSettings = []string{"vm/overcommit_memory", "kernel/panic", "kernel/panic_on_oops"}

// hostPaths are where the kubelet and containerd write whatever their
// configuration says; those the node created are removed when it stops.
var hostPaths = []string{"/var/lib/kubelet", "/var/log/pods", "/var/log/containers", "/var/lib/cni"}

// realNode is what startRealNode set up, for stopRealNode to take down.
type realNode struct {
	dir       string
	lock      *os.File
	forwarder net.Listener
	// podForwarder serves kube-apiserver on the node's address to Pods,
	// when Kiln runs in the cluster.
	podForwarder net.Listener
	sysctls      map[string]string
	// created are the hostPaths and kubepods cgroups that were not there.
	created []string
	// netnsDir says /run/netns, a shared bind mount of itself that the
	// first `ip netns add` makes, is this node's to remove once empty.
	netnsDir bool
}

func (c *Cluster) realDir() string { return filepath.Join(c.Dir, "real-0") }

// startRealNode runs real-0 and waits for it to be Ready.
func (c *Cluster) startRealNode(ctx context.Context) error {
	n := &realNode{dir: c.realDir(), sysctls: map[string]string{}}
	lock, err := os.OpenFile(realLock, os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return err
	}
	if err := syscall.Flock(int(lock.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err != nil {
		lock.Close()
		return fmt.Errorf("another local cluster on this machine runs the real node (%s is locked); stop that cluster first", realLock)
	}
	n.lock = lock
	c.real = n
	for _, s := range kernelSettings {
		b, err := os.ReadFile(filepath.Join("/proc/sys", s))
		if err != nil {
			return err
		}
		n.sysctls[s] = strings.TrimSpace(string(b))
	}
	paths := slices.Clone(hostPaths)
	cgroups, _ := filepath.Glob("/sys/fs/cgroup/*")
	for _, hier := range cgroups {
		paths = append(paths, filepath.Join(hier, "kubepods"))
	}
	for _, p := range paths {
		if _, err := os.Lstat(p); errors.Is(err, os.ErrNotExist) {
			n.created = append(n.created, p)
		}
	}
	for _, d := range []string{"cni", "cni-ipam", "containerd", "state", "kubelet", "pod-logs", "cdi"} {
		if err := os.MkdirAll(filepath.Join(n.dir, d), 0o755); err != nil {
			return err
		}
	}
	n.netnsDir = netnsDirOurs(netnsDir)
	if err := setupNetns(); err != nil {
		return fmt.Errorf("network namespace %s: %w", realNetns, err)
	}
	if err := c.startContainerd(ctx, n); err != nil {
		return err
	}
	apiserver := "127.0.0.1:" + strconv.Itoa(c.ports.apiserver)
	if n.forwarder, err = forwardFromNetns(realNetns, "127.0.0.1", c.ports.apiserver, apiserver); err != nil {
		return fmt.Errorf("forwarding kube-apiserver into %s: %w", realNetns, err)
	}
	if c.opts.KilnInCluster {
		// The address kube-apiserver advertises (inClusterFlags).
		if n.podForwarder, err = forwardFromNetns(realNetns, realNodeIP, c.ports.apiserver, apiserver); err != nil {
			return fmt.Errorf("forwarding kube-apiserver to %s: %w", realNodeIP, err)
		}
	}
	if err := c.startKubelet(n); err != nil {
		return err
	}
	if err := c.startKubeProxy(n); err != nil {
		return err
	}
	if err := c.poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		return err == nil && NodeReady(node), nil
	}); err != nil {
		return err
	}
	if c.opts.KilnInCluster {
		// The agent is the DaemonSet's Pod then, with RealNodeAgentArgs.
		return writeYAML(c.InventoryFile(RealNodeName), realCards.Inventory())
	}
	return c.startRealNodeAgent(ctx, n, 0)
}

// realCards is real-0's inventory: fake cards of a model of their own.
var realCards = NodeSpec{
	Name:      RealNodeName,
	Labels:    map[string]string{LabelGPUProduct: ProductFake, LabelGPUMemory: "16384", LabelGPUCount: "4"},
	Resources: corev1.ResourceList{ResourceGPU: resource.MustParse("4")},
}

// ProductFake is the model of real-0's fake cards.
const ProductFake = "Kiln-Fake-Card"

// startRealNodeAgent runs the node agent for real-0 in its real mode: a
// device plugin registered with the real kubelet, reading its PodResources,
// its fake cards given to containers by CDI. It runs in the node's network
// namespace, as its DaemonSet Pod would on the node's; it reaches
// kube-apiserver through the namespace's loopback, like the kubelet.
//
// With mpsShares it serves each card as that many CUDA MPS shares of
// ResourceGPUShared instead, each card's daemon the stand-in
// test/node/fake-mps-control, since no MPS server runs without a GPU.
func (c *Cluster) startRealNodeAgent(ctx context.Context, n *realNode, mpsShares int) error {
	if err := writeYAML(c.InventoryFile(RealNodeName), realCards.Inventory()); err != nil {
		return err
	}
	kc, err := c.serviceAccountKubeconfig(ctx, nodeAgentServiceAccount)
	if err != nil {
		return err
	}
	args := append(c.RealNodeAgentArgs(), "--node-name="+RealNodeName, "--kubeconfig="+kc)
	resource, want := ResourceGPU, int64(4)
	if mpsShares > 0 {
		args = append(args, fmt.Sprintf("--mps-shares=%d", mpsShares), "--mps-dir="+c.RealNodeMPSDir(),
			"--mps-control="+filepath.Join(c.opts.RepoRoot, "test", "node", "fake-mps-control"))
		resource, want = ResourceGPUShared, int64(4*mpsShares)
	}
	if err := c.inNetns("node-agent-"+RealNodeName, "kiln-node-agent", args...); err != nil {
		return err
	}
	// The kubelet reports the plugin's cards at its next status update.
	return c.poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		node, err := c.kube.CoreV1().Nodes().Get(ctx, RealNodeName, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got := node.Status.Allocatable[corev1.ResourceName(resource)]
		return got.Value() == want, nil
	})
}

// RealNodeAgentArgs are the node agent's flags for real-0's fake cards:
// its inventory (where SetDeviceHealth edits it, as for the simulated
// nodes), the device nodes it makes for them, the CDI spec containerd
// reads, and the kubelet's PodResources socket. Every path is under
// RealNodeDir or the directory of InventoryFile(RealNodeName).
func (c *Cluster) RealNodeAgentArgs() []string {
	d := c.realDir()
	return []string{"--inventory=" + c.InventoryFile(RealNodeName),
		"--fake-cards-dir=" + filepath.Join(d, "dev"), "--cdi-spec-dir=" + filepath.Join(d, "cdi"),
		"--pod-resources-socket=" + filepath.Join(d, "kubelet", "pod-resources", "kubelet.sock")}
}

// RealNodeDir holds real-0's state: containerd's, the kubelet's, its CDI
// specs and fake cards.
func (c *Cluster) RealNodeDir() string { return c.realDir() }

// RealNodeMPSDir is where real-0's node agent keeps each card's MPS pipe
// and log directories when it serves shares.
func (c *Cluster) RealNodeMPSDir() string { return filepath.Join(c.realDir(), "mps") }

// ServeRealNodeShares restarts real-0's node agent serving each card as
// that many CUDA MPS shares (0: as whole cards again), and returns once the
// kubelet reports them. Nothing may hold real-0's cards meanwhile.
func (c *Cluster) ServeRealNodeShares(ctx context.Context, shares int) error {
	name := "node-agent-" + RealNodeName
	c.mu.Lock()
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == name })
	if i < 0 || c.real == nil {
		c.mu.Unlock()
		return fmt.Errorf("the launcher started no %s", name)
	}
	p := c.procs[i]
	c.procs = slices.Delete(c.procs, i, i+1)
	c.mu.Unlock()
	if err := p.stop(15 * time.Second); err != nil {
		return fmt.Errorf("stopping %s: %w", name, err)
	}
	return c.startRealNodeAgent(ctx, c.real, shares)
}

// setupNetns makes the node's namespace: loopback up, the node's address on
// the namespace side of a veth pair, a route to it from the host, and the
// way back to the host as the namespace's default route.
func setupNetns() error {
	// Left by a launcher that was killed outright; the lock says no node
	// runs in it now.
	if err := deleteNetns(); err != nil {
		return err
	}
	steps := [][]string{
		{"ip", "netns", "add", realNetns},
		{"ip", "-n", realNetns, "link", "set", "lo", "up"},
		{"ip", "link", "add", realVethH, "type", "veth", "peer", "name", realVethN, "netns", realNetns},
		{"ip", "-n", realNetns, "addr", "add", realNodeIP + "/32", "dev", realVethN},
		{"ip", "-n", realNetns, "link", "set", realVethN, "up"},
		{"ip", "link", "set", realVethH, "up"},
		{"ip", "route", "replace", realNodeIP + "/32", "dev", realVethH},
		{"ip", "-n", realNetns, "route", "add", "default", "dev", realVethN},
		// The Pods' addresses behind the node's, as a cluster network
		// routes them: kube-apiserver's aggregator and its proxy dial them.
		{"ip", "route", "replace", realPodCIDR, "via", realNodeIP, "dev", realVethH, "onlink"},
		{"nsenter", "--net=" + filepath.Join(netnsDir, realNetns), "sysctl", "-qw", "net.ipv4.ip_forward=1"},
	}
	for _, s := range steps {
		if err := run(s[0], s[1:]...); err != nil {
			return err
		}
	}
	return nil
}

// deleteNetns removes the veth pair and the namespace. The pair goes
// first and explicitly: a namespace outlives its name while anything holds
// it (a socket the forwarder accepted), and its veth with it.
func deleteNetns() error {
	var errs []error
	if _, err := net.InterfaceByName(realVethH); err == nil {
		errs = append(errs, run("ip", "link", "del", realVethH))
	}
	if _, err := os.Stat(filepath.Join(netnsDir, realNetns)); err == nil {
		errs = append(errs, run("ip", "netns", "del", realNetns))
	}
	return errors.Join(errs...)
}

func run(name string, args ...string) error {
	out, err := exec.Command(name, args...).CombinedOutput()
	if err != nil {
		return fmt.Errorf("%s %s: %w: %s", name, strings.Join(args, " "), err, strings.TrimSpace(string(out)))
	}
	return nil
}

// inNetns starts a component inside the node's network namespace. nsenter
// switches the network namespace only: `ip netns exec` would also mount a
// new /sys, hiding the cgroup v1 hierarchies runc needs.
func (c *Cluster) inNetns(name, binary string, args ...string) error {
	return c.startPath(name, "nsenter", append([]string{"--net=" + filepath.Join(netnsDir, realNetns), c.bin(binary)}, args...)...)
}

// startContainerd runs containerd in the namespace with a root, state,
// socket and CNI of its own, and imports the node's images into the k8s.io
// namespace, pinned against the kubelet's image GC.
func (c *Cluster) startContainerd(ctx context.Context, n *realNode) error {
	d := n.dir
	cni := fmt.Sprintf(`{"cniVersion": "1.0.0", "name": "kiln-real", "plugins": [
  {"type": "bridge", "bridge": %q, "isGateway": true, "ipMasq": false,
   "ipam": {"type": "host-local", "dataDir": %q, "ranges": [[{"subnet": %q}]], "routes": [{"dst": "0.0.0.0/0"}]}},
  {"type": "portmap", "capabilities": {"portMappings": true}}]}
`, realBridge, filepath.Join(d, "cni-ipam"), realPodCIDR)
	if err := os.WriteFile(filepath.Join(d, "cni", "10-kiln.conflist"), []byte(cni), 0o644); err != nil {
		return err
	}
	// restrict_oom_score_adj: the sandbox may not lower a score below its
	// own, since it lacks CAP_SYS_RESOURCE. NRI wants /var/run/nri.
	config := fmt.Sprintf(`version = 3
root = %[1]q
state = %[2]q
imports = []
disabled_plugins = ['io.containerd.nri.v1.nri']
[grpc]
  address = %[3]q
[ttrpc]
  address = %[4]q
[plugins]
  [plugins.'io.containerd.cri.v1.images'.pinned_images]
    sandbox = %[5]q
  [plugins.'io.containerd.cri.v1.runtime']
    restrict_oom_score_adj = true
    netns_mounts_under_state_dir = true
    cdi_spec_dirs = [%[6]q]
    [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc]
      runtime_type = 'io.containerd.runc.v2'
      [plugins.'io.containerd.cri.v1.runtime'.containerd.runtimes.runc.options]
        Root = %[7]q
        SystemdCgroup = false
    [plugins.'io.containerd.cri.v1.runtime'.cni]
      bin_dirs = [%[8]q]
      conf_dir = %[9]q
  [plugins.'io.containerd.shim.v1.manager']
    socket_dir = %[10]q
`, filepath.Join(d, "containerd"), filepath.Join(d, "state"), c.containerdSocket(), c.containerdSocket()+".ttrpc",
		images.PauseImage, filepath.Join(d, "cdi"), filepath.Join(d, "state", "runc"), c.bin("cni"), filepath.Join(d, "cni"),
		realShimDir)
	file := filepath.Join(d, "containerd.toml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return err
	}
	if err := c.inNetns("containerd", "containerd", "--config", file); err != nil {
		return err
	}
	if err := c.poll(ctx, 30*time.Second, func(context.Context) (bool, error) {
		return exec.Command(c.bin("ctr"), "-a", c.containerdSocket(), "version").Run() == nil, nil
	}); err != nil {
		return fmt.Errorf("containerd: %w", err)
	}
	tars := []string{filepath.Join(c.opts.ImageDir, "pause.tar"), filepath.Join(c.opts.ImageDir, "workload.tar"), filepath.Join(c.opts.ImageDir, "ssh.tar")}
	for _, tar := range append(tars, c.opts.Images...) {
		if err := c.importImage(tar); err != nil {
			return fmt.Errorf("%w (make node-images or make images writes it)", err)
		}
	}
	return nil
}

// importImage imports an image tarball into real-0's containerd, where the
// kubelet sees it, pinned against the kubelet's image GC.
func (c *Cluster) importImage(tar string) error {
	names, err := images.Tags(tar)
	if err != nil {
		return err
	}
	if err := run(c.bin("ctr"), "-a", c.containerdSocket(), "-n", "k8s.io", "images", "import", tar); err != nil {
		return fmt.Errorf("importing %s: %w", tar, err)
	}
	for _, name := range names {
		if err := run(c.bin("ctr"), "-a", c.containerdSocket(), "-n", "k8s.io", "images", "label", name, "io.cri-containerd.pinned=pinned"); err != nil {
			return err
		}
	}
	return nil
}

func (c *Cluster) containerdSocket() string { return filepath.Join(c.realDir(), "containerd.sock") }

// startKubelet runs the kubelet as system:node:real-0, serving on the
// node's address with webhook authentication and authorization only.
func (c *Cluster) startKubelet(n *realNode) error {
	dir := c.pkiDir()
	kc, err := c.componentKubeconfig("kubelet-"+RealNodeName, "system:node:"+RealNodeName, "system:nodes")
	if err != nil {
		return err
	}
	serving, err := c.pki.ca.serving(dir, "kubelet-serving-"+RealNodeName, []string{RealNodeName}, []net.IP{net.ParseIP(realNodeIP)})
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubelet.config.k8s.io/v1beta1
kind: KubeletConfiguration
address: %[1]s
port: %[2]d
readOnlyPort: 0
healthzPort: 0
authentication:
  anonymous: {enabled: false}
  webhook: {enabled: true}
  x509: {clientCAFile: %[3]q}
authorization: {mode: Webhook}
tlsCertFile: %[4]q
tlsPrivateKeyFile: %[5]q
cgroupDriver: cgroupfs
failCgroupV1: false
containerRuntimeEndpoint: unix://%[6]s
podLogsDir: %[7]q
nodeStatusUpdateFrequency: 5s
imageGCHighThresholdPercent: 100
evictionHard: {memory.available: "1Mi", nodefs.available: "1%%", imagefs.available: "1%%"}
failSwapOn: false
protectKernelDefaults: false
registerNode: true
`, realNodeIP, kubeletPort, c.pki.ca.CertFile, serving.CertFile, serving.KeyFile, c.containerdSocket(), filepath.Join(n.dir, "pod-logs"))
	file := filepath.Join(n.dir, "kubelet.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return err
	}
	return c.inNetns("kubelet", "kubelet",
		"--config="+file,
		"--kubeconfig="+kc,
		"--root-dir="+filepath.Join(n.dir, "kubelet"),
		"--hostname-override="+RealNodeName,
		"--node-ip="+realNodeIP,
		"--node-labels="+LabelRealNode+"=true,"+labelList(realCards.Labels),
		"--register-with-taints="+LabelRealNode+"=true:NoSchedule",
	)
}

// startKubeProxy runs kube-proxy in the namespace, so the node ports of
// Instances on real-0 forward to their Pods there. Host-wide settings are
// left alone: the conntrack table and timeouts are not resized, and node
// ports listen on the node's address only, not on a loopback.
func (c *Cluster) startKubeProxy(n *realNode) error {
	kc, err := c.componentKubeconfig("kube-proxy-"+RealNodeName, "system:kube-proxy")
	if err != nil {
		return err
	}
	config := fmt.Sprintf(`apiVersion: kubeproxy.config.k8s.io/v1alpha1
kind: KubeProxyConfiguration
clientConnection: {kubeconfig: %[1]q}
hostnameOverride: %[2]s
mode: iptables
clusterCIDR: %[3]s
nodePortAddresses: [%[4]s/32]
bindAddress: %[4]s
healthzBindAddress: 127.0.0.1:10256
metricsBindAddress: 127.0.0.1:10249
conntrack:
  maxPerCore: 0
  min: 0
  tcpEstablishedTimeout: 0s
  tcpCloseWaitTimeout: 0s
  udpTimeout: 0s
  udpStreamTimeout: 0s
`, kc, RealNodeName, realPodCIDR, realNodeIP)
	file := filepath.Join(n.dir, "kube-proxy.yaml")
	if err := os.WriteFile(file, []byte(config), 0o644); err != nil {
		return err
	}
	return c.inNetns("kube-proxy", "kube-proxy", "--config="+file)
}

// RealNodeTasks lists what runs in containerd on real-0: the process ID of
// each running container, by the ID a Pod's status names after
// "containerd://". A container whose process has ended is not listed.
func (c *Cluster) RealNodeTasks() (map[string]int, error) {
	out, err := exec.Command(c.bin("ctr"), "-a", c.containerdSocket(), "-n", "k8s.io", "tasks", "ls").Output()
	if err != nil {
		return nil, fmt.Errorf("ctr tasks ls: %w", err)
	}
	tasks := map[string]int{}
	for _, line := range strings.Split(string(out), "\n")[1:] {
		// TASK PID STATUS
		f := strings.Fields(line)
		if len(f) != 3 || f[2] != "RUNNING" {
			continue
		}
		pid, err := strconv.Atoi(f[1])
		if err != nil {
			return nil, fmt.Errorf("ctr tasks ls: %q", line)
		}
		tasks[f[0]] = pid
	}
	return tasks, nil
}

// RealNodeRules is the iptables rules of real-0's namespace, kube-proxy's
// among them, for a test to show when a node port does not answer.
func (c *Cluster) RealNodeRules() string {
	out, err := exec.Command("nsenter", "--net="+filepath.Join(netnsDir, realNetns), "iptables-save").CombinedOutput()
	if err != nil {
		return fmt.Sprintf("iptables-save in %s: %v: %s", realNetns, err, out)
	}
	return string(out)
}

// stopRealNode takes down what startRealNode set up, once its processes
// are stopped: the containers containerd left, the mounts under the node's
// directory, the namespace, and the kernel settings the kubelet changed.
func (c *Cluster) stopRealNode() {
	n := c.real
	if n == nil {
		return
	}
	c.real = nil
	var errs []error
	for _, f := range []net.Listener{n.forwarder, n.podForwarder} {
		if f != nil {
			f.Close()
		}
	}
	errs = append(errs, killShims(n.dir))
	errs = append(errs, unmountUnder(n.dir))
	errs = append(errs, deleteNetns())
	if n.netnsDir {
		errs = append(errs, removeNetnsDir())
	}
	errs = append(errs, os.RemoveAll(realShimDir))
	for _, p := range n.created {
		errs = append(errs, removeCreated(p))
	}
	for s, v := range n.sysctls {
		errs = append(errs, os.WriteFile(filepath.Join("/proc/sys", s), []byte(v), 0o644))
	}
	if n.lock != nil {
		n.lock.Close()
	}
	if err := errors.Join(errs...); err != nil {
		fmt.Fprintf(c.log, "stopping %s: %v\n", RealNodeName, err)
	}
}

// netnsDirOurs says /run/netns is the real node's to remove when it stops:
// absent, or holding nothing but real-0's namespace. A launcher killed
// outright leaves that namespace and the mount its `ip netns add` made;
// the next node takes both over, or the empty mount outlives every run.
func netnsDirOurs(dir string) bool {
	entries, err := os.ReadDir(dir)
	if errors.Is(err, os.ErrNotExist) {
		return true
	}
	if err != nil {
		return false
	}
	for _, e := range entries {
		if e.Name() != realNetns {
			return false
		}
	}
	return true
}

// RealNodeUnsupported says why this host cannot run real-0, "" if it can:
// it needs root, cgroups, overlayfs, and the tools it runs.
func RealNodeUnsupported() string {
	if os.Geteuid() != 0 {
		return "the real node needs root"
	}
	if fs, err := os.ReadFile("/proc/filesystems"); err != nil || !strings.Contains(string(fs), "overlay") {
		return "the real node needs overlayfs"
	}
	if _, err := os.Stat("/sys/fs/cgroup/memory"); err != nil {
		if _, err := os.Stat("/sys/fs/cgroup/cgroup.controllers"); err != nil {
			return "the real node needs cgroups"
		}
	}
	for _, tool := range []string{"ip", "nsenter", "runc", "iptables"} {
		if _, err := exec.LookPath(tool); err != nil {
			return "the real node needs " + tool + " (make node installs runc and iptables)"
		}
	}
	return ""
}

// RealNodeLeftovers reports what a stopped real node left on the host.
func RealNodeLeftovers() error {
	var errs []error
	if _, err := os.Stat(filepath.Join(netnsDir, realNetns)); err == nil {
		errs = append(errs, fmt.Errorf("network namespace %s", realNetns))
	}
	if _, err := net.InterfaceByName(realVethH); err == nil {
		errs = append(errs, fmt.Errorf("link %s", realVethH))
	}
	if _, err := os.Stat(realShimDir); err == nil {
		errs = append(errs, fmt.Errorf("directory %s", realShimDir))
	}
	if mountedAt(netnsDir) {
		if entries, err := os.ReadDir(netnsDir); err == nil && len(entries) == 0 {
			errs = append(errs, fmt.Errorf("the empty mount of %s", netnsDir))
		}
	}
	return errors.Join(errs...)
}

// labelList is labels as the kubelet's --node-labels takes them.
func labelList(labels map[string]string) string {
	var kv []string
	for k, v := range labels {
		kv = append(kv, k+"="+v)
	}
	slices.Sort(kv)
	return strings.Join(kv, ",")
}
