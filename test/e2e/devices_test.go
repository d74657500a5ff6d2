package e2e

import (
	"context"
	"encoding/json"
	"fmt"
	"slices"
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
	cardsBefore, freeBefore := h100.Status.Capacity.Cards, h100.Status.Capacity.FreeCards
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
	if events, ok := recordedEvents(t, ns, "involvedObject.name=two-a,reason=DeviceUnhealthy", "{.items[*].message}", failed); !ok {
		t.Errorf("no DeviceUnhealthy Event naming %s: %q", failed, events)
	}
	// kubectl get it shows FREE one lower.
	waitFor(t, "the h100 pool without the failed card", 30*time.Second,
		func(ctx context.Context) (*gpuv1.InstanceType, error) {
			return kiln.GpuV1alpha1().InstanceTypes().Get(ctx, "h100", metav1.GetOptions{})
		},
		func(it *gpuv1.InstanceType) bool {
			return it.Status.Capacity.Cards == cardsBefore-1 && it.Status.Capacity.FreeCards == freeBefore-1
		},
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

// TestClaimDevicesAcrossStopStart (issue H): an Instance on a Claim gets
// exactly the devices the Claim's holder had, and across 10 stops and
// starts the holder and the Instance pass the same devices back and forth.
func TestClaimDevicesAcrossStopStart(t *testing.T) {
	ns := "e2e-claim-devices"
	controllerNamespace(t, ns)
	kc := tenant(tenantA)
	mustKubectl(t, kc, `apiVersion: gpu.kiln.dev/v1alpha1
kind: Claim
metadata: {name: reserved, namespace: `+ns+`}
spec: {type: h100, accelerators: 2, nodeName: gpu-h100-0}
`, "create", "-f", "-")
	t.Cleanup(func() {
		kubectl(kc, "", "delete", "instance", "on-claim", "-n", ns, "--wait=false")
		kubectl(kc, "", "delete", "claim", "reserved", "-n", ns, "--wait=false")
	})
	kiln := kilnAdmin(t)
	boundOn := func(what string) []string {
		t.Helper()
		c := waitFor(t, "claim reserved: "+what, 60*time.Second,
			func(ctx context.Context) (*gpuv1.Claim, error) {
				return kiln.GpuV1alpha1().Claims(ns).Get(ctx, "reserved", metav1.GetOptions{})
			},
			func(c *gpuv1.Claim) bool {
				return c.Status.Phase == gpuv1.ClaimBound && len(c.Status.Devices) == 2 &&
					strings.HasPrefix(c.Status.Devices[0], "GPU-") && strings.HasPrefix(c.Status.Devices[1], "GPU-")
			},
			func(c *gpuv1.Claim) any { return c.Status })
		return c.Status.Devices
	}
	held := boundOn("Bound on two devices of gpu-h100-0")

	manifest := strings.Replace(instance("on-claim", ns, "h100", "busybox:1"), "  resources:\n    accelerators: 1\n",
		"  claimName: reserved\n  resources: {accelerators: 2}\n", 1)
	mustKubectl(t, kc, manifest, "create", "-f", "-")
	for cycle := range 10 {
		inst := waitInstance(t, ns, "on-claim", 60*time.Second, fmt.Sprintf("cycle %d: Ready on the Claim's devices", cycle), func(i *gpuv1.Instance) bool {
			c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionClaimDevices)
			return i.Status.Phase == gpuv1.InstanceReady && len(i.Status.Allocations) == 2 && c != nil
		})
		var got []string
		for _, a := range inst.Status.Allocations {
			got = append(got, a.Device)
		}
		if !sameDevices(got, held) {
			t.Fatalf("cycle %d: the Instance got %v, the Claim holds %v", cycle, got, held)
		}
		if c := meta.FindStatusCondition(inst.Status.Conditions, gpuv1.InstanceConditionClaimDevices); c.Status != metav1.ConditionTrue {
			t.Fatalf("cycle %d: ClaimDevices %+v", cycle, c)
		}
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/on-claim/stop", "-f", "-")
		waitInstance(t, ns, "on-claim", 60*time.Second, "Stopped", phaseIs(gpuv1.InstanceStopped))
		if again := boundOn(fmt.Sprintf("cycle %d: Bound again", cycle)); !sameDevices(again, held) {
			t.Fatalf("cycle %d: the holder came back on %v, the Claim held %v", cycle, again, held)
		}
		mustKubectl(t, kc, "{}", "create", "--raw", "/apis/gpu.kiln.dev/v1alpha1/namespaces/"+ns+"/instances/on-claim/start", "-f", "-")
	}
}

func sameDevices(a, b []string) bool {
	a, b = slices.Clone(a), slices.Clone(b)
	slices.Sort(a)
	slices.Sort(b)
	return slices.Equal(a, b)
}
