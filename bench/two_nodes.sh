#!/bin/bash
# two_nodes.sh: 2 emulated nodes x 2 ranks, one 2 Gbit/s link per node (tc tbf both ways, see
# tests/emulation/emunet.sh): strata's all-reduce against Open MPI with coll/han, Open MPI with
# its default collectives (tuned) and Gloo (tcp), all across the namespaces, and against the link
# ceiling; then the 8-byte latency of each. Columns, busbw in GB/s from the median of --reps runs:
#   strata    collbench --rank r --nranks 4, one process per rank in its node (default algorithm)
#   ompi-han  mpirun (in node0, launch agent tests/emulation/ns-agent.sh) --mca coll_han_priority 100
#             --mca coll_han_use_simple_allreduce 1: Open MPI 4.1.4's pipelined HAN allreduce
#             segfaults past one 64 KiB segment ("Read -1, expected 65536, errno = 14", fixed in
#             4.1.6 by open-mpi/ompi#11812); HAN's simple one is reduce + allreduce + bcast
#   ompi      the same without it (coll/tuned)
#   gloo      gloo_allreduce, one process per rank, FileStore rendezvous, TCP on the link
#   x/y       ratio of busbw; ceiling: the link ceiling (bench/README.md); x/ceil: fraction of it
#   The link ceiling is the busbw at which every node's link would run at the tc tbf rate the whole
#   time: the long-run rate of the link, not a hard bound. Each tbf holds a token bucket (4 ms at
#   the rate, at least 64 KiB and 4 MTUs: 1,000,000 B at 2 Gbit/s) that refills while the link
#   rests between calls and lets that many bytes through at the veth's own speed, so a size of the
#   order of the bucket (1 MiB here) can pass the ceiling (x/ceil above 1); sizes several times
#   the bucket are held to the rate.
# Every run checks its results (-c 1); a variant with #wrong != 0 gets no number.
#
#   bench/two_nodes.sh [--rate 2gbit] [--mtu 9000] [-b 64K] [-e 64M] [-f 4] [-n 20] [-w 2] [--lat-iters 200]
#                      [--han-args "MCA ARGS"] [--no-mpi] [--no-gloo] [common options]
#     --mtu       the links' MTU (9000, jumbo frames, as data-centre fabrics run; 1500): TCP's
#                 payload per byte the shaper counts is (mtu-52)/(mtu+14): 0.956 at 1500, 0.993 at
#                 9000, so at 1500 no TCP library can reach 95 % of the link ceiling
#     --han-args  what selects HAN (default "--mca coll_han_priority 100
#                 --mca coll_han_use_simple_allreduce 1"; on Open MPI >= 4.1.6 drop the second)
# Needs root and network namespaces (exit 77 otherwise, with the reason).
# Exit: 0 it ran (unavailable columns included), 1 a run failed or had #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=2gbit mtu=9000 minb=64K maxb=64M factor=4 iters=20 warmup=2 lat_iters=200 use_mpi=1 use_gloo=1
han_args="--mca coll_han_priority 100 --mca coll_han_use_simple_allreduce 1"
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
        --lat-iters) lat_iters=$2; shift 2 ;;
        --han-args) han_args=$2; shift 2 ;;
        --no-mpi) use_mpi=0; shift ;;
        --no-gloo) use_gloo=0; shift ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "two_nodes: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done

bench_begin two_nodes "${argv[@]}"
bench_find_collbench
bench_net_up 2 "$rate" 1 "$mtu"
BENCH_NP=4 BENCH_NODES=2
if [ "$use_mpi" = 1 ]; then bench_build_mpi; else BENCH_MPI_WHY="left out (--no-mpi)"; fi
if [ "$use_gloo" = 1 ]; then bench_build_gloo; else BENCH_GLOO_WHY="left out (--no-gloo)"; fi
han_why=""
if [ -n "$BENCH_MPI" ] && ! ompi_info 2>/dev/null | grep -q "MCA coll: han"; then
    han_why="this Open MPI has no coll/han component (ompi_info)"
fi
printf 'node0 slots=2\nnode1 slots=2\n' >"$BENCH_TMP/hostfile"

# The sweep (SWEEP=bw) or the latency probe (SWEEP=lat): the same for every side.
sweep_args()
{
    if [ "$SWEEP" = lat ]; then echo "-b 8 -e 8 -f 2 -n $lat_iters -w 20 -c 1"
    else echo "-b $minb -e $maxb -f $factor -n $iters -w $warmup -c 1"; fi
}

# ---- run functions (OUT is the rank-0 table) ---------------------------------------------------
run_strata()
{
    BENCH_ENV=()
    # shellcheck disable=SC2207
    BENCH_ARGS=(all_reduce $(sweep_args) -d float -o sum -z 1)
    bench_emu_collbench "$1"
}

# mpirun inside node0; node1's orted through the launch agent (tests/emulation/test_mpirun.sh).
run_mpi_emu()
{
    local out=$1
    shift
    # shellcheck disable=SC2046
    bench_exec "$out" ip netns exec "${BENCH_NET}n0" unshare --uts sh -c 'hostname "$0" && exec "$@"' \
        node0 env TMPDIR="$BENCH_TMP" EMUNET_ID="$EMUNET_ID" \
        mpirun --allow-run-as-root --oversubscribe --bind-to none -np 4 --hostfile "$BENCH_TMP/hostfile" \
        --mca plm_rsh_agent "$BENCH_EMU/ns-agent.sh" --mca plm_rsh_no_tree_spawn 1 \
        --mca oob_tcp_if_include "$(emunet_subnet 0).0/24" --mca btl self,vader,tcp \
        --mca btl_tcp_if_include "$(emunet_subnet 0).0/24" --mca orte_tmpdir_base "$BENCH_TMP" \
        -x EMUNET_ID "$@" "$BENCH_MPI" $(sweep_args)
}
run_han()
{
    [ -n "$BENCH_MPI" ] || { bench_unavail "$1" "$BENCH_MPI_WHY"; return; }
    [ -z "$han_why" ] || { bench_unavail "$1" "$han_why"; return; }
    # shellcheck disable=SC2086
    run_mpi_emu "$1" $han_args
}
run_ompi()
{
    [ -n "$BENCH_MPI" ] || { bench_unavail "$1" "$BENCH_MPI_WHY"; return; }
    run_mpi_emu "$1"
}
run_gloo()
{
    [ -n "$BENCH_GLOO" ] || { bench_unavail "$1" "$BENCH_GLOO_WHY"; return; }
    # shellcheck disable=SC2207
    BENCH_ARGS=($(sweep_args))
    bench_gloo "$1"
}

bps=$(emunet_rate_bps "$rate")
# tbf's bucket, sized as tests/emulation/emunet.sh sizes it: 4 ms at the rate, >= 64 KiB, >= 4 MTU
burst=$(awk -v b="$bps" -v m="$mtu" 'BEGIN { x = int(b / 8 / 250); if (x < 65536) x = 65536;
                                             if (x < 4 * m) x = 4 * m; printf "%d", x }')
ceil=$(awk -v b="$bps" 'BEGIN { n = 4; N = 2; printf "%.4f", 2 * (n - 1) / n * b / 8 / 1e9 * N / (2 * (N - 1)) }')
SWEEP=bw
bench_log "strata:   per rank r: collbench --rank r --nranks 4 all_reduce $(sweep_args) -d float -o sum -z 1"
bench_log "          (in node r/2; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
bench_log "ompi:     mpirun -np 4 --hostfile (node0, node1: 2 slots) --mca plm_rsh_agent ns-agent.sh" \
          "--mca btl self,vader,tcp --bind-to none mpi_allreduce $(sweep_args)"
bench_log "ompi-han: the same with $han_args"
bench_log "gloo:     per rank r: gloo_allreduce --rank r --size 4 --store DIR --host <node's address> $(sweep_args)"
bench_log "link ceiling: busbw <= 2(n-1)/n * rate * N/(2(N-1)) = 1.5 * $rate = $ceil GB/s (n = 4 ranks," \
          "N = 2 nodes; at MTU $mtu TCP payload is at most ($mtu-52)/($mtu+14) =" \
          "$(awk -v m="$mtu" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }') of it)"
bench_log "  the ceiling is the tbf rate held the whole call, not a bound: each tbf's token bucket" \
          "($burst B, 4 ms at the rate) refills while the link rests and passes at once, so sizes" \
          "near it can exceed the ceiling (x/ceil > 1); sizes several times larger cannot"
bench_log "median of $BENCH_REPS runs per variant; busbw = algbw * 2(n-1)/n; $BENCH_COL half of each row"
bench_variant strata strata run_strata
bench_variant han ompi-han run_han
bench_variant ompi ompi run_ompi
bench_variant gloo gloo run_gloo
echo "# 2 nodes x 2 ranks, one $rate link per node (MTU $mtu): busbw (GB/s), ratios, link ceiling" \
     "(tbf rate; a $burst B bucket lets sizes near it pass)"
bench_table 4 "$ceil" "strata han ompi gloo" "strata/han strata/ompi strata/gloo" "strata han"

echo "#"
SWEEP=lat
bench_log "8-byte latency: the same four with $(sweep_args) (time per call, median of $BENCH_REPS runs)"
bench_variant lat_strata strata run_strata
bench_variant lat_han ompi-han run_han
bench_variant lat_ompi ompi run_ompi
bench_variant lat_gloo gloo run_gloo
printf '  %-10s %12s %12s\n' "8 B" "time (us)" "vs strata"
ts=$(bench_time lat_strata 8)
for k in lat_strata lat_han lat_ompi lat_gloo; do
    if bench_ok "$k"; then
        t=$(bench_time "$k" 8)
        printf '  %-10s %12.1f %12s\n' "$(cat "$BENCH_TMP/$k.label")" "$t" \
            "$(awk -v a="$t" -v b="${ts:-0}" 'BEGIN { if (a > 0 && b > 0) printf "%.2fx", a / b; else print "-" }')"
    else
        printf '  %-10s %12s  %s\n' "$(cat "$BENCH_TMP/$k.label")" "-" "$(bench_status "$k")"
    fi
done
echo "# (vs strata: the other's time over strata's; above 1: strata is faster)"
bench_end
