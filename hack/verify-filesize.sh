#!/usr/bin/env bash
# Fails when a file git tracks, or would add (untracked and not ignored), is
# larger than 1 MiB, outside pkg/generated. Binaries and data dumps belong
# in _output/, never in history. Checks the repository at $1 (default: this
# one), so hack/test-verify-filesize.sh can plant a file in a scratch repo.
set -o errexit -o nounset -o pipefail

ROOT=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)}
LIMIT=$((1024 * 1024))

cd "${ROOT}"
bad=()
while IFS= read -r -d '' f; do
    case "${f}" in
        pkg/generated/*) continue ;;
    esac
    [ -f "${f}" ] || continue # deleted in the work tree
    size=$(stat -c %s -- "${f}")
    if [ "${size}" -gt "${LIMIT}" ]; then
        bad+=("${f} (${size} bytes)")
    fi
done < <(git ls-files -z --cached --others --exclude-standard)

if [ "${#bad[@]}" -gt 0 ]; then
    echo "files over 1 MiB outside pkg/generated; keep them out of git (build outputs go in _output/):" >&2
    printf '  %s\n' "${bad[@]}" >&2
    exit 1
fi
echo "no file over 1 MiB"
