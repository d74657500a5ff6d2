package e2e

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
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
  command: ["/bin/sh", "-c", "echo started on $(hostname); while true; do sleep 1; done"]
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

// TestInstanceSeesItsCards: an Instance of two fake cards on real-0 finds
// under /dev exactly the cards status.allocations names, and
// NVIDIA_VISIBLE_DEVICES names the same UUIDs: the node agent's device
// plugin allocated them, the kubelet asked it, and containerd injected
// them by CDI.
func TestInstanceSeesItsCards(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realcards"
	controllerNamespace(t, ns)
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
	mustKubectl(t, tenant(tenantA), fmt.Sprintf(`apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata:
  name: two
  namespace: %s
spec:
  type: %s
  image: %s
  resources: {accelerators: 2}
  command: ["/bin/sh", "-c", "ls /dev; echo VISIBLE=$NVIDIA_VISIBLE_DEVICES; while true; do sleep 1; done"]
`, ns, typ, images.WorkloadImage), "apply", "-f", "-")
	inst := waitInstance(t, ns, "two", 2*time.Minute, "Ready on "+localcluster.RealNodeName+" with two cards", func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && i.Status.NodeName == localcluster.RealNodeName && len(i.Status.Allocations) == 2
	})
	var wantDev, wantUUIDs []string
	for _, a := range inst.Status.Allocations {
		wantDev = append(wantDev, fmt.Sprintf("nvidia%d", a.Index))
		wantUUIDs = append(wantUUIDs, a.Device)
	}
	var out string
	waitFor(t, "the container's listing in kubectl gpu logs", 30*time.Second,
		func(context.Context) (string, error) {
			o, _, err := kubectlGPU(t, tenant(tenantA), "logs", "two", "-n", ns)
			out = o
			return o, err
		},
		func(o string) bool { return strings.Contains(o, "VISIBLE=") },
		func(o string) any { return o })
	var gotDev []string
	visible := ""
	for _, line := range strings.Split(out, "\n") {
		switch {
		case strings.HasPrefix(line, "nvidia"):
			gotDev = append(gotDev, line)
		case strings.HasPrefix(line, "VISIBLE="):
			visible = strings.TrimPrefix(line, "VISIBLE=")
		}
	}
	slices.Sort(gotDev)
	slices.Sort(wantDev)
	if !slices.Equal(gotDev, wantDev) {
		t.Errorf("cards under /dev %v, want exactly %v (status.allocations %+v)", gotDev, wantDev, inst.Status.Allocations)
	}
	gotUUIDs := strings.Split(visible, ",")
	slices.Sort(gotUUIDs)
	slices.Sort(wantUUIDs)
	if !slices.Equal(gotUUIDs, wantUUIDs) {
		t.Errorf("NVIDIA_VISIBLE_DEVICES %q, want the allocated %v", visible, wantUUIDs)
	}
}
