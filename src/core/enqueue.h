/*
 * enqueue.h - where a validated call goes: into the calling thread's open group, onto a host
 * stream, or straight to the engine (NULL stream).
 */
#ifndef ST_ENQUEUE_H
#define ST_ENQUEUE_H

#include "base/status.h"
#include "coll/coll.h"
#include "strata.h"

/* Routes one call (sequence number already assigned). */
st_status_t st_enqueue(const st_coll_args_t *args, strataStream_t stream);

/* group.c: the calling thread's group nesting depth (0: no group open). */
int         st_group_depth(void);
st_status_t st_group_add(const st_coll_args_t *args, strataStream_t stream);
/* Records a call's failure in the open group (strataGroupEnd then returns it); returns result. */
strataResult_t st_group_note(strataResult_t result);

/* stream.c */
int         st_stream_is_live(strataStream_t stream);
/* Queues nargs calls as one unit (run together, like a group). Copies args. */
st_status_t st_stream_push(strataStream_t stream, const st_coll_args_t *args, int nargs);

/* Queues nargs calls on device buffers (args[0].comm's device queue) as one unit, ordered on the
 * user's CUDA streams users[0..nusers) (an entry NULL: the legacy default stream): it starts
 * once every one of them reached it and each waits for its end; returns once queued
 * (stream.c's top comment). ST_ERR_NO_DEVICE, ST_ERR_NO_MEMORY, ST_ERR_IO (a stream refused the
 * gate: nothing queued, no stream left waiting). */
st_status_t st_devq_push(const strataStream_t *users, int nusers, const st_coll_args_t *args,
                         int nargs);
/* Runs what comm's device queue holds (a failed or aborted communicator's items fail at once),
 * opening their gates, and frees the queue. Nothing when comm has none. */
void        st_devq_destroy(struct st_comm *comm);

#endif
