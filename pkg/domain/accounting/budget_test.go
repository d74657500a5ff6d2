package accounting

import (
	"testing"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// list reads key, quantity pairs.
func list(kv ...string) gpu.BudgetResourceList {
	l := gpu.BudgetResourceList{}
	for i := 0; i < len(kv); i += 2 {
		l[gpu.BudgetResourceName(kv[i])] = resource.MustParse(kv[i+1])
	}
	return l
}

func TestBeyond(t *testing.T) {
	for _, tc := range []struct {
		name    string
		c, base gpu.BudgetResourceList
		want    gpu.BudgetResourceList
	}{
		{name: "no base", c: list("accelerators", "2", "instances", "1"), want: list("accelerators", "2", "instances", "1")},
		{name: "zeros are dropped", c: list("accelerators", "0", "nodeports", "0", "instances", "1"), want: list("instances", "1")},
		{name: "a raise", c: list("accelerators", "4"), base: list("accelerators", "2"), want: list("accelerators", "2")},
		{name: "a fall is no charge", c: list("accelerators", "1"), base: list("accelerators", "2"), want: list()},
		{name: "equal", c: list("accelerator-memory", "80Gi"), base: list("accelerator-memory", "80Gi"), want: list()},
		{name: "a key base lacks counts from zero", c: list("accelerators.h100", "500m"), base: list("accelerators.l4", "1"), want: list("accelerators.h100", "500m")},
		{name: "fractions", c: list("accelerators", "1500m"), base: list("accelerators", "1"), want: list("accelerators", "500m")},
		{name: "beyond int64", c: list("accelerator-memory", "448E"), base: list("accelerator-memory", "7E"), want: list("accelerator-memory", "441E")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, base := tc.c.DeepCopy(), tc.base.DeepCopy()
			if got := Beyond(c, base); !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("Beyond = %v, want %v", got, tc.want)
			}
			if !apiequality.Semantic.DeepEqual(c, tc.c) || !apiequality.Semantic.DeepEqual(base, tc.base) {
				t.Errorf("Beyond changed its arguments: %v, %v", c, base)
			}
		})
	}
}

func TestCount(t *testing.T) {
	hard := list("accelerators", "8", "accelerator-memory", "640Gi")
	for _, tc := range []struct {
		name    string
		used, d gpu.BudgetResourceList
		want    gpu.BudgetResourceList
	}{
		{name: "adds", used: list("accelerators", "2", "accelerator-memory", "160Gi"), d: list("accelerators", "1", "accelerator-memory", "80Gi"),
			want: list("accelerators", "3", "accelerator-memory", "240Gi")},
		{name: "keys hard does not limit are not counted", used: list("accelerators", "2"), d: list("accelerators", "1", "instances", "1", "accelerators.h100", "1"),
			want: list("accelerators", "3")},
		{name: "a key used lacks starts from zero", used: list("accelerators", "2"), d: list("accelerator-memory", "40Gi"),
			want: list("accelerators", "2", "accelerator-memory", "40Gi")},
		{name: "nil used is made", d: list("accelerators", "500m"), want: list("accelerators", "500m")},
		{name: "nil used stays nil when nothing is counted", d: list("instances", "1"), want: nil},
		{name: "a negative d takes back", used: list("accelerators", "3"), d: list("accelerators", "-1"), want: list("accelerators", "2")},
		{name: "beyond int64", used: list("accelerator-memory", "7E"), d: list("accelerator-memory", "441E"), want: list("accelerator-memory", "448E")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			d := tc.d.DeepCopy()
			got := Count(tc.used.DeepCopy(), d, hard)
			// Semantic equality takes nil and empty for the same.
			if !apiequality.Semantic.DeepEqual(got, tc.want) || (tc.want == nil) != (got == nil) {
				t.Errorf("Count = %#v, want %#v", got, tc.want)
			}
			if !apiequality.Semantic.DeepEqual(d, tc.d) {
				t.Errorf("Count changed d: %v", d)
			}
		})
	}
}
