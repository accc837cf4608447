#!/bin/bash
# test_binding.sh: the Python binding's unit tests (test_binding.py, unittest): every datatype and
# op against numpy, the collectives, streams and requests, split, the DDP hook in one process, the
# errors. Exit 0 pass, 1 fail, 77 skip (the interpreter lacks numpy or torch), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
exec timeout -k 10 300 "$strata_py" "$strata_py_here/test_binding.py"
