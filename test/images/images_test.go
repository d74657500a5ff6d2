package images

import (
	"archive/tar"
	"errors"
	"io"
	"os"
	"path/filepath"
	"slices"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// fakeBinaries writes two small files to stand in for the pause and
// busybox binaries.
func fakeBinaries(t *testing.T, pause, busybox string) (string, string) {
	dir := t.TempDir()
	p, b := filepath.Join(dir, "pause"), filepath.Join(dir, "busybox")
	for path, data := range map[string]string{p: pause, b: busybox} {
		if err := os.WriteFile(path, []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	return p, b
}

// labelled is the pause image as a release image is configured: labels, a
// user and an environment of its own.
func labelled(pause, revision string) Spec {
	s := Pause(pause)
	s.Labels = map[string]string{LabelRevision: revision, LabelVersion: "v0.1.0"}
	s.User, s.Env = "65532:65532", []string{pathEnv}
	return s
}

func TestSameInputsSameDigest(t *testing.T) {
	p, b := fakeBinaries(t, "pause v1", "busybox v1")
	p2, b2 := fakeBinaries(t, "pause v2", "busybox v1")
	for _, tc := range []struct {
		name       string
		a, b       Spec
		wantSameID bool
	}{
		{"pause, built twice", Pause(p), Pause(p), true},
		{"workload, built twice", Workload(b), Workload(b), true},
		{"pause, another binary", Pause(p), Pause(p2), false},
		{"workload, same busybox elsewhere", Workload(b), Workload(b2), true},
		{"labelled, built twice", labelled(p, "abc"), labelled(p, "abc"), true},
		{"labelled, another revision", labelled(p, "abc"), labelled(p, "def"), false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := t.TempDir()
			da, err := Write(filepath.Join(out, "a.tar"), tc.a)
			if err != nil {
				t.Fatal(err)
			}
			db, err := Write(filepath.Join(out, "b.tar"), tc.b)
			if err != nil {
				t.Fatal(err)
			}
			if (da == db) != tc.wantSameID {
				t.Errorf("digests %s and %s, want the same: %v", da, db, tc.wantSameID)
			}
		})
	}
}

func TestWorkloadImage(t *testing.T) {
	_, b := fakeBinaries(t, "", "busybox bytes")
	path := filepath.Join(t.TempDir(), "workload.tar")
	digest, err := Write(path, Workload(b))
	if err != nil {
		t.Fatal(err)
	}
	tag, err := name.NewTag(WorkloadImage)
	if err != nil {
		t.Fatal(err)
	}
	img, err := tarball.ImageFromPath(path, &tag)
	if err != nil {
		t.Fatal(err)
	}
	if d, err := img.Digest(); err != nil || d.String() != digest {
		t.Errorf("digest read back %v (%v), want %s", d, err, digest)
	}
	cfg, err := img.ConfigFile()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.OS != "linux" || !slices.Equal(cfg.Config.Cmd, []string{"/bin/sh"}) || !cfg.Created.IsZero() {
		t.Errorf("config os %q cmd %v created %v, want linux, /bin/sh, no time", cfg.OS, cfg.Config.Cmd, cfg.Created)
	}
	layers, err := img.Layers()
	if err != nil || len(layers) != 1 {
		t.Fatalf("%d layers (%v), want 1", len(layers), err)
	}
	rc, err := layers[0].Uncompressed()
	if err != nil {
		t.Fatal(err)
	}
	defer rc.Close()
	entries := map[string]*tar.Header{}
	var order []string
	tr := tar.NewReader(rc)
	for {
		h, err := tr.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		entries[h.Name], order = h, append(order, h.Name)
		if h.Uid != 0 || h.Gid != 0 || h.ModTime.Unix() != 0 {
			t.Errorf("%s: owner %d:%d time %v, want 0:0 at the epoch", h.Name, h.Uid, h.Gid, h.ModTime)
		}
	}
	if h := entries["bin/busybox"]; h == nil || h.Size != int64(len("busybox bytes")) || h.Mode != 0o755 {
		t.Errorf("bin/busybox %+v, want the binary, 0755", h)
	}
	if h := entries["bin/sh"]; h == nil || h.Typeflag != tar.TypeSymlink || h.Linkname != "busybox" {
		t.Errorf("bin/sh %+v, want a link to busybox", h)
	}
	if h := entries["tmp/"]; h == nil || h.Typeflag != tar.TypeDir || h.Mode != 0o1777 {
		t.Errorf("tmp/ %+v, want a sticky directory", h)
	}
	if slices.Index(order, "bin/") > slices.Index(order, "bin/busybox") {
		t.Errorf("entries %v: a directory after its files", order)
	}
}
