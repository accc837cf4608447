/*
 * cast.c - the casting codecs: none (the datatype's own bytes), fp16 and bf16 (round to nearest
 * even; fp16 saturates finite values beyond its largest, 65504, instead of making them infinite).
 */
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

static void st_cast_encode_none(const strataCompressParams_t *p, strataDataType_t dt,
                                const float *v, size_t n, void *wire, float *res, float *work)
{
    (void)p;
    (void)work;
    for (size_t i = 0; i < n; i++) {
        float d = st_codec_store(dt, wire, i, v[i]);

        if (res != NULL) {
            res[i] = st_codec_residual(v[i], d);
        }
    }
}

static void st_cast_decode_none(const strataCompressParams_t *p, strataDataType_t dt,
                                const void *wire, size_t n, void *dst)
{
    (void)p;
    memcpy(dst, wire, n * (dt == strataFloat32 ? 4 : 2));
}

/* fp16 of f, finite values beyond 65504 saturated (an infinity or NaN stays one) */
static uint16_t st_cast_to_half(float f)
{
    if (f > 65504.0f && f - f == 0.0f) {
        f = 65504.0f;
    } else if (f < -65504.0f && f - f == 0.0f) {
        f = -65504.0f;
    }
    return st_float_to_half(f);
}

static void st_cast_encode_fp16(const strataCompressParams_t *p, strataDataType_t dt,
                                const float *v, size_t n, void *wire, float *res, float *work)
{
    uint16_t *w = wire;

    (void)p;
    (void)work;
    for (size_t i = 0; i < n; i++) {
        w[i] = st_cast_to_half(v[i]);
        if (res != NULL) {
            res[i] = st_codec_residual(v[i], st_codec_round(dt, st_half_to_float(w[i])));
        }
    }
}

static void st_cast_decode_fp16(const strataCompressParams_t *p, strataDataType_t dt,
                                const void *wire, size_t n, void *dst)
{
    const uint16_t *w = wire;

    (void)p;
    for (size_t i = 0; i < n; i++) {
        st_codec_store(dt, dst, i, st_half_to_float(w[i]));
    }
}

static void st_cast_encode_bf16(const strataCompressParams_t *p, strataDataType_t dt,
                                const float *v, size_t n, void *wire, float *res, float *work)
{
    uint16_t *w = wire;

    (void)p;
    (void)work;
    for (size_t i = 0; i < n; i++) {
        w[i] = st_float_to_bf16(v[i]);
        if (res != NULL) {
            res[i] = st_codec_residual(v[i], st_codec_round(dt, st_bf16_to_float(w[i])));
        }
    }
}

static void st_cast_decode_bf16(const strataCompressParams_t *p, strataDataType_t dt,
                                const void *wire, size_t n, void *dst)
{
    const uint16_t *w = wire;

    (void)p;
    for (size_t i = 0; i < n; i++) {
        st_codec_store(dt, dst, i, st_bf16_to_float(w[i]));
    }
}

const st_codec_ops_t st_codec_none_ops = {"none", st_cast_wire_none, st_cast_scratch,
                                          st_cast_encode_none, st_cast_decode_none};
const st_codec_ops_t st_codec_fp16_ops = {"fp16", st_cast_wire_16, st_cast_scratch,
                                          st_cast_encode_fp16, st_cast_decode_fp16};
const st_codec_ops_t st_codec_bf16_ops = {"bf16", st_cast_wire_16, st_cast_scratch,
                                          st_cast_encode_bf16, st_cast_decode_bf16};
