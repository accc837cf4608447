/*
 * test_order.c - issue order and groups (issue 15): one communicator's collectives run in the
 * order they were issued whatever streams, groups or threads carry them; a group may hold any
 * number of collectives of one communicator, mixed with send/recv and other communicators.
 *
 * Every value is checked against its closed form: rank r contributes (r + 1) * m to call m, so
 * the sum of call m is m * n (n + 1) / 2, and a swap, a mix or a stale result shows as a wrong m.
 * Each case runs on one node of 4 ranks and on 2 emulated nodes of 2 ranks (STRATA_HOSTID
 * layout "2x2"), 10 rounds each.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define ORD_COUNT  1000
#define ORD_ROUNDS 10

/* Fills buf with rank r's contribution to call m. */
static void ord_fill(float *buf, size_t count, int r, int m)
{
    for (size_t i = 0; i < count; i++) {
        buf[i] = (float)((r + 1) * m) + (float)(i % 7);
    }
}

/* Checks buf as the all-reduce (sum) of call m over n ranks; what names the call. */
static int ord_check(const float *buf, size_t count, int n, int m, const char *what, int round)
{
    for (size_t i = 0; i < count; i++) {
        float want = (float)(m * n * (n + 1) / 2) + (float)n * (float)(i % 7);

        if (buf[i] != want) {
            IT_FAIL("round %d, %s: [%zu] = %g, expected %g (call %d's sum)", round, what, i,
                    buf[i], want, m);
            return 0;
        }
    }
    return 1;
}

/* Point 1: an AllReduce on stream A, then one on stream B of the same communicator, then (every
 * other round) a blocking one on the NULL stream between and after: each gets its own sum. */
static int two_streams(it_ctx_t *c)
{
    int            n = c->nranks, r = c->rank;
    strataStream_t a = NULL, b = NULL;
    float         *x[4], *y[4];

    if (!IT_OK(strataStreamCreate(&a)) || !IT_OK(strataStreamCreate(&b))) {
        return 1;
    }
    for (int k = 0; k < 4; k++) {
        x[k] = malloc(ORD_COUNT * sizeof(float));
        y[k] = malloc(ORD_COUNT * sizeof(float));
    }
    for (int round = 0; round < ORD_ROUNDS; round++) {
        for (int k = 0; k < 4; k++) {
            ord_fill(x[k], ORD_COUNT, r, k + 1 + 4 * round);
            memset(y[k], 0xff, ORD_COUNT * sizeof(float));
        }
        IT_OK(strataAllReduce(x[0], y[0], ORD_COUNT, strataFloat32, strataSum, c->comm, a));
        if (round % 2) {
            IT_OK(strataAllReduce(x[2], y[2], ORD_COUNT, strataFloat32, strataSum, c->comm, NULL));
        }
        IT_OK(strataAllReduce(x[1], y[1], ORD_COUNT, strataFloat32, strataSum, c->comm, b));
        /* in place, on A again: queued behind B's call in issue order */
        memcpy(y[3], x[3], ORD_COUNT * sizeof(float));
        IT_OK(strataAllReduce(y[3], y[3], ORD_COUNT, strataFloat32, strataSum, c->comm, a));
        IT_OK(strataStreamSynchronize(a));
        IT_OK(strataStreamSynchronize(b));
        ord_check(y[0], ORD_COUNT, n, 1 + 4 * round, "stream A's first AllReduce", round);
        ord_check(y[1], ORD_COUNT, n, 2 + 4 * round, "stream B's AllReduce", round);
        if (round % 2) {
            ord_check(y[2], ORD_COUNT, n, 3 + 4 * round, "the NULL stream's AllReduce", round);
        }
        ord_check(y[3], ORD_COUNT, n, 4 + 4 * round, "stream A's in-place AllReduce", round);
    }
    for (int k = 0; k < 4; k++) {
        free(x[k]);
        free(y[k]);
    }
    IT_OK(strataStreamDestroy(a));
    IT_OK(strataStreamDestroy(b));
    return 0;
}

/* Point 2: a group of k collectives of one communicator (AllReduce, with an AllGather and a
 * Broadcast among them when k > 2) mixed with a ring of send/recv, on the NULL stream or on a
 * host stream (arg: the stream's index, 0 = NULL). */
typedef struct ord_group_arg {
    int k;          /* collectives in the group */
    int on_stream;  /* 1: the group is queued on a host stream */
} ord_group_arg_t;

static int group_colls(it_ctx_t *c)
{
    const ord_group_arg_t *g = c->arg;
    int                    n = c->nranks, r = c->rank, k = g->k;
    strataStream_t         s = NULL;
    float                 *x = malloc((size_t)k * ORD_COUNT * sizeof(float));
    float                 *y = malloc((size_t)k * ORD_COUNT * sizeof(float));
    int32_t               *ag = malloc((size_t)n * 64 * sizeof(int32_t)), mine[64];
    int32_t                sbuf[32], rbuf[32], bc[48];

    if (g->on_stream && !IT_OK(strataStreamCreate(&s))) {
        return 1;
    }
    for (int round = 0; round < ORD_ROUNDS; round++) {
        for (int j = 0; j < k; j++) {
            ord_fill(x + (size_t)j * ORD_COUNT, ORD_COUNT, r, j + 1 + k * round);
        }
        memset(y, 0xff, (size_t)k * ORD_COUNT * sizeof(float));
        for (int i = 0; i < 64; i++) {
            mine[i] = 1000 * r + i + round;
        }
        for (int i = 0; i < 32; i++) {
            sbuf[i] = 100 * r + i + round;
            rbuf[i] = -1;
        }
        for (int i = 0; i < 48; i++) {
            bc[i] = (r == round % n) ? 7 * i + round : -1;
        }
        IT_OK(strataGroupStart());
        for (int j = 0; j < k; j++) {
            if (j == 1 && k > 2) {
                IT_OK(strataAllGather(mine, ag, 64, strataInt32, c->comm, s));
            }
            if (j == k / 2) {
                IT_OK(strataSend(sbuf, 32, strataInt32, (r + 1) % n, c->comm, s));
                IT_OK(strataRecv(rbuf, 32, strataInt32, (r + n - 1) % n, c->comm, s));
            }
            if (j == 2 && k > 2) {
                IT_OK(strataBroadcast(bc, bc, 48, strataInt32, round % n, c->comm, s));
            }
            IT_OK(strataAllReduce(x + (size_t)j * ORD_COUNT, y + (size_t)j * ORD_COUNT,
                                  ORD_COUNT, strataFloat32, strataSum, c->comm, s));
        }
        IT_OK(strataGroupEnd());
        if (s != NULL) {
            IT_OK(strataStreamSynchronize(s));
        }
        for (int j = 0; j < k; j++) {
            char what[64];

            snprintf(what, sizeof(what), "AllReduce %d of a group of %d", j + 1, k);
            ord_check(y + (size_t)j * ORD_COUNT, ORD_COUNT, n, j + 1 + k * round, what, round);
        }
        for (int i = 0; i < 32; i++) {
            int from = (r + n - 1) % n;

            if (!IT_EXPECT(rbuf[i] == 100 * from + i + round, "round %d: Recv [%d] = %d, "
                           "expected %d", round, i, rbuf[i], 100 * from + i + round)) {
                break;
            }
        }
        if (k > 2) {
            for (int q = 0; q < n * 64; q++) {
                if (!IT_EXPECT(ag[q] == 1000 * (q / 64) + q % 64 + round,
                               "round %d: AllGather [%d] = %d", round, q, ag[q])) {
                    break;
                }
            }
            for (int i = 0; i < 48; i++) {
                if (!IT_EXPECT(bc[i] == 7 * i + round, "round %d: Broadcast [%d] = %d", round,
                               i, bc[i])) {
                    break;
                }
            }
        }
    }
    if (s != NULL) {
        IT_OK(strataStreamDestroy(s));
    }
    free(x);
    free(y);
    free(ag);
    return 0;
}

/* Several communicators x several streams x grouped and ungrouped calls: the world and its
 * split in halves (color r % 2), an AllReduce of each on streams A and B alternately, half of
 * the rounds inside one group holding both communicators' calls. */
static int comms_streams(it_ctx_t *c)
{
    int            n = c->nranks, r = c->rank, hn, hr;
    strataComm_t   half = NULL;
    strataStream_t st[2] = {NULL, NULL};
    float         *x[4], *y[4];

    if (!IT_OK(strataCommSplit(c->comm, r % 2, r, &half, NULL)) ||
        !IT_OK(strataCommCount(half, &hn)) || !IT_OK(strataCommUserRank(half, &hr)) ||
        !IT_OK(strataStreamCreate(&st[0])) || !IT_OK(strataStreamCreate(&st[1]))) {
        return 1;
    }
    for (int k = 0; k < 4; k++) {
        x[k] = malloc(ORD_COUNT * sizeof(float));
        y[k] = malloc(ORD_COUNT * sizeof(float));
    }
    for (int round = 0; round < ORD_ROUNDS; round++) {
        int grouped = round % 2;

        for (int k = 0; k < 4; k++) {
            /* calls 0 and 2 on the world (rank r), 1 and 3 on the half (rank hr) */
            ord_fill(x[k], ORD_COUNT, (k % 2) ? hr : r, k + 1 + 4 * round);
            memset(y[k], 0xff, ORD_COUNT * sizeof(float));
        }
        if (grouped) {
            IT_OK(strataGroupStart());
        }
        for (int k = 0; k < 4; k++) {
            IT_OK(strataAllReduce(x[k], y[k], ORD_COUNT, strataFloat32, strataSum,
                                  (k % 2) ? half : c->comm, st[(k / 2 + round) % 2]));
        }
        if (grouped) {
            IT_OK(strataGroupEnd());
        }
        IT_OK(strataStreamSynchronize(st[0]));
        IT_OK(strataStreamSynchronize(st[1]));
        for (int k = 0; k < 4; k++) {
            char what[80];

            snprintf(what, sizeof(what), "%s call %d on the %s", grouped ? "grouped" : "ungrouped",
                     k + 1, (k % 2) ? "half" : "world");
            ord_check(y[k], ORD_COUNT, (k % 2) ? hn : n, k + 1 + 4 * round, what, round);
        }
    }
    for (int k = 0; k < 4; k++) {
        free(x[k]);
        free(y[k]);
    }
    IT_OK(strataStreamDestroy(st[0]));
    IT_OK(strataStreamDestroy(st[1]));
    IT_OK(strataCommDestroy(half));
    return 0;
}

#define ORD_ENV "STRATA_TIMEOUT=30s"

static void test_two_streams_n4(void **state)
{
    assert_int_equal(it_run_simple(4, "1", ORD_ENV, two_streams, NULL), 0);
}

static void test_two_streams_2x2(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", ORD_ENV, two_streams, NULL), 0);
}

static void run_group(const char *layout, int k, int on_stream)
{
    ord_group_arg_t g = {k, on_stream};

    assert_int_equal(it_run_simple(layout[0] == '1' ? 2 : 4, layout, ORD_ENV, group_colls, &g),
                     0);
}

static void test_group_2_n2(void **state) { run_group("1", 2, 0); }
static void test_group_3_n2(void **state) { run_group("1", 3, 0); }
static void test_group_16_n2(void **state) { run_group("1", 16, 0); }
static void test_group_16_n2_stream(void **state) { run_group("1", 16, 1); }
static void test_group_2_2x2(void **state) { run_group("2x2", 2, 0); }
static void test_group_3_2x2_stream(void **state) { run_group("2x2", 3, 1); }
static void test_group_16_2x2(void **state) { run_group("2x2", 16, 0); }

static void test_comms_streams_n4(void **state)
{
    assert_int_equal(it_run_simple(4, "1", ORD_ENV, comms_streams, NULL), 0);
}

static void test_comms_streams_2x2(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", ORD_ENV, comms_streams, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_two_streams_n4),
        cmocka_unit_test(test_two_streams_2x2),
        cmocka_unit_test(test_group_2_n2),
        cmocka_unit_test(test_group_3_n2),
        cmocka_unit_test(test_group_16_n2),
        cmocka_unit_test(test_group_16_n2_stream),
        cmocka_unit_test(test_group_2_2x2),
        cmocka_unit_test(test_group_3_2x2_stream),
        cmocka_unit_test(test_group_16_2x2),
        cmocka_unit_test(test_comms_streams_n4),
        cmocka_unit_test(test_comms_streams_2x2),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
