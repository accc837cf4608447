"""Compression of an all-reduce's inter-node phase: codec specs and per-bucket compressors.

    import strata
    with strata.Compressor("int8", x.size, x.dtype) as c:   # one per gradient bucket
        comm.all_reduce_compressed(x, compressor=c, op="avg")  # in place; see Communicator

A spec is what strataCompressParse reads (collbench's --compress spells it the same):

    none            exact (the compressed scheme without loss; for tests)
    fp16, bf16      2 bytes per element
    int8[:block]    one signed byte per element and a float32 scale per block (default 256)
    topk:density    the ceil(density x n) largest magnitudes, as index + value
    sign[:block]    one bit per element and a float32 scale (mean |x|) per block

optionally followed by ",noef" (no error feedback; ",ef", the default, keeps it). Only what crosses
the network is compressed: inside a node the ranks reduce in full precision, and on one node
the call is an ordinary all-reduce. include/strata.h ("Compression of the inter-node phase") is
the manual: the wire bytes of each codec, the error bounds, bitwise identity across ranks.

A Compressor holds the state of one bucket on one rank: its codec and, with error feedback, the
residual (count float32 values) that the codec dropped from this rank's encodings, added back at
its next call. It is bound to the first communicator it is used with. Its buffers must be
float32, float16 or bfloat16 host memory of exactly count elements.

Errors: a spec or parameters the library refuses raise InvalidArgumentError (a ValueError) with
the library's message (strataGetLastError); a wrong Python type raises UnsupportedTypeError (a
TypeError); a closed compressor raises ClosedError.
"""

import collections
import ctypes
import numbers

from . import _lib as L
from ._buffer import as_datatype
from ._handle import _Handle, _last_error
from .errors import StrataError, ClosedError, InvalidArgumentError, UnsupportedTypeError

Codec = L.Codec
Result = L.Result

_SPEC_BYTES = 64  # strataCompressFormat: 32 always suffice


def _check(rc, fn):
    """strataInvalidArgument becomes InvalidArgumentError (a ValueError: the spec or parameters
    are wrong), anything else StrataError; both carry strataGetLastError's line."""
    if rc == Result.SUCCESS:
        return
    if rc == Result.INVALID_ARGUMENT:
        raise InvalidArgumentError(_last_error(), fn)
    raise StrataError(rc, _last_error(), fn)


class CompressParams(collections.namedtuple("CompressParams",
                                            "codec density block error_feedback")):
    """strataCompressParams_t: codec (a strata.Codec), density (topk: the fraction kept, in
    (0, 1]), block (int8, sign: elements per scale), error_feedback (bool).

    ``CompressParams.parse("topk:0.01")`` reads a spec (strataCompressParse); ``params.spec``
    writes it back (strataCompressFormat). The library checks the values when they are used."""

    __slots__ = ()

    @classmethod
    def parse(cls, spec):
        """strataCompressParse. UnsupportedTypeError when spec is no str; InvalidArgumentError
        with the library's reason (e.g. "the topk density is outside (0, 1]") when it cannot
        read it."""
        if not isinstance(spec, str):
            raise UnsupportedTypeError("a codec spec is a str such as \"int8\" or \"topk:0.01\", "
                                       "not %s" % type(spec).__name__, "strataCompressParse")
        try:
            data = spec.encode("ascii")
        except UnicodeEncodeError:
            raise InvalidArgumentError("codec spec %r is not ASCII" % spec,
                                       "strataCompressParse") from None
        if b"\0" in data:
            raise InvalidArgumentError("codec spec %r holds a NUL" % spec, "strataCompressParse")
        c = L.CompressParamsC()
        _check(L.lib().strataCompressParse(data, ctypes.byref(c)), "strataCompressParse")
        return cls._from_c(c)

    @classmethod
    def _from_c(cls, c):
        try:
            codec = Codec(c.codec)
        except ValueError:
            codec = int(c.codec)
        return cls(codec, float(c.density), int(c.block), bool(c.errorFeedback))

    def _to_c(self, fn):
        c = L.CompressParamsC()
        for name, v in (("codec", self.codec), ("block", self.block)):
            if not isinstance(v, numbers.Integral) or isinstance(v, bool):
                raise UnsupportedTypeError("CompressParams.%s must be an int, not %s"
                                           % (name, type(v).__name__), fn)
        if not isinstance(self.density, numbers.Real):
            raise UnsupportedTypeError("CompressParams.density must be a number, not %s"
                                       % type(self.density).__name__, fn)
        if not 0 <= self.block < 2**64 or not -2**31 <= self.codec < 2**31:
            raise InvalidArgumentError("CompressParams: codec %d or block %d out of range"
                                       % (self.codec, self.block), fn)
        c.codec = int(self.codec)
        c.density = float(self.density)
        c.block = int(self.block)
        c.errorFeedback = 1 if self.error_feedback else 0
        return c

    @property
    def spec(self):
        """The spec strataCompressParse reads back to these parameters (strataCompressFormat);
        InvalidArgumentError for parameters the library refuses."""
        buf = ctypes.create_string_buffer(_SPEC_BYTES)
        c = self._to_c("strataCompressFormat")
        _check(L.lib().strataCompressFormat(ctypes.byref(c), buf, _SPEC_BYTES),
               "strataCompressFormat")
        return buf.value.decode()

    def __str__(self):
        return self.spec


def _params(spec_or_params, fn):
    if isinstance(spec_or_params, CompressParams):
        return spec_or_params
    if isinstance(spec_or_params, str):
        return CompressParams.parse(spec_or_params)
    raise UnsupportedTypeError("expected a codec spec (str) or a strata.CompressParams, not %s"
                               % type(spec_or_params).__name__, fn)


def _count(count, fn):
    if not isinstance(count, numbers.Integral) or isinstance(count, bool):
        raise UnsupportedTypeError("count must be an int (elements), not %s"
                                   % type(count).__name__, fn)
    if count < 0 or count >= 2**63:
        raise InvalidArgumentError("count %d: a count of elements is >= 0" % count, fn)
    return int(count)


def compress_parse(spec):
    """strataCompressParse: the CompressParams of a spec ("int8", "topk:0.01", "sign,noef")."""
    return CompressParams.parse(spec)


def compress_format(params):
    """strataCompressFormat: the spec of a CompressParams (or of a spec: its canonical form)."""
    return _params(params, "strataCompressFormat").spec


def compress_wire_bytes(spec_or_params, count, dtype):
    """strataCompressWireBytes: bytes on the wire for one encoded range of count elements of
    dtype (float32, float16, bfloat16: a DataType, its name, a numpy or torch dtype); 0 for 0."""
    fn = "strataCompressWireBytes"
    c = _params(spec_or_params, fn)._to_c(fn)
    n = _count(count, fn)
    dt = as_datatype(dtype)
    out = ctypes.c_size_t()
    _check(L.lib().strataCompressWireBytes(ctypes.byref(c), n, int(dt), ctypes.byref(out)), fn)
    return out.value


class Compressor(_Handle):
    """The compression state of one bucket on this rank (strataCompressorCreate).

    ``Compressor(spec_or_params, count, dtype)``: spec_or_params a spec string or CompressParams;
    count the bucket's elements (>= 1); dtype float32, float16 or bfloat16 (a DataType, its name,
    a numpy or torch dtype). With error feedback it holds count float32 residuals (zero at
    creation). Pass it to Communicator.all_reduce_compressed with buffers of exactly count
    elements of dtype; it is bound to the first communicator it is used with.

    ``params`` (CompressParams) and ``spec`` (str) say what it does, ``count`` and ``dtype``
    what it takes; ``wire_bytes(count=None)`` gives the encoded bytes of count elements (default:
    the whole bucket); ``reset()`` zeroes the residual (a new run over the same buckets);
    ``close()`` (or leaving ``with``, or garbage collection) frees it. reset() and close() refuse
    (StrataError strataInvalidUsage) while a call using it that was queued on a stream has not
    completed: wait for its Request first. Inside an open ``strata.group()`` they must wait for the
    group's end (the binding cannot tell).
    """

    _strata_compressor = True  # what Communicator.all_reduce_compressed checks

    def __init__(self, spec_or_params, count, dtype):
        fn = "strataCompressorCreate"
        self._handle = None
        params = _params(spec_or_params, fn)
        c = params._to_c(fn)
        self.count = _count(count, fn)
        self.dtype = as_datatype(dtype)
        self._requests = []
        h = L.compressor_t()
        _check(L.lib().strataCompressorCreate(ctypes.byref(h), ctypes.byref(c), self.count,
                                              int(self.dtype)), fn)
        self._handle = h.value

    @property
    def handle(self):
        """The strataCompressor_t (int). ClosedError after close()."""
        h = self._handle
        if h is None:
            raise ClosedError("the compressor was closed", "Compressor")
        return h

    @property
    def closed(self):
        return self._handle is None

    @property
    def params(self):
        """CompressParams (strataCompressorGetParams)."""
        c = L.CompressParamsC()
        _check(L.lib().strataCompressorGetParams(self.handle, ctypes.byref(c)),
               "strataCompressorGetParams")
        return CompressParams._from_c(c)

    @property
    def spec(self):
        """The spec of its parameters, e.g. "topk:0.01" or "int8,noef"."""
        return self.params.spec

    def wire_bytes(self, count=None):
        """Bytes on the wire for one encoded range of count elements (default: self.count) of
        this compressor's codec and dtype (strataCompressWireBytes)."""
        return compress_wire_bytes(self.params, self.count if count is None else count,
                                   self.dtype)

    # -- calls in flight ---------------------------------------------------------------------
    def _track(self, req):
        self._requests = [r for r in self._requests if not r._event.is_set()]
        self._requests.append(req)

    def _idle(self, fn):
        pending = [r for r in self._requests if not r._event.is_set() and not r.done()]
        self._requests = pending
        if pending:
            raise StrataError(Result.INVALID_USAGE, "%d call(s) using this compressor are still in "
                              "flight (%s): wait for their Requests first"
                              % (len(pending), ", ".join(repr(r) for r in pending)), fn)

    def reset(self):
        """strataCompressorReset: the residual becomes zero."""
        fn = "strataCompressorReset"
        h = self.handle
        self._idle(fn)
        _check(L.lib().strataCompressorReset(h), fn)

    def destroy(self):
        """strataCompressorDestroy. A no-op when closed already."""
        if self._handle is None:
            return
        self._idle("strataCompressorDestroy")
        h, self._handle = self._handle, None
        _check(L.lib().strataCompressorDestroy(h), "strataCompressorDestroy")

    close = destroy

    def __repr__(self):
        if self._handle is None:
            return "<strata.Compressor closed>"
        return "<strata.Compressor %s, %d x %s>" % (self.spec, self.count, self.dtype.name.lower())
