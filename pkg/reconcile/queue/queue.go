// Package queue is the work-queue runner every Kiln loop is built on, in
// the shape of sample-controller: a typed rate-limited queue of keys, event
// handlers that only add keys, and workers that call the loop's sync for
// each key. A loop supplies its sync and its handlers; the waiting for
// caches, the workers, crash handling, forgetting and requeueing are here,
// once.
package queue

import (
	"context"
	"fmt"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
)

// SyncFunc brings the world in line for one key. A nil error forgets the
// key's failures; a positive requeueAfter looks at the key again after
// that long even if no event comes. An error requeues the key with the
// queue's backoff.
type SyncFunc[K comparable] func(ctx context.Context, key K) (requeueAfter time.Duration, err error)

// Queue is one loop's work queue and its workers.
type Queue[K comparable] struct {
	name string
	// keyName is how a key is logged: "instance", "namespace", …
	keyName string
	sync    SyncFunc[K]
	queue   workqueue.TypedRateLimitingInterface[K]

	mu     sync.Mutex
	synced []cache.DoneChecker
}

// New returns the queue of the loop name (in logs and work-queue metrics).
func New[K comparable](name, keyName string, sync SyncFunc[K]) *Queue[K] {
	return &Queue[K]{
		name:    name,
		keyName: keyName,
		sync:    sync,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[K](),
			workqueue.TypedRateLimitingQueueConfig[K]{Name: name}),
	}
}

// Add queues a key now.
func (q *Queue[K]) Add(key K) { q.queue.Add(key) }

// AddAfter queues a key once d has passed; keys added meanwhile coalesce.
func (q *Queue[K]) AddAfter(key K, d time.Duration) { q.queue.AddAfter(key, d) }

// Len is the number of keys waiting; for tests.
func (q *Queue[K]) Len() int { return q.queue.Len() }

// NumRequeues is how often a key has been requeued with backoff since it
// was last forgotten; for tests.
func (q *Queue[K]) NumRequeues(key K) int { return q.queue.NumRequeues(key) }

// Get takes the next key, as a worker would; for tests that check what
// event handlers queued. It must be followed by Done.
func (q *Queue[K]) Get() (K, bool) { return q.queue.Get() }

// Done marks a key taken with Get as processed.
func (q *Queue[K]) Done(key K) { q.queue.Done(key) }

// Watch adds handler to informer, and makes Run wait until the handler has
// seen the informer's initial list.
func Watch[O cache.Object, K comparable](q *Queue[K], informer cache.TypedSharedIndexInformer[O], handler cache.TypedResourceEventHandler[O]) error {
	reg, err := informer.AddTypedEventHandler(handler)
	if err != nil {
		return fmt.Errorf("watching for the %s loop: %w", q.name, err)
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	q.synced = append(q.synced, reg.HasSyncedChecker())
	return nil
}

// HasSynced reports whether every watched informer has synced and its
// initial list has reached the loop's handlers.
func (q *Queue[K]) HasSynced() bool {
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, s := range q.synced {
		select {
		case <-s.Done():
		default:
			return false
		}
	}
	return true
}

// Run waits for the caches, then works the queue with workers goroutines
// until ctx is done, and returns once they have stopped. It shuts the
// queue down, so it runs once per Queue.
func (q *Queue[K]) Run(ctx context.Context, workers int) error {
	defer utilruntime.HandleCrashWithContext(ctx)
	defer q.queue.ShutDown()
	logger := klog.FromContext(ctx).WithValues("controller", q.name)
	ctx = klog.NewContext(ctx, logger)

	q.mu.Lock()
	synced := q.synced
	q.mu.Unlock()
	if !cache.WaitFor(ctx, "caches to sync", synced...) {
		return fmt.Errorf("%s loop: caches did not sync: %w", q.name, context.Cause(ctx))
	}

	logger.Info("Starting workers", "count", workers)
	var wg sync.WaitGroup
	for range workers {
		wg.Go(func() { wait.UntilWithContext(ctx, q.runWorker, time.Second) })
	}
	<-ctx.Done()
	logger.Info("Shutting down workers")
	q.queue.ShutDown()
	wg.Wait()
	return nil
}

func (q *Queue[K]) runWorker(ctx context.Context) {
	for q.ProcessNext(ctx) {
	}
}

// ProcessNext syncs the next key; false once the queue is shut down.
func (q *Queue[K]) ProcessNext(ctx context.Context) bool {
	key, shutdown := q.queue.Get()
	if shutdown {
		return false
	}
	defer q.queue.Done(key)
	logger := klog.FromContext(ctx).WithValues(q.keyName, key)
	ctx = klog.NewContext(ctx, logger)
	// A panic is logged with the key before it takes the process down, as
	// in every Kubernetes controller.
	defer utilruntime.HandleCrashWithContext(ctx)

	after, err := q.sync(ctx, key)
	switch {
	case err == nil:
		q.queue.Forget(key)
		if after > 0 {
			q.queue.AddAfter(key, after)
		}
	case apierrors.IsConflict(err):
		// Someone wrote in between; the informer brings the newer object
		// and the retry computes from it.
		logger.V(2).Info("Write conflicted, requeueing", "err", err)
		q.queue.AddRateLimited(key)
	default:
		utilruntime.HandleErrorWithContext(ctx, err, "Sync failed, requeueing", q.keyName, key)
		q.queue.AddRateLimited(key)
	}
	return true
}

// Object is what the loops watch: API objects with metadata.
type Object interface {
	comparable
	metav1.Object
}

// Handler returns event handlers that call changed on adds, on both sides
// of an update that moved the resourceVersion (a resync moves nothing), and
// deleted on deletes. Both sides, because an update can take an object out
// of what a key covers (an owner reference removed, say): the key it
// leaves must hear of it too. The queue folds a key added twice.
func Handler[O Object](changed func(O), deleted func(cache.DeletedObject[O])) cache.TypedResourceEventHandlerFuncs[O] {
	return cache.TypedResourceEventHandlerFuncs[O]{
		AddFunc: changed,
		UpdateFunc: func(old, o O) {
			if old.GetResourceVersion() != o.GetResourceVersion() {
				changed(old)
				changed(o)
			}
		},
		DeleteFunc: deleted,
	}
}

// Informers are the shared informer factories a loop takes its informers
// from. A loop asks each factory for the informers it reads before the
// factories start, which registers them.
type Informers struct {
	Kube kubeinformers.SharedInformerFactory
	Kiln kilninformers.SharedInformerFactory
}

// AddIndexed adds the key of every object indexer files under value of
// index.
func AddIndexed[O Object](q *Queue[cache.ObjectName], indexer cache.TypedIndexer[O], index, value string) {
	items, err := indexer.ByTypedIndex(index, value)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, o := range items {
		q.Add(cache.MetaObjectToName(o))
	}
}
