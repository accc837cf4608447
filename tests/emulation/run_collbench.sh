#!/bin/bash
# run_collbench.sh: run collbench over K emulated nodes (network namespaces, see emunet.sh) with
# one process per rank, `collbench --rank R --nranks N`, and check that the inter-node bytes really
# crossed the veth links (not shared memory, which the namespaces still share).
#
#   run_collbench.sh [options] [--] [collbench args]     (default: all_reduce -b 8 -e 4M -f 4 ...)
#     --nodes K        emulated nodes (2)
#     --np N           ranks, in contiguous blocks per node, rank 0 on node 0 (4)
#     --layout A,B,..  ranks per node instead of even blocks (3,1: a node of 3 and one of 1);
#                      sets --nodes and --np
#     --rate R         tc tbf cap per link and direction, tc syntax (1gbit, or R0,R1 per link);
#                      default unshaped
#     --mtu M          MTU of every link (1500; 9000: jumbo frames)
#     --links L        links per node, one per rail (1); with L > 1 the ranks get
#                      STRATA_RAIL_IFNAMES=emu0,..,emu<L-1> (unless set) and the byte check also
#                      requires every link of a node to carry at least 1/(4L) of its inter-node bytes
#     --collbench P    the binary (default: $COLLBENCH, ./collbench, or the tree's top ./collbench)
#     --port P         bootstrap port on node 0 (random)
#     --timeout S      seconds before ranks are killed (600); the job then names the ranks still
#                      running and stops them (emunet_job_wait), so a call never hangs
#     --link-down K:L  set link L of node K down once the network is up (a rail whose link is
#                      down: init must fail, naming the interface)
#     --link-cut K:L   cut link L of node K once the network is up: its carrier stays on, its
#                      switch port forwards nothing (init must fail, naming the unreachable peer)
#     --hostid         also set STRATA_HOSTID=node<k> (default: identity from the UTS hostname)
#     --bind           give each emulated node its own CPUs and pin its ranks to them (taskset),
#                      as on real nodes, where no two nodes share a core (with fewer allowed CPUs
#                      than nodes, nodes k and k+C share one; tests/emulation/emunet.sh
#                      emunet_node_cpu). Unpinned, launches of the same compare differed by up to
#                      70 % at 0.1-0.3 ms; the slowest launch over the fastest at 1-16 KiB was up
#                      to 1.6x with rank r on CPU r mod C (both nodes' leaders on one core) and up
#                      to 1.3x per node (2 nodes x 2 ranks, 2 CPUs, 6 and 11 launches; one of
#                      those 11 also ran 64 KiB 2.1x slow)
#     --no-bytes-check skip the byte-counter check (skipped by itself under STRATA_NET=verbs: the
#                      stand-in libibverbs moves bytes between processes, not over the links)
#     --logdir D       keep every rank's output in D (default: a temporary folder, removed)
#     --quiet          print rank 0's table only on failure
# Every rank inherits the environment, so STRATA_* and UCX_* settings pass through. Defaults set
# here when unset: STRATA_SOCKET_IFNAME=<link>, UCX_NET_DEVICES=<link> (network traffic on the
# veth only), STRATA_BOOTSTRAP_TIMEOUT=60s.
# Exit: 0 success, 1 failure (a rank failed, #wrong, or too few bytes on the links), 77 skip
# (not root, no network namespaces), 99 setup error (automake's hard error).
set -u

here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
# shellcheck source=emunet.sh
. "$here/emunet.sh"

nodes=2 np=4 rate="" mtu="" links=1 collbench=${COLLBENCH:-} port="" tmo=600 hostid=0 bytes_check=1
bind=0 link_down="" link_cut=""
logdir="" keep_logs=0 quiet=0
while [ $# -gt 0 ]; do
    case $1 in
        --nodes) nodes=$2; shift 2 ;;
        --np) np=$2; shift 2 ;;
        --layout)
            export EMUNET_LAYOUT=$2
            IFS=, read -r -a lay <<<"$2"
            nodes=${#lay[@]} np=0
            for c in "${lay[@]}"; do
                case $c in ''|*[!0-9]*|0) echo "run_collbench: --layout $2: counts above 0" >&2; exit 99 ;; esac
                np=$((np + c))
            done
            shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --links) links=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        --collbench) collbench=$2; shift 2 ;;
        --port) port=$2; shift 2 ;;
        --timeout) tmo=$2; shift 2 ;;
        --hostid) hostid=1; shift ;;
        --link-down) link_down=$2; shift 2 ;;
        --link-cut) link_cut=$2; shift 2 ;;
        --bind) bind=1; shift ;;
        --no-bytes-check) bytes_check=0; shift ;;
        --logdir) logdir=$2; keep_logs=1; shift 2 ;;
        --quiet) quiet=1; shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        --) shift; break ;;
        *) break ;;
    esac
done
if [ $# -eq 0 ]; then
    set -- all_reduce -b 8 -e 4M -f 4 -n 5 -w 2 -c 1
fi
case $tmo in ''|*[!0-9]*|0) echo "run_collbench: --timeout takes a positive number of seconds" \
                                 "('$tmo')" >&2; exit 99 ;; esac
for spec in "$link_down" "$link_cut"; do
    case $spec in ''|[0-9]*:[0-9]*) ;; *) echo "run_collbench: --link-down and --link-cut take" \
                                             "NODE:LINK ('$spec')" >&2; exit 99 ;; esac
done

why=$(emunet_unavailable)
if [ -n "$why" ]; then
    echo "SKIP: emulated nodes need network namespaces: $why"
    exit 77
fi
case "$nodes$np" in *[!0-9]*) echo "run_collbench: --nodes and --np are numbers" >&2; exit 99 ;; esac
if [ "$np" -lt "$nodes" ] || [ "$nodes" -lt 1 ]; then
    echo "run_collbench: need 1 <= nodes <= ranks (nodes $nodes, ranks $np)" >&2; exit 99
fi

# collbench: explicit, else the build folder we run from (make check runs in the build tree),
# else the source tree's top.
if [ -z "$collbench" ]; then
    for c in ./collbench "$here/../../collbench"; do
        [ -x "$c" ] && { collbench=$c; break; }
    done
fi
if [ -z "$collbench" ] || [ ! -x "$collbench" ]; then
    echo "run_collbench: collbench not found (build it, or set COLLBENCH / --collbench)" >&2
    exit 99
fi
collbench=$(cd "$(dirname "$collbench")" && pwd)/$(basename "$collbench")

emunet_job_start run_collbench "$nodes" "$rate" "$links" "$mtu" || exit 99
[ -n "$port" ] || port=$(emunet_root_port)
if [ -n "$link_down" ]; then
    emunet_link_set "${link_down%%:*}" "${link_down#*:}" down ||
        { echo "run_collbench: --link-down $link_down failed" >&2; exit 99; }
fi
if [ -n "$link_cut" ]; then
    emunet_link_set "${link_cut%%:*}" "${link_cut#*:}" cut ||
        { echo "run_collbench: --link-cut $link_cut failed" >&2; exit 99; }
fi

# A libtool wrapper relinks (or at least resolves) on first use; do that once, not N times at once.
if head -c 4096 "$collbench" 2>/dev/null | grep -q 'libtool'; then
    timeout 30 "$collbench" --help >/dev/null 2>&1 </dev/null
fi

# Byte counters of every link of every node: [k*links + l].
declare -a lrx0 ltx0
for ((k = 0; k < nodes; k++)); do
    for ((l = 0; l < links; l++)); do
        lrx0[k * links + l]=$(emunet_ifbytes "$k" rx "$l")
        ltx0[k * links + l]=$(emunet_ifbytes "$k" tx "$l")
    done
done
rail_ifnames=""
if [ "$links" -gt 1 ]; then
    for ((l = 0; l < links; l++)); do rail_ifnames="$rail_ifnames${rail_ifnames:+,}emu$l"; done
fi

if [ "${STRATA_NET:-}" = verbs ] && [ "$bytes_check" = 1 ]; then
    # RDMA writes of the stand-in libibverbs (tests/fakeverbs) copy between the processes, not
    # over the veth links; its own port counters (fakeverbs-ctl stats) say what crossed
    bytes_check=0
    echo "# run_collbench: STRATA_NET=verbs: no veth byte check (the stand-in's RDMA bypasses" \
         "the links; fakeverbs-ctl stats counts its ports)"
fi
echo "# run_collbench: $np ranks on $nodes emulated nodes${rate:+, links capped at $rate}," \
     "root ${EMUNET_SUBNET}.1:$port, interface $EMUNET_IF"
echo "# collbench $*"
t_start=$(date +%s.%N)
emunet_rank_env
for ((r = 0; r < np; r++)); do
    k=${node_of[r]}
    envs=(STRATA_COMM_ID="${EMUNET_SUBNET}.1:$port" "${emunet_env[@]}")
    [ -n "$rail_ifnames" ] && envs+=(STRATA_RAIL_IFNAMES="${STRATA_RAIL_IFNAMES:-$rail_ifnames}")
    [ "$hostid" = 1 ] && envs+=(STRATA_HOSTID="node$k")
    pin=()
    if [ "$bind" = 1 ]; then
        emunet_node_cpu "$k" "${local_of[r]}" "$nodes"
        pin=(taskset -c "$emunet_cpu")
    fi
    emunet_run "$k" "${pin[@]}" env "${envs[@]}" timeout -k 10 "$tmo" \
        "$collbench" --rank "$r" --nranks "$np" "$@" </dev/null >"$logdir/rank$r.log" 2>&1 &
    rank_pids[r]=$!
done

emunet_job_wait "$tmo"
t_end=$(date +%s.%N)

declare -a rx tx lrx
for ((k = 0; k < nodes; k++)); do
    rx[k]=0 tx[k]=0
    for ((l = 0; l < links; l++)); do
        i=$((k * links + l))
        lrx[i]=$(( $(emunet_ifbytes "$k" rx "$l") - lrx0[i] ))
        rx[k]=$(( rx[k] + lrx[i] ))
        tx[k]=$(( tx[k] + $(emunet_ifbytes "$k" tx "$l") - ltx0[i] ))
    done
done

status=0
if [ "$quiet" = 0 ] || [ "$failed" = 1 ]; then
    cat "$logdir/rank0.log"
fi
for ((r = 0; r < np; r++)); do
    if [ "${rank_rc[r]}" != 0 ]; then
        status=1
        if [ "$r" != 0 ]; then
            echo "---- rank $r (node ${node_of[r]}), exit ${rank_rc[r]}, last lines:"
            tail -n 20 "$logdir/rank$r.log"
        fi
    fi
done
printf '# ranks done in %s s; exit statuses:' \
    "$(awk -v a="$t_start" -v b="$t_end" 'BEGIN { printf "%.1f", b - a }')"
for ((r = 0; r < np; r++)); do printf ' %s' "${rank_rc[r]}"; done
echo

# ---- bytes on the links -------------------------------------------------------------------------
# Lower bound, per node, of what must arrive over its link. It holds for any algorithm: a node
# needs, for every element of its result, information from the other nodes' ranks. S is the
# table's size column (the largest buffer of the call: the gathered total for all_gather, the
# scattered total for reduce_scatter); n ranks, n_k of them on node k:
#   all_reduce      S                      every node needs all S bytes of the sum
#   all_gather      S * (n - n_k) / n      the other nodes' blocks
#   reduce_scatter  S * n_k / n            the node's own shards, summed with the others' inputs
#   broadcast       S on every node but the root's
#   reduce          S on the root's node
#   sendrecv        S on every node        rank r receives from r-1: one pair crosses into each node
# Counted: the timed iterations (-n) of every row only; warmup, check calls and the second
# (in-place) half of each row come on top, so the bound is conservative. Measured: rx bytes of the
# node's veth, payload plus headers. The collective of each row comes from collbench's
# "# Collective test starting: <coll>_perf" lines, so `all` and lists are checked too.
bytes_check_run()
{
    local coll=$1 iters="" a prev="" k layout="" bad=0 report
    for a in "$@"; do
        case $prev in -n|--iters) iters=$a ;; -t|--coll) coll=$a ;; esac
        case $a in -n[0-9]*) iters=${a#-n} ;; --iters=*) iters=${a#--iters=} ;; esac
        prev=$a
    done
    # The header line ("... warmup iters: 5 iters: 20 agg iters: 1 ...") is the truth.
    a=$(awk '{ for (i = 2; i < NF; i++)
                   if ($i == "iters:" && $(i-1) != "warmup" && $(i-1) != "agg") { print $(i+1); exit } }' \
            "$logdir/rank0.log")
    [ -n "$a" ] && iters=$a
    case $iters in ''|*[!0-9]*) iters=1 ;; esac
    for ((k = 0; k < nodes; k++)); do layout="$layout ${rx[k]}:${tx[k]}"; done
    report=$(awk -v coll="$coll" -v iters="$iters" -v np="$np" -v nodes="$nodes" \
                 -v nodeof="${node_of[*]}" -v links="$layout" '
        function norm(c) { c = tolower(c); gsub(/[-_]/, "", c); sub(/perf$/, "", c); return c }
        BEGIN {
            split(nodeof, no, " "); for (r = 0; r < np; r++) { nodeof_r[r] = no[r + 1]; nk[no[r + 1]]++ }
            split(links, l, " "); for (k = 0; k < nodes; k++) { split(l[k + 1], x, ":"); rx[k] = x[1]; tx[k] = x[2] }
            cur = norm(coll); rows = 0; unknown = ""
        }
        /Collective test starting:/ { cur = norm($NF); next }
        /^#/ { next }
        $1 ~ /^[0-9]+$/ && NF >= 6 {
            s = $1; root = $5 + 0; rows++; rk = (root >= 0 && root < np) ? nodeof_r[root] : 0
            for (k = 0; k < nodes; k++) {
                f = -1
                if (cur == "allreduce") f = 1
                else if (cur == "allgather") f = (np - nk[k]) / np
                else if (cur == "reducescatter") f = nk[k] / np
                else if (cur == "broadcast" || cur == "bcast") f = (k == rk) ? 0 : 1
                else if (cur == "reduce") f = (k == rk) ? 1 : 0
                else if (cur == "sendrecv") f = 1
                if (f < 0) { unknown = cur; f = 0 }
                need[k] += f * s * iters
            }
        }
        END {
            if (rows == 0) { print "# bytes: no table rows in rank 0 output, nothing to check"; exit 1 }
            printf "# bytes over the links: %d rows, %d timed iterations each%s\n", rows, iters,
                   unknown != "" ? " (no bound known for " unknown ")" : ""
            printf "#   %-6s %16s %16s %16s %7s\n", "node", "rx bytes", "tx bytes", "lower bound", "rx/bound"
            bad = 0
            for (k = 0; k < nodes; k++) {
                printf "#   node%-2d %16.0f %16.0f %16.0f %7s\n", k, rx[k], tx[k], need[k],
                       (need[k] > 0) ? sprintf("%.2f", rx[k] / need[k]) : "-"
                trx += rx[k]; tneed += need[k]; if (rx[k] < need[k]) bad = 1
            }
            printf "#   %-6s %16.0f %16s %16.0f %7s\n", "total", trx, "", tneed,
                   (tneed > 0) ? sprintf("%.2f", trx / tneed) : "-"
            if (bad) { print "# FAIL: a node received fewer bytes over its link than the collective" \
                             " needs: inter-node data did not cross the network"; exit 1 }
            print "# bytes: ok, every node received at least its lower bound over its link"
        }' "$logdir/rank0.log")
    bad=$?
    echo "$report"
    return "$bad"
}

# Rails: every link of every node carries a share of the node's inter-node bytes (rail l of the
# node sends and receives through emu<l>); at least 1/(4L) of them, so an idle link fails.
rails_check()
{
    local k l i bad=0 share
    echo "# rails: bytes received per link (STRATA_RAIL_IFNAMES=${STRATA_RAIL_IFNAMES:-$rail_ifnames})"
    for ((k = 0; k < nodes; k++)); do
        printf '#   node%-2d' "$k"
        for ((l = 0; l < links; l++)); do
            i=$((k * links + l))
            share=$(awk -v a="${lrx[i]}" -v t="${rx[k]}" 'BEGIN { printf "%.2f", (t > 0) ? (a / t) : 0 }')
            printf '  emu%d %14s (%s)' "$l" "${lrx[i]}" "$share"
            if [ $(( lrx[i] * 4 * links )) -lt "${rx[k]}" ]; then bad=1; fi
        done
        echo
    done
    if [ "$bad" = 1 ]; then
        echo "# FAIL: a link carried less than 1/(4L) of its node's inter-node bytes: a rail is idle"
        return 1
    fi
    echo "# rails: ok, every link carried its share"
}

# collbench's own view of the layout: as many nodes as we emulate, or the identity is broken.
seen_nodes=$(awk '/^# nRanks [0-9]+ nNodes [0-9]+/ { print $5; exit }' "$logdir/rank0.log")
if [ "$status" = 0 ] && [ -n "$seen_nodes" ] && [ "$seen_nodes" != "$nodes" ]; then
    echo "# FAIL: collbench saw $seen_nodes node(s), $nodes emulated"
    status=1
fi

if [ "$bytes_check" = 1 ] && [ "$status" = 0 ]; then
    if [ "$nodes" -lt 2 ]; then
        echo "# bytes: one node, nothing must cross a link"
    else
        bytes_check_run "$@" || status=1
        if [ "$links" -gt 1 ]; then
            rails_check || status=1
        fi
    fi
fi
if [ "$quiet" = 1 ] && [ "$status" != 0 ] && [ "$failed" = 0 ]; then
    echo "---- rank 0"
    cat "$logdir/rank0.log"
fi
[ "$keep_logs" = 1 ] && echo "# logs in $logdir"
exit "$status"
