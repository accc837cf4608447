"""digits_common.py: what the digits examples share (ddp_digits.py, zero_digits.py,
pipeline_digits.py): the process group (--backend gloo | strata), the data (scikit-learn's digits,
8x8 images, 10 classes, 1797 samples, a fixed 80/20 split), the 64-H-H-10 MLP, determinism,
digests of parameters, the epoch loop and its report, the final report and a bounded exit.

--backend strata imports strata.torch, which registers the "strata" backend with
torch.distributed, and the process group is strata's own: every collective of torch.distributed,
DDP's, ZeRO's and the example's, goes through it; no gloo group is created. group_backends()
lists the backend of every process group that exists, so an example can show (and a test
assert) that none is gloo.
"""

import faulthandler
import hashlib
import json
import os
import sys
import time

import numpy as np
import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F

BACKENDS = ("gloo", "strata")
HERE = os.path.dirname(os.path.abspath(__file__))


def import_strata(module="strata"):
    """Imports strata (or a submodule), from PYTHONPATH or else this tree's python/."""
    import importlib
    try:
        return importlib.import_module(module)
    except ImportError:
        sys.path.insert(0, os.path.join(HERE, "..", "python"))
        return importlib.import_module(module)


def deterministic(seed, threads=1):
    """Fixed seeds, `threads` torch threads, deterministic algorithms."""
    torch.set_num_threads(threads)
    torch.use_deterministic_algorithms(True)
    torch.manual_seed(seed)
    np.random.seed(seed)


def init_process_group(backend):
    """dist.init_process_group(backend) from torch.distributed.run's environment; for strata,
    strata.torch is imported first (it registers the backend). Returns the default group's
    backend name as torch.distributed reports it."""
    if backend == "strata":
        import_strata("strata.torch")
    elif backend not in BACKENDS:
        raise ValueError("unknown backend %r (%s)" % (backend, ", ".join(BACKENDS)))
    dist.init_process_group(backend)
    return dist.get_backend()


def start(args):
    """The start of a data-parallel example: deterministic(args.seed, args.threads), the process
    group (args.backend), the data (args.seed's split) and a DistributedSampler of the training
    samples over all ranks (shuffled, args.seed). Returns (the group's backend, rank, world size,
    (x_train, y_train, x_test, y_test), the sampler)."""
    from torch.utils.data.distributed import DistributedSampler
    deterministic(args.seed, args.threads)
    backend = init_process_group(args.backend)
    rank, world = dist.get_rank(), dist.get_world_size()
    data = load_data(args.seed)
    sampler = DistributedSampler(range(len(data[0])), num_replicas=world, rank=rank, shuffle=True,
                                 seed=args.seed)
    return backend, rank, world, data, sampler


def group_backends():
    """The backend names of every process group that exists now (sorted, unique)."""
    pg_map = dist.distributed_c10d._pg_map
    return sorted({str(v[0]) for v in pg_map.values()})


class MLP(nn.Module):
    def __init__(self, hidden):
        super().__init__()
        self.fc1 = nn.Linear(64, hidden)
        self.fc2 = nn.Linear(hidden, hidden)
        self.fc3 = nn.Linear(hidden, 10)

    def forward(self, x):
        return self.fc3(F.relu(self.fc2(F.relu(self.fc1(x)))))


def load_data(seed):
    """(x_train, y_train, x_test, y_test): float32 pixels in [0, 1] and int64 labels."""
    from sklearn.datasets import load_digits
    from sklearn.model_selection import train_test_split
    x, y = load_digits(return_X_y=True)
    x = (x / 16.0).astype(np.float32)
    xtr, xte, ytr, yte = train_test_split(x, y, test_size=0.2, random_state=seed, stratify=y)
    return (torch.from_numpy(xtr), torch.from_numpy(ytr).long(),
            torch.from_numpy(xte), torch.from_numpy(yte).long())


def param_digest(module):
    """sha256 of the module's parameters' bytes, in order."""
    h = hashlib.sha256()
    for p in module.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    return h.hexdigest()


def gather(obj, group=None):
    """Every rank's obj (all_gather_object over group)."""
    out = [None] * dist.get_world_size(group)
    dist.all_gather_object(out, obj, group=group)
    return out


def evaluate(module, x, y):
    """(loss, accuracy in %) of module on (x, y), without gradients."""
    was_training = module.training
    module.eval()
    with torch.no_grad():
        logits = module(x)
        loss = F.cross_entropy(logits, y).item()
        acc = (logits.argmax(1) == y).float().mean().item() * 100.0
    module.train(was_training)
    return loss, acc


def train_epochs(sampler, epochs, batch_size, step, accuracy):
    """The training loop. Per epoch: the sampler's order (set_epoch), in batches of up to
    batch_size sample indices; step(sel) trains on one and returns (the sum of its samples' losses,
    its samples) to count in the epoch's loss, or None to count nothing. At the end of an epoch the
    counts are summed over all ranks (all_reduce), accuracy() gives the test accuracy (after that
    all_reduce: it may communicate too), and rank 0 prints the epoch's line. Returns (the epochs'
    losses, their test accuracies, seconds of training, the last epoch's sample indices)."""
    epoch_loss, epoch_acc = [], []
    t_train = time.perf_counter()
    for epoch in range(epochs):
        sampler.set_epoch(epoch)
        idx = torch.tensor(list(iter(sampler)))
        loss_sum = torch.zeros(2, dtype=torch.float64)
        t_epoch = time.perf_counter()
        for b in range(0, len(idx), batch_size):
            counted = step(idx[b:b + batch_size])
            if counted is not None:
                loss_sum += torch.tensor(list(counted), dtype=torch.float64)
        dist.all_reduce(loss_sum)
        epoch_loss.append((loss_sum[0] / loss_sum[1]).item())
        epoch_acc.append(accuracy())
        if dist.get_rank() == 0:
            print("epoch %d  loss %.6f  test accuracy %.2f %%  (%.2f s)" % (
                epoch + 1, epoch_loss[-1], epoch_acc[-1], time.perf_counter() - t_epoch),
                flush=True)
    return epoch_loss, epoch_acc, time.perf_counter() - t_train, idx


def final_state(module, stride=1):
    """(digests, identical, groups) after training: every rank's param_digest(module) in rank
    order (gathered); whether ranks r, r + stride, r + 2 stride, ... hold bitwise identical
    parameters, for every r < stride (stride 1: all ranks); the backends of every process group."""
    digests = gather(param_digest(module))
    identical = all(len(set(digests[s::stride])) == 1 for s in range(stride))
    return digests, identical, group_backends()


def identical_line(digests, identical):
    """Rank 0's line on whether all ranks' parameters (digests from final_state) are identical."""
    return "parameters bitwise identical on all %d ranks: %s" % (
        len(digests), "yes" if identical else "NO (%d different)" % len(set(digests)))


def finish(lines, results, json_file, rc, close=None):
    """The end of an example, on every rank. Rank 0 prints lines and the backends of every
    process group (results["groups"]), and writes results to json_file (if one is given). Then
    the shutdown, bounded: a rank stuck in it prints every thread's stack and exits non-zero;
    close() (if given), a barrier, destroy_process_group and leave(rc)."""
    if dist.get_rank() == 0:
        for line in lines:
            print(line)
        print("process groups: %s" % " ".join(results["groups"]), flush=True)
        if json_file:
            with open(json_file, "w") as f:
                json.dump(results, f, indent=1)
    faulthandler.dump_traceback_later(120, exit=True)
    if close is not None:
        close()
    dist.barrier()
    dist.destroy_process_group()
    leave(rc)


def leave(rc):
    """Exits without running destructors: with torch 1.13, freeing DDP and the gloo group's
    objects after destroy_process_group sometimes never returns (2 runs in about 40 here, with
    gloo alone; faulthandler showed the main thread in the frame's teardown and a native thread
    without Python frames). Everything is written and strata's resources are released by now."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(rc)


def run(main):
    """Runs main(), which ends with leave(status) while its locals (DDP, the optimizers) are
    alive: returning would free them first, and that is where torch 1.13's teardown hangs
    (~ProcessGroupGloo joins a gloo thread that waits for the GIL the freeing thread holds).
    An exception is printed and leaves with 1."""
    try:
        rc = main()
    except SystemExit as exc:  # argparse's --help and usage errors
        leave(exc.code if isinstance(exc.code, int) else 2)
    except BaseException:  # noqa: BLE001 - reported; its traceback keeps main's objects alive
        import traceback
        traceback.print_exc()
        leave(1)
    leave(rc or 0)
