#!/bin/bash
# test_collbench_args.sh: collbench's command line. Bad values must exit 2 with one line on stderr
# and nothing on stdout, before any rank starts; -A must reach STRATA_ALGO (over an inherited
# value); short runs with --phases, --mem-alloc and --device must print what README says.
#   test_collbench_args.sh [--collbench P]     (default: $COLLBENCH, ./collbench, the tree's top)
# Exit 0 pass, 1 fail, 99 no collbench.
set -u
here=$(cd "$(dirname "$0")" && pwd)
# shellcheck source=../emulation/emunet.sh
. "$here/../emulation/emunet.sh"
collbench=${COLLBENCH:-}
[ "${1:-}" = --collbench ] && collbench=$2
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../../collbench"; do [ -x "$c" ] && { collbench=$c; break; }; done
fi
[ -n "$collbench" ] && [ -x "$collbench" ] || { echo "collbench not found" >&2; exit 99; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cbargs.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# bad ARGS...: exit 2, exactly one stderr line matching $want (set before the call), empty stdout
bad() {
    local rc lines
    timeout 20 "$collbench" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    lines=$(wc -l <"$tmp/err")
    if [ "$rc" != 2 ] || [ "$lines" != 1 ] || [ -s "$tmp/out" ] || ! grep -q -e "$want" "$tmp/err"; then
        fail "collbench $* -> rc $rc, $lines stderr line(s), want 2 and 1 line matching '$want':"
        sed 's/^/    /' "$tmp/err" | head -5
    else
        echo "ok: collbench $* -> $(cat "$tmp/err")"
    fi
}

# good NAME PATTERN... ARGS: exit 0, every pattern (grep -E) found in stdout
good() {
    local name=$1 rc p; shift
    local -a pats=()
    while [ "$1" != -- ]; do pats+=("$1"); shift; done; shift
    timeout 120 "$collbench" "$@" >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
    [ "$rc" = 0 ] || { fail "$name: collbench $* -> rc $rc"; sed 's/^/    /' "$tmp/err" | tail -5; return; }
    for p in "${pats[@]}"; do
        grep -q -E -e "$p" "$tmp/out" || fail "$name: no line matching '$p' in the output of collbench $*"
    done
    echo "ok: $name"
}

# A libtool wrapper relinks on first use; do that once, quietly.
timeout 60 "$collbench" --help >/dev/null 2>&1

good "--help documents the strata options" '^  -A,--algo <algo> +ring hier small auto' \
    '^      --phases ' '^      --mem-alloc ' '^      --device <host\|sim\|cuda>' -- --help

# model: no rank; its own options (tests/unit/test_model checks every figure)
good "--help documents model" '^ +[^ ]+ model \[--preset seed\]' -- --help
good "model --preset seed: the texts' figures, then the faithful model" \
    '^gradient +28\.0 GB$' 'reduced 110x$' '^# Faithful model' -- model --preset seed
want="model: invalid preset (seed) 'x'"; bad model --preset x
want="model: invalid option '--bogus'";  bad model --bogus
want="model: --profile needs --compare"; bad model --profile p.json

# -A: unknown names, before any rank starts (-np 2 would start ranks otherwise)
want="invalid algorithm (ring, hier, small or auto) 'tree'"; bad -np 2 -A tree
want="invalid algorithm (ring, hier, small or auto) 'tree'"; bad -np 2 --algo=tree
want="invalid algorithm (ring, hier, small or auto) ''";     bad -np 2 -A ''
want="invalid algorithm (ring, hier, small or auto) 'ring,hier'"; bad -np 2 -A ring,hier
STRATA_ALGO=ring want="invalid algorithm" bad -np 2 -A bogus
want="invalid local_register (0 or 1) '2'"; bad -np 2 -R 2
# the existing options, checked the same way
want="invalid datatype 'float128'";  bad -np 2 -d float128
want="invalid op 'xor'";             bad -np 2 -o xor
want="invalid check (0 or 1) '2'";   bad -np 2 -c 2
want="invalid collective 'allreduce2'"; bad -np 2 allreduce2
want="invalid minbytes '-5'";        bad -np 2 -b -5
want="minbytes 1048576 is larger than maxbytes 1024"; bad -np 2 -b 1M -e 1k

# the all-to-alls, gather and scatter: --skew before any rank starts, then a checked run of each
good "--help lists the new collectives and --skew" '^  COLL: .* alltoall alltoallv$' \
    '^ +gather scatter all ' '^      --skew <F> ' -- --help
want="invalid skew (a number from 1 to the rank count) '0.5'"; bad -np 2 alltoallv --skew 0.5
want="invalid skew (a number from 1 to the rank count) 'nan'"; bad -np 2 alltoallv --skew nan
want="invalid skew (a number from 1 to the rank count) '2x'";  bad -np 2 alltoallv --skew 2x
want="--skew applies to alltoallv only"; bad -np 2 alltoall --skew 2
good "alltoall, alltoallv --skew 3, gather, scatter -c 1" \
    '^# Collective test starting: alltoall_perf$' '^# Collective test starting: alltoallv_perf$' \
    '^# Collective test starting: gather_perf$' '^# Collective test starting: scatter_perf$' \
    '^# alltoallv load: --skew 3: ' \
    '^ +4096 +256 +float +-1 .* 0 +N/A +N/A +N/A +N/A$' \
    '^ +4096 +256 +float +2 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0 +[0-9.]+ +[0-9.]+ +[0-9.]+ +0$' -- \
    -np 4 --nodes 2 alltoall,alltoallv,gather,scatter --skew 3 -r 2 -b 64 -e 4k -f 64 -n 2 -w 1 -c 1
if [ "$(grep -c '^# Out of bounds values : 0 OK$' "$tmp/out")" = 4 ]; then
    echo "ok: #wrong 0 in all four"
else
    fail "the four new collectives: want '# Out of bounds values : 0 OK' four times"
    grep '^# Out of bounds' "$tmp/out" | sed 's/^/    /'
fi
timeout 60 "$collbench" -np 2 alltoallv --skew 3 -b 8 -e 64 -n 1 -w 0 >"$tmp/out" 2>"$tmp/err" </dev/null
rc=$?
if [ "$rc" = 2 ] && [ ! -s "$tmp/out" ] && grep -q -- "--skew 3 is more than the 2 ranks" "$tmp/err"; then
    echo "ok: --skew above the rank count -> status 2: $(head -1 "$tmp/err")"
else
    fail "--skew 3 on 2 ranks -> rc $rc, want 2 with a line saying it is more than the 2 ranks"
    sed 's/^/    /' "$tmp/err" | head -4
fi

# -A reaches STRATA_ALGO (strata prints its parameters as it read them), over the environment
good "-A sets STRATA_ALGO" '^STRATA_ALGO=hier$' -- -A HIER --print-config
STRATA_ALGO=small good "-A overrides an inherited STRATA_ALGO" '^STRATA_ALGO=ring$' -- \
    -A ring --print-config
STRATA_ALGO=small good "an inherited STRATA_ALGO stays without -A" '^STRATA_ALGO=small$' -- \
    --print-config

# short runs: the header, the phase lines, strataMemAlloc'd buffers (2 emulated nodes)
good "ring --phases --mem-alloc" '^# Algorithm: ring \(STRATA_ALGO, set by -A\)$' \
    '^# Buffers: strataMemAlloc' '^#  out-of-place ring: total +[0-9.]+ us$' \
    '^#      in-place ring: total +[0-9.]+ us$' -- \
    -np 4 --nodes 2 -A ring --phases --mem-alloc -b 1k -e 64k -f 8 -n 2 -w 1
good "hier --phases" '^# Algorithm: hier' \
    '^#  out-of-place hier: intra-RS.* us .* GB/s \| inter-AR.* GB/s busbw \| intra-AG.* \| total' -- \
    -np 4 --nodes 2 -A hier --phases -b 1M -e 1M -n 2 -w 1
# exactly one bottleneck mark per hier line
if grep -E '^# +(out-of-place|in-place) hier:' "$tmp/out" | awk '{ n = gsub(/\* /, "&"); if (n != 1) bad = 1 } END { exit bad }'; then
    echo "ok: one '*' per hier phase line"
else
    fail "a hier phase line without exactly one '*'"
fi

# a forced small that no row can use: status 2, one line naming the limit and the option
want="-A small applies to all_reduce of at most 131072 B, and every size from -b 1048576 is larger"
bad -np 2 -A small -b 1M -e 2M
want="-A small applies to all_reduce only"; bad -np 2 -A small broadcast,all_gather
want="STRATA_ALGO=small applies to all_reduce of at most 131072 B"
STRATA_ALGO=small bad -np 2 -b 256k -e 1M
# ... that some rows can use: the header says where it applies, a '#  ^ ran' line under each row
# that ran something else (256k and 512k here, hier on one node), and the library says it once
# per rank at WARN
good "-A small over 128 KiB" \
    '^# Algorithm: small \(STRATA_ALGO, set by -A\); small applies to all_reduce of at most 131072 B' \
    -- -np 2 -A small -b 64k -e 512k -n 2 -w 1
n=$(grep -c '^#  \^ ran hier, not small: ' "$tmp/out")
w=$(grep -cE 'WARN COLL .*STRATA_ALGO small applies to all-reduces of at most 131072 B.*(hier for [0-9]+ B)' "$tmp/err")
if [ "$n" = 2 ] && [ "$(grep -c '^#  \^ ran' "$tmp/out")" = 2 ] && [ "$w" = 2 ] &&
   [ "$(grep -c WARN "$tmp/err")" = 2 ]; then
    echo "ok: -A small over 128 KiB: 2 rows marked 'ran hier', one WARN per rank"
else
    fail "-A small -b 64k -e 512k: $n rows marked 'ran hier' (want 2), $w WARN lines (want 2, one per rank)"
    grep -E '^ +[0-9]|^#  \^|WARN' "$tmp/out" "$tmp/err" | sed 's/^/    /' | head -10
fi

# a value the library raises is said at WARN once per process (each of the 2 ranks), with the
# variable, the value given and the value used
STRATA_HIER_CHUNK_SIZE=7 timeout 120 "$collbench" -np 2 -A hier -b 1M -e 1M -n 2 -w 1 \
    >"$tmp/out" 2>"$tmp/err" </dev/null; rc=$?
n=$(grep -c "strata WARN ENV .*STRATA_HIER_CHUNK_SIZE 7 raised to 64: " "$tmp/err")
if [ "$rc" = 0 ] && [ "$n" = 2 ] && [ "$(grep -c WARN "$tmp/err")" = 2 ]; then
    echo "ok: STRATA_HIER_CHUNK_SIZE=7 -> $(grep -m1 -o 'STRATA_HIER_CHUNK_SIZE 7 raised.*' "$tmp/err")"
else
    fail "STRATA_HIER_CHUNK_SIZE=7 -> rc $rc, $n WARN line(s) saying it was raised to 64, want 0 and 2 (one per rank)"
    sed 's/^/    /' "$tmp/err" | head -6
fi

# --device: bad values and modes before any rank starts; a short run on the simulated device
# says so in its header and under the table; cuda without a driver is one line, status 2
want="invalid device (host, sim or cuda) 'gpu'"; bad -np 2 --device gpu
want="--device applies to the benchmark"; bad -np 2 --device sim topo
good "--device sim" '^# device: sim \(simulated on the CPU: not GPU performance\)$' \
    '^# Buffers: device memory' '^#  Rank  1 Group  0 Pid +[0-9]+ on +node0 device  1 \[sim\] node 0$' \
    '^#  Rank  2 Group  0 Pid +[0-9]+ on +node1 device  0 \[sim\] node 1$' \
    '^# Out of bounds values : 0 OK$' '^# device sim: .* never GPU performance$' -- \
    -np 3 --nodes 2 --device sim all -b 8 -e 256k -f 64 -n 2 -w 1
good "--device host is the default" '^# device: host' '^# Buffers: malloc$' -- \
    -np 2 -b 8 -e 1k -n 1 -w 0
if nvidia-smi -L >/dev/null 2>&1; then
    echo "ok: --device cuda without a driver: not checked, this machine has a GPU"
else
    want="--device cuda: no device layer ("; bad -np 2 --device cuda
fi

# ranks started one by one with different STRATA_ALGO: init fails on both (strataInvalidUsage,
# status 2) at once, not a hang, each naming the variable, its own value and the other rank
port=$(emunet_root_port)
for r in 0 1; do
    algo=ring; [ $r = 1 ] && algo=hier
    STRATA_COMM_ID=127.0.0.1:$port STRATA_ALGO=$algo timeout 60 "$collbench" --rank $r --nranks 2 \
        -b 1k -e 1k -n 1 -w 0 -T 50 >"$tmp/mix$r.out" 2>"$tmp/mix$r.err" </dev/null &
    pids[r]=$!
done
wait "${pids[0]}"; rc0=$?; wait "${pids[1]}"; rc1=$?
if [ "$rc0" = 2 ] && [ "$rc1" = 2 ] &&
   grep -q "the ranks' settings differ: STRATA_ALGO (rank 1 has another)" "$tmp/mix0.err" &&
   grep -q "this rank has ALGO=ring" "$tmp/mix0.err" &&
   grep -q "the ranks' settings differ: STRATA_ALGO (rank 0 has another)" "$tmp/mix1.err"; then
    echo "ok: different STRATA_ALGO on the ranks -> status 2: $(cat "$tmp/mix0.err")"
else
    fail "different STRATA_ALGO on the ranks -> rc $rc0 and $rc1, want 2 and 2 with each naming the other"
    sed 's/^/    /' "$tmp/mix0.err" "$tmp/mix1.err" | head -6
fi

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
