#!/bin/bash
# test_compress.sh: the binding's compression (test_compress.py, unittest): codec specs and
# compressors, the errors, one node, and 4 ranks on 2 emulated nodes (STRATA_HOSTID) checked for
# bitwise identity, the codecs' error bounds and error feedback.
# Exit 0 pass, 1 fail, 77 skip (the interpreter lacks numpy or torch), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
exec timeout -k 10 300 "$strata_py" "$strata_py_here/test_compress.py"
