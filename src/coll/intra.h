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
 *
 * The control area's 4096 bytes: the counters (64 B each from offset 0), the doorbell's and the
 * sleepers' lines; at 2048 the zero-copy descriptor, after it the cross-memory attach probe's
 * record (intra.c); at 2560 the mismatch check's board (8 entries of 128 B, engine/comm.h), at
 * 3584 the rank's CPU affinity mask (128 B); the rest is free.
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
    ST_INTRA_ZC_LEFT,   /* the last zero-copy operation (its op_id + 1) this rank left before
                         * its end, failed: the peers must not store into its buffers any more */
    ST_INTRA_ZC_PUSH,   /* op_id + 1 while this rank stores results into the peers' buffers (the
                         * push, a chunk at a time), 0 between: not a growing counter */
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
    /* Cross-memory attach (the zero-copy section below): 1 when at create every local rank read
     * and wrote every other's private memory with the window transport's peer_read and
     * peer_write and none had
     * STRATA_CMA=0; the same on every rank of the node. zc_piece: bytes of each of the local_size
     * pieces of the zero-copy reduce-scatter's staging (st_intra_zc_stage), a multiple of 64 of
     * at most ST_INTRA_ZC_PIECE; 0 when the in slots are too small for local_size pieces of 64 B
     * (then neither cma nor an in-place zero-copy call on local rank 2 or higher). cma_magic:
     * the private word the node peers read in the probe. */
    int                 cma;
    int                 cma_forced; /* STRATA_CMA=1: every call that can (else hier.c's rule) */
    size_t              zc_piece;
    uint64_t            cma_magic;
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
 * agree, three agreements, which a node of one rank makes too where other nodes have windows) in
 * memory of type mem_type, over the window transport of comm's transports (comm->tl) that serves
 * it. Sizes from STRATA_HIER_CHUNK_SIZE and STRATA_PIPELINE_DEPTH. Segment names carry comm's id
 * and node identity. Probes cross-memory attach between the node's ranks (intra->cma, said at
 * INFO; a probe that fails only turns it off). ST_ERR_UNSUPPORTED (logged) when no window
 * transport serves mem_type, ST_ERR_NO_MEMORY, ST_ERR_IO (logged). */
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
 * Ranks read each other's send and receive buffers directly instead of copying through the window
 * slots, in one of two flavours:
 *   mapped  every local rank's buffers are shareable (the window transport's mem_pack:
 *           strataMemAlloc memory): each is mapped into every peer, which loads from it;
 *   cma     they are not, but every local rank wants zero-copy, the buffers are host memory and
 *           the node has cross-memory attach (intra->cma): a peer's buffer is read with the window
 *           transport's peer_read (process_vm_readv) into this rank's memory and written with its
 *           peer_write (process_vm_writev), never mapped.
 * Each rank publishes a descriptor of its call (whether it wants zero-copy; its size; for each
 * buffer a packed handle and offset, its address and the rank's pid) in its window's control
 * area; once every local rank's is there, all decide alike from the same descriptors: off unless
 * every size is the same, else mapped when every one is shareable, else cma when every one wants
 * it and the node has it, else off.
 * Memory traffic per rank for S bytes on n local ranks (all-reduce): the copying path about
 * (5 + 1/n) S (copy-in read + write, the reduce's reads of n in slots for S/n, the all-gather's
 * read + write); zero-copy pulling (across nodes), either flavour, about S + S/n for the
 * reduce-scatter (read the own shard of every input once, write it) + 2 S (n-1)/n for the
 * all-gather; pushing (one node), 2 S (read the own shard of every input, store its result into
 * every output: hier.c st_hier_zc_push). cma reads through the
 * kernel (a system call and page pinning per read), so it reads pieces of up to ST_INTRA_ZC_PIECE
 * per peer into a staging area that stays in cache (st_intra_zc_stage) and reduces from there. */
#define ST_INTRA_ZC_PIECE ((size_t)256 << 10)

typedef struct st_intra_zc {
    const st_win_ops_t *win; /* the window transport of the buffers' memory type */
    int          state; /* 0: own descriptor not yet published; 1: waiting for the peers';
                         * 2: decided */
    int          may_cma; /* this rank may take cma for this call (host memory, intra->cma, the
                           * algorithm's rule); cma runs when every local rank's is set */
    int          on;    /* decided 1: zero-copy, with the buffers below */
    int          cma;   /* decided 1 (with on): the cma flavour */
    /* [local_size] each local rank's send and receive buffer: mapped, as mapped here; cma, the
     * RAW ADDRESSES IN THAT RANK'S PROCESS (pid[lr]): NOT DEREFERENCEABLE HERE for any lr but
     * the own local rank (whose are its own buffers); read them only with win->peer_read(pid[lr],
     * ...) and write them only with win->peer_write. Pointer arithmetic on them is fine; loads
     * and stores are not. */
    const char **send;
    char       **recv;
    int         *pid;   /* [local_size] cma: each local rank's process id */
} st_intra_zc_t;

/* Prepares zc for one operation on buffers of memory type mem. may = 0: the operation cannot run
 * zero-copy on any rank (the same on every local rank), so no negotiation happens (state 2,
 * off). ST_ERR_NO_MEMORY. */
st_status_t st_intra_zc_init(const st_intra_t *intra, st_intra_zc_t *zc, int may,
                             st_mem_type_t mem);
void        st_intra_zc_fini(st_intra_zc_t *zc);
/* Runs the negotiation of operation op_id for bytes bytes at send and recv; want = 0 when this
 * rank's call cannot run zero-copy (a scaled copy needed). op_id must grow strictly from
 * one negotiation on these windows to the next (hier passes its first chunk's sequence, h->base):
 * the ST_INTRA_ZC counter is compared with >=, so a smaller one would find stale descriptors.
 * ST_INPROGRESS until every local rank published (*lag_p then names the first local rank
 * missing); ST_OK once decided (zc->on, zc->cma), at once where the own descriptor decides it
 * (off: this rank does not want zero-copy or its buffers are not shareable, and it may not take
 * cma, so neither flavour can run). Then the descriptor is published without ringing the
 * doorbell, and the caller must publish next without waiting on a peer (which rings it), and
 * must not end its operation before every local rank decided (hier's copy-in follows the
 * decision, and its reduce-scatter waits for every local rank's). ST_ERR_IO when a peer's buffer
 * cannot be mapped (*lag_p names that local rank; the transport logged why). */
st_status_t st_intra_zc_negotiate(st_intra_t *intra, st_intra_zc_t *zc, uint64_t op_id, int want,
                                  const void *send, void *recv, size_t bytes, int *lag_p);

/* The push's guard (hier.c st_hier_zc_push: owners store results into the peers' buffers), so
 * that no rank stores into the buffers of a rank that left the call with an error, which may
 * free or reuse them at once. The storing rank brackets each chunk's stores with
 * st_intra_zc_push_begin / _end; a rank leaving a push operation before its end calls
 * st_intra_zc_leave. begin: publishes the own ST_INTRA_ZC_PUSH = op_id + 1, then reads every
 * peer's ST_INTRA_ZC_LEFT (both sequentially consistent, so either begin sees the leaver's mark or
 * leave sees this rank's PUSH); 1 when none left operation op_id, else 0 with the push mark
 * cleared and *left_p the first local rank that left. */
int  st_intra_zc_push_begin(st_intra_t *intra, uint64_t op_id, int *left_p);
/* Clears the own push mark (release: after the chunk's stores and their fence). */
void st_intra_zc_push_end(st_intra_t *intra);
/* Marks operation op_id left (ST_INTRA_ZC_LEFT = op_id + 1, sequentially consistent); then the
 * caller waits while a peer is pushing (st_intra_zc_pushing): one that began a chunk before it
 * could see the mark finishes it (milliseconds), unless it died. */
void st_intra_zc_leave(st_intra_t *intra, uint64_t op_id);
/* 1 when local rank lr's push mark says it is storing into the peers' buffers for op_id. */
int  st_intra_zc_pushing(const st_intra_t *intra, int lr, uint64_t op_id);

/* Staging piece i (0 .. local_size-1) of intra->zc_piece bytes for the zero-copy reduce-scatter:
 * in the own window's in slots, which zero-copy leaves unused (no peer reads them during a
 * zero-copy call; the next call's copy-in is this rank's own). Valid when intra->zc_piece > 0. */
static inline char *st_intra_zc_stage(const st_intra_t *intra, int i)
{
    return st_intra_in(intra, intra->local_rank, 0) + (size_t)i * intra->zc_piece;
}

/* STRATA_CMA into *mode_p: -1 auto, 0 off, 1 on (auto, but a node where cross-memory attach does
 * not work is said at WARN instead of INFO). ST_ERR_INVALID (logged, naming the value) for
 * anything but auto and the boolean spellings. */
st_status_t st_intra_cma_param(int *mode_p);

/* The intra-node kernels, written once for any window transport. */
/* dst = srcs[0] (+) srcs[1] (+) ... (+) srcs[n-1], combined in that order, count elements
 * (st_reduce_combine_n: dst may be exactly one of the first four sources, never a later one). */
void st_intra_reduce(const st_redop_t *redop, void *dst, const void *const *srcs, int n,
                     size_t count);

#endif
