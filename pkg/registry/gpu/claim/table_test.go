package claim

import (
	"context"
	"slices"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestTableColumns(t *testing.T) {
	waiting := func(status metav1.ConditionStatus, reason string) []metav1.Condition {
		return []metav1.Condition{{Type: gpu.ClaimConditionWaiting, Status: status, Reason: reason, Message: "m"}}
	}
	cases := []struct {
		name   string
		status gpu.ClaimStatus
		// want are the cells from Phase to Reason.
		want []interface{}
	}{
		{name: "new", want: []interface{}{"<none>", "<none>", "<none>", "<none>"}},
		{name: "new, waiting", status: gpu.ClaimStatus{Conditions: waiting(metav1.ConditionTrue, gpu.ClaimReasonTypeNotFound)},
			want: []interface{}{"<none>", "<none>", "<none>", "TypeNotFound"}},
		{name: "pending for capacity", status: gpu.ClaimStatus{Phase: gpu.ClaimPending, Conditions: waiting(metav1.ConditionTrue, gpu.ClaimReasonCapacity)},
			want: []interface{}{"Pending", "<none>", "<none>", "Capacity"}},
		{name: "pending, scheduling on a node", status: gpu.ClaimStatus{Phase: gpu.ClaimPending, NodeName: "n1",
			Conditions: waiting(metav1.ConditionTrue, gpu.ClaimReasonScheduling)},
			want: []interface{}{"Pending", "n1", "<none>", "Scheduling"}},
		{name: "lost with its Instance", status: gpu.ClaimStatus{Phase: gpu.ClaimLost, NodeName: "n1", AttachedTo: "train",
			Conditions: waiting(metav1.ConditionTrue, "NodeLost")},
			want: []interface{}{"Lost", "n1", "train", "NodeLost"}},
		{name: "a Waiting condition that is false", status: gpu.ClaimStatus{Phase: gpu.ClaimPending, Conditions: waiting(metav1.ConditionFalse, gpu.ClaimReasonBudget)},
			want: []interface{}{"Pending", "<none>", "<none>", "<none>"}},
		{name: "attached, a condition left over", status: gpu.ClaimStatus{Phase: gpu.ClaimAttached, NodeName: "n1", AttachedTo: "train",
			Conditions: waiting(metav1.ConditionTrue, "InstanceRunning")},
			want: []interface{}{"Attached", "n1", "train", "<none>"}},
		{name: "expired", status: gpu.ClaimStatus{Phase: gpu.ClaimExpired},
			want: []interface{}{"Expired", "<none>", "<none>", "<none>"}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			c := &gpu.Claim{ObjectMeta: metav1.ObjectMeta{Name: "hold", Namespace: "ns", CreationTimestamp: metav1.Now()},
				Spec: gpu.ClaimSpec{Type: "h100", Accelerators: ptr.To[int32](4)}, Status: tc.status}
			tbl, err := TableConvertor.ConvertToTable(context.Background(), c, nil)
			if err != nil {
				t.Fatal(err)
			}
			var names []string
			for _, col := range tbl.ColumnDefinitions {
				names = append(names, col.Name)
			}
			if got, want := names, []string{"Name", "Type", "Accelerators", "Phase", "Node", "Attached-To", "Reason", "Age"}; !slices.Equal(got, want) {
				t.Fatalf("columns %v, want %v", got, want)
			}
			cells := tbl.Rows[0].Cells
			for i, want := range tc.want {
				if got := cells[3+i]; got != want {
					t.Errorf("%s = %v, want %v", names[3+i], got, want)
				}
			}
		})
	}
}
