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
//
// On the create of a Claim, and of an Instance that is not stopped, it
// sets their finalizers, as Kubernetes' PVC protection plugin sets its
// own: otherwise kiln-controller adds them with an update of each new
// object before it makes a Pod or places it, one more write through the
// chain, and one more sync, per object. The handler's field manager has
// run by then, so no manager owns them, and a tenant's later server-side
// apply, which does not list them, leaves them alone. kiln-controller
// still adds any that are missing (objects stored before, or this plugin
// disabled).
//
// An Instance created stopped gets its finalizers from kiln-controller
// once its status says Stopped: the Budget takes the controller's
// finalizer on a stopped Instance with no phase as the sign that a Pod may
// have been made (accounting.InstanceHolds), so set at create it would
// charge an Instance that never ran until the controller looked. One
// created running and stopped before the controller's first look stays
// charged until that look, as one the controller had seen. A standalone
// server sets no Instance finalizers: no kiln-controller runs there to
// take them off, and no Pod is ever made.
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

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "KilnFinalizers"

// guarded is each resource's kind and its guarded finalizers: who removes
// each, and when, for the refusal.
var guarded = map[string]struct {
	kind       string
	finalizers []guard
}{
	"instances": {"Instance", []guard{
		{gpu.InstanceFinalizer, "kiln-controller removes it once the Instance's Pod and Service are gone"},
		{gpu.LedgerFinalizer, "kiln-apiserver removes it once the Instance's card-hours are in its namespace's Budgets"},
	}},
	"claims": {"Claim", []guard{
		{gpu.ClaimFinalizer, "kiln-controller removes it once the Claim's holder Pod is gone and no Instance runs on it"},
		{gpu.LedgerFinalizer, "kiln-apiserver removes it once the Claim's card-hours are in its namespace's Budgets"},
	}},
}

type guard struct{ finalizer, removedWhen string }

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin sets the finalizers of a new Claim or running Instance, and asks
// the authorizer before a guarded finalizer goes.
type Plugin struct {
	*admission.Handler
	authz authorizer.Authorizer
	// controller: kiln-controller runs beside the server, to take an
	// Instance's finalizers off.
	controller bool
}

var (
	_ admission.MutationInterface   = &Plugin{}
	_ admission.ValidationInterface = &Plugin{}
	_ genericinit.WantsAuthorizer   = &Plugin{}
	_ kilninit.WantsKilnController  = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetAuthorizer takes the server's authorizer.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// SetKilnController says whether kiln-controller runs beside the server.
func (p *Plugin) SetKilnController(runs bool) { p.controller = runs }

// ValidateInitialization checks the plugin got an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

// Admit sets the guarded finalizers of a new Claim, and of a new Instance
// that is not stopped where kiln-controller runs.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetResource().Group != gpu.GroupName || a.GetOperation() != admission.Create || a.GetSubresource() != "" {
		return nil
	}
	resource := a.GetResource().Resource
	switch obj := a.GetObject().(type) {
	case *gpu.Claim:
	case *gpu.Instance:
		if !p.controller || obj.Spec.Stopped {
			return nil
		}
	default:
		return nil
	}
	m, err := meta.Accessor(a.GetObject())
	if err != nil {
		return apierrors.NewBadRequest(err.Error())
	}
	finalizers := m.GetFinalizers()
	for _, f := range guarded[resource].finalizers {
		if !slices.Contains(finalizers, f.finalizer) {
			finalizers = append(finalizers, f.finalizer)
		}
	}
	m.SetFinalizers(finalizers)
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
	for _, f := range g.finalizers {
		if slices.Contains(oldMeta.GetFinalizers(), f.finalizer) && !slices.Contains(newMeta.GetFinalizers(), f.finalizer) {
			if err := p.mayRemove(ctx, a, f); err != nil {
				return err
			}
		}
	}
	return nil
}

// mayRemove asks the authorizer whether the requester may take f off.
func (p *Plugin) mayRemove(ctx context.Context, a admission.Attributes, f guard) error {
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
	msg := fmt.Sprintf("metadata.finalizers: removing %s needs \"update\" on %s/finalizers, which user %q does not have; %s: delete the object and wait",
		f.finalizer, a.GetResource().Resource, a.GetUserInfo().GetName(), f.removedWhen)
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
