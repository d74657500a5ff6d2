package kubectlgpu

import (
	"fmt"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// explain turns an API error about one object into one that says what to
// do. Admission's refusals (budget, hold, access) already do, and pass
// through as the server wrote them.
func explain(err error, kind, name, namespace string) error {
	if err == nil {
		return nil
	}
	plural := kind + "s"
	switch {
	case apierrors.IsNotFound(err) && namespace == "":
		return fmt.Errorf("%s %q not found; list them with kubectl get %s", kind, name, plural)
	case apierrors.IsNotFound(err):
		return fmt.Errorf("%s %q not found in namespace %q; list them with kubectl get %s -n %s", kind, name, namespace, plural, namespace)
	case apierrors.IsUnauthorized(err):
		return fmt.Errorf("%w; check the credentials of your kubeconfig (kubectl config view --minify)", err)
	}
	return err
}
