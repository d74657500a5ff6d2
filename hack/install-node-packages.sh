#!/usr/bin/env bash
# What the real node takes from Debian rather than from Go modules: runc,
# which containerd's shim runs (cgo and libseccomp, so not built here);
# iptables, which kube-proxy and the CNI portmap plugin program; the
# static busybox that kiln-images puts in the workload and SSH images; and
# the ssh client `kubectl gpu ssh --exec` runs in the tests. Installed
# only when missing, so reruns cost nothing; it needs root, as the node does.
set -o errexit -o nounset -o pipefail
missing=()
command -v runc >/dev/null || missing+=(runc)
command -v iptables >/dev/null || missing+=(iptables)
command -v ssh >/dev/null || missing+=(openssh-client)
dpkg-query -W -f='${Status}' busybox-static 2>/dev/null | grep -q "ok installed" || missing+=(busybox-static)
if [ ${#missing[@]} -eq 0 ]; then
    exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
    echo "the real node needs ${missing[*]} from Debian, and installing them needs root" >&2
    exit 1
fi
DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null ||
    { apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends "${missing[@]}" >/dev/null; }
echo "installed ${missing[*]}"
