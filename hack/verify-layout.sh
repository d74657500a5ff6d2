#!/usr/bin/env bash
# The repository layout in docs/architecture.md names every directory under
# cmd/ and pkg/ that holds Go code, and names no directory that is not there.
#
# How it matches:
# - The table is the first fenced block (a line starting with ```) after
#   the heading "## Repository layout", up to the next such line. Blank
#   lines in it are skipped; every other line is a path, then spaces, then
#   what the directory holds. Only the path, the first field, is read.
# - A path is relative to the repository root and ends in "/" or "/...".
#   "dir/" names dir alone. "dir/..." names dir and every directory beneath
#   it; the layout uses it only for trees a tool writes (pkg/generated/...),
#   where one line says more than twenty would.
# - A directory holds Go code when a .go file sits directly in it. As with
#   the go tool, testdata/ and directories whose names start with "." or "_"
#   are skipped.
# - Each directory under cmd/ or pkg/ that holds Go code must be named by a
#   "dir/" line of its own or lie under a "dir/..." line.
# - Each "dir/" line under cmd/ or pkg/ must name a directory that holds Go
#   code; every other line (a "dir/..." line, or test/, hack/, docs/ and the
#   like, which are listed for readers but not required) must name a
#   directory that exists. No path may be listed twice.
set -o errexit -o nounset -o pipefail -o noglob
cd "$(dirname "${BASH_SOURCE[0]}")/.."

doc=docs/architecture.md
entries=$(awk '
    /^## Repository layout[[:space:]]*$/ { section = 1; next }
    section && /^```/ { if (block) exit; block = 1; next }
    block && NF { print $1 }
' "${doc}")
if [ -z "${entries}" ]; then
    echo "${doc}: no fenced block after \"## Repository layout\"" >&2
    exit 1
fi

godirs=$(find cmd pkg -type d \( -name testdata -o -name '.*' -o -name '_*' \) -prune \
    -o -type f -name '*.go' -printf '%h\n' | sort -u)

failed=0
fail() {
    echo "$*" >&2
    failed=1
}

# Every entry is well formed, listed once, and names something that is there.
dups=$(sort <<<"${entries}" | uniq -d)
for e in ${dups}; do
    fail "${doc}: ${e} is listed more than once in the layout"
done
for e in ${entries}; do
    case "${e}" in
    /* | ./* | ../* | */./* | */../*) fail "${doc}: layout path ${e} must be relative to the repository root" ;;
    */...)
        [ -d "${e%/...}" ] || fail "${doc}: the layout lists ${e}, but ${e%/...}/ does not exist"
        ;;
    cmd/*/ | pkg/*/)
        grep -q -x -F "${e%/}" <<<"${godirs}" ||
            fail "${doc}: the layout lists ${e}, but it does not exist or holds no .go files"
        ;;
    */)
        [ -d "${e%/}" ] || fail "${doc}: the layout lists ${e}, but it does not exist"
        ;;
    *) fail "${doc}: layout path ${e} must end in / or /..." ;;
    esac
done

# Every directory of Go code under cmd/ and pkg/ is listed.
trees=$(grep '/\.\.\.$' <<<"${entries}" | sed 's#/\.\.\.$##' || true)
for d in ${godirs}; do
    grep -q -x -F "${d}/" <<<"${entries}" && continue
    covered=0
    for t in ${trees}; do
        case "${d}" in
        "${t}" | "${t}"/*) covered=1 ;;
        esac
    done
    [ "${covered}" = 1 ] || fail "${doc}: ${d}/ holds Go code but is missing from the layout"
done

if [ "${failed}" != 0 ]; then
    exit 1
fi
echo "the layout in ${doc} lists every Go directory under cmd/ and pkg/, and only directories that exist"
