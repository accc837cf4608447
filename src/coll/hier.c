/*
 * hier.c - the hierarchical algorithms: intra-node reduce-scatter through the node's windows,
 * inter-node all-reduce of each shard on its rail, intra-node all-gather, pipelined over chunks.
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
 * The five collectives are this one pipeline with different contributions and deliveries:
 *   all-reduce       V = the buffer; contribution: all of it; delivery: all of it.
 *   reduce-scatter   V = the send buffer (nranks blocks); delivery: the rank's own block only.
 *   reduce           delivery on the root only; other ranks' receive buffers are never written.
 *   broadcast        bytes; the root contributes, the shards of other nodes start as zeros, and
 *                    the inter-node all-reduce ORs them: exactly the root's bytes arrive.
 *   all-gather       bytes; rank r contributes its block at its place in V, zeros elsewhere, ORed.
 * Reduce-scatter, broadcast and all-gather thereby move up to twice the bytes an algorithm
 * specialised for them would over the network: a known cost of this composition, traded for one
 * pipeline that handles uneven nodes and any rank numbering.
 *
 * Results are bitwise identical on all ranks: every element is reduced at one place in one fixed
 * order (local ranks in order, then around the rail's ring from the block's first sender) and
 * copied from there.
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
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "coll/rail.h"
#include "device/dev.h"
#include "topo/topo.h"
#include "tune/policy.h"

typedef enum { ST_HIER_REDUCE = 0, ST_HIER_COPY } st_hier_mode_t;

/* One owned shard's inter-node ring for one chunk. */
typedef struct st_hier_ring {
    int          j;          /* shard index */
    size_t       off, cnt;   /* the shard in the chunk, elements */
    int          step;       /* 0 .. 2(N-1) (done) */
    int          left, right;
    st_rail_xfer_t net[2];   /* the step's transfers: [ST_RAIL_RECV], [ST_RAIL_SEND] */
    char        *tmp;        /* staging for a received block before it is reduced */
} st_hier_ring_t;

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
    char            *tmp_mem;
    const char      *src;
    char            *dst;
    size_t           own_first, own_count; /* V range delivered (elements) */
    int              deliver;              /* this rank writes its receive buffer */
    int              inter_active;
    size_t           inter_bytes; /* of the shards all-reduced over the network so far */
    /* zero-copy (every local rank's buffers from strataMemAlloc, all-reduce out of place): peers
     * read each other's send buffers and receive buffers directly; no in or res slots */
    st_intra_zc_t    zc;
    double           t_start, t_inter_since, t_busy[3];
    const st_dev_ops_t *dev; /* device buffers: the device layer; NULL for host buffers */
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

static size_t st_hier_chunk_len(const st_hier_t *h, size_t k)
{
    return ST_MIN(h->chunk, h->total - k * h->chunk);
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

static void st_hier_or(void *dst, const void *a, const void *b, size_t n)
{
    uint8_t       *d = dst;
    const uint8_t *x = a, *y = b;

    for (size_t i = 0; i < n; i++) {
        d[i] = x[i] | y[i];
    }
}

static void st_hier_combine(const st_hier_t *h, void *dst, const void *in, size_t count)
{
    if (h->mode == ST_HIER_REDUCE) {
        st_reduce_combine(&h->args.redop, dst, dst, in, count);
    } else {
        st_hier_or(dst, dst, in, count);
    }
}

/* Where chunk k's reduced shards of local rank lr live (offsets relative to the chunk): its res
 * slot (in the device windows for device buffers), or with zero-copy its receive buffer. */
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

static st_status_t st_hier_copy_in(st_hier_t *h, size_t k)
{
    char  *slot = st_hier_in(h, h->l, (int)(k % (size_t)h->depth));
    size_t first = k * h->chunk, len = st_hier_chunk_len(h, k);

    if (h->mode == ST_HIER_REDUCE) {
        const void *src = h->src + first * h->es;

        if (h->dev != NULL) {
            return st_hier_djob(h, slot, &src, 1, 1, 0, len);
        }
        st_reduce_pre(&h->args.redop, slot, src, len);
    } else if (h->args.type == ST_COLL_BROADCAST) {
        if (h->comm->rank == h->args.root) {
            if (h->dev != NULL) {
                return st_hier_dcopy(h, slot, h->src + first, len);
            }
            memcpy(slot, h->src + first, len);
        }
    } else { /* all-gather: the own block's part of the chunk */
        size_t blk = h->args.count * st_dtype_size(h->args.dtype);
        size_t lo = (size_t)h->comm->rank * blk;
        size_t a = ST_MAX(lo, first), b = ST_MIN(lo + blk, first + len);

        if (a < b) {
            if (h->dev != NULL) {
                return st_hier_dcopy(h, slot + (a - first), h->src + (a - lo), b - a);
            }
            memcpy(slot + (a - first), h->src + (a - lo), b - a);
        }
    }
    return ST_OK;
}

/* ---- reduce-scatter (intra) ----------------------------------------------------------------- */

/* Copy mode: fills [first, first+cnt) of V (bytes) in dst from the local contributors' in slots,
 * zeros where the contributor lives on another node. */
static st_status_t st_hier_gather_local(st_hier_t *h, char *dst, size_t first, size_t cnt,
                                        int slot, size_t chunk_first)
{
    size_t pos = first, end = first + cnt;

    while (pos < end) {
        size_t seg_end;
        int    r;

        if (h->args.type == ST_COLL_BROADCAST) {
            r       = h->args.root;
            seg_end = end;
        } else {
            size_t blk = h->args.count * st_dtype_size(h->args.dtype);
            r       = (int)(pos / blk);
            seg_end = ST_MIN(end, (size_t)(r + 1) * blk);
        }
        if (st_topo_node(h->topo, r) == h->node) {
            int         lr  = st_topo_local_rank(h->topo, r);
            const char *src = st_hier_in(h, lr, slot) + (pos - chunk_first);

            if (h->dev != NULL) {
                ST_CHECK(st_hier_dcopy(h, dst + (pos - first), src, seg_end - pos));
            } else {
                memcpy(dst + (pos - first), src, seg_end - pos);
            }
        } else if (h->dev != NULL) {
            ST_CHECK(h->dev->zero(dst + (pos - first), seg_end - pos, h->intra->dstream));
        } else {
            memset(dst + (pos - first), 0, seg_end - pos);
        }
        pos = seg_end;
    }
    return ST_OK;
}

static st_status_t st_hier_reduce_scatter(st_hier_t *h, size_t k)
{
    int          slot = (int)(k % (size_t)h->depth);
    size_t       len = st_hier_chunk_len(h, k);
    const void **srcs = h->srcs;

    for (int o = 0; o < h->nowned; o++) {
        size_t off, cnt;
        char  *res;

        st_hier_shard(h, len, h->owned[o], &off, &cnt);
        if (cnt == 0) {
            continue;
        }
        res = st_hier_res(h, h->l, k) + off * h->es;
        if (h->mode == ST_HIER_REDUCE) {
            int post = (h->nnodes == 1 && st_redop_has_post(&h->args.redop));

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
        } else {
            ST_CHECK(st_hier_gather_local(h, res, k * h->chunk + off, cnt, slot, k * h->chunk));
        }
    }
    return ST_OK;
}

/* ---- inter-node ring per shard -------------------------------------------------------------- */

/* Block b of ring r's shard: offset (elements, in the chunk) and count. */
static size_t st_hier_block(const st_hier_t *h, const st_hier_ring_t *r, int b, size_t *off_p)
{
    size_t off, cnt;

    st_hier_split(r->cnt, h->nnodes, b, h->unit, &off, &cnt);
    *off_p = r->off + off;
    return cnt;
}

static st_status_t st_hier_ring_post(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    int                 n = h->nnodes, pos = h->node, steps = 2 * (n - 1);
    char               *res = st_hier_ring_res(h, s->k);
    size_t              soff, roff, scnt, rcnt;
    void               *rbuf;
    uint64_t            tag;

    for (;;) {
        if (r->step == steps) {
            s->left--;
            return ST_OK;
        }
        if (r->step < n - 1) {
            scnt = st_hier_block(h, r, st_hier_mod(pos - r->step - 1, n), &soff);
            rcnt = st_hier_block(h, r, st_hier_mod(pos - r->step - 2, n), &roff);
            rbuf = r->tmp;
        } else {
            int t = r->step - (n - 1);
            scnt = st_hier_block(h, r, st_hier_mod(pos - t, n), &soff);
            rcnt = st_hier_block(h, r, st_hier_mod(pos - t - 1, n), &roff);
            rbuf = res + roff * h->es;
        }
        /* one tag per (chunk, shard, step): both ends compute the same */
        tag = st_tag_coll(h->args.seq, ((uint64_t)(s->k * (size_t)h->nshards + (size_t)r->j) *
                                        (uint64_t)steps + (uint64_t)r->step) & ST_TAG_SUB_MASK);
        if (rcnt > 0) {
            ST_CHECK(st_rail_recv(h->comm, &r->net[ST_RAIL_RECV], r->left, rbuf, rcnt * h->es,
                                  tag));
        }
        if (scnt > 0) {
            ST_CHECK(st_rail_send(h->comm, &r->net[ST_RAIL_SEND], r->right, res + soff * h->es,
                                  scnt * h->es, tag));
        }
        if (r->net[ST_RAIL_RECV].posted || r->net[ST_RAIL_SEND].posted) {
            return ST_OK;
        }
        r->step++; /* both blocks empty: nothing to wait for */
    }
}

/* Advances one ring as far as it goes without waiting. */
static st_status_t st_hier_ring_progress(st_hier_t *h, st_hier_slot_t *s, st_hier_ring_t *r)
{
    int n = h->nnodes;

    while (r->step < 2 * (n - 1)) {
        int         received = r->net[ST_RAIL_RECV].posted, at;
        st_status_t status = st_rail_test_all(r->net, 2, &at);

        if (status == ST_INPROGRESS) {
            h->op.wait_peer = r->net[at].peer;
            return ST_INPROGRESS;
        }
        if (status != ST_OK) {
            return st_rail_fail(&h->op, &r->net[at], status,
                                "inter-node all-reduce of shard %d, step %d/%d", r->j,
                                r->step + 1, 2 * (n - 1));
        }
        if (r->step < n - 1 && received) {
            size_t roff, rcnt;
            char  *res = st_hier_ring_res(h, s->k);

            rcnt = st_hier_block(h, r, st_hier_mod(h->node - r->step - 2, n), &roff);
            st_hier_combine(h, res + roff * h->es, r->tmp, rcnt);
        }
        if (r->step == n - 2 && h->mode == ST_HIER_REDUCE &&
            st_redop_has_post(&h->args.redop)) {
            size_t off, cnt;
            char  *res = st_hier_ring_res(h, s->k);

            cnt = st_hier_block(h, r, h->node, &off); /* final after the last reduce step */
            st_reduce_post(&h->args.redop, res + off * h->es, cnt);
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
    size_t len = st_hier_chunk_len(h, k);

    for (int o = 0; o < h->nowned; o++) {
        size_t off, cnt;
        char  *dev, *host;

        st_hier_shard(h, len, h->owned[o], &off, &cnt);
        dev  = st_hier_res(h, h->l, k) + off * h->es;
        host = st_hier_ring_res(h, k) + off * h->es;
        ST_CHECK(st_hier_dcopy(h, to_host ? host : dev, to_host ? dev : host, cnt * h->es));
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
        st_hier_shard(h, len, r->j, &r->off, &r->cnt);
        r->step = 0;
        r->net[ST_RAIL_RECV].posted = r->net[ST_RAIL_SEND].posted = 0;
        h->inter_bytes += r->cnt * h->es;
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

            if (r->step == 2 * (h->nnodes - 1)) {
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

static st_status_t st_hier_deliver(st_hier_t *h, size_t k)
{
    size_t len = st_hier_chunk_len(h, k), first = k * h->chunk;

    for (int j = 0; j < h->nshards; j++) {
        size_t off, cnt, a, b;
        int    lr = j % h->m;

        st_hier_shard(h, len, j, &off, &cnt);
        a = ST_MAX(first + off, h->own_first);
        b = ST_MIN(first + off + cnt, h->own_first + h->own_count);
        if (a >= b || (h->zc.on && lr == h->l)) {
            continue; /* zero-copy: the own shards were reduced in place */
        }
        if (h->dev != NULL) {
            ST_CHECK(st_hier_dcopy(h, h->dst + (a - h->own_first) * h->es,
                                   st_hier_res(h, lr, k) + (a - first) * h->es, (b - a) * h->es));
        } else {
            memcpy(h->dst + (a - h->own_first) * h->es,
                   st_hier_res(h, lr, k) + (a - first) * h->es, (b - a) * h->es);
        }
    }
    return ST_OK;
}

/* ---- the op --------------------------------------------------------------------------------- */

/* Zero-copy (coll/intra.h): out of place only: in place, an owner's reduction would overwrite
 * inputs it still reads; premul needs the scaled copy that copy-in makes. */
static st_status_t st_hier_zc_negotiate(st_hier_t *h, int *lag_p)
{
    int         want = h->args.sendbuff != h->args.recvbuff && !h->args.redop.premul;
    int         was = h->zc.state;
    st_status_t status;

    status = st_intra_zc_negotiate(h->intra, &h->zc, h->base, want, h->args.sendbuff,
                                   h->args.recvbuff, h->total * h->es, lag_p);
    if (h->zc.state != was) {
        h->op.progressed = 1;
    }
    if (status == ST_ERR_IO) {
        st_error(ST_SUB_COLL, "%s #%llu rank %d: cannot map local rank %d's strataMemAlloc "
                 "buffers", h->op.coll, (unsigned long long)h->args.seq, h->comm->rank, *lag_p);
    } else if (status == ST_OK && h->zc.on) {
        st_debug(ST_SUB_COLL, "%s #%llu rank %d: zero-copy (every local rank's buffers are "
                 "shareable)", h->op.coll, (unsigned long long)h->args.seq, h->comm->rank);
    }
    return status;
}

static const char *const st_hier_phases[] = {"copy-in", "intra reduce-scatter",
                                             "inter-node all-reduce", "intra all-gather"};

static void st_hier_blocked(st_hier_t *h, int phase, int laggard_lr)
{
    h->op.win_wait  = 1;
    h->op.phase     = st_hier_phases[phase];
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
    while (h->copy_k < h->ncols && h->copy_k < h->ag_k + (size_t)h->depth) {
        if (h->copy_k >= (size_t)h->depth &&
            !st_intra_all_reached(intra, ST_INTRA_RS, h->base + h->copy_k - h->depth + 1, &lag)) {
            st_hier_blocked(h, 0, lag);
            break;
        }
        t0 = st_time_now();
        if (!h->zc.on) {
            ST_CHECK(st_hier_copy_in(h, h->copy_k));
            if (h->dev != NULL) {
                ST_CHECK(st_hier_dsync(h, st_hier_phases[0]));
            }
        }
        h->t_busy[0] += st_time_now() - t0;
        st_intra_publish(intra, ST_INTRA_IN, h->base + ++h->copy_k);
        op->progressed = 1;
    }
    /* reduce-scatter of chunks every local rank copied in */
    while (h->rs_k < h->copy_k) {
        if (!st_intra_all_reached(intra, ST_INTRA_IN, h->base + h->rs_k + 1, &lag) ||
            (h->rs_k >= (size_t)h->depth &&
             !st_intra_all_reached(intra, ST_INTRA_AG, h->base + h->rs_k - h->depth + 1, &lag))) {
            st_hier_blocked(h, 1, lag);
            break;
        }
        if (h->slots[h->rs_k % (size_t)h->depth].active) {
            break;
        }
        t0 = st_time_now();
        ST_CHECK(st_hier_reduce_scatter(h, h->rs_k));
        if (h->dev != NULL) {
            ST_CHECK(st_hier_dsync(h, st_hier_phases[1]));
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
            op->phase = st_hier_phases[2];
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
                st_hier_blocked(h, 3, lag);
            }
            break;
        }
        if (h->deliver) {
            t0 = st_time_now();
            ST_CHECK(st_hier_deliver(h, h->ag_k));
            if (h->dev != NULL) {
                ST_CHECK(st_hier_dsync(h, st_hier_phases[3]));
            }
            h->t_busy[2] += st_time_now() - t0;
        }
        st_intra_publish(intra, ST_INTRA_AG, h->base + ++h->ag_k);
        op->progressed = 1;
    }
    if (h->ag_k == h->ncols && h->zc.on &&
        !st_intra_all_reached(intra, ST_INTRA_AG, h->base + h->ncols, &lag)) {
        /* zero-copy: the local peers still copy their results out of this rank's receive buffer
         * (its owned shards); returning would hand it back to the caller, who may overwrite it at
         * once. A peer's last all-gather also follows every owner's reduce-scatter, so the send
         * buffer is free then too. */
        st_hier_blocked(h, 3, lag);
        op->phase = "zero-copy: waiting for the local ranks to finish reading this rank's buffers";
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

    free(h->ring_mem);
    free(h->tmp_mem);
    free(h->owned);
    free(h->srcs);
    st_intra_zc_fini(&h->zc);
    free(h);
}

static void st_hier_destroy(st_op_t *op)
{
    st_hier_t     *h = (st_hier_t *)op;
    st_request_t **reqs = NULL;
    int            n = 0;

    /* the next operation on the node's windows may go (a failed one has failed the comm) */
    h->intra->turn = h->ticket + 1;
    if (h->ring_mem != NULL) {
        reqs = malloc(2 * (size_t)h->depth * (size_t)h->nowned * sizeof(*reqs));
        if (reqs == NULL) {
            return; /* cannot even cancel: leak rather than free buffers in use */
        }
        for (int i = 0; i < h->depth * h->nowned; i++) {
            n += st_rail_reqs(h->ring_mem[i].net, 2, reqs + n);
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
    switch (args->type) {
    case ST_COLL_BROADCAST:
    case ST_COLL_ALLGATHER:
        h->mode  = ST_HIER_COPY;
        h->es    = 1;
        h->total = args->count * es * (args->type == ST_COLL_ALLGATHER ? (size_t)comm->nranks : 1);
        h->own_first = 0;
        h->own_count = h->total;
        break;
    case ST_COLL_REDUCESCATTER:
        h->es        = es;
        h->total     = args->count * (size_t)comm->nranks;
        h->own_first = args->count * (size_t)comm->rank;
        h->own_count = args->count;
        break;
    default: /* all-reduce, reduce */
        h->es        = es;
        h->total     = args->count;
        h->own_first = 0;
        h->own_count = args->count;
        h->deliver   = !st_coll_info(args->type)->rooted || comm->rank == args->root;
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
    /* rings and their staging (the largest block of a shard), per owned shard and slot */
    if (h->nnodes > 1) {
        /* + 1 unit: a shorter last chunk's shard may round one unit up */
        size_t shard_max = (st_tune_policy_shard_max(comm->tune, ST_DIV_ROUND_UP(h->chunk, h->unit),
                                                     h->nshards) + 1) * h->unit;
        size_t tmp_bytes = ST_DIV_ROUND_UP(shard_max * h->es, 64) * 64;
        size_t nrings = (size_t)h->nowned * (size_t)h->depth;

        h->ring_mem = calloc(nrings, sizeof(*h->ring_mem));
        h->tmp_mem  = aligned_alloc(64, tmp_bytes * nrings);
        if (h->ring_mem == NULL || h->tmp_mem == NULL) {
            st_error(ST_SUB_COLL, "%s: cannot allocate %zu B of staging", st_coll_name(args->type),
                     tmp_bytes * nrings);
            st_hier_free(h);
            return ST_ERR_NO_MEMORY;
        }
        for (size_t i = 0; i < nrings; i++) {
            h->ring_mem[i].tmp = h->tmp_mem + i * tmp_bytes;
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
    h->op.phase        = st_hier_phases[0];
    h->op.nsteps       = 0;
    h->op.wait_peer    = -1;
    h->op.progress     = st_hier_progress;
    h->op.destroy      = st_hier_destroy;
    h->op.sleep_on     = intra;
    h->op.sleep        = st_intra_sleep_hook;
    h->op.algo         = "hier";
    *op_p = &h->op;
    return ST_OK;

err_dev:
    st_error(ST_SUB_COLL, "%s #%llu rank %d: cannot make a stream on device %d",
             st_coll_name(args->type), (unsigned long long)args->seq, comm->rank, intra->dev_id);
    free(h);
    return status;
}
