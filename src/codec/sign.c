/*
 * sign.c - scaled sign (1-bit) compression: per block of p->block elements a float32 scale
 * s = mean |v| and one bit per element, its sign bit (so -0 decodes to -s); decodes to -s or +s.
 * Wire: the ceil(n / block) scales, then ceil(n / 8) bytes of bits (bit i % 8 of byte i / 8).
 * Biased on its own (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"): use it with error
 * feedback. A block holding a NaN or an infinity decodes to NaN.
 * The mean is summed in double in a fixed order (eight running sums, element i into sum i % 8 of
 * its block, then added pairwise), the same on every rank and vectorisable; the rest is bit
 * manipulation.
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
#if defined(__SSE2__)
#include <emmintrin.h>
#endif

static size_t st_sign_blocks(const strataCompressParams_t *p, size_t n)
{
    return (n + p->block - 1) / p->block;
}

static size_t st_sign_wire(const strataCompressParams_t *p, size_t es, size_t n)
{
    (void)es;
    return 4 * st_sign_blocks(p, n) + (n + 7) / 8;
}

static size_t st_sign_scratch(const strataCompressParams_t *p, size_t n)
{
    (void)p;
    (void)n;
    return 0;
}

/* mean |v[lo..hi)|, in the fixed order of the header. The sums are doubles: in float a block of
 * finite values near FLT_MAX overflowed to Inf and then decoded to NaN (the mean itself is at
 * most the largest |v|, so it always fits). */
ST_CODEC_INLINE float st_sign_mean(const float *v, size_t lo, size_t hi)
{
    double acc[8] = {0, 0, 0, 0, 0, 0, 0, 0};
    size_t i = lo;

    for (; i + 8 <= hi; i += 8) {
        for (int j = 0; j < 8; j++) {
            acc[j] += fabsf(v[i + j]);
        }
    }
    for (int j = 0; i < hi; i++, j++) {
        acc[j] += fabsf(v[i]);
    }
    return (float)((((acc[0] + acc[1]) + (acc[2] + acc[3])) +
                    ((acc[4] + acc[5]) + (acc[6] + acc[7]))) /
                   (double)(hi - lo));
}

/* The sign bits of v[lo..hi) into bits (bit i % 8 of byte i / 8; bytes wholly inside the range
 * are written, the others or'ed into) */
static inline void st_sign_pack(const float *v, size_t lo, size_t hi, unsigned char *bits)
{
    size_t i = lo;

    for (; i < hi && i % 8 != 0; i++) { /* up to a byte boundary */
        bits[i / 8] |= (unsigned char)((st_f32_bits(v[i]) >> 31) << (i % 8));
    }
    for (; i + 8 <= hi; i += 8) {
#if defined(__SSE2__)
        bits[i / 8] = (unsigned char)(_mm_movemask_ps(_mm_loadu_ps(v + i)) |
                                      (_mm_movemask_ps(_mm_loadu_ps(v + i + 4)) << 4));
#else
        unsigned b = 0;

        for (int j = 0; j < 8; j++) {
            b |= (st_f32_bits(v[i + j]) >> 31) << j;
        }
        bits[i / 8] = (unsigned char)b;
#endif
    }
    for (; i < hi; i++) {
        bits[i / 8] |= (unsigned char)((st_f32_bits(v[i]) >> 31) << (i % 8));
    }
}

/* Elements lo..hi of a block with scale pattern pos (of dt) and the sign bits: dst[i] = pos with
 * the sign bit of bit i (fp32: bit 31, fp16 and bf16: bit 15) */
ST_CODEC_INLINE void st_sign_expand(const unsigned char *bits, size_t lo, size_t hi, uint32_t pos,
                                    void *dst, strataDataType_t dt)
{
    const int top = dt == strataFloat32 ? 31 : 15;
    size_t    i = lo;

    /* up to a byte boundary, whole bytes (eight lanes of one shift each), the rest */
    for (; i < hi && (i % 8 != 0 || i + 8 > hi); i++) {
        uint32_t x = pos | ((uint32_t)((bits[i / 8] >> (i % 8)) & 1u) << top);

        if (dt == strataFloat32) {
            ((uint32_t *)dst)[i] = x;
        } else {
            ((uint16_t *)dst)[i] = (uint16_t)x;
        }
    }
    for (; i + 8 <= hi; i += 8) {
        uint32_t b = bits[i / 8];

        for (int j = 0; j < 8; j++) {
            uint32_t x = pos | (((b >> j) & 1u) << top);

            if (dt == strataFloat32) {
                ((uint32_t *)dst)[i + j] = x;
            } else {
                ((uint16_t *)dst)[i + j] = (uint16_t)x;
            }
        }
    }
    for (; i < hi; i++) {
        uint32_t x = pos | ((uint32_t)((bits[i / 8] >> (i % 8)) & 1u) << top);

        if (dt == strataFloat32) {
            ((uint32_t *)dst)[i] = x;
        } else {
            ((uint16_t *)dst)[i] = (uint16_t)x;
        }
    }
}

/* The pattern of +s in dt */
ST_CODEC_INLINE uint32_t st_sign_pos(float s, strataDataType_t dt)
{
    if (dt == strataFloat16) {
        return st_float_to_half(s);
    }
    if (dt == strataBfloat16) {
        return st_float_to_bf16(s);
    }
    return st_f32_bits(s);
}

ST_CODEC_INLINE void st_sign_loop(const strataCompressParams_t *p, const float *v, size_t n,
                                  void *wire, float *res, void *dec, strataDataType_t dt)
{
    size_t         nb = st_sign_blocks(p, n);
    unsigned char *bits = (unsigned char *)wire + 4 * nb;

    memset(bits, 0, (n + 7) / 8);
    for (size_t b = 0; b < nb; b++) {
        size_t   lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float    s = st_sign_mean(v, lo, hi);
        uint32_t pos;

        s = (s - s == 0.0f) ? s : NAN;
        memcpy((char *)wire + 4 * b, &s, 4);
        st_sign_pack(v, lo, hi, bits);
        if (res != NULL) {
            pos = st_f32_bits(st_codec_round(dt, s)); /* what +s decodes to; -s: sign flipped */
            for (size_t i = lo; i < hi; i++) {
                float d = st_f32_from_bits(pos | (st_f32_bits(v[i]) & 0x80000000u));

                res[i] = st_codec_residual(v[i], d);
            }
        }
        if (dec != NULL) {
            st_sign_expand(bits, lo, hi, st_sign_pos(s, dt), dec, dt);
        }
    }
}

ST_CODEC_TARGETS static void st_sign_encode(const strataCompressParams_t *p, strataDataType_t dt,
                                            const float *v, size_t n, void *wire, float *res,
                                            void *dec, float *work)
{
    (void)work;
    ST_CODEC_DTYPE_SWITCH(dt, st_sign_loop, p, v, n, wire, res, dec);
}

ST_CODEC_INLINE void st_sign_dec(const strataCompressParams_t *p, const void *wire, size_t n,
                                 void *dst, strataDataType_t dt)
{
    size_t               nb = st_sign_blocks(p, n);
    const unsigned char *bits = (const unsigned char *)wire + 4 * nb;

    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float  s;

        memcpy(&s, (const char *)wire + 4 * b, 4);
        st_sign_expand(bits, lo, hi, st_sign_pos(s, dt), dst, dt);
    }
}

ST_CODEC_TARGETS static void st_sign_decode(const strataCompressParams_t *p, strataDataType_t dt,
                                            const void *wire, size_t n, void *dst)
{
    ST_CODEC_DTYPE_SWITCH(dt, st_sign_dec, p, wire, n, dst);
}

const st_codec_ops_t st_codec_sign_ops = {"sign", st_sign_wire, st_sign_scratch, st_sign_encode,
                                          st_sign_decode};
