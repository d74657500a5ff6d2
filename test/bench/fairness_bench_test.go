package bench

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/localcluster"
)

// burstSize is how many Instances the busy tenant creates and deletes.
const burstSize = 5000

// BenchmarkFairness: how long one tenant's Instance takes from create to
// Ready on an idle cluster, and while another tenant creates 5,000
// Instances and then deletes them (issue J). The busy tenant's Instances
// are stopped, so the nodes stay free and what is measured is the
// controller's queue, not the scheduler: each still costs the controller
// a finalizer, a status write and, on delete, the finalizer's removal.
// BENCH_BIN_DIR runs other binaries (say, a kiln-controller from before
// the fair queue) on the same harness.
func BenchmarkFairness(b *testing.B) {
	ctx := context.Background()
	c, kube, kiln := startCluster(b, "bench-fairness", localcluster.Options{
		Nodes: inventory(),
	})
	defer c.Stop()
	createBenchType(b, kiln)
	createNamespace(b, kube, "busy")
	createNamespace(b, kube, "quiet")

	quiet := 0
	toReady := func(b *testing.B) time.Duration {
		quiet++
		name := fmt.Sprintf("q-%d", quiet)
		start := time.Now()
		if err := create(ctx, kube, kiln, "instances", "quiet", name); err != nil {
			b.Fatal(err)
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 20*time.Minute, true, func(ctx context.Context) (bool, error) {
			inst, err := kiln.GpuV1alpha1().Instances("quiet").Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionReady)
			return c != nil && c.Status == metav1.ConditionTrue, nil
		})
		if err != nil {
			b.Fatalf("quiet Instance %s not Ready: %v", name, err)
		}
		return time.Since(start)
	}

	b.Run("idle", func(b *testing.B) {
		for range b.N {
			b.ReportMetric(toReady(b).Seconds(), "s-to-ready")
		}
	})
	b.Run(fmt.Sprintf("during-%d-creates", burstSize), func(b *testing.B) {
		for range b.N {
			var created atomic.Int64
			names := make(chan string)
			var wg sync.WaitGroup
			for range 16 {
				wg.Go(func() {
					for name := range names {
						inst := &gpuv1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name},
							Spec: gpuv1.InstanceSpec{Type: "bench", Image: "busybox:1", Stopped: true,
								Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](0)}}}
						if _, err := kiln.GpuV1alpha1().Instances("busy").Create(ctx, inst, metav1.CreateOptions{}); err == nil {
							created.Add(1)
						}
					}
				})
			}
			go func() {
				for i := range burstSize {
					names <- fmt.Sprintf("burst-%d", i)
				}
				close(names)
			}()
			// Once the burst is under way, the quiet tenant starts one.
			for created.Load() < burstSize/2 {
				time.Sleep(100 * time.Millisecond)
			}
			b.ReportMetric(toReady(b).Seconds(), "s-to-ready")
			wg.Wait()
			b.ReportMetric(float64(created.Load()), "busy-created")
		}
	})
	b.Run(fmt.Sprintf("during-%d-deletes", burstSize), func(b *testing.B) {
		for range b.N {
			if err := kiln.GpuV1alpha1().Instances("busy").DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(toReady(b).Seconds(), "s-to-ready")
			start := time.Now()
			if err := wait.PollUntilContextTimeout(ctx, time.Second, 30*time.Minute, true, func(ctx context.Context) (bool, error) {
				l, err := kiln.GpuV1alpha1().Instances("busy").List(ctx, metav1.ListOptions{Limit: 1})
				return err == nil && len(l.Items) == 0, nil
			}); err != nil {
				b.Fatal(err)
			}
			b.ReportMetric(time.Since(start).Seconds(), "s-busy-gone-after")
		}
	})
}
