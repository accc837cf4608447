/*
 * dev_sim.c - the simulated device (dev.h's "sim"): every slot of st_dev_ops_t on the CPU, so
 * that the device protocol (gates, proxies, windows in device memory, events) runs in CI.
 *
 * Memory. Device memory is a memfd mapped MAP_SHARED, so a shareable allocation is exported as a
 * file descriptor and imported by mmap, exactly as cuMem memory is moved between processes
 * (SCM_RIGHTS); pinned host memory (host_alloc) is anonymous pages. Every range is recorded in one
 * process-wide table sorted by address (device, kind, the memfd of a shareable allocation), so
 * ptr_type answers as the driver would and the free slots reject pointers of another kind. The
 * backing is reserved at allocation (posix_fallocate) so that a short machine fails the
 * allocation, as cudaMalloc does, rather than raising SIGBUS at a later touch.
 *
 * Streams. One thread per stream executes its FIFO of commands in order (copy, zero, reduction
 * job through reduce/kernel.h's host runner, wait on a gate word); tickets count the commands
 * queued and completed, and an event is a (stream, ticket) mark. Every wait sleeps on a condition
 * variable: a gate waiter is woken by write_value, with a 1 ms timed wait as a safety net for
 * words written by another process or by a plain store. Streams are reference counted (the
 * registry, the thread, events recorded on them), so destroying one returns at once and its
 * queued work still completes, as cudaStreamDestroy's does. A pointer is a stream only if it is in
 * the registry: a destroyed or foreign handle is never dereferenced.
 *
 * fork. Threads do not survive fork: the child forgets the parent's streams (kept reachable on a
 * stale list, never run) and makes its own, default stream included; memory stays valid (the
 * mappings are inherited, MAP_SHARED device memory even shared with the parent).
 */
#include "config.h"
#include "device/dev_sim.h"

#include <errno.h>
#include <fcntl.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

#define ST_SIM_GRANULARITY   ((size_t)2 << 20) /* of shareable memory: cuMem's usual one */
#define ST_SIM_STREAM_MAGIC  UINT64_C(0x5717ea3d51357ea3)
#define ST_SIM_EVENT_MAGIC   UINT64_C(0xe7e47d51e7e47d51)
#define ST_SIM_GATE_POLL_NS  1000000L /* safety net of a gate wait: words written without wake */

/* ---- settings and the current device ---- */

static unsigned     st_sim_ndevices = 2;
static unsigned     st_sim_delay_max_us;
static __thread int st_sim_current_dev; /* 0 by default, as CUDA's device 0 */

void st_dev_sim_configure(unsigned devices, unsigned delay_us)
{
    __atomic_store_n(&st_sim_ndevices, devices, __ATOMIC_RELAXED);
    __atomic_store_n(&st_sim_delay_max_us, delay_us, __ATOMIC_RELAXED);
}

unsigned st_dev_sim_delay_us(void)
{
    return __atomic_load_n(&st_sim_delay_max_us, __ATOMIC_RELAXED);
}

static int st_sim_count(void)
{
    return (int)__atomic_load_n(&st_sim_ndevices, __ATOMIC_RELAXED);
}

static int st_sim_current(void)
{
    return st_sim_current_dev;
}

static st_status_t st_sim_set_current(int dev)
{
    if (dev < 0 || dev >= st_sim_count()) {
        st_error(ST_SUB_INIT, "device %d does not exist (the simulated device has %d)", dev,
                 st_sim_count());
        return ST_ERR_INVALID;
    }
    st_sim_current_dev = dev;
    return ST_OK;
}

/* ---- process-wide state, and what a forked child starts from ---- */

typedef enum {
    ST_SIM_MEM_DEVICE, /* mem_alloc */
    ST_SIM_MEM_SHARED, /* mem_alloc_shared: fd kept for mem_export */
    ST_SIM_MEM_IMPORT, /* mem_import */
    ST_SIM_MEM_HOST    /* host_alloc */
} st_sim_mem_kind_t;

typedef struct st_sim_range {
    uintptr_t         base;
    size_t            bytes; /* mapped */
    int               dev;
    int               fd;    /* the memfd of a shareable allocation, else -1 */
    st_sim_mem_kind_t kind;
} st_sim_range_t;

typedef enum {
    ST_SIM_CMD_COPY,
    ST_SIM_CMD_ZERO,
    ST_SIM_CMD_REDUCE,
    ST_SIM_CMD_WAIT /* a gate: *word >= value */
} st_sim_cmd_kind_t;

typedef struct st_sim_cmd {
    struct st_sim_cmd *next;
    st_sim_cmd_kind_t  kind;
    uint64_t           ticket;
    union {
        struct {
            void       *dst;
            const void *src;
            size_t      bytes;
        } copy;
        struct {
            uint64_t *word;
            uint64_t  value;
        } wait;
        st_reduce_job_t job; /* by value, as the kernel takes it */
    } u;
} st_sim_cmd_t;

struct st_dev_stream {
    uint64_t              magic;
    int                   refs;      /* registry, thread, events recorded on it, calls in flight */
    unsigned long         gen;       /* the fork generation that made it */
    int                   dev;       /* the creator's current device */
    uint64_t              rng;       /* delay sequence; only the stream's thread touches it */
    pthread_mutex_t       lock;
    pthread_cond_t        work;      /* the thread: a command arrived, or stop */
    pthread_cond_t        progress;  /* waiters: a command completed */
    st_sim_cmd_t         *head, *tail;
    uint64_t              queued;    /* tickets handed out: the last queued command's */
    uint64_t              done;      /* the last completed command's ticket */
    int                   stop;      /* destroyed: finish the queue, then exit */
    int                   capturing; /* test hook */
    struct st_dev_stream *next;      /* registry (or the stale list after fork) */
};

struct st_dev_event {
    uint64_t         magic;
    st_dev_stream_t *s;      /* NULL: never recorded */
    uint64_t         ticket; /* done when s completed it */
};

static pthread_once_t  st_sim_once = PTHREAD_ONCE_INIT;
/* memory table */
static pthread_mutex_t st_sim_mem_lock = PTHREAD_MUTEX_INITIALIZER;
static st_sim_range_t *st_sim_mem;
static size_t          st_sim_mem_count, st_sim_mem_cap;
/* streams (registry, default stream, serials) and the fields of events; taken before a
 * stream's own lock, never after */
static pthread_mutex_t st_sim_reg_lock = PTHREAD_MUTEX_INITIALIZER;
static st_dev_stream_t *st_sim_streams;       /* live streams */
static st_dev_stream_t *st_sim_default;       /* the legacy default stream, made at first use */
static st_dev_stream_t *st_sim_stale;         /* a forked child's inheritance: never run */
static unsigned         st_sim_serial;        /* streams made: seeds their delay sequences */
static unsigned long    st_sim_gen;           /* forks survived */
/* gates: write_value wakes the streams that wait on a word */
static pthread_mutex_t st_sim_gate_lock = PTHREAD_MUTEX_INITIALIZER;
static pthread_cond_t  st_sim_gate_cond = PTHREAD_COND_INITIALIZER;

static void st_sim_atfork_prepare(void)
{
    pthread_mutex_lock(&st_sim_mem_lock);
    pthread_mutex_lock(&st_sim_reg_lock);
    pthread_mutex_lock(&st_sim_gate_lock);
}

static void st_sim_atfork_parent(void)
{
    pthread_mutex_unlock(&st_sim_gate_lock);
    pthread_mutex_unlock(&st_sim_reg_lock);
    pthread_mutex_unlock(&st_sim_mem_lock);
}

/* The parent's stream threads are gone: their streams (the default one too) become stale, and
 * the locks and the gate condition, which those threads may have been waiting on, start anew. */
static void st_sim_atfork_child(void)
{
    st_dev_stream_t **tail = &st_sim_stale;

    while (*tail != NULL) {
        tail = &(*tail)->next;
    }
    *tail = st_sim_streams;
    if (st_sim_default != NULL) {
        st_sim_default->next = st_sim_stale;
        st_sim_stale         = st_sim_default;
    }
    st_sim_streams = NULL;
    st_sim_default = NULL;
    st_sim_serial  = 0;
    st_sim_gen++;
    pthread_mutex_init(&st_sim_mem_lock, NULL);
    pthread_mutex_init(&st_sim_reg_lock, NULL);
    pthread_mutex_init(&st_sim_gate_lock, NULL);
    pthread_cond_init(&st_sim_gate_cond, NULL);
}

static void st_sim_init_once(void)
{
    /* the log's fork handlers first: atfork prepare handlers run in reverse order, so the sim's
     * locks (held while logging) are taken before the log's, as everywhere else */
    st_log_init();
    pthread_atfork(st_sim_atfork_prepare, st_sim_atfork_parent, st_sim_atfork_child);
}

static void st_sim_init(void)
{
    pthread_once(&st_sim_once, st_sim_init_once);
}

/* ---- the memory table ---- */

/* Index of the range holding p, or -1. Under st_sim_mem_lock. */
static long st_sim_mem_find(uintptr_t p)
{
    size_t lo = 0, hi = st_sim_mem_count; /* first range with base > p: lo */

    while (lo < hi) {
        size_t mid = lo + (hi - lo) / 2;
        if (st_sim_mem[mid].base <= p) {
            lo = mid + 1;
        } else {
            hi = mid;
        }
    }
    if (lo == 0 || p - st_sim_mem[lo - 1].base >= st_sim_mem[lo - 1].bytes) {
        return -1;
    }
    return (long)lo - 1;
}

static st_status_t st_sim_mem_insert(const st_sim_range_t *r)
{
    size_t i;

    pthread_mutex_lock(&st_sim_mem_lock);
    if (st_sim_mem_count == st_sim_mem_cap) {
        size_t          cap = st_sim_mem_cap ? 2 * st_sim_mem_cap : 64;
        st_sim_range_t *mem = realloc(st_sim_mem, cap * sizeof(*mem));
        if (mem == NULL) {
            pthread_mutex_unlock(&st_sim_mem_lock);
            st_error(ST_SUB_INIT, "out of memory for the simulated device's table of %zu ranges",
                     cap);
            return ST_ERR_NO_MEMORY;
        }
        st_sim_mem     = mem;
        st_sim_mem_cap = cap;
    }
    for (i = st_sim_mem_count; i > 0 && st_sim_mem[i - 1].base > r->base; i--) {
        st_sim_mem[i] = st_sim_mem[i - 1];
    }
    st_sim_mem[i] = *r;
    st_sim_mem_count++;
    pthread_mutex_unlock(&st_sim_mem_lock);
    return ST_OK;
}

/* Removes the range that starts exactly at ptr and is of kind, into *r. ST_ERR_INVALID (not
 * logged) for any other pointer. */
static st_status_t st_sim_mem_take(const void *ptr, st_sim_mem_kind_t kind, st_sim_range_t *r)
{
    long i;

    pthread_mutex_lock(&st_sim_mem_lock);
    i = st_sim_mem_find((uintptr_t)ptr);
    if (ptr == NULL || i < 0 || st_sim_mem[i].base != (uintptr_t)ptr ||
        st_sim_mem[i].kind != kind) {
        pthread_mutex_unlock(&st_sim_mem_lock);
        return ST_ERR_INVALID;
    }
    *r = st_sim_mem[i];
    memmove(&st_sim_mem[i], &st_sim_mem[i + 1],
            (st_sim_mem_count - (size_t)i - 1) * sizeof(*st_sim_mem));
    st_sim_mem_count--;
    pthread_mutex_unlock(&st_sim_mem_lock);
    return ST_OK;
}

static st_dev_ptr_t st_sim_ptr_type(const void *ptr, int *dev_p)
{
    st_dev_ptr_t type = ST_DEV_PTR_HOST;
    int          dev  = -1;
    long         i;

    pthread_mutex_lock(&st_sim_mem_lock);
    i = st_sim_mem_find((uintptr_t)ptr);
    if (i >= 0 && st_sim_mem[i].kind != ST_SIM_MEM_HOST) {
        type = ST_DEV_PTR_DEVICE;
        dev  = st_sim_mem[i].dev;
    }
    pthread_mutex_unlock(&st_sim_mem_lock);
    if (dev_p != NULL) {
        *dev_p = dev; /* -1 for host memory */
    }
    return type;
}

/* ---- memory ---- */

static size_t st_sim_round(size_t bytes, size_t unit)
{
    return ST_DIV_ROUND_UP(bytes, unit) * unit;
}

static size_t st_sim_page(void)
{
    return (size_t)sysconf(_SC_PAGESIZE);
}

/* What the machine can back now: MemAvailable + SwapFree (bytes; 0 when unknown). */
static size_t st_sim_room(void)
{
    FILE              *f = fopen("/proc/meminfo", "r");
    char               line[256];
    unsigned long long kb, total = 0;
    int                seen = 0;

    if (f == NULL) {
        return 0;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemAvailable: %llu kB", &kb) == 1 ||
            sscanf(line, "SwapFree: %llu kB", &kb) == 1) {
            total += kb;
            seen++;
        }
    }
    fclose(f);
    return seen > 0 ? (size_t)total * 1024 : 0;
}

/* A memfd of bytes, backed now, mapped shared: the device memory of this device. Sizes the
 * machine cannot back are refused first: backing a memfd page by page would run into the OOM
 * killer, not into an error (a GPU's allocator says out of memory instead). */
static st_status_t st_sim_memfd_map(size_t bytes, int *fd_p, void **ptr_p)
{
    st_status_t status;
    void       *ptr;
    int         fd, ret;
    size_t      room = st_sim_room();
    size_t      margin = ST_MAX(room / 16, (size_t)64 << 20);

    if (room != 0 && (room <= margin || bytes > room - margin)) {
        st_error(ST_SUB_INIT, "simulated device memory: %zu B cannot be backed: %zu B can be "
                 "committed safely (MemAvailable + SwapFree %zu B, less a margin)", bytes,
                 room > margin ? room - margin : 0, room);
        return ST_ERR_NO_MEMORY;
    }

    fd = memfd_create("strata-sim-device", MFD_CLOEXEC);
    if (fd < 0) {
        st_error(ST_SUB_INIT, "memfd_create for %zu bytes of simulated device memory: %m", bytes);
        return (errno == ENOMEM || errno == EMFILE || errno == ENFILE) ? ST_ERR_NO_MEMORY
                                                                       : ST_ERR_IO;
    }
    ret = posix_fallocate(fd, 0, (off_t)bytes);
    if (ret != 0) {
        st_error(ST_SUB_INIT, "reserving %zu bytes of simulated device memory: %s", bytes,
                 strerror(ret));
        status = (ret == ENOSPC || ret == ENOMEM || ret == EFBIG) ? ST_ERR_NO_MEMORY : ST_ERR_IO;
        goto err_close;
    }
    ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ptr == MAP_FAILED) {
        st_error(ST_SUB_INIT, "mapping %zu bytes of simulated device memory: %m", bytes);
        status = ST_ERR_NO_MEMORY;
        goto err_close;
    }
    *fd_p  = fd;
    *ptr_p = ptr;
    return ST_OK;

err_close:
    close(fd);
    return status;
}

/* Allocates bytes (rounded up to unit) of device memory on the current device; the memfd is
 * kept (shareable) or closed. */
static st_status_t st_sim_alloc(size_t bytes, size_t unit, st_sim_mem_kind_t kind, void **ptr_p,
                                size_t *alloc_bytes_p)
{
    st_sim_range_t r;
    st_status_t    status;
    void          *ptr;
    int            fd;

    if (bytes == 0 || ptr_p == NULL) {
        st_error(ST_SUB_INIT, "simulated device memory of %zu bytes asked: not allocated", bytes);
        return ST_ERR_INVALID;
    }
    if (bytes > (size_t)INT64_MAX - unit) {
        st_error(ST_SUB_INIT, "simulated device memory of %zu bytes asked: more than a file holds",
                 bytes);
        return ST_ERR_NO_MEMORY;
    }
    st_sim_init();
    bytes = st_sim_round(bytes, unit);
    ST_CHECK(st_sim_memfd_map(bytes, &fd, &ptr));
    if (kind != ST_SIM_MEM_SHARED) {
        close(fd);
        fd = -1;
    }
    r = (st_sim_range_t){(uintptr_t)ptr, bytes, st_sim_current(), fd, kind};
    ST_CHECK_GOTO(st_sim_mem_insert(&r), status, err_unmap);
    *ptr_p = ptr;
    if (alloc_bytes_p != NULL) {
        *alloc_bytes_p = bytes;
    }
    return ST_OK;

err_unmap:
    munmap(ptr, bytes);
    if (fd >= 0) {
        close(fd);
    }
    return status;
}

static st_status_t st_sim_mem_alloc(size_t bytes, void **ptr_p)
{
    return st_sim_alloc(bytes, st_sim_page(), ST_SIM_MEM_DEVICE, ptr_p, NULL);
}

static st_status_t st_sim_mem_alloc_shared(size_t bytes, void **ptr_p, size_t *alloc_bytes_p)
{
    return st_sim_alloc(bytes, ST_SIM_GRANULARITY, ST_SIM_MEM_SHARED, ptr_p, alloc_bytes_p);
}

static const char *st_sim_kind_str(st_sim_mem_kind_t kind)
{
    switch (kind) {
    case ST_SIM_MEM_DEVICE: return "mem_alloc";
    case ST_SIM_MEM_SHARED: return "mem_alloc_shared";
    case ST_SIM_MEM_IMPORT: return "mem_import";
    case ST_SIM_MEM_HOST:   return "host_alloc";
    }
    return "?";
}

/* Unmaps the allocation of kind that starts at ptr; ST_ERR_INVALID, logged, for another
 * pointer. */
static st_status_t st_sim_free(void *ptr, st_sim_mem_kind_t kind, const char *what)
{
    st_sim_range_t r;

    if (st_sim_mem_take(ptr, kind, &r) != ST_OK) {
        st_error(ST_SUB_INIT, "%s(%p): not the start of an allocation of %s (simulated device)",
                 what, ptr, st_sim_kind_str(kind));
        return ST_ERR_INVALID;
    }
    munmap((void *)r.base, r.bytes);
    if (r.fd >= 0) {
        close(r.fd);
    }
    return ST_OK;
}

static st_status_t st_sim_mem_free(void *ptr)
{
    return st_sim_free(ptr, ST_SIM_MEM_DEVICE, "mem_free");
}

static st_status_t st_sim_mem_free_shared(void *ptr)
{
    return st_sim_free(ptr, ST_SIM_MEM_SHARED, "mem_free_shared");
}

static st_status_t st_sim_mem_export(void *ptr, int *fd_p)
{
    int  fd = -1;
    long i;

    pthread_mutex_lock(&st_sim_mem_lock);
    i = st_sim_mem_find((uintptr_t)ptr);
    if (ptr != NULL && i >= 0 && st_sim_mem[i].base == (uintptr_t)ptr &&
        st_sim_mem[i].kind == ST_SIM_MEM_SHARED) {
        fd = fcntl(st_sim_mem[i].fd, F_DUPFD_CLOEXEC, 0);
        if (fd < 0) {
            pthread_mutex_unlock(&st_sim_mem_lock);
            st_error(ST_SUB_IPC, "mem_export(%p): dup of its memfd: %m", ptr);
            return ST_ERR_IO;
        }
    }
    pthread_mutex_unlock(&st_sim_mem_lock);
    if (fd < 0) {
        st_error(ST_SUB_IPC, "mem_export(%p): not the start of an allocation of "
                 "mem_alloc_shared (simulated device)", ptr);
        return ST_ERR_INVALID;
    }
    *fd_p = fd;
    return ST_OK;
}

static st_status_t st_sim_mem_import(int fd, size_t bytes, void **ptr_p)
{
    st_sim_range_t r;
    struct stat    st;
    st_status_t    status;
    void          *ptr;

    st_sim_init();
    if (fstat(fd, &st) != 0) {
        st_error(ST_SUB_IPC, "mem_import of fd %d: fstat: %m", fd);
        return ST_ERR_IO;
    }
    if (bytes == 0 || (uintmax_t)st.st_size < bytes) {
        st_error(ST_SUB_IPC, "mem_import of fd %d: %zu bytes asked, the allocation has %jd", fd,
                 bytes, (intmax_t)st.st_size);
        return ST_ERR_IO;
    }
    ptr = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    if (ptr == MAP_FAILED) {
        st_error(ST_SUB_IPC, "mem_import of fd %d: mapping %zu bytes: %m", fd, bytes);
        return ST_ERR_IO;
    }
    r = (st_sim_range_t){(uintptr_t)ptr, bytes, st_sim_current(), -1, ST_SIM_MEM_IMPORT};
    ST_CHECK_GOTO(st_sim_mem_insert(&r), status, err_unmap);
    *ptr_p = ptr;
    return ST_OK;

err_unmap:
    munmap(ptr, bytes);
    return (status == ST_ERR_NO_MEMORY) ? ST_ERR_IO : status;
}

static void st_sim_mem_unimport(void *ptr, size_t bytes)
{
    st_sim_range_t r;

    if (st_sim_mem_take(ptr, ST_SIM_MEM_IMPORT, &r) != ST_OK) {
        st_error(ST_SUB_IPC, "mem_unimport(%p): not a mapping of mem_import (simulated device)",
                 ptr);
        return;
    }
    if (bytes != r.bytes) {
        st_warn(ST_SUB_IPC, "mem_unimport(%p, %zu): the mapping has %zu bytes; all unmapped", ptr,
                bytes, r.bytes);
    }
    munmap(ptr, r.bytes);
}

static st_status_t st_sim_host_alloc(size_t bytes, void **ptr_p)
{
    st_sim_range_t r;
    st_status_t    status;
    void          *ptr;

    if (bytes == 0 || ptr_p == NULL) {
        st_error(ST_SUB_INIT, "pinned host memory of %zu bytes asked: not allocated", bytes);
        return ST_ERR_INVALID;
    }
    if (bytes > SIZE_MAX / 2) {
        st_error(ST_SUB_INIT, "host_alloc of %zu bytes: more than the address space", bytes);
        return ST_ERR_NO_MEMORY;
    }
    st_sim_init();
    bytes = st_sim_round(bytes, st_sim_page());
    ptr   = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (ptr == MAP_FAILED) {
        st_error(ST_SUB_INIT, "host_alloc of %zu bytes: %m", bytes);
        return ST_ERR_NO_MEMORY;
    }
    r = (st_sim_range_t){(uintptr_t)ptr, bytes, -1, -1, ST_SIM_MEM_HOST};
    ST_CHECK_GOTO(st_sim_mem_insert(&r), status, err_unmap);
    *ptr_p = ptr;
    return ST_OK;

err_unmap:
    munmap(ptr, bytes);
    return status;
}

static void st_sim_host_free(void *ptr)
{
    st_sim_free(ptr, ST_SIM_MEM_HOST, "host_free");
}

/* ---- streams ---- */

static uint64_t st_sim_splitmix(uint64_t x)
{
    x += UINT64_C(0x9e3779b97f4a7c15);
    x  = (x ^ (x >> 30)) * UINT64_C(0xbf58476d1ce4e5b9);
    x  = (x ^ (x >> 27)) * UINT64_C(0x94d049bb133111eb);
    return x ^ (x >> 31);
}

static void st_sim_stream_put(st_dev_stream_t *s)
{
    if (__atomic_sub_fetch(&s->refs, 1, __ATOMIC_ACQ_REL) != 0) {
        return;
    }
    s->magic = 0;
    pthread_cond_destroy(&s->progress);
    pthread_cond_destroy(&s->work);
    pthread_mutex_destroy(&s->lock);
    free(s);
}

static struct timespec st_sim_deadline(long timeout_ns)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    ts.tv_sec  += timeout_ns / 1000000000L;
    ts.tv_nsec += timeout_ns % 1000000000L;
    if (ts.tv_nsec >= 1000000000L) {
        ts.tv_sec++;
        ts.tv_nsec -= 1000000000L;
    }
    return ts;
}

/* Fault injection: a pseudo-random pause before a command, from the stream's own sequence. */
static void st_sim_delay(st_dev_stream_t *s)
{
    unsigned        max = st_dev_sim_delay_us();
    uint64_t        us;
    struct timespec ts;

    if (max == 0) {
        return;
    }
    s->rng = st_sim_splitmix(s->rng);
    us     = s->rng % ((uint64_t)max + 1);
    ts     = (struct timespec){(time_t)(us / 1000000), (long)(us % 1000000) * 1000};
    while (nanosleep(&ts, &ts) != 0 && errno == EINTR) {
    }
}

/* A gate: sleeps until *word >= value, woken by write_value. */
static void st_sim_gate_wait(uint64_t *word, uint64_t value)
{
    pthread_mutex_lock(&st_sim_gate_lock);
    while (__atomic_load_n(word, __ATOMIC_ACQUIRE) < value) {
        struct timespec ts = st_sim_deadline(ST_SIM_GATE_POLL_NS);
        pthread_cond_clockwait(&st_sim_gate_cond, &st_sim_gate_lock, CLOCK_MONOTONIC, &ts);
    }
    pthread_mutex_unlock(&st_sim_gate_lock);
}

static void st_sim_write_value(uint64_t *word, uint64_t value)
{
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
    pthread_mutex_lock(&st_sim_gate_lock);
    pthread_cond_broadcast(&st_sim_gate_cond);
    pthread_mutex_unlock(&st_sim_gate_lock);
}

static void st_sim_exec(st_sim_cmd_t *cmd)
{
    switch (cmd->kind) {
    case ST_SIM_CMD_COPY:
        memmove(cmd->u.copy.dst, cmd->u.copy.src, cmd->u.copy.bytes);
        break;
    case ST_SIM_CMD_ZERO:
        memset(cmd->u.copy.dst, 0, cmd->u.copy.bytes);
        break;
    case ST_SIM_CMD_REDUCE:
        st_reduce_job_run_host(&cmd->u.job);
        break;
    case ST_SIM_CMD_WAIT:
        st_sim_gate_wait(cmd->u.wait.word, cmd->u.wait.value);
        break;
    }
}

/* The stream's thread: runs the queue in order until destroyed and drained. */
static void *st_sim_stream_main(void *arg)
{
    st_dev_stream_t *s = arg;
    st_sim_cmd_t    *cmd;

    st_sim_current_dev = s->dev;
    pthread_mutex_lock(&s->lock);
    for (;;) {
        while (s->head == NULL && !s->stop) {
            pthread_cond_wait(&s->work, &s->lock);
        }
        cmd = s->head;
        if (cmd == NULL) {
            break;
        }
        s->head = cmd->next;
        if (s->head == NULL) {
            s->tail = NULL;
        }
        pthread_mutex_unlock(&s->lock);
        st_sim_delay(s);
        st_sim_exec(cmd);
        pthread_mutex_lock(&s->lock);
        s->done = cmd->ticket;
        pthread_cond_broadcast(&s->progress);
        free(cmd);
    }
    pthread_mutex_unlock(&s->lock);
    st_sim_stream_put(s);
    return NULL;
}

/* A new stream with its thread (signals blocked there: they belong to the application's
 * threads), not yet in the registry. Under st_sim_reg_lock (the serial). */
static st_status_t st_sim_stream_new(st_dev_stream_t **s_p)
{
    st_dev_stream_t *s;
    pthread_t        thread;
    sigset_t         all, old;
    int              ret;

    s = calloc(1, sizeof(*s));
    if (s == NULL) {
        st_error(ST_SUB_INIT, "out of memory for a simulated stream");
        return ST_ERR_NO_MEMORY;
    }
    s->magic = ST_SIM_STREAM_MAGIC;
    s->refs  = 2; /* the registry's and the thread's */
    s->gen   = st_sim_gen;
    s->dev   = st_sim_current();
    s->rng   = st_sim_splitmix(st_sim_serial++);
    pthread_mutex_init(&s->lock, NULL);
    pthread_cond_init(&s->work, NULL);
    pthread_cond_init(&s->progress, NULL);
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ret = pthread_create(&thread, NULL, st_sim_stream_main, s);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        st_error(ST_SUB_INIT, "creating a simulated stream's thread: %s", strerror(ret));
        pthread_cond_destroy(&s->progress);
        pthread_cond_destroy(&s->work);
        pthread_mutex_destroy(&s->lock);
        free(s);
        return ST_ERR_IO;
    }
    pthread_detach(thread);
    *s_p = s;
    return ST_OK;
}

/* The live stream s (NULL: the default stream, made at its first use) with a reference taken,
 * or NULL. Under st_sim_reg_lock. */
static st_dev_stream_t *st_sim_stream_lookup(st_dev_stream_t *s)
{
    if (s == NULL) {
        if (st_sim_default == NULL && st_sim_stream_new(&st_sim_default) != ST_OK) {
            return NULL;
        }
        s = st_sim_default;
    } else {
        st_dev_stream_t *l = st_sim_streams;
        while (l != NULL && l != s) {
            l = l->next;
        }
        if (l == NULL) {
            return NULL;
        }
    }
    __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    return s;
}

/* st_sim_stream_lookup under the lock; logs a dead or foreign handle for what. */
static st_dev_stream_t *st_sim_stream_get(st_dev_stream_t *s, const char *what)
{
    st_dev_stream_t *got;

    st_sim_init();
    pthread_mutex_lock(&st_sim_reg_lock);
    got = st_sim_stream_lookup(s);
    pthread_mutex_unlock(&st_sim_reg_lock);
    if (got == NULL && s != NULL) {
        st_error(ST_SUB_INIT, "%s: %p is not a live stream of the simulated device", what,
                 (void *)s);
    }
    return got;
}

static st_status_t st_sim_stream_create(st_dev_stream_t **s_p)
{
    st_dev_stream_t *s;
    st_status_t      status;

    st_sim_init();
    pthread_mutex_lock(&st_sim_reg_lock);
    status = st_sim_stream_new(&s);
    if (status == ST_OK) {
        s->next        = st_sim_streams;
        st_sim_streams = s;
        *s_p           = s;
    }
    pthread_mutex_unlock(&st_sim_reg_lock);
    return status;
}

static void st_sim_stream_destroy(st_dev_stream_t *s)
{
    st_dev_stream_t **l;
    int               found = 0;

    if (s == NULL) {
        return; /* the legacy default stream lives as long as the process */
    }
    st_sim_init();
    pthread_mutex_lock(&st_sim_reg_lock);
    for (l = &st_sim_streams; *l != NULL; l = &(*l)->next) {
        if (*l == s) {
            *l    = s->next;
            found = 1;
            break;
        }
    }
    pthread_mutex_unlock(&st_sim_reg_lock);
    if (!found) {
        st_error(ST_SUB_INIT, "stream_destroy: %p is not a live stream of the simulated device",
                 (void *)s);
        return;
    }
    pthread_mutex_lock(&s->lock);
    s->stop = 1; /* the thread finishes what is queued, then exits */
    pthread_cond_signal(&s->work);
    pthread_mutex_unlock(&s->lock);
    st_sim_stream_put(s); /* the registry's reference */
}

static int st_sim_stream_capturing(st_dev_stream_t *s)
{
    int capturing = 0;

    st_sim_init();
    pthread_mutex_lock(&st_sim_reg_lock);
    if (s == NULL) {
        capturing = (st_sim_default != NULL) ? st_sim_default->capturing : 0;
    } else {
        st_dev_stream_t *l = st_sim_streams;
        while (l != NULL && l != s) {
            l = l->next;
        }
        capturing = (l != NULL) ? __atomic_load_n(&l->capturing, __ATOMIC_RELAXED) : -1;
    }
    pthread_mutex_unlock(&st_sim_reg_lock);
    return capturing;
}

st_status_t st_dev_sim_set_capturing(st_dev_stream_t *s, int capturing)
{
    st_dev_stream_t *got = st_sim_stream_get(s, "st_dev_sim_set_capturing");

    if (got == NULL) {
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&got->lock);
    __atomic_store_n(&got->capturing, capturing != 0, __ATOMIC_RELAXED);
    pthread_mutex_unlock(&got->lock);
    st_sim_stream_put(got);
    return ST_OK;
}

/* Sleeps until s completed ticket, at most timeout_us (< 0: no limit). */
static st_status_t st_sim_wait_ticket(st_dev_stream_t *s, uint64_t ticket, long timeout_us)
{
    struct timespec ts = {0, 0};
    st_status_t     status;

    if (timeout_us > 0) {
        long max_us = 1000000L * 3600 * 24 * 365; /* a year: no overflow of the deadline */
        ts          = st_sim_deadline(ST_MIN(timeout_us, max_us) * 1000L);
    }
    pthread_mutex_lock(&s->lock);
    while (s->done < ticket) {
        if (timeout_us < 0) {
            pthread_cond_wait(&s->progress, &s->lock);
        } else if (timeout_us == 0 || pthread_cond_clockwait(&s->progress, &s->lock,
                                                             CLOCK_MONOTONIC, &ts) == ETIMEDOUT) {
            break;
        }
    }
    status = (s->done >= ticket) ? ST_OK : ST_INPROGRESS;
    pthread_mutex_unlock(&s->lock);
    return status;
}

static st_status_t st_sim_stream_sync(st_dev_stream_t *s, long timeout_us)
{
    st_dev_stream_t *got = st_sim_stream_get(s, "stream_sync");
    st_status_t      status;
    uint64_t         ticket;

    if (got == NULL) {
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&got->lock);
    ticket = got->queued;
    pthread_mutex_unlock(&got->lock);
    status = st_sim_wait_ticket(got, ticket, timeout_us);
    st_sim_stream_put(got);
    return status;
}

/* ---- work queued on a stream ---- */

/* Queues cmd (taken: freed on failure) on s for what. */
static st_status_t st_sim_enqueue(st_dev_stream_t *s, st_sim_cmd_t *cmd, const char *what)
{
    st_dev_stream_t *got = st_sim_stream_get(s, what);

    if (got == NULL) {
        free(cmd);
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&got->lock);
    if (got->capturing) {
        pthread_mutex_unlock(&got->lock);
        st_sim_stream_put(got);
        free(cmd);
        st_error(ST_SUB_INIT, "%s on stream %p, which is being captured into a graph: refused "
                 "(a GPU would capture the work, not run it)", what, (void *)s);
        return ST_ERR_IO;
    }
    cmd->ticket = ++got->queued;
    if (got->tail != NULL) {
        got->tail->next = cmd;
    } else {
        got->head = cmd;
    }
    got->tail = cmd;
    pthread_cond_signal(&got->work);
    pthread_mutex_unlock(&got->lock);
    st_sim_stream_put(got);
    return ST_OK;
}

static st_sim_cmd_t *st_sim_cmd_new(st_sim_cmd_kind_t kind, const char *what)
{
    st_sim_cmd_t *cmd = calloc(1, sizeof(*cmd));

    if (cmd == NULL) {
        st_error(ST_SUB_INIT, "%s: out of memory for a simulated stream command", what);
        return NULL;
    }
    cmd->kind = kind;
    return cmd;
}

static st_status_t st_sim_copy_or_zero(st_sim_cmd_kind_t kind, void *dst, const void *src,
                                       size_t bytes, st_dev_stream_t *s, const char *what)
{
    st_sim_cmd_t *cmd;

    if (bytes > 0 && (dst == NULL || (kind == ST_SIM_CMD_COPY && src == NULL))) {
        st_error(ST_SUB_INIT, "%s of %zu bytes from %p to %p: a NULL pointer", what, bytes, src,
                 dst);
        return ST_ERR_INVALID;
    }
    cmd = st_sim_cmd_new(kind, what);
    if (cmd == NULL) {
        return ST_ERR_IO;
    }
    cmd->u.copy.dst   = dst;
    cmd->u.copy.src   = src;
    cmd->u.copy.bytes = bytes;
    return st_sim_enqueue(s, cmd, what);
}

static st_status_t st_sim_copy(void *dst, const void *src, size_t bytes, st_dev_stream_t *s)
{
    return st_sim_copy_or_zero(ST_SIM_CMD_COPY, dst, src, bytes, s, "copy");
}

static st_status_t st_sim_zero(void *dst, size_t bytes, st_dev_stream_t *s)
{
    return st_sim_copy_or_zero(ST_SIM_CMD_ZERO, dst, NULL, bytes, s, "zero");
}

static st_status_t st_sim_reduce(const st_reduce_job_t *job, st_dev_stream_t *s)
{
    st_sim_cmd_t *cmd;

    if (st_reduce_job_check(job) != ST_OK) {
        st_error(ST_SUB_INIT, "reduce: an invalid reduction job (%d sources, dtype %d, %zu "
                 "elements)", job ? job->nsrcs : 0, job ? (int)job->redop.dtype : -1,
                 job ? job->count : 0);
        return ST_ERR_INVALID;
    }
    cmd = st_sim_cmd_new(ST_SIM_CMD_REDUCE, "reduce");
    if (cmd == NULL) {
        return ST_ERR_IO;
    }
    cmd->u.job = *job;
    return st_sim_enqueue(s, cmd, "reduce");
}

static st_status_t st_sim_wait_value(st_dev_stream_t *s, uint64_t *word, uint64_t value)
{
    st_sim_cmd_t *cmd;
    long          i;

    /* what cuStreamWaitValue64 takes: an aligned word the device maps */
    pthread_mutex_lock(&st_sim_mem_lock);
    i = st_sim_mem_find((uintptr_t)word);
    pthread_mutex_unlock(&st_sim_mem_lock);
    if (word == NULL || ((uintptr_t)word & 7) != 0 || i < 0) {
        st_error(ST_SUB_INIT, "wait_value on %p: not an aligned word of host_alloc or device "
                 "memory", (void *)word);
        return ST_ERR_INVALID;
    }
    cmd = st_sim_cmd_new(ST_SIM_CMD_WAIT, "wait_value");
    if (cmd == NULL) {
        return ST_ERR_IO;
    }
    cmd->u.wait.word  = word;
    cmd->u.wait.value = value;
    return st_sim_enqueue(s, cmd, "wait_value");
}

/* ---- events ---- */

static st_status_t st_sim_event_create(st_dev_event_t **e_p)
{
    st_dev_event_t *e = calloc(1, sizeof(*e));

    if (e == NULL) {
        st_error(ST_SUB_INIT, "out of memory for a simulated event");
        return ST_ERR_NO_MEMORY;
    }
    e->magic = ST_SIM_EVENT_MAGIC;
    *e_p     = e;
    return ST_OK;
}

static int st_sim_event_ok(const st_dev_event_t *e, const char *what)
{
    if (e == NULL || e->magic != ST_SIM_EVENT_MAGIC) {
        st_error(ST_SUB_INIT, "%s: %p is not a live event of the simulated device", what,
                 (const void *)e);
        return 0;
    }
    return 1;
}

static void st_sim_event_destroy(st_dev_event_t *e)
{
    st_dev_stream_t *s;

    if (!st_sim_event_ok(e, "event_destroy")) {
        return;
    }
    pthread_mutex_lock(&st_sim_reg_lock);
    s        = e->s;
    e->magic = 0;
    pthread_mutex_unlock(&st_sim_reg_lock);
    if (s != NULL) {
        st_sim_stream_put(s);
    }
    free(e);
}

static st_status_t st_sim_event_record(st_dev_event_t *e, st_dev_stream_t *s)
{
    st_dev_stream_t *got, *old;
    uint64_t         ticket;

    if (!st_sim_event_ok(e, "event_record")) {
        return ST_ERR_INVALID;
    }
    got = st_sim_stream_get(s, "event_record");
    if (got == NULL) {
        return ST_ERR_INVALID;
    }
    pthread_mutex_lock(&got->lock);
    ticket = got->queued;
    pthread_mutex_unlock(&got->lock);
    pthread_mutex_lock(&st_sim_reg_lock);
    old       = e->s;
    e->s      = got; /* the reference taken moves to the event */
    e->ticket = ticket;
    pthread_mutex_unlock(&st_sim_reg_lock);
    if (old != NULL) {
        st_sim_stream_put(old);
    }
    return ST_OK;
}

static st_status_t st_sim_event_wait(st_dev_event_t *e, long timeout_us)
{
    st_dev_stream_t *s;
    st_status_t      status;
    uint64_t         ticket;

    if (!st_sim_event_ok(e, "event_wait")) {
        return ST_ERR_INVALID;
    }
    st_sim_init();
    pthread_mutex_lock(&st_sim_reg_lock);
    s      = e->s;
    ticket = e->ticket;
    if (s != NULL) {
        __atomic_add_fetch(&s->refs, 1, __ATOMIC_RELAXED);
    }
    pthread_mutex_unlock(&st_sim_reg_lock);
    if (s == NULL) {
        return ST_OK; /* never recorded */
    }
    if (s->gen != st_sim_gen) {
        /* the stream's thread stayed in the parent: its work will never complete here */
        st_error(ST_SUB_INIT, "event_wait: the event was recorded on stream %p before this "
                 "process was forked", (void *)s);
        status = ST_ERR_IO;
    } else {
        status = st_sim_wait_ticket(s, ticket, timeout_us);
    }
    st_sim_stream_put(s);
    return status;
}

const st_dev_ops_t st_dev_sim_ops = {
    .name             = "sim",
    .count            = st_sim_count,
    .current          = st_sim_current,
    .set_current      = st_sim_set_current,
    .ptr_type         = st_sim_ptr_type,
    .mem_alloc        = st_sim_mem_alloc,
    .mem_free         = st_sim_mem_free,
    .mem_alloc_shared = st_sim_mem_alloc_shared,
    .mem_free_shared  = st_sim_mem_free_shared,
    .mem_export       = st_sim_mem_export,
    .mem_import       = st_sim_mem_import,
    .mem_unimport     = st_sim_mem_unimport,
    .host_alloc       = st_sim_host_alloc,
    .host_free        = st_sim_host_free,
    .stream_create    = st_sim_stream_create,
    .stream_destroy   = st_sim_stream_destroy,
    .stream_capturing = st_sim_stream_capturing,
    .stream_sync      = st_sim_stream_sync,
    .copy             = st_sim_copy,
    .zero             = st_sim_zero,
    .reduce           = st_sim_reduce,
    .wait_value       = st_sim_wait_value,
    .write_value      = st_sim_write_value,
    .event_create     = st_sim_event_create,
    .event_destroy    = st_sim_event_destroy,
    .event_record     = st_sim_event_record,
    .event_wait       = st_sim_event_wait,
};
