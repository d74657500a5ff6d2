package localcluster

import (
	"context"
	"errors"
	"os"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ModelsClaim is the PersistentVolumeClaim artifacts/examples/instances.yaml
// creates and mounts into its inference Instance.
const ModelsClaim = "models"

// ModelsVolume is the PersistentVolume the claim "models" of the examples
// binds to in namespace. The local cluster has no provisioner, so the
// volume is made in advance and pre-bound to that one claim by claimRef;
// no other claim takes it. Nothing mounts it (kwok runs no containers):
// hostPath only gives it a source.
func ModelsVolume(namespace string) *corev1.PersistentVolume {
	return &corev1.PersistentVolume{
		ObjectMeta: metav1.ObjectMeta{Name: ModelsClaim + "-" + namespace},
		Spec: corev1.PersistentVolumeSpec{
			Capacity:                      corev1.ResourceList{corev1.ResourceStorage: resource.MustParse("100Gi")},
			AccessModes:                   []corev1.PersistentVolumeAccessMode{corev1.ReadOnlyMany},
			PersistentVolumeReclaimPolicy: corev1.PersistentVolumeReclaimRetain,
			ClaimRef:                      &corev1.ObjectReference{Kind: "PersistentVolumeClaim", APIVersion: "v1", Namespace: namespace, Name: ModelsClaim},
			PersistentVolumeSource: corev1.PersistentVolumeSource{
				HostPath: &corev1.HostPathVolumeSource{Path: "/srv/models"},
			},
		},
	}
}

// createVolumes creates Options.PersistentVolumes. One that a deleted
// claim released is pre-bound to its claim again (a Released volume binds
// no new claim of that name), so examples deleted and applied anew bind
// after the next start.
func (c *Cluster) createVolumes(ctx context.Context) error {
	for _, pv := range c.opts.PersistentVolumes {
		got, err := c.kube.CoreV1().PersistentVolumes().Create(ctx, pv, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			got, err = c.kube.CoreV1().PersistentVolumes().Get(ctx, pv.Name, metav1.GetOptions{})
		}
		if err != nil {
			return err
		}
		if got.Status.Phase == corev1.VolumeReleased && pv.Spec.ClaimRef != nil {
			got.Spec.ClaimRef = pv.Spec.ClaimRef.DeepCopy()
			if _, err := c.kube.CoreV1().PersistentVolumes().Update(ctx, got, metav1.UpdateOptions{}); err != nil {
				return err
			}
		}
	}
	return nil
}

// writeNewFile writes a file unless it exists.
func writeNewFile(name string, data []byte) error {
	f, err := os.OpenFile(name, os.O_CREATE|os.O_EXCL|os.O_WRONLY, 0o644)
	if errors.Is(err, os.ErrExist) {
		return nil
	}
	if err != nil {
		return err
	}
	if _, err := f.Write(data); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}
