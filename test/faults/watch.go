package faults

import (
	"context"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"kiln.dev/kiln/test/localcluster"
)

func gvr(resource string) schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: "gpu.kiln.dev", Version: "v1alpha1", Resource: resource}
}

// directConfig reaches Kiln without the aggregator, as kube-apiserver does:
// with the front-proxy client certificate and the user in headers.
func directConfig(c *localcluster.Cluster) *rest.Config {
	return &rest.Config{
		Host: c.KilnURL,
		TLSClientConfig: rest.TLSClientConfig{
			CAFile: c.KilnCAFile, CertFile: c.FrontProxyClient.CertFile, KeyFile: c.FrontProxyClient.KeyFile,
		},
		QPS: -1,
		WrapTransport: func(rt http.RoundTripper) http.RoundTripper {
			return headers{rt, map[string]string{"X-Remote-User": "faults-watcher", "X-Remote-Group": "system:masters"}}
		},
	}
}

type headers struct {
	http.RoundTripper
	set map[string]string
}

func (h headers) RoundTrip(req *http.Request) (*http.Response, error) {
	req = req.Clone(req.Context())
	for k, v := range h.set {
		req.Header.Set(k, v)
	}
	return h.RoundTripper.RoundTrip(req)
}

// span is a stretch of resourceVersions a watcher saw whole: every change
// after from up to and including to was delivered.
type span struct{ from, to uint64 }

// watcher follows one resource in one namespace the way a controller's
// reflector does: list, watch from the list's resourceVersion, resume
// from the last one seen when the stream ends, list again on 410 Gone.
// It records what it saw, so the suite can check that every acknowledged
// write came once and in order, and that its picture ends right.
type watcher struct {
	name           string
	client         dynamic.Interface
	resource, ns   string
	mu             sync.Mutex
	state          map[string]objState
	seen           map[string]map[uint64]int // name -> rv -> deliveries
	spans          []span
	last           uint64
	outOfOrder     int
	relists, drops int
}

func newWatcher(name string, client dynamic.Interface, resource, ns string) *watcher {
	return &watcher{name: name, client: client, resource: resource, ns: ns, seen: map[string]map[uint64]int{}}
}

// run follows until ctx ends.
func (w *watcher) run(ctx context.Context) {
	res := w.client.Resource(gvr(w.resource)).Namespace(w.ns)
	needList := true
	for ctx.Err() == nil {
		if needList {
			list, err := res.List(ctx, metav1.ListOptions{})
			if err != nil {
				sleep(ctx, 200*time.Millisecond)
				continue
			}
			rv, _ := strconv.ParseUint(list.GetResourceVersion(), 10, 64)
			w.mu.Lock()
			w.state = map[string]objState{}
			for i := range list.Items {
				w.state[list.Items[i].GetName()] = stateOf(&list.Items[i])
			}
			w.spans = append(w.spans, span{from: rv, to: rv})
			w.last = rv
			w.mu.Unlock()
			needList = false
		}
		w.mu.Lock()
		from := w.last
		w.mu.Unlock()
		wi, err := res.Watch(ctx, metav1.ListOptions{ResourceVersion: strconv.FormatUint(from, 10), AllowWatchBookmarks: true})
		if err != nil {
			if apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
				w.mu.Lock()
				w.relists++
				w.mu.Unlock()
				needList = true
			}
			sleep(ctx, 200*time.Millisecond)
			continue
		}
		needList = w.follow(ctx, wi)
		wi.Stop()
		w.mu.Lock()
		w.drops++
		w.mu.Unlock()
	}
}

// follow takes events until the stream ends; it says whether to list
// again.
func (w *watcher) follow(ctx context.Context, wi watch.Interface) bool {
	for {
		select {
		case <-ctx.Done():
			return false
		case ev, open := <-wi.ResultChan():
			if !open {
				return false
			}
			if ev.Type == watch.Error {
				if apierrors.IsResourceExpired(apierrors.FromObject(ev.Object)) || apierrors.IsGone(apierrors.FromObject(ev.Object)) {
					w.mu.Lock()
					w.relists++
					w.mu.Unlock()
					return true
				}
				return false
			}
			u, isObj := ev.Object.(*unstructured.Unstructured)
			if !isObj {
				continue
			}
			rv, _ := strconv.ParseUint(u.GetResourceVersion(), 10, 64)
			w.mu.Lock()
			if ev.Type != watch.Bookmark {
				if rv <= w.last {
					w.outOfOrder++
				}
				if w.seen[u.GetName()] == nil {
					w.seen[u.GetName()] = map[uint64]int{}
				}
				w.seen[u.GetName()][rv]++
				if ev.Type == watch.Deleted {
					delete(w.state, u.GetName())
				} else {
					w.state[u.GetName()] = stateOf(u)
				}
			}
			if rv > w.last {
				w.last = rv
				w.spans[len(w.spans)-1].to = rv
			}
			w.mu.Unlock()
		}
	}
}

// gaps counts the acknowledged writes to this watcher's objects that fall
// inside what it saw whole yet were not delivered exactly once, and the
// events that came out of order.
func (w *watcher) gaps(acked []ackedWrite) (missing, duplicated int, detail []string) {
	w.mu.Lock()
	defer w.mu.Unlock()
	for _, a := range acked {
		if a.resource != w.resource || a.namespace != w.ns {
			continue
		}
		covered := false
		for _, s := range w.spans {
			if a.rv > s.from && a.rv <= s.to {
				covered = true
			}
		}
		if !covered {
			continue
		}
		switch n := w.seen[a.name][a.rv]; {
		case n == 0:
			missing++
			detail = append(detail, fmt.Sprintf("%s: %s/%s rv %d never delivered", w.name, a.namespace, a.name, a.rv))
		case n > 1:
			duplicated++
			detail = append(detail, fmt.Sprintf("%s: %s/%s rv %d delivered %d times", w.name, a.namespace, a.name, a.rv, n))
		}
	}
	return missing + w.outOfOrder, duplicated, detail
}

// agrees compares the watcher's picture with the store's at the last
// resourceVersion it saw, read exactly at that revision.
func (w *watcher) agrees(ctx context.Context) (bool, string, error) {
	w.mu.Lock()
	last := w.last
	got := make(map[string]objState, len(w.state))
	for k, v := range w.state {
		got[k] = v
	}
	w.mu.Unlock()
	list, err := w.client.Resource(gvr(w.resource)).Namespace(w.ns).List(ctx, metav1.ListOptions{
		ResourceVersion: strconv.FormatUint(last, 10), ResourceVersionMatch: metav1.ResourceVersionMatchExact,
	})
	if err != nil {
		return false, "", err
	}
	want := map[string]objState{}
	for i := range list.Items {
		want[list.Items[i].GetName()] = stateOf(&list.Items[i])
	}
	for k, v := range want {
		if got[k] != v {
			return false, fmt.Sprintf("%s at rv %d: %s/%s is %+v, the store has %+v", w.name, last, w.ns, k, got[k], v), nil
		}
	}
	for k, v := range got {
		if _, ok := want[k]; !ok {
			return false, fmt.Sprintf("%s at rv %d: %s/%s is %+v, the store has none", w.name, last, w.ns, k, v), nil
		}
	}
	return true, "", nil
}

func (w *watcher) lastRV() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.last
}

func sleep(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}
