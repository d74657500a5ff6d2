#!/usr/bin/env bash
# Runs the stages of `make test` one after another, each its own make, and
# prints at the end how long each took, after a failure too: what a slow
# or cold run spent its time on (docs/reliability.md keeps the figures).
set -o nounset -o pipefail
make=${MAKE:-make}
names=()
secs=()
rc=0
for stage in "$@"; do
    start=$(date +%s)
    ${make} "${stage}"
    rc=$?
    names+=("${stage}")
    secs+=($(($(date +%s) - start)))
    [ "${rc}" -eq 0 ] || break
done
total=0
echo
echo "make test, by stage:"
for i in "${!names[@]}"; do
    printf '  %-16s %6d s\n' "${names[$i]}" "${secs[$i]}"
    total=$((total + secs[i]))
done
printf '  %-16s %6d s (%d min)\n' total "${total}" $(((total + 30) / 60))
if [ "${rc}" -ne 0 ]; then
    echo "make test failed in ${names[-1]}"
fi
exit "${rc}"
