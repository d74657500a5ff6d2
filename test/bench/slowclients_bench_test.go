package bench

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/test/localcluster"
)

const (
	slowFollows   = 500
	slowWatches   = 1000
	slowInstances = 5
	// The quiet tenant's rounds per measurement: a get, a list, a create
	// and a delete each, from quietWorkers clients at once.
	quietRounds  = 150
	quietWorkers = 4
	// Many clients, not one: each load transport has its own connections,
	// as 15 tenant processes would.
	loadTransports = 15
)

// BenchmarkSlowClients (issue J): tenant-b's GETs, LISTs, creates and
// deletes of its own Instances, on an idle cluster and while tenant-a holds
// 500 instances/log?follow=true streams and 1,000 watches on Instances open
// through the aggregator. tenant-a's clients are slow: each reads at most
// 512 bytes a second of a log that grows by a line every 100 ms.
// BENCH_KILN_FLAGS adds kiln-apiserver flags (say,
// --max-log-follows-per-user=0).
func BenchmarkSlowClients(b *testing.B) {
	ctx := context.Background()
	c, _, admin := startCluster(b, "bench-slow-clients", localcluster.Options{
		Nodes: inventory()[:2], Tenants: []string{"tenant-a", "tenant-b"},
	})
	defer c.Stop()
	createBenchType(b, admin)
	busy, quiet := tenantClient(b, c, "tenant-a", nil), tenantClient(b, c, "tenant-b", nil)
	logged := startTalkers(b, busy, "tenant-a", slowInstances)
	if err := createStopped(ctx, quiet, "target"); err != nil {
		b.Fatal(err)
	}
	startTalkers(b, quiet, "tenant-b", 1)
	logCtx, stopLog := context.WithCancel(ctx)
	defer stopLog()
	go appendLog(logCtx, c)

	b.Run("idle", func(b *testing.B) {
		for range b.N {
			reportQuiet(b, measureQuiet(b, quiet))
			reportRSS(b, c)
			b.ReportMetric(followServed(b, quiet), "tenant-b-follow-served")
		}
	})
	b.Run(fmt.Sprintf("held-%d-follows-%d-watches", slowFollows, slowWatches), func(b *testing.B) {
		for range b.N {
			loadCtx, stop := context.WithCancel(ctx)
			load := &slowLoad{}
			start := time.Now()
			load.open(loadCtx, b, c, logged)
			b.ReportMetric(time.Since(start).Seconds(), "s-to-open")
			reportQuiet(b, measureQuiet(b, quiet))
			reportRSS(b, c)
			b.ReportMetric(float64(load.follows.Load()), "follows-held")
			b.ReportMetric(float64(load.refused.Load()), "follows-refused-429")
			b.ReportMetric(followServed(b, quiet), "tenant-b-follow-served")
			b.ReportMetric(float64(load.watches.Load()), "watches-held")
			b.ReportMetric(float64(load.read.Load())/1e6, "MB-read-by-slow")
			stop()
			load.wg.Wait()
			for reason, n := range load.ended {
				b.Errorf("%d of tenant-a's streams ended while held: %s", n, reason)
			}
		}
	})
}

// tenantClient is a tenant's clientset with no client-side rate limit; a
// non-nil dial gives it connections of its own.
func tenantClient(b *testing.B, c *localcluster.Cluster, tenant string, dial func(context.Context, string, string) (net.Conn, error)) versioned.Interface {
	b.Helper()
	cfg, err := c.ConfigFor(tenant)
	if err != nil {
		b.Fatal(err)
	}
	cfg.QPS, cfg.Burst = 1e6, 1e6
	cfg.Dial = dial
	return versioned.NewForConfigOrDie(cfg)
}

// startTalkers creates n running Instances in ns whose logs are
// followed, and waits until their Pods run.
func startTalkers(b *testing.B, kiln versioned.Interface, ns string, n int) []string {
	b.Helper()
	ctx := context.Background()
	var names []string
	for i := range n {
		name := fmt.Sprintf("talker-%d", i)
		inst := &gpuv1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gpuv1.InstanceSpec{Type: "bench", Image: "busybox:1",
				Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](0)}}}
		if _, err := kiln.GpuV1alpha1().Instances(ns).Create(ctx, inst, metav1.CreateOptions{}); err != nil {
			b.Fatal(err)
		}
		names = append(names, name)
	}
	err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		for _, n := range names {
			inst, err := kiln.GpuV1alpha1().Instances(ns).Get(ctx, n, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionReady); c == nil || c.Status != metav1.ConditionTrue {
				return false, nil
			}
		}
		return true, nil
	})
	if err != nil {
		b.Fatalf("%s's Instances not Ready: %v", ns, err)
	}
	return names
}

// slowLoad is tenant-a's held streams.
type slowLoad struct {
	wg               sync.WaitGroup
	follows, watches atomic.Int64
	// refused counts follows kiln-apiserver answered 429.
	refused atomic.Int64
	read    atomic.Int64
	// ended counts streams the server ended while held, by reason.
	mu    sync.Mutex
	ended map[string]int
}

// open starts every stream and returns once all of them have answered
// their headers; each is then read slowly until ctx ends.
func (l *slowLoad) open(ctx context.Context, b *testing.B, c *localcluster.Cluster, instances []string) {
	b.Helper()
	clients := make([]rest.Interface, loadTransports)
	for i := range clients {
		clients[i] = tenantClient(b, c, "tenant-a", (&net.Dialer{Timeout: 30 * time.Second}).DialContext).GpuV1alpha1().RESTClient()
	}
	type stream struct {
		req     *rest.Request
		counter *atomic.Int64
	}
	streams := make(chan stream)
	errs := make(chan error, slowFollows+slowWatches)
	var opening sync.WaitGroup
	for range 50 {
		opening.Go(func() {
			for s := range streams {
				// A flood takes no for an answer: no client-side retries.
				rc, err := s.req.MaxRetries(0).Stream(ctx)
				if apierrors.IsTooManyRequests(err) && s.counter == &l.follows {
					l.refused.Add(1)
					continue
				}
				if err != nil {
					errs <- err
					continue
				}
				s.counter.Add(1)
				l.wg.Go(func() { l.readSlowly(ctx, rc, s.counter) })
			}
		})
	}
	for i := range slowFollows + slowWatches {
		rc := clients[i%len(clients)]
		if i < slowFollows {
			streams <- stream{rc.Get().Namespace("tenant-a").Resource("instances").Name(instances[i%len(instances)]).
				SubResource("log").Param("follow", "true"), &l.follows}
		} else {
			streams <- stream{rc.Get().Namespace("tenant-a").Resource("instances").Param("watch", "true"), &l.watches}
		}
	}
	close(streams)
	opening.Wait()
	close(errs)
	for err := range errs {
		b.Errorf("tenant-a's stream: %v", err)
	}
}

// readSlowly reads at most 512 bytes a second, as a client on a poor link
// or one that stopped reading would, until ctx ends or the server closes.
func (l *slowLoad) readSlowly(ctx context.Context, rc io.ReadCloser, open *atomic.Int64) {
	defer open.Add(-1)
	go func() { <-ctx.Done(); rc.Close() }()
	buf := make([]byte, 512)
	for {
		n, err := rc.Read(buf)
		l.read.Add(int64(n))
		if err != nil {
			if ctx.Err() == nil {
				l.mu.Lock()
				if l.ended == nil {
					l.ended = map[string]int{}
				}
				l.ended[err.Error()]++
				l.mu.Unlock()
			}
			return
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// appendLog grows every container's log by a line every 100 ms.
func appendLog(ctx context.Context, c *localcluster.Cluster) {
	for i := 0; ; i++ {
		select {
		case <-ctx.Done():
			return
		case <-time.After(100 * time.Millisecond):
		}
		_ = c.AppendContainerLog(fmt.Sprintf("step %d loss %.4f %s", i, 1/float64(i+1), strings.Repeat("x", 60)))
	}
}

// followServed is 1 when tenant-b's follow of its own Instance's log is
// still open after two seconds and has shown what was appended meanwhile:
// a kubelet out of inotify instances ends a follow once it reaches the end
// of the file.
func followServed(b *testing.B, quiet versioned.Interface) float64 {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	rc, err := quiet.GpuV1alpha1().RESTClient().Get().Namespace("tenant-b").Resource("instances").Name("talker-0").
		SubResource("log").Param("follow", "true").Param("tailLines", "1").Stream(ctx)
	if err != nil {
		b.Errorf("tenant-b's follow: %v", err)
		return 0
	}
	defer rc.Close()
	first := make([]byte, 4096)
	if _, err := rc.Read(first); err != nil {
		b.Errorf("tenant-b's follow showed nothing: %v", err)
		return 0
	}
	n, err := io.Copy(io.Discard, rc)
	if ctx.Err() == nil || n == 0 {
		b.Errorf("tenant-b's follow ended early (%d bytes after the first read): %v", n, err)
		return 0
	}
	return 1
}

func createStopped(ctx context.Context, kiln versioned.Interface, name string) error {
	inst := &gpuv1.Instance{ObjectMeta: metav1.ObjectMeta{Name: name},
		Spec: gpuv1.InstanceSpec{Type: "bench", Image: "busybox:1", Stopped: true,
			Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](0)}}}
	_, err := kiln.GpuV1alpha1().Instances("tenant-b").Create(ctx, inst, metav1.CreateOptions{})
	return err
}

// measureQuiet runs tenant-b's rounds and returns each request's latency
// by verb. The Instances it creates it deletes again, so every list sees
// about as many.
func measureQuiet(b *testing.B, quiet versioned.Interface) map[string][]time.Duration {
	b.Helper()
	ctx := context.Background()
	insts := quiet.GpuV1alpha1().Instances("tenant-b")
	var mu sync.Mutex
	lat := map[string][]time.Duration{}
	timed := func(verb string, f func() error) {
		start := time.Now()
		if err := f(); err != nil {
			b.Errorf("tenant-b %s: %v", verb, err)
		}
		mu.Lock()
		lat[verb] = append(lat[verb], time.Since(start))
		mu.Unlock()
	}
	rounds := make(chan int)
	var wg sync.WaitGroup
	for range quietWorkers {
		wg.Go(func() {
			for r := range rounds {
				name := "q-" + strconv.Itoa(r) + "-" + strconv.FormatInt(time.Now().UnixNano(), 36)
				timed("get", func() error { _, err := insts.Get(ctx, "target", metav1.GetOptions{}); return err })
				timed("list", func() error { _, err := insts.List(ctx, metav1.ListOptions{}); return err })
				timed("create", func() error { return createStopped(ctx, quiet, name) })
				timed("delete", func() error { return insts.Delete(ctx, name, metav1.DeleteOptions{}) })
			}
		})
	}
	for r := range quietRounds {
		rounds <- r
	}
	close(rounds)
	wg.Wait()
	return lat
}

func reportQuiet(b *testing.B, lat map[string][]time.Duration) {
	var all []time.Duration
	for verb, l := range lat {
		slices.Sort(l)
		b.ReportMetric(ms(quantile(l, 0.99)), "ms-p99-"+verb)
		all = append(all, l...)
	}
	slices.Sort(all)
	b.ReportMetric(ms(quantile(all, 0.50)), "ms-p50")
	b.ReportMetric(ms(quantile(all, 0.99)), "ms-p99")
	b.ReportMetric(ms(all[len(all)-1]), "ms-max")
}

func quantile(sorted []time.Duration, q float64) time.Duration {
	return sorted[min(len(sorted)-1, int(q*float64(len(sorted))))]
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// reportRSS reports the resident memory of kiln-apiserver and
// kube-apiserver now.
func reportRSS(b *testing.B, c *localcluster.Cluster) {
	for _, name := range []string{"kiln-apiserver", "kube-apiserver"} {
		pid, err := c.PID(name)
		if err != nil {
			b.Fatal(err)
		}
		status, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
		if err != nil {
			b.Fatal(err)
		}
		for _, line := range strings.Split(string(status), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmRSS:" {
				kb, _ := strconv.Atoi(f[1])
				b.ReportMetric(float64(kb)/1024, "MB-rss-"+name)
			}
		}
	}
}
