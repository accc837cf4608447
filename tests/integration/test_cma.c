/*
 * test_cma.c - the hierarchical all-reduce's zero-copy path on ordinary (malloc'd) buffers, by
 * cross-memory attach (STRATA_CMA, coll/intra.h): the owner of a shard reads its peers' parts with
 * process_vm_readv and every rank reads the other owners' results the same way.
 *
 * Each run does all-reduces of several MiB on guarded, misaligned malloc buffers, out of place and
 * in place: float and double sums of values whose sum depends on the order of the additions
 * (expected: the sum in rank order, the order the intra-node reduction keeps, computed here in the
 * same type, so every bit must match), an exact int64 sum, and a float sum whose send and receive
 * buffers are overwritten the moment each call returns (the call must not return while a peer
 * still reads them). The ranks then check which path ran from their own log (STRATA_DEBUG=DEBUG,
 * STRATA_DEBUG_FILE): the init line saying whether the node reads by cross-memory attach, and one
 * line per all-reduce saying how it ran.
 *
 * Whether the kernel allows cross-memory attach between the ranks is found out by the test itself
 * (each rank reads its successor's memory with process_vm_readv, addresses exchanged through the
 * harness's shared memory): where it does, the cma path must have run; where it does not (a
 * sandbox's seccomp, Yama), the log must say so and the results must still be right.
 * STRATA_CMA=0 must take the copying path, with the same results.
 */
#include <errno.h>
#include <sched.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <sys/uio.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

/* What the library logs (src/coll/intra.c, src/coll/hier.c) */
#define LOG_NODE_CMA  "read each other's ordinary buffers by cross-memory attach"
#define LOG_NODE_NONE "no cross-memory attach on this node"
#define LOG_OP_CMA    "zero-copy by cross-memory attach"
#define LOG_OP_COPY   "copying through the windows"

/* The test's own probe: can every rank read its successor's memory with process_vm_readv? The
 * same answer on every rank (an all-reduce of the outcomes). */
static volatile uint64_t probe_word;

static int cma_works(it_ctx_t *c)
{
    uint64_t *slots = c->shared; /* [2 * nranks]: pid, address */
    int32_t   ok = 1, *all = calloc((size_t)c->nranks, sizeof(*all));
    uint64_t  got = 0;
    int       next = (c->rank + 1) % c->nranks;

    probe_word             = 0x5eed0000u + (uint64_t)c->rank;
    slots[2 * c->rank]     = (uint64_t)getpid();
    slots[2 * c->rank + 1] = (uint64_t)(uintptr_t)&probe_word;
    __atomic_thread_fence(__ATOMIC_SEQ_CST);
    /* barriers by all-gather (an all-reduce would be one more zero-copy call in the log): every
     * rank's slots are written; then the outcomes, after which nobody needs the slots */
    if (!IT_OK(strataAllGather(&ok, all, 1, strataInt32, c->comm, NULL))) {
        free(all);
        return 0;
    }
    {
        struct iovec local = {.iov_base = &got, .iov_len = sizeof(got)};
        struct iovec peer  = {.iov_base = (void *)(uintptr_t)slots[2 * next + 1],
                              .iov_len = sizeof(got)};

        ok = process_vm_readv((pid_t)slots[2 * next], &local, 1, &peer, 1, 0) ==
                 (ssize_t)sizeof(got) && got == 0x5eed0000u + (uint64_t)next;
    }
    if (!IT_OK(strataAllGather(&ok, all, 1, strataInt32, c->comm, NULL))) {
        free(all);
        return 0;
    }
    for (int r = 0; r < c->nranks; r++) {
        ok &= all[r];
    }
    free(all);
    return ok;
}

/* A value whose sums depend on their order: fractions of very different magnitudes. */
static double rval(int r, size_t i)
{
    uint64_t x = (uint64_t)i * 0x9e3779b97f4a7c15ull + (uint64_t)r * 0xbf58476d1ce4e5b9ull + 1;

    x ^= x >> 29;
    x *= 0x94d049bb133111ebull;
    x ^= x >> 32;
    return ((double)(x & 0xffffff) / 0x1000000 - 0.5) * (double)(1u << (x >> 60));
}

typedef struct {
    const char *layout;
    int         cma_off; /* the run has STRATA_CMA=0 */
    int         cma_auto; /* STRATA_CMA=auto: cma up to 8 MiB, above only on 2 local ranks that
                           * are not oversubscribed, and on an oversubscribed node only from
                           * 1 MiB (hier.c st_hier_zc_negotiate); else the run has STRATA_CMA=1
                           * or 0 */
    int         pin2;     /* each rank holds itself to 2 CPUs before init (4 ranks: an
                           * oversubscribed node on any machine) */
} run_t;

/* CPUs the ranks may use (the library's count: the union of the node's masks, which are all
 * this process's here; one CPU or unreadable: the CPUs online). */
static int cpus_usable(void)
{
    cpu_set_t set;
    long      online = sysconf(_SC_NPROCESSORS_ONLN);

    if (sched_getaffinity(0, sizeof(set), &set) != 0 || CPU_COUNT(&set) <= 1) {
        return online > 0 ? (int)online : 1;
    }
    return CPU_COUNT(&set);
}

/* The sum of element i over the ranks in dt as the hierarchical path adds: each node's ranks in
 * rank order (the layouts here number a node's ranks contiguously), then the nodes' partial sums
 * (two at most here: the ring's one addition, a + b = b + a). */
static double expect_sum(it_ctx_t *c, strataDataType_t dt, size_t i)
{
    const run_t *run = c->arg;
    double       node_sum[2] = {0, 0};
    float        node_sumf[2] = {0, 0};
    int          started[2] = {0, 0};

    for (int r = 0; r < c->nranks; r++) {
        int b = it_layout_node(run->layout, c->nranks, r, NULL);

        if (dt == strataFloat32) {
            node_sumf[b] = started[b] ? node_sumf[b] + (float)rval(r, i) : (float)rval(r, i);
        } else {
            node_sum[b] = started[b] ? node_sum[b] + rval(r, i) : rval(r, i);
        }
        started[b] = 1;
    }
    if (dt == strataFloat32) {
        return started[1] ? (double)(node_sumf[0] + node_sumf[1]) : (double)node_sumf[0];
    }
    return started[1] ? node_sum[0] + node_sum[1] : node_sum[0];
}

/* One all-reduce of count elements of dt (sum), out of place or in place, on guarded malloc
 * buffers misaligned by one element; checks every bit against the sum in the path's order
 * (expect_sum) in dt, the send buffer untouched (out of place), the guards, and the result equal
 * on all ranks. */
static void one_call(it_ctx_t *c, strataDataType_t dt, size_t count, int in_place)
{
    size_t   es = it_dtype_size(dt), bytes = count * es;
    it_buf_t sb, rb;
    char    *exp = malloc(bytes), *orig = malloc(bytes), what[128];
    char    *send = it_buf_alloc(&sb, bytes, es, 0), *recv;

    recv = in_place ? send : it_buf_alloc(&rb, bytes, 3 * es, 0x5a);
    snprintf(what, sizeof(what), "AllReduce %s count %zu %s", it_dtype_name(dt), count,
             in_place ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        if (dt == strataInt64) {
            int64_t sum = 0;

            for (int r = 0; r < c->nranks; r++) {
                sum += (int64_t)(rval(r, i) * 1e6);
            }
            it_set_i(dt, send, i, (int64_t)(rval(c->rank, i) * 1e6));
            it_set_i(dt, exp, i, sum);
        } else {
            it_set(dt, send, i, dt == strataFloat32 ? (float)rval(c->rank, i) : rval(c->rank, i));
            it_set(dt, exp, i, expect_sum(c, dt, i));
        }
    }
    memcpy(orig, send, bytes);
    if (IT_OK(strataAllReduce(send, recv, count, dt, strataSum, c->comm, NULL))) {
        it_expect_equal(dt, recv, exp, count, what);
        if (!in_place) {
            IT_EXPECT(memcmp(send, orig, bytes) == 0, "%s: sendbuff was modified", what);
        }
    }
    it_same_on_all(c->comm, recv, bytes, what);
    it_buf_guards(&sb, what);
    if (!in_place) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
    free(orig);
}

/* Several calls on the same malloc'd buffers, both overwritten the moment each returns. */
static int reuse_calls(it_ctx_t *c, int iters)
{
    const size_t count = (3u << 20) / sizeof(float) + 5, bytes = count * sizeof(float);
    float       *send = malloc(bytes), *recv = malloc(bytes), *exp = malloc(bytes);
    int          bad = 0, calls = 0;

    for (int it = 0; it < iters && !bad; it++) {
        char what[96];

        snprintf(what, sizeof(what), "AllReduce #%d, buffers reused at once", it);
        for (size_t i = 0; i < count; i++) {
            int sum = 0;

            for (int r = 0; r < c->nranks; r++) {
                sum += (int)((i * 7 + (size_t)r * 3 + (size_t)it) % 9) - 4;
            }
            send[i] = (float)((int)((i * 7 + (size_t)c->rank * 3 + (size_t)it) % 9) - 4);
            exp[i]  = (float)sum;
        }
        if (!IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm, NULL))) {
            break;
        }
        calls++;
        bad = !it_expect_equal(strataFloat32, recv, exp, count, what);
        memset(recv, 0xff, bytes); /* NaN everywhere, at once */
        memset(send, 0xff, bytes);
    }
    free(send);
    free(recv);
    free(exp);
    return calls;
}

static int cma_battery(it_ctx_t *c)
{
    const run_t *run = c->arg;
    int          works = cma_works(c), calls = 0, big = 0, little = 0;
    size_t       counts[] = {(3u << 20) / 4 + 13, (5u << 20) / 8 + 3, (1u << 20) - 7};
    strataDataType_t dts[] = {strataFloat32, strataFloat64, strataInt64};
    char        *log;
    size_t       n_cma, n_copy;

    for (int in_place = 0; in_place < 2; in_place++) {
        for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
            one_call(c, dts[d], counts[d], in_place);
            calls++;
        }
    }
    calls += reuse_calls(c, 8);
    if (run->cma_auto) {
        /* above ST_HIER_CMA_MAX (8 MiB): auto takes cma there on 2 local ranks only, not
         * oversubscribed */
        one_call(c, strataFloat32, (9u << 20) / 4 + 1, 0);
        big = 1;
        /* just below 1 MiB (ST_HIER_CMA_OVERSUB_MIN): auto copies there on an oversubscribed
         * node; exactly 1 MiB: cma everywhere */
        one_call(c, strataFloat32, (1u << 20) / 4 - 1, 0);
        little = 1;
        one_call(c, strataFloat32, (1u << 20) / 4, 0);
        calls++;
    }

    log = it_read_log();
    if (!IT_EXPECT(log != NULL, "cannot read this rank's log (STRATA_DEBUG_FILE)")) {
        return 0;
    }
    n_cma  = it_count_lines(log, LOG_OP_CMA);
    n_copy = it_count_lines(log, LOG_OP_COPY);
    if (getenv("IT_VERBOSE") != NULL) {
        fprintf(stderr, "[rank %d] cross-memory attach %s here; %d calls: %zu by cma, %zu "
                "copying\n", c->rank, works ? "works" : "does not work", calls, n_cma, n_copy);
    }
    if (run->cma_off) {
        IT_EXPECT(strstr(log, LOG_NODE_NONE) != NULL && strstr(log, "has STRATA_CMA=0") != NULL,
                  "STRATA_CMA=0: the log does not say the node has no cross-memory attach "
                  "because of it:\n%.4000s", log);
        IT_EXPECT(n_cma == 0 && n_copy == (size_t)calls, "STRATA_CMA=0: %zu of %d all-reduces "
                  "ran by cross-memory attach, %zu copied", n_cma, calls, n_copy);
    } else if (works && run->cma_auto) {
        /* every rank of these runs shares this host: oversubscribed when more than its CPUs */
        int oversub = c->nranks > cpus_usable();

        IT_EXPECT(!run->pin2 || c->nranks <= 2 || oversub, "held to 2 CPUs, %d ranks see %d "
                  "usable CPUs", c->nranks, cpus_usable());

        IT_EXPECT(strstr(log, LOG_NODE_CMA) != NULL, "cross-memory attach works between the "
                  "ranks, but the log does not say the node uses it:\n%.4000s", log);
        int big_cma = !oversub && c->nranks == 2, little_cma = !oversub;

        IT_EXPECT(n_cma == (size_t)(calls + big_cma + little_cma) &&
                      n_copy == (size_t)(big - big_cma + little - little_cma),
                  "STRATA_CMA=auto, %d ranks on %d CPUs: %zu of %d all-reduces of 1-8 MiB, one "
                  "of 9 MiB and one of 1 MiB - 4 B ran by cross-memory attach, %zu copied "
                  "(expected: those of 1-8 MiB by cma, the one of 9 MiB %s, the one of 1 MiB - 4 B "
                  "%s)", c->nranks,
                  cpus_usable(), n_cma, calls, n_copy,
                  big_cma ? "by cma (2 local ranks, not oversubscribed)" : "copied",
                  little_cma ? "by cma" : "copied (oversubscribed)");
    } else if (works) {
        IT_EXPECT(strstr(log, LOG_NODE_CMA) != NULL, "cross-memory attach works between the "
                  "ranks, but the log does not say the node uses it:\n%.4000s", log);
        IT_EXPECT(n_cma == (size_t)calls && n_copy == 0, "%zu of %d all-reduces on malloc'd "
                  "buffers ran by cross-memory attach (%zu copied)", n_cma, calls, n_copy);
        IT_EXPECT(it_count_lines(log, LOG_OP_CMA " (every local rank's buffers are host memory, "
                              "not all shareable), in place") == 3,
                  "the in-place calls did not run by cross-memory attach");
        /* one node: the owners push their results (two nodes: the all-gather pulls them) */
        IT_EXPECT(it_count_lines(log, "; the owners push") ==
                      (strchr(run->layout, '+') == NULL ? (size_t)calls : 0),
                  "%zu of %d cross-memory attach all-reduces pushed (layout %s)",
                  it_count_lines(log, "; the owners push"), calls, run->layout);
    } else {
        fprintf(stderr, "[rank %d] process_vm_readv between the ranks is refused here: only the "
                "fallback is checked\n", c->rank);
        IT_EXPECT(strstr(log, LOG_NODE_NONE) != NULL, "cross-memory attach does not work "
                  "between the ranks, but the log does not say so:\n%.4000s", log);
        IT_EXPECT(n_cma == 0, "%zu all-reduces ran by cross-memory attach where it does not "
                  "work", n_cma);
    }
    free(log);
    return 0;
}


static int cma_battery_pinned(it_ctx_t *c);

static void cma_run_as(int nranks, const char *layout, const char *settings, int cma_off,
                       int pin2)
{
    char      dir[] = "/tmp/strata_test_cma_XXXXXX";
    char      env[512];
    run_t     run = {.layout = layout, .cma_off = cma_off,
                     .cma_auto = strstr(settings, "STRATA_CMA=") == NULL, .pin2 = pin2};
    it_opts_t o = {.nranks = nranks, .layout = layout, .env = env, .no_init = pin2};
    int       ret;

    assert_non_null(mkdtemp(dir));
    snprintf(env, sizeof(env), "%s STRATA_DEBUG=DEBUG STRATA_DEBUG_SUBSYS=SHM,COLL "
             "STRATA_DEBUG_FILE=%s/%%p.log", settings, dir);
    ret = it_run(&o, pin2 ? cma_battery_pinned : cma_battery, &run);
    it_rm_dir(dir);
    assert_int_equal(ret, 0);
}

static void cma_run(int nranks, const char *layout, const char *settings, int cma_off)
{
    cma_run_as(nranks, layout, settings, cma_off, 0);
}

/* default algorithm choice (auto: hier for these sizes on a node of several ranks); STRATA_CMA=1
 * takes cma for every call it can, whatever the size and the cores */
static void test_cma_1x2(void **state)     { cma_run(2, "1", "STRATA_CMA=1", 0); }
static void test_cma_1x4(void **state)     { cma_run(4, "1", "STRATA_CMA=1", 0); }
/* two nodes: the inter-node ring works in place in the owners' receive buffers */
static void test_cma_2x2(void **state)     { cma_run(4, "2+2", "STRATA_ALGO=hier STRATA_CMA=1", 0); }
/* small chunks: many chunks and pieces per call, shards smaller than a staging piece */
static void test_cma_1x4_4k(void **state)
{
    cma_run(4, "1", "STRATA_ALGO=hier STRATA_HIER_CHUNK_SIZE=4k STRATA_CMA=1", 0);
}
/* auto: cma up to 8 MiB, above on 2 local ranks only where they fit the cores; where the ranks
 * outnumber the cores only from 1 MiB. 1x4 is oversubscribed or not by the machine's CPUs, the
 * pinned run on any machine (4 ranks held to 2 CPUs). */
static void test_cma_auto_1x2(void **state) { cma_run(2, "1", "", 0); }
static void test_cma_auto_1x4(void **state) { cma_run(4, "1", "", 0); }
static void test_cma_auto_1x4_on_2_cpus(void **state) { cma_run_as(4, "1", "", 0, 1); }
static void test_cma_off_1x2(void **state) { cma_run(2, "1", "STRATA_CMA=0", 1); }
static void test_cma_off_1x4(void **state) { cma_run(4, "1", "STRATA_CMA=0", 1); }

/* Holds the calling process to the first 2 of its CPUs (before init: the library counts the
 * node's CPUs from the ranks' masks then); nothing where it has fewer. */
static void hold_to_two_cpus(void)
{
    cpu_set_t set, two;

    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) >= 2) {
        CPU_ZERO(&two);
        for (int cpu = 0, n = 0; cpu < CPU_SETSIZE && n < 2; cpu++) {
            if (CPU_ISSET(cpu, &set)) {
                CPU_SET(cpu, &two);
                n++;
            }
        }
        if (sched_setaffinity(0, sizeof(two), &two) != 0) {
            (void)IT_EXPECT(0, "sched_setaffinity: %s", strerror(errno));
        }
    }
}

/* cma_battery on a communicator made after holding this rank to 2 CPUs (run->pin2). */
static int cma_battery_pinned(it_ctx_t *c)
{
    int ret;

    hold_to_two_cpus();
    if (!IT_OK(strataCommInitRank(&c->comm, c->nranks, c->id, c->rank))) {
        return 1;
    }
    ret = cma_battery(c);
    IT_OK(strataCommDestroy(c->comm));
    c->comm = NULL;
    return ret;
}

/* Ranks that disagree on STRATA_CMA (rank 0: 1, the others: auto) on an oversubscribed node (4
 * ranks held to 2 CPUs, where auto copies above 8 MiB): the node decides alike from every rank's
 * descriptor (cma only when every rank may take it), so the results are right; a rank deciding on
 * its own settings read what another never wrote. 2 ranks: the same settings agree (a plain
 * run). */
static int cma_mixed(it_ctx_t *c)
{
    const size_t count = (12u << 20) / sizeof(float) + 3;

    if (c->nranks == 4) {
        hold_to_two_cpus();
    }
    setenv("STRATA_CMA", c->rank == 0 ? "1" : "auto", 1);
    if (!IT_OK(strataCommInitRank(&c->comm, c->nranks, c->id, c->rank))) {
        return 1;
    }
    for (int in_place = 0; in_place < 2; in_place++) {
        one_call(c, strataFloat32, count, in_place);
    }
    IT_OK(strataCommDestroy(c->comm));
    c->comm = NULL;
    return 0;
}

static void test_cma_mixed_settings(void **state)
{
    run_t     run = {.layout = "1"};
    it_opts_t o2 = {.nranks = 2, .layout = "1", .no_init = 1};
    it_opts_t o4 = {.nranks = 4, .layout = "1", .no_init = 1};

    assert_int_equal(it_run(&o2, cma_mixed, &run), 0);
    assert_int_equal(it_run(&o4, cma_mixed, &run), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_cma_1x2),
        cmocka_unit_test(test_cma_1x4),
        cmocka_unit_test(test_cma_2x2),
        cmocka_unit_test(test_cma_1x4_4k),
        cmocka_unit_test(test_cma_auto_1x2),
        cmocka_unit_test(test_cma_auto_1x4),
        cmocka_unit_test(test_cma_auto_1x4_on_2_cpus),
        cmocka_unit_test(test_cma_mixed_settings),
        cmocka_unit_test(test_cma_off_1x2),
        cmocka_unit_test(test_cma_off_1x4),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
