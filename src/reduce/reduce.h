/*
 * reduce.h - host reduction kernels for every datatype x op, used by all algorithms.
 *
 * An algorithm sees a reduction as three steps on chunks of elements:
 *   pre   : dst = prescale(src)           a rank's own contribution before it first travels
 *   apply : dst = prescale(local) (+) in  combine a rank's own data with a received partial result
 *   post  : dst = postop(dst)             once, on the fully reduced data (integer avg: divide)
 * For sum/prod/max/min prescale is the identity and post does nothing. Floating avg is a premul-sum
 * by 1/nranks (as NCCL does), so an fp16 mean never overflows where it is representable; integer
 * avg is a wrapped sum, then a division truncating toward zero.
 *
 * Semantics (as strata.h states them): fp16 and bf16 compute in fp32 and round to nearest even
 * after every operation (product, partial sum); integer sum and prod wrap (two's complement, no UB:
 * computed in the unsigned type); unsigned types compare unsigned; max and min propagate NaN
 * whichever side holds it; sum and prod propagate NaN and Inf per IEEE; every floating operation
 * (sum, prod, max, min, premul scale) whose result is a NaN gives the type's canonical quiet NaN
 * (fp32 0x7fc00000, fp64 0x7ff8000000000000, fp16 0x7e00, bf16 0x7fc0), whatever the operands'
 * NaNs, so that the host (x86 keeps a payload) and the GPU (0x7fffffff) agree to the bit. The
 * element operations are elem.h's, shared with the GPU kernels (kernel.h).
 *
 * All counts are in elements. dst may alias any input exactly (same pointer); partial overlap is
 * not allowed. No alignment is required: every kernel works on any byte address.
 */
#ifndef ST_REDUCE_H
#define ST_REDUCE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "strata.h"

typedef enum {
    ST_RED_SUM  = 0,
    ST_RED_PROD = 1,
    ST_RED_MAX  = 2,
    ST_RED_MIN  = 3
} st_red_kind_t;

/* A resolved reduction: what strataRedOp_t + datatype + nranks mean for the kernels. */
typedef struct st_redop {
    st_red_kind_t    kind;
    strataDataType_t dtype;
    int              premul;     /* 1: multiply own contribution by scalar first (kind == SUM) */
    union {                      /* the scalar, in dtype (fp16/bf16 hold their 16-bit pattern) */
        int8_t   i8; uint8_t u8; int32_t i32; uint32_t u32; int64_t i64; uint64_t u64;
        uint16_t h16; float f32; double f64;
    } scalar;
    uint64_t         postdiv;    /* >1: divide the final result by this (integer avg) */
} st_redop_t;

/* Bytes of one element of dtype; 0 for an unknown dtype. */
size_t st_dtype_size(strataDataType_t dtype);
/* "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16";
 * "unknown" otherwise (nccl-tests' spelling). */
const char *st_dtype_name(strataDataType_t dtype);
/* 1 for the floating types (half, float, double, bfloat16). */
int st_dtype_is_float(strataDataType_t dtype);

/* Resolves a builtin op (sum, prod, max, min, avg) for nranks ranks into *redop.
 * ST_ERR_INVALID for an unknown dtype or op. */
st_status_t st_redop_init(st_redop_t *redop, strataRedOp_t op, strataDataType_t dtype, int nranks);
/* A premul-sum with the scalar at `scalar` (one element of dtype). ST_ERR_INVALID for a bad dtype. */
st_status_t st_redop_init_premul(st_redop_t *redop, strataDataType_t dtype, const void *scalar);

/* dst[i] = prescale(src[i]) for i < count (a copy when the op has no premul). */
void st_reduce_pre(const st_redop_t *redop, void *dst, const void *src, size_t count);
/* dst[i] = prescale(local[i]) OP in[i]. */
void st_reduce_apply(const st_redop_t *redop, void *dst, const void *local, const void *in,
                     size_t count);
/* dst[i] = a[i] OP b[i] (no prescale: both are already partial results). */
void st_reduce_combine(const st_redop_t *redop, void *dst, const void *a, const void *b,
                       size_t count);
/* dst[i] = ((srcs[0][i] OP srcs[1][i]) OP srcs[2][i]) OP ... over n >= 1 inputs of count elements
 * each (no prescale), in that order: the same bits as st_reduce_combine applied in turn, in one
 * pass over dst for up to 4 inputs and one more per 3 after (fused 3- and 4-input kernels). dst
 * may be exactly one of the first four inputs (each element is read before it is written), never
 * a later one: from the fifth on, inputs are read after dst was written. n 1: a copy. Nothing for
 * count 0, n < 1 or an invalid redop. */
void st_reduce_combine_n(const st_redop_t *redop, void *dst, const void *const *srcs, int n,
                         size_t count);
/* dst[i] = postop(dst[i]): integer avg divides by postdiv truncating toward zero; else nothing. */
void st_reduce_post(const st_redop_t *redop, void *dst, size_t count);

/* Copies bytes from src to dst (not overlapping) with non-temporal stores where the CPU has them
 * (x86-64: 32-byte streaming stores with AVX, 16-byte without, then a store fence, so that a
 * release store after it publishes the copy): the destination's lines are not read for ownership
 * first and not kept in the cache (from dst's first 64-byte line boundary on), which saves a
 * third of a copy's memory traffic when the data will not be read again soon (the copy-out of a
 * large all-reduce, the push's stores: bench/README.md). Plain memcpy elsewhere and below
 * ST_COPY_STREAM_MIN bytes (where the partial lines at both ends would be most of it). */
#define ST_COPY_STREAM_MIN 1024
void st_copy_stream(void *dst, const void *src, size_t bytes);
/* st_copy_stream without its store fence, for many pieces in a row; st_stream_fence once after
 * them, before the release store that publishes them. */
void st_copy_stream_unfenced(void *dst, const void *src, size_t bytes);
void st_stream_fence(void);
/* 1 when st_reduce_post does something for this op. */
static inline int st_redop_has_post(const st_redop_t *redop)
{
    return redop->postdiv > 1;
}

#endif
