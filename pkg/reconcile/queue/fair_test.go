package queue

import (
	"context"
	"fmt"
	"slices"
	"testing"
	"time"

	"k8s.io/client-go/tools/cache"
)

func TestFairQueueOrder(t *testing.T) {
	key := func(s string) cache.ObjectName { return cache.ObjectName{Namespace: s[:1], Name: s} }
	for _, tc := range []struct {
		name string
		push []string // pushed in this order, before any pop
		want []string // the pop order
	}{
		{name: "one partition is a FIFO", push: []string{"a1", "a2", "a3"}, want: []string{"a1", "a2", "a3"}},
		{name: "a burst does not hold back the others",
			push: []string{"a1", "a2", "a3", "a4", "a5", "b1", "c1"},
			want: []string{"a1", "b1", "c1", "a2", "a3", "a4", "a5"}},
		{name: "turns alternate", push: []string{"a1", "a2", "b1", "b2", "a3"},
			want: []string{"a1", "b1", "a2", "b2", "a3"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := &fairQueue[cache.ObjectName]{partition: ByNamespace, waiting: map[string][]cache.ObjectName{}}
			for _, s := range tc.push {
				f.Push(key(s))
			}
			var got []string
			for f.Len() > 0 {
				got = append(got, f.Pop().Name)
			}
			if !slices.Equal(got, tc.want) {
				t.Errorf("popped %v, want %v", got, tc.want)
			}
			if len(f.waiting) != 0 || len(f.turns) != 0 {
				t.Errorf("left %v waiting, turns %v", f.waiting, f.turns)
			}
		})
	}
}

// TestFairQueueInterleaved: a partition that empties and comes back waits
// its turn behind the partitions that kept waiting.
func TestFairQueueInterleaved(t *testing.T) {
	f := &fairQueue[cache.ObjectName]{partition: ByNamespace, waiting: map[string][]cache.ObjectName{}}
	push := func(ns, name string) { f.Push(cache.ObjectName{Namespace: ns, Name: name}) }
	pop := func() string { k := f.Pop(); return k.Namespace + "/" + k.Name }
	push("a", "1")
	push("a", "2")
	push("b", "1")
	if got := pop(); got != "a/1" {
		t.Fatalf("first pop %s", got)
	}
	if got := pop(); got != "b/1" {
		t.Fatalf("second pop %s", got)
	}
	push("b", "2") // b emptied and returns: behind a
	push("c", "1")
	var got []string
	for f.Len() > 0 {
		got = append(got, pop())
	}
	if want := []string{"a/2", "b/2", "c/1"}; !slices.Equal(got, want) {
		t.Errorf("popped %v, want %v", got, want)
	}
}

// TestFairWorkQueue: through client-go's work queue, one namespace's
// thousand keys do not delay another's key, and keys still deduplicate.
func TestFairWorkQueue(t *testing.T) {
	q := NewFair("fair-test", "instance", func(context.Context, cache.ObjectName) (time.Duration, error) { return 0, nil }, ByNamespace)
	defer q.queue.ShutDown()
	for i := range 1000 {
		q.Add(cache.ObjectName{Namespace: "burst", Name: fmt.Sprint(i)})
	}
	q.Add(cache.ObjectName{Namespace: "burst", Name: "0"}) // again: deduplicated
	q.Add(cache.ObjectName{Namespace: "quiet", Name: "x"})
	if got := q.Len(); got != 1001 {
		t.Fatalf("Len %d, want 1001", got)
	}
	for i := range 2 {
		k, _ := q.Get()
		q.Done(k)
		if k.Namespace == "quiet" {
			return
		}
		if i == 1 {
			t.Fatalf("the quiet namespace's key was not among the first two taken")
		}
	}
}
