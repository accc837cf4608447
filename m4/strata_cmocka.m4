# ST_CHECK_CMOCKA: cmocka for `make check` only; the library builds without it.
AC_DEFUN([ST_CHECK_CMOCKA], [
  PKG_CHECK_MODULES([CMOCKA], [cmocka >= 1.1], [st_cmocka_happy=yes], [st_cmocka_happy=no])])
