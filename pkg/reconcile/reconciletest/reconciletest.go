// Package reconciletest reads back, in the loops' unit tests, what a loop
// did through its fake clients and recorder.
package reconciletest

import (
	"fmt"
	"reflect"

	corev1 "k8s.io/api/core/v1"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/record"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/reconcile/queue"
)

// Events drains the events recorded so far.
func Events(r *record.FakeRecorder) []string {
	var out []string
	for {
		select {
		case e := <-r.Events:
			out = append(out, e)
		default:
			return out
		}
	}
}

// Writes lists the writes among actions, as "verb resource[/sub]".
func Writes(actions ...clienttesting.Action) []string {
	var out []string
	for _, a := range actions {
		switch a.GetVerb() {
		case "get", "list", "watch":
			continue
		}
		r := a.GetResource().Resource
		if s := a.GetSubresource(); s != "" {
			r += "/" + s
		}
		out = append(out, a.GetVerb()+" "+r)
	}
	return out
}

// kinds are the objects the loops read: their resource, and their
// informer in a pair of factories.
var kinds = map[reflect.Type]struct {
	resource schema.GroupVersionResource
	informer func(queue.Informers) cache.SharedIndexInformer
}{
	reflect.TypeFor[*v1alpha1.Instance](): {gpuResource("instances"), func(i queue.Informers) cache.SharedIndexInformer {
		return i.Kiln.Gpu().V1alpha1().Instances().Informer()
	}},
	reflect.TypeFor[*v1alpha1.InstanceType](): {gpuResource("instancetypes"), func(i queue.Informers) cache.SharedIndexInformer {
		return i.Kiln.Gpu().V1alpha1().InstanceTypes().Informer()
	}},
	reflect.TypeFor[*v1alpha1.Claim]():  {gpuResource("claims"), func(i queue.Informers) cache.SharedIndexInformer { return i.Kiln.Gpu().V1alpha1().Claims().Informer() }},
	reflect.TypeFor[*v1alpha1.Budget](): {gpuResource("budgets"), func(i queue.Informers) cache.SharedIndexInformer { return i.Kiln.Gpu().V1alpha1().Budgets().Informer() }},
	reflect.TypeFor[*v1alpha1.NodeDevices](): {gpuResource("nodedevices"), func(i queue.Informers) cache.SharedIndexInformer {
		return i.Kiln.Gpu().V1alpha1().NodeDevices().Informer()
	}},
	reflect.TypeFor[*corev1.Pod]():     {coreResource("pods"), func(i queue.Informers) cache.SharedIndexInformer { return i.Kube.Core().V1().Pods().Informer() }},
	reflect.TypeFor[*corev1.Service](): {coreResource("services"), func(i queue.Informers) cache.SharedIndexInformer { return i.Kube.Core().V1().Services().Informer() }},
	reflect.TypeFor[*corev1.Node]():    {coreResource("nodes"), func(i queue.Informers) cache.SharedIndexInformer { return i.Kube.Core().V1().Nodes().Informer() }},
}

func gpuResource(r string) schema.GroupVersionResource {
	return v1alpha1.SchemeGroupVersion.WithResource(r)
}
func coreResource(r string) schema.GroupVersionResource {
	return corev1.SchemeGroupVersion.WithResource(r)
}

// Indexer is the cache of inf's informer for o's kind, where a test puts
// the objects a loop is to see.
func Indexer(inf queue.Informers, o runtime.Object) (cache.Indexer, error) {
	k, ok := kinds[reflect.TypeOf(o)]
	if !ok {
		return nil, fmt.Errorf("no informer for %T", o)
	}
	return k.informer(inf).GetIndexer(), nil
}

// Resource is o's resource, for the fake clients' trackers.
func Resource(o runtime.Object) (schema.GroupVersionResource, error) {
	k, ok := kinds[reflect.TypeOf(o)]
	if !ok {
		return schema.GroupVersionResource{}, fmt.Errorf("no resource for %T", o)
	}
	return k.resource, nil
}
