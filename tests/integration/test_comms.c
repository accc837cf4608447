/*
 * test_comms.c - communicators beyond one blocking init: two communicators used in interleaved
 * calls (and in one group), strataCommSplit (by parity, keys reversing the order, a NOCOLOR rank),
 * strataCommInitAll driven from one thread in groups, host streams (queued collectives,
 * strataStreamQuery, strataStreamSynchronize) and nonblocking init (config.blocking = 0); the
 * hierarchy every communicator builds at init (strataCommTopoPrint: nodes, rails, a node-contiguous
 * ring on 2x2, 3+1, 1+3 and round-robin numbering, and on split communicators).
 */
#include <setjmp.h>
#include <stdarg.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);

    if (p == NULL) {
        abort();
    }
    return p;
}

/* AllReduce sum int32 of (base + rank(comm) + i) over comm; checks the exact result. */
static void allreduce_check(strataComm_t comm, size_t count, int base, const char *what)
{
    int      n = 0, r = 0;
    int32_t *x = xmalloc(count * 4), *y = xmalloc(count * 4);

    if (!IT_OK(strataCommCount(comm, &n)) || !IT_OK(strataCommUserRank(comm, &r))) {
        goto out;
    }
    for (size_t i = 0; i < count; i++) {
        x[i] = base + r + (int32_t)(i % 1000);
        y[i] = -7;
    }
    if (IT_OK(strataAllReduce(x, y, count, strataInt32, strataSum, comm, NULL))) {
        for (size_t i = 0; i < count; i++) {
            int32_t want = n * (base + (int32_t)(i % 1000)) + n * (n - 1) / 2;

            if (y[i] != want) {
                IT_FAIL("%s: AllReduce count %zu: [%zu] = %d, expected %d", what, count, i, y[i],
                        want);
                break;
            }
        }
    }
out:
    free(x);
    free(y);
}

/* ------------------------------------------------------------------------------------------ */
/* two communicators at once                                                                   */
/* ------------------------------------------------------------------------------------------ */

static int two_comms(it_ctx_t *c)
{
    int          n = c->nranks, r = c->rank;
    strataComm_t b = NULL;
    int          rb = -1;

    /* comm B numbers the ranks backwards */
    if (!IT_OK(strataCommInitRank(&b, n, c->ids[1], n - 1 - r))) {
        return 1;
    }
    IT_OK(strataCommUserRank(b, &rb));
    IT_EXPECT(rb == n - 1 - r, "comm B rank %d, expected %d", rb, n - 1 - r);
    for (int it = 0; it < 12; it++) {
        int32_t g[64];
        int32_t v = r;

        allreduce_check(c->comm, 1000 + (size_t)it * 37, it, "comm A");
        memset(g, 0xEE, sizeof(g));
        if (IT_OK(strataAllGather(&v, g, 1, strataInt32, b, NULL))) {
            for (int k = 0; k < n; k++) {
                IT_EXPECT(g[k] == n - 1 - k, "comm B AllGather iteration %d: [%d] = %d, expected "
                          "%d", it, k, g[k], n - 1 - k);
            }
        }
        {
            int32_t bc[17];
            int     root = it % n;

            for (int k = 0; k < 17; k++) {
                bc[k] = rb == root ? 1000 * it + k : -1;
            }
            if (IT_OK(strataBroadcast(bc, bc, 17, strataInt32, root, b, NULL))) {
                for (int k = 0; k < 17; k++) {
                    if (bc[k] != 1000 * it + k) {
                        IT_FAIL("comm B Broadcast root %d iteration %d: [%d] = %d", root, it, k,
                                bc[k]);
                        break;
                    }
                }
            }
        }
        allreduce_check(b, 1 + (size_t)it, 100 * it, "comm B");
    }
    /* one group over both communicators */
    {
        int32_t xa = r + 1, ya = 0, xb = 10 * (r + 1), yb = 0;

        IT_OK(strataGroupStart());
        IT_OK(strataAllReduce(&xa, &ya, 1, strataInt32, strataSum, c->comm, NULL));
        IT_OK(strataAllReduce(&xb, &yb, 1, strataInt32, strataSum, b, NULL));
        if (IT_OK(strataGroupEnd())) {
            IT_EXPECT(ya == n * (n + 1) / 2, "group over two comms: A = %d", ya);
            IT_EXPECT(yb == 10 * n * (n + 1) / 2, "group over two comms: B = %d", yb);
        }
    }
    IT_OK(strataCommDestroy(b));
    allreduce_check(c->comm, 5, 3, "comm A after destroying B");
    return 0;
}

static void test_two_comms_n4(void **state)
{
    it_opts_t o = {.nranks = 4, .layout = "2+2", .nids = 2};

    assert_int_equal(it_run(&o, two_comms, NULL), 0);
}

static void test_two_comms_n3_rr2(void **state)
{
    it_opts_t o = {.nranks = 3, .layout = "rr2", .nids = 2};

    assert_int_equal(it_run(&o, two_comms, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* strataCommSplit                                                                              */
/* ------------------------------------------------------------------------------------------ */

static int split(it_ctx_t *c)
{
    int          n = c->nranks, r = c->rank;
    int          nocolor = n >= 5 && r == n - 1; /* the last rank (of 5 or more) opts out */
    int          color = nocolor ? STRATA_SPLIT_NOCOLOR : r % 2;
    strataComm_t sub = (strataComm_t)(uintptr_t)0x1; /* must be overwritten */
    int          members[64], nm = 0, myidx = -1;

    for (int q = n - 1; q >= 0; q--) { /* key = -rank: the new order is descending */
        if (q % 2 == r % 2 && !(n >= 5 && q == n - 1)) {
            if (q == r) {
                myidx = nm;
            }
            members[nm++] = q;
        }
    }
    if (!IT_OK(strataCommSplit(c->comm, color, -r, &sub, NULL))) {
        return 1;
    }
    if (nocolor) {
        IT_EXPECT(sub == NULL, "NOCOLOR rank got a communicator %p", (void *)sub);
    } else if (IT_EXPECT(sub != NULL && sub != (strataComm_t)(uintptr_t)0x1,
                         "split returned no communicator")) {
        int     sn = -1, sr = -1;
        int32_t old[64];
        int32_t me = r;

        IT_OK(strataCommCount(sub, &sn));
        IT_OK(strataCommUserRank(sub, &sr));
        IT_EXPECT(sn == nm, "split color %d: %d ranks, expected %d", color, sn, nm);
        IT_EXPECT(sr == myidx, "split color %d key %d: rank %d, expected %d", color, -r, sr,
                  myidx);
        if (IT_OK(strataAllGather(&me, old, 1, strataInt32, sub, NULL))) {
            for (int k = 0; k < nm && k < sn; k++) {
                IT_EXPECT(old[k] == members[k], "split color %d: new rank %d is old rank %d, "
                          "expected %d", color, k, old[k], members[k]);
            }
        }
        /* interleave the parent and the child */
        for (int it = 0; it < 6; it++) {
            allreduce_check(sub, 100 + (size_t)it, it, "split child");
            allreduce_check(c->comm, 50 + (size_t)it, it, "parent while child alive");
        }
    }
    if (nocolor) {
        /* keep the parent's call sequence equal on every rank */
        for (int it = 0; it < 6; it++) {
            allreduce_check(c->comm, 50 + (size_t)it, it, "parent while child alive");
        }
    }
    /* split again: one color, equal keys -> the parent's order (ties by rank) */
    {
        strataComm_t all = NULL;
        int          ar = -1;

        if (IT_OK(strataCommSplit(c->comm, 7, 0, &all, NULL)) &&
            IT_EXPECT(all != NULL, "split with one color gave NULL")) {
            IT_OK(strataCommUserRank(all, &ar));
            IT_EXPECT(ar == r, "split with equal keys: rank %d, expected %d", ar, r);
            allreduce_check(all, 333, 1, "split copy");
            IT_OK(strataCommDestroy(all));
        }
    }
    if (sub != NULL && !nocolor && sub != (strataComm_t)(uintptr_t)0x1) {
        IT_OK(strataCommDestroy(sub));
    }
    allreduce_check(c->comm, 9, 0, "parent after destroying children");
    return 0;
}

/* ------------------------------------------------------------------------------------------ */
/* B24: several communicators driven by several threads                                         */
/* ------------------------------------------------------------------------------------------ */

#define B24_ITERS 1000

typedef struct {
    strataComm_t comm;
    int          n, r;
    int          bad;        /* wrong values or failed calls */
    char         first[256]; /* the first of them */
} b24_thread_t;

static void b24_note(b24_thread_t *t, const char *fmt, ...)
{
    va_list ap;

    if (t->bad++ == 0) {
        va_start(ap, fmt);
        vsnprintf(t->first, sizeof(t->first), fmt, ap);
        va_end(ap);
    }
}

/* thread 1: AllReduce int64 count 257 on commA, x = r + 1 + it: 10 + 4 it on 4 ranks */
static void *b24_allreduce(void *arg)
{
    b24_thread_t *t = arg;
    int64_t       x[257], y[257];

    for (int it = 0; it < B24_ITERS && t->bad == 0; it++) {
        int64_t want = (int64_t)t->n * (t->n + 1) / 2 + (int64_t)t->n * it;

        for (int i = 0; i < 257; i++) {
            x[i] = t->r + 1 + it;
            y[i] = -1;
        }
        strataResult_t res = strataAllReduce(x, y, 257, strataInt64, strataSum, t->comm, NULL);
        if (res != strataSuccess) {
            b24_note(t, "AllReduce #%d: %s (%s)", it, strataGetErrorString(res),
                     strataGetLastError(t->comm));
        }
        for (int i = 0; i < 257 && t->bad == 0; i++) {
            if (y[i] != want) {
                b24_note(t, "AllReduce #%d [%d] = %lld, expected %lld", it, i, (long long)y[i],
                         (long long)want);
            }
        }
    }
    return NULL;
}

/* thread 2: AllGather int32 count 3 on commB (= split with key 3 - r: reversed), x = [r r r] */
static void *b24_allgather(void *arg)
{
    b24_thread_t *t = arg;
    int32_t       x[3] = {t->r, t->r, t->r}, y[3 * 64];

    for (int it = 0; it < B24_ITERS && t->bad == 0; it++) {
        memset(y, 0xff, sizeof(y));
        strataResult_t res = strataAllGather(x, y, 3, strataInt32, t->comm, NULL);
        if (res != strataSuccess) {
            b24_note(t, "AllGather #%d: %s (%s)", it, strataGetErrorString(res),
                     strataGetLastError(t->comm));
        }
        for (int k = 0; k < t->n && t->bad == 0; k++) {
            for (int j = 0; j < 3; j++) {
                /* commB's rank k is commA's rank n - 1 - k, whose x is its own rank in commB */
                if (y[3 * k + j] != k) {
                    b24_note(t, "AllGather #%d [%d] = %d, expected %d", it, 3 * k + j,
                             y[3 * k + j], k);
                }
            }
        }
    }
    return NULL;
}

static int b24(it_ctx_t *c)
{
    int          n = c->nranks, r = c->rank;
    strataComm_t commB = NULL, more[8] = {NULL};
    b24_thread_t t1 = {0}, t2 = {0};
    pthread_t    th1, th2;
    double       t0 = it_now();

    if (!IT_OK(strataCommSplit(c->comm, 0, n - 1 - r, &commB, NULL))) {
        return 1;
    }
    for (int k = 0; k < 8; k++) {
        IT_OK(strataCommSplit(c->comm, k % 2 == 0 ? 0 : r % 2, r, &more[k], NULL));
    }
    {
        int rb = -1;

        IT_OK(strataCommUserRank(commB, &rb));
        IT_EXPECT(rb == n - 1 - r, "commB rank %d, expected %d", rb, n - 1 - r);
    }
    t1 = (b24_thread_t){.comm = c->comm, .n = n, .r = r};
    t2 = (b24_thread_t){.comm = commB, .n = n, .r = n - 1 - r};
    if (pthread_create(&th1, NULL, b24_allreduce, &t1) != 0 ||
        pthread_create(&th2, NULL, b24_allgather, &t2) != 0) {
        IT_FAIL("pthread_create failed");
        return 1;
    }
    pthread_join(th1, NULL);
    pthread_join(th2, NULL);
    IT_EXPECT(t1.bad == 0, "thread 1 on commA: %d bad, first: %s", t1.bad, t1.first);
    IT_EXPECT(t2.bad == 0, "thread 2 on commB: %d bad, first: %s", t2.bad, t2.first);
    IT_EXPECT(it_now() - t0 < 60.0, "B24: %.1f s for 2 x %d collectives, expected < 60 s",
              it_now() - t0, B24_ITERS);
    /* the extra splits are distinct, working communicators */
    for (int k = 0; k < 8; k++) {
        if (more[k] != NULL) {
            for (int j = 0; j < k; j++) {
                IT_EXPECT(more[j] != more[k], "splits %d and %d returned the same handle", j, k);
            }
            allreduce_check(more[k], 31 + (size_t)k, k, "one of 8 splits");
            IT_OK(strataCommDestroy(more[k]));
        }
    }
    IT_OK(strataCommDestroy(commB));
    return 0;
}

static void test_b24_threads_2x2(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", NULL, b24, NULL), 0);
}

/* B24, one communicator used by two threads at once: strata.h says a second blocking call on a
 * communicator while another thread's is in progress returns strataInvalidUsage. Each thread
 * calls AllReduce once at the same moment (a barrier); every call either gives the exact sum or
 * fails: never success with a wrong value. The ranks may pair the calls differently, so a
 * failure may also come as a mismatch, a timeout (3 s) or a remote error. */
typedef struct {
    strataComm_t       comm;
    pthread_barrier_t *bar;
    int                n, r;
    strataResult_t     res;
    int32_t            y;
} b24_one_t;

static void *b24_one_call(void *arg)
{
    b24_one_t *t = arg;
    int32_t    x = t->r + 1;

    pthread_barrier_wait(t->bar);
    t->res = strataAllReduce(&x, &t->y, 1, strataInt32, strataSum, t->comm, NULL);
    return NULL;
}

static int b24_one_comm(it_ctx_t *c)
{
    pthread_barrier_t bar;
    pthread_t         th[2];
    b24_one_t         t[2];
    int               n = c->nranks, want = n * (n + 1) / 2;

    pthread_barrier_init(&bar, NULL, 2);
    for (int k = 0; k < 2; k++) {
        t[k] = (b24_one_t){.comm = c->comm, .bar = &bar, .n = n, .r = c->rank, .y = -7};
        pthread_create(&th[k], NULL, b24_one_call, &t[k]);
    }
    for (int k = 0; k < 2; k++) {
        pthread_join(th[k], NULL);
    }
    pthread_barrier_destroy(&bar);
    for (int k = 0; k < 2; k++) {
        IT_EXPECT(t[k].res != strataSuccess || t[k].y == want, "thread %d: success with %d, "
                  "expected %d", k, t[k].y, want);
    }
    IT_EXPECT(t[0].res != strataSuccess || t[1].res != strataSuccess ||
              (t[0].y == want && t[1].y == want), "both calls succeeded with wrong values");
    return 0;
}

static void test_b24_one_comm_two_threads(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", "STRATA_TIMEOUT=3s STRATA_DEBUG=NONE", b24_one_comm,
                                   NULL), 0);
}

static void test_split_n4(void **state) { assert_int_equal(it_run_simple(4, "2+2", NULL, split, NULL), 0); }
static void test_split_n5_nocolor(void **state)
{
    assert_int_equal(it_run_simple(5, "2+3", NULL, split, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* strataCommInitAll: 3 ranks in one process, driven from one thread in groups                 */
/* ------------------------------------------------------------------------------------------ */

#define IA_N 3

static int init_all(it_ctx_t *c)
{
    strataComm_t comms[IA_N] = {NULL};
    float        send[IA_N][1000], recv[IA_N][IA_N * 1000];
    const size_t cnt = 1000;

    if (!IT_OK(strataCommInitAll(comms, IA_N, NULL))) {
        return 1;
    }
    for (int k = 0; k < IA_N; k++) {
        int n = -1, r = -1;

        IT_OK(strataCommCount(comms[k], &n));
        IT_OK(strataCommUserRank(comms[k], &r));
        IT_EXPECT(n == IA_N && r == k, "InitAll comm %d: rank %d of %d", k, r, n);
    }
    /* AllReduce */
    for (int k = 0; k < IA_N; k++) {
        for (size_t i = 0; i < cnt; i++) {
            send[k][i] = (float)(k + 1) * (float)(i % 50);
        }
    }
    IT_OK(strataGroupStart());
    for (int k = 0; k < IA_N; k++) {
        IT_OK(strataAllReduce(send[k], recv[k], cnt, strataFloat32, strataSum, comms[k], NULL));
    }
    if (IT_OK(strataGroupEnd())) {
        for (int k = 0; k < IA_N; k++) {
            for (size_t i = 0; i < cnt; i++) {
                if (recv[k][i] != 6.0f * (float)(i % 50)) {
                    IT_FAIL("InitAll AllReduce comm %d [%zu] = %g", k, i, recv[k][i]);
                    break;
                }
            }
        }
    }
    /* AllGather */
    IT_OK(strataGroupStart());
    for (int k = 0; k < IA_N; k++) {
        IT_OK(strataAllGather(send[k], recv[k], cnt, strataFloat32, comms[k], NULL));
    }
    if (IT_OK(strataGroupEnd())) {
        for (int k = 0; k < IA_N; k++) {
            IT_EXPECT(memcmp(recv[k], send, sizeof(send)) == 0, "InitAll AllGather comm %d", k);
        }
    }
    /* Broadcast from rank 1, in place */
    for (int k = 0; k < IA_N; k++) {
        for (size_t i = 0; i < cnt; i++) {
            recv[k][i] = k == 1 ? (float)i : -1.0f;
        }
    }
    IT_OK(strataGroupStart());
    for (int k = 0; k < IA_N; k++) {
        IT_OK(strataBroadcast(recv[k], recv[k], cnt, strataFloat32, 1, comms[k], NULL));
    }
    if (IT_OK(strataGroupEnd())) {
        for (int k = 0; k < IA_N; k++) {
            for (size_t i = 0; i < cnt; i++) {
                if (recv[k][i] != (float)i) {
                    IT_FAIL("InitAll Broadcast comm %d [%zu] = %g", k, i, recv[k][i]);
                    break;
                }
            }
        }
    }
    /* ReduceScatter: recvcount 100, input element j of rank k = k + j */
    {
        static float rs_in[IA_N][IA_N * 100], rs_out[IA_N][100];

        for (int k = 0; k < IA_N; k++) {
            for (int j = 0; j < IA_N * 100; j++) {
                rs_in[k][j] = (float)(k + j);
            }
        }
        IT_OK(strataGroupStart());
        for (int k = 0; k < IA_N; k++) {
            IT_OK(strataReduceScatter(rs_in[k], rs_out[k], 100, strataFloat32, strataSum,
                                      comms[k], NULL));
        }
        if (IT_OK(strataGroupEnd())) {
            for (int k = 0; k < IA_N; k++) {
                for (int j = 0; j < 100; j++) {
                    float want = (float)(3 + 3 * (k * 100 + j)); /* sum over ranks 0..2 */

                    if (rs_out[k][j] != want) {
                        IT_FAIL("InitAll ReduceScatter comm %d [%d] = %g, expected %g", k, j,
                                rs_out[k][j], want);
                        break;
                    }
                }
            }
        }
    }
    /* Reduce to rank 2 (non-roots pass NULL recvbuff) */
    {
        int64_t x[IA_N][5], y[5] = {0};

        for (int k = 0; k < IA_N; k++) {
            for (int j = 0; j < 5; j++) {
                x[k][j] = (int64_t)(k + 1) << (10 * j);
            }
        }
        IT_OK(strataGroupStart());
        for (int k = 0; k < IA_N; k++) {
            IT_OK(strataReduce(x[k], k == 2 ? y : NULL, 5, strataInt64, strataSum, 2, comms[k],
                               NULL));
        }
        if (IT_OK(strataGroupEnd())) {
            for (int j = 0; j < 5; j++) {
                IT_EXPECT(y[j] == (int64_t)6 << (10 * j), "InitAll Reduce [%d] = %lld", j,
                          (long long)y[j]);
            }
        }
    }
    /* Send/Recv ring among the three, one group */
    {
        int32_t sv[IA_N][10], rv[IA_N][10];

        for (int k = 0; k < IA_N; k++) {
            for (int j = 0; j < 10; j++) {
                sv[k][j] = 100 * k + j;
                rv[k][j] = -1;
            }
        }
        IT_OK(strataGroupStart());
        for (int k = 0; k < IA_N; k++) {
            IT_OK(strataSend(sv[k], 10, strataInt32, (k + 1) % IA_N, comms[k], NULL));
            IT_OK(strataRecv(rv[k], 10, strataInt32, (k + IA_N - 1) % IA_N, comms[k], NULL));
        }
        if (IT_OK(strataGroupEnd())) {
            for (int k = 0; k < IA_N; k++) {
                int from = (k + IA_N - 1) % IA_N;

                for (int j = 0; j < 10; j++) {
                    if (rv[k][j] != 100 * from + j) {
                        IT_FAIL("InitAll Send/Recv ring: comm %d [%d] = %d", k, j, rv[k][j]);
                        break;
                    }
                }
            }
        }
    }
    /* nested groups: only the outermost End launches */
    {
        int32_t a[IA_N], s[IA_N];

        for (int k = 0; k < IA_N; k++) {
            a[k] = k + 1;
            s[k] = 0;
        }
        IT_OK(strataGroupStart());
        IT_OK(strataGroupStart());
        for (int k = 0; k < IA_N; k++) {
            IT_OK(strataAllReduce(&a[k], &s[k], 1, strataInt32, strataSum, comms[k], NULL));
        }
        IT_OK(strataGroupEnd());
        if (IT_OK(strataGroupEnd())) {
            for (int k = 0; k < IA_N; k++) {
                IT_EXPECT(s[k] == 6, "InitAll nested group comm %d = %d", k, s[k]);
            }
        }
    }
    for (int k = 0; k < IA_N; k++) {
        IT_OK(strataCommDestroy(comms[k]));
    }
    return 0;
}

static void test_init_all_3(void **state)
{
    it_opts_t o = {.nranks = 1, .no_init = 1};

    assert_int_equal(it_run(&o, init_all, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* host streams                                                                                 */
/* ------------------------------------------------------------------------------------------ */

static int streams(it_ctx_t *c)
{
    int             n = c->nranks, r = c->rank;
    const size_t    cnt = 200000;
    strataStream_t  s = NULL;
    float          *x = xmalloc(cnt * 4), *y = xmalloc(cnt * 4);
    int32_t        *g = xmalloc((size_t)n * 1000 * 4), gv[1000];
    int32_t         bc[4096];
    strataResult_t  q;
    double          t0;

    if (!IT_OK(strataStreamCreate(&s))) {
        return 1;
    }
    IT_EXPECT(strataStreamQuery(s) == strataSuccess, "an idle stream is not strataSuccess");
    for (size_t i = 0; i < cnt; i++) {
        x[i] = (float)((i % 100) + (size_t)r);
        y[i] = -1;
    }
    for (int i = 0; i < 1000; i++) {
        gv[i] = 1000 * r + i;
    }
    for (int i = 0; i < 4096; i++) {
        bc[i] = r == 1 % n ? i * 3 : -5;
    }
    /* queue several collectives, no waiting in between; the second uses the first's result */
    IT_OK(strataAllReduce(x, y, cnt, strataFloat32, strataSum, c->comm, s));
    IT_OK(strataAllReduce(y, y, cnt, strataFloat32, strataSum, c->comm, s));
    IT_OK(strataAllGather(gv, g, 1000, strataInt32, c->comm, s));
    IT_OK(strataBroadcast(bc, bc, 4096, strataInt32, 1 % n, c->comm, s));
    t0 = it_now();
    q = strataStreamQuery(s);
    IT_EXPECT(it_now() - t0 < 0.2, "strataStreamQuery blocked for %.3f s", it_now() - t0);
    IT_EXPECT(q == strataSuccess || q == strataInProgress, "strataStreamQuery = %d (%s)", (int)q,
              strataGetErrorString(q));
    IT_OK(strataStreamSynchronize(s));
    IT_EXPECT(strataStreamQuery(s) == strataSuccess, "stream not idle after synchronize");
    for (size_t i = 0; i < cnt; i++) {
        float want = (float)n * ((float)n * (float)(i % 100) + (float)(n * (n - 1) / 2));

        if (y[i] != want) {
            IT_FAIL("stream: AllReduce then in-place AllReduce [%zu] = %g, expected %g", i, y[i],
                    want);
            break;
        }
    }
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 1000; i++) {
            if (g[k * 1000 + i] != 1000 * k + i) {
                IT_FAIL("stream: AllGather [%d] = %d", k * 1000 + i, g[k * 1000 + i]);
                k = n;
                break;
            }
        }
    }
    for (int i = 0; i < 4096; i++) {
        if (bc[i] != i * 3) {
            IT_FAIL("stream: Broadcast [%d] = %d", i, bc[i]);
            break;
        }
    }
    /* a group queued on the stream as one unit: ring send/recv */
    {
        int32_t sv[64], rv[64];
        int     right = (r + 1) % n, left = (r + n - 1) % n;

        for (int i = 0; i < 64; i++) {
            sv[i] = 77 * r + i;
            rv[i] = -1;
        }
        IT_OK(strataGroupStart());
        IT_OK(strataSend(sv, 64, strataInt32, right, c->comm, s));
        IT_OK(strataRecv(rv, 64, strataInt32, left, c->comm, s));
        IT_OK(strataGroupEnd());
        IT_OK(strataStreamSynchronize(s));
        for (int i = 0; i < 64; i++) {
            if (rv[i] != 77 * left + i) {
                IT_FAIL("stream: grouped Send/Recv [%d] = %d, expected %d", i, rv[i],
                        77 * left + i);
                break;
            }
        }
    }
    /* many small queued ops, then a NULL-stream op after synchronize */
    {
        int32_t acc[32];

        for (int i = 0; i < 32; i++) {
            acc[i] = 1;
        }
        for (int it = 0; it < 10; it++) {
            IT_OK(strataAllReduce(acc, acc, 32, strataInt32, strataSum, c->comm, s));
        }
        IT_OK(strataStreamSynchronize(s));
        {
            int64_t want = 1;

            for (int it = 0; it < 10; it++) {
                want *= n;
            }
            IT_EXPECT(acc[0] == (int32_t)want && acc[31] == (int32_t)want,
                      "stream: 10 chained in-place AllReduces = %d, expected %lld", acc[0],
                      (long long)want);
        }
        allreduce_check(c->comm, 10, 2, "NULL stream after stream work");
    }
    {
        strataResult_t ae = strataNumResults;

        IT_OK(strataCommGetAsyncError(c->comm, &ae));
        IT_EXPECT(ae == strataSuccess, "async error after good stream work: %d", (int)ae);
    }
    IT_OK(strataStreamDestroy(s));
    free(x);
    free(y);
    free(g);
    return 0;
}

static void test_streams_n3(void **state) { assert_int_equal(it_run_simple(3, "2+1", NULL, streams, NULL), 0); }
static void test_streams_n1(void **state) { assert_int_equal(it_run_simple(1, "1", NULL, streams, NULL), 0); }

/* ------------------------------------------------------------------------------------------ */
/* nonblocking init                                                                             */
/* ------------------------------------------------------------------------------------------ */

static int nonblocking(it_ctx_t *c)
{
    int            n = c->nranks, r = c->rank;
    strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;
    strataComm_t   comm = NULL;
    strataResult_t res, ae = strataInProgress;
    double         t0, deadline;
    int            polls = 0;

    cfg.blocking  = 0;
    cfg.timeoutMs = 20000;
    cfg.name      = "it-nonblocking";
    if (r == 0) {
        usleep(800 * 1000); /* the others must not be blocked by a late rank 0 */
    }
    t0  = it_now();
    res = strataCommInitRankConfig(&comm, n, c->id, r, &cfg);
    IT_EXPECT(it_now() - t0 < 0.5, "nonblocking init took %.3f s to return", it_now() - t0);
    if (!IT_EXPECT(res == strataInProgress, "nonblocking init returned %d (%s), expected "
                   "strataInProgress: %s", (int)res, strataGetErrorString(res),
                   strataGetLastError(NULL))) {
        if (res != strataSuccess) {
            return 1;
        }
    }
    if (comm == NULL) {
        IT_FAIL("nonblocking init left *comm NULL");
        return 1;
    }
    deadline = it_now() + 30;
    while (it_now() < deadline) {
        if (!IT_OK(strataCommGetAsyncError(comm, &ae))) {
            break;
        }
        if (ae != strataInProgress) {
            break;
        }
        polls++;
        usleep(2000);
    }
    IT_EXPECT(ae == strataSuccess, "nonblocking init ended with %d (%s): %s", (int)ae,
              strataGetErrorString(ae), strataGetLastError(NULL));
    if (r != 0) {
        IT_EXPECT(polls > 0, "rank %d: init was done before rank 0 joined", r);
    }
    if (ae == strataSuccess) {
        allreduce_check(comm, 4097, 5, "after nonblocking init");
        IT_OK(strataCommDestroy(comm));
    }
    return 0;
}

static void test_nonblocking_init_n3(void **state)
{
    it_opts_t o = {.nranks = 3, .layout = "1+2", .no_init = 1};

    assert_int_equal(it_run(&o, nonblocking, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* fork after strataGetUniqueId                                                               */
/* ------------------------------------------------------------------------------------------ */

/* The usage NCCL-style launchers have: the parent makes the id (its bootstrap root thread starts),
 * then forks the ranks. Each child must see its own STRATA_* environment (re-parsed after fork)
 * and must be able to init while the parent's root serves the rendezvous. */
static int fork_after(it_ctx_t *c)
{
    char  *txt = NULL;
    size_t len = 0;
    FILE  *f   = open_memstream(&txt, &len);
    char   want[64];

    snprintf(want, sizeof(want), "STRATA_HOSTID=node%d\n", c->node);
    if (!IT_EXPECT(f != NULL, "open_memstream failed")) {
        return 1;
    }
    IT_OK(strataParamsPrint(f));
    fclose(f);
    IT_EXPECT(txt != NULL && strstr(txt, want) != NULL, "forked after the parent's first strata "
              "call, this rank's STRATA_HOSTID was not re-parsed (want \"%.*s\")",
              (int)strlen(want) - 1, want);
    free(txt);
    allreduce_check(c->comm, 100, 1, "fork after strataGetUniqueId");
    return 0;
}

static void test_fork_after_unique_id(void **state)
{
    it_opts_t o = {.nranks = 4, .layout = "2+2", .fork_after_id = 1, .timeout_s = 30};

    for (int k = 0; k < 10; k++) {
        assert_int_equal(it_run(&o, fork_after, NULL), 0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* the hierarchy built at init, through strataCommTopoPrint                                    */
/* ------------------------------------------------------------------------------------------ */

typedef struct topo_case {
    const char *summary; /* first line of the text form */
    const char *ring;    /* the ring line: node-contiguous whatever the numbering */
    const char *rail0;   /* the first rail's line */
} topo_case_t;

/* Every rank built the same hierarchy (nodes from STRATA_HOSTID, rails, node-contiguous ring),
 * which the JSON form carries too; a split communicator has its own. */
static int topo_print(it_ctx_t *c)
{
    const topo_case_t *tc = c->arg;
    char              *txt = NULL, *js = NULL;
    size_t             len = 0, jlen = 0;
    FILE              *f = open_memstream(&txt, &len);
    strataComm_t       sub = NULL;

    if (!IT_EXPECT(f != NULL, "open_memstream failed")) {
        return 1;
    }
    IT_OK(strataCommTopoPrint(c->comm, f, 0));
    fclose(f);
    IT_EXPECT(strncmp(txt, tc->summary, strlen(tc->summary)) == 0, "topology starts \"%.60s\", "
              "expected \"%s\"", txt, tc->summary);
    IT_EXPECT(strstr(txt, tc->ring) != NULL, "no \"%s\" in the topology:\n%s", tc->ring, txt);
    IT_EXPECT(strstr(txt, tc->rail0) != NULL, "no \"%s\" in the topology:\n%s", tc->rail0, txt);
    it_same_on_all(c->comm, txt, len, "strataCommTopoPrint");
    free(txt);

    f = open_memstream(&js, &jlen);
    IT_OK(strataCommTopoPrint(c->comm, f, 1));
    fclose(f);
    IT_EXPECT(js != NULL && js[0] == '{' && strstr(js, "\"ring\": [") != NULL,
              "JSON topology: %.80s", js ? js : "(none)");
    free(js);

    IT_RES(strataCommTopoPrint(NULL, stdout, 0), strataInvalidArgument);
    IT_RES(strataCommTopoPrint(c->comm, NULL, 0), strataInvalidArgument);

    /* even ranks and odd ranks: each split communicator has its own hierarchy */
    if (IT_OK(strataCommSplit(c->comm, c->rank % 2, c->rank, &sub, NULL)) && sub != NULL) {
        int n = 0;

        txt = NULL;
        f   = open_memstream(&txt, &len);
        IT_OK(strataCommTopoPrint(sub, f, 0));
        fclose(f);
        IT_OK(strataCommCount(sub, &n));
        IT_EXPECT(txt != NULL && atoi(txt + 2) == n, "split topology of %d ranks: %.40s", n, txt);
        allreduce_check(sub, 1000, 1, "split after the topology");
        free(txt);
        IT_OK(strataCommDestroy(sub));
    }
    /* node and rail communicators from strataCommTopoRank and strataCommSplit */
    {
        int          node = -1, nnodes = 0, local = -1, lsize = 0, n = 0, r = -1;
        int32_t      mine[2], lo[2] = {0, 0}, hi[2] = {0, 0};
        strataComm_t nodec = NULL, railc = NULL;

        IT_OK(strataCommTopoRank(c->comm, &node, &nnodes, &local, &lsize));
        IT_EXPECT(node == c->node && nnodes == c->nnodes, "strataCommTopoRank: node %d of %d, "
                  "the launcher says %d of %d", node, nnodes, c->node, c->nnodes);
        IT_OK(strataCommTopoRank(c->comm, NULL, NULL, NULL, NULL));
        IT_RES(strataCommTopoRank(NULL, &node, NULL, NULL, NULL), strataInvalidArgument);
        if (IT_OK(strataCommSplit(c->comm, node, local, &nodec, NULL)) && nodec != NULL) {
            IT_OK(strataCommCount(nodec, &n));
            IT_OK(strataCommUserRank(nodec, &r));
            IT_EXPECT(n == lsize && r == local, "node communicator: rank %d of %d, expected %d "
                      "of %d", r, n, local, lsize);
            /* a collective before destroy: a rank that destroys a new communicator before its
             * peers connected to it makes their ucp_ep_create fail (a known race of split) */
            allreduce_check(nodec, 10, 1, "node communicator");
            IT_OK(strataCommDestroy(nodec));
        }
        if (IT_OK(strataCommSplit(c->comm, local, node, &railc, NULL)) && railc != NULL) {
            IT_OK(strataCommCount(railc, &n));
            mine[0] = local;
            mine[1] = -local;
            IT_OK(strataAllReduce(mine, lo, 2, strataInt32, strataMin, railc, NULL));
            IT_OK(strataAllReduce(mine, hi, 2, strataInt32, strataMax, railc, NULL));
            IT_EXPECT(n >= 1 && n <= nnodes && lo[0] == local && hi[0] == local,
                      "rail communicator of local rank %d: %d ranks, local ranks %d..%d", local,
                      n, lo[0], hi[0]);
            IT_OK(strataCommDestroy(railc));
        }
    }
    allreduce_check(c->comm, 100000, 1, "ring in topology order");
    return 0;
}

#define TOPO_QUIET "STRATA_DEBUG=NONE" /* the NULL-argument calls would warn */

static const topo_case_t topo_2x2 = {"# 4 ranks on 2 nodes, 2 rails", "ring: 0 1 | 2 3",
                                     "rail 0: 0 (node 0, nic -) 2 (node 1, nic -)"};
static const topo_case_t topo_3p1 = {"# 4 ranks on 2 nodes, 3 rails", "ring: 0 1 2 | 3",
                                     "rail 0: 0 (node 0, nic -) 3 (node 1, nic -)"};
static const topo_case_t topo_1p3 = {"# 4 ranks on 2 nodes, 3 rails", "ring: 0 | 1 2 3",
                                     "rail 0: 0 (node 0, nic -) 1 (node 1, nic -)"};
static const topo_case_t topo_rr2 = {"# 5 ranks on 2 nodes, 3 rails", "ring: 0 2 4 | 1 3",
                                     "rail 0: 0 (node 0, nic -) 1 (node 1, nic -)"};
static const topo_case_t topo_rr3 = {"# 7 ranks on 3 nodes, 3 rails", "ring: 0 3 6 | 1 4 | 2 5",
                                     "rail 0: 0 (node 0, nic -) 1 (node 1, nic -) 2 (node 2, "
                                     "nic -)"};

static void test_topo_2x2(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", TOPO_QUIET, topo_print, (void *)&topo_2x2), 0);
}

static void test_topo_3p1(void **state)
{
    assert_int_equal(it_run_simple(4, "3+1", TOPO_QUIET, topo_print, (void *)&topo_3p1), 0);
}

static void test_topo_1p3(void **state)
{
    assert_int_equal(it_run_simple(4, "1+3", TOPO_QUIET, topo_print, (void *)&topo_1p3), 0);
}

static void test_topo_rr2(void **state)
{
    assert_int_equal(it_run_simple(5, "rr2", TOPO_QUIET, topo_print, (void *)&topo_rr2), 0);
}

static void test_topo_rr3(void **state)
{
    assert_int_equal(it_run_simple(7, "rr3", TOPO_QUIET, topo_print, (void *)&topo_rr3), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_comms_n4),
        cmocka_unit_test(test_two_comms_n3_rr2),
        cmocka_unit_test(test_split_n4),
        cmocka_unit_test(test_b24_threads_2x2),
        cmocka_unit_test(test_b24_one_comm_two_threads),
        cmocka_unit_test(test_split_n5_nocolor),
        cmocka_unit_test(test_init_all_3),
        cmocka_unit_test(test_streams_n3),
        cmocka_unit_test(test_streams_n1),
        cmocka_unit_test(test_nonblocking_init_n3),
        cmocka_unit_test(test_fork_after_unique_id),
        cmocka_unit_test(test_topo_2x2),
        cmocka_unit_test(test_topo_3p1),
        cmocka_unit_test(test_topo_1p3),
        cmocka_unit_test(test_topo_rr2),
        cmocka_unit_test(test_topo_rr3),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
