package kubectlgpu

import (
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestUsage(t *testing.T) {
	counted := metav1.NewTime(time.Date(2026, 12, 6, 10, 0, 0, 0, time.UTC))
	since := metav1.NewTime(time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC))
	team := &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "team", Namespace: ns},
		Spec: v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{
			"accelerator-hours": resource.MustParse("100"), "accelerator-hours.h100": resource.MustParse("10"), "accelerators": resource.MustParse("8"),
		}},
		Status: v1alpha1.BudgetStatus{
			PeriodStart: &since, ConsumedTime: &counted,
			Consumed: v1alpha1.BudgetResourceList{"accelerator-hours": resource.MustParse("3751m"), "accelerator-hours.h100": resource.MustParse("3500m")},
			Usage: []v1alpha1.BudgetUsage{
				// 3.5 card-hours of h100, of which half an hour idle.
				{InstanceType: "h100", CardSeconds: resource.MustParse("12600"), IdleCardSeconds: resource.MustParse("1800")},
				// A quarter card for an hour, and a second.
				{InstanceType: "l4", CardSeconds: resource.MustParse("900250m")},
			},
		},
	}
	weekly := &v1alpha1.Budget{
		ObjectMeta: metav1.ObjectMeta{Name: "weekly", Namespace: "tenant-b"},
		Spec:       v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{"accelerators": resource.MustParse("1")}, Period: &v1alpha1.BudgetPeriod{RollingDays: 7}},
		Status: v1alpha1.BudgetStatus{PeriodStart: &since, ConsumedTime: &counted,
			Usage: []v1alpha1.BudgetUsage{{InstanceType: "a10", CardSeconds: resource.MustParse("36")}}},
	}
	for _, tc := range []struct {
		name string
		kiln []runtime.Object
		args []string
		want string
	}{
		{name: "this namespace", kiln: objs(team, weekly),
			want: "BUDGET  PERIOD  SINCE       TYPE  CARD-HOURS  IDLE   LIMIT                            COUNTED\n" +
				"team    Month   2026-12-01  h100  3.500       0.500  accelerator-hours.h100 3.500/10  2026-12-06T10:00:00Z\n" +
				"team    Month   2026-12-01  l4    0.250       0.000  -                                2026-12-06T10:00:00Z\n" +
				"team    Month   2026-12-01  *     3.750       0.500  accelerator-hours 3.751/100      2026-12-06T10:00:00Z\n"},
		{name: "every namespace", kiln: objs(team, weekly), args: []string{"-A"},
			want: "NAMESPACE  BUDGET  PERIOD  SINCE       TYPE  CARD-HOURS  IDLE   LIMIT                            COUNTED\n" +
				"tenant-a   team    Month   2026-12-01  h100  3.500       0.500  accelerator-hours.h100 3.500/10  2026-12-06T10:00:00Z\n" +
				"tenant-a   team    Month   2026-12-01  l4    0.250       0.000  -                                2026-12-06T10:00:00Z\n" +
				"tenant-a   team    Month   2026-12-01  *     3.750       0.500  accelerator-hours 3.751/100      2026-12-06T10:00:00Z\n" +
				"tenant-b   weekly  7 days  2026-12-01  a10   0.010       0.000  -                                2026-12-06T10:00:00Z\n"},
		{name: "nothing counted", kiln: objs(weekly), want: "No card-hours counted by a Budget in namespace tenant-a this period.\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kiln)
			out, _, err := f.run(t, append([]string{"usage", "-n", ns}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
		})
	}
}
