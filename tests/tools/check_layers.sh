#!/bin/bash
# check_layers.sh - the layering rule of docs/architecture.md, checked on the sources: a file
# includes only headers of its own floor or of floors below it. Floors, top to bottom:
#
#   9 src/tools src/shim   side by side: the benchmark and its commands; the NCCL shim
#                          (libnccl.so.2), a client of the public header only
#   8 src/core             entry points, lifecycle, bootstrap, device queues
#   7 src/coll             algorithms
#   6 src/engine           the communicator at run time, ops, progress engine, mismatch check
#   5 src/tune             cost model, tuning files, policy
#   4 src/topo transports  side by side (neither includes the other)
#   3 src/device src/codec side by side: the device operations table (cuda, the simulated
#                          device); the codecs of the compressed inter-node step
#   2 src/reduce           reduction kernels (host, GPU) and their shared element code
#   1 src/base             status, log, param, socket: nothing of strata
#   0 include              the public header
#
# An include that points up fails, naming file, line and both floors; so does an include of a
# transport's own header from outside its folder (everything else reaches a transport through
# transports/transport.h), and an include of anything but include/ from src/shim/ (the shim
# uses strata's public API and nothing else: strata.h, nccl.h, libc). Includes are resolved as
# the compiler would (the includer's folder, then src/, the root, include/; "" and <> alike, ".."
# normalised). Usage: check_layers.sh [source root] (default: this script's tree);
# tests/tools/test_check_layers.sh checks the check on copies of the tree.
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root" || exit 99

floor_of()
{
    case $1 in
        src/tools/*) echo 9 ;;
        src/shim/*) echo 9 ;;
        src/core/*) echo 8 ;;
        src/coll/*) echo 7 ;;
        src/engine/*) echo 6 ;;
        src/tune/*) echo 5 ;;
        src/topo/*) echo 4 ;;
        transports/*) echo 4 ;;
        src/device/*) echo 3 ;;
        src/codec/*) echo 3 ;;
        src/reduce/*) echo 2 ;;
        src/base/*) echo 1 ;;
        include/*) echo 0 ;;
        *) echo -1 ;;
    esac
}

# The file of the tree that an include of file $1 names ($2, as written between "" or <>), as a
# path from the root, normalised ("coll/../core/init.h" is src/core/init.h); "" for system and
# generated headers. Searched as the compiler does: the includer's folder, then the include
# paths of the build (src/, the root, include/).
target_of()
{
    local from=$1 inc=$2 dir cand
    dir=$(dirname "$from")
    for cand in "$dir/$inc" "src/$inc" "$inc" "include/$inc"; do
        if [ -f "$cand" ]; then
            realpath -m --relative-to=. "$cand"
            return
        fi
    done
    echo ""
}

# the transport folder of a path (transports/shm/x.c: shm), or "" outside one
tl_of()
{
    case $1 in
        transports/*/*) local rest=${1#transports/}; echo "${rest%%/*}" ;;
        *) echo "" ;;
    esac
}

files=$(find src transports include -name '*.[ch]' -o -name '*.cu' 2>/dev/null | sort)
[ -n "$files" ] || { echo "check_layers: no sources under $root"; exit 99; }

bad=0
for f in $files; do
    ff=$(floor_of "$f")
    [ "$ff" -ge 0 ] || continue
    while IFS=: read -r line inc; do
        t=$(target_of "$f" "$inc")
        [ -n "$t" ] || continue
        tf=$(floor_of "$t")
        [ "$tf" -ge 0 ] || continue
        # a transport's own headers are its own: others reach it through transports/transport.h
        ttl=$(tl_of "$t")
        if [ -n "$ttl" ] && [ "$ttl" != "$(tl_of "$f")" ]; then
            echo "check_layers: $f:$line includes \"$inc\": $t is private to transports/$ttl (use transports/transport.h)"
            bad=$((bad + 1))
            continue
        fi
        # the NCCL shim is a client of the public API: include/ only
        if [ "${f#src/shim/}" != "$f" ] && [ "$tf" -ne 0 ]; then
            echo "check_layers: $f:$line includes \"$inc\": the shim includes only the public header (include/), not $t"
            bad=$((bad + 1))
            continue
        fi
        if { [ "$ff" -eq 3 ] && [ "$tf" -eq 3 ]; } || { [ "$ff" -eq 4 ] && [ "$tf" -eq 4 ]; } ||
           { [ "$ff" -eq 9 ] && [ "$tf" -eq 9 ]; }; then
            # the folders of floors 3, 4 and 9 are side by side: neither includes the other
            me=${f%%/*}; [ "$me" = src ] && me=$(cut -d/ -f2 <<< "$f")
            other=${t%%/*}; [ "$other" = src ] && other=$(cut -d/ -f2 <<< "$t")
            if [ "$other" != "$me" ]; then
                echo "check_layers: $f:$line includes \"$inc\": $me and $other are side by side (floor $ff)"
                bad=$((bad + 1))
            fi
            continue
        fi
        [ "$tf" -gt "$ff" ] || continue
        echo "check_layers: $f:$line includes \"$inc\": floor $ff includes floor $tf, which is above it"
        bad=$((bad + 1))
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*["<]' "$f" |
             sed 's/^\([0-9]*\):[^"<]*["<]\([^">]*\)[">].*/\1:\2/')
done
if [ "$bad" -ne 0 ]; then
    echo "check_layers: FAIL: $bad include(s) against the floors of docs/architecture.md"
    exit 1
fi
echo "check_layers: PASS ($(wc -w <<< "$files") files, no include pointing up)"
