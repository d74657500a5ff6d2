package deploy

import (
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	admissionregistrationv1 "k8s.io/api/admissionregistration/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"

	gpuv1 "kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// TestPodPolicyEnvList: the variables the Pod policy refuses on tenants'
// Pods are exactly those Instances may not set (well_known_env.go), a
// prefix as a prefix and a name as a name, in both places the policy
// lists them.
func TestPodPolicyEnvList(t *testing.T) {
	f, err := os.Open(filepath.Join(root, "artifacts", "policy", "accelerator-pods.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var policy admissionregistrationv1.ValidatingAdmissionPolicy
	if err := utilyaml.NewYAMLOrJSONDecoder(f, 4096).Decode(&policy); err != nil {
		t.Fatal(err)
	}
	var expr string
	for _, v := range policy.Spec.Variables {
		if v.Name == "runtimeEnv" {
			expr = v.Expression
		}
	}
	if expr == "" {
		t.Fatal("the policy has no variable runtimeEnv")
	}
	var want []string
	for _, n := range gpuv1.RuntimeEnvNames() {
		if strings.HasSuffix(n, "_") {
			want = append(want, "startsWith:"+n)
		} else {
			want = append(want, "==:"+n)
		}
	}
	slices.Sort(want)
	// The predicate is written twice: to find the containers, and to name
	// their variables.
	want = append(want, want...)
	slices.Sort(want)
	var got []string
	for _, m := range regexp.MustCompile(`e\.name(\.startsWith\(| == )'([^']*)'`).FindAllStringSubmatch(expr, -1) {
		op := "=="
		if strings.HasPrefix(m[1], ".startsWith") {
			op = "startsWith"
		}
		got = append(got, op+":"+m[2])
	}
	slices.Sort(got)
	if !slices.Equal(got, want) {
		t.Errorf("the policy's runtimeEnv matches\n%v\nwant (twice) the names of well_known_env.go\n%v", got, want)
	}
}
