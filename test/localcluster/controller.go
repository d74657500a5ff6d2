package localcluster

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"kiln.dev/kiln/test/images"
)

const controllerServiceAccount = "kiln-controller"

// startController runs kiln-controller as its Deployment would: as its
// ServiceAccount (so artifacts/rbac/controller.yaml is what it may do),
// reaching Kiln's API through the aggregator, with leader election on.
func (c *Cluster) startController(ctx context.Context) error {
	kc, err := c.serviceAccountKubeconfig(ctx, controllerServiceAccount)
	if err != nil {
		return err
	}
	return c.startControllerWith(ctx, kc)
}

func (c *Cluster) startControllerWith(ctx context.Context, kc string) error {
	args := append([]string{
		"--kubeconfig=" + kc,
		"--bind-address=127.0.0.1:" + strconv.Itoa(c.ports.controller),
		"--metrics-bind-address=127.0.0.1:" + strconv.Itoa(c.ports.controllerMetrics),
		"--leader-elect=true",
		"--leader-elect-resource-namespace=" + kilnNamespace,
		// A killed replica's Lease is taken over within seconds.
		"--leader-elect-lease-duration=4s",
		"--leader-elect-renew-deadline=3s",
		"--leader-elect-retry-period=500ms",
		// The tests' sidecar, which real-0 has; kwok runs any name.
		"--ssh-image=" + images.SSHImage,
	}, c.opts.ControllerFlags...)
	if err := c.start("kiln-controller", args...); err != nil {
		return err
	}
	return c.waitHTTP(ctx, &http.Client{Timeout: 5 * time.Second}, c.ControllerURL()+"/healthz")
}

// ControllerURL serves the controller's /healthz and /livez.
func (c *Cluster) ControllerURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(c.ports.controller)
}

// ControllerMetricsURL serves the controller's /metrics, on loopback only.
func (c *Cluster) ControllerMetricsURL() string {
	return "http://127.0.0.1:" + strconv.Itoa(c.ports.controllerMetrics)
}

// KillController ends kiln-controller with SIGKILL, as a crash or an OOM
// kill would: no cleanup, no Lease release.
func (c *Cluster) KillController() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	i := slices.IndexFunc(c.procs, func(p *process) bool { return p.name == "kiln-controller" })
	if i < 0 {
		return fmt.Errorf("kiln-controller is not running")
	}
	p := c.procs[i]
	if err := p.cmd.Process.Kill(); err != nil {
		return err
	}
	<-p.done
	c.procs = slices.Delete(c.procs, i, i+1)
	return nil
}

// StartController starts kiln-controller again after KillController, and
// returns once it leads.
func (c *Cluster) StartController(ctx context.Context) error {
	if err := c.startController(ctx); err != nil {
		return err
	}
	return c.waitControllerLeads(ctx)
}

// waitControllerLeads waits until kiln-controller runs its loops: a
// restarted one first waits out the Lease of the one killed before it,
// and its work queues, in /metrics, exist only once it leads.
func (c *Cluster) waitControllerLeads(ctx context.Context) error {
	url := c.ControllerMetricsURL() + "/metrics"
	client := &http.Client{Timeout: 5 * time.Second}
	return c.poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false, err
		}
		resp, err := client.Do(req)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		return err == nil && strings.Contains(string(body), `workqueue_depth{name="instance"}`), err
	})
}

// StartControllerVia starts kiln-controller again after KillController,
// reaching kube-apiserver through server (a proxy a test runs, whose
// certificate caFile verifies) instead of directly.
func (c *Cluster) StartControllerVia(ctx context.Context, server, caFile string) error {
	kc, err := c.serviceAccountKubeconfigVia(ctx, controllerServiceAccount,
		filepath.Join(c.Dir, controllerServiceAccount+"-via.kubeconfig"), server, caFile)
	if err != nil {
		return err
	}
	if err := c.startControllerWith(ctx, kc); err != nil {
		return err
	}
	return c.waitControllerLeads(ctx)
}

// ContainerLogFile is what kwok serves as the log of every container;
// AppendContainerLog adds a line to it.
func (c *Cluster) ContainerLogFile() string { return filepath.Join(c.Dir, "container.log") }

// AppendContainerLog appends one line to every simulated container's log.
func (c *Cluster) AppendContainerLog(line string) error {
	f, err := os.OpenFile(c.ContainerLogFile(), os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	if _, err := f.WriteString(criLogLine(line)); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// criLogLine is one line in the CRI log format the kubelet serves from.
func criLogLine(msg string) string {
	return time.Now().UTC().Format(time.RFC3339Nano) + " stdout F " + msg + "\n"
}
