#!/bin/bash
# test_ddp_compress.sh: DDP with strata.ddp's compress_hook (fp16, int8, topk, sign) and
# powerSGD_hook on 4 ranks in 2 emulated nodes (test_ddp_compress.py): the ranks' parameters stay
# bitwise identical after every step and the loss falls.
# Exit 0 pass, 1 fail, 77 skip (the interpreter lacks numpy or torch), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
# The script kills its workers after 150 s itself; this is the backstop.
exec timeout -k 10 300 "$strata_py" "$strata_py_here/test_ddp_compress.py" "$@"
