package faults

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net"
	"net/http"
	"os"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// ValueAnnotation carries the value the load writes, so a read tells which
// write it sees.
const ValueAnnotation = "faults.kiln.dev/value"

// ackedWrite is a write the server acknowledged, with the resourceVersion
// it answered: the watch clients must each deliver that version once.
type ackedWrite struct {
	resource, namespace, name string
	rv                        uint64
}

// load is the writer load of one fault: every tenant runs workers that
// create, patch, stop, start, delete and read Instances and Claims of a
// few names, and every request is logged in the history.
type load struct {
	hist *history
	// prefix keeps one fault's names apart from the last one's.
	prefix string
	// Type is the InstanceType of the Instances and Claims.
	instanceType string
	image        string
	command      []string

	mu    sync.Mutex
	acked []ackedWrite
	// answers are Row.Answers.
	answers map[string]int

	requests, serverErrors atomic.Int64
}

// TenantClient is one tenant's Kiln clientset. Retries are off: client-go
// sends a request again after a 429 or 5xx with Retry-After, and a create
// that is sent twice and answered "already exists" would read, in the
// history, as a create that never happened.
func TenantClient(cfg *rest.Config) (versioned.Interface, error) {
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = -1, 0
	cfg.Timeout = 15 * time.Second
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return noRetryAfter{rt} }
	return versioned.NewForConfig(cfg)
}

type noRetryAfter struct{ http.RoundTripper }

func (t noRetryAfter) RoundTrip(req *http.Request) (*http.Response, error) {
	resp, err := t.RoundTripper.RoundTrip(req)
	if resp != nil {
		resp.Header.Del("Retry-After")
	}
	return resp, err
}

// run keeps workers per tenant busy until ctx ends. client ids in the
// history are worker numbers.
func (l *load) run(ctx context.Context, tenants map[string]versioned.Interface, workersPerTenant int) {
	var wg sync.WaitGroup
	id := 0
	for ns, kiln := range tenants {
		for range workersPerTenant {
			wg.Add(1)
			go func(id int) {
				defer wg.Done()
				rng := rand.New(rand.NewPCG(uint64(id), uint64(time.Now().UnixNano())))
				for seq := 0; ctx.Err() == nil; seq++ {
					l.one(ctx, kiln, ns, id, fmt.Sprintf("w%d-%d", id, seq), rng)
				}
			}(id)
			id++
		}
	}
	wg.Wait()
}

// Names per tenant: few enough that workers collide on them.
const (
	instancesPerTenant = 6
	claimsPerTenant    = 2
)

func (l *load) one(ctx context.Context, kiln versioned.Interface, ns string, client int, value string, rng *rand.Rand) {
	resource, name := "instances", fmt.Sprintf("%s-i-%d", l.prefix, rng.IntN(instancesPerTenant))
	kinds := []opKind{opGet, opGet, opCreate, opCreate, opUpdate, opUpdate, opStop, opStart, opDelete}
	if rng.IntN(instancesPerTenant+claimsPerTenant) >= instancesPerTenant {
		resource, name = "claims", fmt.Sprintf("%s-c-%d", l.prefix, rng.IntN(claimsPerTenant))
		kinds = []opKind{opGet, opGet, opCreate, opCreate, opUpdate, opDelete}
	}
	in := opInput{Key: resource + "/" + ns + "/" + name, Kind: kinds[rng.IntN(len(kinds))], Value: value}
	call := l.hist.now()
	rctx, cancel := context.WithTimeout(ctx, 15*time.Second)
	defer cancel()
	obj, err := l.do(rctx, kiln, resource, ns, name, in)
	out := l.classify(err, resource, name)
	// A request the load's own end cut short is no answer.
	if err != nil && ctx.Err() == nil {
		l.mu.Lock()
		l.answers[answer(err)]++
		l.mu.Unlock()
	}
	if out.Outcome == ok && obj != nil {
		out.Obj = stateOf(obj)
		if in.Kind != opGet {
			rv, _ := strconv.ParseUint(obj.GetResourceVersion(), 10, 64)
			l.mu.Lock()
			l.acked = append(l.acked, ackedWrite{resource: resource, namespace: ns, name: name, rv: rv})
			l.mu.Unlock()
		}
	}
	l.hist.add(client, in, call, out)
	if out.Outcome == unknown || notSent(err) {
		// A client backs off from a server that is not there.
		sleep(ctx, 100*time.Millisecond)
	}
}

// do sends one request; obj is what came back.
func (l *load) do(ctx context.Context, kiln versioned.Interface, resource, ns, name string, in opInput) (metav1.Object, error) {
	l.requests.Add(1)
	annotate := map[string]string{ValueAnnotation: in.Value}
	patch := fmt.Appendf(nil, `{"metadata":{"annotations":{%q:%q}}}`, ValueAnnotation, in.Value)
	if resource == "claims" {
		c := kiln.GpuV1alpha1().Claims(ns)
		switch in.Kind {
		case opCreate:
			return c.Create(ctx, &gpuv1.Claim{
				ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotate},
				Spec:       gpuv1.ClaimSpec{Type: l.instanceType, Accelerators: ptr.To[int32](1)},
			}, metav1.CreateOptions{})
		case opUpdate:
			return c.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
		case opDelete:
			return deleteReturning(ctx, kiln.GpuV1alpha1().RESTClient(), "claims", ns, name)
		}
		return c.Get(ctx, name, metav1.GetOptions{})
	}
	i := kiln.GpuV1alpha1().Instances(ns)
	switch in.Kind {
	case opCreate:
		return i.Create(ctx, &gpuv1.Instance{
			ObjectMeta: metav1.ObjectMeta{Name: name, Annotations: annotate},
			Spec: gpuv1.InstanceSpec{
				Type: l.instanceType, Image: l.image, Command: l.command,
				Resources: gpuv1.InstanceResources{Accelerators: ptr.To[int32](1)},
				Ports:     []gpuv1.InstancePort{{Name: "http", Port: 8080, Protocol: corev1.ProtocolTCP}},
			},
		}, metav1.CreateOptions{})
	case opUpdate:
		return i.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{})
	case opStop:
		return i.Stop(ctx, name, &gpuv1.Instance{}, metav1.CreateOptions{})
	case opStart:
		return i.Start(ctx, name, &gpuv1.Instance{}, metav1.CreateOptions{})
	case opDelete:
		return deleteReturning(ctx, kiln.GpuV1alpha1().RESTClient(), "instances", ns, name)
	}
	return i.Get(ctx, name, metav1.GetOptions{})
}

// deleteReturning deletes and returns what the server answered: the object
// with its deletionTimestamp while a finalizer holds it, or nil when the
// answer was a Status because it was removed at once.
func deleteReturning(ctx context.Context, c rest.Interface, resource, ns, name string) (metav1.Object, error) {
	body, err := c.Delete().Namespace(ns).Resource(resource).Name(name).Do(ctx).Raw()
	if err != nil {
		return nil, err
	}
	var u unstructured.Unstructured
	if err := u.UnmarshalJSON(body); err != nil {
		return nil, err
	}
	if u.GetKind() == "Status" {
		return nil, nil
	}
	return &u, nil
}

// stateOf is an object as the model sees it.
func stateOf(o metav1.Object) objState {
	s := objState{Present: true, Deleting: o.GetDeletionTimestamp() != nil, Value: o.GetAnnotations()[ValueAnnotation]}
	switch o := o.(type) {
	case *gpuv1.Instance:
		s.Stopped = o.Spec.Stopped
	case *unstructured.Unstructured:
		s.Stopped, _, _ = unstructured.NestedBool(o.Object, "spec", "stopped")
	}
	return s
}

// classify turns the answer into an outcome. A NotFound or AlreadyExists
// counts as one only when it names this object: an aggregator that does
// not know the group yet also answers 404, without asking Kiln.
func (l *load) classify(err error, resource, name string) opOutput {
	if err == nil {
		return opOutput{Outcome: ok}
	}
	var status apierrors.APIStatus
	if !errors.As(err, &status) {
		// While kube-apiserver is down every request is refused this way;
		// counted as unknown, each would stay pending to the end of the
		// history, more than the checker can order in its time.
		if notSent(err) {
			return opOutput{Outcome: refused}
		}
		return opOutput{Outcome: unknown}
	}
	st := status.Status()
	names := st.Details != nil && st.Details.Name == name && st.Details.Kind == resource
	switch {
	case st.Code >= 500:
		l.serverErrors.Add(1)
		return opOutput{Outcome: unknown}
	case st.Code == http.StatusRequestTimeout:
		return opOutput{Outcome: unknown}
	case apierrors.IsNotFound(err) && names:
		return opOutput{Outcome: notFound}
	case apierrors.IsAlreadyExists(err) && names:
		return opOutput{Outcome: exists}
	case st.Code >= 400:
		return opOutput{Outcome: refused}
	}
	return opOutput{Outcome: unknown}
}

// answer names what came back instead of success, for Row.Answers.
func answer(err error) string {
	var status apierrors.APIStatus
	switch {
	case errors.As(err, &status):
		st := status.Status()
		return fmt.Sprintf("%d %s", st.Code, st.Reason)
	case notSent(err):
		return "no connection"
	case errors.Is(err, context.DeadlineExceeded) || os.IsTimeout(err):
		return "timeout"
	}
	// The root cause, without the URL that names the object.
	msg := err.Error()
	return "transport: " + strings.TrimSpace(msg[strings.LastIndex(msg, ": ")+1:])
}

// notSent says the request never left: no connection was made, so it
// carried nothing to a server.
func notSent(err error) bool {
	var op *net.OpError
	return errors.As(err, &op) && op.Op == "dial"
}
