package validation

import (
	"slices"

	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// MaxNodeDevices bounds one node's inventory: eight cards cut into seven
// MIG devices each is 56.
const MaxNodeDevices = 256

const (
	maxDeviceUUIDLength   = 63 // the device plugin API's limit on a device ID
	maxDeviceReasonLength = 1024
	maxDeviceFieldLength  = 256
	maxDeviceNVLinkPeers  = 64
)

var (
	supportedDeviceHealth = []gpu.DeviceHealth{gpu.DeviceHealthy, gpu.DeviceUnhealthy}
	supportedHolderKinds  = []gpu.DeviceHolderKind{gpu.DeviceHolderInstance, gpu.DeviceHolderClaim, gpu.DeviceHolderPod}
)

// ValidateNodeDevices validates a new NodeDevices, named after its node.
func ValidateNodeDevices(obj *gpu.NodeDevices) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, false, apivalidation.NameIsDNSSubdomain, field.NewPath("metadata"))
	return append(allErrs, validateNodeDevicesStatus(&obj.Status, field.NewPath("status"))...)
}

// ValidateNodeDevicesUpdate validates an update.
func ValidateNodeDevicesUpdate(obj, old *gpu.NodeDevices) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateNodeDevicesStatus(&obj.Status, field.NewPath("status"))...)
}

func validateNodeDevicesStatus(st *gpu.NodeDevicesStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	devPath := fldPath.Child("devices")
	if len(st.Devices) > MaxNodeDevices {
		return field.ErrorList{field.TooMany(devPath, len(st.Devices), MaxNodeDevices)}
	}
	seen := map[string]bool{}
	for i, d := range st.Devices {
		p := devPath.Index(i)
		switch {
		case d.UUID == "":
			allErrs = append(allErrs, field.Required(p.Child("uuid"), "the ID the kubelet allocates the device by"))
		case len(d.UUID) > maxDeviceUUIDLength:
			allErrs = append(allErrs, field.TooLong(p.Child("uuid"), "", maxDeviceUUIDLength))
		case seen[d.UUID]:
			allErrs = append(allErrs, field.Duplicate(p.Child("uuid"), d.UUID))
		}
		seen[d.UUID] = true
		for _, msg := range utilvalidation.IsQualifiedName(d.Resource) {
			allErrs = append(allErrs, field.Invalid(p.Child("resource"), d.Resource, msg))
		}
		for _, f := range []struct {
			name, value string
		}{{"model", d.Model}, {"pciBusID", d.PCIBusID}, {"parent", d.Parent}, {"profile", d.Profile}} {
			if len(f.value) > maxDeviceFieldLength {
				allErrs = append(allErrs, field.TooLong(p.Child(f.name), "", maxDeviceFieldLength))
			}
		}
		if len(d.NVLinkPeers) > maxDeviceNVLinkPeers {
			allErrs = append(allErrs, field.TooMany(p.Child("nvLinkPeers"), len(d.NVLinkPeers), maxDeviceNVLinkPeers))
		}
		allErrs = append(allErrs, validateNonnegativeQuantity(d.Memory, p.Child("memory"))...)
		if u := d.Utilization; u != nil && (*u < 0 || *u > 100) {
			allErrs = append(allErrs, field.Invalid(p.Child("utilization"), *u, "must be a percentage, 0 to 100"))
		}
		if m := d.MemoryUsed; m != nil {
			allErrs = append(allErrs, validateNonnegativeQuantity(*m, p.Child("memoryUsed"))...)
		}
		if !slices.Contains(supportedDeviceHealth, d.Health) {
			allErrs = append(allErrs, field.NotSupported(p.Child("health"), d.Health, supportedDeviceHealth))
		}
		if len(d.Reason) > maxDeviceReasonLength {
			allErrs = append(allErrs, field.TooLong(p.Child("reason"), "", maxDeviceReasonLength))
		}
		if h := d.Holder; h != nil {
			if !slices.Contains(supportedHolderKinds, h.Kind) {
				allErrs = append(allErrs, field.NotSupported(p.Child("holder", "kind"), h.Kind, supportedHolderKinds))
			}
			if h.PodUID == "" {
				allErrs = append(allErrs, field.Required(p.Child("holder", "podUID"), "the Pod the device is allocated to"))
			}
		}
	}
	return allErrs
}
