#!/bin/bash
# bounded.sh TEST [ARGS]: runs one test of `make check` (automake's LOG_COMPILER and
# SH_LOG_COMPILER) with a bound on its time, so that no test can hang the suite: past
# STRATA_TEST_LIMIT seconds (default 1200) it names the test and the processes still running,
# stops its whole process group (TERM, then KILL 10 s later; the emulation tests' traps then take
# their networks down) and exits 124, which automake counts as a failure. The tests bound
# themselves too (run_collbench.sh --timeout, the integration harness's deadlines): this is the
# last line.
# With EMUNET_STRESS=1, an emulation test (tests/emulation/test_*.sh, run_collbench.sh) runs
# through tests/emulation/stress.sh instead: EMUNET_STRESS_RUNS times (5) while a CPU hog runs on
# every core, its bound multiplied by the runs.
set -u
limit=${STRATA_TEST_LIMIT:-1200}
case $limit in ''|*[!0-9]*) echo "bounded.sh: STRATA_TEST_LIMIT '$limit' is not a number of seconds" >&2
                            exit 99 ;; esac
[ $# -ge 1 ] || { echo "usage: bounded.sh TEST [ARGS]" >&2; exit 99; }
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)

if [ "${EMUNET_STRESS:-0}" = 1 ]; then
    case $1 in
        */emulation/test_*.sh|*/emulation/run_collbench.sh)
            limit=$((limit * ${EMUNET_STRESS_RUNS:-5}))
            set -- bash "$here/emulation/stress.sh" "$@" ;;
    esac
fi

set -m   # the test gets a process group of its own: everything it started can be stopped
"$@" &
pid=$!
set +m
trap 'kill -TERM -- "-$pid" 2>/dev/null; wait "$pid"; exit 130' INT
trap 'kill -TERM -- "-$pid" 2>/dev/null; wait "$pid"; exit 143' TERM
start=$(date +%s)
while kill -0 "$pid" 2>/dev/null; do
    if [ $(( $(date +%s) - start )) -ge "$limit" ]; then
        echo "bounded.sh: FAIL: '$*' still running after $limit s (STRATA_TEST_LIMIT);" \
             "stopping its processes:" >&2
        pgrep -a -g "$pid" 2>/dev/null | sed 's/^/    /' >&2
        kill -TERM -- "-$pid" 2>/dev/null
        for _ in 1 2 3 4 5 6 7 8 9 10; do
            kill -0 -- "-$pid" 2>/dev/null || break
            sleep 1
        done
        kill -KILL -- "-$pid" 2>/dev/null
        wait "$pid" 2>/dev/null
        exit 124
    fi
    sleep 1 & wait $! 2>/dev/null
done
wait "$pid"
