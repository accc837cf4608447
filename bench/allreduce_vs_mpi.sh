#!/bin/bash
# allreduce_vs_mpi.sh: strata's all-reduce against Open MPI's MPI_Allreduce, side by side.
# 4 ranks on this one machine, float sum, 1 KiB to 64 MiB by factors of 2; prints per size the
# busbw of both (out of place and in place) and the ratio strata/mpi.
#
#   bench/allreduce_vs_mpi.sh [-np N] [-b min] [-e max] [-f factor] [-n iters] [-w warmup]
#                             [-c 0/1] [--collbench P] [--keep DIR]
#
# Fair by construction: both sides get the same sizes, iterations, warmup and checks, and
# bench/mpi_allreduce.c repeats collbench's procedure (warmup at the largest then the smallest
# size; per size a barrier, -n timed calls, time = max over ranks of the per-rank average; busbw =
# algbw * 2(n-1)/n). collbench runs with -z 1 (NULL stream: every call returns when complete, as
# MPI_Allreduce does). Open MPI: --mca btl self,vader,tcp. The script refuses to print ratios when
# the two tables disagree on sizes or iterations, and fails when either side has #wrong != 0.
# Both sides oversubscribe the same cores the same way; on a small machine the numbers say more
# about scheduling than about links, so compare ratios, not absolute GB/s.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)

np=4 minb=1K maxb=64M factor=2 iters=20 warmup=5 check=1 collbench=${COLLBENCH:-} keep=""
while [ $# -gt 0 ]; do
    case $1 in
        -np|--np) np=$2; shift 2 ;;
        -b) minb=$2; shift 2 ;;
        -e) maxb=$2; shift 2 ;;
        -f) factor=$2; shift 2 ;;
        -n) iters=$2; shift 2 ;;
        -w) warmup=$2; shift 2 ;;
        -c) check=$2; shift 2 ;;
        --collbench) collbench=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        -h|--help) sed -n '2,/^set -uo/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "allreduce_vs_mpi: unknown argument $1 (see --help)" >&2; exit 2 ;;
    esac
done

[ -n "$collbench" ] || collbench="$top/collbench"
[ -x "$collbench" ] || { echo "allreduce_vs_mpi: no collbench at $collbench (build first)" >&2; exit 2; }
for tool in mpicc mpirun; do
    command -v "$tool" >/dev/null 2>&1 ||
        { echo "allreduce_vs_mpi: $tool not found (apt-get install openmpi-bin libopenmpi-dev)" >&2; exit 2; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench.$$.XXXXXX")
cleanup()
{
    local rc=$?
    trap - EXIT INT TERM
    [ -n "$keep" ] && mkdir -p "$keep" && cp "$tmp"/*.out "$keep"/ 2>/dev/null
    rm -rf "$tmp"
    exit "$rc"
}
trap cleanup EXIT
trap 'exit 130' INT
trap 'exit 143' TERM

mpicc -O2 -Wall -o "$tmp/mpi_allreduce" "$here/mpi_allreduce.c" ||
    { echo "allreduce_vs_mpi: mpicc failed" >&2; exit 2; }

args=(-b "$minb" -e "$maxb" -f "$factor" -n "$iters" -w "$warmup" -c "$check")
echo "# strata: collbench -np $np all_reduce ${args[*]} -d float -o sum -z 1"
rc_s=0
"$collbench" -np "$np" all_reduce "${args[@]}" -d float -o sum -z 1 >"$tmp/strata.out" 2>&1 || rc_s=$?
echo "# mpi:    mpirun -np $np --mca btl self,vader,tcp mpi_allreduce ${args[*]}"
rc_m=0
mpirun --allow-run-as-root --oversubscribe -np "$np" --mca btl self,vader,tcp \
    "$tmp/mpi_allreduce" "${args[@]}" >"$tmp/mpi.out" 2>&1 || rc_m=$?

status=0
if [ "$rc_s" != 0 ]; then
    echo "# strata run failed (exit $rc_s):"; tail -n 30 "$tmp/strata.out"; status=1
fi
if [ "$rc_m" != 0 ]; then
    echo "# mpi run failed (exit $rc_m):"; tail -n 30 "$tmp/mpi.out"; status=1
fi
[ "$status" = 0 ] || exit 1

# Rows: size, out-of-place time (us) and #wrong, in-place time and #wrong (nccl-tests' columns).
# busbw is recomputed from the time column: the printed GB/s have two decimals only.
rows() { awk '!/^#/ && $1 ~ /^[0-9]+$/ && NF >= 13 { print $1, $6, $9, $10, $13 }' "$1"; }
hdr_iters() {
    awk '{ for (i = 2; i < NF; i++) if ($i == "iters:" && $(i-1) != "warmup" && $(i-1) != "agg")
           { print $(i+1); exit } }' "$1"
}
rows "$tmp/strata.out" >"$tmp/strata.rows"
rows "$tmp/mpi.out" >"$tmp/mpi.rows"

# Honesty checks: same sizes, same iterations, nothing wrong.
if ! cmp -s <(cut -d' ' -f1 "$tmp/strata.rows") <(cut -d' ' -f1 "$tmp/mpi.rows"); then
    echo "# sizes differ between the two runs; no ratios. strata / mpi sizes:"
    paste <(cut -d' ' -f1 "$tmp/strata.rows") <(cut -d' ' -f1 "$tmp/mpi.rows")
    exit 1
fi
[ -s "$tmp/strata.rows" ] || { echo "# no rows in collbench's output:"; cat "$tmp/strata.out"; exit 1; }
it_s=$(hdr_iters "$tmp/strata.out") it_m=$(hdr_iters "$tmp/mpi.out")
if [ "$it_s" != "$iters" ] || [ "$it_m" != "$iters" ]; then
    echo "# iterations differ: asked $iters, strata ran ${it_s:-?}, mpi ran ${it_m:-?}; no ratios"
    exit 1
fi
if awk '$3 != "0" && $3 != "N/A" || $5 != "0" && $5 != "N/A" { bad = 1 } END { exit !bad }' \
       "$tmp/strata.rows" "$tmp/mpi.rows"; then
    echo "# some #wrong != 0; tables follow"
    cat "$tmp/strata.out" "$tmp/mpi.out"
    exit 1
fi

echo "# $np ranks, one node, float sum, $iters timed iterations (+$warmup warmup), busbw in GB/s"
echo "# (algbw * 2(n-1)/n); time per size = max over ranks of the per-rank average"
printf '# %10s  %12s %12s %8s  %12s %12s %8s\n' "" "out-of-place" "" "" "in-place" "" ""
printf '# %10s  %12s %12s %8s  %12s %12s %8s\n' "size (B)" "strata" "mpi" "ratio" "strata" "mpi" "ratio"
paste -d' ' "$tmp/strata.rows" "$tmp/mpi.rows" | awk -v np="$np" '
    function bw(s, us) { return (us > 0) ? s / (us * 1e-6) / 1e9 * 2 * (np - 1) / np : 0 }
    function ratio(a, b) { return (b > 0) ? sprintf("%.2f", a / b) : "-" }
    { so = bw($1, $2); mo = bw($1, $7); si = bw($1, $4); mi = bw($1, $9)
      printf "  %10d  %12.4f %12.4f %8s  %12.4f %12.4f %8s\n", $1, so, mo, ratio(so, mo),
             si, mi, ratio(si, mi)
      ls += log((so > 0 && mo > 0) ? so / mo : 1); n++ }
    END { if (n) printf "# geometric mean of strata/mpi (out of place): %.2f over %d sizes\n", exp(ls / n), n }'
exit 0
