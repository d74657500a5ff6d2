package validation

import (
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

func TestValidateNodeDevices(t *testing.T) {
	valid := func() *gpu.NodeDevices {
		return &gpu.NodeDevices{
			ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-0"},
			Status: gpu.NodeDevicesStatus{Devices: []gpu.NodeDevice{
				{UUID: "GPU-0", Resource: "nvidia.com/gpu", Memory: resource.MustParse("80Gi"), Health: gpu.DeviceHealthy,
					Holder: &gpu.DeviceHolder{Kind: gpu.DeviceHolderInstance, PodUID: "uid-1"}},
				{UUID: "MIG-0", Resource: "nvidia.com/mig-1g.10gb", Parent: "GPU-1", Health: gpu.DeviceUnhealthy, Reason: "XID 79"},
			}},
		}
	}
	for _, tc := range []struct {
		name   string
		mutate func(*gpu.NodeDevices)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.NodeDevices) {}},
		{name: "no uuid", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].UUID = "" },
			want: field.ErrorList{field.Required(field.NewPath("status", "devices").Index(0).Child("uuid"), "")}},
		{name: "uuid too long", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].UUID = strings.Repeat("x", 64) },
			want: field.ErrorList{field.TooLong(field.NewPath("status", "devices").Index(0).Child("uuid"), "", 63)}},
		{name: "uuid twice", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[1].UUID = "GPU-0" },
			want: field.ErrorList{field.Duplicate(field.NewPath("status", "devices").Index(1).Child("uuid"), "GPU-0")}},
		{name: "bad resource", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].Resource = "nvidia.com/gpu/x" },
			want: field.ErrorList{field.Invalid(field.NewPath("status", "devices").Index(0).Child("resource"), "", "")}},
		{name: "unknown health", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].Health = "Sick" },
			want: field.ErrorList{field.NotSupported(field.NewPath("status", "devices").Index(0).Child("health"), "Sick", []string{})}},
		{name: "holder without a Pod", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].Holder.PodUID = "" },
			want: field.ErrorList{field.Required(field.NewPath("status", "devices").Index(0).Child("holder", "podUID"), "")}},
		{name: "holder of an unknown kind", mutate: func(o *gpu.NodeDevices) { o.Status.Devices[0].Holder.Kind = "Deployment" },
			want: field.ErrorList{field.NotSupported(field.NewPath("status", "devices").Index(0).Child("holder", "kind"), "Deployment", []string{})}},
		{name: "usage", mutate: func(o *gpu.NodeDevices) {
			util, mem, at := int32(100), resource.MustParse("79Gi"), metav1.Now()
			o.Status.Devices[0].Utilization, o.Status.Devices[0].MemoryUsed, o.Status.Devices[0].LastActiveTime = &util, &mem, &at
		}},
		{name: "utilization over 100", mutate: func(o *gpu.NodeDevices) { u := int32(101); o.Status.Devices[0].Utilization = &u },
			want: field.ErrorList{field.Invalid(field.NewPath("status", "devices").Index(0).Child("utilization"), "", "")}},
		{name: "negative utilization", mutate: func(o *gpu.NodeDevices) { u := int32(-1); o.Status.Devices[0].Utilization = &u },
			want: field.ErrorList{field.Invalid(field.NewPath("status", "devices").Index(0).Child("utilization"), "", "")}},
		{name: "negative memory used", mutate: func(o *gpu.NodeDevices) { m := resource.MustParse("-1Gi"); o.Status.Devices[0].MemoryUsed = &m },
			want: field.ErrorList{field.Invalid(field.NewPath("status", "devices").Index(0).Child("memoryUsed"), "", "")}},
		{name: "too many devices", mutate: func(o *gpu.NodeDevices) {
			o.Status.Devices = make([]gpu.NodeDevice, MaxNodeDevices+1)
		}, want: field.ErrorList{field.TooMany(field.NewPath("status", "devices"), MaxNodeDevices+1, MaxNodeDevices)}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := valid()
			tc.mutate(o)
			field.ErrorMatcher{}.ByType().ByField().Test(t, tc.want, ValidateNodeDevices(o))
		})
	}
}
