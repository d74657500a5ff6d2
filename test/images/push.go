package images

import (
	"context"
	"fmt"
	"strings"

	"github.com/google/go-containerregistry/pkg/authn"
	"github.com/google/go-containerregistry/pkg/name"
	"github.com/google/go-containerregistry/pkg/v1/remote"
	"github.com/google/go-containerregistry/pkg/v1/tarball"
)

// Push pushes the image of the tarball at path into registry
// (host[:port]/path) under the repository and tag the tarball names it
// with: kiln.local/etcd:v3.7.0 becomes <registry>/etcd:v3.7.0. It returns
// that reference and the image's digest. insecure allows plain HTTP;
// credentials are the Docker config's, as docker login writes them.
func Push(ctx context.Context, path, registry string, insecure bool) (string, string, error) {
	tags, err := Tags(path)
	if err != nil {
		return "", "", err
	}
	if len(tags) != 1 {
		return "", "", fmt.Errorf("%s: want one image with one name, as make images writes", path)
	}
	src, err := name.NewTag(tags[0])
	if err != nil {
		return "", "", err
	}
	var opts []name.Option
	if insecure {
		opts = append(opts, name.Insecure)
	}
	registry = strings.TrimSuffix(registry, "/")
	dst, err := name.NewTag(registry+"/"+src.RepositoryStr()+":"+src.TagStr(), opts...)
	if err != nil {
		return "", "", fmt.Errorf("registry %q: %w", registry, err)
	}
	// Without a host first, the name would be Docker Hub's.
	if host, _, _ := strings.Cut(registry, "/"); dst.RegistryStr() != host {
		return "", "", fmt.Errorf("registry %q names no registry host: give host[:port]/path", registry)
	}
	img, err := tarball.ImageFromPath(path, &src)
	if err != nil {
		return "", "", fmt.Errorf("reading %s: %w", path, err)
	}
	digest, err := img.Digest()
	if err != nil {
		return "", "", err
	}
	if err := remote.Write(dst, img, remote.WithContext(ctx), remote.WithAuthFromKeychain(authn.DefaultKeychain)); err != nil {
		return "", "", fmt.Errorf("pushing %s to %s: %w", path, dst, err)
	}
	return dst.String(), digest.String(), nil
}
