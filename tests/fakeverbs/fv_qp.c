/* fakeverbs: RC queue pairs. The state machine of ibv_modify_qp(3), the receive queue in the
 * fabric segment, and the send queue, which this process executes itself, in posting order, at
 * post_send and poll_cq time: it checks what an HCA and the responder's HCA would check, copies
 * the bytes into the responder with process_vm_writev, and only then pushes the completions. */
#define _GNU_SOURCE
#include "fv.h"

#include <errno.h>
#include <math.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/uio.h>

#define EXPORT __attribute__((visibility("default")))

static pthread_rwlock_t reg_lock = PTHREAD_RWLOCK_INITIALIZER;
static struct fv_qp *qp_list;
static struct fv_qp *local_qps[FV_MAX_QPS];

enum { DONE = 0, STALL = 1 };

struct fv_qp *fv_local_qp(uint32_t idx, uint32_t serial)
{
    if (idx >= FV_MAX_QPS)
        return NULL;
    pthread_rwlock_rdlock(&reg_lock);
    struct fv_qp *q = local_qps[idx];
    if (q && q->serial != serial)
        q = NULL;
    pthread_rwlock_unlock(&reg_lock);
    return q;
}

int fv_qp_busy_cq(struct fv_cq *cq)
{
    int busy = 0;
    pthread_rwlock_rdlock(&reg_lock);
    for (struct fv_qp *q = qp_list; q; q = q->next)
        busy |= q->ibqp.send_cq == &cq->ibcq || q->ibqp.recv_cq == &cq->ibcq;
    pthread_rwlock_unlock(&reg_lock);
    return busy;
}

void fv_retire(uint32_t idx, uint32_t serial, uint64_t sseq)
{
    /* A polled send completion frees its WR's slot and every earlier one (hardware frees the
     * send queue up to the WQE a completion names). */
    pthread_rwlock_rdlock(&reg_lock);
    struct fv_qp *q = idx < FV_MAX_QPS ? local_qps[idx] : NULL;
    if (q && q->serial == serial) {
        uint64_t cur = __atomic_load_n(&q->retired, __ATOMIC_ACQUIRE);
        while (cur < sseq + 1 &&
               !__atomic_compare_exchange_n(&q->retired, &cur, sseq + 1, 0, __ATOMIC_ACQ_REL,
                                            __ATOMIC_ACQUIRE)) {
        }
    }
    pthread_rwlock_unlock(&reg_lock);
}

static uint32_t mtu_bytes(uint32_t mtu)
{
    return mtu >= IBV_MTU_256 && mtu <= IBV_MTU_4096 ? 128u << mtu : 4096u;
}

EXPORT struct ibv_qp *ibv_create_qp(struct ibv_pd *pd, struct ibv_qp_init_attr *init)
{
    if (!pd || !init) {
        errno = EINVAL;
        return NULL;
    }
    if (init->qp_type != IBV_QPT_RC || init->srq) {
        errno = EOPNOTSUPP;  /* only RC without SRQ is emulated */
        return NULL;
    }
    struct ibv_qp_cap *cap = &init->cap;
    if (!init->send_cq || !init->recv_cq || init->send_cq->context != pd->context ||
        init->recv_cq->context != pd->context || cap->max_send_wr > FV_MAX_QP_WR ||
        cap->max_recv_wr > FV_MAX_QP_WR || cap->max_send_sge > FV_MAX_SGE ||
        cap->max_recv_sge > FV_MAX_SGE || cap->max_inline_data > FV_MAX_INLINE) {
        errno = EINVAL;
        return NULL;
    }
    struct fv_context *c = fv_ctx_of(pd->context);
    struct fv_qp *q = calloc(1, sizeof(*q));
    uint32_t sq_cap = cap->max_send_wr ? cap->max_send_wr : 1;
    struct fv_swr *sq = calloc(sq_cap, sizeof(*sq));
    if (!q || !sq) {
        free(q);
        free(sq);
        errno = ENOMEM;
        return NULL;
    }
    struct fv_cq *scq = (struct fv_cq *)init->send_cq, *rcq = (struct fv_cq *)init->recv_cq;
    int slot = -1;
    fv_lock();
    for (unsigned i = 0; i < FV_MAX_QPS; i++)
        if (!fv_seg->qps[i].serial) {
            slot = (int)i;
            struct fv_sqp *s = &fv_seg->qps[i];
            memset(s, 0, sizeof(*s));
            uint32_t gen = fv_seg->next_gen++ & ((1u << (24 - FV_QP_BITS)) - 1);
            if (gen == 0)
                gen = 1;
            s->qpn = (gen << FV_QP_BITS) | i;  /* 24 bits, never 0 or 1 (special QPs) */
            s->pid = getpid();
            s->ctx = c->sctx;
            s->pd = ((struct fv_pd *)pd)->id;
            s->state = IBV_QPS_RESET;
            s->port = (uint32_t)c->port;
            s->send_cq = scq->idx;
            s->recv_cq = rcq->idx;
            s->max_send_wr = cap->max_send_wr;
            s->max_recv_wr = cap->max_recv_wr;
            s->max_send_sge = cap->max_send_sge;
            s->max_recv_sge = cap->max_recv_sge;
            s->max_inline = FV_MAX_INLINE;
            s->serial = fv_new_serial();
            q->serial = s->serial;
            break;
        }
    fv_unlock();
    if (slot < 0) {
        free(sq);
        free(q);
        errno = ENOSPC;
        return NULL;
    }
    cap->max_inline_data = FV_MAX_INLINE;
    q->idx = (uint32_t)slot;
    q->ctx = c;
    q->sq = sq;
    q->sq_cap = sq_cap;
    q->init = *init;
    pthread_mutex_init(&q->lock, NULL);
    struct ibv_qp *iq = &q->ibqp;
    iq->context = pd->context;
    iq->qp_context = init->qp_context;
    iq->pd = pd;
    iq->send_cq = init->send_cq;
    iq->recv_cq = init->recv_cq;
    iq->handle = q->idx;
    iq->qp_num = fv_seg->qps[slot].qpn;
    iq->state = IBV_QPS_RESET;
    iq->qp_type = IBV_QPT_RC;
    pthread_mutex_init(&iq->mutex, NULL);
    pthread_cond_init(&iq->cond, NULL);
    ((struct fv_pd *)pd)->nobj++;
    pthread_rwlock_wrlock(&reg_lock);
    q->next = qp_list;
    qp_list = q;
    local_qps[q->idx] = q;
    pthread_rwlock_unlock(&reg_lock);
    FV_DBG("create QP %u", iq->qp_num);
    return iq;
}

EXPORT int ibv_destroy_qp(struct ibv_qp *iq)
{
    if (!iq)
        return EINVAL;
    struct fv_qp *q = (struct fv_qp *)iq;
    pthread_rwlock_wrlock(&reg_lock);
    for (struct fv_qp **p = &qp_list; *p; p = &(*p)->next)
        if (*p == q) {
            *p = q->next;
            break;
        }
    if (local_qps[q->idx] == q)
        local_qps[q->idx] = NULL;
    pthread_rwlock_unlock(&reg_lock);
    fv_lock();
    if (fv_seg->qps[q->idx].serial == q->serial)
        fv_seg->qps[q->idx].serial = 0, fv_seg->qps[q->idx].pid = 0;
    fv_unlock();
    ((struct fv_pd *)iq->pd)->nobj--;
    pthread_mutex_destroy(&q->lock);
    pthread_mutex_destroy(&iq->mutex);
    pthread_cond_destroy(&iq->cond);
    free(q->sq);
    free(q);
    return 0;
}

/* The RC rows of ibv_modify_qp(3)'s table: required and optional attributes per transition. */
static int transition_masks(int cur, int next, int *req, int *opt)
{
    *req = IBV_QP_STATE;
    *opt = 0;
    if (next == IBV_QPS_RESET || next == IBV_QPS_ERR)
        return 0;
    if (cur == IBV_QPS_RESET && next == IBV_QPS_INIT) {
        *req |= IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_INIT) {
        *opt = IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS;
        return 0;
    }
    if (cur == IBV_QPS_INIT && next == IBV_QPS_RTR) {
        *req |= IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN |
                IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER;
        *opt = IBV_QP_ALT_PATH | IBV_QP_ACCESS_FLAGS | IBV_QP_PKEY_INDEX;
        return 0;
    }
    if (cur == IBV_QPS_RTR && next == IBV_QPS_RTS) {
        *req |= IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | IBV_QP_RNR_RETRY |
                IBV_QP_MAX_QP_RD_ATOMIC;
        *opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
               IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    if (cur == IBV_QPS_RTS && next == IBV_QPS_RTS) {
        *opt = IBV_QP_CUR_STATE | IBV_QP_ACCESS_FLAGS | IBV_QP_MIN_RNR_TIMER | IBV_QP_ALT_PATH |
               IBV_QP_PATH_MIG_STATE;
        return 0;
    }
    return EINVAL;
}

EXPORT int ibv_modify_qp(struct ibv_qp *iq, struct ibv_qp_attr *attr, int mask)
{
    if (!iq || !attr)
        return EINVAL;
    struct fv_qp *q = (struct fv_qp *)iq;
    if (!(mask & IBV_QP_STATE))
        return EINVAL;
    int eth = fv_cfg.eth;
    pthread_mutex_lock(&q->lock);
    fv_lock();
    struct fv_sqp *s = &fv_seg->qps[q->idx];
    int err = s->serial == q->serial ? 0 : EINVAL;
    int cur = (int)s->state, next = (int)attr->qp_state, req = 0, opt = 0;
    if (!err)
        err = transition_masks(cur, next, &req, &opt);
    if (!err && ((mask & req) != req || (mask & ~(req | opt | IBV_QP_CUR_STATE))))
        err = EINVAL;
    if (!err && (mask & IBV_QP_PORT) && attr->port_num != 1)
        err = EINVAL;
    if (!err && (mask & IBV_QP_PKEY_INDEX) && attr->pkey_index != 0)
        err = EINVAL;
    if (!err && (mask & IBV_QP_ACCESS_FLAGS) &&
        (attr->qp_access_flags & ~(IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE |
                                   IBV_ACCESS_REMOTE_READ | IBV_ACCESS_REMOTE_ATOMIC)))
        err = EINVAL;
    if (!err && (mask & IBV_QP_PATH_MTU) &&
        (attr->path_mtu < IBV_MTU_256 || attr->path_mtu > IBV_MTU_4096))
        err = EINVAL;  /* above the port's active MTU (4096) or not an MTU at all */
    if (!err && (mask & IBV_QP_AV)) {
        const struct ibv_ah_attr *ah = &attr->ah_attr;
        if (ah->port_num > 1)
            err = EINVAL;
        else if (eth && (!ah->is_global || ah->grh.sgid_index > 1))
            err = EINVAL;  /* RoCE has no LIDs: a GRH with a valid source GID is required */
        else if (!eth && ah->is_global && ah->grh.sgid_index != 0)
            err = EINVAL;
        else if (!eth && !ah->is_global && ah->dlid == 0)
            err = EINVAL;
    }
    if (!err && (mask & IBV_QP_DEST_QPN) && attr->dest_qp_num > 0xffffff)
        err = EINVAL;
    if (!err && (mask & IBV_QP_TIMEOUT) && attr->timeout > 31)
        err = EINVAL;
    if (!err && (mask & IBV_QP_RETRY_CNT) && attr->retry_cnt > 7)
        err = EINVAL;
    if (!err && (mask & IBV_QP_RNR_RETRY) && attr->rnr_retry > 7)
        err = EINVAL;
    if (!err && (mask & IBV_QP_MIN_RNR_TIMER) && attr->min_rnr_timer > 31)
        err = EINVAL;
    if (!err && (mask & IBV_QP_MAX_QP_RD_ATOMIC) && attr->max_rd_atomic > 16)
        err = EINVAL;
    if (!err && (mask & IBV_QP_MAX_DEST_RD_ATOMIC) && attr->max_dest_rd_atomic > 16)
        err = EINVAL;
    if (!err) {
        if (mask & IBV_QP_ACCESS_FLAGS)
            s->access = (uint32_t)attr->qp_access_flags;
        if (mask & IBV_QP_PKEY_INDEX)
            s->pkey_index = attr->pkey_index;
        if (mask & IBV_QP_PATH_MTU)
            s->path_mtu = attr->path_mtu;
        if (mask & IBV_QP_AV) {
            s->dlid = attr->ah_attr.dlid;
            s->is_global = attr->ah_attr.is_global;
            s->sgid_index = attr->ah_attr.grh.sgid_index;
            s->dgid = attr->ah_attr.grh.dgid;
        }
        if (mask & IBV_QP_DEST_QPN)
            s->dest_qpn = attr->dest_qp_num;
        if (mask & IBV_QP_RQ_PSN)
            s->rq_psn = attr->rq_psn & 0xffffff;
        if (mask & IBV_QP_SQ_PSN)
            s->sq_psn = attr->sq_psn & 0xffffff;
        if (mask & IBV_QP_MIN_RNR_TIMER)
            s->min_rnr_timer = attr->min_rnr_timer;
        if (mask & IBV_QP_TIMEOUT)
            s->timeout = attr->timeout;
        if (mask & IBV_QP_RETRY_CNT)
            s->retry_cnt = attr->retry_cnt;
        if (mask & IBV_QP_RNR_RETRY)
            s->rnr_retry = attr->rnr_retry;
        if (mask & IBV_QP_MAX_QP_RD_ATOMIC)
            s->max_rd_atomic = attr->max_rd_atomic;
        if (mask & IBV_QP_MAX_DEST_RD_ATOMIC)
            s->max_dest_rd_atomic = attr->max_dest_rd_atomic;
        if (next == IBV_QPS_ERR) {
            fv_qp_to_err(q->idx);  /* flushes the receive queue; the send queue flushes as it runs */
        } else if (next == IBV_QPS_RESET) {
            s->state = IBV_QPS_RESET;
            s->rq_head = s->rq_tail = 0;  /* RESET discards, without completions */
            s->dropped = 0;
            q->posted = q->executed = q->retired = 0;
        } else {
            s->state = (uint32_t)next;
        }
        iq->state = (enum ibv_qp_state)s->state;
    }
    fv_unlock();
    pthread_mutex_unlock(&q->lock);
    if (err)
        FV_DBG("modify QP %u %d->%d mask %#x: EINVAL", iq->qp_num, cur, next, mask);
    return err;
}

EXPORT int ibv_query_qp(struct ibv_qp *iq, struct ibv_qp_attr *a, int mask, struct ibv_qp_init_attr *init)
{
    if (!iq || !a)
        return EINVAL;
    (void)mask;  /* everything is returned, as providers do */
    struct fv_qp *q = (struct fv_qp *)iq;
    memset(a, 0, sizeof(*a));
    fv_lock();
    const struct fv_sqp *s = &fv_seg->qps[q->idx];
    if (s->serial != q->serial) {
        fv_unlock();
        return EINVAL;
    }
    a->qp_state = a->cur_qp_state = (enum ibv_qp_state)s->state;
    a->path_mtu = (enum ibv_mtu)s->path_mtu;
    a->qp_access_flags = (int)s->access;
    a->pkey_index = s->pkey_index;
    a->port_num = 1;
    a->ah_attr.dlid = s->dlid;
    a->ah_attr.is_global = s->is_global;
    a->ah_attr.grh.dgid = s->dgid;
    a->ah_attr.grh.sgid_index = s->sgid_index;
    a->ah_attr.port_num = 1;
    a->dest_qp_num = s->dest_qpn;
    a->rq_psn = s->rq_psn;
    a->sq_psn = s->sq_psn;
    a->timeout = s->timeout;
    a->retry_cnt = s->retry_cnt;
    a->rnr_retry = s->rnr_retry;
    a->min_rnr_timer = s->min_rnr_timer;
    a->max_rd_atomic = s->max_rd_atomic;
    a->max_dest_rd_atomic = s->max_dest_rd_atomic;
    a->cap = q->init.cap;
    fv_unlock();
    if (init)
        *init = q->init;
    return 0;
}

/* Receive WRs go into the QP's ring in the segment, where the requester's process takes them. */
int fv_post_recv(struct ibv_qp *iq, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    struct fv_qp *q = (struct fv_qp *)iq;
    int err = 0;
    fv_lock();
    struct fv_sqp *s = &fv_seg->qps[q->idx];
    struct fv_rwr *ring = fv_rq_ring(q->idx);
    for (; wr; wr = wr->next) {
        if (s->serial != q->serial || s->state == IBV_QPS_RESET || wr->num_sge < 0 ||
            (uint32_t)wr->num_sge > s->max_recv_sge) {
            err = EINVAL;
            break;
        }
        if (s->state == IBV_QPS_ERR) {
            struct fv_swc w;
            memset(&w, 0, sizeof(w));
            w.wc.wr_id = wr->wr_id;
            w.wc.status = IBV_WC_WR_FLUSH_ERR;
            w.wc.opcode = IBV_WC_RECV;
            w.wc.qp_num = s->qpn;
            fv_cq_push(s->recv_cq, &w);
            continue;
        }
        if (s->rq_tail - s->rq_head >= s->max_recv_wr) {
            err = ENOMEM;
            break;
        }
        struct fv_rwr *r = &ring[s->rq_tail % s->max_recv_wr];
        r->wr_id = wr->wr_id;
        r->num_sge = (uint32_t)wr->num_sge;
        for (int i = 0; i < wr->num_sge; i++)
            r->sge[i] = wr->sg_list[i];
        s->rq_tail++;
    }
    fv_unlock();
    if (err && bad)
        *bad = wr;
    return err;
}

/* IB timeout: 4.096 us * 2^timeout per try, retry_cnt retries; 0 means wait forever. */
static double retry_time(const struct fv_sqp *s)
{
    if (s->timeout == 0)
        return INFINITY;
    return 4.096e-6 * ldexp(1.0, s->timeout) * (s->retry_cnt + 1) * fv_cfg.time_scale;
}

static double rnr_delay(uint8_t t)
{
    static const double ms[32] = {655.36, 0.01, 0.02, 0.03, 0.04, 0.06, 0.08, 0.12, 0.16, 0.24,
                                  0.32, 0.48, 0.64, 0.96, 1.28, 1.92, 2.56, 3.84, 5.12, 7.68,
                                  10.24, 15.36, 20.48, 30.72, 40.96, 61.44, 81.92, 122.88, 163.84,
                                  245.76, 327.68, 491.52};
    return ms[t & 31] * 1e-3 * fv_cfg.time_scale;
}

static int is_write(uint32_t op)
{
    return op == IBV_WR_RDMA_WRITE || op == IBV_WR_RDMA_WRITE_WITH_IMM;
}

/* Fabric lock held. Errors complete every WR; success only signaled ones. */
static void complete_send(struct fv_qp *q, const struct fv_swr *w, enum ibv_wc_status st)
{
    if (st == IBV_WC_SUCCESS && !(w->flags & IBV_SEND_SIGNALED))
        return;
    struct fv_sqp *s = &fv_seg->qps[q->idx];
    struct fv_swc c;
    memset(&c, 0, sizeof(c));
    c.wc.wr_id = w->wr_id;
    c.wc.status = st;
    c.wc.opcode = is_write(w->opcode) ? IBV_WC_RDMA_WRITE : IBV_WC_SEND;
    c.wc.byte_len = st == IBV_WC_SUCCESS ? w->len : 0;
    c.wc.qp_num = s->qpn;
    c.qp_idx = q->idx;
    c.qp_serial = q->serial;
    c.sseq = w->seq;
    fv_cq_push(s->send_cq, &c);
}

static int fail(struct fv_qp *q, const struct fv_swr *w, enum ibv_wc_status st)
{
    fv_lock();
    FV_DBG("QP %u WR %llu: %s", fv_seg->qps[q->idx].qpn, (unsigned long long)w->wr_id,
           ibv_wc_status_str(st));
    complete_send(q, w, st);
    fv_qp_to_err(q->idx);
    fv_unlock();
    return DONE;
}

/* Which port an address vector names: the LID on IB, the destination GID on RoCE. Lock held. */
static int resolve(const struct fv_sqp *s)
{
    if (s->is_global && (fv_cfg.eth || s->dlid == 0))
        return fv_port_by_gid(&s->dgid);
    return fv_port_by_lid(s->dlid);
}

/* Copies n bytes of the WR's local data, from offset off, to addr in process pid. */
static int copy_out(pid_t pid, const struct fv_swr *w, uint64_t off, uint64_t addr, uint64_t n)
{
    struct iovec l[FV_MAX_SGE];
    int nl = 0;
    if (w->flags & IBV_SEND_INLINE) {
        l[nl].iov_base = (void *)(w->inl + off);
        l[nl++].iov_len = n;
    } else {
        uint64_t skip = off, left = n;
        for (uint32_t i = 0; i < w->num_sge && left; i++) {
            uint64_t sl = w->sge[i].length;
            if (skip >= sl) {
                skip -= sl;
                continue;
            }
            uint64_t take = sl - skip < left ? sl - skip : left;
            l[nl].iov_base = (void *)(uintptr_t)(w->sge[i].addr + skip);
            l[nl++].iov_len = take;
            left -= take;
            skip = 0;
        }
    }
    if (pid == getpid()) {
        char *dst = (char *)(uintptr_t)addr;
        for (int i = 0; i < nl; i++) {
            memmove(dst, l[i].iov_base, l[i].iov_len);
            dst += l[i].iov_len;
        }
        return 0;
    }
    struct iovec r = {(void *)(uintptr_t)addr, n};
    while (r.iov_len) {
        ssize_t got = process_vm_writev(pid, l, (unsigned long)nl, &r, 1, 0);
        if (got <= 0)
            return got < 0 ? errno : EFAULT;
        /* Partial write: advance both sides. */
        r.iov_base = (char *)r.iov_base + got;
        r.iov_len -= (size_t)got;
        size_t adv = (size_t)got;
        int k = 0;
        while (k < nl && adv >= l[k].iov_len)
            adv -= l[k++].iov_len;
        memmove(l, l + k, (size_t)(nl - k) * sizeof(l[0]));
        nl -= k;
        if (nl) {
            l[0].iov_base = (char *)l[0].iov_base + adv;
            l[0].iov_len -= adv;
        }
    }
    return 0;
}

/* Checks an SGE against the MRs of process pid and PD pd with the access bits needed. Lock held. */
static int sge_ok(const struct ibv_sge *g, pid_t pid, uint64_t pd, uint32_t need)
{
    const struct fv_smr *m = &fv_seg->mrs[g->lkey & (FV_MAX_MRS - 1)];
    return m->key == g->lkey && m->pid == pid && m->pd == pd && (m->access & need) == need &&
           g->addr >= m->addr && g->addr + g->length >= g->addr &&
           g->addr + g->length <= m->addr + m->len;
}

/* Executes the WR at the head of q's send queue: DONE (completed, either way) or STALL. */
static int exec_one(struct fv_qp *q, struct fv_swr *w)
{
    struct fv_sqp *s = &fv_seg->qps[q->idx];
    double now = fv_now();
    if (s->state == IBV_QPS_ERR || s->serial != q->serial) {
        fv_lock();
        complete_send(q, w, IBV_WC_WR_FLUSH_ERR);
        fv_unlock();
        return DONE;
    }
    if (w->next_try > now)
        return STALL;
    if (!w->started) {
        w->started = 1;
        if (w->len > fv_cfg.max_msg)
            return fail(q, w, IBV_WC_LOC_LEN_ERR);
        if (!(w->flags & IBV_SEND_INLINE)) {
            int ok = 1;
            fv_lock();
            for (uint32_t i = 0; i < w->num_sge && ok; i++)
                ok = w->sge[i].length == 0 || sge_ok(&w->sge[i], getpid(), s->pd, 0);
            fv_unlock();
            if (!ok)
                return fail(q, w, IBV_WC_LOC_PROT_ERR);
        }
    }
    if (w->inject) {
        if (w->inject == IBV_WC_RETRY_EXC_ERR) {
            if (!w->deadline)
                w->deadline = now + retry_time(s);
            if (now < w->deadline)
                return STALL;
        }
        return fail(q, w, (enum ibv_wc_status)w->inject);
    }

    fv_lock();
    int rp = resolve(s);
    uint32_t ri = s->dest_qpn & (FV_MAX_QPS - 1);
    struct fv_sqp *r = &fv_seg->qps[ri];
    int found = rp >= 0 && r->serial && r->qpn == s->dest_qpn && (int)r->port == rp;
    if (found && w->drop) {
        r->dropped = 1;
        FV_DBG("fault: QP %u stops answering", r->qpn);
    }
    w->drop = 0;
    int reach = found && !r->dropped && (r->state == IBV_QPS_RTR || r->state == IBV_QPS_RTS) &&
                r->dest_qpn == s->qpn && resolve(r) == (int)s->port && r->rq_psn == s->sq_psn &&
                fv_pid_alive(r->pid);
    if (!reach) {
        fv_unlock();
        if (!w->deadline) {
            w->deadline = now + retry_time(s);
            FV_DBG("QP %u: peer QP %u unreachable, retrying for %.3f s", s->qpn, s->dest_qpn,
                   w->deadline - now);
        }
        if (now >= w->deadline)
            return fail(q, w, IBV_WC_RETRY_EXC_ERR);
        return STALL;
    }
    w->deadline = 0;

    struct iovec rv[FV_MAX_SGE];
    int nrv = 0;
    int consume = w->opcode != IBV_WR_RDMA_WRITE;
    uint64_t rwr_id = 0;
    if (is_write(w->opcode) && w->len) {
        const struct fv_smr *m = &fv_seg->mrs[w->rkey & (FV_MAX_MRS - 1)];
        int ok = m->key == w->rkey && m->pid == r->pid && m->pd == r->pd &&
                 (m->access & IBV_ACCESS_REMOTE_WRITE) && (r->access & IBV_ACCESS_REMOTE_WRITE) &&
                 w->raddr >= m->addr && w->raddr + w->len >= w->raddr &&
                 w->raddr + w->len <= m->addr + m->len;
        if (!ok) {
            FV_DBG("QP %u: bad rkey %#x / range %#llx+%u at QP %u", s->qpn, w->rkey,
                   (unsigned long long)w->raddr, w->len, r->qpn);
            complete_send(q, w, IBV_WC_REM_ACCESS_ERR);
            fv_qp_to_err(q->idx);
            fv_qp_to_err(ri);
            fv_async_push(r->ctx, IBV_EVENT_QP_ACCESS_ERR, FV_OBJ_QP, ri, r->serial);
            fv_unlock();
            return DONE;
        }
        rv[nrv].iov_base = (void *)(uintptr_t)w->raddr;
        rv[nrv++].iov_len = w->len;
    }
    if (consume) {
        if (r->rq_head == r->rq_tail) {
            /* Receiver not ready: the responder NAKs, we retry after its min_rnr_timer. */
            double delay = rnr_delay(r->min_rnr_timer);
            fv_unlock();
            if (s->rnr_retry != 7 && w->rnr_count >= s->rnr_retry)
                return fail(q, w, IBV_WC_RNR_RETRY_EXC_ERR);
            w->rnr_count++;
            w->next_try = now + delay;
            return STALL;
        }
        struct fv_rwr rw = fv_rq_ring(ri)[r->rq_head % r->max_recv_wr];
        r->rq_head++;
        rwr_id = rw.wr_id;
        if (!is_write(w->opcode)) {
            uint64_t room = 0, left = w->len;
            int ok = 1;
            for (uint32_t i = 0; i < rw.num_sge; i++)
                room += rw.sge[i].length;
            for (uint32_t i = 0; i < rw.num_sge && left && ok; i++) {
                ok = sge_ok(&rw.sge[i], r->pid, r->pd, IBV_ACCESS_LOCAL_WRITE);
                uint64_t take = rw.sge[i].length < left ? rw.sge[i].length : left;
                rv[nrv].iov_base = (void *)(uintptr_t)rw.sge[i].addr;
                rv[nrv++].iov_len = take;
                left -= take;
            }
            if (room < w->len || !ok) {
                struct fv_swc c;
                memset(&c, 0, sizeof(c));
                c.wc.wr_id = rwr_id;
                c.wc.status = room < w->len ? IBV_WC_LOC_LEN_ERR : IBV_WC_LOC_PROT_ERR;
                c.wc.opcode = IBV_WC_RECV;
                c.wc.qp_num = r->qpn;
                c.wc.src_qp = s->qpn;
                fv_cq_push(r->recv_cq, &c);
                fv_qp_to_err(ri);
                complete_send(q, w, room < w->len ? IBV_WC_REM_INV_REQ_ERR : IBV_WC_REM_OP_ERR);
                fv_qp_to_err(q->idx);
                fv_unlock();
                return DONE;
            }
        }
    }
    /* Accepted: both PSNs advance by the packets of the message. */
    uint32_t mtu = mtu_bytes(s->path_mtu);
    uint32_t pkts = w->len ? (w->len + mtu - 1) / mtu : 1;
    s->sq_psn = (s->sq_psn + pkts) & 0xffffff;
    r->rq_psn = (r->rq_psn + pkts) & 0xffffff;
    fv_seg->ports[s->port].tx_bytes += w->len;
    fv_seg->ports[s->port].tx_msgs++;
    fv_seg->ports[r->port].rx_bytes += w->len;
    fv_seg->ports[r->port].rx_msgs++;
    pid_t rpid = r->pid;
    uint32_t rserial = r->serial, rqpn = r->qpn, rcq = r->recv_cq;
    uint16_t slid = fv_cfg.eth ? 0 : fv_seg->ports[s->port].lid;
    fv_unlock();

    /* The bytes, outside the lock (other processes keep going), before any completion. */
    int ce = 0;
    uint64_t off = 0;
    if (fv_cfg.scramble && is_write(w->opcode) && nrv == 1) {
        /* Land the pages in reverse order: code that polls payload bytes instead of waiting for
         * the completion sees the tail first. */
        uint64_t a0 = (uintptr_t)rv[0].iov_base, a1 = a0 + rv[0].iov_len;
        uint64_t p = a1 > a0 ? ((a1 - 1) & ~(FV_PAGE - 1)) : a0;
        while (!ce && a1 > a0) {
            uint64_t start = p > a0 ? p : a0;
            ce = copy_out(rpid, w, start - a0, start, a1 - start);
            a1 = start;
            p -= FV_PAGE;
        }
    } else {
        for (int i = 0; i < nrv && !ce; i++) {
            ce = copy_out(rpid, w, off, (uintptr_t)rv[i].iov_base, rv[i].iov_len);
            off += rv[i].iov_len;
        }
    }

    fv_lock();
    struct fv_sqp *r2 = &fv_seg->qps[ri];
    int same = r2->serial == rserial;
    if (ce) {
        /* ESRCH: the responder vanished mid-message, as a lost peer; anything else (EFAULT on
         * unmapped memory, EPERM when CMA is denied) is an access error at the responder. */
        enum ibv_wc_status st = ce == ESRCH ? IBV_WC_RETRY_EXC_ERR : IBV_WC_REM_ACCESS_ERR;
        FV_DBG("QP %u: copy into pid %d failed: %s", s->qpn, (int)rpid, strerror(ce));
        complete_send(q, w, st);
        fv_qp_to_err(q->idx);
        if (same && st == IBV_WC_REM_ACCESS_ERR) {
            fv_qp_to_err(ri);
            fv_async_push(r2->ctx, IBV_EVENT_QP_ACCESS_ERR, FV_OBJ_QP, ri, rserial);
        }
        fv_unlock();
        return DONE;
    }
    if (consume && same) {
        struct fv_swc c;
        memset(&c, 0, sizeof(c));
        c.wc.wr_id = rwr_id;
        c.wc.status = IBV_WC_SUCCESS;
        c.wc.opcode = is_write(w->opcode) ? IBV_WC_RECV_RDMA_WITH_IMM : IBV_WC_RECV;
        c.wc.byte_len = w->len;
        if (w->opcode != IBV_WR_SEND) {
            c.wc.imm_data = w->imm;
            c.wc.wc_flags = IBV_WC_WITH_IMM;
        }
        c.wc.qp_num = rqpn;
        c.wc.src_qp = s->qpn;
        c.wc.slid = slid;
        if (fv_cfg.eth)
            c.wc.wc_flags |= IBV_WC_GRH;
        c.solicited = (w->flags & IBV_SEND_SOLICITED) != 0;
        fv_cq_push(rcq, &c);
    }
    complete_send(q, w, IBV_WC_SUCCESS);
    fv_unlock();
    return DONE;
}

static void progress_locked(struct fv_qp *q)
{
    while (q->executed < q->posted) {
        if (exec_one(q, &q->sq[q->executed % q->sq_cap]) == STALL)
            break;
        __atomic_store_n(&q->executed, q->executed + 1, __ATOMIC_RELEASE);
    }
}

void fv_progress_all(void)
{
    pthread_rwlock_rdlock(&reg_lock);
    for (struct fv_qp *q = qp_list; q; q = q->next) {
        if (__atomic_load_n(&q->executed, __ATOMIC_RELAXED) ==
            __atomic_load_n(&q->posted, __ATOMIC_RELAXED))
            continue;
        /* Another thread running this queue is progress enough. */
        if (pthread_mutex_trylock(&q->lock) != 0)
            continue;
        progress_locked(q);
        pthread_mutex_unlock(&q->lock);
    }
    pthread_rwlock_unlock(&reg_lock);
}

int fv_post_send(struct ibv_qp *iq, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    struct fv_qp *q = (struct fv_qp *)iq;
    int err = 0;
    pthread_mutex_lock(&q->lock);
    const struct fv_sqp *s = &fv_seg->qps[q->idx];
    for (; wr; wr = wr->next) {
        uint32_t st = s->state;
        if (s->serial != q->serial || (st != IBV_QPS_RTS && st != IBV_QPS_ERR)) {
            err = EINVAL;  /* posting before RTS */
            break;
        }
        if ((wr->opcode != IBV_WR_RDMA_WRITE && wr->opcode != IBV_WR_RDMA_WRITE_WITH_IMM &&
             wr->opcode != IBV_WR_SEND && wr->opcode != IBV_WR_SEND_WITH_IMM) ||
            (wr->send_flags & ~(IBV_SEND_SIGNALED | IBV_SEND_INLINE | IBV_SEND_SOLICITED |
                                IBV_SEND_FENCE)) ||
            wr->num_sge < 0 || (uint32_t)wr->num_sge > s->max_send_sge ||
            (wr->num_sge > 0 && !wr->sg_list)) {
            err = EINVAL;
            break;
        }
        uint64_t len = 0;
        for (int i = 0; i < wr->num_sge; i++)
            len += wr->sg_list[i].length;
        if (len > 0xffffffffull || ((wr->send_flags & IBV_SEND_INLINE) && len > s->max_inline)) {
            err = EINVAL;
            break;
        }
        /* Slots free only when a completion of this WR or a later one was polled. */
        if (q->posted - __atomic_load_n(&q->retired, __ATOMIC_ACQUIRE) >= s->max_send_wr) {
            err = ENOMEM;
            break;
        }
        struct fv_swr *w = &q->sq[q->posted % q->sq_cap];
        memset(w, 0, offsetof(struct fv_swr, inl));
        w->wr_id = wr->wr_id;
        w->seq = q->posted;
        w->opcode = wr->opcode;
        w->flags = wr->send_flags;
        w->num_sge = (uint32_t)wr->num_sge;
        w->len = (uint32_t)len;
        w->imm = wr->imm_data;
        if (is_write(wr->opcode)) {
            w->raddr = wr->wr.rdma.remote_addr;
            w->rkey = wr->wr.rdma.rkey;
        }
        if (wr->send_flags & IBV_SEND_INLINE) {
            /* Inline data is copied at post time: the buffer is free to reuse on return. */
            uint32_t o = 0;
            for (int i = 0; i < wr->num_sge; i++) {
                memcpy(w->inl + o, (void *)(uintptr_t)wr->sg_list[i].addr, wr->sg_list[i].length);
                o += wr->sg_list[i].length;
            }
        } else {
            for (int i = 0; i < wr->num_sge; i++)
                w->sge[i] = wr->sg_list[i];
        }
        fv_lock();
        uint64_t nth = ++fv_seg->send_wrs;
        fv_unlock();
        if (fv_cfg.send_err_at && nth == fv_cfg.send_err_at) {
            w->inject = fv_cfg.send_err_status;
            FV_DBG("fault: send WR #%llu will complete with %d", (unsigned long long)nth, w->inject);
        }
        if (fv_cfg.drop_qp_at && nth == fv_cfg.drop_qp_at)
            w->drop = 1;
        __atomic_store_n(&q->posted, q->posted + 1, __ATOMIC_RELEASE);
    }
    progress_locked(q);
    pthread_mutex_unlock(&q->lock);
    if (err && bad)
        *bad = wr;
    return err;
}
