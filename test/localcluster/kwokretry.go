package localcluster

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/informers"
)

// kwok plays the kubelet of the simulated nodes with one gap a kubelet
// does not have. Its pod-delete stage sends the Pod's final DELETE once,
// and drops it when kube-apiserver answers with anything but a refused
// connection, 429, 503 or 504: a 500, say, which is what the request in
// flight gets when etcd dies under it ("rpc error: code = Unavailable").
// Nothing changes the Pod after that, so kwok never looks at it again, and
// it stays Terminating, holding its node's resources, for good. A
// kubelet's status manager tries again until the Pod is gone.
//
// retryKwokDeletes stands in for that retry: a Pod on a simulated node that
// is still there overdue past its deletion deadline, and whose final
// delete never landed, is touched with an annotation, which gives it back
// to kwok as a new event. The final delete never landed if the grace
// period is not yet 0, or if it is 0 and no finalizer holds the Pod:
// kube-apiserver writes the grace period of 0 and deletes in two steps of
// etcd, and the second can fail alone (seen when one of three etcd
// members was killed: "etcdserver: request timed out"). A Pod with grace
// 0 and a finalizer waits on someone else, not on kwok.
const (
	kwokRetryEvery   = 5 * time.Second
	kwokRetryOverdue = 10 * time.Second
	// KwokRetryAnnotation counts the times a Pod was given back to kwok.
	KwokRetryAnnotation = "localcluster.kiln.dev/kwok-delete-retries"
)

func (c *Cluster) retryKwokDeletes(ctx context.Context) {
	// Its account goes beside the components' logs too: a test that
	// passes does not show the launcher's output.
	log := c.log
	if f, err := os.OpenFile(filepath.Join(c.logDir(), "kwok-retry.log"), os.O_CREATE|os.O_APPEND|os.O_WRONLY, 0o644); err == nil {
		defer f.Close()
		log = io.MultiWriter(c.log, f)
	}
	// Informers, not a list each round: benchmarks run thousands of Pods.
	factory := informers.NewSharedInformerFactory(c.kube, 0)
	pods, nodes := factory.Core().V1().Pods().Lister(), factory.Core().V1().Nodes().Lister()
	factory.Start(ctx.Done())
	defer factory.Shutdown()
	factory.WaitForCacheSync(ctx.Done())
	wait.UntilWithContext(ctx, func(ctx context.Context) {
		all, err := pods.List(labels.Everything())
		if err != nil {
			return
		}
		for _, p := range all {
			if !kwokDeleteOverdue(p, time.Now()) {
				continue
			}
			if n, err := nodes.Get(p.Spec.NodeName); err != nil || n.Annotations[kwokNodeAnnotation] != simulatedNodeMarker {
				continue
			}
			n := 0
			fmt.Sscanf(p.Annotations[KwokRetryAnnotation], "%d", &n)
			patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:"%d"}}}`, KwokRetryAnnotation, n+1)
			if _, err := c.kube.CoreV1().Pods(p.Namespace).Patch(ctx, p.Name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err == nil {
				fmt.Fprintf(log, "%s kwok: Pod %s/%s on %s was to be gone by %s; given back to kwok to delete again\n",
					time.Now().UTC().Format(time.RFC3339), p.Namespace, p.Name, p.Spec.NodeName, p.DeletionTimestamp.UTC().Format(time.RFC3339))
			}
		}
	}, kwokRetryEvery)
}

// kwokDeleteOverdue says whether kwok's final delete of p never landed
// although it is overdue: deleted with a grace period that has run out by
// kwokRetryOverdue, not waiting on a finalizer after a delete with grace 0,
// and not left to a status a test writes (kwok does not manage those
// Pods).
func kwokDeleteOverdue(p *corev1.Pod, now time.Time) bool {
	if p.DeletionTimestamp == nil || p.DeletionGracePeriodSeconds == nil {
		return false
	}
	if *p.DeletionGracePeriodSeconds == 0 && len(p.Finalizers) > 0 {
		return false
	}
	if p.Annotations[CustomStatusAnnotation] == "custom" {
		return false
	}
	return now.Sub(p.DeletionTimestamp.Time) >= kwokRetryOverdue
}
