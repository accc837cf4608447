/*
 * test_small.c - the small all-reduce on one node (coll/small.c), its latency path
 * (st_small_run_fast) and the hand-over to the engine:
 *   - every datatype with sum, prod, max, min and avg, counts 1, 7 and 1000, out of place and in
 *     place, with the mismatch check (its words in the data's cache line) and without it
 *     (STRATA_CHECK_MISMATCH=0), on 2, 4 and 8 local ranks; results exact and equal on all ranks;
 *   - a late rank (20 ms, so the others hand the call to the engine, which sleeps and is woken):
 *     the same exact results, no error;
 *   - a rank that exits before the call: the others fail within STRATA_TIMEOUT with an error
 *     that names it.
 * Values are small integers (multiples of the rank count for avg), exact in every datatype.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

static const strataDataType_t sm_dtypes[] = {strataInt8,    strataUint8,   strataInt32,
                                             strataUint32,  strataInt64,   strataUint64,
                                             strataFloat16, strataFloat32, strataFloat64,
                                             strataBfloat16};
static const strataRedOp_t    sm_ops[] = {strataSum, strataProd, strataMax, strataMin, strataAvg};

/* Rank r's element i: 1..3 (prod stays small), times n for avg (an exact quotient). */
static int64_t sm_val(int r, size_t i, strataRedOp_t op, int n)
{
    int64_t v = (int64_t)((r + i) % 3) + 1;

    return op == strataAvg ? v * n : v;
}

static int64_t sm_expect(const it_ctx_t *c, size_t i, strataRedOp_t op)
{
    int64_t acc = sm_val(0, i, op, c->nranks);

    for (int r = 1; r < c->nranks; r++) {
        int64_t v = sm_val(r, i, op, c->nranks);

        switch (op) {
        case strataProd: acc *= v; break;
        case strataMax: acc = v > acc ? v : acc; break;
        case strataMin: acc = v < acc ? v : acc; break;
        default: acc += v; break;
        }
    }
    return op == strataAvg ? acc / c->nranks : acc;
}

/* 1 when op over n ranks' values (sm_val) and its partial results fit the datatype exactly
 * (integer sums wrap, as they do in NCCL). */
static int sm_fits(strataDataType_t dt, strataRedOp_t op, int n)
{
    int64_t p = 1;

    for (int r = 0; r < n; r++) {
        p = op == strataProd ? p * 3 : op == strataAvg ? (int64_t)(r + 1) * 3 * n
                                                       : (int64_t)(r + 1) * 3;
    }
    switch (dt) {
    case strataInt8: return p <= 127;
    case strataUint8: return p <= 255;
    case strataFloat16: case strataBfloat16: return p <= 256;
    default: return 1;
    }
}

static void sm_one(it_ctx_t *c, strataDataType_t dt, strataRedOp_t op, size_t count,
                   int in_place)
{
    size_t   es = it_dtype_size(dt), bytes = count * es;
    it_buf_t sb, rb;
    char    *send = it_buf_alloc(&sb, bytes, 0, 0), *recv, *exp = malloc(bytes), what[128];

    recv = in_place ? send : it_buf_alloc(&rb, bytes, es, 0x5a);
    snprintf(what, sizeof(what), "AllReduce %s %s count %zu %s", it_dtype_name(dt),
             it_op_name(op), count, in_place ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        if (it_dtype_is_float(dt)) {
            it_set(dt, send, i, (double)sm_val(c->rank, i, op, c->nranks));
            it_set(dt, exp, i, (double)sm_expect(c, i, op));
        } else {
            it_set_i(dt, send, i, sm_val(c->rank, i, op, c->nranks));
            it_set_i(dt, exp, i, sm_expect(c, i, op));
        }
    }
    if (IT_OK(strataAllReduce(send, recv, count, dt, op, c->comm, NULL))) {
        it_expect_equal(dt, recv, exp, count, what);
    }
    it_same_on_all(c->comm, recv, bytes, what);
    it_buf_guards(&sb, what);
    if (!in_place) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
}

static int sm_battery(it_ctx_t *c)
{
    static const size_t counts[] = {1, 7, 1000};

    for (size_t d = 0; d < sizeof(sm_dtypes) / sizeof(sm_dtypes[0]); d++) {
        for (size_t o = 0; o < sizeof(sm_ops) / sizeof(sm_ops[0]); o++) {
            if (!sm_fits(sm_dtypes[d], sm_ops[o], c->nranks)) {
                continue;
            }
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                sm_one(c, sm_dtypes[d], sm_ops[o], counts[k], (int)((d + o + k) & 1));
            }
        }
    }
    return 0;
}

static void test_small_2(void **state) { assert_int_equal(it_run_simple(2, "1", "", sm_battery, NULL), 0); }
static void test_small_4(void **state) { assert_int_equal(it_run_simple(4, "1", "", sm_battery, NULL), 0); }
static void test_small_4_unchecked(void **state)
{
    assert_int_equal(it_run_simple(4, "1", "STRATA_CHECK_MISMATCH=0", sm_battery, NULL), 0);
}
static void test_small_8(void **state)
{
    it_opts_t o = {.nranks = 8, .layout = "1", .env = "", .timeout_s = 240};

    assert_int_equal(it_run(&o, sm_battery, NULL), 0);
}

/* Rank 1 comes 20 ms late to every call: the others wait in the engine (hand-over). */
static int sm_late(it_ctx_t *c)
{
    int waited = 0; /* calls whose phase time shows the wait (a loaded machine may delay this
                     * rank as much as rank 1 in some of them) */

    for (int it = 0; it < 5; it++) {
        strataPhaseTimes_t t;
        float              v[100];
        int                bad = 0;

        for (int i = 0; i < 100; i++) {
            v[i] = (float)(c->rank + i);
        }
        if (c->rank == 1) {
            usleep(20000);
        }
        if (!IT_OK(strataAllReduce(v, v, 100, strataFloat32, strataSum, c->comm, NULL))) {
            continue;
        }
        for (int i = 0; i < 100; i++) {
            bad += v[i] != (float)(c->nranks * i + c->nranks * (c->nranks - 1) / 2);
        }
        IT_EXPECT(bad == 0, "call %d: %d of 100 elements wrong", it, bad);
        if (IT_OK(strataCommGetPhaseTimes(c->comm, &t))) {
            IT_EXPECT(strcmp(t.algorithm, "small") == 0, "call %d ran %s, not small", it,
                      t.algorithm);
            waited += t.totalSeconds > 0.005;
        }
    }
    IT_EXPECT(c->rank == 1 || waited > 0, "no call's phase time on rank %d shows its wait of "
              "20 ms for rank 1", c->rank);
    return 0;
}

static void test_small_late(void **state)
{
    assert_int_equal(it_run_simple(2, "1", "", sm_late, NULL), 0);
    assert_int_equal(it_run_simple(4, "1", "", sm_late, NULL), 0);
}

/* Rank 2 exits before the call: the others fail by the deadline, naming it. */
static int sm_dead(it_ctx_t *c)
{
    float       v[16] = {1};
    double      t0;
    const char *err;

    sm_one(c, strataFloat32, strataSum, 16, 0); /* all there once */
    if (c->rank == 2) {
        _exit(0);
    }
    t0 = it_now();
    IT_EXPECT(strataAllReduce(v, v, 16, strataFloat32, strataSum, c->comm, NULL) != strataSuccess,
              "the all-reduce succeeded without rank 2");
    err = strataGetLastError(c->comm);
    IT_EXPECT(it_now() - t0 < 20, "the failure took %.1f s (STRATA_TIMEOUT 5 s)", it_now() - t0);
    IT_EXPECT(err != NULL && strstr(err, "rank 2") != NULL, "the error does not name rank 2: %s",
              err != NULL ? err : "(none)");
    _exit(it_nfail != 0); /* the communicator cannot be destroyed cleanly without rank 2 */
    return 0;
}

static void test_small_dead_peer(void **state)
{
    it_opts_t o = {.nranks = 3, .layout = "1", .env = "STRATA_TIMEOUT=5s STRATA_DEBUG=NONE",
                   .timeout_s = 60};

    assert_int_equal(it_run(&o, sm_dead, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_small_2),
        cmocka_unit_test(test_small_4),
        cmocka_unit_test(test_small_4_unchecked),
        cmocka_unit_test(test_small_8),
        cmocka_unit_test(test_small_late),
        cmocka_unit_test(test_small_dead_peer),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
