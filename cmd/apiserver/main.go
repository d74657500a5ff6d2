// Command apiserver serves the gpu.kiln.dev API, aggregated into a cluster
// or, with --standalone, on its own.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"kiln.dev/kiln/cmd/apiserver/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	cmd := app.NewCommand(ctx, os.Stdout)
	os.Exit(cli.Run(cmd))
}
