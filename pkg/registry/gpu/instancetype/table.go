package instancetype

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

// TableConvertor prints InstanceTypes for kubectl get.
var TableConvertor = table.Convertor{
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Model", Type: "string", Description: "The accelerator model; <none> for a CPU-only type."},
		{Name: "Memory", Type: "string", Description: "Memory of one card."},
		{Name: "Free", Type: "string", Description: "Free cards over all cards in the pool."},
		{Name: "Phase", Type: "string", Description: "Active, Held or Draining."},
		table.AgeColumn,
	},
	Row: func(obj runtime.Object) ([]interface{}, error) {
		it, ok := obj.(*gpu.InstanceType)
		if !ok {
			return nil, fmt.Errorf("not an InstanceType: %T", obj)
		}
		model, memory := table.None, table.None
		if a := it.Spec.Accelerator; a != nil {
			model, memory = a.Model, a.Memory.String()
		}
		c := it.Status.Capacity
		return []interface{}{
			it.Name,
			model,
			memory,
			fmt.Sprintf("%d/%d", c.FreeCards, c.Cards),
			table.OrNone(string(it.Status.Phase)),
			table.Age(it.CreationTimestamp),
		}, nil
	},
}
