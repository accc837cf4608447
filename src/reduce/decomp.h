/*
 * decomp.h - the reduction kernel's block decomposition: what one thread (block b, thread t of a
 * grid of nblocks blocks of nthreads) does of a job (kernel.h), as ST_HD inline functions
 * st_kdec_<op>_<n>, one per datatype x op. reduce_cuda.cu's __global__ kernels are these functions
 * called with blockIdx and threadIdx; kernel.c's st_reduce_job_run_host calls them for every
 * (block, thread) in turn. So the CPU tests run the GPU's split of the work as well as its
 * arithmetic (elem.h), and compare both with the host kernels.
 *
 * The split (st_kdec_plan):
 *  - packs: when dst and every source lie at the same offset modulo 16 bytes, and that offset is a
 *    multiple of the element size (all 16-byte aligned is the usual case, and so is a shard at the
 *    same offset of every window), the elements before dst's first 16-byte boundary (the head,
 *    fewer than one pack) go one to a thread; then the 16-byte packs go round-robin over all
 *    threads of the grid (thread i takes packs i, i + nthr, i + 2 nthr, ..., ST_KDEC_UNROLL of them
 *    loaded together, then one at a time); then the elements after the last whole pack (the tail)
 *    one to a thread;
 *  - elements: otherwise the elements go round-robin over all threads, with typed accesses when
 *    every pointer is aligned to the element, byte accesses when one is not (on the host both are
 *    memcpy; on a GPU a typed access must be aligned).
 * Neighbouring threads take neighbouring packs or elements, so a warp's accesses coalesce.
 *
 * Each element is reduced in registers: srcs[0] (prescaled when the job asks), each further
 * source in order, the post op, the store. A thread loads every source of a pack or element before
 * it stores it, and no two threads touch the same element, so dst may alias any source exactly.
 */
#ifndef ST_REDUCE_DECOMP_H
#define ST_REDUCE_DECOMP_H

#include <stddef.h>
#include <stdint.h>
#include <string.h>

#include "reduce/elem.h"
#include "reduce/kernel.h"

#define ST_KDEC_PACK 16 /* bytes of a pack: one 16-byte load or store per thread */
/* Packs a thread loads together (more bytes in flight): 4, or 2 for 1-byte types, whose 16
 * elements a pack take registers enough (within the 64 a thread has at 2 blocks per SM). */
#define ST_KDEC_UNROLL(_esize) ((_esize) == 1 ? 2 : 4)
#define ST_KDEC_BLOCK 512 /* threads per block (reduce_cuda.cu's __launch_bounds__) */
/* Most blocks of a grid: the 2 blocks of 512 threads an SM holds at the kernels' 64 registers a
 * thread, times an H200's 132 SMs, so one wave. Larger jobs loop (grid-stride); a GPU with fewer
 * SMs runs the blocks in more waves. */
#define ST_KDEC_GRID_MAX (2 * 132)

/* Unrolling (nvcc only: GCC decides for itself, and warns of a pragma it does not know): the loops
 * over the elements of a pack and the packs of a hunk fully, so that packs stay in registers; the
 * loop over the sources not at all, as nvcc's default unrolling by 4 would hold four sources' packs
 * at once and spill. */
#if defined(__CUDA_ARCH__)
#define ST_KDEC_UNROLL_LOOP _Pragma("unroll")
#define ST_KDEC_SRCS_LOOP _Pragma("unroll 1")
#else
#define ST_KDEC_UNROLL_LOOP
#define ST_KDEC_SRCS_LOOP
#endif

/* ---------------------------------------------------------------------------------------- */
/* Packs and the plan                                                                       */
/* ---------------------------------------------------------------------------------------- */

/* 16 bytes seen as elements of every type (the member named like elem.h's accessors). */
typedef union st_pack {
    int8_t   i8[16];
    uint8_t  u8[16];
    uint16_t u16[8];
    int32_t  i32[4];
    uint32_t u32[4];
    int64_t  i64[2];
    uint64_t u64[2];
    float    f32[4];
    double   f64[2];
} st_pack_t;

/* Pack i of the 16-byte aligned array at p: one 16-byte access on a GPU. */
ST_HD static inline void st_pack_ld(st_pack_t *v, const void *p, size_t i)
{
#if defined(__CUDA_ARCH__)
    uint4 w = ((const uint4 *)p)[i];

    v->u32[0] = w.x;
    v->u32[1] = w.y;
    v->u32[2] = w.z;
    v->u32[3] = w.w;
#else
    memcpy(v, (const char *)p + i * ST_KDEC_PACK, ST_KDEC_PACK);
#endif
}

ST_HD static inline void st_pack_st(void *p, size_t i, const st_pack_t *v)
{
#if defined(__CUDA_ARCH__)
    ((uint4 *)p)[i] = make_uint4(v->u32[0], v->u32[1], v->u32[2], v->u32[3]);
#else
    memcpy((char *)p + i * ST_KDEC_PACK, v, ST_KDEC_PACK);
#endif
}

typedef enum {
    ST_KDEC_PACKS = 0, /* head elements, 16-byte packs, tail elements */
    ST_KDEC_ELEMS = 1, /* elements, every pointer aligned to the element */
    ST_KDEC_BYTES = 2  /* elements, some pointer not aligned to the element */
} st_kdec_mode_t;

/* How a job of esize-byte elements splits; every thread computes the same plan. */
typedef struct st_kdec_plan {
    st_kdec_mode_t mode;
    size_t         head;   /* PACKS: elements before the packs */
    size_t         npacks; /* PACKS: 16-byte packs from element head on */
    size_t         tail;   /* PACKS: elements after the packs */
} st_kdec_plan_t;

ST_HD static inline st_kdec_plan_t st_kdec_plan(const st_reduce_job_t *job, size_t esize)
{
    uintptr_t      d    = (uintptr_t)job->dst;
    uintptr_t      mis  = 0; /* bits where a source's offset modulo 16 differs from dst's */
    uintptr_t      all  = d; /* OR of every address: its low bits say if all are aligned */
    st_kdec_plan_t plan = {ST_KDEC_PACKS, 0, 0, 0};

    for (int s = 0; s < job->nsrcs; s++) {
        uintptr_t a = (uintptr_t)job->srcs[s];

        mis |= (a ^ d) & (ST_KDEC_PACK - 1);
        all |= a;
    }
    if (mis == 0 && (d & (esize - 1)) == 0) {
        size_t per = ST_KDEC_PACK / esize;

        plan.head   = ((ST_KDEC_PACK - (d & (ST_KDEC_PACK - 1))) & (ST_KDEC_PACK - 1)) / esize;
        plan.head   = plan.head < job->count ? plan.head : job->count;
        plan.npacks = (job->count - plan.head) / per;
        plan.tail   = job->count - plan.head - plan.npacks * per;
    } else {
        plan.mode = (all & (esize - 1)) == 0 ? ST_KDEC_ELEMS : ST_KDEC_BYTES;
    }
    return plan;
}

/* ---------------------------------------------------------------------------------------- */
/* The kernels                                                                              */
/* ---------------------------------------------------------------------------------------- */

/* The job's constants a thread reads once: the premul scalar in the compute type (sum kernels:
 * SCALE; st_reduce_pre's rule, a premul on another kind is ignored) and the integer avg divisor
 * (integer kernels: DIV; st_reduce_post's rule, postdiv > 1). NONE where the kernel has none. */
#define ST_KDEC_PRE_SCALE(_n, _sm)                                                                 \
    const int                pre    = job->pre_first && job->redop.premul;                         \
    const st_scalar_##_n##_t scalar = st_scalar_##_n(job->redop.scalar._sm);
#define ST_KDEC_PRE_NONE(_n, _sm)                                                                  \
    const int pre    = 0;                                                                          \
    const int scalar = 0;                                                                          \
    (void)scalar;
#define ST_KDEC_SCALE_SCALE(_n, _v) st_op_scale_##_n(_v, scalar)
#define ST_KDEC_SCALE_NONE(_n, _v) (_v)

#define ST_KDEC_POST_DIV(_n)                                                                       \
    const int                 post    = job->post && job->redop.postdiv > 1;                       \
    const st_divisor_##_n##_t divisor = st_divisor_##_n(post ? job->redop.postdiv : 1);
#define ST_KDEC_POST_NONE(_n)                                                                      \
    const int post    = 0;                                                                         \
    const int divisor = 0;                                                                         \
    (void)divisor;
#define ST_KDEC_DIV_DIV(_n, _v) st_op_div_##_n(_v, divisor)
#define ST_KDEC_DIV_NONE(_n, _v) (_v)

/* Element _i of the job, through accessors st_<_ld>_<_a> and st_<_st>_<_a> (elem.h); the other
 * arguments are ST_KDEC_DEFINE's. */
#define ST_KDEC_ELEM(_op, _n, _T, _a, _pre, _post, _i, _ld, _st)                                   \
    do {                                                                                           \
        _T acc_ = st_##_ld##_##_a(job->srcs[0], _i);                                               \
                                                                                                   \
        if (pre) {                                                                                 \
            acc_ = ST_KDEC_SCALE_##_pre(_n, acc_);                                                 \
        }                                                                                          \
        ST_KDEC_SRCS_LOOP for (int s_ = 1; s_ < nsrcs; s_++)                                       \
        {                                                                                          \
            acc_ = st_op_##_op##_##_n(acc_, st_##_ld##_##_a(job->srcs[s_], _i));                   \
        }                                                                                          \
        if (post) {                                                                                \
            acc_ = ST_KDEC_DIV_##_post(_n, acc_);                                                  \
        }                                                                                          \
        st_##_st##_##_a(job->dst, _i, acc_);                                                       \
    } while (0)

/* _u packs of the job, at pack indices p, p + nthr, ..., of the arrays starting at element
 * plan.head (so 16-byte aligned); the other arguments are ST_KDEC_DEFINE's. */
#define ST_KDEC_PACKS_STEP(_op, _n, _T, _a, _pre, _post, _u)                                       \
    do {                                                                                           \
        st_pack_t acc_[_u], x_[_u];                                                                \
                                                                                                   \
        ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                      \
        {                                                                                          \
            st_pack_ld(&acc_[u_], (const _T *)job->srcs[0] + plan.head, p + u_ * nthr);            \
        }                                                                                          \
        if (pre) {                                                                                 \
            ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                  \
            {                                                                                      \
                ST_KDEC_UNROLL_LOOP for (int k_ = 0; k_ < per; k_++)                               \
                {                                                                                  \
                    acc_[u_]._a[k_] = ST_KDEC_SCALE_##_pre(_n, acc_[u_]._a[k_]);                   \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        ST_KDEC_SRCS_LOOP for (int s_ = 1; s_ < nsrcs; s_++)                                       \
        {                                                                                          \
            ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                  \
            {                                                                                      \
                st_pack_ld(&x_[u_], (const _T *)job->srcs[s_] + plan.head, p + u_ * nthr);         \
            }                                                                                      \
            ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                  \
            {                                                                                      \
                ST_KDEC_UNROLL_LOOP for (int k_ = 0; k_ < per; k_++)                               \
                {                                                                                  \
                    acc_[u_]._a[k_] = st_op_##_op##_##_n(acc_[u_]._a[k_], x_[u_]._a[k_]);          \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        if (post) {                                                                                \
            ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                  \
            {                                                                                      \
                ST_KDEC_UNROLL_LOOP for (int k_ = 0; k_ < per; k_++)                               \
                {                                                                                  \
                    acc_[u_]._a[k_] = ST_KDEC_DIV_##_post(_n, acc_[u_]._a[k_]);                    \
                }                                                                                  \
            }                                                                                      \
        }                                                                                          \
        ST_KDEC_UNROLL_LOOP for (int u_ = 0; u_ < (_u); u_++)                                      \
        {                                                                                          \
            st_pack_st((_T *)job->dst + plan.head, p + u_ * nthr, &acc_[u_]);                      \
        }                                                                                          \
    } while (0)

/* st_kdec_<_op>_<_n>: the thread (block, thread) of a grid of nblocks x nthreads, for op _op on
 * datatype _n, elements of type _T accessed as _a (elem.h's accessors, st_pack_t's members); _pre
 * SCALE or NONE with _sm the member of the redop's scalar; _post DIV or NONE. */
#define ST_KDEC_DEFINE(_op, _n, _T, _a, _pre, _sm, _post)                                          \
    ST_HD static inline void st_kdec_##_op##_##_n(const st_reduce_job_t *job, unsigned nblocks,    \
                                                  unsigned nthreads, unsigned block,               \
                                                  unsigned thread)                                 \
    {                                                                                              \
        enum { per = ST_KDEC_PACK / sizeof(_T), unroll = ST_KDEC_UNROLL(sizeof(_T)) };             \
        ST_KDEC_PRE_##_pre(_n, _sm) ST_KDEC_POST_##_post(_n) const int nsrcs = job->nsrcs;         \
        const size_t         tid  = (size_t)block * nthreads + thread;                             \
        const size_t         nthr = (size_t)nblocks * nthreads;                                    \
        const st_kdec_plan_t plan = st_kdec_plan(job, sizeof(_T));                                 \
        size_t               p, i;                                                                 \
                                                                                                   \
        switch (plan.mode) {                                                                       \
        case ST_KDEC_PACKS:                                                                        \
            if (tid < plan.head) {                                                                 \
                ST_KDEC_ELEM(_op, _n, _T, _a, _pre, _post, tid, ld, st);                           \
            }                                                                                      \
            for (p = tid; p + (unroll - 1) * nthr < plan.npacks; p += unroll * nthr) {             \
                ST_KDEC_PACKS_STEP(_op, _n, _T, _a, _pre, _post, unroll);                          \
            }                                                                                      \
            for (; p < plan.npacks; p += nthr) {                                                   \
                ST_KDEC_PACKS_STEP(_op, _n, _T, _a, _pre, _post, 1);                               \
            }                                                                                      \
            if (tid < plan.tail) {                                                                 \
                i = plan.head + plan.npacks * per + tid;                                           \
                ST_KDEC_ELEM(_op, _n, _T, _a, _pre, _post, i, ld, st);                             \
            }                                                                                      \
            break;                                                                                 \
        case ST_KDEC_ELEMS:                                                                        \
            for (i = tid; i < job->count; i += nthr) {                                             \
                ST_KDEC_ELEM(_op, _n, _T, _a, _pre, _post, i, ld, st);                             \
            }                                                                                      \
            break;                                                                                 \
        case ST_KDEC_BYTES:                                                                        \
            for (i = tid; i < job->count; i += nthr) {                                             \
                ST_KDEC_ELEM(_op, _n, _T, _a, _pre, _post, i, ldu, stu);                           \
            }                                                                                      \
            break;                                                                                 \
        }                                                                                          \
    }

/* The integer kernels: sum (with the premul scale), prod, max, min, each with avg's division. */
#define ST_KDEC_INT(_n, _T)                                                                        \
    ST_KDEC_DEFINE(sum, _n, _T, _n, SCALE, _n, DIV)                                                \
    ST_KDEC_DEFINE(prod, _n, _T, _n, NONE, _n, DIV)                                                \
    ST_KDEC_DEFINE(max, _n, _T, _n, NONE, _n, DIV)                                                 \
    ST_KDEC_DEFINE(min, _n, _T, _n, NONE, _n, DIV)

/* The floating kernels: sum and prod on values accessed as _a (bit patterns for fp16 and bf16),
 * max and min on bit patterns _b; the scalar in the redop's member _sm. */
#define ST_KDEC_FLOAT(_n, _T, _a, _B, _b, _sm)                                                     \
    ST_KDEC_DEFINE(sum, _n, _T, _a, SCALE, _sm, NONE)                                              \
    ST_KDEC_DEFINE(prod, _n, _T, _a, NONE, _sm, NONE)                                              \
    ST_KDEC_DEFINE(max, _n, _B, _b, NONE, _sm, NONE)                                               \
    ST_KDEC_DEFINE(min, _n, _B, _b, NONE, _sm, NONE)

ST_KDEC_INT(i8, int8_t)
ST_KDEC_INT(u8, uint8_t)
ST_KDEC_INT(i32, int32_t)
ST_KDEC_INT(u32, uint32_t)
ST_KDEC_INT(i64, int64_t)
ST_KDEC_INT(u64, uint64_t)
ST_KDEC_FLOAT(f16, uint16_t, u16, uint16_t, u16, h16)
ST_KDEC_FLOAT(f32, float, f32, uint32_t, u32, f32)
ST_KDEC_FLOAT(f64, double, f64, uint64_t, u64, f64)
ST_KDEC_FLOAT(bf16, uint16_t, u16, uint16_t, u16, h16)

/* Every kernel, as _X(op, kind, n, dtype): the kernels of reduce_cuda.cu, their names and
 * kernel.c's table of the host versions come from this one list. */
#define ST_KDEC_FOREACH_DTYPE(_X, _n, _dtype)                                                      \
    _X(sum, ST_RED_SUM, _n, _dtype)                                                                \
    _X(prod, ST_RED_PROD, _n, _dtype)                                                              \
    _X(max, ST_RED_MAX, _n, _dtype)                                                                \
    _X(min, ST_RED_MIN, _n, _dtype)
#define ST_KDEC_FOREACH(_X)                                                                        \
    ST_KDEC_FOREACH_DTYPE(_X, i8, strataInt8)                                                      \
    ST_KDEC_FOREACH_DTYPE(_X, u8, strataUint8)                                                     \
    ST_KDEC_FOREACH_DTYPE(_X, i32, strataInt32)                                                    \
    ST_KDEC_FOREACH_DTYPE(_X, u32, strataUint32)                                                   \
    ST_KDEC_FOREACH_DTYPE(_X, i64, strataInt64)                                                    \
    ST_KDEC_FOREACH_DTYPE(_X, u64, strataUint64)                                                   \
    ST_KDEC_FOREACH_DTYPE(_X, f16, strataFloat16)                                                  \
    ST_KDEC_FOREACH_DTYPE(_X, f32, strataFloat32)                                                  \
    ST_KDEC_FOREACH_DTYPE(_X, f64, strataFloat64)                                                  \
    ST_KDEC_FOREACH_DTYPE(_X, bf16, strataBfloat16)

/* The __global__ name of a kernel: "st_reduce_kernel_<op>_<n>". */
#define ST_KDEC_NAME(_op, _n) st_reduce_kernel_##_op##_##_n

#endif
