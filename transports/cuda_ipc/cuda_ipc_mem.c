/*
 * cuda_ipc_mem.c - shareable device memory: what a device strataMemAlloc hands out (zero-copy
 * collectives on device buffers), and its mapping by node peers.
 *
 * An allocation is the device's shareable memory (mem_alloc_shared), exported once as a file
 * descriptor that the owner keeps until it frees the allocation. While the process has any, a
 * thread of it serves them on the abstract socket "strata-cipc-mem-<pid>-<key>" (key: random per
 * process, st_cipc_self_key(), also the upper half of every allocation id, so that a handle of a
 * dead process whose pid was reused names neither its socket nor its ids): a peer sends an
 * allocation's id and gets back its size and fd (SCM_RIGHTS), or "freed". The server stops with
 * the last free, so a process that freed everything keeps no socket and no fd.
 *
 * A peer maps each allocation once (mem_map's cache, keyed by the owner's pid and the id) until
 * mem_unmap_all; a handle of its own process maps to the allocation itself (CUDA refuses to
 * import into the exporting process). Three locks, never held in the reverse order and never
 * the owner's while it waits for a peer: the server thread takes only st_cipc_mem_lock (the
 * allocations), while a mapping waits on another process holding only st_cipc_peer_lock (the
 * mappings), so two processes mapping each other's buffers at once cannot deadlock.
 */
#include "config.h"
#include "transports/cuda_ipc/cuda_ipc.h"

#include <errno.h>
#include <inttypes.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/sys.h"

/* A peer that connected has its request on the way: it may wait this long, no more (the thread
 * serves one connection at a time). */
#define ST_CIPC_REQUEST_WAIT_S 2.0

typedef struct st_cipc_rec {
    struct st_cipc_rec *next;
    void               *ptr;
    size_t              bytes; /* as allocated */
    int                 fd;    /* exported; closed by mem_free */
    uint64_t            id;
} st_cipc_rec_t;

/* A peer's allocation as mapped here; ptr NULL: it could not be mapped (logged once). */
typedef struct st_cipc_map {
    struct st_cipc_map *next;
    uint32_t            pid;
    uint64_t            id;
    void               *ptr;
    size_t              bytes;
} st_cipc_map_t;

static pthread_mutex_t   st_cipc_srv_lock  = PTHREAD_MUTEX_INITIALIZER; /* alloc/free, server */
static pthread_mutex_t   st_cipc_mem_lock  = PTHREAD_MUTEX_INITIALIZER; /* st_cipc_allocs */
static pthread_mutex_t   st_cipc_peer_lock = PTHREAD_MUTEX_INITIALIZER; /* st_cipc_maps */
static pthread_once_t    st_cipc_once      = PTHREAD_ONCE_INIT;
static st_cipc_rec_t    *st_cipc_allocs;
static st_cipc_map_t    *st_cipc_maps;
static st_cipc_server_t *st_cipc_mem_server;
static uint32_t          st_cipc_key; /* st_cipc_self_key(), once initialised */
static uint32_t          st_cipc_count;

static void st_cipc_mem_sock_name(uint32_t pid, uint32_t key, char *buf)
{
    snprintf(buf, ST_CIPC_SOCK_NAME_LEN + 1, "strata-cipc-mem-%" PRIu32 "-%08" PRIx32, pid, key);
}

/* ---- fork: the child has the parent's lists but neither its thread nor its allocations ------ */

static void st_cipc_atfork_prepare(void)
{
    pthread_mutex_lock(&st_cipc_srv_lock);
    pthread_mutex_lock(&st_cipc_mem_lock);
    pthread_mutex_lock(&st_cipc_peer_lock);
}

static void st_cipc_atfork_parent(void)
{
    pthread_mutex_unlock(&st_cipc_peer_lock);
    pthread_mutex_unlock(&st_cipc_mem_lock);
    pthread_mutex_unlock(&st_cipc_srv_lock);
}

static void st_cipc_atfork_child(void)
{
    /* the records name the parent's allocations and the mappings the parent's imports: the
     * child owns neither (and CUDA does not survive a fork), so it forgets them, closing only the
     * fds it inherited */
    while (st_cipc_allocs != NULL) {
        st_cipc_rec_t *rec = st_cipc_allocs;

        st_cipc_allocs = rec->next;
        close(rec->fd);
        free(rec);
    }
    while (st_cipc_maps != NULL) {
        st_cipc_map_t *m = st_cipc_maps;

        st_cipc_maps = m->next;
        free(m);
    }
    st_cipc_server_forget(st_cipc_mem_server);
    st_cipc_mem_server = NULL;
    st_cipc_atfork_parent();
}

static void st_cipc_init_once(void)
{
    /* the log's handlers first: we may log holding our locks, so they are taken first in prepare
     * (handlers registered later prepare first) */
    st_log_init();
    pthread_atfork(st_cipc_atfork_prepare, st_cipc_atfork_parent, st_cipc_atfork_child);
    st_cipc_key = st_cipc_self_key();
}

/* ---- the owner's side ----------------------------------------------------------------------- */

/* The memory server's answer to one request. */
static void st_cipc_mem_serve(void *arg ST_UNUSED, int sock)
{
    char              sname[ST_CIPC_SOCK_NAME_LEN + 1];
    st_cipc_request_t q;
    st_cipc_reply_t   r;
    st_cipc_rec_t    *rec;
    int               fd;

    st_cipc_mem_sock_name((uint32_t)getpid(), st_cipc_key, sname);
    if (st_cipc_recv_fd(sock, &q, sizeof(q), st_time_now() + ST_CIPC_REQUEST_WAIT_S, sname,
                        &fd) != ST_OK) {
        st_debug(ST_SUB_IPC, "socket @%s: a peer connected but sent no request", sname);
        return;
    }
    if (fd >= 0) {
        close(fd); /* a request carries none */
    }
    if (q.magic != ST_CIPC_MAGIC_MEM) {
        st_info(ST_SUB_IPC, "socket @%s: ignored a request that is not strata's (magic 0x%08"
                PRIx32 ")", sname, q.magic);
        return;
    }
    memset(&r, 0, sizeof(r));
    r.magic  = ST_CIPC_MAGIC_MEM;
    r.pid    = (uint32_t)getpid();
    r.key    = st_cipc_key;
    r.status = -1;
    /* the record stays, and its fd open, while the answer is sent: mem_free waits on the lock */
    pthread_mutex_lock(&st_cipc_mem_lock);
    for (rec = st_cipc_allocs; rec != NULL && rec->id != q.id; rec = rec->next) {
    }
    if (rec != NULL) {
        r.status = 0;
        r.addr   = (uint64_t)(uintptr_t)rec->ptr;
        r.bytes  = rec->bytes;
        r.size   = rec->bytes;
    }
    (void)st_cipc_send_fd(sock, &r, sizeof(r), rec != NULL ? rec->fd : -1, sname);
    pthread_mutex_unlock(&st_cipc_mem_lock);
}

st_status_t st_cipc_mem_alloc(size_t size, void **ptr_p)
{
    const st_dev_ops_t *dev;
    st_cipc_rec_t      *rec;
    st_status_t         status;

    if (size == 0 || ptr_p == NULL) {
        st_error(ST_SUB_IPC, "shareable device memory: %s",
                 size == 0 ? "size is 0" : "ptr_p is NULL");
        return ST_ERR_INVALID;
    }
    dev = st_cipc_dev("shareable device memory");
    if (dev == NULL) {
        return ST_ERR_NO_DEVICE;
    }
    pthread_once(&st_cipc_once, st_cipc_init_once);
    rec = calloc(1, sizeof(*rec));
    if (rec == NULL) {
        st_error(ST_SUB_IPC, "shareable device memory: out of memory for its record");
        return ST_ERR_NO_MEMORY;
    }
    rec->fd = -1;
    status  = dev->mem_alloc_shared(size, &rec->ptr, &rec->bytes);
    if (status != ST_OK) {
        st_error(ST_SUB_IPC, "shareable device memory: %zu bytes on device %d: %s", size,
                 dev->current(), st_status_str(status));
        /* the device's NO_MEMORY is the caller's; anything else it said is a refusal */
        status = (status == ST_ERR_NO_MEMORY || status == ST_ERR_INVALID ||
                  status == ST_ERR_UNSUPPORTED) ? status : ST_ERR_NO_MEMORY;
        goto err_free_rec;
    }
    rec->bytes = ST_MAX(rec->bytes, size);
    status     = dev->mem_export(rec->ptr, &rec->fd);
    if (status != ST_OK) {
        st_error(ST_SUB_IPC, "shareable device memory: exporting %zu bytes at %p: %s",
                 rec->bytes, rec->ptr, st_status_str(status));
        goto err_free_mem;
    }

    pthread_mutex_lock(&st_cipc_srv_lock);
    if (st_cipc_mem_server == NULL) {
        char sname[ST_CIPC_SOCK_NAME_LEN + 1];
        int  listen_fd;

        st_cipc_mem_sock_name((uint32_t)getpid(), st_cipc_key, sname);
        status = st_cipc_listen(sname, 64, &listen_fd);
        if (status == ST_OK) {
            status = st_cipc_server_start(listen_fd, sname, st_cipc_mem_serve, NULL,
                                          &st_cipc_mem_server);
        }
        if (status != ST_OK) {
            pthread_mutex_unlock(&st_cipc_srv_lock);
            st_log_append_error(" (shareable device memory cannot be offered to node peers)");
            goto err_close;
        }
    }
    pthread_mutex_lock(&st_cipc_mem_lock);
    rec->id        = ((uint64_t)st_cipc_key << 32) | ++st_cipc_count;
    rec->next      = st_cipc_allocs;
    st_cipc_allocs = rec;
    pthread_mutex_unlock(&st_cipc_mem_lock);
    pthread_mutex_unlock(&st_cipc_srv_lock);
    st_debug(ST_SUB_IPC, "shareable device memory: %zu bytes at %p (id %016" PRIx64 ")",
             rec->bytes, rec->ptr, rec->id);
    *ptr_p = rec->ptr;
    return ST_OK;

err_close:
    close(rec->fd);
err_free_mem:
    dev->mem_free_shared(rec->ptr);
err_free_rec:
    free(rec);
    return status;
}

st_status_t st_cipc_mem_free(void *ptr)
{
    st_cipc_rec_t **prev, *rec = NULL;
    st_status_t     status;

    pthread_once(&st_cipc_once, st_cipc_init_once);
    pthread_mutex_lock(&st_cipc_srv_lock);
    pthread_mutex_lock(&st_cipc_mem_lock);
    for (prev = &st_cipc_allocs; ptr != NULL && *prev != NULL; prev = &(*prev)->next) {
        if ((*prev)->ptr == ptr) {
            rec   = *prev;
            *prev = rec->next;
            break;
        }
    }
    pthread_mutex_unlock(&st_cipc_mem_lock);
    if (rec != NULL && st_cipc_allocs == NULL) {
        /* the last one: nothing left to serve */
        st_cipc_server_stop(st_cipc_mem_server);
        st_cipc_mem_server = NULL;
    }
    pthread_mutex_unlock(&st_cipc_srv_lock);
    if (rec == NULL) {
        st_error(ST_SUB_IPC, "strataMemFree: %p is not an allocation of shareable device memory "
                 "(or freed already); nothing freed", ptr);
        return ST_ERR_INVALID;
    }
    close(rec->fd);
    /* a record exists only where a device did: st_dev() is decided once, so it is still there */
    status = st_dev()->mem_free_shared(rec->ptr);
    if (status != ST_OK) {
        st_error(ST_SUB_IPC, "strataMemFree: freeing %zu bytes of device memory at %p: %s",
                 rec->bytes, rec->ptr, st_status_str(status));
    }
    free(rec);
    return status;
}

int st_cipc_mem_pack(const void *ptr, size_t len, st_win_memh_t *memh_p, size_t *offset_p)
{
    uintptr_t      p = (uintptr_t)ptr;
    st_cipc_rec_t *rec;
    int            found = 0;

    pthread_mutex_lock(&st_cipc_mem_lock);
    for (rec = st_cipc_allocs; rec != NULL; rec = rec->next) {
        uintptr_t base = (uintptr_t)rec->ptr;

        /* written so that no sum can wrap */
        if (p >= base && p - base < rec->bytes && len <= rec->bytes - (p - base)) {
            if (memh_p != NULL) {
                st_cipc_memh_t h;

                memset(&h, 0, sizeof(h));
                h.magic = ST_CIPC_MAGIC_MEM;
                h.pid   = (uint32_t)getpid();
                h.id    = rec->id;
                h.addr  = (uint64_t)base;
                h.bytes = rec->bytes;
                h.key   = st_cipc_key;
                memcpy(memh_p->bytes, &h, sizeof(h));
            }
            if (offset_p != NULL) {
                *offset_p = p - base;
            }
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&st_cipc_mem_lock);
    return found;
}

/* ---- the peer's side ------------------------------------------------------------------------ */

/* Asks the owner of h for its allocation and imports it; NULL after logging why. Called with
 * st_cipc_peer_lock held (and no other of ours). */
static void *st_cipc_mem_fetch(const st_dev_ops_t *dev, const st_cipc_memh_t *h)
{
    char              sname[ST_CIPC_SOCK_NAME_LEN + 1];
    double            deadline = st_time_now() + st_cipc_timeout();
    st_cipc_request_t q;
    st_cipc_reply_t   r;
    st_status_t       status;
    void             *ptr = NULL;
    int               sock, fd = -1;

    st_cipc_mem_sock_name(h->pid, h->key, sname);
    /* the owner listens already (it packed the handle): refused for a second, it is gone */
    status = st_cipc_connect(sname, ST_MIN(deadline, st_time_now() + 1.0), &sock);
    if (status != ST_OK) {
        if (status == ST_ERR_TIMEOUT) {
            st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of process %" PRIu32
                     ": nobody serves socket @%s (%s): the process has ended or freed all its "
                     "buffers", h->id, h->pid, sname, strerror(errno));
        }
        return NULL;
    }
    memset(&q, 0, sizeof(q));
    q.magic = ST_CIPC_MAGIC_MEM;
    q.id    = h->id;
    status  = st_cipc_send_fd(sock, &q, sizeof(q), -1, sname);
    if (status == ST_OK) {
        status = st_cipc_recv_fd(sock, &r, sizeof(r), deadline, sname, &fd);
    }
    close(sock);
    if (status != ST_OK) {
        if (status == ST_ERR_TIMEOUT || status == ST_ERR_REMOTE) {
            st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of process %" PRIu32
                     " (socket @%s): %s", h->id, h->pid, sname,
                     status == ST_ERR_TIMEOUT ? "no answer before the deadline"
                                              : "the owner hung up before answering");
        }
        goto out;
    }
    if (r.magic != ST_CIPC_MAGIC_MEM || r.pid != h->pid || r.key != h->key) {
        st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of process %" PRIu32
                 " (socket @%s): not its owner's answer", h->id, h->pid, sname);
        goto out;
    }
    if (r.status != 0 || fd < 0) {
        st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of process %" PRIu32
                 ": the owner freed it", h->id, h->pid);
        goto out;
    }
    if (r.bytes != h->bytes || r.addr != h->addr) {
        st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of process %" PRIu32
                 ": the owner has %" PRIu64 " bytes at 0x%" PRIx64 ", the handle says %" PRIu64
                 " at 0x%" PRIx64, h->id, h->pid, r.bytes, r.addr, h->bytes, h->addr);
        goto out;
    }
    if (dev->mem_import(fd, (size_t)r.bytes, &ptr) != ST_OK) {
        st_log_append_error(" (shareable device memory %016" PRIx64 " of process %" PRIu32 ")",
                            h->id, h->pid);
        ptr = NULL;
        goto out;
    }
    st_debug(ST_SUB_IPC, "mapped %" PRIu64 " bytes of process %" PRIu32 " at %p", r.bytes, h->pid,
             ptr);
out:
    if (fd >= 0) {
        close(fd);
    }
    return ptr;
}

void *st_cipc_mem_map(const st_win_memh_t *memh)
{
    const st_dev_ops_t *dev;
    st_cipc_memh_t      h;
    st_cipc_map_t      *m;
    void               *ptr = NULL;

    if (memh != NULL) {
        memcpy(&h, memh->bytes, sizeof(h));
    }
    if (memh == NULL || h.magic != ST_CIPC_MAGIC_MEM || h.bytes == 0 ||
        h.bytes > (uint64_t)PTRDIFF_MAX) {
        st_error(ST_SUB_IPC, "shareable device memory: invalid handle (%s)",
                 memh == NULL ? "NULL" : h.magic != ST_CIPC_MAGIC_MEM ? "not a device one"
                                                                       : "size");
        return NULL;
    }
    pthread_once(&st_cipc_once, st_cipc_init_once);
    if (st_cipc_is_self(h.pid, h.key)) {
        /* ranks that are threads of one process: the allocation itself */
        st_cipc_rec_t *rec;

        pthread_mutex_lock(&st_cipc_mem_lock);
        for (rec = st_cipc_allocs; rec != NULL && rec->id != h.id; rec = rec->next) {
        }
        ptr = (rec != NULL) ? rec->ptr : NULL;
        pthread_mutex_unlock(&st_cipc_mem_lock);
        if (ptr == NULL) {
            st_error(ST_SUB_IPC, "shareable device memory %016" PRIx64 " of this process was "
                     "freed", h.id);
        }
        return ptr;
    }
    dev = st_cipc_dev("mapping a peer's shareable device memory");
    if (dev == NULL) {
        return NULL;
    }
    pthread_mutex_lock(&st_cipc_peer_lock);
    for (m = st_cipc_maps; m != NULL; m = m->next) {
        if (m->pid == h.pid && m->id == h.id) {
            ptr = m->ptr; /* NULL: failed before, and said why then */
            goto out;
        }
    }
    m = calloc(1, sizeof(*m));
    if (m == NULL) {
        st_error(ST_SUB_IPC, "shareable device memory: out of memory for a peer mapping");
        goto out;
    }
    m->pid       = h.pid;
    m->id        = h.id;
    m->bytes     = (size_t)h.bytes;
    m->ptr       = st_cipc_mem_fetch(dev, &h);
    m->next      = st_cipc_maps;
    st_cipc_maps = m;
    ptr          = m->ptr;
out:
    pthread_mutex_unlock(&st_cipc_peer_lock);
    return ptr;
}

void st_cipc_mem_unmap_all(void)
{
    st_cipc_map_t *m;

    pthread_mutex_lock(&st_cipc_peer_lock);
    while ((m = st_cipc_maps) != NULL) {
        st_cipc_maps = m->next;
        if (m->ptr != NULL) {
            /* a mapping exists only where a device did (st_dev() is decided once) */
            st_dev()->mem_unimport(m->ptr, m->bytes);
        }
        free(m);
    }
    pthread_mutex_unlock(&st_cipc_peer_lock);
}

st_status_t st_cipc_peer_read(int pid ST_UNUSED, void *dst ST_UNUSED,
                              const void *remote ST_UNUSED, size_t len ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

st_status_t st_cipc_peer_write(int pid ST_UNUSED, void *remote ST_UNUSED,
                               const void *src ST_UNUSED, size_t len ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}
