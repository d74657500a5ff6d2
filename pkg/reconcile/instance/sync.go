package instance

import (
	"context"
	"encoding/json"
	"fmt"
	"hash/fnv"
	"slices"
	"strconv"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

// Annotations on a rendered Pod: the Instance generation it was built
// for and a hash of what was rendered, so a Pod is rebuilt only when an
// edit of the Instance changes it (an edit of the InstanceType applies at
// the next start, not by restarting everyone's machines).
const (
	AnnotationGeneration = "gpu.kiln.dev/instance-generation"
	AnnotationPodHash    = "gpu.kiln.dev/pod-hash"
)

// sync brings one Instance's Pod and Service in line with its spec and
// writes its status. It returns a delay after which the Instance should be
// looked at again even if nothing changes (a pending rebuild).
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	inst, err := c.instances.Instances(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	pod, foreignPod, err := c.podOf(inst)
	if err != nil {
		return 0, err
	}
	svc, foreignSvc, err := c.serviceOf(inst)
	if err != nil {
		return 0, err
	}
	if inst.DeletionTimestamp != nil {
		return c.finalize(ctx, inst, pod, svc)
	}
	// An Instance created stopped gets its finalizer once its status says
	// Stopped: with the finalizer and no phase it would count as holding
	// cards (accounting.InstanceHolds), and in a namespace whose Budget is
	// spent the update adding it would be refused for good. It makes no
	// Pod before then, so nothing needs finalizing.
	//
	// The ledger's finalizer comes with it: kiln-apiserver takes it off
	// once the Instance's card-hours are in its Budgets. An Instance
	// created running has both from KilnFinalizers, set in its create;
	// this update is for those created stopped, or stored without them.
	if missing := missingFinalizers(inst.Finalizers); len(missing) > 0 && !(inst.Spec.Stopped && inst.Status.Phase == "") {
		cp := inst.DeepCopy()
		cp.Finalizers = append(cp.Finalizers, missing...)
		if inst, err = c.kiln.GpuV1alpha1().Instances(inst.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy}); err != nil {
			return 0, err
		}
	}

	o := observed{inst: inst, pod: pod, svc: svc}
	t, err := c.types.Get(inst.Spec.Type)
	switch {
	case apierrors.IsNotFound(err):
		o.problem = &problem{ReasonInvalid, fmt.Sprintf("instancetype %q does not exist; recreate it or delete this Instance", inst.Spec.Type)}
	case err != nil:
		return 0, err
	case !inst.Spec.Stopped && (t.DeletionTimestamp != nil || t.Spec.Hold == v1alpha1.HoldDrain):
		// The stop goes into spec, so it holds when the type reopens and
		// is charged again only at an explicit start.
		if inst, err = c.drain(ctx, inst, t); err != nil {
			return 0, err
		}
		o.inst = inst
	}
	if t != nil {
		if err := c.exhaustStop(ctx, &o, t, c.now()); err != nil {
			return 0, err
		}
	}
	idleAfter, err := c.observeIdle(ctx, &o, t)
	if err != nil {
		return 0, err
	}
	inst = o.inst
	if t != nil && t.Spec.Accelerator != nil && t.Spec.Accelerator.Sliced != nil {
		o.sliceIsolation = t.Spec.Accelerator.Sliced.Isolation
	}
	if conflict := conflictMessage(inst, foreignPod, foreignSvc); conflict != "" {
		o.problem = &problem{ReasonNameConflict, conflict}
		if readyReason(inst) != ReasonNameConflict {
			c.recorder.Event(inst, corev1.EventTypeWarning, ReasonNameConflict, conflict)
		}
	}

	// A Service is made only under the finalizer, whose removal waits for
	// it to be gone: an Instance created stopped and deleted before its
	// finalizer came would leave it to the garbage collector, which is
	// best effort, and the name's next Instance in NameConflict.
	if (o.problem == nil || o.problem.reason != ReasonNameConflict) && slices.Contains(inst.Finalizers, Finalizer) {
		if o.svc, err = c.syncService(ctx, inst, svc); err != nil {
			return 0, err
		}
	}
	if o.inst.Spec.Stopped && o.pod == nil && !stoppedAt(o.inst) {
		// Stopped releases the Instance's cards from its Budgets, so the
		// cache's word that no Pod runs is checked with the API server.
		if o.pod, err = c.livePod(ctx, o.inst); err != nil {
			return 0, err
		}
	}
	after, err := c.syncWorkload(ctx, &o, t)
	if err != nil {
		return 0, err
	}
	after = minRequeue(after, idleAfter)
	if err := c.observeNode(&o); err != nil {
		return 0, err
	}
	observeUsage(&o, t, c.now())
	if inst.Spec.Stopped {
		// A Pod on its way out is looked at again when it should be gone.
		var left time.Duration
		o.podOverdue, left = c.podOverdue(o.pod)
		after = minRequeue(after, left)
	}
	st := computeStatus(o)
	if wait := c.quietWait(&o, st); wait > 0 {
		return minRequeue(after, wait), nil
	}
	return after, c.writeStatus(ctx, inst, st)
}

// quietFor is how long a new Instance's first Pod may take to become
// Ready before the Instance's status says Starting: on a node with the
// image at hand it is usually Ready well within that, and the first status
// is then Ready. Each status write goes through kube-apiserver's proxy
// and kiln-apiserver's chain, with an Event, and its watch event queues
// the Instance once more; 1,000 Instances created at once wait on those
// writes (docs/benchmarks.md). Budgets charge an Instance with no phase
// as they charge Starting (accounting.InstanceHolds), so nothing is
// counted less meanwhile. Claims wait the same way (claim.quietFor).
const quietFor = 2 * time.Second

// quietWait is how much longer an Instance never written yet keeps its
// empty status while its Pod starts (quietFor); 0 when st is to be
// written now. Only plain starting waits: a Pod the scheduler could not
// place, a refusal, a failure or a Pod on its way out is news at once,
// the last for the ledger's run it closes.
func (c *Controller) quietWait(o *observed, st v1alpha1.InstanceStatus) time.Duration {
	pod := o.pod
	if o.inst.Status.Phase != "" || st.Phase != v1alpha1.InstanceStarting ||
		pod == nil || pod.CreationTimestamp.IsZero() || pod.DeletionTimestamp != nil || !o.podDeletedAt.IsZero() {
		return 0
	}
	if c := meta.FindStatusCondition(st.Conditions, v1alpha1.InstanceConditionReady); c == nil || c.Reason != ReasonStarting {
		return 0
	}
	// A clock behind the API server's waits no longer than quietFor.
	return min(quietFor-c.now().Sub(pod.CreationTimestamp.Time), quietFor)
}

// missingFinalizers are those of Finalizer and the ledger's that have is
// missing.
func missingFinalizers(have []string) []string {
	var out []string
	for _, f := range []string{Finalizer, v1alpha1.LedgerFinalizer} {
		if !slices.Contains(have, f) {
			out = append(out, f)
		}
	}
	return out
}

// syncWorkload makes the Instance's Pod what its spec and state ask for:
// none for a stopped Instance (once its Claim has the cards back), none
// while a problem stands, else the Pod its spec renders. It returns when
// to look again.
func (c *Controller) syncWorkload(ctx context.Context, o *observed, t *v1alpha1.InstanceType) (time.Duration, error) {
	pod := o.pod
	var after time.Duration
	switch {
	case o.inst.Spec.Stopped:
		c.clearFailures(o.inst)
		if pod != nil && pod.DeletionTimestamp == nil {
			wait, err := c.claimKeeps(o.inst, pod)
			switch {
			case err != nil:
				return 0, err
			case wait:
				// Its Claim takes the cards back first.
				after = handOverPoll
			default:
				if err := c.deletePod(ctx, pod); err != nil {
					return 0, err
				}
				o.podDeletedAt = c.deletionAsked(ctx, pod)
			}
		}
	case o.problem != nil:
	default:
		claimNode, err := c.claimNode(o)
		if err != nil {
			return 0, err
		}
		if o.claimWait != "" && pod == nil {
			break
		}
		return c.syncPod(ctx, o, t, claimNode)
	}
	return after, nil
}

// observeNode reads what the status reports of the node the Pod is bound
// to: the Node, its devices, and the Claim the Instance is attached to.
func (c *Controller) observeNode(o *observed) error {
	if o.pod != nil && o.pod.Spec.NodeName != "" {
		node, err := c.nodes.Get(o.pod.Spec.NodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		o.node, o.nodeLost = node, apierrors.IsNotFound(err)
		nd, err := c.devices.Get(o.pod.Spec.NodeName)
		if err != nil && !apierrors.IsNotFound(err) {
			return err
		}
		o.devices = nd
		if name := o.inst.Spec.ClaimName; name != "" {
			if cl, err := c.claims.Claims(o.inst.Namespace).Get(name); err == nil && cl.Status.AttachedTo == o.inst.Name {
				o.claim = cl
			}
		}
	}
	return nil
}

// podOverdue says whether a deleted Pod is still there past its deadline,
// and when to look at it again: then, or, once overdue, every
// podStuckRecheck. Neither for a Pod that is not being deleted.
func (c *Controller) podOverdue(pod *corev1.Pod) (bool, time.Duration) {
	if pod == nil || pod.DeletionTimestamp == nil {
		return false, 0
	}
	overdue, left := handover.Overdue(pod, c.now())
	if overdue {
		return true, podStuckRecheck
	}
	return false, left
}

// podStuckRecheck is how often an Instance whose Pod is overdue looks again.
const podStuckRecheck = 30 * time.Second

// minRequeue is the sooner of two requeues, 0 meaning none.
func minRequeue(a, b time.Duration) time.Duration {
	if a == 0 || (b > 0 && b < a) {
		return b
	}
	return a
}

// syncPod creates the Pod when missing, rebuilds it when an edit changed
// it or the kubelet refused it at admission, and fills o with what it saw.
func (c *Controller) syncPod(ctx context.Context, o *observed, t *v1alpha1.InstanceType, claimNode string) (time.Duration, error) {
	inst, pod := o.inst, o.pod
	desired, err := c.desiredPod(o, t, claimNode)
	if desired == nil || err != nil {
		return 0, err
	}
	hash := desired.Annotations[AnnotationPodHash]
	switch {
	case pod == nil:
		if err := c.stillWanted(ctx, inst); err != nil {
			return 0, err
		}
		key := cache.MetaObjectToName(inst)
		c.made.begin(key, c.now())
		created, err := c.kube.CoreV1().Pods(inst.Namespace).Create(ctx, desired, metav1.CreateOptions{FieldManager: ManagedBy})
		if err != nil {
			c.made.forget(key)
			// AlreadyExists: the informer has not seen a Pod created
			// before (by us, before a restart); look again.
			return 0, err
		}
		c.made.made(key, created)
		o.pod = created
		klog.FromContext(ctx).V(2).Info("Created Pod", "pod", klog.KObj(created))
		if claimNode != "" {
			// Nominated, it has the claimed cards reserved: the Claim's
			// holder goes only then.
			return 0, client404(handover.Nominate(ctx, c.kube, created, claimNode, ManagedBy))
		}
	case pod.DeletionTimestamp != nil:
		// Its deletion wakes us.
	case admissionFailed(pod):
		return c.rebuildRefused(ctx, o)
	case pod.Annotations[AnnotationGeneration] != desired.Annotations[AnnotationGeneration] &&
		pod.Annotations[AnnotationPodHash] != hash:
		c.recorder.Eventf(inst, corev1.EventTypeNormal, ReasonPodOutOfDate, "The spec changed; rebuilding Pod %s", pod.Name)
		return 0, c.deletePod(ctx, pod)
	case pod.Annotations[AnnotationGeneration] != desired.Annotations[AnnotationGeneration]:
		// An edit that does not reach the Pod: record that this Pod is
		// current, so a later edit of the type alone does not rebuild it.
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q}}}`, AnnotationGeneration, desired.Annotations[AnnotationGeneration])
		if _, err := c.kube.CoreV1().Pods(pod.Namespace).Patch(ctx, pod.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: ManagedBy}); err != nil {
			return 0, client404(err)
		}
	case claimNode != "" && pod.Spec.NodeName == "" && pod.Status.NominatedNodeName != claimNode:
		return 0, client404(handover.Nominate(ctx, c.kube, pod, claimNode, ManagedBy))
	case claimNode != "" && handover.Gated(pod):
		// The holder goes once this Pod is nominated; the Pod is let
		// through once the holder is gone, to get the holder's devices.
		gone, err := c.holderGone(inst)
		if err != nil || !gone {
			return handOverPoll, err
		}
		return 0, client404(handover.Ungate(ctx, c.kube, pod, ManagedBy))
	case isReady(pod):
		c.forgiveRefusals(inst)
	}
	return 0, nil
}

// forgiveRefusals forgets the admission refusals of an Instance whose Pod
// runs, but only once the window they opened is over: one that flaps
// between Ready and refused still gets a bounded number of rebuilds.
func (c *Controller) forgiveRefusals(inst *v1alpha1.Instance) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if f := c.failures[inst.UID]; f != nil && c.now().Sub(f.first) > c.opts.AdmissionWindow {
		delete(c.failures, inst.UID)
	}
}

// desiredPod renders the Pod the Instance should have, annotated with the
// generation and hash it was rendered from. A spec that cannot run is
// recorded as o's problem, and no Pod returned.
func (c *Controller) desiredPod(o *observed, t *v1alpha1.InstanceType, claimNode string) (*corev1.Pod, error) {
	inst := o.inst
	var node *corev1.Node
	if inst.Spec.NodeName != "" {
		n, err := c.nodes.Get(inst.Spec.NodeName)
		if apierrors.IsNotFound(err) {
			o.problem = &problem{ReasonInvalid, fmt.Sprintf("spec.nodeName: node %q does not exist; pin the Instance to a node of instancetype %q or clear spec.nodeName", inst.Spec.NodeName, t.Name)}
			return nil, nil
		}
		if err != nil {
			return nil, err
		}
		node = n
	}
	desired, err := RenderPod(inst, t, node, c.opts.Render)
	if err != nil {
		o.problem = &problem{ReasonInvalid, err.Error()}
		return nil, nil
	}
	if claimNode != "" {
		RenderOnClaim(desired, inst.Spec.ClaimName, claimNode)
	}
	hash, err := podHash(desired)
	if err != nil {
		return nil, err
	}
	desired.Annotations = map[string]string{
		AnnotationGeneration: strconv.FormatInt(inst.Generation, 10),
		AnnotationPodHash:    hash,
	}
	return desired, nil
}

// rebuildRefused deletes a Pod the kubelet refused at admission so it is
// created again, after a backoff that doubles each time, for as long as the
// window since the first refusal lasts. After that the Pod stays, failed,
// as the visible error.
func (c *Controller) rebuildRefused(ctx context.Context, o *observed) (time.Duration, error) {
	inst, pod := o.inst, o.pod
	now := c.now()
	c.mu.Lock()
	f := c.failures[inst.UID]
	if f == nil {
		f = &admissionFailures{first: now}
		c.failures[inst.UID] = f
	}
	if f.podUID != pod.UID {
		f.podUID, f.failedAt = pod.UID, now
	}
	delay := c.opts.AdmissionBackoff << min(f.attempts, 20)
	rebuildAt := f.failedAt.Add(delay)
	if !f.gaveUp && rebuildAt.After(f.first.Add(c.opts.AdmissionWindow)) {
		f.gaveUp = true
		c.recorder.Eventf(inst, corev1.EventTypeWarning, ReasonAdmissionError,
			"Gave up after %d rebuilds in %s: %s", f.attempts, c.opts.AdmissionWindow, pod.Status.Message)
	}
	attempts, gaveUp := f.attempts, f.gaveUp
	c.mu.Unlock()

	if gaveUp {
		o.problem = &problem{ReasonAdmissionError, fmt.Sprintf(
			"the kubelet refused the Pod at admission and %d rebuilds did not help: %s; stop and start the Instance to try again",
			attempts, pod.Status.Message)}
		return 0, nil
	}
	if wait := rebuildAt.Sub(now); wait > 0 {
		o.rebuilding = fmt.Sprintf("the kubelet refused the Pod at admission (%s); rebuilding it in %s", pod.Status.Message, wait.Round(time.Second))
		return wait, nil
	}
	c.mu.Lock()
	f.attempts++
	c.mu.Unlock()
	c.recorder.Eventf(inst, corev1.EventTypeWarning, ReasonAdmissionError,
		"The kubelet refused Pod %s at admission (%s); rebuilding it (attempt %d)", pod.Name, pod.Status.Message, attempts+1)
	o.rebuilding = fmt.Sprintf("the kubelet refused the Pod at admission (%s); rebuilding it", pod.Status.Message)
	return 0, c.deletePod(ctx, pod)
}

func (c *Controller) clearFailures(inst *v1alpha1.Instance) {
	c.mu.Lock()
	delete(c.failures, inst.UID)
	c.mu.Unlock()
}

// syncService makes the owned Service match the spec's ports, keeping the
// node ports of ports that stay, and removes it when no port is left. It
// is kept across stops, so what users connect to does not move.
func (c *Controller) syncService(ctx context.Context, inst *v1alpha1.Instance, svc *corev1.Service) (*corev1.Service, error) {
	services := c.kube.CoreV1().Services(inst.Namespace)
	desired := RenderService(inst, svc)
	switch {
	case desired == nil && svc == nil:
		return nil, nil
	case desired == nil:
		return nil, c.deleteService(ctx, svc)
	case svc == nil:
		return services.Create(ctx, desired, metav1.CreateOptions{FieldManager: ManagedBy})
	case serviceUpToDate(svc, desired):
		return svc, nil
	}
	cp := svc.DeepCopy()
	cp.Labels = desired.Labels
	cp.Spec.Type = desired.Spec.Type
	cp.Spec.Selector = desired.Spec.Selector
	cp.Spec.Ports = desired.Spec.Ports
	return services.Update(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy})
}

// serviceUpToDate compares what RenderService decides; node ports it left
// at 0 are the API server's to allocate.
func serviceUpToDate(have, want *corev1.Service) bool {
	if have.Spec.Type != want.Spec.Type || !equality.Semantic.DeepEqual(have.Spec.Selector, want.Spec.Selector) ||
		!equality.Semantic.DeepEqual(have.Labels, want.Labels) || len(have.Spec.Ports) != len(want.Spec.Ports) {
		return false
	}
	for i, w := range want.Spec.Ports {
		h := have.Spec.Ports[i]
		if h.Name != w.Name || h.Port != w.Port || h.Protocol != w.Protocol || h.TargetPort != w.TargetPort ||
			(w.NodePort != 0 && h.NodePort != w.NodePort) {
			return false
		}
	}
	return true
}

// observeIdle sums up the use of a running Instance's devices, and stops
// the Instance when they have sat idle past its limit. It says when to
// look again: when the limit would be reached, if nothing wakes the
// Instance before (its node's NodeDevices does).
func (c *Controller) observeIdle(ctx context.Context, o *observed, t *v1alpha1.InstanceType) (time.Duration, error) {
	pod := o.pod
	if o.inst.Spec.Stopped || pod == nil || pod.DeletionTimestamp != nil || pod.Spec.NodeName == "" {
		return 0, nil
	}
	nd, err := c.devices.Get(pod.Spec.NodeName)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	var threshold *int32
	if t != nil && t.Spec.Idle != nil {
		threshold = t.Spec.Idle.ActiveThreshold
	}
	now := c.now()
	act := observeActivity(o.inst.Status.Activity, pod, nd, threshold, now)
	o.activity = act.status
	due, after := idleVerdict(o.inst, t, pod, act, now)
	if !due {
		return after, nil
	}
	inst, msg, err := c.idleStop(ctx, o.inst, t, act, now)
	if err != nil {
		return 0, err
	}
	o.inst, o.stoppedFor = inst, &metav1.Condition{Type: v1alpha1.InstanceConditionIdleStopped, Status: metav1.ConditionTrue,
		Reason: ReasonIdleLimit, Message: msg, LastTransitionTime: metav1.NewTime(now)}
	return 0, nil
}

// drain stops an Instance whose type is draining or being deleted.
func (c *Controller) drain(ctx context.Context, inst *v1alpha1.Instance, t *v1alpha1.InstanceType) (*v1alpha1.Instance, error) {
	why := "is draining"
	if t.DeletionTimestamp != nil {
		why = "is being deleted"
	}
	cp := inst.DeepCopy()
	cp.Spec.Stopped = true
	updated, err := c.kiln.GpuV1alpha1().Instances(inst.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy})
	if err != nil {
		return nil, err
	}
	c.recorder.Eventf(updated, corev1.EventTypeNormal, ReasonDrained, "Stopped: instancetype %s %s", t.Name, why)
	return updated, nil
}

// finalize removes a deleted Instance's Pod and Service, then lets the
// Instance go. The Pod and the Service go in the same pass, and the
// finalizer in the pass that finds the Pod gone: a namespace of thousands
// of Instances is finalized at the rate of the API calls, not of sync
// rounds waiting for watch events.
func (c *Controller) finalize(ctx context.Context, inst *v1alpha1.Instance, pod *corev1.Pod, svc *corev1.Service) (time.Duration, error) {
	i := slices.Index(inst.Finalizers, Finalizer)
	if i < 0 {
		return 0, nil
	}
	var after time.Duration
	if pod != nil {
		// Deleting is worth showing only while there is a Pod to wait for.
		overdue, left := c.podOverdue(pod)
		after = left
		o := observed{inst: inst, pod: pod, svc: svc, podOverdue: overdue}
		// The ledger counts the Pod until its deletion is asked for: the
		// run closes with the Pod's own record of when that was.
		observeUsage(&o, nil, c.now())
		if err := c.writeStatus(ctx, inst, computeStatus(o)); err != nil {
			return 0, err
		}
		if pod.DeletionTimestamp == nil {
			if wait, err := c.claimKeeps(inst, pod); err != nil || wait {
				return handOverPoll, err
			}
			if err := c.deletePod(ctx, pod); err != nil {
				return 0, err
			}
		}
	}
	if svc != nil {
		if err := c.deleteService(ctx, svc); err != nil {
			return 0, err
		}
		if len(svc.Finalizers) > 0 {
			// Gone only once its own finalizers are; its deletion wakes us.
			return after, nil
		}
	}
	if pod != nil {
		// The Pod's deletion wakes us; if it does not come, the Pod is
		// overdue and looked at again.
		return after, nil
	}
	// The Instance's charge goes with the finalizer, so the cache's word
	// that no Pod runs is checked with the API server.
	if live, err := c.livePod(ctx, inst); err != nil || live != nil {
		// Its add event, and then its deletion, wake us.
		return 0, err
	}
	// So is its word that no Service is left: one made a moment before
	// the deletion may not have reached the informer, and once the
	// Instance is gone only the garbage collector would remove it.
	if svc == nil {
		live, err := c.liveService(ctx, inst)
		if err != nil || live != nil {
			if err == nil {
				err = c.deleteService(ctx, live)
			}
			// Looked at again on a timer, not on its events: a watch
			// that breaks now relists without the Service, and the
			// informer, which never saw it, would tell us nothing.
			return serviceGonePoll, err
		}
	}
	// A run still open closes before the finalizer goes: once it has,
	// kiln-apiserver folds the ledger into the namespace's Budgets.
	if o := (observed{inst: inst, svc: svc}); inst.Status.Usage != nil && inst.Status.Usage.Current != nil {
		observeUsage(&o, nil, c.now())
		if err := c.writeStatus(ctx, inst, computeStatus(o)); err != nil {
			return 0, err
		}
	}
	// A JSON patch with a test takes off exactly our finalizer, without a
	// read first and without a conflict with writes to other fields.
	patch, err := json.Marshal([]map[string]any{
		{"op": "test", "path": fmt.Sprintf("/metadata/finalizers/%d", i), "value": Finalizer},
		{"op": "remove", "path": fmt.Sprintf("/metadata/finalizers/%d", i)},
	})
	if err != nil {
		return 0, err
	}
	_, err = c.kiln.GpuV1alpha1().Instances(inst.Namespace).Patch(ctx, inst.Name, types.JSONPatchType, patch, metav1.PatchOptions{FieldManager: ManagedBy})
	c.clearFailures(inst)
	return 0, client404(err)
}

// livePod reads the Instance's Pod from the API server, for when the
// cache has none and a charge is released on that word: a Pod created
// moments ago, or whose create timed out but was stored, may not have
// reached the informer yet. Nil when there is none, or it is not the
// Instance's.
func (c *Controller) livePod(ctx context.Context, inst *v1alpha1.Instance) (*corev1.Pod, error) {
	return liveOwned(ctx, inst, c.kube.CoreV1().Pods(inst.Namespace).Get)
}

// liveService is livePod for the Service.
func (c *Controller) liveService(ctx context.Context, inst *v1alpha1.Instance) (*corev1.Service, error) {
	return liveOwned(ctx, inst, c.kube.CoreV1().Services(inst.Namespace).Get)
}

// liveOwned gets the object named after inst with get; nil when there is
// none, or it is not the Instance's.
func liveOwned[O interface {
	*corev1.Pod | *corev1.Service
	metav1.Object
}](ctx context.Context, inst *v1alpha1.Instance, get func(context.Context, string, metav1.GetOptions) (O, error)) (O, error) {
	live, err := get(ctx, inst.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return nil, nil
	case err != nil:
		return nil, err
	case !ownedBy(live, inst):
		return nil, nil
	}
	return live, nil
}

// stillWanted asks the server whether the Instance the cache shows still
// wants a Pod. The cache can lag behind a stop, a spec change or a
// deletion (a watch broken before the event arrived); the stop may
// already be reported, its cards released and charged to another
// Instance, and a Pod made from the stale copy would run on them
// uncharged. Only this sync reports a stop, so an Instance that is live
// and unchanged here is not released before the Pod exists.
func (c *Controller) stillWanted(ctx context.Context, inst *v1alpha1.Instance) error {
	live, err := c.kiln.GpuV1alpha1().Instances(inst.Namespace).Get(ctx, inst.Name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	switch {
	case live.UID != inst.UID || live.DeletionTimestamp != nil:
		return fmt.Errorf("instance %s/%s is gone or being deleted on the server; its Pod is not made", inst.Namespace, inst.Name)
	case live.Generation != inst.Generation || live.Spec.Stopped:
		return fmt.Errorf("instance %s/%s changed on the server (generation %d, stopped %t) since the cache saw generation %d; its Pod waits for the cache",
			inst.Namespace, inst.Name, live.Generation, live.Spec.Stopped, inst.Generation)
	}
	return nil
}

// stoppedAt says the Instance's status already reports it Stopped at its
// generation: its cards were released, and nothing runs for it.
func stoppedAt(inst *v1alpha1.Instance) bool {
	return inst.Status.Phase == v1alpha1.InstanceStopped && inst.Status.ObservedGeneration == inst.Generation
}

// deletePod deletes exactly the Pod that was looked at: the UID
// precondition keeps a stale cache from deleting a newer Pod.
func (c *Controller) deletePod(ctx context.Context, pod *corev1.Pod) error {
	err := c.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}})
	return client404(err)
}

func (c *Controller) deleteService(ctx context.Context, svc *corev1.Service) error {
	err := c.kube.CoreV1().Services(svc.Namespace).Delete(ctx, svc.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &svc.UID}})
	return client404(err)
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// writeStatus writes st through /status when it differs from what is
// stored, and records an Event when the phase changes. A conflict is
// returned, so the key is requeued and the status computed afresh.
func (c *Controller) writeStatus(ctx context.Context, inst *v1alpha1.Instance, st v1alpha1.InstanceStatus) error {
	if equality.Semantic.DeepEqual(inst.Status, st) {
		return nil
	}
	cp := inst.DeepCopy()
	cp.Status = st
	updated, err := c.kiln.GpuV1alpha1().Instances(inst.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{FieldManager: ManagedBy})
	if err != nil {
		return err
	}
	if inst.Status.Phase != st.Phase {
		eventType := corev1.EventTypeNormal
		if st.Phase == v1alpha1.InstanceFailed || st.Phase == v1alpha1.InstancePending {
			eventType = corev1.EventTypeWarning
		}
		c.recorder.Event(updated, eventType, string(st.Phase), st.Message)
	}
	if readyReason(updated) == ReasonPodTerminating && readyReason(inst) != ReasonPodTerminating {
		c.recorder.Event(updated, corev1.EventTypeWarning, ReasonPodTerminating, st.Message)
	}
	// A device failing under the Instance, or a Pod on a Claim that got
	// other devices than the Claim's, is news whatever the phase.
	for _, t := range []struct{ condition, reason string }{
		{v1alpha1.InstanceConditionDeviceHealthy, ReasonDeviceUnhealthy},
		{v1alpha1.InstanceConditionClaimDevices, ReasonNotClaimDevices},
	} {
		now := meta.FindStatusCondition(st.Conditions, t.condition)
		if now == nil || now.Status != metav1.ConditionFalse {
			continue
		}
		if was := meta.FindStatusCondition(inst.Status.Conditions, t.condition); was == nil || was.Status != now.Status || was.Message != now.Message {
			c.recorder.Event(updated, corev1.EventTypeWarning, t.reason, now.Message)
		}
	}
	return nil
}

func isReady(pod *corev1.Pod) bool {
	c := podCondition(pod, corev1.PodReady)
	return c != nil && c.Status == corev1.ConditionTrue
}

// podHash fingerprints a rendered Pod's spec and labels.
func podHash(pod *corev1.Pod) (string, error) {
	b, err := json.Marshal(struct {
		Spec   corev1.PodSpec
		Labels map[string]string
	}{pod.Spec, pod.Labels})
	if err != nil {
		return "", err
	}
	h := fnv.New64a()
	_, _ = h.Write(b)
	return strconv.FormatUint(h.Sum64(), 36), nil
}

// handOverPoll is how often an Instance that lets go of its Claim looks
// for the Claim's holder to have the cards reserved again.
const handOverPoll = 500 * time.Millisecond

// serviceGonePoll is how soon a deleted Instance whose Service only a live
// read found is looked at again.
const serviceGonePoll = time.Second

// claimNode is the node of the Claim a running Instance runs on, once the
// Claim is attached to it; until then o.claimWait says why it waits.
func (c *Controller) claimNode(o *observed) (string, error) {
	inst := o.inst
	if inst.Spec.ClaimName == "" {
		return "", nil
	}
	cl, err := c.claims.Claims(inst.Namespace).Get(inst.Spec.ClaimName)
	if apierrors.IsNotFound(err) {
		o.claimWait = fmt.Sprintf("claim %q does not exist; create it, or delete this Instance and create one without spec.claimName", inst.Spec.ClaimName)
		return "", nil
	}
	if err != nil {
		return "", err
	}
	st := cl.Status
	switch {
	case cl.DeletionTimestamp != nil:
		o.claimWait = fmt.Sprintf("claim %s is being deleted", cl.Name)
	case st.Phase == v1alpha1.ClaimAttached && st.AttachedTo == inst.Name && st.NodeName != "":
		return st.NodeName, nil
	case st.Phase == v1alpha1.ClaimAttached || (st.Phase == v1alpha1.ClaimLost && st.AttachedTo != "" && st.AttachedTo != inst.Name):
		o.claimWait = fmt.Sprintf("claim %s is attached to Instance %s; stop that one first", cl.Name, st.AttachedTo)
	case st.Phase == v1alpha1.ClaimLost && st.AttachedTo == inst.Name:
		// Its node is gone: the Pod there is what it has; stopping lets
		// the Claim be placed again.
		return st.NodeName, nil
	default:
		phase := st.Phase
		if phase == "" {
			phase = v1alpha1.ClaimPending
		}
		why := ""
		if r := handover.WaitingReason(cl); r != "" {
			why = fmt.Sprintf(" (%s: %s)", r, handover.WaitingMessage(cl))
		}
		o.claimWait = fmt.Sprintf("waiting for claim %s, which is %s%s", cl.Name, phase, why)
	}
	return "", nil
}

// claimKeeps says whether the Pod of an Instance letting go of its Claim
// must stay until the Claim's holder has the cards reserved again, so no
// other Pod can take them in between. A Claim that is gone, being deleted,
// lost or expired takes nothing back. Nor does one attached to another
// Instance since: the claim loop keeps the cards reserved for that one,
// and deletes the holder once its Pod is nominated, so waiting for the
// holder could wait forever.
func (c *Controller) claimKeeps(inst *v1alpha1.Instance, pod *corev1.Pod) (bool, error) {
	if inst.Spec.ClaimName == "" {
		return false, nil
	}
	cl, err := c.claims.Claims(inst.Namespace).Get(inst.Spec.ClaimName)
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	node := cl.Status.NodeName
	if cl.DeletionTimestamp != nil || node == "" || pod.Spec.NodeName != node ||
		(cl.Status.Phase != v1alpha1.ClaimAttached && cl.Status.Phase != v1alpha1.ClaimBound) ||
		(cl.Status.Phase == v1alpha1.ClaimAttached && cl.Status.AttachedTo != inst.Name) {
		return false, nil
	}
	holder, err := c.pods.Pods(cl.Namespace).Get(handover.HolderName(cl))
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !(metav1.IsControlledBy(holder, cl) && handover.Reserves(holder, node)), nil
}

// holderGone says whether the holder of the Instance's Claim no longer
// holds its cards: it does not exist (terminating counts as existing) or
// has ended. A Pod of that name the Claim does not control is not its
// holder, and must not keep the Instance's Pod gated.
func (c *Controller) holderGone(inst *v1alpha1.Instance) (bool, error) {
	cl, err := c.claims.Claims(inst.Namespace).Get(inst.Spec.ClaimName)
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	holder, err := c.pods.Pods(inst.Namespace).Get(handover.HolderName(cl))
	if apierrors.IsNotFound(err) {
		return true, nil
	}
	if err != nil {
		return false, err
	}
	return !metav1.IsControlledBy(holder, cl) ||
		holder.Status.Phase == corev1.PodSucceeded || holder.Status.Phase == corev1.PodFailed, nil
}
