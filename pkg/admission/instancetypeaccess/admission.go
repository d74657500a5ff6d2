// Package instancetypeaccess is the InstanceTypeAccess admission plugin: an
// Instance or Claim may only use an InstanceType that exists, is not being
// deleted, admits its namespace, is open for new starts, and offers the
// mode and amount asked for.
package instancetypeaccess

import (
	"context"
	"fmt"
	"io"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"
	genericinit "k8s.io/apiserver/pkg/admission/initializer"
	kubeinformers "k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "InstanceTypeAccess"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin checks the use of InstanceTypes.
type Plugin struct {
	*admission.Handler
	types  listers.InstanceTypeLister
	client versioned.Interface
	// Namespaces come from the cluster. Standalone has none; a namespace
	// is then known only by its name label.
	namespaces                    corelisters.NamespaceLister
	kubeClient                    kubernetes.Interface
	typesSynced, namespacesSynced func() bool
}

var (
	_ admission.ValidationInterface                = &Plugin{}
	_ kilninit.WantsKilnInformerFactory            = &Plugin{}
	_ kilninit.WantsKilnClient                     = &Plugin{}
	_ genericinit.WantsExternalKubeInformerFactory = &Plugin{}
	_ genericinit.WantsExternalKubeClientSet       = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	p := &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
	p.SetReadyFunc(func() bool {
		return p.typesSynced != nil && p.typesSynced() && (p.namespacesSynced == nil || p.namespacesSynced())
	})
	return p
}

// SetKilnInformerFactory takes the InstanceType lister.
func (p *Plugin) SetKilnInformerFactory(f informers.SharedInformerFactory) {
	inf := f.Gpu().V1alpha1().InstanceTypes()
	p.types, p.typesSynced = inf.Lister(), inf.Informer().HasSynced
}

// SetKilnClient takes the client used when the lister has not seen a type yet.
func (p *Plugin) SetKilnClient(c versioned.Interface) { p.client = c }

// SetExternalKubeInformerFactory takes the Namespace lister (cluster mode).
func (p *Plugin) SetExternalKubeInformerFactory(f kubeinformers.SharedInformerFactory) {
	if f == nil {
		return
	}
	inf := f.Core().V1().Namespaces()
	p.namespaces, p.namespacesSynced = inf.Lister(), inf.Informer().HasSynced
}

// SetExternalKubeClientSet takes the client for Namespaces the lister has
// not seen yet.
func (p *Plugin) SetExternalKubeClientSet(c kubernetes.Interface) { p.kubeClient = c }

// ValidateInitialization checks the plugin got what it needs.
func (p *Plugin) ValidateInitialization() error {
	if p.types == nil || p.client == nil {
		return fmt.Errorf("%s needs the InstanceType lister and a Kiln client", PluginName)
	}
	return nil
}

// Validate refuses Instances and Claims their type does not allow.
func (p *Plugin) Validate(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	var (
		typeName string
		req      accounting.Request
		starting bool // a new Instance or Claim, or a stopped Instance started
		checkReq bool // the request is new or changed
		// checkIdle: the Instance sets an idle limit, new or changed, or
		// is started: the type's own may have been lowered since.
		checkIdle bool
		kind      string
	)
	inst, old, err := instancechange.Of(ctx, a, nil)
	switch {
	case err != nil:
		return err
	case inst != nil:
		kind, typeName, req = "Instance", inst.Spec.Type, accounting.InstanceRequest(&inst.Spec)
		if old == nil {
			starting, checkReq = !inst.Spec.Stopped, true
		} else {
			starting = old.Spec.Stopped && !inst.Spec.Stopped
			checkReq = starting || !accounting.InstanceRequest(&old.Spec).Equal(req)
		}
		checkIdle = inst.Spec.IdleStopAfter != nil &&
			(old == nil || starting || old.Spec.IdleStopAfter == nil || *old.Spec.IdleStopAfter != *inst.Spec.IdleStopAfter)
	case a.GetSubresource() == "" && a.GetOperation() == admission.Create:
		// A Claim's request cannot change after creation.
		c, ok := a.GetObject().(*gpu.Claim)
		if !ok {
			return nil
		}
		kind, typeName, req, starting, checkReq = "Claim", c.Spec.Type, accounting.ClaimRequest(&c.Spec), true, true
	default:
		return nil
	}
	if !checkReq && !checkIdle {
		return nil
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, fmt.Errorf("not yet ready to handle request: InstanceTypes are still loading"))
	}
	typePath := field.NewPath("spec", "type")
	if typeName == "" {
		return apierrors.NewInvalid(gpu.Kind(kind), a.GetName(), field.ErrorList{
			field.Required(typePath, "name an InstanceType; `kubectl get instancetypes` lists the ones there are"),
		})
	}
	t, err := accounting.LookupType(ctx, p.types, p.client, typeName)
	if err != nil {
		return apierrors.NewInternalError(err)
	}
	if t == nil {
		return apierrors.NewInvalid(gpu.Kind(kind), a.GetName(), field.ErrorList{
			field.Invalid(typePath, typeName, "no such instancetype; `kubectl get instancetypes` lists the ones there are"),
		})
	}
	if checkIdle {
		if errs := checkIdleLimit(t, inst); len(errs) > 0 {
			return apierrors.NewInvalid(gpu.Kind(kind), a.GetName(), errs)
		}
	}
	if !checkReq {
		return nil
	}
	// A running Instance that asks for another share is checked like a
	// start: otherwise a type on hold, being deleted, or closed to the
	// namespace would still hand out more to whoever already runs on it.
	changing := !starting && inst != nil && !inst.Spec.Stopped
	if starting || changing {
		if err := p.admitsStart(ctx, t, kind, a.GetNamespace(), changing); err != nil {
			return admission.NewForbidden(a, err)
		}
	}
	resPath := field.NewPath("spec", "resources")
	if kind == "Claim" {
		resPath = field.NewPath("spec")
	}
	if errs := checkMode(t, req, resPath, kind); len(errs) > 0 {
		return apierrors.NewInvalid(gpu.Kind(kind), a.GetName(), errs)
	}
	return nil
}

// admitsStart says why t takes no new start of kind in namespace ns, or no
// change of what a running Instance asks for: it is being deleted, is on
// hold, or is closed to the namespace.
func (p *Plugin) admitsStart(ctx context.Context, t *v1alpha1.InstanceType, kind, ns string, changing bool) error {
	if t.DeletionTimestamp != nil {
		if changing {
			return fmt.Errorf("instancetype %q is being deleted and takes no change of what a running Instance asks for; keep spec.resources as they are, or move to another type (kubectl get instancetypes)", t.Name)
		}
		return fmt.Errorf("instancetype %q is being deleted and takes no new %ss; choose another type (kubectl get instancetypes)", t.Name, strings.ToLower(kind))
	}
	if t.Spec.Hold != v1alpha1.HoldNone {
		if changing {
			return fmt.Errorf("instancetype %q is on %s and takes no change of what a running Instance asks for; keep spec.resources as they are, or try again when a cluster admin reopens it", t.Name, t.Spec.Hold)
		}
		return fmt.Errorf("instancetype %q is on %s and takes no new starts; running Instances are unaffected, try again when a cluster admin reopens it or choose another type", t.Name, t.Spec.Hold)
	}
	return p.admitsNamespace(ctx, t, ns)
}

func (p *Plugin) admitsNamespace(ctx context.Context, t *v1alpha1.InstanceType, ns string) error {
	if t.Spec.NamespaceSelector == nil {
		return nil
	}
	sel, err := metav1.LabelSelectorAsSelector(t.Spec.NamespaceSelector)
	if err != nil {
		return fmt.Errorf("instancetype %q has an invalid namespaceSelector: %v", t.Name, err)
	}
	nsLabels, err := p.namespaceLabels(ctx, ns)
	if err != nil {
		return err
	}
	if !sel.Matches(labels.Set(nsLabels)) {
		return fmt.Errorf("instancetype %q is not offered to namespace %q (its namespaceSelector is %s); ask a cluster admin, or choose another type", t.Name, ns, sel.String())
	}
	return nil
}

func (p *Plugin) namespaceLabels(ctx context.Context, name string) (map[string]string, error) {
	if p.namespaces == nil {
		return map[string]string{corev1.LabelMetadataName: name}, nil
	}
	ns, err := p.namespaces.Get(name)
	if apierrors.IsNotFound(err) && p.kubeClient != nil {
		ns, err = p.kubeClient.CoreV1().Namespaces().Get(ctx, name, metav1.GetOptions{})
	}
	if err != nil {
		// %v, not %w: admission.NewForbidden passes a wrapped Forbidden
		// through as it is, and the tenant would see Kiln's own
		// ServiceAccount refused instead of which namespace was unreadable.
		return nil, fmt.Errorf("reading namespace %q: %v", name, err)
	}
	return ns.Labels, nil
}

// checkIdleLimit refuses an idle limit longer than the type's: the
// admin's limit is how long cards may sit idle, and a tenant may only ask
// for less.
func checkIdleLimit(t *v1alpha1.InstanceType, inst *gpu.Instance) field.ErrorList {
	idle := t.Spec.Idle
	if idle == nil || inst.Spec.IdleStopAfter.Duration <= idle.StopAfter.Duration {
		return nil
	}
	return field.ErrorList{field.Invalid(field.NewPath("spec", "idleStopAfter"), inst.Spec.IdleStopAfter.Duration.String(),
		fmt.Sprintf("may be at most %s, the idle limit of instancetype %q (its spec.idle.stopAfter); set a shorter one, or remove idleStopAfter to take the type's",
			idle.StopAfter.Duration, t.Name))}
}

// checkMode refuses a request the type does not offer.
func checkMode(t *v1alpha1.InstanceType, req accounting.Request, resPath *field.Path, kind string) field.ErrorList {
	acc := t.Spec.Accelerator
	cards := req.Cards != nil && *req.Cards > 0
	switch {
	case acc == nil:
		if cards || req.SlicePercent > 0 || req.Partition != "" {
			path := resPath.Child("accelerators")
			if req.SlicePercent > 0 {
				path = resPath.Child("slice")
			} else if req.Partition != "" {
				path = resPath.Child("partition")
			}
			return field.ErrorList{field.Forbidden(path, fmt.Sprintf("instancetype %q is CPU-only and has no accelerators; remove it or choose a GPU type", t.Name))}
		}
		if kind == "Claim" {
			return field.ErrorList{field.Forbidden(field.NewPath("spec", "type"), fmt.Sprintf("instancetype %q is CPU-only: there is nothing to reserve", t.Name))}
		}
	case req.Partition != "":
		var names []string
		for _, pr := range acc.Partitions {
			if pr.Name == req.Partition {
				return nil
			}
			names = append(names, pr.Name)
		}
		if len(names) == 0 {
			return field.ErrorList{field.Forbidden(resPath.Child("partition"), fmt.Sprintf("instancetype %q offers no partitions", t.Name))}
		}
		return field.ErrorList{field.NotSupported(resPath.Child("partition"), req.Partition, names)}
	case req.SlicePercent > 0:
		if acc.Sliced == nil {
			return field.ErrorList{field.Forbidden(resPath.Child("slice"), fmt.Sprintf("instancetype %q does not offer slices; ask for whole cards or choose a sliced type", t.Name))}
		}
		// An MPS server caps every client of a card at one share, so a
		// slice is exactly one: a smaller one would be charged less than
		// it gets, a larger one get less than it is charged.
		if s := acc.Sliced; s.Isolation == v1alpha1.SliceIsolationMPS && s.SharesPerCard > 0 {
			share := 100 / s.SharesPerCard
			if req.SlicePercent != share || (req.SliceCoresPercent != 0 && req.SliceCoresPercent != share) {
				return field.ErrorList{field.Invalid(resPath.Child("slice"), fmt.Sprintf("memoryPercent %d, coresPercent %d", req.SlicePercent, req.SliceCoresPercent),
					fmt.Sprintf("instancetype %q cuts each card into %d MPS shares of %d%%: set memoryPercent to %d and leave coresPercent unset (or %d)", t.Name, s.SharesPerCard, share, share, share))}
			}
		}
	case cards:
		if acc.Exclusive == nil {
			return field.ErrorList{field.Forbidden(resPath.Child("accelerators"), fmt.Sprintf("instancetype %q does not offer whole cards", t.Name))}
		}
		if max := acc.MaxPerInstance; *req.Cards > max {
			return field.ErrorList{field.Invalid(resPath.Child("accelerators"), *req.Cards, fmt.Sprintf("instancetype %q allows at most %d cards per %s", t.Name, max, strings.ToLower(kind)))}
		}
	default:
		return field.ErrorList{field.Required(resPath.Child("accelerators"), fmt.Sprintf("instancetype %q has accelerators: ask for whole cards, a slice or a partition", t.Name))}
	}
	return nil
}
