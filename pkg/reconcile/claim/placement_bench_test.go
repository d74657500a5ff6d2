package claim

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	clienttesting "k8s.io/client-go/testing"
)

// BenchmarkPlace is one Claim's placement (issue R) in a pool of 1,000
// nodes of 8 cards with 5,000 Instance Pods of one card and 1,000 Claims
// bound there, as the cluster around the pool grows: outside Pods are on
// 1,000 CPU nodes of no GPU pool, in a namespace of their own. A
// placement must cost what the pool holds, not what the cluster does.
func BenchmarkPlace(b *testing.B) {
	for _, outside := range []int{0, 20000} {
		b.Run(fmt.Sprintf("outside-pods=%d", outside), func(b *testing.B) {
			f := newFixture(b, h100())
			add := func(o runtime.Object) {
				if err := f.indexerFor(o).Add(o); err != nil {
					b.Fatal(err)
				}
			}
			const nodes = 1000
			for i := range nodes {
				add(node(fmt.Sprintf("gpu-%d", i)))
				add(node(fmt.Sprintf("cpu-%d", i), func(n *corev1.Node) {
					n.Labels = nil
					n.Status.Allocatable = resources(corev1.ResourceCPU, 64)
				}))
			}
			for i := range 5000 {
				p := pod(fmt.Sprintf("inst-%d", i), fmt.Sprintf("gpu-%d", i%nodes), resources(gpu, 1))
				p.UID = types.UID(p.Name)
				add(p)
			}
			for i := range outside {
				p := pod(fmt.Sprintf("web-%d", i), fmt.Sprintf("cpu-%d", i%nodes), resources(corev1.ResourceCPU, 1), inNamespace("web"))
				p.UID = types.UID(p.Name)
				add(p)
			}
			for i := range 1000 {
				cl, h := held(newClaim(fmt.Sprintf("held-%d", i), 1), fmt.Sprintf("gpu-%d", i%nodes))
				cl.UID, h.UID = types.UID(cl.Name), types.UID(h.Name)
				add(cl)
				add(h)
			}
			// Holders are made and forgotten: the fake clientset's tracker
			// would otherwise be most of what is measured.
			f.kube.PrependReactor("create", "pods", func(a clienttesting.Action) (bool, runtime.Object, error) {
				return true, a.(clienttesting.CreateAction).GetObject(), nil
			})
			for i := 0; b.Loop(); i++ {
				b.StopTimer()
				cl := newClaim(fmt.Sprintf("new-%d", i), 2)
				if err := f.kiln.Tracker().Add(cl); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
				s := &step{cl: cl, st: cl.Status, now: metav1.NewTime(f.clock)}
				if err := f.c.place(b.Context(), s); err != nil || s.st.NodeName == "" {
					b.Fatalf("placing %s: %v %+v", cl.Name, err, s.st.Conditions)
				}
				// Forget it, so each placement sees the same cluster.
				b.StopTimer()
				f.c.forget(cl)
				if err := f.kiln.Tracker().Delete(f.gvrOf(cl), tenant, cl.Name); err != nil {
					b.Fatal(err)
				}
				b.StartTimer()
			}
		})
	}
}
