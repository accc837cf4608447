#!/bin/bash
# sharded.sh: the sharded collectives (reduce-scatter, all-gather) over emulated nodes, against the
# link ceiling and against the flat ring, with a PASS or FAIL line per acceptance target. Two
# parts, each on its own emulated network, one table each (busbw in GB/s, nccl-tests' factor
# (n-1)/n, from the median of --reps runs):
#   a  2 nodes x 2 ranks, one 2 Gbit/s link per node, MTU 9000: reduce_scatter and all_gather with
#      the default algorithm (auto) against the link ceiling, 4 MiB to 64 MiB x4;
#      target: every size from 4 MiB at least 0.9 of the ceiling, both collectives
#   b  2 nodes x 4 ranks, one 1 Gbit/s link per node, MTU 9000: STRATA_ALGO=hier against
#      STRATA_ALGO=ring for both, 1 MiB to 64 MiB x2;
#      target: hier at least 1.6x the ring at every size, both collectives
#      MTU 9000, not hier_vs_ring.sh's 1500: the ratio's bound (1.75) does not depend on the MTU,
#      but at 1500 the emulated links cost 6x the packets, whose TCP work runs on the cores the
#      8 ranks use; hier moves 1.75x the ring's bytes per second over 4 flows per direction and
#      is the one starved: on a loaded 2-core machine its calls come out bimodal (inter-node
#      phase stretched up to 2x, no tbf drop, no RTO), the ring's do not (bench/README.md)
# The link ceiling (bench/README.md): every node must send out (reduce-scatter: the other nodes'
# shards of its contribution) or take in (all-gather: the other nodes' blocks) (N-1)/N of S over
# its link, so busbw <= (n-1)/n * rate * N/(N-1): 0.375 GB/s for part a, 0.219 for part b. A
# node-contiguous flat ring carries (n-1)/n S over each link and direction: busbw <= rate, so hier
# can gain at most (n-1)N/(n(N-1)) = 1.75x over it in part b.
# Columns: RS, AG (part a, default algorithm); RS.hier, RS.ring, AG.hier, AG.ring (part b); the
# ratios hier/ring; ceiling; x/ceil. S, the size column, is nccl-tests' (the larger buffer: the
# send buffer of reduce-scatter, the receive buffer of all-gather); algbw = S / t.
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number and its target
# FAILs. The verdicts are printed, the exit status says only whether everything ran.
#
#   bench/sharded.sh [--part a|b|ab] [--rate-a 2gbit] [--mtu-a 9000] [-b-a 4M] [-e-a 64M] [-f-a 4]
#                    [-n-a 10] [-w-a 2] [--min-frac 0.9]
#                    [--rate-b 1gbit] [--mtu-b 9000] [-b-b 1M] [-e-b 64M] [-f-b 2] [-n-b 2] [-w-b 1]
#                    [--small-max-b 8M] [--small-iters-b 5] [--min-ratio 1.6] [common options]
#     part b runs as hier_vs_ring.sh does: two sweeps per run, up to --small-max-b with
#     --small-iters-b timed calls (2 warmup), the larger sizes with -n-b and -w-b
# Needs root and network namespaces (exit 77 otherwise, with the reason).
# Exit: 0 it ran (whatever the verdicts), 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

part=ab
rate_a=2gbit mtu_a=9000 minb_a=4M maxb_a=64M factor_a=4 iters_a=10 warmup_a=2 min_frac=0.9
rate_b=1gbit mtu_b=9000 minb_b=1M maxb_b=64M factor_b=2 iters_b=2 warmup_b=1
small_max_b=8M small_iters_b=5 min_ratio=1.6
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --part) part=$2; shift 2 ;;
        --rate-a) rate_a=$2; shift 2 ;;
        --mtu-a) mtu_a=$2; shift 2 ;;
        -b-a) minb_a=$2; shift 2 ;;
        -e-a) maxb_a=$2; shift 2 ;;
        -f-a) factor_a=$2; shift 2 ;;
        -n-a) iters_a=$2; shift 2 ;;
        -w-a) warmup_a=$2; shift 2 ;;
        --min-frac) min_frac=$2; shift 2 ;;
        --rate-b) rate_b=$2; shift 2 ;;
        --mtu-b) mtu_b=$2; shift 2 ;;
        -b-b) minb_b=$2; shift 2 ;;
        -e-b) maxb_b=$2; shift 2 ;;
        -f-b) factor_b=$2; shift 2 ;;
        -n-b) iters_b=$2; shift 2 ;;
        -w-b) warmup_b=$2; shift 2 ;;
        --small-max-b) small_max_b=$2; shift 2 ;;
        --small-iters-b) small_iters_b=$2; shift 2 ;;
        --min-ratio) min_ratio=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "sharded: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done
case $part in a|b|ab) ;; *) echo "sharded: --part must be a, b or ab" >&2; exit 2 ;; esac

bench_begin sharded "${argv[@]}"
bench_find_collbench
bench_busbw_of reduce_scatter   # (n-1)/n, the same for all_gather
verdicts=()

# The network of a part: MTU 1500 is the veth's default (no --mtu, as hier_vs_ring.sh).
net_up()
{
    if [ "$2" = 1500 ]; then bench_net_up 2 "$1"; else bench_net_up 2 "$1" 1 "$2"; fi
}

# What else ran on the machine, sampled before every run (the figures depend on it: 2 emulated
# nodes share this machine's cores, and a second emulation halves what each gets).
sample()
{
    local others
    others=$(ip netns list 2>/dev/null | awk '{print $1}' | grep -v "^${BENCH_NET}" |
             sed -E 's/(n[0-9]+|sw[0-9]*)$//' | sort -u | tr '\n' ' ')
    echo "$(cut -d' ' -f1 /proc/loadavg) ${others:-}" >>"$BENCH_TMP/sample.$1"
}
# sample_report PART: one line on the samples of a part.
sample_report()
{
    [ -s "$BENCH_TMP/sample.$1" ] || return 0
    awk -v p="$1" '{ n++; if (min == "" || $1 < min) min = $1; if ($1 > max) max = $1
                     for (i = 2; i <= NF; i++) if (!($i in seen)) { seen[$i] = 1; o = o " " $i } }
        END { printf "# part %s, before each of its %d runs: load average (1 min) %s to %s; other emulated" \
                     " networks: %s\n", p, n, min, max, (o == "" ? "none" : o " (their figures are not comparable)") }' \
        "$BENCH_TMP/sample.$1"
}

# ceiling NP RATE: (n-1)/n * rate * N/(N-1), N = 2 nodes, GB/s.
ceiling()
{
    awk -v n="$1" -v b="$(emunet_rate_bps "$2")" 'BEGIN { N = 2; printf "%.4f", (n - 1) / n * b / 8 / 1e9 * N / (N - 1) }'
}

# ran_algos KEY: " size algorithm[,algorithm]" per size, over every run of the key and both halves
# (collbench --phases: "#  out-of-place hier: ..." under each row).
ran_algos()
{
    cat "$BENCH_TMP/$1".*.out 2>/dev/null | awk '
        !/^#/ && $1 ~ /^[0-9]+$/ && NF >= 12 { size = $1; if (!(size in seen)) { order[++n] = size; seen[size] = "" } next }
        /^# +(out-of-place|in-place) [a-z]+( \(not on every rank\))?:/ && size != "" {
            a = $3; sub(/:$/, "", a); if ($4 == "(not") a = a "(mixed)"
            if (index("," seen[size] ",", "," a ",") == 0) seen[size] = seen[size] (seen[size] == "" ? "" : ",") a }
        END { for (i = 1; i <= n; i++) printf " %s %s", order[i], (seen[order[i]] == "" ? "?" : seen[order[i]]) }'
}

# verdict WHAT LIMIT < lines "value size": the verdict line of one target (bench_verdict_of).
verdict()
{
    echo "$1: $(bench_verdict_of "$2")"
}

# ---- part a: default algorithm against the ceiling, 2 x 2 ranks -------------------------------
part_a()
{
    local ceil sizes s k f lines coll
    net_up "$rate_a" "$mtu_a"
    BENCH_NP=4 BENCH_NODES=2
    bench_sweeps "$minb_a" "$maxb_a" "$factor_a" "$iters_a" "$warmup_a" 0 "$iters_a" "$warmup_a"
    ceil=$(ceiling 4 "$rate_a")
    bench_log "part a: 2 nodes x 2 ranks, one $rate_a link per node, MTU $mtu_a; default algorithm (STRATA_ALGO unset)"
    bench_log_sweeps
    bench_log "per rank r: collbench --rank r --nranks 4 reduce_scatter|all_gather $(bench_sweep_args 0) -d float [-o sum] -z 1 --phases"
    bench_log "          (in node r/2; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
    bench_log "link ceiling: busbw <= (n-1)/n * rate * N/(N-1) = 1.5 * $rate_a = $ceil GB/s (n = 4, N = 2; at MTU" \
              "$mtu_a TCP payload is at most $(awk -v m="$mtu_a" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }') of it)"
    bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * (n-1)/n; $BENCH_COL half of each row"
    # --phases: '#' lines under each row that name the algorithm the default chose (not timed)
    run_a_rs() { BENCH_ENV=(); BENCH_ARGS=(reduce_scatter "${BENCH_SW[@]}" -d float -o sum -z 1 --phases); bench_emu_collbench "$1"; }
    run_a_ag() { BENCH_ENV=(); BENCH_ARGS=(all_gather "${BENCH_SW[@]}" -d float -z 1 --phases); bench_emu_collbench "$1"; }
    one_a_rs() { sample a; bench_run_sweeps "$1" run_a_rs; }
    one_a_ag() { sample a; bench_run_sweeps "$1" run_a_ag; }
    bench_variant a_rs RS one_a_rs
    bench_variant a_ag AG one_a_ag
    bench_net_down
    echo "# part a: 2 nodes x 2 ranks, one $rate_a link per node (MTU $mtu_a), default algorithm:" \
         "busbw (GB/s), link ceiling"
    bench_table 4 "$ceil" "a_rs a_ag" "" "a_rs a_ag"
    for k in a_rs a_ag; do
        bench_ok "$k" && echo "# $(cat "$BENCH_TMP/$k.label") ran (--phases, last timed call of each half, every run):$(ran_algos "$k")"
    done
    sample_report a
    sizes=$(bench_sizes_from "$minb_a" a_rs a_ag)
    for k in a_rs a_ag; do
        coll=$([ "$k" = a_rs ] && echo reduce_scatter || echo all_gather)
        lines=""
        for s in $sizes; do
            f=""
            bench_ok "$k" && f=$(bench_busbw "$k" "$s" 4)
            [ -n "$f" ] && f=$(awk -v x="$f" -v c="$ceil" 'BEGIN { printf "%.4f", x / c }')
            lines="$lines$f $s"$'\n'
        done
        verdicts+=("$(verdict "target (a) $coll, default algorithm, busbw/ceiling >= $min_frac from $minb_a" \
                      "$min_frac" <<<"${lines%$'\n'}")")
    done
}

# ---- part b: hier against the flat ring, 2 x 4 ranks -------------------------------------------
part_b()
{
    local ceil ring_ceil sizes s c lines x y r
    net_up "$rate_b" "$mtu_b"
    BENCH_NP=8 BENCH_NODES=2
    bench_sweeps "$minb_b" "$maxb_b" "$factor_b" "$iters_b" "$warmup_b" "$small_max_b" "$small_iters_b" 2
    ceil=$(ceiling 8 "$rate_b")
    ring_ceil=$(awk -v b="$(emunet_rate_bps "$rate_b")" 'BEGIN { printf "%.4f", b / 8 / 1e9 }')
    bench_log "part b: 2 nodes x 4 ranks, one $rate_b link per node, MTU $mtu_b; STRATA_ALGO=hier against =ring"
    bench_log_sweeps
    bench_log "per rank r: STRATA_ALGO=hier|ring collbench --rank r --nranks 8 reduce_scatter|all_gather <sweep>" \
              "-d float [-o sum] -z 1"
    bench_log "          (in node r/4; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
    bench_log "link ceiling: busbw <= (n-1)/n * rate * N/(N-1) = 1.75 * $rate_b = $ceil GB/s (n = 8, N = 2);" \
              "a node-contiguous ring sends (n-1)/n S per link and direction: busbw <= rate = $ring_ceil GB/s"
    bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * (n-1)/n; $BENCH_COL half of each row"
    run_b_rs() { BENCH_ARGS=(reduce_scatter "${BENCH_SW[@]}" -d float -o sum -z 1); bench_emu_collbench "$1"; }
    run_b_ag() { BENCH_ARGS=(all_gather "${BENCH_SW[@]}" -d float -z 1); bench_emu_collbench "$1"; }
    one_b_rs_hier() { sample b; BENCH_ENV=(STRATA_ALGO=hier); bench_run_sweeps "$1" run_b_rs; }
    one_b_rs_ring() { sample b; BENCH_ENV=(STRATA_ALGO=ring); bench_run_sweeps "$1" run_b_rs; }
    one_b_ag_hier() { sample b; BENCH_ENV=(STRATA_ALGO=hier); bench_run_sweeps "$1" run_b_ag; }
    one_b_ag_ring() { sample b; BENCH_ENV=(STRATA_ALGO=ring); bench_run_sweeps "$1" run_b_ag; }
    bench_variant b_rs_hier RS.hier one_b_rs_hier
    bench_variant b_rs_ring RS.ring one_b_rs_ring
    bench_variant b_ag_hier AG.hier one_b_ag_hier
    bench_variant b_ag_ring AG.ring one_b_ag_ring
    bench_net_down
    echo "# part b: 2 nodes x 4 ranks, one $rate_b link per node (MTU $mtu_b): busbw (GB/s), hier/ring," \
         "link ceiling"
    bench_table 8 "$ceil" "b_rs_hier b_rs_ring b_ag_hier b_ag_ring" "b_rs_hier/b_rs_ring b_ag_hier/b_ag_ring" \
        "b_rs_hier b_ag_hier"
    sample_report b
    sizes=$(bench_sizes_from "$minb_b" b_rs_hier b_rs_ring b_ag_hier b_ag_ring)
    for c in rs ag; do
        lines=""
        for s in $sizes; do
            x="" y="" r=""
            bench_ok "b_${c}_hier" && x=$(bench_busbw "b_${c}_hier" "$s" 8)
            bench_ok "b_${c}_ring" && y=$(bench_busbw "b_${c}_ring" "$s" 8)
            [ -n "$x" ] && [ -n "$y" ] && r=$(awk -v x="$x" -v y="$y" 'BEGIN { printf "%.4f", x / y }')
            lines="$lines$r $s"$'\n'
        done
        verdicts+=("$(verdict "target (b) $([ $c = rs ] && echo reduce_scatter || echo all_gather), hier/ring >= $min_ratio" \
                      "$min_ratio" <<<"${lines%$'\n'}")")
    done
}

case $part in *a*) part_a ;; esac
[ "$part" = ab ] && echo "#"
case $part in *b*) part_b ;; esac
echo "#"
echo "# acceptance (the figures of the tables above, medians of $BENCH_REPS runs):"
for v in "${verdicts[@]}"; do echo "$v"; done
bench_end
