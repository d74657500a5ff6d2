package nodeagent

import (
	"context"
	"io"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
)

// TestMetrics: the node's devices as Prometheus reads them, each with
// what holds it: a device held by an Instance's Pod names its namespace,
// Pod and Instance; a busy one its utilization and memory; a failed one
// is 0 in kiln_device_healthy.
func TestMetrics(t *testing.T) {
	busy := inventory + "usage:\n  GPU-1: {utilization: 80, memoryUsed: 20Gi}\n"
	a, kube, kiln, _ := simulatedAgent(t, strings.Replace(busy, "nvLinkPeers: [GPU-0]}", "nvLinkPeers: [GPU-0], unhealthy: XID 79}", 1))
	pod := gpuPod("train", 1, "Instance", nil)
	if _, err := kube.CoreV1().Pods("team-a").Create(context.Background(), pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	device := held(t, kiln, map[types.UID]int{pod.UID: 1})[pod.UID][0]

	srv := httptest.NewServer(a.MetricsHandler())
	defer srv.Close()
	var text string
	scrape := func(ctx context.Context) (bool, error) {
		resp, err := srv.Client().Get(srv.URL)
		if err != nil {
			return false, err
		}
		defer resp.Body.Close()
		body, err := io.ReadAll(resp.Body)
		text = string(body)
		return strings.Contains(text, `kiln_device_gpu_utilization{Hostname="gpu-0",UUID="GPU-1"`), err
	}
	if err := wait.PollUntilContextTimeout(context.Background(), 20*time.Millisecond, 10*time.Second, true, scrape); err != nil {
		t.Fatalf("no utilization of GPU-1 in:\n%s", text)
	}
	labels := func(uuid, index, inst, ns, pod string) string {
		return `{Hostname="gpu-0",UUID="` + uuid + `",gpu="` + index + `",kiln_claim="",kiln_instance="` + inst +
			`",modelName="NVIDIA-H100-80GB-HBM3",namespace="` + ns + `",pod="` + pod + `"}`
	}
	holder := func(uuid, index string) string {
		if uuid == device {
			return labels(uuid, index, "train", "team-a", "train")
		}
		return labels(uuid, index, "", "", "")
	}
	for _, want := range []string{
		"kiln_device_gpu_utilization" + holder("GPU-1", "1") + " 80",
		"kiln_device_memory_used_bytes" + holder("GPU-1", "1") + " 2.147483648e+10",
		"kiln_device_last_active_timestamp_seconds" + holder("GPU-1", "1"),
		"kiln_device_gpu_utilization" + holder("GPU-0", "0") + " 0",
		"kiln_device_healthy" + holder("GPU-1", "1") + " 1",
		"kiln_device_healthy" + holder("GPU-2", "2") + " 0",
	} {
		if !strings.Contains(text, want) {
			t.Errorf("no %s in:\n%s", want, text)
		}
	}
	if strings.Contains(text, "kiln_device_last_active_timestamp_seconds"+holder("GPU-0", "0")) {
		t.Errorf("GPU-0, never active, has a last active time:\n%s", text)
	}
}
