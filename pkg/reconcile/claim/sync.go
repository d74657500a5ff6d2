package claim

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
	"kiln.dev/kiln/pkg/domain/ledger"
	"kiln.dev/kiln/pkg/domain/pool"
)

// sync moves one Claim through its phases; see the package comment.
func (c *Controller) sync(ctx context.Context, key cache.ObjectName) (time.Duration, error) {
	cl, err := c.claims.Claims(key.Namespace).Get(key.Name)
	if apierrors.IsNotFound(err) {
		return 0, nil
	}
	if err != nil {
		return 0, err
	}
	holder, foreign, err := c.holderOf(cl)
	if err != nil {
		return 0, err
	}
	inst, err := c.attachedInstance(cl)
	if err != nil {
		return 0, err
	}
	if cl.DeletionTimestamp != nil {
		s := &step{cl: cl, st: *cl.Status.DeepCopy(), holder: holder, inst: inst, now: metav1.NewTime(c.now())}
		return s.after, c.finalize(ctx, s)
	}
	// KilnFinalizers admission sets both finalizers on create; a Claim
	// stored before it, or with the plugin off, gets them here. The
	// ledger's: kiln-apiserver takes it off once the Claim's card-hours
	// are in its Budgets.
	if missing := missingFinalizers(cl.Finalizers); len(missing) > 0 {
		cp := cl.DeepCopy()
		cp.Finalizers = append(cp.Finalizers, missing...)
		if cl, err = c.kiln.GpuV1alpha1().Claims(cl.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return 0, err
		}
	}

	s := &step{cl: cl, st: *cl.Status.DeepCopy(), holder: holder, inst: inst, now: metav1.NewTime(c.now())}
	s.st.ObservedGeneration = cl.Generation
	if s.st.Phase == "" {
		s.st.Phase = v1alpha1.ClaimPending
	}
	node := placedNode(cl, holder)
	if node == "" {
		node = c.assumedNode(cl)
	} else {
		c.forget(cl)
	}
	// A placed Claim under a spent key with onExhausted Stop lets go;
	// one not yet placed waits (placeable).
	spent := ""
	if s.st.Phase != v1alpha1.ClaimExpired && node != "" {
		if spent, err = ledger.StopsFor(c.budgets.Budgets(cl.Namespace), cl.Spec.Type, s.now.Time); err != nil {
			return 0, err
		}
	}
	switch {
	case s.st.Phase == v1alpha1.ClaimExpired:
		err = c.release(ctx, s)
	case spent != "":
		c.exhaust(s, spent)
		err = c.release(ctx, s)
	case foreign != nil:
		s.wait(v1alpha1.ClaimReasonNameConflict, fmt.Sprintf(
			"Pod %s/%s already exists and was not made for this Claim; Kiln does not touch it: delete or rename it, or recreate the Claim under another name",
			foreign.Namespace, foreign.Name))
	case node != "":
		err = c.syncPlaced(ctx, s, node)
	default:
		err = c.place(ctx, s)
	}
	if err != nil {
		return 0, err
	}
	c.observeUsage(s, holding(s.st.Phase))
	if s.quiet {
		return s.after, nil
	}
	return s.after, c.writeStatus(ctx, cl, s)
}

// missingFinalizers are those of the Claim's and the ledger's that have is
// missing.
func missingFinalizers(have []string) []string {
	var out []string
	for _, f := range []string{v1alpha1.ClaimFinalizer, v1alpha1.LedgerFinalizer} {
		if !slices.Contains(have, f) {
			out = append(out, f)
		}
	}
	return out
}

// step is one sync's view and decisions for a Claim.
type step struct {
	cl     *v1alpha1.Claim
	st     v1alpha1.ClaimStatus
	holder *corev1.Pod
	inst   *v1alpha1.Instance
	now    metav1.Time
	// after asks for another look then, even if nothing changes.
	after time.Duration
	// quiet leaves the stored status as it is this time (quietFor).
	quiet bool
	// events to record once the status is stored.
	events []event
}

type event struct{ kind, reason, message string }

func (s *step) wait(reason, message string) {
	waitingCondition(&s.st, s.cl.Generation, reason, message, s.now)
}

func (s *step) requeue(d time.Duration) {
	if d > 0 && (s.after == 0 || d < s.after) {
		s.after = d
	}
}

// syncPlaced runs a Claim that has a node: checks the node, hands the
// cards between holder and Instance, and lets the Claim expire.
func (c *Controller) syncPlaced(ctx context.Context, s *step, node string) error {
	n, err := c.nodes.Get(node)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	if apierrors.IsNotFound(err) {
		n = nil
	}
	lost, wait := nodeLost(n, s.now, metav1.Duration{Duration: c.opts.LostGrace})
	s.requeue(wait.Duration)
	if lost || s.st.Phase == v1alpha1.ClaimLost {
		return c.lost(ctx, s, node, n == nil)
	}
	t, err := c.types.Get(s.cl.Spec.Type)
	if err != nil {
		// The type went away under a placed Claim: keep what is held.
		return client404(err)
	}
	ask, err := Ask(s.cl, t)
	if err != nil {
		s.wait(v1alpha1.ClaimReasonTypeNotFound, err.Error())
		return nil
	}
	s.st.NodeName = node

	if s.inst != nil && (s.st.Phase == v1alpha1.ClaimBound || s.st.Phase == v1alpha1.ClaimAttached) {
		return c.syncAttached(ctx, s, t, node, ask)
	}
	return c.syncHolding(ctx, s, t, node, ask)
}

// syncAttached hands the Claim's cards to the Instance attached to it: the
// holder goes once the Instance's Pod has the room reserved.
func (c *Controller) syncAttached(ctx context.Context, s *step, t *v1alpha1.InstanceType, node string, ask corev1.ResourceList) error {
	if s.st.Phase != v1alpha1.ClaimAttached || s.st.AttachedTo != s.inst.Name {
		s.events = append(s.events, event{corev1.EventTypeNormal, ReasonAttached,
			fmt.Sprintf("Attached to Instance %s on node %s", s.inst.Name, node)})
	}
	s.st.Phase, s.st.AttachedTo, s.st.ExpiresAt = v1alpha1.ClaimAttached, s.inst.Name, nil
	// What the holder had: the Instance's Pod is checked against it.
	s.st.Devices = c.heldDevices(s.cl, ask, node, nil)
	s.wait("", "")
	// The holder goes only once the Instance's Pod has the room
	// reserved for itself, so nothing else gets in between.
	pod, err := c.pods.Pods(s.cl.Namespace).Get(s.inst.Name)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	podReserves := pod != nil && metav1.IsControlledBy(pod, s.inst) && handover.Reserves(pod, node)
	switch {
	case podReserves && s.holder != nil && s.holder.DeletionTimestamp == nil:
		return c.deleteHolder(ctx, s.holder, false)
	case !podReserves && s.holder == nil:
		// The Instance's Pod went (a rebuild) while it stays attached:
		// hold the cards until its next Pod has them reserved.
		_, err := c.createHolder(ctx, s.cl, t, node, ask)
		return err
	}
	return nil
}

// syncHolding keeps an unattached Claim's cards with its holder Pod, and
// moves the Claim to Bound once the holder is bound.
func (c *Controller) syncHolding(ctx context.Context, s *step, t *v1alpha1.InstanceType, node string, ask corev1.ResourceList) error {
	s.st.AttachedTo = ""
	holder := s.holder
	switch {
	case holder == nil:
		created, err := c.createHolder(ctx, s.cl, t, node, ask)
		if apierrors.IsAlreadyExists(err) {
			// Made moments ago; the informer has not shown it yet.
			s.requeue(200 * time.Millisecond)
			s.quiet = s.cl.Status.Phase == ""
			return nil
		}
		if err != nil {
			return err
		}
		holder = created
	case holder.DeletionTimestamp != nil:
		// A holder on its way out (a re-placement): its deletion wakes us.
		return nil
	default:
		if err := handover.Nominate(ctx, c.kube, holder, node, FieldManager); err != nil {
			return client404(err)
		}
		if handover.Gated(holder) {
			others, err := c.otherClaimPods(s.cl)
			if err != nil {
				return err
			}
			if !others {
				if err := handover.Ungate(ctx, c.kube, holder, FieldManager); err != nil {
					return client404(err)
				}
			}
		}
	}
	bound := holder.Spec.NodeName == node
	switch s.st.Phase {
	case v1alpha1.ClaimPending:
		if !bound && s.cl.Status.Phase == "" {
			// A clock behind the API server's reads a negative age: at
			// most quietFor later, look again.
			if wait := quietFor - s.now.Sub(holder.CreationTimestamp.Time); wait > 0 {
				s.quiet = true
				s.requeue(min(wait, quietFor))
				return nil
			}
		}
		if !bound {
			if since, ok := unschedulableSince(holder); ok && s.now.Sub(since) >= replaceAfter {
				// The room was gone by the time the scheduler looked (a Pod
				// it bound meanwhile): try another node.
				c.forget(s.cl)
				s.st.NodeName = ""
				s.wait(v1alpha1.ClaimReasonCapacity, fmt.Sprintf("the scheduler could not bind the holder on node %s (%s); placing again", node, schedulingMessage(holder, node)))
				s.requeue(time.Millisecond)
				return c.deleteHolder(ctx, holder, false)
			}
			s.wait(v1alpha1.ClaimReasonScheduling, schedulingMessage(holder, node))
			s.requeue(replaceAfter)
			return nil
		}
		s.events = append(s.events, event{corev1.EventTypeNormal, ReasonBound, fmt.Sprintf("Holding %s on node %s", describe(ask, ask), node)})
		s.st.Phase = v1alpha1.ClaimBound
		s.st.ExpiresAt = nil
	case v1alpha1.ClaimAttached:
		// The Instance let go; its Pod goes once this holder is nominated.
		s.events = append(s.events, event{corev1.EventTypeNormal, ReasonBound,
			fmt.Sprintf("Instance %s let go; holding %s on node %s again", s.cl.Status.AttachedTo, describe(ask, ask), node)})
		s.st.Phase = v1alpha1.ClaimBound
		s.st.ExpiresAt = nil
	}
	s.wait("", "")
	s.st.Devices = c.heldDevices(s.cl, ask, node, holder)
	return c.expire(ctx, s)
}

// expire sets a Bound Claim's expiresAt from spec.expireAfter, counting
// from when it last became unattached, and lets it lapse then.
func (c *Controller) expire(ctx context.Context, s *step) error {
	after := s.cl.Spec.ExpireAfter
	if after == nil {
		s.st.ExpiresAt = nil
		return nil
	}
	// An edit of expireAfter (the one field that may change) restarts the
	// clock from the edit.
	if s.st.ExpiresAt == nil || s.cl.Generation != s.cl.Status.ObservedGeneration {
		s.st.ExpiresAt = ptr.To(metav1.NewTime(s.now.Add(after.Duration)))
	}
	if left := s.st.ExpiresAt.Sub(s.now.Time); left > 0 {
		s.requeue(left)
		return nil
	}
	s.events = append(s.events, event{corev1.EventTypeNormal, ReasonExpired,
		fmt.Sprintf("No Instance attached for %s; the cards are released. Delete the Claim, or create a new one", after.Duration)})
	s.st.Phase = v1alpha1.ClaimExpired
	return c.release(ctx, s)
}

// release lets go of everything an Expired Claim held. Its status keeps
// naming the node and devices, and so its charge, until the holder is gone.
func (c *Controller) release(ctx context.Context, s *step) error {
	s.st.AttachedTo = ""
	s.wait("", "")
	if s.st.NodeName == "" && s.holder == nil {
		return nil
	}
	gone, err := c.releaseHolder(ctx, s)
	if err != nil || !gone {
		return err
	}
	s.st.NodeName, s.st.Devices = "", nil
	return nil
}

// releaseHolder deletes the Claim's holder and says whether it is gone.
// What the holder held stays charged until then, since a Terminating Pod
// may still run on the cards: so the cache's word that none is left is
// checked with the API server, the Claim looks again until the Pod is
// gone, and says so when that takes longer than the kubelet should.
func (c *Controller) releaseHolder(ctx context.Context, s *step) (bool, error) {
	if h := s.holder; h != nil {
		if h.DeletionTimestamp == nil {
			// A lost node's kubelet cannot confirm a graceful end.
			return false, c.deleteHolder(ctx, h, s.cl.Status.Phase == v1alpha1.ClaimLost)
		}
		c.waitTerminating(s, h)
		return false, nil
	}
	live, err := c.kube.CoreV1().Pods(s.cl.Namespace).Get(ctx, handover.HolderName(s.cl), metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return true, nil
	case err != nil:
		return false, err
	case !controlledBy(live, s.cl):
		return true, nil
	}
	// Made moments ago and not in the cache yet: its events wake us.
	s.requeue(time.Second)
	return false, nil
}

// waitTerminating looks again when the holder should be gone, and from
// then on says, in the Waiting condition and an Event, that it is not.
func (c *Controller) waitTerminating(s *step, h *corev1.Pod) {
	if overdue, left := handover.Overdue(h, s.now.Time); !overdue {
		s.requeue(left)
		return
	}
	s.wait(ReasonHolderTerminating, "holder "+handover.OverdueMessage(h))
	s.requeue(recheck)
}

// lost handles a Claim whose node is gone or NotReady past the grace: it
// is Lost, and placed again as soon as no Instance runs on it.
func (c *Controller) lost(ctx context.Context, s *step, node string, deleted bool) error {
	if s.st.Phase == v1alpha1.ClaimPending && s.cl.Status.NodeName == "" {
		// Given up already: the holder seen is a stale view of the one
		// deleted then.
		if s.holder != nil {
			return c.deleteHolder(ctx, s.holder, true)
		}
		return nil
	}
	if s.st.Phase != v1alpha1.ClaimLost {
		why := "NotReady for longer than " + c.opts.LostGrace.String()
		if deleted {
			why = "deleted"
		}
		msg := fmt.Sprintf("Node %s was %s; the cards held there are lost", node, why)
		if s.inst != nil {
			msg += fmt.Sprintf("; the Claim is placed again once Instance %s stops", s.inst.Name)
		}
		s.events = append(s.events, event{corev1.EventTypeWarning, ReasonLost, msg})
		s.st.Phase = v1alpha1.ClaimLost
		s.wait(ReasonLost, msg)
	}
	if s.inst != nil {
		s.st.AttachedTo = s.inst.Name
		return nil
	}
	// Nothing runs on it: place it again. The holder on the lost node is
	// removed at once, since no kubelet is there to confirm a graceful end.
	c.forget(s.cl)
	if s.holder != nil {
		if err := c.deleteHolder(ctx, s.holder, true); err != nil {
			return err
		}
	}
	s.st = v1alpha1.ClaimStatus{Phase: v1alpha1.ClaimPending, Conditions: s.st.Conditions, ObservedGeneration: s.st.ObservedGeneration}
	s.wait(v1alpha1.ClaimReasonCapacity, fmt.Sprintf("node %s was lost; looking for another node", node))
	return nil
}

// setSettle is how old every unplaced member of a claim set must be
// before the set is placed.
const setSettle = 2 * time.Second

// quietFor is how long a new Claim's holder may wait for the scheduler
// before the Claim's status says Pending, Scheduling: the scheduler
// usually binds it well within that, and the Claim's first status is then
// Bound. Its status is one write through kiln-apiserver, with an Event,
// and a watch event that queues the Claim once more; 1,000 Claims placed
// at once wait on those writes (docs/benchmarks.md). The hold is counted
// meanwhile by its holder Pod, and a new Claim, with no phase, is charged
// as Pending is (accounting.ClaimPhaseCharged).
const quietFor = 2 * time.Second

// replaceAfter is how long a holder may stay unschedulable on the node
// it was placed on before the Claim is placed again.
const replaceAfter = 15 * time.Second

// unschedulableSince is when the scheduler last found no room for pod.
func unschedulableSince(pod *corev1.Pod) (time.Time, bool) {
	for _, cond := range pod.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Reason == corev1.PodReasonUnschedulable {
			return cond.LastTransitionTime.Time, true
		}
	}
	return time.Time{}, false
}

// place finds a node for a Pending Claim, with the rest of its set, and
// creates their holders there. Placements are chosen one at a time; the
// holders are created after, outside the lock: each is assumed on its
// node already, so the next placement counts it, and the round trip of a
// create no longer holds back every other placement (1,000 Claims placed
// at once took 47 s when it did).
func (c *Controller) place(ctx context.Context, s *step) error {
	t, node, group, asks, err := c.choose(s)
	if node == "" || err != nil {
		return err
	}
	for i, m := range group {
		if _, err := c.createHolder(ctx, m, t, node, asks[i]); err != nil && !apierrors.IsAlreadyExists(err) {
			// Those without a holder are placed again.
			for _, m := range group[i:] {
				c.forget(m)
			}
			return err
		}
		if m.Name != s.cl.Name {
			c.queue.Add(cache.MetaObjectToName(m))
		}
	}
	s.st.NodeName = node
	s.wait(v1alpha1.ClaimReasonScheduling, fmt.Sprintf("placed on node %s; waiting for the scheduler to bind its holder Pod", node))
	s.requeue(time.Second)
	// A Claim never written yet (a new one, placed at its first look)
	// keeps its empty status while the scheduler binds its holder: see
	// quietFor.
	s.quiet = s.cl.Status.Phase == ""
	return nil
}

// choose picks the node for a Pending Claim and the rest of its set, and
// assumes them there; "" when they wait, which s says.
func (c *Controller) choose(s *step) (t *v1alpha1.InstanceType, node string, group []*v1alpha1.Claim, asks []corev1.ResourceList, err error) {
	c.placing.Lock()
	defer c.placing.Unlock()
	cl := s.cl
	s.st.NodeName, s.st.Devices, s.st.AttachedTo, s.st.ExpiresAt = "", nil, "", nil
	s.requeue(recheck)
	if t, err = c.placeable(s); t == nil || err != nil {
		return nil, "", nil, nil, err
	}
	group, pin, err := c.group(cl)
	if err != nil {
		return nil, "", nil, nil, err
	}
	// The members of a set arrive one by one, even from one apply: give
	// the newest a moment, so the set is placed whole rather than its
	// first member alone.
	if set, ok := cl.Labels[v1alpha1.ClaimSetLabel]; ok {
		for _, m := range group {
			if age := s.now.Sub(m.CreationTimestamp.Time); age < setSettle {
				s.wait(v1alpha1.ClaimReasonScheduling, fmt.Sprintf("waiting a moment for the rest of claim set %s", set))
				s.requeue(setSettle - age)
				return nil, "", nil, nil, nil
			}
		}
	}
	skip := map[string]bool{}
	for _, m := range group {
		ask, err := Ask(m, t)
		if err != nil {
			s.wait(v1alpha1.ClaimReasonCapacity, err.Error())
			return nil, "", nil, nil, nil
		}
		asks = append(asks, ask)
		skip[m.Namespace+"/"+m.Name] = true
	}
	nodes, err := pool.Nodes(c.nodes, t)
	if err != nil {
		return nil, "", nil, nil, err
	}
	uses, err := c.uses.pool(nodes, c.readNodeUse)
	if err != nil {
		return nil, "", nil, nil, err
	}
	assumed, err := c.assumedHolds(uses, skip)
	if err != nil {
		return nil, "", nil, nil, err
	}
	what := "claim " + cl.Name
	if set, ok := cl.Labels[v1alpha1.ClaimSetLabel]; ok {
		what = fmt.Sprintf("claim set %s (%d claims)", set, len(group))
	}
	ask := sum(asks...)
	p := Place(t, ask, Free(t, ask, nodes, uses, assumed, skip), pin, what)
	if p.Node == "" {
		s.wait(p.Reason, p.Message)
		return nil, "", nil, nil, nil
	}
	for i, m := range group {
		c.assumed[m.Namespace+"/"+m.Name] = assumption{hold: Hold{Claim: m, Node: p.Node, Ask: asks[i]}, at: c.now()}
	}
	return t, p.Node, group, asks, nil
}

// placeable is the Claim's InstanceType if the Claim may be placed now:
// the type exists and is open, and the Budgets have room. Otherwise it
// says in s why not, and returns nil.
func (c *Controller) placeable(s *step) (*v1alpha1.InstanceType, error) {
	t, err := c.types.Get(s.cl.Spec.Type)
	if apierrors.IsNotFound(err) {
		s.wait(v1alpha1.ClaimReasonTypeNotFound, fmt.Sprintf("instancetype %q does not exist; it waits until it is created", s.cl.Spec.Type))
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	if t.DeletionTimestamp != nil || t.Spec.Hold != v1alpha1.HoldNone {
		s.wait(v1alpha1.ClaimReasonTypeHeld, fmt.Sprintf("instancetype %s is on hold (%q) and places no new Claims; it waits until the admin reopens it", t.Name, t.Spec.Hold))
		return nil, nil
	}
	if over, err := c.overBudget(s.cl); err != nil || over != "" {
		s.wait(v1alpha1.ClaimReasonBudget, over)
		return nil, err
	}
	return t, nil
}

// group is the Claims placed together with cl: cl alone, or the members
// of its set (same type) that have no node yet. pin is the node they must
// go to: spec.nodeName, or where the rest of the set already holds.
func (c *Controller) group(cl *v1alpha1.Claim) ([]*v1alpha1.Claim, string, error) {
	set, ok := cl.Labels[v1alpha1.ClaimSetLabel]
	if !ok {
		return []*v1alpha1.Claim{cl}, cl.Spec.NodeName, nil
	}
	members, err := c.claims.Claims(cl.Namespace).List(labels.SelectorFromSet(labels.Set{v1alpha1.ClaimSetLabel: set}))
	if err != nil {
		return nil, "", err
	}
	slices.SortFunc(members, func(a, b *v1alpha1.Claim) int { return strings.Compare(a.Name, b.Name) })
	group := []*v1alpha1.Claim{cl}
	pin := cl.Spec.NodeName
	for _, m := range members {
		if m.Name == cl.Name || m.DeletionTimestamp != nil || m.Status.Phase == v1alpha1.ClaimExpired || m.Spec.Type != cl.Spec.Type {
			continue
		}
		holder, _, err := c.holderOf(m)
		if err != nil {
			return nil, "", err
		}
		if node := placedNode(m, holder); node != "" {
			if m.Status.Phase != v1alpha1.ClaimLost {
				pin = node
			}
			continue
		}
		if pin == "" {
			pin = m.Spec.NodeName
		}
		group = append(group, m)
	}
	return group, pin, nil
}

// createHolder creates the holder on node and nominates it there. An
// existing one (the informer had not seen it) is taken as it is.
func (c *Controller) createHolder(ctx context.Context, cl *v1alpha1.Claim, t *v1alpha1.InstanceType, node string, ask corev1.ResourceList) (*corev1.Pod, error) {
	// The cache can still hold a Claim the server has let go (a watch
	// broken before its deletion arrived): a holder made for it would run
	// on cards no Budget charges. Only this sync acts on this Claim, so
	// one that is live here is not finalized before the holder exists.
	live, err := c.kiln.GpuV1alpha1().Claims(cl.Namespace).Get(ctx, cl.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	if live.UID != cl.UID || live.DeletionTimestamp != nil {
		return nil, fmt.Errorf("claim %s/%s is gone or being deleted on the server; its holder is not made", cl.Namespace, cl.Name)
	}
	pod := handover.RenderHolder(cl, t, node, ask, c.opts.HolderImage)
	others, err := c.otherClaimPods(cl)
	if err != nil {
		return nil, err
	}
	if others {
		// Taking the cards back from the Instance's Pod: not before it
		// is gone, so the holder gets the same devices.
		pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: handover.HandOverGate}}
	}
	created, err := c.kube.CoreV1().Pods(cl.Namespace).Create(ctx, pod, metav1.CreateOptions{FieldManager: FieldManager})
	if err != nil {
		return nil, err
	}
	klog.FromContext(ctx).V(2).Info("Created holder Pod", "claim", klog.KObj(cl), "pod", klog.KObj(created), "node", node)
	return created, client404(handover.Nominate(ctx, c.kube, created, node, FieldManager))
}

// deleteHolder deletes exactly the holder looked at; force skips the
// graceful end a lost node's kubelet can no longer confirm.
func (c *Controller) deleteHolder(ctx context.Context, pod *corev1.Pod, force bool) error {
	opts := metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &pod.UID}}
	if force {
		opts.GracePeriodSeconds = ptr.To[int64](0)
	}
	return client404(c.kube.CoreV1().Pods(pod.Namespace).Delete(ctx, pod.Name, opts))
}

// finalize lets a deleted Claim go once no running Instance uses it and
// its holder Pod is gone: the Claim's charge ends with its finalizer.
func (c *Controller) finalize(ctx context.Context, s *step) error {
	cl := s.cl
	if !slices.Contains(cl.Finalizers, v1alpha1.ClaimFinalizer) {
		return nil
	}
	if s.inst != nil {
		msg := fmt.Sprintf("the Claim is being deleted and waits for Instance %s, which runs on it, to stop: "+
			`kubectl -n %s patch instances.gpu.kiln.dev %s --type=merge -p '{"spec":{"stopped":true}}'`+", or delete the Instance", s.inst.Name, cl.Namespace, s.inst.Name)
		if handover.WaitingReason(cl) != ReasonInstanceRunning {
			s.events = append(s.events, event{corev1.EventTypeWarning, ReasonInstanceRunning, msg})
		}
		s.wait(ReasonInstanceRunning, msg)
		return c.writeStatus(ctx, cl, s)
	}
	gone, err := c.releaseHolder(ctx, s)
	if err != nil {
		return err
	}
	// Held until the holder is gone; the run closes before the finalizer
	// goes, and kiln-apiserver then folds the ledger into the Budgets.
	c.observeUsage(s, !gone && holding(s.st.Phase))
	if !gone {
		return c.writeStatus(ctx, cl, s)
	}
	if !equality.Semantic.DeepEqual(cl.Status.Usage, s.st.Usage) {
		cp := cl.DeepCopy()
		cp.Status.Usage = s.st.Usage
		if cl, err = c.kiln.GpuV1alpha1().Claims(cl.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{FieldManager: FieldManager}); err != nil {
			return client404(err)
		}
	}
	cp := cl.DeepCopy()
	cp.Finalizers = slices.DeleteFunc(cp.Finalizers, func(f string) bool { return f == v1alpha1.ClaimFinalizer })
	_, err = c.kiln.GpuV1alpha1().Claims(cl.Namespace).Update(ctx, cp, metav1.UpdateOptions{FieldManager: FieldManager})
	return client404(err)
}

// writeStatus stores the status when it changed, then records the step's
// events and an Event when the Waiting reason changes.
func (c *Controller) writeStatus(ctx context.Context, cl *v1alpha1.Claim, s *step) error {
	if !equality.Semantic.DeepEqual(cl.Status, s.st) {
		cp := cl.DeepCopy()
		cp.Status = s.st
		updated, err := c.kiln.GpuV1alpha1().Claims(cl.Namespace).UpdateStatus(ctx, cp, metav1.UpdateOptions{FieldManager: FieldManager})
		if err != nil {
			return err
		}
		if r := handover.WaitingReason(updated); r != "" && r != handover.WaitingReason(cl) && r != ReasonLost && r != ReasonInstanceRunning {
			kind := corev1.EventTypeWarning
			if r == v1alpha1.ClaimReasonScheduling {
				kind = corev1.EventTypeNormal
			}
			c.recorder.Event(updated, kind, r, handover.WaitingMessage(updated))
		}
		cl = updated
	}
	for _, e := range s.events {
		c.recorder.Event(cl, e.kind, e.reason, e.message)
	}
	return nil
}

// schedulingMessage says what the scheduler last said of the holder.
func schedulingMessage(holder *corev1.Pod, node string) string {
	for _, cond := range holder.Status.Conditions {
		if cond.Type == corev1.PodScheduled && cond.Status == corev1.ConditionFalse && cond.Message != "" {
			return fmt.Sprintf("placed on node %s; the scheduler has not bound holder Pod %s yet: %s", node, holder.Name, cond.Message)
		}
	}
	return fmt.Sprintf("placed on node %s; waiting for the scheduler to bind holder Pod %s", node, holder.Name)
}

func client404(err error) error {
	if apierrors.IsNotFound(err) {
		return nil
	}
	return err
}

// otherClaimPods says whether the Pod of an Instance on the Claim still
// holds its cards. Only a live Pod an Instance controls counts: a tenant's
// Pod that merely carries the label must not keep the holder gated.
func (c *Controller) otherClaimPods(cl *v1alpha1.Claim) (bool, error) {
	pods, err := c.podIdx.ByTypedIndex(podsByClaim, cl.Namespace+"/"+cl.Name)
	if err != nil {
		return false, err
	}
	for _, p := range pods {
		ref := metav1.GetControllerOf(p)
		if ref != nil && ref.Kind == "Instance" && ref.APIVersion == v1alpha1.SchemeGroupVersion.String() &&
			p.Status.Phase != corev1.PodSucceeded && p.Status.Phase != corev1.PodFailed {
			return true, nil
		}
	}
	return false, nil
}
