package kubectlgpu

import (
	"fmt"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/resource"

	"kiln.dev/kiln/pkg/apis/gpu"
	"kiln.dev/kiln/pkg/apis/gpu/v1alpha1"
)

// room is what one Budget leaves for a charge.
type room struct {
	budget string
	// fits is how many times the charge fits; -1 when the Budget limits
	// none of its keys.
	fits int64
	// key is the key that limits fits.
	key string
}

// hardOf is what the Budget enforces: status.hard once the server has
// written it, spec.hard until then.
func hardOf(b *v1alpha1.Budget) v1alpha1.BudgetResourceList {
	if len(b.Status.Hard) > 0 {
		return b.Status.Hard
	}
	return b.Spec.Hard
}

// roomFor says how many times charge fits in what b leaves, by the keys
// both have.
func roomFor(b *v1alpha1.Budget, charge gpu.BudgetResourceList) room {
	r := room{budget: b.Name, fits: -1}
	for _, key := range sortedKeys(hardOf(b)) {
		ask, ok := charge[gpu.BudgetResourceName(key)]
		if !ok || ask.Sign() <= 0 {
			continue
		}
		hard := hardOf(b)[v1alpha1.BudgetResourceName(key)]
		used := b.Status.Used[v1alpha1.BudgetResourceName(key)]
		left := hard.MilliValue() - used.MilliValue()
		n := int64(0)
		if left > 0 {
			n = left / ask.MilliValue()
		}
		if r.fits < 0 || n < r.fits {
			r.fits, r.key = n, key
		}
	}
	return r
}

// budgetLine is a Budget's use of the keys that matter to a type.
func budgetLine(b *v1alpha1.Budget, typ string) string {
	var parts []string
	for _, key := range sortedKeys(hardOf(b)) {
		if !relevantKey(key, typ) {
			continue
		}
		hard := hardOf(b)[v1alpha1.BudgetResourceName(key)]
		used := b.Status.Used[v1alpha1.BudgetResourceName(key)]
		left := hard.DeepCopy()
		left.Sub(used)
		if left.Sign() < 0 {
			left = resource.Quantity{}
		}
		parts = append(parts, fmt.Sprintf("%s %s of %s used, %s left", key, used.String(), hard.String(), left.String()))
	}
	if len(parts) == 0 {
		return fmt.Sprintf("budget/%s: limits nothing %s uses", b.Name, typ)
	}
	return fmt.Sprintf("budget/%s: %s", b.Name, strings.Join(parts, "; "))
}

// relevantKey says whether a Budget key charges Instances of typ.
func relevantKey(key, typ string) bool {
	switch gpu.BudgetResourceName(key) {
	case gpu.BudgetAccelerators, gpu.BudgetAcceleratorMemory, gpu.BudgetInstances:
		return true
	}
	return key == gpu.BudgetAcceleratorsPerTypePrefix+typ
}

func sortedKeys(l v1alpha1.BudgetResourceList) []string {
	keys := make([]string, 0, len(l))
	for k := range l {
		keys = append(keys, string(k))
	}
	sort.Strings(keys)
	return keys
}
