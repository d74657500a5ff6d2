// Command kiln-images writes the OCI images the real node runs, without
// Docker or a registry: the pause image of Pod sandboxes and Claim holders,
// a workload image with a shell and coreutils (busybox), and the tests'
// SSH sidecar. Each is an image tarball under -out, which the launcher
// imports into containerd.
//
// The same inputs give the same digests: files are written in name order,
// with zero times and owners, and the image carries no creation time.
package main

import (
	"flag"
	"fmt"
	"os"
	"path/filepath"

	"kiln.dev/kiln/test/images"
)

func main() {
	out := flag.String("out", "_output/images", "directory to write the image tarballs to")
	pause := flag.String("pause", "", "the static pause binary")
	busybox := flag.String("busybox", "", "a static busybox binary")
	sshd := flag.String("sshd", "", "the static sshd of test/cmd/sshd")
	flag.Parse()
	if *pause == "" || *busybox == "" || *sshd == "" {
		fmt.Fprintln(os.Stderr, "kiln-images: -pause, -busybox and -sshd are required")
		os.Exit(2)
	}
	if err := os.MkdirAll(*out, 0o755); err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	for _, img := range []struct {
		spec images.Spec
		file string
	}{
		{images.Pause(*pause), "pause.tar"},
		{images.Workload(*busybox), "workload.tar"},
		{images.SSH(*sshd, *busybox), "ssh.tar"},
	} {
		digest, err := images.Write(filepath.Join(*out, img.file), img.spec)
		if err != nil {
			fmt.Fprintf(os.Stderr, "kiln-images: %s: %v\n", img.spec.Name, err)
			os.Exit(1)
		}
		fmt.Printf("%s\t%s\t%s\n", img.spec.Name, digest, img.file)
	}
}
