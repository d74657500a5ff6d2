// Package kilnfinalizers is the KilnFinalizers admission plugin: only
// those allowed to update <resource>/finalizers may take kiln-controller's
// finalizer off an Instance or a Claim.
//
// The finalizers keep a deleted Instance, and its charge, until its Pod is
// gone, and a deleted Claim until its holder Pod is gone and no Instance
// runs on it. The edit role may update Instances and Claims, metadata
// included; without this check a tenant could delete an Instance, remove
// the finalizer, and have the Budget release cards its Pod still holds.
// kiln-controller's ClusterRole has instances/finalizers and
// claims/finalizers; cluster admins have every verb, and so keep the
// escape hatch of removing a finalizer by hand.
//
// It also refuses the garbage collector's "orphan" finalizer on them, and
// the deletes that add it (propagationPolicy Orphan, orphanDependents,
// `kubectl delete --cascade=orphan`): the collector would take the owner
// reference off the Pod, kiln-controller would no longer find it as the
// object's, and the Pod would run on, uncharged, once the object was gone.
package kilnfinalizers

import (
	"context"
	"fmt"
	"io"
	"slices"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kiln.dev/kiln/pkg/apis/gpu"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "KilnFinalizers"

// guarded is kiln-controller's finalizer of each resource, and what it
// waits for, for the refusal.
var guarded = map[string]struct{ kind, finalizer, waitsFor string }{
	"instances": {"Instance", gpu.InstanceFinalizer, "once the Instance's Pod and Service are gone"},
	"claims":    {"Claim", gpu.ClaimFinalizer, "once the Claim's holder Pod is gone and no Instance runs on it"},
}

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin asks the authorizer before a guarded finalizer goes.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
}

var (
	_ admission.ValidationInterface = &Plugin{}
	_ genericinit.WantsAuthorizer   = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetAuthorizer takes the server's authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization checks the plugin got an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

// Validate refuses an update that removes a guarded finalizer unless the
// requester may update <resource>/finalizers.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	g, ok := guarded[a.GetResource().Resource]
	if !ok || a.GetResource().Group != gpu.GroupName || a.GetSubresource() != "" {
		return nil
	}
	if a.GetOperation() == admission.Delete {
		return refuseOrphaning(a, g.kind)
	}
	newMeta, err := meta.Accessor(a.GetObject())
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if slices.Contains(newMeta.GetFinalizers(), metav1.FinalizerOrphanDependents) {
		return admission.NewForbidden(a, fmt.Errorf("metadata.finalizers: %q would have the garbage collector detach the %s's Pod from it, and the Pod run on uncharged once the %s is gone; remove it",
			metav1.FinalizerOrphanDependents, g.kind, g.kind))
	}
	if a.GetOldObject() == nil {
		return nil
	}
	oldMeta, err := meta.Accessor(a.GetOldObject())
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	if !slices.Contains(oldMeta.GetFinalizers(), g.finalizer) || slices.Contains(newMeta.GetFinalizers(), g.finalizer) {
		return nil
	}
	decision, why, err := p.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            a.GetUserInfo(),
		Verb:            "update",
		APIGroup:        gpu.GroupName,
		APIVersion:      a.GetResource().Version,
		Resource:        a.GetResource().Resource,
		Subresource:     "finalizers",
		Namespace:       a.GetNamespace(),
		Name:            a.GetName(),
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("asking whether %q may update %s/finalizers: %w", a.GetUserInfo().GetName(), a.GetResource().Resource, err))
	}
	msg := fmt.Sprintf("metadata.finalizers: removing %s needs \"update\" on %s/finalizers, which user %q does not have; kiln-controller removes it %s: delete the object and wait",
		g.finalizer, a.GetResource().Resource, a.GetUserInfo().GetName(), g.waitsFor)
	if why != "" {
		msg += " (" + why + ")"
	}
	return admission.NewForbidden(a, fmt.Errorf("%s", msg))
}

// refuseOrphaning refuses a delete that asks the garbage collector to
// orphan the object's dependents.
func refuseOrphaning(a admission.Attributes, kind string) error {
	opts, ok := a.GetOperationOptions().(*metav1.DeleteOptions)
	if !ok || opts == nil {
		return nil
	}
	field := ""
	switch {
	case opts.PropagationPolicy != nil && *opts.PropagationPolicy == metav1.DeletePropagationOrphan:
		field = "propagationPolicy Orphan"
	//lint:ignore SA1019 deprecated, but the API server still honours it.
	case opts.PropagationPolicy == nil && opts.OrphanDependents != nil && *opts.OrphanDependents:
		field = "orphanDependents"
	default:
		return nil
	}
	return admission.NewForbidden(a, fmt.Errorf("%s would detach the %s's Pod from it, and the Pod would run on uncharged once the %s is gone; delete with propagationPolicy Background (kubectl's default) or Foreground",
		field, kind, kind))
}
