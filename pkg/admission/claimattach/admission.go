// Package claimattach is the ClaimAttach admission plugin. An Instance
// runs on a Claim only if the Claim exists in its namespace, is neither
// expired nor being deleted, covers what the Instance asks for
// (accounting.ClaimCovers), and no other Instance runs on it. A Claim
// cannot be deleted while an Instance runs on it.
//
// The Instance rules are checked when a write makes an Instance run on its
// Claim: a create of a running Instance, a start, or an update that
// changes what a running Instance asks for. Claims and Instances are read
// from the server with consistent reads, not from informers, so a Claim
// or an Instance stored a moment ago is seen.
//
// Two creates or starts on one Claim that race can both pass: each reads
// before the other is stored. The claim controller then attaches only one
// (the one already attached, else the oldest) and the other waits
// Pending, so what runs never exceeds the Claim's cards. Likewise a Claim
// deleted while a start is admitted waits, by its finalizer, for that
// Instance to stop.
package claimattach

import (
	"context"
	"fmt"
	"io"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "ClaimAttach"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks Instances against the Claims they name.
type Plugin struct {
	*admission.Handler
	client versioned.Interface
}

var (
	_ admission.ValidationInterface = &Plugin{}
	_ kilninit.WantsKilnClient      = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update, admission.Delete)}
}

// SetKilnClient takes the client Claims and Instances are read with.
func (p *Plugin) SetKilnClient(c versioned.Interface) { p.client = c }

// ValidateInitialization checks the plugin got what it needs.
func (p *Plugin) ValidateInitialization() error {
	if p.client == nil {
		return fmt.Errorf("%s needs a Kiln client", PluginName)
	}
	return nil
}

var claimNamePath = field.NewPath("spec", "claimName")

// Validate refuses an Instance its Claim cannot take, and the delete of a
// Claim an Instance runs on.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	if a.GetOperation() == admission.Delete {
		if a.GetResource().GroupResource() != gpu.Resource("claims") || a.GetSubresource() != "" {
			return nil
		}
		// The registry passes the stored Claim as the old object, one per
		// Claim of a deletecollection, whose attributes carry no name.
		c, ok := a.GetOldObject().(*gpu.Claim)
		if !ok {
			return nil
		}
		return p.validateClaimDelete(ctx, c)
	}
	inst, old, err := instancechange.Of(ctx, a, nil)
	if err != nil || inst == nil || !attaches(inst, old) {
		return err
	}
	return p.validateAttach(ctx, inst)
}

// attaches says whether the write makes inst run on its Claim, or changes
// what it asks of the Claim while it runs.
func attaches(inst, old *gpu.Instance) bool {
	switch {
	case inst.Spec.ClaimName == "" || inst.Spec.Stopped || inst.DeletionTimestamp != nil:
		return false
	case old == nil || old.Spec.Stopped || old.Spec.ClaimName != inst.Spec.ClaimName:
		return true
	}
	return !accounting.InstanceRequest(&old.Spec).Equal(accounting.InstanceRequest(&inst.Spec))
}

func (p *Plugin) validateAttach(ctx context.Context, inst *gpu.Instance) error {
	name := inst.Spec.ClaimName
	invalid := func(e *field.Error) error {
		return apierrors.NewInvalid(gpu.Kind("Instance"), inst.Name, field.ErrorList{e})
	}
	stored, err := p.client.GpuV1alpha1().Claims(inst.Namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		e := field.NotFound(claimNamePath, name)
		e.Detail = fmt.Sprintf("no claim %q in namespace %q; create the Claim first, or remove spec.claimName", name, inst.Namespace)
		return invalid(e)
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading claim %q: %w", name, err))
	}
	var c gpu.Claim
	if err := v1alpha1.Convert_v1alpha1_Claim_To_gpu_Claim(stored, &c, nil); err != nil {
		return apierrors.NewInternalError(fmt.Errorf("reading claim %q: %w", name, err))
	}
	switch {
	case c.DeletionTimestamp != nil:
		return invalid(field.Invalid(claimNamePath, name,
			fmt.Sprintf("claim %q is being deleted; create a new Claim, or remove spec.claimName", name)))
	case c.Status.Phase == gpu.ClaimExpired:
		return invalid(field.Invalid(claimNamePath, name,
			fmt.Sprintf("claim %q has expired and released its cards; delete it and create a new one, or remove spec.claimName", name)))
	}
	if err := accounting.ClaimCovers(&c, accounting.InstanceRequest(&inst.Spec)); err != nil {
		return invalid(field.Invalid(claimNamePath, name, err.Error()))
	}
	other, err := p.runningOn(ctx, inst.Namespace, name, inst.Name)
	if err != nil || other == "" {
		return err
	}
	return apierrors.NewConflict(gpu.Resource("instances"), inst.Name, fmt.Errorf(
		"claim %q is in use by Instance %q, which is running; stop it first (%s), or use another Claim",
		name, other, stopCommand(inst.Namespace, other)))
}

// validateClaimDelete refuses to delete a Claim an Instance runs on. The
// Claim's finalizer would keep it until the Instance stops anyway; said
// up front, the user learns what to do instead of waiting on a delete.
func (p *Plugin) validateClaimDelete(ctx context.Context, c *gpu.Claim) error {
	other, err := p.runningOn(ctx, c.Namespace, c.Name, "")
	if err != nil || other == "" {
		return err
	}
	return apierrors.NewConflict(gpu.Resource("claims"), c.Name, fmt.Errorf(
		"claim %q is attached to Instance %q, which is running; stop it first (%s), or delete that Instance",
		c.Name, other, stopCommand(c.Namespace, other)))
}

// runningOn names an Instance of the namespace, other than except, that
// is running on the Claim: not stopped, not being deleted. "" if none.
func (p *Plugin) runningOn(ctx context.Context, ns, claim, except string) (string, error) {
	list, err := p.client.GpuV1alpha1().Instances(ns).List(ctx, metav1.ListOptions{
		FieldSelector: fields.OneTermEqualSelector("spec.claimName", claim).String(),
	})
	if err != nil {
		return "", apierrors.NewInternalError(fmt.Errorf("listing the instances on claim %q: %w", claim, err))
	}
	for _, i := range list.Items {
		// The selector is applied again, so the rule does not rest on it.
		if i.Name != except && i.Spec.ClaimName == claim && !i.Spec.Stopped && i.DeletionTimestamp == nil {
			return i.Name, nil
		}
	}
	return "", nil
}

func stopCommand(ns, inst string) string {
	return fmt.Sprintf(`kubectl -n %s patch instances.gpu.kiln.dev %s --type=merge -p '{"spec":{"stopped":true}}'`, ns, inst)
}
