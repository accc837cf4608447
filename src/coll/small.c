/*
 * small.c - all-reduce for latency (up to ST_INTRA_SMALL_MAX bytes): one round through the node's
 * windows, and on several nodes one direct exchange between the node leaders.
 *
 *   1. every rank writes its (prescaled) contribution into the in half of its small area and
 *      publishes SMALL_IN;
 *   2. one node: every rank reduces all m contributions itself, in local rank order, straight
 *      into its receive buffer (m reads of at most 128 KiB beat any further synchronisation);
 *      several nodes: the node leader (local rank 0) reduces them into its res half, sends that
 *      partial to every other node's leader and receives theirs (N-1 messages each way, all in
 *      flight at once: one network latency instead of log2(N) or N-1 for a ring), reduces the N
 *      partials in node order, and publishes the result for its node (SMALL_RES);
 *   3. every rank publishes SMALL_DONE once it read what it needed, which frees the areas for the
 *      operation after next (the two small areas alternate).
 * Every rank (one node) or every leader (several) combines in the same order: results are bitwise
 * identical everywhere. The leaders' direct exchange suits the node counts strata targets; for
 * hundreds of nodes recursive doubling would be the better second stage.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/socket.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "coll/rail.h"
#include "topo/topo.h"

typedef struct st_small {
    st_op_t          op;
    st_coll_args_t   args;
    st_comm_t       *comm;
    st_intra_t      *intra;
    size_t           bytes;
    uint64_t         sseq;    /* this op's small sequence number */
    uint64_t         ticket;
    int              area;
    int              stage;   /* 0 write, 1 reduce (node), 2 exchange (leaders), 3 deliver */
    int              leader;  /* local rank 0 */
    st_rail_xfer_t  *xfers;   /* [2 (N-1)] leaders: receives, then sends, each over the other
                               * nodes in order (coll/rail.h) */
    char            *partials; /* [N][bytes] leaders: the other nodes' partials */
    const void     **srcs;    /* [max(m, N)] */
} st_small_t;

int st_small_fits(const st_coll_args_t *args)
{
    return args->type == ST_COLL_ALLREDUCE && args->comm->intra != NULL &&
           args->count * st_dtype_size(args->dtype) <= ST_INTRA_SMALL_MAX;
}

static char *st_small_in(const st_small_t *s, int lr)
{
    return st_intra_small(s->intra, lr, s->area);
}

static char *st_small_res(const st_small_t *s, int lr)
{
    return st_intra_small(s->intra, lr, s->area) + ST_INTRA_SMALL_MAX;
}

static st_status_t st_small_exchange_post(st_small_t *s)
{
    st_comm_t *comm = s->comm;
    uint64_t   tag = st_tag_coll(s->args.seq, 0);
    int        n = comm->nnodes, i = 0;

    for (int node = 0; node < n; node++) {
        int peer = st_topo_node_rank(comm->topo, node, 0);

        if (node == comm->node) {
            continue;
        }
        ST_CHECK(st_rail_recv(comm, &s->xfers[i], peer, s->partials + (size_t)node * s->bytes,
                              s->bytes, tag));
        ST_CHECK(st_rail_send(comm, &s->xfers[n - 1 + i], peer, st_small_res(s, 0), s->bytes,
                              tag));
        i++;
    }
    return ST_OK;
}

/* 1 when every exchange transfer is over; errors are returned through *status_p. While not,
 * the op waits for the first leader whose message has not arrived (else, whose receive of ours
 * has not completed): the rank a stall or a timeout names. */
static int st_small_exchange_done(st_small_t *s, st_status_t *status_p)
{
    int         at;
    st_status_t status = st_rail_test_all(s->xfers, 2 * (s->comm->nnodes - 1), &at);

    *status_p = ST_OK;
    if (status == ST_INPROGRESS) {
        s->op.wait_peer = s->xfers[at].peer;
        return 0;
    }
    if (status != ST_OK) {
        *status_p = st_rail_fail(&s->op, &s->xfers[at], status,
                                 "small all-reduce, leaders' exchange");
    }
    return 1;
}

static void st_small_finish(st_small_t *s)
{
    st_comm_t          *comm = s->comm;
    strataPhaseTimes_t *t = &comm->times;

    st_intra_publish(s->intra, ST_INTRA_SMALL_DONE, s->sseq + 1);
    memset(t, 0, sizeof(*t));
    snprintf(t->algorithm, sizeof(t->algorithm), "small");
    t->totalSeconds = st_time_now() - s->op.t_start;
    t->seconds[1]   = t->totalSeconds;
    t->bytes[1]     = s->bytes;
    comm->have_times  = 1;
    s->op.times_set   = 1;
}

static st_status_t st_small_progress(st_op_t *op)
{
    st_small_t  *s = (st_small_t *)op;
    st_intra_t  *intra = s->intra;
    st_comm_t   *comm = s->comm;
    size_t       count = s->args.count;
    const st_redop_t *redop = &s->args.redop;
    uint32_t     bell;
    int          lag = -1;
    st_status_t  status;

    op->sleepable = 0;
    if (intra->turn != s->ticket) {
        op->phase = "waiting for the previous collective on the node's windows";
        return ST_INPROGRESS;
    }
    bell = st_intra_doorbell(intra);
    op->wait_peer = -1;
    if (s->stage == 0) {
        /* the area was last used two small operations ago: every local rank must be done */
        if (s->sseq >= 1 && !st_intra_all_reached(intra, ST_INTRA_SMALL_DONE, s->sseq - 1, &lag)) {
            op->phase = "small: waiting for the area";
            goto blocked;
        }
        st_reduce_pre(redop, st_small_in(s, intra->local_rank), s->args.sendbuff, count);
        st_intra_publish(intra, ST_INTRA_SMALL_IN, s->sseq + 1);
        op->progressed = 1;
        s->stage = 1;
    }
    if (s->stage == 1) {
        if (comm->nnodes > 1 && !s->leader) {
            s->stage = 3;
        } else {
            void *dst = (comm->nnodes == 1) ? s->args.recvbuff : (void *)st_small_res(s, 0);

            if (!st_intra_all_reached(intra, ST_INTRA_SMALL_IN, s->sseq + 1, &lag)) {
                op->phase = "small: intra-node reduce";
                goto blocked;
            }
            for (int lr = 0; lr < intra->local_size; lr++) {
                s->srcs[lr] = st_small_in(s, lr);
            }
            st_intra_reduce(redop, dst, s->srcs, intra->local_size, count);
            op->progressed = 1;
            if (comm->nnodes == 1) {
                if (st_redop_has_post(redop)) {
                    st_reduce_post(redop, dst, count);
                }
                st_small_finish(s);
                return ST_OK;
            }
            ST_CHECK(st_small_exchange_post(s));
            s->stage = 2;
        }
    }
    if (s->stage == 2) {
        op->phase = "small: leaders' exchange";
        if (!st_small_exchange_done(s, &status)) {
            return ST_INPROGRESS; /* network: not sleepable */
        }
        if (status != ST_OK) {
            return status;
        }
        for (int node = 0; node < comm->nnodes; node++) {
            s->srcs[node] = (node == comm->node) ? st_small_res(s, 0)
                                                 : s->partials + (size_t)node * s->bytes;
        }
        st_intra_reduce(redop, s->args.recvbuff, s->srcs, comm->nnodes, count);
        if (st_redop_has_post(redop)) {
            st_reduce_post(redop, s->args.recvbuff, count);
        }
        memcpy(st_small_res(s, 0), s->args.recvbuff, s->bytes);
        st_intra_publish(intra, ST_INTRA_SMALL_RES, s->sseq + 1);
        op->progressed = 1;
        st_small_finish(s);
        return ST_OK;
    }
    /* stage 3: a non-leader on several nodes waits for its leader's result */
    if (!st_intra_reached(intra, 0, ST_INTRA_SMALL_RES, s->sseq + 1)) {
        op->phase = "small: waiting for the node leader";
        lag = 0;
        goto blocked;
    }
    memcpy(s->args.recvbuff, st_small_res(s, 0), s->bytes);
    op->progressed = 1;
    st_small_finish(s);
    return ST_OK;

blocked:
    op->wait_peer = (lag >= 0) ? st_topo_node_rank(comm->topo, comm->node, lag) : -1;
    if (!op->progressed) {
        op->sleepable  = 1;
        op->sleep_seen = bell;
    }
    return ST_INPROGRESS;
}

static void st_small_free(void *arg)
{
    st_small_t *s = arg;

    free(s->xfers);
    free(s->partials);
    free(s->srcs);
    free(s);
}

static void st_small_destroy(st_op_t *op)
{
    st_small_t    *s = (st_small_t *)op;
    st_request_t **reqs = NULL;
    int            n = 0;

    s->intra->turn = s->ticket + 1;
    if (s->xfers != NULL) {
        int nx = 2 * (s->comm->nnodes - 1);

        reqs = malloc((size_t)nx * sizeof(*reqs));
        if (reqs == NULL && st_rail_reqs(s->xfers, nx, NULL) > 0) {
            return; /* cannot even cancel: leak rather than free buffers in use */
        }
        n = (reqs != NULL) ? st_rail_reqs(s->xfers, nx, reqs) : 0;
    }
    if (!st_exec_cancel(op, reqs, n, 2.0)) {
        free(reqs);
        st_comm_defer(op->comm, st_small_free, s); /* the transport may still write into it */
        return;
    }
    free(reqs);
    st_small_free(s);
}

st_status_t st_small_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    st_intra_t *intra = comm->intra;
    st_small_t *s;
    int         n = comm->nnodes;

    *op_p = NULL;
    if (args->count == 0) {
        return ST_OK;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    s->args   = *args;
    s->comm   = comm;
    s->intra  = intra;
    s->bytes  = args->count * st_dtype_size(args->dtype);
    s->leader = intra->local_rank == 0;
    s->srcs   = malloc((size_t)ST_MAX(intra->local_size, n) * sizeof(*s->srcs));
    if (s->srcs == NULL) {
        st_small_free(s);
        return ST_ERR_NO_MEMORY;
    }
    if (n > 1 && s->leader) {
        s->xfers    = calloc(2 * (size_t)(n - 1), sizeof(*s->xfers));
        s->partials = malloc((size_t)n * s->bytes);
        if (s->xfers == NULL || s->partials == NULL) {
            st_small_free(s);
            return ST_ERR_NO_MEMORY;
        }
    }
    s->sseq         = intra->small_seq++;
    s->area         = (int)(s->sseq & 1);
    s->ticket       = intra->tickets++;
    s->op.comm      = comm;
    s->op.coll      = st_coll_name(args->type);
    s->op.seq       = args->seq;
    s->op.phase     = "small: write";
    s->op.wait_peer = -1;
    s->op.progress  = st_small_progress;
    s->op.destroy   = st_small_destroy;
    s->op.sleep_on  = intra;
    s->op.sleep     = st_intra_sleep_hook;
    s->op.algo      = "small";
    *op_p = &s->op;
    return ST_OK;
}
