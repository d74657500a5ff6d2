package claim

import (
	"fmt"
	"strconv"

	"k8s.io/apimachinery/pkg/api/meta"
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
		{Name: "Reason", Type: "string", Description: "Why a Pending or Lost Claim waits: the reason of its Waiting condition."},
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
			table.OrNone(waitingReason(c)),
			table.Age(c.CreationTimestamp),
		}, nil
	},
}

// waitingReason is the reason of the Waiting condition of a Claim that
// waits for cards, Pending or Lost; a Claim in another phase shows none.
func waitingReason(c *gpu.Claim) string {
	switch c.Status.Phase {
	case "", gpu.ClaimPending, gpu.ClaimLost:
	default:
		return ""
	}
	if cond := meta.FindStatusCondition(c.Status.Conditions, gpu.ClaimConditionWaiting); cond != nil && cond.Status == metav1.ConditionTrue {
		return cond.Reason
	}
	return ""
}
