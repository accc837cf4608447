#!/bin/bash
# test_verbs_check.sh: bench/verbs_check.sh's dry run, as CI can run it without an HCA: it must
# finish in under a minute with status 0 and write a JSON that parses (python3 -m json.tool) with
# one entry per step 0..4 (result PASS, FAIL or SKIP, a reason, its seconds), a "measurements"
# object, and its log. When the stand-in libibverbs is built (tests/fakeverbs/libibverbs.so.1 of
# the build tree), the dry run loads it (STRATA_IBVERBS_LIB) and step 2 must PASS, labelled
# "stand-in (dry run)", every run with #wrong 0, and no measurement may go without the
# standin_dry_run_ prefix; without it, steps 2 and 4 must be SKIPs that say so. Bad arguments
# exit 2 with one line.
#   test_verbs_check.sh      (COLLBENCH: the built collbench, default the tree's)
# Exit 0 pass, 1 fail, 77 skip (no python3, or collbench not built).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
script=$top/bench/verbs_check.sh
collbench=${COLLBENCH:-$top/collbench}
command -v python3 >/dev/null || { echo "SKIP: no python3 to read the JSON"; exit 77; }
[ -x "$collbench" ] || { echo "SKIP: collbench is not built ($collbench)"; exit 77; }
build=$(cd "$(dirname "$collbench")" && pwd)
fake=$build/tests/fakeverbs/libibverbs.so.1
[ -e "$fake" ] || fake=$build/tests/fakeverbs/.libs/libibverbs.so.1

tmp=$(mktemp -d "${TMPDIR:-/tmp}/verbscheck.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# check_json FILE STANDIN(0|1)
check_json() {
    if ! python3 -m json.tool "$1" >/dev/null 2>"$tmp/jerr"; then
        fail "$1 does not parse: $(cat "$tmp/jerr")"; return
    fi
    python3 - "$1" "$2" <<'PY' || fails=$((fails + 1))
import json, sys
j = json.load(open(sys.argv[1]))
standin = sys.argv[2] == "1"
bad = []
if j.get("mode") != "dry-run":
    bad.append("mode is %r, not dry-run" % j.get("mode"))
steps = {s["step"]: s for s in j.get("steps", [])}
for n in range(5):
    s = steps.get(n)
    if s is None:
        bad.append("no entry for step %d" % n); continue
    if s.get("result") not in ("PASS", "FAIL", "SKIP"):
        bad.append("step %d: result %r" % (n, s.get("result")))
    if not s.get("reason"):
        bad.append("step %d: no reason" % n)
    if not isinstance(s.get("seconds"), (int, float)):
        bad.append("step %d: no seconds" % n)
if len(j.get("steps", [])) != 5:
    bad.append("%d step entries, not 5" % len(j.get("steps", [])))
for n in (1, 3):
    if n in steps and steps[n]["result"] != "SKIP":
        bad.append("step %d ran in a dry run: %s" % (n, steps[n]["result"]))
if not isinstance(j.get("measurements"), dict):
    bad.append("no measurements object")
s2 = steps.get(2)
if s2 is not None:
    if standin:
        if s2["result"] != "PASS":
            bad.append("step 2 on the stand-in: %s %s" % (s2["result"], s2["reason"]))
        if s2["details"].get("label") != "stand-in (dry run)":
            bad.append("step 2 is not labelled 'stand-in (dry run)': %r" % s2["details"].get("label"))
        runs = s2["details"].get("runs", [])
        if not runs or any(r["wrong"] != 0 or r["rows"] == 0 or r["status"] != 0 for r in runs):
            bad.append("step 2 runs: %r" % runs)
        for r in runs:
            for k in r:
                if k.endswith(("GBps", "_us")) and not k.startswith("standin_dry_run_"):
                    bad.append("step 2 figure %r lacks the stand-in prefix" % k)
        for k in j.get("measurements", {}):
            if k.endswith(("GBps_largest", "_us", "_s")) and not k.startswith("standin_dry_run_"):
                bad.append("measurement %r lacks the stand-in prefix" % k)
    else:
        for n in (2, 4):
            if steps.get(n, {}).get("result") != "SKIP" or "stand-in" not in steps.get(n, {}).get("reason", ""):
                bad.append("step %d without the stand-in: %r" % (n, steps.get(n)))
if j.get("summary", {}).get("fail", 1) != 0:
    bad.append("summary says %r" % j.get("summary"))
for b in bad:
    print("FAIL: %s: %s" % (sys.argv[1], b))
sys.exit(1 if bad else 0)
PY
}

# 1. the dry run, with the stand-in when it is built
t0=$(date +%s)
if [ -e "$fake" ]; then
    standin=1
    echo "the stand-in: $fake"
    (export STRATA_IBVERBS_LIB=$fake FAKEVERBS_FABRIC=strata-vcheck-test.$$
     COLLBENCH=$collbench timeout 120 "$script" --dry-run "$tmp/out") >"$tmp/stdout" 2>&1; rc=$?
else
    standin=0
    echo "no stand-in libibverbs in $build/tests/fakeverbs/: steps 2 and 4 must SKIP"
    (unset STRATA_IBVERBS_LIB; COLLBENCH=$collbench timeout 120 "$script" --dry-run "$tmp/out") \
        >"$tmp/stdout" 2>&1; rc=$?
fi
sec=$(( $(date +%s) - t0 ))
[ "$rc" = 0 ] || { fail "verbs_check.sh --dry-run -> status $rc"; tail -15 "$tmp/stdout" | sed 's/^/    /'; }
[ "$sec" -lt 60 ] || fail "the dry run took $sec s (at most 60)"
[ -s "$tmp/out/verbs_check.log" ] || fail "no verbs_check.log"
if [ -s "$tmp/out/verbs_check.json" ]; then check_json "$tmp/out/verbs_check.json" "$standin"; else fail "no verbs_check.json"; fi
grep -E '^(PASS|FAIL|SKIP) step' "$tmp/stdout" | sed 's/^/    /'
echo "ok so far: the dry run ($sec s)"

# 2. arguments
for args in "--bogus" "--steps 1x $tmp/o3" "--steps 5 $tmp/o3" "--budget soon $tmp/o3" "" \
            "--peer" "--peer h --serve h $tmp/o3" "--dry-run --peer h $tmp/o3" "$tmp/o3 $tmp/o4"; do
    # shellcheck disable=SC2086
    "$script" $args >/dev/null 2>"$tmp/err"; rc=$?
    [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || fail "verbs_check.sh $args -> status $rc, $(wc -l <"$tmp/err") stderr lines (want 2 and 1)"
done
echo "ok so far: arguments"

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
