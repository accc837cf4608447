/*
 * coll.h - what algorithms share: the column pipeline every chunked algorithm (ring, chain) is
 * written over, and the algorithms' entry points (the arguments of a call and the tag layout are
 * the engine's: engine/op.h).
 *
 * Column pipeline. An algorithm cuts its buffers into columns (chunk k of every block) that travel
 * independently; each column goes through the same nsteps steps. At each step the algorithm's
 * prepare() names at most one receive and one send (peer, buffer, bytes, tag) and may do local
 * work first (pre-scaling a contribution); when both have completed, complete() does the local
 * work that follows (reducing what arrived). Up to `depth` columns are in flight, so chunk k+1 is
 * on the wire while chunk k is being reduced: that is the pipelining. A zero-byte transfer is
 * skipped by both sides (they compute the same sizes), so empty blocks cost nothing.
 */
#ifndef ST_COLL_H
#define ST_COLL_H

#include <stddef.h>
#include <stdint.h>

#include "coll/rail.h"
#include "engine/comm.h"
#include "engine/exec.h"
#include "engine/op.h"
#include "reduce/reduce.h"
#include "transports/transport.h"

/* One step of one column, as prepare() describes it. len 0 = no transfer. */
typedef struct st_xfer {
    int         recv_peer;
    void       *recv_buf;
    size_t      recv_len;
    uint32_t    recv_sub;  /* sub-tag; the sender uses the same for this message */
    int         send_peer;
    const void *send_buf;
    size_t      send_len;
    uint32_t    send_sub;
} st_xfer_t;

typedef struct st_pipe_col {
    int          active;
    size_t       k;        /* column index */
    int          step;
    st_xfer_t      xfer;
    st_rail_xfer_t net[2];   /* the step's transfers: [ST_RAIL_RECV], [ST_RAIL_SEND] */
    void          *tmp[2];   /* two staging chunks of chunk_bytes each (allocated when asked) */
} st_pipe_col_t;

typedef struct st_pipe st_pipe_t;
typedef struct st_pipe_ops {
    const char *(*phase)(st_pipe_t *pipe, int step);
    /* Fills *x for column col at step; may do local work first. */
    st_status_t (*prepare)(st_pipe_t *pipe, st_pipe_col_t *col, int step, st_xfer_t *x);
    /* Local work after the transfers of step completed (may be NULL). */
    st_status_t (*complete)(st_pipe_t *pipe, st_pipe_col_t *col, int step);
} st_pipe_ops_t;

#define ST_PIPE_MAX_DEPTH 16

struct st_pipe {
    st_op_t              op;
    const st_pipe_ops_t *ops;
    st_coll_args_t       args;
    size_t               esize;       /* bytes per element */
    size_t               chunk;       /* elements per chunk */
    size_t               ncols;
    size_t               next_col;
    size_t               done_cols;
    int                  nsteps;
    int                  depth;
    int                  need_tmp;    /* allocate the two staging chunks per column */
    void                *tmp_mem;
    st_pipe_col_t        cols[ST_PIPE_MAX_DEPTH];
    /* algorithm data */
    int                  n, pos, left, right;
    const char          *src;
    char                *dst;
};

/* Initialises the pipeline part of pipe (the algorithm fills its own fields and ops before or
 * after). ncols columns of nsteps steps; chunk in elements; at least min_depth columns in flight
 * (STRATA_PIPELINE_DEPTH otherwise; never more than ncols or ST_PIPE_MAX_DEPTH). */
st_status_t st_pipe_init(st_pipe_t *pipe, const st_coll_args_t *args, const st_pipe_ops_t *ops,
                         size_t chunk, size_t ncols, int nsteps, int need_tmp, int min_depth);

/* Most flat-ring channels a call may have (STRATA_RING_CHANNELS, tuning tables). */
#define ST_RING_MAX_CHANNELS 8

/* Elements per pipeline chunk for dtype from STRATA_CHUNK_SIZE (at least 1). */
size_t st_coll_chunk_elems(strataDataType_t dtype);

/* Algorithms. Each makes an op for args (args->count etc. already validated). */
st_status_t st_ring_create(const st_coll_args_t *args, st_op_t **op_p);   /* AR, RS, AG */
st_status_t st_chain_create(const st_coll_args_t *args, st_op_t **op_p);  /* bcast, reduce */
st_status_t st_p2p_create(const st_coll_args_t *args, st_op_t **op_p);    /* send, recv */
st_status_t st_hier_create(const st_coll_args_t *args, st_op_t **op_p); /* all but AlltoAllv,
                                                                          * gather, scatter */
/* Whether hier can take the call: the node's windows exist; for reduce-scatter and all-gather a
 * window chunk holds one element of every rank; for all-to-all the buffers are host memory and
 * nranks^2 bytes fit a window chunk. */
int st_hier_fits(const st_coll_args_t *args);
st_status_t st_small_create(const st_coll_args_t *args, st_op_t **op_p);  /* all-reduce */
/* AlltoAll, AlltoAllv, gather, scatter: the flat exchanges of a2a.c */
st_status_t st_a2a_create(const st_coll_args_t *args, st_op_t **op_p);
/* 1 when the small algorithm can take args (all-reduce, bytes within the windows' small area). */
int st_small_fits(const st_coll_args_t *args);
/* The latency path of one blocking call (st_coll_run with one call): an all-reduce of host
 * memory that the small algorithm takes, on a communicator of one node whose windows are idle,
 * runs here without an op, a check object or the engine: it writes its contribution, the
 * mismatch check's words and its flag, waits a few microseconds for the other ranks' flags
 * (no system call), reduces and returns; a peer that is not there by then, or calls that differ,
 * hand the call to the engine as an op in the same state. ST_ERR_UNSUPPORTED (nothing done)
 * when the call does not qualify; else the call's result, its collective marked finished. */
st_status_t st_small_run_fast(const st_coll_args_t *args);
/* All-reduces of at most this many bytes take the small algorithm when nothing else (a tuning
 * table, STRATA_ALGO other than auto and small, a call's own algorithm) decides: what
 * st_coll_op_create would choose; 0 when something else decides. Cached in comm. */
size_t st_coll_small_fast_max(struct st_comm *comm);
/* Among ops run together, makes receives whose buffer overlaps a send's land in staging until
 * those sends completed (in-place exchanges). */
st_status_t st_p2p_link_overlaps(st_op_t **ops, int nops);
/* An op that does only local work (n == 1, count == 0): runs it at once and returns NULL. */

/* Runs nargs calls together to completion (the NULL-stream path, a group, a stream's work item):
 * makes their ops and drives them with st_exec_run. Returns the first error. */
st_status_t st_coll_run(const st_coll_args_t *args, int nargs);

/* Checks the algorithm parameters (STRATA_ALGO, the chunk sizes, STRATA_CMA). ST_ERR_INVALID,
 * logged, for unknown values. */
st_status_t st_coll_config_check(void);

/* 1 when a call on device buffers runs as it is, on the GPU: the algorithm chosen for it is hier
 * and the node has device windows (intra.h). Otherwise the device queue runs it on host copies
 * of its buffers (core/stream.c). The same on every rank of the communicator. */
int st_coll_device_native(const st_coll_args_t *args);

/* Chooses the algorithm for args and makes its op (select: STRATA_ALGO). */
st_status_t st_coll_op_create(const st_coll_args_t *args, st_op_t **op_p);

#endif
