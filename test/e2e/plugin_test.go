package e2e

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// The plugin tests run `kubectl gpu ...`: the real kubectl, finding
// kubectl-gpu on the PATH as a user's shell would (make build puts it in
// _output/bin).

// kubectlGPU runs `kubectl gpu args...` as the user of kubeconfig.
func kubectlGPU(t *testing.T, kubeconfig string, args ...string) (stdout, stderr string, err error) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	cmd := pluginCommand(ctx, t, kubeconfig, args...)
	var out, errOut bytes.Buffer
	cmd.Stdout, cmd.Stderr = &out, &errOut
	err = cmd.Run()
	if err != nil {
		err = fmt.Errorf("kubectl gpu %s: %w: %s", strings.Join(args, " "), err, strings.TrimSpace(errOut.String()))
	}
	return out.String(), errOut.String(), err
}

func mustKubectlGPU(t *testing.T, kubeconfig string, args ...string) string {
	t.Helper()
	out, _, err := kubectlGPU(t, kubeconfig, args...)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func pluginCommand(ctx context.Context, t *testing.T, kubeconfig string, args ...string) *exec.Cmd {
	t.Helper()
	bin := filepath.Join(repoRoot, "_output", "bin")
	if _, err := os.Stat(filepath.Join(bin, "kubectl-gpu")); err != nil {
		t.Fatalf("%v: run make build first (make e2e does)", err)
	}
	// kubectl takes no flags before a plugin's name: the kubeconfig comes
	// from the environment, as a user's would.
	cmd := exec.CommandContext(ctx, cluster.Kubectl, append([]string{"gpu"}, args...)...)
	cmd.Env = append(os.Environ(), "KUBECONFIG="+kubeconfig, "PATH="+bin+string(os.PathListSeparator)+os.Getenv("PATH"))
	return cmd
}

// TestPluginLifecycle: as tenant-a, stop and start an Instance with
// --wait, read and follow its log, print its ssh command, and get
// errors that say what to do.
func TestPluginLifecycle(t *testing.T) {
	t.Parallel()
	ns := "e2e-plugin-life"
	controllerNamespace(t, ns)
	kc := tenant(tenantA)
	mustKubectl(t, kc, "", "create", "secret", "generic", "keys", "-n", ns, "--from-literal=authorized_keys=ssh-ed25519 AAAA e2e")
	mustKubectl(t, kc, strings.Replace(cpuInstance("nb", ns, "cpu"), "  resources:", "  ssh: {authorizedKeysSecret: keys}\n  ports: [{name: ssh, port: 22}]\n  resources:", 1), "create", "-f", "-")
	waitInstance(t, ns, "nb", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))

	out, progress, err := kubectlGPU(t, kc, "stop", "nb", "-n", ns, "--wait", "--timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	if out != "instance.gpu.kiln.dev/nb stopped\n" || !strings.Contains(progress, "instance/nb: Stopped") {
		t.Errorf("stop --wait: stdout %q, progress %q", out, progress)
	}
	if i := waitInstance(t, ns, "nb", 5*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped)); !i.Spec.Stopped {
		t.Error("stop did not set spec.stopped")
	}
	out, progress, err = kubectlGPU(t, kc, "start", "nb", "-n", ns, "--wait", "--timeout=90s")
	if err != nil {
		t.Fatal(err)
	}
	if out != "instance.gpu.kiln.dev/nb started\n" || !strings.HasSuffix(progress, "instance/nb: Ready: running on cpu-0\n") {
		t.Errorf("start --wait: stdout %q, progress %q", out, progress)
	}
	ready := waitInstance(t, ns, "nb", 5*time.Second, "Ready when start --wait returned", phaseIs(gpuv1.InstanceReady))

	t.Run("why a Ready Instance", func(t *testing.T) {
		if out := mustKubectlGPU(t, kc, "why", "nb", "-n", ns); out != "instance/nb is Ready: running on cpu-0\n" {
			t.Errorf("why: %q", out)
		}
	})
	t.Run("ssh", func(t *testing.T) {
		var nodePort int32
		for _, p := range ready.Status.Ports {
			if p.Port == 22 {
				nodePort = p.NodePort
			}
		}
		want := fmt.Sprintf("ssh -p %d %s\n", nodePort, ready.Status.HostIPs[0])
		if out := mustKubectlGPU(t, kc, "ssh", "nb", "-n", ns); nodePort == 0 || out != want {
			t.Errorf("ssh printed %q, want %q", out, want)
		}
	})
	t.Run("top", func(t *testing.T) {
		if out := mustKubectlGPU(t, kc, "top", "-n", ns); !regexp.MustCompile(`(?m)^nb\s+Ready\s+cpu-0\s+<none>`).MatchString(out) {
			t.Errorf("top:\n%s", out)
		}
	})
	t.Run("not found", func(t *testing.T) {
		_, _, err := kubectlGPU(t, kc, "start", "ghost", "-n", ns)
		want := `instance "ghost" not found in namespace "e2e-plugin-life"; list them with kubectl get instances -n e2e-plugin-life`
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("start ghost: %v, want %q", err, want)
		}
	})
	t.Run("logs -f", func(t *testing.T) { followLog(t, kc, ns, "nb") })
}

// followLog reads the log, then follows it and sees a line written after
// the stream began.
func followLog(t *testing.T, kc, ns, name string) {
	if err := cluster.AppendContainerLog("plugin epoch 1"); err != nil {
		t.Fatal(err)
	}
	if out := mustKubectlGPU(t, kc, "logs", name, "-n", ns); !strings.Contains(out, "plugin epoch 1") {
		t.Fatalf("logs = %q, want the line written", out)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	followSeesAppended(ctx, t, pluginCommand(ctx, t, kc, "logs", name, "-n", ns, "-f", "--tail=50"), "plugin epoch 1", "plugin epoch 2")
}

// capacityRow is what `kubectl gpu capacity -o json` says of one type.
type capacityRow struct {
	Type        string `json:"type"`
	FreeCards   int32  `json:"freeCards"`
	BudgetCards *int64 `json:"budgetCards"`
	CanStart    int64  `json:"canStart"`
	LimitedBy   string `json:"limitedBy"`
}

func pluginCapacity(t *testing.T, kc, ns, typ string) capacityRow {
	t.Helper()
	var rows []capacityRow
	if err := json.Unmarshal([]byte(mustKubectlGPU(t, kc, "capacity", "-n", ns, "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	for _, r := range rows {
		if r.Type == typ {
			return r
		}
	}
	t.Fatalf("kubectl gpu capacity has no row for %s: %+v", typ, rows)
	return capacityRow{}
}

// waitCapacity polls capacity until ok says yes.
func waitCapacity(t *testing.T, kc, ns, typ, what string, ok func(capacityRow) bool) capacityRow {
	t.Helper()
	var last capacityRow
	err := wait.PollUntilContextTimeout(context.Background(), 500*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		last = pluginCapacity(t, kc, ns, typ)
		return ok(last), nil
	})
	if err != nil {
		t.Fatalf("kubectl gpu capacity: %s not reached; last %+v", what, last)
	}
	return last
}

// startOneCard creates one-card Instances and waits until all are Ready.
func startOneCard(t *testing.T, kc, ns, typ, prefix string, n int64) {
	t.Helper()
	for i := range n {
		mustKubectl(t, kc, instance(fmt.Sprintf("%s-%d", prefix, i), ns, typ, "busybox:1"), "create", "-f", "-")
	}
	for i := range n {
		waitInstance(t, ns, fmt.Sprintf("%s-%d", prefix, i), 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	}
}

// TestPluginCapacityAndWhy, as tenant-a on a pool of its own (one node of
// 8 cards): what capacity says can start, starts, and one more does not,
// for the reason it named (first a Budget, then the cards); why then
// names the scheduler's reason for an Instance pending for cards, the
// Claim's for one on a waiting Claim, and the Budget and its numbers for
// a start it would refuse.
func TestPluginCapacityAndWhy(t *testing.T) {
	t.Parallel()
	const (
		ns  = "e2e-plugin-cap"
		typ = "plugin-gpu"
	)
	controllerNamespace(t, ns)
	claimPool(t, typ, "NVIDIA-PLUGIN-E2E", "gpu-plugin-0")
	kc := tenant(tenantA)
	key := gpuv1.BudgetAcceleratorsPerTypePrefix + typ
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: team, namespace: %s}\nspec:\n  hard: {%s: \"3\"}\n", ns, key), "create", "-f", "-")

	// The Budget binds first.
	c := waitCapacity(t, kc, ns, typ, "8 free cards, 3 left in the Budget", func(r capacityRow) bool {
		return r.FreeCards == 8 && r.BudgetCards != nil && *r.BudgetCards == 3
	})
	if c.CanStart != 3 || c.LimitedBy != "budget/team:"+key {
		t.Fatalf("capacity %+v, want 3 limited by budget/team:%s", c, key)
	}
	startOneCard(t, kc, ns, typ, "a", c.CanStart)
	_, err := kubectl(kc, instance("a-over", ns, typ, "busybox:1"), "create", "-f", "-")
	if want := fmt.Sprintf(`exceeds budget "team": %s used 3 + requested 1 > hard 3`, key); err == nil || !strings.Contains(err.Error(), want) {
		t.Fatalf("one more than capacity said: %v, want refused with %q", err, want)
	}

	// Then the cards.
	mustKubectl(t, admin(), "", "patch", "budget", "team", "-n", ns, "--type=merge", "-p", fmt.Sprintf(`{"spec":{"hard":{%q:"10"}}}`, key))
	c = waitCapacity(t, kc, ns, typ, "5 free cards, 7 left in the Budget", func(r capacityRow) bool {
		return r.FreeCards == 5 && r.BudgetCards != nil && *r.BudgetCards == 7
	})
	if c.CanStart != 5 || c.LimitedBy != "cards" {
		t.Fatalf("capacity %+v, want 5 limited by cards", c)
	}
	startOneCard(t, kc, ns, typ, "b", c.CanStart)
	mustKubectl(t, kc, instance("over", ns, typ, "busybox:1"), "create", "-f", "-")
	waitInstance(t, ns, "over", 60*time.Second, "Pending for cards", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Insufficient nvidia.com/gpu")
	})
	t.Run("why pending for cards", func(t *testing.T) {
		out := mustKubectlGPU(t, kc, "why", "over", "-n", ns)
		t.Logf("kubectl gpu why over:\n%s", out)
		for _, want := range []string{"instance/over is Pending", "scheduler (pod/over Unschedulable):", "Insufficient nvidia.com/gpu",
			"instancetype/plugin-gpu (Active): 0 of 8 cards free on 1 node"} {
			if !strings.Contains(out, want) {
				t.Errorf("why over lacks %q:\n%s", want, out)
			}
		}
	})

	t.Run("why on a waiting Claim", func(t *testing.T) {
		mustKubectl(t, kc, claimManifest("reserve", ns, typ, "  accelerators: 1\n"), "create", "-f", "-")
		waitClaim(t, ns, "reserve", 60*time.Second, "waiting for capacity", func(c *gpuv1.Claim) bool {
			w := meta.FindStatusCondition(c.Status.Conditions, gpuv1.ClaimConditionWaiting)
			return c.Status.Phase == gpuv1.ClaimPending && w != nil && w.Reason == gpuv1.ClaimReasonCapacity
		})
		mustKubectl(t, kc, strings.Replace(instance("on-claim", ns, typ, "busybox:1"), "  resources:", "  claimName: reserve\n  resources:", 1), "create", "-f", "-")
		waitInstance(t, ns, "on-claim", 60*time.Second, "Pending on its Claim", func(i *gpuv1.Instance) bool {
			return i.Status.Phase == gpuv1.InstancePending && i.Status.ObservedGeneration == i.Generation
		})
		out := mustKubectlGPU(t, kc, "why", "on-claim", "-n", ns)
		t.Logf("kubectl gpu why on-claim:\n%s", out)
		if !strings.Contains(out, "claim/reserve is Pending, waiting (Capacity):") {
			t.Errorf("why on-claim lacks the Claim's Waiting reason:\n%s", out)
		}
		if out := mustKubectlGPU(t, kc, "why", "claim/reserve", "-n", ns); !strings.HasPrefix(out, "claim/reserve is Pending, waiting (Capacity):") {
			t.Errorf("why claim/reserve:\n%s", out)
		}
	})

	t.Run("why a start the Budget refuses", func(t *testing.T) {
		// 8 running, over and the Claim: 10 of 10.
		mustKubectl(t, kc, strings.Replace(instance("parked", ns, typ, "busybox:1"), "  resources:", "  stopped: true\n  resources:", 1), "create", "-f", "-")
		refusal := fmt.Sprintf(`exceeds budget "team": %s used 10 + requested 1 > hard 10`, key)
		if _, _, err := kubectlGPU(t, kc, "start", "parked", "-n", ns); err == nil || !strings.Contains(err.Error(), refusal) {
			t.Errorf("start parked: %v, want refused with %q", err, refusal)
		}
		out := mustKubectlGPU(t, kc, "why", "parked", "-n", ns)
		t.Logf("kubectl gpu why parked:\n%s", out)
		t.Logf("kubectl gpu capacity:\n%s", mustKubectlGPU(t, kc, "capacity", "-n", ns))
		for _, want := range []string{"instance/parked is stopped", "a start would be refused: ", refusal,
			fmt.Sprintf("budget/team: %s 10 of 10 used, 0 left", key)} {
			if !strings.Contains(out, want) {
				t.Errorf("why parked lacks %q:\n%s", want, out)
			}
		}
		got, err := kilnAdmin(t).GpuV1alpha1().Instances(ns).Get(context.Background(), "parked", metav1.GetOptions{})
		if err != nil || !got.Spec.Stopped {
			t.Errorf("why started parked (%v); its start must be a dry run", err)
		}
	})
}
