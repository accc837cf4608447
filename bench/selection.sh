#!/bin/bash
# selection.sh: does auto pick well on this machine? One node, 2 and 4 ranks, float sum all-reduce,
# 4 KiB to 256 MiB: strata's default selection (auto) against every algorithm forced in turn, and
# the issue's selection target as a PASS/FAIL line per rank count: auto never picks an algorithm
# that a forced one beats by more than 5 % at that size. The output starts with the machine (CPU,
# cores, hypervisor, L3, memory, kernel, oversubscription). Columns, busbw in GB/s from the median
# time of --reps runs (the four variants interleaved run by run, so that a drifting load weighs on
# each alike):
#   auto        collbench -np N all_reduce ... with STRATA_ALGO unset (the environment's
#               STRATA_TUNE_FILE, STRATA_SMALL_THRESHOLD, ... are left as they are and logged)
#   small       STRATA_ALGO=small: run only over the sizes it applies to (all-reduces up to 128 KiB,
#               --small-limit); larger sizes are "n/a", never counted as small
#   hier, ring  STRATA_ALGO=hier, STRATA_ALGO=ring
#   best        the forced algorithm with the highest busbw at that size
#   auto/best   auto's busbw over the best forced one's (below 1: a forced algorithm was faster)
#   auto ran    what auto ran at that size: one more auto run with collbench --phases (its
#               "#  out-of-place <algo>:" lines; in-place with --in-place), not timed
# A cell is "n/a" where the forced algorithm did not run at that size: collbench's
# "#  ^ ran X, not Y" line under the row (a forced algorithm that does not apply runs as under
# auto, said at WARN), or above small's limit; "-" where the variant has no number there. Then per
# rank count:
#   selection, N ranks: auto within 5 % of the best forced algorithm at every size
#   (auto/best >= 0.95): PASS (lowest ...) | FAIL (...)
# naming every size below with the winner and what auto ran. It FAILs as not measured where auto
# or every forced algorithm has no number at a size, or a forced variant failed or was wrong (it
# might have been the best); one this strata does not have (unavailable) is left out, and said so.
# A FAIL is a measurement: the exit status says only whether the runs ran. Every run checks its
# results (-c 1); a variant with #wrong != 0 gets no number. The target is auto's built-in
# selection: with STRATA_TUNE_FILE set auto follows the tuner's table (collbench tune), which
# still overrides it, and the script measures that.
#
#   bench/selection.sh [--np "2 4"] [-b 4K] [-e 256M] [-f 4] [-n 5] [-w 5] [--small-max 1M]
#                      [--small-iters 20] [--small-limit 128K] [--min-ratio 0.95] [common options]
#     --small-max      every run is two sweeps: sizes up to this one with --small-iters timed calls
#                      (5 warmup), the larger ones with -n and -w (0: one sweep, -n and -w)
#     --small-limit    the largest all-reduce STRATA_ALGO=small applies to (ST_INTRA_SMALL_MAX,
#                      128 KiB): the small column runs only up to it
#     --min-ratio      the target: auto/best at least this at every size (0.95: within 5 %)
# Exit: 0 it ran (unavailable columns included, targets PASS or FAIL), 1 a run failed or had
# #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

nps="2 4" minb=4K maxb=256M factor=4 iters=5 warmup=5 small_max=1M small_iters=20
small_limit=128K min_ratio=0.95
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
        --small-limit) small_limit=$2; shift 2 ;;
        --min-ratio) min_ratio=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "selection: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done
for np in $nps; do
    [ "$np" -ge 2 ] 2>/dev/null || { echo "selection: --np takes rank counts of 2 or more" >&2; exit 2; }
done
awk -v r="$min_ratio" 'BEGIN { exit !(r + 0 > 0) }' ||
    { echo "selection: --min-ratio must be a number above 0" >&2; exit 2; }

bench_begin selection "${argv[@]}"
# shellcheck disable=SC2086
bench_machine $nps
bench_find_collbench

bench_sweeps "$minb" "$maxb" "$factor" "$iters" "$warmup" "$small_max" "$small_iters" 5
small_lim=$(bench_to_bytes "$small_limit")
# The small column's sweeps: the same, cut at its limit (a sweep that starts above it is left out;
# collbench refuses a forced small whose every size is above it).
small_sweeps=()
for sw in "${BENCH_SWEEPS[@]}"; do
    read -r mn mx n w <<<"$sw"
    [ "$mn" -le "$small_lim" ] || continue
    [ "$mx" -le "$small_lim" ] || mx=$small_lim
    small_sweeps+=("$mn $mx $n $w")
done

# ---- run functions (OUT is the rank-0 table), once per sweep with its flags in BENCH_SW ---------
cb_flags=(-d float -o sum -z 1)
auto1()   { bench_exec "$1" env -u STRATA_ALGO "$BENCH_COLLBENCH" -np "$NP" all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
phases1() { bench_exec "$1" env -u STRATA_ALGO "$BENCH_COLLBENCH" -np "$NP" --phases all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
forced1() { bench_exec "$1" env STRATA_ALGO="$ALGO" "$BENCH_COLLBENCH" -np "$NP" all_reduce "${BENCH_SW[@]}" "${cb_flags[@]}"; }
run_auto()   { bench_run_sweeps "$1" auto1; }
run_phases() { bench_run_sweeps "$1" phases1; }
run_hier()   { ALGO=hier; bench_run_sweeps "$1" forced1; }
run_ring()   { ALGO=ring; bench_run_sweeps "$1" forced1; }
run_small()
{
    local saved=("${BENCH_SWEEPS[@]}") rc
    [ ${#small_sweeps[@]} -gt 0 ] ||
        { bench_unavail "$1" "STRATA_ALGO=small applies to all-reduces up to $small_lim B; the sweep starts above"; return; }
    BENCH_SWEEPS=("${small_sweeps[@]}")
    ALGO=small
    bench_run_sweeps "$1" forced1
    rc=$?
    BENCH_SWEEPS=("${saved[@]}")
    return "$rc"
}

# ---- reading the runs ------------------------------------------------------------------------
# na_sizes KEY: "size algorithm" per size where, in some run of a forced variant, the reported half
# did not run the forced algorithm (collbench's "#  ^ ran X, not Y: ..." or "#  ^ ran X out of
# place, Y in place, not Z: ..." under the row).
na_sizes()
{
    cat "$BENCH_TMP/$1".*.out 2>/dev/null | awk -v c="$BENCH_COL" '
        !/^#/ && $1 ~ /^[0-9]+$/ && NF >= 12 { size = $1; next }
        /^# +\^ ran / && size != "" {
            if ($5 == "out") { oop = $4; ip = $8; forced = $12 }
            else { oop = $4; sub(/,$/, "", oop); ip = oop; forced = $6 }
            sub(/,$/, "", ip); sub(/:$/, "", forced)
            ran = (c == "ip") ? ip : oop
            if (ran != forced) print size, ran }' | sort -n -u -k1,1
}
# ran_of KEY: "size algorithm" per size, from the --phases lines of the key's run 1 (the reported
# half); "(mixed)" appended where the ranks did not all run the same.
ran_of()
{
    awk -v c="$BENCH_COL" '
        !/^#/ && $1 ~ /^[0-9]+$/ && NF >= 12 { size = $1; next }
        size != "" && $2 == (c == "ip" ? "in-place" : "out-of-place") && $3 ~ /^[a-z0-9_.-]+:?$/ &&
            ($3 ~ /:$/ || $4 == "(not") {
            a = $3; sub(/:$/, "", a); if ($4 == "(not") a = a "(mixed)"
            if (!(size in seen)) { seen[size] = 1; print size, a } }' "$BENCH_TMP/$1.1.out" 2>/dev/null
}
# cell KEY SIZE: busbw (GB/s) of the key's median at SIZE, "n/a" where the forced algorithm did not
# run there, "-" where the key has no number.
cell()
{
    local k=$1 s=$2 x
    if [ "$k" = "n${NP}_small" ] && [ "$s" -gt "$small_lim" ]; then echo n/a; return; fi
    if [ -n "${NA[$k $s]:-}" ]; then echo n/a; return; fi
    bench_ok "$k" || { echo -; return; }
    x=$(bench_busbw "$k" "$s" "$NP")
    if [ -n "$x" ]; then awk -v x="$x" 'BEGIN { printf "%.4f\n", x }'; else echo -; fi
}

bench_log_sweeps
if [ ${#small_sweeps[@]} -gt 0 ]; then
    for i in "${!small_sweeps[@]}"; do
        read -r mn mx n w <<<"${small_sweeps[$i]}"
        bench_log "small's sweep $((i + 1)) (cut at its limit, $small_lim B): -b $mn -e $mx -f $BENCH_FACTOR -n $n -w $w -c 1"
    done
else
    bench_log "small: no size of the sweep is within its limit ($small_lim B): column unavailable"
fi
bench_log "auto:  env -u STRATA_ALGO collbench -np N all_reduce <sweep> ${cb_flags[*]}"
bench_log "small, hier, ring: STRATA_ALGO=small|hier|ring collbench -np N all_reduce <sweep> ${cb_flags[*]}"
bench_log "auto ran: one more auto run, collbench -np N --phases all_reduce <sweep> ${cb_flags[*]} (not timed)"
env_set=$(env | grep -E '^STRATA_' | grep -v '^STRATA_ALGO=' | sort | tr '\n' ' ')
bench_log "STRATA_ variables of the environment (every column gets them): ${env_set:-none}"
[ -n "${STRATA_ALGO:-}" ] && bench_log "STRATA_ALGO=$STRATA_ALGO in the environment: ignored (auto unsets it, the others set it)"
[ -n "${STRATA_TUNE_FILE:-}" ] &&
    bench_log "STRATA_TUNE_FILE=$STRATA_TUNE_FILE: auto follows that table where it applies (the tuner overrides the built-in selection)"
bench_log "median of $BENCH_REPS runs per variant (interleaved); busbw = algbw * 2(n-1)/n; $BENCH_COL half of each row"
pct=$(awk -v r="$min_ratio" 'BEGIN { printf "%g", (1 - r) * 100 }')
bench_log "target: auto/best >= $min_ratio at every size (auto within $pct % of the best forced algorithm)"

for NP in $nps; do
    echo "#"
    echo "# ==== $NP ranks, one node ===="
    [ "$NP" -gt "$(nproc)" ] &&
        bench_log "note: $NP ranks on $(nproc) CPUs: oversubscribed, every column alike"
    a_=n${NP}_auto
    forced_keys="n${NP}_small n${NP}_hier n${NP}_ring"
    bench_interleave "$a_ auto run_auto" "n${NP}_small small run_small" \
                     "n${NP}_hier hier run_hier" "n${NP}_ring ring run_ring"
    # BENCH_REPS for the one call (bash: a function's assignment prefix is local to it)
    BENCH_REPS=1 bench_variant "n${NP}_phases" "auto --phases" run_phases

    declare -A NA=() NA_RAN=() RAN=()
    for k in $forced_keys; do
        while read -r s a; do [ -n "$s" ] && NA[$k $s]=1 NA_RAN[$k $s]=$a; done < <(na_sizes "$k")
    done
    bench_ok "n${NP}_phases" && while read -r s a; do RAN[$s]=$a; done < <(ran_of "n${NP}_phases")
    # shellcheck disable=SC2086
    sizes=$(bench_sizes_from 0 "$a_" $forced_keys)

    echo "# $NP ranks: busbw (GB/s), median of $BENCH_REPS runs; best: the fastest forced algorithm;" \
         "auto/best: ratio of busbw; auto ran: collbench --phases"
    printf '  %10s  %9s  %9s  %9s  %9s  %6s  %9s  %s\n' "size (B)" auto small hier ring best auto/best "auto ran"
    lines=""
    for s in $sizes; do
        xa=$(cell "$a_" "$s")
        best="" bx=""
        row=()
        for k in $forced_keys; do
            x=$(cell "$k" "$s")
            row+=("$x")
            case $x in n/a|-) continue ;; esac
            if [ -z "$bx" ] || awk -v x="$x" -v b="$bx" 'BEGIN { exit !(x > b) }'; then
                bx=$x best=${k#n"${NP}"_}
            fi
        done
        r=-
        if [ -n "$bx" ] && [ "$xa" != - ]; then
            r=$(awk -v a="$xa" -v b="$bx" 'BEGIN { if (a > 0 && b > 0) printf "%.2f", a / b; else print "-" }')
        fi
        printf '  %10d  %9s  %9s  %9s  %9s  %6s  %9s  %s\n' "$s" "$xa" "${row[@]}" "${best:--}" "$r" "${RAN[$s]:-?}"
        if [ "$r" = - ]; then
            lines="$lines$s"$'\n'
        else
            lines="$lines$(awk -v a="$xa" -v b="$bx" 'BEGIN { printf "%.4f", a / b }') $s $best $bx $xa"$'\n'
        fi
    done
    for k in $forced_keys; do
        na=""
        for s in $sizes; do
            if [ -n "${NA[$k $s]:-}" ]; then na="$na $s (ran ${NA_RAN[$k $s]})"
            elif [ "$k" = "n${NP}_small" ] && [ "$s" -gt "$small_lim" ]; then na="$na $s"; fi
        done
        [ -n "$na" ] && bench_ok "$k" && echo "# ${k#n"${NP}"_} n/a (the forced algorithm did not run there) at:$na"
    done
    bench_table_status "$a_ $forced_keys n${NP}_phases"
    [ -z "$sizes" ] && echo "# no variant ran; nothing to tabulate"

    # ---- the target
    echo "#"
    echo "# $NP ranks: selection (the medians of $BENCH_REPS runs above):"
    what="selection, $NP ranks: auto within $pct % of the best forced algorithm at every size"
    what="$what (auto/best >= $min_ratio):"
    # A forced algorithm that failed or was wrong might have been the best: no verdict without it.
    # One this strata does not have (unavailable) is left out of the comparison, and said so.
    broken="" without=""
    for k in $forced_keys; do
        case $(bench_status "$k") in
            ok) ;;
            unavailable*) without="$without, ${k#n"${NP}"_}" ;;
            *) broken="$broken; ${k#n"${NP}"_} $(bench_status "$k")" ;;
        esac
    done
    if ! bench_ok "$a_"; then
        echo "$what FAIL (not measured: auto $(bench_status "$a_"))"
    elif [ -n "$broken" ]; then
        echo "$what FAIL (not measured: ${broken#; })"
    elif [ -z "$(for k in $forced_keys; do bench_ok "$k" && echo y; done)" ]; then
        echo "$what FAIL (not measured: no forced algorithm ran)"
    else
        v=$(cut -d' ' -f1,2 <<<"$lines" | bench_verdict_of "$min_ratio")
        below=""
        while read -r r s b bx xa; do
            [ -n "${xa:-}" ] && awk -v r="$r" -v l="$min_ratio" 'BEGIN { exit !(r < l) }' || continue
            below="$below; $s B: $b $bx GB/s, auto $xa (ran ${RAN[$s]:-?}"
            # auto ran the winner itself: the gap is between runs of one algorithm, not a choice
            [ "${RAN[$s]:-}" = "$b" ] && below="$below: the winner itself, a gap between runs"
            below="$below)"
        done <<<"$lines"
        [ -n "$below" ] && v="$v; best forced where auto is below:${below#;}"
        [ -n "$without" ] && v="$v; compared without ${without#, } (unavailable)"
        echo "$what $v"
    fi
    unset NA NA_RAN RAN
done
bench_end
