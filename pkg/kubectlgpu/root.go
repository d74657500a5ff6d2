// Package kubectlgpu is kubectl-gpu, Kiln's kubectl plugin: the verbs a
// tenant uses on Instances (start, stop, logs, ssh) and the answers to
// "why is it not Ready" (why), "what can I start now" (capacity) and
// "which GPU did I get" (top). Each verb is a file of its own; they share
// the kubeconfig flags of k8s.io/cli-runtime and the clients in Clients,
// which tests replace with fakes.
//
// capacity is composed here, from objects a tenant can already read
// (InstanceTypes' status.capacity, the namespace's Budgets' status), and
// charged with the same arithmetic as admission (pkg/domain/accounting),
// rather than served as a computed read subresource. Both inputs are
// already computed server-side and cheap to read: the controller keeps
// status.capacity current and the Budget plugin keeps status.used exact.
// A subresource would add an endpoint to authorise, document and keep
// compatible, and would answer no more precisely: either way the answer is
// a snapshot the next start can change, and admission and the scheduler
// decide.
package kubectlgpu

import (
	"context"
	"fmt"
	"io"

	"github.com/spf13/cobra"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/cli-runtime/pkg/genericiooptions"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/component-base/version"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/scheme"
)

// Clients are what the verbs talk to.
type Clients struct {
	Kiln versioned.Interface
	// Kube reads Pods and Events, for why.
	Kube kubernetes.Interface
	// Logs opens instances/NAME/log: the generated clientset has no
	// method for a streamed subresource.
	Logs func(ctx context.Context, namespace, name string, opts *v1alpha1.InstanceLogOptions) (io.ReadCloser, error)
}

// Options are shared by every verb.
type Options struct {
	Flags *genericclioptions.ConfigFlags
	IO    genericiooptions.IOStreams
	// NewClients builds the clients; nil builds them from Flags.
	NewClients func() (*Clients, error)
	// RunSSH runs ssh with these arguments, attached to IO; nil runs the
	// ssh on the PATH.
	RunSSH func(args []string) error
}

// NewCommand returns the kubectl-gpu command with every verb.
func NewCommand(o *Options) *cobra.Command {
	if o.Flags == nil {
		o.Flags = genericclioptions.NewConfigFlags(true)
	}
	if o.NewClients == nil {
		o.NewClients = o.clientsFromFlags
	}
	cmd := &cobra.Command{
		Use:   "kubectl-gpu",
		Short: "Start, stop and inspect Kiln GPU Instances",
		Long: `kubectl gpu runs the verbs of Kiln's GPU Instances (gpu.kiln.dev) that plain
kubectl has no words for: start and stop through the instances/start and
instances/stop subresources, logs through instances/log, the ssh command of
an Instance, why an Instance or Claim is not Ready, what this namespace can
start now, and which devices each Instance holds.

It reads the kubeconfig as kubectl does (--kubeconfig, --context, -n).`,
		Example: `  # Stop an Instance, then start it again and wait until it is Ready
  kubectl gpu stop notebook
  kubectl gpu start notebook --wait

  # Why is it still Pending? What could I start instead?
  kubectl gpu why notebook
  kubectl gpu capacity`,
		Annotations:   map[string]string{cobra.CommandDisplayNameAnnotation: "kubectl gpu"},
		Version:       version.Get().GitVersion,
		SilenceUsage:  true,
		SilenceErrors: true,
		CompletionOptions: cobra.CompletionOptions{
			DisableDefaultCmd: true,
		},
	}
	cmd.SetOut(o.IO.Out)
	cmd.SetErr(o.IO.ErrOut)
	cmd.SetIn(o.IO.In)
	o.Flags.AddFlags(cmd.PersistentFlags())
	// Declared here so that cobra does not give it -v, which is kubectl's
	// verbosity.
	cmd.Flags().Bool("version", false, "print the version of kubectl gpu and quit")
	cmd.AddCommand(
		newLifecycleCommand(o, "start"),
		newLifecycleCommand(o, "stop"),
		newLogsCommand(o),
		newSSHCommand(o),
		newWhyCommand(o),
		newCapacityCommand(o),
		newTopCommand(o),
		newUsageCommand(o),
		newCompletionCommand(),
	)
	return cmd
}

func (o *Options) clientsFromFlags() (*Clients, error) {
	cfg, err := o.Flags.ToRESTConfig()
	if err != nil {
		return nil, err
	}
	kiln, err := versioned.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Clients{Kiln: kiln, Kube: kube, Logs: restLogs(kiln.GpuV1alpha1().RESTClient())}, nil
}

func restLogs(c rest.Interface) func(context.Context, string, string, *v1alpha1.InstanceLogOptions) (io.ReadCloser, error) {
	return func(ctx context.Context, namespace, name string, opts *v1alpha1.InstanceLogOptions) (io.ReadCloser, error) {
		return c.Get().Namespace(namespace).Resource("instances").Name(name).SubResource("log").
			VersionedParams(opts, scheme.ParameterCodec).Stream(ctx)
	}
}

// namespace is -n, or the kubeconfig context's namespace.
func (o *Options) namespace() (string, error) {
	ns, _, err := o.Flags.ToRawKubeConfigLoader().Namespace()
	if err != nil {
		return "", fmt.Errorf("reading the namespace from the kubeconfig: %w", err)
	}
	return ns, nil
}

// setup returns the clients and the namespace every namespaced verb needs.
func (o *Options) setup() (*Clients, string, error) {
	ns, err := o.namespace()
	if err != nil {
		return nil, "", err
	}
	c, err := o.NewClients()
	if err != nil {
		return nil, "", err
	}
	return c, ns, nil
}
