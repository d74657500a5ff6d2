package gpu

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceType is a catalogue entry published by a cluster admin: which
// accelerator an Instance of this type gets, how the card may be shared, how
// much host CPU and memory come with it, and which nodes form its pool.
type InstanceType struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is what the admin publishes.
	// +optional
	Spec InstanceTypeSpec `json:"spec,omitempty"`
	// status is the pool's live capacity, computed by the controller.
	// +optional
	Status InstanceTypeStatus `json:"status,omitempty"`
}

// InstanceTypeSpec describes an accelerator offering.
type InstanceTypeSpec struct {
	// displayName is a human-readable name shown in catalogues, e.g. "NVIDIA H100 80GB".
	// +optional
	DisplayName string `json:"displayName,omitempty"`
	// accelerator describes the card behind this type. Absent for a CPU-only type.
	// +optional
	Accelerator *Accelerator `json:"accelerator,omitempty"`
	// resourcesPerCard is the host CPU, memory and ephemeral storage that come
	// with one whole card. A slice or partition gets the same fraction of
	// these as its share of the card's memory. For a CPU-only type it is what
	// one Instance gets by default.
	// +optional
	ResourcesPerCard HostResources `json:"resourcesPerCard,omitempty"`
	// nodeSelector restricts the pool to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty"`
	// tolerations are added to every Pod of this type, so it can land on
	// tainted GPU nodes.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty"`
	// runtimeClassName is the RuntimeClass of every Pod of this type (e.g. "nvidia").
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty"`
	// namespaceSelector selects the namespaces whose Instances may use this
	// type. Absent: every namespace may.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty"`
	// hold pauses the type: "" keeps it open; "Hold" refuses new starts but
	// leaves running Instances alone; "Drain" also stops running Instances.
	// +optional
	Hold HoldMode `json:"hold,omitempty"`
	// idle stops this type's Instances whose accelerators sit idle. Absent:
	// an Instance is stopped for idleness only if it sets
	// spec.idleStopAfter itself.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty"`
}

// IdlePolicy is when kiln-controller stops an Instance whose devices do
// nothing, as measured on the devices by the node agent.
type IdlePolicy struct {
	// stopAfter is how long every device of an Instance may stay idle
	// before the Instance is stopped. An Instance may set a shorter
	// spec.idleStopAfter, never a longer one.
	StopAfter metav1.Duration `json:"stopAfter"`
	// minRunTime is how long an Instance runs, from its Pod's start, before
	// it may be stopped for idleness at all.
	// +optional
	MinRunTime *metav1.Duration `json:"minRunTime,omitempty"`
	// activeThreshold is the utilization, in percent, above which a
	// device counts as active. Absent: the node agent's own judgement
	// (its --active-threshold) decides.
	// +optional
	ActiveThreshold *int32 `json:"activeThreshold,omitempty"`
}

// HoldMode says whether an InstanceType accepts new starts.
// +enum
type HoldMode string

const (
	// HoldNone keeps the type open.
	HoldNone HoldMode = ""
	// HoldNew refuses new starts; running Instances stay.
	HoldNew HoldMode = "Hold"
	// HoldDrain refuses new starts and stops running Instances.
	HoldDrain HoldMode = "Drain"
)

// Accelerator describes one kind of card and the ways it may be shared.
type Accelerator struct {
	// vendor of the card: "nvidia", "amd", "intel", ...
	Vendor string `json:"vendor"`
	// model is matched against the node label that names the card, such as
	// nvidia.com/gpu.product (e.g. "NVIDIA-H100-80GB-HBM3").
	Model string `json:"model"`
	// memory of one card, e.g. "80Gi".
	Memory resource.Quantity `json:"memory"`
	// maxPerInstance is the most whole cards one Instance may take. Defaults to 1.
	// +optional
	MaxPerInstance int32 `json:"maxPerInstance,omitempty"`
	// exclusive offers whole cards. Defaulted when neither sliced nor
	// partitions is set.
	// +optional
	Exclusive *ExclusiveSharing `json:"exclusive,omitempty"`
	// sliced offers percentage slices of one card's memory and compute,
	// enforced by a sharing device plugin (HAMi's convention).
	// +optional
	Sliced *SlicedSharing `json:"sliced,omitempty"`
	// partitions offers hardware partitions of a card (NVIDIA MIG profiles).
	// +optional
	// +listType=map
	// +listMapKey=name
	Partitions []PartitionProfile `json:"partitions,omitempty"`
}

// ExclusiveSharing offers whole cards through one extended resource.
type ExclusiveSharing struct {
	// resourceName is the extended resource a Pod requests for whole cards.
	// Defaults from the vendor: "nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915".
	// +optional
	ResourceName string `json:"resourceName,omitempty"`
}

// SliceIsolation is what enforces a slice's share of its card.
// +enum
type SliceIsolation string

const (
	// SliceIsolationHAMi is HAMi's device plugin and CUDA interposer.
	SliceIsolationHAMi SliceIsolation = "HAMi"
	// SliceIsolationMPS is Kiln's node agent serving CUDA MPS shares.
	SliceIsolationMPS SliceIsolation = "MPS"
)

// SlicedSharing names the resources a sharing device plugin understands.
type SlicedSharing struct {
	// resourceName counts the cards a slice sits on. Defaults to "nvidia.com/gpu".
	// +optional
	ResourceName string `json:"resourceName,omitempty"`
	// memoryPercentResourceName is the resource that carries the slice's share
	// of card memory in percent. Defaults to "nvidia.com/gpumem-percentage".
	// +optional
	MemoryPercentResourceName string `json:"memoryPercentResourceName,omitempty"`
	// coresResourceName is the resource that carries the slice's share of the
	// card's compute in percent. Defaults to "nvidia.com/gpucores".
	// +optional
	CoresResourceName string `json:"coresResourceName,omitempty"`
	// isolation is what keeps a slice to its share of the card. HAMi (the
	// default) is HAMi's device plugin and CUDA interposer, which read the
	// memory and cores resources. MPS is Kiln's node agent run with
	// --mps-shares: it serves each card as sharesPerCard shares of
	// resourceName, each with a CUDA MPS server whose defaults cap a client
	// at one share of the card's threads and memory, so every slice of the
	// type is exactly one share (100/sharesPerCard percent).
	// +optional
	Isolation SliceIsolation `json:"isolation,omitempty"`
	// sharesPerCard is the number of MPS shares the node agent serves each
	// card as (isolation MPS only): 2, 4, 5, 10, 20 or 25, so that a share
	// is a whole percentage. It must equal the agent's --mps-shares.
	// +optional
	SharesPerCard int32 `json:"sharesPerCard,omitempty"`
}

// PartitionProfile is one hardware partition profile of a card.
type PartitionProfile struct {
	// name of the profile, e.g. "1g.10gb".
	Name string `json:"name"`
	// memory of one partition, e.g. "10Gi".
	Memory resource.Quantity `json:"memory"`
	// resourceName is the extended resource of this profile. Defaults to
	// "nvidia.com/mig-<name>".
	// +optional
	ResourceName string `json:"resourceName,omitempty"`
}

// HostResources is host CPU, memory and ephemeral storage.
type HostResources struct {
	// cpu, e.g. "16" or "1500m".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// memory, e.g. "128Gi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// ephemeralStorage, e.g. "200Gi".
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty"`
}

// InstanceTypePhase is the state of an InstanceType.
// +enum
type InstanceTypePhase string

const (
	// InstanceTypeActive accepts new Instances.
	InstanceTypeActive InstanceTypePhase = "Active"
	// InstanceTypeHeld refuses new starts.
	InstanceTypeHeld InstanceTypePhase = "Held"
	// InstanceTypeDraining is stopping its Instances.
	InstanceTypeDraining InstanceTypePhase = "Draining"
)

// InstanceTypeStatus is the pool's state as observed by the controller.
type InstanceTypeStatus struct {
	// phase is Active, Held or Draining.
	// +optional
	Phase InstanceTypePhase `json:"phase,omitempty"`
	// capacity of the pool as of the last reconcile.
	// +optional
	Capacity InstanceTypeCapacity `json:"capacity,omitempty"`
	// conditions of the type.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
}

// InstanceTypeCapacity counts the nodes and cards of a pool.
type InstanceTypeCapacity struct {
	// nodes in the pool that are Ready.
	// +optional
	Nodes int32 `json:"nodes,omitempty"`
	// cards on those nodes: the slots of the type's resource, so a sliced
	// type's MPS shares (sharesPerCard of each card) or HAMi card slots.
	// +optional
	Cards int32 `json:"cards,omitempty"`
	// freeCards not taken by any Pod or Claim.
	// +optional
	FreeCards int32 `json:"freeCards,omitempty"`
	// partitions: total and free per partition profile.
	// +optional
	// +listType=map
	// +listMapKey=name
	Partitions []PartitionCapacity `json:"partitions,omitempty"`
}

// PartitionCapacity counts the partitions of one profile in a pool.
type PartitionCapacity struct {
	// name of the profile.
	Name string `json:"name"`
	// total partitions of this profile in the pool.
	// +optional
	Total int32 `json:"total,omitempty"`
	// free partitions of this profile.
	// +optional
	Free int32 `json:"free,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceTypeList is a list of InstanceTypes.
type InstanceTypeList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of InstanceTypes.
	Items []InstanceType `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Instance is one GPU machine a tenant runs: one Pod on a node of its type,
// an optional NodePort Service for its ports, a workspace volume and
// optional SSH access.
type Instance struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the machine the tenant asks for.
	// +optional
	Spec InstanceSpec `json:"spec,omitempty"`
	// status is what the controller observes of the machine.
	// +optional
	Status InstanceStatus `json:"status,omitempty"`
}

// InstanceSpec is the desired state of an Instance.
type InstanceSpec struct {
	// type is the name of the InstanceType to run on. Cannot be changed.
	Type string `json:"type"`
	// image is the container image to run, e.g. "nvcr.io/nvidia/pytorch:24.05-py3".
	Image string `json:"image"`
	// imagePullPolicy is Always, IfNotPresent or Never. Defaults to IfNotPresent.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty"`
	// imagePullSecrets name Secrets in the Instance's namespace used to pull the image.
	// +optional
	// +listType=map
	// +listMapKey=name
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty"`
	// command overrides the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty"`
	// args are passed to the command.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty"`
	// env sets environment variables in the container. Variables that a
	// container runtime or GPU sharing layer reads to pick or limit cards
	// (NVIDIA_*, AMD_VISIBLE_DEVICES, CUDA_MPS_*, CUDA_DEVICE_MEMORY_*,
	// CUDA_DEVICE_SM_LIMIT, CUDA_OVERSUBSCRIBE, LD_PRELOAD) are refused:
	// the device plugin sets what the container needs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty"`
	// resources is the accelerator share and host resources. Set exactly one
	// of accelerators, slice or partition; cpu, memory and ephemeralStorage
	// are filled from the InstanceType when left empty.
	// +optional
	Resources InstanceResources `json:"resources,omitempty"`
	// ports exposed on a NodePort Service owned by the Instance, at most 8:
	// each holds a node port of the cluster while the Instance exists.
	// +optional
	// +listType=map
	// +listMapKey=name
	Ports []InstancePort `json:"ports,omitempty"`
	// ssh enables an SSH server in the Instance.
	// +optional
	SSH *SSHSpec `json:"ssh,omitempty"`
	// workspace is the volume mounted as the working directory. Defaults to
	// an emptyDir at /workspace.
	// +optional
	Workspace *Workspace `json:"workspace,omitempty"`
	// volumes are extra volumes mounted into the container.
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []InstanceVolume `json:"volumes,omitempty"`
	// nodeName pins the Instance to one node of its type's pool. The pin is
	// a node selector, so the scheduler still checks that the node has room.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// claimName runs the Instance on the devices held by this Claim in the
	// same namespace.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
	// stopped is the desired state: true deletes the Pod and keeps
	// everything else; false runs it. The instances/stop and instances/start
	// subresources flip it.
	// +optional
	Stopped bool `json:"stopped,omitempty"`
	// privileged runs the container privileged. Needs the "use" verb on
	// instances/privileged.
	// +optional
	Privileged bool `json:"privileged,omitempty"`
	// idleStopAfter stops the Instance once every device it holds has been
	// idle this long. At most its type's spec.idle.stopAfter, which applies
	// when this is absent.
	// +optional
	IdleStopAfter *metav1.Duration `json:"idleStopAfter,omitempty"`
}

// InstanceResources is what an Instance asks of its type.
type InstanceResources struct {
	// accelerators is the number of whole cards. 0 on a CPU-only type.
	// +optional
	Accelerators *int32 `json:"accelerators,omitempty"`
	// slice asks for a percentage slice of one card.
	// +optional
	Slice *SliceRequest `json:"slice,omitempty"`
	// partition asks for one hardware partition of this profile, e.g. "1g.10gb".
	// +optional
	Partition string `json:"partition,omitempty"`
	// cpu for the container. Defaults to the card share of the type's resourcesPerCard.cpu.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty"`
	// memory for the container. Defaults to the card share of the type's resourcesPerCard.memory.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty"`
	// ephemeralStorage for the container. Defaults to the card share of the
	// type's resourcesPerCard.ephemeralStorage.
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty"`
}

// SliceRequest is a share of one card.
type SliceRequest struct {
	// memoryPercent of the card's memory, 1 to 100.
	MemoryPercent int32 `json:"memoryPercent"`
	// coresPercent of the card's compute, 1 to 100. Defaults to memoryPercent.
	// +optional
	CoresPercent int32 `json:"coresPercent,omitempty"`
}

// InstancePort is a port of the container published on a NodePort.
type InstancePort struct {
	// name of the port, an IANA service name such as "http" or "jupyter".
	Name string `json:"name"`
	// port number in the container, 1 to 65535.
	Port int32 `json:"port"`
	// protocol is TCP, UDP or SCTP. Defaults to TCP.
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
}

// SSHSpec enables SSH access.
type SSHSpec struct {
	// authorizedKeysSecret names a Secret in the Instance's namespace whose
	// "authorized_keys" key holds the public keys allowed to log in.
	AuthorizedKeysSecret string `json:"authorizedKeysSecret"`
}

// Workspace is the Instance's working volume.
type Workspace struct {
	// mountPath of the workspace in the container. Defaults to /workspace.
	// +optional
	MountPath string `json:"mountPath,omitempty"`
	// size of an emptyDir workspace, e.g. "100Gi". Not with claimName.
	// +optional
	EmptyDirSize *resource.Quantity `json:"size,omitempty"` // Not Size, as in v1alpha1, whose protobuf Size method takes the name.
	// claimName of a PersistentVolumeClaim to use as the workspace, so it
	// survives stops and node changes. Not with size.
	// +optional
	ClaimName string `json:"claimName,omitempty"`
}

// InstanceVolume is an extra volume and where it is mounted. Set exactly
// one source.
type InstanceVolume struct {
	// name of the volume, a DNS label unique in the Instance.
	Name string `json:"name"`
	// mountPath in the container, an absolute path.
	MountPath string `json:"mountPath"`
	// readOnly mounts the volume read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty"`
	// persistentVolumeClaim in the Instance's namespace.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty"`
	// configMap in the Instance's namespace.
	// +optional
	ConfigMap *corev1.ConfigMapVolumeSource `json:"configMap,omitempty"`
	// secret in the Instance's namespace.
	// +optional
	Secret *corev1.SecretVolumeSource `json:"secret,omitempty"`
	// hostPath mounts a directory of the node. Needs the "use" verb on
	// instances/privileged.
	// +optional
	HostPath *corev1.HostPathVolumeSource `json:"hostPath,omitempty"`
}

// InstancePhase is where an Instance is in its life.
// +enum
type InstancePhase string

const (
	InstancePending  InstancePhase = "Pending"
	InstanceStarting InstancePhase = "Starting"
	InstanceReady    InstancePhase = "Ready"
	InstanceStopping InstancePhase = "Stopping"
	InstanceStopped  InstancePhase = "Stopped"
	InstanceFailed   InstancePhase = "Failed"
	InstanceDeleting InstancePhase = "Deleting"
)

// The containers of an Instance's Pod, as instances/log?container= names
// them: the one running spec.image, and the SSH sidecar of spec.ssh.
const (
	InstanceMainContainer = "main"
	InstanceSSHContainer  = "ssh"
)

// InstanceConditionReady is true when the Instance's container runs and is ready.
const InstanceConditionReady = "Ready"

// InstanceConditionDeviceHealthy is false while a device the Instance
// holds is unhealthy; absent while it holds none the node agent reports.
const InstanceConditionDeviceHealthy = "DeviceHealthy"

// InstanceConditionClaimDevices says, for an Instance on a Claim, whether
// its Pod got exactly the devices the Claim holds.
const InstanceConditionClaimDevices = "ClaimDevices"

// SizedResourcesAnnotation lists the host resources of an Instance that
// InstanceSizing filled in rather than the user ("cpu,memory"), so a later
// change of the share sizes them again.
const SizedResourcesAnnotation = "gpu.kiln.dev/sized-resources"

// InstanceStatus is the observed state of an Instance.
type InstanceStatus struct {
	// phase is Pending, Starting, Ready, Stopping, Stopped, Failed or Deleting.
	// +optional
	Phase InstancePhase `json:"phase,omitempty"`
	// message explains the phase, e.g. why the Instance is still Pending.
	// +optional
	Message string `json:"message,omitempty"`
	// conditions of the Instance; "Ready" at least.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// nodeName is the node the Instance runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// hostIPs of that node, external addresses first.
	// +optional
	// +listType=atomic
	HostIPs []string `json:"hostIPs,omitempty"`
	// podIPs of the Instance's Pod.
	// +optional
	// +listType=atomic
	PodIPs []string `json:"podIPs,omitempty"`
	// ports with the node ports they are reachable on.
	// +optional
	// +listType=map
	// +listMapKey=name
	Ports []InstancePortStatus `json:"ports,omitempty"`
	// allocations are the devices the Instance got.
	// +optional
	// +listType=atomic
	Allocations []DeviceAllocation `json:"allocations,omitempty"`
	// startTime is when the current Pod started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty"`
	// activity is what the node agent reports of the devices the Instance's
	// Pod holds.
	// +optional
	Activity *InstanceActivity `json:"activity,omitempty"`
	// usage is the ledger of the cards its Pod held, which the Budgets
	// of its namespace count in accelerator-hours.
	// +optional
	Usage *Usage `json:"usage,omitempty"`
}

// InstanceActivity sums up the use of an Instance's devices.
type InstanceActivity struct {
	// lastActiveTime is the last time any of its devices was active, or
	// its Pod's start if none has been since.
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty"`
	// utilization is the highest recent utilization of its devices, in
	// percent.
	// +optional
	Utilization *int32 `json:"utilization,omitempty"`
	// memoryUsed is the device memory in use, over all its devices.
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty"`
}

// Usage is the ledger of one Instance or Claim: the card-seconds its
// devices were held, by UTC day. kiln-controller writes it from the times
// the Pod records (bound to its node; deletion asked for or containers
// ended), never from sampling, so it stays exact across restarts.
type Usage struct {
	// current is the run in progress, if any.
	// +optional
	Current *UsageRun `json:"current,omitempty"`
	// lastPodUID is the Pod of the last run closed: a Pod still
	// terminating does not open another.
	// +optional
	LastPodUID types.UID `json:"lastPodUID,omitempty"`
	// days are the closed runs' card-seconds by UTC day and InstanceType,
	// for the last 31 days.
	// +optional
	// +listType=atomic
	Days []UsageDay `json:"days,omitempty"`
}

// UsageRun is a run in progress: a Pod holding cards.
type UsageRun struct {
	// podUID is the Pod that holds the cards.
	PodUID types.UID `json:"podUID"`
	// instanceType the cards are of.
	InstanceType string `json:"instanceType"`
	// cards is the share of cards held, as Budgets charge it: a slice or
	// partition by its share.
	Cards resource.Quantity `json:"cards"`
	// since is when the Pod was bound to its node.
	Since metav1.Time `json:"since"`
}

// UsageDay is the card-seconds held on one UTC day, on one InstanceType.
type UsageDay struct {
	// date is the UTC day, e.g. 2026-12-06.
	Date string `json:"date"`
	// instanceType the cards are of.
	InstanceType string `json:"instanceType"`
	// cardSeconds held that day.
	CardSeconds resource.Quantity `json:"cardSeconds"`
	// idleCardSeconds is the part of cardSeconds held after the devices
	// were last active in their run.
	// +optional
	IdleCardSeconds resource.Quantity `json:"idleCardSeconds,omitempty"`
}

// InstancePortStatus is a published port.
type InstancePortStatus struct {
	// name of the port.
	Name string `json:"name"`
	// port number in the container.
	Port int32 `json:"port"`
	// protocol of the port.
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty"`
	// nodePort on every node's host IPs that reaches the port.
	// +optional
	NodePort int32 `json:"nodePort,omitempty"`
}

// AllocationIsolation is what keeps an allocation to its share.
// +enum
type AllocationIsolation string

const (
	IsolationExclusive AllocationIsolation = "Exclusive"
	IsolationMIG       AllocationIsolation = "MIG"
	IsolationMPS       AllocationIsolation = "MPS"
	IsolationHAMi      AllocationIsolation = "HAMi"
)

// AllocationMode is how a device is shared with an Instance.
// +enum
type AllocationMode string

const (
	AllocationExclusive AllocationMode = "Exclusive"
	AllocationSlice     AllocationMode = "Slice"
	AllocationPartition AllocationMode = "Partition"
)

// DeviceAllocation is one device given to an Instance.
type DeviceAllocation struct {
	// device is the device's ID, e.g. a GPU UUID or a MIG device UUID.
	Device string `json:"device"`
	// index of the card on the node (nvidia-smi's); a MIG device has its
	// card's.
	// +optional
	Index int32 `json:"index,omitempty"`
	// pciBusID of the card.
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// mode is Exclusive, Slice or Partition.
	Mode AllocationMode `json:"mode"`
	// memoryPercent of the device's memory given to the Instance (Slice).
	// +optional
	MemoryPercent int32 `json:"memoryPercent,omitempty"`
	// coresPercent of the device's compute given to the Instance (Slice).
	// +optional
	CoresPercent int32 `json:"coresPercent,omitempty"`
	// profile of the partition (Partition).
	// +optional
	Profile string `json:"profile,omitempty"`
	// isolation is what keeps the Instance to its share of the device:
	// Exclusive (a whole card), MIG (a hardware partition), MPS or HAMi (a
	// slice, enforced by a CUDA MPS server or by HAMi's interposer).
	// +optional
	Isolation AllocationIsolation `json:"isolation,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceList is a list of Instances.
type InstanceList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Instances.
	Items []Instance `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceLogOptions are the query parameters of instances/log, a subset
// of a Pod's log options.
type InstanceLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	Container    string `json:"container,omitempty"`
	Follow       bool   `json:"follow,omitempty"`
	Previous     bool   `json:"previous,omitempty"`
	SinceSeconds *int64 `json:"sinceSeconds,omitempty"`
	Timestamps   bool   `json:"timestamps,omitempty"`
	TailLines    *int64 `json:"tailLines,omitempty"`
	LimitBytes   *int64 `json:"limitBytes,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Claim reserves accelerators ahead of any workload, e.g. "hold 4 H100s on
// one node". An Instance consumes it through spec.claimName.
type Claim struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec is the reservation asked for.
	// +optional
	Spec ClaimSpec `json:"spec,omitempty"`
	// status is where the reservation stands.
	// +optional
	Status ClaimStatus `json:"status,omitempty"`
}

// ClaimSpec is a reservation request. Set exactly one of accelerators or
// partition. Only expireAfter may change after creation.
type ClaimSpec struct {
	// type is the name of the InstanceType to reserve from. Cannot be changed.
	Type string `json:"type"`
	// accelerators is the number of whole cards to hold on one node.
	// +optional
	Accelerators *int32 `json:"accelerators,omitempty"`
	// partition is a partition profile to hold one of, e.g. "3g.40gb".
	// +optional
	Partition string `json:"partition,omitempty"`
	// nodeName pins the reservation to one node.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// expireAfter releases the reservation when no Instance has attached to
	// it for this long, e.g. "2h". Absent: it is held until deleted.
	// +optional
	ExpireAfter *metav1.Duration `json:"expireAfter,omitempty"`
}

// ClaimPhase is where a Claim is in its life.
// +enum
type ClaimPhase string

const (
	ClaimPending  ClaimPhase = "Pending"
	ClaimBound    ClaimPhase = "Bound"
	ClaimAttached ClaimPhase = "Attached"
	ClaimLost     ClaimPhase = "Lost"
	ClaimExpired  ClaimPhase = "Expired"
)

// ClaimConditionWaiting says why a Pending claim waits.
const ClaimConditionWaiting = "Waiting"

// Reasons of a Claim's Waiting condition: what the tenant can act on.
const (
	// ClaimReasonCapacity: no node of the pool has room for all of the
	// Claim (or of its claim set).
	ClaimReasonCapacity = "Capacity"
	// ClaimReasonTypeHeld: the InstanceType is on hold or draining.
	ClaimReasonTypeHeld = "TypeHeld"
	// ClaimReasonTypeNotFound: the InstanceType does not exist.
	ClaimReasonTypeNotFound = "TypeNotFound"
	// ClaimReasonNodeNotFound: spec.nodeName is not a node of the pool.
	ClaimReasonNodeNotFound = "NodeNotFound"
	// ClaimReasonBudget: a Budget of the namespace is over its hard limit;
	// raising it lets the Claim through.
	ClaimReasonBudget = "Budget"
	// ClaimReasonScheduling: a node was chosen and the scheduler has yet to
	// bind the Pod that holds the cards there.
	ClaimReasonScheduling = "Scheduling"
	// ClaimReasonNameConflict: a Pod the Claim did not make has the name
	// of its holder Pod.
	ClaimReasonNameConflict = "NameConflict"
)

// ClaimSetLabel groups the Claims of one namespace that are placed
// together: all of them on one node, or none.
const ClaimSetLabel = "gpu.kiln.dev/claim-set"

// InstanceFinalizer keeps a deleted Instance, as Deleting, until its Pod
// and Service are gone. kiln-controller adds it before it makes a Pod.
const InstanceFinalizer = "gpu.kiln.dev/instance-controller"

// ClaimFinalizer keeps a deleted Claim until its holder Pod is gone and no
// running Instance uses it.
const ClaimFinalizer = "gpu.kiln.dev/claim"

// LedgerFinalizer keeps a deleted Instance or Claim until kiln-apiserver
// has folded its status.usage into the Budgets of its namespace. Every
// Instance and Claim gets it when created.
const LedgerFinalizer = "gpu.kiln.dev/ledger"

// ClaimPriorityClassName is the PriorityClass of the Pods that hold a
// Claim's cards and of the Instance Pods that run on a Claim: the highest
// a user-defined class may have, with preemptionPolicy Never.
const ClaimPriorityClassName = "kiln-claim"

// ClaimStatus is the observed state of a Claim.
type ClaimStatus struct {
	// phase is Pending, Bound, Attached, Lost or Expired.
	// +optional
	Phase ClaimPhase `json:"phase,omitempty"`
	// nodeName is the node the devices are held on. An Expired Claim keeps
	// it, and its devices, until its holder Pod is gone, and is charged to
	// its Budgets until then.
	// +optional
	NodeName string `json:"nodeName,omitempty"`
	// devices held, by device ID.
	// +optional
	// +listType=atomic
	Devices []string `json:"devices,omitempty"`
	// attachedTo is the Instance using the reservation.
	// +optional
	AttachedTo string `json:"attachedTo,omitempty"`
	// expiresAt is when an unattached reservation lapses.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty"`
	// conditions of the Claim; "Waiting" says why a Pending claim waits.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty"`
	// usage is the ledger of the cards the Claim held while Bound or
	// Attached, which the Budgets of its namespace count in
	// accelerator-hours.
	// +optional
	Usage *Usage `json:"usage,omitempty"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClaimList is a list of Claims.
type ClaimList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Claims.
	Items []Claim `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Budget caps a namespace's use of accelerators, enforced when Instances
// and Claims are created or started. Every Budget in a namespace applies.
type Budget struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// spec sets the limits.
	// +optional
	Spec BudgetSpec `json:"spec,omitempty"`
	// status is what is charged against the limits now.
	// +optional
	Status BudgetStatus `json:"status,omitempty"`
}

// BudgetResourceName is a key of a Budget: "accelerators",
// "accelerator-memory", "instances", "nodeports", or
// "accelerators.<instancetype>".
type BudgetResourceName string

const (
	// BudgetAccelerators counts cards; a slice or partition counts as its share of a card.
	BudgetAccelerators BudgetResourceName = "accelerators"
	// BudgetAcceleratorMemory counts accelerator memory.
	BudgetAcceleratorMemory BudgetResourceName = "accelerator-memory"
	// BudgetInstances counts Instances, stopped ones too: a stopped
	// Instance keeps its Service, node ports and workspace.
	BudgetInstances BudgetResourceName = "instances"
	// BudgetNodePorts counts the node ports of Instances, stopped ones too.
	BudgetNodePorts BudgetResourceName = "nodeports"
	// BudgetAcceleratorsPerTypePrefix prefixes a per-type card count, "accelerators.<instancetype>".
	BudgetAcceleratorsPerTypePrefix = "accelerators."
	// BudgetAcceleratorHours counts card-hours over the Budget's period; a
	// slice or partition counts as its share of a card.
	BudgetAcceleratorHours BudgetResourceName = "accelerator-hours"
	// BudgetAcceleratorHoursPerTypePrefix prefixes a per-type card-hour
	// count, "accelerator-hours.<instancetype>".
	BudgetAcceleratorHoursPerTypePrefix = "accelerator-hours."
)

// BudgetResourceList maps Budget keys to quantities.
type BudgetResourceList map[BudgetResourceName]resource.Quantity

// BudgetSpec holds the limits.
type BudgetSpec struct {
	// hard limits by key: "accelerators" (cards; slices and partitions count
	// as the larger of their memory and compute share of a card),
	// "accelerator-memory", "instances" (stopped ones too), "nodeports"
	// (ports of Instances, stopped ones too), and
	// "accelerators.<instancetype>" for one type; "accelerator-hours" and
	// "accelerator-hours.<instancetype>" cap card-hours over the period.
	// +optional
	Hard BudgetResourceList `json:"hard,omitempty"`
	// period is what the accelerator-hours keys count over: a calendar
	// month (the default) or a number of UTC days.
	// +optional
	Period *BudgetPeriod `json:"period,omitempty"`
	// onExhausted is what happens once an accelerator-hours key is spent:
	// starts and creates it counts are refused either way; with Stop,
	// kiln-controller also stops the Instances that run on it.
	// +optional
	OnExhausted BudgetExhaustedAction `json:"onExhausted,omitempty"`
}

// BudgetPeriod is the span accelerator-hours count over. Set one field.
type BudgetPeriod struct {
	// calendar is "Month": from the first of the current UTC month.
	// +optional
	Calendar BudgetCalendar `json:"calendar,omitempty"`
	// rollingDays counts the last rollingDays UTC days, today included,
	// 1 to 31.
	// +optional
	RollingDays int32 `json:"rollingDays,omitempty"`
}

// BudgetCalendar is a calendar period.
type BudgetCalendar string

// BudgetCalendarMonth is the UTC calendar month.
const BudgetCalendarMonth BudgetCalendar = "Month"

// BudgetExhaustedAction is what a spent accelerator-hours key does.
type BudgetExhaustedAction string

const (
	// BudgetExhaustedRefuse refuses starts and creates; what runs runs on.
	BudgetExhaustedRefuse BudgetExhaustedAction = "Refuse"
	// BudgetExhaustedStop also stops the Instances that run on the key.
	BudgetExhaustedStop BudgetExhaustedAction = "Stop"
)

// BudgetStatus is what is charged now.
type BudgetStatus struct {
	// hard is the limits being enforced.
	// +optional
	Hard BudgetResourceList `json:"hard,omitempty"`
	// used is what running Instances and held Claims are charged, including
	// the charges in pending.
	// +optional
	Used BudgetResourceList `json:"used,omitempty"`
	// pending lists charges admission has made for writes that are not yet
	// seen stored: a create or start in flight. They are part of used. The
	// budget reconciler drops each once its object is stored in the charged
	// state, or the write has had time to fail, so that used can be
	// recomputed from stored objects without losing a charge in flight; the
	// next charge drops the creates the API server already shows stored.
	// Kiln writes the list whole, and a uid appears in it at most once.
	// +optional
	// +listType=atomic
	Pending []BudgetCharge `json:"pending,omitempty"`
	// conditions: Guarded and Counted.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty"`
	// periodStart is the start of the period consumed counts.
	// +optional
	PeriodStart *metav1.Time `json:"periodStart,omitempty"`
	// consumed is the card-hours held this period, by the Budget's
	// accelerator-hours keys, as of consumedTime.
	// +optional
	Consumed BudgetResourceList `json:"consumed,omitempty"`
	// consumedTime is when consumed was counted.
	// +optional
	ConsumedTime *metav1.Time `json:"consumedTime,omitempty"`
	// usage is the card-seconds held this period by InstanceType, as of
	// consumedTime, whatever the keys.
	// +optional
	// +listType=map
	// +listMapKey=instanceType
	Usage []BudgetUsage `json:"usage,omitempty"`
	// folded keeps, by UTC day and InstanceType, the usage of Instances and
	// Claims deleted since the Budget was made, for the last 31 days.
	// +optional
	// +listType=atomic
	Folded []UsageDay `json:"folded,omitempty"`
	// foldedUIDs are deleted objects whose usage is in folded and which
	// are still stored, waiting for their finalizer to go.
	// +optional
	// +listType=set
	FoldedUIDs []types.UID `json:"foldedUIDs,omitempty"`
}

// BudgetUsage is the card-seconds of one InstanceType this period.
type BudgetUsage struct {
	// instanceType the cards are of.
	InstanceType string `json:"instanceType"`
	// cardSeconds held this period.
	CardSeconds resource.Quantity `json:"cardSeconds"`
	// idleCardSeconds is the part held after the devices were last active.
	// +optional
	IdleCardSeconds resource.Quantity `json:"idleCardSeconds,omitempty"`
}

// BudgetCharge is one admitted charge whose write is in flight.
type BudgetCharge struct {
	// kind of the charged object, Instance or Claim.
	Kind string `json:"kind"`
	// name of the charged object.
	Name string `json:"name"`
	// uid of the charged object.
	UID types.UID `json:"uid"`
	// resourceVersion the object had before the charged update; empty for
	// a create. Once the stored object has another, the update has landed
	// or lost a conflict, and either way this charge is settled.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty"`
	// charge is the object's whole charge in its new state, by this
	// Budget's keys.
	Charge BudgetResourceList `json:"charge"`
	// time the charge was made.
	Time metav1.Time `json:"time"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BudgetList is a list of Budgets.
type BudgetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of Budgets.
	Items []Budget `json:"items"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeDevices is the accelerator inventory of one node, as its node agent
// (kiln-node-agent) reports it: every device, its health, and what
// holds it. Its name is the node's. Every authenticated user may read it,
// so it names no object: a holder is a kind and a Pod UID.
type NodeDevices struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty"`

	// status is what the node agent sees.
	// +optional
	Status NodeDevicesStatus `json:"status,omitempty"`
}

// NodeDevicesStatus is a node's devices.
type NodeDevicesStatus struct {
	// devices of the node: whole cards, and the MIG devices of cards in
	// MIG mode in their place.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	Devices []NodeDevice `json:"devices,omitempty"`
}

// DeviceHealth says whether the kubelet may allocate a device.
type DeviceHealth string

const (
	// DeviceHealthy devices may be allocated.
	DeviceHealthy DeviceHealth = "Healthy"
	// DeviceUnhealthy devices are not allocated; the reason says why.
	DeviceUnhealthy DeviceHealth = "Unhealthy"
)

// NodeDevice is one device of a node.
type NodeDevice struct {
	// uuid the kubelet allocates the device by: GPU-... or MIG-....
	UUID string `json:"uuid"`
	// resource is the extended resource the device is served under, e.g.
	// nvidia.com/gpu or nvidia.com/mig-1g.10gb.
	Resource string `json:"resource"`
	// index of the card on the node; a MIG device has its card's.
	// +optional
	Index int32 `json:"index,omitempty"`
	// model of the card, e.g. NVIDIA-H100-80GB-HBM3.
	// +optional
	Model string `json:"model,omitempty"`
	// memory of the device.
	// +optional
	Memory resource.Quantity `json:"memory,omitempty"`
	// pciBusID of the card.
	// +optional
	PCIBusID string `json:"pciBusID,omitempty"`
	// parent is the uuid of the card a MIG device is cut from.
	// +optional
	Parent string `json:"parent,omitempty"`
	// profile of a MIG device, e.g. 1g.10gb.
	// +optional
	Profile string `json:"profile,omitempty"`
	// nvLinkPeers are the uuids of the cards this one has an NVLink to.
	// +optional
	// +listType=set
	NVLinkPeers []string `json:"nvLinkPeers,omitempty"`
	// health is Healthy or Unhealthy.
	Health DeviceHealth `json:"health"`
	// reason an Unhealthy device is, e.g. "XID 79".
	// +optional
	Reason string `json:"reason,omitempty"`
	// holder is what holds the device now; none when it is free.
	// +optional
	Holder *DeviceHolder `json:"holder,omitempty"`
	// utilization is the percentage of the time the device's engines were
	// busy, 0 to 100, smoothed over the node agent's recent samples.
	// +optional
	Utilization *int32 `json:"utilization,omitempty"`
	// memoryUsed is the device memory in use at that sample.
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty"`
	// lastActiveTime is the last sample at which the device was active.
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty"`
}

// DeviceHolderKind is what holds a device.
type DeviceHolderKind string

const (
	// DeviceHolderInstance: the Pod of an Instance.
	DeviceHolderInstance DeviceHolderKind = "Instance"
	// DeviceHolderClaim: the Pod that holds a Claim's cards.
	DeviceHolderClaim DeviceHolderKind = "Claim"
	// DeviceHolderPod: a Pod Kiln did not make.
	DeviceHolderPod DeviceHolderKind = "Pod"
)

// DeviceHolder is what holds a device, without its name.
type DeviceHolder struct {
	// kind is Instance, Claim or Pod.
	Kind DeviceHolderKind `json:"kind"`
	// podUID is the Pod the kubelet allocated the device to.
	PodUID types.UID `json:"podUID"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeDevicesList is a list of NodeDevices.
type NodeDevicesList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty"`
	// items is the list of NodeDevices.
	Items []NodeDevices `json:"items"`
}
