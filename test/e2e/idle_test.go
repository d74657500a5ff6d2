package e2e

import (
	"context"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/localcluster"
)

// idleLimit is the tenants' spec.idleStopAfter here: long enough for a
// busy device's first sample (the agents sample every 10 s) to reach the
// controller before the limit, short for a test.
const idleLimit = 40 * time.Second

// idleStopped is an Instance kiln-controller stopped for idleness and
// reports Stopped.
func idleStopped(i *gpuv1.Instance) bool {
	c := meta.FindStatusCondition(i.Status.Conditions, gpuv1.InstanceConditionIdleStopped)
	return i.Spec.Stopped && c != nil && c.Status == metav1.ConditionTrue && phaseIs(gpuv1.InstanceStopped)(i)
}

// withIdleLimit adds spec.idleStopAfter to an Instance manifest.
func withIdleLimit(manifest string) string {
	return strings.Replace(manifest, "spec:\n", "spec:\n  idleStopAfter: "+idleLimit.String()+"\n", 1)
}

// checkIdleStop checks what an idle stop of Instance name leaves: the
// Warning Event, kubectl gpu why, and its card free again on node.
func checkIdleStop(t *testing.T, ns, name, node, device string) {
	t.Helper()
	if events, ok := recordedEvents(t, ns, "involvedObject.name="+name+",reason=IdleLimit,type=Warning", "{.items[*].message}",
		"idle since", "past its idle limit of "+idleLimit.String()); !ok {
		t.Errorf("IdleLimit events of %s: %q, want one saying since when and the limit", name, events)
	}
	if why := mustKubectlGPU(t, tenant(tenantA), "why", name, "-n", ns); !strings.Contains(why, "kiln-controller stopped it for idleness") {
		t.Errorf("kubectl gpu why %s:\n%s\nwant it to say it was stopped for idleness", name, why)
	}
	waitFor(t, "device "+device+" of "+node+" free again", time.Minute,
		func(ctx context.Context) (*gpuv1.NodeDevices, error) {
			return tenantKiln(t, tenantA).GpuV1alpha1().NodeDevices().Get(ctx, node, metav1.GetOptions{})
		},
		func(nd *gpuv1.NodeDevices) bool {
			for _, d := range nd.Status.Devices {
				if d.UUID == device {
					return d.Holder == nil
				}
			}
			return false
		},
		func(nd *gpuv1.NodeDevices) any { return nd.Status.Devices })
}

// testIdleStop (issue Q): of two Instances with an idle limit on a
// simulated node, the one whose card reports no activity is stopped after
// the limit, says why, and frees its card; the one whose card is busy
// runs on past it.
func testIdleStop(t *testing.T) {
	const node = "gpu-h100-0"
	ns := "e2e-idle"
	controllerNamespace(t, ns)
	pinned := func(name string) string {
		return withIdleLimit(strings.Replace(instance(name, ns, "h100", "busybox:1"), "  resources:\n", "  nodeName: "+node+"\n  resources:\n", 1))
	}
	mustKubectl(t, tenant(tenantA), pinned("busy"), "create", "-f", "-")
	busy := waitInstance(t, ns, "busy", 90*time.Second, "Ready with its card", func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && len(i.Status.Allocations) == 1
	})
	busyCard := busy.Status.Allocations[0].Device
	if err := cluster.SetDeviceUsage(node, busyCard, 60); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cluster.SetDeviceUsage(node, busyCard, 0) })
	mustKubectl(t, tenant(tenantA), pinned("idle"), "create", "-f", "-")
	idle := waitInstance(t, ns, "idle", 90*time.Second, "Ready with its card", func(i *gpuv1.Instance) bool {
		return phaseIs(gpuv1.InstanceReady)(i) && len(i.Status.Allocations) == 1
	})
	stopped := waitInstance(t, ns, "idle", idleLimit+90*time.Second, "stopped for idleness", idleStopped)
	if c := meta.FindStatusCondition(stopped.Status.Conditions, gpuv1.InstanceConditionIdleStopped); c.LastTransitionTime.Sub(idle.Status.StartTime.Time) < idleLimit {
		t.Errorf("stopped at %s, %s after its start: before its idle limit of %s", c.LastTransitionTime, c.LastTransitionTime.Sub(idle.Status.StartTime.Time), idleLimit)
	}
	checkIdleStop(t, ns, "idle", node, idle.Status.Allocations[0].Device)

	// The busy one has run longer than the limit by now, and runs on.
	busy = waitInstance(t, ns, "busy", 10*time.Second, "listed", func(*gpuv1.Instance) bool { return true })
	if ran := time.Since(busy.Status.StartTime.Time); busy.Spec.Stopped || busy.Status.Phase != gpuv1.InstanceReady || ran < idleLimit {
		t.Errorf("busy: stopped %v, phase %s after %s; want it Ready past its idle limit of %s", busy.Spec.Stopped, busy.Status.Phase, ran, idleLimit)
	}
	if a := busy.Status.Activity; a == nil || a.Utilization == nil || *a.Utilization <= 5 {
		t.Errorf("busy: status.activity %+v, want its card's utilization", a)
	}
}

// TestRealNodeIdleStop (issue Q): the same idle stop on real-0, whose
// node agent serves the kubelet as on any node: the container goes and
// its card is free again.
func TestRealNodeIdleStop(t *testing.T) {
	needRealNode(t)
	ns := "e2e-realidle"
	controllerNamespace(t, ns)
	typ := realCardType(t, ns)
	waitRealCardsFree(t)
	mustKubectl(t, tenant(tenantA), withIdleLimit(listingInstance("nap", ns, typ, "  resources: {accelerators: 1}\n")), "apply", "-f", "-")
	inst := waitInstance(t, ns, "nap", 2*time.Minute, "Ready on real-0 with a card", readyOnRealNode(1))
	waitInstance(t, ns, "nap", idleLimit+90*time.Second, "stopped for idleness", idleStopped)
	checkIdleStop(t, ns, "nap", localcluster.RealNodeName, inst.Status.Allocations[0].Device)
	waitRealCardsFree(t)
}
