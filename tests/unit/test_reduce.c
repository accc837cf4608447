/*
 * test_reduce.c - unit tests of the host reduction kernels (src/reduce/host.c) and of the fp16 /
 * bf16 conversions (src/reduce/half.h).
 *
 * The conversions are checked against references written from the definition of the formats
 * (ldexp of the fields, nearest representable value by exact distance), not against the same bit
 * tricks. The kernels are then checked element by element against a plain scalar reference of
 * each datatype x op, on random and special values, over counts around vector widths, buffers at
 * odd element and byte offsets from a 64-byte boundary with guard bytes around them, and with dst
 * aliasing each input. The named cases of the semantics (wrapping, unsigned order, NaN, ties to
 * even, fp16 overflow, integer avg truncation) have tests of their own with literal values.
 */
#include "config.h"
#include "reduce/half.h"
#include "reduce/reduce.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 0xa5 /* byte pattern around every test buffer */

static const strataDataType_t all_dtypes[] = {
    strataInt8,   strataUint8,   strataInt32,   strataUint32,  strataInt64,
    strataUint64, strataFloat16, strataFloat32, strataFloat64, strataBfloat16};

static const strataRedOp_t builtin_ops[] = {strataSum, strataProd, strataMax, strataMin};

static const size_t counts[] = {0, 1, 15, 16, 17, 63, 64, 65, 4097};

/* ---------------------------------------------------------------------------------------- */
/* Helpers: random numbers, elements as 64-bit patterns, guarded buffers                    */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x9e3779b97f4a7c15ull;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint32_t f32_bits(float f)
{
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
}

static float f32_of(uint32_t u)
{
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
}

static uint64_t f64_bits(double d)
{
    uint64_t u;

    memcpy(&u, &d, sizeof(u));
    return u;
}

static double f64_of(uint64_t u)
{
    double d;

    memcpy(&d, &u, sizeof(d));
    return d;
}

static uint64_t el_get(const void *p, size_t i, size_t size)
{
    const char *c = (const char *)p + i * size;
    uint8_t     v8;
    uint16_t    v16;
    uint32_t    v32;
    uint64_t    v64;

    switch (size) {
    case 1: memcpy(&v8, c, 1); return v8;
    case 2: memcpy(&v16, c, 2); return v16;
    case 4: memcpy(&v32, c, 4); return v32;
    default: memcpy(&v64, c, 8); return v64;
    }
}

static void el_set(void *p, size_t i, size_t size, uint64_t v)
{
    char    *c   = (char *)p + i * size;
    uint8_t  v8  = (uint8_t)v;
    uint16_t v16 = (uint16_t)v;
    uint32_t v32 = (uint32_t)v;

    switch (size) {
    case 1: memcpy(c, &v8, 1); break;
    case 2: memcpy(c, &v16, 2); break;
    case 4: memcpy(c, &v32, 4); break;
    default: memcpy(c, &v, 8); break;
    }
}

/* A buffer whose payload starts `off` bytes after a 64-byte boundary, with 64 guard bytes before
 * the boundary and after the payload. */
typedef struct {
    uint8_t *base;
    uint8_t *p;
    size_t   off, bytes, total;
} tbuf_t;

static void tbuf_alloc(tbuf_t *b, size_t off, size_t bytes)
{
    b->off   = off;
    b->bytes = bytes;
    b->total = (64 + off + bytes + 64 + 63) & ~(size_t)63;
    b->base  = aligned_alloc(64, b->total);
    assert_non_null(b->base);
    memset(b->base, GUARD, b->total);
    b->p = b->base + 64 + off;
}

static void tbuf_check_guards(const tbuf_t *b, const char *what)
{
    size_t i;

    for (i = 0; i < b->total; i++) {
        if ((i < 64 + b->off || i >= 64 + b->off + b->bytes) && b->base[i] != GUARD) {
            fail_msg("%s: guard byte %zd from the payload changed to 0x%02x", what,
                     (ptrdiff_t)i - (ptrdiff_t)(64 + b->off), b->base[i]);
        }
    }
}

static void tbuf_free(tbuf_t *b)
{
    free(b->base);
    b->base = b->p = NULL;
}

/* ---------------------------------------------------------------------------------------- */
/* Reference semantics, written from the definitions                                        */
/* ---------------------------------------------------------------------------------------- */

/* The value of an fp16 pattern, from its fields. */
static double ref_half_value(uint16_t h)
{
    int    e = (h >> 10) & 0x1f, m = h & 0x3ff;
    double s = (h & 0x8000) ? -1.0 : 1.0;

    if (e == 0x1f) {
        return m ? NAN : s * INFINITY;
    }
    return e == 0 ? s * ldexp(m, -24) : s * ldexp(1024 + m, e - 25);
}

/* Nearest fp16 to f (ties to the even pattern), by exact distances in double: both neighbours
 * and f lie within a few dozen bits of each other, so the differences are exact. */
static uint16_t ref_float_to_half(float f)
{
    uint16_t sign = signbit(f) ? 0x8000 : 0;
    double   a    = fabs((double)f);
    unsigned lo = 0, hi = 0x7c00, mid;
    double   vlo, vhi;

    if (isnan(f)) {
        return 0x7e00; /* only NaN-ness is compared */
    }
    if (a >= 65520.0) {
        return sign | 0x7c00; /* 65520 is the tie between 65504 (odd) and 2^16: Inf */
    }
    while (hi - lo > 1) { /* largest pattern whose value <= a */
        mid = (lo + hi) / 2;
        if (ref_half_value((uint16_t)mid) <= a) {
            lo = mid;
        } else {
            hi = mid;
        }
    }
    vlo = ref_half_value((uint16_t)lo);
    vhi = hi == 0x7c00 ? 65536.0 : ref_half_value((uint16_t)hi);
    if (a - vlo < vhi - a || (a - vlo == vhi - a && (lo & 1) == 0)) {
        return sign | (uint16_t)lo;
    }
    return sign | (uint16_t)hi;
}

/* Nearest bf16 to f, the same way (bf16 is the top half of fp32; past the largest is 2^128). */
static uint16_t ref_float_to_bf16(float f)
{
    uint32_t u  = f32_bits(f) & 0x7fffffffu;
    uint16_t lo = (uint16_t)(u >> 16), sign = (uint16_t)((f32_bits(f) >> 16) & 0x8000);
    double   a = fabs((double)f), vlo, vhi;

    if (isnan(f)) {
        return 0x7fc0;
    }
    if (isinf(f)) {
        return sign | 0x7f80;
    }
    vlo = (double)f32_of((uint32_t)lo << 16);
    vhi = lo == 0x7f7f ? ldexp(1.0, 128) : (double)f32_of((uint32_t)(lo + 1) << 16);
    if (a - vlo < vhi - a || (a - vlo == vhi - a && (lo & 1) == 0)) {
        return sign | lo;
    }
    return sign | (uint16_t)(lo + 1);
}

static int is_half_nan(uint64_t h)
{
    return (h & 0x7fff) > 0x7c00;
}

static int is_bf16_nan(uint64_t b)
{
    return (b & 0x7fff) > 0x7f80;
}

static uint64_t canonical_qnan(strataDataType_t dt)
{
    switch (dt) {
    case strataFloat16: return 0x7e00;
    case strataBfloat16: return 0x7fc0;
    case strataFloat32: return 0x7fc00000;
    default: return 0x7ff8000000000000ull;
    }
}

static double float_value(strataDataType_t dt, uint64_t v)
{
    switch (dt) {
    case strataFloat16: return ref_half_value((uint16_t)v);
    case strataBfloat16: return (double)f32_of((uint32_t)v << 16);
    case strataFloat32: return (double)f32_of((uint32_t)v);
    default: return f64_of(v);
    }
}

/* One rounded operation in the compute type: fp32 for fp16/bf16/fp32, fp64 for fp64. The
 * volatile store forces the rounding (no contraction into a fused multiply-add). A NaN result is
 * the type's canonical quiet NaN, whatever the operands' payloads. */
static uint64_t ref_float_arith(strataDataType_t dt, int is_prod, uint64_t a, uint64_t b)
{
    if (dt == strataFloat64) {
        volatile double r = is_prod ? f64_of(a) * f64_of(b) : f64_of(a) + f64_of(b);
        return isnan(r) ? canonical_qnan(dt) : f64_bits(r);
    } else {
        float          x = (float)float_value(dt, a), y = (float)float_value(dt, b);
        volatile float r = is_prod ? x * y : x + y;

        if (isnan(r)) {
            return canonical_qnan(dt);
        }
        if (dt == strataFloat16) {
            return st_float_to_half(r);
        }
        return dt == strataBfloat16 ? st_float_to_bf16(r) : f32_bits(r);
    }
}

static uint64_t ref_float_maxmin(strataDataType_t dt, int is_max, uint64_t a, uint64_t b)
{
    double x = float_value(dt, a), y = float_value(dt, b);

    if (isnan(x) || isnan(y)) {
        return canonical_qnan(dt);
    }
    if (x != y) {
        return (x > y) == is_max ? a : b;
    }
    /* Equal values are the same pattern, or +0 and -0: max takes +0, min takes -0. */
    return (signbit(x) != 0) == is_max ? b : a;
}

static uint64_t width_mask(size_t size)
{
    return size == 8 ? ~0ull : (1ull << (8 * size)) - 1;
}

/* a OP b for integers: exact in 64-bit arithmetic (unsigned where it could overflow), then
 * truncated to the width, which is what two's complement wrapping means. */
static uint64_t ref_int(strataDataType_t dt, st_red_kind_t kind, uint64_t a, uint64_t b)
{
    size_t   size   = st_dtype_size(dt);
    int      is_sig = dt == strataInt8 || dt == strataInt32 || dt == strataInt64;
    uint64_t mask   = width_mask(size);
    int      shift  = 64 - 8 * (int)size;
    int64_t  x = (int64_t)(a << shift) >> shift, y = (int64_t)(b << shift) >> shift;

    switch (kind) {
    case ST_RED_SUM: return (a + b) & mask;
    case ST_RED_PROD: return (a * b) & mask;
    case ST_RED_MAX: return is_sig ? (uint64_t)(x > y ? x : y) & mask : (a > b ? a : b);
    case ST_RED_MIN: return is_sig ? (uint64_t)(x < y ? x : y) & mask : (a < b ? a : b);
    }
    return 0;
}

static uint64_t ref_op(strataDataType_t dt, st_red_kind_t kind, uint64_t a, uint64_t b)
{
    if (!st_dtype_is_float(dt)) {
        return ref_int(dt, kind, a, b);
    }
    if (kind == ST_RED_MAX || kind == ST_RED_MIN) {
        return ref_float_maxmin(dt, kind == ST_RED_MAX, a, b);
    }
    return ref_float_arith(dt, kind == ST_RED_PROD, a, b);
}

/* Result check: bit-exact (a NaN is the canonical one of its type, from every op). */
static void check_el(strataDataType_t dt, st_red_kind_t kind, uint64_t want, uint64_t got,
                     const char *ctx, size_t count, size_t i)
{
    if (want == got) {
        return;
    }
    fail_msg("%s %s kind %d count %zu: element %zu is 0x%" PRIx64 ", want 0x%" PRIx64, ctx,
             st_dtype_name(dt), (int)kind, count, i, got, want);
}

/* Random patterns: a third anything, a third ordinary values, a third special values. */
static uint64_t gen_value(strataDataType_t dt)
{
    static const uint16_t half_special[] = {0x0000, 0x8000, 0x7c00, 0xfc00, 0x7e00,
                                            0x7d00, 0x7bff, 0xfbff, 0x0001, 0x8001,
                                            0x03ff, 0x0400, 0x3c00, 0xbc00, 0xfe01};
    static const uint16_t bf16_special[] = {0x0000, 0x8000, 0x7f80, 0xff80, 0x7fc0, 0x7fa0,
                                            0x7f7f, 0xff7f, 0x0001, 0x8001, 0x0080, 0x3f80};
    static const uint32_t f32_special[]  = {0x00000000, 0x80000000, 0x7f800000, 0xff800000,
                                            0x7fc00000, 0x7fa00000, 0x7f7fffff, 0x00000001,
                                            0x00800000, 0x3f800000, 0xbf800000, 0xffc00001};
    static const uint64_t f64_special[]  = {0,
                                            0x8000000000000000ull,
                                            0x7ff0000000000000ull,
                                            0xfff0000000000000ull,
                                            0x7ff8000000000000ull,
                                            0x7ff4000000000000ull,
                                            0x7fefffffffffffffull,
                                            1,
                                            0x0010000000000000ull,
                                            0x3ff0000000000000ull};
    static const int64_t  int_special[]  = {
          0, 1, -1, 2, -2, 127, -128, 255, INT32_MAX, INT32_MIN, UINT32_MAX, INT64_MAX, INT64_MIN};
    uint64_t r = rnd(), pick = rnd() % 3, mask = width_mask(st_dtype_size(dt));

    if (pick == 0) {
        return r & mask;
    }
    switch (dt) {
    case strataFloat16:
        if (pick == 1) { /* normal, moderate exponent */
            return (r & 0x83ff) | ((uint64_t)(8 + rnd() % 14) << 10);
        }
        return half_special[r % ST_ARRAY_SIZE(half_special)];
    case strataBfloat16:
        if (pick == 1) {
            return (r & 0x807f) | ((uint64_t)(100 + rnd() % 54) << 7);
        }
        return bf16_special[r % ST_ARRAY_SIZE(bf16_special)];
    case strataFloat32:
        if (pick == 1) {
            return (r & 0x807fffff) | ((uint64_t)(100 + rnd() % 54) << 23);
        }
        return f32_special[r % ST_ARRAY_SIZE(f32_special)];
    case strataFloat64:
        if (pick == 1) {
            return (r & 0x800fffffffffffffull) | ((uint64_t)(1000 + rnd() % 48) << 52);
        }
        return f64_special[r % ST_ARRAY_SIZE(f64_special)];
    default:
        if (pick == 1) {
            return (uint64_t)((int64_t)(r % 21) - 10) & mask;
        }
        return (uint64_t)int_special[r % ST_ARRAY_SIZE(int_special)] & mask;
    }
}

static void init_op(st_redop_t *redop, strataRedOp_t op, strataDataType_t dt, int nranks)
{
    assert_int_equal(st_redop_init(redop, op, dt, nranks), ST_OK);
}

/* ---------------------------------------------------------------------------------------- */
/* Datatypes and op resolution                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_dtype_info(void **state)
{
    static const char *const names[] = {"int8",   "uint8", "int32", "uint32", "int64",
                                        "uint64", "half",  "float", "double", "bfloat16"};
    static const size_t      sizes[] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
    static const int         isflt[] = {0, 0, 0, 0, 0, 0, 1, 1, 1, 1};
    size_t                   i;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        assert_int_equal(st_dtype_size(all_dtypes[i]), sizes[i]);
        assert_string_equal(st_dtype_name(all_dtypes[i]), names[i]);
        assert_int_equal(st_dtype_is_float(all_dtypes[i]), isflt[i]);
    }
    assert_int_equal(st_dtype_size(strataNumTypes), 0);
    assert_int_equal(st_dtype_size((strataDataType_t)-1), 0);
    assert_string_equal(st_dtype_name(strataNumTypes), "unknown");
    assert_int_equal(st_dtype_is_float(strataNumTypes), 0);
}

static void test_redop_init(void **state)
{
    st_redop_t r, keep;
    size_t     i, j;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        for (j = 0; j < ST_ARRAY_SIZE(builtin_ops); j++) {
            init_op(&r, builtin_ops[j], all_dtypes[i], 5);
            assert_int_equal(r.kind, (int)j); /* sum prod max min share their order */
            assert_int_equal(r.dtype, all_dtypes[i]);
            assert_int_equal(r.premul, 0);
            assert_false(st_redop_has_post(&r));
        }
        init_op(&r, strataAvg, all_dtypes[i], 5);
        assert_int_equal(r.kind, ST_RED_SUM);
        assert_int_equal(r.premul, st_dtype_is_float(all_dtypes[i]));
        assert_int_equal(st_redop_has_post(&r), !st_dtype_is_float(all_dtypes[i]));
        if (!st_dtype_is_float(all_dtypes[i])) {
            assert_int_equal(r.postdiv, 5);
        }
    }
    /* Invalid arguments fail and leave the output alone. */
    memset(&keep, 0x5a, sizeof(keep));
    r = keep;
    assert_int_equal(st_redop_init(&r, strataSum, strataNumTypes, 2), ST_ERR_INVALID);
    assert_int_equal(st_redop_init(&r, strataSum, (strataDataType_t)-1, 2), ST_ERR_INVALID);
    assert_int_equal(st_redop_init(&r, strataNumOps, strataFloat32, 2), ST_ERR_INVALID);
    assert_int_equal(st_redop_init(&r, (strataRedOp_t)-1, strataFloat32, 2), ST_ERR_INVALID);
    assert_int_equal(st_redop_init(&r, (strataRedOp_t)(strataNumOps + 3), strataInt8, 2),
                     ST_ERR_INVALID);
    assert_int_equal(st_redop_init(&r, strataAvg, strataFloat32, 0), ST_ERR_INVALID);
    assert_memory_equal(&r, &keep, sizeof(r));

    /* Avg scalars: 1/n rounded to nearest even in the datatype. */
    init_op(&r, strataAvg, strataFloat16, 3);
    assert_int_equal(r.scalar.h16, 0x3555);
    init_op(&r, strataAvg, strataFloat16, 5);
    assert_int_equal(r.scalar.h16, 0x3266);
    init_op(&r, strataAvg, strataFloat16, 7);
    assert_int_equal(r.scalar.h16, 0x3092);
    init_op(&r, strataAvg, strataFloat16, 4);
    assert_int_equal(r.scalar.h16, 0x3400);
    init_op(&r, strataAvg, strataBfloat16, 3);
    assert_int_equal(r.scalar.h16, 0x3eab);
    init_op(&r, strataAvg, strataFloat32, 3);
    assert_int_equal(f32_bits(r.scalar.f32), 0x3eaaaaab);
    init_op(&r, strataAvg, strataFloat64, 3);
    assert_true(r.scalar.f64 == 1.0 / 3.0);
    init_op(&r, strataAvg, strataFloat16, 1 << 25); /* 2^-25: tie between 0 and 2^-24 */
    assert_int_equal(r.scalar.h16, 0x0000);
    init_op(&r, strataAvg, strataFloat16, (1 << 25) - 1); /* just above the tie */
    assert_int_equal(r.scalar.h16, 0x0001);
    init_op(&r, strataAvg, strataFloat16, 3 << 23); /* 2^-23 / 3 = 0.667 * 2^-24 */
    assert_int_equal(r.scalar.h16, 0x0001);
}

/* The avg scalar is the nearest value to 1/n: no neighbour is closer, ties go to even. Distances
 * |v * n - 1| are exact in double for these widths. */
static void test_avg_scalar_nearest(void **state)
{
    static const int big[] = {16383,   16384,    16385,    30000,    65535,     65536,
                              1000003, 33554431, 33554432, 33554433, 100000000, 536870911};
    st_redop_t       r;
    int              n, k, t;

    (void)state;
    for (k = 0; k < 5000 + (int)ST_ARRAY_SIZE(big); k++) {
        n = k < 5000 ? k + 1 : big[k - 5000];
        for (t = 0; t < 3; t++) {
            strataDataType_t dt = t == 0 ? strataFloat16 : t == 1 ? strataBfloat16 : strataFloat32;
            uint64_t         v, nb[2];
            double           d, dn;
            int              j;

            init_op(&r, strataAvg, dt, n);
            v     = dt == strataFloat32 ? f32_bits(r.scalar.f32) : r.scalar.h16;
            nb[0] = v - 1;
            nb[1] = v + 1;
            d     = fabs(float_value(dt, v) * n - 1.0);
            for (j = 0; j < 2; j++) {
                if (v == 0 && j == 0) {
                    continue;
                }
                dn = fabs(float_value(dt, nb[j]) * n - 1.0);
                if (dn < d || (dn == d && (v & 1))) {
                    fail_msg("%s avg scalar of %d ranks: 0x%" PRIx64 " but 0x%" PRIx64 " is nearer",
                             st_dtype_name(dt), n, v, nb[j]);
                }
            }
        }
    }
}

static void test_redop_init_premul(void **state)
{
    uint8_t    bytes[8] = {0x11, 0x22, 0x33, 0x44, 0x55, 0x66, 0x77, 0x88};
    st_redop_t r, keep;
    size_t     i;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        assert_int_equal(st_redop_init_premul(&r, all_dtypes[i], bytes), ST_OK);
        assert_int_equal(r.kind, ST_RED_SUM);
        assert_int_equal(r.premul, 1);
        assert_false(st_redop_has_post(&r));
        assert_memory_equal(&r.scalar, bytes, st_dtype_size(all_dtypes[i]));
    }
    memset(&keep, 0x5a, sizeof(keep));
    r = keep;
    assert_int_equal(st_redop_init_premul(&r, strataNumTypes, bytes), ST_ERR_INVALID);
    assert_int_equal(st_redop_init_premul(&r, strataFloat32, NULL), ST_ERR_INVALID);
    assert_memory_equal(&r, &keep, sizeof(r));
}

/* ---------------------------------------------------------------------------------------- */
/* Conversions                                                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_half_to_float_all(void **state)
{
    uint32_t h;

    (void)state;
    for (h = 0; h < 65536; h++) {
        float  f    = st_half_to_float((uint16_t)h);
        double want = ref_half_value((uint16_t)h);

        if (isnan(want)) {
            /* Quiet NaN, same sign, payload kept in the top fraction bits. */
            assert_true(isnan(f));
            assert_int_equal(f32_bits(f) >> 31, h >> 15);
            assert_int_equal((f32_bits(f) >> 13) & 0x3ff, (h & 0x3ff) | 0x200);
        } else if ((double)f != want || !signbit(f) != !signbit(want)) {
            fail_msg("half 0x%04x -> %a, want %a", h, (double)f, want);
        }
    }
}

static void check_f2h(float f)
{
    uint16_t got = st_float_to_half(f), want = ref_float_to_half(f);

    if (isnan(f)) {
        if (!is_half_nan(got) || !(got & 0x200) || (got >> 15) != (f32_bits(f) >> 31)) {
            fail_msg("float 0x%08x (NaN) -> 0x%04x, not a quiet NaN of its sign", f32_bits(f), got);
        }
    } else if (got != want) {
        fail_msg("float 0x%08x (%a) -> half 0x%04x, want 0x%04x", f32_bits(f), (double)f, got,
                 want);
    }
}

/* Every fp16 pattern survives a round trip (NaNs as NaNs); the midpoints between neighbours and
 * the floats on either side of them round as they must. */
static void test_half_round_trip_and_ties(void **state)
{
    uint32_t h;

    (void)state;
    for (h = 0; h < 65536; h++) {
        float    f    = st_half_to_float((uint16_t)h);
        uint16_t back = st_float_to_half(f);

        if (is_half_nan(h)) {
            assert_true(is_half_nan(back));
            continue;
        }
        assert_int_equal(back, h);
        check_f2h(f);
        if ((h & 0x7fff) < 0x7c00) { /* midpoint to the next pattern away from zero */
            double next =
                (h & 0x7fff) == 0x7bff ? 65536.0 : fabs(ref_half_value((uint16_t)(h + 1)));
            float mid = (float)((fabs((double)f) + next) / 2); /* exact in fp32 */
            float s   = (h & 0x8000) ? -1.0f : 1.0f;

            check_f2h(s * mid);
            check_f2h(s * nextafterf(mid, 0.0f));
            check_f2h(s * nextafterf(mid, INFINITY));
        }
    }
    /* Named cases: ties to even at 2049 and 2051, the overflow threshold, the subnormal edge. */
    assert_int_equal(st_float_to_half(2049.0f), 0x6800); /* 2048 */
    assert_int_equal(st_float_to_half(2051.0f), 0x6802); /* 2052 */
    assert_int_equal(st_float_to_half(65504.0f), 0x7bff);
    assert_int_equal(st_float_to_half(65519.996f), 0x7bff);
    assert_int_equal(st_float_to_half(65520.0f), 0x7c00);
    assert_int_equal(st_float_to_half(-65520.0f), 0xfc00);
    assert_int_equal(st_float_to_half(1e30f), 0x7c00);
    assert_int_equal(st_float_to_half(INFINITY), 0x7c00);
    assert_int_equal(st_float_to_half(-INFINITY), 0xfc00);
    assert_int_equal(st_float_to_half(ldexpf(1.0f, -25)), 0x0000); /* tie to even: 0 */
    assert_int_equal(st_float_to_half(ldexpf(1.5f, -25)), 0x0001);
    assert_int_equal(st_float_to_half(ldexpf(3.0f, -25)), 0x0002);     /* tie to even: 2 */
    assert_int_equal(st_float_to_half(ldexpf(0x3ffp0f, -24)), 0x03ff); /* largest subnormal */
    assert_int_equal(st_float_to_half(ldexpf(2047.0f, -25)), 0x0400);  /* rounds up to normal */
    assert_int_equal(st_float_to_half(-ldexpf(1.0f, -24)), 0x8001);
    assert_int_equal(st_float_to_half(-0.0f), 0x8000);
    assert_int_equal(st_float_to_half(f32_of(0x00000001)), 0x0000); /* fp32 denormal */
    assert_int_equal(st_float_to_half(f32_of(0x7f800001)) & 0x7e00, 0x7e00);
}

/* Random floats of every kind against the nearest-value reference. */
static void test_half_from_random_floats(void **state)
{
    int i;

    (void)state;
    for (i = 0; i < 300000; i++) {
        uint32_t r = (uint32_t)rnd();

        if (i & 1) { /* exponents around the fp16 range, where all the rounding cases are */
            r = (r & 0x807fffffu) | ((uint32_t)(96 + rnd() % 50) << 23);
        }
        check_f2h(f32_of(r));
    }
}

static void test_bf16_conversions(void **state)
{
    uint32_t b;
    int      i;

    (void)state;
    for (b = 0; b < 65536; b++) {
        float f = st_bf16_to_float((uint16_t)b);

        if (is_bf16_nan(b)) {
            assert_true(isnan(f));
            assert_int_equal(f32_bits(f) >> 16, b | 0x40); /* quieted, payload kept */
            assert_true(is_bf16_nan(st_float_to_bf16(f)));
            continue;
        }
        assert_int_equal(f32_bits(f), b << 16);
        assert_int_equal(st_float_to_bf16(f), b);
        if ((b & 0x7fff) < 0x7f80) { /* the tie above b and one step either side of it */
            assert_int_equal(st_float_to_bf16(f32_of((b << 16) | 0x8000)), (b & 1) ? b + 1 : b);
            assert_int_equal(st_float_to_bf16(f32_of((b << 16) | 0x7fff)), b);
            assert_int_equal(st_float_to_bf16(f32_of((b << 16) | 0x8001)), b + 1);
        }
    }
    assert_int_equal(st_float_to_bf16(257.0f), 0x4380);             /* 256: tie to even */
    assert_int_equal(st_float_to_bf16(259.0f), 0x4382);             /* 260: tie to even */
    assert_int_equal(st_float_to_bf16(f32_of(0x7f7f8000)), 0x7f80); /* overflow to Inf */
    assert_int_equal(st_float_to_bf16(f32_of(0x7f7f7fff)), 0x7f7f);
    assert_int_equal(st_float_to_bf16(f32_of(0x7f800001)) & 0x7fc0, 0x7fc0); /* NaN stays */
    assert_int_equal(st_float_to_bf16(f32_of(0xff800001)) & 0xffc0, 0xffc0);
    for (i = 0; i < 300000; i++) {
        float f = f32_of((uint32_t)rnd());

        if (isnan(f)) {
            assert_true(is_bf16_nan(st_float_to_bf16(f)));
        } else {
            assert_int_equal(st_float_to_bf16(f), ref_float_to_bf16(f));
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels against the reference: every dtype x op, counts, offsets, aliasing, guards       */
/* ---------------------------------------------------------------------------------------- */

/* Byte offsets of (dst, a, b) from a 64-byte boundary: element offsets 1, 3, 5 in turn, then
 * offsets that are not multiples of the element size. */
typedef struct {
    size_t elems[3];
    size_t bytes[3];
} layout_t;

static const layout_t layouts[] = {
    {{0, 0, 0}, {0, 0, 0}}, {{1, 3, 5}, {0, 0, 0}}, {{5, 1, 3}, {0, 0, 0}},
    {{3, 5, 1}, {0, 0, 0}}, {{0, 0, 0}, {1, 3, 5}}, {{1, 0, 2}, {7, 3, 62}},
};

enum { ALIAS_NONE, ALIAS_DST_A, ALIAS_DST_B, ALIAS_MODES };

typedef enum { RUN_COMBINE, RUN_APPLY, RUN_APPLY_PREMUL } run_t;

/* One call on fresh buffers, checked against want[i] = ref(a[i], b[i]). */
static void run_binary_case(const st_redop_t *redop, run_t run, size_t count, const layout_t *lay,
                            int alias)
{
    strataDataType_t dt   = redop->dtype;
    size_t           size = st_dtype_size(dt), i;
    tbuf_t           buf[3];
    uint64_t        *want = malloc((count + 1) * sizeof(*want));
    uint8_t         *a_copy, *b_copy;
    void            *dst;
    char             ctx[64];

    assert_non_null(want);
    for (i = 0; i < 3; i++) {
        tbuf_alloc(&buf[i], lay->elems[i] * size + lay->bytes[i], count * size);
    }
    for (i = 0; i < count; i++) {
        el_set(buf[0].p, i, size, gen_value(dt)); /* junk that must be overwritten */
        el_set(buf[1].p, i, size, gen_value(dt));
        el_set(buf[2].p, i, size, gen_value(dt));
    }
    a_copy = malloc(count * size + 1);
    b_copy = malloc(count * size + 1);
    assert_non_null(a_copy);
    assert_non_null(b_copy);
    memcpy(a_copy, buf[1].p, count * size);
    memcpy(b_copy, buf[2].p, count * size);

    for (i = 0; i < count; i++) {
        uint64_t a = el_get(a_copy, i, size), b = el_get(b_copy, i, size);

        if (run == RUN_APPLY_PREMUL) { /* (a * s) + b, each rounded */
            uint64_t s = el_get(&redop->scalar, 0, size);

            a = st_dtype_is_float(dt) ? ref_float_arith(dt, 1, a, s)
                                      : ref_int(dt, ST_RED_PROD, a, s);
        }
        want[i] = ref_op(dt, redop->kind, a, b);
    }

    dst = alias == ALIAS_DST_A ? buf[1].p : alias == ALIAS_DST_B ? buf[2].p : buf[0].p;
    if (run == RUN_COMBINE) {
        st_reduce_combine(redop, dst, buf[1].p, buf[2].p, count);
    } else {
        st_reduce_apply(redop, dst, buf[1].p, buf[2].p, count);
    }

    snprintf(ctx, sizeof(ctx), "%s alias %d layout %d",
             run == RUN_COMBINE ? "combine"
             : run == RUN_APPLY ? "apply"
                                : "apply premul",
             alias, (int)(lay - layouts));
    for (i = 0; i < count; i++) {
        check_el(dt, redop->kind, want[i], el_get(dst, i, size), ctx, count, i);
    }
    for (i = 0; i < 3; i++) {
        tbuf_check_guards(&buf[i], ctx);
    }
    if (alias != ALIAS_DST_A) {
        assert_memory_equal(buf[1].p, a_copy, count * size);
    }
    if (alias != ALIAS_DST_B) {
        assert_memory_equal(buf[2].p, b_copy, count * size);
    }
    for (i = 0; i < 3; i++) {
        tbuf_free(&buf[i]);
    }
    free(a_copy);
    free(b_copy);
    free(want);
}

static void run_all_layouts(const st_redop_t *redop, run_t run)
{
    size_t c, l;
    int    alias;

    for (c = 0; c < ST_ARRAY_SIZE(counts); c++) {
        for (l = 0; l < ST_ARRAY_SIZE(layouts); l++) {
            for (alias = 0; alias < ALIAS_MODES; alias++) {
                run_binary_case(redop, run, counts[c], &layouts[l], alias);
            }
        }
    }
}

/* combine and apply (no premul) for sum, prod, max, min of every datatype. */
static void test_kernels_vs_reference(void **state)
{
    st_redop_t r;
    size_t     i, j;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        for (j = 0; j < ST_ARRAY_SIZE(builtin_ops); j++) {
            init_op(&r, builtin_ops[j], all_dtypes[i], 4);
            run_all_layouts(&r, RUN_COMBINE);
            run_all_layouts(&r, RUN_APPLY);
        }
    }
}

/* st_reduce_combine_n over 1..9 inputs (the fused 3- and 4-input kernels and their chaining),
 * every datatype x op, special values included: the same bytes as st_reduce_combine applied in
 * turn, in a separate buffer and with dst aliasing each of the first four inputs, and nothing
 * written past count. */
static void test_combine_n_vs_sequential(void **state)
{
    enum { COUNT = 203, MAXN = 9 };
    unsigned char *in[MAXN], *seq = malloc(8 * (COUNT + 8)), *got = malloc(8 * (COUNT + 8));
    unsigned char *alias = malloc(8 * (COUNT + 8));
    st_redop_t     r;

    (void)state;
    assert_non_null(seq);
    assert_non_null(got);
    assert_non_null(alias);
    for (int k = 0; k < MAXN; k++) {
        in[k] = malloc(8 * COUNT);
        assert_non_null(in[k]);
    }
    for (size_t i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        strataDataType_t dt = all_dtypes[i];
        size_t           es = st_dtype_size(dt);

        for (size_t j = 0; j < ST_ARRAY_SIZE(builtin_ops); j++) {
            if (builtin_ops[j] == strataAvg) {
                continue; /* avg is sum before its post step (test_int_avg, test_avg_nranks) */
            }
            init_op(&r, builtin_ops[j], dt, 4);
            for (int n = 1; n <= MAXN; n++) {
                const void *srcs[MAXN];

                for (int k = 0; k < n; k++) {
                    for (size_t e = 0; e < COUNT; e++) {
                        el_set(in[k], e, es, gen_value(dt));
                    }
                    srcs[k] = in[k];
                }
                memcpy(seq, in[0], COUNT * es);
                for (int k = 1; k < n; k++) {
                    st_reduce_combine(&r, seq, seq, in[k], COUNT);
                }
                memset(got, 0xa5, (COUNT + 8) * es);
                st_reduce_combine_n(&r, got, srcs, n, COUNT);
                assert_memory_equal(got, seq, COUNT * es);
                for (size_t b = COUNT * es; b < (COUNT + 8) * es; b++) {
                    assert_int_equal(got[b], 0xa5);
                }
                for (int k = 0; k < n && k < 4; k++) { /* dst exactly one of the first four */
                    memcpy(alias, in[k], COUNT * es);
                    srcs[k] = alias;
                    st_reduce_combine_n(&r, alias, srcs, n, COUNT);
                    assert_memory_equal(alias, seq, COUNT * es);
                    srcs[k] = in[k];
                }
            }
        }
    }
    for (int k = 0; k < MAXN; k++) {
        free(in[k]);
    }
    free(seq);
    free(got);
    free(alias);
}

/* Premul-sum apply with a few scalars per datatype, including avg's 1/n. */
static void test_premul_apply_vs_reference(void **state)
{
    st_redop_t r;
    size_t     i;
    int        k;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        strataDataType_t dt = all_dtypes[i];

        for (k = 0; k < 4; k++) {
            uint64_t s = gen_value(dt);

            if (k == 0) {
                init_op(&r, strataAvg, dt, 3);
                if (!st_dtype_is_float(dt)) {
                    continue; /* integer avg has no premul; see test_int_avg */
                }
            } else {
                assert_int_equal(st_redop_init_premul(&r, dt, &s), ST_OK);
            }
            run_all_layouts(&r, RUN_APPLY_PREMUL);
        }
    }
}

/* pre: a copy without premul (in place too), src * scalar with it. */
static void test_pre(void **state)
{
    size_t i, c, e;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        strataDataType_t dt   = all_dtypes[i];
        size_t           size = st_dtype_size(dt);

        for (c = 0; c < ST_ARRAY_SIZE(counts); c++) {
            size_t     count = counts[c];
            tbuf_t     src, dst;
            st_redop_t r;
            uint64_t   s = gen_value(dt);
            uint8_t   *copy;

            tbuf_alloc(&src, 3 * size + 1, count * size);
            tbuf_alloc(&dst, 5 * size, count * size);
            for (e = 0; e < count; e++) {
                el_set(src.p, e, size, gen_value(dt));
            }
            copy = malloc(count * size + 1);
            assert_non_null(copy);
            memcpy(copy, src.p, count * size);

            init_op(&r, strataSum, dt, 2);
            st_reduce_pre(&r, dst.p, src.p, count);
            assert_memory_equal(dst.p, copy, count * size);
            st_reduce_pre(&r, src.p, src.p, count); /* in place: nothing moves */
            assert_memory_equal(src.p, copy, count * size);

            assert_int_equal(st_redop_init_premul(&r, dt, &s), ST_OK);
            st_reduce_pre(&r, dst.p, src.p, count);
            st_reduce_pre(&r, src.p, src.p, count); /* in place gives the same */
            for (e = 0; e < count; e++) {
                uint64_t x    = el_get(copy, e, size);
                uint64_t want = st_dtype_is_float(dt) ? ref_float_arith(dt, 1, x, s)
                                                      : ref_int(dt, ST_RED_PROD, x, s);

                check_el(dt, ST_RED_PROD, want, el_get(dst.p, e, size), "pre", count, e);
                check_el(dt, ST_RED_PROD, want, el_get(src.p, e, size), "pre in place", count, e);
            }
            tbuf_check_guards(&src, "pre src");
            tbuf_check_guards(&dst, "pre dst");
            tbuf_free(&src);
            tbuf_free(&dst);
            free(copy);
        }
    }
    /* count 0 touches nothing, NULL buffers included. */
    {
        st_redop_t r;

        init_op(&r, strataAvg, strataInt32, 3);
        st_reduce_pre(&r, NULL, NULL, 0);
        st_reduce_apply(&r, NULL, NULL, NULL, 0);
        st_reduce_combine(&r, NULL, NULL, NULL, 0);
        st_reduce_post(&r, NULL, 0);
        assert_int_equal(r.postdiv, 3);
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Avg over 1..8 ranks, as an algorithm runs it: pre on the first rank, then apply per rank  */
/* ---------------------------------------------------------------------------------------- */

static void test_avg_nranks(void **state)
{
    enum { N = 67 };
    size_t i, e;
    int    nranks, rk;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        strataDataType_t dt   = all_dtypes[i];
        size_t           size = st_dtype_size(dt);
        int              fl   = st_dtype_is_float(dt);

        for (nranks = 1; nranks <= 8; nranks++) {
            uint8_t    in[8][N * 8], acc[N * 8 + 1];
            uint64_t   want[N], s = 0;
            st_redop_t r;

            init_op(&r, strataAvg, dt, nranks);
            if (fl) { /* the scalar, computed independently (no double rounding for n <= 8) */
                double inv = 1.0 / nranks;

                s = dt == strataFloat64   ? f64_bits(inv)
                    : dt == strataFloat32 ? f32_bits((float)inv)
                    : dt == strataFloat16 ? st_float_to_half((float)inv)
                                          : st_float_to_bf16((float)inv);
                assert_int_equal(el_get(&r.scalar, 0, size), s);
            }
            for (rk = 0; rk < nranks; rk++) {
                for (e = 0; e < N; e++) {
                    el_set(in[rk], e, size, gen_value(dt));
                }
            }
            /* Reference: acc = R(x0 * s); acc = R(R(xr * s) + acc); ints: wrapped sum / n. */
            for (e = 0; e < N; e++) {
                uint64_t a = el_get(in[0], e, size);

                a = fl ? ref_float_arith(dt, 1, a, s) : a;
                for (rk = 1; rk < nranks; rk++) {
                    uint64_t x = el_get(in[rk], e, size);

                    x = fl ? ref_float_arith(dt, 1, x, s) : x;
                    a = ref_op(dt, ST_RED_SUM, x, a);
                }
                if (!fl) {
                    int      sh = 64 - 8 * (int)size;
                    int      sg = dt == strataInt8 || dt == strataInt32 || dt == strataInt64;
                    uint64_t q =
                        sg ? (uint64_t)(((int64_t)(a << sh) >> sh) / nranks) : a / (uint64_t)nranks;

                    a = q & width_mask(size);
                }
                want[e] = a;
            }
            st_reduce_pre(&r, acc + 1, in[0], N);
            for (rk = 1; rk < nranks; rk++) {
                st_reduce_apply(&r, acc + 1, in[rk], acc + 1, N);
            }
            assert_int_equal(st_redop_has_post(&r), !fl && nranks > 1);
            st_reduce_post(&r, acc + 1, N);
            for (e = 0; e < N; e++) {
                check_el(dt, ST_RED_SUM, want[e], el_get(acc + 1, e, size), "avg", N, e);
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Named cases of the semantics                                                             */
/* ---------------------------------------------------------------------------------------- */

/* dst = a OP b on one element of dtype, values given as 64-bit patterns. */
static uint64_t one(strataDataType_t dt, strataRedOp_t op, uint64_t a, uint64_t b)
{
    size_t     size = st_dtype_size(dt);
    uint8_t    x[8], y[8], d[8];
    st_redop_t r;

    init_op(&r, op, dt, 2);
    el_set(x, 0, size, a);
    el_set(y, 0, size, b);
    st_reduce_combine(&r, d, x, y, 1);
    return el_get(d, 0, size);
}

#define I8(_v) ((uint64_t)(uint8_t)(int8_t)(_v))
#define I32(_v) ((uint64_t)(uint32_t)(int32_t)(_v))
#define I64(_v) ((uint64_t)(int64_t)(_v))

static void test_int_wrap(void **state)
{
    (void)state;
    assert_int_equal(one(strataInt8, strataSum, I8(120), I8(100)), I8(-36));
    assert_int_equal(one(strataInt8, strataSum, I8(-128), I8(-1)), I8(127));
    assert_int_equal(one(strataInt8, strataSum, I8(127), I8(1)), I8(-128));
    assert_int_equal(one(strataInt8, strataSum, I8(1), I8(-1)), 0);
    assert_int_equal(one(strataUint8, strataSum, 200, 100), 44);
    assert_int_equal(one(strataUint8, strataSum, 255, 1), 0);
    assert_int_equal(one(strataInt32, strataSum, I32(INT32_MAX), 1), I32(INT32_MIN));
    assert_int_equal(one(strataInt32, strataSum, I32(INT32_MIN), I32(-1)), I32(INT32_MAX));
    assert_int_equal(one(strataUint32, strataSum, UINT32_MAX, 2), 1);
    assert_true(one(strataInt64, strataSum, I64(INT64_MAX), 1) == I64(INT64_MIN));
    assert_true(one(strataUint64, strataSum, UINT64_MAX, 1) == 0);
    assert_int_equal(one(strataInt8, strataProd, 16, 16), 0);
    assert_int_equal(one(strataInt8, strataProd, I8(-128), I8(-1)), I8(-128));
    assert_int_equal(one(strataInt8, strataProd, I8(-3), 50), I8(106)); /* -150 wraps */
    assert_int_equal(one(strataUint8, strataProd, 255, 255), 1);
    assert_int_equal(one(strataInt32, strataProd, I32(INT32_MIN), I32(-1)), I32(INT32_MIN));
    assert_int_equal(one(strataInt32, strataProd, 65536, 65536), 0);
    assert_true(one(strataInt64, strataProd, I64(INT64_MIN), I64(-1)) == I64(INT64_MIN));
    assert_true(one(strataUint64, strataProd, 1ull << 32, 1ull << 32) == 0);
    /* Signed order for the signed types. */
    assert_int_equal(one(strataInt8, strataMax, I8(-1), 1), 1);
    assert_int_equal(one(strataInt8, strataMin, I8(-128), 127), I8(-128));
    assert_int_equal(one(strataInt32, strataMin, I32(-5), 3), I32(-5));
    assert_true(one(strataInt64, strataMax, I64(INT64_MIN), I64(-1)) == I64(-1));
}

static void test_unsigned_minmax(void **state)
{
    (void)state;
    assert_int_equal(one(strataUint8, strataMin, 0, UINT8_MAX), 0);
    assert_int_equal(one(strataUint8, strataMax, 0, UINT8_MAX), UINT8_MAX);
    assert_int_equal(one(strataUint8, strataMax, 127, 128), 128);
    assert_int_equal(one(strataUint8, strataMin, 128, 127), 127);
    assert_int_equal(one(strataUint32, strataMin, 0, UINT32_MAX), 0);
    assert_int_equal(one(strataUint32, strataMax, 0x7fffffffu, 0x80000000u), 0x80000000u);
    assert_int_equal(one(strataUint32, strataMin, 0x80000000u, 0x7fffffffu), 0x7fffffffu);
    assert_true(one(strataUint64, strataMin, 0, UINT64_MAX) == 0);
    assert_true(one(strataUint64, strataMax, 0, UINT64_MAX) == UINT64_MAX);
    assert_true(one(strataUint64, strataMax, (1ull << 63) - 1, 1ull << 63) == 1ull << 63);
    assert_true(one(strataUint64, strataMin, 1ull << 63, (1ull << 63) - 1) == (1ull << 63) - 1);
}

/* A NaN in either argument of max or min gives the canonical quiet NaN, whatever the other
 * argument is (number, Inf, another NaN, a signalling NaN). */
static void test_nan_maxmin(void **state)
{
    /* Per type: quiet NaN, signalling NaN, negative NaN with a payload; then 1, -Inf, +Inf, -0. */
    static const struct {
        strataDataType_t dt;
        uint64_t         nans[3], others[4];
    } cases[] = {
        {strataFloat32,
         {0x7fc00000, 0x7f800001, 0xffc12345},
         {0x3f800000, 0xff800000, 0x7f800000, 0x80000000}},
        {strataFloat64,
         {0x7ff8000000000000ull, 0x7ff0000000000001ull, 0xfff8000000012345ull},
         {0x3ff0000000000000ull, 0xfff0000000000000ull, 0x7ff0000000000000ull,
          0x8000000000000000ull}},
        {strataFloat16, {0x7e00, 0x7c01, 0xfe45}, {0x3c00, 0xfc00, 0x7c00, 0x8000}},
        {strataBfloat16, {0x7fc0, 0x7f81, 0xffc5}, {0x3f80, 0xff80, 0x7f80, 0x8000}},
    };
    size_t i, k;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(cases); i++) {
        strataDataType_t dt     = cases[i].dt;
        const uint64_t  *nans   = cases[i].nans;
        const uint64_t  *others = cases[i].others;
        uint64_t         q      = canonical_qnan(dt);

        for (k = 0; k < 3; k++) {
            size_t o;

            for (o = 0; o < 4; o++) {
                assert_true(one(dt, strataMax, nans[k], others[o]) == q);
                assert_true(one(dt, strataMax, others[o], nans[k]) == q);
                assert_true(one(dt, strataMin, nans[k], others[o]) == q);
                assert_true(one(dt, strataMin, others[o], nans[k]) == q);
            }
            assert_true(one(dt, strataMax, nans[k], nans[(k + 1) % 3]) == q);
            assert_true(one(dt, strataMin, nans[k], nans[(k + 1) % 3]) == q);
        }
        /* Without NaN: Inf orders as it should, and +0 > -0 in either argument order. */
        assert_true(one(dt, strataMax, others[1], others[0]) == others[0]);
        assert_true(one(dt, strataMin, others[2], others[0]) == others[0]);
        assert_true(one(dt, strataMax, others[3], 0) == 0);
        assert_true(one(dt, strataMax, 0, others[3]) == 0);
        assert_true(one(dt, strataMin, others[3], 0) == others[3]);
        assert_true(one(dt, strataMin, 0, others[3]) == others[3]);
        /* NaN propagates through sum and prod too, as the canonical NaN: the payloads and signs
         * of the operands, and their order, do not show (x86 would keep the first payload). */
        for (k = 0; k < 3; k++) {
            assert_true(one(dt, strataSum, others[0], nans[k]) == q);
            assert_true(one(dt, strataSum, nans[k], others[0]) == q);
            assert_true(one(dt, strataProd, nans[k], others[1]) == q);
            assert_true(one(dt, strataProd, others[2], nans[k]) == q);
            assert_true(one(dt, strataSum, nans[k], nans[(k + 1) % 3]) == q);
        }
    }
}

/* The narrowings the reduction ops end with (half.h's _canon): the plain conversion's result for
 * every number, the canonical quiet NaN for every NaN, over a sweep of all fp32 patterns. */
static void test_canon_conversions(void **state)
{
    uint64_t u;

    (void)state;
    for (u = 0; u <= 0xffffffffull; u += 4093) {
        float f = f32_of((uint32_t)u);

        if (isnan(f)) {
            assert_int_equal(st_float_to_half_canon(f), 0x7e00);
            assert_int_equal(st_float_to_bf16_canon(f), 0x7fc0);
        } else {
            assert_int_equal(st_float_to_half_canon(f), st_float_to_half(f));
            assert_int_equal(st_float_to_bf16_canon(f), st_float_to_bf16(f));
        }
    }
    assert_int_equal(st_float_to_half_canon(f32_of(0xffc12345)), 0x7e00);
    assert_int_equal(st_float_to_bf16_canon(f32_of(0x7f800001)), 0x7fc0);
}

static void test_inf_sum(void **state)
{
    (void)state;
    /* Inf - Inf is the canonical quiet NaN (x86 makes the negative 0xffc00000 of it). */
    assert_int_equal(one(strataFloat32, strataSum, 0x7f800000, 0xff800000), 0x7fc00000);
    assert_true(one(strataFloat64, strataSum, 0x7ff0000000000000ull, 0xfff0000000000000ull) ==
                0x7ff8000000000000ull);
    assert_int_equal(one(strataFloat16, strataSum, 0x7c00, 0xfc00), 0x7e00);
    assert_int_equal(one(strataBfloat16, strataSum, 0x7f80, 0xff80), 0x7fc0);
    assert_int_equal(one(strataFloat16, strataSum, 0x7c00, 0x7bff), 0x7c00); /* Inf + max */
    assert_int_equal(one(strataFloat16, strataSum, 0xfc00, 0x3c00), 0xfc00); /* -Inf + 1 */
    assert_int_equal(one(strataBfloat16, strataSum, 0x7f80, 0x3f80), 0x7f80);
    assert_int_equal(one(strataFloat16, strataProd, 0x7c00, 0x0000), 0x7e00); /* Inf * 0 */
    assert_int_equal(one(strataFloat32, strataProd, 0xff800000, 0x00000000), 0x7fc00000);
    assert_int_equal(one(strataFloat32, strataSum, 0x7f800000, 0x3f800000), 0x7f800000);
}

static uint16_t half_of(float f)
{
    return st_float_to_half(f);
}

static void test_half_bf16_rounding(void **state)
{
    (void)state;
    /* fp16 spacing is 2 in [2048, 4096): 2049 ties to 2048 (even), 2051 to 2052; 2049.5 is
     * past the tie and goes up. */
    assert_int_equal(one(strataFloat16, strataSum, half_of(2048), half_of(1)), half_of(2048));
    assert_int_equal(one(strataFloat16, strataSum, half_of(2050), half_of(1)), half_of(2052));
    assert_int_equal(one(strataFloat16, strataSum, half_of(2048), half_of(1.5f)), half_of(2050));
    assert_int_equal(one(strataFloat16, strataSum, half_of(-2050), half_of(-1)), half_of(-2052));
    /* Product rounded once: 1.5 * 1366 = 2049 -> 2048; 1.5 * 1367 = 2050.5 -> 2050. */
    assert_int_equal(one(strataFloat16, strataProd, half_of(1.5f), half_of(1366)), half_of(2048));
    assert_int_equal(one(strataFloat16, strataProd, half_of(1.5f), half_of(1367)), half_of(2050));
    /* bf16 spacing is 2 in [256, 512): 257 ties to 256, 259 to 260. */
    assert_int_equal(one(strataBfloat16, strataSum, 0x4380, 0x3f80), 0x4380); /* 256+1 */
    assert_int_equal(one(strataBfloat16, strataSum, 0x4381, 0x3f80), 0x4382); /* 258+1 */
    assert_int_equal(one(strataBfloat16, strataSum, 0x3f80, 0x3b80), 0x3f80); /* 1+2^-8 */
    assert_int_equal(one(strataBfloat16, strataSum, 0x3f81, 0x3b80), 0x3f82); /* tie up */
    /* Rounding after every operation: a chain of sums differs from one rounding at the end
     * (2048 + 1 + 1 is 2048 in fp16, not 2050). */
    {
        st_redop_t r;
        uint16_t   acc = half_of(2048), one_h = half_of(1);

        init_op(&r, strataSum, strataFloat16, 3);
        st_reduce_combine(&r, &acc, &acc, &one_h, 1);
        st_reduce_combine(&r, &acc, &acc, &one_h, 1);
        assert_int_equal(acc, half_of(2048));
    }
}

/* 30000 summed over ranks overflows fp16 to +Inf (not NaN, not a clamp to 65504). */
static void test_half_overflow(void **state)
{
    st_redop_t r;
    uint16_t   acc[3], x[3] = {0x7753, 0xf753, 0x7bff}; /* 30000, -30000, 65504 */
    int        rk;

    (void)state;
    assert_int_equal(half_of(30000), 0x7753);
    init_op(&r, strataSum, strataFloat16, 4);
    st_reduce_pre(&r, acc, x, 3);
    for (rk = 1; rk < 4; rk++) {
        st_reduce_apply(&r, acc, x, acc, 3);
        if (rk == 1) {
            assert_int_equal(acc[0], half_of(60000)); /* still finite after two */
        }
    }
    assert_int_equal(acc[0], 0x7c00);
    assert_int_equal(acc[1], 0xfc00);
    assert_int_equal(acc[2], 0x7c00);
    assert_int_equal(one(strataFloat16, strataSum, 0x7bff, half_of(16)), 0x7c00); /* 65520: tie */
    assert_int_equal(one(strataFloat16, strataSum, 0x7bff, half_of(15)), 0x7bff);
    assert_int_equal(one(strataFloat16, strataProd, half_of(256), half_of(256)), 0x7c00);
    assert_int_equal(one(strataBfloat16, strataSum, 0x7f7f, 0x7f7f), 0x7f80);
}

/* fp16 avg of 4 ranks that all hold [30000, 60000, 2^-14]: each share is scaled by 1/4 before
 * it is summed, so nothing overflows and the mean is exactly the input. */
static void test_half_avg_no_overflow(void **state)
{
    const uint16_t x[3] = {0x7753, 0x7b53, 0x0400}; /* 30000, 60000, 2^-14 */
    uint16_t       acc[3];
    st_redop_t     r;
    int            rk;

    (void)state;
    assert_int_equal(half_of(60000), 0x7b53);
    init_op(&r, strataAvg, strataFloat16, 4);
    assert_int_equal(r.scalar.h16, 0x3400); /* 0.25 */
    st_reduce_pre(&r, acc, x, 3);
    assert_int_equal(acc[0], half_of(7500));
    assert_int_equal(acc[2], 0x0100); /* 2^-16, a subnormal */
    for (rk = 1; rk < 4; rk++) {
        st_reduce_apply(&r, acc, x, acc, 3);
    }
    st_reduce_post(&r, acc, 3);
    assert_memory_equal(acc, x, sizeof(x));
    /* The plain sum of the same data overflows. */
    init_op(&r, strataSum, strataFloat16, 4);
    st_reduce_pre(&r, acc, x, 3);
    for (rk = 1; rk < 4; rk++) {
        st_reduce_apply(&r, acc, x, acc, 3);
    }
    assert_int_equal(acc[0], 0x7c00);
}

static void test_subnormals(void **state)
{
    st_redop_t r;
    uint16_t   half_s = 0x3800, hv[4] = {0x0001, 0x0003, 0x8003, 0x0400}, ho[4];
    float      f_s   = 0.5f;
    uint32_t   fv[2] = {0x00000001, 0x00000003}, fo[2];

    (void)state;
    /* fp16: subnormal sums are exact; 2^-24 + 2^-24 = 2^-23. */
    assert_int_equal(one(strataFloat16, strataSum, 0x0001, 0x0001), 0x0002);
    assert_int_equal(one(strataFloat16, strataSum, 0x03ff, 0x0001), 0x0400); /* into normal */
    assert_int_equal(one(strataFloat16, strataSum, 0x0001, 0x8001), 0x0000);
    assert_int_equal(one(strataFloat16, strataProd, 0x0400, 0x3800), 0x0200); /* 2^-14 / 2 */
    assert_int_equal(one(strataFloat16, strataProd, 0x0001, 0x3800), 0x0000); /* tie to 0 */
    assert_int_equal(one(strataFloat16, strataMax, 0x0001, 0x8001), 0x0001);
    assert_int_equal(one(strataFloat16, strataMin, 0x0002, 0x0001), 0x0001);
    /* Premul by 0.5 rounds each product to even: 2^-24/2 -> 0, 3*2^-24/2 -> 2*2^-24. */
    assert_int_equal(st_redop_init_premul(&r, strataFloat16, &half_s), ST_OK);
    st_reduce_pre(&r, ho, hv, 4);
    assert_int_equal(ho[0], 0x0000);
    assert_int_equal(ho[1], 0x0002);
    assert_int_equal(ho[2], 0x8002);
    assert_int_equal(ho[3], 0x0200);
    /* bf16 and fp32 denormals are kept, not flushed. */
    assert_int_equal(one(strataBfloat16, strataSum, 0x0001, 0x0001), 0x0002);
    assert_int_equal(one(strataBfloat16, strataSum, 0x007f, 0x0001), 0x0080);
    assert_int_equal(one(strataFloat32, strataSum, 0x00000001, 0x00000002), 0x00000003);
    assert_true(one(strataFloat64, strataSum, 1, 1) == 2);
    assert_int_equal(st_redop_init_premul(&r, strataFloat32, &f_s), ST_OK);
    st_reduce_pre(&r, fo, fv, 2);
    assert_int_equal(fo[0], 0x00000000); /* 2^-150: tie to even, 0 */
    assert_int_equal(fo[1], 0x00000002); /* 1.5 * 2^-149: tie to even, 2 */
}

/* A premul product is rounded before the sum: with a fused multiply-add (which GCC would emit on
 * FMA targets if the kernels allowed contraction) the result below would be 2^-24, not 0. */
static void test_premul_product_rounded(void **state)
{
    float      s = 1.0f + 0x1p-12f, local = 1.0f + 0x1p-12f, in = -(1.0f + 0x1p-11f), out;
    double     sd = 1.0 + 0x1p-27, ld = 1.0 + 0x1p-27, ind = -(1.0 + 0x1p-26), outd;
    st_redop_t r;

    (void)state;
    assert_int_equal(st_redop_init_premul(&r, strataFloat32, &s), ST_OK);
    st_reduce_apply(&r, &out, &local, &in, 1);
    assert_int_equal(f32_bits(out), 0);
    assert_int_equal(st_redop_init_premul(&r, strataFloat64, &sd), ST_OK);
    st_reduce_apply(&r, &outd, &ld, &ind, 1);
    assert_true(f64_bits(outd) == 0);
}

/* Integer avg: the wrapped sum divided by nranks, truncating toward zero. */
static void test_int_avg(void **state)
{
    static const strataDataType_t sdt[] = {strataInt8, strataInt32, strataInt64};
    struct {
        int64_t v[3];
        int64_t want;
    } cases[] = {
        {{-1, 0, 0}, 0}, {{-4, 0, 0}, -1}, {{-5, -1, 0}, -2}, {{4, 0, 0}, 1},
        {{5, 1, 0}, 2},  {{-3, 0, 0}, -1}, {{7, 7, 7}, 7},    {{-100, -20, -1}, -40},
    };
    size_t     i, k;
    st_redop_t r;

    (void)state;
    for (i = 0; i < ST_ARRAY_SIZE(sdt); i++) {
        size_t size = st_dtype_size(sdt[i]);

        for (k = 0; k < ST_ARRAY_SIZE(cases); k++) {
            uint8_t in[3][8], acc[8];
            int     rk;

            init_op(&r, strataAvg, sdt[i], 3);
            for (rk = 0; rk < 3; rk++) {
                el_set(in[rk], 0, size, (uint64_t)cases[k].v[rk]);
            }
            st_reduce_pre(&r, acc, in[0], 1);
            st_reduce_apply(&r, acc, in[1], acc, 1);
            st_reduce_apply(&r, acc, in[2], acc, 1);
            st_reduce_post(&r, acc, 1);
            assert_true(el_get(acc, 0, size) == ((uint64_t)cases[k].want & width_mask(size)));
        }
    }
    /* The sum wraps before the division: int8 3 x 100 = 300 = 44, / 3 = 14; uint8 likewise;
     * int8 -128 x 2 = 0 (/2 = 0); int64 MIN / 2 stays exact. */
    {
        int8_t   i8[2] = {100, 100}, i8b[2] = {100, -128};
        uint8_t  u8[2] = {200, 255}, u8b[2] = {100, 1};
        int64_t  i64[1] = {INT64_MIN}, zero64[1] = {0};
        uint32_t u32[1] = {UINT32_MAX}, u32b[1] = {UINT32_MAX};

        init_op(&r, strataAvg, strataInt8, 3);
        st_reduce_combine(&r, i8, i8, i8b, 2); /* 200 = -56, -28 */
        st_reduce_combine(&r, i8, i8, i8b, 2); /* 300 = 44, -156 = 100 */
        st_reduce_post(&r, i8, 2);
        assert_int_equal(i8[0], 14);
        assert_int_equal(i8[1], 33);
        init_op(&r, strataAvg, strataUint8, 2);
        st_reduce_combine(&r, u8, u8, u8b, 2); /* 300 = 44, 256 = 0 */
        st_reduce_post(&r, u8, 2);
        assert_int_equal(u8[0], 22);
        assert_int_equal(u8[1], 0);
        init_op(&r, strataAvg, strataInt64, 2);
        st_reduce_combine(&r, i64, i64, zero64, 1);
        st_reduce_post(&r, i64, 1);
        assert_true(i64[0] == INT64_MIN / 2);
        init_op(&r, strataAvg, strataUint32, 2);  /* unsigned: plain division of the wrap */
        st_reduce_combine(&r, u32, u32, u32b, 1); /* 0xfffffffe */
        st_reduce_post(&r, u32, 1);
        assert_int_equal(u32[0], 0x7fffffffu);
    }
}

/* post does nothing for ops without a postdiv: sums, float avg. */
static void test_post_noop(void **state)
{
    uint8_t    data[64], copy[64];
    st_redop_t r;
    size_t     i;

    (void)state;
    for (i = 0; i < sizeof(data); i++) {
        data[i] = (uint8_t)rnd();
    }
    memcpy(copy, data, sizeof(data));
    for (i = 0; i < ST_ARRAY_SIZE(all_dtypes); i++) {
        init_op(&r, strataSum, all_dtypes[i], 8);
        st_reduce_post(&r, data, 64 / st_dtype_size(all_dtypes[i]));
        if (st_dtype_is_float(all_dtypes[i])) {
            init_op(&r, strataAvg, all_dtypes[i], 8);
            st_reduce_post(&r, data, 64 / st_dtype_size(all_dtypes[i]));
        }
        init_op(&r, strataAvg, all_dtypes[i], 1); /* avg of one rank: nothing to divide */
        st_reduce_post(&r, data, 64 / st_dtype_size(all_dtypes[i]));
    }
    assert_memory_equal(data, copy, sizeof(data));
}

/* st_copy_stream and st_copy_stream_unfenced: every byte copied, nothing around the destination
 * touched, for sizes below and above ST_COPY_STREAM_MIN, sources at offsets 0, 5, 10, 15 and
 * destinations at 0, 7, .. 63 bytes from a 64-byte line (the streaming part starts at the
 * destination's next line; whichever of the AVX and SSE2 loops this CPU runs). */
static void test_copy_stream(void **state)
{
    static const size_t sizes[] = {0,    1,    15,   ST_COPY_STREAM_MIN - 1, ST_COPY_STREAM_MIN,
                                   ST_COPY_STREAM_MIN + 1, 2048 + 5, 4095, 4096 + 63,
                                   65536 + 17, 1 << 20};
    size_t              max = (1 << 20) + 64;
    unsigned char      *src = malloc(max), *dst = aligned_alloc(64, max + 128);

    (void)state;
    assert_non_null(src);
    assert_non_null(dst);
    for (size_t i = 0; i < max; i++) {
        src[i] = (unsigned char)(i * 131 + 7);
    }
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
        for (size_t so = 0; so < 16; so += 5) {
            for (size_t doff = 0; doff < 64; doff += 7) {
                size_t n = sizes[k];

                memset(dst, 0xee, max + 128);
                if (doff % 2) {
                    st_copy_stream(dst + 64 + doff, src + so, n);
                } else {
                    st_copy_stream_unfenced(dst + 64 + doff, src + so, n);
                    st_stream_fence();
                }
                assert_memory_equal(dst + 64 + doff, src + so, n);
                for (size_t i = 0; i < 64 + doff; i++) {
                    assert_int_equal(dst[i], 0xee);
                }
                for (size_t i = 64 + doff + n; i < max + 128 && i < 64 + doff + n + 32; i++) {
                    assert_int_equal(dst[i], 0xee);
                }
            }
        }
    }
    free(src);
    free(dst);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_dtype_info),
        cmocka_unit_test(test_redop_init),
        cmocka_unit_test(test_avg_scalar_nearest),
        cmocka_unit_test(test_redop_init_premul),
        cmocka_unit_test(test_half_to_float_all),
        cmocka_unit_test(test_half_round_trip_and_ties),
        cmocka_unit_test(test_half_from_random_floats),
        cmocka_unit_test(test_bf16_conversions),
        cmocka_unit_test(test_kernels_vs_reference),
        cmocka_unit_test(test_premul_apply_vs_reference),
        cmocka_unit_test(test_combine_n_vs_sequential),
        cmocka_unit_test(test_pre),
        cmocka_unit_test(test_avg_nranks),
        cmocka_unit_test(test_int_wrap),
        cmocka_unit_test(test_unsigned_minmax),
        cmocka_unit_test(test_nan_maxmin),
        cmocka_unit_test(test_canon_conversions),
        cmocka_unit_test(test_inf_sum),
        cmocka_unit_test(test_half_bf16_rounding),
        cmocka_unit_test(test_half_overflow),
        cmocka_unit_test(test_half_avg_no_overflow),
        cmocka_unit_test(test_subnormals),
        cmocka_unit_test(test_premul_product_rounded),
        cmocka_unit_test(test_int_avg),
        cmocka_unit_test(test_post_noop),
        cmocka_unit_test(test_copy_stream),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
