// Command kiln-node-agent runs on every GPU node: it serves the node's
// accelerators to the kubelet and reports them as the node's NodeDevices.
// It is built with cgo, for NVML's bindings.
package main

import (
	"context"
	"os"
	"os/signal"
	"syscall"

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register" // --logging-format=json

	"kiln.dev/kiln/cmd/kiln-node-agent/app"
)

func main() {
	os.Exit(cli.Run(app.NewCommand(signalContext())))
}

// signalContext ends at the first SIGTERM or SIGINT, and a second one exits
// at once, as k8s.io/apiserver's SetupSignalContext does. Importing that
// package would compile the whole API server a second time for this one
// binary, the only one built with cgo.
func signalContext() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	c := make(chan os.Signal, 2)
	signal.Notify(c, syscall.SIGTERM, os.Interrupt)
	go func() {
		<-c
		cancel()
		<-c
		os.Exit(1)
	}()
	return ctx
}
