package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/ledger"
	"kiln.dev/kiln/test/localcluster"
)

// podRuns records, from a watch of the namespace's Pods, each Pod's run
// as the Pod itself tells it: bound to its node (PodScheduled) until its
// deletion was asked for (deletionTimestamp less the grace period).
type podRuns struct {
	mu   sync.Mutex
	runs map[string]*[2]time.Time // by Pod UID
}

func watchPodRuns(t *testing.T, ns string) *podRuns {
	t.Helper()
	cs, _ := adminClients(t)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	w, err := cs.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	r := &podRuns{runs: map[string]*[2]time.Time{}}
	go func() {
		for ev := range w.ResultChan() {
			pod, ok := ev.Object.(*corev1.Pod)
			if !ok {
				continue
			}
			r.mu.Lock()
			run := r.runs[string(pod.UID)]
			if run == nil {
				run = &[2]time.Time{}
				r.runs[string(pod.UID)] = run
			}
			for _, c := range pod.Status.Conditions {
				if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
					run[0] = c.LastTransitionTime.Time
				}
			}
			if d := pod.DeletionTimestamp; d != nil && run[1].IsZero() {
				grace := int64(0)
				if pod.DeletionGracePeriodSeconds != nil {
					grace = *pod.DeletionGracePeriodSeconds
				}
				run[1] = d.Add(-time.Duration(grace) * time.Second)
			}
			r.mu.Unlock()
		}
	}()
	return r
}

// seconds is the total the closed runs recorded, and how many there are.
func (r *podRuns) seconds() (total int64, n int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, run := range r.runs {
		if !run[0].IsZero() && !run[1].IsZero() {
			total += int64(run[1].Sub(run[0]) / time.Second)
			n++
		}
	}
	return total, n
}

// ledgerSeconds is the card-seconds an Instance's ledger holds, whole.
func ledgerSeconds(u *gpuv1.Usage) int64 {
	var milli int64
	for _, d := range ledger.Days(u, time.Time{}, time.Now()) {
		milli += d.CardSeconds.MilliValue()
	}
	return milli / 1000
}

// stopBudget creates Budget "hours" in ns: hours card-hours and 4 cards,
// onExhausted Stop.
func stopBudget(t *testing.T, ns, hours string) {
	t.Helper()
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Budget
metadata: {name: hours, namespace: %s}
spec:
  hard: {accelerator-hours: %q, accelerators: "4"}
  onExhausted: Stop
`, ns, hours), "create", "-f", "-")
}

// testLedger (issue Q): an Instance under a Budget of 0.01 card-hours
// (36 card-seconds) with onExhausted Stop is stopped once they are spent,
// with the Event and kubectl gpu why; a start and a create are then
// refused with 403; the ledger agrees with the run its Pod recorded, and
// kubectl gpu usage with the Budget.
func testLedger(t *testing.T) {
	ns := "e2e-ledger"
	controllerNamespace(t, ns)
	runs := watchPodRuns(t, ns)
	stopBudget(t, ns, "0.01")
	mustKubectl(t, tenant(tenantA), instance("spender", ns, "h100", "busybox:1"), "create", "-f", "-")
	waitInstance(t, ns, "spender", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	stopped := waitInstance(t, ns, "spender", 2*time.Minute, "stopped for its spent Budget", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionBudgetExhausted)
		return i.Spec.Stopped && c != nil && c.Status == metav1.ConditionTrue && phaseIs(gpuv1.InstanceStopped)(i)
	})
	if events, ok := recordedEvents(t, ns, "involvedObject.name=spender,reason=BudgetExhausted,type=Warning", "{.items[*].message}",
		"budget hours spent its accelerator-hours"); !ok {
		t.Errorf("BudgetExhausted events: %q, want one naming the Budget and its key", events)
	}
	if why := mustKubectlGPU(t, tenant(tenantA), "why", "spender", "-n", ns); !strings.Contains(why, "stopped it for spent card-hours") {
		t.Errorf("kubectl gpu why spender:\n%s\nwant it to say it was stopped for spent card-hours", why)
	}

	// A start and a create are refused, as any over-budget write is.
	for _, args := range [][]string{{"start", "spender", "-n", ns}} {
		if _, stderr, err := kubectlGPU(t, tenant(tenantA), args...); err == nil || !strings.Contains(stderr, `exceeds budget "hours": accelerator-hours consumed`) {
			t.Errorf("kubectl gpu %s: %v %s; want refused with the spent key", strings.Join(args, " "), err, stderr)
		}
	}
	if _, err := kubectl(tenant(tenantA), instance("another", ns, "h100", "busybox:1"), "create", "-f", "-"); err == nil ||
		!strings.Contains(err.Error(), "(Forbidden)") || !strings.Contains(err.Error(), `exceeds budget "hours": accelerator-hours consumed`) {
		t.Errorf("create after the hours are spent: %v; want 403 naming the Budget and its key", err)
	}

	// The ledger against the run the Pod recorded: to the second, less
	// the second the controller and the API server may read apart.
	waitFor(t, "the Pod's run recorded", 30*time.Second,
		func(context.Context) (int, error) { _, n := runs.seconds(); return n, nil },
		func(n int) bool { return n == 1 }, func(n int) any { return n })
	recorded, _ := runs.seconds()
	t.Logf("the Pod recorded a run of %d s; the ledger holds %d card-seconds", recorded, ledgerSeconds(stopped.Status.Usage))
	if got := ledgerSeconds(stopped.Status.Usage); got < recorded-1 || got > recorded+1 || stopped.Status.Usage.Current != nil {
		t.Errorf("ledger holds %d card-seconds (open run %+v); the Pod recorded %d", got, stopped.Status.Usage.Current, recorded)
	}
	if recorded < 36 {
		t.Errorf("stopped after %d card-seconds, before the Budget's 36 were spent", recorded)
	}

	// The Budget counts the same, and kubectl gpu usage shows it.
	b := waitFor(t, "budget hours counting the closed run", 30*time.Second,
		func(ctx context.Context) (*gpuv1.Budget, error) {
			return kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "hours", metav1.GetOptions{})
		},
		func(b *gpuv1.Budget) bool {
			return len(b.Status.Usage) == 1 && b.Status.Usage[0].CardSeconds.Value() == ledgerSeconds(stopped.Status.Usage)
		},
		func(b *gpuv1.Budget) any { return b.Status })
	if c := meta.FindStatusCondition(b.Status.Conditions, gpuv1.BudgetConditionExhausted); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("Exhausted %+v, want True", c)
	}
	// kubectl gpu usage -o json rows. (Not kubectlgpu.UsageRow: that
	// package links kustomize, whose Go plugin loader makes this binary
	// bind NVML's symbols at start.)
	var rows []struct {
		Type      string `json:"instanceType"`
		CardHours string `json:"cardHours"`
	}
	if err := json.Unmarshal([]byte(mustKubectlGPU(t, tenant(tenantA), "usage", "-n", ns, "-o", "json")), &rows); err != nil {
		t.Fatal(err)
	}
	if len(rows) != 2 || rows[0].Type != "h100" || rows[0].CardHours != fmt.Sprintf("0.%03d", ledgerSeconds(stopped.Status.Usage)*1000/3600) || rows[1].Type != "*" {
		t.Errorf("kubectl gpu usage rows %+v, want h100 and * at the Budget's %s card-seconds", rows, b.Status.Usage[0].CardSeconds.String())
	}
}

// testRealClaimSpent (issue Q): on real-0, a Claim under a Budget of 0.02
// card-hours (72 card-seconds) with onExhausted Stop, and the Instance
// running on its card, let go once the hours are spent: the Claim is
// released, the Instance stopped, no container of theirs runs in
// containerd any more and the card is free; the Claim cannot be run on
// again, nor another made, and the Budget counts what the Claim's ledger
// holds. (An Instance on a Claim charges nothing of its own, so stopping
// only Instances let a tenant with a Bound Claim run past the key.)
func testRealClaimSpent(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realspent"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	stopBudget(t, ns, "0.02")
	mustKubectl(t, tenant(tenantA), claimManifest("held", ns, typ, "  accelerators: 1\n"), "apply", "-f", "-")
	waitClaim(t, ns, "held", 2*time.Minute, "Bound on "+localcluster.RealNodeName, func(c *gpuv1.Claim) bool {
		return c.Status.Phase == gpuv1.ClaimBound && c.Status.NodeName == localcluster.RealNodeName && len(c.Status.Devices) == 1
	})
	holder, _ := mainContainer(t, ns, "held-hold")
	mustKubectl(t, tenant(tenantA), listingInstance("on-claim", ns, typ, "  claimName: held\n  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	waitInstance(t, ns, "on-claim", 2*time.Minute, "Ready on the Claim's card", readyOnRealNode(1))
	containers := append(podContainers(t, ns, "on-claim"), strings.TrimPrefix(holder, "containerd://"))

	cl := waitClaim(t, ns, "held", 3*time.Minute, "released for its spent Budget", func(c *gpuv1.Claim) bool {
		cond := meta.FindStatusCondition(c.Status.Conditions, gpuv1.ClaimConditionBudgetExhausted)
		return c.Status.Phase == gpuv1.ClaimExpired && cond != nil && cond.Status == metav1.ConditionTrue
	})
	waitInstance(t, ns, "on-claim", time.Minute, "stopped for its spent Budget", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionBudgetExhausted)
		return i.Spec.Stopped && c != nil && c.Status == metav1.ConditionTrue && phaseIs(gpuv1.InstanceStopped)(i)
	})
	// What runs on the node: none of their containers, no Pod of theirs.
	waitFor(t, "no container of the Claim or its Instance running on "+localcluster.RealNodeName, time.Minute,
		func(context.Context) ([]string, error) {
			tasks, err := cluster.RealNodeTasks()
			var running []string
			for _, id := range containers {
				if _, ok := tasks[id]; ok {
					running = append(running, id)
				}
			}
			return running, err
		},
		func(running []string) bool { return len(running) == 0 },
		func(running []string) any { return running })
	kube, _ := adminClients(t)
	pods, err := kube.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		t.Errorf("pod %s is still there after the release, on node %q", p.Name, p.Spec.NodeName)
	}
	waitRealCardsFree(t)

	if events, ok := recordedEvents(t, ns, "involvedObject.kind=Claim,involvedObject.name=held,reason=BudgetExhausted,type=Warning", "{.items[*].message}",
		"Released: budget hours spent its accelerator-hours"); !ok {
		t.Errorf("BudgetExhausted events of the Claim: %q, want one naming the Budget and its key", events)
	}
	if why := mustKubectlGPU(t, tenant(tenantA), "why", "claim/held", "-n", ns); !strings.Contains(why, "BudgetExhausted") {
		t.Errorf("kubectl gpu why claim/held:\n%s\nwant it to say the Budget released it", why)
	}
	// Neither the Claim nor a new one brings the card back.
	if _, stderr, err := kubectlGPU(t, tenant(tenantA), "start", "on-claim", "-n", ns); err == nil || !strings.Contains(stderr, `claim "held" has expired`) {
		t.Errorf("kubectl gpu start on-claim: %v %s; want refused on the released Claim", err, stderr)
	}
	if _, err := kubectl(tenant(tenantA), claimManifest("again", ns, typ, "  accelerators: 1\n"), "create", "-f", "-"); err == nil ||
		!strings.Contains(err.Error(), "(Forbidden)") || !strings.Contains(err.Error(), `exceeds budget "hours": accelerator-hours consumed`) {
		t.Errorf("a new Claim after the hours are spent: %v; want 403 naming the Budget and its key", err)
	}

	// The Claim accounted for the card, the Instance on it for nothing,
	// and the Budget counts the Claim's ledger.
	held := ledgerSeconds(cl.Status.Usage)
	t.Logf("the Claim's ledger holds %d card-seconds against the Budget's 72", held)
	if held < 72 || cl.Status.Usage.Current != nil {
		t.Errorf("the Claim's ledger holds %d card-seconds (open run %+v); want its run closed past the Budget's 72", held, cl.Status.Usage.Current)
	}
	inst, err := kilnAdmin(t).GpuV1alpha1().Instances(ns).Get(context.Background(), "on-claim", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if s := ledgerSeconds(inst.Status.Usage); s != 0 {
		t.Errorf("the Instance on the Claim's card accounted %d card-seconds of its own, want 0", s)
	}
	waitFor(t, "budget hours counting the Claim's closed run", 30*time.Second,
		func(ctx context.Context) (*gpuv1.Budget, error) {
			return kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "hours", metav1.GetOptions{})
		},
		func(b *gpuv1.Budget) bool {
			return len(b.Status.Usage) == 1 && b.Status.Usage[0].CardSeconds.Value() == held
		},
		func(b *gpuv1.Budget) any { return b.Status })
}
