/*
 * test_cases.c - the edge cases from the field (../shared/cases/README.md), each as a multi-process
 * run of the real library with its exact expected answer. B14 (more than 2^31 elements) is the
 * separate program test_large; B16 (test_mismatch), B19 and B21 (test_faults), B20
 * (test_lifecycle) and B24 (test_comms) are not in this program.
 *
 * Semantics tested are the ones include/strata.h documents: integer sums and products wrap,
 * unsigned types compare unsigned, NaN propagates through max, min and sum whichever rank holds it,
 * integer avg truncates toward zero, float avg pre-scales each input by 1/nranks.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define RUN(_n, _layout, _env, _fn, _arg) \
    assert_int_equal(it_run_simple((_n), (_layout), (_env), (_fn), (void *)(_arg)), 0)

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);

    if (p == NULL) {
        abort();
    }
    return p;
}

/* ------------------------------------------------------------------------------------------ */
/* B01: single-rank AllReduce leaves nothing unwritten, for every op                            */
/* ------------------------------------------------------------------------------------------ */

static int b01(it_ctx_t *c)
{
    static const strataDataType_t dts[] = {strataBfloat16, strataFloat16, strataFloat32,
                                           strataFloat64, strataInt32};
    static const strataRedOp_t    ops[] = {strataAvg, strataSum, strataMax, strataMin,
                                           strataProd};
    static const size_t counts[] = {1, 7, 8, 9, 15, 16, 17, 1023, 1032, 65544};

    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        strataDataType_t dt = dts[d];
        size_t           es = it_dtype_size(dt);

        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            size_t count = counts[k], bytes = count * es;
            void  *exp   = xmalloc(bytes);

            for (size_t i = 0; i < count; i++) {
                double v = (double)((int)(i % 97) - 48);

                it_set(dt, exp, i, it_dtype_is_float(dt) ? v / 4 : v);
            }
            for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
                for (int inplace = 0; inplace < 2; inplace++) {
                    it_buf_t sb, rb;
                    char     what[128];
                    void    *send = it_buf_alloc(&sb, bytes, 0, 0);
                    void    *recv = inplace ? send : it_buf_alloc(&rb, bytes, 0, 0xFF);

                    snprintf(what, sizeof(what), "B01 n=1 AllReduce %s %s count %zu %s",
                             it_dtype_name(dt), it_op_name(ops[o]), count,
                             inplace ? "in place" : "out of place");
                    memcpy(send, exp, bytes);
                    if (IT_OK(strataAllReduce(send, recv, count, dt, ops[o], c->comm, NULL))) {
                        it_expect_equal(dt, recv, exp, count, what);
                        it_expect_equal(dt, send, exp, count, "B01 sendbuff unchanged");
                    }
                    it_buf_guards(&sb, what);
                    if (!inplace) {
                        it_buf_guards(&rb, what);
                        it_buf_free(&rb);
                    }
                    it_buf_free(&sb);
                }
            }
            free(exp);
        }
    }
    return 0;
}

static void test_b01_single_rank_avg(void **state) { RUN(1, "1", NULL, b01, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B02: count smaller than nranks, in place                                                     */
/* ------------------------------------------------------------------------------------------ */

static int within_ulps_f(float got, float want, int ulps)
{
    float lo = want, hi = want;

    for (int k = 0; k < ulps; k++) {
        lo = nextafterf(lo, -INFINITY);
        hi = nextafterf(hi, INFINITY);
    }
    return got >= lo && got <= hi;
}

static int within_ulps(double got, double want, int ulps)
{
    double lo = want, hi = want;

    for (int k = 0; k < ulps; k++) {
        lo = nextafter(lo, -INFINITY);
        hi = nextafter(hi, INFINITY);
    }
    return got >= lo && got <= hi;
}

static void b02_generic(it_ctx_t *c, size_t count, int inplace)
{
    int      n = c->nranks;
    it_buf_t sb, rb;
    char     what[128];
    double  *send = it_buf_alloc(&sb, count * 8, 0, 0);
    double  *recv = inplace ? send : it_buf_alloc(&rb, count * 8, 0, 0xEE);
    double  *exp  = xmalloc(count * 8);

    snprintf(what, sizeof(what), "B02 AllReduce fp64 sum count %zu n=%d %s", count, n,
             inplace ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        send[i] = (double)(c->rank + 1) * (double)(i + 1);
        exp[i]  = (double)(i + 1) * n * (n + 1) / 2;
    }
    if (IT_OK(strataAllReduce(send, recv, count, strataFloat64, strataSum, c->comm, NULL))) {
        it_expect_equal(strataFloat64, recv, exp, count, what);
    }
    it_buf_guards(&sb, what);
    if (!inplace) {
        it_buf_guards(&rb, what);
    }
    it_same_on_all(c->comm, recv, count * 8, what);
    if (!inplace) {
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
}

static int b02(it_ctx_t *c)
{
    for (int inplace = 1; inplace >= 0; inplace--) {
        it_buf_t sb, rb;
        double  *send = it_buf_alloc(&sb, 16, 0, 0);
        double  *recv = inplace ? send : it_buf_alloc(&rb, 16, 0, 0xEE);
        char     what[96];

        snprintf(what, sizeof(what), "B02 AllReduce fp64 sum count 2 %s",
                 inplace ? "in place" : "out of place");
        send[0] = c->rank;
        send[1] = c->rank == 0 ? 0.0 : 1.0 / c->rank;
        if (c->nranks == 4 &&
            IT_OK(strataAllReduce(send, recv, 2, strataFloat64, strataSum, c->comm, NULL))) {
            IT_EXPECT(recv[0] == 6.0, "%s: [0] = %.17g, expected 6", what, recv[0]);
            IT_EXPECT(within_ulps(recv[1], 11.0 / 6.0, 2), "%s: [1] = %.17g, expected 11/6 "
                      "within 2 ulp", what, recv[1]);
            it_same_on_all(c->comm, recv, 16, what);
        }
        it_buf_guards(&sb, what);
        if (!inplace) {
            it_buf_guards(&rb, what);
            it_buf_free(&rb);
        }
        it_buf_free(&sb);
    }
    if (c->nranks == 4) {
        b02_generic(c, 1, 1);
        b02_generic(c, 3, 1);
        b02_generic(c, 1, 0);
        b02_generic(c, 3, 0);
    } else {
        b02_generic(c, 5, 1);
        b02_generic(c, 5, 0);
        b02_generic(c, (size_t)c->nranks - 1, 1);
    }
    return 0;
}

static void test_b02_n4_1node(void **state) { RUN(4, "1", NULL, b02, NULL); }
static void test_b02_n4_2x2(void **state)   { RUN(4, "2x2", NULL, b02, NULL); }
static void test_b02_n8_2x4(void **state)   { RUN(8, "2x4", NULL, b02, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B03: integer sums and products wrap                                                          */
/* ------------------------------------------------------------------------------------------ */

static void b03_one(it_ctx_t *c, strataDataType_t dt, strataRedOp_t op, const void *in0,
                    const void *in1, const void *exp, size_t count, const char *what)
{
    size_t   bytes = count * it_dtype_size(dt);
    it_buf_t sb, rb;
    void    *send = it_buf_alloc(&sb, bytes, 0, 0);
    void    *recv = it_buf_alloc(&rb, bytes, 0, 0xEE);

    memcpy(send, c->rank == 0 ? in0 : in1, bytes);
    if (IT_OK(strataAllReduce(send, recv, count, dt, op, c->comm, NULL))) {
        it_expect_equal(dt, recv, exp, count, what);
    }
    it_buf_guards(&sb, what);
    it_buf_guards(&rb, what);
    it_same_on_all(c->comm, recv, bytes, what);
    it_buf_free(&sb);
    it_buf_free(&rb);
}

static int b03(it_ctx_t *c)
{
    {
        int8_t a[4] = {120, -128, 127, 1}, b[4] = {100, -1, 1, -1}, e[4] = {-36, 127, -128, 0};

        b03_one(c, strataInt8, strataSum, a, b, e, 4, "B03 int8 sum wraps");
    }
    {
        uint8_t a[4] = {200, 255, 0, 128}, b[4] = {100, 1, 0, 128}, e[4] = {44, 0, 0, 0};

        b03_one(c, strataUint8, strataSum, a, b, e, 4, "B03 uint8 sum wraps");
    }
    {
        int32_t a[2] = {INT32_MAX, INT32_MIN}, b[2] = {1, -1}, e[2] = {INT32_MIN, INT32_MAX};

        b03_one(c, strataInt32, strataSum, a, b, e, 2, "B03 int32 sum wraps");
    }
    {
        int64_t a[1] = {INT64_MAX}, b[1] = {1}, e[1] = {INT64_MIN};

        b03_one(c, strataInt64, strataSum, a, b, e, 1, "B03 int64 sum wraps");
    }
    {
        int8_t a[2] = {16, -128}, b[2] = {16, -1}, e[2] = {0, -128};

        b03_one(c, strataInt8, strataProd, a, b, e, 2, "B03 int8 prod wraps");
    }
    {
        uint64_t a[2] = {UINT64_MAX, 1ull << 63}, b[2] = {2, 1ull << 63}, e[2] = {1, 0};

        b03_one(c, strataUint64, strataSum, a, b, e, 2, "B03 uint64 sum wraps");
    }
    {
        uint32_t a[1] = {0x10000u}, b[1] = {0x10001u}, e[1] = {0x10000u};

        b03_one(c, strataUint32, strataProd, a, b, e, 1, "B03 uint32 prod wraps");
    }
    return 0;
}

static void test_b03_n2_1node(void **state) { RUN(2, "1", NULL, b03, NULL); }
static void test_b03_n2_1p1(void **state)   { RUN(2, "1+1", NULL, b03, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B04: unsigned min/max compare unsigned                                                       */
/* ------------------------------------------------------------------------------------------ */

static int b04(it_ctx_t *c)
{
    static const strataDataType_t dts[] = {strataUint8, strataUint32, strataUint64};

    for (size_t d = 0; d < 3; d++) {
        strataDataType_t dt   = dts[d];
        int              bits = (int)it_dtype_size(dt) * 8;
        uint64_t         tmax = bits == 64 ? UINT64_MAX : (1ull << bits) - 1;
        uint64_t         h    = 1ull << (bits - 1);
        uint64_t         in[2][3] = {{0, tmax, h - 1}, {tmax, 0, h}};
        uint64_t         emin[3] = {0, 0, h - 1}, emax[3] = {tmax, tmax, h};

        for (int o = 0; o < 2; o++) {
            strataRedOp_t op = o == 0 ? strataMin : strataMax;

            for (int reduce = 0; reduce < 2; reduce++) {
                uint64_t send[3], recv[3], exp[3], orig[3];
                char     what[96];

                snprintf(what, sizeof(what), "B04 %s %s %s", reduce ? "Reduce(root 1)" :
                         "AllReduce", it_dtype_name(dt), it_op_name(op));
                memset(send, 0, sizeof(send));
                memset(recv, 0xEE, sizeof(recv));
                memset(exp, 0, sizeof(exp));
                for (int i = 0; i < 3; i++) {
                    it_set_i(dt, send, (size_t)i, (int64_t)in[c->rank][i]);
                    it_set_i(dt, exp, (size_t)i, (int64_t)(o == 0 ? emin[i] : emax[i]));
                }
                memcpy(orig, recv, sizeof(recv));
                if (!reduce) {
                    if (IT_OK(strataAllReduce(send, recv, 3, dt, op, c->comm, NULL))) {
                        it_expect_equal(dt, recv, exp, 3, what);
                    }
                } else if (IT_OK(strataReduce(send, recv, 3, dt, op, 1, c->comm, NULL))) {
                    if (c->rank == 1) {
                        it_expect_equal(dt, recv, exp, 3, what);
                    } else {
                        IT_EXPECT(memcmp(recv, orig, sizeof(recv)) == 0,
                                  "%s: non-root recvbuff written", what);
                    }
                }
            }
        }
    }
    return 0;
}

static void test_b04_unsigned_minmax(void **state) { RUN(2, "1+1", NULL, b04, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B05: NaN propagates through max/min/sum whichever rank holds it                              */
/* ------------------------------------------------------------------------------------------ */

static int b05(it_ctx_t *c)
{
    static const strataDataType_t dts[] = {strataFloat32, strataFloat64, strataFloat16,
                                           strataBfloat16};
    static const strataRedOp_t    ops[] = {strataMax, strataMin, strataSum};

    for (size_t d = 0; d < 4; d++) {
        strataDataType_t dt = dts[d];

        for (size_t o = 0; o < 3; o++) {
            uint64_t send[5], recv[5];
            char     what[96];

            snprintf(what, sizeof(what), "B05 AllReduce %s %s with NaN/Inf", it_dtype_name(dt),
                     it_op_name(ops[o]));
            for (int j = 0; j < 4; j++) {
                it_set(dt, send, (size_t)j, c->rank == j ? NAN : (double)(c->rank + 1));
            }
            it_set(dt, send, 4, c->rank == 0 ? INFINITY : c->rank == 1 ? -INFINITY : 0.0);
            memset(recv, 0xEE, sizeof(recv));
            if (!IT_OK(strataAllReduce(send, recv, 5, dt, ops[o], c->comm, NULL))) {
                continue;
            }
            for (int j = 0; j < 4; j++) {
                double v = it_get(dt, recv, (size_t)j);

                IT_EXPECT(isnan(v), "%s: element %d (NaN on rank %d) = %g, expected NaN "
                          "(NaN-propagating, as strata.h documents)", what, j, j, v);
            }
            {
                double v = it_get(dt, recv, 4);

                if (ops[o] == strataMax) {
                    IT_EXPECT(v == INFINITY, "%s: max(+Inf, -Inf, 0, 0) = %g", what, v);
                } else if (ops[o] == strataMin) {
                    IT_EXPECT(v == -INFINITY, "%s: min(+Inf, -Inf, 0, 0) = %g", what, v);
                } else {
                    IT_EXPECT(isnan(v), "%s: +Inf + -Inf = %g, expected NaN", what, v);
                }
            }
            it_same_on_all(c->comm, recv, 5 * it_dtype_size(dt), what);
        }
    }
    return 0;
}

static void test_b05_nan_minmax(void **state) { RUN(4, "2x2", NULL, b05, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B06: integer avg truncates toward zero; fp32 avg                                             */
/* ------------------------------------------------------------------------------------------ */

static int b06(it_ctx_t *c)
{
    int     n = c->nranks, r = c->rank;
    int32_t x[4] = {10 * (r + 1), -(r + 1), r == 0 ? 1 : 0, r == 0 ? -1 : 0};
    int32_t y[4] = {0};
    int32_t e[4] = {10 * (n + 1) / 2, -(n + 1) / 2, 0, 0}; /* n odd: exact; q = -1/n -> 0 */
    float   xf[4], yf[4];

    memset(y, 0x5A, sizeof(y));
    if (IT_OK(strataAllReduce(x, y, 4, strataInt32, strataAvg, c->comm, NULL))) {
        it_expect_equal(strataInt32, y, e, 4, "B06 int32 avg (truncation toward zero)");
        IT_EXPECT(y[0] != 0 || y[1] != 0, "B06 int32 avg returned all zeros");
    }
    it_same_on_all(c->comm, y, sizeof(y), "B06 int32 avg");
    for (int i = 0; i < 4; i++) {
        xf[i] = (float)(r + 1);
    }
    if (IT_OK(strataAllReduce(xf, yf, 4, strataFloat32, strataAvg, c->comm, NULL))) {
        float want = (float)(n + 1) / 2.0f;

        for (int i = 0; i < 4; i++) {
            IT_EXPECT(within_ulps_f(yf[i], want, 2), "B06 fp32 avg [%d] = %.9g, expected %.9g "
                      "within 2 ulp", i, yf[i], want);
        }
    }
    it_same_on_all(c->comm, yf, sizeof(yf), "B06 fp32 avg");
    return 0;
}

static void test_b06_n3(void **state) { RUN(3, "2+1", NULL, b06, NULL); }
static void test_b06_n5(void **state) { RUN(5, "3+2", NULL, b06, NULL); }
static void test_b06_n7(void **state) { RUN(7, "4+3", NULL, b06, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B07: fp16 avg does not overflow; fp16 sum overflows to +Inf                                  */
/* ------------------------------------------------------------------------------------------ */

static int b07(it_ctx_t *c)
{
    uint16_t x[3], y[3], e[3];
    uint16_t s = it_f2h(30000.0f), t = 0;

    x[0] = it_f2h(30000.0f);
    x[1] = it_f2h(60000.0f);
    x[2] = it_f2h(ldexpf(1.0f, -14));
    memcpy(e, x, sizeof(x));
    memset(y, 0xEE, sizeof(y));
    if (IT_OK(strataAllReduce(x, y, 3, strataFloat16, strataAvg, c->comm, NULL))) {
        it_expect_equal(strataFloat16, y, e, 3, "B07 fp16 avg of [30000, 60000, 2^-14]");
    }
    it_same_on_all(c->comm, y, sizeof(y), "B07 fp16 avg");
    if (IT_OK(strataAllReduce(&s, &t, 1, strataFloat16, strataSum, c->comm, NULL))) {
        IT_EXPECT(t == 0x7c00u, "B07 fp16 sum 4 x 30000 = 0x%04x (%g), expected +Inf (0x7c00)",
                  t, it_h2f(t));
    }
    return 0;
}

static void test_b07_fp16_avg(void **state) { RUN(4, "2x2", NULL, b07, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B10: Reduce never writes non-root buffers; NULL recvbuff on non-roots; read-only sendbuff    */
/* ------------------------------------------------------------------------------------------ */

static int b10(it_ctx_t *c)
{
    int    n = c->nranks;
    int    roots[2] = {0, n - 1};
    long   pg = sysconf(_SC_PAGESIZE);

    for (int ri = 0; ri < 2; ri++) {
        int     root = roots[ri];
        int64_t exp[4];
        char    what[96];

        for (int k = 0; k < 4; k++) {
            exp[k] = (int64_t)n * (k + 1) + 3 * (int64_t)n * (n - 1) / 2;
        }
        /* (a) in place everywhere */
        {
            it_buf_t b;
            int64_t *buf = it_buf_alloc(&b, 32, 0, 0);
            int64_t  orig[4];

            snprintf(what, sizeof(what), "B10 Reduce int64 in place root %d", root);
            for (int k = 0; k < 4; k++) {
                buf[k] = k + 1 + 3 * c->rank;
            }
            memcpy(orig, buf, sizeof(orig));
            if (IT_OK(strataReduce(buf, buf, 4, strataInt64, strataSum, root, c->comm, NULL))) {
                it_expect_equal(strataInt64, buf, c->rank == root ? exp : orig, 4,
                                c->rank == root ? what : "B10 non-root buffer unchanged");
            }
            it_buf_guards(&b, what);
            it_buf_free(&b);
        }
        /* (b) out of place, recvbuff NULL on non-roots, sendbuff read-only everywhere */
        {
            int64_t *send = mmap(NULL, (size_t)pg, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            it_buf_t rb;
            int64_t *recv = NULL;

            if (send == MAP_FAILED) {
                IT_FAIL("mmap failed");
                return 1;
            }
            snprintf(what, sizeof(what), "B10 Reduce int64 out of place root %d, read-only "
                     "sendbuff, NULL recvbuff on non-roots", root);
            for (int k = 0; k < 4; k++) {
                send[k] = k + 1 + 3 * c->rank;
            }
            mprotect(send, (size_t)pg, PROT_READ);
            if (c->rank == root) {
                recv = it_buf_alloc(&rb, 32, 0, 0xEE);
            }
            if (IT_OK(strataReduce(send, recv, 4, strataInt64, strataSum, root, c->comm,
                                   NULL)) &&
                c->rank == root) {
                it_expect_equal(strataInt64, recv, exp, 4, what);
            }
            if (c->rank == root) {
                it_buf_guards(&rb, what);
                it_buf_free(&rb);
            }
            munmap(send, (size_t)pg);
        }
    }
    return 0;
}

static void test_b10_reduce_n2(void **state) { RUN(2, "1+1", NULL, b10, NULL); }
static void test_b10_reduce_n4(void **state) { RUN(4, "2x2", NULL, b10, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B12: in-place AllGather on non-zero ranks                                                    */
/* ------------------------------------------------------------------------------------------ */

static int b12(it_ctx_t *c)
{
    int           n = c->nranks;
    const size_t  counts[] = {3, 1, 0};

    for (size_t k = 0; k < 3; k++) {
        size_t   count = counts[k];
        size_t   slots = count > 0 ? (size_t)n * count : 8;
        it_buf_t b;
        int32_t *buf = it_buf_alloc(&b, slots * 4, 0, 0);
        int32_t *exp = xmalloc(slots * 4);
        char     what[96];

        snprintf(what, sizeof(what), "B12 AllGather int32 count %zu in place", count);
        for (size_t s = 0; s < slots; s++) {
            buf[s] = -1;
        }
        for (size_t j = 0; j < count; j++) {
            buf[(size_t)c->rank * count + j] = 100 * c->rank + (int32_t)j;
        }
        if (count == 0) {
            memcpy(exp, buf, slots * 4);
        } else {
            for (int q = 0; q < n; q++) {
                for (size_t j = 0; j < count; j++) {
                    exp[(size_t)q * count + j] = 100 * q + (int32_t)j;
                }
            }
        }
        if (IT_OK(strataAllGather(buf + (size_t)c->rank * count, buf, count, strataInt32,
                                  c->comm, NULL))) {
            it_expect_equal(strataInt32, buf, exp, slots, what);
        }
        it_buf_guards(&b, what);
        it_same_on_all(c->comm, buf, slots * 4, what);
        it_buf_free(&b);
        free(exp);
    }
    return 0;
}

static void test_b12_allgather_inplace_n4(void **state) { RUN(4, "2x2", NULL, b12, NULL); }
static void test_b12_allgather_inplace_n3(void **state) { RUN(3, "2+1", NULL, b12, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B13: Broadcast, non-zero roots, chunk boundaries, count < nranks                             */
/* ------------------------------------------------------------------------------------------ */

static int b13(it_ctx_t *c)
{
    size_t chunk = *(const size_t *)c->arg; /* STRATA_CHUNK_SIZE of the run, in bytes = uint8 */
    int    n = c->nranks;
    int    roots[4] = {0, 2, 3, n - 1};
    size_t counts[] = {0, 1, 3, (size_t)n - 1, 4095, 4096, 4097, 16384, 32768,
                       chunk - 1, chunk, chunk + 1, 2 * chunk + 7};

    for (int ri = 0; ri < 4; ri++) {
        int root = roots[ri];

        if (ri == 3 && (root == 2 || root == 3)) {
            continue;
        }
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            size_t   count = counts[k];
            it_buf_t b;
            uint8_t *buf = it_buf_alloc(&b, count, 0, 0xEE);
            uint8_t *exp = xmalloc(count);
            char     what[96];

            snprintf(what, sizeof(what), "B13 Broadcast uint8 in place root %d count %zu", root,
                     count);
            for (size_t i = 0; i < count; i++) {
                exp[i] = (uint8_t)((31 * i + 7 * (size_t)root + 1) % 256);
            }
            if (c->rank == root) {
                memcpy(buf, exp, count);
            }
            if (IT_OK(strataBroadcast(buf, buf, count, strataUint8, root, c->comm, NULL))) {
                it_expect_equal(strataUint8, buf, exp, count, what);
            }
            it_buf_guards(&b, what);
            it_same_on_all(c->comm, buf, count, what);
            it_buf_free(&b);
            free(exp);
        }
    }
    return 0;
}

static const size_t chunk_default = 512 * 1024, chunk_4k = 4096;

static void test_b13_bcast_n8_2x4(void **state) { RUN(8, "2x4", NULL, b13, &chunk_default); }
static void test_b13_bcast_n5_3p2(void **state) { RUN(5, "3+2", NULL, b13, &chunk_default); }
static void test_b13_bcast_n5_3p2_chunk4k(void **state)
{
    RUN(5, "3+2", "STRATA_CHUNK_SIZE=4k", b13, &chunk_4k);
}

/* ------------------------------------------------------------------------------------------ */
/* B15: determinism and cross-rank consistency                                                  */
/* ------------------------------------------------------------------------------------------ */

#define B15_COUNT 1000003u

/* Slots in the shared page for cross-run comparison: one per layout. */
typedef struct {
    int      layout;   /* index into the shared table */
} b15_arg_t;

static uint64_t xorshift(uint64_t *s)
{
    *s ^= *s << 13;
    *s ^= *s >> 7;
    *s ^= *s << 17;
    return *s;
}

static void b15_perm(int p, int out[4])
{
    int items[4] = {0, 1, 2, 3};

    /* p in [0, 24): the p-th permutation of positions (factorial number system) */
    for (int k = 4; k >= 1; k--) {
        int f = 1;

        for (int q = 2; q < k; q++) {
            f *= q;
        }
        {
            int idx = (p / f) % k;

            out[4 - k] = items[idx];
            for (int q = idx; q < k - 1; q++) {
                items[q] = items[q + 1];
            }
        }
    }
}

static void b15_fill(float *x, size_t count, size_t probe_off, int rank)
{
    static const float probe[4] = {1e8f, 1.0f, -1e8f, 1.0f};
    uint64_t           s = 0x9E3779B97F4A7C15ull * (uint64_t)(rank + 1);

    for (size_t i = 0; i < count; i++) {
        x[i] = (float)((double)(xorshift(&s) >> 11) * 0x1p-53 * 2000.0 - 1000.0);
    }
    for (int p = 0; p < 24; p++) {
        int perm[4];

        b15_perm(p, perm);
        x[probe_off + (size_t)p] = probe[perm[rank]];
    }
}

static void b15_check_probes(const float *y, size_t off, const char *what)
{
    for (int p = 0; p < 24; p++) {
        float v = y[off + (size_t)p];

        IT_EXPECT(v == 0.0f || v == 1.0f || v == 2.0f, "%s: probe %d = %.9g, expected 0, 1 or 2",
                  what, p, v);
    }
}

static int b15(it_ctx_t *c)
{
    const b15_arg_t *a      = c->arg;
    uint64_t        *shared = (uint64_t *)c->shared + 8 * a->layout;
    float           *x = xmalloc(B15_COUNT * sizeof(float));
    float           *y1 = xmalloc(B15_COUNT * sizeof(float));
    float           *y2 = xmalloc(B15_COUNT * sizeof(float));
    float            x24[24], z24[24];
    float            x2k[2048], z2k[2048];

    if (c->nranks != 4) {
        IT_FAIL("B15 needs 4 ranks");
        return 1;
    }
    b15_fill(x, B15_COUNT, 0, c->rank);
    if (IT_OK(strataAllReduce(x, y1, B15_COUNT, strataFloat32, strataSum, c->comm, NULL)) &&
        IT_OK(strataAllReduce(x, y2, B15_COUNT, strataFloat32, strataSum, c->comm, NULL))) {
        b15_check_probes(y1, 0, "B15 count 1000003");
        IT_EXPECT(memcmp(y1, y2, B15_COUNT * sizeof(float)) == 0,
                  "B15: two runs of the same AllReduce differ");
        it_same_on_all(c->comm, y1, B15_COUNT * sizeof(float), "B15 count 1000003");
    }
    b15_fill(x24, 24, 0, c->rank);
    if (IT_OK(strataAllReduce(x24, z24, 24, strataFloat32, strataSum, c->comm, NULL))) {
        b15_check_probes(z24, 0, "B15 count 24");
        it_same_on_all(c->comm, z24, sizeof(z24), "B15 count 24");
    }
    b15_fill(x2k, 2048, 1024, c->rank);
    if (IT_OK(strataAllReduce(x2k, z2k, 2048, strataFloat32, strataSum, c->comm, NULL))) {
        b15_check_probes(z2k, 1024, "B15 probes at offset 1024");
        it_same_on_all(c->comm, z2k, sizeof(z2k), "B15 probes at offset 1024");
    }
    /* Run to run (other processes, same layout): the first run records, later runs compare. */
    if (c->rank == 0) {
        uint64_t h[3] = {it_hash(y1, B15_COUNT * sizeof(float)), it_hash(z24, sizeof(z24)),
                         it_hash(z2k, sizeof(z2k))};

        if (shared[0] == 0) {
            memcpy(shared + 1, h, sizeof(h));
            __atomic_store_n(&shared[0], 1, __ATOMIC_SEQ_CST);
        } else {
            IT_EXPECT(memcmp(shared + 1, h, sizeof(h)) == 0,
                      "B15: result differs from the earlier run with the same layout");
        }
    }
    free(x);
    free(y1);
    free(y2);
    return 0;
}

static const b15_arg_t b15_2x2 = {0}, b15_4x1 = {1}, b15_1x4 = {2};

static void test_b15_determinism_2x2(void **state)       { RUN(4, "2x2", NULL, b15, &b15_2x2); }
static void test_b15_determinism_2x2_again(void **state) { RUN(4, "2x2", NULL, b15, &b15_2x2); }
static void test_b15_determinism_4x1(void **state)       { RUN(4, "4x1", NULL, b15, &b15_4x1); }
static void test_b15_determinism_1x4(void **state)       { RUN(4, "1x4", NULL, b15, &b15_1x4); }

/* ------------------------------------------------------------------------------------------ */
/* B23: zero-count entries in grouped send/recv; self pairs; empty groups                       */
/* ------------------------------------------------------------------------------------------ */

static size_t b23_count(int s, int d)
{
    return d == 1 ? 0 : (size_t)(s + d + 1);
}

static int b23(it_ctx_t *c)
{
    int    n = c->nranks, r = c->rank;
    size_t sdisp[16], rdisp[16], stot = 0, rtot = 0;

    if (n > 16) {
        return 1;
    }
    for (int p = 0; p < n; p++) {
        sdisp[p] = stot;
        stot += b23_count(r, p);
        rdisp[p] = rtot;
        rtot += b23_count(p, r);
    }
    /* all-to-all-v with zero counts (every pair issued, count 0 included) */
    {
        it_buf_t sb, rb;
        float   *send = it_buf_alloc(&sb, stot * 4 + 64, 0, 0);
        float   *recv = it_buf_alloc(&rb, rtot * 4 + 64, 0, 0xEE);

        for (int d = 0; d < n; d++) {
            for (size_t k = 0; k < b23_count(r, d); k++) {
                send[sdisp[d] + k] = (float)(10 * r + d);
            }
        }
        IT_OK(strataGroupStart());
        for (int d = 0; d < n; d++) {
            IT_OK(strataSend(send + sdisp[d], b23_count(r, d), strataFloat32, d, c->comm, NULL));
        }
        for (int s = 0; s < n; s++) {
            IT_OK(strataRecv(recv + rdisp[s], b23_count(s, r), strataFloat32, s, c->comm, NULL));
        }
        if (IT_OK(strataGroupEnd())) {
            for (int s = 0; s < n; s++) {
                for (size_t k = 0; k < b23_count(s, r); k++) {
                    if (recv[rdisp[s] + k] != (float)(10 * s + r)) {
                        IT_FAIL("B23 all-to-all-v: from rank %d element %zu = %g, expected %d",
                                s, k, recv[rdisp[s] + k], 10 * s + r);
                        break;
                    }
                }
            }
        }
        for (size_t k = rtot * 4; k < rtot * 4 + 64; k++) {
            if (((uint8_t *)recv)[k] != 0xEE) {
                IT_FAIL("B23: recv buffer written past the received data (byte %zu of %zu)", k,
                        rtot * 4);
                break;
            }
        }
        it_buf_guards(&sb, "B23 send");
        it_buf_guards(&rb, "B23 recv");
        it_buf_free(&sb);
        it_buf_free(&rb);
    }
    /* all counts 0 (with NULL buffers for half of them) */
    {
        float one = 7.0f, got = 9.0f;

        IT_OK(strataGroupStart());
        for (int d = 0; d < n; d++) {
            IT_OK(strataSend(d % 2 ? NULL : &one, 0, strataFloat32, d, c->comm, NULL));
            IT_OK(strataRecv(d % 2 ? NULL : &got, 0, strataFloat32, d, c->comm, NULL));
        }
        IT_OK(strataGroupEnd());
        IT_EXPECT(got == 9.0f, "B23: zero-count recv wrote its buffer");
    }
    /* ranks 2 and 3 open and close an empty group while 0 and 1 exchange 5 elements */
    if (r >= 2) {
        double t0 = it_now();

        IT_OK(strataGroupStart());
        IT_OK(strataGroupEnd());
        IT_EXPECT(it_now() - t0 < 1.0, "B23: empty group took %.3f s", it_now() - t0);
    } else {
        float s5[5], r5[5];
        int   peer = 1 - r;

        for (int k = 0; k < 5; k++) {
            s5[k] = (float)(100 * r + k);
            r5[k] = -1;
        }
        IT_OK(strataGroupStart());
        IT_OK(strataSend(s5, 5, strataFloat32, peer, c->comm, NULL));
        IT_OK(strataRecv(r5, 5, strataFloat32, peer, c->comm, NULL));
        if (IT_OK(strataGroupEnd())) {
            for (int k = 0; k < 5; k++) {
                IT_EXPECT(r5[k] == (float)(100 * peer + k), "B23 pair exchange [%d] = %g", k,
                          r5[k]);
            }
        }
    }
    /* the communicator still works for everyone afterwards */
    {
        int32_t v = r + 1, sum = 0;

        if (IT_OK(strataAllReduce(&v, &sum, 1, strataInt32, strataSum, c->comm, NULL))) {
            IT_EXPECT(sum == n * (n + 1) / 2, "B23: AllReduce afterwards = %d", sum);
        }
    }
    return 0;
}

static void test_b23_alltoallv_zero_counts(void **state) { RUN(4, "2x2", NULL, b23, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B25: unaligned buffers and odd sizes                                                         */
/* ------------------------------------------------------------------------------------------ */

static int b25(it_ctx_t *c)
{
    static const strataDataType_t dts[] = {strataFloat32, strataFloat64, strataFloat16,
                                           strataBfloat16, strataInt8};
    static const int offs[3][2] = {{1, 3}, {3, 5}, {5, 1}}; /* send, recv, in elements */
    int    n = c->nranks, r = c->rank;
    size_t counts[] = {1, 15, 16 * (size_t)n - 1, 16 * (size_t)n + 1, 4097};

    for (size_t d = 0; d < 5; d++) {
        strataDataType_t dt = dts[d];
        size_t           es = it_dtype_size(dt);

        for (size_t k = 0; k < 5; k++) {
            size_t count = counts[k], total = count * (size_t)n;
            int    o     = (int)((d + k) % 3);
            size_t so = (size_t)offs[o][0] * es, ro = (size_t)offs[o][1] * es;
            char   what[128];

            /* AllReduce */
            {
                it_buf_t sb, rb;
                void    *send = it_buf_alloc(&sb, count * es, so, 0);
                void    *recv = it_buf_alloc(&rb, count * es, ro, 0xEE);
                void    *exp  = xmalloc(count * es);

                snprintf(what, sizeof(what), "B25 AllReduce %s count %zu offsets %zu/%zu bytes",
                         it_dtype_name(dt), count, so, ro);
                for (size_t i = 0; i < count; i++) {
                    it_set(dt, send, i, (double)(i % 11) + r);
                    it_set(dt, exp, i, (double)n * (double)(i % 11) + n * (n - 1) / 2);
                }
                if (IT_OK(strataAllReduce(send, recv, count, dt, strataSum, c->comm, NULL))) {
                    it_expect_equal(dt, recv, exp, count, what);
                }
                it_buf_guards(&sb, what);
                it_buf_guards(&rb, what);
                it_same_on_all(c->comm, recv, count * es, what);
                it_buf_free(&sb);
                it_buf_free(&rb);
                free(exp);
            }
            /* AllGather */
            {
                it_buf_t sb, rb;
                void    *send = it_buf_alloc(&sb, count * es, so, 0);
                void    *recv = it_buf_alloc(&rb, total * es, ro, 0xEE);
                void    *exp  = xmalloc(total * es);

                snprintf(what, sizeof(what), "B25 AllGather %s count %zu offsets %zu/%zu bytes",
                         it_dtype_name(dt), count, so, ro);
                for (size_t i = 0; i < count; i++) {
                    it_set(dt, send, i, (double)(i % 11) + r);
                }
                for (int q = 0; q < n; q++) {
                    for (size_t i = 0; i < count; i++) {
                        it_set(dt, exp, (size_t)q * count + i, (double)(i % 11) + q);
                    }
                }
                if (IT_OK(strataAllGather(send, recv, count, dt, c->comm, NULL))) {
                    it_expect_equal(dt, recv, exp, total, what);
                }
                it_buf_guards(&sb, what);
                it_buf_guards(&rb, what);
                it_buf_free(&sb);
                it_buf_free(&rb);
                free(exp);
            }
            /* ReduceScatter (recvcount = count) */
            {
                it_buf_t sb, rb;
                void    *send = it_buf_alloc(&sb, total * es, so, 0);
                void    *recv = it_buf_alloc(&rb, count * es, ro, 0xEE);
                void    *exp  = xmalloc(count * es);

                snprintf(what, sizeof(what), "B25 ReduceScatter %s recvcount %zu offsets "
                         "%zu/%zu bytes", it_dtype_name(dt), count, so, ro);
                for (size_t i = 0; i < total; i++) {
                    it_set(dt, send, i, (double)(i % 11) + r);
                }
                for (size_t j = 0; j < count; j++) {
                    size_t g = (size_t)r * count + j;

                    it_set(dt, exp, j, (double)n * (double)(g % 11) + n * (n - 1) / 2);
                }
                if (IT_OK(strataReduceScatter(send, recv, count, dt, strataSum, c->comm, NULL))) {
                    it_expect_equal(dt, recv, exp, count, what);
                }
                it_buf_guards(&sb, what);
                it_buf_guards(&rb, what);
                it_buf_free(&sb);
                it_buf_free(&rb);
                free(exp);
            }
        }
    }
    return 0;
}

static void test_b25_unaligned_n3(void **state) { RUN(3, "2+1", NULL, b25, NULL); }
static void test_b25_unaligned_n4(void **state) { RUN(4, "2x2", NULL, b25, NULL); }

/* ------------------------------------------------------------------------------------------ */
/* B26: buffers freed and mapped again at the same address are never served from a stale cache  */
/* ------------------------------------------------------------------------------------------ */

#define B26_BYTES ((size_t)(1 << 20) + 4096)
#define B26_ITERS 50

typedef enum { B26_MMAP, B26_MEMALLOC } b26_kind_t;

/* Maps bytes at hint (MAP_FIXED_NOREPLACE: the same address or none), or anywhere first time. */
static uint8_t *b26_map(void *hint, size_t bytes)
{
    void *p = mmap(hint, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | (hint != NULL ? MAP_FIXED_NOREPLACE : 0), -1, 0);

    return p == MAP_FAILED ? NULL : p;
}

static void b26_fill(uint8_t *b, size_t from, size_t to, int it, int r)
{
    for (size_t i = from; i < to; i++) {
        b[i] = (uint8_t)((7u * (unsigned)it + (unsigned)r + (unsigned)i) & 0xffu);
    }
}

/* recv[i] = sum over r of (7 it + r + i) = n (7 it + i) + n (n - 1) / 2 mod 256: the case's
 * (14 it + 2 i + 1) mod 256 for n = 2 */
static int b26_check(const uint8_t *y, int n, int it, const char *what)
{
    for (size_t i = 0; i < B26_BYTES; i++) {
        uint8_t want = (uint8_t)(((unsigned)n * (7u * (unsigned)it + (unsigned)i) +
                                  (unsigned)(n * (n - 1) / 2)) & 0xffu);

        if (!IT_EXPECT(y[i] == want, "B26 %s iteration %d: recv[%zu] = %u, expected %u", what, it,
                       i, y[i], want)) {
            return 0;
        }
    }
    return 1;
}

static int b26(it_ctx_t *c)
{
    b26_kind_t kind = *(const b26_kind_t *)c->arg;
    uint8_t   *send_at = NULL, *recv_at = NULL;
    int        repeats = 0;

    for (int it = 0; it < B26_ITERS; it++) {
        uint8_t *x, *y;

        if (kind == B26_MMAP) {
            x = b26_map(send_at, B26_BYTES);
            y = b26_map(recv_at, B26_BYTES);
            if (!IT_EXPECT(x != NULL && y != NULL, "B26 iteration %d: cannot map the buffers "
                           "again at %p and %p", it, (void *)send_at, (void *)recv_at)) {
                return 1;
            }
        } else {
            x = y = NULL;
            if (!IT_OK(strataMemAlloc((void **)&x, B26_BYTES)) ||
                !IT_OK(strataMemAlloc((void **)&y, B26_BYTES))) {
                return 1;
            }
        }
        repeats += (x == send_at && y == recv_at);
        send_at = x;
        recv_at = y;
        b26_fill(x, 0, B26_BYTES, it, c->rank);
        memset(y, 0, B26_BYTES);
        if (IT_OK(strataAllReduce(x, y, B26_BYTES, strataUint8, strataSum, c->comm, NULL))) {
            b26_check(y, c->nranks, it, kind == B26_MMAP ? "mmap" : "strataMemAlloc");
        }
        if (kind == B26_MMAP && it % 10 == 9) {
            /* the variant: only the upper half of the send buffer unmapped, mapped again and
             * refilled (with this iteration's next pattern) */
            size_t half = (B26_BYTES / 2) & ~(size_t)4095;

            munmap(x + half, B26_BYTES - half);
            if (!IT_EXPECT(b26_map(x + half, B26_BYTES - half) == x + half,
                           "B26: cannot map the upper half again")) {
                return 1;
            }
            b26_fill(x, 0, B26_BYTES, it + 1, c->rank);
            memset(y, 0, B26_BYTES);
            if (IT_OK(strataAllReduce(x, y, B26_BYTES, strataUint8, strataSum, c->comm, NULL))) {
                b26_check(y, c->nranks, it + 1, "half remapped");
            }
        }
        if (kind == B26_MMAP) {
            munmap(x, B26_BYTES);
            munmap(y, B26_BYTES);
        } else {
            IT_OK(strataMemFree(x));
            IT_OK(strataMemFree(y));
        }
    }
    /* mmap with a fixed hint must repeat the addresses; strataMemAlloc may not (then the test
     * still checks the data of every iteration) */
    if (kind == B26_MMAP) {
        IT_EXPECT(repeats == B26_ITERS - 1, "B26: the addresses repeated %d times of %d", repeats,
                  B26_ITERS - 1);
    }
    return 0;
}

static const b26_kind_t b26_mmap = B26_MMAP, b26_memalloc = B26_MEMALLOC;
/* 1+1: the inter-node path (ring over the network transport); 1 node: the shm windows; both
 * under the default algorithm choice and forced ring */
static void test_b26_remap_1p1(void **state)      { RUN(2, "1+1", NULL, b26, &b26_mmap); }
static void test_b26_remap_1node(void **state)    { RUN(2, "1", NULL, b26, &b26_mmap); }
static void test_b26_remap_ring_1node(void **state)
{
    RUN(2, "1", "STRATA_ALGO=ring", b26, &b26_mmap);
}
static void test_b26_memalloc_1node(void **state) { RUN(2, "1", NULL, b26, &b26_memalloc); }
static void test_b26_memalloc_2x2(void **state)   { RUN(4, "2x2", NULL, b26, &b26_memalloc); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b01_single_rank_avg),
        cmocka_unit_test(test_b02_n4_1node),
        cmocka_unit_test(test_b02_n4_2x2),
        cmocka_unit_test(test_b02_n8_2x4),
        cmocka_unit_test(test_b03_n2_1node),
        cmocka_unit_test(test_b03_n2_1p1),
        cmocka_unit_test(test_b04_unsigned_minmax),
        cmocka_unit_test(test_b05_nan_minmax),
        cmocka_unit_test(test_b06_n3),
        cmocka_unit_test(test_b06_n5),
        cmocka_unit_test(test_b06_n7),
        cmocka_unit_test(test_b07_fp16_avg),
        cmocka_unit_test(test_b10_reduce_n2),
        cmocka_unit_test(test_b10_reduce_n4),
        cmocka_unit_test(test_b12_allgather_inplace_n4),
        cmocka_unit_test(test_b12_allgather_inplace_n3),
        cmocka_unit_test(test_b13_bcast_n8_2x4),
        cmocka_unit_test(test_b13_bcast_n5_3p2),
        cmocka_unit_test(test_b13_bcast_n5_3p2_chunk4k),
        cmocka_unit_test(test_b15_determinism_2x2),
        cmocka_unit_test(test_b15_determinism_4x1),
        cmocka_unit_test(test_b15_determinism_1x4),
        cmocka_unit_test(test_b15_determinism_2x2_again),
        cmocka_unit_test(test_b23_alltoallv_zero_counts),
        cmocka_unit_test(test_b25_unaligned_n3),
        cmocka_unit_test(test_b25_unaligned_n4),
        cmocka_unit_test(test_b26_remap_1p1),
        cmocka_unit_test(test_b26_remap_1node),
        cmocka_unit_test(test_b26_remap_ring_1node),
        cmocka_unit_test(test_b26_memalloc_1node),
        cmocka_unit_test(test_b26_memalloc_2x2),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
