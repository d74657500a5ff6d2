package budget

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

// TableConvertor prints Budgets for kubectl get.
var TableConvertor = table.Convertor{
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Accelerators", Type: "string", Description: "Cards charged over the limit."},
		{Name: "Memory", Type: "string", Description: "Accelerator memory charged over the limit."},
		{Name: "Card-Hours", Type: "string", Description: "Card-hours consumed this period over the accelerator-hours limit."},
		table.AgeColumn,
	},
	Row: func(obj runtime.Object) ([]interface{}, error) {
		b, ok := obj.(*gpu.Budget)
		if !ok {
			return nil, fmt.Errorf("not a Budget: %T", obj)
		}
		return []interface{}{
			b.Name,
			usedOverHard(b, gpu.BudgetAccelerators),
			usedOverHard(b, gpu.BudgetAcceleratorMemory),
			usedOverHard(b, gpu.BudgetAcceleratorHours),
			table.Age(b.CreationTimestamp),
		}, nil
	},
}

// usedOverHard renders "6/8" as kubectl describe quota does (consumed
// over hard for accelerator-hours); <none> when the budget sets no limit
// on key.
func usedOverHard(b *gpu.Budget, key gpu.BudgetResourceName) string {
	hard, ok := b.Spec.Hard[key]
	if !ok {
		return table.None
	}
	used := b.Status.Used[key]
	if key == gpu.BudgetAcceleratorHours {
		used = b.Status.Consumed[key]
	}
	if key == gpu.BudgetAccelerators || key == gpu.BudgetAcceleratorHours {
		// Slices and partitions charge fractions of a card: 6.375, not 6375m.
		return used.AsDec().String() + "/" + hard.AsDec().String()
	}
	return used.String() + "/" + hard.String()
}
