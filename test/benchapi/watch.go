package benchapi

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"sync/atomic"
	"time"
)

// sentAnnotation carries the time an update was sent, in Unix nanoseconds,
// so a watcher can tell how long the event took to reach it.
const sentAnnotation = "bench.kiln.dev/sent"

// WatchResult is how updates reached many watchers of one path.
type WatchResult struct {
	Watchers, Updates int
	// Delivered counts (watcher, update) pairs that arrived; Expected is
	// Watchers × Updates.
	Delivered, Expected int
	// CutOff counts watches that ended before the last update reached them.
	CutOff int
	// FailedToStart counts watches the server refused or never answered.
	FailedToStart int
	Latency       Sample
}

// Watch opens watchers watches on p's Instances from the collection's
// current resourceVersion, then makes updates merge patches of the object
// named target, one every interval, and measures from each patch's start
// to each watcher's receipt of its event. Watch streams are JSON on every
// path, so the watchers decode alike.
func Watch(ctx context.Context, p *Path, target string, watchers, updates int, interval time.Duration) (WatchResult, error) {
	res := WatchResult{Watchers: watchers, Updates: updates, Expected: watchers * updates}
	rv, err := listRV(ctx, p)
	if err != nil {
		return res, err
	}
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	var (
		mu        sync.Mutex
		lat       []time.Duration
		cut, fail atomic.Int64
		started   sync.WaitGroup
		done      sync.WaitGroup
	)
	url := fmt.Sprintf("%s?watch=1&resourceVersion=%s&timeoutSeconds=600", p.Collection(), rv)
	for range watchers {
		started.Add(1)
		done.Add(1)
		go func() {
			defer done.Done()
			req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
			if err != nil {
				fail.Add(1)
				started.Done()
				return
			}
			req.Header.Set("Accept", "application/json")
			resp, err := p.Client.Do(req)
			started.Done()
			if err != nil {
				fail.Add(1)
				return
			}
			defer resp.Body.Close()
			if resp.StatusCode != http.StatusOK {
				fail.Add(1)
				return
			}
			dec := json.NewDecoder(resp.Body)
			got := 0
			for got < updates {
				var ev struct {
					Type   string `json:"type"`
					Object struct {
						Metadata struct {
							Annotations map[string]string `json:"annotations"`
						} `json:"metadata"`
					} `json:"object"`
				}
				if err := dec.Decode(&ev); err != nil {
					if ctx.Err() == nil {
						cut.Add(1)
					}
					return
				}
				now := time.Now()
				sent, err := strconv.ParseInt(ev.Object.Metadata.Annotations[sentAnnotation], 10, 64)
				if ev.Type != "MODIFIED" || err != nil {
					continue
				}
				got++
				mu.Lock()
				lat = append(lat, now.Sub(time.Unix(0, sent)))
				mu.Unlock()
			}
		}()
	}
	started.Wait()
	// Response headers of a watch come before the server has registered
	// it everywhere; let the last ones settle.
	time.Sleep(2 * time.Second)
	for i := range updates {
		sent := time.Now()
		body := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, sentAnnotation, strconv.FormatInt(sent.UnixNano(), 10))
		if err := send(ctx, p.Client, "application/json", Request{Method: http.MethodPatch, URL: p.Item(target), ContentType: "application/merge-patch+json", Body: []byte(body)}); err != nil {
			return res, fmt.Errorf("update %d: %w", i, err)
		}
		time.Sleep(interval)
	}
	// Whatever has not arrived ten seconds after the last update is missing.
	finished := make(chan struct{})
	go func() { done.Wait(); close(finished) }()
	select {
	case <-finished:
	case <-time.After(10 * time.Second):
	}
	cancel()
	<-finished
	mu.Lock()
	defer mu.Unlock()
	res.Delivered = len(lat)
	res.CutOff = int(cut.Load())
	res.FailedToStart = int(fail.Load())
	res.Latency = Sample{Ops: len(lat), Latencies: lat}
	return res, nil
}

// listRV is the collection's current resourceVersion.
func listRV(ctx context.Context, p *Path) (string, error) {
	b, err := getAccept(ctx, p.Client, p.Collection()+"?limit=1", "application/json")
	if err != nil {
		return "", err
	}
	var l struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
	}
	if err := json.Unmarshal(b, &l); err != nil {
		return "", err
	}
	return l.Metadata.ResourceVersion, nil
}
