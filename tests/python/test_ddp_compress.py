#!/usr/bin/python3
"""DDP with strata's compression hooks on 4 ranks in 2 emulated nodes of 2 (strata.ddp's
compress_hook with fp16, int8, topk and sign, and its powerSGD_hook).

This file starts itself 4 times (``--worker RANK PORT OUT``), rank r with STRATA_HOSTID=
node<r // 2>, joined by a gloo process group (torch's tcp:// rendezvous on 127.0.0.1); each worker
trains a small MLP (3 layers, about 5,800 parameters, buckets of about 10 kB so that there are
several and DDP rebuilds them after the first step) for STEPS steps of SGD on its own batches of
a fixed regression task with every hook in turn, from the same initial parameters, and writes to
OUT/rank<r>.json: the loss over a fixed evaluation set before and after, a sha256 of its
parameters after every step, the number of compressors and rebuilds. Also, as references: the
plain strata hook (allreduce_hook), compress_hook with codec none (whose parameters must be
allreduce_hook's bit for bit: codec none is exact) and PyTorch's own powerSGD_hook on the gloo
group (strata's port should train alike).

Checks: every run's parameters are bitwise identical on the 4 ranks after every step, the loss
falls, the compressed runs went through compressors (one per bucket) on 2 nodes.
Run by tests/python/test_ddp_compress.sh. Exit 0 pass, 1 fail.
"""

import hashlib
import json
import os
import socket
import subprocess
import sys
import tempfile
import time

NODES, PER_NODE = 2, 2
NRANKS = NODES * PER_NODE
STEPS = 25
BATCH = 32
RUNS = ["allreduce", "none", "fp16", "int8", "topk:0.1", "sign:64", "powersgd", "powersgd/1",
        "torch-powersgd/1"]
# "/1": one bucket for the whole model. PyTorch's powerSGD_hook on gloo needs it: with several
# buckets its future callbacks start all-reduces from gloo's threads in an order that differs
# between ranks (gloo aborts: "op.preamble.length <= op.nbytes").


def worker(rank, port, out):
    import datetime
    import torch
    import torch.distributed as dist
    from torch.nn.parallel import DistributedDataParallel as DDP
    import strata.ddp

    torch.set_num_threads(1)
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank,
                            world_size=NRANKS, timeout=datetime.timedelta(seconds=60))
    # A teacher network defines the task; the evaluation set is the same on every rank, the
    # training batches differ per rank and step.
    g = torch.Generator().manual_seed(1234)
    teacher = torch.nn.Linear(20, 4)
    with torch.no_grad():
        teacher.weight.copy_(torch.randn(4, 20, generator=g))
        teacher.bias.copy_(torch.randn(4, generator=g))
    xe = torch.randn(512, 20, generator=g)
    ye = torch.tanh(teacher(xe)).detach()
    gr = torch.Generator().manual_seed(100 + rank)
    batches = []
    for _ in range(STEPS):
        x = torch.randn(BATCH, 20, generator=gr)
        batches.append((x, torch.tanh(teacher(x)).detach()))

    results = {}
    for run in RUNS:
        torch.manual_seed(0)
        net = torch.nn.Sequential(torch.nn.Linear(20, 64), torch.nn.Tanh(),
                                  torch.nn.Linear(64, 64), torch.nn.Tanh(),
                                  torch.nn.Linear(64, 4))
        one_bucket = run.endswith("/1")
        dist._DEFAULT_FIRST_BUCKET_BYTES = 1 << 20 if one_bucket else 10_000
        model = DDP(net, bucket_cap_mb=25 if one_bucket else 0.01)
        state = None
        if run == "allreduce":
            state = strata.ddp.StrataState()
            model.register_comm_hook(state, strata.ddp.allreduce_hook)
        elif run.startswith("powersgd"):
            state = strata.ddp.PowerSGDState(matrix_approximation_rank=2, start_powerSGD_iter=2,
                                             min_compression_rate=1)
            model.register_comm_hook(state, strata.ddp.powerSGD_hook)
        elif run.startswith("torch-powersgd"):
            from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
            tstate = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=2,
                                        start_powerSGD_iter=2, min_compression_rate=1)
            model.register_comm_hook(tstate, psgd.powerSGD_hook)
        else:
            state = strata.ddp.CompressState(run)
            model.register_comm_hook(state, strata.ddp.compress_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.05, momentum=0.9)

        def eval_loss():
            with torch.no_grad():
                return float(torch.nn.functional.mse_loss(net(xe), ye))

        t0 = time.monotonic()
        loss0 = eval_loss()
        digests = []
        for x, y in batches:
            opt.zero_grad()
            torch.nn.functional.mse_loss(model(x), y).backward()
            opt.step()
            h = hashlib.sha256()
            for p in net.parameters():
                h.update(p.detach().numpy().tobytes())
            digests.append(h.hexdigest())
        r = {"loss0": loss0, "loss": eval_loss(), "digests": digests,
             "seconds": time.monotonic() - t0}
        if state is not None:
            r["buckets"] = state.buckets
            r["nnodes"] = state.comm.topo_rank().nnodes
            if isinstance(state, strata.ddp.CompressState):
                r["compressors"] = sorted(state.compressors)
                r["specs"] = sorted({c.spec for c in state.compressors.values()})
                r["rebuilt"] = state.rebuilt
                r["wire_bytes"] = state.wire_bytes
            if isinstance(state, strata.ddp.PowerSGDState):
                r["compress_rate"] = state.psgd.compression_stats()[0]
            state.close()
        results[run] = r
        del model
    dist.barrier()
    dist.destroy_process_group()
    with open(os.path.join(out, "rank%d.json" % rank), "w") as f:
        json.dump(results, f)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def main():
    fails = []

    def check(cond, what):
        print("%s: %s" % ("ok" if cond else "FAIL", what))
        if not cond:
            fails.append(what)

    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="strata-ddp-compress.") as tmp:
        port = free_port()
        procs = []
        for r in range(NRANKS):
            env = dict(os.environ, STRATA_HOSTID="node%d" % (r // PER_NODE))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                           str(r), str(port), tmp], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                          start_new_session=True))
        outs = []
        for p in procs:
            try:
                o, _ = p.communicate(timeout=max(1, 150 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                o, _ = p.communicate()
                o += b"\n(killed after 150 s)"
            outs.append(o.decode(errors="replace"))
        if any(p.returncode != 0 for p in procs):
            for r, (p, o) in enumerate(zip(procs, outs)):
                print("---- rank %d (exit %s):\n%s" % (r, p.returncode, o[-4000:]))
            print("FAIL: a worker failed")
            return 1
        res = []
        for r in range(NRANKS):
            with open(os.path.join(tmp, "rank%d.json" % r)) as f:
                res.append(json.load(f))
    print("# %d ranks on %d emulated nodes, %d steps per run, %.1f s in all"
          % (NRANKS, NODES, STEPS, time.monotonic() - t0))

    for run in RUNS:
        rs = [x[run] for x in res]
        same = all(x["digests"] == rs[0]["digests"] for x in rs)
        check(same, "%s: parameters bitwise identical on all %d ranks after each of %d steps"
              % (run, NRANKS, STEPS))
        r0 = rs[0]
        check(r0["loss"] < 0.5 * r0["loss0"], "%s: evaluation loss falls %.5f -> %.5f (%.2f s)"
              % (run, r0["loss0"], r0["loss"], r0["seconds"]))
        if "nnodes" in r0:
            check(r0["nnodes"] == NODES and r0["buckets"] >= STEPS,
                  "%s: %d bucket calls on %d nodes" % (run, r0["buckets"], r0["nnodes"]))
        if "compressors" in r0:
            check(len(r0["compressors"]) >= 2 and r0["specs"] == [r0["specs"][0]],
                  "%s: %d compressors (buckets %s, spec %s), %d rebuilt, %d encoded bytes"
                  % (run, len(r0["compressors"]), r0["compressors"], r0["specs"],
                     r0["rebuilt"], r0["wire_bytes"]))
    base = res[0]["allreduce"]
    check(res[0]["none"]["digests"] == base["digests"],
          "codec none: parameters equal allreduce_hook's bit for bit after every step")
    for run in ("fp16", "int8", "topk:0.1", "sign:64", "powersgd"):
        check(res[0][run]["digests"][-1] != base["digests"][-1],
              "%s: the codec changed the result (parameters differ from allreduce_hook's)" % run)
    check(res[0]["int8"]["wire_bytes"] < 0.6 * res[0]["fp16"]["wire_bytes"],
          "int8 encodes fewer bytes than fp16 (%d < %d)"
          % (res[0]["int8"]["wire_bytes"], res[0]["fp16"]["wire_bytes"]))
    check(res[0]["powersgd"]["compress_rate"] > 1,
          "powersgd: compression rate %.2f" % res[0]["powersgd"]["compress_rate"])
    a, b = res[0]["powersgd/1"]["loss"], res[0]["torch-powersgd/1"]["loss"]
    check(abs(a - b) <= 1e-3 * b, "powersgd through strata trains as PyTorch's hook on gloo (one "
          "bucket): final loss %.7f vs %.7f, within 1e-3 relative" % (a, b))
    for run in RUNS:
        print("  %-16s loss %.7f -> %.7f" % (run, res[0][run]["loss0"], res[0][run]["loss"]))
    if fails:
        print("%d check(s) failed" % len(fails))
        return 1
    print("all checks passed")
    return 0


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), int(sys.argv[3]), sys.argv[4])
        sys.exit(0)
    sys.exit(main())
