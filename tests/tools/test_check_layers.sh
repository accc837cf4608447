#!/bin/bash
# test_check_layers.sh - the layering check (check_layers.sh) on the tree, and that it fails where
# it must: on copies of the tree given an include that points up (topo to core, base to tune,
# the engine to the algorithms, an algorithm to core; also written with <>, "..", a "src/"
# prefix), one between the side-by-side folders of floor 4 or of floor 9, one of a transport's own
# headers from outside its folder, or one of anything but the public header from the NCCL shim.
set -u
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
src=$(cd "$here/../.." && pwd)
check=$here/check_layers.sh
tmp=$(mktemp -d /tmp/strata-layers.XXXXXX) || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0

expect()
{
    local what=$1 want_rc=$2 want_text=$3 dir=$4 out rc
    out=$(bash "$check" "$dir" 2>&1)
    rc=$?
    if [ "$rc" -ne "$want_rc" ] || ! grep -qF -- "$want_text" <<< "$out"; then
        echo "FAIL: $what: rc $rc (want $want_rc), output lacks \"$want_text\":"
        echo "$out"
        fails=$((fails + 1))
    else
        echo "ok: $what: $(tail -n 1 <<< "$out")"
    fi
}

copy()
{
    rm -rf "$tmp/tree"
    mkdir -p "$tmp/tree"
    (cd "$src" && tar cf - --exclude='*.o' --exclude='*.lo' --exclude='.libs' \
        --exclude='.deps' --exclude='.dirstamp' src transports include) | tar xf - -C "$tmp/tree"
}

expect "the tree" 0 "check_layers: PASS" "$src"

copy
printf '#include "core/init.h"\n' > "$tmp/tree/src/topo/zz_up.c"
expect "topo including core" 1 'src/topo/zz_up.c:1 includes "core/init.h": floor 4 includes floor 8' "$tmp/tree"

copy
printf '#include "base/log.h"\n#include "tune/tune.h"\n' > "$tmp/tree/src/base/zz_up.h"
expect "base including tune" 1 'src/base/zz_up.h:2 includes "tune/tune.h": floor 1 includes floor 5' "$tmp/tree"

copy
printf '#include "topo/topo.h"\n' > "$tmp/tree/transports/zz_side.c"
expect "transports including topo" 1 'transports/zz_side.c:1 includes "topo/topo.h": transports and topo are side by side' "$tmp/tree"

copy
printf '#include "coll/coll.h"\n' >> "$tmp/tree/src/engine/exec.c"
expect "the engine including an algorithm's header" 1 'includes "coll/coll.h": floor 6 includes floor 7' "$tmp/tree"

copy
printf '#include "core/init.h"\n' >> "$tmp/tree/src/coll/ring.c"
expect "an algorithm including core" 1 'includes "core/init.h": floor 7 includes floor 8' "$tmp/tree"

# written otherwise than the tree's own includes: the check resolves them as the compiler does
copy
printf '#include <engine/comm.h>\n' > "$tmp/tree/src/base/zz_angle.c"
expect "base including the engine with <>" 1 'src/base/zz_angle.c:1 includes "engine/comm.h": floor 1 includes floor 6' "$tmp/tree"

copy
printf '#include "../engine/comm.h"\n' > "$tmp/tree/src/base/zz_rel.c"
expect "base including the engine by a relative path" 1 'includes "../engine/comm.h": floor 1 includes floor 6' "$tmp/tree"

copy
printf '#include "coll/../core/init.h"\n' > "$tmp/tree/src/engine/zz_dots.c"
expect "the engine including core through .." 1 'includes "coll/../core/init.h": floor 6 includes floor 8' "$tmp/tree"

copy
printf '#include "src/core/init.h"\n' > "$tmp/tree/src/coll/zz_src.c"
expect "an algorithm including core as src/" 1 'includes "src/core/init.h": floor 7 includes floor 8' "$tmp/tree"

# a transport's own headers are private to its folder
copy
printf '#include "transports/shm/shm.h"\n' > "$tmp/tree/src/coll/zz_private.c"
expect "an algorithm including a transport's own header" 1 'transports/shm/shm.h is private to transports/shm' "$tmp/tree"

copy
mkdir -p "$tmp/tree/transports/zz"
printf '#include "transports/shm/shm.h"\n' > "$tmp/tree/transports/zz/zz_other.c"
expect "a transport including another's header" 1 'transports/zz/zz_other.c:1 includes "transports/shm/shm.h": transports/shm/shm.h is private' "$tmp/tree"

# the NCCL shim (src/shim/) is a client of include/ only: not even a floor below it
copy
printf '#include "base/log.h"\n' >> "$tmp/tree/src/shim/nccl.c"
expect "the shim including a floor below it" 1 'includes "base/log.h": the shim includes only the public header (include/), not src/base/log.h' "$tmp/tree"

copy
printf '#include "shim/zz.h"\n' > "$tmp/tree/src/tools/zz_shim.c"
printf '/* empty */\n' > "$tmp/tree/src/shim/zz.h"
expect "the benchmark including the shim" 1 'src/tools/zz_shim.c:1 includes "shim/zz.h": tools and shim are side by side (floor 9)' "$tmp/tree"

if [ "$fails" -ne 0 ]; then
    echo "test_check_layers: $fails failed"
    exit 1
fi
echo "test_check_layers: all passed"
