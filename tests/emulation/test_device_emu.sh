#!/bin/bash
# test_device_emu.sh: collectives on device buffers of the simulated device (collbench --device
# sim, STRATA_DEVICE=sim) across emulated nodes: network namespaces joined by veth, so the
# inter-node phase really crosses the links (run_collbench.sh checks the byte counters). Layouts
# 2x2 and 3+1 (a node of one rank owns two shards), every collective with every datatype and op,
# results checked (#wrong 0), under the automatic choice and with hier forced (the device windows'
# path), then zero-copy on strataMemAlloc device memory. Nothing here is GPU performance.
#   test_device_emu.sh        (STRATA_TEST_DEVICE_EMU_MAX=1M: the largest size)
# Exit 0 pass, 1 fail, 77 skip (not root, no network namespaces).
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
max=${STRATA_TEST_DEVICE_EMU_MAX:-1M}
fails=0 ran=0

run()
{
    local rc
    echo "== run_collbench.sh $*"
    bash "$here/run_collbench.sh" --quiet "$@"
    rc=$?
    [ "$rc" -eq 77 ] && { echo "SKIP: emulated nodes unavailable (run_collbench.sh says 77)"; exit 77; }
    ran=$((ran + 1))
    if [ "$rc" -ne 0 ]; then
        echo "FAIL ($rc): run_collbench.sh $*"
        fails=$((fails + 1))
    fi
}

for layout in "--nodes 2 --np 4" "--layout 3,1"; do
    # shellcheck disable=SC2086
    run $layout --timeout 300 -- --device sim all -b 8 -e "$max" -f 32 -n 2 -w 1 -c 1 -d all \
        -o all
    # shellcheck disable=SC2086
    run $layout --timeout 300 -- --device sim -A hier all -b 4k -e "$max" -f 16 -n 2 -w 1 -c 1 \
        -d float,bfloat16,int8 -o sum,avg,max
done
run --nodes 2 --np 4 --timeout 300 -- --device sim --mem-alloc all_reduce -b 64k -e "$max" -f 4 \
    -n 2 -w 1 -c 1
echo "test_device_emu: $ran runs, $fails failed"
[ "$fails" -eq 0 ]
