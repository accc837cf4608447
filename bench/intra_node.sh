#!/bin/bash
# intra_node.sh: one node, 2 and 4 ranks, float sum all-reduce, 4 KiB to 256 MiB: strata against
# Open MPI's MPI_Allreduce (btl vader) and Gloo (tcp), and against the memory-bandwidth ceilings
# of this machine, measured in the same run (memcpy_bw.c with one thread per rank; the traffic
# models are in bench/README.md). The output starts with the machine (CPU, cores, hypervisor, L3,
# memory, kernel, Open MPI, oversubscription). Columns, busbw in GB/s from the median time of
# --reps runs:
#   strata   collbench -np N (default algorithm: whichever path strata takes for malloc buffers)
#   s.copy   the same with STRATA_CMA=0: the copying path forced (once strata has cross-memory
#            attach; an older strata ignores the variable and s.copy runs what strata runs)
#   s.hier   the same with STRATA_ALGO=hier (unavailable where strata has no such algorithm)
#   s.mem    collbench with buffers from strataMemAlloc (HOOK: see --memalloc-args below)
#   ompi     mpirun -np N --mca btl self,vader mpi_allreduce
#   gloo     gloo_allreduce (unavailable without libgloo-dev: --install-gloo)
#   x/y      ratio of busbw (above 1: x is faster)
# Under it, the ceilings (busbw the memory bandwidth allows): ceil.copy for the copying path
# (copy-in, reduce, copy-out: (5n+1) S bytes of traffic for the node), ceil.zc for the single-copy
# one (strataMemAlloc buffers, or cross-memory attach: (3n-1) S), and the fraction of each reached:
# strata against both (the script does not know which path it ran), s.copy and s.hier against
# ceil.copy, s.mem against ceil.zc.
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number.
#
#   bench/intra_node.sh [--np "2 4"] [-b 4K] [-e 256M] [-f 4] [-n 2] [-w 1] [--small-max 1M]
#                       [--small-iters 20] [--no-mpi] [--no-gloo] [--install-gloo]
#                       [--memalloc-args "ARGS"] [common options]
#     --small-max      every run is two sweeps of the same program: sizes up to this one with
#                      --small-iters timed calls (5 warmup), the larger ones with -n and -w (few
#                      calls: at 256 MiB the runtime goes into the calls and collbench's checks);
#                      0: one sweep, -n and -w for every size
#     --install-gloo   when libgloo-dev is missing, apt-get install -y libgloo-dev first (root);
#                      without it a missing Gloo makes the column unavailable, with the reason
#     --memalloc-args  collbench's option(s) that put its buffers in strataMemAlloc memory; by
#                      default taken from `collbench --help` (the first help line that starts
#                      with an option and names strataMemAlloc: today's working tree gives
#                      --mem-alloc), the column is unavailable when there is none
# Exit: 0 it ran (unavailable columns included), 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nps="2 4" minb=4K maxb=256M factor=4 iters=2 warmup=1 use_mpi=1 use_gloo=1 memalloc_args=unset
small_max=1M small_iters=20 install_gloo=""
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --np) nps=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        --small-max) small_max=$2; shift 2 ;;
        --small-iters) small_iters=$2; shift 2 ;;
        --no-mpi) use_mpi=0; shift ;;
        --no-gloo) use_gloo=0; shift ;;
        --install-gloo) install_gloo=install; shift ;;
        --memalloc-args) memalloc_args=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "intra_node: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done

bench_begin intra_node "${argv[@]}"
# shellcheck disable=SC2086
bench_machine $nps
bench_find_collbench

bench_sweeps "$minb" "$maxb" "$factor" "$iters" "$warmup" "$small_max" "$small_iters" 5

# ---- baselines and the memcpy probe, built here -------------------------------------------------
if [ "$use_mpi" = 1 ]; then bench_build_mpi; else BENCH_MPI_WHY="left out (--no-mpi)"; fi
if [ "$use_gloo" = 1 ]; then bench_build_gloo "$install_gloo"; else BENCH_GLOO_WHY="left out (--no-gloo)"; fi
cc -O2 -pthread -o "$BENCH_TMP/memcpy_bw" "$BENCH_HERE/memcpy_bw.c" ||
    bench_die "cannot build memcpy_bw.c with cc"

# ---- HOOK: collbench with strataMemAlloc buffers ---------------------------------------------
# The s.mem column runs collbench with the option that allocates its send and receive buffers
# with strataMemAlloc (zero-copy for the intra-node phases), once collbench has one. Given by
# hand with --memalloc-args, or found in `collbench --help`: the first line that starts with an
# option and names strataMemAlloc gives its long option (else its short one), with 1 appended
# when that line shows a <0/1> value.
if [ "$memalloc_args" = unset ]; then
    memalloc_args=""
    line=$(grep -m1 -i -E '^ *(-[A-Za-z], *)?--?[A-Za-z][-A-Za-z_]*.*strataMemAlloc' \
               "$BENCH_TMP/collbench-help.txt")
    if [ -n "$line" ]; then
        memalloc_args=$(echo "$line" | grep -o -E -- '--[A-Za-z][-A-Za-z_]*' | head -n 1)
        [ -n "$memalloc_args" ] ||
            memalloc_args=$(echo "$line" | grep -o -E -- '-[A-Za-z]' | head -n 1)
        case $line in *"<0/1>"*) memalloc_args="$memalloc_args 1" ;; esac
    fi
fi
bench_log "strataMemAlloc buffers: ${memalloc_args:-no collbench option (s.mem unavailable)}"

# ---- run functions (OUT is the rank-0 table) ---------------------------------------------------
# Each is called once per sweep with the sweep's flags in BENCH_SW.
cb_flags=(-d float -o sum -z 1)
strata1() { bench_exec "$1" "$BENCH_COLLBENCH" -np "$NP" all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
copy1()   { bench_exec "$1" env STRATA_CMA=0 "$BENCH_COLLBENCH" -np "$NP" all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
hier1()   { bench_exec "$1" env STRATA_ALGO=hier "$BENCH_COLLBENCH" -np "$NP" all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
# shellcheck disable=SC2086
mem1()    { bench_exec "$1" "$BENCH_COLLBENCH" -np "$NP" $memalloc_args all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
ompi1()
{
    bench_exec "$1" env TMPDIR="$BENCH_TMP" mpirun --allow-run-as-root --oversubscribe \
        --bind-to none -np "$NP" --mca btl self,vader --mca orte_tmpdir_base "$BENCH_TMP" \
        "$BENCH_MPI" "${BENCH_SW[@]}"
}
gloo1() { BENCH_ARGS=("${BENCH_SW[@]}"); bench_gloo "$1"; }

run_strata() { bench_run_sweeps "$1" strata1; }
run_copy()   { bench_run_sweeps "$1" copy1; }
run_hier()   { bench_run_sweeps "$1" hier1; }
run_mem()
{
    [ -n "$memalloc_args" ] ||
        { bench_unavail "$1" "this collbench has no option for strataMemAlloc buffers (--memalloc-args)"; return; }
    bench_run_sweeps "$1" mem1
}
run_ompi() { [ -n "$BENCH_MPI" ] || { bench_unavail "$1" "$BENCH_MPI_WHY"; return; }; bench_run_sweeps "$1" ompi1; }
run_gloo() { [ -n "$BENCH_GLOO" ] || { bench_unavail "$1" "$BENCH_GLOO_WHY"; return; }; bench_run_sweeps "$1" gloo1; }

bench_log_sweeps
bench_log "strata: collbench -np N all_reduce <sweep> ${cb_flags[*]}   (s.copy: STRATA_CMA=0;" \
          "s.hier: STRATA_ALGO=hier; s.mem: ${memalloc_args:-<option>})"
if timeout 60 "$BENCH_COLLBENCH" --print-config 2>/dev/null </dev/null | grep -q '^STRATA_CMA='; then
    bench_log "s.copy: this strata lists STRATA_CMA (collbench --print-config): =0 forces the copying path"
else
    bench_log "s.copy: this strata does not list STRATA_CMA (collbench --print-config): s.copy runs" \
              "what strata runs"
fi
bench_log "ompi:   mpirun --oversubscribe --bind-to none -np N --mca btl self,vader mpi_allreduce <sweep>"
bench_log "gloo:   N x gloo_allreduce --rank r --size N --store DIR --host 127.0.0.1 <sweep>"
bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * 2(n-1)/n; $BENCH_COL half of each row"

for NP in $nps; do
    BENCH_NP=$NP BENCH_NODES=1
    echo "#"
    echo "# ==== $NP ranks, one node ===="
    # The ceiling, measured now, before and after this block's runs: NP threads copying at once,
    # 5 trials each time; the best trial counts (a ceiling is what the machine can do).
    mc=$("$BENCH_TMP/memcpy_bw" "$NP" auto 5) || bench_die "memcpy_bw failed"
    M1=$(echo "$mc" | awk '{ for (i = 1; i < NF; i++) if ($i == "max") print $(i + 1) }')
    bench_log "memcpy before, $NP threads x $(echo "$mc" | awk '{ printf "%.0f", $5 / 1048576 }') MiB" \
              "at once (L3 $(( $(getconf LEVEL3_CACHE_SIZE 2>/dev/null || echo 0) / 1048576 )) MiB):" \
              "best $M1 GB/s copied (median ${mc#*GB/s })"
    [ "$NP" -gt "$(nproc)" ] &&
        bench_log "note: $NP ranks on $(nproc) CPUs: every side is oversubscribed the same way"
    bench_variant "n${NP}_strata" strata run_strata
    bench_variant "n${NP}_copy" s.copy run_copy
    bench_variant "n${NP}_hier" s.hier run_hier
    bench_variant "n${NP}_mem" s.mem run_mem
    bench_variant "n${NP}_ompi" ompi run_ompi
    bench_variant "n${NP}_gloo" gloo run_gloo
    mc=$("$BENCH_TMP/memcpy_bw" "$NP" auto 5) || bench_die "memcpy_bw failed"
    M2=$(echo "$mc" | awk '{ for (i = 1; i < NF; i++) if ($i == "max") print $(i + 1) }')
    bench_log "memcpy after: best $M2 GB/s copied (median ${mc#*GB/s })"
    M=$(awk -v a="$M1" -v b="$M2" 'BEGIN { print (a > b) ? a : b }')
    ceil_copy=$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * 2 * M / (5 * n + 1) }')
    ceil_zc=$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * 2 * M / (3 * n - 1) }')
    bench_log "ceilings: M = $M GB/s copied (best of both), the node moving 2M bytes/s of memory traffic:"
    bench_log "  ceil.copy, the copying path: per rank (5 + 1/n) S bytes (copy-in 2S, reduce S + S/n," \
              "copy-out 2S): algbw <= 2M / (5n + 1) =" \
              "$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.3f", 2 * M / (5 * n + 1) }')," \
              "busbw <= 2(n-1)/n * 2M/(5n+1) = $ceil_copy GB/s"
    bench_log "  ceil.zc, the single-copy path (strataMemAlloc buffers, or cross-memory attach): per rank" \
              "(3 - 1/n) S (reduce-scatter S + S/n, all-gather 2(n-1)/n S): algbw <= 2M / (3n - 1) =" \
              "$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.3f", 2 * M / (3 * n - 1) }')," \
              "busbw <= 2(n-1)/n * 2M/(3n-1) = $ceil_zc GB/s"
    echo "# $NP ranks: busbw (GB/s) and ratios of busbw"
    bench_table "$NP" "" "n${NP}_strata n${NP}_copy n${NP}_hier n${NP}_mem n${NP}_ompi n${NP}_gloo" \
        "n${NP}_strata/n${NP}_ompi n${NP}_copy/n${NP}_ompi n${NP}_hier/n${NP}_ompi n${NP}_mem/n${NP}_ompi n${NP}_strata/n${NP}_gloo n${NP}_strata/n${NP}_copy" \
        ""
    echo "# $NP ranks: memory-bandwidth ceilings (busbw, GB/s) and the fraction of them reached"
    bench_ceil_table "$NP" "ceil.copy=$ceil_copy ceil.zc=$ceil_zc" \
        "n${NP}_strata@ceil.copy n${NP}_strata@ceil.zc n${NP}_copy@ceil.copy n${NP}_hier@ceil.copy n${NP}_mem@ceil.zc"

done
bench_end
