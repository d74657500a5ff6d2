package bench

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"maps"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	goruntime "runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	instancectl "kiln.dev/kiln/pkg/reconcile/instance"
	"kiln.dev/kiln/test/benchapi"
	"kiln.dev/kiln/test/localcluster"
)

// scaleSize is BenchmarkScale's cluster, kiln-controller's Claim workers
// and kube-scheduler's client QPS (0: its own default, 50 and a burst of
// 100). BENCH_SCALE overrides any of it, for a quick look, e.g.
// BENCH_SCALE="nodes=50,instances=200,namespaces=10,claims=50,new=50", or
// to see what more workers do: BENCH_SCALE="claimworkers=48".
type scaleSize struct {
	nodes, instances, namespaces, claims, new, claimWorkers, schedulerQPS int
}

func scaleSizeFromEnv(b *testing.B) scaleSize {
	s := scaleSize{nodes: 1000, instances: 5000, namespaces: 100, claims: 1000, new: 1000, claimWorkers: 16}
	fields := map[string]*int{"nodes": &s.nodes, "instances": &s.instances, "namespaces": &s.namespaces, "claims": &s.claims, "new": &s.new,
		"claimworkers": &s.claimWorkers, "schedulerqps": &s.schedulerQPS}
	for kv := range strings.SplitSeq(os.Getenv("BENCH_SCALE"), ",") {
		if kv == "" {
			continue
		}
		k, v, _ := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if p, ok := fields[k]; !ok || err != nil || n <= 0 {
			b.Fatalf("BENCH_SCALE: %q is not one of nodes, instances, namespaces, claims, new, claimworkers, schedulerqps = a positive number", kv)
		} else {
			*p = n
		}
	}
	// Every object holds one card; the pairs and the new Instances take
	// turns at the same cards.
	if need := s.instances + s.claims + s.new + scaleAdmissionCreates; need > 8*s.nodes {
		b.Fatalf("BENCH_SCALE: %d cards needed, %d nodes of 8 have %d", need, s.nodes, 8*s.nodes)
	}
	return s
}

// scaleAdmissionCreates are the creates timed one at a time in the
// namespace holding the new Instances, for the Budget charge's latency.
const scaleAdmissionCreates = 100

// BenchmarkScale (issue R, `make bench-scale`) runs a pool of 1,000 kwok
// nodes of 8 cards; fills it with 5,000 running one-card Instances across
// 100 namespaces, each with a Budget; creates and deletes 1,000 bare
// one-card Pods at once, for what binding that many takes; places 1,000
// one-card Claims at once; then creates 1,000 bare Pod+Service pairs,
// deletes them, and creates 1,000 Instances in one namespace with a
// Budget, each step from 16 clients. It prints a table of what it
// measured (also written to _output/bench-scale/table.md). It is not part
// of `make test`.
func BenchmarkScale(b *testing.B) {
	size := scaleSizeFromEnv(b)
	ctx := context.Background()
	var schedulerFlags []string
	if size.schedulerQPS > 0 {
		schedulerFlags = []string{fmt.Sprintf("--kube-api-qps=%d", size.schedulerQPS), fmt.Sprintf("--kube-api-burst=%d", 2*size.schedulerQPS)}
	}
	c, kube, kiln := startCluster(b, "bench-scale", localcluster.Options{
		Nodes:        scaleNodes(size.nodes),
		NoNodeAgents: true,
		ControllerFlags: []string{fmt.Sprintf("--kube-api-qps=%d", qps), fmt.Sprintf("--kube-api-burst=%d", burst),
			"--instance-workers=16", fmt.Sprintf("--claim-workers=%d", size.claimWorkers), "--profiling"},
		SchedulerFlags: schedulerFlags,
	})
	defer c.Stop()
	s := &scaleRun{b: b, c: c, kube: kube, kiln: kiln, size: size, direct: directClient(b, c)}
	// What was measured is printed even when a step fails.
	defer s.print()
	typ := s.createType(ctx)
	s.floor = s.idleCPU(5 * time.Second)

	s.rss("before the Instances")
	nsName := func(i int) string { return fmt.Sprintf("scale-%03d", i%size.namespaces) }
	for i := range size.namespaces {
		s.namespaceWithBudget(ctx, nsName(i), int64(size.instances/size.namespaces+size.claims/size.namespaces+2))
	}
	cpu := s.cpu()
	writes := s.writes(ctx)
	r := timeToDone(b, size.instances, "f-", func(ctx context.Context, name string) error {
		return createGPUInstance(ctx, kiln, nsName(nameIndex(name)), name, "")
	}, func(ctx context.Context) (watch.Interface, error) {
		return kiln.GpuV1alpha1().Instances("").Watch(ctx, metav1.ListOptions{})
	}, instanceReady)
	s.latencyRows(fmt.Sprintf("fill: %d Instances in %d namespaces, create → Ready", size.instances, size.namespaces), r)
	s.cpuRows(cpu, size.instances, "Instance")
	s.writeRows(ctx, writes, size.instances, "Instance of the fill")
	rssFull := s.rss(fmt.Sprintf("with %d Instances", size.instances))

	s.barePods(ctx, typ)
	idle := s.settle(fmt.Sprintf("%d Claims", size.claims))
	cpu = s.cpu()
	writes = s.writes(ctx)
	claimSyncs := s.controllerQueue("claim")
	waitProfiles := s.profile("claims")
	r = timeToDone(b, size.claims, "c-", func(ctx context.Context, name string) error {
		_, err := kiln.GpuV1alpha1().Claims(nsName(nameIndex(name))).Create(ctx, &gpuv1.Claim{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       gpuv1.ClaimSpec{Type: typ.Name, Accelerators: ptr.To[int32](1)},
		}, metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) (watch.Interface, error) {
		return kiln.GpuV1alpha1().Claims("").Watch(ctx, metav1.ListOptions{})
	}, claimBound)
	// Read before the profiles end, as the new Instances' are.
	s.lessIdleRows(cpu, idle, r.total, size.claims, "Claim")
	s.writeRows(ctx, writes, size.claims, "Claim")
	s.queueRows("claim", claimSyncs, fmt.Sprintf("the %d Claims", size.claims))
	waitProfiles()
	s.latencyRows(fmt.Sprintf("%d Claims placed at once, create → Bound", size.claims), r)
	s.holderPhases(ctx, size.claims)

	pairs := "scale-pairs"
	createNamespace(b, kube, pairs)
	idle = s.settle(fmt.Sprintf("%d bare pairs", size.new))
	cpu = s.cpu()
	writes = s.writes(ctx)
	rPairs := timeToDone(b, size.new, "p-", func(ctx context.Context, name string) error {
		return createGPUPair(ctx, kube, typ, pairs, name)
	}, func(ctx context.Context) (watch.Interface, error) {
		return kube.CoreV1().Pods(pairs).Watch(ctx, metav1.ListOptions{})
	}, podReady)
	s.lessIdleRows(cpu, idle, rPairs.total, size.new, "bare pair")
	s.latencyRows(fmt.Sprintf("%d bare Pod+Service pairs, create → Pod Ready", size.new), rPairs)
	s.writeRows(ctx, writes, size.new, "bare pair")
	s.scheduled(ctx, pairs, fmt.Sprintf("%d bare Pods, create → bound by kube-scheduler", size.new))
	cleanup(b, kube, pairs)

	big := "scale-big"
	s.namespaceWithBudget(ctx, big, int64(size.new+scaleAdmissionCreates))
	capacity := s.watchCapacity(ctx, typ.Name, big)
	idle = s.settle(fmt.Sprintf("%d new Instances", size.new))
	cpu = s.cpu()
	syncs, instanceSyncs := s.controllerQueue("instancetype"), s.controllerQueue("instance")
	writes = s.writes(ctx)
	waitProfiles = s.profile("new")
	rNew := timeToDone(b, size.new, "n-", func(ctx context.Context, name string) error {
		_, err := kiln.GpuV1alpha1().Instances(big).Create(ctx, gpuInstance(typ, big, name), metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) (watch.Interface, error) {
		return kiln.GpuV1alpha1().Instances(big).Watch(ctx, metav1.ListOptions{})
	}, instanceReady)
	// Read as the last one is Ready: the profiles run on for 20 s, and
	// what the components do idle in that time is not the Instances'.
	s.cpuRows(cpu, size.new, "new Instance")
	s.lessIdleRows(cpu, idle, rNew.total, size.new, "new Instance")
	s.writeRows(ctx, writes, size.new, "new Instance")
	s.queueRows("instance", instanceSyncs, fmt.Sprintf("the %d new Instances", size.new))
	waitProfiles()
	s.latencyRows(fmt.Sprintf("%d new Instances in one namespace, create → Ready", size.new), rNew)
	s.ratio("new Instances ÷ bare pairs, all Ready", rNew.total, rPairs.total, "≤ 1.3")
	s.capacityRows(capacity.stop(), syncs)

	s.admission(ctx, big)
	s.recount(ctx, big)
	s.kubectl("kubectl get inst -A", c.Kubectl, "get", "instances.gpu.kiln.dev", "-A", "--kubeconfig="+c.AdminKubeconfig)
	s.kubectl("kubectl gpu capacity", filepath.Join(filepath.Dir(c.Kubectl), "kubectl-gpu"), "capacity", "--kubeconfig="+c.AdminKubeconfig)
	s.rss("at the end")
	for _, name := range []string{"kiln-apiserver", "kiln-controller"} {
		per := float64(rssFull[name]-s.rss0[name]) / float64(size.instances) * 1000
		s.rows = append(s.rows, [2]string{fmt.Sprintf("%s resident memory per 1,000 Instances (0 → %d)", name, size.instances), mib(int64(per))})
	}
	s.restart(ctx, size.instances+size.new+scaleAdmissionCreates, size.claims)
}

// barePods creates as many bare one-card Pods as there are Claims, at once
// from the same 16 clients, and times each from its create until
// kube-scheduler binds it: what the cluster takes to bind that many Pods,
// which each Claim's holder is, before Kiln does anything. The Pods are
// deleted before the Claims come.
func (s *scaleRun) barePods(ctx context.Context, t *gpuv1.InstanceType) {
	const ns = "scale-bare-pods"
	createNamespace(s.b, s.kube, ns)
	idle := s.settle(fmt.Sprintf("%d bare Pods", s.size.claims))
	cpu := s.cpu()
	r := timeToDone(s.b, s.size.claims, "b-", func(ctx context.Context, name string) error {
		pod, err := instancectl.RenderPod(gpuInstance(t, ns, name), t, nil, instancectl.RenderOptions{})
		if err != nil {
			return err
		}
		pod.OwnerReferences = nil
		_, err = s.kube.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
		return err
	}, func(ctx context.Context) (watch.Interface, error) {
		return s.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	}, podBound)
	s.lessIdleRows(cpu, idle, r.total, s.size.claims, "bare Pod")
	s.latencyRows(fmt.Sprintf("%d bare one-card Pods created at once, create → bound by kube-scheduler", s.size.claims), r)
	// At once, not by the namespace controller at kube-controller-manager's
	// 20 requests a second.
	if err := s.kube.CoreV1().Pods(ns).DeleteCollection(ctx, metav1.DeleteOptions{GracePeriodSeconds: ptr.To[int64](0)}, metav1.ListOptions{}); err != nil {
		s.b.Fatal(err)
	}
	cleanup(s.b, s.kube, ns)
}

func podBound(o runtime.Object) (string, bool) {
	p, ok := o.(*corev1.Pod)
	if !ok {
		return "", false
	}
	return p.Name, p.Spec.NodeName != ""
}

// holderPhases splits a Claim's wait for Bound at its holder Pod: Claim
// created → holder created (Kiln's placement) and holder created → bound
// to its node by kube-scheduler. Timestamps are the API's, in whole
// seconds.
func (s *scaleRun) holderPhases(ctx context.Context, claims int) {
	cl, err := s.kiln.GpuV1alpha1().Claims("").List(ctx, metav1.ListOptions{})
	if err != nil {
		s.b.Fatal(err)
	}
	created := map[string]time.Time{}
	for _, c := range cl.Items {
		created[c.Namespace+"/"+c.Name] = c.CreationTimestamp.Time
	}
	pods, err := s.kube.CoreV1().Pods("").List(ctx, metav1.ListOptions{LabelSelector: gpuv1.LabelClaim})
	if err != nil {
		s.b.Fatal(err)
	}
	var placed, bound []time.Duration
	for _, p := range pods.Items {
		c, ok := created[p.Namespace+"/"+p.Labels[gpuv1.LabelClaim]]
		if !ok {
			continue
		}
		placed = append(placed, p.CreationTimestamp.Sub(c))
		if at, ok := scheduledAt(&p); ok {
			bound = append(bound, at.Sub(p.CreationTimestamp.Time))
		}
	}
	s.spreadRows(fmt.Sprintf("%d Claims, create → holder Pod created (placement)", claims), placed)
	s.spreadRows(fmt.Sprintf("%d Claims, holder created → bound by kube-scheduler", claims), bound)
}

// scheduled is the same split for the Pods of a namespace.
func (s *scaleRun) scheduled(ctx context.Context, ns, what string) {
	pods, err := s.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		s.b.Fatal(err)
	}
	var bound []time.Duration
	for _, p := range pods.Items {
		if at, ok := scheduledAt(&p); ok {
			bound = append(bound, at.Sub(p.CreationTimestamp.Time))
		}
	}
	s.spreadRows(what, bound)
}

func scheduledAt(p *corev1.Pod) (time.Time, bool) {
	for _, c := range p.Status.Conditions {
		if c.Type == corev1.PodScheduled && c.Status == corev1.ConditionTrue {
			return c.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// spreadRows are the p50 and p99 of d, to the API's whole seconds.
func (s *scaleRun) spreadRows(what string, d []time.Duration) {
	if len(d) == 0 {
		s.rows = append(s.rows, [2]string{what, "none seen"})
		return
	}
	slices.Sort(d)
	s.rows = append(s.rows, [2]string{fmt.Sprintf("%s, p50 / p99 (whole seconds, %d seen)", what, len(d)),
		fmt.Sprintf("%.0f s / %.0f s", d[len(d)/2].Seconds(), d[len(d)*99/100].Seconds())})
}

func scaleNodes(n int) []localcluster.NodeSpec {
	nodes := make([]localcluster.NodeSpec, 0, n)
	for i := range n {
		nodes = append(nodes, localcluster.NodeSpec{
			Name:   fmt.Sprintf("pool-%04d", i),
			GPU:    true,
			Labels: map[string]string{localcluster.LabelGPUProduct: localcluster.ProductH100},
			Resources: corev1.ResourceList{
				corev1.ResourceCPU:       resource.MustParse("1000"),
				corev1.ResourceMemory:    resource.MustParse("4Ti"),
				corev1.ResourcePods:      resource.MustParse("110"),
				localcluster.ResourceGPU: resource.MustParse("8"),
			},
		})
	}
	return nodes
}

// nameIndex is the number at the end of a name timeToDone made.
func nameIndex(name string) int {
	i, _ := strconv.Atoi(name[strings.LastIndexByte(name, '-')+1:])
	return i
}

// createGPUPair creates the Pod and Service kiln-controller would render
// for a one-card Instance of t, without the owner reference.
// gpuInstance is a new Instance of the step that compares them with bare
// pairs: one card and one port, so kiln-controller makes a Pod and a
// Service for it as a pair is.
func gpuInstance(t *gpuv1.InstanceType, ns, name string) *gpuv1.Instance {
	return &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns},
		Spec: gpuv1.InstanceSpec{
			Type: t.Name, Image: "busybox:1",
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)},
			Ports:     []gpuv1.InstancePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
		},
	}
}

func createGPUPair(ctx context.Context, kube kubernetes.Interface, t *gpuv1.InstanceType, ns, name string) error {
	return createPair(ctx, kube, gpuInstance(t, ns, name), t)
}

// scaleRun is one BenchmarkScale run and the rows of its table.
type scaleRun struct {
	b    *testing.B
	c    *localcluster.Cluster
	kube kubernetes.Interface
	kiln versioned.Interface
	size scaleSize
	rss0 map[string]int64
	// floor is each component's CPU per second with the nodes up and
	// nothing else asked (idleCPU).
	floor map[string]time.Duration
	rows  [][2]string
	// direct reaches kiln-apiserver as the admin, past kube-apiserver,
	// for its profiles and metrics.
	direct *http.Client
}

func (s *scaleRun) row(format string, d time.Duration, args ...any) {
	s.rows = append(s.rows, [2]string{fmt.Sprintf(format, args...), seconds(d)})
}

func (s *scaleRun) latencyRows(what string, r result) {
	if r.failed > 0 {
		s.rows = append(s.rows, [2]string{what + ", creates that failed", strconv.Itoa(r.failed)})
	}
	s.row("%s, all", r.total, what)
	s.row("%s, the last create answered", r.created, what)
	s.row("%s, p50", r.p50, what)
	s.row("%s, p99", r.p99, what)
}

func (s *scaleRun) ratio(what string, a, b time.Duration, target string) {
	s.rows = append(s.rows, [2]string{fmt.Sprintf("%s (target %s)", what, target), fmt.Sprintf("%.2f×", a.Seconds()/b.Seconds())})
}

func seconds(d time.Duration) string {
	if d < time.Second {
		return fmt.Sprintf("%.0f ms", float64(d)/float64(time.Millisecond))
	}
	return fmt.Sprintf("%.2f s", d.Seconds())
}

func mib(n int64) string { return fmt.Sprintf("%.0f MiB", float64(n)/(1<<20)) }

func (s *scaleRun) createType(ctx context.Context) *gpuv1.InstanceType {
	t, err := s.kiln.GpuV1alpha1().InstanceTypes().Create(ctx, benchGPUType(), metav1.CreateOptions{})
	if err != nil {
		s.b.Fatal(err)
	}
	// The pool counted before anything runs, so the fill starts from it.
	want := int32(8 * s.size.nodes)
	if err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		got, err := s.kiln.GpuV1alpha1().InstanceTypes().Get(ctx, t.Name, metav1.GetOptions{})
		return err == nil && got.Status.Capacity.FreeCards == want, nil
	}); err != nil {
		s.b.Fatalf("instancetype %s never showed %d free cards: %v", t.Name, want, err)
	}
	return t
}

// namespaceWithBudget creates ns with a Budget of cards cards and as many
// Instances, the keys every create there is charged against.
func (s *scaleRun) namespaceWithBudget(ctx context.Context, ns string, cards int64) {
	createNamespace(s.b, s.kube, ns)
	if _, err := s.kiln.GpuV1alpha1().Budgets(ns).Create(ctx, &gpuv1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team"},
		Spec: gpuv1.BudgetSpec{Hard: gpuv1.BudgetResourceList{
			gpuv1.BudgetAccelerators: *resource.NewQuantity(cards, resource.DecimalSI),
			gpuv1.BudgetInstances:    *resource.NewQuantity(cards, resource.DecimalSI),
		}},
	}, metav1.CreateOptions{}); err != nil {
		s.b.Fatal(err)
	}
}

var scaleComponents = []string{"kube-apiserver", "kiln-apiserver", "kiln-controller", "etcd"}

// settleComponents are every process of the cluster, which settle waits on.
var settleComponents = append([]string{"kube-controller-manager", "kube-scheduler", "kwok"}, scaleComponents...)

// rss adds a row per component's resident memory and returns them.
func (s *scaleRun) rss(when string) map[string]int64 {
	out := map[string]int64{}
	for _, name := range scaleComponents {
		pid, err := s.c.PID(name)
		if err != nil {
			s.b.Fatal(err)
		}
		if out[name], err = benchapi.RSS(pid); err != nil {
			s.b.Fatal(err)
		}
		s.rows = append(s.rows, [2]string{fmt.Sprintf("%s resident memory %s", name, when), mib(out[name])})
	}
	if s.rss0 == nil {
		s.rss0 = out
	}
	return out
}

// cpu reads each component's CPU time so far, of settleComponents.
func (s *scaleRun) cpu() map[string]time.Duration {
	out := map[string]time.Duration{}
	for _, name := range settleComponents {
		pid, err := s.c.PID(name)
		if err != nil {
			s.b.Fatal(err)
		}
		if out[name], err = benchapi.CPUTime(pid); err != nil {
			s.b.Fatal(err)
		}
	}
	return out
}

// cpuRows adds each component's CPU since before, per n objects.
func (s *scaleRun) cpuRows(before map[string]time.Duration, n int, what string) {
	after := s.cpu()
	for _, name := range scaleComponents {
		per := (after[name] - before[name]) / time.Duration(n)
		s.rows = append(s.rows, [2]string{fmt.Sprintf("%s CPU per %s", name, what), fmt.Sprintf("%.2f ms", float64(per)/float64(time.Millisecond))})
	}
}

// idleCPU is each component's CPU per second over d, with nothing asked
// of it but what earlier steps left running.
func (s *scaleRun) idleCPU(d time.Duration) map[string]time.Duration {
	before := s.cpu()
	time.Sleep(d)
	after := s.cpu()
	out := map[string]time.Duration{}
	for name := range after {
		out[name] = (after[name] - before[name]) * time.Second / d
	}
	return out
}

// settle waits, at most two minutes, until the components together
// spend no more CPU per second over 2 s than their floor, by a fifth and
// 50 ms/s: the aftermath of a step (a burst's Pods going Running, their
// Events, recounts) would otherwise share the cores with the next, and
// two steps compared with each other would not start alike. It returns
// each component's rate over the last window, and adds a row of the wait.
func (s *scaleRun) settle(what string) map[string]time.Duration {
	total := func(m map[string]time.Duration) (t time.Duration) {
		for _, d := range m {
			t += d
		}
		return t
	}
	limit := total(s.floor)*6/5 + 50*time.Millisecond
	start := time.Now()
	rate := s.idleCPU(2 * time.Second)
	for total(rate) > limit && time.Since(start) < 2*time.Minute {
		rate = s.idleCPU(2 * time.Second)
	}
	s.rows = append(s.rows, [2]string{fmt.Sprintf("settled before the %s (all components under %.0f ms/s, the floor %.0f ms/s)", what,
		float64(limit)/float64(time.Millisecond), float64(total(s.floor))/float64(time.Millisecond)),
		fmt.Sprintf("%s, at %.0f ms/s", seconds(time.Since(start)), float64(total(rate))/float64(time.Millisecond))})
	return rate
}

// lessIdleRows adds each component's CPU since before per n objects, less
// what it spent idle at the rate idle over the step's elapsed time: the
// objects' own cost, which a step that takes longer does not inflate.
func (s *scaleRun) lessIdleRows(before, idle map[string]time.Duration, elapsed time.Duration, n int, what string) {
	after := s.cpu()
	for _, name := range scaleComponents {
		spent := after[name] - before[name] - time.Duration(float64(idle[name])*elapsed.Seconds())
		s.rows = append(s.rows, [2]string{fmt.Sprintf("%s CPU per %s, less idle (%.0f ms/s)", name, what, float64(idle[name])/float64(time.Millisecond)),
			fmt.Sprintf("%.2f ms", float64(spent/time.Duration(n))/float64(time.Millisecond))})
	}
	// Whether the step had the machine to itself to spare, or used it up.
	var all time.Duration
	for _, name := range settleComponents {
		all += after[name] - before[name]
	}
	s.rows = append(s.rows, [2]string{fmt.Sprintf("the cluster's CPU during the %s step (every process), share of %d cores", what, goruntime.NumCPU()),
		fmt.Sprintf("%.0f%%", 100*all.Seconds()/elapsed.Seconds()/float64(goruntime.NumCPU()))})
}

// profile takes a CPU profile of kiln-apiserver and of kiln-controller
// over the next 20 s, and keeps them in the run's directory as
// <component>.<step>.cpu.pprof; wait waits for them.
func (s *scaleRun) profile(step string) (wait func()) {
	var wg sync.WaitGroup
	for _, target := range []struct {
		component, base string
		client          *http.Client
	}{
		{"kiln-apiserver", s.c.KilnURL, s.direct},
		{"kiln-controller", s.c.ControllerMetricsURL(), http.DefaultClient},
	} {
		wg.Go(func() {
			file := filepath.Join(s.c.Dir, target.component+"."+step+".cpu.pprof")
			if err := benchapi.CPUProfile(context.Background(), target.client, target.base, 20, file); err != nil {
				s.b.Errorf("CPU profile of %s: %v", target.component, err)
			}
		})
	}
	return wg.Wait
}

// directClient carries the admin's client certificate straight to
// kiln-apiserver, as bench-api reaches it.
func directClient(b *testing.B, c *localcluster.Cluster) *http.Client {
	direct := rest.CopyConfig(c.AdminConfig)
	direct.Host = c.KilnURL
	direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = nil, c.KilnCAFile
	client, err := rest.HTTPClientFor(direct)
	if err != nil {
		b.Fatal(err)
	}
	return client
}

// writes counts the write requests each API server has served so far,
// by "verb resource[/subresource]", from apiserver_request_total.
func (s *scaleRun) writes(ctx context.Context) map[string]map[string]float64 {
	kube, err := s.kube.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
	if err != nil {
		s.b.Fatal(err)
	}
	resp, err := s.direct.Get(s.c.KilnURL + "/metrics")
	if err != nil {
		s.b.Fatal(err)
	}
	defer resp.Body.Close()
	kiln, err := io.ReadAll(resp.Body)
	if err != nil {
		s.b.Fatal(err)
	}
	return map[string]map[string]float64{
		"kube-apiserver": requestCounts(strings.NewReader(string(kube))),
		"kiln-apiserver": requestCounts(strings.NewReader(string(kiln))),
	}
}

// writeRows adds, per API server, the writes it served since before per
// n objects: what each object costs in requests, and in etcd writes.
func (s *scaleRun) writeRows(ctx context.Context, before map[string]map[string]float64, n int, what string) {
	after := s.writes(ctx)
	for _, server := range []string{"kube-apiserver", "kiln-apiserver"} {
		var parts []string
		for _, k := range slices.Sorted(maps.Keys(after[server])) {
			if per := (after[server][k] - before[server][k]) / float64(n); per >= 0.005 {
				parts = append(parts, fmt.Sprintf("%s %.2f", k, per))
			}
		}
		if len(parts) == 0 {
			parts = []string{"none"}
		}
		s.rows = append(s.rows, [2]string{fmt.Sprintf("%s writes per %s", server, what), strings.Join(parts, ", ")})
	}
}

// requestCounts sums apiserver_request_total over codes and scopes for
// each write verb and resource.
func requestCounts(r io.Reader) map[string]float64 {
	out := map[string]float64{}
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		name, rest, ok := strings.Cut(sc.Text(), "{")
		if !ok || name != "apiserver_request_total" {
			continue
		}
		end := strings.LastIndexByte(rest, '}')
		if end < 0 {
			continue
		}
		labels := map[string]string{}
		for kv := range strings.SplitSeq(rest[:end], ",") {
			k, v, _ := strings.Cut(kv, "=")
			labels[k] = strings.Trim(v, `"`)
		}
		switch labels["verb"] {
		case "POST", "PUT", "PATCH", "APPLY", "DELETE", "DELETECOLLECTION":
		default:
			continue
		}
		key := labels["verb"] + " " + labels["resource"]
		if sub := labels["subresource"]; sub != "" {
			key += "/" + sub
		}
		if v, err := strconv.ParseFloat(strings.TrimSpace(rest[end+1:]), 64); err == nil {
			out[key] += v
		}
	}
	return out
}

// controllerMetric sums the samples of a kiln-controller metric whose
// labels include label (say, name="instance").
func (s *scaleRun) controllerMetric(metric, label string) float64 {
	resp, err := http.Get(s.c.ControllerMetricsURL() + "/metrics")
	if err != nil {
		s.b.Fatal(err)
	}
	defer resp.Body.Close()
	return sumMetric(resp.Body, metric, label)
}

func sumMetric(r io.Reader, metric, label string) float64 {
	var sum float64
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		line := sc.Text()
		name, rest, ok := strings.Cut(line, "{")
		if !ok || name != metric || !strings.Contains(rest, label) {
			continue
		}
		f := strings.Fields(rest[strings.LastIndexByte(rest, '}')+1:])
		if len(f) == 0 {
			continue
		}
		if v, err := strconv.ParseFloat(f[0], 64); err == nil {
			sum += v
		}
	}
	return sum
}

// queueStats are a work queue's processed items, the time spent on them,
// and the time they waited in the queue.
type queueStats struct{ count, seconds, waited float64 }

func (s *scaleRun) controllerQueue(name string) queueStats {
	label := `name="` + name + `"`
	return queueStats{
		count:   s.controllerMetric("workqueue_work_duration_seconds_count", label),
		seconds: s.controllerMetric("workqueue_work_duration_seconds_sum", label),
		waited:  s.controllerMetric("workqueue_queue_duration_seconds_sum", label),
	}
}

// queueRows adds what a kiln-controller queue did since before: syncs,
// their mean time, and their mean wait in the queue, which says whether
// the loop's workers kept up.
func (s *scaleRun) queueRows(name string, before queueStats, what string) {
	after := s.controllerQueue(name)
	n := after.count - before.count
	if n <= 0 {
		return
	}
	s.rows = append(s.rows, [2]string{fmt.Sprintf("%s queue during %s: syncs, mean sync, mean wait in the queue", name, what),
		fmt.Sprintf("%.0f, %.1f ms, %.1f ms", n, (after.seconds-before.seconds)/n*1000, (after.waited-before.waited)/n*1000)})
}

// capacityWatch records, while the new Instances start, when each Pod of
// the namespace is first seen bound and when the InstanceType's free cards
// change.
type capacityWatch struct {
	cancel context.CancelFunc
	wg     sync.WaitGroup
	mu     sync.Mutex
	start  int32
	bound  []time.Time
	seen   map[types.UID]bool
	frees  []freeAt
}

type freeAt struct {
	at   time.Time
	free int32
}

func (s *scaleRun) watchCapacity(ctx context.Context, typ, ns string) *capacityWatch {
	ctx, cancel := context.WithCancel(ctx)
	w := &capacityWatch{cancel: cancel, seen: map[types.UID]bool{}}
	t, err := s.kiln.GpuV1alpha1().InstanceTypes().Get(ctx, typ, metav1.GetOptions{})
	if err != nil {
		s.b.Fatal(err)
	}
	w.start = t.Status.Capacity.FreeCards
	tw, err := s.kiln.GpuV1alpha1().InstanceTypes().Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + typ, ResourceVersion: t.ResourceVersion})
	if err != nil {
		s.b.Fatal(err)
	}
	pw, err := s.kube.CoreV1().Pods(ns).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		s.b.Fatal(err)
	}
	drain := func(ch <-chan watch.Event, on func(runtime.Object)) {
		defer w.wg.Done()
		for ev := range ch {
			on(ev.Object)
		}
	}
	w.wg.Add(2)
	go drain(tw.ResultChan(), func(o runtime.Object) {
		if t, ok := o.(*gpuv1.InstanceType); ok {
			w.mu.Lock()
			w.frees = append(w.frees, freeAt{time.Now(), t.Status.Capacity.FreeCards})
			w.mu.Unlock()
		}
	})
	go drain(pw.ResultChan(), func(o runtime.Object) {
		if p, ok := o.(*corev1.Pod); ok && p.Spec.NodeName != "" {
			w.mu.Lock()
			if !w.seen[p.UID] {
				w.seen[p.UID] = true
				w.bound = append(w.bound, time.Now())
			}
			w.mu.Unlock()
		}
	})
	go func() {
		<-ctx.Done()
		tw.Stop()
		pw.Stop()
	}()
	return w
}

// stop ends the watches and returns, for the k-th Pod bound, how long
// until status.capacity first showed k fewer free cards than at the
// start: the free count only falls while the Instances start.
func (w *capacityWatch) stop() []time.Duration {
	w.cancel()
	w.wg.Wait()
	var lat []time.Duration
	for k, at := range w.bound {
		i := slices.IndexFunc(w.frees, func(f freeAt) bool { return f.free <= w.start-int32(k+1) })
		if i < 0 {
			continue
		}
		lat = append(lat, max(w.frees[i].at.Sub(at), 0))
	}
	slices.Sort(lat)
	return lat
}

func (s *scaleRun) capacityRows(lat []time.Duration, before queueStats) {
	if len(lat) < s.size.new {
		s.b.Errorf("status.capacity showed %d of %d Pods bound", len(lat), s.size.new)
	}
	if len(lat) == 0 {
		return
	}
	s.row("Pod bound → InstanceType status.capacity shows it, p50", lat[len(lat)/2])
	s.row("Pod bound → InstanceType status.capacity shows it, p99 (target ≤ 2 s)", lat[len(lat)*99/100])
	after := s.controllerQueue("instancetype")
	syncs := after.count - before.count
	s.rows = append(s.rows, [2]string{fmt.Sprintf("instancetype recounts for %d Pods bound", s.size.new), fmt.Sprintf("%.0f", syncs)})
	if syncs > 0 {
		s.rows = append(s.rows, [2]string{fmt.Sprintf("instancetype sync of %d nodes (recount, status write), mean wall time", s.size.nodes),
			fmt.Sprintf("%.2f ms", (after.seconds-before.seconds)/syncs*1000)})
	}
}

// admission times creates in ns, one at a time, once it holds the new
// Instances: each is charged against the namespace's Budget.
func (s *scaleRun) admission(ctx context.Context, ns string) {
	var lat []time.Duration
	for i := range scaleAdmissionCreates {
		start := time.Now()
		if err := createGPUInstance(ctx, s.kiln, ns, fmt.Sprintf("a-%04d", i), ""); err != nil {
			s.b.Fatal(err)
		}
		lat = append(lat, time.Since(start))
	}
	slices.Sort(lat)
	what := fmt.Sprintf("create of one Instance in a namespace of %d, Budget charged (one client)", s.size.new)
	s.row("%s, p50", lat[len(lat)/2], what)
	s.row("%s, p99", lat[len(lat)*99/100], what)
}

// recount measures kiln-apiserver's CPU for a Budget recount: each change
// of a Budget's spec makes one, which lists the namespace's Instances and
// Claims. Sixty changes a second apart in ns, sixty in an empty
// namespace, and sixty seconds of nothing, the last subtracted from the
// others. Each window holds four of the Budget loop's 15 s resyncs, which
// recount every namespace with a Budget: shorter ones held one or two, and
// the figures moved by more than the recount costs.
func (s *scaleRun) recount(ctx context.Context, ns string) {
	const changes = 60
	empty := "scale-empty"
	s.namespaceWithBudget(ctx, empty, 1)
	pid, err := s.c.PID("kiln-apiserver")
	if err != nil {
		s.b.Fatal(err)
	}
	measure := func(ns string) time.Duration {
		before, err := benchapi.CPUTime(pid)
		if err != nil {
			s.b.Fatal(err)
		}
		for i := range changes {
			if ns != "" {
				patch := fmt.Sprintf(`{"spec":{"hard":{"%s":"%d"}}}`, gpuv1.BudgetNodePorts, 1000+i)
				if _, err := s.kiln.GpuV1alpha1().Budgets(ns).Patch(ctx, "team", types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					s.b.Fatal(err)
				}
			}
			time.Sleep(time.Second)
		}
		after, err := benchapi.CPUTime(pid)
		if err != nil {
			s.b.Fatal(err)
		}
		return after - before
	}
	// The creates before leave work behind (their recounts, the
	// controller's status writes): let it settle before the idle figure.
	time.Sleep(15 * time.Second)
	idle := measure("")
	none := measure(empty)
	full := measure(ns)
	per := func(d time.Duration) string {
		return fmt.Sprintf("%.1f ms", float64(d)/changes/float64(time.Millisecond))
	}
	s.rows = append(s.rows,
		[2]string{"kiln-apiserver CPU per Budget change (patch + recount + status write), namespace of 0 Instances, less idle", per(none - idle)},
		[2]string{fmt.Sprintf("kiln-apiserver CPU per Budget change, namespace of %d Instances, less idle", s.size.new+scaleAdmissionCreates), per(full - idle)})
}

// kubectl adds the median wall time of five runs of a command.
func (s *scaleRun) kubectl(what, bin string, args ...string) {
	var times []time.Duration
	for range 5 {
		start := time.Now()
		out, err := exec.Command(bin, args...).CombinedOutput()
		if err != nil {
			s.b.Fatalf("%s: %v\n%s", what, err, out)
		}
		times = append(times, time.Since(start))
	}
	slices.Sort(times)
	s.row("`%s`, median of 5", times[2], what)
}

// restart kills kiln-controller and times a new one to leading, then to
// every Instance and Claim taken through its loop and the queues empty.
func (s *scaleRun) restart(ctx context.Context, instances, claims int) {
	if err := s.c.KillController(); err != nil {
		s.b.Fatal(err)
	}
	start := time.Now()
	if err := s.c.StartController(ctx); err != nil {
		s.b.Fatal(err)
	}
	s.row("kiln-controller restart → leading (waits out the killed one's Lease)", time.Since(start))
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 10*time.Minute, true, func(context.Context) (bool, error) {
		return s.controllerMetric("workqueue_adds_total", `name="instance"`) >= float64(instances) &&
			s.controllerMetric("workqueue_adds_total", `name="claim"`) >= float64(claims) &&
			s.controllerMetric("workqueue_depth", `name="`) == 0, nil
	}); err != nil {
		s.b.Fatalf("kiln-controller did not re-check every Instance and Claim: %v", err)
	}
	s.row("kiln-controller restart → every Instance and Claim re-checked, queues empty", time.Since(start))
	s.rss("after the controller's restart")
}

func (s *scaleRun) print() {
	var sb strings.Builder
	fmt.Fprintf(&sb, "\nBenchmarkScale: %d nodes of 8 cards, %d Instances in %d namespaces, %d Claims, %d new, %d Claim workers\n\n",
		s.size.nodes, s.size.instances, s.size.namespaces, s.size.claims, s.size.new, s.size.claimWorkers)
	sb.WriteString("| figure | measured |\n|---|---:|\n")
	for _, r := range s.rows {
		fmt.Fprintf(&sb, "| %s | %s |\n", r[0], r[1])
	}
	fmt.Print(sb.String())
	if err := os.WriteFile(filepath.Join(s.c.Dir, "table.md"), []byte(sb.String()), 0o644); err != nil {
		s.b.Error(err)
	}
}
