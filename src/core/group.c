/*
 * group.c - strataGroupStart / strataGroupEnd: the calls of a thread between them are kept in a
 * thread-local list and launched together by the outermost End, so one thread can drive several
 * communicators (strataCommInitAll) and any send/recv pattern without deadlock.
 */
#include "config.h"

#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "engine/comm.h"
#include "core/enqueue.h"

typedef struct st_group_item {
    st_coll_args_t args;
    strataStream_t stream;
} st_group_item_t;

static __thread int              st_group_level;
static __thread st_group_item_t *st_group_items;
static __thread int              st_group_len;
static __thread int              st_group_cap;
static __thread st_status_t      st_group_error;

int st_group_depth(void)
{
    return st_group_level;
}

strataResult_t st_group_note(strataResult_t result)
{
    if (result != strataSuccess && result != strataInProgress && st_group_level > 0 &&
        st_group_error == ST_OK) {
        st_group_error = (result == strataInvalidArgument) ? ST_ERR_INVALID : ST_ERR_USAGE;
    }
    return result;
}

st_status_t st_group_add(const st_coll_args_t *args, strataStream_t stream)
{
    if (st_group_len == st_group_cap) {
        int              cap = st_group_cap ? 2 * st_group_cap : 16;
        st_group_item_t *grown = realloc(st_group_items, (size_t)cap * sizeof(*grown));

        if (grown == NULL) {
            st_error(ST_SUB_COLL, "group: out of memory queueing call %d", st_group_len + 1);
            st_group_error = ST_ERR_NO_MEMORY;
            return ST_ERR_NO_MEMORY;
        }
        st_group_items = grown;
        st_group_cap   = cap;
    }
    st_group_items[st_group_len].args   = *args;
    st_group_items[st_group_len].stream = stream;
    /* an all-to-all-v's arrays are the caller's only until its call returns */
    if (st_coll_args_keep(&st_group_items[st_group_len].args) != ST_OK) {
        st_error(ST_SUB_COLL, "group: out of memory queueing call %d", st_group_len + 1);
        st_group_error = ST_ERR_NO_MEMORY;
        return ST_ERR_NO_MEMORY;
    }
    st_group_len++;
    return ST_OK;
}

strataResult_t strataGroupStart(void)
{
    if (st_group_level++ == 0) {
        st_group_len   = 0;
        st_group_error = ST_OK;
    }
    return strataSuccess;
}

/* A queued call that will not run: a collective of a live communicator is marked finished, so
 * that the communicator's later collectives do not wait for it (issue order, st_comm_order_*). */
static void st_group_skip(const st_coll_args_t *args)
{
    if (!st_coll_info(args->type)->p2p && st_comm_is_live(args->comm)) {
        st_comm_order_done(args->comm, args->seq);
    }
}

/* Launches the queued calls: NULL-stream ones on host buffers together now, the others per stream
 * as a unit (calls on device buffers per CUDA stream, through the communicator's device queue). */
/* 1 when items a and b go into one unit: calls on device buffers all together, whichever CUDA
 * streams they name (the unit starts once every one of those streams reached it: NCCL's group
 * semantics; split per stream, a send and its receive on two streams could wait for each other
 * in the device queue), host calls per host stream. */
static int st_group_same_unit(const st_group_item_t *a, const st_group_item_t *b)
{
    int adev = (a->args.mem == ST_MEM_CUDA), bdev = (b->args.mem == ST_MEM_CUDA);

    return adev == bdev && (adev || a->stream == b->stream);
}

static st_status_t st_group_launch(void)
{
    st_coll_args_t *now;
    st_status_t     status = ST_OK, s;
    int             nnow = 0;

    now = malloc((size_t)(st_group_len ? st_group_len : 1) * sizeof(*now));
    if (now == NULL) {
        for (int i = 0; i < st_group_len; i++) {
            st_group_skip(&st_group_items[i].args);
        }
        return ST_ERR_NO_MEMORY;
    }
    for (int i = 0; i < st_group_len; i++) {
        strataStream_t stream = st_group_items[i].stream;
        st_comm_t     *comm = st_group_items[i].args.comm;
        int            dev = (st_group_items[i].args.mem == ST_MEM_CUDA);
        int            taken = 0;

        /* the communicator or stream may have been destroyed since the call was queued */
        if (!st_comm_is_live(comm) || comm->state != ST_COMM_READY) {
            st_error(ST_SUB_COLL, "strataGroupEnd: call %d (%s) names communicator %p, destroyed "
                     "or failed since it was queued; skipped", i + 1,
                     st_coll_name(st_group_items[i].args.type), (void *)comm);
            st_group_skip(&st_group_items[i].args);
            status = (status == ST_OK) ? ST_ERR_USAGE : status;
            continue;
        }
        if (dev == 0 && stream != NULL && !st_stream_is_live(stream)) {
            st_error(ST_SUB_COLL, "strataGroupEnd: call %d (%s) names stream %p, destroyed since "
                     "it was queued; skipped", i + 1, st_coll_name(st_group_items[i].args.type),
                     (void *)stream);
            status = (status == ST_OK) ? ST_ERR_INVALID : status;
            st_group_skip(&st_group_items[i].args);
            continue;
        }
        if (stream == NULL && !dev) {
            now[nnow++] = st_group_items[i].args;
            continue;
        }
        /* gather every call of this stream and kind (once, at its first appearance) */
        for (int j = 0; j < i && !taken; j++) {
            taken = st_group_same_unit(&st_group_items[j], &st_group_items[i]);
        }
        if (!taken) {
            st_coll_args_t *unit = malloc((size_t)st_group_len * sizeof(*unit));
            int             nunit = 0;

            if (unit == NULL) {
                status = ST_ERR_NO_MEMORY;
                for (int j = i; j < st_group_len; j++) {
                    if (st_group_same_unit(&st_group_items[j], &st_group_items[i])) {
                        st_group_skip(&st_group_items[j].args);
                    }
                }
                continue;
            }
            strataStream_t *streams = dev ? malloc((size_t)st_group_len * sizeof(*streams)) : NULL;
            int             nstreams = 0;

            for (int j = i; j < st_group_len; j++) {
                if (st_group_same_unit(&st_group_items[j], &st_group_items[i]) &&
                    st_comm_is_live(st_group_items[j].args.comm) &&
                    st_group_items[j].args.comm->state == ST_COMM_READY) {
                    int seen = 0;

                    unit[nunit++] = st_group_items[j].args;
                    for (int k = 0; k < nstreams && !seen; k++) {
                        seen = (streams[k] == st_group_items[j].stream);
                    }
                    if (streams != NULL && !seen) {
                        streams[nstreams++] = st_group_items[j].stream;
                    }
                }
            }
            if (nunit == 0) {
                s = ST_OK; /* every call of it named a communicator that failed since */
            } else if (dev && streams == NULL) {
                s = ST_ERR_NO_MEMORY;
            } else {
                s = dev ? st_devq_push(streams, nstreams, unit, nunit)
                        : st_stream_push(stream, unit, nunit);
            }
            free(streams);
            for (int j = 0; j < nunit && s != ST_OK; j++) {
                st_group_skip(&unit[j]);
            }
            status = (status == ST_OK) ? s : status;
            free(unit);
        }
    }
    if (nnow > 0) {
        s = st_coll_run(now, nnow);
        status = (status == ST_OK) ? s : status;
    }
    free(now);
    return status;
}

strataResult_t strataGroupEnd(void)
{
    st_status_t status;

    if (st_group_level == 0) {
        st_error(ST_SUB_COLL, "strataGroupEnd without a matching strataGroupStart");
        return strataInvalidUsage;
    }
    if (--st_group_level > 0) {
        return strataSuccess;
    }
    status = st_group_launch();
    if (st_group_error != ST_OK && status == ST_OK) {
        status = st_group_error;
    }
    for (int i = 0; i < st_group_len; i++) {
        st_coll_args_drop(&st_group_items[i].args); /* the streams took their own copies */
    }
    free(st_group_items);
    st_group_items = NULL;
    st_group_len   = 0;
    st_group_cap   = 0;
    return st_status_to_result(status);
}
