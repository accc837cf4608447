/*
 * cast.c - the casting codecs: none (the datatype's own bytes), fp16 and bf16 (round to nearest
 * even; fp16 saturates finite values beyond its largest, 65504, instead of making them infinite).
 * Each loop is specialised per datatype (ST_CODEC_DTYPE_SWITCH) and branch-free, so it vectorises.
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

#include <string.h>

static size_t st_cast_wire_none(const strataCompressParams_t *p, size_t es, size_t n)
{
    (void)p;
    return es * n;
}

static size_t st_cast_wire_16(const strataCompressParams_t *p, size_t es, size_t n)
{
    (void)p;
    (void)es;
    return 2 * n;
}

static size_t st_cast_scratch(const strataCompressParams_t *p, size_t n)
{
    (void)p;
    (void)n;
    return 0;
}

/* none: v rounded to the datatype (v = x exactly when there is no residual) */
ST_CODEC_INLINE void st_cast_none_loop(const float *v, size_t n, void *wire, float *res,
                                       strataDataType_t dt)
{
    for (size_t i = 0; i < n; i++) {
        st_codec_store(dt, wire, i, v[i]);
    }
    if (res != NULL) {
        for (size_t i = 0; i < n; i++) {
            res[i] = st_codec_residual(v[i], st_codec_load(dt, wire, i));
        }
    }
}

ST_CODEC_TARGETS static void st_cast_encode_none(const strataCompressParams_t *p,
                                                 strataDataType_t dt, const float *v, size_t n,
                                                 void *wire, float *res, void *dec, float *work)
{
    (void)p;
    (void)work;
    ST_CODEC_DTYPE_SWITCH(dt, st_cast_none_loop, v, n, wire, res);
    if (dec != NULL) {
        memmove(dec, wire, n * (dt == strataFloat32 ? 4 : 2));
    }
}

static void st_cast_decode_none(const strataCompressParams_t *p, strataDataType_t dt,
                                const void *wire, size_t n, void *dst)
{
    (void)p;
    memcpy(dst, wire, n * (dt == strataFloat32 ? 4 : 2));
}

/* fp16 of f, finite values beyond 65504 saturated (an infinity or NaN stays one) */
ST_CODEC_INLINE uint16_t st_cast_to_half(float f)
{
    uint32_t x = st_f32_bits(f), ax = x & 0x7fffffffu;
    uint32_t big = 0u - (uint32_t)(ax > 0x477fe000u && ax < 0x7f800000u); /* 65504 < |f| < Inf */

    x ^= big & (x ^ ((x & 0x80000000u) | 0x477fe000u));
    return st_float_to_half(st_f32_from_bits(x));
}

ST_CODEC_INLINE void st_cast_fp16_loop(const float *v, size_t n, uint16_t *w, float *res,
                                       void *dec, strataDataType_t dt)
{
    for (size_t i = 0; i < n; i++) {
        w[i] = st_cast_to_half(v[i]);
    }
    if (res != NULL) {
        for (size_t i = 0; i < n; i++) {
            res[i] = st_codec_residual(v[i], st_codec_round(dt, st_half_to_float(w[i])));
        }
    }
    if (dec != NULL) {
        for (size_t i = 0; i < n; i++) {
            st_codec_store(dt, dec, i, st_half_to_float(w[i]));
        }
    }
}

ST_CODEC_TARGETS static void st_cast_encode_fp16(const strataCompressParams_t *p,
                                                 strataDataType_t dt, const float *v, size_t n,
                                                 void *wire, float *res, void *dec, float *work)
{
    (void)p;
    (void)work;
    ST_CODEC_DTYPE_SWITCH(dt, st_cast_fp16_loop, v, n, wire, res, dec);
}

ST_CODEC_INLINE void st_cast_fp16_dec(const uint16_t *w, size_t n, void *dst, strataDataType_t dt)
{
    for (size_t i = 0; i < n; i++) {
        st_codec_store(dt, dst, i, st_half_to_float(w[i]));
    }
}

ST_CODEC_TARGETS static void st_cast_decode_fp16(const strataCompressParams_t *p,
                                                 strataDataType_t dt, const void *wire,
                                                 size_t n, void *dst)
{
    (void)p;
    if (dt == strataFloat16) {
        memcpy(dst, wire, 2 * n);
        return;
    }
    ST_CODEC_DTYPE_SWITCH(dt, st_cast_fp16_dec, wire, n, dst);
}

ST_CODEC_INLINE void st_cast_bf16_loop(const float *v, size_t n, uint16_t *w, float *res,
                                       void *dec, strataDataType_t dt)
{
    for (size_t i = 0; i < n; i++) {
        w[i] = st_float_to_bf16(v[i]);
    }
    if (res != NULL) {
        for (size_t i = 0; i < n; i++) {
            res[i] = st_codec_residual(v[i], st_codec_round(dt, st_bf16_to_float(w[i])));
        }
    }
    if (dec != NULL) {
        for (size_t i = 0; i < n; i++) {
            st_codec_store(dt, dec, i, st_bf16_to_float(w[i]));
        }
    }
}

ST_CODEC_TARGETS static void st_cast_encode_bf16(const strataCompressParams_t *p,
                                                 strataDataType_t dt, const float *v, size_t n,
                                                 void *wire, float *res, void *dec, float *work)
{
    (void)p;
    (void)work;
    ST_CODEC_DTYPE_SWITCH(dt, st_cast_bf16_loop, v, n, wire, res, dec);
}

ST_CODEC_INLINE void st_cast_bf16_dec(const uint16_t *w, size_t n, void *dst, strataDataType_t dt)
{
    for (size_t i = 0; i < n; i++) {
        st_codec_store(dt, dst, i, st_bf16_to_float(w[i]));
    }
}

ST_CODEC_TARGETS static void st_cast_decode_bf16(const strataCompressParams_t *p,
                                                 strataDataType_t dt, const void *wire,
                                                 size_t n, void *dst)
{
    (void)p;
    if (dt == strataBfloat16) {
        memcpy(dst, wire, 2 * n);
        return;
    }
    ST_CODEC_DTYPE_SWITCH(dt, st_cast_bf16_dec, wire, n, dst);
}

const st_codec_ops_t st_codec_none_ops = {"none", st_cast_wire_none, st_cast_scratch,
                                          st_cast_encode_none, st_cast_decode_none};
const st_codec_ops_t st_codec_fp16_ops = {"fp16", st_cast_wire_16, st_cast_scratch,
                                          st_cast_encode_fp16, st_cast_decode_fp16};
const st_codec_ops_t st_codec_bf16_ops = {"bf16", st_cast_wire_16, st_cast_scratch,
                                          st_cast_encode_bf16, st_cast_decode_bf16};
