package instance

import (
	"fmt"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/registry/gpu/table"
)

// TableConvertor prints Instances for kubectl get.
var TableConvertor = table.Convertor{
	Columns: []metav1.TableColumnDefinition{
		table.NameColumn,
		{Name: "Type", Type: "string", Description: "The InstanceType the Instance runs on."},
		{Name: "Accelerators", Type: "string", Description: "Cards, slice percentage or partition profile asked for."},
		{Name: "Phase", Type: "string", Description: "Where the Instance is in its life."},
		{Name: "Node", Type: "string", Description: "The node the Instance runs on."},
		table.AgeColumn,
		{Name: "Ports", Type: "string", Priority: 1, Description: "Ports and the node ports they are published on."},
		{Name: "IP", Type: "string", Priority: 1, Description: "The Pod IP of the Instance."},
		{Name: "Reason", Type: "string", Priority: 1, Description: "Why the Instance is not Ready, or why a Ready one is degraded: the reason of its Ready or DeviceHealthy condition."},
		{Name: "Idle", Type: "string", Priority: 1, Description: "How long since any of its devices was last seen active (status.activity.lastActiveTime, to the minute while one is busy); none while it runs no Pod or its node reports no usage."},
	},
	Row: func(obj runtime.Object) ([]interface{}, error) {
		inst, ok := obj.(*gpu.Instance)
		if !ok {
			return nil, fmt.Errorf("not an Instance: %T", obj)
		}
		ip := table.None
		if len(inst.Status.PodIPs) > 0 {
			ip = inst.Status.PodIPs[0]
		}
		return []interface{}{
			inst.Name,
			inst.Spec.Type,
			Share(inst.Spec.Resources),
			table.OrNone(string(inst.Status.Phase)),
			table.OrNone(inst.Status.NodeName),
			table.Age(inst.CreationTimestamp),
			ports(inst),
			ip,
			table.OrNone(reason(inst)),
			idle(inst),
		}, nil
	},
}

// reason answers "why is it not Ready" at a glance: the reason of a Ready
// condition that is not True, else of a DeviceHealthy condition that is
// False. A Ready, healthy Instance shows none.
func reason(inst *gpu.Instance) string {
	if c := meta.FindStatusCondition(inst.Status.Conditions, gpu.InstanceConditionReady); c != nil && c.Status != metav1.ConditionTrue {
		return c.Reason
	}
	if c := meta.FindStatusCondition(inst.Status.Conditions, gpu.InstanceConditionDeviceHealthy); c != nil && c.Status == metav1.ConditionFalse {
		return c.Reason
	}
	return ""
}

// idle is how long the Instance's devices have been idle.
func idle(inst *gpu.Instance) string {
	a := inst.Status.Activity
	if inst.Spec.Stopped || a == nil || a.LastActiveTime == nil {
		return table.None
	}
	return table.Age(*a.LastActiveTime)
}

// Share renders what an Instance asks of its type: "2", "25%", "1g.10gb".
func Share(r gpu.InstanceResources) string {
	switch {
	case r.Slice != nil:
		return strconv.Itoa(int(r.Slice.MemoryPercent)) + "%"
	case r.Partition != "":
		return r.Partition
	case r.Accelerators != nil:
		return strconv.Itoa(int(*r.Accelerators))
	}
	return table.None
}

// ports renders "8888:31234/TCP", as kubectl prints a Service's ports; the
// node port is left out until it is allocated.
func ports(inst *gpu.Instance) string {
	if len(inst.Spec.Ports) == 0 {
		return table.None
	}
	nodePorts := map[string]int32{}
	for _, p := range inst.Status.Ports {
		nodePorts[p.Name] = p.NodePort
	}
	out := make([]string, 0, len(inst.Spec.Ports))
	for _, p := range inst.Spec.Ports {
		s := strconv.Itoa(int(p.Port))
		if np := nodePorts[p.Name]; np != 0 {
			s += ":" + strconv.Itoa(int(np))
		}
		out = append(out, s+"/"+string(p.Protocol))
	}
	return strings.Join(out, ",")
}
