package apiserver

import (
	"slices"
	"strings"
	"testing"

	"k8s.io/apiserver/pkg/admission/plugin/namespace/lifecycle"
	genericoptions "k8s.io/apiserver/pkg/server/options"

	"kiln.dev/kiln/pkg/admission/budget"
	"kiln.dev/kiln/pkg/admission/claimattach"
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
