package app

import (
	"context"

	"github.com/spf13/cobra"
	logsapi "k8s.io/component-base/logs/api/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"kiln.dev/kiln/pkg/deviceplugin"
)

// newNodeCommand is `kiln-controller node`, the node agent.
func newNodeCommand(ctx context.Context) *cobra.Command {
	var (
		inventory, dir string
		cdi            bool
	)
	logs := logsapi.NewLoggingConfiguration()
	cmd := &cobra.Command{
		Use:   "node",
		Short: "Serve this node's accelerators to the kubelet, as a DaemonSet on GPU nodes",
		Long: `node is Kiln's node agent. It registers a kubelet device plugin for each
resource name this node's accelerators are served under: nvidia.com/gpu for
whole cards and nvidia.com/mig-<profile> for each MIG profile (the mixed
strategy). These are the names NVIDIA's device plugin uses, so it replaces
that plugin on the nodes where it runs; do not run both.

Devices and their health come from NVML, or from --inventory, a YAML file
of devices, on nodes without NVIDIA's driver (simulated nodes, tests).`,
		Example: `  # On a GPU node, as artifacts/deploy/node-agent.yaml runs it:
  kiln-controller node
  # A simulated node:
  kiln-controller node --inventory devices.yaml --device-plugin-dir /tmp/device-plugins`,
		Args:         cobra.NoArgs,
		SilenceUsage: true,
		// Its own, so the root command's logging flags are not applied first.
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
			return (&deviceplugin.Manager{Backend: backend, Dir: dir, CDI: cdi}).Run(ctx)
		},
	}
	fs := cmd.Flags()
	fs.StringVar(&inventory, "inventory", "", "a YAML file of this node's devices, read instead of NVML and again whenever it changes")
	fs.StringVar(&dir, "device-plugin-dir", pluginapi.DevicePluginPath, "the kubelet's device-plugins directory, where its registration socket is")
	fs.BoolVar(&cdi, "cdi", false, "also give containers their devices as CDI names (nvidia.com/gpu=<UUID>), for runtimes set up for CDI")
	logsapi.AddFlags(logs, fs)
	return cmd
}
