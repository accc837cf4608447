#!/usr/bin/python3
"""zero_digits.py: DistributedDataParallel + ZeroRedundancyOptimizer (ZeRO stage 1: the optimizer
state is sharded over the ranks) training the digits MLP of ddp_digits.py, with the process group
gloo or strata.

    /usr/bin/python3 -m torch.distributed.run --standalone --nproc_per_node 2 \\
        examples/zero_digits.py --backend strata

--backend gloo | strata (default gloo): the process group; with strata (strata.torch registers
the backend) every collective goes through strata and no gloo group is created. What travels:
DDP's parameter broadcast at construction and its gradient all-reduce (average) per step; then
ZeroRedundancyOptimizer steps only the parameters this rank owns (Adam by default: its two
moments exist for those parameters only) and broadcasts each updated parameter from its owner
(torch 1.13: dist.broadcast(async_op=True) per parameter, or per rank's bucket with
--bucket-view), so every rank ends the step with the same parameters.

Fixed seeds (the data split, the initial weights, the sample order): runs with either backend are
comparable loss for loss. Rank 0 prints the backend, how the parameters are sharded, per epoch the
training loss (mean over every sample of every rank) and the test accuracy, and at the end the
final accuracy, whether every rank's parameters are bitwise identical (sha256, gathered) and the
backends of all process groups. Exits 1 when the parameters differ. Needs torch, numpy and
scikit-learn; strata from ../python or PYTHONPATH, the library from STRATA_LIBRARY or the build
tree.
"""

import argparse

import torch
import torch.nn.functional as F
from torch.distributed.optim import ZeroRedundancyOptimizer
from torch.nn.parallel import DistributedDataParallel as DDP

from digits_common import (BACKENDS, MLP, evaluate, final_state, finish, gather,
                           identical_line, run, start, train_epochs)

OPTIMIZERS = {"adam": torch.optim.Adam, "sgd": torch.optim.SGD}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--backend", choices=BACKENDS, default="gloo",
                   help="the process group's backend (default gloo)")
    p.add_argument("--optimizer", choices=sorted(OPTIMIZERS), default="adam",
                   help="the sharded optimizer (default adam; sgd uses --momentum)")
    p.add_argument("--epochs", type=int, default=3)
    p.add_argument("--batch-size", type=int, default=16, help="samples per rank and step (16)")
    p.add_argument("--lr", type=float, default=1e-3, help="learning rate (1e-3)")
    p.add_argument("--momentum", type=float, default=0.9, help="for --optimizer sgd (0.9)")
    p.add_argument("--hidden", type=int, default=256, help="width of the two hidden layers")
    p.add_argument("--seed", type=int, default=1234)
    p.add_argument("--bucket-view", action="store_true",
                   help="parameters_as_bucket_view: one broadcast per rank's shard, not per "
                   "parameter")
    p.add_argument("--json", metavar="FILE", help="rank 0 writes the results here")
    p.add_argument("--threads", type=int, default=1, help="torch threads per rank (1)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    backend, rank, world, (xtr, ytr, xte, yte), sampler = start(args)
    module = MLP(args.hidden)
    model = DDP(module)
    kwargs = {"lr": args.lr}
    if args.optimizer == "sgd":
        kwargs["momentum"] = args.momentum
    opt = ZeroRedundancyOptimizer(model.parameters(),
                                  optimizer_class=OPTIMIZERS[args.optimizer],
                                  parameters_as_bucket_view=args.bucket_view, **kwargs)
    # What this rank owns: the parameters of its shard (their optimizer state lives here only).
    owned = sum(p.numel() for g in opt.optim.param_groups for p in g["params"])
    shards = gather(owned)
    nparams = sum(p.numel() for p in module.parameters())
    steps_per_epoch = (len(sampler) + args.batch_size - 1) // args.batch_size
    if rank == 0:
        print("# zero_digits: process group %s, %d ranks, MLP 64-%d-%d-10 (%d parameters), "
              "ZeroRedundancyOptimizer(%s, lr %g%s), parameters owned per rank %s, batch %d per "
              "rank, %d steps per epoch" % (
                  backend, world, args.hidden, args.hidden, nparams, args.optimizer, args.lr,
                  ", bucket view" if args.bucket_view else "", shards, args.batch_size,
                  steps_per_epoch), flush=True)

    def step(sel):
        opt.zero_grad()
        loss = F.cross_entropy(model(xtr[sel]), ytr[sel])
        loss.backward()
        opt.step()
        return loss.item() * len(sel), len(sel)

    epoch_loss, epoch_acc, train_s, _ = train_epochs(
        sampler, args.epochs, args.batch_size, step, lambda: evaluate(module, xte, yte)[1])
    test_loss, test_acc = evaluate(module, xte, yte)
    digests, identical, groups = final_state(module)
    finish(["final  test loss %.6f  test accuracy %.2f %%  training %.2f s" % (
                test_loss, test_acc, train_s),
            identical_line(digests, identical)],
           {"example": "zero_digits", "backend": backend, "groups": groups,
            "world": world, "seed": args.seed, "optimizer": args.optimizer,
            "bucket_view": args.bucket_view, "owned": shards,
            "epochs": args.epochs, "epoch_loss": epoch_loss,
            "epoch_accuracy": epoch_acc, "test_loss": test_loss,
            "test_accuracy": test_acc, "params_identical": identical,
            "digests": digests, "train_seconds": train_s},
           args.json, 0 if identical else 1)


if __name__ == "__main__":
    run(main)
