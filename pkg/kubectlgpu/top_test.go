package kubectlgpu

import (
	"slices"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

func TestTop(t *testing.T) {
	whole := instance("trainer", func(i *v1alpha1.Instance) {
		i.Status.Allocations = []v1alpha1.DeviceAllocation{
			{Device: "GPU-b", Index: 3, PCIBusID: "0000:9a:00.0", Mode: v1alpha1.AllocationExclusive},
			{Device: "GPU-a", Index: 1, PCIBusID: "0000:18:00.0", Mode: v1alpha1.AllocationExclusive, Isolation: v1alpha1.IsolationExclusive},
		}
	})
	slice := instance("vllm", func(i *v1alpha1.Instance) {
		i.Status.NodeName = "gpu-l4-0"
		i.Status.Allocations = []v1alpha1.DeviceAllocation{{Device: "GPU-l4::1", Index: 0, Mode: v1alpha1.AllocationSlice, MemoryPercent: 25, CoresPercent: 25, Isolation: v1alpha1.IsolationMPS}}
	})
	mig := instance("small", func(i *v1alpha1.Instance) {
		i.Namespace = "tenant-b"
		i.Status.Allocations = []v1alpha1.DeviceAllocation{{Device: "MIG-1", Index: 2, Mode: v1alpha1.AllocationPartition, Profile: "3g.40gb", Isolation: v1alpha1.IsolationMIG}}
	})
	starting := instance("fresh", pending("waiting for the scheduler"))
	// gpu-0's agent samples GPU-a (busy), GPU-b (idle since it began) and
	// not MIG-1.
	util := func(u int32) *int32 { return &u }
	gib := resource.MustParse("20Gi")
	zero := resource.MustParse("0")
	active := metav1.NewTime(time.Now().Add(-5 * time.Minute))
	gpu0 := &v1alpha1.NodeDevices{ObjectMeta: metav1.ObjectMeta{Name: "gpu-0"}, Status: v1alpha1.NodeDevicesStatus{Devices: []v1alpha1.NodeDevice{
		{UUID: "GPU-a", Utilization: util(87), MemoryUsed: &gib, LastActiveTime: &active},
		{UUID: "GPU-b", Utilization: util(0), MemoryUsed: &zero},
		{UUID: "MIG-1"},
	}}}
	for _, tc := range []struct {
		name string
		kiln []runtime.Object
		args []string
		want string
	}{
		{name: "this namespace", kiln: objs(whole, slice, starting, instance("parked", stopped), mig),
			want: "INSTANCE  PHASE    NODE      DEVICE     INDEX  PCI BUS ID    MODE       SHARE                    ISOLATION  UTIL  MEMORY USED  IDLE FOR\n" +
				"fresh     Pending  -         <none>     -      -             -          -                        -          -     -            -\n" +
				"trainer   Ready    gpu-0     GPU-a      1      0000:18:00.0  Exclusive  whole card               Exclusive  -     -            -\n" +
				"trainer   Ready    gpu-0     GPU-b      3      0000:9a:00.0  Exclusive  whole card               -          -     -            -\n" +
				"vllm      Ready    gpu-l4-0  GPU-l4::1  0      -             Slice      25% memory, 25% compute  MPS        -     -            -\n"},
		{name: "usage from NodeDevices", kiln: objs(whole, mig, gpu0), args: []string{"-A"},
			want: "NAMESPACE  INSTANCE  PHASE  NODE   DEVICE  INDEX  PCI BUS ID    MODE       SHARE       ISOLATION  UTIL  MEMORY USED  IDLE FOR\n" +
				"tenant-a   trainer   Ready  gpu-0  GPU-a   1      0000:18:00.0  Exclusive  whole card  Exclusive  87%   20Gi         5m\n" +
				"tenant-a   trainer   Ready  gpu-0  GPU-b   3      0000:9a:00.0  Exclusive  whole card  -          0%    0            never\n" +
				"tenant-b   small     Ready  gpu-0  MIG-1   2      -             Partition  3g.40gb     MIG        -     -            -\n"},
		{name: "usage in this namespace, by node", kiln: objs(whole, gpu0),
			want: "INSTANCE  PHASE  NODE   DEVICE  INDEX  PCI BUS ID    MODE       SHARE       ISOLATION  UTIL  MEMORY USED  IDLE FOR\n" +
				"trainer   Ready  gpu-0  GPU-a   1      0000:18:00.0  Exclusive  whole card  Exclusive  87%   20Gi         5m\n" +
				"trainer   Ready  gpu-0  GPU-b   3      0000:9a:00.0  Exclusive  whole card  -          0%    0            never\n"},
		{name: "every namespace", kiln: objs(slice, mig), args: []string{"-A"},
			want: "NAMESPACE  INSTANCE  PHASE  NODE      DEVICE     INDEX  PCI BUS ID  MODE       SHARE                    ISOLATION  UTIL  MEMORY USED  IDLE FOR\n" +
				"tenant-a   vllm      Ready  gpu-l4-0  GPU-l4::1  0      -           Slice      25% memory, 25% compute  MPS        -     -            -\n" +
				"tenant-b   small     Ready  gpu-0     MIG-1      2      -           Partition  3g.40gb                  MIG        -     -            -\n"},
		{name: "nothing running", kiln: objs(instance("parked", stopped)), want: "No running Instances in namespace tenant-a.\n"},
		{name: "yaml", kiln: objs(mig), args: []string{"-A", "-o", "yaml"},
			want: "- device: MIG-1\n  index: 2\n  instance: small\n  isolation: MIG\n  mode: Partition\n  namespace: tenant-b\n  node: gpu-0\n  phase: Ready\n  share: 3g.40gb\n"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, tc.kiln)
			out, _, err := f.run(t, append([]string{"top", "-n", ns}, tc.args...)...)
			if err != nil {
				t.Fatal(err)
			}
			if out != tc.want {
				t.Errorf("output:\n%s\nwant:\n%s", out, tc.want)
			}
			// Every namespace's rows read NodeDevices in one LIST, one
			// namespace's by GET per node.
			reads := map[string]int{}
			for _, a := range f.kiln.Actions() {
				if a.GetResource().Resource == "nodedevices" {
					reads[a.GetVerb()]++
				}
			}
			if all := slices.Contains(tc.args, "-A"); (all && reads["get"] > 0) || (!all && reads["list"] > 0) || reads["list"] > 1 {
				t.Errorf("NodeDevices read by %v", reads)
			}
		})
	}
}
