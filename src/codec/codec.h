/*
 * codec.h - the codecs of the compressed all-reduce's inter-node step (include/strata.h,
 * strataCodec_t; docs/compression.md): pure arithmetic on one encoded range of n elements, with
 * the optional error-feedback residual, and the compression state a call carries.
 *
 * Every codec works in float32 on v[i] = x[i] + residual[i] (x of the call's datatype: fp32,
 * fp16 or bf16), writes exactly st_codec_wire_bytes() bytes, and decodes into the datatype; the
 * residual becomes v[i] - decode(i) as the receiver sees it (the decoded value rounded to the
 * datatype), so what one call drops the next adds back. Encoding and decoding are deterministic
 * functions of their inputs (round to nearest even, fixed summation order, ties broken by index),
 * which is what keeps every rank's result bitwise identical.
 *
 * One file per codec: cast.c (none, fp16, bf16), int8.c, topk.c, sign.c; codec.c checks
 * parameters, parses and formats specs and dispatches.
 */
#ifndef ST_CODEC_CODEC_H
#define ST_CODEC_CODEC_H

#include <stddef.h>
#include <stdint.h>

#include <strata.h>

#include "reduce/half.h"

/* The codecs' loops are also compiled for x86-64-v3 (AVX2, F16C) and picked at load time, as the
 * reduction kernels are (reduce/host.c): results are the same bits, 8 elements per instruction. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 &&       \
    defined(__ELF__)
#define ST_CODEC_TARGETS __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ST_CODEC_TARGETS
#endif

/* Defaults of strataCompressParse. */
#define ST_CODEC_BLOCK_DEFAULT 256
#define ST_CODEC_BLOCK_MAX     (1u << 24)

/* One codec: its wire size, the float scratch its encoder needs, and the two directions. */
typedef struct st_codec_ops {
    const char *name;
    size_t (*wire_bytes)(const strataCompressParams_t *p, size_t es, size_t n);
    /* floats of scratch for encoding n elements, beyond the n that hold v */
    size_t (*scratch)(const strataCompressParams_t *p, size_t n);
    /* v: n floats (x + residual, computed by st_codec_encode); res: NULL or n floats receiving
     * v - the decoded value; dec: NULL or n elements of dt receiving the decoded values (what
     * decode would write); work: scratch() floats */
    void (*encode)(const strataCompressParams_t *p, strataDataType_t dt, const float *v, size_t n,
                   void *wire, float *res, void *dec, float *work);
    void (*decode)(const strataCompressParams_t *p, strataDataType_t dt, const void *wire,
                   size_t n, void *dst);
} st_codec_ops_t;

extern const st_codec_ops_t st_codec_none_ops, st_codec_fp16_ops, st_codec_bf16_ops,
    st_codec_int8_ops, st_codec_topk_ops, st_codec_sign_ops;

/* The compression state of a bucket (strataCompressor_t). */
struct strataCompressor {
    strataCompressParams_t params;
    size_t                 count;
    strataDataType_t       dtype;
    float                 *residual; /* [count], or NULL without error feedback */
    void                  *comm;     /* the communicator it is bound to (first use), or NULL */
    int                    refs;     /* calls queued (kept args) or running (hier's op) that use
                                      * it: Destroy and Reset refuse while any */
};
typedef struct strataCompressor st_compressor_t;

/* NULL when params are valid (strataCompressorCreate's rules); else why not, for a log line. */
const char *st_codec_check(const strataCompressParams_t *p);
/* 1 for the datatypes a codec takes (fp32, fp16, bf16). */
int st_codec_dtype_ok(strataDataType_t dt);
const st_codec_ops_t *st_codec_ops(strataCodec_t codec);
const char *st_codec_name(strataCodec_t codec);
/* Bytes on the wire for n elements of dt (valid params and dtype). */
size_t st_codec_wire_bytes(const strataCompressParams_t *p, strataDataType_t dt, size_t n);
/* Floats of scratch st_codec_encode needs for n elements. */
size_t st_codec_scratch(const strataCompressParams_t *p, size_t n);
/* Encodes n elements of dt at src (plus residual[0..n) when residual != NULL, which then
 * becomes what was dropped) into wire (st_codec_wire_bytes bytes). scratch: st_codec_scratch
 * floats. src and wire must not overlap; src may be the decode destination of a later call. */
void st_codec_encode(const strataCompressParams_t *p, strataDataType_t dt, const void *src,
                     size_t n, float *residual, void *wire, float *scratch);
/* st_codec_encode that also writes what st_codec_decode of the encoding would (decoded: n
 * elements of dt; may be src itself), in the same pass. */
void st_codec_encode_dec(const strataCompressParams_t *p, strataDataType_t dt, const void *src,
                         size_t n, float *residual, void *wire, float *scratch, void *decoded);
/* Decodes n elements of dt from wire into dst. */
void st_codec_decode(const strataCompressParams_t *p, strataDataType_t dt, const void *wire,
                     size_t n, void *dst);
/* The per-element error bound of one encoding, relative to the largest magnitude M of what was
 * encoded (the values plus residual): |decode - v| <= eps x M, plus 2^-25 absolute wherever fp16
 * rounds, the fp16 codec or decoding into fp16 with any codec (its subnormal step is 2^-24);
 * docs/compression.md. For int8 and sign M may be taken per block. topk: 1 (a dropped element);
 * sign: 1. */
double st_codec_eps(const strataCompressParams_t *p, strataDataType_t dt);
/* Parses or formats a spec (strataCompressParse, strataCompressFormat): NULL, or why not. */
const char *st_codec_parse(const char *spec, strataCompressParams_t *p);
int st_codec_format(const strataCompressParams_t *p, char *buf, size_t size);

/* Element access in float32. dt is a constant where these are inlined into a loop specialised
 * for one datatype (ST_CODEC_DTYPE_SWITCH), so the switch folds away and the loops vectorise. */
#define ST_CODEC_INLINE static inline __attribute__((always_inline))

ST_CODEC_INLINE float st_codec_load(strataDataType_t dt, const void *src, size_t i)
{
    if (dt == strataFloat16) {
        return st_half_to_float(((const uint16_t *)src)[i]);
    }
    if (dt == strataBfloat16) {
        return st_bf16_to_float(((const uint16_t *)src)[i]);
    }
    return ((const float *)src)[i];
}

/* f rounded to dt, in float32 (what st_codec_store would store). */
ST_CODEC_INLINE float st_codec_round(strataDataType_t dt, float f)
{
    if (dt == strataFloat16) {
        return st_half_to_float(st_float_to_half(f));
    }
    if (dt == strataBfloat16) {
        return st_bf16_to_float(st_float_to_bf16(f));
    }
    return f;
}

/* Stores f rounded to dt (nearest even). */
ST_CODEC_INLINE void st_codec_store(strataDataType_t dt, void *dst, size_t i, float f)
{
    if (dt == strataFloat16) {
        ((uint16_t *)dst)[i] = st_float_to_half(f);
    } else if (dt == strataBfloat16) {
        ((uint16_t *)dst)[i] = st_float_to_bf16(f);
    } else {
        ((float *)dst)[i] = f;
    }
}

/* The residual after an element encoded as v decodes to d: what was dropped, or 0 when it is not
 * finite (an overflow is not carried into the next step). Branch-free (a mask). */
ST_CODEC_INLINE float st_codec_residual(float v, float d)
{
    uint32_t r = st_f32_bits(v - d);
    uint32_t finite = 0u - (uint32_t)((r & 0x7f800000u) != 0x7f800000u);

    return st_f32_from_bits(r & finite);
}

/* Calls fn(args..., dt) with dt a constant: the loops of each codec, once per datatype. */
#define ST_CODEC_DTYPE_SWITCH(_dt, _fn, ...)                                                     \
    do {                                                                                         \
        if ((_dt) == strataFloat16) {                                                            \
            _fn(__VA_ARGS__, strataFloat16);                                                     \
        } else if ((_dt) == strataBfloat16) {                                                    \
            _fn(__VA_ARGS__, strataBfloat16);                                                    \
        } else {                                                                                 \
            _fn(__VA_ARGS__, strataFloat32);                                                     \
        }                                                                                        \
    } while (0)

#endif
