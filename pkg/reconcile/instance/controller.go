package instance

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/labels"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// ControllerName names the controller in events, logs and work-queue metrics.
const ControllerName = "instance"

const (
	// Finalizer keeps a deleted Instance visible as Deleting until its
	// Pod is gone, and makes sure the Pod goes even if garbage collection
	// is slow or off.
	Finalizer = v1alpha1.InstanceFinalizer

	// byType and byNode index Instances by spec.type and spec.nodeName, so
	// a change of an InstanceType or a Node wakes only its Instances.
	byType  = "spec.type"
	byNode  = "spec.nodeName"
	byClaim = "spec.claimName"
	// byRunsOn indexes Instances by the node their Pod runs on, so a
	// node's NodeDevices wakes the Instances there.
	byRunsOn = "status.nodeName"
)

// Options tune the controller.
type Options struct {
	Render RenderOptions
	// AdmissionBackoff is the wait before the first rebuild of a Pod the
	// kubelet refused at admission; each further rebuild waits twice as
	// long.
	AdmissionBackoff time.Duration
	// AdmissionWindow bounds the rebuilds: once the next one would start
	// later than this after the first refusal, the Pod is left failed.
	AdmissionWindow time.Duration
}

// Controller makes each Instance's Pod and Service match its spec and
// reports their state in the Instance's status.
type Controller struct {
	kube kubernetes.Interface
	kiln versioned.Interface

	instances listers.InstanceLister
	types     listers.InstanceTypeLister
	claims    listers.ClaimLister
	pods      corelisters.PodLister
	services  corelisters.ServiceLister
	nodes     corelisters.NodeLister
	devices   listers.NodeDevicesLister
	budgets   listers.BudgetLister
	indexer   cache.TypedIndexer[*v1alpha1.Instance]

	queue    *queue.Queue[cache.ObjectName]
	recorder record.EventRecorder
	opts     Options
	now      func() time.Time

	mu sync.Mutex
	// failures remembers, per Instance, the kubelet admission refusals of
	// its Pods. It is memory only: a restarted controller grants a new
	// window, which errs on the side of trying again.
	failures map[types.UID]*admissionFailures

	// made holds the Pods created that the informer has not shown yet.
	made madePods
}

type admissionFailures struct {
	first    time.Time
	attempts int
	podUID   types.UID
	failedAt time.Time
	gaveUp   bool
}

// NewController wires the controller to its informers. It adds indexers to
// the Instance informer, so it must be called before the informers start.
func NewController(kube kubernetes.Interface, kiln versioned.Interface, inf queue.Informers, recorder record.EventRecorder, opts Options) (*Controller, error) {
	if opts.AdmissionBackoff <= 0 {
		opts.AdmissionBackoff = 2 * time.Second
	}
	if opts.AdmissionWindow <= 0 {
		opts.AdmissionWindow = 5 * time.Minute
	}
	gpu, core := inf.Kiln.Gpu().V1alpha1(), inf.Kube.Core().V1()
	instanceInformer := kilninformers.ToTypedInstanceInformer(gpu.Instances()).TypedInformer()
	c := &Controller{
		kube:      kube,
		kiln:      kiln,
		instances: gpu.Instances().Lister(),
		types:     gpu.InstanceTypes().Lister(),
		claims:    gpu.Claims().Lister(),
		pods:      core.Pods().Lister(),
		services:  core.Services().Lister(),
		nodes:     core.Nodes().Lister(),
		devices:   gpu.NodeDevices().Lister(),
		budgets:   gpu.Budgets().Lister(),
		indexer:   instanceInformer.GetTypedIndexer(),
		recorder:  recorder,
		opts:      opts,
		now:       time.Now,
		failures:  map[types.UID]*admissionFailures{},
	}
	// One tenant's thousands of Instances must not hold back another's.
	c.queue = queue.NewFair(ControllerName, "instance", c.sync, queue.ByNamespace)
	if err := addIndexers(instanceInformer); err != nil {
		return nil, err
	}
	if err := c.watch(inf, instanceInformer); err != nil {
		return nil, err
	}
	return c, nil
}

// budgetChanged looks at the Instances of the namespace of a Budget that
// stops them once spent, when it is.
func (c *Controller) budgetChanged(b *v1alpha1.Budget) {
	if b.Spec.OnExhausted != v1alpha1.BudgetExhaustedStop || !meta.IsStatusConditionTrue(b.Status.Conditions, v1alpha1.BudgetConditionExhausted) {
		return
	}
	insts, err := c.instances.Instances(b.Namespace).List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, inst := range insts {
		if !inst.Spec.Stopped {
			c.queue.Add(cache.MetaObjectToName(inst))
		}
	}
}

// typeChanged reports whether an InstanceType update can change what its
// Instances' syncs do: its spec, metadata or deletion. Its status, which
// the InstanceType loop rewrites as capacity moves with every Pod bound
// in the pool, does not: queueing every Instance of the type for each of
// those writes cost 1.8 million syncs for 1,700 Instances in bench-scale.
func typeChanged(old, cur *v1alpha1.InstanceType) bool {
	return !apiequality.Semantic.DeepEqual(old.Spec, cur.Spec) ||
		(old.DeletionTimestamp == nil) != (cur.DeletionTimestamp == nil) ||
		!maps.Equal(old.Labels, cur.Labels) || !maps.Equal(old.Annotations, cur.Annotations) ||
		!slices.Equal(old.Finalizers, cur.Finalizers)
}

// addIndexers indexes Instances by type, pinned node, Claim and the node
// their Pod runs on.
func addIndexers(instances cache.TypedSharedIndexInformer[*v1alpha1.Instance]) error {
	err := instances.AddTypedIndexers(kilninformers.InstanceIndexers{
		byType: func(inst *v1alpha1.Instance) ([]string, error) { return []string{inst.Spec.Type}, nil },
		byNode: func(inst *v1alpha1.Instance) ([]string, error) {
			if n := inst.Spec.NodeName; n != "" {
				return []string{n}, nil
			}
			return nil, nil
		},
		byClaim: func(inst *v1alpha1.Instance) ([]string, error) {
			if n := inst.Spec.ClaimName; n != "" {
				return []string{inst.Namespace + "/" + n}, nil
			}
			return nil, nil
		},
		byRunsOn: func(inst *v1alpha1.Instance) ([]string, error) {
			if n := inst.Status.NodeName; n != "" {
				return []string{n}, nil
			}
			return nil, nil
		},
	})
	if err != nil {
		return fmt.Errorf("indexing instances for the %s controller: %w", ControllerName, err)
	}
	return nil
}

// watch registers the handlers, which only queue the Instances an event
// concerns.
func (c *Controller) watch(inf queue.Informers, instances cache.TypedSharedIndexInformer[*v1alpha1.Instance]) error {
	gpu, core := inf.Kiln.Gpu().V1alpha1(), inf.Kube.Core().V1()
	if err := queue.Watch(c.queue, instances, queue.Handler(
		func(inst *v1alpha1.Instance) { c.queue.Add(cache.MetaObjectToName(inst)) },
		func(d kilninformers.DeletedInstance) { c.queue.Add(d.GetObjectName()) },
	)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, coreinformers.ToTypedPodInformer(core.Pods()).TypedInformer(), c.podHandler()); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, coreinformers.ToTypedServiceInformer(core.Services()).TypedInformer(), controlledHandler[*corev1.Service](c)); err != nil {
		return err
	}
	if err := queue.Watch(c.queue, kilninformers.ToTypedInstanceTypeInformer(gpu.InstanceTypes()).TypedInformer(), kilninformers.InstanceTypeHandlerFuncs{
		AddFunc: func(t *v1alpha1.InstanceType) { c.enqueueIndexed(byType, t.Name) },
		UpdateFunc: func(old, t *v1alpha1.InstanceType) {
			if typeChanged(old, t) {
				c.enqueueIndexed(byType, t.Name)
			}
		},
		DeleteFunc: func(d kilninformers.DeletedInstanceType) { c.enqueueIndexed(byType, d.GetName()) },
	}); err != nil {
		return err
	}
	// Instances on a Claim follow it: they run once it is attached to them.
	if err := queue.Watch(c.queue, kilninformers.ToTypedClaimInformer(gpu.Claims()).TypedInformer(), queue.Handler(
		func(cl *v1alpha1.Claim) { c.enqueueIndexed(byClaim, cl.Namespace+"/"+cl.Name) },
		func(d kilninformers.DeletedClaim) { c.enqueueIndexed(byClaim, d.GetObjectName().String()) },
	)); err != nil {
		return err
	}
	// A Budget that spends its card-hours stops what runs on them.
	if err := queue.Watch(c.queue, kilninformers.ToTypedBudgetInformer(gpu.Budgets()).TypedInformer(), kilninformers.BudgetHandlerFuncs{
		AddFunc:    c.budgetChanged,
		UpdateFunc: func(_, b *v1alpha1.Budget) { c.budgetChanged(b) },
	}); err != nil {
		return err
	}
	// The node agent reports which devices each Pod got.
	if err := queue.Watch(c.queue, kilninformers.ToTypedNodeDevicesInformer(gpu.NodeDevices()).TypedInformer(), queue.Handler(
		func(nd *v1alpha1.NodeDevices) { c.enqueueIndexed(byRunsOn, nd.Name) },
		func(d kilninformers.DeletedNodeDevices) { c.enqueueIndexed(byRunsOn, d.GetName()) },
	)); err != nil {
		return err
	}
	// Pinned Instances wait for their Node to appear; those running on a
	// Node that goes say so.
	if err := queue.Watch(c.queue, coreinformers.ToTypedNodeInformer(core.Nodes()).TypedInformer(), coreinformers.NodeHandlerFuncs{
		AddFunc:    func(n *corev1.Node) { c.enqueueIndexed(byNode, n.Name) },
		DeleteFunc: func(d coreinformers.DeletedNode) { c.enqueueIndexed(byRunsOn, d.GetName()) },
	}); err != nil {
		return err
	}
	return nil
}

// controlledHandler queues, for Pods or Services, only the Instances they
// concern.
func controlledHandler[O queue.Object](c *Controller) cache.TypedResourceEventHandlerFuncs[O] {
	return queue.Handler(func(o O) { c.enqueueController(o) }, func(d cache.DeletedObject[O]) {
		var unknown O
		if d.OptionalObj == unknown {
			c.handleTombstone(d.GetObjectName())
			return
		}
		c.handleDeleted(d.OptionalObj)
	})
}

// podHandler is controlledHandler for Pods, which also ends what made
// remembers of a name once the informer has an event for it: the cache is
// updated before any handler hears of the event.
func (c *Controller) podHandler() cache.TypedResourceEventHandlerFuncs[*corev1.Pod] {
	h := controlledHandler[*corev1.Pod](c)
	add, update, del := h.AddFunc, h.UpdateFunc, h.DeleteFunc
	h.AddFunc = func(p *corev1.Pod) {
		c.made.seen(cache.MetaObjectToName(p))
		add(p)
	}
	h.UpdateFunc = func(old, p *corev1.Pod) {
		c.made.seen(cache.MetaObjectToName(p))
		update(old, p)
	}
	h.DeleteFunc = func(d cache.DeletedObject[*corev1.Pod]) {
		c.made.seen(d.GetObjectName())
		del(d)
	}
	return h
}

// enqueueController queues the Instance that controls obj (a Pod or
// Service), as sample-controller's handleObject does; objects no Instance
// controls are none of this loop's business.
func (c *Controller) enqueueController(obj metav1.Object) {
	if ref := instanceControllerOf(obj); ref != nil {
		c.queue.Add(cache.ObjectName{Namespace: obj.GetNamespace(), Name: ref.Name})
	}
}

// handleDeleted queues, for a deleted Pod or Service, the Instance that
// controlled it and a same-named Instance it stood in the way of (Ready
// reason NameConflict), which can now make its own.
func (c *Controller) handleDeleted(obj metav1.Object) {
	c.enqueueController(obj)
	name := cache.MetaObjectToName(obj)
	if inst, err := c.instances.Instances(name.Namespace).Get(name.Name); err == nil && readyReason(inst) == ReasonNameConflict {
		c.queue.Add(name)
	}
	// A Claim's holder gone: the Instance on the Claim, whose Pod waits
	// behind the hand-over gate for it, goes ahead at once.
	if ref := metav1.GetControllerOf(obj); ref != nil && ref.Kind == "Claim" && ref.APIVersion == v1alpha1.SchemeGroupVersion.String() {
		if cl, ok := obj.GetLabels()[v1alpha1.LabelClaim]; ok {
			c.enqueueIndexed(byClaim, obj.GetNamespace()+"/"+cl)
		}
	}
}

// handleTombstone handles a delete seen only as a key: the object's owner
// is unknown, but an Instance cares about a Pod or Service only if it has
// the Instance's name.
func (c *Controller) handleTombstone(name cache.ObjectName) {
	if _, err := c.instances.Instances(name.Namespace).Get(name.Name); err == nil {
		c.queue.Add(name)
	}
}

// enqueueIndexed queues the Instances whose index value is name (an
// InstanceType's or a Node's).
func (c *Controller) enqueueIndexed(index, name string) {
	queue.AddIndexed(c.queue, c.indexer, index, name)
}

// HasSynced says whether every informer the controller reads has synced
// and its initial list has reached the controller's handlers.
func (c *Controller) HasSynced() bool { return c.queue.HasSynced() }

// Run works the queue with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	return c.queue.Run(ctx, workers)
}

// podOf returns the Pod named after inst, split into the one it owns and
// one that is in the way.
func (c *Controller) podOf(inst *v1alpha1.Instance) (owned, foreign *corev1.Pod, err error) {
	pod, err := c.pods.Pods(inst.Namespace).Get(inst.Name)
	if apierrors.IsNotFound(err) {
		return c.made.get(cache.MetaObjectToName(inst), inst.UID, c.now()), nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if ownedBy(pod, inst) {
		return pod, nil, nil
	}
	return nil, pod, nil
}

func (c *Controller) serviceOf(inst *v1alpha1.Instance) (owned, foreign *corev1.Service, err error) {
	svc, err := c.services.Services(inst.Namespace).Get(inst.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
	}
	if err != nil {
		return nil, nil, err
	}
	if ownedBy(svc, inst) {
		return svc, nil, nil
	}
	return nil, svc, nil
}
