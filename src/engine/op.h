/*
 * op.h - the vocabulary of an operation that every floor from the engine up shares: the
 * collectives, the algorithms, the arguments of one call, and the layout of message tags.
 */
#ifndef ST_OP_H
#define ST_OP_H

#include <stddef.h>
#include <stdint.h>

#include "reduce/reduce.h"
#include "strata.h"

struct st_comm;

typedef enum {
    ST_COLL_ALLREDUCE = 0,
    ST_COLL_BROADCAST,
    ST_COLL_REDUCE,
    ST_COLL_ALLGATHER,
    ST_COLL_REDUCESCATTER,
    ST_COLL_SEND,
    ST_COLL_RECV,
    ST_COLL_LAST
} st_coll_type_t;

/* Algorithms (STRATA_ALGO). */
typedef enum {
    ST_ALGO_AUTO = 0,
    ST_ALGO_RING,   /* flat ring (AR, RS, AG); chain (broadcast, reduce) */
    ST_ALGO_HIER,   /* intra-node windows + inter-node ring per rail (hier.c) */
    ST_ALGO_SMALL,  /* latency: one round through the windows (small.c) */
    ST_ALGO_LAST
} st_algo_t;

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
} st_coll_args_t;

const char *st_coll_name(st_coll_type_t type);

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
