// Package instancesizing is the InstanceSizing admission plugin: it fills
// an Instance's cpu, memory and ephemeralStorage from its card share of the
// InstanceType, and keeps the values a user set if the type allows them.
// Port protocols and the workspace are defaulted with the API's other
// defaults (v1alpha1/defaults.go), when the request is decoded.
package instancesizing

import (
	"context"
	"fmt"
	"io"
	"strconv"
	"strings"

	apiequality "k8s.io/apimachinery/pkg/api/equality"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	kilninit "kiln.dev/kiln/pkg/admission/initializer"
	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/apis/gpu/validation"
	"kiln.dev/kiln/pkg/domain/accounting"
	"kiln.dev/kiln/pkg/domain/instancechange"
	"kiln.dev/kiln/pkg/generated/clientset/versioned"
	informers "kiln.dev/kiln/pkg/generated/informers/externalversions"
	listers "kiln.dev/kiln/pkg/generated/listers/gpu/v1alpha1"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "InstanceSizing"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin sizes Instances.
type Plugin struct {
	*admission.Handler
	types       listers.InstanceTypeLister
	client      versioned.Interface
	getInstance instancechange.Getter
}

var (
	_ admission.MutationInterface       = &Plugin{}
	_ kilninit.WantsKilnInformerFactory = &Plugin{}
	_ kilninit.WantsKilnClient          = &Plugin{}
)

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// SetKilnInformerFactory takes the InstanceType lister.
func (p *Plugin) SetKilnInformerFactory(f informers.SharedInformerFactory) {
	inf := f.Gpu().V1alpha1().InstanceTypes()
	p.types = inf.Lister()
	p.SetReadyFunc(inf.Informer().HasSynced)
}

// SetKilnClient takes the client used when the lister has not seen a type
// yet, and to read the Instance a start or stop changes.
func (p *Plugin) SetKilnClient(c versioned.Interface) {
	p.client, p.getInstance = c, instancechange.ClientGetter(c)
}

// ValidateInitialization checks the plugin got what it needs.
func (p *Plugin) ValidateInitialization() error {
	if p.types == nil || p.client == nil {
		return fmt.Errorf("%s needs the InstanceType lister and a Kiln client", PluginName)
	}
	return nil
}

// Admit sizes a new Instance, and an existing one whose request changes or
// that is started.
func (p *Plugin) Admit(ctx context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	inst, old, err := instancechange.Of(ctx, a, p.getInstance)
	if err != nil || inst == nil {
		return err
	}
	if old != nil && !changesShare(old, inst) {
		return nil
	}
	if !p.WaitForReady() {
		return admission.NewForbidden(a, fmt.Errorf("not yet ready to handle request: InstanceTypes are still loading"))
	}
	t, err := accounting.LookupType(ctx, p.types, p.client, inst.Spec.Type)
	if err != nil || t == nil {
		// InstanceTypeAccess refuses an Instance of a missing type.
		return err
	}
	if errs := Size(inst, old, t); len(errs) > 0 {
		return apierrors.NewInvalid(gpu.Kind("Instance"), inst.Name, errs)
	}
	return nil
}

// changesShare is true for an update that alters what the Instance asks
// for, or starts it.
func changesShare(old, inst *gpu.Instance) bool {
	if old.Spec.Stopped && !inst.Spec.Stopped {
		return true
	}
	return !apiequality.Semantic.DeepEqual(old.Spec.Resources, inst.Spec.Resources)
}

// hostResource is one of the sized fields.
type hostResource struct {
	name    string
	inst    func(*gpu.InstanceResources) **resource.Quantity
	perCard func(*v1alpha1.HostResources) *resource.Quantity
	round   func(milli int64) resource.Quantity
}

var hostResources = []hostResource{
	{
		name:    "cpu",
		inst:    func(r *gpu.InstanceResources) **resource.Quantity { return &r.CPU },
		perCard: func(r *v1alpha1.HostResources) *resource.Quantity { return r.CPU },
		// Whole tenths of a core.
		round: func(milli int64) resource.Quantity {
			return *resource.NewMilliQuantity(roundUp(milli, 100), resource.DecimalSI)
		},
	},
	{
		name:    "memory",
		inst:    func(r *gpu.InstanceResources) **resource.Quantity { return &r.Memory },
		perCard: func(r *v1alpha1.HostResources) *resource.Quantity { return r.Memory },
		round:   roundMebibytes,
	},
	{
		name:    "ephemeralStorage",
		inst:    func(r *gpu.InstanceResources) **resource.Quantity { return &r.EphemeralStorage },
		perCard: func(r *v1alpha1.HostResources) *resource.Quantity { return r.EphemeralStorage },
		round:   roundMebibytes,
	},
}

// roundMebibytes takes milli-bytes to whole mebibytes, rounding up.
func roundMebibytes(milli int64) resource.Quantity {
	const mi = 1 << 20
	return *resource.NewQuantity(roundUp((milli+999)/1000, mi), resource.BinarySI)
}

func roundUp(v, unit int64) int64 { return (v + unit - 1) / unit * unit }

// Size fills and checks the host resources of inst for type t. old is the
// stored Instance on an update, nil on a create.
func Size(inst, old *gpu.Instance, t *v1alpha1.InstanceType) field.ErrorList {
	share, err := accounting.ShareOf(accounting.InstanceRequest(&inst.Spec), t)
	if err != nil {
		// InstanceTypeAccess names the profile the type lacks.
		return nil
	}
	// Host resources follow the share of the card's memory, as the type
	// documents; the Budget charges the larger compute share.
	milli := share.MemoryMilliCards
	shareText := shareOfCards(milli)
	if t.Spec.Accelerator == nil {
		// A CPU-only type's resourcesPerCard is what one Instance gets.
		milli, shareText = 1000, "one CPU-only Instance"
	}
	if milli == 0 {
		return nil
	}
	sized := sizedSet(inst.Annotations)
	var errs field.ErrorList
	resPath := field.NewPath("spec", "resources")
	for _, r := range hostResources {
		cur := r.inst(&inst.Spec.Resources)
		perCard := r.perCard(&t.Spec.ResourcesPerCard)
		if *cur != nil && old != nil && sized[r.name] && apiequality.Semantic.DeepEqual(*cur, *r.inst(&old.Spec.Resources)) {
			// Filled in by this plugin before and left alone since: size it
			// again for the new share.
			*cur = nil
		}
		if *cur != nil && !validation.BoundedQuantity(**cur) {
			// Validation refuses it with a field error; comparing it
			// first could take hours.
			delete(sized, r.name)
			continue
		}
		if perCard == nil || !validation.BoundedQuantity(*perCard) {
			// The type says nothing; the user's value, if any, stands.
			delete(sized, r.name)
			continue
		}
		limit := r.round(bigMul(perCard.MilliValue(), milli))
		if *cur == nil {
			q := limit.DeepCopy()
			*cur = &q
			sized[r.name] = true
			continue
		}
		delete(sized, r.name)
		if (*cur).Cmp(limit) > 0 {
			errs = append(errs, field.Invalid(resPath.Child(r.name), (*cur).String(),
				fmt.Sprintf("must be at most %s: instancetype %q gives %s per card and this Instance holds %s; ask for less, or leave it empty to get %s",
					limit.String(), t.Name, perCard.String(), shareText, limit.String())))
		}
	}
	setSizedAnnotation(inst, sized)
	return errs
}

// shareOfCards says how much an Instance holds: "2 cards", "1 card",
// "0.25 of a card".
func shareOfCards(milli int64) string {
	switch {
	case milli == 1000:
		return "1 card"
	case milli%1000 == 0:
		return fmt.Sprintf("%d cards", milli/1000)
	}
	return cardsText(milli) + " of a card"
}

func cardsText(milli int64) string {
	if milli%1000 == 0 {
		return fmt.Sprintf("%d", milli/1000)
	}
	// Shortest form: "0.25", not the "0.250" of a milli-scaled decimal.
	return strconv.FormatFloat(float64(milli)/1000, 'f', -1, 64)
}

// bigMul is a*milli/1000 in milli-units of a's quantity: milli-value times
// share, without overflow for terabyte-sized storage.
func bigMul(aMilli, shareMilli int64) int64 {
	hi, lo := aMilli/1000, aMilli%1000
	return hi*shareMilli + (lo*shareMilli+999)/1000
}

func sizedSet(ann map[string]string) map[string]bool {
	s := map[string]bool{}
	for _, f := range strings.Split(ann[gpu.SizedResourcesAnnotation], ",") {
		if f != "" {
			s[f] = true
		}
	}
	return s
}

func setSizedAnnotation(inst *gpu.Instance, sized map[string]bool) {
	var names []string
	for _, r := range hostResources {
		if sized[r.name] {
			names = append(names, r.name)
		}
	}
	if len(names) == 0 {
		delete(inst.Annotations, gpu.SizedResourcesAnnotation)
		return
	}
	if inst.Annotations == nil {
		inst.Annotations = map[string]string{}
	}
	inst.Annotations[gpu.SizedResourcesAnnotation] = strings.Join(names, ",")
}
