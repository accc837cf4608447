#!/bin/bash
# test_nccl_symbols.sh: the NCCL shim (src/shim/.libs/libnccl.so.2) exports every function the
# installed nccl.h declares, under both of its names (ncclXxx and pncclXxx), as NVIDIA's library
# does: ncclXxx weak, pncclXxx strong, no symbol version node, nothing else exported (no strata
# symbol leaks through it); and its SONAME is libnccl.so.2. The declarations are read from the
# preprocessed header (comments gone), every identifier nccl*/pnccl* followed by "(".
# For information, it lists what the real libnccl exports beyond nccl.h (the device API of
# nccl_device.h, which the shim does not provide).
#   test_nccl_symbols.sh   (CC; NCCL_SHIM_CPPFLAGS: where nccl.h is, as configure found it, empty
#                           when it found none; STRATA_BUILDDIR: the build tree; make check sets
#                           them; run by hand, the CUDA prefix and this script's tree)
# Exit 0 pass, 1 fail, 77 skip (no nccl.h, so no shim).
set -u
here=$(cd "$(dirname "$0")" && pwd)
. "$here/shim_env.sh"   # build, cc, cppflags, hdr, shimdir, shim; or skip
for t in nm readelf; do
    command -v $t >/dev/null || { echo "SKIP: no $t (binutils)"; exit 77; }
done

tmp=$(mktemp -d "${TMPDIR:-/tmp}/ncclsyms.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# 1. what nccl.h declares
echo "#include <nccl.h>" | $cc $cppflags -E -P -x c - >"$tmp/pp.c" 2>"$tmp/err" ||
    { fail "nccl.h does not preprocess: $(head -3 "$tmp/err")"; exit 1; }
grep -oE '\bp?nccl[A-Z][A-Za-z0-9_]*[[:space:]]*\(' "$tmp/pp.c" | tr -d ' \t(' | sort -u >"$tmp/declared"
nd=$(wc -l <"$tmp/declared")
version=$(sed -n 's/^#define NCCL_VERSION_CODE //p' "$hdr")
[ "$nd" -gt 0 ] || { fail "found no function in $hdr"; exit 1; }
# each declared name has its twin (nccl* and pnccl*)
while read -r f; do
    case $f in p*) twin=${f#p} ;; *) twin=p$f ;; esac
    grep -qx "$twin" "$tmp/declared" || fail "$hdr declares $f but not $twin"
done <"$tmp/declared"

# 2. what the shim exports: T (strong) and W (weak) functions
nm -D --defined-only "$shim" | awk '{print $3, $2}' | sort >"$tmp/exported"
awk '{print $1}' "$tmp/exported" >"$tmp/names"
missing=$(comm -23 "$tmp/declared" "$tmp/names" | tr '\n' ' ')
extra=$(comm -13 "$tmp/declared" "$tmp/names" | grep -vxE '_init|_fini' | tr '\n' ' ')
[ -z "$missing" ] || fail "the shim does not export: $missing"
[ -z "$extra" ] || fail "the shim exports more than nccl.h declares: $extra"
# nccl* weak, pnccl* strong, all functions
bad=$(awk '($1 ~ /^nccl/ && $2 != "W") || ($1 ~ /^pnccl/ && $2 != "T") {print $1 "(" $2 ")"}' "$tmp/exported" | tr '\n' ' ')
[ -z "$bad" ] || fail "not weak nccl* / strong pnccl* functions: $bad"
# no version node of its own (NVIDIA's library has none)
if readelf -V "$shim" | grep -q 'Version definition section'; then
    fail "the shim defines symbol versions: $(readelf -V "$shim" | grep -A3 'Version definition' | tr '\n' ' ')"
fi
if [ -z "$missing" ] && [ -z "$extra" ]; then
    echo "ok: nccl.h ($hdr, NCCL_VERSION_CODE $version) declares $nd functions ($((nd / 2)) nccl* and their pnccl* twins), the shim exports all $nd and nothing else"
fi

# 3. SONAME
soname=$(readelf -d "$shim" | sed -n 's/.*(SONAME).*\[\(.*\)\]/\1/p')
[ "$soname" = libnccl.so.2 ] && echo "ok: SONAME $soname" || fail "SONAME is '$soname', not libnccl.so.2"

# 4. for information: the real library's exports beyond nccl.h
real=$(ls "$(dirname "$hdr")"/../lib64/libnccl.so.2 "$(dirname "$hdr")"/../lib/libnccl.so.2 2>/dev/null | head -1)
if [ -n "$real" ]; then
    nm -D --defined-only "$real" 2>/dev/null | awk '$3 ~ /^p?nccl/ {print $3}' | sort -u >"$tmp/real"
    beyond=$(comm -13 "$tmp/declared" "$tmp/real")
    echo "info: $(basename "$(readlink -f "$real")") exports $(wc -l <"$tmp/real") nccl*/pnccl* symbols; $(echo "$beyond" | grep -c .) beyond nccl.h (device API, internal), not in the shim: $(echo "$beyond" | grep -v '^pnccl' | tr '\n' ' ')"
fi

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
