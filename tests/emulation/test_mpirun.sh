#!/bin/bash
# test_mpirun.sh: collbench under Open MPI's mpirun across emulated nodes: 2 namespaces x 2 ranks.
#
# The recipe (Open MPI 4.1): mpirun itself runs inside node0's namespace (the root namespace has
# no route to the nodes, and only our namespaces may carry traffic); its launch agent,
# ns-agent.sh, replaces ssh and starts orted inside the other nodes' namespaces with their UTS
# hostnames; the hostfile names the nodes by those hostnames (node0, node1), so mpirun treats node0
# as local and reaches node1 through the agent; orted calls back over TCP to 10.77.0.1.
#     mpirun --allow-run-as-root --oversubscribe -np 4 --hostfile H \
#         --mca plm_rsh_agent tests/emulation/ns-agent.sh --mca plm_rsh_no_tree_spawn 1 \
#         --mca oob_tcp_if_include 10.77.0.0/24 --mca btl self,vader,tcp \
#         --mca btl_tcp_if_include 10.77.0.0/24 --mca orte_tmpdir_base <tmp> -x EMUNET_ID ...
# Step 1 launches `hostname` (checks the recipe alone: 2 ranks on node0, 2 on node1); step 2 runs
# collbench all_reduce, small sizes, rank and size from OMPI_COMM_WORLD_*, STRATA_COMM_ID set to
# rank 0's node, and needs exit 0 (collbench exits non-zero on any #wrong).
#
#   test_mpirun.sh [--collbench P] [--program "cmd args"] [--timeout S]
#     --program  run this instead of collbench in step 2 (a stand-in such as an MPI hello world)
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces, no mpirun), 99 no collbench.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

collbench=${COLLBENCH:-} program="" tmo=300
while [ $# -gt 0 ]; do
    case $1 in
        --collbench) collbench=$2; shift 2 ;;
        --program) program=$2; shift 2 ;;
        --timeout) tmo=$2; shift 2 ;;
        *) echo "test_mpirun: unknown argument $1" >&2; exit 99 ;;
    esac
done

why=$(emunet_unavailable)
if [ -n "$why" ]; then echo "SKIP: emulated nodes need network namespaces: $why"; exit 77; fi
if ! command -v mpirun >/dev/null 2>&1; then echo "SKIP: mpirun (openmpi-bin) not installed"; exit 77; fi
if ! mpirun --version 2>/dev/null | grep -q "Open MPI"; then
    echo "SKIP: mpirun is not Open MPI's (the launch agent recipe is Open MPI's)"; exit 77
fi
if [ -z "$program" ]; then
    if [ -z "$collbench" ]; then
        for c in ./collbench "$here/../../collbench"; do [ -x "$c" ] && { collbench=$c; break; }; done
    fi
    if [ -z "$collbench" ] || [ ! -x "$collbench" ]; then
        echo "test_mpirun: collbench not found (build it, or set COLLBENCH / --collbench)" >&2
        exit 99
    fi
    collbench=$(cd "$(dirname "$collbench")" && pwd)/$(basename "$collbench")
fi

emunet_cleanup_stale 2>/dev/null
export EMUNET_ID="st$$"
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-emu.$$.XXXXXX")
cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    emunet_down "$EMUNET_ID"
    emunet_shm_cleanup "$tmp/shm-before"
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

emunet_shm_snapshot "$tmp/shm-before"
emunet_up 2 >"$tmp/network.txt" || { echo "test_mpirun: cannot create the network" >&2; exit 99; }
printf 'node0 slots=2\nnode1 slots=2\n' >"$tmp/hostfile"
port=$(emunet_root_port)
export NS_AGENT_LOG="$tmp/agent.log"

# mpirun in node0; session directories in $tmp (removed with it, even after a crash of orted).
mpirun_ns()
{
    emunet_run 0 env TMPDIR="$tmp" timeout -k 10 "$tmo" \
        mpirun --allow-run-as-root --oversubscribe -np 4 --hostfile "$tmp/hostfile" \
        --mca plm_rsh_agent "$here/ns-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "${EMUNET_SUBNET}.0/24" \
        --mca btl self,vader,tcp --mca btl_tcp_if_include "${EMUNET_SUBNET}.0/24" \
        --mca orte_tmpdir_base "$tmp" -x EMUNET_ID -x NS_AGENT_LOG "$@"
}

fails=0
# ---- step 1: the launch recipe alone --------------------------------------------------------
mpirun_ns sh -c 'echo "$OMPI_COMM_WORLD_RANK $(hostname)"' >"$tmp/step1.out" 2>&1
rc=$?
placement=$(sort -n "$tmp/step1.out" | awk '/^[0-9]+ node[0-9]+$/ { printf "%s:%s ", $1, $2 }')
echo "step 1: mpirun across namespaces, exit $rc, ranks on: $placement"
if [ "$rc" != 0 ] || [ "$placement" != "0:node0 1:node0 2:node1 3:node1 " ]; then
    echo "FAIL: expected 0:node0 1:node0 2:node1 3:node1"
    cat "$tmp/step1.out"
    [ -f "$NS_AGENT_LOG" ] && { echo "---- agent log"; cat "$NS_AGENT_LOG"; }
    exit 1
fi

# ---- step 2: collbench (or the stand-in) ------------------------------------------------------
if [ -n "$program" ]; then
    # shellcheck disable=SC2086
    set -- $program
    echo "step 2: $program (stand-in)"
else
    set -- "$collbench" all_reduce -b 8 -e 1M -f 4 -n 5 -w 2 -c 1
    echo "step 2: collbench all_reduce, 4 ranks, 2 nodes, root ${EMUNET_SUBNET}.1:$port"
fi
mpirun_ns -x STRATA_COMM_ID="${EMUNET_SUBNET}.1:$port" \
    -x STRATA_SOCKET_IFNAME="${STRATA_SOCKET_IFNAME:-$EMUNET_IF}" \
    -x STRATA_BOOTSTRAP_TIMEOUT="${STRATA_BOOTSTRAP_TIMEOUT:-60s}" \
    -x UCX_NET_DEVICES="${UCX_NET_DEVICES:-$EMUNET_IF}" \
    ${STRATA_DEBUG:+-x STRATA_DEBUG} ${UCX_TLS:+-x UCX_TLS} \
    "$@" >"$tmp/step2.out" 2>&1
rc=$?
cat "$tmp/step2.out"
if [ "$rc" != 0 ]; then
    echo "FAIL: step 2 exited with $rc$([ "$rc" = 124 ] && echo " (timeout ${tmo}s)")"
    fails=1
elif [ -z "$program" ] && ! awk '!/^#/ && $1 ~ /^[0-9]+$/ { n++ } END { exit !(n > 0) }' \
        "$tmp/step2.out"; then
    echo "FAIL: no result rows in collbench's output"
    fails=1
fi
[ "$fails" = 0 ] && echo "PASS"
exit "$fails"
