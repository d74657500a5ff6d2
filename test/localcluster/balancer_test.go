package localcluster

import (
	"bufio"
	"fmt"
	"net"
	"testing"
	"time"
)

// echoServer answers every line on a connection with its own name, so a
// client can tell which backend the balancer chose.
func echoServer(t *testing.T, name string) net.Listener {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	go func() {
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer conn.Close()
				sc := bufio.NewScanner(conn)
				for sc.Scan() {
					fmt.Fprintln(conn, name)
				}
			}()
		}
	}()
	t.Cleanup(func() { ln.Close() })
	return ln
}

// closedAddr is a loopback address nothing listens on.
func closedAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	return addr
}

func TestBalancer(t *testing.T) {
	a, b := echoServer(t, "a"), echoServer(t, "b")
	for _, tc := range []struct {
		name     string
		backends []string
		want     map[string]int
	}{
		{"both live take turns", []string{a.Addr().String(), b.Addr().String()}, map[string]int{"a": 5, "b": 5}},
		{"a refused replica is passed over", []string{closedAddr(t), b.Addr().String()}, map[string]int{"b": 10}},
		{"the refused one second", []string{a.Addr().String(), closedAddr(t)}, map[string]int{"a": 10}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			lb, err := startBalancer("127.0.0.1:0", tc.backends)
			if err != nil {
				t.Fatal(err)
			}
			defer lb.close()
			got := map[string]int{}
			for range 10 {
				got[ask(t, lb.ln.Addr().String())]++
			}
			if fmt.Sprint(got) != fmt.Sprint(tc.want) {
				t.Errorf("connections reached %v, want %v", got, tc.want)
			}
		})
	}
}

// TestBalancerCloseEndsConnections: Stop must not hang on a client that
// keeps its connection open.
func TestBalancerCloseEndsConnections(t *testing.T) {
	lb, err := startBalancer("127.0.0.1:0", []string{echoServer(t, "a").Addr().String()})
	if err != nil {
		t.Fatal(err)
	}
	conn, err := net.Dial("tcp", lb.ln.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintln(conn, "hello")
	if _, err := bufio.NewReader(conn).ReadString('\n'); err != nil {
		t.Fatal(err)
	}
	closed := make(chan struct{})
	go func() { lb.close(); close(closed) }()
	select {
	case <-closed:
	case <-time.After(5 * time.Second):
		t.Fatal("close still waiting after 5s on an open connection")
	}
	if _, err := net.DialTimeout("tcp", lb.ln.Addr().String(), time.Second); err == nil {
		t.Error("the balancer still accepts after close")
	}
}

// ask opens a connection through the balancer and returns the name of
// the backend that answered.
func ask(t *testing.T, addr string) string {
	t.Helper()
	conn, err := net.DialTimeout("tcp", addr, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if err := conn.SetDeadline(time.Now().Add(5 * time.Second)); err != nil {
		t.Fatal(err)
	}
	fmt.Fprintln(conn, "who")
	name, err := bufio.NewReader(conn).ReadString('\n')
	if err != nil {
		t.Fatal(err)
	}
	return name[:len(name)-1]
}
