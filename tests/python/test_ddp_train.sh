#!/bin/bash
# test_ddp_train.sh: examples/ddp_digits.py with --comm strata-compress (int8) and
# strata-powersgd (rank 2), 1 epoch each, on 4 ranks in 2 nodes of 2 by STRATA_HOSTID (loopback,
# no namespaces) (test_ddp_train.py): the JSON fields bench/compress_train.sh reads are there,
# wire bytes between 0 and fp32's, accuracy above 50 %, parameters bitwise identical. About 15 s.
# Exit 0 pass, 1 fail, 77 skip (the interpreter lacks numpy, torch or sklearn), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch sklearn
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
# The script kills its ranks after 60 s per run itself; this is the backstop.
exec timeout -k 10 180 "$strata_py" "$strata_py_here/test_ddp_train.py" "$@"
