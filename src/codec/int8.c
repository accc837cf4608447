/*
 * int8.c - blockwise 8-bit quantization: per block of p->block elements a float32 scale
 * s = max|v| / 127 and one signed byte q = rint(v x 127 / max|v|) (round to nearest even,
 * |q| <= 127) per element; decodes to q x s. Wire: the ceil(n / block) scales, then the n bytes.
 * A block holding a NaN or an infinity gets a NaN scale: it decodes to NaN, so an overflow stays
 * visible. The error of an element is at most s / 2 = max|v| / 254 (then rounded to the
 * datatype), up to the rounding of 127 / max|v| (2^-10 of it at most).
 * The loops are branch-free and specialised per datatype, so they vectorise on plain x86-64:
 * the largest magnitude is an integer maximum of the bit patterns (a NaN or an infinity has the
 * largest exponent), and rint is the add-and-subtract of 1.5 x 2^23 (exact for |y| < 2^22, round
 * to nearest even in the default rounding mode).
 */
/* fp-contract off, as for the reduction kernels (reduce/elem.h): a fused multiply-add where one
 * host has FMA and another not would make encodings differ between them. In each codec file, not
 * in codec.h, so that its includers keep their own setting. */
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif

#include "config.h"
#include "codec/codec.h"

#include <math.h>
#include <string.h>

static size_t st_int8_blocks(const strataCompressParams_t *p, size_t n)
{
    return (n + p->block - 1) / p->block;
}

static size_t st_int8_wire(const strataCompressParams_t *p, size_t es, size_t n)
{
    (void)es;
    return 4 * st_int8_blocks(p, n) + n;
}

static size_t st_int8_scratch(const strataCompressParams_t *p, size_t n)
{
    (void)p;
    (void)n;
    return 0;
}

ST_CODEC_INLINE void st_int8_loop(const strataCompressParams_t *p, const float *v, size_t n,
                                  void *wire, float *res, void *dec, strataDataType_t dt)
{
    size_t  nb = st_int8_blocks(p, n);
    char   *scales = wire;
    int8_t *q = (int8_t *)((char *)wire + 4 * nb);

    for (size_t b = 0; b < nb; b++) {
        size_t   lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        uint32_t mb = 0;
        float    s, inv, up = 1.0f;

        for (size_t i = lo; i < hi; i++) {
            uint32_t a = st_f32_bits(v[i]) & 0x7fffffffu;

            mb = a > mb ? a : mb;
        }
        if (mb >= 0x7f800000u) { /* a NaN or an infinity */
            s   = NAN;
            inv = 0.0f;
        } else {
            float m = st_f32_from_bits(mb);

            /* Below 2^-64, 127 / m can overflow (m < 127 / FLT_MAX = 3.7e-37): an infinite inv
             * made every element Inf or NaN, converted to int as -127. Such a block is scaled up
             * by 2^64 first, v as it is read (exact: a power of two, no overflow). */
            up  = mb < 0x1f800000u ? 0x1p64f : 1.0f;
            s   = m / 127.0f;
            inv = mb != 0 ? 127.0f / (m * up) : 0.0f;
        }
        memcpy(scales + 4 * b, &s, 4);
        for (size_t i = lo; i < hi; i++) {
            float    y = ((v[i] * up) * inv + 12582912.0f) - 12582912.0f; /* rint, |y| <= 127 */
            uint32_t ok = 0u - (uint32_t)(y - y == 0.0f); /* NaN in a non-finite block: q = 0 */
            int32_t  k = (int32_t)st_f32_from_bits(st_f32_bits(y) & ok);

            k    = k > 127 ? 127 : (k < -127 ? -127 : k);
            q[i] = (int8_t)k;
        }
        if (res != NULL) {
            for (size_t i = lo; i < hi; i++) {
                res[i] = st_codec_residual(v[i], st_codec_round(dt, (float)q[i] * s));
            }
        }
        if (dec != NULL) {
            for (size_t i = lo; i < hi; i++) {
                st_codec_store(dt, dec, i, (float)q[i] * s);
            }
        }
    }
}

ST_CODEC_TARGETS static void st_int8_encode(const strataCompressParams_t *p, strataDataType_t dt,
                                            const float *v, size_t n, void *wire, float *res,
                                            void *dec, float *work)
{
    (void)work;
    ST_CODEC_DTYPE_SWITCH(dt, st_int8_loop, p, v, n, wire, res, dec);
}

ST_CODEC_INLINE void st_int8_dec(const strataCompressParams_t *p, const void *wire, size_t n,
                                 void *dst, strataDataType_t dt)
{
    size_t        nb = st_int8_blocks(p, n);
    const int8_t *q = (const int8_t *)((const char *)wire + 4 * nb);

    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float  s;

        memcpy(&s, (const char *)wire + 4 * b, 4);
        for (size_t i = lo; i < hi; i++) {
            st_codec_store(dt, dst, i, (float)q[i] * s);
        }
    }
}

ST_CODEC_TARGETS static void st_int8_decode(const strataCompressParams_t *p, strataDataType_t dt,
                           const void *wire, size_t n, void *dst)
{
    ST_CODEC_DTYPE_SWITCH(dt, st_int8_dec, p, wire, n, dst);
}

const st_codec_ops_t st_codec_int8_ops = {"int8", st_int8_wire, st_int8_scratch, st_int8_encode,
                                          st_int8_decode};
