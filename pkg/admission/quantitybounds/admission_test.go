package quantitybounds

import (
	"context"
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/admission"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func q(s string) resource.Quantity { return resource.MustParse(s) }

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		name string
		obj  runtime.Object
		want []string // the fields refused, in order
	}{
		{name: "an Instance of ordinary quantities", obj: &gpu.Instance{Spec: gpu.InstanceSpec{
			Resources: gpu.InstanceResources{CPU: ptr.To(q("48")), Memory: ptr.To(q("480Gi")), EphemeralStorage: ptr.To(q("1.5T"))},
			Workspace: &gpu.Workspace{EmptyDirSize: ptr.To(q("200Gi"))},
		}}},
		{name: "an Instance's runaway exponents, in the spec and deep in an env var", obj: &gpu.Instance{Spec: gpu.InstanceSpec{
			Resources: gpu.InstanceResources{CPU: ptr.To(q("1e2020020020")), Memory: ptr.To(q("64Gi"))},
			Workspace: &gpu.Workspace{EmptyDirSize: ptr.To(q("0e2147483647"))},
			Env: []corev1.EnvVar{{Name: "X", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{
				Resource: "limits.cpu", Divisor: q("1e2000000")}}}},
		}}, want: []string{"spec.env[0].valueFrom.resourceFieldRef.divisor", "spec.resources.cpu", "spec.workspace.size"}},
		{name: "a Budget's keys", obj: &gpu.Budget{Spec: gpu.BudgetSpec{Hard: gpu.BudgetResourceList{
			gpu.BudgetAccelerators: q("8"), gpu.BudgetInstances: q("1e99999999"),
		}}}, want: []string{"spec.hard[instances]"}},
		{name: "an InstanceType's partitions", obj: &gpu.InstanceType{Spec: gpu.InstanceTypeSpec{Accelerator: &gpu.Accelerator{
			Memory: q("80Gi"), Partitions: []gpu.PartitionProfile{{Name: "a", Memory: q("10Gi")}, {Name: "b", Memory: q("1e99999999")}},
		}}}, want: []string{"spec.accelerator.partitions[1].memory"}},
		{name: "no object (a delete)", obj: nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var name string
			if m, ok := tc.obj.(metav1.Object); ok {
				name = m.GetName()
			}
			a := admission.NewAttributesRecord(tc.obj, nil, gpu.Kind("Instance").WithVersion("v1alpha1"), "ns", name,
				gpu.Resource("instances").WithVersion("v1alpha1"), "", admission.Create, nil, false, nil)
			err := New().Admit(context.Background(), a, nil)
			if len(tc.want) == 0 {
				if err != nil {
					t.Fatalf("refused: %v", err)
				}
				return
			}
			if !apierrors.IsInvalid(err) {
				t.Fatalf("got %v, want 422 Invalid", err)
			}
			causes := err.(apierrors.APIStatus).Status().Details.Causes
			var got []string
			for _, c := range causes {
				got = append(got, c.Field)
			}
			sort.Strings(got)
			if len(got) != len(tc.want) {
				t.Fatalf("fields %v, want %v", got, tc.want)
			}
			for i := range got {
				if got[i] != tc.want[i] {
					t.Errorf("fields %v, want %v", got, tc.want)
				}
			}
		})
	}
}
