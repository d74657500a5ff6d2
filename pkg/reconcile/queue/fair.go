package queue

import (
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
)

// NewFair returns the queue of a loop whose keys belong to tenants: keys
// wait in one FIFO per partition (a namespace), and workers take from the
// partitions in turn. One tenant creating or deleting thousands of objects
// then delays another tenant's key by at most one key per busy partition,
// not by the whole backlog ahead of it. Deduplication, backoff and the
// rule that a key is processed by one worker at a time stay client-go's.
func NewFair[K comparable](name, keyName string, sync SyncFunc[K], partition func(K) string) *Queue[K] {
	fifo := &fairQueue[K]{partition: partition, waiting: map[string][]K{}}
	q := workqueue.NewTypedWithConfig(workqueue.TypedQueueConfig[K]{Name: name, Queue: fifo})
	delaying := workqueue.NewTypedDelayingQueueWithConfig(workqueue.TypedDelayingQueueConfig[K]{Name: name, Queue: q})
	return &Queue[K]{
		name:    name,
		keyName: keyName,
		sync:    sync,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(
			workqueue.DefaultTypedControllerRateLimiter[K](),
			workqueue.TypedRateLimitingQueueConfig[K]{DelayingQueue: delaying}),
	}
}

// ByNamespace partitions object keys by namespace.
func ByNamespace(key cache.ObjectName) string { return key.Namespace }

// fairQueue is a workqueue.Queue of one FIFO per partition, popped round
// robin. The work queue calls it under its own lock and pops only when
// Len is positive.
type fairQueue[K comparable] struct {
	partition func(K) string
	waiting   map[string][]K
	// turns holds the partitions with waiting keys in the order they are
	// served; next is the one whose turn it is.
	turns []string
	next  int
	n     int
}

var _ workqueue.Queue[string] = &fairQueue[string]{}

// Touch keeps a key where it is: the work queue deduplicates, and a key
// added again keeps its turn.
func (f *fairQueue[K]) Touch(K) {}

func (f *fairQueue[K]) Push(key K) {
	p := f.partition(key)
	if len(f.waiting[p]) == 0 {
		// A partition with nothing waiting joins just before the one
		// whose turn it is, so it is served last in this round, not
		// ahead of partitions that have waited.
		f.turns = append(f.turns, "")
		copy(f.turns[f.next+1:], f.turns[f.next:])
		f.turns[f.next] = p
		f.next++
		if f.next == len(f.turns) {
			f.next = 0
		}
	}
	f.waiting[p] = append(f.waiting[p], key)
	f.n++
}

func (f *fairQueue[K]) Len() int { return f.n }

func (f *fairQueue[K]) Pop() K {
	p := f.turns[f.next]
	keys := f.waiting[p]
	key := keys[0]
	var zero K
	keys[0] = zero // let a popped key be collected
	f.n--
	if len(keys) == 1 {
		delete(f.waiting, p)
		f.turns = append(f.turns[:f.next], f.turns[f.next+1:]...)
	} else {
		f.waiting[p] = keys[1:]
		f.next++
	}
	if f.next >= len(f.turns) {
		f.next = 0
	}
	return key
}
