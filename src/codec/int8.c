/*
 * int8.c - blockwise 8-bit quantization: per block of p->block elements a float32 scale
 * s = max|v| / 127 and one signed byte q = rint(v / s) (round to nearest even, |q| <= 127) per
 * element; decodes to q x s. Wire: the ceil(n / block) scales, then the n bytes. A block holding
 * a NaN or an infinity gets a NaN scale: it decodes to NaN, so an overflow stays visible.
 * The error of an element is at most s / 2 = max|v| / 254 (then rounded to the datatype).
 */
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

static void st_int8_encode(const strataCompressParams_t *p, strataDataType_t dt, const float *v,
                           size_t n, void *wire, float *res, float *work)
{
    size_t  nb = st_int8_blocks(p, n);
    char   *scales = wire;
    int8_t *q = (int8_t *)((char *)wire + 4 * nb);

    (void)work;
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float  m = 0.0f, s;

        for (size_t i = lo; i < hi; i++) {
            float a = fabsf(v[i]);

            m = (a > m || a != a) ? a : m; /* a NaN sticks */
        }
        s = (m - m == 0.0f) ? m / 127.0f : NAN;
        memcpy(scales + 4 * b, &s, 4);
        for (size_t i = lo; i < hi; i++) {
            float x = (s > 0.0f) ? rintf(v[i] / s) : 0.0f;

            x  = x > 127.0f ? 127.0f : (x < -127.0f ? -127.0f : x);
            q[i] = (int8_t)x;
            if (res != NULL) {
                res[i] = st_codec_residual(v[i], st_codec_round(dt, (float)q[i] * s));
            }
        }
    }
}

static void st_int8_decode(const strataCompressParams_t *p, strataDataType_t dt,
                           const void *wire, size_t n, void *dst)
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

const st_codec_ops_t st_codec_int8_ops = {"int8", st_int8_wire, st_int8_scratch, st_int8_encode,
                                          st_int8_decode};
