package instancetype

import (
	"context"
	"fmt"
	"maps"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/sets"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/pool"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// ControllerName names the controller in logs and work-queue metrics.
const ControllerName = "instancetype"

// FieldManager owns the status fields this loop writes.
const FieldManager = "kiln-instancetype-controller"

// Controller keeps each InstanceType's status (phase, pool capacity, the
// Available condition) in line with its Nodes and the Pods bound to them.
// The queue holds InstanceType names.
type Controller struct {
	kiln versioned.Interface

	types   listers.InstanceTypeLister
	nodes   corelisters.NodeLister
	devices listers.NodeDevicesLister
	pods    cache.TypedIndexer[*corev1.Pod]

	queue *queue.Queue[string]
	now   func() time.Time

	// mu guards stale and tallies. A type's pool count is kept between
	// its syncs, and an event marks the nodes it changed stale for the
	// types whose pool holds them: a sync recounts only those, so a Pod
	// event costs its node's Pods, not the pool's. A type is counted
	// whole when it has no tally yet, or a new spec.
	mu      sync.Mutex
	stale   map[string]sets.Set[string]
	tallies map[string]*typeTally
	// forgotten counts the calls of forget, so that a sync that was
	// counting meanwhile does not put back the tally it was told to drop.
	forgotten uint64
}

// typeTally is the count of one InstanceType's pool, for the spec it was
// made from. Only the worker syncing the type touches it.
type typeTally struct {
	*tally
	uid        types.UID
	generation int64
}

// NewController wires the controller to its informers. It adds the
// spec.nodeName index to the Pod informer; an index of that name already
// there (another loop sharing the informer) is taken to index the same and
// used as it is. Indexers and handlers may be added before or after the
// informers start.
func NewController(kiln versioned.Interface, inf queue.Informers) (*Controller, error) {
	gpu, core := inf.Kiln.Gpu().V1alpha1(), inf.Kube.Core().V1()
	types, nodes, pods, nodeDevices := gpu.InstanceTypes(), core.Nodes(), core.Pods(), gpu.NodeDevices()
	podInformer := coreinformers.ToTypedPodInformer(pods).TypedInformer()
	c := &Controller{
		kiln:    kiln,
		types:   types.Lister(),
		nodes:   nodes.Lister(),
		devices: nodeDevices.Lister(),
		pods:    podInformer.GetTypedIndexer(),
		now:     time.Now,
		stale:   map[string]sets.Set[string]{},
		tallies: map[string]*typeTally{},
	}
	c.queue = queue.New(ControllerName, "instancetype", func(ctx context.Context, name string) (time.Duration, error) {
		return 0, c.sync(ctx, name)
	})

	if err := pool.IndexPodsByNode(podInformer); err != nil {
		return nil, fmt.Errorf("the %s controller: %w", ControllerName, err)
	}
	if err := queue.Watch(c.queue, kilninformers.ToTypedInstanceTypeInformer(types).TypedInformer(), kilninformers.InstanceTypeHandlerFuncs{
		AddFunc:    func(t *v1alpha1.InstanceType) { c.queue.Add(t.Name) },
		UpdateFunc: func(_, t *v1alpha1.InstanceType) { c.queue.Add(t.Name) },
		DeleteFunc: func(d kilninformers.DeletedInstanceType) {
			c.forget(d.GetName())
			c.queue.Add(d.GetName())
		},
	}); err != nil {
		return nil, err
	}
	if err := queue.Watch(c.queue, coreinformers.ToTypedNodeInformer(nodes).TypedInformer(), coreinformers.NodeHandlerFuncs{
		AddFunc: func(n *corev1.Node) { c.enqueuePoolsOf(n) },
		UpdateFunc: func(old, n *corev1.Node) {
			if nodeChanged(old, n) {
				c.enqueuePoolsOf(old, n)
			}
		},
		DeleteFunc: c.nodeDeleted,
	}); err != nil {
		return nil, err
	}
	// A device failing or healing changes what its node's pools have.
	if err := queue.Watch(c.queue, kilninformers.ToTypedNodeDevicesInformer(nodeDevices).TypedInformer(), queue.Handler(
		func(nd *v1alpha1.NodeDevices) {
			if n, err := c.nodes.Get(nd.Name); err == nil {
				c.enqueuePoolsOf(n)
			}
		},
		func(d kilninformers.DeletedNodeDevices) {
			if n, err := c.nodes.Get(d.GetName()); err == nil {
				c.enqueuePoolsOf(n)
			}
		},
	)); err != nil {
		return nil, err
	}
	if err := queue.Watch(c.queue, podInformer, coreinformers.PodHandlerFuncs{
		AddFunc: func(p *corev1.Pod) { c.enqueuePoolsUsedBy(p) },
		UpdateFunc: func(old, p *corev1.Pod) {
			if podChanged(old, p) {
				c.enqueuePoolsUsedBy(old, p)
			}
		},
		DeleteFunc: c.podDeleted,
	}); err != nil {
		return nil, err
	}
	return c, nil
}

// nodeChanged reports whether an update can change any pool's capacity:
// labels (membership), allocatable, readiness, cordon or taints. Heartbeats
// and image lists do not.
func nodeChanged(old, cur *corev1.Node) bool {
	return !maps.Equal(old.Labels, cur.Labels) ||
		old.Spec.Unschedulable != cur.Spec.Unschedulable ||
		pool.NodeReady(old) != pool.NodeReady(cur) ||
		!apiequality.Semantic.DeepEqual(old.Status.Allocatable, cur.Status.Allocatable) ||
		!apiequality.Semantic.DeepEqual(old.Spec.Taints, cur.Spec.Taints)
}

// podChanged reports whether an update can change what a Pod takes from a
// node: binding, finishing, moving, or (in-place resize) its requests.
// Phase changes between Pending and Running do not.
func podChanged(old, cur *corev1.Pod) bool {
	if pool.Occupies(old) != pool.Occupies(cur) || old.Spec.NodeName != cur.Spec.NodeName {
		return true
	}
	return pool.Occupies(cur) && !apiequality.Semantic.DeepEqual(pool.PodRequests(old), pool.PodRequests(cur))
}

// nodeDeleted queues the pools of a deleted node. A tombstone may come
// without the node; then its labels, and so its pools, are unknown.
func (c *Controller) nodeDeleted(d coreinformers.DeletedNode) {
	if d.OptionalObj == nil {
		c.enqueueAll()
		return
	}
	c.enqueuePoolsOf(d.OptionalObj)
}

// podDeleted queues the pools a deleted Pod took from, all of them when
// the tombstone comes without the Pod.
func (c *Controller) podDeleted(d coreinformers.DeletedPod) {
	if d.OptionalObj == nil {
		c.enqueueAll()
		return
	}
	c.enqueuePoolsUsedBy(d.OptionalObj)
}

// enqueuePoolsOf queues the types whose pool holds any of nodes.
func (c *Controller) enqueuePoolsOf(nodes ...*corev1.Node) {
	types, err := c.types.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, t := range types {
		var in []string
		for _, n := range nodes {
			if pool.InPool(t, n) {
				in = append(in, n.Name)
			}
		}
		if len(in) > 0 {
			c.markStale(t.Name, in...)
			c.queue.Add(t.Name)
		}
	}
}

// enqueuePoolsUsedBy queues, for each Pod that occupies a node, the types
// whose pool holds that node and whose counted resources the Pod asks for.
// A Pod whose node is not known yet is skipped: the node's add event
// queues its pools, and their sync reads the Pod from the index.
func (c *Controller) enqueuePoolsUsedBy(pods ...*corev1.Pod) {
	types, err := c.types.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, p := range pods {
		if !pool.Occupies(p) {
			continue
		}
		node, err := c.nodes.Get(p.Spec.NodeName)
		if err != nil {
			continue
		}
		requests := pool.PodRequests(p)
		for _, t := range types {
			if pool.InPool(t, node) && usesCounted(t, requests) {
				c.markStale(t.Name, node.Name)
				c.queue.Add(t.Name)
			}
		}
	}
}

func (c *Controller) enqueueAll() {
	types, err := c.types.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, t := range types {
		c.forget(t.Name)
		c.queue.Add(t.Name)
	}
}

// markStale marks nodes to be counted again at the type's next sync.
func (c *Controller) markStale(typ string, nodes ...string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.stale[typ] == nil {
		c.stale[typ] = sets.New[string]()
	}
	c.stale[typ].Insert(nodes...)
}

// forget drops the type's tally, so that its next sync counts it whole:
// after a tombstone that did not say what changed, or once it is gone.
func (c *Controller) forget(typ string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	delete(c.tallies, typ)
	delete(c.stale, typ)
	c.forgotten++
}

// HasSynced reports whether the informers have synced and every event of
// their initial lists has reached the controller's handlers.
func (c *Controller) HasSynced() bool { return c.queue.HasSynced() }

// Run waits for the caches, then runs workers until ctx is done, and
// returns once they have stopped.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return c.queue.Run(ctx, workers)
}

// sync writes the status of one InstanceType, computed from the listers,
// when it differs from the stored one.
func (c *Controller) sync(ctx context.Context, name string) error {
	logger := klog.FromContext(ctx).WithValues("instancetype", name)
	t, err := c.types.Get(name)
	if apierrors.IsNotFound(err) {
		logger.V(4).Info("InstanceType is gone")
		return nil
	}
	if err != nil {
		return err
	}

	capacity, err := c.capacity(t)
	if err != nil {
		return err
	}
	status := statusOf(t, capacity, metav1.NewTime(c.now()))
	if apiequality.Semantic.DeepEqual(t.Status, status) {
		logger.V(4).Info("Status is up to date")
		return nil
	}

	updated := t.DeepCopy()
	updated.Status = status
	if _, err := c.kiln.GpuV1alpha1().InstanceTypes().UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
		if apierrors.IsNotFound(err) {
			return nil
		}
		return fmt.Errorf("updating status of instancetype %s: %w", name, err)
	}
	logger.V(2).Info("Updated status", "phase", status.Phase,
		"nodes", status.Capacity.Nodes, "cards", status.Capacity.Cards, "freeCards", status.Capacity.FreeCards)
	return nil
}

// capacity counts t's pool: the nodes marked stale since its last sync, or
// the whole pool when there is no tally for its spec. The stale marks are
// taken before the caches are read, so an event after that marks its node
// again for the next sync.
func (c *Controller) capacity(t *v1alpha1.InstanceType) (v1alpha1.InstanceTypeCapacity, error) {
	c.mu.Lock()
	tt, stale, forgotten := c.tallies[t.Name], c.stale[t.Name], c.forgotten
	delete(c.stale, t.Name)
	c.mu.Unlock()

	var err error
	if tt == nil || tt.uid != t.UID || tt.generation != t.Generation {
		tt = &typeTally{tally: newTally(countedResources(t)), uid: t.UID, generation: t.Generation}
		err = c.countAll(t, tt.tally)
	} else {
		for node := range stale {
			if err = c.countNode(t, tt.tally, node); err != nil {
				break
			}
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		// Counted whole next time.
		delete(c.tallies, t.Name)
		return v1alpha1.InstanceTypeCapacity{}, err
	}
	if c.forgotten == forgotten {
		c.tallies[t.Name] = tt
	} else {
		// A tombstone came while this counted: the count may miss what
		// it deleted. It is still the best one now, and the next sync,
		// which the tombstone queued, counts the pool whole.
		delete(c.tallies, t.Name)
	}
	return tt.capacity(t), nil
}

// countAll counts every node of t's pool into tl.
func (c *Controller) countAll(t *v1alpha1.InstanceType, tl *tally) error {
	nodes, err := pool.Nodes(c.nodes, t)
	if err != nil {
		return err
	}
	for _, n := range HealthyAllocatable(nodes, c.nodeDevices) {
		pods, err := c.pods.ByTypedIndex(pool.PodsByNode, n.Name)
		if err != nil {
			return fmt.Errorf("listing pods on node %s: %w", n.Name, err)
		}
		nc, counted := countNode(t, tl.names, n, pods)
		tl.set(n.Name, nc, counted)
	}
	return nil
}

// countNode counts one node of t's pool into tl again; a node gone from
// the cache gives nothing.
func (c *Controller) countNode(t *v1alpha1.InstanceType, tl *tally, name string) error {
	n, err := c.nodes.Get(name)
	if apierrors.IsNotFound(err) {
		tl.set(name, nodeCount{}, false)
		return nil
	}
	if err != nil {
		return err
	}
	pods, err := c.pods.ByTypedIndex(pool.PodsByNode, name)
	if err != nil {
		return fmt.Errorf("listing pods on node %s: %w", name, err)
	}
	nc, counted := countNode(t, tl.names, HealthyAllocatable([]*corev1.Node{n}, c.nodeDevices)[0], pods)
	tl.set(name, nc, counted)
	return nil
}

func (c *Controller) nodeDevices(node string) *v1alpha1.NodeDevices {
	nd, _ := c.devices.Get(node)
	return nd
}
