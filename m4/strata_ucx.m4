# ST_CHECK_UCX: UCX (ucp) is required; found by pkg-config.
AC_DEFUN([ST_CHECK_UCX], [
  PKG_CHECK_MODULES([UCX], [ucx >= 1.10],
    [st_ucx_happy=yes],
    [AC_MSG_ERROR([UCX (ucp) >= 1.10 is required: install libucx-dev (Debian) or set PKG_CONFIG_PATH])])
  st_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $UCX_CFLAGS"
  AC_CHECK_DECL([UCP_WORKER_ADDRESS_FLAG_NET_ONLY], [],
    [AC_MSG_ERROR([UCX lacks UCP_WORKER_ADDRESS_FLAG_NET_ONLY (needs UCX >= 1.10)])],
    [[#include <ucp/api/ucp.h>]])
  CPPFLAGS=$st_save_CPPFLAGS
  st_ucx_version=`$PKG_CONFIG --modversion ucx`])
