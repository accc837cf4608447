/*
 * stream.c - host streams and device queues.
 *
 * A host stream (strataStreamCreate) is strata's stand-in for a CUDA stream on host memory: an
 * in-order queue of work items (one call, or one group's calls for this stream) executed by the
 * stream's own thread through the same engine as blocking calls, so the caller's thread is free to
 * compute meanwhile. The thread sleeps on a condition variable while the queue is empty.
 *
 * A device queue is the same queue, one per communicator, for its calls on device buffers; it
 * orders them on the user's CUDA streams as NCCL does. At the call, the caller's
 * thread records an event on the user's stream (the point where the inputs are ready) and
 * enqueues behind it a wait on a gate word (dev.h wait_value: the stream stops there), then
 * queues the item and returns. The queue's thread waits for the event (sleeping), runs the
 * collective, and opens the gate (write_value), so later work on the user's stream sees the
 * result. An item that fails, or is not run because the communicator failed or was aborted, opens
 * its gate too: no user stream is left blocked. A gate word only grows (one value per item, in
 * queue order), and the words live in one pinned page for the life of the process, because a user
 * stream may reach its wait after the communicator is gone.
 * A call the hierarchical algorithm takes runs on the GPU over the node's device windows
 * (coll/hier.c, coll/intra.h); any other (the flat ring, chain, small, send/recv, groups of
 * several calls; all-to-all, all-to-all-v, gather and scatter) runs on pinned host copies of its
 * buffers: one copy in, the host algorithm, one copy out (an all-to-all-v's: one per received
 * block), on the queue's own device stream (st_devq_stage).
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/sys.h"
#include "core/enqueue.h"
#include "device/dev.h"
#include "engine/comm.h"

#define ST_STREAM_MAGIC 0x57a75eaau

typedef struct st_stream_item {
    struct st_stream_item *next;
    st_dev_event_t       **evs;      /* device item: where each of its user streams has its
                                      * inputs (one per stream of the unit) */
    int                    nevs;
    uint64_t               gate_val; /* device item: the gate value that releases its streams */
    int                    nargs;
    st_coll_args_t         args[];
} st_stream_item_t;

/* A device queue's own state (NULL in a host stream). */
typedef struct st_devq {
    st_comm_t          *comm;
    const st_dev_ops_t *dev;
    int                 slot;     /* its gate word: st_devq_gates[slot] */
    uint64_t            gate_val; /* the last value handed out (under the stream's lock) */
    st_dev_stream_t    *copy_stream; /* the queue thread's own stream for the staging copies */
    char               *stage;    /* pinned host memory the collective runs on */
    size_t              stage_bytes;
} st_devq_t;

struct st_stream {
    unsigned          magic;
    pthread_t         thread;
    pthread_mutex_t   lock;
    pthread_cond_t    cond;      /* signalled when work arrives, completes, or stop is set */
    st_stream_item_t *head, *tail;
    int               pending;   /* items queued or running */
    int               stop;
    st_status_t       error;     /* first error since the last synchronize */
    char              errmsg[512];
    st_devq_t        *dq;        /* a device queue's state; NULL for a host stream */
};

static pthread_mutex_t  st_stream_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static struct st_stream *st_stream_registry[256];

int st_stream_is_live(strataStream_t stream)
{
    int live = 0;

    pthread_mutex_lock(&st_stream_registry_lock);
    for (size_t i = 0; i < ST_ARRAY_SIZE(st_stream_registry) && !live; i++) {
        live = ((void *)st_stream_registry[i] == (void *)stream);
    }
    pthread_mutex_unlock(&st_stream_registry_lock);
    return live;
}

static int st_stream_register(struct st_stream *s, int add)
{
    int ok = 0;

    pthread_mutex_lock(&st_stream_registry_lock);
    for (size_t i = 0; i < ST_ARRAY_SIZE(st_stream_registry) && !ok; i++) {
        if (st_stream_registry[i] == (add ? NULL : s)) {
            st_stream_registry[i] = add ? s : NULL;
            ok = 1;
        }
    }
    pthread_mutex_unlock(&st_stream_registry_lock);
    return ok;
}

/* Runs one queued item, unless a communicator of it failed or was aborted after the item was
 * queued: its collective could then only wait out the deadline (its peers have given up), and
 * every later item as long again, so a synchronize after a failure would take the deadline times
 * the queue's length. Such items fail at once, saying why. */
/* Calls that will never run: their collectives count as finished, so that the communicators'
 * later collectives do not wait for them (issue order, st_comm_order_*; idempotent). */
static void st_stream_not_run(const st_coll_args_t *args, int nargs)
{
    for (int i = 0; i < nargs; i++) {
        if (!st_coll_info(args[i].type)->p2p) {
            st_comm_order_done(args[i].comm, args[i].seq);
        }
    }
}

static st_status_t st_stream_runnable(st_stream_item_t *item)
{
    for (int i = 0; i < item->nargs; i++) {
        const st_coll_args_t *args = &item->args[i];
        st_comm_t            *comm = args->comm;
        int                   state = comm->state;

        if (state == ST_COMM_FAILED || state == ST_COMM_ABORTED) {
            /* said once per communicator: a deep queue would bury the cause under its lines */
            char msg[256];

            snprintf(msg, sizeof(msg), "%s #%llu on %s rank %d not run: the communicator %s "
                     "earlier (%s)", st_coll_name(args->type), (unsigned long long)args->seq,
                     comm->name, comm->rank, state == ST_COMM_ABORTED ? "was aborted" : "failed",
                     strataGetErrorString((strataResult_t)comm->async_error));
            if (__atomic_exchange_n(&comm->not_run_said, 1, __ATOMIC_RELAXED) == 0) {
                st_error(ST_SUB_COLL, "%s; the calls queued after it are not run either (said "
                         "once)", msg);
            } else {
                st_log_clear_error();
                st_log_append_error("%s", msg);
                st_debug(ST_SUB_COLL, "%s", msg);
            }
            st_stream_not_run(item->args, item->nargs);
            return ST_ERR_USAGE;
        }
    }
    return ST_OK;
}

static st_status_t st_devq_run(st_devq_t *dq, st_stream_item_t *item);
static void        st_devq_thread_fini(st_devq_t *dq);

/* Frees an item and the arrays its calls own (st_coll_args_keep). */
static void st_stream_item_free(st_stream_item_t *item)
{
    for (int i = 0; i < item->nargs; i++) {
        st_coll_args_drop(&item->args[i]);
    }
    free(item);
}

static st_status_t st_stream_run(struct st_stream *s, st_stream_item_t *item)
{
    st_status_t status;

    if (s->dq != NULL) {
        return st_devq_run(s->dq, item);
    }
    status = st_stream_runnable(item);
    return (status == ST_OK) ? st_coll_run(item->args, item->nargs) : status;
}

static void *st_stream_main(void *arg)
{
    struct st_stream *s = arg;

    pthread_mutex_lock(&s->lock);
    for (;;) {
        st_stream_item_t *item;
        st_status_t       status;

        while (s->head == NULL && !s->stop) {
            pthread_cond_wait(&s->cond, &s->lock);
        }
        if (s->head == NULL) {
            break; /* stop, and nothing left */
        }
        item = s->head;
        pthread_mutex_unlock(&s->lock);

        status = st_stream_run(s, item);
        for (int i = 0; i < item->nargs; i++) {
            __atomic_sub_fetch(&item->args[i].comm->queued, 1, __ATOMIC_SEQ_CST);
        }

        pthread_mutex_lock(&s->lock);
        if (status != ST_OK && s->error == ST_OK) {
            s->error = status;
            snprintf(s->errmsg, sizeof(s->errmsg), "%s", st_log_last_error());
        }
        s->head = item->next;
        if (s->head == NULL) {
            s->tail = NULL;
        }
        s->pending--;
        st_stream_item_free(item);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    if (s->dq != NULL) {
        st_devq_thread_fini(s->dq); /* its device stream belongs to this thread's context */
    }
    return NULL;
}

/* A work item holding a copy of args[0..nargs) (an all-to-all-v's arrays too); NULL (logged) when
 * out of memory. */
static st_stream_item_t *st_stream_item_new(const st_coll_args_t *args, int nargs)
{
    st_stream_item_t *item = calloc(1, sizeof(*item) + (size_t)nargs * sizeof(item->args[0]));

    if (item == NULL) {
        st_error(ST_SUB_COLL, "out of memory queueing %d calls", nargs);
        return NULL;
    }
    item->nargs = nargs;
    memcpy(item->args, args, (size_t)nargs * sizeof(*args));
    for (int i = 0; i < nargs; i++) {
        item->args[i].v_owned = NULL; /* the caller's copy stays the caller's */
        item->args[i].cz_held = 0;
        if (st_coll_args_keep(&item->args[i]) != ST_OK) {
            st_error(ST_SUB_COLL, "out of memory queueing %d calls", nargs);
            st_stream_item_free(item);
            return NULL;
        }
    }
    return item;
}

/* Appends item to s's queue. Caller holds s->lock. */
static void st_stream_append(struct st_stream *s, st_stream_item_t *item)
{
    for (int i = 0; i < item->nargs; i++) {
        __atomic_add_fetch(&item->args[i].comm->queued, 1, __ATOMIC_SEQ_CST);
    }
    if (s->tail != NULL) {
        s->tail->next = item;
    } else {
        s->head = item;
    }
    s->tail = item;
    s->pending++;
    pthread_cond_broadcast(&s->cond);
}

st_status_t st_stream_push(strataStream_t stream, const st_coll_args_t *args, int nargs)
{
    struct st_stream *s    = (struct st_stream *)stream;
    st_stream_item_t *item = st_stream_item_new(args, nargs);

    if (item == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    pthread_mutex_lock(&s->lock);
    st_stream_append(s, item);
    pthread_mutex_unlock(&s->lock);
    return ST_OK;
}

/* A stream with its thread started (not registered); NULL (logged) when it cannot start. */
static struct st_stream *st_stream_new(st_devq_t *dq, const char *fn)
{
    struct st_stream *s = calloc(1, sizeof(*s));
    int               ret;

    if (s == NULL) {
        st_error(ST_SUB_COLL, "%s: out of memory", fn);
        return NULL;
    }
    s->magic = ST_STREAM_MAGIC;
    s->dq    = dq;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    ret = pthread_create(&s->thread, NULL, st_stream_main, s);
    if (ret != 0) {
        st_error(ST_SUB_COLL, "%s: pthread_create failed: %s", fn, strerror(ret));
        pthread_cond_destroy(&s->cond);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return NULL;
    }
    return s;
}

/* Stops s once its queue is empty, joins its thread and frees it. */
static void st_stream_stop(struct st_stream *s)
{
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    s->magic = 0;
    free(s->dq);
    free(s);
}

strataResult_t strataStreamCreate(strataStream_t *stream)
{
    struct st_stream *s;

    if (stream == NULL) {
        st_error(ST_SUB_COLL, "strataStreamCreate: stream is NULL");
        return strataInvalidArgument;
    }
    s = st_stream_new(NULL, "strataStreamCreate");
    if (s == NULL) {
        return strataSystemError;
    }
    if (!st_stream_register(s, 1)) {
        st_error(ST_SUB_COLL, "strataStreamCreate: more than %zu live streams",
                 ST_ARRAY_SIZE(st_stream_registry));
        st_stream_stop(s);
        return strataSystemError;
    }
    *stream = (strataStream_t)s; /* strata.h: a host stream travels as a strataStream_t */
    return strataSuccess;
}

/* Takes and clears the stream's error; puts its message into the caller's last error. */
static strataResult_t st_stream_take_error(struct st_stream *s)
{
    st_status_t status = s->error;

    if (status == ST_OK) {
        return strataSuccess;
    }
    s->error = ST_OK;
    st_error(ST_SUB_COLL, "%s", s->errmsg);
    return st_status_to_result(status);
}

static int st_stream_check(strataStream_t stream, const char *fn)
{
    if (stream == NULL || !st_stream_is_live(stream)) {
        st_error(ST_SUB_COLL, "%s: stream %p is NULL or destroyed", fn, (void *)stream);
        return 0;
    }
    return 1;
}

strataResult_t strataStreamSynchronize(strataStream_t stream)
{
    struct st_stream *s = (struct st_stream *)stream;
    strataResult_t    result;

    if (!st_stream_check(stream, "strataStreamSynchronize")) {
        return strataInvalidArgument;
    }
    pthread_mutex_lock(&s->lock);
    while (s->pending > 0) {
        pthread_cond_wait(&s->cond, &s->lock);
    }
    result = st_stream_take_error(s);
    pthread_mutex_unlock(&s->lock);
    return result;
}

strataResult_t strataStreamQuery(strataStream_t stream)
{
    struct st_stream *s = (struct st_stream *)stream;
    strataResult_t    result;

    if (!st_stream_check(stream, "strataStreamQuery")) {
        return strataInvalidArgument;
    }
    pthread_mutex_lock(&s->lock);
    result = (s->pending > 0) ? strataInProgress : st_stream_take_error(s);
    pthread_mutex_unlock(&s->lock);
    return result;
}

strataResult_t strataStreamDestroy(strataStream_t stream)
{
    struct st_stream *s = (struct st_stream *)stream;

    if (!st_stream_check(stream, "strataStreamDestroy") || !st_stream_register(s, 0)) {
        return strataInvalidArgument;
    }
    st_stream_stop(s);
    return strataSuccess;
}

/* ---------------------------------------------------------------------------------------- */
/* Device queues                                                                            */
/* ---------------------------------------------------------------------------------------- */

/* The gate words: one pinned page for the process, never freed (a user stream may reach its wait
 * after the communicator is gone); a queue takes a free slot and continues from the value left
 * in it, so every wait ever enqueued on a slot stays satisfied. */
#define ST_DEVQ_GATES 512
static pthread_mutex_t st_devq_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t       *st_devq_gates;
static uint8_t         st_devq_gate_used[ST_DEVQ_GATES];

static st_status_t st_devq_gate_take(const st_dev_ops_t *dev, int *slot_p)
{
    st_status_t status = ST_OK;

    if (st_devq_gates == NULL) {
        void *page = NULL;

        status = dev->host_alloc(ST_DEVQ_GATES * sizeof(uint64_t), &page);
        if (status != ST_OK) {
            return status;
        }
        st_devq_gates = page;
    }
    for (int i = 0; i < ST_DEVQ_GATES; i++) {
        if (!st_devq_gate_used[i]) {
            st_devq_gate_used[i] = 1;
            *slot_p              = i;
            return ST_OK;
        }
    }
    st_error(ST_SUB_COLL, "more than %d communicators with calls on device buffers at once",
             ST_DEVQ_GATES);
    return ST_ERR_NO_MEMORY;
}

/* comm's device queue, made at its first call on device buffers. */
static struct st_stream *st_devq_get(st_comm_t *comm, const st_dev_ops_t *dev,
                                     st_status_t *status_p)
{
    struct st_stream *s;
    st_devq_t        *dq;

    pthread_mutex_lock(&st_devq_lock);
    s = comm->devq;
    if (s != NULL) {
        pthread_mutex_unlock(&st_devq_lock);
        return s;
    }
    dq = calloc(1, sizeof(*dq));
    if (dq == NULL) {
        *status_p = ST_ERR_NO_MEMORY;
        goto out;
    }
    dq->comm = comm;
    dq->dev  = dev;
    *status_p = st_devq_gate_take(dev, &dq->slot);
    if (*status_p != ST_OK) {
        free(dq);
        goto out;
    }
    dq->gate_val = __atomic_load_n(&st_devq_gates[dq->slot], __ATOMIC_ACQUIRE);
    s = st_stream_new(dq, "device queue");
    if (s == NULL) {
        st_devq_gate_used[dq->slot] = 0;
        free(dq);
        *status_p = ST_ERR_NO_MEMORY;
        goto out;
    }
    comm->devq = s;
out:
    pthread_mutex_unlock(&st_devq_lock);
    return s;
}

st_status_t st_devq_push(const strataStream_t *users, int nusers, const st_coll_args_t *args,
                         int nargs)
{
    st_comm_t          *comm   = args[0].comm;
    const st_dev_ops_t *dev    = st_dev();
    st_status_t         status = ST_ERR_NO_DEVICE;
    struct st_stream   *s;
    st_stream_item_t   *item;
    int                 recorded = 0;

    if (dev == NULL) {
        st_error(ST_SUB_COLL, "%s rank %d: a call on device buffers with no device layer",
                 comm->name, comm->rank);
        return status;
    }
    s = st_devq_get(comm, dev, &status);
    if (s == NULL) {
        return status;
    }
    status = ST_OK;
    item   = st_stream_item_new(args, nargs);
    if (item == NULL || (item->evs = calloc((size_t)nusers, sizeof(*item->evs))) == NULL) {
        if (item != NULL) {
            st_stream_item_free(item);
        }
        return ST_ERR_NO_MEMORY;
    }
    item->nevs = nusers;
    for (int i = 0; i < nusers && status == ST_OK; i++) {
        status = dev->event_create(&item->evs[i]);
    }
    /* under the queue's lock: gate values follow the queue's order, whichever threads call;
     * every stream of the unit (a group's calls may name several) gets its event and its wait,
     * so the unit runs once all of them reached it, and all wait for its end */
    pthread_mutex_lock(&s->lock);
    item->gate_val = s->dq->gate_val + 1;
    for (int i = 0; i < nusers && status == ST_OK; i++) {
        st_dev_stream_t *us = (st_dev_stream_t *)users[i]; /* NULL: the legacy default stream */

        status = dev->event_record(item->evs[i], us);
        if (status == ST_OK) {
            status = dev->wait_value(us, &st_devq_gates[s->dq->slot], item->gate_val);
        }
        recorded += (status == ST_OK);
    }
    if (status == ST_OK) {
        s->dq->gate_val = item->gate_val;
        st_stream_append(s, item);
    } else if (recorded > 0) {
        /* streams already gated must not wait for a unit that never runs: take the value and
         * open it at once (no call of the unit runs: the caller fails them) */
        s->dq->gate_val = item->gate_val;
        dev->write_value(&st_devq_gates[s->dq->slot], item->gate_val);
    }
    pthread_mutex_unlock(&s->lock);
    if (status != ST_OK) {
        for (int i = 0; i < nusers; i++) {
            if (item->evs[i] != NULL) {
                dev->event_destroy(item->evs[i]);
            }
        }
        free(item->evs);
        st_stream_item_free(item);
    }
    return status;
}

/* What one call reads (send) and writes (recv) of its buffers, in bytes; 0 where it touches
 * nothing (a broadcast's send buffer off the root, a reduce's receive buffer). */
typedef struct st_devq_span {
    size_t send_len, recv_len;
    size_t send_off, recv_off; /* in the staging area */
} st_devq_span_t;

static void st_devq_lens(const st_coll_args_t *a, st_devq_span_t *sp)
{
    size_t n    = a->count * st_dtype_size(a->dtype);
    size_t all  = n * (size_t)a->comm->nranks;
    int    root = (a->comm->rank == a->root);

    memset(sp, 0, sizeof(*sp));
    switch (a->type) {
    case ST_COLL_ALLREDUCE: sp->send_len = n; sp->recv_len = n; break;
    case ST_COLL_BROADCAST: sp->send_len = root ? n : 0; sp->recv_len = n; break;
    case ST_COLL_REDUCE: sp->send_len = n; sp->recv_len = root ? n : 0; break;
    case ST_COLL_ALLGATHER: sp->send_len = n; sp->recv_len = all; break;
    case ST_COLL_REDUCESCATTER: sp->send_len = all; sp->recv_len = n; break;
    case ST_COLL_SEND: sp->send_len = n; break;
    case ST_COLL_RECV: sp->recv_len = n; break;
    case ST_COLL_ALLTOALL: sp->send_len = all; sp->recv_len = all; break;
    case ST_COLL_GATHER: sp->send_len = n; sp->recv_len = root ? all : 0; break;
    case ST_COLL_SCATTER: sp->send_len = root ? all : 0; sp->recv_len = n; break;
    case ST_COLL_ALLTOALLV:
        /* the spans from each buffer's start to its furthest block (api.c bounded them) */
        for (int p = 0; p < a->comm->nranks; p++) {
            size_t es = st_dtype_size(a->dtype);

            if (a->scounts[p] > 0) {
                sp->send_len = ST_MAX(sp->send_len, (a->sdispls[p] + a->scounts[p]) * es);
            }
            if (a->rcounts[p] > 0) {
                sp->recv_len = ST_MAX(sp->recv_len, (a->rdispls[p] + a->rcounts[p]) * es);
            }
        }
        break;
    default: break;
    }
}

/* Copies call a's results from the staging area out to its device receive buffer: the whole
 * span, or for an all-to-all-v each received block alone (the gaps between them are the
 * caller's and were never staged in). */
static st_status_t st_devq_copy_out(st_devq_t *dq, const st_coll_args_t *a,
                                    const st_devq_span_t *sp)
{
    size_t es = st_dtype_size(a->dtype);

    if (a->type != ST_COLL_ALLTOALLV) {
        return dq->dev->copy(a->recvbuff, dq->stage + sp->recv_off, sp->recv_len,
                             dq->copy_stream);
    }
    for (int p = 0; p < a->comm->nranks; p++) {
        size_t off = a->rdispls[p] * es;

        if (a->rcounts[p] > 0) {
            ST_CHECK(dq->dev->copy((char *)a->recvbuff + off, dq->stage + sp->recv_off + off,
                                   a->rcounts[p] * es, dq->copy_stream));
        }
    }
    return ST_OK;
}

#define ST_DEVQ_ALIGN 256

/* Waits for the queue's copies, at most the communicator's timeout; phase names them. */
static st_status_t st_devq_copies_wait(st_devq_t *dq, const st_coll_args_t *a,
                                       const char *phase)
{
    long        us     = (long)(dq->comm->timeout * 1e6);
    st_status_t status = dq->dev->stream_sync(dq->copy_stream, us > 0 ? us : -1);

    if (status == ST_INPROGRESS) {
        st_error(ST_SUB_COLL, "%s #%llu (%s) rank %d: %s: the device copies did not finish "
                 "within %.0f s (STRATA_TIMEOUT)", st_coll_name(a->type),
                 (unsigned long long)a->seq, dq->comm->name, dq->comm->rank, phase,
                 dq->comm->timeout);
        status = ST_ERR_TIMEOUT;
    }
    return status;
}

/* Runs the calls of a device item on pinned host copies of their buffers: every call's send bytes
 * are copied in (device to pinned host, on the queue's own stream), the calls run together as
 * host calls (the same algorithms and checks as host buffers), and their receive bytes are copied
 * out. A call whose send and receive bytes overlap (in place) gets one staging block for their
 * union, so the algorithm sees the same aliasing as the caller made. */
static st_status_t st_devq_stage(st_devq_t *dq, const st_coll_args_t *args, int nargs)
{
    const st_dev_ops_t *dev  = dq->dev;
    st_coll_args_t     *host = NULL;
    st_devq_span_t     *sp   = NULL;
    size_t              total = 0;
    st_status_t         status;
    int                 ran = 0; /* the calls were handed to st_coll_run */

    if (dq->copy_stream == NULL) {
        status = dev->set_current(dq->comm->dev_id);
        if (status == ST_OK) {
            status = dev->stream_create(&dq->copy_stream);
        }
        if (status != ST_OK) {
            st_error(ST_SUB_COLL, "%s rank %d: the device queue cannot use device %d",
                     dq->comm->name, dq->comm->rank, dq->comm->dev_id);
            goto out;
        }
    }
    host = calloc((size_t)nargs, sizeof(*host));
    sp   = calloc((size_t)nargs, sizeof(*sp));
    if (host == NULL || sp == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    /* the staging layout: per call, a block for send and one for recv, or one for their union */
    for (int i = 0; i < nargs; i++) {
        const st_coll_args_t *a  = &args[i];
        const char           *s0 = a->sendbuff, *r0 = a->recvbuff;

        st_devq_lens(a, &sp[i]);
        if (sp[i].send_len > 0 && sp[i].recv_len > 0 && s0 < r0 + sp[i].recv_len &&
            r0 < s0 + sp[i].send_len) {
            const char *lo = ST_MIN(s0, r0);
            const char *hi = ST_MAX(s0 + sp[i].send_len, r0 + sp[i].recv_len);

            sp[i].send_off = total + (size_t)(s0 - lo);
            sp[i].recv_off = total + (size_t)(r0 - lo);
            total += ST_DIV_ROUND_UP((size_t)(hi - lo), ST_DEVQ_ALIGN) * ST_DEVQ_ALIGN;
        } else {
            sp[i].send_off = total;
            total += ST_DIV_ROUND_UP(sp[i].send_len, ST_DEVQ_ALIGN) * ST_DEVQ_ALIGN;
            sp[i].recv_off = total;
            total += ST_DIV_ROUND_UP(sp[i].recv_len, ST_DEVQ_ALIGN) * ST_DEVQ_ALIGN;
        }
    }
    if (total > dq->stage_bytes) {
        size_t want = ST_MAX(total, dq->stage_bytes + dq->stage_bytes / 2);
        void  *mem  = NULL;

        if (dq->stage != NULL) {
            dev->host_free(dq->stage);
            dq->stage       = NULL;
            dq->stage_bytes = 0;
        }
        status = dev->host_alloc(want, &mem);
        if (status != ST_OK) {
            st_error(ST_SUB_COLL, "%s rank %d: cannot pin %zu B of host memory to stage device "
                     "buffers", dq->comm->name, dq->comm->rank, want);
            goto out;
        }
        dq->stage       = mem;
        dq->stage_bytes = want;
    }
    for (int i = 0; i < nargs; i++) {
        host[i]     = args[i];
        host[i].mem = ST_MEM_HOST;
        /* a buffer the call does not touch aliases the other one: the host algorithms never
         * read it then, and never see a device pointer */
        host[i].sendbuff = dq->stage + (sp[i].send_len > 0 ? sp[i].send_off : sp[i].recv_off);
        host[i].recvbuff = dq->stage + (sp[i].recv_len > 0 ? sp[i].recv_off : sp[i].send_off);
        if (sp[i].send_len > 0) {
            status = dev->copy(dq->stage + sp[i].send_off, args[i].sendbuff, sp[i].send_len,
                               dq->copy_stream);
            if (status != ST_OK) {
                goto out;
            }
        }
    }
    status = st_devq_copies_wait(dq, &args[0], "copying the device buffers in");
    if (status != ST_OK) {
        goto out;
    }
    ran    = 1;
    status = st_coll_run(host, nargs);
    if (status != ST_OK) {
        goto out;
    }
    for (int i = 0; i < nargs; i++) {
        if (sp[i].recv_len > 0) {
            status = st_devq_copy_out(dq, &args[i], &sp[i]);
            if (status != ST_OK) {
                goto out;
            }
        }
    }
    status = st_devq_copies_wait(dq, &args[0], "copying the results out to the device buffers");
out:
    if (!ran) {
        st_stream_not_run(args, nargs); /* failed before running: later calls go on */
    }
    free(host);
    free(sp);
    return status;
}

/* Runs one device item: waits (sleeping) until the user's stream reached the call, runs it, and
 * opens the gate whatever happened. A failure is the communicator's asynchronous error, as
 * NCCL's (strataCommGetAsyncError): the caller's thread has long returned. */
static st_status_t st_devq_run(st_devq_t *dq, st_stream_item_t *item)
{
    st_comm_t  *comm   = dq->comm;
    st_status_t status = ST_OK;

    for (int i = 0; i < item->nevs; i++) {
        for (;;) {
            int state = comm->state;

            status = dq->dev->event_wait(item->evs[i], 100 * 1000);
            if (status != ST_INPROGRESS || state == ST_COMM_FAILED ||
                state == ST_COMM_ABORTED) {
                break; /* a failed communicator's items are not run (below) */
            }
        }
        if (status != ST_OK) {
            break;
        }
    }
    if (status == ST_OK || status == ST_INPROGRESS) {
        status = st_stream_runnable(item);
        if (status == ST_OK && item->nargs == 1 && st_coll_device_native(&item->args[0])) {
            status = dq->dev->set_current(comm->dev_id);
            if (status == ST_OK) {
                status = st_coll_run(item->args, 1); /* hier over the device windows */
            } else {
                st_stream_not_run(item->args, 1);
            }
        } else if (status == ST_OK) {
            status = st_devq_stage(dq, item->args, item->nargs);
        }
    } else {
        st_stream_not_run(item->args, item->nargs);
    }
    if (status != ST_OK) {
        for (int i = 0; i < item->nargs; i++) {
            st_comm_t *c = item->args[i].comm;

            pthread_mutex_lock(&st_devq_lock);
            if (c->async_msg[0] == '\0') {
                snprintf(c->async_msg, sizeof(c->async_msg), "%s", st_log_last_error());
            }
            pthread_mutex_unlock(&st_devq_lock);
            st_comm_set_error(c, status);
        }
    }
    dq->dev->write_value(&st_devq_gates[dq->slot], item->gate_val);
    for (int i = 0; i < item->nevs; i++) {
        dq->dev->event_destroy(item->evs[i]);
    }
    free(item->evs);
    item->evs  = NULL;
    item->nevs = 0;
    return status;
}

static void st_devq_thread_fini(st_devq_t *dq)
{
    if (dq->copy_stream != NULL) {
        dq->dev->stream_destroy(dq->copy_stream);
        dq->copy_stream = NULL;
    }
    if (dq->stage != NULL) {
        dq->dev->host_free(dq->stage);
        dq->stage = NULL;
    }
}

void st_devq_destroy(st_comm_t *comm)
{
    struct st_stream *s = comm->devq;
    int               slot;

    if (s == NULL) {
        return;
    }
    slot = s->dq->slot;
    st_stream_stop(s); /* runs (or fails at once, on a failed comm) what is queued: gates open */
    pthread_mutex_lock(&st_devq_lock);
    st_devq_gate_used[slot] = 0;
    comm->devq              = NULL;
    pthread_mutex_unlock(&st_devq_lock);
}
