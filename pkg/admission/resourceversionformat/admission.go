// Package resourceversionformat is the ResourceVersionFormat admission
// plugin: an update whose metadata.resourceVersion is not one the server
// could have handed out is refused with 422 on that field.
//
// The generic registry parses the new object's resourceVersion before it
// validates it and returns the parse error as it is, which the handler
// answers with 500. Mutating admission runs before that parse, so this
// plugin, a mutating one that changes nothing, turns a forged or mangled
// resourceVersion into the client's error it is.
package resourceversionformat

import (
	"context"
	"io"
	"strconv"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "ResourceVersionFormat"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses updates with a resourceVersion that is no etcd revision.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Update)}
}

// Admit changes nothing; see the package comment for why it mutates.
// Validating admission runs after the registry's parse, too late. The
// server refuses to start with it disabled.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	obj := a.GetObject()
	if obj == nil {
		return nil
	}
	m, err := meta.Accessor(obj)
	if err != nil {
		return nil
	}
	rv := m.GetResourceVersion()
	if rv == "" {
		return nil // an unconditional update
	}
	if n, err := strconv.ParseUint(rv, 10, 64); err == nil && n > 0 {
		return nil
	}
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), field.ErrorList{
		field.Invalid(field.NewPath("metadata", "resourceVersion"), rv,
			"must be the resourceVersion the server returned, a positive decimal number; read the object again, or leave it out for an unconditional update"),
	})
}
