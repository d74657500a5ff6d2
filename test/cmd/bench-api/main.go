// Command bench-api compares Kiln's API with a CRD of the same schema, on a
// local control plane of its own: the CRD on kube-apiserver, Kiln through
// kube-apiserver's aggregator, and Kiln directly, interleaved in one run.
// It prints Markdown tables and, with --docs, rewrites their section of
// docs/benchmarks.md. `make bench-api` runs it.
package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	goruntime "runtime"
	"strconv"
	"strings"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/test/benchapi"
	"kiln.dev/kiln/test/localcluster"
)

func main() {
	var (
		dir           = flag.String("dir", "_output/bench-api", "state of the benchmark's own control plane (wiped first)")
		binDir        = flag.String("bin-dir", "_output/bin", "where `make control-plane build` put the binaries")
		repoRoot      = flag.String("repo-root", ".", "the repository, for artifacts/ and pkg/apis")
		controllerGen = flag.String("controller-gen", "", "controller-gen binary that generates the CRD from pkg/apis")
		docs          = flag.String("docs", "", "rewrite the bench-api section of this file (docs/benchmarks.md)")
		sizes         = flag.String("sizes", "2000,10000", "object counts the workloads run at, ascending")
		ops           = flag.Int("ops", 2000, "operations of each per-object workload at each size")
		lists         = flag.Int("lists", 5, "LISTs of each kind at each size")
		workers       = flag.Int("workers", 16, "parallel clients per path")
		chunks        = flag.Int("chunks", 5, "turns the paths take in each workload")
		watchers      = flag.String("watchers", "100,1000", "watcher counts")
		admissionOut  = flag.String("admission-bench", "", "output of `go test -bench BenchmarkAdmissionChain` to include in the report")
		cpuProfile    = flag.String("cpu-profile", "create,get", "record the servers' CPU profiles while these workloads run, comma-separated (empty: none)")
		encoding      = flag.String("kiln-encoding", "auto", "Kiln's request and response encoding: json, protobuf, or auto (protobuf if Kiln serves it)")
	)
	flag.Parse()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	if err := run(ctx, *dir, *binDir, *repoRoot, *controllerGen, *docs, ints(*sizes), ints(*watchers), *ops, *lists, *workers, *chunks, *encoding, *cpuProfile, *admissionOut); err != nil {
		fmt.Fprintln(os.Stderr, "bench-api:", err)
		os.Exit(1)
	}
}

func ints(s string) []int {
	var out []int
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f == "" {
			continue
		}
		n, err := strconv.Atoi(f)
		if err != nil {
			fmt.Fprintf(os.Stderr, "bench-api: %q is not a number\n", f)
			os.Exit(2)
		}
		out = append(out, n)
	}
	return out
}

func run(ctx context.Context, dir, binDir, repoRoot, controllerGen, docs string, sizes, watchers []int, ops, lists, workers, chunks int, encoding, cpuProfile, admissionOut string) error {
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		return err
	}
	crd, err := benchapi.GenerateCRD(controllerGen, root, filepath.Join(dir, "crd"))
	if err != nil {
		return err
	}
	fmt.Fprintln(os.Stderr, "starting the control plane in", dir)
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: binDir, RepoRoot: root,
		// One CPU node: nothing is scheduled, the controller is left out.
		Nodes: []localcluster.NodeSpec{{Name: "bench-0", Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("64"), corev1.ResourceMemory: resource.MustParse("256Gi"), corev1.ResourcePods: resource.MustParse("110"),
		}}},
		NoController: true,
		// The heap profile endpoint forces the GC the memory figures need.
		APIServerFlags: []string{"--profiling=true"},
		// KilnFinalizers sets kiln-controller's finalizers on a running
		// Instance's create, and no controller is here to take them off:
		// a delete would only mark the Instance, where the CRD's removes
		// the object. Its checks of updates and deletes cost next to
		// nothing.
		KilnFlags: []string{"--disable-admission-plugins=KilnFinalizers"},
		Log:       os.Stderr,
	})
	if err != nil {
		return err
	}
	defer c.Stop()
	admin := rest.CopyConfig(c.AdminConfig)
	admin.QPS, admin.Burst = -1, 0
	kube := kubernetes.NewForConfigOrDie(admin)
	kiln := versioned.NewForConfigOrDie(admin)
	if err := benchapi.InstallCRD(ctx, dynamic.NewForConfigOrDie(admin), crd); err != nil {
		return fmt.Errorf("CRD: %w", err)
	}
	for _, name := range []string{benchapi.TypeName, benchapi.AltTypeName} {
		_, err := kiln.GpuV1alpha1().InstanceTypes().Create(ctx, &gpuv1.InstanceType{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gpuv1.InstanceTypeSpec{ResourcesPerCard: gpuv1.HostResources{
				CPU: ptr.To(resource.MustParse("100m")), Memory: ptr.To(resource.MustParse("64Mi")),
			}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
	}
	kubeHTTP, err := rest.HTTPClientFor(admin)
	if err != nil {
		return err
	}
	direct := rest.CopyConfig(admin)
	direct.Host = c.KilnURL
	direct.TLSClientConfig.CAData, direct.TLSClientConfig.CAFile = nil, c.KilnCAFile
	kilnHTTP, err := rest.HTTPClientFor(direct)
	if err != nil {
		return err
	}
	enc, err := kilnEncoding(ctx, kilnHTTP, c.KilnURL, encoding)
	if err != nil {
		return err
	}
	paths := []*benchapi.Path{
		{Name: "crd", Client: kubeHTTP, Base: admin.Host, Group: benchapi.CRDGroup, Encoding: benchapi.JSON},
		{Name: "aggregated", Client: kubeHTTP, Base: admin.Host, Group: gpuv1.SchemeGroupVersion.Group, Encoding: enc},
		{Name: "direct", Client: kilnHTTP, Base: c.KilnURL, Group: gpuv1.SchemeGroupVersion.Group, Encoding: enc},
	}
	if enc == benchapi.Protobuf {
		// kubectl and dynamic clients speak JSON to Kiln whatever it serves.
		paths = append(paths,
			&benchapi.Path{Name: "aggregated-json", Client: kubeHTTP, Base: admin.Host, Group: gpuv1.SchemeGroupVersion.Group, Encoding: benchapi.JSON},
			&benchapi.Path{Name: "direct-json", Client: kilnHTTP, Base: c.KilnURL, Group: gpuv1.SchemeGroupVersion.Group, Encoding: benchapi.JSON})
	}
	for _, p := range paths {
		p.Namespace = "bench-" + p.Name
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: p.Namespace}}, metav1.CreateOptions{}); err != nil {
			return err
		}
	}
	var servers []benchapi.Server
	for _, s := range []benchapi.Server{
		{Name: "kube-apiserver", Client: kubeHTTP, Base: admin.Host},
		{Name: "kiln-apiserver", Client: kilnHTTP, Base: c.KilnURL},
		{Name: "etcd"},
	} {
		if s.PID, err = c.PID(s.Name); err != nil {
			return err
		}
		servers = append(servers, s)
	}
	scheme := runtime.NewScheme()
	if err := gpuv1.AddToScheme(scheme); err != nil {
		return err
	}
	etcdPID := servers[2].PID
	report, err := benchapi.Run(ctx, benchapi.Config{
		Paths: paths, Servers: servers, Scheme: scheme,
		Sizes: sizes, Ops: ops, Lists: lists, Workers: workers, Chunks: chunks,
		Watchers: watchers, WatchPaths: []string{"crd", "aggregated"},
		EtcdPut: func(ctx context.Context, n, workers, size int) (benchapi.Sample, error) {
			return etcdPut(ctx, c.EtcdURL(), etcdPID, n, workers, size)
		},
		ProfileDir: dir, CPUProfiles: strings.Split(cpuProfile, ","), CPUProfileSeconds: 20,
		Log: os.Stderr,
	})
	if err != nil {
		return err
	}
	if admissionOut != "" {
		b, err := os.ReadFile(admissionOut)
		if err != nil {
			return err
		}
		if report.Admission = benchapi.ParseAdmission(string(b)); len(report.Admission) == 0 {
			return fmt.Errorf("no BenchmarkAdmissionChain results in %s", admissionOut)
		}
	}
	var out strings.Builder
	fmt.Fprintf(&out, "Measured %s on %s, %s (`make bench-api`).\n\n", time.Now().UTC().Format("2006-01-02"), commit(root), machine())
	report.Markdown(&out)
	fmt.Fprintf(&out, "\nProfiles of this run are in `%s`: `*.heap.pprof` with the objects stored, `*.WORKLOAD.cpu.pprof` for %s (`go tool pprof -top FILE`).\n", dir, cpuProfile)
	fmt.Println(out.String())
	if top, err := exec.Command("go", "tool", "pprof", "-top", "-nodecount=15", "-sample_index=inuse_space", filepath.Join(dir, "kiln-apiserver.heap.pprof")).Output(); err == nil {
		fmt.Println("kiln-apiserver heap in use with the objects stored:")
		fmt.Println(string(top))
	}
	if docs != "" {
		return benchapi.WriteSection(docs, []byte(out.String()))
	}
	return nil
}

// kilnEncoding is the encoding Kiln's paths use: protobuf when asked for
// or, with auto, when Kiln answers a protobuf request in protobuf.
func kilnEncoding(ctx context.Context, client *http.Client, base, want string) (benchapi.Encoding, error) {
	switch want {
	case "json":
		return benchapi.JSON, nil
	case "protobuf":
		return benchapi.Protobuf, nil
	case "auto":
	default:
		return "", fmt.Errorf("--kiln-encoding=%s: want json, protobuf or auto", want)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, base+"/apis/gpu.kiln.dev/v1alpha1/instancetypes/"+benchapi.TypeName, nil)
	if err != nil {
		return "", err
	}
	req.Header.Set("Accept", string(benchapi.Protobuf)+", application/json")
	resp, err := client.Do(req)
	if err != nil {
		return "", err
	}
	resp.Body.Close()
	if resp.Header.Get("Content-Type") == string(benchapi.Protobuf) {
		return benchapi.Protobuf, nil
	}
	return benchapi.JSON, nil
}

// etcdPut is the physical limit: n puts of size-byte values from workers
// clients straight to etcd, under a prefix of its own, deleted afterwards.
func etcdPut(ctx context.Context, endpoint string, pid, n, workers, size int) (benchapi.Sample, error) {
	cli, err := clientv3.New(clientv3.Config{Endpoints: []string{endpoint}, DialTimeout: 5 * time.Second})
	if err != nil {
		return benchapi.Sample{}, err
	}
	defer cli.Close()
	value := strings.Repeat("x", size)
	ops := make([]benchapi.Op, n)
	for i := range ops {
		key := fmt.Sprintf("/bench-raw/%06d", i)
		ops[i] = func(ctx context.Context) error {
			_, err := cli.Put(ctx, key, value)
			return err
		}
	}
	before, err := benchapi.CPUTime(pid)
	if err != nil {
		return benchapi.Sample{}, err
	}
	s := benchapi.Do(ctx, workers, ops)
	after, err := benchapi.CPUTime(pid)
	if err != nil {
		return benchapi.Sample{}, err
	}
	s.CPU = map[string]time.Duration{"etcd": after - before}
	if s.Errors > 0 {
		return s, fmt.Errorf("%d of %d puts failed, first: %s", s.Errors, s.Ops, s.FirstError)
	}
	_, err = cli.Delete(ctx, "/bench-raw/", clientv3.WithPrefix())
	return s, err
}

func commit(root string) string {
	out, err := exec.Command("git", "-C", root, "rev-parse", "--short", "HEAD").Output()
	if err != nil {
		return "an unknown commit"
	}
	c := "commit " + strings.TrimSpace(string(out))
	if st, err := exec.Command("git", "-C", root, "status", "--porcelain", "--untracked-files=no").Output(); err == nil && len(st) > 0 {
		c += " with uncommitted changes"
	}
	return c
}

func machine() string {
	model := "an unknown CPU"
	if b, err := os.ReadFile("/proc/cpuinfo"); err == nil {
		for line := range strings.SplitSeq(string(b), "\n") {
			if v, ok := strings.CutPrefix(line, "model name"); ok {
				model = strings.TrimSpace(strings.TrimPrefix(strings.TrimSpace(v), ":"))
				break
			}
		}
	}
	return fmt.Sprintf("%d cores (%s)", goruntime.NumCPU(), model)
}
