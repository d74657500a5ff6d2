package e2e

import (
	"context"
	"encoding/pem"
	"io"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"sync"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/rest"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestStopWaitsForTheLivePod (issue O, class 8): kiln-controller reports
// a stopped Instance Stopped, which releases its cards from its Budgets,
// only once the API server has no Pod of it, not on its informer's word.
// The controller runs behind a proxy that holds back its watch of Pods, so
// its cache never sees the Pod it makes; the tenant then stops the
// Instance. While the Pod exists, the Instance must not say Stopped.
func TestStopWaitsForTheLivePod(t *testing.T) {
	ns := "e2e-stop-live"
	controllerNamespace(t, ns)
	ctx := context.Background()
	proxy := newWatchHoldingProxy(t)
	if err := cluster.KillController(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		proxy.release()
		if err := cluster.KillController(); err != nil {
			t.Errorf("stopping the proxied controller: %v", err)
		}
		if err := cluster.StartController(ctx); err != nil {
			t.Errorf("starting the controller again: %v", err)
		}
	})
	if err := cluster.StartControllerVia(ctx, proxy.URL, proxy.caFile); err != nil {
		t.Fatal(err)
	}

	// Once the controller leads and its caches are synced, which an
	// Instance it runs shows, its Pod watch is held.
	mustKubectl(t, tenant(tenantA), instance("seen", ns, "h100", "busybox:1"), "create", "-f", "-")
	waitInstance(t, ns, "seen", 2*time.Minute, "Ready", phaseIs(gpuv1.InstanceReady))
	proxy.hold()
	mustKubectl(t, tenant(tenantA), instance("unseen", ns, "h100", "busybox:1"), "create", "-f", "-")
	t.Cleanup(func() { kubectl(tenant(tenantA), "", "delete", "instance", "unseen", "-n", ns, "--wait=false") })
	kube, _ := adminClients(t)
	waitFor(t, "the Instance's Pod bound, unseen by the controller", time.Minute,
		func(ctx context.Context) (string, error) {
			p, err := kube.CoreV1().Pods(ns).Get(ctx, "unseen", metav1.GetOptions{})
			if err != nil {
				return "", err
			}
			return p.Spec.NodeName, nil
		},
		func(node string) bool { return node != "" },
		func(node string) any { return node })

	mustKubectl(t, tenant(tenantA), "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/unseen/stop", "-f", "-")
	instances := kilnAdmin(t).GpuV1alpha1().Instances(ns)
	// The controller deletes the Pod it finds with a live read; until
	// it is gone, no Stopped.
	sawGone := false
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 20*time.Second, true, func(ctx context.Context) (bool, error) {
		inst, err := instances.Get(ctx, "unseen", metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		_, podErr := kube.CoreV1().Pods(ns).Get(ctx, "unseen", metav1.GetOptions{})
		stopped := inst.Status.Phase == gpuv1.InstanceStopped && inst.Status.ObservedGeneration == inst.Generation
		if stopped && podErr == nil {
			t.Fatalf("instance unseen reports Stopped, its cards released, while its Pod exists")
		}
		sawGone = apierrors.IsNotFound(podErr)
		return sawGone, nil
	})
	if err != nil {
		t.Fatalf("the controller did not delete the Pod its cache lacks: %v", err)
	}
	proxy.release()
	waitInstance(t, ns, "unseen", time.Minute, "Stopped", phaseIs(gpuv1.InstanceStopped))
}

// watchHoldingProxy passes kiln-controller's requests to kube-apiserver,
// and, while held, holds back what its watches of Pods deliver.
type watchHoldingProxy struct {
	*httptest.Server
	caFile string

	mu   sync.Mutex
	cond *sync.Cond
	held bool
}

func newWatchHoldingProxy(t *testing.T) *watchHoldingProxy {
	t.Helper()
	upstream, err := url.Parse(cluster.AdminConfig.Host)
	if err != nil {
		t.Fatal(err)
	}
	// Only the cluster's CA: the controller's own token passes through,
	// so the API server sees the controller, not the proxy.
	tlsCfg, err := rest.TLSConfigFor(&rest.Config{TLSClientConfig: rest.TLSClientConfig{
		CAFile: cluster.AdminConfig.CAFile, CAData: cluster.AdminConfig.CAData,
	}})
	if err != nil {
		t.Fatal(err)
	}
	p := &watchHoldingProxy{}
	p.cond = sync.NewCond(&p.mu)
	rp := &httputil.ReverseProxy{
		Rewrite:       func(r *httputil.ProxyRequest) { r.SetURL(upstream) },
		Transport:     &http.Transport{TLSClientConfig: tlsCfg, ForceAttemptHTTP2: true},
		FlushInterval: -1,
		ModifyResponse: func(resp *http.Response) error {
			q := resp.Request.URL.Query()
			if resp.Request.URL.Path == "/api/v1/pods" && q.Get("watch") == "true" {
				resp.Body = &heldBody{ReadCloser: resp.Body, p: p}
			}
			return nil
		},
	}
	p.Server = httptest.NewUnstartedServer(rp)
	p.EnableHTTP2 = true
	p.StartTLS()
	t.Cleanup(p.Close)
	p.caFile = filepath.Join(t.TempDir(), "proxy-ca.crt")
	if err := os.WriteFile(p.caFile, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: p.Certificate().Raw}), 0o644); err != nil {
		t.Fatal(err)
	}
	return p
}

func (p *watchHoldingProxy) hold() {
	p.mu.Lock()
	p.held = true
	p.mu.Unlock()
}

func (p *watchHoldingProxy) release() {
	p.mu.Lock()
	p.held = false
	p.cond.Broadcast()
	p.mu.Unlock()
}

// heldBody delivers what it read only while its proxy is not held; what
// arrives meanwhile waits.
type heldBody struct {
	io.ReadCloser
	p *watchHoldingProxy
}

func (b *heldBody) Read(buf []byte) (int, error) {
	n, err := b.ReadCloser.Read(buf)
	b.p.mu.Lock()
	for b.p.held {
		b.p.cond.Wait()
	}
	b.p.mu.Unlock()
	return n, err
}
