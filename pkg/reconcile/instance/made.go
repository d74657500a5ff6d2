package instance

import (
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
)

// madePods remembers each Pod this loop created until the Pod informer
// has shown an event for its name, as the ReplicaSet controller's
// expectations do. The Service, created first, queues its Instance with
// its own watch event at once; that sync, finding no Pod in the cache,
// would create it again, and kube-apiserver would run its whole admission
// chain to answer 409 (0.55 creates per Instance of bench-scale's burst).
//
// An entry says only "a Pod was made": any event for the name (the old
// Pod of a rebuild going, say) ends it, after which a sync is back to the
// cache and at worst to the 409. It also ends after madeTTL, should the
// informer never show the Pod (created and deleted within one relist).
type madePods struct {
	mu sync.Mutex
	m  map[cache.ObjectName]madePod
}

type madePod struct {
	// pod is nil from begin to made.
	pod *corev1.Pod
	at  time.Time
}

const madeTTL = 30 * time.Second

// begin is called before the create: an event that reaches seen while it
// is in flight ends the entry before made could fill it.
func (m *madePods) begin(key cache.ObjectName, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.m == nil {
		m.m = map[cache.ObjectName]madePod{}
	}
	m.m[key] = madePod{at: now}
}

// made records the created Pod, unless an event came meanwhile. It keeps
// a copy: the sync that made it goes on with its own.
func (m *madePods) made(key cache.ObjectName, pod *corev1.Pod) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if e, ok := m.m[key]; ok {
		e.pod = pod.DeepCopy()
		m.m[key] = e
	}
}

// seen ends the entry of a name the informer has an event for; forget,
// of a create that failed.
func (m *madePods) seen(key cache.ObjectName) {
	m.mu.Lock()
	defer m.mu.Unlock()
	delete(m.m, key)
}

func (m *madePods) forget(key cache.ObjectName) { m.seen(key) }

// get is the Pod made for the Instance of that UID, if the informer has
// not shown it yet.
func (m *madePods) get(key cache.ObjectName, instance types.UID, now time.Time) *corev1.Pod {
	m.mu.Lock()
	defer m.mu.Unlock()
	e, ok := m.m[key]
	switch {
	case !ok || e.pod == nil:
		return nil
	case now.Sub(e.at) > madeTTL:
		delete(m.m, key)
		return nil
	}
	if ref := instanceControllerOf(e.pod); ref == nil || ref.UID != instance {
		return nil
	}
	return e.pod
}
