package deploy

import (
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"

	"kiln.dev/kiln/cmd/kiln-node-agent/app"
	"kiln.dev/kiln/pkg/deviceplugin/kubeletstub"
)

// TestNodeAgentRegistersWithTheKubelet: the node agent's DaemonSet, its
// command run by the kiln-node-agent binary with the device-plugins
// directory it mounts from the host, registers with a kubelet there and
// serves the node's devices. The inventory stands in for NVML, which
// needs a GPU.
func TestNodeAgentRegistersWithTheKubelet(t *testing.T) {
	bin := filepath.Join(root, "_output", "bin", "kiln-node-agent")
	if _, err := os.Stat(bin); err != nil {
		t.Fatalf("%v: build it with `make build`", err)
	}
	ds := decode[appsv1.DaemonSet](t, "node-agent.yaml", "DaemonSet")
	pod := ds.Spec.Template.Spec
	c := pod.Containers[0]
	if i := slices.IndexFunc(c.Env, func(e corev1.EnvVar) bool { return e.Name == "NODE_NAME" }); i < 0 ||
		c.Env[i].ValueFrom == nil || c.Env[i].ValueFrom.FieldRef == nil || c.Env[i].ValueFrom.FieldRef.FieldPath != "spec.nodeName" {
		t.Error("the agent reports its node's NodeDevices; NODE_NAME must come from spec.nodeName")
	}
	hostPaths := map[string]string{}
	for _, v := range pod.Volumes {
		if v.HostPath != nil {
			hostPaths[v.Name] = v.HostPath.Path
		}
	}
	var mounted, podResources string
	for _, m := range c.VolumeMounts {
		switch hostPaths[m.Name] {
		case "/var/lib/kubelet/device-plugins":
			mounted = m.MountPath
		case "/var/lib/kubelet/pod-resources":
			podResources = m.MountPath
		}
	}
	if podResources+"/kubelet.sock" != app.DefaultPodResourcesSocket {
		t.Errorf("the kubelet's pod-resources directory is mounted at %q, want the directory of %s", podResources, app.DefaultPodResourcesSocket)
	}
	// The agent looks where its flag's default says.
	if mounted != strings.TrimSuffix(pluginapi.DevicePluginPath, "/") {
		t.Fatalf("the kubelet's device-plugins directory is mounted at %q, want %s", mounted, pluginapi.DevicePluginPath)
	}

	dir, inv := t.TempDir(), filepath.Join(t.TempDir(), "inventory.yaml")
	if err := os.WriteFile(inv, []byte("devices:\n- {uuid: GPU-0, resource: nvidia.com/gpu}\n- {uuid: GPU-1, resource: nvidia.com/gpu}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	kubelet := kubeletstub.Start(t, dir)
	args := append(append([]string(nil), c.Args...), "--device-plugin-dir="+dir, "--inventory="+inv)
	cmd := exec.Command(bin, args...)
	// Without NODE_NAME it is the device plugin alone: there is no API
	// server here to report to.
	cmd.Env = slices.DeleteFunc(os.Environ(), func(e string) bool { return strings.HasPrefix(e, "NODE_NAME=") })
	run(t, cmd)
	reg := kubelet.Registrations(1)["nvidia.com/gpu"]
	if reg == nil {
		t.Fatal("no registration of nvidia.com/gpu")
	}
	stream, err := kubelet.Dial(reg).ListAndWatch(context.Background(), &pluginapi.Empty{})
	if err != nil {
		t.Fatal(err)
	}
	list, err := stream.Recv()
	if err != nil || len(list.Devices) != 2 {
		t.Fatalf("ListAndWatch: %v, %v; want GPU-0 and GPU-1", list, err)
	}
}
