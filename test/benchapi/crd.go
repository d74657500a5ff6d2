package benchapi

import (
	"context"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/yaml"
)

// GenerateCRD runs controller-gen over Kiln's versioned types and returns
// the Instance CRD it makes, moved to CRDGroup, with the status subresource
// and spec.type selectable, as a CRD of these types would be published.
// Nothing of the schema is written by hand, so it cannot drift from Kiln's.
func GenerateCRD(controllerGen, repoRoot, outDir string) (*unstructured.Unstructured, error) {
	if err := os.RemoveAll(outDir); err != nil {
		return nil, err
	}
	cmd := exec.Command(controllerGen, "crd:allowDangerousTypes=true", "paths=./pkg/apis/gpu/v1alpha1/...", "output:crd:dir="+outDir)
	cmd.Dir = repoRoot
	if out, err := cmd.CombinedOutput(); err != nil {
		return nil, fmt.Errorf("controller-gen: %w: %s", err, out)
	}
	b, err := os.ReadFile(filepath.Join(outDir, "gpu.kiln.dev_instances.yaml"))
	if err != nil {
		return nil, err
	}
	return ToBenchCRD(b)
}

// ToBenchCRD moves a generated Instance CRD to CRDGroup and gives it the
// subresources and selectable field Kiln's Instances have.
func ToBenchCRD(generated []byte) (*unstructured.Unstructured, error) {
	crd := &unstructured.Unstructured{}
	if err := yaml.Unmarshal(generated, &crd.Object); err != nil {
		return nil, err
	}
	if crd.GetKind() != "CustomResourceDefinition" {
		return nil, fmt.Errorf("generated file holds a %q, not a CustomResourceDefinition", crd.GetKind())
	}
	plural, _, _ := unstructured.NestedString(crd.Object, "spec", "names", "plural")
	crd.SetName(plural + "." + CRDGroup)
	if err := unstructured.SetNestedField(crd.Object, CRDGroup, "spec", "group"); err != nil {
		return nil, err
	}
	versions, _, err := unstructured.NestedSlice(crd.Object, "spec", "versions")
	if err != nil || len(versions) != 1 {
		return nil, fmt.Errorf("expected one version in the generated CRD (%v)", err)
	}
	v := versions[0].(map[string]any)
	v["subresources"] = map[string]any{"status": map[string]any{}}
	v["selectableFields"] = []any{map[string]any{"jsonPath": ".spec.type"}}
	return crd, unstructured.SetNestedSlice(crd.Object, versions, "spec", "versions")
}

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// InstallCRD creates crd and waits until it is Established.
func InstallCRD(ctx context.Context, dyn dynamic.Interface, crd *unstructured.Unstructured) error {
	if _, err := dyn.Resource(crdResource).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		return err
	}
	return wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		u, err := dyn.Resource(crdResource).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err != nil {
			return false, err
		}
		conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
		for _, c := range conds {
			m, _ := c.(map[string]any)
			if m["type"] == "Established" && m["status"] == "True" {
				return true, nil
			}
		}
		return false, nil
	})
}
