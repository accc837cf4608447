/*
 * elem.h - the element operations of the reduction kernels: every datatype x sum/prod/max/min,
 * the premul scale and integer avg's division, as small inline functions compiled for the host
 * (host.c's vectorised loops, kernel.c's simulated device) and, by nvcc, for the GPU
 * (reduce_cuda.cu). One definition for both is what makes a GPU result bitwise equal to the host's
 * and lets the CPU tests check the GPU's arithmetic.
 *
 * Semantics (reduce.h; strata.h states them for users):
 *  - fp16 and bf16 widen to fp32 (exact), do one fp32 operation and round back to nearest even
 *    after every operation, the premul product before its sum included (half.h's conversions);
 *  - integer sum and prod compute in the unsigned type, so they wrap without undefined behaviour;
 *  - max and min compare keys derived from the bit patterns, so -0 < +0 and the result does not
 *    depend on the order of the arguments;
 *  - every floating operation whose result is a NaN returns its type's canonical quiet NaN
 *    (fp32 0x7fc00000, fp64 0x7ff8000000000000, fp16 0x7e00, bf16 0x7fc0), whatever the NaN
 *    operands' payloads and signs. Hardware disagrees here: x86 keeps an operand's payload (the
 *    first one's, so the order of operands shows) and makes 0xffc00000 of Inf - Inf, a GPU returns
 *    0x7fffffff; canonicalising gives every rank, host or GPU, the same bits.
 * The functions are branch-free (selections), so that GCC vectorises the host loops around them
 * (host.c); no product is contracted with a sum into an FMA (the pragma below, nvcc's -fmad=false):
 * each is rounded first.
 *
 * Names: st_op_<op>_<n> where <n> is the datatype's short name (i8 u8 i32 u32 i64 u64 f16 f32 f64
 * bf16). fp16 and bf16 travel as their 16-bit patterns (uint16_t); max and min of the floating
 * types take the bit patterns (uint16_t, uint32_t, uint64_t), sum and prod the values.
 */
#ifndef ST_REDUCE_ELEM_H
#define ST_REDUCE_ELEM_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

/* A premul sum must round the product before adding it. GCC contracts a * s + b into one fused
 * multiply-add by default wherever the target has FMA (all of aarch64, x86 with -march=haswell and
 * later), which skips that rounding: results would differ between hosts of one job. The pragma
 * covers every function below it in the including file: these, half.h's and the kernels built on
 * them. nvcc is given -fmad=false for the device code. */
#if !defined(__CUDACC__)
#if defined(__clang__)
#pragma STDC FP_CONTRACT OFF
#elif defined(__GNUC__)
#pragma GCC optimize("fp-contract=off")
#endif
#endif

#include "reduce/half.h"

/* ---------------------------------------------------------------------------------------- */
/* Element access                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* st_ld_<a>(p, i) / st_st_<a>(p, i, v): element i of the array at p, of the type named by <a>
 * (i8 u8 u16 i32 u32 i64 u64 f32 f64). On the host at any byte address: memcpy of one element is
 * defined for any alignment and aliasing and compiles to a plain (unaligned) load or store. On a
 * GPU p must be aligned to the element (a typed access); st_ldu_<a> / st_stu_<a> take any address
 * there too, a byte at a time (on the host they are the same memcpy). */
#if defined(__CUDA_ARCH__)
#define ST_ELEM_LD(_T, _p, _i, _v) ((_v) = ((const _T *)(_p))[_i])
#define ST_ELEM_ST(_T, _p, _i, _v) (((_T *)(_p))[_i] = (_v))
#else
#define ST_ELEM_LD(_T, _p, _i, _v) memcpy(&(_v), (const char *)(_p) + (_i) * sizeof(_T), sizeof(_T))
#define ST_ELEM_ST(_T, _p, _i, _v) memcpy((char *)(_p) + (_i) * sizeof(_T), &(_v), sizeof(_T))
#endif

#define ST_ELEM_ACCESS(_a, _T)                                                                     \
    ST_HD static inline _T st_ld_##_a(const void *p, size_t i)                                     \
    {                                                                                              \
        _T v;                                                                                      \
        ST_ELEM_LD(_T, p, i, v);                                                                   \
        return v;                                                                                  \
    }                                                                                              \
    ST_HD static inline void st_st_##_a(void *p, size_t i, _T v)                                   \
    {                                                                                              \
        ST_ELEM_ST(_T, p, i, v);                                                                   \
    }                                                                                              \
    ST_HD static inline _T st_ldu_##_a(const void *p, size_t i)                                    \
    {                                                                                              \
        const unsigned char *c = (const unsigned char *)p + i * sizeof(_T);                        \
        _T                   v;                                                                    \
        st_bytes_copy(&v, c, sizeof(_T));                                                          \
        return v;                                                                                  \
    }                                                                                              \
    ST_HD static inline void st_stu_##_a(void *p, size_t i, _T v)                                  \
    {                                                                                              \
        st_bytes_copy((unsigned char *)p + i * sizeof(_T), &v, sizeof(_T));                        \
    }

/* n bytes from src to dst at any addresses: memcpy on the host, a loop of byte accesses on a GPU
 * (where an access must be aligned to its size). */
ST_HD static inline void st_bytes_copy(void *dst, const void *src, size_t n)
{
#if defined(__CUDA_ARCH__)
    for (size_t k = 0; k < n; k++) {
        ((unsigned char *)dst)[k] = ((const unsigned char *)src)[k];
    }
#else
    memcpy(dst, src, n);
#endif
}

ST_ELEM_ACCESS(i8, int8_t)
ST_ELEM_ACCESS(u8, uint8_t)
ST_ELEM_ACCESS(u16, uint16_t) /* fp16 and bf16 bit patterns */
ST_ELEM_ACCESS(i32, int32_t)
ST_ELEM_ACCESS(u32, uint32_t)
ST_ELEM_ACCESS(i64, int64_t)
ST_ELEM_ACCESS(u64, uint64_t)
ST_ELEM_ACCESS(f32, float)
ST_ELEM_ACCESS(f64, double)

/* ---------------------------------------------------------------------------------------- */
/* Integers                                                                                 */
/* ---------------------------------------------------------------------------------------- */

/* Sum and prod in the unsigned type _U (wraps; the conversion back to a signed _T is modulo 2^N
 * in GCC, clang and nvcc). uint8 operands promote to int, where 255 * 255 still fits. */
#define ST_INT_OPS(_n, _T, _U)                                                                     \
    ST_HD static inline _T st_op_sum_##_n(_T x, _T y)                                              \
    {                                                                                              \
        return (_T)((_U)x + (_U)y);                                                                \
    }                                                                                              \
    ST_HD static inline _T st_op_prod_##_n(_T x, _T y)                                             \
    {                                                                                              \
        return (_T)((_U)x * (_U)y);                                                                \
    }                                                                                              \
    ST_HD static inline _T st_op_max_##_n(_T x, _T y)                                              \
    {                                                                                              \
        return x > y ? x : y;                                                                      \
    }                                                                                              \
    ST_HD static inline _T st_op_min_##_n(_T x, _T y)                                              \
    {                                                                                              \
        return x < y ? x : y;                                                                      \
    }

ST_INT_OPS(i8, int8_t, uint8_t)
ST_INT_OPS(u8, uint8_t, uint8_t)
ST_INT_OPS(i32, int32_t, uint32_t)
ST_INT_OPS(u32, uint32_t, uint32_t)
ST_INT_OPS(i64, int64_t, uint64_t)
ST_INT_OPS(u64, uint64_t, uint64_t)

/* Integer avg's division of the wrapped sum, truncating toward zero (C division), in the type
 * st_divisor_<n>_t: the divisor is nranks (an int), so the narrow types divide in 32 bits, much
 * cheaper than 64 on many cores and on a GPU. */
#define ST_DIV_OPS(_n, _T, _W)                                                                     \
    typedef _W             st_divisor_##_n##_t;                                                    \
    ST_HD static inline _W st_divisor_##_n(uint64_t d)                                             \
    {                                                                                              \
        return (_W)d;                                                                              \
    }                                                                                              \
    ST_HD static inline _T st_op_div_##_n(_T x, _W d)                                              \
    {                                                                                              \
        return (_T)((_W)x / d);                                                                    \
    }

ST_DIV_OPS(i8, int8_t, int32_t)
ST_DIV_OPS(u8, uint8_t, uint32_t)
ST_DIV_OPS(i32, int32_t, int32_t)
ST_DIV_OPS(u32, uint32_t, uint32_t)
ST_DIV_OPS(i64, int64_t, int64_t)
ST_DIV_OPS(u64, uint64_t, uint64_t)

/* ---------------------------------------------------------------------------------------- */
/* Floating point                                                                           */
/* ---------------------------------------------------------------------------------------- */

ST_HD static inline uint64_t st_f64_bits(double d)
{
#if defined(__CUDA_ARCH__)
    return (uint64_t)__double_as_longlong(d);
#else
    uint64_t u;

    memcpy(&u, &d, sizeof(u));
    return u;
#endif
}

ST_HD static inline double st_f64_from_bits(uint64_t u)
{
#if defined(__CUDA_ARCH__)
    return __longlong_as_double((long long)u);
#else
    double d;

    memcpy(&d, &u, sizeof(d));
    return d;
#endif
}

/* r, or the canonical quiet NaN when r is a NaN: the last step of every fp32 and fp64 sum, product
 * and premul scale (fp16 and bf16 do it in their narrowing, half.h's _canon). A NaN is the one
 * value unequal to itself: the self-comparison and the select compile to a floating compare and a
 * blend (or and/andnot/or) in every vectorised loop of host.c, baseline x86-64's included, which
 * has no 64-bit integer compare; and to a setp and a selp on a GPU. */
#if defined(__FINITE_MATH_ONLY__) && __FINITE_MATH_ONLY__
#error "the reduction kernels test for NaN: build without -ffinite-math-only (-ffast-math)"
#endif
ST_HD static inline float st_canon_f32(float r)
{
    return r == r ? r : st_f32_from_bits(0x7fc00000u);
}

ST_HD static inline double st_canon_f64(double r)
{
    return r == r ? r : st_f64_from_bits(0x7ff8000000000000ull);
}

ST_HD static inline float st_op_sum_f32(float x, float y)
{
    return st_canon_f32(x + y);
}

ST_HD static inline float st_op_prod_f32(float x, float y)
{
    return st_canon_f32(x * y);
}

ST_HD static inline double st_op_sum_f64(double x, double y)
{
    return st_canon_f64(x + y);
}

ST_HD static inline double st_op_prod_f64(double x, double y)
{
    return st_canon_f64(x * y);
}

/* fp16 and bf16: widen to fp32 (exact), one fp32 operation, round back to nearest even; the
 * narrowing makes a NaN the canonical one (half.h's _canon conversions). */
#define ST_SHORT_FLOAT_OPS(_n, _to_float, _from_float)                                             \
    ST_HD static inline uint16_t st_op_sum_##_n(uint16_t x, uint16_t y)                            \
    {                                                                                              \
        return _from_float(_to_float(x) + _to_float(y));                                           \
    }                                                                                              \
    ST_HD static inline uint16_t st_op_prod_##_n(uint16_t x, uint16_t y)                           \
    {                                                                                              \
        return _from_float(_to_float(x) * _to_float(y));                                           \
    }

/* bf16 to fp32 for an operand: the bits moved into place, without st_bf16_to_float's quieting of a
 * signalling NaN, which the operation does anyway and whose result is canonicalised. */
ST_HD static inline float st_bf16_operand(uint16_t b)
{
    return st_f32_from_bits((uint32_t)b << 16);
}

ST_SHORT_FLOAT_OPS(f16, st_half_to_float, st_float_to_half_canon)
ST_SHORT_FLOAT_OPS(bf16, st_bf16_operand, st_float_to_bf16_canon)

/* Floating max and min work on bit patterns (_U unsigned, _S signed, both _bits wide): flipping
 * the magnitude bits of negative values turns sign-magnitude into two's complement order, with
 * -0 just below +0 (IEEE 754-2019 maximum/minimum). Distinct patterns get distinct keys, so the
 * result is the same whatever the argument order; a NaN on either side gives the canonical quiet
 * NaN _qnan. Integer compares also vectorise on every target, fp16 and bf16 included, without
 * widening to fp32. */
#define ST_FLOAT_MAXMIN_OPS(_n, _U, _S, _bits, _inf, _qnan)                                        \
    ST_HD static inline _S st_key_##_n(_U b)                                                       \
    {                                                                                              \
        _U flip = (_U)((_U)(0u - (_U)(b >> (_bits - 1))) >> 1);                                    \
        return (_S)(b ^ flip);                                                                     \
    }                                                                                              \
    ST_HD static inline int st_isnan_##_n(_U b)                                                    \
    {                                                                                              \
        return (_U)(b & (_U) ~((_U)1 << (_bits - 1))) > (_U)(_inf);                                \
    }                                                                                              \
    ST_HD static inline _U st_op_max_##_n(_U x, _U y)                                              \
    {                                                                                              \
        _U r = st_key_##_n(x) > st_key_##_n(y) ? x : y;                                            \
        return st_isnan_##_n(x) | st_isnan_##_n(y) ? (_U)(_qnan) : r;                              \
    }                                                                                              \
    ST_HD static inline _U st_op_min_##_n(_U x, _U y)                                              \
    {                                                                                              \
        _U r = st_key_##_n(x) < st_key_##_n(y) ? x : y;                                            \
        return st_isnan_##_n(x) | st_isnan_##_n(y) ? (_U)(_qnan) : r;                              \
    }

ST_FLOAT_MAXMIN_OPS(f16, uint16_t, int16_t, 16, 0x7c00u, 0x7e00u)
ST_FLOAT_MAXMIN_OPS(bf16, uint16_t, int16_t, 16, 0x7f80u, 0x7fc0u)
ST_FLOAT_MAXMIN_OPS(f32, uint32_t, int32_t, 32, 0x7f800000u, 0x7fc00000u)
ST_FLOAT_MAXMIN_OPS(f64, uint64_t, int64_t, 64, 0x7ff0000000000000ull, 0x7ff8000000000000ull)

/* ---------------------------------------------------------------------------------------- */
/* Premul scale                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* The premul product x * s, with s already in the compute type st_scalar_<n>_t (converted once,
 * by st_scalar_<n>, outside the loops): the element type itself, except fp32 for fp16 and bf16;
 * and the premul sum st_op_psum_<n>(x, s, y) = st_op_sum_<n>(st_op_scale_<n>(x, s), y). */
#define ST_SCALE_OPS(_n, _T)                                                                       \
    typedef _T             st_scalar_##_n##_t;                                                     \
    ST_HD static inline _T st_scalar_##_n(_T s)                                                    \
    {                                                                                              \
        return s;                                                                                  \
    }                                                                                              \
    ST_HD static inline _T st_op_scale_##_n(_T x, _T s)                                            \
    {                                                                                              \
        return st_op_prod_##_n(x, s);                                                              \
    }                                                                                              \
    ST_HD static inline _T st_op_psum_##_n(_T x, _T s, _T y)                                       \
    {                                                                                              \
        return st_op_sum_##_n(st_op_prod_##_n(x, s), y);                                           \
    }

ST_SCALE_OPS(i8, int8_t)
ST_SCALE_OPS(u8, uint8_t)
ST_SCALE_OPS(i32, int32_t)
ST_SCALE_OPS(u32, uint32_t)
ST_SCALE_OPS(i64, int64_t)
ST_SCALE_OPS(u64, uint64_t)

/* The premul sum (x * s) + y of fp32 and fp64, each step rounded. Only the sum canonicalises: a
 * NaN product makes a NaN sum, which becomes the canonical NaN whatever the product's bits were,
 * so the result is st_op_sum(st_op_scale(x, s), y) to the bit at half the cost. */
#define ST_FLOAT_SCALE_OPS(_n, _T)                                                                 \
    typedef _T             st_scalar_##_n##_t;                                                     \
    ST_HD static inline _T st_scalar_##_n(_T s)                                                    \
    {                                                                                              \
        return s;                                                                                  \
    }                                                                                              \
    ST_HD static inline _T st_op_scale_##_n(_T x, _T s)                                            \
    {                                                                                              \
        return st_op_prod_##_n(x, s);                                                              \
    }                                                                                              \
    ST_HD static inline _T st_op_psum_##_n(_T x, _T s, _T y)                                       \
    {                                                                                              \
        return st_op_sum_##_n(x * s, y);                                                           \
    }

ST_FLOAT_SCALE_OPS(f32, float)
ST_FLOAT_SCALE_OPS(f64, double)

#define ST_SHORT_FLOAT_SCALE_OPS(_n, _to_float, _from_float)                                       \
    typedef float             st_scalar_##_n##_t;                                                  \
    ST_HD static inline float st_scalar_##_n(uint16_t s)                                           \
    {                                                                                              \
        return _to_float(s);                                                                       \
    }                                                                                              \
    ST_HD static inline uint16_t st_op_scale_##_n(uint16_t x, float s)                             \
    {                                                                                              \
        return _from_float(_to_float(x) * s);                                                      \
    }                                                                                              \
    ST_HD static inline uint16_t st_op_psum_##_n(uint16_t x, float s, uint16_t y)                  \
    {                                                                                              \
        return st_op_sum_##_n(st_op_scale_##_n(x, s), y);                                          \
    }

ST_SHORT_FLOAT_SCALE_OPS(f16, st_half_to_float, st_float_to_half_canon)
ST_SHORT_FLOAT_SCALE_OPS(bf16, st_bf16_operand, st_float_to_bf16_canon)

#endif
