package kubectlgpu

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/spf13/cobra"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/cli-runtime/pkg/genericclioptions"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned/scheme"
)

// lifecycle is start or stop.
type lifecycle struct {
	*Options
	verb    string
	wait    bool
	timeout time.Duration
	print   *genericclioptions.PrintFlags
}

func newLifecycleCommand(o *Options, verb string) *cobra.Command {
	past := map[string]string{"start": "started", "stop": "stopped"}[verb]
	l := &lifecycle{Options: o, verb: verb, timeout: 5 * time.Minute,
		print: genericclioptions.NewPrintFlags(past).WithTypeSetter(scheme.Scheme)}
	target := map[string]string{"start": "Ready", "stop": "Stopped"}[verb]
	title := map[string]string{"start": "Start", "stop": "Stop"}[verb]
	cmd := &cobra.Command{
		Use:   verb + " NAME...",
		Short: fmt.Sprintf("%s Instances through instances/%s", title, verb),
		Long: fmt.Sprintf(`%s the named Instances through the instances/%s subresource, which sets
spec.stopped and needs the create verb on instances/%s (the edit role has it).
%s
With --wait, watch each Instance until it is %s, printing a line on stderr
each time its phase or message changes, for at most --timeout.`,
			title, verb, verb,
			map[string]string{
				"start": "A start is admitted as a new start: it is sized again, checked against its\nInstanceType (Hold, Drain) and charged to the namespace's Budgets, which\ncan refuse it; kubectl gpu why NAME says why.\n",
				"stop":  "A stop deletes the Instance's Pod and releases its cards; its Service, node\nports and workspace stay.\n",
			}[verb], target),
		Example: fmt.Sprintf(`  # %[3]s one Instance
  kubectl gpu %[1]s notebook

  # %[3]s two, and wait until both are %[2]s
  kubectl gpu %[1]s notebook trainer --wait --timeout=2m`, verb, target, title),
		Args:              cobra.MinimumNArgs(1),
		ValidArgsFunction: completeInstances(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return l.run(cmd.Context(), args)
		},
	}
	cmd.Flags().BoolVar(&l.wait, "wait", false, "wait until every Instance is "+target)
	cmd.Flags().DurationVar(&l.timeout, "timeout", l.timeout, "how long --wait waits for each Instance (0: forever)")
	l.print.AddFlags(cmd)
	return cmd
}

func (l *lifecycle) run(ctx context.Context, names []string) error {
	c, ns, err := l.setup()
	if err != nil {
		return err
	}
	printer, err := l.print.ToPrinter()
	if err != nil {
		return err
	}
	instances := c.Kiln.GpuV1alpha1().Instances(ns)
	var errs []error
	var done []*v1alpha1.Instance
	for _, name := range names {
		call := instances.Start
		if l.verb == "stop" {
			call = instances.Stop
		}
		inst, err := call(ctx, name, &v1alpha1.Instance{}, metav1.CreateOptions{})
		if err != nil {
			errs = append(errs, explain(err, "instance", name, ns))
			continue
		}
		if err := printer.PrintObj(inst, l.IO.Out); err != nil {
			return err
		}
		done = append(done, inst)
	}
	if l.wait {
		for _, inst := range done {
			if err := l.waitFor(ctx, c, inst); err != nil {
				errs = append(errs, err)
			}
		}
	}
	return errors.Join(errs...)
}

// waitFor watches the Instance until its status describes the generation
// the start or stop wrote, in the phase it asked for. A watch that ends is
// begun again from a fresh read.
func (l *lifecycle) waitFor(ctx context.Context, c *Clients, inst *v1alpha1.Instance) error {
	ns, name := inst.Namespace, inst.Name
	if l.timeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, l.timeout)
		defer cancel()
	}
	w := &waiter{lifecycle: l, generation: inst.Generation, want: v1alpha1.InstanceReady}
	if l.verb == "stop" {
		w.want = v1alpha1.InstanceStopped
	}
	instances := c.Kiln.GpuV1alpha1().Instances(ns)
	selector := fields.OneTermEqualSelector("metadata.name", name).String()
	for {
		cur, err := instances.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			if ctx.Err() != nil {
				return w.timedOut(ns, name)
			}
			return explain(err, "instance", name, ns)
		}
		if done, err := w.observe(cur); done || err != nil {
			return err
		}
		watcher, err := instances.Watch(ctx, metav1.ListOptions{FieldSelector: selector, ResourceVersion: cur.ResourceVersion})
		if err != nil {
			if ctx.Err() != nil {
				return w.timedOut(ns, name)
			}
			return fmt.Errorf("watching instance %q in namespace %q: %w", name, ns, err)
		}
		done, err := w.drain(ctx, watcher)
		watcher.Stop()
		switch {
		case done || err != nil:
			return err
		case ctx.Err() != nil:
			return w.timedOut(ns, name)
		}
	}
}

// waiter is the state of one wait.
type waiter struct {
	*lifecycle
	generation int64
	want       v1alpha1.InstancePhase
	last       *v1alpha1.Instance
	progress   string
}

// drain reads the watch until the wait is over, or the watch or context ends.
func (w *waiter) drain(ctx context.Context, watcher watch.Interface) (bool, error) {
	for {
		select {
		case <-ctx.Done():
			return false, nil
		case ev, ok := <-watcher.ResultChan():
			if !ok || ev.Type == watch.Error {
				return false, nil
			}
			cur, isInstance := ev.Object.(*v1alpha1.Instance)
			if !isInstance {
				continue
			}
			if ev.Type == watch.Deleted {
				return false, fmt.Errorf("instance %q in namespace %q was deleted while waiting for it to be %s", cur.Name, cur.Namespace, w.want)
			}
			if done, err := w.observe(cur); done || err != nil {
				return done, err
			}
		}
	}
}

// observe prints a progress line on a change and says whether the wait is over.
func (w *waiter) observe(cur *v1alpha1.Instance) (bool, error) {
	w.last = cur
	if line := phaseLine(cur); line != w.progress {
		w.progress = line
		fmt.Fprintf(w.IO.ErrOut, "instance/%s: %s\n", cur.Name, line)
	}
	if cur.Status.ObservedGeneration < w.generation {
		return false, nil
	}
	if cur.Status.Phase == v1alpha1.InstanceFailed && w.want == v1alpha1.InstanceReady {
		return false, fmt.Errorf("instance %q in namespace %q failed: %s; kubectl gpu why %s -n %s says more", cur.Name, cur.Namespace, cur.Status.Message, cur.Name, cur.Namespace)
	}
	return cur.Status.Phase == w.want, nil
}

func (w *waiter) timedOut(ns, name string) error {
	state := "no status yet"
	if w.last != nil {
		state = phaseLine(w.last)
	}
	return fmt.Errorf("instance %q in namespace %q is not %s after %s (%s); kubectl gpu why %s -n %s says why", name, ns, w.want, w.timeout, state, name, ns)
}

// phaseLine is an Instance's phase and message, as a progress line.
func phaseLine(i *v1alpha1.Instance) string {
	phase := string(i.Status.Phase)
	if phase == "" {
		phase = "no status yet"
	}
	if i.Status.Message == "" {
		return phase
	}
	return phase + ": " + i.Status.Message
}
