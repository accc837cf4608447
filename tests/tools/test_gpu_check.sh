#!/bin/bash
# test_gpu_check.sh: bench/gpu_check.sh's dry run, as CI can run it without a GPU: it must finish
# in under a minute with status 0, write a JSON that parses (python3 -m json.tool) with one entry
# per step 0..7 (result PASS, FAIL or SKIP, a reason, its seconds), run step 5 on the simulated
# device labelled "sim (dry run)" with #wrong 0, and write its log; the same from a copy of the
# script and collbench in another folder (paths relative to the script); bad arguments exit 2.
#   test_gpu_check.sh      (COLLBENCH: the built collbench, default the tree's)
# Exit 0 pass, 1 fail, 77 skip (no python3, or collbench not built).
set -u
here=$(cd "$(dirname "$0")" && pwd)
top=$(cd "$here/../.." && pwd)
script=$top/bench/gpu_check.sh
collbench=${COLLBENCH:-$top/collbench}
command -v python3 >/dev/null || { echo "SKIP: no python3 to read the JSON"; exit 77; }
[ -x "$collbench" ] || { echo "SKIP: collbench is not built ($collbench)"; exit 77; }

tmp=$(mktemp -d "${TMPDIR:-/tmp}/gpucheck.XXXXXX") || exit 99
trap 'rm -rf "$tmp"' EXIT
fails=0
fail() { echo "FAIL: $*"; fails=$((fails + 1)); }

# check_json FILE STEPS...: parses; an entry for each step, PASS/FAIL/SKIP, reason, seconds
check_json() {
    local f=$1; shift
    if ! python3 -m json.tool "$f" >/dev/null 2>"$tmp/jerr"; then
        fail "$f does not parse: $(cat "$tmp/jerr")"; return
    fi
    python3 - "$f" "$@" <<'PY' || fails=$((fails + 1))
import json, sys
j = json.load(open(sys.argv[1]))
want = [int(s) for s in sys.argv[2:]]
bad = []
if j.get("mode") != "dry-run":
    bad.append("mode is %r, not dry-run" % j.get("mode"))
steps = {s["step"]: s for s in j.get("steps", [])}
for n in want:
    s = steps.get(n)
    if s is None:
        bad.append("no entry for step %d" % n); continue
    if s.get("result") not in ("PASS", "FAIL", "SKIP"):
        bad.append("step %d: result %r" % (n, s.get("result")))
    if not s.get("reason"):
        bad.append("step %d: no reason" % n)
    if not isinstance(s.get("seconds"), (int, float)):
        bad.append("step %d: no seconds" % n)
s5 = steps.get(5)
if s5 is not None and 5 in want:
    if s5["result"] != "PASS":
        bad.append("step 5 (collbench on the simulated device): %s %s" % (s5["result"], s5["reason"]))
    if s5["details"].get("device") != "sim (dry run)":
        bad.append("step 5 is not labelled 'sim (dry run)': %r" % s5["details"].get("device"))
    runs = s5["details"].get("runs", [])
    if not runs or any(r["wrong"] != 0 or r["rows"] == 0 for r in runs):
        bad.append("step 5 runs: %r" % runs)
for k in ("targets", "summary"):
    if k not in j:
        bad.append("no %s" % k)
if j.get("summary", {}).get("fail", 1) != 0:
    bad.append("summary says %r" % j.get("summary"))
for b in bad:
    print("FAIL: %s: %s" % (sys.argv[1], b))
sys.exit(1 if bad else 0)
PY
}

# 1. the dry run of the tree (its binaries: COLLBENCH's build folder, as make check gives it)
t0=$(date +%s)
COLLBENCH=$collbench timeout 120 "$script" --dry-run "$tmp/out" >"$tmp/stdout" 2>&1; rc=$?
sec=$(( $(date +%s) - t0 ))
[ "$rc" = 0 ] || { fail "gpu_check.sh --dry-run -> status $rc"; tail -15 "$tmp/stdout" | sed 's/^/    /'; }
[ -s "$tmp/out/gpu_check.log" ] || fail "no gpu_check.log"
[ -s "$tmp/out/gpu_check.json" ] && check_json "$tmp/out/gpu_check.json" 0 1 2 3 4 5 6 7 || fail "no gpu_check.json"
grep -E '^(PASS|FAIL|SKIP) step' "$tmp/stdout" | sed 's/^/    /'
echo "ok so far: the dry run ($sec s)"

# 2. from a copy elsewhere: the script and collbench only
mkdir -p "$tmp/copy/bench" && cp "$script" "$tmp/copy/bench/" && cp "$collbench" "$tmp/copy/collbench" || exit 99
(cd / && unset COLLBENCH && timeout 120 "$tmp/copy/bench/gpu_check.sh" --dry-run --steps 0,5 "$tmp/out2" \
    >"$tmp/stdout2" 2>&1); rc=$?
[ "$rc" = 0 ] || { fail "a copy's dry run -> status $rc"; tail -10 "$tmp/stdout2" | sed 's/^/    /'; }
# the script finds collbench next to itself: the copy's (no other is on its paths)
python3 -c 'import json,sys; j=json.load(open(sys.argv[1])); sys.exit(j["steps"][0]["details"].get("binary collbench") != "ok")' \
    "$tmp/out2/gpu_check.json" 2>/dev/null || fail "the copy did not find its collbench"
[ -s "$tmp/out2/gpu_check.json" ] && check_json "$tmp/out2/gpu_check.json" 0 5 || fail "the copy wrote no gpu_check.json"
echo "ok so far: a copy in another folder"

# 3. arguments
for args in "--bogus" "--steps 1x $tmp/o3" "--budget soon $tmp/o3" ""; do
    # shellcheck disable=SC2086
    "$script" $args >/dev/null 2>"$tmp/err"; rc=$?
    [ "$rc" = 2 ] && [ "$(wc -l <"$tmp/err")" = 1 ] || fail "gpu_check.sh $args -> status $rc, $(wc -l <"$tmp/err") stderr lines (want 2 and 1)"
done

[ "$fails" = 0 ] && { echo "PASS"; exit 0; }
echo "$fails failure(s)"; exit 1
