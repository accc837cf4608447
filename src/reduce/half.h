/*
 * half.h - fp16 (IEEE binary16) and bf16 conversions to and from fp32, round to nearest even,
 * with NaN, Inf and subnormals exact. Header-only (static inline) so that the kernels and tools
 * such as collbench share one definition.
 *
 * The work is integer manipulation of bit patterns (no _Float16, which not every compiler and
 * target has), plus one fp32 operation per fp16 conversion where it saves most of the cost of
 * handling subnormals: an exact subtraction when widening, and the rounding add when narrowing
 * (see each function). No function depends on FTZ/DAZ, so an application built with -ffast-math
 * gets the same bits. Each function is branch-free (every case computed, then selected) so that
 * GCC vectorises the loops of the reduction kernels that call them, at plain -O3 on x86-64 too.
 * A NaN converts to a quiet NaN of the same sign with the top of its payload kept, as F16C and
 * IEEE convertFormat do (on the host: a GPU's fp32 subtraction returns its canonical NaN, so there
 * st_half_to_float of a NaN is a NaN without its payload; the reduction kernels canonicalise every
 * NaN they produce, elem.h, so they do not depend on it).
 *
 * Every function is also a CUDA device function (ST_HD): the GPU reduction kernels (reduce_cuda.cu)
 * convert with this same code, so the CPU tests check the GPU's arithmetic.
 */
#ifndef ST_HALF_H
#define ST_HALF_H

#include <stdint.h>
#include <string.h>

/* A function of the element code, compiled for the host and, by nvcc, for the GPU too. */
#ifndef ST_HD
#if defined(__CUDACC__)
#define ST_HD __host__ __device__
#else
#define ST_HD
#endif
#endif

/* Bit casts: through memcpy on the host (defined behaviour, and free once compiled), through
 * CUDA's reinterpreting intrinsics in device code. */
ST_HD static inline uint32_t st_f32_bits(float f)
{
#if defined(__CUDA_ARCH__)
    return __float_as_uint(f);
#else
    uint32_t u;

    memcpy(&u, &f, sizeof(u));
    return u;
#endif
}

ST_HD static inline float st_f32_from_bits(uint32_t u)
{
#if defined(__CUDA_ARCH__)
    return __uint_as_float(u);
#else
    float f;

    memcpy(&f, &u, sizeof(f));
    return f;
#endif
}

ST_HD static inline float st_half_to_float(uint16_t h)
{
    uint32_t x     = h;
    uint32_t sign  = (x & 0x8000u) << 16;
    uint32_t o     = (x & 0x7fffu) << 13; /* exponent and fraction, in their fp32 places */
    int32_t  e     = (int32_t)(o & 0x0f800000u);
    uint32_t inf   = 0u - (uint32_t)(e == 0x0f800000); /* all ones where Inf or NaN */
    uint32_t sub   = 0u - (uint32_t)(e == 0);          /* all ones where zero or subnormal */
    uint32_t magic = sub & (113u << 23);               /* 2^-14 on subnormal lanes, else +0 */
    float    r;

    /* Rebias the exponent from 15 to 127; Inf and NaN go to exponent 255. */
    o += (112u << 23) + (inf & (112u << 23));
    /* A subnormal m * 2^-24 is read as the normal 2^-14 * (1 + m / 2^10), from which 2^-14 is
     * subtracted. That subtraction is exact (Sterbenz), so it depends neither on the rounding
     * mode nor on FTZ/DAZ (no operand or result is denormal); on the other lanes it subtracts +0,
     * an exact no-op that also quiets a signalling NaN. The integer alternative (normalising by a
     * ladder of shifts) costs three to four times as many vector instructions. */
    o += sub & (1u << 23);
    r = st_f32_from_bits(o) - st_f32_from_bits(magic);
    /* Clear the sign of the difference (x - x is -0 when rounding downward), then apply h's. */
    return st_f32_from_bits((st_f32_bits(r) & 0x7fffffffu) | sign);
}

/* canon (a constant once inlined): 0 keeps a NaN's sign and payload (st_float_to_half), 1 makes
 * every NaN the canonical quiet NaN 0x7e00 (st_float_to_half_canon, the reduction ops). */
ST_HD static inline uint16_t st_float_to_half_nan(float f, int canon)
{
    uint32_t x    = st_f32_bits(f);
    uint32_t sign = (x >> 16) & 0x8000u;
    uint32_t ax   = x & 0x7fffffffu;
    int32_t  sa   = (int32_t)ax;
    /* Normal (|f| >= 2^-14): rebias, then round the 13 dropped bits to nearest even by adding
     * half an ulp minus one plus the kept lsb. A carry out of the fraction correctly bumps the
     * exponent; 65520 and above are handled below. */
    uint32_t m    = ax - ((127u - 15u) << 23);
    uint32_t norm = (m + 0x0fffu + ((m >> 13) & 1u)) >> 13;
    /* Subnormal (|f| < 2^-14): adding 0.5f aligns |f| to 0.5's ulp, 2^-24, which is the fp16
     * subnormal step, and rounds it there to nearest even in the default rounding mode (which
     * every fp32 operation of the reduction kernels assumes too); the low bits are then the
     * result. FTZ/DAZ cannot change it: a denormal fp32 input rounds to 0 either way. The integer
     * alternative (a variable right shift with sticky bits) does not vectorise on plain x86-64,
     * or as a ladder of constant shifts costs twice as many instructions. */
    uint32_t sub = st_f32_bits(st_f32_from_bits(ax) + 0.5f) - 0x3f000000u;
    /* NaN: keep the top 9 payload bits, force the quiet bit so the payload cannot become Inf. */
    uint32_t nan    = canon ? 0x7e00u : 0x7e00u | ((ax >> 13) & 0x1ffu);
    uint32_t is_sub = 0u - (uint32_t)(sa < 0x38800000);
    /* 0x477ff000 = 65520, halfway between 65504 (odd) and 65536: ties to even overflow to Inf. */
    uint32_t is_big = 0u - (uint32_t)(sa >= 0x477ff000);
    uint32_t is_nan = 0u - (uint32_t)(sa > 0x7f800000);
    uint32_t r;

    /* Selections by mask (r ^= mask & (r ^ other)): GCC keeps them branch-free, where a ?: would
     * let it sink the floating-point add into a branch and then refuse to vectorise. */
    r = norm ^ (is_sub & (norm ^ sub));
    r ^= is_big & (r ^ 0x7c00u);
    r ^= is_nan & (r ^ nan);
    return (uint16_t)((sign & ~(canon ? is_nan : 0u)) | r);
}

ST_HD static inline uint16_t st_float_to_half(float f)
{
    return st_float_to_half_nan(f, 0);
}

ST_HD static inline uint16_t st_float_to_half_canon(float f)
{
    return st_float_to_half_nan(f, 1);
}

ST_HD static inline float st_bf16_to_float(uint16_t b)
{
    uint32_t x = (uint32_t)b << 16;

    /* bf16 is the top half of fp32: exact, but a signalling NaN gets the quiet bit. */
    return st_f32_from_bits(x | ((x & 0x7fffffffu) > 0x7f800000u ? 0x00400000u : 0));
}

ST_HD static inline uint16_t st_float_to_bf16(float f)
{
    uint32_t x = st_f32_bits(f);
    /* Round the low 16 bits to nearest even; a carry into the exponent is the right answer,
     * including the overflow of the largest values to Inf. */
    uint32_t rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;
    /* A NaN must not round (its payload could carry into Inf, or vanish): truncate and quiet. */
    uint32_t nan = (x >> 16) | 0x0040u;

    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? nan : rne);
}

/* st_float_to_bf16, but every NaN becomes the canonical quiet NaN 0x7fc0 (the reduction ops). */
ST_HD static inline uint16_t st_float_to_bf16_canon(float f)
{
    uint32_t x   = st_f32_bits(f);
    uint32_t rne = (x + 0x7fffu + ((x >> 16) & 1u)) >> 16;

    return (uint16_t)((x & 0x7fffffffu) > 0x7f800000u ? 0x7fc0u : rne);
}

#endif
