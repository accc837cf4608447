#!/usr/bin/python3
"""Tests of the binding's compression (python/strata/compress.py, all_reduce_compressed):
codec specs and compressors, the errors, one node (where the call is an ordinary all-reduce) and
4 ranks on 2 emulated nodes of 2 (where the inter-node phase is compressed).

Two nodes: this file starts itself 4 times (``--worker RANK UID OUT``), rank r with
STRATA_HOSTID=node<r // 2> so strata sees two machines; each worker runs every case on inputs it
derives from (case, rank) and saves its outputs in OUT/rank<r>.npz; the parent derives the same
inputs and checks: bitwise identity across ranks, codec none (and topk at density 1) equal to
all_reduce bit for bit, the codecs' error bounds against the exact sum, avg, in place and a
stream equal to the blocking call, and error feedback over 20 calls of one input.

Run by tests/python/test_compress.sh (make check), which sets STRATA_LIBRARY and PYTHONPATH.
"""

import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
import unittest

import numpy as np

import strata
from strata import Codec, CompressParams, DataType, Result

NODES, PER_NODE = 2, 2
NRANKS = NODES * PER_NODE
TOP = os.environ.get("STRATA_TOP_SRCDIR",
                     os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", ".."))
N = 3001              # elements: no multiple of a block, a rank count or a page
EF_CALLS = 20
# (name, spec, dtype) of the one-call cases, op sum, out of place, a fresh compressor each
CASES = [("none", "none", "float32"), ("fp16", "fp16", "float32"), ("bf16", "bf16", "float32"),
         ("int8", "int8", "float32"), ("int8_64_half", "int8:64", "float16"),
         ("int8_bf16", "int8", "bfloat16"), ("topk", "topk:0.1", "float32"),
         ("topk1", "topk:1", "float32"), ("sign", "sign", "float32")]
EF_SPECS = ["int8", "fp16", "topk:0.25", "sign:16"]
# What one encoding may move an element, relative to its range's max |x| (include/strata.h)
CODEC_EPS = {"fp16": 2.0 ** -11, "bf16": 2.0 ** -8, "int8": 1.0 / 254}
UNIT_ROUNDOFF = {"float32": 2.0 ** -24, "float16": 2.0 ** -11, "bfloat16": 2.0 ** -8}


def case_input(name, rank, n=N):
    """Rank rank's input of case name, float64 (standard normal, rank and case seeded)."""
    seed = sum(ord(ch) * 31 ** i for i, ch in enumerate(name)) % 2**31
    return np.random.default_rng([seed, rank]).standard_normal(n)


def node_partials(xs):
    """Per node, the sum of its ranks' inputs (rank r on node r // PER_NODE)."""
    return [sum(xs[k * PER_NODE:(k + 1) * PER_NODE]) for k in range(NODES)]


def rounded(x, dtype):
    """x (float64) rounded to dtype as the workers hold it, back in float64."""
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(x).to(torch.bfloat16).double().numpy()
    return x.astype(dtype).astype(np.float64)


# ---------------------------------------------------------------------------------------------
# The worker: one rank of the two-node runs
# ---------------------------------------------------------------------------------------------


def to_buffer(x, dtype):
    if dtype == "bfloat16":
        import torch
        return torch.from_numpy(x).to(torch.bfloat16)
    return x.astype(dtype)


def to_numpy(buf):
    if isinstance(buf, np.ndarray):
        return buf.copy()
    return buf.float().numpy().copy()  # bfloat16 -> float32 is exact


def worker(rank, uid_hex, out):
    comm = strata.Communicator(NRANKS, strata.UniqueId(bytes.fromhex(uid_hex)), rank, timeout=60)
    res = {"topo": np.array(list(comm.topo_rank()))}
    for name, spec, dtype in CASES:
        x = to_buffer(case_input(name, rank), dtype)
        y = to_buffer(np.zeros(N), dtype)
        with strata.Compressor(spec, N, dtype) as c:
            got = comm.all_reduce_compressed(x, y, c, op="sum")
            assert got is y
        res[name] = to_numpy(y)
        exact = to_buffer(case_input(name, rank), dtype)
        comm.all_reduce(exact)
        res[name + "_allreduce"] = to_numpy(exact)
    x = case_input("int8", rank).astype(np.float32)
    with strata.Compressor("int8", N, np.float32) as c:
        res["int8_avg"] = comm.all_reduce_compressed(x, np.empty_like(x), c, op="avg")
    with strata.Compressor("int8", N, np.float32) as c:
        inplace = x.copy()
        assert comm.all_reduce_compressed(inplace, compressor=c) is inplace
        res["int8_inplace"] = inplace
    with strata.Stream() as s, strata.Compressor("int8", N, np.float32) as c:
        outs = [np.empty_like(x) for _ in range(3)]
        reqs = [comm.all_reduce_compressed(x, o, c, stream=s) for o in outs]
        for req, o in zip(reqs, outs):
            assert req.wait(60) is o
        res["int8_stream"] = np.stack(outs)
    with strata.Compressor("int8", N, np.float32) as c:
        for k in range(3):
            y = np.empty_like(x)
            comm.all_reduce_compressed(x, y, c)
            res["int8_seq%d" % k] = y
    for spec in EF_SPECS:
        for suffix in ("", ",noef"):
            x = case_input("ef" + spec, rank).astype(np.float32)
            acc = np.zeros(N)
            y = np.empty_like(x)
            with strata.Compressor(spec + suffix, N, np.float32) as c:
                for _ in range(EF_CALLS):
                    comm.all_reduce_compressed(x, y, c)
                    acc += y
            res["ef_%s%s" % (spec, suffix)] = acc
        exact = case_input("ef" + spec, rank).astype(np.float32)
        res["ef_%s_allreduce" % spec] = comm.all_reduce(exact)
    comm.destroy()
    np.savez(os.path.join(out, "rank%d.npz" % rank), **res)


# ---------------------------------------------------------------------------------------------
# Specs and compressors (no communicator)
# ---------------------------------------------------------------------------------------------


class TestSpecs(unittest.TestCase):
    def test_round_trip(self):
        for spec, canon, want in (
                ("none", "none", (Codec.NONE, 1)), ("fp16", "fp16", (Codec.FP16, 1)),
                ("bf16,noef", "bf16,noef", (Codec.BF16, 0)), ("int8", "int8", (Codec.INT8, 1)),
                ("int8:64", "int8:64", (Codec.INT8, 1)), ("int8:256", "int8", (Codec.INT8, 1)),
                ("int8,ef", "int8", (Codec.INT8, 1)), ("topk:0.01", "topk:0.01", (Codec.TOPK, 1)),
                ("topk:1,noef", "topk:1,noef", (Codec.TOPK, 0)), ("sign", "sign", (Codec.SIGN, 1)),
                ("sign:32,noef", "sign:32,noef", (Codec.SIGN, 0)),
                ("fp16,noef", "fp16,noef", (Codec.FP16, 0))):
            with self.subTest(spec=spec):
                p = strata.compress_parse(spec)
                self.assertIsInstance(p, CompressParams)
                self.assertEqual((p.codec, int(p.error_feedback)), want)
                self.assertIsInstance(p.codec, Codec)
                self.assertEqual(p.spec, canon)
                self.assertEqual(strata.compress_format(spec), canon)
                self.assertEqual(strata.compress_parse(p.spec), p)
                with strata.Compressor(spec, 1000, "float32") as c:
                    self.assertEqual(c.params, p)
                    self.assertEqual(c.spec, canon)
                    self.assertEqual((c.count, c.dtype), (1000, DataType.FLOAT32))
        self.assertEqual(strata.compress_parse("topk:0.01").density, 0.01)
        self.assertEqual(strata.compress_parse("sign:32").block, 32)
        self.assertEqual(strata.compress_parse("int8").block, 256)
        self.assertEqual(CompressParams(Codec.INT8, 0.0, 128, False).spec, "int8:128,noef")

    def test_bad_specs(self):
        for spec, why in (("", "expected none"), ("int9", "unknown codec"), ("topk", "density"),
                          ("topk:0", "outside (0, 1]"), ("topk:1.5", "outside (0, 1]"),
                          ("topk:nan", "outside (0, 1]"), ("int8:0", "block"),
                          ("sign:abc", "not a number"), ("fp16:3", "no parameter"),
                          ("int8,foo", "',noef'"), ("int8:12x", "cannot read"),
                          ("int8:%d" % (2**24 + 1), "above 2^24")):
            with self.subTest(spec=spec):
                with self.assertRaises(ValueError) as cm:
                    strata.compress_parse(spec)
                e = cm.exception
                self.assertIsInstance(e, strata.InvalidArgumentError)
                self.assertEqual(e.result, Result.INVALID_ARGUMENT)
                self.assertIn(why, e.message)  # the library's reason
                self.assertEqual(e.function, "strataCompressParse")
                with self.assertRaises(strata.InvalidArgumentError):
                    strata.Compressor(spec, 10, np.float32)
        for bad in (None, 3, b"int8"):
            with self.assertRaises(TypeError):
                strata.compress_parse(bad)
            with self.assertRaises(TypeError):
                strata.Compressor(bad, 10, np.float32)
        with self.assertRaises(ValueError):
            strata.compress_parse("int8\0")
        with self.assertRaises(strata.InvalidArgumentError) as cm:
            CompressParams(Codec.TOPK, 2.0, 256, True).spec
        self.assertIn("density", cm.exception.message)
        with self.assertRaises(strata.InvalidArgumentError):
            CompressParams(17, 0.0, 256, True).spec

    def test_header_agreement(self):
        with open(os.path.join(TOP, "include", "strata.h")) as f:
            text = f.read()
        values = dict((m.group(1), int(m.group(2)))
                      for m in re.finditer(r"\b(strataCodec\w*|strataNumCodecs)\s*=\s*(\d+)", text))
        for codec in Codec:
            self.assertEqual(values["strataCodec" + codec.name.capitalize()], int(codec))
        self.assertEqual(values["strataNumCodecs"], len(Codec))
        body = re.search(r"typedef struct strataCompressParams \{(.*?)\}", text, re.S).group(1)
        body = re.sub(r"/\*.*?\*/", "", body, flags=re.S)
        fields = [d.split()[-1] for d in body.split(";") if d.strip()]
        self.assertEqual(fields, [n for n, _ in strata._lib.CompressParamsC._fields_])

    def test_wire_bytes(self):
        n = 1000
        for spec, dtype, want in (("none", "float32", 4 * n), ("none", "float16", 2 * n),
                                  ("fp16", "float32", 2 * n), ("bf16", "bfloat16", 2 * n),
                                  ("int8", "float32", n + 4 * 4), ("int8:100", "float16",
                                                                   n + 4 * 10),
                                  ("topk:0.01", "float32", 10 * 8), ("topk:0.01", "float16",
                                                                     10 * 6),
                                  ("sign", "float32", n // 8 + 4 * 4)):
            with self.subTest(spec=spec, dtype=dtype):
                self.assertEqual(strata.compress_wire_bytes(spec, n, dtype), want)
                with strata.Compressor(spec, n, dtype) as c:
                    self.assertEqual(c.wire_bytes(), want)
                    self.assertEqual(c.wire_bytes(0), 0)
        self.assertEqual(strata.compress_wire_bytes("int8", 0, np.float32), 0)
        with self.assertRaises(strata.InvalidArgumentError):
            strata.compress_wire_bytes("int8", 10, np.float64)

    def test_compressor_lifetime_and_errors(self):
        import torch
        c = strata.Compressor("topk:0.5", 10, torch.bfloat16)
        self.assertEqual(c.dtype, DataType.BFLOAT16)
        self.assertIn("topk:0.5", repr(c))
        c.reset()
        c.close()
        c.close()  # a no-op
        self.assertTrue(c.closed)
        for call in (c.reset, lambda: c.params, lambda: c.spec, c.wire_bytes):
            with self.assertRaises(strata.ClosedError):
                call()
        for dtype in (np.float64, np.int32, "int8"):
            with self.assertRaises(strata.InvalidArgumentError) as cm:
                strata.Compressor("int8", 10, dtype)
            self.assertIn("the codecs take float, half and bfloat16", cm.exception.message)
        with self.assertRaises(strata.InvalidArgumentError) as cm:
            strata.Compressor("int8", 0, np.float32)
        self.assertIn("count 0", cm.exception.message)
        with self.assertRaises(strata.InvalidArgumentError):
            strata.Compressor("int8", -1, np.float32)
        with self.assertRaises(TypeError):
            strata.Compressor("int8", 10.0, np.float32)
        with self.assertRaises(TypeError):
            strata.Compressor("int8", 10, "complex")


# ---------------------------------------------------------------------------------------------
# One node: the call is an ordinary all-reduce
# ---------------------------------------------------------------------------------------------


class TestOneNode(unittest.TestCase):
    comms = None

    @classmethod
    def setUpClass(cls):
        cls.comms = strata.Communicator.init_all(2)

    @classmethod
    def tearDownClass(cls):
        for c in cls.comms:
            c.destroy()

    def test_equals_all_reduce(self):
        import torch
        for spec in ("none", "fp16", "int8", "topk:0.01", "sign,noef"):
            for dtype in ("float32", "float16", "bfloat16"):
                for op in ("sum", "avg"):
                    with self.subTest(spec=spec, dtype=dtype, op=op):
                        xs = [to_buffer(case_input(spec, r, 777), dtype) for r in range(2)]
                        ys = [torch.zeros_like(x) if dtype == "bfloat16" else np.zeros_like(x)
                              for x in xs]
                        want = [x.clone() if dtype == "bfloat16" else x.copy() for x in xs]
                        cs = [strata.Compressor(spec, 777, dtype) for _ in range(2)]
                        with strata.group():
                            for r, comm in enumerate(self.comms):
                                comm.all_reduce_compressed(xs[r], ys[r], cs[r], op=op)
                        with strata.group():
                            for r, comm in enumerate(self.comms):
                                comm.all_reduce(want[r], op=op)
                        for c in cs:
                            c.close()
                        for y, w in zip(ys, want):
                            self.assertEqual(to_numpy(y).tobytes(), to_numpy(w).tobytes())

    def test_bad_calls(self):
        comm = self.comms[0]
        x = np.ones(16, np.float32)
        with strata.Compressor("int8", 16, np.float32) as c:
            with self.assertRaises(TypeError):
                comm.all_reduce_compressed(x, compressor="int8")
            with self.assertRaises(TypeError):
                comm.all_reduce_compressed(x)
            with self.assertRaises(strata.StrataError) as cm:
                comm.all_reduce_compressed(np.ones(8, np.float32), compressor=c)
            self.assertEqual(cm.exception.result, Result.INVALID_ARGUMENT)
            self.assertIn("the compressor was made for count 16", cm.exception.message)
            self.assertEqual(cm.exception.function, "strataAllReduceCompressed")
            with self.assertRaises(strata.StrataError) as cm:
                comm.all_reduce_compressed(np.ones(16, np.float16), compressor=c)
            self.assertIn("the compressor was made for", cm.exception.message)
            with self.assertRaises(strata.StrataError) as cm:
                comm.all_reduce_compressed(x, compressor=c, op="max")
            self.assertEqual(cm.exception.result, Result.INVALID_ARGUMENT)
            self.assertIn("sums (strataSum) or averages", cm.exception.message)
            with self.assertRaises(ValueError):
                comm.all_reduce_compressed(x, np.ones(15, np.float32), c)
            with self.assertRaises(TypeError):
                comm.all_reduce_compressed(x, np.ones(16, np.float16), c)
            # bound to the first communicator it is used with (two of one rank: nothing waits)
            one, two = (strata.Communicator(1, strata.UniqueId.new(), 0) for _ in range(2))
            try:
                y = x.copy()
                self.assertIs(one.all_reduce_compressed(y, compressor=c), y)
                np.testing.assert_array_equal(y, x)
                one.all_reduce_compressed(y, compressor=c)
                with self.assertRaises(strata.StrataError) as cm:
                    two.all_reduce_compressed(y, compressor=c)
                self.assertEqual(cm.exception.result, Result.INVALID_ARGUMENT)
                self.assertIn("is bound to another communicator", cm.exception.message)
            finally:
                one.destroy()
                two.destroy()
        with self.assertRaises(strata.ClosedError):
            comm.all_reduce_compressed(x, compressor=c)

    def test_stream_and_close_order(self):
        xs = [np.full(64, r + 1.0, np.float32) for r in range(2)]
        cs = [strata.Compressor("int8", 64, np.float32) for _ in range(2)]
        with strata.Stream() as s:
            with strata.group():
                reqs = [comm.all_reduce_compressed(xs[r], compressor=cs[r], stream=s)
                        for r, comm in enumerate(self.comms)]
            for req, x in zip(reqs, xs):
                self.assertIs(req.wait(30), x)
                np.testing.assert_array_equal(x, np.full(64, 3.0, np.float32))
        for c in cs:
            c.reset()
            c.close()
        self.assertEqual(self.comms[0].async_error(), Result.SUCCESS)
        # close() and reset() refuse while a queued call uses the compressor
        n = 1 << 20
        xs = [np.ones(n, np.float32) for _ in range(2)]
        cs = [strata.Compressor("int8", n, np.float32) for _ in range(2)]
        with strata.Stream() as s:
            with strata.group():
                reqs = [[comm.all_reduce_compressed(xs[r], compressor=cs[r], stream=s)
                         for r, comm in enumerate(self.comms)] for _ in range(4)]
            for call in (cs[0].reset, cs[0].close):
                try:
                    call()
                except strata.StrataError as exc:  # the usual case: still in flight
                    self.assertEqual(exc.result, Result.INVALID_USAGE)
                    self.assertIn("still in flight", exc.message)
                    self.assertFalse(cs[0].closed)
            for rs in reqs:
                for req in rs:
                    req.wait(60)
        for c in cs:
            c.close()
            self.assertTrue(c.closed)
        np.testing.assert_array_equal(xs[0], np.full(n, 16.0, np.float32))


# ---------------------------------------------------------------------------------------------
# Two emulated nodes of two ranks: the inter-node phase is compressed
# ---------------------------------------------------------------------------------------------


class TestTwoNodes(unittest.TestCase):
    res = None
    tmp = None

    @classmethod
    def setUpClass(cls):
        cls.tmp = tempfile.mkdtemp(prefix="strata-compress.")
        uid = strata.UniqueId.new()  # this process holds the bootstrap root
        procs = []
        t0 = time.monotonic()
        for r in range(NRANKS):
            env = dict(os.environ, STRATA_HOSTID="node%d" % (r // PER_NODE))
            procs.append(subprocess.Popen([sys.executable, os.path.abspath(__file__), "--worker",
                                           str(r), bytes(uid).hex(), cls.tmp], env=env,
                                          stdout=subprocess.PIPE, stderr=subprocess.STDOUT))
        outs, failed = [], False
        for p in procs:
            try:
                out, _ = p.communicate(timeout=max(1, 90 - (time.monotonic() - t0)))
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                out, _ = p.communicate()
                out += b"\n(killed after 90 s)"
            outs.append(out.decode(errors="replace"))
            failed |= p.returncode != 0
        if failed:
            shutil.rmtree(cls.tmp, ignore_errors=True)
            raise AssertionError("a worker failed:\n" + "\n".join(
                "---- rank %d (exit %s):\n%s" % (r, p.returncode, o[-3000:])
                for r, (p, o) in enumerate(zip(procs, outs))))
        cls.res = [dict(np.load(os.path.join(cls.tmp, "rank%d.npz" % r)))
                   for r in range(NRANKS)]

    @classmethod
    def tearDownClass(cls):
        if cls.tmp:
            shutil.rmtree(cls.tmp, ignore_errors=True)

    def same_on_every_rank(self, key):
        got = [r[key] for r in self.res]
        for r in range(1, NRANKS):
            self.assertEqual(got[r].tobytes(), got[0].tobytes(),
                             "%s: rank %d differs from rank 0 (max %g)"
                             % (key, r, np.abs(got[r] - got[0]).max()))
        return got[0].astype(np.float64)

    def bound(self, name, spec, dtype, xs):
        """(max error the codec allows, the exact sum): one encoding of each node's partial sum
        and one of the sum, each moving an element by at most eps x its range's max (A, S),
        plus the datatype's roundings: |err| <= (N A + S)(eps + u)."""
        xs = [rounded(x, dtype) for x in xs]
        exact = sum(xs)
        a = max(np.abs(p).max() for p in node_partials(xs))
        s = np.abs(exact).max()
        eps = CODEC_EPS[spec.split(":")[0]] + UNIT_ROUNDOFF[dtype]
        return (NODES * a + s) * eps * (1 + 1e-6) + 1e-6 * s, exact

    def test_two_nodes(self):
        for r in self.res:
            self.assertEqual(r["topo"].tolist()[1], NODES)  # node, nnodes, local rank, size

    def test_identical_on_every_rank(self):
        for key in self.res[0]:
            if key != "topo":
                with self.subTest(key=key):
                    self.same_on_every_rank(key)

    def test_none_and_topk1_equal_all_reduce(self):
        for name in ("none", "topk1"):
            with self.subTest(case=name):
                got = self.same_on_every_rank(name)
                want = self.same_on_every_rank(name + "_allreduce")
                self.assertEqual(got.tobytes(), want.tobytes())

    def test_codec_bounds(self):
        for name, spec, dtype in CASES:
            if spec.split(":")[0] not in CODEC_EPS:
                continue
            with self.subTest(case=name, spec=spec, dtype=dtype):
                got = self.same_on_every_rank(name)
                bound, exact = self.bound(name, spec, dtype, [case_input(name, r)
                                                              for r in range(NRANKS)])
                err = np.abs(got - exact).max()
                self.assertLessEqual(err, bound, "%s: max error %g > bound %g" % (spec, err,
                                                                                   bound))
                self.assertGreater(err, 0)  # it was compressed

    def test_topk_and_sign_shapes(self):
        """topk:0.1 keeps about a tenth of the elements (the sum's encoding keeps
        ceil(0.1 x n) of each encoded range); sign's result has one magnitude per block of
        256 of each encoded range (the sum's scale) and mostly the exact sum's sign."""
        for name in ("topk", "sign"):
            with self.subTest(case=name):
                got = self.same_on_every_rank(name)
                exact = sum(case_input(name, r).astype(np.float32).astype(np.float64)
                            for r in range(NRANKS))
                self.assertTrue(np.all(np.isfinite(got)))
                nz = got != 0
                agree = np.mean(np.sign(got[nz]) == np.sign(exact[nz]))
                print("  %s: %d nonzero of %d, %d distinct magnitudes, sign agrees on %.3f"
                      % (name, nz.sum(), N, len(np.unique(np.abs(got[nz]))), agree))
                if name == "topk":
                    self.assertLessEqual(nz.sum(), int(np.ceil(0.1 * N)) + 4 * NRANKS)
                    self.assertGreaterEqual(nz.sum(), int(0.1 * N))
                    # kept: the large ones, their sign right
                    self.assertGreater(np.abs(exact[nz]).mean(), 2 * np.abs(exact).mean())
                    self.assertGreater(agree, 0.95)
                else:
                    self.assertTrue(nz.all())
                    self.assertLessEqual(len(np.unique(np.abs(got))), N // 256 + 1 + 4 * NRANKS)
                    # where the nodes' partial sums disagree in sign, the sum's sign is the
                    # larger scale's: right for most elements, the large ones nearly always
                    big = np.abs(exact) > np.percentile(np.abs(exact), 90)
                    self.assertGreater(agree, 0.8)
                    self.assertGreater(np.mean(np.sign(got[big]) == np.sign(exact[big])), 0.95)

    def test_avg_in_place_stream_and_sequence(self):
        first = self.same_on_every_rank("int8")
        xs = [case_input("int8", r) for r in range(NRANKS)]
        bound, exact = self.bound("int8", "int8", "float32", xs)
        avg = self.same_on_every_rank("int8_avg")
        self.assertLessEqual(np.abs(avg - exact / NRANKS).max(), bound / NRANKS)
        # in place, and the first call of a fresh compressor, blocking or on a stream, are the
        # same bits (the residual starts at zero)
        self.assertEqual(self.same_on_every_rank("int8_inplace").tobytes(), first.tobytes())
        stream = self.same_on_every_rank("int8_stream")
        self.assertEqual(stream[0].tobytes(), first.tobytes())
        # later calls of one compressor: blocking and queued ones agree bit for bit
        for k in range(3):
            self.assertEqual(self.same_on_every_rank("int8_seq%d" % k).tobytes(),
                             stream[k].tobytes())
        self.assertNotEqual(stream[1].tobytes(), stream[0].tobytes())  # the residual was added

    def test_error_feedback(self):
        """The sum of EF_CALLS results of one input approaches EF_CALLS x the exact sum: what
        one call drops, the next ones send. Without feedback the error of a deterministic codec
        repeats every call."""
        for spec in EF_SPECS:
            with self.subTest(spec=spec):
                exact = self.same_on_every_rank("ef_%s_allreduce" % spec)
                ef = self.same_on_every_rank("ef_" + spec)
                noef = self.same_on_every_rank("ef_%s,noef" % spec)
                want = EF_CALLS * exact
                scale = np.abs(want).max()
                err_ef = np.abs(ef - want).max() / scale
                err_noef = np.abs(noef - want).max() / scale
                norm_ef = np.linalg.norm(ef - want) / np.linalg.norm(want)
                norm_noef = np.linalg.norm(noef - want) / np.linalg.norm(want)
                print("  %-9s %d calls: max |sum - %d exact| / (%d max|exact|) %.2e with error "
                      "feedback, %.2e without; relative norm %.2e / %.2e"
                      % (spec, EF_CALLS, EF_CALLS, EF_CALLS, err_ef, err_noef, norm_ef,
                         norm_noef))
                self.assertLess(norm_ef, 0.5 * norm_noef)
                if spec.split(":")[0] in CODEC_EPS:
                    # bounded by about one call's error: the residual, not EF_CALLS of them
                    xs = [case_input("ef" + spec, r) for r in range(NRANKS)]
                    bound, _ = self.bound("ef", spec, "float32", xs)
                    self.assertLessEqual(err_ef * scale, 2 * bound)
                    self.assertLess(err_ef, 2e-3)
                else:
                    self.assertLess(norm_ef, 0.25)


if __name__ == "__main__":
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        worker(int(sys.argv[2]), sys.argv[3], sys.argv[4])
        sys.exit(0)
    unittest.main(verbosity=2)
