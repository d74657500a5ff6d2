package instance

import (
	"context"
	"fmt"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// ControllerName names the controller in events, logs and work-queue metrics.
const ControllerName = "instance"

const (
	// Finalizer keeps a deleted Instance visible as Deleting until its
	// Pod is gone, and makes sure the Pod goes even if garbage collection
	// is slow or off.
	Finalizer = "gpu.kiln.dev/instance-controller"

	// byType and byNode index Instances by spec.type and spec.nodeName, so
	// a change of an InstanceType or a Node wakes only its Instances.
	byType = "spec.type"
	byNode = "spec.nodeName"
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
	pods      corelisters.PodLister
	services  corelisters.ServiceLister
	nodes     corelisters.NodeLister
	indexer   cache.Indexer
	synced    []cache.InformerSynced

	queue    workqueue.TypedRateLimitingInterface[cache.ObjectName]
	recorder record.EventRecorder
	opts     Options
	now      func() time.Time

	mu sync.Mutex
	// failures remembers, per Instance, the kubelet admission refusals of
	// its Pods. It is memory only: a restarted controller grants a new
	// window, which errs on the side of trying again.
	failures map[types.UID]*admissionFailures
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
func NewController(
	kube kubernetes.Interface,
	kiln versioned.Interface,
	instances kilninformers.InstanceInformer,
	instanceTypes kilninformers.InstanceTypeInformer,
	pods coreinformers.PodInformer,
	services coreinformers.ServiceInformer,
	nodes coreinformers.NodeInformer,
	recorder record.EventRecorder,
	opts Options,
) (*Controller, error) {
	if opts.AdmissionBackoff <= 0 {
		opts.AdmissionBackoff = 2 * time.Second
	}
	if opts.AdmissionWindow <= 0 {
		opts.AdmissionWindow = 5 * time.Minute
	}
	c := &Controller{
		kube:      kube,
		kiln:      kiln,
		instances: instances.Lister(),
		types:     instanceTypes.Lister(),
		pods:      pods.Lister(),
		services:  services.Lister(),
		nodes:     nodes.Lister(),
		indexer:   instances.Informer().GetIndexer(),
		synced: []cache.InformerSynced{
			instances.Informer().HasSynced, instanceTypes.Informer().HasSynced,
			pods.Informer().HasSynced, services.Informer().HasSynced, nodes.Informer().HasSynced,
		},
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[cache.ObjectName](),
			workqueue.TypedRateLimitingQueueConfig[cache.ObjectName]{Name: ControllerName}),
		recorder: recorder,
		opts:     opts,
		now:      time.Now,
		failures: map[types.UID]*admissionFailures{},
	}
	err := instances.Informer().AddIndexers(cache.Indexers{
		byType: func(obj any) ([]string, error) { return []string{obj.(*v1alpha1.Instance).Spec.Type}, nil },
		byNode: func(obj any) ([]string, error) {
			if n := obj.(*v1alpha1.Instance).Spec.NodeName; n != "" {
				return []string{n}, nil
			}
			return nil, nil
		},
	})
	if err != nil {
		return nil, err
	}

	handlers := []struct {
		informer cache.SharedIndexInformer
		handler  cache.ResourceEventHandler
	}{
		{instances.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			DeleteFunc: c.enqueue,
		}},
		// A Pod or Service is named after its Instance: its key is the
		// Instance's, whether the Instance owns it or it is in the way.
		{pods.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			DeleteFunc: c.enqueue,
		}},
		{services.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    c.enqueue,
			UpdateFunc: func(_, obj any) { c.enqueue(obj) },
			DeleteFunc: c.enqueue,
		}},
		{instanceTypes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { c.enqueueIndexed(byType, obj) },
			UpdateFunc: func(_, obj any) { c.enqueueIndexed(byType, obj) },
			DeleteFunc: func(obj any) { c.enqueueIndexed(byType, obj) },
		}},
		// Pinned Instances wait for their Node to appear.
		{nodes.Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc: func(obj any) { c.enqueueIndexed(byNode, obj) },
		}},
	}
	for _, h := range handlers {
		if _, err := h.informer.AddEventHandler(h.handler); err != nil {
			return nil, err
		}
	}
	return c, nil
}

func (c *Controller) enqueue(obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	c.queue.Add(key)
}

// enqueueIndexed queues the Instances whose index value is the name of
// obj (an InstanceType or a Node).
func (c *Controller) enqueueIndexed(index string, obj any) {
	key, err := cache.DeletionHandlingObjectToName(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	items, err := c.indexer.ByIndex(index, key.Name)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, it := range items {
		c.enqueue(it)
	}
}

// HasSynced says whether every informer the controller reads has synced.
func (c *Controller) HasSynced() bool {
	for _, s := range c.synced {
		if !s() {
			return false
		}
	}
	return true
}

// Run works the queue with the given number of workers until ctx is done.
func (c *Controller) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer c.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("controller", ControllerName)
	ctx = klog.NewContext(ctx, logger)
	logger.Info("Starting controller", "workers", workers)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, c.synced...) {
		return fmt.Errorf("instance controller: caches did not sync")
	}
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, c.worker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Stopping controller")
	c.queue.ShutDown()
	wg.Wait()
	return nil
}

func (c *Controller) worker(ctx context.Context) {
	for c.next(ctx) {
	}
}

func (c *Controller) next(ctx context.Context) bool {
	key, shutdown := c.queue.Get()
	if shutdown {
		return false
	}
	defer c.queue.Done(key)
	logger := klog.FromContext(ctx).WithValues("instance", key.String())
	after, err := c.sync(klog.NewContext(ctx, logger), key)
	switch {
	case err == nil:
		c.queue.Forget(key)
		if after > 0 {
			c.queue.AddAfter(key, after)
		}
	case apierrors.IsConflict(err):
		// Someone wrote in between; read again and redo.
		logger.V(4).Info("Conflict, requeueing", "err", err)
		c.queue.AddRateLimited(key)
	default:
		logger.Error(err, "Sync failed, requeueing")
		c.queue.AddRateLimited(key)
	}
	return true
}

// podOf returns the Pod named after inst, split into the one it owns and
// one that is in the way.
func (c *Controller) podOf(inst *v1alpha1.Instance) (owned, foreign *corev1.Pod, err error) {
	pod, err := c.pods.Pods(inst.Namespace).Get(inst.Name)
	if apierrors.IsNotFound(err) {
		return nil, nil, nil
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
