#!/bin/bash
# test_tune_files.sh: the library follows a tuning table (STRATA_TUNE_FILE) and a fabric profile
# (STRATA_PROFILE_FILE), the user's STRATA_ALGO still wins, a table of another layout or a broken
# file is logged and not used, the choices show at STRATA_DEBUG=INFO; and collbench calibrate,
# tune and model --compare write and read those files (4 ranks as 2 emulated nodes of 2 on this
# machine, small sizes: the fabric tables of issue 6 are bench/tune_fabrics.sh's job).
#   test_tune_files.sh [--collbench P]     (default: $COLLBENCH, ./collbench, the tree's top)
# Exit 0 pass, 1 fail, 99 no collbench.
set -u
here=$(cd "$(dirname "$0")" && pwd)
collbench=${COLLBENCH:-}
[ "${1:-}" = --collbench ] && collbench=$2
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../../collbench"; do [ -x "$c" ] && { collbench=$c; break; }; done
fi
[ -n "$collbench" ] && [ -x "$collbench" ] || { echo "collbench not found" >&2; exit 99; }
unset STRATA_ALGO STRATA_TUNE_FILE STRATA_PROFILE_FILE STRATA_HIER_CHUNK_SIZE STRATA_RAIL_SHARES \
      STRATA_PIPELINE_DEPTH STRATA_SMALL_THRESHOLD

tmp=$(mktemp -d "${TMPDIR:-/tmp}/cbtune.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

table() { # FILE RANKS_PER_NODE NODES ENTRIES-JSON
    printf '{"format":"strata-tune-table","version":1,"layout":{"ranks_per_node":%s,"nodes":%s,"rails":1},"allreduce":%s}\n' \
        "$2" "$3" "$4" >"$1"
}

# run NAME ENV... -- collbench ARGS: rank outputs in $tmp/NAME.out / .err; fails on rc != 0
run() {
    local name=$1; shift
    local -a env=()
    while [ "$1" != -- ]; do env+=("$1"); shift; done; shift
    env "${env[@]}" timeout 180 "$collbench" "$@" >"$tmp/$name.out" 2>"$tmp/$name.err" </dev/null
    local rc=$?
    [ "$rc" = 0 ] || { fail "$name: rc $rc"; tail -5 "$tmp/$name.err" | sed 's/^/    /'; }
    return $rc
}

# The algorithm under each row of --phases, per size: "SIZE ALGO" lines.
algos() { awk '!/^#/ && $1 ~ /^[0-9]+$/ { s = $1 } /^#  out-of-place/ { print s, $3 }' "$1" | tr -d ':'; }

bench=(all_reduce -np 4 --nodes 2 -b 1K -e 4M -f 16 -n 3 -w 1 --phases)

# 1. a table: small up to 4 KiB, ring up to 1 MiB, hier above
table "$tmp/t.json" 2 2 '[{"max_bytes":4096,"algo":"small"},{"max_bytes":1048576,"algo":"ring"},{"max_bytes":null,"algo":"hier","hier_chunk":262144}]'
if run table STRATA_TUNE_FILE="$tmp/t.json" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- "${bench[@]}"; then
    got=$(algos "$tmp/table.out" | tr '\n' ' ')
    [ "$got" = "1024 small 16384 ring 262144 ring 4194304 hier " ] || fail "table: algorithms '$got'"
    grep -q "tuning from tuning table $tmp/t.json" "$tmp/table.err" || fail "table: no INFO line naming the table"
    grep -q "all-reduce of 4194304 B: hier, chunk 262144 B (entry 2 of tuning table" "$tmp/table.err" ||
        fail "table: no INFO line for the 4 MiB choice"
    grep -q " 0 OK" "$tmp/table.out" || fail "table: results not checked OK"
    echo "ok: table -> $got"
fi
# 2. STRATA_ALGO still wins
if run override STRATA_TUNE_FILE="$tmp/t.json" STRATA_ALGO=ring -- "${bench[@]}"; then
    got=$(algos "$tmp/override.out" | awk '{ print $2 }' | sort -u | tr '\n' ' ')
    [ "$got" = "ring " ] || fail "STRATA_ALGO=ring over the table: algorithms '$got'"
    echo "ok: STRATA_ALGO=ring over the table -> $got"
fi
# 3. another layout, and a broken file: a WARN, then the defaults (small at 1 KiB, hier at 4 MiB)
table "$tmp/t3.json" 4 2 '[{"max_bytes":null,"algo":"ring"}]'
printf '{"format": "strata-tune-table", "version": 1, ' >"$tmp/broken.json"
for f in t3 broken; do
    if run "$f" STRATA_TUNE_FILE="$tmp/$f.json" -- "${bench[@]}"; then
        got=$(algos "$tmp/$f.out" | tr '\n' ' ')
        [ "$got" = "1024 small 16384 small 262144 hier 4194304 hier " ] || fail "$f: algorithms '$got' (want the defaults)"
        grep -q "tuning table.*not used" "$tmp/$f.err" || fail "$f: no WARN that the table is not used"
        echo "ok: $f -> defaults: $(grep -m1 'not used' "$tmp/$f.err" | sed 's/.*TUNE //')"
    fi
done
# 4. calibrate writes a profile; model --compare and the library read it; tune writes a table
#    the library then follows
if run calibrate -- calibrate --out "$tmp/p.json" -np 4 --nodes 2; then
    grep -q '"format": "strata-fabric-profile"' "$tmp/p.json" || fail "calibrate: no profile in $tmp/p.json"
    grep -q '^# inter: alpha' "$tmp/calibrate.out" || fail "calibrate: no inter line"
    echo "ok: calibrate -> $(grep '^# inter' "$tmp/calibrate.out")"
fi
# tools never warn about their own files (the tables of the configurations under test)
n=$(grep -c WARN "$tmp/calibrate.err")
[ "$n" = 0 ] && echo "ok: calibrate: no WARN" ||
    { fail "calibrate: $n WARN line(s), want none"; grep -m3 WARN "$tmp/calibrate.err" | sed 's/^/    /'; }
if run compare -- model --profile "$tmp/p.json" --compare -np 4 --nodes 2 -b 1K -e 1M -f 32 -n 3; then
    rows=$(grep -cE '^ +(1K|32K|1M) +(small|ring|hier)' "$tmp/compare.out")
    [ "$rows" = 3 ] || fail "compare: $rows rows, want 3"
    grep -qE '%' "$tmp/compare.out" || fail "compare: no error column"
fi
if run profile STRATA_PROFILE_FILE="$tmp/p.json" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- "${bench[@]}"; then
    grep -q "tuning from cost model of fabric profile $tmp/p.json" "$tmp/profile.err" ||
        fail "profile: no INFO line naming the profile"
fi
if run tune -- tune --profile "$tmp/p.json" --out "$tmp/tuned.json" -np 4 --nodes 2 -b 1K -e 64K -f 8 -n 3; then
    grep -q '"format": "strata-tune-table"' "$tmp/tuned.json" || fail "tune: no table in $tmp/tuned.json"
    n=$(grep -cE '^ +(1K|8K|64K) +(small|ring|hier)' "$tmp/tune.out")
    [ "$n" = 3 ] || fail "tune: $n rows of tuned vs best forced, want 3"
    if run tuned STRATA_TUNE_FILE="$tmp/tuned.json" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- \
        all_reduce -np 4 --nodes 2 -b 1K -e 64K -f 8 -n 3 -w 1; then
        grep -q "tuning from tuning table $tmp/tuned.json" "$tmp/tuned.err" || fail "tuned: the table was not used"
    fi
    # reduce-scatter, all-gather and all-to-all: ring against hier per size, a list each, followed
    for c in reduce_scatter all_gather alltoall; do
        grep -q "\"$c\": \[" "$tmp/tuned.json" || fail "tune: no $c list in $tmp/tuned.json"
        n=$(sed -n "/^# tune: $c, ring against hier/,/^# tune\|^#\$/p" "$tmp/tune.out" |
            grep -cE '^ +(1K|8K|64K) +[0-9.]+ +[0-9.]+  (ring|hier)$')
        [ "$n" = 3 ] || fail "tune: $n rows of $c ring vs hier, want 3"
    done
    if run tuned_rs STRATA_TUNE_FILE="$tmp/tuned.json" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- \
        reduce_scatter -np 4 --nodes 2 -b 64K -e 64K -n 2 -w 1 -c 1; then
        grep -qE "reduce_scatter of 65536 B: (ring|hier) \(reduce_scatter\[[0-9]+\] of tuning table" \
            "$tmp/tuned_rs.err" || fail "tuned: reduce-scatter did not follow the table's list"
    fi
    echo "ok: tune -> $(grep -c max_bytes "$tmp/tuned.json") entries"
fi
n=$(grep -c WARN "$tmp/tune.err")
[ "$n" = 0 ] && echo "ok: tune: no WARN" ||
    { fail "tune: $n WARN line(s), want none"; grep -m3 WARN "$tmp/tune.err" | sed 's/^/    /'; }
# ... and tune without --profile, which calibrates first (small table: -b 1K -e 1K)
if run tune2 -- tune --out "$tmp/tuned2.json" -np 4 --nodes 2 -b 1K -e 1K -n 2 -w 1; then
    n=$(grep -c WARN "$tmp/tune2.err")
    [ "$n" = 0 ] && echo "ok: tune (calibrating first): no WARN" ||
        { fail "tune (calibrating first): $n WARN line(s), want none"; grep -m3 WARN "$tmp/tune2.err" | sed 's/^/    /'; }
fi
# 5. uneven rail shares (two "rails" on lo): every collective through hier, every datatype,
#    sizes that do not divide evenly, results checked
if run shares STRATA_RAIL_IFNAMES=lo,lo STRATA_RAIL_SHARES=3,1 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- \
    all -np 4 --nodes 2 -b 100 -e 5M -f 7 -n 2 -w 1 -d all -A hier; then
    grep -q "shard shares 0.750,0.250" "$tmp/shares.err" || fail "shares: 3,1 not taken as 0.750,0.250"
    grep -q "Out of bounds values : 0 OK" "$tmp/shares.out" || fail "shares: wrong results"
    echo "ok: rail shares 3,1: $(grep -c '^ *[0-9]' "$tmp/shares.out") rows, all right"
fi
# 5b. flat-ring channels from a table (two "rails" on lo): the INFO line names them, every
#     collective and datatype right at odd sizes; STRATA_RING_CHANNELS beats the table
table "$tmp/ch.json" 2 2 '[{"max_bytes":null,"algo":"ring","channels":2}]'
sed -i 's/"rails":1/"rails":2/' "$tmp/ch.json"
if run channels STRATA_RAIL_IFNAMES=lo,lo STRATA_TUNE_FILE="$tmp/ch.json" STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- \
    all_reduce -np 4 --nodes 2 -b 100 -e 5M -f 7 -n 2 -w 1 -d all -o all; then
    grep -q "all-reduce of [0-9]* B: ring, 2 channels (entry 0 of tuning table" "$tmp/channels.err" ||
        fail "channels: no INFO line for ring with 2 channels"
    grep -q "Out of bounds values : 0 OK" "$tmp/channels.out" || fail "channels: wrong results"
    echo "ok: ring with 2 channels from a table: $(grep -c '^ *[0-9]' "$tmp/channels.out") rows, all right"
fi
if run channels_env STRATA_RAIL_IFNAMES=lo,lo STRATA_TUNE_FILE="$tmp/ch.json" STRATA_RING_CHANNELS=3 STRATA_DEBUG=INFO STRATA_DEBUG_SUBSYS=TUNE -- \
    all -np 4 --nodes 2 -b 100 -e 1M -f 31 -n 1 -w 0 -d all; then
    grep -q "ring, 3 channels from STRATA_RING_CHANNELS (the entry says 2" "$tmp/channels_env.err" ||
        fail "channels: STRATA_RING_CHANNELS not said to win over the table"
    grep -q "Out of bounds values : 0 OK" "$tmp/channels_env.out" || fail "channels_env: wrong results"
    echo "ok: STRATA_RING_CHANNELS=3 over the table, every collective right"
fi
# 6. bad input: tune without --out, an override set, STRATA_RAIL_SHARES malformed
timeout 20 "$collbench" tune -np 4 --nodes 2 >"$tmp/x.out" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "needs --out" "$tmp/x.out" || fail "tune without --out: rc $rc"
STRATA_ALGO=hier timeout 60 "$collbench" tune --out "$tmp/x.json" -np 4 --nodes 2 -b 1K -e 1K >"$tmp/x.out" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "STRATA_ALGO=hier is set: calibrate, tune and compare choose" "$tmp/x.out" || fail "tune under STRATA_ALGO: rc $rc"
STRATA_RAIL_SHARES=2,x timeout 60 "$collbench" all_reduce -np 2 --nodes 2 -b 1K -e 1K >"$tmp/x.out" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "STRATA_RAIL_SHARES '2,x' is malformed" "$tmp/x.out" || fail "bad STRATA_RAIL_SHARES: rc $rc"
STRATA_RING_CHANNELS=9 timeout 60 "$collbench" all_reduce -np 2 --nodes 2 -b 1K -e 1K >"$tmp/x.out" 2>&1; rc=$?
[ "$rc" = 2 ] && grep -q "STRATA_RING_CHANNELS 9 is outside \[0, 8\]" "$tmp/x.out" || fail "STRATA_RING_CHANNELS=9: rc $rc"
table "$tmp/x.json" 2 2 '[{"max_bytes":null,"algo":"ring","channels":0}]'
STRATA_TUNE_FILE="$tmp/x.json" timeout 60 "$collbench" all_reduce -np 4 --nodes 2 -b 1K -e 1K >"$tmp/x.out" 2>&1; rc=$?
[ "$rc" = 0 ] && grep -q 'channels" must be an integer 1 .. 8' "$tmp/x.out" || fail "table with channels 0: rc $rc, no WARN"

[ "$fails" = 0 ] && { echo "test_tune_files: all passed"; exit 0; }
echo "test_tune_files: $fails failure(s)"
exit 1
