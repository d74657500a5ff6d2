package instance

import (
	"testing"

	"github.com/google/go-cmp/cmp"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

func h100() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "h100"},
		Spec: v1alpha1.InstanceTypeSpec{
			Accelerator: &v1alpha1.Accelerator{
				Vendor: "nvidia", Model: "NVIDIA-H100-80GB-HBM3", Memory: resource.MustParse("80Gi"), MaxPerInstance: 8,
				Exclusive:  &v1alpha1.ExclusiveSharing{ResourceName: "nvidia.com/gpu"},
				Partitions: []v1alpha1.PartitionProfile{{Name: "3g.40gb", Memory: resource.MustParse("40Gi"), ResourceName: "nvidia.com/mig-3g.40gb"}},
			},
			NodeSelector:     map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3"},
			Tolerations:      []corev1.Toleration{{Key: "nvidia.com/gpu", Operator: corev1.TolerationOpExists, Effect: corev1.TaintEffectNoSchedule}},
			RuntimeClassName: ptr.To("nvidia"),
		},
	}
}

func l4() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "l4"},
		Spec: v1alpha1.InstanceTypeSpec{
			Accelerator: &v1alpha1.Accelerator{
				Vendor: "nvidia", Model: "NVIDIA-L4", Memory: resource.MustParse("24Gi"), MaxPerInstance: 4,
				Sliced: &v1alpha1.SlicedSharing{ResourceName: "nvidia.com/gpu", MemoryPercentResourceName: "nvidia.com/gpumem-percentage", CoresResourceName: "nvidia.com/gpucores"},
			},
		},
	}
}

func cpuOnly() *v1alpha1.InstanceType {
	return &v1alpha1.InstanceType{ObjectMeta: metav1.ObjectMeta{Name: "cpu"}}
}

func sized(typ string) *v1alpha1.Instance {
	return &v1alpha1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "train", Namespace: "tenant-a", UID: "uid-1"},
		Spec: v1alpha1.InstanceSpec{
			Type: typ, Image: "nvcr.io/nvidia/pytorch:24.05-py3", ImagePullPolicy: corev1.PullIfNotPresent,
			Command: []string{"python"}, Args: []string{"train.py"},
			Env: []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}},
			Resources: v1alpha1.InstanceResources{
				CPU: ptr.To(resource.MustParse("24")), Memory: ptr.To(resource.MustParse("240Gi")),
			},
			Workspace: &v1alpha1.Workspace{MountPath: "/workspace"},
		},
	}
}

func hostAnd(extra corev1.ResourceList) corev1.ResourceList {
	l := corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("24"), corev1.ResourceMemory: resource.MustParse("240Gi")}
	for k, v := range extra {
		l[k] = v
	}
	return l
}

func TestRenderPodResources(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   *v1alpha1.InstanceType
		setup func(*v1alpha1.Instance)
		want  corev1.ResourceList
	}{{
		name:  "whole cards as the exclusive resource",
		typ:   h100(),
		setup: func(i *v1alpha1.Instance) { i.Spec.Resources.Accelerators = ptr.To[int32](2) },
		want:  hostAnd(corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("2")}),
	}, {
		name:  "a partition as its profile's resource, exactly one",
		typ:   h100(),
		setup: func(i *v1alpha1.Instance) { i.Spec.Resources.Partition = "3g.40gb" },
		want:  hostAnd(corev1.ResourceList{"nvidia.com/mig-3g.40gb": resource.MustParse("1")}),
	}, {
		name: "a slice with its memory and core percentages",
		typ:  l4(),
		setup: func(i *v1alpha1.Instance) {
			i.Spec.Resources.Slice = &v1alpha1.SliceRequest{MemoryPercent: 25, CoresPercent: 50}
		},
		want: hostAnd(corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("25"), "nvidia.com/gpucores": resource.MustParse("50")}),
	}, {
		name:  "a slice's cores default to its memory percentage",
		typ:   l4(),
		setup: func(i *v1alpha1.Instance) { i.Spec.Resources.Slice = &v1alpha1.SliceRequest{MemoryPercent: 30} },
		want:  hostAnd(corev1.ResourceList{"nvidia.com/gpu": resource.MustParse("1"), "nvidia.com/gpumem-percentage": resource.MustParse("30"), "nvidia.com/gpucores": resource.MustParse("30")}),
	}, {
		name: "a CPU-only type asks for host resources only",
		typ:  cpuOnly(),
		setup: func(i *v1alpha1.Instance) {
			i.Spec.Resources.EphemeralStorage = ptr.To(resource.MustParse("100Gi"))
		},
		want: hostAnd(corev1.ResourceList{corev1.ResourceEphemeralStorage: resource.MustParse("100Gi")}),
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized(tc.typ.Name)
			tc.setup(inst)
			pod, err := RenderPod(inst, tc.typ, nil, RenderOptions{})
			if err != nil {
				t.Fatal(err)
			}
			res := pod.Spec.Containers[0].Resources
			if diff := cmp.Diff(quantities(tc.want), quantities(res.Limits)); diff != "" {
				t.Errorf("limits (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(quantities(res.Limits), quantities(res.Requests)); diff != "" {
				t.Errorf("requests differ from limits:\n%s", diff)
			}
		})
	}
}

func quantities(l corev1.ResourceList) map[string]string {
	out := map[string]string{}
	for k, v := range l {
		out[string(k)] = v.String()
	}
	return out
}

func TestRenderPodShape(t *testing.T) {
	inst := sized("h100")
	inst.Spec.Resources.Accelerators = ptr.To[int32](1)
	inst.Spec.Ports = []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP}}
	inst.Spec.ImagePullSecrets = []corev1.LocalObjectReference{{Name: "registry"}}
	pod, err := RenderPod(inst, h100(), nil, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	c := pod.Spec.Containers[0]
	if c.Image != inst.Spec.Image || c.ImagePullPolicy != corev1.PullIfNotPresent || c.Command[0] != "python" || c.Args[0] != "train.py" || c.Env[0].Value != "3" {
		t.Errorf("container does not carry the Instance's image, command, args and env: %+v", c)
	}
	if diff := cmp.Diff([]corev1.ContainerPort{{Name: "jupyter", ContainerPort: 8888, Protocol: corev1.ProtocolTCP}}, c.Ports); diff != "" {
		t.Errorf("ports (-want +got):\n%s", diff)
	}
	wantMeta := metav1.ObjectMeta{
		Name: "train", Namespace: "tenant-a",
		Labels: map[string]string{v1alpha1.LabelInstance: "train", v1alpha1.LabelInstanceType: "h100", LabelManagedBy: ManagedBy},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "gpu.kiln.dev/v1alpha1", Kind: "Instance", Name: "train", UID: "uid-1",
			Controller: ptr.To(true), BlockOwnerDeletion: ptr.To(true),
		}},
	}
	if diff := cmp.Diff(wantMeta, pod.ObjectMeta); diff != "" {
		t.Errorf("metadata (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(h100().Spec.NodeSelector, pod.Spec.NodeSelector); diff != "" {
		t.Errorf("nodeSelector (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(h100().Spec.Tolerations, pod.Spec.Tolerations); diff != "" {
		t.Errorf("tolerations (-want +got):\n%s", diff)
	}
	if pod.Spec.RuntimeClassName == nil || *pod.Spec.RuntimeClassName != "nvidia" || pod.Spec.NodeName != "" || pod.Spec.RestartPolicy != corev1.RestartPolicyAlways {
		t.Errorf("runtimeClassName %v, nodeName %q, restartPolicy %q", pod.Spec.RuntimeClassName, pod.Spec.NodeName, pod.Spec.RestartPolicy)
	}
	if len(pod.Spec.ImagePullSecrets) != 1 || pod.Spec.ImagePullSecrets[0].Name != "registry" {
		t.Errorf("imagePullSecrets %v", pod.Spec.ImagePullSecrets)
	}
	if c.SecurityContext != nil {
		t.Errorf("an unprivileged Instance got a security context %+v", c.SecurityContext)
	}
}

// An Instance stored before validation refused the variables the runtime
// reads does not pass them to its Pod: they would override the
// allocation it was charged for.
func TestRenderPodLeavesOutRuntimeEnv(t *testing.T) {
	inst := sized("h100")
	inst.Spec.Resources.Accelerators = ptr.To[int32](1)
	inst.Spec.Env = []corev1.EnvVar{
		{Name: "NVIDIA_VISIBLE_DEVICES", Value: "all"},
		{Name: "EPOCHS", Value: "3"},
		{Name: "LD_PRELOAD", Value: "/x.so"},
		{Name: "CUDA_VISIBLE_DEVICES", Value: "0"},
	}
	pod, err := RenderPod(inst, h100(), nil, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := []corev1.EnvVar{{Name: "EPOCHS", Value: "3"}, {Name: "CUDA_VISIBLE_DEVICES", Value: "0"}}
	if diff := cmp.Diff(want, pod.Spec.Containers[0].Env); diff != "" {
		t.Errorf("env (-want +got):\n%s", diff)
	}
}

func TestRenderPodPinning(t *testing.T) {
	node := &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-1", Labels: map[string]string{corev1.LabelHostname: "ip-10-0-0-7"}}}
	for _, tc := range []struct {
		name    string
		node    *corev1.Node
		want    map[string]string
		wantErr string
	}{{
		name: "a nodeSelector on the node's own hostname label, not the Pod's nodeName",
		node: node,
		want: map[string]string{"nvidia.com/gpu.product": "NVIDIA-H100-80GB-HBM3", corev1.LabelHostname: "ip-10-0-0-7"},
	}, {
		name:    "the Node is needed",
		wantErr: `instance tenant-a/train is pinned to node "gpu-h100-1", which was not given`,
	}, {
		name:    "a Node without a hostname label cannot be pinned to",
		node:    &corev1.Node{ObjectMeta: metav1.ObjectMeta{Name: "gpu-h100-1"}},
		wantErr: `node "gpu-h100-1" has no kubernetes.io/hostname label to pin instance tenant-a/train to`,
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Spec.Resources.Accelerators = ptr.To[int32](1)
			inst.Spec.NodeName = "gpu-h100-1"
			pod, err := RenderPod(inst, h100(), tc.node, RenderOptions{})
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.want, pod.Spec.NodeSelector); diff != "" || pod.Spec.NodeName != "" {
				t.Errorf("nodeSelector (-want +got):\n%s\nnodeName %q", diff, pod.Spec.NodeName)
			}
		})
	}
}

// On a Claim the Pod keeps everything the type asks for and adds what
// the hand-over from the Claim's holder needs.
func TestRenderOnClaim(t *testing.T) {
	inst := sized("h100")
	inst.Spec.Resources.Accelerators = ptr.To[int32](1)
	inst.Spec.ClaimName = "reserved"
	plain, err := RenderPod(inst, h100(), nil, RenderOptions{})
	if err != nil {
		t.Fatal(err)
	}
	pod := plain.DeepCopy()
	RenderOnClaim(pod, "reserved", "gpu-1")

	want := plain.DeepCopy()
	want.Labels[v1alpha1.LabelClaim] = "reserved"
	want.Spec.PriorityClassName = "kiln-claim"
	want.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: handover.HandOverGate}}
	want.Spec.Affinity = &corev1.Affinity{NodeAffinity: &corev1.NodeAffinity{
		RequiredDuringSchedulingIgnoredDuringExecution: &corev1.NodeSelector{
			NodeSelectorTerms: []corev1.NodeSelectorTerm{{
				MatchFields: []corev1.NodeSelectorRequirement{{Key: "metadata.name", Operator: corev1.NodeSelectorOpIn, Values: []string{"gpu-1"}}},
			}},
		},
	}}
	if diff := cmp.Diff(want, pod); diff != "" {
		t.Errorf("Pod (-want +got):\n%s", diff)
	}
	if diff := cmp.Diff(handover.PinTo("gpu-1"), pod.Spec.Affinity); diff != "" {
		t.Errorf("affinity is not handover.PinTo (-want +got):\n%s", diff)
	}
	if node := handover.PinnedNode(pod); node != "gpu-1" {
		t.Errorf("handover.PinnedNode %q, want gpu-1", node)
	}
}

func TestRenderPodVolumesAndSSH(t *testing.T) {
	size := resource.MustParse("200Gi")
	for _, tc := range []struct {
		name           string
		setup          func(*v1alpha1.Instance)
		opts           RenderOptions
		wantVolumes    []corev1.Volume
		wantMounts     []corev1.VolumeMount
		wantContainers []string
		wantErr        string
	}{{
		name:        "an emptyDir workspace with its size",
		setup:       func(i *v1alpha1.Instance) { i.Spec.Workspace.EmptyDirSize = &size },
		wantVolumes: []corev1.Volume{{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: &size}}}},
		wantMounts:  []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}},
	}, {
		name: "a PVC workspace, then the extra volumes in order",
		setup: func(i *v1alpha1.Instance) {
			i.Spec.Workspace = &v1alpha1.Workspace{MountPath: "/data", ClaimName: "home"}
			i.Spec.Volumes = []v1alpha1.InstanceVolume{
				{Name: "models", MountPath: "/models", ReadOnly: true, PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "models"}},
				{Name: "conf", MountPath: "/etc/app", ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}},
				{Name: "dev", MountPath: "/dev/infiniband", HostPath: &corev1.HostPathVolumeSource{Path: "/dev/infiniband"}},
			}
			i.Spec.Privileged = true
		},
		wantVolumes: []corev1.Volume{
			{Name: "workspace", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "home"}}},
			{Name: "models", VolumeSource: corev1.VolumeSource{PersistentVolumeClaim: &corev1.PersistentVolumeClaimVolumeSource{ClaimName: "models"}}},
			{Name: "conf", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "app"}}}},
			{Name: "dev", VolumeSource: corev1.VolumeSource{HostPath: &corev1.HostPathVolumeSource{Path: "/dev/infiniband"}}},
		},
		wantMounts: []corev1.VolumeMount{
			{Name: "workspace", MountPath: "/data"},
			{Name: "models", MountPath: "/models", ReadOnly: true},
			{Name: "conf", MountPath: "/etc/app"},
			{Name: "dev", MountPath: "/dev/infiniband"},
		},
	}, {
		name:           "an SSH sidecar mounting the authorized keys and the workspace",
		setup:          func(i *v1alpha1.Instance) { i.Spec.SSH = &v1alpha1.SSHSpec{AuthorizedKeysSecret: "my-keys"} },
		opts:           RenderOptions{SSHImage: "kiln/sshd:1"},
		wantContainers: []string{"main", "ssh"},
		wantVolumes: []corev1.Volume{
			{Name: "workspace", VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{}}},
			{Name: "ssh-authorized-keys", VolumeSource: corev1.VolumeSource{Secret: &corev1.SecretVolumeSource{SecretName: "my-keys", DefaultMode: ptr.To[int32](0o400)}}},
		},
		wantMounts: []corev1.VolumeMount{{Name: "workspace", MountPath: "/workspace"}},
	}, {
		name:    "SSH without an image configured",
		setup:   func(i *v1alpha1.Instance) { i.Spec.SSH = &v1alpha1.SSHSpec{AuthorizedKeysSecret: "my-keys"} },
		wantErr: "instance tenant-a/train asks for SSH but the controller has no SSH image",
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Spec.Resources.Accelerators = ptr.To[int32](1)
			tc.setup(inst)
			pod, err := RenderPod(inst, h100(), nil, tc.opts)
			if tc.wantErr != "" {
				if err == nil || err.Error() != tc.wantErr {
					t.Fatalf("error %v, want %q", err, tc.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if diff := cmp.Diff(tc.wantVolumes, pod.Spec.Volumes); diff != "" {
				t.Errorf("volumes (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantMounts, pod.Spec.Containers[0].VolumeMounts); diff != "" {
				t.Errorf("main mounts (-want +got):\n%s", diff)
			}
			want := tc.wantContainers
			if want == nil {
				want = []string{"main"}
			}
			var got []string
			for _, c := range pod.Spec.Containers {
				got = append(got, c.Name)
			}
			if diff := cmp.Diff(want, got); diff != "" {
				t.Errorf("containers (-want +got):\n%s", diff)
			}
			if inst.Spec.Privileged != (pod.Spec.Containers[0].SecurityContext != nil && *pod.Spec.Containers[0].SecurityContext.Privileged) {
				t.Errorf("privileged %v but security context %+v", inst.Spec.Privileged, pod.Spec.Containers[0].SecurityContext)
			}
			if inst.Spec.SSH != nil {
				ssh := pod.Spec.Containers[1]
				if ssh.Image != "kiln/sshd:1" || ssh.Ports[0].ContainerPort != 22 {
					t.Errorf("ssh sidecar %+v", ssh)
				}
				wantSSHMounts := []corev1.VolumeMount{{Name: "ssh-authorized-keys", MountPath: "/etc/kiln/ssh", ReadOnly: true}, {Name: "workspace", MountPath: "/workspace"}}
				if diff := cmp.Diff(wantSSHMounts, ssh.VolumeMounts); diff != "" {
					t.Errorf("ssh mounts (-want +got):\n%s", diff)
				}
			}
		})
	}
}

func TestRenderPodRefusesWhatTheTypeLacks(t *testing.T) {
	for _, tc := range []struct {
		name  string
		typ   *v1alpha1.InstanceType
		setup func(*v1alpha1.Instance)
		want  string
	}{
		{"unknown partition", h100(), func(i *v1alpha1.Instance) { i.Spec.Resources.Partition = "7g.80gb" }, `instancetype "h100" has no partition profile "7g.80gb" with a resource name`},
		{"slice on an unsliced type", h100(), func(i *v1alpha1.Instance) { i.Spec.Resources.Slice = &v1alpha1.SliceRequest{MemoryPercent: 10} }, `instancetype "h100" does not offer slices`},
		{"cards on a sliced-only type", l4(), func(i *v1alpha1.Instance) { i.Spec.Resources.Accelerators = ptr.To[int32](1) }, `instancetype "l4" does not offer whole cards`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized(tc.typ.Name)
			tc.setup(inst)
			if _, err := RenderPod(inst, tc.typ, nil, RenderOptions{}); err == nil || err.Error() != tc.want {
				t.Errorf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestRenderService(t *testing.T) {
	existing := &corev1.Service{Spec: corev1.ServiceSpec{Ports: []corev1.ServicePort{
		{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP, NodePort: 30001},
		{Name: "tensorboard", Port: 6006, Protocol: corev1.ProtocolTCP, NodePort: 30002},
		{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolTCP, NodePort: 30003},
	}}}
	for _, tc := range []struct {
		name      string
		ports     []v1alpha1.InstancePort
		existing  *corev1.Service
		wantNil   bool
		wantPorts []corev1.ServicePort
	}{{
		name:    "no ports, no Service",
		wantNil: true,
	}, {
		name:      "a new Service leaves node ports to the API server",
		ports:     []v1alpha1.InstancePort{{Name: "jupyter", Port: 8888}},
		wantPorts: []corev1.ServicePort{{Name: "jupyter", Port: 8888, TargetPort: intstr.FromInt32(8888), Protocol: corev1.ProtocolTCP}},
	}, {
		name: "unchanged ports keep their node ports; a changed, a new and a removed one do not",
		ports: []v1alpha1.InstancePort{
			{Name: "jupyter", Port: 8888, Protocol: corev1.ProtocolTCP},
			{Name: "tensorboard", Port: 6007, Protocol: corev1.ProtocolTCP},
			{Name: "ssh", Port: 22, Protocol: corev1.ProtocolTCP},
		},
		existing: existing,
		wantPorts: []corev1.ServicePort{
			{Name: "jupyter", Port: 8888, TargetPort: intstr.FromInt32(8888), Protocol: corev1.ProtocolTCP, NodePort: 30001},
			{Name: "tensorboard", Port: 6007, TargetPort: intstr.FromInt32(6007), Protocol: corev1.ProtocolTCP},
			{Name: "ssh", Port: 22, TargetPort: intstr.FromInt32(22), Protocol: corev1.ProtocolTCP},
		},
	}, {
		name:     "a protocol change is a different port",
		ports:    []v1alpha1.InstancePort{{Name: "metrics", Port: 9100, Protocol: corev1.ProtocolUDP}},
		existing: existing,
		wantPorts: []corev1.ServicePort{
			{Name: "metrics", Port: 9100, TargetPort: intstr.FromInt32(9100), Protocol: corev1.ProtocolUDP},
		},
	}} {
		t.Run(tc.name, func(t *testing.T) {
			inst := sized("h100")
			inst.Spec.Ports = tc.ports
			svc := RenderService(inst, tc.existing)
			if tc.wantNil {
				if svc != nil {
					t.Fatalf("got a Service for an Instance without ports: %+v", svc)
				}
				return
			}
			if svc.Spec.Type != corev1.ServiceTypeNodePort || svc.Spec.Selector[v1alpha1.LabelInstance] != "train" || len(svc.Spec.Selector) != 1 {
				t.Errorf("type %q selector %v", svc.Spec.Type, svc.Spec.Selector)
			}
			if diff := cmp.Diff([]metav1.OwnerReference{OwnerReference(inst)}, svc.OwnerReferences); diff != "" {
				t.Errorf("owner (-want +got):\n%s", diff)
			}
			if diff := cmp.Diff(tc.wantPorts, svc.Spec.Ports); diff != "" {
				t.Errorf("ports (-want +got):\n%s", diff)
			}
		})
	}
}
