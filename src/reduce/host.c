/*
 * host.c - the host reduction kernels: every datatype x op of reduce.h on host memory, and the
 * resolution of a public strataRedOp_t into the st_redop_t that the algorithms carry around.
 *
 * Each kernel is one plain loop over elements, stamped out per datatype by macros from the inline
 * element operations of elem.h (shared with the GPU kernels of reduce_cuda.cu), so that GCC
 * vectorises every one of them at -O3 (check with -fopt-info-vec): no branches in the loop bodies
 * (selections only), no calls that survive inlining, no alignment assumptions. Elements are read
 * and written through memcpy of one element (elem.h's accessors), which is defined at any byte
 * address and for any aliasing, and compiles to a plain (unaligned) load or store. Because dst may
 * be the same pointer as an input, the compiler versions each loop with a run-time overlap check;
 * an exact alias passes it (the distance is 0), so aliased calls stay vectorised.
 *
 * The exactness rules (reduce.h; strata.h states them for users) live in the element operations
 * (elem.h): fp16 and bf16 in fp32 rounded after every operation, wrapping integers, max and min
 * by bit-pattern keys, the canonical quiet NaN out of every floating operation.
 */
#include "config.h"
#include "reduce/reduce.h"
#include "reduce/elem.h"

#include <string.h>
#if defined(__x86_64__) && defined(__SSE2__)
#include <immintrin.h>
#endif

/* ---------------------------------------------------------------------------------------- */
/* Datatypes                                                                                */
/* ---------------------------------------------------------------------------------------- */

size_t st_dtype_size(strataDataType_t dtype)
{
    switch (dtype) {
    case strataInt8:
    case strataUint8: return 1;
    case strataFloat16:
    case strataBfloat16: return 2;
    case strataInt32:
    case strataUint32:
    case strataFloat32: return 4;
    case strataInt64:
    case strataUint64:
    case strataFloat64: return 8;
    case strataNumTypes: break;
    }
    return 0;
}

const char *st_dtype_name(strataDataType_t dtype)
{
    switch (dtype) {
    case strataInt8: return "int8";
    case strataUint8: return "uint8";
    case strataInt32: return "int32";
    case strataUint32: return "uint32";
    case strataInt64: return "int64";
    case strataUint64: return "uint64";
    case strataFloat16: return "half";
    case strataFloat32: return "float";
    case strataFloat64: return "double";
    case strataBfloat16: return "bfloat16";
    case strataNumTypes: break;
    }
    return "unknown";
}

int st_dtype_is_float(strataDataType_t dtype)
{
    return dtype == strataFloat16 || dtype == strataFloat32 || dtype == strataFloat64 ||
           dtype == strataBfloat16;
}

/* ---------------------------------------------------------------------------------------- */
/* Kernels                                                                                  */
/* ---------------------------------------------------------------------------------------- */

/* Each kernel is also compiled for x86-64-v3 (AVX2, F16C) and picked at load time by an ifunc
 * (GCC's target_clones), so a generic x86-64 build still runs 4-8 elements per instruction on the
 * machines that can: fp16 sum about 1.0 -> 1.9 GB/s on one core here (bench/reduce_kernels.sh).
 * fp-contract stays off in the clones (elem.h's pragma), so FMA cannot change a result. */
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && __GNUC__ >= 11 &&       \
    defined(__ELF__)
#define ST_KERNEL_TARGETS __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define ST_KERNEL_TARGETS
#endif

typedef void (*st_reduce_binary_fn_t)(void *dst, const void *a, const void *b, size_t count);
typedef void (*st_reduce_scale_fn_t)(void *dst, const void *src, size_t count, const void *scalar);
typedef void (*st_reduce_psum_fn_t)(void *dst, const void *local, const void *in, size_t count,
                                    const void *scalar);
typedef void (*st_reduce_div_fn_t)(void *dst, size_t count, uint64_t div);

/* dst[i] = a[i] OP b[i], elements accessed as _acc. */
#define ST_KERNEL_BINARY(_op, _n, _acc)                                                            \
    ST_KERNEL_TARGETS static void st_reduce_##_op##_##_n(void *dst, const void *a, const void *b,  \
                                                         size_t count)                             \
    {                                                                                              \
        size_t i;                                                                                  \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_acc(dst, i, st_op_##_op##_##_n(st_ld_##_acc(a, i), st_ld_##_acc(b, i)));      \
        }                                                                                          \
    }

/* The same folded over three and four inputs in one pass: ((a OP b) OP c) OP d, each step as the
 * binary kernel does it (so the same bits as the binary kernel applied in turn), for a
 * reduction over several local ranks' pieces that reads and writes dst once instead of n - 1
 * times (st_reduce_combine_n). */
#define ST_KERNEL_FOLD(_op, _n, _acc)                                                              \
    ST_KERNEL_TARGETS static void st_reduce3_##_op##_##_n(void *dst, const void *a, const void *b, \
                                                          const void *c, size_t count)             \
    {                                                                                              \
        size_t i;                                                                                  \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_acc(dst, i,                                                                   \
                         st_op_##_op##_##_n(st_op_##_op##_##_n(st_ld_##_acc(a, i),                 \
                                                               st_ld_##_acc(b, i)),                \
                                            st_ld_##_acc(c, i)));                                  \
        }                                                                                          \
    }                                                                                              \
    ST_KERNEL_TARGETS static void st_reduce4_##_op##_##_n(void *dst, const void *a, const void *b, \
                                                          const void *c, const void *d,            \
                                                          size_t count)                            \
    {                                                                                              \
        size_t i;                                                                                  \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_acc(dst, i,                                                                   \
                         st_op_##_op##_##_n(st_op_##_op##_##_n(st_op_##_op##_##_n(                 \
                                                                   st_ld_##_acc(a, i),             \
                                                                   st_ld_##_acc(b, i)),            \
                                                               st_ld_##_acc(c, i)),                \
                                            st_ld_##_acc(d, i)));                                  \
        }                                                                                          \
    }

/* Premul: the scalar is read and converted to the compute type once, outside the loop (GCC
 * does not vectorise the fp16 loops when the conversion of the invariant stays inside).
 * scale: dst[i] = src[i] * s;  psum: dst[i] = (local[i] * s) + in[i], each step rounded. */
#define ST_KERNEL_PREMUL(_n, _acc)                                                                 \
    ST_KERNEL_TARGETS static void st_reduce_scale_##_n(void *dst, const void *src, size_t count,   \
                                                       const void *scalar)                         \
    {                                                                                              \
        st_scalar_##_n##_t s = st_scalar_##_n(st_ld_##_acc(scalar, 0));                            \
        size_t             i;                                                                      \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_acc(dst, i, st_op_scale_##_n(st_ld_##_acc(src, i), s));                       \
        }                                                                                          \
    }                                                                                              \
    ST_KERNEL_TARGETS static void st_reduce_psum_##_n(void *dst, const void *local, const void *in, \
                                                      size_t count, const void *scalar)            \
    {                                                                                              \
        st_scalar_##_n##_t s = st_scalar_##_n(st_ld_##_acc(scalar, 0));                            \
        size_t             i;                                                                      \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_acc(dst, i, st_op_psum_##_n(st_ld_##_acc(local, i), s, st_ld_##_acc(in, i))); \
        }                                                                                          \
    }

/* All kernels of one datatype. _acc accesses elements for sum/prod, _mm_acc for max/min (bit
 * patterns for floating types). */
#define ST_KERNELS(_n, _acc, _mm_acc)                                                              \
    ST_KERNEL_BINARY(sum, _n, _acc)                                                                \
    ST_KERNEL_BINARY(prod, _n, _acc)                                                               \
    ST_KERNEL_BINARY(max, _n, _mm_acc)                                                             \
    ST_KERNEL_BINARY(min, _n, _mm_acc)                                                             \
    ST_KERNEL_FOLD(sum, _n, _acc)                                                                  \
    ST_KERNEL_FOLD(prod, _n, _acc)                                                                 \
    ST_KERNEL_FOLD(max, _n, _mm_acc)                                                               \
    ST_KERNEL_FOLD(min, _n, _mm_acc)                                                               \
    ST_KERNEL_PREMUL(_n, _acc)

ST_KERNELS(i8, i8, i8)
ST_KERNELS(u8, u8, u8)
ST_KERNELS(i32, i32, i32)
ST_KERNELS(u32, u32, u32)
ST_KERNELS(i64, i64, i64)
ST_KERNELS(u64, u64, u64)
ST_KERNELS(f16, u16, u16)
ST_KERNELS(f32, f32, u32)
ST_KERNELS(f64, f64, u64)
ST_KERNELS(bf16, u16, u16)

/* Integer avg: the wrapped sum divided by nranks, truncating toward zero (elem.h). A division by
 * a run-time value does not vectorise; this runs once per element of the final result only. */
#define ST_KERNEL_DIV(_n, _T, _W)                                                                  \
    static void st_reduce_div_##_n(void *dst, size_t count, uint64_t div)                          \
    {                                                                                              \
        st_divisor_##_n##_t d = st_divisor_##_n(div);                                              \
        size_t              i;                                                                     \
                                                                                                   \
        for (i = 0; i < count; i++) {                                                              \
            st_st_##_n(dst, i, st_op_div_##_n(st_ld_##_n(dst, i), d));                             \
        }                                                                                          \
    }

ST_KERNEL_DIV(i8, int8_t, int32_t)
ST_KERNEL_DIV(u8, uint8_t, uint32_t)
ST_KERNEL_DIV(i32, int32_t, int32_t)
ST_KERNEL_DIV(u32, uint32_t, uint32_t)
ST_KERNEL_DIV(i64, int64_t, int64_t)
ST_KERNEL_DIV(u64, uint64_t, uint64_t)

/* Dispatch tables, indexed by strataDataType_t (NCCL's values, 0..9) and st_red_kind_t. */
#define ST_BINARY_ROW(_n)                                                                          \
    {                                                                                              \
        st_reduce_sum_##_n, st_reduce_prod_##_n, st_reduce_max_##_n, st_reduce_min_##_n            \
    }

typedef void (*st_reduce_fold3_fn_t)(void *dst, const void *a, const void *b, const void *c,
                                     size_t count);
typedef void (*st_reduce_fold4_fn_t)(void *dst, const void *a, const void *b, const void *c,
                                     const void *d, size_t count);
#define ST_FOLD3_ROW(_n)                                                                           \
    {                                                                                              \
        st_reduce3_sum_##_n, st_reduce3_prod_##_n, st_reduce3_max_##_n, st_reduce3_min_##_n        \
    }
#define ST_FOLD4_ROW(_n)                                                                           \
    {                                                                                              \
        st_reduce4_sum_##_n, st_reduce4_prod_##_n, st_reduce4_max_##_n, st_reduce4_min_##_n        \
    }

/* Designated by enum value, so the tables cannot drift from NCCL's numbering. */
static const st_reduce_binary_fn_t st_reduce_binary_table[strataNumTypes][4] = {
    [strataInt8] = ST_BINARY_ROW(i8),     [strataUint8] = ST_BINARY_ROW(u8),
    [strataInt32] = ST_BINARY_ROW(i32),   [strataUint32] = ST_BINARY_ROW(u32),
    [strataInt64] = ST_BINARY_ROW(i64),   [strataUint64] = ST_BINARY_ROW(u64),
    [strataFloat16] = ST_BINARY_ROW(f16), [strataFloat32] = ST_BINARY_ROW(f32),
    [strataFloat64] = ST_BINARY_ROW(f64), [strataBfloat16] = ST_BINARY_ROW(bf16),
};

static const st_reduce_fold3_fn_t st_reduce_fold3_table[strataNumTypes][4] = {
    [strataInt8] = ST_FOLD3_ROW(i8),     [strataUint8] = ST_FOLD3_ROW(u8),
    [strataInt32] = ST_FOLD3_ROW(i32),   [strataUint32] = ST_FOLD3_ROW(u32),
    [strataInt64] = ST_FOLD3_ROW(i64),   [strataUint64] = ST_FOLD3_ROW(u64),
    [strataFloat16] = ST_FOLD3_ROW(f16), [strataFloat32] = ST_FOLD3_ROW(f32),
    [strataFloat64] = ST_FOLD3_ROW(f64), [strataBfloat16] = ST_FOLD3_ROW(bf16),
};

static const st_reduce_fold4_fn_t st_reduce_fold4_table[strataNumTypes][4] = {
    [strataInt8] = ST_FOLD4_ROW(i8),     [strataUint8] = ST_FOLD4_ROW(u8),
    [strataInt32] = ST_FOLD4_ROW(i32),   [strataUint32] = ST_FOLD4_ROW(u32),
    [strataInt64] = ST_FOLD4_ROW(i64),   [strataUint64] = ST_FOLD4_ROW(u64),
    [strataFloat16] = ST_FOLD4_ROW(f16), [strataFloat32] = ST_FOLD4_ROW(f32),
    [strataFloat64] = ST_FOLD4_ROW(f64), [strataBfloat16] = ST_FOLD4_ROW(bf16),
};

static const st_reduce_scale_fn_t st_reduce_scale_table[strataNumTypes] = {
    [strataInt8] = st_reduce_scale_i8,     [strataUint8] = st_reduce_scale_u8,
    [strataInt32] = st_reduce_scale_i32,   [strataUint32] = st_reduce_scale_u32,
    [strataInt64] = st_reduce_scale_i64,   [strataUint64] = st_reduce_scale_u64,
    [strataFloat16] = st_reduce_scale_f16, [strataFloat32] = st_reduce_scale_f32,
    [strataFloat64] = st_reduce_scale_f64, [strataBfloat16] = st_reduce_scale_bf16,
};

static const st_reduce_psum_fn_t st_reduce_psum_table[strataNumTypes] = {
    [strataInt8] = st_reduce_psum_i8,     [strataUint8] = st_reduce_psum_u8,
    [strataInt32] = st_reduce_psum_i32,   [strataUint32] = st_reduce_psum_u32,
    [strataInt64] = st_reduce_psum_i64,   [strataUint64] = st_reduce_psum_u64,
    [strataFloat16] = st_reduce_psum_f16, [strataFloat32] = st_reduce_psum_f32,
    [strataFloat64] = st_reduce_psum_f64, [strataBfloat16] = st_reduce_psum_bf16,
};

/* Floating types have no postdiv (their avg is a premul sum): NULL. */
static const st_reduce_div_fn_t st_reduce_div_table[strataNumTypes] = {
    [strataInt8] = st_reduce_div_i8,   [strataUint8] = st_reduce_div_u8,
    [strataInt32] = st_reduce_div_i32, [strataUint32] = st_reduce_div_u32,
    [strataInt64] = st_reduce_div_i64, [strataUint64] = st_reduce_div_u64,
};

/* ---------------------------------------------------------------------------------------- */
/* Resolving an op                                                                          */
/* ---------------------------------------------------------------------------------------- */

static int st_dtype_valid(strataDataType_t dtype)
{
    return (unsigned)dtype < (unsigned)strataNumTypes;
}

static int st_redop_valid(const st_redop_t *redop)
{
    return st_dtype_valid(redop->dtype) && (unsigned)redop->kind <= (unsigned)ST_RED_MIN;
}

/* The bits of 1/n rounded to nearest even in a binary format with mbits fraction bits and
 * exponent bias `bias` (subnormals included), by exact integer division. Going through a double
 * or a float first would round twice; computing it exactly makes the avg scalar the correctly
 * rounded value the documentation promises, identical on every host. */
static uint64_t st_recip_bits(uint64_t n, unsigned mbits, int bias)
{
    unsigned k = 0;
    int      exp;
    unsigned sh;
    uint64_t q, r;

    while (((uint64_t)1 << k) < n) {
        k++; /* 2^(k-1) < n <= 2^k, so 1/n is in [2^-k, 2^(1-k)) */
    }
    exp = bias - (int)k;
    /* Normal: the significand is 2^(mbits + k) / n in [2^mbits, 2^(mbits+1)]. Subnormal: the
     * value in units of the smallest subnormal 2^(1 - bias - mbits). */
    sh = exp >= 1 ? mbits + k : (unsigned)(bias - 1) + mbits;
    q  = ((uint64_t)1 << sh) / n;
    r  = ((uint64_t)1 << sh) % n;
    if (2 * r > n || (2 * r == n && (q & 1))) {
        q++;
    }
    /* A carry out of the fraction lands in the exponent, which is the right encoding. */
    return exp >= 1 ? ((uint64_t)exp << mbits) + q - ((uint64_t)1 << mbits) : q;
}

/* Stores 1/nranks, correctly rounded, in r->scalar for r->dtype (a floating type). */
static void st_redop_avg_scalar(st_redop_t *r, int nranks)
{
    uint64_t n = (uint64_t)nranks;
    uint32_t bits;

    switch (r->dtype) {
    case strataFloat16: r->scalar.h16 = (uint16_t)st_recip_bits(n, 10, 15); break;
    case strataBfloat16: r->scalar.h16 = (uint16_t)st_recip_bits(n, 7, 127); break;
    case strataFloat32:
        bits = (uint32_t)st_recip_bits(n, 23, 127);
        memcpy(&r->scalar.f32, &bits, sizeof(bits));
        break;
    default: r->scalar.f64 = 1.0 / (double)nranks; break; /* IEEE division rounds correctly */
    }
}

st_status_t st_redop_init(st_redop_t *redop, strataRedOp_t op, strataDataType_t dtype, int nranks)
{
    st_redop_t r;

    if (!st_dtype_valid(dtype) || nranks < 1) {
        return ST_ERR_INVALID;
    }
    memset(&r, 0, sizeof(r));
    r.dtype   = dtype;
    r.postdiv = 1;
    switch (op) {
    case strataSum: r.kind = ST_RED_SUM; break;
    case strataProd: r.kind = ST_RED_PROD; break;
    case strataMax: r.kind = ST_RED_MAX; break;
    case strataMin: r.kind = ST_RED_MIN; break;
    case strataAvg:
        r.kind = ST_RED_SUM;
        if (!st_dtype_is_float(dtype)) {
            r.postdiv = (uint64_t)nranks; /* wrapped sum, then truncating division */
            break;
        }
        /* Premul by 1/nranks rounded to the datatype, as NCCL does: each rank's share is scaled
         * before it travels, so an fp16 mean never overflows where the mean itself fits. */
        r.premul = 1;
        st_redop_avg_scalar(&r, nranks);
        break;
    default: return ST_ERR_INVALID; /* premul handles are resolved by the communicator, not here */
    }
    *redop = r;
    return ST_OK;
}

st_status_t st_redop_init_premul(st_redop_t *redop, strataDataType_t dtype, const void *scalar)
{
    st_redop_t r;

    if (!st_dtype_valid(dtype) || scalar == NULL) {
        return ST_ERR_INVALID;
    }
    memset(&r, 0, sizeof(r));
    r.kind    = ST_RED_SUM;
    r.dtype   = dtype;
    r.premul  = 1;
    r.postdiv = 1;
    /* Every union member starts at offset 0, so copying the element's bytes stores it in the
     * member of its type (fp16/bf16 as their bit pattern in h16). */
    memcpy(&r.scalar, scalar, st_dtype_size(dtype));
    *redop = r;
    return ST_OK;
}

/* ---------------------------------------------------------------------------------------- */
/* Entry points                                                                             */
/* ---------------------------------------------------------------------------------------- */

/* Only a sum carries a premul scalar; a stray premul flag on another kind is ignored. */
static int st_redop_premul(const st_redop_t *redop)
{
    return redop->premul && redop->kind == ST_RED_SUM;
}

void st_reduce_pre(const st_redop_t *redop, void *dst, const void *src, size_t count)
{
    /* count 0 may come with NULL buffers, which memcpy must not see. */
    if (count == 0 || !st_redop_valid(redop)) {
        return;
    }
    if (st_redop_premul(redop)) {
        st_reduce_scale_table[redop->dtype](dst, src, count, &redop->scalar);
    } else if (dst != src) {
        memcpy(dst, src, count * st_dtype_size(redop->dtype));
    }
}

void st_reduce_apply(const st_redop_t *redop, void *dst, const void *local, const void *in,
                     size_t count)
{
    if (count == 0 || !st_redop_valid(redop)) {
        return;
    }
    if (st_redop_premul(redop)) {
        st_reduce_psum_table[redop->dtype](dst, local, in, count, &redop->scalar);
    } else {
        st_reduce_binary_table[redop->dtype][redop->kind](dst, local, in, count);
    }
}

void st_reduce_combine(const st_redop_t *redop, void *dst, const void *a, const void *b,
                       size_t count)
{
    if (count == 0 || !st_redop_valid(redop)) {
        return;
    }
    st_reduce_binary_table[redop->dtype][redop->kind](dst, a, b, count);
}

void st_reduce_combine_n(const st_redop_t *redop, void *dst, const void *const *srcs, int n,
                         size_t count)
{
    int i;

    if (count == 0 || n < 1 || !st_redop_valid(redop)) {
        return;
    }
    if (n == 1) {
        if (dst != srcs[0]) {
            memmove(dst, srcs[0], count * st_dtype_size(redop->dtype));
        }
        return;
    }
    /* the first 2 to 4 inputs into dst, then dst folded with up to 3 more at a time: always
     * ((s0 OP s1) OP s2) OP ..., the order of st_reduce_combine applied in turn */
    if (n == 2) {
        st_reduce_binary_table[redop->dtype][redop->kind](dst, srcs[0], srcs[1], count);
        return;
    }
    if (n == 3) {
        st_reduce_fold3_table[redop->dtype][redop->kind](dst, srcs[0], srcs[1], srcs[2], count);
        return;
    }
    st_reduce_fold4_table[redop->dtype][redop->kind](dst, srcs[0], srcs[1], srcs[2], srcs[3],
                                                     count);
    for (i = 4; i < n; i += 3) {
        if (n - i >= 3) {
            st_reduce_fold4_table[redop->dtype][redop->kind](dst, dst, srcs[i], srcs[i + 1],
                                                             srcs[i + 2], count);
        } else if (n - i == 2) {
            st_reduce_fold3_table[redop->dtype][redop->kind](dst, dst, srcs[i], srcs[i + 1],
                                                             count);
        } else {
            st_reduce_binary_table[redop->dtype][redop->kind](dst, dst, srcs[i], count);
        }
    }
}

void st_reduce_post(const st_redop_t *redop, void *dst, size_t count)
{
    st_reduce_div_fn_t fn;

    if (count == 0 || !st_redop_valid(redop) || !st_redop_has_post(redop)) {
        return;
    }
    fn = st_reduce_div_table[redop->dtype];
    if (fn != NULL) { /* floating types never get a postdiv from st_redop_init */
        fn(dst, count, redop->postdiv);
    }
}

#if defined(__x86_64__) && defined(__SSE2__)
/* The streaming loops, whole 64-byte lines from a line-aligned d: 32-byte stores where the CPU has
 * AVX (a reduction streamed out of an L1 buffer in 2 KiB pieces, one core, 256 MiB arrays:
 * 7.1 GB/s of output against 6.2 with 16-byte stores on the Xeon VM of docs/performance.md;
 * bench/push_store.c), 16-byte ones otherwise. */
__attribute__((target("avx"))) static void st_stream_lines_avx(char *d, const char *s, size_t lines)
{
    for (; lines > 0; lines--, d += 64, s += 64) {
        __m256i a = _mm256_loadu_si256((const __m256i *)(const void *)s);
        __m256i b = _mm256_loadu_si256((const __m256i *)(const void *)(s + 32));

        _mm256_stream_si256((__m256i *)(void *)d, a);
        _mm256_stream_si256((__m256i *)(void *)(d + 32), b);
    }
}

static void st_stream_lines_sse2(char *d, const char *s, size_t lines)
{
    for (; lines > 0; lines--, d += 64, s += 64) {
        __m128i a = _mm_loadu_si128((const __m128i *)(const void *)s);
        __m128i b = _mm_loadu_si128((const __m128i *)(const void *)(s + 16));
        __m128i c = _mm_loadu_si128((const __m128i *)(const void *)(s + 32));
        __m128i e = _mm_loadu_si128((const __m128i *)(const void *)(s + 48));

        _mm_stream_si128((__m128i *)(void *)d, a);
        _mm_stream_si128((__m128i *)(void *)(d + 16), b);
        _mm_stream_si128((__m128i *)(void *)(d + 32), c);
        _mm_stream_si128((__m128i *)(void *)(d + 48), e);
    }
}
#endif

void st_copy_stream_unfenced(void *dst, const void *src, size_t bytes)
{
#if defined(__x86_64__) && defined(__SSE2__)
    static int  avx_cached = -1; /* every thread computes the same value */
    int         avx = __atomic_load_n(&avx_cached, __ATOMIC_RELAXED);
    char       *d = dst;
    const char *s = src;
    size_t      head = (64 - ((uintptr_t)d & 63)) & 63; /* whole lines: full write-combining */

    if (bytes < ST_COPY_STREAM_MIN) {
        memcpy(dst, src, bytes);
        return;
    }
    if (avx < 0) {
        __builtin_cpu_init();
        avx = __builtin_cpu_supports("avx") != 0;
        __atomic_store_n(&avx_cached, avx, __ATOMIC_RELAXED);
    }
    memcpy(d, s, head);
    d += head;
    s += head;
    bytes -= head;
    if (avx) {
        st_stream_lines_avx(d, s, bytes / 64);
    } else {
        st_stream_lines_sse2(d, s, bytes / 64);
    }
    d += bytes / 64 * 64;
    s += bytes / 64 * 64;
    memcpy(d, s, bytes % 64);
#else
    memcpy(dst, src, bytes);
#endif
}

void st_stream_fence(void)
{
#if defined(__x86_64__) && defined(__SSE2__)
    _mm_sfence();
#endif
}

void st_copy_stream(void *dst, const void *src, size_t bytes)
{
    st_copy_stream_unfenced(dst, src, bytes);
    st_stream_fence();
}
