// Package quantitybounds is the QuantityBounds admission plugin: it refuses,
// before anything compares them, quantities whose exponent would make a
// comparison run for hours.
//
// resource.Quantity parses 1e2020020020 at once, but Quantity.Cmp then
// aligns it with the other operand's scale by writing two billion digits
// out (apimachinery v0.37; bounded upstream later). The registry compares
// specs with apiequality.Semantic on every update (the generation bump)
// and InstanceSizing compares requests with the type's limits, both before
// validation. This plugin runs first among the mutating plugins, so a
// request carrying such a quantity gets a 422 naming the field instead.
package quantitybounds

import (
	"context"
	"io"
	"reflect"
	"strings"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/resource"
	"k8s.io/apimachinery/pkg/util/validation/field"
	"k8s.io/apiserver/pkg/admission"

	"kiln.dev/kiln/pkg/apis/gpu/validation"
)

// PluginName is the name of the plugin in --enable-admission-plugins.
const PluginName = "QuantityBounds"

// Register registers the plugin.
func Register(plugins *admission.Plugins) {
	plugins.Register(PluginName, func(io.Reader) (admission.Interface, error) { return New(), nil })
}

// Plugin refuses unbounded quantities in any Kiln object.
type Plugin struct {
	*admission.Handler
}

var _ admission.MutationInterface = &Plugin{}

// New returns the plugin.
func New() *Plugin {
	return &Plugin{Handler: admission.NewHandler(admission.Create, admission.Update)}
}

// Admit changes nothing. It is a mutating plugin only to run before the
// other mutating plugins and the registry's update preparation; validating
// admission runs after both, too late. The server refuses to start with it
// disabled.
func (p *Plugin) Admit(_ context.Context, a admission.Attributes, _ admission.ObjectInterfaces) error {
	obj := a.GetObject()
	if obj == nil {
		return nil
	}
	errs := Check(obj)
	if len(errs) == 0 {
		return nil
	}
	return apierrors.NewInvalid(a.GetKind().GroupKind(), a.GetName(), errs)
}

var quantityType = reflect.TypeOf(resource.Quantity{})

// Check returns a field error for every quantity in obj that validation's
// BoundedQuantity refuses, with the path of its JSON field.
func Check(obj any) field.ErrorList {
	w := walker{segs: make([]segment, 0, 16)}
	w.walk(reflect.ValueOf(obj))
	return w.errs
}

// segment is one step of a field path. The walk keeps them on a stack and
// builds a field.Path only for a refusal, so a clean object costs no path.
type segment struct {
	name  string // a field's JSON name or a map key
	index int    // a list index, when isKey is false and name is ""
	isKey bool
}

type walker struct {
	segs []segment
	errs field.ErrorList
}

func (w *walker) path() *field.Path {
	p := field.NewPath("")
	for i, s := range w.segs {
		switch {
		case s.isKey:
			p = p.Key(s.name)
		case s.name == "":
			p = p.Index(s.index)
		case i == 0:
			p = field.NewPath(s.name)
		default:
			p = p.Child(s.name)
		}
	}
	return p
}

func (w *walker) walk(v reflect.Value) {
	if !v.IsValid() || !holdsQuantity(v.Type()) {
		return
	}
	if v.Type() == quantityType {
		var q *resource.Quantity
		if v.CanAddr() {
			q = v.Addr().Interface().(*resource.Quantity)
		} else {
			c := v.Interface().(resource.Quantity)
			q = &c
		}
		if !validation.BoundedQuantity(*q) {
			w.errs = append(w.errs, validation.ValidateBoundedQuantity(*q, w.path())...)
		}
		return
	}
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if !v.IsNil() {
			w.walk(v.Elem())
		}
	case reflect.Struct:
		t := v.Type()
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() || !holdsQuantity(f.Type) {
				continue
			}
			name, inline := jsonName(f)
			switch {
			case name == "-":
			case inline:
				w.walk(v.Field(i))
			default:
				w.push(segment{name: name}, v.Field(i))
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			w.push(segment{index: i}, v.Index(i))
		}
	case reflect.Map:
		iter := v.MapRange()
		for iter.Next() {
			k := iter.Key()
			name := k.String()
			if k.Kind() != reflect.String {
				name = k.Type().String()
			}
			w.push(segment{name: name, isKey: true}, iter.Value())
		}
	}
}

func (w *walker) push(s segment, v reflect.Value) {
	w.segs = append(w.segs, s)
	w.walk(v)
	w.segs = w.segs[:len(w.segs)-1]
}

func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if f.Anonymous && name == "" || strings.Contains(opts, "inline") {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

// holds caches, per type, whether a value of it can contain a quantity, so
// the walk skips strings, metadata and everything else without looking.
var holds sync.Map // reflect.Type -> bool

func holdsQuantity(t reflect.Type) bool {
	if b, ok := holds.Load(t); ok {
		return b.(bool)
	}
	// A recursive type is assumed to hold one while it is looked at: a
	// wrong guess then costs a walk, never a missed quantity.
	holds.Store(t, true)
	b := computeHolds(t)
	holds.Store(t, b)
	return b
}

func computeHolds(t reflect.Type) bool {
	if t == quantityType {
		return true
	}
	switch t.Kind() {
	case reflect.Pointer, reflect.Slice, reflect.Array:
		return holdsQuantity(t.Elem())
	case reflect.Map:
		return holdsQuantity(t.Elem())
	case reflect.Interface:
		return true
	case reflect.Struct:
		for i := range t.NumField() {
			if f := t.Field(i); f.IsExported() && holdsQuantity(f.Type) {
				return true
			}
		}
	}
	return false
}
