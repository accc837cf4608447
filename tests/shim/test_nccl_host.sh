#!/bin/bash
# test_nccl_host.sh: a program written for NCCL (tests/shim/nccl_host.c: the real <nccl.h>, nccl*
# calls only) runs on strata through the shim, host buffers and stream NULL, 4 forked ranks plus
# ncclCommInitAll (what it checks: its header). Three ways, as users enable it:
#   1. compiled against nccl.h and linked with -lnccl against the shim's folder (so against
#      SONAME libnccl.so.2), run with LD_LIBRARY_PATH=that folder;
#   2. linked with -lnccl against the REAL NCCL (the CUDA prefix's libnccl.so.2), run as it is:
#      the program reports the real library mapped (the check tells them apart), then run with
#      LD_PRELOAD=.../libnccl.so.2 of the shim: it must pass;
#   3. the same binary with the shim's folder first on LD_LIBRARY_PATH.
# In every run the program proves from /proc/self/maps that exactly one libnccl.so* is mapped,
# from the shim's folder, before it calls anything. Leftover /dev/shm segments of its named
# communicator ("nccl-host") fail the test. Each run is bounded (timeout 60 s; about 1 s here).
#   test_nccl_host.sh   (CC; NCCL_SHIM_CPPFLAGS, STRATA_BUILDDIR: as test_nccl_symbols.sh)
# Exit 0 pass, 1 fail, 77 skip (no nccl.h, so no shim).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/shim_env.sh"   # build, cc, cppflags, hdr, shimdir, shim; or skip
strata_libs=$build/.libs

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ncclhost.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }
flags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -pedantic -Wno-overlength-strings $cppflags)
shm_before=$(ls /dev/shm 2>/dev/null | grep -c 'nccl-host')

# run NAME ENV... -- ARGS: one bounded run, its lines indented; fails unless status 0 and PASS
run() {
    local name=$1; shift
    local envs=()
    while [ "$1" != -- ]; do envs+=("$1"); shift; done
    shift
    env "${envs[@]}" timeout -k 5 60 "$@" >"$tmp/out" 2>"$tmp/err"; local rc=$?
    if [ "$rc" = 0 ] && grep -q '^nccl_host: PASS' "$tmp/out"; then
        echo "ok: $name"
        grep '^nccl_host: libnccl served' "$tmp/out" | sed 's/^/    /'
    else
        fail "$name: status $rc"
        sed 's/^/    /' "$tmp/out"; grep -v ' strata WARN \|^strata nccl shim: ' "$tmp/err" | tail -15 | sed 's/^/    /'
    fi
}

# 1. linked against the shim's folder
if ! $cc "${flags[@]}" -o "$tmp/host_shim" "$here/nccl_host.c" -L"$shimdir" -lnccl 2>"$tmp/cerr"; then
    fail "nccl_host.c does not compile and link against $hdr and the shim:"; sed 's/^/    /' "$tmp/cerr"
else
    needed=$(readelf -d "$tmp/host_shim" | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')
    echo "ok: nccl_host.c compiled against $hdr, linked -lnccl against the shim: NEEDED $needed"
    case " $needed" in *" libnccl.so.2 "*) ;; *) fail "the program does not need libnccl.so.2" ;; esac
    case $needed in *strata*|*cudart*) fail "the program needs more than NCCL and libc: $needed" ;; esac
    run "linked against the shim, LD_LIBRARY_PATH=shim" LD_LIBRARY_PATH="$shimdir:$strata_libs" -- \
        "$tmp/host_shim" "$shimdir" 4
    grep -q '^strata nccl shim: ncclCommShrink is not supported' "$tmp/err" ||
        fail "no stderr line for ncclCommShrink"
    echo "    stderr: $(grep -m1 '^strata nccl shim: ncclCommShrink' "$tmp/err")"
fi

# 2./3. linked against the real NCCL, redirected
real=$(ls "$(dirname "$hdr")"/../lib64/libnccl.so "$(dirname "$hdr")"/../lib/libnccl.so 2>/dev/null | head -1)
if [ -z "$real" ]; then
    echo "note: no real libnccl.so beside $hdr: the LD_PRELOAD run uses the program linked against the shim"
    bin=$tmp/host_shim
else
    realdir=$(dirname "$(readlink -f "$real")")
    if ! $cc "${flags[@]}" -o "$tmp/host_real" "$here/nccl_host.c" -L"$realdir" -lnccl 2>"$tmp/cerr"; then
        fail "nccl_host.c does not link against the real $real:"; sed 's/^/    /' "$tmp/cerr"
        bin=$tmp/host_shim
    else
        bin=$tmp/host_real
        which=$(LD_LIBRARY_PATH="$realdir" timeout 30 "$bin" --which 2>&1 | head -1)
        case $which in
            "$shimdir"/*|none|"") fail "linked against the real NCCL, run plainly, it maps '$which'" ;;
            *) echo "ok: linked against the real NCCL ($realdir), run without the shim it maps $which (the maps check tells them apart)" ;;
        esac
    fi
fi
run "LD_PRELOAD=shim/libnccl.so.2 ($(basename "$bin"))" LD_PRELOAD="$shimdir/libnccl.so.2" \
    LD_LIBRARY_PATH="${realdir:+$realdir:}$strata_libs" -- "$bin" "$shimdir" 4
run "LD_LIBRARY_PATH=shim first ($(basename "$bin"))" \
    LD_LIBRARY_PATH="$shimdir:${realdir:+$realdir:}$strata_libs" -- "$bin" "$shimdir" 3

shm_after=$(ls /dev/shm 2>/dev/null | grep -c 'nccl-host')
[ "$shm_after" -le "$shm_before" ] || fail "/dev/shm segments left behind: $(ls /dev/shm | grep nccl-host | tr '\n' ' ')"

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
