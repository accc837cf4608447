/*
 * a2a.c - all-to-all (AlltoAll, AlltoAllv), gather and scatter: flat exchanges in which every
 * rank talks to its peers directly.
 *
 * The exchange list (st_a2a_list_t) is the engine: a list of steps, each at most one receive and
 * one send with a peer, run with up to `window` steps in flight, every transfer posted and tested
 * through coll/rail.h. A step's slot is refilled with the next step as soon as both of its
 * transfers completed, so the links stay busy while the slowest peer of the window is awaited.
 * A zero-byte side of a step is skipped by both ends (they compute the same sizes). Every
 * message of an op carries st_tag_coll(seq, kind << 20 | sender): one message per (kind, ordered
 * pair) in an op, so any transport's matching (per endpoint or not) pairs it right. The
 * hierarchical all-to-all (through the node's windows, one message per node pair and rail) is
 * coll/hier.c's: it shares the windows' pipeline with the other hierarchical collectives.
 *
 * Pairwise all-to-all (row "pairwise", STRATA_ALGO=ring): the own block is a local copy; step
 * s = 1..n-1 sends block (r+s)%n to rank (r+s)%n and receives block (r-s+n)%n from that rank,
 * so at every step each rank sends to one rank and receives from another, and every link carries
 * one block at a time. Large blocks go as one message each: the transports cut them themselves.
 *
 * AlltoAllv adds two small rounds through the same engine. The count exchange: every rank sends
 * each peer p (sendcounts[p], recvcounts[p]) and checks what p sent against its own pair. Then
 * the verdict: every rank sends every peer the first disagreeing pair it saw (or none) and all
 * ranks take the lowest (src, dst) one, so that a disagreement fails every rank with
 * strataInvalidUsage and the same message (the mismatch check's fingerprint carries no counts of
 * AlltoAllv, and a rank that moves no bytes with the disagreeing pair would otherwise succeed).
 * The data moves while the verdict travels, except on a rank that saw a disagreement: it moves
 * nothing and waits for the verdict, which ends its peers' waits for its data.
 *
 * Gather: root receives block p from each rank p (windowed); the root's own block is copied
 * first, with memmove, so a sendbuff anywhere in recvbuff is read before anything lands there.
 * Scatter: root sends block p to each rank p; its own block is copied last (memmove), after every
 * send read its block, so a recvbuff anywhere in sendbuff is right too. In place (strata.h) the
 * copy is skipped.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "coll/coll.h"

/* Steps in flight of a data exchange: enough to keep every link of a node busy while one peer is
 * late, few enough that a rank does not flood a slow peer with early blocks. */
#define ST_A2A_WINDOW       8
/* Steps in flight of AlltoAllv's small rounds (16 and 32 B messages). */
#define ST_A2A_SMALL_WINDOW 64

/* Sub-tag kinds (bits 20..22 of the sub-tag; ranks take the 20 bits below). */
enum { ST_A2A_KIND_DATA = 0, ST_A2A_KIND_COUNTS = 1, ST_A2A_KIND_VERDICT = 2 };

_Static_assert(ST_TAG_SUB_BITS >= 23, "3 bits of kind and 20 of rank in a sub-tag");

/* ------------------------------------------------------------------------------------------ */
/* The exchange list                                                                           */
/* ------------------------------------------------------------------------------------------ */

/* One step: a receive from recv_peer and a send to send_peer, either absent (peer -1 or length
 * 0). */
typedef struct st_a2a_step {
    int         recv_peer;
    void       *recv_buf;
    size_t      recv_len;
    int         send_peer;
    const void *send_buf;
    size_t      send_len;
} st_a2a_step_t;

typedef struct st_a2a_slot {
    int            active;
    int            i;      /* the step it runs */
    st_rail_xfer_t net[2]; /* [ST_RAIL_RECV], [ST_RAIL_SEND] */
} st_a2a_slot_t;

typedef struct st_a2a_list {
    const char    *phase;  /* for stall, timeout and failure messages */
    unsigned       kind;   /* ST_A2A_KIND_*: sub-tags */
    st_a2a_step_t *steps;  /* [nsteps] */
    int            nsteps;
    int            next;   /* the first step not posted */
    int            done;   /* steps completed */
    int            window;
    int            started;
    st_a2a_slot_t *slots;  /* [window] */
} st_a2a_list_t;

static uint64_t st_a2a_tag(const st_op_t *op, unsigned kind, int sender)
{
    return st_tag_coll(op->seq, ((uint64_t)kind << 20) | (uint64_t)sender);
}

/* Allocates a list of nsteps empty steps (peers -1) and its window of slots. */
static st_status_t st_a2a_list_init(st_a2a_list_t *l, const char *phase, unsigned kind,
                                    int nsteps, int window)
{
    l->phase  = phase;
    l->kind   = kind;
    l->nsteps = nsteps;
    l->window = ST_MAX(ST_MIN(window, nsteps), 1);
    l->steps  = calloc((size_t)ST_MAX(nsteps, 1), sizeof(*l->steps));
    l->slots  = calloc((size_t)l->window, sizeof(*l->slots));
    if (l->steps == NULL || l->slots == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int i = 0; i < nsteps; i++) {
        l->steps[i].recv_peer = l->steps[i].send_peer = -1;
    }
    return ST_OK;
}

static void st_a2a_list_fini(st_a2a_list_t *l)
{
    free(l->steps);
    free(l->slots);
    l->steps = NULL;
    l->slots = NULL;
}

/* Posts step i in slot s; a step with nothing to move completes at once. */
static st_status_t st_a2a_list_post(st_a2a_list_t *l, st_op_t *op, st_a2a_slot_t *s, int i)
{
    const st_a2a_step_t *st   = &l->steps[i];
    st_comm_t           *comm = op->comm;

    s->i = i;
    s->net[ST_RAIL_RECV].posted = s->net[ST_RAIL_SEND].posted = 0;
    if (st->recv_peer >= 0 && st->recv_len > 0) {
        ST_CHECK(st_rail_recv(comm, &s->net[ST_RAIL_RECV], st->recv_peer, st->recv_buf,
                              st->recv_len, st_a2a_tag(op, l->kind, st->recv_peer)));
    }
    if (st->send_peer >= 0 && st->send_len > 0) {
        ST_CHECK(st_rail_send(comm, &s->net[ST_RAIL_SEND], st->send_peer, st->send_buf,
                              st->send_len, st_a2a_tag(op, l->kind, comm->rank)));
    }
    s->active = 1;
    return ST_OK;
}

/* Advances the list as far as it goes without waiting: ST_OK when every step completed,
 * ST_INPROGRESS (op's phase, step and wait_peer name the oldest step in flight), or a failure
 * said by st_rail_fail. */
static st_status_t st_a2a_list_progress(st_a2a_list_t *l, st_op_t *op)
{
    st_a2a_slot_t *oldest;
    int            moved;

    do {
        moved = 0;
        for (int k = 0; k < l->window; k++) {
            st_a2a_slot_t *s = &l->slots[k];
            st_status_t    status;
            int            at;

            if (!s->active) {
                if (l->next == l->nsteps) {
                    continue;
                }
                ST_CHECK(st_a2a_list_post(l, op, s, l->next++));
                moved = 1;
            }
            status = st_rail_test_all(s->net, 2, &at);
            if (status == ST_INPROGRESS) {
                continue;
            }
            if (status != ST_OK) {
                return st_rail_fail(op, &s->net[at], status, "%s step %d/%d", l->phase, s->i + 1,
                                    l->nsteps);
            }
            s->active = 0;
            l->done++;
            moved = 1;
        }
        op->progressed |= moved;
    } while (moved && l->done < l->nsteps);
    if (l->done == l->nsteps) {
        return ST_OK;
    }
    oldest = NULL;
    for (int k = 0; k < l->window; k++) {
        if (l->slots[k].active && (oldest == NULL || l->slots[k].i < oldest->i)) {
            oldest = &l->slots[k];
        }
    }
    if (oldest != NULL) {
        op->phase     = l->phase;
        op->step      = oldest->i + 1;
        op->nsteps    = l->nsteps;
        op->wait_peer = st_rail_busy(&oldest->net[ST_RAIL_RECV]) ? oldest->net[ST_RAIL_RECV].peer
                                                                  : oldest->net[ST_RAIL_SEND].peer;
    }
    return ST_INPROGRESS;
}

/* Appends to reqs the list's requests still posted (reqs NULL: only counts them). */
static int st_a2a_list_reqs(st_a2a_list_t *l, st_request_t **reqs)
{
    int n = 0;

    for (int k = 0; l->slots != NULL && k < l->window; k++) {
        n += st_rail_reqs(l->slots[k].net, 2, reqs != NULL ? reqs + n : NULL);
    }
    return n;
}

/* ------------------------------------------------------------------------------------------ */
/* The operation                                                                               */
/* ------------------------------------------------------------------------------------------ */

/* AlltoAllv's count message to peer p: what this rank sends p and expects from p (elements). */
typedef struct st_a2a_counts {
    uint64_t send;
    uint64_t recv;
} st_a2a_counts_t;

/* AlltoAllv's verdict: the first disagreeing pair a rank saw, or bad 0. */
typedef struct st_a2a_verdict {
    int32_t  bad;
    int32_t  src;    /* sendcounts[dst] on rank src is scount */
    int32_t  dst;    /* recvcounts[src] on rank dst is rcount */
    int32_t  pad;
    uint64_t scount;
    uint64_t rcount;
} st_a2a_verdict_t;

typedef struct st_a2a {
    st_op_t           op;
    st_coll_args_t    args;     /* AlltoAllv: its arrays point into v */
    size_t            es;
    int               n, rank;
    int               data_started;
    int               data_done;
    int               root_copy_last; /* scatter on root: own block copied after the sends */
    st_a2a_list_t     data;
    /* AlltoAllv */
    size_t           *v;            /* the op's own copy of the four arrays [4n] */
    st_a2a_list_t     counts, verdict;
    int               counts_done, verdict_done;
    st_a2a_counts_t  *cnt_out, *cnt_in; /* [n] */
    st_a2a_verdict_t  mine;
    st_a2a_verdict_t *vin;          /* [n] */
} st_a2a_t;

static char *st_a2a_at(const void *buf, size_t elems, size_t es)
{
    return (char *)buf + elems * es;
}

/* The pairwise order: step s = 1..n-1 sends to (r+s)%n and receives from (r-s+n)%n. */
static int st_a2a_to(const st_a2a_t *a, int s)
{
    return (a->rank + s) % a->n;
}

static int st_a2a_from(const st_a2a_t *a, int s)
{
    return (a->rank - s + a->n) % a->n;
}

/* The data list of an all-to-all (AlltoAll, or AlltoAllv once its counts agreed). */
static st_status_t st_a2a_data_alltoall(st_a2a_t *a)
{
    const st_coll_args_t *g = &a->args;
    int                   v = (g->type == ST_COLL_ALLTOALLV);

    ST_CHECK(st_a2a_list_init(&a->data, "all-to-all exchange", ST_A2A_KIND_DATA, a->n - 1,
                              ST_A2A_WINDOW));
    for (int s = 1; s < a->n; s++) {
        st_a2a_step_t *st = &a->data.steps[s - 1];
        int            to = st_a2a_to(a, s), from = st_a2a_from(a, s);

        st->send_peer = to;
        st->send_buf  = st_a2a_at(g->sendbuff, v ? g->sdispls[to] : (size_t)to * g->count, a->es);
        st->send_len  = (v ? g->scounts[to] : g->count) * a->es;
        st->recv_peer = from;
        st->recv_buf  = st_a2a_at(g->recvbuff, v ? g->rdispls[from] : (size_t)from * g->count,
                                  a->es);
        st->recv_len  = (v ? g->rcounts[from] : g->count) * a->es;
    }
    return ST_OK;
}

/* The own block of an all-to-all: a local copy (the buffers do not overlap: api.c checked). */
static void st_a2a_own_block(const st_a2a_t *a)
{
    const st_coll_args_t *g = &a->args;
    int                   r = a->rank;

    if (g->type == ST_COLL_ALLTOALLV) {
        if (g->rcounts[r] > 0) {
            memcpy(st_a2a_at(g->recvbuff, g->rdispls[r], a->es),
                   st_a2a_at(g->sendbuff, g->sdispls[r], a->es), g->rcounts[r] * a->es);
        }
    } else if (g->count > 0) {
        memcpy(st_a2a_at(g->recvbuff, (size_t)r * g->count, a->es),
               st_a2a_at(g->sendbuff, (size_t)r * g->count, a->es), g->count * a->es);
    }
}

/* Gather and scatter: the root's own block, unless in place. memmove: the buffers may overlap
 * (the order of the copy makes that right; see the top comment). */
static void st_a2a_root_block(const st_a2a_t *a)
{
    const st_coll_args_t *g = &a->args;
    size_t                blk = g->count * a->es;
    char                 *own;

    if (g->type == ST_COLL_GATHER) {
        own = st_a2a_at(g->recvbuff, (size_t)g->root * g->count, a->es);
        if (own != (const char *)g->sendbuff) {
            memmove(own, g->sendbuff, blk);
        }
    } else {
        own = st_a2a_at(g->sendbuff, (size_t)g->root * g->count, a->es);
        if (own != (const char *)g->recvbuff) {
            memmove(g->recvbuff, own, blk);
        }
    }
}

/* The data list of a gather or scatter: the root has a step per other rank, the others one. */
static st_status_t st_a2a_data_rooted(st_a2a_t *a)
{
    const st_coll_args_t *g = &a->args;
    int                   gather = (g->type == ST_COLL_GATHER), root = g->root;
    size_t                blk = g->count * a->es;

    if (a->rank != root) {
        st_a2a_step_t *st;

        ST_CHECK(st_a2a_list_init(&a->data, gather ? "gather" : "scatter", ST_A2A_KIND_DATA, 1,
                                  1));
        st = &a->data.steps[0];
        if (gather) {
            st->send_peer = root;
            st->send_buf  = g->sendbuff;
            st->send_len  = blk;
        } else {
            st->recv_peer = root;
            st->recv_buf  = g->recvbuff;
            st->recv_len  = blk;
        }
        return ST_OK;
    }
    ST_CHECK(st_a2a_list_init(&a->data, gather ? "gather" : "scatter", ST_A2A_KIND_DATA, a->n - 1,
                              ST_A2A_WINDOW));
    for (int s = 1; s < a->n; s++) {
        st_a2a_step_t *st = &a->data.steps[s - 1];
        int            p  = st_a2a_to(a, s); /* the rank after the root first, as a ring */

        if (gather) {
            st->recv_peer = p;
            st->recv_buf  = st_a2a_at(g->recvbuff, (size_t)p * g->count, a->es);
            st->recv_len  = blk;
        } else {
            st->send_peer = p;
            st->send_buf  = st_a2a_at(g->sendbuff, (size_t)p * g->count, a->es);
            st->send_len  = blk;
        }
    }
    return ST_OK;
}

/* AlltoAllv: checks what each peer said against this rank's counts (and its own pair); fills
 * a->mine with the first disagreement (the lowest (src, dst)), if any. */
static void st_a2a_counts_check(st_a2a_t *a)
{
    const st_coll_args_t *g = &a->args;
    int                   r = a->rank;

    memset(&a->mine, 0, sizeof(a->mine));
    for (int p = 0; p < a->n; p++) {
        /* pair (p -> r): p sends cnt_in[p].send, r expects rcounts[p];
         * pair (r -> p): r sends scounts[p], p expects cnt_in[p].recv */
        uint64_t p_sends  = (p == r) ? g->scounts[r] : a->cnt_in[p].send;
        uint64_t p_expect = (p == r) ? g->rcounts[r] : a->cnt_in[p].recv;
        st_a2a_verdict_t cand[2] = {
            {.bad = p_sends != g->rcounts[p], .src = p, .dst = r, .scount = p_sends,
             .rcount = g->rcounts[p]},
            {.bad = g->scounts[p] != p_expect, .src = r, .dst = p, .scount = g->scounts[p],
             .rcount = p_expect},
        };

        for (int k = 0; k < 2; k++) {
            if (cand[k].bad && (!a->mine.bad || cand[k].src < a->mine.src ||
                                (cand[k].src == a->mine.src && cand[k].dst < a->mine.dst))) {
                a->mine = cand[k];
            }
        }
    }
}

static st_status_t st_a2a_verdict_check(st_a2a_t *a)
{
    st_a2a_verdict_t worst = a->mine;

    for (int p = 0; p < a->n; p++) {
        const st_a2a_verdict_t *in = &a->vin[p];

        if (p != a->rank && in->bad &&
            (!worst.bad || in->src < worst.src || (in->src == worst.src && in->dst < worst.dst))) {
            worst = *in;
        }
    }
    if (!worst.bad) {
        return ST_OK;
    }
    st_error(ST_SUB_COLL, "AlltoAllv #%llu (%s) rank %d: sendcounts[%d] on rank %d is %llu but "
             "recvcounts[%d] on rank %d is %llu: the counts of every pair of ranks must agree",
             (unsigned long long)a->args.seq, a->op.comm->name, a->rank, worst.dst, worst.src,
             (unsigned long long)worst.scount, worst.src, worst.dst,
             (unsigned long long)worst.rcount);
    return ST_ERR_USAGE;
}

/* AlltoAllv: once the counts arrived, checks them and starts the verdict and (when this rank saw
 * no disagreement) the data. */
static st_status_t st_a2a_counts_arrived(st_a2a_t *a)
{
    a->counts_done = 1;
    st_a2a_counts_check(a);
    ST_CHECK(st_a2a_list_init(&a->verdict, "AlltoAllv count agreement", ST_A2A_KIND_VERDICT,
                              a->n - 1, ST_A2A_SMALL_WINDOW));
    for (int s = 1; s < a->n; s++) {
        st_a2a_step_t *st = &a->verdict.steps[s - 1];

        st->send_peer = st_a2a_to(a, s);
        st->send_buf  = &a->mine;
        st->send_len  = sizeof(a->mine);
        st->recv_peer = st_a2a_from(a, s);
        st->recv_buf  = &a->vin[st->recv_peer];
        st->recv_len  = sizeof(a->vin[0]);
    }
    if (!a->mine.bad) {
        st_a2a_own_block(a);
        ST_CHECK(st_a2a_data_alltoall(a));
        a->data_started = 1;
    }
    return ST_OK;
}

static st_status_t st_a2a_progress(st_op_t *op)
{
    st_a2a_t   *a = (st_a2a_t *)op;
    st_status_t status;

    if (a->args.type == ST_COLL_ALLTOALLV) {
        if (!a->counts_done) {
            status = st_a2a_list_progress(&a->counts, op);
            if (status != ST_OK) {
                return status;
            }
            ST_CHECK(st_a2a_counts_arrived(a));
        }
        if (!a->verdict_done) {
            status = st_a2a_list_progress(&a->verdict, op);
            if (status < 0) {
                return status;
            }
            if (status == ST_OK) {
                a->verdict_done = 1;
                ST_CHECK(st_a2a_verdict_check(a));
            }
        }
    }
    if (a->data_started && !a->data_done) {
        status = st_a2a_list_progress(&a->data, op);
        if (status < 0) {
            return status;
        }
        if (status == ST_OK) {
            a->data_done = 1;
            if (a->root_copy_last) {
                st_a2a_root_block(a); /* every send has read its block */
            }
        }
    }
    if (a->args.type == ST_COLL_ALLTOALLV && !a->verdict_done) {
        return ST_INPROGRESS; /* op's phase names what is awaited (the lists set it) */
    }
    return a->data_done ? ST_OK : ST_INPROGRESS;
}

static void st_a2a_free(void *arg)
{
    st_a2a_t *a = arg;

    st_a2a_list_fini(&a->data);
    st_a2a_list_fini(&a->counts);
    st_a2a_list_fini(&a->verdict);
    free(a->v);
    free(a->cnt_out);
    free(a->cnt_in);
    free(a->vin);
    free(a);
}

static void st_a2a_destroy(st_op_t *op)
{
    st_a2a_t      *a = (st_a2a_t *)op;
    st_request_t **reqs;
    int            n;

    n = st_a2a_list_reqs(&a->data, NULL) + st_a2a_list_reqs(&a->counts, NULL) +
        st_a2a_list_reqs(&a->verdict, NULL);
    if (n == 0) {
        st_a2a_free(a);
        return;
    }
    reqs = malloc((size_t)n * sizeof(*reqs));
    if (reqs == NULL) {
        st_comm_defer(op->comm, st_a2a_free, a); /* cannot even list them: keep the memory */
        return;
    }
    n = st_a2a_list_reqs(&a->data, reqs);
    n += st_a2a_list_reqs(&a->counts, reqs + n);
    n += st_a2a_list_reqs(&a->verdict, reqs + n);
    if (!st_exec_cancel(op, reqs, n, 2.0)) {
        st_comm_defer(op->comm, st_a2a_free, a); /* the transport still owns the buffers */
    } else {
        st_a2a_free(a);
    }
    free(reqs);
}

/* AlltoAllv: the op's own copy of the arrays, and the count exchange's list. */
static st_status_t st_a2a_v_init(st_a2a_t *a)
{
    size_t n = (size_t)a->n;

    a->v       = malloc(4 * n * sizeof(*a->v));
    a->cnt_out = calloc(n, sizeof(*a->cnt_out));
    a->cnt_in  = calloc(n, sizeof(*a->cnt_in));
    a->vin     = calloc(n, sizeof(*a->vin));
    if (a->v == NULL || a->cnt_out == NULL || a->cnt_in == NULL || a->vin == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memcpy(a->v, a->args.scounts, n * sizeof(*a->v));
    memcpy(a->v + n, a->args.sdispls, n * sizeof(*a->v));
    memcpy(a->v + 2 * n, a->args.rcounts, n * sizeof(*a->v));
    memcpy(a->v + 3 * n, a->args.rdispls, n * sizeof(*a->v));
    a->args.scounts = a->v;
    a->args.sdispls = a->v + n;
    a->args.rcounts = a->v + 2 * n;
    a->args.rdispls = a->v + 3 * n;
    a->args.v_owned = NULL; /* the caller's copy stays the caller's */
    for (int p = 0; p < a->n; p++) {
        a->cnt_out[p].send = a->args.scounts[p];
        a->cnt_out[p].recv = a->args.rcounts[p];
    }
    ST_CHECK(st_a2a_list_init(&a->counts, "AlltoAllv count exchange", ST_A2A_KIND_COUNTS,
                              a->n - 1, ST_A2A_SMALL_WINDOW));
    for (int s = 1; s < a->n; s++) {
        st_a2a_step_t *st = &a->counts.steps[s - 1];

        st->send_peer = st_a2a_to(a, s);
        st->send_buf  = &a->cnt_out[st->send_peer];
        st->send_len  = sizeof(a->cnt_out[0]);
        st->recv_peer = st_a2a_from(a, s);
        st->recv_buf  = &a->cnt_in[st->recv_peer];
        st->recv_len  = sizeof(a->cnt_in[0]);
    }
    return ST_OK;
}

/* One rank: AlltoAllv's own pair must agree; the copy is the whole call. */
static st_status_t st_a2a_single(const st_coll_args_t *args)
{
    size_t es = st_dtype_size(args->dtype);

    switch (args->type) {
    case ST_COLL_ALLTOALLV:
        if (args->scounts[0] != args->rcounts[0]) {
            st_error(ST_SUB_COLL, "AlltoAllv #%llu (%s) rank 0: sendcounts[0] on rank 0 is %zu "
                     "but recvcounts[0] on rank 0 is %zu: the counts of every pair of ranks must "
                     "agree", (unsigned long long)args->seq, args->comm->name, args->scounts[0],
                     args->rcounts[0]);
            return ST_ERR_USAGE;
        }
        if (args->rcounts[0] > 0) {
            memcpy(st_a2a_at(args->recvbuff, args->rdispls[0], es),
                   st_a2a_at(args->sendbuff, args->sdispls[0], es), args->rcounts[0] * es);
        }
        return ST_OK;
    case ST_COLL_ALLTOALL:
        memcpy(args->recvbuff, args->sendbuff, args->count * es);
        return ST_OK;
    case ST_COLL_GATHER:
        memmove(args->recvbuff, args->sendbuff, args->count * es);
        return ST_OK;
    default: /* ST_COLL_SCATTER */
        memmove(args->recvbuff, args->sendbuff, args->count * es);
        return ST_OK;
    }
}

st_status_t st_a2a_create(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    st_a2a_t   *a;
    st_status_t status;

    *op_p = NULL;
    if (comm->nranks == 1) {
        return (args->type == ST_COLL_ALLTOALLV || args->count > 0) ? st_a2a_single(args) : ST_OK;
    }
    if (args->type != ST_COLL_ALLTOALLV && args->count == 0) {
        return ST_OK; /* nothing moves; the mismatch check still runs (st_check_attach) */
    }
    a = calloc(1, sizeof(*a));
    if (a == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    a->args         = *args;
    a->es           = st_dtype_size(args->dtype);
    a->n            = comm->nranks;
    a->rank         = comm->rank;
    a->op.comm      = comm;
    a->op.coll      = st_coll_name(args->type);
    a->op.seq       = args->seq;
    a->op.wait_peer = -1;
    a->op.step      = 1;
    a->op.progress  = st_a2a_progress;
    a->op.destroy   = st_a2a_destroy;
    switch (args->type) {
    case ST_COLL_ALLTOALLV:
        status = st_a2a_v_init(a); /* the data list comes once the counts agree */
        a->op.phase  = "AlltoAllv count exchange";
        a->op.nsteps = a->n - 1;
        break;
    case ST_COLL_ALLTOALL:
        st_a2a_own_block(a);
        status = st_a2a_data_alltoall(a);
        a->data_started = 1;
        break;
    default: /* gather, scatter */
        if (a->rank == args->root && args->type == ST_COLL_GATHER) {
            st_a2a_root_block(a); /* before anything lands in recvbuff */
        }
        a->root_copy_last = (a->rank == args->root && args->type == ST_COLL_SCATTER);
        status = st_a2a_data_rooted(a);
        a->data_started = 1;
        break;
    }
    if (status != ST_OK) {
        st_error(ST_SUB_COLL, "%s #%llu (%s) rank %d: no memory for the exchange of %d ranks",
                 a->op.coll, (unsigned long long)args->seq, comm->name, comm->rank, a->n);
        st_a2a_free(a);
        return status;
    }
    if (a->data_started) {
        a->op.phase  = a->data.phase;
        a->op.nsteps = a->data.nsteps;
    }
    *op_p = &a->op;
    return ST_OK;
}
