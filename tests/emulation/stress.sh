#!/bin/bash
# stress.sh [--runs N] TEST [ARGS]: runs one emulation test N times (EMUNET_STRESS_RUNS, default 5)
# while a CPU hog (a busy loop per allowed CPU) runs, as a loaded or oversubscribed machine would:
# links come up later, ranks start later, progress waits longer. Stops at the first failure.
# `EMUNET_STRESS=1 make check` runs every emulation test this way (tests/bounded.sh), for example
#   EMUNET_STRESS=1 make check TESTS="tests/emulation/test_hier_rails.sh"
# Exit: the first failing run's status, 77 when the test skips, else 0.
set -u
runs=${EMUNET_STRESS_RUNS:-5}
if [ "${1:-}" = --runs ]; then runs=$2; shift 2; fi
case $runs in ''|*[!0-9]*|0) echo "stress.sh: --runs takes a positive number" >&2; exit 99 ;; esac
[ $# -ge 1 ] || { echo "usage: stress.sh [--runs N] TEST [ARGS]" >&2; exit 99; }

hogs=()
stop_hogs() { [ ${#hogs[@]} -gt 0 ] && kill "${hogs[@]}" 2>/dev/null; wait "${hogs[@]}" 2>/dev/null; hogs=(); }
trap stop_hogs EXIT
trap 'exit 130' INT
trap 'exit 143' TERM
ncpu=$(nproc 2>/dev/null || echo 2)
for ((c = 0; c < ncpu; c++)); do
    bash -c 'while :; do :; done' </dev/null >/dev/null 2>&1 &
    hogs+=($!)
done
echo "# stress.sh: $runs runs of $* with $ncpu CPU hog(s)"
for ((i = 1; i <= runs; i++)); do
    start=$(date +%s)
    "$@"
    rc=$?
    echo "# stress.sh: run $i of $runs: exit $rc in $(( $(date +%s) - start )) s"
    [ "$rc" = 77 ] && exit 77
    [ "$rc" != 0 ] && { echo "# stress.sh: FAIL at run $i of $runs"; exit "$rc"; }
done
echo "# stress.sh: $runs of $runs runs passed under load"
