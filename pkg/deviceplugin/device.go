// Package deviceplugin is the device side of Kiln's node agent
// (kiln-node-agent, pkg/nodeagent): a kubelet device plugin per resource
// name the node's accelerators are served under, fed by a Backend that
// lists the devices and their health (NVML on a GPU node, a static
// inventory file on a simulated one).
//
// It serves the same resource names as NVIDIA's device plugin
// (nvidia.com/gpu, and nvidia.com/mig-<profile> in MIG's mixed strategy),
// so it replaces that plugin on the nodes where it runs and InstanceTypes
// do not change.
package deviceplugin

import (
	"context"
	"fmt"
	"sort"

	"k8s.io/apimachinery/pkg/api/resource"
	pluginapi "k8s.io/kubelet/pkg/apis/deviceplugin/v1beta1"
)

// Device is one device the kubelet can allocate: a whole card, or a MIG
// device cut from one.
type Device struct {
	// UUID is the ID the kubelet allocates by: GPU-... or MIG-....
	UUID string `json:"uuid"`
	// Resource is the extended resource it is served under, e.g.
	// nvidia.com/gpu or nvidia.com/mig-1g.10gb.
	Resource string `json:"resource"`
	// Index is the card's index on the node (nvidia-smi's); a MIG device
	// has its card's.
	Index int `json:"index"`
	// Model is the product name, e.g. NVIDIA-H100-80GB-HBM3.
	Model string `json:"model,omitempty"`
	// Memory is the device's own memory.
	Memory resource.Quantity `json:"memory,omitempty"`
	// PCIBusID is the card's PCI address.
	PCIBusID string `json:"pciBusID,omitempty"`
	// Parent is the UUID of the card a MIG device or an MPS share is cut
	// from.
	Parent string `json:"parent,omitempty"`
	// Shares is, for an MPS share, how many shares its card is served as.
	Shares int `json:"shares,omitempty"`
	// Profile is a MIG device's profile, e.g. 1g.10gb.
	Profile string `json:"profile,omitempty"`
	// NVLinkPeers are the UUIDs of the cards this one has an NVLink to,
	// where the backend reports them.
	NVLinkPeers []string `json:"nvLinkPeers,omitempty"`
	// Unhealthy says why the device must not be allocated; "" when it is
	// healthy.
	Unhealthy string `json:"unhealthy,omitempty"`
}

// Healthy says whether the kubelet may allocate the device.
func (d Device) Healthy() bool { return d.Unhealthy == "" }

// health is the device plugin API's word for it.
func (d Device) health() string {
	if d.Healthy() {
		return pluginapi.Healthy
	}
	return pluginapi.Unhealthy
}

// Backend lists a node's devices.
type Backend interface {
	// Devices lists every device with its health now.
	Devices() ([]Device, error)
	// Watch calls changed whenever the devices or their health may have
	// changed, until ctx is done.
	Watch(ctx context.Context, changed func()) error
}

// byResource groups devices by resource name, each group in index order
// (then UUID, for MIG devices of one card).
func byResource(devices []Device) map[string][]Device {
	out := map[string][]Device{}
	for _, d := range devices {
		out[d.Resource] = append(out[d.Resource], d)
	}
	for _, ds := range out {
		sort.Slice(ds, func(i, j int) bool {
			if ds[i].Index != ds[j].Index {
				return ds[i].Index < ds[j].Index
			}
			return ds[i].UUID < ds[j].UUID
		})
	}
	return out
}

// validate refuses a device list the kubelet could not be served: every
// device needs a UUID (at most 63 characters, the API's limit), a
// resource name, and a UUID of its own.
func validate(devices []Device) error {
	seen := map[string]bool{}
	for i, d := range devices {
		switch {
		case d.UUID == "":
			return fmt.Errorf("devices[%d]: uuid is required", i)
		case len(d.UUID) > 63:
			return fmt.Errorf("devices[%d]: uuid %q is longer than the 63 characters the kubelet accepts", i, d.UUID)
		case d.Resource == "":
			return fmt.Errorf("devices[%d] (%s): resource is required, e.g. nvidia.com/gpu", i, d.UUID)
		case seen[d.UUID]:
			return fmt.Errorf("devices[%d]: uuid %s is listed twice", i, d.UUID)
		}
		seen[d.UUID] = true
	}
	return nil
}
