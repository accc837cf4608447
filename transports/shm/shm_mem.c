/*
 * shm_mem.c - shareable host memory: what strataMemAlloc hands out, and its mapping by node peers.
 *
 * An allocation is an anonymous shared-memory file (memfd; shm_open + immediate shm_unlink where
 * memfd_create is unavailable), so no name is ever left behind, whatever kills the process. The
 * owner keeps the file descriptor open; a peer on the same node opens /proc/<pid>/fd/<fd> of the
 * owner, which reopens the same file, and maps it. The file is backed with posix_fallocate at
 * allocation time: a lazily backed one would raise SIGBUS in whoever first touched a page that
 * the full tmpfs cannot provide, possibly a peer in the middle of a collective.
 *
 * Handle ids are unique beyond the owner process (a random per-process prefix), so a peer's cache
 * keyed by (pid, id) can never confuse an allocation with one of a later process that got the
 * same pid. Allocations and the peers' mappings are kept in two short lists under one mutex; few
 * buffers are ever registered this way, so a list walk is cheaper than a tree's upkeep.
 *
 * Cross-memory attach (st_shm_peer_read) needs none of this: process_vm_readv copies straight out
 * of any memory of a node peer whose address it was told, once the kernel allows the caller to
 * ptrace that peer. It costs a system call and the kernel's pinning of the peer's pages (per
 * page), so callers read pieces of tens of KiB or more at a time.
 */
#include "config.h"
#include "transports/shm/shm.h"

#include <errno.h>
#include <fcntl.h>
#include <inttypes.h>
#include <limits.h>
#include <stdint.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <time.h>
#include <unistd.h>

typedef struct st_mem_rec {
    struct st_mem_rec *next;
    void              *ptr;
    size_t             size; /* rounded up to pages: what is mapped */
    int                fd;
    uint64_t           id;
} st_mem_rec_t;

/* A peer's allocation as mapped here; ptr NULL: it could not be mapped (logged once). */
typedef struct st_mem_peer {
    struct st_mem_peer *next;
    uint32_t            pid;
    int32_t             fd;
    uint64_t            id;
    void               *ptr;
    size_t              size;
} st_mem_peer_t;

static pthread_mutex_t st_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_once_t  st_mem_once = PTHREAD_ONCE_INIT;
static st_mem_rec_t   *st_mem_allocs;
static st_mem_peer_t  *st_mem_peers;
static uint64_t        st_mem_id_prefix; /* random, upper 32 bits of every id */
static uint32_t        st_mem_id_count;

/* A fork in another thread must not copy the lock held. */
static void st_mem_atfork_prepare(void)
{
    pthread_mutex_lock(&st_mem_lock);
}

static void st_mem_atfork_release(void)
{
    pthread_mutex_unlock(&st_mem_lock);
}

static void st_mem_init_once(void)
{
    uint32_t rnd;

    /* the log's handlers first: we may log holding st_mem_lock, so it is taken first in prepare */
    st_log_init();
    pthread_atfork(st_mem_atfork_prepare, st_mem_atfork_release, st_mem_atfork_release);
    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        rnd = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16) ^ (uint32_t)clock();
    }
    st_mem_id_prefix = (uint64_t)rnd << 32;
}

/* An fd of a new anonymous shared-memory file. */
static st_status_t st_mem_open_file(uint64_t id, int *fd_p)
{
    char name[ST_MEM_NAME_LEN];
    int  fd;

    fd = memfd_create("strata-mem", MFD_CLOEXEC);
    if (fd >= 0) {
        *fd_p = fd;
        return ST_OK;
    }
    if (errno != ENOSYS) {
        st_error(ST_SUB_SHM, "shareable memory: memfd_create: %m");
        return (errno == EMFILE || errno == ENFILE) ? ST_ERR_IO : ST_ERR_NO_MEMORY;
    }
    /* no memfd (kernel < 3.17, or filtered): a POSIX segment whose name lives only an instant */
    snprintf(name, sizeof(name), "/strata-mem-%d-%016" PRIx64, (int)getpid(), id);
    fd = shm_open(name, O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0) {
        st_error(ST_SUB_SHM, "shareable memory: shm_open %s: %m", name);
        return ST_ERR_IO;
    }
    shm_unlink(name);
    *fd_p = fd;
    return ST_OK;
}

/* ---- room: how much can be backed without the OOM killer ------------------------------------
 * posix_fallocate commits every page: asked for more than the machine or the process's memory
 * cgroup can give, it does not fail, the OOM killer ends the process (or another). So the size is
 * checked first against MemAvailable + SwapFree and against every memory cgroup on the way up
 * from this process's (v1 memory.limit_in_bytes - usage_in_bytes, v2 memory.max - current),
 * keeping a margin of 1/16 of the room (at least 64 MiB) for everything else. */
#define ST_MEM_MARGIN_MIN ((size_t)64 << 20)

/* A number from a one-line file; 0 when unreadable, SIZE_MAX for "max" or a v1 "unlimited". */
static size_t st_mem_read_num(const char *path, int *ok)
{
    char               line[64];
    unsigned long long v;
    FILE              *f = fopen(path, "r");

    *ok = 0;
    if (f == NULL) {
        return 0;
    }
    if (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "max", 3) == 0) {
            *ok = 1;
            v   = ULLONG_MAX;
        } else if (sscanf(line, "%llu", &v) == 1) {
            *ok = 1;
        }
    }
    fclose(f);
    return (*ok && v < (unsigned long long)SIZE_MAX / 2) ? (size_t)v : (*ok ? SIZE_MAX : 0);
}

/* The room of the cgroup at dir and its ancestors below root_dir (files limit, usage), the
 * tightest one's path into where. */
static size_t st_mem_cgroup_room(const char *root_dir, const char *cg_path, const char *limit_f,
                                 const char *usage_f, char *where, size_t where_len)
{
    char   dir[512], path[600];
    size_t room = SIZE_MAX;

    snprintf(dir, sizeof(dir), "%s%s", root_dir, cg_path);
    for (;;) {
        int    ok_l, ok_u;
        size_t limit, usage;

        snprintf(path, sizeof(path), "%s/%s", dir, limit_f);
        limit = st_mem_read_num(path, &ok_l);
        snprintf(path, sizeof(path), "%s/%s", dir, usage_f);
        usage = st_mem_read_num(path, &ok_u);
        if (ok_l && ok_u && limit != SIZE_MAX && limit < ((size_t)1 << 60)) {
            size_t r = (limit > usage) ? limit - usage : 0;

            if (r < room) {
                room = r;
                snprintf(where, where_len, "memory cgroup %s: %s %zu B, %zu B in use", dir,
                         limit_f, limit, usage);
            }
        }
        if (strlen(dir) <= strlen(root_dir)) {
            break;
        }
        *strrchr(dir, '/') = '\0'; /* up one level */
    }
    return room;
}

/* Bytes a new allocation may commit, with the limit that sets it described in where. */
static size_t st_mem_room(char *where, size_t where_len)
{
    char   line[512];
    size_t room = SIZE_MAX, avail = 0, swap = 0;
    FILE  *f = fopen("/proc/meminfo", "r");
    int    have = 0;

    snprintf(where, where_len, "no limit found");
    if (f != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            unsigned long long kb;

            if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1) {
                avail = (size_t)kb * 1024;
                have |= 1;
            } else if (sscanf(line, "SwapFree: %llu kB", &kb) == 1) {
                swap = (size_t)kb * 1024;
                have |= 2;
            }
        }
        fclose(f);
    }
    if (have & 1) {
        room = avail + swap;
        snprintf(where, where_len, "MemAvailable + SwapFree %zu B", room);
    }
    f = fopen("/proc/self/cgroup", "r");
    if (f != NULL) {
        while (fgets(line, sizeof(line), f) != NULL) {
            char  *p = strchr(line, ':'), *q = p ? strchr(p + 1, ':') : NULL;
            char   w[700];
            size_t r = SIZE_MAX;

            if (q == NULL) {
                continue;
            }
            q[strcspn(q, "\n")] = '\0';
            *q = '\0';
            if (strcmp(p + 1, "memory") == 0) { /* v1 */
                r = st_mem_cgroup_room("/sys/fs/cgroup/memory", q + 1, "memory.limit_in_bytes",
                                       "memory.usage_in_bytes", w, sizeof(w));
            } else if (p[1] == '\0') { /* v2, mounted at the top or beside v1 */
                r = st_mem_cgroup_room("/sys/fs/cgroup", q + 1, "memory.max", "memory.current",
                                       w, sizeof(w));
                if (r == SIZE_MAX) {
                    r = st_mem_cgroup_room("/sys/fs/cgroup/unified", q + 1, "memory.max",
                                           "memory.current", w, sizeof(w));
                }
            }
            if (r < room) {
                room = r;
                snprintf(where, where_len, "%s", w);
            }
        }
        fclose(f);
    }
    if (room == SIZE_MAX) {
        return room;
    }
    return room - ST_MAX(room / 16, ST_MIN(ST_MEM_MARGIN_MIN, room));
}

st_status_t st_shm_mem_alloc(size_t size, void **ptr_p)
{
    size_t        page = (size_t)sysconf(_SC_PAGESIZE);
    st_mem_rec_t *rec;
    st_status_t   status;
    int           ret;

    if (size == 0 || ptr_p == NULL) {
        st_error(ST_SUB_SHM, "shareable memory: %s", size == 0 ? "size is 0" : "ptr_p is NULL");
        return ST_ERR_INVALID;
    }
    if (size > (size_t)PTRDIFF_MAX - page) {
        st_error(ST_SUB_SHM, "shareable memory: %zu bytes is more than an address space", size);
        return ST_ERR_NO_MEMORY;
    }
    {
        char   where[800];
        size_t room = st_mem_room(where, sizeof(where));

        if (size > room) {
            st_error(ST_SUB_SHM, "shareable memory: %zu bytes cannot be backed: %zu B can be "
                     "committed safely (%s)", size, room, where);
            return ST_ERR_NO_MEMORY;
        }
    }
    pthread_once(&st_mem_once, st_mem_init_once);
    rec = calloc(1, sizeof(*rec));
    if (rec == NULL) {
        st_error(ST_SUB_SHM, "shareable memory: out of memory for its record");
        return ST_ERR_NO_MEMORY;
    }
    rec->size = (size + page - 1) / page * page;
    pthread_mutex_lock(&st_mem_lock);
    rec->id = st_mem_id_prefix | ++st_mem_id_count;
    pthread_mutex_unlock(&st_mem_lock);

    ST_CHECK_GOTO(st_mem_open_file(rec->id, &rec->fd), status, err_free);
    if (ftruncate(rec->fd, (off_t)rec->size) != 0) {
        st_error(ST_SUB_SHM, "shareable memory: ftruncate to %zu bytes: %m", rec->size);
        status = ST_ERR_NO_MEMORY;
        goto err_close;
    }
    ret = posix_fallocate(rec->fd, 0, (off_t)rec->size);
    if (ret != 0) {
        st_error(ST_SUB_SHM, "shareable memory: cannot back %zu bytes (posix_fallocate: %s)%s",
                 rec->size, strerror(ret),
                 (ret == ENOSPC || ret == ENOMEM) ? ": shared memory is exhausted" : "");
        status = ST_ERR_NO_MEMORY;
        goto err_close;
    }
    rec->ptr = mmap(NULL, rec->size, PROT_READ | PROT_WRITE, MAP_SHARED, rec->fd, 0);
    if (rec->ptr == MAP_FAILED) {
        st_error(ST_SUB_SHM, "shareable memory: mmap of %zu bytes: %m", rec->size);
        status = ST_ERR_NO_MEMORY;
        goto err_close;
    }

    pthread_mutex_lock(&st_mem_lock);
    rec->next     = st_mem_allocs;
    st_mem_allocs = rec;
    pthread_mutex_unlock(&st_mem_lock);
    st_debug(ST_SUB_SHM, "shareable memory: %zu bytes at %p (fd %d)", rec->size, rec->ptr,
             rec->fd);
    *ptr_p = rec->ptr;
    return ST_OK;

err_close:
    close(rec->fd);
err_free:
    free(rec);
    return status;
}

st_status_t st_shm_mem_free(void *ptr)
{
    st_mem_rec_t **prev, *rec = NULL;

    pthread_mutex_lock(&st_mem_lock);
    for (prev = &st_mem_allocs; *prev != NULL; prev = &(*prev)->next) {
        if ((*prev)->ptr == ptr) {
            rec   = *prev;
            *prev = rec->next;
            break;
        }
    }
    pthread_mutex_unlock(&st_mem_lock);
    if (rec == NULL || ptr == NULL) {
        st_error(ST_SUB_SHM, "strataMemFree: %p is not an allocation of strataMemAlloc "
                 "(or freed already); nothing freed", ptr);
        return ST_ERR_INVALID;
    }
    munmap(rec->ptr, rec->size);
    close(rec->fd);
    free(rec);
    return ST_OK;
}

int st_shm_mem_pack(const void *ptr, size_t len, st_win_memh_t *memh_p, size_t *offset_p)
{
    st_shm_memh_t h;

    uintptr_t     p = (uintptr_t)ptr;
    st_mem_rec_t *rec;
    int           found = 0;

    pthread_mutex_lock(&st_mem_lock);
    for (rec = st_mem_allocs; rec != NULL; rec = rec->next) {
        uintptr_t base = (uintptr_t)rec->ptr;

        /* written so that no sum can wrap */
        if (p >= base && p - base < rec->size && len <= rec->size - (p - base)) {
            if (memh_p != NULL) {
                memset(&h, 0, sizeof(h));
                h.pid  = (uint32_t)getpid();
                h.fd   = rec->fd;
                h.size = rec->size;
                h.id   = rec->id;
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
    pthread_mutex_unlock(&st_mem_lock);
    return found;
}

/* Maps the owner's file; NULL after logging why. Called with st_mem_lock held. */
static void *st_mem_map_peer(const st_shm_memh_t *handle)
{
    char        path[64];
    struct stat st;
    void       *ptr;
    int         fd;

    snprintf(path, sizeof(path), "/proc/%" PRIu32 "/fd/%" PRId32, handle->pid, handle->fd);
    fd = open(path, O_RDWR | O_CLOEXEC);
    if (fd < 0) {
        st_error(ST_SUB_SHM, "shareable memory of process %" PRIu32 ": open %s: %m%s",
                 handle->pid, path,
                 (errno == EACCES || errno == EPERM)
                     ? " (another user, or ptrace access to it is denied)" : "");
        return NULL;
    }
    if (fstat(fd, &st) != 0) {
        st_error(ST_SUB_SHM, "shareable memory of process %" PRIu32 ": fstat %s: %m",
                 handle->pid, path);
        close(fd);
        return NULL;
    }
    if ((uint64_t)st.st_size != handle->size) {
        st_error(ST_SUB_SHM, "shareable memory of process %" PRIu32 ": %s is not the allocation "
                 "(%lld bytes, expected %" PRIu64 ")", handle->pid, path,
                 (long long)st.st_size, handle->size);
        close(fd);
        return NULL;
    }
    ptr = mmap(NULL, (size_t)handle->size, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    close(fd);
    if (ptr == MAP_FAILED) {
        st_error(ST_SUB_SHM, "shareable memory of process %" PRIu32 ": mmap of %" PRIu64
                 " bytes of %s: %m", handle->pid, handle->size, path);
        return NULL;
    }
    st_debug(ST_SUB_SHM, "mapped %" PRIu64 " bytes of process %" PRIu32 " at %p", handle->size,
             handle->pid, ptr);
    return ptr;
}

void *st_shm_mem_map(const st_win_memh_t *memh)
{
    st_shm_memh_t        h;
    const st_shm_memh_t *handle = &h;
    st_mem_peer_t       *peer;
    st_mem_rec_t        *rec;
    void                *ptr = NULL;

    if (memh != NULL) {
        memcpy(&h, memh->bytes, sizeof(h));
    }
    if (memh == NULL || h.size == 0 || h.size > (uint64_t)PTRDIFF_MAX) {
        st_error(ST_SUB_SHM, "shareable memory: invalid handle (%s)",
                 memh == NULL ? "NULL" : "size");
        return NULL;
    }
    pthread_mutex_lock(&st_mem_lock);
    if (handle->pid == (uint32_t)getpid()) {
        /* ranks that are threads of one process: the allocation is mapped here already */
        for (rec = st_mem_allocs; rec != NULL && rec->id != handle->id; rec = rec->next) {
        }
        if (rec != NULL) {
            ptr = rec->ptr;
        } else {
            st_error(ST_SUB_SHM, "shareable memory %016" PRIx64 " of this process was freed",
                     handle->id);
        }
        goto out;
    }
    for (st_mem_peer_t **pp = &st_mem_peers; (peer = *pp) != NULL;) {
        if (peer->pid == handle->pid && peer->id == handle->id) {
            ptr = peer->ptr; /* NULL: failed before, and said why then */
            goto out;
        }
        if (peer->pid == handle->pid && peer->fd == handle->fd) {
            /* the owner closed that fd (freed the allocation) and reused the number: the old
             * mapping only pins freed memory */
            *pp = peer->next;
            if (peer->ptr != NULL) {
                munmap(peer->ptr, peer->size);
            }
            free(peer);
            continue;
        }
        pp = &peer->next;
    }
    peer = calloc(1, sizeof(*peer));
    if (peer == NULL) {
        st_error(ST_SUB_SHM, "shareable memory: out of memory for a peer mapping");
        goto out;
    }
    peer->pid    = handle->pid;
    peer->fd     = handle->fd;
    peer->id     = handle->id;
    peer->size   = (size_t)handle->size;
    peer->ptr    = st_mem_map_peer(handle);
    peer->next   = st_mem_peers;
    st_mem_peers = peer;
    ptr          = peer->ptr;
out:
    pthread_mutex_unlock(&st_mem_lock);
    return ptr;
}

void st_shm_mem_unmap_all(void)
{
    st_mem_peer_t *peer;

    pthread_mutex_lock(&st_mem_lock);
    while ((peer = st_mem_peers) != NULL) {
        st_mem_peers = peer->next;
        if (peer->ptr != NULL) {
            munmap(peer->ptr, peer->size);
        }
        free(peer);
    }
    pthread_mutex_unlock(&st_mem_lock);
}

/* peer_read and peer_write: process_vm_readv / process_vm_writev of len bytes between local and
 * remote (in process pid), continuing after a partial transfer. */
static st_status_t st_shm_peer_copy(int pid, void *local, uintptr_t r, size_t len, int write)
{
    char       *d = local;
    const char *call = write ? "process_vm_writev" : "process_vm_readv";

    while (len > 0) {
        /* one iovec each side: the kernel returns short only at a fault or a signal, and then
         * the rest is asked for again (a fault then reports EFAULT) */
        struct iovec mine = {.iov_base = d, .iov_len = len};
        struct iovec peer = {.iov_base = (void *)r, .iov_len = len};
        ssize_t      n    = write ? process_vm_writev((pid_t)pid, &mine, 1, &peer, 1, 0)
                                  : process_vm_readv((pid_t)pid, &mine, 1, &peer, 1, 0);

        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            int unsupported = (errno == EPERM || errno == ENOSYS || errno == EACCES);

            st_debug(ST_SUB_SHM, "%s of %zu B at 0x%" PRIxPTR " in process %d: %m%s", call, len, r,
                     pid, unsupported ? " (the kernel does not allow cross-memory attach to it: "
                     "ptrace rules, Yama's ptrace_scope, seccomp)" : "");
            return unsupported ? ST_ERR_UNSUPPORTED : ST_ERR_IO;
        }
        if (n == 0) {
            st_debug(ST_SUB_SHM, "%s of %zu B at 0x%" PRIxPTR " in process %d moved nothing", call,
                     len, r, pid);
            return ST_ERR_IO;
        }
        d   += n;
        r   += (uintptr_t)n;
        len -= (size_t)n;
    }
    return ST_OK;
}

st_status_t st_shm_peer_read(int pid, void *dst, const void *remote, size_t len)
{
    return st_shm_peer_copy(pid, dst, (uintptr_t)remote, len, 0);
}

st_status_t st_shm_peer_write(int pid, void *remote, const void *src, size_t len)
{
    return st_shm_peer_copy(pid, (void *)(uintptr_t)src, (uintptr_t)remote, len, 1);
}
