package v1alpha1_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/diff"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestInstanceDefaults: what an Instance gets when the request is decoded,
// before admission sizes it.
func TestInstanceDefaults(t *testing.T) {
	size := resource.MustParse("100Gi")
	cases := []struct {
		name string
		in   v1alpha1.InstanceSpec
		want v1alpha1.InstanceSpec
	}{
		{name: "port protocol defaults to TCP",
			in: v1alpha1.InstanceSpec{Ports: []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}}},
			want: v1alpha1.InstanceSpec{Ports: []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP}, {Name: "dns", Port: 53, Protocol: corev1.ProtocolUDP}},
				Workspace: &v1alpha1.Workspace{MountPath: "/workspace"}}},
		{name: "workspace defaults to an emptyDir at /workspace",
			want: v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{MountPath: "/workspace"}}},
		{name: "a workspace claim gets the default mount path",
			in:   v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{ClaimName: "data"}},
			want: v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{MountPath: "/workspace", ClaimName: "data"}}},
		{name: "a workspace size is kept",
			in:   v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{EmptyDirSize: &size}},
			want: v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{MountPath: "/workspace", EmptyDirSize: &size}}},
		{name: "a workspace mount path is kept",
			in:   v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{MountPath: "/data"}},
			want: v1alpha1.InstanceSpec{Workspace: &v1alpha1.Workspace{MountPath: "/data"}}},
		{name: "a slice gets as many cores as memory",
			in: v1alpha1.InstanceSpec{Resources: v1alpha1.InstanceResources{Slice: &v1alpha1.SliceRequest{MemoryPercent: 25}}},
			want: v1alpha1.InstanceSpec{Resources: v1alpha1.InstanceResources{Slice: &v1alpha1.SliceRequest{MemoryPercent: 25, CoresPercent: 25}},
				Workspace: &v1alpha1.Workspace{MountPath: "/workspace"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			inst := &v1alpha1.Instance{Spec: tc.in}
			v1alpha1.SetObjectDefaults_Instance(inst)
			tc.want.ImagePullPolicy = corev1.PullIfNotPresent
			if !apiequality.Semantic.DeepEqual(inst.Spec, tc.want) {
				t.Errorf("defaulted spec (-want +got):\n%s", diff.Diff(tc.want, inst.Spec))
			}
		})
	}
}
