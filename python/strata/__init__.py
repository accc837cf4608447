"""strata from Python: a ctypes binding of libstrata (no compiled extension).

    import numpy as np, strata
    uid = strata.UniqueId.new()                    # on one rank; send bytes(uid) to the others
    comm = strata.Communicator(nranks, uid, rank)  # others: strata.UniqueId(data)
    x = np.ones(1024, dtype=np.float32)
    comm.all_reduce(x)                             # in place, blocking: x == nranks
    with strata.Stream() as s:                     # queued on a host stream
        req = comm.all_reduce(x, op="avg", stream=s)
        ...                                        # compute meanwhile
        req.wait()
    comm.destroy()

Buffers: numpy.ndarray or CPU torch.Tensor, C-contiguous, of int8, uint8, int32, uint32, int64,
uint64, float16, float32, float64 or bfloat16 (torch.bfloat16); counts are elements. Errors:
StrataError (result, message); bad input also TypeError / ValueError (UnsupportedTypeError,
InvalidArgumentError). The library: STRATA_LIBRARY (full path), else the source tree's
.libs/libstrata.so, else the dynamic linker's libstrata.so.1 (see strata._lib).
Compressed all-reduce (inter-node phase): strata.Compressor and
Communicator.all_reduce_compressed (see strata.compress). PyTorch DDP: strata.ddp.
"""

from ._lib import Result, DataType, RedOp, UNIQUE_ID_BYTES, lib_path
from .errors import StrataError, UnsupportedTypeError, InvalidArgumentError, ClosedError
from .comm import (UniqueId, Communicator, Stream, Request, TopoRank, group, get_version,
                   get_error_string)
from ._buffer import as_datatype
from ._lib import Codec
from .compress import (Compressor, CompressParams, compress_parse, compress_format,
                       compress_wire_bytes)

SPLIT_NOCOLOR = -1

__all__ = [
    "Result", "DataType", "RedOp", "UNIQUE_ID_BYTES", "SPLIT_NOCOLOR", "lib_path",
    "StrataError", "UnsupportedTypeError", "InvalidArgumentError", "ClosedError",
    "UniqueId", "Communicator", "Stream", "Request", "TopoRank", "group", "get_version",
    "get_error_string", "as_datatype", "Codec", "Compressor", "CompressParams",
    "compress_parse", "compress_format", "compress_wire_bytes",
]
