# ST_CHECK_CUDA: CUDA runtime + nvcc, optional.
# --with-cuda=no disables; --with-cuda[=DIR] makes absence fatal; unset looks in /usr/local/cuda.
AC_DEFUN([ST_CHECK_CUDA], [
  AC_ARG_WITH([cuda], [AS_HELP_STRING([--with-cuda@<:@=DIR@:>@], [CUDA support (default: when found in /usr/local/cuda)])],
              [], [with_cuda=check])
  st_cuda_happy=no
  AS_IF([test "x$with_cuda" != xno], [
    AS_IF([test "x$with_cuda" = xcheck || test "x$with_cuda" = xyes], [st_cuda_dir=/usr/local/cuda],
          [st_cuda_dir=$with_cuda])
    AS_IF([test -d "$st_cuda_dir/lib64"], [st_cuda_libdir=$st_cuda_dir/lib64],
          [st_cuda_libdir=$st_cuda_dir/lib])
    CUDA_CPPFLAGS="-I$st_cuda_dir/include"
    # The run-time path too: libstrata.so (and the tests) find libcudart without
    # LD_LIBRARY_PATH, as CUDA's directory is rarely one the dynamic loader searches.
    CUDA_LDFLAGS="-L$st_cuda_libdir -Wl,-rpath,$st_cuda_libdir"
    st_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $CUDA_CPPFLAGS"
    st_save_LDFLAGS=$LDFLAGS;   LDFLAGS="$LDFLAGS $CUDA_LDFLAGS"
    AC_CHECK_HEADER([cuda_runtime_api.h],
      [AC_CHECK_LIB([cudart], [cudaGetDeviceCount], [st_cuda_happy=yes])])
    CPPFLAGS=$st_save_CPPFLAGS; LDFLAGS=$st_save_LDFLAGS
    AC_PATH_PROG([NVCC], [nvcc], [no], [$st_cuda_dir/bin:$PATH])
    AS_IF([test $st_cuda_happy = no && test "x$with_cuda" != xcheck],
          [AC_MSG_ERROR([--with-cuda given but the CUDA runtime is unusable in $st_cuda_dir])])])
  AS_IF([test $st_cuda_happy = yes],
        [AC_DEFINE([HAVE_CUDA], [1], [CUDA support]) CUDA_LIBS=-lcudart],
        [CUDA_CPPFLAGS= CUDA_LDFLAGS=])
  AC_SUBST([CUDA_CPPFLAGS]) AC_SUBST([CUDA_LDFLAGS]) AC_SUBST([CUDA_LIBS])])

# ST_CHECK_NVCC (after ST_CHECK_CUDA): nvcc for the GPU reduction kernels (src/reduce/reduce_cuda.cu),
# compiled into a fatbin that libstrata embeds; without it the library carries an empty fatbin
# (src/reduce/fatbin_none.c). The default wherever nvcc is found (NVCC, else CUDA's bin/ directory,
# else PATH); --with-cuda=no disables; an explicit --with-cuda makes an unusable nvcc fatal.
# NVCCFLAGS adds flags to every nvcc command.
AC_DEFUN([ST_CHECK_NVCC], [
  AC_ARG_VAR([NVCC], [the CUDA compiler, for the GPU reduction kernels])
  AC_ARG_VAR([NVCCFLAGS], [extra flags for nvcc])
  st_nvcc_happy=no
  AS_IF([test "x$with_cuda" != xno && test "x$NVCC" != x && test "x$NVCC" != xno], [
    AC_MSG_CHECKING([whether $NVCC builds a fatbin for sm_80 and sm_90])
    cat > conftest.cu <<_ST_EOF
extern "C" __global__ void st_conftest(float *p) { p[[threadIdx.x]] += 1.0f; }
_ST_EOF
    AS_IF([$NVCC -fatbin $NVCCFLAGS -gencode arch=compute_80,code=sm_80 \
             -gencode 'arch=compute_90,code=[[sm_90,compute_90]]' -o conftest.fatbin conftest.cu \
             >&AS_MESSAGE_LOG_FD 2>&1 && test -s conftest.fatbin],
          [st_nvcc_happy=yes])
    rm -f conftest.cu conftest.fatbin
    AC_MSG_RESULT([$st_nvcc_happy])])
  AS_IF([test $st_nvcc_happy = no && test "x$with_cuda" != xcheck && test "x$with_cuda" != xno],
        [AC_MSG_ERROR([--with-cuda given but nvcc ($NVCC) cannot build the GPU kernels])])])
