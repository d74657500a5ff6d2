// Package app is the cobra command of the Kiln API server.
package app

import (
	"context"
	"io"

	"github.com/spf13/cobra"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	utilfeature "k8s.io/apiserver/pkg/util/feature"
	basecompatibility "k8s.io/component-base/compatibility"
	logsapi "k8s.io/component-base/logs/api/v1"
	"k8s.io/component-base/version"

	"kiln.dev/kiln/pkg/apiserver"
)

func init() {
	// --logging-format and friends are gated on the kube feature gate.
	utilruntime.Must(logsapi.AddFeatureGates(utilfeature.DefaultMutableFeatureGate))
}

// NewCommand returns the kiln-apiserver command.
func NewCommand(ctx context.Context, out io.Writer) *cobra.Command {
	o := apiserver.NewOptions(out)
	logs := logsapi.NewLoggingConfiguration()
	cmd := &cobra.Command{
		Use:   "kiln-apiserver",
		Short: "Serve the gpu.kiln.dev API",
		Long: `kiln-apiserver serves Instances, InstanceTypes, Claims and Budgets of the
gpu.kiln.dev API group. By default it runs as an aggregated API server of a
Kubernetes cluster, delegating authentication and authorization to it and
storing objects in the etcd named by --etcd-servers. With --standalone it
runs on its own on 127.0.0.1 with an embedded etcd.`,
		// --version: what make stamps into component-base's version.
		Version:      version.Get().GitVersion,
		SilenceUsage: true,
		PersistentPreRunE: func(*cobra.Command, []string) error {
			return o.ComponentGlobalsRegistry.Set()
		},
		RunE: func(c *cobra.Command, args []string) error {
			if err := logsapi.ValidateAndApply(logs, o.ComponentGlobalsRegistry.FeatureGateFor(basecompatibility.DefaultKubeComponent)); err != nil {
				return err
			}
			if err := o.Complete(c.Flags().Changed("bind-address"), c.Flags().Changed("secure-port")); err != nil {
				return err
			}
			if err := o.Validate(); err != nil {
				return err
			}
			return o.Run(c.Context())
		},
	}
	cmd.SetContext(ctx)
	cmd.AddCommand(newEtcdPKICommand(out), newServingCertCommand(out))
	o.AddFlags(cmd.Flags())
	logsapi.AddFlags(logs, cmd.Flags())
	return cmd
}
