package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

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

// TestKwokDeleteRefusedOnce: kwok, the kubelet of the simulated nodes,
// sends a deleted Pod's final DELETE once and drops it on any refusal
// but a few it counts as transient (a 500 from an etcd that died under
// the request is not one of them); nothing changes the Pod after that, so
// on its own it would stay Terminating for good, holding its resources,
// where a kubelet tries again. Here a ValidatingAdmissionPolicy refuses
// kwok's delete of this namespace's Pods until the test lifts it; the
// launcher gives the overdue Pod back to kwok, which then deletes it.
func TestKwokDeleteRefusedOnce(t *testing.T) {
	t.Parallel()
	ns := "e2e-kwok-retry"
	createNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	policy := `apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicy
metadata: {name: e2e-refuse-kwok-delete}
spec:
  failurePolicy: Fail
  matchConstraints:
    resourceRules:
    - {apiGroups: [""], apiVersions: [v1], operations: [DELETE], resources: [pods]}
  validations:
  - {expression: "request.userInfo.username != 'kwok-controller'", message: "e2e: kwok may not delete Pods here for now"}
---
apiVersion: admissionregistration.k8s.io/v1
kind: ValidatingAdmissionPolicyBinding
metadata: {name: e2e-refuse-kwok-delete}
spec:
  policyName: e2e-refuse-kwok-delete
  validationActions: [Deny]
  matchResources:
    namespaceSelector: {matchLabels: {kubernetes.io/metadata.name: e2e-kwok-retry}}
`
	mustKubectl(t, admin(), policy, "apply", "-f", "-")
	lift := func() {
		kubectl(admin(), "", "delete", "validatingadmissionpolicybinding,validatingadmissionpolicy", "e2e-refuse-kwok-delete", "--ignore-not-found")
	}
	t.Cleanup(lift)

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "stuck", Namespace: ns},
		Spec: corev1.PodSpec{
			NodeName:                      "cpu-0",
			TerminationGracePeriodSeconds: ptr.To[int64](1),
			Containers:                    []corev1.Container{{Name: "main", Image: "busybox:1"}},
		},
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err == nil, nil
	})
	if err != nil {
		t.Fatal("cannot create the Pod")
	}
	// The policy is in force once kwok's delete is refused: asked as kwok,
	// with dry run, so nothing is deleted meanwhile.
	asKwok := rest.CopyConfig(cluster.AdminConfig)
	asKwok.Impersonate = rest.ImpersonationConfig{UserName: "kwok-controller", Groups: []string{"system:masters"}}
	kwokClient := kubernetes.NewForConfigOrDie(asKwok)
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		last = kwokClient.CoreV1().Pods(ns).Delete(ctx, "stuck", metav1.DeleteOptions{DryRun: []string{metav1.DryRunAll}})
		return last != nil && strings.Contains(last.Error(), "kwok may not delete Pods here"), nil
	})
	if err != nil {
		t.Fatalf("the policy never refused kwok's delete; the last answer: %v", last)
	}

	if err := cs.CoreV1().Pods(ns).Delete(ctx, "stuck", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	// Past its grace period kwok has tried, been refused, and given up.
	time.Sleep(3 * time.Second)
	p, err := cs.CoreV1().Pods(ns).Get(ctx, "stuck", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Pod went while kwok's delete was refused: %v", err)
	}
	if g := p.DeletionGracePeriodSeconds; g == nil || *g == 0 {
		t.Fatalf("the Pod's grace period is %v; kwok's delete landed although refused", g)
	}
	lift()
	err = wait.PollUntilContextTimeout(ctx, 500*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "stuck", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatal("the Pod kwok was refused to delete is still Terminating: nothing gave it back to kwok")
	}
}
