/* fakeverbs: devices, contexts, ports, PDs, MRs, completion channels, CQs, async events and the
 * string helpers. QPs and the data path are in fv_qp.c. */
#define _GNU_SOURCE
#include "fv.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>

/* The header makes these two macros; the library exports them as functions. */
#undef ibv_reg_mr
#undef ibv_query_port

#define EXPORT __attribute__((visibility("default")))

static struct ibv_device devs[FV_MAX_DEV];
static pthread_once_t devs_once = PTHREAD_ONCE_INIT;

/* Local maps from fabric indices back to this process's objects (completion channels hand back
 * the CQ, async events the QP or CQ). */
static struct fv_cq *local_cqs[FV_MAX_CQS];
static pthread_mutex_t local_lock = PTHREAD_MUTEX_INITIALIZER;
static uint64_t memlock_used;

struct fv_context *fv_ctx_of(struct ibv_context *c)
{
    /* container_of: the ibv_context is the last member of the verbs_context, not the first. */
    struct verbs_context *v = (struct verbs_context *)((char *)c - offsetof(struct verbs_context, context));
    return (struct fv_context *)((char *)v - offsetof(struct fv_context, vctx));
}

static void init_devs(void)
{
    for (int k = 0; k < FV_MAX_DEV; k++) {
        struct ibv_device *d = &devs[k];
        d->node_type = IBV_NODE_CA;
        d->transport_type = IBV_TRANSPORT_IB;
        snprintf(d->name, sizeof(d->name), "fake%d", k);
        snprintf(d->dev_name, sizeof(d->dev_name), "uverbs%d", k);
        snprintf(d->dev_path, sizeof(d->dev_path), "/sys/class/infiniband_verbs/uverbs%d", k);
        snprintf(d->ibdev_path, sizeof(d->ibdev_path), "/sys/class/infiniband/fake%d", k);
    }
}

static int ndev_env(void)
{
    const char *s = getenv("FAKEVERBS_NDEV");
    int n = s && *s ? atoi(s) : 2;
    return n < 0 ? 0 : n > FV_MAX_DEV ? FV_MAX_DEV : n;
}

EXPORT struct ibv_device **ibv_get_device_list(int *num)
{
    pthread_once(&devs_once, init_devs);
    int n = ndev_env();
    if (num)
        *num = 0;
    if (n == 0) {
        errno = ENOSYS;  /* what the real library says with no devices */
        return NULL;
    }
    struct ibv_device **l = calloc((size_t)n + 1, sizeof(*l));
    if (!l) {
        errno = ENOMEM;
        return NULL;
    }
    for (int k = 0; k < n; k++)
        l[k] = &devs[k];
    if (num)
        *num = n;
    return l;
}

EXPORT void ibv_free_device_list(struct ibv_device **list)
{
    free(list);
}

EXPORT const char *ibv_get_device_name(struct ibv_device *device)
{
    return device ? device->name : NULL;
}

static int dev_index(const struct ibv_device *d)
{
    if (!d || d < devs || d >= devs + FV_MAX_DEV)
        return -1;
    return (int)(d - devs);
}

EXPORT __be64 ibv_get_device_guid(struct ibv_device *device)
{
    int k = dev_index(device);
    return htobe64(0x0002c90300000000ull | (uint64_t)(k + 1));
}

static int fv_query_port_ex(struct ibv_context *c, uint8_t port, struct ibv_port_attr *a, size_t len);
static int fv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc);
static int fv_req_notify_cq(struct ibv_cq *cq, int solicited);

EXPORT struct ibv_context *ibv_open_device(struct ibv_device *device)
{
    int k = dev_index(device);
    if (k < 0) {
        errno = EINVAL;
        return NULL;
    }
    char node[FV_NODE_LEN];
    int e = fv_node_name(node, sizeof(node));
    if (e) {
        errno = e;
        return NULL;
    }
    struct fv_context *c = calloc(1, sizeof(*c));
    if (!c) {
        errno = ENOMEM;
        return NULL;
    }
    int afd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (afd < 0) {
        e = errno;
        free(c);
        errno = e;
        return NULL;
    }
    e = fv_attach();
    if (e) {
        close(afd);
        free(c);
        errno = e;
        return NULL;
    }
    if (k >= fv_cfg.ndev) {
        fv_detach();
        close(afd);
        free(c);
        errno = ENODEV;
        return NULL;
    }
    /* Under Yama ptrace_scope=1 other processes may write into us only if we say so. */
    prctl(PR_SET_PTRACER, PR_SET_PTRACER_ANY, 0, 0, 0);
    fv_lock();
    int port = fv_port_get(node, (uint32_t)k);
    int slot = -1;
    for (unsigned i = 0; i < FV_MAX_CTXS && port >= 0; i++)
        if (!fv_seg->ctxs[i].serial) {
            slot = (int)i;
            break;
        }
    if (slot >= 0) {
        struct fv_sctx *s = &fv_seg->ctxs[slot];
        s->pid = getpid();
        s->fd = afd;
        s->head = s->tail = 0;
        s->serial = fv_new_serial();
    }
    fv_unlock();
    if (slot < 0) {
        fv_detach();
        close(afd);
        free(c);
        errno = ENOSPC;
        return NULL;
    }
    c->port = port;
    c->sctx = (uint32_t)slot;
    c->dev = k;
    pthread_mutex_init(&c->lock, NULL);
    struct verbs_context *v = &c->vctx;
    v->sz = sizeof(*v);
    v->query_port = fv_query_port_ex;
    struct ibv_context *ic = &v->context;
    ic->device = device;
    ic->ops.post_send = fv_post_send;
    ic->ops.post_recv = fv_post_recv;
    ic->ops.poll_cq = fv_poll_cq;
    ic->ops.req_notify_cq = fv_req_notify_cq;
    ic->cmd_fd = -1;
    ic->async_fd = afd;
    ic->num_comp_vectors = 1;
    pthread_mutex_init(&ic->mutex, NULL);
    ic->abi_compat = __VERBS_ABI_IS_EXTENDED;
    FV_DBG("open %s on node %s: LID %u", device->name, node, fv_seg->ports[port].lid);
    return ic;
}

EXPORT int ibv_close_device(struct ibv_context *ic)
{
    if (!ic)
        return EINVAL;
    struct fv_context *c = fv_ctx_of(ic);
    fv_lock();
    struct fv_sctx *s = &fv_seg->ctxs[c->sctx];
    if (s->pid == getpid())
        s->serial = 0, s->pid = 0;
    fv_unlock();
    close(ic->async_fd);
    pthread_mutex_destroy(&ic->mutex);
    pthread_mutex_destroy(&c->lock);
    free(c);
    fv_detach();
    return 0;
}

EXPORT int ibv_query_device(struct ibv_context *ic, struct ibv_device_attr *a)
{
    if (!ic || !a)
        return EINVAL;
    struct fv_context *c = fv_ctx_of(ic);
    memset(a, 0, sizeof(*a));
    snprintf(a->fw_ver, sizeof(a->fw_ver), "fakeverbs-1");
    a->node_guid = htobe64(fv_seg->ports[c->port].guid);
    a->sys_image_guid = a->node_guid;
    a->max_mr_size = 1ull << 40;
    a->page_size_cap = 0xfffff000;
    a->vendor_id = 0x02c9;
    a->vendor_part_id = 0xfa6e;
    a->max_qp = 4096;
    a->max_qp_wr = FV_MAX_QP_WR;
    a->device_cap_flags = IBV_DEVICE_RC_RNR_NAK_GEN | IBV_DEVICE_PORT_ACTIVE_EVENT;
    a->max_sge = FV_MAX_SGE;
    a->max_sge_rd = FV_MAX_SGE;
    a->max_cq = FV_MAX_CQS;
    a->max_cqe = FV_MAX_CQE;
    a->max_mr = FV_MAX_MRS;
    a->max_pd = 1 << 16;
    a->max_qp_rd_atom = 16;
    a->max_res_rd_atom = 16 * 4096;
    a->max_qp_init_rd_atom = 16;
    a->atomic_cap = IBV_ATOMIC_NONE;
    a->max_pkeys = 1;
    a->local_ca_ack_delay = 16;
    a->phys_port_cnt = 1;
    return 0;
}

static int fv_query_port_ex(struct ibv_context *ic, uint8_t port, struct ibv_port_attr *out, size_t len)
{
    if (!ic || !out || port != 1)
        return EINVAL;
    struct fv_context *c = fv_ctx_of(ic);
    struct ibv_port_attr a;
    memset(&a, 0, sizeof(a));
    a.state = (fv_cfg.port_down >> c->dev) & 1 ? IBV_PORT_DOWN : IBV_PORT_ACTIVE;
    a.phys_state = a.state == IBV_PORT_ACTIVE ? 5 : 3;  /* LinkUp / Disabled */
    a.max_mtu = IBV_MTU_4096;
    a.active_mtu = IBV_MTU_4096;
    a.gid_tbl_len = fv_cfg.eth ? 2 : 1;
    a.port_cap_flags = fv_cfg.eth ? 0 : IBV_PORT_SM;
    a.max_msg_sz = (uint32_t)fv_cfg.max_msg;
    a.pkey_tbl_len = 1;
    a.lid = fv_cfg.eth ? 0 : fv_seg->ports[c->port].lid;
    a.sm_lid = fv_cfg.eth ? 0 : 1;
    a.max_vl_num = 1;
    a.active_width = 2;   /* 4x */
    a.active_speed = 32;  /* EDR */
    a.link_layer = fv_cfg.eth ? IBV_LINK_LAYER_ETHERNET : IBV_LINK_LAYER_INFINIBAND;
    memcpy(out, &a, len < sizeof(a) ? len : sizeof(a));
    return 0;
}

EXPORT int ibv_query_port(struct ibv_context *ic, uint8_t port, struct _compat_ibv_port_attr *a)
{
    /* The old symbol's structure ends before port_cap_flags2. */
    return fv_query_port_ex(ic, port, (struct ibv_port_attr *)a,
                            offsetof(struct ibv_port_attr, port_cap_flags2));
}

EXPORT int ibv_query_gid(struct ibv_context *ic, uint8_t port, int index, union ibv_gid *gid)
{
    if (!ic || !gid || port != 1 || index < 0 || index >= (fv_cfg.eth ? 2 : 1))
        return -1;
    fv_port_gid((uint32_t)fv_ctx_of(ic)->port, index, gid);
    return 0;
}

EXPORT int ibv_query_pkey(struct ibv_context *ic, uint8_t port, int index, __be16 *pkey)
{
    if (!ic || !pkey || port != 1 || index != 0)
        return -1;
    *pkey = htobe16(0xffff);
    return 0;
}

EXPORT struct ibv_pd *ibv_alloc_pd(struct ibv_context *ic)
{
    if (!ic) {
        errno = EINVAL;
        return NULL;
    }
    struct fv_pd *p = calloc(1, sizeof(*p));
    if (!p) {
        errno = ENOMEM;
        return NULL;
    }
    fv_lock();
    p->id = fv_seg->next_pd++;
    fv_unlock();
    p->ibpd.context = ic;
    p->ibpd.handle = (uint32_t)p->id;
    return &p->ibpd;
}

EXPORT int ibv_dealloc_pd(struct ibv_pd *pd)
{
    if (!pd)
        return EINVAL;
    struct fv_pd *p = (struct fv_pd *)pd;
    if (p->nobj > 0)
        return EBUSY;
    free(p);
    return 0;
}

#define FV_ACCESS_KNOWN (IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ | \
                         IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_MW_BIND | IBV_ACCESS_ZERO_BASED | \
                         IBV_ACCESS_ON_DEMAND | IBV_ACCESS_HUGETLB | IBV_ACCESS_RELAXED_ORDERING)

static struct ibv_mr *reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    if (!pd || (!addr && len) || (access & ~FV_ACCESS_KNOWN)) {
        errno = EINVAL;
        return NULL;
    }
    /* Remote write or atomic access needs local write, as the verbs spec says. */
    if ((access & (IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_ATOMIC)) &&
        !(access & IBV_ACCESS_LOCAL_WRITE)) {
        errno = EINVAL;
        return NULL;
    }
    struct fv_pd *p = (struct fv_pd *)pd;
    struct fv_context *c = fv_ctx_of(pd->context);
    uintptr_t a0 = (uintptr_t)addr & ~(FV_PAGE - 1);
    uintptr_t a1 = ((uintptr_t)addr + len + FV_PAGE - 1) & ~(FV_PAGE - 1);
    /* Hardware pins the pages: unmapped memory fails with EFAULT. */
    if (len && msync((void *)a0, a1 - a0, MS_ASYNC) != 0) {
        errno = EFAULT;
        return NULL;
    }
    uint64_t pages = a1 - a0;
    struct fv_mr *m = calloc(1, sizeof(*m));
    if (!m) {
        errno = ENOMEM;
        return NULL;
    }
    pthread_mutex_lock(&local_lock);
    if (geteuid() != 0) {
        struct rlimit rl;
        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY &&
            memlock_used + pages > rl.rlim_cur) {
            pthread_mutex_unlock(&local_lock);
            FV_DBG("reg_mr of %zu bytes: over RLIMIT_MEMLOCK %llu", len, (unsigned long long)rl.rlim_cur);
            free(m);
            errno = ENOMEM;
            return NULL;
        }
    }
    memlock_used += pages;
    m->locked = pages;
    pthread_mutex_unlock(&local_lock);

    int err = 0;
    fv_lock();
    uint64_t nth = ++fv_seg->reg_mrs;
    if (fv_cfg.reg_fail_at && nth == fv_cfg.reg_fail_at) {
        FV_DBG("fault: reg_mr #%llu fails", (unsigned long long)nth);
        err = ENOMEM;
    }
    int slot = -1;
    for (unsigned i = 1; i < FV_MAX_MRS && !err; i++)  /* index 0 unused: no key is 0 */
        if (!fv_seg->mrs[i].key) {
            slot = (int)i;
            break;
        }
    if (!err && slot < 0)
        err = ENOMEM;
    if (!err) {
        struct fv_smr *s = &fv_seg->mrs[slot];
        uint32_t gen = fv_seg->next_gen++ & ((1u << (32 - FV_MR_BITS)) - 1);
        if (gen == 0)
            gen = fv_seg->next_gen++;
        s->key = (gen << FV_MR_BITS) | (uint32_t)slot;
        s->pid = getpid();
        s->pd = p->id;
        s->addr = (uintptr_t)addr;
        s->len = len;
        s->access = (uint32_t)access;
        s->ctx = c->sctx;
        m->ibmr.lkey = m->ibmr.rkey = s->key;
    }
    fv_unlock();
    if (err) {
        pthread_mutex_lock(&local_lock);
        memlock_used -= pages;
        pthread_mutex_unlock(&local_lock);
        free(m);
        errno = err;
        return NULL;
    }
    m->ibmr.context = pd->context;
    m->ibmr.pd = pd;
    m->ibmr.addr = addr;
    m->ibmr.length = len;
    m->ibmr.handle = m->ibmr.lkey;
    pthread_mutex_lock(&local_lock);
    p->nobj++;
    pthread_mutex_unlock(&local_lock);
    return &m->ibmr;
}

EXPORT struct ibv_mr *ibv_reg_mr(struct ibv_pd *pd, void *addr, size_t len, int access)
{
    return reg_mr(pd, addr, len, access);
}

EXPORT struct ibv_mr *ibv_reg_mr_iova2(struct ibv_pd *pd, void *addr, size_t len, uint64_t iova,
                                       unsigned int access)
{
    if (iova != (uintptr_t)addr) {
        errno = EOPNOTSUPP;  /* remote addresses are virtual addresses here */
        return NULL;
    }
    return reg_mr(pd, addr, len, (int)(access & ~IBV_ACCESS_OPTIONAL_RANGE));
}

EXPORT int ibv_dereg_mr(struct ibv_mr *mr)
{
    if (!mr)
        return EINVAL;
    struct fv_mr *m = (struct fv_mr *)mr;
    uint32_t idx = mr->lkey & (FV_MAX_MRS - 1);
    fv_lock();
    if (fv_seg->mrs[idx].key == mr->lkey && fv_seg->mrs[idx].pid == getpid())
        fv_seg->mrs[idx].key = 0, fv_seg->mrs[idx].pid = 0;
    fv_unlock();
    pthread_mutex_lock(&local_lock);
    memlock_used -= m->locked;
    ((struct fv_pd *)mr->pd)->nobj--;
    pthread_mutex_unlock(&local_lock);
    free(m);
    return 0;
}

EXPORT struct ibv_comp_channel *ibv_create_comp_channel(struct ibv_context *ic)
{
    if (!ic) {
        errno = EINVAL;
        return NULL;
    }
    struct fv_chan *ch = calloc(1, sizeof(*ch));
    if (!ch) {
        errno = ENOMEM;
        return NULL;
    }
    /* A semaphore eventfd: one read per event, pollable, and other processes can write it. */
    int fd = eventfd(0, EFD_SEMAPHORE | EFD_CLOEXEC);
    if (fd < 0) {
        int e = errno;
        free(ch);
        errno = e;
        return NULL;
    }
    int slot = -1;
    fv_lock();
    for (unsigned i = 0; i < FV_MAX_CHANS; i++)
        if (!fv_seg->chans[i].serial) {
            slot = (int)i;
            struct fv_schan *s = &fv_seg->chans[i];
            s->pid = getpid();
            s->fd = fd;
            s->head = s->tail = 0;
            s->serial = fv_new_serial();
            ch->serial = s->serial;
            break;
        }
    fv_unlock();
    if (slot < 0) {
        close(fd);
        free(ch);
        errno = ENOSPC;
        return NULL;
    }
    ch->idx = (uint32_t)slot;
    ch->ibch.context = ic;
    ch->ibch.fd = fd;
    ch->ibch.refcnt = 0;
    return &ch->ibch;
}

EXPORT int ibv_destroy_comp_channel(struct ibv_comp_channel *channel)
{
    if (!channel)
        return EINVAL;
    struct fv_chan *ch = (struct fv_chan *)channel;
    if (channel->refcnt > 0)
        return EBUSY;
    fv_lock();
    if (fv_seg->chans[ch->idx].serial == ch->serial)
        fv_seg->chans[ch->idx].serial = 0, fv_seg->chans[ch->idx].pid = 0;
    fv_unlock();
    close(channel->fd);
    free(ch);
    return 0;
}

struct fv_cq *fv_local_cq(uint32_t idx, uint32_t serial)
{
    if (idx >= FV_MAX_CQS)
        return NULL;
    pthread_mutex_lock(&local_lock);
    struct fv_cq *c = local_cqs[idx];
    if (c && c->serial != serial)
        c = NULL;
    pthread_mutex_unlock(&local_lock);
    return c;
}

EXPORT struct ibv_cq *ibv_create_cq(struct ibv_context *ic, int cqe, void *cq_context,
                                    struct ibv_comp_channel *channel, int comp_vector)
{
    if (!ic || cqe < 1 || cqe > FV_MAX_CQE || comp_vector < 0 || comp_vector >= 1 ||
        (channel && channel->context != ic)) {
        errno = EINVAL;
        return NULL;
    }
    struct fv_context *c = fv_ctx_of(ic);
    struct fv_cq *cq = calloc(1, sizeof(*cq));
    if (!cq) {
        errno = ENOMEM;
        return NULL;
    }
    struct fv_chan *ch = (struct fv_chan *)channel;
    int slot = -1;
    fv_lock();
    for (unsigned i = 0; i < FV_MAX_CQS; i++)
        if (!fv_seg->cqs[i].serial) {
            struct fv_scq *s = &fv_seg->cqs[i];
            slot = (int)i;
            memset(s, 0, sizeof(*s));
            s->pid = getpid();
            s->ctx = c->sctx;
            s->chan = ch ? (int32_t)ch->idx : -1;
            s->chan_serial = ch ? ch->serial : 0;
            s->cap = (uint32_t)cqe;
            /* Serials are kept below 2^(32 - FV_CQ_BITS): the channel ring packs idx|serial. */
            do
                s->serial = fv_new_serial() & ((1u << (32 - FV_CQ_BITS)) - 1);
            while (!s->serial);
            cq->serial = s->serial;
            break;
        }
    fv_unlock();
    if (slot < 0) {
        free(cq);
        errno = ENOSPC;
        return NULL;
    }
    cq->idx = (uint32_t)slot;
    pthread_mutex_init(&cq->poll_lock, NULL);
    cq->ibcq.context = ic;
    cq->ibcq.channel = channel;
    cq->ibcq.cq_context = cq_context;
    cq->ibcq.handle = cq->idx;
    cq->ibcq.cqe = cqe;
    pthread_mutex_init(&cq->ibcq.mutex, NULL);
    pthread_cond_init(&cq->ibcq.cond, NULL);
    if (channel)
        __atomic_add_fetch(&channel->refcnt, 1, __ATOMIC_RELAXED);
    pthread_mutex_lock(&local_lock);
    local_cqs[cq->idx] = cq;
    pthread_mutex_unlock(&local_lock);
    return &cq->ibcq;
}

EXPORT int ibv_destroy_cq(struct ibv_cq *ibcq)
{
    if (!ibcq)
        return EINVAL;
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    if (fv_qp_busy_cq(cq))
        return EBUSY;
    fv_lock();
    if (fv_seg->cqs[cq->idx].serial == cq->serial)
        fv_seg->cqs[cq->idx].serial = 0, fv_seg->cqs[cq->idx].pid = 0;
    fv_unlock();
    pthread_mutex_lock(&local_lock);
    if (local_cqs[cq->idx] == cq)
        local_cqs[cq->idx] = NULL;
    pthread_mutex_unlock(&local_lock);
    if (ibcq->channel)
        __atomic_sub_fetch(&ibcq->channel->refcnt, 1, __ATOMIC_RELAXED);
    pthread_mutex_destroy(&cq->poll_lock);
    pthread_mutex_destroy(&ibcq->mutex);
    pthread_cond_destroy(&ibcq->cond);
    free(cq);
    return 0;
}

static int fv_poll_cq(struct ibv_cq *ibcq, int n, struct ibv_wc *wc)
{
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    if (n < 0 || (n > 0 && !wc))
        return -1;
    /* This process is the HCA: run its stalled or retrying send queues first. */
    fv_progress_all();
    struct fv_scq *s = &fv_seg->cqs[cq->idx];
    if (s->serial != cq->serial || __atomic_load_n(&s->overrun, __ATOMIC_RELAXED))
        return -1;
    pthread_mutex_lock(&cq->poll_lock);
    uint32_t head = s->head;
    uint32_t tail = __atomic_load_n(&s->tail, __ATOMIC_ACQUIRE);
    int got = 0;
    struct fv_swc *ring = fv_cq_ring(cq->idx);
    while (got < n && head != tail) {
        struct fv_swc w = ring[head % s->cap];
        head++;
        wc[got++] = w.wc;
        if (w.qp_serial)
            fv_retire(w.qp_idx, w.qp_serial, w.sseq);
    }
    __atomic_store_n(&s->head, head, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&cq->poll_lock);
    return got;
}

static int fv_req_notify_cq(struct ibv_cq *ibcq, int solicited)
{
    struct fv_cq *cq = (struct fv_cq *)ibcq;
    if (!ibcq->channel)
        return EINVAL;
    fv_lock();
    struct fv_scq *s = &fv_seg->cqs[cq->idx];
    int r = 0;
    if (s->serial == cq->serial)
        s->armed = solicited ? FV_ARM_SOLICITED : FV_ARM_ALL;
    else
        r = EINVAL;
    fv_unlock();
    return r;
}

EXPORT int ibv_get_cq_event(struct ibv_comp_channel *channel, struct ibv_cq **cq, void **cq_context)
{
    if (!channel || !cq || !cq_context) {
        errno = EINVAL;
        return -1;
    }
    struct fv_chan *ch = (struct fv_chan *)channel;
    for (;;) {
        uint64_t v;
        /* Blocks unless the application made the fd non-blocking (then EAGAIN, as rdma-core). */
        ssize_t r = read(channel->fd, &v, sizeof(v));
        if (r != (ssize_t)sizeof(v))
            return -1;
        uint32_t ent = 0;
        int have = 0;
        fv_lock();
        struct fv_schan *s = &fv_seg->chans[ch->idx];
        if (s->serial == ch->serial && s->head != s->tail) {
            ent = s->cq[s->head % FV_CHAN_RING];
            s->head++;
            have = 1;
        }
        fv_unlock();
        if (!have)
            continue;
        struct fv_cq *c = fv_local_cq(ent & (FV_MAX_CQS - 1), ent >> FV_CQ_BITS);
        if (!c)
            continue;  /* the CQ was destroyed since: not an event for anyone */
        *cq = &c->ibcq;
        *cq_context = c->ibcq.cq_context;
        return 0;
    }
}

EXPORT void ibv_ack_cq_events(struct ibv_cq *cq, unsigned int nevents)
{
    if (!cq)
        return;
    pthread_mutex_lock(&cq->mutex);
    cq->comp_events_completed += nevents;
    pthread_cond_signal(&cq->cond);
    pthread_mutex_unlock(&cq->mutex);
}

EXPORT int ibv_resize_cq(struct ibv_cq *cq, int cqe)
{
    (void)cq;
    (void)cqe;
    return EOPNOTSUPP;
}

EXPORT int ibv_get_async_event(struct ibv_context *ic, struct ibv_async_event *event)
{
    if (!ic || !event) {
        errno = EINVAL;
        return -1;
    }
    struct fv_context *c = fv_ctx_of(ic);
    for (;;) {
        uint64_t v;
        if (read(ic->async_fd, &v, sizeof(v)) != (ssize_t)sizeof(v))
            return -1;
        struct fv_event e;
        int have = 0;
        fv_lock();
        struct fv_sctx *s = &fv_seg->ctxs[c->sctx];
        if (s->pid == getpid() && s->head != s->tail) {
            e = s->ev[s->head % FV_ASYNC_RING];
            s->head++;
            have = 1;
        }
        fv_unlock();
        if (!have)
            continue;
        memset(event, 0, sizeof(*event));
        event->event_type = (enum ibv_event_type)e.type;
        if (e.kind == FV_OBJ_QP) {
            struct fv_qp *q = fv_local_qp(e.idx, e.serial);
            if (!q)
                continue;
            event->element.qp = &q->ibqp;
        } else if (e.kind == FV_OBJ_CQ) {
            struct fv_cq *q = fv_local_cq(e.idx, e.serial);
            if (!q)
                continue;
            event->element.cq = &q->ibcq;
        }
        return 0;
    }
}

EXPORT void ibv_ack_async_event(struct ibv_async_event *event)
{
    if (!event)
        return;
    switch (event->event_type) {
    case IBV_EVENT_CQ_ERR:
        if (event->element.cq)
            __atomic_add_fetch(&event->element.cq->async_events_completed, 1, __ATOMIC_RELAXED);
        break;
    case IBV_EVENT_QP_FATAL:
    case IBV_EVENT_QP_REQ_ERR:
    case IBV_EVENT_QP_ACCESS_ERR:
    case IBV_EVENT_COMM_EST:
    case IBV_EVENT_SQ_DRAINED:
    case IBV_EVENT_PATH_MIG:
    case IBV_EVENT_PATH_MIG_ERR:
    case IBV_EVENT_QP_LAST_WQE_REACHED:
        if (event->element.qp)
            __atomic_add_fetch(&event->element.qp->events_completed, 1, __ATOMIC_RELAXED);
        break;
    default:
        break;
    }
}

EXPORT int ibv_fork_init(void)
{
    return 0;  /* nothing is pinned: fork needs no care here (which hardware does need) */
}

EXPORT const char *ibv_wc_status_str(enum ibv_wc_status status)
{
    static const char *const s[] = {
        [IBV_WC_SUCCESS] = "success",
        [IBV_WC_LOC_LEN_ERR] = "local length error",
        [IBV_WC_LOC_QP_OP_ERR] = "local QP operation error",
        [IBV_WC_LOC_EEC_OP_ERR] = "local EE context operation error",
        [IBV_WC_LOC_PROT_ERR] = "local protection error",
        [IBV_WC_WR_FLUSH_ERR] = "Work Request Flushed Error",
        [IBV_WC_MW_BIND_ERR] = "memory management operation error",
        [IBV_WC_BAD_RESP_ERR] = "bad response error",
        [IBV_WC_LOC_ACCESS_ERR] = "local access error",
        [IBV_WC_REM_INV_REQ_ERR] = "remote invalid request error",
        [IBV_WC_REM_ACCESS_ERR] = "remote access error",
        [IBV_WC_REM_OP_ERR] = "remote operation error",
        [IBV_WC_RETRY_EXC_ERR] = "transport retry counter exceeded",
        [IBV_WC_RNR_RETRY_EXC_ERR] = "RNR retry counter exceeded",
        [IBV_WC_LOC_RDD_VIOL_ERR] = "local RDD violation error",
        [IBV_WC_REM_INV_RD_REQ_ERR] = "remote invalid RD request",
        [IBV_WC_REM_ABORT_ERR] = "aborted error",
        [IBV_WC_INV_EECN_ERR] = "invalid EE context number",
        [IBV_WC_INV_EEC_STATE_ERR] = "invalid EE context state",
        [IBV_WC_FATAL_ERR] = "fatal error",
        [IBV_WC_RESP_TIMEOUT_ERR] = "response timeout error",
        [IBV_WC_GENERAL_ERR] = "general error",
        [IBV_WC_TM_ERR] = "TM error",
        [IBV_WC_TM_RNDV_INCOMPLETE] = "TM software rendezvous",
    };
    if ((unsigned)status >= sizeof(s) / sizeof(s[0]) || !s[status])
        return "unknown";
    return s[status];
}

EXPORT const char *ibv_event_type_str(enum ibv_event_type event)
{
    static const char *const s[] = {
        [IBV_EVENT_CQ_ERR] = "CQ error",
        [IBV_EVENT_QP_FATAL] = "local work queue catastrophic error",
        [IBV_EVENT_QP_REQ_ERR] = "invalid request local work queue error",
        [IBV_EVENT_QP_ACCESS_ERR] = "local access violation work queue error",
        [IBV_EVENT_COMM_EST] = "communication established",
        [IBV_EVENT_SQ_DRAINED] = "send queue drained",
        [IBV_EVENT_PATH_MIG] = "path migrated",
        [IBV_EVENT_PATH_MIG_ERR] = "path migration request error",
        [IBV_EVENT_DEVICE_FATAL] = "local catastrophic error",
        [IBV_EVENT_PORT_ACTIVE] = "port active",
        [IBV_EVENT_PORT_ERR] = "port error",
        [IBV_EVENT_LID_CHANGE] = "LID change",
        [IBV_EVENT_PKEY_CHANGE] = "P_Key change",
        [IBV_EVENT_SM_CHANGE] = "SM change",
        [IBV_EVENT_SRQ_ERR] = "SRQ catastrophic error",
        [IBV_EVENT_SRQ_LIMIT_REACHED] = "SRQ limit reached",
        [IBV_EVENT_QP_LAST_WQE_REACHED] = "last WQE reached",
        [IBV_EVENT_CLIENT_REREGISTER] = "client reregistration",
        [IBV_EVENT_GID_CHANGE] = "GID table change",
        [IBV_EVENT_WQ_FATAL] = "WQ fatal",
    };
    if ((unsigned)event >= sizeof(s) / sizeof(s[0]) || !s[event])
        return "unknown";
    return s[event];
}

EXPORT const char *ibv_port_state_str(enum ibv_port_state state)
{
    static const char *const s[] = {"PORT_NOP", "PORT_DOWN", "PORT_INIT", "PORT_ARMED",
                                    "PORT_ACTIVE", "PORT_ACTIVE_DEFER"};
    return (unsigned)state < 6 ? s[state] : "unknown";
}

EXPORT const char *ibv_node_type_str(enum ibv_node_type type)
{
    switch (type) {
    case IBV_NODE_CA: return "InfiniBand channel adapter";
    case IBV_NODE_SWITCH: return "InfiniBand switch";
    case IBV_NODE_ROUTER: return "InfiniBand router";
    case IBV_NODE_RNIC: return "iWARP NIC";
    default: return "unknown";
    }
}
