//go:build integration

package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// TestMakeRun runs `make run` as a new user would, reads the kubeconfig path
// it prints, and uses it to create an InstanceType and an Instance and list
// them as a table.
func TestMakeRun(t *testing.T) {
	if _, err := exec.LookPath("make"); err != nil {
		t.Fatalf("make is needed: %v", err)
	}
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	port := freePort(t)
	cmd := exec.Command("make", "-C", root, "run", "OUTPUT="+out, fmt.Sprintf("RUN_FLAGS=--secure-port=%d", port))
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true}
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	// End make and the server it started, and nothing else.
	t.Cleanup(func() {
		_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGTERM)
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			_ = syscall.Kill(-cmd.Process.Pid, syscall.SIGKILL)
		}
	})

	kubeconfig := make(chan string, 1)
	go func() {
		scanner := bufio.NewScanner(stdout)
		for scanner.Scan() {
			if path, ok := strings.CutPrefix(scanner.Text(), "kubeconfig: "); ok {
				kubeconfig <- path
			}
		}
	}()
	var path string
	select {
	case path = <-kubeconfig:
	case <-time.After(5 * time.Minute):
		t.Fatal("make run printed no kubeconfig within 5 minutes")
	}

	cfg, err := clientcmd.BuildConfigFromFlags("", path)
	if err != nil {
		t.Fatal(err)
	}
	if want := fmt.Sprintf("https://127.0.0.1:%d", port); cfg.Host != want {
		t.Errorf("kubeconfig server %s, want %s", cfg.Host, want)
	}
	client := versioned.NewForConfigOrDie(cfg)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if _, err := client.GpuV1alpha1().InstanceTypes().Create(ctx, &gpuv1.InstanceType{
		ObjectMeta: metav1.ObjectMeta{Name: "l4"},
		Spec: gpuv1.InstanceTypeSpec{Accelerator: &gpuv1.Accelerator{
			Vendor: "nvidia", Model: "NVIDIA-L4", Memory: resource.MustParse("24Gi"),
			Sliced: &gpuv1.SlicedSharing{},
		}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create instancetype: %v", err)
	}
	if _, err := client.GpuV1alpha1().Instances("default").Create(ctx, &gpuv1.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "notebook"},
		Spec: gpuv1.InstanceSpec{Type: "l4", Image: "jupyter/base-notebook",
			Resources: gpuv1.InstanceResources{Slice: &gpuv1.SliceRequest{MemoryPercent: 50}},
			Ports:     []gpuv1.InstancePort{{Name: "jupyter", Port: 8888}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatalf("create instance: %v", err)
	}

	body, err := client.GpuV1alpha1().RESTClient().Get().
		AbsPath("/apis/gpu.kiln.dev/v1alpha1/namespaces/default/instances").
		SetHeader("Accept", "application/json;as=Table;v=v1;g=meta.k8s.io").DoRaw(ctx)
	if err != nil {
		t.Fatalf("list as table: %v", err)
	}
	var table metav1.Table
	if err := json.Unmarshal(body, &table); err != nil {
		t.Fatal(err)
	}
	if len(table.Rows) != 1 || fmt.Sprint(table.Rows[0].Cells[:3]) != "[notebook l4 50%]" {
		t.Errorf("table rows: %v", table.Rows)
	}

	// Nobody without the admin token gets in.
	anon := *cfg
	anon.BearerToken = ""
	_, err = versioned.NewForConfigOrDie(&anon).GpuV1alpha1().Instances("default").List(ctx, metav1.ListOptions{})
	if err == nil {
		t.Error("a request without the admin token was served")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port
}
