package nodedevices

import (
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

// TableConvertor prints NodeDevices for kubectl get.
var TableConvertor = table.Convertor{
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Devices", Type: "integer", Description: "Devices of the node."},
		{Name: "Unhealthy", Type: "integer", Description: "Devices the kubelet does not allocate."},
		{Name: "Held", Type: "integer", Description: "Devices allocated to a Pod."},
		table.AgeColumn,
	},
	Row: func(obj runtime.Object) ([]interface{}, error) {
		nd, ok := obj.(*gpu.NodeDevices)
		if !ok {
			return nil, fmt.Errorf("not a NodeDevices: %T", obj)
		}
		unhealthy, held := 0, 0
		for _, d := range nd.Status.Devices {
			if d.Health != gpu.DeviceHealthy {
				unhealthy++
			}
			if d.Holder != nil {
				held++
			}
		}
		return []interface{}{nd.Name, len(nd.Status.Devices), unhealthy, held, table.Age(nd.CreationTimestamp)}, nil
	},
}
