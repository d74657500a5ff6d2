package localcluster_test

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"kiln.dev/kiln/test/images"
	"kiln.dev/kiln/test/localcluster"
)

// TestRealNodeRunsAPod: real-0 joins the control plane, Ready, reporting
// v1.37.2; a Pod bound to it runs in a real container whose output the
// kubelet serves back through kube-apiserver; and stopping the cluster
// leaves no network namespace behind.
func TestRealNodeRunsAPod(t *testing.T) {
	if testing.Short() {
		t.Skip("-short: starts a local control plane and a kubelet; make e2e runs it without -short")
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := filepath.Join(t.TempDir(), "local")
	c, err := localcluster.Start(ctx, localcluster.Options{
		Dir: dir, BinDir: filepath.Join(root, "_output", "bin"), RepoRoot: root,
		ImageDir: filepath.Join(root, "_output", "images"),
		Nodes:    []localcluster.NodeSpec{}, NoController: true, RealNode: true,
		Log: t.Output(),
	})
	if err != nil {
		for _, name := range []string{"containerd", "kubelet"} {
			if b, rerr := os.ReadFile(filepath.Join(dir, "logs", name+".log")); rerr == nil {
				t.Logf("%s.log ends:\n%s", name, tail(string(b), 15))
				for _, l := range strings.Split(string(b), "\n") {
					if strings.Contains(l, "level=error") || strings.Contains(l, "level=warn") {
						t.Log(l)
					}
				}
			}
		}
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			c.Stop()
		}
	}()
	kube, err := kubernetes.NewForConfig(c.AdminConfig)
	if err != nil {
		t.Fatal(err)
	}
	node, err := kube.CoreV1().Nodes().Get(ctx, localcluster.RealNodeName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := node.Status.NodeInfo.KubeletVersion; v != "v1.37.2" {
		t.Errorf("kubelet version %q, want v1.37.2", v)
	}
	if !strings.HasPrefix(node.Status.NodeInfo.ContainerRuntimeVersion, "containerd://2.4.2") {
		t.Errorf("runtime %q, want containerd 2.4.2", node.Status.NodeInfo.ContainerRuntimeVersion)
	}

	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "hello", Namespace: "default"},
		Spec: corev1.PodSpec{
			NodeName:                     localcluster.RealNodeName,
			RestartPolicy:                corev1.RestartPolicyNever,
			AutomountServiceAccountToken: ptr.To(false),
			Containers: []corev1.Container{{
				Name: "main", Image: images.WorkloadImage,
				Command: []string{"/bin/sh", "-c", "echo hello from $(hostname); ls /dev"},
			}},
		},
	}
	if _, err := kube.CoreV1().Pods("default").Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	var last *corev1.Pod
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		last, err = kube.CoreV1().Pods("default").Get(ctx, "hello", metav1.GetOptions{})
		return err == nil && last.Status.Phase == corev1.PodSucceeded, nil
	}); err != nil {
		t.Fatalf("Pod hello did not succeed: %+v", last.Status)
	}
	logs, err := kube.CoreV1().Pods("default").GetLogs("hello", &corev1.PodLogOptions{}).DoRaw(ctx)
	if err != nil {
		t.Fatalf("logs through kube-apiserver and the kubelet: %v", err)
	}
	if !strings.Contains(string(logs), "hello from hello") || strings.Contains(string(logs), "nvidia") {
		t.Errorf("logs %q, want the container's greeting and no card under /dev", logs)
	}

	c.Stop()
	stopped = true
	if out, err := exec.Command("ip", "netns", "list").CombinedOutput(); err != nil || strings.Contains(string(out), "kiln-real-0") {
		t.Errorf("after Stop, ip netns list: %s %v; want no kiln-real-0", out, err)
	}
	if out, err := exec.Command("ip", "link", "show", "kiln-r0-h").CombinedOutput(); err == nil {
		t.Errorf("after Stop, the host side of the veth is still there: %s", out)
	}
	if _, err := os.Stat("/run/kiln-real-0"); !os.IsNotExist(err) {
		t.Errorf("after Stop, the shims' socket directory: %v; want it gone", err)
	}
}

// tail is the last n lines of s.
func tail(s string, n int) string {
	lines := strings.Split(strings.TrimRight(s, "\n"), "\n")
	return strings.Join(lines[max(len(lines)-n, 0):], "\n")
}
