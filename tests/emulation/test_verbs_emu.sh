#!/bin/bash
# test_verbs_emu.sh: the verbs transport across emulated nodes (network namespaces, see emunet.sh)
# on the stand-in libibverbs (tests/fakeverbs: two HCAs per node, fake0 and fake1; an RDMA write
# copies into the target process with process_vm_writev, so it crosses the namespaces; the
# handshake's TCP connections cross the veth links). STRATA_NET=verbs on every rank:
#   1 collectives  all_reduce, reduce_scatter, all_gather, broadcast, reduce and sendrecv on 2
#                  nodes x 2 ranks, 8 B..8 MiB, every result checked (-c 1, #wrong 0); then the
#                  stand-in's port counters: both HCAs of both nodes carried bytes (one rail per
#                  HCA: local rank l of each node sends through fake<l>)
#   2 kill         rank 2 SIGKILLed mid 64 MiB all-reduces: every survivor exits with
#                  collbench's error (2) within 5 s, naming the all-reduce and rank 2, while
#                  STRATA_TIMEOUT is 60 s (the out-of-band connection reports the death, not
#                  the deadline)
#   3 retry_exc    one RDMA write fails with IBV_WC_RETRY_EXC_ERR (FAKEVERBS_FAULTS, after its
#                  retry timeout scaled by 1/100): every rank's all-reduce fails, and every rank's
#                  error carries the work completion's line (status text, QP, HCA, peer rank)
#   test_verbs_emu.sh [part ...]        (default: all three)
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces, no stand-in, or the stand-in
# cannot write into another process here), 99 setup error. Cleans up ranks, namespaces, the
# stand-in's fabric and /dev/shm on every path.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

why=$(emunet_unavailable)
if [ -n "$why" ]; then
    echo "SKIP: emulated nodes need network namespaces: $why"
    exit 77
fi
collbench=${COLLBENCH:-}
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../../collbench"; do
        [ -x "$c" ] && { collbench=$c; break; }
    done
fi
if [ -z "$collbench" ] || [ ! -x "$collbench" ]; then
    echo "test_verbs_emu: collbench not found (build it, or set COLLBENCH)" >&2
    exit 99
fi
collbench=$(cd "$(dirname "$collbench")" && pwd)/$(basename "$collbench")
build=$(dirname "$collbench")
# shellcheck source=../fakeverbs/standin.sh
. "$here/../fakeverbs/standin.sh"
standin_locate "$build" || exit 77
lib=$standin_lib ctl=$standin_ctl

parts=("$@")
[ ${#parts[@]} -gt 0 ] || parts=(collectives kill retry_exc)

emunet_cleanup_stale 2>/dev/null
export EMUNET_ID="sv$$"
export EMUNET_OWNER=$$
export STRATA_NET=verbs STRATA_IBVERBS_LIB=$lib FAKEVERBS_NDEV=2 FAKEVERBS_KEEP=1
unset FAKEVERBS_FAULTS FAKEVERBS_TIME_SCALE
logdir=$(mktemp -d "/tmp/strata-verbs-emu.$$.XXXXXX")
shmsnap="$logdir/.shm-before"
fabrics=()
wrappers=()

cleanup()
{
    local rc=$? f
    trap - EXIT INT TERM
    for f in "$logdir"/rank*.pid; do
        [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null
    done
    [ ${#wrappers[@]} -gt 0 ] && kill -KILL "${wrappers[@]}" 2>/dev/null
    wait 2>/dev/null
    emunet_down "$EMUNET_ID"
    [ ${#fabrics[@]} -gt 0 ] && standin_clean "${fabrics[@]}"
    emunet_shm_cleanup "$shmsnap"
    rm -rf "$logdir"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "test_verbs_emu: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM
emunet_shm_snapshot "$shmsnap"

fail=0
bad() { echo "FAIL: $*" >&2; fail=1; }

# new_fabric NAME: a fabric of the stand-in's own for the next run
new_fabric() { export FAKEVERBS_FABRIC="$1$$"; fabrics+=("$FAKEVERBS_FABRIC"); }

part_collectives()
{
    local coll rc
    new_fabric svc
    for coll in all_reduce reduce_scatter all_gather broadcast reduce sendrecv; do
        "$here/run_collbench.sh" --nodes 2 --np 4 --no-bytes-check --quiet --timeout 240 \
            -- "$coll" -b 8 -e 8M -f 8 -n 2 -w 1 -c 1 >"$logdir/$coll.txt" 2>&1
        rc=$?
        if [ "$rc" != 0 ]; then
            bad "$coll over verbs on 2 emulated nodes x 2 ranks: exit $rc"
            tail -n 30 "$logdir/$coll.txt" >&2
        else
            echo "ok: $coll over verbs, 2 nodes x 2 ranks, 8 B..8 MiB, #wrong 0"
        fi
    done
    # every (node, HCA) carried inter-node bytes: rail l of each node on fake<l>
    "$ctl" stats "$FAKEVERBS_FABRIC" >"$logdir/stats.txt" 2>&1
    cat "$logdir/stats.txt"
    local node dev bytes
    for node in node0 node1; do
        for dev in fake0 fake1; do
            bytes=$(awk -v n="$node" -v d="$dev" '$1 == n && $2 == d { print $4 }' \
                    "$logdir/stats.txt")
            if [ -z "$bytes" ] || [ "$bytes" -lt $((1 << 20)) ]; then
                bad "$node's $dev sent ${bytes:-no} bytes: every HCA of every node should carry" \
                    "its rail (at least 1 MiB here)"
            fi
        done
    done
}

# start_ranks ARGS...: 4 ranks (2 per node) of collbench ARGS, each writing its pid first
start_ranks()
{
    local r k port
    if ! emunet_up 2 >"$logdir/network.txt"; then
        echo "test_verbs_emu: cannot create the emulated network" >&2
        exit 99
    fi
    port=$(emunet_root_port)
    if head -c 4096 "$collbench" 2>/dev/null | grep -q 'libtool'; then
        timeout 30 "$collbench" --help >/dev/null 2>&1 </dev/null
    fi
    rm -f "$logdir"/rank*.pid "$logdir"/rank*.log
    wrappers=()
    for ((r = 0; r < 4; r++)); do
        k=$((r / 2))
        emunet_run "$k" timeout -k 5 120 sh -c 'echo $$ >"$0"; exec "$@"' "$logdir/rank$r.pid" \
            env STRATA_COMM_ID="${EMUNET_SUBNET}.1:$port" STRATA_SOCKET_IFNAME="$EMUNET_IF" \
            STRATA_BOOTSTRAP_TIMEOUT=30s "$collbench" --rank "$r" --nranks 4 "$@" \
            </dev/null >"$logdir/rank$r.log" 2>&1 &
        wrappers[r]=$!
    done
}

# sent_bytes: bytes the stand-in's ports sent so far
sent_bytes() { "$ctl" stats "$FAKEVERBS_FABRIC" 2>/dev/null | awk 'NR > 2 { s += $4 } END { print s + 0 }'; }

part_kill()
{
    local victim=2 limit=5 t_kill tx0 deadline r rc dt msg now
    new_fabric svk
    STRATA_TIMEOUT=60s start_ranks all_reduce -b 64M -e 64M -n 1000 -w 1 -c 0
    export STRATA_TIMEOUT=60s
    # kill once the ports moved 512 MiB (init and warm-up done: the timed all-reduces run)
    tx0=$(sent_bytes)
    deadline=$((SECONDS + 90))
    while [ $(( $(sent_bytes) - tx0 )) -lt $((512 << 20)) ]; do
        if [ $SECONDS -gt $deadline ]; then
            bad "kill: no all-reduce traffic on the stand-in's ports after 90 s"
            tail -n 5 "$logdir"/rank*.log >&2
            return
        fi
        for ((r = 0; r < 4; r++)); do
            if ! kill -0 "${wrappers[r]}" 2>/dev/null; then
                bad "kill: rank $r ended before the kill"
                tail -n 5 "$logdir/rank$r.log" >&2
                return
            fi
        done
        sleep 0.05
    done
    t_kill=$(date +%s.%N)
    kill -KILL "$(cat "$logdir/rank$victim.pid")"
    declare -A running
    for ((r = 0; r < 4; r++)); do [ "$r" != "$victim" ] && running[$r]=1; done
    while [ ${#running[@]} -gt 0 ]; do
        for r in "${!running[@]}"; do
            kill -0 "${wrappers[r]}" 2>/dev/null && continue
            wait "${wrappers[r]}"
            rc=$?
            unset "running[$r]"
            dt=$(echo "$(date +%s.%N) - $t_kill" | bc)
            msg=$(grep -m1 'collbench: rank' "$logdir/rank$r.log")
            echo "kill: rank $r exit $rc after ${dt} s: $msg"
            [ "$rc" = 2 ] || bad "kill: rank $r exited with $rc, expected 2 (a failed collective)"
            if ! printf '%s\n' "$msg" | grep -q 'AllReduce' ||
               ! printf '%s\n' "$msg" | grep -Eq "rank $victim([^0-9]|$)"; then
                bad "kill: rank $r's error does not name the all-reduce and rank $victim"
            fi
            [ "$(echo "$dt > $limit" | bc)" = 1 ] && bad "kill: rank $r's error came after ${dt} s (limit $limit s)"
        done
        now=$(date +%s.%N)
        if [ ${#running[@]} -gt 0 ] && [ "$(echo "$now - $t_kill > $limit + 5" | bc)" = 1 ]; then
            bad "kill: ranks ${!running[*]} still running $((limit + 5)) s after the kill"
            for r in "${!running[@]}"; do tail -n 5 "$logdir/rank$r.log" >&2; done
            return
        fi
        [ ${#running[@]} -gt 0 ] && sleep 0.05
    done
    unset STRATA_TIMEOUT
    emunet_down "$EMUNET_ID"
}

part_retry_exc()
{
    local r rc msg
    new_fabric svr
    # the 400th send work request of the fabric (well into the timed all-reduces) fails after
    # the retry timeout (18: 1.07 s per try x 8, scaled to 86 ms)
    export FAKEVERBS_FAULTS="send_err=12@3000" FAKEVERBS_TIME_SCALE=0.01
    start_ranks all_reduce -b 1M -e 1M -n 200 -w 1 -c 1
    for ((r = 0; r < 4; r++)); do
        wait "${wrappers[r]}"
        rc=$?
        msg=$(grep -m1 'collbench: rank' "$logdir/rank$r.log")
        echo "retry_exc: rank $r exit $rc: $msg"
        [ "$rc" = 2 ] || bad "retry_exc: rank $r exited with $rc, expected 2 (a failed collective)"
        if ! printf '%s\n' "$msg" | grep -q 'transport retry counter exceeded' ||
           ! printf '%s\n' "$msg" | grep -Eq 'QP 0x[0-9a-f]+' ||
           ! printf '%s\n' "$msg" | grep -q 'fake[01]'; then
            bad "retry_exc: rank $r's error does not carry the work completion's line (status," \
                "QP, HCA)"
            tail -n 8 "$logdir/rank$r.log" >&2
        fi
    done
    unset FAKEVERBS_FAULTS FAKEVERBS_TIME_SCALE
    emunet_down "$EMUNET_ID"
}

for p in "${parts[@]}"; do
    case $p in
        collectives|kill|retry_exc) "part_$p" ;;
        *) echo "test_verbs_emu: unknown part $p" >&2; exit 99 ;;
    esac
done
exit "$fail"
