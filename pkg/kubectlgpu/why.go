package kubectlgpu

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/spf13/cobra"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

type why struct {
	*Options
	claim bool
}

func newWhyCommand(o *Options) *cobra.Command {
	w := &why{Options: o}
	cmd := &cobra.Command{
		Use:   "why NAME | claim/NAME",
		Short: "Explain why an Instance or a Claim is not Ready",
		Long: `Explain in a few lines why an Instance (or, as claim/NAME or with --claim, a
Claim) is not Ready, from what the tenant can read:

- the Instance's phase and message;
- for a Pending Instance, the scheduler's reason from its Pod (the
  FailedScheduling condition and event, when you may read Pods and Events);
- for an Instance on a Claim, the Claim's phase and its Waiting reason;
- for a stopped Instance, what a start would meet: the start subresource is
  run as a dry run (?dryRun=All), which admission checks and never charges,
  so a refusal shows the Budget, the key and the numbers exactly;
- the free cards of its InstanceType and what the namespace's Budgets leave.`,
		Example: `  # Why is notebook not Ready?
  kubectl gpu why notebook

  # Why is the Claim big-run still Pending?
  kubectl gpu why claim/big-run`,
		Args:              cobra.ExactArgs(1),
		ValidArgsFunction: completeInstances(o),
		RunE: func(cmd *cobra.Command, args []string) error {
			return w.run(cmd.Context(), args[0])
		},
	}
	cmd.Flags().BoolVar(&w.claim, "claim", false, "NAME is a Claim")
	return cmd
}

func (w *why) run(ctx context.Context, arg string) error {
	c, ns, err := w.setup()
	if err != nil {
		return err
	}
	kind, name := "instance", arg
	if k, n, ok := strings.Cut(arg, "/"); ok {
		// instance/x, instances/x, instance.gpu.kiln.dev/x, as kubectl takes them.
		k = strings.TrimSuffix(strings.ToLower(k), "."+v1alpha1.GroupName)
		kind, name = strings.TrimSuffix(k, "s"), n
	}
	if w.claim {
		kind = "claim"
	}
	var lines []string
	switch kind {
	case "instance", "inst":
		lines, err = whyInstance(ctx, c, ns, name)
	case "claim":
		lines, err = whyClaim(ctx, c, ns, name)
	default:
		return fmt.Errorf("why explains instances and claims, not %q: use NAME, instance/NAME or claim/NAME", kind)
	}
	if err != nil {
		return err
	}
	for i, l := range lines {
		if i > 0 {
			l = "  " + l
		}
		fmt.Fprintln(w.IO.Out, l)
	}
	return nil
}

func whyInstance(ctx context.Context, c *Clients, ns, name string) ([]string, error) {
	inst, err := c.Kiln.GpuV1alpha1().Instances(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, explain(err, "instance", name, ns)
	}
	ready := meta.FindStatusCondition(inst.Status.Conditions, v1alpha1.InstanceConditionReady)
	if inst.Status.Phase == v1alpha1.InstanceReady && ready != nil && ready.Status == metav1.ConditionTrue &&
		inst.Status.ObservedGeneration == inst.Generation {
		return []string{fmt.Sprintf("instance/%s is Ready: %s", name, inst.Status.Message)}, nil
	}
	if inst.Spec.Stopped {
		return whyStopped(ctx, c, inst), nil
	}
	// The details say where the Instance's message comes from; a message
	// a detail repeats is not printed twice.
	var details []string
	repeated := false
	if src, msg := schedulerReason(ctx, c, inst); msg != "" {
		details = append(details, fmt.Sprintf("scheduler (%s): %s", src, msg))
		repeated = strings.Contains(inst.Status.Message, msg)
	}
	if inst.Spec.ClaimName != "" {
		line, waiting := claimLine(ctx, c, ns, inst.Spec.ClaimName)
		details = append(details, line)
		repeated = repeated || waiting != "" && strings.Contains(inst.Status.Message, waiting)
	}
	head := phaseLine(inst)
	if repeated {
		head = string(inst.Status.Phase)
	}
	lines := []string{fmt.Sprintf("instance/%s is %s", name, head)}
	if inst.Status.ObservedGeneration < inst.Generation {
		lines = append(lines, "the controller has not acted on the latest change yet")
	}
	lines = append(lines, details...)
	if inst.Status.Phase == v1alpha1.InstanceFailed {
		lines = append(lines, warnings(ctx, c, ns, "Instance", name)...)
	}
	return append(lines, capacityLines(ctx, c, ns, inst.Spec.Type)...), nil
}

// whyStopped says what a start would meet, from a dry-run start: the
// server's admission chain decides, not a guess made here.
func whyStopped(ctx context.Context, c *Clients, inst *v1alpha1.Instance) []string {
	name, ns := inst.Name, inst.Namespace
	lines := []string{fmt.Sprintf("instance/%s is stopped (spec.stopped is true; phase %s)", name, inst.Status.Phase)}
	if c := meta.FindStatusCondition(inst.Status.Conditions, v1alpha1.InstanceConditionIdleStopped); c != nil && c.Status == metav1.ConditionTrue {
		lines = append(lines, fmt.Sprintf("kiln-controller stopped it for idleness at %s: %s", c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message))
	}
	if c := meta.FindStatusCondition(inst.Status.Conditions, v1alpha1.InstanceConditionBudgetExhausted); c != nil && c.Status == metav1.ConditionTrue {
		lines = append(lines, fmt.Sprintf("kiln-controller stopped it for spent card-hours at %s: %s", c.LastTransitionTime.UTC().Format(time.RFC3339), c.Message))
	}
	_, err := c.Kiln.GpuV1alpha1().Instances(ns).Start(ctx, name, &v1alpha1.Instance{},
		metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
	switch {
	case err == nil:
		lines = append(lines, fmt.Sprintf("a start would be admitted (dry run): kubectl gpu start %s -n %s --wait", name, ns))
	case apierrors.IsForbidden(err):
		lines = append(lines, "a start would be refused: "+err.Error())
	default:
		lines = append(lines, "a dry-run start failed: "+err.Error())
	}
	return append(lines, capacityLines(ctx, c, ns, inst.Spec.Type)...)
}

// schedulerReason is why the scheduler has not placed the Instance's Pod,
// and where that was read: the Pod's PodScheduled condition or its last
// FailedScheduling event. Empty when the Pod is placed, absent, not the
// Instance's, or not readable by this user (the Instance's message then
// carries the reason).
func schedulerReason(ctx context.Context, c *Clients, inst *v1alpha1.Instance) (string, string) {
	pod, err := c.Kube.CoreV1().Pods(inst.Namespace).Get(ctx, inst.Name, metav1.GetOptions{})
	if err != nil || !metav1.IsControlledBy(pod, inst) {
		return "", ""
	}
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status != corev1.ConditionTrue && cond.Message != "" {
			return fmt.Sprintf("pod/%s %s", pod.Name, cond.Reason), cond.Message
		}
	}
	if pod.Spec.NodeName != "" {
		return "", ""
	}
	if ev := lastEvent(ctx, c, inst.Namespace, "Pod", pod.Name, "FailedScheduling"); ev != nil {
		return fmt.Sprintf("pod/%s FailedScheduling", pod.Name), ev.Message
	}
	return "", ""
}

// events lists the events of one object, newest last.
func events(ctx context.Context, c *Clients, ns, kind, name string) []corev1.Event {
	sel := fields.Set{"involvedObject.kind": kind, "involvedObject.name": name}.AsSelector().String()
	list, err := c.Kube.CoreV1().Events(ns).List(ctx, metav1.ListOptions{FieldSelector: sel})
	if err != nil {
		return nil
	}
	var out []corev1.Event
	for _, e := range list.Items {
		if e.InvolvedObject.Kind == kind && e.InvolvedObject.Name == name {
			out = append(out, e)
		}
	}
	sort.SliceStable(out, func(i, j int) bool { return eventTime(out[i]).Before(eventTime(out[j])) })
	return out
}

func eventTime(e corev1.Event) time.Time {
	switch {
	case !e.LastTimestamp.IsZero():
		return e.LastTimestamp.Time
	case !e.EventTime.IsZero():
		return e.EventTime.Time
	}
	return e.CreationTimestamp.Time
}

func lastEvent(ctx context.Context, c *Clients, ns, kind, name, reason string) *corev1.Event {
	evs := events(ctx, c, ns, kind, name)
	for i := len(evs) - 1; i >= 0; i-- {
		if evs[i].Reason == reason {
			return &evs[i]
		}
	}
	return nil
}

// warnings are the last Warning events of an object, at most three.
func warnings(ctx context.Context, c *Clients, ns, kind, name string) []string {
	var out []string
	evs := events(ctx, c, ns, kind, name)
	for i := len(evs) - 1; i >= 0 && len(out) < 3; i-- {
		if evs[i].Type == corev1.EventTypeWarning {
			out = append(out, fmt.Sprintf("event %s: %s", evs[i].Reason, evs[i].Message))
		}
	}
	return out
}

// claimLine is where the Claim an Instance runs on stands, and the
// message of its Waiting condition.
func claimLine(ctx context.Context, c *Clients, ns, name string) (string, string) {
	cl, err := c.Kiln.GpuV1alpha1().Claims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return explain(err, "claim", name, ns).Error(), ""
	}
	return claimState(cl), waitingMessage(cl)
}

func claimState(cl *v1alpha1.Claim) string {
	s := fmt.Sprintf("claim/%s is %s", cl.Name, orUnknown(string(cl.Status.Phase)))
	if cl.Status.NodeName != "" {
		s += " on node " + cl.Status.NodeName
	}
	if w := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClaimConditionWaiting); w != nil && w.Status == metav1.ConditionTrue {
		s += fmt.Sprintf(", waiting (%s): %s", w.Reason, w.Message)
	}
	return s
}

func waitingMessage(cl *v1alpha1.Claim) string {
	if w := meta.FindStatusCondition(cl.Status.Conditions, v1alpha1.ClaimConditionWaiting); w != nil && w.Status == metav1.ConditionTrue {
		return w.Message
	}
	return ""
}

func whyClaim(ctx context.Context, c *Clients, ns, name string) ([]string, error) {
	cl, err := c.Kiln.GpuV1alpha1().Claims(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return nil, explain(err, "claim", name, ns)
	}
	lines := []string{claimState(cl)}
	switch cl.Status.Phase {
	case v1alpha1.ClaimBound, v1alpha1.ClaimAttached:
		if cl.Status.AttachedTo != "" {
			lines = append(lines, "attached to instance/"+cl.Status.AttachedTo)
		}
		return append(lines, fmt.Sprintf("holds %d devices: %s", len(cl.Status.Devices), strings.Join(cl.Status.Devices, ", "))), nil
	case v1alpha1.ClaimLost, v1alpha1.ClaimExpired:
		for _, cond := range cl.Status.Conditions {
			if cond.Message != "" {
				lines = append(lines, fmt.Sprintf("%s (%s): %s", cond.Type, cond.Reason, cond.Message))
			}
		}
		return lines, nil
	}
	return append(lines, capacityLines(ctx, c, ns, cl.Spec.Type)...), nil
}

// capacityLines are the type's free cards and the namespace's Budgets.
func capacityLines(ctx context.Context, c *Clients, ns, typ string) []string {
	var lines []string
	t, err := c.Kiln.GpuV1alpha1().InstanceTypes().Get(ctx, typ, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		lines = append(lines, fmt.Sprintf("instancetype/%s does not exist; kubectl get instancetypes lists those there are", typ))
	case err != nil:
		lines = append(lines, fmt.Sprintf("instancetype/%s: %v", typ, err))
	default:
		lines = append(lines, typeLine(t))
	}
	budgets, err := c.Kiln.GpuV1alpha1().Budgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return append(lines, fmt.Sprintf("budgets of namespace %s: %v", ns, err))
	}
	for i := range budgets.Items {
		lines = append(lines, budgetLine(&budgets.Items[i], typ))
	}
	return lines
}

func typeLine(t *v1alpha1.InstanceType) string {
	capy := t.Status.Capacity
	s := fmt.Sprintf("instancetype/%s (%s): %d of %d cards free on %s", t.Name, orUnknown(string(t.Status.Phase)), capy.FreeCards, capy.Cards, nodes(capy.Nodes))
	if t.Spec.Accelerator == nil {
		s = fmt.Sprintf("instancetype/%s (%s): CPU only, %s", t.Name, orUnknown(string(t.Status.Phase)), nodes(capy.Nodes))
	}
	var parts []string
	for _, p := range capy.Partitions {
		parts = append(parts, fmt.Sprintf("%s %d of %d", p.Name, p.Free, p.Total))
	}
	if len(parts) > 0 {
		s += "; partitions free: " + strings.Join(parts, ", ")
	}
	switch t.Spec.Hold {
	case v1alpha1.HoldNew:
		s += "; on Hold: no new starts"
	case v1alpha1.HoldDrain:
		s += "; Draining: no new starts, running Instances are stopped"
	}
	return s
}

func nodes(n int32) string {
	if n == 1 {
		return "1 node"
	}
	return fmt.Sprintf("%d nodes", n)
}

func orUnknown(s string) string {
	if s == "" {
		return "no status yet"
	}
	return s
}
