package deploy

import (
	"bufio"
	"bytes"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// TestMonitoringComponent: artifacts/monitoring, added to the base as a
// kustomize component, turns the node agent's metrics on with flags its
// binary takes, on the port its PodMonitor scrapes and its NetworkPolicy
// opens.
func TestMonitoringComponent(t *testing.T) {
	// kustomize takes relative paths inside the tree only.
	dir, err := os.MkdirTemp(filepath.Join(root, "_output"), "monitoring-overlay-")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.RemoveAll(dir) })
	overlay := "resources: [../../artifacts]\ncomponents: [../../artifacts/monitoring]\n"
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(overlay), 0o644); err != nil {
		t.Fatal(err)
	}
	out, err := exec.Command(filepath.Join(root, "_output", "bin", "kubectl"), "kustomize", dir).Output()
	if err != nil {
		t.Fatalf("kubectl kustomize: %v", err)
	}
	var agent *appsv1.DaemonSet
	var monitor, policy string
	r := utilyaml.NewYAMLReader(bufio.NewReader(bytes.NewReader(out)))
	for {
		doc, err := r.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		switch {
		case bytes.Contains(doc, []byte("kind: DaemonSet\n")) && bytes.Contains(doc, []byte("name: kiln-node-agent\n")):
			agent = &appsv1.DaemonSet{}
			if err := utilyaml.Unmarshal(doc, agent); err != nil {
				t.Fatal(err)
			}
		case bytes.Contains(doc, []byte("kind: PodMonitor\n")):
			monitor = string(doc)
		case bytes.Contains(doc, []byte("name: kiln-node-agent-metrics\n")):
			policy = string(doc)
		}
	}
	if agent == nil || monitor == "" || policy == "" {
		t.Fatalf("the build lacks the node agent (%v), the PodMonitor (%v) or the NetworkPolicy (%v)", agent != nil, monitor != "", policy != "")
	}
	c := agent.Spec.Template.Spec.Containers[0]
	if len(c.Ports) != 1 || c.Ports[0].Name != "metrics" || c.Ports[0].ContainerPort != 9400 {
		t.Errorf("node agent ports %+v, want metrics on 9400", c.Ports)
	}
	if !strings.Contains(monitor, "port: metrics") || !strings.Contains(policy, "port: 9400") {
		t.Errorf("the PodMonitor or NetworkPolicy does not name the metrics port:\n%s\n%s", monitor, policy)
	}
	help, err := exec.Command(filepath.Join(root, "_output", "bin", "kiln-node-agent"), append(c.Args, "--help")...).CombinedOutput()
	if err != nil || strings.Contains(string(help), "unknown flag") {
		t.Errorf("kiln-node-agent %s --help: %v\n%s", strings.Join(c.Args, " "), err, firstLines(string(help), 5))
	}
}
