/*
 * topk.c - top-k sparsification: of an encoded range of n elements, the k = ceil(density x n)
 * (at least 1, at most n) of largest magnitude, ties going to the lower index, as k 32-bit
 * indexes (ascending) followed by k values in the datatype; the rest decode to 0 (Aji and
 * Heafield 2017; Stich et al. 2018 for the error feedback that makes it converge). A NaN counts
 * as the largest magnitude, so it is kept. The k-th largest magnitude is found by a quickselect
 * with a fixed pivot rule, so the choice is the same on every rank.
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
#include <string.h>

static size_t st_topk_k(const strataCompressParams_t *p, size_t n)
{
    double k = ceil(p->density * (double)n);

    return k < 1.0 ? 1 : (k > (double)n ? n : (size_t)k);
}

static size_t st_topk_wire(const strataCompressParams_t *p, size_t es, size_t n)
{
    return st_topk_k(p, n) * (4 + es);
}

static size_t st_topk_scratch(const strataCompressParams_t *p, size_t n)
{
    (void)p;
    return n;
}

/* |v| with a NaN as the largest */
static inline float st_topk_mag(float v)
{
    return v != v ? INFINITY : fabsf(v);
}

/* The k-th largest (1 <= k <= n) of a[0..n) (no NaN), reordering a: a quickselect with a
 * three-way partition around the median of three (descending). */
static float st_topk_select(float *a, size_t n, size_t k)
{
    size_t lo = 0, hi = n - 1, want = k - 1;

    for (;;) {
        size_t lt = lo, i = lo, gt = hi + 1;
        float  x = a[lo], y = a[lo + (hi - lo) / 2], z = a[hi], pivot;

        if (lo == hi) {
            return a[lo];
        }
        pivot = (x > y) ? ((y > z) ? y : (x > z ? z : x)) : ((x > z) ? x : (y > z ? z : y));
        while (i < gt) { /* [lo, lt): above the pivot, [lt, i): equal, [gt, hi]: below */
            float t = a[i];

            if (t > pivot) {
                a[i++] = a[lt];
                a[lt++] = t;
            } else if (t < pivot) {
                a[i] = a[--gt];
                a[gt] = t;
            } else {
                i++;
            }
        }
        if (want < lt) {
            hi = lt - 1;
        } else if (want >= gt) {
            lo = gt;
        } else {
            return pivot;
        }
    }
}

static void st_topk_encode(const strataCompressParams_t *p, strataDataType_t dt, const float *v,
                           size_t n, void *wire, float *res, void *dec, float *work)
{
    size_t k = st_topk_k(p, n), taken = 0, above = 0, ties = 0;
    char  *vals = (char *)wire + 4 * k;
    float  t;

    for (size_t i = 0; i < n; i++) {
        work[i] = st_topk_mag(v[i]);
    }
    t = st_topk_select(work, n, k);
    for (size_t i = 0; i < n; i++) {
        above += st_topk_mag(v[i]) > t;
    }
    /* every element above the threshold (fewer than k), and the first ties at it in index order
     * for the places left */
    for (size_t i = 0; i < n; i++) {
        float m = st_topk_mag(v[i]);
        int   keep = m > t || (m == t && ties < k - above);

        ties += (m == t && keep);
        if (keep) {
            uint32_t idx = (uint32_t)i;
            float    d;

            memcpy((char *)wire + 4 * taken, &idx, 4);
            st_codec_store(dt, vals, taken, v[i]);
            d = st_codec_load(dt, vals, taken);
            if (res != NULL) {
                res[i] = st_codec_residual(v[i], d);
            }
            if (dec != NULL) {
                st_codec_store(dt, dec, i, d);
            }
            taken++;
        } else {
            if (res != NULL) {
                res[i] = st_codec_residual(v[i], 0.0f);
            }
            if (dec != NULL) {
                st_codec_store(dt, dec, i, 0.0f);
            }
        }
    }
}

static void st_topk_decode(const strataCompressParams_t *p, strataDataType_t dt,
                           const void *wire, size_t n, void *dst)
{
    size_t      k = st_topk_k(p, n), es = dt == strataFloat32 ? 4 : 2;
    const char *vals = (const char *)wire + 4 * k;

    memset(dst, 0, n * es);
    for (size_t j = 0; j < k; j++) {
        uint32_t idx;

        memcpy(&idx, (const char *)wire + 4 * j, 4);
        if (idx < n) {
            memcpy((char *)dst + idx * es, vals + j * es, es);
        }
    }
}

const st_codec_ops_t st_codec_topk_ops = {"topk", st_topk_wire, st_topk_scratch, st_topk_encode,
                                          st_topk_decode};
