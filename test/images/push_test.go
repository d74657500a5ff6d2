package images

import (
	"context"
	"io"
	"log"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/registry"
	"github.com/google/go-containerregistry/pkg/v1/remote"
)

// TestPush pushes image tarballs to go-containerregistry's in-memory
// registry, and pulls them back: the same digests and labels, under the
// registry's path, with the tarballs' repositories and tags.
func TestPush(t *testing.T) {
	srv := httptest.NewServer(registry.New(registry.Logger(log.New(io.Discard, "", 0))))
	defer srv.Close()
	host := strings.TrimPrefix(srv.URL, "http://")
	dir := t.TempDir()
	for i, data := range []string{"apiserver bytes", "etcd bytes"} {
		if err := os.WriteFile(filepath.Join(dir, string(rune('a'+i))), []byte(data), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	spec := func(ref, file string) Spec {
		return Spec{
			Name:       ref,
			Files:      []File{{Path: "usr/local/bin/" + file, Mode: 0o755, Source: filepath.Join(dir, file)}},
			Entrypoint: []string{"/usr/local/bin/" + file},
			Labels:     map[string]string{LabelRevision: "1dd2a0e1d84e", LabelVersion: strings.SplitN(ref, ":", 2)[1]},
		}
	}
	for _, tc := range []struct {
		name, registry string
		spec           Spec
		wantRef        string // "" when the push must fail
	}{
		{"kiln image", host + "/team/kiln", spec("kiln.local/kiln-apiserver:v0.1.0-g1dd2a0e1d84e", "a"),
			host + "/team/kiln/kiln-apiserver:v0.1.0-g1dd2a0e1d84e"},
		{"etcd at its own tag, trailing slash", host + "/kiln/", spec("kiln.local/etcd:v3.7.0", "b"),
			host + "/kiln/etcd:v3.7.0"},
		{"no registry host", "kiln", spec("kiln.local/etcd:v3.7.0", "b"), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(t.TempDir(), "image.tar")
			digest, err := Write(path, tc.spec)
			if err != nil {
				t.Fatal(err)
			}
			ref, pushed, err := Push(context.Background(), path, tc.registry, false)
			if tc.wantRef == "" {
				if err == nil {
					t.Errorf("pushed to %s; want an error naming the missing host", ref)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if ref != tc.wantRef || pushed != digest {
				t.Errorf("pushed %s@%s, want %s@%s", ref, pushed, tc.wantRef, digest)
			}
			r, err := name.ParseReference(ref)
			if err != nil {
				t.Fatal(err)
			}
			img, err := remote.Image(r)
			if err != nil {
				t.Fatal(err)
			}
			if d, err := img.Digest(); err != nil || d.String() != digest {
				t.Errorf("pulled digest %v (%v), want %s", d, err, digest)
			}
			cfg, err := img.ConfigFile()
			if err != nil {
				t.Fatal(err)
			}
			for k, want := range tc.spec.Labels {
				if cfg.Config.Labels[k] != want {
					t.Errorf("pulled label %s = %q, want %q", k, cfg.Config.Labels[k], want)
				}
			}
		})
	}
}
