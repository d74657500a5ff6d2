// Package app is the controller command: flags, clients, leader election,
// health and metrics endpoints, and the loops.
package app

import (
	"fmt"
	"time"

	"github.com/spf13/pflag"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	componentbaseconfig "k8s.io/component-base/config"
	"k8s.io/component-base/config/options"
	"k8s.io/component-base/logs"
)

// Options are the controller's flags.
type Options struct {
	Kubeconfig       string
	BindAddress      string
	MetricsAddress   string
	Profiling        bool
	InstanceWorkers  int
	TypeWorkers      int
	ClaimWorkers     int
	HolderImage      string
	ClaimLostGrace   time.Duration
	SSHImage         string
	AdmissionBackoff time.Duration
	AdmissionWindow  time.Duration
	QPS              float32
	Burst            int
	LeaderElection   componentbaseconfig.LeaderElectionConfiguration
	Logs             *logs.Options
}

// NewOptions returns the defaults: those of a production deployment.
func NewOptions() *Options {
	return &Options{
		BindAddress:      ":8080",
		MetricsAddress:   "127.0.0.1:8081",
		InstanceWorkers:  8,
		TypeWorkers:      2,
		ClaimWorkers:     4,
		HolderImage:      "registry.k8s.io/pause:3.10",
		ClaimLostGrace:   5 * time.Minute,
		AdmissionBackoff: 2 * time.Second,
		AdmissionWindow:  5 * time.Minute,
		QPS:              50,
		Burst:            100,
		LeaderElection: componentbaseconfig.LeaderElectionConfiguration{
			LeaderElect:       true,
			LeaseDuration:     metav1.Duration{Duration: 15 * time.Second},
			RenewDeadline:     metav1.Duration{Duration: 10 * time.Second},
			RetryPeriod:       metav1.Duration{Duration: 2 * time.Second},
			ResourceLock:      "leases",
			ResourceName:      "kiln-controller",
			ResourceNamespace: "kiln-system",
		},
		Logs: logs.NewOptions(),
	}
}

// AddFlags registers the flags.
func (o *Options) AddFlags(fs *pflag.FlagSet) {
	fs.StringVar(&o.Kubeconfig, "kubeconfig", o.Kubeconfig, "kubeconfig of the cluster; empty means in-cluster configuration. Kiln's API is reached through the cluster's aggregator.")
	fs.StringVar(&o.BindAddress, "bind-address", o.BindAddress, "address of the /healthz and /livez endpoints")
	fs.StringVar(&o.MetricsAddress, "metrics-bind-address", o.MetricsAddress, "address of /metrics, unauthenticated: keep it on loopback (scrape through a sidecar) or behind a NetworkPolicy; empty turns it off")
	fs.BoolVar(&o.Profiling, "profiling", o.Profiling, "also serve Go's /debug/pprof on --metrics-bind-address, as unauthenticated as /metrics, so off by default")
	fs.IntVar(&o.InstanceWorkers, "instance-workers", o.InstanceWorkers, "Instances reconciled at once")
	fs.IntVar(&o.TypeWorkers, "instancetype-workers", o.TypeWorkers, "InstanceTypes reconciled at once")
	fs.IntVar(&o.ClaimWorkers, "claim-workers", o.ClaimWorkers, "Claims reconciled at once")
	fs.StringVar(&o.HolderImage, "claim-holder-image", o.HolderImage, "image of the Pods that hold Claims' cards; it only has to run (a pause image)")
	fs.DurationVar(&o.ClaimLostGrace, "claim-lost-grace", o.ClaimLostGrace, "how long a Claim's node may be NotReady before the Claim is Lost and placed again")
	fs.StringVar(&o.SSHImage, "ssh-image", o.SSHImage, "image of the SSH sidecar of Instances with spec.ssh (an sshd reading authorized keys from /etc/kiln/ssh); without it such Instances fail with a message saying so")
	fs.DurationVar(&o.AdmissionBackoff, "admission-failure-backoff", o.AdmissionBackoff, "wait before rebuilding a Pod the kubelet refused at admission; doubles with each rebuild")
	fs.DurationVar(&o.AdmissionWindow, "admission-failure-window", o.AdmissionWindow, "how long after the first refusal rebuilds go on before the Pod is left failed")
	fs.Float32Var(&o.QPS, "kube-api-qps", o.QPS, "queries per second to the API servers")
	fs.IntVar(&o.Burst, "kube-api-burst", o.Burst, "burst of queries to the API servers")
	options.BindLeaderElectionFlags(&o.LeaderElection, fs)
}

// Validate checks the flags.
func (o *Options) Validate() error {
	switch {
	case o.InstanceWorkers < 1 || o.TypeWorkers < 1 || o.ClaimWorkers < 1:
		return fmt.Errorf("--instance-workers, --instancetype-workers and --claim-workers must be at least 1")
	case o.HolderImage == "" || o.ClaimLostGrace <= 0:
		return fmt.Errorf("--claim-holder-image must be set and --claim-lost-grace must be positive")
	case o.AdmissionBackoff <= 0 || o.AdmissionWindow <= 0:
		return fmt.Errorf("--admission-failure-backoff and --admission-failure-window must be positive")
	case o.LeaderElection.LeaderElect && o.LeaderElection.ResourceLock != "leases":
		return fmt.Errorf("--leader-elect-resource-lock must be leases")
	}
	return nil
}
