// Package claim is the controller loop that makes Claims hold cards: it
// places each Pending Claim (or claim set) on one node of its type's pool,
// holds the cards there with a Pod the real scheduler counts, hands them to
// the Instance that attaches and takes them back when it stops, gives up a
// Claim whose node is lost, and lets an unattached Claim expire.
//
// The holder Pod and the Instance Pods on a Claim run at the kiln-claim
// PriorityClass (the highest a user class may have, preemptionPolicy
// Never), and each is nominated to the Claim's node before the other goes:
// the scheduler keeps a nominated Pod's room from every Pod of lower
// priority, so no third Pod can take the cards between the two.
package claim

import (
	"context"
	"fmt"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
	"kiln.dev/kiln/pkg/domain/ledger"
	"kiln.dev/kiln/pkg/domain/pool"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// ControllerName names the loop in events, logs and work-queue metrics.
const ControllerName = "claim"

const (
	// byClaim indexes Instances by the Claim they name, "ns/name".
	byClaim = "claim:spec.claimName"
	// byNode indexes Claims by the node they hold on.
	byNode = "status.nodeName"
	// podsByPin indexes the Pods of Claims (holders, Instance Pods on
	// Claims) by the node they are pinned to, bound or not.
	podsByPin = "claim:pinnedNode"
	// podsByClaim indexes the Pods labelled with a Claim by "ns/claim".
	podsByClaim = "claim:label"
	// byWaiting indexes the Claims that wait for a node under one key.
	byWaiting = "waiting"
	waiting   = "waiting"
	// recheck is how often a waiting Claim looks again even without an
	// event that frees room (a Budget raised elsewhere, a missed event).
	recheck = 30 * time.Second
)

// Reasons of Events and of the Waiting condition besides the API's.
const (
	ReasonBound    = "Bound"
	ReasonAttached = "Attached"
	ReasonLost     = "NodeLost"
	ReasonExpired  = "Expired"
	// ReasonInstanceRunning: a deleted Claim waits for its Instance to stop.
	ReasonInstanceRunning = "InstanceRunning"
	// ReasonHolderTerminating: the holder of a deleted or Expired Claim is
	// still there past its grace period; the Claim stays charged meanwhile.
	ReasonHolderTerminating = "HolderTerminating"
)

// Options tune the loop.
type Options struct {
	// HolderImage is the container of holder Pods; it only has to run.
	HolderImage string
	// LostGrace is how long a Claim's node may be NotReady before the
	// Claim is Lost.
	LostGrace time.Duration
}

// Controller runs the Claims.
type Controller struct {
	kube kubernetes.Interface
	kiln versioned.Interface

	claims    listers.ClaimLister
	instances listers.InstanceLister
	types     listers.InstanceTypeLister
	budgets   listers.BudgetLister
	pods      corelisters.PodLister
	nodes     corelisters.NodeLister
	devices   listers.NodeDevicesLister
	claimIdx  cache.TypedIndexer[*v1alpha1.Claim]
	instIdx   cache.TypedIndexer[*v1alpha1.Instance]
	podIdx    cache.TypedIndexer[*corev1.Pod]

	queue    *queue.Queue[cache.ObjectName]
	recorder record.EventRecorder
	opts     Options
	now      func() time.Time

	// placing serializes placements, and assumed remembers the ones whose
	// holder the informer has not shown yet, as the scheduler's assume
	// cache does: without it, workers placing at once, or one placing
	// again before its own holder is seen, would count the same room twice.
	placing sync.Mutex
	assumed map[string]assumption
	// uses keeps what each node's Pods and Claims take, for placements.
	uses *nodeUses
}

type assumption struct {
	hold Hold
	at   time.Time
}

// assumeTTL bounds how long a placement is assumed without its holder
// showing up in the informer (a create that failed after all).
const assumeTTL = time.Minute

// NewController wires the loop to its informers; it adds indexers, so call
// it before the informers start.
func NewController(kube kubernetes.Interface, kiln versioned.Interface, inf queue.Informers, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.HolderImage == "" {
		opts.HolderImage = "registry.k8s.io/pause:3.10"
	}
	if opts.LostGrace <= 0 {
		opts.LostGrace = 5 * time.Minute
	}
	gpu, core := inf.Kiln.Gpu().V1alpha1(), inf.Kube.Core().V1()
	claimInformer := kilninformers.ToTypedClaimInformer(gpu.Claims()).TypedInformer()
	instInformer := kilninformers.ToTypedInstanceInformer(gpu.Instances()).TypedInformer()
	podInformer := coreinformers.ToTypedPodInformer(core.Pods()).TypedInformer()
	c := &Controller{
		kube:      kube,
		kiln:      kiln,
		claims:    gpu.Claims().Lister(),
		instances: gpu.Instances().Lister(),
		types:     gpu.InstanceTypes().Lister(),
		budgets:   gpu.Budgets().Lister(),
		pods:      core.Pods().Lister(),
		nodes:     core.Nodes().Lister(),
		devices:   gpu.NodeDevices().Lister(),
		claimIdx:  claimInformer.GetTypedIndexer(),
		instIdx:   instInformer.GetTypedIndexer(),
		podIdx:    podInformer.GetTypedIndexer(),
		recorder:  recorder,
		opts:      opts,
		now:       time.Now,
		assumed:   map[string]assumption{},
		uses:      newNodeUses(),
	}
	c.queue = queue.NewFair(ControllerName, "claim", c.sync, queue.ByNamespace)
	if err := addIndexers(claimInformer, instInformer, podInformer); err != nil {
		return nil, err
	}
	if err := c.watch(inf, claimInformer, instInformer); err != nil {
		return nil, err
	}
	return c, nil
}

// addIndexers indexes Claims by node and by waiting, Instances by the
// Claim they name, and Pods by their node and a Claim's Pods by the node
// they are pinned to: a placement reads only its pool's nodes.
func addIndexers(claims cache.TypedSharedIndexInformer[*v1alpha1.Claim], instances cache.TypedSharedIndexInformer[*v1alpha1.Instance],
	pods cache.TypedSharedIndexInformer[*corev1.Pod]) error {
	if err := claims.AddTypedIndexers(kilninformers.ClaimIndexers{
		byNode: func(cl *v1alpha1.Claim) ([]string, error) {
			if cl.Status.NodeName != "" {
				return []string{cl.Status.NodeName}, nil
			}
			return nil, nil
		},
		byWaiting: func(cl *v1alpha1.Claim) ([]string, error) {
			if cl.Status.NodeName == "" && cl.Status.Phase != v1alpha1.ClaimExpired {
				return []string{waiting}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("indexing claims: %w", err)
	}
	if err := instances.AddTypedIndexers(kilninformers.InstanceIndexers{
		byClaim: func(inst *v1alpha1.Instance) ([]string, error) {
			if inst.Spec.ClaimName != "" {
				return []string{inst.Namespace + "/" + inst.Spec.ClaimName}, nil
			}
			return nil, nil
		},
	}); err != nil {
		return fmt.Errorf("indexing instances for the %s controller: %w", ControllerName, err)
	}
	podIndexers := coreinformers.PodIndexers{
		podsByPin: func(p *corev1.Pod) ([]string, error) {
			if _, ok := p.Labels[v1alpha1.LabelClaim]; ok {
				if n := handover.PinnedNode(p); n != "" {
					return []string{n}, nil
				}
			}
			return nil, nil
		},
		podsByClaim: func(p *corev1.Pod) ([]string, error) {
			if name, ok := p.Labels[v1alpha1.LabelClaim]; ok {
				return []string{p.Namespace + "/" + name}, nil
			}
			return nil, nil
		},
	}
	if err := pool.IndexPodsByNode(pods); err != nil {
		return fmt.Errorf("the %s controller: %w", ControllerName, err)
	}
	if err := pods.AddTypedIndexers(podIndexers); err != nil {
		return fmt.Errorf("indexing pods for the %s controller: %w", ControllerName, err)
	}
	return nil
}

// watch registers the handlers, which only queue the Claims an event
// concerns.
func (c *Controller) watch(inf queue.Informers, claims cache.TypedSharedIndexInformer[*v1alpha1.Claim], instances cache.TypedSharedIndexInformer[*v1alpha1.Instance]) error {
	gpu, core := inf.Kiln.Gpu().V1alpha1(), inf.Kube.Core().V1()
	if err := queue.Watch(c.queue, claims, queue.Handler(c.claimChanged, c.claimDeleted)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, instances, queue.Handler(
		func(inst *v1alpha1.Instance) { c.enqueueClaimOf(inst) },
		func(d kilninformers.DeletedInstance) {
			if d.OptionalObj != nil {
				c.enqueueClaimOf(d.OptionalObj)
			}
		},
	)); err != nil {
		return err
	}
	// A Pod of a Claim wakes its Claim; any Pod that leaves a node may
	// make room for the waiting ones.
	if err := queue.Watch(c.queue, coreinformers.ToTypedPodInformer(core.Pods()).TypedInformer(), queue.Handler(c.podChanged, c.podDeleted)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, coreinformers.ToTypedNodeInformer(core.Nodes()).TypedInformer(), queue.Handler(
		func(n *corev1.Node) { c.enqueueIndexed(byNode, n.Name); c.enqueueWaiting() },
		func(d cache.DeletedObject[*corev1.Node]) { c.enqueueIndexed(byNode, d.GetObjectName().Name) },
	)); err != nil {
		return err
	}
	// The node agent reports which devices a holder got.
	if err := queue.Watch(c.queue, kilninformers.ToTypedNodeDevicesInformer(gpu.NodeDevices()).TypedInformer(), queue.Handler(
		func(nd *v1alpha1.NodeDevices) { c.enqueueIndexed(byNode, nd.Name) },
		func(d kilninformers.DeletedNodeDevices) { c.enqueueIndexed(byNode, d.GetName()) },
	)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, kilninformers.ToTypedInstanceTypeInformer(gpu.InstanceTypes()).TypedInformer(), queue.Handler(
		func(*v1alpha1.InstanceType) { c.enqueueWaiting() },
		func(kilninformers.DeletedInstanceType) { c.enqueueWaiting() },
	)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, kilninformers.ToTypedInstanceTypeInformer(gpu.InstanceTypes()).TypedInformer(), c.typeSpecHandler()); err != nil {
		return err
	}
	// A Budget that spends a key with onExhausted Stop releases the
	// namespace's placed Claims.
	if err := queue.Watch(c.queue, kilninformers.ToTypedBudgetInformer(gpu.Budgets()).TypedInformer(), queue.Handler(
		func(b *v1alpha1.Budget) {
			c.enqueueWaiting()
			if b.Spec.OnExhausted == v1alpha1.BudgetExhaustedStop {
				c.enqueueNamespace(b.Namespace)
			}
		},
		func(kilninformers.DeletedBudget) { c.enqueueWaiting() },
	)); err != nil {
		return err
	}
	return nil
}

// claimChanged marks the nodes whose use the Claim is part of for
// placements to read again, and queues it and the rest of its set.
func (c *Controller) claimChanged(cl *v1alpha1.Claim) {
	c.claimMoved(cl)
	c.queue.Add(cache.MetaObjectToName(cl))
	c.enqueueSet(cl)
}

// claimDeleted does the same for a deleted Claim, whose room may let a
// waiting one in.
func (c *Controller) claimDeleted(d kilninformers.DeletedClaim) {
	if d.OptionalObj != nil {
		c.claimMoved(d.OptionalObj)
	} else {
		c.uses.changedAll()
	}
	c.queue.Add(d.GetObjectName())
	c.enqueueWaiting()
}

// typeSpecHandler marks every node when an InstanceType's spec changes:
// it sets the asks of its Claims wherever they hold. Its status changes
// with every Pod bound in its pool, and changes no ask.
func (c *Controller) typeSpecHandler() cache.TypedResourceEventHandlerFuncs[*v1alpha1.InstanceType] {
	return cache.TypedResourceEventHandlerFuncs[*v1alpha1.InstanceType]{
		AddFunc: func(*v1alpha1.InstanceType) { c.uses.changedAll() },
		UpdateFunc: func(old, t *v1alpha1.InstanceType) {
			if old.Generation != t.Generation || old.UID != t.UID {
				c.uses.changedAll()
			}
		},
		DeleteFunc: func(kilninformers.DeletedInstanceType) { c.uses.changedAll() },
	}
}

// podChanged marks the nodes whose use the Pod is part of for placements
// to read again, and queues its Claim.
func (c *Controller) podChanged(p *corev1.Pod) {
	c.podMoved(p)
	c.enqueuePodClaim(p)
}

// podDeleted does the same for a deleted Pod. One deleted while the watch
// was down may come as an older copy, bound nowhere yet, or without one:
// then every node is read again.
func (c *Controller) podDeleted(d cache.DeletedObject[*corev1.Pod]) {
	if d.OptionalObj != nil {
		c.podMoved(d.OptionalObj)
		c.enqueuePodClaim(d.OptionalObj)
	}
	if d.OptionalObj == nil || d.FinalStateUnknown != nil {
		c.uses.changedAll()
	}
	c.enqueueWaiting()
}

// podMoved marks the node a Pod is bound to, and for a Pod of a Claim
// also the node it is pinned to and the one its Claim's status names: a
// holder decides where its Claim holds (placedNode).
func (c *Controller) podMoved(p *corev1.Pod) {
	name, ok := p.Labels[v1alpha1.LabelClaim]
	if !ok {
		c.uses.changed(p.Spec.NodeName)
		return
	}
	nodes := []string{p.Spec.NodeName, handover.PinnedNode(p)}
	if cl, err := c.claims.Claims(p.Namespace).Get(name); err == nil {
		nodes = append(nodes, cl.Status.NodeName)
	}
	c.uses.changed(nodes...)
}

// claimMoved marks the nodes a Claim can hold on or have Pods on: the
// node its status names, and those of its Pods.
func (c *Controller) claimMoved(cl *v1alpha1.Claim) {
	nodes := []string{cl.Status.NodeName}
	pods, err := c.podIdx.ByTypedIndex(podsByClaim, cl.Namespace+"/"+cl.Name)
	if err != nil {
		utilruntime.HandleError(err)
		c.uses.changedAll()
		return
	}
	for _, p := range pods {
		nodes = append(nodes, p.Spec.NodeName, handover.PinnedNode(p))
	}
	c.uses.changed(nodes...)
}

func (c *Controller) enqueueClaimOf(inst *v1alpha1.Instance) {
	if inst.Spec.ClaimName != "" {
		c.queue.Add(cache.ObjectName{Namespace: inst.Namespace, Name: inst.Spec.ClaimName})
	}
}

// enqueuePodClaim queues the Claim a Pod runs on (its holder, or the Pod of
// the Instance attached to it).
func (c *Controller) enqueuePodClaim(p *corev1.Pod) {
	if name, ok := p.Labels[v1alpha1.LabelClaim]; ok {
		c.queue.Add(cache.ObjectName{Namespace: p.Namespace, Name: name})
	}
}

// enqueueSet queues the other members of a Claim's set: they are placed
// together.
func (c *Controller) enqueueSet(cl *v1alpha1.Claim) {
	set, ok := cl.Labels[v1alpha1.ClaimSetLabel]
	if !ok {
		return
	}
	members, err := c.claims.Claims(cl.Namespace).List(labels.SelectorFromSet(labels.Set{v1alpha1.ClaimSetLabel: set}))
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, m := range members {
		if m.Name != cl.Name {
			c.queue.Add(cache.MetaObjectToName(m))
		}
	}
}

// enqueueNamespace queues every Claim of a namespace.
func (c *Controller) enqueueNamespace(ns string) {
	claims, err := c.claims.Claims(ns).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, cl := range claims {
		c.queue.Add(cache.MetaObjectToName(cl))
	}
}

func (c *Controller) enqueueWaiting() { c.enqueueIndexed(byWaiting, waiting) }

func (c *Controller) enqueueIndexed(index, value string) {
	queue.AddIndexed(c.queue, c.claimIdx, index, value)
}

// Run works the queue until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error { return c.queue.Run(ctx, workers) }

// holderOf returns the Pod named as the Claim's holder, split into the one
// the Claim controls and one in the way.
func (c *Controller) holderOf(cl *v1alpha1.Claim) (owned, foreign *corev1.Pod, err error) {
	pod, err := c.pods.Pods(cl.Namespace).Get(handover.HolderName(cl))
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if controlledBy(pod, cl) {
		return pod, nil, nil
	}
	return nil, pod, nil
}

// attachedInstance is the running Instance that uses the Claim: the one it
// is attached to if that still runs on it, else the oldest that asks. A
// stopped Instance, or one being deleted, has let go.
func (c *Controller) attachedInstance(cl *v1alpha1.Claim) (*v1alpha1.Instance, error) {
	items, err := c.instIdx.ByTypedIndex(byClaim, cl.Namespace+"/"+cl.Name)
	if err != nil {
		return nil, err
	}
	var running []*v1alpha1.Instance
	for _, inst := range items {
		if !inst.Spec.Stopped && inst.DeletionTimestamp == nil {
			if inst.Name == cl.Status.AttachedTo {
				return inst, nil
			}
			running = append(running, inst)
		}
	}
	if len(running) == 0 {
		return nil, nil
	}
	sort.Slice(running, func(i, j int) bool {
		a, b := running[i], running[j]
		if !a.CreationTimestamp.Equal(&b.CreationTimestamp) {
			return a.CreationTimestamp.Before(&b.CreationTimestamp)
		}
		return a.Name < b.Name
	})
	return running[0], nil
}

// placedNode is where the Claim holds or is being placed: its holder's
// node, else the node its status names while it holds.
func placedNode(cl *v1alpha1.Claim, holder *corev1.Pod) string {
	if holder != nil && holder.DeletionTimestamp == nil {
		if n := handover.PinnedNode(holder); n != "" {
			return n
		}
	}
	switch cl.Status.Phase {
	case v1alpha1.ClaimPending, v1alpha1.ClaimBound, v1alpha1.ClaimAttached, v1alpha1.ClaimLost:
		return cl.Status.NodeName
	}
	return ""
}

// assumedNode is where the Claim was placed moments ago if the informer
// does not show it yet; the caller holds no lock.
func (c *Controller) assumedNode(cl *v1alpha1.Claim) string {
	c.placing.Lock()
	defer c.placing.Unlock()
	if a, ok := c.assumed[cl.Namespace+"/"+cl.Name]; ok && a.hold.Claim.UID == cl.UID && c.now().Sub(a.at) < assumeTTL {
		return a.hold.Node
	}
	return ""
}

// forget drops an assumed placement; the caller holds no lock.
func (c *Controller) forget(cl *v1alpha1.Claim) {
	c.placing.Lock()
	defer c.placing.Unlock()
	delete(c.assumed, cl.Namespace+"/"+cl.Name)
}

// readNodeUse reads what node's Pods and Claims take of it from the
// informers. The Claims that can hold there are those placed there by
// status.nodeName and those with a Pod pinned there; each counts where
// its holder, else its status, places it.
func (c *Controller) readNodeUse(node string) (*NodeUse, error) {
	pods, err := c.podIdx.ByTypedIndex(pool.PodsByNode, node)
	if err != nil {
		return nil, err
	}
	candidates := map[string]*v1alpha1.Claim{}
	placed, err := c.claimIdx.ByTypedIndex(byNode, node)
	if err != nil {
		return nil, err
	}
	for _, cl := range placed {
		candidates[cl.Namespace+"/"+cl.Name] = cl
	}
	pinned, err := c.podIdx.ByTypedIndex(podsByPin, node)
	if err != nil {
		return nil, err
	}
	for _, p := range pinned {
		if cl, err := c.claims.Claims(p.Namespace).Get(p.Labels[v1alpha1.LabelClaim]); err == nil {
			candidates[cl.Namespace+"/"+cl.Name] = cl
		}
	}
	holds := map[string]corev1.ResourceList{}
	for key, cl := range candidates {
		if cl.Status.Phase == v1alpha1.ClaimLost {
			continue
		}
		holder, _, err := c.holderOf(cl)
		if err != nil {
			return nil, err
		}
		if placedNode(cl, holder) != node {
			continue
		}
		t, err := c.types.Get(cl.Spec.Type)
		if err != nil {
			continue
		}
		if ask, err := Ask(cl, t); err == nil {
			holds[key] = ask
		}
	}
	return newNodeUse(pods, holds), nil
}

// assumedHolds are the placements of moments ago that uses do not show
// yet, except those of skip; it forgets the ones uses show, and those
// gone, expired or placed elsewhere since. The caller holds c.placing.
func (c *Controller) assumedHolds(uses map[string]*NodeUse, skip map[string]bool) ([]Hold, error) {
	var out []Hold
	for key, a := range c.assumed {
		cl, err := c.claims.Claims(a.hold.Claim.Namespace).Get(a.hold.Claim.Name)
		switch {
		case apierrors.IsNotFound(err):
			delete(c.assumed, key)
			continue
		case err != nil:
			return nil, err
		}
		if cl.UID != a.hold.Claim.UID || c.now().Sub(a.at) >= assumeTTL {
			delete(c.assumed, key)
			continue
		}
		if skip[key] {
			continue
		}
		if u := uses[a.hold.Node]; u != nil && u.holds(key) {
			delete(c.assumed, key)
			continue
		}
		holder, _, err := c.holderOf(cl)
		if err != nil {
			return nil, err
		}
		if node := placedNode(cl, holder); node != "" && node != a.hold.Node {
			delete(c.assumed, key)
			continue
		}
		out = append(out, a.hold)
	}
	return out, nil
}

// overBudget names a Budget of the namespace that is over a limit the
// Claim is charged to, or that stops what runs under a spent
// accelerator-hours key of its type; "" if none is.
func (c *Controller) overBudget(cl *v1alpha1.Claim) (string, error) {
	budgets, err := c.budgets.Budgets(cl.Namespace).List(labels.Everything())
	if err != nil {
		return "", err
	}
	keys := []v1alpha1.BudgetResourceName{v1alpha1.BudgetAccelerators, v1alpha1.BudgetAcceleratorMemory,
		v1alpha1.BudgetResourceName(v1alpha1.BudgetAcceleratorsPerTypePrefix + cl.Spec.Type)}
	slices.SortFunc(budgets, func(a, b *v1alpha1.Budget) int { return strings.Compare(a.Name, b.Name) })
	for _, b := range budgets {
		for _, k := range keys {
			hard, ok := b.Spec.Hard[k]
			used := b.Status.Used[k]
			if ok && used.Cmp(hard) > 0 {
				return fmt.Sprintf("budget %s is over its limit: %s used %s > hard %s; raise it, or release other Instances or Claims",
					b.Name, k, used.String(), hard.String()), nil
			}
		}
	}
	if b, k := ledger.Stopping(budgets, cl.Spec.Type); b != nil {
		return ledger.Spent(b, k, c.now()) + "; the Claim waits until then", nil
	}
	return "", nil
}

// waitingCondition sets or clears the Waiting condition.
func waitingCondition(st *v1alpha1.ClaimStatus, gen int64, reason, message string, now metav1.Time) {
	if reason == "" {
		meta.RemoveStatusCondition(&st.Conditions, v1alpha1.ClaimConditionWaiting)
		return
	}
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{
		Type: v1alpha1.ClaimConditionWaiting, Status: metav1.ConditionTrue,
		Reason: reason, Message: message, ObservedGeneration: gen, LastTransitionTime: now,
	})
}
