package faults

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/test/localcluster"
)

var apiServices = schema.GroupVersionResource{Group: "apiregistration.k8s.io", Version: "v1", Resource: "apiservices"}

func unstructuredSlice(obj map[string]any, fields ...string) ([]any, bool, error) {
	return unstructured.NestedSlice(obj, fields...)
}

func execCommand(ctx context.Context, name string, args ...string) ([]byte, error) {
	return exec.CommandContext(ctx, name, args...).CombinedOutput()
}

// loseNode deletes the H100 node that holds the most of the tenants' Pods,
// as a cloud provider does when a machine is gone, and waits until the
// cluster has let go of it: no Pod bound to it, no Claim Bound to it
// (each is Lost, or placed again elsewhere). It then brings the node back
// under the same name, empty, for the next round.
func (e *Env) loseNode(ctx context.Context, nodes []localcluster.NodeSpec) error {
	// The load may have stopped or deleted every Instance at this moment,
	// or the last round's Claims may still be placed again: wait, bounded,
	// for a tenant Pod on an H100.
	var count map[string]int
	var lost *localcluster.NodeSpec
	err := wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		count, lost = map[string]int{}, nil
		for _, ns := range tenantNamespaces(e.Tenants) {
			pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				count[p.Spec.NodeName]++
			}
		}
		for i, n := range nodes {
			if n.GPU && n.Labels[localcluster.LabelGPUProduct] == localcluster.ProductH100 && (lost == nil || count[n.Name] > count[lost.Name]) {
				lost = &nodes[i]
			}
		}
		return lost != nil && count[lost.Name] > 0, nil
	})
	if err != nil {
		return fmt.Errorf("no H100 node held any tenant Pod for 2 minutes: %v; Budgets: %s", count, e.budgetsUsed(ctx))
	}
	fmt.Fprintf(e.Log, "faults: deleting node %s with %d tenant Pods\n", lost.Name, count[lost.Name])
	if err := e.Kube.CoreV1().Nodes().Delete(ctx, lost.Name, metav1.DeleteOptions{}); err != nil {
		return err
	}
	var holding []string
	err = wait.PollUntilContextTimeout(ctx, time.Second, 3*time.Minute, true, func(ctx context.Context) (bool, error) {
		holding = nil
		for _, ns := range tenantNamespaces(e.Tenants) {
			pods, err := e.Kube.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{FieldSelector: "spec.nodeName=" + lost.Name})
			if err != nil {
				return false, nil
			}
			for _, p := range pods.Items {
				holding = append(holding, "Pod "+ns+"/"+p.Name)
			}
			claims, err := e.Kiln.GpuV1alpha1().Claims(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, c := range claims.Items {
				if c.Status.NodeName == lost.Name && c.Status.Phase != gpuv1.ClaimLost && c.Status.Phase != gpuv1.ClaimExpired && c.DeletionTimestamp == nil {
					holding = append(holding, fmt.Sprintf("Claim %s/%s %s", ns, c.Name, c.Status.Phase))
				}
			}
		}
		return len(holding) == 0, nil
	})
	if err != nil {
		return fmt.Errorf("3 minutes after node %s was deleted, still on it: %v", lost.Name, holding)
	}
	if _, err := e.Kube.CoreV1().Nodes().Create(ctx, lost.Node(), metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, time.Second, 2*time.Minute, true, func(ctx context.Context) (bool, error) {
		n, err := e.Kube.CoreV1().Nodes().Get(ctx, lost.Name, metav1.GetOptions{})
		if err != nil {
			return false, nil
		}
		return localcluster.NodeReady(n) && !hasTaint(n, corev1.TaintNodeNotReady), nil
	})
}

func hasTaint(n *corev1.Node, key string) bool {
	for _, t := range n.Spec.Taints {
		if t.Key == key {
			return true
		}
	}
	return false
}

// budgetsUsed says what each tenant's Budget charges, for a failure.
func (e *Env) budgetsUsed(ctx context.Context) string {
	var out []string
	for _, ns := range tenantNamespaces(e.Tenants) {
		l, err := e.Kiln.GpuV1alpha1().Budgets(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			out = append(out, fmt.Sprintf("%s: %v", ns, err))
			continue
		}
		for _, b := range l.Items {
			out = append(out, fmt.Sprintf("%s/%s used %v", ns, b.Name, b.Status.Used))
		}
	}
	return strings.Join(out, "; ")
}
