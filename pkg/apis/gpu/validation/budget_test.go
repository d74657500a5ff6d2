package validation

import (
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func validBudget() *gpu.Budget {
	return &gpu.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team-a", Namespace: "team-a"},
		Spec: gpu.BudgetSpec{Hard: gpu.BudgetResourceList{
			gpu.BudgetAccelerators:        qty("8"),
			gpu.BudgetAcceleratorMemory:   qty("640Gi"),
			gpu.BudgetInstances:           qty("10"),
			"accelerators.h100-80gb":      qty("4"),
			"accelerators.a100.40gb.pcie": qty("2.5"),
		}},
	}
}

func TestValidateBudget(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Budget)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.Budget) {}},
		{name: "no limits", mutate: func(o *gpu.Budget) { o.Spec.Hard = nil }},
		{name: "zero limits", mutate: func(o *gpu.Budget) {
			o.Spec.Hard = gpu.BudgetResourceList{gpu.BudgetAccelerators: qty("0"), gpu.BudgetInstances: qty("0")}
		}},
		{name: "fractional accelerators count slices", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetAccelerators] = qty("1500m") }},
		{name: "instances with a suffix", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetInstances] = qty("1k") }},
		{name: "nodeports", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetNodePorts] = qty("16") }},
		{name: "accelerator-hours over a month, stopping", mutate: func(o *gpu.Budget) {
			o.Spec.Hard[gpu.BudgetAcceleratorHours] = qty("100")
			o.Spec.Hard["accelerator-hours.h100-80gb"] = qty("12.5")
			o.Spec.Period = &gpu.BudgetPeriod{Calendar: gpu.BudgetCalendarMonth}
			o.Spec.OnExhausted = gpu.BudgetExhaustedStop
		}},
		{name: "accelerator-hours over 7 days", mutate: func(o *gpu.Budget) {
			o.Spec.Hard[gpu.BudgetAcceleratorHours] = qty("100")
			o.Spec.Period = &gpu.BudgetPeriod{RollingDays: 7}
		}},

		{name: "namespace missing", mutate: func(o *gpu.Budget) { o.Namespace = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "metadata.namespace"}}},
		{name: "name invalid", mutate: func(o *gpu.Budget) { o.Name = "Team A" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "unknown key", mutate: func(o *gpu.Budget) { o.Spec.Hard["gpus"] = qty("4") },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hard[gpus]"}}},
		{name: "unknown key that looks close", mutate: func(o *gpu.Budget) { o.Spec.Hard["accelerator"] = qty("4") },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hard[accelerator]"}}},
		{name: "unknown key with a negative value reports the key only", mutate: func(o *gpu.Budget) { o.Spec.Hard["cpu"] = qty("-1") },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hard[cpu]"}}},
		{name: "per-type key without a type", mutate: func(o *gpu.Budget) { o.Spec.Hard["accelerators."] = qty("1") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerators.]"}}},
		{name: "per-type key with an invalid type", mutate: func(o *gpu.Budget) { o.Spec.Hard["accelerators.H100"] = qty("1") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerators.H100]"}}},
		{name: "per-type key with a too long type", mutate: func(o *gpu.Budget) {
			o.Spec.Hard[gpu.BudgetResourceName("accelerators."+strings.Repeat("a", 254))] = qty("1")
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerators." + strings.Repeat("a", 254) + "]"}}},
		{name: "runaway exponent", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetInstances] = qty("1e2020020020") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[instances]"}}},
		{name: "negative values", mutate: func(o *gpu.Budget) {
			o.Spec.Hard[gpu.BudgetAccelerators] = qty("-1")
			o.Spec.Hard[gpu.BudgetAcceleratorMemory] = qty("-1Gi")
			o.Spec.Hard["accelerators.h100-80gb"] = qty("-500m")
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerators]"},
			{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerator-memory]"},
			{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerators.h100-80gb]"},
		}},
		{name: "per-type hours key without a type", mutate: func(o *gpu.Budget) { o.Spec.Hard["accelerator-hours."] = qty("1") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[accelerator-hours.]"}}},
		{name: "both periods", mutate: func(o *gpu.Budget) {
			o.Spec.Period = &gpu.BudgetPeriod{Calendar: gpu.BudgetCalendarMonth, RollingDays: 7}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.period"}}},
		{name: "unknown calendar", mutate: func(o *gpu.Budget) { o.Spec.Period = &gpu.BudgetPeriod{Calendar: "Week"} },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.period.calendar"}}},
		{name: "rolling days past the ledger", mutate: func(o *gpu.Budget) { o.Spec.Period = &gpu.BudgetPeriod{RollingDays: 32} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.period.rollingDays"}}},
		{name: "empty period", mutate: func(o *gpu.Budget) { o.Spec.Period = &gpu.BudgetPeriod{} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.period.rollingDays"}}},
		{name: "unknown onExhausted", mutate: func(o *gpu.Budget) { o.Spec.OnExhausted = "Delete" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.onExhausted"}}},
		{name: "instances fractional", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetInstances] = qty("1500m") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[instances]"}}},
		{name: "nodeports fractional", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetNodePorts] = qty("1500m") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[nodeports]"}}},
		{name: "instances decimal", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetInstances] = qty("2.5") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[instances]"}}},
		{name: "instances negative is reported once", mutate: func(o *gpu.Budget) { o.Spec.Hard[gpu.BudgetInstances] = qty("-1.5") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.hard[instances]"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validBudget()
			tc.mutate(obj)
			expectErrors(t, ValidateBudget(obj), tc.want)
		})
	}
}

func TestValidateBudgetUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Budget)
		want   field.ErrorList
	}{
		{name: "unchanged", mutate: func(*gpu.Budget) {}},
		{name: "limits may change", mutate: func(o *gpu.Budget) {
			o.Spec.Hard[gpu.BudgetAccelerators] = qty("16")
			delete(o.Spec.Hard, gpu.BudgetInstances)
		}},
		{name: "new spec is validated", mutate: func(o *gpu.Budget) { o.Spec.Hard["gpus"] = qty("1") },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.hard[gpus]"}}},
		{name: "name is immutable", mutate: func(o *gpu.Budget) { o.Name = "team-b" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "resourceVersion required", mutate: func(o *gpu.Budget) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validBudget()
			old.ResourceVersion = "3"
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateBudgetUpdate(obj, old), tc.want)
		})
	}
}

func TestValidateBudgetStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Budget)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.Budget) {}},
		{name: "empty status", mutate: func(o *gpu.Budget) { o.Status = gpu.BudgetStatus{} }},
		{name: "used above hard is allowed", mutate: func(o *gpu.Budget) { o.Status.Used[gpu.BudgetAccelerators] = qty("9") }},
		{name: "spec is not checked here", mutate: func(o *gpu.Budget) { o.Spec.Hard["gpus"] = qty("1") }},

		{name: "unknown keys", mutate: func(o *gpu.Budget) {
			o.Status.Hard["gpus"] = qty("1")
			o.Status.Used["gpus"] = qty("1")
		}, want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.hard[gpus]"}, {Type: field.ErrorTypeNotSupported, Field: "status.used[gpus]"}}},
		{name: "per-type key invalid", mutate: func(o *gpu.Budget) { o.Status.Used["accelerators.A100"] = qty("1") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.used[accelerators.A100]"}}},
		{name: "negative values", mutate: func(o *gpu.Budget) {
			o.Status.Hard[gpu.BudgetAcceleratorMemory] = qty("-1")
			o.Status.Used[gpu.BudgetAccelerators] = qty("-1")
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.hard[accelerator-memory]"}, {Type: field.ErrorTypeInvalid, Field: "status.used[accelerators]"}}},
		{name: "instances used fractional", mutate: func(o *gpu.Budget) { o.Status.Used[gpu.BudgetInstances] = qty("0.5") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.used[instances]"}}},
		{name: "metadata update rules apply", mutate: func(o *gpu.Budget) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
		{name: "pending charges", mutate: func(o *gpu.Budget) {
			o.Status.Pending = []gpu.BudgetCharge{
				{Kind: "Instance", Name: "a", UID: "u1", Charge: gpu.BudgetResourceList{gpu.BudgetAccelerators: qty("1")}},
				{Kind: "Claim", Name: "b", UID: "u2", ResourceVersion: "7", Charge: gpu.BudgetResourceList{"accelerators.h100": qty("500m")}},
			}
		}},
		{name: "pending charges invalid", mutate: func(o *gpu.Budget) {
			o.Status.Pending = []gpu.BudgetCharge{
				{Kind: "Pod", UID: "u1", Charge: gpu.BudgetResourceList{"gpus": qty("1")}},
				{Kind: "Instance", Name: "b", UID: "u1", Charge: gpu.BudgetResourceList{gpu.BudgetAccelerators: qty("-1")}},
				{Kind: "Instance", Name: "c"},
			}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeNotSupported, Field: "status.pending[0].kind"}, {Type: field.ErrorTypeRequired, Field: "status.pending[0].name"}, {Type: field.ErrorTypeNotSupported, Field: "status.pending[0].charge[gpus]"},
			{Type: field.ErrorTypeDuplicate, Field: "status.pending[1].uid"}, {Type: field.ErrorTypeInvalid, Field: "status.pending[1].charge[accelerators]"},
			{Type: field.ErrorTypeRequired, Field: "status.pending[2].uid"},
		}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validBudget()
			old.ResourceVersion = "3"
			old.Status = gpu.BudgetStatus{
				Hard: old.Spec.DeepCopy().Hard,
				Used: gpu.BudgetResourceList{
					gpu.BudgetAccelerators:      qty("2.5"),
					gpu.BudgetAcceleratorMemory: qty("200Gi"),
					gpu.BudgetInstances:         qty("3"),
					"accelerators.h100-80gb":    qty("2"),
				},
			}
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateBudgetStatusUpdate(obj, old), tc.want)
		})
	}
}
