#!/bin/bash
# run_all.sh: the six benchmarks, one after the other, with their default sizes:
#   intra_node.sh    one node, 2 and 4 ranks: strata vs Open MPI (vader) vs Gloo vs memcpy ceiling
#   two_nodes.sh     2 emulated nodes x 2 ranks, 2 Gbit/s: strata vs Open MPI (han, tuned) vs Gloo
#   hier_vs_ring.sh  2 emulated nodes x 4 ranks, 1 Gbit/s: STRATA_ALGO=hier vs ring
#   rails.sh         2 emulated nodes x 2 ranks, two 1 Gbit/s links each: rails vs two-link ceiling
#   sharded.sh       reduce-scatter and all-gather: 2 x 2 ranks at 2 Gbit/s vs the link ceiling,
#                    2 x 4 ranks at 1 Gbit/s hier vs ring; PASS/FAIL per acceptance target
#   alltoall.sh      2 emulated nodes x 4 ranks, 1 Gbit/s: alltoall auto vs hier vs ring, link
#                    ceiling; one node, 4 ranks: strata vs Open MPI; the issue's targets
# then one line per script. What they measure and the formulas: bench/README.md.
#
#   bench/run_all.sh [--only intra_node,two_nodes,...] [--reps N] [--collbench P] [--keep DIR]
#                    [--timeout S] [--in-place]
# The options after --only go to every script (--keep DIR: one subfolder per script).
# Exit: 0 when every script ran or was skipped (77: no network namespaces), 1 otherwise.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

only="intra_node,two_nodes,hier_vs_ring,rails,sharded,alltoall" pass=() keep=""
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --only) only=$2; shift 2 ;;
        --keep) keep=$2; shift 2 ;;
        --reps|--collbench|--timeout) pass+=("$1" "$2"); shift 2 ;;
        --in-place) pass+=("$1"); shift ;;
        -h|--help) sed -n '2,/^set -u/p' "$0" | sed -e '$d' -e 's/^# \{0,1\}//'; exit 0 ;;
        *) echo "run_all: unknown argument $1 (--help)" >&2; exit 2 ;;
    esac
done
q=""
for a in "${argv[@]}"; do q="$q $(printf '%q' "$a")"; done
echo "# run_all: rerun with: cd $(printf '%q' "$PWD") && $(printf '%q' "$0")$q"

child=""
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait; exit 130' INT
trap '[ -n "$child" ] && kill -TERM "$child" 2>/dev/null; wait; exit 143' TERM

summary=() status=0
for s in ${only//,/ }; do
    [ -x "$here/$s.sh" ] || { echo "run_all: no bench/$s.sh" >&2; exit 2; }
    extra=()
    [ -n "$keep" ] && extra=(--keep "$keep/$s")
    echo
    echo "######## bench/$s.sh"
    t0=$SECONDS
    # In the background so that a signal reaches the trap at once; the script cleans up after itself.
    "$here/$s.sh" "${pass[@]}" "${extra[@]}" &
    child=$!
    wait "$child"
    rc=$?
    child=""
    case $rc in
        0) what="ran" ;;
        77) what="skipped (emulated nodes unavailable)" ;;
        1) what="ran, but a variant failed or had #wrong != 0"; status=1 ;;
        *) what="did not run (exit $rc)"; status=1 ;;
    esac
    summary+=("$(printf '%-14s exit %-3s %4d s  %s' "$s" "$rc" $((SECONDS - t0)) "$what")")
done
echo
echo "######## summary"
printf '# %s\n' "${summary[@]}"
exit "$status"
