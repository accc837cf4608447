/*
 * test_lifecycle.c - nothing leaks over repeated init/destroy (issue 5 point 6, case B20).
 *
 * Each rank runs LC_CYCLES cycles of: strataCommInitRank with a fresh unique id, AllReduce of one
 * int32 x = rank + 1 (checked against n(n+1)/2), strataBroadcast of the next cycle's id from rank
 * 0 (which makes it with strataGetUniqueId, as an application passes ids by MPI_Bcast), and
 * strataCommDestroy. Under RLIMIT_NOFILE 256, so a leak of one fd per cycle fails the run within
 * it. After a warm-up of LC_WARMUP cycles (UCX and hwloc load what they keep for the process'
 * life) each rank samples, between a destroy and the next init, its open fds (/proc/self/fd), its
 * threads (/proc/self/task) and its RSS (after malloc_trim, so that free memory kept by malloc's
 * arenas does not count); at the end the fds and threads must be the same and the RSS within
 * LC_RSS_GROWTH_KB. Rank 0 holds the next id's bootstrap root at both samples, so its counts
 * compare like with like. The test program checks that no /dev/shm entry named strata-* was left.
 *
 * The variant of B20 that reuses the previous id: an id from strataGetUniqueId serves exactly
 * one communicator (its root exits once the table is out), so the second init with it must fail
 * on every rank with strataTimeout or strataInvalidUsage within STRATA_BOOTSTRAP_TIMEOUT (never
 * hang); an id from STRATA_COMM_ID starts a new root at every init (rank 0 starts it), so reusing
 * it works (include/strata.h, strataCommInitRank).
 *
 * LC_CYCLES can be lowered with IT_LIFECYCLE_CYCLES (e.g. under sanitizers, which make each cycle
 * several times slower); it is never below LC_WARMUP + 20. Under AddressSanitizer the RSS bound is
 * not checked (see LC_CHECK_RSS).
 */
#include <dirent.h>
#include <malloc.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define LC_CYCLES        500
#define LC_WARMUP        20
#define LC_NOFILE        256
#define LC_RSS_GROWTH_KB 1024 /* per rank */
#define LC_SETTLE_S      3.0  /* for the last root thread and sockets to go after a destroy */
#define LC_MAX_SHM       256
/* Smaller windows (0.6 MB instead of 4.5 MB per rank): every init zero-fills its window, which
 * was a third of a cycle's time, and a leak shows just the same. */
#define LC_ENV "STRATA_HIER_CHUNK_SIZE=64k"

/* Under AddressSanitizer RSS says nothing about leaks (freed memory waits in its quarantine, and
 * shadow memory grows with it): LeakSanitizer checks them instead, at every rank's exit. */
#if defined(__SANITIZE_ADDRESS__)
#define LC_CHECK_RSS 0
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
#define LC_CHECK_RSS 0
#endif
#endif
#ifndef LC_CHECK_RSS
#define LC_CHECK_RSS 1
#endif

typedef struct lc_sample {
    int  fds;
    int  threads;
    long rss_kb;
} lc_sample_t;

static int lc_cycles(void)
{
    const char *env = getenv("IT_LIFECYCLE_CYCLES");
    int         n   = (env != NULL) ? atoi(env) : LC_CYCLES;

    return (n < LC_WARMUP + 20) ? LC_WARMUP + 20 : n;
}

static int lc_count_dir(const char *path)
{
    DIR           *dir = opendir(path);
    struct dirent *de;
    int            n = 0;

    if (dir == NULL) {
        return -1;
    }
    while ((de = readdir(dir)) != NULL) {
        n += (de->d_name[0] != '.');
    }
    closedir(dir);
    return n - (strcmp(path, "/proc/self/fd") == 0); /* opendir's own fd */
}

static long lc_rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    char  line[256];
    long  kb = -1;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "VmRSS: %ld kB", &kb) == 1) {
            break;
        }
    }
    fclose(f);
    return kb;
}

static lc_sample_t lc_sample(void)
{
    lc_sample_t s;

    malloc_trim(0);
    s.fds     = lc_count_dir("/proc/self/fd");
    s.threads = lc_count_dir("/proc/self/task");
    s.rss_kb  = lc_rss_kb();
    return s;
}

/* Samples until fds and threads are back at base (threads and sockets of the last
 * communicator's bootstrap root go asynchronously) or LC_SETTLE_S has passed. */
static lc_sample_t lc_sample_settled(const lc_sample_t *base)
{
    double      end = it_now() + LC_SETTLE_S;
    lc_sample_t s   = lc_sample();

    while ((s.fds > base->fds || s.threads > base->threads) && it_now() < end) {
        struct timespec ts = {0, 20 * 1000 * 1000};

        nanosleep(&ts, NULL);
        s = lc_sample();
    }
    return s;
}

static void lc_limit_fds(void)
{
    struct rlimit rl;

    if (getrlimit(RLIMIT_NOFILE, &rl) != 0) {
        IT_FAIL("getrlimit(RLIMIT_NOFILE) failed");
        return;
    }
    if (rl.rlim_cur > LC_NOFILE) {
        rl.rlim_cur = LC_NOFILE;
        IT_EXPECT(setrlimit(RLIMIT_NOFILE, &rl) == 0, "setrlimit(RLIMIT_NOFILE, %d) failed",
                  LC_NOFILE);
    }
}

/* One cycle on comm: the all-reduce, and the next id from rank 0. */
static int lc_use(it_ctx_t *c, strataComm_t comm, int cycle, strataUniqueId *next)
{
    int32_t x = c->rank + 1, y = -1;

    if (!IT_OK(strataAllReduce(&x, &y, 1, strataInt32, strataSum, comm, NULL))) {
        return -1;
    }
    if (!IT_EXPECT(y == c->nranks * (c->nranks + 1) / 2, "cycle %d: AllReduce = %d, expected %d",
                   cycle, y, c->nranks * (c->nranks + 1) / 2)) {
        return -1;
    }
    if (c->rank == 0 && !IT_OK(strataGetUniqueId(next))) {
        return -1;
    }
    if (!IT_OK(strataBroadcast(next, next, sizeof(*next), strataUint8, 0, comm, NULL))) {
        return -1;
    }
    return 0;
}

static int lifecycle(it_ctx_t *c)
{
    int            cycles = lc_cycles();
    strataUniqueId id     = c->id, next;
    lc_sample_t    base   = {0, 0, 0}, end;
    strataComm_t   comm;
    double         t0 = it_now();
    double         ta, tb, tc, t_init = 0, t_use = 0, t_destroy = 0;

    lc_limit_fds();
    for (int k = 0; k < cycles; k++) {
        if (k == LC_WARMUP) {
            base = lc_sample();
        }
        memset(&next, 0, sizeof(next));
        ta = it_now();
        if (!IT_OK(strataCommInitRank(&comm, c->nranks, id, c->rank))) {
            IT_FAIL("cycle %d: init failed", k);
            return 1;
        }
        tb = it_now();
        if (lc_use(c, comm, k, &next) != 0) {
            strataCommDestroy(comm);
            IT_FAIL("cycle %d failed", k);
            return 1;
        }
        tc = it_now();
        if (!IT_OK(strataCommDestroy(comm))) {
            return 1;
        }
        t_init += tb - ta;
        t_use += tc - tb;
        t_destroy += it_now() - tc;
        id = next;
    }
    end = lc_sample_settled(&base);
    if (c->rank == 0 || getenv("IT_VERBOSE") != NULL) {
        printf("lifecycle n=%d rank %d: %d cycles in %.1f s (init %.1f, use %.1f, destroy %.1f); "
               "after cycle %d -> end: fds %d -> %d, threads %d -> %d, rss %ld -> %ld kB\n",
               c->nranks, c->rank, cycles, it_now() - t0, t_init, t_use, t_destroy, LC_WARMUP,
               base.fds, end.fds, base.threads, end.threads, base.rss_kb, end.rss_kb);
    }
    /* No growth. Fewer at the end is no leak: the sample after the warm-up can catch an fd or
     * thread of the last destroy still closing (CI once saw 7 -> 6). */
    IT_EXPECT(end.fds <= base.fds, "open fds %d after cycle %d, %d after %d cycles", base.fds,
              LC_WARMUP, end.fds, cycles);
    IT_EXPECT(end.threads <= base.threads, "threads %d after cycle %d, %d after %d cycles",
              base.threads, LC_WARMUP, end.threads, cycles);
    if (LC_CHECK_RSS) {
        IT_EXPECT(base.rss_kb > 0 && end.rss_kb - base.rss_kb < LC_RSS_GROWTH_KB,
                  "RSS grew from %ld to %ld kB over %d cycles (limit %d kB)", base.rss_kb,
                  end.rss_kb, cycles - LC_WARMUP, LC_RSS_GROWTH_KB);
    }
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* /dev/shm                                                                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct lc_shm {
    int  n;
    char names[LC_MAX_SHM][256];
} lc_shm_t;

static void lc_shm_list(lc_shm_t *s)
{
    DIR           *dir = opendir("/dev/shm");
    struct dirent *de;

    s->n = 0;
    if (dir == NULL) {
        return;
    }
    while ((de = readdir(dir)) != NULL && s->n < LC_MAX_SHM) {
        if (strncmp(de->d_name, "strata-", 7) == 0) {
            snprintf(s->names[s->n++], sizeof(s->names[0]), "%s", de->d_name);
        }
    }
    closedir(dir);
}

static int lc_shm_has(const lc_shm_t *s, const char *name)
{
    for (int i = 0; i < s->n; i++) {
        if (strcmp(s->names[i], name) == 0) {
            return 1;
        }
    }
    return 0;
}

/* Entries that were not there before and are still there a second later: other tests running
 * at the same time (make -j check) make segments too, but theirs live for milliseconds. */
static void lc_check_shm(const lc_shm_t *before)
{
    static lc_shm_t now, later;
    struct timespec ts    = {1, 0};
    int             left  = 0;

    lc_shm_list(&now);
    nanosleep(&ts, NULL);
    lc_shm_list(&later);
    for (int i = 0; i < later.n; i++) {
        if (lc_shm_has(&now, later.names[i]) && !lc_shm_has(before, later.names[i])) {
            fprintf(stderr, "left in /dev/shm: %s\n", later.names[i]);
            left++;
        }
    }
    assert_int_equal(left, 0);
}

static void lc_run(int nranks, const char *layout)
{
    static lc_shm_t before;
    it_opts_t       o = {.nranks = nranks, .layout = layout, .no_init = 1, .timeout_s = 400,
                         .env = LC_ENV};

    lc_shm_list(&before);
    assert_int_equal(it_run(&o, lifecycle, NULL), 0);
    lc_check_shm(&before);
}

/* B20: n = 2 on two nodes (1+1). */
static void test_b20_lifecycle_n2(void **state)
{
    lc_run(2, "1+1");
}

/* B20 and issue 5 point 6: a 4-rank communicator, two nodes of two (shm windows on each). */
static void test_b20_lifecycle_n4(void **state)
{
    lc_run(4, "2x2");
}

/* ------------------------------------------------------------------------------------------ */
/* reusing an id                                                                               */
/* ------------------------------------------------------------------------------------------ */

#define LC_REUSE_TIMEOUT_S 3.0

static int reuse_spent_id(it_ctx_t *c)
{
    strataComm_t   comm = NULL;
    strataUniqueId next;
    strataResult_t res;
    double         t0;

    if (!IT_OK(strataCommInitRank(&comm, c->nranks, c->id, c->rank))) {
        return 1;
    }
    memset(&next, 0, sizeof(next));
    lc_use(c, comm, 0, &next);
    IT_OK(strataCommDestroy(comm));
    comm = NULL;
    t0   = it_now();
    res  = strataCommInitRank(&comm, c->nranks, c->id, c->rank);
    IT_EXPECT(res == strataTimeout || res == strataInvalidUsage,
              "second init with a spent id returned %d (%s), expected strataTimeout or "
              "strataInvalidUsage", (int)res, strataGetErrorString(res));
    IT_EXPECT(strlen(strataGetLastError(NULL)) > 0, "no message for the spent id");
    IT_EXPECT(it_now() - t0 < LC_REUSE_TIMEOUT_S + 2.0, "the spent id took %.1f s to fail",
              it_now() - t0);
    IT_EXPECT(comm == NULL, "a failed init left a communicator");
    if (getenv("IT_VERBOSE") != NULL) {
        printf("rank %d: reused id: %s after %.1f s: %s\n", c->rank, strataGetErrorString(res),
               it_now() - t0, strataGetLastError(NULL));
    }
    if (res == strataSuccess) {
        strataCommDestroy(comm);
    }
    return 0;
}

/* B20 variant: after destroy, init again with the previous id (from strataGetUniqueId). */
static void test_b20_reuse_id(void **state)
{
    it_opts_t o = {.nranks = 4, .layout = "2x2", .no_init = 1, .timeout_s = 60,
                   .env = "STRATA_BOOTSTRAP_TIMEOUT=3s"};

    assert_int_equal(it_run(&o, reuse_spent_id, NULL), 0);
}

static int reuse_comm_id(it_ctx_t *c)
{
    for (int k = 0; k < 3; k++) {
        strataComm_t   comm = NULL;
        strataUniqueId next;

        if (!IT_OK(strataCommInitRank(&comm, c->nranks, c->id, c->rank))) {
            IT_FAIL("init %d with the STRATA_COMM_ID id failed", k);
            return 1;
        }
        memset(&next, 0, sizeof(next));
        lc_use(c, comm, k, &next);
        IT_OK(strataCommDestroy(comm));
    }
    return 0;
}

/* The same with an id from STRATA_COMM_ID: every init starts a root, so reuse works. */
static void test_b20_reuse_comm_id(void **state)
{
    char      env[128];
    int       port;
    it_opts_t o = {.nranks = 4, .layout = "2x2", .no_init = 1, .timeout_s = 60, .env = env};

    port = it_root_port();
    assert_true(port > 0);
    snprintf(env, sizeof(env), "STRATA_COMM_ID=127.0.0.1:%d STRATA_BOOTSTRAP_TIMEOUT=20s", port);
    assert_int_equal(it_run(&o, reuse_comm_id, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b20_lifecycle_n4),
        cmocka_unit_test(test_b20_lifecycle_n2),
        cmocka_unit_test(test_b20_reuse_id),
        cmocka_unit_test(test_b20_reuse_comm_id),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
