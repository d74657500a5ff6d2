package localcluster

import (
	"errors"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// balancer spreads TCP connections over the Kiln replicas, as kube-proxy
// does for a Service with several endpoints: round robin, passing over a
// replica that refuses the dial. It only copies bytes, so TLS is between
// the client and the replica.
type balancer struct {
	ln       net.Listener
	backends []string
	next     atomic.Uint64
	wg       sync.WaitGroup

	mu     sync.Mutex
	conns  map[net.Conn]struct{}
	closed bool
}

// dialTimeout is short: a loopback dial either connects or is refused at
// once, unless the replica is stopped and its backlog full.
const dialTimeout = 2 * time.Second

func startBalancer(addr string, backends []string) (*balancer, error) {
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, err
	}
	b := &balancer{ln: ln, backends: backends, conns: map[net.Conn]struct{}{}}
	b.wg.Add(1)
	go b.serve()
	return b, nil
}

func (b *balancer) serve() {
	defer b.wg.Done()
	for {
		conn, err := b.ln.Accept()
		if err != nil {
			if errors.Is(err, net.ErrClosed) {
				return
			}
			continue
		}
		b.wg.Add(1)
		go b.proxy(conn)
	}
}

// dial tries each replica once, starting with the next in turn.
func (b *balancer) dial() (net.Conn, error) {
	start := b.next.Add(1) - 1
	var errs []error
	for i := range b.backends {
		addr := b.backends[(start+uint64(i))%uint64(len(b.backends))]
		conn, err := net.DialTimeout("tcp", addr, dialTimeout)
		if err == nil {
			return conn, nil
		}
		errs = append(errs, err)
	}
	return nil, errors.Join(errs...)
}

func (b *balancer) proxy(client net.Conn) {
	defer b.wg.Done()
	backend, err := b.dial()
	if err != nil || !b.track(client, backend) {
		client.Close()
		if backend != nil {
			backend.Close()
		}
		return
	}
	// Either side ending ends both: a killed replica must not leave the
	// client waiting on a connection that leads nowhere.
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		_, _ = io.Copy(dst, src)
		done <- struct{}{}
	}
	go pipe(backend, client)
	go pipe(client, backend)
	<-done
	client.Close()
	backend.Close()
	<-done
	b.untrack(client, backend)
}

// track records an open pair so close can end it; false once closed.
func (b *balancer) track(conns ...net.Conn) bool {
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.closed {
		return false
	}
	for _, c := range conns {
		b.conns[c] = struct{}{}
	}
	return true
}

func (b *balancer) untrack(conns ...net.Conn) {
	b.mu.Lock()
	defer b.mu.Unlock()
	for _, c := range conns {
		delete(b.conns, c)
	}
}

// close stops accepting, ends every open connection and waits for the
// goroutines that served them.
func (b *balancer) close() {
	b.ln.Close()
	b.mu.Lock()
	b.closed = true
	for c := range b.conns {
		c.Close()
	}
	b.mu.Unlock()
	b.wg.Wait()
}
