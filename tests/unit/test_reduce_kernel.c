/*
 * test_reduce_kernel.c - unit tests of the reduction job (src/reduce/kernel.h): the GPU kernel's
 * block decomposition (decomp.h) run on the CPU by st_reduce_job_run_host, every (block, thread)
 * in turn, against a chain of the host kernels (st_reduce_pre/apply/combine/post, host.c) into a
 * separate buffer, byte for byte.
 *
 * The cases cross every datatype with sum, prod, max, min, avg (3 ranks) and a premul-sum, 1 to
 * 16 sources, the pre_first and post flags, counts around the split's edges, and ten pointer
 * layouts: all 16-byte aligned, all shifted by one element (one byte for 1-byte types: packs after
 * a head), dst shifted alone (elements), a source shifted by one byte (byte accesses), each with
 * dst separate or aliasing the first or the last source. Floating types also go through a grid of
 * special values (zeros, subnormals, extremes, infinities, NaNs with payloads) in every pair. Then
 * the job's check, its geometry, the kernels' names and, in a build with nvcc, the embedded
 * fatbin, which must hold every kernel.
 */
#include "config.h"
#include "reduce/decomp.h"
#include "reduce/kernel.h"
#include "reduce/reduce.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define GUARD 0xa5 /* byte pattern around every test buffer */

static const strataDataType_t all_dtypes[] = {
    strataInt8,   strataUint8,   strataInt32,   strataUint32,  strataInt64,
    strataUint64, strataFloat16, strataFloat32, strataFloat64, strataBfloat16};

/* elem.h's short names, in strataDataType_t order, and the ops' in st_red_kind_t order. */
static const char *const dtype_short[] = {"i8",  "u8",  "i32", "u32", "i64",
                                          "u64", "f16", "f32", "f64", "bf16"};
static const char *const kind_name[]   = {"sum", "prod", "max", "min"};

/* ---------------------------------------------------------------------------------------- */
/* Helpers: random numbers, guarded buffers                                                 */
/* ---------------------------------------------------------------------------------------- */

static uint64_t rng_state = 0x2545f4914f6cdd1dull;

static uint64_t rnd(void)
{
    /* xorshift64*: deterministic, so a failure reproduces. */
    rng_state ^= rng_state >> 12;
    rng_state ^= rng_state << 25;
    rng_state ^= rng_state >> 27;
    return rng_state * 0x2545f4914f6cdd1dull;
}

static uint64_t el_get(const void *p, size_t i, size_t size)
{
    uint64_t v = 0;

    memcpy(&v, (const char *)p + i * size, size); /* little-endian: the low bytes */
    return v;
}

static void el_set(void *p, size_t i, size_t size, uint64_t v)
{
    memcpy((char *)p + i * size, &v, size);
}

/* Test buffers are views of a few preallocated slots (allocating and faulting in fresh pages per
 * case would cost more than the cases): a payload `off` bytes after a 64-byte boundary, with 64
 * guard bytes before the boundary and after the payload. */
#define MAX_COUNT 100003
/* whole 64-byte lines: aligned_alloc wants a multiple of the alignment */
#define SLOT_BYTES (((64 + 64 + MAX_COUNT * 8 + 64) + 63) / 64 * 64)
#define NSLOTS (ST_REDUCE_MAX_SRCS + 4)

typedef struct {
    uint8_t *base;
    uint8_t *p;
    size_t   off, bytes;
} tbuf_t;

static uint8_t *slots[NSLOTS];

static void tbuf_place(tbuf_t *b, int slot, size_t off, size_t bytes)
{
    assert_true(slot < NSLOTS && off < 64 && bytes <= MAX_COUNT * 8);
    if (slots[slot] == NULL) {
        slots[slot] = aligned_alloc(64, SLOT_BYTES);
        assert_non_null(slots[slot]);
    }
    b->base  = slots[slot];
    b->off   = off;
    b->bytes = bytes;
    b->p     = b->base + 64 + off;
    memset(b->base, GUARD, 64 + off);
    memset(b->p + bytes, GUARD, 64);
}

static void tbuf_check_guards(const tbuf_t *b, const char *what)
{
    for (size_t i = 0; i < 64 + b->off; i++) {
        if (b->base[i] != GUARD) {
            fail_msg("%s: guard byte %zd before the payload changed to 0x%02x", what,
                     (ptrdiff_t)i - (ptrdiff_t)(64 + b->off), b->base[i]);
        }
    }
    for (size_t i = 0; i < 64; i++) {
        if (b->p[b->bytes + i] != GUARD) {
            fail_msg("%s: guard byte %zu after the payload changed to 0x%02x", what, i,
                     b->p[b->bytes + i]);
        }
    }
}

static uint64_t canonical_qnan(strataDataType_t dt)
{
    switch (dt) {
    case strataFloat16: return 0x7e00;
    case strataBfloat16: return 0x7fc0;
    case strataFloat32: return 0x7fc00000;
    default: return 0x7ff8000000000000ull;
    }
}

static int is_nan_bits(strataDataType_t dt, uint64_t v)
{
    switch (dt) {
    case strataFloat16: return (v & 0x7fff) > 0x7c00;
    case strataBfloat16: return (v & 0x7fff) > 0x7f80;
    case strataFloat32: return (v & 0x7fffffff) > 0x7f800000;
    case strataFloat64: return (v & 0x7fffffffffffffffull) > 0x7ff0000000000000ull;
    default: return 0;
    }
}

/* Values: for floating types, a quarter random patterns (NaNs with payloads, subnormals,
 * infinities among them), the rest numbers near 1 of either sign, whose products over 16 sources
 * mostly stay finite; for integers, random patterns. */
static uint64_t gen_value(strataDataType_t dt)
{
    uint64_t r = rnd(), m = r >> 20;
    uint64_t s = (r >> 2) & 1;

    if (!st_dtype_is_float(dt) || (r & 3) == 0) {
        return r >> 7;
    }
    switch (dt) {
    case strataFloat16: return (s << 15) | ((uint64_t)(13 + (r >> 8) % 4) << 10) | (m & 0x3ff);
    case strataBfloat16: return (s << 15) | ((uint64_t)(125 + (r >> 8) % 4) << 7) | (m & 0x7f);
    case strataFloat32: return (s << 31) | ((uint64_t)(125 + (r >> 8) % 4) << 23) | (m & 0x7fffff);
    default: return (s << 63) | ((uint64_t)(1021 + (r >> 8) % 4) << 52) | (m & 0xfffffffffffffull);
    }
}

/* Random sources of MAX_COUNT elements of one dtype (made once per dtype, then copied into the
 * cases' buffers): values[s] for source s. */
static uint8_t         *values[ST_REDUCE_MAX_SRCS];
static strataDataType_t values_dtype = strataNumTypes;

static const void *source_values(strataDataType_t dt, int s)
{
    size_t esize = st_dtype_size(dt);

    if (values_dtype != dt) {
        for (int k = 0; k < ST_REDUCE_MAX_SRCS; k++) {
            if (values[k] == NULL) {
                values[k] = malloc(MAX_COUNT * 8);
                assert_non_null(values[k]);
            }
            for (size_t i = 0; i < MAX_COUNT; i++) {
                el_set(values[k], i, esize, gen_value(dt));
            }
        }
        values_dtype = dt;
    }
    return values[s];
}

/* ---------------------------------------------------------------------------------------- */
/* Ops and layouts                                                                          */
/* ---------------------------------------------------------------------------------------- */

typedef enum { OP_SUM, OP_PROD, OP_MAX, OP_MIN, OP_AVG, OP_PREMUL, OP_COUNT } test_op_t;
static const char *const op_name[] = {"sum", "prod", "max", "min", "avg", "premul"};

/* The redop of a test op: avg over 3 ranks (a premul by 1/3 for floating types, a division by 3
 * for integers); premul-sum by 3 (integers) or about 0.3 (floating types). */
static void make_redop(st_redop_t *r, strataDataType_t dt, test_op_t op)
{
    static const strataRedOp_t builtin[] = {strataSum, strataProd, strataMax, strataMin, strataAvg};
    uint64_t                   scalar;

    if (op != OP_PREMUL) {
        assert_int_equal(st_redop_init(r, builtin[op], dt, 3), ST_OK);
        return;
    }
    switch (dt) {
    case strataFloat16: scalar = 0x34cd; break;
    case strataBfloat16: scalar = 0x3e9a; break;
    case strataFloat32: scalar = 0x3e99999a; break;
    case strataFloat64: scalar = 0x3fd3333333333333ull; break;
    default: scalar = 3; break;
    }
    assert_int_equal(st_redop_init_premul(r, dt, &scalar), ST_OK);
}

typedef enum { DST_OWN, DST_SRC0, DST_SRCLAST } test_dst_t;
typedef enum { ALIGN_ALL, ALIGN_SHIFT_ALL, ALIGN_SHIFT_DST, ALIGN_BYTE_SRC } test_align_t;

typedef struct {
    test_align_t align;
    test_dst_t   dst;
} test_layout_t;

/* Ten layouts: three alignments x three dst placements, and a source off by one byte. */
static const test_layout_t layouts[] = {
    {ALIGN_ALL, DST_OWN},       {ALIGN_ALL, DST_SRC0},       {ALIGN_ALL, DST_SRCLAST},
    {ALIGN_SHIFT_ALL, DST_OWN}, {ALIGN_SHIFT_ALL, DST_SRC0}, {ALIGN_SHIFT_ALL, DST_SRCLAST},
    {ALIGN_SHIFT_DST, DST_OWN}, {ALIGN_SHIFT_DST, DST_SRC0}, {ALIGN_SHIFT_DST, DST_SRCLAST},
    {ALIGN_BYTE_SRC, DST_OWN},
};

/* Byte offsets from a 64-byte boundary of dst (index -1) and of source s, in layout l. With
 * ALIGN_SHIFT_DST the shifted pointer is dst, or the source dst aliases, so dst's offset modulo 16
 * always differs from another pointer's when there is another one. */
static size_t layout_offset(const test_layout_t *l, int s, int nsrcs, size_t esize)
{
    int dst_src = l->dst == DST_SRC0 ? 0 : l->dst == DST_SRCLAST ? nsrcs - 1 : -1;

    switch (l->align) {
    case ALIGN_ALL: return 0;
    case ALIGN_SHIFT_ALL: return esize;
    case ALIGN_SHIFT_DST: return s == dst_src || s == -1 ? esize : 0;
    case ALIGN_BYTE_SRC: return s == nsrcs - 1 ? 1 : 0;
    }
    return 0;
}

/* The split a layout must take (count > 0). */
static st_kdec_mode_t layout_mode(const test_layout_t *l, int nsrcs, size_t esize)
{
    switch (l->align) {
    case ALIGN_ALL:
    case ALIGN_SHIFT_ALL: return ST_KDEC_PACKS;
    case ALIGN_SHIFT_DST: return nsrcs == 1 && l->dst != DST_OWN ? ST_KDEC_PACKS : ST_KDEC_ELEMS;
    case ALIGN_BYTE_SRC: return esize == 1 ? ST_KDEC_ELEMS : ST_KDEC_BYTES;
    }
    return ST_KDEC_PACKS;
}

/* ---------------------------------------------------------------------------------------- */
/* One case: the job against the chain of host kernels                                      */
/* ---------------------------------------------------------------------------------------- */

/* The job's result computed by the host kernels into ref, from the sources as they are now. */
static void ref_chain(const st_reduce_job_t *job, void *ref)
{
    const st_redop_t *r     = &job->redop;
    size_t            count = job->count;

    if (job->nsrcs == 1) {
        if (job->pre_first) {
            st_reduce_pre(r, ref, job->srcs[0], count);
        } else {
            memcpy(ref, job->srcs[0], count * st_dtype_size(r->dtype));
        }
    } else if (job->pre_first) {
        st_reduce_apply(r, ref, job->srcs[0], job->srcs[1], count);
    } else {
        st_reduce_combine(r, ref, job->srcs[0], job->srcs[1], count);
    }
    for (int s = 2; s < job->nsrcs; s++) {
        st_reduce_combine(r, ref, ref, job->srcs[s], count);
    }
    if (job->post) {
        st_reduce_post(r, ref, count);
    }
}

/* Runs job (its dst and sources set) and compares with the chain; fails naming the case. */
static void check_job(const st_reduce_job_t *job, const char *what)
{
    strataDataType_t dt    = job->redop.dtype;
    size_t           esize = st_dtype_size(dt), bytes = job->count * esize;
    uint8_t         *ref = malloc(bytes + 1);

    assert_non_null(ref);
    ref_chain(job, ref);
    assert_int_equal(st_reduce_job_check(job), ST_OK);
    st_reduce_job_run_host(job);
    if (memcmp(job->dst, ref, bytes) != 0) {
        for (size_t i = 0; i < job->count; i++) {
            uint64_t got = el_get(job->dst, i, esize), want = el_get(ref, i, esize);

            if (got != want) {
                fail_msg("%s: %s %s nsrcs %d pre %d post %d count %zu: element %zu is 0x%" PRIx64
                         ", want 0x%" PRIx64,
                         what, st_dtype_name(dt), kind_name[job->redop.kind], job->nsrcs,
                         job->pre_first, job->post, job->count, i, got, want);
            }
        }
    }
    /* Every NaN a floating job makes is the canonical one (the chain's are too, test_reduce). */
    if (st_dtype_is_float(dt) && (job->nsrcs > 1 || (job->pre_first && job->redop.premul &&
                                                     job->redop.kind == ST_RED_SUM))) {
        for (size_t i = 0; i < job->count; i++) {
            uint64_t got = el_get(job->dst, i, esize);

            if (is_nan_bits(dt, got) && got != canonical_qnan(dt)) {
                fail_msg("%s: %s element %zu is the NaN 0x%" PRIx64 ", not the canonical one", what,
                         st_dtype_name(dt), i, got);
            }
        }
    }
    free(ref);
}

/* One case of the grid: random sources in layout l, the job, the comparison, the guards and the
 * sources dst does not alias (unchanged). Source s is in slot s, dst (when it has its own) in the
 * next slot. */
static void run_case(strataDataType_t dt, test_op_t op, int pre, int post, int nsrcs, size_t count,
                     const test_layout_t *l)
{
    size_t          esize = st_dtype_size(dt), bytes = count * esize;
    tbuf_t          src[ST_REDUCE_MAX_SRCS], dst     = {0};
    st_reduce_job_t job;
    int             alias = l->dst == DST_SRC0 ? 0 : l->dst == DST_SRCLAST ? nsrcs - 1 : -1;
    char            what[96];

    memset(&job, 0, sizeof(job));
    make_redop(&job.redop, dt, op);
    job.nsrcs     = nsrcs;
    job.pre_first = pre;
    job.post      = post;
    job.count     = count;
    for (int s = 0; s < nsrcs; s++) {
        tbuf_place(&src[s], s, layout_offset(l, s, nsrcs, esize), bytes);
        memcpy(src[s].p, source_values(dt, s), bytes);
        job.srcs[s] = src[s].p;
    }
    if (alias < 0) {
        tbuf_place(&dst, ST_REDUCE_MAX_SRCS, layout_offset(l, -1, nsrcs, esize), bytes);
        memset(dst.p, 0x5a, bytes);
        job.dst = dst.p;
    } else {
        job.dst = src[alias].p;
    }
    if (count > 0) {
        assert_int_equal(st_kdec_plan(&job, esize).mode, layout_mode(l, nsrcs, esize));
    }
    snprintf(what, sizeof(what), "%s, layout %d/%d", op_name[op], (int)l->align, (int)l->dst);
    check_job(&job, what);
    for (int s = 0; s < nsrcs; s++) {
        tbuf_check_guards(&src[s], what);
        if (s != alias && memcmp(src[s].p, source_values(dt, s), bytes) != 0) {
            fail_msg("%s: source %d changed", what, s);
        }
    }
    if (alias < 0) {
        tbuf_check_guards(&dst, what);
    }
}

/* The pre_first/post flags each op is run with: all four combinations for avg and premul (whose
 * scale and division they switch), none and both for the others (where they must change
 * nothing). */
static int op_flags(test_op_t op, int k, int *pre, int *post)
{
    int n = op == OP_AVG || op == OP_PREMUL ? 4 : 2;

    if (k >= n) {
        return 0;
    }
    *pre  = n == 4 ? k & 1 : k;
    *post = n == 4 ? k >> 1 : k;
    return 1;
}

static const int nsrcs_all[] = {1, 2, 3, 4, 8, 16};

/* Counts 0, 1, 7, 4097 (under a pack; a pack's elements plus a head and a tail): every op, flag
 * combination, number of sources and layout. */
static void test_grid_small(void **state)
{
    static const size_t counts[] = {0, 1, 7, 4097};

    for (size_t d = 0; d < ST_ARRAY_SIZE(all_dtypes); d++) {
        for (int op = 0; op < OP_COUNT; op++) {
            int pre, post;

            for (int k = 0; op_flags((test_op_t)op, k, &pre, &post); k++) {
                for (size_t n = 0; n < ST_ARRAY_SIZE(nsrcs_all); n++) {
                    for (size_t c = 0; c < ST_ARRAY_SIZE(counts); c++) {
                        for (size_t l = 0; l < ST_ARRAY_SIZE(layouts); l++) {
                            run_case(all_dtypes[d], (test_op_t)op, pre, post, nsrcs_all[n],
                                     counts[c], &layouts[l]);
                        }
                    }
                }
            }
        }
    }
}

/* 100003 elements (several packs per thread of the grid: the unrolled hunks and the single packs
 * after them): every op with both flags set, every number of sources and layout. */
static void test_grid_large(void **state)
{
    for (size_t d = 0; d < ST_ARRAY_SIZE(all_dtypes); d++) {
        for (int op = 0; op < OP_COUNT; op++) {
            for (size_t n = 0; n < ST_ARRAY_SIZE(nsrcs_all); n++) {
                for (size_t l = 0; l < ST_ARRAY_SIZE(layouts); l++) {
                    run_case(all_dtypes[d], (test_op_t)op, 1, 1, nsrcs_all[n], MAX_COUNT,
                             &layouts[l]);
                }
            }
        }
    }
}

/* ---------------------------------------------------------------------------------------- */
/* Special values                                                                           */
/* ---------------------------------------------------------------------------------------- */

/* Per floating type: +-0, the smallest and largest subnormals, the smallest normal, 1, 1.5, the
 * largest finite, +-Inf, quiet and signalling NaNs with payloads of either sign. */
static size_t special_values(strataDataType_t dt, uint64_t *v)
{
    static const uint64_t f16[]  = {0x0000, 0x8000, 0x0001, 0x8001, 0x03ff, 0x83ff, 0x0400,
                                    0x8400, 0x3c00, 0xbc00, 0x3e00, 0x7bff, 0xfbff, 0x7c00,
                                    0xfc00, 0x7e00, 0xfe00, 0x7e01, 0x7c01, 0xfd55};
    static const uint64_t bf16[] = {0x0000, 0x8000, 0x0001, 0x8001, 0x007f, 0x807f, 0x0080,
                                    0x8080, 0x3f80, 0xbf80, 0x3fc0, 0x7f7f, 0xff7f, 0x7f80,
                                    0xff80, 0x7fc0, 0xffc0, 0x7fc1, 0x7f81, 0xffa5};
    static const uint64_t f32[]  = {0x00000000, 0x80000000, 0x00000001, 0x80000001, 0x007fffff,
                                    0x807fffff, 0x00800000, 0x80800000, 0x3f800000, 0xbf800000,
                                    0x3fc00000, 0x7f7fffff, 0xff7fffff, 0x7f800000, 0xff800000,
                                    0x7fc00000, 0xffc00000, 0x7fc12345, 0x7f800001, 0xffa5a5a5};
    static const uint64_t f64[]  = {
         0x0000000000000000ull, 0x8000000000000000ull, 0x0000000000000001ull, 0x8000000000000001ull,
         0x000fffffffffffffull, 0x800fffffffffffffull, 0x0010000000000000ull, 0x8010000000000000ull,
         0x3ff0000000000000ull, 0xbff0000000000000ull, 0x3ff8000000000000ull, 0x7fefffffffffffffull,
         0xffefffffffffffffull, 0x7ff0000000000000ull, 0xfff0000000000000ull, 0x7ff8000000000000ull,
         0xfff8000000000000ull, 0x7ff8000000012345ull, 0x7ff0000000000001ull, 0xfff5a5a5a5a5a5a5ull};
    const uint64_t *t = dt == strataFloat16    ? f16
                        : dt == strataBfloat16 ? bf16
                        : dt == strataFloat32  ? f32
                                               : f64;

    memcpy(v, t, sizeof(f16));
    return ST_ARRAY_SIZE(f16);
}

/* Every ordered pair (a, b) of special values as sources 0 and 1, and then with each special
 * value as a third source; sum, prod, max, min, avg and premul-sum with the special values as the
 * premul scalar too; packs and elements. */
static void test_special_values(void **state)
{
    static const strataDataType_t fl[] = {strataFloat16, strataFloat32, strataFloat64,
                                          strataBfloat16};

    for (size_t d = 0; d < ST_ARRAY_SIZE(fl); d++) {
        strataDataType_t dt    = fl[d];
        size_t           esize = st_dtype_size(dt);
        uint64_t         sv[32];
        size_t           n     = special_values(dt, sv);
        size_t           count = n * n * n;
        tbuf_t           a, b, c, out;

        /* a[i] = sv[i % n], b[i] = sv[i / n % n], c[i] = sv[i / n / n]: every pair, every triple.
         */
        tbuf_place(&a, 0, esize, count * esize);
        tbuf_place(&b, 1, esize, count * esize);
        tbuf_place(&c, 2, esize, count * esize);
        tbuf_place(&out, 3, esize, count * esize);
        for (size_t i = 0; i < count; i++) {
            el_set(a.p, i, esize, sv[i % n]);
            el_set(b.p, i, esize, sv[i / n % n]);
            el_set(c.p, i, esize, sv[i / n / n]);
        }
        for (size_t k = 0; k < 4 + n; k++) {
            st_reduce_job_t job;

            memset(&job, 0, sizeof(job));
            if (k < 4) {
                static const strataRedOp_t ops[] = {strataSum, strataProd, strataMax, strataMin};

                assert_int_equal(st_redop_init(&job.redop, ops[k], dt, 3), ST_OK);
            } else {
                assert_int_equal(st_redop_init_premul(&job.redop, dt, &sv[k - 4]), ST_OK);
            }
            for (int shift = 0; shift < 2; shift++) {
                job.dst       = out.p - shift * esize; /* dst: packs with the others, or not */
                job.srcs[0]   = a.p;
                job.srcs[1]   = b.p;
                job.srcs[2]   = c.p;
                job.pre_first = 1;
                for (int nsrcs = 1; nsrcs <= 3; nsrcs++) {
                    job.nsrcs = nsrcs;
                    job.count = nsrcs == 3 ? count : n * n;
                    check_job(&job, shift ? "special values, elements" : "special values, packs");
                }
            }
        }
        /* avg over 3 ranks: the scale by 1/3, then the sums. */
        {
            st_reduce_job_t job;

            memset(&job, 0, sizeof(job));
            assert_int_equal(st_redop_init(&job.redop, strataAvg, dt, 3), ST_OK);
            job.dst       = out.p;
            job.srcs[0]   = a.p;
            job.srcs[1]   = b.p;
            job.srcs[2]   = c.p;
            job.nsrcs     = 3;
            job.pre_first = 1;
            job.count     = count;
            check_job(&job, "special values, avg");
        }
        tbuf_check_guards(&a, "special a");
        tbuf_check_guards(&b, "special b");
        tbuf_check_guards(&c, "special c");
    }
}

/* ---------------------------------------------------------------------------------------- */
/* The job's check, geometry, names and fatbin                                              */
/* ---------------------------------------------------------------------------------------- */

static void test_job_check(void **state)
{
    char            buf[256];
    st_reduce_job_t job;

    memset(&job, 0, sizeof(job));
    assert_int_equal(st_redop_init(&job.redop, strataSum, strataFloat32, 2), ST_OK);
    job.nsrcs   = 2;
    job.count   = 16;
    job.dst     = buf;
    job.srcs[0] = buf;      /* dst aliases a source exactly: allowed */
    job.srcs[1] = buf + 64; /* disjoint */
    assert_int_equal(st_reduce_job_check(&job), ST_OK);
    job.srcs[1] = buf + 4; /* partial overlap */
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    job.srcs[1] = buf + 64;
    job.srcs[0] = NULL;
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    job.count = 0; /* no elements: no pointer is read */
    assert_int_equal(st_reduce_job_check(&job), ST_OK);
    assert_non_null(st_reduce_kernel_name(&job));
    job.count   = 16;
    job.srcs[0] = buf;
    job.nsrcs   = 0;
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    job.nsrcs = ST_REDUCE_MAX_SRCS + 1;
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    job.nsrcs       = 2;
    job.redop.dtype = strataNumTypes;
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    assert_null(st_reduce_kernel_name(&job));
    job.redop.dtype = strataFloat32;
    job.redop.kind  = (st_red_kind_t)4;
    assert_int_equal(st_reduce_job_check(&job), ST_ERR_INVALID);
    assert_int_equal(st_reduce_job_check(NULL), ST_ERR_INVALID);
    /* An invalid job runs nothing. */
    memset(buf, 0x11, sizeof(buf));
    job.redop.kind = ST_RED_SUM;
    job.srcs[1]    = buf + 4;
    st_reduce_job_run_host(&job);
    for (size_t i = 0; i < sizeof(buf); i++) {
        assert_int_equal((uint8_t)buf[i], 0x11);
    }
}

/* The split itself: for every dtype, dst and source offsets 0..15 from a 16-byte boundary (the
 * sources at one offset, or one source elsewhere) and counts around a pack: packs exactly when
 * every pointer has dst's offset modulo 16, a multiple of the element; then a head shorter than a
 * pack that brings every pointer to a 16-byte boundary, whole packs, a tail shorter than a pack;
 * typed element accesses exactly when every pointer is aligned to the element. */
static void test_plan(void **state)
{
    static char buf[4][256] __attribute__((aligned(64)));

    for (size_t d = 0; d < ST_ARRAY_SIZE(all_dtypes); d++) {
        size_t esize = st_dtype_size(all_dtypes[d]), per = 16 / esize;

        for (size_t od = 0; od < 16; od++) {
            for (size_t os = 0; os < 16; os++) {
                for (size_t odd = 0; odd < 16; odd += 5) {
                    for (size_t count = 0; count < 3 * per + 2; count++) {
                        st_reduce_job_t job;
                        st_kdec_plan_t  plan;
                        size_t          off[4] = {od, os, os, odd};
                        int             same = 1, aligned = 1;

                        memset(&job, 0, sizeof(job));
                        job.redop.dtype = all_dtypes[d];
                        job.nsrcs       = 3;
                        job.count       = count;
                        job.dst         = buf[0] + od;
                        for (int s = 0; s < 3; s++) {
                            job.srcs[s] = buf[s + 1] + off[s + 1];
                        }
                        for (int k = 0; k < 4; k++) {
                            same &= off[k] == od;
                            aligned &= off[k] % esize == 0;
                        }
                        plan = st_kdec_plan(&job, esize);
                        if (!same || !aligned) {
                            assert_int_equal(plan.mode, aligned ? ST_KDEC_ELEMS : ST_KDEC_BYTES);
                            continue;
                        }
                        assert_int_equal(plan.mode, ST_KDEC_PACKS);
                        assert_true(plan.head + plan.npacks * per + plan.tail == count);
                        assert_true(plan.head < per && plan.tail < per);
                        if (plan.npacks > 0 || plan.tail > 0) {
                            assert_int_equal((od + plan.head * esize) % 16, 0);
                        }
                    }
                }
            }
        }
    }
}

static void test_geometry(void **state)
{
    static const size_t counts[] = {0, 1, 7, 4097, 100003, (size_t)1 << 30, (size_t)1 << 40};
    static char         buf[64] __attribute__((aligned(16)));

    for (size_t d = 0; d < ST_ARRAY_SIZE(all_dtypes); d++) {
        unsigned prev = 0;

        for (size_t c = 0; c < ST_ARRAY_SIZE(counts); c++) {
            st_reduce_job_t job;
            unsigned        grid = 0, block = 0;

            memset(&job, 0, sizeof(job));
            assert_int_equal(st_redop_init(&job.redop, strataSum, all_dtypes[d], 2), ST_OK);
            job.dst     = buf;
            job.srcs[0] = buf;
            job.nsrcs   = 1;
            job.count   = counts[c];
            st_reduce_job_geometry(&job, &grid, &block);
            assert_int_equal(block, ST_KDEC_BLOCK);
            assert_true(grid >= 1 && grid <= ST_KDEC_GRID_MAX);
            assert_true(grid >= prev); /* more work never takes fewer blocks */
            prev = grid;
            /* At least one thread per pack up to the cap. */
            if (counts[c] > 0) {
                size_t packs = (counts[c] * st_dtype_size(all_dtypes[d]) + 15) / 16;

                assert_true((size_t)grid * block >= packs || grid == ST_KDEC_GRID_MAX);
            }
        }
        assert_int_equal(prev, ST_KDEC_GRID_MAX);
    }
}

static void test_kernel_names(void **state)
{
    const char *names[strataNumTypes * 4];

    for (size_t d = 0; d < ST_ARRAY_SIZE(all_dtypes); d++) {
        for (int k = 0; k < 4; k++) {
            st_reduce_job_t job;
            char            want[64];
            const char     *name;

            memset(&job, 0, sizeof(job));
            job.redop.dtype = all_dtypes[d];
            job.redop.kind  = (st_red_kind_t)k;
            job.nsrcs       = 1;
            name            = st_reduce_kernel_name(&job);
            snprintf(want, sizeof(want), "st_reduce_kernel_%s_%s", kind_name[k],
                     dtype_short[all_dtypes[d]]);
            assert_non_null(name);
            assert_string_equal(name, want);
            names[d * 4 + k] = name;
            /* In a build with nvcc the fatbin holds each kernel's machine code: its name ends a
             * string of a cubin's symbol table (nvcc compresses a fatbin's PTX, not its cubins). */
            if (st_reduce_fatbin_size > 0) {
                assert_non_null(
                    memmem(st_reduce_fatbin, st_reduce_fatbin_size, name, strlen(name) + 1));
            }
        }
    }
    for (size_t i = 0; i < ST_ARRAY_SIZE(names); i++) {
        for (size_t j = i + 1; j < ST_ARRAY_SIZE(names); j++) {
            assert_true(strcmp(names[i], names[j]) != 0);
        }
    }
}

static void test_fatbin(void **state)
{
#ifdef ST_TEST_HAVE_NVCC
    uint32_t magic;

    /* A fatbin starts with its magic number, 0xba55ed50 (little-endian). */
    assert_true(st_reduce_fatbin_size > 16);
    memcpy(&magic, st_reduce_fatbin, sizeof(magic));
    assert_int_equal(magic, 0xba55ed50u);
    assert_int_equal((uintptr_t)st_reduce_fatbin % 8, 0);
#else
    assert_int_equal(st_reduce_fatbin_size, 0);
#endif
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_job_check),  cmocka_unit_test(test_plan),
        cmocka_unit_test(test_geometry),   cmocka_unit_test(test_kernel_names),
        cmocka_unit_test(test_fatbin),     cmocka_unit_test(test_special_values),
        cmocka_unit_test(test_grid_small), cmocka_unit_test(test_grid_large),
    };
    int ret;

    ret = cmocka_run_group_tests(tests, NULL, NULL);

    for (int k = 0; k < NSLOTS; k++) {
        free(slots[k]);
    }
    for (int k = 0; k < ST_REDUCE_MAX_SRCS; k++) {
        free(values[k]);
    }
    return ret;
}
