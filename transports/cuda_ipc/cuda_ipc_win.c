/*
 * cuda_ipc_win.c - the window transport in device memory (ST_MEM_CUDA), over the device table
 * (device/dev.h: CUDA's driver API, or the simulated device in CI).
 *
 * Every local rank allocates its window as shareable device memory (mem_alloc_shared: cuMem with
 * a POSIX file descriptor handle), exports it once, and serves it on the abstract socket
 * "strata-cipc-<name>-<local rank>" from a thread of its own: each connection is answered with
 * {pid, the window's address, its allocated and asked sizes} and the fd (SCM_RIGHTS). A peer's
 * attach connects to every other local rank (retrying until it listens, up to the wire-up
 * deadline), checks the size and imports the fd (mem_import), except when the answer comes from
 * its own process (the thread-ranks of strataCommInitAll; the answer's pid and random process key
 * say so, as a pid alone cannot across pid namespaces): CUDA refuses to import an allocation into
 * the process that made it, and the pointer itself is valid there. Several processes on one
 * GPU import each other's memory like any others (the device's peer access to itself is never
 * asked: CUDA says no to it).
 *
 * unlink stops the server and closes its socket and the exported fd, so nothing of the window is
 * reachable any more; the abstract name vanishes with its socket, and with the process if it is
 * killed first. destroy unimports the peers' windows and frees the own one, whatever step failed.
 *
 * The window holds no control words the host may load or sleep on (device memory; intra.c keeps
 * its counters and doorbell in the host window): wait and wake do nothing.
 */
#include "config.h"
#include "transports/cuda_ipc/cuda_ipc.h"

#include <errno.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys.h"

typedef struct st_cipc_peer {
    void  *base;     /* as mapped here; NULL until attached */
    size_t bytes;    /* what mem_import mapped (0: the owner's own pointer, nothing to unmap) */
} st_cipc_peer_t;

struct st_win_ctx {
    const st_dev_ops_t *dev;
    int                 local_rank;
    int                 local_size;
    size_t              size;        /* bytes asked for (cfg->size) */
    size_t              alloc_bytes; /* bytes allocated: the device's granularity */
    void               *own;         /* the own window */
    int                 export_fd;   /* the own window's fd, -1 once unlinked */
    st_cipc_server_t   *server;      /* NULL once unlinked */
    int                 attached;
    st_cipc_peer_t     *peers;       /* [local_size]; own entry: own, bytes 0 */
    char                name[sizeof(((st_win_config_t *)0)->name)];
};

/* "strata-cipc-<name>-<lr>"; a name too long for an abstract address (107 bytes) is replaced by
 * its hash ("strata-cipc-h<hash>-<lr>": as unique in practice, and the same on every rank). */
static void st_cipc_win_sock_name(const char *name, int lr, char *buf)
{
    int len = snprintf(buf, ST_CIPC_SOCK_NAME_LEN + 1, "strata-cipc-%s-%d", name, lr);

    if (len < 0 || len > ST_CIPC_SOCK_NAME_LEN) {
        snprintf(buf, ST_CIPC_SOCK_NAME_LEN + 1, "strata-cipc-h%016" PRIx64 "-%d",
                 st_hash(ST_HASH_SEED, name, strlen(name)), lr);
    }
}

static st_status_t st_cipc_check_config(const st_win_config_t *cfg)
{
    size_t len = strnlen(cfg->name, sizeof(cfg->name));

    if (len == 0 || len == sizeof(cfg->name)) {
        st_error(ST_SUB_IPC, "window name %s", len == 0 ? "is empty" : "is not NUL-terminated");
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < len; i++) {
        char c = cfg->name[i];

        if (!((c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') ||
              c == '_' || c == '-')) {
            st_error(ST_SUB_IPC, "window name '%s': character %zu ('%c') is not one of "
                     "[A-Za-z0-9_-]", cfg->name, i, (c >= ' ' && c <= '~') ? c : '?');
            return ST_ERR_INVALID;
        }
    }
    if (cfg->size == 0 || cfg->size > (size_t)PTRDIFF_MAX) {
        st_error(ST_SUB_IPC, "window %s: size %zu bytes is invalid", cfg->name, cfg->size);
        return ST_ERR_INVALID;
    }
    if (cfg->local_size < 1 || cfg->local_rank < 0 || cfg->local_rank >= cfg->local_size) {
        st_error(ST_SUB_IPC, "window %s: local rank %d of %d is invalid", cfg->name,
                 cfg->local_rank, cfg->local_size);
        return ST_ERR_INVALID;
    }
    return ST_OK;
}

/* The server's answer to one peer: the window and its fd. */
static void st_cipc_win_serve(void *arg, int sock)
{
    st_win_ctx_t   *ctx = arg;
    st_cipc_reply_t r;
    char            sname[ST_CIPC_SOCK_NAME_LEN + 1];

    memset(&r, 0, sizeof(r));
    r.magic  = ST_CIPC_MAGIC_WIN;
    r.status = 0;
    r.pid    = (uint32_t)getpid();
    r.key    = st_cipc_self_key();
    r.addr   = (uint64_t)(uintptr_t)ctx->own;
    r.bytes  = ctx->alloc_bytes;
    r.size   = ctx->size;
    st_cipc_win_sock_name(ctx->name, ctx->local_rank, sname);
    /* a peer that hung up already is its own failure to report */
    (void)st_cipc_send_fd(sock, &r, sizeof(r), ctx->export_fd, sname);
}

/* Stops serving the own window: the socket (and with it the name) and the exported fd go. */
static void st_cipc_win_stop(st_win_ctx_t *ctx)
{
    st_cipc_server_stop(ctx->server);
    ctx->server = NULL;
    if (ctx->export_fd >= 0) {
        close(ctx->export_fd);
        ctx->export_fd = -1;
    }
}

static st_status_t st_cipc_win_create(const st_win_config_t *cfg, st_win_ctx_t **ctx_p)
{
    char                sname[ST_CIPC_SOCK_NAME_LEN + 1];
    const st_dev_ops_t *dev;
    st_win_ctx_t       *ctx;
    st_status_t         status;
    int                 listen_fd;

    ST_CHECK(st_cipc_check_config(cfg));
    st_cipc_win_sock_name(cfg->name, cfg->local_rank, sname);
    {
        char what[ST_CIPC_SOCK_NAME_LEN + 16];

        snprintf(what, sizeof(what), "window @%s", sname);
        dev = st_cipc_dev(what);
    }
    if (dev == NULL) {
        return ST_ERR_NO_DEVICE;
    }
    ctx = calloc(1, sizeof(*ctx));
    if (ctx == NULL) {
        st_error(ST_SUB_IPC, "window @%s: out of memory for its context", sname);
        return ST_ERR_NO_MEMORY;
    }
    ctx->peers = calloc((size_t)cfg->local_size, sizeof(*ctx->peers));
    if (ctx->peers == NULL) {
        st_error(ST_SUB_IPC, "window @%s: out of memory for %d peers", sname, cfg->local_size);
        status = ST_ERR_NO_MEMORY;
        goto err_free_ctx;
    }
    ctx->dev        = dev;
    ctx->local_rank = cfg->local_rank;
    ctx->local_size = cfg->local_size;
    ctx->size       = cfg->size;
    ctx->export_fd  = -1;
    memcpy(ctx->name, cfg->name, sizeof(ctx->name));

    /* zero-filled by the device (its contract), like a fresh shm segment */
    status = dev->mem_alloc_shared(cfg->size, &ctx->own, &ctx->alloc_bytes);
    if (status != ST_OK) {
        st_error(ST_SUB_IPC, "window @%s: %zu bytes of shareable device memory on device %d: %s",
                 sname, cfg->size, dev->current(), st_status_str(status));
        goto err_free_peers;
    }
    if (ctx->alloc_bytes < cfg->size) {
        ctx->alloc_bytes = cfg->size; /* a device that does not report its rounding */
    }
    status = dev->mem_export(ctx->own, &ctx->export_fd);
    if (status != ST_OK) {
        st_error(ST_SUB_IPC, "window @%s: exporting its device memory: %s", sname,
                 st_status_str(status));
        goto err_free_mem;
    }
    /* backlog: every peer may knock at once */
    ST_CHECK_GOTO(st_cipc_listen(sname, ST_MAX(cfg->local_size, 16), &listen_fd), status,
                  err_close_export);
    ST_CHECK_GOTO(st_cipc_server_start(listen_fd, sname, st_cipc_win_serve, ctx, &ctx->server),
                  status, err_close_export);
    ctx->peers[cfg->local_rank].base = ctx->own;
    st_debug(ST_SUB_IPC, "window @%s created: %zu bytes (%zu allocated) at %p on device %d",
             sname, cfg->size, ctx->alloc_bytes, ctx->own, dev->current());
    *ctx_p = ctx;
    return ST_OK;

err_close_export:
    close(ctx->export_fd);
err_free_mem:
    dev->mem_free_shared(ctx->own);
err_free_peers:
    free(ctx->peers);
err_free_ctx:
    free(ctx);
    return status;
}

/* Unmaps what attach mapped of the peers (not the own window). */
static void st_cipc_win_unmap_peers(st_win_ctx_t *ctx)
{
    for (int lr = 0; lr < ctx->local_size; lr++) {
        st_cipc_peer_t *p = &ctx->peers[lr];

        if (lr == ctx->local_rank) {
            continue;
        }
        if (p->base != NULL && p->bytes != 0) {
            ctx->dev->mem_unimport(p->base, p->bytes);
        }
        p->base  = NULL;
        p->bytes = 0;
    }
}

/* Fetches and maps local rank lr's window before the deadline. */
static st_status_t st_cipc_win_map_peer(st_win_ctx_t *ctx, int lr, double timeout,
                                        double deadline)
{
    char            sname[ST_CIPC_SOCK_NAME_LEN + 1];
    st_cipc_reply_t r;
    st_cipc_peer_t *p = &ctx->peers[lr];
    st_status_t     status;
    int             sock, fd = -1;

    st_cipc_win_sock_name(ctx->name, lr, sname);
    status = st_cipc_connect(sname, deadline, &sock);
    if (status == ST_ERR_TIMEOUT) {
        st_error(ST_SUB_IPC, "window of local rank %d (socket @%s): nobody listened there "
                 "within the wire-up deadline (%.1f s, STRATA_CONNECT_TIMEOUT; last attempt: %s): "
                 "the peer did not create its window, died, or unlinked it early", lr, sname,
                 timeout, strerror(errno));
        return ST_ERR_TIMEOUT;
    }
    if (status != ST_OK) {
        st_log_append_error(" (window of local rank %d)", lr);
        return status;
    }
    status = st_cipc_recv_fd(sock, &r, sizeof(r), deadline, sname, &fd);
    close(sock);
    if (status == ST_ERR_TIMEOUT || status == ST_ERR_REMOTE) {
        st_error(ST_SUB_IPC, "window of local rank %d (socket @%s): %s", lr, sname,
                 status == ST_ERR_TIMEOUT ? "no answer before the deadline"
                                          : "the peer hung up before answering");
        return status;
    }
    if (status != ST_OK) {
        st_log_append_error(" (window of local rank %d)", lr);
        return status;
    }
    if (r.magic != ST_CIPC_MAGIC_WIN || r.status != 0 || fd < 0) {
        st_error(ST_SUB_IPC, "window of local rank %d (socket @%s): not a window's answer "
                 "(magic 0x%08" PRIx32 ", status %" PRId32 ", %s fd)", lr, sname, r.magic,
                 r.status, fd < 0 ? "no" : "an");
        status = ST_ERR_IO;
        goto out;
    }
    if (r.size != (uint64_t)ctx->size || r.bytes < r.size) {
        st_error(ST_SUB_IPC, "window of local rank %d (socket @%s) has %" PRIu64 " bytes (%"
                 PRIu64 " allocated), expected %zu (ranks disagree on the window size)", lr,
                 sname, r.size, r.bytes, ctx->size);
        status = ST_ERR_IO;
        goto out;
    }
    if (st_cipc_is_self(r.pid, r.key)) {
        /* a thread-rank of this process: its pointer is valid here (and importing fails) */
        p->base  = (void *)(uintptr_t)r.addr;
        p->bytes = 0;
        status   = ST_OK;
        goto out;
    }
    status = ctx->dev->mem_import(fd, (size_t)r.bytes, &p->base);
    if (status != ST_OK) {
        st_log_append_error(" (window of local rank %d, process %" PRIu32 ", socket @%s)", lr,
                            r.pid, sname);
        p->base = NULL;
        goto out;
    }
    p->bytes = (size_t)r.bytes;
    st_debug(ST_SUB_IPC, "window of local rank %d (process %" PRIu32 ") mapped at %p", lr, r.pid,
             p->base);
out:
    if (fd >= 0) {
        close(fd);
    }
    return status;
}

static st_status_t st_cipc_win_attach(st_win_ctx_t *ctx)
{
    double      timeout  = st_cipc_timeout();
    double      deadline = st_time_now() + timeout;
    st_status_t status;

    if (ctx->attached) {
        return ST_OK;
    }
    /* from the next rank on, so that the node's ranks do not all knock at local rank 0 first */
    for (int k = 1; k < ctx->local_size; k++) {
        int lr = (ctx->local_rank + k) % ctx->local_size;

        ST_CHECK_GOTO(st_cipc_win_map_peer(ctx, lr, timeout, deadline), status, err_unmap);
    }
    ctx->attached = 1;
    st_debug(ST_SUB_IPC, "window %s: local rank %d mapped %d peers", ctx->name, ctx->local_rank,
             ctx->local_size - 1);
    return ST_OK;

err_unmap:
    /* leave the context as create left it: a later destroy (or attach) still works */
    st_cipc_win_unmap_peers(ctx);
    return status;
}

static void st_cipc_win_unlink(st_win_ctx_t *ctx)
{
    st_cipc_win_stop(ctx);
}

static void *st_cipc_win_base(st_win_ctx_t *ctx, int lr)
{
    if (!ctx->attached || lr < 0 || lr >= ctx->local_size) {
        return NULL;
    }
    return ctx->peers[lr].base;
}

/* Device memory holds no word the host may sleep on (transport.h): never called by intra. */
static void st_cipc_win_wait(st_win_ctx_t *ctx ST_UNUSED, uint32_t *word ST_UNUSED,
                             uint32_t val ST_UNUSED, long timeout_us ST_UNUSED)
{
}

static void st_cipc_win_wake(st_win_ctx_t *ctx ST_UNUSED, uint32_t *word ST_UNUSED)
{
}

static void st_cipc_win_destroy(st_win_ctx_t *ctx)
{
    if (ctx == NULL) {
        return;
    }
    /* first stop serving: no peer may fetch a window being freed */
    st_cipc_win_stop(ctx);
    st_cipc_win_unmap_peers(ctx);
    if (ctx->dev->mem_free_shared(ctx->own) != ST_OK) {
        st_warn(ST_SUB_IPC, "window %s of local rank %d: freeing its device memory failed",
                ctx->name, ctx->local_rank);
    }
    free(ctx->peers);
    free(ctx);
}

const st_win_ops_t st_cuda_ipc_win = {
    .name          = "cuda_ipc",
    .mem_type      = ST_MEM_CUDA,
    .create        = st_cipc_win_create,
    .attach        = st_cipc_win_attach,
    .unlink        = st_cipc_win_unlink,
    .base          = st_cipc_win_base,
    .wait          = st_cipc_win_wait,
    .wake          = st_cipc_win_wake,
    .destroy       = st_cipc_win_destroy,
    .mem_alloc     = st_cipc_mem_alloc,
    .mem_free      = st_cipc_mem_free,
    .mem_pack      = st_cipc_mem_pack,
    .mem_map       = st_cipc_mem_map,
    .mem_unmap_all = st_cipc_mem_unmap_all,
    .peer_read     = st_cipc_peer_read,
    .peer_write    = st_cipc_peer_write,
};
