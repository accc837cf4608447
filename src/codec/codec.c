/*
 * codec.c - the codecs' table, parameter checks, specs and the encode/decode entry points
 * (codec.h). The codecs themselves: cast.c, int8.c, topk.c, sign.c.
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
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "reduce/reduce.h"

static const st_codec_ops_t *const st_codecs[strataNumCodecs] = {
    [strataCodecNone] = &st_codec_none_ops, [strataCodecFp16] = &st_codec_fp16_ops,
    [strataCodecBf16] = &st_codec_bf16_ops, [strataCodecInt8] = &st_codec_int8_ops,
    [strataCodecTopk] = &st_codec_topk_ops, [strataCodecSign] = &st_codec_sign_ops,
};

const st_codec_ops_t *st_codec_ops(strataCodec_t codec)
{
    return ((unsigned)codec < strataNumCodecs) ? st_codecs[codec] : NULL;
}

const char *st_codec_name(strataCodec_t codec)
{
    const st_codec_ops_t *ops = st_codec_ops(codec);

    return ops != NULL ? ops->name : "unknown";
}

int st_codec_dtype_ok(strataDataType_t dt)
{
    return dt == strataFloat32 || dt == strataFloat16 || dt == strataBfloat16;
}

const char *st_codec_check(const strataCompressParams_t *p)
{
    if (st_codec_ops(p->codec) == NULL) {
        return "the codec is not one of strataCodec_t (none, fp16, bf16, int8, topk, sign)";
    }
    if (p->codec == strataCodecTopk && !(p->density > 0.0 && p->density <= 1.0)) {
        return "the topk density is outside (0, 1]";
    }
    if ((p->codec == strataCodecInt8 || p->codec == strataCodecSign) &&
        (p->block == 0 || p->block > ST_CODEC_BLOCK_MAX)) {
        return "the block (elements per scale) is 0 or above 2^24";
    }
    if (p->errorFeedback != 0 && p->errorFeedback != 1) {
        return "errorFeedback is neither 0 nor 1";
    }
    return NULL;
}

size_t st_codec_wire_bytes(const strataCompressParams_t *p, strataDataType_t dt, size_t n)
{
    return n == 0 ? 0 : st_codec_ops(p->codec)->wire_bytes(p, st_dtype_size(dt), n);
}

size_t st_codec_scratch(const strataCompressParams_t *p, size_t n)
{
    return n + st_codec_ops(p->codec)->scratch(p, n);
}

/* v = src (+ residual), one loop per datatype. A zero residual is not added: -0 + 0 is +0, which
 * would make codec none (and topk at density 1) turn a -0 that strataAllReduce keeps into +0
 * (a select, so the loop still vectorises). */
ST_CODEC_INLINE void st_codec_v(const void *src, const float *residual, size_t n, float *v,
                                strataDataType_t dt)
{
    if (residual != NULL) {
        for (size_t i = 0; i < n; i++) {
            float    x = st_codec_load(dt, src, i), r = residual[i];
            uint32_t m = 0u - (uint32_t)(r != 0.0f); /* a zero residual leaves x (and -0) as is */

            v[i] = st_f32_from_bits((st_f32_bits(x + r) & m) | (st_f32_bits(x) & ~m));
        }
    } else {
        for (size_t i = 0; i < n; i++) {
            v[i] = st_codec_load(dt, src, i);
        }
    }
}

ST_CODEC_TARGETS static void st_codec_v_any(strataDataType_t dt, const void *src,
                                            const float *residual, size_t n, float *v)
{
    ST_CODEC_DTYPE_SWITCH(dt, st_codec_v, src, residual, n, v);
}

void st_codec_encode_dec(const strataCompressParams_t *p, strataDataType_t dt, const void *src,
                         size_t n, float *residual, void *wire, float *scratch, void *decoded)
{
    float *v = scratch;

    if (n == 0) {
        return;
    }
    st_codec_v_any(dt, src, residual, n, v);
    st_codec_ops(p->codec)->encode(p, dt, v, n, wire, residual, decoded, scratch + n);
}

void st_codec_encode(const strataCompressParams_t *p, strataDataType_t dt, const void *src,
                     size_t n, float *residual, void *wire, float *scratch)
{
    st_codec_encode_dec(p, dt, src, n, residual, wire, scratch, NULL);
}

void st_codec_decode(const strataCompressParams_t *p, strataDataType_t dt, const void *wire,
                     size_t n, void *dst)
{
    if (n > 0) {
        st_codec_ops(p->codec)->decode(p, dt, wire, n, dst);
    }
}

double st_codec_eps(const strataCompressParams_t *p, strataDataType_t dt)
{
    double u = dt == strataFloat16 ? 0x1p-11 : (dt == strataBfloat16 ? 0x1p-8 : 0.0);

    switch (p->codec) {
    case strataCodecNone: return 0.0;
    case strataCodecFp16: return ST_MAX(0x1p-11, u) + u;
    case strataCodecBf16: return 0x1p-8 + u;
    case strataCodecInt8: return 1.0 / 254.0 * (1.0 + 0x1p-10) + u; /* q = rint(v x 127/M) */
    default: return 1.0; /* topk: an element dropped; sign: |v - s sgn v| <= max(|v|, s) */
    }
}

const char *st_codec_parse(const char *spec, strataCompressParams_t *p)
{
    char        name[16];
    const char *colon = strchr(spec, ':'), *comma = strchr(spec, ',');
    const char *end = colon != NULL ? colon : (comma != NULL ? comma : spec + strlen(spec));
    size_t      len = (size_t)(end - spec);
    int         i;

    memset(p, 0, sizeof(*p));
    p->block         = ST_CODEC_BLOCK_DEFAULT;
    p->errorFeedback = 1;
    if (len == 0 || len >= sizeof(name)) {
        return "expected none, fp16, bf16, int8[:block], topk:density or sign[:block]";
    }
    memcpy(name, spec, len);
    name[len] = '\0';
    for (i = 0; i < strataNumCodecs; i++) {
        if (strcmp(name, st_codecs[i]->name) == 0) {
            break;
        }
    }
    if (i == strataNumCodecs) {
        return "unknown codec (none, fp16, bf16, int8[:block], topk:density, sign[:block])";
    }
    p->codec = (strataCodec_t)i;
    if (colon != NULL && (comma == NULL || colon < comma)) {
        char *stop;

        if (p->codec == strataCodecTopk) {
            p->density = strtod(colon + 1, &stop);
        } else if (p->codec == strataCodecInt8 || p->codec == strataCodecSign) {
            if (colon[1] < '0' || colon[1] > '9') {
                return "the block is not a number of elements";
            }
            p->block = strtoull(colon + 1, &stop, 10);
        } else {
            return "this codec takes no parameter";
        }
        if (stop == colon + 1 || (*stop != '\0' && *stop != ',')) {
            return "cannot read the number after ':'";
        }
    } else if (p->codec == strataCodecTopk) {
        return "topk needs a density, e.g. topk:0.01";
    }
    if (comma != NULL) {
        if (strcmp(comma, ",noef") == 0) {
            p->errorFeedback = 0;
        } else if (strcmp(comma, ",ef") != 0) {
            return "expected ',noef' or ',ef' after the codec";
        }
    }
    return st_codec_check(p);
}

int st_codec_format(const strataCompressParams_t *p, char *buf, size_t size)
{
    const char *ef = p->errorFeedback ? "" : ",noef";
    int         n;

    if (p->codec == strataCodecTopk) {
        char num[32];
        int  prec;

        /* the fewest digits that read back to the same double (17 always do) */
        for (prec = 9; prec < 17; prec++) {
            snprintf(num, sizeof(num), "%.*g", prec, p->density);
            if (strtod(num, NULL) == p->density) {
                break;
            }
        }
        n = snprintf(buf, size, "topk:%.*g%s", prec, p->density, ef);
    } else if ((p->codec == strataCodecInt8 || p->codec == strataCodecSign) &&
               p->block != ST_CODEC_BLOCK_DEFAULT) {
        n = snprintf(buf, size, "%s:%zu%s", st_codec_name(p->codec), p->block, ef);
    } else {
        n = snprintf(buf, size, "%s%s", st_codec_name(p->codec), ef);
    }
    return n >= 0 && (size_t)n < size;
}
