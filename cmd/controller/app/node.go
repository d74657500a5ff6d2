package app

import (
	"context"

	"github.com/spf13/cobra"

	nodeagentapp "kiln.dev/kiln/cmd/kiln-node-agent/app"
)

// newNodeCommand is kiln-node-agent under its old name, `kiln-controller
// node`, kept for a release so that DaemonSets running it go on working.
// kiln-controller is built without cgo, so here NVML is missing and only
// --inventory serves devices.
func newNodeCommand(ctx context.Context) *cobra.Command {
	cmd := nodeagentapp.NewCommand(ctx)
	cmd.Use = "node"
	cmd.Deprecated = "use kiln-node-agent (artifacts/deploy/node-agent.yaml): kiln-controller is built without cgo, so it has no NVML, and `node` will be removed in the next release"
	return cmd
}
