// Package instanceprivilege is the InstancePrivilege admission plugin: a
// privileged Instance, or one mounting a host path, needs its requester to
// be allowed "use" on instances/privileged in the namespace.
package instanceprivilege

import (
	"context"
	"fmt"
	"io"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	"k8s.io/apiserver/pkg/authorization/authorizer"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/domain/instancechange"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "InstancePrivilege"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin asks the authorizer before admitting privilege.
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
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetAuthorizer takes the server's authorizer: in cluster mode the
// cluster's RBAC, through SubjectAccessReview.
func (p *Plugin) SetAuthorizer(a authorizer.Authorizer) { p.authz = a }

// ValidateInitialization checks the plugin got an authorizer.
func (p *Plugin) ValidateInitialization() error {
	if p.authz == nil {
		return fmt.Errorf("%s needs an authorizer", PluginName)
	}
	return nil
}

// Validate refuses privilege the requester may not use. Updates are asked
// about when they add privilege or change anything of a privileged
// Instance's spec but spec.stopped, so an Instance an admin made
// privileged can still be stopped, started or relabelled by its tenant.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	inst, old, err := instancechange.Of(ctx, a, nil)
	if err != nil || inst == nil {
		return err
	}
	reasons := privileges(inst)
	if old != nil {
		if add := added(privileges(old), reasons); len(add) > 0 {
			reasons = add
		} else if respecified(old, inst) {
			// What runs with the privilege, what it reads or mounts or
			// whom it listens to, changes: granted for one Instance, it
			// is asked again for another.
			for i := range reasons {
				reasons[i].field += " with a changed spec"
			}
		} else {
			reasons = nil
		}
	}
	if len(reasons) == 0 {
		return nil
	}
	decision, why, err := p.authz.Authorize(ctx, authorizer.AttributesRecord{
		User:            a.GetUserInfo(),
		Verb:            "use",
		APIGroup:        gpu.GroupName,
		APIVersion:      a.GetResource().Version,
		Resource:        "instances",
		Subresource:     "privileged",
		Namespace:       a.GetNamespace(),
		Name:            a.GetName(),
		ResourceRequest: true,
	})
	if decision == authorizer.DecisionAllow {
		return nil
	}
	if err != nil {
		return apierrors.NewInternalError(fmt.Errorf("asking whether %q may use instances/privileged: %w", a.GetUserInfo().GetName(), err))
	}
	msg := fmt.Sprintf("%s needs \"use\" on instances/privileged in namespace %q, which user %q does not have; a cluster admin can grant it by binding the ClusterRole kiln:privileged-instances",
		reasons[0].field, a.GetNamespace(), a.GetUserInfo().GetName())
	if why != "" {
		msg += " (" + why + ")"
	}
	return admission.NewForbidden(a, fmt.Errorf("%s", msg))
}

// privilege is one thing in an Instance that needs the privilege: key says
// what, field where it is.
type privilege struct{ key, field string }

// privileges lists what in the Instance needs the privilege.
func privileges(inst *gpu.Instance) []privilege {
	var r []privilege
	if inst.Spec.Privileged {
		r = append(r, privilege{key: "privileged", field: "spec.privileged"})
	}
	for i, v := range inst.Spec.Volumes {
		if v.HostPath != nil {
			// Keyed by what it opens, not by index: adding or reordering
			// other volumes adds no privilege, while another type, mount
			// path or a write where there was a read does.
			hp := v.HostPath
			key := fmt.Sprintf("hostPath %s type=%s at %s readOnly=%t", hp.Path, ptrString(hp.Type), v.MountPath, v.ReadOnly)
			r = append(r, privilege{key: key, field: fmt.Sprintf("spec.volumes[%d].hostPath (%s)", i, hp.Path)})
		}
	}
	return r
}

func ptrString[T ~string](p *T) string {
	if p == nil {
		return ""
	}
	return string(*p)
}

// respecified says whether the update changes the spec beyond a stop or a
// start, or a drop of spec.privileged: the image, command, args, env,
// volumes, workspace, ports, resources. (Only the program used to count, and a tenant could point an
// admin's grant at a new Secret or a new port.)
func respecified(old, inst *gpu.Instance) bool {
	spec := inst.Spec
	spec.Stopped = old.Spec.Stopped
	// Giving up spec.privileged is always allowed.
	spec.Privileged = spec.Privileged || old.Spec.Privileged
	return !apiequality.Semantic.DeepEqual(spec, old.Spec)
}

// added returns the privileges of now that before did not hold.
func added(before, now []privilege) []privilege {
	had := map[string]bool{}
	for _, b := range before {
		had[b.key] = true
	}
	var r []privilege
	for _, n := range now {
		if !had[n.key] {
			r = append(r, n)
		}
	}
	return r
}
