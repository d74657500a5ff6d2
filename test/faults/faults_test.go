package faults

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/test/localcluster"
)

var tenants = []string{"tenant-a", "tenant-b", "tenant-c"}

// Sizes of the suite.
const (
	budgetHard = 4
	churnSize  = 500
)

// TestFaults is `make faults`: one local cluster with a 3-member etcd and
// two Kiln replicas behind the APIService, every fault injected three
// times under load, and the table of what held. It fails when a promised
// zero is not zero.
func TestFaults(t *testing.T) {
	root, err := filepath.Abs(filepath.Join("..", ".."))
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	nodes := localcluster.DefaultInventory()
	// A third H100 node, so losing one leaves room to place its Claims
	// again; and CPU-only nodes for the churn's Pods.
	for _, n := range nodes {
		if n.Name == "gpu-h100-0" {
			extra := n
			extra.Name = "gpu-h100-2"
			extra.Resources = n.Resources.DeepCopy()
			nodes = append(nodes, extra)
			break
		}
	}
	for i := range 4 {
		nodes = append(nodes, localcluster.NodeSpec{Name: fmt.Sprintf("cpu-churn-%d", i), Resources: corev1.ResourceList{
			corev1.ResourceCPU: resource.MustParse("1000"), corev1.ResourceMemory: resource.MustParse("4Ti"), corev1.ResourcePods: resource.MustParse("150"),
		}})
	}
	dir := filepath.Join(root, "_output", "faults")
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: filepath.Join(root, "_output", "bin"), RepoRoot: root,
		Tenants: tenants, Nodes: nodes, Log: os.Stderr,
		KilnReplicas: 2, EtcdMembers: 3,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	superviseCtx, stopSupervising := context.WithCancel(ctx)
	defer stopSupervising()
	go c.Supervise(superviseCtx)

	env := newEnv(t, c)
	// go test shows a passing test's output only with -v: the suite's own
	// account of what it did goes to a file as well.
	if f, err := os.Create(filepath.Join(dir, "suite.log")); err == nil {
		defer f.Close()
		env.Log = io.MultiWriter(os.Stderr, stamped{f})
	}
	setUp(t, c, env)

	etcdMembers := []string{"etcd", "etcd-1", "etcd-2"}
	replicas := []string{"kiln-apiserver", "kiln-apiserver-1"}
	var rows []Row
	// FAULTS_RUN, a regular expression, picks faults by name while one is
	// being worked on; unset, every fault runs, as make test wants.
	only, err := regexp.Compile(os.Getenv("FAULTS_RUN"))
	if err != nil {
		t.Fatalf("FAULTS_RUN: %v", err)
	}
	selected := func(fault string) bool {
		if !only.MatchString(fault) {
			fmt.Fprintf(env.Log, "faults: %s not selected by FAULTS_RUN\n", fault)
			return false
		}
		return true
	}
	run := func(row Row) {
		rows = append(rows, row)
		fmt.Fprintf(env.Log, "faults: %s: %+v\n", row.Fault, row)
		if err := env.Cleanup(ctx, append(slices.Clone(tenants), "churn")); err != nil {
			t.Errorf("cleaning up after %s: %v", row.Fault, err)
		}
	}
	if name := "etcd: every member SIGKILLed"; selected(name) {
		run(env.RunWriterFault(ctx, name, "etcd", func(ctx context.Context, round int) error {
			for _, m := range etcdMembers {
				if _, err := c.Kill(m); err != nil {
					return err
				}
			}
			return env.serving(ctx, c, etcdMembers...)
		}))
	}
	if name := "etcd: one of 3 members SIGKILLed"; selected(name) {
		run(env.RunWriterFault(ctx, name, "member", func(ctx context.Context, round int) error {
			if _, err := c.Kill(etcdMembers[round%3]); err != nil {
				return err
			}
			return env.serving(ctx, c, etcdMembers[round%3])
		}))
	}
	if name := "kiln-apiserver: one of 2 replicas SIGKILLed"; selected(name) {
		run(env.RunWriterFault(ctx, name, "replica", func(ctx context.Context, round int) error {
			if _, err := c.Kill(replicas[round%2]); err != nil {
				return err
			}
			return env.serving(ctx, c, replicas[round%2])
		}))
	}
	if name := "kube-apiserver SIGKILLed"; selected(name) {
		run(env.RunWriterFault(ctx, name, "kas", func(ctx context.Context, round int) error {
			if _, err := c.Kill("kube-apiserver"); err != nil {
				return err
			}
			return env.serving(ctx, c, "kube-apiserver")
		}))
	}
	if name := "node with Instances and Claims deleted"; selected(name) {
		run(env.RunWriterFault(ctx, name, "node", func(ctx context.Context, round int) error {
			return env.loseNode(ctx, nodes)
		}))
	}
	if name := "kiln-controller SIGKILLed"; selected(name) {
		run(env.RunChurnFault(ctx, name, "churn", "faults-cpu", churnSize, func(ctx context.Context, round int) error {
			// The supervisor may still be backing off from the last kill.
			return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
				_, err := c.Kill("kiln-controller")
				return err == nil, nil
			})
		}))
	}

	PrintTable(os.Stdout, rows)
	report, err := os.Create(filepath.Join(dir, "report.txt"))
	if err == nil {
		PrintTable(report, rows)
		for _, r := range rows {
			if r.Err != "" || len(r.Detail) > 0 {
				fmt.Fprintf(report, "\n%s: %s\n  %s\n", r.Fault, r.Err, strings.Join(r.Detail, "\n  "))
			}
		}
		report.Close()
	}
	for _, r := range rows {
		if r.Failed() {
			t.Errorf("%s: a promise did not hold: %s\n  %s", r.Fault, r.Err, strings.Join(r.Detail, "\n  "))
		} else if len(r.Detail) > 0 {
			t.Logf("%s:\n  %s", r.Fault, strings.Join(r.Detail, "\n  "))
		}
		if r.Injected < rounds {
			t.Errorf("%s: injected %d times, want %d", r.Fault, r.Injected, rounds)
		}
	}
}

// stamped prefixes each write, one line of the suite's account, with the
// time, so a slow row shows where it spent its minutes.
type stamped struct{ w io.Writer }

func (s stamped) Write(p []byte) (int, error) {
	if _, err := fmt.Fprintf(s.w, "%s %s", time.Now().Format(time.TimeOnly), p); err != nil {
		return 0, err
	}
	return len(p), nil
}

func newEnv(t *testing.T, c *localcluster.Cluster) *Env {
	admin := rest.CopyConfig(c.AdminConfig)
	admin.QPS, admin.Burst = -1, 0
	kiln, err := TenantClient(admin)
	if err != nil {
		t.Fatal(err)
	}
	env := &Env{
		Kube:       kubernetes.NewForConfigOrDie(admin),
		Kiln:       kiln,
		Aggregated: dynamic.NewForConfigOrDie(admin),
		Direct:     dynamic.NewForConfigOrDie(directConfig(c)),
		Tenants:    map[string]versioned.Interface{},
		Budgets:    map[string]string{},
		BudgetHard: budgetHard,
		Type:       "h100",
		Log:        os.Stderr,
	}
	for _, ns := range tenants {
		cfg, err := c.ConfigFor(ns)
		if err != nil {
			t.Fatal(err)
		}
		if env.Tenants[ns], err = TenantClient(cfg); err != nil {
			t.Fatal(err)
		}
		env.Budgets[ns] = "faults"
	}
	return env
}

// setUp installs the example catalogue, a CPU-only type for the churn, a
// Budget per tenant and the churn's namespace, as an admin would.
func setUp(t *testing.T, c *localcluster.Cluster, env *Env) {
	ctx := context.Background()
	root := filepath.Join("..", "..")
	if out, err := runKubectl(c, "apply", "-f", filepath.Join(root, "artifacts", "examples", "instancetypes.yaml")); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if _, err := env.Kiln.GpuV1alpha1().InstanceTypes().Create(ctx, &gpuv1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "faults-cpu"},
		Spec: gpuv1.InstanceTypeSpec{ResourcesPerCard: gpuv1.HostResources{
			CPU: ptr.To(resource.MustParse("100m")), Memory: ptr.To(resource.MustParse("64Mi")),
		}},
	}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	for ns, name := range env.Budgets {
		_, err := env.Kiln.GpuV1alpha1().Budgets(ns).Create(ctx, &gpuv1.Budget{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec:       gpuv1.BudgetSpec{Hard: map[gpuv1.BudgetResourceName]resource.Quantity{gpuv1.BudgetAccelerators: cardsQuantity(budgetHard)}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}
	if _, err := env.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "churn"}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := env.Kube.CoreV1().ServiceAccounts("churn").Get(ctx, "default", metav1.GetOptions{})
		return err == nil, nil
	}); err != nil {
		t.Fatal("no default ServiceAccount in churn")
	}
}

func runKubectl(c *localcluster.Cluster, args ...string) (string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	out, err := execCommand(ctx, c.Kubectl, append([]string{"--kubeconfig=" + c.AdminKubeconfig}, args...)...)
	return string(out), err
}

// serving waits until the components named are back (each member's
// /health, each replica's /readyz), then until a tenant can list Instances
// through the aggregator, which needs kube-apiserver, and the APIService
// is Available.
func (e *Env) serving(ctx context.Context, c *localcluster.Cluster, names ...string) error {
	ca, err := os.ReadFile(c.KilnCAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	kilnClient := &http.Client{Transport: &http.Transport{TLSClientConfig: &tls.Config{RootCAs: pool}}, Timeout: 2 * time.Second}
	plain := &http.Client{Timeout: 2 * time.Second}
	type probe struct {
		client *http.Client
		url    string
	}
	var probes []probe
	for _, n := range names {
		i := 0
		switch {
		case strings.HasPrefix(n, "etcd"):
			fmt.Sscanf(strings.TrimPrefix(n, "etcd-"), "%d", &i)
			probes = append(probes, probe{plain, c.EtcdURLs()[i] + "/health"})
		case strings.HasPrefix(n, "kiln-apiserver"):
			fmt.Sscanf(strings.TrimPrefix(n, "kiln-apiserver-"), "%d", &i)
			probes = append(probes, probe{kilnClient, c.KilnReplicaURLs()[i] + "/readyz"})
		}
	}
	tenant := e.Tenants[tenants[0]]
	return wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, p := range probes {
			resp, err := p.client.Get(p.url)
			if err != nil {
				return false, nil
			}
			resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				return false, nil
			}
		}
		if _, err := tenant.GpuV1alpha1().Instances(tenants[0]).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return false, nil
		}
		svc, err := e.Aggregated.Resource(apiServices).Get(ctx, "v1alpha1.gpu.kiln.dev", metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		conds, _, _ := unstructuredSlice(svc.Object, "status", "conditions")
		for _, cond := range conds {
			m, _ := cond.(map[string]any)
			if m["type"] == "Available" {
				return m["status"] == "True", nil
			}
		}
		return false, nil
	})
}
