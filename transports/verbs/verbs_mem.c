/*
 * verbs_mem.c - memory of the verbs transport.
 *
 * Every net caller of strata passes no registration (memh = NULL), so the transport decides:
 *   - strataMemAlloc memory (base/memreg.h knows it) is registered whole with the context's PD at
 *     its first transfer and used in place (zero-copy both ways); it is deregistered when
 *     strataMemFree runs (memreg's listener) or when the context closes;
 *   - any other buffer goes through bounce buffers: registered once, bounce_size bytes each,
 *     allocated in slabs of ST_VB_SLAB as needed up to bounce_max per context. A receive's parts
 *     each take one (pipelined: up to ST_VB_WINDOW parts in flight), a send copies each piece in.
 * Arbitrary user memory is never registered: without memory hooks a cached registration of it
 * could outlive the mapping it pinned (UCX's rcache needs its memory hooks for exactly this).
 * A registration that fails names the memlock limit, the most common field failure
 * (NVIDIA/nccl-tests#206, openucx/ucx#8229).
 */
#include "config.h"
#include "transports/verbs/verbs.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "base/memreg.h"

#define ST_VB_SLAB 8 /* bounce buffers per registration */

struct ibv_mr *st_vb_mr_reg(st_net_ctx_t *ctx, void *addr, size_t len, const char *what)
{
    struct ibv_mr *mr = ctx->ibv->reg_mr(ctx->pd, addr, len,
                                         IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE);

    if (mr == NULL) {
        int           err = errno;
        struct rlimit rl;
        char          lim[64] = "unknown";

        if (getrlimit(RLIMIT_MEMLOCK, &rl) == 0) {
            if (rl.rlim_cur == RLIM_INFINITY) {
                snprintf(lim, sizeof(lim), "unlimited");
            } else {
                snprintf(lim, sizeof(lim), "%llu KiB", (unsigned long long)rl.rlim_cur / 1024);
            }
        }
        if (err == ENOMEM || err == EPERM || err == EAGAIN) {
            st_error(ST_SUB_VERBS, "%s rank %d: ibv_reg_mr of %zu B (%s) on %s failed: %s; the "
                     "memlock limit is %s (`ulimit -l`): raise it (`ulimit -l unlimited`, "
                     "memlock in /etc/security/limits.conf, LimitMEMLOCK= for systemd services, "
                     "--ulimit memlock=-1 for docker) or lower STRATA_IB_BOUNCE_MAX", ctx->name,
                     ctx->rank, len, what, ctx->hca, strerror(err), lim);
        } else {
            st_error(ST_SUB_VERBS, "%s rank %d: ibv_reg_mr of %zu B (%s) on %s failed: %s",
                     ctx->name, ctx->rank, len, what, ctx->hca, strerror(err));
        }
        errno = err;
    }
    return mr;
}

static int st_vb_slab_add(st_net_ctx_t *ctx)
{
    size_t          bsize = st_verbs_config.bounce_size;
    size_t          len = bsize * ST_VB_SLAB;
    void           *mem, **slab_mem;
    struct ibv_mr  *mr, **slabs;
    st_vb_buf_t    *bufs;

    if (ctx->nbufs + ST_VB_SLAB > ctx->maxbufs) {
        return -1;
    }
    bufs     = realloc(ctx->bufs, (size_t)(ctx->nbufs + ST_VB_SLAB) * sizeof(*bufs));
    if (bufs == NULL) {
        return -1;
    }
    ctx->bufs = bufs;
    slabs    = realloc(ctx->slabs, (size_t)(ctx->nslabs + 1) * sizeof(*slabs));
    if (slabs == NULL) {
        return -1;
    }
    ctx->slabs = slabs;
    slab_mem = realloc(ctx->slab_mem, (size_t)(ctx->nslabs + 1) * sizeof(*slab_mem));
    if (slab_mem == NULL) {
        return -1;
    }
    ctx->slab_mem = slab_mem;
    mem = aligned_alloc(4096, ST_DIV_ROUND_UP(len, 4096) * 4096);
    if (mem == NULL) {
        return -1;
    }
    mr = st_vb_mr_reg(ctx, mem, len, "bounce buffers");
    if (mr == NULL) {
        free(mem);
        /* the pool stays at what it has (a memlock limit does not go away): parts wait for
         * its buffers, and with none at all the operations fail with this reason */
        snprintf(ctx->bounce_why, sizeof(ctx->bounce_why), "%.380s", st_log_last_error());
        ctx->maxbufs = ctx->nbufs;
        return -1;
    }
    ctx->slabs[ctx->nslabs]    = mr;
    ctx->slab_mem[ctx->nslabs] = mem;
    ctx->nslabs++;
    for (int i = 0; i < ST_VB_SLAB; i++) {
        st_vb_buf_t *b = &ctx->bufs[ctx->nbufs];

        b->addr = (uint8_t *)mem + (size_t)i * bsize;
        b->lkey = mr->lkey;
        b->rkey = mr->rkey;
        b->next = ctx->buf_free;
        ctx->buf_free = ctx->nbufs;
        ctx->nbufs++;
    }
    return 0;
}

int st_vb_buf_get(st_net_ctx_t *ctx)
{
    int b;

    if (ctx->buf_free < 0 && st_vb_slab_add(ctx) != 0) {
        if (ctx->nbufs == 0 && ctx->bounce_why[0] == '\0') {
            snprintf(ctx->bounce_why, sizeof(ctx->bounce_why), "%s: no memory for %zu B of "
                     "bounce buffers", ctx->hca, st_verbs_config.bounce_size * ST_VB_SLAB);
        }
        return -1;
    }
    b = ctx->buf_free;
    ctx->buf_free = ctx->bufs[b].next;
    ctx->bufs[b].next = -2; /* in use */
    return b;
}

void st_vb_buf_put(st_net_ctx_t *ctx, int b)
{
    if (b < 0 || b >= ctx->nbufs || ctx->bufs[b].next != -2) {
        return;
    }
    ctx->bufs[b].next = ctx->buf_free;
    ctx->buf_free = b;
}

void st_vb_bufs_free(st_net_ctx_t *ctx)
{
    for (int i = 0; i < ctx->nslabs; i++) {
        ctx->ibv->dereg_mr(ctx->slabs[i]);
        free(ctx->slab_mem[i]);
    }
    free(ctx->slabs);
    free(ctx->slab_mem);
    free(ctx->bufs);
    ctx->slabs    = NULL;
    ctx->slab_mem = NULL;
    ctx->bufs     = NULL;
    ctx->nslabs   = ctx->nbufs = 0;
    ctx->buf_free = -1;
}

/* memreg's listener: strataMemFree is about to free base. */
static void st_vb_reg_gone(void *arg, void *base, size_t size ST_UNUSED)
{
    st_net_ctx_t *ctx = arg;

    pthread_mutex_lock(&ctx->reg_lock);
    for (st_vb_reg_t **pp = &ctx->regs; *pp != NULL;) {
        st_vb_reg_t *r = *pp;

        if (r->base == base) {
            *pp = r->next;
            ctx->ibv->dereg_mr(r->mr);
            free(r);
        } else {
            pp = &r->next;
        }
    }
    pthread_mutex_unlock(&ctx->reg_lock);
}

void st_vb_regs_init(st_net_ctx_t *ctx)
{
    pthread_mutex_init(&ctx->reg_lock, NULL);
    if (st_memreg_listen(st_vb_reg_gone, ctx) != 0) {
        ctx->reg_disabled = 1;
        st_info(ST_SUB_VERBS, "%s rank %d: too many verbs contexts listen for strataMemFree: "
                "this one copies through bounce buffers only", ctx->name, ctx->rank);
    }
}

void st_vb_regs_free(st_net_ctx_t *ctx)
{
    if (!ctx->reg_disabled) {
        st_memreg_unlisten(st_vb_reg_gone, ctx);
    }
    for (st_vb_reg_t *r = ctx->regs, *next; r != NULL; r = next) {
        next = r->next;
        ctx->ibv->dereg_mr(r->mr);
        free(r);
    }
    ctx->regs = NULL;
    pthread_mutex_destroy(&ctx->reg_lock);
}

st_vb_reg_t *st_vb_reg_find(st_net_ctx_t *ctx, const void *buf, size_t len)
{
    uintptr_t    p = (uintptr_t)buf;
    st_vb_reg_t *r;
    void        *base;
    size_t       size;

    if (ctx->reg_disabled) {
        return NULL;
    }
    pthread_mutex_lock(&ctx->reg_lock);
    for (r = ctx->regs; r != NULL; r = r->next) {
        if (p >= (uintptr_t)r->base && len <= r->size && p - (uintptr_t)r->base <= r->size - len) {
            break;
        }
    }
    pthread_mutex_unlock(&ctx->reg_lock);
    /* memreg's lock is never taken under reg_lock: its listener takes reg_lock under it */
    if (r != NULL || !st_memreg_find(buf, len, &base, &size)) {
        return r;
    }
    r = calloc(1, sizeof(*r));
    if (r == NULL) {
        return NULL;
    }
    r->mr = st_vb_mr_reg(ctx, base, size, "strataMemAlloc memory");
    if (r->mr == NULL) {
        free(r);
        st_log_clear_error(); /* not fatal: this buffer goes through bounce buffers */
        st_warn(ST_SUB_VERBS, "%s rank %d: strataMemAlloc memory at %p goes through bounce "
                "buffers", ctx->name, ctx->rank, base);
        return NULL;
    }
    r->base = base;
    r->size = size;
    pthread_mutex_lock(&ctx->reg_lock);
    r->next   = ctx->regs;
    ctx->regs = r;
    pthread_mutex_unlock(&ctx->reg_lock);
    st_debug(ST_SUB_VERBS, "%s rank %d: registered strataMemAlloc memory %p, %zu B (lkey 0x%x)",
             ctx->name, ctx->rank, base, size, r->mr->lkey);
    return r;
}
