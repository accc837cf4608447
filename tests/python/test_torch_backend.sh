#!/bin/bash
# test_torch_backend.sh: the torch.distributed backend "strata" (test_torch_backend.py): every
# collective with 2 and 4 processes, the dtypes and ops strata lacks, groups, futures, a rank
# that exits, the refused calls. Exit 0 pass, 1 fail, 77 skip (no torch), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
exec timeout -k 10 600 "$strata_py" "$strata_py_here/test_torch_backend.py"
