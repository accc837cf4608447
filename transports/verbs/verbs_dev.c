/*
 * verbs_dev.c - HCA ports and contexts of the verbs transport.
 *
 * A context is one HCA port (a rail): its PD, one CQ shared by every QP of the context with a
 * completion channel, the out-of-band TCP listener for the handshakes, and an epoll set of the
 * channel's fd, the async event fd, the listener and the endpoints' sockets (the event fd that
 * strata's spin-then-block waits sleep on). The port is chosen from STRATA_IB_HCA (NCCL_IB_HCA's
 * syntax) and the caller's device list (a rail's device); only ACTIVE ports count. Anything that
 * makes the transport unusable here (no library, no device, no active port) is ST_ERR_NO_DEVICE
 * said at INFO: the selector then takes UCX.
 */
#include "config.h"
#include "transports/verbs/verbs.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/param.h"

int st_vb_hca_match(const char *spec, const char *name, int port)
{
    int         exclude = 0, exact = 0, hit = 0;
    const char *p;

    if (spec == NULL || spec[0] == '\0') {
        return 1;
    }
    p = spec;
    if (*p == '^') {
        exclude = 1;
        p++;
    }
    if (*p == '=') {
        exact = 1;
        p++;
    }
    while (*p != '\0' && !hit) {
        size_t      tok = strcspn(p, ",");
        size_t      nlen = strcspn(p, ",:");
        int         want_port = -1;

        if (nlen < tok) {
            want_port = atoi(p + nlen + 1);
        }
        if (nlen > 0) {
            int name_ok = exact ? (strlen(name) == nlen && strncmp(name, p, nlen) == 0)
                                : (strncmp(name, p, nlen) == 0);

            hit = name_ok && (want_port < 0 || want_port == port);
        }
        p += tok;
        if (*p == ',') {
            p++;
        }
    }
    return exclude ? !hit : hit;
}

const char *st_vb_wc_hint(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_RETRY_EXC_ERR:
        return "the peer stopped answering: it died, or the two HCAs cannot reach each other "
               "(link down, routing or GID index on RoCE: STRATA_IB_GID_INDEX), or the network "
               "is congested past STRATA_IB_TIMEOUT/STRATA_IB_RETRY_CNT";
    case IBV_WC_RNR_RETRY_EXC_ERR:
        return "the peer had no receive posted (a protocol bug: receives never run out)";
    case IBV_WC_REM_ACCESS_ERR:
        return "the peer refused the write (a key or bounds mismatch: the peer freed or "
               "re-registered its buffer)";
    case IBV_WC_LOC_PROT_ERR:
        return "a local buffer is not registered for this access (freed memory, or ACS/IOMMU "
               "blocking the HCA)";
    case IBV_WC_LOC_LEN_ERR:
    case IBV_WC_REM_INV_REQ_ERR:
        return "a message longer than the posted receive (a protocol mismatch: are both ranks "
               "the same strata version?)";
    case IBV_WC_WR_FLUSH_ERR:
        return "the queue pair was already in error after an earlier failure";
    default:
        return "see the HCA's counters (ibv_devinfo, perfquery)";
    }
}

/* The GID type sysfs gives for index i of the port: 2 "RoCE v2", 1 another ("IB/RoCE v1"), 0
 * unknown (no sysfs entry: a stand-in, an old kernel). */
static int st_vb_gid_type(const st_net_ctx_t *ctx, int i)
{
    char  path[256], type[32] = "";
    FILE *f;

    snprintf(path, sizeof(path), "/sys/class/infiniband/%s/ports/%u/gid_attrs/types/%d",
             ctx->hca, ctx->port, i);
    f = fopen(path, "r");
    if (f == NULL) {
        return 0;
    }
    if (fgets(type, sizeof(type), f) == NULL) {
        type[0] = '\0';
    }
    fclose(f);
    return (strncmp(type, "RoCE v2", 7) == 0) ? 2 : 1;
}

/* Picks the port's IPv4-mapped GID (::ffff:a.b.c.d) of type RoCE v2 (mlx5 lists each address
 * twice, the RoCE v1 entry first: the type decides, as NCCL's GID selection does), an
 * IPv4-mapped one of unknown type, or index 0. */
static int st_vb_pick_gid(st_net_ctx_t *ctx, union ibv_gid *gid_p)
{
    static const uint8_t v4map[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    union ibv_gid        gid;
    int                  n = ctx->port_attr.gid_tbl_len, fallback = -1;

    if (st_verbs_config.gid_index >= 0) {
        if (ctx->ibv->query_gid(ctx->dev, ctx->port, st_verbs_config.gid_index, gid_p) != 0) {
            return -1;
        }
        return st_verbs_config.gid_index;
    }
    for (int i = 0; i < n && i < 256; i++) {
        if (ctx->ibv->query_gid(ctx->dev, ctx->port, i, &gid) == 0 &&
            memcmp(gid.raw, v4map, sizeof(v4map)) == 0) {
            int type = st_vb_gid_type(ctx, i);

            if (type == 2) {
                *gid_p = gid;
                return i;
            }
            if (fallback < 0) { /* no RoCE v2 entry: the first IPv4-mapped one */
                fallback = i;
            }
        }
    }
    if (fallback >= 0 && ctx->ibv->query_gid(ctx->dev, ctx->port, fallback, gid_p) == 0) {
        return fallback;
    }
    if (ctx->ibv->query_gid(ctx->dev, ctx->port, 0, gid_p) != 0) {
        memset(gid_p, 0, sizeof(*gid_p));
    }
    return 0;
}

static const char *st_vb_port_state_str(enum ibv_port_state state)
{
    switch (state) {
    case IBV_PORT_DOWN:   return "DOWN";
    case IBV_PORT_INIT:   return "INIT (no subnet manager?)";
    case IBV_PORT_ARMED:  return "ARMED";
    case IBV_PORT_ACTIVE: return "ACTIVE";
    default:              return "not active";
    }
}

typedef struct st_vb_port {
    struct ibv_device *dev;
    char               name[64];
    int                port;
} st_vb_port_t;

/* Lists the active ports passing STRATA_IB_HCA and `devices` (NULL: any; one entry of a rail
 * list, "=mlx5_1:1"), in device order, into ports (capacity cap); writes why a port was passed
 * over into why. Returns the count. */
static int st_vb_ports(const st_ibv_t *ibv, struct ibv_device **list, int ndev,
                       const char *devices, st_vb_port_t *ports, int cap, char *why, size_t len)
{
    int    n = 0;
    size_t off = 0;

    why[0] = '\0';
    for (int d = 0; d < ndev; d++) {
        const char             *name = ibv->get_device_name(list[d]);
        struct ibv_context     *dctx;
        struct ibv_device_attr  dattr;

        if (name == NULL) {
            continue;
        }
        /* RC with RDMA write with immediate: InfiniBand and RoCE HCAs (transport IB); not
         * iWARP (no write with immediate) nor EFA (no RC), which UCX serves instead */
        if (list[d]->transport_type != IBV_TRANSPORT_IB) {
            off += (size_t)snprintf(why + off, off < len ? len - off : 0, "%s%s is no "
                                    "InfiniBand/RoCE HCA (transport %d: iWARP or EFA?)",
                                    off ? "; " : "", name, (int)list[d]->transport_type);
            continue;
        }
        dctx = ibv->open_device(list[d]);
        if (dctx == NULL) {
            off += (size_t)snprintf(why + off, off < len ? len - off : 0, "%s%s cannot be "
                                    "opened (%s)", off ? "; " : "", name, strerror(errno));
            continue;
        }
        if (ibv->query_device(dctx, &dattr) != 0) {
            dattr.phys_port_cnt = 1;
        }
        for (int p = 1; p <= dattr.phys_port_cnt && n < cap; p++) {
            struct ibv_port_attr pattr;

            if (!st_vb_hca_match(st_verbs_config.hca, name, p) ||
                (devices != NULL && devices[0] != '\0' && !st_vb_hca_match(devices, name, p))) {
                continue;
            }
            if (ibv->query_port(dctx, (uint8_t)p, &pattr) != 0) {
                continue;
            }
            if (pattr.state != IBV_PORT_ACTIVE) {
                off += (size_t)snprintf(why + off, off < len ? len - off : 0, "%s%s:%d is %s",
                                        off ? "; " : "", name, p,
                                        st_vb_port_state_str(pattr.state));
                continue;
            }
            ports[n].dev = list[d];
            snprintf(ports[n].name, sizeof(ports[n].name), "%s", name);
            ports[n].port = p;
            n++;
        }
        ibv->close_device(dctx);
    }
    return n;
}

st_status_t st_vb_rail_devices(char *buf, size_t len)
{
    const st_ibv_t     *ibv;
    struct ibv_device **list;
    st_vb_port_t        ports[16];
    char                why[256];
    int                 ndev = 0, n;
    size_t              off = 0;

    buf[0] = '\0';
    if (st_verbs_ibv_get(&ibv, why, sizeof(why)) != ST_OK) {
        return ST_ERR_NO_DEVICE;
    }
    list = ibv->get_device_list(&ndev);
    if (list == NULL) {
        return ST_ERR_NO_DEVICE;
    }
    n = st_vb_ports(ibv, list, ndev, NULL, ports, 16, why, sizeof(why));
    ibv->free_device_list(list);
    for (int i = 0; i < n; i++) {
        off += (size_t)snprintf(buf + off, off < len ? len - off : 0, "%s=%s:%d",
                                i ? "," : "", ports[i].name, ports[i].port);
    }
    return (n > 0) ? ST_OK : ST_ERR_NO_DEVICE;
}

int st_vb_cq_get(st_net_ctx_t *ctx, int nqps)
{
    struct ibv_cq *cq;
    int            i;

    for (i = 0; i < ctx->ncqs; i++) {
        if ((ctx->cq_qps[i] + nqps) * ST_VB_CQ_PER_QP <= ctx->cq_len) {
            return i;
        }
    }
    if (ctx->ncqs == ST_VB_MAX_CQS || nqps * ST_VB_CQ_PER_QP > ctx->cq_len) {
        st_error(ST_SUB_VERBS, "%s rank %d: %s has %d completion queues of %d entries, room for "
                 "%d QPs each: no room for %d more (fewer STRATA_IB_QPS_PER_CONN)", ctx->name,
                 ctx->rank, ctx->hca, ctx->ncqs, ctx->cq_len, ctx->cq_len / ST_VB_CQ_PER_QP,
                 nqps);
        errno = ENOSPC;
        return -1;
    }
    cq = ctx->ibv->create_cq(ctx->dev, ctx->cq_len, ctx, ctx->channel, 0);
    if (cq == NULL) {
        int err = errno;

        st_error(ST_SUB_VERBS, "ibv_create_cq(%s, %d) failed: %s%s", ctx->hca, ctx->cq_len,
                 strerror(err), err == ENOMEM ? " (is `ulimit -l` too small?)" : "");
        errno = err;
        return -1;
    }
    if (ctx->ibv->req_notify_cq(cq, 0) != 0) {
        st_error(ST_SUB_VERBS, "ibv_req_notify_cq(%s) failed", ctx->hca);
        ctx->ibv->destroy_cq(cq);
        errno = EIO;
        return -1;
    }
    ctx->cqs[i]        = cq;
    ctx->cq_qps[i]     = 0;
    ctx->cq_unacked[i] = 0;
    ctx->ncqs++;
    return i;
}

void st_vb_channel_drain(st_net_ctx_t *ctx, unsigned ack_at)
{
    struct ibv_cq *cq;
    void          *cqctx;

    while (ctx->ibv->get_cq_event(ctx->channel, &cq, &cqctx) == 0) {
        int i = 0;

        while (i < ctx->ncqs - 1 && ctx->cqs[i] != cq) {
            i++;
        }
        ctx->cq_unacked[i]++;
    }
    for (int i = 0; i < ctx->ncqs; i++) {
        if (ctx->cq_unacked[i] > 0 && ctx->cq_unacked[i] >= ack_at) {
            ctx->ibv->ack_cq_events(ctx->cqs[i], ctx->cq_unacked[i]);
            ctx->cq_unacked[i] = 0;
        }
    }
}

static st_status_t st_vb_epoll_add(st_net_ctx_t *ctx, int fd, uint64_t data, uint32_t events)
{
    struct epoll_event ev = {.events = events, .data.u64 = data};

    if (epoll_ctl(ctx->epfd, EPOLL_CTL_ADD, fd, &ev) != 0) {
        st_error(ST_SUB_VERBS, "epoll_ctl(ADD fd %d) failed: %s", fd, strerror(errno));
        return ST_ERR_IO;
    }
    return ST_OK;
}

st_status_t st_vb_ctx_open(const st_net_config_t *cfg, st_net_ctx_t **ctx_p)
{
    const st_ibv_t     *ibv;
    struct ibv_device **list;
    st_vb_port_t        ports[16];
    st_net_ctx_t       *ctx;
    st_sockaddr_t       sa;
    char                why[512], ifname[ST_IFNAME_MAX];
    int                 ndev = 0, n;
    st_status_t         status;

    if (st_verbs_ibv_get(&ibv, why, sizeof(why)) != ST_OK) {
        if (st_verbs_config.lib != NULL && st_verbs_config.lib[0] != '\0') {
            st_warn(ST_SUB_VERBS, "verbs not used: %s", why); /* the user named a library */
        } else {
            st_info(ST_SUB_VERBS, "verbs not used: %s", why);
        }
        st_log_append_error("verbs: %s", why); /* for init's message under STRATA_NET=verbs */
        return ST_ERR_NO_DEVICE;
    }
    list = ibv->get_device_list(&ndev);
    if (list == NULL || ndev == 0) {
        st_info(ST_SUB_VERBS, "verbs not used: no RDMA device (ibv_get_device_list: %s; "
                "`ibv_devices` lists them: is the HCA's kernel driver loaded?)",
                list == NULL ? strerror(errno) : "empty");
        st_log_append_error("verbs: no RDMA device (ibv_get_device_list: %s)",
                            list == NULL ? strerror(errno) : "empty");
        if (list != NULL) {
            ibv->free_device_list(list);
        }
        return ST_ERR_NO_DEVICE;
    }
    n = st_vb_ports(ibv, list, ndev, cfg->devices, ports, 16, why, sizeof(why));
    if (n == 0) {
        st_info(ST_SUB_VERBS, "verbs not used: no active HCA port%s%s%s%s%s%s",
                (st_verbs_config.hca && st_verbs_config.hca[0]) ? " in STRATA_IB_HCA=" : "",
                st_verbs_config.hca ? st_verbs_config.hca : "",
                (cfg->devices && cfg->devices[0]) ? " among " : "",
                cfg->devices ? cfg->devices : "", why[0] ? ": " : "", why);
        st_log_append_error("verbs: no active HCA port%s%s%s%s",
                            (st_verbs_config.hca && st_verbs_config.hca[0]) ? " in STRATA_IB_HCA="
                                                                            : "",
                            st_verbs_config.hca ? st_verbs_config.hca : "", why[0] ? ": " : "",
                            why);
        ibv->free_device_list(list);
        return ST_ERR_NO_DEVICE;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        ibv->free_device_list(list);
        return ST_ERR_NO_MEMORY;
    }
    ctx->ibv  = ibv;
    ctx->rank = cfg->rank;
    ctx->epfd = ctx->lfd = -1;
    ctx->buf_free = -1;
    snprintf(ctx->name, sizeof(ctx->name), "%s", cfg->name);
    snprintf(ctx->hca, sizeof(ctx->hca), "%s", ports[0].name);
    ctx->port = (uint8_t)ports[0].port;
    for (int i = 0; i < ST_VB_MAX_PEND; i++) {
        ctx->pend[i].fd = -1;
    }
    ctx->dev = ibv->open_device(ports[0].dev);
    ibv->free_device_list(list);
    if (ctx->dev == NULL) {
        st_error(ST_SUB_VERBS, "ibv_open_device(%s) failed: %s", ctx->hca, strerror(errno));
        status = ST_ERR_IO;
        goto err_free;
    }
    if (ibv->query_device(ctx->dev, &ctx->dev_attr) != 0 ||
        ibv->query_port(ctx->dev, ctx->port, &ctx->port_attr) != 0) {
        st_error(ST_SUB_VERBS, "cannot query %s:%u: %s", ctx->hca, ctx->port, strerror(errno));
        status = ST_ERR_IO;
        goto err_close;
    }
    ctx->gid_index = st_vb_pick_gid(ctx, &ctx->gid);
    if (ctx->gid_index == 0 && st_verbs_config.gid_index < 0 &&
        ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET) {
        st_warn(ST_SUB_VERBS, "%s:%u (RoCE) has no IPv4-mapped GID: using GID index 0, often a "
                "link-local or RoCE v1 GID that routers drop (RETRY_EXC later); set "
                "STRATA_IB_GID_INDEX (`show_gids` lists them)", ctx->hca, ctx->port);
    }
    if (ctx->gid_index < 0) {
        st_error(ST_SUB_VERBS, "%s:%u has no GID %d (STRATA_IB_GID_INDEX; `show_gids` or "
                 "`ibv_devinfo -v` lists them)", ctx->hca, ctx->port, st_verbs_config.gid_index);
        status = ST_ERR_INVALID;
        goto err_close;
    }
    ctx->pd = ibv->alloc_pd(ctx->dev);
    if (ctx->pd == NULL) {
        st_error(ST_SUB_VERBS, "ibv_alloc_pd(%s) failed: %s", ctx->hca, strerror(errno));
        status = ST_ERR_IO;
        goto err_close;
    }
    ctx->channel = ibv->create_comp_channel(ctx->dev);
    if (ctx->channel == NULL) {
        st_error(ST_SUB_VERBS, "ibv_create_comp_channel(%s) failed: %s", ctx->hca,
                 strerror(errno));
        status = ST_ERR_IO;
        goto err_pd;
    }
    (void)fcntl(ctx->channel->fd, F_SETFL, fcntl(ctx->channel->fd, F_GETFL) | O_NONBLOCK);
    (void)fcntl(ctx->dev->async_fd, F_SETFL, fcntl(ctx->dev->async_fd, F_GETFL) | O_NONBLOCK);
    /* 32 QPs per CQ (16 Ki entries), more CQs as peers come (st_vb_cq_get) */
    ctx->cq_len = ST_MIN(ctx->dev_attr.max_cqe > 0 ? ctx->dev_attr.max_cqe : 4096,
                         32 * ST_VB_CQ_PER_QP);
    if (st_vb_cq_get(ctx, 0) < 0) {
        status = (errno == ENOMEM) ? ST_ERR_NO_MEMORY : ST_ERR_IO;
        goto err_channel;
    }
    ctx->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (ctx->epfd < 0) {
        st_error(ST_SUB_VERBS, "epoll_create1 failed: %s", strerror(errno));
        status = ST_ERR_IO;
        goto err_cq;
    }
    /* the out-of-band listener, on the bootstrap's interface (STRATA_SOCKET_IFNAME) */
    ST_CHECK_GOTO(st_socket_find_if(st_core_config.socket_ifname, ifname, &sa), status, err_ep);
    ST_CHECK_GOTO(st_socket_listen(&sa, &ctx->lfd), status, err_ep);
    (void)fcntl(ctx->lfd, F_SETFL, fcntl(ctx->lfd, F_GETFL) | O_NONBLOCK);
    ST_CHECK_GOTO(st_vb_epoll_add(ctx, ctx->channel->fd, UINT64_C(1) << 60, EPOLLIN), status,
                  err_listen);
    ST_CHECK_GOTO(st_vb_epoll_add(ctx, ctx->dev->async_fd, UINT64_C(2) << 60, EPOLLIN), status,
                  err_listen);
    ST_CHECK_GOTO(st_vb_epoll_add(ctx, ctx->lfd, UINT64_C(3) << 60, EPOLLIN), status,
                  err_listen);
    memset(&ctx->addr, 0, sizeof(ctx->addr));
    ctx->addr.magic      = ST_VB_MAGIC;
    ctx->addr.version    = ST_VB_VERSION;
    ctx->addr.port       = ctx->port;
    ctx->addr.link_layer = ctx->port_attr.link_layer;
    ctx->addr.lid        = ctx->port_attr.lid;
    ctx->addr.mtu        = (uint8_t)ctx->port_attr.active_mtu;
    ctx->addr.gid_index  = (uint8_t)ctx->gid_index;
    memcpy(ctx->addr.gid, ctx->gid.raw, 16);
    if (getrandom(&ctx->addr.nonce, sizeof(ctx->addr.nonce), 0) != sizeof(ctx->addr.nonce)) {
        ctx->addr.nonce = ((uint64_t)getpid() << 32) ^ (uint64_t)(st_time_now() * 1e9);
    }
    snprintf(ctx->addr.hca, sizeof(ctx->addr.hca), "%.31s", ctx->hca);
    ctx->addr.oob = sa;
    /* at least one slab (verbs_mem.c: 8 buffers), whatever STRATA_IB_BOUNCE_MAX says */
    ctx->maxbufs = (int)ST_MAX(8, st_verbs_config.bounce_max /
                                      ST_MAX(st_verbs_config.bounce_size, 4096));
    st_info(ST_SUB_VERBS, "%s rank %d: verbs on %s:%u (%s, LID %u, GID index %d, MTU %d), "
            "handshakes over %s",
             ctx->name, ctx->rank, ctx->hca, ctx->port,
             ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "IB",
             ctx->port_attr.lid, ctx->gid_index, 128 << ctx->port_attr.active_mtu, ifname);
    *ctx_p = ctx;
    return ST_OK;

err_listen:
    close(ctx->lfd);
err_ep:
    close(ctx->epfd);
err_cq:
    ibv->destroy_cq(ctx->cqs[0]);
err_channel:
    ibv->destroy_comp_channel(ctx->channel);
err_pd:
    ibv->dealloc_pd(ctx->pd);
err_close:
    ibv->close_device(ctx->dev);
err_free:
    free(ctx);
    return status;
}

void st_vb_ctx_close(st_net_ctx_t *ctx)
{
    const st_ibv_t *ibv = ctx->ibv;

    for (int i = 0; i < ST_VB_MAX_PEND; i++) {
        if (ctx->pend[i].fd >= 0) {
            close(ctx->pend[i].fd);
        }
    }
    st_vb_bufs_free(ctx);
    st_vb_regs_free(ctx);
    for (int i = 0; i < ctx->ncqs; i++) {
        if (ctx->cq_unacked[i] > 0) {
            ibv->ack_cq_events(ctx->cqs[i], ctx->cq_unacked[i]);
        }
        ibv->destroy_cq(ctx->cqs[i]);
    }
    ibv->destroy_comp_channel(ctx->channel);
    ibv->dealloc_pd(ctx->pd);
    ibv->close_device(ctx->dev);
    close(ctx->lfd);
    close(ctx->epfd);
    free(ctx->eps);
    free(ctx->ep_gen);
    free(ctx);
}

void st_vb_ctx_describe(st_net_ctx_t *ctx, char *buf, size_t len)
{
    snprintf(buf, len, "HCA %s:%u (%s, LID %u; STRATA_IB_HCA=%s)", ctx->hca, ctx->port,
             ctx->port_attr.link_layer == IBV_LINK_LAYER_ETHERNET ? "RoCE" : "InfiniBand",
             ctx->port_attr.lid, (st_verbs_config.hca && st_verbs_config.hca[0])
                                     ? st_verbs_config.hca : "any");
}
