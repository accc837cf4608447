#!/bin/bash
# rails.sh: 2 emulated nodes x 2 ranks, two 1 Gbit/s links per node (emunet.sh up 2 --links 2:
# emu0 on 10.77.0.0/24, emu1 on 10.77.1.0/24, each its own switch and rate): strata's all-reduce
# with one rail per link (STRATA_RAIL_IFNAMES=emu0,emu1: rail l uses interface l) against the
# two-link ceiling (sum of the rates, bench/README.md), 8 MiB to 64 MiB, and against the same
# run confined to one link. Columns, busbw in GB/s from the median of --reps runs:
#   rails       STRATA_RAIL_IFNAMES=emu0,emu1, UCX_NET_DEVICES=emu0,emu1
#   one-link    STRATA_RAIL_IFNAMES unset, UCX_NET_DEVICES=emu0 (the one-link baseline)
#   rails/one-link   ratio (2 at best); ceiling: the two-link ceiling; x/ceil: fraction of it
# Under the table: the bytes each link received during each variant (both links must carry).
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number.
#
#   bench/rails.sh [--rate 1gbit[,R1]] [--mtu 9000] [-b 8M] [-e 64M] [-f 2] [-n 3] [-w 1] [common options]
#     --mtu  the links' MTU: 9000 (jumbo frames, as in two_nodes.sh: TCP payload 0.993 of the rate;
#            at 1500 it is 0.956, bench/README.md) or 1500
# Needs root and network namespaces (exit 77 otherwise, with the reason).
# Exit: 0 it ran (unavailable columns included), 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=1gbit mtu=9000 minb=8M maxb=64M factor=2 iters=3 warmup=1
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --rate) rate=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "rails: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done

bench_begin rails "${argv[@]}"
bench_find_collbench
bench_net_up 2 "$rate" 2 "$mtu"
BENCH_NP=4 BENCH_NODES=2
if0=$(emunet_ifname 0) if1=$(emunet_ifname 1)
BENCH_ARGS=(all_reduce -b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c 1 -d float
            -o sum -z 1)

run_rails() { BENCH_ENV=(STRATA_RAIL_IFNAMES="$if0,$if1" UCX_NET_DEVICES="${UCX_NET_DEVICES:-$if0,$if1}"); bench_emu_collbench "$1"; }
run_one()   { BENCH_ENV=(UCX_NET_DEVICES="$if0"); bench_emu_collbench "$1"; }

# Bytes received by both nodes on each link, over all runs of a variant.
link_rx() { echo $(( $(emunet_ifbytes 0 rx "$1") + $(emunet_ifbytes 1 rx "$1") )); }
declare -A rx_l0 rx_l1
measure()
{
    local key=$1 label=$2 fn=$3 a0 a1
    a0=$(link_rx "$if0") a1=$(link_rx "$if1")
    bench_variant "$key" "$label" "$fn"
    rx_l0[$key]=$(( $(link_rx "$if0") - a0 )) rx_l1[$key]=$(( $(link_rx "$if1") - a1 ))
}

IFS=, read -r r0 r1 <<<"$rate"
r1=${r1:-$r0}
b0=$(emunet_rate_bps "$r0") b1=$(emunet_rate_bps "$r1")
ceil=$(awk -v a="$b0" -v b="$b1" 'BEGIN { n = 4; N = 2; printf "%.4f", 2 * (n - 1) / n * (a + b) / 8 / 1e9 * N / (2 * (N - 1)) }')
ceil1=$(awk -v a="$b0" 'BEGIN { n = 4; N = 2; printf "%.4f", 2 * (n - 1) / n * a / 8 / 1e9 * N / (2 * (N - 1)) }')
if ! grep -q '^STRATA_RAIL_IFNAMES=' < <(timeout 30 "$BENCH_COLLBENCH" --print-config 2>/dev/null); then
    bench_log "note: this strata does not list STRATA_RAIL_IFNAMES (collbench --print-config): the rails" \
              "row runs without strata's rails, UCX alone sees both links"
fi
bench_log "per rank r: collbench --rank r --nranks 4 ${BENCH_ARGS[*]}   (in node r/2; STRATA_COMM_ID=$(emunet_ip 0):<port>)"
bench_log "rails:    STRATA_RAIL_IFNAMES=$if0,$if1 UCX_NET_DEVICES=${UCX_NET_DEVICES:-$if0,$if1} STRATA_SOCKET_IFNAME=$if0"
bench_log "one-link: UCX_NET_DEVICES=$if0 STRATA_SOCKET_IFNAME=$if0"
bench_log "two-link ceiling: busbw <= 2(n-1)/n * (rate0 + rate1) * N/(2(N-1)) = 1.5 * ($r0 + $r1) = $ceil GB/s;" \
          "one link: $ceil1 GB/s (n = 4, N = 2; at MTU $mtu TCP payload is at most" \
          "$(awk -v m="$mtu" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }') of it)"
bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * 2(n-1)/n; $BENCH_COL half of each row"
measure rails rails run_rails
measure one one-link run_one
echo "# 2 nodes x 2 ranks, two links per node ($r0 + $r1): busbw (GB/s), ratio, two-link ceiling"
bench_table 4 "$ceil" "rails one" "rails/one" "rails one"
for k in rails one; do
    awk -v l="$(cat "$BENCH_TMP/$k.label")" -v a="${rx_l0[$k]}" -v b="${rx_l1[$k]}" -v i0="$if0" -v i1="$if1" 'BEGIN {
        printf "# bytes received over the links during %s (both nodes, all runs): %s %.1f MB, %s %.1f MB (%s: %.0f %%)\n",
               l, i0, a / 1e6, i1, b / 1e6, i1, (a + b > 0) ? 100 * b / (a + b) : 0 }'
done
bench_end
