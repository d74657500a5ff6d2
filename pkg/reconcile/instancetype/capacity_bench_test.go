package instancetype

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// BenchmarkStatus is one recount of an InstanceType's pool (issue R), what
// the loop does after a Pod event there: 1,000 nodes of 8 cards with 6,000
// one-card Pods.
func BenchmarkStatus(b *testing.B) {
	t := h100Type()
	var nodes []*corev1.Node
	for i := range 1000 {
		nodes = append(nodes, h100Node(fmt.Sprintf("gpu-%d", i)))
	}
	var pods []*corev1.Pod
	for i := range 6000 {
		pods = append(pods, pod(fmt.Sprintf("p-%d", i), fmt.Sprintf("gpu-%d", i%1000), resources(gpu, 1, "cpu", 4)))
	}
	now := metav1.Now()
	for b.Loop() {
		if st := Status(t, nodes, pods, now); st.Capacity.FreeCards != 2000 {
			b.Fatalf("%d cards free, want 2000", st.Capacity.FreeCards)
		}
	}
}

// BenchmarkRecountAfterPodEvent is what a sync counts after one Pod event
// (issue R): "one-node" is the node the event marked, with the pool's
// count kept from before; "whole" counts the pool from scratch, as every
// sync did before the count was kept. Pools of 1,000 and 5,000 nodes of 8
// cards with 6 one-card Pods each.
func BenchmarkRecountAfterPodEvent(b *testing.B) {
	typ := h100Type()
	for _, size := range []int{1000, 5000} {
		var nodes []*corev1.Node
		var pods []*corev1.Pod
		for i := range size {
			nodes = append(nodes, h100Node(fmt.Sprintf("gpu-%d", i)))
			for j := range 6 {
				pods = append(pods, pod(fmt.Sprintf("p-%d-%d", i, j), nodes[i].Name, resources(gpu, 1, "cpu", 4)))
			}
		}
		f := newFixture(b, []*v1alpha1.InstanceType{typ}, nodes, pods)
		check := func(b *testing.B) {
			c, err := f.c.capacity(typ)
			if err != nil {
				b.Fatal(err)
			}
			if c.FreeCards != int32(2*size) {
				b.Fatalf("%d cards free, want %d", c.FreeCards, 2*size)
			}
		}
		b.Run(fmt.Sprintf("nodes=%d/one-node", size), func(b *testing.B) {
			check(b)
			for i := 0; b.Loop(); i++ {
				f.c.markStale(typ.Name, nodes[i%size].Name)
				check(b)
			}
		})
		b.Run(fmt.Sprintf("nodes=%d/whole", size), func(b *testing.B) {
			for b.Loop() {
				f.c.forget(typ.Name)
				check(b)
			}
		})
	}
}
