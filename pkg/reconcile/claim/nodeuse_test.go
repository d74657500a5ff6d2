package claim

import (
	"fmt"
	"maps"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// TestNodeUsesFollowEvents runs random changes of Pods, Claims and the
// InstanceType through the cache and the handlers the loop registers,
// reads the kept uses after each as a placement does, and compares them
// with each node read afresh. A use kept past a change it depends on
// would let a placement count room that is taken.
func TestNodeUsesFollowEvents(t *testing.T) {
	const nodes, names = 6, 5
	f := newFixture(t, h100())
	var all []*corev1.Node
	for i := range nodes {
		n := node(fmt.Sprintf("gpu-%d", i))
		all = append(all, n)
		if err := f.nodes.Add(n); err != nil {
			t.Fatal(err)
		}
	}
	pods := queue.Handler(f.c.podChanged, f.c.podDeleted)
	claims := queue.Handler(f.c.claimChanged, f.c.claimDeleted)
	typeSpec := f.c.typeSpecHandler()
	rng := rand.New(rand.NewPCG(1, 2))
	randomNode := func() string {
		if rng.IntN(4) == 0 {
			return ""
		}
		return fmt.Sprintf("gpu-%d", rng.IntN(nodes))
	}
	var livePods []*corev1.Pod
	liveClaims := map[string]*v1alpha1.Claim{}
	typ := h100()
	typ.Generation, typ.ResourceVersion = 1, "0"
	if err := f.types.Update(typ); err != nil {
		t.Fatal(err)
	}
	for step := range 3000 {
		rv := fmt.Sprint(step + 1)
		var what string
		switch op := rng.IntN(20); {
		case op < 6 || len(livePods) == 0:
			// A Pod: of no Claim, an Instance's on a Claim, or a holder
			// pinned to a node and bound there or not yet.
			name := fmt.Sprintf("p-%d", step)
			var p *corev1.Pod
			switch rng.IntN(3) {
			case 0:
				p = pod(name, randomNode(), resources(gpu, rng.IntN(3), corev1.ResourceCPU, rng.IntN(4)))
			case 1:
				p = pod(name, randomNode(), resources(gpu, rng.IntN(3)), onClaim(fmt.Sprintf("c-%d", rng.IntN(names))))
			default:
				cl := claim(fmt.Sprintf("c-%d", rng.IntN(names)), 1)
				pin := fmt.Sprintf("gpu-%d", rng.IntN(nodes))
				p = handover.RenderHolder(cl, typ, pin, resources(gpu, 1), "pause")
				if _, taken, _ := f.pods.GetByKey(p.Namespace + "/" + p.Name); taken {
					p.Name = name
				}
				if rng.IntN(2) == 0 {
					p.Spec.NodeName = pin
				}
				p.Status.Phase = corev1.PodRunning
			}
			p.UID, p.ResourceVersion = types.UID(p.Name), rv
			if err := f.pods.Add(p); err != nil {
				t.Fatal(err)
			}
			pods.OnAdd(p, false)
			livePods = append(livePods, p)
			what = "add Pod " + p.Name
		case op < 9:
			i := rng.IntN(len(livePods))
			old := livePods[i]
			p := old.DeepCopy()
			p.ResourceVersion = rv
			switch {
			case p.Spec.NodeName == "":
				p.Spec.NodeName = randomNode()
			case rng.IntN(2) == 0:
				p.DeletionTimestamp = ptr.To(metav1.NewTime(start))
			default:
				p.Status.Phase = corev1.PodSucceeded
			}
			if err := f.pods.Update(p); err != nil {
				t.Fatal(err)
			}
			pods.OnUpdate(old, p)
			livePods[i] = p
			what = "update Pod " + p.Name
		case op < 11:
			i := rng.IntN(len(livePods))
			p := livePods[i]
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
			pods.OnDelete(d)
			livePods = slices.Delete(livePods, i, i+1)
			what = "delete Pod " + p.Name
		case op < 16:
			// A Claim created, or its status moved: placed on a node or
			// none, Lost, or its ask changed.
			name := fmt.Sprintf("c-%d", rng.IntN(names))
			old, ok := liveClaims[name]
			cl := claim(name, int32(1+rng.IntN(3)))
			if ok {
				cl = old.DeepCopy()
			}
			cl.ResourceVersion = rv
			switch rng.IntN(4) {
			case 0:
				cl.Status.Phase, cl.Status.NodeName = v1alpha1.ClaimLost, randomNode()
			case 1:
				cl.Spec.Accelerators = ptr.To(int32(1 + rng.IntN(3)))
			default:
				cl.Status.Phase, cl.Status.NodeName = v1alpha1.ClaimBound, randomNode()
			}
			if ok {
				if err := f.claims.Update(cl); err != nil {
					t.Fatal(err)
				}
				claims.OnUpdate(old, cl)
			} else {
				if err := f.claims.Add(cl); err != nil {
					t.Fatal(err)
				}
				claims.OnAdd(cl, false)
			}
			liveClaims[name] = cl
			what = "set Claim " + name
		case op < 18:
			if len(liveClaims) == 0 {
				continue
			}
			names := slices.Sorted(maps.Keys(liveClaims))
			cl := liveClaims[names[rng.IntN(len(names))]]
			if err := f.claims.Delete(cl); err != nil {
				t.Fatal(err)
			}
			d := kilninformers.DeletedClaim{OptionalObj: cl}
			if rng.IntN(3) == 0 {
				d = kilninformers.DeletedClaim{FinalStateUnknown: &cache.DeletedFinalStateUnknown{Key: cl.Namespace + "/" + cl.Name}}
			}
			claims.OnDelete(d)
			delete(liveClaims, cl.Name)
			what = "delete Claim " + cl.Name
		default:
			// The type's status (no ask changes), or its spec: whole
			// cards offered under another resource name, or none.
			old := typ
			typ = old.DeepCopy()
			typ.ResourceVersion = rv
			if rng.IntN(2) == 0 {
				typ.Generation++
				if typ.Spec.Accelerator.Exclusive.ResourceName == string(gpu) {
					typ.Spec.Accelerator.Exclusive.ResourceName = "example.com/card"
				} else {
					typ.Spec.Accelerator.Exclusive.ResourceName = string(gpu)
				}
			} else {
				typ.Status.ObservedGeneration = typ.Generation
			}
			if err := f.types.Update(typ); err != nil {
				t.Fatal(err)
			}
			typeSpec.OnUpdate(old, typ)
			what = "update InstanceType"
		}
		kept, err := f.c.uses.pool(all, f.c.readNodeUse)
		if err != nil {
			t.Fatal(err)
		}
		for _, n := range all {
			fresh, err := f.c.readNodeUse(n.Name)
			if err != nil {
				t.Fatal(err)
			}
			if got, want := summary(kept[n.Name]), summary(fresh); got != want {
				t.Fatalf("step %d (%s): node %s kept\n%s\nread afresh\n%s", step, what, n.Name, got, want)
			}
		}
	}
}

// summary is what Free reads of u.
func summary(u *NodeUse) string {
	s := fmt.Sprintf("gpu %d, example.com/card %d, cpu %d", u.request(gpu), u.request("example.com/card"), u.request(corev1.ResourceCPU))
	for _, key := range slices.Sorted(maps.Keys(u.claims)) {
		cu := u.claims[key]
		var pods []string
		for _, p := range cu.pods {
			pods = append(pods, p.Name+"@"+p.ResourceVersion)
		}
		slices.Sort(pods)
		s += fmt.Sprintf("; %s holds %v, Pods %v", key, quantities(cu.hold), pods)
	}
	return s
}

// TestNodeUsesMarkedWhileReading: a node marked while a placement reads
// it is read again by the next placement, not kept as read.
func TestNodeUsesMarkedWhileReading(t *testing.T) {
	for _, mark := range []string{"the node", "every node"} {
		t.Run(mark, func(t *testing.T) {
			s := newNodeUses()
			n := node("gpu-0")
			first := pod("a", "gpu-0", resources(gpu, 1))
			second := pod("b", "gpu-0", resources(gpu, 1))
			reads := 0
			read := func(string) (*NodeUse, error) {
				reads++
				if reads == 1 {
					// b is bound, and its event handled, while the node
					// is read without it.
					if mark == "the node" {
						s.changed("gpu-0")
					} else {
						s.changedAll()
					}
					return newNodeUse([]*corev1.Pod{first}, nil), nil
				}
				return newNodeUse([]*corev1.Pod{first, second}, nil), nil
			}
			for range 2 {
				if _, err := s.pool([]*corev1.Node{n}, read); err != nil {
					t.Fatal(err)
				}
			}
			got, err := s.pool([]*corev1.Node{n}, read)
			if err != nil {
				t.Fatal(err)
			}
			if r := got["gpu-0"].request(gpu); r != 2000 || reads != 2 {
				t.Errorf("after %d reads the node's Pods take %d thousandths of a card, want 2000 after 2 reads", reads, r)
			}
		})
	}
}
