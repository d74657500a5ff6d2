package nodeagent

import (
	"context"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/deviceplugin"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
)

// Four cards, 0-2 and 1-3 linked by NVLink, and two MIG devices of a fifth:
// pkg/deviceplugin's test inventory.
const inventory = `devices:
- {uuid: GPU-0, resource: nvidia.com/gpu, index: 0, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:1b:00.0", nvLinkPeers: [GPU-2]}
- {uuid: GPU-1, resource: nvidia.com/gpu, index: 1, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:43:00.0", nvLinkPeers: [GPU-3]}
- {uuid: GPU-2, resource: nvidia.com/gpu, index: 2, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:52:00.0", nvLinkPeers: [GPU-0]}
- {uuid: GPU-3, resource: nvidia.com/gpu, index: 3, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, pciBusID: "0000:61:00.0", nvLinkPeers: [GPU-1]}
- {uuid: MIG-3a, resource: nvidia.com/mig-1g.10gb, index: 4, parent: GPU-4, profile: 1g.10gb, memory: 10Gi}
- {uuid: MIG-3b, resource: nvidia.com/mig-1g.10gb, index: 4, parent: GPU-4, profile: 1g.10gb, memory: 10Gi}
`

// simulated runs an Agent in Simulate mode over the test inventory, on
// fake clients.
func simulated(t *testing.T) (*kubefake.Clientset, *kilnfake.Clientset, string) {
	t.Helper()
	_, kube, kiln, inv := simulatedAgent(t, inventory)
	return kube, kiln, inv
}

// simulatedAgent is simulated over the inventory file content, with the
// Agent itself.
func simulatedAgent(t *testing.T, content string) (*Agent, *kubefake.Clientset, *kilnfake.Clientset, string) {
	t.Helper()
	inv := filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
	// The Kiln fake without field management: its schema names differ
	// from the model names the server uses.
	kube, kiln := kubefake.NewClientset(), kilnfake.NewSimpleClientset()
	// The fake's watch starts from now, not from the list's version: a Pod
	// a test creates between the agent's list and its watch would never
	// reach it. The agent is handed over once its watch of Pods is there.
	watching := make(chan struct{})
	var once sync.Once
	kube.PrependWatchReactor("pods", func(action clienttesting.Action) (bool, watch.Interface, error) {
		var opts metav1.ListOptions
		if w, ok := action.(clienttesting.WatchActionImpl); ok {
			opts = w.ListOptions
		}
		w, err := kube.Tracker().Watch(action.GetResource(), action.GetNamespace(), opts)
		once.Do(func() { close(watching) })
		return true, w, err
	})
	a := &Agent{Manager: &deviceplugin.Manager{Backend: &deviceplugin.Static{Path: inv, Interval: 50 * time.Millisecond}}, Kiln: kiln, Kube: kube, Node: "gpu-0", Simulate: true,
		SampleInterval: 50 * time.Millisecond, ActiveThreshold: DefaultActiveThreshold}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Run: %v", err)
		}
	})
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the agent never watched Pods")
	}
	return a, kube, kiln, inv
}

func gpuPod(name string, cards int64, owner string, labels map[string]string) *corev1.Pod {
	p := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "team-a", UID: types.UID("uid-" + name), Labels: labels},
		Spec: corev1.PodSpec{NodeName: "gpu-0", Containers: []corev1.Container{{Name: "main", Resources: corev1.ResourceRequirements{
			Limits: corev1.ResourceList{"nvidia.com/gpu": *resource.NewQuantity(cards, resource.DecimalSI)},
		}}}},
	}
	if owner != "" {
		p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "gpu.kiln.dev/v1alpha1", Kind: owner, Name: name, UID: "owner", Controller: ptrTrue()}}
	}
	return p
}

func ptrTrue() *bool { t := true; return &t }

// held waits until NodeDevices says which devices each Pod holds, and
// returns them.
func held(t *testing.T, kiln *kilnfake.Clientset, want map[types.UID]int) map[types.UID][]string {
	t.Helper()
	var got map[types.UID][]string
	var kinds map[types.UID]v1alpha1.DeviceHolderKind
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nd, err := kiln.GpuV1alpha1().NodeDevices().Get(ctx, "gpu-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got, kinds = map[types.UID][]string{}, map[types.UID]v1alpha1.DeviceHolderKind{}
		for _, d := range nd.Status.Devices {
			if d.Holder != nil {
				got[d.Holder.PodUID] = append(got[d.Holder.PodUID], d.UUID)
				kinds[d.Holder.PodUID] = d.Holder.Kind
			}
		}
		if len(got) != len(want) {
			return false, nil
		}
		for uid, n := range want {
			if len(got[uid]) != n {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		t.Fatalf("holders %v, want %v", got, want)
	}
	return got
}

func TestAgentSimulatesTheKubelet(t *testing.T) {
	kube, kiln, inv := simulated(t)
	pods := kube.CoreV1().Pods("team-a")
	ctx := context.Background()

	// Two Instances' Pods get two devices each, none shared; NVLink pairs
	// where they can.
	if _, err := pods.Create(ctx, gpuPod("a", 2, "Instance", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := pods.Create(ctx, gpuPod("b", 2, "Instance", nil), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	got := held(t, kiln, map[types.UID]int{"uid-a": 2, "uid-b": 2})
	all := append(slices.Clone(got["uid-a"]), got["uid-b"]...)
	slices.Sort(all)
	if !slices.Equal(slices.Compact(slices.Clone(all)), all) {
		t.Fatalf("devices shared: %v", got)
	}
	nd, _ := kiln.GpuV1alpha1().NodeDevices().Get(ctx, "gpu-0", metav1.GetOptions{})
	for _, d := range nd.Status.Devices {
		if d.Holder != nil && d.Holder.Kind != v1alpha1.DeviceHolderInstance {
			t.Errorf("device %s held by a %s, want an Instance", d.UUID, d.Holder.Kind)
		}
	}

	// A Claim's holder gets two cards; when it hands over, its Instance's
	// Pod gets exactly those.
	if err := pods.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	onClaim := map[string]string{v1alpha1.LabelClaim: "reserved"}
	if _, err := pods.Create(ctx, gpuPod("reserved-hold", 2, "Claim", onClaim), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	reserved := held(t, kiln, map[types.UID]int{"uid-b": 2, "uid-reserved-hold": 2})["uid-reserved-hold"]
	for range 3 {
		if err := pods.Delete(ctx, "reserved-hold", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		held(t, kiln, map[types.UID]int{"uid-b": 2})
		if _, err := pods.Create(ctx, gpuPod("on-claim", 2, "Instance", onClaim), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := held(t, kiln, map[types.UID]int{"uid-b": 2, "uid-on-claim": 2})["uid-on-claim"]; !sameSet(got, reserved) {
			t.Fatalf("the Instance on the Claim got %v, the Claim held %v", got, reserved)
		}
		if err := pods.Delete(ctx, "on-claim", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
		held(t, kiln, map[types.UID]int{"uid-b": 2})
		if _, err := pods.Create(ctx, gpuPod("reserved-hold", 2, "Claim", onClaim), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if got := held(t, kiln, map[types.UID]int{"uid-b": 2, "uid-reserved-hold": 2})["uid-reserved-hold"]; !sameSet(got, reserved) {
			t.Fatalf("the Claim's holder came back on %v, it held %v", got, reserved)
		}
	}

	// A failed device is reported and given to nobody new.
	if err := os.WriteFile(inv, []byte(strings.Replace(inventory, `nvLinkPeers: [GPU-0]}`, `nvLinkPeers: [GPU-0], unhealthy: "XID 79"}`, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nd, err := kiln.GpuV1alpha1().NodeDevices().Get(ctx, "gpu-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, d := range nd.Status.Devices {
			if d.UUID == "GPU-2" {
				return d.Health == v1alpha1.DeviceUnhealthy && d.Reason == "XID 79", nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatal("GPU-2's failure never reached NodeDevices")
	}
}

func sameSet(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}

// TestAgentPublishesUsage: what the inventory says each device is doing
// reaches NodeDevices: utilization and memory in use for every device,
// and a last active time for the busy one only.
func TestAgentPublishesUsage(t *testing.T) {
	// Busy from the first sample: written after the agent started, the
	// usage would be smoothed from 0 and, moving by less than the bound,
	// reach NodeDevices only after a minute.
	_, _, kiln, _ := simulatedAgent(t, inventory+"usage:\n  GPU-1: {utilization: 80, memoryUsed: 20Gi}\n")
	var got []v1alpha1.NodeDevice
	err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		nd, err := kiln.GpuV1alpha1().NodeDevices().Get(ctx, "gpu-0", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		got = nd.Status.Devices
		for _, d := range got {
			if d.UUID == "GPU-1" {
				return d.Utilization != nil && *d.Utilization == 80, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Fatalf("GPU-1's utilization never reached NodeDevices: %+v", got)
	}
	for _, d := range got {
		switch {
		case d.Utilization == nil || d.MemoryUsed == nil:
			t.Errorf("%s: utilization %v, memory used %v; want both", d.UUID, d.Utilization, d.MemoryUsed)
		case d.UUID == "GPU-1":
			if d.LastActiveTime == nil || d.MemoryUsed.Cmp(resource.MustParse("20Gi")) != 0 {
				t.Errorf("GPU-1: last active %v, memory used %v; want a time and 20Gi", d.LastActiveTime, d.MemoryUsed)
			}
		case d.LastActiveTime != nil || *d.Utilization != 0:
			t.Errorf("%s: utilization %d, last active %v; want an idle device never active", d.UUID, *d.Utilization, d.LastActiveTime)
		}
	}
}
