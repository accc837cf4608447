/*
 * op.h - the vocabulary of an operation that every floor from the engine up shares: the
 * collectives and their table (names, properties, nccl-tests' bus-bandwidth factor, the in-place
 * rule), the arguments of one call (the algorithms are tune/algo.h's), and the layout of message
 * tags.
 */
#ifndef ST_OP_H
#define ST_OP_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "reduce/reduce.h"
#include "strata.h"
#include "tune/algo.h"

struct st_comm;

typedef enum {
    ST_COLL_ALLREDUCE = 0,
    ST_COLL_BROADCAST,
    ST_COLL_REDUCE,
    ST_COLL_ALLGATHER,
    ST_COLL_REDUCESCATTER,
    ST_COLL_SEND,
    ST_COLL_RECV,
    ST_COLL_ALLTOALL,
    ST_COLL_ALLTOALLV,
    ST_COLL_GATHER,
    ST_COLL_SCATTER,
    ST_COLL_LAST
} st_coll_type_t;

/* What sendbuff must be for a call to be in place (strata.h, "In place", as in NCCL). */
typedef enum {
    ST_INPLACE_SAME = 0,     /* sendbuff == recvbuff (all-reduce; broadcast on root; reduce) */
    ST_INPLACE_SEND_AT_RANK, /* sendbuff == recvbuff + rank * count elements (all-gather: the
                              * rank's own block of the result; gather on root, rank = root) */
    ST_INPLACE_RECV_AT_RANK, /* recvbuff == sendbuff + rank * count elements (reduce-scatter: the
                              * rank's block of the input; scatter on root, rank = root) */
    ST_INPLACE_NONE          /* one buffer (send, recv), or never in place (all-to-all) */
} st_inplace_t;

/* One collective: the row of st_coll_info. */
typedef struct st_coll_info {
    const char  *name;       /* as the API, logs and errors name it: "AllReduce" */
    const char  *short_name; /* as nccl-tests and collbench spell it: "all_reduce"; send and recv
                              * are nccl-tests' "sendrecv" */
    int          reduces;    /* takes a reduction op (strataRedOp_t) */
    int          rooted;     /* takes a root rank */
    int          p2p;        /* point to point (send, recv): one peer, per-pair sequence numbers,
                              * outside the communicator's issue order and the mismatch check */
    int          per_rank;   /* count is one rank's block (all-gather's sendcount, reduce-scatter's
                              * recvcount, all-to-all's count per rank pair, gather's and
                              * scatter's block): the call moves count x nranks elements in all,
                              * which is its size as nccl-tests counts it */
    double       busbw_mul;  /* nccl-tests' bus-bandwidth factor among n ranks (st_coll_busbw): */
    int          busbw_ring; /* busbw_mul x (n - 1) / n when busbw_ring is 1, else busbw_mul */
    st_inplace_t in_place;   /* the in-place rule */
} st_coll_info_t;

/* One call, as the user made it (counts in elements; see strata.h for their meaning). */
typedef struct st_coll_args {
    st_coll_type_t   type;
    struct st_comm  *comm;
    const void      *sendbuff;
    void            *recvbuff;
    size_t           count;
    strataDataType_t dtype;
    st_redop_t       redop;
    int              root;   /* broadcast, reduce */
    int              peer;   /* send, recv */
    uint64_t         seq;    /* collective or per-peer p2p sequence number */
    st_algo_t        algo;   /* forced algorithm (internal calls); ST_ALGO_AUTO: select */
    size_t           hier_chunk; /* bytes per hier chunk from the tuning (select.c); 0: hier's
                                  * own rule */
    int              channels;   /* flat ring: rings at once (select.c: STRATA_RING_CHANNELS or
                                  * the tuning); 0 or 1: one */
    int              mem;        /* st_mem_type_t of the buffers (the API checked they agree):
                                  * ST_MEM_CUDA calls run from the communicator's device queue
                                  * (core/stream.c), ordered on the user's CUDA stream */
    /* AlltoAllv: the four arrays of nranks entries, in elements (strata.h). Borrowed: they are
     * valid while the call that made args runs; whoever keeps args past that (a group, a stream's
     * queue) takes its own copy with st_coll_args_keep and frees it with st_coll_args_drop.
     * count is the elements this rank sends in all (sum of scounts), for its size only. */
    const size_t    *scounts, *sdispls, *rcounts, *rdispls;
    /* strataAllReduceCompressed: the bucket's compression state (codec/codec.h), borrowed from
     * the caller for the call's life; NULL otherwise. hier compresses its inter-node step. */
    struct strataCompressor *compress;
    int              cz_held;    /* st_coll_args_keep took a reference on compress (its refs):
                                  * strataCompressorDestroy refuses while a kept call holds one */
    size_t          *v_owned;    /* the copy st_coll_args_keep made (4 x nranks), or NULL */
    int              unchecked;  /* internal calls of init (its agreements): no mismatch check,
                                  * which every rank runs only once they agreed on
                                  * STRATA_CHECK_MISMATCH (core/init.c) */
} st_coll_args_t;

/* Makes args own its AlltoAllv arrays (one heap copy; nothing for other collectives, or when it
 * owns them already) and hold a reference on its compressor (a compressed all-reduce): call
 * before keeping args past the call that made it. ST_ERR_NO_MEMORY. A copy of kept args is not
 * kept: clear its v_owned and cz_held first (as a stream's queue does). */
st_status_t st_coll_args_keep(st_coll_args_t *args);
/* Frees what st_coll_args_keep made (args' arrays are then invalid) and drops its compressor
 * reference. NULL-safe, idempotent. */
void st_coll_args_drop(st_coll_args_t *args);

/* The row of collective `type`; for a value out of range, a row named "unknown" with no
 * property set (busbw factor 1, never in place). Never NULL. Inline: every call of the latency
 * path asks it a dozen times. */
extern const st_coll_info_t st_coll_table[ST_COLL_LAST];
extern const st_coll_info_t st_coll_unknown;
static inline const st_coll_info_t *st_coll_info(st_coll_type_t type)
{
    return ((unsigned)type < ST_COLL_LAST) ? &st_coll_table[type] : &st_coll_unknown;
}
/* The collective's name as the API spells it ("AllReduce"), or "unknown": st_coll_info's name. */
const char *st_coll_name(st_coll_type_t type);
/* nccl-tests' bus-bandwidth factor of `type` among nranks ranks: what the busiest link of a ring
 * carries relative to the algorithm bandwidth (algbw x factor = busbw; doc/PERFORMANCE.md). */
double st_coll_busbw(st_coll_type_t type, int nranks);
/* 1 when a call of `type` with these buffers is in place by the table's rule: block_bytes is count
 * x the datatype's size, rank the caller's rank (for gather and scatter: the root, on the root;
 * their buffers elsewhere are never in place). 0 otherwise (also for send, recv and all-to-all). */
int st_coll_in_place(st_coll_type_t type, const void *sendbuff, const void *recvbuff,
                     size_t block_bytes, int rank);

/* Tags (ST_NET_TAG_BITS = 44 bits): bit 43 = 0 for collectives: 20 bits of sequence number, 23
 * bits of sub-tag chosen by the algorithm; bit 43 = 1, bit 42 = 0 for send/recv: 42 bits of the
 * per-pair sequence number; bits 43 and 42 = 1: the mismatch check's messages (engine/mismatch.c),
 * with bit 41 also set: failure notices (engine/comm.c, st_tag_notice).
 * Sequence numbers wrap; messages of operations 2^20 apart are never in flight at once. */
#define ST_TAG_SUB_BITS 23
#define ST_TAG_SUB_MASK ((UINT64_C(1) << ST_TAG_SUB_BITS) - 1)
static inline uint64_t st_tag_coll(uint64_t seq, uint64_t sub)
{
    return ((seq & 0xfffff) << ST_TAG_SUB_BITS) | (sub & ST_TAG_SUB_MASK);
}
static inline uint64_t st_tag_notice(void)
{
    return (UINT64_C(7) << 41);
}
static inline uint64_t st_tag_p2p(uint64_t seq)
{
    return (UINT64_C(1) << 43) | (seq & ((UINT64_C(1) << 42) - 1));
}
/* 1 for a tag of st_tag_p2p. */
static inline int st_tag_is_p2p(uint64_t tag)
{
    return (tag >> 42 & 3) == 2;
}

#endif
