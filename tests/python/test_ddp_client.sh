#!/bin/bash
# test_ddp_client.sh: the client test (test_ddp_client.py): examples/ddp_digits.py under
# torch.distributed.run, 4 ranks x 3 epochs, with gloo and with strata from the same seed; the
# losses, the accuracy and the bitwise identity of the ranks' parameters are checked.
# Exit 0 pass, 1 fail, 77 skip (the interpreter lacks torch, numpy or sklearn), 99 no library.
set -u
# shellcheck source=pyenv.sh
. "$(cd "$(dirname "$0")" && pwd)/pyenv.sh"
strata_py_need numpy torch sklearn
echo "# $strata_py, STRATA_LIBRARY=$STRATA_LIBRARY"
# The script kills its launches itself (own session, deadline per run); this is the backstop.
exec timeout -k 10 600 "$strata_py" "$strata_py_here/test_ddp_client.py" "$@"
