/*
 * fake_tl.c - the fake net and window transports of fake_tl.h: one process, ranks are threads.
 *
 * One global lock guards everything (contexts, inboxes, windows, buffers): the fakes are for
 * correctness, not speed. A request is completed only by its owner's progress (a receive; a send
 * in rendezvous mode, once a receiver matched its message) or at once when posted (a send in
 * eager mode: the message is already in the peer's inbox).
 */
#include "config.h"
#include "tests/unit/fake_tl.h"

#include <limits.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

fake_tl_counts_t fake_tl_counts;

static pthread_mutex_t fake_lock = PTHREAD_MUTEX_INITIALIZER;
static int             fake_live;

/* ---- net ------------------------------------------------------------------------------------- */

#define FAKE_MAX_CTX 1024

int fake_tl_rendezvous;

struct fake_send;

typedef struct fake_msg {
    struct fake_msg  *next;
    struct fake_send *snd; /* the send waiting for this message's match (rendezvous), or NULL */
    uint64_t          src; /* the sending context's number */
    uint64_t          tag;
    size_t            len;
    char              data[];
} fake_msg_t;

/* A send that completes when its message is matched (rendezvous mode), in its context's list. */
typedef struct fake_send {
    struct fake_send *next;
    st_request_t     *req;
    fake_msg_t       *msg;  /* in the peer's inbox until matched; then NULL */
    uint64_t          peer;
    int               matched;
} fake_send_t;

typedef struct fake_recv {
    struct fake_recv *next;
    st_request_t     *req;
    uint64_t          src; /* UINT64_MAX: any */
    uint64_t          tag;
    void             *buf;
    size_t            len;
} fake_recv_t;

struct st_net_ctx {
    uint64_t     id;
    int          rank;
    int          efd;
    fake_msg_t  *inbox;
    fake_recv_t *posted;
    fake_send_t *sends;
};

struct st_net_ep {
    st_net_ctx_t *ctx;
    uint64_t      peer; /* the peer context's number */
};

static st_net_ctx_t *fake_ctxs[FAKE_MAX_CTX]; /* by number; numbers are never reused */
static uint64_t      fake_next_id = 1;

/* Appends item (a struct whose first member is its next pointer) to the list at head. */
#define FAKE_APPEND(_head, _item)                                                                  \
    do {                                                                                           \
        __typeof__(_item) *_pp = &(_head);                                                         \
        while (*_pp != NULL) {                                                                     \
            _pp = &(*_pp)->next;                                                                   \
        }                                                                                          \
        (_item)->next = NULL;                                                                      \
        *_pp          = (_item);                                                               \
    } while (0)

/* Unlinks item from the list at head; 1 when it was there. */
#define FAKE_UNLINK(_head, _item, _found)                                                          \
    do {                                                                                           \
        (_found) = 0;                                                                              \
        for (__typeof__(_item) *_pp = &(_head); *_pp != NULL; _pp = &(*_pp)->next) {               \
            if (*_pp == (_item)) {                                                                 \
                *_pp     = (_item)->next;                                                          \
                (_found) = 1;                                                                      \
                break;                                                                             \
            }                                                                                      \
        }                                                                                          \
    } while (0)

static st_status_t fake_net_open(const st_net_config_t *cfg, st_net_ctx_t **ctx_p)
{
    st_net_ctx_t *ctx = calloc(1, sizeof(*ctx));

    if (ctx == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    ctx->efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (ctx->efd < 0) {
        free(ctx);
        return ST_ERR_IO;
    }
    ctx->rank = cfg->rank;
    pthread_mutex_lock(&fake_lock);
    if (fake_next_id >= FAKE_MAX_CTX) {
        pthread_mutex_unlock(&fake_lock);
        close(ctx->efd);
        free(ctx);
        return ST_ERR_NO_DEVICE;
    }
    ctx->id = fake_next_id++;
    fake_ctxs[ctx->id] = ctx;
    fake_live++;
    pthread_mutex_unlock(&fake_lock);
    atomic_fetch_add(&fake_tl_counts.net_opens, 1);
    *ctx_p = ctx;
    return ST_OK;
}

static void fake_net_describe(st_net_ctx_t *ctx, char *buf, size_t len)
{
    snprintf(buf, len, "fake context %llu", (unsigned long long)ctx->id);
}

static void fake_net_set_rank(st_net_ctx_t *ctx, int rank)
{
    ctx->rank = rank;
}

/* Requests still posted are dropped without completing (as a closed worker leaves them): their
 * owner cancelled them before, or let the engine defer their memory past the close. */
static void fake_net_close(st_net_ctx_t *ctx)
{
    pthread_mutex_lock(&fake_lock);
    fake_ctxs[ctx->id] = NULL;
    fake_live--;
    while (ctx->inbox != NULL) {
        fake_msg_t *m = ctx->inbox;

        ctx->inbox = m->next;
        if (m->snd != NULL) {
            m->snd->msg = NULL; /* its sender will never see it matched: left pending */
        }
        free(m);
    }
    while (ctx->posted != NULL) {
        fake_recv_t *r = ctx->posted;

        ctx->posted = r->next;
        free(r);
    }
    while (ctx->sends != NULL) {
        fake_send_t *snd = ctx->sends;

        ctx->sends = snd->next;
        if (snd->msg != NULL) {
            snd->msg->snd = NULL; /* the message stays deliverable; nobody waits for its match */
        }
        free(snd);
    }
    pthread_mutex_unlock(&fake_lock);
    close(ctx->efd);
    free(ctx);
}

static st_status_t fake_net_address(st_net_ctx_t *ctx, st_net_addr_scope_t scope, void *buf,
                                    size_t *len_p)
{
    (void)scope;
    if (*len_p < sizeof(ctx->id)) {
        *len_p = sizeof(ctx->id);
        return ST_ERR_INVALID;
    }
    memcpy(buf, &ctx->id, sizeof(ctx->id));
    *len_p = sizeof(ctx->id);
    return ST_OK;
}

static st_status_t fake_net_connect(st_net_ctx_t *ctx, int peer, const void *peer_addr,
                                    size_t addr_len, unsigned flags, st_net_ep_t **ep_p)
{
    st_net_ep_t *ep;

    (void)peer;
    (void)flags;
    if (addr_len != sizeof(uint64_t)) {
        return ST_ERR_INVALID;
    }
    ep = calloc(1, sizeof(*ep));
    if (ep == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    ep->ctx = ctx;
    memcpy(&ep->peer, peer_addr, sizeof(ep->peer));
    *ep_p = ep;
    return ST_OK;
}

static void fake_net_disconnect(st_net_ep_t *ep, int force, double timeout)
{
    (void)force;
    (void)timeout;
    free(ep); /* requests live in the contexts */
}

static st_status_t fake_net_mem_reg(st_net_ctx_t *ctx, void *buf, size_t len, st_memh_t **memh_p)
{
    (void)ctx;
    (void)buf;
    (void)len;
    *memh_p = NULL;
    return ST_OK;
}

static st_status_t fake_net_mem_dereg(st_net_ctx_t *ctx, st_memh_t *memh)
{
    (void)ctx;
    (void)memh;
    return ST_OK;
}

static void fake_complete(st_request_t *req, st_status_t status, size_t len)
{
    req->status = status;
    req->len    = len;
    req->tl_req = NULL;
    __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
}

static st_status_t fake_net_isend(st_net_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                                  st_memh_t *memh, st_request_t *req)
{
    fake_msg_t   *m = malloc(sizeof(*m) + len);
    fake_send_t  *snd = NULL;
    st_net_ctx_t *peer;

    (void)memh;
    if (m == NULL || (fake_tl_rendezvous && (snd = calloc(1, sizeof(*snd))) == NULL)) {
        free(m);
        return ST_ERR_NO_MEMORY;
    }
    m->snd = snd;
    m->src = ep->ctx->id;
    m->tag = tag;
    m->len = len;
    if (len > 0) {
        memcpy(m->data, buf, len);
    }
    memset(req, 0, sizeof(*req));
    pthread_mutex_lock(&fake_lock);
    peer = (ep->peer < FAKE_MAX_CTX) ? fake_ctxs[ep->peer] : NULL;
    if (peer != NULL) {
        FAKE_APPEND(peer->inbox, m);
        eventfd_write(peer->efd, 1);
        if (snd != NULL) {
            snd->req    = req;
            snd->msg    = m;
            snd->peer   = ep->peer;
            req->tl_req = snd;
            FAKE_APPEND(ep->ctx->sends, snd);
        }
    }
    pthread_mutex_unlock(&fake_lock);
    atomic_fetch_add(&fake_tl_counts.net_sends, 1);
    atomic_fetch_add(&fake_tl_counts.net_bytes, (long)len);
    if (peer == NULL || snd == NULL) {
        if (peer == NULL) {
            free(m); /* the peer closed: a send into the void, as on a wire */
            free(snd);
        }
        fake_complete(req, ST_OK, len); /* eager: the message is in the peer's inbox */
    }
    return ST_OK;
}

static st_status_t fake_post_recv(st_net_ctx_t *ctx, uint64_t src, void *buf, size_t len,
                                  uint64_t tag, st_request_t *req)
{
    fake_recv_t *r = calloc(1, sizeof(*r));

    if (r == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memset(req, 0, sizeof(*req));
    r->req = req;
    r->src = src;
    r->tag = tag;
    r->buf = buf;
    r->len = len;
    req->tl_req = r;
    pthread_mutex_lock(&fake_lock);
    FAKE_APPEND(ctx->posted, r);
    pthread_mutex_unlock(&fake_lock);
    eventfd_write(ctx->efd, 1); /* the inbox may hold its message already: progress */
    return ST_OK;
}

static st_status_t fake_net_irecv(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag,
                                  st_memh_t *memh, st_request_t *req)
{
    (void)memh;
    return fake_post_recv(ep->ctx, ep->peer, buf, len, tag, req);
}

static st_status_t fake_net_irecv_any(st_net_ctx_t *ctx, void *buf, size_t len, uint64_t tag,
                                      st_request_t *req)
{
    return fake_post_recv(ctx, UINT64_MAX, buf, len, tag, req);
}

/* A receive still posted, or a send not yet matched, can be taken back; a matched send completes
 * at its owner's next progress. Only what is found in a list is freed (a request of a closed
 * context is in none). */
static void fake_net_cancel(st_net_ctx_t *ctx, st_request_t *req, int force)
{
    void *item;
    int   found = 0;

    (void)ctx;
    (void)force;
    pthread_mutex_lock(&fake_lock);
    item = req->done ? NULL : req->tl_req;
    for (uint64_t i = 1; item != NULL && !found && i < fake_next_id; i++) {
        st_net_ctx_t *c = fake_ctxs[i];
        fake_recv_t  *r = item;
        fake_send_t  *snd = item;

        if (c == NULL) {
            continue;
        }
        FAKE_UNLINK(c->posted, r, found);
        if (found) {
            free(r);
            break;
        }
        for (fake_send_t *t = c->sends; t != NULL; t = t->next) {
            if (t == snd && !snd->matched) {
                int in_inbox = 0;

                FAKE_UNLINK(c->sends, snd, found);
                if (snd->msg != NULL && snd->peer < FAKE_MAX_CTX && fake_ctxs[snd->peer] != NULL) {
                    FAKE_UNLINK(fake_ctxs[snd->peer]->inbox, snd->msg, in_inbox);
                }
                if (in_inbox) {
                    free(snd->msg);
                } else if (snd->msg != NULL) {
                    snd->msg->snd = NULL;
                }
                free(snd);
                break;
            }
        }
    }
    pthread_mutex_unlock(&fake_lock);
    if (found) {
        fake_complete(req, ST_ERR_CANCELED, 0);
    }
}

static int fake_match(const fake_recv_t *r, const fake_msg_t *m)
{
    return m->tag == r->tag && (r->src == UINT64_MAX || m->src == r->src);
}

static st_status_t fake_net_progress(st_net_ctx_t *ctx)
{
    int did = 0;

    pthread_mutex_lock(&fake_lock);
    /* sends whose message a receiver matched (rendezvous) */
    for (fake_send_t **sp = &ctx->sends; *sp != NULL;) {
        fake_send_t *snd = *sp;

        if (!snd->matched) {
            sp = &snd->next;
            continue;
        }
        *sp = snd->next;
        fake_complete(snd->req, ST_OK, 0);
        free(snd);
        atomic_fetch_add(&fake_tl_counts.net_matched, 1);
        did = 1;
    }
    /* posted receives, in posting order, against the inbox in arrival order */
    for (fake_recv_t **rp = &ctx->posted; *rp != NULL;) {
        fake_recv_t *r = *rp;
        fake_msg_t  *m = NULL, **mp;

        for (mp = &ctx->inbox; *mp != NULL; mp = &(*mp)->next) {
            if (fake_match(r, *mp)) {
                m = *mp;
                break;
            }
        }
        if (m == NULL) {
            rp = &r->next;
            continue;
        }
        *mp = m->next;
        *rp = r->next;
        if (m->snd != NULL) {
            m->snd->matched = 1;
            m->snd->msg     = NULL;
            if (m->src < FAKE_MAX_CTX && fake_ctxs[m->src] != NULL) {
                eventfd_write(fake_ctxs[m->src]->efd, 1);
            }
        }
        if (m->len > r->len) {
            fake_complete(r->req, ST_ERR_TRUNCATED, m->len);
        } else {
            if (m->len > 0) {
                memcpy(r->buf, m->data, m->len);
            }
            fake_complete(r->req, ST_OK, m->len);
        }
        free(m);
        free(r);
        did = 1;
    }
    pthread_mutex_unlock(&fake_lock);
    return did ? ST_OK : ST_INPROGRESS;
}

static int fake_net_event_fd(st_net_ctx_t *ctx)
{
    return ctx->efd;
}

static st_status_t fake_net_rail_devices(char *buf, size_t len)
{
    (void)len;
    buf[0] = '\0';
    return ST_ERR_UNSUPPORTED;
}

static st_status_t fake_net_arm(st_net_ctx_t *ctx)
{
    eventfd_t   v;
    st_status_t status = ST_OK;

    pthread_mutex_lock(&fake_lock);
    eventfd_read(ctx->efd, &v); /* a send or a match after this rings it again */
    /* a matched send, or a message a posted receive takes: progress instead of sleeping */
    for (fake_send_t *snd = ctx->sends; snd != NULL && status == ST_OK; snd = snd->next) {
        status = snd->matched ? ST_INPROGRESS : ST_OK;
    }
    for (fake_recv_t *r = ctx->posted; r != NULL && status == ST_OK; r = r->next) {
        for (fake_msg_t *m = ctx->inbox; m != NULL; m = m->next) {
            if (fake_match(r, m)) {
                status = ST_INPROGRESS;
                break;
            }
        }
    }
    pthread_mutex_unlock(&fake_lock);
    return status;
}

const st_net_ops_t fake_net = {
    .name       = "fake",
    .config     = NULL,
    .open       = fake_net_open,
    .describe   = fake_net_describe,
    .set_rank   = fake_net_set_rank,
    .close      = fake_net_close,
    .address    = fake_net_address,
    .connect    = fake_net_connect,
    .disconnect = fake_net_disconnect,
    .mem_reg    = fake_net_mem_reg,
    .mem_dereg  = fake_net_mem_dereg,
    .isend      = fake_net_isend,
    .irecv      = fake_net_irecv,
    .irecv_any  = fake_net_irecv_any,
    .cancel     = fake_net_cancel,
    .progress   = fake_net_progress,
    .event_fd   = fake_net_event_fd,
    .arm        = fake_net_arm,
    .rail_devices = fake_net_rail_devices,
};

/* ---- window ---------------------------------------------------------------------------------- */

/* One local rank's window; shared by its owner and the peers that attached (refs). */
typedef struct fake_seg {
    struct fake_seg *next;
    char             name[96];
    int              lr;
    int              linked; /* findable by name (until unlink) */
    int              refs;
    size_t           size;
    char            *mem;
} fake_seg_t;

struct st_win_ctx {
    st_win_config_t cfg;
    fake_seg_t    **segs; /* [local_size]; own one from create, peers' from attach */
};

static fake_seg_t *fake_segs;

static void fake_seg_put(fake_seg_t *seg) /* with fake_lock held */
{
    if (--seg->refs > 0) {
        return;
    }
    for (fake_seg_t **pp = &fake_segs; *pp != NULL; pp = &(*pp)->next) {
        if (*pp == seg) {
            *pp = seg->next;
            break;
        }
    }
    free(seg->mem);
    free(seg);
    fake_live--;
}

static st_status_t fake_win_create(const st_win_config_t *cfg, st_win_ctx_t **ctx_p)
{
    st_win_ctx_t *ctx;
    fake_seg_t   *seg;

    if (cfg->size == 0 || cfg->local_rank < 0 || cfg->local_rank >= cfg->local_size) {
        return ST_ERR_INVALID;
    }
    ctx = calloc(1, sizeof(*ctx));
    seg = calloc(1, sizeof(*seg));
    if (ctx == NULL || seg == NULL ||
        (ctx->segs = calloc((size_t)cfg->local_size, sizeof(*ctx->segs))) == NULL ||
        (seg->mem = aligned_alloc(4096, (cfg->size + 4095) / 4096 * 4096)) == NULL) {
        if (ctx != NULL) {
            free(ctx->segs);
        }
        free(ctx);
        free(seg);
        return ST_ERR_NO_MEMORY;
    }
    memset(seg->mem, 0, cfg->size);
    ctx->cfg = *cfg;
    snprintf(seg->name, sizeof(seg->name), "%s", cfg->name);
    seg->lr     = cfg->local_rank;
    seg->linked = 1;
    seg->refs   = 1;
    seg->size   = cfg->size;
    pthread_mutex_lock(&fake_lock);
    for (fake_seg_t *s = fake_segs; s != NULL; s = s->next) {
        if (s->linked && s->lr == seg->lr && strcmp(s->name, seg->name) == 0) {
            pthread_mutex_unlock(&fake_lock);
            free(seg->mem);
            free(seg);
            free(ctx->segs);
            free(ctx);
            return ST_ERR_IO; /* exists: as shm, never reuse one */
        }
    }
    seg->next = fake_segs;
    fake_segs = seg;
    fake_live++;
    pthread_mutex_unlock(&fake_lock);
    ctx->segs[cfg->local_rank] = seg;
    atomic_fetch_add(&fake_tl_counts.win_creates, 1);
    *ctx_p = ctx;
    return ST_OK;
}

static st_status_t fake_win_attach(st_win_ctx_t *ctx)
{
    st_status_t status = ST_OK;

    pthread_mutex_lock(&fake_lock);
    for (int lr = 0; lr < ctx->cfg.local_size; lr++) {
        if (ctx->segs[lr] != NULL) {
            continue; /* own, or attached before: harmless twice */
        }
        for (fake_seg_t *s = fake_segs; s != NULL; s = s->next) {
            if (s->linked && s->lr == lr && strcmp(s->name, ctx->cfg.name) == 0 &&
                s->size == ctx->cfg.size) {
                s->refs++;
                ctx->segs[lr] = s;
                break;
            }
        }
        if (ctx->segs[lr] == NULL) {
            status = ST_ERR_IO;
        }
    }
    pthread_mutex_unlock(&fake_lock);
    return status;
}

static void fake_win_unlink(st_win_ctx_t *ctx)
{
    pthread_mutex_lock(&fake_lock);
    ctx->segs[ctx->cfg.local_rank]->linked = 0;
    pthread_mutex_unlock(&fake_lock);
}

static void *fake_win_base(st_win_ctx_t *ctx, int lr)
{
    if (lr < 0 || lr >= ctx->cfg.local_size || ctx->segs[lr] == NULL) {
        return NULL;
    }
    return ctx->segs[lr]->mem;
}

static void fake_win_wait(st_win_ctx_t *ctx, uint32_t *word, uint32_t val, long timeout_us)
{
    struct timespec ts = {timeout_us / 1000000, (timeout_us % 1000000) * 1000};

    (void)ctx;
    syscall(SYS_futex, word, FUTEX_WAIT_PRIVATE, val, &ts, NULL, 0);
}

static void fake_win_wake(st_win_ctx_t *ctx, uint32_t *word)
{
    (void)ctx;
    syscall(SYS_futex, word, FUTEX_WAKE_PRIVATE, INT_MAX, NULL, NULL, 0);
}

static void fake_win_destroy(st_win_ctx_t *ctx)
{
    pthread_mutex_lock(&fake_lock);
    for (int lr = 0; lr < ctx->cfg.local_size; lr++) {
        if (ctx->segs[lr] != NULL) {
            if (lr == ctx->cfg.local_rank) {
                ctx->segs[lr]->linked = 0;
            }
            fake_seg_put(ctx->segs[lr]);
        }
    }
    pthread_mutex_unlock(&fake_lock);
    free(ctx->segs);
    free(ctx);
}

/* Shareable buffers: heap blocks by number. */
typedef struct fake_buf {
    struct fake_buf *next;
    uint64_t         id;
    char            *mem;
    size_t           size;
} fake_buf_t;

typedef struct fake_memh {
    uint64_t id;
} fake_memh_t;

static fake_buf_t *fake_bufs;
static uint64_t    fake_next_buf = 1;

static st_status_t fake_mem_alloc(size_t size, void **ptr_p)
{
    fake_buf_t *b;

    if (size == 0 || ptr_p == NULL) {
        return ST_ERR_INVALID;
    }
    b = calloc(1, sizeof(*b));
    if (b == NULL || (b->mem = calloc(1, size)) == NULL) {
        free(b);
        return ST_ERR_NO_MEMORY;
    }
    b->size = size;
    pthread_mutex_lock(&fake_lock);
    b->id     = fake_next_buf++;
    b->next   = fake_bufs;
    fake_bufs = b;
    fake_live++;
    pthread_mutex_unlock(&fake_lock);
    atomic_fetch_add(&fake_tl_counts.mem_allocs, 1);
    *ptr_p = b->mem;
    return ST_OK;
}

static st_status_t fake_mem_free(void *ptr)
{
    fake_buf_t *b = NULL;

    pthread_mutex_lock(&fake_lock);
    for (fake_buf_t **pp = &fake_bufs; *pp != NULL; pp = &(*pp)->next) {
        if ((*pp)->mem == ptr) {
            b   = *pp;
            *pp = b->next;
            fake_live--;
            break;
        }
    }
    pthread_mutex_unlock(&fake_lock);
    if (b == NULL) {
        return ST_ERR_INVALID;
    }
    free(b->mem);
    free(b);
    return ST_OK;
}

static int fake_mem_pack(const void *ptr, size_t len, st_win_memh_t *memh_p, size_t *offset_p)
{
    uintptr_t p = (uintptr_t)ptr;
    int       found = 0;

    pthread_mutex_lock(&fake_lock);
    for (fake_buf_t *b = fake_bufs; b != NULL; b = b->next) {
        uintptr_t base = (uintptr_t)b->mem;

        if (p >= base && p - base < b->size && len <= b->size - (p - base)) {
            if (memh_p != NULL) {
                fake_memh_t h = {b->id};

                memset(memh_p, 0, sizeof(*memh_p));
                memcpy(memh_p->bytes, &h, sizeof(h));
            }
            if (offset_p != NULL) {
                *offset_p = p - base;
            }
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&fake_lock);
    return found;
}

static void *fake_mem_map(const st_win_memh_t *memh)
{
    fake_memh_t h;
    void       *ptr = NULL;

    memcpy(&h, memh->bytes, sizeof(h));
    pthread_mutex_lock(&fake_lock);
    for (fake_buf_t *b = fake_bufs; b != NULL; b = b->next) {
        if (b->id == h.id) {
            ptr = b->mem;
            break;
        }
    }
    pthread_mutex_unlock(&fake_lock);
    if (ptr != NULL) {
        atomic_fetch_add(&fake_tl_counts.mem_maps, 1);
    }
    return ptr;
}

static void fake_mem_unmap_all(void)
{
    /* nothing is mapped: the buffers are this process's own */
}

const st_win_ops_t fake_win = {
    .name          = "fake",
    .mem_type      = ST_MEM_HOST,
    .create        = fake_win_create,
    .attach        = fake_win_attach,
    .unlink        = fake_win_unlink,
    .base          = fake_win_base,
    .wait          = fake_win_wait,
    .wake          = fake_win_wake,
    .destroy       = fake_win_destroy,
    .mem_alloc     = fake_mem_alloc,
    .mem_free      = fake_mem_free,
    .mem_pack      = fake_mem_pack,
    .mem_map       = fake_mem_map,
    .mem_unmap_all = fake_mem_unmap_all,
};

int fake_tl_live(void)
{
    int n;

    pthread_mutex_lock(&fake_lock);
    n = fake_live;
    pthread_mutex_unlock(&fake_lock);
    return n;
}
