package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	v1 "github.com/google/go-containerregistry/pkg/v1"
)

var origin = Origin{Source: "https://kiln.dev/kiln", Revision: "1dd2a0e1d84e9f9f8f7dbf4ebf7a304fd78e16c4", Version: "v0.1.0-g1dd2a0e1d84e"}

// staticBinary builds a program that does nothing, without cgo.
func staticBinary(t *testing.T) string {
	t.Helper()
	goTool, err := exec.LookPath("go")
	if err != nil {
		skip(t, "no go command to build a static binary with")
	}
	dir := t.TempDir()
	for name, data := range map[string]string{"go.mod": "module hello\n\ngo 1.26\n", "main.go": "package main\n\nfunc main() {}\n"} {
		if err := os.WriteFile(filepath.Join(dir, name), []byte(data), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(goTool, "build", "-o", "hello", ".")
	cmd.Dir, cmd.Env = dir, append(os.Environ(), "CGO_ENABLED=0")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return filepath.Join(dir, "hello")
}

// dynamicBinary is one of this machine's binaries that links libc.
func dynamicBinary(t *testing.T) string {
	t.Helper()
	for _, b := range []string{"/bin/true", "/usr/bin/true"} {
		if interp, err := interpreter(b); err == nil && interp != "" {
			return b
		}
	}
	skip(t, "no dynamically linked /bin/true here")
	return ""
}

// skip skips a test this machine cannot run, saying why; under
// KILN_TESTS_MUST_RUN (CI, on Debian with Go) it fails instead.
func skip(t *testing.T, why string) {
	t.Helper()
	if os.Getenv("KILN_TESTS_MUST_RUN") != "" {
		t.Fatalf("KILN_TESTS_MUST_RUN, and %s", why)
	}
	t.Skip(why)
}

// entries are the headers of an image's only layer, by name.
func entries(t *testing.T, img v1.Image) map[string]*tar.Header {
	t.Helper()
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	headers := map[string]*tar.Header{}
	for tr := tar.NewReader(rc); ; {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			return headers
		}
		if err != nil {
			t.Fatal(err)
		}
		headers[h.Name] = h
	}
}

func TestStaticImage(t *testing.T) {
	bin := staticBinary(t)
	base := Base{CACertificates: []byte("-----BEGIN CERTIFICATE-----\n"), Packages: []string{"ca-certificates=20230311+deb12u1"}}
	s, err := Static("kiln.local/hello:v1", bin, base, origin)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	first, err := Write(filepath.Join(out, "a.tar"), s)
	if err != nil {
		t.Fatal(err)
	}
	second, err := Write(filepath.Join(out, "b.tar"), s)
	if err != nil || first != second {
		t.Errorf("built twice: digests %s and %s (%v), want the same", first, second, err)
	}

	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "65532:65532" || !slices.Equal(cfg.Config.Entrypoint, []string{"/usr/local/bin/hello"}) || !cfg.Created.IsZero() {
		t.Errorf("user %q entrypoint %v created %v, want 65532:65532, /usr/local/bin/hello, no time", cfg.Config.User, cfg.Config.Entrypoint, cfg.Created)
	}
	for k, want := range map[string]string{
		LabelSource: origin.Source, LabelRevision: origin.Revision, LabelVersion: origin.Version,
		LabelDebianPackages: "ca-certificates=20230311+deb12u1",
	} {
		if got := cfg.Config.Labels[k]; got != want {
			t.Errorf("label %s = %q, want %q", k, got, want)
		}
	}
	files := entries(t, img)
	for _, shell := range []string{"bin/sh", "bin/", "usr/bin/", "bin/busybox"} {
		if files[shell] != nil {
			t.Errorf("the image has %s; a static image has no shell", shell)
		}
	}
	for _, f := range []string{"usr/local/bin/hello", "etc/ssl/certs/ca-certificates.crt", "etc/passwd", "etc/group", "tmp/"} {
		if files[f] == nil {
			t.Errorf("the image has no %s", f)
		}
	}
}

// A static image refuses a binary that needs a loader it does not have.
func TestStaticRefusesDynamicBinary(t *testing.T) {
	_, err := Static("kiln.local/true:v1", dynamicBinary(t), Base{}, origin)
	if err == nil || !strings.Contains(err.Error(), "CGO_ENABLED=0") {
		t.Errorf("error %v, want one saying to build without cgo", err)
	}
}

func TestDynamicImage(t *testing.T) {
	bin := dynamicBinary(t)
	if _, err := exec.LookPath("dpkg-query"); err != nil {
		skip(t, "no dpkg here to name the libraries' packages")
	}
	s, err := Dynamic("kiln.local/true:v1", bin, Base{CACertificates: []byte("certs"), Packages: []string{"ca-certificates=1"}}, origin)
	if err != nil {
		t.Fatal(err)
	}
	img, err := Build(s)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Config.User != "" {
		t.Errorf("user %q, want root", cfg.Config.User)
	}
	if pkgs := cfg.Config.Labels[LabelDebianPackages]; !strings.HasPrefix(pkgs, "ca-certificates=1,libc6=") {
		t.Errorf("packages label %q, want ca-certificates and libc6 with its version", pkgs)
	}
	files := entries(t, img)
	interp, _ := interpreter(bin)
	loader := files[strings.TrimPrefix(interp, "/")]
	if loader == nil {
		t.Fatalf("no loader %s in the image", interp)
	}
	if loader.Typeflag == tar.TypeSymlink && files[strings.TrimPrefix(loader.Linkname, "/")] == nil {
		t.Errorf("loader %s links to %s, which the image does not have", interp, loader.Linkname)
	}
	var libc bool
	for name, h := range files {
		libc = libc || (strings.HasSuffix(name, "/libc.so.6") && h.Typeflag == tar.TypeReg)
		if name == "bin/sh" {
			t.Errorf("the image has %s", name)
		}
	}
	if !libc {
		t.Error("the image has no libc.so.6")
	}
}
