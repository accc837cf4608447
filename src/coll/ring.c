/*
 * ring.c - the flat ring: reduce-scatter, all-gather, and all-reduce as the two in sequence.
 *
 * The ring is the ranks in the hierarchy's ring order (topo/topo.h: node-contiguous, and inside a
 * node by NUMA domain and PCI position), so that only one edge per node crosses the network in
 * each direction whatever the rank numbering; pos is this rank's place in it, left and right its
 * neighbours. The data is cut into nranks blocks, block b belonging to rank b. With blk(x) = the
 * block of the rank at ring position x mod n:
 *   reduce-scatter step s = 0..n-2: send blk(pos-s-1), receive blk(pos-s-2) and reduce it with the
 *     local contribution; after the last step this rank holds blk(pos), its own block, reduced.
 *   all-gather step t = 0..n-2: send blk(pos-t), receive blk(pos-t-1) in place.
 * Every block is cut into chunks (columns) that travel the ring independently, pipelined by the
 * column engine of coll.c. Each element is reduced in one fixed order (around the ring from the
 * block's first sender) and then copied, so all ranks hold bitwise the same result, and the
 * same from run to run.
 *
 * Per rank and all-reduce of S bytes the ring sends 2(n-1)/n * S bytes: the bandwidth-optimal
 * amount, hence nccl-tests' busbw factor 2(n-1)/n (Patarasuk and Yuan, "Bandwidth optimal
 * all-reduce algorithms for clusters of workstations", JPDC 2009).
 *
 * Channels (args->channels = C > 1, NCCL's term): C rings at once, column k on ring k mod C.
 * Ring c visits the nodes in the same order, and inside node k the local ranks c, c+1, ..,
 * c+g-1 (mod g), reversed on odd nodes (a snake): the hop out of a node then goes between two
 * ranks of the same local rank, so over one rail (STRATA_RAIL_IFNAMES: local rank l sends and
 * receives on rail l; a hop between two rails would go where the routes send it), and ring c
 * leaves even nodes on rail (c-1) mod g and odd ones on rail c. With several NICs per node the
 * channels so spread over them all, where one ring crosses on one (with an odd number of nodes
 * the hop from the last node back to node 0 joins two rails). Every column is still reduced in
 * one fixed order (its channel's), so results stay bitwise the same on every rank and from run
 * to run for a given C. One channel keeps the hierarchy's ring order (NUMA and PCI inside a
 * node). select.c gives channels to all-reduce only.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "coll/coll.h"
#include "topo/topo.h"

typedef struct st_ring {
    st_pipe_t        pipe;     /* first: the op is the pipe is the ring */
    int              rs_steps; /* reduce-scatter steps (n-1 or 0) */
    int              ag_steps; /* all-gather steps (n-1 or 0) */
    size_t           base;     /* all-reduce blocks: base elements, the first rem get one more */
    size_t           rem;
    int              nch;      /* channels, >= 1 */
    int             *order;    /* order[c n + x]: the rank at position x of channel c's ring */
    int              pos[ST_RING_MAX_CHANNELS];   /* this rank's position in each channel */
    int              left[ST_RING_MAX_CHANNELS];
    int              right[ST_RING_MAX_CHANNELS];
} st_ring_t;

static inline int st_ring_mod(int x, int n)
{
    return ((x % n) + n) % n;
}

/* Channel of column k. */
static inline int st_ring_ch(const st_ring_t *ring, size_t k)
{
    return (int)(k % (size_t)ring->nch);
}

/* Block of the rank at position x of channel c's ring: that rank's number. */
static inline int st_ring_blk(const st_ring_t *ring, int c, int x)
{
    return ring->order[c * ring->pipe.n + st_ring_mod(x, ring->pipe.n)];
}

static size_t st_ring_block_count(const st_ring_t *ring, int b)
{
    if (ring->pipe.args.type == ST_COLL_ALLREDUCE) {
        return ring->base + ((size_t)b < ring->rem);
    }
    return ring->pipe.args.count;
}

static size_t st_ring_block_off(const st_ring_t *ring, int b)
{
    if (ring->pipe.args.type == ST_COLL_ALLREDUCE) {
        return (size_t)b * ring->base + ST_MIN((size_t)b, ring->rem);
    }
    return (size_t)b * ring->pipe.args.count;
}

/* Column k of block b: first element (absolute in the block layout) and length in elements. */
static size_t st_ring_chunk(const st_ring_t *ring, int b, size_t k, size_t *first_p)
{
    size_t cnt   = st_ring_block_count(ring, b);
    size_t start = k * ring->pipe.chunk;

    *first_p = st_ring_block_off(ring, b) + start;
    return (start < cnt) ? ST_MIN(ring->pipe.chunk, cnt - start) : 0;
}

static const char *st_ring_phase(st_pipe_t *pipe, int step)
{
    return (step < ((st_ring_t *)pipe)->rs_steps) ? "reduce-scatter" : "all-gather";
}

static st_status_t st_ring_prepare(st_pipe_t *pipe, st_pipe_col_t *col, int step, st_xfer_t *x)
{
    st_ring_t  *ring = (st_ring_t *)pipe;
    size_t      es = pipe->esize;
    size_t      first, len;
    int         sb, rb;
    uint32_t    sub = (uint32_t)((col->k * (size_t)pipe->nsteps + (size_t)step) & ST_TAG_SUB_MASK);

    int         c = st_ring_ch(ring, col->k), pos = ring->pos[c];

    x->send_peer = ring->right[c];
    x->recv_peer = ring->left[c];
    x->send_sub  = x->recv_sub = sub;
    if (step < ring->rs_steps) {
        sb = st_ring_blk(ring, c, pos - step - 1);
        rb = st_ring_blk(ring, c, pos - step - 2);
        len = st_ring_chunk(ring, sb, col->k, &first);
        if (step == 0) {
            if (pipe->args.redop.premul && len > 0) {
                st_reduce_pre(&pipe->args.redop, col->tmp[1], pipe->src + first * es, len);
                x->send_buf = col->tmp[1];
            } else {
                x->send_buf = pipe->src + first * es;
            }
        } else if (pipe->args.type == ST_COLL_ALLREDUCE) {
            x->send_buf = pipe->dst + first * es; /* reduced there at the previous step */
        } else {
            x->send_buf = col->tmp[(step - 1) & 1];
        }
        x->send_len = len * es;
        len = st_ring_chunk(ring, rb, col->k, &first);
        x->recv_buf = col->tmp[step & 1];
        x->recv_len = len * es;
    } else {
        int t = step - ring->rs_steps;
        sb = st_ring_blk(ring, c, pos - t);
        rb = st_ring_blk(ring, c, pos - t - 1);
        len = st_ring_chunk(ring, sb, col->k, &first);
        x->send_buf = pipe->dst + first * es;
        x->send_len = len * es;
        len = st_ring_chunk(ring, rb, col->k, &first);
        x->recv_buf = pipe->dst + first * es;
        x->recv_len = len * es;
    }
    return ST_OK;
}

static st_status_t st_ring_complete(st_pipe_t *pipe, st_pipe_col_t *col, int step)
{
    st_ring_t *ring = (st_ring_t *)pipe;
    size_t     es = pipe->esize;
    size_t     first, len;
    char      *target;
    int        rb, c;

    if (step >= ring->rs_steps) {
        return ST_OK; /* all-gather: received in place */
    }
    c   = st_ring_ch(ring, col->k);
    rb  = st_ring_blk(ring, c, ring->pos[c] - step - 2);
    len = st_ring_chunk(ring, rb, col->k, &first);
    if (len == 0) {
        return ST_OK;
    }
    if (pipe->args.type == ST_COLL_ALLREDUCE) {
        target = pipe->dst + first * es;
    } else if (step == ring->rs_steps - 1) {
        /* reduce-scatter's own block lands in recvbuff */
        target = (char *)pipe->args.recvbuff + col->k * pipe->chunk * es;
    } else {
        target = col->tmp[step & 1];
    }
    st_reduce_apply(&pipe->args.redop, target, pipe->src + first * es, col->tmp[step & 1], len);
    if (step == ring->rs_steps - 1 && st_redop_has_post(&pipe->args.redop)) {
        st_reduce_post(&pipe->args.redop, target, len);
    }
    return ST_OK;
}

/* The channels' ring orders: the hierarchy's ring (node-contiguous) with the ranks of each node
 * rotated by c in channel c; this rank's position and neighbours in each. */
static void st_ring_orders(st_ring_t *ring, const st_topo_t *topo, int rank, int n)
{
    for (int s = 0, e, k = 0; s < n; s = e, k++) {
        int node = st_topo_node(topo, st_topo_ring_rank(topo, s));

        for (e = s + 1; e < n && st_topo_node(topo, st_topo_ring_rank(topo, e)) == node; e++) {
        }
        if (ring->nch == 1) { /* the hierarchy's ring as it is */
            for (int j = 0; j < e - s; j++) {
                ring->order[s + j] = st_topo_ring_rank(topo, s + j);
            }
            continue;
        }
        for (int c = 0; c < ring->nch; c++) {
            for (int j = 0; j < e - s; j++) {
                int l = (c + (k % 2 ? e - s - 1 - j : j)) % (e - s); /* local rank */

                ring->order[c * n + s + j] = st_topo_node_rank(topo, node, l);
            }
        }
    }
    for (int c = 0; c < ring->nch; c++) {
        for (int x = 0; x < n; x++) {
            if (ring->order[c * n + x] == rank) {
                ring->pos[c] = x;
            }
        }
        ring->left[c]  = st_ring_blk(ring, c, ring->pos[c] - 1);
        ring->right[c] = st_ring_blk(ring, c, ring->pos[c] + 1);
    }
}

static const st_pipe_ops_t st_ring_ops = {
    .phase    = st_ring_phase,
    .prepare  = st_ring_prepare,
    .complete = st_ring_complete,
};

/* One rank: the result is the local data, prescaled and post-processed. */
static void st_ring_local(const st_coll_args_t *args)
{
    const st_redop_t *redop = &args->redop;
    size_t            es = st_dtype_size(args->dtype);

    if (!st_coll_info(args->type)->reduces) {
        if (args->sendbuff != args->recvbuff) {
            memmove(args->recvbuff, args->sendbuff, args->count * es);
        }
        return;
    }
    st_reduce_pre(redop, args->recvbuff, args->sendbuff, args->count);
    if (st_redop_has_post(redop)) {
        st_reduce_post(redop, args->recvbuff, args->count);
    }
}

st_status_t st_ring_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t *comm = args->comm;
    int        n = comm->nranks;
    size_t     es = st_dtype_size(args->dtype);
    size_t     chunk = st_coll_chunk_elems(args->dtype);
    size_t     maxblock;
    st_ring_t *ring;
    st_status_t status;
    int        nsteps, nch;

    *op_p = NULL;
    if (args->count == 0) {
        return ST_OK;
    }
    if (n == 1) {
        st_ring_local(args);
        return ST_OK;
    }
    nch  = ST_MIN(ST_MAX(args->channels, 1), ST_RING_MAX_CHANNELS);
    ring = calloc(1, sizeof(*ring) + sizeof(int) * (size_t)nch * (size_t)n);
    if (ring == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    ring->nch        = nch;
    ring->order      = (int *)(ring + 1);
    ring->pipe.n     = n;
    st_ring_orders(ring, comm->topo, comm->rank, n);
    ring->pipe.pos   = ring->pos[0];
    ring->pipe.left  = ring->left[0];
    ring->pipe.right = ring->right[0];
    ring->pipe.src   = args->sendbuff;
    ring->pipe.dst   = args->recvbuff;
    switch (args->type) {
    case ST_COLL_ALLREDUCE:
        ring->rs_steps = ring->ag_steps = n - 1;
        ring->base     = args->count / (size_t)n;
        ring->rem      = args->count % (size_t)n;
        maxblock       = ring->base + (ring->rem > 0);
        break;
    case ST_COLL_REDUCESCATTER:
        ring->rs_steps = n - 1;
        maxblock       = args->count;
        break;
    default: /* ST_COLL_ALLGATHER */
        ring->ag_steps = n - 1;
        maxblock       = args->count;
        /* out of place: place the own block first; it travels from recvbuff */
        if (!st_coll_in_place(args->type, args->sendbuff, args->recvbuff, args->count * es,
                              comm->rank)) {
            memmove((char *)args->recvbuff + (size_t)comm->rank * args->count * es,
                    args->sendbuff, args->count * es);
        }
        break;
    }
    nsteps = ring->rs_steps + ring->ag_steps;
    if (nch > 1 && ST_DIV_ROUND_UP(maxblock, chunk) < (size_t)nch) {
        chunk = ST_MAX(ST_DIV_ROUND_UP(maxblock, (size_t)nch), 1); /* a column per channel */
    }
    status = st_pipe_init(&ring->pipe, args, &st_ring_ops, chunk,
                          ST_DIV_ROUND_UP(maxblock, chunk), nsteps, ring->rs_steps > 0, nch);
    if (status != ST_OK) {
        free(ring);
        return status;
    }
    *op_p = &ring->pipe.op;
    return ST_OK;
}
