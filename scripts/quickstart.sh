#!/bin/bash
# quickstart.sh: from a fresh Debian 12 machine (as root) to a first strata benchmark.
#   1. installs the build dependencies with apt (skipped when dpkg says all are there),
#   2. ./autogen.sh, ./configure, make -j (each only when needed: reruns are fast),
#   3. collbench all_reduce, 8 ranks on 2 emulated nodes, 8 B to 64 MiB: every node is a network
#      namespace with its own hostname and a veth link, so inter-node bytes cross a real TCP
#      path (tests/emulation/run_collbench.sh). Without network namespaces (not root, a
#      restricted container) it falls back to collbench's own `-np 8 --nodes 2` (one namespace,
#      nodes told apart by STRATA_HOSTID).
# Exit status: collbench's (0 all results right); 1 also when the run or the byte check fails.
# Runs from any folder. Extra arguments go to collbench (e.g. -n 5 -w 1).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

PKGS=(autoconf automake libtool pkg-config make gcc libucx-dev ucx-utils libhwloc-dev hwloc libjansson-dev
      libibverbs-dev libcmocka-dev openmpi-bin libopenmpi-dev iproute2 iputils-ping)

# Packages of the list that dpkg does not report as installed.
missing_pkgs()
{
    local p
    for p in "$@"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || echo "$p"
    done
}

install_pkgs()
{
    local missing
    if ! command -v dpkg-query >/dev/null 2>&1; then
        echo "quickstart: no dpkg here (not Debian?); install by hand: ${*}" >&2
        return 0
    fi
    missing=$(missing_pkgs "$@")
    if [ -z "$missing" ]; then
        echo "== packages: all present"
        return 0
    fi
    echo "== packages: installing" $missing
    if [ "$(id -u)" != 0 ]; then
        echo "quickstart: need root for: apt-get install" $missing >&2
        return 1
    fi
    export DEBIAN_FRONTEND=noninteractive
    apt-get update -q
    # shellcheck disable=SC2086
    apt-get install -y -q --no-install-recommends $missing
}

install_pkgs "${PKGS[@]}"

# Regenerate only when configure is missing or older than its inputs.
if [ ! -x configure ] || [ configure.ac -nt configure ] ||
   [ -n "$(find m4 -name 'strata_*.m4' -newer configure 2>/dev/null)" ]; then
    echo "== ./autogen.sh"
    ./autogen.sh
fi
if [ ! -f Makefile ] || [ ! -f config.status ]; then
    echo "== ./configure"
    ./configure
fi
echo "== make -j$(nproc)"
make -j"$(nproc)"

if [ $# -eq 0 ]; then
    set -- -b 8 -e 64M -f 2
fi
echo "== collbench all_reduce: 8 ranks on 2 emulated nodes"
rc=0
tests/emulation/run_collbench.sh --collbench ./collbench --nodes 2 --np 8 -- all_reduce "$@" || rc=$?
if [ "$rc" = 77 ]; then
    echo "== no network namespaces here; collbench forks the 8 ranks as 2 nodes itself"
    rc=0
    ./collbench -np 8 --nodes 2 all_reduce "$@" || rc=$?
fi
exit "$rc"
