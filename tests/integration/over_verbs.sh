#!/bin/bash
# over_verbs.sh: the integration suites (test_colls, test_cases with its held-back field cases,
# test_faults, test_comms, test_errors, test_mismatch, test_order, test_progress,
# test_lifecycle) again with STRATA_NET=verbs on the stand-in libibverbs (tests/fakeverbs: two
# HCAs; the harness's emulated nodes give every two-node layout one rail per HCA), as they run
# over UCX. The stand-in's fabric is this run's own and is removed on every path; its retry
# timeout is scaled by 1/100 (FAKEVERBS_TIME_SCALE) so a dead peer's RETRY_EXC comes in time.
#   over_verbs.sh [suite ...]      (default: all of the above; each a tests/integration binary)
# Exit 0 pass, 1 a suite failed, 77 skip (built without verbs headers, or the stand-in cannot
# write into another process: process_vm_writev / pidfd_getfd denied), 99 setup error.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
build=$(cd "$(dirname "${COLLBENCH:-$here/../../collbench}")" && pwd)
# shellcheck source=../fakeverbs/standin.sh
. "$here/../fakeverbs/standin.sh"
standin_locate "$build" || exit 77
lib=$standin_lib
suites=("$@")
[ ${#suites[@]} -gt 0 ] || suites=(test_colls test_cases test_faults test_comms test_errors
                                    test_mismatch test_order test_progress test_lifecycle)
export STRATA_NET=verbs STRATA_IBVERBS_LIB=$lib FAKEVERBS_FABRIC="itv$$" FAKEVERBS_NDEV=2
export FAKEVERBS_TIME_SCALE=0.01
trap 'standin_clean "$FAKEVERBS_FABRIC"' EXIT
fail=0
for s in "${suites[@]}"; do
    bin=$build/tests/integration/$s
    if [ ! -x "$bin" ]; then
        echo "over_verbs: $bin is not built" >&2
        exit 99
    fi
    t0=$SECONDS
    "$bin"
    rc=$?
    echo "# over verbs: $s exit $rc in $((SECONDS - t0)) s"
    [ "$rc" = 0 ] || fail=1
done
exit "$fail"
