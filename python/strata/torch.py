"""strata as a torch.distributed backend: ``dist.init_process_group("strata", ...)``.

    import torch.distributed as dist
    import strata.torch                      # registers the backend "strata"
    dist.init_process_group("strata", rank=rank, world_size=n, init_method=...,
                            timeout=datetime.timedelta(seconds=60))
    dist.all_reduce(t)                       # strataAllReduce on CPU tensors

Everything of torch.distributed that torch 1.13 routes through a ProcessGroup runs on strata:
all_reduce (and all_reduce_coalesced), broadcast, reduce, all_gather (list, into a tensor and
coalesced), reduce_scatter (list and tensor), all_to_all and all_to_all_single (even and
uneven splits), gather, scatter, send / recv / isend / irecv, barrier, and what is built on them
(DistributedDataParallel's reducer and parameter broadcast, ZeroRedundancyOptimizer, the
*_object collectives, new_group / new_subgroups). No gloo group is made.

Rendezvous: the backend's rank 0 makes a strata UniqueId and puts its 128 bytes in torch's store
(the one init_process_group made: env://, tcp://, file://); the others read them and join
(strataCommInitRankConfig). new_group() and new_subgroups() split the default group's
communicator (strataCommSplit, collective over the default group: torch asks every rank to call
new_group) when the default group is strata; a group made any other way rendezvouses through its
own store.

Deadline: init_process_group(timeout=...) becomes the communicator's deadline (strata's
config timeoutMs, what STRATA_TIMEOUT sets by default): a peer that dies or never arrives fails
the waiting call within it, naming the rank and phase. Errors are StrataBackendError, both a
strata.StrataError (result, one-line message) and a RuntimeError (what torch's callers catch).

Ordering and completion. Each group owns one strata host stream for its collectives, queued in
call order (every rank issues them in the same order, as torch requires), and one per peer and
direction for send / recv, so a receive waiting for its sender never holds up a collective or a
send. A call returns a Work at once; its future (Work.get_future(), what DDP's reducer waits on)
completes on the backend's completion threads when the operation is over (never on the
stream's watcher, so a future's callback may itself run a collective and wait for it, as
PyTorch's PowerSGD hook does). Sends and receives
between two ranks match in call order (tags are not matched: torch's tag is accepted and
ignored), and a receive needs the sender's byte count.

Tensors: CPU, dense. Non-contiguous tensors are staged through contiguous copies. Data-moving
calls take every dtype (those strata lacks, such as bool, int16 and complex, travel as bytes);
reductions run in strata for float32/64, float16, bfloat16, int8, uint8, int32 and int64 with
SUM, PRODUCT, MIN, MAX and AVG; other dtypes and the bitwise ops (BAND, BOR, BXOR) all-gather
the contributions and reduce them on every rank in rank order (bitwise the same everywhere).
Not supported (a RuntimeError saying so): recv from any source (dist.recv without src),
PREMUL_SUM, CUDA tensors (this build's binding is host memory). Ops a dtype cannot take (bitwise
ops on floating or complex tensors, MIN/MAX on complex, AVG on bool) are refused at the call.

init_process_group's timeout also bounds the join: the ranks meet in the store first, and a rank
that never comes is named in the error (strata's own join deadline, STRATA_BOOTSTRAP_TIMEOUT,
applies only after that). Works of torch.distributed's Python API are let go when they complete;
those made for C++ callers (DDP) are kept among the last 1024 completed, which torch 1.13's
trampoline needs to reach their Python side.
"""

import collections
import concurrent.futures
import datetime
import os
import sys
import threading
import time

import torch
import torch.distributed as dist
from torch.distributed import distributed_c10d as _c10d

from ._buffer import _torch_types
from ._lib import Result
from .comm import Communicator, Stream, UniqueId, group as _strata_group
from .errors import StrataError

__all__ = ["BACKEND_NAME", "StrataBackendError", "ProcessGroupStrata", "communicator_of"]

BACKEND_NAME = "strata"
_NOCOLOR = -1
_MAX_TIMEOUT_S = (2**31 - 1) / 1000.0  # strataConfig_t.timeoutMs is an int


class StrataBackendError(StrataError, RuntimeError):
    """A strata failure under torch.distributed: a StrataError (result, message, function) that
    is also a RuntimeError, the type torch's callers and tests expect from a backend."""


def _backend_error(exc, what):
    if isinstance(exc, StrataBackendError):
        return exc
    if isinstance(exc, StrataError):
        return StrataBackendError(exc.result, "%s: %s" % (what, exc.message), exc.function)
    return StrataBackendError(Result.INTERNAL_ERROR, "%s: %s" % (what, exc))


def _unsupported(what):
    return StrataBackendError(Result.INVALID_USAGE, what + " (strata backend)")


# ---------------------------------------------------------------------------------------------
# Reduction ops and dtypes
# ---------------------------------------------------------------------------------------------

_RO = dist.ReduceOp
_NATIVE_OPS = [(_RO.SUM, "sum"), (_RO.PRODUCT, "prod"), (_RO.MIN, "min"), (_RO.MAX, "max")]
if hasattr(_RO, "AVG"):
    _NATIVE_OPS.append((_RO.AVG, "avg"))
_LOCAL_OPS = [(_RO.BAND, "band"), (_RO.BOR, "bor"), (_RO.BXOR, "bxor")]


def _op_name(op):
    """The strata op name ("sum", ...) or a local-only name ("band", ...); raises for others."""
    if op is None:
        return "sum"
    for ro, name in _NATIVE_OPS + _LOCAL_OPS:
        if op == ro:
            return name
    raise _unsupported("reduce op %s is not supported" % (op,))


def _native(dtype):
    return dtype in _torch_types()


def _check_op(op, dtype, what):
    """Refuses, at the call, an op that cannot apply to dtype (as torch's backends do)."""
    if op in ("band", "bor", "bxor") and (dtype.is_floating_point or dtype.is_complex):
        raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: bitwise op %s on %s (integer and "
                                 "bool tensors only)" % (what, op.upper(), dtype))
    if op in ("min", "max") and dtype.is_complex:
        raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: %s on complex tensors"
                                 % (what, op.upper()))
    if op == "avg" and dtype == torch.bool:
        raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: AVG on bool tensors" % what)
    return op


def _local_reduce(rows, op, nranks):
    """Reduces rows (a list of equal tensors, rank order) with op, the same way on every rank."""
    acc = rows[0].clone()
    is_bool = acc.dtype == torch.bool
    for x in rows[1:]:
        if op in ("sum", "avg"):
            acc = torch.logical_or(acc, x) if is_bool else acc + x
        elif op == "prod":
            acc = torch.logical_and(acc, x) if is_bool else acc * x
        elif op == "min":
            acc = torch.minimum(acc, x)
        elif op == "max":
            acc = torch.maximum(acc, x)
        elif op == "band":
            acc = torch.bitwise_and(acc, x)
        elif op == "bor":
            acc = torch.bitwise_or(acc, x)
        else:
            acc = torch.bitwise_xor(acc, x)
    if op == "avg" and not is_bool:
        if acc.is_floating_point() or acc.is_complex():
            acc = acc / nranks
        else:
            acc = torch.div(acc, nranks, rounding_mode="trunc")
    return acc


def _check_tensor(t, what):
    if not isinstance(t, torch.Tensor):
        raise StrataBackendError(Result.INVALID_ARGUMENT,
                                 "%s must be a torch.Tensor, not %s" % (what, type(t).__name__))
    if t.device.type != "cpu":
        raise _unsupported("%s is a %s tensor: this strata build's torch backend takes CPU "
                           "tensors" % (what, t.device))
    if t.layout != torch.strided:
        raise _unsupported("%s has layout %s: dense tensors only" % (what, t.layout))


class _Stage:
    """A flat contiguous stand-in for a tensor: the tensor itself (a view) when it is contiguous,
    else a contiguous copy written back by finish(). wire: that flat buffer in a dtype strata
    takes (the bytes, as uint8, for dtypes it lacks)."""

    __slots__ = ("t", "flat", "copy")

    def __init__(self, t, what, read=True):
        _check_tensor(t, what)
        self.t = t
        t = t.resolve_conj().resolve_neg() if (t.is_conj() or t.is_neg()) else t
        if t.is_contiguous() and t is self.t:
            self.flat, self.copy = t.reshape(-1), False
        else:
            src = t.contiguous() if read else torch.empty(t.shape, dtype=t.dtype)
            self.flat, self.copy = src.reshape(-1), True

    @property
    def wire(self):
        f = self.flat
        return f if _native(f.dtype) else f.view(torch.uint8)

    def finish(self):
        if self.copy:
            self.t.copy_(self.flat.view(self.t.shape))


def _one(tensors, what):
    if isinstance(tensors, torch.Tensor):
        return tensors
    if len(tensors) != 1:
        raise _unsupported("%s: %d tensors in one call; strata takes one per rank (torch's "
                           "multi-device form is for several GPUs per process)"
                           % (what, len(tensors)))
    return tensors[0]


def _timeout_s(timeout):
    if timeout is None:
        return None
    if isinstance(timeout, datetime.timedelta):
        s = timeout.total_seconds()
    else:
        s = float(timeout)
    if s <= 0:
        return None
    return min(s, _MAX_TIMEOUT_S)


# ---------------------------------------------------------------------------------------------
# Work
# ---------------------------------------------------------------------------------------------


# torch 1.13 reaches a Python Work from C++ (DDP's reducer, its parameter checks) through
# pybind's trampoline, which finds the Python object only while it is alive: a Work whose
# Python object has been collected falls back to the C++ base class, whose wait() never
# returns. So the backend keeps every Work alive until it completes, and a Work made for a
# caller that is not torch.distributed's Python API (C++, or Python that hands it to C++) also
# among the last _KEEP_DONE completed ones (torch's C++ callers wait on or take the future of a
# Work right after making it, or with one more in flight). Works of the Python API (dist.*) are
# held by their caller as long as it needs them: they are let go at completion, so their tensors
# are not kept alive by the backend.
_KEEP_DONE = 1024
_keep_pending = set()
_keep_done = collections.deque(maxlen=_KEEP_DONE)
_keep_lock = threading.Lock()
_C10D_FILE = _c10d.__file__.rstrip("c")  # distributed_c10d.py (not .pyc)


def _called_from_python_api():
    """Whether the ProcessGroup method running now was called by torch.distributed's Python API
    (distributed_c10d.py) rather than from C++ or other code (the first frame outside this
    file decides)."""
    f = sys._getframe(2)
    while f is not None and f.f_code.co_filename == __file__:
        f = f.f_back
    return f is not None and f.f_code.co_filename == _C10D_FILE


# Works complete (copies back, local reductions, their futures, and the futures' callbacks,
# which torch runs in the thread that completes a future) on these threads, never on a stream's
# watcher: a callback may start a collective and wait for it (PowerSGD's hook does), which
# needs the watcher. A pool that grows while its threads are busy (up to 64 nested waits).
_done_pool = None
_done_pool_pid = None
_done_pool_lock = threading.Lock()


def _completion_pool():
    global _done_pool, _done_pool_pid
    with _done_pool_lock:
        if _done_pool is None or _done_pool_pid != os.getpid():  # none yet, or a forked child
            _done_pool = concurrent.futures.ThreadPoolExecutor(
                max_workers=64, thread_name_prefix="strata-torch-done")
            _done_pool_pid = os.getpid()
        return _done_pool


class _StrataWork(dist.Work):
    """The Work of one call: completes when every strata request of the call has completed and
    its post-processing (copies back, local reductions) has run."""

    def __init__(self, name, outputs, requests, post=None, source=-1, keep_after=True):
        super().__init__()
        self._keep_after = keep_after
        self._name = name
        self._outputs = outputs
        self._post = post
        self._source = source
        self._lock = threading.Lock()
        self._event = threading.Event()
        self._error = None
        self._future = None
        self._callbacks = []
        self._left = len(requests)
        with _keep_lock:
            _keep_pending.add(self)
        if not requests:
            self._complete()
        for req in requests:
            req.add_done_callback(self._request_done)

    def _request_done(self, req):
        exc = req._error if isinstance(req, _StrataWork) else req.exception(0)
        with self._lock:
            if exc is not None and self._error is None:
                self._error = _backend_error(exc, self._name)
            self._left -= 1
            last = self._left == 0
        if last:
            try:
                _completion_pool().submit(self._complete)
            except RuntimeError:  # the interpreter is shutting down: no new threads
                self._complete()

    def _complete(self):
        if self._error is None and self._post is not None:
            try:
                self._post()
            except Exception as exc:  # noqa: BLE001 - becomes the work's error
                self._error = _backend_error(exc, self._name)
        self._post = None
        with self._lock:
            self._event.set()
            fut = self._future
            callbacks, self._callbacks = self._callbacks, []
        if fut is not None:
            self._settle(fut)
        for fn in callbacks:
            fn(self)
        with _keep_lock:
            _keep_pending.discard(self)
            if self._keep_after:
                _keep_done.append(self)

    def _settle(self, fut):
        if self._error is not None:
            fut.set_exception(self._error)
        else:
            fut.set_result(self._outputs)

    # -- torch's Work API --------------------------------------------------------------------
    def is_completed(self):
        return self._event.is_set()

    def is_success(self):
        return self._event.is_set() and self._error is None

    def exception(self):
        return self._error

    def source_rank(self):
        return self._source

    _source_rank = source_rank

    def result(self):
        return self._outputs

    def synchronize(self):
        pass

    def wait(self, timeout=None):
        """Blocks until the call is over; raises StrataBackendError when it failed, and when a
        timeout (timedelta; 0 or None: none) passes first."""
        s = _timeout_s(timeout)
        if not self._event.wait(s):
            raise StrataBackendError(Result.TIMEOUT, "%s: not complete after %s s (Work.wait "
                                     "timeout)" % (self._name, s))
        if self._error is not None:
            raise self._error
        return True

    def add_done_callback(self, fn):
        """fn(self) once complete (at once when it is): lets a Work wait on other Works."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                return
        fn(self)

    def get_future(self):
        with self._lock:
            if self._future is None:
                self._future = torch.futures.Future()
                if self._event.is_set():
                    self._settle(self._future)
            return self._future


# ---------------------------------------------------------------------------------------------
# The process group
# ---------------------------------------------------------------------------------------------

_live_groups = []
_live_lock = threading.Lock()


class ProcessGroupStrata(dist.ProcessGroup):
    """torch.distributed's ProcessGroup over a strata Communicator (one per group)."""

    def __init__(self, comm, rank, size):
        super().__init__(rank, size)
        self._comm = comm
        self._coll = Stream()
        self._p2p = {}
        self._p2p_lock = threading.Lock()
        self._closed = False
        with _live_lock:
            _live_groups.append(self)

    # -- identity ----------------------------------------------------------------------------
    def getBackendName(self):  # noqa: N802 - torch's name (ProcessGroup::getBackendName)
        return BACKEND_NAME

    def name(self):
        return BACKEND_NAME

    @property
    def comm(self):
        """The strata Communicator of this group (for strata's own calls, e.g. strata.ddp)."""
        return self._comm

    # -- plumbing ----------------------------------------------------------------------------
    def _stream_to(self, kind, peer):
        key = (kind, peer)
        with self._p2p_lock:
            s = self._p2p.get(key)
            if s is None:
                s = self._p2p[key] = Stream()
            return s

    def _run(self, name, outputs, launch, post=None, stream=None, source=-1):
        """Queues launch(stream) -> list of strata Requests; returns their Work."""
        if self._closed:
            raise _unsupported("%s on a destroyed process group" % name)
        stream = self._coll if stream is None else stream
        try:
            reqs = launch(stream)
        except StrataError as exc:
            raise _backend_error(exc, name) from None
        return _StrataWork(name, outputs, [r for r in reqs if r is not None], post, source,
                           keep_after=not _called_from_python_api())

    def _grouped(self, stream, calls):
        """Runs calls (functions of stream returning a Request) as one strata group."""
        reqs = []
        with _strata_group():
            for call in calls:
                reqs.append(call(stream))
        return reqs

    def _gathered(self, flat):
        """A tensor [size, n] of every rank's flat tensor (all-gathered), and its requests."""
        wire = flat if _native(flat.dtype) else flat.view(torch.uint8)
        out = torch.empty((self.size(),) + tuple(wire.shape), dtype=wire.dtype)
        return out, (lambda s: [self._comm.all_gather(wire, out, stream=s)])

    def _per_rank(self, tensors, like, what, which):
        """Checks a list of one tensor per rank (which: "output" or "input"), each of like's
        numel and dtype."""
        if len(tensors) != self.size():
            raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: %d %s tensors for %d ranks"
                                     % (what, len(tensors), which, self.size()))
        other = "input" if which == "output" else "output"
        for i, x in enumerate(tensors):
            _check_tensor(x, "%s %s" % (what, which))
            if x.numel() != like.numel() or x.dtype != like.dtype:
                raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: %s %d has %d %s elements, "
                                         "the %s %d %s" % (what, which, i, x.numel(), x.dtype,
                                                           other, like.numel(), like.dtype))

    @staticmethod
    def _rooted(opts, outputs, inputs):
        """(root, outputs, inputs) of gather/scatter, called with GatherOptions/ScatterOptions
        or in their (outputs, input(s), root) form."""
        if isinstance(opts, int):
            return opts, [outputs], [inputs]
        return getattr(opts, "rootRank", 0), outputs, inputs

    def _copy_rows(self, outs, out, dtype):
        """Copies row r of out (all-gathered or gathered, seen as dtype) into outs[r]."""
        for o, row in zip(outs, self._rows(out, dtype)):
            o.copy_(row.view(o.shape))

    def _rows(self, out, dtype):
        rows = out if out.dtype == dtype else out.view(dtype)
        return [rows[r] for r in range(self.size())]

    # -- collectives -------------------------------------------------------------------------
    def allreduce(self, tensors, opts=None):
        t = _one(tensors, "allreduce")
        op = _op_name(getattr(opts, "reduceOp", opts))
        st = _Stage(t, "allreduce tensor")
        _check_op(op, t.dtype, "allreduce")
        outputs = [t]
        if _native(t.dtype) and op in dict(_NATIVE_OPS).values():
            return self._run("allreduce", outputs,
                             lambda s: [self._comm.all_reduce(st.flat, op=op, stream=s)],
                             st.finish)
        out, launch = self._gathered(st.flat)

        def post():
            st.flat.copy_(_local_reduce(self._rows(out, st.flat.dtype), op, self.size()))
            st.finish()
        return self._run("allreduce", outputs, launch, post)

    def allreduce_coalesced(self, tensors, opts=None):
        opts_op = getattr(opts, "reduceOp", opts)
        works = [self.allreduce([t], opts_op) for t in tensors]
        return self._join("allreduce_coalesced", list(tensors), works)

    @staticmethod
    def _join(name, outputs, works):
        """One Work completing when all of works (queued in order) have."""
        return _StrataWork(name, outputs, works, keep_after=not _called_from_python_api())

    def broadcast(self, tensors, opts=None):
        if isinstance(opts, int):  # broadcast(tensor, root)
            root, index = opts, 0
        else:
            root = getattr(opts, "rootRank", 0)
            index = getattr(opts, "rootTensor", 0)
        if index != 0:
            raise _unsupported("broadcast: rootTensor %d (one tensor per rank)" % index)
        t = _one(tensors, "broadcast")
        st = _Stage(t, "broadcast tensor")
        return self._run("broadcast", [t],
                         lambda s: [self._comm.broadcast(st.wire, root=root, stream=s)],
                         st.finish)

    def reduce(self, tensors, opts=None, *args):
        if isinstance(opts, int):  # reduce(tensor, root, op)
            root, op = opts, (args[0] if args else None)
        else:
            root, op = getattr(opts, "rootRank", 0), getattr(opts, "reduceOp", None)
        op = _op_name(op)
        t = _one(tensors, "reduce")
        st = _Stage(t, "reduce tensor")
        _check_op(op, t.dtype, "reduce")
        is_root = self.rank() == root
        if _native(t.dtype) and op in dict(_NATIVE_OPS).values():
            return self._run("reduce", [t],
                             lambda s: [self._comm.reduce(st.flat, op=op, root=root, stream=s)],
                             st.finish if is_root else None)
        out, launch = self._gathered(st.flat)

        def post():
            if is_root:
                st.flat.copy_(_local_reduce(self._rows(out, st.flat.dtype), op, self.size()))
                st.finish()
        return self._run("reduce", [t], launch, post)

    def allgather(self, output_tensors, input_tensors, opts=None):
        if isinstance(input_tensors, torch.Tensor):  # allgather(outputs, input)
            output_tensors, input_tensors = [output_tensors], [input_tensors]
        t = _one(input_tensors, "allgather")
        outs = _one(output_tensors, "allgather")
        self._per_rank(outs, t, "allgather", "output")
        st = _Stage(t, "allgather input")
        out, launch = self._gathered(st.flat)

        def post():
            self._copy_rows(outs, out, t.dtype)
        return self._run("allgather", [list(outs)], launch, post)

    def _allgather_base(self, output, input, opts=None):  # noqa: A002 - torch's names
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        if output.numel() != input.numel() * self.size() or output.dtype != input.dtype:
            raise StrataBackendError(Result.INVALID_ARGUMENT, "_allgather_base: output of %d %s "
                                     "elements for %d ranks x %d %s" % (
                                         output.numel(), output.dtype, self.size(),
                                         input.numel(), input.dtype))
        si = _Stage(input, "input")
        so = _Stage(output, "output", read=False)
        return self._run("_allgather_base", [output],
                         lambda s: [self._comm.all_gather(si.wire, so.wire, stream=s)],
                         so.finish)

    def allgather_coalesced(self, output_lists, input_list, opts=None):
        """output_lists[r][j] receives rank r's input_list[j] (torch's layout)."""
        n = self.size()
        if len(output_lists) != n or any(len(outs) != len(input_list) for outs in output_lists):
            raise StrataBackendError(Result.INVALID_ARGUMENT, "allgather_coalesced: the output "
                                     "lists must be %d (one per rank) of %d tensors (one per "
                                     "input)" % (n, len(input_list)))
        works = [self.allgather([[output_lists[r][j] for r in range(n)]], [t])
                 for j, t in enumerate(input_list)]
        return self._join("allgather_coalesced", list(output_lists), works)

    def gather(self, output_tensors, input_tensors, opts=None):
        root, output_tensors, input_tensors = self._rooted(opts, output_tensors, input_tensors)
        t = _one(input_tensors, "gather")
        is_root = self.rank() == root
        outs = _one(output_tensors, "gather") if is_root else []
        if is_root:
            self._per_rank(outs, t, "gather", "output")
        st = _Stage(t, "gather input")
        wire = st.wire
        out = torch.empty((self.size(),) + tuple(wire.shape), dtype=wire.dtype) if is_root \
            else None

        def post():
            if is_root:
                self._copy_rows(outs, out, t.dtype)
        return self._run("gather", [list(outs)],
                         lambda s: [self._comm.gather(wire, out, root=root, stream=s)], post)

    def scatter(self, output_tensors, input_tensors, opts=None):
        root, output_tensors, input_tensors = self._rooted(opts, output_tensors, input_tensors)
        t = _one(output_tensors, "scatter")
        is_root = self.rank() == root
        so = _Stage(t, "scatter output", read=False)
        send = None
        if is_root:
            ins = _one(input_tensors, "scatter")
            self._per_rank(ins, t, "scatter", "input")
            send = torch.stack([x.reshape(-1) for x in ins]).reshape(-1)
            send = send if _native(send.dtype) else send.view(torch.uint8)
        return self._run("scatter", [t],
                         lambda s: [self._comm.scatter(send, so.wire, root=root, stream=s)],
                         so.finish)

    def reduce_scatter(self, output_tensors, input_tensors, opts=None):
        if isinstance(output_tensors, torch.Tensor):  # reduce_scatter(output, inputs)
            output_tensors, input_tensors = [output_tensors], [input_tensors]
        t = _one(output_tensors, "reduce_scatter")
        ins = _one(input_tensors, "reduce_scatter")
        _check_tensor(t, "reduce_scatter output")
        self._per_rank(ins, t, "reduce_scatter", "input")
        flat = torch.stack([x.reshape(-1) for x in ins]).reshape(-1)
        return self._reduce_scatter_flat("reduce_scatter", t, flat, opts)

    def _reduce_scatter_base(self, output, input, opts=None):  # noqa: A002 - torch's names
        _check_tensor(input, "input")
        if input.numel() != output.numel() * self.size():
            raise StrataBackendError(Result.INVALID_ARGUMENT, "_reduce_scatter_base: input of %d "
                                     "elements for %d ranks x %d" % (
                                         input.numel(), self.size(), output.numel()))
        return self._reduce_scatter_flat("_reduce_scatter_base", output,
                                         input.contiguous().reshape(-1), opts)

    def _reduce_scatter_flat(self, name, output, flat, opts):
        op = _op_name(getattr(opts, "reduceOp", opts))
        so = _Stage(output, name + " output", read=False)
        _check_op(op, output.dtype, name)
        if flat.dtype != output.dtype:
            raise StrataBackendError(Result.INVALID_ARGUMENT, "%s: input %s, output %s"
                                     % (name, flat.dtype, output.dtype))
        if _native(output.dtype) and op in dict(_NATIVE_OPS).values():
            return self._run(name, [output], lambda s: [
                self._comm.reduce_scatter(flat, so.flat, op=op, stream=s)], so.finish)
        out, launch = self._gathered(flat)
        n, me = output.numel(), self.rank()

        def post():
            rows = [row[me * n:(me + 1) * n] for row in self._rows(out, flat.dtype)]
            so.flat.copy_(_local_reduce(rows, op, self.size()))
            so.finish()
        return self._run(name, [output], launch, post)

    def alltoall_base(self, output, input, output_split_sizes, input_split_sizes,  # noqa: A002
                      opts=None):
        _check_tensor(output, "output")
        _check_tensor(input, "input")
        if output.dtype != input.dtype:
            raise StrataBackendError(Result.INVALID_ARGUMENT, "alltoall_base: input %s, output %s"
                                     % (input.dtype, output.dtype))
        n = self.size()

        def counts(t, splits, what):
            rows = t.shape[0] if t.dim() else 1
            per_row = t.numel() // rows if rows else 0
            if not splits:
                if rows % n:
                    raise StrataBackendError(Result.INVALID_ARGUMENT, "alltoall_base: %s has %d "
                                             "rows, not a multiple of %d ranks" % (what, rows, n))
                return [rows // n * per_row] * n
            if len(splits) != n or sum(splits) != rows:
                raise StrataBackendError(Result.INVALID_ARGUMENT, "alltoall_base: %s splits %s "
                                         "do not cut its %d rows in %d" % (what, list(splits),
                                                                          rows, n))
            return [int(x) * per_row for x in splits]
        sc = counts(input, input_split_sizes, "input")
        rc = counts(output, output_split_sizes, "output")
        si = _Stage(input, "input")
        so = _Stage(output, "output", read=False)
        scale = 1 if _native(input.dtype) else input.element_size()

        def launch(s):
            if not input_split_sizes and not output_split_sizes:
                return [self._comm.alltoall(si.wire, so.wire, stream=s)]
            return [self._comm.alltoallv(si.wire, [c * scale for c in sc],
                                         [c * scale for c in rc], so.wire, stream=s)]
        return self._run("alltoall_base", [output], launch, so.finish)

    def alltoall(self, output_tensors, input_tensors, opts=None):
        n = self.size()
        if len(output_tensors) != n or len(input_tensors) != n:
            raise StrataBackendError(Result.INVALID_ARGUMENT, "alltoall: %d outputs and %d "
                                     "inputs for %d ranks" % (len(output_tensors),
                                                              len(input_tensors), n))
        for x in list(output_tensors) + list(input_tensors):
            _check_tensor(x, "alltoall tensor")
            if x.dtype != input_tensors[0].dtype:
                raise StrataBackendError(Result.INVALID_ARGUMENT, "alltoall: tensors of "
                                         "different dtypes (%s, %s)" % (x.dtype,
                                                                        input_tensors[0].dtype))
        dtype = input_tensors[0].dtype
        send = torch.cat([x.reshape(-1) for x in input_tensors]) if n else None
        recv = torch.empty(sum(x.numel() for x in output_tensors), dtype=dtype)
        scale = 1 if _native(dtype) else torch.empty(0, dtype=dtype).element_size()
        wire = (lambda x: x) if _native(dtype) else (lambda x: x.view(torch.uint8))
        sc = [x.numel() * scale for x in input_tensors]
        rc = [x.numel() * scale for x in output_tensors]

        def post():
            off = 0
            for o in output_tensors:
                o.copy_(recv[off:off + o.numel()].view(o.shape))
                off += o.numel()
        return self._run("alltoall", [list(output_tensors)], lambda s: [
            self._comm.alltoallv(wire(send), sc, rc, wire(recv), stream=s)], post)

    def barrier(self, opts=None):
        token = torch.zeros(1, dtype=torch.uint8)
        return self._run("barrier", [], lambda s: [self._comm.all_reduce(token, stream=s)])

    # -- point to point ----------------------------------------------------------------------
    def send(self, tensors, dst, tag=0):
        t = _one(tensors, "send")
        st = _Stage(t, "send tensor")
        return self._run("send", [t], lambda s: [self._comm.send(st.wire, dst, stream=s)],
                         stream=self._stream_to("send", dst))

    def recv(self, tensors, src, tag=0):
        t = _one(tensors, "recv")
        st = _Stage(t, "recv tensor", read=False)
        return self._run("recv", [t], lambda s: [self._comm.recv(st.wire, src, stream=s)],
                         st.finish, stream=self._stream_to("recv", src), source=src)

    def recv_anysource(self, tensors, tag=0):
        raise _unsupported("recv from any source (dist.recv/irecv without src) is not "
                           "supported: strata matches a receive to one sender; pass src")

    def monitored_barrier(self, timeout=None, wait_all_ranks=False):
        raise _unsupported("monitored_barrier is gloo's (torch calls it for gloo only); "
                           "use barrier(), which fails naming the missing rank at the deadline")

    # -- lifetime ----------------------------------------------------------------------------
    def _shutdown(self):
        if self._closed:
            return
        self._closed = True
        streams = [self._coll] + list(self._p2p.values())
        if any(s._pending for s in streams):
            # Work still queued (an irecv its peer never sends, a collective others never join):
            # abort, so that it fails at once instead of holding the exit for the deadline.
            try:
                self._comm.abort()
            except Exception:  # noqa: BLE001
                pass
        for s in streams:
            try:
                s.destroy()
            except Exception:  # noqa: BLE001 - the communicator may have failed
                pass
        try:
            if self._comm.closed:
                pass
            elif self._comm.async_error() == Result.SUCCESS:
                self._comm.destroy()
            else:
                self._comm.abort()
        except Exception:  # noqa: BLE001
            pass


def communicator_of(group=None):
    """The strata Communicator behind a strata process group (default: the default group), or
    None when the group is not strata's."""
    pg = group if group is not None else _c10d._get_default_group()
    return pg.comm if isinstance(pg, ProcessGroupStrata) else None


# ---------------------------------------------------------------------------------------------
# Creation: rendezvous through the store, or a split of the default group
# ---------------------------------------------------------------------------------------------

_splits = []          # communicators split by new_group, waiting for their creator call
_splits_lock = threading.Lock()


def _arrive(store, rank, size, timeout_s, prefix):
    """Waits until every rank of the group has reached the backend's creation, within the torch
    timeout (strata's own join deadline is STRATA_BOOTSTRAP_TIMEOUT); raises naming the ranks
    that did not come."""
    store.add(prefix + "arrived/%d" % rank, 1)
    count = store.add(prefix + "arrived", 1)
    deadline = None if timeout_s is None else time.monotonic() + timeout_s
    pause = 0.001
    while count < size:
        if deadline is not None and time.monotonic() > deadline:
            missing = [r for r in range(size) if store.add(prefix + "arrived/%d" % r, 0) == 0]
            raise StrataBackendError(Result.TIMEOUT, "init_process_group: rank(s) %s of %d did not "
                                     "join within the timeout (%g s)"
                                     % (", ".join(map(str, missing)), size, timeout_s))
        time.sleep(pause)
        pause = min(pause * 2, 0.05)
        count = store.add(prefix + "arrived", 0)


def _rendezvous(store, rank, size, timeout_s):
    # A store can outlive a group (file:// keeps its keys; init after destroy may meet the same
    # store): each rank counts its own rendezvous in it, and every rank is at the same count, so
    # the keys of round k are those of this group only.
    k = store.add("strata/round/%d" % rank, 1)
    prefix = "strata/%d/" % k
    _arrive(store, rank, size, timeout_s, prefix)
    key = prefix + "unique_id"
    if rank == 0:
        try:
            uid = UniqueId.new()
        except StrataError as exc:
            store.set(key, b"E" + str(exc).encode())
            raise _backend_error(exc, "init_process_group") from None
        store.set(key, b"U" + bytes(uid))
        data = bytes(uid)
    else:
        got = store.get(key)
        if got[:1] != b"U":
            raise StrataBackendError(Result.SYSTEM_ERROR, "init_process_group: rank 0 could not "
                                     "make strata's unique id: " + got[1:].decode(errors="replace"))
        data = got[1:]
    try:
        return Communicator(size, UniqueId(data), rank, timeout=timeout_s, name="torch")
    except StrataError as exc:
        raise _backend_error(exc, "init_process_group") from None


def _create(opts, pg_options=None):
    """The creator torch calls (extended API: store, group rank and size, timeout, the group's
    global ranks)."""
    store, rank, size = opts.store, opts.group_rank, opts.group_size
    timeout_s = _timeout_s(opts.timeout)
    ranks = list(getattr(opts, "global_ranks_in_group", []) or [])
    comm = None
    if ranks:
        with _splits_lock:
            for i, (want, c) in enumerate(_splits):
                if want == sorted(ranks):
                    comm = c
                    del _splits[i]
                    break
    if comm is None:
        comm = _rendezvous(store, rank, size, timeout_s)
    if comm.rank != rank or comm.size != size:
        raise StrataBackendError(Result.INTERNAL_ERROR, "strata communicator rank %d/%d for "
                                 "torch's group rank %d/%d" % (comm.rank, comm.size, rank, size))
    return ProcessGroupStrata(comm, rank, size)


_orig_new_group = _c10d.new_group


def _new_group(ranks=None, timeout=_c10d.default_pg_timeout, backend=None, pg_options=None):
    """torch's new_group; when the group will be strata's and the default group is strata's,
    every rank first splits the default communicator (a collective over the default group,
    which torch has every rank call new_group for), and the creator takes the split."""
    split = None
    try:
        default = _c10d._get_default_group()
    except RuntimeError:
        default = None
    if isinstance(default, ProcessGroupStrata):
        name = dist.Backend(backend) if backend else dist.get_backend(default)
        world = default.size()
        members = sorted(ranks) if ranks else list(range(world))
        valid = (len(set(members)) == len(members)
                 and all(isinstance(r, int) and 0 <= r < world for r in members))
        if name == BACKEND_NAME and valid:
            me = default.rank()
            color = 0 if me in members else _NOCOLOR
            key = members.index(me) if me in members else 0
            try:
                default._coll.synchronize()
                child = default.comm.split(color, key, timeout=_timeout_s(timeout))
            except StrataError as exc:
                raise _backend_error(exc, "new_group") from None
            if child is not None:
                split = (members, child)
                with _splits_lock:
                    _splits.append(split)
    try:
        return _orig_new_group(ranks=ranks, timeout=timeout, backend=backend,
                               pg_options=pg_options)
    finally:
        if split is not None:
            with _splits_lock:
                if split in _splits:  # not taken: torch failed before creating the group
                    _splits.remove(split)
                    split[1].destroy()


def _shutdown_all():
    with _live_lock:
        groups = list(reversed(_live_groups))
        _live_groups.clear()
    for pg in groups:
        pg._shutdown()


_orig_destroy = _c10d.destroy_process_group


def _destroy_process_group(group=None):
    """torch's destroy_process_group, which also frees strata's communicators and streams."""
    if group is None or group is _c10d.GroupMember.WORLD:
        victims = [pg for pg in list(_c10d._pg_map) if isinstance(pg, ProcessGroupStrata)]
    else:
        victims = [group] if isinstance(group, ProcessGroupStrata) else []
    _orig_destroy(group)
    for pg in victims:
        pg._shutdown()
        with _live_lock:
            if pg in _live_groups:
                _live_groups.remove(pg)


def _register():
    if BACKEND_NAME.upper() in dist.Backend._plugins:
        return
    dist.Backend.register_backend(BACKEND_NAME, _create, extended_api=True)
    _c10d.new_group = _new_group
    dist.new_group = _new_group
    _c10d.destroy_process_group = _destroy_process_group
    dist.destroy_process_group = _destroy_process_group
    import atexit
    atexit.register(_shutdown_all)


_register()
