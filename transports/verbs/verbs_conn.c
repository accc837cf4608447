/*
 * verbs_conn.c - endpoints of the verbs transport: RC QPs, their transitions and the out-of-band
 * handshake.
 *
 * connect() is local, as the net contract requires: it creates the endpoint's QPs (INIT, receive
 * work requests posted) and, when this rank is the lower of the two, starts a non-blocking TCP
 * connection to the peer's listener; progress() carries the handshake on (NCCL's connect state
 * machine in net_ib is the model):
 *   initiator                                   acceptor
 *   hello {ranks, nonces, QPNs, PSNs}  ------>  QPs to RTR (initiator's QPNs/PSNs) and RTS
 *   QPs to RTR and RTS                 <------  reply {its QPNs, PSNs}
 *   READY byte                         ------>  ready: may now send (the initiator is at RTR)
 * The initiator may send as soon as it has the reply: the acceptor moved to RTR before replying.
 * PSNs are random 24-bit values, per QP. The socket then stays open and in the context's epoll
 * set: when the peer's process dies the kernel closes it, and the endpoint fails at once (its
 * receives with ST_ERR_REMOTE) instead of after the InfiniBand retry timeout.
 *
 * A connection to itself (a rank's own endpoint) connects each QP to itself: RC loopback.
 */
#include "config.h"
#include "transports/verbs/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <netinet/tcp.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <unistd.h>

#define ST_VB_EPDATA(_ep) ((UINT64_C(4) << 60) | ((uint64_t)(_ep)->idx << 16) | (_ep)->gen)

/* TCP keepalive on an out-of-band socket: a node that crashed (no FIN from a dead kernel) is seen
 * within about 10 s even by a rank that only waits to receive. */
static void st_vb_keepalive(int fd)
{
    int one = 1, idle = 5, intvl = 1, cnt = 5;

    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    (void)setsockopt(fd, SOL_SOCKET, SO_KEEPALIVE, &one, sizeof(one));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPIDLE, &idle, sizeof(idle));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPINTVL, &intvl, sizeof(intvl));
    (void)setsockopt(fd, IPPROTO_TCP, TCP_KEEPCNT, &cnt, sizeof(cnt));
}

static const char *st_vb_state_str(st_vb_ep_state_t state)
{
    switch (state) {
    case ST_VB_EP_CONNECTING: return "connecting to the peer's listener";
    case ST_VB_EP_WAIT_REPLY: return "waiting for the peer's handshake reply";
    case ST_VB_EP_WAIT_HELLO: return "waiting for the peer's handshake";
    case ST_VB_EP_WAIT_READY: return "waiting for the peer's ready message";
    case ST_VB_EP_READY:      return "connected";
    default:                  return "failed";
    }
}

st_net_ep_t *st_vb_ep_lookup(st_net_ctx_t *ctx, uint32_t idx, uint16_t gen)
{
    if (idx >= ctx->neps || ctx->eps[idx] == NULL || ctx->eps[idx]->gen != gen) {
        return NULL;
    }
    return ctx->eps[idx];
}

static st_status_t st_vb_ep_slot(st_net_ctx_t *ctx, st_net_ep_t *ep)
{
    for (uint32_t i = 0; i < ctx->neps; i++) {
        if (ctx->eps[i] == NULL) {
            ep->idx = i;
            ep->gen = ++ctx->ep_gen[i];
            ctx->eps[i] = ep;
            return ST_OK;
        }
    }
    if (ctx->neps >= 0xffff) {
        return ST_ERR_NO_MEMORY;
    }
    {
        uint32_t      n = ctx->neps ? ctx->neps * 2 : 16;
        st_net_ep_t **eps = realloc(ctx->eps, n * sizeof(*eps));
        uint16_t     *gens;

        if (eps == NULL) {
            return ST_ERR_NO_MEMORY;
        }
        ctx->eps = eps;
        gens = realloc(ctx->ep_gen, n * sizeof(*gens));
        if (gens == NULL) {
            return ST_ERR_NO_MEMORY;
        }
        ctx->ep_gen = gens;
        for (uint32_t i = ctx->neps; i < n; i++) {
            ctx->eps[i]    = NULL;
            ctx->ep_gen[i] = 0;
        }
        ctx->neps = n;
    }
    return st_vb_ep_slot(ctx, ep);
}

static void st_vb_sock_close(st_net_ep_t *ep)
{
    if (ep->fd >= 0) {
        (void)epoll_ctl(ep->ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
        close(ep->fd);
        ep->fd = -1;
    }
}

void st_vb_ep_fail(st_net_ep_t *ep, st_status_t status, int loud, const char *fmt, ...)
{
    st_net_ctx_t      *ctx = ep->ctx;
    struct ibv_qp_attr attr;
    char               why[512];
    va_list            ap;

    if (ep->state == ST_VB_EP_FAILED) {
        return;
    }
    if (fmt != NULL) {
        va_start(ap, fmt);
        vsnprintf(why, sizeof(why), fmt, ap);
        va_end(ap);
        snprintf(ep->why, sizeof(ep->why), "%.383s", why);
        if (loud) {
            st_error(ST_SUB_VERBS, "%s rank %d: %s", ctx->name, ctx->rank, why);
        } else {
            st_debug(ST_SUB_VERBS, "%s rank %d: %s", ctx->name, ctx->rank, why);
        }
    }
    /* Tell the peer why before closing: its error then carries this side's reason (a work
     * completion's status and QP) instead of only "closed its connection". */
    if (fmt != NULL && ep->state != ST_VB_EP_CONNECTING && ep->fd >= 0) {
        uint8_t frame[1 + sizeof(ep->why)];
        size_t  n = strnlen(ep->why, sizeof(ep->why) - 1);

        frame[0] = 'E';
        memcpy(frame + 1, ep->why, n);
        (void)!send(ep->fd, frame, 1 + n, MSG_DONTWAIT | MSG_NOSIGNAL);
    }
    ep->state = ST_VB_EP_FAILED;
    memset(&attr, 0, sizeof(attr));
    attr.qp_state = IBV_QPS_ERR;
    for (int q = 0; q < ep->nqps; q++) {
        if (ep->qp[q] != NULL) {
            (void)ctx->ibv->modify_qp(ep->qp[q], &attr, IBV_QP_STATE);
        }
    }
    st_vb_sock_close(ep); /* the peer sees the hang-up at once */
    st_vb_ep_flush_ops(ep, status);
}

static st_status_t st_vb_qp_create(st_net_ep_t *ep, int q)
{
    st_net_ctx_t           *ctx = ep->ctx;
    struct ibv_qp_init_attr init;
    struct ibv_qp_attr      attr;
    int                     ret;

    memset(&init, 0, sizeof(init));
    init.send_cq          = ctx->cqs[ep->cqi];
    init.recv_cq          = ctx->cqs[ep->cqi];
    init.qp_type          = IBV_QPT_RC;
    init.cap.max_send_wr  = ST_VB_SQ_DEPTH;
    init.cap.max_recv_wr  = ST_VB_RQ_DEPTH;
    init.cap.max_send_sge = 1;
    init.cap.max_recv_sge = 1;
    ep->qp[q] = ctx->ibv->create_qp(ctx->pd, &init);
    if (ep->qp[q] == NULL) {
        st_error(ST_SUB_VERBS, "%s rank %d: ibv_create_qp on %s for rank %d failed: %s%s",
                 ctx->name, ctx->rank, ctx->hca, ep->peer, strerror(errno),
                 errno == ENOMEM ? " (is `ulimit -l` too small? raise the memlock limit)" : "");
        return (errno == ENOMEM) ? ST_ERR_NO_MEMORY : ST_ERR_IO;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state        = IBV_QPS_INIT;
    attr.pkey_index      = 0;
    attr.port_num        = ctx->port;
    attr.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    ret = ctx->ibv->modify_qp(ep->qp[q], &attr, IBV_QP_STATE | IBV_QP_PKEY_INDEX |
                              IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
    if (ret != 0) {
        st_error(ST_SUB_VERBS, "%s rank %d: QP 0x%x on %s to INIT failed: %s", ctx->name,
                 ctx->rank, ep->qp[q]->qp_num, ctx->hca, strerror(ret));
        return ST_ERR_IO;
    }
    if (getrandom(&ep->psn[q], sizeof(ep->psn[q]), 0) != sizeof(ep->psn[q])) {
        ep->psn[q] = (uint32_t)rand();
    }
    ep->psn[q] &= 0xffffff;
    return st_vb_post_recvs(ep, q);
}

/* Moves QP q to RTR and RTS towards the peer's QP qpn, which starts at psn. */
static st_status_t st_vb_qp_connect(st_net_ep_t *ep, int q, uint32_t qpn, uint32_t psn)
{
    st_net_ctx_t      *ctx = ep->ctx;
    struct ibv_qp_attr attr;
    int                ret;

    memset(&attr, 0, sizeof(attr));
    attr.qp_state           = IBV_QPS_RTR;
    attr.path_mtu           = (enum ibv_mtu)ST_MIN(ep->paddr.mtu, ctx->addr.mtu);
    attr.dest_qp_num        = qpn;
    attr.rq_psn             = psn;
    attr.max_dest_rd_atomic = 1;
    attr.min_rnr_timer      = 12;
    attr.ah_attr.dlid       = ep->paddr.lid;
    attr.ah_attr.sl         = (uint8_t)st_verbs_config.sl;
    attr.ah_attr.port_num   = ctx->port;
    if (ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        attr.ah_attr.is_global         = 1;
        memcpy(attr.ah_attr.grh.dgid.raw, ep->paddr.gid, 16);
        attr.ah_attr.grh.sgid_index    = (uint8_t)ctx->gid_index;
        attr.ah_attr.grh.hop_limit     = 255;
        attr.ah_attr.grh.traffic_class = (uint8_t)st_verbs_config.tc;
    }
    ret = ctx->ibv->modify_qp(ep->qp[q], &attr, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU |
                              IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                              IBV_QP_MIN_RNR_TIMER);
    if (ret != 0) {
        st_error(ST_SUB_VERBS, "%s rank %d: QP 0x%x on %s to RTR towards rank %d (%s, LID %u, "
                 "QP 0x%x) failed: %s%s", ctx->name, ctx->rank, ep->qp[q]->qp_num, ctx->hca,
                 ep->peer, ep->paddr.hca, ep->paddr.lid, qpn, strerror(ret),
                 ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET
                     ? " (RoCE: is STRATA_IB_GID_INDEX a GID both ends can route?)" : "");
        return ST_ERR_IO;
    }
    memset(&attr, 0, sizeof(attr));
    attr.qp_state      = IBV_QPS_RTS;
    attr.sq_psn        = ep->psn[q];
    attr.timeout       = (uint8_t)st_verbs_config.timeout;
    attr.retry_cnt     = (uint8_t)st_verbs_config.retry_cnt;
    attr.rnr_retry     = 7; /* infinite; receives never run out (verbs.h) */
    attr.max_rd_atomic = 1;
    ret = ctx->ibv->modify_qp(ep->qp[q], &attr, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT |
                              IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC);
    if (ret != 0) {
        st_error(ST_SUB_VERBS, "%s rank %d: QP 0x%x on %s to RTS failed: %s", ctx->name,
                 ctx->rank, ep->qp[q]->qp_num, ctx->hca, strerror(ret));
        return ST_ERR_IO;
    }
    return ST_OK;
}

static void st_vb_hello_fill(st_net_ep_t *ep, st_vb_hello_t *h)
{
    memset(h, 0, sizeof(*h));
    h->magic      = ST_VB_MAGIC;
    h->version    = ST_VB_VERSION;
    h->nqps       = (uint16_t)ep->nqps;
    h->from_rank  = ep->ctx->rank;
    h->to_rank    = ep->peer;
    h->from_nonce = ep->ctx->addr.nonce;
    h->to_nonce   = ep->paddr.nonce;
    for (int q = 0; q < ep->nqps; q++) {
        h->qpn[q] = ep->qp[q]->qp_num;
        h->psn[q] = ep->psn[q];
    }
}

static st_status_t st_vb_send_bytes(st_net_ep_t *ep, const void *buf, size_t len)
{
    /* a fresh socket's buffer takes these few hundred bytes at once; the deadline only bounds a
     * peer that stopped reading */
    st_status_t status = st_socket_send_all(ep->fd, buf, len, st_time_now() + 5.0);

    if (status != ST_OK) {
        st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "handshake with rank %d over TCP failed (%s) while "
                      "%s", ep->peer, st_status_str(status), st_vb_state_str(ep->state));
    }
    return status;
}

/* The peer's hello or reply in h: connects the QPs. */
static st_status_t st_vb_hello_take(st_net_ep_t *ep, const st_vb_hello_t *h)
{
    st_status_t status;

    if (h->magic != ST_VB_MAGIC || h->version != ST_VB_VERSION || h->from_rank != ep->peer ||
        h->to_rank != ep->ctx->rank || h->to_nonce != ep->ctx->addr.nonce ||
        h->from_nonce != ep->paddr.nonce || h->nqps != ep->nqps) {
        st_vb_ep_fail(ep, ST_ERR_USAGE, 1, "rank %d's verbs handshake does not match (version "
                      "%u, ranks %d->%d, %u QPs; expected %d->%d, %d QPs: same STRATA_IB_* on "
                      "every rank?)", ep->peer, h->version, h->from_rank, h->to_rank, h->nqps,
                      ep->peer, ep->ctx->rank, ep->nqps);
        return ST_ERR_USAGE;
    }
    for (int q = 0; q < ep->nqps; q++) {
        status = st_vb_qp_connect(ep, q, h->qpn[q], h->psn[q]);
        if (status != ST_OK) {
            st_vb_ep_fail(ep, status, 0, "QP 0x%x on %s could not be connected to rank %d "
                          "(RTR/RTS refused: the error before says why)", ep->qp[q]->qp_num,
                          ep->ctx->hca, ep->peer);
            return status;
        }
    }
    return ST_OK;
}

void st_vb_ep_set_ready(st_net_ep_t *ep)
{
    if (ep->state == ST_VB_EP_READY) {
        return;
    }
    ep->state = ST_VB_EP_READY;
    st_debug(ST_SUB_VERBS, "%s rank %d: connected to rank %d (%d QP%s, first 0x%x)",
             ep->ctx->name, ep->ctx->rank, ep->peer, ep->nqps, ep->nqps > 1 ? "s" : "",
             ep->qp[0]->qp_num);
    st_vb_ep_ready(ep);
}

/* Adopts an accepted socket whose hello (complete, in pend->in) is from ep's peer. */
static void st_vb_ep_accept(st_net_ep_t *ep, st_vb_pend_t *pend)
{
    st_net_ctx_t *ctx = ep->ctx;
    st_vb_hello_t h, reply;

    memcpy(&h, pend->in, sizeof(h));
    ep->fd   = pend->fd;
    pend->fd = -1;
    st_vb_listen_resume(ctx);
    (void)epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, ep->fd, NULL);
    {
        struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP, .data.u64 = ST_VB_EPDATA(ep)};

        (void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, ep->fd, &ev);
    }
    if (st_vb_hello_take(ep, &h) != ST_OK) {
        return;
    }
    st_vb_hello_fill(ep, &reply);
    ep->state = ST_VB_EP_WAIT_READY;
    ep->inlen = 0;
    (void)st_vb_send_bytes(ep, &reply, sizeof(reply));
}

st_status_t st_vb_connect(st_net_ctx_t *ctx, int peer, const void *addr, size_t len,
                          unsigned flags, st_net_ep_t **ep_p)
{
    st_net_ep_t *ep;
    st_status_t  status;
    size_t       per_qp = (size_t)ST_VB_RQ_DEPTH * ST_VB_CTL_SIZE;
    int          nqps = (int)ST_MAX(1u, ST_MIN(st_verbs_config.qps_per_conn,
                                              (unsigned)ST_VB_MAX_QPS));

    if (len < sizeof(st_vb_addr_t)) {
        st_error(ST_SUB_VERBS, "%s rank %d: rank %d's address is %zu B, not a verbs address "
                 "(%zu B): is STRATA_NET the same on every rank?", ctx->name, ctx->rank, peer, len,
                 sizeof(st_vb_addr_t));
        return ST_ERR_INVALID;
    }
    int          cqi = st_vb_cq_get(ctx, nqps);

    if (cqi < 0) {
        return ST_ERR_NO_MEMORY;
    }
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memcpy(&ep->paddr, addr, sizeof(ep->paddr));
    if (ep->paddr.magic != ST_VB_MAGIC || ep->paddr.version != ST_VB_VERSION) {
        st_error(ST_SUB_VERBS, "%s rank %d: rank %d's address is no verbs address of this "
                 "version (magic 0x%x, version %u): is STRATA_NET the same on every rank?",
                 ctx->name, ctx->rank, peer, ep->paddr.magic, ep->paddr.version);
        free(ep);
        return ST_ERR_INVALID;
    }
    ep->ctx   = ctx;
    ep->peer  = peer;
    ep->flags = flags;
    ep->fd    = -1;
    ep->nqps  = nqps;
    ep->cqi   = cqi;
    ep->paddr.hca[sizeof(ep->paddr.hca) - 1] = '\0';
    ST_CHECK_GOTO(st_vb_ep_slot(ctx, ep), status, err_free);
    ep->mem_len = (size_t)nqps * per_qp + (size_t)ST_VB_SQ_DEPTH * ST_VB_CTL_SIZE +
                  ST_VB_ANY_MAX;
    ep->mem = aligned_alloc(4096, ST_DIV_ROUND_UP(ep->mem_len, 4096) * 4096);
    ep->parts = calloc((size_t)ST_VB_SQ_DEPTH * (size_t)nqps, sizeof(*ep->parts));
    if (ep->mem == NULL || ep->parts == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto err_slot;
    }
    memset(ep->mem, 0, ep->mem_len);
    ep->mr = st_vb_mr_reg(ctx, ep->mem, ep->mem_len, "control buffers");
    if (ep->mr == NULL) {
        status = ST_ERR_NO_MEMORY;
        goto err_slot;
    }
    for (int i = 0; i < ST_VB_SQ_DEPTH; i++) {
        ep->ctl_free[i] = ST_VB_SQ_DEPTH - 1 - i;
    }
    ep->nctl_free = ST_VB_SQ_DEPTH;
    for (int i = 0; i < ST_VB_SQ_DEPTH * nqps; i++) {
        ep->parts[i].buf  = -1;
        ep->parts[i].next = (i + 1 < ST_VB_SQ_DEPTH * nqps) ? i + 1 : -1;
    }
    ep->part_free = 0;
    for (int q = 0; q < nqps; q++) {
        ST_CHECK_GOTO(st_vb_qp_create(ep, q), status, err_qps);
    }
    ctx->cq_qps[cqi] += nqps;

    if (peer == ctx->rank && ep->paddr.nonce == ctx->addr.nonce) {
        for (int q = 0; q < nqps; q++) {
            ST_CHECK_GOTO(st_vb_qp_connect(ep, q, ep->qp[q]->qp_num, ep->psn[q]), status,
                          err_users);
        }
        st_vb_ep_set_ready(ep);
    } else if (ctx->rank < peer) {
        int fd = socket(ep->paddr.oob.sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC,
                        0);
        struct epoll_event ev = {.events = EPOLLOUT | EPOLLIN | EPOLLRDHUP,
                                 .data.u64 = ST_VB_EPDATA(ep)};

        if (fd < 0) {
            st_error(ST_SUB_VERBS, "socket() failed: %s", strerror(errno));
            status = ST_ERR_IO;
            goto err_users;
        }
        st_vb_keepalive(fd);
        if (connect(fd, &ep->paddr.oob.sa, ep->paddr.oob.sa.sa_family == AF_INET6
                                              ? sizeof(struct sockaddr_in6)
                                              : sizeof(struct sockaddr_in)) != 0 &&
            errno != EINPROGRESS) {
            char str[ST_SOCKADDR_STRLEN];

            st_error(ST_SUB_VERBS, "%s rank %d: cannot reach rank %d's verbs listener %s: %s",
                     ctx->name, ctx->rank, peer,
                     st_socket_addr_str(&ep->paddr.oob, str, sizeof(str)), strerror(errno));
            close(fd);
            status = ST_ERR_REMOTE;
            goto err_users;
        }
        ep->fd    = fd;
        ep->state = ST_VB_EP_CONNECTING;
        if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
            status = ST_ERR_IO;
            goto err_users;
        }
    } else {
        ep->state = ST_VB_EP_WAIT_HELLO;
        for (int i = 0; i < ST_VB_MAX_PEND; i++) {
            st_vb_hello_t h;

            if (ctx->pend[i].fd < 0 || ctx->pend[i].inlen < sizeof(h)) {
                continue;
            }
            memcpy(&h, ctx->pend[i].in, sizeof(h));
            if (h.from_rank == peer && h.from_nonce == ep->paddr.nonce) {
                st_vb_ep_accept(ep, &ctx->pend[i]);
                break;
            }
        }
    }
    *ep_p = ep;
    return ST_OK;

err_users:
    ctx->cq_qps[cqi] -= nqps;
err_qps:
    if (ep->fd >= 0) {
        close(ep->fd);
    }
    for (int q = 0; q < nqps; q++) {
        if (ep->qp[q] != NULL) {
            ctx->ibv->destroy_qp(ep->qp[q]);
        }
    }
    ctx->ibv->dereg_mr(ep->mr);
err_slot:
    ctx->eps[ep->idx] = NULL;
err_free:
    free(ep->mem);
    free(ep->parts);
    free(ep);
    return status;
}

/* An event on an endpoint's socket. */
static void st_vb_ep_sock_event(st_net_ep_t *ep, uint32_t events)
{
    st_net_ctx_t *ctx = ep->ctx;
    ssize_t       n;

    if (ep->state == ST_VB_EP_CONNECTING) {
        int       err = 0;
        socklen_t elen = sizeof(err);
        st_vb_hello_t h;

        if (!(events & (EPOLLOUT | EPOLLERR | EPOLLHUP))) {
            return;
        }
        (void)getsockopt(ep->fd, SOL_SOCKET, SO_ERROR, &err, &elen);
        if (err != 0) {
            char str[ST_SOCKADDR_STRLEN];

            st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "cannot reach rank %d's verbs listener %s: %s",
                          ep->peer, st_socket_addr_str(&ep->paddr.oob, str, sizeof(str)),
                          strerror(err));
            return;
        }
        {
            struct epoll_event ev = {.events = EPOLLIN | EPOLLRDHUP,
                                     .data.u64 = ST_VB_EPDATA(ep)};

            (void)epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, ep->fd, &ev);
        }
        st_vb_hello_fill(ep, &h);
        ep->state = ST_VB_EP_WAIT_REPLY;
        ep->inlen = 0;
        (void)st_vb_send_bytes(ep, &h, sizeof(h));
        return;
    }
    if (ep->state == ST_VB_EP_WAIT_REPLY || ep->state == ST_VB_EP_WAIT_READY) {
        size_t want = (ep->state == ST_VB_EP_WAIT_REPLY) ? sizeof(st_vb_hello_t) : 1;

        n = recv(ep->fd, ep->in + ep->inlen, want - ep->inlen, MSG_DONTWAIT);
        if (n > 0 && ep->in[0] == 'E') {
            /* a refusal ('E' and its reason; a hello starts with the magic's 'B'): the rest of
             * it, then the peer's close */
            ssize_t more;

            ep->inlen += (size_t)n;
            more = recv(ep->fd, ep->in + ep->inlen, sizeof(ep->in) - 1 - ep->inlen,
                        MSG_DONTWAIT);
            ep->inlen += (more > 0) ? (size_t)more : 0;
            n = 0;
        }
        if (n > 0) {
            ep->inlen += (size_t)n;
            if (ep->inlen < want) {
                return;
            }
            if (ep->state == ST_VB_EP_WAIT_READY && ep->in[0] != ST_VB_READY_BYTE) {
                st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "rank %d failed the verbs handshake "
                              "(0x%02x instead of its ready message)", ep->peer, ep->in[0]);
                return;
            }
            if (ep->state == ST_VB_EP_WAIT_REPLY) {
                st_vb_hello_t h;
                uint8_t       ready = ST_VB_READY_BYTE;

                memcpy(&h, ep->in, sizeof(h));
                if (st_vb_hello_take(ep, &h) != ST_OK ||
                    st_vb_send_bytes(ep, &ready, 1) != ST_OK) {
                    return;
                }
            }
            ep->inlen = 0;
            st_vb_ep_set_ready(ep);
            return;
        }
        if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
            return;
        }
        if (ep->inlen > 1 && ep->in[0] == 'E') { /* the peer refused, and said why */
            ep->in[ST_MIN(ep->inlen, sizeof(ep->in) - 1)] = '\0';
            for (uint8_t *c = ep->in + 1; *c != '\0'; c++) {
                *c = (*c < 0x20 || *c > 0x7e) ? '?' : *c;
            }
            st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "rank %d refused the verbs handshake: %.200s",
                          ep->peer, (const char *)ep->in + 1);
            return;
        }
        st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "rank %d closed the verbs handshake (%s) while %s",
                      ep->peer, n == 0 ? "end of stream" : strerror(errno),
                      st_vb_state_str(ep->state));
        return;
    }
    if (ep->state == ST_VB_EP_READY) {
        char frame[1 + sizeof(ep->why)];

        ssize_t off = 0;

        int     err;

        n   = recv(ep->fd, frame, sizeof(frame) - 1, MSG_DONTWAIT);
        err = errno;
        if (n < 0 && (err == EAGAIN || err == EINTR)) {
            return;
        }
        while (off < n && frame[off] == ST_VB_READY_BYTE) {
            off++; /* the initiator's READY, when its first message made this side ready */
        }
        if (n > 0 && off == n) {
            return;
        }
        if (n > off && frame[off] != 'E') {
            st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "rank %d sent %zd unexpected bytes (0x%02x...) "
                          "on the verbs connection: is it the same strata version?", ep->peer,
                          n - off, (unsigned)(uint8_t)frame[off]);
            return;
        }
        if (n > off) { /* 'E': the peer failed the connection and said why */
            frame[n] = '\0';
            for (char *c = frame + off + 1; *c != '\0'; c++) {
                *c = (*c < 0x20 || *c > 0x7e) ? '?' : *c;
            }
            ep->hup_at = st_time_now();
            st_vb_sock_close(ep);
            (void)st_vb_cq_poll(ctx, 1 << 20);
            snprintf(ep->why, sizeof(ep->why), "rank %d failed the connection: %.340s", ep->peer,
                     frame + off + 1);
            if (ep->recvs != NULL || ep->msends != NULL || ep->sends != NULL) {
                st_vb_ep_fail(ep, ST_ERR_REMOTE, 0, NULL);
                st_warn(ST_SUB_VERBS, "%s rank %d: %s", ctx->name, ctx->rank, ep->why);
            } else {
                ep->state = ST_VB_EP_FAILED;
            }
            return;
        }
        /* The peer closed its end: its process exited or failed, or it closed the connection.
         * Completions already in the CQ (its last messages) are taken first by the caller's
         * loop; what is still in flight fails. */
        ep->hup_at = st_time_now();
        st_vb_sock_close(ep);
        (void)st_vb_cq_poll(ctx, 1 << 20); /* its last messages first */
        snprintf(ep->why, sizeof(ep->why), "rank %d closed its connection (%s, over %s): it "
                 "failed or exited", ep->peer, n == 0 ? "end of stream" : strerror(err),
                 ctx->hca);
        if (ep->recvs != NULL || ep->msends != NULL || ep->sends != NULL) {
            st_vb_ep_fail(ep, ST_ERR_REMOTE, 0, NULL);
            st_warn(ST_SUB_VERBS, "%s rank %d: %s, with transfers pending", ctx->name,
                    ctx->rank, ep->why);
        } else {
            st_debug(ST_SUB_VERBS, "%s rank %d: rank %d closed its connection", ctx->name,
                     ctx->rank, ep->peer);
            ep->state = ST_VB_EP_FAILED; /* later operations fail at once */
        }
    }
}

/* A readable accepted socket not yet matched to an endpoint. */
static void st_vb_pend_event(st_net_ctx_t *ctx, st_vb_pend_t *pend)
{
    ssize_t       n;
    st_vb_hello_t h;

    if (pend->inlen >= sizeof(h)) {
        return; /* complete: waits for its endpoint (connect) */
    }
    n = recv(pend->fd, pend->in + pend->inlen, sizeof(h) - pend->inlen, MSG_DONTWAIT);
    if (n < 0 && (errno == EAGAIN || errno == EINTR)) {
        return;
    }
    if (n <= 0) {
        (void)epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, pend->fd, NULL);
        close(pend->fd);
        pend->fd = -1;
        st_vb_listen_resume(ctx);
        return;
    }
    pend->inlen += (size_t)n;
    if (pend->inlen < sizeof(h)) {
        return;
    }
    memcpy(&h, pend->in, sizeof(h));
    if (h.magic != ST_VB_MAGIC || h.to_nonce != ctx->addr.nonce) {
        st_warn(ST_SUB_VERBS, "%s rank %d: a verbs handshake for another context reached this "
                "listener (magic 0x%x); dropped", ctx->name, ctx->rank, h.magic);
        (void)epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, pend->fd, NULL);
        close(pend->fd);
        pend->fd = -1;
        st_vb_listen_resume(ctx);
        return;
    }
    for (uint32_t i = 0; i < ctx->neps; i++) {
        st_net_ep_t *ep = ctx->eps[i];

        if (ep != NULL && ep->state == ST_VB_EP_WAIT_HELLO && ep->peer == h.from_rank &&
            ep->paddr.nonce == h.from_nonce) {
            st_vb_ep_accept(ep, pend);
            return;
        }
    }
    /* no endpoint yet: connect() adopts it; stop watching it meanwhile */
    (void)epoll_ctl(ctx->epfd, EPOLL_CTL_DEL, pend->fd, NULL);
}

void st_vb_listen_resume(st_net_ctx_t *ctx)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.u64 = UINT64_C(3) << 60};

    if (ctx->listen_paused) {
        ctx->listen_paused = 0;
        (void)epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, ctx->lfd, &ev);
    }
}

static void st_vb_accept(st_net_ctx_t *ctx)
{
    for (;;) {
        int fd, slot = -1;

        for (int i = 0; i < ST_VB_MAX_PEND && slot < 0; i++) {
            slot = (ctx->pend[i].fd < 0) ? i : -1;
        }
        if (slot < 0) {
            /* full: the rest wait in the kernel's backlog until a handshake is matched */
            struct epoll_event ev = {.events = 0, .data.u64 = UINT64_C(3) << 60};

            (void)epoll_ctl(ctx->epfd, EPOLL_CTL_MOD, ctx->lfd, &ev);
            ctx->listen_paused = 1;
            return;
        }
        fd = accept4(ctx->lfd, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            return;
        }
        st_vb_keepalive(fd);
        ctx->pend[slot].fd    = fd;
        ctx->pend[slot].inlen = 0;
        ctx->pend[slot].gen++;
        {
            struct epoll_event ev = {.events = EPOLLIN,
                                     .data.u64 = (UINT64_C(5) << 60) | ((uint64_t)slot << 32) |
                                                 ctx->pend[slot].gen};

            (void)epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev);
        }
    }
}

static void st_vb_async_events(st_net_ctx_t *ctx)
{
    struct ibv_async_event ev;

    while (ctx->ibv->get_async_event(ctx->dev, &ev) == 0) {
        const char *what = ctx->ibv->event_type_str(ev.event_type);

        switch (ev.event_type) {
        case IBV_EVENT_QP_FATAL:
        case IBV_EVENT_QP_REQ_ERR:
        case IBV_EVENT_QP_ACCESS_ERR:
            for (uint32_t i = 0; i < ctx->neps; i++) {
                st_net_ep_t *ep = ctx->eps[i];

                for (int q = 0; ep != NULL && q < ep->nqps; q++) {
                    if (ep->qp[q] == ev.element.qp) {
                        st_vb_ep_fail(ep, ST_ERR_REMOTE, 1, "%s: QP 0x%x to rank %d: async "
                                      "event %s", ctx->hca, ev.element.qp->qp_num, ep->peer,
                                      what);
                        break;
                    }
                }
            }
            break;
        case IBV_EVENT_CQ_ERR:
        case IBV_EVENT_DEVICE_FATAL:
            st_error(ST_SUB_VERBS, "%s rank %d: %s: async event %s: every connection of the "
                     "context fails", ctx->name, ctx->rank, ctx->hca, what);
            for (uint32_t i = 0; i < ctx->neps; i++) {
                if (ctx->eps[i] != NULL) {
                    st_vb_ep_fail(ctx->eps[i], ST_ERR_IO, 0, NULL);
                }
            }
            break;
        default:
            st_info(ST_SUB_VERBS, "%s rank %d: %s: async event %s", ctx->name, ctx->rank,
                    ctx->hca, what);
            break;
        }
        ctx->ibv->ack_async_event(&ev);
    }
}

int st_vb_conn_progress(st_net_ctx_t *ctx)
{
    struct epoll_event evs[16];
    int                n, did = 0;

    n = epoll_wait(ctx->epfd, evs, 16, 0);
    for (int i = 0; i < n; i++) {
        uint64_t d = evs[i].data.u64;

        switch (d >> 60) {
        case 1: /* completion channel: drain its events; the caller polls the CQs */
            st_vb_channel_drain(ctx, 64);
            did = 1;
            break;
        case 2:
            st_vb_async_events(ctx);
            did = 1;
            break;
        case 3:
            st_vb_accept(ctx);
            did = 1;
            break;
        default:
            if ((d >> 60) == 5) {
                uint32_t slot = (uint32_t)((d >> 32) & 0xfff);

                if (slot < ST_VB_MAX_PEND && ctx->pend[slot].fd >= 0 &&
                    ctx->pend[slot].gen == (uint32_t)d) {
                    st_vb_pend_event(ctx, &ctx->pend[slot]);
                }
            } else {
                st_net_ep_t *ep = st_vb_ep_lookup(ctx, (uint32_t)((d >> 16) & 0xffff),
                                                  (uint16_t)d);

                if (ep != NULL && ep->fd >= 0) {
                    st_vb_ep_sock_event(ep, evs[i].events);
                }
            }
            did = 1;
            break;
        }
    }
    return did;
}

void st_vb_disconnect(st_net_ep_t *ep, int force, double timeout)
{
    st_net_ctx_t *ctx = ep->ctx;
    double        start = st_time_now();

    if (!force && ep->state == ST_VB_EP_READY) {
        while ((ep->msends != NULL || ep->sends != NULL) && ep->state == ST_VB_EP_READY &&
               st_time_now() - start < timeout) {
            (void)st_vb_progress(ctx);
        }
        if (ep->msends != NULL || ep->sends != NULL) {
            st_warn(ST_SUB_VERBS, "%s rank %d: closing the connection to rank %d took over %g s;"
                    " dropping it", ctx->name, ctx->rank, ep->peer, timeout);
        }
    }
    st_vb_ep_fail(ep, ST_ERR_CANCELED, 0, NULL);
    /* the QPs are in the error state: their completions still in the CQ name this endpoint's
     * generation, which lookups no longer find once the slot is released */
    for (int q = 0; q < ep->nqps; q++) {
        if (ep->qp[q] != NULL) {
            ctx->ibv->destroy_qp(ep->qp[q]);
        }
    }
    ctx->cq_qps[ep->cqi] -= ep->nqps;
    for (int i = 0; i < ST_VB_SQ_DEPTH * ep->nqps; i++) {
        if (ep->parts[i].buf >= 0) {
            st_vb_buf_put(ctx, ep->parts[i].buf);
        }
    }
    for (int s = 0; s < ST_VB_SLOTS; s++) {
        for (st_vb_cts_t *c = ep->sslot[s].parts, *next; c != NULL; c = next) {
            next = c->next;
            free(c);
        }
    }
    for (st_vb_cts_t *c = ep->cts0, *next; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    for (st_vb_cts_t *c = ep->waitq, *next; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    ctx->ibv->dereg_mr(ep->mr);
    ctx->eps[ep->idx] = NULL;
    free(ep->mem);
    free(ep->parts);
    free(ep);
}
