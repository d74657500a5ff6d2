// Package selection derives a kind's field-selector attributes, list and
// watch predicate, and watch-cache indexes from one table of its fields.
package selection

import (
	"fmt"
	"sort"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apiserver/pkg/registry/generic"
	"k8s.io/apiserver/pkg/storage"
	"k8s.io/client-go/tools/cache"
)

// Fields are the fields of kind T a field selector may name, beyond
// metadata.name and metadata.namespace. Every one is indexed in the watch
// cache, so a selector on it is answered without scanning every object.
type Fields[T runtime.Object] struct {
	Namespaced bool
	Meta       func(T) *metav1.ObjectMeta
	Values     map[string]func(T) string
}

// Names returns the selectable fields, sorted.
func (f Fields[T]) Names() []string {
	names := make([]string, 0, len(f.Values))
	for name := range f.Values {
		names = append(names, name)
	}
	sort.Strings(names)
	return names
}

// Set returns the selectable fields of obj with their values.
func (f Fields[T]) Set(obj T) fields.Set {
	set := make(fields.Set, len(f.Values)+2)
	for name, value := range f.Values {
		set[name] = value(obj)
	}
	return generic.AddObjectMetaFieldsSet(set, f.Meta(obj), f.Namespaced)
}

// GetAttrs returns the labels and selectable fields of an object.
func (f Fields[T]) GetAttrs(obj runtime.Object) (labels.Set, fields.Set, error) {
	o, ok := obj.(T)
	if !ok {
		return nil, nil, fmt.Errorf("unexpected object of type %T", obj)
	}
	return f.Meta(o).Labels, f.Set(o), nil
}

// Matcher returns the predicate of a list or watch.
func (f Fields[T]) Matcher(label labels.Selector, field fields.Selector) storage.SelectionPredicate {
	return storage.SelectionPredicate{Label: label, Field: field, GetAttrs: f.GetAttrs, IndexFields: f.Names()}
}

// Indexers returns the watch-cache indexes of the selectable fields.
func (f Fields[T]) Indexers() *cache.Indexers {
	if len(f.Values) == 0 {
		return nil
	}
	ix := cache.Indexers{}
	for name, value := range f.Values {
		ix[storage.FieldIndex(name)] = func(obj interface{}) ([]string, error) {
			o, ok := obj.(T)
			if !ok {
				return nil, fmt.Errorf("unexpected object of type %T", obj)
			}
			return []string{value(o)}, nil
		}
	}
	return &ix
}
