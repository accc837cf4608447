# shim_env.sh: the preamble of the NCCL shim's tests (test_nccl_symbols.sh, test_nccl_host.sh),
# sourced after they set here (their folder). Sets build (STRATA_BUILDDIR, else this tree), cc
# (CC, else cc), cppflags (NCCL_SHIM_CPPFLAGS: where nccl.h is, as configure found it, empty when
# it found none; make check sets it; unset, the CUDA prefix), hdr (the nccl.h it finds), shimdir
# and shim (the shim's folder and its libnccl.so.2). Exits 77 (skip) without nccl.h, so without
# a shim; 1 when the shim is not built.
build=${STRATA_BUILDDIR:-$(cd "$here/../.." && pwd)}
cc=${CC:-cc}
cppflags=${NCCL_SHIM_CPPFLAGS-"-I/usr/local/cuda/include"}
[ -n "$cppflags" ] || { echo "SKIP: configure found no nccl.h, so the NCCL shim is not built"; exit 77; }
hdr=$(echo "#include <nccl.h>" | $cc $cppflags -E -H -x c - 2>&1 >/dev/null | grep -m1 'nccl\.h$' | sed 's/^\.* //')
[ -n "$hdr" ] || { echo "SKIP: no nccl.h under $cppflags"; exit 77; }
shimdir=$build/src/shim/.libs
shim=$shimdir/libnccl.so.2
[ -f "$shim" ] || { echo "FAIL: $shim is not built (make builds it where nccl.h is)"; exit 1; }
