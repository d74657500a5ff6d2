#!/usr/bin/env bash
# The main module must build without k8s.io/kubernetes and controller-runtime;
# only test/ may depend on the former.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=$(go list -deps -test ./... | grep -E '^(k8s\.io/kubernetes|sigs\.k8s\.io/controller-runtime)(/|$)' || true)
if [ -n "${bad}" ]; then
    echo "forbidden dependencies of kiln.dev/kiln:" >&2
    echo "${bad}" >&2
    exit 1
fi
echo "no forbidden dependencies"

# pkg/domain holds the rules every side shares; it depends on none of them,
# and no controller loop depends on another (each shares through pkg/domain).
kiln=kiln.dev/kiln/pkg
bad=$(go list -deps ./pkg/domain/... | grep -E "^${kiln}/(admission|registry|reconcile|deviceplugin|apiserver|kubectlgpu)(/|$)" || true)
if [ -n "${bad}" ]; then
    echo "pkg/domain must not import these:" >&2
    echo "${bad}" >&2
    exit 1
fi
for loop in $(go list ./pkg/reconcile/... | grep -v -x -E "${kiln}/reconcile/(queue|reconciletest)"); do
    # -test lists "pkg [pkg.test]" variants and the test main; keep names.
    bad=$(go list -deps -test "${loop}" | sed 's/ .*//; /\.test$/d' |
        grep -E "^${kiln}/reconcile/" | grep -v -x -E "${loop}(_test)?|${kiln}/reconcile/(queue|reconciletest)" || true)
    if [ -n "${bad}" ]; then
        echo "${loop} imports another loop:" >&2
        echo "${bad}" >&2
        exit 1
    fi
done
echo "pkg/domain imports no side, and no loop imports another"
