package bench

import (
	"context"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"

	"kiln.dev/kiln/test/localcluster"
)

// deleteSize is how many running Instances a namespace holds when it is
// deleted.
const deleteSize = 1000

// BenchmarkNamespaceDelete: how fast kiln-controller finalizes a deleted
// namespace's running Instances (issue J measured about 33/s). Each
// Instance has a Pod on a kwok node and a Service; the namespace
// controller deletes the Instances, and each goes only once the
// controller has deleted its Pod and Service and taken its finalizer off.
// The controller runs with its default flags, client rate limit included,
// since that is what a deployment gets. BENCH_BIN_DIR runs another
// kiln-controller (say, one from before the change) on the same harness.
func BenchmarkNamespaceDelete(b *testing.B) {
	ctx := context.Background()
	c, kube, kiln := startCluster(b, "bench-deletes", localcluster.Options{
		Nodes: inventory(),
	})
	defer c.Stop()
	createBenchType(b, kiln)

	b.Run(fmt.Sprintf("running/n=%d", deleteSize), func(b *testing.B) {
		for i := range b.N {
			ns := fmt.Sprintf("del-%d", i)
			createNamespace(b, kube, ns)
			timeToDone(b, deleteSize, "d-", func(ctx context.Context, name string) error {
				return create(ctx, kube, kiln, "instances", ns, name)
			}, func(ctx context.Context) (watch.Interface, error) {
				return kiln.GpuV1alpha1().Instances(ns).Watch(ctx, metav1.ListOptions{})
			}, instanceReady)

			b.ResetTimer()
			start := time.Now()
			if err := kube.CoreV1().Namespaces().Delete(ctx, ns, metav1.DeleteOptions{}); err != nil {
				b.Fatal(err)
			}
			var instancesGone time.Duration
			err := wait.PollUntilContextTimeout(ctx, 250*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
				if instancesGone == 0 {
					l, err := kiln.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{Limit: 1})
					if err != nil || len(l.Items) > 0 {
						return false, nil
					}
					instancesGone = time.Since(start)
				}
				_, err := kube.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
				return err != nil, nil
			})
			if err != nil {
				b.Fatalf("namespace %s not gone: %v", ns, err)
			}
			b.StopTimer()
			b.ReportMetric(instancesGone.Seconds(), "s-instances-gone")
			b.ReportMetric(float64(deleteSize)/instancesGone.Seconds(), "finalized/s")
			b.ReportMetric(time.Since(start).Seconds(), "s-namespace-gone")
		}
	})
}
