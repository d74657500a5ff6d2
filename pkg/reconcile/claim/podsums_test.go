package claim

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"

	"kiln.dev/kiln/pkg/domain/pool"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// TestPodSumsFollowEvents runs random Pod changes through the cache and
// the handlers the loop registers, reads the kept sums after each as a
// placement does, and compares them with the node's Pods read afresh.
func TestPodSumsFollowEvents(t *testing.T) {
	const nodes = 6
	f := newFixture(t, h100())
	var all []*corev1.Node
	for i := range nodes {
		n := node(fmt.Sprintf("gpu-%d", i))
		all = append(all, n)
		if err := f.nodes.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	handler := queue.Handler(f.c.podChanged, f.c.podDeleted)
	list := func(node string) ([]*corev1.Pod, error) { return f.c.podIdx.ByTypedIndex(pool.PodsByNode, node) }
	rng := rand.New(rand.NewPCG(1, 2))
	var live []*corev1.Pod
	randomNode := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		return fmt.Sprintf("gpu-%d", rng.IntN(nodes))
	}
	for step := range 2000 {
		var what string
		switch op := rng.IntN(10); {
		case op < 4 || len(live) == 0:
			var opts []func(*corev1.Pod)
			if rng.IntN(3) == 0 {
				opts = append(opts, onClaim(fmt.Sprintf("c-%d", rng.IntN(5))))
			}
			p := pod(fmt.Sprintf("p-%d", step), randomNode(), resources(gpu, rng.IntN(3), corev1.ResourceCPU, rng.IntN(4)), opts...)
			p.UID, p.ResourceVersion = types.UID(p.Name), fmt.Sprint(step)
			if err := f.pods.Add(p); err != nil {
				t.Fatal(err)
			}
			handler.OnAdd(p, false)
			live = append(live, p)
			what = "add " + p.Name
		case op < 7:
			i := rng.IntN(len(live))
			old := live[i]
			p := old.DeepCopy()
			p.ResourceVersion = fmt.Sprint(step)
			if p.Spec.NodeName == "" {
				p.Spec.NodeName = randomNode()
			} else {
				p.Status.Phase = corev1.PodSucceeded
			}
			if err := f.pods.Update(p); err != nil {
				t.Fatal(err)
			}
			handler.OnUpdate(old, p)
			live[i] = p
			what = "update " + p.Name
		default:
			i := rng.IntN(len(live))
			p := live[i]
			if err := f.pods.Delete(p); err != nil {
				t.Fatal(err)
			}
			d := cache.DeletedObject[*corev1.Pod]{OptionalObj: p}
			switch rng.IntN(4) {
			case 0:
				// A tombstone with no copy.
				d = cache.DeletedObject[*corev1.Pod]{FinalStateUnknown: &cache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name}}
			case 1:
				// A tombstone with an older copy, bound nowhere yet.
				stale := p.DeepCopy()
				stale.Spec.NodeName = ""
				d = cache.DeletedObject[*corev1.Pod]{OptionalObj: stale, FinalStateUnknown: &cache.DeletedFinalStateUnknown{Key: p.Namespace + "/" + p.Name, Obj: stale}}
			}
			handler.OnDelete(d)
			live = slices.Delete(live, i, i+1)
			what = "delete " + p.Name
		}
		kept, err := f.c.podSums.pool(all, list)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all {
			pods, err := list(n.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := summary(kept[n.Name]), summary(newNodePods(pods)); got != want {
				t.Fatalf("step %d (%s): node %s kept %s, its Pods now %s", step, what, n.Name, got, want)
			}
		}
	}
}

// summary is what Free reads of np.
func summary(np *NodePods) string {
	var claimed []string
	for _, p := range np.claimed {
		claimed = append(claimed, p.Name+"@"+p.ResourceVersion)
	}
	slices.Sort(claimed)
	return fmt.Sprintf("gpu %d, cpu %d, claimed %v", np.plainRequest(gpu), np.plainRequest(corev1.ResourceCPU), claimed)
}

// TestPodSumsMarkedWhileReading: a node marked while a placement reads
// its Pods is read again by the next placement, not kept as read.
func TestPodSumsMarkedWhileReading(t *testing.T) {
	for _, mark := range []string{"the node", "every node"} {
		t.Run(mark, func(t *testing.T) {
			s := newPodSums()
			n := node("gpu-0")
			first := pod("a", "gpu-0", resources(gpu, 1))
			second := pod("b", "gpu-0", resources(gpu, 1))
			reads := 0
			list := func(string) ([]*corev1.Pod, error) {
				reads++
				if reads == 1 {
					// b is bound, and its event handled, while a's list is read.
					if mark == "the node" {
						s.changed(second)
					} else {
						s.changedAll()
					}
					return []*corev1.Pod{first}, nil
				}
				return []*corev1.Pod{first, second}, nil
			}
			for range 2 {
				if _, err := s.pool([]*corev1.Node{n}, list); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.pool([]*corev1.Node{n}, list)
			if err != nil {
				t.Fatal(err)
			}
			if r := got["gpu-0"].plainRequest(gpu); r != 2000 || reads != 2 {
				t.Errorf("after %d reads the node's Pods request %d thousandths of a card, want 2000 after 2 reads", reads, r)
			}
		})
	}
}
