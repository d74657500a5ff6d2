#!/usr/bin/env bash
# Tests hack/verify-filesize.sh on scratch repositories: a planted 2 MiB
# file fails it, whether committed or only added to the work tree; the same
# file under pkg/generated, or ignored, does not.
set -o errexit -o nounset -o pipefail

CHECK=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)/verify-filesize.sh
SCRATCH=$(mktemp -d)
trap 'rm -rf "${SCRATCH}"' EXIT

fails=0
# expect NAME WANT(pass|fail) SETUP...: builds a fresh repo, runs SETUP in
# it, then the check.
expect() {
    local name=$1 want=$2
    shift 2
    local repo="${SCRATCH}/${name}"
    mkdir -p "${repo}"
    (cd "${repo}" && git init -q && git config user.email t@example.invalid && git config user.name t &&
        echo small >README && git add README && git commit -qm init && eval "$*")
    local got=pass
    "${CHECK}" "${repo}" >/dev/null 2>&1 || got=fail
    if [ "${got}" != "${want}" ]; then
        echo "FAIL ${name}: verify-filesize.sh did ${got}, want ${want}" >&2
        fails=$((fails + 1))
    else
        echo "ok   ${name}: ${got}"
    fi
}

plant='head -c $((2 * 1024 * 1024)) /dev/zero >'
expect small-files-only   pass 'true'
expect committed-2mib     fail "${plant} blob && git add blob && git commit -qm blob"
expect untracked-2mib     fail "${plant} blob"
expect exactly-1mib       pass 'head -c $((1024 * 1024)) /dev/zero > blob && git add blob'
expect generated-2mib     pass "mkdir -p pkg/generated/openapi && ${plant} pkg/generated/openapi/big.go && git add pkg"
expect ignored-2mib       pass "echo /_output/ > .gitignore && mkdir _output && ${plant} _output/bin"
expect nested-generated   fail "mkdir -p x/pkg/generated && ${plant} x/pkg/generated/big && git add x"

[ "${fails}" -eq 0 ] || exit 1
