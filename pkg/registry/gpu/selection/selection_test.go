package selection_test

import (
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
	"kiln.dev/kiln/pkg/registry/gpu/budget"
	"kiln.dev/kiln/pkg/registry/gpu/claim"
	"kiln.dev/kiln/pkg/registry/gpu/instance"
	"kiln.dev/kiln/pkg/registry/gpu/instancetype"
)

// The registry and the field label conversions must name the same fields,
// or a selector is accepted and never matches, or refused though indexed.
func TestRegistryAndConversionsAgree(t *testing.T) {
	for kind, names := range map[string][]string{
		"Instance":     instance.Fields.Names(),
		"InstanceType": instancetype.Fields.Names(),
		"Claim":        claim.Fields.Names(),
		"Budget":       budget.Fields.Names(),
	} {
		want := append([]string(nil), v1alpha1.SelectableFields[kind]...)
		sort.Strings(want)
		if strings.Join(names, ",") != strings.Join(want, ",") {
			t.Errorf("%s: registry selects %v, v1alpha1 converts %v", kind, names, want)
		}
	}
}

func TestInstanceFields(t *testing.T) {
	inst := &gpu.Instance{
		ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"team": "x"}},
		Spec:       gpu.InstanceSpec{Type: "h100", NodeName: "n1", ClaimName: "c"},
		Status:     gpu.InstanceStatus{Phase: gpu.InstanceReady, NodeName: "n2"},
	}
	want := fields.Set{
		"metadata.name": "a", "metadata.namespace": "ns",
		"spec.type": "h100", "spec.nodeName": "n1", "spec.claimName": "c",
		"status.phase": "Ready", "status.nodeName": "n2",
	}
	ls, fs, err := instance.Fields.GetAttrs(inst)
	if err != nil {
		t.Fatal(err)
	}
	if ls["team"] != "x" || fs.String() != want.String() {
		t.Errorf("labels %v fields %v, want %v", ls, fs, want)
	}
	for _, tc := range []struct {
		selector string
		match    bool
	}{
		{"spec.type=h100", true},
		{"spec.type=l4", false},
		{"status.nodeName=n2,spec.claimName=c", true},
		{"status.phase!=Ready", false},
	} {
		m := instance.Fields.Matcher(labels.Everything(), fields.ParseSelectorOrDie(tc.selector))
		if got, err := m.Matches(inst); err != nil || got != tc.match {
			t.Errorf("%s: match %v err %v, want %v", tc.selector, got, err, tc.match)
		}
	}
	ix := *instance.Fields.Indexers()
	if len(ix) != 5 {
		t.Errorf("%d indexes, want 5", len(ix))
	}
	for name, index := range ix {
		if values, err := index(inst); err != nil || len(values) != 1 || values[0] != want[strings.TrimPrefix(name, "f:")] {
			t.Errorf("index %s = %v, %v", name, values, err)
		}
	}
	if _, _, err := instance.Fields.GetAttrs(&gpu.Claim{}); err == nil {
		t.Error("GetAttrs accepted a Claim as an Instance")
	}
	if budget.Fields.Indexers() != nil {
		t.Error("a Budget has no selectable fields to index")
	}
}
