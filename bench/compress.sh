#!/bin/bash
# compress.sh: the compressed all-reduce (collbench --compress, docs/compression.md) against the
# uncompressed one, 2 emulated nodes x 2 ranks, one 1 Gbit/s link per node, 64 MiB of float by
# default. Every codec runs the same hierarchical algorithm (STRATA_ALGO=hier), so the columns
# differ only in what crosses the network; the ratios codec/none are the speedup the issue's
# acceptance asks of (int8 >= 2.5, sign >= 6, fp16 >= 1.7 at 64 MiB).
# Columns, busbw in GB/s from the median of --reps (nccl-tests' factor 2(n-1)/n on the time of
# the call; for a compressed call that is the effective bandwidth of the full-precision data):
#   none fp16 bf16 int8 topk sign   collbench --rank r --nranks 4 all_reduce --compress <codec>
#   <codec>/none                    the speedup over the uncompressed all-reduce of the same run
# Runs interleave (run 1 of every codec, then run 2, ...) so that a drifting load weighs on every
# column alike. Each run checks its results (-c 1: the first call after a fresh compressor against
# the exact sum within the codec's bound, and bitwise equality on all ranks; collbench --help); a
# variant with #wrong != 0 gets no number.
#
#   bench/compress.sh [--rate 1gbit] [-b 64M] [-e 64M] [-f 2] [-n 3] [-w 1] [--codecs "..."]
#                     [--topk 0.01] [--extra "collbench args"] [common options]
# --extra appends to every collbench command line (e.g. "--phases" to see where the time goes).
# Needs root and network namespaces (exit 77 otherwise, with the reason).
# Exit: 0 it ran, 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=1gbit minb=64M maxb=64M factor=2 iters=3 warmup=1 topk=0.01 extra=""
codecs="none fp16 bf16 int8 topk sign"
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --rate) rate=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        --codecs) codecs=$2; shift 2 ;;
        --topk) topk=$2; shift 2 ;;
        --extra) extra=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "compress: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done
case " $codecs " in *" none "*) ;; *) codecs="none $codecs" ;; esac

bench_begin compress "${argv[@]}"
bench_find_collbench
bench_net_up 2 "$rate"
BENCH_NP=4 BENCH_NODES=2
bench_busbw_of all_reduce
bench_sweeps "$minb" "$maxb" "$factor" "$iters" "$warmup" 0 "$iters" "$warmup"

spec_of() { [ "$1" = topk ] && echo "topk:$topk" || echo "$1"; }
run_codec()
{
    local codec=$1 out=$2
    BENCH_ENV=(STRATA_ALGO=hier)
    # shellcheck disable=SC2206
    BENCH_ARGS=(all_reduce "${BENCH_SW[@]}" -d float -o sum -z 1 --compress "$(spec_of "$codec")" $extra)
    bench_emu_collbench "$out"
}
variants=() ratios=""
for c in $codecs; do
    eval "run_$c() { one_$c() { run_codec $c \"\$1\"; }; bench_run_sweeps \"\$1\" one_$c; }"
    variants+=("$c $(spec_of "$c") run_$c")
    [ "$c" = none ] || ratios="$ratios $c/none"
done

bps=$(emunet_rate_bps "$rate")
ceil=$(awk -v b="$bps" 'BEGIN { n = 4; N = 2; printf "%.4f", 2 * (n - 1) / n * b / 8 / 1e9 * N / (2 * (N - 1)) }')
bench_log_sweeps
bench_log "per rank r: STRATA_ALGO=hier collbench --rank r --nranks 4 all_reduce <sweep> -d float -o sum -z 1 --compress <codec>"
bench_log "          (in node r/2; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
bench_log "uncompressed link ceiling: busbw <= 2(n-1)/n * rate * N/(2(N-1)) = 1.5 * $rate = $ceil GB/s (n = 4, N = 2);" \
          "a codec sending a fraction f of the bytes can reach ceiling / f"
bench_log "median of $BENCH_REPS runs per codec, interleaved; busbw = algbw * 2(n-1)/n; $BENCH_COL half of each row"
bench_interleave "${variants[@]}"
echo "# 2 nodes x 2 ranks, one $rate link per node: busbw (GB/s) of the compressed all-reduce, codec/none"
bench_table 4 "$ceil" "$codecs" "$ratios" "none"
bench_end
