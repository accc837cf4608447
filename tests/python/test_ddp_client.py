#!/usr/bin/python3
"""The client test: PyTorch DDP trains through strata.

examples/ddp_digits.py runs twice under torch.distributed.run, 4 ranks on this machine, 3 epochs,
the same seed: once with DDP's own gloo all-reduce, once with strata's comm hook. Checks:
  - the training loss after every epoch agrees within 1e-4 relative,
  - the final test accuracy within 0.5 percentage points,
  - the parameters of all 4 ranks are bitwise identical at the end of the strata run (sha256 of
    every rank's parameters, gathered by the example),
  - the training is real: the loss falls from epoch 1 to epoch 3 and the accuracy exceeds 80 %,
  - strata carried the gradients (the hook ran at least one bucket per step) and the overlap
    report is there (step times with and without communication).
Each launch runs in its own session under a deadline: on timeout or failure the whole process
group (launcher and ranks) is killed, and /dev/shm segments the run left (strata-*, unused by any
live process) are removed. Exit 0 pass, 1 fail.

    test_ddp_client.py [--timeout S] [--keep DIR]      (see test_ddp_client.sh for the env)
"""

import argparse
import collections
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
TOP = os.environ.get("STRATA_TOP_SRCDIR", os.path.join(HERE, "..", ".."))
EXAMPLE = os.path.join(TOP, "examples", "ddp_digits.py")
NPROC = 4
EPOCHS = 3


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def launcher_workaround():
    """torch 1.13 on Python 3.11 (Debian 12): torch.distributed.run's default --redirects and
    --tee "0" parse to None (Python 3.11's IntFlag no longer lists the 0 member) and the launcher
    crashes; any explicit non-zero value avoids it. Only when needed."""
    from torch.distributed.elastic.multiprocessing.api import Std
    return ["--redirects", "1", "--tee", "1"] if Std.from_str("0") is None else []


def shm_entries():
    try:
        return {n for n in os.listdir("/dev/shm") if n.startswith("strata")}
    except OSError:
        return set()


def shm_in_use():
    used = set()
    for pid in os.listdir("/proc"):
        if not pid.isdigit():
            continue
        for sub in ("fd", "map_files"):
            d = os.path.join("/proc", pid, sub)
            try:
                for f in os.listdir(d):
                    try:
                        t = os.readlink(os.path.join(d, f))
                    except OSError:
                        continue
                    if t.startswith("/dev/shm/"):
                        used.add(t[9:].replace(" (deleted)", ""))
            except OSError:
                continue
    return used


def kill_group(pgid):
    """SIGTERM, then SIGKILL, to the launcher's whole process group; True if anything was left."""
    left = False
    for sig, grace in ((signal.SIGTERM, 10.0), (signal.SIGKILL, 5.0)):
        try:
            os.killpg(pgid, sig)
        except ProcessLookupError:
            return left
        left = True
        deadline = time.monotonic() + grace
        while time.monotonic() < deadline:
            try:
                os.killpg(pgid, 0)
            except ProcessLookupError:
                return left
            time.sleep(0.1)
    return left


def launcher(nproc, log_dir):
    """torch.distributed.run's command line for nproc ranks on this machine, on a free port, its
    logs in log_dir; the script and its arguments go after it."""
    return [sys.executable, "-m", "torch.distributed.run", "--nnodes", "1", "--node_rank", "0",
            "--nproc_per_node", str(nproc), "--master_addr", "127.0.0.1",
            "--master_port", str(free_port()), "--log_dir", log_dir] + launcher_workaround()


# What launch_run returns: the exit status (None: timed out), whether anything of the run was
# left to kill, the log's text, the seconds it took, and the /dev/shm entries before it.
Launched = collections.namedtuple("Launched", "rc stragglers text seconds shm_before")


def launch_run(cmd, log, timeout):
    """Runs cmd (a torch.distributed.run launch) in its own session under a deadline of timeout
    seconds, its output to the file log; then kills the whole process group, whatever happened.
    Returns a Launched."""
    shm_before = shm_entries()
    t0 = time.monotonic()
    with open(log, "w") as logf:
        p = subprocess.Popen(cmd, stdout=logf, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
                             start_new_session=True)
        try:
            rc = p.wait(timeout)
        except subprocess.TimeoutExpired:
            rc = None
        # Whatever happened, nothing of this run may outlive it.
        stragglers = kill_group(p.pid)
        p.wait()
    dt = time.monotonic() - t0
    with open(log) as f:
        text = f.read()
    return Launched(rc, stragglers, text, dt, shm_before)


def launch_result(run, what, out, timeout):
    """After launch_run (run, a Launched) of the run called what, with timeout: says why it failed
    (a timeout, an exit status other than 0 with the log's tail, processes left after a clean
    exit), and removes the /dev/shm segments a failed run left (new since it started, unused by
    any live process). Returns the JSON results the run wrote to out, or None on failure."""
    rc, stragglers, text = run.rc, run.stragglers, run.text
    ok = rc == 0 and os.path.exists(out)
    if rc is None:
        print("FAIL: %s did not finish within %d s; killed" % (what, timeout))
    elif rc != 0:
        print("FAIL: %s exited with %s; its log:\n%s" % (what, rc, text[-8000:]))
    if stragglers and rc == 0:
        print("FAIL: processes of the %s run were still alive after it exited" % what)
        ok = False
    if not ok:
        leftover = (shm_entries() - run.shm_before) - shm_in_use()
        for name in sorted(leftover):
            print("removing /dev/shm/%s left by the failed run" % name)
            try:
                os.unlink(os.path.join("/dev/shm", name))
            except OSError:
                pass
        return None
    with open(out) as f:
        return json.load(f)


class Checks:
    """checks(cond, what) prints "ok: what" or "FAIL: what"; checks.summary() prints how many
    failed (or that all passed) and returns the exit status, 1 or 0."""

    def __init__(self):
        self.fails = []

    def __call__(self, cond, what):
        print("%s: %s" % ("ok" if cond else "FAIL", what))
        if not cond:
            self.fails.append(what)

    def summary(self):
        if self.fails:
            print("%d check(s) failed" % len(self.fails))
            return 1
        print("all checks passed")
        return 0


def run(comm, tmp, timeout):
    """Runs the example with --comm comm; returns its JSON results (None on failure)."""
    out = os.path.join(tmp, "%s.json" % comm)
    log = os.path.join(tmp, "%s.log" % comm)
    cmd = launcher(NPROC, os.path.join(tmp, "logs-" + comm))
    cmd += [EXAMPLE, "--comm", comm, "--epochs", str(EPOCHS), "--json", out,
            "--timing-rounds", "2", "--timing-steps", "3"]
    r = launch_run(cmd, log, timeout)
    print("---- --comm %s: exit %s after %.1f s" % (comm, r.rc, r.seconds))
    print("\n".join(line for line in r.text.splitlines() if "default0]" in line or
                    "Error" in line or "error" in line)[-6000:])
    return launch_result(r, "--comm " + comm, out, timeout)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--timeout", type=int, default=240, help="seconds per run (240)")
    ap.add_argument("--keep", metavar="DIR", help="keep logs and results in DIR")
    args = ap.parse_args()
    check = Checks()

    with tempfile.TemporaryDirectory(prefix="strata-ddp.") as tmp:
        tmp = args.keep or tmp
        os.makedirs(tmp, exist_ok=True)
        t0 = time.monotonic()
        g = run("gloo", tmp, args.timeout)
        s = run("strata", tmp, args.timeout) if g is not None else None
        print("# both runs: %.1f s" % (time.monotonic() - t0))
        if g is None or s is None:
            print("FAIL: a run failed")
            return 1

    for res in (g, s):
        c = res["comm"]
        check(res["world"] == NPROC and len(res["digests"]) == NPROC,
              "%s: %d ranks reported" % (c, res["world"]))
        check(len(res["epoch_loss"]) == EPOCHS, "%s: %d epoch losses" % (c, len(res["epoch_loss"])))
        check(res["epoch_loss"][-1] < 0.5 * res["epoch_loss"][0],
              "%s: the loss falls (%.4f -> %.4f)" % (c, res["epoch_loss"][0],
                                                    res["epoch_loss"][-1]))
        check(res["test_accuracy"] > 80.0, "%s: test accuracy %.2f %% > 80 %%"
              % (c, res["test_accuracy"]))
        check(all(isinstance(res[k], float) and res[k] > 0 for k in ("step_ms", "sync_ms",
                                                                        "nosync_ms")),
              "%s: step time %.3f ms, overlap measured (with %.3f ms, without %.3f ms, exposed "
              "%.3f ms)" % (c, res["step_ms"], res["sync_ms"] or 0, res["nosync_ms"] or 0,
                            res["exposed_ms"] or 0))
    for e, (lg, ls) in enumerate(zip(g["epoch_loss"], s["epoch_loss"])):
        rel = abs(ls - lg) / abs(lg)
        check(rel <= 1e-4, "epoch %d loss: gloo %.7f strata %.7f, relative difference %.2e <= 1e-4"
              % (e + 1, lg, ls, rel))
    dacc = abs(g["test_accuracy"] - s["test_accuracy"])
    check(dacc <= 0.5, "final accuracy: gloo %.2f %% strata %.2f %%, difference %.2f <= 0.5 "
          "percentage points" % (g["test_accuracy"], s["test_accuracy"], dacc))
    check(s["params_identical"] and len(set(s["digests"])) == 1,
          "strata: the parameters of all %d ranks are bitwise identical (sha256 %s...)"
          % (len(s["digests"]), s["digests"][0][:16]))
    check(s["buckets_per_step"] is not None and s["buckets_per_step"] >= 1.0,
          "strata: the hook all-reduced %.1f bucket(s) per step" % (s["buckets_per_step"] or 0))
    return check.summary()


if __name__ == "__main__":
    sys.exit(main())
