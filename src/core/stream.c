/*
 * stream.c - host streams: strata's stand-in for a CUDA stream on host memory. A stream is an
 * in-order queue of work items (one call, or one group's calls for this stream) executed by the
 * stream's own thread through the same engine as blocking calls, so the caller's thread is free to
 * compute meanwhile. The thread sleeps on a condition variable while the queue is empty.
 */
#include "config.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/comm.h"
#include "core/enqueue.h"

#define ST_STREAM_MAGIC 0x57a75eaau

typedef struct st_stream_item {
    struct st_stream_item *next;
    int                    nargs;
    st_coll_args_t         args[];
} st_stream_item_t;

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
static st_status_t st_stream_run(st_stream_item_t *item)
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
            for (int j = 0; j < item->nargs; j++) { /* none of them runs: later calls go on */
                if (!st_coll_info(item->args[j].type)->p2p) {
                    st_comm_order_done(item->args[j].comm, item->args[j].seq);
                }
            }
            return ST_ERR_USAGE;
        }
    }
    return st_coll_run(item->args, item->nargs);
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

        status = st_stream_run(item);
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
        free(item);
        pthread_cond_broadcast(&s->cond);
    }
    pthread_mutex_unlock(&s->lock);
    return NULL;
}

st_status_t st_stream_push(strataStream_t stream, const st_coll_args_t *args, int nargs)
{
    struct st_stream *s = (struct st_stream *)stream;
    st_stream_item_t *item;

    item = malloc(sizeof(*item) + (size_t)nargs * sizeof(item->args[0]));
    if (item == NULL) {
        st_error(ST_SUB_COLL, "stream %p: out of memory queueing %d calls", (void *)s, nargs);
        return ST_ERR_NO_MEMORY;
    }
    item->next  = NULL;
    item->nargs = nargs;
    memcpy(item->args, args, (size_t)nargs * sizeof(*args));
    for (int i = 0; i < nargs; i++) {
        __atomic_add_fetch(&args[i].comm->queued, 1, __ATOMIC_SEQ_CST);
    }
    pthread_mutex_lock(&s->lock);
    if (s->tail != NULL) {
        s->tail->next = item;
    } else {
        s->head = item;
    }
    s->tail = item;
    s->pending++;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    return ST_OK;
}

strataResult_t strataStreamCreate(strataStream_t *stream)
{
    struct st_stream *s;
    int               ret;

    if (stream == NULL) {
        st_error(ST_SUB_COLL, "strataStreamCreate: stream is NULL");
        return strataInvalidArgument;
    }
    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        return strataSystemError;
    }
    s->magic = ST_STREAM_MAGIC;
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->cond, NULL);
    ret = pthread_create(&s->thread, NULL, st_stream_main, s);
    if (ret != 0) {
        st_error(ST_SUB_COLL, "strataStreamCreate: pthread_create failed: %s", strerror(ret));
        goto err;
    }
    if (!st_stream_register(s, 1)) {
        st_error(ST_SUB_COLL, "strataStreamCreate: more than %zu live streams",
                 ST_ARRAY_SIZE(st_stream_registry));
        pthread_mutex_lock(&s->lock);
        s->stop = 1;
        pthread_cond_broadcast(&s->cond);
        pthread_mutex_unlock(&s->lock);
        pthread_join(s->thread, NULL);
        goto err;
    }
    *stream = (strataStream_t)s; /* strata.h: a host stream travels as a strataStream_t */
    return strataSuccess;

err:
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    free(s);
    return strataSystemError;
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
    pthread_mutex_lock(&s->lock);
    s->stop = 1;
    pthread_cond_broadcast(&s->cond);
    pthread_mutex_unlock(&s->lock);
    pthread_join(s->thread, NULL);
    pthread_cond_destroy(&s->cond);
    pthread_mutex_destroy(&s->lock);
    s->magic = 0;
    free(s);
    return strataSuccess;
}
