#!/bin/bash
# hier_vs_ring.sh: 2 emulated nodes x 4 ranks, one 1 Gbit/s link per node: strata's hierarchical
# all-reduce (STRATA_ALGO=hier) against its flat ring (STRATA_ALGO=ring), 1 MiB to 128 MiB, and
# both against the link ceiling. The ring crosses each link with 2(n-1)/n of the buffer in each
# direction (1.75 S for n = 8), the hierarchy with 2(N-1)/N (S for N = 2), so on a link-bound
# network hier should approach 1.75x the ring. Columns, busbw in GB/s from the median of --reps:
#   hier, ring   collbench --rank r --nranks 8 with that STRATA_ALGO, one process per rank
#   hier/ring    ratio; ceiling: link ceiling (bench/README.md); x/ceil: fraction of it
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number. Where strata has
# no STRATA_ALGO=hier yet, its column is reported unavailable and the ring's still runs.
# --coll runs another collective the same way (busbw with nccl-tests' factor of that collective):
#   reduce_scatter, all_gather  the ring's half: each link carries (n-1)/n S per direction (ring
#       busbw <= rate), the hierarchy (N-1)/N S (busbw <= (n-1)/n * rate * N/(N-1), 1.75 * rate
#       for 2 x 4 ranks): hier should approach 1.75x the ring, as for all_reduce
#   broadcast, reduce  (root 0) hier's chain over the nodes against the flat chain that
#       STRATA_ALGO=ring runs for them (column "chain"): both send the buffer once over each
#       link, busbw = algbw <= rate for any algorithm, so hier/chain should be about 1
#
#   bench/hier_vs_ring.sh [--coll all_reduce] [--rate 1gbit] [--mtu 1500] [-b 1M] [-e 128M] [-f 2]
#                         [-n 1] [-w 1] [--small-max 8M] [--small-iters 5] [common options]
# Each run is two sweeps: up to --small-max with --small-iters timed calls (2 warmup), the larger
# sizes with -n and -w (--small-max 0: one sweep). Few calls for the large sizes: one 128 MiB
# ring all-reduce takes ~2 s at 1 Gbit/s, and collbench's checks of 8 ranks cost as much again.
# Needs root and network namespaces (exit 77 otherwise, with the reason).
# Exit: 0 it ran (unavailable columns included), 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

coll=all_reduce rate=1gbit mtu=1500 minb=1M maxb=128M factor=2 iters=1 warmup=1 small_max=8M small_iters=5
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --coll) coll=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        --small-max) small_max=$2; shift 2 ;;
        --small-iters) small_iters=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "hier_vs_ring: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done

case $coll in
    all_reduce|reduce_scatter|all_gather) flat=ring ;;
    broadcast|reduce) flat=chain ;;
    *) echo "hier_vs_ring: --coll must be all_reduce, reduce_scatter, all_gather, broadcast or reduce" >&2
       exit 2 ;;
esac

bench_begin hier_vs_ring "${argv[@]}"
bench_find_collbench
if [ "$mtu" = 1500 ]; then bench_net_up 2 "$rate"; else bench_net_up 2 "$rate" 1 "$mtu"; fi
BENCH_NP=8 BENCH_NODES=2
bench_busbw_of "$coll"
bench_sweeps "$minb" "$maxb" "$factor" "$iters" "$warmup" "$small_max" "$small_iters" 2

# -o sum for the reducing collectives only (broadcast and all_gather have no operation)
opargs=()
case $coll in all_reduce|reduce_scatter|reduce) opargs=(-o sum) ;; esac
one() { BENCH_ARGS=("$coll" "${BENCH_SW[@]}" -d float "${opargs[@]}" -z 1); bench_emu_collbench "$1"; }
run_hier() { BENCH_ENV=(STRATA_ALGO=hier); bench_run_sweeps "$1" one; }
run_ring() { BENCH_ENV=(STRATA_ALGO=ring); bench_run_sweeps "$1" one; }

bps=$(emunet_rate_bps "$rate")
ring_ceil=$(awk -v b="$bps" 'BEGIN { printf "%.4f", b / 8 / 1e9 }')
bench_log_sweeps
bench_log "per rank r: STRATA_ALGO=hier|ring collbench --rank r --nranks 8 $coll <sweep> -d float${opargs[*]:+ ${opargs[*]}} -z 1"
bench_log "          (in node r/4; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
case $coll in
all_reduce)
    ceil=$(awk -v b="$bps" 'BEGIN { n = 8; N = 2; printf "%.4f", 2 * (n - 1) / n * b / 8 / 1e9 * N / (2 * (N - 1)) }')
    bench_log "link ceiling: busbw <= 2(n-1)/n * rate * N/(2(N-1)) = 1.75 * $rate = $ceil GB/s (n = 8, N = 2);" \
              "a node-contiguous ring sends 1.75 S per link and direction: busbw <= rate = $ring_ceil GB/s"
    factor_txt="2(n-1)/n" ;;
reduce_scatter|all_gather)
    ceil=$(awk -v b="$bps" 'BEGIN { n = 8; N = 2; printf "%.4f", (n - 1) / n * b / 8 / 1e9 * N / (N - 1) }')
    bench_log "link ceiling: busbw <= (n-1)/n * rate * N/(N-1) = 1.75 * $rate = $ceil GB/s (n = 8, N = 2: every node" \
              "moves (N-1)/N S over its link); a node-contiguous ring sends (n-1)/n S = 0.875 S per link and" \
              "direction: busbw <= rate = $ring_ceil GB/s"
    factor_txt="(n-1)/n" ;;
broadcast|reduce)
    ceil=$ring_ceil
    bench_log "link ceiling: busbw = algbw <= rate = $ceil GB/s for any algorithm (every non-root node receives," \
              "for reduce the root's node receives, S over its link); hier's chain over the nodes and the flat" \
              "chain of STRATA_ALGO=ring both send S once over each link and direction"
    factor_txt="1" ;;
esac
if [ "$mtu" != 1500 ]; then
    bench_log "links at MTU $mtu: TCP payload is at most ($mtu-52)/($mtu+14) =" \
              "$(awk -v m="$mtu" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }') of the rate"
fi
bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * $factor_txt; $BENCH_COL half of each row"
bench_variant hier hier run_hier
bench_variant ring "$flat" run_ring
if [ "$coll" = all_reduce ]; then
    echo "# 2 nodes x 4 ranks, one $rate link per node: busbw (GB/s), hier/ring, link ceiling"
else
    echo "# $coll, 2 nodes x 4 ranks, one $rate link per node$([ "$mtu" != 1500 ] && echo " (MTU $mtu)"):" \
         "busbw (GB/s), hier/$flat, link ceiling"
fi
bench_table 8 "$ceil" "hier ring" "hier/ring" "hier ring"
bench_end
