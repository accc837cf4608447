/*
 * intra.h - the node's windows as the intra-node algorithms see them, written once over the window
 * transport interface (transports/transport.h), so shm (host) and cuda_ipc (device) share it.
 *
 * Every local rank owns one window, mapped by all its node peers. A window is:
 *   control   one 64-byte line per counter (st_intra_cnt_t), written only by its owner: sequence
 *             numbers that only grow over the communicator's life (never reset, so consecutive
 *             operations cannot confuse each other's flags); plus, in local rank 0's window, the
 *             node's doorbell (a futex word every publish bumps) and its sleeper count.
 *   small     two areas of ST_INTRA_SMALL_BYTES for the small-message algorithm (alternating).
 *   in        depth slots of chunk_bytes: the owner's contribution to a pipeline chunk.
 *   res       depth slots of chunk_bytes: the shards the owner reduced (and all-reduced across
 *             nodes), read by every local rank in the all-gather phase.
 * Ordering: a writer fills data, then publishes a counter with a release store; a reader loads the
 * counter with acquire before it reads the data. A rank that finds nothing to do sleeps on the
 * doorbell (st_intra_sleep) instead of spinning: a late peer costs no CPU.
 */
#ifndef ST_COLL_INTRA_H
#define ST_COLL_INTRA_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "reduce/reduce.h"
#include "engine/comm.h"
#include "transports/transport.h"

struct st_comm;

#define ST_INTRA_SMALL_BYTES (256 * 1024) /* per small area: an in half and a res half */
#define ST_INTRA_SMALL_MAX   (ST_INTRA_SMALL_BYTES / 2)
#define ST_INTRA_SMALL_FAST_RANKS 64 /* local ranks the small algorithm's fast path serves */

typedef enum {
    ST_INTRA_IN = 0,    /* chunks copied into the in slots */
    ST_INTRA_RS,        /* chunks whose in slots this rank finished reading (reduce-scatter) */
    ST_INTRA_RES,       /* chunks whose owned shards are final in the res slots */
    ST_INTRA_AG,        /* chunks whose res slots this rank finished reading (all-gather) */
    ST_INTRA_SMALL_IN,  /* small operations whose data is in the small area */
    ST_INTRA_SMALL_RES, /* small operations whose result is in the small area (node leader) */
    ST_INTRA_SMALL_DONE,/* small operations this rank finished reading */
    ST_INTRA_ZC,        /* hierarchical operations whose zero-copy descriptor is published */
    ST_INTRA_NCNT
} st_intra_cnt_t;

typedef struct st_intra {
    const st_win_ops_t *win;
    st_win_ctx_t       *ctx;        /* NULL for a node of one rank (private memory) */
    void               *private_mem;
    int                 local_rank;
    int                 local_size;
    size_t              chunk_bytes; /* bytes per slot */
    int                 depth;       /* slots per area */
    size_t              win_bytes;
    char              **base;        /* [local_size] windows as mapped here */
    uint32_t           *doorbell;    /* in local rank 0's window */
    uint32_t           *sleepers;
    uint64_t            chunk_seq;   /* pipeline chunks this rank started so far (all ops) */
    uint64_t            small_seq;   /* small operations so far */
    /* Operations on the windows run one after another on each rank (their counters would mix
     * otherwise): each takes a ticket when made and runs when turn reaches it. */
    uint64_t            tickets;
    uint64_t            turn;
    /* Device windows (st_intra_create_device; dbase NULL when the node has none): the data part
     * of the windows (small areas, in and res slots, at the same offsets as in the host windows)
     * in device memory of the window transport of ST_MEM_CUDA (cuda_ipc), mapped from every local
     * peer; the counters and the doorbell stay in the host windows. Operations on device
     * buffers use them with the GPU's kernels and copies, queued on dstream (made by the first
     * such operation, in the communicator's device queue thread) and awaited before a counter
     * is published. dmirror: pinned host memory of depth x chunk_bytes, where a chunk's owned
     * shards cross the network (the net transports take host memory only). */
    const st_win_ops_t     *dwin;
    st_win_ctx_t           *dctx;
    void                   *dprivate;  /* a node of one rank: plain device memory */
    char                  **dbase;     /* [local_size] */
    char                   *dmirror;
    struct st_dev_stream   *dstream;
    int                     dev_id;
    char                    win_name[80]; /* the host windows' name (the device ones add "-d") */
    /* One node of several ranks: the mismatch check's board (engine/comm.h) in the host
     * windows' control areas, which comm->board points to; board.entries == NULL otherwise. */
    st_board_t              board;
    void                   *small_spare; /* small.c's op, kept for the next small call */
} st_intra_t;

/* The caller's agreement (core's st_comm_agree): every rank of comm passes its status and gets
 * ST_OK when all passed ST_OK, else the lowest error, on every rank. */
typedef st_status_t (*st_intra_agree_fn)(struct st_comm *comm, st_status_t status);

/* Creates the node's windows for comm (collective over comm: its steps are agreed through
 * agree) in memory of type mem_type, over the window transport of comm's transports (comm->tl)
 * that serves it. Sizes from STRATA_HIER_CHUNK_SIZE and STRATA_PIPELINE_DEPTH. Segment names
 * carry comm's id and node identity. ST_ERR_UNSUPPORTED (logged) when no window transport serves
 * mem_type, ST_ERR_NO_MEMORY, ST_ERR_IO (logged). */
st_status_t st_intra_create(struct st_comm *comm, st_intra_agree_fn agree, st_mem_type_t mem_type,
                            st_intra_t **intra_p);
void        st_intra_destroy(st_intra_t *intra);
/* Brings up the device windows of intra (collective over comm, like st_intra_create, whose
 * windows it extends): only when every rank of comm has a device (comm->dev_id) and a window
 * transport of ST_MEM_CUDA serves it; otherwise, agreed on by all, it leaves intra->dbase NULL
 * (device calls then run on host copies) and returns ST_OK. ST_ERR_NO_MEMORY, ST_ERR_IO. */
st_status_t st_intra_create_device(struct st_comm *comm, st_intra_agree_fn agree,
                                   st_intra_t *intra);

static inline uint64_t *st_intra_cnt_ptr(const st_intra_t *intra, int lr, st_intra_cnt_t c)
{
    return (uint64_t *)(intra->base[lr] + 64 * (size_t)c);
}
/* Publishes the own counter c = value (release) and, when a local rank sleeps, rings the
 * doorbell and wakes it. */
void st_intra_publish(st_intra_t *intra, st_intra_cnt_t c, uint64_t value);
/* The same for a word of the own window outside the counters (a flag next to its data). */
void st_intra_publish_at(st_intra_t *intra, uint64_t *word, uint64_t value);
/* 1 when every local rank's counter c is >= value; else 0 with *laggard_p (may be NULL) the first
 * local rank behind. */
int st_intra_all_reached(const st_intra_t *intra, st_intra_cnt_t c, uint64_t value,
                         int *laggard_p);
/* 1 when local rank lr's counter c is >= value. */
int st_intra_reached(const st_intra_t *intra, int lr, st_intra_cnt_t c, uint64_t value);
/* The doorbell's value: read before checking counters, pass to st_intra_sleep. */
uint32_t st_intra_doorbell(const st_intra_t *intra);
/* Counts the caller among the node's sleepers (delta +1), or no longer (-1). A publish rings
 * the doorbell only while some rank is counted, so a rank that means to sleep arms first, then
 * reads the doorbell and looks at the counters once more, and only then sleeps (exec.c). */
void st_intra_arm(st_intra_t *intra, int delta);
/* Sleeps until the doorbell differs from seen or timeout_us passed; the caller is armed. */
void st_intra_sleep(st_intra_t *intra, uint32_t seen, long timeout_us);
/* st_intra_sleep and st_intra_arm as the engine's hooks (st_op_t's sleep and arm, sleep_on =
 * the st_intra_t). */
void st_intra_sleep_hook(void *intra, uint32_t seen, long timeout_us);
void st_intra_arm_hook(void *intra, int delta);

/* Start of local rank lr's small area `which` (0 or 1), in slot `slot` and res slot. */
static inline char *st_intra_small(const st_intra_t *intra, int lr, int which)
{
    return intra->base[lr] + 4096 + (size_t)which * ST_INTRA_SMALL_BYTES;
}
static inline char *st_intra_in(const st_intra_t *intra, int lr, int slot)
{
    return intra->base[lr] + 4096 + 2 * ST_INTRA_SMALL_BYTES + (size_t)slot * intra->chunk_bytes;
}
static inline char *st_intra_res(const st_intra_t *intra, int lr, int slot)
{
    return st_intra_in(intra, lr, intra->depth + slot);
}
/* The same slots in the device windows (intra->dbase != NULL). */
static inline char *st_intra_din(const st_intra_t *intra, int lr, int slot)
{
    return intra->dbase[lr] + 4096 + 2 * ST_INTRA_SMALL_BYTES + (size_t)slot * intra->chunk_bytes;
}
static inline char *st_intra_dres(const st_intra_t *intra, int lr, int slot)
{
    return st_intra_din(intra, lr, intra->depth + slot);
}

/* ---- zero-copy --------------------------------------------------------------------------------
 * When every local rank's send and receive buffers are shareable (the window transport's
 * mem_pack: strataMemAlloc memory), ranks read each other's buffers directly instead of copying
 * through the window slots. Each rank publishes a descriptor of its buffers (a packed handle and
 * offset each) in its window's control area; once every local rank's is there, all decide alike:
 * zero-copy only if every one of them is shareable. */
typedef struct st_intra_zc {
    const st_win_ops_t *win; /* the window transport of the buffers' memory type */
    int          state; /* 0: own descriptor not yet published; 1: waiting for the peers';
                         * 2: decided */
    int          on;    /* decided 1: every local rank's buffers are mapped below */
    const char **send;  /* [local_size] each local rank's send buffer as mapped here */
    char       **recv;  /* [local_size] each local rank's receive buffer as mapped here */
} st_intra_zc_t;

/* Prepares zc for one operation on buffers of memory type mem. may = 0: the operation cannot run
 * zero-copy on any rank (the same on every local rank), so no negotiation happens (state 2,
 * off). ST_ERR_NO_MEMORY. */
st_status_t st_intra_zc_init(const st_intra_t *intra, st_intra_zc_t *zc, int may,
                             st_mem_type_t mem);
void        st_intra_zc_fini(st_intra_zc_t *zc);
/* Runs the negotiation of operation op_id for bytes bytes at send and recv; want = 0 when this
 * rank's call cannot run zero-copy (in place, a scaled copy needed). op_id must grow strictly from
 * one negotiation on these windows to the next (hier passes its first chunk's sequence, h->base):
 * the ST_INTRA_ZC counter is compared with >=, so a smaller one would find stale descriptors.
 * ST_INPROGRESS until every local rank published (*lag_p then names the first local rank
 * missing); ST_OK once decided (zc->on); ST_ERR_IO when a peer's buffer cannot be mapped (*lag_p
 * names that local rank; the transport logged why). */
st_status_t st_intra_zc_negotiate(st_intra_t *intra, st_intra_zc_t *zc, uint64_t op_id, int want,
                                  const void *send, void *recv, size_t bytes, int *lag_p);

/* The intra-node kernels, written once for any window transport. */
/* dst = srcs[0] (+) srcs[1] (+) ... (+) srcs[n-1], combined in that order, count elements. */
void st_intra_reduce(const st_redop_t *redop, void *dst, const void *const *srcs, int n,
                     size_t count);

#endif
