#!/bin/bash
# test.sh: the whole test run, as CI does it (`bash .ci/run` as root in a clean clone, CI=true).
#   1. installs the build and test dependencies with apt, plus clang (for the fuzzers); skipped
#      when dpkg says all are there,
#   2. ./autogen.sh, ./configure, make -j,
#   3. make check: unit, integration and emulation tests (the emulation tests need root and
#      network namespaces, and SKIP without them),
#   4. make distcheck: the tarball builds and passes its tests out of tree.
# Prints the test-suite.log of a failing step. Exit status non-zero on any failure.
# Runs from any folder. Environment: CONFIGURE_FLAGS (extra ./configure arguments),
# SKIP_DISTCHECK=1, SKIP_APT=1.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
top=$(pwd)

PKGS=(autoconf automake libtool pkg-config make gcc libucx-dev ucx-utils libhwloc-dev hwloc
      libibverbs-dev libcmocka-dev openmpi-bin libopenmpi-dev iproute2 clang)
JOBS=$(nproc 2>/dev/null || echo 2)

section() { echo; echo "==== $* ($(date +%T))"; }
die() { echo "test.sh: FAILED: $*" >&2; exit 1; }

# Every test-suite.log below the tree whose summary is not clean (the top one, and distcheck's
# copy in strata-*/_build/).
show_logs()
{
    local log
    while IFS= read -r log; do
        if grep -qE '^# (FAIL|XPASS|ERROR): *[1-9]' "$log"; then
            section "$log"
            cat "$log"
        fi
    done < <(find "$top" -name test-suite.log 2>/dev/null)
}

if [ "${SKIP_APT:-0}" != 1 ] && command -v dpkg-query >/dev/null 2>&1; then
    missing=""
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        section "apt-get install$missing"
        [ "$(id -u)" = 0 ] || die "need root to install:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q || die "apt-get update"
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing || die "apt-get install"
    else
        section "packages: all present"
    fi
fi

section "./autogen.sh"
./autogen.sh || die "autogen.sh"
section "./configure ${CONFIGURE_FLAGS:-}"
# shellcheck disable=SC2086
./configure ${CONFIGURE_FLAGS:-} || { cat config.log | tail -n 60; die "configure"; }
section "make -j$JOBS"
make -j"$JOBS" || die "make"

section "make check"
if ! make -j"$JOBS" check; then
    show_logs
    die "make check"
fi

if [ "${SKIP_DISTCHECK:-0}" != 1 ]; then
    section "make distcheck"
    if ! make -j"$JOBS" distcheck; then
        show_logs
        die "make distcheck"
    fi
fi

# One closing line in the plain form CI reads: the totals of `make check` (distcheck ran the same
# tests again on the tarball).
count() { sed -n "s/^# $1: *//p" test-suite.log | head -n1; }
section "all tests passed"
echo "tests: $(count PASS) passed, $(count FAIL) failed, $(count SKIP) skipped"
