package instancetype

import (
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	coreinformers "k8s.io/client-go/informers/core/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// TestTallyFollowsEvents drives the controller through random Pod and
// Node changes, each told to it the way its event handlers tell it, and
// after each compares the kept count of every type with a count of the
// whole cluster from scratch.
func TestTallyFollowsEvents(t *testing.T) {
	types := []*v1alpha1.InstanceType{h100Type(), l4Type()}
	nodeNames := []string{"n0", "n1", "n2", "n3", "n4", "n5"}
	shapes := []func(name string) *corev1.Node{
		h100Node,
		func(name string) *corev1.Node { return h100MIGNode(name) },
		func(name string) *corev1.Node { return node(name, l4Model, resources(gpu, 4)) },
		func(name string) *corev1.Node { return h100MIGNode(name, cordoned) },
		func(name string) *corev1.Node { return node(name, h100Model, resources(gpu, 8), notReady) },
		func(name string) *corev1.Node { return node(name, h100Model, resources(gpu, 2)) },
		func(name string) *corev1.Node { return node(name, "", resources("cpu", 64)) },
	}
	asks := []corev1.ResourceList{
		resources(gpu, 1), resources(gpu, 3), resources(mig1g, 1), resources(mig3g, 2),
		resources("cpu", 4), resources(gpu, 1, gpuMem, 50),
	}
	rng := rand.New(rand.NewPCG(1, 2))
	pick := func(n int) int { return rng.IntN(n) }

	var nodes []*corev1.Node
	for _, name := range nodeNames {
		nodes = append(nodes, shapes[pick(len(shapes))](name))
	}
	f := newFixture(t, types, nodes, nil)
	c := f.c
	live := map[string]*corev1.Node{}
	for _, n := range nodes {
		live[n.Name] = n
	}
	pods := map[string]*corev1.Pod{}

	for step := range 2000 {
		var did string
		switch op := pick(7); {
		case op == 0 || op == 1 || len(pods) == 0:
			name := fmt.Sprintf("p%d", step)
			on := nodeNames[pick(len(nodeNames))]
			if pick(5) == 0 {
				on = ""
			}
			p := pod(name, on, asks[pick(len(asks))])
			if pick(4) == 0 {
				p.Status.Phase = corev1.PodPending
			}
			f.add(t, f.pods, p)
			pods[name] = p
			c.enqueuePoolsUsedBy(p)
			did = "add pod " + name + " on " + on
		case op == 2:
			p := anyOf(rng, pods)
			f.remove(t, f.pods, p)
			delete(pods, p.Name)
			c.podDeleted(coreinformers.DeletedPod{OptionalObj: p})
			did = "delete pod " + p.Name
		case op == 3:
			old := anyOf(rng, pods)
			p := old.DeepCopy()
			switch {
			case p.Spec.NodeName == "":
				p.Spec.NodeName = nodeNames[pick(len(nodeNames))]
			case pick(2) == 0:
				p.Status.Phase = corev1.PodSucceeded
			default:
				p.Spec.Containers[0].Resources.Requests = asks[pick(len(asks))]
			}
			f.update(t, f.pods, p)
			pods[p.Name] = p
			if podChanged(old, p) {
				c.enqueuePoolsUsedBy(old, p)
			}
			did = "update pod " + p.Name
		case op == 4 || op == 5:
			name := nodeNames[pick(len(nodeNames))]
			n := shapes[pick(len(shapes))](name)
			old, ok := live[name]
			if ok {
				f.update(t, f.nodes, n)
				if nodeChanged(old, n) {
					c.enqueuePoolsOf(old, n)
				}
			} else {
				f.add(t, f.nodes, n)
				c.enqueuePoolsOf(n)
			}
			live[name] = n
			did = "set node " + name
		case op == 6:
			name := nodeNames[pick(len(nodeNames))]
			if n, ok := live[name]; ok {
				f.remove(t, f.nodes, n)
				delete(live, name)
				c.nodeDeleted(coreinformers.DeletedNode{OptionalObj: n})
			}
			did = "delete node " + name
		}
		var allNodes []*corev1.Node
		for _, n := range live {
			allNodes = append(allNodes, n)
		}
		var allPods []*corev1.Pod
		for _, p := range pods {
			allPods = append(allPods, p)
		}
		for _, typ := range types {
			got, err := c.capacity(typ)
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(Capacity(typ, allNodes, allPods), got); diff != "" {
				t.Fatalf("step %d (%s): %s kept count differs from a count from scratch (-scratch +kept):\n%s", step, did, typ.Name, diff)
			}
		}
	}
}

// TestTallyRecountsOnlyStaleNodes shows the count is kept, not redone: a
// change no event told the controller of is not seen until its node is
// marked, and a new spec counts the pool whole.
func TestTallyRecountsOnlyStaleNodes(t *testing.T) {
	typ := h100Type()
	f := newFixture(t, []*v1alpha1.InstanceType{typ}, []*corev1.Node{h100Node("a"), h100Node("b")}, nil)
	free := func() int32 {
		t.Helper()
		c, err := f.c.capacity(typ)
		if err != nil {
			t.Fatal(err)
		}
		return c.FreeCards
	}
	if got := free(); got != 16 {
		t.Fatalf("free cards %d, want 16", got)
	}
	f.add(t, f.pods, pod("unheard", "a", resources(gpu, 2)))
	if got := free(); got != 16 {
		t.Errorf("free cards %d after a Pod no event told of, want the kept 16", got)
	}
	f.c.markStale(typ.Name, "b")
	if got := free(); got != 16 {
		t.Errorf("free cards %d after node b was recounted, want 16: the Pod is on a", got)
	}
	f.c.markStale(typ.Name, "a")
	if got := free(); got != 14 {
		t.Errorf("free cards %d after node a was recounted, want 14", got)
	}
	f.add(t, f.pods, pod("unheard-2", "b", resources(gpu, 1)))
	typ.Generation++
	if got := free(); got != 13 {
		t.Errorf("free cards %d with a new generation, want 13 from a whole count", got)
	}
}

func anyOf(rng *rand.Rand, pods map[string]*corev1.Pod) *corev1.Pod {
	i := rng.IntN(len(pods))
	for _, p := range pods {
		if i == 0 {
			return p
		}
		i--
	}
	return nil
}

// TestTallyForgottenWhileCounting: a tombstone that drops the tally while
// a sync counts is not undone by that sync putting its tally back.
func TestTallyForgottenWhileCounting(t *testing.T) {
	typ := h100Type()
	f := newFixture(t, []*v1alpha1.InstanceType{typ}, []*corev1.Node{h100Node("a")}, nil)
	if _, err := f.c.capacity(typ); err != nil {
		t.Fatal(err)
	}
	// The tombstone arrives while the sync reads node a's devices.
	f.c.devices = tombstoneDuring{f.c.devices, func() { f.c.enqueueAll() }}
	f.c.markStale(typ.Name, "a")
	if _, err := f.c.capacity(typ); err != nil {
		t.Fatal(err)
	}
	f.c.mu.Lock()
	defer f.c.mu.Unlock()
	if _, ok := f.c.tallies[typ.Name]; ok {
		t.Error("the sync put back the tally a tombstone dropped while it counted")
	}
}

// tombstoneDuring is a NodeDevices lister that runs tombstone on a Get.
type tombstoneDuring struct {
	listers.NodeDevicesLister
	tombstone func()
}

func (l tombstoneDuring) Get(name string) (*v1alpha1.NodeDevices, error) {
	l.tombstone()
	return l.NodeDevicesLister.Get(name)
}
