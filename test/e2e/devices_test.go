package e2e

import (
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestInstancesGetDistinctDevices (issue H): the simulated node agent
// allocates devices to the Pods bound to its node as the kubelet would,
// and the controller reports them in status.allocations. Two Instances
// of 2 whole H100s on one node get four distinct UUIDs of that node; a
// MIG Instance gets a MIG device; the inventory is readable by tenant-a
// and names no object of tenant-b; a device failing shows in the
// inventory, on the Instance that holds it, and in the pool's capacity.
func TestInstancesGetDistinctDevices(t *testing.T) {
	const node = "gpu-h100-1"
	ns := "e2e-devices"
	controllerNamespace(t, ns)
	pinned := func(name, resources string) string {
		return strings.Replace(instance(name, ns, "h100", "busybox:1"), "  resources:\n    accelerators: 1\n",
			"  nodeName: "+node+"\n  resources: "+resources+"\n", 1)
	}
	for _, m := range []string{pinned("two-a", "{accelerators: 2}"), pinned("two-b", "{accelerators: 2}"), pinned("mig", "{partition: 1g.10gb}")} {
		mustKubectl(t, tenant(tenantA), m, "create", "-f", "-")
	}
	t.Cleanup(func() { kubectl(tenant(tenantA), "", "delete", "instances", "--all", "-n", ns, "--wait=false") })
	// A tenant-b Instance on the same node, whose name must not show.
	mustKubectl(t, tenant(tenantB), strings.ReplaceAll(pinned("secret-b", "{accelerators: 1}"), ns, tenantB), "create", "-f", "-")
	t.Cleanup(func() { kubectl(tenant(tenantB), "", "delete", "instance", "secret-b", "-n", tenantB, "--wait=false") })

	allocated := func(i *gpuv1.Instance) bool {
		return i.Status.Phase == gpuv1.InstanceReady && len(i.Status.Allocations) > 0
	}
	inv, err := tenantKiln(t, tenantA).GpuV1alpha1().NodeDevices().Get(context.Background(), node, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("tenant-a reading the inventory of %s: %v", node, err)
	}
	onNode := map[string]gpuv1.NodeDevice{}
	for _, d := range inv.Status.Devices {
		onNode[d.UUID] = d
	}
	seen := map[string]string{}
	for _, name := range []string{"two-a", "two-b"} {
		inst := waitInstance(t, ns, name, 90*time.Second, "Ready with its devices", allocated)
		if len(inst.Status.Allocations) != 2 {
			t.Fatalf("%s: allocations %+v, want 2 cards", name, inst.Status.Allocations)
		}
		for _, a := range inst.Status.Allocations {
			d, ok := onNode[a.Device]
			if !ok || d.Resource != "nvidia.com/gpu" || a.Mode != gpuv1.AllocationExclusive || a.PCIBusID != d.PCIBusID || a.Index != d.Index {
				t.Errorf("%s: allocation %+v is not a card of %s (%+v)", name, a, node, d)
			}
			if other, dup := seen[a.Device]; dup {
				t.Errorf("%s and %s share %s", name, other, a.Device)
			}
			seen[a.Device] = name
		}
	}
	mig := waitInstance(t, ns, "mig", 90*time.Second, "Ready with its device", allocated)
	if a := mig.Status.Allocations; len(a) != 1 || !strings.HasPrefix(a[0].Device, "MIG-") || a[0].Mode != gpuv1.AllocationPartition || a[0].Profile != "1g.10gb" {
		t.Errorf("mig: allocations %+v, want one 1g.10gb MIG device", a)
	}

	// What tenant-a reads of the node names none of tenant-b's objects,
	// and says an Instance holds each of its cards.
	inv = waitFor(t, "the inventory showing the holders", 30*time.Second,
		func(ctx context.Context) (*gpuv1.NodeDevices, error) {
			return tenantKiln(t, tenantA).GpuV1alpha1().NodeDevices().Get(ctx, node, metav1.GetOptions{})
		},
		func(nd *gpuv1.NodeDevices) bool {
			held := 0
			for _, d := range nd.Status.Devices {
				if d.Holder != nil && d.Holder.Kind == gpuv1.DeviceHolderInstance {
					held++
				}
			}
			return held == 6
		},
		func(nd *gpuv1.NodeDevices) any { return nd.Status.Devices })
	raw, err := json.Marshal(inv)
	if err != nil {
		t.Fatal(err)
	}
	for _, secret := range []string{"secret-b", tenantB} {
		if strings.Contains(string(raw), secret) {
			t.Errorf("the inventory tenant-a reads names %q: %s", secret, raw)
		}
	}

	// A device of two-a fails: the inventory says so, the Instance says
	// so with a condition and an Event naming the device, and the h100
	// pool counts one card fewer.
	kiln := kilnAdmin(t)
	h100, err := kiln.GpuV1alpha1().InstanceTypes().Get(context.Background(), "h100", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cardsBefore := h100.Status.Capacity.Cards
	failed := waitInstance(t, ns, "two-a", 10*time.Second, "allocated", allocated).Status.Allocations[0].Device
	if err := cluster.SetDeviceHealth(node, failed, "XID 79: fell off the bus"); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.SetDeviceHealth(node, failed, "") })
	waitInstance(t, ns, "two-a", 30*time.Second, "DeviceHealthy=False naming the device", func(i *gpuv1.Instance) bool {
		c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionDeviceHealthy)
		return c != nil && c.Status == metav1.ConditionFalse && strings.Contains(c.Message, "device "+failed) && strings.Contains(c.Message, "XID 79")
	})
	if c := meta.FindStatusCondition(waitInstance(t, ns, "two-b", 10*time.Second, "allocated", allocated).Status.Conditions, gpuv1.InstanceConditionDeviceHealthy); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("two-b, on healthy devices: DeviceHealthy %+v, want True", c)
	}
	events := mustKubectl(t, tenant(tenantA), "", "get", "events", "-n", ns, "--field-selector=involvedObject.name=two-a,reason=DeviceUnhealthy", "-o=jsonpath={.items[*].message}")
	if !strings.Contains(events, failed) {
		t.Errorf("no DeviceUnhealthy Event naming %s: %q", failed, events)
	}
	waitFor(t, "the h100 pool without the failed card", 30*time.Second,
		func(ctx context.Context) (*gpuv1.InstanceType, error) {
			return kiln.GpuV1alpha1().InstanceTypes().Get(ctx, "h100", metav1.GetOptions{})
		},
		func(it *gpuv1.InstanceType) bool { return it.Status.Capacity.Cards == cardsBefore-1 },
		func(it *gpuv1.InstanceType) any { return it.Status.Capacity })
	waitFor(t, "the failed device in the inventory", 30*time.Second,
		func(ctx context.Context) (*gpuv1.NodeDevices, error) {
			return tenantKiln(t, tenantA).GpuV1alpha1().NodeDevices().Get(ctx, node, metav1.GetOptions{})
		},
		func(nd *gpuv1.NodeDevices) bool {
			for _, d := range nd.Status.Devices {
				if d.UUID == failed {
					return d.Health == gpuv1.DeviceUnhealthy && d.Reason == "XID 79: fell off the bus"
				}
			}
			return false
		},
		func(nd *gpuv1.NodeDevices) any { return nd.Status.Devices })
}
