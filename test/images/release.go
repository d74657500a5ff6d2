package images

import (
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
)

// The labels of Kiln's release images: OCI's for where an image came from,
// and Kiln's own for the Debian packages its other files came from.
const (
	LabelSource         = "org.opencontainers.image.source"
	LabelRevision       = "org.opencontainers.image.revision"
	LabelVersion        = "org.opencontainers.image.version"
	LabelDebianPackages = "dev.kiln.image.debian-packages"
)

// NonRoot is the user and group the static release images run as: the
// nonroot of distroless images, an ID hosts seldom give anyone.
const NonRoot = 65532

// A release image's binary is in /usr/local/bin, on its PATH, so that a
// Pod's command may name it alone (artifacts/deploy/etcd.yaml does). The
// PATH is the usual one: the container runtime may mount host binaries,
// such as NVIDIA's, into /usr/bin.
const (
	binDir  = "usr/local/bin"
	pathEnv = "PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
)

// Origin is what a release image is labelled with: Kiln's source, its
// commit, and the version of what the image runs.
type Origin struct {
	Source, Revision, Version string
}

// Base is what every release image holds beside its binary: Debian's CA
// certificates, and the packages they are from.
type Base struct {
	CACertificates []byte
	Packages       []string
}

// DebianBase bundles the CA certificates of Debian's ca-certificates
// package, in dir (/usr/share/ca-certificates/mozilla). They are read from
// the package's own files rather than /etc/ssl/certs/ca-certificates.crt,
// which also holds any CA this machine's administrator added; an image
// must not carry those.
func DebianBase(dir string) (Base, error) {
	certs, err := filepath.Glob(filepath.Join(dir, "*.crt"))
	if err != nil || len(certs) == 0 {
		return Base{}, fmt.Errorf("no CA certificates (*.crt) in %s: install Debian's ca-certificates", dir)
	}
	slices.Sort(certs)
	var bundle []byte
	for _, c := range certs {
		b, err := os.ReadFile(c)
		if err != nil {
			return Base{}, err
		}
		bundle = append(bundle, b...)
		if !strings.HasSuffix(string(b), "\n") {
			bundle = append(bundle, '\n')
		}
	}
	pkgs, err := debianPackages(dir)
	if err != nil {
		return Base{}, err
	}
	return Base{CACertificates: bundle, Packages: pkgs}, nil
}

// Static is the image of a static binary, run as NonRoot: the binary as
// its entrypoint, the CA bundle, and an /etc/passwd and /etc/group that
// name nonroot. There is no shell and no libc, so a binary that needs
// them is refused.
func Static(ref, binary string, b Base, o Origin) (Spec, error) {
	interp, err := interpreter(binary)
	if err != nil {
		return Spec{}, err
	}
	if interp != "" {
		return Spec{}, fmt.Errorf("%s is dynamically linked (its loader is %s): build it with CGO_ENABLED=0", binary, interp)
	}
	s := b.spec(ref, binary, o, b.Packages)
	id := strconv.Itoa(NonRoot)
	s.Files = append(s.Files,
		File{Path: "etc/passwd", Mode: 0o644, Data: []byte("root:x:0:0:root:/root:/sbin/nologin\nnonroot:x:" + id + ":" + id + ":nonroot:/nonexistent:/sbin/nologin\n")},
		File{Path: "etc/group", Mode: 0o644, Data: []byte("root:x:0:\nnonroot:x:" + id + ":\n")},
		File{Path: "tmp", Mode: 0o1777})
	s.User = id + ":" + id
	return s, nil
}

// Dynamic is the image of a dynamically linked binary, run as root: the
// binary, its loader and the shared libraries it needs (DT_NEEDED, and
// theirs) as Debian's loader finds them on this machine, and the CA
// bundle. Libraries it opens itself at run time are not in it: go-nvml's
// libnvidia-ml comes from the host's driver, mounted by the container
// runtime.
func Dynamic(ref, binary string, b Base, o Origin) (Spec, error) {
	interp, err := interpreter(binary)
	if err != nil {
		return Spec{}, err
	}
	if interp == "" {
		return Spec{}, fmt.Errorf("%s is statically linked: use a static image", binary)
	}
	libs, err := sharedLibraries(binary, libraryDirs())
	if err != nil {
		return Spec{}, err
	}
	pkgs, err := debianPackages(append([]string{interp}, libs...)...)
	if err != nil {
		return Spec{}, err
	}
	s := b.spec(ref, binary, o, append(pkgs, b.Packages...))
	for _, l := range libs {
		s.Files = append(s.Files, File{Path: strings.TrimPrefix(l, "/"), Mode: 0o755, Source: l})
	}
	if !slices.Contains(libs, interp) {
		s.Files = append(s.Files, loaderFile(interp, libs))
	}
	return s, nil
}

// loaderFile is the binary's loader at the path it names. Where that is
// one of libs under another name, as Debian's /lib64/ld-linux-x86-64.so.2
// is, it is a link to it, as on Debian, not a second copy.
func loaderFile(interp string, libs []string) File {
	real, err := filepath.EvalSymlinks(interp)
	if err == nil {
		for _, l := range libs {
			if r, err := filepath.EvalSymlinks(l); err == nil && r == real {
				return File{Path: strings.TrimPrefix(interp, "/"), Link: l}
			}
		}
	}
	return File{Path: strings.TrimPrefix(interp, "/"), Mode: 0o755, Source: interp}
}

// spec is what every release image has: the binary as its entrypoint, the
// CA bundle, the usual PATH, and the labels.
func (b Base) spec(ref, binary string, o Origin, pkgs []string) Spec {
	pkgs = slices.Compact(slices.Sorted(slices.Values(pkgs)))
	entrypoint := "/" + binDir + "/" + filepath.Base(binary)
	return Spec{
		Name: ref,
		Files: []File{
			{Path: entrypoint[1:], Mode: 0o755, Source: binary},
			{Path: "etc/ssl/certs/ca-certificates.crt", Mode: 0o644, Data: b.CACertificates},
		},
		Entrypoint: []string{entrypoint},
		Env:        []string{pathEnv},
		Labels: map[string]string{
			LabelSource:         o.Source,
			LabelRevision:       o.Revision,
			LabelVersion:        o.Version,
			LabelDebianPackages: strings.Join(pkgs, ","),
		},
	}
}
