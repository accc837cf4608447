/*
 * exec.c - the engine that drives operations (see exec.h): progress, back-off, deadlines.
 *
 * Back-off: after STRATA_SPIN_TIME without progress the engine arms every transport's event fd
 * and sleeps in poll() (at most 100 ms at a time, so abort and deadlines are noticed). While
 * spinning it yields the core, since on a shared host the peer it waits for may need it.
 *
 * An op with a mismatch agreement (check.h) ends when both its data part and the agreement ended:
 * a mismatch ends it at once, however far the data got (the data may wait for bytes that will
 * never come); a data error other than a dead peer's waits for the agreement, which explains it
 * better (a short message is what a mismatched count looks like) and which the other ranks need
 * this rank to keep forwarding.
 */
#include "config.h"
#include "engine/exec.h"

#include <poll.h>
#include <sched.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "engine/mismatch.h"

#define ST_EXEC_MAX_POLL_MS 100
/* how long a data part that failed on a broken connection waits for the mismatch check (0.5 s
 * was too short once on a loaded 2-core machine: test_mismatch saw the broken connection's error
 * instead of the mismatch; a dead peer's error now comes up to 2 s later) */
#define ST_EXEC_CHECK_GRACE_S 2.0
/* how long transfers cancelled after a mismatch may finish before their connections break: the
 * peers' last check messages from this rank may still sit unread in their sockets, and a reset
 * connection drops them (0.3 s was too short under the sanitizers on 2 cores: a peer reported
 * "Endpoint timeout" instead of the mismatch) */
#define ST_EXEC_CANCEL_GRACE_S 1.0
#define ST_EXEC_MAX_FDS     64
/* Turns between two net progress calls while every op is local_only and busy (not yet idle for
 * STRATA_SPIN_TIME): a UCX progress costs about as much as a whole small all-reduce through the
 * windows (docs/performance.md); an idle engine progresses the network on every turn, for the
 * stall notices and failure notices that arrive there */
#define ST_EXEC_NET_EVERY   32
/* How long an idle engine pauses in user space before it yields the core (not oversubscribed) */
#define ST_EXEC_PAUSE_S     1e-6
/* A peer's failure notice fails a waiting operation once it is this old and the operation has
 * made no progress for as long: a rank that can still finish (a mismatch all ranks see, a
 * transfer that completes) ends with its own, more precise error. */
#define ST_EXEC_NOTICE_GRACE_S 0.5
/* A wait on one peer without progress for this long checks, every ST_EXEC_PROBE_S, whether that
 * peer's process has exited (same pid namespace: same host or emulated nodes). */
#define ST_EXEC_PROBE_AFTER_S 1.0
#define ST_EXEC_PROBE_S       0.5

static int st_exec_comm_aborted(const st_comm_t *comm)
{
    return comm->state == ST_COMM_ABORTED;
}

/* The op whose doorbell the engine would sleep on: when every unfinished op waits on window
 * counters only, the first; else NULL. *nwin_p: the ops that wait on windows. */
static st_op_t *st_exec_window_sleeper(st_op_t **ops, int nops, int *nwin_p)
{
    int      nwin = 0, nnet = 0;
    st_op_t *win_op = NULL;

    for (int i = 0; i < nops; i++) {
        if (ops[i]->finished) {
            continue;
        }
        if (ops[i]->sleepable && ops[i]->sleep != NULL) {
            nwin++;
            win_op = (win_op == NULL) ? ops[i] : win_op;
        } else {
            nnet++;
            nwin += ops[i]->win_wait; /* a local peer's publish wakes no fd: poll briefly */
        }
    }
    *nwin_p = nwin;
    return nnet == 0 ? win_op : NULL;
}

/* Arms the transports of the unfinished ops and sleeps until one has an event or timeout_ms.
 * Returns without sleeping when a transport has pending events. When every unfinished op waits
 * only on window counters, sleeps on the first one's doorbell instead (a futex: woken by the
 * peer's publish; the full timeout only when this rank is armed on that doorbell, armed_on);
 * when some wait on windows and others on the network, polls the network with a short timeout
 * so that window progress is not held up long. */
static void st_exec_block(st_op_t **ops, int nops, int timeout_ms, const void *armed_on)
{
    struct pollfd fds[ST_EXEC_MAX_FDS];
    int           nfds = 0, nwin;
    st_op_t      *win_op = st_exec_window_sleeper(ops, nops, &nwin);

    if (win_op != NULL) {
        /* several window ops (of different communicators) may wait on different doorbells; a
         * doorbell this rank is not armed on may never ring (st_intra_arm): short sleeps */
        win_op->sleep(win_op->sleep_on, win_op->sleep_seen,
                      (nwin == 1 && win_op->sleep_on == armed_on) ? (long)timeout_ms * 1000
                                                                  : 1000);
        return;
    }
    if (nwin > 0) {
        timeout_ms = 1;
    }
    for (int i = 0; i < nops && nfds < ST_EXEC_MAX_FDS; i++) {
        st_comm_t    *comm = ops[i]->comm;
        st_net_ctx_t *ctxs[2];
        int           nctx;

        if (ops[i]->finished) {
            continue;
        }
        nctx = st_comm_net_ctxs(comm, ctxs);
        for (int c = 0; c < nctx && nfds < ST_EXEC_MAX_FDS; c++) {
            st_status_t status;
            int         fd = comm->net->event_fd(ctxs[c]), dup = 0;

            for (int j = 0; j < nfds; j++) {
                dup |= (fds[j].fd == fd);
            }
            if (fd < 0 || dup) {
                if (fd < 0) {
                    timeout_ms = 1; /* no fd: poll the transport instead of sleeping */
                }
                continue;
            }
            pthread_mutex_lock(&comm->lock);
            status = comm->net->arm(ctxs[c]);
            pthread_mutex_unlock(&comm->lock);
            if (status != ST_OK) {
                return; /* events pending (or arm failed): progress again */
            }
            fds[nfds].fd      = fd;
            fds[nfds].events  = POLLIN;
            fds[nfds].revents = 0;
            nfds++;
        }
    }
    poll(fds, (nfds_t)nfds, timeout_ms);
}

/* An op that does not time its phases: the whole of it as phase 1. */
static void st_exec_record_times(st_op_t *op, double now)
{
    strataPhaseTimes_t *t = &op->comm->times;

    pthread_mutex_lock(&op->comm->lock);
    memset(t, 0, sizeof(*t));
    snprintf(t->algorithm, sizeof(t->algorithm), "%s", op->algo ? op->algo : "?");
    t->totalSeconds = now - op->t_start;
    t->seconds[1]   = t->totalSeconds;
    t->bytes[1]     = op->bytes;
    op->comm->have_times = 1;
    pthread_mutex_unlock(&op->comm->lock);
}

/* Where op is, for its messages: "<phase> step i/n", or only the phase for ops without steps
 * (small, the windows' waits). */
static const char *st_exec_where(const st_op_t *op, char *buf, size_t len)
{
    if (op->nsteps > 0) {
        snprintf(buf, len, "%s step %d/%d", op->phase, op->step, op->nsteps);
    } else {
        snprintf(buf, len, "%s", op->phase);
    }
    return buf;
}

static st_status_t st_exec_timeout(st_op_t *op, double idle)
{
    char        where[128];
    st_comm_t  *comm = op->comm;
    const char *which = (comm->setup_deadline > 0)
                            ? "init's deadline, STRATA_BOOTSTRAP_TIMEOUT or STRATA_TIMEOUT"
                            : "STRATA_TIMEOUT";

    if (op->wait_peer >= 0) {
        st_error(ST_SUB_COLL, "%s #%llu on %s rank %d timed out after %.1f s without progress in"
                 " %s, waiting for rank %d (%s)", op->coll, (unsigned long long)op->seq,
                 comm->name, comm->rank, idle, st_exec_where(op, where, sizeof(where)),
                 op->wait_peer, which);
    } else {
        st_error(ST_SUB_COLL, "%s #%llu on %s rank %d timed out after %.1f s without progress in"
                 " %s (%s)", op->coll, (unsigned long long)op->seq, comm->name,
                 comm->rank, idle, op->phase, which);
    }
    return ST_ERR_TIMEOUT;
}

/* STRATA_STALL_WARN after idle seconds: once per wait, the facts of the timeout message. */
static void st_exec_stall(st_op_t *op, double idle)
{
    st_comm_t *comm = op->comm;
    char       where[128];

    op->stall_warned = 1;
    if (op->wait_peer >= 0) {
        st_warn(ST_SUB_COLL, "%s #%llu on %s rank %d: no progress for %.1f s in %s, waiting for "
                "rank %d; still waiting (STRATA_STALL_WARN; STRATA_TIMEOUT %.0f s)", op->coll,
                (unsigned long long)op->seq, comm->name, comm->rank, idle,
                st_exec_where(op, where, sizeof(where)), op->wait_peer, comm->timeout);
    } else {
        st_warn(ST_SUB_COLL, "%s #%llu on %s rank %d: no progress for %.1f s in %s; still waiting "
                "(STRATA_STALL_WARN; STRATA_TIMEOUT %.0f s)", op->coll,
                (unsigned long long)op->seq, comm->name, comm->rank, idle, op->phase,
                comm->timeout);
    }
    if (op->check != NULL) {
        pthread_mutex_lock(&comm->lock);
        st_check_stall(op->check, op);
        pthread_mutex_unlock(&comm->lock);
    }
}

/* Seconds without progress before a stall report on comm, 0: none. STRATA_STALL_WARN when set
 * and below the comm's timeout; set to 0, or not below the timeout: off (said once per process,
 * the timeout reports the same wait). Unset: the default 60 s, or half the timeout when that is
 * shorter (a user who shortens STRATA_TIMEOUT still gets a report before it, without a warning). */
double st_exec_stall_after(const st_comm_t *comm)
{
    static int user_set = -1; /* whether the user set it: looked up once */
    double     after = st_core_config.stall_warn;

    if (user_set < 0) {
        user_set = getenv("STRATA_STALL_WARN") != NULL;
    }
    if (!user_set) {
        return (after < comm->timeout) ? after : comm->timeout / 2;
    }
    if (after <= 0) {
        return 0;
    }
    if (after < comm->timeout) {
        return after;
    }
    {
        double off = 0;
        char   why[160];

        snprintf(why, sizeof(why), "off, as it is not below the timeout (%gs) of %s, which reports "
                 "the same wait", comm->timeout, comm->name);
        st_param_adjusted("STRATA_STALL_WARN", ST_CFG_TIME, &after, &off, why);
    }
    return 0;
}

/* One pass over op's data part and its agreement; caller holds comm->lock. */
static st_status_t st_exec_step(st_op_t *op)
{
    st_status_t status;

    if (!op->data_done) {
        status = op->progress(op);
        if (status != ST_INPROGRESS) {
            op->data_done   = 1;
            op->data_status = status;
            op->data_end    = st_time_now();
        }
    }
    if (op->check == NULL) {
        return op->data_done ? op->data_status : ST_INPROGRESS;
    }
    if (op->data_done && op->data_status == ST_ERR_TIMEOUT) {
        return op->data_status; /* a peer is gone: the agreement would wait for it too */
    }
    if (op->data_done && (op->data_status == ST_ERR_REMOTE || op->data_status == ST_ERR_CANCELED)) {
        /* A peer that found a mismatch first cancels its transfers and so may break the
         * connection under ours: give the agreement (whose messages that peer sent before) a
         * moment to say so, rather than report a dead peer that is alive. Otherwise the data
         * part's error (logged, naming the peer and phase) stands. */
        status = st_check_progress(op->check, op, 1);
        if (status == ST_ERR_USAGE) {
            return status;
        }
        return (status == ST_INPROGRESS && st_time_now() - op->data_end < ST_EXEC_CHECK_GRACE_S)
                   ? ST_INPROGRESS : op->data_status;
    }
    status = st_check_progress(op->check, op, op->data_done);
    if (status == ST_ERR_USAGE) {
        return status; /* a mismatch, named by the check */
    }
    if (status < 0) {
        /* The agreement's transfers failed (a peer died, or cancelled after a mismatch of its
         * own). Keep driving the data part: its error, naming phase and peer, is the better
         * one, and it ends by the deadline. Only if it succeeds does the check's error stand. */
        if (!op->data_done) {
            return ST_INPROGRESS;
        }
        if (op->data_status != ST_OK) {
            return op->data_status;
        }
        st_check_report(op->check);
        return status;
    }
    return (status == ST_OK && op->data_done) ? op->data_status : ST_INPROGRESS;
}

/* ST_INPROGRESS while op may still complete; ST_ERR_REMOTE (logged) when it cannot: a peer's
 * failure notice arrived over ST_EXEC_NOTICE_GRACE_S ago with no progress since, or the peer it
 * waits for has exited (probed every ST_EXEC_PROBE_S once the wait is ST_EXEC_PROBE_AFTER_S
 * old). */
/* The status of an op ended by a peer's notice: the peer's own when the ranks' calls were wrong
 * (a mismatch, a send/recv size: strataInvalidUsage on every rank), else ST_ERR_REMOTE. */
static st_status_t st_exec_notice_status(const st_comm_t *comm)
{
    return (comm->notice_result == strataInvalidUsage) ? ST_ERR_USAGE : ST_ERR_REMOTE;
}

static void st_exec_notice_error(st_op_t *op)
{
    st_comm_t *comm = op->comm;
    char       where[128];

    st_error(ST_SUB_COLL, "%s #%llu on %s rank %d failed in %s: rank %d reported that the "
             "communicator cannot complete: %s", op->coll, (unsigned long long)op->seq,
             comm->name, comm->rank, st_exec_where(op, where, sizeof(where)), comm->notice_rank,
             comm->notice_msg);
}

/* An op that failed because a peer broke its connections: when that peer (or another) reported
 * a mismatch first, the mismatch is the cause every rank must see (the peer that found it
 * cancels its transfers after ST_EXEC_CANCEL_GRACE_S, which a rank still in its own agreement on
 * a loaded machine sees as a broken connection). Likewise when the peer the op waited for is
 * alive (or is the one that sent the notice): it closed its connections because its
 * communicator failed for the cause the notice names (another rank's death), which the broken
 * connection does not (a transport that reports a closed connection at once, as verbs does,
 * fails the transfer before the deadline would). Caller holds comm->lock. */
static st_status_t st_exec_adopt_notice(st_op_t *op, st_status_t status)
{
    st_comm_t *comm = op->comm;

    if (status != ST_ERR_REMOTE && status != ST_ERR_CANCELED && status != ST_ERR_TIMEOUT) {
        return status;
    }
    st_comm_notice_poll(comm);
    if (comm->notice_at <= 0) {
        return status;
    }
    if (st_exec_notice_status(comm) != ST_ERR_USAGE) {
        /* the peer's connection broke, and the peer is alive (it told us why, or it closed its
         * connections because its communicator failed, which a notice says): the notice */
        if (status == ST_ERR_TIMEOUT || op->wait_peer < 0 || op->wait_peer >= comm->nranks ||
            (op->wait_peer != comm->notice_rank && st_comm_peer_exited(comm, op->wait_peer))) {
            return status;
        }
    }
    st_exec_notice_error(op);
    return st_exec_notice_status(comm);
}

static st_status_t st_exec_doomed(st_op_t *op, double now)
{
    st_comm_t *comm = op->comm;
    double     idle = now - op->last_progress;

    if (comm->notice_at > 0 && now - comm->notice_at > ST_EXEC_NOTICE_GRACE_S &&
        idle > ST_EXEC_NOTICE_GRACE_S) {
        st_exec_notice_error(op);
        return st_exec_notice_status(comm);
    }
    if (op->wait_peer >= 0 && op->wait_peer < comm->nranks && idle > ST_EXEC_PROBE_AFTER_S &&
        now - op->last_probe > ST_EXEC_PROBE_S) {
        op->last_probe = now;
        if (st_comm_peer_exited(comm, op->wait_peer)) {
            char where[128];

            st_error(ST_SUB_COLL, "%s #%llu on %s rank %d failed in %s: rank %d (pid %u), which "
                     "it waits for, has exited", op->coll, (unsigned long long)op->seq,
                     comm->name, comm->rank, st_exec_where(op, where, sizeof(where)),
                     op->wait_peer, comm->peers[op->wait_peer].pid);
            return ST_ERR_REMOTE;
        }
    }
    return ST_INPROGRESS;
}

st_status_t st_exec_run(st_op_t **ops, int nops)
{
    st_status_t first = ST_OK;
    char        first_msg[512]; /* the first failure's error: the one the caller gets, not a
                                 * later op's of the same group (a peer that closed its
                                 * connections after that failure, say); set only on failure */
    int         remaining = nops;
    double      now = st_time_now();
    double      idle_since = now;
    double      spin = st_core_config.spin_time;
    unsigned    turn = 0;
    int         oversub = 0, nwin;
    st_op_t    *cand;
    void       *armed_on = NULL; /* the doorbell this rank is counted a sleeper of */
    void      (*armed_fn)(void *on, int delta) = NULL;

    for (int i = 0; i < nops; i++) {
        ops[i]->last_progress = now;
        ops[i]->t_start       = now;
        ops[i]->finished      = 0;
        ops[i]->data_done     = 0;
        ops[i]->end_status    = ST_INPROGRESS;
        ops[i]->stall_warned  = 0;
        ops[i]->last_probe    = 0;
        ops[i]->stall_after   = st_exec_stall_after(ops[i]->comm); /* warns at once when off */
        __atomic_add_fetch(&ops[i]->comm->active, 1, __ATOMIC_SEQ_CST);
        oversub |= ops[i]->comm->intra_oversub;
    }
    while (remaining > 0) {
        int any = 0;

        if (turn > 0) {
            now = st_time_now(); /* the first pass, which usually completes a small op: t_start */
        }
        for (int i = 0; i < nops; i++) {
            st_op_t    *op = ops[i];
            st_comm_t  *comm = op->comm;
            st_status_t status;

            if (op->finished) {
                continue;
            }
            if (st_exec_comm_aborted(comm)) {
                st_error(ST_SUB_COLL, "%s #%llu on %s rank %d: communicator aborted", op->coll,
                         (unsigned long long)op->seq, comm->name, comm->rank);
                status = ST_ERR_REMOTE;
            } else {
                pthread_mutex_lock(&comm->lock);
                if (!op->local_only || turn % ST_EXEC_NET_EVERY == ST_EXEC_NET_EVERY - 1 ||
                    now - idle_since >= spin) { /* idle: every turn sleeps anyway */
                    if (st_comm_progress(comm) == ST_OK) {
                        any = 1;
                    }
                    st_comm_notice_poll(comm);
                }
                op->progressed = 0;
                status = st_exec_step(op);
                pthread_mutex_unlock(&comm->lock);
                if (op->progressed) {
                    any = 1;
                    op->last_progress = now;
                    op->stall_warned  = 0;
                } else if (status == ST_INPROGRESS &&
                           (now - op->last_progress > comm->timeout ||
                            (comm->setup_deadline > 0 && now > comm->setup_deadline))) {
                    /* a data error held for the agreement is the better explanation */
                    status = (op->data_done && op->data_status < 0)
                                 ? op->data_status : st_exec_timeout(op, now - op->last_progress);
                } else if (status == ST_INPROGRESS && !op->stall_warned &&
                           op->stall_after > 0 && now - op->last_progress > op->stall_after) {
                    st_exec_stall(op, now - op->last_progress);
                }
                if (status == ST_INPROGRESS) {
                    status = st_exec_doomed(op, now);
                }
            }
            if (status == ST_INPROGRESS) {
                continue;
            }
            op->finished   = 1;
            op->end_status = status;
            remaining--;
            if (status == ST_OK && !op->times_set) {
                st_exec_record_times(op, now);
            }
            if (status < 0) {
                if (!st_exec_comm_aborted(comm)) {
                    pthread_mutex_lock(&comm->lock);
                    status = st_exec_adopt_notice(op, status);
                    pthread_mutex_unlock(&comm->lock);
                    op->end_status = status;
                }
                st_comm_set_error(comm, status);
                /* the first failure on comm tells every other rank (not one a peer reported) */
                pthread_mutex_lock(&comm->lock);
                st_comm_notice_send(comm, NULL);
                pthread_mutex_unlock(&comm->lock);
                if (first == ST_OK) {
                    first = status;
                    snprintf(first_msg, sizeof(first_msg), "%s", st_log_last_error());
                }
            }
        }
        if (remaining == 0) {
            break;
        }
        turn++;
        if (any && armed_on != NULL) {
            armed_fn(armed_on, -1);
            armed_on = NULL;
        }
        if (any) {
            idle_since = now;
        } else if (now - idle_since < spin) {
            /* a peer that is running arrives within a microsecond or two: wait for it without a
             * syscall; one that needs this core (oversubscribed) gets it at once */
            if (!oversub && now - idle_since < ST_EXEC_PAUSE_S) {
                st_cpu_relax(); /* one: a pause is about 140 cycles on recent x86 */
            } else {
                sched_yield();
            }
        } else if (armed_on == NULL && (cand = st_exec_window_sleeper(ops, nops, &nwin)) != NULL &&
                   cand->arm != NULL) {
            /* count as a sleeper first, then one more pass (reading the doorbell afresh) */
            armed_on = cand->sleep_on;
            armed_fn = cand->arm;
            armed_fn(armed_on, +1);
        } else {
            st_exec_block(ops, nops, ST_EXEC_MAX_POLL_MS, armed_on);
            if (armed_on != NULL) {
                armed_fn(armed_on, -1);
                armed_on = NULL;
            }
        }
    }
    if (armed_on != NULL) {
        armed_fn(armed_on, -1);
    }
    for (int i = 0; i < nops; i++) {
        st_comm_t *comm = ops[i]->comm;

        pthread_mutex_lock(&comm->lock);
        st_check_destroy(ops[i]->check, ops[i]);
        ops[i]->destroy(ops[i]);
        pthread_mutex_unlock(&comm->lock);
        __atomic_sub_fetch(&comm->active, 1, __ATOMIC_SEQ_CST);
    }
    if (first != ST_OK) {
        st_log_clear_error();
        st_log_append_error("%s", first_msg);
    }
    return first;
}

int st_exec_drain(st_comm_t *comm, st_request_t *const *reqs, int n, double timeout)
{
    double deadline = st_time_now() + timeout;

    for (;;) {
        int pending = 0, orphans = 0;

        for (int i = 0; i < n; i++) {
            pending += !reqs[i]->done && !reqs[i]->orphan;
            orphans += !reqs[i]->done && reqs[i]->orphan;
        }
        if (pending == 0) {
            return orphans == 0; /* waiting cannot complete an orphan */
        }
        if (st_time_now() > deadline) {
            return 0;
        }
        st_comm_progress(comm);
    }
}

int st_exec_cancel(st_op_t *op, st_request_t *const *reqs, int n, double timeout)
{
    st_comm_t *comm = op->comm;
    int        pending = 0;
    /* After a mismatch every peer is alive and still finishing its own check, whose last
     * messages may share a connection with our stuck transfers: break connections only after a
     * moment. Otherwise (a failure, a timeout, an abort) at once: the peer may be dead. */
    double     grace = (op->end_status == ST_ERR_USAGE) ? ST_EXEC_CANCEL_GRACE_S : 0.0;

    for (int i = 0; i < n; i++) {
        if (!reqs[i]->done) {
            comm->net->cancel(comm->net_ctx, reqs[i], 0);
            pending++;
        }
    }
    if (pending == 0 || st_exec_drain(comm, reqs, n, grace)) {
        return 1;
    }
    for (int i = 0; i < n; i++) {
        if (!reqs[i]->done) {
            comm->net->cancel(comm->net_ctx, reqs[i], 1);
        }
    }
    if (st_exec_drain(comm, reqs, n, timeout)) {
        return 1;
    }
    st_debug(ST_SUB_COLL, "%s #%llu: %d transfers did not cancel; their buffers live until the "
             "communicator is destroyed", op->coll, (unsigned long long)op->seq, pending);
    return 0;
}
