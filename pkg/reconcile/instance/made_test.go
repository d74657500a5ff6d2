package instance

import (
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

func TestMadePods(t *testing.T) {
	key := cache.ObjectName{Namespace: "tenant-a", Name: "train"}
	at := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	podOf := func(uid types.UID) *corev1.Pod {
		return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: key.Namespace, Name: key.Name, OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "gpu.kiln.dev/v1alpha1", Kind: "Instance", Name: key.Name, UID: uid, Controller: ptr.To(true),
		}}}}
	}
	for _, tc := range []struct {
		name string
		// steps run in order on one madePods; get asks as Instance "inst-1".
		steps []func(*madePods)
		after time.Duration
		want  bool
	}{{
		name:  "made, not seen",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.made(key, podOf("inst-1")) }},
		want:  true,
	}, {
		name: "seen after made",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.made(key, podOf("inst-1")) },
			func(m *madePods) { m.seen(key) }},
	}, {
		name: "seen while the create was in flight",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.seen(key) },
			func(m *madePods) { m.made(key, podOf("inst-1")) }},
	}, {
		name:  "create failed",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.forget(key) }},
	}, {
		name:  "in flight",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }},
	}, {
		name:  "another Instance of the name",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.made(key, podOf("inst-0")) }},
	}, {
		name:  "never seen, past madeTTL",
		steps: []func(*madePods){func(m *madePods) { m.begin(key, at) }, func(m *madePods) { m.made(key, podOf("inst-1")) }},
		after: madeTTL + time.Second,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			var m madePods
			for _, step := range tc.steps {
				step(&m)
			}
			if got := m.get(key, "inst-1", at.Add(tc.after)) != nil; got != tc.want {
				t.Errorf("get found a Pod: %v, want %v", got, tc.want)
			}
		})
	}
}

// TestSyncMadePodOnce: a sync between the Pod's create and the Pod
// informer's event for it (the Service's event queues one) creates no
// second Pod; once the informer shows the Pod, the cache is read again.
func TestSyncMadePodOnce(t *testing.T) {
	inst := running()
	f := newFixture(t, Options{}, inst, h100(), gpuNode())
	f.sync()
	if !f.wrote("create", "pods") {
		t.Fatalf("no Pod created: %v", f.writes())
	}
	// The Service's event came first, and queued this sync.
	if err := f.services.Add(f.service()); err != nil {
		t.Fatal(err)
	}
	f.kube.ClearActions()
	f.kiln.ClearActions()
	f.sync()
	if f.wrote("create", "pods") {
		t.Errorf("the Pod was created again before the informer showed it: %v", f.writes())
	}

	// The informer shows it, then it goes: the next sync makes another.
	pod := f.pod()
	f.c.podHandler().AddFunc(pod)
	f.drop(pod)
	f.kube.ClearActions()
	f.sync()
	if !f.wrote("create", "pods") {
		t.Errorf("no new Pod once the informer had shown the first and it was gone: %v", f.writes())
	}
}
