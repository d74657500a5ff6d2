package benchapi

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"slices"
	"sync"
	"time"
)

// Request is one HTTP request of a workload, built before the clock starts.
type Request struct {
	Method, URL, ContentType string
	Body                     []byte
}

// Sample is what one path did in one workload.
type Sample struct {
	Ops, Errors int
	// FirstError is the first failure's status and body, to say why.
	FirstError string
	Elapsed    time.Duration
	Latencies  []time.Duration
	// CPU is the CPU time each server process spent meanwhile, by name.
	CPU map[string]time.Duration
}

func (s *Sample) add(o Sample) {
	s.Ops += o.Ops
	s.Errors += o.Errors
	if s.FirstError == "" {
		s.FirstError = o.FirstError
	}
	s.Elapsed += o.Elapsed
	s.Latencies = append(s.Latencies, o.Latencies...)
	if s.CPU == nil {
		s.CPU = map[string]time.Duration{}
	}
	for k, v := range o.CPU {
		s.CPU[k] += v
	}
}

// Throughput is operations per second of wall time.
func (s Sample) Throughput() float64 {
	if s.Elapsed <= 0 {
		return 0
	}
	return float64(s.Ops) / s.Elapsed.Seconds()
}

// Percentile of the latencies, p in [0, 100].
func (s Sample) Percentile(p float64) time.Duration {
	if len(s.Latencies) == 0 {
		return 0
	}
	l := slices.Clone(s.Latencies)
	slices.Sort(l)
	i := int(float64(len(l)-1) * p / 100)
	return l[i]
}

// CPUPer1000 is the CPU seconds a process spent per 1,000 operations.
func (s Sample) CPUPer1000(process string) float64 {
	if s.Ops == 0 {
		return 0
	}
	return s.CPU[process].Seconds() * 1000 / float64(s.Ops)
}

// Op is one timed operation: usually one request, a paginated LIST all its
// pages.
type Op func(context.Context) error

// Send is the Op that sends r through p, with p's Accept header; the
// response is read to its end and discarded.
func (p *Path) Send(r Request) Op {
	return func(ctx context.Context) error { return send(ctx, p.Client, p.Accept(), r) }
}

// Accept is the Accept header of p's requests.
func (p *Path) Accept() string {
	if p.Encoding == Protobuf {
		return string(Protobuf) + ", application/json"
	}
	return "application/json"
}

// Do runs ops from workers parallel clients and times each.
func Do(ctx context.Context, workers int, ops []Op) Sample {
	s := Sample{Ops: len(ops), Latencies: make([]time.Duration, len(ops))}
	var mu sync.Mutex
	next := make(chan int)
	var wg sync.WaitGroup
	start := time.Now()
	for range workers {
		wg.Go(func() {
			for i := range next {
				t := time.Now()
				err := ops[i](ctx)
				s.Latencies[i] = time.Since(t)
				if err != nil {
					mu.Lock()
					s.Errors++
					if s.FirstError == "" {
						s.FirstError = err.Error()
					}
					mu.Unlock()
				}
			}
		})
	}
	for i := range ops {
		next <- i
	}
	close(next)
	wg.Wait()
	s.Elapsed = time.Since(start)
	return s
}

func send(ctx context.Context, client *http.Client, accept string, r Request) error {
	var body io.Reader
	if r.Body != nil {
		body = bytes.NewReader(r.Body)
	}
	req, err := http.NewRequestWithContext(ctx, r.Method, r.URL, body)
	if err != nil {
		return err
	}
	req.Header.Set("Accept", accept)
	if r.ContentType != "" {
		req.Header.Set("Content-Type", r.ContentType)
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	if resp.StatusCode >= 300 {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("%s %s: %d %s", r.Method, r.URL, resp.StatusCode, msg)
	}
	_, err = io.Copy(io.Discard, resp.Body)
	return err
}
