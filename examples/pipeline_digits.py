#!/usr/bin/python3
"""pipeline_digits.py: pipeline-parallel training of the digits MLP of ddp_digits.py in two stages
with a 1F1B schedule, activations and gradients moving by dist.send / dist.recv, with the process
group gloo or strata; with 2*P ranks, P pipelines train data parallel.

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 \\
        examples/pipeline_digits.py --backend strata --micro-batches 4
    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 4 \\
        examples/pipeline_digits.py --backend strata          # 2 pipelines x 2 stages

Stages: stage 0 holds fc1 (64 -> H, then ReLU), stage 1 holds fc2, ReLU, fc3 and the loss. Rank r
is stage r % 2 of pipeline r // 2. Each step a pipeline takes --batch-size samples (its share of a
DistributedSampler over the pipelines), cuts them into --micro-batches M micro-batches and runs
1F1B: stage 0 runs one warm-up forward, then alternates forward of micro-batch i+1 and backward
of micro-batch i (steady state), then the last backward (cool-down); stage 1 runs forward and
backward of each micro-batch in turn. Stage 0 sends each micro-batch's activations (micro x H
float32) forward; stage 1 sends the gradient of the loss with respect to them back. Each
micro-batch's loss is its mean cross entropy weighted by its share of the batch, so the
accumulated gradients are those of the batch's mean loss. The order of the blocking calls never
deadlocks, even where a send waits for its receive: stage 0 sends activations i+1 before it
receives gradients i; stage 1 receives activations i+1 before it sends gradients i. With P > 1
pipelines the stage's gradients are then averaged over the P copies of the stage (one all_reduce
of the flattened gradients on a group per stage, dist.new_group) before SGD steps.

Self-check before training: every rank computes, alone, the forward and backward of the whole
model on its pipeline's first batch, runs the same batch through the 1F1B pipeline, and compares
its stage's gradients (max |difference| <= 1e-6 x max(1, max |gradient|)); exits 1 if they differ.

Fixed seeds: every rank builds the same whole model and keeps its stage, so runs with either
backend are comparable loss for loss. Rank 0 prints the schedule, per epoch the training loss
(mean over every sample) and the test accuracy (pipeline 0 runs the test set through both
stages), and at the end whether the copies of each stage are bitwise identical and the backends of
all process groups. Needs torch, numpy and scikit-learn; strata from ../python or PYTHONPATH, the
library from STRATA_LIBRARY or the build tree.
"""

import argparse

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.utils.data.distributed import DistributedSampler

from digits_common import (BACKENDS, MLP, deterministic, final_state, finish, gather,
                           init_process_group, leave, load_data, run, train_epochs)

STAGES = 2


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, default="gloo",
                   help="the process group's backend (default gloo)")
    p.add_argument("--micro-batches", type=int, default=4, help="micro-batches per batch (4)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=32, help="samples per pipeline and step (32)")
    p.add_argument("--lr", type=float, default=0.1)
    p.add_argument("--momentum", type=float, default=0.9)
    p.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the results here")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (1)")
    args = p.parse_args(argv)
    if args.micro_batches < 1 or args.batch_size < args.micro_batches:
        p.error("need 1 <= --micro-batches <= --batch-size")
    return args


def split_stages(mlp):
    """The two stages of the MLP (they share its parameters)."""
    return [nn.Sequential(mlp.fc1, nn.ReLU()), nn.Sequential(mlp.fc2, nn.ReLU(), mlp.fc3)]


def schedule(stage, m):
    """1F1B order of stage's work on m micro-batches: [("F", i) | ("B", i)]."""
    warmup = min(STAGES - 1 - stage, m)
    ops = [("F", i) for i in range(warmup)]
    for i in range(m - warmup):
        ops += [("F", warmup + i), ("B", i)]
    ops += [("B", i) for i in range(m - warmup, m)]
    return ops


class Pipeline:
    """One rank's stage of a two-stage pipeline: runs a batch with 1F1B."""

    def __init__(self, stage_module, stage, peer, hidden):
        self.module, self.stage, self.peer, self.hidden = stage_module, stage, peer, hidden

    def step(self, x, y, m):
        """Forward and backward of the batch (x on stage 0, y on stage 1; both know the micro-batch
        sizes from the batch size) in m micro-batches, accumulating the stage's gradients. Returns
        the sum over micro-batches of loss x micro-batch size on stage 1 (0 on stage 0)."""
        n = len(y)
        sizes = [len(c) for c in torch.arange(n).tensor_split(m)]
        offsets = [sum(sizes[:i]) for i in range(m)]
        inputs, outputs = {}, {}
        pending_send = None
        loss_sum = 0.0
        for op, i in schedule(self.stage, m):
            lo, hi = offsets[i], offsets[i] + sizes[i]
            if op == "F":
                if self.stage == 0:
                    out = self.module(x[lo:hi])
                    outputs[i] = out
                    dist.send(out.detach().contiguous(), self.peer)
                else:
                    act = torch.empty(sizes[i], self.hidden)
                    dist.recv(act, self.peer)
                    if pending_send is not None:  # gradients i-1 go after activations i arrived
                        dist.send(pending_send, self.peer)
                        pending_send = None
                    act.requires_grad_(True)
                    inputs[i] = act
                    outputs[i] = F.cross_entropy(self.module(act), y[lo:hi]) * (sizes[i] / n)
                    loss_sum += outputs[i].item() * n
            else:
                if self.stage == 0:
                    grad = torch.empty(sizes[i], self.hidden)
                    dist.recv(grad, self.peer)
                    outputs.pop(i).backward(grad)
                else:
                    outputs.pop(i).backward()
                    pending_send = inputs.pop(i).grad.contiguous()
        if pending_send is not None:
            dist.send(pending_send, self.peer)
        assert not outputs and not inputs
        return loss_sum


def flat_grads(module):
    return torch.cat([p.grad.reshape(-1) for p in module.parameters()])


def self_check(pipe, full, stage_module, x, y, m):
    """Stage's gradients from 1F1B vs the whole model's on (x, y) alone: (ok, max diff, scale)."""
    full.zero_grad()
    F.cross_entropy(full(x), y).backward()
    ref = flat_grads(stage_module).clone()
    full.zero_grad()
    pipe.step(x, y, m)
    got = flat_grads(stage_module)
    full.zero_grad()
    diff = (got - ref).abs().max().item()
    scale = max(1.0, ref.abs().max().item())
    return diff <= 1e-6 * scale, diff, scale


def evaluate(pipe, x, y):
    """Test accuracy through the pipeline (stage 1's result; None on stage 0)."""
    with torch.no_grad():
        if pipe.stage == 0:
            dist.send(pipe.module(x).contiguous(), pipe.peer)
            return None
        act = torch.empty(len(y), pipe.hidden)
        dist.recv(act, pipe.peer)
        return (pipe.module(act).argmax(1) == y).float().mean().item() * 100.0


def main(argv=None):
    args = parse_args(argv)
    deterministic(args.seed, args.threads)
    backend = init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    if world % STAGES != 0:
        raise SystemExit("pipeline_digits: needs a multiple of %d ranks, not %d" % (STAGES, world))
    stage, pipeline, pipelines = rank % STAGES, rank // STAGES, world // STAGES
    peer = rank + 1 if stage == 0 else rank - 1
    # One group per stage over the pipelines' copies of it (every rank creates every group).
    stage_groups = [dist.new_group(list(range(s, world, STAGES))) if pipelines > 1 else None
                    for s in range(STAGES)]
    dp_group = stage_groups[stage]

    xtr, ytr, xte, yte = load_data(args.seed)
    sampler = DistributedSampler(range(len(xtr)), num_replicas=pipelines, rank=pipeline,
                                 shuffle=True, seed=args.seed)
    full = MLP(args.hidden)  # the same weights on every rank (seeded); each keeps its stage
    stage_module = split_stages(full)[stage]
    pipe = Pipeline(stage_module, stage, peer, args.hidden)
    opt = torch.optim.SGD(stage_module.parameters(), lr=args.lr, momentum=args.momentum)
    m = args.micro_batches
    if rank == 0:
        print("# pipeline_digits: process group %s, %d ranks = %d pipeline(s) x %d stages, "
              "MLP 64-%d-%d-10 (stage 0: fc1; stage 1: fc2, fc3, loss), batch %d per pipeline "
              "in %d micro-batches, %d steps per epoch" % (
                  backend, world, pipelines, STAGES, args.hidden, args.hidden, args.batch_size,
                  m, (len(sampler) + args.batch_size - 1) // args.batch_size), flush=True)
        for s in range(STAGES):
            print("# 1F1B stage %d: %s" % (s, " ".join("%s%d" % o for o in schedule(s, m))))

    sampler.set_epoch(0)
    first = torch.tensor(list(iter(sampler))[:args.batch_size])
    ok, diff, scale = self_check(pipe, full, stage_module, xtr[first], ytr[first], m)
    checks = gather((ok, diff, scale))
    check_ok = all(c[0] for c in checks)
    if rank == 0:
        print("self-check: 1F1B gradients vs the whole model's on the same batch, max |diff| per "
              "rank %s (limit 1e-6 x max(1, max |grad|)): %s" % (
                  " ".join("%.2e" % c[1] for c in checks), "ok" if check_ok else "FAILED"),
              flush=True)
    if not check_ok:
        leave(1)

    def step(sel):
        opt.zero_grad()
        loss = pipe.step(xtr[sel], ytr[sel], min(m, len(sel)))
        if dp_group is not None:
            g = flat_grads(stage_module)
            dist.all_reduce(g, group=dp_group)
            g /= pipelines
            off = 0
            for p in stage_module.parameters():
                p.grad.copy_(g[off:off + p.numel()].view_as(p))
                off += p.numel()
        opt.step()
        return (loss, len(sel)) if stage == STAGES - 1 else None

    epoch_loss, epoch_acc, train_s, _ = train_epochs(
        sampler, args.epochs, args.batch_size, step,
        lambda: gather(evaluate(pipe, xte, yte) if pipeline == 0 else None)[STAGES - 1])
    digests, identical, groups = final_state(stage_module, STAGES)
    finish(["final  test accuracy %.2f %%  training %.2f s" % (epoch_acc[-1], train_s),
            "copies of each stage bitwise identical over the %d pipeline(s): %s" % (
                pipelines, "yes" if identical else "NO")],
           {"example": "pipeline_digits", "backend": backend, "groups": groups,
            "world": world, "pipelines": pipelines, "micro_batches": m,
            "seed": args.seed, "self_check": [list(c) for c in checks],
            "epochs": args.epochs, "epoch_loss": epoch_loss,
            "epoch_accuracy": epoch_acc, "test_accuracy": epoch_acc[-1],
            "params_identical": identical, "digests": digests,
            "train_seconds": train_s},
           args.json, 0 if identical else 1)

if __name__ == "__main__":
    run(main)
