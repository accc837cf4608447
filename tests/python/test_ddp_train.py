#!/usr/bin/python3
"""examples/ddp_digits.py with the compression comms (the rows of bench/compress_train.sh), so that
they do not rot: --comm strata-compress --codec int8 and --comm strata-powersgd, 1 epoch each, on
4 ranks of this machine in 2 nodes of 2 as strata sees them (STRATA_HOSTID=node<r // 2>: the
inter-node step runs over loopback, no network namespaces, so the codecs really encode).

Ranks start directly (torch.distributed's env:// variables: RANK, WORLD_SIZE, MASTER_ADDR,
MASTER_PORT), each in its own session; past the deadline all are killed. Checks per run: the
fields the bench reads are in the --json output (wire bytes, their source, forward, backward and
optimizer times, step time, exposed communication, accuracy), wire bytes per step and rank are
above 0 and below fp32's (the gradient's bytes / 2: the hierarchical all-reduce's share of a rank
on 2 nodes of 2), the test accuracy is above 50 %, and the ranks' parameters are bitwise
identical. Exit 0 pass, 1 fail.

    test_ddp_train.py [--timeout S] [--keep DIR]        (see test_ddp_train.sh for the env)
"""

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
import test_ddp_client as launch  # noqa: E402  (free_port, shm bookkeeping, kill_group, Checks)

TOP = os.environ.get("STRATA_TOP_SRCDIR", os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(TOP, "examples", "ddp_digits.py")
NODES, PER_NODE = 2, 2
NRANKS = NODES * PER_NODE
RUNS = {
    "int8": ["--comm", "strata-compress", "--codec", "int8"],
    "powersgd": ["--comm", "strata-powersgd", "--powersgd-rank", "2"],
}
FIELDS = ("wire_bytes", "wire_bytes_ranks", "wire_calls", "wire_source", "forward_ms",
          "backward_ms", "optimizer_ms", "step_ms", "sync_ms", "nosync_ms", "exposed_ms",
          "test_accuracy", "parameters", "bucket_bytes", "codec", "powersgd_rank")


def run(name, tmp, timeout):
    """Runs ddp_digits.py with RUNS[name] on NRANKS ranks; its JSON results, or None."""
    out = os.path.join(tmp, name + ".json")
    port = launch.free_port()
    shm_before = launch.shm_entries()
    procs, logs = [], []
    t0 = time.monotonic()
    for r in range(NRANKS):
        env = dict(os.environ, RANK=str(r), WORLD_SIZE=str(NRANKS), LOCAL_RANK=str(r % PER_NODE),
                   LOCAL_WORLD_SIZE=str(PER_NODE), MASTER_ADDR="127.0.0.1",
                   MASTER_PORT=str(port), OMP_NUM_THREADS="1",
                   STRATA_HOSTID="node%d" % (r // PER_NODE))
        log = open(os.path.join(tmp, "%s.rank%d.log" % (name, r)), "w")
        logs.append(log)
        cmd = [sys.executable, EXAMPLE, "--epochs", "1", "--timing-rounds", "1",
               "--timing-steps", "2", "--json", out] + RUNS[name]
        procs.append(subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT,
                                      stdin=subprocess.DEVNULL, start_new_session=True))
    rcs = []
    for p in procs:
        try:
            rcs.append(p.wait(max(1.0, timeout - (time.monotonic() - t0))))
        except subprocess.TimeoutExpired:
            rcs.append(None)
    for p in procs:
        launch.kill_group(p.pid)
        p.wait()
    for log in logs:
        log.close()
    print("---- %s (%s): exits %s after %.1f s" % (name, " ".join(RUNS[name]), rcs,
                                                  time.monotonic() - t0))
    with open(os.path.join(tmp, "%s.rank0.log" % name)) as f:
        print(f.read()[-3000:])
    if any(rc != 0 for rc in rcs) or not os.path.exists(out):
        for r, rc in enumerate(rcs):
            if rc != 0:
                with open(os.path.join(tmp, "%s.rank%d.log" % (name, r))) as f:
                    print("---- rank %d exited with %s (None: killed after %d s):\n%s"
                          % (r, rc, timeout, f.read()[-3000:]))
        for entry in sorted((launch.shm_entries() - shm_before) - launch.shm_in_use()):
            try:
                os.unlink(os.path.join("/dev/shm", entry))
            except OSError:
                pass
        return None
    with open(out) as f:
        return json.load(f)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=60, help="seconds per run (60)")
    ap.add_argument("--keep", metavar="DIR", help="keep logs and results in DIR")
    args = ap.parse_args()
    check = launch.Checks()
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strata-ddp-train.") as tmp:
        tmp = args.keep or tmp
        os.makedirs(tmp, exist_ok=True)
        results = {name: run(name, tmp, args.timeout) for name in RUNS}
    print("# %d runs: %.1f s" % (len(RUNS), time.monotonic() - t0))
    for name, res in results.items():
        check(res is not None, "%s: the run succeeded and wrote its JSON" % name)
        if res is None:
            continue
        missing = [k for k in FIELDS if k not in res]
        check(not missing, "%s: the JSON has %s%s" % (
            name, ", ".join(FIELDS), " (missing: %s)" % ", ".join(missing) if missing else ""))
        if missing:
            continue
        full = res["parameters"] * 4 / PER_NODE
        check(0 < res["wire_bytes"] < full and len(res["wire_bytes_ranks"]) == NRANKS,
              "%s: %.0f wire bytes per step and rank, between 0 and fp32's %.0f (%s)"
              % (name, res["wire_bytes"], full, res["wire_source"]))
        check(all(isinstance(res[k], float) and res[k] > 0
                  for k in ("forward_ms", "backward_ms", "optimizer_ms", "step_ms")),
              "%s: forward %.3f, backward %.3f, optimizer %.3f, step %.3f ms, exposed %.3f ms"
              % (name, res["forward_ms"], res["backward_ms"], res["optimizer_ms"],
                 res["step_ms"], res["exposed_ms"]))
        check(res["test_accuracy"] > 50.0, "%s: test accuracy %.2f %% > 50 %% after 1 epoch"
              % (name, res["test_accuracy"]))
        check(res["params_identical"], "%s: the ranks' parameters are bitwise identical" % name)
    if results.get("int8"):
        check(results["int8"]["codec"] == "int8" and
              "measured" in results["int8"]["wire_source"],
              "int8: codec int8, wire bytes measured (%s)" % results["int8"]["wire_source"])
    if results.get("powersgd"):
        check(results["powersgd"]["powersgd_rank"] == 2, "powersgd: rank 2")
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
