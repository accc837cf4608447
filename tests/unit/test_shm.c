/*
 * test_shm.c - unit tests of the shm window transport (transports/shm/shm_win.c) and of the
 * shareable host memory behind strataMemAlloc (transports/shm/shm_mem.c), and of its cross-memory
 * attach read (peer_read: process_vm_readv) of a process's private memory.
 *
 * Windows are shared between processes, so most tests fork the local ranks of one "node": each
 * child runs the create / barrier / attach / barrier / unlink sequence a communicator runs, then
 * checks what it sees and exits with 0, or 1 after printing the failed condition. The parent
 * asserts every child's exit status. The barrier lives in an anonymous MAP_SHARED page and gives
 * up after a deadline or as soon as a sibling has failed, and every child has an alarm, so a
 * failing test never hangs. Segment names carry the parent's pid; after each test the parent
 * counts what is left in /dev/shm under the test's name (the assertion) and unlinks it (the
 * cleanup, also after a failure).
 */
#include "config.h"
#include "transports/shm/shm.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/statvfs.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

extern const st_win_ops_t st_shm_win;

#define MAX_RANKS    4
#define WIN_SIZE     (64 * 1024 + 100) /* not a whole number of pages */
#define BARRIER_SECS 10.0
#define CHILD_ALARM  30

/* ---------------------------------------------------------------------------------------------- */
/* Helpers: time, a process-shared barrier, forked ranks, /dev/shm leftovers                      */
/* ---------------------------------------------------------------------------------------------- */

typedef struct {
    atomic_int  count;
    atomic_int  gen;
    atomic_int  failed;               /* a child failed: stop waiting for it */
    atomic_uint word;                 /* free for a test */
    uint64_t    value[MAX_RANKS];     /* free for a test */
} shared_t;

static shared_t *sh; /* anonymous MAP_SHARED page, made in main */

static double now(void)
{
    struct timespec ts;

    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + 1e-9 * (double)ts.tv_nsec;
}

/* Sense-reversing barrier of n processes. -1 after BARRIER_SECS or when a sibling failed. */
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

/* In a child: report the failed condition and return 1 (the exit status). */
#define CHILD_CHECK(_cond)                                                                       \
    do {                                                                                         \
        if (!(_cond)) {                                                                          \
            fprintf(stderr, "child %d: %s:%d: check failed: %s\n", (int)getpid(), __FILE__,     \
                    __LINE__, #_cond);                                                           \
            atomic_store(&sh->failed, 1);                                                        \
            return 1;                                                                            \
        }                                                                                        \
    } while (0)

typedef int (*child_fn_t)(int lr, int n, const char *name);

/* Forks n children running fn(lr, n, name) and asserts each one exits with 0. */
static void run_ranks(int n, const char *name, child_fn_t fn)
{
    pid_t pids[MAX_RANKS];
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
            fprintf(stderr, "rank %d killed by signal %d\n", lr, WTERMSIG(wstatus));
        }
        assert_true(WIFEXITED(wstatus));
        assert_int_equal(WEXITSTATUS(wstatus), 0);
    }
}

/* Names of the windows the running test made, for the teardown's cleanup. */
static char names_used[4][96];
static int  nnames_used;

static void track_name(const char *name)
{
    if (nnames_used < (int)(sizeof(names_used) / sizeof(names_used[0]))) {
        snprintf(names_used[nnames_used++], sizeof(names_used[0]), "%s", name);
    }
}

/* A window name unique to this test run ("ut<pid>-<tag>"), cleaned up after the test. */
static void test_name(char *buf, size_t len, const char *tag)
{
    snprintf(buf, len, "ut%d-%s", (int)getpid(), tag);
    track_name(buf);
}

/* Entries of /dev/shm belonging to window name. */
static int count_segments(const char *name)
{
    char           prefix[160];
    struct dirent *de;
    DIR           *dir;
    int            count = 0;

    snprintf(prefix, sizeof(prefix), "strata-%.95s-", name);
    dir = opendir("/dev/shm");
    if (dir == NULL) {
        return 0;
    }
    while ((de = readdir(dir)) != NULL) {
        count += strncmp(de->d_name, prefix, strlen(prefix)) == 0;
    }
    closedir(dir);
    return count;
}

/* Removes every segment of name (the cleanup after a failure) and returns how many there were. */
static int remove_segments(const char *name)
{
    int  count = count_segments(name);
    char seg[160];

    for (int lr = 0; lr < MAX_RANKS; lr++) {
        snprintf(seg, sizeof(seg), "/strata-%.95s-%d", name, lr);
        shm_unlink(seg);
    }
    return count;
}

/* Every test's teardown: what a failed test left behind goes, whatever the failure was. Runs after
 * the test's own assertions on what is left, so it never hides a leak from them. */
static int cleanup(void **state)
{
    atomic_store(&sh->failed, 1); /* children still running (after a failed assert) give up */
    for (int i = 0; i < nnames_used; i++) {
        remove_segments(names_used[i]);
    }
    nnames_used = 0;
    st_shm_win.mem_unmap_all();
    return 0;
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

/* The byte rank lr writes at offset i of its window under tag. */
static uint8_t pattern(int tag, int lr, size_t i)
{
    return (uint8_t)(tag * 31 + lr * 7 + i * 13 + 1);
}

static int all_zero(const uint8_t *p, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != 0) {
            return 0;
        }
    }
    return 1;
}

static int has_pattern(const uint8_t *p, size_t len, int tag, int lr)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pattern(tag, lr, i)) {
            return 0;
        }
    }
    return 1;
}

/* ---------------------------------------------------------------------------------------------- */
/* Windows                                                                                        */
/* ---------------------------------------------------------------------------------------------- */

/* The communicator's sequence; every rank checks every window, before and after unlink. */
static int child_share(int lr, int n, const char *name)
{
    st_win_config_t cfg = win_config(name, lr, n, WIN_SIZE);
    st_win_ctx_t   *ctx;
    uint8_t        *own;

    cfg.numa = (lr == 1) ? 0 : -1; /* one rank through the (best effort) binding */
    CHILD_CHECK(st_shm_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(st_shm_win.base(ctx, lr) == NULL); /* before attach */
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_shm_win.attach(ctx) == ST_OK);
    CHILD_CHECK(st_shm_win.attach(ctx) == ST_OK); /* twice: harmless */
    CHILD_CHECK(st_shm_win.base(ctx, -1) == NULL);
    CHILD_CHECK(st_shm_win.base(ctx, n) == NULL);
    for (int peer = 0; peer < n; peer++) {
        CHILD_CHECK(st_shm_win.base(ctx, peer) != NULL);
        for (int other = 0; other < peer; other++) {
            CHILD_CHECK(st_shm_win.base(ctx, peer) != st_shm_win.base(ctx, other));
        }
    }
    own = st_shm_win.base(ctx, lr);
    CHILD_CHECK(all_zero(own, WIN_SIZE));
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.unlink(ctx);
    st_shm_win.unlink(ctx); /* twice: harmless */
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(count_segments(name) == 0); /* every rank unlinked; the mappings live on */

    for (size_t i = 0; i < WIN_SIZE; i++) {
        own[i] = pattern(0, lr, i);
    }
    CHILD_CHECK(barrier(n) == 0);
    for (int peer = 0; peer < n; peer++) {
        CHILD_CHECK(has_pattern(st_shm_win.base(ctx, peer), WIN_SIZE, 0, peer));
    }
    /* writes go both ways: rank lr writes into its successor's window */
    CHILD_CHECK(barrier(n) == 0);
    memset(st_shm_win.base(ctx, (lr + 1) % n), 0xe0 + lr, 64);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(own[0] == (uint8_t)(0xe0 + (lr + n - 1) % n));
    CHILD_CHECK(own[63] == (uint8_t)(0xe0 + (lr + n - 1) % n));
    CHILD_CHECK(own[64] == pattern(0, lr, 64));
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.destroy(ctx);
    return 0;
}

static void test_win_share_2(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "share2");
    run_ranks(2, name, child_share);
    assert_int_equal(remove_segments(name), 0);
}

static void test_win_share_3(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "share3");
    run_ranks(3, name, child_share);
    assert_int_equal(remove_segments(name), 0);
}

/* One local rank: attach maps nothing, the own window is there. */
static void test_win_single(void **state)
{
    char            name[64];
    st_win_config_t cfg;
    st_win_ctx_t   *ctx;

    test_name(name, sizeof(name), "single");
    cfg = win_config(name, 0, 1, 1);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
    assert_int_equal(count_segments(name), 1);
    assert_int_equal(st_shm_win.attach(ctx), ST_OK);
    assert_non_null(st_shm_win.base(ctx, 0));
    assert_null(st_shm_win.base(ctx, 1));
    *(uint8_t *)st_shm_win.base(ctx, 0) = 5;
    st_shm_win.unlink(ctx);
    assert_int_equal(count_segments(name), 0);
    assert_int_equal(*(uint8_t *)st_shm_win.base(ctx, 0), 5);
    st_shm_win.destroy(ctx);
    assert_int_equal(remove_segments(name), 0);
}

/* Waiter: rank 0, on a word of rank 1's window (its own mapping of it, at another address than
 * rank 1's); rank 1 stores and wakes 100 ms after the barrier. */
static int child_wait_wake(int lr, int n, const char *name)
{
    st_win_config_t cfg = win_config(name, lr, n, WIN_SIZE);
    st_win_ctx_t   *ctx;
    uint32_t       *word;
    double          t0, elapsed;
    int             calls = 0;

    CHILD_CHECK(st_shm_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_shm_win.attach(ctx) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.unlink(ctx);
    word = (uint32_t *)((char *)st_shm_win.base(ctx, 1) + 4096 + 64);
    CHILD_CHECK(barrier(n) == 0);
    if (lr == 0) {
        t0 = now();
        while (__atomic_load_n(word, __ATOMIC_ACQUIRE) == 0 && now() - t0 < 5.0) {
            st_shm_win.wait(ctx, word, 0, 5000000);
            calls++;
        }
        elapsed = now() - t0;
        CHILD_CHECK(__atomic_load_n(word, __ATOMIC_ACQUIRE) == 17);
        CHILD_CHECK(elapsed < 2.0);  /* woken, not timed out */
        CHILD_CHECK(elapsed > 0.05); /* it did wait for the store */
        CHILD_CHECK(calls <= 3);     /* it slept; spinning would take thousands of calls */

        /* the value differs already: back at once */
        t0 = now();
        st_shm_win.wait(ctx, word, 0, 5000000);
        CHILD_CHECK(now() - t0 < 0.1);
    } else {
        usleep(100000);
        __atomic_store_n(word, 17, __ATOMIC_RELEASE);
        st_shm_win.wake(ctx, word);
    }
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.destroy(ctx);
    return 0;
}

static void test_win_wait_wake(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "wake");
    run_ranks(2, name, child_wait_wake);
    assert_int_equal(remove_segments(name), 0);
}

/* In one process: the timeout is in microseconds; a differing value or no time returns at once. */
static void test_win_wait_timeout(void **state)
{
    char            name[64];
    st_win_config_t cfg;
    st_win_ctx_t   *ctx;
    uint32_t       *word;
    double          t0, elapsed;

    test_name(name, sizeof(name), "timeout");
    cfg = win_config(name, 0, 1, 4096);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
    assert_int_equal(st_shm_win.attach(ctx), ST_OK);
    word = st_shm_win.base(ctx, 0);

    t0 = now();
    st_shm_win.wait(ctx, word, 0, 200000);
    elapsed = now() - t0;
    assert_true(elapsed > 0.15);
    assert_true(elapsed < 2.0);

    *word = 7;
    t0    = now();
    st_shm_win.wait(ctx, word, 3, 5000000);
    assert_true(now() - t0 < 0.1);

    t0 = now();
    st_shm_win.wait(ctx, word, 7, 0);
    assert_true(now() - t0 < 0.1);

    st_shm_win.wake(ctx, word); /* nobody waits: harmless */
    st_shm_win.destroy(ctx);
    assert_int_equal(remove_segments(name), 0);
}

/* Rank 1 was given another size: both attaches fail with ST_ERR_IO; destroy leaves nothing. */
static int child_wrong_size(int lr, int n, const char *name)
{
    st_win_config_t cfg = win_config(name, lr, n, lr == 1 ? 2 * WIN_SIZE : WIN_SIZE);
    st_win_ctx_t   *ctx;

    CHILD_CHECK(st_shm_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_shm_win.attach(ctx) == ST_ERR_IO);
    CHILD_CHECK(st_shm_win.base(ctx, 0) == NULL);
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.destroy(ctx);
    return 0;
}

static void test_win_wrong_size(void **state)
{
    char name[64];

    test_name(name, sizeof(name), "size");
    run_ranks(2, name, child_wrong_size);
    assert_int_equal(remove_segments(name), 0);
}

/* A peer that never created its window: ST_ERR_IO; a later attach after it did succeeds. */
static void test_win_missing_peer(void **state)
{
    char            name[64];
    st_win_config_t cfg0, cfg1;
    st_win_ctx_t   *ctx0, *ctx1;

    test_name(name, sizeof(name), "missing");
    cfg0 = win_config(name, 0, 3, WIN_SIZE);
    cfg1 = win_config(name, 1, 3, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg0, &ctx0), ST_OK);
    assert_int_equal(st_shm_win.create(&cfg1, &ctx1), ST_OK);
    assert_int_equal(st_shm_win.attach(ctx0), ST_ERR_IO); /* local rank 2 is missing */
    assert_null(st_shm_win.base(ctx0, 1));
    st_shm_win.destroy(ctx1);
    st_shm_win.destroy(ctx0);
    assert_int_equal(remove_segments(name), 0);
}

/* The same name and local rank twice: the second create fails; the first window is intact. */
static void test_win_exists(void **state)
{
    char            name[64];
    st_win_config_t cfg;
    st_win_ctx_t   *ctx, *ctx2 = (st_win_ctx_t *)&ctx;

    test_name(name, sizeof(name), "exists");
    cfg = win_config(name, 0, 1, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
    assert_int_equal(st_shm_win.create(&cfg, &ctx2), ST_ERR_IO);
    assert_ptr_equal(ctx2, (st_win_ctx_t *)&ctx); /* output untouched on failure */
    assert_int_equal(count_segments(name), 1);
    assert_int_equal(st_shm_win.attach(ctx), ST_OK);
    assert_non_null(st_shm_win.base(ctx, 0));
    st_shm_win.destroy(ctx);
    assert_int_equal(remove_segments(name), 0);
}

static void test_win_invalid(void **state)
{
    static const char *const bad[] = {"", "a/b", "a b", "a.b", "../x", "na\xc3\xafve", "x%d"};
    char                     name[64];
    st_win_config_t          cfg;
    st_win_ctx_t            *ctx = NULL;

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        cfg = win_config(bad[i], 0, 1, WIN_SIZE);
        assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
        assert_null(ctx);
    }
    /* all 96 bytes used: no terminating NUL */
    test_name(name, sizeof(name), "long");
    cfg = win_config(name, 0, 1, WIN_SIZE);
    memset(cfg.name + strlen(name), 'a', sizeof(cfg.name) - strlen(name));
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
    /* the longest valid name */
    cfg.name[sizeof(cfg.name) - 1] = '\0';
    track_name(cfg.name);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
    st_shm_win.destroy(ctx);
    assert_int_equal(remove_segments(cfg.name), 0);
    ctx = NULL;

    test_name(name, sizeof(name), "invalid");
    cfg = win_config(name, 0, 1, 0);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
    cfg = win_config(name, 1, 1, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
    cfg = win_config(name, -1, 2, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
    cfg = win_config(name, 0, 0, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_INVALID);
    assert_null(ctx);
    assert_int_equal(remove_segments(name), 0);
}

/* Two communicators on the same ranks: each window shows only its own communicator's data. */
static int child_two_names(int lr, int n, const char *name)
{
    char            name_b[96];
    st_win_config_t cfg_a = win_config(name, lr, n, WIN_SIZE);
    st_win_config_t cfg_b;
    st_win_ctx_t   *a, *b;

    snprintf(name_b, sizeof(name_b), "%s-b", name);
    cfg_b = win_config(name_b, lr, n, WIN_SIZE);
    CHILD_CHECK(st_shm_win.create(&cfg_a, &a) == ST_OK);
    CHILD_CHECK(st_shm_win.create(&cfg_b, &b) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_shm_win.attach(a) == ST_OK);
    CHILD_CHECK(st_shm_win.attach(b) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.unlink(a);
    st_shm_win.unlink(b);
    for (size_t i = 0; i < WIN_SIZE; i++) {
        ((uint8_t *)st_shm_win.base(a, lr))[i] = pattern(1, lr, i);
        ((uint8_t *)st_shm_win.base(b, lr))[i] = pattern(2, lr, i);
    }
    CHILD_CHECK(barrier(n) == 0);
    for (int peer = 0; peer < n; peer++) {
        CHILD_CHECK(has_pattern(st_shm_win.base(a, peer), WIN_SIZE, 1, peer));
        CHILD_CHECK(has_pattern(st_shm_win.base(b, peer), WIN_SIZE, 2, peer));
    }
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.destroy(b);
    st_shm_win.destroy(a);
    return 0;
}

static void test_win_two_names(void **state)
{
    char name[64], name_b[96];

    test_name(name, sizeof(name), "two");
    snprintf(name_b, sizeof(name_b), "%s-b", name);
    track_name(name_b);
    run_ranks(2, name, child_two_names);
    assert_int_equal(remove_segments(name), 0);
    assert_int_equal(remove_segments(name_b), 0);
}

/* destroy without unlink, after attach and before it: nothing is left in /dev/shm. */
static int child_destroy_linked(int lr, int n, const char *name)
{
    st_win_config_t cfg = win_config(name, lr, n, WIN_SIZE);
    st_win_ctx_t   *ctx;

    CHILD_CHECK(st_shm_win.create(&cfg, &ctx) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(st_shm_win.attach(ctx) == ST_OK);
    CHILD_CHECK(barrier(n) == 0);
    CHILD_CHECK(count_segments(name) == n); /* not unlinked yet */
    CHILD_CHECK(barrier(n) == 0);
    st_shm_win.destroy(ctx);
    return 0;
}

static void test_win_destroy_linked(void **state)
{
    char            name[64];
    st_win_config_t cfg;
    st_win_ctx_t   *ctx;

    test_name(name, sizeof(name), "destroy");
    run_ranks(2, name, child_destroy_linked);
    assert_int_equal(remove_segments(name), 0);

    cfg = win_config(name, 0, 2, WIN_SIZE);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
    st_shm_win.destroy(ctx); /* never attached */
    assert_int_equal(remove_segments(name), 0);
}

/* NUMA placement is best effort: a node this machine lacks still gives a working window. */
static void test_win_numa(void **state)
{
    char            name[64];
    st_win_config_t cfg;
    st_win_ctx_t   *ctx;

    test_name(name, sizeof(name), "numa");
    for (int numa = 0; numa <= 1; numa++) {
        cfg      = win_config(name, 0, 1, WIN_SIZE);
        cfg.numa = numa == 0 ? 0 : 100000;
        assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_OK);
        assert_int_equal(st_shm_win.attach(ctx), ST_OK);
        assert_true(all_zero(st_shm_win.base(ctx, 0), WIN_SIZE));
        memset(st_shm_win.base(ctx, 0), 1, WIN_SIZE);
        st_shm_win.destroy(ctx);
        assert_int_equal(remove_segments(name), 0);
    }
}

/* A window larger than /dev/shm: ST_ERR_NO_MEMORY at create, no SIGBUS later, nothing left. */
static void test_win_too_large(void **state)
{
    char            name[64];
    struct statvfs  vfs;
    st_win_config_t cfg;
    st_win_ctx_t   *ctx = NULL;

    if (statvfs("/dev/shm", &vfs) != 0 || vfs.f_blocks == 0) {
        skip(); /* no /dev/shm, or one without a size limit */
    }
    test_name(name, sizeof(name), "large");
    cfg = win_config(name, 0, 1, (size_t)vfs.f_blocks * vfs.f_frsize + (size_t)1024 * 1024 * 1024);
    assert_int_equal(st_shm_win.create(&cfg, &ctx), ST_ERR_NO_MEMORY);
    assert_null(ctx);
    assert_int_equal(remove_segments(name), 0);
}

/* ---------------------------------------------------------------------------------------------- */
/* Shareable memory                                                                               */
/* ---------------------------------------------------------------------------------------------- */

static void test_mem_alloc_lookup(void **state)
{
    size_t          page = (size_t)sysconf(_SC_PAGESIZE);
    size_t          size = 3 * page + 10, mapped = 4 * page, offset = 12345;
    st_win_memh_t   h, h2;
    st_shm_memh_t   hh, hh2;
    uint8_t        *p, *q;
    void           *heap;
    int             local;

    assert_int_equal(st_shm_win.mem_alloc(size, (void **)&p), ST_OK);
    assert_non_null(p);
    assert_int_equal((uintptr_t)p % page, 0);
    assert_true(all_zero(p, mapped));
    memset(p, 0x5a, mapped); /* the whole rounded size is usable */

    memset(&h, 0, sizeof(h));
    assert_int_equal(st_shm_win.mem_pack(p + 100, 200, &h, &offset), 1);
    assert_int_equal(offset, 100);
    memcpy(&hh, h.bytes, sizeof(hh));
    assert_int_equal(hh.pid, (uint32_t)getpid());
    assert_true(hh.fd >= 0);
    assert_int_equal(hh.size, mapped);
    assert_int_equal(st_shm_win.mem_pack(p, mapped, &h2, &offset), 1); /* all of it */
    assert_int_equal(offset, 0);
    assert_memory_equal(&h, &h2, sizeof(h));
    assert_int_equal(st_shm_win.mem_pack(p + mapped - 10, 10, &h2, &offset), 1); /* up to the end */
    assert_int_equal(offset, mapped - 10);

    offset = 777;
    assert_int_equal(st_shm_win.mem_pack(p + mapped - 10, 11, &h2, &offset), 0); /* straddles the end */
    assert_int_equal(st_shm_win.mem_pack(p + mapped, 1, &h2, &offset), 0);       /* just after */
    assert_int_equal(st_shm_win.mem_pack(p - 1, 2, &h2, &offset), 0);            /* just before */
    assert_int_equal(st_shm_win.mem_pack(p + 1, SIZE_MAX, &h2, &offset), 0);     /* no wrap-around */
    assert_int_equal(st_shm_win.mem_pack(&local, sizeof(local), &h2, &offset), 0);
    heap = malloc(64);
    assert_non_null(heap);
    assert_int_equal(st_shm_win.mem_pack(heap, 64, &h2, &offset), 0);
    assert_int_equal(offset, 777); /* outputs untouched */

    /* a second allocation: another id and fd, lookups tell them apart */
    assert_int_equal(st_shm_win.mem_alloc(1, (void **)&q), ST_OK);
    assert_int_equal(st_shm_win.mem_pack(q, 1, &h2, &offset), 1);
    memcpy(&hh2, h2.bytes, sizeof(hh2));
    assert_true(hh2.id != hh.id);
    assert_true(hh2.fd != hh.fd);
    assert_int_equal(hh2.size, page);

    /* in the owner itself, map gives the allocation back */
    assert_ptr_equal(st_shm_win.mem_map(&h), p);

    assert_int_equal(st_shm_win.mem_free(heap), ST_ERR_INVALID);  /* foreign */
    assert_int_equal(st_shm_win.mem_free(p + 1), ST_ERR_INVALID); /* inside, not the start */
    assert_int_equal(st_shm_win.mem_free(NULL), ST_ERR_INVALID);
    assert_int_equal(st_shm_win.mem_pack(p, 1, &h2, &offset), 1); /* nothing was freed */
    assert_int_equal(st_shm_win.mem_free(p), ST_OK);
    assert_int_equal(st_shm_win.mem_pack(p, 1, &h2, &offset), 0);
    assert_int_equal(st_shm_win.mem_free(p), ST_ERR_INVALID); /* twice */
    assert_null(st_shm_win.mem_map(&h));                      /* freed: this process has it no more */
    assert_int_equal(st_shm_win.mem_free(q), ST_OK);
    free(heap);
}

static void test_mem_invalid(void **state)
{
    void *p = (void *)&p;

    assert_int_equal(st_shm_win.mem_alloc(0, &p), ST_ERR_INVALID);
    assert_ptr_equal(p, (void *)&p); /* untouched */
    assert_int_equal(st_shm_win.mem_alloc(16, NULL), ST_ERR_INVALID);
    assert_int_equal(st_shm_win.mem_alloc(SIZE_MAX, &p), ST_ERR_NO_MEMORY);
    assert_ptr_equal(p, (void *)&p);
    assert_int_equal(st_shm_win.mem_pack(NULL, 1, NULL, NULL), 0);
}

/* More than the machine can back (2^40 B, 2^50 B) is refused before a page is committed, naming
 * the limit; the process lives on (issue 16: posix_fallocate had the OOM killer end it). */
static void test_mem_too_much(void **state)
{
    void *p = (void *)&p;

    for (int shift = 40; shift <= 50; shift += 10) {
        assert_int_equal(st_shm_win.mem_alloc((size_t)1 << shift, &p), ST_ERR_NO_MEMORY);
        assert_ptr_equal(p, (void *)&p);
        assert_non_null(strstr(st_log_last_error(), "cannot be backed"));
    }
    assert_int_equal(st_shm_win.mem_alloc(1 << 20, &p), ST_OK); /* and a sane size still works */
    assert_int_equal(st_shm_win.mem_free(p), ST_OK);
}

/* The same inside a memory cgroup of 256 MiB (v1 or v2, made here when the kernel lets root do
 * so): 512 MiB is refused naming the cgroup, 32 MiB works; the child is not killed. */
static void test_mem_cgroup(void **state)
{
    char   cg[600] = "", line[512], path[700], procs[760];
    int    v2 = 0, status = 0;
    pid_t  child;
    FILE  *f = fopen("/proc/self/cgroup", "r");

    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        char *q = strrchr(line, ':');

        line[strcspn(line, "\n")] = '\0';
        if (strstr(line, ":memory:") != NULL && q != NULL) {
            snprintf(cg, sizeof(cg), "/sys/fs/cgroup/memory%s", q + 1);
            break;
        }
        if (strncmp(line, "0::", 3) == 0 && access("/sys/fs/cgroup/cgroup.controllers", F_OK) == 0) {
            snprintf(cg, sizeof(cg), "/sys/fs/cgroup%s", line + 3);
            v2 = 1;
        }
    }
    if (f != NULL) {
        fclose(f);
    }
    snprintf(path, sizeof(path), "%s/strata-test-%d", cg, (int)getpid());
    if (cg[0] == '\0' || mkdir(path, 0755) != 0) {
        fprintf(stderr, "SKIPPED: no memory cgroup can be made here (%s: %s)\n", path,
                strerror(errno));
        skip();
    }
    snprintf(procs, sizeof(procs), "%s/%s", path, v2 ? "memory.max" : "memory.limit_in_bytes");
    f = fopen(procs, "w");
    if (f == NULL || fprintf(f, "%d\n", 256 << 20) < 0 || fclose(f) != 0) {
        rmdir(path);
        fprintf(stderr, "SKIPPED: cannot set the cgroup's limit (%s)\n", procs);
        skip();
    }
    snprintf(procs, sizeof(procs), "%s/cgroup.procs", path);
    child = fork();
    assert_true(child >= 0);
    if (child == 0) {
        void *p = NULL;

        f = fopen(procs, "w");
        if (f == NULL || fprintf(f, "%d\n", (int)getpid()) < 0 || fclose(f) != 0) {
            _exit(3);
        }
        if (st_shm_win.mem_alloc((size_t)512 << 20, &p) != ST_ERR_NO_MEMORY ||
            strstr(st_log_last_error(), "memory cgroup") == NULL) {
            _exit(4);
        }
        if (st_shm_win.mem_alloc((size_t)32 << 20, &p) != ST_OK || st_shm_win.mem_free(p) != ST_OK) {
            _exit(5);
        }
        _exit(0);
    }
    waitpid(child, &status, 0);
    rmdir(path);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

/* A forked child maps the parent's allocation by its handle, through /proc: a new mapping of the
 * same memory (not the copy fork inherited), which sees the parent's bytes and writes into them. */
static void test_mem_map_child(void **state)
{
    size_t          size = 100000;
    st_win_memh_t   h;
    st_shm_memh_t   hh;
    size_t          offset;
    uint8_t        *p;
    pid_t           pid;
    int             wstatus;

    assert_int_equal(st_shm_win.mem_alloc(size, (void **)&p), ST_OK);
    for (size_t i = 0; i < size; i++) {
        p[i] = pattern(3, 0, i);
    }
    assert_int_equal(st_shm_win.mem_pack(p + 5000, 1000, &h, &offset), 1);
    assert_int_equal(offset, 5000);
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        uint8_t *m, *m2;
        int      fail = 0;

        alarm(CHILD_ALARM);
        m    = st_shm_win.mem_map(&h);
        m2   = st_shm_win.mem_map(&h); /* cached */
        fail = m == NULL || m == p || m2 != m || !has_pattern(m, size, 3, 0);
        if (!fail) {
            memset(m + offset, 0xc3, 1000);
        }
        st_shm_win.mem_unmap_all();
        _exit(fail);
    }
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);
    for (size_t i = 0; i < 1000; i++) {
        assert_int_equal(p[offset + i], 0xc3);
    }
    assert_int_equal(p[offset - 1], pattern(3, 0, offset - 1));
    assert_int_equal(p[offset + 1000], pattern(3, 0, offset + 1000));

    /* a handle of a process that is gone: NULL, every time */
    memcpy(&hh, h.bytes, sizeof(hh));
    hh.pid = (uint32_t)pid;
    memcpy(h.bytes, &hh, sizeof(hh));
    assert_null(st_shm_win.mem_map(&h));
    assert_null(st_shm_win.mem_map(&h));
    st_shm_win.mem_unmap_all();
    assert_int_equal(st_shm_win.mem_free(p), ST_OK);
}

/* peer_read and peer_write: this process's own memory, a forked child's private copy of a buffer
 * (the same address, other bytes: read, then overwritten by the parent and checked by the child),
 * and the errors: a process that is gone and an unmapped address are ST_ERR_IO. A kernel that
 * refuses process_vm_readv here (seccomp) skips the test. */
static void test_peer_read(void **state)
{
    size_t   size = (1 << 20) + 13;
    uint8_t *buf = malloc(size), *dst = malloc(size);
    void    *hole;
    pid_t    pid;
    int      wstatus;

    assert_non_null(buf);
    assert_non_null(dst);
    for (size_t i = 0; i < size; i++) {
        buf[i] = pattern(1, 0, i);
    }
    assert_int_equal(st_shm_win.peer_read((int)getpid(), dst, buf, 0), ST_OK);
    if (st_shm_win.peer_read((int)getpid(), dst, buf + 1, size - 1) == ST_ERR_UNSUPPORTED) {
        free(buf);
        free(dst);
        skip(); /* cross-memory attach is off in this sandbox */
    }
    assert_memory_equal(dst, buf + 1, size - 1);

    /* a child changes its copy of buf and waits; the parent reads the child's bytes */
    memset(sh, 0, sizeof(*sh));
    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        alarm(CHILD_ALARM);
        for (size_t i = 0; i < size; i++) {
            buf[i] = pattern(2, 1, i);
        }
        /* the parent reads, then writes pattern (3, 2) over the middle of the copy */
        _exit(barrier(2) != 0 || barrier(2) != 0 || !has_pattern(buf + 7, size - 14, 3, 2) ||
              buf[6] != pattern(2, 1, 6) || buf[size - 7] != pattern(2, 1, size - 7));
    }
    assert_int_equal(barrier(2), 0);
    memset(dst, 0, size);
    assert_int_equal(st_shm_win.peer_read((int)pid, dst, buf, size), ST_OK);
    assert_true(has_pattern(dst, size, 2, 1));
    assert_true(has_pattern(buf, size, 1, 0)); /* the own copy is untouched */
    for (size_t i = 0; i < size - 14; i++) {
        dst[i] = pattern(3, 2, i);
    }
    if (st_shm_win.peer_write((int)pid, buf + 7, dst, 7) == ST_ERR_UNSUPPORTED) {
        fprintf(stderr, "process_vm_writev is refused here (seccomp?): peer_write not checked\n");
        assert_int_equal(barrier(2), 0); /* the child fails its check: reap it, then skip */
        waitpid(pid, &wstatus, 0);
        free(buf);
        free(dst);
        skip();
    }
    assert_int_equal(st_shm_win.peer_write((int)pid, buf + 7, dst, size - 14), ST_OK);
    assert_true(has_pattern(buf, size, 1, 0)); /* the own copy is untouched */
    assert_int_equal(barrier(2), 0);
    /* the child is gone (ESRCH: a zombie has no memory), checked before it is reaped so that its
     * pid cannot belong to another process yet */
    {
        siginfo_t info;

        memset(&info, 0, sizeof(info));
        assert_int_equal(waitid(P_PID, (id_t)pid, &info, WEXITED | WNOWAIT), 0);
    }
    assert_int_equal(st_shm_win.peer_read((int)pid, dst, buf, 64), ST_ERR_IO);
    assert_int_equal(st_shm_win.peer_write((int)pid, buf, dst, 64), ST_ERR_IO);
    assert_int_equal(waitpid(pid, &wstatus, 0), pid);
    assert_true(WIFEXITED(wstatus));
    assert_int_equal(WEXITSTATUS(wstatus), 0);

    /* an address with nothing mapped (EFAULT) */
    hole = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    assert_true(hole != MAP_FAILED);
    assert_int_equal(munmap(hole, 4096), 0);
    assert_int_equal(st_shm_win.peer_read((int)getpid(), dst, hole, 64), ST_ERR_IO);
    assert_int_equal(st_shm_win.peer_write((int)getpid(), hole, dst, 64), ST_ERR_IO);
    free(buf);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_teardown(test_win_share_2, cleanup),
        cmocka_unit_test_teardown(test_win_share_3, cleanup),
        cmocka_unit_test_teardown(test_win_single, cleanup),
        cmocka_unit_test_teardown(test_win_wait_wake, cleanup),
        cmocka_unit_test_teardown(test_win_wait_timeout, cleanup),
        cmocka_unit_test_teardown(test_win_wrong_size, cleanup),
        cmocka_unit_test_teardown(test_win_missing_peer, cleanup),
        cmocka_unit_test_teardown(test_win_exists, cleanup),
        cmocka_unit_test_teardown(test_win_invalid, cleanup),
        cmocka_unit_test_teardown(test_win_two_names, cleanup),
        cmocka_unit_test_teardown(test_win_destroy_linked, cleanup),
        cmocka_unit_test_teardown(test_win_numa, cleanup),
        cmocka_unit_test_teardown(test_win_too_large, cleanup),
        cmocka_unit_test(test_mem_too_much),
        cmocka_unit_test(test_mem_cgroup),
        cmocka_unit_test_teardown(test_mem_alloc_lookup, cleanup),
        cmocka_unit_test_teardown(test_mem_invalid, cleanup),
        cmocka_unit_test_teardown(test_mem_map_child, cleanup),
        cmocka_unit_test(test_peer_read),
    };

    sh = mmap(NULL, sizeof(*sh), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (sh == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
