package localcluster_test

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"kiln.dev/kiln/test/localcluster"
)

var instanceTypes = schema.GroupVersionResource{Group: "gpu.kiln.dev", Version: "v1alpha1", Resource: "instancetypes"}

// TestReplicasOutliveAKill: with two Kiln replicas and three etcd members,
// SIGKILL of one replica or one member is not seen through the aggregator
// for more than a few seconds, as the other replica serves and the other
// members keep a quorum.
func TestReplicasOutliveAKill(t *testing.T) {
	if testing.Short() {
		if os.Getenv("KILN_TESTS_MUST_RUN") != "" {
			t.Fatal("-short under KILN_TESTS_MUST_RUN: CI runs every test")
		}
		t.Skip("-short: starts a local control plane; make e2e runs it without -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: filepath.Join(t.TempDir(), "local"), BinDir: filepath.Join(root, "_output", "bin"), RepoRoot: root,
		// Only what the test needs: no nodes, no controller.
		Nodes: []localcluster.NodeSpec{}, NoController: true,
		KilnReplicas: 2, EtcdMembers: 3,
		Log: t.Output(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer c.Stop()
	supervised, stopSupervising := context.WithCancel(ctx)
	supervisorDone := make(chan struct{})
	go func() { c.Supervise(supervised); close(supervisorDone) }()
	defer func() { stopSupervising(); <-supervisorDone }()

	if urls := c.EtcdURLs(); len(urls) != 3 || urls[0] != c.EtcdURL() {
		t.Errorf("EtcdURLs() = %v, want three starting with EtcdURL() %s", urls, c.EtcdURL())
	}
	for _, url := range c.EtcdURLs() {
		if body, err := get(url + "/health"); err != nil || !strings.Contains(body, `"health":"true"`) {
			t.Errorf("GET %s/health: %s %v", url, body, err)
		}
	}
	if urls := c.KilnReplicaURLs(); len(urls) != 2 || urls[0] == c.KilnURL || urls[1] == c.KilnURL {
		t.Errorf("KilnReplicaURLs() = %v, want two apart from KilnURL %s", urls, c.KilnURL)
	}

	dyn, err := dynamic.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	list := func(ctx context.Context) error {
		_, err := dyn.Resource(instanceTypes).List(ctx, metav1.ListOptions{})
		return err
	}
	// A try cut short may still be stored: each gets a name of its own.
	create := func(prefix string) func(context.Context) error {
		return func(ctx context.Context) error {
			it := &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": "gpu.kiln.dev/v1alpha1", "kind": "InstanceType",
				"metadata": map[string]any{"generateName": prefix},
				"spec":     map[string]any{"displayName": prefix, "resourcesPerCard": map[string]any{"cpu": "1", "memory": "1Gi"}},
			}}
			_, err := dyn.Resource(instanceTypes).Create(ctx, it, metav1.CreateOptions{})
			return err
		}
	}
	if err := within(ctx, t, time.Second, list); err != nil {
		t.Fatalf("listing instancetypes through the aggregator: %v", err)
	}

	for _, tc := range []struct {
		kill string
		do   func(context.Context) error
	}{
		{"kiln-apiserver", list},
		{"etcd-1", create("after-etcd-1-")},
	} {
		pid, err := c.Kill(tc.kill)
		if err != nil {
			t.Fatal(err)
		}
		// New connections to the front door: once a replica is killed,
		// the balancer tries it first for half of them.
		for i := range 4 {
			if err := handshake(c); err != nil {
				t.Errorf("TLS handshake %d through %s after killing %s: %v", i, c.KilnURL, tc.kill, err)
			}
		}
		// Killing etcd's leader holds writes until the others elect one,
		// a few seconds on a busy machine.
		start := time.Now()
		if err := within(ctx, t, 10*time.Second, tc.do); err != nil {
			t.Errorf("after killing %s (PID %d): %v", tc.kill, pid, err)
		} else {
			t.Logf("served through the aggregator %s after killing %s", time.Since(start).Round(time.Millisecond), tc.kill)
		}
		for deadline := time.Now().Add(30 * time.Second); c.Restarts(tc.kill) != 1; time.Sleep(200 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("the supervisor did not start %s again within 30s", tc.kill)
			}
		}
	}
}

// within retries do, each try cut at 3 s, until it succeeds or timeout
// passes, and returns the last error.
func within(ctx context.Context, t *testing.T, timeout time.Duration, do func(context.Context) error) error {
	deadline := time.Now().Add(timeout)
	for {
		try, cancel := context.WithTimeout(ctx, 3*time.Second)
		err := do(try)
		cancel()
		if err == nil || time.Now().After(deadline) {
			return err
		}
		t.Logf("retrying: %v", err)
		time.Sleep(200 * time.Millisecond)
	}
}

// handshake opens a connection to KilnURL and completes TLS on it, which
// only a live replica does.
func handshake(c *localcluster.Cluster) error {
	ca, err := os.ReadFile(c.KilnCAFile)
	if err != nil {
		return err
	}
	pool := x509.NewCertPool()
	pool.AppendCertsFromPEM(ca)
	conn, err := tls.DialWithDialer(&net.Dialer{Timeout: 5 * time.Second}, "tcp",
		strings.TrimPrefix(c.KilnURL, "https://"), &tls.Config{RootCAs: pool})
	if err != nil {
		return err
	}
	return conn.Close()
}

func get(url string) (string, error) {
	client := &http.Client{Timeout: 5 * time.Second}
	resp, err := client.Get(url)
	if err != nil {
		return "", err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusOK {
		return string(body), fmt.Errorf("status %d", resp.StatusCode)
	}
	return string(body), err
}
