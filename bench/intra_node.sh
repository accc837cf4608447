#!/bin/bash
# intra_node.sh: one node, 2 and 4 ranks, float sum all-reduce, 4 KiB to 256 MiB: strata against
# Open MPI's MPI_Allreduce (btl vader) and Gloo (tcp), and against the memory-bandwidth ceilings
# of this machine, measured in the same run (memcpy_bw.c with one thread per rank; the traffic
# models are in bench/README.md); then the 8-byte latency of each, and the issue's acceptance
# targets as PASS/FAIL lines. The output starts with the machine (CPU, cores, hypervisor, L3,
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
# (copy-in, reduce, copy-out: (5n+1) S bytes of traffic for the node), ceil.zc for a single-copy
# one that reduce-scatters and then all-gathers (strataMemAlloc buffers, or cross-memory attach:
# (3n-1) S), ceil.push for strata's single-copy path on one node, whose owners store each result
# into every output (2n S), and the fraction of each reached: strata against ceil.copy and ceil.zc
# (the script does not know which path it ran), s.copy and s.hier against ceil.copy, s.mem against
# ceil.zc and ceil.push. Then the 8-byte latency: time per call (us), median of --reps
# runs of -b 8 -e 8 -n <--lat-iters> -w 100 -c 1, for every column but s.copy and s.hier, each
# with its time over ompi's (below 1: faster than Open MPI). Then, per rank count, the targets:
#   (a) strata/ompi >= 1.0 at every size
#   (b) strata/ompi >= 1.5 from 4 MiB
#   (c) from 4 MiB: the copying path (s.copy) >= 0.75 of ceil.copy and s.mem >= 0.9 of ceil.zc
#       (and, not a target, s.mem against ceil.push)
#   (lat) 8 B latency: strata <= ompi
# each "PASS (lowest ...)" or "FAIL (...)" naming the sizes below; a target whose column did not
# run FAILs as not measured. A FAIL is a measurement: the exit status says only whether the runs ran.
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number.
#
#   bench/intra_node.sh [--np "2 4"] [-b 4K] [-e 256M] [-f 4] [-n 5] [-w 5] [--small-max 1M]
#                       [--small-iters 20] [--lat-iters 20000] [--no-mpi] [--no-gloo]
#                       [--install-gloo] [--memalloc-args "ARGS"] [common options]
#     --small-max      every run is two sweeps of the same program: sizes up to this one with
#                      --small-iters timed calls (5 warmup), the larger ones with -n and -w (fewer
#                      timed calls: at 256 MiB the runtime goes into the calls and collbench's
#                      checks; 5 warmup calls, as collbench's and nccl-tests' default, because
#                      the first calls after the buffers are filled run slower for every
#                      library: with -w 1 they decided the 4 MiB ratios); 0: one sweep, -n and
#                      -w for every size
#     --lat-iters      timed calls of each 8-byte latency run (100 warmup); 20000: a run of 2000
#                      calls lasts under a millisecond at 0.35 us, where one preemption moves
#                      the mean by a tenth (2 ranks, five runs each: strata 0.29-0.35 us, Open MPI
#                      0.35-0.37; with 20000, three: 0.33-0.34 and 0.37-0.42)
#     --install-gloo   when libgloo-dev is missing, apt-get install -y libgloo-dev first (root);
#                      without it a missing Gloo makes the column unavailable, with the reason
#     --memalloc-args  collbench's option(s) that put its buffers in strataMemAlloc memory; by
#                      default taken from `collbench --help` (the first help line that starts
#                      with an option and names strataMemAlloc: today's working tree gives
#                      --mem-alloc), the column is unavailable when there is none
# Exit: 0 it ran (unavailable columns included, targets PASS or FAIL), 1 a run failed or had
# #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nps="2 4" minb=4K maxb=256M factor=4 iters=5 warmup=5 use_mpi=1 use_gloo=1 memalloc_args=unset
small_max=1M small_iters=20 lat_iters=20000 install_gloo=""
# the acceptance targets: (a) strata/ompi at every size, (b) from tgt_from, (c) fractions of the
# ceilings from tgt_from
tgt_a=1.0 tgt_b=1.5 tgt_from=4M tgt_copy=0.75 tgt_zc=0.9
from_h="4 MiB"    # tgt_from, as printed
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
        --lat-iters) lat_iters=$2; shift 2 ;;
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

# The 8-byte latency: one run of each program with these flags instead of the sweeps.
lat_sw=(-b 8 -e 8 -n "$lat_iters" -w 100 -c 1)
lat_strata() { BENCH_SW=("${lat_sw[@]}"); strata1 "$1"; }
lat_mem()
{
    [ -n "$memalloc_args" ] ||
        { bench_unavail "$1" "this collbench has no option for strataMemAlloc buffers (--memalloc-args)"; return; }
    BENCH_SW=("${lat_sw[@]}"); mem1 "$1"
}
lat_ompi() { [ -n "$BENCH_MPI" ] || { bench_unavail "$1" "$BENCH_MPI_WHY"; return; }; BENCH_SW=("${lat_sw[@]}"); ompi1 "$1"; }
lat_gloo() { [ -n "$BENCH_GLOO" ] || { bench_unavail "$1" "$BENCH_GLOO_WHY"; return; }; BENCH_SW=("${lat_sw[@]}"); gloo1 "$1"; }

# ---- acceptance --------------------------------------------------------------------------------
# why_not KEY...: "not measured: LABEL STATUS" for the first key that did not run, else nothing.
why_not()
{
    local k
    for k in "$@"; do
        bench_ok "$k" || { echo "not measured: $(cat "$BENCH_TMP/$k.label") $(bench_status "$k")"; return; }
    done
}
# ratio_lines A B MIN / frac_lines A CEIL MIN: "value size" per size from MIN (busbw of A over
# B's, or over CEIL; value empty where one has no number at that size).
ratio_lines()
{
    local s x y
    for s in $(bench_sizes_from "$3" "$1" "$2"); do
        x=$(bench_busbw "$1" "$s" "$NP") y=$(bench_busbw "$2" "$s" "$NP")
        awk -v x="$x" -v y="$y" -v s="$s" 'BEGIN { if (x > 0 && y > 0) printf "%.4f %s\n", x / y, s; else print s }'
    done
}
frac_lines()
{
    local s x
    for s in $(bench_sizes_from "$3" "$1"); do
        x=$(bench_busbw "$1" "$s" "$NP")
        awk -v x="$x" -v c="$2" -v s="$s" 'BEGIN { if (x > 0 && c > 0) printf "%.4f %s\n", x / c, s; else print s }'
    done
}
# check FROM LIMIT KEY... < "value size" lines: the verdict (bench_verdict_of), FAIL when a key
# did not run or no size from FROM was measured.
check()
{
    local from=$1 lim=$2 why lines
    shift 2
    lines=$(cat)
    why=$(why_not "$@")
    if [ -n "$why" ]; then echo "FAIL ($why)"
    elif [ -z "$lines" ]; then echo "FAIL (not measured: no size from $from in this sweep)"
    else bench_verdict_of "$lim" <<<"$lines"; fi
}

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
bench_log "8-byte latency: strata, s.mem, ompi, gloo with ${lat_sw[*]} instead of the sweeps"

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
    ceil_push=$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.4f", 2 * (n - 1) / n * M / n }')
    bench_log "ceilings: M = $M GB/s copied (best of both), the node moving 2M bytes/s of memory traffic:"
    bench_log "  ceil.copy, the copying path: per rank (5 + 1/n) S bytes (copy-in 2S, reduce S + S/n," \
              "copy-out 2S): algbw <= 2M / (5n + 1) =" \
              "$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.3f", 2 * M / (5 * n + 1) }')," \
              "busbw <= 2(n-1)/n * 2M/(5n+1) = $ceil_copy GB/s"
    bench_log "  ceil.zc, the single-copy path (strataMemAlloc buffers, or cross-memory attach): per rank" \
              "(3 - 1/n) S (reduce-scatter S + S/n, all-gather 2(n-1)/n S): algbw <= 2M / (3n - 1) =" \
              "$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.3f", 2 * M / (3 * n - 1) }')," \
              "busbw <= 2(n-1)/n * 2M/(3n-1) = $ceil_zc GB/s"
    bench_log "  ceil.push, strata's single-copy path on one node (each owner stores its reduced part into" \
              "every output): per rank 2S (S read, S written): algbw <= M / n =" \
              "$(awk -v M="$M" -v n="$NP" 'BEGIN { printf "%.3f", M / n }')," \
              "busbw <= 2(n-1)/n * M/n = $ceil_push GB/s"
    echo "# $NP ranks: busbw (GB/s) and ratios of busbw"
    bench_table "$NP" "" "n${NP}_strata n${NP}_copy n${NP}_hier n${NP}_mem n${NP}_ompi n${NP}_gloo" \
        "n${NP}_strata/n${NP}_ompi n${NP}_copy/n${NP}_ompi n${NP}_hier/n${NP}_ompi n${NP}_mem/n${NP}_ompi n${NP}_strata/n${NP}_gloo n${NP}_strata/n${NP}_copy" \
        ""
    echo "# $NP ranks: memory-bandwidth ceilings (busbw, GB/s) and the fraction of them reached"
    bench_ceil_table "$NP" "ceil.copy=$ceil_copy ceil.zc=$ceil_zc ceil.push=$ceil_push" \
        "n${NP}_strata@ceil.copy n${NP}_strata@ceil.zc n${NP}_copy@ceil.copy n${NP}_hier@ceil.copy n${NP}_mem@ceil.zc n${NP}_mem@ceil.push"

    # ---- 8-byte latency
    echo "#"
    bench_log "$NP ranks, 8-byte latency: ${lat_sw[*]} (strata, s.mem, ompi, gloo)"
    bench_variant "n${NP}_lat_strata" strata lat_strata
    bench_variant "n${NP}_lat_mem" s.mem lat_mem
    bench_variant "n${NP}_lat_ompi" ompi lat_ompi
    bench_variant "n${NP}_lat_gloo" gloo lat_gloo
    echo "# $NP ranks: 8-byte all-reduce latency, ${lat_sw[*]}: time per call (us), median of $BENCH_REPS" \
         "runs; x/ompi: its time over ompi's (below 1: faster than Open MPI)"
    printf '  %-10s %12s %12s\n' "8 B" "time (us)" "x/ompi"
    t_ompi=$(bench_time "n${NP}_lat_ompi" 8)
    for k in strata mem ompi gloo; do
        k=n${NP}_lat_$k
        if bench_ok "$k"; then
            t=$(bench_time "$k" 8)
            printf '  %-10s %12.2f %12s\n' "$(cat "$BENCH_TMP/$k.label")" "$t" \
                "$(awk -v a="$t" -v b="${t_ompi:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')"
        else
            printf '  %-10s %12s  %s\n' "$(cat "$BENCH_TMP/$k.label")" "-" "$(bench_status "$k")"
        fi
    done

    # ---- acceptance
    echo "#"
    echo "# $NP ranks: acceptance (the medians of $BENCH_REPS runs above):"
    s_=n${NP}_strata o_=n${NP}_ompi
    echo "target (a) strata/ompi >= $tgt_a at every size, $NP ranks:" \
         "$(ratio_lines "$s_" "$o_" 0 | check "$minb" "$tgt_a" "$s_" "$o_")"
    echo "target (b) strata/ompi >= $tgt_b from $from_h, $NP ranks:" \
         "$(ratio_lines "$s_" "$o_" "$tgt_from" | check "$from_h" "$tgt_b" "$s_" "$o_")"
    c1=$(frac_lines "n${NP}_copy" "$ceil_copy" "$tgt_from" | check "$from_h" "$tgt_copy" "n${NP}_copy")
    c2=$(frac_lines "n${NP}_mem" "$ceil_zc" "$tgt_from" | check "$from_h" "$tgt_zc" "n${NP}_mem")
    v=FAIL
    case $c1 in PASS*) case $c2 in PASS*) v=PASS ;; esac ;; esac
    echo "target (c) from $from_h s.copy/ceil.copy >= $tgt_copy and s.mem/ceil.zc >= $tgt_zc, $NP ranks:" \
         "$v (s.copy/ceil.copy: $c1; s.mem/ceil.zc: $c2)"
    echo "not a target: from $from_h s.mem/ceil.push >= $tgt_zc, $NP ranks:" \
         "$(frac_lines "n${NP}_mem" "$ceil_push" "$tgt_from" | check "$from_h" "$tgt_zc" "n${NP}_mem")"
    why=$(why_not "n${NP}_lat_strata" "n${NP}_lat_ompi")
    if [ -n "$why" ]; then
        v="FAIL ($why)"
    else
        v=$(awk -v a="$(bench_time "n${NP}_lat_strata" 8)" -v b="$t_ompi" 'BEGIN {
            printf "%s (strata %.2f us, ompi %.2f us: strata/ompi %.2f, time ratio, below 1: strata is faster)",
                   (a <= b) ? "PASS" : "FAIL", a, b, a / b }')
    fi
    echo "target (lat) 8 B latency: strata <= ompi, $NP ranks: $v"
done
bench_end
