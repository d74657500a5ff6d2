package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

func addDefaultingFuncs(scheme *runtime.Scheme) error {
	return RegisterDefaults(scheme)
}

// exclusiveResourceNames are the device plugin resource names of the
// vendors' own plugins, used when a type does not name one.
var exclusiveResourceNames = map[string]string{
	"nvidia": "nvidia.com/gpu",
	"amd":    "amd.com/gpu",
	"intel":  "gpu.intel.com/i915",
}

// SetDefaults_Accelerator fills the resource names a vendor's device plugin
// uses, and offers whole cards when no sharing mode is named.
func SetDefaults_Accelerator(obj *Accelerator) {
	if obj.MaxPerInstance == 0 {
		obj.MaxPerInstance = 1
	}
	if obj.Exclusive == nil && obj.Sliced == nil && len(obj.Partitions) == 0 {
		obj.Exclusive = &ExclusiveSharing{}
	}
	if obj.Exclusive != nil && obj.Exclusive.ResourceName == "" {
		obj.Exclusive.ResourceName = exclusiveResourceNames[obj.Vendor]
	}
	if obj.Sliced != nil && obj.Sliced.Isolation == "" {
		obj.Sliced.Isolation = SliceIsolationHAMi
	}
	if obj.Sliced != nil && obj.Sliced.Isolation == SliceIsolationMPS && obj.Sliced.ResourceName == "" {
		// NVIDIA's name for a card's shared replicas; under nvidia.com/,
		// so the Pod policy keeps tenants' own Pods off it.
		obj.Sliced.ResourceName = "nvidia.com/gpu.shared"
	}
	if obj.Sliced != nil && obj.Sliced.Isolation == SliceIsolationHAMi && obj.Vendor == "nvidia" {
		// HAMi's resource names, the common sharing plugin for NVIDIA cards.
		if obj.Sliced.ResourceName == "" {
			obj.Sliced.ResourceName = "nvidia.com/gpu"
		}
		if obj.Sliced.MemoryPercentResourceName == "" {
			obj.Sliced.MemoryPercentResourceName = "nvidia.com/gpumem-percentage"
		}
		if obj.Sliced.CoresResourceName == "" {
			obj.Sliced.CoresResourceName = "nvidia.com/gpucores"
		}
	}
	if obj.Vendor == "nvidia" {
		for i := range obj.Partitions {
			if obj.Partitions[i].ResourceName == "" {
				obj.Partitions[i].ResourceName = "nvidia.com/mig-" + obj.Partitions[i].Name
			}
		}
	}
}

// DefaultWorkspaceMountPath is where the workspace is mounted when
// spec.workspace.mountPath is empty.
const DefaultWorkspaceMountPath = "/workspace"

// SetDefaults_InstanceSpec defaults the pull policy the way a Pod does for a
// tagged image, and gives every Instance a workspace (an emptyDir unless
// it names a size or claim).
func SetDefaults_InstanceSpec(obj *InstanceSpec) {
	if obj.ImagePullPolicy == "" {
		obj.ImagePullPolicy = corev1.PullIfNotPresent
	}
	if obj.Workspace == nil {
		obj.Workspace = &Workspace{}
	}
}

// SetDefaults_Workspace mounts the workspace at /workspace unless told
// otherwise.
func SetDefaults_Workspace(obj *Workspace) {
	if obj.MountPath == "" {
		obj.MountPath = DefaultWorkspaceMountPath
	}
}

// SetDefaults_SliceRequest gives a slice the same share of compute as of memory.
func SetDefaults_SliceRequest(obj *SliceRequest) {
	if obj.CoresPercent == 0 {
		obj.CoresPercent = obj.MemoryPercent
	}
}

// SetDefaults_InstancePort defaults the protocol to TCP.
func SetDefaults_InstancePort(obj *InstancePort) {
	if obj.Protocol == "" {
		obj.Protocol = corev1.ProtocolTCP
	}
}
