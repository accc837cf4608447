/*
 * exec.h - operations and the engine that drives them.
 *
 * Every collective and point-to-point call becomes an st_op_t: a nonblocking state machine whose
 * progress() posts transfers, checks completions and does local reductions, never blocking. The
 * engine drives any number of operations (on any number of communicators) together, which is what
 * groups and strataCommInitAll need, and it owns waiting: it spins for STRATA_SPIN_TIME, then
 * blocks in poll() on the communicators' event fds, so that 8 ranks on 2 cores do not starve each
 * other. It also owns deadlines: an operation that makes no progress for its communicator's
 * timeout fails with ST_ERR_TIMEOUT and a message naming the collective, its sequence number, its
 * phase and step, and the peer it was waiting for; after STRATA_STALL_WARN seconds without
 * progress it logs the same facts once at WARN and keeps waiting. And it runs each collective's
 * mismatch agreement (engine/mismatch.h) with the collective: success needs both.
 */
#ifndef ST_EXEC_H
#define ST_EXEC_H

#include <stdint.h>

#include "base/status.h"
#include "engine/comm.h"

typedef struct st_op st_op_t;

struct st_op {
    st_comm_t   *comm;
    const char  *coll;        /* "AllReduce", "Send", ... */
    uint64_t     seq;         /* the communicator's collective sequence number */
    /* Where it is, for timeout messages; kept current by progress(). */
    const char  *phase;       /* "reduce-scatter", "all-gather", "chain", "send" */
    int          step;
    int          nsteps;
    int          wait_peer;   /* rank whose message or acknowledgement is awaited, -1 none */
    int          progressed;  /* set by progress() when anything advanced */
    double       last_progress;
    int          finished;
    /* Set by progress() when it found nothing to do and waits only on peers' window counters
     * (no network transfer in flight): the engine may then block in sleep() (which returns when
     * a window counter of the node changed since progress() read sleep_seen, or after
     * timeout_us) instead of polling the network: it calls sleep(sleep_on, sleep_seen, timeout_us)
     * (the algorithm's: the node windows' doorbell; NULL for ops without windows). */
    int          sleepable;
    int          win_wait;    /* waits on a window counter (also while network transfers run) */
    /* Set at creation by an algorithm that moves nothing over the network (one node): the engine
     * then progresses the network only every ST_EXEC_NET_EVERY turns (for failure notices and
     * stall reports), not on every turn of the latency path. */
    int          local_only;
    uint32_t     sleep_seen;
    void        *sleep_on;
    void        (*sleep)(void *on, uint32_t seen, long timeout_us);
    /* Counts this rank among the sleepers of sleep_on (+1) or no longer (-1): the engine arms,
     * runs one more pass over its ops (which reads sleep_seen afresh), and sleeps only if that
     * pass found nothing to do (a publisher rings the doorbell only for counted sleepers). */
    void        (*arm)(void *on, int delta);
    /* Set by progress() when it filled comm->times itself; else the engine records the whole
     * operation there as one phase. */
    int          times_set;
    const char  *algo;        /* "hier", "ring", ... for strataCommGetPhaseTimes */
    size_t       bytes;       /* the operation's size as nccl-tests counts it (S) */
    double       t_start;
    /* ST_INPROGRESS while running, ST_OK when complete, an error (logged) when failed. Called
     * with comm->lock held, after the communicator's net progress. */
    st_status_t (*progress)(st_op_t *op);
    /* Cancels whatever is in flight and waits (bounded) until the transport let go of the
     * buffers, then frees the op. Called with comm->lock held. */
    void        (*destroy)(st_op_t *op);
    /* The mismatch agreement running next to the op (engine/mismatch.h), or NULL; the engine
     * completes the op only when both are done, and frees it. */
    struct st_check *check;
    /* The engine's own: the data part's result once it ended, and whether the stall of the
     * current wait was reported (STRATA_STALL_WARN). */
    int          data_done;
    st_status_t  data_status;
    double       data_end;    /* when the data part ended */
    st_status_t  end_status;  /* how the op ended (set before destroy; ST_INPROGRESS before) */
    int          stall_warned;
    double       last_probe;  /* when the waited-for peer's process was last probed */
    double       stall_after; /* seconds without progress before the report; 0: none */
};

/* Drives ops[0..nops) until each has completed or failed, then destroys them all. Returns ST_OK or
 * the first error. Failed operations mark their communicator failed. */
st_status_t st_exec_run(st_op_t **ops, int nops);

/* Seconds a wait on comm may make no progress before it is reported once at WARN
 * (STRATA_STALL_WARN, or its default: 60 s or half the timeout); 0: no report. */
double st_exec_stall_after(const st_comm_t *comm);

/* Cancels the requests of reqs[0..n) still in flight and progresses until the transport let go
 * of them, at most timeout seconds (destroy paths; at once for requests the transport orphaned).
 * Returns 1 when all are done (their buffers may be freed); 0 when some did not cancel: the caller
 * must then hand the memory they refer to (requests and buffers) to st_comm_defer, never free it
 * while the transport may still write it. */
int st_exec_cancel(st_op_t *op, st_request_t *const *reqs, int n, double timeout);

/* Progress a communicator's transport until no request in reqs[0..n) is in flight, at most
 * timeout seconds (used by destroy paths after cancelling). Returns 1 when all are done; 0 at the
 * timeout, or at once when only orphans (st_request_t) are left. */
struct st_request;
int st_exec_drain(st_comm_t *comm, struct st_request *const *reqs, int n, double timeout);

#endif
