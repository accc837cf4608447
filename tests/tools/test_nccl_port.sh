#!/bin/bash
# test_nccl_port.sh: examples/nccl_port.c is an NCCL program for device buffers with every nccl
# identifier renamed to strata, and nothing else changed. `make check` builds and links it against
# strata.h and libstrata (examples/nccl_port, SKIP without a GPU); this script undoes the rename
# (sed strata -> nccl, STRATA -> NCCL) and compiles the result against the CUDA prefix's nccl.h,
# with the same warnings as errors, so a port that needed anything but the rename fails here.
# It compiles the file as it is against strata.h too, with the same flags, so that both sides are
# held to the same standard.
#   test_nccl_port.sh      (CC: the compiler, default cc; CUDA_CPPFLAGS: where cuda_runtime.h and
#                           nccl.h are, default -I/usr/local/cuda/include; both set by make check)
# Exit 0 pass, 1 fail, 77 skip (no nccl.h or no cuda_runtime.h).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
src=$top/examples/nccl_port.c
cc=${CC:-cc}
cuda_cppflags=${CUDA_CPPFLAGS:--I/usr/local/cuda/include}
flags=(-std=c11 -D_GNU_SOURCE -Wall -Wextra -Werror -Werror=implicit-function-declaration
       -pedantic -pthread)

# where the headers are, as the compiler sees them
inc=$(echo "#include <nccl.h>" | $cc $cuda_cppflags -E -H -x c - 2>&1 >/dev/null | grep -m1 'nccl\.h$' | sed 's/^\.* //')
if [ -z "$inc" ]; then
    echo "SKIP: no nccl.h under $cuda_cppflags (the CUDA prefix's NCCL headers)"
    exit 77
fi

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ncclport.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0

# 1. as it is, against strata.h
if $cc "${flags[@]}" -I"$top/include" $cuda_cppflags -c -o "$tmp/strata.o" "$src" 2>"$tmp/err"; then
    echo "ok: examples/nccl_port.c compiles against strata.h"
else
    echo "FAIL: examples/nccl_port.c does not compile against strata.h:"
    sed 's/^/    /' "$tmp/err" | head -20
    fails=$((fails + 1))
fi

# 2. renamed back, against nccl.h alone (no strata header on the path)
sed -e 's/strata/nccl/g' -e 's/STRATA/NCCL/g' "$src" >"$tmp/nccl_port.c"
if grep -qi strata "$tmp/nccl_port.c"; then
    echo "FAIL: the renamed file still says strata"; fails=$((fails + 1))
fi
n=$(grep -o -E '\bnccl[A-Z][A-Za-z0-9_]*' "$tmp/nccl_port.c" | sort -u | tr '\n' ' ')
if $cc "${flags[@]}" $cuda_cppflags -c -o "$tmp/nccl.o" "$tmp/nccl_port.c" 2>"$tmp/err"; then
    echo "ok: renamed strata -> nccl, it compiles against $inc ($(grep -m1 -o 'NCCL_MAJOR [0-9]*' "$inc" | cut -d' ' -f2).$(grep -m1 -o 'NCCL_MINOR [0-9]*' "$inc" | cut -d' ' -f2)); NCCL names used: $n"
else
    echo "FAIL: renamed strata -> nccl, it does not compile against $inc:"
    sed 's/^/    /' "$tmp/err" | head -20
    fails=$((fails + 1))
fi
# the renamed file must call NCCL, not something else: its undefined symbols are nccl*, CUDA's
# and libc's only
if [ -f "$tmp/nccl.o" ]; then
    other=$(nm -u "$tmp/nccl.o" | awk '{print $2}' | grep -v -E '^(nccl|cuda|__cuda|pthread_|printf$|puts$|putchar$|malloc$|free$|exit$|atoi$|__stack_chk_fail$|_GLOBAL_OFFSET_TABLE_$)' | tr '\n' ' ')
    if [ -n "$other" ]; then
        echo "FAIL: the renamed program calls more than NCCL, CUDA and libc: $other"
        fails=$((fails + 1))
    else
        echo "ok: the renamed program calls only nccl*, cuda* and libc"
    fi
fi

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
