package budget

import (
	"context"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/admission/accounting"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// Reconciler recomputes every Budget's status.used from the stored
// Instances and Claims plus the charges still in flight (status.pending).
// It runs inside the API server, beside the plugin whose bookkeeping it
// repairs: it needs no other component (standalone has none), and every
// replica may run it, since each write is a compare-and-swap of the same
// recount.
type Reconciler struct {
	client versioned.Interface
	// budgets says which namespaces have any; events of the Instances and
	// Claims there trigger a recount.
	budgets listers.BudgetLister
	types   listers.InstanceTypeLister
	synced  []cache.InformerSynced
	queue   workqueue.TypedRateLimitingInterface[string]

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
}

// NewReconciler registers its event handlers on the factory's informers.
func NewReconciler(client versioned.Interface, f informers.SharedInformerFactory) (*Reconciler, error) {
	gpuInformers := f.Gpu().V1alpha1()
	r := &Reconciler{
		client:     client,
		budgets:    gpuInformers.Budgets().Lister(),
		types:      gpuInformers.InstanceTypes().Lister(),
		PendingTTL: 30 * time.Second,
		Resync:     15 * time.Second,
		Coalesce:   200 * time.Millisecond,
		now:        time.Now,
		queue: workqueue.NewTypedRateLimitingQueueWithConfig(workqueue.DefaultTypedControllerRateLimiter[string](),
			workqueue.TypedRateLimitingQueueConfig[string]{Name: "budget"}),
	}
	byNamespace := cache.ResourceEventHandlerFuncs{
		AddFunc:    r.enqueueObject,
		UpdateFunc: func(_, obj any) { r.enqueueObject(obj) },
		DeleteFunc: r.enqueueObject,
	}
	for _, inf := range []cache.SharedIndexInformer{
		gpuInformers.Budgets().Informer(), gpuInformers.Instances().Informer(), gpuInformers.Claims().Informer(),
	} {
		if _, err := inf.AddEventHandler(byNamespace); err != nil {
			return nil, err
		}
		r.synced = append(r.synced, inf.HasSynced)
	}
	// A type's card memory is in every charge of its objects.
	typeInformer := gpuInformers.InstanceTypes().Informer()
	if _, err := typeInformer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(_, _ any) { r.enqueueAll() },
	}); err != nil {
		return nil, err
	}
	r.synced = append(r.synced, typeInformer.HasSynced)
	return r, nil
}

func (r *Reconciler) enqueueObject(obj any) {
	if tomb, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = tomb.Obj
	}
	m, err := metaOf(obj)
	if err != nil {
		utilruntime.HandleError(err)
		return
	}
	// Only namespaces with Budgets have anything to reconcile.
	if bs, err := r.budgets.Budgets(m.GetNamespace()).List(labels.Everything()); err == nil && len(bs) > 0 {
		r.queue.AddAfter(m.GetNamespace(), r.Coalesce)
	}
}

func metaOf(obj any) (metav1.Object, error) {
	m, ok := obj.(metav1.Object)
	if !ok {
		return nil, fmt.Errorf("budget reconciler: unexpected object %T", obj)
	}
	return m, nil
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

// Run reconciles until ctx is done.
func (r *Reconciler) Run(ctx context.Context, workers int) {
	defer utilruntime.HandleCrash()
	defer r.queue.ShutDown()
	logger := klog.FromContext(ctx).WithName("budget-reconciler")
	ctx = klog.NewContext(ctx, logger)
	if !cache.WaitForNamedCacheSyncWithContext(ctx, r.synced...) {
		return
	}
	for range workers {
		go wait.UntilWithContext(ctx, r.worker, time.Second)
	}
	go wait.UntilWithContext(ctx, func(context.Context) { r.enqueueAll() }, r.Resync)
	<-ctx.Done()
}

func (r *Reconciler) worker(ctx context.Context) {
	for r.processNext(ctx) {
	}
}

func (r *Reconciler) processNext(ctx context.Context) bool {
	ns, shutdown := r.queue.Get()
	if shutdown {
		return false
	}
	defer r.queue.Done(ns)
	if err := r.Reconcile(ctx, ns); err != nil {
		if !apierrors.IsConflict(err) {
			klog.FromContext(ctx).Error(err, "Reconciling budgets", "namespace", ns)
		}
		r.queue.AddRateLimited(ns)
		return true
	}
	r.queue.Forget(ns)
	return true
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
func (r *Reconciler) Reconcile(ctx context.Context, ns string) error {
	gpuClient := r.client.GpuV1alpha1()
	budgetList, err := gpuClient.Budgets(ns).List(ctx, metav1.ListOptions{})
	if err != nil || len(budgetList.Items) == 0 {
		return err
	}
	objects, err := r.storedCharges(ctx, ns)
	if err != nil {
		return err
	}
	var requeueAfter time.Duration
	for i := range budgetList.Items {
		b := &budgetList.Items[i]
		used := v1alpha1.BudgetResourceList{}
		for k := range b.Spec.Hard {
			used[k] = *resource.NewQuantity(0, resource.DecimalSI)
		}
		for _, o := range objects {
			addAll(used, o.charge, nil)
		}
		var kept []v1alpha1.BudgetCharge
		for _, p := range b.Status.Pending {
			if r.settled(p, objects) {
				continue
			}
			kept = append(kept, p)
			// The stored object (if any) is counted in its old state; the
			// charge in flight adds what its new state holds beyond that.
			var base gpu.BudgetResourceList
			if o, ok := objects[p.UID]; ok {
				base = o.charge
			}
			addAll(used, internalList(p.Charge), base)
			if left := r.PendingTTL - r.now().Sub(p.Time.Time); left > 0 && (requeueAfter == 0 || left < requeueAfter) {
				requeueAfter = left
			}
		}
		if equalLists(used, b.Status.Used) && len(kept) == len(b.Status.Pending) {
			continue
		}
		updated := b.DeepCopy()
		updated.Status.Used, updated.Status.Pending = used, kept
		if _, err := r.client.GpuV1alpha1().Budgets(ns).UpdateStatus(ctx, updated, metav1.UpdateOptions{FieldManager: "kiln-budget-reconciler"}); err != nil {
			// A conflict means a charge landed meanwhile: start over.
			return err
		}
		klog.FromContext(ctx).V(2).Info("Recomputed budget", "budget", klog.KObj(b), "used", used, "pending", len(kept))
	}
	if requeueAfter > 0 {
		r.queue.AddAfter(ns, requeueAfter+time.Second)
	}
	return nil
}

// settled says whether a charge in flight is over: its object is stored in
// the charged state (create) or has moved past the version it was charged
// against (update), or it is too old to still be in flight: then its write
// failed (a create whose name was taken, say).
func (r *Reconciler) settled(p v1alpha1.BudgetCharge, objects map[types.UID]stored) bool {
	if r.now().Sub(p.Time.Time) > r.PendingTTL {
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
func (r *Reconciler) storedCharges(ctx context.Context, ns string) (map[types.UID]stored, error) {
	out := map[types.UID]stored{}
	instances, err := r.client.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claims, err := r.client.GpuV1alpha1().Claims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claimsByName := map[string]*v1alpha1.Claim{}
	for i := range claims.Items {
		claimsByName[claims.Items[i].Name] = &claims.Items[i]
	}
	for i := range instances.Items {
		inst := &instances.Items[i]
		s := stored{kind: "Instance", name: inst.Name, rv: inst.ResourceVersion}
		charged := !inst.Spec.Stopped
		if c, ok := claimsByName[inst.Spec.ClaimName]; charged && ok {
			charged = !ClaimHolds(c, inst.Spec.Type)
		}
		if charged {
			if s.charge, err = r.chargeOf(accounting.V1alpha1InstanceRequest(&inst.Spec), true); err != nil {
				return nil, err
			}
		}
		out[inst.UID] = s
	}
	for i := range claims.Items {
		c := &claims.Items[i]
		s := stored{kind: "Claim", name: c.Name, rv: c.ResourceVersion}
		if accounting.ClaimCharged(string(c.Status.Phase)) {
			if s.charge, err = r.chargeOf(accounting.V1alpha1ClaimRequest(&c.Spec), false); err != nil {
				return nil, err
			}
		}
		out[c.UID] = s
	}
	return out, nil
}

// chargeOf refuses to guess: without the type the charge is unknown, and a
// recount that dropped it could let the Budget over-commit.
func (r *Reconciler) chargeOf(req accounting.Request, instance bool) (gpu.BudgetResourceList, error) {
	t, err := r.types.Get(req.Type)
	if err != nil {
		return nil, fmt.Errorf("instancetype %q of a charged object: %w", req.Type, err)
	}
	share, err := accounting.ShareOf(req, t)
	if err != nil {
		return nil, err
	}
	return accounting.Charge(share, t.Name, instance), nil
}

// addAll adds to used, for its keys only, what c holds beyond base.
func addAll(used v1alpha1.BudgetResourceList, c, base gpu.BudgetResourceList) {
	for k, u := range used {
		q, ok := c[gpu.BudgetResourceName(k)]
		if !ok {
			continue
		}
		q = q.DeepCopy()
		if b, ok := base[gpu.BudgetResourceName(k)]; ok {
			q.Sub(b)
		}
		if q.Sign() > 0 {
			u.Add(q)
			used[k] = u
		}
	}
}

func internalList(l v1alpha1.BudgetResourceList) gpu.BudgetResourceList {
	out := make(gpu.BudgetResourceList, len(l))
	for k, q := range l {
		out[gpu.BudgetResourceName(k)] = q
	}
	return out
}

func equalLists(a, b v1alpha1.BudgetResourceList) bool {
	if len(a) != len(b) {
		return false
	}
	for k, q := range a {
		o, ok := b[k]
		if !ok || q.Cmp(o) != 0 {
			return false
		}
	}
	return true
}
