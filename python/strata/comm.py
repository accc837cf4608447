"""Unique ids, communicators, host streams, requests and groups over libstrata.

Conventions (the header include/strata.h is the manual; this module follows it):

- Buffers are numpy.ndarray or CPU torch.Tensor, C-contiguous; strata sees their flat elements,
  so shapes only matter through their element count. Counts are elements, never bytes.
- ``stream=None``: the call blocks until the result is in place and returns the output buffer.
  ``stream=<Stream>``: the call is queued on the stream's progress thread and returns at once with
  a Request; the Request (and the Stream, until the work completes) keeps every buffer alive.
  Inside ``with strata.group():`` calls are launched together when the outermost block ends.
- Bad input is caught before calling into C: UnsupportedTypeError (a TypeError) for types,
  InvalidArgumentError (a ValueError) for values and shapes, ClosedError for a destroyed
  communicator or stream. Failures inside the library raise StrataError with strataResult_t and
  strataGetLastError's line.
"""

import bisect
import collections
import contextlib
import ctypes
import itertools
import numbers
import os
import sys
import threading
import time
import traceback

from . import _lib as L
import numpy as np

from ._buffer import describe, empty_like, as_datatype, is_tensor, scalar_bytes
from ._handle import _Handle, _last_error
from .errors import (StrataError, ClosedError, InvalidArgumentError, UnsupportedTypeError)

Result = L.Result
RedOp = L.RedOp
DataType = L.DataType


def _check(rc, fn):
    """Raises StrataError(rc, strataGetLastError) unless rc is strataSuccess. Must run in the
    thread that made the call (the last error is per thread)."""
    if rc != Result.SUCCESS:
        raise StrataError(rc, _last_error(), fn)


def get_version():
    """The library's STRATA_VERSION_CODE: major * 10000 + minor * 100 + patch (int)."""
    v = ctypes.c_int()
    _check(L.lib().strataGetVersion(ctypes.byref(v)), "strataGetVersion")
    return v.value


def get_error_string(result):
    """strataGetErrorString: a static English text for a strataResult_t (int or Result)."""
    return L.lib().strataGetErrorString(int(result)).decode()


_OP_NAMES = {"sum": RedOp.SUM, "prod": RedOp.PROD, "max": RedOp.MAX, "min": RedOp.MIN,
             "avg": RedOp.AVG}


_OP_ALLOWED = "sum, prod, max, min, avg (strata.RedOp 0..%d) or a handle from premul_sum on " \
              "this communicator" % (L.NUM_BUILTIN_OPS - 1)


def _overlap(a, a_bytes, b, b_bytes):
    """Whether the byte ranges [a, a + a_bytes) and [b, b + b_bytes) share a byte."""
    return a_bytes > 0 and b_bytes > 0 and a < b + b_bytes and b < a + a_bytes


def _packed(counts):
    """Displacements of blocks of these counts laid end to end in rank order."""
    return [0] + list(itertools.accumulate(counts))[:-1]


def _op(op, handles=()):
    """The strataRedOp_t of op: a built-in's name or RedOp, or one of handles (premul_sum's, not
    yet destroyed, on the communicator of the call); InvalidArgumentError naming the allowed
    values for any other value, before C sees it."""
    if isinstance(op, str):
        try:
            return int(_OP_NAMES[op.lower()])
        except KeyError:
            raise InvalidArgumentError("op %r is not a reduction op: %s" % (op, _OP_ALLOWED)) \
                from None
    if isinstance(op, int) and not isinstance(op, bool):
        if 0 <= int(op) < L.NUM_BUILTIN_OPS or int(op) in handles:
            return int(op)
        raise InvalidArgumentError("op %d is not a reduction op: %s" % (int(op), _OP_ALLOWED))
    raise UnsupportedTypeError("op must be a name, a strata.RedOp or a premul_sum handle, not %s"
                               % type(op).__name__)


# ---------------------------------------------------------------------------------------------
# Unique id
# ---------------------------------------------------------------------------------------------


class UniqueId:
    """strataUniqueId: the 128 bytes (STRATA_UNIQUE_ID_BYTES) that let ranks find each other.

    ``UniqueId.new()`` (one rank, usually rank 0) starts a bootstrap root in this process and
    returns the id; hand ``bytes(uid)`` to every other rank by any means (torch.distributed,
    MPI, a file) and rebuild it there with ``UniqueId(data)``. One id serves one communicator.
    The bytes are a credential: repr() does not show them.
    """

    __slots__ = ("_c",)

    def __init__(self, data):
        """data: bytes-like of exactly 128 bytes. InvalidArgumentError otherwise."""
        data = bytes(data)
        if len(data) != L.UNIQUE_ID_BYTES:
            raise InvalidArgumentError("a unique id is %d bytes, got %d"
                                       % (L.UNIQUE_ID_BYTES, len(data)))
        self._c = L.UniqueIdC()
        ctypes.memmove(ctypes.byref(self._c), data, L.UNIQUE_ID_BYTES)

    @classmethod
    def new(cls):
        """strataGetUniqueId. Raises StrataError: strataInvalidUsage when no interface allowed by
        STRATA_SOCKET_IFNAME is up, strataSystemError when the root cannot listen."""
        c = L.UniqueIdC()
        _check(L.lib().strataGetUniqueId(ctypes.byref(c)), "strataGetUniqueId")
        return cls(ctypes.string_at(ctypes.byref(c), L.UNIQUE_ID_BYTES))

    def __bytes__(self):
        return ctypes.string_at(ctypes.byref(self._c), L.UNIQUE_ID_BYTES)

    def __eq__(self, other):
        return isinstance(other, UniqueId) and bytes(self) == bytes(other)

    def __hash__(self):
        return hash(bytes(self))

    def __repr__(self):
        return "<strata.UniqueId>"


# ---------------------------------------------------------------------------------------------
# Groups
# ---------------------------------------------------------------------------------------------

_tls = threading.local()


def _group_frames():
    frames = getattr(_tls, "frames", None)
    if frames is None:
        frames = _tls.frames = []
    return frames


@contextlib.contextmanager
def group():
    """strataGroupStart / strataGroupEnd around the block (they nest; the outermost end
    launches). Calls inside with stream=None do not block: they all run at the end of the block,
    which returns when they are complete; their buffers are kept alive until then. Calls with a
    stream are queued on it as one unit at the end, and their Requests complete with it.
    Use it for send/recv exchanges and to drive several communicators of one process
    (Communicator.init_all) from one thread. Raises StrataError with the first error of the
    grouped operations (all of them are completed or cancelled first)."""
    _check(L.lib().strataGroupStart(), "strataGroupStart")
    frames = _group_frames()
    frames.append([])
    failed = True
    try:
        yield
        failed = False
    finally:
        frame = frames.pop()
        rc = L.lib().strataGroupEnd()
        err = None if rc == Result.SUCCESS else StrataError(rc, _last_error(), "strataGroupEnd")
        if frames:
            frames[-1].extend(frame)  # launched by the outer end, keep everything until then
        else:
            for item in frame:
                if isinstance(item, Request):
                    if err is None:
                        item._stream._submit(item)
                    else:
                        item._finish(err)
        if err is not None and not failed:
            raise err


def _in_group():
    return bool(getattr(_tls, "frames", None))


# ---------------------------------------------------------------------------------------------
# Streams and requests
# ---------------------------------------------------------------------------------------------


def _run_callback(fn, req):
    """A failing callback must not kill the thread that completes requests (the watcher): its
    exception is printed, as concurrent.futures does."""
    try:
        fn(req)
    except Exception:  # noqa: BLE001 - reported, then ignored
        sys.stderr.write("strata: exception in a done callback of %r:\n" % (req,))
        traceback.print_exc()


class Request:
    """One call queued on a Stream: a future for its output.

    ``done()`` polls, ``wait(timeout)`` / ``result(timeout)`` block and return the output buffer
    (the recvbuf of the call), ``exception()`` gives the StrataError of a failed call,
    ``add_done_callback(fn)`` calls ``fn(request)`` once it has completed (at once if it has; else
    from the thread that completes it: the stream's watcher thread, which this starts).
    The request holds the call's buffers until it completes.

    A stream reports completion per stream, not per call: a request completes when a
    synchronize (or a query) of its stream, begun after the request was queued, returns; when
    that synchronize reports an error, every request it completes carries it (strata says which
    call failed in the message).
    """

    __slots__ = ("_stream", "name", "_buffers", "_output", "_seq", "_event", "_error",
                 "_callbacks", "_lock")

    def __init__(self, stream, name, buffers, output):
        self._stream = stream
        self.name = name
        self._buffers = buffers
        self._output = output
        self._seq = None
        self._event = threading.Event()
        self._error = None
        self._callbacks = []
        self._lock = threading.Lock()

    def _finish(self, error):
        with self._lock:
            if self._event.is_set():
                return
            self._error = error
            # The buffers go after the event: a Compressor freed by dropping them sees its call
            # complete.
            buffers, self._buffers = self._buffers, None
            self._event.set()
            callbacks, self._callbacks = self._callbacks, []
        del buffers
        for fn in callbacks:
            _run_callback(fn, self)

    def done(self):
        """True once the call has completed (successfully or not). Never blocks long."""
        if not self._event.is_set() and self._seq is not None:
            self._stream._poll()
        return self._event.is_set()

    def wait(self, timeout=None):
        """Blocks until the call completed; returns its output buffer. timeout: seconds (None:
        no limit; strata's own deadline, STRATA_TIMEOUT, still applies). Raises TimeoutError
        when timeout passes first, StrataError when the call failed."""
        if not self._event.is_set():
            if self._seq is None:
                raise StrataError(Result.INVALID_USAGE, "the request is in an open group: it is "
                                  "launched when the outermost `with strata.group()` ends",
                                  "Request.wait")
            self._stream._wait_for(self, timeout)
        if not self._event.is_set():
            raise TimeoutError("%s not complete after %s s" % (self.name, timeout))
        if self._error is not None:
            raise self._error
        return self._output

    result = wait

    def exception(self, timeout=None):
        """The StrataError of a failed call, None for a successful one (waits like wait())."""
        try:
            self.wait(timeout)
        except StrataError as exc:
            return exc
        return None

    def add_done_callback(self, fn):
        """fn(request) once complete; runs at once when it is. Starts the stream's watcher."""
        with self._lock:
            if not self._event.is_set():
                self._callbacks.append(fn)
                fn = None
        if fn is not None:
            _run_callback(fn, self)
        else:
            self._stream.start_watcher()

    def __repr__(self):
        state = "pending" if not self._event.is_set() else (
            "failed" if self._error is not None else "done")
        return "<strata.Request %s %s>" % (self.name, state)


class Stream(_Handle):
    """A strata host stream (strataStreamCreate): an in-order queue of calls run by its own
    progress thread while the caller computes. All calls on one communicator that may be in
    flight together must go through one stream (every rank queues them in the same order).

    ``synchronize()`` blocks until everything queued has completed and raises the first error
    since the previous synchronize; ``query()`` says whether all is done without blocking.
    ``start_watcher()`` (done by Request.add_done_callback) starts a Python thread that
    synchronizes whenever work is queued and completes the Requests, so callbacks and futures
    complete without anyone calling synchronize. ``destroy()`` (or leaving ``with``) waits for
    the queued work and frees the stream.
    """

    def __init__(self):
        h = L.stream_t()
        _check(L.lib().strataStreamCreate(ctypes.byref(h)), "strataStreamCreate")
        self._handle = h.value
        self._cond = threading.Condition(threading.Lock())
        self._sync_lock = threading.Lock()  # one C synchronize/query at a time
        self._pending = collections.deque()
        self._issued = 0
        self._unreported = None
        self._watcher = None
        self._closing = False

    @property
    def handle(self):
        """The strataStream_t (int). ClosedError after destroy()."""
        h = self._handle
        if h is None:
            raise ClosedError("the stream was destroyed", "Stream")
        return h

    @property
    def closed(self):
        return self._handle is None

    # -- bookkeeping -------------------------------------------------------------------------
    def _submit(self, req):
        with self._cond:
            self._issued += 1
            req._seq = self._issued
            self._pending.append(req)
            self._cond.notify_all()

    def _complete_upto(self, n, error):
        done = []
        with self._cond:
            while self._pending and self._pending[0]._seq <= n:
                done.append(self._pending.popleft())
            if error is not None and self._unreported is None:
                self._unreported = error
            self._cond.notify_all()
        for req in done:
            req._finish(error)

    def _sync_once(self, blocking):
        """One C synchronize (blocking) or query; completes what it covers. Returns False when a
        query found work in flight (or another thread is synchronizing)."""
        if not self._sync_lock.acquire(blocking):
            return False
        try:
            h = self._handle
            if h is None:
                return True
            with self._cond:
                n = self._issued
            if blocking:
                rc = L.lib().strataStreamSynchronize(h)
            else:
                rc = L.lib().strataStreamQuery(h)
                if rc == Result.IN_PROGRESS:
                    return False
            err = None
            if rc != Result.SUCCESS:
                fn = "strataStreamSynchronize" if blocking else "strataStreamQuery"
                err = StrataError(rc, _last_error(), fn)
            self._complete_upto(n, err)
            return True
        finally:
            self._sync_lock.release()

    def _poll(self):
        self._sync_once(False)

    def _wait_for(self, req, timeout):
        if self._watcher is not None:
            req._event.wait(timeout)
            return
        if timeout is None:
            while not req._event.is_set():
                self._sync_once(True)
            return
        # A bounded wait cannot sit in a C synchronize: poll until the deadline.
        deadline = time.monotonic() + timeout
        while not req._event.is_set():
            self._sync_once(False)
            left = deadline - time.monotonic()
            if left <= 0:
                return
            req._event.wait(min(left, 0.001))

    def _raise_unreported(self):
        with self._cond:
            err, self._unreported = self._unreported, None
        if err is not None:
            raise err

    # -- public ------------------------------------------------------------------------------
    def synchronize(self):
        """Blocks until every call queued so far has completed. Raises the first StrataError of
        the stream's calls since the previous synchronize (a peer's timeout or failure; later
        calls on a failed communicator fail at once, strataInvalidUsage)."""
        self.handle  # ClosedError when destroyed
        if self._watcher is not None:
            with self._cond:
                target = self._issued
                while self._pending and self._pending[0]._seq <= target:
                    self._cond.wait()
        else:
            self._sync_once(True)
        self._raise_unreported()

    def query(self):
        """True when nothing queued is pending, False while work runs; never blocks. Raises
        like synchronize() when a call failed."""
        self.handle
        if self._watcher is not None:
            with self._cond:
                idle = not self._pending
        else:
            idle = self._sync_once(False)
        if idle:
            self._raise_unreported()
        return idle

    def start_watcher(self):
        """Starts (once) the daemon thread that completes Requests as the stream drains."""
        with self._cond:
            if self._watcher is not None or self._closing:
                return
            t = threading.Thread(target=self._watch, name="strata-stream-watcher", daemon=True)
            self._watcher = t
        t.start()

    def _watch(self):
        while True:
            with self._cond:
                while not self._pending and not self._closing:
                    self._cond.wait()
                if not self._pending and self._closing:
                    return
            self._sync_once(True)

    def destroy(self):
        """Waits for the queued work, stops the watcher, frees the stream (strataStreamDestroy).
        A no-op when already destroyed. Errors of the queued work are not raised here (they
        reach the Requests): call synchronize() first to see them."""
        if self._handle is None:
            return
        with self._cond:
            self._closing = True
            self._cond.notify_all()
        if self._watcher is not None and self._watcher is not threading.current_thread():
            self._watcher.join()
        self._sync_once(True)
        with self._sync_lock:
            h, self._handle = self._handle, None
        if h is not None:
            _check(L.lib().strataStreamDestroy(h), "strataStreamDestroy")

    close = destroy


# ---------------------------------------------------------------------------------------------
# Communicators
# ---------------------------------------------------------------------------------------------

TopoRank = collections.namedtuple("TopoRank", "node nnodes local_rank local_size")


def _make_config(timeout, name, tune_file=None, blocking=True):
    cfg = L.ConfigC()
    cfg.size = ctypes.sizeof(L.ConfigC)
    cfg.magic = L.CONFIG_MAGIC
    cfg.version = L.VERSION_CODE
    cfg.blocking = 1 if blocking else 0
    if timeout is None:
        cfg.timeoutMs = L.CONFIG_UNDEF_INT
    else:
        ms = int(round(float(timeout) * 1000))
        if ms < 0 or ms > 2**31 - 1:
            raise InvalidArgumentError("timeout %r s is outside 0 .. 2^31-1 ms" % (timeout,))
        cfg.timeoutMs = ms
    cfg.name = name.encode() if name is not None else None
    cfg.tuneFile = os.fsencode(tune_file) if tune_file is not None else None
    return cfg


class Communicator(_Handle):
    """A strata communicator: nranks ranks that call collectives together.

    ``Communicator(nranks, unique_id, rank, timeout=None, name=None, tune_file=None)`` is
    strataCommInitRank (strataCommInitRankConfig with any keyword): collective over all nranks
    ranks (processes or threads), which must call it concurrently with the same UniqueId; it
    blocks until all have joined. timeout: seconds, the deadline of every blocking wait on this
    communicator (default STRATA_TIMEOUT); name: a label for logs and errors; tune_file: a tuning
    table of `collbench tune` (default STRATA_TUNE_FILE; the same on every rank). Raises
    InvalidArgumentError for
    nranks < 1 or rank outside [0, nranks); StrataError strataInvalidUsage when ranks disagree
    on nranks, strataTimeout when some rank never joined (the message names it).

    Collectives take numpy arrays or CPU tensors (see the module docstring) and return the
    output buffer (stream=None) or a Request (stream given). After destroy() or abort() every
    method raises ClosedError. Use as a context manager to destroy on exit.
    """

    def __init__(self, nranks, unique_id, rank, *, timeout=None, name=None, tune_file=None):
        self._handle = None
        for what, v in (("nranks", nranks), ("rank", rank)):
            if not isinstance(v, int) or isinstance(v, bool):
                raise UnsupportedTypeError("%s must be an int, not %s" % (what, type(v).__name__))
        if nranks < 1:
            raise InvalidArgumentError("nranks must be >= 1, got %d" % nranks)
        if not 0 <= rank < nranks:
            raise InvalidArgumentError("rank %d is outside [0, %d)" % (rank, nranks))
        if not isinstance(unique_id, UniqueId):
            unique_id = UniqueId(unique_id)
        h = L.comm_t()
        if timeout is None and name is None and tune_file is None:
            rc = L.lib().strataCommInitRank(ctypes.byref(h), nranks, unique_id._c, rank)
            _check(rc, "strataCommInitRank")
        else:
            cfg = _make_config(timeout, name, tune_file)
            rc = L.lib().strataCommInitRankConfig(ctypes.byref(h), nranks, unique_id._c, rank,
                                                  ctypes.byref(cfg))
            _check(rc, "strataCommInitRankConfig")
        self._adopt(h.value)

    def _adopt(self, handle):
        self._handle = handle
        n, r = ctypes.c_int(), ctypes.c_int()
        _check(L.lib().strataCommCount(handle, ctypes.byref(n)), "strataCommCount")
        _check(L.lib().strataCommUserRank(handle, ctypes.byref(r)), "strataCommUserRank")
        self._size, self._rank = n.value, r.value
        self._ops = set()  # premul_sum handles not yet destroyed

    @classmethod
    def _from_handle(cls, handle):
        self = cls.__new__(cls)
        self._handle = None
        self._adopt(handle)
        return self

    @classmethod
    def init_all(cls, ndev):
        """strataCommInitAll: ndev communicators, ranks 0..ndev-1, all in this process. Drive them
        from one thread inside ``with strata.group():``, or one thread per communicator.
        Returns a list of ndev Communicators."""
        if not isinstance(ndev, int) or ndev < 1:
            raise InvalidArgumentError("ndev must be an int >= 1, got %r" % (ndev,))
        arr = (L.comm_t * ndev)()
        _check(L.lib().strataCommInitAll(arr, ndev, None), "strataCommInitAll")
        return [cls._from_handle(arr[i]) for i in range(ndev)]

    # -- state -------------------------------------------------------------------------------
    @property
    def handle(self):
        """The strataComm_t (int). ClosedError after destroy() or abort()."""
        h = self._handle
        if h is None:
            raise ClosedError("the communicator was destroyed or aborted", "Communicator")
        return h

    @property
    def closed(self):
        return self._handle is None

    @property
    def rank(self):
        """This rank's index in the communicator, 0 .. size-1."""
        return self._rank

    @property
    def size(self):
        """The number of ranks."""
        return self._size

    nranks = size

    def __repr__(self):
        return "<strata.Communicator rank %d of %d%s>" % (
            self._rank, self._size, " closed" if self.closed else "")

    def split(self, color, key=None, *, timeout=None, name=None, tune_file=None):
        """strataCommSplit: ranks with the same color form a new communicator, ordered by key
        (default: this rank). Collective over all ranks. color < 0 (STRATA_SPLIT_NOCOLOR = -1)
        returns None. timeout, name, tune_file: as for the constructor (default: the
        parent's)."""
        out = L.comm_t()
        key = self._rank if key is None else key
        cfg = None
        if timeout is not None or name is not None or tune_file is not None:
            cfg = _make_config(timeout, name, tune_file)
        rc = L.lib().strataCommSplit(self.handle, int(color), int(key), ctypes.byref(out),
                                     ctypes.byref(cfg) if cfg is not None else None)
        _check(rc, "strataCommSplit")
        return None if not out.value else Communicator._from_handle(out.value)

    def finalize(self):
        """strataCommFinalize: waits for this communicator's queued stream work; collectives
        are refused afterwards (destroy() still needed). Raises the first queued error."""
        _check(L.lib().strataCommFinalize(self.handle), "strataCommFinalize")

    def destroy(self):
        """strataCommDestroy: frees the communicator (waits for queued work at most its
        deadline, never for dead peers). Not collective. A no-op when already closed."""
        h, self._handle = self._handle, None
        if h is not None:
            _check(L.lib().strataCommDestroy(h), "strataCommDestroy")

    close = destroy

    def abort(self):
        """strataCommAbort: frees the communicator at once; a call blocked on it in another
        thread raises StrataError (strataRemoteError) within about 0.1 s. A no-op when closed."""
        h, self._handle = self._handle, None
        if h is not None:
            _check(L.lib().strataCommAbort(h), "strataCommAbort")

    def async_error(self):
        """strataCommGetAsyncError: Result.SUCCESS, or the first error of work run
        asynchronously (stream calls) on this communicator."""
        r = ctypes.c_int()
        _check(L.lib().strataCommGetAsyncError(self.handle, ctypes.byref(r)),
               "strataCommGetAsyncError")
        return Result(r.value)

    def topo_rank(self):
        """strataCommTopoRank: TopoRank(node, nnodes, local_rank, local_size) of this rank."""
        v = [ctypes.c_int() for _ in range(4)]
        _check(L.lib().strataCommTopoRank(self.handle, *[ctypes.byref(x) for x in v]),
               "strataCommTopoRank")
        return TopoRank(*[x.value for x in v])

    def phase_times(self):
        """strataCommGetPhaseTimes of the last completed collective: dict with algorithm (str),
        total (seconds), seconds (3 floats: the phases of "hier"), bytes (3 ints)."""
        t = L.PhaseTimesC()
        _check(L.lib().strataCommGetPhaseTimes(self.handle, ctypes.byref(t)),
               "strataCommGetPhaseTimes")
        return {"algorithm": t.algorithm.decode(), "total": t.totalSeconds,
                "seconds": list(t.seconds), "bytes": list(t.bytes)}

    def premul_sum(self, scalar, dtype):
        """strataRedOpCreatePreMulSum: an op (int handle) computing sum_r(scalar_r * x_r) for
        collectives of dtype (a DataType, its name, a numpy or torch dtype) on this
        communicator; each rank may pass its own scalar. Free it with destroy_op()."""
        dt = as_datatype(dtype)
        s = scalar_bytes(scalar, dt)
        op = ctypes.c_int()
        rc = L.lib().strataRedOpCreatePreMulSum(ctypes.byref(op), s.ctypes.data, int(dt),
                                                L.SCALAR_HOST_IMMEDIATE, self.handle)
        _check(rc, "strataRedOpCreatePreMulSum")
        self._ops.add(op.value)
        return op.value

    def destroy_op(self, op):
        """strataRedOpDestroy of a premul_sum handle."""
        _check(L.lib().strataRedOpDestroy(int(op), self.handle), "strataRedOpDestroy")
        self._ops.discard(int(op))

    # -- calls -------------------------------------------------------------------------------
    def _launch(self, fn, args, buffers, output, stream):
        """Calls the C function; returns output, or a Request when stream is given."""
        if stream is not None and not isinstance(stream, Stream):
            raise UnsupportedTypeError("stream must be a strata.Stream or None, not %s"
                                       % type(stream).__name__)
        sh = stream.handle if stream is not None else None
        rc = getattr(L.lib(), fn)(*args, self.handle, sh)
        _check(rc, fn)
        if stream is None:
            if _in_group():
                _group_frames()[-1].append(buffers)
            return output
        req = Request(stream, fn, buffers, output)
        if _in_group():
            _group_frames()[-1].append(req)
        else:
            stream._submit(req)
        return req

    def _block_of(self, sendbuf, s, fn):
        """A new buffer for one rank's block of sendbuf (described as s): sendbuf's shape without
        its first axis when that axis is the number of ranks, else flat."""
        if s.count % self._size:
            raise InvalidArgumentError("sendbuf has %d elements, not a multiple of the %d ranks"
                                       % (s.count, self._size), fn)
        n = s.count // self._size
        shape = tuple(sendbuf.shape)
        shape = shape[1:] if shape and shape[0] == self._size else (n,)
        return empty_like(s, n, shape)

    @staticmethod
    def _same_type(a, b, fn):
        if a.dtype != b.dtype:
            raise UnsupportedTypeError("%s and %s have different datatypes (%s, %s)"
                                       % (a.name, b.name, a.dtype.name.lower(),
                                          b.dtype.name.lower()), fn)

    def _root(self, root, what="root"):
        if not isinstance(root, int) or isinstance(root, bool):
            raise UnsupportedTypeError("%s must be an int, not %s" % (what, type(root).__name__))
        if not 0 <= root < self._size:
            raise InvalidArgumentError("%s %d is outside [0, %d)" % (what, root, self._size))
        return root

    def all_reduce(self, sendbuf, recvbuf=None, op="sum", stream=None):
        """strataAllReduce: every rank receives op over all ranks of sendbuf, element-wise.

        sendbuf: array or tensor of n elements, any shape. recvbuf: n elements of the same
        dtype (any shape), or None for in place (the result overwrites sendbuf). op: "sum",
        "prod", "max", "min", "avg" (floats: each input times 1/nranks, then summed; integers:
        the sum divided, truncating) or a premul_sum handle. Results are bitwise identical on
        every rank. Returns recvbuf (or sendbuf in place), or a Request with a stream.
        Raises UnsupportedTypeError for dtypes, InvalidArgumentError for sizes or layout."""
        fn = "strataAllReduce"
        s = describe(sendbuf, "sendbuf", writable=recvbuf is None, fn=fn)
        r = s if recvbuf is None else describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        if r.count != s.count:
            raise InvalidArgumentError("recvbuf has %d elements, sendbuf %d: all_reduce needs the "
                                       "same count" % (r.count, s.count), fn)
        args = (s.ptr, r.ptr, s.count, int(s.dtype), _op(op, self._ops))
        return self._launch(fn, args, (s, r), r.obj, stream)

    def all_reduce_compressed(self, sendbuf, recvbuf=None, compressor=None, op="sum",
                              stream=None):
        """strataAllReduceCompressed: all_reduce (sum or avg) with the inter-node phase
        compressed by compressor's codec (a strata.Compressor; see strata.compress).

        sendbuf, recvbuf: as all_reduce (recvbuf None: in place), float32, float16 or bfloat16,
        exactly compressor.count elements of compressor.dtype. op: "sum" or "avg". Inside a node
        the ranks reduce in full precision; only what crosses nodes is encoded, and every rank
        decodes the same bytes, so results are bitwise identical on all ranks. On one node the
        call is all_reduce. With error feedback the compressor's residual (this rank's share of
        what its encodings dropped) is added at its next call. The compressor is bound to the
        first communicator it is used with; several calls with one compressor may be queued in
        order. Returns recvbuf (sendbuf in place), or a Request with a stream (it keeps the
        compressor alive). Raises UnsupportedTypeError when compressor is no Compressor;
        StrataError strataInvalidArgument with the library's message for a count or dtype other
        than the compressor's, an op other than sum and avg, a compressor bound to another
        communicator; ClosedError for a closed compressor."""
        fn = "strataAllReduceCompressed"
        # a strata.Compressor (compress.py, which imports this module: recognised by its mark)
        if not getattr(type(compressor), "_strata_compressor", False):
            raise UnsupportedTypeError("compressor must be a strata.Compressor, not %s"
                                       % type(compressor).__name__, fn)
        s = describe(sendbuf, "sendbuf", writable=recvbuf is None, fn=fn)
        r = s if recvbuf is None else describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        if r.count != s.count:
            raise InvalidArgumentError("recvbuf has %d elements, sendbuf %d: all_reduce needs the "
                                       "same count" % (r.count, s.count), fn)
        args = (s.ptr, r.ptr, s.count, int(s.dtype), _op(op, self._ops), compressor.handle)
        out = self._launch(fn, args, (s, r, compressor), r.obj, stream)
        if stream is not None:
            compressor._track(out)
        return out

    def broadcast(self, sendbuf, recvbuf=None, root=0, stream=None):
        """strataBroadcast: root's n elements reach every rank.

        sendbuf: on root, the data; elsewhere it is not read and may be None when recvbuf is
        given. recvbuf: n elements of the same dtype, or None for in place (sendbuf receives).
        Returns recvbuf (sendbuf in place), or a Request with a stream."""
        fn = "strataBroadcast"
        root = self._root(root)
        if sendbuf is None and (recvbuf is None or self._rank == root):
            raise InvalidArgumentError("sendbuf may be None only on non-root ranks with a recvbuf",
                                       fn)
        r = describe(recvbuf if recvbuf is not None else sendbuf,
                     "recvbuf" if recvbuf is not None else "sendbuf", writable=True, fn=fn)
        s = r if sendbuf is None or recvbuf is None else describe(sendbuf, "sendbuf", fn=fn)
        self._same_type(s, r, fn)
        if s.count != r.count:
            raise InvalidArgumentError("recvbuf has %d elements, sendbuf %d: broadcast needs the "
                                       "same count" % (r.count, s.count), fn)
        sptr = s.ptr if sendbuf is not None else None
        args = (sptr, r.ptr, r.count, int(r.dtype), root)
        return self._launch(fn, args, (s, r), r.obj, stream)

    def reduce(self, sendbuf, recvbuf=None, op="sum", root=0, stream=None):
        """strataReduce: op over all ranks of sendbuf (n elements) into root's recvbuf.

        recvbuf: used on root only (n elements, same dtype; may be None elsewhere); None on root
        means in place (sendbuf receives the result). Non-root buffers are never written.
        Returns recvbuf (root; sendbuf in place) or None on other ranks, or a Request."""
        fn = "strataReduce"
        root = self._root(root)
        is_root = self._rank == root
        s = describe(sendbuf, "sendbuf", writable=is_root and recvbuf is None, fn=fn)
        if recvbuf is None:
            r = s if is_root else None
        else:
            r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        if r is not None:
            self._same_type(s, r, fn)
            if is_root and r.count != s.count:
                raise InvalidArgumentError("recvbuf has %d elements, sendbuf %d: reduce needs the "
                                           "same count on root" % (r.count, s.count), fn)
        rptr = r.ptr if r is not None else None
        args = (s.ptr, rptr, s.count, int(s.dtype), _op(op, self._ops), root)
        out = r.obj if (r is not None and is_root) else None
        return self._launch(fn, args, (s, r), out, stream)

    def all_gather(self, sendbuf, recvbuf=None, stream=None):
        """strataAllGather: rank r's n elements land at offset r*n of every rank's recvbuf.

        recvbuf: nranks*n elements of the same dtype, or None for a new array/tensor of shape
        (nranks, *sendbuf.shape). In place when sendbuf is recvbuf's block of this rank.
        Returns recvbuf, or a Request with a stream."""
        fn = "strataAllGather"
        s = describe(sendbuf, "sendbuf", fn=fn)
        if recvbuf is None:
            recvbuf = empty_like(s, s.count * self._size, (self._size,) + tuple(sendbuf.shape))
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        if r.count != s.count * self._size:
            raise InvalidArgumentError("recvbuf has %d elements; all_gather of %d elements over "
                                       "%d ranks needs %d" % (r.count, s.count, self._size,
                                                              s.count * self._size), fn)
        args = (s.ptr, r.ptr, s.count, int(s.dtype))
        return self._launch(fn, args, (s, r), r.obj, stream)

    def reduce_scatter(self, sendbuf, recvbuf=None, op="sum", stream=None):
        """strataReduceScatter: op over all ranks of sendbuf (nranks*n elements); rank r receives
        block r (elements r*n .. (r+1)*n-1) in recvbuf (n elements).

        recvbuf None: a new array/tensor, shape sendbuf.shape[1:] when sendbuf.shape[0] is
        nranks, else (n,). In place when recvbuf is sendbuf's block of this rank.
        Raises InvalidArgumentError when the counts do not fit. Returns recvbuf or a Request."""
        fn = "strataReduceScatter"
        s = describe(sendbuf, "sendbuf", fn=fn)
        if recvbuf is None:
            recvbuf = self._block_of(sendbuf, s, fn)
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        if s.count != r.count * self._size:
            raise InvalidArgumentError("sendbuf has %d elements; reduce_scatter into %d elements "
                                       "per rank over %d ranks needs %d"
                                       % (s.count, r.count, self._size, r.count * self._size), fn)
        args = (s.ptr, r.ptr, r.count, int(r.dtype), _op(op, self._ops))
        return self._launch(fn, args, (s, r), r.obj, stream)

    def alltoall(self, sendbuf, recvbuf=None, stream=None):
        """strataAlltoAll: block p of this rank's sendbuf goes to rank p, which receives it as its
        block r (this rank) of recvbuf. Never in place.

        sendbuf: nranks*n elements, any shape; block p is elements p*n .. (p+1)*n-1, so a
        sendbuf of shape (nranks, ...) sends sendbuf[p] to rank p. recvbuf: nranks*n elements of
        the same dtype that do not overlap sendbuf, or None for a new array/tensor of
        sendbuf's shape; recvbuf's block p then holds what rank p sent to this rank.
        Returns recvbuf, or a Request with a stream. Raises InvalidArgumentError when the
        counts do not fit or the buffers overlap (ranks that disagree on n get StrataError
        strataInvalidUsage from the library)."""
        fn = "strataAlltoAll"
        s = describe(sendbuf, "sendbuf", fn=fn)
        if s.count % self._size:
            raise InvalidArgumentError("sendbuf has %d elements, not a multiple of the %d ranks"
                                       % (s.count, self._size), fn)
        if recvbuf is None:
            recvbuf = empty_like(s, s.count, tuple(sendbuf.shape))
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        if r.count != s.count:
            raise InvalidArgumentError("recvbuf has %d elements, sendbuf %d: alltoall needs the "
                                       "same count" % (r.count, s.count), fn)
        if _overlap(s.ptr, s.nbytes, r.ptr, r.nbytes):
            raise InvalidArgumentError("sendbuf and recvbuf overlap: alltoall is never in place",
                                       fn)
        args = (s.ptr, r.ptr, s.count // self._size, int(s.dtype))
        return self._launch(fn, args, (s, r), r.obj, stream)

    def _counts(self, seq, what, fn):
        """A sequence of nranks element counts or displacements (ints >= 0; a list, tuple,
        range, 1-D numpy array or tensor of integers) as a list of ints."""
        if seq is None or isinstance(seq, (str, bytes)):
            raise UnsupportedTypeError("%s must be a sequence of %d ints, not %s"
                                       % (what, self._size, type(seq).__name__), fn)
        if isinstance(seq, np.ndarray) or is_tensor(seq):
            if len(seq.shape) != 1:
                raise InvalidArgumentError("%s must be 1-D, got shape %s"
                                           % (what, tuple(seq.shape)), fn)
            seq = seq.tolist()
        try:
            vals = list(seq)
        except TypeError:
            raise UnsupportedTypeError("%s must be a sequence of %d ints, not %s"
                                       % (what, self._size, type(seq).__name__), fn) from None
        if len(vals) != self._size:
            raise InvalidArgumentError("%s has %d entries; it needs one per rank (%d)"
                                       % (what, len(vals), self._size), fn)
        for p, v in enumerate(vals):
            if not isinstance(v, numbers.Integral) or isinstance(v, (bool, np.bool_)):
                raise UnsupportedTypeError("%s[%d] must be an int, not %s"
                                           % (what, p, type(v).__name__), fn)
            if not 0 <= v < 2**63:
                raise InvalidArgumentError("%s[%d] is %d: counts and displacements are elements, "
                                           ">= 0" % (what, p, v), fn)
        return [int(v) for v in vals]

    def alltoallv(self, sendbuf, sendcounts, recvcounts, recvbuf=None, sdispls=None,
                  rdispls=None, stream=None):
        """strataAlltoAllv: all-to-all with a count per rank pair (MPI_Alltoallv). This rank
        sends sendcounts[p] elements of sendbuf, starting at element sdispls[p], to rank p, and
        receives recvcounts[p] elements from rank p at element rdispls[p] of recvbuf.

        sendcounts, recvcounts, sdispls, rdispls: sequences of nranks ints >= 0 (lists, tuples,
        1-D integer arrays or tensors), in elements, never bytes; zero counts are allowed.
        sdispls / rdispls None: the blocks are packed in rank order (displacement p = the sum of
        the counts before p). sendcounts[p] on this rank must equal recvcounts[this rank] on rank
        p (the library fails every rank with strataInvalidUsage otherwise). sendbuf: any shape,
        seen flat. recvbuf: the same dtype, flat, large enough for every block, blocks not
        overlapping each other nor sendbuf's read ranges; None: a new 1-D array/tensor of
        max(rdispls[p] + recvcounts[p]) elements (sum(recvcounts) when packed); elements no
        block covers are left as they are. Returns recvbuf, or a Request with a stream. Raises
        UnsupportedTypeError / InvalidArgumentError for a bad sequence, a block outside its
        buffer, or overlapping blocks."""
        fn = "strataAlltoAllv"
        s = describe(sendbuf, "sendbuf", fn=fn)
        sc = self._counts(sendcounts, "sendcounts", fn)
        rc = self._counts(recvcounts, "recvcounts", fn)
        sd = _packed(sc) if sdispls is None else self._counts(sdispls, "sdispls", fn)
        rd = _packed(rc) if rdispls is None else self._counts(rdispls, "rdispls", fn)
        if recvbuf is None:
            recvbuf = empty_like(s, max([d + c for d, c in zip(rd, rc)] + [0]))
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        self._same_type(s, r, fn)
        for buf, counts, displs, cn, dn in ((s, sc, sd, "sendcounts", "sdispls"),
                                            (r, rc, rd, "recvcounts", "rdispls")):
            for p, (c, d) in enumerate(zip(counts, displs)):
                if c and d + c > buf.count:
                    raise InvalidArgumentError("%s[%d] + %s[%d] = %d + %d exceeds %s's %d elements"
                                               % (dn, p, cn, p, d, c, buf.name, buf.count), fn)
        ts = L.DATATYPE_SIZES[s.dtype]
        blocks = sorted((d, d + c, p) for p, (c, d) in enumerate(zip(rc, rd)) if c)
        for (start0, end0, p), (start1, end1, q) in zip(blocks, blocks[1:]):
            if start1 < end0:
                raise InvalidArgumentError("the blocks received from ranks %d and %d overlap in "
                                           "recvbuf (elements %d .. %d and %d .. %d)"
                                           % (p, q, start0, end0 - 1, start1, end1 - 1), fn)
        if _overlap(s.ptr, s.nbytes, r.ptr, r.nbytes):
            reads = sorted((s.ptr + d * ts, s.ptr + (d + c) * ts) for c, d in zip(sc, sd) if c)
            starts = [a for a, _ in reads]
            ends = list(itertools.accumulate((b for _, b in reads), max))
            for start, end, p in blocks:
                lo, hi = r.ptr + start * ts, r.ptr + end * ts
                i = bisect.bisect_left(starts, hi)  # reads starting before this block ends
                if i and ends[i - 1] > lo:
                    raise InvalidArgumentError("the block received from rank %d overlaps what "
                                               "sendbuf sends" % p, fn)
        arrays = [(ctypes.c_size_t * self._size)(*v) for v in (sc, sd, rc, rd)]
        args = (s.ptr, arrays[0], arrays[1], r.ptr, arrays[2], arrays[3], int(s.dtype))
        return self._launch(fn, args, (s, r, arrays), r.obj, stream)

    def gather(self, sendbuf, recvbuf=None, root=0, stream=None):
        """strataGather: every rank's n elements arrive in root's recvbuf, rank r's at offset
        r*n.

        sendbuf: n elements, any shape, on every rank. recvbuf: used on root only, nranks*n
        elements of the same dtype, or None there for a new array/tensor of shape
        (nranks, *sendbuf.shape); elsewhere it is not used and may be None. In place on root
        when sendbuf is recvbuf's block root. Returns recvbuf on root and None on the other
        ranks, or a Request with a stream."""
        fn = "strataGather"
        root = self._root(root)
        is_root = self._rank == root
        s = describe(sendbuf, "sendbuf", fn=fn)
        if recvbuf is None and is_root:
            recvbuf = empty_like(s, s.count * self._size, (self._size,) + tuple(sendbuf.shape))
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn) if recvbuf is not None else None
        if r is not None:
            self._same_type(s, r, fn)
            if is_root and r.count != s.count * self._size:
                raise InvalidArgumentError("recvbuf has %d elements; gather of %d elements over %d "
                                           "ranks needs %d on root" % (r.count, s.count,
                                                                        self._size,
                                                                        s.count * self._size), fn)
        args = (s.ptr, r.ptr if r is not None else None, s.count, int(s.dtype), root)
        return self._launch(fn, args, (s, r), r.obj if is_root else None, stream)

    def scatter(self, sendbuf, recvbuf=None, root=0, stream=None):
        """strataScatter: root's sendbuf holds nranks*n elements; rank r receives block r
        (elements r*n .. (r+1)*n-1) in recvbuf (n elements).

        sendbuf: read on root only (any shape; (nranks, ...) puts sendbuf[r] on rank r); may be
        None elsewhere when recvbuf is given. recvbuf: n elements of the same dtype, or None for
        a new array/tensor of shape sendbuf.shape[1:] when sendbuf.shape[0] is nranks, else (n,)
        (off root this needs a sendbuf of root's size). In place on root when recvbuf is
        sendbuf's block root. Returns recvbuf, or a Request with a stream."""
        fn = "strataScatter"
        root = self._root(root)
        is_root = self._rank == root
        if sendbuf is None and (is_root or recvbuf is None):
            raise InvalidArgumentError("sendbuf may be None only on non-root ranks with a recvbuf",
                                       fn)
        s = describe(sendbuf, "sendbuf", fn=fn) if sendbuf is not None else None
        if recvbuf is None:
            recvbuf = self._block_of(sendbuf, s, fn)
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        if s is not None:
            self._same_type(s, r, fn)
            if is_root and s.count != r.count * self._size:
                raise InvalidArgumentError("sendbuf has %d elements; scatter of %d elements per "
                                           "rank over %d ranks needs %d on root"
                                           % (s.count, r.count, self._size,
                                              r.count * self._size), fn)
        args = (s.ptr if s is not None else None, r.ptr, r.count, int(r.dtype), root)
        return self._launch(fn, args, (s, r), r.obj, stream)

    def send(self, sendbuf, peer, stream=None):
        """strataSend: n elements of sendbuf to rank peer (matched in order with its recv of the
        same byte count). Outside a group and without a stream it blocks until matched; sending
        to oneself needs a group or a stream. Returns sendbuf or a Request."""
        fn = "strataSend"
        peer = self._root(peer, "peer")
        s = describe(sendbuf, "sendbuf", fn=fn)
        return self._launch(fn, (s.ptr, s.count, int(s.dtype), peer), (s,), s.obj, stream)

    def recv(self, recvbuf, peer, stream=None):
        """strataRecv: n elements from rank peer into recvbuf. Returns recvbuf or a Request."""
        fn = "strataRecv"
        peer = self._root(peer, "peer")
        r = describe(recvbuf, "recvbuf", writable=True, fn=fn)
        return self._launch(fn, (r.ptr, r.count, int(r.dtype), peer), (r,), r.obj, stream)
