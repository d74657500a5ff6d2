package faults

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

const (
	resourceGPU   = corev1.ResourceName("nvidia.com/gpu")
	labelInstance = "gpu.kiln.dev/instance"
	labelClaim    = "gpu.kiln.dev/claim"
)

// runningCards is what runs in ns by the Pods themselves: the cards of
// every Pod bound to a node that has not finished, Terminating ones too,
// since a kubelet may still be running them.
func runningCards(pods []corev1.Pod) int64 {
	var n int64
	for _, p := range pods {
		if p.Spec.NodeName == "" || p.Status.Phase == corev1.PodSucceeded || p.Status.Phase == corev1.PodFailed {
			continue
		}
		for _, c := range p.Spec.Containers {
			q := c.Resources.Limits[resourceGPU]
			n += q.Value()
		}
	}
	return n
}

// budgetSampler checks, once a second while a fault runs, the promise from
// the Pods' side: what runs in a tenant's namespace stays within its
// Budget's hard limit, and the Budget's used (which every Kiln replica's
// reconciler writes) is never below what runs. used is read before and
// after the Pods, so a start or stop between the reads is not taken for a
// fault.
type budgetSampler struct {
	kube    kubernetes.Interface
	kiln    versioned.Interface
	budgets map[string]string // namespace -> Budget name
	hard    int64

	mu                  sync.Mutex
	samples             int
	overHard, belowRuns int
	maxRunning          int64
	detail              []string
}

func (b *budgetSampler) run(ctx context.Context) {
	for ctx.Err() == nil {
		for ns, name := range b.budgets {
			b.sample(ctx, ns, name)
		}
		sleep(ctx, time.Second)
	}
}

func (b *budgetSampler) used(ctx context.Context, ns, name string) (int64, bool) {
	bud, err := b.kiln.GpuV1alpha1().Budgets(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return 0, false
	}
	q, ok := bud.Status.Used[gpuv1.BudgetAccelerators]
	if !ok {
		return 0, true
	}
	return q.Value(), true
}

func (b *budgetSampler) sample(ctx context.Context, ns, name string) {
	before, ok1 := b.used(ctx, ns, name)
	pods, err := b.kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return
	}
	after, ok2 := b.used(ctx, ns, name)
	running := runningCards(pods.Items)
	at := time.Now().Format("15:04:05.000")
	over, below := running > b.hard, ok1 && ok2 && running > max(before, after)
	var books string
	if over || below {
		books = b.bookkeeping(ctx, ns, name)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.samples++
	b.maxRunning = max(b.maxRunning, running)
	if over {
		b.overHard++
		b.detail = append(b.detail, fmt.Sprintf("%s %s: %d cards run, Budget hard is %d; %s; %s", at, ns, running, b.hard, cardPods(pods.Items), books))
	}
	if below {
		b.belowRuns++
		b.detail = append(b.detail, fmt.Sprintf("%s %s: %d cards run, Budget used was %d then %d; %s; %s", at, ns, running, before, after, cardPods(pods.Items), books))
	}
}

// bookkeeping is Kiln's side of an over-commit, read just after it: each
// Instance and Claim with its UID's tail, what its status says and
// whether it is deleting, and the Budget's used and pending charges.
func (b *budgetSampler) bookkeeping(ctx context.Context, ns, name string) string {
	var out []string
	if insts, err := b.kiln.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, i := range insts.Items {
			out = append(out, fmt.Sprintf("instance %s(%s stopped=%v %s gen %d/%d%s)", i.Name, tail(string(i.UID)), i.Spec.Stopped,
				i.Status.Phase, i.Status.ObservedGeneration, i.Generation, deleting(i.DeletionTimestamp)))
		}
	}
	if claims, err := b.kiln.GpuV1alpha1().Claims(ns).List(ctx, metav1.ListOptions{}); err == nil {
		for _, c := range claims.Items {
			out = append(out, fmt.Sprintf("claim %s(%s %s node=%q%s)", c.Name, tail(string(c.UID)), c.Status.Phase, c.Status.NodeName, deleting(c.DeletionTimestamp)))
		}
	}
	if bud, err := b.kiln.GpuV1alpha1().Budgets(ns).Get(ctx, name, metav1.GetOptions{}); err == nil {
		used := bud.Status.Used[gpuv1.BudgetAccelerators]
		out = append(out, fmt.Sprintf("budget used %s rv %s", used.String(), bud.ResourceVersion))
		for _, p := range bud.Status.Pending {
			out = append(out, fmt.Sprintf("pending %s %s(%s) rv %q at %s", p.Kind, p.Name, tail(string(p.UID)), p.ResourceVersion, p.Time.Format("15:04:05")))
		}
	}
	return strings.Join(out, " ")
}

func tail(uid string) string { return uid[max(0, len(uid)-5):] }

func deleting(t *metav1.Time) string {
	if t == nil {
		return ""
	}
	return ", deleting"
}

// cardPods names the Pods runningCards counts, so an over-commit in the
// report says which Pods ran.
func cardPods(pods []corev1.Pod) string {
	var names []string
	for _, p := range pods {
		n := runningCards([]corev1.Pod{p})
		if n == 0 {
			continue
		}
		owner := ""
		if ref := metav1.GetControllerOf(&p); ref != nil {
			owner = tail(string(ref.UID))
		}
		s := fmt.Sprintf("%s(%s of %s, %d on %s, %s", p.Name, tail(string(p.UID)), owner, n, p.Spec.NodeName, p.Status.Phase)
		if p.DeletionTimestamp != nil {
			s += ", deleting"
		}
		names = append(names, s+")")
	}
	sort.Strings(names)
	return strings.Join(names, " ")
}

func (b *budgetSampler) overCommits() (int, []string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.overHard + b.belowRuns, b.detail
}

// orphans lists what the controller left that it should not have, once
// it has caught up: a Pod or Service of an Instance that is gone or
// deleting, a Pod of one that is stopped; more than one Pod or Service
// for an Instance; no Pod for one that runs; a claim's Pod without its
// Claim. Pods are
// matched to their Instance by owner UID, so a Pod of an earlier Instance
// of the same name counts as an orphan.
func orphans(ctx context.Context, kube kubernetes.Interface, kiln versioned.Interface, ns string) ([]string, error) {
	insts, err := kiln.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	claims, err := kiln.GpuV1alpha1().Claims(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	pods, err := kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	svcs, err := kube.CoreV1().Services(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return nil, err
	}
	byUID := map[string]*gpuv1.Instance{}
	for i := range insts.Items {
		byUID[string(insts.Items[i].UID)] = &insts.Items[i]
	}
	claimNames := map[string]bool{}
	for _, c := range claims.Items {
		if c.DeletionTimestamp == nil {
			claimNames[c.Name] = true
		}
	}
	var bad []string
	owned := func(kind string, o metav1.Object) {
		owner := ""
		for _, ref := range o.GetOwnerReferences() {
			if ref.Kind == "Instance" {
				owner = string(ref.UID)
			}
		}
		inst := byUID[owner]
		switch {
		case inst == nil:
			bad = append(bad, fmt.Sprintf("%s %s/%s: its Instance is gone", kind, ns, o.GetName()))
		case inst.DeletionTimestamp != nil:
			bad = append(bad, fmt.Sprintf("%s %s/%s: its Instance is being deleted", kind, ns, o.GetName()))
		case inst.Spec.Stopped && kind == "Pod":
			bad = append(bad, fmt.Sprintf("%s %s/%s: its Instance is stopped", kind, ns, o.GetName()))
		}
	}
	podsOf, svcsOf := map[string]int{}, map[string]int{}
	for i := range pods.Items {
		p := &pods.Items[i]
		if p.DeletionTimestamp != nil {
			bad = append(bad, fmt.Sprintf("Pod %s/%s: still Terminating", ns, p.Name))
			continue
		}
		if _, isInstance := p.Labels[labelInstance]; isInstance {
			owned("Pod", p)
			podsOf[p.Labels[labelInstance]]++
			continue
		}
		if c, isClaim := p.Labels[labelClaim]; isClaim && !claimNames[c] {
			bad = append(bad, fmt.Sprintf("Pod %s/%s: holds cards of Claim %q, which is gone", ns, p.Name, c))
		}
	}
	for i := range svcs.Items {
		s := &svcs.Items[i]
		if _, isInstance := s.Labels[labelInstance]; isInstance {
			owned("Service", s)
			svcsOf[s.Labels[labelInstance]]++
		}
	}
	for _, inst := range insts.Items {
		if inst.DeletionTimestamp != nil {
			bad = append(bad, fmt.Sprintf("Instance %s/%s: still deleting", ns, inst.Name))
			continue
		}
		want := 1
		if inst.Spec.Stopped {
			want = 0
		}
		if podsOf[inst.Name] != want {
			bad = append(bad, fmt.Sprintf("Instance %s/%s (stopped=%v): %d Pods", ns, inst.Name, inst.Spec.Stopped, podsOf[inst.Name]))
		}
		// A stopped Instance keeps its Service, by design: its node
		// ports do not move across a stop and start.
		if svcsOf[inst.Name] > 1 {
			bad = append(bad, fmt.Sprintf("Instance %s/%s (stopped=%v): %d Services", ns, inst.Name, inst.Spec.Stopped, svcsOf[inst.Name]))
		}
	}
	sort.Strings(bad)
	return bad, nil
}

// cardsQuantity is n cards as a quantity, for Budgets.
func cardsQuantity(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
