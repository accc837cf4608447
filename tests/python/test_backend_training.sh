#!/bin/bash
# test_backend_training.sh: training through the strata torch.distributed backend
# (test_backend_training.py): examples/ddp_digits.py (DDP), zero_digits.py (DDP +
# ZeroRedundancyOptimizer) and pipeline_digits.py (1F1B over send/recv, 2 pipelines x 2 stages)
# with --backend gloo and --backend strata from the same seed; every epoch's loss within 1e-4
# relative, no gloo group under strata, the ranks' parameters bitwise identical.
# Exit 0 pass, 1 fail, 77 skip (the interpreter lacks torch, numpy or sklearn, or the tree has no
# python/strata/torch.py yet), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch sklearn
if [ ! -f "$strata_top_src/python/strata/torch.py" ]; then
    echo "SKIP: no $strata_top_src/python/strata/torch.py (the strata backend of torch.distributed)"
    exit 77
fi
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
# The script kills its launches itself (own session, deadline per run); this is the backstop.
exec timeout -k 10 400 "$strata_py" "$strata_py_here/test_backend_training.py" "$@"
