// Package budget is the Budget admission plugin; the loop that repairs
// its bookkeeping is kiln.dev/kiln/pkg/reconcile/budget.
//
// The plugin runs last in the chain. A create or start of an Instance, or a
// create of a Claim, that raises a charge is charged to every Budget of the
// namespace whose hard limits name an affected key, by a compare-and-swap
// update of the Budget's status, before the object is stored. The charge is
// also recorded in status.pending until the reconciler sees the object
// stored, so that recomputing status.used from stored objects never loses a
// charge in flight. Charges only go down when the reconciler sees the
// stored objects change (a stop, a delete, a Claim lapsing): released in
// admission, a charge would be lost if the write then failed.
package budget

import (
	"context"
	"fmt"
	"io"
	"slices"
	"sort"
	"sync"
	"time"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/klog/v2"

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/domain/ledger"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "Budget"

// FieldManager owns the status fields the plugin writes when it charges.
const FieldManager = "kiln-budget-admission"

// maxAttempts bounds the compare-and-swap retries of one charge; every
// conflict means another charge landed, so this many concurrent writers
// would have to win first.
const maxAttempts = 500

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin charges Budgets.
type Plugin struct {
	*admission.Handler
	types  listers.InstanceTypeLister
	client versioned.Interface
	// instances and claims say which names look taken (see taken).
	instances   listers.InstanceLister
	claims      listers.ClaimLister
	recount     kilninit.BudgetRecount
	budgets     kilninit.BudgetLister
	writeStatus kilninit.BudgetStatusWriter
	now         func() time.Time
	turns       turns
}

var (
	_ admission.ValidationInterface     = &Plugin{}
	_ kilninit.WantsKilnInformerFactory = &Plugin{}
	_ kilninit.WantsKilnClient          = &Plugin{}
	_ kilninit.WantsBudgetRecount       = &Plugin{}
	_ kilninit.WantsBudgetLister        = &Plugin{}
	_ kilninit.WantsBudgetStatusWriter  = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update), now: time.Now}
}

// SetKilnInformerFactory takes the InstanceType, Instance and Claim
// listers. Budgets are read from the server itself (see Validate).
func (p *Plugin) SetKilnInformerFactory(f informers.SharedInformerFactory) {
	t := f.Gpu().V1alpha1().InstanceTypes()
	p.types = t.Lister()
	p.instances = f.Gpu().V1alpha1().Instances().Lister()
	p.claims = f.Gpu().V1alpha1().Claims().Lister()
	p.SetReadyFunc(t.Informer().HasSynced)
}

// SetKilnClient takes the client that reads Budgets, Instances and Claims
// past the informers' lag.
func (p *Plugin) SetKilnClient(c versioned.Interface) { p.client = c }

// SetBudgetRecount takes the recount of a namespace's Budgets, run before
// charging a Budget whose used does not count what already runs.
func (p *Plugin) SetBudgetRecount(r kilninit.BudgetRecount) { p.recount = r }

// SetBudgetLister takes the consistent read of a namespace's Budgets.
func (p *Plugin) SetBudgetLister(l kilninit.BudgetLister) { p.budgets = l }

// SetBudgetStatusWriter takes what writes a charge into a Budget's status.
func (p *Plugin) SetBudgetStatusWriter(w kilninit.BudgetStatusWriter) { p.writeStatus = w }

// ValidateInitialization checks the plugin got what it needs.
func (p *Plugin) ValidateInitialization() error {
	if p.types == nil || p.instances == nil || p.claims == nil || p.client == nil || p.recount == nil || p.budgets == nil || p.writeStatus == nil {
		return fmt.Errorf("%s needs the InstanceType, Instance and Claim listers, a Kiln client, the Budget recount, the Budget lister and the Budget status writer", PluginName)
	}
	return nil
}

// uncounted says whether the Budget has not yet counted a key the delta
// raises: a Budget created, or given a new key, while Instances run
// starts with that key absent from used, and charging from zero would let
// the namespace run more than the limit until the loop caught up.
func uncounted(b *gpu.Budget, delta gpu.BudgetResourceList) bool {
	for k := range delta {
		if _, limited := b.Spec.Hard[k]; !limited {
			continue
		}
		if _, counted := b.Status.Used[k]; !counted {
			return true
		}
	}
	return false
}

// request is one object's charge change.
type request struct {
	kind, name string
	uid        types.UID
	// oldRV is the stored object's resourceVersion on an update.
	oldRV string
	// charge is the object's whole charge after the write; delta the part
	// of it that is new.
	charge, delta gpu.BudgetResourceList
}

// Validate charges, or refuses, a write that raises a charge.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	req, err := p.request(ctx, a)
	if err != nil || req == nil {
		return err
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, fmt.Errorf("not yet ready to handle request: InstanceTypes are still loading"))
	}
	if !a.IsDryRun() {
		release, err := p.turns.take(ctx, a.GetNamespace())
		if err != nil {
			return apierrors.NewTimeoutError(fmt.Sprintf("waiting to charge the budgets of namespace %q: %v", a.GetNamespace(), err), 1)
		}
		defer release()
	}
	// A consistent read, not the informer: a Budget created a moment ago
	// binds every write that follows its creation, and an informer that has
	// not seen it yet would let those through uncharged.
	all, err := p.budgets(ctx, a.GetNamespace())
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading the budgets of namespace %q: %w", a.GetNamespace(), err))
	}
	var affected []*gpu.Budget
	for i := range all {
		if b := &all[i]; names(b.Spec.Hard, req.delta) || len(hoursCharged(b.Spec.Hard, req.delta)) > 0 {
			affected = append(affected, b)
		}
	}
	sort.Slice(affected, func(i, j int) bool { return affected[i].Name < affected[j].Name })
	if len(affected) > 0 && a.GetOperation() == admission.Create && a.GetSubresource() == "" && !a.IsDryRun() {
		if err := p.taken(ctx, req, a.GetNamespace()); err != nil {
			return err
		}
	}
	var charged []*charged
	for _, b := range affected {
		c, err := p.charge(ctx, a, b, req)
		if err != nil {
			// Give back what was charged to the Budgets before this one;
			// should that fail too, the reconciler repairs it.
			for _, c := range charged {
				p.refund(ctx, c, req)
			}
			return err
		}
		if c != nil {
			charged = append(charged, c)
		}
	}
	return nil
}

// turns lets one write of a namespace at a time through the charge in
// this server. Concurrent charges of one Budget all read the same
// version, and all but one lose the compare-and-swap and read again: 16
// clients creating in one namespace got 21 creates a second through,
// against 81 spread over 20 namespaces (docs/benchmarks.md). In turn,
// each reads what the one before it wrote. The compare-and-swap stays,
// for other replicas and the Budget loop's recounts.
type turns struct {
	mu sync.Mutex
	// ns holds a namespace only while a write holds or waits for its
	// turn, so namespaces come and go without the map growing.
	ns map[string]*turn
}

type turn struct {
	held chan struct{}
	// users are the writes holding or waiting for the turn.
	users int
}

// take waits for the namespace's turn, or for ctx; release ends it.
func (t *turns) take(ctx context.Context, ns string) (release func(), err error) {
	t.mu.Lock()
	if t.ns == nil {
		t.ns = map[string]*turn{}
	}
	tn, ok := t.ns[ns]
	if !ok {
		tn = &turn{held: make(chan struct{}, 1)}
		t.ns[ns] = tn
	}
	tn.users++
	t.mu.Unlock()
	leave := func() {
		t.mu.Lock()
		defer t.mu.Unlock()
		if tn.users--; tn.users == 0 {
			delete(t.ns, ns)
		}
	}
	select {
	case tn.held <- struct{}{}:
		return func() { <-tn.held; leave() }, nil
	case <-ctx.Done():
		leave()
		return nil, ctx.Err()
	}
}

// taken answers a create of a name already stored as storage would, 409,
// before it is charged. Storage finds the name taken only after admission,
// and the charge of a write that stored nothing holds the Budget until the
// reconciler takes the write to have failed (its PendingTTL): a tenant's
// create of a taken name refused their next create for 30 s. The informer
// says whether to look, so a create of a new name costs no read; a live
// read says whether the name is still taken. A name taken too recently for
// the informer to show is charged as before, and left to the TTL.
func (p *Plugin) taken(ctx context.Context, req *request, ns string) error {
	var err error
	resource := "instances"
	switch req.kind {
	case "Instance":
		if _, cached := p.instances.Instances(ns).Get(req.name); cached != nil {
			return nil
		}
		_, err = p.client.GpuV1alpha1().Instances(ns).Get(ctx, req.name, metav1.GetOptions{})
	case "Claim":
		resource = "claims"
		if _, cached := p.claims.Claims(ns).Get(req.name); cached != nil {
			return nil
		}
		_, err = p.client.GpuV1alpha1().Claims(ns).Get(ctx, req.name, metav1.GetOptions{})
	default:
		return nil
	}
	if err == nil {
		return apierrors.NewAlreadyExists(gpu.Resource(resource), req.name)
	}
	// Gone since, or unreadable: charged, and storage answers.
	return nil
}

// charged is one Budget's charge of a write, as stored, so that it can be
// taken back.
type charged struct {
	budget *gpu.Budget
	// entry is the charge's status.pending entry as stored; replaced is
	// the object's earlier entry it took the place of, if any: a charge
	// of another write of the same object still in flight.
	entry    gpu.BudgetCharge
	replaced *gpu.BudgetCharge
}

// request works out what the write charges; nil if it raises nothing.
func (p *Plugin) request(ctx context.Context, a admission.Attributes) (*request, error) {
	var r request
	var oldCharge gpu.BudgetResourceList
	inst, old, err := instancechange.Of(ctx, a, nil)
	claim, _ := a.GetObject().(*gpu.Claim)
	switch {
	case err != nil:
		return nil, err
	case inst != nil:
		r.kind, r.name, r.uid = "Instance", inst.Name, inst.UID
		// Charged is what the reconciler will count once the write is
		// stored (accounting.InstanceHolds of the new object: a stop
		// holds its cards until kiln-controller reports its Pod gone),
		// beyond what it counts now. It used to take a stopped Instance's
		// cards from the old object: an edit of one the controller had
		// not yet observed then added cards to the count uncharged, and a
		// start after it was charged only beyond those, for free.
		cards, err := p.instanceCards(ctx, inst)
		if err != nil {
			return nil, err
		}
		r.charge = accounting.InstanceCharge(&inst.Spec, cards)
		if old != nil {
			r.oldRV = old.ResourceVersion
			oldCards, err := p.instanceCards(ctx, old)
			if err != nil {
				return nil, err
			}
			oldCharge = accounting.InstanceCharge(&old.Spec, oldCards)
		}
	case claim != nil && a.GetOperation() == admission.Create && a.GetSubresource() == "":
		// A Claim's request cannot change; its phase moves through /status
		// and the reconciler releases what a lapsed Claim held.
		r.kind, r.name, r.uid = "Claim", claim.Name, claim.UID
		c, err := p.chargeOf(ctx, accounting.ClaimRequest(&claim.Spec))
		if err != nil || c == nil {
			return nil, err
		}
		r.charge = c
	default:
		return nil, nil
	}
	r.delta = accounting.Beyond(r.charge, oldCharge)
	if len(r.delta) == 0 {
		return nil, nil
	}
	return &r, nil
}

// instanceCards is the charge of the accelerators an Instance holds
// (accounting.InstanceHolds). They are charged to the Claim it runs on
// when that Claim is itself charged and covers all of them; naming a Claim
// that does not exist, does not hold, or is smaller escapes nothing.
func (p *Plugin) instanceCards(ctx context.Context, inst *gpu.Instance) (gpu.BudgetResourceList, error) {
	if !accounting.InstanceHolds(inst) {
		return nil, nil
	}
	req := accounting.InstanceRequest(&inst.Spec)
	if name := inst.Spec.ClaimName; name != "" {
		stored, err := p.client.GpuV1alpha1().Claims(inst.Namespace).Get(ctx, name, metav1.GetOptions{})
		switch {
		case apierrors.IsNotFound(err):
		case err != nil:
			return nil, apierrors.NewInternalError(fmt.Errorf("reading claim %q: %w", name, err))
		default:
			var c gpu.Claim
			if err := v1alpha1.Convert_v1alpha1_Claim_To_gpu_Claim(stored, &c, nil); err != nil {
				return nil, apierrors.NewInternalError(fmt.Errorf("reading claim %q: %w", name, err))
			}
			if accounting.ClaimHolds(&c, req) {
				return nil, nil
			}
		}
	}
	return p.chargeOf(ctx, req)
}

// chargeOf is nil when the type is unknown: InstanceTypeAccess, earlier in
// the chain, refuses those.
func (p *Plugin) chargeOf(ctx context.Context, req accounting.Request) (gpu.BudgetResourceList, error) {
	t, err := accounting.LookupType(ctx, p.types, p.client, req.Type)
	if err != nil {
		return nil, apierrors.NewInternalError(err)
	}
	if t == nil {
		return nil, nil
	}
	share, err := accounting.ShareOf(req, t)
	if err != nil {
		return nil, nil
	}
	return accounting.Charge(share, t.Name), nil
}

// names reports whether hard limits any key the delta raises.
func names(hard, delta gpu.BudgetResourceList) bool {
	for k := range delta {
		if _, ok := hard[k]; ok {
			return true
		}
	}
	return false
}

// charge adds req to one Budget by compare-and-swap, or refuses it. A
// conflict means another charge landed first: read again and retry. It
// returns what it stored, nil when nothing was (a dry run, a Budget gone).
func (p *Plugin) charge(ctx context.Context, a admission.Attributes, b *gpu.Budget, req *request) (*charged, error) {
	recounted := false
	for attempt := 0; attempt < maxAttempts; attempt++ {
		over := exceeds(b, req.delta)
		if over == "" {
			over = spent(b, req.delta, p.now())
		}
		// Count what runs first when the Budget has not counted a key
		// yet, or before a refusal: status.used lags a release (an
		// Instance reported Stopped a moment ago, which its owner may
		// already have seen) until the Budget loop recounts, and a
		// refusal should not rest on that. A conflict means a charge
		// landed, which the reread shows.
		if !recounted && (over != "" || uncounted(b, req.delta)) {
			recounted = true
			if err := p.recount(ctx, b.Namespace); err != nil && !apierrors.IsConflict(err) {
				return nil, apierrors.NewInternalError(fmt.Errorf("counting what budget %q already holds: %w", b.Name, err))
			}
			cur, err := p.reread(ctx, b)
			if cur == nil {
				return nil, err
			}
			b = cur
			continue
		}
		if over != "" {
			return nil, admission.NewForbidden(a, fmt.Errorf("%s", over))
		}
		if a.IsDryRun() || !names(b.Spec.Hard, req.delta) {
			// Checked, never charged: a dry run, or a Budget that limits
			// only the hours the write will spend.
			return nil, nil
		}
		updated := b.DeepCopy()
		updated.Status.Used = accounting.Count(updated.Status.Used, req.delta, updated.Spec.Hard)
		entry := gpu.BudgetCharge{
			Kind: req.kind, Name: req.name, UID: req.uid, ResourceVersion: req.oldRV,
			Charge: restrict(req.charge, updated.Spec.Hard), Time: metav1.NewTime(p.now()),
		}
		var replaced *gpu.BudgetCharge
		updated.Status.Pending, replaced = withPending(p.unsettled(b.Namespace, updated.Status.Pending), entry)
		stored, err := p.writeStatus(ctx, updated)
		switch {
		case err == nil:
			c := &charged{budget: stored, entry: entry, replaced: replaced}
			// Compared as stored: times keep whole seconds.
			if i := pendingOf(stored.Status.Pending, req.uid); i >= 0 {
				c.entry = stored.Status.Pending[i]
			}
			return c, nil
		case apierrors.IsConflict(err):
			if b, err = p.reread(ctx, b); b == nil {
				return nil, err
			}
		case apierrors.IsNotFound(err):
			// The Budget was deleted meanwhile: nothing to charge.
			return nil, nil
		default:
			return nil, apierrors.NewInternalError(fmt.Errorf("charging budget %q: %w", b.Name, err))
		}
	}
	return nil, apierrors.NewConflict(gpu.Resource("budgets"), b.Name, fmt.Errorf("budget %q is being charged by too many requests at once; try again", b.Name))
}

// unsettled is list without the charges of creates the informer shows
// stored: each is counted from its object from then on, and used stays
// as it is. Left to the Budget loop's recount alone, a burst of creates
// in one namespace kept about 200 entries there, and every charge decoded,
// copied and encoded them all (bench-scale, step 4). A recount that read
// the Budget before an entry went either lists the object, stored before
// the informer showed it, or loses its compare-and-swap to this write; a
// recount carried over this write is refused when it comes out below the
// stored used. Charges of updates are left to the recount: an informer
// behind the charge's version cannot tell which version it shows.
func (p *Plugin) unsettled(ns string, list []gpu.BudgetCharge) []gpu.BudgetCharge {
	out := make([]gpu.BudgetCharge, 0, len(list))
	for _, e := range list {
		if e.ResourceVersion == "" && p.stored(ns, e) {
			continue
		}
		out = append(out, e)
	}
	return out
}

// stored says whether the informer shows the object a charge is for.
func (p *Plugin) stored(ns string, e gpu.BudgetCharge) bool {
	var uid types.UID
	switch e.Kind {
	case "Instance":
		if o, err := p.instances.Instances(ns).Get(e.Name); err == nil {
			uid = o.UID
		}
	case "Claim":
		if o, err := p.claims.Claims(ns).Get(e.Name); err == nil {
			uid = o.UID
		}
	}
	return uid != "" && uid == e.UID
}

// pendingOf is the index of the object's entry in status.pending, or -1.
func pendingOf(list []gpu.BudgetCharge, uid types.UID) int {
	for i := range list {
		if list[i].UID == uid {
			return i
		}
	}
	return -1
}

// reread gets the Budget from the server; nil if it is gone.
func (p *Plugin) reread(ctx context.Context, b *gpu.Budget) (*gpu.Budget, error) {
	cur, err := p.client.GpuV1alpha1().Budgets(b.Namespace).Get(ctx, b.Name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil, nil
	}
	if err == nil {
		var out gpu.Budget
		if err = v1alpha1.Convert_v1alpha1_Budget_To_gpu_Budget(cur, &out, nil); err == nil {
			return &out, nil
		}
	}
	return nil, apierrors.NewInternalError(fmt.Errorf("reading budget %q: %w", b.Name, err))
}

// exceeds describes the first limit the delta would break, or "".
func exceeds(b *gpu.Budget, delta gpu.BudgetResourceList) string {
	keys := make([]gpu.BudgetResourceName, 0, len(delta))
	for k := range delta {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hard, ok := b.Spec.Hard[k]
		if !ok {
			continue
		}
		used := b.Status.Used[k]
		asked := delta[k]
		total := used.DeepCopy()
		total.Add(asked)
		if total.Cmp(hard) > 0 {
			return fmt.Sprintf("exceeds budget %q: %s used %s + requested %s > hard %s", b.Name, k, used.String(), asked.String(), hard.String())
		}
	}
	return ""
}

// hoursCharged maps each accelerator-hours key of hard that the delta
// spends to the card key it spends it by: accelerator-hours by
// accelerators, accelerator-hours.<type> by accelerators.<type>.
func hoursCharged(hard, delta gpu.BudgetResourceList) map[gpu.BudgetResourceName]gpu.BudgetResourceName {
	out := map[gpu.BudgetResourceName]gpu.BudgetResourceName{}
	for k := range hard {
		typ, ok := ledger.HoursKey(v1alpha1.BudgetResourceName(k))
		if !ok {
			continue
		}
		cards := gpu.BudgetAccelerators
		if typ != "" {
			cards = gpu.BudgetResourceName(gpu.BudgetAcceleratorsPerTypePrefix + typ)
		}
		if q, ok := delta[cards]; ok && q.Sign() > 0 {
			out[k] = cards
		}
	}
	return out
}

// spent describes the first accelerator-hours key the delta would spend
// past its limit, or "". Status.consumed is as of consumedTime; what is
// charged now (status.used) is taken to have run since, which can only
// overstate it: a refusal comes after a recount that brings both up to
// date.
func spent(b *gpu.Budget, delta gpu.BudgetResourceList, now time.Time) string {
	charged := hoursCharged(b.Spec.Hard, delta)
	keys := make([]gpu.BudgetResourceName, 0, len(charged))
	for k := range charged {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	for _, k := range keys {
		hard := b.Spec.Hard[k]
		// From the exact usage consumed was written with: consumed itself
		// is rounded up to the thousandth of an hour.
		held := heldSeconds(b.Status.Usage, k)
		if t := b.Status.ConsumedTime; t != nil && now.After(t.Time) {
			rate := b.Status.Used[charged[k]]
			held += rate.MilliValue() * int64(now.Sub(t.Time)/time.Second)
		}
		if held < ledger.HoursOf(hard) {
			continue
		}
		var period *v1alpha1.BudgetPeriod
		if p := b.Spec.Period; p != nil {
			period = &v1alpha1.BudgetPeriod{Calendar: v1alpha1.BudgetCalendar(p.Calendar), RollingDays: p.RollingDays}
		}
		asked, used := delta[charged[k]], ledger.Hours(held)
		return fmt.Sprintf("exceeds budget %q: %s consumed %s + requested %s card(s) > hard %s this period (since %s); card-hours come back from %s, or a cluster admin raises spec.hard[%s]",
			b.Name, k, used.String(), asked.String(), hard.String(),
			ledger.PeriodStart(period, now).Format(time.RFC3339), ledger.PeriodEnd(period, now).Format(time.RFC3339), k)
	}
	return ""
}

// heldSeconds is the milli-card-seconds usage holds that hours key k
// counts, as ledger.CardSeconds reads a stored Budget.
func heldSeconds(usage []gpu.BudgetUsage, k gpu.BudgetResourceName) int64 {
	out := make([]v1alpha1.BudgetUsage, len(usage))
	for i := range usage {
		// Plain field copies: the conversion cannot fail.
		_ = v1alpha1.Convert_gpu_BudgetUsage_To_v1alpha1_BudgetUsage(&usage[i], &out[i], nil)
	}
	return ledger.CardSeconds(out, v1alpha1.BudgetResourceName(k))
}

// restrict keeps the keys the Budget limits.
func restrict(c, hard gpu.BudgetResourceList) gpu.BudgetResourceList {
	out := gpu.BudgetResourceList{}
	for k := range hard {
		if q, ok := c[k]; ok {
			out[k] = q.DeepCopy()
		}
	}
	return out
}

// withPending records a charge, replacing an earlier one of the object,
// which it returns. An earlier charge against the same resourceVersion is
// another update still in flight: only one of the two can be stored, and
// either may be, so the entry keeps the larger of the two charges of each
// key. (It used to keep the later one: a recount before the larger was
// stored then counted too little, and a third write could over-commit.)
// An earlier one against another version has landed, or lost, already.
func withPending(list []gpu.BudgetCharge, c gpu.BudgetCharge) ([]gpu.BudgetCharge, *gpu.BudgetCharge) {
	out := make([]gpu.BudgetCharge, 0, len(list)+1)
	var replaced *gpu.BudgetCharge
	for i, e := range list {
		if e.UID == c.UID {
			replaced = &list[i]
			if e.ResourceVersion == c.ResourceVersion {
				c.Charge = largest(e.Charge, c.Charge)
			}
			continue
		}
		out = append(out, e)
	}
	return append(out, c), replaced
}

// largest is, for each key of a or b, the larger of the two.
func largest(a, b gpu.BudgetResourceList) gpu.BudgetResourceList {
	out := make(gpu.BudgetResourceList, len(a)+len(b))
	for k, q := range a {
		out[k] = q.DeepCopy()
	}
	for k, q := range b {
		if have, ok := out[k]; !ok || q.Cmp(have) > 0 {
			out[k] = q.DeepCopy()
		}
	}
	return out
}

// refund takes back a charge made moments ago, when a later Budget refused
// the same write: used goes down by its delta, and its pending entry goes,
// giving its place back to the entry it replaced. An entry another write
// of the object has put there since is left alone.
func (p *Plugin) refund(ctx context.Context, c *charged, req *request) {
	b := c.budget
	for attempt := 0; attempt < maxAttempts; attempt++ {
		cur, _ := p.reread(ctx, b)
		if cur == nil {
			return
		}
		updated := cur.DeepCopy()
		updated.Status.Used = accounting.Count(updated.Status.Used, negated(req.delta), updated.Spec.Hard)
		if i := pendingOf(updated.Status.Pending, req.uid); i >= 0 && apiequality.Semantic.DeepEqual(updated.Status.Pending[i], c.entry) {
			updated.Status.Pending = append(updated.Status.Pending[:i], updated.Status.Pending[i+1:]...)
			if c.replaced != nil {
				updated.Status.Pending = append(updated.Status.Pending, *c.replaced)
			}
		}
		if _, err := p.writeStatus(ctx, updated); !apierrors.IsConflict(err) {
			if err != nil {
				klog.FromContext(ctx).Error(err, "Refunding budget; the reconciler will repair it", "budget", klog.KObj(b))
			}
			return
		}
	}
}

// negated is d with every quantity's sign turned.
func negated(d gpu.BudgetResourceList) gpu.BudgetResourceList {
	out := make(gpu.BudgetResourceList, len(d))
	for k, q := range d {
		q = q.DeepCopy()
		q.Neg()
		out[k] = q
	}
	return out
}
