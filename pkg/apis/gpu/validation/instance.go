package validation

import (
	"fmt"
	"slices"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apivalidation "k8s.io/apimachinery/pkg/api/validation"
	metav1validation "k8s.io/apimachinery/pkg/apis/meta/v1/validation"
	utilvalidation "k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
)

// maxFileMode is 0777: the permission bits a volume file may carry.
const maxFileMode = 0o777

var (
	supportedPullPolicies    = []corev1.PullPolicy{corev1.PullAlways, corev1.PullIfNotPresent, corev1.PullNever}
	supportedProtocols       = []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP, corev1.ProtocolSCTP}
	supportedAllocationModes = []gpu.AllocationMode{gpu.AllocationExclusive, gpu.AllocationSlice, gpu.AllocationPartition}
	supportedInstancePhases  = []gpu.InstancePhase{
		gpu.InstancePending, gpu.InstanceStarting, gpu.InstanceReady, gpu.InstanceStopping,
		gpu.InstanceStopped, gpu.InstanceFailed, gpu.InstanceDeleting,
	}
	supportedHostPathTypes = []corev1.HostPathType{
		corev1.HostPathDirectoryOrCreate, corev1.HostPathDirectory, corev1.HostPathFileOrCreate,
		corev1.HostPathFile, corev1.HostPathSocket, corev1.HostPathCharDev, corev1.HostPathBlockDev,
	}
)

// ValidateInstance validates a new Instance.
func ValidateInstance(obj *gpu.Instance) field.ErrorList {
	// The Pod and the Service are named after the Instance, and a Service
	// name must be a DNS-1035 label.
	allErrs := apivalidation.ValidateObjectMeta(&obj.ObjectMeta, true, apivalidation.NameIsDNS1035Label, field.NewPath("metadata"))
	return append(allErrs, validateInstanceSpec(&obj.Spec, nil, field.NewPath("spec"))...)
}

// ValidateInstanceUpdate validates an update of an Instance's metadata and
// spec. The type cannot change: the pool, the card and the share of it are
// all chosen by it, so a new type is a new Instance. Nor can the Claim:
// the claim controller hands the Claim's cards to the Instance's Pod and
// takes them back on a stop, and nothing moves them to another Claim's.
func ValidateInstanceUpdate(obj, old *gpu.Instance) field.ErrorList {
	specPath := field.NewPath("spec")
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	allErrs = append(allErrs, validateInstanceSpec(&obj.Spec, old.Spec.Env, specPath)...)
	allErrs = append(allErrs, apivalidation.ValidateImmutableField(obj.Spec.Type, old.Spec.Type, specPath.Child("type"))...)
	if obj.Spec.ClaimName != old.Spec.ClaimName {
		allErrs = append(allErrs, field.Invalid(specPath.Child("claimName"), obj.Spec.ClaimName,
			fmt.Sprintf("field is immutable (it was %q); delete and recreate the Instance to move it to another Claim", old.Spec.ClaimName)))
	}
	return append(allErrs, validateHeldAccelerators(obj, old, specPath.Child("resources"))...)
}

// validateHeldAccelerators refuses to lower, or change the kind of, the
// accelerators of an Instance that may still have a Pod on them
// (accounting.InstanceHolds): the Pod keeps the old ones until it is
// rebuilt or gone, while the Budget would count the new request at once,
// and a tenant could spend the difference twice. Growing is charged before
// it is stored, so a running Instance may grow.
func validateHeldAccelerators(obj, old *gpu.Instance, fldPath *field.Path) field.ErrorList {
	o, n := old.Spec.Resources, obj.Spec.Resources
	sameKind := o.Partition == n.Partition && apiequality.Semantic.DeepEqual(o.Slice, n.Slice) &&
		(o.Accelerators == nil) == (n.Accelerators == nil)
	asks := n.Accelerators != nil || n.Slice != nil || n.Partition != ""
	if !asks || !accounting.InstanceHolds(old) || sameKind && (o.Accelerators == nil || *n.Accelerators >= *o.Accelerators) {
		return nil
	}
	return field.ErrorList{field.Forbidden(fldPath, fmt.Sprintf(
		"the Instance is running or still stopping, and its Pod holds %s until it is gone, so its accelerators may grow but not become %s; stop it, wait for phase Stopped, then change them and start it",
		describeAccelerators(o), describeAccelerators(n)))}
}

// describeAccelerators says what an Instance's resources ask for.
func describeAccelerators(r gpu.InstanceResources) string {
	switch {
	case r.Partition != "":
		return fmt.Sprintf("partition %s", r.Partition)
	case r.Slice != nil:
		return fmt.Sprintf("a %d%% slice", r.Slice.MemoryPercent)
	case r.Accelerators != nil:
		return fmt.Sprintf("%d accelerators", *r.Accelerators)
	}
	return "no accelerators"
}

// ValidateInstanceStatusUpdate validates an update of an Instance's status.
func ValidateInstanceStatusUpdate(obj, old *gpu.Instance) field.ErrorList {
	allErrs := apivalidation.ValidateObjectMetaUpdate(&obj.ObjectMeta, &old.ObjectMeta, field.NewPath("metadata"))
	return append(allErrs, validateInstanceStatus(&obj.Status, field.NewPath("status"))...)
}

func validateInstanceSpec(spec *gpu.InstanceSpec, keptEnv []corev1.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateRequiredDNSSubdomain(spec.Type, "InstanceType to run on", fldPath.Child("type"))...)

	imagePath := fldPath.Child("image")
	if spec.Image == "" {
		allErrs = append(allErrs, field.Required(imagePath, "set the container image, e.g. nvcr.io/nvidia/pytorch:24.05-py3"))
	} else if strings.TrimSpace(spec.Image) != spec.Image {
		allErrs = append(allErrs, field.Invalid(imagePath, spec.Image, "must not have leading or trailing whitespace"))
	}
	allErrs = append(allErrs, validateRequiredEnum(spec.ImagePullPolicy, supportedPullPolicies, fldPath.Child("imagePullPolicy"))...)

	seenSecrets := make(map[string]bool, len(spec.ImagePullSecrets))
	for i, s := range spec.ImagePullSecrets {
		namePath := fldPath.Child("imagePullSecrets").Index(i).Child("name")
		allErrs = append(allErrs, validateRequiredDNSSubdomain(s.Name, "Secret to pull the image with", namePath)...)
		if s.Name != "" {
			if seenSecrets[s.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, s.Name))
			}
			seenSecrets[s.Name] = true
		}
	}

	allErrs = append(allErrs, validateSizes(spec, fldPath)...)
	allErrs = append(allErrs, validateEnv(spec.Env, keptEnv, fldPath.Child("env"))...)
	allErrs = append(allErrs, validateInstanceResources(&spec.Resources, fldPath.Child("resources"))...)
	allErrs = append(allErrs, validateInstancePorts(spec.Ports, fldPath.Child("ports"))...)
	if spec.SSH != nil {
		allErrs = append(allErrs, validateRequiredDNSSubdomain(spec.SSH.AuthorizedKeysSecret,
			"Secret whose authorized_keys key holds the public keys", fldPath.Child("ssh", "authorizedKeysSecret"))...)
	}
	if spec.Workspace != nil {
		allErrs = append(allErrs, validateWorkspace(spec.Workspace, fldPath.Child("workspace"))...)
	}
	allErrs = append(allErrs, validateVolumes(spec.Volumes, spec.Workspace, fldPath.Child("volumes"))...)
	allErrs = append(allErrs, validateOptionalDNSSubdomain(spec.NodeName, fldPath.Child("nodeName"))...)
	// Claim names are DNS labels (see ValidateClaim).
	for _, msg := range utilvalidation.IsDNS1123Label(spec.ClaimName) {
		if spec.ClaimName != "" {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("claimName"), spec.ClaimName, msg))
		}
	}
	if spec.IdleStopAfter != nil && spec.IdleStopAfter.Duration <= 0 {
		allErrs = append(allErrs, field.Invalid(fldPath.Child("idleStopAfter"), spec.IdleStopAfter.Duration.String(),
			"must be greater than 0, e.g. 30m; remove idleStopAfter to take the InstanceType's idle limit"))
	}
	if spec.ClaimName != "" && spec.NodeName != "" {
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("nodeName"),
			"an Instance on a Claim runs on the Claim's node; pin the Claim with its spec.nodeName instead, or remove spec.claimName"))
	}
	return allErrs
}

// Bounds on what one Instance may store and hold. Each port holds a node
// port of the cluster's range (2,768 by default) for as long as the
// Instance exists, stopped or not; and nothing else bounds the strings a
// tenant writes into etcd but the request size.
const (
	MaxPorts        = 8
	MaxVolumes      = 32
	MaxEnv          = 256
	MaxCommandBytes = 32 * 1024
	MaxEnvBytes     = 256 * 1024
)

func validateSizes(spec *gpu.InstanceSpec, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if n := len(spec.Ports); n > MaxPorts {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("ports"), n, MaxPorts))
	}
	if n := len(spec.Volumes); n > MaxVolumes {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("volumes"), n, MaxVolumes))
	}
	if n := len(spec.Env); n > MaxEnv {
		allErrs = append(allErrs, field.TooMany(fldPath.Child("env"), n, MaxEnv))
	}
	size := func(list []string) int {
		n := 0
		for _, s := range list {
			n += len(s)
		}
		return n
	}
	for _, f := range []struct {
		name string
		list []string
	}{{"command", spec.Command}, {"args", spec.Args}} {
		if n := size(f.list); n > MaxCommandBytes {
			allErrs = append(allErrs, field.TooLong(fldPath.Child(f.name), fmt.Sprintf("%d bytes", n), MaxCommandBytes))
		}
	}
	envBytes := 0
	for _, ev := range spec.Env {
		envBytes += len(ev.Name) + len(ev.Value)
	}
	if envBytes > MaxEnvBytes {
		allErrs = append(allErrs, field.TooLong(fldPath.Child("env"), fmt.Sprintf("%d bytes", envBytes), MaxEnvBytes))
	}
	return allErrs
}

// validateEnv checks spec.env. kept is the env of the Instance as stored
// before an update: a variable the runtime reads that an Instance stored
// before this check already had, unchanged, does not block its stop or
// other edits (kiln-controller leaves it out of the Pod).
func validateEnv(env, kept []corev1.EnvVar, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	seen := make(map[string]bool, len(env))
	for i, ev := range env {
		idxPath := fldPath.Index(i)
		namePath := idxPath.Child("name")
		if ev.Name == "" {
			allErrs = append(allErrs, field.Required(namePath, "set the variable's name"))
		} else {
			for _, msg := range utilvalidation.IsEnvVarName(ev.Name) {
				allErrs = append(allErrs, field.Invalid(namePath, ev.Name, msg))
			}
			if seen[ev.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, ev.Name))
			}
			seen[ev.Name] = true
			if reader, reserved := v1alpha1.RuntimeEnvReader(ev.Name); reserved && !slices.ContainsFunc(kept, func(k corev1.EnvVar) bool { return apiequality.Semantic.DeepEqual(k, ev) }) {
				allErrs = append(allErrs, field.Forbidden(namePath, fmt.Sprintf(
					"%s is read by %s, and would override the accelerators Kiln allocated and charged: remove it; the device plugin sets what the container needs", ev.Name, reader)))
			}
		}
		if ev.ValueFrom != nil {
			fromPath := idxPath.Child("valueFrom")
			if ev.Value != "" {
				allErrs = append(allErrs, field.Forbidden(fromPath, "may not be set together with value; keep one of value or valueFrom"))
			}
			allErrs = append(allErrs, validateEnvVarSource(ev.ValueFrom, fromPath)...)
		}
	}
	return allErrs
}

// validateEnvVarSource checks the shape of valueFrom. Whether a field path
// or resource exists is left to the Pod's validation.
func validateEnvVarSource(s *corev1.EnvVarSource, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var set []string
	if s.FieldRef != nil {
		set = append(set, "fieldRef")
		if s.FieldRef.FieldPath == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("fieldRef", "fieldPath"), "set a field of the Pod, e.g. metadata.name"))
		}
	}
	if s.ResourceFieldRef != nil {
		set = append(set, "resourceFieldRef")
		if s.ResourceFieldRef.Resource == "" {
			allErrs = append(allErrs, field.Required(fldPath.Child("resourceFieldRef", "resource"), "set a resource of the container, e.g. limits.memory"))
		}
	}
	if s.ConfigMapKeyRef != nil {
		set = append(set, "configMapKeyRef")
		refPath := fldPath.Child("configMapKeyRef")
		allErrs = append(allErrs, validateRequiredDNSSubdomain(s.ConfigMapKeyRef.Name, "ConfigMap", refPath.Child("name"))...)
		allErrs = append(allErrs, validateKey(s.ConfigMapKeyRef.Key, refPath.Child("key"))...)
	}
	if s.SecretKeyRef != nil {
		set = append(set, "secretKeyRef")
		refPath := fldPath.Child("secretKeyRef")
		allErrs = append(allErrs, validateRequiredDNSSubdomain(s.SecretKeyRef.Name, "Secret", refPath.Child("name"))...)
		allErrs = append(allErrs, validateKey(s.SecretKeyRef.Key, refPath.Child("key"))...)
	}
	if s.FileKeyRef != nil {
		// An env file lives in a volume of the Pod, and an Instance cannot
		// declare one.
		set = append(set, "fileKeyRef")
		allErrs = append(allErrs, field.Forbidden(fldPath.Child("fileKeyRef"), "is not supported on an Instance; use configMapKeyRef or secretKeyRef"))
	}
	switch len(set) {
	case 0:
		allErrs = append(allErrs, field.Required(fldPath, "set one of fieldRef, resourceFieldRef, configMapKeyRef or secretKeyRef"))
	case 1:
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, strings.Join(set, ", "), "must have exactly one source; keep one and remove the others"))
	}
	return allErrs
}

// validateKey checks a key of a ConfigMap or Secret.
func validateKey(key string, fldPath *field.Path) field.ErrorList {
	if key == "" {
		return field.ErrorList{field.Required(fldPath, "set the key to read")}
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsConfigMapKey(key) {
		allErrs = append(allErrs, field.Invalid(fldPath, key, msg))
	}
	return allErrs
}

func validateInstanceResources(r *gpu.InstanceResources, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	var set []string
	if r.Accelerators != nil {
		set = append(set, "accelerators")
	}
	if r.Slice != nil {
		set = append(set, "slice")
	}
	if r.Partition != "" {
		set = append(set, "partition")
	}
	switch len(set) {
	case 0:
		allErrs = append(allErrs, field.Required(fldPath,
			"must set exactly one of accelerators, slice or partition (use accelerators: 0 on a CPU-only type)"))
	case 1:
	default:
		allErrs = append(allErrs, field.Invalid(fldPath, strings.Join(set, ", "),
			"must set exactly one of accelerators, slice or partition; keep one and remove the others"))
	}

	if r.Accelerators != nil {
		allErrs = append(allErrs, validateInRange(int64(*r.Accelerators), 0, maxAccelerators, fldPath.Child("accelerators"))...)
	}
	if r.Slice != nil {
		slicePath := fldPath.Child("slice")
		allErrs = append(allErrs, validateInRange(int64(r.Slice.MemoryPercent), 1, 100, slicePath.Child("memoryPercent"))...)
		allErrs = append(allErrs, validateInRange(int64(r.Slice.CoresPercent), 1, 100, slicePath.Child("coresPercent"))...)
	}
	if r.Partition != "" {
		allErrs = append(allErrs, validateProfileName(r.Partition, fldPath.Child("partition"))...)
	}
	allErrs = append(allErrs, validateOptionalPositiveQuantity(r.CPU, fldPath.Child("cpu"))...)
	allErrs = append(allErrs, validateOptionalPositiveQuantity(r.Memory, fldPath.Child("memory"))...)
	allErrs = append(allErrs, validateOptionalPositiveQuantity(r.EphemeralStorage, fldPath.Child("ephemeralStorage"))...)
	return allErrs
}

// validateInstancePorts checks the ports of the Instance's Service. Like a
// Service, it allows one port number over two protocols (DNS on 53/TCP and
// 53/UDP), but not twice over the same protocol.
func validateInstancePorts(ports []gpu.InstancePort, fldPath *field.Path) field.ErrorList {
	type portKey struct {
		port     int32
		protocol corev1.Protocol
	}
	var allErrs field.ErrorList
	names := make(map[string]bool, len(ports))
	numbers := make(map[portKey]bool, len(ports))
	for i, p := range ports {
		idxPath := fldPath.Index(i)
		allErrs = append(allErrs, validatePortName(p.Name, names, idxPath.Child("name"))...)

		portPath := idxPath.Child("port")
		if msgs := utilvalidation.IsValidPortNum(int(p.Port)); len(msgs) > 0 {
			for _, msg := range msgs {
				allErrs = append(allErrs, field.Invalid(portPath, p.Port, msg))
			}
		} else {
			k := portKey{p.Port, p.Protocol}
			if numbers[k] {
				allErrs = append(allErrs, field.Duplicate(portPath, p.Port))
			}
			numbers[k] = true
		}
		allErrs = append(allErrs, validateRequiredEnum(p.Protocol, supportedProtocols, idxPath.Child("protocol"))...)
	}
	return allErrs
}

// validatePortName checks a required, unique port name; seen collects the
// names of the list.
func validatePortName(name string, seen map[string]bool, fldPath *field.Path) field.ErrorList {
	if name == "" {
		return field.ErrorList{field.Required(fldPath, "set a name for the port, e.g. http or jupyter")}
	}
	var allErrs field.ErrorList
	for _, msg := range utilvalidation.IsValidPortName(name) {
		allErrs = append(allErrs, field.Invalid(fldPath, name, msg))
	}
	if seen[name] {
		allErrs = append(allErrs, field.Duplicate(fldPath, name))
	}
	seen[name] = true
	return allErrs
}

func validateWorkspace(w *gpu.Workspace, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	if w.MountPath != "" {
		allErrs = append(allErrs, validateAbsolutePath(w.MountPath, fldPath.Child("mountPath"))...)
	}
	if w.EmptyDirSize != nil {
		sizePath := fldPath.Child("size")
		allErrs = append(allErrs, validatePositiveQuantity(*w.EmptyDirSize, sizePath)...)
		if w.ClaimName != "" {
			allErrs = append(allErrs, field.Forbidden(sizePath,
				"may not be set together with claimName; the PersistentVolumeClaim's own size applies, so remove size"))
		}
	}
	allErrs = append(allErrs, validateOptionalDNSSubdomain(w.ClaimName, fldPath.Child("claimName"))...)
	return allErrs
}

func validateVolumes(vols []gpu.InstanceVolume, ws *gpu.Workspace, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	wsMount := v1alpha1.DefaultWorkspaceMountPath
	if ws != nil && ws.MountPath != "" {
		wsMount = cleanPath(ws.MountPath)
	}
	names := make(map[string]bool, len(vols))
	mounts := make(map[string]bool, len(vols))
	for i := range vols {
		v := &vols[i]
		idxPath := fldPath.Index(i)

		namePath := idxPath.Child("name")
		if v.Name == "" {
			allErrs = append(allErrs, field.Required(namePath, "set a name for the volume, e.g. data"))
		} else {
			for _, msg := range utilvalidation.IsDNS1123Label(v.Name) {
				allErrs = append(allErrs, field.Invalid(namePath, v.Name, msg))
			}
			if names[v.Name] {
				allErrs = append(allErrs, field.Duplicate(namePath, v.Name))
			}
			names[v.Name] = true
		}

		mountPath := idxPath.Child("mountPath")
		if v.MountPath == "" {
			allErrs = append(allErrs, field.Required(mountPath, "set where to mount the volume, e.g. /data"))
		} else if errs := validateAbsolutePath(v.MountPath, mountPath); len(errs) > 0 {
			allErrs = append(allErrs, errs...)
		} else {
			clean := cleanPath(v.MountPath)
			switch {
			case clean == wsMount:
				allErrs = append(allErrs, field.Invalid(mountPath, v.MountPath,
					fmt.Sprintf("is the workspace's mount path (%s); choose another path, or move the workspace with spec.workspace.mountPath", wsMount)))
			case mounts[clean]:
				allErrs = append(allErrs, field.Duplicate(mountPath, v.MountPath))
			}
			mounts[clean] = true
		}

		allErrs = append(allErrs, validateVolumeSource(v, idxPath)...)
	}
	return allErrs
}

// validateVolumeSource checks that a volume has exactly one source, and
// reports every source after the first at its own path, as a Pod does.
func validateVolumeSource(v *gpu.InstanceVolume, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	first := ""
	claim := func(name string) bool {
		if first != "" {
			allErrs = append(allErrs, field.Forbidden(fldPath.Child(name),
				fmt.Sprintf("may not be set together with %s; a volume has exactly one source", first)))
			return false
		}
		first = name
		return true
	}

	if v.PersistentVolumeClaim != nil && claim("persistentVolumeClaim") {
		allErrs = append(allErrs, validateRequiredDNSSubdomain(v.PersistentVolumeClaim.ClaimName, "PersistentVolumeClaim",
			fldPath.Child("persistentVolumeClaim", "claimName"))...)
	}
	if v.ConfigMap != nil && claim("configMap") {
		cmPath := fldPath.Child("configMap")
		allErrs = append(allErrs, validateRequiredDNSSubdomain(v.ConfigMap.Name, "ConfigMap", cmPath.Child("name"))...)
		allErrs = append(allErrs, validateKeyToPaths(v.ConfigMap.Items, cmPath.Child("items"))...)
		allErrs = append(allErrs, validateFileMode(v.ConfigMap.DefaultMode, cmPath.Child("defaultMode"))...)
	}
	if v.Secret != nil && claim("secret") {
		secPath := fldPath.Child("secret")
		allErrs = append(allErrs, validateRequiredDNSSubdomain(v.Secret.SecretName, "Secret", secPath.Child("secretName"))...)
		allErrs = append(allErrs, validateKeyToPaths(v.Secret.Items, secPath.Child("items"))...)
		allErrs = append(allErrs, validateFileMode(v.Secret.DefaultMode, secPath.Child("defaultMode"))...)
	}
	if v.HostPath != nil && claim("hostPath") {
		hpPath := fldPath.Child("hostPath")
		if v.HostPath.Path == "" {
			allErrs = append(allErrs, field.Required(hpPath.Child("path"), "set the directory on the node, e.g. /data"))
		} else {
			allErrs = append(allErrs, validateAbsolutePath(v.HostPath.Path, hpPath.Child("path"))...)
		}
		if v.HostPath.Type != nil {
			allErrs = append(allErrs, validateOptionalEnum(*v.HostPath.Type, supportedHostPathTypes, hpPath.Child("type"))...)
		}
	}
	if first == "" {
		allErrs = append(allErrs, field.Required(fldPath,
			"must set exactly one of persistentVolumeClaim, configMap, secret or hostPath"))
	}
	return allErrs
}

func validateKeyToPaths(items []corev1.KeyToPath, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	for i, item := range items {
		idxPath := fldPath.Index(i)
		allErrs = append(allErrs, validateKey(item.Key, idxPath.Child("key"))...)
		if item.Path == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("path"), "set the file the key is written to, e.g. config.yaml"))
		} else {
			allErrs = append(allErrs, validateRelativePath(item.Path, idxPath.Child("path"))...)
		}
		allErrs = append(allErrs, validateFileMode(item.Mode, idxPath.Child("mode"))...)
	}
	return allErrs
}

func validateFileMode(mode *int32, fldPath *field.Path) field.ErrorList {
	if mode != nil && (*mode < 0 || *mode > maxFileMode) {
		return field.ErrorList{field.Invalid(fldPath, *mode, "must be a file mode between 0 and 0777 (octal), e.g. 0644")}
	}
	return nil
}

func validateInstanceStatus(status *gpu.InstanceStatus, fldPath *field.Path) field.ErrorList {
	var allErrs field.ErrorList
	allErrs = append(allErrs, validateOptionalEnum(status.Phase, supportedInstancePhases, fldPath.Child("phase"))...)
	allErrs = append(allErrs, metav1validation.ValidateConditions(status.Conditions, fldPath.Child("conditions"))...)
	allErrs = append(allErrs, validateNonnegativeInt(status.ObservedGeneration, fldPath.Child("observedGeneration"))...)
	allErrs = append(allErrs, validateOptionalDNSSubdomain(status.NodeName, fldPath.Child("nodeName"))...)
	// The addresses are copied from the Node and the Pod, so they are held
	// to the rules those objects had, not to canonical form.
	for i, ip := range status.HostIPs {
		allErrs = append(allErrs, utilvalidation.IsValidIPForLegacyField(fldPath.Child("hostIPs").Index(i), ip, true, nil)...)
	}
	for i, ip := range status.PodIPs {
		allErrs = append(allErrs, utilvalidation.IsValidIPForLegacyField(fldPath.Child("podIPs").Index(i), ip, true, nil)...)
	}

	names := make(map[string]bool, len(status.Ports))
	for i, p := range status.Ports {
		idxPath := fldPath.Child("ports").Index(i)
		allErrs = append(allErrs, validatePortName(p.Name, names, idxPath.Child("name"))...)
		for _, msg := range utilvalidation.IsValidPortNum(int(p.Port)) {
			allErrs = append(allErrs, field.Invalid(idxPath.Child("port"), p.Port, msg))
		}
		// 0 means the Service has no node port yet.
		allErrs = append(allErrs, validateInRange(int64(p.NodePort), 0, 65535, idxPath.Child("nodePort"))...)
		allErrs = append(allErrs, validateOptionalEnum(p.Protocol, supportedProtocols, idxPath.Child("protocol"))...)
	}

	if a := status.Activity; a != nil {
		if u := a.Utilization; u != nil && (*u < 0 || *u > 100) {
			allErrs = append(allErrs, field.Invalid(fldPath.Child("activity", "utilization"), *u, "must be a percentage, 0 to 100"))
		}
		if m := a.MemoryUsed; m != nil {
			allErrs = append(allErrs, validateNonnegativeQuantity(*m, fldPath.Child("activity", "memoryUsed"))...)
		}
	}
	for i, a := range status.Allocations {
		idxPath := fldPath.Child("allocations").Index(i)
		if a.Device == "" {
			allErrs = append(allErrs, field.Required(idxPath.Child("device"), "set the device ID, e.g. a GPU UUID"))
		}
		allErrs = append(allErrs, validateRequiredEnum(a.Mode, supportedAllocationModes, idxPath.Child("mode"))...)
		allErrs = append(allErrs, validateInRange(int64(a.MemoryPercent), 0, 100, idxPath.Child("memoryPercent"))...)
		allErrs = append(allErrs, validateInRange(int64(a.CoresPercent), 0, 100, idxPath.Child("coresPercent"))...)
		if a.Profile != "" {
			allErrs = append(allErrs, validateProfileName(a.Profile, idxPath.Child("profile"))...)
		}
	}
	return allErrs
}

// ValidateInstanceLogOptions validates the query of instances/log with the
// limits kube-apiserver puts on a Pod's log options, so a bad value is
// refused here, naming the parameter, rather than by the cluster.
func ValidateInstanceLogOptions(opts *gpu.InstanceLogOptions) field.ErrorList {
	var allErrs field.ErrorList
	if opts.Container != "" {
		for _, msg := range utilvalidation.IsDNS1123Label(opts.Container) {
			allErrs = append(allErrs, field.Invalid(field.NewPath("container"), opts.Container, msg))
		}
	}
	if s := opts.SinceSeconds; s != nil && *s < 1 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("sinceSeconds"), *s, "must be greater than 0"))
	}
	if n := opts.TailLines; n != nil && *n < 0 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("tailLines"), *n, "must be 0 or more"))
	}
	if n := opts.LimitBytes; n != nil && *n < 1 {
		allErrs = append(allErrs, field.Invalid(field.NewPath("limitBytes"), *n, "must be greater than 0"))
	}
	return allErrs
}
