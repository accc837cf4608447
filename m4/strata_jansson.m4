# ST_CHECK_JANSSON: jansson (JSON) reads and writes the fabric profiles and tuning tables of
# src/tune/ (STRATA_PROFILE_FILE, STRATA_TUNE_FILE, collbench calibrate/tune); found by
# pkg-config, required.
AC_DEFUN([ST_CHECK_JANSSON], [
  PKG_CHECK_MODULES([JANSSON], [jansson >= 2.10],
    [st_jansson_happy=yes],
    [AC_MSG_ERROR([jansson >= 2.10 is required: install libjansson-dev (Debian) or set PKG_CONFIG_PATH])])
  st_jansson_version=`$PKG_CONFIG --modversion jansson`])
