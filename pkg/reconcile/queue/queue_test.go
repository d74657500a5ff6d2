package queue

import (
	"context"
	"errors"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	coreinformers "k8s.io/client-go/informers/core/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2/ktesting"
)

// recorder is a sync that notes every call and answers from a script.
type recorder struct {
	mu     sync.Mutex
	calls  map[string]int
	answer func(key string, call int) (time.Duration, error)
}

func (r *recorder) sync(_ context.Context, key string) (time.Duration, error) {
	r.mu.Lock()
	r.calls[key]++
	n := r.calls[key]
	r.mu.Unlock()
	return r.answer(key, n)
}

func (r *recorder) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.calls[key]
}

func TestProcessNext(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	conflict := apierrors.NewConflict(corev1.Resource("pods"), "p", errors.New("changed"))
	cases := []struct {
		name         string
		after        time.Duration
		err          error
		wantRequeues int
		wantLater    bool // queued again after a delay
	}{
		{name: "success forgets the key"},
		{name: "success with a delay looks again later", after: 10 * time.Millisecond, wantLater: true},
		{name: "a failure requeues with backoff", err: errors.New("boom"), wantRequeues: 1, wantLater: true},
		{name: "a conflict requeues with backoff", err: conflict, wantRequeues: 1, wantLater: true},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			r := &recorder{calls: map[string]int{}, answer: func(string, int) (time.Duration, error) { return tc.after, tc.err }}
			q := New("test", "key", r.sync)
			defer q.queue.ShutDown()
			q.Add("a")
			if !q.ProcessNext(ctx) {
				t.Fatal("ProcessNext reported a shut-down queue")
			}
			if r.count("a") != 1 {
				t.Fatalf("sync called %d times, want 1", r.count("a"))
			}
			if got := q.NumRequeues("a"); got != tc.wantRequeues {
				t.Errorf("requeues = %d, want %d", got, tc.wantRequeues)
			}
			if q.Len() != 0 {
				t.Errorf("the key is back at once; want it only after a delay")
			}
			// The delays here are 5 to 10 ms; 20 times that without the key
			// is taken as never.
			err := wait.PollUntilContextTimeout(ctx, time.Millisecond, 200*time.Millisecond, true, func(context.Context) (bool, error) {
				return q.Len() > 0, nil
			})
			if got := err == nil; got != tc.wantLater {
				t.Errorf("queued again later: %v, want %v", got, tc.wantLater)
			}
		})
	}
}

// TestRun: Run waits for the handlers to see the informer's initial list,
// works every key until it succeeds, and returns once ctx ends.
func TestRun(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns"}}
	informer := coreinformers.NewTypedPodInformer(fake.NewClientset(pod), "", 0, nil)
	r := &recorder{calls: map[string]int{}, answer: func(_ string, call int) (time.Duration, error) {
		if call < 3 {
			return 0, errors.New("not yet")
		}
		return 0, nil
	}}
	q := New("test", "pod", r.sync)
	err := Watch(q, informer, coreinformers.PodHandlerFuncs{
		AddFunc: func(p *corev1.Pod) { q.Add(p.Namespace + "/" + p.Name) },
	})
	if err != nil {
		t.Fatal(err)
	}
	if q.HasSynced() {
		t.Error("HasSynced before the informer ran")
	}

	done := make(chan error)
	go func() { done <- q.Run(ctx, 2) }()
	go informer.Run(ctx.Done())
	err = wait.PollUntilContextTimeout(ctx, time.Millisecond, 10*time.Second, true, func(context.Context) (bool, error) {
		return r.count("ns/p") == 3, nil
	})
	if err != nil {
		t.Fatalf("sync of ns/p ran %d times, want 3 (two failures, then success)", r.count("ns/p"))
	}
	if !q.HasSynced() {
		t.Error("HasSynced is false after the loop worked")
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("Run = %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Run did not return after ctx ended")
	}
}

// TestRunWithoutSync: ended before the caches sync, Run says why.
func TestRunWithoutSync(t *testing.T) {
	_, ctx := ktesting.NewTestContext(t)
	ctx, cancel := context.WithCancel(ctx)
	informer := coreinformers.NewTypedPodInformer(fake.NewClientset(), "", 0, nil)
	q := New("test", "pod", func(context.Context, string) (time.Duration, error) { return 0, nil })
	if err := Watch(q, informer, coreinformers.PodHandlerFuncs{}); err != nil {
		t.Fatal(err)
	}
	cancel()
	if err := q.Run(ctx, 1); err == nil || !errors.Is(err, context.Canceled) {
		t.Errorf("Run = %v, want the caches not synced because ctx was canceled", err)
	}
}

// TestHandler: adds, both sides of updates that move the resourceVersion,
// and deletes reach the loop; a resync (same resourceVersion) does not.
func TestHandler(t *testing.T) {
	var changed, deleted []string
	h := Handler(func(p *corev1.Pod) { changed = append(changed, p.Name+"@"+p.ResourceVersion) },
		func(d cache.DeletedObject[*corev1.Pod]) { deleted = append(deleted, d.GetName()) })
	pod := func(rv string) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "ns", ResourceVersion: rv}}
	}
	h.OnAdd(pod("1"), false)
	h.OnUpdate(pod("1"), pod("1"))
	h.OnUpdate(pod("1"), pod("2"))
	h.OnDelete(cache.DeletedObject[*corev1.Pod]{OptionalObj: pod("2")})
	if want := []string{"p@1", "p@1", "p@2"}; !slices.Equal(changed, want) {
		t.Errorf("changed %v, want %v", changed, want)
	}
	if want := []string{"p"}; !slices.Equal(deleted, want) {
		t.Errorf("deleted %v, want %v", deleted, want)
	}
}
