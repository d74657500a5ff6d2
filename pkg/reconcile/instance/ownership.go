package instance

import (
	"fmt"
	"strings"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// ownedBy says whether inst is the controller of obj. Only then may the
// controller change or delete obj: a same-named object made by someone
// else, or by an earlier Instance of the same name (another UID), is left
// alone.
func ownedBy(obj metav1.Object, inst *v1alpha1.Instance) bool {
	ref := instanceControllerOf(obj)
	return ref != nil && ref.UID == inst.UID
}

// instanceControllerOf returns obj's controller reference if it names an
// Instance, else nil.
func instanceControllerOf(obj metav1.Object) *metav1.OwnerReference {
	ref := metav1.GetControllerOf(obj)
	if ref == nil || ref.Kind != "Instance" || !strings.HasPrefix(ref.APIVersion, v1alpha1.GroupName+"/") {
		return nil
	}
	return ref
}

// conflictMessage explains which same-named objects are in the way, or is
// empty when none is.
func conflictMessage(inst *v1alpha1.Instance, pod *corev1.Pod, svc *corev1.Service) string {
	var in []string
	if pod != nil {
		in = append(in, "Pod "+inst.Namespace+"/"+pod.Name)
	}
	if svc != nil {
		in = append(in, "Service "+inst.Namespace+"/"+svc.Name)
	}
	if len(in) == 0 {
		return ""
	}
	return fmt.Sprintf("%s already exists and is not owned by this Instance; Kiln does not touch it: rename or delete it, or recreate the Instance under another name",
		strings.Join(in, " and "))
}

// readyReason is the reason of the Instance's Ready condition as stored.
func readyReason(inst *v1alpha1.Instance) string {
	if c := meta.FindStatusCondition(inst.Status.Conditions, v1alpha1.InstanceConditionReady); c != nil {
		return c.Reason
	}
	return ""
}
