package faults

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// want is what the last acknowledged write left an Instance as.
type want int

const (
	wantNone want = iota // nothing acknowledged yet
	wantRunning
	wantStopped
	wantGone
	// wantUnsure: a write to it got no answer, so either is right.
	wantUnsure
)

// churn is the controller fault's load: the admin creates, stops, starts
// and deletes Instances in one namespace, many at a time, while the
// controller is killed between steps of it.
type churn struct {
	kiln    versioned.Interface
	ns, typ string
	workers int

	mu     sync.Mutex
	wants  map[string]want
	acked  []ackedWrite
	nacked int

	serverErrors atomic.Int64
}

type task struct {
	op   opKind
	name string
}

// step runs tasks, workers at a time, and calls mid once about halfway
// through.
func (c *churn) step(ctx context.Context, tasks []task, mid func()) {
	next := make(chan task)
	var wg sync.WaitGroup
	for range c.workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for t := range next {
				c.one(ctx, t.op, t.name)
			}
		}()
	}
	for i, t := range tasks {
		if i == len(tasks)/2 && mid != nil {
			mid()
		}
		next <- t
	}
	close(next)
	wg.Wait()
}

func (c *churn) one(ctx context.Context, op opKind, name string) {
	i := c.kiln.GpuV1alpha1().Instances(c.ns)
	var obj metav1.Object
	var err error
	switch op {
	case opCreate:
		obj, err = i.Create(ctx, &gpuv1.Instance{
			ObjectMeta: metav1.ObjectMeta{Name: name},
			Spec: gpuv1.InstanceSpec{
				Type: c.typ, Image: "busybox:1",
				Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](0)},
				Ports:     []gpuv1.InstancePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
	case opStop:
		obj, err = i.Stop(ctx, name, &gpuv1.Instance{}, metav1.CreateOptions{})
	case opStart:
		obj, err = i.Start(ctx, name, &gpuv1.Instance{}, metav1.CreateOptions{})
	case opDelete:
		obj, err = deleteReturning(ctx, c.kiln.GpuV1alpha1().RESTClient(), "instances", c.ns, name)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if err != nil {
		var status apierrors.APIStatus
		isStatus := errors.As(err, &status)
		if isStatus && status.Status().Code >= 500 {
			c.serverErrors.Add(1)
		}
		if !isStatus || status.Status().Code >= 500 {
			c.wants[name] = wantUnsure
		}
		return
	}
	c.nacked++
	if obj != nil {
		rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
		c.acked = append(c.acked, ackedWrite{resource: "instances", namespace: c.ns, name: name, rv: rv})
	}
	if c.wants[name] == wantUnsure {
		return
	}
	c.wants[name] = map[opKind]want{opCreate: wantRunning, opStart: wantRunning, opStop: wantStopped, opDelete: wantGone}[op]
}

// found counts the acknowledged writes whose effect the store shows: an
// Instance is as its last acknowledged write left it. The ones a write
// without answer touched afterwards are taken as found, since either
// state is right for them.
func (c *churn) found(ctx context.Context) (int, []string, error) {
	list, err := c.kiln.GpuV1alpha1().Instances(c.ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		return 0, nil, err
	}
	stored := map[string]*gpuv1.Instance{}
	for i := range list.Items {
		stored[list.Items[i].Name] = &list.Items[i]
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	writes := map[string]int{}
	for _, a := range c.acked {
		writes[a.name]++
	}
	lost := 0
	var detail []string
	for name, w := range c.wants {
		inst := stored[name]
		var right bool
		switch w {
		case wantRunning:
			right = inst != nil && !inst.Spec.Stopped
		case wantStopped:
			right = inst != nil && inst.Spec.Stopped
		case wantGone:
			right = inst == nil
		default:
			right = true
		}
		if !right {
			lost += writes[name]
			detail = append(detail, fmt.Sprintf("Instance %s/%s: last acknowledged write left it %v, the store has %v", c.ns, name, w, inst != nil))
		}
	}
	return c.nacked - lost, detail, nil
}

// tasks interleaves op over names c-from .. c-(to-1) into ts.
func tasks(ts []task, op opKind, from, to int) []task {
	var out []task
	j := 0
	for i := from; i < to; i++ {
		for j < len(ts) && j <= 2*(i-from) {
			out = append(out, ts[j])
			j++
		}
		out = append(out, task{op, fmt.Sprintf("c-%03d", i)})
	}
	return append(out, ts[j:]...)
}

// RunChurnFault creates size Instances in ns, then stops, deletes and
// starts parts of them and creates more, calling kill once in the middle
// of each of the three steps; it then checks what the controller left.
func (e *Env) RunChurnFault(ctx context.Context, name, ns, typ string, size int, kill Injector) Row {
	row := Row{Fault: name, Load: fmt.Sprintf("churn of %d Instances", size)}
	c := &churn{kiln: e.Kiln, ns: ns, typ: typ, workers: 16, wants: map[string]want{}}
	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	var watchers []*watcher
	var wg sync.WaitGroup
	for _, path := range []string{"aggregated", "direct"} {
		client := e.Aggregated
		if path == "direct" {
			client = e.Direct
		}
		w := newWatcher(path+" instances "+ns, client, "instances", ns)
		watchers = append(watchers, w)
		wg.Add(1)
		go func() { defer wg.Done(); w.run(runCtx) }()
	}
	round := 0
	mid := func() {
		fmt.Fprintf(e.Log, "faults: %s, round %d\n", name, round+1)
		if err := kill(ctx, round); err != nil {
			row.Err = fmt.Sprintf("round %d: %v", round+1, err)
			return
		}
		round++
		row.Injected++
	}
	// Three steps, the controller killed in the middle of each: create
	// them all; stop a quarter while deleting another; start half the
	// stopped ones while creating a tenth more and deleting a tenth.
	q, tenth := size/4, size/10
	c.step(ctx, tasks(nil, opCreate, 0, size), mid)
	c.step(ctx, tasks(tasks(nil, opStop, 0, q), opDelete, q, 2*q), mid)
	c.step(ctx, tasks(tasks(tasks(nil, opStart, 0, q/2), opCreate, size, size+tenth), opDelete, 2*q, 2*q+tenth), mid)

	if bad := e.converge(ctx, []string{ns}); len(bad) > 0 {
		row.Orphans = len(bad)
		row.Detail = append(row.Detail, truncate(bad, 20)...)
	}
	found, detail, err := c.found(ctx)
	if err != nil && row.Err == "" {
		row.Err = err.Error()
	}
	row.Acked, row.Found = c.nacked, found
	row.Detail = append(row.Detail, truncate(detail, 20)...)
	row.WatchGaps, row.Relists = e.checkWatchers(ctx, watchers, c.acked, &row.Detail)
	stop()
	wg.Wait()
	row.ServerErrors = int(c.serverErrors.Load())
	return row
}

func truncate(s []string, n int) []string {
	if len(s) <= n {
		return s
	}
	return append(s[:n:n], fmt.Sprintf("... and %d more", len(s)-n))
}
