package instancetypepool

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/apiserver/pkg/warning"
	"k8s.io/client-go/kubernetes/fake"

	"kiln.dev/kiln/pkg/apis/gpu"
)

type recorder []string

func (r *recorder) AddWarning(_, text string) { *r = append(*r, text) }

func node(name string, ready bool, lbls map[string]string, taints ...corev1.Taint) *corev1.Node {
	status := corev1.ConditionFalse
	if ready {
		status = corev1.ConditionTrue
	}
	return &corev1.Node{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: lbls},
		Spec:       corev1.NodeSpec{Taints: taints},
		Status:     corev1.NodeStatus{Conditions: []corev1.NodeCondition{{Type: corev1.NodeReady, Status: status}}},
	}
}

func TestPoolWarning(t *testing.T) {
	h100 := map[string]string{"nvidia.com/gpu.product": "H100"}
	gpuTaint := corev1.Taint{Key: "nvidia.com/gpu", Value: "present", Effect: corev1.TaintEffectNoSchedule}
	tolerate := []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}}
	for _, tc := range []struct {
		name        string
		nodes       []runtime.Object
		selector    map[string]string
		tolerations []corev1.Toleration
		old         *gpu.InstanceType
		want        string // a substring of the one warning; "" for none
	}{
		{name: "a Ready node matches", nodes: []runtime.Object{node("n1", true, h100)}, selector: h100},
		{name: "no node at all", selector: h100, want: `instancetype "t": no Ready node matches nodeSelector nvidia.com/gpu.product=H100; Instances of this type will stay Pending`},
		{name: "matching node not Ready", nodes: []runtime.Object{node("n1", false, h100)}, selector: h100, want: "no Ready node matches"},
		{name: "Ready node of another product", nodes: []runtime.Object{node("n1", true, map[string]string{"nvidia.com/gpu.product": "L4"})}, selector: h100, want: "no Ready node matches"},
		{name: "tainted and not tolerated", nodes: []runtime.Object{node("n1", true, h100, gpuTaint)}, selector: h100, want: "(1 match but are tainted)"},
		{name: "tainted and tolerated", nodes: []runtime.Object{node("n1", true, h100, gpuTaint)}, selector: h100, tolerations: tolerate},
		{name: "no selector, no nodes", want: `instancetype "t": no Ready node; Instances`},
		{name: "no selector, any Ready node", nodes: []runtime.Object{node("n1", true, nil)}},
		{name: "update that keeps the pool is not re-checked", selector: h100,
			old: &gpu.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: gpu.InstanceTypeSpec{NodeSelector: h100}}},
		{name: "update that moves the pool is", selector: h100, want: "no Ready node matches",
			old: &gpu.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: gpu.InstanceTypeSpec{NodeSelector: map[string]string{"x": "y"}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := New()
			p.SetExternalKubeClientSet(fake.NewClientset(tc.nodes...))
			it := &gpu.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}, Spec: gpu.InstanceTypeSpec{NodeSelector: tc.selector, Tolerations: tc.tolerations}}
			op := admission.Create
			var old runtime.Object
			if tc.old != nil {
				op, old = admission.Update, tc.old
			}
			a := admission.NewAttributesRecord(it, old, gpu.Kind("InstanceType").WithVersion("v1alpha1"), "", "t",
				gpu.Resource("instancetypes").WithVersion("v1alpha1"), "", op, nil, false, nil)
			var got recorder
			ctx := warning.WithWarningRecorder(context.Background(), &got)
			if err := p.Validate(ctx, a, nil); err != nil {
				t.Fatalf("Validate refused: %v", err)
			}
			switch {
			case tc.want == "" && len(got) > 0:
				t.Errorf("warned %q, want no warning", got)
			case tc.want != "" && (len(got) != 1 || !strings.Contains(got[0], tc.want)):
				t.Errorf("warnings %q, want one containing %q", got, tc.want)
			}
		})
	}
}

// TestStandalone: without a cluster there are no nodes to ask and no warning.
func TestStandalone(t *testing.T) {
	p := New()
	if err := p.ValidateInitialization(); err != nil {
		t.Fatal(err)
	}
	it := &gpu.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "t"}}
	a := admission.NewAttributesRecord(it, nil, gpu.Kind("InstanceType").WithVersion("v1alpha1"), "", "t",
		gpu.Resource("instancetypes").WithVersion("v1alpha1"), "", admission.Create, nil, false, nil)
	var got recorder
	if err := p.Validate(warning.WithWarningRecorder(context.Background(), &got), a, nil); err != nil || len(got) > 0 {
		t.Errorf("standalone: err %v, warnings %q", err, got)
	}
}
