/*
 * init.c - the communicator's lifecycle: create (bootstrap, transport, endpoints, the wire-up
 * check, rails, windows, tuning), split, abort and free.
 *
 * Each rank publishes a record (its topology: node identity, CPUs and NUMA, GPU, nearest NIC; its
 * pid; two transport addresses) and receives every rank's, from which every rank builds the same
 * hierarchy (topo/topo.h: nodes, local ranks, rails, ring order), on every communicator, split
 * ones included. A peer on another node is connected with the network-only address, so its bytes
 * cross the network even when the "nodes" are namespaces of one host; a peer on the same node gets
 * the full address (shared memory where the transport has it).
 */
#include "config.h"
#include "core/init.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <net/if.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "base/sys.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "core/bootstrap.h"
#include "core/enqueue.h"
#include "device/dev.h"
#include "engine/exec.h"
#include "engine/mismatch.h"
#include "topo/topo.h"
#include "tune/policy.h"
#include "tune/tune.h"

#define ST_ADDR_MAX 2048 /* bytes per published transport address */

/* The record every rank publishes (fixed size: the bootstrap and the split's all-gather move
 * equal-sized blobs). */
typedef struct st_rank_record {
    st_topo_rec_t topo;        /* node identity, CPUs, NUMA, GPU, NIC (topo/topo.h) */
    uint32_t      pid;
    char          pidns[64];   /* st_comm_pidns: who may probe pid */
    int32_t       color;       /* split only */
    int32_t       key;         /* split only */
    int32_t       rank;        /* rank in the parent (split) or the id */
    char          net[16];     /* the net transport the rank opened (STRATA_NET=auto may differ) */
    uint32_t      addr_len[2]; /* ST_NET_ADDR_ALL, ST_NET_ADDR_NET_ONLY */
    uint8_t       addr[2][ST_ADDR_MAX];
} st_rank_record_t;

void st_comm_cancel(st_comm_t *comm)
{
    char why[96];

    if (comm->state == ST_COMM_READY) { /* peers still waiting in a call learn it at once */
        snprintf(why, sizeof(why), "rank %d aborted the communicator (strataCommAbort)",
                 comm->rank);
        pthread_mutex_lock(&comm->lock);
        st_comm_notice_send(comm, why);
        pthread_mutex_unlock(&comm->lock);
    }
    if (comm->root_started && comm->state == ST_COMM_INITIALIZING) {
        st_bootstrap_root_abort(comm->root_secret); /* its port must serve the next init */
    }
    comm->state = ST_COMM_ABORTED; /* operations and the wire-up check notice within 100 ms */
    if (comm->cancel_fd >= 0 && eventfd_write(comm->cancel_fd, 1) != 0) {
        st_debug(ST_SUB_INIT, "%s: eventfd_write failed: %s", comm->name, strerror(errno));
    }
}

st_comm_t *st_comm_alloc(int rank, int nranks, double op_timeout, const char *name)
{
    st_comm_t *comm = calloc(1, sizeof(*comm));

    if (comm == NULL) {
        return NULL;
    }
    comm->magic        = ST_COMM_MAGIC;
    comm->rank         = rank;
    comm->nranks       = nranks;
    comm->timeout      = op_timeout;
    comm->state        = ST_COMM_INITIALIZING;
    comm->eps          = calloc((size_t)nranks, sizeof(*comm->eps));
    comm->peers        = calloc((size_t)nranks, sizeof(*comm->peers));
    comm->p2p_send_seq = calloc((size_t)nranks, sizeof(*comm->p2p_send_seq));
    comm->p2p_recv_seq = calloc((size_t)nranks, sizeof(*comm->p2p_recv_seq));
    snprintf(comm->name, sizeof(comm->name), "%s", name ? name : "strata");
    pthread_mutex_init(&comm->lock, NULL);
    pthread_mutex_init(&comm->order_lock, NULL);
    comm->cancel_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK); /* -1: abort waits for deadlines */
    /* NCCL's rule: a communicator belongs to the device current when it is made */
    comm->dev_id = (st_dev() != NULL) ? st_dev()->current() : -1;
    if (comm->eps == NULL || comm->peers == NULL || comm->p2p_send_seq == NULL ||
        comm->p2p_recv_seq == NULL) {
        st_comm_free(comm, 1);
        return NULL;
    }
    return comm;
}

/* Detects this rank's topology, opens the net transport (STRATA_NET) for comm and writes this
 * rank's record. */
static st_status_t st_comm_open_net(st_comm_t *comm, st_rank_record_t *rec)
{
    st_net_config_t cfg;
    const char     *want = st_core_config.net;
    st_status_t     status = ST_ERR_NO_DEVICE;
    size_t          len;

    memset(rec, 0, sizeof(*rec));
    /* first: a bad STRATA_TOPO_FILE or STRATA_GPU_BUSID fails before any transport is opened */
    ST_CHECK(st_topo_detect(&rec->topo));
    memset(&cfg, 0, sizeof(cfg));
    cfg.rank   = comm->rank;
    cfg.nranks = comm->nranks;
    snprintf(cfg.name, sizeof(cfg.name), "%s", comm->name);
    for (const st_net_ops_t *const *tl = comm->tl->net; *tl != NULL; tl++) {
        if (want != NULL && strcmp(want, "auto") != 0 && strcmp(want, (*tl)->name) != 0) {
            continue;
        }
        status = (*tl)->open(&cfg, &comm->net_ctx);
        if (status == ST_OK) {
            /* an earlier transport's reason to stand aside (verbs without an HCA, said at INFO)
             * is no error of this init */
            st_log_clear_error();
            comm->net = *tl;
            break;
        }
    }
    if (comm->net == NULL) {
        if (want != NULL && strcmp(want, "auto") != 0 && st_net_find(comm->tl->net, want) ==
                                                             NULL) {
            char names[128];
            size_t off = 0;

            names[0] = '\0';
            for (const st_net_ops_t *const *t = comm->tl->net; *t != NULL; t++) {
                off += (size_t)snprintf(names + off, off < sizeof(names) ? sizeof(names) - off : 0,
                                        "%s%s", off ? ", " : "", (*t)->name);
            }
            st_error(ST_SUB_INIT, "STRATA_NET '%s' names no transport of this build (auto, %s)",
                     want, names);
            return ST_ERR_INVALID;
        }
        char why[256];

        /* the transport said why (logged); keep its words in the caller's last error */
        snprintf(why, sizeof(why), "%s", st_log_last_error());
        st_error(ST_SUB_INIT, "no usable net transport (STRATA_NET '%s'): %s", want ? want : "",
                 why[0] ? why : "no transport opened");
        return (status < 0) ? status : ST_ERR_NO_DEVICE;
    }
    rec->pid = (uint32_t)getpid();
    st_comm_pidns(rec->pidns, sizeof(rec->pidns));
    snprintf(rec->net, sizeof(rec->net), "%s", comm->net->name);
    for (int scope = 0; scope < 2; scope++) {
        len = ST_ADDR_MAX;
        status = comm->net->address(comm->net_ctx, (st_net_addr_scope_t)scope, rec->addr[scope],
                                    &len);
        if (status != ST_OK) {
            st_error(ST_SUB_INIT, "%s address of %zu B exceeds the %d B a record holds",
                     comm->net->name, len, ST_ADDR_MAX);
            return ST_ERR_INTERNAL;
        }
        rec->addr_len[scope] = (uint32_t)len;
    }
    return ST_OK;
}

/* Builds comm's hierarchy from the records; recs[r] is rank r's. */
static st_status_t st_comm_build_topo(st_comm_t *comm, const st_rank_record_t *const *recs)
{
    const st_topo_rec_t **topos = malloc((size_t)comm->nranks * sizeof(*topos));
    const st_topo_rec_t  *me;
    st_status_t           status;

    if (topos == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (int r = 0; r < comm->nranks; r++) {
        topos[r] = &recs[r]->topo;
    }
    status = st_topo_create(topos, comm->nranks, &comm->topo);
    free(topos);
    if (status != ST_OK) {
        return status;
    }
    comm->node   = st_topo_node(comm->topo, comm->rank);
    comm->nnodes = st_topo_nnodes(comm->topo);
    me           = st_topo_rec(comm->topo, comm->rank);
    st_info(ST_SUB_TOPO, "%s: rank %d node %d local %d/%d cpus %s numa %s gpu %s nic %s rail %d "
            "ring %d", comm->name, comm->rank, comm->node,
            st_topo_local_rank(comm->topo, comm->rank), st_topo_local_size(comm->topo, comm->node),
            me->cpus, me->numas, me->gpu[0] ? me->gpu : "-", me->nic[0] ? me->nic : "-",
            st_topo_local_rank(comm->topo, comm->rank), st_topo_ring_pos(comm->topo, comm->rank));
    st_topo_dump(comm->topo, comm->rank);
    return ST_OK;
}

/* A collective the library runs for itself at init and split: the flat ring over comm's net (the
 * windows may not exist yet), on the comm's sequence numbers like any call. */
static st_status_t st_comm_ring_coll(st_comm_t *comm, st_coll_type_t type, const void *send,
                                     void *recv, size_t count, strataDataType_t dtype,
                                     strataRedOp_t op)
{
    st_coll_args_t args;

    memset(&args, 0, sizeof(args));
    args.type     = type;
    args.comm     = comm;
    args.sendbuff = send;
    args.recvbuff = recv;
    args.count    = count;
    args.dtype    = dtype;
    args.algo     = ST_ALGO_RING;
    /* connecting (init, a split's child): the ranks may not agree on STRATA_CHECK_MISMATCH yet;
     * on a ready communicator (a split's exchange on the parent) the check runs as for users */
    args.unchecked = (comm->state != ST_COMM_READY);
    if (st_coll_info(type)->reduces) {
        ST_CHECK(st_redop_init(&args.redop, op, dtype, comm->nranks));
    }
    pthread_mutex_lock(&comm->lock);
    args.seq = comm->coll_seq++;
    pthread_mutex_unlock(&comm->lock);
    return st_coll_run(&args, 1);
}

/* An all-reduce of n (at most 4) int32 with op, in place. */
static st_status_t st_comm_allreduce_i32(st_comm_t *comm, int32_t *values, int n,
                                         strataRedOp_t op)
{
    int32_t in[4];

    if (comm->nranks == 1) {
        return ST_OK;
    }
    memcpy(in, values, (size_t)n * sizeof(*in));
    return st_comm_ring_coll(comm, ST_COLL_ALLREDUCE, in, values, (size_t)n, strataInt32, op);
}

/* The agreement of st_comm_agree on the values' first element, the others (n <= 2) reduced with
 * it; a rank that learns of another's failure names the lowest rank that failed. */
static st_status_t st_comm_agree_with(st_comm_t *comm, st_status_t status, int32_t *values, int n)
{
    int32_t     v[4];
    st_status_t ret;

    v[0] = (int32_t)status;
    memcpy(v + 1, values + 1, (size_t)(n - 1) * sizeof(*v));
    v[n] = (status < 0) ? comm->rank : INT32_MAX; /* the lowest failing rank */
    ret = st_comm_allreduce_i32(comm, v, n + 1, strataMin);
    if (ret != ST_OK) {
        return ret;
    }
    memcpy(values, v, (size_t)n * sizeof(*v));
    if (v[0] < 0 && status == ST_OK) {
        st_error(ST_SUB_INIT, "%s rank %d: another rank failed: rank %d (see its log): %s",
                 comm->name, comm->rank, (int)v[n], st_status_str((st_status_t)v[0]));
    }
    return (v[0] < 0) ? (st_status_t)v[0] : ST_OK;
}

st_status_t st_comm_agree(st_comm_t *comm, st_status_t status)
{
    int32_t value;

    return st_comm_agree_with(comm, status, &value, 1);
}

/* The device of rail `rail` into buf: the rail-th entry (modulo their number) of
 * STRATA_RAIL_IFNAMES, or where that is unset the transport's own list (net->rail_devices: the
 * verbs transport's active HCA ports, one rail per HCA) when it has two or more: there the
 * entry of the rank's nearest NIC from the topology (nic: topo.h's record, "" when unknown;
 * NCCL's GPU -> NIC affinity), else the rail-th. 0 when there is none (every rail uses the
 * transport's default devices). */
static int st_comm_rail_ifname(const st_net_ops_t *net, int rail, const char *nic, char *buf,
                               size_t len)
{
    const char *list = st_core_config.rail_ifnames;
    char        devs[1024];
    int         n = 0, pick;
    const char *p;

    if ((list == NULL || list[0] == '\0') && net != NULL &&
        net->rail_devices(devs, sizeof(devs)) == ST_OK && strchr(devs, ',') != NULL) {
        list = devs;
        for (p = list; nic != NULL && nic[0] != '\0' && *p != '\0';) {
            size_t tok = strcspn(p, ","), skip = (*p == '=');
            size_t name = strcspn(p + skip, ",:");

            if (name == strlen(nic) && strncmp(p + skip, nic, name) == 0) {
                snprintf(buf, len, "%.*s", (int)tok, p);
                return 1;
            }
            p += tok + (p[tok] == ',');
        }
    }
    if (list == NULL || list[0] == '\0') {
        return 0;
    }
    for (p = list; *p != '\0'; p++) {
        n += (*p == ',');
    }
    n++;
    pick = rail % n;
    for (p = list; pick > 0; p++) {
        pick -= (*p == ',');
    }
    snprintf(buf, len, "%.*s", (int)strcspn(p, ","), p);
    return buf[0] != '\0';
}

typedef struct st_rail_addr {
    uint32_t len;
    uint8_t  addr[ST_ADDR_MAX];
} st_rail_addr_t;

/* The path from this rank to rank r through ctx, for messages: a rail's interfaces on both ends
 * (rail >= 0), or the transport's default devices (rail < 0). */
static void st_comm_path(const st_comm_t *comm, st_net_ctx_t *ctx, int rail, int r, char *buf,
                         size_t len)
{
    char mine[96], theirs[64];
    int  peer_rail = st_topo_local_rank(comm->topo, r);

    if (rail >= 0 &&
        st_comm_rail_ifname(comm->net, rail, st_topo_rec(comm->topo, comm->rank)->nic, mine,
                            sizeof(mine)) &&
        st_comm_rail_ifname(comm->net, peer_rail, st_topo_rec(comm->topo, r)->nic, theirs,
                            sizeof(theirs))) {
        snprintf(buf, len, "rail %d (interface %.48s) to rank %d (node %.64s, rail %d, "
                 "interface %.48s)",
                 rail, mine, r, comm->peers[r].node_id, peer_rail, theirs);
    } else {
        comm->net->describe(ctx, mine, sizeof(mine));
        snprintf(buf, len, "%s's default path (%.96s) to rank %d (node %.64s)", comm->net->name, mine,
                 r, comm->peers[r].node_id);
    }
}

/* STRATA_CONNECT_TIMEOUT as the wire-up check uses it: 0 means no deadline of its own (init's,
 * as STRATA_TIMEOUT=0 means none at all); below ST_COMM_CONNECT_MIN_S it is raised, said once:
 * a check that gives up while healthy peers are still connecting only turns a working network
 * into a failed init (and UCX 1.13 may then assert while its half-open connections close). At
 * most the communicator's current deadline. */
#define ST_COMM_CONNECT_MIN_S 1.0
#define ST_COMM_INIT_DEADLINE "init's deadline: STRATA_BOOTSTRAP_TIMEOUT or STRATA_TIMEOUT"
static double st_comm_connect_limit(const st_comm_t *comm, const char **which_p)
{
    double given = st_core_config.connect_timeout;
    double limit = given;

    *which_p = "STRATA_CONNECT_TIMEOUT"; /* the deadline the check runs under, for its message */
    if (limit <= 0) {
        *which_p = ST_COMM_INIT_DEADLINE;
        return comm->timeout;
    }
    if (limit < ST_COMM_CONNECT_MIN_S) {
        limit = ST_COMM_CONNECT_MIN_S;
        st_param_adjusted("STRATA_CONNECT_TIMEOUT", ST_CFG_TIME, &given, &limit,
                          "a wire-up check shorter than that fails healthy peers still "
                          "connecting");
    }
    if (comm->timeout > 0 && limit > comm->timeout) {
        given = limit;
        limit    = comm->timeout;
        *which_p = ST_COMM_INIT_DEADLINE;
        st_param_adjusted("STRATA_CONNECT_TIMEOUT", ST_CFG_TIME, &given, &limit,
                          "the check ends within init's deadline (STRATA_BOOTSTRAP_TIMEOUT, "
                          "STRATA_TIMEOUT)");
    }
    return limit;
}

/* The wire-up check: one 8-byte message each way between this rank and every peer on another
 * node, over eps (the default endpoints, or a rail's: rail >= 0) of ctx, within
 * STRATA_CONNECT_TIMEOUT (at most the communicator's current deadline). Endpoints are created
 * locally (UCX connects on first use), so a peer that cannot be reached would otherwise show only
 * in the first collective, after its whole timeout. Every unanswered or failed peer is logged with
 * its path; ST_ERR_TIMEOUT (no answer) or ST_ERR_REMOTE / ST_ERR_IO (the connection failed).
 * Every rank calls it at the same point (it takes a sequence number). Not collective itself: the
 * caller agrees on the result. */
static st_status_t st_comm_wireup(st_comm_t *comm, st_net_ctx_t *ctx, st_net_ep_t *const *eps,
                                  int rail)
{
    int           n = comm->nranks, npeers = 0, left;
    uint32_t     *got, *hello; /* got[2r..2r+1]: rank r's message; hello = got + 2n: ours */
    st_request_t *reqs;
    st_request_t **live;
    st_status_t   status = ST_OK;
    const char   *which;
    double        limit = st_comm_connect_limit(comm, &which), deadline;
    uint64_t      tag, seq;
    char          path[384];

    pthread_mutex_lock(&comm->lock);
    seq = comm->coll_seq++;
    pthread_mutex_unlock(&comm->lock);
    tag = st_tag_coll(seq, 0);
    st_comm_order_done(comm, seq); /* init is sequential: it runs now, and nothing waits on it */
    if (comm->nnodes == 1) {
        return ST_OK;
    }
    got  = calloc((size_t)n + 1, 2 * sizeof(*got));
    reqs = calloc((size_t)n, 2 * sizeof(*reqs));
    live = calloc((size_t)n, 2 * sizeof(*live));
    if (got == NULL || reqs == NULL || live == NULL) {
        free(got);
        free(reqs);
        free(live);
        return ST_ERR_NO_MEMORY;
    }
    hello    = got + 2 * n;
    hello[0] = (uint32_t)comm->rank;
    hello[1] = (uint32_t)comm->uid;
    for (int r = 0; r < n; r++) {
        st_request_t *rreq = &reqs[2 * r], *sreq = &reqs[2 * r + 1];

        rreq->done = sreq->done = 1;
        if (st_topo_node(comm->topo, r) == comm->node || eps[r] == NULL) {
            continue;
        }
        npeers++;
        status = comm->net->irecv(eps[r], &got[2 * r], 2 * sizeof(*got), tag, NULL, rreq);
        if (status == ST_OK) {
            live[2 * r] = rreq;
            status = comm->net->isend(eps[r], hello, 2 * sizeof(*hello), tag, NULL, sreq);
        }
        if (status != ST_OK) {
            st_comm_path(comm, ctx, rail, r, path, sizeof(path));
            st_error(ST_SUB_INIT, "%s rank %d: wire-up over %s: cannot post: %s", comm->name,
                     comm->rank, path, st_status_str(status));
            break;
        }
        live[2 * r + 1] = sreq;
    }
    deadline = st_time_now() + limit;
    for (left = 1; status == ST_OK && left > 0;) {
        st_net_ctx_t *ctxs[2];
        int           nctx = st_comm_net_ctxs(comm, ctxs), moved = 0;

        for (int i = 0; i < nctx; i++) {
            moved |= (comm->net->progress(ctxs[i]) == ST_OK);
        }
        left = 0;
        for (int i = 0; i < 2 * n; i++) {
            left += (live[i] != NULL && !live[i]->done);
        }
        if (left == 0) {
            break;
        }
        if (st_time_now() > deadline) {
            status = ST_ERR_TIMEOUT;
            break;
        }
        if (comm->state == ST_COMM_ABORTED) {
            st_error(ST_SUB_INIT, "%s rank %d: wire-up aborted (strataCommAbort)", comm->name,
                     comm->rank);
            status = ST_ERR_CANCELED;
            break;
        }
        if (moved) {
            continue;
        }
        /* nothing moved: sleep on the transports' event fds a little */
        {
            struct pollfd fds[2];
            int           nfds = 0;

            for (int i = 0; i < nctx; i++) {
                int fd = comm->net->event_fd(ctxs[i]);

                if (fd >= 0 && comm->net->arm(ctxs[i]) == ST_OK) {
                    fds[nfds].fd = fd;
                    fds[nfds].events = POLLIN;
                    nfds++;
                }
            }
            if (nfds == nctx) {
                poll(fds, (nfds_t)nfds, 10);
            }
        }
    }
    /* name every peer that failed or did not answer */
    for (int r = 0; r < n; r++) {
        st_request_t *rreq = &reqs[2 * r], *sreq = &reqs[2 * r + 1];
        const char   *what = NULL;
        st_status_t   why = ST_OK;

        if (live[2 * r] == NULL) {
            continue;
        }
        if (!sreq->done || !rreq->done) {
            if (status != ST_ERR_TIMEOUT) {
                continue; /* not waited for: posting failed (said above) */
            }
            what = !sreq->done ? "no answer (its message was not taken)" : "no message from it";
            why  = ST_ERR_TIMEOUT;
        } else if (sreq->status != ST_OK || rreq->status != ST_OK) {
            what = (sreq->status != ST_OK) ? "the send failed" : "the receive failed";
            why  = (sreq->status != ST_OK) ? sreq->status : rreq->status;
        } else if (got[2 * r] != (uint32_t)r || got[2 * r + 1] != (uint32_t)comm->uid) {
            what = "a message of another communicator or rank";
            why  = ST_ERR_USAGE;
        }
        if (what == NULL) {
            continue;
        }
        st_comm_path(comm, ctx, rail, r, path, sizeof(path));
        if (why == ST_ERR_TIMEOUT) {
            st_error(ST_SUB_INIT, "%s rank %d: rank %d cannot be reached over %s: %s within "
                     "%.3g s (%s)", comm->name, comm->rank, r, path, what, limit,
                     which);
        } else {
            st_error(ST_SUB_INIT, "%s rank %d: rank %d cannot be reached over %s: %s: %s",
                     comm->name, comm->rank, r, path, what, st_status_str(why));
        }
        if (status == ST_OK || status == ST_ERR_TIMEOUT) {
            status = why;
        }
    }
    if (status != ST_OK) {
        int npend = 0;

        for (int i = 0; i < 2 * n; i++) { /* live[] compacted to the requests still in flight */
            if (live[i] != NULL && !live[i]->done) {
                /* not forced: breaking half-open connections here is left to the free that
                 * follows the failed init (one place that closes them) */
                comm->net->cancel(ctx, live[i], 0);
                live[npend++] = live[i];
            }
        }
        if (npend > 0 && !st_exec_drain(comm, live, npend, 1.0)) {
            /* the transport still holds them: leak rather than free what it may write */
            got = NULL;
            reqs = NULL;
        }
    }
    st_debug(ST_SUB_INIT, "%s rank %d: wire-up over %s with %d peers: %s", comm->name,
             comm->rank, rail >= 0 ? "a rail" : "the default path", npeers, st_status_str(status));
    free(got);
    free(reqs);
    free(live);
    return status;
}

/* Rails: with STRATA_RAIL_IFNAMES set (or, unset, a transport with several devices of its own:
 * verbs with two HCAs) and several nodes, this rank opens a second net context
 * limited to its rail's interface (rail = local rank), publishes its network-only address
 * (an all-gather over the default endpoints), connects every peer on another node through it and
 * checks each connection with one message each way (st_comm_wireup); only when every rank's
 * rail works do the rail endpoints replace the default ones, so that local rank l of every node
 * sends through interface l. The agreements run over the default endpoints, which work (the
 * wire-up check before passed), so a broken rail fails init on every rank at once. A missing
 * interface, or one that is down or has no carrier, is named before anything is opened.
 * Collective over comm. */
static st_status_t st_comm_open_rails(st_comm_t *comm)
{
    st_net_config_t cfg;
    st_rail_addr_t *table = NULL, mine;
    st_net_ep_t   **eps = NULL;
    st_status_t     status;
    char            ifname[64], why[256], path[384];
    int             rail = st_topo_local_rank(comm->topo, comm->rank);

    if (comm->nnodes == 1 ||
        !st_comm_rail_ifname(comm->net, rail, st_topo_rec(comm->topo, comm->rank)->nic, ifname,
                             sizeof(ifname))) {
        return ST_OK;
    }
    memset(&cfg, 0, sizeof(cfg));
    cfg.rank    = comm->rank;
    cfg.nranks  = comm->nranks;
    cfg.devices = ifname;
    snprintf(cfg.name, sizeof(cfg.name), "%s", comm->name);
    memset(&mine, 0, sizeof(mine));
    /* a network interface name (an HCA port of the verbs transport, mlx5_0:1, is not one) */
    if (strchr(ifname, ':') == NULL && strcmp(comm->net->name, "verbs") != 0) {
        st_socket_if_state_t state = st_socket_if_state(ifname, why, sizeof(why));

        if (state != ST_SOCKET_IF_UP) {
            st_error(ST_SUB_INIT, "%s rank %d: STRATA_RAIL_IFNAMES: rail %d's interface '%s' %s",
                     comm->name, comm->rank, rail, ifname, why);
            status = (state == ST_SOCKET_IF_MISSING) ? ST_ERR_INVALID : ST_ERR_IO;
            goto agree_open;
        }
    }
    status = comm->net->open(&cfg, &comm->rail_ctx);
    if (status == ST_OK) {
        size_t len = sizeof(mine.addr);

        status = comm->net->address(comm->rail_ctx, ST_NET_ADDR_NET_ONLY, mine.addr, &len);
        mine.len = (uint32_t)len;
        if (status == ST_OK && len == 0) {
            st_error(ST_SUB_INIT, "%s rank %d: rail %d's interface '%s' (STRATA_RAIL_IFNAMES) "
                     "gives %s no network transport", comm->name, comm->rank, rail, ifname,
                     comm->net->name);
            status = ST_ERR_INVALID;
        }
    } else if (status == ST_ERR_NO_DEVICE) {
        /* the transport said why at INFO (verbs: no active HCA port of that name) */
        st_error(ST_SUB_INIT, "%s rank %d: rail %d's device '%s' (STRATA_RAIL_IFNAMES, or the "
                 "transport's list) is no usable %s device here (STRATA_DEBUG=INFO says why)",
                 comm->name, comm->rank, rail, ifname, comm->net->name);
        status = ST_ERR_INVALID;
    }
agree_open:
    ST_CHECK_GOTO(st_comm_agree(comm, status), status, out);
    table = malloc((size_t)comm->nranks * sizeof(*table));
    eps   = calloc((size_t)comm->nranks, sizeof(*eps));
    comm->spare_eps = calloc((size_t)comm->nranks, sizeof(*comm->spare_eps));
    status = (table == NULL || eps == NULL || comm->spare_eps == NULL) ? ST_ERR_NO_MEMORY : ST_OK;
    ST_CHECK_GOTO(st_comm_agree(comm, status), status, out);
    ST_CHECK_GOTO(st_comm_ring_coll(comm, ST_COLL_ALLGATHER, &mine, table, sizeof(mine),
                                    strataUint8, strataSum), status, out);
    for (int r = 0; r < comm->nranks && status == ST_OK; r++) {
        if (st_topo_node(comm->topo, r) == comm->node) {
            continue;
        }
        if (table[r].len == 0 || table[r].len > ST_ADDR_MAX) {
            st_error(ST_SUB_INIT, "rank %d published a bad rail address (%u B)", r, table[r].len);
            status = ST_ERR_USAGE;
            break;
        }
        status = comm->net->connect(comm->rail_ctx, r, table[r].addr, table[r].len,
                                    ST_NET_CONNECT_REMOTE, &eps[r]);
        if (status != ST_OK) {
            snprintf(why, sizeof(why), "%s", st_log_last_error()); /* the transport's words */
            st_comm_path(comm, comm->rail_ctx, rail, r, path, sizeof(path));
            st_error(ST_SUB_INIT, "%s rank %d: cannot connect over %s: %s", comm->name,
                     comm->rank, path, why);
        }
    }
    ST_CHECK_GOTO(st_comm_agree(comm, status), status, out);
    status = st_comm_wireup(comm, comm->rail_ctx, eps, rail);
    ST_CHECK_GOTO(st_comm_agree(comm, status), status, out);
    for (int r = 0; r < comm->nranks; r++) {
        if (eps[r] != NULL) {
            comm->spare_eps[r] = comm->eps[r];
            comm->eps[r]       = eps[r];
            eps[r]             = NULL;
        }
    }
    st_comm_notice_start(comm); /* and on the rail's context, which peers now send to */
    st_info(ST_SUB_INIT, "%s: rank %d sends to other nodes through rail %d's interface %s",
            comm->name, comm->rank, rail, ifname);
out:
    if (eps != NULL) {
        for (int r = 0; r < comm->nranks; r++) {
            if (eps[r] != NULL) {
                comm->net->disconnect(eps[r], 1, 0.5);
            }
        }
    }
    free(eps);
    free(table);
    return status;
}

/* The communicator's tuning (tune/policy.h): every rank decides from its files and environment,
 * then the ranks agree on a digest of the decision; when it differs (a tuning file missing or
 * different on some node), all take the built-in defaults, since algorithms and chunk
 * boundaries must be the same on every rank. Collective over comm. */
static st_status_t st_comm_tune(st_comm_t *comm)
{
    st_tune_layout_t lay = {.name = comm->name, .nnodes = comm->nnodes, .topo = comm->topo,
                            .small_max = ST_INTRA_SMALL_MAX};
    st_status_t      status = st_tune_policy_init(&lay, comm->tune_file, &comm->tune);
    int32_t          v[3];

    /* one round: the status, and the digest's min and max (as min of its negation) */
    v[1] = (int32_t)st_tune_policy_hash(comm->tune);
    v[2] = -v[1];
    ST_CHECK(st_comm_agree_with(comm, status, v, 3));
    if (v[1] != -v[2]) {
        st_warn(ST_SUB_TUNE, "%s: the ranks' tuning differs (a tuning table or fabric profile "
                "missing or different on some node, or different STRATA_PIPELINE_DEPTH, "
                "STRATA_HIER_CHUNK_SIZE or STRATA_RAIL_SHARES): every rank drops its table, "
                "profile and rail shares; STRATA_* values must still be equal on all ranks",
                comm->name);
        st_tune_policy_reset(comm->tune);
    }
    return ST_OK;
}

/* A size setting as its user wrote it: "auto" or bytes. */
static void st_comm_size_str(size_t v, char *buf, size_t len)
{
    if (v == ST_SIZE_AUTO) {
        snprintf(buf, len, "auto");
    } else {
        snprintf(buf, len, "%zu", v);
    }
}

/* A 31-bit digest of a setting's value (FNV-1a over its bytes). */
static int32_t st_comm_digest(const void *p, size_t len)
{
    const unsigned char *b = p;
    uint32_t             h = 2166136261u;

    for (size_t i = 0; i < len; i++) {
        h = (h ^ b[i]) * 16777619u;
    }
    return (int32_t)(h & 0x7fffffff);
}

/* The settings every rank of a communicator must share, because the algorithm of each call, its
 * chunk boundaries and its mismatch check follow from them on every rank alike: compared at init
 * (an all-gather of each rank's digests); ranks that differ in any fail init with ST_ERR_USAGE,
 * all of them, each naming the variables, its own values and a rank with other ones, instead of
 * hanging in the first collective whose algorithm or chunks they would choose differently.
 * STRATA_SMALL_THRESHOLD counts as set or not too (unset, one node takes 128 KiB / local ranks;
 * set, a tuning table yields to it). STRATA_CMA may differ (every call's descriptors agree on
 * it), and so may the tuning files (st_comm_tune agrees on those). */
static st_status_t st_comm_settings_agree(st_comm_t *comm)
{
    const st_core_config_t *c = &st_core_config;
    static const char *const names[] = {"STRATA_ALGO", "STRATA_SMALL_THRESHOLD",
                                        "STRATA_CHECK_MISMATCH", "STRATA_CHUNK_SIZE",
                                        "STRATA_HIER_CHUNK_SIZE", "STRATA_PIPELINE_DEPTH",
                                        "STRATA_RING_CHANNELS"};
    enum { NSET = 7 };
    const char *algo = c->algo != NULL ? c->algo : "";
    int         small_set = st_tune_env_set(ST_TUNE_ENV_SMALL, NULL);
    int32_t     v[NSET], *all;
    char        mine[256], differ[384], st[24], cs[24], hc[24];
    size_t      d = 0;
    st_status_t status;

    v[0] = st_comm_digest(algo, strlen(algo));
    v[1] = st_comm_digest(&c->small_threshold, sizeof(c->small_threshold)) ^ small_set;
    v[2] = st_comm_digest(&c->check_mismatch, sizeof(c->check_mismatch));
    v[3] = st_comm_digest(&c->chunk_size, sizeof(c->chunk_size));
    v[4] = st_comm_digest(&c->hier_chunk_size, sizeof(c->hier_chunk_size));
    v[5] = st_comm_digest(&c->pipeline_depth, sizeof(c->pipeline_depth));
    v[6] = st_comm_digest(&c->ring_channels, sizeof(c->ring_channels));
    if (comm->nranks == 1) {
        return ST_OK;
    }
    all = malloc((size_t)comm->nranks * sizeof(v));
    if (all == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    status = st_comm_ring_coll(comm, ST_COLL_ALLGATHER, v, all, sizeof(v), strataUint8,
                               strataSum);
    differ[0] = '\0';
    for (int i = 0; i < NSET && status == ST_OK; i++) {
        for (int r = 0; r < comm->nranks; r++) {
            if (all[(size_t)r * NSET + (size_t)i] != v[i] && d < sizeof(differ)) {
                d += (size_t)snprintf(differ + d, sizeof(differ) - d, "%s%s (rank %d has another)",
                                      d > 0 ? ", " : "", names[i], r);
                break;
            }
        }
    }
    free(all);
    if (status != ST_OK || differ[0] == '\0') {
        return status;
    }
    st_comm_size_str(c->small_threshold, st, sizeof(st));
    st_comm_size_str(c->chunk_size, cs, sizeof(cs));
    st_comm_size_str(c->hier_chunk_size, hc, sizeof(hc));
    snprintf(mine, sizeof(mine), "ALGO=%s SMALL_THRESHOLD=%s%s CHECK_MISMATCH=%d CHUNK_SIZE=%s "
             "HIER_CHUNK_SIZE=%s PIPELINE_DEPTH=%u RING_CHANNELS=%u", algo[0] ? algo : "auto", st,
             small_set ? "" : " (unset)", c->check_mismatch, cs, hc, c->pipeline_depth,
             c->ring_channels);
    st_error(ST_SUB_INIT, "%s rank %d: the ranks' settings differ: %s; every rank of a "
             "communicator must have the same (this rank has %s)", comm->name, comm->rank, differ,
             mine);
    return ST_ERR_USAGE;
}

/* Connects comm to every rank; recs[r] is rank r's record. Its own exchanges (wire-up check,
 * agreements, rails, tuning, windows) wait at most setup_timeout without progress, not the
 * communicator's operation timeout: a peer that cannot be reached fails init within the
 * bootstrap deadline, naming it, instead of after STRATA_TIMEOUT. */
static st_status_t st_comm_connect(st_comm_t *comm, const st_rank_record_t *const *recs,
                                   double setup_timeout)
{
    double      op_timeout = comm->timeout;
    st_status_t status;

    ST_CHECK(st_comm_build_topo(comm, recs));
    for (int r = 0; r < comm->nranks; r++) {
        /* the hierarchy holds terminated copies of the records' strings */
        memcpy(comm->peers[r].node_id, st_topo_rec(comm->topo, r)->node_id, ST_NODE_ID_LEN);
        comm->peers[r].pid = recs[r]->pid;
        comm->peers[r].same_pidns = recs[r]->pidns[0] != '\0' &&
                                    strncmp(recs[r]->pidns, recs[comm->rank]->pidns,
                                            sizeof(recs[r]->pidns)) == 0;
    }
    {
        int host = 0; /* ranks on this host, emulated nodes included (they share its cores) */

        for (int r = 0; r < comm->nranks; r++) {
            host += comm->peers[r].same_pidns || r == comm->rank;
        }
        comm->host_ranks    = host;
        comm->intra_oversub = host > st_cpus_usable(); /* refined by the windows (intra.c) */
    }
    for (int r = 0; r < comm->nranks; r++) {
        /* every rank sees every record, so all of them fail here alike */
        if (strncmp(recs[r]->net, comm->net->name, sizeof(recs[r]->net)) != 0) {
            st_error(ST_SUB_INIT, "%s: rank %d (node %s) opened net transport '%.16s', rank %d "
                     "(node %s) '%s': set STRATA_NET to the same transport on every rank (auto "
                     "takes verbs only where an active HCA port exists)", comm->name, r,
                     comm->peers[r].node_id, recs[r]->net, comm->rank,
                     comm->peers[comm->rank].node_id, comm->net->name);
            return ST_ERR_USAGE;
        }
    }
    for (int r = 0; r < comm->nranks; r++) {
        int remote = st_topo_node(comm->topo, r) != comm->node;
        int scope  = remote ? ST_NET_ADDR_NET_ONLY : ST_NET_ADDR_ALL;

        if (recs[r]->addr_len[scope] == 0) {
            st_error(ST_SUB_INIT, "%s: rank %d (node %s) has no %s address for rank %d (node %s):"
                     " does UCX_TLS leave out every network transport?", comm->name, r,
                     comm->peers[r].node_id, scope ? "network" : "transport", comm->rank,
                     comm->peers[comm->rank].node_id);
            return ST_ERR_USAGE;
        }
        if (recs[r]->addr_len[scope] > ST_ADDR_MAX) {
            st_error(ST_SUB_INIT, "rank %d published a bad address (%u B)", r,
                     recs[r]->addr_len[scope]);
            return ST_ERR_USAGE;
        }
        status = comm->net->connect(comm->net_ctx, r, recs[r]->addr[scope],
                                    recs[r]->addr_len[scope], remote ? ST_NET_CONNECT_REMOTE : 0,
                                    &comm->eps[r]);
        if (status != ST_OK) {
            return status;
        }
        st_info(ST_SUB_INIT, "%s: rank %d -> rank %d via %s%s (node %s)", comm->name, comm->rank,
                r, comm->net->name, remote ? " net only" : "", comm->peers[r].node_id);
    }
    comm->timeout        = ST_MIN(op_timeout, setup_timeout);
    comm->setup_deadline = st_time_now() + comm->timeout;
    /* from here a rank that fails tells the others, so init fails everywhere at once */
    st_comm_notice_start(comm);
    /* The agreement after the wire-up check is also the barrier the connections need: UCX
     * attaches a same-node peer's shared memory when it connects, so a rank that destroyed a
     * brand-new communicator before its node peers connected would make their connect fail. */
    status = st_comm_wireup(comm, comm->net_ctx, comm->eps, -1);
    ST_CHECK_GOTO(st_comm_agree(comm, status), status, out);
    ST_CHECK_GOTO(st_comm_settings_agree(comm), status, out);
    ST_CHECK_GOTO(st_comm_open_rails(comm), status, out);
    ST_CHECK_GOTO(st_comm_tune(comm), status, out);
    ST_CHECK_GOTO(st_intra_create(comm, st_comm_agree, ST_MEM_HOST, &comm->intra), status, out);
    ST_CHECK_GOTO(st_intra_create_device(comm, st_comm_agree, comm->intra), status, out);
    comm->made  = 1;
    comm->state = ST_COMM_READY;
out:
    comm->timeout        = op_timeout;
    comm->setup_deadline = 0;
    return status;
}

/* STRATA_RAIL_IFNAMES: empty, or interface names separated by single commas. An empty name
 * (",,", "eth0,", ",eth1") would give its rail no interface and silently fall back to the
 * transport's default devices. */
static st_status_t st_comm_config_check(void)
{
    const char *list = st_core_config.rail_ifnames;
    int         entry = 0;

    if (list == NULL || list[0] == '\0') {
        return ST_OK;
    }
    for (const char *p = list;; entry++) {
        size_t len = strcspn(p, ",");

        if (len == 0) {
            st_error(ST_SUB_INIT, "STRATA_RAIL_IFNAMES '%s': entry %d is empty (interface names "
                     "separated by commas, e.g. eth0,eth1; unset for the transport's default "
                     "devices)", list, entry);
            return ST_ERR_INVALID;
        }
        if (p[len] == '\0') {
            return ST_OK;
        }
        p += len + 1;
    }
}

st_status_t st_comm_init(st_comm_t *comm, const strataUniqueId *id, double timeout,
                         const st_transports_t *tl)
{
    st_unique_id_t           uid;
    st_rank_record_t        *table = NULL;
    const st_rank_record_t **recs = NULL;
    st_rank_record_t         rec;
    st_status_t              status;
    int                      nranks = comm->nranks, rank = comm->rank;

    st_ticks_start(); /* the latency path's timestamps are calibrated over init (base/sys.h) */

    ST_CHECK(st_coll_config_check());
    ST_CHECK(st_comm_config_check());
    ST_CHECK(st_bootstrap_id_decode(id, &uid));
    /* Only the root listens on STRATA_SOCKET_IFNAME, but every rank checks it: a setting that
     * matches nothing here (a missing interface, "^lo" on a box with only lo) then fails every
     * rank at once, naming the variable, instead of leaving some waiting for the others. */
    {
        char          ifname[ST_IFNAME_MAX];
        st_sockaddr_t addr;

        if (st_socket_find_if(st_core_config.socket_ifname, ifname, &addr) != ST_OK) {
            return ST_ERR_INVALID;
        }
    }
    comm->uid = st_hash(ST_HASH_SEED, uid.secret, sizeof(uid.secret));
    comm->tl  = tl;
    ST_CHECK(st_comm_open_net(comm, &rec));
    rec.rank = rank;
    if (uid.from_env && rank == 0) {
        ST_CHECK(st_bootstrap_root_start(&uid, nranks, timeout));
        _Static_assert(sizeof(comm->root_secret) == ST_BOOTSTRAP_SECRET_BYTES, "secret size");
        memcpy(comm->root_secret, uid.secret, sizeof(comm->root_secret));
        comm->root_started = 1;
    }
    table = malloc((size_t)nranks * sizeof(*table));
    recs  = malloc((size_t)nranks * sizeof(*recs));
    if (table == NULL || recs == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    st_socket_set_cancel(comm->cancel_fd); /* strataCommAbort ends the wait at once */
    status = st_bootstrap_exchange(&uid, rank, nranks, &rec, sizeof(rec), table, timeout);
    st_socket_set_cancel(-1);
    if (status != ST_OK) {
        goto out;
    }
    for (int r = 0; r < nranks; r++) {
        recs[r] = &table[r];
    }
    ST_CHECK_GOTO(st_comm_connect(comm, recs, timeout), status, out);
    st_info(ST_SUB_INIT, "%s: rank %d of %d ready on node %s (%d nodes)", comm->name, rank,
            nranks, rec.topo.node_id, comm->nnodes);
out:
    free(recs);
    free(table);
    return status;
}

static int st_split_cmp(const void *a, const void *b)
{
    const st_rank_record_t *ra = *(const st_rank_record_t *const *)a;
    const st_rank_record_t *rb = *(const st_rank_record_t *const *)b;

    if (ra->key != rb->key) {
        return (ra->key < rb->key) ? -1 : 1;
    }
    return (ra->rank < rb->rank) ? -1 : (ra->rank > rb->rank);
}

st_status_t st_comm_split(st_comm_t *parent, int color, int key, double op_timeout,
                          const char *name, const char *tune_file, st_comm_t **comm_p)
{
    int                      n = parent->nranks;
    st_rank_record_t        *table;
    const st_rank_record_t **members = NULL;
    st_rank_record_t         rec;
    st_comm_t               *comm = NULL;
    st_status_t              status;
    int                      nmembers = 0, myrank = -1;

    *comm_p = NULL;
    table = malloc((size_t)n * sizeof(*table));
    if (table == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memset(&rec, 0, sizeof(rec));
    if (color >= 0) {
        /* rank and size are unknown until the all-gather: open the transport first */
        comm = st_comm_alloc(0, 1, op_timeout, name);
        if (comm == NULL) {
            status = ST_ERR_NO_MEMORY;
            goto out;
        }
        comm->tl = parent->tl; /* the parent's transports (a test's fakes stay fakes) */
        comm->dev_id = parent->dev_id; /* and its device */
        ST_CHECK_GOTO(st_comm_open_net(comm, &rec), status, out);
    }
    rec.color = (color >= 0) ? color : -1;
    rec.key   = key;
    rec.rank  = parent->rank;

    parent->split_seq++; /* every rank of parent, members or not */
    status = st_comm_ring_coll(parent, ST_COLL_ALLGATHER, &rec, table, sizeof(rec), strataUint8,
                               strataSum);
    if (status != ST_OK) {
        /* the caller called a split: say so before the all-gather's own words */
        char cause[768];

        snprintf(cause, sizeof(cause), "%s", st_log_last_error());
        st_log_clear_error();
        st_log_append_error("Split of %s rank %d (color %d, key %d), exchanging colors and keys: "
                            "%s", parent->name, parent->rank, color, key, cause);
        goto out;
    }
    if (color < 0) {
        status = ST_OK;
        goto out;
    }

    members = malloc((size_t)n * sizeof(*members));
    if (members == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto out;
    }
    for (int r = 0; r < n; r++) {
        if (table[r].color == color) {
            members[nmembers++] = &table[r];
        }
    }
    qsort(members, (size_t)nmembers, sizeof(*members), st_split_cmp);
    for (int i = 0; i < nmembers; i++) {
        if (members[i]->rank == parent->rank) {
            myrank = i;
        }
    }
    /* resize the comm allocated before the all-gather to its real size */
    {
        st_comm_t *sized = st_comm_alloc(myrank, nmembers, op_timeout, name);
        if (sized == NULL) {
            status = ST_ERR_NO_MEMORY;
            goto out;
        }
        sized->tl      = comm->tl;
        sized->dev_id  = comm->dev_id;
        sized->net     = comm->net;
        sized->net_ctx = comm->net_ctx;
        if (tune_file == NULL) {
            tune_file = parent->tune_file; /* as its parent, unless the split's config says */
        }
        if (tune_file != NULL && (sized->tune_file = strdup(tune_file)) == NULL) {
            st_comm_free(sized, 1);
            status = ST_ERR_NO_MEMORY;
            goto out;
        }
        sized->net->set_rank(sized->net_ctx, myrank);
        {
            uint32_t salt[2] = {parent->split_seq, (uint32_t)color};
            sized->uid = st_hash(parent->uid, salt, sizeof(salt));
        }
        comm->net_ctx  = NULL;
        comm->net      = NULL;
        st_comm_free(comm, 1);
        comm = sized;
    }
    ST_CHECK_GOTO(st_comm_connect(comm, members,
                                  ST_MIN(st_param_deadline(st_core_config.bootstrap_timeout),
                                         op_timeout)),
                  status, out);
    st_info(ST_SUB_INIT, "%s: split of %s color %d key %d: rank %d of %d", comm->name,
            parent->name, color, key, myrank, nmembers);
    *comm_p = comm;
    comm = NULL;
    status = ST_OK;

out:
    if (comm != NULL) {
        st_comm_free(comm, 1);
    }
    free(members);
    free(table);
    return status;
}

/* The disconnects of one free share one deadline (ST_COMM_CLOSE_S), however many peers are dead
 * or stuck: each gets what is left of it, and at least a moment to drop its connection. */
#define ST_COMM_CLOSE_S 2.0

static double st_comm_close_left(double deadline)
{
    return ST_MAX(deadline - st_time_now(), 0.01);
}

void st_comm_free(st_comm_t *comm, int force)
{
    double deadline = st_time_now() + ST_COMM_CLOSE_S;

    st_devq_destroy(comm); /* its queued calls end first (their streams' gates open) */
    if (comm->net != NULL) {
        st_comm_notice_stop(comm);
    }
    comm->board = NULL; /* in the windows */
    st_check_drop_spare(comm);
    st_intra_destroy(comm->intra);
    st_tune_policy_free(comm->tune);
    comm->tune = NULL;
    free(comm->tune_file);
    if (comm->eps != NULL && comm->net != NULL) {
        for (int r = 0; r < comm->nranks; r++) {
            if (comm->eps[r] != NULL) {
                comm->net->disconnect(comm->eps[r], force, st_comm_close_left(deadline));
            }
        }
    }
    if (comm->spare_eps != NULL) {
        for (int r = 0; r < comm->nranks; r++) {
            if (comm->spare_eps[r] != NULL) {
                comm->net->disconnect(comm->spare_eps[r], force, st_comm_close_left(deadline));
            }
        }
    }
    if (comm->rail_ctx != NULL) {
        comm->net->close(comm->rail_ctx);
    }
    if (comm->net_ctx != NULL) {
        comm->net->close(comm->net_ctx);
    }
    st_comm_run_deferred(comm); /* nothing of the transport's is left to write into them */
    pthread_mutex_destroy(&comm->lock);
    pthread_mutex_destroy(&comm->order_lock);
    if (comm->cancel_fd >= 0) {
        close(comm->cancel_fd);
    }
    st_topo_destroy(comm->topo);
    free(comm->eps);
    free(comm->spare_eps);
    free(comm->peers);
    free(comm->p2p_send_seq);
    free(comm->p2p_recv_seq);
    comm->magic = 0;
    free(comm);
}
