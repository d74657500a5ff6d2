package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"

	"kiln.dev/kiln/test/localcluster"
)

// TestSimulatedGPUNodes: the inventory is there, Ready, and the real
// scheduler places Pods on it by extended resources; kwok runs them.
func TestSimulatedGPUNodes(t *testing.T) {
	t.Parallel()
	cs, _ := adminClients(t)
	ctx := context.Background()
	for _, spec := range localcluster.DefaultInventory() {
		n, err := cs.CoreV1().Nodes().Get(ctx, spec.Name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for name, want := range spec.Resources {
			if got := n.Status.Allocatable[name]; got.Cmp(want) != 0 {
				t.Errorf("node %s allocatable %s = %s, want %s", spec.Name, name, got.String(), want.String())
			}
		}
		if n.Labels[localcluster.LabelGPUProduct] != spec.Labels[localcluster.LabelGPUProduct] {
			t.Errorf("node %s label %s = %q", spec.Name, localcluster.LabelGPUProduct, n.Labels[localcluster.LabelGPUProduct])
		}
	}

	ns := "e2e-nodes"
	createNamespace(t, ns)
	pod := func(name string, res corev1.ResourceName, n int64, product string) *corev1.Pod {
		return &corev1.Pod{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
			Spec: corev1.PodSpec{
				NodeSelector: map[string]string{localcluster.LabelGPUProduct: product},
				Tolerations:  []corev1.Toleration{{Key: localcluster.TaintGPU, Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
				Containers: []corev1.Container{{
					Name: "main", Image: "busybox:1",
					Resources: corev1.ResourceRequirements{Limits: corev1.ResourceList{res: *resource.NewQuantity(n, resource.DecimalSI)}},
				}},
			},
		}
	}
	// The service-account admission plugin needs the namespace's default
	// ServiceAccount, which the controller manager creates shortly after.
	create := func(p *corev1.Pod) {
		t.Helper()
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			_, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{})
			return err == nil, nil
		})
		if err != nil {
			t.Fatalf("creating pod %s: %v", p.Name, err)
		}
	}
	runs := []struct {
		pod   *corev1.Pod
		nodes string
	}{
		{pod("two-h100", localcluster.ResourceGPU, 2, localcluster.ProductH100), "gpu-h100-"},
		{pod("mig-3g", localcluster.ResourceMIG3g40gb, 1, localcluster.ProductH100), "gpu-h100-1"},
		{pod("l4", localcluster.ResourceGPU, 1, localcluster.ProductL4), "gpu-l4-0"},
	}
	for _, r := range runs {
		create(r.pod)
	}
	for _, r := range runs {
		var p *corev1.Pod
		err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
			var err error
			p, err = cs.CoreV1().Pods(ns).Get(ctx, r.pod.Name, metav1.GetOptions{})
			return err == nil && p.Status.Phase == corev1.PodRunning, nil
		})
		if err != nil {
			t.Fatalf("pod %s did not reach Running: %+v", r.pod.Name, p.Status)
		}
		if !strings.HasPrefix(p.Spec.NodeName, r.nodes) {
			t.Errorf("pod %s ran on %s, want a node %s*", r.pod.Name, p.Spec.NodeName, r.nodes)
		}
	}

	// More cards than any node has: Pending, with the scheduler's reason.
	create(pod("nine-h100", localcluster.ResourceGPU, 9, localcluster.ProductH100))
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		p, err := cs.CoreV1().Pods(ns).Get(ctx, "nine-h100", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		for _, c := range p.Status.Conditions {
			if c.Type == corev1.PodScheduled && c.Reason == corev1.PodReasonUnschedulable && strings.Contains(c.Message, "Insufficient nvidia.com/gpu") {
				return true, nil
			}
		}
		return false, nil
	})
	if err != nil {
		t.Errorf("a pod asking 9 cards was not reported unschedulable for insufficient nvidia.com/gpu")
	}
}
