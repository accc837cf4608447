#!/bin/bash
# compress_train.sh: training with a compressed gradient all-reduce, measured and predicted.
# examples/ddp_digits.py (the 64-256-256-10 MLP on scikit-learn's digits, 85002 parameters, 0.34 MB
# of fp32 gradients per step) trains on 2 emulated nodes x 2 ranks (examples/run_ddp_emu.sh), one
# link per node capped at --rate (100 Mbit/s: communication dominates the step), the same seed,
# data order and epochs in every row, once per codec and overlap mode; then one table with
# `collbench model`'s prediction of each row next to the measurement.
#
# Rows (--codecs):
#   fp32          --comm strata: strata.ddp.allreduce_hook (strataAllReduce, no compression)
#   fp16 bf16 int8 topk sign
#                 --comm strata-compress --codec SPEC: compress_hook (strataAllReduceCompressed:
#                 full precision inside a node, the codec on the inter-node step, error feedback
#                 per bucket); topk is topk:<--topk>
#   powersgd      --comm strata-powersgd --powersgd-rank <--powersgd-rank>: powerSGD_hook (its P
#                 and Q all-reduces through strata, from step --powersgd-start on)
# Overlap modes, each row runs in both:
#   yes  DDP's buckets of at most --bucket-mb (0.1 MB: two buckets, fc3 + fc2, then fc1): the
#        first bucket's all-reduce runs while backward computes fc1's gradients
#   no   one bucket holding every gradient (--bucket-mb --no-overlap-mb, 64 MB): DDP can launch
#        it only once backward is done, so nothing overlaps
# Columns (medians over --reps runs; runs interleave: run 1 of every row, then run 2, ...):
#   wire B/rank     bytes each rank sent over the network per step, mean over the 4 ranks (one
#                   probe step at the end of each run: strataCommGetPhaseTimes bytes[1] of each
#                   call, see ddp_digits.py; per node it is twice this)
#   link B/node     the check of it: bytes each node received over its link in the run (interface
#                   counters, run_ddp_emu.sh), mean of the 2 nodes, over the steps that
#                   communicate (training, the overlap rounds with communication, the probe):
#                   TCP/IP headers, gloo's traffic and PowerSGD's first plain steps included
#   compute ms      forward (with the loss) + backward under no_sync, + the optimizer step
#   exposed ms      communication not hidden behind compute: forward + backward with DDP's
#                   reduction minus the same under no_sync (ddp_digits.py's overlap rounds)
#   step ms         training step (forward, backward, reduction, optimizer), mean over steps
#   speedup         fp32's step ms / this row's, same overlap mode
#   acc %           test accuracy after --epochs epochs
#   model ms, model x
#                   `collbench model --nodes 2 --ranks-per-node 2 --rails 1 --inter-gbps <rate>
#                   --params P --bucket-bytes B --forward F --backward W --compress SPEC` fed
#                   with the row's own numbers (F = forward + optimizer, the compute that nothing
#                   overlaps; W = backward; B the mode's bucket bytes): the step of its row "N
#                   buckets overlapping backward" (overlap yes) or "one all-reduce after
#                   backward" (no), and its speedup over the uncompressed all-reduce on the same
#                   inputs; fp32 is its uncompressed column. powersgd gets '-': the model prices
#                   PowerSGD only in the seed preset's row, with a 7B transformer's layer shapes
#                   (ratio 1/639) and the texts' fixed overhead, not this MLP's matrices.
# Before the table a line says whether communication dominates: fp32's exposed communication
# without overlap (the whole all-reduce) against its compute.
#
#   bench/compress_train.sh [--rate 100mbit] [--epochs 5] [--topk 0.01]
#                           [--codecs "fp32 fp16 bf16 int8 topk sign powersgd"]
#                           [--powersgd-rank 2] [--powersgd-start 2]
#                           [--bucket-mb 0.1] [--no-overlap-mb 64] [--modes "yes no"]
#                           [--timing-rounds 7] [--timing-steps 20] [--codec-costs F]
#                           [--reps N] [--keep DIR] [--timeout S] [--collbench P]
#                           [-- ddp_digits.py args]
# --reps defaults to 1 here (each run is a whole training); --keep DIR also keeps each run's JSON;
# --timeout is per run (default 900 s). Needs root and network namespaces
# (exit 77 otherwise, with the reason), and /usr/bin/python3 with torch, numpy and scikit-learn.
# Environment: STRATA_LIBRARY (else the package finds the build, python/strata/_lib.py).
# Exit: 0 every run succeeded, 1 a run failed (its row says so, its output is printed), 2 setup.
set -u
# shellcheck source=lib.sh
. "$(dirname "${BASH_SOURCE[0]}")/lib.sh"

rate=100mbit epochs=5 codecs="fp32 fp16 bf16 int8 topk sign powersgd" topk=0.01 psgd_rank=2
psgd_start=2 bucket_mb=0.1 flat_mb=64 modes="yes no" rounds=7 tsteps=20 codec_costs=""
py=${STRATA_PYTHON:-/usr/bin/python3}
BENCH_REPS=1 BENCH_TMO=900
argv=("$@")
while [ $# -gt 0 ]; do
    case $1 in
        --rate) rate=$2; shift 2 ;;
        --epochs) epochs=$2; shift 2 ;;
        --codecs) codecs=$2; shift 2 ;;
        --topk) topk=$2; shift 2 ;;
        --powersgd-rank) psgd_rank=$2; shift 2 ;;
        --powersgd-start) psgd_start=$2; shift 2 ;;
        --bucket-mb) bucket_mb=$2; shift 2 ;;
        --no-overlap-mb) flat_mb=$2; shift 2 ;;
        --modes) modes=$2; shift 2 ;;
        --timing-rounds) rounds=$2; shift 2 ;;
        --timing-steps) tsteps=$2; shift 2 ;;
        --codec-costs) codec_costs=$2; shift 2 ;;
        -h|--help) bench_help "$0"; exit 0 ;;
        --) shift; break ;;
        *) bench_common_opt "$@" || { echo "compress_train: unknown argument $1 (--help)" >&2; exit 2; }
           shift "$BENCH_SHIFT" ;;
    esac
done
extra=("$@")
for c in $codecs; do
    case $c in fp32|fp16|bf16|int8|topk|sign|powersgd) ;;
        *) echo "compress_train: unknown row '$c' (fp32 fp16 bf16 int8 topk sign powersgd)" >&2
           exit 2 ;;
    esac
done
for m in $modes; do
    case $m in yes|no) ;; *) echo "compress_train: --modes takes yes and no" >&2; exit 2 ;; esac
done
case " $codecs " in *" fp32 "*) ;; *) codecs="fp32 $codecs" ;; esac

bench_begin compress_train "${argv[@]}"
why=$(emunet_unavailable)
if [ -n "$why" ]; then
    echo "SKIP: compress_train needs emulated nodes (network namespaces): $why"
    exit 77
fi
missing=$("$py" -c 'import importlib.util as u
print(" ".join(m for m in ("torch", "numpy", "sklearn") if u.find_spec(m) is None))' 2>/dev/null) ||
    bench_die "$py does not run"
if [ -n "$missing" ]; then
    echo "SKIP: $py lacks $missing (apt-get install python3-torch python3-numpy python3-sklearn)"
    exit 77
fi
bench_find_collbench
gbps=$(awk -v b="$(emunet_rate_bps "$rate")" 'BEGIN { printf "%g", b / 1e9 }')

# The ddp_digits.py arguments of a row (without the common ones).
comm_args()
{
    case $1 in
        fp32) echo "--comm strata" ;;
        topk) echo "--comm strata-compress --codec topk:$topk" ;;
        powersgd) echo "--comm strata-powersgd --powersgd-rank $psgd_rank" \
                       "--powersgd-start $psgd_start" ;;
        *) echo "--comm strata-compress --codec $1" ;;
    esac
}
mb_of() { [ "$1" = yes ] && echo "$bucket_mb" || echo "$flat_mb"; }
common=(--epochs "$epochs" --timing-rounds "$rounds" --timing-steps "$tsteps")

bench_log "network: 2 emulated nodes x 2 ranks, one link per node capped at $rate" \
          "(tc tbf, both directions; examples/run_ddp_emu.sh)"
bench_log "per row: examples/run_ddp_emu.sh --rate $rate -- <row's args> --bucket-mb <mode's>" \
          "${common[*]}${extra[*]:+ ${extra[*]}} --json F"
for c in $codecs; do bench_log "  $(printf '%-9s' "$c") $(comm_args "$c")"; done
bench_log "  overlap yes: --bucket-mb $bucket_mb; no: --bucket-mb $flat_mb" \
          "(one bucket: reduced after backward)"
bench_log "model: $BENCH_COLLBENCH model --nodes 2 --ranks-per-node 2 --rails 1 --inter-gbps $gbps" \
          "--params P --bucket-bytes B --forward F --backward W" \
          "--compress SPEC${codec_costs:+ --codec-costs $codec_costs}"
bench_log "median of $BENCH_REPS run(s) per row, interleaved"

failed=0
for ((rep = 1; rep <= BENCH_REPS; rep++)); do
    for m in $modes; do
        for c in $codecs; do
            key="$c-$m"
            [ -f "$BENCH_TMP/$key.failed" ] && continue
            out="$BENCH_TMP/$key.$rep.out"
            t0=$SECONDS
            # shellcheck disable=SC2046
            bench_exec "$out" "$BENCH_TOP/examples/run_ddp_emu.sh" --rate "$rate" \
                --timeout "$BENCH_TMO" --python "$py" -- $(comm_args "$c") \
                --bucket-mb "$(mb_of "$m")" "${common[@]}" "${extra[@]}" \
                --json "$BENCH_TMP/$key.$rep.json"
            rc=$?
            if [ "$rc" != 0 ] || [ ! -s "$BENCH_TMP/$key.$rep.json" ]; then
                echo "run $rep exited with $rc" >"$BENCH_TMP/$key.failed"
                { echo "---- $c, overlap $m, run $rep (exit $rc):"; tail -n 40 "$out"; } \
                    >>"$BENCH_TMP/failures.txt"
                failed=1
                printf '#   %-10s overlap %-3s run %d/%d: FAILED (exit %d), %d s\n' "$c" "$m" \
                    "$rep" "$BENCH_REPS" "$rc" $((SECONDS - t0))
                continue
            fi
            printf '#   %-10s overlap %-3s run %d/%d: ok, %d s\n' "$c" "$m" "$rep" "$BENCH_REPS" \
                $((SECONDS - t0))
        done
    done
done

# The table: medians per row, then the model fed with each row's medians.
"$py" - "$BENCH_TMP" "$BENCH_COLLBENCH" "$gbps" "$codec_costs" "$BENCH_REPS" "$codecs" "$modes" \
      "$bucket_mb" "$flat_mb" "$topk" "$psgd_rank" "$rounds" "$tsteps" <<'EOF'
import json, os, re, statistics, subprocess, sys
tmp, collbench, gbps, costs, reps = sys.argv[1:6]
codecs, modes = sys.argv[6].split(), sys.argv[7].split()
bucket_mb, flat_mb, topk, psgd_rank = sys.argv[8:12]
timed_steps = int(sys.argv[12]) * int(sys.argv[13])
spec = {"fp32": "none", "topk": "topk:" + topk}
label = {"topk": "topk:" + topk, "powersgd": "powersgd r" + psgd_rank}

def runs(key):
    """The JSON of every run of a row, with "link": bytes per node and communicating step."""
    out = []
    for r in range(1, int(reps) + 1):
        f = os.path.join(tmp, "%s.%d.json" % (key, r))
        if os.path.exists(f) and not os.path.exists(os.path.join(tmp, key + ".failed")):
            res = json.load(open(f))
            with open(os.path.join(tmp, "%s.%d.out" % (key, r))) as log:
                m = re.search(r"bytes received over the links: node0 (\d+) node1 (\d+)", log.read())
            steps = res["epochs"] * res["steps_per_epoch"] + timed_steps + 1
            res["link"] = (int(m.group(1)) + int(m.group(2))) / 2 / steps if m else None
            out.append(res)
    return out

def med(rs, k):
    v = [r[k] for r in rs if r.get(k) is not None]
    return statistics.median(v) if v else None

def model(c, m, row):
    """(predicted step ms, predicted speedup) from collbench model, or None (and why)."""
    if c == "powersgd":
        return None
    mb = float(bucket_mb if m == "yes" else flat_mb)
    cmd = [collbench, "model", "--nodes", "2", "--ranks-per-node", "2", "--rails", "1",
           "--inter-gbps", gbps, "--params", str(row["parameters"]),
           "--bucket-bytes", str(int(mb * 1024 * 1024)),
           "--forward", "%.3f" % (row["forward_ms"] + row["optimizer_ms"]),
           "--backward", "%.3f" % row["backward_ms"], "--compress", spec.get(c, c)]
    if costs:
        cmd += ["--codec-costs", costs]
    text = subprocess.run(cmd, capture_output=True, text=True).stdout
    pat = r"^one all-reduce after backward" if m == "no" else r"^\d+ buckets? overlapping backward"
    for line in text.splitlines():
        if re.match(pat, line):
            f = line.split()
            uncompr, compr = float(f[-3]), float(f[-2])
            return (uncompr, 1.0) if c == "fp32" else (compr, uncompr / compr)
    return None

rows = {}
for m in modes:
    for c in codecs:
        rs = runs("%s-%s" % (c, m))
        if not rs:
            rows[c, m] = None
            continue
        row = {k: med(rs, k) for k in ("wire_bytes", "link", "forward_ms", "backward_ms",
                                       "optimizer_ms", "exposed_ms", "step_ms", "test_accuracy",
                                       "sync_ms", "nosync_ms")}
        row["parameters"] = rs[0]["parameters"]
        row["wire_source"] = rs[0]["wire_source"]
        row["identical"] = all(r["params_identical"] for r in rs)
        row["n"] = len(rs)
        rows[c, m] = row

for m in modes:
    f = rows.get(("fp32", m))
    if f and f["exposed_ms"] is not None:
        comp = f["forward_ms"] + f["backward_ms"]
        print("# communication %s: fp32, overlap %s: %.1f ms exposed communication per step "
              "against %.1f ms of forward + backward (%.1fx)" % (
                  "dominates" if f["exposed_ms"] > 2 * comp else "does NOT dominate", m,
                  f["exposed_ms"], comp, f["exposed_ms"] / comp))
print()
print("| codec | overlap | wire B/rank | link B/node | compute ms | exposed ms | step ms | "
      "speedup | acc % | model ms | model x |")
print("|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
notes = set()
for m in modes:
    base = rows.get(("fp32", m))
    for c in codecs:
        row = rows[c, m]
        name = label.get(c, c)
        if row is None:
            print("| %s | %s | (failed) | | | | | | | | |" % (name, m))
            continue
        ms = lambda v: "-" if v is None else "%.2f" % v
        comp = row["forward_ms"] + row["backward_ms"] + row["optimizer_ms"] \
            if row["forward_ms"] is not None else None
        sp = "%.2fx" % (base["step_ms"] / row["step_ms"]) if base else "-"
        pred = model(c, m, row) if row["forward_ms"] is not None else None
        if c == "powersgd":
            notes.add("powersgd: no prediction; collbench model prices PowerSGD only in the "
                      "seed preset's row, with a 7B transformer's layer shapes (1/639) and a "
                      "fixed overhead, not this MLP's matrices")
        if not row["identical"]:
            notes.add("%s, overlap %s: the ranks' parameters were NOT bitwise identical" % (c, m))
        print("| %s | %s | %d | %s | %s | %s | %s | %s | %.2f | %s | %s |" % (
            name, m, round(row["wire_bytes"]),
            "-" if row["link"] is None else "%.0f" % row["link"], ms(comp), ms(row["exposed_ms"]),
            ms(row["step_ms"]), sp, row["test_accuracy"],
            "-" if pred is None else "%.2f" % pred[0],
            "-" if pred is None else "%.2fx" % pred[1]))
print()
srcs = sorted({r["wire_source"] for r in rows.values() if r})
print("# wire bytes: " + " | ".join(srcs))
for n in sorted(notes):
    print("# " + n)
EOF
if [ -s "$BENCH_TMP/failures.txt" ]; then
    echo "# ---- failed runs (last lines) ----"
    cat "$BENCH_TMP/failures.txt"
fi
if [ -n "$BENCH_KEEP" ]; then
    mkdir -p "$BENCH_KEEP" && cp "$BENCH_TMP"/*.json "$BENCH_KEEP"/ 2>/dev/null
fi
echo "# compress_train done in ${SECONDS} s"
exit "$failed"
