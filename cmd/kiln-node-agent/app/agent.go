// Package app is the node agent's command: flags, the device backend and
// the clients it reports with.
package app

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"time"

	"github.com/spf13/cobra"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"
	"k8s.io/klog/v2"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"kiln.dev/kiln/pkg/deviceplugin"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/pkg/nodeagent"
)

// DefaultPodResourcesSocket is where the kubelet serves its PodResources
// API.
const DefaultPodResourcesSocket = "/var/lib/kubelet/pod-resources/kubelet.sock"

// NewCommand returns the node agent's command; it runs until ctx is done.
func NewCommand(ctx context.Context) *cobra.Command {
	var (
		inventory, dir, nodeName, kubeconfig, podResources string
		fakeCards, cdiSpecs, metricsAddress                string
		mpsResource, mpsDir, mpsControl                    string
		mpsShares                                          int
		cdi, simulate                                      bool
		sampleInterval                                     time.Duration
		activeThreshold                                    int32
	)
	logs := logsapi.NewLoggingConfiguration()
	cmd := &cobra.Command{
		Use:   "kiln-node-agent",
		Short: "Serve this node's accelerators to the kubelet, as a DaemonSet on GPU nodes",
		Long: `kiln-node-agent is Kiln's node agent. It registers a kubelet device plugin
for each resource name this node's accelerators are served under:
nvidia.com/gpu for whole cards and nvidia.com/mig-<profile> for each MIG
profile (the mixed strategy). These are the names NVIDIA's device plugin
uses, so it replaces that plugin on the nodes where it runs; do not run
both. With --mps-shares it serves each whole card as that many CUDA MPS
shares of nvidia.com/gpu.shared instead, for InstanceTypes whose slices
are isolated by MPS.

Devices and their health come from NVML, or from --inventory, a YAML file
of devices, on nodes without NVIDIA's driver (simulated nodes, tests).
With --node-name it reports them, and what holds each, as the node's
NodeDevices; with --simulate it also stands in for the kubelet of a
simulated node, allocating devices to the Pods bound to it.`,
		Example: `  # On a GPU node, as artifacts/deploy/node-agent.yaml runs it:
  kiln-node-agent
  # A simulated node:
  kiln-node-agent --inventory devices.yaml --device-plugin-dir /tmp/device-plugins`,
		Args:         cobra.NoArgs,
		Version:      version.Get().GitVersion,
		SilenceUsage: true,
		// Persistent, so that under kiln-controller's deprecated `node`
		// these flags apply and not the root command's.
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return logsapi.ValidateAndApply(logs, nil)
		},
		RunE: func(*cobra.Command, []string) error {
			var backend deviceplugin.Backend = &deviceplugin.Static{Path: inventory}
			if inventory == "" {
				var err error
				if backend, err = deviceplugin.NewNVMLFromSystem(); err != nil {
					return err
				}
			}
			if fakeCards != "" {
				if inventory == "" {
					return fmt.Errorf("--fake-cards-dir needs --inventory: its cards are the fake ones")
				}
				devices, err := backend.Devices()
				if err != nil {
					return err
				}
				if err := deviceplugin.WriteFakeCards(fakeCards, cdiSpecs, devices); err != nil {
					return err
				}
				cdi = true
			}
			m := &deviceplugin.Manager{Backend: backend, Dir: dir, CDI: cdi}
			if mpsShares > 0 {
				m.MPS = &deviceplugin.MPSControl{Dir: mpsDir, Command: mpsControl}
				m.Backend = &deviceplugin.MPS{Backend: backend, Shares: mpsShares, Resource: mpsResource, Control: m.MPS}
			}
			if simulate {
				m.Dir = ""
			}
			if nodeName == "" {
				if simulate {
					return fmt.Errorf("--simulate needs --node-name: it allocates the devices of that node's Pods")
				}
				return m.Run(ctx)
			}
			kube, kiln, err := newClients(kubeconfig)
			if err != nil {
				return err
			}
			if activeThreshold < 0 || activeThreshold > 100 {
				return fmt.Errorf("--active-threshold %d: want a percentage, 0 to 100", activeThreshold)
			}
			if sampleInterval <= 0 {
				return fmt.Errorf("--sample-interval %v: want a positive duration, e.g. 10s", sampleInterval)
			}
			agent := &nodeagent.Agent{Manager: m, Kube: kube, Kiln: kiln, Node: nodeName, Simulate: simulate, PodResources: podResources,
				SampleInterval: sampleInterval, ActiveThreshold: activeThreshold}
			if metricsAddress != "" {
				stop, err := serveMetrics(ctx, metricsAddress, agent.MetricsHandler())
				if err != nil {
					return err
				}
				defer stop()
			}
			return agent.Run(ctx)
		},
	}
	fs := cmd.Flags()
	fs.DurationVar(&sampleInterval, "sample-interval", 10*time.Second, "how often each device's utilization and memory in use are sampled; NodeDevices gets the utilization smoothed over recent samples, written at once for a change of more than 10 points, of more than 1Gi of memory, or a device waking up, and for smaller ones at most once a minute")
	fs.Int32Var(&activeThreshold, "active-threshold", nodeagent.DefaultActiveThreshold, "the utilization, in percent, above which a device counts as active (its lastActiveTime in NodeDevices)")
	fs.StringVar(&metricsAddress, "metrics-bind-address", "", "serve each device's utilization, memory in use, last activity and health as Prometheus metrics at /metrics on this address (e.g. :9400); off when empty. Their labels name the namespace, Pod and Instance holding each device: keep the address closed to tenants (artifacts/monitoring has a NetworkPolicy)")
	fs.StringVar(&inventory, "inventory", "", "a YAML file of this node's devices, read instead of NVML and again whenever it changes")
	fs.StringVar(&dir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory, where its registration socket is")
	fs.BoolVar(&cdi, "cdi", true, "give containers their devices as CDI names (nvidia.com/gpu=<UUID>) as well as in NVIDIA_VISIBLE_DEVICES; the runtime needs NVIDIA's CDI spec (nvidia-ctk cdi generate). With it, NVIDIA's toolkit can be set to ignore NVIDIA_VISIBLE_DEVICES from unprivileged containers, which a tenant's Pod could otherwise set to reach every card. --cdi=false leaves the variable alone to pick the devices")
	fs.StringVar(&nodeName, "node-name", os.Getenv("NODE_NAME"), "this node's name; with it the agent reports the node's devices and their holders as the NodeDevices of that name")
	fs.StringVar(&podResources, "pod-resources-socket", DefaultPodResourcesSocket, "the kubelet's pod-resources socket, which says which Pod holds which device")
	fs.StringVar(&kubeconfig, "kubeconfig", "", "kubeconfig to report with; in-cluster configuration if empty")
	fs.StringVar(&fakeCards, "fake-cards-dir", "", "on a real node without NVIDIA's driver: make a harmless device node here for each card of --inventory, write a CDI spec to --cdi-spec-dir giving each at /dev/nvidia<index>, and allocate by CDI (implies --cdi)")
	fs.StringVar(&cdiSpecs, "cdi-spec-dir", "/var/run/cdi", "where --fake-cards-dir writes its CDI spec; one of the container runtime's CDI spec directories")
	fs.BoolVar(&simulate, "simulate", false, "stand in for the kubelet of a simulated node (kwok): allocate the devices of the Pods bound to --node-name, serving no kubelet")
	fs.IntVar(&mpsShares, "mps-shares", 0, "serve each whole card as this many CUDA MPS shares of --mps-resource instead of as a card: the node's pool is then for InstanceTypes whose sliced.isolation is MPS with this sharesPerCard. Each card gets an MPS control daemon whose defaults cap every client at one share of its threads and memory")
	fs.StringVar(&mpsResource, "mps-resource", "nvidia.com/gpu.shared", "the extended resource MPS shares are served under (sliced.resourceName of the InstanceTypes)")
	fs.StringVar(&mpsDir, "mps-dir", "/run/kiln/mps", "where each card's MPS pipe and log directories are made; a share's container gets its card's pipe directory")
	fs.StringVar(&mpsControl, "mps-control", "nvidia-cuda-mps-control", "NVIDIA's MPS control program, which the agent starts one daemon of per card")
	logsapi.AddFlags(logs, fs)
	return cmd
}

// newClients are the clients the agent reports with. Kiln's speaks
// protobuf, as kiln-controller's does, and accepts JSON.
func newClients(kubeconfig string) (kubernetes.Interface, versioned.Interface, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("kubeconfig: %w", err)
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, nil, err
	}
	cfg = rest.CopyConfig(cfg)
	cfg.ContentType = runtime.ContentTypeProtobuf
	cfg.AcceptContentTypes = runtime.ContentTypeProtobuf + "," + runtime.ContentTypeJSON
	kiln, err := versioned.NewForConfig(cfg)
	return kube, kiln, err
}

// serveMetrics serves h at /metrics on address until stop is called.
func serveMetrics(ctx context.Context, address string, h http.Handler) (stop func(), err error) {
	ln, err := net.Listen("tcp", address)
	if err != nil {
		return nil, fmt.Errorf("--metrics-bind-address: %w", err)
	}
	mux := http.NewServeMux()
	mux.Handle("/metrics", h)
	srv := &http.Server{Handler: mux, ReadHeaderTimeout: 10 * time.Second}
	go func() {
		if err := srv.Serve(ln); err != nil && !errors.Is(err, http.ErrServerClosed) {
			klog.FromContext(ctx).Error(err, "Metrics server stopped")
		}
	}()
	klog.FromContext(ctx).Info("Serving metrics", "address", ln.Addr().String())
	return func() { _ = srv.Close() }, nil
}
