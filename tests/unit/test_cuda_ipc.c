/*
 * test_cuda_ipc.c - unit tests of the device window transport (transports/cuda_ipc) on the
 * simulated device (STRATA_DEVICE=sim: device memory is memfd memory, exported and imported as a
 * file descriptor exactly as cuMem memory is).
 *
 * The device never crosses a fork (CUDA does not survive one, and the simulated device's stream
 * threads would not either), so the parent only forks and collects: every test's ranks run in
 * children, as processes of one node (one child per local rank) or as threads of one process
 * (one child, a thread per local rank: strataCommInitAll's ranks). A rank runs the sequence a
 * communicator runs (create, barrier, attach, barrier, unlink), writes its rank into its window
 * with the device's copy and reads every peer's the same way. A child exits 0, or 1 after
 * printing the failed condition; the barrier lives in an anonymous MAP_SHARED page and gives up
 * after a deadline or once a sibling failed, and every child has an alarm, so nothing hangs.
 * Leaks are counted where they would show: the entries of /proc/self/fd, and the abstract sockets
 * of /proc/net/unix under the test's names.
 */
#include "config.h"
#include "transports/cuda_ipc/cuda_ipc.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"

extern const st_win_ops_t st_cuda_ipc_win;

#define NRANKS       3
#define WIN_SIZE     (64 * 1024 + 100) /* not a whole number of pages */
#define MEM_SIZE     100000
#define BARRIER_SECS 10.0
#define CHILD_ALARM  60

/* ---------------------------------------------------------------------------------------------- */
/* Helpers: a barrier of processes or threads, forked ranks, leftovers                           */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    atomic_int    count;
    atomic_int    gen;
    atomic_int    failed;            /* a rank failed: stop waiting for it */
    atomic_ullong base[NRANKS];      /* each rank's own window as it sees it */
    st_win_memh_t memh;              /* the mem test's handle, owner to mapper */
} shared_t;

static shared_t *sh; /* anonymous MAP_SHARED page, made in main */

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sense-reversing barrier of n ranks (processes or threads). -1 after BARRIER_SECS or when a
 * sibling failed. */
static int barrier(int n)
{
    int    gen      = atomic_load(&sh->gen);
    double deadline = now() + BARRIER_SECS;

    if (atomic_fetch_add(&sh->count, 1) + 1 == n) {
        atomic_store(&sh->count, 0);
        atomic_fetch_add(&sh->gen, 1);
        return 0;
    }
    while (atomic_load(&sh->gen) == gen) {
        if (atomic_load(&sh->failed) || now() > deadline) {
            return -1;
        }
        usleep(100);
    }
    return 0;
}

/* In a rank: report the failed condition and return 1. */
#define CHILD_CHECK(_cond)                                                                       \
    do {                                                                                         \
        if (!(_cond)) {                                                                          \
            fprintf(stderr, "rank pid %d: %s:%d: check failed: %s\n", (int)getpid(), __FILE__,  \
                    __LINE__, #_cond);                                                           \
            atomic_store(&sh->failed, 1);                                                        \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

typedef int (*child_fn_t)(int lr, int n, const char *name);

/* Forks n children running fn(lr, n, name) and asserts each one exits with 0. */
static void run_children(int n, const char *name, child_fn_t fn)
{
    pid_t pids[NRANKS];
    int   wstatus;

    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    for (int lr = 0; lr < n; lr++) {
        pids[lr] = fork();
        assert_true(pids[lr] >= 0);
        if (pids[lr] == 0) {
            alarm(CHILD_ALARM);
            _exit(fn(lr, n, name));
        }
    }
    for (int lr = 0; lr < n; lr++) {
        assert_int_equal(waitpid(pids[lr], &wstatus, 0), pids[lr]);
        if (!WIFEXITED(wstatus)) {
            fprintf(stderr, "child %d killed by signal %d\n", lr, WTERMSIG(wstatus));
        }
        assert_true(WIFEXITED(wstatus));
        assert_int_equal(WEXITSTATUS(wstatus), 0);
    }
}

/* A window name unique to this test run. */
static void test_name(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "ut%d-%s", (int)getpid(), tag);
}

/* Open file descriptors of this process. */
static int count_fds(void)
{
    DIR *dir = opendir("/proc/self/fd");
    int  count = 0;

    if (dir == NULL) {
        return -1;
    }
    while (readdir(dir) != NULL) {
        count++;
    }
    closedir(dir);
    return count;
}

/* Abstract sockets of this network namespace whose name starts with prefix. */
static int count_sockets(const char *prefix)
{
    char  line[512], want[160];
    FILE *f = fopen("/proc/net/unix", "r");
    int   count = 0;

    if (f == NULL) {
        return -1;
    }
    snprintf(want, sizeof(want), " @%s", prefix);
    while (fgets(line, sizeof(line), f) != NULL) {
        count += strstr(line, want) != NULL;
    }
    fclose(f);
    return count;
}

static st_win_config_t win_config(const char *name, int lr, int n, size_t size)
{
    st_win_config_t cfg;

    memset(&cfg, 0, sizeof(cfg));
    snprintf(cfg.name, sizeof(cfg.name), "%s", name);
    cfg.local_rank = lr;
    cfg.local_size = n;
    cfg.size       = size;
    cfg.numa       = -1;
    return cfg;
}

/* The device, with one copy done on a stream of its own first: whatever the device opens for
 * good on first use is open before a test counts the fds. */
static const st_dev_ops_t *dev_warm(void)
{
    const st_dev_ops_t *dev = st_dev();
    st_dev_stream_t    *s;
    char                a = 1, b = 0;
    void               *d;

    if (dev == NULL || dev->stream_create(&s) != ST_OK) {
        return NULL;
    }
    if (dev->mem_alloc(64, &d) != ST_OK || dev->copy(d, &a, 1, s) != ST_OK ||
        dev->copy(&b, d, 1, s) != ST_OK || dev->stream_sync(s, 5000000) != ST_OK || b != 1) {
        return NULL;
    }
    dev->mem_free(d);
    dev->stream_destroy(s);
    return dev;
}

/* Copies bytes between host and device memory on s and waits. */
static int dev_copy(const st_dev_ops_t *dev, st_dev_stream_t *s, void *dst, const void *src,
                    size_t bytes)
{
    return dev->copy(dst, src, bytes, s) == ST_OK && dev->stream_sync(s, 5000000) == ST_OK;
}

static int all_bytes(const unsigned char *p, size_t len, unsigned char v)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != v) {
            return 0;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Windows                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* One local rank of a node of n (a process or a thread): create, attach, write its rank with the
 * device's copy, read every peer's, unlink, destroy. same_pid: the ranks are threads of one
 * process, so a peer's window must be its owner's own pointer. */
static int rank_body(int lr, int n, const char *name, int same_pid)
{
    const st_dev_ops_t *dev = st_dev();
    st_win_config_t     cfg = win_config(name, lr, n, WIN_SIZE);
    st_win_ctx_t       *ctx = NULL;
    st_dev_stream_t    *s;
    unsigned char      *host;
    char                sock[128];

    CHILD_CHECK(dev != NULL);
    CHILD_CHECK((host = malloc(WIN_SIZE)) != NULL);
    CHILD_CHECK(dev->stream_create(&s) == ST_OK);
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(st_cuda_ipc_win.base(ctx, lr) == NULL); /* before attach */
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_cuda_ipc_win.attach(ctx) == ST_OK);
    CHILD_CHECK(st_cuda_ipc_win.attach(ctx) == ST_OK); /* twice: harmless */
    CHILD_CHECK(st_cuda_ipc_win.base(ctx, -1) == NULL);
    CHILD_CHECK(st_cuda_ipc_win.base(ctx, n) == NULL);
    atomic_store(&sh->base[lr], (unsigned long long)(uintptr_t)st_cuda_ipc_win.base(ctx, lr));
    /* zero-filled, then the rank's byte everywhere */
    CHILD_CHECK(dev_copy(dev, s, host, st_cuda_ipc_win.base(ctx, lr), WIN_SIZE));
    CHILD_CHECK(all_bytes(host, WIN_SIZE, 0));
    memset(host, 0x10 + lr, WIN_SIZE);
    CHILD_CHECK(dev_copy(dev, s, st_cuda_ipc_win.base(ctx, lr), host, WIN_SIZE));
    CHILD_CHECK(barrier(n) == 0);
    st_cuda_ipc_win.unlink(ctx);
    st_cuda_ipc_win.unlink(ctx); /* twice: harmless */
    for (int peer = 0; peer < n; peer++) {
        void *b = st_cuda_ipc_win.base(ctx, peer);

        CHILD_CHECK(b != NULL);
        for (int other = 0; other < peer; other++) {
            CHILD_CHECK(b != st_cuda_ipc_win.base(ctx, other));
        }
        /* threads of one process: a peer's window is its owner's pointer (no import) */
        CHILD_CHECK(!same_pid || (uintptr_t)b == atomic_load(&sh->base[peer]));
        memset(host, 0, WIN_SIZE);
        CHILD_CHECK(dev_copy(dev, s, host, b, WIN_SIZE));
        CHILD_CHECK(all_bytes(host, WIN_SIZE, (unsigned char)(0x10 + peer)));
    }
    /* unlinked: the socket is gone (the mappings stay) */
    snprintf(sock, sizeof(sock), "strata-cipc-%s-%d", name, lr);
    CHILD_CHECK(count_sockets(sock) == 0);
    CHILD_CHECK(barrier(n) == 0); /* every rank has read before anyone frees */
    st_cuda_ipc_win.destroy(ctx);
    dev->stream_destroy(s);
    free(host);
    return 0;
}

static int child_window(int lr, int n, const char *name)
{
    int fds;

    CHILD_CHECK(dev_warm() != NULL);
    fds = count_fds();
    if (rank_body(lr, n, name, 0) != 0) {
        return 1;
    }
    CHILD_CHECK(count_fds() == fds);
    return 0;
}

static void test_processes(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "procs");
    run_children(NRANKS, name, child_window);
    assert_int_equal(count_sockets(name), 0);
}

typedef struct {
    int         lr;
    const char *name;
    int         ret;
} thread_rank_t;

static void *thread_rank_main(void *arg)
{
    thread_rank_t *t = arg;

    t->ret = rank_body(t->lr, NRANKS, t->name, 1);
    return NULL;
}

/* NRANKS threads of one process (strataCommInitAll's ranks) as one node. */
static int child_threads(int lr ST_UNUSED, int n ST_UNUSED, const char *name)
{
    pthread_t     th[NRANKS];
    thread_rank_t t[NRANKS];
    int           fds;

    CHILD_CHECK(dev_warm() != NULL);
    fds = count_fds();
    for (int r = 0; r < NRANKS; r++) {
        t[r] = (thread_rank_t){.lr = r, .name = name, .ret = 1};
        CHILD_CHECK(pthread_create(&th[r], NULL, thread_rank_main, &t[r]) == 0);
    }
    for (int r = 0; r < NRANKS; r++) {
        pthread_join(th[r], NULL);
    }
    for (int r = 0; r < NRANKS; r++) {
        CHILD_CHECK(t[r].ret == 0);
    }
    CHILD_CHECK(count_fds() == fds);
    return 0;
}

static void test_threads(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "threads");
    run_children(1, name, child_threads);
    assert_int_equal(count_sockets(name), 0);
}

/* Local ranks 0 and 1 of a node of 3 create; local rank 2 never does. Both must fail their attach
 * with ST_ERR_TIMEOUT within the wire-up deadline, naming local rank 2 and its socket, and leave
 * nothing behind. */
#define MISSING_TIMEOUT 1.0
static int child_missing(int lr, int n ST_UNUSED, const char *name)
{
    st_win_config_t cfg = win_config(name, lr, NRANKS, WIN_SIZE);
    st_win_ctx_t   *ctx = NULL;
    char            sock[128];
    double          t0, took;
    int             fds;

    CHILD_CHECK(dev_warm() != NULL);
    st_core_config.connect_timeout = MISSING_TIMEOUT; /* after anything that parses parameters */
    fds = count_fds();
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(barrier(2) == 0);
    t0   = now();
    CHILD_CHECK(st_cuda_ipc_win.attach(ctx) == ST_ERR_TIMEOUT);
    took = now() - t0;
    CHILD_CHECK(took >= MISSING_TIMEOUT - 0.1 && took < MISSING_TIMEOUT + 10.0); /* loaded CI */
    snprintf(sock, sizeof(sock), "@strata-cipc-%s-2", name);
    if (strstr(st_log_last_error(), "local rank 2") == NULL ||
        strstr(st_log_last_error(), sock) == NULL) {
        fprintf(stderr, "the error does not name local rank 2 and %s: %s\n", sock,
                st_log_last_error());
        CHILD_CHECK(0);
    }
    CHILD_CHECK(st_cuda_ipc_win.base(ctx, 0) == NULL); /* not attached */
    CHILD_CHECK(barrier(2) == 0); /* the other one has failed too before the windows go */
    st_cuda_ipc_win.destroy(ctx); /* without unlink: a failed init */
    snprintf(sock, sizeof(sock), "strata-cipc-%s-%d", name, lr);
    CHILD_CHECK(count_sockets(sock) == 0);
    CHILD_CHECK(count_fds() == fds);
    return 0;
}

static void test_missing_peer(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "missing");
    run_children(2, name, child_missing);
    assert_int_equal(count_sockets(name), 0);
}

/* Bad configurations are refused before anything is made. */
static int child_bad_config(int lr ST_UNUSED, int n ST_UNUSED, const char *name)
{
    st_win_config_t cfg;
    st_win_ctx_t   *ctx = NULL;

    CHILD_CHECK(dev_warm() != NULL);
    cfg = win_config(name, 0, 2, 0);
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_ERR_INVALID);
    cfg = win_config("bad/name", 0, 2, WIN_SIZE);
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_ERR_INVALID);
    cfg = win_config(name, 2, 2, WIN_SIZE);
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_ERR_INVALID);
    CHILD_CHECK(ctx == NULL);
    /* a name of 95 characters: too long for an abstract address as it is, still served */
    memset(&cfg, 0, sizeof(cfg));
    memset(cfg.name, 'x', sizeof(cfg.name) - 1);
    cfg.local_size = 1;
    cfg.size       = WIN_SIZE;
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(st_cuda_ipc_win.attach(ctx) == ST_OK);
    CHILD_CHECK(st_cuda_ipc_win.base(ctx, 0) != NULL);
    st_cuda_ipc_win.unlink(ctx);
    st_cuda_ipc_win.destroy(ctx);
    return 0;
}

static void test_bad_config(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "bad");
    run_children(1, name, child_bad_config);
}

/* Without a device (STRATA_DEVICE=none) the transport refuses what needs one and has nothing of
 * the rest. */
static int child_no_device(int lr ST_UNUSED, int n ST_UNUSED, const char *name)
{
    st_win_config_t cfg = win_config(name, 0, 2, WIN_SIZE);
    st_win_ctx_t   *ctx = NULL;
    st_win_memh_t   memh;
    st_cipc_memh_t  h;
    void           *ptr = NULL;
    int             x   = 0;

    setenv("STRATA_DEVICE", "none", 1); /* before the first st_dev() of this process */
    CHILD_CHECK(st_dev() == NULL);
    CHILD_CHECK(st_cuda_ipc_win.create(&cfg, &ctx) == ST_ERR_NO_DEVICE && ctx == NULL);
    CHILD_CHECK(strstr(st_log_last_error(), "no device") != NULL);
    CHILD_CHECK(st_cuda_ipc_win.mem_alloc(4096, &ptr) == ST_ERR_NO_DEVICE && ptr == NULL);
    CHILD_CHECK(st_cuda_ipc_win.mem_free(&x) == ST_ERR_INVALID);
    CHILD_CHECK(st_cuda_ipc_win.mem_pack(&x, sizeof(x), &memh, NULL) == 0);
    memset(&h, 0, sizeof(h));
    h.magic = ST_CIPC_MAGIC_MEM;
    h.pid   = (uint32_t)getppid();
    h.id    = 1;
    h.bytes = 4096;
    memcpy(memh.bytes, &h, sizeof(h));
    CHILD_CHECK(st_cuda_ipc_win.mem_map(&memh) == NULL);
    st_cuda_ipc_win.mem_unmap_all();
    return 0;
}

static void test_no_device(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "nodev");
    run_children(1, name, child_no_device);
}

/* ---------------------------------------------------------------------------------------------- */
/* Shareable device memory                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* lr 0 owns a buffer (mem_alloc, filled with the device's copy, mem_pack); lr 1, another
 * process, maps it and reads it, then sees it gone once the owner freed it. */
static int child_mem(int lr, int n ST_UNUSED, const char *name ST_UNUSED)
{
    const st_dev_ops_t *dev = dev_warm();
    st_dev_stream_t    *s;
    unsigned char      *host;
    char                sock[128];
    int                 fds;

    CHILD_CHECK(dev != NULL);
    CHILD_CHECK((host = malloc(MEM_SIZE)) != NULL);
    CHILD_CHECK(dev->stream_create(&s) == ST_OK);
    fds = count_fds();
    if (lr == 0) {
        st_win_memh_t memh, memh2;
        size_t        off = 0;
        char         *ptr = NULL, *other = NULL;

        CHILD_CHECK(st_cuda_ipc_win.mem_alloc(0, (void **)&ptr) == ST_ERR_INVALID);
        CHILD_CHECK(st_cuda_ipc_win.mem_alloc(MEM_SIZE, (void **)&ptr) == ST_OK);
        CHILD_CHECK(st_cuda_ipc_win.mem_alloc(MEM_SIZE, (void **)&other) == ST_OK);
        CHILD_CHECK(dev->ptr_type(ptr, NULL) == ST_DEV_PTR_DEVICE);
        CHILD_CHECK(dev_copy(dev, s, host, ptr, MEM_SIZE) && all_bytes(host, MEM_SIZE, 0));
        for (size_t i = 0; i < MEM_SIZE; i++) {
            host[i] = (unsigned char)(i * 7 + 3);
        }
        CHILD_CHECK(dev_copy(dev, s, ptr, host, MEM_SIZE));
        CHILD_CHECK(st_cuda_ipc_win.mem_pack(ptr + 100, 1000, &memh, &off) == 1 && off == 100);
        CHILD_CHECK(st_cuda_ipc_win.mem_pack(ptr, MEM_SIZE, &memh2, NULL) == 1);
        CHILD_CHECK(memcmp(&memh, &memh2, sizeof(memh)) == 0);
        CHILD_CHECK(st_cuda_ipc_win.mem_pack(ptr + 1, SIZE_MAX, NULL, NULL) == 0); /* past end */
        CHILD_CHECK(st_cuda_ipc_win.mem_pack(host, 16, NULL, NULL) == 0);          /* foreign */
        /* the owner's own handle maps to the allocation itself */
        CHILD_CHECK(st_cuda_ipc_win.mem_map(&memh) == ptr);
        memcpy(&sh->memh, &memh, sizeof(memh));
        CHILD_CHECK(barrier(2) == 0); /* handle published */
        CHILD_CHECK(barrier(2) == 0); /* the peer has read it */
        CHILD_CHECK(st_cuda_ipc_win.mem_free(host) == ST_ERR_INVALID);
        CHILD_CHECK(st_cuda_ipc_win.mem_free(ptr + 1) == ST_ERR_INVALID);
        CHILD_CHECK(st_cuda_ipc_win.mem_free(ptr) == ST_OK);
        CHILD_CHECK(st_cuda_ipc_win.mem_free(ptr) == ST_ERR_INVALID); /* twice */
        CHILD_CHECK(st_cuda_ipc_win.mem_map(&memh) == NULL);         /* freed */
        /* one left: still served */
        snprintf(sock, sizeof(sock), "strata-cipc-mem-%d-", (int)getpid());
        CHILD_CHECK(count_sockets(sock) == 1);
        CHILD_CHECK(barrier(2) == 0); /* freed */
        CHILD_CHECK(barrier(2) == 0); /* the peer was told so */
        /* none left: no socket, no fd */
        CHILD_CHECK(st_cuda_ipc_win.mem_free(other) == ST_OK);
        CHILD_CHECK(count_sockets(sock) == 0);
    } else {
        st_win_memh_t  bad;
        unsigned char *q;

        CHILD_CHECK(barrier(2) == 0);
        q = st_cuda_ipc_win.mem_map(&sh->memh);
        CHILD_CHECK(q != NULL);
        CHILD_CHECK(st_cuda_ipc_win.mem_map(&sh->memh) == q); /* cached */
        CHILD_CHECK(dev_copy(dev, s, host, q, MEM_SIZE));
        for (size_t i = 0; i < MEM_SIZE; i++) {
            CHILD_CHECK(host[i] == (unsigned char)(i * 7 + 3));
        }
        memset(&bad, 0, sizeof(bad));
        CHILD_CHECK(st_cuda_ipc_win.mem_map(&bad) == NULL);
        CHILD_CHECK(st_cuda_ipc_win.mem_free(q) == ST_ERR_INVALID); /* not ours */
        CHILD_CHECK(barrier(2) == 0);
        CHILD_CHECK(barrier(2) == 0); /* the owner freed it: a new mapping is refused */
        st_cuda_ipc_win.mem_unmap_all();
        CHILD_CHECK(st_cuda_ipc_win.mem_map(&sh->memh) == NULL);
        CHILD_CHECK(strstr(st_log_last_error(), "freed") != NULL);
        st_cuda_ipc_win.mem_unmap_all();
        CHILD_CHECK(barrier(2) == 0);
    }
    CHILD_CHECK(count_fds() == fds);
    dev->stream_destroy(s);
    free(host);
    return 0;
}

static void test_mem(void **state)
{
    run_children(2, "mem", child_mem);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_processes),
        cmocka_unit_test(test_threads),
        cmocka_unit_test(test_missing_peer),
        cmocka_unit_test(test_bad_config),
        cmocka_unit_test(test_no_device),
        cmocka_unit_test(test_mem),
    };

    /* before anything asks for the device: each child decides it anew */
    setenv("STRATA_DEVICE", "sim", 1);
    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
