package validation

import (
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// validInstance is a defaulted Instance that uses most of the spec.
func validInstance() *gpu.Instance {
	return &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "train-1", Namespace: "team-a"},
		Spec: gpu.InstanceSpec{
			Type:             "h100-80gb",
			Image:            "nvcr.io/nvidia/pytorch:24.05-py3",
			ImagePullPolicy:  corev1.PullIfNotPresent,
			ImagePullSecrets: []corev1.LocalObjectReference{{Name: "ngc"}, {Name: "ghcr"}},
			Command:          []string{"jupyter", "lab"},
			Args:             []string{"--ip=0.0.0.0"},
			Env: []corev1.EnvVar{
				{Name: "HF_HOME", Value: "/workspace/hf"},
				{Name: "POD_NAME", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}},
				{Name: "HF_TOKEN", ValueFrom: &corev1.EnvVarSource{SecretKeyRef: &corev1.SecretKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "hf"}, Key: "token",
				}}},
			},
			Resources: gpu.InstanceResources{
				Accelerators: ptr.To(int32(2)),
				CPU:          qtyPtr("32"),
				Memory:       qtyPtr("256Gi"),
			},
			Ports: []gpu.InstancePort{
				{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP},
				{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP},
			},
			SSH:       &gpu.SSHSpec{AuthorizedKeysSecret: "ssh-keys"},
			Workspace: &gpu.Workspace{EmptyDirSize: qtyPtr("100Gi")},
			Volumes: []gpu.InstanceVolume{
				{Name: "datasets", MountPath: "/data", ReadOnly: true,
					PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "imagenet"}},
				{Name: "config", MountPath: "/etc/train",
					ConfigMap: &corev1.ConfigMapVolumeSource{
						LocalObjectReference: corev1.LocalObjectReference{Name: "train-config"},
						Items:                []corev1.KeyToPath{{Key: "config.yaml", Path: "config.yaml", Mode: ptr.To(int32(0o644))}},
						DefaultMode:          ptr.To(int32(0o444)),
					}},
				{Name: "creds", MountPath: "/var/run/creds", Secret: &corev1.SecretVolumeSource{SecretName: "s3"}},
			},
			NodeName: "gpu-node-1.example.com",
		},
	}
}

func validInstanceStatus() gpu.InstanceStatus {
	return gpu.InstanceStatus{
		Phase:              gpu.InstanceReady,
		Message:            "running",
		Conditions:         []metav1.Condition{condition(gpu.InstanceConditionReady)},
		ObservedGeneration: 2,
		NodeName:           "gpu-node-1",
		HostIPs:            []string{"203.0.113.7", "10.0.0.7"},
		PodIPs:             []string{"10.244.1.12", "fd00::12"},
		Ports: []gpu.InstancePortStatus{
			{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30888},
			{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP},
		},
		Allocations: []gpu.DeviceAllocation{
			{Device: "GPU-1b2c3d4e", Mode: gpu.AllocationExclusive},
			{Device: "GPU-5f6a7b8c", Mode: gpu.AllocationSlice, MemoryPercent: 50, CoresPercent: 100},
			{Device: "MIG-9d0e1f2a", Mode: gpu.AllocationPartition, Profile: "1g.10gb"},
		},
		StartTime: &testTime,
	}
}

func TestValidateInstance(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Instance)
		want   field.ErrorList
	}{
		// Accepted.
		{name: "valid", mutate: func(*gpu.Instance) {}},
		{name: "minimal", mutate: func(o *gpu.Instance) {
			o.Spec = gpu.InstanceSpec{
				Type: "cpu", Image: "ubuntu", ImagePullPolicy: corev1.PullAlways,
				Resources: gpu.InstanceResources{Accelerators: ptr.To(int32(0))},
			}
		}},
		{name: "64 accelerators", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To(int32(64)) }},
		{name: "slice", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 100, CoresPercent: 1}
		}},
		{name: "partition", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Partition = "1g.10gb+me"
		}},
		{name: "same port number over TCP and UDP", mutate: func(o *gpu.Instance) {
			o.Spec.Ports = []gpu.InstancePort{
				{Name: "dns-tcp", Port: 53, Protocol: corev1.ProtocolTCP},
				{Name: "dns-udp", Port: 53, Protocol: corev1.ProtocolUDP},
				{Name: "sctp", Port: 65535, Protocol: corev1.ProtocolSCTP},
			}
		}},
		{name: "workspace on a claim at another path", mutate: func(o *gpu.Instance) {
			o.Spec.Workspace = &gpu.Workspace{MountPath: "/home/jovyan", ClaimName: "home"}
			o.Spec.Volumes[0].MountPath = "/workspace"
		}},
		{name: "volume below the workspace", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].MountPath = "/workspace/data" }},
		{name: "hostPath volume", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes = []gpu.InstanceVolume{{Name: "models", MountPath: "/models",
				HostPath: &corev1.HostPathVolumeSource{Path: "/mnt/models", Type: ptr.To(corev1.HostPathDirectory)}}}
		}},
		{name: "env from configMap and resource", mutate: func(o *gpu.Instance) {
			o.Spec.Env = []corev1.EnvVar{
				{Name: "MODE", ValueFrom: &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
					LocalObjectReference: corev1.LocalObjectReference{Name: "train-config"}, Key: "mode"}}},
				{Name: "MEM_LIMIT", ValueFrom: &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{Resource: "limits.memory"}}},
				{Name: "EMPTY"},
			}
		}},
		{name: "claimName", mutate: func(o *gpu.Instance) { o.Spec.ClaimName, o.Spec.NodeName = "four-h100s", "" }},
		{name: "no workspace", mutate: func(o *gpu.Instance) { o.Spec.Workspace = nil }},
		{name: "idleStopAfter", mutate: func(o *gpu.Instance) { o.Spec.IdleStopAfter = &metav1.Duration{Duration: time.Minute} }},
		{name: "idleStopAfter zero", mutate: func(o *gpu.Instance) { o.Spec.IdleStopAfter = &metav1.Duration{} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.idleStopAfter"}}},
		{name: "idleStopAfter negative", mutate: func(o *gpu.Instance) { o.Spec.IdleStopAfter = &metav1.Duration{Duration: -time.Second} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.idleStopAfter"}}},

		// Metadata.
		{name: "namespace missing", mutate: func(o *gpu.Instance) { o.Namespace = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "metadata.namespace"}}},
		{name: "name not a DNS subdomain", mutate: func(o *gpu.Instance) { o.Name = "Train_1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		// A Service is named after the Instance, so dots are refused.
		{name: "name with a dot", mutate: func(o *gpu.Instance) { o.Name = "train.1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
		{name: "name starting with a digit", mutate: func(o *gpu.Instance) { o.Name = "1train" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},

		// type, image, pull policy and secrets.
		{name: "type missing", mutate: func(o *gpu.Instance) { o.Spec.Type = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.type"}}},
		{name: "type not a DNS subdomain", mutate: func(o *gpu.Instance) { o.Spec.Type = "H100" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}}},
		{name: "image missing", mutate: func(o *gpu.Instance) { o.Spec.Image = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.image"}}},
		{name: "image with whitespace", mutate: func(o *gpu.Instance) { o.Spec.Image = " pytorch:latest\n" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.image"}}},
		{name: "pull policy missing", mutate: func(o *gpu.Instance) { o.Spec.ImagePullPolicy = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.imagePullPolicy"}}},
		{name: "pull policy unknown", mutate: func(o *gpu.Instance) { o.Spec.ImagePullPolicy = "Sometimes" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.imagePullPolicy"}}},
		{name: "pull secret name missing", mutate: func(o *gpu.Instance) { o.Spec.ImagePullSecrets[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.imagePullSecrets[0].name"}}},
		{name: "pull secret name invalid", mutate: func(o *gpu.Instance) { o.Spec.ImagePullSecrets[1].Name = "GHCR" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.imagePullSecrets[1].name"}}},
		{name: "pull secrets duplicated", mutate: func(o *gpu.Instance) { o.Spec.ImagePullSecrets[1].Name = "ngc" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.imagePullSecrets[1].name"}}},

		// env.
		{name: "env name missing", mutate: func(o *gpu.Instance) { o.Spec.Env[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.env[0].name"}}},
		{name: "env name invalid", mutate: func(o *gpu.Instance) { o.Spec.Env[0].Name = "1HF=HOME" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.env[0].name"}}},
		{name: "env names duplicated", mutate: func(o *gpu.Instance) { o.Spec.Env[2].Name = "HF_HOME" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.env[2].name"}}},
		// What the runtime or a sharing layer reads would override the
		// allocation Kiln charged.
		{name: "env picks the cards for the toolkit", mutate: func(o *gpu.Instance) { o.Spec.Env[0] = corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"} },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[0].name"}}},
		{name: "env asks for more of the driver", mutate: func(o *gpu.Instance) { o.Spec.Env[0] = corev1.EnvVar{Name: "NVIDIA_DRIVER_CAPABILITIES", Value: "all"} },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[0].name"}}},
		{name: "env sets an MPS limit", mutate: func(o *gpu.Instance) {
			o.Spec.Env[0] = corev1.EnvVar{Name: "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT", Value: "0=80G"}
		},
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[0].name"}}},
		{name: "env lifts a sharing layer's memory limit", mutate: func(o *gpu.Instance) {
			o.Spec.Env[0] = corev1.EnvVar{Name: "CUDA_DEVICE_MEMORY_LIMIT_0", Value: "80g"}
		},
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[0].name"}}},
		{name: "env preloads a library", mutate: func(o *gpu.Instance) { o.Spec.Env[0] = corev1.EnvVar{Name: "LD_PRELOAD", Value: "/x.so"} },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[0].name"}}},
		{name: "env from a Secret under a reserved name", mutate: func(o *gpu.Instance) { o.Spec.Env[2].Name = "AMD_VISIBLE_DEVICES" },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[2].name"}}},
		{name: "env names near the reserved ones pass", mutate: func(o *gpu.Instance) {
			o.Spec.Env[0] = corev1.EnvVar{Name: "CUDA_VISIBLE_DEVICES", Value: "0"}
			o.Spec.Env = append(o.Spec.Env, corev1.EnvVar{Name: "MY_NVIDIA_TOKEN", Value: "x"}, corev1.EnvVar{Name: "LD_LIBRARY_PATH", Value: "/opt"})
		}},
		{name: "env value and valueFrom", mutate: func(o *gpu.Instance) { o.Spec.Env[1].Value = "x" },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[1].valueFrom"}}},
		{name: "env valueFrom empty", mutate: func(o *gpu.Instance) { o.Spec.Env[1].ValueFrom = &corev1.EnvVarSource{} },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.env[1].valueFrom"}}},
		{name: "env valueFrom with two sources", mutate: func(o *gpu.Instance) {
			o.Spec.Env[1].ValueFrom.ResourceFieldRef = &corev1.ResourceFieldSelector{Resource: "limits.cpu"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.env[1].valueFrom"}}},
		{name: "env fieldRef without path", mutate: func(o *gpu.Instance) { o.Spec.Env[1].ValueFrom.FieldRef.FieldPath = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.env[1].valueFrom.fieldRef.fieldPath"}}},
		{name: "env resourceFieldRef without resource", mutate: func(o *gpu.Instance) {
			o.Spec.Env[1].ValueFrom = &corev1.EnvVarSource{ResourceFieldRef: &corev1.ResourceFieldSelector{}}
		}, want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.env[1].valueFrom.resourceFieldRef.resource"}}},
		{name: "env secretKeyRef without name and key", mutate: func(o *gpu.Instance) {
			o.Spec.Env[2].ValueFrom.SecretKeyRef = &corev1.SecretKeySelector{}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeRequired, Field: "spec.env[2].valueFrom.secretKeyRef.name"},
			{Type: field.ErrorTypeRequired, Field: "spec.env[2].valueFrom.secretKeyRef.key"},
		}},
		{name: "env configMapKeyRef with bad name and key", mutate: func(o *gpu.Instance) {
			o.Spec.Env[2].ValueFrom = &corev1.EnvVarSource{ConfigMapKeyRef: &corev1.ConfigMapKeySelector{
				LocalObjectReference: corev1.LocalObjectReference{Name: "Config"}, Key: "a/b"}}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.env[2].valueFrom.configMapKeyRef.name"},
			{Type: field.ErrorTypeInvalid, Field: "spec.env[2].valueFrom.configMapKeyRef.key"},
		}},
		{name: "env fileKeyRef", mutate: func(o *gpu.Instance) {
			o.Spec.Env[2].ValueFrom = &corev1.EnvVarSource{FileKeyRef: &corev1.FileKeySelector{VolumeName: "env", Path: "env", Key: "K"}}
		}, want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[2].valueFrom.fileKeyRef"}}},

		// resources.
		{name: "no accelerator share", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = nil },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.resources"}}},
		{name: "accelerators and slice", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 50, CoresPercent: 50}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources"}}},
		{name: "accelerators 0 and partition", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = ptr.To(int32(0))
			o.Spec.Resources.Partition = "1g.10gb"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources"}}},
		{name: "all three shares", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 50, CoresPercent: 50}
			o.Spec.Resources.Partition = "1g.10gb"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources"}}},
		{name: "accelerators negative", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To(int32(-1)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources.accelerators"}}},
		{name: "accelerators above 64", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To(int32(65)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources.accelerators"}}},
		{name: "slice percents zero", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Slice = &gpu.SliceRequest{}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.slice.memoryPercent"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.slice.coresPercent"},
		}},
		{name: "slice percents above 100", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 101, CoresPercent: 150}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.slice.memoryPercent"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.slice.coresPercent"},
		}},
		{name: "partition not a profile", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Partition = "1G.10GB"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.resources.partition"}}},
		{name: "host resources not positive", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.CPU = qtyPtr("0")
			o.Spec.Resources.Memory = qtyPtr("-1Gi")
			o.Spec.Resources.EphemeralStorage = qtyPtr("0")
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.cpu"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.memory"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.ephemeralStorage"},
		}},

		// Exponents that would make a comparison run for hours are
		// refused before anything compares them.
		{name: "host resources with runaway exponents", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.CPU = qtyPtr("1e2020020020")
			o.Spec.Resources.Memory = qtyPtr("0e2147483647")
			o.Spec.Resources.EphemeralStorage = qtyPtr("12345678901234567890123456789012345678901234567890")
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.cpu"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.memory"},
			{Type: field.ErrorTypeInvalid, Field: "spec.resources.ephemeralStorage"},
		}},
		{name: "host resources at the bounds of what is compared", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.CPU = qtyPtr("1e36")
			o.Spec.Resources.Memory = qtyPtr("1n")
		}},

		// ports.
		{name: "port name missing", mutate: func(o *gpu.Instance) { o.Spec.Ports[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.ports[0].name"}}},
		{name: "port name invalid", mutate: func(o *gpu.Instance) { o.Spec.Ports[0].Name = "Jupyter_Lab" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.ports[0].name"}}},
		{name: "port names duplicated", mutate: func(o *gpu.Instance) { o.Spec.Ports[1].Name = "jupyter" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.ports[1].name"}}},
		{name: "port zero", mutate: func(o *gpu.Instance) { o.Spec.Ports[0].Port = 0 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.ports[0].port"}}},
		{name: "port too high", mutate: func(o *gpu.Instance) { o.Spec.Ports[1].Port = 65536 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.ports[1].port"}}},
		{name: "port numbers duplicated", mutate: func(o *gpu.Instance) { o.Spec.Ports[1].Port = 8888 },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.ports[1].port"}}},
		{name: "protocol missing", mutate: func(o *gpu.Instance) { o.Spec.Ports[0].Protocol = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.ports[0].protocol"}}},
		{name: "protocol unknown", mutate: func(o *gpu.Instance) { o.Spec.Ports[0].Protocol = "ICMP" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.ports[0].protocol"}}},

		// ssh.
		{name: "ssh secret missing", mutate: func(o *gpu.Instance) { o.Spec.SSH.AuthorizedKeysSecret = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.ssh.authorizedKeysSecret"}}},
		{name: "ssh secret invalid", mutate: func(o *gpu.Instance) { o.Spec.SSH.AuthorizedKeysSecret = "SSH keys" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.ssh.authorizedKeysSecret"}}},

		// workspace.
		{name: "workspace mountPath relative", mutate: func(o *gpu.Instance) { o.Spec.Workspace.MountPath = "workspace" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.workspace.mountPath"}}},
		{name: "workspace mountPath with ..", mutate: func(o *gpu.Instance) { o.Spec.Workspace.MountPath = "/home/../etc" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.workspace.mountPath"}}},
		{name: "workspace size zero", mutate: func(o *gpu.Instance) { o.Spec.Workspace.EmptyDirSize = qtyPtr("0") },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.workspace.size"}}},
		{name: "workspace size and claimName", mutate: func(o *gpu.Instance) { o.Spec.Workspace.ClaimName = "home" },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.workspace.size"}}},
		{name: "workspace claimName invalid", mutate: func(o *gpu.Instance) {
			o.Spec.Workspace = &gpu.Workspace{ClaimName: "Home_PVC"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.workspace.claimName"}}},

		// volumes.
		{name: "volume name missing", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[0].name"}}},
		{name: "volume name not a DNS label", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].Name = "data.sets" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[0].name"}}},
		{name: "volume names duplicated", mutate: func(o *gpu.Instance) { o.Spec.Volumes[2].Name = "datasets" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.volumes[2].name"}}},
		{name: "volume mountPath missing", mutate: func(o *gpu.Instance) { o.Spec.Volumes[1].MountPath = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[1].mountPath"}}},
		{name: "volume mountPath relative", mutate: func(o *gpu.Instance) { o.Spec.Volumes[1].MountPath = "etc/train" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].mountPath"}}},
		{name: "volume mountPath with ..", mutate: func(o *gpu.Instance) { o.Spec.Volumes[1].MountPath = "/data/../etc" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].mountPath"}}},
		{name: "volume mountPaths duplicated", mutate: func(o *gpu.Instance) { o.Spec.Volumes[2].MountPath = "/data/" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "spec.volumes[2].mountPath"}}},
		{name: "volume on the default workspace path", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].MountPath = "/workspace" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[0].mountPath"}}},
		{name: "volume on the default workspace path, no workspace", mutate: func(o *gpu.Instance) {
			o.Spec.Workspace = nil
			o.Spec.Volumes[0].MountPath = "/workspace/"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[0].mountPath"}}},
		{name: "volume on a moved workspace path", mutate: func(o *gpu.Instance) {
			o.Spec.Workspace.MountPath = "/home/jovyan"
			o.Spec.Volumes[1].MountPath = "/home/jovyan/"
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].mountPath"}}},
		{name: "volume without a source", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].PersistentVolumeClaim = nil },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[0]"}}},
		{name: "volume with two sources", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[0].Secret = &corev1.SecretVolumeSource{SecretName: "s3"}
		}, want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.volumes[0].secret"}}},
		{name: "volume with four sources", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[0].ConfigMap = &corev1.ConfigMapVolumeSource{}
			o.Spec.Volumes[0].Secret = &corev1.SecretVolumeSource{}
			o.Spec.Volumes[0].HostPath = &corev1.HostPathVolumeSource{}
		}, want: field.ErrorList{
			{Type: field.ErrorTypeForbidden, Field: "spec.volumes[0].configMap"},
			{Type: field.ErrorTypeForbidden, Field: "spec.volumes[0].secret"},
			{Type: field.ErrorTypeForbidden, Field: "spec.volumes[0].hostPath"},
		}},
		{name: "pvc claimName missing", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[0].persistentVolumeClaim.claimName"}}},
		{name: "pvc claimName invalid", mutate: func(o *gpu.Instance) { o.Spec.Volumes[0].PersistentVolumeClaim.ClaimName = "ImageNet" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[0].persistentVolumeClaim.claimName"}}},
		{name: "configMap name missing", mutate: func(o *gpu.Instance) { o.Spec.Volumes[1].ConfigMap.Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[1].configMap.name"}}},
		{name: "configMap items and modes invalid", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[1].ConfigMap.Items = []corev1.KeyToPath{
				{Key: "", Path: "/etc/passwd"},
				{Key: "a", Path: "../escape", Mode: ptr.To(int32(0o1000))},
				{Key: "b", Path: ""},
			}
			o.Spec.Volumes[1].ConfigMap.DefaultMode = ptr.To(int32(-1))
		}, want: field.ErrorList{
			{Type: field.ErrorTypeRequired, Field: "spec.volumes[1].configMap.items[0].key"},
			{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].configMap.items[0].path"},
			{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].configMap.items[1].path"},
			{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].configMap.items[1].mode"},
			{Type: field.ErrorTypeRequired, Field: "spec.volumes[1].configMap.items[2].path"},
			{Type: field.ErrorTypeInvalid, Field: "spec.volumes[1].configMap.defaultMode"},
		}},
		{name: "secret secretName missing", mutate: func(o *gpu.Instance) { o.Spec.Volumes[2].Secret.SecretName = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[2].secret.secretName"}}},
		{name: "secret defaultMode too high", mutate: func(o *gpu.Instance) { o.Spec.Volumes[2].Secret.DefaultMode = ptr.To(int32(0o7777)) },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[2].secret.defaultMode"}}},
		{name: "hostPath path missing", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[2].Secret = nil
			o.Spec.Volumes[2].HostPath = &corev1.HostPathVolumeSource{}
		}, want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.volumes[2].hostPath.path"}}},
		{name: "hostPath path relative", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[2].Secret = nil
			o.Spec.Volumes[2].HostPath = &corev1.HostPathVolumeSource{Path: "mnt/models"}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.volumes[2].hostPath.path"}}},
		{name: "hostPath type unknown", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes[2].Secret = nil
			o.Spec.Volumes[2].HostPath = &corev1.HostPathVolumeSource{Path: "/mnt", Type: ptr.To(corev1.HostPathType("Folder"))}
		}, want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "spec.volumes[2].hostPath.type"}}},

		// Sizes: what one Instance may hold and store.
		{name: "8 ports", mutate: func(o *gpu.Instance) { o.Spec.Ports = ports(8) }},
		{name: "9 ports", mutate: func(o *gpu.Instance) { o.Spec.Ports = ports(9) },
			want: field.ErrorList{{Type: field.ErrorTypeTooMany, Field: "spec.ports"}}},
		{name: "257 env vars", mutate: func(o *gpu.Instance) {
			o.Spec.Env = nil
			for i := range 257 {
				o.Spec.Env = append(o.Spec.Env, corev1.EnvVar{Name: fmt.Sprintf("V%d", i)})
			}
		}, want: field.ErrorList{{Type: field.ErrorTypeTooMany, Field: "spec.env"}}},
		{name: "env values over 256 KiB", mutate: func(o *gpu.Instance) {
			o.Spec.Env = []corev1.EnvVar{{Name: "A", Value: strings.Repeat("x", 200*1024)}, {Name: "B", Value: strings.Repeat("x", 100*1024)}}
		}, want: field.ErrorList{{Type: field.ErrorTypeTooLong, Field: "spec.env"}}},
		{name: "args over 32 KiB", mutate: func(o *gpu.Instance) {
			o.Spec.Args = []string{strings.Repeat("a", 20*1024), strings.Repeat("b", 20*1024)}
		},
			want: field.ErrorList{{Type: field.ErrorTypeTooLong, Field: "spec.args"}}},
		{name: "command of 32 KiB", mutate: func(o *gpu.Instance) { o.Spec.Command = []string{strings.Repeat("c", 32*1024)} }},
		{name: "33 volumes", mutate: func(o *gpu.Instance) {
			o.Spec.Volumes = nil
			for i := range 33 {
				o.Spec.Volumes = append(o.Spec.Volumes, gpu.InstanceVolume{Name: fmt.Sprintf("v%d", i), MountPath: fmt.Sprintf("/mnt/%d", i),
					ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "c"}}})
			}
		}, want: field.ErrorList{{Type: field.ErrorTypeTooMany, Field: "spec.volumes"}}},

		// nodeName, claimName.
		{name: "nodeName invalid", mutate: func(o *gpu.Instance) { o.Spec.NodeName = "GPU_Node_1" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.nodeName"}}},
		{name: "claimName invalid", mutate: func(o *gpu.Instance) { o.Spec.ClaimName, o.Spec.NodeName = "four h100s", "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "claimName longer than a Claim name may be", mutate: func(o *gpu.Instance) { o.Spec.ClaimName, o.Spec.NodeName = strings.Repeat("c", 64), "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "claimName with nodeName", mutate: func(o *gpu.Instance) { o.Spec.ClaimName, o.Spec.NodeName = "four-h100s", "gpu-1" },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.nodeName"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			obj := validInstance()
			tc.mutate(obj)
			expectErrors(t, ValidateInstance(obj), tc.want)
		})
	}
}

// stoppedAt makes the stored Instance of TestValidateInstanceUpdate a
// stopped one at generation 3, whose phase the controller reported for
// generation observed.
func stoppedAt(phase gpu.InstancePhase, observed int64) func(*gpu.Instance) {
	return func(o *gpu.Instance) {
		o.Spec.Stopped, o.Generation = true, 3
		o.Status.Phase, o.Status.ObservedGeneration = phase, observed
	}
}

func TestValidateInstanceUpdate(t *testing.T) {
	cases := []struct {
		name string
		// old changes the stored Instance, which is on Claim four-h100s.
		old    func(*gpu.Instance)
		mutate func(*gpu.Instance)
		want   field.ErrorList
	}{
		{name: "unchanged", mutate: func(*gpu.Instance) {}},
		{name: "stop", mutate: func(o *gpu.Instance) { o.Spec.Stopped = true }},
		// One stored before the check is not stuck: it may stop and be
		// edited, as long as it adds no such variable.
		{name: "a runtime variable stored before may stay",
			old: func(o *gpu.Instance) {
				o.Spec.Env = append(o.Spec.Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
			},
			mutate: func(o *gpu.Instance) { o.Spec.Stopped = true }},
		{name: "a runtime variable stored before may not change",
			old: func(o *gpu.Instance) {
				o.Spec.Env = append(o.Spec.Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "0"})
			},
			mutate: func(o *gpu.Instance) { o.Spec.Env[3].Value = "all" },
			want:   field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[3].name"}}},
		{name: "a runtime variable may not be added", mutate: func(o *gpu.Instance) {
			o.Spec.Env = append(o.Spec.Env, corev1.EnvVar{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"})
		},
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.env[3].name"}}},
		{name: "new image and share of a stopped Instance", old: stoppedAt(gpu.InstanceStopped, 3), mutate: func(o *gpu.Instance) {
			o.Spec.Image = "nvcr.io/nvidia/pytorch:24.06-py3"
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 25, CoresPercent: 25}
		}},
		// Its Pod holds the old accelerators until it is gone, while the
		// Budget would count the new request at once.
		{name: "a running Instance may grow", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To[int32](4) }},
		{name: "a running Instance may not shrink", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To[int32](1) },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.resources"}}},
		{name: "a running Instance may not turn into a slice", mutate: func(o *gpu.Instance) {
			o.Spec.Resources.Accelerators = nil
			o.Spec.Resources.Slice = &gpu.SliceRequest{MemoryPercent: 25, CoresPercent: 25}
		},
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.resources"}}},
		{name: "nor shrink in the write that stops it", mutate: func(o *gpu.Instance) {
			o.Spec.Stopped, o.Spec.Resources.Accelerators = true, ptr.To[int32](1)
		},
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.resources"}}},
		{name: "nor while it is stopping", old: stoppedAt(gpu.InstanceStopping, 3), mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To[int32](1) },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.resources"}}},
		{name: "nor when the controller has not seen the stop", old: stoppedAt(gpu.InstanceStopped, 2), mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To[int32](1) },
			want: field.ErrorList{{Type: field.ErrorTypeForbidden, Field: "spec.resources"}}},
		{name: "a stopped Instance may shrink", old: stoppedAt(gpu.InstanceStopped, 3), mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = ptr.To[int32](1) }},
		{name: "type is immutable", mutate: func(o *gpu.Instance) { o.Spec.Type = "a100-40gb" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}}},
		{name: "claimName is immutable", mutate: func(o *gpu.Instance) { o.Spec.ClaimName = "other" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "claimName cannot be removed", mutate: func(o *gpu.Instance) { o.Spec.ClaimName = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "claimName cannot be added", old: func(o *gpu.Instance) { o.Spec.ClaimName = "" },
			mutate: func(o *gpu.Instance) { o.Spec.ClaimName = "four-h100s" },
			want:   field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "claimName changed to an invalid name", mutate: func(o *gpu.Instance) { o.Spec.ClaimName = "Four H100s" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.claimName"}, {Type: field.ErrorTypeInvalid, Field: "spec.claimName"}}},
		{name: "stopped and started on its Claim", mutate: func(o *gpu.Instance) { o.Spec.Stopped = !o.Spec.Stopped }},
		{name: "type changed to an invalid name", mutate: func(o *gpu.Instance) { o.Spec.Type = "A100" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "spec.type"}, {Type: field.ErrorTypeInvalid, Field: "spec.type"}}},
		{name: "new spec is validated", mutate: func(o *gpu.Instance) { o.Spec.Resources.Accelerators = nil },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "spec.resources"}}},
		{name: "namespace is immutable", mutate: func(o *gpu.Instance) { o.Namespace = "team-b" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.namespace"}}},
		{name: "resourceVersion required", mutate: func(o *gpu.Instance) { o.ResourceVersion = "" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.resourceVersion"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstance()
			// On a Claim, the Claim's node is the Instance's.
			old.ResourceVersion, old.Spec.ClaimName, old.Spec.NodeName = "42", "four-h100s", ""
			if tc.old != nil {
				tc.old(old)
			}
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateInstanceUpdate(obj, old), tc.want)
		})
	}
}

func TestValidateInstanceStatusUpdate(t *testing.T) {
	cases := []struct {
		name   string
		mutate func(*gpu.Instance)
		want   field.ErrorList
	}{
		{name: "valid", mutate: func(*gpu.Instance) {}},
		{name: "empty status", mutate: func(o *gpu.Instance) { o.Status = gpu.InstanceStatus{} }},
		{name: "every phase", mutate: func(o *gpu.Instance) { o.Status.Phase = gpu.InstanceDeleting }},
		{name: "non-canonical IPv6 from the node", mutate: func(o *gpu.Instance) { o.Status.HostIPs = []string{"2001:DB8:0:0::1"} }},
		{name: "spec is not checked here", mutate: func(o *gpu.Instance) { o.Spec.Resources = gpu.InstanceResources{} }},

		{name: "activity", mutate: func(o *gpu.Instance) {
			o.Status.Activity = &gpu.InstanceActivity{LastActiveTime: &metav1.Time{}, Utilization: ptr.To[int32](100), MemoryUsed: ptr.To(resource.MustParse("3Gi"))}
		}},
		{name: "activity utilization over 100", mutate: func(o *gpu.Instance) { o.Status.Activity = &gpu.InstanceActivity{Utilization: ptr.To[int32](101)} },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.activity.utilization"}}},
		{name: "activity memory negative", mutate: func(o *gpu.Instance) {
			o.Status.Activity = &gpu.InstanceActivity{MemoryUsed: ptr.To(resource.MustParse("-1"))}
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.activity.memoryUsed"}}},
		{name: "phase unknown", mutate: func(o *gpu.Instance) { o.Status.Phase = "Running" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.phase"}}},
		{name: "condition without status", mutate: func(o *gpu.Instance) { o.Status.Conditions[0].Status = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.conditions[0].status"}}},
		{name: "observedGeneration negative", mutate: func(o *gpu.Instance) { o.Status.ObservedGeneration = -1 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.observedGeneration"}}},
		{name: "nodeName invalid", mutate: func(o *gpu.Instance) { o.Status.NodeName = "GPU_Node" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.nodeName"}}},
		{name: "hostIP invalid", mutate: func(o *gpu.Instance) { o.Status.HostIPs[1] = "not-an-ip" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.hostIPs[1]"}}},
		{name: "podIP invalid", mutate: func(o *gpu.Instance) { o.Status.PodIPs[0] = "10.244.1.256" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.podIPs[0]"}}},
		{name: "podIP with leading zeros", mutate: func(o *gpu.Instance) { o.Status.PodIPs[0] = "010.244.1.12" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.podIPs[0]"}}},
		{name: "port names duplicated", mutate: func(o *gpu.Instance) { o.Status.Ports[1].Name = "jupyter" },
			want: field.ErrorList{{Type: field.ErrorTypeDuplicate, Field: "status.ports[1].name"}}},
		{name: "port name missing", mutate: func(o *gpu.Instance) { o.Status.Ports[0].Name = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.ports[0].name"}}},
		{name: "port out of range", mutate: func(o *gpu.Instance) { o.Status.Ports[0].Port = 0 },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.ports[0].port"}}},
		{name: "nodePort out of range", mutate: func(o *gpu.Instance) {
			o.Status.Ports[0].NodePort = -1
			o.Status.Ports[1].NodePort = 65536
		}, want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.ports[0].nodePort"}, {Type: field.ErrorTypeInvalid, Field: "status.ports[1].nodePort"}}},
		{name: "port protocol unknown", mutate: func(o *gpu.Instance) { o.Status.Ports[0].Protocol = "ICMP" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.ports[0].protocol"}}},
		{name: "allocation device missing", mutate: func(o *gpu.Instance) { o.Status.Allocations[0].Device = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.allocations[0].device"}}},
		{name: "allocation mode missing", mutate: func(o *gpu.Instance) { o.Status.Allocations[0].Mode = "" },
			want: field.ErrorList{{Type: field.ErrorTypeRequired, Field: "status.allocations[0].mode"}}},
		{name: "allocation mode unknown", mutate: func(o *gpu.Instance) { o.Status.Allocations[0].Mode = "Shared" },
			want: field.ErrorList{{Type: field.ErrorTypeNotSupported, Field: "status.allocations[0].mode"}}},
		{name: "allocation percents out of range", mutate: func(o *gpu.Instance) {
			o.Status.Allocations[1].MemoryPercent = 101
			o.Status.Allocations[1].CoresPercent = -1
		}, want: field.ErrorList{
			{Type: field.ErrorTypeInvalid, Field: "status.allocations[1].memoryPercent"},
			{Type: field.ErrorTypeInvalid, Field: "status.allocations[1].coresPercent"},
		}},
		{name: "allocation profile invalid", mutate: func(o *gpu.Instance) { o.Status.Allocations[2].Profile = "1G.10GB" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "status.allocations[2].profile"}}},
		{name: "metadata update rules apply", mutate: func(o *gpu.Instance) { o.Name = "train-2" },
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "metadata.name"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			old := validInstance()
			old.ResourceVersion = "42"
			old.Status = validInstanceStatus()
			obj := old.DeepCopy()
			tc.mutate(obj)
			expectErrors(t, ValidateInstanceStatusUpdate(obj, old), tc.want)
		})
	}
}

func TestValidateInstanceLogOptions(t *testing.T) {
	cases := []struct {
		name string
		opts gpu.InstanceLogOptions
		want field.ErrorList
	}{
		{name: "empty"},
		{name: "every option", opts: gpu.InstanceLogOptions{
			Container: "ssh", Follow: true, Previous: true, Timestamps: true,
			SinceSeconds: ptr.To(int64(60)), TailLines: ptr.To(int64(0)), LimitBytes: ptr.To(int64(1)),
		}},
		{name: "container is a DNS label", opts: gpu.InstanceLogOptions{Container: "Main_1"},
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "container"}}},
		{name: "sinceSeconds of 0", opts: gpu.InstanceLogOptions{SinceSeconds: ptr.To(int64(0))},
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "sinceSeconds"}}},
		{name: "negative tailLines", opts: gpu.InstanceLogOptions{TailLines: ptr.To(int64(-1))},
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "tailLines"}}},
		{name: "limitBytes of 0", opts: gpu.InstanceLogOptions{LimitBytes: ptr.To(int64(0))},
			want: field.ErrorList{{Type: field.ErrorTypeInvalid, Field: "limitBytes"}}},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			expectErrors(t, ValidateInstanceLogOptions(&tc.opts), tc.want)
		})
	}
}

// ports is n valid, distinct ports.
func ports(n int) []gpu.InstancePort {
	var out []gpu.InstancePort
	for i := range n {
		out = append(out, gpu.InstancePort{Name: fmt.Sprintf("p%d", i), Port: int32(8000 + i), Protocol: corev1.ProtocolTCP})
	}
	return out
}
