# shellcheck shell=bash
# pyenv.sh: sourced by the Python tests' wrappers. Picks the interpreter (STRATA_PYTHON, default
# Debian's /usr/bin/python3, which has python3-torch, -numpy and -sklearn from apt), points
# PYTHONPATH at the source tree's python/ and STRATA_LIBRARY at the build's libstrata.so:
# STRATA_LIBRARY when set, else the build folder of $COLLBENCH (make check sets it), else
# ./.libs (make check runs in the top build folder), else the source tree's .libs.
# strata_py_need MODULE...: exit 77 (automake SKIP), saying why, when the interpreter lacks one.
# No library: exit 99 (a hard error: make check must have built it).
strata_py_here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
strata_top_src=$(cd "$strata_py_here/../.." && pwd)
strata_py=${STRATA_PYTHON:-/usr/bin/python3}

strata_py_pkgs="python3-torch python3-sklearn python3-numpy"

strata_py_need()
{
    local missing
    if [ ! -x "$strata_py" ]; then
        echo "SKIP: no $strata_py (scripts/test.sh installs python3 and $strata_py_pkgs)"
        exit 77
    fi
    missing=$("$strata_py" -c 'import importlib.util, sys
print(" ".join(m for m in sys.argv[1:] if importlib.util.find_spec(m) is None))' "$@") || exit 99
    if [ -n "$missing" ]; then
        echo "SKIP: $strata_py lacks $missing (scripts/test.sh installs $strata_py_pkgs)"
        exit 77
    fi
}

if [ -z "${STRATA_LIBRARY:-}" ]; then
    for strata_c in "${COLLBENCH:+$(dirname "$COLLBENCH")/.libs/libstrata.so}" \
                    "$PWD/.libs/libstrata.so" "$strata_top_src/.libs/libstrata.so"; do
        if [ -n "$strata_c" ] && [ -f "$strata_c" ]; then STRATA_LIBRARY=$strata_c; break; fi
    done
fi
if [ -z "${STRATA_LIBRARY:-}" ] || [ ! -f "$STRATA_LIBRARY" ]; then
    echo "libstrata.so not found (${STRATA_LIBRARY:-no STRATA_LIBRARY, no .libs/}): build it" >&2
    exit 99
fi
# Bytecode would go into the (possibly read-only, under distcheck) source tree: none.
export STRATA_LIBRARY PYTHONDONTWRITEBYTECODE=1 STRATA_TOP_SRCDIR="$strata_top_src"
export PYTHONPATH="$strata_top_src/python${PYTHONPATH:+:$PYTHONPATH}"
