package v1alpha1

import (
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
)

// SelectableFields lists, per kind, the fields a field selector may name
// beyond metadata.name and metadata.namespace. The registry indexes the
// same fields.
var SelectableFields = map[string][]string{
	"Instance":     {"spec.type", "spec.nodeName", "spec.claimName", "status.phase", "status.nodeName"},
	"Claim":        {"spec.type", "status.phase", "status.nodeName"},
	"InstanceType": {"status.phase"},
	"Budget":       nil,
	"NodeDevices":  nil,
}

func addFieldLabelConversionFuncs(scheme *runtime.Scheme) error {
	for kind, fields := range SelectableFields {
		allowed := map[string]bool{"metadata.name": true, "metadata.namespace": true}
		for _, f := range fields {
			allowed[f] = true
		}
		err := scheme.AddFieldLabelConversionFunc(SchemeGroupVersion.WithKind(kind),
			func(label, value string) (string, string, error) {
				if !allowed[label] {
					return "", "", fmt.Errorf("field label %q not supported for %s", label, kind)
				}
				return label, value, nil
			})
		if err != nil {
			return err
		}
	}
	return nil
}
