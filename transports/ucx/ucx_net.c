/*
 * ucx_net.c - the net transport over UCX ucp tag matching.
 *
 * One ucp context per process (reference counted: communicators come and go), one worker per
 * communicator, so tags never collide between communicators. The 64-bit UCX tag carries the
 * sender's rank in its upper 20 bits and the caller's tag (ST_NET_TAG_BITS) below: UCX matches
 * receives on the worker, not on the endpoint, so the sender must be part of the tag.
 *
 * Two worker addresses are published: the full one for peers on the same node, and a network-only
 * one (UCP_WORKER_ADDRESS_FLAG_NET_ONLY) for peers on other nodes. Emulated nodes share one kernel,
 * and with the full address UCX would reach them over shared memory instead of the network.
 *
 * Large messages use UCX's rendezvous protocol (zero-copy where the transport supports it); UCX
 * registers the buffers itself, so mem_reg returns no handle. Receives posted to a peer whose
 * endpoint fails are cancelled with ST_ERR_REMOTE, so a dead peer fails the waiting rank at once
 * instead of at its deadline.
 */
#include "config.h"
#include "transports/transport.h"

#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <ucp/api/ucp.h>


#define ST_UCX_RANK_SHIFT ST_NET_TAG_BITS

/* ucp contexts, shared by the communicators of the process: one per set of network devices
 * (UCX_NET_DEVICES is a context setting; a rail's worker needs a context limited to its NIC). */
#define ST_UCX_MAX_CONTEXTS 8
typedef struct st_ucx_context {
    char          devices[128]; /* "" = UCX's defaults (UCX_NET_DEVICES from the environment) */
    ucp_context_h context;
    int           refcount;
} st_ucx_context_t;

struct st_net_ctx {
    st_ucx_context_t *uctx;
    ucp_worker_h     worker;
    int              rank;
    int              efd;
    void            *addr[2];   /* ST_NET_ADDR_ALL, ST_NET_ADDR_NET_ONLY */
    size_t           addr_len[2];
    st_request_t    *recvs;     /* receives in flight (to fail them when their peer dies) */
    char             name[64];
};

struct st_net_ep {
    st_net_ctx_t *ctx;
    ucp_ep_h      ep;        /* NULL once closed by st_ucx_ep_kill */
    void         *close_req; /* that close, until disconnect frees it */
    int           peer;
    int           failed;
    int           errh;      /* connected with peer failure reporting: a forced close completes
                              * its requests (with an error); without, they never complete */
};

static pthread_mutex_t  st_ucx_lock = PTHREAD_MUTEX_INITIALIZER;
static st_ucx_context_t st_ucx_contexts[ST_UCX_MAX_CONTEXTS];

static st_status_t st_ucx_status(ucs_status_t status)
{
    switch (status) {
    case UCS_OK:                 return ST_OK;
    case UCS_INPROGRESS:         return ST_INPROGRESS;
    case UCS_ERR_CANCELED:       return ST_ERR_CANCELED;
    case UCS_ERR_MESSAGE_TRUNCATED: return ST_ERR_TRUNCATED;
    case UCS_ERR_NO_MEMORY:      return ST_ERR_NO_MEMORY;
    case UCS_ERR_TIMED_OUT:      return ST_ERR_TIMEOUT;
    case UCS_ERR_UNREACHABLE:
    case UCS_ERR_CONNECTION_RESET:
    case UCS_ERR_ENDPOINT_TIMEOUT:
    case UCS_ERR_REJECTED:       return ST_ERR_REMOTE;
    default:                     return ST_ERR_IO;
    }
}

/* The context for devices ("" for the default), created at first use. */
static st_status_t st_ucx_context_get(const char *devices, st_ucx_context_t **uctx_p)
{
    st_ucx_context_t *uctx = NULL;
    ucp_params_t      params;
    ucp_config_t     *config;
    ucs_status_t      status;

    pthread_mutex_lock(&st_ucx_lock);
    for (int i = 0; i < ST_UCX_MAX_CONTEXTS; i++) {
        if (st_ucx_contexts[i].refcount > 0 &&
            strcmp(st_ucx_contexts[i].devices, devices) == 0) {
            uctx = &st_ucx_contexts[i];
            uctx->refcount++;
            pthread_mutex_unlock(&st_ucx_lock);
            *uctx_p = uctx;
            return ST_OK;
        }
    }
    for (int i = 0; i < ST_UCX_MAX_CONTEXTS && uctx == NULL; i++) {
        if (st_ucx_contexts[i].refcount == 0) {
            uctx = &st_ucx_contexts[i];
        }
    }
    if (uctx == NULL || strlen(devices) >= sizeof(uctx->devices)) {
        st_error(ST_SUB_UCX, "more than %d distinct device sets, or '%s' is too long",
                 ST_UCX_MAX_CONTEXTS, devices);
        pthread_mutex_unlock(&st_ucx_lock);
        return ST_ERR_INVALID;
    }
    /* UCX's TCP connects in a blocking connect() by default (UCX_TCP_CONN_NB=n): on a link that
     * drops packets, ucp_ep_create then waits out the kernel's SYN retries (a minute or two),
     * past every deadline of strata's, and neither abort nor the wire-up check can end it.
     * Non-blocking, a peer that cannot be reached fails the connection's requests instead, which
     * the wire-up check names within STRATA_CONNECT_TIMEOUT. It is a transport setting, which
     * ucp_config_modify does not take: set in the environment, before the first context reads
     * it, and only when the user has not set it. */
    if (getenv("UCX_TCP_CONN_NB") == NULL) {
        setenv("UCX_TCP_CONN_NB", "y", 0);
    }
    status = ucp_config_read(NULL, NULL, &config);
    if (status != UCS_OK) {
        st_error(ST_SUB_UCX, "ucp_config_read failed: %s", ucs_status_string(status));
        goto err;
    }
    if (devices[0] != '\0') {
        status = ucp_config_modify(config, "NET_DEVICES", devices);
        if (status != UCS_OK) {
            st_error(ST_SUB_UCX, "UCX_NET_DEVICES=%s (a rail of STRATA_RAIL_IFNAMES): %s",
                     devices, ucs_status_string(status));
            ucp_config_release(config);
            pthread_mutex_unlock(&st_ucx_lock);
            return ST_ERR_INVALID;
        }
    }
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_PARAM_FIELD_FEATURES | UCP_PARAM_FIELD_MT_WORKERS_SHARED;
    params.features   = UCP_FEATURE_TAG | UCP_FEATURE_WAKEUP;
    params.mt_workers_shared = 1; /* workers of several communicators, driven by several threads */
    status = ucp_init(&params, config, &uctx->context);
    ucp_config_release(config);
    if (status != UCS_OK) {
        /* name the UCX settings that make ucp_init fail (an unknown transport or device) */
        const char *tls = getenv("UCX_TLS"), *devs = getenv("UCX_NET_DEVICES");

        st_error(ST_SUB_UCX, "ucx: ucp_init%s%s failed: %s (UCX_TLS '%s', UCX_NET_DEVICES '%s')",
                 devices[0] ? " with NET_DEVICES=" : "", devices, ucs_status_string(status),
                 tls ? tls : "", devices[0] ? devices : (devs ? devs : ""));
        goto err;
    }
    snprintf(uctx->devices, sizeof(uctx->devices), "%s", devices);
    uctx->refcount = 1;
    pthread_mutex_unlock(&st_ucx_lock);
    *uctx_p = uctx;
    return ST_OK;

err:
    pthread_mutex_unlock(&st_ucx_lock);
    return ST_ERR_NO_DEVICE;
}

static void st_ucx_context_put(st_ucx_context_t *uctx)
{
    pthread_mutex_lock(&st_ucx_lock);
    if (--uctx->refcount == 0) {
        ucp_cleanup(uctx->context);
        uctx->context = NULL;
    }
    pthread_mutex_unlock(&st_ucx_lock);
}

static st_status_t st_ucx_query_address(st_net_ctx_t *ctx, int net_only)
{
    ucp_worker_attr_t attr;
    ucs_status_t      status;

    memset(&attr, 0, sizeof(attr));
    attr.field_mask = UCP_WORKER_ATTR_FIELD_ADDRESS | UCP_WORKER_ATTR_FIELD_ADDRESS_FLAGS;
    attr.address_flags = net_only ? UCP_WORKER_ADDRESS_FLAG_NET_ONLY : 0;
    status = ucp_worker_query(ctx->worker, &attr);
    if (status != UCS_OK) {
        st_error(ST_SUB_UCX, "ucp_worker_query(%s address) failed: %s", net_only ? "net" : "full",
                 ucs_status_string(status));
        return ST_ERR_IO;
    }
    ctx->addr[net_only] = malloc(attr.address_length);
    if (ctx->addr[net_only] == NULL) {
        ucp_worker_release_address(ctx->worker, attr.address);
        return ST_ERR_NO_MEMORY;
    }
    memcpy(ctx->addr[net_only], attr.address, attr.address_length);
    ctx->addr_len[net_only] = attr.address_length;
    ucp_worker_release_address(ctx->worker, attr.address);
    return ST_OK;
}

static st_status_t st_ucx_open(const st_net_config_t *cfg, st_net_ctx_t **ctx_p)
{
    ucp_worker_params_t params;
    st_net_ctx_t       *ctx;
    ucs_status_t        ustatus;
    st_status_t         status;

    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    ctx->rank = cfg->rank;
    ctx->efd  = -1;
    snprintf(ctx->name, sizeof(ctx->name), "%s", cfg->name);
    ST_CHECK_GOTO(st_ucx_context_get(cfg->devices ? cfg->devices : "", &ctx->uctx), status,
                  err_free);

    memset(&params, 0, sizeof(params));
    params.field_mask  = UCP_WORKER_PARAM_FIELD_THREAD_MODE;
    params.thread_mode = UCS_THREAD_MODE_SERIALIZED; /* the communicator's lock serialises */
    ustatus = ucp_worker_create(ctx->uctx->context, &params, &ctx->worker);
    if (ustatus != UCS_OK) {
        st_error(ST_SUB_UCX, "ucp_worker_create failed: %s", ucs_status_string(ustatus));
        status = ST_ERR_IO;
        goto err_put;
    }
    ustatus = ucp_worker_get_efd(ctx->worker, &ctx->efd);
    if (ustatus != UCS_OK) {
        st_warn(ST_SUB_UCX, "ucp_worker_get_efd failed (%s): waiters will poll",
                ucs_status_string(ustatus));
        ctx->efd = -1;
    }
    ST_CHECK_GOTO(st_ucx_query_address(ctx, 0), status, err_worker);
    if (st_ucx_query_address(ctx, 1) != ST_OK) {
        /* No network transport (UCX_TLS=sm,self): fine while every peer is on this node. */
        st_log_clear_error();
        st_info(ST_SUB_UCX, "%s rank %d: no network-only address; peers on other nodes will be "
                "unreachable", ctx->name, ctx->rank);
        ctx->addr_len[1] = 0;
    }
    st_debug(ST_SUB_UCX, "%s rank %d: worker addresses %zu B (all), %zu B (net only)", ctx->name,
             ctx->rank, ctx->addr_len[0], ctx->addr_len[1]);
    *ctx_p = ctx;
    return ST_OK;

err_worker:
    ucp_worker_destroy(ctx->worker);
err_put:
    st_ucx_context_put(ctx->uctx);
err_free:
    free(ctx);
    return status;
}

static void st_ucx_close(st_net_ctx_t *ctx)
{
    free(ctx->addr[0]);
    free(ctx->addr[1]);
    ucp_worker_destroy(ctx->worker);
    st_ucx_context_put(ctx->uctx);
    free(ctx);
}

static void st_ucx_describe(st_net_ctx_t *ctx, char *buf, size_t len)
{
    const char *env = getenv("UCX_NET_DEVICES");

    if (ctx->uctx->devices[0] != '\0') {
        snprintf(buf, len, "UCX_NET_DEVICES=%s", ctx->uctx->devices);
    } else if (env != NULL && env[0] != '\0') {
        snprintf(buf, len, "UCX_NET_DEVICES=%s", env);
    } else {
        snprintf(buf, len, "UCX's default devices (UCX_NET_DEVICES unset)");
    }
}

static void st_ucx_set_rank(st_net_ctx_t *ctx, int rank)
{
    ctx->rank = rank;
}

static st_status_t st_ucx_address(st_net_ctx_t *ctx, st_net_addr_scope_t scope, void *buf,
                                  size_t *len_p)
{
    int    which = (scope == ST_NET_ADDR_NET_ONLY);
    size_t cap   = *len_p;

    *len_p = ctx->addr_len[which];
    if (cap < ctx->addr_len[which]) {
        return ST_ERR_INVALID;
    }
    memcpy(buf, ctx->addr[which], ctx->addr_len[which]);
    return ST_OK;
}

static void st_ucx_recv_list_del(st_net_ctx_t *ctx, st_request_t *req)
{
    if (req->tl_prev != NULL) {
        req->tl_prev->tl_next = req->tl_next;
    } else if (ctx->recvs == req) {
        ctx->recvs = req->tl_next;
    }
    if (req->tl_next != NULL) {
        req->tl_next->tl_prev = req->tl_prev;
    }
    req->tl_prev = req->tl_next = NULL;
}

static void st_ucx_ep_error(void *arg, ucp_ep_h uep ST_UNUSED, ucs_status_t status)
{
    st_net_ep_t  *ep = arg;
    st_net_ctx_t *ctx = ep->ctx;

    int inflight = 0;

    for (st_request_t *req = ctx->recvs; req != NULL; req = req->tl_next) {
        inflight += (req->tl_ep == ep);
    }
    /* A peer that closed after its last message is no news; one we still wait for is. */
    if (inflight > 0) {
        st_warn(ST_SUB_UCX, "%s rank %d: connection to rank %d failed with %d receives pending: %s",
                ctx->name, ctx->rank, ep->peer, inflight, ucs_status_string(status));
    } else {
        st_debug(ST_SUB_UCX, "%s rank %d: connection to rank %d closed: %s", ctx->name,
                 ctx->rank, ep->peer, ucs_status_string(status));
    }
    ep->failed = 1;
    /* Receives from the dead peer would wait until their deadline: fail them now. */
    for (st_request_t *req = ctx->recvs, *next; req != NULL; req = next) {
        next = req->tl_next;
        if (req->tl_ep == ep && req->tl_req != NULL) {
            req->status = ST_ERR_REMOTE;
            ucp_request_cancel(ctx->worker, req->tl_req);
        }
    }
}

/* Closes ep at once (UCP_EP_CLOSE_FLAG_FORCE), which completes every send on it, and every
 * rendezvous receive from its peer, with UCS_ERR_CANCELED: the only way UCX lets go of a send or
 * of a matched receive whose peer is gone or stuck (ucp_request_cancel only takes back receives
 * not yet matched). The connection is then unusable: this happens only when an operation failed
 * or was aborted, which fails the communicator anyway. */
static void st_ucx_ep_kill(st_net_ep_t *ep)
{
    ucp_request_param_t param;
    void               *req;

    if (ep->ep == NULL) {
        return;
    }
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = UCP_EP_CLOSE_FLAG_FORCE;
    req = ucp_ep_close_nbx(ep->ep, &param);
    ep->ep     = NULL;
    ep->failed = 1;
    if (UCS_PTR_IS_PTR(req)) {
        ep->close_req = req;
    }
    st_debug(ST_SUB_UCX, "%s rank %d: connection to rank %d closed to cancel its transfers",
             ep->ctx->name, ep->ctx->rank, ep->peer);
}

static st_status_t st_ucx_connect(st_net_ctx_t *ctx, int peer, const void *peer_addr,
                                  size_t addr_len ST_UNUSED, unsigned flags, st_net_ep_t **ep_p)
{
    ucp_ep_params_t params;
    st_net_ep_t    *ep;
    ucs_status_t    status;

    ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    ep->ctx  = ctx;
    ep->peer = peer;
    memset(&params, 0, sizeof(params));
    params.field_mask = UCP_EP_PARAM_FIELD_REMOTE_ADDRESS | UCP_EP_PARAM_FIELD_ERR_HANDLING_MODE |
                        UCP_EP_PARAM_FIELD_ERR_HANDLER;
    params.address           = peer_addr;
    /* Failure detection (PEER mode) rules out UCX's shared-memory transports, which cannot
     * report a dead peer: ask for it only across nodes, where the network can. */
    params.err_mode          = (flags & ST_NET_CONNECT_REMOTE) ? UCP_ERR_HANDLING_MODE_PEER
                                                               : UCP_ERR_HANDLING_MODE_NONE;
    params.err_handler.cb    = st_ucx_ep_error;
    params.err_handler.arg   = ep;
    ep->errh                 = (params.err_mode == UCP_ERR_HANDLING_MODE_PEER);
    status = ucp_ep_create(ctx->worker, &params, &ep->ep);
    if (status != UCS_OK) {
        /* a peer whose worker is gone (it failed or exited) leaves no shared memory to attach */
        int gone = (status == UCS_ERR_SHMEM_SEGMENT || st_ucx_status(status) == ST_ERR_REMOTE);

        st_error(ST_SUB_UCX, "%s rank %d: ucp_ep_create to rank %d failed: %s%s", ctx->name,
                 ctx->rank, peer, ucs_status_string(status),
                 gone ? " (the peer's transport is gone: it failed or exited)" : "");
        free(ep);
        return gone ? ST_ERR_REMOTE : ST_ERR_IO;
    }
    *ep_p = ep;
    return ST_OK;
}

static void st_ucx_disconnect(st_net_ep_t *ep, int force, double timeout)
{
    ucp_request_param_t param;
    double              start;
    void               *req;

    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_FLAGS;
    param.flags        = (force || ep->failed) ? UCP_EP_CLOSE_FLAG_FORCE : 0;
    req = (ep->ep != NULL) ? ucp_ep_close_nbx(ep->ep, &param) : ep->close_req;
    if (UCS_PTR_IS_PTR(req)) {
        start = st_time_now();
        while (ucp_request_check_status(req) == UCS_INPROGRESS) {
            ucp_worker_progress(ep->ctx->worker);
            if (st_time_now() - start > timeout) {
                st_warn(ST_SUB_UCX, "%s rank %d: closing the connection to rank %d took over %g s;"
                        " dropping it", ep->ctx->name, ep->ctx->rank, ep->peer, timeout);
                ucp_request_cancel(ep->ctx->worker, req);
                break;
            }
        }
        ucp_request_free(req);
    }
    free(ep);
}

static st_status_t st_ucx_mem_reg(st_net_ctx_t *ctx ST_UNUSED, void *buf ST_UNUSED,
                                  size_t len ST_UNUSED, st_memh_t **memh_p)
{
    *memh_p = NULL; /* UCX registers rendezvous buffers itself (with its own cache) */
    return ST_OK;
}

static st_status_t st_ucx_mem_dereg(st_net_ctx_t *ctx ST_UNUSED, st_memh_t *memh ST_UNUSED)
{
    return ST_OK;
}

static void st_ucx_send_cb(void *ureq, ucs_status_t status, void *user_data)
{
    st_request_t *req = user_data;

    req->status = st_ucx_status(status);
    req->tl_req = NULL;
    ucp_request_free(ureq);
    req->done = 1;
}

static void st_ucx_recv_cb(void *ureq, ucs_status_t status, const ucp_tag_recv_info_t *info,
                           void *user_data)
{
    st_request_t *req = user_data;
    st_net_ep_t  *ep = req->tl_ep;

    if (req->status == ST_INPROGRESS || status == UCS_OK) {
        /* ST_ERR_REMOTE set by the error handler before cancelling wins over CANCELED. */
        req->status = st_ucx_status(status);
    }
    if (status == UCS_OK || status == UCS_ERR_MESSAGE_TRUNCATED) {
        req->len = info->length; /* truncated: what the sender sent */
    }
    if (ep != NULL) { /* NULL: an any-source receive, never on the list */
        st_ucx_recv_list_del(ep->ctx, req);
    }
    req->tl_req = NULL;
    ucp_request_free(ureq);
    req->done = 1;
}

static st_status_t st_ucx_isend(st_net_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                                st_memh_t *memh ST_UNUSED, st_request_t *req)
{
    ucp_request_param_t param;
    void               *ureq;
    uint64_t            utag = ((uint64_t)ep->ctx->rank << ST_UCX_RANK_SHIFT) |
                               (tag & ST_NET_TAG_MASK);

    if (ep->failed) {
        /* completed with the error, so the caller reports it with its own context (which
         * collective, phase and step) as for a transfer that failed in flight */
        st_debug(ST_SUB_UCX, "%s rank %d: send to rank %d on a failed connection", ep->ctx->name,
                 ep->ctx->rank, ep->peer);
        req->tl_ep  = ep;
        req->tl_req = NULL;
        req->why    = NULL;
        req->status = ST_ERR_REMOTE;
        req->done   = 1;
        return ST_OK;
    }
    memset(&param, 0, sizeof(param));
    param.op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                         UCP_OP_ATTR_FIELD_DATATYPE;
    param.cb.send   = st_ucx_send_cb;
    param.user_data = req;
    param.datatype  = ucp_dt_make_contig(1);
    req->done   = 0;
    req->orphan = 0;
    req->status = ST_INPROGRESS;
    req->why    = NULL;
    req->tl_ep  = ep;
    req->tl_req = NULL;
    ureq = ucp_tag_send_nbx(ep->ep, buf, len, utag, &param);
    if (ureq == NULL) {
        req->status = ST_OK;
        req->done   = 1;
    } else if (UCS_PTR_IS_ERR(ureq)) {
        st_error(ST_SUB_UCX, "%s rank %d: send of %zu B to rank %d failed: %s", ep->ctx->name,
                 ep->ctx->rank, len, ep->peer, ucs_status_string(UCS_PTR_STATUS(ureq)));
        return st_ucx_status(UCS_PTR_STATUS(ureq));
    } else {
        req->tl_req = ureq;
    }
    return ST_OK;
}

/* The parameters of a receive and its request's starting state (ep: its peer's endpoint, NULL
 * for an any-source receive). Always a request and a callback: UCX 1.13 leaves recv_info's length
 * unset when a receive completes at once, and the length is how a mismatched count is detected. */
static void st_ucx_recv_start(ucp_request_param_t *param, st_request_t *req, st_net_ep_t *ep)
{
    memset(param, 0, sizeof(*param));
    param->op_attr_mask = UCP_OP_ATTR_FIELD_CALLBACK | UCP_OP_ATTR_FIELD_USER_DATA |
                          UCP_OP_ATTR_FIELD_DATATYPE | UCP_OP_ATTR_FLAG_NO_IMM_CMPL;
    param->cb.recv   = st_ucx_recv_cb;
    param->user_data = req;
    param->datatype  = ucp_dt_make_contig(1);
    req->done    = 0;
    req->orphan  = 0;
    req->status  = ST_INPROGRESS;
    req->why     = NULL;
    req->len     = 0;
    req->tl_ep   = ep;
    req->tl_req  = NULL;
    req->tl_prev = req->tl_next = NULL;
}

static st_status_t st_ucx_irecv(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag,
                                st_memh_t *memh ST_UNUSED, st_request_t *req)
{
    st_net_ctx_t       *ctx = ep->ctx;
    ucp_request_param_t param;
    void               *ureq;
    uint64_t            utag = ((uint64_t)ep->peer << ST_UCX_RANK_SHIFT) | (tag & ST_NET_TAG_MASK);

    if (ep->failed) {
        st_debug(ST_SUB_UCX, "%s rank %d: receive from rank %d on a failed connection",
                 ctx->name, ctx->rank, ep->peer);
        req->tl_ep   = ep;
        req->tl_req  = NULL;
        req->why     = NULL;
        req->tl_prev = req->tl_next = NULL;
        req->len     = 0;
        req->status  = ST_ERR_REMOTE;
        req->done    = 1;
        return ST_OK;
    }
    st_ucx_recv_start(&param, req, ep);
    req->tl_next = ctx->recvs;
    if (ctx->recvs != NULL) {
        ctx->recvs->tl_prev = req;
    }
    ctx->recvs = req;
    ureq = ucp_tag_recv_nbx(ctx->worker, buf, len, utag, UINT64_MAX, &param);
    if (UCS_PTR_IS_ERR(ureq)) {
        st_ucx_recv_list_del(ctx, req);
        st_error(ST_SUB_UCX, "%s rank %d: receive of %zu B from rank %d failed: %s", ctx->name,
                 ctx->rank, len, ep->peer, ucs_status_string(UCS_PTR_STATUS(ureq)));
        return st_ucx_status(UCS_PTR_STATUS(ureq));
    }
    if (!req->done) {
        req->tl_req = ureq;
    }
    return ST_OK;
}

static st_status_t st_ucx_irecv_any(st_net_ctx_t *ctx, void *buf, size_t len, uint64_t tag,
                                    st_request_t *req)
{
    ucp_request_param_t param;
    void               *ureq;

    st_ucx_recv_start(&param, req, NULL);
    /* the sender's rank bits (above ST_NET_TAG_BITS) are left out of the match */
    ureq = ucp_tag_recv_nbx(ctx->worker, buf, len, tag & ST_NET_TAG_MASK, ST_NET_TAG_MASK, &param);
    if (UCS_PTR_IS_ERR(ureq)) {
        st_error(ST_SUB_UCX, "%s rank %d: any-source receive of %zu B failed: %s", ctx->name,
                 ctx->rank, len, ucs_status_string(UCS_PTR_STATUS(ureq)));
        return st_ucx_status(UCS_PTR_STATUS(ureq));
    }
    if (!req->done) {
        req->tl_req = ureq;
    }
    return ST_OK;
}

static void st_ucx_cancel(st_net_ctx_t *ctx, st_request_t *req, int force)
{
    st_net_ep_t *ep = req->tl_ep;

    if (req->done || req->tl_req == NULL) {
        return;
    }
    /* the request's own worker: a communicator may drive several contexts (rails) */
    ucp_request_cancel((ep != NULL) ? ep->ctx->worker : ctx->worker, req->tl_req);
    /* An unmatched receive completes inside ucp_request_cancel. A send, or a receive already
     * matched to a rendezvous, would wait for its peer, which may be dead or stuck: waiting for
     * it would hold an abort or a failed call for the drain's whole bound. */
    if (force && !req->done && ep != NULL) {
        st_ucx_ep_kill(ep);
        /* without peer failure reporting, UCX completes nothing on a closed endpoint: the
         * request is UCX's until the worker is destroyed */
        req->orphan = !ep->errh && !req->done;
    }
}

static st_status_t st_ucx_progress(st_net_ctx_t *ctx)
{
    return ucp_worker_progress(ctx->worker) ? ST_OK : ST_INPROGRESS;
}

static int st_ucx_event_fd(st_net_ctx_t *ctx)
{
    return ctx->efd;
}

static st_status_t st_ucx_arm(st_net_ctx_t *ctx)
{
    ucs_status_t status = ucp_worker_arm(ctx->worker);

    if (status == UCS_OK) {
        return ST_OK;
    }
    return (status == UCS_ERR_BUSY) ? ST_INPROGRESS : st_ucx_status(status);
}

static st_status_t st_ucx_rail_devices(char *buf, size_t len ST_UNUSED)
{
    buf[0] = '\0'; /* UCX's devices are network interfaces: rails name them (RAIL_IFNAMES) */
    return ST_ERR_UNSUPPORTED;
}

const st_net_ops_t st_ucx_net = {
    .name       = "ucx",
    .config     = NULL,
    .open       = st_ucx_open,
    .describe   = st_ucx_describe,
    .set_rank   = st_ucx_set_rank,
    .close      = st_ucx_close,
    .address    = st_ucx_address,
    .connect    = st_ucx_connect,
    .disconnect = st_ucx_disconnect,
    .mem_reg    = st_ucx_mem_reg,
    .mem_dereg  = st_ucx_mem_dereg,
    .isend      = st_ucx_isend,
    .irecv      = st_ucx_irecv,
    .irecv_any  = st_ucx_irecv_any,
    .cancel     = st_ucx_cancel,
    .progress   = st_ucx_progress,
    .event_fd   = st_ucx_event_fd,
    .arm        = st_ucx_arm,
    .rail_devices = st_ucx_rail_devices,
};
