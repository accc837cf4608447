#!/bin/bash
# test_fakeverbs.sh: runs tests/fakeverbs/test_fakeverbs (make check runs it from the build
# directory) on the stand-in libibverbs.so.1, on fabrics of its own (check-<pid>-<case>) that it
# removes on every exit. SKIP (77) when the stand-in was not built (configure found no
# <infiniband/verbs.h>) or when this machine denies one process writing into another's memory.
set -u
dir=${FAKEVERBS_DIR:-tests/fakeverbs}
if [ ! -x "$dir/test_fakeverbs" ] || [ ! -x "$dir/fakeverbs-ctl" ] || [ ! -f "$dir/libibverbs.so.1" ]; then
    echo "SKIP: fakeverbs not built in $dir (configure found no libibverbs headers)"
    exit 77
fi
"$dir/fakeverbs-ctl" probe
rc=$?
[ $rc -eq 0 ] || exit $rc
export FAKEVERBS_FABRIC=check-$$
cleanup() {
    for f in /dev/shm/fakeverbs-"$FAKEVERBS_FABRIC"*; do
        [ -e "$f" ] && rm -f "$f"
    done
}
trap cleanup EXIT
LD_LIBRARY_PATH="$dir${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}" "$dir/test_fakeverbs" "$@"
