/*
 * mock_ibv.c - the in-process libibverbs stand-in (mock_ibv.h). One lock for everything: it is
 * a correctness model, not a fast one.
 */
#include "config.h"
#include "tests/unit/mock_ibv.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <unistd.h>

#define MOCK_MAX_QP 4096
#define MOCK_MAX_MR 8192

typedef struct mock_cq {
    struct ibv_cq     cq;
    struct ibv_wc    *ring;
    int               cap, head, count;
    int               armed;
} mock_cq_t;

typedef struct mock_qp {
    struct ibv_qp      qp;
    struct ibv_qp_cap  cap;
    int                access;
    uint32_t           dest_qpn;
    uint16_t           dlid;
    uint32_t           sq_psn, rq_psn;
    struct ibv_recv_wr *rq;     /* ring of max_recv_wr (sg_list copied into rq_sge) */
    struct ibv_sge     *rq_sge;
    int                rq_head, rq_count;
    int                port;
    uint16_t           lid;
} mock_qp_t;

typedef struct mock_dev {
    struct ibv_device dev;
    char              name[16];
} mock_dev_t;

static pthread_mutex_t   mock_lock = PTHREAD_MUTEX_INITIALIZER;
static mock_dev_t        mock_devs[4];
static struct ibv_device *mock_list[5];
static int               mock_ndev;
static unsigned          mock_down;
static mock_qp_t        *mock_qps[MOCK_MAX_QP];
static struct ibv_mr    *mock_mrs[MOCK_MAX_MR];
static mock_ibv_stats_t  mock_stats;
static long              mock_fail_n, mock_reg_fail_n;
static enum ibv_wc_status mock_fail_status;

static struct ibv_device **mock_get_device_list(int *num)
{
    if (num != NULL) {
        *num = mock_ndev;
    }
    return mock_list;
}

static void mock_free_device_list(struct ibv_device **list)
{
    (void)list;
}

static const char *mock_get_device_name(struct ibv_device *dev)
{
    return ((mock_dev_t *)dev)->name;
}

static struct ibv_context *mock_open_device(struct ibv_device *dev)
{
    struct ibv_context *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL) {
        return NULL;
    }
    ctx->device   = dev;
    ctx->async_fd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ctx->cmd_fd   = -1;
    pthread_mutex_lock(&mock_lock);
    mock_stats.ctxs_live++;
    pthread_mutex_unlock(&mock_lock);
    return ctx;
}

static int mock_close_device(struct ibv_context *ctx)
{
    close(ctx->async_fd);
    free(ctx);
    pthread_mutex_lock(&mock_lock);
    mock_stats.ctxs_live--;
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static int mock_dev_index(struct ibv_context *ctx)
{
    return (int)((mock_dev_t *)ctx->device - mock_devs);
}

static int mock_query_device(struct ibv_context *ctx, struct ibv_device_attr *attr)
{
    (void)ctx;
    memset(attr, 0, sizeof(*attr));
    attr->max_qp        = MOCK_MAX_QP;
    attr->max_qp_wr     = 16384;
    attr->max_sge       = 4;
    attr->max_cqe       = 65536;
    attr->max_mr        = MOCK_MAX_MR;
    attr->phys_port_cnt = 1;
    return 0;
}

static int mock_query_port(struct ibv_context *ctx, uint8_t port, struct ibv_port_attr *attr)
{
    int d = mock_dev_index(ctx);

    if (port != 1) {
        return EINVAL;
    }
    memset(attr, 0, sizeof(*attr));
    attr->state       = (mock_down & (1u << d)) ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    attr->max_mtu     = IBV_MTU_4096;
    attr->active_mtu  = IBV_MTU_4096;
    attr->lid         = (uint16_t)(d + 1);
    attr->gid_tbl_len = 1;
    attr->max_msg_sz  = 1u << 30;
    attr->link_layer  = IBV_LINK_LAYER_INFINIBAND;
    return 0;
}

static int mock_query_gid(struct ibv_context *ctx, uint8_t port, int index, union ibv_gid *gid)
{
    if (port != 1 || index != 0) {
        return EINVAL;
    }
    memset(gid, 0, sizeof(*gid));
    gid->raw[0]  = 0xfe;
    gid->raw[1]  = 0x80;
    gid->raw[15] = (uint8_t)(mock_dev_index(ctx) + 1);
    return 0;
}

static struct ibv_pd *mock_alloc_pd(struct ibv_context *ctx)
{
    struct ibv_pd *pd = calloc(1, sizeof(*pd));

    if (pd != NULL) {
        pd->context = ctx;
        pthread_mutex_lock(&mock_lock);
        mock_stats.pds_live++;
        pthread_mutex_unlock(&mock_lock);
    }
    return pd;
}

static int mock_dealloc_pd(struct ibv_pd *pd)
{
    free(pd);
    pthread_mutex_lock(&mock_lock);
    mock_stats.pds_live--;
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static struct ibv_mr *mock_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    struct ibv_mr *mr = NULL;

    pthread_mutex_lock(&mock_lock);
    if (mock_reg_fail_n > 0 && --mock_reg_fail_n == 0) {
        pthread_mutex_unlock(&mock_lock);
        errno = ENOMEM;
        return NULL;
    }
    for (int i = 1; i < MOCK_MAX_MR; i++) {
        if (mock_mrs[i] == NULL) {
            mr = calloc(1, sizeof(*mr));
            if (mr == NULL) {
                break;
            }
            mr->context = pd->context;
            mr->pd      = pd;
            mr->addr    = addr;
            mr->length  = len;
            mr->handle  = (uint32_t)access;
            mr->lkey    = (uint32_t)i | 0x10000u;
            mr->rkey    = (uint32_t)i | 0x20000u;
            mock_mrs[i] = mr;
            mock_stats.mrs_live++;
            break;
        }
    }
    pthread_mutex_unlock(&mock_lock);
    if (mr == NULL) {
        errno = ENOMEM;
    }
    return mr;
}

static int mock_dereg_mr(struct ibv_mr *mr)
{
    pthread_mutex_lock(&mock_lock);
    mock_mrs[mr->lkey & 0xffff] = NULL;
    mock_stats.mrs_live--;
    pthread_mutex_unlock(&mock_lock);
    free(mr);
    return 0;
}

static struct ibv_comp_channel *mock_create_comp_channel(struct ibv_context *ctx)
{
    struct ibv_comp_channel *ch = calloc(1, sizeof(*ch));

    if (ch != NULL) {
        ch->context = ctx;
        ch->fd      = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    }
    return ch;
}

static int mock_destroy_comp_channel(struct ibv_comp_channel *ch)
{
    close(ch->fd);
    free(ch);
    return 0;
}

static struct ibv_cq *mock_create_cq(struct ibv_context *ctx, int cqe, void *cq_context,
                                     struct ibv_comp_channel *ch, int vec)
{
    mock_cq_t *m = calloc(1, sizeof(*m));

    (void)vec;
    if (m == NULL || (m->ring = calloc((size_t)cqe, sizeof(*m->ring))) == NULL) {
        free(m);
        errno = ENOMEM;
        return NULL;
    }
    m->cap           = cqe;
    m->cq.context    = ctx;
    m->cq.channel    = ch;
    m->cq.cq_context = cq_context;
    m->cq.cqe        = cqe;
    pthread_mutex_lock(&mock_lock);
    mock_stats.cqs_live++;
    pthread_mutex_unlock(&mock_lock);
    return &m->cq;
}

static int mock_destroy_cq(struct ibv_cq *cq)
{
    mock_cq_t *m = (mock_cq_t *)cq;

    free(m->ring);
    free(m);
    pthread_mutex_lock(&mock_lock);
    mock_stats.cqs_live--;
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static int mock_get_cq_event(struct ibv_comp_channel *ch, struct ibv_cq **cq, void **cq_context)
{
    uint64_t v;

    (void)cq;
    (void)cq_context;
    if (read(ch->fd, &v, sizeof(v)) != sizeof(v)) {
        return -1; /* EAGAIN: the channel is nonblocking */
    }
    /* the transport has one CQ per channel and only counts events: no CQ is reported */
    return 0;
}

static void mock_ack_cq_events(struct ibv_cq *cq, unsigned int n)
{
    (void)cq;
    (void)n;
}

/* Under mock_lock: a completion into cq, raising its channel when armed. */
static void mock_cq_push(mock_cq_t *m, const struct ibv_wc *wc)
{
    if (m->count == m->cap) {
        abort(); /* an overrun is a bug of the transport's accounting: make it loud */
    }
    m->ring[(m->head + m->count) % m->cap] = *wc;
    m->count++;
    if (m->armed && m->cq.channel != NULL) {
        uint64_t one = 1;

        m->armed = 0;
        (void)!write(m->cq.channel->fd, &one, sizeof(one));
    }
}

static struct ibv_qp *mock_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *attr)
{
    mock_qp_t *m;

    if (attr->qp_type != IBV_QPT_RC) {
        errno = EOPNOTSUPP;
        return NULL;
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        errno = ENOMEM;
        return NULL;
    }
    m->cap    = attr->cap;
    m->rq     = calloc(attr->cap.max_recv_wr, sizeof(*m->rq));
    m->rq_sge = calloc(attr->cap.max_recv_wr, sizeof(*m->rq_sge));
    m->qp.context    = pd->context;
    m->qp.pd         = pd;
    m->qp.send_cq    = attr->send_cq;
    m->qp.recv_cq    = attr->recv_cq;
    m->qp.qp_type    = IBV_QPT_RC;
    m->qp.state      = IBV_QPS_RESET;
    m->qp.qp_context = attr->qp_context;
    pthread_mutex_lock(&mock_lock);
    for (uint32_t i = 1; i < MOCK_MAX_QP; i++) {
        if (mock_qps[i] == NULL) {
            mock_qps[i]   = m;
            m->qp.qp_num  = 0x100 + i;
            mock_stats.qps_live++;
            break;
        }
    }
    pthread_mutex_unlock(&mock_lock);
    if (m->qp.qp_num == 0 || m->rq == NULL || m->rq_sge == NULL) {
        free(m->rq);
        free(m->rq_sge);
        free(m);
        errno = ENOMEM;
        return NULL;
    }
    m->lid = (uint16_t)(mock_dev_index(pd->context) + 1);
    return &m->qp;
}

static mock_qp_t *mock_qp_find(uint32_t qpn)
{
    return (qpn >= 0x100 && qpn - 0x100 < MOCK_MAX_QP) ? mock_qps[qpn - 0x100] : NULL;
}

/* Under mock_lock: the QP to the error state, its posted receives flushed. */
static void mock_qp_err(mock_qp_t *m)
{
    m->qp.state = IBV_QPS_ERR;
    while (m->rq_count > 0) {
        struct ibv_wc wc;

        memset(&wc, 0, sizeof(wc));
        wc.wr_id  = m->rq[m->rq_head].wr_id;
        wc.status = IBV_WC_WR_FLUSH_ERR;
        wc.opcode = IBV_WC_RECV;
        wc.qp_num = m->qp.qp_num;
        mock_cq_push((mock_cq_t *)m->qp.recv_cq, &wc);
        m->rq_head = (m->rq_head + 1) % (int)m->cap.max_recv_wr;
        m->rq_count--;
    }
}

static int mock_modify_qp(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask)
{
    mock_qp_t *m = (mock_qp_t *)qp;
    int        need = 0, idx = -1;

    if (!(mask & IBV_QP_STATE)) {
        return EINVAL;
    }
    switch (attr->qp_state) {
    case IBV_QPS_INIT:
        need = IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        idx  = 0;
        if (qp->state != IBV_QPS_RESET) {
            return EINVAL;
        }
        break;
    case IBV_QPS_RTR:
        need = IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
               IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        idx  = 1;
        if (qp->state != IBV_QPS_INIT) {
            return EINVAL;
        }
        break;
    case IBV_QPS_RTS:
        need = IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
               IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC;
        idx  = 2;
        if (qp->state != IBV_QPS_RTR) {
            return EINVAL;
        }
        break;
    case IBV_QPS_ERR:
        need = IBV_QP_STATE;
        idx  = 3;
        break;
    default:
        return EINVAL;
    }
    pthread_mutex_lock(&mock_lock);
    mock_stats.modify[idx]++;
    if (mask != need) {
        mock_stats.bad_masks++;
        pthread_mutex_unlock(&mock_lock);
        return EINVAL;
    }
    switch (attr->qp_state) {
    case IBV_QPS_INIT:
        if (attr->port_num != 1) {
            pthread_mutex_unlock(&mock_lock);
            return EINVAL;
        }
        m->access = attr->qp_access_flags;
        m->port   = attr->port_num;
        break;
    case IBV_QPS_RTR:
        if (attr->path_mtu > IBV_MTU_4096) {
            pthread_mutex_unlock(&mock_lock);
            return EINVAL;
        }
        m->dest_qpn = attr->dest_qp_num;
        m->rq_psn   = attr->rq_psn;
        m->dlid     = attr->ah_attr.dlid;
        mock_stats.rtr_psn_zero += (attr->rq_psn == 0);
        break;
    case IBV_QPS_RTS:
        m->sq_psn = attr->sq_psn;
        break;
    default:
        break;
    }
    if (attr->qp_state == IBV_QPS_ERR) {
        mock_qp_err(m);
    } else {
        qp->state = attr->qp_state;
    }
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static int mock_destroy_qp(struct ibv_qp *qp)
{
    mock_qp_t *m = (mock_qp_t *)qp;

    pthread_mutex_lock(&mock_lock);
    mock_qps[qp->qp_num - 0x100] = NULL;
    mock_stats.qps_live--;
    pthread_mutex_unlock(&mock_lock);
    free(m->rq);
    free(m->rq_sge);
    free(m);
    return 0;
}

static int mock_get_async_event(struct ibv_context *ctx, struct ibv_async_event *ev)
{
    (void)ctx;
    (void)ev;
    errno = EAGAIN;
    return -1;
}

static void mock_ack_async_event(struct ibv_async_event *ev)
{
    (void)ev;
}

static const char *mock_wc_status_str(enum ibv_wc_status status)
{
    switch (status) {
    case IBV_WC_SUCCESS:          return "success";
    case IBV_WC_LOC_LEN_ERR:      return "local length error";
    case IBV_WC_LOC_PROT_ERR:     return "local protection error";
    case IBV_WC_WR_FLUSH_ERR:     return "Work Request Flushed Error";
    case IBV_WC_REM_ACCESS_ERR:   return "remote access error";
    case IBV_WC_RETRY_EXC_ERR:    return "transport retry counter exceeded";
    case IBV_WC_RNR_RETRY_EXC_ERR: return "RNR retry counter exceeded";
    default:                      return "other error";
    }
}

static const char *mock_event_type_str(enum ibv_event_type event)
{
    (void)event;
    return "event";
}

static struct ibv_mr *mock_mr_find(uint32_t key, int remote)
{
    struct ibv_mr *mr = mock_mrs[key & 0xffff];

    if (mr == NULL || (remote ? mr->rkey : mr->lkey) != key) {
        return NULL;
    }
    return mr;
}

/* Under mock_lock: executes one send work request of m; the status of the sender's completion. */
static enum ibv_wc_status mock_exec(mock_qp_t *m, struct ibv_send_wr *wr, uint32_t *len_p)
{
    mock_qp_t     *peer = mock_qp_find(m->dest_qpn);
    const void    *src = NULL;
    uint32_t       len = 0;
    struct ibv_wc  rwc;

    if (wr->num_sge > 1) {
        return IBV_WC_LOC_LEN_ERR;
    }
    if (wr->num_sge == 1) {
        struct ibv_mr *mr = mock_mr_find(wr->sg_list[0].lkey, 0);

        len = wr->sg_list[0].length;
        src = (const void *)(uintptr_t)wr->sg_list[0].addr;
        if (mr == NULL || mr->pd != m->qp.pd || (uintptr_t)src < (uintptr_t)mr->addr ||
            (uintptr_t)src + len > (uintptr_t)mr->addr + mr->length) {
            return IBV_WC_LOC_PROT_ERR;
        }
    }
    *len_p = len;
    if (mock_fail_n > 0 && --mock_fail_n == 0) {
        return mock_fail_status;
    }
    if (peer == NULL || (peer->qp.state != IBV_QPS_RTR && peer->qp.state != IBV_QPS_RTS) ||
        peer->dest_qpn != m->qp.qp_num || peer->lid != m->dlid || m->sq_psn != peer->rq_psn) {
        return IBV_WC_RETRY_EXC_ERR;
    }
    if (wr->opcode == IBV_WR_RDMA_WRITE || wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM) {
        struct ibv_mr *mr = mock_mr_find(wr->wr.rdma.rkey, 1);
        uintptr_t      dst = (uintptr_t)wr->wr.rdma.remote_addr;

        if (len > 0 && (mr == NULL || mr->pd != peer->qp.pd ||
                        !((int)mr->handle & IBV_ACCESS_REMOTE_WRITE) ||
                        !(peer->access & IBV_ACCESS_REMOTE_WRITE) || dst < (uintptr_t)mr->addr ||
                        dst + len > (uintptr_t)mr->addr + mr->length)) {
            mock_qp_err(peer);
            return IBV_WC_REM_ACCESS_ERR;
        }
        if (wr->opcode == IBV_WR_RDMA_WRITE_WITH_IMM && peer->rq_count == 0) {
            mock_stats.rnr++;
            return IBV_WC_RNR_RETRY_EXC_ERR;
        }
        if (len > 0) {
            memcpy((void *)dst, src, len);
        }
        mock_stats.bytes += len;
        if (wr->opcode == IBV_WR_RDMA_WRITE) {
            mock_stats.writes++;
        } else {
            mock_stats.writes_imm++;
            memset(&rwc, 0, sizeof(rwc));
            rwc.wr_id    = peer->rq[peer->rq_head].wr_id;
            rwc.status   = IBV_WC_SUCCESS;
            rwc.opcode   = IBV_WC_RECV_RDMA_WITH_IMM;
            rwc.byte_len = len;
            rwc.imm_data = wr->imm_data;
            rwc.wc_flags = IBV_WC_WITH_IMM;
            rwc.qp_num   = peer->qp.qp_num;
            rwc.src_qp   = m->qp.qp_num;
            peer->rq_head = (peer->rq_head + 1) % (int)peer->cap.max_recv_wr;
            peer->rq_count--;
            mock_cq_push((mock_cq_t *)peer->qp.recv_cq, &rwc);
        }
    } else if (wr->opcode == IBV_WR_SEND) {
        struct ibv_sge *rsge;
        struct ibv_mr  *rmr;

        if (peer->rq_count == 0) {
            mock_stats.rnr++;
            return IBV_WC_RNR_RETRY_EXC_ERR;
        }
        rsge = &peer->rq_sge[peer->rq_head];
        rmr  = mock_mr_find(rsge->lkey, 0);
        if (len > rsge->length || (len > 0 && rmr == NULL)) {
            mock_qp_err(peer);
            return IBV_WC_REM_INV_REQ_ERR;
        }
        if (len > 0) {
            memcpy((void *)(uintptr_t)rsge->addr, src, len);
        }
        mock_stats.sends++;
        memset(&rwc, 0, sizeof(rwc));
        rwc.wr_id    = peer->rq[peer->rq_head].wr_id;
        rwc.status   = IBV_WC_SUCCESS;
        rwc.opcode   = IBV_WC_RECV;
        rwc.byte_len = len;
        rwc.qp_num   = peer->qp.qp_num;
        rwc.src_qp   = m->qp.qp_num;
        peer->rq_head = (peer->rq_head + 1) % (int)peer->cap.max_recv_wr;
        peer->rq_count--;
        mock_cq_push((mock_cq_t *)peer->qp.recv_cq, &rwc);
    } else {
        return IBV_WC_LOC_QP_OP_ERR;
    }
    m->sq_psn  = (m->sq_psn + 1) & 0xffffff;
    peer->rq_psn = (peer->rq_psn + 1) & 0xffffff;
    return IBV_WC_SUCCESS;
}

static int mock_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    mock_qp_t *m = (mock_qp_t *)qp;

    pthread_mutex_lock(&mock_lock);
    for (; wr != NULL; wr = wr->next) {
        struct ibv_wc      wc;
        uint32_t           len = 0;
        enum ibv_wc_status status;
        int                to_err;

        if (qp->state != IBV_QPS_RTS && qp->state != IBV_QPS_ERR) {
            *bad = wr;
            pthread_mutex_unlock(&mock_lock);
            return EINVAL;
        }
        status = (qp->state == IBV_QPS_ERR) ? IBV_WC_WR_FLUSH_ERR : mock_exec(m, wr, &len);
        to_err = (status != IBV_WC_SUCCESS && qp->state != IBV_QPS_ERR);
        if (status != IBV_WC_SUCCESS || (wr->send_flags & IBV_SEND_SIGNALED)) {
            memset(&wc, 0, sizeof(wc));
            wc.wr_id    = wr->wr_id;
            wc.status   = status;
            wc.opcode   = (wr->opcode == IBV_WR_SEND) ? IBV_WC_SEND : IBV_WC_RDMA_WRITE;
            wc.byte_len = len;
            wc.qp_num   = qp->qp_num;
            wc.vendor_err = (status == IBV_WC_SUCCESS) ? 0 : 0x81;
            mock_cq_push((mock_cq_t *)qp->send_cq, &wc);
        }
        /* as on hardware, the failing request completes first, then the queue's others are
         * flushed: the first error a poller sees is the cause */
        if (to_err) {
            mock_qp_err(m);
        }
    }
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static int mock_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    mock_qp_t *m = (mock_qp_t *)qp;

    pthread_mutex_lock(&mock_lock);
    for (; wr != NULL; wr = wr->next) {
        int tail;

        if (qp->state == IBV_QPS_RESET || m->rq_count == (int)m->cap.max_recv_wr ||
            wr->num_sge != 1) {
            *bad = wr;
            pthread_mutex_unlock(&mock_lock);
            return (m->rq_count == (int)m->cap.max_recv_wr) ? ENOMEM : EINVAL;
        }
        if (qp->state == IBV_QPS_ERR) {
            struct ibv_wc wc;

            memset(&wc, 0, sizeof(wc));
            wc.wr_id  = wr->wr_id;
            wc.status = IBV_WC_WR_FLUSH_ERR;
            wc.opcode = IBV_WC_RECV;
            wc.qp_num = qp->qp_num;
            mock_cq_push((mock_cq_t *)qp->recv_cq, &wc);
            continue;
        }
        tail = (m->rq_head + m->rq_count) % (int)m->cap.max_recv_wr;
        m->rq[tail]        = *wr;
        m->rq_sge[tail]    = wr->sg_list[0];
        m->rq[tail].next   = NULL;
        m->rq_count++;
        mock_stats.recvs_posted++;
    }
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static int mock_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    mock_cq_t *m = (mock_cq_t *)cq;
    int        k = 0;

    pthread_mutex_lock(&mock_lock);
    while (k < n && m->count > 0) {
        wc[k++] = m->ring[m->head];
        m->head = (m->head + 1) % m->cap;
        m->count--;
    }
    pthread_mutex_unlock(&mock_lock);
    return k;
}

static int mock_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    mock_cq_t *m = (mock_cq_t *)cq;

    (void)solicited_only;
    pthread_mutex_lock(&mock_lock);
    m->armed = 1;
    pthread_mutex_unlock(&mock_lock);
    return 0;
}

static const st_ibv_t mock_table = {
    .get_device_list      = mock_get_device_list,
    .free_device_list     = mock_free_device_list,
    .get_device_name      = mock_get_device_name,
    .open_device          = mock_open_device,
    .close_device         = mock_close_device,
    .query_device         = mock_query_device,
    .query_port           = mock_query_port,
    .query_gid            = mock_query_gid,
    .alloc_pd             = mock_alloc_pd,
    .dealloc_pd           = mock_dealloc_pd,
    .reg_mr               = mock_reg_mr,
    .dereg_mr             = mock_dereg_mr,
    .create_comp_channel  = mock_create_comp_channel,
    .destroy_comp_channel = mock_destroy_comp_channel,
    .create_cq            = mock_create_cq,
    .destroy_cq           = mock_destroy_cq,
    .get_cq_event         = mock_get_cq_event,
    .ack_cq_events        = mock_ack_cq_events,
    .create_qp            = mock_create_qp,
    .modify_qp            = mock_modify_qp,
    .destroy_qp           = mock_destroy_qp,
    .get_async_event      = mock_get_async_event,
    .ack_async_event      = mock_ack_async_event,
    .wc_status_str        = mock_wc_status_str,
    .event_type_str       = mock_event_type_str,
    .post_send            = mock_post_send,
    .post_recv            = mock_post_recv,
    .poll_cq              = mock_poll_cq,
    .req_notify_cq        = mock_req_notify_cq,
};

const st_ibv_t *mock_ibv_table(int ndev, unsigned down_mask)
{
    pthread_mutex_lock(&mock_lock);
    mock_ndev = (ndev < 1) ? 1 : (ndev > 4 ? 4 : ndev);
    mock_down = down_mask;
    for (int d = 0; d < mock_ndev; d++) {
        snprintf(mock_devs[d].name, sizeof(mock_devs[d].name), "mock%d", d);
        snprintf(mock_devs[d].dev.name, sizeof(mock_devs[d].dev.name), "mock%d", d);
        mock_devs[d].dev.transport_type = IBV_TRANSPORT_IB;
        mock_list[d] = &mock_devs[d].dev;
    }
    mock_list[mock_ndev] = NULL;
    pthread_mutex_unlock(&mock_lock);
    return &mock_table;
}

void mock_ibv_set_transport(int dev, enum ibv_transport_type type)
{
    pthread_mutex_lock(&mock_lock);
    if (dev >= 0 && dev < 4) {
        mock_devs[dev].dev.transport_type = type;
    }
    pthread_mutex_unlock(&mock_lock);
}

void mock_ibv_fail_nth(long n, enum ibv_wc_status status)
{
    pthread_mutex_lock(&mock_lock);
    mock_fail_n      = n;
    mock_fail_status = status;
    pthread_mutex_unlock(&mock_lock);
}

void mock_ibv_reg_fail_nth(long n)
{
    pthread_mutex_lock(&mock_lock);
    mock_reg_fail_n = n;
    pthread_mutex_unlock(&mock_lock);
}

mock_ibv_stats_t mock_ibv_stats(void)
{
    mock_ibv_stats_t s;

    pthread_mutex_lock(&mock_lock);
    s = mock_stats;
    pthread_mutex_unlock(&mock_lock);
    return s;
}
