package e2e

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	instancectl "kiln.dev/kiln/pkg/reconcile/instance"
	"kiln.dev/kiln/test/localcluster"
)

// The controller tests that count cards run one after another (no
// t.Parallel), before the parallel tests start, so the pools' capacity is
// theirs.

func kilnAdmin(t *testing.T) versioned.Interface {
	t.Helper()
	c, err := versioned.NewForConfig(cluster.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// waitFor polls get until done says yes, and fails the test with the last
// status seen (status reads it) if it does not within the timeout.
func waitFor[O any](t *testing.T, what string, timeout time.Duration, get func(context.Context) (O, error), done func(O) bool, status func(O) any) O {
	t.Helper()
	var last O
	seen := false
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		o, err := get(ctx)
		if err != nil {
			return false, nil
		}
		last, seen = o, true
		return done(o), nil
	})
	if err != nil {
		var st any
		if seen {
			st = status(last)
		}
		t.Fatalf("%s not reached in %s; status %+v", what, timeout, st)
	}
	return last
}

// recordedEvents lists, as tenant-a, the Events in ns that selector
// picks, printed by jsonpath, until the output holds every want, for up
// to 30 s; ok says whether it did. Controllers record Events through
// client-go's broadcaster, which writes them after the status the test
// waited for: a read right after that status races them.
func recordedEvents(t *testing.T, ns, selector, jsonpath string, want ...string) (events string, ok bool) {
	t.Helper()
	holds := func(out string) bool {
		for _, w := range want {
			if !strings.Contains(out, w) {
				return false
			}
		}
		return true
	}
	_ = wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		out, err := kubectl(tenant(tenantA), "", "get", "events", "-n", ns, "--field-selector="+selector, "-o=jsonpath="+jsonpath)
		if err == nil {
			events = out
		}
		return err == nil && holds(out), nil
	})
	return events, holds(events)
}

// waitInstance polls the Instance until done says yes.
func waitInstance(t *testing.T, ns, name string, timeout time.Duration, what string, done func(*gpuv1.Instance) bool) *gpuv1.Instance {
	t.Helper()
	instances := kilnAdmin(t).GpuV1alpha1().Instances(ns)
	return waitFor(t, fmt.Sprintf("instance %s/%s: %s", ns, name, what), timeout,
		func(ctx context.Context) (*gpuv1.Instance, error) {
			return instances.Get(ctx, name, metav1.GetOptions{})
		},
		done, func(i *gpuv1.Instance) any { return i.Status })
}

func phaseIs(p gpuv1.InstancePhase) func(*gpuv1.Instance) bool {
	return func(i *gpuv1.Instance) bool {
		return i.Status.Phase == p && i.Status.ObservedGeneration == i.Generation
	}
}

// waitGone polls until get reports NotFound.
func waitGone(t *testing.T, what string, get func(context.Context) error) {
	t.Helper()
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		return apierrors.IsNotFound(get(ctx)), nil
	})
	if err != nil {
		t.Fatalf("%s still exists", what)
	}
}

// controllerNamespace is a namespace for one test, where tenant-a may edit.
func controllerNamespace(t *testing.T, name string) {
	t.Helper()
	createNamespace(t, name)
	bindEdit(t, name)
}

// TestInstanceModes: an Instance of each mode becomes Ready through the
// real scheduler on the simulated nodes, `kubectl wait` returns, and the
// Pod asks for exactly the type's resources on a node of its pool.
func TestInstanceModes(t *testing.T) {
	ns := "e2e-modes"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	manifest := `apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: whole, namespace: e2e-modes}
spec:
  type: h100
  image: nvcr.io/nvidia/pytorch:24.05-py3
  resources: {accelerators: 2}
  ports: [{name: jupyter, port: 8888}]
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: slice, namespace: e2e-modes}
spec:
  type: l4
  image: vllm/vllm-openai:v0.6.0
  resources: {slice: {memoryPercent: 25}}
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: partition, namespace: e2e-modes}
spec:
  type: h100
  image: nvcr.io/nvidia/pytorch:24.05-py3
  resources: {partition: 3g.40gb}
---
apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: cpu, namespace: e2e-modes}
spec:
  type: cpu
  image: busybox:1
  resources: {accelerators: 0}
`
	mustKubectl(t, tenant(tenantA), manifest, "apply", "-f", "-")
	for _, tc := range []struct {
		name, product string
		want          corev1.ResourceList
	}{
		{"whole", localcluster.ProductH100, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2"), "cpu": resource.MustParse("48"), "memory": resource.MustParse("480Gi"), "ephemeral-storage": resource.MustParse("800Gi")}},
		{"slice", localcluster.ProductL4, corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("25"), "nvidia.com/gpucores": resource.MustParse("25"), "cpu": resource.MustParse("2"), "memory": resource.MustParse("12Gi")}},
		{"partition", localcluster.ProductH100, corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1"), "cpu": resource.MustParse("12"), "memory": resource.MustParse("120Gi"), "ephemeral-storage": resource.MustParse("200Gi")}},
		{"cpu", "", corev1.ResourceList{"cpu": resource.MustParse("4"), "memory": resource.MustParse("16Gi")}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := mustKubectl(t, tenant(tenantA), "", "wait", "--for=condition=Ready", "instance/"+tc.name, "-n", ns, "--timeout=90s")
			if !strings.Contains(out, "condition met") {
				t.Errorf("kubectl wait: %q", out)
			}
			inst := waitInstance(t, ns, tc.name, 10*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
			pod, err := cs.CoreV1().Pods(ns).Get(context.Background(), tc.name, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			got := pod.Spec.Containers[0].Resources.Limits
			if len(got) != len(tc.want) {
				t.Errorf("pod limits %v, want %v", got, tc.want)
			}
			for name, q := range tc.want {
				if g := got[name]; g.Cmp(q) != 0 {
					t.Errorf("pod limit %s = %s, want %s", name, g.String(), q.String())
				}
			}
			node, err := cs.CoreV1().Nodes().Get(context.Background(), pod.Spec.NodeName, metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if node.Labels[localcluster.LabelGPUProduct] != tc.product {
				t.Errorf("pod on node %s (%q), want a %q node", node.Name, node.Labels[localcluster.LabelGPUProduct], tc.product)
			}
			if inst.Status.NodeName != node.Name || len(inst.Status.HostIPs) == 0 || len(inst.Status.PodIPs) == 0 || inst.Status.StartTime == nil {
				t.Errorf("status does not describe the Pod on %s: %+v", node.Name, inst.Status)
			}
			if ref := metav1.GetControllerOf(pod); ref == nil || ref.UID != inst.UID {
				t.Errorf("pod controller %v, want Instance %s", ref, inst.UID)
			}
		})
	}
	whole := waitInstance(t, ns, "whole", 10*time.Second, "node port", func(i *gpuv1.Instance) bool {
		return len(i.Status.Ports) == 1 && i.Status.Ports[0].NodePort != 0
	})
	svc, err := cs.CoreV1().Services(ns).Get(context.Background(), "whole", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Ports[0].NodePort != whole.Status.Ports[0].NodePort {
		t.Errorf("service %v does not publish status.ports %v", svc.Spec, whole.Status.Ports)
	}
	if _, err := cs.CoreV1().Services(ns).Get(context.Background(), "cpu", metav1.GetOptions{}); !apierrors.IsNotFound(err) {
		t.Errorf("an Instance without ports has a Service: %v", err)
	}
	describe := mustKubectl(t, tenant(tenantA), "", "describe", "instance", "whole", "-n", ns)
	if !regexp.MustCompile(`(?m)^\s*Normal\s+Ready\s+\S+\s+kiln-controller\s+running on gpu-h100-`).MatchString(describe) {
		t.Errorf("kubectl describe does not show the Ready event:\n%s", describe)
	}
}

// freeCards reads the FREE column of `kubectl get instancetype`.
func freeCards(t *testing.T, typ string) string {
	t.Helper()
	rows := parseTable(t, mustKubectl(t, tenant(tenantA), "", "get", "instancetype", typ))
	if len(rows) != 1 {
		t.Fatalf("kubectl get instancetype %s: %v", typ, rows)
	}
	return rows[0]["FREE"]
}

func waitFree(t *testing.T, typ, want string) {
	t.Helper()
	var got string
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		got = freeCards(t, typ)
		return got == want, nil
	})
	if err != nil {
		t.Fatalf("instancetype %s FREE = %s, want %s", typ, got, want)
	}
}

// TestFreeCapacity: the FREE column falls and rises with running Instances.
func TestFreeCapacity(t *testing.T) {
	ns := "e2e-free"
	controllerNamespace(t, ns)
	waitFree(t, "l4", "4/4")
	mustKubectl(t, tenant(tenantA), strings.Replace(instance("three", ns, "l4", "busybox:1"), "accelerators: 1", "accelerators: 3", 1), "create", "-f", "-")
	waitFree(t, "l4", "1/4")
	mustKubectl(t, tenant(tenantA), "", "delete", "instance", "three", "-n", ns)
	waitFree(t, "l4", "4/4")
}

// TestStopStartKeepsNodePorts: stop deletes the Pod and keeps the Service,
// start builds the Pod again, and every node port stays; an added port
// leaves the others' numbers alone. Stop and start are subresources a
// tenant with edit may POST.
func TestStopStartKeepsNodePorts(t *testing.T) {
	ns := "e2e-stopstart"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	kc := tenant(tenantA)
	mustKubectl(t, kc, `apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: nb, namespace: e2e-stopstart}
spec:
  type: cpu
  image: jupyter/base-notebook:latest
  resources: {accelerators: 0}
  ports: [{name: jupyter, port: 8888}, {name: tensorboard, port: 6006}]
`, "create", "-f", "-")
	ports := func(i *gpuv1.Instance) map[string]int32 {
		m := map[string]int32{}
		for _, p := range i.Status.Ports {
			m[p.Name] = p.NodePort
		}
		return m
	}
	ready := waitInstance(t, ns, "nb", 90*time.Second, "Ready with node ports", func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && ports(i)["jupyter"] != 0 && ports(i)["tensorboard"] != 0
	})
	before := ports(ready)
	podUID := func() string {
		p, err := cs.CoreV1().Pods(ns).Get(context.Background(), "nb", metav1.GetOptions{})
		if err != nil {
			return ""
		}
		return string(p.UID)
	}
	firstPod := podUID()

	base := "/apis/gpu.kiln.dev/v1alpha1/namespaces/" + ns + "/instances/nb/"
	mustKubectl(t, kc, "{}", "create", "--raw", base+"stop", "-f", "-")
	stopped := waitInstance(t, ns, "nb", 60*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped))
	if !stopped.Spec.Stopped {
		t.Errorf("instances/stop did not set spec.stopped")
	}
	waitGone(t, "the stopped Instance's Pod", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "nb", metav1.GetOptions{})
		return err
	})
	svc, err := cs.CoreV1().Services(ns).Get(context.Background(), "nb", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("the Service went with the stop: %v", err)
	}
	for _, p := range svc.Spec.Ports {
		if p.NodePort != before[p.Name] {
			t.Errorf("stopped: service port %s node port %d, was %d", p.Name, p.NodePort, before[p.Name])
		}
	}

	mustKubectl(t, kc, "{}", "create", "--raw", base+"start", "-f", "-")
	mustKubectl(t, kc, "", "wait", "--for=condition=Ready", "instance/nb", "-n", ns, "--timeout=90s")
	again := waitInstance(t, ns, "nb", 30*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	if got := ports(again); fmt.Sprint(got) != fmt.Sprint(before) {
		t.Errorf("node ports after stop/start %v, before %v", got, before)
	}
	if p := podUID(); p == "" || p == firstPod {
		t.Errorf("start did not build a new Pod (uid %q, first %q)", p, firstPod)
	}

	mustKubectl(t, kc, "", "patch", "instance", "nb", "-n", ns, "--type=json",
		"-p", `[{"op":"add","path":"/spec/ports/-","value":{"name":"ssh","port":2222}}]`)
	edited := waitInstance(t, ns, "nb", 60*time.Second, "three node ports", func(i *gpuv1.Instance) bool {
		return len(i.Status.Ports) == 3 && ports(i)["ssh"] != 0 && i.Status.ObservedGeneration == i.Generation
	})
	for name, np := range before {
		if got := ports(edited)[name]; got != np {
			t.Errorf("adding a port moved %s from node port %d to %d", name, np, got)
		}
	}
}

// TestUnschedulableStaysPending: more cards than any node has leaves the
// Instance Pending with the scheduler's reason.
func TestUnschedulableStaysPending(t *testing.T) {
	ns := "e2e-pending"
	controllerNamespace(t, ns)
	// A type that allows more cards per Instance than a node holds.
	mustKubectl(t, admin(), `apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: h100-x16}
spec:
  accelerator: {vendor: nvidia, model: NVIDIA-H100-80GB-HBM3, memory: 80Gi, maxPerInstance: 16}
  resourcesPerCard: {cpu: "1", memory: 1Gi}
  nodeSelector: {nvidia.com/gpu.product: NVIDIA-H100-80GB-HBM3}
  tolerations: [{key: nvidia.com/gpu, operator: Exists, effect: NoSchedule}]
`, "create", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", "h100-x16", "--wait=false") })
	mustKubectl(t, tenant(tenantA), strings.Replace(instance("big", ns, "h100-x16", "busybox:1"), "accelerators: 1", "accelerators: 9", 1), "create", "-f", "-")
	inst := waitInstance(t, ns, "big", 60*time.Second, "Pending with the scheduler's reason", func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstancePending && strings.Contains(i.Status.Message, "Insufficient nvidia.com/gpu")
	})
	if c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionReady); c == nil || c.Status != metav1.ConditionFalse || c.Reason != instancectl.ReasonUnschedulable {
		t.Errorf("Ready condition %+v, want False/%s", c, instancectl.ReasonUnschedulable)
	}
	mustKubectl(t, tenant(tenantA), "", "delete", "instance", "big", "-n", ns)
}

// TestDrainStopsInstances: Drain writes spec.stopped into every Instance
// of the type and their Pods go; Hold leaves running ones alone.
func TestDrainStopsInstances(t *testing.T) {
	ns := "e2e-drain"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	mustKubectl(t, admin(), `apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: cpu-drain}
spec:
  resourcesPerCard: {cpu: "1", memory: 1Gi}
`, "create", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", "cpu-drain", "--wait=false") })
	for _, n := range []string{"d1", "d2"} {
		mustKubectl(t, tenant(tenantA), cpuInstance(n, ns, "cpu-drain"), "create", "-f", "-")
		waitInstance(t, ns, n, 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	}
	mustKubectl(t, admin(), "", "patch", "instancetype", "cpu-drain", "--type=merge", "-p", `{"spec":{"hold":"Hold"}}`)
	// Hold refuses new starts but is not a stop: give the controller a
	// moment to (wrongly) act, then check nothing stopped.
	waitPhase(t, "cpu-drain", gpuv1.InstanceTypeHeld)
	for _, n := range []string{"d1", "d2"} {
		if inst := waitInstance(t, ns, n, 5*time.Second, "Ready", phaseIs(gpuv1.InstanceReady)); inst.Spec.Stopped {
			t.Errorf("Hold stopped %s", n)
		}
	}
	mustKubectl(t, admin(), "", "patch", "instancetype", "cpu-drain", "--type=merge", "-p", `{"spec":{"hold":"Drain"}}`)
	for _, n := range []string{"d1", "d2"} {
		inst := waitInstance(t, ns, n, 60*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped))
		if !inst.Spec.Stopped {
			t.Errorf("%s is Stopped but spec.stopped is false: the drain must persist in spec", n)
		}
		waitGone(t, "pod "+n, func(ctx context.Context) error {
			_, err := cs.CoreV1().Pods(ns).Get(ctx, n, metav1.GetOptions{})
			return err
		})
	}
	if events, ok := recordedEvents(t, ns, "involvedObject.name=d1,reason=Drained", "{.items[*].message}", "instancetype cpu-drain is draining"); !ok {
		t.Errorf("no Drained event on d1: %q", events)
	}
}

func waitPhase(t *testing.T, typ string, p gpuv1.InstanceTypePhase) {
	t.Helper()
	kiln := kilnAdmin(t)
	err := wait.PollUntilContextTimeout(context.Background(), 250*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		it, err := kiln.GpuV1alpha1().InstanceTypes().Get(ctx, typ, metav1.GetOptions{})
		return err == nil && it.Status.Phase == p && it.Status.ObservedGeneration == it.Generation, nil
	})
	if err != nil {
		t.Fatalf("instancetype %s did not reach phase %s", typ, p)
	}
}

// TestDeleteRemovesPodAndService and TestForeignPodUntouched share a
// namespace-per-test pattern; deletion goes through the controller's
// finalizer.
func TestDeleteRemovesPodAndService(t *testing.T) {
	t.Parallel()
	ns := "e2e-delete"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	mustKubectl(t, tenant(tenantA), `apiVersion: gpu.kiln.dev/v1alpha1
kind: Instance
metadata: {name: gone, namespace: e2e-delete}
spec:
  type: cpu
  image: busybox:1
  resources: {accelerators: 0}
  ports: [{name: http, port: 80}]
`, "create", "-f", "-")
	waitInstance(t, ns, "gone", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	if _, err := cs.CoreV1().Services(ns).Get(context.Background(), "gone", metav1.GetOptions{}); err != nil {
		t.Fatal(err)
	}
	mustKubectl(t, tenant(tenantA), "", "delete", "instance", "gone", "-n", ns, "--timeout=60s")
	waitGone(t, "pod gone", func(ctx context.Context) error {
		_, err := cs.CoreV1().Pods(ns).Get(ctx, "gone", metav1.GetOptions{})
		return err
	})
	waitGone(t, "service gone", func(ctx context.Context) error {
		_, err := cs.CoreV1().Services(ns).Get(ctx, "gone", metav1.GetOptions{})
		return err
	})

	// A namespace still holding an Instance deletes completely: the
	// namespace controller removes the Instance through the aggregator,
	// the controller its Pod.
	mustKubectl(t, tenant(tenantA), cpuInstance("left", ns, "cpu"), "create", "-f", "-")
	waitInstance(t, ns, "left", 90*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	mustKubectl(t, admin(), "", "delete", "namespace", ns, "--timeout=120s")
	waitGone(t, "namespace "+ns, func(ctx context.Context) error {
		_, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err
	})
}

// TestForeignPodUntouched: a Pod the Instance does not own is never changed
// or deleted; the clash is in status and a Warning event. Once it is gone
// the Instance runs.
func TestForeignPodUntouched(t *testing.T) {
	ns := "e2e-foreign"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	squatter := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "taken", Namespace: ns, Labels: map[string]string{"owner": "someone-else"}},
		Spec:       corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox:1"}}},
	}
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods(ns).Create(ctx, squatter, metav1.CreateOptions{})
		return err == nil, nil // the namespace's default ServiceAccount comes shortly after it
	})
	if err != nil {
		t.Fatal("creating the foreign Pod:", err)
	}
	pod = waitPodRunning(t, cs, ns, "taken")
	mustKubectl(t, tenant(tenantA), cpuInstance("taken", ns, "cpu"), "create", "-f", "-")
	inst := waitInstance(t, ns, "taken", 60*time.Second, "Failed with NameConflict", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionReady)
		return i.Status.Phase == gpuv1.InstanceFailed && c != nil && c.Reason == instancectl.ReasonNameConflict
	})
	if !strings.Contains(inst.Status.Message, "Pod "+ns+"/taken already exists and is not owned by this Instance") {
		t.Errorf("message %q does not name the Pod in the way", inst.Status.Message)
	}
	if events, ok := recordedEvents(t, ns, "involvedObject.name=taken,involvedObject.kind=Instance,type=Warning", "{.items[*].reason}", instancectl.ReasonNameConflict); !ok {
		t.Errorf("no NameConflict Warning event: %q", events)
	}
	after, err := cs.CoreV1().Pods(ns).Get(ctx, "taken", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if after.UID != pod.UID || after.ResourceVersion != pod.ResourceVersion || len(after.OwnerReferences) != 0 {
		t.Errorf("the foreign Pod was touched: uid %s->%s rv %s->%s owners %v", pod.UID, after.UID, pod.ResourceVersion, after.ResourceVersion, after.OwnerReferences)
	}
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "taken", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitInstance(t, ns, "taken", 90*time.Second, "Ready once the name is free", phaseIs(gpuv1.InstanceReady))
}

func waitPodRunning(t *testing.T, cs kubernetes.Interface, ns, name string) *corev1.Pod {
	t.Helper()
	var pod *corev1.Pod
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		pod, err = cs.CoreV1().Pods(ns).Get(ctx, name, metav1.GetOptions{})
		return err == nil && pod.Status.Phase == corev1.PodRunning, nil
	})
	if err != nil {
		t.Fatalf("pod %s/%s not running: %v", ns, name, err)
	}
	return pod
}

// TestKubeletAdmissionFailureRebuilt: a Pod the kubelet refuses at
// admission (UnexpectedAdmissionError, set through kwok's status override)
// is rebuilt with backoff, then left as the visible error once the window
// (12 s in this cluster) has passed.
func TestKubeletAdmissionFailureRebuilt(t *testing.T) {
	ns := "e2e-admitfail"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	mustKubectl(t, tenant(tenantA), cpuInstance("flaky", ns, "cpu"), "create", "-f", "-")

	// Every Pod the controller builds is refused, as a device plugin with
	// a broken device would.
	refused := map[string]bool{}
	refuse := func(ctx context.Context) error {
		pod, err := cs.CoreV1().Pods(ns).Get(ctx, "flaky", metav1.GetOptions{})
		if err == nil && pod.DeletionTimestamp != nil && pod.Annotations[localcluster.CustomStatusAnnotation] == "custom" {
			// kwok keeps off the Pods this test took over, so finish a
			// graceful deletion as the kubelet would. Without this, a Pod
			// kwok had set Running again just before the controller
			// deleted it stayed Terminating for good, and the Instance
			// waited for it (the flake of about one run in four).
			now := int64(0)
			_ = cs.CoreV1().Pods(ns).Delete(ctx, pod.Name, metav1.DeleteOptions{
				GracePeriodSeconds: &now, Preconditions: &metav1.Preconditions{UID: &pod.UID}})
			return nil
		}
		if err != nil {
			return nil
		}
		refusedNow := pod.Status.Phase == corev1.PodFailed && pod.Status.Reason == "UnexpectedAdmissionError"
		if refusedNow || pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" {
			return nil
		}
		// kwok may still write Running over the refusal it had queued
		// before the annotation told it to keep off; then refuse again.
		// Its write keeps the refusal's reason but not its phase, so the
		// phase is what says refused, as it is for the controller.
		if pod.Annotations[localcluster.CustomStatusAnnotation] != "custom" {
			pod.Annotations[localcluster.CustomStatusAnnotation] = "custom"
			if pod, err = cs.CoreV1().Pods(ns).Update(ctx, pod, metav1.UpdateOptions{}); err != nil {
				return nil
			}
		}
		pod.Status = corev1.PodStatus{
			Phase:   corev1.PodFailed,
			Reason:  "UnexpectedAdmissionError",
			Message: "Pod was rejected: Allocate failed due to no healthy devices present; cannot allocate unhealthy devices nvidia.com/gpu, which is unexpected",
		}
		if _, err := cs.CoreV1().Pods(ns).UpdateStatus(ctx, pod, metav1.UpdateOptions{}); err == nil {
			refused[string(pod.UID)] = true
		}
		return nil
	}
	kiln := kilnAdmin(t)
	var inst *gpuv1.Instance
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		if err := refuse(ctx); err != nil {
			return false, err
		}
		var err error
		inst, err = kiln.GpuV1alpha1().Instances(ns).Get(ctx, "flaky", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionReady)
		return inst.Status.Phase == gpuv1.InstanceFailed && c != nil && c.Reason == instancectl.ReasonAdmissionError, nil
	})
	if err != nil {
		// This has failed about one run in four with an Instance whose
		// status was never written; say what the controller did.
		out, _ := kubectl(admin(), "", "get", "instance", "flaky", "-n", ns, "-o", "yaml")
		t.Logf("the Instance as stored:\n%s", out)
		t.Logf("kiln-controller's log about it:\n%s", logLinesAbout(filepath.Join(cluster.Dir, "logs", "kiln-controller.log"), ns+"/flaky", 60))
		t.Fatalf("the Instance did not give up: %d Pods refused; status %+v", len(refused), inst.Status)
	}
	if len(refused) < 3 {
		t.Errorf("%d Pods were built before giving up, want the first and at least two rebuilds", len(refused))
	}
	if !strings.Contains(inst.Status.Message, "stop and start the Instance") {
		t.Errorf("message %q does not say what to do", inst.Status.Message)
	}
	last, err := cs.CoreV1().Pods(ns).Get(ctx, "flaky", metav1.GetOptions{})
	if err != nil || !refused[string(last.UID)] || last.Status.Reason != "UnexpectedAdmissionError" {
		t.Fatalf("the failed Pod is not left as the visible error: %v %v", last, err)
	}
	if events, ok := recordedEvents(t, ns, "involvedObject.name=flaky,reason=UnexpectedAdmissionError", "{range .items[*]}{.message}{\"\\n\"}{end}",
		"rebuilding it (attempt 2)", "Gave up after"); !ok {
		t.Errorf("events do not tell the story:\n%s", events)
	}
}

// TestControllerKilledMidReconcile: a controller killed (SIGKILL, no Lease
// release) while it is creating Pods and Services, then started again,
// leaves exactly one Pod and one Service per Instance, all owned, and
// nothing behind once the Instances are deleted.
func TestControllerKilledMidReconcile(t *testing.T) {
	ns := "e2e-restart"
	controllerNamespace(t, ns)
	cs, _ := adminClients(t)
	ctx := context.Background()
	mustKubectl(t, admin(), `apiVersion: gpu.kiln.dev/v1alpha1
kind: InstanceType
metadata: {name: cpu-tiny}
spec:
  resourcesPerCard: {cpu: 100m, memory: 64Mi}
`, "create", "-f", "-")
	t.Cleanup(func() { kubectl(admin(), "", "delete", "instancetype", "cpu-tiny", "--wait=false") })
	const n = 30
	var manifest strings.Builder
	for i := range n {
		fmt.Fprintf(&manifest, "---\napiVersion: gpu.kiln.dev/v1alpha1\nkind: Instance\nmetadata: {name: r-%02d, namespace: %s}\nspec:\n  type: cpu-tiny\n  image: busybox:1\n  resources: {accelerators: 0}\n  ports: [{name: http, port: 8080}]\n", i, ns)
	}
	selector := metav1.ListOptions{LabelSelector: gpuv1.LabelInstance}
	mustKubectl(t, tenant(tenantA), manifest.String(), "apply", "-f", "-")
	// Kill it as soon as it has started on them, so it dies with work half
	// done: some Pods and Services made, others not, statuses stale.
	err := wait.PollUntilContextTimeout(ctx, 20*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, selector)
		return err == nil && len(pods.Items) > 0, nil
	})
	if err != nil {
		t.Fatal("the controller made no Pod")
	}
	if err := cluster.KillController(); err != nil {
		t.Fatal(err)
	}
	pods, err := cs.CoreV1().Pods(ns).List(ctx, selector)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("killed the controller with %d of %d Pods made", len(pods.Items), n)
	if err := cluster.StartController(ctx); err != nil {
		t.Fatal(err)
	}
	for i := range n {
		waitInstance(t, ns, fmt.Sprintf("r-%02d", i), 120*time.Second, "Ready", phaseIs(gpuv1.InstanceReady))
	}
	kiln := kilnAdmin(t)
	insts, err := kiln.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	owners := map[string]bool{}
	for _, i := range insts.Items {
		owners[string(i.UID)] = true
	}
	count := func() (int, int) {
		pods, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		svcs, err := cs.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range pods.Items {
			if ref := metav1.GetControllerOf(&p); ref == nil || !owners[string(ref.UID)] || ref.Name != p.Name {
				t.Errorf("pod %s is not owned by its Instance: %v", p.Name, ref)
			}
		}
		for _, s := range svcs.Items {
			if ref := metav1.GetControllerOf(&s); ref == nil || !owners[string(ref.UID)] || ref.Name != s.Name {
				t.Errorf("service %s is not owned by its Instance: %v", s.Name, ref)
			}
		}
		return len(pods.Items), len(svcs.Items)
	}
	if p, s := count(); p != n || s != n {
		t.Errorf("%d Pods and %d Services for %d Instances", p, s, n)
	}
	mustKubectl(t, tenant(tenantA), "", "delete", "instances", "--all", "-n", ns, "--timeout=90s")
	err = wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 60*time.Second, true, func(context.Context) (bool, error) {
		p, s := count()
		return p == 0 && s == 0, nil
	})
	if err != nil {
		p, s := count()
		t.Errorf("%d Pods and %d Services left after deleting every Instance", p, s)
	}
}

// TestControllerEndpoints: the controller holds its Lease, answers
// /healthz, and exports work-queue metrics for both loops.
func TestControllerEndpoints(t *testing.T) {
	t.Parallel()
	cs, _ := adminClients(t)
	lease, err := cs.CoordinationV1().Leases("kiln-system").Get(context.Background(), "kiln-controller", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if lease.Spec.HolderIdentity == nil || *lease.Spec.HolderIdentity == "" {
		t.Errorf("Lease kiln-system/kiln-controller has no holder: %+v", lease.Spec)
	}
	get := func(url string, want int) string {
		resp, err := http.Get(url)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		b, err := io.ReadAll(resp.Body)
		if err != nil {
			t.Fatal(err)
		}
		if resp.StatusCode != want {
			t.Fatalf("GET %s: %d %s, want %d", url, resp.StatusCode, b, want)
		}
		return string(b)
	}
	if h := get(cluster.ControllerURL()+"/healthz", http.StatusOK); h != "ok" {
		t.Errorf("/healthz = %q", h)
	}
	// Metrics, which name every tenant's objects, are not on the port the
	// probes reach, but on a loopback address of their own.
	get(cluster.ControllerURL()+"/metrics", http.StatusNotFound)
	metrics := get(cluster.ControllerMetricsURL()+"/metrics", http.StatusOK)
	for _, w := range []string{`workqueue_adds_total{name="instance"}`, `workqueue_adds_total{name="instancetype"}`, `workqueue_adds_total{name="claim"}`, `workqueue_depth{name="instance"}`, "rest_client_requests_total"} {
		if !strings.Contains(metrics, w) {
			t.Errorf("/metrics lacks %s", w)
		}
	}
}

// logLinesAbout is the last n lines of a component's log that mention s.
func logLinesAbout(file, s string, n int) string {
	data, err := os.ReadFile(file)
	if err != nil {
		return err.Error()
	}
	var lines []string
	for _, l := range strings.Split(string(data), "\n") {
		if strings.Contains(l, s) {
			lines = append(lines, l)
		}
	}
	return strings.Join(lines[max(0, len(lines)-n):], "\n")
}
