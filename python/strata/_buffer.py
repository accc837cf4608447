"""What a buffer handed to strata is: pointer, element count, datatype.

Accepted: numpy.ndarray and CPU torch.Tensor, C-contiguous (any shape; strata sees the flat
elements), of a type strata has:

    strata     numpy                        torch
    int8       int8                         torch.int8
    uint8      uint8                        torch.uint8
    int32      int32                        torch.int32
    uint32     uint32                       -
    int64      int64                        torch.int64
    uint64     uint64                       -
    float16    float16                      torch.float16
    float32    float32                      torch.float32
    float64    float64                      torch.float64
    bfloat16   ml_dtypes.bfloat16 (if any)  torch.bfloat16

Everything else (bool, int16, complex, object, strings, non-native byte order, quantized or
sparse tensors) raises UnsupportedTypeError (a TypeError); a non-contiguous buffer, a read-only
output, a CUDA or meta tensor raise InvalidArgumentError (a ValueError). torch is imported only
when the caller already has (a tensor can only exist then).
"""

import sys

import numpy as np

from ._lib import DataType, DATATYPE_SIZES
from .errors import UnsupportedTypeError, InvalidArgumentError

_NUMPY = {
    np.dtype(np.int8): DataType.INT8,
    np.dtype(np.uint8): DataType.UINT8,
    np.dtype(np.int32): DataType.INT32,
    np.dtype(np.uint32): DataType.UINT32,
    np.dtype(np.int64): DataType.INT64,
    np.dtype(np.uint64): DataType.UINT64,
    np.dtype(np.float16): DataType.FLOAT16,
    np.dtype(np.float32): DataType.FLOAT32,
    np.dtype(np.float64): DataType.FLOAT64,
}
_NUMPY_BACK = {v: k for k, v in _NUMPY.items()}

_torch_map = None


def _torch():
    return sys.modules.get("torch")


def _torch_types():
    global _torch_map
    if _torch_map is None:
        torch = _torch()
        _torch_map = {
            torch.int8: DataType.INT8,
            torch.uint8: DataType.UINT8,
            torch.int32: DataType.INT32,
            torch.int64: DataType.INT64,
            torch.float16: DataType.FLOAT16,
            torch.float32: DataType.FLOAT32,
            torch.float64: DataType.FLOAT64,
            torch.bfloat16: DataType.BFLOAT16,
        }
    return _torch_map


def is_tensor(obj):
    torch = _torch()
    return torch is not None and isinstance(obj, torch.Tensor)


class Buffer:
    """A checked view of one buffer: ptr (int), count (elements), dtype (DataType), obj (the
    caller's object, kept alive with the Buffer)."""

    __slots__ = ("obj", "ptr", "count", "dtype", "name")

    def __init__(self, obj, ptr, count, dtype, name):
        self.obj, self.ptr, self.count, self.dtype, self.name = obj, ptr, count, dtype, name

    @property
    def nbytes(self):
        return self.count * DATATYPE_SIZES[self.dtype]


def _supported_list():
    return ("int8, uint8, int32, uint32, int64, uint64, float16, float32, float64, bfloat16 "
            "(numpy.ndarray or CPU torch.Tensor)")


def describe(obj, name, writable=False, fn=None):
    """Checks obj and returns a Buffer. name ("sendbuf", "recvbuf") goes into the messages.
    writable: obj will be written (numpy's WRITEABLE flag must be set). fn: the function named
    in errors."""
    if isinstance(obj, np.ndarray):
        return _describe_numpy(obj, name, writable, fn)
    if is_tensor(obj):
        return _describe_tensor(obj, name, fn)
    raise UnsupportedTypeError(
        "%s: expected a numpy.ndarray or a torch.Tensor, got %s" % (name, type(obj).__name__), fn)


def _describe_numpy(arr, name, writable, fn):
    dt = arr.dtype
    dtype = _NUMPY.get(dt)
    if dtype is None and dt.name == "bfloat16" and dt.itemsize == 2:
        dtype = DataType.BFLOAT16  # ml_dtypes' bfloat16, when the caller has it
    if dtype is None:
        if dt.byteorder not in ("=", "|") and dt.newbyteorder("=") in _NUMPY:
            why = "non-native byte order %s" % dt.str
        else:
            why = "dtype %s" % dt
        raise UnsupportedTypeError("%s: %s is not supported; strata has %s" %
                                   (name, why, _supported_list()), fn)
    if not arr.flags.c_contiguous:
        raise InvalidArgumentError("%s: the array is not C-contiguous (strides %s); pass "
                                   "numpy.ascontiguousarray(a) and copy the result back"
                                   % (name, arr.strides), fn)
    if writable and not arr.flags.writeable:
        raise InvalidArgumentError("%s: the array is read-only, strata would write into it"
                                   % name, fn)
    return Buffer(arr, arr.ctypes.data if arr.size else 0, int(arr.size), dtype, name)


def _describe_tensor(t, name, fn):
    torch = _torch()
    if t.device.type != "cpu":
        raise InvalidArgumentError("%s: a %s tensor; strata's Python binding works on host "
                                   "memory: pass a CPU tensor (t.cpu()) and copy the result back"
                                   % (name, t.device), fn)
    if t.layout != torch.strided:
        raise UnsupportedTypeError("%s: layout %s is not supported (dense tensors only)"
                                   % (name, t.layout), fn)
    dtype = _torch_types().get(t.dtype)
    if dtype is None:
        raise UnsupportedTypeError("%s: dtype %s is not supported; strata has %s" %
                                   (name, t.dtype, _supported_list()), fn)
    if not t.is_contiguous():
        raise InvalidArgumentError("%s: the tensor is not contiguous (stride %s); pass "
                                   "t.contiguous() and copy the result back"
                                   % (name, t.stride()), fn)
    if getattr(t, "is_neg", None) is not None and t.is_neg():
        raise InvalidArgumentError("%s: a negative-bit view; call t.resolve_neg() first" % name, fn)
    n = t.numel()
    return Buffer(t, t.data_ptr() if n else 0, int(n), dtype, name)


def empty_like(buf, count, shape=None):
    """A new array or tensor of the same kind and dtype as buf.obj with count elements (shape
    when given)."""
    shape = (count,) if shape is None else shape
    if isinstance(buf.obj, np.ndarray):
        return np.empty(shape, dtype=buf.obj.dtype)
    torch = _torch()
    return torch.empty(shape, dtype=buf.obj.dtype)


def numpy_dtype(dtype):
    """numpy dtype of a DataType (None for bfloat16, which numpy lacks)."""
    return _NUMPY_BACK.get(DataType(dtype))


_NAMES = {d.name.lower(): d for d in DataType}
_NAMES.update({"float": DataType.FLOAT32, "double": DataType.FLOAT64, "half": DataType.FLOAT16,
               "int": DataType.INT32, "char": DataType.INT8})


def as_datatype(x):
    """A DataType from a DataType, its name ("float32", "bfloat16", NCCL's "float", "half"), a
    numpy dtype or a torch dtype. UnsupportedTypeError for another type or a datatype strata lacks;
    InvalidArgumentError (a ValueError) for an int that is no DataType."""
    if isinstance(x, DataType):
        return x
    if isinstance(x, int) and not isinstance(x, bool):
        try:
            return DataType(x)
        except ValueError:
            raise InvalidArgumentError("dtype %d is not a strata.DataType: 0..%d (%s)"
                                       % (x, len(DataType) - 1,
                                          ", ".join(d.name.lower() for d in DataType))) from None
    if isinstance(x, str):
        if x.lower() in _NAMES:
            return _NAMES[x.lower()]
        raise UnsupportedTypeError("unknown datatype name %r; strata has %s" %
                                   (x, ", ".join(d.name.lower() for d in DataType)))
    torch = _torch()
    if torch is not None and isinstance(x, torch.dtype):
        if x in _torch_types():
            return _torch_types()[x]
        raise UnsupportedTypeError("dtype %s is not supported; strata has %s" %
                                   (x, _supported_list()))
    try:
        dt = np.dtype(x)
    except TypeError:
        raise UnsupportedTypeError("not a datatype: %r" % (x,)) from None
    if dt in _NUMPY:
        return _NUMPY[dt]
    raise UnsupportedTypeError("dtype %s is not supported; strata has %s" %
                               (dt, _supported_list()))


def scalar_bytes(value, dtype):
    """One scalar of DataType dtype as a ctypes-ready numpy array (bfloat16: float32 rounded to
    nearest even, as strata rounds)."""
    dtype = DataType(dtype)
    if dtype == DataType.BFLOAT16:
        bits = np.array([value], dtype=np.float32).view(np.uint32)
        if np.isnan(np.float32(value)):
            return np.array([0x7fc0], dtype=np.uint16)
        rounded = (bits + np.uint32(0x7fff) + ((bits >> np.uint32(16)) & np.uint32(1)))
        return (rounded >> np.uint32(16)).astype(np.uint16)
    return np.array([value], dtype=_NUMPY_BACK[dtype])
