"""Loading libstrata.so and declaring its C API for ctypes.

Where the library comes from, first match wins:

1. ``STRATA_LIBRARY``: the full path of ``libstrata.so`` (a build tree's ``.libs/libstrata.so``,
   an installed ``/usr/local/lib/libstrata.so.1``). When set, nothing else is tried: a wrong path
   is an error, not a silent fallback to another copy.
2. An in-tree build next to this package: ``<source top>/.libs/libstrata.so``.
3. The dynamic linker's search (``LD_LIBRARY_PATH``, ``ldconfig``'s cache, the default
   folders): ``ctypes.util.find_library("strata")``, then ``libstrata.so.1`` and
   ``libstrata.so``.

The enums mirror include/strata.h (NCCL's values). ``LIB`` is loaded on first use through
``lib()`` so that importing the package never fails: the error comes with the first call, saying
where it looked.
"""

import ctypes
import ctypes.util
import enum
import os
import threading

# ---------------------------------------------------------------------------------------------
# Enums of strata.h
# ---------------------------------------------------------------------------------------------


class Result(enum.IntEnum):
    """strataResult_t."""

    SUCCESS = 0
    UNHANDLED_CUDA_ERROR = 1
    SYSTEM_ERROR = 2
    INTERNAL_ERROR = 3
    INVALID_ARGUMENT = 4
    INVALID_USAGE = 5
    REMOTE_ERROR = 6
    IN_PROGRESS = 7
    TIMEOUT = 8


# The C names, for messages: Result.TIMEOUT -> "strataTimeout".
RESULT_C_NAMES = {
    Result.SUCCESS: "strataSuccess",
    Result.UNHANDLED_CUDA_ERROR: "strataUnhandledCudaError",
    Result.SYSTEM_ERROR: "strataSystemError",
    Result.INTERNAL_ERROR: "strataInternalError",
    Result.INVALID_ARGUMENT: "strataInvalidArgument",
    Result.INVALID_USAGE: "strataInvalidUsage",
    Result.REMOTE_ERROR: "strataRemoteError",
    Result.IN_PROGRESS: "strataInProgress",
    Result.TIMEOUT: "strataTimeout",
}


class DataType(enum.IntEnum):
    """strataDataType_t."""

    INT8 = 0
    UINT8 = 1
    INT32 = 2
    UINT32 = 3
    INT64 = 4
    UINT64 = 5
    FLOAT16 = 6
    FLOAT32 = 7
    FLOAT64 = 8
    BFLOAT16 = 9


DATATYPE_SIZES = {
    DataType.INT8: 1, DataType.UINT8: 1, DataType.INT32: 4, DataType.UINT32: 4,
    DataType.INT64: 8, DataType.UINT64: 8, DataType.FLOAT16: 2, DataType.FLOAT32: 4,
    DataType.FLOAT64: 8, DataType.BFLOAT16: 2,
}


class RedOp(enum.IntEnum):
    """strataRedOp_t's built-in operations (strataRedOpCreatePreMulSum makes the others)."""

    SUM = 0
    PROD = 1
    MAX = 2
    MIN = 3
    AVG = 4


NUM_BUILTIN_OPS = 5


class Codec(enum.IntEnum):
    """strataCodec_t: the codecs of a compressed all-reduce's inter-node phase."""

    NONE = 0
    FP16 = 1
    BF16 = 2
    INT8 = 3
    TOPK = 4
    SIGN = 5

UNIQUE_ID_BYTES = 128          # STRATA_UNIQUE_ID_BYTES
CONFIG_MAGIC = 0x57a7a001      # STRATA_CONFIG_MAGIC
CONFIG_UNDEF_INT = -2147483648  # STRATA_CONFIG_UNDEF_INT
SCALAR_HOST_IMMEDIATE = 1      # strataScalarHostImmediate
VERSION_CODE = 100             # STRATA_VERSION_CODE this binding was written against (0.1.0)

# ---------------------------------------------------------------------------------------------
# Structures
# ---------------------------------------------------------------------------------------------


class UniqueIdC(ctypes.Structure):
    """strataUniqueId: 128 opaque bytes, passed by value."""

    _fields_ = [("internal", ctypes.c_char * UNIQUE_ID_BYTES)]


class ConfigC(ctypes.Structure):
    """strataConfig_t. The library checks size == sizeof(strataConfig_t): the fields must be the
    header's, in order (tests/python/test_binding.py compares them with include/strata.h)."""

    _fields_ = [
        ("size", ctypes.c_size_t),
        ("magic", ctypes.c_uint),
        ("version", ctypes.c_uint),
        ("blocking", ctypes.c_int),
        ("timeoutMs", ctypes.c_int),
        ("name", ctypes.c_char_p),
        ("tuneFile", ctypes.c_char_p),
    ]


class PhaseTimesC(ctypes.Structure):
    """strataPhaseTimes_t."""

    _fields_ = [
        ("algorithm", ctypes.c_char * 16),
        ("totalSeconds", ctypes.c_double),
        ("seconds", ctypes.c_double * 3),
        ("bytes", ctypes.c_size_t * 3),
    ]


class CompressParamsC(ctypes.Structure):
    """strataCompressParams_t."""

    _fields_ = [
        ("codec", ctypes.c_int),
        ("density", ctypes.c_double),
        ("block", ctypes.c_size_t),
        ("errorFeedback", ctypes.c_int),
    ]


comm_t = ctypes.c_void_p
compressor_t = ctypes.c_void_p
p_params = ctypes.POINTER(CompressParamsC)
stream_t = ctypes.c_void_p
result_t = ctypes.c_int
dtype_t = ctypes.c_int
op_t = ctypes.c_int
vp = ctypes.c_void_p
size_t = ctypes.c_size_t
c_int = ctypes.c_int
p_int = ctypes.POINTER(ctypes.c_int)
p_size_t = ctypes.POINTER(ctypes.c_size_t)

# name: (restype, argtypes)
_PROTOTYPES = {
    "strataGetVersion": (result_t, [p_int]),
    "strataGetErrorString": (ctypes.c_char_p, [result_t]),
    "strataGetLastError": (ctypes.c_char_p, [comm_t]),
    "strataGetUniqueId": (result_t, [ctypes.POINTER(UniqueIdC)]),
    "strataCommInitRank": (result_t, [ctypes.POINTER(comm_t), c_int, UniqueIdC, c_int]),
    "strataCommInitRankConfig": (result_t, [ctypes.POINTER(comm_t), c_int, UniqueIdC, c_int,
                                            ctypes.POINTER(ConfigC)]),
    "strataCommInitAll": (result_t, [ctypes.POINTER(comm_t), c_int, p_int]),
    "strataCommSplit": (result_t, [comm_t, c_int, c_int, ctypes.POINTER(comm_t),
                                   ctypes.POINTER(ConfigC)]),
    "strataCommFinalize": (result_t, [comm_t]),
    "strataCommDestroy": (result_t, [comm_t]),
    "strataCommAbort": (result_t, [comm_t]),
    "strataCommGetAsyncError": (result_t, [comm_t, p_int]),
    "strataCommCount": (result_t, [comm_t, p_int]),
    "strataCommUserRank": (result_t, [comm_t, p_int]),
    "strataCommTopoRank": (result_t, [comm_t, p_int, p_int, p_int, p_int]),
    "strataCommGetPhaseTimes": (result_t, [comm_t, ctypes.POINTER(PhaseTimesC)]),
    "strataRedOpCreatePreMulSum": (result_t, [p_int, vp, dtype_t, c_int, comm_t]),
    "strataRedOpDestroy": (result_t, [op_t, comm_t]),
    "strataAllReduce": (result_t, [vp, vp, size_t, dtype_t, op_t, comm_t, stream_t]),
    "strataBroadcast": (result_t, [vp, vp, size_t, dtype_t, c_int, comm_t, stream_t]),
    "strataReduce": (result_t, [vp, vp, size_t, dtype_t, op_t, c_int, comm_t, stream_t]),
    "strataAllGather": (result_t, [vp, vp, size_t, dtype_t, comm_t, stream_t]),
    "strataReduceScatter": (result_t, [vp, vp, size_t, dtype_t, op_t, comm_t, stream_t]),
    "strataAlltoAll": (result_t, [vp, vp, size_t, dtype_t, comm_t, stream_t]),
    "strataAlltoAllv": (result_t, [vp, p_size_t, p_size_t, vp, p_size_t, p_size_t, dtype_t,
                                   comm_t, stream_t]),
    "strataGather": (result_t, [vp, vp, size_t, dtype_t, c_int, comm_t, stream_t]),
    "strataScatter": (result_t, [vp, vp, size_t, dtype_t, c_int, comm_t, stream_t]),
    "strataSend": (result_t, [vp, size_t, dtype_t, c_int, comm_t, stream_t]),
    "strataRecv": (result_t, [vp, size_t, dtype_t, c_int, comm_t, stream_t]),
    "strataGroupStart": (result_t, []),
    "strataGroupEnd": (result_t, []),
    "strataStreamCreate": (result_t, [ctypes.POINTER(stream_t)]),
    "strataStreamSynchronize": (result_t, [stream_t]),
    "strataStreamQuery": (result_t, [stream_t]),
    "strataStreamDestroy": (result_t, [stream_t]),
    "strataCompressParse": (result_t, [ctypes.c_char_p, p_params]),
    "strataCompressFormat": (result_t, [p_params, ctypes.c_char_p, size_t]),
    "strataCompressWireBytes": (result_t, [p_params, size_t, dtype_t, p_size_t]),
    "strataCompressorCreate": (result_t, [ctypes.POINTER(compressor_t), p_params, size_t,
                                          dtype_t]),
    "strataCompressorReset": (result_t, [compressor_t]),
    "strataCompressorGetParams": (result_t, [compressor_t, p_params]),
    "strataCompressorDestroy": (result_t, [compressor_t]),
    "strataAllReduceCompressed": (result_t, [vp, vp, size_t, dtype_t, op_t, compressor_t,
                                             comm_t, stream_t]),
    "strataMemAlloc": (result_t, [ctypes.POINTER(vp), size_t]),
    "strataMemFree": (result_t, [vp]),
}

_lock = threading.Lock()
_lib = None
_lib_path = None


def _candidates():
    """(path or soname, how it was found) in the order they are tried."""
    env = os.environ.get("STRATA_LIBRARY")
    if env:
        return [(env, "STRATA_LIBRARY")]
    out = []
    top = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    intree = os.path.join(top, ".libs", "libstrata.so")
    if os.path.exists(intree):
        out.append((intree, "the source tree's build"))
    found = ctypes.util.find_library("strata")
    if found:
        out.append((found, "ctypes.util.find_library"))
    out.append(("libstrata.so.1", "the dynamic linker"))
    out.append(("libstrata.so", "the dynamic linker"))
    return out


def _declare(handle):
    for name, (restype, argtypes) in _PROTOTYPES.items():
        fn = getattr(handle, name)
        fn.restype = restype
        fn.argtypes = argtypes


def lib():
    """The loaded library (ctypes.CDLL: calls release the GIL). Raises OSError naming every
    place tried when none loads."""
    global _lib, _lib_path
    if _lib is not None:
        return _lib
    with _lock:
        if _lib is not None:
            return _lib
        errors = []
        for path, how in _candidates():
            try:
                handle = ctypes.CDLL(path)
                _declare(handle)
            except (OSError, AttributeError) as exc:
                errors.append("%s (%s): %s" % (path, how, exc))
                continue
            _lib, _lib_path = handle, path
            return _lib
        raise OSError("cannot load libstrata: " + "; ".join(errors) +
                      ". Set STRATA_LIBRARY to the full path of libstrata.so.")


def lib_path():
    """Path or soname of the loaded library (loads it)."""
    lib()
    return _lib_path
