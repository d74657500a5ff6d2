package apiserver

import (
	"io"
	"slices"
	"strings"
	"testing"

	"github.com/spf13/pflag"
	apiequality "k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	genericoptions "k8s.io/apiserver/pkg/server/options"
	"k8s.io/client-go/tools/cache"

	"kiln.dev/kiln/pkg/admission/budget"
	"kiln.dev/kiln/pkg/admission/claimattach"
	"kiln.dev/kiln/pkg/admission/quantitybounds"
	"kiln.dev/kiln/pkg/admission/resourceversionformat"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// The cluster chain is NamespaceLifecycle, Kiln's checks, the standard
// policy and webhook plugins, then Budget; standalone runs KilnPlugins as
// they are. Either way ClaimAttach comes before Budget, so a write it
// refuses is never charged.
func TestAdmissionOrder(t *testing.T) {
	a := genericoptions.NewAdmissionOptions()
	standard := slices.DeleteFunc(slices.Clone(a.RecommendedPluginOrder), func(p string) bool { return p == lifecycle.PluginName })
	configureAdmission(a)

	want := append([]string{lifecycle.PluginName}, KilnPlugins[:len(KilnPlugins)-1]...)
	want = append(append(want, standard...), budget.PluginName)
	if got := strings.Join(a.RecommendedPluginOrder, ","); got != strings.Join(want, ",") {
		t.Errorf("cluster chain\n%s\nwant\n%s", got, strings.Join(want, ","))
	}
	registered := a.Plugins.Registered()
	for _, p := range KilnPlugins {
		if !slices.Contains(registered, p) {
			t.Errorf("%s is not registered", p)
		}
		if a.DefaultOffPlugins.Has(p) {
			t.Errorf("%s is off by default", p)
		}
	}
	if i, j := slices.Index(KilnPlugins, claimattach.PluginName), slices.Index(KilnPlugins, budget.PluginName); i < 0 || j != len(KilnPlugins)-1 || i > j {
		t.Errorf("KilnPlugins %v: want %s, and %s last", KilnPlugins, claimattach.PluginName, budget.PluginName)
	}
}

// The informers behind the plugins and the Budget loop keep an Instance's
// or a Claim's identity, deletion and finalizers only (the ledger is
// folded once only its finalizer is left), and nothing's managedFields.
func TestSlimObject(t *testing.T) {
	meta := metav1.ObjectMeta{
		Name: "nb", Namespace: "team-a", UID: "u1", ResourceVersion: "42", Generation: 3,
		DeletionTimestamp: &metav1.Time{}, Finalizers: []string{v1alpha1.LedgerFinalizer},
		Labels:        map[string]string{"app": "nb"},
		ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "kubectl"}},
	}
	identity := metav1.ObjectMeta{Name: "nb", Namespace: "team-a", UID: "u1", ResourceVersion: "42", Generation: 3,
		DeletionTimestamp: &metav1.Time{}, Finalizers: []string{v1alpha1.LedgerFinalizer}}
	for _, tc := range []struct {
		name string
		in   any
		want any
	}{
		{"instance", &v1alpha1.Instance{ObjectMeta: meta, Spec: v1alpha1.InstanceSpec{Type: "h100", Image: "x"}, Status: v1alpha1.InstanceStatus{Phase: v1alpha1.InstanceReady}},
			&v1alpha1.Instance{ObjectMeta: identity}},
		{"claim", &v1alpha1.Claim{ObjectMeta: meta, Spec: v1alpha1.ClaimSpec{Type: "h100"}}, &v1alpha1.Claim{ObjectMeta: identity}},
		{"budget", &v1alpha1.Budget{ObjectMeta: meta, Spec: v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{v1alpha1.BudgetAccelerators: resource.MustParse("4")}}},
			&v1alpha1.Budget{ObjectMeta: func() metav1.ObjectMeta { m := *meta.DeepCopy(); m.ManagedFields = nil; return m }(),
				Spec: v1alpha1.BudgetSpec{Hard: v1alpha1.BudgetResourceList{v1alpha1.BudgetAccelerators: resource.MustParse("4")}}}},
		{"tombstone", cache.DeletedFinalStateUnknown{Key: "team-a/nb"}, cache.DeletedFinalStateUnknown{Key: "team-a/nb"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, err := slimObject(tc.in)
			if err != nil {
				t.Fatal(err)
			}
			if !apiequality.Semantic.DeepEqual(got, tc.want) {
				t.Errorf("slimObject =\n%#v\nwant\n%#v", got, tc.want)
			}
		})
	}
}

// ResourceVersionFormat and QuantityBounds are always on: the server
// refuses to start with --disable-admission-plugins naming either, and
// names the plugin and what it guards.
func TestAlwaysOnPlugins(t *testing.T) {
	const (
		rvf = "ResourceVersionFormat cannot be disabled, since without it a malformed metadata.resourceVersion would get a 500"
		qb  = "QuantityBounds cannot be disabled, since without it one quantity such as 1e2020020020 would hold a CPU"
	)
	for _, tc := range []struct {
		disable string
		want    []string // substrings of the error; none: no error
	}{
		{disable: ""},
		{disable: "ValidatingAdmissionWebhook"},
		{disable: resourceversionformat.PluginName, want: []string{"--disable-admission-plugins=ResourceVersionFormat: " + rvf}},
		{disable: quantitybounds.PluginName, want: []string{"--disable-admission-plugins=QuantityBounds: " + qb}},
		{disable: "ValidatingAdmissionWebhook,QuantityBounds", want: []string{"--disable-admission-plugins=ValidatingAdmissionWebhook,QuantityBounds: " + qb}},
		{disable: "QuantityBounds,ResourceVersionFormat", want: []string{rvf, qb}},
		{disable: budget.PluginName, want: []string{"--disable-admission-plugins=Budget: Budget cannot be disabled, since without it a namespace could start Instances and Claims beyond its Budgets"}},
	} {
		name := tc.disable
		if name == "" {
			name = "none"
		}
		t.Run(name, func(t *testing.T) {
			o := NewOptions(io.Discard)
			fs := pflag.NewFlagSet("kiln-apiserver", pflag.ContinueOnError)
			o.AddFlags(fs)
			if err := fs.Parse([]string{"--etcd-servers=https://127.0.0.1:2379", "--disable-admission-plugins=" + tc.disable}); err != nil {
				t.Fatal(err)
			}
			if err := o.Complete(false, false); err != nil {
				t.Fatal(err)
			}
			err := o.Validate()
			if len(tc.want) == 0 {
				if err != nil {
					t.Errorf("refused: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatalf("started, want %q", tc.want)
			}
			for _, w := range tc.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %v, want one containing %q", err, w)
				}
			}
		})
	}
}
