#!/bin/bash
# check_layers.sh - the layering rule of docs/architecture.md, checked on the sources: a file
# includes only headers of its own floor or of floors below it. Floors, top to bottom:
#
#   7 src/tools            the benchmark and its commands
#   6 src/core             entry points, lifecycle, bootstrap
#   5 src/coll             algorithms
#   4 src/engine           the communicator at run time, ops, progress engine, mismatch check
#   3 src/tune             cost model, tuning files, policy
#   2 src/topo transports src/reduce   side by side (none includes another)
#   1 src/base             status, log, param, socket: nothing of strata
#   0 include              the public header
#
# An include that points up fails, naming file, line and both floors. Usage: check_layers.sh
# [source root] (default: this script's tree); tests/tools/test_check_layers.sh checks the check
# on copies of the tree.
set -u
root=${1:-$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)}
cd "$root" || exit 99

floor_of()
{
    case $1 in
        src/tools/*) echo 7 ;;
        src/core/*) echo 6 ;;
        src/coll/*) echo 5 ;;
        src/engine/*) echo 4 ;;
        src/tune/*) echo 3 ;;
        src/topo/*) echo 2 ;;
        transports/*) echo 2 ;;
        src/reduce/*) echo 2 ;;
        src/base/*) echo 1 ;;
        include/*) echo 0 ;;
        *) echo -1 ;;
    esac
}

# the file an include names, as a path of the tree ("" for system and generated headers)
target_of()
{
    case $1 in
        strata.h) echo include/strata.h ;;
        transports/*) echo "$1" ;;
        base/* | core/* | coll/* | engine/* | tune/* | topo/* | reduce/* | tools/*) echo "src/$1" ;;
        *) echo "" ;;
    esac
}

files=$(find src transports include -name '*.[ch]' 2>/dev/null | sort)
[ -n "$files" ] || { echo "check_layers: no sources under $root"; exit 99; }

bad=0
for f in $files; do
    ff=$(floor_of "$f")
    [ "$ff" -ge 0 ] || continue
    while IFS=: read -r line inc; do
        t=$(target_of "$inc")
        [ -n "$t" ] || continue
        tf=$(floor_of "$t")
        [ "$tf" -gt "$ff" ] || continue
        if [ "$ff" -eq 2 ] && [ "$tf" -eq 2 ]; then
            continue
        fi
        echo "check_layers: $f:$line includes \"$inc\": floor $ff includes floor $tf, which is above it"
        bad=$((bad + 1))
    done < <(grep -n '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' "$f" |
             sed 's/^\([0-9]*\):[^"]*"\([^"]*\)".*/\1:\2/')
done
# the floor-2 folders are side by side: none includes another
for f in $files; do
    case $f in src/topo/*) me=topo ;; transports/*) me=transports ;; src/reduce/*) me=reduce ;; *) continue ;; esac
    while IFS= read -r inc; do
        case $inc in
            topo/*) other=topo ;; transports/*) other=transports ;; reduce/*) other=reduce ;; *) continue ;;
        esac
        if [ "$other" != "$me" ]; then
            echo "check_layers: $f includes \"$inc\": $me and $other are side by side (floor 2)"
            bad=$((bad + 1))
        fi
    done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$f")
done
if [ "$bad" -ne 0 ]; then
    echo "check_layers: FAIL: $bad include(s) against the floors of docs/architecture.md"
    exit 1
fi
echo "check_layers: PASS ($(wc -w <<< "$files") files, no include pointing up)"
