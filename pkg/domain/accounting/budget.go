package accounting

import (
	"kiln.dev/kiln/pkg/apis/gpu"
)

// Beyond is what c holds beyond base, by key: each key at which c is the
// larger, by the difference. A key base lacks counts from zero, so
// Beyond(c, nil) is c without its zeros. It is what a write newly charges
// (base the object's charge before the write), and what a charge in flight
// adds to its object as stored.
func Beyond(c, base gpu.BudgetResourceList) gpu.BudgetResourceList {
	out := gpu.BudgetResourceList{}
	for k, q := range c {
		d := q.DeepCopy()
		if b, ok := base[k]; ok {
			d.Sub(b)
		}
		if d.Sign() > 0 {
			out[k] = d
		}
	}
	return out
}

// Count adds to used what d holds of each key hard limits, the only keys a
// Budget counts, and returns used, made if it was nil and d adds to it.
func Count(used, d, hard gpu.BudgetResourceList) gpu.BudgetResourceList {
	for k := range hard {
		q, ok := d[k]
		if !ok {
			continue
		}
		if used == nil {
			used = gpu.BudgetResourceList{}
		}
		u := used[k]
		u.Add(q)
		used[k] = u
	}
	return used
}
