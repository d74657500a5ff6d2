// Package instance is the controller loop that turns Instances into Pods
// and Services. This file is the rendering: pure functions of the Instance,
// its InstanceType, (when pinned) its Node and (for node ports) the Service
// it owns now.
package instance

import (
	"fmt"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

// Labels that tie a Pod or Service to its Instance.
const (
	LabelManagedBy = "app.kubernetes.io/managed-by"
	ManagedBy      = "kiln-controller"
)

const (
	mainContainer    = v1alpha1.InstanceMainContainer
	sshContainer     = v1alpha1.InstanceSSHContainer
	workspaceVolume  = "workspace"
	sshKeysVolume    = "ssh-authorized-keys"
	sshKeysMountPath = "/etc/kiln/ssh"
	sshPort          = 22
)

// RenderOptions are the controller's settings that shape every Pod.
type RenderOptions struct {
	// SSHImage runs the SSH sidecar of Instances with spec.ssh.
	SSHImage string
}

// RenderPod builds the Pod of an Instance. node is the Node named by
// spec.nodeName, nil when the Instance is not pinned: pinning is a
// nodeSelector on the node's own hostname label, never the Pod's nodeName,
// so the scheduler (and its resource accounting) still decides.
func RenderPod(inst *v1alpha1.Instance, t *v1alpha1.InstanceType, node *corev1.Node, opts RenderOptions) (*corev1.Pod, error) {
	res, err := containerResources(inst, t)
	if err != nil {
		return nil, err
	}
	main, volumes, ws := renderMain(inst, res)
	containers := []corev1.Container{main}
	if inst.Spec.SSH != nil {
		if opts.SSHImage == "" {
			return nil, fmt.Errorf("instance %s/%s asks for SSH but the controller has no SSH image", inst.Namespace, inst.Name)
		}
		ssh, keys := renderSSH(inst, opts.SSHImage, ws)
		containers, volumes = append(containers, ssh), append(volumes, keys)
	}
	nodeSelector, err := renderNodeSelector(inst, t, node)
	if err != nil {
		return nil, err
	}
	pod := &corev1.Pod{
		ObjectMeta: objectMeta(inst),
		Spec: corev1.PodSpec{
			Containers:       containers,
			Volumes:          volumes,
			NodeSelector:     nodeSelector,
			Tolerations:      t.Spec.Tolerations,
			RuntimeClassName: t.Spec.RuntimeClassName,
			ImagePullSecrets: inst.Spec.ImagePullSecrets,
			// An Instance is a machine: its processes come back when they exit.
			RestartPolicy: corev1.RestartPolicyAlways,
		},
	}
	return pod, nil
}

// renderMain builds the Instance's own container with its resources, and
// the volumes it mounts; ws is its workspace, defaulted, nil for none.
func renderMain(inst *v1alpha1.Instance, res corev1.ResourceRequirements) (main corev1.Container, volumes []corev1.Volume, ws *v1alpha1.Workspace) {
	main = corev1.Container{
		Name:            mainContainer,
		Image:           inst.Spec.Image,
		ImagePullPolicy: inst.Spec.ImagePullPolicy,
		Command:         inst.Spec.Command,
		Args:            inst.Spec.Args,
		Env:             podEnv(inst.Spec.Env),
		Resources:       res,
	}
	for _, p := range inst.Spec.Ports {
		v1alpha1.SetDefaults_InstancePort(&p)
		main.Ports = append(main.Ports, corev1.ContainerPort{Name: p.Name, ContainerPort: p.Port, Protocol: p.Protocol})
	}
	if inst.Spec.Privileged {
		main.SecurityContext = &corev1.SecurityContext{Privileged: ptr.To(true)}
	}
	ws = inst.Spec.Workspace.DeepCopy()
	if ws != nil {
		v1alpha1.SetDefaults_Workspace(ws)
		v := corev1.Volume{Name: workspaceVolume}
		if ws.ClaimName != "" {
			v.PersistentVolumeClaim = &corev1.PersistentVolumeClaimVolumeSource{ClaimName: ws.ClaimName}
		} else {
			v.EmptyDir = &corev1.EmptyDirVolumeSource{SizeLimit: ws.EmptyDirSize}
		}
		volumes = append(volumes, v)
		main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: workspaceVolume, MountPath: ws.MountPath})
	}
	for _, v := range inst.Spec.Volumes {
		volumes = append(volumes, corev1.Volume{Name: v.Name, VolumeSource: corev1.VolumeSource{
			PersistentVolumeClaim: v.PersistentVolumeClaim, ConfigMap: v.ConfigMap, Secret: v.Secret, HostPath: v.HostPath,
		}})
		main.VolumeMounts = append(main.VolumeMounts, corev1.VolumeMount{Name: v.Name, MountPath: v.MountPath, ReadOnly: v.ReadOnly})
	}
	return main, volumes, ws
}

// renderSSH builds the SSH sidecar and the volume of its authorized keys.
func renderSSH(inst *v1alpha1.Instance, image string, ws *v1alpha1.Workspace) (corev1.Container, corev1.Volume) {
	keys := corev1.Volume{Name: sshKeysVolume, VolumeSource: corev1.VolumeSource{
		Secret: &corev1.SecretVolumeSource{SecretName: inst.Spec.SSH.AuthorizedKeysSecret, DefaultMode: ptr.To[int32](0o400)},
	}}
	ssh := corev1.Container{
		Name:         sshContainer,
		Image:        image,
		Ports:        []corev1.ContainerPort{{Name: "ssh", ContainerPort: sshPort, Protocol: corev1.ProtocolTCP}},
		VolumeMounts: []corev1.VolumeMount{{Name: sshKeysVolume, MountPath: sshKeysMountPath, ReadOnly: true}},
	}
	// The sidecar sees the workspace too: that is what users copy to.
	if ws != nil {
		ssh.VolumeMounts = append(ssh.VolumeMounts, corev1.VolumeMount{Name: workspaceVolume, MountPath: ws.MountPath})
	}
	return ssh, keys
}

// podEnv is spec.env without the variables a runtime reads to pick or
// limit cards (v1alpha1.RuntimeEnvReader): validation refuses them, and
// one that an Instance stored before that still has does not reach its
// Pod, where it would override the device plugin's allocation.
func podEnv(env []corev1.EnvVar) []corev1.EnvVar {
	var out []corev1.EnvVar
	for _, e := range env {
		if _, reserved := v1alpha1.RuntimeEnvReader(e.Name); !reserved {
			out = append(out, e)
		}
	}
	return out
}

// renderNodeSelector is the type's nodeSelector, plus, for a pinned
// Instance, its node's hostname label.
func renderNodeSelector(inst *v1alpha1.Instance, t *v1alpha1.InstanceType, node *corev1.Node) (map[string]string, error) {
	nodeSelector := map[string]string{}
	for k, v := range t.Spec.NodeSelector {
		nodeSelector[k] = v
	}
	if inst.Spec.NodeName != "" {
		if node == nil || node.Name != inst.Spec.NodeName {
			return nil, fmt.Errorf("instance %s/%s is pinned to node %q, which was not given", inst.Namespace, inst.Name, inst.Spec.NodeName)
		}
		host, ok := node.Labels[corev1.LabelHostname]
		if !ok {
			return nil, fmt.Errorf("node %q has no %s label to pin instance %s/%s to", node.Name, corev1.LabelHostname, inst.Namespace, inst.Name)
		}
		nodeSelector[corev1.LabelHostname] = host
	}
	if len(nodeSelector) == 0 {
		return nil, nil
	}
	return nodeSelector, nil
}

// RenderOnClaim puts an Instance's Pod on its Claim: kept to the Claim's
// node, labelled with the Claim (so placement counts it as the Claim), and
// at the Claims' priority, which the hand-over from the Claim's holder
// relies on, gated until the holder is gone.
func RenderOnClaim(pod *corev1.Pod, claimName, node string) {
	pod.Labels[v1alpha1.LabelClaim] = claimName
	pod.Spec.Affinity = handover.PinTo(node)
	pod.Spec.PriorityClassName = v1alpha1.ClaimPriorityClassName
	// Bound only once the holder is gone, so it gets the holder's devices.
	pod.Spec.SchedulingGates = []corev1.PodSchedulingGate{{Name: handover.HandOverGate}}
}

// objectMeta names a rendered object after its Instance, labels it and
// makes the Instance its owner.
func objectMeta(inst *v1alpha1.Instance) metav1.ObjectMeta {
	return metav1.ObjectMeta{
		Name:            inst.Name,
		Namespace:       inst.Namespace,
		Labels:          Labels(inst),
		OwnerReferences: []metav1.OwnerReference{OwnerReference(inst)},
	}
}

// Labels are the labels of every object rendered for an Instance.
func Labels(inst *v1alpha1.Instance) map[string]string {
	return map[string]string{
		v1alpha1.LabelInstance:     inst.Name,
		v1alpha1.LabelInstanceType: inst.Spec.Type,
		LabelManagedBy:             ManagedBy,
	}
}

// OwnerReference makes the Instance the controller of what is rendered for
// it, so the garbage collector removes those with it.
func OwnerReference(inst *v1alpha1.Instance) metav1.OwnerReference {
	return metav1.OwnerReference{
		APIVersion:         v1alpha1.SchemeGroupVersion.String(),
		Kind:               "Instance",
		Name:               inst.Name,
		UID:                inst.UID,
		Controller:         ptr.To(true),
		BlockOwnerDeletion: ptr.To(true),
	}
}

// containerResources asks for the accelerators by mode, and for the host
// resources admission sized. Requests equal limits: extended resources
// require it, and a GPU machine should not be overcommitted on its host.
func containerResources(inst *v1alpha1.Instance, t *v1alpha1.InstanceType) (corev1.ResourceRequirements, error) {
	list := corev1.ResourceList{}
	r := inst.Spec.Resources
	for name, q := range map[corev1.ResourceName]*resource.Quantity{
		corev1.ResourceCPU:              r.CPU,
		corev1.ResourceMemory:           r.Memory,
		corev1.ResourceEphemeralStorage: r.EphemeralStorage,
	} {
		if q != nil {
			list[name] = q.DeepCopy()
		}
	}
	acc := t.Spec.Accelerator
	count := func(n int64) resource.Quantity { return *resource.NewQuantity(n, resource.DecimalSI) }
	switch {
	case acc == nil:
	case r.Partition != "":
		var profile *v1alpha1.PartitionProfile
		for i := range acc.Partitions {
			if acc.Partitions[i].Name == r.Partition {
				profile = &acc.Partitions[i]
			}
		}
		if profile == nil || profile.ResourceName == "" {
			return corev1.ResourceRequirements{}, fmt.Errorf("instancetype %q has no partition profile %q with a resource name", t.Name, r.Partition)
		}
		list[corev1.ResourceName(profile.ResourceName)] = count(1)
	case r.Slice != nil:
		s := acc.Sliced
		if s == nil || s.ResourceName == "" {
			return corev1.ResourceRequirements{}, fmt.Errorf("instancetype %q does not offer slices", t.Name)
		}
		list[corev1.ResourceName(s.ResourceName)] = count(1)
		if s.MemoryPercentResourceName != "" {
			list[corev1.ResourceName(s.MemoryPercentResourceName)] = count(int64(r.Slice.MemoryPercent))
		}
		if s.CoresResourceName != "" {
			cores := r.Slice.CoresPercent
			if cores == 0 {
				cores = r.Slice.MemoryPercent
			}
			list[corev1.ResourceName(s.CoresResourceName)] = count(int64(cores))
		}
	case r.Accelerators != nil && *r.Accelerators > 0:
		if acc.Exclusive == nil || acc.Exclusive.ResourceName == "" {
			return corev1.ResourceRequirements{}, fmt.Errorf("instancetype %q does not offer whole cards", t.Name)
		}
		list[corev1.ResourceName(acc.Exclusive.ResourceName)] = count(int64(*r.Accelerators))
	}
	if len(list) == 0 {
		return corev1.ResourceRequirements{}, nil
	}
	return corev1.ResourceRequirements{Requests: list, Limits: list.DeepCopy()}, nil
}

// RenderService builds the NodePort Service of an Instance, nil if it has
// no ports. existing is the Service the Instance owns now, if any: every
// port that is unchanged (same name, number and protocol) keeps the node
// port it was given, so edits and restarts do not move what users connect
// to.
func RenderService(inst *v1alpha1.Instance, existing *corev1.Service) *corev1.Service {
	if len(inst.Spec.Ports) == 0 {
		return nil
	}
	type key struct {
		name     string
		port     int32
		protocol corev1.Protocol
	}
	kept := map[key]int32{}
	if existing != nil {
		for _, p := range existing.Spec.Ports {
			kept[key{p.Name, p.Port, p.Protocol}] = p.NodePort
		}
	}
	svc := &corev1.Service{
		ObjectMeta: objectMeta(inst),
		Spec: corev1.ServiceSpec{
			Type:     corev1.ServiceTypeNodePort,
			Selector: map[string]string{v1alpha1.LabelInstance: inst.Name},
		},
	}
	for _, p := range inst.Spec.Ports {
		v1alpha1.SetDefaults_InstancePort(&p)
		svc.Spec.Ports = append(svc.Spec.Ports, corev1.ServicePort{
			Name:       p.Name,
			Port:       p.Port,
			TargetPort: intstr.FromInt32(p.Port),
			Protocol:   p.Protocol,
			NodePort:   kept[key{p.Name, p.Port, p.Protocol}],
		})
	}
	return svc
}
