// Command controller runs Kiln's controller: Instances become Pods and
// Services, InstanceTypes report their pool's capacity.
package main

import (
	"os"

	genericapiserver "k8s.io/apiserver/pkg/server"
	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"kiln.dev/kiln/cmd/controller/app"
)

func main() {
	ctx := genericapiserver.SetupSignalContext()
	os.Exit(cli.Run(app.NewCommand(ctx)))
}
