/*
 * shm_win.c - the window transport over POSIX shared memory (host buffers).
 *
 * Every local rank creates one segment, "/strata-<name>-<local rank>", sized and zero-filled by its
 * owner, and maps every peer's segment after a barrier; the owner unlinks its name once all have
 * attached, so a killed job leaves nothing in /dev/shm. The names carry the communicator's random
 * secret, so an existing segment of the same name is never a stale one to reuse: it is an error.
 *
 * The segment is backed by posix_fallocate before anyone touches it: on a full /dev/shm, tmpfs
 * would otherwise hand out a sparse file and the first store to a missing page would raise SIGBUS
 * in whichever rank got there first. The pages are allocated by the creating rank, which places
 * them on its NUMA node (first touch); with cfg->numa >= 0 the range is also bound to that node
 * with hwloc before the allocation, best effort.
 *
 * wait/wake are futexes on 32-bit words inside the windows: shared futexes (no FUTEX_PRIVATE_FLAG)
 * since the word lives in MAP_SHARED memory of several processes.
 */
#include "config.h"
#include "transports/shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdint.h>
#include <linux/futex.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

#include <hwloc.h>

/* "/strata-" + name (95) + "-" + local rank (10) + NUL */
#define ST_SHM_SEG_NAME_LEN 128

struct st_win_ctx {
    int     local_rank;
    int     local_size;
    size_t  size;
    int     linked;   /* the own segment's name still exists */
    int     attached; /* every peer is mapped */
    void  **bases;    /* [local_size]: the windows as mapped here; own one from create */
    char    name[sizeof(((st_win_config_t *)0)->name)];
};

/* ---- NUMA placement ------------------------------------------------------------------------- */

/* Only NUMA nodes are needed: no I/O discovery and no GPU components (those initialise drivers).
 * Loaded once per process, never freed (windows come and go with communicators). */
static const char *const st_shm_skip_components[] = {
    "opencl", "gl", "nvml", "cuda", "rsmi", "levelzero"
};
static pthread_once_t   st_shm_topo_once = PTHREAD_ONCE_INIT;
static hwloc_topology_t st_shm_topo;

static void st_shm_topo_load(void)
{
    hwloc_topology_t topo;

    if (hwloc_topology_init(&topo) != 0) {
        st_info(ST_SUB_SHM, "no NUMA binding of windows: hwloc_topology_init: %m");
        return;
    }
    (void)hwloc_topology_set_io_types_filter(topo, HWLOC_TYPE_FILTER_KEEP_NONE);
    for (size_t i = 0; i < ST_ARRAY_SIZE(st_shm_skip_components); i++) {
        /* fails only for a component this hwloc does not have */
        (void)hwloc_topology_set_components(topo, HWLOC_TOPOLOGY_COMPONENTS_FLAG_BLACKLIST,
                                            st_shm_skip_components[i]);
    }
    if (hwloc_topology_load(topo) != 0) {
        st_info(ST_SUB_SHM, "no NUMA binding of windows: hwloc_topology_load: %m");
        hwloc_topology_destroy(topo);
        return;
    }
    st_shm_topo = topo;
}

/* Binds [addr, addr+len) to logical NUMA node numa before its pages exist. Best effort: the window
 * works anywhere, only slower, so every failure is an INFO line. */
static void st_shm_bind(void *addr, size_t len, int numa, const char *seg)
{
    const struct hwloc_topology_support *support;
    hwloc_obj_t                          node;

    pthread_once(&st_shm_topo_once, st_shm_topo_load);
    if (st_shm_topo == NULL) {
        return;
    }
    support = hwloc_topology_get_support(st_shm_topo);
    if (!support->membind->set_area_membind || !support->membind->bind_membind) {
        st_info(ST_SUB_SHM, "segment %s: memory binding unsupported here; left to first touch",
                seg);
        return;
    }
    node = hwloc_get_obj_by_type(st_shm_topo, HWLOC_OBJ_NUMANODE, (unsigned)numa);
    if (node == NULL) {
        st_info(ST_SUB_SHM, "segment %s: no NUMA node %d on this machine (%d nodes); left to "
                "first touch", seg, numa, hwloc_get_nbobjs_by_type(st_shm_topo,
                                                                   HWLOC_OBJ_NUMANODE));
        return;
    }
    if (hwloc_set_area_membind(st_shm_topo, addr, len, node->nodeset, HWLOC_MEMBIND_BIND,
                               HWLOC_MEMBIND_BYNODESET) != 0) {
        st_info(ST_SUB_SHM, "segment %s: binding %zu bytes to NUMA node %d failed: %m; left to "
                "first touch", seg, len, numa);
        return;
    }
    st_debug(ST_SUB_SHM, "segment %s bound to NUMA node %d", seg, numa);
}

/* ---- segments ------------------------------------------------------------------------------- */

static void st_shm_seg_name(const char *name, int lr, char *buf)
{
    snprintf(buf, ST_SHM_SEG_NAME_LEN, "/strata-%s-%d", name, lr);
}

static st_status_t st_shm_check_config(const st_win_config_t *cfg)
{
    size_t len = strnlen(cfg->name, sizeof(cfg->name));

    if (len == 0 || len == sizeof(cfg->name)) {
        st_error(ST_SUB_SHM, "window name %s", len == 0 ? "is empty" : "is not NUL-terminated");
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < len; i++) {
        char c = cfg->name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-')) {
            st_error(ST_SUB_SHM, "window name '%s': character %zu ('%c') is not one of "
                     "[A-Za-z0-9_-]", cfg->name, i, (c >= ' ' && c <= '~') ? c : '?');
            return ST_ERR_INVALID;
        }
    }
    if (cfg->size == 0 || cfg->size > (size_t)PTRDIFF_MAX) {
        st_error(ST_SUB_SHM, "window %s: size %zu bytes is invalid", cfg->name, cfg->size);
        return ST_ERR_INVALID;
    }
    if (cfg->local_size < 1 || cfg->local_rank < 0 || cfg->local_rank >= cfg->local_size) {
        st_error(ST_SUB_SHM, "window %s: local rank %d of %d is invalid", cfg->name,
                 cfg->local_rank, cfg->local_size);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

static st_status_t st_shm_win_create(const st_win_config_t *cfg, st_win_ctx_t **ctx_p)
{
    char          seg[ST_SHM_SEG_NAME_LEN];
    st_win_ctx_t *ctx;
    st_status_t   status;
    void         *addr;
    int           fd, ret;

    ST_CHECK(st_shm_check_config(cfg));
    st_shm_seg_name(cfg->name, cfg->local_rank, seg);

    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        st_error(ST_SUB_SHM, "segment %s: out of memory for the window context", seg);
        return ST_ERR_NO_MEMORY;
    }
    ctx->bases = calloc((size_t)cfg->local_size, sizeof(*ctx->bases));
    if (ctx->bases == NULL) {
        st_error(ST_SUB_SHM, "segment %s: out of memory for %d window pointers", seg,
                 cfg->local_size);
        status = ST_ERR_NO_MEMORY;
        goto err_free_ctx;
    }
    ctx->local_rank = cfg->local_rank;
    ctx->local_size = cfg->local_size;
    ctx->size       = cfg->size;
    memcpy(ctx->name, cfg->name, sizeof(ctx->name));

    fd = shm_open(seg, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        if (errno == EEXIST) {
            st_error(ST_SUB_SHM, "segment %s exists already: two communicators share a window "
                     "name (names carry a random secret, so it cannot be left from an old run)",
                     seg);
        } else {
            st_error(ST_SUB_SHM, "segment %s: shm_open: %m", seg);
        }
        status = ST_ERR_IO;
        goto err_free_bases;
    }
    ctx->linked = 1;
    if (ftruncate(fd, (off_t)cfg->size) != 0) {
        status = (errno == ENOSPC || errno == ENOMEM || errno == EFBIG) ? ST_ERR_NO_MEMORY
                                                                       : ST_ERR_IO;
        st_error(ST_SUB_SHM, "segment %s: ftruncate to %zu bytes: %m", seg, cfg->size);
        goto err_close;
    }
    addr = mmap(NULL, cfg->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        status = (errno == ENOMEM) ? ST_ERR_NO_MEMORY : ST_ERR_IO;
        st_error(ST_SUB_SHM, "segment %s: mmap of %zu bytes: %m", seg, cfg->size);
        goto err_close;
    }
    /* Bind before the pages exist: tmpfs applies the mapping's policy when fallocate allocates. */
    if (cfg->numa >= 0) {
        st_shm_bind(addr, cfg->size, cfg->numa, seg);
    }
    ret = posix_fallocate(fd, 0, (off_t)cfg->size);
    if (ret != 0) {
        if (ret == ENOSPC || ret == ENOMEM) {
            st_error(ST_SUB_SHM, "segment %s: cannot back %zu bytes (%s): /dev/shm is full or "
                     "too small; free space there or enlarge it (docker: --shm-size)", seg,
                     cfg->size, strerror(ret));
            status = ST_ERR_NO_MEMORY;
        } else {
            st_error(ST_SUB_SHM, "segment %s: posix_fallocate of %zu bytes: %s", seg, cfg->size,
                     strerror(ret));
            status = ST_ERR_IO;
        }
        goto err_unmap;
    }
    close(fd);
    /* Zero-filled already; touching it here maps every page into this process now, on the
     * caller's thread, instead of in the middle of the first collective. */
    memset(addr, 0, cfg->size);
    ctx->bases[cfg->local_rank] = addr;
    st_debug(ST_SUB_SHM, "segment %s created: %zu bytes at %p", seg, cfg->size, addr);
    *ctx_p = ctx;
    return ST_OK;

err_unmap:
    munmap(addr, cfg->size);
err_close:
    close(fd);
    shm_unlink(seg);
err_free_bases:
    free(ctx->bases);
err_free_ctx:
    free(ctx);
    return status;
}

/* Maps local rank lr's segment into *addr_p after checking its size. */
static st_status_t st_shm_win_map_peer(st_win_ctx_t *ctx, int lr, void **addr_p)
{
    char        seg[ST_SHM_SEG_NAME_LEN];
    struct stat st;
    void       *addr;
    int         fd;

    st_shm_seg_name(ctx->name, lr, seg);
    fd = shm_open(seg, O_RDWR, 0);
    if (fd < 0) {
        st_error(ST_SUB_SHM, "window of local rank %d (segment %s): shm_open: %m%s", lr, seg,
                 (errno == ENOENT) ? " (the peer did not create it, or unlinked it early)" : "");
        return ST_ERR_IO;
    }
    if (fstat(fd, &st) != 0) {
        st_error(ST_SUB_SHM, "window of local rank %d (segment %s): fstat: %m", lr, seg);
        close(fd);
        return ST_ERR_IO;
    }
    if ((uint64_t)st.st_size != (uint64_t)ctx->size) {
        st_error(ST_SUB_SHM, "window of local rank %d (segment %s) has %lld bytes, expected %zu "
                 "(ranks disagree on the window size)", lr, seg, (long long)st.st_size,
                 ctx->size);
        close(fd);
        return ST_ERR_IO;
    }
    addr = mmap(NULL, ctx->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (addr == MAP_FAILED) {
        st_error(ST_SUB_SHM, "window of local rank %d (segment %s): mmap of %zu bytes: %m", lr,
                 seg, ctx->size);
        close(fd);
        return ST_ERR_IO;
    }
    close(fd);
    *addr_p = addr;
    return ST_OK;
}

static st_status_t st_shm_win_attach(st_win_ctx_t *ctx)
{
    st_status_t status;
    int         lr;

    if (ctx->attached) {
        return ST_OK;
    }
    for (lr = 0; lr < ctx->local_size; lr++) {
        if (lr != ctx->local_rank) {
            ST_CHECK_GOTO(st_shm_win_map_peer(ctx, lr, &ctx->bases[lr]), status, err_unmap);
        }
    }
    ctx->attached = 1;
    st_debug(ST_SUB_SHM, "window %s: local rank %d mapped %d peers", ctx->name, ctx->local_rank,
             ctx->local_size - 1);
    return ST_OK;

err_unmap:
    /* leave the context as create left it: a later destroy (or attach) still works */
    while (--lr >= 0) {
        if (lr != ctx->local_rank) {
            munmap(ctx->bases[lr], ctx->size);
            ctx->bases[lr] = NULL;
        }
    }
    return status;
}

static void st_shm_win_unlink(st_win_ctx_t *ctx)
{
    char seg[ST_SHM_SEG_NAME_LEN];

    if (!ctx->linked) {
        return;
    }
    ctx->linked = 0;
    st_shm_seg_name(ctx->name, ctx->local_rank, seg);
    if (shm_unlink(seg) != 0 && errno != ENOENT) {
        st_warn(ST_SUB_SHM, "segment %s: shm_unlink: %m", seg);
    }
}

static void *st_shm_win_base(st_win_ctx_t *ctx, int lr)
{
    if (!ctx->attached || lr < 0 || lr >= ctx->local_size) {
        return NULL;
    }
    return ctx->bases[lr];
}

static void st_shm_win_wait(st_win_ctx_t *ctx ST_UNUSED, uint32_t *word, uint32_t val,
                            long timeout_us)
{
    struct timespec ts;

    if (timeout_us <= 0) {
        return;
    }
    ts.tv_sec  = timeout_us / 1000000;
    ts.tv_nsec = (timeout_us % 1000000) * 1000;
    /* EAGAIN (the word changed already), EINTR and ETIMEDOUT all mean: look at the word again */
    (void)syscall(SYS_futex, word, FUTEX_WAIT, val, &ts, NULL, 0);
}

static void st_shm_win_wake(st_win_ctx_t *ctx ST_UNUSED, uint32_t *word)
{
    (void)syscall(SYS_futex, word, FUTEX_WAKE, INT_MAX, NULL, NULL, 0);
}

static void st_shm_win_destroy(st_win_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    for (int lr = 0; lr < ctx->local_size; lr++) {
        if (ctx->bases[lr] != NULL) {
            munmap(ctx->bases[lr], ctx->size);
        }
    }
    if (ctx->linked) {
        /* destroyed before unlink: the communicator's init failed on every rank (its steps are
         * agreed), so the node peers' segments are doomed too, and one killed during init can
         * never remove its own: remove every name of the set (ENOENT when already gone) */
        char seg[ST_SHM_SEG_NAME_LEN];

        for (int lr = 0; lr < ctx->local_size; lr++) {
            if (lr != ctx->local_rank) {
                st_shm_seg_name(ctx->name, lr, seg);
                shm_unlink(seg);
            }
        }
    }
    st_shm_win_unlink(ctx);
    free(ctx->bases);
    free(ctx);
}

const st_win_ops_t st_shm_win = {
    .name          = "shm",
    .mem_type      = ST_MEM_HOST,
    .create        = st_shm_win_create,
    .attach        = st_shm_win_attach,
    .unlink        = st_shm_win_unlink,
    .base          = st_shm_win_base,
    .wait          = st_shm_win_wait,
    .wake          = st_shm_win_wake,
    .destroy       = st_shm_win_destroy,
    .mem_alloc     = st_shm_mem_alloc,
    .mem_free      = st_shm_mem_free,
    .mem_pack      = st_shm_mem_pack,
    .mem_map       = st_shm_mem_map,
    .mem_unmap_all = st_shm_mem_unmap_all,
    .peer_read     = st_shm_peer_read,
    .peer_write    = st_shm_peer_write,
};
