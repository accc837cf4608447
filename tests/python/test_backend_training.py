#!/usr/bin/python3
"""Training through the strata torch.distributed backend (strata.torch) against gloo.

Each example runs under torch.distributed.run with --backend gloo and with --backend strata, from
the same seed, 2 epochs:
  - examples/ddp_digits.py, 2 ranks: DDP's own reduction through the process group (--comm ddp),
  - examples/zero_digits.py, 2 ranks: DDP + ZeroRedundancyOptimizer (Adam),
  - examples/pipeline_digits.py, 4 ranks: 2 pipelines x 2 stages, 1F1B over 4 micro-batches;
and ddp_digits.py --comm strata with --backend strata only (strata.ddp's hook, its communicator's
unique id broadcast on the strata group), compared with the gloo run of DDP's own reduction.
Checks, per example:
  - every epoch's training loss agrees within 1e-4 relative between the backends,
  - the process group is the one asked for, and it is the only backend of any group that exists
    (--backend strata created no gloo group),
  - the ranks' parameters are bitwise identical at the end (all ranks, or the copies of each
    pipeline stage), the loss falls, and the pipeline's self-check (1F1B gradients = the whole
    model's) passed.
Launches run as test_ddp_client.py's: own session, a deadline per run, the whole process group
killed afterwards, /dev/shm segments of a failed run removed. Exit 0 pass, 1 fail.

    test_backend_training.py [--timeout S] [--keep DIR] [--only NAME] [--backends gloo,strata]
"""

import argparse
import os
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_ddp_client as launch  # noqa: E402  (launcher, launch_run, launch_result, Checks)

TOP = os.environ.get("STRATA_TOP_SRCDIR", os.path.join(HERE, "..", ".."))
EPOCHS = 2
RTOL = 1e-4
# name: (script, ranks, extra arguments)
EXAMPLES = {
    "ddp": ("ddp_digits.py", 2, ["--comm", "ddp", "--timing-rounds", "0"]),
    "ddp-hook": ("ddp_digits.py", 2, ["--comm", "strata", "--timing-rounds", "0"]),
    "zero": ("zero_digits.py", 2, []),
    "pipeline": ("pipeline_digits.py", 4, ["--micro-batches", "4"]),
}
# Run with the second backend only, compared with another example's run on the first.
REFERENCE = {"ddp-hook": "ddp"}


def run(name, backend, tmp, timeout):
    """Runs example name with --backend backend; its JSON results, or None on failure."""
    script, nproc, extra = EXAMPLES[name]
    tag = "%s-%s" % (name, backend)
    out = os.path.join(tmp, tag + ".json")
    log = os.path.join(tmp, tag + ".log")
    cmd = launch.launcher(nproc, os.path.join(tmp, "logs-" + tag))
    cmd += [os.path.join(TOP, "examples", script), "--backend", backend,
            "--epochs", str(EPOCHS), "--json", out] + extra
    r = launch.launch_run(cmd, log, timeout)
    print("---- %s: %s --backend %s, %d ranks: exit %s after %.1f s" % (
        name, " ".join([script] + extra), backend, nproc, r.rc, r.seconds))
    print("\n".join(line for line in r.text.splitlines() if "default0]" in line)[-3000:])
    return launch.launch_result(r, tag, out, timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=90, help="seconds per run (90)")
    ap.add_argument("--keep", metavar="DIR", help="keep logs and results in DIR")
    ap.add_argument("--only", choices=sorted(EXAMPLES), action="append",
                    help="run this example only (repeatable)")
    ap.add_argument("--backends", default="gloo,strata",
                    help="the two backends compared (default gloo,strata)")
    args = ap.parse_args()
    ref_backend, test_backend = args.backends.split(",")
    check = launch.Checks()

    results = {}
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strata-train.") as tmp:
        tmp = args.keep or tmp
        os.makedirs(tmp, exist_ok=True)
        for name in args.only or list(EXAMPLES):
            for backend in (ref_backend, test_backend):
                if name in REFERENCE and backend == ref_backend:
                    if (REFERENCE[name], ref_backend) not in results:
                        results[REFERENCE[name], ref_backend] = run(
                            REFERENCE[name], ref_backend, tmp, args.timeout)
                    continue
                results[name, backend] = run(name, backend, tmp, args.timeout)
    print("# all runs: %.1f s" % (time.monotonic() - t0))

    table = []
    for name in args.only or list(EXAMPLES):
        ref = results[REFERENCE.get(name, name), ref_backend]
        res = results[name, test_backend]
        check(ref is not None and res is not None, "%s: both runs finished" % name)
        if ref is None or res is None:
            continue
        runs = [(ref, ref_backend), (res, test_backend)]
        if name in REFERENCE:
            runs = runs[1:]
            check((res.get("buckets_per_step") or 0) >= 1.0, "%s: the hook all-reduced %.1f "
                  "bucket(s) per step" % (name, res.get("buckets_per_step") or 0))
        for r, backend in runs:
            c = "%s --backend %s" % (name, backend)
            check(r["backend"] == backend, "%s: the process group's backend is %s"
                  % (c, r["backend"]))
            check(r["groups"] == [backend], "%s: backends of every process group: %s"
                  % (c, " ".join(r["groups"])))
            check(len(r["epoch_loss"]) == EPOCHS, "%s: %d epoch losses"
                  % (c, len(r["epoch_loss"])))
            check(r["epoch_loss"][-1] < 0.5 * r["epoch_loss"][0], "%s: the loss falls "
                  "(%.4f -> %.4f)" % (c, r["epoch_loss"][0], r["epoch_loss"][-1]))
            check(r["params_identical"], "%s: the ranks' parameters are bitwise identical" % c)
            if name == "pipeline":
                check(all(s[0] for s in r["self_check"]), "%s: 1F1B gradients = the whole "
                      "model's (max |diff| %.2e)" % (c, max(s[1] for s in r["self_check"])))
        for e, (lr, ls) in enumerate(zip(ref["epoch_loss"], res["epoch_loss"])):
            rel = abs(ls - lr) / abs(lr)
            table.append((name, e + 1, lr, ls, rel))
            check(rel <= RTOL, "%s epoch %d loss: %s %.7f %s %.7f, relative difference %.2e "
                  "<= %g" % (name, e + 1, ref_backend, lr, test_backend, ls, rel, RTOL))
    print("| example | epoch | %s loss | %s loss | relative difference |" % (ref_backend,
                                                                             test_backend))
    for row in table:
        print("| %s | %d | %.7f | %.7f | %.2e |" % row)
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
