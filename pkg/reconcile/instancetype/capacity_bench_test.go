package instancetype

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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
