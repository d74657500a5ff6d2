// Package nodedevicesowner is the NodeDevicesOwner admission plugin: a
// node agent writes only its own node's NodeDevices.
//
// RBAC cannot narrow the agents' shared ServiceAccount to one object per
// node. The token of a Pod's ServiceAccount names the Pod's node (the
// user's extra authentication.kubernetes.io/node-name), so a request
// carrying it may write only the NodeDevices of that name: an agent, or
// anything that steals its token, cannot rewrite another node's devices
// or holders. Requests without it (a cluster admin, an agent run outside
// a Pod) are left to RBAC.
package nodedevicesowner

import (
	"context"
	"fmt"
	"io"

	"k8s.io/apiserver/pkg/admission"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "NodeDevicesOwner"

// NodeNameExtra is the user extra a Pod-bound ServiceAccount token
// carries: the name of the Pod's node.
const NodeNameExtra = "authentication.kubernetes.io/node-name"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks writes of NodeDevices against the writer's node.
type Plugin struct {
	*admission.Handler
}

var _ admission.ValidationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// Validate refuses a write of another node's NodeDevices from a Pod.
func (p *Plugin) Validate(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().GroupResource() != gpu.Resource("nodedevices") || a.GetUserInfo() == nil {
		return nil
	}
	nodes := a.GetUserInfo().GetExtra()[NodeNameExtra]
	if len(nodes) == 0 {
		return nil
	}
	if len(nodes) == 1 && nodes[0] == a.GetName() {
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("the node agent of node %v may write only the NodeDevices named after its node, not %q", nodes, a.GetName()))
}
