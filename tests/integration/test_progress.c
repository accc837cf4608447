/*
 * test_progress.c - waiting does not burn cores (progress engines spin briefly, then
 * block). Acceptance: a rank waiting 2 s for a late peer uses under 0.2 s of CPU.
 *
 * Late peer: on one node, every rank makes one all-reduce together (connections, buffers and
 * pipelines are then set up), then one rank sleeps 2 s before the next all-reduce while the others
 * call it at once and measure their CPU time across the call: the process total (RUSAGE_SELF,
 * every thread of the rank, a transport's own threads included) must stay under 0.2 s; the calling
 * thread's (RUSAGE_THREAD) is printed beside it. The result is checked too. 1 MiB and 8 bytes of
 * floats, 2 and 4 ranks, for STRATA_ALGO=ring and hier, and small for 8 bytes. STRATA_ALGO is set
 * in each rank process before its first strata call (no_init: the rank makes its communicator);
 * an algorithm the library does not know yet fails the test, saying so.
 *
 * Oversubscription: 8 ranks doing 200 all-reduces of 64 KiB on this machine's cores should take
 * no more than 3 times as long as 4 ranks doing the same (the slowest rank of each, median of 5
 * rounds). Relative, so that a slow machine does not matter; but a round takes tens of
 * milliseconds and on a busy 2-core machine the ratio ranged from 0.6 to 5.2 over 45 runs, so
 * it is printed, and asserted only with IT_OVERSUB_STRICT=1. The ranks report through a shared mapping made here
 * before the harness forks.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define LATE_S         2.0 /* how late the late rank is, s */
#define MAX_CPU_S      0.2 /* CPU a waiting rank may use meanwhile, s */
#define MAX_RANKS      8
#define OVERSUB_ITERS  200
#define OVERSUB_BYTES  (64 * 1024)
#define OVERSUB_RATIO  3.0
#define OVERSUB_ROUNDS 5   /* the loop is timed this many times; the median round counts */

/* What one rank measured, written into the shared mapping. */
typedef struct rank_report {
    int    done;
    double wall;                   /* s, across the late call */
    double cpu_self;               /* s, the whole process */
    double cpu_thread;             /* s, the calling thread */
    double rounds[OVERSUB_ROUNDS]; /* s, each timed loop of the oversubscription test */
} rank_report_t;

static rank_report_t *reports; /* MAX_RANKS, MAP_SHARED: the ranks write, the test reads */

typedef struct late_arg {
    const char *algo;  /* STRATA_ALGO */
    size_t      bytes; /* of the all-reduce */
    int         late;  /* the late rank */
} late_arg_t;

static double cpu_s(int who)
{
    struct rusage ru;

    getrusage(who, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_utime.tv_usec * 1e-6 +
           (double)ru.ru_stime.tv_sec + (double)ru.ru_stime.tv_usec * 1e-6;
}

static void sleep_s(double s)
{
    struct timespec ts = {(time_t)s, (long)((s - (double)(time_t)s) * 1e9)};

    while (nanosleep(&ts, &ts) != 0) {
    }
}

/* The rank's communicator with STRATA_ALGO=algo, set before the process's first strata call.
 * An algorithm this library rejects fails loudly: the test is ahead of the library. */
static int init_with_algo(it_ctx_t *c, const char *algo)
{
    strataResult_t res;

    if (algo != NULL) {
        setenv("STRATA_ALGO", algo, 1);
    }
    res = strataCommInitRank(&c->comm, c->nranks, c->id, c->rank);
    if (res == strataSuccess) {
        return 1;
    }
    c->comm = NULL;
    if (res == strataInvalidArgument && strstr(strataGetLastError(NULL), "STRATA_ALGO") != NULL) {
        IT_FAIL("STRATA_ALGO=%s is not an algorithm of this library yet (%s): this test passes "
                "once it lands", algo, strataGetLastError(NULL));
    } else {
        IT_FAIL("strataCommInitRank with STRATA_ALGO=%s returned %d (%s): %s", algo, (int)res,
                strataGetErrorString(res), strataGetLastError(NULL));
    }
    return 0;
}

/* send[i] = rank + 1 + i % 7: every sum is exact in float. */
static void fill(float *send, size_t count, int rank)
{
    for (size_t i = 0; i < count; i++) {
        send[i] = (float)(rank + 1 + (int)(i % 7));
    }
}

static int check_sum(const float *recv, size_t count, int nranks, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        float want = (float)(nranks * (nranks + 1) / 2 + nranks * (int)(i % 7));

        if (recv[i] != want) {
            IT_FAIL("%s: element %zu of %zu is %g, expected %g", what, i, count, (double)recv[i],
                    (double)want);
            return 0;
        }
    }
    return 1;
}

/* ------------------------------------------------------------------------------------------ */
/* a late peer                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static int late_peer(it_ctx_t *c)
{
    const late_arg_t *a = c->arg;
    size_t            count = a->bytes / sizeof(float);
    it_buf_t          sb, rb;
    float            *send, *recv;
    double            t0, cpu0, thr0;
    rank_report_t    *rep = &reports[c->rank];
    char              what[96];

    if (!init_with_algo(c, a->algo)) {
        return 1;
    }
    send = it_buf_alloc(&sb, a->bytes, 0, 0);
    recv = it_buf_alloc(&rb, a->bytes, 0, 0);
    fill(send, count, c->rank);
    snprintf(what, sizeof(what), "STRATA_ALGO=%s %zu B, %d ranks", a->algo, a->bytes, c->nranks);

    /* together first: what a first call sets up is not what this test measures */
    if (IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm, NULL))) {
        check_sum(recv, count, c->nranks, what);
    }
    memset(recv, 0, a->bytes);
    if (c->rank == a->late) {
        sleep_s(LATE_S);
    }
    t0   = it_now();
    cpu0 = cpu_s(RUSAGE_SELF);
    thr0 = cpu_s(RUSAGE_THREAD);
    if (IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm, NULL))) {
        check_sum(recv, count, c->nranks, what);
    }
    rep->wall       = it_now() - t0;
    rep->cpu_self   = cpu_s(RUSAGE_SELF) - cpu0;
    rep->cpu_thread = cpu_s(RUSAGE_THREAD) - thr0;
    rep->done       = 1;
    if (c->rank != a->late) {
        /* it did wait: else the measurement says nothing */
        IT_EXPECT(rep->wall > 0.8 * LATE_S, "%s: rank %d waited only %.3f s for the late rank",
                  what, c->rank, rep->wall);
        IT_EXPECT(rep->cpu_self < MAX_CPU_S, "%s: rank %d used %.3f s of CPU (its thread %.3f s) "
                  "in %.2f s waiting for a late peer (at most %.1f s)", what, c->rank,
                  rep->cpu_self, rep->cpu_thread, rep->wall, MAX_CPU_S);
    }
    it_buf_guards(&sb, "send");
    it_buf_guards(&rb, "recv");
    it_buf_free(&sb);
    it_buf_free(&rb);
    return 0;
}

static void run_late(int nranks, const char *algo, size_t bytes, int late)
{
    late_arg_t a = {algo, bytes, late};
    it_opts_t  o = {.nranks = nranks, .no_init = 1, .timeout_s = 60};
    double     worst = 0;
    int        ret, nreports = 0;

    memset(reports, 0, MAX_RANKS * sizeof(*reports));
    ret = it_run(&o, late_peer, &a);
    for (int r = 0; r < nranks; r++) {
        if (r == late || !reports[r].done) {
            continue;
        }
        print_message("    %-5s %7zu B  %d ranks  rank %d waited %.2f s: cpu %.4f s (thread "
                      "%.4f s)\n", algo, bytes, nranks, r, reports[r].wall, reports[r].cpu_self,
                      reports[r].cpu_thread);
        worst = reports[r].cpu_self > worst ? reports[r].cpu_self : worst;
        nreports++;
    }
    if (nreports > 0) {
        print_message("    %-5s %7zu B  %d ranks: most CPU of a waiting rank %.4f s (limit %.1f "
                      "s)\n", algo, bytes, nranks, worst, MAX_CPU_S);
    }
    assert_int_equal(ret, 0);
}

static void test_late_ring_2(void **state)
{
    run_late(2, "ring", 1 << 20, 1);
    run_late(2, "ring", 8, 0);
}

static void test_late_ring_4(void **state)
{
    run_late(4, "ring", 1 << 20, 3);
    run_late(4, "ring", 8, 0);
}

static void test_late_hier_2(void **state)
{
    run_late(2, "hier", 1 << 20, 1);
    run_late(2, "hier", 8, 0);
}

static void test_late_hier_4(void **state)
{
    run_late(4, "hier", 1 << 20, 3);
    run_late(4, "hier", 8, 0);
}

static void test_late_small_2(void **state)
{
    run_late(2, "small", 8, 1);
}

static void test_late_small_4(void **state)
{
    run_late(4, "small", 8, 2);
}

/* ------------------------------------------------------------------------------------------ */
/* more ranks than cores                                                                       */
/* ------------------------------------------------------------------------------------------ */

static int many_allreduces(it_ctx_t *c)
{
    size_t         count = OVERSUB_BYTES / sizeof(float);
    float         *send = malloc(OVERSUB_BYTES), *recv = malloc(OVERSUB_BYTES);
    rank_report_t *rep = &reports[c->rank];
    double         t0, cpu0;
    int            ok = 1;

    if (!IT_EXPECT(send != NULL && recv != NULL, "out of memory")) {
        return 1;
    }
    fill(send, count, c->rank);
    /* the first one sets up; each round starts as the last one ends, about together */
    IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm, NULL));
    cpu0 = cpu_s(RUSAGE_SELF);
    for (int k = 0; k < OVERSUB_ROUNDS && ok; k++) {
        t0 = it_now();
        for (int i = 0; i < OVERSUB_ITERS && ok; i++) {
            ok = IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm,
                                       NULL));
        }
        rep->rounds[k] = it_now() - t0;
    }
    rep->cpu_self = (cpu_s(RUSAGE_SELF) - cpu0) / OVERSUB_ROUNDS;
    rep->done     = ok;
    if (ok) {
        check_sum(recv, count, c->nranks, "the last all-reduce");
    }
    free(send);
    free(recv);
    return 0;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* The time of the loop: per round the slowest rank's, the median over rounds (a round is tens of
 * milliseconds, which one descheduling can double). Fails the test when a run fails. */
static double run_many(int nranks)
{
    double slowest[OVERSUB_ROUNDS] = {0}, cpu = 0, median;

    memset(reports, 0, MAX_RANKS * sizeof(*reports));
    assert_int_equal(it_run_simple(nranks, NULL, NULL, many_allreduces, NULL), 0);
    for (int r = 0; r < nranks; r++) {
        assert_true(reports[r].done);
        for (int k = 0; k < OVERSUB_ROUNDS; k++) {
            slowest[k] = reports[r].rounds[k] > slowest[k] ? reports[r].rounds[k] : slowest[k];
        }
        cpu += reports[r].cpu_self;
    }
    qsort(slowest, OVERSUB_ROUNDS, sizeof(slowest[0]), cmp_double);
    median = slowest[OVERSUB_ROUNDS / 2];
    print_message("    %d ranks: %d all-reduces of %d KiB in %.3f s (median of %d rounds, slowest "
                  "rank; rounds %.3f .. %.3f s), %.3f s of CPU per round in all\n", nranks,
                  OVERSUB_ITERS, OVERSUB_BYTES / 1024, median, OVERSUB_ROUNDS, slowest[0],
                  slowest[OVERSUB_ROUNDS - 1], cpu);
    return median;
}

static void test_oversubscribed_8_vs_4(void **state)
{
    long   cores = sysconf(_SC_NPROCESSORS_ONLN);
    double t4 = run_many(4);
    double t8 = run_many(8);

    print_message("    %ld cores: 8 ranks / 4 ranks = %.2f (at most %.1f%s)\n", cores, t8 / t4,
                  OVERSUB_RATIO, getenv("IT_OVERSUB_STRICT") != NULL ? "" : ", not asserted");
    if (getenv("IT_OVERSUB_STRICT") != NULL) {
        assert_true(t8 <= OVERSUB_RATIO * t4);
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_late_ring_2),
        cmocka_unit_test(test_late_ring_4),
        cmocka_unit_test(test_late_hier_2),
        cmocka_unit_test(test_late_hier_4),
        cmocka_unit_test(test_late_small_2),
        cmocka_unit_test(test_late_small_4),
        cmocka_unit_test(test_oversubscribed_8_vs_4),
    };

    reports = mmap(NULL, MAX_RANKS * sizeof(*reports), PROT_READ | PROT_WRITE,
                   MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (reports == MAP_FAILED) {
        perror("mmap");
        return 1;
    }
    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
