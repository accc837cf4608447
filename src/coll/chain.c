/*
 * chain.c - broadcast and reduce as a pipelined chain.
 *
 * The ranks form a chain starting at the root in ring order: root, root+1, ..., root-1 (q is a
 * rank's distance from the root). Broadcast sends each chunk down the chain; reduce sends partial
 * results up it, from q = n-1 toward the root, each rank adding its contribution. With the chunks
 * pipelined, a chain moves S bytes in about (n - 1 + S/chunk) chunk times, so for large S every
 * link carries S once at full rate, the optimum for a rooted operation (nccl-tests' busbw factor
 * 1); small messages pay n-1 latencies, which the small-message algorithms will address.
 *
 * Reduce never writes the buffers of non-root ranks: partial results live in staging chunks.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "coll/coll.h"

typedef struct st_chain {
    st_pipe_t pipe;
    int       q;     /* distance from the root along the chain */
    int       prev;  /* rank at q - 1 (toward the root), -1 at the root */
    int       next;  /* rank at q + 1, -1 at the end */
} st_chain_t;

static const char *st_chain_phase(st_pipe_t *pipe, int step ST_UNUSED)
{
    return (pipe->args.type == ST_COLL_BROADCAST) ? "broadcast chain" : "reduce chain";
}

static size_t st_chain_len(st_pipe_t *pipe, size_t k, size_t *first_p)
{
    size_t start = k * pipe->chunk;

    *first_p = start;
    return ST_MIN(pipe->chunk, pipe->args.count - start);
}

/* Broadcast, step 0: receive the chunk from prev (the root sends instead); step 1: send it on. */
static st_status_t st_bcast_prepare(st_pipe_t *pipe, st_pipe_col_t *col, int step, st_xfer_t *x)
{
    st_chain_t *chain = (st_chain_t *)pipe;
    size_t      first, len = st_chain_len(pipe, col->k, &first);
    char       *buf = pipe->dst + first * pipe->esize;

    x->send_sub = x->recv_sub = (uint32_t)(col->k & ST_TAG_SUB_MASK);
    if (step == 0 && chain->prev >= 0) {
        x->recv_peer = chain->prev;
        x->recv_buf  = buf;
        x->recv_len  = len * pipe->esize;
    } else if (step == (chain->prev >= 0 ? 1 : 0) && chain->next >= 0) {
        x->send_peer = chain->next;
        x->send_buf  = (chain->prev < 0) ? pipe->src + first * pipe->esize : buf;
        x->send_len  = len * pipe->esize;
    }
    return ST_OK;
}

/* Reduce, step 0: receive the partial from next (the chain's end has none); complete: add the own
 * contribution; step 1: send it toward the root (the root instead keeps it in recvbuff). */
static st_status_t st_reduce_prepare(st_pipe_t *pipe, st_pipe_col_t *col, int step, st_xfer_t *x)
{
    st_chain_t *chain = (st_chain_t *)pipe;
    size_t      first, len = st_chain_len(pipe, col->k, &first);
    const char *local = pipe->src + first * pipe->esize;

    x->send_sub = x->recv_sub = (uint32_t)(col->k & ST_TAG_SUB_MASK);
    if (step == 0 && chain->next >= 0) {
        x->recv_peer = chain->next;
        x->recv_buf  = col->tmp[0];
        x->recv_len  = len * pipe->esize;
    } else if (step == 1 && chain->prev >= 0) {
        x->send_peer = chain->prev;
        x->send_len  = len * pipe->esize;
        if (chain->next >= 0 || pipe->args.redop.premul) {
            x->send_buf = col->tmp[0]; /* reduced (or prescaled) there at step 0 */
        } else {
            x->send_buf = local;       /* the chain's end sends its data as it is */
        }
    }
    return ST_OK;
}

static st_status_t st_reduce_complete(st_pipe_t *pipe, st_pipe_col_t *col, int step)
{
    st_chain_t       *chain = (st_chain_t *)pipe;
    const st_redop_t *redop = &pipe->args.redop;
    size_t            first, len = st_chain_len(pipe, col->k, &first);
    const char       *local = pipe->src + first * pipe->esize;
    char             *dst;

    if (step != 0) {
        return ST_OK;
    }
    dst = (chain->prev < 0) ? pipe->dst + first * pipe->esize : col->tmp[0];
    if (chain->next >= 0) {
        st_reduce_apply(redop, dst, local, col->tmp[0], len);
    } else if (redop->premul) {
        st_reduce_pre(redop, dst, local, len);
    }
    if (chain->prev < 0 && st_redop_has_post(redop)) {
        st_reduce_post(redop, dst, len);
    }
    return ST_OK;
}

static const st_pipe_ops_t st_bcast_ops = {
    .phase    = st_chain_phase,
    .prepare  = st_bcast_prepare,
    .complete = NULL,
};

static const st_pipe_ops_t st_reduce_ops = {
    .phase    = st_chain_phase,
    .prepare  = st_reduce_prepare,
    .complete = st_reduce_complete,
};

st_status_t st_chain_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    int         n = comm->nranks;
    int         is_root = (comm->rank == args->root);
    size_t      es = st_dtype_size(args->dtype);
    size_t      chunk = st_coll_chunk_elems(args->dtype);
    st_chain_t *chain;
    st_status_t status;

    *op_p = NULL;
    if (args->count == 0) {
        return ST_OK;
    }
    if (n == 1) {
        if (args->type == ST_COLL_BROADCAST) {
            if (args->sendbuff != args->recvbuff) {
                memmove(args->recvbuff, args->sendbuff, args->count * es);
            }
        } else {
            st_reduce_pre(&args->redop, args->recvbuff, args->sendbuff, args->count);
            if (st_redop_has_post(&args->redop)) {
                st_reduce_post(&args->redop, args->recvbuff, args->count);
            }
        }
        return ST_OK;
    }
    chain = calloc(1, sizeof(*chain));
    if (chain == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    chain->q    = ((comm->rank - args->root) % n + n) % n;
    chain->prev = (chain->q == 0) ? -1 : (comm->rank - 1 + n) % n;
    chain->next = (chain->q == n - 1) ? -1 : (comm->rank + 1) % n;
    chain->pipe.n   = n;
    chain->pipe.pos = chain->q;
    chain->pipe.src = args->sendbuff;
    chain->pipe.dst = args->recvbuff;
    if (args->type == ST_COLL_BROADCAST && is_root && args->sendbuff != args->recvbuff) {
        memmove(args->recvbuff, args->sendbuff, args->count * es);
    }
    if (args->type == ST_COLL_BROADCAST) {
        status = st_pipe_init(&chain->pipe, args, &st_bcast_ops, chunk,
                              ST_DIV_ROUND_UP(args->count, chunk), 2, 0, 1);
    } else {
        status = st_pipe_init(&chain->pipe, args, &st_reduce_ops, chunk,
                              ST_DIV_ROUND_UP(args->count, chunk), 2, 1, 1);
    }
    if (status != ST_OK) {
        free(chain);
        return status;
    }
    *op_p = &chain->pipe.op;
    return ST_OK;
}
