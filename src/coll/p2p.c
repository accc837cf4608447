/*
 * p2p.c - send and receive. Each call is one tagged message whose tag is the per-pair sequence
 * number, so sends and receives between two ranks match in call order whatever else is in flight.
 * Inside a group every send and receive is posted before any is waited for, so any pattern
 * (all-to-all, a ring, sends to oneself) completes without deadlock.
 *
 * A receive whose buffer overlaps the buffer of a send in the same group (nccl-tests' in-place
 * sendrecv passes one buffer to both) lands in a staging buffer and is copied into place only
 * when those sends have completed: the group then behaves as if every send read its data before
 * any receive wrote, which is what the caller of an in-place exchange means.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "coll/coll.h"
#include "coll/rail.h"

#define ST_P2P_MAX_DEPS 8

typedef struct st_p2p {
    st_op_t        op;
    st_coll_args_t args;
    st_rail_xfer_t xfer;     /* the transfer (coll/rail.h) */
    int            started;
    int            received;
    void          *staging;               /* receive here first: the buffer is still being sent */
    int            ndeps;
    st_op_t       *deps[ST_P2P_MAX_DEPS]; /* sends of the group that read the receive buffer */
} st_p2p_t;

static size_t st_p2p_bytes(const st_p2p_t *p)
{
    return p->args.count * st_dtype_size(p->args.dtype);
}

static st_status_t st_p2p_progress(st_op_t *op)
{
    st_p2p_t    *p = (st_p2p_t *)op;
    st_comm_t   *comm = op->comm;
    size_t       len = p->args.count * st_dtype_size(p->args.dtype);
    int          is_send = (p->args.type == ST_COLL_SEND);
    st_status_t  status;

    if (p->received) {
        goto wait_deps;
    }
    if (!p->started) {
        uint64_t tag = st_tag_p2p(p->args.seq);
        void    *rbuf = (p->staging != NULL) ? p->staging : p->args.recvbuff;

        ST_CHECK(is_send ? st_rail_send(comm, &p->xfer, p->args.peer, p->args.sendbuff, len, tag)
                         : st_rail_recv(comm, &p->xfer, p->args.peer, rbuf, len, tag));
        p->started     = 1;
        op->progressed = 1;
    }
    status = st_rail_test(&p->xfer);
    if (status == ST_INPROGRESS) {
        return ST_INPROGRESS;
    }
    if (status != ST_OK) {
        return st_rail_fail(op, &p->xfer, status, "point-to-point");
    }
    op->progressed = 1;
    if (p->staging == NULL) {
        return ST_OK;
    }
    p->received = 1;
wait_deps:
    for (int i = 0; i < p->ndeps; i++) {
        if (!p->deps[i]->finished) {
            return ST_INPROGRESS;
        }
    }
    memcpy(p->args.recvbuff, p->staging, len);
    op->progressed = 1;
    return ST_OK;
}

static int st_p2p_overlap(const char *a, size_t alen, const char *b, size_t blen)
{
    return alen > 0 && blen > 0 && a < b + blen && b < a + alen;
}

st_status_t st_p2p_link_overlaps(st_op_t **ops, int nops)
{
    for (int i = 0; i < nops; i++) {
        st_p2p_t *recv = (st_p2p_t *)ops[i];

        if (ops[i]->progress != st_p2p_progress || recv->args.type != ST_COLL_RECV) {
            continue;
        }
        for (int j = 0; j < nops; j++) {
            st_p2p_t *send = (st_p2p_t *)ops[j];

            if (ops[j]->progress != st_p2p_progress || send->args.type != ST_COLL_SEND ||
                !st_p2p_overlap(recv->args.recvbuff, st_p2p_bytes(recv), send->args.sendbuff,
                                st_p2p_bytes(send))) {
                continue;
            }
            if (recv->ndeps == ST_P2P_MAX_DEPS) {
                st_error(ST_SUB_P2P, "Recv #%llu from rank %d: its buffer overlaps more than %d "
                         "sends of the group", (unsigned long long)recv->args.seq,
                         recv->args.peer, ST_P2P_MAX_DEPS);
                return ST_ERR_USAGE;
            }
            recv->deps[recv->ndeps++] = ops[j];
        }
        if (recv->ndeps > 0 && recv->staging == NULL) {
            recv->staging = malloc(st_p2p_bytes(recv));
            if (recv->staging == NULL) {
                st_error(ST_SUB_P2P, "Recv #%llu: cannot allocate %zu B of staging",
                         (unsigned long long)recv->args.seq, st_p2p_bytes(recv));
                return ST_ERR_NO_MEMORY;
            }
        }
    }
    return ST_OK;
}

static void st_p2p_free(void *arg)
{
    st_p2p_t *p = arg;

    free(p->staging);
    free(p);
}

static void st_p2p_destroy(st_op_t *op)
{
    st_p2p_t     *p = (st_p2p_t *)op;
    st_request_t *req = st_rail_req(&p->xfer);

    if (req != NULL && !req->done && !st_exec_cancel(op, &req, 1, 2.0)) {
        st_comm_defer(op->comm, st_p2p_free, p); /* the transport may still write into it */
        return;
    }
    st_p2p_free(p);
}

st_status_t st_p2p_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_p2p_t *p;

    *op_p = NULL;
    /* count 0 still moves an empty message: a peer that sends or expects bytes then fails at once
     * naming both sizes, instead of waiting out its deadline or dropping the message */
    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    p->args         = *args;
    p->op.comm      = args->comm;
    p->op.coll      = st_coll_name(args->type);
    p->op.seq       = args->seq;
    p->op.phase     = (args->type == ST_COLL_SEND) ? "send" : "receive";
    p->op.step      = 1;
    p->op.nsteps    = 1;
    p->op.wait_peer = args->peer;
    p->op.progress  = st_p2p_progress;
    p->op.destroy   = st_p2p_destroy;
    *op_p = &p->op;
    return ST_OK;
}
