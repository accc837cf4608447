/*
 * data.c - collbench's inputs, whose exact results are known, and the element-wise check.
 *
 * Every rank computes, for any global element k, the input of any rank r from a hash of (seed, r,
 * k), so a rank can check its output without receiving the other ranks' data, and a block that
 * lands at the wrong offset, on the wrong rank or from a stale call shows as wrong (the seed
 * changes for every checked call, in lockstep on all ranks). #wrong counts elements that differ
 * from the expected value: bitwise, at the type's width, for integers; by value (== on doubles,
 * so NaN is always wrong) for the floating types, with tolerance 0 everywhere. That is only fair
 * when the result cannot depend on the order in which strata combines the ranks (ring,
 * hierarchical, tree), so the floating inputs are chosen to make every partial result exact:
 *
 *  - integer types, every op: raw 64-bit hash values truncated to the type. Sums, products and
 *    premul-sums wrap; the expected value is computed modulo 2^64 and compared at the type's width,
 *    which is exactly two's-complement wrapping. max/min compare signed or unsigned as the type
 *    says; avg is the wrapped sum divided by nranks, truncated toward zero (strata.h).
 * *  - copies (broadcast, all_gather, sendrecv, the all-to-alls, gather, scatter), max and min on
 *    floating types: integers in [-L, L], L being the largest bound with every integer exact
 *    (fp16 2048, bf16 256, fp32 2^24, fp64 2^52). No arithmetic happens, so any value is exact.
 *  - sum: integers in [-a, a] with a = L / nranks, so every partial sum of any subset of the ranks
 *    is an exact integer. Above L ranks (bf16 beyond 256 ranks) only L ranks, rotating with k,
 *    hold a nonzero value (+-1) at each element.
 *  - prod: factors +-1 and +-2 (random sign per rank); element k holds k % (t + 1) factors 2 on
 *    ranks rotating with k, t = min(nranks, 15 for fp16, 30 for bf16/fp32, 60 for fp64), so every
 *    partial product is a power of two that fits.
 *  - premul-sum (nccl-tests' "mulsum"): rank r's scalar is 2 (r even) or 0.5 (r odd), exact in
 *    every floating type; inputs are 2 * [-a, a] with a = L / (4 nranks), so products are
 *    integers and partial sums stay within L. Integer types use the scalar r % 3 + 1 (wrapping).
 *  - avg, strata's definition: each rank's input times s = 1/nranks correctly rounded to the type,
 *    the product rounded to the type, then summed. With a
 *    power-of-two nranks, s is exact: inputs are nranks * [-a, a] (a = L / nranks), every scaled
 *    input is the exact draw, and partial sums are exact integers. Otherwise no choice of more
 *    than two nonzero inputs keeps the sum order-independent (each scaled input carries all the
 *    type's bits), so exactly two ranks, rotating with k, hold a nonzero integer in [-L/2, L/2]
 *    and the others 0: every order computes the same single rounding of c1 + c2, and the checker
 *    reproduces it (c = round(x * s) is exact in double for every type; fp16/bf16 go through fp32
 *    exactly as strata's fp32 compute does).
 * Outputs that must not be written (non-root recvbuff of reduce) and blocks a collective must fill
 * are first set to a poison byte pattern that no checked value takes.
 *
 * --compress (strataAllReduceCompressed, sum and avg of the floating types) draws the same way with
 * L at most CB_CODED_LIMIT (2^15): every partial sum stays below half of fp16's largest finite
 * value, 65504, so the fp16 codec on float data rounds (to multiples of up to 16: something for the
 * check to see) but never saturates, and no codec's error can carry a sum there. A lossy codec's
 * result is not the exact sum: cb_data_check_bound counts the elements farther from it than
 * eps x (N x A + S) (bench.c, the help text and README give the formula and each codec's eps).
 */
#include <math.h>
#include <string.h>

#include "collbench.h"
#include "reduce/half.h"

#define CB_POISON_BYTE 0xa5
/* The largest L of --compress's inputs: partial sums stay well inside fp16's range. */
#define CB_CODED_LIMIT 32768.0

static const char *const cb_dtype_names[strataNumTypes] = {
    "int8", "uint8", "int32", "uint32", "int64", "uint64", "half", "float", "double", "bfloat16"
};
static const size_t cb_dtype_sizes[strataNumTypes] = {1, 1, 4, 4, 8, 8, 2, 4, 8, 2};
static const char *const cb_op_names[CB_NUM_OPS] = {
    "sum", "prod", "max", "min", "avg", "mulsum"
};

size_t cb_dtype_size(strataDataType_t dtype)
{
    return ((unsigned)dtype < strataNumTypes) ? cb_dtype_sizes[dtype] : 0;
}

const char *cb_dtype_name(strataDataType_t dtype)
{
    return ((unsigned)dtype < strataNumTypes) ? cb_dtype_names[dtype] : "unknown";
}

const char *cb_op_name(int op)
{
    return (op >= 0 && op < CB_NUM_OPS) ? cb_op_names[op] : "";
}

static int cb_dtype_is_float(strataDataType_t dtype)
{
    return dtype == strataFloat16 || dtype == strataFloat32 || dtype == strataFloat64 ||
           dtype == strataBfloat16;
}

/* splitmix64 of a counter unique per (rank, k) for rank < 2^20: cheap, and neighbouring elements
 * and ranks get unrelated values. */
static inline uint64_t cb_hash(uint64_t seed, int rank, size_t k)
{
    uint64_t x = seed + 0x9e3779b97f4a7c15ULL * (((uint64_t)k << 20) ^ (uint32_t)rank);

    x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
    x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
    return x ^ (x >> 31);
}

/* Largest L with every integer of [-L, L] exact in dtype (fp64 stops at 2^52 so that the draw
 * below, computed in int64 and converted, is exact too). */
static double cb_exact_limit(strataDataType_t dtype)
{
    switch (dtype) {
    case strataFloat16:  return 2048.0;
    case strataBfloat16: return 256.0;
    case strataFloat32:  return 16777216.0;
    default:             return 4503599627370496.0;
    }
}

/* x rounded to dtype, the way strata rounds a result (fp16/bf16 from fp32; x is always exact in
 * fp32 for them, see the file comment). */
static double cb_fround(strataDataType_t dtype, double x)
{
    switch (dtype) {
    case strataFloat16:  return st_half_to_float(st_float_to_half((float)x));
    case strataBfloat16: return st_bf16_to_float(st_float_to_bf16((float)x));
    case strataFloat32:  return (float)x;
    default:             return x;
    }
}

static void cb_fstore(strataDataType_t dtype, void *buf, size_t i, double v)
{
    switch (dtype) {
    case strataFloat16:  ((uint16_t *)buf)[i] = st_float_to_half((float)v); break;
    case strataBfloat16: ((uint16_t *)buf)[i] = st_float_to_bf16((float)v); break;
    case strataFloat32:  ((float *)buf)[i] = (float)v; break;
    default:             ((double *)buf)[i] = v; break;
    }
}

static double cb_fload(strataDataType_t dtype, const void *buf, size_t i)
{
    switch (dtype) {
    case strataFloat16:  return st_half_to_float(((const uint16_t *)buf)[i]);
    case strataBfloat16: return st_bf16_to_float(((const uint16_t *)buf)[i]);
    case strataFloat32:  return ((const float *)buf)[i];
    default:             return ((const double *)buf)[i];
    }
}

static void cb_istore(size_t tsize, void *buf, size_t i, uint64_t v)
{
    switch (tsize) {
    case 1:  ((uint8_t *)buf)[i] = (uint8_t)v; break;
    case 4:  ((uint32_t *)buf)[i] = (uint32_t)v; break;
    default: ((uint64_t *)buf)[i] = v; break;
    }
}

static uint64_t cb_iload(size_t tsize, const void *buf, size_t i)
{
    switch (tsize) {
    case 1:  return ((const uint8_t *)buf)[i];
    case 4:  return ((const uint32_t *)buf)[i];
    default: return ((const uint64_t *)buf)[i];
    }
}

static uint64_t cb_imask(size_t tsize)
{
    return (tsize >= 8) ? ~0ULL : ((1ULL << (8 * tsize)) - 1);
}

/* v's low 8*tsize bits as a signed number. */
static int64_t cb_isext(uint64_t v, size_t tsize)
{
    unsigned shift = 64 - 8 * (unsigned)tsize;

    return (int64_t)(v << shift) >> shift;
}

/* Compares a and b as the type does (signed or unsigned, at its width): -1, 0 or 1. */
static int cb_icmp(const cb_data_t *data, uint64_t a, uint64_t b)
{
    if (data->is_signed) {
        int64_t sa = cb_isext(a, data->tsize), sb = cb_isext(b, data->tsize);

        return (sa > sb) - (sa < sb);
    }
    a &= cb_imask(data->tsize);
    b &= cb_imask(data->tsize);
    return (a > b) - (a < b);
}

/* 1/n correctly rounded to dtype, as strata's avg scales: of the three neighbours of the fp32
 * quotient's rounding, the one nearest 1/n by the exact error |c * n - 1| (c * n is exact in
 * double), ties to the even pattern. Going through fp32 alone could round twice. */
static double cb_recip(strataDataType_t dtype, int n)
{
    uint32_t bits, best = 0;
    double   c, err, best_err = INFINITY;
    float    f = (float)(1.0 / n);
    int      d;

    if (dtype == strataFloat64) {
        return 1.0 / n; /* IEEE division rounds once */
    }
    if (dtype == strataFloat32) {
        memcpy(&bits, &f, sizeof(bits));
    } else {
        bits = (dtype == strataFloat16) ? st_float_to_half(f) : st_float_to_bf16(f);
    }
    for (d = -1; d <= 1; d++) {
        uint32_t cand = bits + (uint32_t)d;
        float    cf;

        if (dtype == strataFloat32) {
            memcpy(&cf, &cand, sizeof(cf));
            c = cf;
        } else {
            c = (dtype == strataFloat16) ? st_half_to_float((uint16_t)cand)
                                         : st_bf16_to_float((uint16_t)cand);
        }
        err = fabs(c * n - 1.0);
        if (err < best_err || (err == best_err && (cand & 1) == 0)) {
            best_err = err;
            best     = cand;
        }
    }
    if (dtype == strataFloat32) {
        memcpy(&f, &best, sizeof(f));
        return f;
    }
    return (dtype == strataFloat16) ? st_half_to_float((uint16_t)best)
                                    : st_bf16_to_float((uint16_t)best);
}

/* Draws in [-amp, amp] on nz ranks with every partial sum of scale * draw inside [-lim, lim]. */
static void cb_data_spread(cb_data_t *data, double lim, double scale)
{
    data->amp = floor(lim / (scale * data->nranks));
    if (data->amp < 1) {
        data->amp = 1;
        data->nz  = (int)(lim / scale);
    }
}

/* cb_data_init with every partial sum within [-lim, lim] (lim at most the dtype's L). */
static void cb_data_setup(cb_data_t *data, strataDataType_t dtype, int op, int nranks,
                          uint64_t seed, double lim)
{
    memset(data, 0, sizeof(*data));
    data->dtype     = dtype;
    data->op        = op;
    data->nranks    = nranks;
    data->seed      = seed;
    data->tsize     = cb_dtype_size(dtype);
    data->is_float  = cb_dtype_is_float(dtype);
    data->is_signed = dtype == strataInt8 || dtype == strataInt32 || dtype == strataInt64;
    data->nz        = nranks;
    data->mult      = 1;
    data->amp       = lim;
    if (!data->is_float) {
        return;
    }

    switch (op) {
    case CB_OP_SUM:
        cb_data_spread(data, lim, 1);
        break;
    case CB_OP_PREMULSUM:
        cb_data_spread(data, lim, 4);
        data->mult = 2;
        break;
    case CB_OP_AVG:
        data->avg_scale = cb_recip(dtype, nranks);
        data->avg_exact = (nranks & (nranks - 1)) == 0;
        if (data->avg_exact) {
            cb_data_spread(data, lim, 1);
            data->mult = nranks;
        } else {
            data->nz  = 2;
            data->amp = floor(lim / 2);
        }
        break;
    case CB_OP_PROD:
        data->prod_twos = (dtype == strataFloat16) ? 15 : (dtype == strataFloat64) ? 60 : 30;
        if (data->prod_twos > nranks) {
            data->prod_twos = nranks;
        }
        break;
    default:
        break;
    }
}

void cb_data_init(cb_data_t *data, strataDataType_t dtype, int op, int nranks, uint64_t seed)
{
    cb_data_setup(data, dtype, op, nranks, seed, cb_exact_limit(dtype));
}

void cb_data_init_coded(cb_data_t *data, strataDataType_t dtype, int op, int nranks,
                        uint64_t seed)
{
    double lim = cb_exact_limit(dtype);

    cb_data_setup(data, dtype, op, nranks, seed, lim < CB_CODED_LIMIT ? lim : CB_CODED_LIMIT);
}

void cb_data_premul_scalar(strataDataType_t dtype, int rank, void *scalar)
{
    double f = (rank % 2) ? 0.5 : 2.0;

    if (cb_dtype_is_float(dtype)) {
        cb_fstore(dtype, scalar, 0, f);
    } else {
        cb_istore(cb_dtype_size(dtype), scalar, 0, (uint64_t)(rank % 3 + 1));
    }
}

/* Position of rank among the ranks of element k, rotating with k so that every rank takes every
 * role across the buffer. */
static inline int cb_slot(const cb_data_t *data, int rank, size_t k)
{
    return (int)((k % (size_t)data->nranks + (size_t)rank) % (size_t)data->nranks);
}

/* The input of rank at global element k, floating types. */
static double cb_fval(const cb_data_t *data, int rank, size_t k)
{
    uint64_t h = cb_hash(data->seed, rank, k);
    uint64_t span;
    double   v;

    if (data->op == CB_OP_PROD) {
        int twos = (int)(k % (size_t)(data->prod_twos + 1));

        v = (cb_slot(data, rank, k) < twos) ? 2.0 : 1.0;
        return (h & 1) ? -v : v;
    }
    if (data->nz < data->nranks && cb_slot(data, rank, k) >= data->nz) {
        return 0.0;
    }
    span = (uint64_t)data->amp * 2 + 1;
    return data->mult * ((double)(int64_t)(h % span) - data->amp);
}

/* The input of rank at global element k, integer types (truncated by the store). */
static inline uint64_t cb_ival(const cb_data_t *data, int rank, size_t k)
{
    return cb_hash(data->seed, rank, k);
}

static double cb_fexpect(const cb_data_t *data, size_t k)
{
    double acc = 0, x, s;
    int    r;

    switch (data->op) {
    case CB_OP_PROD:
        acc = 1;
        for (r = 0; r < data->nranks; r++) {
            acc *= cb_fval(data, r, k);
        }
        return acc;
    case CB_OP_MAX:
    case CB_OP_MIN:
        acc = cb_fval(data, 0, k);
        for (r = 1; r < data->nranks; r++) {
            x = cb_fval(data, r, k);
            if ((data->op == CB_OP_MAX) ? (x > acc) : (x < acc)) {
                acc = x;
            }
        }
        return acc;
    case CB_OP_AVG:
        for (r = 0; r < data->nranks; r++) {
            acc += cb_fround(data->dtype, cb_fval(data, r, k) * data->avg_scale);
        }
        return cb_fround(data->dtype, acc);
    case CB_OP_PREMULSUM:
        for (r = 0; r < data->nranks; r++) {
            s    = (r % 2) ? 0.5 : 2.0;
            acc += s * cb_fval(data, r, k);
        }
        return acc;
    default:
        for (r = 0; r < data->nranks; r++) {
            acc += cb_fval(data, r, k);
        }
        return acc;
    }
}

static uint64_t cb_iexpect(const cb_data_t *data, size_t k)
{
    size_t   ts   = data->tsize;
    uint64_t acc  = 0, x;
    int      r;

    switch (data->op) {
    case CB_OP_PROD:
        acc = 1;
        for (r = 0; r < data->nranks; r++) {
            acc *= cb_ival(data, r, k);
        }
        return acc;
    case CB_OP_MAX:
    case CB_OP_MIN:
        acc = cb_ival(data, 0, k);
        for (r = 1; r < data->nranks; r++) {
            x = cb_ival(data, r, k);
            if ((data->op == CB_OP_MAX) ? cb_icmp(data, x, acc) > 0 : cb_icmp(data, x, acc) < 0) {
                acc = x;
            }
        }
        return acc;
    case CB_OP_PREMULSUM:
        for (r = 0; r < data->nranks; r++) {
            acc += cb_ival(data, r, k) * (uint64_t)(r % 3 + 1);
        }
        return acc;
    default: /* sum, avg */
        for (r = 0; r < data->nranks; r++) {
            acc += cb_ival(data, r, k);
        }
        if (data->op == CB_OP_AVG) {
            /* C division truncates toward zero, as strata's integer avg does */
            acc = data->is_signed ? (uint64_t)(cb_isext(acc, ts) / data->nranks)
                                  : (acc & cb_imask(ts)) / (uint64_t)data->nranks;
        }
        return acc;
    }
}

void cb_data_fill(const cb_data_t *data, int rank, void *buf, size_t first, size_t count)
{
    size_t j;

    if (data->is_float) {
        for (j = 0; j < count; j++) {
            cb_fstore(data->dtype, buf, j, cb_fval(data, rank, first + j));
        }
    } else {
        for (j = 0; j < count; j++) {
            cb_istore(data->tsize, buf, j, cb_ival(data, rank, first + j));
        }
    }
}

void cb_data_poison(void *buf, size_t bytes)
{
    memset(buf, CB_POISON_BYTE, bytes);
}

size_t cb_data_check_copy(const cb_data_t *data, int src, const void *buf, size_t first,
                          size_t count)
{
    uint64_t mask  = cb_imask(data->tsize);
    size_t   wrong = 0, j;

    for (j = 0; j < count; j++) {
        if (data->is_float) {
            wrong += cb_fload(data->dtype, buf, j) != cb_fval(data, src, first + j);
        } else {
            wrong += ((cb_iload(data->tsize, buf, j) ^ cb_ival(data, src, first + j)) & mask) != 0;
        }
    }
    return wrong;
}

size_t cb_data_check_reduce(const cb_data_t *data, const void *buf, size_t first, size_t count)
{
    uint64_t mask  = cb_imask(data->tsize);
    size_t   wrong = 0, j;

    for (j = 0; j < count; j++) {
        if (data->is_float) {
            wrong += cb_fload(data->dtype, buf, j) != cb_fexpect(data, first + j);
        } else {
            wrong += ((cb_iload(data->tsize, buf, j) ^ cb_iexpect(data, first + j)) & mask) != 0;
        }
    }
    return wrong;
}

size_t cb_data_check_poison(const cb_data_t *data, const void *buf, size_t count)
{
    const unsigned char *p     = buf;
    size_t               wrong = 0, j, b;

    for (j = 0; j < count; j++) {
        for (b = 0; b < data->tsize; b++) {
            if (p[j * data->tsize + b] != CB_POISON_BYTE) {
                wrong++;
                break;
            }
        }
    }
    return wrong;
}

double cb_data_codec_eps(const strataCompressParams_t *params, strataDataType_t dtype)
{
    double u = dtype == strataFloat16 ? 0x1p-11 : dtype == strataBfloat16 ? 0x1p-8 : 0x1p-24;

    switch (params->codec) {
    case strataCodecNone: return 0.0;
    case strataCodecFp16: return 0x1p-11 + u;
    case strataCodecBf16: return 0x1p-8 + u;
    case strataCodecInt8: return 1.0 / 254.0 + u;
    default:              return 1.0; /* topk: a dropped element; sign: |v - s sgn v| <= max */
    }
}

/* The largest magnitude one rank contributes to a sum at an element: its input, times the avg
 * scale for avg (strata scales each input before summing). */
static double cb_data_max_term(const cb_data_t *data)
{
    double m = data->mult * data->amp;

    return data->op == CB_OP_AVG ? m * data->avg_scale : m;
}

size_t cb_data_check_bound(const cb_data_t *data, const void *buf, size_t first, size_t count,
                           double eps, int nnodes, int node_max, double *bound_p)
{
    double a = (double)node_max * cb_data_max_term(data), s = 0, e, bound;
    size_t wrong = 0, j;

    for (j = 0; j < count; j++) {
        e = fabs(cb_fexpect(data, first + j));
        s = (e > s) ? e : s;
    }
    /* + collbench's tolerance of the exact check, which is 0 */
    bound = eps * ((double)nnodes * a + s);
    for (j = 0; j < count; j++) {
        /* !(<=): a NaN is always wrong */
        wrong += !(fabs(cb_fload(data->dtype, buf, j) - cb_fexpect(data, first + j)) <= bound);
    }
    if (bound_p != NULL) {
        *bound_p = bound;
    }
    return wrong;
}
