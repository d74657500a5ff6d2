package images

import (
	"fmt"
	"io"
	"os"

	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Tags are the names an image tarball gives its image, which an import
// into containerd tags it with.
func Tags(path string) ([]string, error) {
	m, err := tarball.LoadManifest(func() (io.ReadCloser, error) { return os.Open(path) })
	if err != nil {
		return nil, fmt.Errorf("reading %s: %w", path, err)
	}
	var tags []string
	for _, d := range m {
		tags = append(tags, d.RepoTags...)
	}
	if len(tags) == 0 {
		return nil, fmt.Errorf("%s names no image", path)
	}
	return tags, nil
}
