// Command kiln-release-images writes Kiln's release images as OCI image
// tarballs, without Docker or a registry (make images), and pushes them
// (make push). Each is a binary of -bin on the least that runs it
// (test/images: Static, Dynamic):
//
//	kiln-apiserver, kiln-controller  static, as user 65532
//	kiln-node-agent                  with the glibc it links, as root
//	kiln-holder                      the pause binary of Claims' holders
//	etcd                             the single-member StatefulSet's
//
// named kiln.local/<name>:<-version>, etcd by -etcd-version. It prints a
// table of their digests and sizes, and writes it to images.txt in -out.
// One commit gives the same digests: the images carry no time.
//
// With -push REGISTRY it instead pushes every image tarball in -out to
// REGISTRY/<name>:<tag>.
package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"text/tabwriter"

	"kiln.dev/kiln/test/images"
)

// release are the images: each name, its binary in -bin, whether it is
// linked to libc, and whether it is tagged with etcd's version.
var release = []struct {
	name, binary  string
	dynamic, etcd bool
}{
	{name: "kiln-apiserver", binary: "kiln-apiserver"},
	{name: "kiln-controller", binary: "kiln-controller"},
	{name: "kiln-node-agent", binary: "kiln-node-agent", dynamic: true},
	{name: "kiln-holder", binary: "pause"},
	{name: "etcd", binary: "etcd", etcd: true},
}

func main() {
	out := flag.String("out", "_output/images/kiln", "directory of the image tarballs")
	bin := flag.String("bin", "_output/bin", "directory of the binaries")
	caCerts := flag.String("ca-certs", "/usr/share/ca-certificates/mozilla", "the CA certificates of Debian's ca-certificates package")
	version := flag.String("version", "", "Kiln's version: the images' tag and version label")
	revision := flag.String("revision", "", "the commit the images are built from")
	source := flag.String("source", "", "where Kiln's source is, for the source label")
	etcdVersion := flag.String("etcd-version", "", "the version of etcd's binary: its image's tag and version label")
	push := flag.String("push", "", "push the tarballs in -out to this registry (host[:port]/path) instead of writing them")
	insecure := flag.Bool("insecure", false, "with -push, allow plain HTTP")
	flag.Parse()

	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt)
	defer stop()
	var err error
	if *push != "" {
		err = pushAll(ctx, *out, *push, *insecure)
	} else if *version == "" || *revision == "" || *source == "" || *etcdVersion == "" {
		fmt.Fprintln(os.Stderr, "kiln-release-images: -version, -revision, -source and -etcd-version are required")
		os.Exit(2)
	} else {
		o := images.Origin{Source: *source, Revision: *revision, Version: *version}
		err = writeAll(*out, *bin, *caCerts, o, *etcdVersion)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "kiln-release-images:", err)
		os.Exit(1)
	}
}

func writeAll(out, bin, caCerts string, o images.Origin, etcdVersion string) error {
	base, err := images.DebianBase(caCerts)
	if err != nil {
		return err
	}
	if err := os.MkdirAll(out, 0o755); err != nil {
		return err
	}
	table, err := os.Create(filepath.Join(out, "images.txt"))
	if err != nil {
		return err
	}
	defer table.Close()
	w := tabwriter.NewWriter(io.MultiWriter(os.Stdout, table), 0, 8, 2, ' ', 0)
	// The size is what a pull downloads: compressed layers, config and
	// manifest.
	fmt.Fprintln(w, "IMAGE\tDIGEST\tCOMPRESSED SIZE")
	for _, r := range release {
		origin := o
		if r.etcd {
			origin.Version = etcdVersion
		}
		ref := "kiln.local/" + r.name + ":" + origin.Version
		build := images.Static
		if r.dynamic {
			build = images.Dynamic
		}
		spec, err := build(ref, filepath.Join(bin, r.binary), base, origin)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		img, err := images.Build(spec)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		digest, err := images.WriteImage(filepath.Join(out, r.name+".tar"), ref, img)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		size, err := images.Size(img)
		if err != nil {
			return fmt.Errorf("%s: %w", r.name, err)
		}
		fmt.Fprintf(w, "%s\t%s\t%.1f MiB\n", ref, digest, float64(size)/(1<<20))
	}
	if err := w.Flush(); err != nil {
		return err
	}
	return table.Close()
}

func pushAll(ctx context.Context, dir, registry string, insecure bool) error {
	tars, err := filepath.Glob(filepath.Join(dir, "*.tar"))
	if err != nil || len(tars) == 0 {
		return fmt.Errorf("no image tarballs in %s: run make images", dir)
	}
	for _, t := range tars {
		ref, digest, err := images.Push(ctx, t, registry, insecure)
		if err != nil {
			return err
		}
		fmt.Printf("pushed %s@%s\n", ref, digest)
	}
	return nil
}
