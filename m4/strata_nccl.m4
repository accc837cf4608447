# ST_CHECK_NCCL_SHIM (after ST_CHECK_CUDA): the NCCL-compatible library (src/shim/nccl.c,
# libnccl.so.2) is compiled against the real nccl.h, so that the compiler checks every signature
# it exports; it is built wherever that header is found. nccl.h includes cuda_runtime.h (types
# only), so both must be in the directory searched: --with-nccl-shim=DIR names it (DIR/include or
# DIR itself); unset, the CUDA prefix's include directory (/usr/local/cuda/include).
# --without-nccl-shim disables; an explicit --with-nccl-shim makes absence fatal.
AC_DEFUN([ST_CHECK_NCCL_SHIM], [
  AC_ARG_WITH([nccl-shim], [AS_HELP_STRING([--with-nccl-shim@<:@=DIR@:>@],
              [libnccl.so.2 over strata, built against DIR's nccl.h (default: when the CUDA prefix has nccl.h)])],
              [], [with_nccl_shim=check])
  st_nccl_shim_happy=no
  NCCL_SHIM_CPPFLAGS=
  AS_IF([test "x$with_nccl_shim" != xno], [
    AS_IF([test "x$with_nccl_shim" = xcheck || test "x$with_nccl_shim" = xyes],
          [st_nccl_dir=${st_cuda_dir:-/usr/local/cuda}], [st_nccl_dir=$with_nccl_shim])
    AS_IF([test -f "$st_nccl_dir/include/nccl.h"], [st_nccl_inc=$st_nccl_dir/include],
          [st_nccl_inc=$st_nccl_dir])
    st_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS -I$st_nccl_inc"
    AC_MSG_CHECKING([whether nccl.h in $st_nccl_inc compiles as C])
    AC_COMPILE_IFELSE([AC_LANG_PROGRAM([[#include <nccl.h>]],
                                       [[ncclUniqueId id; return (int)sizeof(id) + (int)ncclSuccess;]])],
                      [st_nccl_shim_happy=yes])
    AC_MSG_RESULT([$st_nccl_shim_happy])
    CPPFLAGS=$st_save_CPPFLAGS
    AS_IF([test $st_nccl_shim_happy = yes],
          [NCCL_SHIM_CPPFLAGS="-I$st_nccl_inc"
           st_nccl_version=`sed -n 's/^#define NCCL_VERSION_CODE //p' "$st_nccl_inc/nccl.h"`],
          [AS_IF([test "x$with_nccl_shim" != xcheck],
                 [AC_MSG_ERROR([--with-nccl-shim given but no usable nccl.h in $st_nccl_inc])])])])
  AC_SUBST([NCCL_SHIM_CPPFLAGS])])
