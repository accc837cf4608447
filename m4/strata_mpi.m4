# ST_CHECK_MPI: MPI for collbench's id exchange and for bench/ (optional, default off).
# --with-mpi builds collbench with mpicc so the unique id can travel by MPI_Bcast.
AC_DEFUN([ST_CHECK_MPI], [
  AC_ARG_WITH([mpi], [AS_HELP_STRING([--with-mpi], [build collbench against MPI (default: no)])],
              [], [with_mpi=no])
  st_mpi_happy=no
  AS_IF([test "x$with_mpi" != xno], [
    AC_PATH_PROG([MPICC], [mpicc], [no])
    AS_IF([test "x$MPICC" = xno], [AC_MSG_ERROR([--with-mpi given but mpicc not found])])
    MPI_CFLAGS=`$MPICC --showme:compile 2>/dev/null`
    MPI_LIBS=`$MPICC --showme:link 2>/dev/null`
    st_mpi_happy=yes
    AC_DEFINE([HAVE_MPI], [1], [collbench can exchange the unique id through MPI])])
  AC_SUBST([MPI_CFLAGS]) AC_SUBST([MPI_LIBS])])
