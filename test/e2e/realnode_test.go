package e2e

import (
	"context"
	"fmt"
	"maps"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/images"
	"kiln.dev/kiln/test/localcluster"
)

// needRealNode skips a test on a host that cannot run real-0, saying why;
// on the project's machines it runs.
func needRealNode(t *testing.T) {
	t.Helper()
	if realNodeSkip != "" {
		if os.Getenv("KILN_TESTS_MUST_RUN") != "" {
			t.Fatalf("KILN_TESTS_MUST_RUN, and %s", realNodeSkip)
		}
		t.Skip(realNodeSkip)
	}
}

var realToleration = corev1.Toleration{Key: localcluster.LabelRealNode, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}

// TestRealNodeRunsAPod: real-0 is a real kubelet of the control plane's
// version on containerd 2.4.2, and a Pod bound there runs in a container
// whose output the kubelet serves back through kube-apiserver.
func TestRealNodeRunsAPod(t *testing.T) {
	needRealNode(t)
	kube, _ := adminClients(t)
	ctx := context.Background()
	node, err := kube.CoreV1().Nodes().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.37.2" {
		t.Errorf("kubelet version %q, want v1.37.2", v)
	}
	if rt := node.Status.NodeInfo.ContainerRuntimeVersion; !strings.HasPrefix(rt, "containerd://2.4.2") {
		t.Errorf("runtime %q, want containerd 2.4.2", rt)
	}
	ns := "e2e-realpod"
	createNamespace(t, ns)
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: ns},
		Spec: corev1.PodSpec{
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			NodeSelector:                 map[string]string{localcluster.LabelRealNode: "true"},
			Tolerations:                  []corev1.Toleration{realToleration},
			Containers: []corev1.Container{{
				Name: "main", Image: images.WorkloadImage,
				Command: []string{"/bin/sh", "-c", "echo hello from $(hostname); ls /dev"},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "Pod hello Succeeded on "+localcluster.RealNodeName, 2*time.Minute,
		func(ctx context.Context) (*corev1.Pod, error) {
			return kube.CoreV1().Pods(ns).Get(ctx, "hello", metav1.GetOptions{})
		},
		func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded && p.Spec.NodeName == localcluster.RealNodeName
		},
		func(p *corev1.Pod) any { return p.Status })
	logs, err := kube.CoreV1().Pods(ns).GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs through kube-apiserver and the kubelet: %v", err)
	}
	if !strings.Contains(string(logs), "hello from hello") || strings.Contains(string(logs), "nvidia") {
		t.Errorf("logs %q, want the container's greeting and no card under /dev", logs)
	}
}

// TestInstanceOnRealNode: a tenant's Instance runs in a real container on
// real-0, and `kubectl gpu logs` shows what that container printed.
func TestInstanceOnRealNode(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realinst"
	controllerNamespace(t, ns)
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata:
  name: real-cpu-%[1]s
spec:
  displayName: CPU on the real node
  resourcesPerCard: {cpu: 100m, memory: 64Mi}
  nodeSelector: {%[2]s: "true"}
  tolerations: [{key: %[2]s, operator: Exists, effect: NoSchedule}]
`, ns, localcluster.LabelRealNode), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin(), "", "delete", "instancetype", "real-cpu-"+ns, "--wait=false") })
	mustKubectl(t, tenant(tenantA), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata:
  name: box
  namespace: %s
spec:
  type: real-cpu-%s
  image: %s
  resources: {accelerators: 0}
  command: ["/bin/sh", "-c", "trap 'exit 0' TERM; echo started on $(hostname); while true; do sleep 1; done"]
`, ns, ns, images.WorkloadImage), "apply", "-f", "-")
	inst := waitInstance(t, ns, "box", 2*time.Minute, "Ready on "+localcluster.RealNodeName, func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && i.Status.NodeName == localcluster.RealNodeName
	})
	if inst.Status.NodeName != localcluster.RealNodeName {
		t.Fatalf("node %q", inst.Status.NodeName)
	}
	out, stderr, err := kubectlGPU(t, tenant(tenantA), "logs", "box", "-n", ns)
	if err != nil || !strings.Contains(out, "started on box") {
		t.Errorf("kubectl gpu logs box: %q %q %v; want the container's own line", out, stderr, err)
	}
}

// realCardType makes an InstanceType of real-0's fake cards, for one test.
func realCardType(t *testing.T, ns string) string {
	t.Helper()
	typ := "real-" + ns
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata:
  name: %[1]s
spec:
  displayName: Fake cards on the real node
  accelerator: {vendor: nvidia, model: %[2]s, memory: 16Gi, maxPerInstance: 4, exclusive: {}}
  resourcesPerCard: {cpu: 100m, memory: 64Mi}
  nodeSelector: {%[3]s: "true"}
  tolerations: [{key: %[3]s, operator: Exists, effect: NoSchedule}]
`, typ, localcluster.ProductFake, localcluster.LabelRealNode), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin(), "", "delete", "instancetype", typ, "--wait=false") })
	return typ
}

// waitRealCardsFree waits until no Pod on real-0 holds a card: a test
// before may have left its namespace Terminating, its Pods with it.
func waitRealCardsFree(t *testing.T) {
	t.Helper()
	kube, _ := adminClients(t)
	waitFor(t, "every card of "+localcluster.RealNodeName+" free", 2*time.Minute,
		func(ctx context.Context) ([]string, error) {
			pods, err := kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + localcluster.RealNodeName})
			if err != nil {
				return nil, err
			}
			var holding []string
			for _, p := range pods.Items {
				for _, c := range p.Spec.Containers {
					_, card := c.Resources.Limits[localcluster.ResourceGPU]
					_, share := c.Resources.Limits[localcluster.ResourceGPUShared]
					if card || share {
						holding = append(holding, p.Namespace+"/"+p.Name)
					}
				}
			}
			return holding, nil
		},
		func(holding []string) bool { return len(holding) == 0 },
		func(holding []string) any { return holding })
}

// listingInstance is an Instance that prints its /dev and
// NVIDIA_VISIBLE_DEVICES, then runs on; extra is more of its spec.
func listingInstance(name, ns, typ, extra string) string {
	return fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata:
  name: %s
  namespace: %s
spec:
  type: %s
  image: %s
  command: ["/bin/sh", "-c", "trap 'exit 0' TERM; ls /dev; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; while true; do sleep 1; done"]
`, name, ns, typ, images.WorkloadImage) + extra
}

// cardsSeen is what an Instance's container printed of its cards: the
// nvidia device nodes under /dev, and the UUIDs NVIDIA_VISIBLE_DEVICES
// names, each sorted.
func cardsSeen(t *testing.T, ns, name string) (dev, uuids []string) {
	t.Helper()
	out := waitFor(t, "instance "+name+"'s listing in kubectl gpu logs", 30*time.Second,
		func(context.Context) (string, error) {
			o, _, err := kubectlGPU(t, tenant(tenantA), "logs", name, "-n", ns)
			return o, err
		},
		func(o string) bool { return strings.Contains(o, "NVIDIA_VISIBLE_DEVICES=") },
		func(o string) any { return o })
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "nvidia"):
			dev = append(dev, line)
		case strings.HasPrefix(line, "NVIDIA_VISIBLE_DEVICES="):
			if v := strings.TrimPrefix(line, "NVIDIA_VISIBLE_DEVICES="); v != "" {
				uuids = strings.Split(v, ",")
			}
		}
	}
	slices.Sort(dev)
	slices.Sort(uuids)
	return dev, uuids
}

// allocated is what status.allocations names: device nodes and UUIDs,
// sorted.
func allocated(inst *gpuv1.Instance) (dev, uuids []string) {
	for _, a := range inst.Status.Allocations {
		dev = append(dev, fmt.Sprintf("nvidia%d", a.Index))
		uuids = append(uuids, a.Device)
	}
	slices.Sort(dev)
	slices.Sort(uuids)
	return dev, uuids
}

func readyOnRealNode(cards int) func(*gpuv1.Instance) bool {
	return func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && i.Status.NodeName == localcluster.RealNodeName && len(i.Status.Allocations) == cards
	}
}

// TestInstanceSeesItsCards: an Instance of two fake cards on real-0 finds
// under /dev exactly the cards status.allocations names, and
// NVIDIA_VISIBLE_DEVICES names the same UUIDs: the node agent's device
// plugin allocated them, the kubelet asked it, and containerd injected
// them by CDI. Two Instances get disjoint cards, and a third that does
// not fit waits with the scheduler's reason in kubectl gpu why.
func TestInstanceSeesItsCards(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realcards"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	seen := map[string]string{}
	for _, name := range []string{"first", "second"} {
		mustKubectl(t, tenant(tenantA), listingInstance(name, ns, typ, "  resources: {accelerators: 2}\n"), "apply", "-f", "-")
		inst := waitInstance(t, ns, name, 2*time.Minute, "Ready on "+localcluster.RealNodeName+" with two cards", readyOnRealNode(2))
		wantDev, wantUUIDs := allocated(inst)
		dev, uuids := cardsSeen(t, ns, name)
		if !slices.Equal(dev, wantDev) {
			t.Errorf("%s: cards under /dev %v, want exactly %v (status.allocations %+v)", name, dev, wantDev, inst.Status.Allocations)
		}
		if !slices.Equal(uuids, wantUUIDs) {
			t.Errorf("%s: NVIDIA_VISIBLE_DEVICES %v, want the allocated %v", name, uuids, wantUUIDs)
		}
		for _, d := range dev {
			if other, ok := seen[d]; ok {
				t.Errorf("%s and %s both see %s", other, name, d)
			}
			seen[d] = name
		}
	}
	mustKubectl(t, tenant(tenantA), listingInstance("third", ns, typ, "  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	waitInstance(t, ns, "third", time.Minute, "Pending for cards", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Insufficient nvidia.com/gpu")
	})
	out := mustKubectlGPU(t, tenant(tenantA), "why", "third", "-n", ns)
	for _, want := range []string{"instance/third is Pending", "Insufficient nvidia.com/gpu"} {
		if !strings.Contains(out, want) {
			t.Errorf("kubectl gpu why third lacks %q:\n%s", want, out)
		}
	}
}

// TestClaimOnRealNode: a Claim on real-0 is held by a real pause
// container, and the Instance that attaches to it gets the Claim's very
// cards, in its /dev and in its status.
func TestClaimOnRealNode(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realclaim"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	mustKubectl(t, tenant(tenantA), claimManifest("held", ns, typ, "  accelerators: 2\n"), "apply", "-f", "-")
	cl := waitClaim(t, ns, "held", 2*time.Minute, "Bound on "+localcluster.RealNodeName, func(c *gpuv1.Claim) bool {
		return c.Status.Phase == gpuv1.ClaimBound && c.Status.NodeName == localcluster.RealNodeName && len(c.Status.Devices) == 2 &&
			!strings.Contains(strings.Join(c.Status.Devices, ","), "/")
	})
	kube, _ := adminClients(t)
	waitFor(t, "holder held-hold running "+images.PauseImage, time.Minute,
		func(ctx context.Context) (*corev1.Pod, error) {
			return kube.CoreV1().Pods(ns).Get(ctx, "held-hold", metav1.GetOptions{})
		},
		func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return p.Status.Phase == corev1.PodRunning && len(cs) == 1 && cs[0].State.Running != nil && cs[0].Image == images.PauseImage
		},
		func(p *corev1.Pod) any { return p.Status })
	claimed := slices.Sorted(slices.Values(cl.Status.Devices))
	mustKubectl(t, tenant(tenantA), listingInstance("on-claim", ns, typ, "  claimName: held\n  resources: {accelerators: 2}\n"), "apply", "-f", "-")
	inst := waitInstance(t, ns, "on-claim", 2*time.Minute, "Ready on the Claim's cards", readyOnRealNode(2))
	if _, uuids := allocated(inst); !slices.Equal(uuids, claimed) {
		t.Errorf("status.allocations %v, want the Claim's %v", uuids, claimed)
	}
	if _, uuids := cardsSeen(t, ns, "on-claim"); !slices.Equal(uuids, claimed) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES %v, want the Claim's %v", uuids, claimed)
	}
}

// mainContainer is the running container of an Instance's Pod: its ID and
// restart count as the kubelet reports them.
func mainContainer(t *testing.T, ns, name string) (id string, restarts int32) {
	t.Helper()
	kube, _ := adminClients(t)
	pod := waitFor(t, "pod "+name+"'s container running", time.Minute,
		func(ctx context.Context) (*corev1.Pod, error) {
			return kube.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		},
		func(p *corev1.Pod) bool {
			cs := p.Status.ContainerStatuses
			return len(cs) > 0 && cs[0].State.Running != nil && cs[0].ContainerID != ""
		},
		func(p *corev1.Pod) any { return p.Status.ContainerStatuses })
	cs := pod.Status.ContainerStatuses[0]
	return cs.ContainerID, cs.RestartCount
}

// heldBy is who NodeDevices says holds each of real-0's cards: the
// holder's Pod UID by device UUID.
func heldBy(nd *gpuv1.NodeDevices) map[string]string {
	out := map[string]string{}
	for _, d := range nd.Status.Devices {
		if d.Holder != nil {
			out[d.UUID] = string(d.Holder.PodUID)
		}
	}
	return out
}

// TestRealNodeRestarts: restarting the kubelet keeps the running
// containers and their cards, the device plugin registers with the new
// kubelet, and a new Instance gets a free card through it. Restarting the
// node agent with its NodeDevices deleted meanwhile rebuilds every holder
// from the kubelet's PodResources, the only place left that knows them.
func TestRealNodeRestarts(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realrestart"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	kube, _ := adminClients(t)
	kiln := kilnAdmin(t)
	mustKubectl(t, tenant(tenantA), listingInstance("steady", ns, typ, "  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	steady := waitInstance(t, ns, "steady", 2*time.Minute, "Ready on real-0 with a card", readyOnRealNode(1))
	container, restarts := mainContainer(t, ns, "steady")

	restarted := time.Now()
	if _, err := cluster.Restart("kubelet", nil); err != nil {
		t.Fatal(err)
	}
	waitFor(t, localcluster.RealNodeName+" Ready again, with its 4 cards allocatable", time.Minute,
		func(ctx context.Context) (*corev1.Node, error) {
			return kube.CoreV1().Nodes().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
		},
		func(n *corev1.Node) bool {
			cards := n.Status.Allocatable[localcluster.ResourceGPU]
			for _, c := range n.Status.Conditions {
				if c.Type == corev1.NodeReady {
					return c.Status == corev1.ConditionTrue && c.LastHeartbeatTime.After(restarted) && cards.Value() == 4
				}
			}
			return false
		},
		func(n *corev1.Node) any { return n.Status })
	mustKubectl(t, tenant(tenantA), listingInstance("after", ns, typ, "  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	after := waitInstance(t, ns, "after", 2*time.Minute, "Ready on real-0 with a card", readyOnRealNode(1))
	if a, s := after.Status.Allocations[0].Device, steady.Status.Allocations[0].Device; a == s {
		t.Errorf("after the kubelet restart, the new Instance got %s, which steady holds", a)
	}
	wantDev, _ := allocated(after)
	if dev, _ := cardsSeen(t, ns, "after"); !slices.Equal(dev, wantDev) {
		t.Errorf("after: /dev %v, want its allocated %v", dev, wantDev)
	}
	if id, n := mainContainer(t, ns, "steady"); id != container || n != restarts {
		t.Errorf("steady's container after the kubelet restart: %s (restarts %d), want the same %s (restarts %d)", id, n, container, restarts)
	}
	if got := waitInstance(t, ns, "steady", 10*time.Second, "still Ready", readyOnRealNode(1)); got.Status.Allocations[0].Device != steady.Status.Allocations[0].Device {
		t.Errorf("steady's allocation moved from %s to %s", steady.Status.Allocations[0].Device, got.Status.Allocations[0].Device)
	}

	pods := map[string]string{}
	for _, name := range []string{"steady", "after"} {
		p, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		inst := waitInstance(t, ns, name, 10*time.Second, "Ready", readyOnRealNode(1))
		pods[inst.Status.Allocations[0].Device] = string(p.UID)
	}
	if _, err := cluster.Restart("node-agent-"+localcluster.RealNodeName, func() error {
		return kiln.GpuV1alpha1().NodeDevices().Delete(context.Background(), localcluster.RealNodeName, metav1.DeleteOptions{})
	}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "NodeDevices "+localcluster.RealNodeName+" with both holders again", time.Minute,
		func(ctx context.Context) (map[string]string, error) {
			nd, err := kiln.GpuV1alpha1().NodeDevices().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return heldBy(nd), nil
		},
		func(held map[string]string) bool { return maps.Equal(held, pods) },
		func(held map[string]string) any { return fmt.Sprintf("held %v, want %v", held, pods) })
}

// TestRealNodeUnhealthyCard: a card the inventory marks unhealthy leaves
// the kubelet's allocatable, the Instance holding it says so with a
// condition and an Event, and no container started afterwards gets it.
func TestRealNodeUnhealthyCard(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realsick"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	kube, _ := adminClients(t)
	mustKubectl(t, tenant(tenantA), listingInstance("sick", ns, typ, "  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	failed := waitInstance(t, ns, "sick", 2*time.Minute, "Ready on real-0 with a card", readyOnRealNode(1)).Status.Allocations[0].Device
	if err := cluster.SetDeviceHealth(localcluster.RealNodeName, failed, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.SetDeviceHealth(localcluster.RealNodeName, failed, "") })
	waitFor(t, "the kubelet's allocatable one card lower", time.Minute,
		func(ctx context.Context) (*corev1.Node, error) {
			return kube.CoreV1().Nodes().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
		},
		func(n *corev1.Node) bool {
			cards, capacity := n.Status.Allocatable[localcluster.ResourceGPU], n.Status.Capacity[localcluster.ResourceGPU]
			return cards.Value() == 3 && capacity.Value() == 4
		},
		func(n *corev1.Node) any { return n.Status.Allocatable })
	waitInstance(t, ns, "sick", 30*time.Second, "DeviceHealthy=False naming the device", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionDeviceHealthy)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "device "+failed)
	})
	if events, ok := recordedEvents(t, ns, "involvedObject.name=sick,reason=DeviceUnhealthy", "{.items[*].message}", failed); !ok {
		t.Errorf("no DeviceUnhealthy Event naming %s: %q", failed, events)
	}
	// The three healthy cards go to three new containers; the failed one
	// to none, although its Instance stops and frees it.
	mustKubectlGPU(t, tenant(tenantA), "stop", "sick", "-n", ns)
	mustKubectl(t, tenant(tenantA), listingInstance("rest", ns, typ, "  resources: {accelerators: 3}\n"), "apply", "-f", "-")
	rest := waitInstance(t, ns, "rest", 2*time.Minute, "Ready on real-0 with three cards", readyOnRealNode(3))
	_, uuids := cardsSeen(t, ns, "rest")
	if slices.Contains(uuids, failed) {
		t.Errorf("rest sees the failed %s: %v", failed, uuids)
	}
	if _, want := allocated(rest); !slices.Equal(uuids, want) {
		t.Errorf("rest sees %v, was allocated %v", uuids, want)
	}
	mustKubectl(t, tenant(tenantA), listingInstance("more", ns, typ, "  resources: {accelerators: 1}\n"), "apply", "-f", "-")
	waitInstance(t, ns, "more", time.Minute, "Pending: the only card left is the failed one", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Insufficient nvidia.com/gpu")
	})
}

// sshKey is images.SSHKey in the test's own directory.
func sshKey(t *testing.T) (file, authorized string) {
	t.Helper()
	file, authorized, err := images.SSHKey(t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	return file, authorized
}

// sshEcho runs `echo ok` in the Instance's SSH sidecar through
// `kubectl gpu ssh --exec`: real ssh, to the node port on real-0's
// address, which kube-proxy forwards to the Pod. The sidecar's host key
// is new with every container, so it is not checked.
// Ready says the Pod is; the node port forwards once kube-proxy has seen
// its endpoint, a moment later, so the first tries may be refused.
func sshEcho(t *testing.T, ns, name, key string) {
	t.Helper()
	waitFor(t, "ssh "+name+" echo ok", time.Minute,
		func(context.Context) (string, error) {
			out, stderr, err := kubectlGPU(t, tenant(tenantA), "ssh", name, "-n", ns, "--exec", "-i", key, "--",
				"-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes", "-o", "ConnectTimeout=10",
				"echo", "ok")
			if err != nil {
				return fmt.Sprintf("%q %q %v", out, stderr, err), nil
			}
			return strings.TrimSpace(out), nil
		},
		func(out string) bool { return out == "ok" },
		func(out string) any { return out + "\n" + cluster.RealNodeRules() })
}

// podContainers is the containerd IDs of a Pod's containers.
func podContainers(t *testing.T, ns, name string) []string {
	t.Helper()
	kube, _ := adminClients(t)
	p, err := kube.CoreV1().Pods(ns).Get(context.Background(), name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var ids []string
	for _, cs := range p.Status.ContainerStatuses {
		ids = append(ids, strings.TrimPrefix(cs.ContainerID, "containerd://"))
	}
	return ids
}

// TestSSHOnRealNode: `kubectl gpu ssh --exec` reaches an Instance's SSH
// sidecar through its real node port; a stop with --wait ends its
// containers' processes and frees its card; a start with --wait brings it
// back on the same node port.
func TestSSHOnRealNode(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realssh"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	key, authorized := sshKey(t)
	mustKubectl(t, tenant(tenantA), "", "create", "secret", "generic", "keys", "-n", ns, "--from-literal=authorized_keys="+authorized)
	mustKubectl(t, tenant(tenantA), listingInstance("box", ns, typ,
		"  resources: {accelerators: 1}\n  ssh: {authorizedKeysSecret: keys}\n  ports: [{name: ssh, port: 22}]\n"), "apply", "-f", "-")
	inst := waitInstance(t, ns, "box", 2*time.Minute, "Ready on real-0 with a card and a node port", func(i *gpuv1.Instance) bool {
		return readyOnRealNode(1)(i) && len(i.Status.Ports) == 1 && i.Status.Ports[0].NodePort != 0
	})
	nodePort := inst.Status.Ports[0].NodePort
	sshEcho(t, ns, "box", key)

	containers := podContainers(t, ns, "box")
	tasks, err := cluster.RealNodeTasks()
	if err != nil {
		t.Fatal(err)
	}
	for _, id := range containers {
		if _, ok := tasks[id]; !ok {
			t.Fatalf("container %s of box is not running on real-0: %v", id, tasks)
		}
	}
	mustKubectlGPU(t, tenant(tenantA), "stop", "box", "-n", ns, "--wait")
	if tasks, err = cluster.RealNodeTasks(); err != nil {
		t.Fatal(err)
	}
	for _, id := range containers {
		if pid, ok := tasks[id]; ok {
			t.Errorf("after stop --wait, container %s of box still runs as PID %d", id, pid)
		}
	}
	waitRealCardsFree(t)
	waitFor(t, "NodeDevices "+localcluster.RealNodeName+" with no holder", 30*time.Second,
		func(ctx context.Context) (map[string]string, error) {
			nd, err := kilnAdmin(t).GpuV1alpha1().NodeDevices().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
			if err != nil {
				return nil, err
			}
			return heldBy(nd), nil
		},
		func(held map[string]string) bool { return len(held) == 0 },
		func(held map[string]string) any { return held })

	mustKubectlGPU(t, tenant(tenantA), "start", "box", "-n", ns, "--wait")
	inst = waitInstance(t, ns, "box", 2*time.Minute, "Ready again", readyOnRealNode(1))
	if got := inst.Status.Ports[0].NodePort; got != nodePort {
		t.Errorf("node port %d after start, want %d as before", got, nodePort)
	}
	sshEcho(t, ns, "box", key)
}

// TestRealNodeExample applies artifacts/examples/real-node.yaml as the
// admin and real-instance.yaml as tenant-a, as the README's walk-through
// does: the Instance turns Ready on real-0, and what its container lists
// is exactly its status.allocations. While it holds its cards, a tenant's
// raw Pod on real-0 that asks for none, even with NVIDIA_VISIBLE_DEVICES=all,
// sees no card: the runtime gives devices by CDI, for the device plugin's
// allocations only.
func TestRealNodeExample(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realexample"
	controllerNamespace(t, ns)
	waitRealCardsFree(t)
	mustKubectl(t, admin(), readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "real-node.yaml")), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin(), "", "delete", "instancetype", "real", "--wait=false") })
	instance := strings.ReplaceAll(readFile(t, filepath.Join(repoRoot, "artifacts", "examples", "real-instance.yaml")), "namespace: tenant-a", "namespace: "+ns)
	mustKubectl(t, tenant(tenantA), instance, "apply", "-f", "-")
	inst := waitInstance(t, ns, "hello-real", 2*time.Minute, "Ready on real-0 with two cards", readyOnRealNode(2))
	wantDev, wantUUIDs := allocated(inst)
	dev, uuids := cardsSeen(t, ns, "hello-real")
	if !slices.Equal(dev, wantDev) || !slices.Equal(uuids, wantUUIDs) {
		t.Errorf("hello-real sees %v %v, want its allocations %v %v", dev, uuids, wantDev, wantUUIDs)
	}

	mustKubectl(t, tenant(tenantA), fmt.Sprintf(`apiVersion: v1
kind: Pod
metadata:
  name: raw
  namespace: %s
spec:
  restartPolicy: Never
  tolerations: [{key: %[2]s, operator: Exists, effect: NoSchedule}]
  nodeSelector: {%[2]s: "true"}
  containers:
  - name: main
    image: %[3]s
    env: [{name: NVIDIA_VISIBLE_DEVICES, value: all}]
    command: ["/bin/sh", "-c", "ls /dev; echo done"]
`, ns, localcluster.LabelRealNode, images.WorkloadImage), "apply", "-f", "-")
	kube, _ := adminClients(t)
	waitFor(t, "the raw Pod Succeeded on "+localcluster.RealNodeName, time.Minute,
		func(ctx context.Context) (*corev1.Pod, error) {
			return kube.CoreV1().Pods(ns).Get(ctx, "raw", metav1.GetOptions{})
		},
		func(p *corev1.Pod) bool {
			return p.Status.Phase == corev1.PodSucceeded && p.Spec.NodeName == localcluster.RealNodeName
		},
		func(p *corev1.Pod) any { return p.Status })
	logs := mustKubectl(t, tenant(tenantA), "", "logs", "raw", "-n", ns)
	if !strings.Contains(logs, "done") || strings.Contains(logs, "nvidia") {
		t.Errorf("the raw Pod's /dev: %q, want no card", logs)
	}
}

// TestRealNodeMPSShares (issue O, class 5): with real-0's node agent serving
// each card as four CUDA MPS shares, four Instances of a 25% slice share one
// card and the fifth gets another. Each container finds under /dev exactly
// the card its status.allocations names (isolation MPS), NVIDIA_VISIBLE_DEVICES
// names that card, and CUDA_MPS_PIPE_DIRECTORY is that card's pipe directory;
// the card's MPS control daemon was told to cap every client at 25% of its
// threads and a quarter of its memory before any of them ran. A slice of
// another size is refused. No MPS server runs without a GPU: the daemon is
// test/node/fake-mps-control, which records what it is told.
func TestRealNodeMPSShares(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realmps"
	controllerNamespace(t, ns)
	waitRealCardsFree(t)
	ctx := context.Background()
	if err := cluster.ServeRealNodeShares(ctx, 4); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		kubectl(admin(), "", "delete", "instances.gpu.kiln.dev", "--all", "-n", ns, "--wait=true", "--timeout=2m")
		waitRealCardsFree(t)
		if err := cluster.ServeRealNodeShares(ctx, 0); err != nil {
			t.Errorf("serving whole cards again: %v", err)
		}
	})
	typ := "real-mps"
	mustKubectl(t, admin(), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata:
  name: %[1]s
spec:
  displayName: MPS shares of the real node's fake cards
  accelerator: {vendor: nvidia, model: %[2]s, memory: 16Gi, sliced: {isolation: MPS, sharesPerCard: 4}}
  resourcesPerCard: {cpu: 200m, memory: 256Mi}
  nodeSelector: {%[3]s: "true"}
  tolerations: [{key: %[3]s, operator: Exists, effect: NoSchedule}]
`, typ, localcluster.ProductFake, localcluster.LabelRealNode), "apply", "-f", "-")
	t.Cleanup(func() { _, _ = kubectl(admin(), "", "delete", "instancetype", typ, "--wait=false") })

	_, err := kubectl(tenant(tenantA), listingInstance("half", ns, typ, "  resources: {slice: {memoryPercent: 50}}\n"), "apply", "-f", "-")
	if want := `instancetype "real-mps" cuts each card into 4 MPS shares of 25%: set memoryPercent to 25`; err == nil || !strings.Contains(err.Error(), want) {
		t.Errorf("a 50%% slice: %v; want refused: %q", err, want)
	}

	const command = `trap 'exit 0' TERM; ls /dev; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES; echo "pipe=$CUDA_MPS_PIPE_DIRECTORY serves $(cat $CUDA_MPS_PIPE_DIRECTORY/control)"; while true; do sleep 1; done`
	names := []string{"s1", "s2", "s3", "s4", "s5"}
	for _, name := range names {
		mustKubectl(t, tenant(tenantA), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: %s, namespace: %s}
spec:
  type: %s
  image: %s
  resources: {slice: {memoryPercent: 25}}
  command: ["/bin/sh", "-c", %q]
`, name, ns, typ, images.WorkloadImage, command), "apply", "-f", "-")
	}
	onCard := map[int32][]string{}
	for _, name := range names {
		inst := waitInstance(t, ns, name, 2*time.Minute, "Ready on "+localcluster.RealNodeName+" with one share", readyOnRealNode(1))
		a := inst.Status.Allocations[0]
		card, _, _ := strings.Cut(a.Device, "::")
		if a.Mode != gpuv1.AllocationSlice || a.Isolation != gpuv1.IsolationMPS || a.MemoryPercent != 25 || a.CoresPercent != 25 {
			t.Errorf("%s: allocation %+v, want a 25%% slice isolated by MPS", name, a)
		}
		onCard[a.Index] = append(onCard[a.Index], name)

		dev, uuids := cardsSeen(t, ns, name)
		if want := []string{fmt.Sprintf("nvidia%d", a.Index)}; !slices.Equal(dev, want) {
			t.Errorf("%s: cards under /dev %v, want exactly %v (status.allocations %+v)", name, dev, want, inst.Status.Allocations)
		}
		if !slices.Equal(uuids, []string{card}) {
			t.Errorf("%s: NVIDIA_VISIBLE_DEVICES %v, want its card %s", name, uuids, card)
		}
		logs, _, _ := kubectlGPU(t, tenant(tenantA), "logs", name, "-n", ns)
		if want := "pipe=/run/kiln/mps serves " + card; !strings.Contains(logs, want) {
			t.Errorf("%s: the container's MPS pipe directory is not its card's; want %q in:\n%s", name, want, logs)
		}
		told, err := os.ReadFile(filepath.Join(cluster.RealNodeMPSDir(), card, "log", "control.log"))
		if err != nil {
			t.Fatal(err)
		}
		for _, want := range []string{"set_default_active_thread_percentage 25\n", "set_default_device_pinned_mem_limit 0 4096M\n"} {
			if !strings.Contains(string(told), want) {
				t.Errorf("%s: the MPS daemon of %s was not told %q; it was told:\n%s", name, card, strings.TrimSpace(want), told)
			}
		}
	}
	var sizes []int
	for _, on := range onCard {
		sizes = append(sizes, len(on))
	}
	slices.Sort(sizes)
	if !slices.Equal(sizes, []int{1, 4}) {
		t.Errorf("slices per card %v, want four sharing one card and the fifth on another", onCard)
	}
	out := mustKubectlGPU(t, tenant(tenantA), "top", "-n", ns)
	if !strings.Contains(out, "ISOLATION") || len(regexp.MustCompile(`(?m)^\S+\s.*\sMPS\s`).FindAllString(out, -1)) != len(names) {
		t.Errorf("kubectl gpu top does not show each share isolated by MPS:\n%s", out)
	}
}
