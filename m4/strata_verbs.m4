# ST_CHECK_VERBS: libibverbs' headers (rdma-core), optional: the verbs transport is built when
# <infiniband/verbs.h> is found; the library is loaded at run time (dlopen), never linked.
# --with-verbs=no disables; --with-verbs[=DIR] makes absence fatal; unset detects.
AC_DEFUN([ST_CHECK_VERBS], [
  AC_ARG_WITH([verbs], [AS_HELP_STRING([--with-verbs@<:@=DIR@:>@], [libibverbs transport (default: when found)])],
              [], [with_verbs=check])
  st_verbs_happy=no
  AS_IF([test "x$with_verbs" != xno], [
    AS_IF([test -d "$with_verbs"], [VERBS_CPPFLAGS="-I$with_verbs/include"
                                    VERBS_LDFLAGS="-L$with_verbs/lib"])
    st_save_CPPFLAGS=$CPPFLAGS; CPPFLAGS="$CPPFLAGS $VERBS_CPPFLAGS"
    st_save_LDFLAGS=$LDFLAGS;   LDFLAGS="$LDFLAGS $VERBS_LDFLAGS"
    AC_CHECK_HEADER([infiniband/verbs.h], [st_verbs_happy=yes])
    CPPFLAGS=$st_save_CPPFLAGS; LDFLAGS=$st_save_LDFLAGS
    AS_IF([test $st_verbs_happy = no && test "x$with_verbs" != xcheck],
          [AC_MSG_ERROR([--with-verbs given but <infiniband/verbs.h> is missing])])])
  AS_IF([test $st_verbs_happy = yes],
        [AC_DEFINE([HAVE_VERBS], [1], [verbs transport (libibverbs loaded at run time)])])
  AC_SUBST([VERBS_CPPFLAGS]) AC_SUBST([VERBS_LDFLAGS]) AC_SUBST([VERBS_LIBS])])
