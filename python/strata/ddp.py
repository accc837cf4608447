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

Casting: fp16_compress_hook and bfloat16_compress_hook cast the bucket to float16 / bfloat16
(half the bytes on the wire), all-reduce in that type (strata reduces in fp32 and rounds once per
partial sum to nearest even; the 1/world_size scaling comes first, so an fp16 mean never
overflows where it fits) and cast the result back into the bucket.

Compression of the inter-node phase (strataAllReduceCompressed, see strata.compress):

    state = strata.ddp.CompressState("int8")     # or "fp16", "bf16", "topk:0.01", "sign", ...
    model.register_comm_hook(state, strata.ddp.compress_hook)

compress_hook averages each bucket with strata's compressed all-reduce: full precision inside a
node, the codec's encoding across nodes, error feedback per bucket (one strata.Compressor per
bucket index, made at the bucket's first call and made anew when DDP rebuilds its buckets after
the first iteration and a bucket's size or dtype changes). Every rank decodes the same bytes, so
the parameters stay bitwise identical across ranks. On one node nothing is compressed.

PowerSGD (Vogels et al. 2019) with its two small all-reduces (P and Q) through strata:

    state = strata.ddp.PowerSGDState(matrix_approximation_rank=1, start_powerSGD_iter=2)
    model.register_comm_hook(state, strata.ddp.powerSGD_hook)

See powerSGD_hook for what comes from PyTorch and what is strata's.
"""

import threading

import torch
import torch.distributed as dist

from .comm import Communicator, Stream, UniqueId
from .compress import Compressor, CompressParams
from ._buffer import as_datatype
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


def _allreduce_bucket(state, bucket, wire_dtype, compress=False):
    """Queues the bucket's average on state.stream (compress: through the bucket's Compressor of
    the CompressState); a Future completed with the averaged bucket (the same tensor as
    bucket.buffer(), dtype unchanged), or with the StrataError."""
    buf = bucket.buffer()
    fut = torch.futures.Future()
    wire = buf if wire_dtype is None or buf.dtype == wire_dtype else buf.to(wire_dtype)
    try:
        if state.stream is None or state.comm is None:
            raise ClosedError("the StrataState was closed", "strata.ddp hook")
        if compress:
            comp = state.compressor(bucket.index(), wire.numel(), wire.dtype)
            req = state.comm.all_reduce_compressed(wire, compressor=comp, op=RedOp.AVG,
                                                   stream=state.stream)
            nbytes = comp.wire_bytes()
        else:
            req = state.comm.all_reduce(wire, op=RedOp.AVG, stream=state.stream)
            nbytes = wire.numel() * wire.element_size()
    except StrataError as exc:
        fut.set_exception(exc)
        return fut
    with state._lock:
        state.buckets += 1
        state.wire_bytes += nbytes

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


# ---------------------------------------------------------------------------------------------
# Compression of the inter-node phase
# ---------------------------------------------------------------------------------------------

_CODEC_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


class CompressState(StrataState):
    """A StrataState for compress_hook: the codec, and one strata.Compressor per bucket.

    CompressState(spec="int8", process_group=None, comm=None, timeout=None): spec is a codec
    spec as strata.Compressor reads it ("none", "fp16", "bf16", "int8[:block]",
    "topk:density", "sign[:block]", optionally ",noef"); it is checked here (InvalidArgumentError,
    a ValueError, before any communicator is made). The other arguments are StrataState's.

    ``compressors`` maps bucket.index() to its Compressor; ``compressor(index, count, dtype)``
    returns it, making it on first use and anew when the bucket's element count or dtype changed
    (DDP rebuilds its buckets after the first iteration); ``rebuilt`` counts those changes.
    ``wire_bytes`` counts the encoded bytes of this rank's buckets (Compressor.wire_bytes).
    ``reset()`` zeroes every residual (a new run over the same model); ``close()`` waits for
    queued buckets and frees the compressors, the stream, and the communicator it made.
    """

    def __init__(self, spec="int8", process_group=None, comm=None, timeout=None):
        self.params = CompressParams.parse(spec) if not isinstance(spec, CompressParams) else spec
        self.spec = self.params.spec
        self.compressors = {}
        self.rebuilt = 0
        super().__init__(process_group, comm, timeout)

    def compressor(self, index, count, dtype):
        """The Compressor of bucket index for count elements of dtype (made when missing or
        when the bucket changed; the replaced one is freed)."""
        old = self.compressors.get(index)
        if old is not None and old.count == count and old.dtype == as_datatype(dtype):
            return old
        comp = Compressor(self.params, count, dtype)
        if old is not None:
            self.rebuilt += 1
            try:
                old.close()
            except StrataError:
                pass  # still in flight: its Request holds it, garbage collection frees it
        self.compressors[index] = comp
        return comp

    def reset(self):
        """Zeroes the residual of every bucket's Compressor."""
        for comp in self.compressors.values():
            comp.reset()

    def close(self):
        """Waits for the queued buckets, frees the compressors, the stream and the communicator
        it made."""
        if self.stream is not None:
            self.stream.destroy()
            self.stream = None
        for comp in self.compressors.values():
            comp.close()
        self.compressors.clear()
        super().close()


def compress_hook(state, bucket):
    """DDP comm hook: the bucket's average over all ranks through strataAllReduceCompressed with
    state's codec (state: a CompressState), queued on state.stream; returns a Future as
    allreduce_hook does. Inside a node the ranks reduce in full precision; across nodes each
    bucket travels encoded, with error feedback (the bucket's Compressor keeps this rank's
    residual). float32, float16 and bfloat16 buckets travel as they are; float64 ones as float32
    (cast for the wire and back). Results are bitwise identical on every rank."""
    buf = bucket.buffer()
    return _allreduce_bucket(state, bucket, None if buf.dtype in _CODEC_DTYPES else torch.float32,
                             compress=True)


# ---------------------------------------------------------------------------------------------
# PowerSGD
# ---------------------------------------------------------------------------------------------


class PowerSGDState(StrataState):
    """A StrataState for powerSGD_hook: strata's communicator and stream, and PyTorch's
    torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook.PowerSGDState as ``psgd`` (its
    configuration, random generator, per-bucket error, P and Q memories, iteration and
    compression statistics: ``state.psgd.compression_stats()``).

    PowerSGDState(process_group=None, comm=None, timeout=None, matrix_approximation_rank=1,
    start_powerSGD_iter=1000, min_compression_rate=2, use_error_feedback=True, warm_start=True,
    orthogonalization_epsilon=0, random_seed=0): the first three are StrataState's, the others
    PyTorch's, with its meaning and its check (start_powerSGD_iter > 1 with error feedback or warm
    start: DDP's buckets change after the first iteration). Its process group is never used: the
    all-reduces go through strata.
    """

    def __init__(self, process_group=None, comm=None, timeout=None, matrix_approximation_rank=1,
                 start_powerSGD_iter=1000, min_compression_rate=2, use_error_feedback=True,
                 warm_start=True, orthogonalization_epsilon=0, random_seed=0):
        from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
        self.psgd = psgd.PowerSGDState(
            process_group=None, matrix_approximation_rank=matrix_approximation_rank,
            start_powerSGD_iter=start_powerSGD_iter, min_compression_rate=min_compression_rate,
            use_error_feedback=use_error_feedback, warm_start=warm_start,
            orthogonalization_epsilon=orthogonalization_epsilon, random_seed=random_seed)
        super().__init__(process_group, comm, timeout)


def _strata_allreduce_avg(state, tensor):
    """Blocking average of tensor (in place) on state's stream: in order with the buckets
    queued before it. Raises StrataError."""
    if state.stream is None or state.comm is None:
        raise ClosedError("the StrataState was closed", "strata.ddp.powerSGD_hook")
    if tensor.numel() == 0:
        return tensor
    state.comm.all_reduce(tensor, op=RedOp.AVG, stream=state.stream).wait()
    with state._lock:
        state.wire_bytes += tensor.numel() * tensor.element_size()
    return tensor


def _powersgd_bucket(state, bucket):
    """One bucket of PowerSGD (the steps of torch 1.13's powerSGD_hook, non-batched), its
    all-reduces through strata. Returns the bucket's buffer holding the approximated average."""
    from torch.distributed.algorithms.ddp_comm_hooks import powerSGD_hook as psgd
    ps = state.psgd
    inp = bucket.buffer()
    dtype = inp.dtype
    index = bucket.index()

    # Error feedback: add what the previous approximation of this bucket dropped.
    if ps.use_error_feedback:
        if index in ps.error_dict:
            inp.add_(ps.error_dict[index])
        else:
            ps.error_dict[index] = torch.zeros(inp.shape[0], dtype=dtype)
        inp_copy = inp.clone().detach()

    # Matrices worth compressing (PyTorch's rule), and the rest (vectors, small matrices).
    compress, plain = [], []
    p_size = q_size = 0
    for grad in bucket.gradients():
        m = grad.view(grad.shape[0], -1)
        n, k = m.shape
        rank = min(n, k, ps.matrix_approximation_rank)
        worth, before, after = psgd._should_compress(n, k, rank, ps.min_compression_rate)
        ps.total_numel_before_compression += before
        if worth:
            compress.append((m.unsqueeze(0), rank))
            p_size += n * rank
            q_size += k * rank
            ps.total_numel_after_compression += after
        else:
            plain.append(grad)
            ps.total_numel_after_compression += before
    plain_numel = sum(g.numel() for g in plain)

    # One buffer for the plain gradients and the Ps: the first all-reduce carries both (PyTorch
    # runs two; scaling a P by 1/world_size does not change its orthogonalization).
    first = torch.empty(plain_numel + p_size, dtype=dtype)
    off = 0
    for g in plain:
        first[off:off + g.numel()].copy_(g.reshape(-1))
        off += g.numel()
    new_q = not ps.warm_start or index not in ps.q_memory_dict
    if new_q:
        ps.q_memory_dict[index] = torch.empty(q_size, dtype=dtype)
    ps.p_memory_dict[index] = first[plain_numel:]
    ps_, qs = [], []
    p_off, q_off = plain_numel, 0
    for mat, rank in compress:
        _, n, k = mat.shape
        ps_.append(first[p_off:p_off + n * rank].view(1, n, rank))
        qs.append(ps.q_memory_dict[index][q_off:q_off + k * rank].view(1, k, rank))
        p_off += n * rank
        q_off += k * rank

    # Q: random (the same seed on every rank, a new one per step) or last step's (warm start).
    if new_q:
        with torch.random.fork_rng(devices=[]):
            torch.manual_seed(ps.rng.randint(1_000_000_000))
            for q in qs:
                q.copy_(torch.randn(*q.shape, dtype=dtype))
                psgd._orthogonalize(q, ps.orthogonalization_epsilon)
    else:
        for q in qs:
            psgd._orthogonalize(q, ps.orthogonalization_epsilon)

    # P = M Q, averaged with the plain gradients; orthogonalized; Q = M^T P, averaged.
    for (mat, _), q, p in zip(compress, qs, ps_):
        torch.bmm(mat, q, out=p)
    _strata_allreduce_avg(state, first)
    off = 0
    for g in plain:
        g.copy_(first[off:off + g.numel()].view_as(g))
        off += g.numel()
    for p in ps_:
        psgd._orthogonalize(p, ps.orthogonalization_epsilon)
    for (mat, _), p, q in zip(compress, ps_, qs):
        torch.bmm(mat.transpose(1, 2), p, out=q)
    _strata_allreduce_avg(state, ps.q_memory_dict[index])

    # M ~ P Q^T, written into the bucket's gradients (views of its buffer).
    for (mat, _), p, q in zip(compress, ps_, qs):
        torch.bmm(p, q.transpose(1, 2), out=mat)
    if ps.use_error_feedback:
        ps.error_dict[index] = inp_copy - inp
    if not ps.warm_start:
        ps.p_memory_dict.clear()
        ps.q_memory_dict.clear()
    with state._lock:
        state.buckets += 1
    return inp


def powerSGD_hook(state, bucket):
    """DDP comm hook: PowerSGD (Vogels, Karimireddy, Jaggi, NeurIPS 2019) rank-r compression of
    each bucket's matrices, with error feedback and warm start, its all-reduces through strata.
    state: a strata.ddp.PowerSGDState.

    Reused from PyTorch (torch.distributed.algorithms.ddp_comm_hooks.powerSGD_hook, 1.13): the
    state object (PowerSGDState: configuration, random generator, per-bucket error and P/Q
    memories, iteration counter, compression statistics), its rule for which gradients are worth
    compressing (_should_compress) and its orthogonalization (_orthogonalize: Gram-Schmidt, or
    QR above rank 2). Own (a port of its powerSGD_hook, non-batched): the steps of the hook, with
    these differences: every all-reduce goes through strata (the first start_powerSGD_iter
    iterations like allreduce_hook, queued on the stream; then two blocking averages per bucket
    on the state's stream); the uncompressed gradients travel with the Ps in the first all-reduce
    (PyTorch all-reduces them separately, three all-reduces per bucket) and the Ps are averaged,
    not summed (the orthogonalization that follows removes the scale); there is no CUDA path.

    Per step and bucket: M += error (error feedback); P = M Q (Q random with a seed shared by
    all ranks, or last step's Q with warm start, orthogonalized); average P over the ranks (with
    the small gradients); orthogonalize P; Q = M^T P; average Q; M = P Q^T; error = M_in - M.
    Every rank computes P and the approximation from the same all-reduced bytes, so the
    parameters stay bitwise identical across ranks. Returns a completed Future of the bucket's
    buffer, or one holding the StrataError."""
    ps = state.psgd
    if ps.iter < ps.start_powerSGD_iter:
        ps.maybe_increase_iter(bucket)
        return _allreduce_bucket(state, bucket, None)
    fut = torch.futures.Future()
    try:
        fut.set_result(_powersgd_bucket(state, bucket))
    except StrataError as exc:
        fut.set_exception(exc)
        return fut
    ps.maybe_increase_iter(bucket)
    return fut
