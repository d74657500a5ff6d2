// Command kubectl-gpu is Kiln's kubectl plugin: on the PATH, it is
// "kubectl gpu". The verbs are in pkg/kubectlgpu.
package main

import (
	"fmt"
	"os"

	"k8s.io/cli-runtime/pkg/genericiooptions"

	"kiln.dev/kiln/pkg/kubectlgpu"
)

func main() {
	cmd := kubectlgpu.NewCommand(&kubectlgpu.Options{
		IO: genericiooptions.IOStreams{In: os.Stdin, Out: os.Stdout, ErrOut: os.Stderr},
	})
	if err := cmd.Execute(); err != nil {
		fmt.Fprintln(os.Stderr, "error:", err)
		os.Exit(1)
	}
}
