// Command kiln-up runs the local control plane with Kiln registered in it
// until interrupted (Ctrl-C, SIGTERM, or `make down`). It is what `make up`
// runs.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"kiln.dev/kiln/test/localcluster"
)

func main() {
	dir := flag.String("dir", "_output/local", "directory for the cluster's state, kubeconfigs and logs; wiped on start")
	binDir := flag.String("bin-dir", "_output/bin", "directory holding the control-plane and Kiln binaries")
	root := flag.String("repo-root", ".", "repository root, for artifacts/")
	flag.Parse()
	if err := run(*dir, *binDir, *root); err != nil {
		fmt.Fprintln(os.Stderr, "kiln-up:", err)
		os.Exit(1)
	}
}

func run(dir, binDir, root string) error {
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
		// Starting would wipe the state of the cluster that one runs.
		return fmt.Errorf("a local cluster is already running from %s (PID %d); stop it with `make down` first", dir, pid)
	}
	if err := os.WriteFile(pidFile, []byte(strconv.Itoa(os.Getpid())+"\n"), 0o644); err != nil {
		return err
	}
	defer os.Remove(pidFile)

	fmt.Println("Starting the local control plane on 127.0.0.1:")
	start := time.Now()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: binDir, RepoRoot: root,
		Tenants: []string{"tenant-a", "tenant-b"},
		Log:     os.Stdout,
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	kubectl, _ := filepath.Rel(root, c.Kubectl)
	rel := func(p string) string {
		if r, err := filepath.Rel(root, p); err == nil {
			return r
		}
		return p
	}
	fmt.Printf(`
Kiln is up (%s). Try, from the repository root:

  export KUBECONFIG=%s        # cluster admin
  %s get apiservice v1alpha1.gpu.kiln.dev
  %s apply -f artifacts/examples/instancetypes.yaml
  %s --kubeconfig=%s apply -f artifacts/examples/instances.yaml
  %s --kubeconfig=%s get gpu

Tenants: %s and %s (edit in their own namespace).
Component logs: %s
Stop with Ctrl-C or `+"`make down`"+`.
`, time.Since(start).Round(time.Second), rel(c.AdminKubeconfig), kubectl, kubectl,
		kubectl, rel(c.KubeconfigFor("tenant-a")), kubectl, rel(c.KubeconfigFor("tenant-a")),
		rel(c.KubeconfigFor("tenant-a")), rel(c.KubeconfigFor("tenant-b")), rel(filepath.Join(dir, "logs")))

	ticker := time.NewTicker(2 * time.Second)
	defer ticker.Stop()
	for {
		select {
		case <-ctx.Done():
			fmt.Println("\nStopping the local control plane.")
			return nil
		case <-ticker.C:
			if err := c.Alive(); err != nil {
				return err
			}
		}
	}
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
