#!/usr/bin/env bash
# Fails when generated code is stale: regenerates into a scratch copy of the
# tree and compares it with the working tree.
set -o errexit -o nounset -o pipefail

ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
SCRATCH=$(mktemp -d)
trap 'rm -rf "${SCRATCH}"' EXIT

tar -C "${ROOT}" --exclude=./_output --exclude=./.git --exclude=./test -cf - . | tar -C "${SCRATCH}" -xf -
mkdir -p "${SCRATCH}/_output"
# Reuse the generator binaries already built.
if [ -d "${ROOT}/_output/codegen-bin" ]; then
    cp -a "${ROOT}/_output/codegen-bin" "${SCRATCH}/_output/"
fi
"${SCRATCH}/hack/update-codegen.sh" >/dev/null

status=0
for dir in pkg/apis pkg/generated hack/api-rule-violations.list; do
    if ! diff -Nru "${ROOT}/${dir}" "${SCRATCH}/${dir}" >"${SCRATCH}/diff.txt"; then
        echo "generated code under ${dir} is stale; run 'make generate':" >&2
        head -50 "${SCRATCH}/diff.txt" >&2
        status=1
    fi
done
[ "${status}" -eq 0 ] && echo "generated code is up to date"
exit "${status}"
