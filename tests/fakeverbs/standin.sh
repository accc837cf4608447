# standin.sh: sourced by the scripts that run strata over the stand-in libibverbs
# (tests/integration/over_verbs.sh, tests/emulation/test_verbs_emu.sh,
# tests/tools/test_verbs_fallback.sh).
#   standin_locate BUILD_DIR   sets standin_lib and standin_ctl (the stand-in and fakeverbs-ctl
#                              of that build) and returns 0; else prints why (a SKIP line when
#                              skip=1 is given as $2) and returns 77: not built (configure found
#                              no <infiniband/verbs.h>) or it cannot write into another process
#                              here (process_vm_writev / pidfd_getfd denied).
#   standin_clean FABRIC...    removes those fabrics' segments (a killed rank leaves one).
standin_locate()
{
    local build=$1 quiet=${2:-0} why
    standin_lib=$build/tests/fakeverbs/libibverbs.so.1
    standin_ctl=$build/tests/fakeverbs/fakeverbs-ctl
    if [ ! -f "$standin_lib" ] || [ ! -x "$standin_ctl" ]; then
        [ "$quiet" = 1 ] || echo "SKIP: the stand-in libibverbs is not built ($standin_lib):" \
                                 "configure found no <infiniband/verbs.h>"
        return 77
    fi
    if ! why=$("$standin_ctl" probe 2>&1); then
        [ "$quiet" = 1 ] || echo "SKIP: the stand-in cannot run here: $why"
        return 77
    fi
    return 0
}

standin_clean()
{
    local f
    for f in "$@"; do
        [ -n "${standin_ctl:-}" ] && [ -x "$standin_ctl" ] && "$standin_ctl" clean "$f" >/dev/null 2>&1
        rm -f /dev/shm/fakeverbs-"$f"*
    done
}
