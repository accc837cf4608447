#!/bin/bash
# test_verbs_fallback.sh: STRATA_NET=auto where verbs cannot run. The library loads libibverbs
# only at run time, so: with STRATA_IBVERBS_LIB pointing nowhere (a host without rdma-core) and,
# when the stand-in is built, with every HCA port of the stand-in DOWN, collbench's all-reduce
# runs over UCX exactly and says at INFO why verbs was not used; with STRATA_NET=verbs the same
# hosts fail init, naming the cause, within seconds. Also: with the stand-in's ports up, auto
# takes verbs.
#   test_verbs_fallback.sh        (COLLBENCH: the built collbench, default the tree's)
# Exit 0 pass, 1 fail, 77 skip (collbench not built), 99 setup error.
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
collbench=${COLLBENCH:-$top/collbench}
[ -x "$collbench" ] || { echo "SKIP: collbench is not built ($collbench)"; exit 77; }
build=$(cd "$(dirname "$collbench")" && pwd)
# shellcheck source=../fakeverbs/standin.sh
. "$here/../fakeverbs/standin.sh"
standin_locate "$build" 1
have_standin=$?
lib=$standin_lib
tmp=$(mktemp -d "${TMPDIR:-/tmp}/verbsfb.XXXXXX") || exit 99
fabric="vfb$$"
trap 'rm -rf "$tmp"; standin_clean "$fabric"' EXIT
export STRATA_SOCKET_IFNAME=lo STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=VERBS,INIT
unset STRATA_NET STRATA_IBVERBS_LIB
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# run NAME ENV...: collbench all-reduce, 2 ranks, checked, output in $tmp/NAME.log
run() {
    local name=$1; shift
    env "$@" timeout 120 "$collbench" all_reduce -np 2 -b 8 -e 64K -f 8 -n 2 -w 1 -c 1 \
        >"$tmp/$name.log" 2>&1
}

# 1. a host without rdma-core: auto falls back to UCX, saying why at INFO
if run nolib STRATA_IBVERBS_LIB=/nonexistent/libibverbs.so.1; then
    grep -q 'via ucx' "$tmp/nolib.log" || fail "nolib: the ranks did not connect via ucx"
    grep -q 'verbs not used: cannot load /nonexistent/libibverbs.so.1' "$tmp/nolib.log" ||
        fail "nolib: no INFO line saying why verbs was not used"
    grep -Eq ' 65536 .* 0 *$' "$tmp/nolib.log" || fail "nolib: no checked 64 KiB row (#wrong 0)"
    echo "ok: no libibverbs -> ucx: $(grep -m1 'verbs not used' "$tmp/nolib.log" | sed 's/.*INFO //')"
else
    fail "nolib: collbench failed"; tail -n 5 "$tmp/nolib.log"
fi
# 2. STRATA_NET=verbs there fails init, naming the library
start=$SECONDS
if run nolib_verbs STRATA_NET=verbs STRATA_IBVERBS_LIB=/nonexistent/libibverbs.so.1; then
    fail "nolib_verbs: init succeeded without libibverbs"
else
    grep -q "no usable net transport (STRATA_NET 'verbs'): verbs: cannot load /nonexistent" \
        "$tmp/nolib_verbs.log" || { fail "nolib_verbs: the error does not name the library";
                                    tail -n 3 "$tmp/nolib_verbs.log"; }
    [ $((SECONDS - start)) -lt 30 ] || fail "nolib_verbs: took $((SECONDS - start)) s to fail"
    echo "ok: STRATA_NET=verbs without libibverbs fails naming it"
fi

if [ "$have_standin" = 0 ]; then
    # 3. HCAs whose ports are all DOWN: auto falls back, naming the ports
    if run down STRATA_IBVERBS_LIB="$lib" FAKEVERBS_FABRIC="$fabric" \
           FAKEVERBS_PORT_DOWN=fake0,fake1; then
        grep -q 'via ucx' "$tmp/down.log" || fail "down: the ranks did not connect via ucx"
        grep -q 'verbs not used: no active HCA port.*fake0:1 is DOWN' "$tmp/down.log" ||
            fail "down: no INFO line naming the DOWN ports"
        echo "ok: ports down -> ucx: $(grep -m1 'verbs not used' "$tmp/down.log" | sed 's/.*INFO //')"
    else
        fail "down: collbench failed"; tail -n 5 "$tmp/down.log"
    fi
    # 4. ports up: auto takes verbs
    if run up STRATA_IBVERBS_LIB="$lib" FAKEVERBS_FABRIC="$fabric"; then
        grep -q 'via verbs' "$tmp/up.log" || fail "up: auto did not take verbs"
        grep -q 'verbs on fake0:1' "$tmp/up.log" || fail "up: no INFO line naming the port"
        echo "ok: active ports -> verbs"
    else
        fail "up: collbench failed"; tail -n 5 "$tmp/up.log"
    fi
else
    echo "(the stand-in is not built or cannot run here: cases 3 and 4 not run)"
fi
[ "$fails" = 0 ] || exit 1
exit 0
