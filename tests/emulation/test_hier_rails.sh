#!/bin/bash
# test_hier_rails.sh: the hierarchical algorithm across 2 emulated nodes with two links each
# (one per rail, STRATA_RAIL_IFNAMES=emu0,emu1): all five collectives with data checks, and from
# the interface counters that the inter-node bytes crossed the veth links and that both links of
# every node carried their share (run_collbench.sh --links 2). Then 2+3 ranks (uneven nodes: the
# rank alone on its rail... of node 0 owns two shards) on the same links. Last, the flat ring's
# all-reduce with two channels (STRATA_RING_CHANNELS=2), whose second channel leaves each node
# through the other local rank and so must put bytes on both links too.
# Exit 0 pass, 1 fail, 77 skip (no network namespaces), 99 setup error.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
run="$here/run_collbench.sh"

"$run" --nodes 2 --np 4 --links 2 --quiet -- all -A hier -b 8 -e 2M -f 16 -n 2 -w 1 -c 1
rc=$?
[ "$rc" != 0 ] && exit "$rc"
"$run" --nodes 2 --np 5 --links 2 --quiet -- all_reduce -A hier -b 1M -e 4M -f 4 -n 2 -w 1 -c 1
rc=$?
[ "$rc" != 0 ] && exit "$rc"
STRATA_RING_CHANNELS=2 "$run" --nodes 2 --np 4 --links 2 --quiet -- \
    all_reduce -A ring -b 1M -e 4M -f 4 -n 2 -w 1 -c 1
