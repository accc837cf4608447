/*
 * test_codec.c - unit tests of the codecs of the compressed inter-node step (src/codec/) and of
 * the public compressor and spec functions (src/core/compress.c; include/strata.h, "Compression
 * of the inter-node phase").
 *
 * Every expectation is written from the header's description of the format, not copied from the
 * codec: wire sizes from the formulas, the int8 scale and bytes, the sign scale, the top-k set by
 * a sort, the casts by half.h's round-to-nearest-even conversions. Each codec x datatype x count is
 * round-tripped on deterministic pseudo-random data (zeros of both signs, negatives, fp16
 * subnormals or tiny fp32 values, large magnitudes) and checked element by element against the
 * error bound of st_codec_eps, over the whole range and per block; then the error-feedback
 * residual is checked to be exactly what the receiver lost, and 50 steps of error feedback are
 * checked to telescope (the mean of what was sent tends to x) with a bounded residual. The named
 * cases (top-k ties, NaN and Inf blocks, fp16 saturation, specs, compressor errors) have tests of
 * their own with literal values.
 */
#include "config.h"
#include "codec/codec.h"
#include "reduce/half.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 0xa5 /* byte pattern after every wire and destination buffer */
#define GUARD_SZ 64

static const strataDataType_t dtypes[] = {strataFloat32, strataFloat16, strataBfloat16};

/* int8's eps: half a step, M / 254, up to the float rounding of 127 / M (src/codec/int8.c) */
#define INT8_EPS (1.0 / 254.0 * (1.0 + 0x1p-10))
static const size_t counts[] = {1, 7, 255, 256, 257, 1000};

/* Every codec with several parameter sets: blocks that divide 256 and ones that do not, the
 * degenerate block 1, densities whose k is clamped to 1 and density 1. */
static const strataCompressParams_t configs[] = {
    {strataCodecNone, 0.0, 256, 1}, {strataCodecFp16, 0.0, 256, 1},
    {strataCodecBf16, 0.0, 256, 1}, {strataCodecInt8, 0.0, 256, 1},
    {strataCodecInt8, 0.0, 64, 1},  {strataCodecInt8, 0.0, 7, 1},
    {strataCodecInt8, 0.0, 1, 1},   {strataCodecTopk, 0.01, 256, 1},
    {strataCodecTopk, 0.1, 256, 1}, {strataCodecTopk, 0.5, 256, 1},
    {strataCodecTopk, 1.0, 256, 1}, {strataCodecTopk, 1e-9, 256, 1},
    {strataCodecSign, 0.0, 256, 1}, {strataCodecSign, 0.0, 128, 1},
    {strataCodecSign, 0.0, 5, 1},   {strataCodecSign, 0.0, 1, 1},
};
#define NCONFIGS (sizeof(configs) / sizeof(configs[0]))

/* ---------------------------------------------------------------------------------------- */
/* Helpers                                                                                  */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

/* uniform in [0, 1) */
static double rnd01(void)
{
    return (double)(rnd() >> 11) * 0x1p-53;
}

static uint32_t fbits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static size_t dt_size(strataDataType_t dt)
{
    return dt == strataFloat32 ? 4 : 2;
}

static const char *dt_name(strataDataType_t dt)
{
    return dt == strataFloat32 ? "fp32" : (dt == strataFloat16 ? "fp16" : "bf16");
}

static const char *cfg_name(const strataCompressParams_t *p, char *buf, size_t size)
{
    snprintf(buf, size, "%s density %g block %zu ef %d", st_codec_name(p->codec), p->density,
             p->block, p->errorFeedback);
    return buf;
}

/* The datatype's element access and rounding: codec.h's (half.h's conversions, round to nearest
 * even), the reference of every cast below. */
#define round_dt st_codec_round
#define store_dt st_codec_store
#define load_dt  st_codec_load

/* The header's k of topk: ceil(density x n), clamped to [1, n]. */
static size_t ref_topk_k(double density, size_t n)
{
    double k = ceil(density * (double)n);

    if (k < 1.0) {
        return 1;
    }
    return k > (double)n ? n : (size_t)k;
}

/* The header's wire sizes. */
static size_t ref_wire_bytes(const strataCompressParams_t *p, strataDataType_t dt, size_t n)
{
    size_t es = dt_size(dt);

    if (n == 0) {
        return 0;
    }
    switch (p->codec) {
    case strataCodecNone: return es * n;
    case strataCodecFp16:
    case strataCodecBf16: return 2 * n;
    case strataCodecInt8: return 4 * ((n + p->block - 1) / p->block) + n;
    case strataCodecTopk: return ref_topk_k(p->density, n) * (4 + es);
    case strataCodecSign: return 4 * ((n + p->block - 1) / p->block) + (n + 7) / 8;
    default: return 0;
    }
}

/* Deterministic test data in dt: +-0, negatives, tiny values (fp16 subnormals where fp16 is
 * involved, 1e-30 otherwise), rare large magnitudes (below fp16's 65504 where fp16 is involved)
 * and ordinary values over 12 binades. xf receives the values as float (exactly x's). */
static void gen_data(const strataCompressParams_t *p, strataDataType_t dt, size_t n, void *x,
                     float *xf)
{
    int    half = p->codec == strataCodecFp16 || dt == strataFloat16;
    double tiny = half ? 3e-7 : 1e-30, big = half ? 3e4 : 1e20;

    for (size_t i = 0; i < n; i++) {
        unsigned c   = (unsigned)(rnd() % 64);
        double   sgn = (rnd() & 1) ? -1.0 : 1.0, f;

        if (c == 0) {
            f = 0.0;
        } else if (c == 1) {
            f = -0.0;
        } else if (c < 5) {
            f = sgn * tiny * (1.0 + rnd01());
        } else if (c == 5) {
            f = sgn * big * (0.5 + 0.5 * rnd01());
        } else {
            f = sgn * ldexp(1.0 + rnd01(), (int)(rnd() % 12) - 6);
        }
        store_dt(dt, x, i, (float)f);
        xf[i] = load_dt(dt, x, i);
    }
}

/* Field by field: the struct has padding. */
static int params_equal(const strataCompressParams_t *a, const strataCompressParams_t *b)
{
    return a->codec == b->codec && memcmp(&a->density, &b->density, sizeof(double)) == 0 &&
           a->block == b->block && a->errorFeedback == b->errorFeedback;
}

/* A wire or destination buffer with GUARD_SZ guard bytes after size. */
static void *guarded(size_t size)
{
    unsigned char *b = malloc(size + GUARD_SZ);

    assert_non_null(b);
    memset(b, GUARD, size + GUARD_SZ);
    return b;
}

static void check_guard(const void *buf, size_t size, const char *what)
{
    const unsigned char *b = buf;

    for (size_t i = 0; i < GUARD_SZ; i++) {
        if (b[size + i] != GUARD) {
            fail_msg("%s: byte %zu past its %zu bytes was written", what, i, size);
        }
    }
}

/* The absolute part of the error bound: fp16's subnormal step / 2 where an fp16 rounding
 * happens (the fp16 codec, or decoding into fp16). */
static double abs_slack(const strataCompressParams_t *p, strataDataType_t dt)
{
    return (p->codec == strataCodecFp16 || dt == strataFloat16) ? 0x1p-25 : 0.0;
}

/* One encode/decode of n elements: wire and dst are guarded and checked; res may be NULL. */
typedef struct {
    size_t         wb;
    unsigned char *wire;
    unsigned char *dst;
    float         *scratch;
} coded_t;

static void coded_init(coded_t *c, const strataCompressParams_t *p, strataDataType_t dt, size_t n)
{
    c->wb      = st_codec_wire_bytes(p, dt, n);
    c->wire    = guarded(c->wb);
    c->dst     = guarded(n * dt_size(dt));
    c->scratch = malloc(st_codec_scratch(p, n) * sizeof(float) + 1);
    assert_non_null(c->scratch);
}

static void coded_run(coded_t *c, const strataCompressParams_t *p, strataDataType_t dt,
                      const void *x, size_t n, float *res)
{
    st_codec_encode(p, dt, x, n, res, c->wire, c->scratch);
    check_guard(c->wire, c->wb, "encode");
    st_codec_decode(p, dt, c->wire, n, c->dst);
    check_guard(c->dst, n * dt_size(dt), "decode");
}

static void coded_fini(coded_t *c)
{
    free(c->wire);
    free(c->dst);
    free(c->scratch);
}

/* ---------------------------------------------------------------------------------------- */
/* Wire sizes and error bounds                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_wire_bytes(void **state)
{
    static const size_t ns[] = {0, 1, 7, 8, 9, 255, 256, 257, 1000};
    char                name[96];

    for (size_t c = 0; c < NCONFIGS; c++) {
        for (size_t d = 0; d < 3; d++) {
            for (size_t j = 0; j < sizeof(ns) / sizeof(ns[0]); j++) {
                size_t want = ref_wire_bytes(&configs[c], dtypes[d], ns[j]), got = 12345;

                if (st_codec_wire_bytes(&configs[c], dtypes[d], ns[j]) != want) {
                    fail_msg("%s %s n %zu: st_codec_wire_bytes %zu, expected %zu",
                             cfg_name(&configs[c], name, sizeof(name)), dt_name(dtypes[d]), ns[j],
                             st_codec_wire_bytes(&configs[c], dtypes[d], ns[j]), want);
                }
                assert_int_equal(strataCompressWireBytes(&configs[c], ns[j], dtypes[d], &got),
                                 strataSuccess);
                assert_int_equal(got, want);
            }
        }
    }
}

/* The formulas worked out by hand for a few cases, so that the reference above is checked too. */
static void test_wire_bytes_literal(void **state)
{
    const strataCompressParams_t int8 = {strataCodecInt8, 0.0, 256, 1};
    const strataCompressParams_t sign = {strataCodecSign, 0.0, 256, 1};
    const strataCompressParams_t t001 = {strataCodecTopk, 0.01, 256, 1};
    const strataCompressParams_t t1   = {strataCodecTopk, 1.0, 256, 1};
    const strataCompressParams_t fp16 = {strataCodecFp16, 0.0, 256, 1};
    const strataCompressParams_t none = {strataCodecNone, 0.0, 256, 1};

    assert_int_equal(st_codec_wire_bytes(&none, strataFloat32, 1000), 4000);
    assert_int_equal(st_codec_wire_bytes(&none, strataBfloat16, 1000), 2000);
    assert_int_equal(st_codec_wire_bytes(&fp16, strataFloat32, 257), 514);
    assert_int_equal(st_codec_wire_bytes(&int8, strataFloat32, 256), 4 + 256);
    assert_int_equal(st_codec_wire_bytes(&int8, strataFloat32, 257), 8 + 257);
    assert_int_equal(st_codec_wire_bytes(&int8, strataFloat16, 1), 5);
    assert_int_equal(st_codec_wire_bytes(&sign, strataFloat32, 1000), 16 + 125);
    assert_int_equal(st_codec_wire_bytes(&sign, strataFloat32, 257), 8 + 33);
    assert_int_equal(st_codec_wire_bytes(&sign, strataBfloat16, 7), 4 + 1);
    /* k = ceil(0.01 n): 10 of 1000, 3 of 255..257, 1 of 7 (0.07 rounds up) */
    assert_int_equal(st_codec_wire_bytes(&t001, strataFloat32, 1000), 10 * 8);
    assert_int_equal(st_codec_wire_bytes(&t001, strataFloat16, 1000), 10 * 6);
    assert_int_equal(st_codec_wire_bytes(&t001, strataFloat32, 255), 3 * 8);
    assert_int_equal(st_codec_wire_bytes(&t001, strataFloat32, 257), 3 * 8);
    assert_int_equal(st_codec_wire_bytes(&t001, strataBfloat16, 7), 1 * 6);
    assert_int_equal(st_codec_wire_bytes(&t001, strataFloat32, 1), 8);
    assert_int_equal(st_codec_wire_bytes(&t1, strataFloat32, 257), 257 * 8);
    assert_int_equal(st_codec_wire_bytes(&t1, strataFloat32, 0), 0);
}

static void test_wire_bytes_errors(void **state)
{
    const strataCompressParams_t good  = {strataCodecInt8, 0.0, 256, 1};
    strataCompressParams_t       bad   = good;
    size_t                       bytes = 77;

    assert_int_equal(strataCompressWireBytes(NULL, 10, strataFloat32, &bytes),
                     strataInvalidArgument);
    assert_int_equal(strataCompressWireBytes(&good, 10, strataFloat32, NULL),
                     strataInvalidArgument);
    assert_int_equal(strataCompressWireBytes(&good, 10, strataFloat64, &bytes),
                     strataInvalidArgument);
    assert_int_equal(strataCompressWireBytes(&good, 10, strataInt32, &bytes),
                     strataInvalidArgument);
    assert_int_equal(strataCompressWireBytes(&good, 10, (strataDataType_t)99, &bytes),
                     strataInvalidArgument);
    bad.block = 0;
    assert_int_equal(strataCompressWireBytes(&bad, 10, strataFloat32, &bytes),
                     strataInvalidArgument);
    assert_int_equal(bytes, 77); /* untouched on failure */
    assert_int_equal(strataCompressWireBytes(&good, 0, strataFloat32, &bytes), strataSuccess);
    assert_int_equal(bytes, 0);
}

static void test_eps(void **state)
{
    const strataCompressParams_t p[] = {
        {strataCodecNone, 0, 256, 1}, {strataCodecFp16, 0, 256, 1},   {strataCodecBf16, 0, 256, 1},
        {strataCodecInt8, 0, 256, 1}, {strataCodecTopk, 0.5, 256, 1}, {strataCodecSign, 0, 256, 1}};
    /* [codec][fp32, fp16, bf16]: the codec's own rounding plus the datatype's */
    const double want[6][3] = {{0.0, 0.0, 0.0},
                               {0x1p-11, 0x1p-11 + 0x1p-11, 0x1p-8 + 0x1p-8},
                               {0x1p-8, 0x1p-8 + 0x1p-11, 0x1p-8 + 0x1p-8},
                               {INT8_EPS, INT8_EPS + 0x1p-11, INT8_EPS + 0x1p-8},
                               {1.0, 1.0, 1.0},
                               {1.0, 1.0, 1.0}};

    for (int c = 0; c < 6; c++) {
        for (int d = 0; d < 3; d++) {
            assert_true(st_codec_eps(&p[c], dtypes[d]) == want[c][d]);
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Round trips                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* The reference top-k set: indexes ordered by magnitude (NaN largest) descending, then index. */
static const float *cmp_v;

static int cmp_mag_desc(const void *a, const void *b)
{
    size_t i = *(const size_t *)a, j = *(const size_t *)b;
    float  mi = isnan(cmp_v[i]) ? INFINITY : fabsf(cmp_v[i]);
    float  mj = isnan(cmp_v[j]) ? INFINITY : fabsf(cmp_v[j]);

    if (mi != mj) {
        return mi > mj ? -1 : 1;
    }
    return i < j ? -1 : (i > j);
}

static void ref_topk_keep(const float *v, size_t n, size_t k, unsigned char *keep)
{
    size_t *idx = malloc(n * sizeof(*idx));

    assert_non_null(idx);
    for (size_t i = 0; i < n; i++) {
        idx[i]  = i;
        keep[i] = 0;
    }
    cmp_v = v;
    qsort(idx, n, sizeof(*idx), cmp_mag_desc);
    for (size_t j = 0; j < k; j++) {
        keep[idx[j]] = 1;
    }
    free(idx);
}

/* What the header says each codec decodes v (n floats, the values plus residual) to, exactly;
 * also checks the wire's fields that the header defines. exp: n floats. */
static void expected_decode(const strataCompressParams_t *p, strataDataType_t dt, const float *v,
                            size_t n, const unsigned char *wire, float *exp, const char *name)
{
    size_t nb = (n + p->block - 1) / p->block;

    switch (p->codec) {
    case strataCodecNone:
        for (size_t i = 0; i < n; i++) {
            exp[i] = round_dt(dt, v[i]);
        }
        break;
    case strataCodecFp16:
        for (size_t i = 0; i < n; i++) {
            float s = v[i] > 65504.0f && isfinite(v[i])
                          ? 65504.0f
                          : (v[i] < -65504.0f && isfinite(v[i]) ? -65504.0f : v[i]);

            exp[i] = round_dt(dt, st_half_to_float(st_float_to_half(s)));
            assert_int_equal(((const uint16_t *)wire)[i], st_float_to_half(s));
        }
        break;
    case strataCodecBf16:
        for (size_t i = 0; i < n; i++) {
            exp[i] = round_dt(dt, st_bf16_to_float(st_float_to_bf16(v[i])));
            assert_int_equal(((const uint16_t *)wire)[i], st_float_to_bf16(v[i]));
        }
        break;
    case strataCodecInt8:
        for (size_t b = 0; b < nb; b++) {
            size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
            float  m   = 0.0f, s, ws;
            int    top = 0;

            for (size_t i = lo; i < hi; i++) {
                m = fabsf(v[i]) > m ? fabsf(v[i]) : m;
            }
            s = m / 127.0f;
            memcpy(&ws, wire + 4 * b, 4);
            if (fbits(ws) != fbits(s)) {
                fail_msg("%s: block %zu scale %a, expected max %a / 127 = %a", name, b, ws, m, s);
            }
            for (size_t i = lo; i < hi; i++) {
                int8_t q = (int8_t)wire[4 * nb + i];
                /* rint(v x 127 / M): the nearest integer, up to the float rounding of 127 / M
                 * and of the product (2^-23 x 127 at most) */
                double y = m > 0.0f ? (double)v[i] * 127.0 / (double)m : 0.0;

                assert_true(q != -128); /* q in [-127, 127] */
                if (!(fabs(q - y) <= 0.5 + 0x1p-14)) {
                    fail_msg("%s: element %zu (%a, block max %a) byte %d, expected rint(%.9g)",
                             name, i, v[i], m, q, y);
                }
                top |= q == 127 || q == -127;
                exp[i] = round_dt(dt, (float)q * s);
            }
            assert_true(top || m == 0.0f); /* the largest element of a block gets +-127 */
        }
        break;
    case strataCodecSign:
        for (size_t b = 0; b < nb; b++) {
            size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
            double mean = 0.0;
            float  s;

            for (size_t i = lo; i < hi; i++) {
                mean += fabs(v[i]);
            }
            mean /= (double)(hi - lo);
            memcpy(&s, wire + 4 * b, 4);
            if (!(fabs(s - mean) <= 0x1p-20 * mean)) {
                fail_msg("%s: block %zu scale %a, expected mean |v| %a", name, b, s, mean);
            }
            for (size_t i = lo; i < hi; i++) {
                int neg = (wire[4 * nb + i / 8] >> (i % 8)) & 1;

                assert_int_equal(neg, signbit(v[i]) != 0); /* -0 too */
                exp[i] = round_dt(dt, neg ? -s : s);
            }
        }
        break;
    case strataCodecTopk: {
        size_t         k    = ref_topk_k(p->density, n);
        unsigned char *keep = malloc(n);
        size_t         j    = 0;

        assert_non_null(keep);
        ref_topk_keep(v, n, k, keep);
        for (size_t i = 0; i < n; i++) {
            exp[i] = keep[i] ? round_dt(dt, v[i]) : 0.0f;
            if (keep[i]) { /* the indexes, ascending */
                uint32_t idx;

                memcpy(&idx, wire + 4 * j, 4);
                if (idx != i) {
                    fail_msg("%s: kept index %zu is %u, expected %zu", name, j, idx, i);
                }
                j++;
            }
        }
        assert_int_equal(j, k);
        free(keep);
        break;
    }
    default: fail();
    }
}

/* Checks decoded d against v: exactly the expected values, within the bound of st_codec_eps over
 * the range and, for the block codecs, per block. Returns the largest error / (eps M). */
static double check_decoded(const strataCompressParams_t *p, strataDataType_t dt, const float *v,
                            const float *d, const float *exp, size_t n, const char *name)
{
    double eps = st_codec_eps(p, dt), abs = abs_slack(p, dt), M = 0.0, worst = 0.0;
    size_t blk = (p->codec == strataCodecInt8 || p->codec == strataCodecSign) ? p->block : n;

    for (size_t i = 0; i < n; i++) {
        M = fabs(v[i]) > M ? fabs(v[i]) : M;
    }
    for (size_t i = 0; i < n; i++) {
        if (fbits(d[i]) != fbits(exp[i]) && !(isnan(d[i]) && isnan(exp[i]))) {
            fail_msg("%s: element %zu of %zu (v %a) decodes to %a, expected %a", name, i, n, v[i],
                     d[i], exp[i]);
        }
    }
    for (size_t lo = 0; lo < n; lo += blk) {
        size_t hi = lo + blk < n ? lo + blk : n;
        double Mb = 0.0;

        for (size_t i = lo; i < hi; i++) {
            Mb = fabs(v[i]) > Mb ? fabs(v[i]) : Mb;
        }
        for (size_t i = lo; i < hi; i++) {
            double err = fabs((double)d[i] - (double)v[i]);

            if (err > eps * M + abs) {
                fail_msg("%s: element %zu: |%a - %a| = %g above eps %g x M %g + %g", name, i, d[i],
                         v[i], err, eps, M, abs);
            }
            if (err > eps * Mb + abs) {
                fail_msg("%s: element %zu: |%a - %a| = %g above eps %g x block max %g + %g", name,
                         i, d[i], v[i], err, eps, Mb, abs);
            }
            if (eps * Mb > 0.0) {
                worst = fmax(worst, fmax(err - abs, 0.0) / (eps * Mb));
            }
        }
    }
    return worst;
}

/* Encodes n elements of generated data without a residual and with a zero one, twice each:
 * checks the decoded values, the bound, the residual and that the bytes are the same each time. */
static void roundtrip_one(const strataCompressParams_t *p, strataDataType_t dt, size_t n)
{
    size_t         es = dt_size(dt);
    void          *x  = malloc(n * es);
    float         *xf = malloc(n * sizeof(float)), *d = malloc(n * sizeof(float));
    float         *exp = malloc(n * sizeof(float)), *res = malloc(n * sizeof(float));
    unsigned char *first;
    coded_t        c;
    char           name[160], cfg[96];

    assert_true(x != NULL && xf != NULL && d != NULL && exp != NULL && res != NULL);
    snprintf(name, sizeof(name), "%s %s n %zu", cfg_name(p, cfg, sizeof(cfg)), dt_name(dt), n);
    gen_data(p, dt, n, x, xf);
    coded_init(&c, p, dt, n);
    first = malloc(c.wb + 1);
    assert_non_null(first);

    for (int pass = 0; pass < 3; pass++) {
        float *r = pass == 0 ? NULL : res;

        memset(res, 0, n * sizeof(float));
        coded_run(&c, p, dt, x, n, r);
        if (pass == 0) {
            memcpy(first, c.wire, c.wb);
        } else if (memcmp(first, c.wire, c.wb) != 0) {
            fail_msg("%s: encoding again (pass %d) gave other bytes", name, pass);
        }
        for (size_t i = 0; i < n; i++) {
            d[i] = load_dt(dt, c.dst, i);
        }
        expected_decode(p, dt, xf, n, c.wire, exp, name);
        check_decoded(p, dt, xf, d, exp, n, name);
        if (p->codec == strataCodecNone || (p->codec == strataCodecTopk && p->density == 1.0)) {
            assert_memory_equal(c.dst, x, n * es); /* exact */
        }
        if (r != NULL) {
            for (size_t i = 0; i < n; i++) {
                float want = xf[i] - d[i];

                want = isfinite(want) ? want : 0.0f;
                if (fbits(r[i]) != fbits(want)) {
                    fail_msg("%s: residual %zu is %a, expected %a - %a = %a", name, i, r[i], xf[i],
                             d[i], want);
                }
            }
        }
    }
    coded_fini(&c);
    free(first);
    free(x);
    free(xf);
    free(d);
    free(exp);
    free(res);
}

static void roundtrip_codec(strataCodec_t codec)
{
    rng_state = 0x9e3779b97f4a7c15ull + (uint64_t)codec;
    for (size_t c = 0; c < NCONFIGS; c++) {
        if (configs[c].codec != codec) {
            continue;
        }
        for (size_t d = 0; d < 3; d++) {
            for (size_t j = 0; j < sizeof(counts) / sizeof(counts[0]); j++) {
                roundtrip_one(&configs[c], dtypes[d], counts[j]);
            }
        }
    }
}

static void test_roundtrip_none(void **state)
{
    roundtrip_codec(strataCodecNone);
}

static void test_roundtrip_fp16(void **state)
{
    roundtrip_codec(strataCodecFp16);
}

static void test_roundtrip_bf16(void **state)
{
    roundtrip_codec(strataCodecBf16);
}

static void test_roundtrip_int8(void **state)
{
    roundtrip_codec(strataCodecInt8);
}

static void test_roundtrip_topk(void **state)
{
    roundtrip_codec(strataCodecTopk);
}

static void test_roundtrip_sign(void **state)
{
    roundtrip_codec(strataCodecSign);
}

/* None of the lossy codecs is exact on general data: each loses something somewhere. */
static void test_lossy_not_exact(void **state)
{
    const strataCompressParams_t p[] = {{strataCodecFp16, 0, 256, 1},
                                        {strataCodecBf16, 0, 256, 1},
                                        {strataCodecInt8, 0, 256, 1},
                                        {strataCodecTopk, 0.5, 256, 1},
                                        {strataCodecSign, 0, 256, 1}};
    const size_t                 n   = 257;
    float                        x[257];
    coded_t                      c;

    for (size_t i = 0; i < n; i++) {
        x[i] = (float)sin((double)i * 0.37) * 3.3f + 0.001f * (float)i;
    }
    for (size_t j = 0; j < sizeof(p) / sizeof(p[0]); j++) {
        coded_init(&c, &p[j], strataFloat32, n);
        coded_run(&c, &p[j], strataFloat32, x, n, NULL);
        assert_true(memcmp(c.dst, x, sizeof(x)) != 0);
        coded_fini(&c);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Named cases of each codec                                                                */
/* ---------------------------------------------------------------------------------------- */

static void run_f32(const strataCompressParams_t *p, const float *x, size_t n, float *res,
                    float *out)
{
    coded_t c;

    coded_init(&c, p, strataFloat32, n);
    coded_run(&c, p, strataFloat32, x, n, res);
    memcpy(out, c.dst, n * sizeof(float));
    coded_fini(&c);
}

static void test_topk_ties(void **state)
{
    /* k = ceil(3/8 x 8) = 3 of five at magnitude 3 (one negative): indexes 1, 3, 4 */
    const strataCompressParams_t p3    = {strataCodecTopk, 0.375, 256, 1};
    const float                  x1[8] = {1, 3, 2, 3, 3, -3, 0, 3};
    const float                  e1[8] = {0, 3, 0, 3, 3, 0, 0, 0};
    /* one above, then ties for the two places left: 5 and the first two 1s */
    const float x2[5] = {1, 1, 5, -1, 1};
    const float e2[5] = {1, 1, 5, 0, 0};
    /* all equal: the first k */
    const strataCompressParams_t p5 = {strataCodecTopk, 0.5, 256, 1};
    float                        x3[10], e3[10], out[10], res[10] = {0};
    /* the negative one first: a tie is by magnitude, not by value */
    const strataCompressParams_t p1    = {strataCodecTopk, 0.1, 256, 1};
    const float                  x4[4] = {-2, 2, 1, 0};
    const float                  e4[4] = {-2, 0, 0, 0};

    run_f32(&p3, x1, 8, NULL, out);
    assert_memory_equal(out, e1, sizeof(e1));
    run_f32(&p5, x2, 5, NULL, out); /* k = ceil(2.5) = 3 */
    assert_memory_equal(out, e2, sizeof(e2));
    for (int i = 0; i < 10; i++) {
        x3[i] = 0.25f;
        e3[i] = i < 5 ? 0.25f : 0.0f;
    }
    run_f32(&p5, x3, 10, res, out);
    assert_memory_equal(out, e3, sizeof(e3));
    for (int i = 0; i < 10; i++) {
        assert_true(res[i] == (i < 5 ? 0.0f : 0.25f));
    }
    run_f32(&p1, x4, 4, NULL, out); /* k = ceil(0.4) = 1 */
    assert_memory_equal(out, e4, sizeof(e4));
}

/* Many ties at the threshold inside a long range (the quickselect's equal partition). */
static void test_topk_many_ties(void **state)
{
    const strataCompressParams_t p = {strataCodecTopk, 0.3, 256, 1};
    const size_t                 n = 1000, k = 300;
    float                        x[1000], out[1000];
    size_t                       kept_big = 0, kept_tie = 0, first_dropped_tie = n;

    for (size_t i = 0; i < n; i++) {
        x[i] = (i % 7 == 0) ? 10.0f + (float)i : ((i % 2) ? 1.0f : -1.0f);
    }
    /* 143 values above 1, then 157 of the 857 ties at magnitude 1 in index order */
    run_f32(&p, x, n, NULL, out);
    for (size_t i = 0; i < n; i++) {
        if (x[i] > 5.0f) {
            assert_true(out[i] == x[i]);
            kept_big++;
        } else if (out[i] != 0.0f) {
            assert_true(out[i] == x[i]);
            assert_true(first_dropped_tie == n); /* no kept tie after a dropped one */
            kept_tie++;
        } else if (first_dropped_tie == n) {
            first_dropped_tie = i;
        }
    }
    assert_int_equal(kept_big, 143);
    assert_int_equal(kept_big + kept_tie, k);
}

static void test_int8_values(void **state)
{
    /* block 4: scale 127 / 127 = 1 (integers exact), then 2.54 / 127 = 0.02 */
    const strataCompressParams_t p    = {strataCodecInt8, 0.0, 4, 1};
    const float                  x[8] = {127, -127, 3.5f, -2.5f, 2.54f, -1.27f, 0.01f, 0};
    float                        out[8], res[8] = {0};
    coded_t                      c;
    float                        s1 = 2.54f / 127.0f;

    coded_init(&c, &p, strataFloat32, 8);
    coded_run(&c, &p, strataFloat32, x, 8, res);
    memcpy(out, c.dst, sizeof(out));
    assert_int_equal(c.wb, 8 + 8);
    assert_true(out[0] == 127.0f && out[1] == -127.0f);
    assert_true(out[2] == 4.0f && out[3] == -2.0f); /* 3.5 and -2.5: ties to even */
    assert_int_equal((int8_t)c.wire[8 + 0], 127);
    assert_int_equal((int8_t)c.wire[8 + 1], -127);
    assert_int_equal((int8_t)c.wire[8 + 4], 127);
    assert_int_equal((int8_t)c.wire[8 + 5], (int8_t)rintf(-1.27f / s1));
    assert_true(out[4] == 127.0f * s1);
    assert_true(res[2] == -0.5f && res[3] == -0.5f);
    coded_fini(&c);

    /* an all-zero block: scale 0, bytes 0, decodes to +0 */
    {
        const float z[4] = {0, -0.0f, 0, 0};

        coded_init(&c, &p, strataFloat32, 4);
        coded_run(&c, &p, strataFloat32, z, 4, NULL);
        for (int i = 0; i < 4; i++) {
            assert_int_equal(c.wire[4 + i], 0);
            assert_true(((float *)c.dst)[i] == 0.0f);
        }
        assert_int_equal(fbits(((float *)c.wire)[0]), 0);
        coded_fini(&c);
    }
}

/* Blocks whose largest magnitude is below 127 / FLT_MAX (3.7e-37): 127 / M overflows a float,
 * yet every element must still quantise (a finite block never decodes to NaN or flips signs). */
static void test_int8_tiny_block(void **state)
{
    const strataCompressParams_t p    = {strataCodecInt8, 0.0, 8, 1};
    const float                  f[8] = {1.0f, 0.0f, -0.5f, 0.25f, -0.0f, 0.75f, -1.0f, 0.1f};
    const float                  ms[] = {3e-37f, 1e-37f, 1e-38f, 1e-40f};
    float                        v[8], d[8], exp[8];
    unsigned char                x[8 * 4];
    coded_t                      c;

    for (size_t j = 0; j < sizeof(ms) / sizeof(ms[0]); j++) {
        for (size_t k = 0; k < 2; k++) {
            strataDataType_t dt = k ? strataBfloat16 : strataFloat32;
            char             name[64];

            snprintf(name, sizeof(name), "int8 block max %g %s", ms[j], dt_name(dt));
            for (int i = 0; i < 8; i++) {
                store_dt(dt, x, i, f[i] * ms[j]);
                v[i] = load_dt(dt, x, i);
            }
            coded_init(&c, &p, dt, 8);
            coded_run(&c, &p, dt, x, 8, NULL);
            for (int i = 0; i < 8; i++) {
                d[i] = load_dt(dt, c.dst, i);
                assert_true(isfinite(d[i]));
                assert_true(v[i] == 0.0f || d[i] == 0.0f || !signbit(d[i]) == !signbit(v[i]));
                /* at most M, up to the rounding of s = M / 127 (coarse when s is subnormal) */
                assert_true(fabs(d[i]) <= fabs(v[0]) * (1.0 + 0x1p-20) + 127 * 0x1p-150);
            }
            assert_true(d[1] == 0.0f && d[4] == 0.0f);
            if (ms[j] >= 1e-37f) { /* a normal scale: the bound holds as for any block */
                expected_decode(&p, dt, v, 8, c.wire, exp, name);
                check_decoded(&p, dt, v, d, exp, 8, name);
            }
            coded_fini(&c);
        }
    }
}

static void test_sign_values(void **state)
{
    const strataCompressParams_t p4    = {strataCodecSign, 0.0, 4, 1};
    const strataCompressParams_t p2    = {strataCodecSign, 0.0, 2, 1};
    const float                  x[4]  = {1, -2, 3, -4};
    const float                  e4[4] = {2.5f, -2.5f, 2.5f, -2.5f};
    const float                  e2[4] = {1.5f, -1.5f, 3.5f, -3.5f};
    const float                  z[3]  = {0.0f, -0.0f, 0.0f};
    float                        out[4], res[4] = {0};

    run_f32(&p4, x, 4, res, out);
    assert_memory_equal(out, e4, sizeof(e4));
    assert_true(res[0] == -1.5f && res[1] == 0.5f && res[2] == 0.5f && res[3] == -1.5f);
    run_f32(&p2, x, 4, NULL, out);
    assert_memory_equal(out, e2, sizeof(e2));
    run_f32(&p4, z, 3, NULL, out); /* zero: scale 0; the sign bit is kept, -0 gives -s */
    for (int i = 0; i < 3; i++) {
        assert_int_equal(fbits(out[i]), fbits(z[i]));
    }
    /* 8 blocks of 1 element across a byte of bits, and a ninth in the next byte */
    {
        const strataCompressParams_t p1   = {strataCodecSign, 0.0, 1, 1};
        float                        y[9] = {-1, 2, -3, 4, -5, 6, -7, 8, -9}, o9[9];
        coded_t                      c;

        coded_init(&c, &p1, strataFloat32, 9);
        assert_int_equal(c.wb, 9 * 4 + 2);
        coded_run(&c, &p1, strataFloat32, y, 9, NULL);
        memcpy(o9, c.dst, sizeof(o9));
        assert_memory_equal(o9, y, sizeof(y));
        assert_int_equal(c.wire[36], 0x55);
        assert_int_equal(c.wire[37], 0x01);
        coded_fini(&c);
    }
}

/* Huge finite values: the mean |v| of a block must not overflow on the way (it is at most the
 * block's largest magnitude), so a block of finite values never decodes to NaN. */
static void test_sign_huge_finite(void **state)
{
    const strataCompressParams_t p = {strataCodecSign, 0.0, 256, 1};
    float                        x[256], out[256], res[256] = {0};

    for (int i = 0; i < 256; i++) {
        x[i] = (i % 2 ? -1.0f : 1.0f) * 3.0e38f;
    }
    run_f32(&p, x, 256, res, out);
    for (int i = 0; i < 256; i++) {
        assert_true(out[i] == x[i]);
        assert_true(res[i] == 0.0f);
    }
}

/* fp16 data of subnormals plus a residual off their grid: decoding into fp16 rounds to its
 * subnormal step 2^-24, so every codec (not only the fp16 codec) needs the 2^-25 absolute term
 * of the bound there; int8 shows it. */
static void test_fp16_subnormal_data(void **state)
{
    const strataCompressParams_t p[]     = {{strataCodecFp16, 0, 256, 1},
                                            {strataCodecBf16, 0, 256, 1},
                                            {strataCodecInt8, 0, 4, 1},
                                            {strataCodecTopk, 0.5, 256, 1},
                                            {strataCodecSign, 0, 4, 1}};
    const float                  ulps[8] = {5, -3, 2, 1, -7, 6, 4, -5}; /* of 2^-24 */
    uint16_t                     x[8];
    float                        v[8], d[8], exp[8], res[8];
    double                       beyond = 0.0;
    coded_t                      c;

    for (size_t j = 0; j < sizeof(p) / sizeof(p[0]); j++) {
        double eps = st_codec_eps(&p[j], strataFloat16), M = 0.0;

        for (int i = 0; i < 8; i++) {
            x[i]   = st_float_to_half(ulps[i] * 0x1p-24f);
            res[i] = (i % 2 ? -0.4f : 0.45f) * 0x1p-24f;
            v[i]   = st_half_to_float(x[i]) + res[i];
            M      = fmax(M, fabs(v[i]));
        }
        coded_init(&c, &p[j], strataFloat16, 8);
        coded_run(&c, &p[j], strataFloat16, x, 8, res);
        for (int i = 0; i < 8; i++) {
            d[i] = load_dt(strataFloat16, c.dst, i);
        }
        expected_decode(&p[j], strataFloat16, v, 8, c.wire, exp, st_codec_name(p[j].codec));
        check_decoded(&p[j], strataFloat16, v, d, exp, 8, st_codec_name(p[j].codec));
        if (p[j].codec == strataCodecInt8) {
            for (int i = 0; i < 8; i++) {
                beyond = fmax(beyond, fabs((double)d[i] - v[i]) - eps * M);
            }
        }
        coded_fini(&c);
    }
    assert_true(beyond > 0.0); /* eps x M alone is not enough */
}

/* ---------------------------------------------------------------------------------------- */
/* Non-finite values                                                                        */
/* ---------------------------------------------------------------------------------------- */

static void check_block_nan(const strataCompressParams_t *p, float bad)
{
    /* block 4: block 1 holds the non-finite value, blocks 0 and 2 are ordinary */
    float x[12], out[12], res[12];

    for (int i = 0; i < 12; i++) {
        x[i]   = (float)(i + 1) * (i % 3 ? 1.0f : -1.0f);
        res[i] = 0.0f;
    }
    x[6] = bad;
    run_f32(p, x, 12, res, out);
    for (int i = 0; i < 12; i++) {
        if (i >= 4 && i < 8) {
            assert_true(isnan(out[i]));
        } else {
            assert_true(isfinite(out[i]));
            assert_true(fabsf(out[i] - x[i]) <= st_codec_eps(p, strataFloat32) * 12.0f);
        }
        assert_true(isfinite(res[i])); /* never carries an overflow into the next call */
    }
    assert_true(res[6] == 0.0f);
}

static void test_nonfinite_blocks(void **state)
{
    const strataCompressParams_t i8    = {strataCodecInt8, 0.0, 4, 1};
    const strataCompressParams_t sg    = {strataCodecSign, 0.0, 4, 1};
    const float                  bad[] = {NAN, INFINITY, -INFINITY, -NAN};

    for (size_t j = 0; j < sizeof(bad) / sizeof(bad[0]); j++) {
        check_block_nan(&i8, bad[j]);
        check_block_nan(&sg, bad[j]);
    }
}

static void test_fp16_saturation(void **state)
{
    const strataCompressParams_t p = {strataCodecFp16, 0.0, 256, 1};
    const float x[10] = {1e6f, -1e6f, 65504, 65519, 65520, 70000, INFINITY, -INFINITY, NAN, 1};
    const float e[9]  = {65504, -65504, 65504, 65504, 65504, 65504, INFINITY, -INFINITY};
    const float r[10] = {1e6f - 65504, -(1e6f - 65504), 0, 15, 16, 4496, 0, 0, 0, 0};
    float       out[10], res[10] = {0};

    run_f32(&p, x, 10, res, out);
    for (int i = 0; i < 8; i++) {
        assert_true(out[i] == e[i]);
    }
    assert_true(isnan(out[8]));
    assert_true(out[9] == 1.0f);
    for (int i = 0; i < 10; i++) {
        if (fbits(res[i]) != fbits(r[i])) {
            fail_msg("residual %d: %a, expected %a", i, res[i], r[i]);
        }
    }
    /* bf16 data beyond fp16's range saturates too */
    {
        uint16_t b[2] = {st_float_to_bf16(1e6f), st_float_to_bf16(-3e38f)}, o[2];
        coded_t  c;

        coded_init(&c, &p, strataBfloat16, 2);
        coded_run(&c, &p, strataBfloat16, b, 2, NULL);
        memcpy(o, c.dst, sizeof(o));
        assert_true(st_bf16_to_float(o[0]) == round_dt(strataBfloat16, 65504.0f));
        assert_true(st_bf16_to_float(o[1]) == -round_dt(strataBfloat16, 65504.0f));
        coded_fini(&c);
    }
}

static void test_nonfinite_cast_topk(void **state)
{
    const strataCompressParams_t bf   = {strataCodecBf16, 0.0, 256, 1};
    const strataCompressParams_t no   = {strataCodecNone, 0.0, 256, 1};
    const strataCompressParams_t tk   = {strataCodecTopk, 0.25, 256, 1}; /* k = 1 of 4 */
    const float                  x[4] = {NAN, INFINITY, -INFINITY, 2.5f};
    const float                  t[4] = {1e30f, -1e31f, NAN, 7.0f};
    float                        out[4], res[4];

    for (int k = 0; k < 2; k++) {
        const strataCompressParams_t *p = k ? &no : &bf;

        memset(res, 0, sizeof(res));
        run_f32(p, x, 4, res, out);
        assert_true(isnan(out[0]) && out[1] == INFINITY && out[2] == -INFINITY);
        assert_true(out[3] == 2.5f);
        assert_true(res[0] == 0.0f && res[1] == 0.0f && res[2] == 0.0f && res[3] == 0.0f);
    }
    /* topk: a NaN counts as the largest magnitude, so it is kept; its residual is 0, the
     * dropped elements carry whole */
    memset(res, 0, sizeof(res));
    run_f32(&tk, t, 4, res, out);
    assert_true(out[0] == 0.0f && out[1] == 0.0f && isnan(out[2]) && out[3] == 0.0f);
    assert_true(res[0] == 1e30f && res[1] == -1e31f && res[2] == 0.0f && res[3] == 7.0f);
}

/* ---------------------------------------------------------------------------------------- */
/* Error feedback                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* Three successive encodes of fresh data with one residual: after each, the residual is exactly
 * v - d, v = x + (the residual before), d what st_codec_decode gives (0 where not finite). */
static void test_residual_exact(void **state)
{
    const size_t n = 257;
    char         name[160], cfg[96];

    rng_state = 0x51ed270b27ae5d1full;
    for (size_t c = 0; c < NCONFIGS; c++) {
        for (size_t dd = 0; dd < 3; dd++) {
            strataDataType_t dt = dtypes[dd];
            unsigned char    x[257 * 4];
            float            xf[257], res[257] = {0}, v[257];
            coded_t          cd;

            snprintf(name, sizeof(name), "%s %s", cfg_name(&configs[c], cfg, sizeof(cfg)),
                     dt_name(dt));
            coded_init(&cd, &configs[c], dt, n);
            for (int step = 0; step < 3; step++) {
                gen_data(&configs[c], dt, n, x, xf);
                for (size_t i = 0; i < n; i++) {
                    v[i] = res[i] != 0.0f ? xf[i] + res[i] : xf[i]; /* keeps a -0 */
                }
                coded_run(&cd, &configs[c], dt, x, n, res);
                for (size_t i = 0; i < n; i++) {
                    float d = load_dt(dt, cd.dst, i), want = v[i] - d;

                    want = isfinite(want) ? want : 0.0f;
                    if (fbits(res[i]) != fbits(want)) {
                        fail_msg("%s step %d: residual %zu is %a, expected %a - %a", name, step, i,
                                 res[i], v[i], d);
                    }
                }
            }
            coded_fini(&cd);
        }
    }
}

/* T encodes of a fixed x with error feedback: what was sent sums to T x - r_T (to rounding), so
 * its mean tends to x. Returns max |r_T| / max |x| and, through peak1_p and peak2_p, the largest
 * max |r_t| / max |x| over the first and the second half of the T steps. */
static double feedback_run(const strataCompressParams_t *p, strataDataType_t dt, size_t n, int T,
                           double *peak1_p, double *peak2_p)
{
    size_t         es = dt_size(dt);
    unsigned char *x  = malloc(n * es);
    float         *xf = malloc(n * sizeof(float)), *res = calloc(n, sizeof(float));
    double        *sum = calloc(n, sizeof(double)), *tol = calloc(n, sizeof(double));
    double         mx = 0.0, rmax = 0.0, peak[2] = {0.0, 0.0};
    coded_t        c;
    char           name[160], cfg[96];

    assert_true(x != NULL && xf != NULL && res != NULL && sum != NULL && tol != NULL);
    snprintf(name, sizeof(name), "%s %s n %zu", cfg_name(p, cfg, sizeof(cfg)), dt_name(dt), n);
    /* ordinary values over 8 binades, some zeros, no outliers */
    for (size_t i = 0; i < n; i++) {
        double f = (rnd() % 16 == 0) ? 0.0 : ldexp(1.0 + rnd01(), (int)(rnd() % 8) - 4);

        store_dt(dt, x, i, (float)((rnd() & 1) ? -f : f));
        xf[i] = load_dt(dt, x, i);
        mx    = fabs(xf[i]) > mx ? fabs(xf[i]) : mx;
    }
    coded_init(&c, p, dt, n);
    for (int t = 0; t < T; t++) {
        double rt = 0.0;

        coded_run(&c, p, dt, x, n, res);
        for (size_t i = 0; i < n; i++) {
            double d = load_dt(dt, c.dst, i);

            sum[i] += d;
            /* the rounding of v = x + r and of r = v - d: half an ulp of each, at most */
            tol[i] += 0x1p-23 * (fabs(xf[i]) + 2.0 * fabs(res[i]) + fabs(d));
            rt = fabs(res[i]) > rt ? fabs(res[i]) : rt;
        }
        peak[2 * t >= T] = fmax(peak[2 * t >= T], rt);
    }
    for (size_t i = 0; i < n; i++) {
        double want = (double)T * xf[i] - res[i];

        if (fabs(sum[i] - want) > tol[i]) {
            fail_msg("%s: element %zu: the %d decoded values sum to %.17g, T x - r_T = %.17g", name,
                     i, T, sum[i], want);
        }
        /* hence the mean of what was sent is x to within |r_T| / T */
        assert_true(fabs(sum[i] / T - xf[i]) <= (fabs(res[i]) + tol[i]) / T);
        rmax = fabs(res[i]) > rmax ? fabs(res[i]) : rmax;
    }
    coded_fini(&c);
    free(x);
    free(xf);
    free(res);
    free(sum);
    free(tol);
    *peak1_p = peak[0] / mx;
    *peak2_p = peak[1] / mx;
    return rmax / mx;
}

static void test_error_feedback(void **state)
{
    const int T = 50;
    char      cfg[96];

    rng_state = 0x2545f4914f6cdd1dull;
    for (size_t c = 0; c < NCONFIGS; c++) {
        const strataCompressParams_t *p = &configs[c];

        for (size_t dd = 0; dd < 3; dd++) {
            double peak1, peak2, r = feedback_run(p, dtypes[dd], 1000, T, &peak1, &peak2);
            double peak = fmax(peak1, peak2), bound;

            switch (p->codec) {
            case strataCodecNone:
            case strataCodecFp16:
            case strataCodecBf16:
            case strataCodecInt8:
                /* one step's error, eps x (max |x| + max |r|): 2 eps leaves room */
                bound = 2.0 * st_codec_eps(p, dtypes[dd]);
                break;
            case strataCodecTopk:
                /* an element waits about n / k steps for its turn, gaining |x_i| each; at
                 * density >= 0.1 that is well inside 50 steps (observed: 1.7 at 0.1, 0.14 at
                 * 0.5, 0 at 1). A residual that never gave back what it sent would reach T max|x|
                 * (50): T / 2 catches it at 0.01 (observed 14). At 1e-9 (k = 1) the residual is
                 * still growing at step 50 (observed 43); test_error_feedback_long bounds it. */
                bound = p->density >= 0.1 ? 4.0 / p->density
                                          : (ref_topk_k(p->density, 1000) > 1 ? T / 2.0 : T);
                break;
            default:
                /* sign: still growing at step 50 (observed 16 at block 256, 17 at 128, 2.5 at 5,
                 * 0 at 1; at block 256 it levels off near 117 after ~4000 steps, see
                 * test_error_feedback_long); T / 2 catches a residual growing as T max|x| */
                bound = T / 2.0;
                break;
            }
            if (p->codec == strataCodecTopk || p->codec == strataCodecSign) {
                print_message("%-36s %s T %d: max|r_T| / max|x| = %.3g, peak %.3g (bound %.3g)\n",
                              cfg_name(p, cfg, sizeof(cfg)), dt_name(dtypes[dd]), T, r, peak,
                              bound);
            }
            assert_true(peak <= bound);
        }
    }
}

/* The codecs whose residual still grows at step 50 run 8192 steps: the residual levels off (its
 * peak over the second half is close to that over the first, where growth like T would double
 * it) at a small multiple of max |x| far below T. Observed (peak over the run / max |x|): sign
 * block 256 117, block 128 58; topk density 0.01 18, density 1e-9 (k = 1 of 1000) 179. */
static void test_error_feedback_long(void **state)
{
    const strataCompressParams_t p[] = {{strataCodecSign, 0.0, 256, 1},
                                        {strataCodecSign, 0.0, 128, 1},
                                        {strataCodecTopk, 0.01, 256, 1},
                                        {strataCodecTopk, 1e-9, 256, 1}};
    const int                    T   = 8192;
    char                         cfg[96];

    for (size_t j = 0; j < sizeof(p) / sizeof(p[0]); j++) {
        double peak1, peak2, r;

        rng_state = 0x2545f4914f6cdd1dull;
        r         = feedback_run(&p[j], strataFloat32, 1000, T, &peak1, &peak2);
        print_message("%-36s fp32 T %d: max|r_T| / max|x| = %.3g, peak %.3g then %.3g\n",
                      cfg_name(&p[j], cfg, sizeof(cfg)), T, r, peak1, peak2);
        assert_true(peak2 <= 1.25 * peak1);
        assert_true(fmax(peak1, peak2) <= T / 16.0);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Specs                                                                                    */
/* ---------------------------------------------------------------------------------------- */

static void test_parse_good(void **state)
{
    static const struct {
        const char   *spec;
        strataCodec_t codec;
        double        density;
        size_t        block;
        int           ef;
        const char   *formatted;
    } cases[] = {
        {"none", strataCodecNone, 0.0, 256, 1, "none"},
        {"fp16", strataCodecFp16, 0.0, 256, 1, "fp16"},
        {"bf16", strataCodecBf16, 0.0, 256, 1, "bf16"},
        {"int8", strataCodecInt8, 0.0, 256, 1, "int8"},
        {"int8:256", strataCodecInt8, 0.0, 256, 1, "int8"},
        {"int8:64", strataCodecInt8, 0.0, 64, 1, "int8:64"},
        {"topk:0.01", strataCodecTopk, 0.01, 256, 1, "topk:0.01"},
        {"topk:1", strataCodecTopk, 1.0, 256, 1, "topk:1"},
        {"topk:1e-3", strataCodecTopk, 1e-3, 256, 1, "topk:0.001"},
        {"sign", strataCodecSign, 0.0, 256, 1, "sign"},
        {"sign:128", strataCodecSign, 0.0, 128, 1, "sign:128"},
        {"int8,noef", strataCodecInt8, 0.0, 256, 0, "int8,noef"},
        {"int8:64,noef", strataCodecInt8, 0.0, 64, 0, "int8:64,noef"},
        {"topk:0.5,noef", strataCodecTopk, 0.5, 256, 0, "topk:0.5,noef"},
        {"fp16,ef", strataCodecFp16, 0.0, 256, 1, "fp16"},
        {"none,noef", strataCodecNone, 0.0, 256, 0, "none,noef"},
        {"sign:16777216", strataCodecSign, 0.0, 16777216, 1, "sign:16777216"},
    };

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        strataCompressParams_t p, q;
        char                   buf[64];

        if (strataCompressParse(cases[i].spec, &p) != strataSuccess) {
            fail_msg("'%s' does not parse", cases[i].spec);
        }
        assert_int_equal(p.codec, cases[i].codec);
        assert_true(p.density == cases[i].density);
        assert_int_equal(p.block, cases[i].block);
        assert_int_equal(p.errorFeedback, cases[i].ef);
        assert_int_equal(strataCompressFormat(&p, buf, sizeof(buf)), strataSuccess);
        assert_string_equal(buf, cases[i].formatted);
        assert_int_equal(strataCompressParse(buf, &q), strataSuccess);
        assert_true(params_equal(&p, &q));
    }
}

static void test_parse_bad(void **state)
{
    static const char *const bad[] = {
        "",
        "topk",
        "topk:0",
        "topk:1.5",
        "topk:nan",
        "topk:-0.5",
        "topk:inf",
        "topk:",
        "topk:0.5x",
        "int8:0",
        "int8:x",
        "int8:",
        "int8:-1",
        "int8:16777217",
        "int8:64x",
        "foo",
        "fp16:3",
        "none:",
        "bf16:1",
        "sign,bad",
        "sign,",
        "int8,noef,noef",
        "int8:64,",
        "INT8",
        " int8",
        "int8 ",
        "averyveryverylongname",
        "int8:99999999999999999999999",
    };

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        strataCompressParams_t p = {strataCodecSign, 0.25, 3, 0}, keep = p;

        if (strataCompressParse(bad[i], &p) != strataInvalidArgument) {
            fail_msg("'%s' parses", bad[i]);
        }
        /* the output is set only on success */
        assert_true(params_equal(&p, &keep));
    }
    {
        strataCompressParams_t p;

        assert_int_equal(strataCompressParse(NULL, &p), strataInvalidArgument);
        assert_int_equal(strataCompressParse("int8", NULL), strataInvalidArgument);
    }
}

static void test_format(void **state)
{
    /* densities that need all 17 digits still read back exactly */
    const double dens[] = {0.1,     1.0 / 3.0, 0.123456789012345,       0.07, 1e-9,
                           0x1p-30, 4.9e-324,  1.2345678901234567e-300, 1.0};
    char         buf[64];

    for (size_t i = 0; i < sizeof(dens) / sizeof(dens[0]); i++) {
        for (int ef = 0; ef < 2; ef++) {
            strataCompressParams_t p = {strataCodecTopk, dens[i], 256, ef}, q;
            char                   small[40];

            assert_int_equal(strataCompressFormat(&p, buf, sizeof(buf)), strataSuccess);
            assert_int_equal(strataCompressParse(buf, &q), strataSuccess);
            if (q.density != p.density || q.errorFeedback != ef) {
                fail_msg("density %.17g formats as '%s'", p.density, buf);
            }
            /* the header's size that always suffices */
            assert_int_equal(strataCompressFormat(&p, small, sizeof(small)), strataSuccess);
            assert_string_equal(small, buf);
        }
    }
    /* the shortest spelling where it reads back */
    {
        strataCompressParams_t p = {strataCodecTopk, 0.1, 256, 1};

        assert_int_equal(strataCompressFormat(&p, buf, sizeof(buf)), strataSuccess);
        assert_string_equal(buf, "topk:0.1");
    }
    {
        strataCompressParams_t p = {strataCodecInt8, 0.0, 64, 0};

        assert_int_equal(strataCompressFormat(&p, buf, 13), strataSuccess); /* "int8:64,noef" */
        assert_string_equal(buf, "int8:64,noef");
        assert_int_equal(strataCompressFormat(&p, buf, 12), strataInvalidArgument);
        assert_int_equal(strataCompressFormat(NULL, buf, 64), strataInvalidArgument);
        assert_int_equal(strataCompressFormat(&p, NULL, 64), strataInvalidArgument);
        p.block = 0;
        assert_int_equal(strataCompressFormat(&p, buf, 64), strataInvalidArgument);
        p.block = 64;
        p.codec = (strataCodec_t)99;
        assert_int_equal(strataCompressFormat(&p, buf, 64), strataInvalidArgument);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Compressors                                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_compressor_create_errors(void **state)
{
    const strataCompressParams_t good = {strataCodecInt8, 0.0, 256, 1};
    strataCompressor_t           c    = NULL;

    assert_int_equal(strataCompressorCreate(NULL, &good, 10, strataFloat32), strataInvalidArgument);
    assert_int_equal(strataCompressorCreate(&c, NULL, 10, strataFloat32), strataInvalidArgument);
    assert_null(c);
    assert_int_equal(strataCompressorCreate(&c, &good, 0, strataFloat32), strataInvalidArgument);
    assert_int_equal(strataCompressorCreate(&c, &good, 10, strataInt32), strataInvalidArgument);
    assert_int_equal(strataCompressorCreate(&c, &good, 10, strataFloat64), strataInvalidArgument);
    assert_int_equal(strataCompressorCreate(&c, &good, 10, (strataDataType_t)-1),
                     strataInvalidArgument);
    assert_int_equal(strataCompressorCreate(&c, &good, SIZE_MAX, strataFloat32),
                     strataInvalidArgument);
    {
        strataCompressParams_t p = good;

        p.codec = (strataCodec_t)99;
        assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32), strataInvalidArgument);
        p.codec = (strataCodec_t)-1;
        assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32), strataInvalidArgument);
    }
    {
        const double dens[] = {0.0, -1.0, 1.5, NAN, INFINITY, -0.0};

        for (size_t i = 0; i < sizeof(dens) / sizeof(dens[0]); i++) {
            strataCompressParams_t p = {strataCodecTopk, dens[i], 256, 1};

            assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32),
                             strataInvalidArgument);
        }
    }
    {
        const size_t blocks[] = {0, (1u << 24) + 1, SIZE_MAX};

        for (size_t i = 0; i < sizeof(blocks) / sizeof(blocks[0]); i++) {
            strataCompressParams_t p = {strataCodecInt8, 0.0, blocks[i], 1};

            assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32),
                             strataInvalidArgument);
            p.codec = strataCodecSign;
            assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32),
                             strataInvalidArgument);
        }
    }
    {
        strataCompressParams_t p = good;

        p.errorFeedback = 2;
        assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32), strataInvalidArgument);
        p.errorFeedback = -1;
        assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat32), strataInvalidArgument);
    }
    assert_null(c);
    /* the ignored fields are ignored: a block of 0 for topk, a density of 0 for int8 */
    {
        strataCompressParams_t p = {strataCodecTopk, 0.5, 0, 0};

        assert_int_equal(strataCompressorCreate(&c, &p, 10, strataFloat16), strataSuccess);
        assert_int_equal(strataCompressorDestroy(c), strataSuccess);
        c = NULL;
    }
}

static void test_compressor_lifecycle(void **state)
{
    const strataCompressParams_t p = {strataCodecTopk, 0.25, 256, 1};
    const strataCompressParams_t q = {strataCodecInt8, 0.0, 64, 0};
    strataCompressParams_t       got;
    strataCompressor_t           c = NULL, d = NULL;

    assert_int_equal(strataCompressorCreate(&c, &p, 1000, strataBfloat16), strataSuccess);
    assert_non_null(c);
    assert_int_equal(strataCompressorGetParams(c, &got), strataSuccess);
    assert_true(params_equal(&got, &p));
    assert_int_equal(strataCompressorGetParams(NULL, &got), strataInvalidArgument);
    assert_int_equal(strataCompressorGetParams(c, NULL), strataInvalidArgument);
    /* the residual: zero at creation, zero again after Reset */
    assert_non_null(c->residual);
    assert_int_equal(c->count, 1000);
    assert_int_equal(c->dtype, strataBfloat16);
    for (size_t i = 0; i < 1000; i++) {
        assert_true(c->residual[i] == 0.0f);
        c->residual[i] = (float)i + 0.5f;
    }
    assert_int_equal(strataCompressorReset(c), strataSuccess);
    for (size_t i = 0; i < 1000; i++) {
        assert_int_equal(fbits(c->residual[i]), 0);
    }
    assert_int_equal(strataCompressorReset(NULL), strataInvalidArgument);

    /* without error feedback: no residual, Reset is fine */
    assert_int_equal(strataCompressorCreate(&d, &q, 7, strataFloat32), strataSuccess);
    assert_null(d->residual);
    assert_int_equal(strataCompressorGetParams(d, &got), strataSuccess);
    assert_true(params_equal(&got, &q));
    assert_int_equal(strataCompressorReset(d), strataSuccess);

    assert_int_equal(strataCompressorDestroy(c), strataSuccess);
    assert_int_equal(strataCompressorDestroy(d), strataSuccess);
    assert_int_equal(strataCompressorDestroy(NULL), strataSuccess);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_wire_bytes),
        cmocka_unit_test(test_wire_bytes_literal),
        cmocka_unit_test(test_wire_bytes_errors),
        cmocka_unit_test(test_eps),
        cmocka_unit_test(test_roundtrip_none),
        cmocka_unit_test(test_roundtrip_fp16),
        cmocka_unit_test(test_roundtrip_bf16),
        cmocka_unit_test(test_roundtrip_int8),
        cmocka_unit_test(test_roundtrip_topk),
        cmocka_unit_test(test_roundtrip_sign),
        cmocka_unit_test(test_lossy_not_exact),
        cmocka_unit_test(test_topk_ties),
        cmocka_unit_test(test_topk_many_ties),
        cmocka_unit_test(test_int8_values),
        cmocka_unit_test(test_int8_tiny_block),
        cmocka_unit_test(test_sign_values),
        cmocka_unit_test(test_sign_huge_finite),
        cmocka_unit_test(test_fp16_subnormal_data),
        cmocka_unit_test(test_nonfinite_blocks),
        cmocka_unit_test(test_fp16_saturation),
        cmocka_unit_test(test_nonfinite_cast_topk),
        cmocka_unit_test(test_residual_exact),
        cmocka_unit_test(test_error_feedback),
        cmocka_unit_test(test_error_feedback_long),
        cmocka_unit_test(test_parse_good),
        cmocka_unit_test(test_parse_bad),
        cmocka_unit_test(test_format),
        cmocka_unit_test(test_compressor_create_errors),
        cmocka_unit_test(test_compressor_lifecycle),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
