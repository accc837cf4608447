/*
 * hier.c - the hierarchical algorithms: intra-node reduce-scatter through the node's windows,
 * inter-node all-reduce of each shard on its rail, intra-node all-gather, pipelined over chunks;
 * and the same pipeline for broadcast, reduce, reduce-scatter, all-gather and all-to-all.
 *
 * The buffer V (elements; for broadcast and all-gather, bytes) is cut into chunks of
 * STRATA_HIER_CHUNK_SIZE bytes and every chunk into S shards, S = the number of rails (the largest
 * number of ranks on a node). On a node of m ranks, local rank l owns the shards j with j mod m = l
 * (on a node with fewer ranks than rails a rank owns several; that is how 3+1 or 2+3 layouts
 * work). For chunk k, in its window slot k mod depth:
 *   copy-in         every rank writes its contribution to the chunk into its window's in slot
 *                   (prescaled by a premul-sum's scalar);
 *   reduce-scatter  the owner of shard j reduces shard j over the node's in slots, in local rank
 *                   order, into its res slot;
 *   inter-node      the owners of shard j on every node (rail j mod m of each node) all-reduce it
 *                   with a ring over the nodes (blocks of the shard, Patarasuk and Yuan), in place
 *                   in the res slot;
 *   all-gather      every rank copies every shard of the chunk from its owner's res slot into its
 *                   output.
 * Each phase runs as far ahead as the window slots allow, so while chunk k crosses the network,
 * chunk k+1 is reduced inside the node and chunk k-1 gathered: the three phases of different
 * chunks overlap. Counters in the windows (coll/intra.h) say how far each rank got; a slot is
 * refilled only when every local rank finished reading what it held depth chunks ago.
 *
 * The six collectives are this pipeline with other contributions, deliveries, chunk layouts and
 * inter-node steps; each moves over the network no more than its own bytes:
 *   all-reduce       V = the buffer; linear chunks; inter-node: the ring's reduce-scatter and
 *                    all-gather halves, 2(N-1)/N of V per node.
 *   reduce           as all-reduce inside the node; inter-node: a chain over the nodes toward
 *                    the root's node (node root+N-1 sends its shard to root+N-2, which adds its own
 *                    and passes it on): V per node instead of the ring's 2(N-1)/N V; delivery on
 *                    the root only (other ranks' receive buffers are never written).
 *   broadcast        bytes; the root copies in, the owners on its node take their shards from the
 *                    root's in slot, and each shard travels a chain over the nodes from the root's
 *                    node: every node receives V once.
 *   reduce-scatter   V = the send buffer (nranks blocks of count); chunks BY NODE (below); the
 *                    ring's reduce-scatter half only: (N-1)/N of V per node, and each node ends
 *                    with its own ranks' pieces reduced; each rank copies out its own piece.
 *   all-gather       bytes, V = the receive buffer; chunks by node; each rank copies in its own
 *                    piece, the owners gather their node's part of their shard from the local in
 *                    slots, and the ring's all-gather half brings the other nodes' parts: (N-1)/N
 *                    of V per node; every rank copies the whole chunk out.
 *   all-to-all       bytes, V = the send buffer (nranks blocks); chunks by node, by
 *                    destination; the 2D scheme of mixture-of-experts systems: the owner of shard
 *                    j gathers, for every other node, its node's ranks' part of shard j for that
 *                    node into one message (staging) and exchanges it with shard j's owner there
 *                    (one message per node pair and shard, so per rail, all in flight); the
 *                    messages land in the owner's res slot, by sending node, then sending local
 *                    rank (st_hier_a2a_in_off); every rank copies its pieces out of the local in
 *                    slots (its node's senders) and the owners' res slots (the others). The bytes
 *                    on the network are those of the flat pairwise exchange (coll/a2a.c); what it
 *                    saves is messages, (N-1) per shard instead of n-g per rank, at the cost of
 *                    two passes through the windows (docs/model.md, formula 13). Pieces shrink
 *                    until every owner's res slot holds what it receives.
 * Chunks by node: chunk k holds piece k (elements k*c .. k*c+c-1 of each rank's block; c =
 * the chunk / nranks) of every rank's block, ordered by node, then local rank: node b's ranks'
 * pieces form one range of the chunk, whatever the rank numbering, and shard j of the chunk is
 * shard j's share of every node's range. Block b of a shard's ring is then exactly node b's part,
 * which is what the half ring leaves on node b (reduce-scatter) or starts from there (all-gather).
 * The order for all-gather (intra-node gather, inter-node all-gather, intra-node copy-out) moves
 * the same (N-1)/N of V over each node's links as inter-node first would, and keeps the pipeline's
 * one shape; the slow level carries each byte once either way.
 *
 * Results are bitwise identical on all ranks: every element is reduced at one place in one fixed
 * order (local ranks in order, then around the rail's ring from the block's first sender) and
 * copied from there.
 *
 * Zero-copy all-reduce (coll/intra.h; negotiated per call, the same decision on every local rank;
 * in place too, st_hier_zc_negotiate says why that is safe): no copy-in, and no in or res slots.
 * The owner of shard j reduces it from every local rank's send buffer. Across nodes it reduces
 * into its own receive buffer, the inter-node ring works there in place, and every rank copies
 * the other owners' shards from their receive buffers into its own (the all-gather pulls). On one
 * node the owner pushes instead: it stores each reduced piece into every local rank's receive
 * buffer itself (h->push, st_hier_zc_push), so there is no all-gather, and the ranks wait only for
 * the owners' RES. Mapped (every buffer from strataMemAlloc): the peers' buffers are mapped and
 * loaded from and stored into. cma (ordinary host buffers, the node has cross-memory attach):
 * they are read with the window transport's peer_read (process_vm_readv) and written with its
 * peer_write (process_vm_writev); the owner reads each peer's part of its shard in pieces of up to
 * 256 KiB into a staging area in its own window's (unused) in slots, which stays in cache, and
 * reduces from there in local rank order (the same bits as every other path). Per rank and S
 * bytes on n local ranks the pull moves about S + S/n bytes of memory in the reduce-scatter and
 * 2 S (n-1)/n in the all-gather, the push 2 S in all, against (5 + 1/n) S for the copying path;
 * cma adds a system call per piece. The call returns only when every local peer finished reading
 * this rank's buffers (pulling) or every owner finished storing into them (pushing); a pushing
 * call that fails first marks itself left (st_hier_zc_leave) so that no owner stores into its
 * buffers after the caller has them back.
 *
 * Device buffers (args.mem == ST_MEM_CUDA, run from the communicator's device queue) take the same
 * pipeline over the node's device windows (intra.h): copy-in, the reduce-scatter over the local
 * ranks' in slots (one multi-source kernel, reduce/kernel.h, local ranks in order: the host's
 * order and arithmetic, so the same bits) and the all-gather are the GPU's kernels and copies on
 * the windows' device stream, each step awaited (sleeping) before its counter is published; the
 * inter-node ring of an owned shard runs on a pinned host copy of it (dmirror: copied out when
 * the ring starts, back when it ends), because the net transports take host memory.
 */
#include "config.h"

#include <stdlib.h>
#include <sched.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "coll/rail.h"
#include "codec/codec.h"
#include "engine/mismatch.h"
#include "device/dev.h"
#include "topo/topo.h"
#include "tune/policy.h"

typedef enum { ST_HIER_REDUCE = 0, ST_HIER_COPY } st_hier_mode_t;

/* How a chunk lays out V: linear (chunk k = elements k*chunk ..), or by node (the header). */
typedef enum { ST_HIER_LINEAR = 0, ST_HIER_BYNODE } st_hier_layout_t;

/* The inter-node step of an owned shard: a ring (steps step0 .. step_end - 1 of the all-reduce's
 * 2(N-1): reduce-scatter [0, N-1), all-gather [N-1, 2(N-1))), or a chain over the nodes
 * (broadcast, reduce: step 0 receives, step 1 sends), or all-to-all's exchange (one step: a
 * message to and from the shard's owner on every other node, all in flight). */
typedef enum { ST_HIER_RING = 0, ST_HIER_CHAIN, ST_HIER_EXCHANGE, ST_HIER_CODED } st_hier_inter_t;

/* One owned shard's inter-node ring for one chunk. */
typedef struct st_hier_ring {
    int          j;          /* shard index */
    size_t       off, cnt;   /* the shard in the chunk, elements */
    int          step;       /* step0 .. step_end (done) */
    int          left, right;
    st_rail_xfer_t *net;     /* the step's transfers: [ST_RAIL_RECV], [ST_RAIL_SEND]; the
                              * exchange's: receive and send with each other node, [2 (N-1)] */
    char        *tmp;        /* staging for a received block before it is reduced; all-to-all:
                              * the messages to the other nodes, gathered; compressed: the
                              * areas of st_hier_coded_t */
} st_hier_ring_t;

/* The compressed inter-node step's areas in a ring's staging (st_hier_coded_areas). */
typedef struct st_hier_coded {
    char  *out;     /* [N-1] encodings of the blocks of the other nodes, wire_max each */
    char  *in;      /* [N-1] encodings received, wire_max each */
    char  *sum;     /* the encoding of this node's block, summed */
    char  *dec;     /* [N-1] decoded contributions to this node's block, block_max elements */
    float *scratch; /* the encoder's */
} st_hier_coded_t;

typedef struct st_hier_slot {
    int             active;  /* inter-node rings in flight */
    size_t          k;
    int             left;    /* rings not yet done */
    st_hier_ring_t *rings;   /* [nowned] */
} st_hier_slot_t;

typedef struct st_hier {
    st_op_t          op;
    st_coll_args_t   args;
    st_comm_t       *comm;
    st_intra_t      *intra;
    const st_topo_t *topo;
    st_hier_mode_t   mode;
    st_hier_layout_t layout;
    st_hier_inter_t  inter;
    char             inter_phase[40]; /* "inter-node all-reduce", ... (stall reports) */
    const char *const *phases;        /* st_hier_phases, or all-to-all's names */
    int              step0, step_end; /* the inter-node steps run (st_hier_inter_t) */
    int              tag_steps;       /* steps per (chunk, shard) in the tags */
    int              root_node;       /* broadcast, reduce: the root's node */
    size_t           block;    /* by node: elements of each rank's block (count) */
    size_t           piece;    /* by node: elements of a block per chunk (c; the last is shorter) */
    int             *node_pre; /* by node: [nnodes + 1] ranks on the nodes before node b */
    size_t           es;       /* bytes per element of V */
    size_t           unit;     /* shard and block boundaries fall on multiples of this (elements) */
    size_t           total;    /* elements of V */
    size_t           chunk;    /* elements per chunk */
    size_t           ncols;
    int              depth, m, l, nnodes, node, nshards;
    int              nowned;
    int             *owned;    /* [nowned] shard indexes this rank owns */
    const void     **srcs;     /* [m] scratch for the reduction over windows */
    uint64_t         base;     /* window sequence of chunk 0 */
    uint64_t         ticket;   /* this op's turn on the node's windows */
    size_t           copy_k, rs_k, res_k, ag_k;
    st_hier_slot_t   slots[ST_PIPE_MAX_DEPTH];
    st_hier_ring_t  *ring_mem;
    st_rail_xfer_t  *net_mem;  /* [rings x nnet] */
    int              nnet;     /* transfers per ring: 2, the exchange's 2 (N-1) */
    char            *tmp_mem;
    const char      *src;
    char            *dst;
    size_t           own_first, own_count; /* V range delivered (elements) */
    int              deliver;              /* this rank writes its receive buffer */
    int              inter_active;
    size_t           inter_bytes; /* of the shards all-reduced over the network so far */
    /* zero-copy (all-reduce, every local rank's buffers mapped from strataMemAlloc or read by
     * cross-memory attach): peers read each other's send buffers (and receive buffers, pulling)
     * directly; no in or res slots */
    st_intra_zc_t    zc;
    int              push; /* zero-copy on one node (host buffers, either flavour): the
                            * reduce-scatter stores each result into every local rank's receive
                            * buffer (st_hier_zc_push; cma: st_hier_zc_reduce's peer_write) */
    int              push_nt; /* ... with streaming stores (large out-of-place calls) */
    int              finished; /* the operation completed (st_hier_destroy: else a failure) */
    double           t_start, t_inter_since, t_busy[3];
    const st_dev_ops_t *dev; /* device buffers: the device layer; NULL for host buffers */
    /* compressed all-reduce (args.compress): the state, the largest block of a shard and its
     * encoding's bytes */
    st_compressor_t *cz;
    size_t           block_max, wire_max;
    size_t           wire_stride, dec_stride; /* of the areas (st_hier_coded_t): wire_max and
                                               * block_max elements, on 64-byte lines */
} st_hier_t;

/* Splits len elements into parts even pieces on multiples of unit; piece i's offset and length
 * (the blocks of a shard's ring). */
static void st_hier_split(size_t len, int parts, int i, size_t unit, size_t *off_p, size_t *cnt_p)
{
    size_t units = ST_DIV_ROUND_UP(len, unit);
    size_t b = units / (size_t)parts, r = units % (size_t)parts;
    size_t u0 = (size_t)i * b + ST_MIN((size_t)i, r);
    size_t un = b + ((size_t)i < r);

    *off_p = ST_MIN(u0 * unit, len);
    *cnt_p = ST_MIN((u0 + un) * unit, len) - *off_p;
}

/* Shard j of a chunk of len elements: offset and length, on multiples of h->unit. Even, or by
 * the rails' shares of the communicator's tuning (tune/policy.h); the same on every rank. */
static void st_hier_shard(const st_hier_t *h, size_t len, int j, size_t *off_p, size_t *cnt_p)
{
    size_t units = ST_DIV_ROUND_UP(len, h->unit), u0, un;

    st_tune_policy_shard(h->comm->tune, units, h->nshards, j, &u0, &un);
    *off_p = ST_MIN(u0 * h->unit, len);
    *cnt_p = ST_MIN((u0 + un) * h->unit, len) - *off_p;
}

/* By node: elements of each rank's piece in chunk k (c; the last chunk's are shorter). */
static size_t st_hier_piece_len(const st_hier_t *h, size_t k)
{
    return ST_MIN(h->piece, h->block - k * h->piece);
}

static size_t st_hier_chunk_len(const st_hier_t *h, size_t k)
{
    if (h->layout == ST_HIER_BYNODE) {
        return (size_t)h->comm->nranks * st_hier_piece_len(h, k);
    }
    return ST_MIN(h->chunk, h->total - k * h->chunk);
}

/* By node: where rank r's piece starts in chunk k (elements). */
static size_t st_hier_pos(const st_hier_t *h, size_t k, int r)
{
    int b = st_topo_node(h->topo, r);

    return (size_t)(h->node_pre[b] + st_topo_local_rank(h->topo, r)) * st_hier_piece_len(h, k);
}

/* How many ranges shard j of a chunk has: one (linear), or one per node (by node). */
static int st_hier_nranges(const st_hier_t *h)
{
    return h->layout == ST_HIER_BYNODE ? h->nnodes : 1;
}

/* Range i of shard j of chunk k: its offset in the chunk (elements) and length. Linear: the shard
 * (i = 0); by node: shard j's share of node i's range, by the same rule as a linear shard. */
static size_t st_hier_range(const st_hier_t *h, size_t k, int j, int i, size_t *off_p)
{
    size_t off, cnt;

    if (h->layout == ST_HIER_LINEAR) {
        st_hier_shard(h, st_hier_chunk_len(h, k), j, off_p, &cnt);
        return cnt;
    }
    {
        size_t c = st_hier_piece_len(h, k), first = (size_t)h->node_pre[i] * c;

        st_hier_shard(h, (size_t)(h->node_pre[i + 1] - h->node_pre[i]) * c, j, &off, &cnt);
        *off_p = first + off;
        return cnt;
    }
}

static inline int st_hier_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

/* The owner of shard j on node (a comm rank). */
static int st_hier_owner(const st_hier_t *h, int node, int j)
{
    return st_topo_node_rank(h->topo, node, j % st_topo_local_size(h->topo, node));
}

/* Where chunk k's reduced shards of local rank lr live (offsets relative to the chunk): its res
 * slot (in the device windows for device buffers), or with zero-copy its receive buffer. With
 * cma (h->zc.cma) that is an address in local rank lr's process: for lr != h->l NOT
 * DEREFERENCEABLE here, read only through h->zc.win->peer_read (st_hier_deliver) and written only
 * through peer_write (the push). */
static char *st_hier_res(const st_hier_t *h, int lr, size_t k)
{
    if (h->zc.on) {
        return h->zc.recv[lr] + k * h->chunk * h->es;
    }
    if (h->dev != NULL) {
        return st_intra_dres(h->intra, lr, (int)(k % (size_t)h->depth));
    }
    return st_intra_res(h->intra, lr, (int)(k % (size_t)h->depth));
}

/* Local rank lr's in slot `slot`: in the device windows for device buffers. */
static char *st_hier_in(const st_hier_t *h, int lr, int slot)
{
    return h->dev != NULL ? st_intra_din(h->intra, lr, slot) : st_intra_in(h->intra, lr, slot);
}

/* Where the inter-node ring of chunk k works on this rank's owned shards: in place in its res
 * slot, or for device buffers the pinned host copy of it (same offsets). */
static char *st_hier_ring_res(const st_hier_t *h, size_t k)
{
    if (h->dev != NULL) {
        return h->intra->dmirror + (k % (size_t)h->depth) * h->intra->chunk_bytes;
    }
    return st_hier_res(h, h->l, k);
}

/* ---- all-to-all's areas ------------------------------------------------------------------------ */

/* Local ranks of node b. */
static int st_hier_msize(const st_hier_t *h, int b)
{
    return h->node_pre[b + 1] - h->node_pre[b];
}

/* All-to-all, chunk k, shard j: where the messages from the other nodes land in the res slot of
 * the shard's owner on node b: after the areas of the owner's shards before j (each (n - m_b)
 * times its part of node b's range), one area per other node d in node order, m_d x that part
 * (src_node = d), laid out by the sender's local rank. src_node = -1: the start of j's area. */
static size_t st_hier_a2a_in_off(const st_hier_t *h, size_t k, int b, int j, int src_node)
{
    int    mb = st_hier_msize(h, b), n = h->comm->nranks;
    size_t off = 0, part;

    for (int jj = j % mb; jj < j; jj += mb) {
        off += (size_t)(n - mb) * st_hier_range(h, k, jj, b, &part);
    }
    for (int d = 0; d < src_node; d++) {
        if (d != b) {
            off += (size_t)st_hier_msize(h, d) * st_hier_range(h, k, j, b, &part);
        }
    }
    return off;
}

/* All-to-all, chunk k, shard j, on node b: where the message to node d starts in the staging of
 * the owner (one message per other node in node order, m_b x shard j's part of d's range). */
static size_t st_hier_a2a_out_off(const st_hier_t *h, size_t k, int b, int j, int dst_node)
{
    size_t off = 0, part;

    for (int d = 0; d < dst_node; d++) {
        if (d != b) {
            off += (size_t)st_hier_msize(h, b) * st_hier_range(h, k, j, d, &part);
        }
    }
    return off;
}

/* All-to-all with pieces of c bytes: the largest res area any owner of any node needs (the
 * messages it receives, st_hier_a2a_in_off) and, in *stage_p, the largest staging one of this
 * rank's shards needs (the messages it sends). */
static size_t st_hier_a2a_need(st_hier_t *h, size_t c, size_t *stage_p)
{
    size_t save = h->piece, need = 0, stage = 0;

    h->piece = c;
    for (int b = 0; b < h->nnodes; b++) {
        int mb = st_hier_msize(h, b);

        for (int l = 0; l < mb; l++) {
            int last = l;

            for (int j = l; j < h->nshards; j += mb) {
                last = j;
            }
            need = ST_MAX(need, st_hier_a2a_in_off(h, 0, b, last, h->nnodes));
        }
    }
    for (int o = 0; o < h->nowned; o++) {
        stage = ST_MAX(stage, st_hier_a2a_out_off(h, 0, h->node, h->owned[o], h->nnodes));
    }
    h->piece = save;
    *stage_p = stage;
    return need;
}

/* ---- device steps: queued on the windows' device stream, then awaited -------------------- */

static st_status_t st_hier_dcopy(st_hier_t *h, void *dst, const void *src, size_t bytes)
{
    return bytes == 0 ? ST_OK : h->dev->copy(dst, src, bytes, h->intra->dstream);
}

static st_status_t st_hier_djob(st_hier_t *h, void *dst, const void *const *srcs, int n,
                                int pre_first, int post, size_t count)
{
    st_reduce_job_t job;
    int             first = 1;

    memset(&job, 0, sizeof(job));
    job.redop = h->args.redop;
    job.count = count;
    /* more sources than a job takes: chain jobs, the first result as the next's first source */
    for (int done = 0; done < n;) {
        int take = ST_MIN(n - done + (done > 0), ST_REDUCE_MAX_SRCS);

        job.dst   = dst;
        job.nsrcs = 0;
        if (done > 0) {
            job.srcs[job.nsrcs++] = dst;
        }
        while (job.nsrcs < take) {
            job.srcs[job.nsrcs++] = srcs[done++];
        }
        job.pre_first = pre_first && first;
        job.post      = post && done == n;
        first         = 0;
        ST_CHECK(h->dev->reduce(&job, h->intra->dstream));
    }
    return ST_OK;
}

/* Awaits what the steps queued (sleeping), at most the communicator's timeout. */
static st_status_t st_hier_dsync(st_hier_t *h, const char *phase)
{
    long        us     = (long)(h->comm->timeout * 1e6);
    st_status_t status = h->dev->stream_sync(h->intra->dstream, us > 0 ? us : -1);

    if (status == ST_INPROGRESS) {
        st_error(ST_SUB_COLL, "%s #%llu (%s) rank %d: %s: the device did not finish its work "
                 "within %.0f s (STRATA_TIMEOUT)", h->op.coll, (unsigned long long)h->args.seq,
                 h->comm->name, h->comm->rank, phase, h->comm->timeout);
        return ST_ERR_TIMEOUT;
    }
    return status;
}

/* ---- copy-in -------------------------------------------------------------------------------- */

/* Copies len elements (pre: prescaled by a premul-sum's scalar) to the in slot. */
static st_status_t st_hier_put(st_hier_t *h, char *dst, const char *src, size_t len, int pre)
{
    if (h->dev != NULL) {
        const void *srcs = src;

        return pre ? st_hier_djob(h, dst, &srcs, 1, 1, 0, len) : st_hier_dcopy(h, dst, src, len * h->es);
    }
    if (pre) {
        st_reduce_pre(&h->args.redop, dst, src, len);
    } else {
        memcpy(dst, src, len * h->es);
    }
    return ST_OK;
}

static st_status_t st_hier_copy_in(st_hier_t *h, size_t k)
{
    char  *slot = st_hier_in(h, h->l, (int)(k % (size_t)h->depth));
    size_t first = k * h->chunk, len = st_hier_chunk_len(h, k);

    switch (h->args.type) {
    case ST_COLL_REDUCESCATTER: { /* every rank's piece k, at its place in the by-node chunk */
        size_t c = st_hier_piece_len(h, k);

        for (int r = 0; r < h->comm->nranks; r++) {
            ST_CHECK(st_hier_put(h, slot + st_hier_pos(h, k, r) * h->es,
                                 h->src + ((size_t)r * h->block + k * h->piece) * h->es, c, 1));
        }
        return ST_OK;
    }
    case ST_COLL_ALLTOALL: { /* piece k of the block for every rank, at that rank's place */
        size_t c = st_hier_piece_len(h, k);

        for (int r = 0; r < h->comm->nranks; r++) {
            ST_CHECK(st_hier_put(h, slot + st_hier_pos(h, k, r),
                                 h->src + (size_t)r * h->block + k * h->piece, c, 0));
        }
        return ST_OK;
    }
    case ST_COLL_ALLGATHER: /* the own piece k */
        return st_hier_put(h, slot + st_hier_pos(h, k, h->comm->rank), h->src + k * h->piece,
                           st_hier_piece_len(h, k), 0);
    case ST_COLL_BROADCAST:
        return h->comm->rank == h->args.root ? st_hier_put(h, slot, h->src + first, len, 0) : ST_OK;
    default: /* all-reduce, reduce */
        return st_hier_put(h, slot, h->src + first * h->es, len, 1);
    }
}

/* ---- reduce-scatter (intra) ----------------------------------------------------------------- */

/* All-gather: copies [off, off+cnt) of chunk k (this node's range, by node) to dst from the in
 * slots of the local ranks whose pieces it holds. */
static st_status_t st_hier_gather_local(st_hier_t *h, char *dst, size_t k, size_t off, size_t cnt)
{
    size_t c = st_hier_piece_len(h, k), first = (size_t)h->node_pre[h->node] * c;
    size_t pos = off, end = off + cnt;
    int    slot = (int)(k % (size_t)h->depth);

    while (pos < end) {
        int    lr      = (int)((pos - first) / c);
        size_t seg_end = ST_MIN(end, first + (size_t)(lr + 1) * c);

        ST_CHECK(st_hier_put(h, dst + (pos - off) * h->es, st_hier_in(h, lr, slot) + pos * h->es,
                             seg_end - pos, 0));
        pos = seg_end;
    }
    return ST_OK;
}

/* All-to-all: the owner of each shard gathers, for every other node, what its node's ranks send
 * there in that shard (their in slots' part of the node's range) into one message. */
static st_status_t st_hier_a2a_gather(st_hier_t *h, size_t k)
{
    int slot = (int)(k % (size_t)h->depth);

    for (int o = 0; o < h->nowned; o++) {
        char *out = h->slots[slot].rings[o].tmp;
        int   j = h->owned[o];

        for (int d = 0; d < h->nnodes; d++) {
            size_t off, len = st_hier_range(h, k, j, d, &off);
            char  *dst = out + st_hier_a2a_out_off(h, k, h->node, j, d);

            if (d == h->node || len == 0) {
                continue;
            }
            for (int lr = 0; lr < h->m; lr++) {
                memcpy(dst + (size_t)lr * len, st_hier_in(h, lr, slot) + off, len);
            }
        }
    }
    return ST_OK;
}

/* cma: a peer_read (write 0) or peer_write (write 1) of local rank lr's buffer failed (the
 * transport said which error at debug).
 * A buffer that cannot be read is the peer's failure: it exited, or it left the call (its own
 * failure) and its buffer went, or (a misuse) it freed its buffer during the call; ST_ERR_REMOTE,
 * which also makes the engine name every rank known to have exited. The kernel refusing what the
 * probe at init allowed (the peer made itself undumpable) is this rank's: ST_ERR_IO. */
static st_status_t st_hier_cma_fail(st_hier_t *h, int lr, const char *phase, const char *what,
                                    int write, st_status_t status)
{
    int r = st_topo_node_rank(h->topo, h->node, lr);
    const char *why = status == ST_ERR_UNSUPPORTED
                          ? "the kernel no longer allows it (ptrace rules: did that process "
                            "become undumpable?)"
                      : st_comm_peer_exited(h->comm, r)
                          ? "that rank has exited"
                          : "its buffer is not there (did that rank leave the call after a failure "
                            "of its own, or free its buffer during the call?)";

    st_error(ST_SUB_COLL, "%s #%llu (%s) rank %d: %s: cannot %s rank %d's %s buffer (local rank "
             "%d, pid %d) by cross-memory attach (process_vm_%s): %s", h->op.coll,
             (unsigned long long)h->args.seq, h->comm->name, h->comm->rank, phase,
             write ? "write" : "read", r, what, lr, h->zc.pid[lr], write ? "writev" : "readv", why);
    return status == ST_ERR_UNSUPPORTED ? ST_ERR_IO : ST_ERR_REMOTE;
}

/* Zero-copy with mapped buffers on one node (h->push): reduces cnt elements at element pos of V
 * over every local rank's send buffer, in local rank order, and stores the result straight into
 * every local rank's receive buffer, its own included, so there is no all-gather to do: the
 * peers only wait for the owners' RES. Per rank S bytes read and S written (streaming stores for
 * out-of-place calls from ST_HIER_STREAM_MIN: no read for ownership), where reducing into the own
 * buffer and letting the peers copy it out moves (3n - 1)/n S (bench/README.md). In place too: the
 * regions of shard j in every buffer are read and written by j's owner alone, each piece read
 * from all of them before it is stored into any. The pieces (ST_HIER_PUSH_PIECE) are reduced in
 * an L1-sized buffer on the stack; one store fence after all of them, before RS publishes them.
 * Measured (collbench -np 2|4 --mem-alloc all_reduce -b 64K -e 256M -f 4 -n 5 -w 2 -c 1 -z 1,
 * busbw GB/s, against the pull of st_hier_zc_reduce + st_hier_deliver): 2 ranks out of place
 * 5.5-11.5 vs 4.4-9.0 (256 MiB: 10.0 vs 6.5), in place 13-36 vs 5.4-10.9; 4 ranks out of place
 * 4.8-7.2 vs 3.8-5.2, in place 7.4-16.3 vs 3.3-5.9. 2 KiB pieces beat 8 KiB (8.8 vs 8.1 at
 * 256 MiB, 2 ranks); a fence per piece instead of per call cost a third. */
#define ST_HIER_PUSH_PIECE ((size_t)2 << 10)
static st_status_t st_hier_zc_push(st_hier_t *h, size_t pos, size_t cnt, int post)
{
    const void **srcs = h->srcs;
    char         tmp[ST_HIER_PUSH_PIECE] __attribute__((aligned(64)));
    size_t       piece = ST_HIER_PUSH_PIECE / h->es;

    for (size_t done = 0, n; done < cnt; done += n) {
        size_t at = (pos + done) * h->es;

        n = ST_MIN(piece, cnt - done);
        for (int lr = 0; lr < h->m; lr++) {
            srcs[lr] = h->zc.send[lr] + at;
        }
        st_intra_reduce(&h->args.redop, tmp, srcs, h->m, n);
        if (post) {
            st_reduce_post(&h->args.redop, tmp, n);
        }
        for (int i = 1; i <= h->m; i++) { /* the peers first, each from the next one on */
            char *dst = h->zc.recv[(h->l + i) % h->m] + at;

            if (h->push_nt) {
                st_copy_stream_unfenced(dst, tmp, n * h->es);
            } else {
                memcpy(dst, tmp, n * h->es);
            }
        }
    }
    if (h->push_nt) {
        st_stream_fence();
    }
    return ST_OK;
}

/* Zero-copy, host buffers: reduces cnt elements at element pos of V over every local rank's send
 * buffer into res (this rank's receive buffer), in local rank order (the copying path's order, so
 * the same bits). Mapped out of place: straight from the mapped buffers. cma: in pieces of
 * intra->zc_piece bytes, each peer's piece read with peer_read into this rank's staging (in
 * cache: every byte of the inputs is read from memory once, by the kernel's copy) and reduced
 * from there; the own piece straight from the own send buffer. In place on local rank 2 or
 * higher (either flavour) the own piece is staged too: st_intra_reduce lets dst be one of the
 * first four sources (st_reduce_combine_n), never a later one, and the rule stays the older,
 * stricter one (srcs[0] or srcs[1]). Pushing with cma, each reduced piece is then written into
 * every peer's receive buffer (peer_write). */
static st_status_t st_hier_zc_reduce(st_hier_t *h, char *res, size_t pos, size_t cnt, int post)
{
    const void **srcs = h->srcs;
    int          stage_own = (h->src == h->dst && h->l >= 2);
    size_t       piece = h->intra->zc_piece / h->es;
    st_status_t  status;

    if (h->push && !h->zc.cma) {
        return st_hier_zc_push(h, pos, cnt, post);
    }
    if (!h->zc.cma && !stage_own) {
        for (int lr = 0; lr < h->m; lr++) {
            srcs[lr] = h->zc.send[lr] + pos * h->es;
        }
        st_intra_reduce(&h->args.redop, res, srcs, h->m, cnt);
        if (post) {
            st_reduce_post(&h->args.redop, res, cnt);
        }
        return ST_OK;
    }
    for (size_t done = 0, n; done < cnt; done += n) {
        size_t at = (pos + done) * h->es;

        n = ST_MIN(piece, cnt - done);
        for (int lr = 0; lr < h->m; lr++) {
            char *stage = st_intra_zc_stage(h->intra, lr);

            if (lr == h->l) {
                srcs[lr] = h->src + at;
                if (stage_own) {
                    memcpy(stage, h->src + at, n * h->es);
                    srcs[lr] = stage;
                }
            } else if (h->zc.cma) {
                status = h->zc.win->peer_read(h->zc.pid[lr], stage, h->zc.send[lr] + at,
                                              n * h->es);
                if (status != ST_OK) {
                    return st_hier_cma_fail(h, lr, h->phases[1], "send", 0, status);
                }
                srcs[lr] = stage;
            } else {
                srcs[lr] = h->zc.send[lr] + at;
            }
        }
        st_intra_reduce(&h->args.redop, res + done * h->es, srcs, h->m, n);
        if (post) {
            st_reduce_post(&h->args.redop, res + done * h->es, n);
        }
        for (int i = 1; h->push && i < h->m; i++) { /* the result into every peer's too */
            int lr = (h->l + i) % h->m;

            status = h->zc.win->peer_write(h->zc.pid[lr], h->zc.recv[lr] + at, res + done * h->es,
                                           n * h->es);
            if (status != ST_OK) {
                return st_hier_cma_fail(h, lr, h->phases[1], "receive", 1, status);
            }
        }
    }
    return ST_OK;
}

/* The push found that local rank lr left this call (failed: st_hier_destroy's leave). */
static st_status_t st_hier_peer_left(st_hier_t *h, int lr)
{
    st_error(ST_SUB_COLL, "%s #%llu (%s) rank %d: %s: rank %d (local rank %d) left this call with "
             "an error; not storing results into its buffers", h->op.coll,
             (unsigned long long)h->args.seq, h->comm->name, h->comm->rank, h->phases[1],
             st_topo_node_rank(h->topo, h->node, lr), lr);
    return ST_ERR_REMOTE;
}

static st_status_t st_hier_reduce_scatter(st_hier_t *h, size_t k)
{
    int          slot = (int)(k % (size_t)h->depth);
    const void **srcs = h->srcs;

    if (h->args.type == ST_COLL_ALLTOALL) {
        return h->nnodes > 1 ? st_hier_a2a_gather(h, k) : ST_OK;
    }
    int          post = (h->nnodes == 1 && h->mode == ST_HIER_REDUCE &&
                         st_redop_has_post(&h->args.redop));

    for (int o = 0; o < h->nowned; o++) {
        for (int i = 0; i < st_hier_nranges(h); i++) {
            size_t off, cnt = st_hier_range(h, k, h->owned[o], i, &off);
            char  *res = st_hier_res(h, h->l, k) + off * h->es;

            if (cnt == 0) {
                continue;
            }
            if (h->args.type == ST_COLL_ALLGATHER) { /* this node's part; the ring brings the rest */
                if (i == h->node) {
                    ST_CHECK(st_hier_gather_local(h, res, k, off, cnt));
                }
                continue;
            }
            if (h->args.type == ST_COLL_BROADCAST) { /* the root's node takes it from the root */
                if (h->node == h->root_node) {
                    int rl = st_topo_local_rank(h->topo, h->args.root);

                    ST_CHECK(st_hier_put(h, res, st_hier_in(h, rl, slot) + off * h->es, cnt, 0));
                }
                continue;
            }
            if (h->zc.on && h->dev == NULL) {
                ST_CHECK(st_hier_zc_reduce(h, res, k * h->chunk + off, cnt, post));
                continue;
            }
            for (int lr = 0; lr < h->m; lr++) {
                srcs[lr] = h->zc.on ? h->zc.send[lr] + (k * h->chunk + off) * h->es
                                    : st_hier_in(h, lr, slot) + off * h->es;
            }
            if (h->dev != NULL) {
                ST_CHECK(st_hier_djob(h, res, srcs, h->m, 0, post, cnt));
                continue;
            }
            st_intra_reduce(&h->args.redop, res, srcs, h->m, cnt);
            if (post) {
                st_reduce_post(&h->args.redop, res, cnt);
            }
        }
    }
    return ST_OK;
}

/* ---- inter-node ring per shard -------------------------------------------------------------- */

/* Block b of ring r's shard in chunk k: offset (elements, in the chunk) and count. Linear: the
 * shard cut into N blocks (a chain moves it whole); by node: the shard's part of node b's range. */
static size_t st_hier_block(const st_hier_t *h, size_t k, const st_hier_ring_t *r, int b,
                            size_t *off_p)
{
    size_t off, cnt;

    if (h->layout == ST_HIER_BYNODE) {
        return st_hier_range(h, k, r->j, b, off_p);
    }
    if (h->inter == ST_HIER_CHAIN) {
        *off_p = r->off;
        return r->cnt;
    }
    st_hier_split(r->cnt, h->nnodes, b, h->unit, &off, &cnt);
    *off_p = r->off + off;
    return cnt;
}

/* One side of an inter-node step: peer -1 when there is nothing to move. */
typedef struct st_hier_io {
    int    peer;
    size_t off, cnt;  /* elements, in the chunk */
    int    into_tmp;  /* a receive into the staging, reduced into res when it lands */
} st_hier_io_t;

/* What step r->step of ring r sends and receives (st_hier_inter_t). Ring (Patarasuk and Yuan):
 * steps < N-1 send block pos-s-1 and receive block pos-s-2 to add to their own; the others
 * (t = s-(N-1)) send block pos-t and receive block pos-t-1 as it is. Chain, at q = the node's
 * distance from the root's node: broadcast receives from q-1 (step 0) and sends to q+1 (step 1);
 * reduce receives from q+1 to add to its own (step 0) and sends to q-1 (step 1). */
static void st_hier_step_io(const st_hier_t *h, size_t k, const st_hier_ring_t *r,
                            st_hier_io_t *snd, st_hier_io_t *rcv)
{
    int n = h->nnodes, pos = h->node, step = r->step;

    snd->peer = rcv->peer = -1;
    snd->cnt = rcv->cnt = 0;
    rcv->into_tmp = 0;
    if (h->inter == ST_HIER_CHAIN) {
        int q = st_hier_mod(pos - h->root_node, n), bcast = (h->args.type == ST_COLL_BROADCAST);
        int recv_from = bcast ? (q > 0 ? r->left : -1) : (q < n - 1 ? r->right : -1);
        int send_to = bcast ? (q < n - 1 ? r->right : -1) : (q > 0 ? r->left : -1);

        if (step == 0 && recv_from >= 0) {
            rcv->peer     = recv_from;
            rcv->cnt      = st_hier_block(h, k, r, 0, &rcv->off);
            rcv->into_tmp = !bcast;
        } else if (step == 1 && send_to >= 0) {
            snd->peer = send_to;
            snd->cnt  = st_hier_block(h, k, r, 0, &snd->off);
        }
        return;
    }
    snd->peer = r->right;
    rcv->peer = r->left;
    if (step < n - 1) {
        snd->cnt      = st_hier_block(h, k, r, st_hier_mod(pos - step - 1, n), &snd->off);
        rcv->cnt      = st_hier_block(h, k, r, st_hier_mod(pos - step - 2, n), &rcv->off);
        rcv->into_tmp = 1;
    } else {
        int t = step - (n - 1);

        snd->cnt = st_hier_block(h, k, r, st_hier_mod(pos - t, n), &snd->off);
        rcv->cnt = st_hier_block(h, k, r, st_hier_mod(pos - t - 1, n), &rcv->off);
    }
}

/* All-to-all: one message to and one from shard j's owner on every other node, all in flight
 * (sub-tag: chunk, shard, sending node). */
static void st_hier_exchange_post(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r,
                                  st_status_t *status_p)
{
    char  *res = st_hier_ring_res(h, s->k);
    size_t part, mine = st_hier_range(h, s->k, r->j, h->node, &part);
    int    x = 0;

    for (int d = 0; d < h->nnodes && *status_p == ST_OK; d++) {
        int      peer = st_hier_owner(h, d, r->j);
        size_t   off, out = st_hier_range(h, s->k, r->j, d, &off);
        uint64_t base = (uint64_t)(s->k * (size_t)h->nshards + (size_t)r->j) * (uint64_t)h->nnodes;
        size_t   rlen = (size_t)st_hier_msize(h, d) * mine, slen = (size_t)h->m * out;

        if (d == h->node) {
            continue;
        }
        if (rlen > 0) {
            *status_p = st_rail_recv(h->comm, &r->net[x], peer,
                                     res + st_hier_a2a_in_off(h, s->k, h->node, r->j, d), rlen,
                                     st_tag_coll(h->args.seq, (base + (uint64_t)d) &
                                                                  ST_TAG_SUB_MASK));
        }
        if (slen > 0 && *status_p == ST_OK) {
            *status_p = st_rail_send(h->comm, &r->net[x + 1], peer,
                                     r->tmp + st_hier_a2a_out_off(h, s->k, h->node, r->j, d), slen,
                                     st_tag_coll(h->args.seq, (base + (uint64_t)h->node) &
                                                                  ST_TAG_SUB_MASK));
            h->inter_bytes += slen;
        }
        x += 2;
    }
}

/* ---- the compressed inter-node step ------------------------------------------------------ */

/* Where ring r's areas lie in its staging (sizes from st_hier_create). */
static st_hier_coded_t st_hier_coded_areas(const st_hier_t *h, const st_hier_ring_t *r)
{
    st_hier_coded_t c;
    size_t          others = (size_t)h->nnodes - 1;

    c.out     = r->tmp;
    c.in      = c.out + others * h->wire_stride;
    c.sum     = c.in + others * h->wire_stride;
    c.dec     = c.sum + h->wire_stride;
    c.scratch = (float *)(void *)(c.dec + others * h->dec_stride);
    return c;
}

/* Staging bytes of one ring of the compressed step. */
static size_t st_hier_coded_bytes(const st_hier_t *h)
{
    size_t others = (size_t)h->nnodes - 1;

    return (2 * others + 1) * h->wire_stride + others * h->dec_stride +
           st_codec_scratch(&h->cz->params, h->block_max) * sizeof(float);
}

/* The other nodes' slots: node d's index among the N-1 others. */
static inline int st_hier_other(const st_hier_t *h, int d)
{
    return d < h->node ? d : d - 1;
}

/* The compressed all-reduce of shard r->j of chunk k (docs/compression.md). Step 0, a direct
 * reduce-scatter: the block of every other node d is encoded (with this rank's residual) and sent
 * to d's owner of the shard, and this node's block is received from each, decoded by the rail.
 * Step 1, the all-gather: this node's block summed (st_hier_coded_sum) is encoded once and sent
 * to every other node, whose blocks arrive encoded and are decoded into the res slot. Sub-tags:
 * (chunk, shard, step, sending node). */
static st_status_t st_hier_coded_post(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    char                         *res = st_hier_ring_res(h, s->k);
    st_hier_coded_t               c = st_hier_coded_areas(h, r);
    const strataCompressParams_t *p = &h->cz->params;
    size_t                        mine_off, mine = st_hier_block(h, s->k, r, h->node, &mine_off);
    size_t                        w = h->wire_stride, dsz = h->dec_stride;
    size_t                        gbase = s->k * h->chunk; /* elements before the chunk */
    size_t                        sum_bytes = st_codec_wire_bytes(p, h->args.dtype, mine);
    uint64_t base = ((uint64_t)(s->k * (size_t)h->nshards + (size_t)r->j) * 2 + (uint64_t)r->step) *
                    (uint64_t)h->nnodes;

    for (int d = 0; d < h->nnodes; d++) {
        int            peer = st_hier_owner(h, d, r->j), o = st_hier_other(h, d);
        size_t         off, cnt = st_hier_block(h, s->k, r, d, &off);
        st_rail_xfer_t *rx = &r->net[2 * o], *sx = &r->net[2 * o + 1];
        uint64_t       rtag = st_tag_coll(h->args.seq, (base + (uint64_t)d) & ST_TAG_SUB_MASK);
        uint64_t       stag = st_tag_coll(h->args.seq, (base + (uint64_t)h->node) &
                                                           ST_TAG_SUB_MASK);

        if (d == h->node) {
            continue;
        }
        if (r->step == 0) {
            if (mine > 0) {
                ST_CHECK(st_rail_recv_coded(h->comm, rx, peer, p, h->args.dtype,
                                            c.dec + (size_t)o * dsz, mine, c.in + (size_t)o * w,
                                            rtag));
            }
            if (cnt > 0) {
                ST_CHECK(st_rail_send_coded(h->comm, sx, peer, p, h->args.dtype,
                                            res + off * h->es, cnt,
                                            h->cz->residual != NULL ? h->cz->residual + gbase + off
                                                                    : NULL,
                                            c.out + (size_t)o * w, c.scratch, stag));
                h->inter_bytes += st_codec_wire_bytes(p, h->args.dtype, cnt);
            }
        } else {
            if (cnt > 0) {
                ST_CHECK(st_rail_recv_coded(h->comm, rx, peer, p, h->args.dtype,
                                            res + off * h->es, cnt, c.in + (size_t)o * w, rtag));
            }
            if (mine > 0) {
                ST_CHECK(st_rail_send(h->comm, sx, peer, c.sum, sum_bytes, stag));
                h->inter_bytes += sum_bytes;
            }
        }
    }
    return ST_OK;
}

/* After step 0: this node's block of the shard summed in the ring's order (the contribution of
 * node+1 first, then each next node's added to it, this node's own last, with the ring's
 * reduction code), so that an exact codec gives the uncompressed ring's bits; then encoded once
 * (with this rank's residual) and, in the same pass, decoded back into the res slot, so that this
 * rank holds what every other node will decode. */
static void st_hier_coded_sum(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    char            *res = st_hier_ring_res(h, s->k);
    st_hier_coded_t  c = st_hier_coded_areas(h, r);
    size_t           off, cnt = st_hier_block(h, s->k, r, h->node, &off);
    size_t           dsz = h->dec_stride;
    const char      *acc;

    if (cnt == 0) {
        return;
    }
    acc = c.dec + (size_t)st_hier_other(h, st_hier_mod(h->node + 1, h->nnodes)) * dsz;
    for (int i = 2; i < h->nnodes; i++) {
        char *mine = c.dec + (size_t)st_hier_other(h, st_hier_mod(h->node + i, h->nnodes)) * dsz;

        st_reduce_combine(&h->args.redop, mine, mine, acc, cnt);
        acc = mine;
    }
    st_reduce_combine(&h->args.redop, res + off * h->es, res + off * h->es, acc, cnt);
    if (st_redop_has_post(&h->args.redop)) {
        st_reduce_post(&h->args.redop, res + off * h->es, cnt);
    }
    st_codec_encode_dec(&h->cz->params, h->args.dtype, res + off * h->es, cnt,
                        h->cz->residual != NULL ? h->cz->residual + s->k * h->chunk + off : NULL,
                        c.sum, c.scratch, res + off * h->es);
}

static st_status_t st_hier_ring_post(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    char        *res = st_hier_ring_res(h, s->k);
    st_hier_io_t snd, rcv;
    uint64_t     tag;

    for (;;) {
        if (r->step == h->step_end) {
            s->left--;
            return ST_OK;
        }
        if (h->inter == ST_HIER_EXCHANGE || h->inter == ST_HIER_CODED) {
            st_status_t status = ST_OK;
            int         any = 0;

            if (h->inter == ST_HIER_CODED) {
                status = st_hier_coded_post(h, s, r);
            } else {
                st_hier_exchange_post(h, s, r, &status);
            }
            ST_CHECK(status);
            for (int x = 0; x < h->nnet; x++) {
                any |= r->net[x].posted;
            }
            if (any) {
                return ST_OK;
            }
            r->step++; /* nothing to move */
            continue;
        }
        st_hier_step_io(h, s->k, r, &snd, &rcv);
        /* one tag per (chunk, shard, step): both ends compute the same (a chain's one message
         * per chunk and shard is sent at step 1 and received at step 0: sub-step 0) */
        tag = st_tag_coll(h->args.seq,
                          ((uint64_t)(s->k * (size_t)h->nshards + (size_t)r->j) *
                               (uint64_t)h->tag_steps +
                           (uint64_t)(h->inter == ST_HIER_CHAIN ? 0 : r->step)) & ST_TAG_SUB_MASK);
        if (rcv.peer >= 0 && rcv.cnt > 0) {
            ST_CHECK(st_rail_recv(h->comm, &r->net[ST_RAIL_RECV], rcv.peer,
                                  rcv.into_tmp ? r->tmp : res + rcv.off * h->es, rcv.cnt * h->es,
                                  tag));
        }
        if (snd.peer >= 0 && snd.cnt > 0) {
            ST_CHECK(st_rail_send(h->comm, &r->net[ST_RAIL_SEND], snd.peer, res + snd.off * h->es,
                                  snd.cnt * h->es, tag));
            h->inter_bytes += snd.cnt * h->es;
        }
        if (r->net[ST_RAIL_RECV].posted || r->net[ST_RAIL_SEND].posted) {
            return ST_OK;
        }
        r->step++; /* both blocks empty: nothing to wait for */
    }
}

static const char *const st_hier_inter_what[] = {"all-reduce", "reduce-scatter", "all-gather",
                                                 "broadcast chain", "reduce chain",
                                                 "all-to-all exchange",
                                                 "compressed all-reduce"};

static const char *st_hier_inter_name(const st_hier_t *h)
{
    if (h->inter == ST_HIER_EXCHANGE) {
        return st_hier_inter_what[5];
    }
    if (h->inter == ST_HIER_CODED) {
        return st_hier_inter_what[6];
    }
    if (h->inter == ST_HIER_CHAIN) {
        return st_hier_inter_what[h->args.type == ST_COLL_BROADCAST ? 3 : 4];
    }
    return st_hier_inter_what[h->step0 > 0 ? 2 : (h->step_end < 2 * (h->nnodes - 1) ? 1 : 0)];
}

/* Advances one ring as far as it goes without waiting. */
static st_status_t st_hier_ring_progress(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    int n = h->nnodes;

    while (r->step < h->step_end) {
        st_hier_io_t snd, rcv;
        int          at;
        st_status_t  status = st_rail_test_all(r->net, h->nnet, &at);

        if (status == ST_INPROGRESS) {
            h->op.wait_peer = r->net[at].peer;
            return ST_INPROGRESS;
        }
        if (status != ST_OK) {
            return st_rail_fail(&h->op, &r->net[at], status, "inter-node %s of shard %d, step "
                                "%d/%d", st_hier_inter_name(h), r->j, r->step - h->step0 + 1,
                                h->step_end - h->step0);
        }
        if (h->inter == ST_HIER_EXCHANGE || h->inter == ST_HIER_CODED) {
            if (h->inter == ST_HIER_CODED && r->step == 0) {
                st_hier_coded_sum(h, s, r);
            }
            r->step++;
            h->op.progressed = 1;
            ST_CHECK(st_hier_ring_post(h, s, r));
            continue;
        }
        st_hier_step_io(h, s->k, r, &snd, &rcv);
        if (rcv.into_tmp && rcv.peer >= 0 && rcv.cnt > 0) {
            st_reduce_combine(&h->args.redop, st_hier_ring_res(h, s->k) + rcv.off * h->es,
                              st_hier_ring_res(h, s->k) + rcv.off * h->es, r->tmp, rcv.cnt);
        }
        if (h->mode == ST_HIER_REDUCE && st_redop_has_post(&h->args.redop)) {
            size_t off, cnt = 0;

            if (h->inter == ST_HIER_RING && r->step == n - 2) { /* the last reduce step */
                cnt = st_hier_block(h, s->k, r, h->node, &off);
            } else if (h->inter == ST_HIER_CHAIN && r->step == 0 && h->node == h->root_node) {
                cnt = st_hier_block(h, s->k, r, 0, &off);
            }
            if (cnt > 0) {
                st_reduce_post(&h->args.redop, st_hier_ring_res(h, s->k) + off * h->es, cnt);
            }
        }
        r->step++;
        h->op.progressed = 1;
        ST_CHECK(st_hier_ring_post(h, s, r));
    }
    return ST_OK;
}

/* Device buffers: copies chunk k's owned shards from the res slot to the pinned host copy the
 * ring works on (to_host), or back, and awaits the copies. */
static st_status_t st_hier_mirror(st_hier_t *h, size_t k, int to_host)
{
    for (int o = 0; o < h->nowned; o++) {
        for (int i = 0; i < st_hier_nranges(h); i++) {
            size_t off, cnt = st_hier_range(h, k, h->owned[o], i, &off);
            char  *dev = st_hier_res(h, h->l, k) + off * h->es;
            char  *host = st_hier_ring_res(h, k) + off * h->es;

            ST_CHECK(st_hier_dcopy(h, to_host ? host : dev, to_host ? dev : host, cnt * h->es));
        }
    }
    return st_hier_dsync(h, to_host ? "copying the owned shards to host memory"
                                    : "copying the all-reduced shards back to the device");
}

static st_status_t st_hier_inter_start(st_hier_t *h, size_t k)
{
    st_hier_slot_t *s = &h->slots[k % (size_t)h->depth];
    size_t          len = st_hier_chunk_len(h, k);

    s->active = 1;
    s->k      = k;
    s->left   = h->nowned;
    if (h->dev != NULL) { /* the owned shards to the pinned host copy the ring works on */
        ST_CHECK(st_hier_mirror(h, k, 1));
    }
    if (h->inter_active++ == 0) {
        h->t_inter_since = st_time_now();
    }
    for (int o = 0; o < h->nowned; o++) {
        st_hier_ring_t *r = &s->rings[o];

        r->j    = h->owned[o];
        r->off  = r->cnt = 0; /* by node: the ranges of st_hier_range */
        if (h->layout == ST_HIER_LINEAR) {
            st_hier_shard(h, len, r->j, &r->off, &r->cnt);
        }
        r->step = h->step0;
        for (int x = 0; x < h->nnet; x++) {
            r->net[x].posted = 0;
        }
        r->left  = st_hier_owner(h, st_hier_mod(h->node - 1, h->nnodes), r->j);
        r->right = st_hier_owner(h, st_hier_mod(h->node + 1, h->nnodes), r->j);
        ST_CHECK(st_hier_ring_post(h, s, r));
    }
    return ST_OK;
}

static st_status_t st_hier_inter_progress(st_hier_t *h)
{
    for (int i = 0; i < h->depth; i++) {
        st_hier_slot_t *s = &h->slots[i];

        if (!s->active) {
            continue;
        }
        for (int o = 0; o < h->nowned; o++) {
            st_hier_ring_t *r = &s->rings[o];
            st_status_t     status;

            if (r->step == h->step_end) {
                continue;
            }
            status = st_hier_ring_progress(h, s, r);
            if (status < 0) {
                return status;
            }
        }
        if (s->left == 0 && h->dev != NULL) { /* the all-reduced shards back to the res slot */
            ST_CHECK(st_hier_mirror(h, s->k, 0));
        }
        if (s->left == 0) {
            s->active = 0;
            if (--h->inter_active == 0) {
                h->t_busy[1] += st_time_now() - h->t_inter_since;
            }
        }
    }
    return ST_OK;
}

/* ---- all-gather (intra) --------------------------------------------------------------------- */

/* Copies len elements of local rank lr's res slot of chunk k at offset off to dst. */
static st_status_t st_hier_take(st_hier_t *h, char *dst, int lr, size_t k, size_t off, size_t len)
{
    const char *src = st_hier_res(h, lr, k) + off * h->es;

    if (h->dev != NULL) {
        return st_hier_dcopy(h, dst, src, len * h->es);
    }
    memcpy(dst, src, len * h->es);
    return ST_OK;
}

/* By node: reduce-scatter copies out the rank's own piece, all-gather every rank's, each from
 * the local owner of the shard that holds it. */
static st_status_t st_hier_deliver_bynode(st_hier_t *h, size_t k)
{
    size_t c = st_hier_piece_len(h, k);

    for (int j = 0; j < h->nshards; j++) {
        for (int b = 0; b < h->nnodes; b++) {
            size_t off, cnt = st_hier_range(h, k, j, b, &off), pos = off, end = off + cnt;
            size_t first = (size_t)h->node_pre[b] * c;

            if (h->args.type == ST_COLL_REDUCESCATTER) { /* the own piece only */
                size_t mine = st_hier_pos(h, k, h->comm->rank);

                if (b != h->node) {
                    continue;
                }
                pos = ST_MAX(pos, mine);
                end = ST_MIN(end, mine + c);
            }
            while (pos < end) {
                int    lb = (int)((pos - first) / c);
                size_t piece_first = first + (size_t)lb * c;
                size_t seg_end = ST_MIN(end, piece_first + c);
                int    r = st_topo_node_rank(h->topo, b, lb);
                char  *dst = h->dst + ((h->args.type == ST_COLL_ALLGATHER ? (size_t)r * h->block : 0) +
                                       k * h->piece + (pos - piece_first)) * h->es;

                ST_CHECK(st_hier_take(h, dst, j % h->m, k, pos, seg_end - pos));
                pos = seg_end;
            }
        }
    }
    return ST_OK;
}

/* All-to-all: piece k of every rank's block for this rank, from the local ranks' in slots and,
 * for the other nodes' ranks, from the res slots of the owners that received them. */
static st_status_t st_hier_deliver_a2a(st_hier_t *h, size_t k)
{
    size_t c = st_hier_piece_len(h, k), me = st_hier_pos(h, k, h->comm->rank);
    int    slot = (int)(k % (size_t)h->depth);

    for (int p = 0; p < h->comm->nranks; p++) {
        int   d = st_topo_node(h->topo, p), lp = st_topo_local_rank(h->topo, p);
        char *dst = h->dst + (size_t)p * h->block + k * h->piece;

        if (d == h->node) {
            memcpy(dst, st_hier_in(h, lp, slot) + me, c);
            continue;
        }
        for (int j = 0; j < h->nshards; j++) {
            size_t off, len = st_hier_range(h, k, j, h->node, &off);
            size_t a = ST_MAX(off, me), e = ST_MIN(off + len, me + c);

            if (a < e) {
                memcpy(dst + (a - me), st_hier_res(h, j % h->m, k) +
                                           st_hier_a2a_in_off(h, k, h->node, j, d) +
                                           (size_t)lp * len + (a - off), e - a);
            }
        }
    }
    return ST_OK;
}

/* All-reduces of at least this many bytes copy their result out with non-temporal stores
 * (st_copy_stream). Measured (collbench -np 2|4 [--mem-alloc] all_reduce -b 1M -e 256M -f 4 -n 3
 * -c 1 -z 1, STRATA_CMA=0, busbw GB/s, streaming at every size against never): copying path
 * 2 ranks 1.14-1.24x from 4 MiB, 4 ranks 1.15-1.26x; mapped zero-copy 1.04-1.15x from 16 MiB,
 * 0.88-1.10 at 1-4 MiB; below 4 MiB the result may still be read from the cache. */
#define ST_HIER_STREAM_MIN ((size_t)4 << 20)

static st_status_t st_hier_deliver(st_hier_t *h, size_t k)
{
    size_t len = st_hier_chunk_len(h, k), first = k * h->chunk;

    if (h->args.type == ST_COLL_ALLTOALL) {
        return st_hier_deliver_a2a(h, k);
    }
    if (h->layout == ST_HIER_BYNODE) {
        return st_hier_deliver_bynode(h, k);
    }

    for (int j = 0; j < h->nshards; j++) {
        size_t off, cnt, a, b;
        int    lr = j % h->m;

        st_hier_shard(h, len, j, &off, &cnt);
        a = ST_MAX(first + off, h->own_first);
        b = ST_MIN(first + off + cnt, h->own_first + h->own_count);
        if (a >= b || (h->zc.on && lr == h->l) || h->push) {
            continue; /* zero-copy: the own shards were reduced in place; push: every shard */
        }
        if (h->dev != NULL) {
            ST_CHECK(st_hier_dcopy(h, h->dst + (a - h->own_first) * h->es,
                                   st_hier_res(h, lr, k) + (a - first) * h->es, (b - a) * h->es));
        } else if (h->zc.cma) { /* straight from the owner's receive buffer into the own */
            st_status_t status = h->zc.win->peer_read(h->zc.pid[lr],
                                                      h->dst + (a - h->own_first) * h->es,
                                                      st_hier_res(h, lr, k) + (a - first) * h->es,
                                                      (b - a) * h->es);

            if (status != ST_OK) {
                return st_hier_cma_fail(h, lr, h->phases[3], "receive", 0, status);
            }
        } else if (h->total * h->es >= ST_HIER_STREAM_MIN) {
            /* a large result is not read back soon: no read for ownership, no cache pollution */
            st_copy_stream(h->dst + (a - h->own_first) * h->es,
                           st_hier_res(h, lr, k) + (a - first) * h->es, (b - a) * h->es);
        } else {
            memcpy(h->dst + (a - h->own_first) * h->es,
                   st_hier_res(h, lr, k) + (a - first) * h->es, (b - a) * h->es);
        }
    }
    return ST_OK;
}

/* ---- the op --------------------------------------------------------------------------------- */

/* Zero-copy (coll/intra.h), mapped or cma. Not with premul, which needs the scaled copy that
 * copy-in makes. In place too: rank p's buffer holds, for each shard j of a chunk, p's input to j
 * and then j's result, and
 *   - the only reader of p's input to shard j is j's owner o, in its reduce-scatter of the chunk;
 *   - the only writer of that region is p itself: as o (p = o), the reduce-scatter writes the
 *     result over its own input (st_hier_zc_reduce stages the own piece first where the
 *     reduction would read it after writing) and the inter-node ring works on it in place; as a
 *     non-owner, its all-gather copies the result there only once o published RES for the chunk,
 *     which o does after its reduce-scatter read everyone's inputs to j;
 *   - the result in o's buffer is read by the peers' all-gather only after RES, and the call
 *     returns only when every peer finished its all-gather (the final wait of st_hier_progress).
 * So no region is written while another rank may still read what it held. Pushing (one node) the
 * only writer of region j in every buffer is j's owner o, which is also its only reader: o reads
 * each piece of it from every buffer before it stores the result into any (st_hier_zc_push
 * reduces into its own small buffer; with cma st_hier_zc_reduce stages as above and writes the
 * result after), and every rank returns only after every owner's RES for the last chunk. In place
 * on local rank 2 or higher needs the staging (intra->zc_piece > 0), which a rank without it does
 * not want (the mapped push would not need it, but the rule is the flavour-blind one).
 * Device buffers stay out of place: their reduction is the device's chained multi-source job,
 * whose second job would read an own input the first already overwrote. */
/* Under STRATA_CMA=auto, all-reduces take cma up to ST_HIER_CMA_MAX bytes, and larger ones too
 * where the node has 2 local ranks and is not oversubscribed; on an oversubscribed node only from
 * ST_HIER_CMA_OVERSUB_MIN. The others copy through the windows. Measured with the push
 * (collbench -np 2|4 all_reduce -b 1M -e 256M -f 4 -n 5 -w 2 -c 1 -z 1, STRATA_CMA=1 against 0,
 * busbw GB/s): 2 ranks cma/copy out of place 1.13 at 1 MiB, 1.72 at 4 MiB, 1.63 at 16 MiB,
 * 1.22-1.25 at 32-64 MiB, 1.11-1.13 at 256 MiB, in place 1.4-3.6. 4 ranks on 2 cores (-b 2M -e 16M
 * -f 2 -n 10 -w 5 and -b 256K -e 2M -f 2 -n 20 -w 5, three runs each, alternating): out of place
 * 1.1-1.7 at 1 MiB, 1.09-1.18 at 2 MiB, 1.10-1.23 at 4 MiB, 1.15-1.25 at 8 MiB, 1.01-1.10 at
 * 16 MiB, in place 1.3-1.8; noisy and no better at 256-512 KiB (0.7-1.9 at 256 KiB, 0.7-1.0 at
 * 512: the system calls and their pinning weigh most there, and where ranks wait for a core);
 * at 64 MiB 0.76-0.78 (-b 1M -e 64M -f 4 -n 5 -w 5, two runs each; the kernel's copy and its page
 * pinning, perf: a third of the time in _copy_to_iter, _copy_from_iter and follow_page_pte).
 * 16 MiB still won a little; auto copies there, the 8 MiB limit being the one of 3 or more
 * ranks. 3 or more ranks on as many cores are unmeasured (a 2-core machine): above
 * ST_HIER_CMA_MAX they keep the limit that held before the push, when cma lost from 64 MiB on 2
 * ranks. Oversubscription was measured as 4 ranks on 2 cores only. */
#define ST_HIER_CMA_OVERSUB_MIN ((size_t)1 << 20)
#define ST_HIER_CMA_MAX ((size_t)8 << 20)

static st_status_t st_hier_zc_negotiate(st_hier_t *h, int *lag_p)
{
    int         in_place = h->args.sendbuff == h->args.recvbuff;
    int         want = !h->args.redop.premul &&
                       (!in_place || (h->dev == NULL && (h->l < 2 || h->intra->zc_piece > 0)));
    int         was = h->zc.state;
    st_status_t status;

    if (!h->intra->cma_forced &&
        (((h->comm->intra_oversub || h->m > 2) && h->total * h->es > ST_HIER_CMA_MAX) ||
         (h->comm->intra_oversub && h->total * h->es < ST_HIER_CMA_OVERSUB_MIN))) {
        h->zc.may_cma = 0; /* from the node's CPUs, ranks and the size; ranks that still
                            * differ (STRATA_CMA=1 on some) agree through the descriptors */
    }
    status = st_intra_zc_negotiate(h->intra, &h->zc, h->base, want, h->args.sendbuff,
                                   h->args.recvbuff, h->total * h->es, lag_p);
    if (h->zc.state != was) {
        h->op.progressed = 1;
    }
    if (status == ST_OK && h->zc.on && h->dev == NULL && h->nnodes == 1 &&
        h->m > 1) { /* the same on every local rank: the negotiation, the layout and the size */
        h->push    = 1;
        h->push_nt = !in_place && h->total * h->es >= ST_HIER_STREAM_MIN;
    }
    if (status == ST_ERR_IO) {
        st_error(ST_SUB_COLL, "%s #%llu rank %d: cannot map local rank %d's strataMemAlloc "
                 "buffers", h->op.coll, (unsigned long long)h->args.seq, h->comm->rank, *lag_p);
    } else if (status == ST_OK && h->zc.on && h->zc.cma) {
        st_debug(ST_SUB_COLL, "%s #%llu rank %d: zero-copy by cross-memory attach (every local "
                 "rank's buffers are host memory, not all shareable)%s%s", h->op.coll,
                 (unsigned long long)h->args.seq, h->comm->rank, in_place ? ", in place" : "",
                 h->push ? "; the owners push" : "");
    } else if (status == ST_OK && h->zc.on) {
        st_debug(ST_SUB_COLL, "%s #%llu rank %d: zero-copy (every local rank's buffers are "
                 "shareable)%s%s", h->op.coll, (unsigned long long)h->args.seq, h->comm->rank,
                 in_place ? ", in place" : "", h->push ? "; the owners push" : "");
    } else if (status == ST_OK && h->zc.state == 2 && h->m > 1) {
        st_debug(ST_SUB_COLL, "%s #%llu rank %d: copying through the windows", h->op.coll,
                 (unsigned long long)h->args.seq, h->comm->rank);
    }
    return status;
}

static const char *const st_hier_phases[] = {"copy-in", "intra reduce-scatter",
                                             "inter-node all-reduce", "intra all-gather"};
/* all-to-all's names of the same four steps */
static const char *const st_hier_a2a_phases[] = {"copy-in", "gather per destination node",
                                                 "inter-node all-to-all exchange", "copy-out"};

static void st_hier_blocked(st_hier_t *h, int phase, int laggard_lr)
{
    h->op.win_wait  = 1;
    h->op.phase     = h->phases[phase];
    h->op.wait_peer = (laggard_lr >= 0) ? st_topo_node_rank(h->topo, h->node, laggard_lr) : -1;
}

static st_status_t st_hier_progress(st_op_t *op)
{
    st_hier_t  *h = (st_hier_t *)op;
    st_intra_t *intra = h->intra;
    uint32_t    bell;
    int         lag = -1;
    double      t0;

    op->sleepable = 0;
    op->win_wait  = 0;
    if (intra->turn != h->ticket) {
        op->phase     = "waiting for the previous collective on the node's windows";
        op->wait_peer = -1;
        return ST_INPROGRESS;
    }
    bell = st_intra_doorbell(intra);
    op->wait_peer = -1;
    if (op->check != NULL) {
        (void)st_check_post(op->check); /* one node: rides on this op's first publish */
    }
    if (h->zc.state < 2) {
        st_status_t status = st_hier_zc_negotiate(h, &lag);

        if (status == ST_INPROGRESS) {
            st_hier_blocked(h, 0, lag);
            op->phase = "zero-copy: waiting for the local ranks' buffer descriptors";
            goto idle;
        }
        ST_CHECK(status);
    }

    /* copy-in: as far as the slots allow (zero-copy: nothing to copy) */
    while (h->copy_k < h->ncols && (h->push || h->copy_k < h->ag_k + (size_t)h->depth)) {
        if (h->push) { /* nothing to copy, no slots to wait for: every chunk at once */
            h->copy_k = h->ncols;
            st_intra_publish(intra, ST_INTRA_IN, h->base + h->copy_k);
            op->progressed = 1;
            break;
        }
        if (h->copy_k >= (size_t)h->depth &&
            (!st_intra_all_reached(intra, ST_INTRA_RS, h->base + h->copy_k - h->depth + 1, &lag) ||
             /* all-to-all: the local ranks also read the in slots when they copy out */
             (h->args.type == ST_COLL_ALLTOALL &&
              !st_intra_all_reached(intra, ST_INTRA_AG, h->base + h->copy_k - h->depth + 1,
                                    &lag)))) {
            st_hier_blocked(h, 0, lag);
            break;
        }
        t0 = st_time_now();
        if (!h->zc.on) {
            ST_CHECK(st_hier_copy_in(h, h->copy_k));
            if (h->dev != NULL) {
                ST_CHECK(st_hier_dsync(h, h->phases[0]));
            }
        }
        h->t_busy[0] += st_time_now() - t0;
        st_intra_publish(intra, ST_INTRA_IN, h->base + ++h->copy_k);
        op->progressed = 1;
    }
    /* reduce-scatter of chunks every local rank copied in */
    while (h->rs_k < h->copy_k) {
        if (!st_intra_all_reached(intra, ST_INTRA_IN, h->base + h->rs_k + 1, &lag) ||
            (h->rs_k >= (size_t)h->depth && !h->push &&
             !st_intra_all_reached(intra, ST_INTRA_AG, h->base + h->rs_k - h->depth + 1, &lag))) {
            st_hier_blocked(h, 1, lag);
            break;
        }
        if (h->slots[h->rs_k % (size_t)h->depth].active) {
            break;
        }
        t0 = st_time_now();
        if (h->push) { /* stores into the peers' buffers: not into those of a rank that left */
            st_status_t status;
            int         left = -1;

            if (!st_intra_zc_push_begin(intra, h->base, &left)) {
                return st_hier_peer_left(h, left);
            }
            status = st_hier_reduce_scatter(h, h->rs_k);
            st_intra_zc_push_end(intra);
            ST_CHECK(status);
        } else {
            ST_CHECK(st_hier_reduce_scatter(h, h->rs_k));
        }
        if (h->dev != NULL) {
            ST_CHECK(st_hier_dsync(h, h->phases[1]));
        }
        h->t_busy[0] += st_time_now() - t0;
        st_intra_publish(intra, ST_INTRA_RS, h->base + h->rs_k + 1);
        if (h->nnodes > 1 && h->nowned > 0) {
            ST_CHECK(st_hier_inter_start(h, h->rs_k));
        }
        h->rs_k++;
        op->progressed = 1;
    }
    /* inter-node */
    if (h->inter_active > 0) {
        ST_CHECK(st_hier_inter_progress(h));
        if (h->inter_active > 0) {
            op->phase = h->inter_phase;
        }
    }
    /* shards final, in chunk order */
    while (h->res_k < h->rs_k && !h->slots[h->res_k % (size_t)h->depth].active) {
        st_intra_publish(intra, ST_INTRA_RES, h->base + ++h->res_k);
        op->progressed = 1;
    }
    /* all-gather */
    while (h->ag_k < h->res_k) {
        if (!st_intra_all_reached(intra, ST_INTRA_RES, h->base + h->ag_k + 1, &lag)) {
            if (h->inter_active == 0) {
                st_hier_blocked(h, h->push ? 1 : 3, lag); /* push: the owner is still storing */
            }
            break;
        }
        if (h->deliver) {
            t0 = st_time_now();
            ST_CHECK(st_hier_deliver(h, h->ag_k));
            if (h->dev != NULL) {
                ST_CHECK(st_hier_dsync(h, h->phases[3]));
            }
            h->t_busy[2] += st_time_now() - t0;
        }
        st_intra_publish(intra, ST_INTRA_AG, h->base + ++h->ag_k);
        op->progressed = 1;
    }
    if (h->ag_k == h->ncols && ((h->zc.on && !h->push) || h->args.type == ST_COLL_ALLTOALL) &&
        !st_intra_all_reached(intra, ST_INTRA_AG, h->base + h->ncols, &lag)) {
        /* zero-copy pulling: the local peers still copy their results out of this rank's receive
         * buffer (its owned shards); returning would hand it back to the caller, who may
         * overwrite it at once. A peer's last all-gather also follows every owner's
         * reduce-scatter, so the send buffer is free then too. Pushing: nothing to wait for, every
         * owner's RES for the last chunk (the all-gather loop above) came after it read this
         * rank's send buffer and stored into its receive buffer for the last time. All-to-all:
         * the local peers still copy their pieces out of this rank's in slots, which the next
         * operation's copy-in would overwrite. */
        st_hier_blocked(h, 3, lag);
        op->phase = h->zc.on ? "zero-copy: waiting for the local ranks to finish reading this "
                               "rank's buffers"
                             : "all-to-all: waiting for the local ranks to finish reading this "
                               "rank's window";
        goto idle;
    }
    if (h->ag_k == h->ncols) {
        st_comm_t          *comm = h->comm;
        strataPhaseTimes_t *t = &comm->times;

        memset(t, 0, sizeof(*t));
        snprintf(t->algorithm, sizeof(t->algorithm), "hier");
        t->totalSeconds = st_time_now() - h->t_start;
        for (int i = 0; i < 3; i++) {
            t->seconds[i] = h->t_busy[i];
        }
        t->bytes[0] = t->bytes[2] = h->total * h->es;
        t->bytes[1] = h->inter_bytes;
        comm->have_times = 1;
        op->times_set    = 1;
        h->finished      = 1;
        return ST_OK;
    }
idle:
    op->win_wait = (h->m > 1); /* some cursor may wait on a local peer's counter */
    if (!op->progressed && h->inter_active == 0) {
        op->sleepable  = 1;
        op->sleep_seen = bell;
    }
    return ST_INPROGRESS;
}

static void st_hier_free(void *arg)
{
    st_hier_t *h = arg;

    if (h->cz != NULL) {
        __atomic_sub_fetch(&h->cz->refs, 1, __ATOMIC_ACQ_REL);
    }
    free(h->ring_mem);
    free(h->net_mem);
    free(h->tmp_mem);
    free(h->owned);
    free(h->srcs);
    free(h->node_pre);
    st_intra_zc_fini(&h->zc);
    free(h);
}

/* A pushing operation that failed: marks it left, then waits until no live local peer is inside a
 * chunk's stores (st_intra_zc_push_begin / _end), so that none stores into this rank's buffers
 * once the caller has them back. A chunk's stores take milliseconds: the wait yields a few times,
 * then sleeps 1 ms at a time (no core burnt), and ends at the communicator's deadline or after
 * ST_HIER_LEAVE_MAX_S, whichever comes first (a peer stopped by a debugger, or killed in another
 * pid namespace where its exit cannot be seen), said at WARN. */
#define ST_HIER_LEAVE_MAX_S 10.0
static void st_hier_zc_leave(st_hier_t *h)
{
    double deadline = st_time_now() + ST_MIN(h->comm->timeout, ST_HIER_LEAVE_MAX_S);

    st_intra_zc_leave(h->intra, h->base);
    for (int lr = 0, turns = 0; lr < h->m; lr++) {
        int r = st_topo_node_rank(h->topo, h->node, lr);

        while (lr != h->l && st_intra_zc_pushing(h->intra, lr, h->base) &&
               !st_comm_peer_exited(h->comm, r)) {
            if (st_time_now() > deadline) {
                st_warn(ST_SUB_COLL, "%s #%llu (%s) rank %d: rank %d may still store results "
                        "into this rank's buffers %.0f s after this rank left the failed call: do "
                        "not free or reuse them while that rank may still run", h->op.coll,
                        (unsigned long long)h->args.seq, h->comm->name, h->comm->rank, r,
                        ST_MIN(h->comm->timeout, ST_HIER_LEAVE_MAX_S));
                break;
            }
            if (++turns < 16) {
                sched_yield();
            } else {
                usleep(1000);
            }
        }
    }
}

static void st_hier_destroy(st_op_t *op)
{
    st_hier_t     *h = (st_hier_t *)op;
    st_request_t **reqs = NULL;
    int            n = 0;

    /* pushing and leaving before the end (failed): no owner may store into this rank's buffers
     * once the caller has them back */
    if (h->push && !h->finished) {
        st_hier_zc_leave(h);
    }
    /* the next operation on the node's windows may go (a failed one has failed the comm) */
    h->intra->turn = h->ticket + 1;
    if (h->ring_mem != NULL) {
        reqs = malloc((size_t)h->nnet * (size_t)h->depth * (size_t)h->nowned * sizeof(*reqs));
        if (reqs == NULL) {
            return; /* cannot even cancel: leak rather than free buffers in use */
        }
        for (int i = 0; i < h->depth * h->nowned; i++) {
            n += st_rail_reqs(h->ring_mem[i].net, h->nnet, reqs + n);
        }
    }
    if (!st_exec_cancel(op, reqs, n, 2.0)) {
        free(reqs);
        st_comm_defer(op->comm, st_hier_free, h); /* the transport may still write into it */
        return;
    }
    free(reqs);
    st_hier_free(h);
}

int st_hier_fits(const st_coll_args_t *args)
{
    st_comm_t *comm = args->comm;
    size_t     per_rank = args->type == ST_COLL_REDUCESCATTER ? st_dtype_size(args->dtype) : 1;

    if (comm->nranks < 2 || comm->intra == NULL) {
        return 0;
    }
    /* by node (reduce-scatter, all-gather): a chunk holds at least one element of every rank */
    if (args->type == ST_COLL_REDUCESCATTER || args->type == ST_COLL_ALLGATHER) {
        return (size_t)comm->nranks * per_rank <= comm->intra->chunk_bytes;
    }
    /* all-to-all: host buffers (device calls run on host copies), and a byte per rank pair fits
     * an owner's res slot (n x n bounds what st_hier_a2a_need asks for pieces of one byte) */
    if (args->type == ST_COLL_ALLTOALL) {
        return args->mem == ST_MEM_HOST &&
               (size_t)comm->nranks * (size_t)comm->nranks <= comm->intra->chunk_bytes;
    }
    return args->type != ST_COLL_ALLTOALLV && args->type != ST_COLL_GATHER &&
           args->type != ST_COLL_SCATTER;
}

st_status_t st_hier_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    st_intra_t *intra = comm->intra;
    st_hier_t  *h;
    size_t      es = st_dtype_size(args->dtype);
    st_status_t status;

    *op_p = NULL;
    if (args->count == 0) {
        return ST_OK;
    }
    h = calloc(1, sizeof(*h));
    if (h == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    h->args    = *args;
    h->comm    = comm;
    h->intra   = intra;
    h->topo    = comm->topo;
    h->depth   = intra->depth;
    h->m       = intra->local_size;
    h->l       = intra->local_rank;
    h->nnodes  = comm->nnodes;
    h->node    = comm->node;
    h->nshards = st_topo_nrails(comm->topo);
    h->src     = args->sendbuff;
    h->dst     = args->recvbuff;
    h->deliver = 1;
    if (args->mem == ST_MEM_CUDA) {
        /* the device queue runs hier on device buffers only with device windows (select.c) */
        h->dev = st_dev();
        if (h->dev == NULL || intra->dbase == NULL) {
            st_error(ST_SUB_COLL, "%s #%llu rank %d: device buffers without device windows",
                     st_coll_name(args->type), (unsigned long long)args->seq, comm->rank);
            free(h);
            return ST_ERR_INTERNAL;
        }
        if (intra->dstream == NULL) {
            ST_CHECK_GOTO(h->dev->set_current(intra->dev_id), status, err_dev);
            ST_CHECK_GOTO(h->dev->stream_create(&intra->dstream), status, err_dev);
        }
    }
    h->inter     = ST_HIER_RING;
    h->step_end  = 2 * (h->nnodes - 1);
    h->tag_steps = ST_MAX(2 * (h->nnodes - 1), 2);
    h->es        = es;
    h->total     = args->count;
    h->own_count = args->count;
    if (st_coll_info(args->type)->rooted) {
        h->inter     = ST_HIER_CHAIN;
        h->step_end  = 2;
        h->root_node = st_topo_node(h->topo, args->root);
    }
    switch (args->type) {
    case ST_COLL_BROADCAST:
        h->mode      = ST_HIER_COPY;
        h->es        = 1;
        h->total     = h->own_count = args->count * es;
        break;
    case ST_COLL_ALLGATHER:
        h->mode      = ST_HIER_COPY;
        h->layout    = ST_HIER_BYNODE;
        h->es        = 1;
        h->block     = args->count * es;
        h->total     = h->block * (size_t)comm->nranks;
        h->step0     = h->nnodes - 1; /* the ring's all-gather half */
        break;
    case ST_COLL_ALLTOALL: /* bytes, chunks by destination; one exchange step */
        h->mode      = ST_HIER_COPY;
        h->layout    = ST_HIER_BYNODE;
        h->es        = 1;
        h->block     = args->count * es;
        h->total     = h->block * (size_t)comm->nranks;
        h->inter     = ST_HIER_EXCHANGE;
        h->step_end  = 1;
        h->tag_steps = h->nnodes;
        break;
    case ST_COLL_REDUCESCATTER:
        h->layout    = ST_HIER_BYNODE;
        h->block     = args->count;
        h->total     = args->count * (size_t)comm->nranks;
        h->step_end  = h->nnodes - 1; /* the ring's reduce-scatter half */
        break;
    case ST_COLL_REDUCE:
        h->deliver   = comm->rank == args->root;
        break;
    default: /* all-reduce; compressed: two steps of messages to every other node */
        if (args->compress != NULL && h->nnodes > 1) {
            h->cz        = args->compress;
            __atomic_add_fetch(&h->cz->refs, 1, __ATOMIC_ACQ_REL); /* dropped by st_hier_free */
            h->inter     = ST_HIER_CODED;
            h->step_end  = 2;
            h->tag_steps = 2 * h->nnodes;
        }
        break;
    }
    h->unit  = ST_MAX(64 / h->es, 1);
    /* Chunks fill the window's slots for large buffers; a buffer of fewer than 2 x depth slots
     * gets chunks down to half a slot, so that more of it is in flight at once. A tuned chunk
     * (args->hier_chunk, from the tuning table) is taken as it is, up to a slot. */
    if (args->hier_chunk != 0) {
        h->chunk = ST_MAX(ST_MIN(args->hier_chunk, intra->chunk_bytes) / h->es, 1);
        h->chunk = ST_MAX(h->chunk / h->unit, 1) * h->unit;
    } else {
        size_t bytes = ST_MIN(intra->chunk_bytes,
                              ST_MAX(h->total * h->es / (2 * (size_t)h->depth),
                                     intra->chunk_bytes / 2));

        h->chunk = ST_MAX(bytes / h->es, 1);
        h->chunk = ST_MAX(h->chunk / h->unit, 1) * h->unit;
    }
    h->ncols = ST_DIV_ROUND_UP(h->total, h->chunk);
    if (h->layout == ST_HIER_BYNODE) {
        /* piece k of every rank's block per chunk: c = the chunk's share per rank, on multiples
         * of the unit when it holds one (st_hier_fits: at least one element per rank fits) */
        h->piece = h->chunk / (size_t)comm->nranks;
        h->piece = (h->piece >= h->unit) ? h->piece / h->unit * h->unit : ST_MAX(h->piece, 1);
        h->chunk = h->piece * (size_t)comm->nranks;
        h->ncols = ST_DIV_ROUND_UP(h->block, h->piece);
        h->node_pre = malloc(((size_t)h->nnodes + 1) * sizeof(*h->node_pre));
        if (h->node_pre == NULL) {
            free(h);
            return ST_ERR_NO_MEMORY;
        }
        h->node_pre[0] = 0;
        for (int b = 0; b < h->nnodes; b++) {
            h->node_pre[b + 1] = h->node_pre[b] + st_topo_local_size(h->topo, b);
        }
    }
    h->owned = malloc((size_t)h->nshards * sizeof(*h->owned));
    h->srcs  = malloc((size_t)h->m * sizeof(*h->srcs));
    /* zero-copy: all-reduce only (the other collectives' contributions are not the buffers) */
    if (h->owned == NULL || h->srcs == NULL ||
        st_intra_zc_init(intra, &h->zc,
                         h->mode == ST_HIER_REDUCE && args->type == ST_COLL_ALLREDUCE,
                         (st_mem_type_t)args->mem) != ST_OK) {
        st_hier_free(h);
        return ST_ERR_NO_MEMORY;
    }
    for (int j = 0; j < h->nshards; j++) {
        if (j % h->m == h->l) {
            h->owned[h->nowned++] = j;
        }
    }
    h->nnet = (h->inter == ST_HIER_EXCHANGE || h->inter == ST_HIER_CODED) ? 2 * (h->nnodes - 1)
                                                                           : 2;
    if (h->args.type == ST_COLL_ALLTOALL) {
        /* the pieces shrink until every owner's res slot holds what it receives (the same on
         * every rank: st_hier_a2a_need looks at every node) */
        size_t stage;

        while (h->piece > 1 && st_hier_a2a_need(h, h->piece, &stage) > intra->chunk_bytes) {
            h->piece = h->piece * 3 / 4;
            h->piece = (h->piece >= h->unit) ? h->piece / h->unit * h->unit : ST_MAX(h->piece, 1);
        }
        h->chunk = h->piece * (size_t)comm->nranks;
        h->ncols = ST_DIV_ROUND_UP(h->block, h->piece);
    }
    /* rings and their staging (the largest block of a shard), per owned shard and slot */
    if (h->nnodes > 1) {
        /* + 1 unit: a shorter last chunk's shard may round one unit up */
        size_t shard_max = (st_tune_policy_shard_max(comm->tune, ST_DIV_ROUND_UP(h->chunk, h->unit),
                                                     h->nshards) + 1) * h->unit;

        if (h->args.type == ST_COLL_ALLTOALL) { /* the staging of the messages it sends */
            st_hier_a2a_need(h, h->piece, &shard_max);
            shard_max += h->unit;
        } else if (h->layout == ST_HIER_BYNODE) { /* a block is a shard's part of one node's range */
            shard_max = 0;
            for (int b = 0; b < h->nnodes; b++) {
                for (int j = 0; j < h->nshards; j++) {
                    size_t off;

                    shard_max = ST_MAX(shard_max, st_hier_range(h, 0, j, b, &off));
                }
            }
            shard_max += h->unit;
        }
        size_t tmp_bytes = ST_DIV_ROUND_UP(shard_max * h->es, 64) * 64;

        if (h->inter == ST_HIER_CODED) { /* a block: a shard's N-th, + 1 unit (st_hier_split) */
            h->block_max = ST_DIV_ROUND_UP(shard_max, (size_t)h->nnodes) + 2 * h->unit;
            h->wire_max  = st_codec_wire_bytes(&h->cz->params, args->dtype, h->block_max);
            h->wire_stride = ST_DIV_ROUND_UP(h->wire_max, 64) * 64;
            h->dec_stride  = ST_DIV_ROUND_UP(h->block_max * h->es, 64) * 64;
            tmp_bytes = ST_DIV_ROUND_UP(st_hier_coded_bytes(h), 64) * 64;
        }
        size_t nrings = (size_t)h->nowned * (size_t)h->depth;

        h->ring_mem = calloc(nrings, sizeof(*h->ring_mem));
        h->net_mem  = calloc(nrings * (size_t)h->nnet, sizeof(*h->net_mem));
        h->tmp_mem  = aligned_alloc(64, tmp_bytes * nrings);
        if (h->ring_mem == NULL || h->net_mem == NULL || h->tmp_mem == NULL) {
            st_error(ST_SUB_COLL, "%s: cannot allocate %zu B of staging", st_coll_name(args->type),
                     tmp_bytes * nrings);
            st_hier_free(h);
            return ST_ERR_NO_MEMORY;
        }
        for (size_t i = 0; i < nrings; i++) {
            h->ring_mem[i].tmp = h->tmp_mem + i * tmp_bytes;
            h->ring_mem[i].net = h->net_mem + i * (size_t)h->nnet;
        }
        for (int i = 0; i < h->depth; i++) {
            h->slots[i].rings = h->ring_mem + (size_t)i * (size_t)h->nowned;
        }
    }
    h->base            = intra->chunk_seq;
    intra->chunk_seq  += h->ncols;
    h->ticket          = intra->tickets++;
    h->t_start         = st_time_now();
    h->op.comm         = comm;
    h->op.coll         = st_coll_name(args->type);
    h->op.seq          = args->seq;
    h->phases          = args->type == ST_COLL_ALLTOALL ? st_hier_a2a_phases : st_hier_phases;
    h->op.phase        = h->phases[0];
    snprintf(h->inter_phase, sizeof(h->inter_phase), "inter-node %s", st_hier_inter_name(h));
    h->op.nsteps       = 0;
    h->op.wait_peer    = -1;
    h->op.progress     = st_hier_progress;
    h->op.destroy      = st_hier_destroy;
    h->op.sleep_on     = intra;
    h->op.sleep        = st_intra_sleep_hook;
    h->op.arm          = st_intra_arm_hook;
    h->op.algo         = "hier";
    h->op.local_only   = (h->nnodes == 1);
    *op_p = &h->op;
    return ST_OK;

err_dev:
    st_error(ST_SUB_COLL, "%s #%llu rank %d: cannot make a stream on device %d",
             st_coll_name(args->type), (unsigned long long)args->seq, comm->rank, intra->dev_id);
    free(h);
    return status;
}
