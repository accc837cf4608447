#!/bin/bash
# test.sh: the whole test run, as CI does it (`bash .ci/run` as root in a clean clone, CI=true).
#   1. installs the build and test dependencies with apt, plus clang (for the fuzzers); skipped
#      when dpkg says all are there,
#   2. ./autogen.sh, ./configure, make -j,
#   3. make check: unit, integration and emulation tests (the emulation tests need root and
#      network namespaces, and SKIP without them; test_large, a count over 2^31 elements, with STRATA_TEST_LARGE=1 by
#      default),
#   4. make distcheck: the tarball builds every test out of tree and passes the quick ones
#      (DISTCHECK_TESTS; the sanitizer stage runs the others on the tarball's sources),
#   5. sanitizers: the tarball's sources built once more with --enable-sanitizers (ASan, LSan,
#      UBSan; tests/lsan.supp) in _build-extra/san, and the unit and integration tests run there
#      (SAN_TESTS overrides the list; test_lifecycle runs SAN_LIFECYCLE_CYCLES cycles, default 60);
#   6. fuzzing: with clang's libFuzzer, the harnesses of tests/fuzz/ built in _build-extra/fuzz and
#      run FUZZ_SECONDS each (default 30; tests/fuzz/run.sh); SKIP without clang's libFuzzer;
#   7. /dev/shm holds no strata-* entry that was not there before the run.
# Prints the test-suite.log of a failing step. Exit status non-zero on any failure.
# Runs from any folder. Environment: CONFIGURE_FLAGS (extra ./configure arguments),
# SKIP_DISTCHECK=1, SKIP_APT=1, SKIP_SANITIZERS=1, SKIP_FUZZ=1, FUZZ_SECONDS, SAN_TESTS,
# DISTCHECK_TESTS, STRATA_TEST_LARGE=0.
set -uo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.." || exit 1
top=$(pwd)

PKGS=(autoconf automake libtool pkg-config make gcc libucx-dev ucx-utils libhwloc-dev hwloc libjansson-dev
      libibverbs-dev libcmocka-dev openmpi-bin libopenmpi-dev iproute2 iputils-ping clang
      python3-numpy python3-torch python3-sklearn)
JOBS=$(nproc 2>/dev/null || echo 2)

section() { echo; echo "==== $* ($(date +%T))"; }
die() { echo "test.sh: FAILED: $*" >&2; exit 1; }

# Every test-suite.log below the tree whose summary is not clean (the top one, and distcheck's
# copy in strata-*/_build/).
show_logs()
{
    local log
    while IFS= read -r log; do
        if grep -qE '^# (FAIL|XPASS|ERROR): *[1-9]' "$log"; then
            section "$log"
            cat "$log"
        fi
    done < <(find "$top" -name test-suite.log 2>/dev/null)
}

if [ "${SKIP_APT:-0}" != 1 ] && command -v dpkg-query >/dev/null 2>&1; then
    missing=""
    for p in "${PKGS[@]}"; do
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" ||
            missing="$missing $p"
    done
    if [ -n "$missing" ]; then
        section "apt-get install$missing"
        [ "$(id -u)" = 0 ] || die "need root to install:$missing"
        export DEBIAN_FRONTEND=noninteractive
        apt-get update -q || die "apt-get update"
        # shellcheck disable=SC2086
        apt-get install -y -q --no-install-recommends $missing || die "apt-get install"
    else
        section "packages: all present"
    fi
fi

# strata's shared memory segments are named /strata-*; what exists now is not this run's.
shm_list() { find /dev/shm -maxdepth 1 -name 'strata-*' -printf '%f\n' 2>/dev/null | sort; }
shm_before=$(shm_list)

section "./autogen.sh"
./autogen.sh || die "autogen.sh"
section "./configure ${CONFIGURE_FLAGS:-}"
# shellcheck disable=SC2086
./configure ${CONFIGURE_FLAGS:-} || { cat config.log | tail -n 60; die "configure"; }
section "make -j$JOBS"
make -j"$JOBS" || die "make"

section "make check"
# test_large (more than 2^31 elements, about 9 GiB and 2-3 minutes) runs here when the machine has the
# memory (test_large SKIPs, saying so, when it has not); STRATA_TEST_LARGE=0 leaves it out.
if ! STRATA_TEST_LARGE=${STRATA_TEST_LARGE:-1} make -j"$JOBS" check; then
    show_logs
    die "make check"
fi

if [ "${SKIP_DISTCHECK:-0}" != 1 ]; then
    section "make distcheck"
    # The tarball builds every test program out of tree and runs the quick ones: the sanitizer
    # stage below runs all unit and integration tests on the tarball's sources again, so a second
    # full run here would add minutes and find nothing new (DISTCHECK_TESTS="" runs them all).
    dtests=${DISTCHECK_TESTS-tests/unit/test_reduce tests/unit/test_bootstrap tests/unit/test_param tests/unit/test_topo tests/unit/test_shm tests/tools/test_collbench_args.sh tests/tools/test_check_layers.sh tests/emulation/run_collbench.sh}
    # shellcheck disable=SC2086
    if ! IT_LIFECYCLE_CYCLES=${DISTCHECK_LIFECYCLE_CYCLES:-60} \
         make -j"$JOBS" distcheck ${dtests:+TESTS="$dtests"}; then
        show_logs
        die "make distcheck"
    fi
fi

# The sanitizer and fuzz builds start from the release tarball, so that they build out of tree
# (this tree is configured in place) and only from what ships.
extra=$top/_build-extra
if [ "${SKIP_SANITIZERS:-0}" != 1 ] || [ "${SKIP_FUZZ:-0}" != 1 ]; then
    section "make dist (sources of the sanitizer and fuzz builds)"
    rm -rf "$extra"
    mkdir -p "$extra" || die "mkdir $extra"
    make dist >/dev/null || die "make dist"
    tar -C "$extra" -xzf "strata-$(sed -n 's/^PACKAGE_VERSION = //p' Makefile).tar.gz" ||
        die "unpacking the tarball"
    src=$(echo "$extra"/strata-*)
fi

if [ "${SKIP_SANITIZERS:-0}" != 1 ]; then
    section "sanitizers: configure --enable-sanitizers, make -j$JOBS"
    san_start=$(date +%s)
    mkdir -p "$extra/san" || die "mkdir $extra/san"
    # shellcheck disable=SC2086
    (cd "$extra/san" && "$src/configure" -q --enable-sanitizers ${CONFIGURE_FLAGS:-}) ||
        die "configure --enable-sanitizers"
    make -C "$extra/san" -j"$JOBS" >/dev/null || die "make (sanitizers)"
    if [ -z "${SAN_TESTS:-}" ]; then
        SAN_TESTS=$(cd "$src" && printf '%s ' tests/unit/test_*.c tests/integration/test_*.c |
                    sed 's/\.c / /g')
    fi
    section "sanitizers: make check of the unit and integration tests"
    # Every report is fatal: ASan and UBSan abort the process (exit status non-zero, so the test
    # fails); LSan reports at exit. Forked ranks inherit the options.
    if ! ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:detect_stack_use_after_return=0 \
         LSAN_OPTIONS=suppressions=$src/tests/lsan.supp:print_suppressions=0 \
         UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1 \
         IT_LIFECYCLE_CYCLES=${SAN_LIFECYCLE_CYCLES:-60} \
         make -C "$extra/san" -j"$JOBS" check TESTS="$SAN_TESTS"; then
        show_logs
        die "make check under sanitizers"
    fi
    echo "sanitizer stage: $(( $(date +%s) - san_start )) s"
fi

if [ "${SKIP_FUZZ:-0}" != 1 ]; then
    fuzz_probe=$extra/fuzz-probe
    printf 'int LLVMFuzzerTestOneInput(const unsigned char *d, unsigned long n) { return 0; }\n' \
        > "$fuzz_probe.c"
    if ! command -v clang >/dev/null 2>&1; then
        section "fuzz: SKIP (clang is not installed)"
    elif ! clang -fsanitize=fuzzer,address "$fuzz_probe.c" -o "$fuzz_probe" >/dev/null 2>&1; then
        section "fuzz: SKIP (clang cannot link -fsanitize=fuzzer: libFuzzer is missing)"
    else
        section "fuzz: configure CC=clang --enable-fuzzers, ${FUZZ_SECONDS:-30} s per harness"
        mkdir -p "$extra/fuzz" || die "mkdir $extra/fuzz"
        # shellcheck disable=SC2086
        (cd "$extra/fuzz" && "$src/configure" -q CC=clang --enable-fuzzers ${CONFIGURE_FLAGS:-}) ||
            die "configure --enable-fuzzers"
        make -C "$extra/fuzz" -j"$JOBS" tests/fuzz/fuzz_wire tests/fuzz/fuzz_root \
            tests/fuzz/fuzz_records >/dev/null || die "make (fuzzers)"
        "$src/tests/fuzz/run.sh" "$extra/fuzz" "${FUZZ_SECONDS:-30}" || die "fuzzing"
    fi
fi
rm -rf "$extra"

section "/dev/shm"
shm_left=$(comm -13 <(echo "$shm_before") <(shm_list) | grep . || true)
if [ -n "$shm_left" ]; then
    echo "left in /dev/shm by this run:"
    echo "$shm_left"
    die "strata shared memory segments were not unlinked"
fi
echo "no strata segment left in /dev/shm"

# One closing line in the plain form CI reads: the totals of `make check` (distcheck ran the same
# tests again on the tarball).
count() { sed -n "s/^# $1: *//p" test-suite.log | head -n1; }
section "all tests passed"
echo "tests: $(count PASS) passed, $(count FAIL) failed, $(count SKIP) skipped"
