#!/bin/bash
# test_hier_rails.sh: the hierarchical algorithm across 2 emulated nodes with two links each
# (one per rail, STRATA_RAIL_IFNAMES=emu0,emu1): all five collectives with data checks, and from
# the interface counters that the inter-node bytes crossed the veth links and that both links of
# every node carried their share (run_collbench.sh --links 2). Then 2+3 ranks (uneven nodes: the
# rank alone on its rail... of node 0 owns two shards) on the same links. Then the flat ring's
# all-reduce with two channels (STRATA_RING_CHANNELS=2), whose second channel leaves each node
# through the other local rank and so must put bytes on both links too. Last, two broken rails:
# a rail interface that does not exist (STRATA_RAIL_IFNAMES=emu0,emu9) and a rail
# whose link is down (run_collbench.sh --link-down 0:1) must fail init on every rank within the
# bootstrap deadline, the failing rank naming the interface and the others naming that rank.
# A third: a rail link cut behind a live carrier fails init on every rank within the connect
# deadline, each naming the peer it cannot reach, its rail and both interfaces.
# Every run_collbench call is bounded (--timeout): it names and stops ranks still running.
# Exit 0 pass, 1 fail, 77 skip (no network namespaces), 99 setup error.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run="$here/run_collbench.sh"
tmo=${EMUNET_TEST_TIMEOUT:-240}

"$run" --timeout "$tmo" --nodes 2 --np 4 --links 2 --quiet -- \
    all -A hier -b 8 -e 2M -f 16 -n 2 -w 1 -c 1 || exit
"$run" --timeout "$tmo" --nodes 2 --np 5 --links 2 --quiet -- \
    all_reduce -A hier -b 1M -e 4M -f 4 -n 2 -w 1 -c 1 || exit
STRATA_RING_CHANNELS=2 "$run" --timeout "$tmo" --nodes 2 --np 4 --links 2 --quiet -- \
    all_reduce -A ring -b 1M -e 4M -f 4 -n 2 -w 1 -c 1 || exit

# broken_rail NAME EXPECT "RANKS" [run_collbench options]: init must fail on all 4 ranks within
# the bootstrap deadline (20 s), rank 1 (local rank 1 of node 0: rail 1) and the other RANKS
# saying EXPECT and every other rank naming rank 1.
boot=20
broken_rail()
{
    local name=$1 expect=$2 bad=$3 logs start took r rc=0
    shift 3
    logs=$(mktemp -d "/tmp/strata-emu.$$.XXXXXX")
    start=$(date +%s)
    STRATA_BOOTSTRAP_TIMEOUT=${boot}s "$run" --timeout "$tmo" --nodes 2 --np 4 --links 2 \
        --no-bytes-check --logdir "$logs" "$@" -- all_reduce -b 8 -e 8 -n 1 -w 0 -c 1 \
        >"$logs/run.out" 2>&1
    rc=$?
    took=$(( $(date +%s) - start ))
    if [ "$rc" = 0 ]; then
        echo "FAIL: $name: the job succeeded"; rc=1
    elif [ "$took" -ge "$boot" ]; then
        echo "FAIL: $name: the job took $took s, not within the bootstrap deadline ($boot s)"; rc=1
    else
        rc=0
        for r in 0 1 2 3; do
            if [[ " $bad " == *" $r "* ]]; then
                if ! grep -q "rank $r: .*$expect" "$logs/rank$r.log"; then
                    echo "FAIL: $name: rank $r does not say '$expect'"
                    tail -n 5 "$logs/rank$r.log"
                    rc=1
                fi
            elif ! grep -q "strataCommInitRank failed: .*another rank failed: rank 1" \
                    "$logs/rank$r.log"; then
                echo "FAIL: $name: rank $r does not name rank 1"; tail -n 5 "$logs/rank$r.log"
                rc=1
            fi
        done
    fi
    [ "$rc" = 0 ] && echo "ok: $name: init failed on every rank in $took s; ranks $bad: $expect"
    [ "$rc" = 0 ] || cat "$logs/run.out"
    rm -rf "$logs"
    return "$rc"
}
STRATA_RAIL_IFNAMES=emu0,emu9 broken_rail "missing rail interface" \
    "rail 1's interface 'emu9' does not exist on this node" "1 3" || exit 1
broken_rail "rail link down" "rail 1's interface 'emu1' is down" "1" --link-down 0:1 || exit 1
# a link whose carrier is on but that carries nothing (its switch port out of the bridge): no
# interface check can see it, the wire-up check must (STRATA_CONNECT_TIMEOUT), on every rank
STRATA_CONNECT_TIMEOUT=5s broken_rail "rail link cut" \
    "cannot be reached over rail [01] (interface emu[01]) to rank [0-3] (node [^ ]*, rail 1, interface emu1): no " \
    "0 1 2 3" --link-cut 0:1 || exit 1
