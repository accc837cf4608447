"""strata under PyTorch DistributedDataParallel: communication hooks that all-reduce the gradient
buckets through strata instead of the process group.

    import strata.ddp
    state = strata.ddp.StrataState()       # after dist.init_process_group(...); collective
    model.register_comm_hook(state, strata.ddp.allreduce_hook)   # fp16_/bfloat16_compress_hook

The process group (gloo on CPU) keeps everything else: DDP's parameter broadcast at construction,
the unique id's broadcast here, the user's own collectives. Only the gradient all-reduce goes
through strata.

How a bucket travels. DDP calls the hook from the backward pass as soon as a bucket's gradients
are all computed; buckets fill in reverse layer order, so the last layers' bucket is first. The
hook queues ``strataAllReduce(bucket, avg)`` on the state's strata host stream and returns a
``torch.futures.Future`` at once: the backward pass goes on computing earlier layers while the
stream's thread moves the bucket. The stream's watcher thread completes the future when the
reduction is in place (a stream reports completion when it drains, so a bucket's future may
complete together with a later bucket's); DDP waits for all futures at the end of backward and
copies the averaged bucket into the gradients. Buffers stay referenced until completion.

Averaging: strataAvg multiplies every rank's input by 1/world_size and sums (as DDP's own
reduction does), and strata gives every rank bitwise the same result, so the parameters of all
ranks stay bitwise identical step after step.

Compression: fp16_compress_hook and bfloat16_compress_hook cast the bucket to float16 / bfloat16
(half the bytes on the wire), all-reduce in that type (strata reduces in fp32 and rounds once per
partial sum to nearest even; the 1/world_size scaling comes first, so an fp16 mean never
overflows where it fits) and cast the result back into the bucket.
"""

import threading

import torch
import torch.distributed as dist

from .comm import Communicator, Stream, UniqueId
from ._lib import RedOp, Result, UNIQUE_ID_BYTES
from .errors import ClosedError, StrataError


def _global_rank(group, group_rank):
    if group is None or group is dist.group.WORLD:
        return group_rank
    get = getattr(dist, "get_global_rank", None)
    if get is None:
        get = dist.distributed_c10d._get_global_rank
    return get(group, group_rank)


def init_comm(process_group=None, timeout=None, name="ddp"):
    """A strata Communicator over the ranks of process_group (default: the world), in the same
    rank order. Collective over the group: its rank 0 makes the UniqueId, the 128 id bytes reach
    the others through ``dist.broadcast`` of a uint8 tensor on the group (gloo: a CPU tensor),
    then every rank joins. timeout: seconds, strata's deadline for every wait (default
    STRATA_TIMEOUT). Raises StrataError on every rank when strata cannot form the communicator
    (also when rank 0 cannot make the id: the others are told, they do not wait)."""
    rank = dist.get_rank(process_group)
    size = dist.get_world_size(process_group)
    # Byte 0 says whether rank 0 has an id: if it could not make one, the others must not wait
    # for a root that never comes, they fail too.
    data = torch.zeros(1 + UNIQUE_ID_BYTES, dtype=torch.uint8)
    failure = None
    if rank == 0:
        try:
            uid = bytes(UniqueId.new())
            data[0] = 1
            data[1:] = torch.frombuffer(bytearray(uid), dtype=torch.uint8)
        except StrataError as exc:
            failure = exc
    dist.broadcast(data, src=_global_rank(process_group, 0), group=process_group)
    if failure is not None:
        raise failure
    if data[0].item() != 1:
        raise StrataError(Result.INVALID_USAGE, "rank 0 of the group could not make a strata "
                          "unique id (its error says why)", "strata.ddp.init_comm")
    return Communicator(size, UniqueId(data[1:].numpy().tobytes()), rank, timeout=timeout,
                        name=name)


class StrataState:
    """The state DDP hands to the hooks: a strata communicator and host stream.

    StrataState(process_group=None, comm=None, timeout=None): makes a communicator over
    process_group's ranks with init_comm() (collective: call it on every rank) unless comm is
    given, and one host stream whose watcher completes the futures. Counters for reports:
    ``buckets`` (hook calls) and ``wire_bytes`` (bytes this rank handed to strata).
    ``close()`` waits for queued work and frees the stream and the communicator it made.
    """

    def __init__(self, process_group=None, comm=None, timeout=None):
        self.owns_comm = comm is None
        self.comm = init_comm(process_group, timeout) if comm is None else comm
        self.stream = Stream()
        self.stream.start_watcher()
        self.buckets = 0
        self.wire_bytes = 0
        self._lock = threading.Lock()

    @property
    def world_size(self):
        return self.comm.size

    def close(self):
        """Waits for the queued buckets, frees the stream, and the communicator if it made it."""
        if self.stream is not None:
            self.stream.destroy()
            self.stream = None
        if self.owns_comm and self.comm is not None:
            self.comm.destroy()
        self.comm = None

    def __getstate__(self):
        raise TypeError("a StrataState holds a communicator and cannot be pickled")


def _allreduce_bucket(state, bucket, wire_dtype):
    """Queues the bucket's average on state.stream; a Future completed with the averaged bucket
    (the same tensor as bucket.buffer(), dtype unchanged), or with the StrataError."""
    buf = bucket.buffer()
    fut = torch.futures.Future()
    wire = buf if wire_dtype is None or buf.dtype == wire_dtype else buf.to(wire_dtype)
    try:
        if state.stream is None or state.comm is None:
            raise ClosedError("the StrataState was closed", "strata.ddp hook")
        req = state.comm.all_reduce(wire, op=RedOp.AVG, stream=state.stream)
    except StrataError as exc:
        fut.set_exception(exc)
        return fut
    with state._lock:
        state.buckets += 1
        state.wire_bytes += wire.numel() * wire.element_size()

    def done(request):
        # The watcher thread: keep it alive whatever happens, and always complete the future.
        try:
            exc = request.exception()
            if exc is None and wire is not buf:
                buf.copy_(wire)
        except Exception as err:  # noqa: BLE001 - handed to DDP through the future
            exc = err
        if exc is not None:
            fut.set_exception(exc)
        else:
            fut.set_result(buf)

    req.add_done_callback(done)
    return fut


def allreduce_hook(state, bucket):
    """DDP comm hook: the bucket's average over all ranks through strata (strataAllReduce, avg,
    in the bucket's dtype), queued on state.stream. state: a StrataState. bucket:
    torch.distributed.GradBucket (its buffer(): a flat contiguous CPU tensor). Returns a
    torch.futures.Future[Tensor] completed with the averaged buffer (in place), or with the
    StrataError when strata fails (a peer's timeout, a dead peer)."""
    return _allreduce_bucket(state, bucket, None)


def fp16_compress_hook(state, bucket):
    """As allreduce_hook, with the bucket cast to torch.float16 on the wire (half the bytes of
    fp32) and the averaged result cast back into the bucket. Values beyond float16's range
    (65504) become inf; below 6e-8 they flush to zero."""
    return _allreduce_bucket(state, bucket, torch.float16)


def bfloat16_compress_hook(state, bucket):
    """As allreduce_hook, with the bucket cast to torch.bfloat16 on the wire (fp32's range, 8
    significant bits) and the averaged result cast back into the bucket. (Not named
    bf16_compress_hook: DDP's register_comm_hook refuses any hook of that name without CUDA 11
    and NCCL 2.10, whatever it does.)"""
    return _allreduce_bucket(state, bucket, torch.bfloat16)


HOOKS = {"fp32": allreduce_hook, "fp16": fp16_compress_hook, "bf16": bfloat16_compress_hook}
