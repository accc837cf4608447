/*
 * small.c - all-reduce for latency (up to ST_INTRA_SMALL_MAX bytes): one round through the node's
 * windows, and on several nodes one direct exchange between the node leaders.
 *
 *   1. every rank writes its (prescaled) contribution into the in half of its small area and
 *      publishes it: on one node with a flag at the area's start (with the mismatch check's two
 *      words of the call between flag and data: one cache line for both up to 40 bytes), on
 *      several nodes with SMALL_IN in the control area;
 *   2. one node: every rank reduces all m contributions itself, in local rank order, straight
 *      into its receive buffer (m reads of at most 128 KiB beat any further synchronisation);
 *      several nodes: the node leader (local rank 0) reduces them into its res half, sends that
 *      partial to every other node's leader and receives theirs (N-1 messages each way, all in
 *      flight at once: one network latency instead of log2(N) or N-1 for a ring), reduces the N
 *      partials in node order, and publishes the result for its node (SMALL_RES);
 *   3. every rank publishes SMALL_DONE once it read what it needed, which frees the areas for the
 *      operation after next (the two small areas alternate). One node needs no such publish: a
 *      rank publishes SMALL_IN of operation k only after it finished k - 1, and every rank saw
 *      all SMALL_IN of k before it starts k + 1, so the area of k - 1 is free by then.
 * One node, per call and rank: one flag published (the doorbell rung only for a sleeping peer),
 * the check's words next to it and its fingerprint on the node's board (engine/mismatch.h), the
 * peers' flags, words and contributions read: no system call, no allocation, no network. A
 * blocking call takes st_small_run_fast (no op, no engine: about 0.35-0.45 us for 8 bytes on 2
 * ranks here, docs/performance.md); a late peer or calls that differ hand it to the engine as an
 * op in the same state (the op is kept for the next call too, st_op_t.local_only).
 * Every rank (one node) or every leader (several) combines in the same order: results are bitwise
 * identical everywhere. The leaders' direct exchange suits the node counts strata targets; for
 * hundreds of nodes recursive doubling would be the better second stage.
 */
#include "config.h"

#include <sched.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "base/sys.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "coll/rail.h"
#include "engine/mismatch.h"
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
    int              nsrcs;
    const void      *srcs[];  /* [nsrcs = max(m, N)], in the op's one allocation */
} st_small_t;

int st_small_fits(const st_coll_args_t *args)
{
    return args->type == ST_COLL_ALLREDUCE && args->comm->intra != NULL &&
           args->count * st_dtype_size(args->dtype) <= ST_INTRA_SMALL_MAX;
}

/* One node: the area starts with its flag (the small sequence number + 1 once the data is
 * there), then the mismatch check's two words of the call (st_check_words), then the data, so
 * that the flag, the call and the first 40 bytes of data are one cache line: a peer that sees
 * the flag has the data and can tell that the calls agree without another load (the res half is
 * unused on one node and takes the 24 bytes the header shifts). Several nodes: SMALL_IN in the
 * control area says it. */
#define ST_SMALL_FLAG_BYTES 24

static char *st_small_in(const st_small_t *s, int lr)
{
    return st_intra_small(s->intra, lr, s->area) + (s->comm->nnodes == 1 ? ST_SMALL_FLAG_BYTES : 0);
}

static uint64_t *st_small_flag(const st_small_t *s, int lr)
{
    return (uint64_t *)(void *)st_intra_small(s->intra, lr, s->area);
}

/* 1 when every local rank's contribution is in: the flags (one node) or SMALL_IN; else 0 with
 * *lag_p the first local rank missing. */
static int st_small_all_in(const st_small_t *s, int *lag_p)
{
    const st_intra_t *intra = s->intra;

    if (s->comm->nnodes > 1) {
        return st_intra_all_reached(intra, ST_INTRA_SMALL_IN, s->sseq + 1, lag_p);
    }
    for (int lr = 0; lr < intra->local_size; lr++) {
        if (__atomic_load_n(st_small_flag(s, lr), __ATOMIC_ACQUIRE) < s->sseq + 1) {
            *lag_p = lr;
            return 0;
        }
    }
    return 1;
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

    if (comm->nnodes > 1) {
        st_intra_publish(s->intra, ST_INTRA_SMALL_DONE, s->sseq + 1);
    }
    memset(t, 0, sizeof(*t));
    memcpy(t->algorithm, "small", sizeof("small"));
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
        /* The area was last used two small operations ago: every local rank must be done with
         * it. One node: implied, since the previous operation saw every rank's SMALL_IN for it,
         * which a rank publishes only after it finished the one before. */
        if (comm->nnodes > 1 && s->sseq >= 1 &&
            !st_intra_all_reached(intra, ST_INTRA_SMALL_DONE, s->sseq - 1, &lag)) {
            op->phase = "small: waiting for the area";
            goto blocked;
        }
        st_reduce_pre(redop, st_small_in(s, intra->local_rank), s->args.sendbuff, count);
        if (op->check != NULL) {
            (void)st_check_post(op->check); /* the fingerprint rides on this publish */
            if (comm->nnodes == 1) {
                st_check_words(op->check, st_small_flag(s, intra->local_rank) + 1);
            }
        }
        if (comm->nnodes == 1) {
            st_intra_publish_at(intra, st_small_flag(s, intra->local_rank), s->sseq + 1);
        } else {
            st_intra_publish(intra, ST_INTRA_SMALL_IN, s->sseq + 1);
        }
        op->progressed = 1;
        s->stage = 1;
    }
    if (s->stage == 1) {
        if (comm->nnodes > 1 && !s->leader) {
            s->stage = 3;
        } else {
            void *dst = (comm->nnodes == 1) ? s->args.recvbuff : (void *)st_small_res(s, 0);

            if (!st_small_all_in(s, &lag)) {
                op->phase = "small: intra-node reduce";
                goto blocked;
            }
            if (op->check != NULL && comm->nnodes == 1) {
                /* the calls agree when every rank's words are this rank's (read with the flags);
                 * otherwise the board's entries tell how they differ */
                const uint64_t *own = st_small_flag(s, intra->local_rank) + 1;
                int             same = 1;

                for (int lr = 0; lr < intra->local_size; lr++) {
                    const uint64_t *w = st_small_flag(s, lr) + 1;

                    same &= (w[0] == own[0]) & (w[1] == own[1]);
                }
                if (same) {
                    st_check_agreed(op->check);
                }
            } else if (op->check != NULL) {
                st_check_prefetch(op->check);
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
    free(s);
}

/* One node: the op goes back to the windows for the next small call (no allocation on the
 * latency path); the first one kept wins. */
static void st_small_keep(st_small_t *s)
{
    if (s->xfers == NULL && s->intra->small_spare == NULL) {
        s->intra->small_spare = s;
        return;
    }
    st_small_free(s);
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
    if (n > 0 && !st_exec_cancel(op, reqs, n, 2.0)) {
        free(reqs);
        st_comm_defer(op->comm, st_small_free, s); /* the transport may still write into it */
        return;
    }
    free(reqs);
    st_small_keep(s);
}

/* Makes the op of small operation sseq, turn ticket, at stage (0: nothing written yet; 1: the
 * contribution, words and flag published, by the fast path). */
static st_status_t st_small_make(const st_coll_args_t *args, uint64_t sseq, uint64_t ticket,
                                 int stage, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    st_intra_t *intra = comm->intra;
    st_small_t *s;
    int         n = comm->nnodes, nsrcs;

    nsrcs = ST_MAX(intra->local_size, n);
    s = intra->small_spare;
    intra->small_spare = NULL;
    if (s == NULL || s->nsrcs != nsrcs) {
        free(s);
        s = malloc(sizeof(*s) + (size_t)nsrcs * sizeof(s->srcs[0]));
        if (s == NULL) {
            return ST_ERR_NO_MEMORY;
        }
    }
    memset(s, 0, sizeof(*s));
    s->nsrcs  = nsrcs;
    s->args   = *args;
    s->comm   = comm;
    s->intra  = intra;
    s->bytes  = args->count * st_dtype_size(args->dtype);
    s->leader = intra->local_rank == 0;
    if (n > 1 && s->leader) {
        s->xfers    = calloc(2 * (size_t)(n - 1), sizeof(*s->xfers));
        s->partials = malloc((size_t)n * s->bytes);
        if (s->xfers == NULL || s->partials == NULL) {
            st_small_free(s);
            return ST_ERR_NO_MEMORY;
        }
    }
    s->sseq         = sseq;
    s->area         = (int)(s->sseq & 1);
    s->ticket       = ticket;
    s->stage        = stage;
    s->op.comm      = comm;
    s->op.coll      = st_coll_name(args->type);
    s->op.seq       = args->seq;
    s->op.phase     = "small: write";
    s->op.wait_peer = -1;
    s->op.progress  = st_small_progress;
    s->op.destroy   = st_small_destroy;
    s->op.sleep_on  = intra;
    s->op.sleep     = st_intra_sleep_hook;
    s->op.arm       = st_intra_arm_hook;
    s->op.algo      = "small";
    s->op.local_only = (n == 1);
    *op_p = &s->op;
    return ST_OK;
}

st_status_t st_small_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_intra_t *intra = args->comm->intra;
    st_status_t status;

    *op_p = NULL;
    if (args->count == 0) {
        return ST_OK;
    }
    status = st_small_make(args, intra->small_seq, intra->tickets, 0, op_p);
    if (status == ST_OK) {
        intra->small_seq++;
        intra->tickets++;
    }
    return status;
}

/* 1 when the op and (with the mismatch check) the check that a hand-over takes are kept,
 * making them now when they are not; 0 when memory runs out. */
static int st_small_spares(st_comm_t *comm, int m)
{
    st_intra_t *intra = comm->intra;
    st_small_t *s = intra->small_spare;

    if (s == NULL || s->nsrcs != m) {
        free(s);
        s = malloc(sizeof(*s) + (size_t)m * sizeof(s->srcs[0]));
        intra->small_spare = s;
        if (s == NULL) {
            return 0;
        }
        s->nsrcs = m;
    }
    return !st_core_config.check_mismatch || st_check_keep_spare(comm) == ST_OK;
}

/* How long the fast path waits for the other ranks before it hands the call to the engine
 * (which spins, yields and sleeps, and keeps the deadlines): a peer on another core that is
 * inside the same call arrives within a few hundred nanoseconds. With more ranks than cores
 * (comm->intra_oversub) the peers need this core: it yields between looks, for as long as the
 * engine would spin (STRATA_SPIN_TIME) before it sleeps. */
#define ST_SMALL_FAST_WAIT_S 1.5e-6

st_status_t st_small_run_fast(const st_coll_args_t *args)
{
    st_comm_t        *comm = args->comm;
    st_intra_t       *intra = comm->intra;
    const st_redop_t *redop = &args->redop;
    size_t            bytes = args->count * st_dtype_size(args->dtype);
    const void       *srcs[ST_INTRA_SMALL_FAST_RANKS];
    uint64_t          sseq, ticket, *own, words[2] = {0, 0};
    int               m, checked, same = 1, ready = 0;
    uint64_t          t0;
    double            wait;
    st_op_t          *op = NULL;
    st_status_t       status;

    /* issue order first: it orders this thread after the one that ran the collective before
     * (the windows' turn, the cached limit) */
    if (args->type != ST_COLL_ALLREDUCE || args->algo != ST_ALGO_AUTO || args->count == 0 ||
        args->mem != ST_MEM_HOST || args->compress != NULL || comm->nnodes != 1 ||
        !st_comm_order_ready(comm, args->seq) || comm->state != ST_COMM_READY ||
        intra == NULL || (m = intra->local_size) < 2 || m > ST_INTRA_SMALL_FAST_RANKS ||
        bytes > st_coll_small_fast_max(comm) ||
        (st_core_config.check_mismatch && comm->board == NULL) || intra->turn != intra->tickets) {
        return ST_ERR_UNSUPPORTED;
    }
    /* The hand-over below must not fail once the flag is out (the peers would finish with this
     * rank's contribution while it reports an error): the op and the check it takes are made
     * now if they are not kept from an earlier call, or the call takes the normal path. */
    if (!st_small_spares(comm, m)) {
        return ST_ERR_UNSUPPORTED;
    }
    sseq   = intra->small_seq++;
    ticket = intra->tickets++;
    own    = (uint64_t *)(void *)st_intra_small(intra, intra->local_rank, (int)(sseq & 1));
    /* A peer ahead of this rank polls this line already: ask for it now, and write it only once
     * the rest (the board's entry, the words) is ready, so that the wait for ownership overlaps
     * that work (perf record: 18 % of a call stalled on it when written first). */
    __builtin_prefetch(own, 1, 3);
    __atomic_add_fetch(&comm->active, 1, __ATOMIC_SEQ_CST);
    /* stage 0 of st_small_progress, one node: contribution, the check's words, the flag */
    checked = st_check_fast_post(args, words);
    st_reduce_pre(redop, (char *)own + ST_SMALL_FLAG_BYTES, args->sendbuff, args->count);
    own[1] = words[0];
    own[2] = words[1];
    st_intra_publish_at(intra, own, sseq + 1);
    t0   = st_ticks(); /* after the publish, and no clock read: off the critical path */
    wait = comm->intra_oversub ? st_core_config.spin_time : ST_SMALL_FAST_WAIT_S;
    for (unsigned spin = 0; !ready; spin++) {
        ready = 1;
        for (int lr = 0; lr < m; lr++) {
            const uint64_t *flag = (const uint64_t *)(const void *)
                st_intra_small(intra, lr, (int)(sseq & 1));

            ready &= __atomic_load_n(flag, __ATOMIC_ACQUIRE) >= sseq + 1;
        }
        if (ready) {
            break;
        }
        if (comm->intra_oversub) {
            if (st_ticks_seconds(st_ticks() - t0) > wait) {
                break;
            }
            sched_yield();
        } else {
            if ((spin & 15) == 15 && st_ticks_seconds(st_ticks() - t0) > wait) {
                break;
            }
            st_cpu_relax();
        }
    }
    if (ready) {
        for (int lr = 0; lr < m; lr++) {
            const uint64_t *w = (const uint64_t *)(const void *)
                st_intra_small(intra, lr, (int)(sseq & 1));

            same &= !checked || ((w[1] == own[1]) & (w[2] == own[2]));
            srcs[lr] = (const char *)w + ST_SMALL_FLAG_BYTES;
        }
    }
    if (ready && same) {
        strataPhaseTimes_t *t = &comm->times;
        double              now;

        st_intra_reduce(redop, args->recvbuff, srcs, m, args->count);
        if (st_redop_has_post(redop)) {
            st_reduce_post(redop, args->recvbuff, args->count);
        }
        intra->turn = ticket + 1;
        now = st_ticks_seconds(st_ticks() - t0);
        pthread_mutex_lock(&comm->lock);
        memset(t, 0, sizeof(*t));
        memcpy(t->algorithm, "small", sizeof("small"));
        t->totalSeconds = now;
        t->seconds[1]   = t->totalSeconds;
        t->bytes[1]     = bytes;
        comm->have_times = 1;
        pthread_mutex_unlock(&comm->lock);
        __atomic_sub_fetch(&comm->active, 1, __ATOMIC_SEQ_CST);
        st_comm_order_done(comm, args->seq);
        return ST_OK;
    }
    /* a rank is late, or the calls differ: the engine finishes it (and the board's check names
     * the calls), from the state written above */
    __atomic_sub_fetch(&comm->active, 1, __ATOMIC_SEQ_CST);
    status = st_small_make(args, sseq, ticket, 1, &op);
    if (status == ST_OK) {
        op->bytes = bytes;
        status    = st_check_attach(args, &op);
    }
    if (status == ST_OK && op->check != NULL) {
        st_check_set_posted(op->check);
    }
    if (status != ST_OK) {
        /* not expected: both come from the spares st_small_spares made sure of */
        st_error(ST_SUB_COLL, "%s #%llu on %s rank %d: cannot hand the small all-reduce to the "
                 "engine: %s", st_coll_name(args->type), (unsigned long long)args->seq,
                 comm->name, comm->rank, st_status_str(status));
        st_comm_set_error(comm, status);
        intra->turn = ticket + 1;
        st_comm_order_done(comm, args->seq);
        return status;
    }
    status = st_exec_run(&op, 1);
    st_comm_order_done(comm, args->seq);
    return status;
}
