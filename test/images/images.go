// Package images builds the OCI images the real node runs from files on
// this machine, with go-containerregistry: no Docker, no registry, and the
// same digest for the same inputs.
package images

import (
	"archive/tar"
	"bytes"
	"fmt"
	"io"
	"os"
	"runtime"
	"slices"
	"strings"
	"time"

	"github.com/google/go-containerregistry/pkg/name"
	v1 "github.com/google/go-containerregistry/pkg/v1"
	"github.com/google/go-containerregistry/pkg/v1/empty"
	"github.com/google/go-containerregistry/pkg/v1/mutate"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// The images' names. Tags other than latest keep the kubelet's default
// pull policy at IfNotPresent, so it never tries a registry.
const (
	PauseImage    = "kiln.local/pause:1"
	WorkloadImage = "kiln.local/workload:1"
	SSHImage      = "kiln.local/ssh:1"
)

// File is one entry of an image's only layer: a regular file copied from
// Source or holding Data, a symlink to Link, or else a directory.
type File struct {
	Path   string
	Mode   int64
	Source string
	Data   []byte
	Link   string
}

// Spec is an image: its name, its files and what it runs. Env defaults to
// PATH=/bin; User to root.
type Spec struct {
	Name       string
	Files      []File
	Entrypoint []string
	Cmd        []string
	Env        []string
	User       string
	Labels     map[string]string
}

// Pause is the image whose only file is the static pause binary.
func Pause(binary string) Spec {
	return Spec{
		Name:       PauseImage,
		Files:      []File{{Path: "pause", Mode: 0o755, Source: binary}},
		Entrypoint: []string{"/pause"},
	}
}

// applets are the busybox commands the workload image links: a shell and
// what tests and tenants run in it.
var applets = []string{
	"[", "awk", "cat", "cp", "cut", "date", "echo", "env", "false", "find", "grep", "head",
	"hostname", "id", "kill", "ls", "mkdir", "mv", "ps", "rm", "sed", "sh", "sleep", "sort",
	"stat", "tail", "test", "tr", "true", "uname", "wc",
}

// Workload is a shell image: busybox and its applets under /bin, running
// sh unless told otherwise.
func Workload(busybox string) Spec {
	files := []File{{Path: "bin/busybox", Mode: 0o755, Source: busybox}, {Path: "tmp", Mode: 0o1777}}
	for _, a := range applets {
		files = append(files, File{Path: "bin/" + a, Link: "busybox"})
	}
	return Spec{
		Name:  WorkloadImage,
		Files: files,
		Cmd:   []string{"/bin/sh"},
	}
}

// SSH is the tests' SSH sidecar: test/cmd/sshd, with the workload image's
// shell for the commands it runs.
func SSH(sshd, busybox string) Spec {
	s := Workload(busybox)
	s.Name = SSHImage
	s.Files = append(s.Files, File{Path: "sshd", Mode: 0o755, Source: sshd})
	s.Entrypoint, s.Cmd = []string{"/sshd"}, nil
	return s
}

// layer is the tar of the spec's files, in name order, with zero times
// and owners so that it depends on their contents alone.
func layer(files []File) ([]byte, error) {
	files = slices.Clone(files)
	slices.SortFunc(files, func(a, b File) int { return strings.Compare(a.Path, b.Path) })
	var buf bytes.Buffer
	tw := tar.NewWriter(&buf)
	dirs := map[string]bool{}
	for _, f := range files {
		// Parent directories first, once each.
		parts := strings.Split(f.Path, "/")
		for i := 1; i < len(parts); i++ {
			d := strings.Join(parts[:i], "/") + "/"
			if dirs[d] {
				continue
			}
			dirs[d] = true
			if err := tw.WriteHeader(&tar.Header{Typeflag: tar.TypeDir, Name: d, Mode: 0o755, ModTime: time.Unix(0, 0)}); err != nil {
				return nil, err
			}
		}
		h := &tar.Header{Name: f.Path, Mode: f.Mode, ModTime: time.Unix(0, 0)}
		var data []byte
		switch {
		case f.Link != "":
			h.Typeflag, h.Linkname, h.Mode = tar.TypeSymlink, f.Link, 0o777
		case f.Source != "":
			var err error
			if data, err = os.ReadFile(f.Source); err != nil {
				return nil, err
			}
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		case f.Data != nil:
			data = f.Data
			h.Typeflag, h.Size = tar.TypeReg, int64(len(data))
		default:
			h.Typeflag, h.Name = tar.TypeDir, f.Path+"/"
			dirs[h.Name] = true
		}
		if err := tw.WriteHeader(h); err != nil {
			return nil, err
		}
		if _, err := tw.Write(data); err != nil {
			return nil, err
		}
	}
	if err := tw.Close(); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

// Build makes the spec's image for this machine's architecture.
func Build(s Spec) (v1.Image, error) {
	data, err := layer(s.Files)
	if err != nil {
		return nil, err
	}
	l, err := tarball.LayerFromOpener(func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(data)), nil })
	if err != nil {
		return nil, err
	}
	img, err := mutate.AppendLayers(empty.Image, l)
	if err != nil {
		return nil, err
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		return nil, err
	}
	cfg = cfg.DeepCopy()
	cfg.OS, cfg.Architecture = "linux", runtime.GOARCH
	cfg.Config.Entrypoint, cfg.Config.Cmd = s.Entrypoint, s.Cmd
	cfg.Config.Env = []string{"PATH=/bin"}
	if s.Env != nil {
		cfg.Config.Env = s.Env
	}
	cfg.Config.User, cfg.Config.Labels = s.User, s.Labels
	return mutate.ConfigFile(img, cfg)
}

// Write writes the spec's image as a tarball at path, and returns its
// digest.
func Write(path string, s Spec) (string, error) {
	img, err := Build(s)
	if err != nil {
		return "", err
	}
	return WriteImage(path, s.Name, img)
}

// WriteImage writes img as a tarball at path that names it ref, and
// returns its digest.
func WriteImage(path, ref string, img v1.Image) (string, error) {
	tag, err := name.ParseReference(ref)
	if err != nil {
		return "", err
	}
	digest, err := img.Digest()
	if err != nil {
		return "", err
	}
	if err := tarball.WriteToFile(path, tag, img); err != nil {
		return "", fmt.Errorf("writing %s: %w", path, err)
	}
	return digest.String(), nil
}

// Size is what a registry stores of img, and a pull downloads: its
// compressed layers, its config and its manifest.
func Size(img v1.Image) (int64, error) {
	m, err := img.RawManifest()
	if err != nil {
		return 0, err
	}
	c, err := img.RawConfigFile()
	if err != nil {
		return 0, err
	}
	size := int64(len(m) + len(c))
	layers, err := img.Layers()
	if err != nil {
		return 0, err
	}
	for _, l := range layers {
		n, err := l.Size()
		if err != nil {
			return 0, err
		}
		size += n
	}
	return size, nil
}
