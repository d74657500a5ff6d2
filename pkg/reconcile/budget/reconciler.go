// Package budget is the loop that keeps every Budget's status.used equal
// to what the stored Instances and Claims hold, plus the charges the
// Budget admission plugin (kiln.dev/kiln/pkg/admission/budget) made for
// writes still in flight. The plugin only ever raises used; this loop
// brings it down when a stop, a delete or a lapsed Claim is stored, and
// repairs a charge whose write failed.
package budget

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	kubeinformers "k8s.io/client-go/informers"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/ledger"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	kilninformers "kiln.dev/kiln/pkg/generated/informers/externalversions/gpu/v1alpha1"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// Name names the loop in logs and work-queue metrics.
const Name = "budget"

// FieldManager owns the status fields the reconciler writes.
const FieldManager = "kiln-budget-reconciler"

// Reconciler recomputes every Budget's status.used from the stored
// Instances and Claims plus the charges still in flight (status.pending).
// It runs inside the API server, beside the admission plugin whose
// bookkeeping it repairs: it needs no other component (standalone has
// none), and every replica may run it, since each write is a
// compare-and-swap of the same recount. The queue holds namespaces.
type Reconciler struct {
	client versioned.Interface
	// budgets says which namespaces have any; events of the Instances and
	// Claims there trigger a recount.
	budgets listers.BudgetLister
	types   listers.InstanceTypeLister
	// namespaces says whether a Budget's namespace is guarded by the Pod
	// policy; nil without a cluster (standalone), where no Pod runs.
	namespaces corelisters.NamespaceLister
	queue      *queue.Queue[string]

	// PendingTTL is how long a charge whose object is not seen stored is
	// kept. A write takes milliseconds after admission; a request is cut
	// at 60 s. Past this the write is taken to have failed.
	PendingTTL time.Duration
	// Resync re-examines every namespace with Budgets this often, so an
	// expired charge goes within PendingTTL + Resync.
	Resync time.Duration
	// Coalesce gathers the events of a namespace for this long before a
	// recount: each recount lists the namespace's Instances and Claims, so
	// a burst of writes costs one list, not one per write.
	Coalesce time.Duration
	now      func() time.Time

	mu sync.Mutex
	// gone holds, for PendingTTL, the UIDs of the Instances and Claims
	// the informers saw deleted. A charge in flight for one of them is
	// over: a create deleted before any recount listed it would otherwise
	// keep its charge, and refuse the tenant's next create, for the TTL.
	gone map[types.UID]time.Time
}

// NewReconciler registers its event handlers on the factories' informers;
// kube is nil without a cluster.
func NewReconciler(client versioned.Interface, f informers.SharedInformerFactory, kube kubeinformers.SharedInformerFactory) (*Reconciler, error) {
	gpuInformers := f.Gpu().V1alpha1()
	r := &Reconciler{
		client:     client,
		budgets:    gpuInformers.Budgets().Lister(),
		types:      gpuInformers.InstanceTypes().Lister(),
		PendingTTL: 30 * time.Second,
		Resync:     15 * time.Second,
		Coalesce:   200 * time.Millisecond,
		now:        time.Now,
		gone:       map[types.UID]time.Time{},
	}
	r.queue = queue.New(Name, "namespace", r.Reconcile)
	if err := queue.Watch(r.queue, kilninformers.ToTypedBudgetInformer(gpuInformers.Budgets()).TypedInformer(), byNamespace[*v1alpha1.Budget](r)); err != nil {
		return nil, err
	}
	if err := queue.Watch(r.queue, kilninformers.ToTypedInstanceInformer(gpuInformers.Instances()).TypedInformer(), byNamespace[*v1alpha1.Instance](r)); err != nil {
		return nil, err
	}
	if err := queue.Watch(r.queue, kilninformers.ToTypedClaimInformer(gpuInformers.Claims()).TypedInformer(), byNamespace[*v1alpha1.Claim](r)); err != nil {
		return nil, err
	}
	if kube != nil {
		namespaces := kube.Core().V1().Namespaces()
		r.namespaces = namespaces.Lister()
		// The label that guards a namespace comes and goes.
		if _, err := namespaces.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			UpdateFunc: func(old, obj any) {
				o, ok1 := old.(*corev1.Namespace)
				n, ok2 := obj.(*corev1.Namespace)
				if ok1 && ok2 && o.Labels[v1alpha1.LabelAccelerators] != n.Labels[v1alpha1.LabelAccelerators] {
					r.enqueueNamespace(n.Name)
				}
			},
		}); err != nil {
			return nil, err
		}
	}
	// A type's card memory is in every charge of its objects.
	if err := queue.Watch(r.queue, kilninformers.ToTypedInstanceTypeInformer(gpuInformers.InstanceTypes()).TypedInformer(), kilninformers.InstanceTypeHandlerFuncs{
		UpdateFunc: func(old, t *v1alpha1.InstanceType) {
			if !apiequality.Semantic.DeepEqual(old.Spec, t.Spec) {
				r.enqueueAll()
			}
		},
	}); err != nil {
		return nil, err
	}
	return r, nil
}

// byNamespace queues the namespace of every change, and remembers what was
// deleted.
func byNamespace[O queue.Object](r *Reconciler) cache.TypedResourceEventHandlerFuncs[O] {
	return queue.Handler(
		func(o O) {
			if o.GetDeletionTimestamp() != nil && slices.Contains(o.GetFinalizers(), v1alpha1.LedgerFinalizer) {
				// Its ledger is to be folded, or let go where no Budget
				// keeps it.
				r.queue.AddAfter(o.GetNamespace(), r.Coalesce)
				return
			}
			r.enqueueNamespace(o.GetNamespace())
		},
		func(d cache.DeletedObject[O]) {
			// Without a copy there is no UID: the charge then waits
			// out its TTL, as before.
			var unknown O
			if d.OptionalObj != unknown {
				r.deleted(d.OptionalObj.GetUID())
			}
			r.enqueueNamespace(d.GetNamespace())
		})
}

// deleted remembers uid as gone, and forgets what has been gone longer
// than a charge can stay in flight.
func (r *Reconciler) deleted(uid types.UID) {
	now := r.now()
	r.mu.Lock()
	defer r.mu.Unlock()
	for u, at := range r.gone {
		if now.Sub(at) > r.PendingTTL {
			delete(r.gone, u)
		}
	}
	r.gone[uid] = now
}

func (r *Reconciler) isGone(uid types.UID) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	_, ok := r.gone[uid]
	return ok
}

// enqueueNamespace queues a namespace that has Budgets; only those have
// anything to reconcile.
func (r *Reconciler) enqueueNamespace(ns string) {
	if bs, err := r.budgets.Budgets(ns).List(labels.Everything()); err == nil && len(bs) > 0 {
		r.queue.AddAfter(ns, r.Coalesce)
	}
}

func (r *Reconciler) enqueueAll() {
	bs, err := r.budgets.List(labels.Everything())
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	for _, b := range bs {
		r.queue.Add(b.Namespace)
	}
}

// Run reconciles until ctx is done, and re-examines every namespace with
// Budgets each Resync.
func (r *Reconciler) Run(ctx context.Context, workers int) error {
	go wait.UntilWithContext(ctx, func(context.Context) { r.enqueueAll() }, r.Resync)
	return r.queue.Run(ctx, workers)
}

// stored is one stored object's charge.
type stored struct {
	kind, name, rv string
	charge         gpu.BudgetResourceList
}

// Reconcile recomputes the Budgets of one namespace. The informers only
// say when to look: the Budgets, then the Instances and Claims, are read
// consistently from the server, in that order. A charge made after the
// Budget was read fails the compare-and-swap; an object stored after the
// list is either still pending in the Budget read (and kept) or a release
// the next event brings. An informer lagging behind could otherwise lower
// used below what is stored and let a Budget over-commit.
//
// It returns how soon to look again: when the first charge in flight
// expires.
func (r *Reconciler) Reconcile(ctx context.Context, ns string) (time.Duration, error) {
	gpuClient := r.client.GpuV1alpha1()
	read, err := gpuClient.Budgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	instances, err := gpuClient.Instances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	claims, err := gpuClient.Claims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, err
	}
	now := r.now()
	ledgers := ledgers(instances, claims, now)
	if len(read.Items) == 0 {
		// No Budget keeps the hours of what is deleted here.
		return 0, r.releaseFolded(ctx, ns, ledgers)
	}
	var budgets gpu.BudgetList
	if err := v1alpha1.Convert_v1alpha1_BudgetList_To_gpu_BudgetList(read, &budgets, nil); err != nil {
		return 0, fmt.Errorf("budgets of namespace %s: %w", ns, err)
	}
	objects, unpriced, err := r.storedCharges(ns, instances, claims)
	if err != nil {
		return 0, err
	}
	guarded, err := r.guarded(ns)
	if err != nil {
		return 0, err
	}
	var requeueAfter time.Duration
	for i := range budgets.Items {
		b := &budgets.Items[i]
		conditions := r.conditions(b, ns, guarded, unpriced)
		hours := recountLedger(&read.Items[i], ledgers, now)
		requeueAfter = minPositive(requeueAfter, hours.requeueAfter)
		first := chargesOf(b)
		// status builds the Budget's status on pending as it was read
		// (first) or as charges since left it (a rebase, below); only
		// the charges read first are judged settled here.
		status := func(rv string, pending []gpu.BudgetCharge) (out v1alpha1.Budget, changed bool, again time.Duration, err error) {
			used := gpu.BudgetResourceList{}
			for k := range b.Spec.Hard {
				if _, isHours := ledger.HoursKey(v1alpha1.BudgetResourceName(k)); !isHours {
					used[k] = *resource.NewQuantity(0, resource.DecimalSI)
				}
			}
			for _, o := range objects {
				used = accounting.Count(used, accounting.Beyond(o.charge, nil), b.Spec.Hard)
			}
			var kept []gpu.BudgetCharge
			for _, p := range pending {
				if first.has(p) && r.settled(p, objects) {
					continue
				}
				kept = append(kept, p)
				// The stored object (if any) is counted in its old state; the
				// charge in flight adds what its new state holds beyond that.
				var base gpu.BudgetResourceList
				if o, ok := objects[p.UID]; ok {
					base = o.charge
				}
				used = accounting.Count(used, accounting.Beyond(p.Charge, base), b.Spec.Hard)
				if left := r.PendingTTL - r.now().Sub(p.Time.Time); left > 0 && (again == 0 || left < again) {
					again = left
				}
			}
			updated := b.DeepCopy()
			updated.ResourceVersion = rv
			updated.Status.Used, updated.Status.Pending, updated.Status.Conditions = used, kept, conditions
			if err := v1alpha1.Convert_gpu_Budget_To_v1alpha1_Budget(updated, &out, nil); err != nil {
				return out, false, 0, fmt.Errorf("budget %s/%s: %w", b.Namespace, b.Name, err)
			}
			ledgerMoved := hours.apply(&out, b.Generation, now)
			changed = ledgerMoved || !apiequality.Semantic.DeepEqual(used, b.Status.Used) || len(kept) != len(b.Status.Pending) ||
				!apiequality.Semantic.DeepEqual(conditions, b.Status.Conditions)
			return out, changed, again, nil
		}
		out, changed, again, err := status(b.ResourceVersion, b.Status.Pending)
		if err != nil {
			return 0, err
		}
		if !changed {
			requeueAfter = minPositive(requeueAfter, again)
			continue
		}
		stored, err := r.client.GpuV1alpha1().Budgets(b.Namespace).UpdateStatus(ctx, &out, metav1.UpdateOptions{FieldManager: FieldManager})
		for attempt := 0; apierrors.IsConflict(err) && attempt < maxRebases; attempt++ {
			// Charges landed since the Budget was read. When they are all
			// that changed, this count still holds with them added: read
			// the Budget again, not the namespace's objects.
			fresh, rerr := r.chargedSince(ctx, b, objects)
			if rerr != nil || fresh == nil {
				break
			}
			var serr error
			if out, _, again, serr = status(fresh.ResourceVersion, fresh.Status.Pending); serr != nil {
				return 0, serr
			}
			// Another recount (a replica's, or admission's) may have
			// settled a charge that landed after this Budget was read,
			// against an object stored after this list: neither shows
			// it. Its count is in the stored used, so a carried-over
			// count lower than that on any key starts over instead.
			if lower(out.Status.Used, fresh.Status.Used) {
				break
			}
			stored, err = r.client.GpuV1alpha1().Budgets(b.Namespace).UpdateStatus(ctx, &out, metav1.UpdateOptions{FieldManager: FieldManager})
		}
		if err != nil {
			// Anything else changed meanwhile: start over.
			return 0, err
		}
		requeueAfter = minPositive(requeueAfter, again)
		klog.FromContext(ctx).V(2).Info("Recomputed budget", "budget", klog.KObj(b), "used", stored.Status.Used, "pending", len(stored.Status.Pending), "consumed", stored.Status.Consumed)
	}
	// Every Budget now holds the ledgers of what was deleted.
	if err := r.releaseFolded(ctx, ns, ledgers); err != nil {
		return 0, err
	}
	if requeueAfter > 0 {
		requeueAfter += time.Second
	}
	return requeueAfter, nil
}

// maxRebases bounds how often one recount is carried over charges that
// landed before its write, before it starts over from the list.
const maxRebases = 10

// chargedSince reads Budget b again and returns it when it looks changed
// by admission's charges only since b was read, nil otherwise: its spec
// and the rest of its status are as they were, and every charge b held
// that is gone was one this recount settles anyway (a rollback, or
// another recount that saw the same object stored). A charge new since b
// was read is kept, whatever the list says: the list may predate it.
func (r *Reconciler) chargedSince(ctx context.Context, b *gpu.Budget, objects map[types.UID]stored) (*gpu.Budget, error) {
	cur, err := r.client.GpuV1alpha1().Budgets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if err != nil {
		return nil, err
	}
	var fresh gpu.Budget
	if err := v1alpha1.Convert_v1alpha1_Budget_To_gpu_Budget(cur, &fresh, nil); err != nil {
		return nil, err
	}
	if fresh.UID != b.UID || fresh.Generation != b.Generation {
		return nil, nil
	}
	was, is := b.Status, fresh.Status
	was.Used, was.Pending, is.Used, is.Pending = nil, nil, nil, nil
	if !apiequality.Semantic.DeepEqual(was, is) {
		return nil, nil
	}
	current := chargesOf(&fresh)
	for _, p := range b.Status.Pending {
		if !current.has(p) && !r.settled(p, objects) {
			return nil, nil
		}
	}
	return &fresh, nil
}

// lower says whether a is below b on any key of b.
func lower(a v1alpha1.BudgetResourceList, b gpu.BudgetResourceList) bool {
	for k, q := range b {
		have := a[v1alpha1.BudgetResourceName(k)]
		if have.Cmp(q) < 0 {
			return true
		}
	}
	return false
}

// charges are a Budget's charges in flight by object: an object has one.
type charges map[types.UID]gpu.BudgetCharge

func chargesOf(b *gpu.Budget) charges {
	out := make(charges, len(b.Status.Pending))
	for _, p := range b.Status.Pending {
		out[p.UID] = p
	}
	return out
}

// has says whether p is among them: the very same charge, not a later one
// of its object.
func (c charges) has(p gpu.BudgetCharge) bool {
	q, ok := c[p.UID]
	return ok && apiequality.Semantic.DeepEqual(p, q)
}

// guarded says whether the namespace carries the label that binds the Pod
// policy; nil when that cannot be known (no cluster, or the namespace is
// gone).
func (r *Reconciler) guarded(ns string) (*bool, error) {
	if r.namespaces == nil {
		return nil, nil
	}
	n, err := r.namespaces.Get(ns)
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err != nil {
		return nil, err
	}
	g := n.Labels[v1alpha1.LabelAccelerators] == v1alpha1.AcceleratorsKilnOnly
	return &g, nil
}

// conditions are b's conditions after this recount: whether its namespace
// is guarded, and whether every object could be priced.
func (r *Reconciler) conditions(b *gpu.Budget, ns string, guarded *bool, unpriced []string) []metav1.Condition {
	out := slices.Clone(b.Status.Conditions)
	now := metav1.NewTime(r.now())
	set := func(c metav1.Condition) {
		c.ObservedGeneration, c.LastTransitionTime = b.Generation, now
		meta.SetStatusCondition(&out, c)
	}
	switch {
	case guarded == nil:
	case *guarded:
		set(metav1.Condition{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionTrue, Reason: v1alpha1.BudgetReasonNamespaceGuarded,
			Message: fmt.Sprintf("namespace %s is labelled %s=%s: only Kiln makes Pods that get accelerators there", ns, v1alpha1.LabelAccelerators, v1alpha1.AcceleratorsKilnOnly)})
	default:
		set(metav1.Condition{Type: v1alpha1.BudgetConditionGuarded, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonNamespaceNotGuarded,
			Message: fmt.Sprintf("namespace %[1]s is not labelled %[2]s=%[3]s, so Pods there may get accelerators without Kiln, and this Budget does not count them; a cluster admin guards it with: kubectl label namespace %[1]s %[2]s=%[3]s",
				ns, v1alpha1.LabelAccelerators, v1alpha1.AcceleratorsKilnOnly)})
	}
	if len(unpriced) == 0 {
		set(metav1.Condition{Type: v1alpha1.BudgetConditionCounted, Status: metav1.ConditionTrue, Reason: v1alpha1.BudgetReasonAllPriced,
			Message: "every Instance and Claim of the namespace is priced by its InstanceType"})
	} else {
		set(metav1.Condition{Type: v1alpha1.BudgetConditionCounted, Status: metav1.ConditionFalse, Reason: v1alpha1.BudgetReasonUnpriced,
			Message: strings.Join(unpriced, "; ")})
	}
	return out
}

// settled says whether a charge in flight is over: its object is stored in
// the charged state (create) or has moved past the version it was charged
// against (update), or has been deleted, or the charge is too old to still
// be in flight: then its write failed (a create whose name was taken, say).
func (r *Reconciler) settled(p gpu.BudgetCharge, objects map[types.UID]stored) bool {
	if r.now().Sub(p.Time.Time) > r.PendingTTL || r.isGone(p.UID) {
		return true
	}
	o, found := objects[p.UID]
	if p.ResourceVersion == "" {
		return found
	}
	return found && o.rv != p.ResourceVersion
}

// storedCharges reads the charge of every stored Instance and Claim of the
// namespace, including the uncharged ones (with an empty charge), by UID.
//
// An object its type can no longer price is counted as the whole cards it
// runs on, and described in unpriced.
func (r *Reconciler) storedCharges(ns string, instances *v1alpha1.InstanceList, claims *v1alpha1.ClaimList) (out map[types.UID]stored, unpriced []string, err error) {
	out = map[types.UID]stored{}
	price := func(kind, name string, req accounting.Request) (gpu.BudgetResourceList, error) {
		charge, note, err := r.chargeOf(req)
		if note != "" {
			unpriced = append(unpriced, fmt.Sprintf("%s %s: %s", kind, name, note))
		}
		return charge, err
	}
	claimsByName := map[string]*gpu.Claim{}
	for i := range claims.Items {
		c := &gpu.Claim{}
		if err := v1alpha1.Convert_v1alpha1_Claim_To_gpu_Claim(&claims.Items[i], c, nil); err != nil {
			return nil, nil, fmt.Errorf("claim %s/%s: %w", ns, claims.Items[i].Name, err)
		}
		claimsByName[c.Name] = c
		s := stored{kind: "Claim", name: c.Name, rv: c.ResourceVersion}
		if accounting.ClaimCharged(c) {
			if s.charge, err = price("Claim", c.Name, accounting.ClaimRequest(&c.Spec)); err != nil {
				return nil, nil, err
			}
		}
		out[c.UID] = s
	}
	for i := range instances.Items {
		var inst gpu.Instance
		if err := v1alpha1.Convert_v1alpha1_Instance_To_gpu_Instance(&instances.Items[i], &inst, nil); err != nil {
			return nil, nil, fmt.Errorf("instance %s/%s: %w", ns, instances.Items[i].Name, err)
		}
		s := stored{kind: "Instance", name: inst.Name, rv: inst.ResourceVersion}
		var cards gpu.BudgetResourceList
		req := accounting.InstanceRequest(&inst.Spec)
		// A Claim that holds covers the cards it carries.
		if c, ok := claimsByName[inst.Spec.ClaimName]; accounting.InstanceHolds(&inst) && !(ok && accounting.ClaimHolds(c, req)) {
			if cards, err = price("Instance", inst.Name, req); err != nil {
				return nil, nil, err
			}
		}
		s.charge = accounting.InstanceCharge(&inst.Spec, cards)
		out[inst.UID] = s
	}
	return out, unpriced, nil
}

// chargeOf prices a request. One its type can no longer price (a partition
// profile removed from the type since it was admitted) is priced as the
// whole cards it runs on, the most it can hold, and note says so: one such
// object used to fail every recount of its namespace. Without the type at
// all the charge is unknown, and a recount that dropped it could let the
// Budget over-commit: that is an error.
func (r *Reconciler) chargeOf(req accounting.Request) (charge gpu.BudgetResourceList, note string, err error) {
	t, err := r.types.Get(req.Type)
	if err != nil {
		return nil, "", fmt.Errorf("instancetype %q of a charged object: %w", req.Type, err)
	}
	share, unpriced := accounting.CountedShare(req, t)
	if unpriced == nil {
		return accounting.Charge(share, t.Name), "", nil
	}
	return accounting.Charge(share, t.Name), fmt.Sprintf("%v; counted as %d whole card(s) until it is stopped or changed", unpriced, share.MilliCards/1000), nil
}
