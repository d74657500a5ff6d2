package kubectlgpu

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/spf13/cobra"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

type logs struct {
	*Options
	opts  v1alpha1.InstanceLogOptions
	tail  int64
	since time.Duration
}

func newLogsCommand(o *Options) *cobra.Command {
	l := &logs{Options: o, tail: -1}
	cmd := &cobra.Command{
		Use:   "logs NAME",
		Short: "Print the log of an Instance through instances/log",
		Long: `Print the log of an Instance's container through the instances/log
subresource, which needs the get verb on instances/log (the view role has
it) and nothing on Pods. -c ssh reads the SSH sidecar of an Instance with
spec.ssh; -f streams the log as it grows, until interrupted.`,
		Example: `  # The whole log of the main container
  kubectl gpu logs notebook

  # The last 20 lines, then follow
  kubectl gpu logs notebook --tail=20 -f

  # The SSH sidecar's log
  kubectl gpu logs notebook -c ssh`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeInstances(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return l.run(cmd.Context(), args[0])
		},
	}
	f := cmd.Flags()
	f.BoolVarP(&l.opts.Follow, "follow", "f", false, "stream the log as it grows")
	f.Int64Var(&l.tail, "tail", l.tail, "lines from the end to print (-1: all)")
	f.StringVarP(&l.opts.Container, "container", "c", "", `container to read: "main" (the default) or "ssh"`)
	f.BoolVarP(&l.opts.Previous, "previous", "p", false, "the log of the container's previous run")
	f.BoolVar(&l.opts.Timestamps, "timestamps", false, "prefix every line with its RFC3339 time")
	f.DurationVar(&l.since, "since", 0, "only lines newer than this, e.g. 5m")
	_ = cmd.RegisterFlagCompletionFunc("container", cobra.FixedCompletions(
		[]string{v1alpha1.InstanceMainContainer, v1alpha1.InstanceSSHContainer}, cobra.ShellCompDirectiveNoFileComp))
	return cmd
}

func (l *logs) run(ctx context.Context, name string) error {
	c, ns, err := l.setup()
	if err != nil {
		return err
	}
	opts := l.opts
	if l.tail >= 0 {
		opts.TailLines = &l.tail
	}
	if l.since > 0 {
		s := int64(l.since.Round(time.Second).Seconds())
		opts.SinceSeconds = &s
	}
	rc, err := c.Logs(ctx, ns, name, &opts)
	if err != nil {
		return l.explainLogError(ctx, c, ns, name, err)
	}
	defer rc.Close()
	if _, err := io.Copy(l.IO.Out, rc); err != nil && ctx.Err() == nil {
		return fmt.Errorf("reading the log of instance %q in namespace %q: %w", name, ns, err)
	}
	return nil
}

// explainLogError says what to do when there is no log to read: the
// server's answer names the raw subresource, the tenant has kubectl gpu.
func (l *logs) explainLogError(ctx context.Context, c *Clients, ns, name string, err error) error {
	if !apierrors.IsBadRequest(err) {
		return explain(err, "instance", name, ns)
	}
	inst, getErr := c.Kiln.GpuV1alpha1().Instances(ns).Get(ctx, name, metav1.GetOptions{})
	switch {
	case getErr != nil:
		return err
	case inst.Spec.Stopped:
		return fmt.Errorf("instance %q in namespace %q is stopped and has no log to read; start it with kubectl gpu start %s -n %s --wait", name, ns, name, ns)
	case inst.Status.Phase != v1alpha1.InstanceReady:
		return fmt.Errorf("%w\ninstance %q is %s; kubectl gpu why %s -n %s says why", err, name, phaseLine(inst), name, ns)
	}
	return err
}
