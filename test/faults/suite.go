package faults

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// Row is one line of the suite's report.
type Row struct {
	Fault, Load            string
	Injected               int
	Acked, Found           int
	WatchGaps, OverCommits int
	Orphans, ServerErrors  int
	Relists                int
	// Err is why the fault could not run to its end.
	Err string
	// Detail says what each non-zero promise count was about.
	Detail []string
	// Answers counts the load's requests by what came back other than
	// success: an HTTP code and reason, or how the request failed without
	// one. Some are the load's own doing (409s of workers racing on one
	// name, 403s of a spent Budget).
	Answers map[string]int
}

// Failed says whether a promised zero is not zero.
func (r Row) Failed() bool {
	return r.Err != "" || r.Found != r.Acked || r.WatchGaps != 0 || r.OverCommits != 0 || r.Orphans != 0
}

// PrintTable writes the report.
func PrintTable(w io.Writer, rows []Row) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "fault\tload\tinjected\twrites acked\twrites found\twatch gaps\tover-commits\torphans\t5xx\trelists\t")
	for _, r := range rows {
		fmt.Fprintf(tw, "%s\t%s\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t%d\t\n", r.Fault, r.Load, r.Injected, r.Acked, r.Found, r.WatchGaps, r.OverCommits, r.Orphans, r.ServerErrors, r.Relists)
	}
	tw.Flush()
}

// Env is what a fault runs against.
type Env struct {
	Kube kubernetes.Interface
	// Kiln is the admin through the aggregator.
	Kiln versioned.Interface
	// Aggregated and Direct are the admin's dynamic clients through
	// kube-apiserver and straight to Kiln.
	Aggregated, Direct dynamic.Interface
	// Tenants are each tenant's Kiln client, by namespace.
	Tenants map[string]versioned.Interface
	// Budgets name each tenant's Budget; every one has BudgetHard cards.
	Budgets    map[string]string
	BudgetHard int64
	Type       string
	Log        io.Writer
	// Rounds is how many times a writer fault is injected; 0 means 3.
	Rounds int
	// Image is what the load's Instances run; "busybox:1" if empty, which
	// only a simulated node can run without a registry; Command is what
	// they run in it.
	Image   string
	Command []string
}

// Injector does one fault and returns once the cluster serves again.
type Injector func(ctx context.Context, round int) error

// Timing of a writer-load fault.
const (
	rounds     = 3
	settleLoad = 6 * time.Second
	// convergence bounds the wait for the controller to catch up after a
	// fault, and for a cleanup. A run ends the wait as soon as it holds; a
	// loaded machine (CI beside another cluster) needs more than the
	// minute an idle one takes.
	convergence = 5 * time.Minute
	// checkTime bounds the linearizability check of one object.
	checkTime = time.Minute
)

// RunWriterFault runs the tenants' writer load, injects the fault rounds
// times with load before, between and after, then stops the load and
// checks every promise. prefix names this fault's objects.
func (e *Env) RunWriterFault(ctx context.Context, name, prefix string, inject Injector) Row {
	row := Row{Fault: name, Load: fmt.Sprintf("%d tenants x 2 writers", len(e.Tenants))}
	fail := func(format string, a ...any) Row {
		row.Err = fmt.Sprintf(format, a...)
		return row
	}
	runCtx, stopAll := context.WithCancel(ctx)
	defer stopAll()

	l := &load{hist: newHistory(), prefix: prefix, instanceType: e.Type, image: e.Image, command: e.Command, answers: map[string]int{}}
	if l.image == "" {
		l.image = "busybox:1"
	}
	n := e.Rounds
	if n == 0 {
		n = rounds
	}
	var watchers []*watcher
	var wg sync.WaitGroup
	for ns := range e.Tenants {
		for _, res := range []string{"instances", "claims"} {
			for path, client := range map[string]dynamic.Interface{"aggregated": e.Aggregated, "direct": e.Direct} {
				w := newWatcher(path+" "+res+" "+ns, client, res, ns)
				watchers = append(watchers, w)
				wg.Add(1)
				go func() { defer wg.Done(); w.run(runCtx) }()
			}
		}
	}
	sampler := &budgetSampler{kube: e.Kube, kiln: e.Kiln, budgets: e.Budgets, hard: e.BudgetHard}
	wg.Add(1)
	go func() { defer wg.Done(); sampler.run(runCtx) }()

	loadCtx, stopLoad := context.WithCancel(runCtx)
	loadDone := make(chan struct{})
	go func() { defer close(loadDone); l.run(loadCtx, e.Tenants, 2) }()
	sleep(ctx, settleLoad)
	for round := range n {
		fmt.Fprintf(e.Log, "faults: %s, round %d\n", name, round+1)
		if err := inject(ctx, round); err != nil {
			stopLoad()
			<-loadDone
			return fail("round %d: %v", round+1, err)
		}
		row.Injected++
		sleep(ctx, settleLoad)
	}
	stopLoad()
	<-loadDone

	// The controller catches up; then the store is read one last time,
	// as part of the history, so a write that was lost shows.
	if bad := e.converge(ctx, tenantNamespaces(e.Tenants)); len(bad) > 0 {
		row.Orphans = len(bad)
		row.Detail = append(row.Detail, bad...)
	}
	e.finalReads(ctx, l)
	illegal, undecided := l.hist.linearizable(checkTime)
	perKey := l.hist.writesByKey()
	for _, n := range perKey {
		row.Acked += n
	}
	row.Found = row.Acked
	for _, k := range illegal {
		row.Found -= perKey[k]
		row.Detail = append(row.Detail, fmt.Sprintf("%s: no linear order explains its history", k))
	}
	// A history the checker could not order in its time proves nothing
	// either way; its writes are not counted as found.
	pending := l.hist.unknownByKey()
	for _, k := range undecided {
		row.Found -= perKey[k]
		row.Detail = append(row.Detail, fmt.Sprintf("%s: the checker could not order its history in %v (%d requests of unknown outcome)", k, checkTime, pending[k]))
	}

	l.mu.Lock()
	acked := append([]ackedWrite(nil), l.acked...)
	l.mu.Unlock()
	row.WatchGaps, row.Relists = e.checkWatchers(ctx, watchers, acked, &row.Detail)
	stopAll()
	wg.Wait()
	row.OverCommits, _ = sampler.overCommits()
	_, d := sampler.overCommits()
	row.Detail = append(row.Detail, d...)
	row.ServerErrors = int(l.serverErrors.Load())
	l.mu.Lock()
	row.Answers = maps.Clone(l.answers)
	l.mu.Unlock()
	return row
}

func tenantNamespaces(t map[string]versioned.Interface) []string {
	var ns []string
	for n := range t {
		ns = append(ns, n)
	}
	sort.Strings(ns)
	return ns
}

// converge waits until nothing is out of place in namespaces, and returns
// what the last complete look found at the deadline. A look reads with a
// deadline of its own (lookTime), not convergence's: cut short halfway, it
// would report the deadline instead of what is out of place, which is what
// a run on a loaded machine once did. A look that cannot read at all says
// so only when no look completed.
func (e *Env) converge(ctx context.Context, namespaces []string) []string {
	var found []string
	var failed error
	deadline := time.Now().Add(convergence)
	for {
		bad, err := e.look(ctx, namespaces)
		switch {
		case err == nil && len(bad) == 0:
			return nil
		case err == nil:
			found, failed = bad, nil
		case found == nil:
			failed = err
		}
		if time.Now().After(deadline) || ctx.Err() != nil {
			if failed != nil {
				return []string{fmt.Sprintf("no look at what is out of place completed in %v: %v", convergence, failed)}
			}
			return found
		}
		sleep(ctx, 2*time.Second)
	}
}

// lookTime bounds one look at every namespace's objects.
const lookTime = time.Minute

func (e *Env) look(ctx context.Context, namespaces []string) ([]string, error) {
	ctx, cancel := context.WithTimeout(ctx, lookTime)
	defer cancel()
	var bad []string
	for _, ns := range namespaces {
		b, err := orphans(ctx, e.Kube, e.Kiln, ns)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", ns, err)
		}
		bad = append(bad, b...)
	}
	return bad, nil
}

// finalReader is the client id of the reads after the load.
const finalReader = 1 << 20

// finalReads reads every object the load touched, as the admin, into the
// history.
func (e *Env) finalReads(ctx context.Context, l *load) {
	l.hist.mu.Lock()
	keys := map[string]bool{}
	for _, op := range l.hist.ops {
		keys[op.Input.(opInput).Key] = true
	}
	l.hist.mu.Unlock()
	for key := range keys {
		parts := strings.SplitN(key, "/", 3)
		res, ns, name := parts[0], parts[1], parts[2]
		in := opInput{Key: key, Kind: opGet}
		for attempt := 0; attempt < 5; attempt++ {
			call := l.hist.now()
			var obj metav1.Object
			var err error
			if res == "claims" {
				obj, err = e.Kiln.GpuV1alpha1().Claims(ns).Get(ctx, name, metav1.GetOptions{})
			} else {
				obj, err = e.Kiln.GpuV1alpha1().Instances(ns).Get(ctx, name, metav1.GetOptions{})
			}
			out := l.classify(err, res, name)
			if out.Outcome == ok {
				out.Obj = stateOf(obj)
			}
			if out.Outcome == ok || out.Outcome == notFound {
				l.hist.add(finalReader, in, call, out)
				break
			}
			sleep(ctx, time.Second)
		}
	}
}

// checkWatchers waits for each watcher to reach the last acknowledged
// write of its objects, compares its picture with the store at that
// revision, and counts what it missed or got twice.
func (e *Env) checkWatchers(ctx context.Context, watchers []*watcher, acked []ackedWrite, detail *[]string) (gaps, relists int) {
	for _, w := range watchers {
		var target uint64
		for _, a := range acked {
			if a.resource == w.resource && a.namespace == w.ns {
				target = max(target, a.rv)
			}
		}
		if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(context.Context) (bool, error) {
			return w.lastRV() >= target, nil
		}); err != nil {
			gaps++
			*detail = append(*detail, fmt.Sprintf("%s: at rv %d a minute after the load, short of %d", w.name, w.lastRV(), target))
			continue
		}
		var agreed bool
		var why string
		var err error
		for attempt := 0; attempt < 5; attempt++ {
			if agreed, why, err = w.agrees(ctx); err == nil {
				break
			}
			sleep(ctx, time.Second)
		}
		if err != nil {
			*detail = append(*detail, fmt.Sprintf("%s: cannot read the store at its revision: %v", w.name, err))
			gaps++
		} else if !agreed {
			*detail = append(*detail, why)
			gaps++
		}
		missing, dup, d := w.gaps(acked)
		gaps += missing + dup
		*detail = append(*detail, d...)
		w.mu.Lock()
		relists += w.relists
		w.mu.Unlock()
	}
	return gaps, relists
}

// Cleanup deletes every Instance and Claim in the tenants' namespaces and
// waits until they and their Pods are gone and each tenant's Budget has
// room for a card, so the next fault does not start on a full Budget.
//
// Objects gone are not enough: a create cut short after admission charged
// it (the load's own end, or the fault) leaves its charge in
// status.pending until the Budget loop takes the write to have failed
// (PendingTTL, 30 s). test/install's tenants have one card each: a row
// started inside that window had every create refused, and acknowledged
// nothing. What was waited for is logged.
//
// A delete of a namespace's Instances is one request that deletes them one
// by one on the server, and e.Kiln gives up after 15 s: on a slow day
// (2026-12-07, the machine at 2.5 times its usual compile times) the churn
// row's 500 took longer, and the cleanup failed on the client's timeout.
// So each look deletes again what is not yet being deleted, and a delete
// cut short is finished by the next; only a delete that never gets
// through fails the cleanup, with its error.
func (e *Env) Cleanup(ctx context.Context, namespaces []string) error {
	start := time.Now()
	held := map[string]string{}
	var deleteErr error
	err := wait.PollUntilContextTimeout(ctx, time.Second, convergence, true, func(ctx context.Context) (bool, error) {
		gone := true
		for _, ns := range namespaces {
			insts := e.Kiln.GpuV1alpha1().Instances(ns)
			if i, err := insts.List(ctx, metav1.ListOptions{}); err != nil || len(i.Items) > 0 {
				gone = false
				if err == nil && slices.ContainsFunc(i.Items, func(o gpuv1.Instance) bool { return o.DeletionTimestamp == nil }) {
					if err := insts.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
						deleteErr = err
					}
				}
			}
			claims := e.Kiln.GpuV1alpha1().Claims(ns)
			if c, err := claims.List(ctx, metav1.ListOptions{}); err != nil || len(c.Items) > 0 {
				gone = false
				if err == nil && slices.ContainsFunc(c.Items, func(o gpuv1.Claim) bool { return o.DeletionTimestamp == nil }) {
					if err := claims.DeleteCollection(ctx, metav1.DeleteOptions{}, metav1.ListOptions{}); err != nil {
						deleteErr = err
					}
				}
			}
			if p, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{}); err != nil || len(p.Items) > 0 {
				gone = false
			}
		}
		if !gone {
			return false, nil
		}
		for _, ns := range namespaces {
			name, ok := e.Budgets[ns]
			if !ok {
				continue
			}
			b, err := e.Kiln.GpuV1alpha1().Budgets(ns).Get(ctx, name, metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			if h := full(b); h != "" {
				if _, seen := held[ns]; !seen {
					held[ns] = fmt.Sprintf("Budget %s/%s %s, %s after the delete", ns, name, h, time.Since(start).Round(100*time.Millisecond))
				}
				return false, nil
			}
		}
		return true, nil
	})
	for _, ns := range slices.Sorted(maps.Keys(held)) {
		fmt.Fprintf(e.Log, "faults: cleanup waited %s for %s\n", time.Since(start).Round(100*time.Millisecond), held[ns])
	}
	if err != nil {
		return fmt.Errorf("the tenants' objects, Pods and Budget charges after %s: %w (%s; the last failed delete: %v)", convergence, err, strings.Join(slices.Collect(maps.Values(held)), "; "), deleteErr)
	}
	return nil
}

// full describes what a Budget counts when it has no room for one more
// card, "" when it has, or limits no cards at all.
func full(b *gpuv1.Budget) string {
	hard, limited := b.Spec.Hard[gpuv1.BudgetAccelerators]
	used := b.Status.Used[gpuv1.BudgetAccelerators]
	if !limited || used.Cmp(hard) < 0 {
		return ""
	}
	parts := []string{fmt.Sprintf("used %s of %s cards", used.String(), hard.String())}
	for _, p := range b.Status.Pending {
		parts = append(parts, fmt.Sprintf("pending %s %s (uid %s, charged at %s)", p.Kind, p.Name, p.UID, p.Time.UTC().Format(time.TimeOnly)))
	}
	return strings.Join(parts, ", ")
}
