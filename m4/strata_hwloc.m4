# ST_CHECK_HWLOC: hwloc >= 2 is required; found by pkg-config.
AC_DEFUN([ST_CHECK_HWLOC], [
  PKG_CHECK_MODULES([HWLOC], [hwloc >= 2.0],
    [st_hwloc_happy=yes],
    [AC_MSG_ERROR([hwloc >= 2.0 is required: install libhwloc-dev (Debian) or set PKG_CONFIG_PATH])])
  st_hwloc_version=`$PKG_CONFIG --modversion hwloc`])
