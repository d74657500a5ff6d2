package claim

import (
	"fmt"
	"sort"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/handover"
)

// FieldManager owns what the claim loop writes.
const FieldManager = "kiln-claim-controller"

// controlledBy says whether the Claim is the controller of pod.
func controlledBy(pod *corev1.Pod, c *v1alpha1.Claim) bool {
	ref := metav1.GetControllerOf(pod)
	return ref != nil && ref.UID == c.UID
}

// heldDevices is what the Claim holds on node: the devices the node
// agent reports its holder Pod got; until the report comes, or with no
// holder (attached), what it held before; unit names made up from the
// holder's name on a node no agent reports.
func (c *Controller) heldDevices(cl *v1alpha1.Claim, ask corev1.ResourceList, node string, holder *corev1.Pod) []string {
	nd, err := c.devices.Get(node)
	if err != nil {
		return devices(cl, ask)
	}
	var got []string
	for _, d := range nd.Status.Devices {
		if holder != nil && d.Holder != nil && d.Holder.PodUID == holder.UID {
			got = append(got, d.UUID)
		}
	}
	if len(got) > 0 {
		sort.Strings(got)
		return got
	}
	if cl.Status.NodeName == node {
		return cl.Status.Devices
	}
	return nil
}

// devices names what a Claim holds on a node no agent reports: one entry
// per unit, named after the holder Pod.
func devices(c *v1alpha1.Claim, ask corev1.ResourceList) []string {
	var out []string
	for name, q := range ask {
		for i := int64(0); i < q.Value(); i++ {
			out = append(out, fmt.Sprintf("%s/%s/%d", handover.HolderName(c), name, i))
		}
	}
	return out
}
