package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/pprof"
	"os"
	"sync"
	"sync/atomic"
	"time"

	"github.com/google/uuid"
	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apiserver/pkg/server/healthz"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/tools/record"
	"k8s.io/component-base/cli/globalflag"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/metrics/legacyregistry"
	_ "k8s.io/component-base/metrics/prometheus/clientgo"  // client-go request metrics
	_ "k8s.io/component-base/metrics/prometheus/workqueue" // work-queue depth, latency, retries
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	kilnscheme "kiln.dev/kiln/pkg/generated/clientset/versioned/scheme"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	"kiln.dev/kiln/pkg/reconcile/claim"
	"kiln.dev/kiln/pkg/reconcile/instance"
	"kiln.dev/kiln/pkg/reconcile/instancetype"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// Events name Kiln's objects, so the scheme they are recorded with must
// know them.
func init() {
	utilruntime.Must(kilnscheme.AddToScheme(clientgoscheme.Scheme))
}

// NewCommand returns the controller command; it runs until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	o := NewOptions()
	cmd := &cobra.Command{
		Use:          "kiln-controller",
		Short:        "Turns Kiln's Instances into Pods and Services, holds Claims' cards and reports InstanceType capacity",
		Version:      version.Get().GitVersion,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return logsapi.ValidateAndApply(o.Logs, nil)
		},
		RunE: func(cmd *cobra.Command, _ []string) error {
			if err := o.Validate(); err != nil {
				return err
			}
			return Run(ctx, o)
		},
	}
	cmd.AddCommand(newNodeCommand(ctx))
	fs := cmd.Flags()
	o.AddFlags(fs)
	logsapi.AddFlags(o.Logs, fs)
	globalflag.AddGlobalFlags(fs, cmd.Name())
	return cmd
}

// newKilnClientset is Kiln's clientset over a copy of cfg. It speaks
// protobuf, as client-go's clientset does with kube-apiserver: the
// informers' lists and watches are smaller and cheaper to decode than JSON.
// JSON stays acceptable in responses; a server without protobuf refuses
// its writes, so the API server is upgraded first.
func newKilnClientset(cfg *rest.Config) (*versioned.Clientset, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	return versioned.NewForConfig(cfg)
}

// Run serves health and metrics, and runs the loops while this replica
// holds the leader Lease.
func Run(ctx context.Context, o *Options) error {
	logger := klog.FromContext(ctx)
	cfg, err := clientcmd.BuildConfigFromFlags("", o.Kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig: %w", err)
	}
	cfg.QPS, cfg.Burst = o.QPS, o.Burst
	cfg = rest.AddUserAgent(cfg, "kiln-controller")
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	kiln, err := newKilnClientset(cfg)
	if err != nil {
		return err
	}

	broadcaster := record.NewBroadcaster(record.WithContext(ctx))
	broadcaster.StartStructuredLogging(4)
	broadcaster.StartRecordingToSink(&typedcorev1.EventSinkImpl{Interface: kube.CoreV1().Events("")})
	defer broadcaster.Shutdown()
	recorder := broadcaster.NewRecorder(clientgoscheme.Scheme, corev1.EventSource{Component: "kiln-controller"})

	var electionChecker *leaderelection.HealthzAdaptor
	checks := []healthz.HealthChecker{healthz.PingHealthz}
	if o.LeaderElection.LeaderElect {
		electionChecker = leaderelection.NewLeaderHealthzAdaptor(20 * time.Second)
		checks = append(checks, electionChecker)
	}
	mux := http.NewServeMux()
	healthz.InstallHandler(mux, checks...)
	healthz.InstallLivezHandler(mux, checks...)
	stopHealth, err := serve(ctx, "health", "--bind-address", o.BindAddress, mux)
	if err != nil {
		return err
	}
	defer stopHealth()
	// Metrics name namespaces, Instances and Claims of every tenant, and are
	// served without authentication: apart from the probes, on loopback.
	if o.MetricsAddress != "" {
		metrics := http.NewServeMux()
		metrics.Handle("/metrics", legacyregistry.Handler())
		if o.Profiling {
			metrics.HandleFunc("/debug/pprof/", pprof.Index)
			metrics.HandleFunc("/debug/pprof/profile", pprof.Profile)
			metrics.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
			metrics.HandleFunc("/debug/pprof/trace", pprof.Trace)
		}
		stopMetrics, err := serve(ctx, "metrics", "--metrics-bind-address", o.MetricsAddress, metrics)
		if err != nil {
			return err
		}
		defer stopMetrics()
	}

	// A shutdown stops the loops, and only once they have returned (their
	// syncs done) is the Lease handed over: released while a sync still
	// wrote, it let the next leader finalize a Claim this one then gave a
	// holder Pod, two Pods on cards for a Budget of one (test/install's
	// rollback). Lost leadership stops the loops the same way.
	var leading atomic.Bool
	loopsDone := make(chan struct{})
	run := func(leaderCtx context.Context) {
		leading.Store(true)
		defer close(loopsDone)
		loopsCtx, stopLoops := context.WithCancel(leaderCtx)
		defer stopLoops()
		context.AfterFunc(ctx, stopLoops)
		if err := runLoops(loopsCtx, o, kube, kiln, recorder); err != nil {
			logger.Error(err, "Controller loops stopped")
			klog.FlushAndExit(klog.ExitFlushTimeout, 1)
		}
	}
	if !o.LeaderElection.LeaderElect {
		run(ctx)
		return nil
	}
	electionCtx, release := context.WithCancel(context.WithoutCancel(ctx))
	defer release()
	go func() {
		<-ctx.Done()
		if leading.Load() {
			<-loopsDone
		}
		release()
	}()

	host, err := os.Hostname()
	if err != nil {
		return err
	}
	id := host + "_" + uuid.NewString()
	le := o.LeaderElection
	lock, err := resourcelock.New(le.ResourceLock, le.ResourceNamespace, le.ResourceName,
		kube.CoreV1(), kube.CoordinationV1(), resourcelock.ResourceLockConfig{Identity: id, EventRecorder: recorder})
	if err != nil {
		return err
	}
	lost := make(chan struct{})
	leaderelection.RunOrDie(electionCtx, leaderelection.LeaderElectionConfig{
		Lock:          lock,
		LeaseDuration: le.LeaseDuration.Duration,
		RenewDeadline: le.RenewDeadline.Duration,
		RetryPeriod:   le.RetryPeriod.Duration,
		// A replica that is shut down hands the Lease over at once.
		ReleaseOnCancel: true,
		WatchDog:        electionChecker,
		Name:            "kiln-controller",
		Callbacks: leaderelection.LeaderCallbacks{
			OnStartedLeading: run,
			OnStoppedLeading: func() { close(lost) },
			OnNewLeader: func(identity string) {
				logger.Info("Leader", "identity", identity, "self", identity == id)
			},
		},
	})
	if ctx.Err() != nil {
		// Shut down: the Lease was released after the loops stopped.
		return nil
	}
	select {
	case <-ctx.Done():
		return nil
	case <-lost:
		// Another replica may already act: stop at once rather than race
		// it with stale caches; the Pod restarts and campaigns again.
		return fmt.Errorf("lost the leader Lease %s/%s", le.ResourceNamespace, le.ResourceName)
	}
}

// serve serves h on address until the returned stop is called.
func serve(ctx context.Context, what, flag, address string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", flag, err)
	}
	srv := &http.Server{Handler: h, ReadHeaderTimeout: 10 * time.Second}
	logger := klog.FromContext(ctx)
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			logger.Error(err, "Server stopped", "serving", what)
		}
	}()
	logger.Info("Serving", "serving", what, "address", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}

// runLoops starts the informers and the loops, and returns when ctx is done.
func runLoops(ctx context.Context, o *Options, kube kubernetes.Interface, kiln versioned.Interface, recorder record.EventRecorder) error {
	kubeInformers := informers.NewSharedInformerFactory(kube, 0)
	kilnInformers := kilninformers.NewSharedInformerFactory(kiln, 0)
	inf := queue.Informers{Kube: kubeInformers, Kiln: kilnInformers}
	instances, err := instance.NewController(kube, kiln, inf, recorder, instance.Options{
		Render:           instance.RenderOptions{SSHImage: o.SSHImage},
		AdmissionBackoff: o.AdmissionBackoff,
		AdmissionWindow:  o.AdmissionWindow,
	})
	if err != nil {
		return err
	}
	types, err := instancetype.NewController(kiln, inf)
	if err != nil {
		return err
	}
	claims, err := claim.NewController(kube, kiln, inf, recorder, claim.Options{HolderImage: o.HolderImage, LostGrace: o.ClaimLostGrace})
	if err != nil {
		return err
	}
	kubeInformers.Start(ctx.Done())
	kilnInformers.Start(ctx.Done())
	defer kubeInformers.Shutdown()
	defer kilnInformers.Shutdown()

	var wg sync.WaitGroup
	errs := make([]error, 3)
	wg.Go(func() { errs[0] = instances.Run(ctx, o.InstanceWorkers) })
	wg.Go(func() { errs[1] = types.Run(ctx, o.TypeWorkers) })
	wg.Go(func() { errs[2] = claims.Run(ctx, o.ClaimWorkers) })
	wg.Wait()
	return errors.Join(errs...)
}
