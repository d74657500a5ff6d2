// Command kiln-up runs the local control plane with Kiln registered in it
// until interrupted (Ctrl-C, SIGTERM, or `make down`), restarting any
// component that exits. It is what `make up` runs. It resumes the cluster it ran last from --dir, objects and all;
// --fresh (`make up FRESH=1`) discards that and starts a new one.
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"

	"kiln.dev/kiln/test/localcluster"
)

func main() {
	dir := flag.String("dir", "_output/local", "directory for the cluster's state, kubeconfigs and logs; the cluster there is resumed")
	binDir := flag.String("bin-dir", "_output/bin", "directory holding the control-plane and Kiln binaries")
	imageDir := flag.String("image-dir", "_output/images", "directory holding the real node's image tarballs (make node-images)")
	root := flag.String("repo-root", ".", "repository root, for artifacts/")
	fresh := flag.Bool("fresh", false, "discard the cluster in --dir and start a new one")
	var topology topology
	flag.IntVar(&topology.kilnReplicas, "kiln-replicas", 1, "kiln-apiserver processes, behind one port as behind a Service")
	flag.IntVar(&topology.etcdMembers, "etcd-members", 1, "etcd members; a resumed cluster needs as many as it was started with")
	flag.BoolVar(&topology.realNode, "real-node", true, "run real-0, a kubelet with containerd and runc (needs root, `make node node-images`); without it every node is simulated")
	flag.Parse()
	topology.imageDir = *imageDir
	if err := run(*dir, *binDir, *root, *fresh, topology); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-up:", err)
		if errors.Is(err, localcluster.ErrCannotResume) {
			fmt.Fprintln(os.Stderr, "kiln-up: `make up FRESH=1` (kiln-up --fresh) discards it and starts a new cluster")
		}
		os.Exit(1)
	}
}

// topology is how many of the replicated components run, and whether a
// real node runs beside the simulated ones.
type topology struct {
	kilnReplicas, etcdMembers int
	realNode                  bool
	imageDir                  string
}

func run(dir, binDir, root string, fresh bool, topology topology) error {
	abs := func(p string) string {
		a, err := filepath.Abs(p)
		if err != nil {
			return p
		}
		return a
	}
	dir, binDir, root = abs(dir), abs(binDir), abs(root)
	ctx, cancel := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer cancel()

	// make down finds the launcher here and signals it; the launcher then
	// stops only what it started.
	pidFile := filepath.Join(filepath.Dir(dir), filepath.Base(dir)+".pid")
	if pid, ok := runningLauncher(pidFile); ok {
		// Two launchers on one state would corrupt it.
		return fmt.Errorf("a local cluster is already running from %s (PID %d); stop it with `make down` first", dir, pid)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)

	rel := func(p string) string {
		if r, err := filepath.Rel(root, p); err == nil {
			return r
		}
		return p
	}
	if why := localcluster.RealNodeUnsupported(); topology.realNode && why != "" {
		fmt.Printf("No real node: %s. Every node is simulated; `make up REAL_NODE=0` says so up front.\n", why)
		topology.realNode = false
	}
	fmt.Printf("Starting the local control plane on 127.0.0.1 from %s:\n", rel(dir))
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: binDir, RepoRoot: root,
		Resume:  !fresh,
		Tenants: []string{"tenant-a", "tenant-b"},
		// What the claim of artifacts/examples/instances.yaml binds to.
		PersistentVolumes: []*corev1.PersistentVolume{localcluster.ModelsVolume("tenant-a")},
		Log:               os.Stdout,
		KilnReplicas:      topology.kilnReplicas,
		EtcdMembers:       topology.etcdMembers,
		RealNode:          topology.realNode,
		ImageDir:          abs(topology.imageDir),
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	kubectl, _ := filepath.Rel(root, c.Kubectl)
	if c.Resumed {
		fmt.Println("\nResumed the cluster of the last `make up`, with its objects; `make up FRESH=1` starts a new one.")
	}
	fmt.Printf(`
Kiln is up (%s). Try, from the repository root:

  export KUBECONFIG=%s        # cluster admin
  %s get apiservice v1alpha1.gpu.kiln.dev
  %s apply -f artifacts/examples/instancetypes.yaml
  %s --kubeconfig=%s apply -f artifacts/examples/instances.yaml
  %s apply -f artifacts/examples/claim-and-budget.yaml
  %s --kubeconfig=%s get gpu

Tenants: %s and %s (edit in their own namespace).
Component logs: %s
Stop with Ctrl-C or `+"`make down`"+`; the next `+"`make up`"+` resumes this cluster,
`+"`make up FRESH=1`"+` starts a new one.
`, time.Since(start).Round(time.Second), rel(c.AdminKubeconfig), kubectl, kubectl,
		kubectl, rel(c.KubeconfigFor("tenant-a")), kubectl, kubectl, rel(c.KubeconfigFor("tenant-a")),
		rel(c.KubeconfigFor("tenant-a")), rel(c.KubeconfigFor("tenant-b")), rel(filepath.Join(dir, "logs")))

	if topology.realNode {
		fmt.Printf(`Node %s is real: a kubelet with containerd and runc, four fake cards. Run an
Instance there in a container that lists the cards it got:

  %s apply -f artifacts/examples/real-node.yaml
  %s --kubeconfig=%s apply -f artifacts/examples/real-instance.yaml
  %s --kubeconfig=%s logs hello-real

`, localcluster.RealNodeName, kubectl, kubectl, rel(c.KubeconfigFor("tenant-a")), kubectl, rel(c.KubeconfigFor("tenant-a")))
	}
	if urls := c.KilnReplicaURLs(); len(urls) > 1 {
		fmt.Printf("kiln-apiserver replicas, behind %s: %s\n", c.KilnURL, strings.Join(urls, " "))
	}
	if urls := c.EtcdURLs(); len(urls) > 1 {
		fmt.Printf("etcd members: %s\n", strings.Join(urls, " "))
	}

	// A component that exits is started again; only Ctrl-C or make down
	// ends the cluster, and its objects stay on disk either way.
	c.Supervise(ctx)
	fmt.Println("\nStopping the local control plane.")
	return nil
}

// runningLauncher reads a PID file and says whether that PID is a live
// kiln-up.
func runningLauncher(pidFile string) (int, bool) {
	data, err := os.ReadFile(pidFile)
	if err != nil {
		return 0, false
	}
	pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
	if err != nil || pid == os.Getpid() {
		return 0, false
	}
	comm, err := os.ReadFile(filepath.Join("/proc", strconv.Itoa(pid), "comm"))
	return pid, err == nil && strings.TrimSpace(string(comm)) == "kiln-up"
}
