// Command kiln-node-agent runs on every GPU node: it serves the node's
// accelerators to the kubelet and reports them as the node's NodeDevices.
// It is built with cgo, for NVML's bindings.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"kiln.dev/kiln/cmd/kiln-node-agent/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
