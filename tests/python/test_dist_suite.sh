#!/bin/bash
# test_dist_suite.sh: PyTorch's own distributed test suite (torch.testing._internal.distributed.
# distributed_test, DistributedTest._DistTestBase) against the strata c10d backend (`import
# strata.torch`), world sizes 2 and 4, through dist_suite.py: every test the suite runs for a CPU
# plugin backend, less those dist_suite.exclude lists (reported as skipped, with their reason).
# Arguments go to dist_suite.py (e.g. -k allreduce, --list, -w 4, --start-method spawn).
# Exit 0 pass, 1 fail, 77 skip (no torch/numpy, no torch.distributed, or no backend module),
# 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch
backend_module=${STRATA_DIST_BACKEND_MODULE:-strata.torch}
why=$("$strata_py" -c 'import importlib.util, sys
import torch.distributed as dist
if not dist.is_available():
    print("this torch has no torch.distributed"); sys.exit(0)
try:
    spec = importlib.util.find_spec(sys.argv[1])
except ImportError as e:
    spec = None
if spec is None:
    print("no module %s (the c10d backend)" % sys.argv[1])' "$backend_module") || exit 99
if [ -n "$why" ]; then
    echo "SKIP: $why"
    exit 77
fi
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY, backend module $backend_module"
# Each test's ranks are killed by the suite after --timeout (120 s); this is the backstop for the
# whole run (about 1.5 min when all pass on 2 cores).
exec timeout -k 10 900 "$strata_py" "$strata_py_here/dist_suite.py" -w 2,4 --show-errors \
     --backend-module "$backend_module" "$@"
