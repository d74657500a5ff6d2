package localcluster

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/google/uuid"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/wait"
	"sigs.k8s.io/yaml"

	"kiln.dev/kiln/pkg/deviceplugin"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

const nodeAgentServiceAccount = "kiln-node-agent"

// Inventory is the devices the simulated node's agent reports: a card per
// nvidia.com/gpu, with stable UUIDs, the node's model and memory, and an
// NVLink to every other card on H100 nodes (NVSwitch); each MIG profile
// the node offers is cut from a card of its own beyond those.
func (n NodeSpec) Inventory() deviceplugin.Inventory {
	var inv deviceplugin.Inventory
	id := func(kind string, i int) string {
		return kind + "-" + uuid.NewSHA1(uuid.NameSpaceOID, []byte(n.Name+"/"+kind+"/"+strconv.Itoa(i))).String()
	}
	cards := int(n.Resources.Name(ResourceGPU, resource.DecimalSI).Value())
	memMiB, _ := strconv.Atoi(n.Labels[LabelGPUMemory])
	card := func(i int) deviceplugin.Device {
		return deviceplugin.Device{
			UUID: id("GPU", i), Resource: ResourceGPU, Index: i, Model: n.Labels[LabelGPUProduct],
			Memory: *resource.NewQuantity(int64(memMiB)<<20, resource.BinarySI), PCIBusID: fmt.Sprintf("0000:%02x:00.0", 0x10+i),
		}
	}
	for i := range cards {
		d := card(i)
		if n.Labels[LabelGPUProduct] == ProductH100 {
			for j := range cards {
				if j != i {
					d.NVLinkPeers = append(d.NVLinkPeers, id("GPU", j))
				}
			}
		}
		inv.Devices = append(inv.Devices, d)
	}
	var profiles []string
	for name := range n.Resources {
		if p, ok := strings.CutPrefix(string(name), "nvidia.com/mig-"); ok {
			profiles = append(profiles, p)
		}
	}
	sort.Strings(profiles)
	for k, p := range profiles {
		parent := card(cards + k)
		gb, _ := strconv.Atoi(strings.TrimSuffix(p[strings.Index(p, ".")+1:], "gb"))
		for j := range int(n.Resources.Name(corev1.ResourceName("nvidia.com/mig-"+p), resource.DecimalSI).Value()) {
			inv.Devices = append(inv.Devices, deviceplugin.Device{
				UUID: id("MIG", (cards+k)*100+j), Resource: "nvidia.com/mig-" + p, Profile: p, Index: parent.Index,
				Model: parent.Model, PCIBusID: parent.PCIBusID, Parent: parent.UUID,
				Memory: *resource.NewQuantity(int64(gb)<<30, resource.BinarySI),
			})
		}
	}
	return inv
}

// InventoryFile is the inventory a node's agent reads, a simulated node's
// or real-0's; edit a device's "unhealthy" there to fail it
// (SetDeviceHealth).
func (c *Cluster) InventoryFile(node string) string {
	return filepath.Join(c.Dir, "node-agents", node+".yaml")
}

// inventoryEdits keeps tests that edit one inventory file at once from
// losing each other's edit.
var inventoryEdits sync.Mutex

// SetDeviceHealth fails a device of a node (reason non-empty)
// or heals it, as NVML reporting an XID would.
func (c *Cluster) SetDeviceHealth(node, device, reason string) error {
	return c.editInventory(node, device, func(inv *deviceplugin.Inventory) {
		for i := range inv.Devices {
			if inv.Devices[i].UUID == device {
				inv.Devices[i].Unhealthy = reason
			}
		}
	})
}

// SetDeviceUsage makes a device of a node report utilization (percent)
// at the node agent's next sample, as NVML would of a busy or idle card; 0
// makes it idle again.
func (c *Cluster) SetDeviceUsage(node, device string, utilization int32) error {
	return c.editInventory(node, device, func(inv *deviceplugin.Inventory) {
		if inv.Usage == nil {
			inv.Usage = map[string]deviceplugin.Usage{}
		}
		inv.Usage[device] = deviceplugin.Usage{Utilization: utilization}
	})
}

// editInventory changes a node's inventory file, which must list device.
func (c *Cluster) editInventory(node, device string, edit func(*deviceplugin.Inventory)) error {
	inventoryEdits.Lock()
	defer inventoryEdits.Unlock()
	path := c.InventoryFile(node)
	data, err := os.ReadFile(path)
	if err != nil {
		return err
	}
	var inv deviceplugin.Inventory
	if err := yaml.UnmarshalStrict(data, &inv); err != nil {
		return err
	}
	if !slices.ContainsFunc(inv.Devices, func(d deviceplugin.Device) bool { return d.UUID == device }) {
		return fmt.Errorf("node %s has no device %s", node, device)
	}
	edit(&inv)
	return writeYAML(path, inv)
}

func writeYAML(path string, v any) error {
	data, err := yaml.Marshal(v)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// startNodeAgents runs kiln-node-agent for every simulated GPU node,
// as its DaemonSet's ServiceAccount, in simulated mode: it stands in for
// the kubelet kwok does not have, allocating devices to the Pods bound to
// its node from the node's inventory file, and reports them as the node's
// NodeDevices.
func (c *Cluster) startNodeAgents(ctx context.Context) error {
	kc, err := c.serviceAccountKubeconfig(ctx, nodeAgentServiceAccount)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(filepath.Join(c.Dir, "node-agents"), 0o755); err != nil {
		return err
	}
	var nodes []string
	for _, n := range c.opts.Nodes {
		if !n.GPU {
			continue
		}
		// A resumed cluster keeps its inventory, failed devices and all.
		if _, err := os.Stat(c.InventoryFile(n.Name)); errors.Is(err, os.ErrNotExist) {
			if err := writeYAML(c.InventoryFile(n.Name), n.Inventory()); err != nil {
				return err
			}
		} else if err != nil {
			return err
		}
		p, err := startProcess(c.logDir(), "node-agent-"+n.Name, c.bin("kiln-node-agent"),
			"--simulate", "--node-name="+n.Name, "--inventory="+c.InventoryFile(n.Name), "--kubeconfig="+kc)
		if err != nil {
			return err
		}
		c.mu.Lock()
		c.procs = append(c.procs, p)
		c.mu.Unlock()
		nodes = append(nodes, n.Name)
	}
	kiln, err := versioned.NewForConfig(c.AdminConfig)
	if err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		for _, n := range nodes {
			if _, err := kiln.GpuV1alpha1().NodeDevices().Get(ctx, n, metav1.GetOptions{}); apierrors.IsNotFound(err) || err != nil {
				return false, nil
			}
		}
		return true, c.Alive()
	})
}
