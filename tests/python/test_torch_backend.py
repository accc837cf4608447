"""test_torch_backend.py: the torch.distributed backend "strata" (python/strata/torch.py) as its
users call it, with 2 and 4 processes: every collective of torch.distributed on values each rank
can compute, the dtypes and ops strata lacks (reduced through an all-gather), non-contiguous
tensors, uneven all-to-all, send/recv both ways at once, new_group / new_subgroups (split),
async futures (and a callback that runs a collective and waits for it; DDP with PyTorch's
PowerSGD hook), and the failures: a rank that never joins init_process_group, one that joins and
then stays silent past the timeout, and one that exits (the others raise within the timeout,
naming the rank), and the calls the backend refuses (a RuntimeError saying why). PyTorch's own suite is
test_dist_suite; this one checks what that suite does not reach.

Run by test_torch_backend.sh (make check). Exit 0 pass, 1 fail.
"""

import datetime
import warnings
import os
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))


def worker(case, rank, n, store):
    if case == "absent" and rank == n - 1:
        return  # never joins: the others' init_process_group must fail within its timeout
    import torch
    warnings.simplefilter("ignore", UserWarning)  # torch: _all_gather_base is private
    import torch.distributed as dist
    import strata.torch  # noqa: F401 - registers "strata"

    timeout = datetime.timedelta(seconds=3 if case in ("late", "absent") else 20)
    if case == "absent":
        t0 = time.monotonic()
        try:
            dist.init_process_group("strata", init_method="file://" + store, rank=rank,
                                    world_size=n, timeout=timeout)
        except RuntimeError as exc:
            took = time.monotonic() - t0
            assert took < 10, took
            assert "rank(s) %d of %d did not join" % (n - 1, n) in str(exc), exc
            print("rank %d: %s after %.1f s" % (rank, str(exc)[:200], took))
            return
        raise AssertionError("init_process_group succeeded without rank %d" % (n - 1))
    dist.init_process_group("strata", init_method="file://" + store, rank=rank, world_size=n,
                            timeout=timeout)
    assert dist.get_backend() == "strata", dist.get_backend()
    assert dist.group.WORLD._get_backend_name() == "strata"
    tri = n * (n + 1) // 2
    if case == "colls":
        t = torch.full((5,), float(rank + 1))
        dist.all_reduce(t)
        assert t.tolist() == [float(tri)] * 5, t
        for dtype in (torch.float32, torch.float64, torch.float16, torch.bfloat16, torch.int8,
                      torch.uint8, torch.int32, torch.int64, torch.int16):
            for op, want in ((dist.ReduceOp.SUM, tri), (dist.ReduceOp.MAX, n),
                             (dist.ReduceOp.MIN, 1), (dist.ReduceOp.PRODUCT,
                                                      [1, 2, 6, 24][n - 1])):
                t = torch.full((3,), rank + 1, dtype=dtype)
                dist.all_reduce(t, op=op)
                assert t.tolist() == [want] * 3, (dtype, op, t)
        for op, want in ((dist.ReduceOp.BAND, 0), (dist.ReduceOp.BOR, (1 << n) - 1),
                         (dist.ReduceOp.BXOR, (1 << n) - 1)):
            t = torch.tensor([1 << rank], dtype=torch.int64)
            dist.all_reduce(t, op=op)
            assert t.item() == want, (op, t)
        b = torch.tensor([rank == 0, True, False])
        dist.all_reduce(b)  # bool: sum is logical or
        assert b.tolist() == [True, True, False], b
        c = torch.tensor([complex(rank, 1)])
        dist.all_reduce(c)
        assert c.item() == complex(tri - n, n), c
        big = torch.arange(12, dtype=torch.float32).reshape(3, 4) * (rank + 1)
        view = big.t()  # non-contiguous
        dist.all_reduce(view)
        assert torch.equal(big, torch.arange(12, dtype=torch.float32).reshape(3, 4) * tri), big
        t = torch.full((2,), float(rank))
        dist.all_reduce(t, op=dist.ReduceOp.AVG)
        assert t.tolist() == [(n - 1) / 2] * 2, t
        t = torch.full((2,), 7 + rank, dtype=torch.int32)
        dist.all_reduce(t, op=dist.ReduceOp.AVG)  # integers: the sum divided, truncated
        assert t.tolist() == [(7 * n + n * (n - 1) // 2) // n] * 2, t
        e = torch.zeros(0)
        dist.all_reduce(e)
        dist.broadcast(e, 0)
        z = torch.tensor(float(rank + 1))  # 0-dim
        dist.all_reduce(z)
        assert z.shape == () and z.item() == tri, z
        for root in range(n):
            t = torch.full((4,), float(rank))
            dist.broadcast(t, root)
            assert t.tolist() == [float(root)] * 4
            t = torch.full((2,), float(rank + 1))
            dist.reduce(t, root)
            # the root has the sum; the others' tensors are not written
            assert t.tolist() == [float(tri) if rank == root else float(rank + 1)] * 2, t
            s = torch.tensor([rank], dtype=torch.int16)
            dist.reduce(s, root, op=dist.ReduceOp.MAX)
            if rank == root:
                assert s.item() == n - 1
        out = [torch.zeros(2, dtype=torch.int16) for _ in range(n)]
        dist.all_gather(out, torch.full((2,), rank, dtype=torch.int16))
        assert [o.tolist() for o in out] == [[r, r] for r in range(n)]
        o = torch.zeros(2 * n)
        dist._all_gather_base(o, torch.full((2,), float(rank)))
        assert o.tolist() == [float(r) for r in range(n) for _ in range(2)]
        o = torch.zeros(2 * n)
        o[2 * rank:2 * rank + 2] = rank + 0.5
        dist._all_gather_base(o, o[2 * rank:2 * rank + 2])  # in place: input is own block
        assert o.tolist() == [r + 0.5 for r in range(n) for _ in range(2)], o
        try:
            dist.reduce_scatter(torch.zeros(2), [torch.zeros(4) for _ in range(n)])
        except RuntimeError as exc:
            assert "input 0 has 4" in str(exc), exc
        else:
            raise AssertionError("reduce_scatter of mismatched sizes did not raise")
        o = torch.zeros(2)
        dist.reduce_scatter(o, [torch.full((2,), float(r * 10 + rank)) for r in range(n)])
        assert o.tolist() == [float(rank * 10 * n + tri - n)] * 2, o
        o = torch.zeros(1, dtype=torch.int64)
        dist._reduce_scatter_base(o, torch.arange(n, dtype=torch.int64) + rank)
        assert o.item() == n * rank + tri - n, o
        inp = torch.arange(n, dtype=torch.float32) + 10 * rank
        out = torch.empty(n)
        dist.all_to_all_single(out, inp)
        assert out.tolist() == [10.0 * r + rank for r in range(n)], out
        # uneven: rank r sends p+1 rows of 2 to rank p
        inp = torch.cat([torch.full((p + 1, 2), float(100 * rank + p)) for p in range(n)])
        out = torch.empty((n * (rank + 1), 2))
        dist.all_to_all_single(out, inp, [rank + 1] * n, [p + 1 for p in range(n)])
        want = torch.cat([torch.full((rank + 1, 2), float(100 * r + rank)) for r in range(n)])
        assert torch.equal(out, want), out
        inp = torch.cat([torch.full((p + 1, 3), rank * 16 + p, dtype=torch.int16)
                         for p in range(n)])  # int16 travels as bytes
        out = torch.empty((n * (rank + 1), 3), dtype=torch.int16)
        dist.all_to_all_single(out, inp, [rank + 1] * n, [p + 1 for p in range(n)])
        want = torch.cat([torch.full((rank + 1, 3), r * 16 + rank, dtype=torch.int16)
                          for r in range(n)])
        assert torch.equal(out, want), out
        outs = [torch.empty(r + 1) for r in range(n)]
        dist.all_to_all(outs, [torch.full((rank + 1,), float(rank * n + p)) for p in range(n)])
        assert [x.tolist() for x in outs] == [[float(r * n + rank)] * (r + 1) for r in range(n)]
        g = [torch.zeros(1) for _ in range(n)] if rank == n - 1 else None
        dist.gather(torch.full((1,), float(rank)), g, dst=n - 1)
        if rank == n - 1:
            assert [x.item() for x in g] == list(range(n))
        s = torch.zeros(1)
        dist.scatter(s, [torch.full((1,), float(r)) for r in range(n)] if rank == 0 else None, 0)
        assert s.item() == rank
        objs = [None] * n
        dist.all_gather_object(objs, {"rank": rank})
        assert objs == [{"rank": r} for r in range(n)]
        box = [{"from": 0}] if rank == 0 else [None]
        dist.broadcast_object_list(box, 0)
        assert box == [{"from": 0}]
        # send and receive both ways at once: each rank's receive from its left must not hold
        # up its send to its right
        right, left = (rank + 1) % n, (rank - 1) % n
        r = torch.zeros(3)
        reqs = [dist.irecv(r, left), dist.isend(torch.full((3,), float(rank)), right)]
        for q in reqs:
            q.wait()
        assert r.tolist() == [float(left)] * 3
        ops = [dist.P2POp(dist.isend, torch.full((1,), float(rank)), left),
               dist.P2POp(dist.irecv, r[:1], right)]
        for q in dist.batch_isend_irecv(ops):
            q.wait()
        assert r[0].item() == float(right)
        w = dist.all_reduce(torch.ones(2), async_op=True)
        got = w.get_future().then(lambda f: f.value()[0] * 2).wait()
        assert got.tolist() == [2.0 * n] * 2 and w.is_completed() and w.is_success()

        def nested(fut):  # a callback that runs a collective and waits for it (PowerSGD does)
            x = fut.value()[0].clone()
            dist.all_reduce(x)
            return x
        got = dist.all_reduce(torch.ones(1), async_op=True).get_future().then(nested).wait()
        assert got.item() == n * n, got
        dist.barrier()
        # groups: a split of the default communicator
        odd = dist.new_group([r for r in range(n) if r % 2])
        if rank % 2:
            t = torch.ones(1)
            dist.all_reduce(t, group=odd)
            assert t.item() == n // 2
            assert dist.get_rank(odd) == rank // 2
        # what new_subgroups does (which torch 1.13 refuses without CUDA): every rank makes
        # every pair, in the same order
        pairs = [dist.new_group([r, r + 1]) for r in range(0, n, 2)]
        sub = pairs[rank // 2]
        t = torch.full((1,), float(rank))
        dist.all_reduce(t, group=sub)
        assert t.item() == float(rank // 2 * 4 + 1), t
        dist.barrier()
    elif case == "powersgd":
        # DDP on the strata group with PyTorch's PowerSGD hook: its callbacks start all-reduces
        # and wait for them inside the futures' callbacks
        import torch.nn as nn
        from torch.nn.parallel import DistributedDataParallel as DDP
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        torch.manual_seed(0)
        model = DDP(nn.Sequential(nn.Linear(32, 64), nn.ReLU(), nn.Linear(64, 4)))
        state = psgd.PowerSGDState(process_group=None, matrix_approximation_rank=1,
                                   start_powerSGD_iter=2, min_compression_rate=0.5)
        model.register_comm_hook(state, psgd.powerSGD_hook)
        opt = torch.optim.SGD(model.parameters(), lr=0.01)
        torch.manual_seed(100 + rank)
        for _ in range(4):
            opt.zero_grad()
            model(torch.randn(8, 32)).pow(2).mean().backward()
            opt.step()
        flat = torch.cat([p.detach().reshape(-1) for p in model.parameters()])
        copies = [torch.empty_like(flat) for _ in range(n)]
        dist.all_gather(copies, flat)
        assert all(torch.equal(copies[0], c) for c in copies), "replicas differ"
    elif case == "reinit":
        # destroy, then init again (a new file each time: torch's FileStore removes its file
        # when the last user closes it, so reusing one path races; torch's docs say so)
        for rnd in range(2):
            t = torch.full((1,), float(rank))
            dist.all_reduce(t)
            assert t.item() == tri - n, t
            dist.destroy_process_group()
            dist.init_process_group("strata", init_method="file://%s.%d" % (store, rnd),
                                    rank=rank, world_size=n, timeout=timeout)
        dist.barrier()
    elif case == "refused":
        try:
            dist.recv(torch.zeros(1))
        except RuntimeError as exc:
            assert "any source" in str(exc), exc
        else:
            raise AssertionError("recv without src did not raise")
        try:
            dist.all_reduce(torch.ones(2), op=dist.ReduceOp.BAND)
        except RuntimeError as exc:
            assert "bitwise op BAND" in str(exc) and "InvalidArgument" in str(exc), exc
        else:
            raise AssertionError("BAND on float did not raise")
        t = torch.ones(1)
        dist.all_reduce(t)  # the group still works after refused calls
        assert t.item() == n, t
        dist.barrier()
    elif case in ("dies", "late"):
        if rank == n - 1:
            if case == "late":  # never arrives within init_process_group's timeout (3 s)
                time.sleep(5)
            os._exit(0)
        t0 = time.monotonic()
        try:
            dist.all_reduce(torch.ones(4))
            dist.all_reduce(torch.ones(4))
        except RuntimeError as exc:
            took = time.monotonic() - t0
            assert took < (7 if case == "late" else 25), took
            assert ("Timeout" if case == "late" else "Error") in str(exc), exc
            assert "rank %d" % (n - 1) in str(exc), exc
            print("rank %d: %s after %.1f s" % (rank, str(exc)[:160], took))
            return
        raise AssertionError("no error although rank %d exited" % (n - 1))
    dist.destroy_process_group()


def launch(case, n):
    with tempfile.TemporaryDirectory(prefix="strata-tb-") as tmp:
        store = os.path.join(tmp, "store")
        procs = [subprocess.Popen([sys.executable, __file__, "--worker", case, str(r), str(n),
                                   store], start_new_session=True) for r in range(n)]
        deadline = time.monotonic() + float(os.environ.get("TB_DEADLINE", 120))
        rcs = []
        for p in procs:
            try:
                rcs.append(p.wait(max(1, deadline - time.monotonic())))
            except subprocess.TimeoutExpired:
                for q in procs:
                    try:
                        os.killpg(q.pid, 9)
                    except OSError:
                        pass
                rcs.append("timeout")
        return rcs


def main():
    if len(sys.argv) > 1 and sys.argv[1] == "--worker":
        worker(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), sys.argv[5])
        return 0
    failed = 0
    for case, sizes in (("colls", (2, 4)), ("refused", (2,)), ("powersgd", (2,)), ("reinit", (2,)),
                        ("dies", (2, 3)), ("late", (2,)), ("absent", (2,))):
        for n in sizes:
            t0 = time.monotonic()
            rcs = launch(case, n)
            ok = all(rc == 0 for rc in rcs)
            failed += not ok
            print("%s: %s, %d ranks (%.1f s)%s" % ("PASS" if ok else "FAIL", case, n,
                                                   time.monotonic() - t0,
                                                   "" if ok else " exit statuses %s" % rcs))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
