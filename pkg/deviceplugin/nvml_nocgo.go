//go:build !cgo

package deviceplugin

import "errors"

// NewNVMLFromSystem is unavailable in a build without cgo, which NVML's
// bindings need; the static inventory still works.
func NewNVMLFromSystem() (Backend, error) {
	return nil, errors.New("this kiln-controller was built without cgo, so it has no NVML backend; build it with CGO_ENABLED=1 for GPU nodes, or use --inventory")
}
