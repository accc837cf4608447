/*
 * sign.c - scaled sign (1-bit) compression: per block of p->block elements a float32 scale
 * s = mean |v| (summed in index order) and one bit per element, set when v < 0; decodes to
 * -s or +s. Wire: the ceil(n / block) scales, then ceil(n / 8) bytes of bits (bit i % 8 of byte
 * i / 8). Biased on its own (Karimireddy et al. 2019, "Error Feedback Fixes SignSGD"): use it
 * with error feedback. A block holding a NaN or an infinity decodes to NaN.
 */
#include "config.h"
#include "codec/codec.h"

#include <math.h>
#include <string.h>

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

static void st_sign_encode(const strataCompressParams_t *p, strataDataType_t dt, const float *v,
                           size_t n, void *wire, float *res, float *work)
{
    size_t         nb = st_sign_blocks(p, n);
    unsigned char *bits = (unsigned char *)wire + 4 * nb;

    (void)work;
    memset(bits, 0, (n + 7) / 8);
    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float  sum = 0.0f, s, pos, neg;

        for (size_t i = lo; i < hi; i++) {
            sum += fabsf(v[i]);
        }
        s = sum / (float)(hi - lo);
        s = (s - s == 0.0f) ? s : NAN;
        memcpy((char *)wire + 4 * b, &s, 4);
        pos = st_codec_round(dt, s);
        neg = st_codec_round(dt, -s);
        for (size_t i = lo; i < hi; i++) {
            int negative = v[i] < 0.0f;

            bits[i / 8] |= (unsigned char)(negative << (i % 8));
            if (res != NULL) {
                res[i] = st_codec_residual(v[i], negative ? neg : pos);
            }
        }
    }
}

static void st_sign_decode(const strataCompressParams_t *p, strataDataType_t dt,
                           const void *wire, size_t n, void *dst)
{
    size_t               nb = st_sign_blocks(p, n);
    const unsigned char *bits = (const unsigned char *)wire + 4 * nb;

    for (size_t b = 0; b < nb; b++) {
        size_t lo = b * p->block, hi = lo + p->block < n ? lo + p->block : n;
        float  s;

        memcpy(&s, (const char *)wire + 4 * b, 4);
        for (size_t i = lo; i < hi; i++) {
            st_codec_store(dt, dst, i, ((bits[i / 8] >> (i % 8)) & 1) ? -s : s);
        }
    }
}

const st_codec_ops_t st_codec_sign_ops = {"sign", st_sign_wire, st_sign_scratch, st_sign_encode,
                                          st_sign_decode};
