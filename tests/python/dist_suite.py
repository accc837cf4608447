#!/usr/bin/env python3
"""dist_suite.py: PyTorch's own distributed test suite (torch.testing._internal.distributed.
distributed_test: DistributedTest._DistTestBase run through TestDistBackend, as torch's
test_distributed_{fork,spawn}.py do) against a third-party c10d backend, "strata" by default
(`import strata.torch` registers it).

  dist_suite.py                      every test, world sizes 2 and 4, less those listed in
                                     dist_suite.exclude (reported as skipped with its reason)
  dist_suite.py --all                every test, the excluded too
  dist_suite.py -k allreduce -k 'test_broadcast*'   names containing K / matching it (fnmatch)
  dist_suite.py --list-file F        only the names in F (one a line, '#' comments)
  dist_suite.py --list               the classification, nothing run: skipped when the suite is
                                     imported (decorators, with their reason), skipped in the
                                     ranks by a decorator (not spawned here), and the tests that run

For a CPU plugin backend with torch 1.13 the suite has 279 tests; with strata's declared
features (--features) 63 (2 ranks) and 77 (4 ranks) start ranks; forked, the lot takes about
1.2 minutes on 2 cores.

Each world size runs in its own process (the suite reads BACKEND, WORLD_SIZE, INIT_METHOD and
TEMP_DIR from the environment when it is imported, and its skip decorators are evaluated then);
the ranks of each test are forked (--start-method fork, default) or spawned from it. Tests whose
only obstacle is a rank-side skip decorator (skip_if_no_gpu, skip_if_lt_x_gpu(n),
skip_if_small_worldsize, skip_if_odd_worldsize, skip_if_rocm) are reported as skipped with the
suite's own message without starting the ranks (--no-preskip starts them anyway). Per test, the
suite's MultiProcessTestCase kills the ranks after --timeout seconds (DISTRIBUTED_TESTS_DEFAULT_
TIMEOUT, default here 120) and fails the test. The ranks' output goes to a log (kept, and its
path printed, when a test fails; -v shows it live). Prints per world size "passed N / failed N /
skipped N" with the name and reason of every skip and failure; exit 0 when nothing failed, 1
otherwise, 2 on a usage error.

--backend-module M (default strata.torch, or $STRATA_DIST_BACKEND_MODULE) is imported in every
process before the suite; --backend-name N (default strata) is the name it registers. When the
interpreter lacks the `expecttest` module (Debian), tests/python/stubs is put on sys.path.
"""
import argparse
import fnmatch
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

HERE = os.path.dirname(os.path.abspath(__file__))
DEFAULT_EXCLUDE = os.path.join(HERE, "dist_suite.exclude")
MARK = "STRATA_DIST_SUITE_WS"  # set for a world size's process (and inherited by its ranks)

# Rank-side skip decorators of common_distributed: the wrapper's __qualname__ prefix -> a function
# (of the wrapper's closure values) giving the suite's skip message when it would skip, else None.
def _rank_skip_reasons():
    import torch
    from torch.testing._internal.common_distributed import TEST_SKIPS
    from torch.testing._internal.common_utils import TEST_WITH_ROCM
    ws = int(os.environ["WORLD_SIZE"])
    backend = os.environ["BACKEND"]
    ngpu = torch.cuda.device_count() if torch.cuda.is_available() else 0

    def no_gpu(_):
        if ngpu == 0:
            return TEST_SKIPS["no_cuda"].message
        if ngpu < ws:
            return TEST_SKIPS[f"multi-gpu-{ws}"].message
        return None

    def lt_x_gpu(c):
        return TEST_SKIPS[f"multi-gpu-{c['x']}"].message if ngpu < c["x"] else None

    def nccl_lt_x_gpu(c):
        if c["backend"] != "nccl":
            return None
        return TEST_SKIPS[f"multi-gpu-{c['x']}"].message if ngpu < c["x"] else None

    def small_ws(_):
        return TEST_SKIPS["small_worldsize"].message if backend != "mpi" and ws <= 2 else None

    def odd_ws(_):
        return TEST_SKIPS["odd_worldsize"].message if backend != "mpi" and ws % 2 == 1 else None

    def rocm(_):
        return TEST_SKIPS["skipIfRocm"].message if TEST_WITH_ROCM else None

    def nccl_n_gpus(c):
        if c["backend"] == "nccl" and torch.cuda.device_count() < c["n"]:
            return TEST_SKIPS[f"multi-gpu-{c['n']}"].message
        return None

    return {
        "skip_if_no_gpu.": ("skip_if_no_gpu", no_gpu),
        "skip_if_lt_x_gpu.": ("skip_if_lt_x_gpu", lt_x_gpu),
        "nccl_skip_if_lt_x_gpu.": ("nccl_skip_if_lt_x_gpu", nccl_lt_x_gpu),
        "skip_if_small_worldsize.": ("skip_if_small_worldsize", small_ws),
        "skip_if_odd_worldsize.": ("skip_if_odd_worldsize", odd_ws),
        "skip_if_rocm.": ("skip_if_rocm", rocm),
        "require_n_gpus_for_nccl_backend.": ("require_n_gpus_for_nccl_backend", nccl_n_gpus),
    }


def _closure(fn):
    cells = fn.__closure__ or ()
    out = {}
    for name, cell in zip(fn.__code__.co_freevars, cells):
        try:
            out[name] = cell.cell_contents
        except ValueError:
            pass
    return out


def _code_name(fn):
    code = getattr(fn, "__code__", None)
    if code is None:
        return repr(fn)
    return getattr(code, "co_qualname", code.co_name)  # co_qualname: Python >= 3.11


def classify(func, rank_skips):
    """(kind, reason, decorators): kind 'decorated' (skipped at import), 'rank-skip' (a rank-side
    decorator would skip it), or 'runs'. decorators: the qualnames of its wrappers."""
    if getattr(func, "__unittest_skip__", False):
        return "decorated", getattr(func, "__unittest_skip_why__", ""), []
    chain = []
    f = func
    while f is not None:
        chain.append(f)
        f = getattr(f, "__wrapped__", None)
    # functools.wraps copies __qualname__: the wrapper's own name is its code's.
    wrappers = [_code_name(g) for g in chain[:-1]]
    for g, qual in zip(chain[:-1], wrappers):
        for prefix, (label, check) in rank_skips.items():
            if qual.startswith(prefix):
                why = check(_closure(g))
                if why:
                    return "rank-skip", f"{label}: {why}", wrappers
    return "runs", "", wrappers


REPLICATED_NOTE = None


def _replicated_tensor_workaround():
    """TestDistBackend._run turns on DDP's ReplicatedTensor mode in every rank, which imports
    torch.distributed._shard.sharded_tensor; under Python >= 3.11 torch 1.13's import fails
    (dataclasses: "mutable default ... TensorProperties ... use default_factory"), so every DDP
    test would fail whatever the backend. Only then: the ranks keep plain DDP (the mode the suite
    itself uses for some checks and torch 2.x's only one)."""
    global REPLICATED_NOTE
    try:
        import torch.distributed._shard.sharded_tensor  # noqa: F401
    except ValueError as e:
        from torch.nn.parallel import _replicated_tensor_ddp_utils as u
        real = u._set_ddp_with_replicated_tensor
        u._set_ddp_with_replicated_tensor = lambda value: real(False)
        REPLICATED_NOTE = ("DDP without ReplicatedTensor (this torch cannot import "
                           f"torch.distributed._shard here: {str(e)[:60]}...)")


def _suite_setup():
    """Import the suite and the backend and define the TestCase (module level, so that spawned
    ranks, which import this file as __mp_main__, get it too)."""
    global TestStrataDist, DistributedTest, common_distributed
    import importlib
    import importlib.util
    if importlib.util.find_spec("expecttest") is None:
        sys.path.insert(0, os.path.join(HERE, "stubs"))
    # common_utils parses sys.argv when imported: show it none of ours.
    argv, sys.argv = sys.argv, sys.argv[:1]
    try:
        importlib.import_module(os.environ["STRATA_DIST_BACKEND_MODULE"])
        from torch.testing._internal import common_distributed
        from torch.testing._internal.common_distributed import DistTestCases
        DistTestCases.backend_feature["plugin"].add(os.environ["BACKEND"])
        # What the backend declares to the suite, the way torch's own backends are declared in
        # DistTestCases (STRATA_DIST_FEATURES: "+feature" in backend_feature, "-collective" in
        # skip_collective, comma-separated).
        for item in filter(None, os.environ.get("STRATA_DIST_FEATURES", "").split(",")):
            table = (DistTestCases.backend_feature if item[0] == "+"
                     else DistTestCases.skip_collective)
            table.setdefault(item[1:], set()).add(os.environ["BACKEND"])
        from torch.testing._internal.distributed.distributed_test import (
            DistributedTest, TestDistBackend)
    finally:
        sys.argv = argv
    import torch.multiprocessing
    _replicated_tensor_workaround()

    class TestStrataDist(TestDistBackend, DistributedTest._DistTestBase):
        preskip = {}

        def setUp(self):
            why = self.preskip.get(self._testMethodName)
            if why:
                raise unittest.SkipTest(why + " [not spawned]")
            super().setUp()
            trace = os.environ.get("STRATA_DIST_TRACE_ROOT")
            if trace:
                d = os.path.join(trace, self._testMethodName)
                os.makedirs(d, exist_ok=True)
                os.environ["STRATA_DIST_TRACE"] = d
            method = os.environ.get("STRATA_DIST_START_METHOD", "fork")
            self._start_processes(torch.multiprocessing.get_context(method).Process)

    TestStrataDist.__module__ = __name__
    TestStrataDist.__qualname__ = "TestStrataDist"


if os.environ.get(MARK):
    _suite_setup()


# ----------------------------------------------------------------------------------------------
# One world size (in its own process).

_EXC_LINE = re.compile(r"^[A-Za-z_][\w.]*(Error|Exception|Exit|Interrupt|Failure|Warning)(:|$)")


def first_line(err_text):
    """The reason of a failure in one line: the exception raised in the first failed rank when the
    suite reports 'Process N exited with error code 10 and exception: <traceback>', else the last
    exception line of the traceback."""
    lines = err_text.splitlines()
    m = None
    for i, line in enumerate(lines):
        m = re.search(r"Process (\d+) exited with error code \d+ and exception:", line)
        if m:
            block = []
            for line2 in lines[i + 1:]:
                if re.search(r"Process \d+ exited with error code", line2):
                    break
                block.append(line2)
            cand = [b for b in block if _EXC_LINE.match(b)]
            if cand:
                return f"rank {m.group(1)}: {cand[-1].strip()}"
            break
    cand = [b for b in lines if _EXC_LINE.match(b)]
    if cand:
        return cand[-1].strip()
    return lines[-1].strip() if lines else "?"


class _Result(unittest.TestResult):
    def __init__(self, report, trace_root):
        super().__init__()
        self.report = report
        self.trace_root = trace_root
        self.rows = []
        self._t0 = 0.0

    def startTest(self, test):
        super().startTest(test)
        self._t0 = time.time()

    def _row(self, test, outcome, reason="", error=None):
        name = test._testMethodName
        secs = time.time() - self._t0
        row = {"name": name, "outcome": outcome, "reason": reason, "seconds": round(secs, 2)}
        if error:
            row["error"] = error
        if self.trace_root:
            d = os.path.join(self.trace_root, name)
            calls = set()
            if os.path.isdir(d):
                for f in os.listdir(d):
                    with open(os.path.join(d, f)) as fh:
                        calls.update(x.strip() for x in fh if x.strip())
            row["calls"] = sorted(calls)
        self.rows.append(row)
        tail = f": {reason}" if reason else ""
        self.report.write(f"{outcome:5s} {name} ({secs:.1f} s){tail}\n")
        self.report.flush()

    def addSuccess(self, test):
        super().addSuccess(test)
        self._row(test, "PASS")

    def addFailure(self, test, err):
        super().addFailure(test, err)
        self._row(test, "FAIL", first_line(self.failures[-1][1]), self.failures[-1][1])

    def addError(self, test, err):
        super().addError(test, err)
        self._row(test, "ERROR", first_line(self.errors[-1][1]), self.errors[-1][1])

    def addSkip(self, test, reason):
        super().addSkip(test, reason)
        self._row(test, "SKIP", reason)

    def addExpectedFailure(self, test, err):
        super().addExpectedFailure(test, err)
        self._row(test, "PASS", "expected failure")

    def addUnexpectedSuccess(self, test):
        super().addUnexpectedSuccess(test)
        self._row(test, "FAIL", "unexpected success")


def all_tests():
    base = DistributedTest._DistTestBase
    return sorted(n for n in dir(base) if n.startswith("test") and callable(getattr(base, n)))


def _match(name, pattern):
    if any(c in pattern for c in "*?["):
        return fnmatch.fnmatch(name, pattern)
    return pattern in name


def select(names, opts):
    """The tests to run: those of --list-file, else all; narrowed by -k."""
    if opts.list_file:
        wanted = [w.split()[0] for w in read_list(opts.list_file)]
        unknown = [w for w in wanted if w not in names]
        if unknown:
            sys.stderr.write("dist_suite: not in this torch's suite: %s\n" % " ".join(unknown))
        chosen = [n for n in names if n in wanted]
    else:
        chosen = list(names)
    if opts.k:
        chosen = [n for n in chosen if any(_match(n, p) for p in opts.k)]
    return chosen


def read_list(path):
    out = []
    with open(path) as f:
        for line in f:
            line = line.split("#", 1)[0].strip()
            if line:
                out.append(line)
    return out


def read_excludes(path, ws):
    """'test_name[@world_size] reason...' lines -> {name: reason} for this world size."""
    out = {}
    if not path:
        return out
    for line in read_list(path):
        parts = line.split(None, 1)
        name, _, at = parts[0].partition("@")
        if at and int(at) != ws:
            continue
        out[name] = parts[1] if len(parts) > 1 else "no reason given"
    return out


def run_world_size(opts, report):
    ws = int(os.environ["WORLD_SIZE"])
    base = DistributedTest._DistTestBase
    rank_skips = _rank_skip_reasons()
    names = all_tests()
    classes = {n: classify(getattr(base, n), rank_skips) for n in names}
    if opts.list:
        return {"world_size": ws, "classification": {
            n: {"kind": k, "reason": r, "decorators": d} for n, (k, r, d) in classes.items()}}
    chosen = select(names, opts)
    preskip = {}
    if not opts.no_preskip:
        preskip = {n: classes[n][1] for n in chosen if classes[n][0] == "rank-skip"}
    if not opts.all:
        excl = read_excludes(opts.exclude_file, ws)
        for n in chosen:
            if n in excl and classes[n][0] == "runs":
                preskip[n] = f"excluded ({os.path.basename(opts.exclude_file)}): {excl[n]}"
    TestStrataDist.preskip = preskip
    common_distributed.TIMEOUT_DEFAULT = opts.timeout
    common_distributed.TIMEOUT_OVERRIDE.clear()
    report.write(f"== world size {ws}: {len(chosen)} tests, backend {os.environ['BACKEND']} "
                 f"({os.environ['STRATA_DIST_BACKEND_MODULE']}), "
                 f"{os.environ['STRATA_DIST_START_METHOD']}, timeout {opts.timeout} s\n")
    if REPLICATED_NOTE:
        report.write(f"note: {REPLICATED_NOTE}\n")
    report.flush()
    suite = unittest.TestSuite(TestStrataDist(n) for n in chosen)
    result = _Result(report, os.environ.get("STRATA_DIST_TRACE_ROOT"))
    t0 = time.time()
    TestStrataDist.setUpClass()
    try:
        suite.run(result)
    finally:
        TestStrataDist.tearDownClass()
    return {"world_size": ws, "seconds": round(time.time() - t0, 1), "rows": result.rows}


def child_main(opts):
    # The report goes to the original stdout; everything else (the suite's logging, the ranks'
    # output, which inherit fds 1 and 2) to the log unless -v.
    report = os.fdopen(os.dup(1), "w")
    if opts.log:
        logfd = os.open(opts.log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o644)
        os.dup2(logfd, 1)
        os.dup2(logfd, 2)
        os.close(logfd)
    res = run_world_size(opts, report)
    with open(opts.result, "w") as f:
        json.dump(res, f)
    return 0


# ----------------------------------------------------------------------------------------------
# The driver.

def print_classification(res, out):
    ws = res["world_size"]
    cls = res["classification"]
    groups = {}
    for name, c in cls.items():
        groups.setdefault((c["kind"], c["reason"]), []).append(name)
    runs = groups.pop(("runs", ""), [])
    out.write(f"== world size {ws}: {len(cls)} tests in _DistTestBase; "
              f"{sum(1 for c in cls.values() if c['kind'] == 'decorated')} skipped at import, "
              f"{sum(1 for c in cls.values() if c['kind'] == 'rank-skip')} skipped by a rank-side "
              f"decorator (not spawned), {len(runs)} run\n")
    for kind in ("decorated", "rank-skip"):
        for (k, reason), members in sorted(groups.items(), key=lambda kv: -len(kv[1])):
            if k != kind:
                continue
            out.write(f"-- {kind} ({len(members)}): {reason}\n")
            for n in sorted(members):
                out.write(f"     {n}\n")
    out.write(f"-- runs ({len(runs)})\n")
    for n in sorted(runs):
        out.write(f"     {n}\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-w", "--world-sizes", default="2,4", help="comma-separated (default 2,4)")
    ap.add_argument("-k", action="append", default=[],
                    help="run the tests whose name contains K, or matches it when it has * ? [")
    ap.add_argument("--list-file", help="run only the tests named in this file (one a line)")
    ap.add_argument("--exclude-file", default=DEFAULT_EXCLUDE,
                    help="'test[@world_size] reason' lines: reported as skipped with the reason, "
                    "not run (default dist_suite.exclude; '' for none)")
    ap.add_argument("--all", action="store_true", help="ignore the exclude file")
    ap.add_argument("--list", action="store_true", help="print the classification, run nothing")
    ap.add_argument("--timeout", type=int, default=120, help="seconds per test (default 120)")
    ap.add_argument("--start-method", choices=("fork", "spawn"), default="fork")
    ap.add_argument("--backend-module",
                    default=os.environ.get("STRATA_DIST_BACKEND_MODULE", "strata.torch"))
    ap.add_argument("--backend-name", default=os.environ.get("STRATA_DIST_BACKEND_NAME", "strata"))
    ap.add_argument("--features", default=os.environ.get("STRATA_DIST_FEATURES",
                                                         "+ddp,-sendrecv anysource"),
                    help="what the backend declares to the suite's DistTestCases: +F adds it to "
                    "backend_feature[F] (the suite then runs F's tests, e.g. +ddp), -C to "
                    "skip_collective[C] (the suite skips them with its own message); default "
                    "strata's: '+ddp,-sendrecv anysource'")
    ap.add_argument("--init-method", choices=("file", "env"), default="file",
                    help="INIT_METHOD the suite sees (its own re-inits; default file://)")
    ap.add_argument("--no-preskip", action="store_true",
                    help="start the ranks of tests a rank-side decorator skips")
    ap.add_argument("--trace", action="store_true", help="collect the ProcessGroup methods each "
                    "test calls (a backend that honours STRATA_DIST_TRACE writes them)")
    ap.add_argument("--json", help="write every row (world size, test, outcome, reason, s) here")
    ap.add_argument("--log-dir", help="keep the ranks' logs here (default: a temp folder, kept "
                    "only when a test fails)")
    ap.add_argument("--show-errors", action="store_true",
                    help="print the whole error (the ranks' tracebacks) of every failure")
    ap.add_argument("-v", "--verbose", action="store_true", help="the ranks' output live")
    ap.add_argument("--_child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--result", help=argparse.SUPPRESS)
    ap.add_argument("--log", help=argparse.SUPPRESS)
    opts = ap.parse_args()

    if opts._child:
        return child_main(opts)

    try:
        sizes = [int(s) for s in opts.world_sizes.split(",") if s]
    except ValueError:
        ap.error("--world-sizes: integers, comma-separated")

    own_logs = opts.log_dir is None
    log_dir = opts.log_dir or tempfile.mkdtemp(prefix="strata-dist-suite-")
    os.makedirs(log_dir, exist_ok=True)
    bad = 0
    all_rows = []
    t_all = time.time()
    for ws in sizes:
        tmp = tempfile.mkdtemp(prefix=f"strata-dist-ws{ws}-")
        try:
            env = dict(os.environ)
            env.update({
                MARK: str(ws), "BACKEND": opts.backend_name, "WORLD_SIZE": str(ws),
                "TEMP_DIR": tmp, "STRATA_DIST_BACKEND_MODULE": opts.backend_module,
                "STRATA_DIST_START_METHOD": opts.start_method,
                "STRATA_DIST_FEATURES": opts.features,
                "DISTRIBUTED_TESTS_DEFAULT_TIMEOUT": str(opts.timeout),
                "INIT_METHOD": ("file://" + os.path.join(tmp, "init_file")
                                if opts.init_method == "file" else "env://"),
                "PYTHONUNBUFFERED": "1",
                # The suite's temporary files (MultiProcessTestCase's file:// init files, one a
                # test, are never removed) go into this world size's folder, removed below.
                "TMPDIR": tmp,
            })
            if opts.trace:
                env["STRATA_DIST_TRACE_ROOT"] = os.path.join(tmp, "trace")
            result = os.path.join(tmp, "result.json")
            log = os.path.join(log_dir, f"ws{ws}.log")
            cmd = [sys.executable, os.path.abspath(__file__), "--_child", "--result", result,
                   "--timeout", str(opts.timeout)]
            if not opts.verbose:
                cmd += ["--log", log]
            for k in opts.k:
                cmd += ["-k", k]
            if opts.all:
                cmd.append("--all")
            cmd += ["--exclude-file", os.path.abspath(opts.exclude_file) if opts.exclude_file
                    else ""]
            if opts.list_file:
                cmd += ["--list-file", os.path.abspath(opts.list_file)]
            if opts.list:
                cmd.append("--list")
            if opts.no_preskip:
                cmd.append("--no-preskip")
            rc = subprocess.call(cmd, env=env, cwd=tmp)
            if rc != 0 or not os.path.exists(result):
                print(f"world size {ws}: the runner's process exited with {rc}, no result "
                      f"(see {log})", flush=True)
                bad += 1
                own_logs = False
                continue
            with open(result) as f:
                res = json.load(f)
        finally:
            shutil.rmtree(tmp, ignore_errors=True)
        if opts.list:
            print_classification(res, sys.stdout)
            continue
        rows = res["rows"]
        for r in rows:
            r["world_size"] = ws
        all_rows += rows
        n = {o: sum(1 for r in rows if r["outcome"] == o) for o in ("PASS", "FAIL", "ERROR", "SKIP")}
        failed = n["FAIL"] + n["ERROR"]
        ran = [r["seconds"] for r in rows if r["outcome"] in ("PASS", "FAIL", "ERROR")]
        print(f"world size {ws}: passed {n['PASS']} / failed {failed} / skipped {n['SKIP']} "
              f"({res['seconds']} s; {len(ran)} started ranks, "
              f"{(sum(ran) / len(ran)) if ran else 0:.1f} s each)")
        for r in rows:
            if r["outcome"] == "SKIP":
                print(f"  skipped {r['name']}: {r['reason']}")
        for r in rows:
            if r["outcome"] in ("FAIL", "ERROR"):
                print(f"  FAILED  {r['name']}: {r['reason']}")
        if opts.show_errors:
            for r in rows:
                if r.get("error"):
                    print(f"---- world size {ws}, {r['name']}:\n{r['error'].rstrip()}\n----")
        sys.stdout.flush()
        if failed:
            bad += 1
            own_logs = False
    if opts.json:
        with open(opts.json, "w") as f:
            json.dump(all_rows, f, indent=1)
    if own_logs:
        shutil.rmtree(log_dir, ignore_errors=True)
    elif not opts.verbose:
        print(f"logs of the ranks: {log_dir}")
    if not opts.list:
        print(f"total {time.time() - t_all:.0f} s: {'FAIL' if bad else 'PASS'}")
    return 1 if bad else 0


if __name__ == "__main__":
    sys.exit(main())
