#!/usr/bin/env bash
# Runs staticcheck (its default checks, which include unused code) over the
# main module and the test/ module. Generated code is left out: it is
# regenerated, not edited. STATICCHECK is the binary the Makefile builds;
# CGO_PKGS, the packages it builds with cgo.
set -o errexit -o nounset -o pipefail
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
STATICCHECK=${STATICCHECK:-${ROOT}/_output/bin/staticcheck}

cd "${ROOT}"
"${STATICCHECK}" -tags integration $(go list -tags integration ./... | grep -v "^kiln.dev/kiln/pkg/generated/")
# The files only a cgo build compiles (NVML's bindings), when the run above
# had cgo off.
if [ "$(go env CGO_ENABLED)" != 1 ] && [ -n "${CGO_PKGS:-}" ]; then
    CGO_ENABLED=1 "${STATICCHECK}" ${CGO_PKGS}
fi
cd test
"${STATICCHECK}" ./...
echo "staticcheck: clean"
