// Package testserver runs a real Kiln API server in-process, in standalone
// mode (embedded etcd, HTTPS on loopback), for integration tests.
package testserver

import (
	"context"
	"fmt"
	"io"
	"net"
	"os"
	"time"

	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"kiln.dev/kiln/pkg/apiserver"
)

// Server is a running test server.
type Server struct {
	// Config is the admin client config of the server.
	Config *rest.Config
	// KubeconfigPath is the admin kubeconfig the server wrote.
	KubeconfigPath string
	// DataDir holds the server's etcd data and credentials.
	DataDir string
	// EtcdURL is the embedded etcd's client URL.
	EtcdURL string

	cancel context.CancelFunc
	done   chan error
}

// Start runs a server with its data in dataDir and waits until it is ready.
// customize, when not nil, may change the options before the server starts.
func Start(dataDir string, out io.Writer, customize func(*apiserver.Options)) (*Server, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return nil, err
	}
	o := apiserver.NewOptions(out)
	o.Standalone.Enabled = true
	o.Standalone.DataDir = dataDir
	if err := o.Complete(false, true); err != nil {
		return nil, err
	}
	o.RecommendedOptions.SecureServing.Listener = l
	o.RecommendedOptions.SecureServing.BindPort = l.Addr().(*net.TCPAddr).Port
	if customize != nil {
		customize(o)
	}
	if err := o.Validate(); err != nil {
		return nil, err
	}

	ctx, cancel := context.WithCancel(context.Background())
	s := &Server{KubeconfigPath: o.Standalone.KubeconfigPath, DataDir: dataDir, cancel: cancel, done: make(chan error, 1)}
	_ = os.Remove(s.KubeconfigPath)
	go func() { s.done <- o.Run(ctx) }()

	if err := s.waitReady(ctx); err != nil {
		s.Stop()
		return nil, err
	}
	s.EtcdURL = o.Standalone.EtcdClientURL()
	return s, nil
}

func (s *Server) waitReady(ctx context.Context) error {
	var lastErr error
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		select {
		case err := <-s.done:
			return false, fmt.Errorf("server exited: %w", err)
		default:
		}
		if _, err := os.Stat(s.KubeconfigPath); err != nil {
			return false, nil
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", s.KubeconfigPath)
		if err != nil {
			lastErr = err
			return false, nil
		}
		client, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return false, err
		}
		body, err := client.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			lastErr = fmt.Errorf("readyz: %w: %s", err, body)
			return false, nil
		}
		// Tests create hundreds of objects; client-go's default of 5 QPS
		// would make them wait, not the server.
		cfg.QPS, cfg.Burst = 1000, 2000
		s.Config = cfg
		return true, nil
	})
	if err != nil && lastErr != nil {
		return fmt.Errorf("%w (last: %w)", err, lastErr)
	}
	return err
}

// Stop shuts the server and its etcd down and waits for them.
func (s *Server) Stop() {
	s.cancel()
	select {
	case <-s.done:
	case <-time.After(time.Minute):
	}
}
