/*
 * coll.c - the column pipeline shared by the chunked algorithms (see coll.h), and the choice of
 * algorithm for a call.
 */
#include "config.h"
#include "coll/coll.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "engine/comm.h"
#include "engine/exec.h"

size_t st_coll_chunk_elems(strataDataType_t dtype)
{
    size_t esize = st_dtype_size(dtype);
    size_t chunk = st_core_config.chunk_size / (esize ? esize : 1);

    chunk = chunk ? chunk : 1;
    if (chunk * esize != st_core_config.chunk_size) {
        size_t used = chunk * esize;
        char   why[96];

        snprintf(why, sizeof(why), "a ring chunk is a whole number of elements (%zu B each), at "
                 "least one", esize);
        st_param_adjusted("STRATA_CHUNK_SIZE", ST_CFG_SIZE, &st_core_config.chunk_size, &used,
                          why);
    }
    return chunk;
}

static st_status_t st_pipe_post(st_pipe_t *pipe, st_pipe_col_t *col)
{
    st_comm_t   *comm = pipe->op.comm;
    st_xfer_t   *x = &col->xfer;

    memset(x, 0, sizeof(*x));
    ST_CHECK(pipe->ops->prepare(pipe, col, col->step, x));
    if (x->recv_len > 0) {
        ST_CHECK(st_rail_recv(comm, &col->net[ST_RAIL_RECV], x->recv_peer, x->recv_buf, x->recv_len,
                              st_tag_coll(pipe->args.seq, x->recv_sub)));
    }
    if (x->send_len > 0) {
        ST_CHECK(st_rail_send(comm, &col->net[ST_RAIL_SEND], x->send_peer, x->send_buf, x->send_len,
                              st_tag_coll(pipe->args.seq, x->send_sub)));
    }
    return ST_OK;
}

/* Advances one column as far as it can go without waiting. */
static st_status_t st_pipe_col_progress(st_pipe_t *pipe, st_pipe_col_t *col)
{
    for (;;) {
        int         at;
        st_status_t status = st_rail_test_all(col->net, 2, &at);

        if (status == ST_INPROGRESS) {
            return ST_INPROGRESS;
        }
        if (status != ST_OK) {
            return st_rail_fail(&pipe->op, &col->net[at], status, "%s step %d/%d",
                                pipe->ops->phase(pipe, col->step), col->step + 1, pipe->nsteps);
        }
        if (pipe->ops->complete != NULL) {
            ST_CHECK(pipe->ops->complete(pipe, col, col->step));
        }
        pipe->op.progressed = 1;
        if (++col->step == pipe->nsteps) {
            col->active = 0;
            pipe->done_cols++;
            return ST_OK;
        }
        ST_CHECK(st_pipe_post(pipe, col));
    }
}

static st_status_t st_pipe_progress(st_op_t *op)
{
    st_pipe_t     *pipe = (st_pipe_t *)op;
    st_pipe_col_t *oldest = NULL;
    st_status_t    status;

    for (int i = 0; i < pipe->depth; i++) {
        st_pipe_col_t *col = &pipe->cols[i];

        if (!col->active && pipe->next_col < pipe->ncols) {
            col->active = 1;
            col->k      = pipe->next_col++;
            col->step   = 0;
            ST_CHECK(st_pipe_post(pipe, col));
            pipe->op.progressed = 1;
        }
        if (col->active) {
            status = st_pipe_col_progress(pipe, col);
            if (status < 0) {
                return status;
            }
            if (col->active && (oldest == NULL || col->k < oldest->k)) {
                oldest = col;
            }
            /* a column that finished frees its slot for the next one at once */
            if (!col->active && pipe->next_col < pipe->ncols) {
                i--;
            }
        }
    }
    if (pipe->done_cols == pipe->ncols) {
        return ST_OK;
    }
    if (oldest != NULL) {
        op->phase     = pipe->ops->phase(pipe, oldest->step);
        op->step      = oldest->step + 1;
        op->wait_peer = st_rail_busy(&oldest->net[ST_RAIL_RECV]) ? oldest->net[ST_RAIL_RECV].peer
                                                                 : oldest->net[ST_RAIL_SEND].peer;
    }
    return ST_INPROGRESS;
}

static void st_pipe_free(void *arg)
{
    st_pipe_t *pipe = arg;

    free(pipe->tmp_mem);
    free(pipe);
}

static void st_pipe_destroy(st_op_t *op)
{
    st_pipe_t    *pipe = (st_pipe_t *)op;
    st_request_t *reqs[2 * ST_PIPE_MAX_DEPTH];
    int           n = 0;

    for (int i = 0; i < pipe->depth; i++) {
        n += st_rail_reqs(pipe->cols[i].net, 2, reqs + n);
    }
    if (!st_exec_cancel(op, reqs, n, 2.0)) {
        st_comm_defer(op->comm, st_pipe_free, pipe); /* the transport still owns the buffers */
        return;
    }
    st_pipe_free(pipe);
}

st_status_t st_pipe_init(st_pipe_t *pipe, const st_coll_args_t *args, const st_pipe_ops_t *ops,
                         size_t chunk, size_t ncols, int nsteps, int need_tmp, int min_depth)
{
    size_t chunk_bytes;

    pipe->ops          = ops;
    pipe->args         = *args;
    pipe->esize        = st_dtype_size(args->dtype);
    pipe->chunk        = chunk;
    pipe->ncols        = ncols;
    pipe->nsteps       = nsteps;
    pipe->need_tmp     = need_tmp;
    pipe->depth        = (int)st_core_config.pipeline_depth; /* 1..16, checked at init */
    if (pipe->depth < min_depth) {
        unsigned used = (unsigned)ST_MIN(min_depth, ST_PIPE_MAX_DEPTH);
        char     why[96];

        snprintf(why, sizeof(why), "a flat ring of %d channels keeps at least one chunk in "
                 "flight per channel", min_depth);
        st_param_adjusted("STRATA_PIPELINE_DEPTH", ST_CFG_UINT, &st_core_config.pipeline_depth,
                          &used, why);
        pipe->depth = (int)used;
    }
    if ((size_t)pipe->depth > ncols) {
        pipe->depth = (int)ST_MAX(ncols, 1);
    }
    pipe->op.comm      = args->comm;
    pipe->op.coll      = st_coll_name(args->type);
    pipe->op.seq       = args->seq;
    pipe->op.nsteps    = nsteps;
    pipe->op.wait_peer = -1;
    pipe->op.phase     = ops->phase(pipe, 0);
    pipe->op.progress  = st_pipe_progress;
    pipe->op.destroy   = st_pipe_destroy;
    if (need_tmp) {
        chunk_bytes   = chunk * pipe->esize;
        pipe->tmp_mem = malloc(2 * chunk_bytes * pipe->depth);
        if (pipe->tmp_mem == NULL) {
            st_error(ST_SUB_COLL, "%s: cannot allocate %zu B of staging buffers", pipe->op.coll,
                     2 * chunk_bytes * pipe->depth);
            return ST_ERR_NO_MEMORY;
        }
        for (int i = 0; i < pipe->depth; i++) {
            pipe->cols[i].tmp[0] = (char *)pipe->tmp_mem + (2 * i) * chunk_bytes;
            pipe->cols[i].tmp[1] = (char *)pipe->tmp_mem + (2 * i + 1) * chunk_bytes;
        }
    }
    return ST_OK;
}

/* Runs the ops of args[0..n) together in the engine (st_exec_run) and marks their collectives
 * finished in their communicators' issue order. */
static st_status_t st_coll_run_batch(const st_coll_args_t *const *args, int n)
{
    st_op_t    *stack_ops[8];
    st_op_t   **ops = (n <= 8) ? stack_ops : malloc((size_t)n * sizeof(*ops));
    st_status_t status = ST_OK;
    int         nops = 0;

    if (ops == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    for (int i = 0; i < n; i++) {
        st_op_t *op;

        status = st_coll_op_create(args[i], &op);
        if (status != ST_OK) {
            break;
        }
        if (op != NULL) { /* NULL: done locally already */
            ops[nops++] = op;
        }
    }
    if (status == ST_OK && nops > 1) {
        status = st_p2p_link_overlaps(ops, nops);
    }
    if (status != ST_OK) {
        /* do not leave peers waiting on the ops that were made: run them anyway */
        st_exec_run(ops, nops);
    } else if (nops > 0) {
        status = st_exec_run(ops, nops);
    }
    if (ops != stack_ops) {
        free(ops);
    }
out:
    for (int i = 0; i < n; i++) {
        if (!st_coll_info(args[i]->type)->p2p) {
            st_comm_order_done(args[i]->comm, args[i]->seq);
        }
    }
    return status;
}

/* The calls of one launch (a blocking call, a group, a stream's item) run in batches. A batch
 * takes every send and receive, and of each communicator the first of its collectives not yet
 * run, provided every collective issued before it on that communicator (on another stream or
 * thread) has finished: so one communicator's collectives run one at a time, in issue order,
 * never sharing its windows, while different communicators and point-to-point calls still run
 * together (NCCL's group semantics). When nothing can start, it waits for the earlier
 * collectives, reporting the wait once after STRATA_STALL_WARN; a communicator that failed or
 * was aborted meanwhile ends the wait and its collective is not run. */
st_status_t st_coll_run(const st_coll_args_t *args, int nargs)
{
    const st_coll_args_t  *stack_batch[16]; /* a blocking call or a small group: no malloc */
    const st_coll_args_t **batch, **left;
    st_status_t            status = ST_OK, s;
    int                    nleft = nargs;
    double                 wait_start = 0;
    int                    warned = 0;

    if (nargs == 1 && (s = st_small_run_fast(args)) != ST_ERR_UNSUPPORTED) {
        return s; /* the latency path (small.c) */
    }
    batch = (nargs <= 8) ? stack_batch : malloc(2 * (size_t)nargs * sizeof(*batch));
    if (batch == NULL) {
        for (int i = 0; i < nargs; i++) {
            if (!st_coll_info(args[i].type)->p2p) {
                st_comm_order_done(args[i].comm, args[i].seq);
            }
        }
        return ST_ERR_NO_MEMORY;
    }
    left = batch + nargs;
    for (int i = 0; i < nargs; i++) {
        left[i] = &args[i];
    }
    while (nleft > 0) {
        int nb = 0, nkeep = 0;

        for (int i = 0; i < nleft; i++) {
            const st_coll_args_t *a = left[i];
            int                   take = 1;

            if (!st_coll_info(a->type)->p2p &&
                (a->comm->state == ST_COMM_FAILED || a->comm->state == ST_COMM_ABORTED)) {
                /* its peers have given up: it could only wait out the deadline */
                st_error(ST_SUB_COLL, "%s #%llu on %s rank %d not run: the communicator %s "
                         "earlier", st_coll_name(a->type), (unsigned long long)a->seq,
                         a->comm->name, a->comm->rank,
                         a->comm->state == ST_COMM_ABORTED ? "was aborted" : "failed");
                st_comm_order_done(a->comm, a->seq);
                status = (status == ST_OK) ? ST_ERR_USAGE : status;
                continue;
            }
            if (!st_coll_info(a->type)->p2p) {
                /* a collective of a communicator already in this batch waits for the next */
                for (int j = 0; j < nb && take; j++) {
                    take = !(batch[j]->comm == a->comm &&
                             !st_coll_info(batch[j]->type)->p2p);
                }
                for (int j = 0; j < nkeep && take; j++) {
                    take = !(left[j]->comm == a->comm &&
                             !st_coll_info(left[j]->type)->p2p);
                }
                take = take && st_comm_order_ready(a->comm, a->seq);
            }
            if (take) {
                batch[nb++] = a;
            } else {
                left[nkeep++] = a;
            }
        }
        nleft = nkeep;
        if (nb > 0) {
            s = st_coll_run_batch(batch, nb);
            status = (status == ST_OK) ? s : status;
            wait_start = 0;
            warned = 0;
            continue;
        }
        /* every call left waits for an earlier collective of its communicator */
        if (wait_start == 0) {
            wait_start = st_time_now();
        } else if (!warned) {
            const st_coll_args_t *a = left[0];
            double                after = st_exec_stall_after(a->comm);

            if (after > 0 && st_time_now() - wait_start > after) {
                st_warn(ST_SUB_COLL, "%s #%llu on %s rank %d: waiting %.1f s for #%llu of the "
                        "same communicator, issued earlier on another stream or thread, to "
                        "finish (one communicator's collectives run in issue order)",
                        st_coll_name(a->type), (unsigned long long)a->seq, a->comm->name,
                        a->comm->rank, st_time_now() - wait_start,
                        (unsigned long long)__atomic_load_n(&a->comm->coll_done,
                                                            __ATOMIC_ACQUIRE));
                warned = 1;
            }
        }
        usleep(st_time_now() - wait_start < 0.001 ? 20 : 500);
    }
    if (batch != stack_batch) {
        free(batch);
    }
    return status;
}
