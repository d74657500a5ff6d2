package handover

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"
	kubefake "k8s.io/client-go/kubernetes/fake"
	clienttesting "k8s.io/client-go/testing"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestHolderName(t *testing.T) {
	for _, tc := range []struct {
		name, claim, want string
	}{
		{"short names get the suffix", "train", "train-hold"},
		{"the longest name is cut to fit", strings.Repeat("a", 253), strings.Repeat("a", 248) + "-hold"},
		// A cut ending in a separator would make an invalid name.
		{"a cut ending in separators drops them", strings.Repeat("a", 246) + "a.-" + strings.Repeat("b", 4), strings.Repeat("a", 247) + "-hold"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got := HolderName(&v1alpha1.Claim{ObjectMeta: metav1.ObjectMeta{Name: tc.claim}})
			if got != tc.want {
				t.Errorf("HolderName = %q (%d), want %q (%d)", got, len(got), tc.want, len(tc.want))
			}
		})
	}
}

func TestPinnedNode(t *testing.T) {
	byLabel := &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
		NodeSelectorTerms: []corev1.NodeSelectorTerm{{MatchExpressions: []corev1.NodeSelectorRequirement{{
			Key: corev1.LabelHostname, Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-1"}}}}}}}}
	for _, tc := range []struct {
		name     string
		affinity *corev1.Affinity
		want     string
	}{
		{"PinTo", PinTo("gpu-1"), "gpu-1"},
		{"no affinity", nil, ""},
		{"a label selector is not a pin", byLabel, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := pod("")
			p.Spec.Affinity = tc.affinity
			if got := PinnedNode(p); got != tc.want {
				t.Errorf("PinnedNode = %q, want %q", got, tc.want)
			}
		})
	}
}

func TestReserves(t *testing.T) {
	nominated := func(node string) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.Status.NominatedNodeName = node }
	}
	deleting := func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.Now()) }
	for _, tc := range []struct {
		name string
		pod  *corev1.Pod
		want bool
	}{
		{"no Pod", nil, false},
		{"bound there", pod("gpu-1"), true},
		{"nominated there", pod("", nominated("gpu-1")), true},
		{"nominated elsewhere", pod("", nominated("gpu-2")), false},
		// The binding wins over a stale nomination.
		{"bound elsewhere, nominated there", pod("gpu-2", nominated("gpu-1")), false},
		{"bound there but being deleted", pod("gpu-1", deleting), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if got := Reserves(tc.pod, "gpu-1"); got != tc.want {
				t.Errorf("Reserves = %v, want %v", got, tc.want)
			}
		})
	}
}

func TestNominate(t *testing.T) {
	for _, tc := range []struct {
		name      string
		pod       *corev1.Pod
		patchErr  error
		wantPatch bool
		wantErr   bool
	}{
		{name: "an unnominated Pod is nominated", pod: pod(""), wantPatch: true},
		{name: "a Pod nominated there already is left alone", pod: pod("", func(p *corev1.Pod) { p.Status.NominatedNodeName = "gpu-1" })},
		{name: "a bound Pod is left alone", pod: pod("gpu-1")},
		{name: "the scheduler bound it first", pod: pod(""), wantPatch: true,
			patchErr: apierrors.NewInvalid(schema.GroupKind{Kind: "Pod"}, "p", field.ErrorList{field.Forbidden(field.NewPath("status", "nominatedNodeName"), "bound")})},
		{name: "other errors are returned", pod: pod(""), wantPatch: true, wantErr: true,
			patchErr: apierrors.NewServiceUnavailable("etcd")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			kube := kubefake.NewClientset(tc.pod)
			if tc.patchErr != nil {
				kube.PrependReactor("patch", "pods", func(clienttesting.Action) (bool, runtime.Object, error) { return true, nil, tc.patchErr })
			}
			err := Nominate(t.Context(), kube, tc.pod, "gpu-1", "test")
			if (err != nil) != tc.wantErr {
				t.Errorf("error %v, want one: %v", err, tc.wantErr)
			}
			patched := false
			for _, a := range kube.Actions() {
				if a.GetVerb() == "patch" && a.GetSubresource() == "status" {
					patched = true
				}
			}
			if patched != tc.wantPatch {
				t.Errorf("patched status: %v, want %v", patched, tc.wantPatch)
			}
			if tc.wantPatch && tc.patchErr == nil {
				got, err := kube.CoreV1().Pods("tenant-a").Get(t.Context(), "p", metav1.GetOptions{})
				if err != nil || got.Status.NominatedNodeName != "gpu-1" {
					t.Errorf("nominatedNodeName %q (%v), want gpu-1", got.Status.NominatedNodeName, err)
				}
			}
		})
	}
}

// pod is Pod p of tenant-a, bound to node ("" for unbound).
func pod(node string, opts ...func(*corev1.Pod)) *corev1.Pod {
	p := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: "tenant-a"}, Spec: corev1.PodSpec{NodeName: node}}
	for _, o := range opts {
		o(p)
	}
	return p
}

func TestOverdue(t *testing.T) {
	now := time.Date(2026, 3, 1, 9, 0, 0, 0, time.UTC)
	deleted := func(ago time.Duration) func(*corev1.Pod) {
		return func(p *corev1.Pod) { p.DeletionTimestamp = ptr.To(metav1.NewTime(now.Add(-ago))) }
	}
	for _, tc := range []struct {
		name        string
		pod         *corev1.Pod
		wantOverdue bool
		wantLeft    time.Duration
	}{
		{"no Pod", nil, false, 0},
		{"not deleted", pod("gpu-1"), false, 0},
		{"just deleted", pod("gpu-1", deleted(0)), false, StuckAfter},
		{"deleted a while ago", pod("gpu-1", deleted(StuckAfter-time.Second)), false, time.Second},
		{"due now", pod("gpu-1", deleted(StuckAfter)), true, 0},
		{"long overdue", pod("gpu-1", deleted(time.Hour)), true, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			overdue, left := Overdue(tc.pod, now)
			if overdue != tc.wantOverdue || left != tc.wantLeft {
				t.Errorf("Overdue = %v, %v; want %v, %v", overdue, left, tc.wantOverdue, tc.wantLeft)
			}
		})
	}
}
