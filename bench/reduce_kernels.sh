#!/bin/bash
# reduce_kernels.sh: one-core bandwidth of the reduction kernels beside memcpy of the same bytes.
#   bench/reduce_kernels.sh [BUILD_DIR] [COUNT] [ITERS]   (BUILD_DIR: where make ran; default .)
set -euo pipefail
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
top=$(cd "$here/.." && pwd)
build=$(cd "${1:-.}" && pwd)
lib="$build/.libs/libstrata_internal.a"
[ -f "$lib" ] || { echo "reduce_kernels: no $lib (build first)" >&2; exit 2; }
tmp=$(mktemp -d "${TMPDIR:-/tmp}/strata-bench.$$.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
gcc -O2 -D_GNU_SOURCE -I"$build" -I"$top/include" -I"$top/src" -I"$top" \
    "$here/reduce_kernels.c" "$lib" -o "$tmp/reduce_kernels" \
    $(pkg-config --libs ucx hwloc) -lm -lpthread
"$tmp/reduce_kernels" "${2:-2097152}" "${3:-20}"
