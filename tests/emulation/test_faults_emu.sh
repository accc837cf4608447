#!/bin/bash
# test_faults_emu.sh: a rank SIGKILLed in the middle of 64 MiB all-reduces over real emulated nodes
# (2 network namespaces x 2 ranks, collbench per rank, STRATA_TIMEOUT=5s). Rank 2 (node 1, the
# rail partner of rank 0) is killed once the links carry all-reduce traffic; every survivor must
# then exit with collbench's error (exit 2) within the deadline plus 10 s, naming the failed
# all-reduce and rank 2 in its message. Cleanup (ranks, namespaces, /dev/shm, logs) on every path.
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces), 99 setup error.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

np=4 nodes=2 victim=2 timeout_s=${FAULTS_TIMEOUT_S:-5} margin_s=10

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
    echo "test_faults_emu: collbench not found (build it, or set COLLBENCH)" >&2
    exit 99
fi
collbench=$(cd "$(dirname "$collbench")" && pwd)/$(basename "$collbench")

emunet_cleanup_stale 2>/dev/null
export EMUNET_ID="st$$"
export EMUNET_OWNER=$$
logdir=$(mktemp -d "/tmp/strata-faults-emu.$$.XXXXXX")
shmsnap="$logdir/.shm-before"
wrappers=()

# Every rank's process (its pid file) and wrapper, the network, leftover shm, the logs.
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
    emunet_shm_cleanup "$shmsnap"
    rm -rf "$logdir"
    exit "$rc"
}
trap cleanup EXIT
trap 'echo "test_faults_emu: interrupted" >&2; exit 130' INT
trap 'exit 143' TERM

emunet_shm_snapshot "$shmsnap"
if ! emunet_up "$nodes" >"$logdir/network.txt"; then
    echo "test_faults_emu: cannot create the emulated network" >&2
    exit 99
fi
port=$(emunet_root_port)
if head -c 4096 "$collbench" 2>/dev/null | grep -q 'libtool'; then
    timeout 30 "$collbench" --help >/dev/null 2>&1 </dev/null
fi

# 2 ranks per node; each rank writes its own pid (the process strata runs in: sh execs env, which
# execs collbench) before exec.
for ((r = 0; r < np; r++)); do
    k=$((r / (np / nodes)))
    emunet_run "$k" timeout -k 5 120 sh -c 'echo $$ >"$0"; exec "$@"' "$logdir/rank$r.pid" \
        env STRATA_COMM_ID="${EMUNET_SUBNET}.1:$port" STRATA_SOCKET_IFNAME="$EMUNET_IF" \
        UCX_NET_DEVICES="$EMUNET_IF" STRATA_BOOTSTRAP_TIMEOUT=30s STRATA_TIMEOUT="${timeout_s}s" \
        "$collbench" --rank "$r" --nranks "$np" all_reduce -b 64M -e 64M -n 1000 -w 1 -c 0 \
        </dev/null >"$logdir/rank$r.log" 2>&1 &
    wrappers[r]=$!
done

# Kill the victim once node 1's link has carried 512 MiB (init and warm-up done: the timed
# all-reduces are under way).
tx0=$(emunet_ifbytes 1 tx)
deadline=$((SECONDS + 60))
while :; do
    tx=$(emunet_ifbytes 1 tx)
    [ $((tx - tx0)) -gt $((512 << 20)) ] && break
    if [ $SECONDS -gt $deadline ]; then
        echo "test_faults_emu: no all-reduce traffic on the links after 60 s" >&2
        tail -n 5 "$logdir"/rank*.log >&2
        exit 1
    fi
    for ((r = 0; r < np; r++)); do
        if ! kill -0 "${wrappers[r]}" 2>/dev/null; then
            echo "test_faults_emu: rank $r ended before the kill" >&2
            tail -n 5 "$logdir/rank$r.log" >&2
            exit 1
        fi
    done
    sleep 0.05
done
victim_pid=$(cat "$logdir/rank$victim.pid")
t_kill=$(date +%s.%N)
kill -KILL "$victim_pid"

# Every survivor exits 2 (collbench's failed call) within timeout + margin, naming rank 2.
fail=0
declare -A running
for ((r = 0; r < np; r++)); do [ "$r" != "$victim" ] && running[$r]=1; done
limit=${FAULTS_LIMIT_S:-$((timeout_s + margin_s))}
while [ ${#running[@]} -gt 0 ]; do
    for r in "${!running[@]}"; do
        kill -0 "${wrappers[r]}" 2>/dev/null && continue
        wait "${wrappers[r]}"
        rc=$?
        unset "running[$r]"
        dt=$(echo "$(date +%s.%N) - $t_kill" | bc)
        msg=$(grep -m1 'collbench: rank' "$logdir/rank$r.log")
        echo "rank $r: exit $rc after ${dt} s: $msg"
        if [ "$rc" != 2 ]; then
            echo "FAIL: rank $r exited with $rc, expected 2 (a failed collective)" >&2
            fail=1
        fi
        if ! printf '%s\n' "$msg" | grep -q 'AllReduce' ||
           ! printf '%s\n' "$msg" | grep -Eq "rank $victim([^0-9]|$)"; then
            echo "FAIL: rank $r's error does not name the all-reduce and rank $victim" >&2
            fail=1
        fi
    done
    now=$(date +%s.%N)
    if [ ${#running[@]} -gt 0 ] && [ "$(echo "$now - $t_kill > $limit" | bc)" = 1 ]; then
        echo "FAIL: ranks ${!running[*]} still running ${limit} s after the kill" >&2
        for r in "${!running[@]}"; do tail -n 5 "$logdir/rank$r.log" >&2; done
        exit 1
    fi
    [ ${#running[@]} -gt 0 ] && sleep 0.05
done
exit "$fail"
