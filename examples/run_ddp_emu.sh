#!/bin/bash
# run_ddp_emu.sh: run examples/ddp_digits.py on emulated nodes: one network namespace per node
# (tests/emulation/emunet.sh), joined by veth links through a switch, optionally capped with tc;
# ranks in contiguous blocks per node, rank 0 on node 0. Each rank is started directly with
# torch.distributed's environment (RANK, WORLD_SIZE, LOCAL_RANK, MASTER_ADDR=node 0's address),
# so gloo, strata's bootstrap and UCX all talk over the emulated links.
#
#   sudo examples/run_ddp_emu.sh [options] [--] [ddp_digits.py args]
#     --nodes K       emulated nodes (2)
#     --np N          ranks (4)
#     --rate R        tc tbf cap of every link, both directions (tc syntax: 1gbit); default none
#     --mtu M         MTU of the links (1500)
#     --timeout S     seconds before the ranks are killed (600)
#     --logdir D      keep every rank's output in D (default: a temporary folder, removed)
#     --python P      interpreter (/usr/bin/python3)
# Example: sudo examples/run_ddp_emu.sh --rate 1gbit -- --comm strata --epochs 3
# Prints rank 0's output, the bytes each node received over its link, and the last lines of any
# failed rank. Environment: STRATA_LIBRARY (else the package looks for the build, see
# python/strata/_lib.py), STRATA_* and UCX_* pass through. Everything created (namespaces,
# processes, /dev/shm segments of the ranks, the log folder) is removed on exit, also on failure
# or interruption; a SIGKILLed run is cleaned by the next one (emunet.sh cleanup-stale).
# Exit: 0 success, 1 a rank failed, 77 no network namespaces (not root), 2 usage or setup error.
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
# shellcheck source=../tests/emulation/emunet.sh
. "$top/tests/emulation/emunet.sh"

nodes=2 np=4 rate="" mtu="" tmo=600 logdir="" keep_logs=0 python=/usr/bin/python3
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        --timeout) tmo=$2; shift 2 ;;
        --logdir) logdir=$2; keep_logs=1; shift 2 ;;
        --python) python=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
case "$nodes$np$tmo" in
    *[!0-9]*|"") echo "run_ddp_emu: --nodes, --np, --timeout are numbers" >&2; exit 2 ;;
esac
if [ "$nodes" -lt 1 ] || [ "$np" -lt "$nodes" ]; then
    echo "run_ddp_emu: need 1 <= nodes <= ranks (nodes $nodes, ranks $np)" >&2; exit 2
fi
why=$(emunet_unavailable)
if [ -n "$why" ]; then
    echo "SKIP: emulated nodes need network namespaces: $why"
    exit 77
fi

emunet_job_start run_ddp_emu "$nodes" "$rate" 1 "$mtu" || exit 2
port=$(emunet_root_port)
master=$(emunet_ip 0)
declare -a rx0
for ((k = 0; k < nodes; k++)); do rx0[k]=$(emunet_ifbytes "$k" rx); done

echo "# run_ddp_emu: $np ranks on $nodes emulated nodes${rate:+, links capped at $rate}," \
     "master $master:$port, interface $EMUNET_IF"
emunet_rank_env
for ((r = 0; r < np; r++)); do
    k=${node_of[r]}
    envs=(RANK="$r" WORLD_SIZE="$np" LOCAL_RANK="${local_of[r]}" GROUP_RANK="$k"
          LOCAL_WORLD_SIZE="${local_size[k]}"
          MASTER_ADDR="$master" MASTER_PORT="$port" OMP_NUM_THREADS=1
          GLOO_SOCKET_IFNAME="$EMUNET_IF" "${emunet_env[@]}"
          PYTHONPATH="$top/python${PYTHONPATH:+:$PYTHONPATH}" PYTHONDONTWRITEBYTECODE=1)
    emunet_run "$k" env "${envs[@]}" timeout -k 10 "$tmo" \
        "$python" "$top/examples/ddp_digits.py" "$@" </dev/null >"$logdir/rank$r.log" 2>&1 &
    rank_pids[r]=$!
done

emunet_job_wait "$tmo"

cat "$logdir/rank0.log"
status=0
for ((r = 0; r < np; r++)); do
    if [ "${rank_rc[r]}" != 0 ]; then
        status=1
        if [ "$r" != 0 ]; then
            echo "---- rank $r (node ${node_of[r]}), exit ${rank_rc[r]}, last lines:"
            tail -n 20 "$logdir/rank$r.log"
        fi
    fi
done
printf '# bytes received over the links:'
for ((k = 0; k < nodes; k++)); do
    printf ' node%d %s' "$k" "$(( $(emunet_ifbytes "$k" rx) - rx0[k] ))"
done
echo
[ "$keep_logs" = 1 ] && echo "# logs in $logdir"
exit "$status"
