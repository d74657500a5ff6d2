package pool

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	coreinformers "k8s.io/client-go/informers/core/v1"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// PodsByNode indexes Pods by the node they are bound to, so that a loop
// reads a pool's Pods rather than the cluster's. The InstanceType and
// Claim loops share it on one informer.
const PodsByNode = "spec.nodeName"

// IndexPodsByNode adds the PodsByNode index to a Pod informer, unless a
// loop sharing the informer has already. Call it before the informer
// starts.
func IndexPodsByNode(pods cache.TypedSharedIndexInformer[*corev1.Pod]) error {
	if _, ok := pods.GetIndexer().GetIndexers()[PodsByNode]; ok {
		return nil
	}
	err := pods.AddTypedIndexers(coreinformers.PodIndexers{PodsByNode: func(p *corev1.Pod) ([]string, error) {
		if p.Spec.NodeName == "" {
			return nil, nil
		}
		return []string{p.Spec.NodeName}, nil
	}})
	if err != nil {
		return fmt.Errorf("indexing pods by node: %w", err)
	}
	return nil
}

// Nodes lists the nodes of the type's pool, whatever their state.
func Nodes(nodes corelisters.NodeLister, t *v1alpha1.InstanceType) ([]*corev1.Node, error) {
	candidates, err := nodes.List(labels.SelectorFromSet(t.Spec.NodeSelector))
	if err != nil {
		return nil, err
	}
	var out []*corev1.Node
	for _, n := range candidates {
		if InPool(t, n) {
			out = append(out, n)
		}
	}
	return out, nil
}
