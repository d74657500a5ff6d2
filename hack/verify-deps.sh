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
