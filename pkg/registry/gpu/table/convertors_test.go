package table_test

import (
	"context"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/budget"
	"kiln.dev/kiln/pkg/registry/gpu/claim"
	"kiln.dev/kiln/pkg/registry/gpu/instance"
	"kiln.dev/kiln/pkg/registry/gpu/instancetype"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

func TestEveryKindPrintsOneCellPerColumn(t *testing.T) {
	meta := metav1.ObjectMeta{Name: "x", Namespace: "ns", CreationTimestamp: metav1.Now()}
	for _, tc := range []struct {
		kind      string
		convertor table.Convertor
		obj, list runtime.Object
		want      []interface{}
	}{
		{
			kind:      "Instance",
			convertor: instance.TableConvertor,
			obj: &gpu.Instance{ObjectMeta: meta,
				Spec: gpu.InstanceSpec{Type: "h100", Resources: gpu.InstanceResources{Accelerators: ptr.To[int32](2)},
					Ports: []gpu.InstancePort{{Name: "jupyter", Port: 8888, Protocol: "TCP"}, {Name: "ssh", Port: 22, Protocol: "TCP"}}},
				Status: gpu.InstanceStatus{Phase: gpu.InstanceReady, NodeName: "n1", PodIPs: []string{"10.0.0.5"},
					Ports: []gpu.InstancePortStatus{{Name: "jupyter", Port: 8888, NodePort: 31234}}}},
			list: &gpu.InstanceList{Items: []gpu.Instance{{ObjectMeta: meta}, {ObjectMeta: meta}}},
			want: []interface{}{"x", "h100", "2", "Ready", "n1", "0s", "8888:31234/TCP,22/TCP", "10.0.0.5", "<none>"},
		},
		{
			kind:      "InstanceType",
			convertor: instancetype.TableConvertor,
			obj: &gpu.InstanceType{ObjectMeta: meta,
				Spec:   gpu.InstanceTypeSpec{Accelerator: &gpu.Accelerator{Model: "L4", Memory: resource.MustParse("24Gi")}},
				Status: gpu.InstanceTypeStatus{Phase: gpu.InstanceTypeActive, Capacity: gpu.InstanceTypeCapacity{Cards: 4, FreeCards: 3}}},
			list: &gpu.InstanceTypeList{Items: []gpu.InstanceType{{ObjectMeta: meta}, {ObjectMeta: meta}}},
			want: []interface{}{"x", "L4", "24Gi", "3/4", "Active", "0s"},
		},
		{
			kind:      "Claim",
			convertor: claim.TableConvertor,
			obj: &gpu.Claim{ObjectMeta: meta, Spec: gpu.ClaimSpec{Type: "a100", Partition: "3g.40gb"},
				Status: gpu.ClaimStatus{Phase: gpu.ClaimAttached, NodeName: "n2", AttachedTo: "train"}},
			list: &gpu.ClaimList{Items: []gpu.Claim{{ObjectMeta: meta}, {ObjectMeta: meta}}},
			want: []interface{}{"x", "a100", "3g.40gb", "Attached", "n2", "train", "<none>", "0s"},
		},
		{
			kind:      "Budget",
			convertor: budget.TableConvertor,
			obj: &gpu.Budget{ObjectMeta: meta,
				Spec: gpu.BudgetSpec{Hard: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("8"), gpu.BudgetAcceleratorHours: resource.MustParse("100")}},
				Status: gpu.BudgetStatus{Used: gpu.BudgetResourceList{gpu.BudgetAccelerators: resource.MustParse("6")},
					Consumed: gpu.BudgetResourceList{gpu.BudgetAcceleratorHours: resource.MustParse("12500m")}}},
			list: &gpu.BudgetList{Items: []gpu.Budget{{ObjectMeta: meta}, {ObjectMeta: meta}}},
			want: []interface{}{"x", "6/8", "<none>", "12.500/100", "0s"},
		},
	} {
		t.Run(tc.kind, func(t *testing.T) {
			tbl, err := tc.convertor.ConvertToTable(context.Background(), tc.obj, nil)
			if err != nil {
				t.Fatal(err)
			}
			if len(tbl.Rows) != 1 || len(tbl.Rows[0].Cells) != len(tbl.ColumnDefinitions) {
				t.Fatalf("%d rows; %d cells for %d columns", len(tbl.Rows), len(tbl.Rows[0].Cells), len(tbl.ColumnDefinitions))
			}
			for i, want := range tc.want {
				if got := tbl.Rows[0].Cells[i]; got != want {
					t.Errorf("column %s = %v, want %v", tbl.ColumnDefinitions[i].Name, got, want)
				}
			}
			// Empty objects of a list print too, and every row is complete.
			tbl, err = tc.convertor.ConvertToTable(context.Background(), tc.list, &metav1.TableOptions{NoHeaders: true})
			if err != nil {
				t.Fatal(err)
			}
			if len(tbl.ColumnDefinitions) != 0 {
				t.Errorf("NoHeaders kept %d column definitions", len(tbl.ColumnDefinitions))
			}
			for _, row := range tbl.Rows {
				if len(row.Cells) != len(tc.convertor.Columns) {
					t.Errorf("row of %d cells for %d columns", len(row.Cells), len(tc.convertor.Columns))
				}
			}
			if len(tbl.Rows) != 2 {
				t.Errorf("%d rows for a list of 2", len(tbl.Rows))
			}
		})
	}
}

// TestInstanceReason checks the wide REASON column answers "why is it not
// Ready" from the conditions the controller writes.
func TestInstanceReason(t *testing.T) {
	for _, tc := range []struct {
		name       string
		conditions []metav1.Condition
		want       string
	}{
		{name: "no status yet", want: "<none>"},
		{name: "ready", conditions: []metav1.Condition{{Type: gpu.InstanceConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady"}}, want: "<none>"},
		{name: "unschedulable", conditions: []metav1.Condition{{Type: gpu.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: "Unschedulable"}}, want: "Unschedulable"},
		{name: "ready on a failed device", conditions: []metav1.Condition{
			{Type: gpu.InstanceConditionReady, Status: metav1.ConditionTrue, Reason: "PodReady"},
			{Type: gpu.InstanceConditionDeviceHealthy, Status: metav1.ConditionFalse, Reason: "DeviceUnhealthy"},
		}, want: "DeviceUnhealthy"},
		{name: "not ready wins over the device", conditions: []metav1.Condition{
			{Type: gpu.InstanceConditionReady, Status: metav1.ConditionFalse, Reason: "ClaimNotAttached"},
			{Type: gpu.InstanceConditionDeviceHealthy, Status: metav1.ConditionFalse, Reason: "DeviceUnhealthy"},
		}, want: "ClaimNotAttached"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Status: gpu.InstanceStatus{Conditions: tc.conditions}}
			tbl, err := instance.TableConvertor.ConvertToTable(context.Background(), inst, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cell(t, tbl, "Reason"); got != tc.want {
				t.Errorf("Reason = %v, want %v", got, tc.want)
			}
		})
	}
}

// cell is the first row's cell of the named column.
func cell(t *testing.T, tbl *metav1.Table, column string) any {
	t.Helper()
	for i, c := range tbl.ColumnDefinitions {
		if c.Name == column {
			return tbl.Rows[0].Cells[i]
		}
	}
	t.Fatalf("no column %s", column)
	return nil
}

// TestInstanceIdle checks the wide IDLE column: how long since the
// Instance's devices were last active, while it runs.
func TestInstanceIdle(t *testing.T) {
	active := metav1.NewTime(time.Now().Add(-90 * time.Minute))
	for _, tc := range []struct {
		name string
		spec gpu.InstanceSpec
		act  *gpu.InstanceActivity
		want string
	}{
		{name: "idle for 90 minutes", act: &gpu.InstanceActivity{LastActiveTime: &active}, want: "90m"},
		{name: "no report", want: "<none>"},
		{name: "stopped", spec: gpu.InstanceSpec{Stopped: true}, act: &gpu.InstanceActivity{LastActiveTime: &active}, want: "<none>"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := &gpu.Instance{ObjectMeta: metav1.ObjectMeta{Name: "x"}, Spec: tc.spec, Status: gpu.InstanceStatus{Activity: tc.act}}
			tbl, err := instance.TableConvertor.ConvertToTable(context.Background(), inst, nil)
			if err != nil {
				t.Fatal(err)
			}
			if got := cell(t, tbl, "Idle"); got != tc.want {
				t.Errorf("Idle = %v, want %v", got, tc.want)
			}
		})
	}
}
