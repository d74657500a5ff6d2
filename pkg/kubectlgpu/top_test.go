package kubectlgpu

import (
	"testing"

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
	for _, tc := range []struct {
		name string
		kiln []runtime.Object
		args []string
		want string
	}{
		{name: "this namespace", kiln: objs(whole, slice, starting, instance("parked", stopped), mig),
			want: "INSTANCE  PHASE    NODE      DEVICE     INDEX  PCI BUS ID    MODE       SHARE                    ISOLATION\n" +
				"fresh     Pending  -         <none>     -      -             -          -                        -\n" +
				"trainer   Ready    gpu-0     GPU-a      1      0000:18:00.0  Exclusive  whole card               Exclusive\n" +
				"trainer   Ready    gpu-0     GPU-b      3      0000:9a:00.0  Exclusive  whole card               -\n" +
				"vllm      Ready    gpu-l4-0  GPU-l4::1  0      -             Slice      25% memory, 25% compute  MPS\n"},
		{name: "every namespace", kiln: objs(slice, mig), args: []string{"-A"},
			want: "NAMESPACE  INSTANCE  PHASE  NODE      DEVICE     INDEX  PCI BUS ID  MODE       SHARE                    ISOLATION\n" +
				"tenant-a   vllm      Ready  gpu-l4-0  GPU-l4::1  0      -           Slice      25% memory, 25% compute  MPS\n" +
				"tenant-b   small     Ready  gpu-0     MIG-1      2      -           Partition  3g.40gb                  MIG\n"},
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
		})
	}
}
