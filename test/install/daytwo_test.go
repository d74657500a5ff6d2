package install

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/test/faults"
	"kiln.dev/kiln/test/images"
	"kiln.dev/kiln/test/localcluster"
)

// loadTenants run the writer load, each under a Budget of one card: three
// cards of real-0's four at most.
var loadTenants = []string{tenantA, "tenant-b", "tenant-c"}

// images of each kind, by the container that runs them.
var workloads = []struct{ kind, object, container, image string }{
	{"deployment", "kiln-apiserver", "apiserver", "kiln-apiserver"},
	{"deployment", "kiln-controller", "controller", "kiln-controller"},
	{"daemonset", "kiln-node-agent", "node-agent", "kiln-node-agent"},
}

// dayTwo runs the fault suite's writer load of three tenants through the
// in-cluster Kiln while an operator upgrades it to the next build with
// `kubectl set image`, rolls it back the same way, drains kiln-apiserver
// Pods off real-0 and deletes the controller's leader. Each is a row of
// the fault suite's table, its acknowledged writes checked by that
// suite's history checker, and every answer that was not a success is
// counted by code.
func dayTwo(t *testing.T, cluster *localcluster.Cluster, admin kubectlAs, prev, next string) {
	ctx := context.Background()
	cfg := cluster.AdminConfig
	adminKiln, err := faults.TenantClient(cfg)
	if err != nil {
		t.Fatal(err)
	}
	aggregated := dynamic.NewForConfigOrDie(cfg)
	env := &faults.Env{
		Kube: kubernetes.NewForConfigOrDie(cfg),
		Kiln: adminKiln,
		// A client outside real-0 reaches Kiln only as the aggregator
		// does: both watch paths are the aggregated one.
		Aggregated: aggregated, Direct: aggregated,
		Tenants: map[string]versioned.Interface{}, Budgets: map[string]string{}, BudgetHard: 1,
		Type: "real", Log: testLog{t}, Rounds: 1,
		Image: images.WorkloadImage, Command: []string{"/bin/sh", "-c", "trap 'exit 0' TERM; while true; do sleep 1; done"},
	}
	for _, ns := range loadTenants {
		tcfg, err := cluster.ConfigFor(ns)
		if err != nil {
			t.Fatal(err)
		}
		if env.Tenants[ns], err = faults.TenantClient(tcfg); err != nil {
			t.Fatal(err)
		}
		env.Budgets[ns] = "load"
		_, err = adminKiln.GpuV1alpha1().Budgets(ns).Create(ctx, &gpuv1.Budget{
			ObjectMeta: metav1.ObjectMeta{Name: "load"},
			Spec:       gpuv1.BudgetSpec{Hard: map[gpuv1.BudgetResourceName]resource.Quantity{gpuv1.BudgetAccelerators: *resource.NewQuantity(1, resource.DecimalSI)}},
		}, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
	}

	setImages := func(version string) faults.Injector {
		return func(ctx context.Context, _ int) error {
			for _, w := range workloads {
				if _, err := admin.run("", "-n", kilnNamespace, "set", "image", w.kind+"/"+w.object, w.container+"=kiln.local/"+w.image+":"+version); err != nil {
					return err
				}
			}
			return rolledOut(admin, version)
		}
	}
	var takeover string
	var rows []faults.Row
	run := func(row faults.Row) {
		rows = append(rows, row)
		// The next row starts with the tenants' Budgets free, as the fault
		// suite's rows do: what this row's load left running holds each
		// tenant's one card, and the next load's every create was refused
		// (rows that acknowledged no write, which passed).
		if err := env.Cleanup(ctx, loadTenants); err != nil {
			t.Errorf("cleaning up after %s: %v", row.Fault, err)
		}
	}
	run(env.RunWriterFault(ctx, "rolling upgrade", "up", setImages(next)))
	run(env.RunWriterFault(ctx, "rollback", "back", setImages(prev)))
	run(env.RunWriterFault(ctx, "kiln-apiserver drained", "drain", func(ctx context.Context, _ int) error {
		return drainAPIServer(admin)
	}))
	run(env.RunWriterFault(ctx, "controller leader deleted", "lead", func(ctx context.Context, _ int) error {
		var err error
		takeover, err = deleteLeader(ctx, admin, adminKiln)
		return err
	}))
	var table strings.Builder
	faults.PrintTable(&table, rows)
	t.Logf("day 2 under load:\n%s", table.String())
	for _, r := range rows {
		t.Logf("%s: answers other than success: %s", r.Fault, answers(r.Answers))
		if r.Failed() {
			t.Errorf("%s: %s %s", r.Fault, r.Err, strings.Join(r.Detail, "; "))
		}
		// Nothing acknowledged, nothing checked: the row proves nothing.
		if r.Err == "" && r.Acked == 0 {
			t.Errorf("%s: the load had no write acknowledged (answers %s)", r.Fault, answers(r.Answers))
		}
	}
	t.Logf("controller leader deleted: %s", takeover)
	// What the load left, before Kiln's API goes: its Pods with it.
	for _, ns := range loadTenants {
		admin.must("", "delete", "instances,claims", "--all", "-n", ns, "--wait", "--timeout=3m")
	}
	// make e2e prints it, as make faults prints its table.
	var report strings.Builder
	report.WriteString(table.String())
	for _, r := range rows {
		fmt.Fprintf(&report, "%s: answers other than success: %s\n", r.Fault, answers(r.Answers))
	}
	fmt.Fprintf(&report, "%s\n", takeover)
	if err := os.WriteFile(filepath.Join(repoRoot, "_output", "install-report.txt"), []byte(report.String()), 0o644); err != nil {
		t.Error(err)
	}
}

func answers(m map[string]int) string {
	if len(m) == 0 {
		return "none"
	}
	var keys []string
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%s ×%d", k, m[k]))
	}
	return strings.Join(parts, ", ")
}

// rolledOut waits for each workload's rollout, then checks that every Pod
// of Kiln's runs the version's image.
func rolledOut(admin kubectlAs, version string) error {
	for _, w := range workloads {
		if _, err := admin.run("", "-n", kilnNamespace, "rollout", "status", w.kind+"/"+w.object, "--timeout=5m"); err != nil {
			return err
		}
	}
	// The Pods a rollout replaced may still be terminating.
	var stale string
	err := wait.PollUntilContextTimeout(context.Background(), 200*time.Millisecond, 2*time.Minute, true, func(context.Context) (bool, error) {
		out, err := admin.run("", "-n", kilnNamespace, "get", "pods", "-o", `jsonpath={range .items[*]}{.metadata.name} {.spec.containers[0].image}{"\n"}{end}`)
		if err != nil {
			return false, err
		}
		stale = ""
		for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
			f := strings.Fields(line)
			if len(f) == 2 && strings.HasPrefix(f[1], "kiln.local/kiln-") && !strings.HasSuffix(f[1], ":"+version) {
				stale += fmt.Sprintf(" %s runs %s;", f[0], f[1])
			}
		}
		return stale == "", nil
	})
	if err != nil {
		return fmt.Errorf("after the rollout to %s:%s %w", version, stale, err)
	}
	return nil
}

// drainAPIServer drains the kiln-apiserver Pods off real-0 as an operator
// would: kubectl drain evicts one, and the PodDisruptionBudget refuses the
// other until a replacement is ready, which on a cordoned single node is
// never; drain gives up at its timeout. The API serves through the other
// replica meanwhile. real-0 is uncordoned again and the Deployment back to
// two ready replicas before it returns.
func drainAPIServer(admin kubectlAs) error {
	out, drainErr := admin.run("", "drain", localcluster.RealNodeName, "--pod-selector=app.kubernetes.io/name=kiln-apiserver", "--timeout=30s")
	if _, err := admin.run("", "uncordon", localcluster.RealNodeName); err != nil {
		return err
	}
	if drainErr == nil || !strings.Contains(drainErr.Error(), "disruption budget") {
		return fmt.Errorf("kubectl drain of both kiln-apiserver Pods: %v %s; want it held back by the PodDisruptionBudget", drainErr, out)
	}
	if _, err := admin.run("", "wait", "--for=condition=Available", "apiservice/v1alpha1.gpu.kiln.dev", "--timeout=10s"); err != nil {
		return fmt.Errorf("the APIService during the drain: %w", err)
	}
	_, err := admin.run("", "-n", kilnNamespace, "rollout", "status", "deployment/kiln-apiserver", "--timeout=3m")
	return err
}

// deleteLeader deletes the Pod holding kiln-controller's Lease, creates an
// Instance once it is gone, and waits for the other replica to take the
// Lease and report the Instance. It says who led and how long the first
// reconcile after took.
//
// A new object, not an edit: kiln-apiserver itself marks an edit of an
// Instance reported Stopped that keeps it stopped as observed, so such an
// edit passed here with no leader at all.
func deleteLeader(ctx context.Context, admin kubectlAs, kiln versioned.Interface) (string, error) {
	const ns = "tenant-c"
	instances := kiln.GpuV1alpha1().Instances(ns)
	// reported creates a stopped Instance and waits until a controller
	// has written its status, which the server clears on create.
	reported := func(name string, timeout time.Duration) error {
		_, err := instances.Create(ctx, &gpuv1.Instance{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gpuv1.InstanceSpec{Type: "real", Image: images.WorkloadImage, Stopped: true,
				Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)}},
		}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
			i, err := instances.Get(ctx, name, metav1.GetOptions{})
			return err == nil && i.Status.ObservedGeneration >= 1 && i.Status.Phase == gpuv1.InstanceStopped, nil
		})
		if err != nil {
			i, _ := instances.Get(ctx, name, metav1.GetOptions{})
			return fmt.Errorf("no controller reported %s (status %+v): %w", name, i.Status, err)
		}
		return nil
	}
	defer instances.Delete(context.Background(), "leader-probe", metav1.DeleteOptions{})
	defer instances.Delete(context.Background(), "leader-probe-after", metav1.DeleteOptions{})
	if err := reported("leader-probe", 2*time.Minute); err != nil {
		return "", err
	}
	holder, err := admin.run("", "-n", kilnNamespace, "get", "lease", "kiln-controller", "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil {
		return "", err
	}
	pod, _, _ := strings.Cut(holder, "_")
	start := time.Now()
	if _, err := admin.run("", "-n", kilnNamespace, "delete", "pod", pod, "--wait=true", "--timeout=2m"); err != nil {
		return "", err
	}
	gone := time.Since(start)
	if err := reported("leader-probe-after", 3*time.Minute); err != nil {
		return "", fmt.Errorf("after the leader %s was deleted: %w", pod, err)
	}
	first := time.Since(start)
	now, err := admin.run("", "-n", kilnNamespace, "get", "lease", "kiln-controller", "-o", "jsonpath={.spec.holderIdentity}")
	if err != nil {
		return "", err
	}
	if now == holder || now == "" {
		return "", fmt.Errorf("the Lease is held by %q after %s, the leader, was deleted and an Instance was reported since", now, holder)
	}
	if _, err := admin.run("", "-n", kilnNamespace, "rollout", "status", "deployment/kiln-controller", "--timeout=3m"); err != nil {
		return "", err
	}
	return fmt.Sprintf("leader %s deleted (gone after %s); %s leads, and reported an Instance created once the old leader was gone %s after the deletion",
		pod, gone.Round(100*time.Millisecond), now, first.Round(100*time.Millisecond)), nil
}
