//go:build !cgo

package deviceplugin

import "errors"

// NewNVMLFromSystem is unavailable in a build without cgo, which NVML's
// bindings need; the static inventory still works. kiln-controller is
// built so, and its deprecated `node` command gets this.
func NewNVMLFromSystem() (Backend, error) {
	return nil, errors.New("this binary was built without cgo, so it has no NVML backend: on GPU nodes run kiln-node-agent built with CGO_ENABLED=1, or give --inventory")
}
