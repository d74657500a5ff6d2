#!/usr/bin/env bash
# Runs the stages of `make test`, each its own make, and prints at the end
# how long each took, after a failure too: what a slow or cold run spent
# its time on (docs/reliability.md keeps the figures).
#
# A stage written "+name" runs in the background instead: the "+" stages
# run one after another, at the lowest CPU and I/O priority, from where
# the first of them stands in the list, beside the stages after it. They
# take what the foreground leaves idle: the end-to-end stages spend most
# of their time waiting on timers and on the real node, while the checks
# that only compile and analyse (staticcheck, the fuzzers' instrumented
# build) kept both cores busy for minutes on a cold cache. Their output
# goes to TEST_STAGE_LOGS and is printed once they end.
set -o nounset -o pipefail
make=${MAKE:-make}
logs=${TEST_STAGE_LOGS:-_output/test-stages}
names=()
secs=()
busy=()
failed=()
background=()
bgpid=
begin=$(date +%s)

# cpu_now prints the jiffies all cores spent, and those they spent idle.
cpu_now() {
    local _ user nice system idle iowait irq softirq steal
    read -r _ user nice system idle iowait irq softirq steal _ </proc/stat
    echo "$((user + nice + system + idle + iowait + irq + softirq + steal)) $((idle + iowait))"
}

# run_background runs its stages one after another and writes each one's
# exit code and seconds to $logs/<stage>.result.
run_background() {
    local stage start rc
    for stage in "$@"; do
        start=$(date +%s)
        nice -n 19 ionice -c 3 ${make} "${stage}" >"${logs}/${stage}.log" 2>&1
        rc=$?
        echo "${rc} $(($(date +%s) - start))" >"${logs}/${stage}.result"
    done
}

start_background() {
    mkdir -p "${logs}"
    rm -f "${logs}"/*.result
    echo "make test: ${background[*]} run in the background from here, at idle priority; their output: ${logs}/"
    run_background "${background[@]}" &
    bgpid=$!
}

for stage in "$@"; do
    [[ ${stage} == +* ]] && background+=("${stage#+}")
done
for stage in "$@"; do
    if [[ ${stage} == +* ]]; then
        [ -n "${bgpid}" ] || start_background
        continue
    fi
    start=$(date +%s)
    read -r cpu0 idle0 < <(cpu_now)
    ${make} "${stage}"
    rc=$?
    read -r cpu1 idle1 < <(cpu_now)
    names+=("${stage}")
    secs+=($(($(date +%s) - start)))
    busy+=($((cpu1 > cpu0 ? 100 * (cpu1 - cpu0 - idle1 + idle0) / (cpu1 - cpu0) : 0)))
    if [ "${rc}" -ne 0 ]; then
        failed+=("${stage}")
        break
    fi
done

bgnames=()
bgsecs=()
if [ -n "${bgpid}" ]; then
    echo
    echo "make test: waiting for ${background[*]}"
    wait "${bgpid}"
    for stage in "${background[@]}"; do
        echo
        echo "=== ${stage} (background), ${logs}/${stage}.log:"
        cat "${logs}/${stage}.log" 2>/dev/null
        read -r rc s <"${logs}/${stage}.result" 2>/dev/null || { rc=1; s=0; }
        bgnames+=("${stage}")
        bgsecs+=("${s}")
        [ "${rc}" -eq 0 ] || failed+=("${stage}")
    done
fi

echo
echo "make test, by stage (and how busy the cores were, background included):"
for i in "${!names[@]}"; do
    printf '  %-16s %6d s  %3d%% busy\n' "${names[$i]}" "${secs[$i]}" "${busy[$i]}"
done
if [ ${#bgnames[@]} -gt 0 ]; then
    echo "in the background, one after another, beside the stages above:"
    for i in "${!bgnames[@]}"; do
        printf '  %-16s %6d s\n' "${bgnames[$i]}" "${bgsecs[$i]}"
    done
fi
if [ ${#background[@]} -gt 0 ] && [ -z "${bgpid}" ]; then
    echo "  not run, as a stage before them failed: ${background[*]}"
fi
total=$(($(date +%s) - begin))
printf '  %-16s %6d s (%d min)\n' total "${total}" $(((total + 30) / 60))
if [ ${#failed[@]} -ne 0 ]; then
    echo "make test failed in ${failed[*]}"
    exit 1
fi
