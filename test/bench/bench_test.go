// Package bench measures how long Instances take from create to Ready on
// a local control plane with simulated nodes, next to bare Pod+Service
// creates on the same cluster. Run it with `make bench`; it is not part of
// `make test`.
package bench

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	instancectl "kiln.dev/kiln/pkg/reconcile/instance"
	"kiln.dev/kiln/test/localcluster"
)

// Both the controller and the benchmark's own client get this client-side
// rate limit, so neither side of the comparison is held back by its client.
const qps, burst = 500, 1000

// Ten CPU nodes with room for 150 Pods each.
func inventory() []localcluster.NodeSpec {
	var nodes []localcluster.NodeSpec
	for i := range 10 {
		nodes = append(nodes, localcluster.NodeSpec{
			Name: fmt.Sprintf("bench-%d", i),
			Resources: corev1.ResourceList{
				corev1.ResourceCPU:    resource.MustParse("1000"),
				corev1.ResourceMemory: resource.MustParse("4Ti"),
				corev1.ResourcePods:   resource.MustParse("150"),
			},
		})
	}
	return nodes
}

func BenchmarkCreateToReady(b *testing.B) {
	c, kube, kiln := startCluster(b, "bench", localcluster.Options{
		Nodes:           inventory(),
		ControllerFlags: []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst), "--instance-workers=16"},
	})
	defer c.Stop()
	createBenchType(b, kiln)
	for _, n := range []int{200, 1000} {
		for _, kind := range []string{"instances", "pods+services"} {
			b.Run(fmt.Sprintf("%s/n=%d", kind, n), func(b *testing.B) {
				for i := range b.N {
					ns := fmt.Sprintf("bench-%s-%d-%d", map[string]string{"instances": "inst", "pods+services": "pod"}[kind], n, i)
					r := runOnce(b, kube, kiln, kind, ns, n)
					b.ReportMetric(r.total.Seconds(), "s-all-ready")
					b.ReportMetric(r.p50.Seconds(), "s-p50")
					b.ReportMetric(r.p99.Seconds(), "s-p99")
				}
			})
		}
	}
}

// startCluster starts a local control plane in _output/<name> that logs to
// stderr, and returns it with admin clients under the benchmark's client
// rate limit. It runs the binaries of _output/bin, or of BENCH_BIN_DIR to
// compare others (say, from before a change) on the same harness, and
// adds BENCH_KILN_FLAGS to kiln-apiserver's flags and
// BENCH_CONTROLLER_FLAGS to kiln-controller's (the last of a flag wins).
func startCluster(b *testing.B, name string, opts localcluster.Options) (*localcluster.Cluster, kubernetes.Interface, versioned.Interface) {
	b.Helper()
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		b.Fatal(err)
	}
	opts.Dir, opts.BinDir, opts.RepoRoot = filepath.Join(root, "_output", name), filepath.Join(root, "_output", "bin"), root
	if d := os.Getenv("BENCH_BIN_DIR"); d != "" {
		opts.BinDir = d
	}
	opts.KilnFlags = append(opts.KilnFlags, strings.Fields(os.Getenv("BENCH_KILN_FLAGS"))...)
	opts.ControllerFlags = append(opts.ControllerFlags, strings.Fields(os.Getenv("BENCH_CONTROLLER_FLAGS"))...)
	opts.Log = os.Stderr
	c, err := localcluster.Start(context.Background(), opts)
	if err != nil {
		b.Fatal(err)
	}
	cfg := rest.CopyConfig(c.AdminConfig)
	cfg.QPS, cfg.Burst = qps, burst
	return c, kubernetes.NewForConfigOrDie(cfg), versioned.NewForConfigOrDie(cfg)
}

// createBenchType creates "bench", a CPU-only type small enough that a
// node holds 150 of its Pods.
func createBenchType(b *testing.B, kiln versioned.Interface) {
	b.Helper()
	if _, err := kiln.GpuV1alpha1().InstanceTypes().Create(context.Background(), &gpuv1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "bench"},
		Spec: gpuv1.InstanceTypeSpec{ResourcesPerCard: gpuv1.HostResources{
			CPU: ptr.To(resource.MustParse("100m")), Memory: ptr.To(resource.MustParse("64Mi")),
		}},
	}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
}

// createNamespace creates ns and waits for its default ServiceAccount,
// which Pods need.
func createNamespace(b *testing.B, kube kubernetes.Interface, ns string) {
	b.Helper()
	ctx := context.Background()
	if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		b.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().ServiceAccounts(ns).Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		b.Fatal(err)
	}
}

type result struct {
	total, p50, p99 time.Duration
	// created is when the last create was answered, from the start.
	created time.Duration
	// failed is how many creates failed; the figures are of the rest.
	failed int
}

// runOnce creates n objects of kind in a fresh namespace with 16 parallel
// clients and waits until every one is Ready: the Instance's Ready
// condition, or the bare Pod's. Latency is from each create's start.
func runOnce(b *testing.B, kube kubernetes.Interface, kiln versioned.Interface, kind, ns string, n int) result {
	createNamespace(b, kube, ns)
	defer cleanup(b, kube, ns)

	watchFn := func(ctx context.Context) (watch.Interface, error) {
		return kiln.GpuV1alpha1().Instances(ns).Watch(ctx, metav1.ListOptions{})
	}
	done := instanceReady
	if kind != "instances" {
		watchFn = func(ctx context.Context) (watch.Interface, error) {
			return kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
		}
		done = podReady
	}
	return timeToDone(b, n, "b-", func(ctx context.Context, name string) error {
		return create(ctx, kube, kiln, kind, ns, name)
	}, watchFn, done)
}

func podReady(o runtime.Object) (string, bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return "", false
	}
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodReady && c.Status == corev1.ConditionTrue {
			return p.Name, true
		}
	}
	return p.Name, false
}

// create makes one Instance, or the Pod and Service the controller would
// make for it, built with the controller's own rendering.
func create(ctx context.Context, kube kubernetes.Interface, kiln versioned.Interface, kind, ns, name string) error {
	inst := &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gpuv1.InstanceSpec{
			Type: "bench", Image: "busybox:1",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](0)},
			Ports:     []gpuv1.InstancePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}
	if kind == "instances" {
		_, err := kiln.GpuV1alpha1().Instances(ns).Create(ctx, inst, metav1.CreateOptions{})
		return err
	}
	inst.Spec.Resources = gpuv1.InstanceResources{Accelerators: ptr.To[int32](0), CPU: ptr.To(resource.MustParse("100m")), Memory: ptr.To(resource.MustParse("64Mi"))}
	return createPair(ctx, kube, inst, &gpuv1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "bench"}})
}

// createPair creates the Pod and Service kiln-controller would render for
// inst of type t, without the owner reference.
func createPair(ctx context.Context, kube kubernetes.Interface, inst *gpuv1.Instance, t *gpuv1.InstanceType) error {
	pod, err := instancectl.RenderPod(inst, t, nil, instancectl.RenderOptions{})
	if err != nil {
		return err
	}
	pod.OwnerReferences = nil
	svc := instancectl.RenderService(inst, nil)
	svc.OwnerReferences = nil
	if _, err := kube.CoreV1().Pods(inst.Namespace).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		return err
	}
	_, err = kube.CoreV1().Services(inst.Namespace).Create(ctx, svc, metav1.CreateOptions{})
	return err
}

// cleanup deletes the namespace and waits until it is gone, so the next
// run has the nodes and the node-port range to itself.
func cleanup(b *testing.B, kube kubernetes.Interface, ns string) {
	ctx := context.Background()
	if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
		b.Error(err)
		return
	}
	err := wait.PollUntilContextTimeout(ctx, time.Second, 10*time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
		return err != nil, nil
	})
	if err != nil {
		b.Errorf("namespace %s not gone: %v", ns, err)
	}
}
