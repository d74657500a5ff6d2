// Package table turns stored objects into the server-side tables kubectl
// prints, one row per object.
package table

import (
	"context"
	"fmt"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/duration"
	"k8s.io/apiserver/pkg/registry/rest"
)

// None is what a cell shows for an unset value, as kubectl does.
const None = "<none>"

// RowFunc returns the cells of one object, in the order of the columns.
type RowFunc func(obj runtime.Object) ([]interface{}, error)

// Convertor is a rest.TableConvertor for one kind.
type Convertor struct {
	Columns []metav1.TableColumnDefinition
	Row     RowFunc
}

var _ rest.TableConvertor = Convertor{}

// ConvertToTable converts an object or a list of objects.
func (c Convertor) ConvertToTable(ctx context.Context, obj runtime.Object, opts runtime.Object) (*metav1.Table, error) {
	t := &metav1.Table{}
	if o, ok := opts.(*metav1.TableOptions); !ok || !o.NoHeaders {
		t.ColumnDefinitions = c.Columns
	}
	add := func(o runtime.Object) error {
		cells, err := c.Row(o)
		if err != nil {
			return err
		}
		if len(cells) != len(c.Columns) {
			return fmt.Errorf("table row has %d cells for %d columns", len(cells), len(c.Columns))
		}
		t.Rows = append(t.Rows, metav1.TableRow{Cells: cells, Object: runtime.RawExtension{Object: o}})
		return nil
	}
	if meta.IsListType(obj) {
		if err := meta.EachListItem(obj, add); err != nil {
			return nil, err
		}
		if l, err := meta.ListAccessor(obj); err == nil {
			t.ResourceVersion = l.GetResourceVersion()
			t.Continue = l.GetContinue()
			t.RemainingItemCount = l.GetRemainingItemCount()
		}
		return t, nil
	}
	if err := add(obj); err != nil {
		return nil, err
	}
	if m, err := meta.Accessor(obj); err == nil {
		t.ResourceVersion = m.GetResourceVersion()
	}
	return t, nil
}

// NameColumn is the first column of every table.
var NameColumn = metav1.TableColumnDefinition{
	Name: "Name", Type: "string", Format: "name",
	Description: metav1.ObjectMeta{}.SwaggerDoc()["name"],
}

// AgeColumn is the last column of every table.
var AgeColumn = metav1.TableColumnDefinition{
	Name: "Age", Type: "string",
	Description: metav1.ObjectMeta{}.SwaggerDoc()["creationTimestamp"],
}

// Age renders a creation timestamp the way kubectl does ("5m", "3d").
func Age(t metav1.Time) string {
	if t.IsZero() {
		return "<unknown>"
	}
	return duration.HumanDuration(time.Since(t.Time))
}

// OrNone returns s, or None when s is empty.
func OrNone(s string) string {
	if s == "" {
		return None
	}
	return s
}
