#!/usr/bin/env bash
# Fails when any Go file is not gofmt'ed.
set -o errexit -o nounset -o pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."
bad=$(gofmt -l $(git ls-files --cached --others --exclude-standard '*.go') 2>&1 || true)
if [ -n "${bad}" ]; then
    echo "not gofmt'ed (run gofmt -w):" >&2
    echo "${bad}" >&2
    exit 1
fi
