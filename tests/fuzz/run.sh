#!/bin/bash
# run.sh - runs each libFuzzer harness of tests/fuzz/ for a bounded time over its seed corpus.
#   tests/fuzz/run.sh BUILD_DIR [SECONDS]
# BUILD_DIR was configured with CC=clang --enable-fuzzers and holds tests/fuzz/fuzz_* (built by
# `make`). SECONDS per harness: the argument, else FUZZ_SECONDS, else 30. New inputs go to a
# scratch folder that is removed afterwards: the committed corpus (corpus/<harness>/) only
# changes by hand. A crash, sanitizer report, leak or timeout of any harness fails the run; its
# input is kept in BUILD_DIR/tests/fuzz/artifacts/ and named in the output.
# Prints per harness the runs, the execs/s and the coverage libFuzzer reached.
set -uo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=${1:?usage: run.sh BUILD_DIR [SECONDS]}
secs=${2:-${FUZZ_SECONDS:-30}}
harnesses="fuzz_wire fuzz_root fuzz_records"
failed=0

scratch=$(mktemp -d "${TMPDIR:-/tmp}/strata-fuzz.XXXXXX") || exit 1
trap 'rm -rf "$scratch"' EXIT
mkdir -p "$build/tests/fuzz/artifacts"
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
for h in $harnesses; do
    bin=$build/tests/fuzz/$h
    if [ ! -x "$bin" ]; then
        echo "run.sh: $bin is missing (configure CC=clang --enable-fuzzers; make)" >&2
        failed=1
        continue
    fi
    mkdir -p "$scratch/$h"
    # -timeout: one input running longer than this is a hang (the root harness waits at most a
    # few seconds by design); -rss_limit_mb: a runaway allocation fails instead of swapping.
    "$bin" -max_total_time="$secs" -timeout=20 -rss_limit_mb=2048 -print_final_stats=1 \
        -artifact_prefix="$build/tests/fuzz/artifacts/$h-" \
        "$scratch/$h" "$here/corpus/$h" > "$scratch/$h.log" 2>&1
    rc=$?
    runs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$scratch/$h.log")
    rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$scratch/$h.log")
    cov=$(grep -oE 'cov: [0-9]+ ft: [0-9]+' "$scratch/$h.log" | tail -n1)
    if [ $rc -ne 0 ]; then
        echo "FAIL: $h (exit $rc) after ${runs:-?} runs; last lines of its log:"
        tail -n 40 "$scratch/$h.log"
        failed=1
    else
        echo "PASS: $h: ${runs:-?} runs in ${secs} s, ${rate:-?} execs/s, ${cov:-no coverage line}"
    fi
done
exit $failed
