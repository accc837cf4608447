#!/bin/bash
# alltoall.sh: strataAlltoAll's acceptance targets, measured in one run (collbench alltoall,
# nccl-tests' alltoall_perf: size S = one rank's send buffer, nranks blocks; busbw = algbw (n-1)/n).
# Two parts, each a table of busbw (GB/s) from the median of --reps runs, the variants of a part
# interleaved run by run (run 1 of each, then run 2 of each, ...), every run checked (-c 1):
#   emu    2 emulated nodes x 4 ranks, one --rate link per node (default 1 Gbit/s, MTU 9000):
#            auto  the default algorithm (STRATA_ALGO=auto: hier, the node holding several ranks)
#            hier  STRATA_ALGO=hier: the 2D scheme through the node's windows (coll/hier.c)
#            ring  STRATA_ALGO=ring: the flat pairwise exchange (coll/a2a.c)
#          the link ceiling (bench/README.md: each node sends g(N-1)/N S over its link); under
#          the table, per run, the bytes both nodes sent over their links next to what the
#          all-to-all must send, TCP retransmissions and timeouts and the shapers' drops, and
#          collbench --phases (run 1);
#   intra  one node, 4 ranks: strata (auto) vs Open MPI's MPI_Alltoall (mpi_alltoall.c, btl
#          self,vader), and STRATA_ALGO=ring for reference.
# Then one PASS/FAIL line per target, with the ratios it rests on:
#   (a) emu: hier / ring >= 1.3 at every size from 1 MiB per rank pair (S >= 8 x 1 MiB);
#   (b) emu: auto / link ceiling >= 0.85 at every size from 16 MiB;
#   (c) intra: strata / ompi >= 1.00 at every size from 4 KiB.
# A FAIL is a measurement, not an error: the exit status says whether the runs ran.
#
#   bench/alltoall.sh [--only emu,intra] [--rate 1gbit] [--mtu 9000] [-b 1M] [-e 64M] [-f 2]
#                     [-n 3] [-w 1] [--small-max 4M] [--small-iters 5] [--intra-b 4K]
#                     [--intra-e 64M] [--intra-f 4] [--intra-n 5] [--intra-w 1]
#                     [--intra-small-max 1M] [--intra-small-iters 20] [--intra-np 4] [--no-mpi]
#                     [common options; --in-place is ignored: all-to-all has no in-place form]
#     --only        the parts to run (default both; the emulated one first, so that its network
#                   is down before the intra-node runs)
#     --mtu         the links' MTU: 9000 (default) or 1500. At 9000 TCP carries 0.993 of the
#                   bytes the shaper counts, at 1500 0.956: (b) measures against the nominal rate,
#                   and 1500's overhead alone would take a third of its 15 % margin; jumbo frames
#                   also cost the two cores 6x fewer packets. Both algorithms get the same links.
#     -b .. --small-iters   the emulated sweep: sizes up to --small-max with --small-iters timed
#                   calls (2 warmup), the larger ones -n and -w (a 64 MiB all-to-all takes ~1 s
#                   at 1 Gbit/s); --intra-*: the same for the intra-node part (5 warmup for the
#                   small sizes), which runs 4 ranks (--intra-np)
# The emulated part needs root and network namespaces (without them it is skipped, said under
# its heading); the Open MPI column needs mpicc and mpirun (else it is unavailable).
# Exit: 0 it ran (unavailable columns included, targets PASS or FAIL), 1 a run failed or had
# #wrong != 0, 2 setup.
set -u
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

only=emu,intra rate=1gbit mtu=9000 minb=1M maxb=64M factor=2 iters=3 warmup=1 small_max=4M
small_iters=5 inp=4 iminb=4K imaxb=64M ifactor=4 iiters=5 iwarmup=1 ismall_max=1M ismall_iters=20
use_mpi=1 in_place_asked=0
# The targets (the issue's).
tgt_a=1.3 tgt_b=0.85 tgt_c=1.00 tgt_b_min=16M tgt_c_min=4K
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --only) only=$2; shift 2 ;;
        --rate) rate=$2; shift 2 ;;
        --mtu) mtu=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        --small-max) small_max=$2; shift 2 ;;
        --small-iters) small_iters=$2; shift 2 ;;
        --intra-np) inp=$2; shift 2 ;;
        --intra-b) iminb=$2; shift 2 ;;
        --intra-e) imaxb=$2; shift 2 ;;
        --intra-f) ifactor=$2; shift 2 ;;
        --intra-n) iiters=$2; shift 2 ;;
        --intra-w) iwarmup=$2; shift 2 ;;
        --intra-small-max) ismall_max=$2; shift 2 ;;
        --intra-small-iters) ismall_iters=$2; shift 2 ;;
        --no-mpi) use_mpi=0; shift ;;
        --in-place) in_place_asked=1; shift ;;   # run_all.sh passes it to every script
        -h|--help) bench_help "$0"; exit 0 ;;
        *) bench_common_opt "$@" || { echo "alltoall: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done
for p in ${only//,/ }; do
    case $p in emu|intra) ;; *) echo "alltoall: --only takes emu and intra, not $p" >&2; exit 2 ;; esac
done
part() { case ",$only," in *",$1,"*) return 0 ;; esac; return 1; }

bench_begin alltoall "${argv[@]}"
bench_find_collbench
bench_busbw_of alltoall   # nccl-tests' alltoall: busbw = algbw * (n-1)/n
[ "$in_place_asked" = 1 ] &&
    bench_log "--in-place ignored: all-to-all has no in-place form; the out-of-place half is reported"
verdicts=()

# busbw (GB/s) of KEY's median at SIZE on NP ranks; empty when it has none.
busbw()
{
    local t
    t=$(bench_time "$1" "$2")
    [ -n "$t" ] || return 0
    awk -v s="$2" -v t="$t" -v n="$3" 'BEGIN { if (t > 0) printf "%.6f\n", s / (t * 1e-6) / 1e9 * (n - 1) / n }'
}
# The sizes of KEY's medians from MIN bytes on.
sizes_from() { [ -f "$BENCH_TMP/$1.med" ] && awk -v m="$2" '$1 >= m { print $1 }' "$BENCH_TMP/$1.med"; }
# verdict LETTER TEXT PASS|FAIL|"NOT MEASURED"
verdict() { verdicts+=("$(printf 'target (%s) %s: %s' "$1" "$3" "$2")"); }

# bench_sweeps' sweeps as "-b -e -n -w" words: the calls of one run at each size, for the bytes.
# Per run (every sweep): -w calls at its largest and at its smallest size, then -n timed + 1
# checked call per size; prints the sum of the sizes over those calls.
sweep_bytes()
{
    local i mn mx n w total=0 s
    for i in "${!BENCH_SWEEPS[@]}"; do
        read -r mn mx n w <<<"${BENCH_SWEEPS[$i]}"
        total=$((total + w * (mx + mn)))
        for ((s = mn; s <= mx; s *= BENCH_FACTOR)); do total=$((total + (n + 1) * s)); done
    done
    echo "$total"
}

# ==== part 1: 2 emulated nodes x 4 ranks ========================================================
emu_part()
{
    local why nodes=2 np=8 g=4 bps ceil ceilp s a_min b_min r_hr r_ac worst room k f
    echo "#"
    echo "# ==== 2 emulated nodes x 4 ranks, one $rate link per node, MTU $mtu ===="
    why=$(emunet_unavailable)
    if [ -n "$why" ]; then
        bench_log "skipped: emulated nodes need root and network namespaces: $why"
        verdict a "hier/ring at 1 Gbit/s" "NOT MEASURED (no emulated nodes: $why)"
        verdict b "auto/link ceiling" "NOT MEASURED (no emulated nodes: $why)"
        return 0
    fi
    [ -n "$(ip netns list 2>/dev/null)" ] &&
        bench_log "note: network namespaces exist already (another emulation may be running:" \
                  "its load skews these numbers): $(ip netns list | awk '{ print $1 }' | tr '\n' ' ')"
    bench_net_up "$nodes" "$rate" 1 "$mtu"
    BENCH_NP=$np BENCH_NODES=$nodes
    bench_sweeps "$minb" "$maxb" "$factor" "$iters" "$warmup" "$small_max" "$small_iters" 2

    bps=$(emunet_rate_bps "$rate")
    # Each node sends g(N-1)/N S over its link: t >= g(N-1)/N S / R, busbw = S/t (n-1)/n.
    ceil=$(awk -v b="$bps" -v n="$np" -v N="$nodes" -v g="$g" \
               'BEGIN { printf "%.7f", (n - 1) / n * N * b / 8 / 1e9 / (g * (N - 1)) }')
    ceilp=$(awk -v c="$ceil" -v m="$mtu" 'BEGIN { printf "%.5f", c * (m - 52) / (m + 14) }')
    bench_log_sweeps
    bench_log "per rank r: STRATA_ALGO=auto|hier|ring collbench --rank r --nranks $np alltoall <sweep> -d float -z 1 --phases"
    bench_log "          (in node r/$g; STRATA_COMM_ID=$(emunet_ip 0):<port>, STRATA_SOCKET_IFNAME and UCX_NET_DEVICES=$EMUNET_IF)"
    bench_log "link ceiling: each node sends g(N-1)/N S over its link (its g ranks, (N-1)g/n of each" \
              "send buffer), so t >= g(N-1)/N S / R and"
    bench_log "  busbw <= (n-1)/n * N R / (g(N-1)) = $ceil GB/s (n = $np, N = $nodes, g = $g," \
              "R = $rate = $(awk -v b="$bps" 'BEGIN { print b / 8 / 1e9 }') GB/s);" \
              "TCP payload at MTU $mtu: at most $(awk -v m="$mtu" 'BEGIN { printf "%.3f", (m - 52) / (m + 14) }')" \
              "of it, $ceilp GB/s"
    bench_log "the flat pairwise exchange sends the same bytes over the links (every block to a rank" \
              "of the other node crosses once): the ceiling is the same for both algorithms"
    bench_log "median of $BENCH_REPS runs per variant, interleaved; busbw = algbw * (n-1)/n; out of place"

    emu1() { BENCH_ARGS=(alltoall "${BENCH_SW[@]}" -d float -z 1 --phases); bench_emu_collbench "$1"; }
    # Counters of both nodes: bytes sent over their links, TCP segments retransmitted, TCP
    # retransmission timeouts (each a stall of at least the 200 ms minimum RTO) and packets the
    # shapers dropped (the tbf at each node's end and at the switch's end of its link).
    net_counters()
    {
        local k ns sw
        sw=$(emunet_switch_ns 0 "$BENCH_NET")
        for ((k = 0; k < nodes; k++)); do
            ns="${BENCH_NET}n$k"
            echo "tx $(emunet_ifbytes "$k" tx)"
            ip netns exec "$ns" cat /proc/net/snmp /proc/net/netstat | awk '
                $1 == "Tcp:" && !h1 { for (i = 2; i <= NF; i++) c1[$i] = i; h1 = 1; next }
                $1 == "Tcp:" { print "retrans", $c1["RetransSegs"] }
                $1 == "TcpExt:" && !h2 { for (i = 2; i <= NF; i++) c2[$i] = i; h2 = 1; next }
                $1 == "TcpExt:" { print "rto", $c2["TCPTimeouts"] }'
            ip netns exec "$ns" tc -s qdisc show dev "$EMUNET_IF"
            ip netns exec "$sw" tc -s qdisc show dev "p$k"
        done | awk '$1 == "tx" || $1 == "retrans" || $1 == "rto" { v[$1] += $2 }
                    /dropped/ { d = $0; sub(/.*dropped /, "", d); v["drop"] += d + 0 }
                    END { printf "%.0f %.0f %.0f %.0f\n", v["tx"], v["retrans"], v["rto"], v["drop"] }'
    }
    # One run between two readings; the differences appended to KEY.net.
    counted()
    {
        local key=$1 out=$2 a b rc
        shift 2
        BENCH_ENV=("$@")
        a=$(net_counters)
        bench_run_sweeps "$out" emu1
        rc=$?
        b=$(net_counters)
        echo "$a $b" | awk '{ print $5 - $1, $6 - $2, $7 - $3, $8 - $4 }' >>"$BENCH_TMP/$key.net"
        return "$rc"
    }
    run_e_auto() { counted e_auto "$1" STRATA_ALGO=auto; }
    run_e_hier() { counted e_hier "$1" STRATA_ALGO=hier; }
    run_e_ring() { counted e_ring "$1" STRATA_ALGO=ring; }
    bench_interleave "e_auto auto run_e_auto" "e_hier hier run_e_hier" "e_ring ring run_e_ring"

    echo "# 2 nodes x 4 ranks, one $rate link per node (MTU $mtu): alltoall busbw (GB/s), ratios, link ceiling"
    bench_table "$np" "$ceil" "e_auto e_hier e_ring" "e_hier/e_ring e_auto/e_ring" "e_auto e_hier e_ring"

    # What crossed the links: per run, both nodes, against the all-to-all's own bytes.
    local want
    want=$(( $(sweep_bytes) * g * (nodes - 1) ))
    echo "# the links, per run (both nodes; median over runs, and the range): bytes sent / the all-to-all's own bytes of the"
    echo "# run's calls ($(awk -v w="$want" 'BEGIN { printf "%.1f MB", w / 1e6 }')), TCP segments retransmitted, TCP" \
         "retransmission timeouts (>= 200 ms each), packets the tbf shapers dropped"
    for k in e_auto e_hier e_ring; do
        [ -s "$BENCH_TMP/$k.net" ] || continue
        awk -v l="$(cat "$BENCH_TMP/$k.label")" -v w="$want" '
            function med(a, n,   i, j, t) {
                for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
                return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
            function rng(a, n,   i, lo, hi) { lo = hi = a[1]; for (i = 2; i <= n; i++) { if (a[i] < lo) lo = a[i]; if (a[i] > hi) hi = a[i] }
                return lo ".." hi }
            { n++; b[n] = $1; r[n] = $2; t[n] = $3; d[n] = $4 }
            END { printf "#   %-4s bytes %.3f x payload, retransmitted %d (%s), timeouts %d (%s), drops %d (%s), %d runs\n",
                         l, med(b, n) / w, med(r, n), rng(r, n), med(t, n), rng(t, n), med(d, n), rng(d, n), n }' \
            "$BENCH_TMP/$k.net"
    done
    # Which algorithm ran (every --phases line of every run) and where the time went (run 1).
    for k in e_auto e_hier e_ring; do
        ls "$BENCH_TMP/$k".[0-9]*.out >/dev/null 2>&1 || continue
        printf '# %-4s ran: %s\n' "$(cat "$BENCH_TMP/$k.label")" \
            "$(cat "$BENCH_TMP/$k".[0-9]*.out | awk '/^#  +out-of-place [^ ]+:/ { a = $3; sub(":$", "", a); c[a]++ }
                END { for (a in c) printf "%s (%d rows) ", a, c[a] }')"
    done
    for k in e_auto e_ring; do
        [ -f "$BENCH_TMP/$k.1.out" ] || continue
        echo "# --phases of $(cat "$BENCH_TMP/$k.label"), run 1 (the last timed call of each size, slowest rank per phase):"
        awk '!/^#/ && $1 ~ /^[0-9]+$/ { s = $1 } /^#  +out-of-place [^ ]+:/ { sub(/^# +/, ""); printf "#   %10s %s\n", s, $0 }' \
            "$BENCH_TMP/$k.1.out"
    done

    # ---- target (a): hier / ring >= 1.3 from 1 MiB per rank pair ----
    a_min=$((np * 1048576))
    echo "# (a) hier vs the flat pairwise exchange, from $a_min B (1 MiB per rank pair):"
    echo "#       size  hier/ring  ring/ceil  hier/ceil  ceil/ring (the most any algorithm could gain over ring here)"
    worst="" room=""
    for s in $(sizes_from e_hier "$a_min"); do
        local h r
        h=$(busbw e_hier "$s" "$np") r=$(busbw e_ring "$s" "$np")
        [ -n "$h" ] && [ -n "$r" ] || continue
        r_hr=$(awk -v h="$h" -v r="$r" 'BEGIN { printf "%.4f", h / r }')
        awk -v s="$s" -v h="$h" -v r="$r" -v c="$ceil" 'BEGIN {
            printf "#   %10d  %9.2f  %9.2f  %9.2f  %9.2f\n", s, h / r, r / c, h / c, c / r }'
        worst=$(awk -v a="$worst" -v b="$r_hr" 'BEGIN { print (a == "" || b < a) ? b : a }')
        room="$room $(awk -v r="$r" -v c="$ceil" 'BEGIN { printf "%.2f", c / r }')"
    done
    # bytes over the links per payload byte, per variant (median over runs)
    lbytes()
    {
        [ -s "$BENCH_TMP/$1.net" ] || { echo "-"; return; }
        sort -n "$BENCH_TMP/$1.net" | awk -v w="$want" '{ b[++n] = $1 }
            END { printf "%.3f", ((n % 2) ? b[(n + 1) / 2] : (b[n / 2] + b[n / 2 + 1]) / 2) / w }'
    }
    if [ -z "$worst" ]; then
        verdict a "hier/ring >= $tgt_a from 1 MiB per rank pair" "NOT MEASURED (hier: $(bench_status e_hier); ring: $(bench_status e_ring))"
    elif awk -v w="$worst" -v t="$tgt_a" 'BEGIN { exit !(w >= t) }'; then
        verdict a "hier/ring >= $tgt_a from 1 MiB per rank pair (lowest $worst)" PASS
    else
        verdict a "hier/ring >= $tgt_a from 1 MiB per rank pair (lowest $worst). The links carried $(lbytes e_hier) (hier) and $(lbytes e_ring) (ring) x the all-to-all's bytes: the same bytes, the same ceiling; ceil/ring, the most any algorithm could gain over this ring, was$room" FAIL
    fi

    # ---- target (b): auto >= 0.85 of the link ceiling from 16 MiB ----
    b_min=$(bench_to_bytes "$tgt_b_min")
    worst=""
    echo "# (b) auto against the link ceiling, from $tgt_b_min; where the time goes (--phases: the last timed call of"
    echo "#     each run, median over runs): t_link = g(N-1)/N S / R, the inter-node phase and the whole call over t_link"
    echo "#       size  auto/ceil  t_link (us)  inter-A2A/t_link  total/t_link"
    for s in $(sizes_from e_auto "$b_min"); do
        f=$(busbw e_auto "$s" "$np")
        [ -n "$f" ] || continue
        r_ac=$(awk -v f="$f" -v c="$ceil" 'BEGIN { printf "%.4f", f / c }')
        worst=$(awk -v a="$worst" -v b="$r_ac" 'BEGIN { print (a == "" || b < a) ? b : a }')
        cat "$BENCH_TMP/e_auto".[0-9]*.out | awk -v want="$s" -v f="$r_ac" -v b="$bps" -v g="$g" -v N="$nodes" '
            function med(a, n,   i, j, t) {
                for (i = 2; i <= n; i++) { t = a[i]; for (j = i - 1; j >= 1 && a[j] > t; j--) a[j+1] = a[j]; a[j+1] = t }
                return (n % 2) ? a[(n + 1) / 2] : (a[n / 2] + a[n / 2 + 1]) / 2 }
            !/^#/ && $1 ~ /^[0-9]+$/ { s = $1 }
            s == want && /^#  +out-of-place hier:/ && match($0, /inter-A2A\*? *[0-9.]+ us/) {
                x = substr($0, RSTART, RLENGTH); sub(/^inter-A2A\*? */, "", x)
                y = $0; sub(/.*total +/, "", y); sub(/ us.*/, "", y)
                n++; ia[n] = x + 0; tt[n] = y + 0 }
            END { tl = g * (N - 1) / N * want / (b / 8) * 1e6
                  if (n) printf "#   %10d  %9.3f  %11.0f  %16.2f  %12.2f\n", want, f, tl, med(ia, n) / tl, med(tt, n) / tl
                  else printf "#   %10d  %9.3f  %11.0f  %16s  %12s\n", want, f, tl, "-", "-" }'
    done
    if [ -z "$worst" ]; then
        verdict b "auto/ceiling >= $tgt_b from $tgt_b_min" "NOT MEASURED (auto: $(bench_status e_auto))"
    elif awk -v w="$worst" -v t="$tgt_b" 'BEGIN { exit !(w >= t) }'; then
        verdict b "auto/ceiling >= $tgt_b from $tgt_b_min (lowest $worst of $ceil GB/s)" PASS
    else
        verdict b "auto/ceiling >= $tgt_b from $tgt_b_min (lowest $worst of $ceil GB/s)" FAIL
    fi

    # The network goes now: the intra-node part runs without it.
    emunet_down "$BENCH_NET"
    BENCH_NET=""
}

# ==== part 2: one node, 4 ranks, strata vs Open MPI ============================================
intra_part()
{
    local s c o r k worst="" below=""
    echo "#"
    echo "# ==== one node, $inp ranks: strata vs Open MPI ===="
    BENCH_NP=$inp BENCH_NODES=1
    bench_sweeps "$iminb" "$imaxb" "$ifactor" "$iiters" "$iwarmup" "$ismall_max" "$ismall_iters" 5
    if [ "$use_mpi" = 1 ]; then bench_build_mpi mpi_alltoall; else BENCH_MPI="" BENCH_MPI_WHY="left out (--no-mpi)"; fi
    bench_log_sweeps
    bench_log "strata: STRATA_ALGO=auto collbench -np $inp alltoall <sweep> -d float -z 1 --phases   (s.ring: STRATA_ALGO=ring)"
    bench_log "ompi:   mpirun --oversubscribe --bind-to none -np $inp --mca btl self,vader mpi_alltoall <sweep>"
    bench_log "median of $BENCH_REPS runs per variant, interleaved; busbw = algbw * (n-1)/n; out of place"
    [ "$inp" -gt "$(nproc)" ] &&
        bench_log "note: $inp ranks on $(nproc) CPUs: every side is oversubscribed the same way"

    i_strata1() { bench_exec "$1" env STRATA_ALGO=auto "$BENCH_COLLBENCH" -np "$inp" alltoall "${BENCH_SW[@]}" -d float -z 1 --phases; }
    i_ring1()   { bench_exec "$1" env STRATA_ALGO=ring "$BENCH_COLLBENCH" -np "$inp" alltoall "${BENCH_SW[@]}" -d float -z 1 --phases; }
    i_ompi1()
    {
        bench_exec "$1" env TMPDIR="$BENCH_TMP" mpirun --allow-run-as-root --oversubscribe \
            --bind-to none -np "$inp" --mca btl self,vader --mca orte_tmpdir_base "$BENCH_TMP" \
            "$BENCH_MPI" "${BENCH_SW[@]}"
    }
    run_i_strata() { bench_run_sweeps "$1" i_strata1; }
    run_i_ring()   { bench_run_sweeps "$1" i_ring1; }
    run_i_ompi()   { [ -n "$BENCH_MPI" ] || { bench_unavail "$1" "$BENCH_MPI_WHY"; return; }; bench_run_sweeps "$1" i_ompi1; }
    bench_interleave "i_strata strata run_i_strata" "i_ompi ompi run_i_ompi" "i_ring s.ring run_i_ring"

    echo "# one node, $inp ranks: alltoall busbw (GB/s), ratios"
    bench_table "$inp" "" "i_strata i_ompi i_ring" "i_strata/i_ompi i_ring/i_ompi i_strata/i_ring" ""
    for k in i_strata i_ring; do
        ls "$BENCH_TMP/$k".[0-9]*.out >/dev/null 2>&1 || continue
        printf '# %-6s ran: %s\n' "$(cat "$BENCH_TMP/$k.label")" \
            "$(cat "$BENCH_TMP/$k".[0-9]*.out | awk '/^#  +out-of-place [^ ]+:/ { a = $3; sub(":$", "", a); c[a]++ }
                END { for (a in c) printf "%s (%d rows) ", a, c[a] }')"
    done

    # ---- target (c): strata >= ompi at every size from 4 KiB ----
    for s in $(sizes_from i_strata "$(bench_to_bytes "$tgt_c_min")"); do
        c=$(busbw i_strata "$s" "$inp") o=$(busbw i_ompi "$s" "$inp")
        [ -n "$c" ] && [ -n "$o" ] || continue
        r=$(awk -v c="$c" -v o="$o" 'BEGIN { printf "%.4f", c / o }')
        worst=$(awk -v a="$worst" -v b="$r" 'BEGIN { print (a == "" || b < a) ? b : a }')
        awk -v r="$r" -v t="$tgt_c" 'BEGIN { exit !(r < t) }' && below="$below $s ($r)"
    done
    if [ -z "$worst" ]; then
        verdict c "strata/ompi >= $tgt_c from $tgt_c_min, one node" "NOT MEASURED (strata: $(bench_status i_strata); ompi: $(bench_status i_ompi))"
    elif [ -z "$below" ]; then
        verdict c "strata/ompi >= $tgt_c at every size from $tgt_c_min, one node (lowest $worst)" PASS
    else
        verdict c "strata/ompi >= $tgt_c at every size from $tgt_c_min, one node (below at:$below)" FAIL
    fi
}

part emu && emu_part
part intra && intra_part
echo "#"
echo "# ==== targets ===="
[ ${#verdicts[@]} -gt 0 ] && printf '# %s\n' "${verdicts[@]}"
bench_end
