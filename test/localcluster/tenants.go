package localcluster

import (
	"context"
	"encoding/json"
	"time"

	authorizationv1 "k8s.io/api/authorization/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// LabelAccelerators on a namespace, set to AcceleratorsKilnOnly, binds the
// policy of artifacts/policy/accelerator-pods.yaml there: only Kiln makes
// Pods that ask for accelerators. Every tenant namespace carries it.
const (
	LabelAccelerators    = gpuv1.LabelAccelerators
	AcceleratorsKilnOnly = gpuv1.AcceleratorsKilnOnly
)

// LabelPodSecurity enforces a Pod Security level in a namespace. Tenant
// namespaces are at baseline: no privileged containers, host namespaces or
// host paths, whoever makes the Pod (a privileged Instance there needs the
// admin to lower it as well as the grant).
const LabelPodSecurity = "pod-security.kubernetes.io/enforce"

// TenantQuota is the ResourceQuota of each tenant namespace. Node ports
// are one range for the whole cluster: a tenant who took them all, by
// hand or through Instances (whose Services count too), would leave none
// for another's Instances. LoadBalancers, which the local cluster has no
// provider for, are refused.
const TenantQuota = "tenant-services"

// TenantNodePorts is the node ports a tenant namespace may hold.
const TenantNodePorts = 32

func tenantQuota() *corev1.ResourceQuota {
	return &corev1.ResourceQuota{
		ObjectMeta: metav1.ObjectMeta{Name: TenantQuota},
		Spec: corev1.ResourceQuotaSpec{Hard: corev1.ResourceList{
			corev1.ResourceServicesNodePorts:     *resource.NewQuantity(TenantNodePorts, resource.DecimalSI),
			corev1.ResourceServicesLoadBalancers: *resource.NewQuantity(0, resource.DecimalSI),
		}},
	}
}

// createTenants gives each tenant a namespace labelled for the accelerator
// policy and Pod Security baseline, the standard "edit" role in it, the
// quota of TenantQuota, and a kubeconfig with a client certificate for the
// user. It returns once RBAC aggregation has folded Kiln's rules into
// "edit" and the quota is counted.
func (c *Cluster) createTenants(ctx context.Context) error {
	for _, t := range c.opts.Tenants {
		ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: t, Labels: map[string]string{
			LabelAccelerators: AcceleratorsKilnOnly,
			LabelPodSecurity:  "baseline",
		}}}
		_, err := c.kube.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			// A resumed cluster made before a label was added gets it.
			patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": ns.Labels}})
			_, err = c.kube.CoreV1().Namespaces().Patch(ctx, t, types.MergePatchType, patch, metav1.PatchOptions{})
		}
		if err != nil {
			return err
		}
		rb := &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: t + "-edit", Namespace: t},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: "edit"},
			Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: t}},
		}
		if _, err := c.kube.RbacV1().RoleBindings(t).Create(ctx, rb, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		if _, err := c.kube.CoreV1().ResourceQuotas(t).Create(ctx, tenantQuota(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cert, err := c.pki.ca.client(c.pkiDir(), t, t)
		if err != nil {
			return err
		}
		if err := writeKubeconfig(c.KubeconfigFor(t), c.apiserverURL(), c.pki.ca.CertFile, t, t, credentials{cert: cert}); err != nil {
			return err
		}
	}
	return c.poll(ctx, time.Minute, func(ctx context.Context) (bool, error) {
		for _, t := range c.opts.Tenants {
			// Kiln's roles come with its install, when it runs in the
			// cluster; until then "edit" has Pods.
			group, resource := "gpu.kiln.dev", "instances"
			if c.opts.KilnInCluster {
				group, resource = "", "pods"
			}
			sar := &authorizationv1.SubjectAccessReview{Spec: authorizationv1.SubjectAccessReviewSpec{
				User: t,
				ResourceAttributes: &authorizationv1.ResourceAttributes{
					Namespace: t, Verb: "create", Group: group, Resource: resource,
				},
			}}
			res, err := c.kube.AuthorizationV1().SubjectAccessReviews().Create(ctx, sar, metav1.CreateOptions{})
			if err != nil {
				return false, err
			}
			if !res.Status.Allowed {
				return false, nil
			}
			// Until kube-controller-manager has counted it, the quota
			// refuses the Services it limits.
			if q, err := c.kube.CoreV1().ResourceQuotas(t).Get(ctx, TenantQuota, metav1.GetOptions{}); err != nil {
				return false, err
			} else if len(q.Status.Hard) == 0 {
				return false, nil
			}
			// Pods need the namespace's default ServiceAccount.
			if _, err := c.kube.CoreV1().ServiceAccounts(t).Get(ctx, "default", metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return false, nil
			} else if err != nil {
				return false, err
			}
		}
		return true, nil
	})
}
