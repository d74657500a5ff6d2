package resourceversionformat

import (
	"context"
	"strings"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestAdmit(t *testing.T) {
	for _, tc := range []struct {
		rv, want string // want: a substring of the 422, "" for none
	}{
		{rv: ""},
		{rv: "1"},
		{rv: "18446744073709551615"},
		{rv: "abc", want: `metadata.resourceVersion: Invalid value: "abc": must be the resourceVersion the server returned`},
		{rv: "0", want: "metadata.resourceVersion"},
		{rv: "-5", want: "metadata.resourceVersion"},
		{rv: "18446744073709551616", want: "metadata.resourceVersion"},
		{rv: "1e3", want: "metadata.resourceVersion"},
	} {
		t.Run(tc.rv, func(t *testing.T) {
			obj := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "x", Namespace: "ns", ResourceVersion: tc.rv}}
			a := admission.NewAttributesRecord(obj, obj.DeepCopy(), gpu.Kind("Instance").WithVersion("v1alpha1"), "ns", "x",
				gpu.Resource("instances").WithVersion("v1alpha1"), "", admission.Update, nil, false, nil)
			err := New().Admit(context.Background(), a, nil)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("refused: %v", err)
			case tc.want != "" && (!apierrors.IsInvalid(err) || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("got %v, want a 422 containing %q", err, tc.want)
			}
		})
	}
}
