/*
 * strata.h - the public API of strata, a hierarchical collective-communication runtime.
 *
 * The API has NCCL's shape: the same names with the prefix "strata" instead of "nccl", the same
 * argument order and the same numeric enum values, so a port from NCCL is a rename
 * (ncclAllReduce -> strataAllReduce, ncclBfloat16 -> strataBfloat16, NCCL_SPLIT_NOCOLOR ->
 * STRATA_SPLIT_NOCOLOR). This header is the manual: each declaration gives units, aliasing rules,
 * the stream rule and every result it can return.
 *
 * Conventions used throughout:
 *  - count arguments are in ELEMENTS of the datatype, never bytes; they are size_t, so counts above
 *    2^31 elements work.
 *  - Buffers are host memory or device memory (CUDA; STRATA_DEVICE, README "GPU"), all of one
 *    kind in one call, device buffers on the device that was current when the communicator was
 *    made (else strataInvalidArgument naming the buffer and both devices). "In place" follows NCCL: AllReduce, Broadcast and
 *    Reduce are in place when sendbuff == recvbuff; AllGather when sendbuff == recvbuff +
 *    rank * sendcount (in elements); ReduceScatter when recvbuff == sendbuff + rank * recvcount;
 *    Gather on root when sendbuff == recvbuff + root * count, Scatter on root when recvbuff ==
 *    sendbuff + root * count; AlltoAll and AlltoAllv never (their overlaps are refused).
 *    Any other overlap between sendbuff and recvbuff is undefined, as in NCCL (except on the
 *    root of Gather and Scatter, see there).
 *  - stream, for host buffers: NULL makes the call return when the operation is complete and its
 *    result is in place. A strata host stream (strataStreamCreate) queues the operation, in call
 *    order, on that stream's progress thread and the call returns at once; buffers must stay valid
 *    and untouched until strataStreamSynchronize returns or strataStreamQuery says strataSuccess.
 *    A CUDA stream with host buffers is strataInvalidUsage.
 *  - stream, for device buffers: the user's cudaStream_t (strataStream_t is its type), NULL being
 *    the legacy default stream, as NCCL: the call returns once the operation is queued; it starts
 *    when the stream reaches it (work queued on the stream before it has produced the inputs) and
 *    work queued on the stream after it sees the result. In between the stream waits on a gate
 *    that strata's device queue opens when the operation is over, failed, or will not run (the
 *    communicator failed or was aborted): strata never leaves a stream blocked. A failure after
 *    the call returned is the communicator's asynchronous error (strataCommGetAsyncError). A strata
 *    host stream with device buffers, and a stream being captured into a CUDA graph, are
 *    strataInvalidUsage; a pointer that is neither a live strata host stream nor, as far as the
 *    driver can tell, a CUDA stream is strataInvalidArgument (the driver cannot tell every bad
 *    pointer: pass a cudaStream_t or NULL). Ranks of one process sharing a GPU (strataCommInitAll)
 *    should use non-blocking streams (cudaStreamNonBlocking) and cudaMemcpyAsync on them: while a
 *    gate holds one rank's stream, a synchronous cudaMemcpy or the legacy default stream of
 *    another rank's thread waits behind every blocking stream of the context, that one included,
 *    and the rank it would feed never comes (NCCL's kernels have the same hazard).
 *  - Errors: every call returns a strataResult_t; strataGetLastError gives a one-line explanation of
 *    the last failure of the calling thread (which argument, which rank, which phase).
 *  - fork(): a launcher may call strataGetUniqueId and then fork its ranks: the bootstrap root
 *    parks itself across fork, the child drops the parent's root sockets and re-reads its own
 *    STRATA_* environment at its first call. A child forked while other strata threads run (a host
 *    stream, a nonblocking init, or communicators in use) is a copy of a multithreaded process
 *    whose locks (UCX's memory hooks among them) may be held by threads it does not have: it must
 *    exec or not call strata.
 *  - Results are bitwise identical on every rank, and from run to run for a fixed number of ranks,
 *    layout, algorithm and count. fp16 and bf16 reduce in fp32 and round to nearest even; integer
 *    sums and products wrap (two's complement); unsigned types compare unsigned; a NaN on any rank
 *    propagates through sum, prod, max, min and avg, and every NaN a reduction produces is the
 *    type's canonical quiet NaN (float 0x7fc00000, double 0x7ff8000000000000, half 0x7e00,
 *    bfloat16 0x7fc0: a NaN's sign and payload do not travel), so host and GPU reductions give the
 *    same bits; avg on integers divides the wrapped sum by nranks, truncating toward zero; avg on
 *    floating types multiplies each rank's input by 1/nranks before summing (as NCCL does), so an
 *    fp16 average does not overflow where the mean fits.
 */
#ifndef STRATA_H
#define STRATA_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__)
#define STRATA_API __attribute__((visibility("default")))
#else
#define STRATA_API
#endif

#define STRATA_MAJOR   0
#define STRATA_MINOR   1
#define STRATA_PATCH   0
/* Same encoding as NCCL_VERSION_CODE since 2.9: major * 10000 + minor * 100 + patch. */
#define STRATA_VERSION(_major, _minor, _patch) ((_major) * 10000 + (_minor) * 100 + (_patch))
#define STRATA_VERSION_CODE STRATA_VERSION(STRATA_MAJOR, STRATA_MINOR, STRATA_PATCH)

/* Results. Values 0..7 are ncclResult_t's; strataTimeout is strata's own (NCCL has none). */
typedef enum {
    strataSuccess            = 0,
    strataUnhandledCudaError = 1,
    strataSystemError        = 2, /* a system call failed (socket, mmap, thread, out of memory) */
    strataInternalError      = 3, /* a bug in strata or an unexpected transport failure */
    strataInvalidArgument    = 4, /* a bad pointer, count, datatype, op, root or rank */
    strataInvalidUsage       = 5, /* a call that is wrong in this state (destroyed comm, ...) */
    strataRemoteError        = 6, /* a peer failed or disconnected */
    strataInProgress         = 7, /* nonblocking init not done yet; a stream still has work */
    strataTimeout            = 8, /* a deadline passed; strataGetLastError names rank and phase */
    strataNumResults         = 9
} strataResult_t;

/* Data types, with ncclDataType_t's values. */
typedef enum {
    strataInt8     = 0, strataChar   = 0,
    strataUint8    = 1,
    strataInt32    = 2, strataInt    = 2,
    strataUint32   = 3,
    strataInt64    = 4,
    strataUint64   = 5,
    strataFloat16  = 6, strataHalf   = 6,
    strataFloat32  = 7, strataFloat  = 7,
    strataFloat64  = 8, strataDouble = 8,
    strataBfloat16 = 9,
    strataNumTypes = 10
} strataDataType_t;

/* Reduction operations, with ncclRedOp_t's values. Values from strataNumOps up to
 * strataMaxRedOp are handles made by strataRedOpCreatePreMulSum. */
typedef enum {
    strataSum      = 0,
    strataProd     = 1,
    strataMax      = 2,
    strataMin      = 3,
    strataAvg      = 4,
    strataNumOps   = 5,
    strataMaxRedOp = 0x7fffffff /* as ncclMaxRedOp with a 32-bit enum */
} strataRedOp_t;

/* Where the scalar of strataRedOpCreatePreMulSum lives (ncclScalarResidence_t's values). */
typedef enum {
    strataScalarDevice        = 0, /* not supported yet, for any buffers: strataInvalidArgument */
    strataScalarHostImmediate = 1  /* read once, at creation */
} strataScalarResidence_t;

#define STRATA_UNIQUE_ID_BYTES 128
/* Opaque bytes made by strataGetUniqueId: rank 0's bootstrap address and a random secret. Pass it
 * to every rank by any means (MPI_Bcast, a file, a socket). Treat it as a credential. */
typedef struct {
    char internal[STRATA_UNIQUE_ID_BYTES];
} strataUniqueId;

/* A communicator: a group of nranks ranks that call collectives together. */
typedef struct st_comm *strataComm_t;
/* A stream argument: either a CUDA stream (cudaStream_t, for device buffers) or a strata host stream
 * (strataStreamCreate, for host buffers). strataStream_t is cudaStream_t's own type (cudaStream_t
 * is `struct CUstream_st *` in cuda_runtime_api.h and cuda.h), so code written for NCCL passes
 * its streams unchanged, in C and C++, and strata.h needs no CUDA header. strata tells its host
 * streams from CUDA streams by its registry of live host streams (see "Streams" above). */
typedef struct CUstream_st *strataStream_t;

#define STRATA_COMM_NULL     NULL
#define STRATA_SPLIT_NOCOLOR (-1)

/* Configuration for strataCommInitRankConfig (shape of ncclConfig_t). Initialise with
 * STRATA_CONFIG_INITIALIZER, then set fields; fields left at STRATA_CONFIG_UNDEF_INT / NULL take
 * their STRATA_* environment default. */
#define STRATA_CONFIG_UNDEF_INT (-2147483647 - 1)
typedef struct strataConfig_v1 {
    size_t       size;      /* sizeof(strataConfig_t); set by the initializer */
    unsigned int magic;     /* set by the initializer */
    unsigned int version;   /* STRATA_VERSION_CODE the caller was built with */
    int          blocking;  /* 1 (default): init returns when done; 0: returns strataInProgress,
                               poll strataCommGetAsyncError until it says strataSuccess */
    int          timeoutMs; /* deadline of every blocking wait of this communicator, in
                               milliseconds; default STRATA_TIMEOUT (seconds; 0 there: no
                               deadline) */
    const char  *name;      /* a label for logs and errors; default "strata" */
    const char  *tuneFile;  /* tuning table (JSON, written by `collbench tune`; format in
                               docs/model.md) for this communicator's all-reduce choices; NULL:
                               STRATA_TUNE_FILE (for a split: its parent's); "": none. Every rank
                               must give the same table: if the ranks' tuning differs, all drop
                               it (logged at WARN). A table that cannot be read, is malformed or
                               was tuned for another layout is logged at WARN and not used; init
                               does not fail for it. Copied at init. (Added after 0.1.0; a config
                               of 0.1.0's header, without it, is still accepted.) */
} strataConfig_t;

#define STRATA_CONFIG_MAGIC 0x57a7a001u
#define STRATA_CONFIG_INITIALIZER                                                          \
    {                                                                                      \
        sizeof(strataConfig_t), STRATA_CONFIG_MAGIC, STRATA_VERSION_CODE,                   \
            STRATA_CONFIG_UNDEF_INT, STRATA_CONFIG_UNDEF_INT, NULL, NULL                   \
    }

/* ---------------------------------------------------------------------------------------- */
/* Version, errors                                                                          */
/* ---------------------------------------------------------------------------------------- */

/* Stores STRATA_VERSION_CODE of the library (major*10000 + minor*100 + patch) in *version.
 * Returns strataInvalidArgument when version is NULL. */
STRATA_API strataResult_t strataGetVersion(int *version);

/* A static English string for result (never NULL). A value that is no strataResult_t gives
 * "unknown strataResult_t <value>", in a buffer of the calling thread that its next such call
 * overwrites. */
STRATA_API const char *strataGetErrorString(strataResult_t result);

/* The calling thread's last error message: one line saying what failed and where (argument,
 * rank, collective and its sequence number, phase, peer). comm is accepted for NCCL's shape and
 * may be NULL. Returns "" when nothing failed yet. The string stays valid until the thread's
 * next failing strata call. */
STRATA_API const char *strataGetLastError(strataComm_t comm);

/* ---------------------------------------------------------------------------------------- */
/* Communicators                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* Makes a new unique id: starts, in this process, a bootstrap root that listens on the interface
 * chosen by STRATA_SOCKET_IFNAME (see README) and waits for the ranks of ONE communicator, then
 * exits (or gives up after STRATA_BOOTSTRAP_TIMEOUT). With STRATA_COMM_ID=host:port set, no root is
 * started here: the id names that address and rank 0 of strataCommInitRank starts the root.
 * Returns strataInvalidArgument for NULL or a malformed STRATA_SOCKET_IFNAME (",,");
 * strataInvalidUsage when no interface is up that STRATA_SOCKET_IFNAME allows (the message names
 * the variable and its value); strataSystemError when the listening socket or thread cannot be
 * made. */
STRATA_API strataResult_t strataGetUniqueId(strataUniqueId *uniqueId);

/* Creates the communicator of rank `rank` among `nranks` ranks that share commId. Collective over
 * all nranks ranks, which must call it concurrently (other processes or threads). Blocks until all
 * ranks have joined and exchanged transport addresses, or until the bootstrap deadline.
 * Returns strataInvalidArgument for NULL comm, nranks < 1, rank < 0 or rank >= nranks;
 * strataInvalidUsage when another rank joined with a different nranks, the same rank twice or a
 * wrong secret; strataTimeout when some rank never joined within STRATA_BOOTSTRAP_TIMEOUT
 * (strataGetLastError names the missing ranks); strataSystemError for socket failures.
 * After joining, init checks every connection to a rank on another node with one message each way
 * (STRATA_CONNECT_TIMEOUT, on the default path and on each rail of STRATA_RAIL_IFNAMES), and all
 * its own exchanges end within the bootstrap deadline (or STRATA_TIMEOUT, if shorter): a rank
 * that cannot reach a peer fails on every rank, never waits for the operation timeout. The rank
 * that saw it names the peer, the rail and both interfaces (strataTimeout when no answer came,
 * strataSystemError or strataRemoteError when the connection failed); a rail interface that
 * does not exist gives strataInvalidArgument, one that is down or has no carrier
 * strataSystemError, naming it; every other rank's error names the lowest rank that failed.
 * An id serves ONE communicator: make a new one (strataGetUniqueId) for every init. Reusing the id
 * of a communicator that already formed fails on every rank within STRATA_BOOTSTRAP_TIMEOUT, never
 * hangs: strataTimeout ("bootstrap root ... unreachable", its root has exited) or, if another id's
 * root took the port meanwhile, strataInvalidUsage (wrong secret). Ids from STRATA_COMM_ID are
 * the exception: rank 0 starts a new root at every init, so the same id works again once the
 * previous communicator has formed. */
STRATA_API strataResult_t strataCommInitRank(strataComm_t *comm, int nranks, strataUniqueId commId,
                                             int rank);

/* As strataCommInitRank, with config (may be NULL for the defaults). config->blocking = 0 makes the
 * call return strataInProgress at once while init continues in the background; poll
 * strataCommGetAsyncError until it returns strataSuccess or an error. Returns, in addition,
 * strataInvalidArgument for a config whose size, magic or fields are invalid (negative timeout). */
STRATA_API strataResult_t strataCommInitRankConfig(strataComm_t *comm, int nranks,
                                                   strataUniqueId commId, int rank,
                                                   strataConfig_t *config);

/* Creates ndev communicators, ranks 0..ndev-1, all in this process (one thread per rank during
 * init). devlist: rank i's device (its ordinal is made current in rank i's init thread; each
 * must exist, else strataInvalidArgument; entries may repeat: several ranks may share one GPU,
 * which NCCL refuses). NULL: rank i on device i, as in NCCL (strataInvalidArgument when fewer
 * than ndev devices exist); when no device is current in the caller, ranks on host buffers.
 * Drive the ndev communicators from one thread inside strataGroupStart/strataGroupEnd.
 * Returns strataInvalidArgument for NULL comms or ndev < 1; otherwise as strataCommInitRank. */
STRATA_API strataResult_t strataCommInitAll(strataComm_t *comms, int ndev, const int *devlist);

/* Splits comm: ranks passing the same color form a new communicator, ordered by key (ties by
 * their rank in comm). color STRATA_SPLIT_NOCOLOR (or any negative) makes *newcomm NULL.
 * Collective over all ranks of comm. config may be NULL (the parent's settings).
 * Returns strataInvalidArgument for NULL newcomm; strataInvalidUsage for a destroyed or failed
 * comm, or while another thread is in a blocking call on comm; strataTimeout /
 * strataRemoteError as a collective. */
STRATA_API strataResult_t strataCommSplit(strataComm_t comm, int color, int key,
                                          strataComm_t *newcomm, strataConfig_t *config);

/* Waits for all operations queued on comm (on any stream) to complete. Not collective: it does not
 * wait for other ranks. After it, collectives on comm return strataInvalidUsage.
 * Returns strataInvalidUsage for NULL or destroyed comm; the first queued error otherwise. */
STRATA_API strataResult_t strataCommFinalize(strataComm_t comm);

/* Frees comm and everything it holds. Waits for queued work only as long as the communicator's
 * deadline, and never for dead peers. After a call failed with strataInvalidUsage (the ranks'
 * calls did not match) it gives this rank's failure notice up to 1 s to leave and flushes its
 * connections rather than resetting them, at most 2 s in all, so that slower peers still read
 * why. comm must not be used afterwards.
 * Returns strataInvalidUsage for NULL comm, and when queued work is still there at the deadline
 * (a call on device buffers starts only once its CUDA stream reaches it: destroying before the
 * stream can get there waits out the deadline; strataCommAbort does not wait, and releases the
 * stream): comm is then left allocated, unusable, and the message says what was queued. */
STRATA_API strataResult_t strataCommDestroy(strataComm_t comm);

/* Frees comm at once, abandoning queued and in-flight operations: a call blocked on comm in
 * another thread returns strataRemoteError promptly (within about 0.1 s; strataGetLastError says
 * the communicator was aborted). Returns within 5 s even when peers are dead or stuck (closing
 * the connections takes at most 2 s in all). A nonblocking init (config->blocking = 0) still
 * waiting for its ranks, its wire-up check or its agreements ends at once: abort returns within
 * a second (tested: 3 ms), and communicators made afterwards work. A strataCommSplit of comm
 * blocked in another thread returns an error within 0.1 s (the new communicator's handle does
 * not exist until it returns, so a blocking init or split itself cannot be aborted).
 * Returns strataInvalidUsage for NULL comm. */
STRATA_API strataResult_t strataCommAbort(strataComm_t comm);

/* Stores in *asyncError the first error of an operation run asynchronously on comm (stream work,
 * nonblocking init), strataInProgress while a nonblocking init runs, else strataSuccess. Once
 * one has failed, the calls queued behind it on comm fail at once (strataInvalidUsage, not run)
 * instead of each waiting out the deadline; strataStreamSynchronize returns the first error.
 * Returns strataInvalidArgument when comm or asyncError is NULL. */
STRATA_API strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t *asyncError);

/* Stores the number of ranks of comm in *count. strataInvalidArgument for NULL arguments. */
STRATA_API strataResult_t strataCommCount(const strataComm_t comm, int *count);

/* Stores the rank of the caller in comm in *rank. strataInvalidArgument for NULL arguments. */
STRATA_API strataResult_t strataCommUserRank(const strataComm_t comm, int *rank);

/* ---------------------------------------------------------------------------------------- */
/* Reduction operations                                                                     */
/* ---------------------------------------------------------------------------------------- */

/* Creates a reduction op for comm that multiplies each rank's input by *scalar (of type datatype)
 * before summing: out = sum_r (scalar_r * in_r), computed in the datatype's compute precision
 * (fp32 for fp16/bf16), rounding each product and partial sum to the datatype. Only
 * strataScalarHostImmediate residence is supported (scalar read now). The op is valid for comm only
 * and for collectives of that datatype. Returns strataInvalidArgument for NULL op or scalar, an
 * unknown datatype, strataScalarDevice residence, or a NULL comm; strataInvalidUsage when comm is
 * destroyed or has no free op slot (64 per comm). */
STRATA_API strataResult_t strataRedOpCreatePreMulSum(strataRedOp_t *op, void *scalar,
                                                     strataDataType_t datatype,
                                                     strataScalarResidence_t residence,
                                                     strataComm_t comm);

/* Destroys an op made by strataRedOpCreatePreMulSum for comm. Returns strataInvalidArgument when op
 * is a built-in op or not a live op of comm. */
STRATA_API strataResult_t strataRedOpDestroy(strataRedOp_t op, strataComm_t comm);

/* ---------------------------------------------------------------------------------------- */
/* Collectives                                                                              */
/* ---------------------------------------------------------------------------------------- */
/* Common results of every collective below:
 *   strataInvalidArgument: NULL comm; NULL buffer with count > 0 (where the buffer is read or
 *     written on this rank); a count whose buffer would exceed 2^48 bytes; unknown datatype or
 *     op; op made for another datatype; root out of [0, nranks); a stream that was destroyed.
 *   strataInvalidUsage: comm destroyed, finalized, aborted or failed by an earlier error; or,
 *     for a call outside groups with a NULL stream, another thread is in such a blocking call
 *     (or strataCommSplit) on the same comm. Threads: a communicator serves one thread's
 *     blocking calls at a time; different communicators may be driven from different threads at
 *     once (tested with two threads on two communicators, case B24).
 *   Order: the collectives of one communicator run one at a time in the order they were
 *     issued (their sequence numbers), whichever stream carries them (host streams, the NULL
 *     stream) and whatever group or thread issued them, as NCCL's semantics ask: a call waits
 *     until every collective issued before it on its communicator has finished, so two streams
 *     on one communicator never mix their data. Every rank must issue them in the same order.
 *     Send/recv are ordered per peer and direction, and run alongside the collectives.
 *     Different communicators run concurrently.
 *   strataTimeout: a peer did not answer within the deadline (STRATA_TIMEOUT or config->timeoutMs);
 *     strataGetLastError names the collective, its sequence number, the phase and the peer.
 *   strataRemoteError: a peer disconnected or failed.
 *   strataInvalidUsage also when the ranks' calls do not match: every rank must make the same
 *     collective with the same count, datatype, op (avg and a premultiplied sum count as one on
 *     floating types; each rank may use its own scalar) and root, all on host buffers or all
 *     on device buffers (device calls the hierarchical algorithm runs on the GPU read the node's
 *     device windows, host calls the host windows). With STRATA_CHECK_MISMATCH=1
 *     (default) every rank checks this next to the data transfer and, on a mismatch, every rank
 *     returns strataInvalidUsage and strataGetLastError names both calls ("AllReduce #3 count 1000
 *     float sum on rank 0 vs AllReduce #3 count 1024 float sum on rank 1"), however far the data
 *     got. With STRATA_CHECK_MISMATCH=0 a mismatch is undefined: it may end in an error (a
 *     timeout or invalid usage) or return strataSuccess with wrong results (one node, small
 *     counts: count 10 against 8 succeeds with unreduced tail elements); never turn the check
 *     off while calls may differ.
 *   Stall reports: after STRATA_STALL_WARN seconds (unset: 60 s or half the deadline,
 *     whichever is shorter) without progress a waiting rank
 *     logs one WARN line naming the collective, its sequence number, phase, step and the rank it
 *     waits for, and keeps waiting; with the check on, rank 0 then also logs which ranks have not
 *     entered that collective. Set to 0, or to a value not below the deadline, it turns the
 *     reports off.
 * count 0 returns strataSuccess without moving data (every rank must pass 0; with the check on it
 * still runs the check, so a rank passing 0 while others do not is reported as above). */

/* Every rank receives op over all ranks of sendbuff, count elements, in recvbuff (count elements).
 * In place when sendbuff == recvbuff. */
STRATA_API strataResult_t strataAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                          strataDataType_t datatype, strataRedOp_t op,
                                          strataComm_t comm, strataStream_t stream);

/* Copies count elements of root's sendbuff into every rank's recvbuff. sendbuff is read only on
 * root (may be NULL elsewhere). In place when sendbuff == recvbuff on root. */
STRATA_API strataResult_t strataBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                          strataDataType_t datatype, int root, strataComm_t comm,
                                          strataStream_t stream);

/* Reduces count elements of sendbuff over all ranks with op into root's recvbuff. recvbuff is
 * used only on root and may be NULL elsewhere; non-root ranks' buffers are never written.
 * In place when sendbuff == recvbuff. */
STRATA_API strataResult_t strataReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       strataDataType_t datatype, strataRedOp_t op, int root,
                                       strataComm_t comm, strataStream_t stream);

/* Gathers sendcount elements from every rank into recvbuff (nranks * sendcount elements), rank
 * r's block at offset r * sendcount. In place when sendbuff == recvbuff + rank * sendcount. */
STRATA_API strataResult_t strataAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          strataDataType_t datatype, strataComm_t comm,
                                          strataStream_t stream);

/* Reduces nranks * recvcount elements of sendbuff over all ranks with op; rank r receives block r
 * (elements r*recvcount .. (r+1)*recvcount - 1) in recvbuff (recvcount elements).
 * In place when recvbuff == sendbuff + rank * recvcount. */
STRATA_API strataResult_t strataReduceScatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, strataDataType_t datatype,
                                              strataRedOp_t op, strataComm_t comm,
                                              strataStream_t stream);

/* All-to-all: rank r sends block p of sendbuff (elements p*count .. (p+1)*count - 1) to rank p,
 * which receives it as its block r of recvbuff; both buffers hold nranks * count elements (count
 * is elements per rank pair, as ncclAlltoAll). Never in place: sendbuff and recvbuff must not
 * overlap at all. sendbuff is only read. stream: NULL blocks until done; a host stream queues the
 * call; device buffers are ordered on a CUDA stream and run on pinned host copies of both buffers
 * (no GPU-native all-to-all yet). count 0: NULL buffers are fine and nothing moves.
 * Returns strataInvalidArgument for a NULL buffer with count > 0, overlapping buffers
 * (count > 0), and the common results above; ranks that pass different counts or datatypes get
 * strataInvalidUsage on every rank with the mismatch check; without it (STRATA_CHECK_MISMATCH=0)
 * a mismatch is undefined, as for every collective: the flat exchange names a different count as
 * a size mismatch, the hierarchical one through the node's windows need not notice it. */
STRATA_API strataResult_t strataAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                         strataDataType_t datatype, strataComm_t comm,
                                         strataStream_t stream);

/* All-to-all with a count per rank pair, as MPI_Alltoallv: rank r sends sendcounts[p] elements
 * starting at element sdispls[p] of sendbuff to rank p, and receives recvcounts[p] elements from
 * rank p at element rdispls[p] of recvbuff. The four arrays have nranks entries, in ELEMENTS of
 * datatype, and are read during the call only (the library keeps a copy: they may be changed or
 * freed as soon as it returns, also inside a group or on a stream). Zero counts are allowed, in
 * any pattern (a displacement whose count is 0 is ignored; a rank with nothing to send or
 * receive still calls); the bytes of recvbuff outside the received blocks are never written.
 * sendcounts[p] on rank r must equal recvcounts[r] on rank p, r == p included: the ranks
 * exchange their counts first, and a pair that disagrees fails every rank with
 * strataInvalidUsage naming both ranks and both counts ("sendcounts[2] on rank 1 is 9 but
 * recvcounts[1] on rank 2 is 8"), whatever STRATA_CHECK_MISMATCH says; no data has then reached
 * a rank that saw the disagreement, and other ranks' blocks may have arrived. The exchange costs
 * two small messages per peer before and beside the data. Blocks sent may overlap each other
 * (they are only read); a received block may overlap no other received block and no block that
 * is sent. The mismatch check compares the datatype (a rank with another datatype gets
 * strataInvalidUsage on every rank), not the counts. Device buffers run on pinned host copies of
 * the spans the blocks cover.
 * Returns strataInvalidArgument for a NULL array, a NULL buffer with a nonzero count into it, a
 * block whose displacement + count (bytes) exceeds 2^48, overlapping received blocks, and the
 * common results above; strataSystemError when the blocks cannot be checked for lack of
 * memory. */
STRATA_API strataResult_t strataAlltoAllv(const void *sendbuff, const size_t sendcounts[],
                                          const size_t sdispls[], void *recvbuff,
                                          const size_t recvcounts[], const size_t rdispls[],
                                          strataDataType_t datatype, strataComm_t comm,
                                          strataStream_t stream);

/* Gather: every rank's count elements of sendbuff arrive in root's recvbuff (nranks * count
 * elements), rank r's at element r * count, as ncclGather. recvbuff is used only on root and
 * may be NULL elsewhere (a non-root recvbuff is never written). In place on root when sendbuff
 * == recvbuff + root * count; on root sendbuff may overlap recvbuff in any other way too (root's
 * own block is copied before anything arrives). sendbuff is only read. Device buffers run on
 * pinned host copies. count 0: nothing moves.
 * Returns strataInvalidArgument for root out of [0, nranks), a NULL sendbuff with count > 0, a
 * NULL recvbuff on root with count > 0, and the common results above; a rank with another count,
 * datatype or root gets strataInvalidUsage on every rank (with the mismatch check, the default;
 * without it a mismatch is undefined). */
STRATA_API strataResult_t strataGather(const void *sendbuff, void *recvbuff, size_t count,
                                       strataDataType_t datatype, int root, strataComm_t comm,
                                       strataStream_t stream);

/* Scatter: root's sendbuff holds nranks * count elements; rank r receives elements r * count ..
 * (r+1) * count - 1 in recvbuff (count elements), as ncclScatter. sendbuff is read only on root
 * and may be NULL elsewhere (never touched there); it is never written. In place on root when
 * recvbuff == sendbuff + root * count; on root recvbuff may overlap sendbuff in any other way too
 * (root's own block is copied after every other block was sent). Device buffers run on pinned
 * host copies. count 0: nothing moves.
 * Returns strataInvalidArgument for root out of [0, nranks), a NULL sendbuff on root with
 * count > 0, a NULL recvbuff with count > 0, and the common results above; a rank with another
 * count, datatype or root gets strataInvalidUsage on every rank (with the mismatch check, the
 * default; without it a mismatch is undefined). */
STRATA_API strataResult_t strataScatter(const void *sendbuff, void *recvbuff, size_t count,
                                        strataDataType_t datatype, int root, strataComm_t comm,
                                        strataStream_t stream);

/* Point to point. strataSend sends count elements of sendbuff to rank peer; strataRecv receives
 * count elements from rank peer into recvbuff. Sends and receives between one pair of ranks match
 * in call order, and counts (in bytes) must agree, 0 included: a count-0 send or receive still
 * matches one call of the peer, and a size that differs (0 on one side included) fails the
 * receiver with strataInvalidUsage naming both sizes (the peers learn of it as of any failure).
 * Outside a group each call blocks until matched and complete (a send may complete once
 * buffered); inside strataGroupStart/End any number of sends and receives to any peers, including
 * the caller itself, run together and never deadlock.
 * Returns strataInvalidArgument for peer out of range or NULL buffer with count > 0;
 * strataInvalidUsage for peer == the caller's rank outside a group with a NULL stream or
 * device buffers (the call
 * would block until a matching call that this thread can never make); and the common results
 * above. */
STRATA_API strataResult_t strataSend(const void *sendbuff, size_t count, strataDataType_t datatype,
                                     int peer, strataComm_t comm, strataStream_t stream);
STRATA_API strataResult_t strataRecv(void *recvbuff, size_t count, strataDataType_t datatype,
                                     int peer, strataComm_t comm, strataStream_t stream);

/* Groups: calls between strataGroupStart and the matching strataGroupEnd (they nest; only the
 * outermost End launches) are queued per calling thread and launched together at End: all
 * operations with a NULL stream progress concurrently and End returns when all are complete;
 * those with a host stream are queued on it as one unit. Use it to drive several communicators of
 * one process (strataCommInitAll) from one thread, for send/recv exchanges, and to coalesce
 * collectives (PyTorch's all_reduce_coalesced): a group may hold any number of collectives of
 * one communicator, mixed with send/recv and other communicators; those of one communicator run
 * one after the other in call order (see "Order" above), everything else concurrently with
 * them.
 * strataGroupEnd returns strataInvalidUsage without a matching Start, or the first error of the
 * grouped operations (all of them are still completed or cancelled). */
STRATA_API strataResult_t strataGroupStart(void);
STRATA_API strataResult_t strataGroupEnd(void);

/* ---------------------------------------------------------------------------------------- */
/* Compression of the inter-node phase                                                       */
/* ---------------------------------------------------------------------------------------- */

/* Codecs. A compressed all-reduce (strataAllReduceCompressed) reduces inside each node in full
 * precision (the hierarchical algorithm's reduce-scatter) and compresses only what crosses the
 * network: each rail's inter-node step. Wire bytes per element are for an encoded range of n
 * elements of a datatype of es bytes (strataCompressWireBytes gives the exact number):
 *   none  the datatype's own bytes, es: exact (the compressed scheme without loss; for tests)
 *   fp16  IEEE binary16, round to nearest even, 2 B (finite values beyond 65504 saturate)
 *   bf16  bfloat16, round to nearest even, 2 B
 *   int8  per block of `block` elements a float32 scale s = max|x| / 127 and one signed byte
 *         q = round-to-nearest-even(x x 127 / max|x|) per element: 1 + 4/block B
 *   topk  the k = ceil(density x n) elements of largest magnitude (ties: the lower index) as a
 *         32-bit index and a value of the datatype: k (4 + es) / n B
 *   sign  per block a float32 scale s = mean |x| and one bit per element (its sign bit): s x sign,
 *         1/8 + 4/block B
 * A block holding a NaN or an infinity decodes (int8, sign) to NaN, so overflow still reaches a
 * gradient scaler; the error feedback drops non-finite residuals. docs/compression.md gives the
 * scheme, the error bounds and the sources. */
typedef enum {
    strataCodecNone = 0,
    strataCodecFp16 = 1,
    strataCodecBf16 = 2,
    strataCodecInt8 = 3,
    strataCodecTopk = 4,
    strataCodecSign = 5,
    strataNumCodecs = 6
} strataCodec_t;

/* A codec and its parameters. */
typedef struct strataCompressParams {
    strataCodec_t codec;
    double        density;       /* topk: fraction of elements kept, in (0, 1]; ignored by the
                                  * others */
    size_t        block;         /* int8, sign: elements per scale, >= 1 (256 is the default of
                                  * strataCompressParse); ignored by the others */
    int           errorFeedback; /* 1: keep each rank's residual between calls and add it to
                                  * the next (Seide et al. 2014; Stich et al. 2018; Karimireddy
                                  * et al. 2019); 0: none */
} strataCompressParams_t;

/* The compression state of one gradient bucket: its codec, and with error feedback the residual
 * of this rank (count float32 values, 4 x count bytes, zero at creation): what the codec dropped
 * from the elements this rank encoded is added to them at its next call. */
typedef struct strataCompressor *strataCompressor_t;

/* Parses a codec as collbench's --compress and the Python binding spell it: "none", "fp16",
 * "bf16", "int8", "int8:<block>", "topk:<density>", "sign", "sign:<block>", optionally followed by
 * ",noef" (no error feedback) or ",ef" (error feedback, the default). Fills *params (error feedback on, block 256 unless given).
 * Returns strataInvalidArgument for a NULL argument or a spec it cannot read (logged: the spec
 * and what is wrong, e.g. a density outside (0, 1]). */
STRATA_API strataResult_t strataCompressParse(const char *spec, strataCompressParams_t *params);

/* Writes the spec strataCompressParse reads back to *params into buf (size bytes, NUL-ended;
 * e.g. "topk:0.01" or "int8:64,noef"; the default block is left out, and a density takes the
 * fewest digits that read back to the same double). strataInvalidArgument for a NULL argument,
 * bad params or a buf too small (40 bytes always suffice). */
STRATA_API strataResult_t strataCompressFormat(const strataCompressParams_t *params, char *buf,
                                              size_t size);

/* *bytes = the bytes on the wire for one encoded range of count elements of datatype under
 * params (the formulas above; 0 for count 0). Returns strataInvalidArgument for a NULL argument,
 * bad params (as strataCompressorCreate), a datatype other than strataFloat32, strataFloat16
 * and strataBfloat16, or a count of more than 2^48 bytes of the datatype. */
STRATA_API strataResult_t strataCompressWireBytes(const strataCompressParams_t *params,
                                                  size_t count, strataDataType_t datatype,
                                                  size_t *bytes);

/* Makes the compression state of a bucket of count elements (>= 1) of datatype (strataFloat32,
 * strataFloat16 or strataBfloat16), one per bucket and rank. It is bound to the first
 * communicator it is used with. Returns strataInvalidArgument, logged with the reason, for a
 * NULL argument, count 0 or above 2^48 bytes, another datatype, a codec out of range, a topk
 * density outside (0, 1]
 * (or NaN), an int8 or sign block of 0 or above 2^24, errorFeedback not 0 or 1;
 * strataSystemError when the residual cannot be allocated. */
STRATA_API strataResult_t strataCompressorCreate(strataCompressor_t *compressor,
                                                 const strataCompressParams_t *params,
                                                 size_t count, strataDataType_t datatype);

/* Sets the residual to zero and unbinds the compressor from its communicator (a new training
 * run over the same buckets, or a new communicator after a failure). strataInvalidArgument for
 * NULL; strataInvalidUsage (logged, nothing changed) while a call using it is queued (on a stream,
 * in an open group) or running. */
STRATA_API strataResult_t strataCompressorReset(strataCompressor_t compressor);

/* Copies the codec parameters of compressor into *params. strataInvalidArgument for NULL. */
STRATA_API strataResult_t strataCompressorGetParams(strataCompressor_t compressor,
                                                    strataCompressParams_t *params);

/* Frees the state. NULL is a no-op. strataInvalidUsage (logged, nothing freed) while a call using
 * it is queued (on a stream, in an open group) or running: synchronize the stream or end the
 * group first; after a call that failed, its communicator may hold the call until
 * strataCommDestroy or strataCommAbort. */
STRATA_API strataResult_t strataCompressorDestroy(strataCompressor_t compressor);

/* strataAllReduce (sum or avg of floating data on host buffers) with the inter-node phase
 * compressed by compressor's codec. Inside each node the ranks reduce in full precision; across
 * nodes each rail's owner of a block of the node's shard encodes its node's partial sum (plus its
 * residual) once and sends it straight to that block's owner on every other node, who decodes
 * the contributions, sums them in the ring's order, encodes the sum once (plus its own residual)
 * and sends it to the others: 2(N-1)/N of the encoded shard per node, the ring's bytes, and two
 * encodings per element whatever the node count (docs/compression.md). Every rank, the encoder
 * included, decodes the same bytes, so results are bitwise identical on all ranks and from run to
 * run. On one node nothing is compressed: the result is strataAllReduce's. With codec none, or
 * topk at density 1, the result equals bit for bit that of strataAllReduce run by the
 * hierarchical algorithm with its own chunks (STRATA_ALGO=hier, no tuning table): the same sums in
 * the same order (other algorithms, or tuned chunks, sum in another order on 3 or more nodes).
 * count and datatype must be the compressor's; the compressor may be passed to one call at a
 * time (calls on one communicator in issue order are fine: the engine runs them in order). After
 * a call that failed, the residual may hold part of that call's encodings: strataCompressorReset
 * before using the compressor again. The compressor is bound to comm at its first call that
 * passes the checks (strataCompressorReset unbinds it).
 * Returns, besides strataAllReduce's errors: strataInvalidArgument (logged) for a NULL
 * compressor, a count or datatype other than the compressor's, an op other than strataSum and
 * strataAvg, a compressor bound to another communicator; strataInvalidUsage for device buffers
 * (compression runs on host buffers for now). */
STRATA_API strataResult_t strataAllReduceCompressed(const void *sendbuff, void *recvbuff,
                                                    size_t count, strataDataType_t datatype,
                                                    strataRedOp_t op,
                                                    strataCompressor_t compressor,
                                                    strataComm_t comm, strataStream_t stream);

/* ---------------------------------------------------------------------------------------- */
/* Host streams (strata's stand-in for cudaStream_t on host memory)                          */
/* ---------------------------------------------------------------------------------------- */

/* Creates a host stream with its own progress thread (idle: blocked, using no CPU). Several
 * streams may carry calls of one communicator: its collectives still run in issue order (see
 * "Order" under Collectives), so a call queued on stream B after one on stream A starts when A's
 * has finished.
 * Returns strataInvalidArgument for NULL; strataSystemError when the thread cannot start. */
STRATA_API strataResult_t strataStreamCreate(strataStream_t *stream);

/* Blocks until every operation queued on stream has completed. Returns strataSuccess, or the first
 * error of an operation queued since the last synchronize (the communicator's async error is set
 * too); strataInvalidArgument for NULL. */
STRATA_API strataResult_t strataStreamSynchronize(strataStream_t stream);

/* strataSuccess when stream has no pending work, strataInProgress when it has, or the first error
 * of its operations since the last synchronize; strataInvalidArgument for NULL. Never blocks. */
STRATA_API strataResult_t strataStreamQuery(strataStream_t stream);

/* Waits for the stream's queued work, then stops its thread and frees it.
 * Returns strataInvalidArgument for NULL. */
STRATA_API strataResult_t strataStreamDestroy(strataStream_t stream);

/* ---------------------------------------------------------------------------------------- */
/* strata extensions (no NCCL counterpart)                                                  */
/* ---------------------------------------------------------------------------------------- */

/* Writes every STRATA_* parameter to stream: name, current value (from the environment at the
 * first strata call), default and one line of documentation. Returns strataInvalidArgument for a
 * NULL stream, strataInvalidArgument when a STRATA_* variable holds a malformed value (logged). */
STRATA_API strataResult_t strataParamsPrint(FILE *stream);

/* Writes to stream the topology strata built for comm from every rank's record at init: per node a
 * picture of its ranks grouped by NUMA domain, with each rank's GPU (PCI bus id: the one
 * STRATA_GPU_BUSID names; unset, in a CUDA build, the current CUDA device of the thread that ran
 * the rank's init, the caller's for a blocking one; else none), nearest fabric NIC and rail; then
 * the rails (rail l = local rank l of every node, with its NICs), the ring order the algorithms use
 * (node-contiguous; inside a node by NUMA domain, then PCI position) and one line per rank: rank,
 * node, local rank / local size, bound CPUs and core count, NUMA domain, GPU, NIC, rail and ring
 * position. Nodes are numbered by their lowest rank; local ranks follow rank order within a node.
 * json != 0 writes one JSON object instead (keys nranks, nnodes, nrails, nodes, rails, ring,
 * ranks). Not collective: any rank may call it, every rank prints the same. Returns
 * strataInvalidArgument for a NULL comm or stream; strataInvalidUsage for a destroyed comm or one
 * still initializing. */
STRATA_API strataResult_t strataCommTopoPrint(strataComm_t comm, FILE *stream, int json);

/* Where the calling rank sits in comm's hierarchy (built at init from every rank's node identity,
 * see strataCommTopoPrint): *node is the index of its node (0 .. *nnodes - 1; nodes are numbered
 * by their lowest rank), *localRank its index among the ranks of its node (in rank order) and
 * *localSize that node's number of ranks. Any output pointer may be NULL. With them a user makes
 * the node communicators, strataCommSplit(comm, node, localRank, &nodeComm, NULL), and the rails,
 * strataCommSplit(comm, localRank, node, &railComm, NULL) (local rank l of every node; with
 * uneven nodes the higher rails have fewer ranks). Not collective. Returns strataInvalidArgument
 * for a NULL comm; strataInvalidUsage for a destroyed comm or one still initializing. */
STRATA_API strataResult_t strataCommTopoRank(strataComm_t comm, int *node, int *nnodes,
                                             int *localRank, int *localSize);

/* The topology test of a machine one does not have: loads the hwloc XML at xmlPath (as written
 * by `lstopo --of xml`, hwloc 1.x or 2.x format, or by STRATA_TOPO_DUMP_FILE), places one rank
 * per GPU of it (one per NUMA domain when it has no GPU) on one node, and writes to stream the
 * machine (package, NUMA, core and PU counts; GPUs; fabric NICs; for each GPU its NIC, NUMA domain
 * and all equally near NICs with their deepest common ancestor, ties spread over the GPUs) and
 * then the hierarchy of those ranks as strataCommTopoPrint does. json != 0: one JSON object with
 * the machine's keys and "hierarchy". Needs no communicator and no other process. xmlPath NULL
 * means the machine a communicator init would use: STRATA_TOPO_FILE, else this machine.
 * Returns strataInvalidArgument for a NULL stream, and for a file that is missing, unreadable or
 * not a topology hwloc can load (strataGetLastError names the file and the cause);
 * strataSystemError when out of memory or when hwloc cannot discover this machine. */
STRATA_API strataResult_t strataTopoFilePrint(const char *xmlPath, FILE *stream, int json);

/* Memory every rank of a node can map. When a device is current (cudaSetDevice; STRATA_DEVICE),
 * strataMemAlloc returns device memory of that device, exportable to the node's other processes
 * (cuMem with a POSIX file descriptor handle, through transports/cuda_ipc), as ncclMemAlloc does;
 * what follows about zero-copy holds for it as for host memory. Otherwise it returns host memory:
 * *ptr to size bytes (rounded up to whole pages, zero-filled) of shared memory (a memfd the node's other processes map through
 * /proc/<pid>/fd; it counts against memory, not against /dev/shm), as ncclMemAlloc returns memory
 * NCCL can register. An out-of-place all-reduce whose send and receive buffers lie in such memory
 * on every rank of a node runs zero-copy inside the node: node peers read each other's send
 * buffers and write results straight into the receive buffers, skipping the copies through the
 * communicator's windows (README "Zero-copy" gives what it buys). Each call decides anew, and
 * the same on every local rank; any other case takes the copying path. Use it as ordinary memory
 * otherwise. Every page is committed at allocation (no SIGBUS later), so a size is first checked
 * against what can be backed: MemAvailable + SwapFree and every memory cgroup (v1 or v2) above
 * the process, less a margin of 1/16 (at least 64 MiB); more gives strataSystemError naming the
 * size and the limit, and commits nothing (the OOM killer never sees it). Returns
 * strataInvalidArgument for a NULL ptr or size 0; strataSystemError when the memory cannot be
 * had (logged). */
STRATA_API strataResult_t strataMemAlloc(void **ptr, size_t size);

/* Frees memory from strataMemAlloc. NULL is a no-op. Returns strataInvalidArgument for a pointer
 * strataMemAlloc did not return (logged; nothing is freed). No collective may be using it; node
 * peers that mapped it keep their mapping (and the pages) until they map a newer allocation of
 * this process in its place or destroy their last communicator, so freeing never faults a peer. */
STRATA_API strataResult_t strataMemFree(void *ptr);

/* Where the time of the calling rank's last completed collective on comm went, phase by phase
 * (what `collbench --phases` prints). "Last" is the collective that completed last on this rank;
 * in a group of several, the one the engine finished last; a failed call leaves the previous
 * record. For the hierarchical algorithm (algorithm "hier"; every collective it runs follows
 * the same three-phase pipeline, see README "Algorithms"): phase 0 is the copy into the node's
 * windows and the intra-node reduce-scatter (all-to-all: the gather of each node pair's message),
 * phase 1 the inter-node step of this rank's shards over its rail (all-reduce: a ring's
 * all-reduce; compressed all-reduce: its two exchanges of encodings, bytes[1] the encoded bytes;
 * reduce-scatter and all-gather: that half of the ring; broadcast and reduce: a chain
 * over the nodes; all-to-all: one message to and from every other node), phase 2 the intra-node
 * all-gather (all-to-all: the copy out). seconds[0] and seconds[2]: the time this rank spent
 * copying and reducing in those phases, waits for local peers excluded; seconds[1]: the time
 * during which at least one of this rank's inter-node transfers was in flight (so it includes the
 * wait for the network, which is what it measures). The phases of different chunks overlap, so
 * their sum may exceed totalSeconds. bytes[0] = bytes[2] = the collective's size as nccl-tests
 * counts it (all-reduce, broadcast, reduce: count elements; reduce-scatter: the send buffer;
 * all-gather: the receive buffer); bytes[1]: bytes this rank sent over the network in its
 * inter-node steps (0 on one node; on uneven nodes it differs between ranks). Other algorithms ("ring",
 * "small", "chain", "p2p") set seconds[1] = totalSeconds and bytes[1] = the size, the rest 0.
 * totalSeconds runs from the moment the engine started the call (for a call queued on a host
 * stream: when the stream reached it) to its completion on this rank. Not collective; safe to
 * call while other threads run collectives on comm (the record is copied under comm's lock).
 * Returns strataInvalidArgument for a NULL comm or times; strataInvalidUsage for a destroyed
 * comm or one without a completed collective. */
typedef struct strataPhaseTimes {
    char   algorithm[16]; /* "hier", "ring", "small", "chain", "p2p", "pairwise" (all-to-all,
                           * AlltoAllv), "direct" (gather, scatter) */
    double totalSeconds;  /* from the call's start to its completion on this rank */
    double seconds[3];
    size_t bytes[3];
} strataPhaseTimes_t;
STRATA_API strataResult_t strataCommGetPhaseTimes(strataComm_t comm, strataPhaseTimes_t *times);

#ifdef __cplusplus
}
#endif

#endif /* STRATA_H */
