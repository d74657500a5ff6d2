package claim

import (
	"fmt"
	"strconv"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

// TableConvertor prints Claims for kubectl get.
var TableConvertor = table.Convertor{
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Type", Type: "string", Description: "The InstanceType reserved from."},
		{Name: "Accelerators", Type: "string", Description: "Cards or partition profile held."},
		{Name: "Phase", Type: "string", Description: "Pending, Bound, Attached, Lost or Expired."},
		{Name: "Node", Type: "string", Description: "The node the devices are held on."},
		{Name: "Attached-To", Type: "string", Description: "The Instance using the reservation."},
		table.AgeColumn,
	},
	Row: func(obj runtime.Object) ([]interface{}, error) {
		c, ok := obj.(*gpu.Claim)
		if !ok {
			return nil, fmt.Errorf("not a Claim: %T", obj)
		}
		share := c.Spec.Partition
		if c.Spec.Accelerators != nil {
			share = strconv.Itoa(int(*c.Spec.Accelerators))
		}
		return []interface{}{
			c.Name,
			c.Spec.Type,
			table.OrNone(share),
			table.OrNone(string(c.Status.Phase)),
			table.OrNone(c.Status.NodeName),
			table.OrNone(c.Status.AttachedTo),
			table.Age(c.CreationTimestamp),
		}, nil
	},
}
