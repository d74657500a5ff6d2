package nodeagent

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"testing"
	"time"

	"google.golang.org/grpc"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	kubefake "k8s.io/client-go/kubernetes/fake"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
	podresourcesapi "k8s.io/kubelet/pkg/apis/podresources/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/deviceplugin"
	kilnfake "kiln.dev/kiln/pkg/generated/clientset/versioned/fake"
)

// stubPodResources is the kubelet's pod-resources service: it lists what
// the test says each Pod holds.
type stubPodResources struct {
	podresourcesapi.UnimplementedPodResourcesListerServer
	mu   sync.Mutex
	pods []*podresourcesapi.PodResources
}

func (s *stubPodResources) set(pods ...*podresourcesapi.PodResources) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.pods = pods
}

func (s *stubPodResources) List(context.Context, *podresourcesapi.ListPodResourcesRequest) (*podresourcesapi.ListPodResourcesResponse, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return &podresourcesapi.ListPodResourcesResponse{PodResources: s.pods}, nil
}

func holding(name string, devices ...string) *podresourcesapi.PodResources {
	return &podresourcesapi.PodResources{Name: name, Namespace: "team-a", Containers: []*podresourcesapi.ContainerResources{{
		Name: "main", Devices: []*podresourcesapi.ContainerDevices{{ResourceName: "nvidia.com/gpu", DeviceIds: devices}},
	}}}
}

// On a real node the agent learns from the kubelet's PodResources which
// Pod holds which device, reports it, and prefers a Claim's devices for
// the Pod of that Claim the kubelet admits next.
func TestAgentReadsPodResources(t *testing.T) {
	dir := t.TempDir()
	sock := filepath.Join(dir, "kubelet.sock")
	l, err := net.Listen("unix", sock)
	if err != nil {
		t.Fatal(err)
	}
	stub := &stubPodResources{}
	srv := grpc.NewServer()
	podresourcesapi.RegisterPodResourcesListerServer(srv, stub)
	go func() { _ = srv.Serve(l) }()
	t.Cleanup(srv.Stop)

	inv := filepath.Join(dir, "inventory.yaml")
	if err := os.WriteFile(inv, []byte(inventory), 0o644); err != nil {
		t.Fatal(err)
	}
	onClaim := map[string]string{v1alpha1.LabelClaim: "reserved"}
	kube, kiln := kubefake.NewClientset(gpuPod("a", 2, "Instance", nil), gpuPod("reserved-hold", 2, "Claim", onClaim)), kilnfake.NewSimpleClientset()
	a := &Agent{Manager: &deviceplugin.Manager{Backend: &deviceplugin.Static{Path: inv, Interval: time.Hour}}, Kiln: kiln, Kube: kube, Node: "gpu-0", PodResources: sock}
	stub.set(holding("a", "GPU-0", "GPU-2"), holding("reserved-hold", "GPU-1", "GPU-3"))
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- a.Run(ctx) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	got := held(t, kiln, map[types.UID]int{"uid-a": 2, "uid-reserved-hold": 2})
	if !sameSet(got["uid-reserved-hold"], []string{"GPU-1", "GPU-3"}) {
		t.Fatalf("holders %v", got)
	}

	// The holder goes; the Claim's Instance Pod is bound and asks: the
	// kubelet offers every free card, and the plugin prefers the Claim's.
	if err := kube.CoreV1().Pods("team-a").Delete(ctx, "reserved-hold", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	stub.set(holding("a", "GPU-0", "GPU-2"))
	held(t, kiln, map[types.UID]int{"uid-a": 2})
	if _, err := kube.CoreV1().Pods("team-a").Create(ctx, gpuPod("on-claim", 2, "Instance", onClaim), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var ids []string
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := a.Manager.Plugin("nvidia.com/gpu").GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"GPU-1", "GPU-3", "MIG-3a"}, AllocationSize: 2,
		}}})
		if err != nil {
			return false, err
		}
		ids = resp.ContainerResponses[0].DeviceIDs
		return sameSet(ids, []string{"GPU-1", "GPU-3"}), nil
	})
	if err != nil {
		t.Fatalf("preferred %v for the Claim's Pod, want the Claim's GPU-1 and GPU-3", ids)
	}
	// With no Pod on a Claim waiting, the default choice stands.
	if err := kube.CoreV1().Pods("team-a").Delete(ctx, "on-claim", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 10*time.Second, true, func(ctx context.Context) (bool, error) {
		resp, err := a.Manager.Plugin("nvidia.com/gpu").GetPreferredAllocation(ctx, &pluginapi.PreferredAllocationRequest{ContainerRequests: []*pluginapi.ContainerPreferredAllocationRequest{{
			AvailableDeviceIDs: []string{"GPU-3", "GPU-1"}, AllocationSize: 1,
		}}})
		if err != nil {
			return false, err
		}
		ids = resp.ContainerResponses[0].DeviceIDs
		return slices.Equal(ids, []string{"GPU-1"}), nil
	})
	if err != nil {
		t.Fatalf("preferred %v with no Claim's Pod waiting, want the lowest index, GPU-1", ids)
	}
}
