#!/usr/bin/python3
"""Unit tests of the Python binding (python/strata): every datatype and op of all-reduce against
numpy, the other collectives, streams and requests, init from a UniqueId in threads, split, the
DDP hook on an in-process communicator, the enums against include/strata.h, and the errors.

Run by tests/python/test_binding.sh (make check), which sets STRATA_LIBRARY, PYTHONPATH and
STRATA_TOP_SRCDIR. Ranks are communicators of this process: strataCommInitAll's, driven from one
thread inside strata.group(), or one thread per rank.
"""

import os
import re
import subprocess
import sys
import threading
import unittest

import numpy as np
import torch

import strata
import strata.ddp
from strata import DataType, RedOp, Result

NRANKS = 4
TOP = os.environ.get("STRATA_TOP_SRCDIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))

NUMPY_TYPES = [np.int8, np.uint8, np.int32, np.uint32, np.int64, np.uint64, np.float16,
               np.float32, np.float64]
OPS = ["sum", "prod", "max", "min", "avg"]


def run_ranks(fn, n):
    """fn(rank) in n threads at once; returns their results, re-raises the first exception."""
    out, errs = [None] * n, [None] * n

    def body(r):
        try:
            out[r] = fn(r)
        except BaseException as exc:  # noqa: BLE001 - handed back to the test
            errs[r] = exc

    threads = [threading.Thread(target=body, args=(r,)) for r in range(n)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
        if t.is_alive():
            raise AssertionError("a rank thread did not finish within 120 s")
    for e in errs:
        if e is not None:
            raise e
    return out


def inputs(dtype, nranks, count, op, rng):
    """Per-rank inputs for which the reduction is exact in every order (so any algorithm must
    match numpy bit for bit): small integers; floats on a grid of 1/4 (sums) or from
    {+-0.5, +-1, +-1.5, +-2} (products: at most 8 significant bits over 4 ranks)."""
    dt = np.dtype(dtype)
    if dt.kind == "f":
        if op == "prod":
            vals = np.array([-2, -1.5, -1, -0.5, 0.5, 1, 1.5, 2])
            return [rng.choice(vals, count).astype(dt) for _ in range(nranks)]
        return [(rng.integers(-64, 64, count) / 4).astype(dt) for _ in range(nranks)]
    info = np.iinfo(dt)
    if op in ("sum", "avg"):
        # The full range: sums wrap (two's complement), as numpy's do.
        lo, hi = max(info.min, -2**62), min(info.max, 2**62)
        return [rng.integers(lo, hi, count, dtype=np.int64 if dt.kind == "i" or dt.itemsize < 8
                             else np.uint64, endpoint=True).astype(dt) for _ in range(nranks)]
    if op == "prod":
        lo = -3 if dt.kind == "i" else 0
        return [rng.integers(lo, 4, count).astype(dt) for _ in range(nranks)]
    return [rng.integers(max(info.min, -1000), min(info.max, 1000), count).astype(dt)
            for _ in range(nranks)]


def expected(xs, op, dtype):
    """op over the ranks' arrays with strata's semantics, computed by numpy."""
    dt = np.dtype(dtype)
    with np.errstate(over="ignore"):
        if op == "sum":
            out = xs[0].copy()
            for x in xs[1:]:
                out = (out + x).astype(dt)
        elif op == "prod":
            out = xs[0].copy()
            for x in xs[1:]:
                out = (out * x).astype(dt)
        elif op == "max":
            out = np.maximum.reduce(xs)
        elif op == "min":
            out = np.minimum.reduce(xs)
        elif dt.kind == "f":  # avg: each input times 1/n, then summed
            scale = dt.type(1.0 / len(xs))
            out = xs[0] * scale
            for x in xs[1:]:
                out = (out + x * scale).astype(dt)
        else:  # avg on integers: the wrapped sum divided by n, truncating toward zero
            s = expected(xs, "sum", dt)
            n = len(xs)
            out = np.array([v // n if v >= 0 else -((-v) // n) for v in s.tolist()], dtype=dt)
    return out.astype(dt)


class CommWorld(unittest.TestCase):
    """NRANKS communicators of this process (strataCommInitAll), shared by the tests."""

    comms = None

    @classmethod
    def setUpClass(cls):
        cls.comms = strata.Communicator.init_all(NRANKS)

    @classmethod
    def tearDownClass(cls):
        for c in cls.comms:
            c.destroy()

    def grouped(self, fn):
        """fn(rank, comm) for every rank inside one group; returns their results."""
        with strata.group():
            return [fn(r, c) for r, c in enumerate(self.comms)]


class TestAllReduce(CommWorld):
    def test_every_numpy_dtype_and_op(self):
        rng = np.random.default_rng(1)
        for dtype in NUMPY_TYPES:
            for op in OPS:
                with self.subTest(dtype=np.dtype(dtype).name, op=op):
                    xs = inputs(dtype, NRANKS, 257, op, rng)
                    want = expected(xs, op, dtype)
                    outs = [np.empty_like(x) for x in xs]
                    got = self.grouped(lambda r, c: c.all_reduce(xs[r], outs[r], op=op))
                    for r in range(NRANKS):
                        self.assertIs(got[r], outs[r])
                        self.assertEqual(outs[r].dtype, np.dtype(dtype))
                        np.testing.assert_array_equal(outs[r], want)
                        # bitwise identical on every rank
                        self.assertEqual(outs[r].tobytes(), outs[0].tobytes())

    def test_bfloat16_every_op(self):
        rng = np.random.default_rng(2)
        for op in OPS:
            with self.subTest(op=op):
                xs = inputs(np.float32, NRANKS, 131, op, rng)
                ts = [torch.from_numpy(x).to(torch.bfloat16) for x in xs]
                # inputs are exact in bfloat16 and so is the result: compare with fp32 numpy
                want = expected([t.float().numpy() for t in ts], op, np.float32)
                self.grouped(lambda r, c: c.all_reduce(ts[r], op=op))
                for t in ts:
                    self.assertEqual(t.dtype, torch.bfloat16)
                    np.testing.assert_array_equal(t.float().numpy(), want)

    def test_every_torch_dtype(self):
        rng = np.random.default_rng(3)
        pairs = [(torch.int8, np.int8), (torch.uint8, np.uint8), (torch.int32, np.int32),
                 (torch.int64, np.int64), (torch.float16, np.float16),
                 (torch.float32, np.float32), (torch.float64, np.float64)]
        for tdt, ndt in pairs:
            for op in ("sum", "max", "avg"):
                with self.subTest(dtype=str(tdt), op=op):
                    xs = inputs(ndt, NRANKS, 64, op, rng)
                    want = expected(xs, op, ndt)
                    ts = [torch.from_numpy(x.copy()).reshape(8, 8) for x in xs]
                    self.assertEqual(ts[0].dtype, tdt)
                    self.grouped(lambda r, c: c.all_reduce(ts[r], op=op))  # in place
                    for t in ts:
                        np.testing.assert_array_equal(t.numpy().ravel(), want)

    def test_fp16_avg_does_not_overflow(self):
        # avg scales each input by 1/nranks before summing: the mean of 57344 (fits in fp16,
        # max 65504) stays exact where the sum overflows to inf.
        big = 57344.0
        xs = [np.full(8, big, dtype=np.float16) for _ in range(NRANKS)]
        ys = [x.copy() for x in xs]
        self.grouped(lambda r, c: c.all_reduce(xs[r], op="avg"))
        self.grouped(lambda r, c: c.all_reduce(ys[r], op="sum"))
        for x, y in zip(xs, ys):
            np.testing.assert_array_equal(x, np.full(8, big, dtype=np.float16))
            self.assertTrue(np.all(np.isinf(y)))

    def test_nan_propagates_through_max(self):
        xs = [np.arange(6, dtype=np.float32) for _ in range(NRANKS)]
        xs[2][3] = np.nan
        self.grouped(lambda r, c: c.all_reduce(xs[r], op="max"))
        for x in xs:
            self.assertTrue(np.isnan(x[3]))
            np.testing.assert_array_equal(np.delete(x, 3), [0, 1, 2, 4, 5])

    def test_premul_sum(self):
        xs = [np.full(10, r + 1, dtype=np.float32) for r in range(NRANKS)]
        ops = [c.premul_sum(0.5 * (r + 1), "float32") for r, c in enumerate(self.comms)]
        try:
            self.grouped(lambda r, c: c.all_reduce(xs[r], op=ops[r]))
        finally:
            for c, op in zip(self.comms, ops):
                c.destroy_op(op)
        want = sum(0.5 * (r + 1) * (r + 1) for r in range(NRANKS))
        for x in xs:
            np.testing.assert_array_equal(x, np.full(10, want, dtype=np.float32))

    def test_zero_count(self):
        xs = [np.empty(0, dtype=np.float32) for _ in range(NRANKS)]
        got = self.grouped(lambda r, c: c.all_reduce(xs[r]))
        self.assertEqual([g.size for g in got], [0] * NRANKS)


class TestCollectives(CommWorld):
    def test_broadcast(self):
        for root in (0, 2):
            with self.subTest(root=root, mode="in place"):
                xs = [np.full((3, 5), r, dtype=np.int64) for r in range(NRANKS)]
                self.grouped(lambda r, c: c.broadcast(xs[r], root=root))
                for x in xs:
                    np.testing.assert_array_equal(x, np.full((3, 5), root))
            with self.subTest(root=root, mode="out of place, no sendbuf off root"):
                src = torch.arange(15, dtype=torch.float16)
                outs = [torch.zeros(15, dtype=torch.float16) for _ in range(NRANKS)]
                self.grouped(lambda r, c: c.broadcast(src if r == root else None, outs[r],
                                                      root=root))
                for o in outs:
                    self.assertTrue(torch.equal(o, src))

    def test_reduce(self):
        rng = np.random.default_rng(4)
        root = 1
        xs = [rng.integers(-100, 100, 33).astype(np.int32) for _ in range(NRANKS)]
        before = [x.copy() for x in xs]
        outs = [np.zeros(33, np.int32) if r == root else None for r in range(NRANKS)]
        got = self.grouped(lambda r, c: c.reduce(xs[r], outs[r], op="sum", root=root))
        np.testing.assert_array_equal(outs[root], np.sum(before, axis=0))
        self.assertIs(got[root], outs[root])
        self.assertEqual([g is None for g in got], [r != root for r in range(NRANKS)])
        for x, b in zip(xs, before):
            np.testing.assert_array_equal(x, b)  # send buffers untouched
        # in place on root
        self.grouped(lambda r, c: c.reduce(xs[r], op="max", root=root))
        np.testing.assert_array_equal(xs[root], np.max(before, axis=0))
        np.testing.assert_array_equal(xs[0], before[0])

    def test_all_gather(self):
        xs = [np.full((2, 3), r, dtype=np.uint32) for r in range(NRANKS)]
        got = self.grouped(lambda r, c: c.all_gather(xs[r]))
        want = np.stack([np.full((2, 3), r, dtype=np.uint32) for r in range(NRANKS)])
        for g in got:
            self.assertEqual(g.shape, (NRANKS, 2, 3))
            np.testing.assert_array_equal(g, want)
        # in place: each rank's block of its own recvbuf is its sendbuf
        bufs = [torch.zeros(NRANKS * 4, dtype=torch.bfloat16) for _ in range(NRANKS)]
        for r, b in enumerate(bufs):
            b[r * 4:(r + 1) * 4] = r + 0.5
        self.grouped(lambda r, c: c.all_gather(bufs[r][r * 4:(r + 1) * 4], bufs[r]))
        want_t = torch.arange(NRANKS, dtype=torch.float32).repeat_interleave(4) + 0.5
        for b in bufs:
            self.assertTrue(torch.equal(b.float(), want_t))

    def test_reduce_scatter(self):
        rng = np.random.default_rng(5)
        xs = [(rng.integers(-50, 50, (NRANKS, 6)) / 2).astype(np.float64) for _ in range(NRANKS)]
        got = self.grouped(lambda r, c: c.reduce_scatter(xs[r], op="sum"))
        total = np.sum(xs, axis=0)
        for r, g in enumerate(got):
            self.assertEqual(g.shape, (6,))
            np.testing.assert_array_equal(g, total[r])
        outs = [np.empty(6, np.float64) for _ in range(NRANKS)]
        self.grouped(lambda r, c: c.reduce_scatter(xs[r].ravel(), outs[r], op="min"))
        for r, o in enumerate(outs):
            np.testing.assert_array_equal(o, np.min(xs, axis=0)[r])

    def test_alltoall(self):
        # element k of the block rank s sends to rank d is 100*s + 10*d + k
        def block(src, dst, n, dtype):
            return (100 * src + 10 * dst + np.arange(n)).astype(dtype)

        for dtype in (np.int32, np.uint8, np.float64):
            with self.subTest(dtype=np.dtype(dtype).name, recvbuf="new"):
                xs = [np.stack([block(r, d, 3, dtype) for d in range(NRANKS)])
                      for r in range(NRANKS)]
                before = [x.copy() for x in xs]
                got = self.grouped(lambda r, c: c.alltoall(xs[r]))
                for r, g in enumerate(got):
                    self.assertEqual((g.shape, g.dtype), ((NRANKS, 3), np.dtype(dtype)))
                    for src in range(NRANKS):
                        np.testing.assert_array_equal(g[src], block(src, r, 3, dtype))
                for x, b in zip(xs, before):
                    np.testing.assert_array_equal(x, b)  # send buffers untouched
        with self.subTest(dtype="torch.bfloat16", recvbuf="given, flat"):
            # 32*s + 8*d + k stays below 256: exact in bfloat16's 8 significant bits
            def bblock(src, dst):
                return (32 * src + 8 * dst + np.arange(5)).astype(np.float32)

            ts = [torch.cat([torch.from_numpy(bblock(r, d)) for d in range(NRANKS)])
                  .to(torch.bfloat16) for r in range(NRANKS)]
            outs = [torch.zeros(NRANKS * 5, dtype=torch.bfloat16) for _ in range(NRANKS)]
            got = self.grouped(lambda r, c: c.alltoall(ts[r], outs[r]))
            for r in range(NRANKS):
                self.assertIs(got[r], outs[r])
                want = np.concatenate([bblock(s, r) for s in range(NRANKS)])
                np.testing.assert_array_equal(outs[r].float().numpy(), want)
        with self.subTest(count=0):
            got = self.grouped(lambda r, c: c.alltoall(np.empty(0, np.float32)))
            self.assertEqual([g.size for g in got], [0] * NRANKS)

    def test_alltoallv(self):
        # rank s sends (s + 2d) % 3 elements to rank d (zeros included); element k of that block
        # is 1000*s + 100*d + k
        def cnt(src, dst):
            return (src + 2 * dst) % 3

        def block(src, dst):
            return 1000 * src + 100 * dst + np.arange(cnt(src, dst), dtype=np.int64)

        sendcounts = [[cnt(r, d) for d in range(NRANKS)] for r in range(NRANKS)]
        recvcounts = [[cnt(s, r) for s in range(NRANKS)] for r in range(NRANKS)]
        with self.subTest(displs="packed"):
            xs = [np.concatenate([block(r, d) for d in range(NRANKS)]) for r in range(NRANKS)]
            got = self.grouped(lambda r, c: c.alltoallv(xs[r], sendcounts[r], recvcounts[r]))
            for r, g in enumerate(got):
                self.assertEqual(g.dtype, np.int64)
                np.testing.assert_array_equal(
                    g, np.concatenate([block(s, r) for s in range(NRANKS)]))
        with self.subTest(displs="explicit: reversed, with gaps, float32 torch"):
            # send blocks in reverse rank order at stride 4; receive blocks at stride 5 from
            # element 2, so the gaps between them must keep their -1
            sd = [4 * (NRANKS - 1 - d) for d in range(NRANKS)]
            rd = [2 + 5 * s for s in range(NRANKS)]
            xs = [torch.full((4 * NRANKS,), -7.0) for _ in range(NRANKS)]
            for r in range(NRANKS):
                for d in range(NRANKS):
                    xs[r][sd[d]:sd[d] + cnt(r, d)] = torch.from_numpy(block(r, d).astype(
                        np.float32))
            outs = [torch.full((5 * NRANKS + 2,), -1.0) for _ in range(NRANKS)]
            got = self.grouped(lambda r, c: c.alltoallv(
                xs[r], np.array(sendcounts[r]), torch.tensor(recvcounts[r]), outs[r],
                sdispls=sd, rdispls=tuple(rd)))
            for r in range(NRANKS):
                self.assertIs(got[r], outs[r])
                want = np.full(5 * NRANKS + 2, -1.0, np.float32)
                for s in range(NRANKS):
                    want[rd[s]:rd[s] + cnt(s, r)] = block(s, r)
                np.testing.assert_array_equal(outs[r].numpy(), want)
        with self.subTest(displs="all counts zero"):
            zeros = [0] * NRANKS
            got = self.grouped(lambda r, c: c.alltoallv(np.empty(0, np.int8), zeros, zeros))
            self.assertEqual([g.size for g in got], [0] * NRANKS)

    def test_gather(self):
        for root in (0, 2):
            with self.subTest(root=root, recvbuf="new"):
                xs = [np.full((2, 3), 10 * r + 1, dtype=np.int32)
                      for r in range(NRANKS)]
                got = self.grouped(lambda r, c: c.gather(xs[r], root=root))
                want = np.stack([np.full((2, 3), 10 * r + 1, np.int32) for r in range(NRANKS)])
                for r, g in enumerate(got):
                    if r == root:
                        self.assertEqual(g.shape, (NRANKS, 2, 3))
                        np.testing.assert_array_equal(g, want)
                    else:
                        self.assertIsNone(g)
            with self.subTest(root=root, recvbuf="in place on root, torch"):
                outs = [torch.full((NRANKS * 4,), -1.0, dtype=torch.float16)
                        for _ in range(NRANKS)]
                for r, o in enumerate(outs):
                    o[r * 4:(r + 1) * 4] = torch.arange(4) + 0.5 * r
                before = [o.clone() for o in outs]
                # every rank sends its own block of its recvbuf (nccl-tests' in-place layout);
                # only root's recvbuf is written
                got = self.grouped(lambda r, c: c.gather(outs[r][r * 4:(r + 1) * 4], outs[r],
                                                         root=root))
                want = torch.cat([torch.arange(4) + 0.5 * r for r in range(NRANKS)])
                self.assertTrue(torch.equal(outs[root].float(), want))
                self.assertIs(got[root], outs[root])
                for r in range(NRANKS):
                    if r != root:
                        self.assertTrue(torch.equal(outs[r], before[r]))

    def test_scatter(self):
        for root in (1, 3):
            with self.subTest(root=root, sendbuf="only on root"):
                src = np.arange(NRANKS * 6, dtype=np.float32).reshape(NRANKS, 6) - 7.5
                got = self.grouped(lambda r, c: c.scatter(
                    src if r == root else None, None if r == root else np.zeros(6, np.float32),
                    root=root))
                for r, g in enumerate(got):
                    self.assertEqual(g.shape, (6,))
                    np.testing.assert_array_equal(g, src[r])
            with self.subTest(root=root, sendbuf="in place on root, torch int64"):
                bufs = [torch.full((NRANKS * 3,), -1, dtype=torch.int64) for _ in range(NRANKS)]
                bufs[root] = torch.arange(NRANKS * 3) * 7
                want = bufs[root].clone()
                self.grouped(lambda r, c: c.scatter(bufs[r], bufs[r][r * 3:(r + 1) * 3],
                                                    root=root))
                self.assertTrue(torch.equal(bufs[root], want))  # root's own block is in place
                for r in range(NRANKS):
                    self.assertTrue(torch.equal(bufs[r][r * 3:(r + 1) * 3],
                                                want[r * 3:(r + 1) * 3]))

    def test_send_recv_ring(self):
        sends = [np.full(7, 10 * r, dtype=np.int8) for r in range(NRANKS)]
        recvs = [np.zeros(7, dtype=np.int8) for _ in range(NRANKS)]
        with strata.group():
            for r, c in enumerate(self.comms):
                c.send(sends[r], (r + 1) % NRANKS)
                c.recv(recvs[r], (r - 1) % NRANKS)
        for r in range(NRANKS):
            np.testing.assert_array_equal(recvs[r], sends[(r - 1) % NRANKS])

    def test_threads_drive_their_own_communicator(self):
        xs = [np.full(1000, r, dtype=np.float32) for r in range(NRANKS)]
        run_ranks(lambda r: self.comms[r].all_reduce(xs[r], op="avg"), NRANKS)
        for x in xs:
            np.testing.assert_array_equal(x, np.full(1000, 1.5, dtype=np.float32))


class TestStreams(CommWorld):
    def test_requests_complete_in_order(self):
        streams = [strata.Stream() for _ in range(NRANKS)]
        try:
            xs = [[np.full(4096, r + k, dtype=np.float32) for k in range(3)]
                  for r in range(NRANKS)]
            reqs = [[None] * 3 for _ in range(NRANKS)]
            for k in range(3):
                with strata.group():
                    for r, c in enumerate(self.comms):
                        reqs[r][k] = c.all_reduce(xs[r][k], stream=streams[r])
            for r in range(NRANKS):
                for k in range(3):
                    self.assertIsInstance(reqs[r][k], strata.Request)
                    out = reqs[r][k].wait(timeout=60)
                    self.assertIs(out, xs[r][k])
                    self.assertTrue(reqs[r][k].done())
                    self.assertIsNone(reqs[r][k].exception())
                    want = sum(q + k for q in range(NRANKS))
                    np.testing.assert_array_equal(out, np.full(4096, want, dtype=np.float32))
                self.assertTrue(streams[r].query())
                streams[r].synchronize()
        finally:
            for s in streams:
                s.destroy()

    def test_done_callback_from_watcher(self):
        streams = [strata.Stream() for _ in range(NRANKS)]
        try:
            ts = [torch.full((256,), float(r)) for r in range(NRANKS)]
            fired = []
            lock = threading.Lock()
            event = threading.Event()

            def cb(req):
                with lock:
                    fired.append((threading.current_thread().name, req.wait().sum().item()))
                    if len(fired) == NRANKS:
                        event.set()

            with strata.group():
                reqs = [c.all_reduce(ts[r], op="max", stream=streams[r])
                        for r, c in enumerate(self.comms)]
            for req in reqs:
                req.add_done_callback(cb)
            self.assertTrue(event.wait(60), "callbacks fired: %r" % fired)
            self.assertEqual(sorted(v for _, v in fired), [256.0 * (NRANKS - 1)] * NRANKS)
            # a callback added after completion runs at once, in this thread
            late = []
            reqs[0].add_done_callback(lambda req: late.append(threading.current_thread()))
            self.assertEqual(late, [threading.current_thread()])
        finally:
            for s in streams:
                s.destroy()

    def test_request_in_open_group_cannot_wait(self):
        s = strata.Stream()
        try:
            xs = [np.ones(4, np.float32) for _ in range(NRANKS)]
            with strata.group():
                reqs = [c.all_reduce(xs[r], stream=s) for r, c in enumerate(self.comms)]
                with self.assertRaises(strata.StrataError) as cm:
                    reqs[0].wait()
                self.assertEqual(cm.exception.result, Result.INVALID_USAGE)
            for req in reqs:
                np.testing.assert_array_equal(req.wait(60), np.full(4, NRANKS, np.float32))
        finally:
            s.destroy()

    def test_new_collectives_on_a_stream(self):
        streams = [strata.Stream() for _ in range(NRANKS)]
        try:
            xs = [np.arange(NRANKS * 2, dtype=np.int64) + 100 * r for r in range(NRANKS)]
            with strata.group():
                a2a = [c.alltoall(xs[r], stream=streams[r]) for r, c in enumerate(self.comms)]
            with strata.group():
                gat = [c.gather(xs[r][:2], root=1, stream=streams[r])
                       for r, c in enumerate(self.comms)]
            with strata.group():
                sca = [c.scatter(xs[r], root=2, stream=streams[r])
                       for r, c in enumerate(self.comms)]
            for r in range(NRANKS):
                got = a2a[r].wait(timeout=60)
                want = np.concatenate([100 * s + np.arange(2 * r, 2 * r + 2)
                                       for s in range(NRANKS)])
                np.testing.assert_array_equal(got, want)
                g = gat[r].wait(timeout=60)
                if r == 1:
                    np.testing.assert_array_equal(
                        g, np.stack([np.arange(2) + 100 * s for s in range(NRANKS)]))
                else:
                    self.assertIsNone(g)
                np.testing.assert_array_equal(sca[r].wait(timeout=60),
                                              np.arange(2 * r, 2 * r + 2) + 200)
        finally:
            for s in streams:
                s.destroy()

    def test_destroyed_stream(self):
        s = strata.Stream()
        s.destroy()
        s.destroy()  # a no-op
        with self.assertRaises(strata.ClosedError) as cm:
            self.comms[0].all_reduce(np.ones(3, np.float32), stream=s)
        self.assertEqual(cm.exception.result, Result.INVALID_USAGE)
        with self.assertRaises(strata.ClosedError):
            s.synchronize()


class FakeBucket:
    def __init__(self, t):
        self.t = t

    def buffer(self):
        return self.t


class TestDDPHook(CommWorld):
    def test_hooks_average(self):
        rng = np.random.default_rng(6)
        for name, hook in strata.ddp.HOOKS.items():
            with self.subTest(hook=name):
                states = [strata.ddp.StrataState(comm=c) for c in self.comms]
                try:
                    grads = [torch.from_numpy((rng.integers(-64, 64, 3000) / 8)
                                              .astype(np.float32)) for _ in range(NRANKS)]
                    want = (sum(g.double() for g in grads) / NRANKS).float()
                    bufs = [g.clone() for g in grads]
                    futs = [hook(states[r], FakeBucket(bufs[r])) for r in range(NRANKS)]
                    for r, fut in enumerate(futs):
                        self.assertIsInstance(fut, torch.futures.Future)
                        out = fut.wait()
                        self.assertIs(out, bufs[r])  # in place, same tensor, dtype kept
                        self.assertEqual(out.dtype, torch.float32)
                        self.assertTrue(torch.equal(out, want))  # exact on this grid
                        self.assertTrue(torch.equal(out, futs[0].wait()))
                    wire = {"fp32": 4, "fp16": 2, "bf16": 2}[name]
                    self.assertEqual(states[0].buckets, 1)
                    self.assertEqual(states[0].wire_bytes, 3000 * wire)
                finally:
                    for s in states:
                        s.close()
                self.assertFalse(self.comms[0].closed)  # the state did not own it

    def test_hook_error_goes_to_future(self):
        state = strata.ddp.StrataState(comm=self.comms[0])
        state.close()
        with self.assertRaises(TypeError):  # DDP must not pickle it
            import pickle
            pickle.dumps(state)
        state2 = strata.ddp.StrataState(comm=self.comms[0])
        state2.stream.destroy()
        fut = strata.ddp.allreduce_hook(state2, FakeBucket(torch.ones(4)))
        with self.assertRaises(Exception) as cm:
            fut.wait()
        self.assertIn("destroyed", str(cm.exception))
        state2.close()
        fut = strata.ddp.fp16_compress_hook(state2, FakeBucket(torch.ones(4)))
        with self.assertRaises(Exception) as cm:
            fut.wait()
        self.assertIn("closed", str(cm.exception))


class TestDDPProcessGroup(unittest.TestCase):
    """strata.ddp with a real torch.distributed group and a real DDP model."""

    def test_one_rank_ddp_step_with_every_hook(self):
        import tempfile
        import torch.distributed as dist
        from torch.nn.parallel import DistributedDataParallel as DDP

        def net():
            torch.manual_seed(0)
            return torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(),
                                       torch.nn.Linear(16, 4))

        with tempfile.TemporaryDirectory() as tmp:
            dist.init_process_group("gloo", init_method="file://" + os.path.join(tmp, "store"),
                                    rank=0, world_size=1)
            try:
                state = strata.ddp.StrataState()
                self.assertEqual((state.comm.size, state.comm.rank), (1, 0))
                x, y = torch.randn(5, 8), torch.randn(5, 4)
                plain = net()
                torch.nn.functional.mse_loss(plain(x), y).backward()
                for name, hook in strata.ddp.HOOKS.items():
                    with self.subTest(hook=name):
                        module = net()
                        model = DDP(module)
                        # DDP checks hooks by name and signature: every hook must pass it
                        model.register_comm_hook(state, hook)
                        before = state.buckets
                        torch.nn.functional.mse_loss(model(x), y).backward()
                        self.assertGreaterEqual(state.buckets, before + 1)
                        # one rank: the average is the gradient (rounded on the wire for 16 bits)
                        for p, q in zip(module.parameters(), plain.parameters()):
                            if name == "fp32":
                                self.assertTrue(torch.equal(p.grad, q.grad))
                            else:
                                wire = torch.float16 if name == "fp16" else torch.bfloat16
                                self.assertTrue(torch.equal(p.grad, q.grad.to(wire).float()))
                state.close()
                self.assertTrue(state.stream is None and state.comm is None)
            finally:
                dist.destroy_process_group()

    def test_rank0_without_unique_id_fails_every_rank(self):
        import tempfile
        code = """if 1:
            import os, sys, torch.distributed as dist, strata, strata.ddp
            r = int(sys.argv[1])
            dist.init_process_group("gloo", init_method="file://" + sys.argv[2], rank=r,
                                    world_size=2)
            try:
                strata.ddp.StrataState()
            except strata.StrataError as e:
                print("rank %d: %s %s" % (r, e.result.name, e))
                sys.exit(3)
            sys.exit(0)
        """
        with tempfile.TemporaryDirectory() as tmp:
            env = dict(os.environ, STRATA_SOCKET_IFNAME="=nosuchif0", STRATA_DEBUG="NONE")
            procs = [subprocess.Popen([sys.executable, "-c", code, str(r),
                                       os.path.join(tmp, "store")], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                      text=True) for r in range(2)]
            outs = []
            for p in procs:
                try:
                    outs.append(p.communicate(timeout=120)[0])
                except subprocess.TimeoutExpired:
                    for q in procs:
                        q.kill()
                    self.fail("a rank hung: rank 0's failure did not reach it")
            self.assertEqual([p.returncode for p in procs], [3, 3], outs)
            self.assertIn("rank 0: INVALID_USAGE", outs[0])
            self.assertIn("nosuchif0", outs[0])
            self.assertIn("rank 1: INVALID_USAGE", outs[1])
            self.assertIn("could not make a strata unique id", outs[1])


class TestInitAndSplit(unittest.TestCase):
    def test_unique_id_in_threads_split_and_abort(self):
        uid = strata.UniqueId.new()
        data = bytes(uid)
        self.assertEqual(len(data), strata.UNIQUE_ID_BYTES)
        self.assertEqual(strata.UniqueId(data), uid)
        self.assertNotIn(data.hex()[:16], repr(uid))

        def rank(r):
            comm = strata.Communicator(3, strata.UniqueId(data), r, timeout=60, name="pytest")
            self.assertEqual((comm.rank, comm.size), (r, 3))
            node, nnodes, lr, ls = comm.topo_rank()
            self.assertEqual((nnodes, lr, ls), (1, r, 3))
            x = np.full(5, r + 1, dtype=np.int64)
            comm.all_reduce(x)
            sub = comm.split(r % 2, key=-r)
            none = comm.split(strata.SPLIT_NOCOLOR if r == 1 else 0)
            if r == 1:
                self.assertIsNone(none)
            else:
                self.assertEqual(none.size, 2)
                none.destroy()
            y = np.array([r], dtype=np.int32)
            sub.all_gather(y, out := np.zeros(sub.size, np.int32))
            res = (x.tolist(), sub.rank, sub.size, out.tolist(), comm.phase_times()["algorithm"])
            sub.destroy()
            if r == 2:
                comm.abort()
            else:
                comm.destroy()
            self.assertTrue(comm.closed)
            return res

        res = run_ranks(rank, 3)
        for r, (x, srank, ssize, gathered, algo) in enumerate(res):
            self.assertEqual(x, [6] * 5)
            self.assertIn(algo, ("hier", "ring", "small", "chain"))
        # color 0: ranks 0 and 2, ordered by key -r: rank 2 first
        self.assertEqual([res[0][1:4], res[2][1:4]], [(1, 2, [2, 0]), (0, 2, [2, 0])])
        self.assertEqual(res[1][1:4], (0, 1, [1]))

    def test_timeout_names_the_peer(self):
        data = bytes(strata.UniqueId.new())
        comms = run_ranks(lambda r: strata.Communicator(2, strata.UniqueId(data), r,
                                                        timeout=1.0), 2)
        try:
            with self.assertRaises(strata.StrataError) as cm:
                comms[0].all_reduce(np.ones(8, np.float32))  # rank 1 never calls it
            e = cm.exception
            self.assertEqual(e.result, Result.TIMEOUT)
            self.assertEqual(e.function, "strataAllReduce")
            self.assertIn("rank 1", e.message)
            self.assertIn("strataTimeout", str(e))
            # the communicator failed: later calls are refused by the library
            with self.assertRaises(strata.StrataError) as cm2:
                comms[0].all_reduce(np.ones(8, np.float32))
            self.assertEqual(cm2.exception.result, Result.INVALID_USAGE)
            self.assertIn("failed earlier", cm2.exception.message)
            self.assertEqual(comms[0].async_error(), Result.TIMEOUT)
            self.assertEqual(comms[1].async_error(), Result.SUCCESS)
        finally:
            for c in comms:
                c.abort()

    def test_stream_timeout_reaches_request_and_synchronize(self):
        data = bytes(strata.UniqueId.new())
        comms = run_ranks(lambda r: strata.Communicator(2, strata.UniqueId(data), r,
                                                        timeout=1.0), 2)
        stream = strata.Stream()
        try:
            req = comms[0].all_reduce(np.ones(8, np.float32), stream=stream)
            with self.assertRaises(strata.StrataError) as cm:
                req.wait(timeout=30)
            self.assertEqual(cm.exception.result, Result.TIMEOUT)
            self.assertIn(cm.exception.function, ("strataStreamSynchronize", "strataStreamQuery"))
            self.assertIn("waiting for rank 1", cm.exception.message)
            self.assertIs(req.exception(), cm.exception)
            with self.assertRaises(strata.StrataError) as cm2:  # first error since last sync
                stream.synchronize()
            self.assertIs(cm2.exception, cm.exception)
            stream.synchronize()  # reported once
            self.assertTrue(stream.query())
        finally:
            stream.destroy()
            for c in comms:
                c.abort()


class TestErrors(CommWorld):
    def check(self, exc_type, result, fn, *args, **kwargs):
        with self.assertRaises(exc_type) as cm:
            fn(*args, **kwargs)
        self.assertIsInstance(cm.exception, strata.StrataError)
        self.assertEqual(cm.exception.result, result)
        self.assertTrue(cm.exception.message)
        return cm.exception

    def test_unsupported_dtypes(self):
        c = self.comms[0]
        bad = [np.zeros(4, np.bool_), np.zeros(4, np.int16), np.zeros(4, np.complex64),
               np.zeros(4, np.dtype(">f4")), np.array([1, "a"], dtype=object),
               torch.zeros(4, dtype=torch.bool), torch.zeros(4, dtype=torch.complex64),
               torch.zeros(4, dtype=torch.int16), [1.0, 2.0], 3.0]
        for b in bad:
            with self.subTest(buf=repr(getattr(b, "dtype", type(b)))):
                e = self.check(TypeError, Result.INVALID_ARGUMENT, c.all_reduce, b)
                self.assertIn("sendbuf", e.message)
                self.assertEqual(e.function, "strataAllReduce")
        e = self.check(TypeError, Result.INVALID_ARGUMENT, c.all_reduce, np.zeros(4, np.int16))
        self.assertIn("int16", str(e))
        self.check(TypeError, Result.INVALID_ARGUMENT, strata.as_datatype, "int16")
        self.check(TypeError, Result.INVALID_ARGUMENT, strata.as_datatype, torch.bool)
        self.assertEqual(strata.as_datatype(torch.bfloat16), DataType.BFLOAT16)
        self.assertEqual(strata.as_datatype(np.uint64), DataType.UINT64)
        self.assertEqual(strata.as_datatype("half"), DataType.FLOAT16)

    def test_bad_enum_values(self):
        """op and dtype outside their values: ValueError naming the argument and the allowed
        values, raised in Python (a C call would fail with StrataError and a last-error line)."""
        c = self.comms[0]
        x = np.ones(4, np.float32)
        for op in (99, -1, 5, "xor"):
            with self.subTest(op=op):
                e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, x, op=op)
                self.assertIn("op %r is not a reduction op" % op if isinstance(op, str)
                              else "op %d is not a reduction op" % op, e.message)
                self.assertIn("sum, prod, max, min, avg (strata.RedOp 0..4) or a handle from "
                              "premul_sum", e.message)
                self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce, x, op=op)
                self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce_scatter,
                           np.ones(4 * NRANKS, np.float32), op=op)
        # a premul_sum handle is an op until destroyed, and only on its communicator
        op = c.premul_sum(2.0, "float32")
        try:
            if NRANKS > 1:
                e = self.check(ValueError, Result.INVALID_ARGUMENT, self.comms[1].all_reduce, x,
                               op=op)
                self.assertIn("op %d is not a reduction op" % op, e.message)
        finally:
            c.destroy_op(op)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, x, op=op)
        # dtype: an int that is no DataType
        e = self.check(ValueError, Result.INVALID_ARGUMENT, strata.as_datatype, 99)
        self.assertIn("dtype 99 is not a strata.DataType: 0..9 (int8, uint8", e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.premul_sum, 1.0, 99)
        # root and peer outside [0, nranks)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.broadcast, x, root=-1)
        self.assertIn("root -1 is outside [0, %d)" % NRANKS, e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce, x, root=NRANKS)

    def test_bad_buffers(self):
        c = self.comms[0]
        a = np.zeros((4, 4), np.float32)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, a[:, 1])
        self.assertIn("contiguous", e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, torch.zeros(4, 4).t())
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, torch.zeros(8)[::2])
        ro = np.zeros(4, np.float32)
        ro.flags.writeable = False
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, ro)
        self.assertIn("read-only", e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, np.ones(4, np.float32), ro)
        meta = torch.empty(4, device="meta")
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, meta)
        self.assertIn("CPU tensor", e.message)
        if torch.cuda.is_available():
            e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce,
                           torch.zeros(4, device="cuda"))
            self.assertIn("cuda", e.message)

    def test_mismatched_sizes_and_types(self):
        c = self.comms[0]
        f4 = np.zeros(10, np.float32)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, f4,
                       np.zeros(9, np.float32))
        self.assertIn("same count", e.message)
        self.check(TypeError, Result.INVALID_ARGUMENT, c.all_reduce, f4, np.zeros(10, np.float64))
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_gather, f4,
                   np.zeros(10 * NRANKS - 1, np.float32))
        self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce_scatter, f4)  # 10 % 4
        self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce_scatter, np.zeros(8, np.float32),
                   np.zeros(3, np.float32))
        self.check(ValueError, Result.INVALID_ARGUMENT, c.broadcast, f4, np.zeros(11, np.float32))
        self.check(ValueError, Result.INVALID_ARGUMENT, c.broadcast, f4, root=NRANKS)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.reduce, f4, root=-1)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.send, f4, NRANKS)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.broadcast, None, f4, root=0)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.all_reduce, f4, op="mean")
        self.check(TypeError, Result.INVALID_ARGUMENT, c.all_reduce, f4, stream=object())

    def test_new_collectives_bad_input(self):
        c = self.comms[0]
        n = NRANKS
        f4 = np.zeros(3 * n, np.float32)
        # alltoall
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoall, np.zeros(3 * n + 1))
        self.assertIn("not a multiple of the %d ranks" % n, e.message)
        self.assertEqual(e.function, "strataAlltoAll")
        self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoall, f4, np.zeros(3 * n - 1,
                                                                                 np.float32))
        self.check(TypeError, Result.INVALID_ARGUMENT, c.alltoall, f4, np.zeros(3 * n, np.int32))
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoall, f4, f4)
        self.assertIn("never in place", e.message)
        big = np.zeros(4 * n, np.float32)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoall, big[:2 * n], big[n:3 * n])
        self.check(TypeError, Result.INVALID_ARGUMENT, c.alltoall, [1.0] * n)
        # alltoallv: the sequences
        ones, zeros = [1] * n, [0] * n
        x = np.zeros(n, np.int32)
        for bad, exc, text in (([1] * (n - 1), ValueError, "has %d entries" % (n - 1)),
                               ([1] * (n - 1) + [-1], ValueError, "sendcounts[%d] is -1" % (n - 1)),
                               ([1.0] * n, TypeError, "sendcounts[0] must be an int, not float"),
                               ([True] * n, TypeError, "must be an int, not bool"),
                               (None, TypeError, "must be a sequence"),
                               (5, TypeError, "must be a sequence"),
                               ("1111", TypeError, "must be a sequence"),
                               (np.ones((2, 2), np.int64), ValueError, "must be 1-D")):
            with self.subTest(sendcounts=repr(bad)):
                e = self.check(exc, Result.INVALID_ARGUMENT, c.alltoallv, x, bad, ones)
                self.assertIn(text, e.message)
                self.assertEqual(e.function, "strataAlltoAllv")
        self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoallv, x, ones, ones,
                   sdispls=[0] * (n + 1))
        # blocks outside their buffer
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoallv, x, [2] + [1] * (n - 1),
                       ones)
        self.assertIn("exceeds sendbuf's %d elements" % n, e.message)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoallv, x, ones, ones,
                       np.zeros(n, np.int32), rdispls=[n] * n)
        self.assertIn("rdispls[0] + recvcounts[0] = %d + 1 exceeds recvbuf's %d elements"
                      % (n, n), e.message)
        # overlapping received blocks, and a received block over what is sent
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoallv, x, ones, [2] * n,
                       np.zeros(4 * n, np.int32), rdispls=[0, 1] + [2 * k for k in range(2, n)])
        self.assertIn("from ranks 0 and 1 overlap", e.message)
        buf = np.zeros(2 * n, np.int32)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.alltoallv, buf[:n], ones, ones,
                       buf, rdispls=[n - 1] + [n + k for k in range(1, n)])
        self.assertIn("from rank 0 overlaps what sendbuf sends", e.message)
        # gather and scatter
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.gather, f4, root=n)
        self.assertIn("root %d is outside [0, %d)" % (n, n), e.message)
        self.check(TypeError, Result.INVALID_ARGUMENT, c.gather, f4, root=0.0)
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.gather, f4, np.zeros(3 * n * n - 1,
                                                                                   np.float32))
        self.assertIn("needs %d on root" % (3 * n * n), e.message)
        self.check(TypeError, Result.INVALID_ARGUMENT, c.gather, f4, np.zeros(3 * n * n))
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.scatter, None, np.zeros(3), root=0)
        self.assertIn("sendbuf may be None only on non-root ranks", e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, self.comms[1].scatter, None, None)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.scatter, np.zeros(3 * n + 1, np.float32))
        e = self.check(ValueError, Result.INVALID_ARGUMENT, c.scatter, f4, np.zeros(4, np.float32))
        self.assertIn("needs %d on root" % (4 * n), e.message)
        self.check(ValueError, Result.INVALID_ARGUMENT, c.scatter, f4, root=-1)

    def test_new_collectives_disagreeing_ranks(self):
        """Ranks that disagree fail every rank in the library (strataInvalidUsage), on fresh
        communicators: a failed communicator refuses later calls."""
        for name in ("alltoall", "alltoallv"):
            with self.subTest(call=name):
                comms = strata.Communicator.init_all(2)
                try:
                    if name == "alltoall":
                        xs = [np.zeros(2 * (r + 1), np.float32) for r in range(2)]
                        calls = [lambda r=r: comms[r].alltoall(xs[r]) for r in range(2)]
                    else:
                        # rank 0 sends 2 elements to rank 1, which expects 3 from it
                        xs = [np.zeros(4, np.int32) for _ in range(2)]
                        counts = [([1, 2], [1, 1]), ([1, 1], [3, 1])]
                        calls = [lambda r=r: comms[r].alltoallv(xs[r], *counts[r])
                                 for r in range(2)]
                    with self.assertRaises(strata.StrataError) as cm:
                        with strata.group():
                            for call in calls:
                                call()
                    self.assertEqual(cm.exception.result, Result.INVALID_USAGE)
                    self.assertIn("rank 0", cm.exception.message)
                    if name == "alltoallv":  # both ranks and both counts
                        self.assertIn("sendcounts[1] on rank 0 is 2 but recvcounts[0] on rank 1 "
                                      "is 3", cm.exception.message)
                    for comm in comms:
                        self.assertEqual(comm.async_error(), Result.INVALID_USAGE)
                finally:
                    for comm in comms:
                        comm.abort()

    def test_errors_from_the_library(self):
        c = self.comms[0]
        # strata itself rejects this one (an op value is caught in Python before, see
        # test_bad_enum_values): the message is strataGetLastError's
        op = c.premul_sum(2.0, np.float32)
        try:
            e = self.check(strata.StrataError, Result.INVALID_ARGUMENT, c.all_reduce,
                           np.zeros(4, np.float64), op=op)
            self.assertIn("was made for", e.message)
        finally:
            c.destroy_op(op)
        e = self.check(strata.StrataError, Result.INVALID_ARGUMENT, c.destroy_op, op)
        e = self.check(strata.StrataError, Result.INVALID_USAGE, c.send, np.zeros(4, np.int8), 0)
        self.assertIn("itself", e.message)
        self.assertEqual(e.function, "strataSend")

    def test_closed_communicator_and_bad_init(self):
        uid = strata.UniqueId.new()
        self.check(ValueError, Result.INVALID_ARGUMENT, strata.Communicator, 0, uid, 0)
        self.check(ValueError, Result.INVALID_ARGUMENT, strata.Communicator, 2, uid, 2)
        self.check(TypeError, Result.INVALID_ARGUMENT, strata.Communicator, 2.0, uid, 0)
        self.check(ValueError, Result.INVALID_ARGUMENT, strata.UniqueId, b"short")
        comm = strata.Communicator(1, uid, 0)
        x = np.ones(3, np.float32)
        comm.all_reduce(x)
        np.testing.assert_array_equal(x, np.ones(3, np.float32))
        comm.destroy()
        comm.destroy()  # a no-op
        for call in (lambda: comm.all_reduce(x), lambda: comm.split(0), comm.finalize,
                     comm.async_error, lambda: comm.broadcast(x)):
            e = self.check(strata.ClosedError, Result.INVALID_USAGE, call)
            self.assertIn("destroyed", e.message)

    def test_library_errors_name_where_they_looked(self):
        env = dict(os.environ, STRATA_LIBRARY="/nonexistent/libstrata.so")
        p = subprocess.run([sys.executable, "-c", "import strata; strata.get_version()"],
                           env=env, capture_output=True, text=True, timeout=60)
        self.assertNotEqual(p.returncode, 0)
        self.assertIn("OSError", p.stderr)
        self.assertIn("/nonexistent/libstrata.so (STRATA_LIBRARY)", p.stderr)


class TestHeaderAgreement(unittest.TestCase):
    """The binding's constants are include/strata.h's."""

    def test_enums_and_version(self):
        path = os.path.join(TOP, "include", "strata.h")
        with open(path) as f:
            text = f.read()
        values = dict((m.group(1), int(m.group(2)))
                      for m in re.finditer(r"\b(strata[A-Z]\w*)\s*=\s*(\d+)", text))
        pairs = {"strataInt8": DataType.INT8, "strataUint8": DataType.UINT8,
                 "strataInt32": DataType.INT32, "strataUint32": DataType.UINT32,
                 "strataInt64": DataType.INT64, "strataUint64": DataType.UINT64,
                 "strataFloat16": DataType.FLOAT16, "strataFloat32": DataType.FLOAT32,
                 "strataFloat64": DataType.FLOAT64, "strataBfloat16": DataType.BFLOAT16,
                 "strataSum": RedOp.SUM, "strataProd": RedOp.PROD, "strataMax": RedOp.MAX,
                 "strataMin": RedOp.MIN, "strataAvg": RedOp.AVG}
        pairs.update({strata._lib.RESULT_C_NAMES[r]: r for r in Result})
        for name, val in pairs.items():
            self.assertEqual(values.get(name), int(val), name)
        self.assertEqual(values["strataNumTypes"], len(DataType))
        self.assertEqual(values["strataNumOps"], len(RedOp))
        self.assertEqual(values["strataNumResults"], len(Result))
        nb = re.search(r"#define STRATA_UNIQUE_ID_BYTES (\d+)", text)
        self.assertEqual(int(nb.group(1)), strata.UNIQUE_ID_BYTES)
        ver = [int(re.search(r"#define STRATA_%s\s+(\d+)" % k, text).group(1))
               for k in ("MAJOR", "MINOR", "PATCH")]
        self.assertEqual(strata.get_version(), ver[0] * 10000 + ver[1] * 100 + ver[2])
        self.assertTrue(strata.get_error_string(Result.TIMEOUT))

    def test_structs_and_functions(self):
        # The library checks config->size == sizeof(strataConfig_t): a field added to the
        # header must be added to the binding, in order.
        with open(os.path.join(TOP, "include", "strata.h")) as f:
            text = f.read()

        def fields(struct):
            body = re.search(r"typedef struct %s \{(.*?)\}" % struct, text, re.S).group(1)
            body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
            return [re.sub(r"\[.*", "", d.split()[-1].lstrip("*"))
                    for d in body.split(";") if d.strip()]

        self.assertEqual(fields("strataConfig_v1"), [n for n, _ in strata._lib.ConfigC._fields_])
        self.assertEqual(fields("strataPhaseTimes"),
                         [n for n, _ in strata._lib.PhaseTimesC._fields_])
        declared = set(re.findall(r"STRATA_API [^;]*?\b(strata[A-Za-z]+)\(", text))
        self.assertLessEqual(set(strata._lib._PROTOTYPES), declared)
        # everything but the FILE* printers is bound
        self.assertEqual(declared - set(strata._lib._PROTOTYPES),
                         {"strataParamsPrint", "strataCommTopoPrint", "strataTopoFilePrint"})


if __name__ == "__main__":
    unittest.main(verbosity=2)
