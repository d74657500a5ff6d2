// Package kubeletstub is the kubelet's side of the device plugin API, for
// tests: it serves Registration on kubelet.sock in a directory of its own
// and calls the plugins that register, as the kubelet's device manager
// does.
package kubeletstub

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"testing"
	"time"

	"google.golang.org/grpc"
	"google.golang.org/grpc/codes"
	"google.golang.org/grpc/credentials/insecure"
	"google.golang.org/grpc/status"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Kubelet is a running stub.
type Kubelet struct {
	pluginapi.UnimplementedRegistrationServer
	t          testing.TB
	dir        string
	srv        *grpc.Server
	registered chan *pluginapi.RegisterRequest
}

// Start serves kubelet.sock in dir until the test ends.
func Start(t testing.TB, dir string) *Kubelet {
	k := &Kubelet{t: t, dir: dir, registered: make(chan *pluginapi.RegisterRequest, 16)}
	k.serve()
	t.Cleanup(func() { k.srv.Stop() })
	return k
}

func (k *Kubelet) serve() {
	l, err := net.Listen("unix", filepath.Join(k.dir, "kubelet.sock"))
	if err != nil {
		k.t.Fatal(err)
	}
	k.srv = grpc.NewServer()
	pluginapi.RegisterRegistrationServer(k.srv, k)
	go func() { _ = k.srv.Serve(l) }()
}

// Restart does what a restarting kubelet does to the directory: every
// socket in it goes, and its own comes back.
func (k *Kubelet) Restart() {
	k.srv.Stop()
	entries, err := os.ReadDir(k.dir)
	if err != nil {
		k.t.Fatal(err)
	}
	for _, e := range entries {
		if err := os.Remove(filepath.Join(k.dir, e.Name())); err != nil {
			k.t.Fatal(err)
		}
	}
	k.serve()
}

// Register takes a plugin's registration, of the API version the kubelet
// speaks only.
func (k *Kubelet) Register(_ context.Context, r *pluginapi.RegisterRequest) (*pluginapi.Empty, error) {
	if r.Version != pluginapi.Version {
		return nil, status.Errorf(codes.InvalidArgument, "version %q", r.Version)
	}
	k.registered <- r
	return &pluginapi.Empty{}, nil
}

// Registrations waits up to 30 s for registrations of n resources and
// returns them by resource name.
func (k *Kubelet) Registrations(n int) map[string]*pluginapi.RegisterRequest {
	k.t.Helper()
	out := map[string]*pluginapi.RegisterRequest{}
	for len(out) < n {
		select {
		case r := <-k.registered:
			out[r.ResourceName] = r
		case <-time.After(30 * time.Second):
			k.t.Fatalf("registered %v, want %d resources", out, n)
		}
	}
	return out
}

// Dial connects to a registered plugin as the kubelet does, by its
// endpoint in the directory.
func (k *Kubelet) Dial(r *pluginapi.RegisterRequest) pluginapi.DevicePluginClient {
	k.t.Helper()
	conn, err := grpc.NewClient("unix://"+filepath.Join(k.dir, r.Endpoint), grpc.WithTransportCredentials(insecure.NewCredentials()))
	if err != nil {
		k.t.Fatal(err)
	}
	k.t.Cleanup(func() { conn.Close() })
	return pluginapi.NewDevicePluginClient(conn)
}
