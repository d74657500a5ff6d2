// Package instancetypepool is the InstanceTypePool admission plugin: an
// InstanceType whose pool no Ready node can serve is stored, since nodes
// may join later, but the write answers with a Warning header that says so,
// so the admin who wrote it learns now rather than from Pending Instances.
package instancetypepool

import (
	"context"
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/kubernetes"
	"k8s.io/klog/v2"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "InstanceTypePool"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin warns about InstanceTypes no Ready node serves.
type Plugin struct {
	*admission.Handler
	// nodes is nil in standalone mode, where there are no nodes to ask.
	nodes kubernetes.Interface
}

var (
	_ admission.ValidationInterface          = &Plugin{}
	_ genericinit.WantsExternalKubeClientSet = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetExternalKubeClientSet takes the client Nodes are listed with. Types
// are written rarely, so a list per write costs less than a Node informer
// holding every Node in this process.
func (p *Plugin) SetExternalKubeClientSet(c kubernetes.Interface) { p.nodes = c }

// ValidateInitialization accepts a missing client: standalone has no nodes.
func (p *Plugin) ValidateInitialization() error { return nil }

// Validate never refuses; it adds a warning when the type's pool is empty.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if p.nodes == nil || a.GetSubresource() != "" || a.GetResource().GroupResource() != gpu.Resource("instancetypes") {
		return nil
	}
	t, ok := a.GetObject().(*gpu.InstanceType)
	if !ok {
		return nil
	}
	if old, ok := a.GetOldObject().(*gpu.InstanceType); ok &&
		maps.Equal(old.Spec.NodeSelector, t.Spec.NodeSelector) && apiequality.Semantic.DeepEqual(old.Spec.Tolerations, t.Spec.Tolerations) {
		return nil // the pool did not change
	}
	if msg := p.emptyPool(ctx, t); msg != "" {
		warning.AddWarning(ctx, "", msg)
	}
	return nil
}

// emptyPool returns the warning for a type no Ready node can serve, or "".
// A failed list is logged, not turned into a refusal or a false warning.
func (p *Plugin) emptyPool(ctx context.Context, t *gpu.InstanceType) string {
	sel := labels.SelectorFromSet(t.Spec.NodeSelector)
	// ResourceVersion "0" is served from kube-apiserver's watch cache.
	nodes, err := p.nodes.CoreV1().Nodes().List(ctx, metav1.ListOptions{LabelSelector: sel.String(), ResourceVersion: "0"})
	if err != nil {
		klog.FromContext(ctx).Info("InstanceTypePool: cannot list nodes; no pool warning", "instancetype", t.Name, "err", err)
		return ""
	}
	matching, untolerated := 0, 0
	for i := range nodes.Items {
		n := &nodes.Items[i]
		if !ready(n) || n.Spec.Unschedulable {
			continue
		}
		matching++
		if taint := untoleratedTaint(ctx, n.Spec.Taints, t.Spec.Tolerations); taint != nil {
			untolerated++
			continue
		}
		return ""
	}
	what := "no Ready node"
	if !sel.Empty() {
		what += " matches nodeSelector " + selectorString(t.Spec.NodeSelector)
	}
	if matching > 0 {
		return fmt.Sprintf("instancetype %q: %s whose taints its tolerations allow (%d match but are tainted); Instances of this type will stay Pending until one is: add the tolerations or untaint a node", t.Name, what, untolerated)
	}
	return fmt.Sprintf("instancetype %q: %s; Instances of this type will stay Pending until one does: check the nodeSelector against `kubectl get nodes --show-labels`", t.Name, what)
}

// ready reports whether a node's Ready condition is True.
func ready(n *corev1.Node) bool {
	for _, c := range n.Status.Conditions {
		if c.Type == corev1.NodeReady {
			return c.Status == corev1.ConditionTrue
		}
	}
	return false
}

// untoleratedTaint is the first taint that keeps new Pods of the type off
// the node, as the scheduler's TaintToleration filter sees it.
func untoleratedTaint(ctx context.Context, taints []corev1.Taint, tolerations []corev1.Toleration) *corev1.Taint {
	logger := klog.FromContext(ctx)
	for i := range taints {
		taint := &taints[i]
		if taint.Effect != corev1.TaintEffectNoSchedule && taint.Effect != corev1.TaintEffectNoExecute {
			continue
		}
		tolerated := false
		for j := range tolerations {
			if tolerations[j].ToleratesTaint(logger, taint, true) {
				tolerated = true
				break
			}
		}
		if !tolerated {
			return taint
		}
	}
	return nil
}

func selectorString(m map[string]string) string {
	parts := make([]string, 0, len(m))
	for _, k := range slices.Sorted(maps.Keys(m)) {
		parts = append(parts, k+"="+m[k])
	}
	return strings.Join(parts, ",")
}
