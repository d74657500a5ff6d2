package v1alpha1

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceType is a catalogue entry published by a cluster admin: which
// accelerator an Instance of this type gets, how the card may be shared, how
// much host CPU and memory come with it, and which nodes form its pool.
type InstanceType struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec is what the admin publishes.
	// +optional
	Spec InstanceTypeSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// status is the pool's live capacity, computed by the controller.
	// +optional
	Status InstanceTypeStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// InstanceTypeSpec describes an accelerator offering.
type InstanceTypeSpec struct {
	// displayName is a human-readable name shown in catalogues, e.g. "NVIDIA H100 80GB".
	// +optional
	DisplayName string `json:"displayName,omitempty" protobuf:"bytes,1,opt,name=displayName"`
	// accelerator describes the card behind this type. Absent for a CPU-only type.
	// +optional
	Accelerator *Accelerator `json:"accelerator,omitempty" protobuf:"bytes,2,opt,name=accelerator"`
	// resourcesPerCard is the host CPU, memory and ephemeral storage that come
	// with one whole card. A slice or partition gets the same fraction of
	// these as its share of the card's memory. For a CPU-only type it is what
	// one Instance gets by default.
	// +optional
	ResourcesPerCard HostResources `json:"resourcesPerCard,omitempty" protobuf:"bytes,3,opt,name=resourcesPerCard"`
	// nodeSelector restricts the pool to nodes with these labels.
	// +optional
	NodeSelector map[string]string `json:"nodeSelector,omitempty" protobuf:"bytes,4,rep,name=nodeSelector"`
	// tolerations are added to every Pod of this type, so it can land on
	// tainted GPU nodes.
	// +optional
	// +listType=atomic
	Tolerations []corev1.Toleration `json:"tolerations,omitempty" protobuf:"bytes,5,rep,name=tolerations"`
	// runtimeClassName is the RuntimeClass of every Pod of this type (e.g. "nvidia").
	// +optional
	RuntimeClassName *string `json:"runtimeClassName,omitempty" protobuf:"bytes,6,opt,name=runtimeClassName"`
	// namespaceSelector selects the namespaces whose Instances may use this
	// type. Absent: every namespace may.
	// +optional
	NamespaceSelector *metav1.LabelSelector `json:"namespaceSelector,omitempty" protobuf:"bytes,7,opt,name=namespaceSelector"`
	// hold pauses the type: "" keeps it open; "Hold" refuses new starts but
	// leaves running Instances alone; "Drain" also stops running Instances.
	// +optional
	Hold HoldMode `json:"hold,omitempty" protobuf:"bytes,8,opt,name=hold,casttype=HoldMode"`
	// idle stops this type's Instances whose accelerators sit idle. Absent:
	// an Instance is stopped for idleness only if it sets
	// spec.idleStopAfter itself.
	// +optional
	Idle *IdlePolicy `json:"idle,omitempty" protobuf:"bytes,9,opt,name=idle"`
}

// DefaultActiveThreshold is the utilization, in percent, above which the
// node agent counts a device as active unless its --active-threshold says
// otherwise, and above which kiln-controller takes a published
// utilization for activity when an InstanceType sets no threshold.
const DefaultActiveThreshold = 5

// IdlePolicy is when kiln-controller stops an Instance whose devices do
// nothing, as measured on the devices by the node agent.
type IdlePolicy struct {
	// stopAfter is how long every device of an Instance may stay idle
	// before the Instance is stopped. An Instance may set a shorter
	// spec.idleStopAfter, never a longer one.
	StopAfter metav1.Duration `json:"stopAfter" protobuf:"bytes,1,opt,name=stopAfter"`
	// minRunTime is how long an Instance runs, from its Pod's start, before
	// it may be stopped for idleness at all.
	// +optional
	MinRunTime *metav1.Duration `json:"minRunTime,omitempty" protobuf:"bytes,2,opt,name=minRunTime"`
	// activeThreshold is the utilization, in percent, above which a
	// device counts as active. Absent: the node agent's own judgement
	// (its --active-threshold) decides.
	// +optional
	ActiveThreshold *int32 `json:"activeThreshold,omitempty" protobuf:"varint,3,opt,name=activeThreshold"`
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
	Vendor string `json:"vendor" protobuf:"bytes,1,opt,name=vendor"`
	// model is matched against the node label that names the card, such as
	// nvidia.com/gpu.product (e.g. "NVIDIA-H100-80GB-HBM3").
	Model string `json:"model" protobuf:"bytes,2,opt,name=model"`
	// memory of one card, e.g. "80Gi".
	Memory resource.Quantity `json:"memory" protobuf:"bytes,3,opt,name=memory"`
	// maxPerInstance is the most whole cards one Instance may take. Defaults to 1.
	// +optional
	MaxPerInstance int32 `json:"maxPerInstance,omitempty" protobuf:"varint,4,opt,name=maxPerInstance"`
	// exclusive offers whole cards. Defaulted when neither sliced nor
	// partitions is set.
	// +optional
	Exclusive *ExclusiveSharing `json:"exclusive,omitempty" protobuf:"bytes,5,opt,name=exclusive"`
	// sliced offers percentage slices of one card's memory and compute,
	// enforced by a sharing device plugin (HAMi's convention).
	// +optional
	Sliced *SlicedSharing `json:"sliced,omitempty" protobuf:"bytes,6,opt,name=sliced"`
	// partitions offers hardware partitions of a card (NVIDIA MIG profiles).
	// +optional
	// +listType=map
	// +listMapKey=name
	Partitions []PartitionProfile `json:"partitions,omitempty" protobuf:"bytes,7,rep,name=partitions"`
}

// ExclusiveSharing offers whole cards through one extended resource.
type ExclusiveSharing struct {
	// resourceName is the extended resource a Pod requests for whole cards.
	// Defaults from the vendor: "nvidia.com/gpu", "amd.com/gpu", "gpu.intel.com/i915".
	// +optional
	ResourceName string `json:"resourceName,omitempty" protobuf:"bytes,1,opt,name=resourceName"`
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
	ResourceName string `json:"resourceName,omitempty" protobuf:"bytes,1,opt,name=resourceName"`
	// memoryPercentResourceName is the resource that carries the slice's share
	// of card memory in percent. Defaults to "nvidia.com/gpumem-percentage".
	// +optional
	MemoryPercentResourceName string `json:"memoryPercentResourceName,omitempty" protobuf:"bytes,2,opt,name=memoryPercentResourceName"`
	// coresResourceName is the resource that carries the slice's share of the
	// card's compute in percent. Defaults to "nvidia.com/gpucores".
	// +optional
	CoresResourceName string `json:"coresResourceName,omitempty" protobuf:"bytes,3,opt,name=coresResourceName"`
	// isolation is what keeps a slice to its share of the card. HAMi (the
	// default) is HAMi's device plugin and CUDA interposer, which read the
	// memory and cores resources. MPS is Kiln's node agent run with
	// --mps-shares: it serves each card as sharesPerCard shares of
	// resourceName, each with a CUDA MPS server whose defaults cap a client
	// at one share of the card's threads and memory, so every slice of the
	// type is exactly one share (100/sharesPerCard percent).
	// +optional
	Isolation SliceIsolation `json:"isolation,omitempty" protobuf:"bytes,4,opt,name=isolation,casttype=SliceIsolation"`
	// sharesPerCard is the number of MPS shares the node agent serves each
	// card as (isolation MPS only): 2, 4, 5, 10, 20 or 25, so that a share
	// is a whole percentage. It must equal the agent's --mps-shares.
	// +optional
	SharesPerCard int32 `json:"sharesPerCard,omitempty" protobuf:"varint,5,opt,name=sharesPerCard"`
}

// PartitionProfile is one hardware partition profile of a card.
type PartitionProfile struct {
	// name of the profile, e.g. "1g.10gb".
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// memory of one partition, e.g. "10Gi".
	Memory resource.Quantity `json:"memory" protobuf:"bytes,2,opt,name=memory"`
	// resourceName is the extended resource of this profile. Defaults to
	// "nvidia.com/mig-<name>".
	// +optional
	ResourceName string `json:"resourceName,omitempty" protobuf:"bytes,3,opt,name=resourceName"`
}

// HostResources is host CPU, memory and ephemeral storage.
type HostResources struct {
	// cpu, e.g. "16" or "1500m".
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty" protobuf:"bytes,1,opt,name=cpu"`
	// memory, e.g. "128Gi".
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty" protobuf:"bytes,2,opt,name=memory"`
	// ephemeralStorage, e.g. "200Gi".
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty" protobuf:"bytes,3,opt,name=ephemeralStorage"`
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
	Phase InstanceTypePhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=InstanceTypePhase"`
	// capacity of the pool as of the last reconcile.
	// +optional
	Capacity InstanceTypeCapacity `json:"capacity,omitempty" protobuf:"bytes,2,opt,name=capacity"`
	// conditions of the type.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,4,opt,name=observedGeneration"`
}

// InstanceTypeCapacity counts the nodes and cards of a pool.
type InstanceTypeCapacity struct {
	// nodes in the pool that are Ready.
	// +optional
	Nodes int32 `json:"nodes,omitempty" protobuf:"varint,1,opt,name=nodes"`
	// cards on those nodes: the slots of the type's resource, so a sliced
	// type's MPS shares (sharesPerCard of each card) or HAMi card slots.
	// +optional
	Cards int32 `json:"cards,omitempty" protobuf:"varint,2,opt,name=cards"`
	// freeCards not taken by any Pod or Claim.
	// +optional
	FreeCards int32 `json:"freeCards,omitempty" protobuf:"varint,3,opt,name=freeCards"`
	// partitions: total and free per partition profile.
	// +optional
	// +listType=map
	// +listMapKey=name
	Partitions []PartitionCapacity `json:"partitions,omitempty" protobuf:"bytes,4,rep,name=partitions"`
}

// PartitionCapacity counts the partitions of one profile in a pool.
type PartitionCapacity struct {
	// name of the profile.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// total partitions of this profile in the pool.
	// +optional
	Total int32 `json:"total,omitempty" protobuf:"varint,2,opt,name=total"`
	// free partitions of this profile.
	// +optional
	Free int32 `json:"free,omitempty" protobuf:"varint,3,opt,name=free"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceTypeList is a list of InstanceTypes.
type InstanceTypeList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// items is the list of InstanceTypes.
	Items []InstanceType `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:method=Start,verb=create,subresource=start,input=Instance,result=Instance
// +genclient:method=Stop,verb=create,subresource=stop,input=Instance,result=Instance
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Instance is one GPU machine a tenant runs: one Pod on a node of its type,
// an optional NodePort Service for its ports, a workspace volume and
// optional SSH access.
type Instance struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec is the machine the tenant asks for.
	// +optional
	Spec InstanceSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// status is what the controller observes of the machine.
	// +optional
	Status InstanceStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// InstanceSpec is the desired state of an Instance.
type InstanceSpec struct {
	// type is the name of the InstanceType to run on. Cannot be changed.
	Type string `json:"type" protobuf:"bytes,1,opt,name=type"`
	// image is the container image to run, e.g. "nvcr.io/nvidia/pytorch:24.05-py3".
	Image string `json:"image" protobuf:"bytes,2,opt,name=image"`
	// imagePullPolicy is Always, IfNotPresent or Never. Defaults to IfNotPresent.
	// +optional
	ImagePullPolicy corev1.PullPolicy `json:"imagePullPolicy,omitempty" protobuf:"bytes,3,opt,name=imagePullPolicy,casttype=k8s.io/api/core/v1.PullPolicy"`
	// imagePullSecrets name Secrets in the Instance's namespace used to pull the image.
	// +optional
	// +listType=map
	// +listMapKey=name
	ImagePullSecrets []corev1.LocalObjectReference `json:"imagePullSecrets,omitempty" protobuf:"bytes,4,rep,name=imagePullSecrets"`
	// command overrides the image's entrypoint.
	// +optional
	// +listType=atomic
	Command []string `json:"command,omitempty" protobuf:"bytes,5,rep,name=command"`
	// args are passed to the command.
	// +optional
	// +listType=atomic
	Args []string `json:"args,omitempty" protobuf:"bytes,6,rep,name=args"`
	// env sets environment variables in the container. Variables that a
	// container runtime or GPU sharing layer reads to pick or limit cards
	// (NVIDIA_*, AMD_VISIBLE_DEVICES, CUDA_MPS_*, CUDA_DEVICE_MEMORY_*,
	// CUDA_DEVICE_SM_LIMIT, CUDA_OVERSUBSCRIBE, LD_PRELOAD) are refused:
	// the device plugin sets what the container needs.
	// +optional
	// +listType=map
	// +listMapKey=name
	Env []corev1.EnvVar `json:"env,omitempty" protobuf:"bytes,7,rep,name=env"`
	// resources is the accelerator share and host resources. Set exactly one
	// of accelerators, slice or partition; cpu, memory and ephemeralStorage
	// are filled from the InstanceType when left empty. While the Instance
	// runs or is stopping, its accelerators may grow but not shrink or
	// change kind: its Pod holds the old ones until it is gone. Stop it
	// first.
	// +optional
	Resources InstanceResources `json:"resources,omitempty" protobuf:"bytes,8,opt,name=resources"`
	// ports exposed on a NodePort Service owned by the Instance, at most 8:
	// each holds a node port of the cluster while the Instance exists.
	// +optional
	// +listType=map
	// +listMapKey=name
	Ports []InstancePort `json:"ports,omitempty" protobuf:"bytes,9,rep,name=ports"`
	// ssh enables an SSH server in the Instance.
	// +optional
	SSH *SSHSpec `json:"ssh,omitempty" protobuf:"bytes,10,opt,name=ssh"`
	// workspace is the volume mounted as the working directory. Defaults to
	// an emptyDir at /workspace.
	// +optional
	Workspace *Workspace `json:"workspace,omitempty" protobuf:"bytes,11,opt,name=workspace"`
	// volumes are extra volumes mounted into the container.
	// +optional
	// +listType=map
	// +listMapKey=name
	Volumes []InstanceVolume `json:"volumes,omitempty" protobuf:"bytes,12,rep,name=volumes"`
	// nodeName pins the Instance to one node of its type's pool. The pin is
	// a node selector, so the scheduler still checks that the node has room.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,13,opt,name=nodeName"`
	// claimName runs the Instance on the devices held by this Claim in the
	// same namespace.
	// +optional
	ClaimName string `json:"claimName,omitempty" protobuf:"bytes,14,opt,name=claimName"`
	// stopped is the desired state: true deletes the Pod and keeps
	// everything else; false runs it. The instances/stop and instances/start
	// subresources flip it.
	// +optional
	Stopped bool `json:"stopped,omitempty" protobuf:"varint,15,opt,name=stopped"`
	// privileged runs the container privileged. Needs the "use" verb on
	// instances/privileged.
	// +optional
	Privileged bool `json:"privileged,omitempty" protobuf:"varint,16,opt,name=privileged"`
	// idleStopAfter stops the Instance once every device it holds has been
	// idle this long. At most its type's spec.idle.stopAfter, which applies
	// when this is absent.
	// +optional
	IdleStopAfter *metav1.Duration `json:"idleStopAfter,omitempty" protobuf:"bytes,17,opt,name=idleStopAfter"`
}

// InstanceResources is what an Instance asks of its type.
type InstanceResources struct {
	// accelerators is the number of whole cards. 0 on a CPU-only type.
	// +optional
	Accelerators *int32 `json:"accelerators,omitempty" protobuf:"varint,1,opt,name=accelerators"`
	// slice asks for a percentage slice of one card.
	// +optional
	Slice *SliceRequest `json:"slice,omitempty" protobuf:"bytes,2,opt,name=slice"`
	// partition asks for one hardware partition of this profile, e.g. "1g.10gb".
	// +optional
	Partition string `json:"partition,omitempty" protobuf:"bytes,3,opt,name=partition"`
	// cpu for the container. Defaults to the card share of the type's resourcesPerCard.cpu.
	// +optional
	CPU *resource.Quantity `json:"cpu,omitempty" protobuf:"bytes,4,opt,name=cpu"`
	// memory for the container. Defaults to the card share of the type's resourcesPerCard.memory.
	// +optional
	Memory *resource.Quantity `json:"memory,omitempty" protobuf:"bytes,5,opt,name=memory"`
	// ephemeralStorage for the container. Defaults to the card share of the
	// type's resourcesPerCard.ephemeralStorage.
	// +optional
	EphemeralStorage *resource.Quantity `json:"ephemeralStorage,omitempty" protobuf:"bytes,6,opt,name=ephemeralStorage"`
}

// SliceRequest is a share of one card.
type SliceRequest struct {
	// memoryPercent of the card's memory, 1 to 100.
	MemoryPercent int32 `json:"memoryPercent" protobuf:"varint,1,opt,name=memoryPercent"`
	// coresPercent of the card's compute, 1 to 100. Defaults to memoryPercent.
	// +optional
	CoresPercent int32 `json:"coresPercent,omitempty" protobuf:"varint,2,opt,name=coresPercent"`
}

// InstancePort is a port of the container published on a NodePort.
type InstancePort struct {
	// name of the port, an IANA service name such as "http" or "jupyter".
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// port number in the container, 1 to 65535.
	Port int32 `json:"port" protobuf:"varint,2,opt,name=port"`
	// protocol is TCP, UDP or SCTP. Defaults to TCP.
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty" protobuf:"bytes,3,opt,name=protocol,casttype=k8s.io/api/core/v1.Protocol"`
}

// SSHSpec enables SSH access.
type SSHSpec struct {
	// authorizedKeysSecret names a Secret in the Instance's namespace whose
	// "authorized_keys" key holds the public keys allowed to log in.
	AuthorizedKeysSecret string `json:"authorizedKeysSecret" protobuf:"bytes,1,opt,name=authorizedKeysSecret"`
}

// Workspace is the Instance's working volume.
type Workspace struct {
	// mountPath of the workspace in the container. Defaults to /workspace.
	// +optional
	MountPath string `json:"mountPath,omitempty" protobuf:"bytes,1,opt,name=mountPath"`
	// size of an emptyDir workspace, e.g. "100Gi". Not with claimName.
	// +optional
	EmptyDirSize *resource.Quantity `json:"size,omitempty" protobuf:"bytes,2,opt,name=size"` // Not Size: the protobuf encoding's Size method takes the name.
	// claimName of a PersistentVolumeClaim to use as the workspace, so it
	// survives stops and node changes. Not with size.
	// +optional
	ClaimName string `json:"claimName,omitempty" protobuf:"bytes,3,opt,name=claimName"`
}

// InstanceVolume is an extra volume and where it is mounted. Set exactly
// one source.
type InstanceVolume struct {
	// name of the volume, a DNS label unique in the Instance.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// mountPath in the container, an absolute path.
	MountPath string `json:"mountPath" protobuf:"bytes,2,opt,name=mountPath"`
	// readOnly mounts the volume read-only.
	// +optional
	ReadOnly bool `json:"readOnly,omitempty" protobuf:"varint,3,opt,name=readOnly"`
	// persistentVolumeClaim in the Instance's namespace.
	// +optional
	PersistentVolumeClaim *corev1.PersistentVolumeClaimVolumeSource `json:"persistentVolumeClaim,omitempty" protobuf:"bytes,4,opt,name=persistentVolumeClaim"`
	// configMap in the Instance's namespace.
	// +optional
	ConfigMap *corev1.ConfigMapVolumeSource `json:"configMap,omitempty" protobuf:"bytes,5,opt,name=configMap"`
	// secret in the Instance's namespace.
	// +optional
	Secret *corev1.SecretVolumeSource `json:"secret,omitempty" protobuf:"bytes,6,opt,name=secret"`
	// hostPath mounts a directory of the node. Needs the "use" verb on
	// instances/privileged.
	// +optional
	HostPath *corev1.HostPathVolumeSource `json:"hostPath,omitempty" protobuf:"bytes,7,opt,name=hostPath"`
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

// InstanceConditionReady is true when the Instance's container runs and is ready.
const InstanceConditionReady = "Ready"

// InstanceConditionDeviceHealthy is false while a device the Instance
// holds is unhealthy; absent while it holds none the node agent reports.
const InstanceConditionDeviceHealthy = "DeviceHealthy"

// InstanceConditionClaimDevices says, for an Instance on a Claim, whether
// its Pod got exactly the devices the Claim holds.
const InstanceConditionClaimDevices = "ClaimDevices"

// InstanceConditionIdleStopped is true on an Instance kiln-controller
// stopped because its devices sat idle past its idle limit; it says since
// when, and goes at the next start.
const InstanceConditionIdleStopped = "IdleStopped"

// InstanceConditionBudgetExhausted is true on an Instance kiln-controller
// stopped because a Budget with onExhausted Stop spent an
// accelerator-hours key that counts it; it goes at the next start.
const InstanceConditionBudgetExhausted = "BudgetExhausted"

// The containers of an Instance's Pod, as instances/log?container= names
// them: the one running spec.image, and the SSH sidecar of spec.ssh.
const (
	InstanceMainContainer = "main"
	InstanceSSHContainer  = "ssh"
)

// InstanceStatus is the observed state of an Instance.
type InstanceStatus struct {
	// phase is Pending, Starting, Ready, Stopping, Stopped, Failed or Deleting.
	// +optional
	Phase InstancePhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=InstancePhase"`
	// message explains the phase, e.g. why the Instance is still Pending.
	// +optional
	Message string `json:"message,omitempty" protobuf:"bytes,2,opt,name=message"`
	// conditions of the Instance; "Ready" at least.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,3,rep,name=conditions"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,4,opt,name=observedGeneration"`
	// nodeName is the node the Instance runs on.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,5,opt,name=nodeName"`
	// hostIPs of that node, external addresses first.
	// +optional
	// +listType=atomic
	HostIPs []string `json:"hostIPs,omitempty" protobuf:"bytes,6,rep,name=hostIPs"`
	// podIPs of the Instance's Pod.
	// +optional
	// +listType=atomic
	PodIPs []string `json:"podIPs,omitempty" protobuf:"bytes,7,rep,name=podIPs"`
	// ports with the node ports they are reachable on.
	// +optional
	// +listType=map
	// +listMapKey=name
	Ports []InstancePortStatus `json:"ports,omitempty" protobuf:"bytes,8,rep,name=ports"`
	// allocations are the devices the Instance got.
	// +optional
	// +listType=atomic
	Allocations []DeviceAllocation `json:"allocations,omitempty" protobuf:"bytes,9,rep,name=allocations"`
	// startTime is when the current Pod started.
	// +optional
	StartTime *metav1.Time `json:"startTime,omitempty" protobuf:"bytes,10,opt,name=startTime"`
	// activity is what the node agent reports of the devices the Instance's
	// Pod holds.
	// +optional
	Activity *InstanceActivity `json:"activity,omitempty" protobuf:"bytes,11,opt,name=activity"`
	// usage is the ledger of the cards its Pod held, which the Budgets
	// of its namespace count in accelerator-hours.
	// +optional
	Usage *Usage `json:"usage,omitempty" protobuf:"bytes,12,opt,name=usage"`
}

// InstanceActivity sums up the use of an Instance's devices.
type InstanceActivity struct {
	// lastActiveTime is the last time any of its devices was active, or
	// its Pod's start if none has been since.
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty" protobuf:"bytes,1,opt,name=lastActiveTime"`
	// utilization is the highest recent utilization of its devices, in
	// percent.
	// +optional
	Utilization *int32 `json:"utilization,omitempty" protobuf:"varint,2,opt,name=utilization"`
	// memoryUsed is the device memory in use, over all its devices.
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty" protobuf:"bytes,3,opt,name=memoryUsed"`
}

// Usage is the ledger of one Instance or Claim: the card-seconds its
// devices were held, by UTC day. kiln-controller writes it from the times
// the Pod records (bound to its node; deletion asked for or containers
// ended), never from sampling, so it stays exact across restarts.
type Usage struct {
	// current is the run in progress, if any.
	// +optional
	Current *UsageRun `json:"current,omitempty" protobuf:"bytes,1,opt,name=current"`
	// lastPodUID is the Pod of the last run closed: a Pod still
	// terminating does not open another.
	// +optional
	LastPodUID types.UID `json:"lastPodUID,omitempty" protobuf:"bytes,2,opt,name=lastPodUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// days are the closed runs' card-seconds by UTC day and InstanceType,
	// for the last 31 days.
	// +optional
	// +listType=atomic
	Days []UsageDay `json:"days,omitempty" protobuf:"bytes,3,rep,name=days"`
}

// UsageRun is a run in progress: a Pod holding cards.
type UsageRun struct {
	// podUID is the Pod that holds the cards.
	PodUID types.UID `json:"podUID" protobuf:"bytes,1,opt,name=podUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// instanceType the cards are of.
	InstanceType string `json:"instanceType" protobuf:"bytes,2,opt,name=instanceType"`
	// cards is the share of cards held, as Budgets charge it: a slice or
	// partition by its share.
	Cards resource.Quantity `json:"cards" protobuf:"bytes,3,opt,name=cards"`
	// since is when the Pod was bound to its node.
	Since metav1.Time `json:"since" protobuf:"bytes,4,opt,name=since"`
}

// UsageDay is the card-seconds held on one UTC day, on one InstanceType.
type UsageDay struct {
	// date is the UTC day, e.g. 2026-12-06.
	Date string `json:"date" protobuf:"bytes,1,opt,name=date"`
	// instanceType the cards are of.
	InstanceType string `json:"instanceType" protobuf:"bytes,2,opt,name=instanceType"`
	// cardSeconds held that day.
	CardSeconds resource.Quantity `json:"cardSeconds" protobuf:"bytes,3,opt,name=cardSeconds"`
	// idleCardSeconds is the part of cardSeconds held after the devices
	// were last active in their run.
	// +optional
	IdleCardSeconds resource.Quantity `json:"idleCardSeconds,omitempty" protobuf:"bytes,4,opt,name=idleCardSeconds"`
}

// InstancePortStatus is a published port.
type InstancePortStatus struct {
	// name of the port.
	Name string `json:"name" protobuf:"bytes,1,opt,name=name"`
	// port number in the container.
	Port int32 `json:"port" protobuf:"varint,2,opt,name=port"`
	// protocol of the port.
	// +optional
	Protocol corev1.Protocol `json:"protocol,omitempty" protobuf:"bytes,3,opt,name=protocol,casttype=k8s.io/api/core/v1.Protocol"`
	// nodePort on every node's host IPs that reaches the port.
	// +optional
	NodePort int32 `json:"nodePort,omitempty" protobuf:"varint,4,opt,name=nodePort"`
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
	Device string `json:"device" protobuf:"bytes,1,opt,name=device"`
	// index of the card on the node (nvidia-smi's); a MIG device has its
	// card's.
	// +optional
	Index int32 `json:"index,omitempty" protobuf:"varint,2,opt,name=index"`
	// pciBusID of the card.
	// +optional
	PCIBusID string `json:"pciBusID,omitempty" protobuf:"bytes,3,opt,name=pciBusID"`
	// mode is Exclusive, Slice or Partition.
	Mode AllocationMode `json:"mode" protobuf:"bytes,4,opt,name=mode,casttype=AllocationMode"`
	// memoryPercent of the device's memory given to the Instance (Slice).
	// +optional
	MemoryPercent int32 `json:"memoryPercent,omitempty" protobuf:"varint,5,opt,name=memoryPercent"`
	// coresPercent of the device's compute given to the Instance (Slice).
	// +optional
	CoresPercent int32 `json:"coresPercent,omitempty" protobuf:"varint,6,opt,name=coresPercent"`
	// profile of the partition (Partition).
	// +optional
	Profile string `json:"profile,omitempty" protobuf:"bytes,7,opt,name=profile"`
	// isolation is what keeps the Instance to its share of the device:
	// Exclusive (a whole card), MIG (a hardware partition), MPS or HAMi (a
	// slice, enforced by a CUDA MPS server or by HAMi's interposer).
	// +optional
	Isolation AllocationIsolation `json:"isolation,omitempty" protobuf:"bytes,8,opt,name=isolation,casttype=AllocationIsolation"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceList is a list of Instances.
type InstanceList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// items is the list of Instances.
	Items []Instance `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +k8s:conversion-gen:explicit-from=net/url.Values
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// InstanceLogOptions are the query parameters of instances/log: those of a
// Pod's log, read from the Instance's Pod.
type InstanceLogOptions struct {
	metav1.TypeMeta `json:",inline"`

	// container to read. Defaults to "main", the Instance's own; "ssh" is
	// the SSH sidecar of an Instance with spec.ssh.
	// +optional
	Container string `json:"container,omitempty" protobuf:"bytes,1,opt,name=container"`
	// follow streams the log as it grows.
	// +optional
	Follow bool `json:"follow,omitempty" protobuf:"varint,2,opt,name=follow"`
	// previous reads the log of the container's previous run, after a
	// restart of the container in the same Pod.
	// +optional
	Previous bool `json:"previous,omitempty" protobuf:"varint,3,opt,name=previous"`
	// sinceSeconds reads only lines this recent.
	// +optional
	SinceSeconds *int64 `json:"sinceSeconds,omitempty" protobuf:"varint,4,opt,name=sinceSeconds"`
	// timestamps prefixes every line with its RFC3339 time.
	// +optional
	Timestamps bool `json:"timestamps,omitempty" protobuf:"varint,5,opt,name=timestamps"`
	// tailLines reads this many lines from the end.
	// +optional
	TailLines *int64 `json:"tailLines,omitempty" protobuf:"varint,6,opt,name=tailLines"`
	// limitBytes stops after this many bytes.
	// +optional
	LimitBytes *int64 `json:"limitBytes,omitempty" protobuf:"varint,7,opt,name=limitBytes"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Claim reserves accelerators ahead of any workload, e.g. "hold 4 H100s on
// one node". An Instance consumes it through spec.claimName.
type Claim struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec is the reservation asked for.
	// +optional
	Spec ClaimSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// status is where the reservation stands.
	// +optional
	Status ClaimStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
}

// ClaimSpec is a reservation request. Set exactly one of accelerators or
// partition. Only expireAfter may change after creation.
type ClaimSpec struct {
	// type is the name of the InstanceType to reserve from. Cannot be changed.
	Type string `json:"type" protobuf:"bytes,1,opt,name=type"`
	// accelerators is the number of whole cards to hold on one node.
	// +optional
	Accelerators *int32 `json:"accelerators,omitempty" protobuf:"varint,2,opt,name=accelerators"`
	// partition is a partition profile to hold one of, e.g. "3g.40gb".
	// +optional
	Partition string `json:"partition,omitempty" protobuf:"bytes,3,opt,name=partition"`
	// nodeName pins the reservation to one node.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,4,opt,name=nodeName"`
	// expireAfter releases the reservation when no Instance has attached to
	// it for this long, e.g. "2h". Absent: it is held until deleted.
	// +optional
	ExpireAfter *metav1.Duration `json:"expireAfter,omitempty" protobuf:"bytes,5,opt,name=expireAfter"`
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

// ClaimConditionBudgetExhausted is true on a Claim kiln-controller
// released (phase Expired) because a Budget with onExhausted Stop spent
// an accelerator-hours key that counts it.
const ClaimConditionBudgetExhausted = "BudgetExhausted"

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
	Phase ClaimPhase `json:"phase,omitempty" protobuf:"bytes,1,opt,name=phase,casttype=ClaimPhase"`
	// nodeName is the node the devices are held on. An Expired Claim keeps
	// it, and its devices, until its holder Pod is gone, and is charged to
	// its Budgets until then.
	// +optional
	NodeName string `json:"nodeName,omitempty" protobuf:"bytes,2,opt,name=nodeName"`
	// devices held, by device ID.
	// +optional
	// +listType=atomic
	Devices []string `json:"devices,omitempty" protobuf:"bytes,3,rep,name=devices"`
	// attachedTo is the Instance using the reservation.
	// +optional
	AttachedTo string `json:"attachedTo,omitempty" protobuf:"bytes,4,opt,name=attachedTo"`
	// expiresAt is when an unattached reservation lapses.
	// +optional
	ExpiresAt *metav1.Time `json:"expiresAt,omitempty" protobuf:"bytes,5,opt,name=expiresAt"`
	// conditions of the Claim; "Waiting" says why a Pending claim waits.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,6,rep,name=conditions"`
	// observedGeneration is the generation of the spec this status describes.
	// +optional
	ObservedGeneration int64 `json:"observedGeneration,omitempty" protobuf:"varint,7,opt,name=observedGeneration"`
	// usage is the ledger of the cards the Claim held while Bound or
	// Attached, which the Budgets of its namespace count in
	// accelerator-hours.
	// +optional
	Usage *Usage `json:"usage,omitempty" protobuf:"bytes,8,opt,name=usage"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// ClaimList is a list of Claims.
type ClaimList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// items is the list of Claims.
	Items []Claim `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// Budget caps a namespace's use of accelerators, enforced when Instances
// and Claims are created or started. Every Budget in a namespace applies.
type Budget struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// spec sets the limits.
	// +optional
	Spec BudgetSpec `json:"spec,omitempty" protobuf:"bytes,2,opt,name=spec"`
	// status is what is charged against the limits now.
	// +optional
	Status BudgetStatus `json:"status,omitempty" protobuf:"bytes,3,opt,name=status"`
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
	Hard BudgetResourceList `json:"hard,omitempty" protobuf:"bytes,1,rep,name=hard,casttype=BudgetResourceList,castkey=BudgetResourceName"`
	// period is what the accelerator-hours keys count over: a calendar
	// month (the default) or a number of UTC days.
	// +optional
	Period *BudgetPeriod `json:"period,omitempty" protobuf:"bytes,2,opt,name=period"`
	// onExhausted is what happens once an accelerator-hours key is spent:
	// starts and creates it counts are refused either way; with Stop,
	// kiln-controller also stops the Instances that run on it.
	// +optional
	OnExhausted BudgetExhaustedAction `json:"onExhausted,omitempty" protobuf:"bytes,3,opt,name=onExhausted,casttype=BudgetExhaustedAction"`
}

// BudgetPeriod is the span accelerator-hours count over. Set one field.
type BudgetPeriod struct {
	// calendar is "Month": from the first of the current UTC month.
	// +optional
	Calendar BudgetCalendar `json:"calendar,omitempty" protobuf:"bytes,1,opt,name=calendar,casttype=BudgetCalendar"`
	// rollingDays counts the last rollingDays UTC days, today included,
	// 1 to 31.
	// +optional
	RollingDays int32 `json:"rollingDays,omitempty" protobuf:"varint,2,opt,name=rollingDays"`
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
	Hard BudgetResourceList `json:"hard,omitempty" protobuf:"bytes,1,rep,name=hard,casttype=BudgetResourceList,castkey=BudgetResourceName"`
	// used is what running Instances and held Claims are charged, including
	// the charges in pending.
	// +optional
	Used BudgetResourceList `json:"used,omitempty" protobuf:"bytes,2,rep,name=used,casttype=BudgetResourceList,castkey=BudgetResourceName"`
	// pending lists charges admission has made for writes that are not yet
	// seen stored: a create or start in flight. They are part of used. The
	// budget reconciler drops each once its object is stored in the charged
	// state, or the write has had time to fail, so that used can be
	// recomputed from stored objects without losing a charge in flight; the
	// next charge drops the creates the API server already shows stored.
	// Kiln writes the list whole, and a uid appears in it at most once.
	// +optional
	// +listType=atomic
	Pending []BudgetCharge `json:"pending,omitempty" protobuf:"bytes,3,rep,name=pending"`
	// conditions say what the Budget can and cannot see. Guarded is False
	// when the namespace lacks the label gpu.kiln.dev/accelerators=kiln-only
	// that binds the Pod policy: Pods there may then get accelerators
	// without Kiln, and no Budget counts them. Counted is False when an
	// object could not be priced by its InstanceType (a partition profile
	// removed from the type since); it is then counted as the whole cards
	// it runs on, and the message names it.
	// +optional
	// +listType=map
	// +listMapKey=type
	Conditions []metav1.Condition `json:"conditions,omitempty" protobuf:"bytes,4,rep,name=conditions"`
	// periodStart is the start of the period consumed counts.
	// +optional
	PeriodStart *metav1.Time `json:"periodStart,omitempty" protobuf:"bytes,5,opt,name=periodStart"`
	// consumed is the card-hours held this period, by the Budget's
	// accelerator-hours keys, as of consumedTime.
	// +optional
	Consumed BudgetResourceList `json:"consumed,omitempty" protobuf:"bytes,6,rep,name=consumed,casttype=BudgetResourceList,castkey=BudgetResourceName"`
	// consumedTime is when consumed was counted.
	// +optional
	ConsumedTime *metav1.Time `json:"consumedTime,omitempty" protobuf:"bytes,7,opt,name=consumedTime"`
	// usage is the card-seconds held this period by InstanceType, as of
	// consumedTime, whatever the keys.
	// +optional
	// +listType=map
	// +listMapKey=instanceType
	Usage []BudgetUsage `json:"usage,omitempty" protobuf:"bytes,8,rep,name=usage"`
	// folded keeps, by UTC day and InstanceType, the usage of Instances and
	// Claims deleted since the Budget was made, for the last 31 days.
	// +optional
	// +listType=atomic
	Folded []UsageDay `json:"folded,omitempty" protobuf:"bytes,9,rep,name=folded"`
	// foldedUIDs are deleted objects whose usage is in folded and which
	// are still stored, waiting for their finalizer to go.
	// +optional
	// +listType=set
	FoldedUIDs []types.UID `json:"foldedUIDs,omitempty" protobuf:"bytes,10,rep,name=foldedUIDs,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// Budget condition types and reasons.
const (
	BudgetConditionGuarded = "Guarded"
	BudgetConditionCounted = "Counted"
	// BudgetConditionExhausted is True while an accelerator-hours key is
	// spent.
	BudgetConditionExhausted = "Exhausted"

	BudgetReasonNamespaceGuarded    = "NamespaceGuarded"
	BudgetReasonNamespaceNotGuarded = "NamespaceNotGuarded"
	BudgetReasonAllPriced           = "AllPriced"
	BudgetReasonUnpriced            = "Unpriced"
	BudgetReasonHoursLeft           = "HoursLeft"
	BudgetReasonHoursSpent          = "HoursSpent"
)

// BudgetUsage is the card-seconds of one InstanceType this period.
type BudgetUsage struct {
	// instanceType the cards are of.
	InstanceType string `json:"instanceType" protobuf:"bytes,1,opt,name=instanceType"`
	// cardSeconds held this period.
	CardSeconds resource.Quantity `json:"cardSeconds" protobuf:"bytes,2,opt,name=cardSeconds"`
	// idleCardSeconds is the part held after the devices were last active.
	// +optional
	IdleCardSeconds resource.Quantity `json:"idleCardSeconds,omitempty" protobuf:"bytes,3,opt,name=idleCardSeconds"`
}

// BudgetCharge is one admitted charge whose write is in flight.
type BudgetCharge struct {
	// kind of the charged object, Instance or Claim.
	Kind string `json:"kind" protobuf:"bytes,1,opt,name=kind"`
	// name of the charged object.
	Name string `json:"name" protobuf:"bytes,2,opt,name=name"`
	// uid of the charged object.
	UID types.UID `json:"uid" protobuf:"bytes,3,opt,name=uid,casttype=k8s.io/apimachinery/pkg/types.UID"`
	// resourceVersion the object had before the charged update; empty for
	// a create. Once the stored object has another, the update has landed
	// or lost a conflict, and either way this charge is settled.
	// +optional
	ResourceVersion string `json:"resourceVersion,omitempty" protobuf:"bytes,4,opt,name=resourceVersion"`
	// charge is the object's whole charge in its new state, by this
	// Budget's keys.
	Charge BudgetResourceList `json:"charge" protobuf:"bytes,5,rep,name=charge,casttype=BudgetResourceList,castkey=BudgetResourceName"`
	// time the charge was made.
	Time metav1.Time `json:"time" protobuf:"bytes,6,opt,name=time"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// BudgetList is a list of Budgets.
type BudgetList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// items is the list of Budgets.
	Items []Budget `json:"items" protobuf:"bytes,2,rep,name=items"`
}

// +genclient
// +genclient:nonNamespaced
// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeDevices is the accelerator inventory of one node, as its node agent
// (kiln-node-agent) reports it: every device, its health, and what
// holds it. Its name is the node's. Every authenticated user may read it,
// so it names no object: a holder is a kind and a Pod UID.
type NodeDevices struct {
	metav1.TypeMeta `json:",inline"`
	// Standard object metadata.
	// +optional
	metav1.ObjectMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`

	// status is what the node agent sees.
	// +optional
	Status NodeDevicesStatus `json:"status,omitempty" protobuf:"bytes,2,opt,name=status"`
}

// NodeDevicesStatus is a node's devices.
type NodeDevicesStatus struct {
	// devices of the node: whole cards, and the MIG devices of cards in
	// MIG mode in their place.
	// +optional
	// +listType=map
	// +listMapKey=uuid
	Devices []NodeDevice `json:"devices,omitempty" protobuf:"bytes,1,rep,name=devices"`
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
	UUID string `json:"uuid" protobuf:"bytes,1,opt,name=uuid"`
	// resource is the extended resource the device is served under, e.g.
	// nvidia.com/gpu or nvidia.com/mig-1g.10gb.
	Resource string `json:"resource" protobuf:"bytes,2,opt,name=resource"`
	// index of the card on the node; a MIG device has its card's.
	// +optional
	Index int32 `json:"index,omitempty" protobuf:"varint,3,opt,name=index"`
	// model of the card, e.g. NVIDIA-H100-80GB-HBM3.
	// +optional
	Model string `json:"model,omitempty" protobuf:"bytes,4,opt,name=model"`
	// memory of the device.
	// +optional
	Memory resource.Quantity `json:"memory,omitempty" protobuf:"bytes,5,opt,name=memory"`
	// pciBusID of the card.
	// +optional
	PCIBusID string `json:"pciBusID,omitempty" protobuf:"bytes,6,opt,name=pciBusID"`
	// parent is the uuid of the card a MIG device is cut from.
	// +optional
	Parent string `json:"parent,omitempty" protobuf:"bytes,7,opt,name=parent"`
	// profile of a MIG device, e.g. 1g.10gb.
	// +optional
	Profile string `json:"profile,omitempty" protobuf:"bytes,8,opt,name=profile"`
	// nvLinkPeers are the uuids of the cards this one has an NVLink to.
	// +optional
	// +listType=set
	NVLinkPeers []string `json:"nvLinkPeers,omitempty" protobuf:"bytes,9,rep,name=nvLinkPeers"`
	// health is Healthy or Unhealthy.
	Health DeviceHealth `json:"health" protobuf:"bytes,10,opt,name=health,casttype=DeviceHealth"`
	// reason an Unhealthy device is, e.g. "XID 79".
	// +optional
	Reason string `json:"reason,omitempty" protobuf:"bytes,11,opt,name=reason"`
	// holder is what holds the device now; none when it is free.
	// +optional
	Holder *DeviceHolder `json:"holder,omitempty" protobuf:"bytes,12,opt,name=holder"`
	// utilization is the percentage of the time the device's engines were
	// busy, 0 to 100, smoothed over the node agent's recent samples. The
	// agent publishes a change of more than 10 points, or a device waking
	// up, at once, and other changes at most once a minute. Unset where
	// the agent cannot sample the device.
	// +optional
	Utilization *int32 `json:"utilization,omitempty" protobuf:"varint,13,opt,name=utilization"`
	// memoryUsed is the device memory in use at that sample.
	// +optional
	MemoryUsed *resource.Quantity `json:"memoryUsed,omitempty" protobuf:"bytes,14,opt,name=memoryUsed"`
	// lastActiveTime is the last sample at which the device's utilization
	// was above the node agent's activity threshold; unset when it has
	// not been active since the agent began sampling it.
	// +optional
	LastActiveTime *metav1.Time `json:"lastActiveTime,omitempty" protobuf:"bytes,15,opt,name=lastActiveTime"`
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
	Kind DeviceHolderKind `json:"kind" protobuf:"bytes,1,opt,name=kind,casttype=DeviceHolderKind"`
	// podUID is the Pod the kubelet allocated the device to.
	PodUID types.UID `json:"podUID" protobuf:"bytes,2,opt,name=podUID,casttype=k8s.io/apimachinery/pkg/types.UID"`
}

// +k8s:deepcopy-gen:interfaces=k8s.io/apimachinery/pkg/runtime.Object

// NodeDevicesList is a list of NodeDevices.
type NodeDevicesList struct {
	metav1.TypeMeta `json:",inline"`
	// Standard list metadata.
	// +optional
	metav1.ListMeta `json:"metadata,omitempty" protobuf:"bytes,1,opt,name=metadata"`
	// items is the list of NodeDevices.
	Items []NodeDevices `json:"items" protobuf:"bytes,2,rep,name=items"`
}
