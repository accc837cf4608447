/*
 * comm.c - the communicator at run time: the registry of live communicators, error marking and
 * the naming of dead peers, failure notices, issue order, net progress, and the memory of
 * cancelled operations that waits for the transport to close. Its lifecycle (init, split, free,
 * abort) is core's (core/init.c).
 */
#include "config.h"
#include "engine/comm.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "engine/exec.h"
#include "engine/op.h"

static pthread_mutex_t st_comm_registry_lock = PTHREAD_MUTEX_INITIALIZER;
static st_comm_t     **st_comm_registry;
static size_t          st_comm_registry_len;
static size_t          st_comm_registry_cap;

void st_comm_register(st_comm_t *comm)
{
    pthread_mutex_lock(&st_comm_registry_lock);
    if (st_comm_registry_len == st_comm_registry_cap) {
        size_t      cap = st_comm_registry_cap ? 2 * st_comm_registry_cap : 16;
        st_comm_t **grown = realloc(st_comm_registry, cap * sizeof(*grown));
        if (grown == NULL) {
            pthread_mutex_unlock(&st_comm_registry_lock);
            return; /* unregistered comms are only less protected against misuse */
        }
        st_comm_registry     = grown;
        st_comm_registry_cap = cap;
    }
    st_comm_registry[st_comm_registry_len++] = comm;
    pthread_mutex_unlock(&st_comm_registry_lock);
}

void st_comm_unregister(st_comm_t *comm)
{
    pthread_mutex_lock(&st_comm_registry_lock);
    for (size_t i = 0; i < st_comm_registry_len; i++) {
        if (st_comm_registry[i] == comm) {
            st_comm_registry[i] = st_comm_registry[--st_comm_registry_len];
            break;
        }
    }
    if (st_comm_registry_len == 0) {
        /* node peers' strataMemAlloc buffers mapped for zero-copy: by the builtin window
         * transports, and by the last communicator's own (a test's fakes) */
        for (const st_win_ops_t *const *tl = st_win_transports; *tl != NULL; tl++) {
            (*tl)->mem_unmap_all();
        }
        if (comm->tl != NULL && comm->tl->win != st_win_transports) {
            for (const st_win_ops_t *const *tl = comm->tl->win; *tl != NULL; tl++) {
                (*tl)->mem_unmap_all();
            }
        }
        free(st_comm_registry);
        st_comm_registry     = NULL;
        st_comm_registry_cap = 0;
    }
    pthread_mutex_unlock(&st_comm_registry_lock);
}

int st_comm_is_live(const st_comm_t *comm)
{
    int live = 0;

    pthread_mutex_lock(&st_comm_registry_lock);
    for (size_t i = 0; i < st_comm_registry_len && !live; i++) {
        live = (st_comm_registry[i] == comm);
    }
    pthread_mutex_unlock(&st_comm_registry_lock);
    return live;
}

/* This process's pid namespace as "<boot id>/<inode of /proc/self/ns/pid>": ranks publishing the
 * same string see each other's pids (emulated nodes, network namespaces of one host, included;
 * containers with their own pid namespace excluded). "" when it cannot be told. */
void st_comm_pidns(char *buf, size_t len)
{
    char        boot[64] = "";
    struct stat st;
    FILE       *f = fopen("/proc/sys/kernel/random/boot_id", "r");

    buf[0] = '\0';
    if (f == NULL) {
        return;
    }
    if (fgets(boot, sizeof(boot), f) == NULL) {
        boot[0] = '\0';
    }
    fclose(f);
    boot[strcspn(boot, "\n")] = '\0';
    if (boot[0] != '\0' && stat("/proc/self/ns/pid", &st) == 0) {
        snprintf(buf, len, "%.40s/%llu", boot, (unsigned long long)st.st_ino);
    }
}

/* 1 when rank r's process is known to have exited: it shares this pid namespace and its pid is
 * gone, a zombie, or exiting (PF_EXITING: a killed process closes its sockets, which is what a
 * peer notices first, before it becomes a zombie). Remote peers cannot be probed (their
 * transport reports them instead). */
#define ST_COMM_PF_EXITING 0x4u
int st_comm_peer_exited(const st_comm_t *comm, int r)
{
    char  path[64], line[512], *end;
    pid_t pid = (pid_t)comm->peers[r].pid;
    FILE *f;
    int   gone = 0;

    if (!comm->peers[r].same_pidns || pid <= 0) {
        return 0;
    }
    if (kill(pid, 0) != 0) {
        return errno == ESRCH; /* EPERM: alive, another user's */
    }
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    f = fopen(path, "r");
    if (f == NULL) {
        return errno == ENOENT;
    }
    if (fgets(line, sizeof(line), f) != NULL && (end = strrchr(line, ')')) != NULL &&
        end[1] == ' ') {
        char     state = ' ';
        unsigned flags = 0;

        /* after the name: state ppid pgrp session tty_nr tpgid flags */
        if (sscanf(end + 2, "%c %*d %*d %*d %*d %*d %u", &state, &flags) == 2) {
            gone = (state == 'Z' || state == 'X' || (flags & ST_COMM_PF_EXITING) != 0);
        }
    }
    fclose(f);
    return gone;
}

/* After a timeout or a remote error: the call may have waited for a live rank that itself waits
 * for the dead one, so name every rank known to have exited, in the log and in the caller's last
 * error (strataGetLastError). */
static void st_comm_name_dead(st_comm_t *comm)
{
    char        list[160] = "", news[160] = "", one[48];
    size_t      len = 0, nlen = 0;
    int         ndead = 0, nnew = 0;
    const char *said = st_log_last_error();

    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank || !st_comm_peer_exited(comm, r)) {
            continue;
        }
        snprintf(one, sizeof(one), "rank %d (pid %u)", r, comm->peers[r].pid);
        ndead++;
        if (len < sizeof(list)) {
            len += (size_t)snprintf(list + len, sizeof(list) - len, "%s%s", ndead > 1 ? ", " : "",
                                    one);
        }
        /* the error may have named it already ("rank 2 (pid 77), which it waits for, has
         * exited"): not twice */
        if ((said == NULL || strstr(said, one) == NULL) && nlen < sizeof(news)) {
            nnew++;
            nlen += (size_t)snprintf(news + nlen, sizeof(news) - nlen, "%s%s", nnew > 1 ? ", " : "",
                                     one);
        }
    }
    if (ndead == 0) {
        return;
    }
    st_warn(ST_SUB_COLL, "%s rank %d: %s %s exited", comm->name, comm->rank, list,
            ndead > 1 ? "have" : "has");
    if (nnew > 0) {
        st_log_append_error("; %s %s exited", news, nnew > 1 ? "have" : "has");
    }
}

/* ---- failure notices ----------------------------------------------------------------------
 * One message (who, and why in one line) sent by the first rank whose operation fails, to every
 * other rank: O(nranks) messages once per failure, nothing while all is well (no heartbeats).
 * Every rank keeps one any-source receive posted per net context for it; a rank that learns of
 * the failure from a notice does not send one itself. Detection time: the sender's own (a
 * transport error about 1 s after a peer dies, a same-host peer's exit within 1 s of the wait,
 * a mismatch or a truncation at once) plus one message, plus the waiting rank's grace
 * (ST_EXEC_NOTICE_GRACE_S in exec.c), which lets a rank that can still make progress finish
 * with its own, more precise error. */
typedef struct st_notice {
    int32_t rank;
    int32_t status;
    char    msg[488]; /* a failure's line with its transport's reason (verbs: the work
                       * completion's status, QP and likely cause) */
} st_notice_t;

struct st_notice_state {
    int            nctx;
    st_net_ctx_t  *ctx[2];
    st_notice_t    in[2];
    st_request_t   rreq[2];
    int            sent;
    st_notice_t    out;
    st_request_t  *sreq;   /* [nranks] */
};

void st_comm_notice_start(st_comm_t *comm)
{
    struct st_notice_state *ns = comm->notice;
    st_net_ctx_t           *ctxs[2];
    int                     nctx;

    if (comm->nranks == 1 || comm->net->irecv_any == NULL) {
        return;
    }
    if (ns == NULL) {
        ns = calloc(1, sizeof(*ns));
        if (ns == NULL || (ns->sreq = calloc((size_t)comm->nranks, sizeof(*ns->sreq))) == NULL) {
            free(ns);
            st_warn(ST_SUB_INIT, "%s rank %d: no memory for failure notices: peers' failures "
                    "will show at the deadline", comm->name, comm->rank);
            return;
        }
        for (int r = 0; r < comm->nranks; r++) {
            ns->sreq[r].done = 1;
        }
        comm->notice = ns;
    }
    /* a receive on every context not covered yet (called again once the rail's is open) */
    nctx = st_comm_net_ctxs(comm, ctxs);
    for (int i = ns->nctx; i < nctx; i++) {
        ns->ctx[i] = ctxs[i];
        if (comm->net->irecv_any(ns->ctx[i], &ns->in[i], sizeof(ns->in[i]), st_tag_notice(),
                                 &ns->rreq[i]) != ST_OK) {
            ns->rreq[i].done   = 1;
            ns->rreq[i].status = ST_ERR_CANCELED;
        }
    }
    ns->nctx = nctx;
}

void st_comm_notice_poll(st_comm_t *comm)
{
    struct st_notice_state *ns = comm->notice;

    if (ns == NULL || comm->notice_at > 0) {
        return;
    }
    for (int i = 0; i < ns->nctx; i++) {
        const st_notice_t *in = &ns->in[i];

        if (!ns->rreq[i].done || ns->rreq[i].status != ST_OK) {
            continue;
        }
        comm->notice_rank   = (in->rank >= 0 && in->rank < comm->nranks) ? in->rank : -1;
        comm->notice_result = in->status;
        snprintf(comm->notice_msg, sizeof(comm->notice_msg), "%.*s",
                 (int)strnlen(in->msg, sizeof(in->msg)), in->msg);
        for (char *c = comm->notice_msg; *c != '\0'; c++) { /* printable: it goes to our log */
            *c = (*c < 0x20 || *c > 0x7e) ? '?' : *c;
        }
        comm->notice_at = st_time_now();
        st_warn(ST_SUB_COLL, "%s rank %d: rank %d reports that the communicator cannot "
                "complete: %s", comm->name, comm->rank, comm->notice_rank, comm->notice_msg);
        return;
    }
}

void st_comm_notice_send(st_comm_t *comm, const char *why)
{
    struct st_notice_state *ns = comm->notice;
    char                    keep[512];

    if (ns == NULL || ns->sent || comm->notice_at > 0) {
        return;
    }
    ns->sent       = 1;
    ns->out.rank   = comm->rank;
    ns->out.status = (int32_t)comm->async_error;
    snprintf(ns->out.msg, sizeof(ns->out.msg), "%s", why != NULL ? why : st_log_last_error());
    /* a send to a peer that is gone fails and logs; the caller's last error must stay its own */
    snprintf(keep, sizeof(keep), "%s", st_log_last_error());
    for (int r = 0; r < comm->nranks; r++) {
        if (r == comm->rank || comm->eps[r] == NULL || st_comm_peer_exited(comm, r)) {
            continue;
        }
        if (comm->net->isend(comm->eps[r], &ns->out, sizeof(ns->out), st_tag_notice(), NULL,
                             &ns->sreq[r]) != ST_OK) {
            ns->sreq[r].done = 1;
        }
    }
    st_log_clear_error();
    if (keep[0] != '\0') {
        st_log_append_error("%s", keep);
    }
    st_debug(ST_SUB_COLL, "%s rank %d: failure notice sent to the other ranks", comm->name,
             comm->rank);
}

void st_comm_notice_stop(st_comm_t *comm)
{
    struct st_notice_state *ns = comm->notice;
    st_request_t          **pend;
    int                     npend = 0;

    if (ns == NULL) {
        return;
    }
    pend = malloc((size_t)(comm->nranks + 2) * sizeof(*pend));
    /* a made communicator failed by the ranks' wrong calls (strataInvalidUsage: a mismatch):
     * the own notice, if still pending, first gets up to a second to leave (local completion;
     * the flush close of st_api_destroy then delivers it): cancelled at once, a peer slower to
     * read would see only the broken connection (CI: 'Endpoint timeout' in place of the
     * mismatch). Not after other failures (a peer may be dead), not for init's failures (their
     * own timing), not on abort (at once). */
    for (int r = 0; r < comm->nranks && pend != NULL && comm->made &&
                    comm->state != ST_COMM_ABORTED && comm->async_error == strataInvalidUsage;
         r++) {
        if (!ns->sreq[r].done) {
            pend[npend++] = &ns->sreq[r];
        }
    }
    if (npend > 0) {
        (void)st_exec_drain(comm, pend, npend, 1.0);
    }
    npend = 0;
    for (int i = 0; i < ns->nctx; i++) {
        if (!ns->rreq[i].done) {
            comm->net->cancel(ns->ctx[i], &ns->rreq[i], 0);
            if (pend != NULL) {
                pend[npend++] = &ns->rreq[i];
            }
        }
    }
    for (int r = 0; r < comm->nranks; r++) {
        if (!ns->sreq[r].done) {
            comm->net->cancel(comm->net_ctx, &ns->sreq[r], 1);
            if (pend != NULL) {
                pend[npend++] = &ns->sreq[r];
            }
        }
    }
    if (pend == NULL || (npend > 0 && !st_exec_drain(comm, pend, npend, 1.0))) {
        /* the transport still holds them: leak rather than free what it may write */
        free(pend);
        comm->notice = NULL;
        return;
    }
    free(pend);
    free(ns->sreq);
    free(ns);
    comm->notice = NULL;
}

void st_comm_set_error(st_comm_t *comm, st_status_t status)
{
    int expected = strataSuccess;
    int first;

    first = __atomic_compare_exchange_n(&comm->async_error, &expected,
                                        st_status_to_result(status), 0, __ATOMIC_SEQ_CST,
                                        __ATOMIC_SEQ_CST);
    if (comm->state == ST_COMM_READY) {
        comm->state = ST_COMM_FAILED;
        if (first && (status == ST_ERR_TIMEOUT || status == ST_ERR_REMOTE)) {
            st_comm_name_dead(comm);
        }
    }
}

int st_comm_order_ready(st_comm_t *comm, uint64_t seq)
{
    return __atomic_load_n(&comm->coll_done, __ATOMIC_ACQUIRE) == seq;
}

void st_comm_order_done(st_comm_t *comm, uint64_t seq)
{
    pthread_mutex_lock(&comm->order_lock);
    if (seq == comm->coll_done) {
        uint64_t done = comm->coll_done + 1;

        /* and every later one that finished out of turn */
        while (comm->done_ahead & 1) {
            comm->done_ahead >>= 1;
            done++;
        }
        comm->done_ahead >>= 1;
        __atomic_store_n(&comm->coll_done, done, __ATOMIC_RELEASE);
    } else if (seq > comm->coll_done && seq - comm->coll_done <= 64) {
        comm->done_ahead |= UINT64_C(1) << (seq - comm->coll_done - 1);
    } else if (seq > comm->coll_done) {
        /* more than 64 collectives queued before one that could not be queued: the order
         * cannot be kept; fail the communicator rather than let later calls wait forever */
        st_error(ST_SUB_COLL, "%s rank %d: collective #%llu ended more than 64 ahead of #%llu",
                 comm->name, comm->rank, (unsigned long long)seq,
                 (unsigned long long)comm->coll_done);
        st_comm_set_error(comm, ST_ERR_INTERNAL);
    }
    pthread_mutex_unlock(&comm->order_lock);
}

st_status_t st_comm_progress(st_comm_t *comm)
{
    st_status_t status = comm->net->progress(comm->net_ctx);

    if (comm->rail_ctx != NULL && comm->net->progress(comm->rail_ctx) == ST_OK) {
        status = ST_OK;
    }
    return status;
}

int st_comm_net_ctxs(const st_comm_t *comm, st_net_ctx_t **ctxs)
{
    int n = 0;

    ctxs[n++] = comm->net_ctx;
    if (comm->rail_ctx != NULL) {
        ctxs[n++] = comm->rail_ctx;
    }
    return n;
}

struct st_comm_deferred {
    void (*fn)(void *);
    void  *arg;
    struct st_comm_deferred *next;
};

void st_comm_defer(st_comm_t *comm, void (*fn)(void *), void *arg)
{
    struct st_comm_deferred *d = malloc(sizeof(*d));

    if (d == NULL) {
        st_warn(ST_SUB_COLL, "%s rank %d: no memory to record a cancelled operation's buffers; "
                "leaking them", comm->name, comm->rank);
        return;
    }
    d->fn   = fn;
    d->arg  = arg;
    d->next = comm->deferred;
    comm->deferred = d;
}

void st_comm_run_deferred(st_comm_t *comm)
{
    while (comm->deferred != NULL) {
        struct st_comm_deferred *d = comm->deferred;

        comm->deferred = d->next;
        d->fn(d->arg);
        free(d);
    }
}
