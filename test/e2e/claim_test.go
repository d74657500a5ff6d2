package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
	claimctl "kiln.dev/kiln/pkg/reconcile/claim"
	instancectl "kiln.dev/kiln/pkg/reconcile/instance"
	"kiln.dev/kiln/test/localcluster"
)

// The Claim tests run one after another, except those TestTimers runs
// side by side, each on a pool of its own: an InstanceType for a card
// model no other test uses, and kwok nodes made for it, so what they
// count is theirs alone.

// claimPool creates an InstanceType of model and one 8-card node per name
// (the first of them also offering seven 1g.10gb partitions), and removes
// them when the test ends.
func claimPool(t *testing.T, typ, model string, nodes ...string) {
	t.Helper()
	cs, _ := adminClients(t)
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: %s}
spec:
  accelerator:
    vendor: nvidia
    model: %s
    memory: 80Gi
    maxPerInstance: 8
    exclusive: {}
    partitions: [{name: 1g.10gb, memory: 10Gi}]
  resourcesPerCard: {cpu: "1", memory: 1Gi}
  nodeSelector: {nvidia.com/gpu.product: %s}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
`, typ, model, model), "create", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", typ, "--wait=false") })
	for i, name := range nodes {
		addNode(t, cs, name, model, i == 0)
	}
}

func addNode(t *testing.T, cs kubernetes.Interface, name, model string, partitions bool) {
	t.Helper()
	res := corev1.ResourceList{
		corev1.ResourceCPU:       resource.MustParse("64"),
		corev1.ResourceMemory:    resource.MustParse("512Gi"),
		corev1.ResourcePods:      resource.MustParse("110"),
		localcluster.ResourceGPU: resource.MustParse("8"),
	}
	if partitions {
		res[localcluster.ResourceMIG1g10gb] = resource.MustParse("7")
	}
	spec := localcluster.NodeSpec{Name: name, GPU: true, Resources: res,
		Labels: map[string]string{localcluster.LabelGPUProduct: model, localcluster.LabelGPUCount: "8"}}
	if _, err := cs.CoreV1().Nodes().Create(context.Background(), spec.Node(), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cs.CoreV1().Nodes().Delete(context.Background(), name, metav1.DeleteOptions{}) })
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		n, err := cs.CoreV1().Nodes().Get(ctx, name, metav1.GetOptions{})
		return err == nil && localcluster.NodeReady(n), nil
	})
	if err != nil {
		t.Fatalf("node %s not Ready: %v", name, err)
	}
}

func claimManifest(name, ns, typ, extra string) string {
	return fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Claim
metadata: {name: %s, namespace: %s}
spec:
  type: %s
`, name, ns, typ) + extra
}

func waitClaim(t *testing.T, ns, name string, timeout time.Duration, what string, done func(*gpuv1.Claim) bool) *gpuv1.Claim {
	t.Helper()
	claims := kilnAdmin(t).GpuV1alpha1().Claims(ns)
	return waitFor(t, fmt.Sprintf("claim %s/%s: %s", ns, name, what), timeout,
		func(ctx context.Context) (*gpuv1.Claim, error) { return claims.Get(ctx, name, metav1.GetOptions{}) },
		done, func(c *gpuv1.Claim) any { return c.Status })
}

func claimPhase(p gpuv1.ClaimPhase) func(*gpuv1.Claim) bool {
	return func(c *gpuv1.Claim) bool { return c.Status.Phase == p }
}

// cardsOn reads what actually runs on node: the whole cards requested by
// the bound, unfinished Pods of a Claim (its holder or its Instance's Pod)
// and by every other Pod.
func cardsOn(t *testing.T, cs kubernetes.Interface, node string) (claimed, others int64, names []string) {
	t.Helper()
	pods, err := cs.CoreV1().Pods("").List(context.Background(), metav1.ListOptions{FieldSelector: "spec.nodeName=" + node})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range pods.Items {
		if p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		var n int64
		for _, c := range p.Spec.Containers {
			q := c.Resources.Requests[localcluster.ResourceGPU]
			n += q.Value()
		}
		if _, ok := p.Labels[gpuv1.LabelClaim]; ok {
			claimed += n
		} else {
			others += n
		}
		names = append(names, fmt.Sprintf("%s/%s(%d)", p.Namespace, p.Name, n))
	}
	return claimed, others, names
}

func unbound(t *testing.T, cs kubernetes.Interface, ns, name string) {
	t.Helper()
	p, err := cs.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if p.Spec.NodeName != "" {
		t.Fatalf("pod %s/%s was bound to %s; the claimed cards were given away", ns, name, p.Spec.NodeName)
	}
}

// TestClaimHoldsAgainstScheduler: a 4-card Claim binds on an 8-card node;
// five one-card Instances then fill the other four cards and the fifth
// stays Pending with the scheduler's Insufficient nvidia.com/gpu, as does
// a raw Pod an admin makes; an Instance on the Claim runs on its node, and
// across 20 stop/start cycles, with those Pods waiting the whole time, the
// cards never leave the Claim.
func TestClaimHoldsAgainstScheduler(t *testing.T) {
	t.Parallel()
	ns := "e2e-claim-hold"
	controllerNamespace(t, ns)
	claimPool(t, "a100-hold", "NVIDIA-A100-HOLD", "claim-hold-0")
	cs, _ := adminClients(t)

	mustKubectl(t, tenant(tenantA), claimManifest("four", ns, "a100-hold", "  accelerators: 4\n"), "create", "-f", "-")
	c := waitClaim(t, ns, "four", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	if c.Status.NodeName != "claim-hold-0" || len(c.Status.Devices) != 4 {
		t.Fatalf("claim status %+v, want Bound on claim-hold-0 with 4 devices", c.Status)
	}

	for i := range 5 {
		mustKubectl(t, tenant(tenantA), instance(fmt.Sprintf("free-%d", i), ns, "a100-hold", "busybox:1"), "create", "-f", "-")
	}
	ready := 0
	for i := range 4 {
		waitInstance(t, ns, fmt.Sprintf("free-%d", i), 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		ready++
	}
	waitInstance(t, ns, "free-4", 60*time.Second, "Pending with Insufficient nvidia.com/gpu", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Insufficient nvidia.com/gpu")
	})
	raw := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "raw", Namespace: ns},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{Name: "c", Image: "busybox:1", Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{localcluster.ResourceGPU: resource.MustParse("1")},
				Limits:   corev1.ResourceList{localcluster.ResourceGPU: resource.MustParse("1")},
			}}},
			NodeSelector: map[string]string{localcluster.LabelGPUProduct: "NVIDIA-A100-HOLD"},
			Tolerations:  []corev1.Toleration{{Key: localcluster.TaintGPU, Operator: corev1.TolerationOpExists}},
		},
	}
	if _, err := cs.CoreV1().Pods(ns).Create(context.Background(), raw, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "raw", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		for _, cond := range p.Status.Conditions {
			if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && strings.Contains(cond.Message, "Insufficient nvidia.com/gpu") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("the admin's raw Pod was not refused by the scheduler: %v", err)
	}

	check := func(step string) {
		t.Helper()
		claimed, others, names := cardsOn(t, cs, "claim-hold-0")
		if claimed != 4 || others != 4 {
			t.Fatalf("%s: node claim-hold-0 runs %d claimed and %d other cards, want 4 and 4: %v", step, claimed, others, names)
		}
		unbound(t, cs, ns, "raw")
		unbound(t, cs, ns, "free-4")
	}
	check("bound")

	mustKubectl(t, tenant(tenantA), strings.Replace(instance("on-claim", ns, "a100-hold", "busybox:1"), "accelerators: 1", "accelerators: 4", 1)+"  claimName: four\n", "create", "-f", "-")
	inst := waitInstance(t, ns, "on-claim", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	if inst.Status.NodeName != "claim-hold-0" {
		t.Fatalf("instance on the claim runs on %q, want claim-hold-0", inst.Status.NodeName)
	}
	waitClaim(t, ns, "four", 30*time.Second, "Attached to on-claim", func(c *gpuv1.Claim) bool {
		return c.Status.Phase == gpuv1.ClaimAttached && c.Status.AttachedTo == "on-claim"
	})
	waitGone(t, "holder pod", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "four-hold", metav1.GetOptions{})
		return err
	})
	check("attached")

	for cycle := range 20 {
		mustKubectl(t, tenant(tenantA), "{}", "create", "--raw", fmt.Sprintf("/apis/gpu.kiln.dev/v1alpha1/namespaces/%s/instances/on-claim/stop", ns), "-f", "-")
		waitInstance(t, ns, "on-claim", 60*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped))
		waitClaim(t, ns, "four", 60*time.Second, "Bound again", func(c *gpuv1.Claim) bool { return c.Status.Phase == gpuv1.ClaimBound })
		waitPodRunning(t, cs, ns, "four-hold")
		check(fmt.Sprintf("cycle %d stopped", cycle))
		mustKubectl(t, tenant(tenantA), "{}", "create", "--raw", fmt.Sprintf("/apis/gpu.kiln.dev/v1alpha1/namespaces/%s/instances/on-claim/start", ns), "-f", "-")
		waitInstance(t, ns, "on-claim", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
		check(fmt.Sprintf("cycle %d started", cycle))
	}
}

// TestClaimSet: two Claims of a set of 4 cards each land on one 8-card
// node, never split, although another empty node is there; a set that
// cannot fit waits together with reason Capacity.
func TestClaimSet(t *testing.T) {
	t.Parallel()
	ns := "e2e-claim-set"
	controllerNamespace(t, ns)
	claimPool(t, "a100-set", "NVIDIA-A100-SET", "claim-set-0", "claim-set-1")
	// One card taken on each node, so a split (4 + 4 on two nodes) would
	// fit where the whole set (8) does not, and only one node can take 7.
	for _, name := range []string{"pin-0", "pin-1"} {
		node := "claim-set-0"
		if name == "pin-1" {
			node = "claim-set-1"
		}
		mustKubectl(t, tenant(tenantA), claimManifest(name, ns, "a100-set", fmt.Sprintf("  accelerators: 1\n  nodeName: %s\n", node)), "create", "-f", "-")
		waitClaim(t, ns, name, 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	}
	set := func(name, set string, cards int) string {
		return strings.Replace(claimManifest(name, ns, "a100-set", fmt.Sprintf("  accelerators: %d\n", cards)),
			"namespace: "+ns+"}", "namespace: "+ns+", labels: {gpu.kiln.dev/claim-set: "+set+"}}", 1)
	}
	mustKubectl(t, tenant(tenantA), set("pair-a", "pair", 3)+"---\n"+set("pair-b", "pair", 4), "create", "-f", "-")
	a := waitClaim(t, ns, "pair-a", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	b := waitClaim(t, ns, "pair-b", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	if a.Status.NodeName != b.Status.NodeName {
		t.Fatalf("claim set split: pair-a on %s, pair-b on %s", a.Status.NodeName, b.Status.NodeName)
	}
	// Each node has 7 or 0 left now; a set of 4 + 4 fits on no node.
	mustKubectl(t, tenant(tenantA), set("big-a", "big", 4)+"---\n"+set("big-b", "big", 4), "create", "-f", "-")
	for _, name := range []string{"big-a", "big-b"} {
		c := waitClaim(t, ns, name, 60*time.Second, "Pending with Capacity", func(c *gpuv1.Claim) bool {
			cond := meta.FindStatusCondition(c.Status.Conditions, gpuv1.ClaimConditionWaiting)
			return c.Status.Phase == gpuv1.ClaimPending && cond != nil && cond.Reason == gpuv1.ClaimReasonCapacity
		})
		if c.Status.NodeName != "" {
			t.Fatalf("claim %s of a set that does not fit was placed on %s", name, c.Status.NodeName)
		}
	}
	// An Instance on a Claim that waits, waits too, and says why.
	mustKubectl(t, tenant(tenantA), strings.Replace(instance("on-big", ns, "a100-set", "busybox:1"), "accelerators: 1", "accelerators: 4", 1)+"  claimName: big-a\n", "create", "-f", "-")
	waitInstance(t, ns, "on-big", 30*time.Second, "Pending with the Claim's reason", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Capacity") && strings.Contains(i.Status.Message, "big-a")
	})
	out := mustKubectl(t, tenant(tenantA), "", "get", "claims", "-n", ns)
	for _, want := range []string{"PHASE", "NODE", "ATTACHED-TO", "REASON", "Capacity", "Bound"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl get claims lacks %q:\n%s", want, out)
		}
	}
	desc := mustKubectl(t, tenant(tenantA), "", "describe", "claim", "big-a", "-n", ns)
	for _, want := range []string{"Capacity", "claim set big", "Events:"} {
		if !strings.Contains(desc, want) {
			t.Errorf("kubectl describe claim lacks %q:\n%s", want, desc)
		}
	}
	desc = mustKubectl(t, tenant(tenantA), "", "describe", "claim", "pair-a", "-n", ns)
	if !strings.Contains(desc, "Holding") {
		t.Errorf("kubectl describe claim pair-a shows no Bound event:\n%s", desc)
	}
}

// TestClaimLostAndPlacedAgain: deleting the claim's node makes the Claim
// Lost (a Warning event) and then Bound on another node.
func TestClaimLostAndPlacedAgain(t *testing.T) {
	ns := "e2e-claim-lost"
	controllerNamespace(t, ns)
	claimPool(t, "a100-lost", "NVIDIA-A100-LOST", "claim-lost-0", "claim-lost-1")
	cs, _ := adminClients(t)
	mustKubectl(t, tenant(tenantA), claimManifest("c", ns, "a100-lost", "  accelerators: 2\n"), "create", "-f", "-")
	c := waitClaim(t, ns, "c", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	first := c.Status.NodeName
	if err := cs.CoreV1().Nodes().Delete(context.Background(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	c = waitClaim(t, ns, "c", 60*time.Second, "Bound on another node", func(c *gpuv1.Claim) bool {
		return c.Status.Phase == gpuv1.ClaimBound && c.Status.NodeName != "" && c.Status.NodeName != first
	})
	events, err := cs.CoreV1().Events(ns).List(context.Background(), metav1.ListOptions{FieldSelector: "involvedObject.name=c,reason=" + claimctl.ReasonLost})
	if err != nil {
		t.Fatal(err)
	}
	if len(events.Items) == 0 || events.Items[0].Type != corev1.EventTypeWarning {
		t.Fatalf("no Warning %s event for the claim: %+v", claimctl.ReasonLost, events.Items)
	}
	claimed, _, names := cardsOn(t, cs, c.Status.NodeName)
	if claimed != 2 {
		t.Fatalf("node %s holds %d claimed cards, want 2: %v", c.Status.NodeName, claimed, names)
	}
}

// TestTimers runs side by side the tests that spend most of their time
// waiting on a timer (the pod garbage collector's 40 s, a Claim's expiry,
// a holder kept Terminating, an idle limit), each on nodes of its own: one
// after another they took 140 s of the serial tests, before the idle
// stop; side by side, the longest. It runs with the parallel tests too
// (79 s of the serial ones before): those start once every serial test
// is done, so its real-0 subtest still has that node to itself.
func TestTimers(t *testing.T) {
	t.Parallel()
	for _, tc := range []struct {
		name string
		test func(t *testing.T)
	}{
		{"instance node lost", testInstanceNodeLost},
		{"claim expires", testClaimExpires},
		{"claim charged until its holder is gone", testClaimChargedUntilHolderGone},
		{"idle stop", testIdleStop},
		{"card-hours spent", testLedger},
		{"card-hours spent on a Claim on real-0", testRealClaimSpent},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Parallel()
			tc.test(t)
		})
	}
}

// testInstanceNodeLost: deleting the node of a Ready Instance makes it
// say so (Pending, reason NodeLost, a Warning naming the node) until the
// pod garbage collector removes the Pod, then it runs on the other node.
func testInstanceNodeLost(t *testing.T) {
	ns := "e2e-node-lost"
	controllerNamespace(t, ns)
	claimPool(t, "a100-gone", "NVIDIA-A100-GONE", "node-gone-0", "node-gone-1")
	cs, _ := adminClients(t)
	mustKubectl(t, tenant(tenantA), instance("i", ns, "a100-gone", "busybox:1"), "create", "-f", "-")
	first := waitInstance(t, ns, "i", 60*time.Second, "Ready", phaseIs(gpuv1.InstanceReady)).Status.NodeName
	if err := cs.CoreV1().Nodes().Delete(context.Background(), first, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	lost := waitInstance(t, ns, "i", 30*time.Second, "NodeLost", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionReady)
		return i.Status.Phase == gpuv1.InstancePending && c != nil && c.Status == metav1.ConditionFalse && c.Reason == instancectl.ReasonNodeLost
	})
	if !strings.Contains(lost.Status.Message, first) {
		t.Errorf("message %q does not name node %s", lost.Status.Message, first)
	}
	// Events are written after the status, and asynchronously.
	var events *corev1.EventList
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		events, err = cs.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: "involvedObject.name=i,type=Warning"})
		return err == nil && slices.ContainsFunc(events.Items, func(e corev1.Event) bool { return strings.Contains(e.Message, first+" is gone") }), nil
	})
	if err != nil {
		t.Errorf("no Warning event names node %s as gone: %+v", first, events)
	}
	// The pod garbage collector waits 40 s before it removes a Pod of a
	// node that does not exist.
	again := waitInstance(t, ns, "i", 2*time.Minute, "Ready on the other node", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstanceReady && i.Status.NodeName != "" && i.Status.NodeName != first
	})
	if _, others, names := cardsOn(t, cs, again.Status.NodeName); others != 1 {
		t.Errorf("node %s runs %d cards of Pods outside Claims, want the Instance's 1: %v", again.Status.NodeName, others, names)
	}
}

// testClaimExpires: a Claim with expireAfter 30s, never attached, expires,
// its holder goes and its Budget charge with it.
func testClaimExpires(t *testing.T) {
	ns := "e2e-claim-expiry"
	controllerNamespace(t, ns)
	claimPool(t, "a100-exp", "NVIDIA-A100-EXP", "claim-exp-0")
	cs, _ := adminClients(t)
	kiln := kilnAdmin(t)
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: b, namespace: %s}\nspec: {hard: {accelerators: \"4\"}}\n", ns), "create", "-f", "-")
	mustKubectl(t, tenant(tenantA), claimManifest("short", ns, "a100-exp", "  accelerators: 2\n  expireAfter: 30s\n"), "create", "-f", "-")
	c := waitClaim(t, ns, "short", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	if c.Status.ExpiresAt == nil {
		t.Fatalf("bound claim with expireAfter has no expiresAt: %+v", c.Status)
	}
	used := func() string {
		b, err := kiln.GpuV1alpha1().Budgets(ns).Get(context.Background(), "b", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		q := b.Status.Used["accelerators"]
		return q.String()
	}
	if u := used(); u != "2" {
		t.Fatalf("budget used %s while the claim is Bound, want 2", u)
	}
	waitClaim(t, ns, "short", 60*time.Second, "Expired", claimPhase(gpuv1.ClaimExpired))
	waitGone(t, "holder of an expired claim", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "short-hold", metav1.GetOptions{})
		return err
	})
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		return used() == "0", nil
	})
	if err != nil {
		t.Fatalf("budget used %s after the claim expired, want 0", used())
	}
}

// testClaimChargedUntilHolderGone: a Claim's charge ends when its holder
// Pod is gone, not when the Claim is deleted or expires. An admin's
// finalizer keeps the holder Terminating, as a kubelet that has not
// stopped it yet would. Meanwhile the tenant cannot spend the card again
// (read against the Pod that still holds it), a deleted Claim keeps its
// finalizer, which the tenant cannot take off, and says, once the holder
// is overdue, why it waits; once the holder goes, the card is free.
func testClaimChargedUntilHolderGone(t *testing.T) {
	ns := "e2e-claim-release"
	controllerNamespace(t, ns)
	claimPool(t, "a100-rel", "NVIDIA-A100-REL", "claim-rel-0")
	cs, _ := adminClients(t)
	pods := cs.CoreV1().Pods(ns)
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: one, namespace: %s}\nspec: {hard: {accelerators: \"1\"}}\n", ns), "create", "-f", "-")
	tenantClaims := tenantKiln(t, tenantA).GpuV1alpha1().Claims(ns)
	second := &gpuv1.Claim{ObjectMeta: metav1.ObjectMeta{Name: "second", Namespace: ns},
		Spec: gpuv1.ClaimSpec{Type: "a100-rel", Accelerators: ptr.To[int32](1)}}
	const full = `claims.gpu.kiln.dev "second" is forbidden: exceeds budget "one": accelerators used 1 + requested 1 > hard 1`

	for _, tc := range []struct {
		name, spec string
		end        func(t *testing.T, name string)
	}{
		{name: "deleted", spec: "  accelerators: 1\n", end: func(t *testing.T, name string) {
			mustKubectl(t, tenant(tenantA), "", "delete", "claim", name, "-n", ns, "--wait=false")
		}},
		{name: "expired", spec: "  accelerators: 1\n  expireAfter: 10s\n", end: func(t *testing.T, name string) {
			waitClaim(t, ns, name, 60*time.Second, "Expired", claimPhase(gpuv1.ClaimExpired))
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			name := "held-" + tc.name
			mustKubectl(t, tenant(tenantA), claimManifest(name, ns, "a100-rel", tc.spec), "create", "-f", "-")
			t.Cleanup(func() {
				kubectl(admin(), "", "delete", "claim", name, "second", "-n", ns, "--ignore-not-found", "--wait=false")
			})
			waitClaim(t, ns, name, 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
			holder := name + "-hold"
			const linger = `{"metadata":{"finalizers":["e2e.kiln.dev/linger"]}}`
			if _, err := pods.Patch(context.Background(), holder, types.MergePatchType, []byte(linger), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
			release := func() {
				_, _ = pods.Patch(context.Background(), holder, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
			}
			t.Cleanup(release)

			tc.end(t, name)
			// For longer than the Budget loop takes to see the Claim go, the
			// holder still runs on the card, and a second card is refused.
			deadline := time.Now().Add(3 * time.Second)
			for time.Now().Before(deadline) {
				if _, err := tenantClaims.Create(context.Background(), second, metav1.CreateOptions{}); !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), full) {
					t.Fatalf("a second card while the holder of the %s Claim is still Terminating: %v; want refused with %q", tc.name, err, full)
				}
				time.Sleep(100 * time.Millisecond)
			}
			if tc.name == "deleted" {
				if _, err := kubectl(tenant(tenantA), "", "patch", "claim", name, "-n", ns, "--type=merge", "-p", `{"metadata":{"finalizers":null}}`); err == nil || !strings.Contains(err.Error(), "claims/finalizers") {
					t.Fatalf("the tenant took the Claim's finalizer off: %v", err)
				}
				c := waitClaim(t, ns, name, 90*time.Second, "Waiting "+claimctl.ReasonHolderTerminating, func(c *gpuv1.Claim) bool {
					return handover.WaitingReason(c) == claimctl.ReasonHolderTerminating
				})
				if msg := handover.WaitingMessage(c); !strings.Contains(msg, "holder Pod "+holder+" on claim-rel-0") {
					t.Errorf("Waiting message %q, want it to name the holder and its node", msg)
				}
			}

			// Once the holder is gone the card is free, and not before.
			release()
			err := wait.PollUntilContextTimeout(context.Background(), 50*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
				_, err := tenantClaims.Create(ctx, second, metav1.CreateOptions{})
				switch {
				case err == nil:
					if _, err := pods.Get(ctx, holder, metav1.GetOptions{}); !apierrors.IsNotFound(err) {
						t.Errorf("a second card was admitted while the holder still exists (get: %v)", err)
					}
					return true, nil
				case apierrors.IsForbidden(err) && strings.Contains(err.Error(), full):
					return false, nil
				}
				return false, fmt.Errorf("create of the second Claim: %w", err)
			})
			if err != nil {
				t.Fatal(err)
			}
			mustKubectl(t, admin(), "", "delete", "claim", "second", "-n", ns)
			if tc.name == "deleted" {
				waitGone(t, "the deleted Claim", func(ctx context.Context) error {
					_, err := tenantClaims.Get(ctx, name, metav1.GetOptions{})
					return err
				})
			}
			// The next case starts from a Budget the loop has brought back
			// to 0.
			waitFor(t, "budget one used 0", 30*time.Second,
				func(ctx context.Context) (*gpuv1.Budget, error) {
					return kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(ctx, "one", metav1.GetOptions{})
				},
				func(b *gpuv1.Budget) bool { q := b.Status.Used[gpuv1.BudgetAccelerators]; return q.IsZero() },
				func(b *gpuv1.Budget) any { return b.Status })
		})
	}
}

// TestClaimAttachRulesAndBudget: an 8-card Instance on a one-partition
// Claim and a second Instance on an attached Claim are refused; with a
// Budget of 2 cards, no mix of Claims and Instances runs more than 2
// cards, read from the Pods' requests.
func TestClaimAttachRulesAndBudget(t *testing.T) {
	ns := "e2e-claim-attach"
	controllerNamespace(t, ns)
	claimPool(t, "a100-att", "NVIDIA-A100-ATT", "claim-att-0")
	cs, _ := adminClients(t)
	mustKubectl(t, admin(), fmt.Sprintf("apiVersion: gpu.kiln.dev/v1alpha1\nkind: Budget\nmetadata: {name: two, namespace: %s}\nspec: {hard: {accelerators: \"2\"}}\n", ns), "create", "-f", "-")

	mustKubectl(t, tenant(tenantA), claimManifest("mig", ns, "a100-att", "  partition: 1g.10gb\n"), "create", "-f", "-")
	waitClaim(t, ns, "mig", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	_, err := kubectl(tenant(tenantA), strings.Replace(instance("too-big", ns, "a100-att", "busybox:1"), "accelerators: 1", "accelerators: 8", 1)+"  claimName: mig\n", "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "spec.claimName") {
		t.Fatalf("an 8-card Instance on a 1g.10gb Claim was not refused on spec.claimName: %v", err)
	}

	mustKubectl(t, tenant(tenantA), claimManifest("pair", ns, "a100-att", "  accelerators: 1\n"), "create", "-f", "-")
	waitClaim(t, ns, "pair", 60*time.Second, "Bound", claimPhase(gpuv1.ClaimBound))
	mustKubectl(t, tenant(tenantA), instance("first", ns, "a100-att", "busybox:1")+"  claimName: pair\n", "create", "-f", "-")
	waitInstance(t, ns, "first", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	_, err = kubectl(tenant(tenantA), instance("second", ns, "a100-att", "busybox:1")+"  claimName: pair\n", "create", "-f", "-")
	if err == nil || !strings.Contains(err.Error(), "first") {
		t.Fatalf("a second Instance on an attached Claim was not refused naming the first: %v", err)
	}

	// The Budget is used up (the partition's share plus one card): more
	// Instances or Claims, with or without a claimName, are refused.
	attempts := []string{
		instance("loose", ns, "a100-att", "busybox:1"),
		claimManifest("more", ns, "a100-att", "  accelerators: 1\n"),
		instance("on-mig", ns, "a100-att", "busybox:1") + "  claimName: mig\n",
		instance("on-missing", ns, "a100-att", "busybox:1") + "  claimName: nope\n",
	}
	for _, m := range attempts {
		if _, err := kubectl(tenant(tenantA), m, "create", "-f", "-"); err == nil {
			t.Errorf("admitted over a used-up Budget:\n%s", m)
		}
	}
	// The Instance on the Claim is not charged beside it: one card for
	// the Claim "pair" and, for the 1g.10gb partition, the larger of its
	// memory (10Gi of 80Gi) and its compute (1 of 7 slices): 143m.
	b, err := kilnAdmin(t).GpuV1alpha1().Budgets(ns).Get(context.Background(), "two", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if u := b.Status.Used["accelerators"]; u.MilliValue() != 1143 {
		t.Fatalf("budget used %s, want 1143m: the Claims, and nothing for the Instance on one", u.String())
	}
	// Count the Pods once the hand-over is done: until its holder is gone,
	// the Claim's card shows in two Pods' requests.
	waitClaim(t, ns, "pair", 30*time.Second, "Attached to first", func(c *gpuv1.Claim) bool {
		return c.Status.Phase == gpuv1.ClaimAttached && c.Status.AttachedTo == "first"
	})
	waitGone(t, "holder pod of claim pair", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "pair-hold", metav1.GetOptions{})
		return err
	})
	pods, err := cs.CoreV1().Pods(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	// What runs, in thousandths of a card: a whole card is 1000, a
	// 1g.10gb partition 143 (one of seven compute slices).
	var milli int64
	for _, p := range pods.Items {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			whole := c.Resources.Requests[localcluster.ResourceGPU]
			mig := c.Resources.Requests[localcluster.ResourceMIG1g10gb]
			milli += whole.Value()*1000 + mig.Value()*143
		}
	}
	if milli > 2000 {
		t.Fatalf("namespace with a 2-card Budget runs Pods requesting %d thousandths of a card", milli)
	}

	// The attached Claim cannot be deleted while its Instance runs.
	if _, err := kubectl(tenant(tenantA), "", "delete", "claim", "pair", "-n", ns, "--wait=false"); err == nil || !strings.Contains(err.Error(), "first") {
		t.Fatalf("deleting an attached Claim was not refused naming its Instance: %v", err)
	}
	mustKubectl(t, tenant(tenantA), "", "delete", "instance", "first", "-n", ns)
	mustKubectl(t, tenant(tenantA), "", "delete", "claim", "pair", "-n", ns)
	waitGone(t, "holder of a deleted claim", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "pair-hold", metav1.GetOptions{})
		if err == nil || apierrors.IsNotFound(err) {
			return err
		}
		return nil
	})
}
