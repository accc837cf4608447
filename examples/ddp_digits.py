#!/usr/bin/python3
"""ddp_digits.py: PyTorch DistributedDataParallel training of a small MLP on scikit-learn's digits
(8x8 images, 10 classes, 1797 samples, bundled with scikit-learn), with the gradient all-reduce
done by the process group (DDP's own reduction: gloo, or strata as a torch.distributed backend)
or by strata.ddp's comm hook.

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
        examples/ddp_digits.py --comm strata
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
        examples/ddp_digits.py --backend strata
    sudo examples/run_ddp_emu.sh --rate 1gbit -- --comm strata     # 2 emulated nodes x 2 ranks

--backend gloo | strata (default gloo): the process group. With strata (strata.torch registers
the backend) everything goes through strata: DDP's parameter broadcast and its gradient
reduction, the reports; no gloo group is created.
--comm ddp | gloo | strata | strata-fp16 | strata-bf16 | strata-compress | strata-powersgd: who
all-reduces the gradients. ddp: DDP's own reduction through the process group; gloo: the same,
and asks for --backend gloo. strata*: a strata.ddp comm hook over a strata communicator of its
own, whose unique id travels by a broadcast on the process group (with either backend): strata,
strata-fp16, strata-bf16 allreduce_hook and the casting hooks (fp32, fp16 or bf16 on the wire, the
whole way); strata-compress compress_hook with --codec SPEC (strataAllReduceCompressed: full
precision inside a node, the codec across nodes, error feedback per bucket; none, fp16, bf16,
int8[:B], topk:D, sign[:B], optionally ",noef"); strata-powersgd powerSGD_hook (PowerSGD of rank
--powersgd-rank from step --powersgd-start on, its P and Q all-reduces through strata). Default:
strata with --backend gloo (as before --backend existed), ddp with --backend strata.
Fixed seeds: the same data split, initial weights and sample order for every backend, so runs
are comparable loss for loss.

Rank 0 prints per epoch the training loss (mean over every sample of every rank) and the test
accuracy (held-out 20 %), then the mean training step time, the overlap measurement and whether
the parameters of all ranks are bitwise identical. Overlap: after training, rounds of N steps of
forward + backward with DDP's gradient reduction, and N under ``model.no_sync()`` (no
communication), alternate; exposed communication per step = step time with - step time without
(medians over the rounds, averaged over the ranks). Zero means the reduction hid entirely behind
the backward pass. The no_sync rounds also time forward (with the loss) and backward apart, and
the training loop times the optimizer step: the compute a cost model takes (collbench model
--forward --backward). With strata-compress and strata-powersgd rank 0 also prints the wire bytes
per step and rank: one probe step at the very end whose strata calls each run to completion
before the next starts, so that strataCommGetPhaseTimes (Communicator.phase_times) describes
each one: its bytes[1], the bytes the rank sent over the network, where the algorithm is hier
(every compressed call on several nodes); for the small algorithm, which records the call's
size there, the bytes from its layout (the node leader sends its node's partial to every other
leader, the others send nothing); 0 on one node. --json gets all of it for every strata* comm
(wire_bytes: the mean over the ranks; wire_source says how it was had). Needs torch, numpy and
scikit-learn; strata from ../python or PYTHONPATH, the library from STRATA_LIBRARY or the build
tree (see strata._lib).
"""

import argparse
import contextlib
import socket
import statistics
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.nn.parallel import DistributedDataParallel as DDP

from digits_common import (BACKENDS, MLP, evaluate, final_state, finish, gather, identical_line,
                           import_strata, run, start, train_epochs)

COMMS = ("ddp", "gloo", "strata", "strata-fp16", "strata-bf16", "strata-compress",
         "strata-powersgd")
# The comms whose extra lines (wire bytes, compute split) rank 0 prints; the others print what
# they always did (every strata* comm writes the extra fields to --json).
REPORTING_COMMS = ("strata-compress", "strata-powersgd")


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, default="gloo",
                   help="the process group's backend (default gloo)")
    p.add_argument("--comm", choices=COMMS, default=None,
                   help="who all-reduces the gradients (default: strata with --backend gloo, "
                   "ddp with --backend strata)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="samples per rank and step (16)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bucket-mb", type=float, default=0.1,
                   help="DDP bucket_cap_mb: smaller buckets start travelling earlier (0.1)")
    p.add_argument("--codec", metavar="SPEC", default=None,
                   help="--comm strata-compress: the codec (none, fp16, bf16, int8[:B], topk:D, "
                   "sign[:B], optionally ,noef; default int8)")
    p.add_argument("--powersgd-rank", type=int, default=1, metavar="R",
                   help="--comm strata-powersgd: the rank of the approximation (1)")
    p.add_argument("--powersgd-start", type=int, default=2, metavar="N",
                   help="--comm strata-powersgd: steps of plain all-reduce before PowerSGD starts "
                   "(PyTorch's start_powerSGD_iter; at least 2; default 2)")
    p.add_argument("--timing-rounds", type=int, default=5,
                   help="rounds of the overlap measurement (0: skip it)")
    p.add_argument("--timing-steps", type=int, default=10, help="steps per round and mode")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the results here")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (1)")
    args = p.parse_args(argv)
    if args.comm is None:
        args.comm = "strata" if args.backend == "gloo" else "ddp"
    if args.comm == "gloo" and args.backend != "gloo":
        p.error("--comm gloo is DDP's reduction through a gloo process group: with --backend %s "
                "use --comm ddp (DDP's reduction through %s)" % (args.backend, args.backend))
    if args.codec is not None and args.comm != "strata-compress":
        p.error("--codec is for --comm strata-compress")
    if args.comm == "strata-compress" and args.codec is None:
        args.codec = "int8"
    if args.powersgd_rank < 1 or args.powersgd_start < 2:
        p.error("--powersgd-rank must be >= 1 and --powersgd-start >= 2")
    return args


def measure_overlap(model, batches, rounds, steps):
    """Median step time (s) of forward + backward with and without DDP's reduction, and the
    medians of the no_sync rounds' forward (with the loss) and backward times per step (s)."""
    with_comm, without, fwd, bwd = [], [], [], []
    for _ in range(rounds):
        for mode in ("sync", "nosync"):
            dist.barrier()
            t_fwd = t_bwd = 0.0
            t0 = time.perf_counter()
            for i in range(steps):
                x, y = batches[i % len(batches)]
                ctx = model.no_sync() if mode == "nosync" else contextlib.nullcontext()
                with ctx:
                    t1 = time.perf_counter()
                    loss = F.cross_entropy(model(x), y)
                    t2 = time.perf_counter()
                    loss.backward()
                    t3 = time.perf_counter()
                t_fwd += t2 - t1
                t_bwd += t3 - t2
                model.zero_grad(set_to_none=True)
            dt = (time.perf_counter() - t0) / steps
            (with_comm if mode == "sync" else without).append(dt)
            if mode == "nosync":
                fwd.append(t_fwd / steps)
                bwd.append(t_bwd / steps)
    return (statistics.median(with_comm), statistics.median(without), statistics.median(fwd),
            statistics.median(bwd))


class WireProbe:
    """Bytes this rank sends over the network in one step, from strata's own record.

    Inside ``with WireProbe(comm):`` every all_reduce and all_reduce_compressed on comm runs to
    completion before it returns (a queued call is waited for), and then comm.phase_times()
    (strataCommGetPhaseTimes: the last completed collective, which is that call) is read: hier
    records in bytes[1] what this rank sent in its inter-node steps (measured); small records the
    call's size there, and sends the node's partial from the leader (local rank 0) to each other
    node's leader, nothing from the others, so its bytes come from that layout; on one node
    nothing crosses a network. ``bytes`` sums a step's calls, ``sources`` names how each algorithm
    was counted. Only for a probe step: waiting in the hook stops the overlap."""

    def __init__(self, comm):
        self.comm = comm
        self.bytes = 0
        self.calls = 0
        self.sources = {}
        topo = comm.topo_rank()
        self.nnodes, self.local_rank = topo.nnodes, topo.local_rank

    def _wrap(self, fn):
        def call(*a, **kw):
            out = fn(*a, **kw)
            if kw.get("stream") is not None:
                out.wait()
            t = self.comm.phase_times()
            algo, size = t["algorithm"], t["bytes"][1]
            if self.nnodes == 1:
                sent, how = 0, "one node: nothing crosses a network"
            elif algo == "hier":
                sent, how = size, "measured: strataCommGetPhaseTimes bytes[1]"
            elif algo == "small":
                sent = size * (self.nnodes - 1) if self.local_rank == 0 else 0
                how = "layout: the leader sends the bucket to each other node's leader"
            else:
                sent, how = size, "strataCommGetPhaseTimes bytes[1] (the call's size)"
            self.bytes += sent
            self.calls += 1
            self.sources[algo] = how
            return out
        return call

    def __enter__(self):
        self._saved = (self.comm.all_reduce, self.comm.all_reduce_compressed)
        self.comm.all_reduce = self._wrap(self._saved[0])
        self.comm.all_reduce_compressed = self._wrap(self._saved[1])
        return self

    def __exit__(self, *exc):
        del self.comm.all_reduce, self.comm.all_reduce_compressed


def main(argv=None):
    args = parse_args(argv)
    backend, rank, world, (xtr, ytr, xte, yte), sampler = start(args)
    module = MLP(args.hidden)
    # DDP puts the first gradients ready (the last layer's) in a bucket of up to 1 MB, which
    # would hold this whole model: cap it like the others (torch's documented knob) so the
    # buckets, in reverse layer order, can travel while earlier layers compute.
    dist._DEFAULT_FIRST_BUCKET_BYTES = int(args.bucket_mb * 1024 * 1024)
    model = DDP(module, bucket_cap_mb=args.bucket_mb)

    state = None
    if args.comm == "strata-compress":
        strata_ddp = import_strata("strata.ddp")
        state = strata_ddp.CompressState(args.codec)
        model.register_comm_hook(state, strata_ddp.compress_hook)
    elif args.comm == "strata-powersgd":
        strata_ddp = import_strata("strata.ddp")
        state = strata_ddp.PowerSGDState(matrix_approximation_rank=args.powersgd_rank,
                                         start_powerSGD_iter=args.powersgd_start,
                                         random_seed=args.seed)
        model.register_comm_hook(state, strata_ddp.powerSGD_hook)
    elif args.comm.startswith("strata"):
        strata_ddp = import_strata("strata.ddp")
        state = strata_ddp.StrataState()
        wire = {"strata": "fp32", "strata-fp16": "fp16", "strata-bf16": "bf16"}[args.comm]
        model.register_comm_hook(state, strata_ddp.HOOKS[wire])

    opt = torch.optim.SGD(model.parameters(), lr=args.lr, momentum=args.momentum)
    nodes = len(set(gather(socket.gethostname())))
    nparams = sum(p.numel() for p in module.parameters())
    steps_per_epoch = (len(sampler) + args.batch_size - 1) // args.batch_size
    if rank == 0:
        print("# ddp_digits: process group %s, --comm %s, %d ranks on %d node(s), MLP 64-%d-%d-10 "
              "(%d parameters, %.2f MB of fp32 gradients), buckets <= %g MB, batch %d per rank, "
              "%d steps per epoch, %d train / %d test samples" % (
                  backend, args.comm, world, nodes, args.hidden, args.hidden, nparams,
                  nparams * 4 / 1e6, args.bucket_mb, args.batch_size, steps_per_epoch,
                  len(xtr), len(xte)), flush=True)

    step_times, opt_times = [], []

    def step(sel):
        x, y = xtr[sel], ytr[sel]
        t0 = time.perf_counter()
        opt.zero_grad()
        loss = F.cross_entropy(model(x), y)
        loss.backward()
        t1 = time.perf_counter()
        opt.step()
        t2 = time.perf_counter()
        step_times.append(t2 - t0)
        opt_times.append(t2 - t1)
        return loss.item() * len(sel), len(sel)

    epoch_loss, epoch_acc, train_s, idx = train_epochs(
        sampler, args.epochs, args.batch_size, step, lambda: evaluate(module, xte, yte)[1])
    test_loss, test_acc = evaluate(module, xte, yte)
    digests, identical, groups = final_state(module)
    # The first step builds DDP's buckets anew (and, for strata, connects): left out of the mean.
    step_ms = statistics.mean(step_times[1:] if len(step_times) > 1 else step_times) * 1e3
    step_ms = statistics.mean(gather(step_ms))
    buckets_per_step = None
    if state is not None:
        buckets_per_step = state.buckets / max(1, len(step_times))

    opt_ms = statistics.mean(gather(statistics.mean(opt_times[1:] or opt_times) * 1e3))

    sel = [idx[b:b + args.batch_size] for b in range(0, len(idx), args.batch_size)]
    batches = [(xtr[s], ytr[s]) for s in sel if len(s) == args.batch_size] or \
              [(xtr[sel[0]], ytr[sel[0]])]
    sync_ms = nosync_ms = exposed_ms = forward_ms = backward_ms = None
    if args.timing_rounds > 0 and args.timing_steps > 0:
        timing = measure_overlap(model, batches, args.timing_rounds, args.timing_steps)
        per_rank = gather(timing)
        sync_ms, nosync_ms, forward_ms, backward_ms = (
            statistics.mean(v[i] for v in per_rank) * 1e3 for i in range(4))
        exposed_ms = sync_ms - nosync_ms

    # The probe step: after every measurement (it waits for each call, and it moves the
    # parameters' gradients and PowerSGD's state one step on, the parameters not).
    wire = wire_ranks = wire_calls = wire_source = None
    if state is not None:
        dist.barrier()
        x, y = batches[0]
        with WireProbe(state.comm) as probe:
            F.cross_entropy(model(x), y).backward()
        model.zero_grad(set_to_none=True)
        per_rank = gather((probe.bytes, probe.calls, probe.sources))
        wire_ranks = [v[0] for v in per_rank]
        wire = statistics.mean(wire_ranks)
        wire_calls = per_rank[0][1]
        sources = {}
        for v in per_rank:
            sources.update(v[2])
        wire_source = "; ".join("%s: %s" % kv for kv in sorted(sources.items()))

    lines = ["final  test loss %.6f  test accuracy %.2f %%  training %.2f s"
             % (test_loss, test_acc, train_s),
             "step time (training: forward, backward, all-reduce, optimizer; mean over steps "
             "and ranks): %.3f ms" % step_ms]
    if buckets_per_step is not None:
        lines.append("buckets per step through strata: %.1f" % buckets_per_step)
    if args.comm in REPORTING_COMMS:
        what = args.comm + (" " + args.codec if args.codec else "")
        if args.comm == "strata-powersgd":
            what += " rank %d from step %d" % (args.powersgd_rank, args.powersgd_start)
        lines.append("wire bytes per step and rank (%s; %d strata calls per step; %s): %.0f "
                     "(ranks: %s)" % (what, wire_calls, wire_source, wire,
                                      " ".join(str(b) for b in wire_ranks)))
        if forward_ms is not None:
            lines.append("compute per step (no_sync rounds, mean over ranks): forward %.3f ms, "
                         "backward %.3f ms; optimizer %.3f ms (training)"
                         % (forward_ms, backward_ms, opt_ms))
    if exposed_ms is not None:
        lines.append("overlap (forward + backward, median of %d rounds of %d steps, mean over "
                     "ranks): with communication %.3f ms, without (no_sync) %.3f ms, exposed "
                     "communication %.3f ms per step" % (args.timing_rounds, args.timing_steps,
                                                         sync_ms, nosync_ms, exposed_ms))
    lines.append(identical_line(digests, identical))
    finish(lines, {"backend": backend, "groups": groups, "comm": args.comm,
                   "world": world, "nodes": nodes, "seed": args.seed,
                   "epochs": args.epochs, "epoch_loss": epoch_loss,
                   "epoch_accuracy": epoch_acc, "test_loss": test_loss,
                   "test_accuracy": test_acc, "step_ms": step_ms,
                   "sync_ms": sync_ms, "nosync_ms": nosync_ms,
                   "exposed_ms": exposed_ms, "buckets_per_step": buckets_per_step,
                   "params_identical": identical, "digests": digests,
                   "parameters": nparams, "train_seconds": train_s,
                   "codec": args.codec,
                   "powersgd_rank": args.powersgd_rank if args.comm == "strata-powersgd"
                   else None,
                   "bucket_mb": args.bucket_mb,
                   "bucket_bytes": int(args.bucket_mb * 1024 * 1024),
                   "batch_size": args.batch_size, "steps_per_epoch": steps_per_epoch,
                   "forward_ms": forward_ms, "backward_ms": backward_ms,
                   "optimizer_ms": opt_ms, "wire_bytes": wire, "wire_bytes_ranks": wire_ranks,
                   "wire_calls": wire_calls, "wire_source": wire_source},
           args.json, 0, close=state.close if state is not None else None)


if __name__ == "__main__":
    run(main)
