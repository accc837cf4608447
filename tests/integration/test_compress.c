/*
 * test_compress.c - the compressed all-reduce (strataAllReduceCompressed, issue 22) on forked
 * ranks in emulated nodes (STRATA_HOSTID layouts 1x4, 2x2, 3+1), through the public API only.
 *
 * For every codec (none, fp16, bf16, int8, topk:0.1, topk:1, sign) and datatype (float, half,
 * bfloat16), out of place and in place:
 *   - the result is bitwise identical on every rank (a hash all-gathered);
 *   - it lies within the codec's stated bound of the exact sum (docs/compression.md):
 *       |got - exact| <= eps x (N A + S) + (nranks + 2) u (N A + S),
 *     N the nodes, A the largest magnitude of a node's partial sum, S of the exact sum, eps the
 *     codec's (fp16 2^-11, bf16 2^-8, int8 1/254, topk and sign 1), u the datatype's unit
 *     roundoff (the full-precision sums inside the node and of the decoded contributions);
 *   - codec none and topk at density 1 equal strataAllReduce (forced hier, the same chunks) bit
 *     for bit;
 *   - with error feedback, 50 calls on a fixed input sum to 50 x the exact sum within the bound
 *     of one call's residual (what the residual still holds), not 50 x one call's error.
 * Then the refusals: an op other than sum and avg, a count or datatype not the compressor's, a
 * compressor of another communicator, and ranks passing different codecs (the mismatch check
 * names the codec).
 * Inputs are exact in every datatype (8 significant bits, magnitudes 2^-14 .. 4), so the exact sum
 * is computed in double by every rank from every rank's closed-form input.
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

#define CZ_COUNT 10007 /* several 4 KiB chunks, blocks that do not divide evenly */
#define CZ_STEPS 50
#define CZ_ENV   "STRATA_ALGO=hier STRATA_HIER_CHUNK_SIZE=4k STRATA_CHUNK_SIZE=4k"

static const char *const cz_specs[] = {"none", "fp16", "bf16", "int8", "topk:0.1", "topk:1",
                                       "sign"};
static const strataDataType_t cz_dtypes[] = {strataFloat32, strataFloat16, strataBfloat16};

/* Rank r's element i: k / 128 x 2^e with |k| <= 128 (8 significant bits) and e in [-7, 2], or 0:
 * exact in bfloat16 and in half (no subnormal: at least 2^-14). */
static int cz_spread = 10; /* exponents e of the inputs: -7 .. cz_spread - 8 */

static double cz_input(int r, size_t i)
{
    uint64_t h = (uint64_t)(r + 1) * 0x9e3779b97f4a7c15ull ^ (uint64_t)i * 0xbf58476d1ce4e5b9ull;
    int      e;
    int      k;

    h ^= h >> 31;
    h *= 0x94d049bb133111ebull;
    h ^= h >> 29;
    k = (int)(h & 0xff) - 128;    /* 8 bits of mantissa with the sign */
    e = (int)((h >> 8) % (uint64_t)cz_spread) - 7; /* scale 2^-7 .. 2^2: magnitudes from 2^-7 to below 2^9 / 2^7 */
    if ((h >> 20) % 13 == 0) {
        return 0.0;
    }
    return ldexp((double)k / 128.0, e);
}

static double cz_unit(strataDataType_t dt)
{
    return dt == strataFloat16 ? ldexp(1, -11) : (dt == strataBfloat16 ? ldexp(1, -8)
                                                                      : ldexp(1, -24));
}

static double cz_eps(const char *spec)
{
    if (strcmp(spec, "none") == 0 || strcmp(spec, "topk:1") == 0) {
        return 0.0;
    }
    if (strcmp(spec, "fp16") == 0) {
        return ldexp(1, -11);
    }
    if (strcmp(spec, "bf16") == 0) {
        return ldexp(1, -8);
    }
    if (strcmp(spec, "int8") == 0) {
        return 1.0 / 254.0;
    }
    return 1.0;
}

/* The exact sum of element i, and the scale N A + S of the bound (over all elements). */
typedef struct cz_exact {
    double *sum;
    double  scale;
    int     nnodes;
} cz_exact_t;

static void cz_exact_make(it_ctx_t *c, const char *layout, size_t count, cz_exact_t *x)
{
    double *part = calloc((size_t)c->nranks, sizeof(double));
    double  a = 0.0, s = 0.0;

    x->sum = calloc(count, sizeof(double));
    if (part == NULL || x->sum == NULL) {
        abort();
    }
    it_layout_node(layout, c->nranks, 0, &x->nnodes);
    for (size_t i = 0; i < count; i++) {
        memset(part, 0, (size_t)c->nranks * sizeof(double));
        for (int r = 0; r < c->nranks; r++) {
            double v = cz_input(r, i);

            part[it_layout_node(layout, c->nranks, r, NULL)] += v;
            x->sum[i] += v;
        }
        for (int b = 0; b < x->nnodes; b++) {
            a = fmax(a, fabs(part[b]));
        }
        s = fmax(s, fabs(x->sum[i]));
    }
    x->scale = (double)x->nnodes * a + s;
    free(part);
}

static void *cz_fill(strataDataType_t dt, int r, size_t count)
{
    void *buf = malloc(count * it_dtype_size(dt));

    if (buf == NULL) {
        abort();
    }
    for (size_t i = 0; i < count; i++) {
        it_set(dt, buf, i, cz_input(r, i));
    }
    return buf;
}

/* Elements of got outside bound of the exact sum; names the first. */
static int cz_within(strataDataType_t dt, const void *got, const cz_exact_t *x, size_t count,
                     double bound, const char *what)
{
    size_t bad = 0, first = 0;

    for (size_t i = 0; i < count; i++) {
        double d = fabs(it_get(dt, got, i) - x->sum[i]);

        if (!(d <= bound)) {
            if (bad++ == 0) {
                first = i;
            }
        }
    }
    if (bad > 0) {
        IT_FAIL("%s: %zu of %zu elements outside the bound %g; [%zu] = %.9g, exact %.9g", what,
                bad, count, bound, first, it_get(dt, got, first), x->sum[first]);
    }
    return bad == 0;
}

typedef struct cz_arg {
    const char *layout;
} cz_arg_t;

/* Every codec x datatype, out of place and in place: identical, bounded, exact where exact. */
static int cz_codecs(it_ctx_t *c)
{
    const char *layout = ((cz_arg_t *)c->arg)->layout;
    cz_exact_t  x;

    cz_exact_make(c, layout, CZ_COUNT, &x);
    for (size_t t = 0; t < sizeof(cz_dtypes) / sizeof(cz_dtypes[0]); t++) {
        strataDataType_t dt = cz_dtypes[t];
        size_t           bytes = CZ_COUNT * it_dtype_size(dt);
        void            *in = cz_fill(dt, c->rank, CZ_COUNT), *plain = malloc(bytes);
        void            *out = malloc(bytes);
        size_t           plain_wire = 1;

        if (plain == NULL || out == NULL) {
            abort();
        }
        IT_OK(strataAllReduce(in, plain, CZ_COUNT, dt, strataSum, c->comm, NULL));
        for (size_t k = 0; k < sizeof(cz_specs) / sizeof(cz_specs[0]); k++) {
            strataCompressParams_t p;
            strataCompressor_t     cz = NULL;
            char                   what[96];
            double                 bound;
            size_t                 wire = 0;
            strataPhaseTimes_t     pt;

            if (!IT_OK(strataCompressParse(cz_specs[k], &p)) ||
                !IT_OK(strataCompressorCreate(&cz, &p, CZ_COUNT, dt))) {
                continue;
            }
            bound = (cz_eps(cz_specs[k]) + (double)(c->nranks + 2) * cz_unit(dt)) * x.scale;
            strataCompressWireBytes(&p, 1000000, dt, &wire);
            for (int inplace = 0; inplace < 2; inplace++) {
                snprintf(what, sizeof(what), "%s %s %s (%s)", cz_specs[k], it_dtype_name(dt),
                         inplace ? "in place" : "out of place", layout);
                IT_OK(strataCompressorReset(cz));
                if (inplace) {
                    memcpy(out, in, bytes);
                }
                if (!IT_OK(strataAllReduceCompressed(inplace ? out : in, out, CZ_COUNT, dt,
                                                     strataSum, cz, c->comm, NULL))) {
                    continue;
                }
                /* what crossed the network: the codec's share of the uncompressed bytes (the
                 * same call's, 2 (N-1) / N of the shard), within its blocks' rounding */
                if (IT_OK(strataCommGetPhaseTimes(c->comm, &pt)) && x.nnodes > 1) {
                    double want = (double)wire / (1e6 * (double)it_dtype_size(dt));

                    if (k == 0) {
                        plain_wire = pt.bytes[1];
                    }
                    IT_EXPECT(fabs((double)pt.bytes[1] / (double)plain_wire - want) <= 0.02 + 0.1 * want,
                              "%s: %zu B crossed the network, %.3f of the uncompressed %zu B; the "
                              "codec sends %.3f", what, pt.bytes[1],
                              (double)pt.bytes[1] / (double)plain_wire, plain_wire, want);
                }
                it_same_on_all(c->comm, out, bytes, what);
                cz_within(dt, out, &x, CZ_COUNT, bound, what);
                if (cz_eps(cz_specs[k]) == 0.0) {
                    it_expect_equal(dt, out, plain, CZ_COUNT, what);
                }
            }
            strataCompressorDestroy(cz);
        }
        free(in);
        free(plain);
        free(out);
    }
    free(x.sum);
    return 0;
}

/* The l2 distance of acc (the sum of t calls' results) from t x the exact sum. */
static double cz_drift(const double *acc, const cz_exact_t *x, size_t count, int t)
{
    double d2 = 0.0;

    for (size_t i = 0; i < count; i++) {
        double d = acc[i] - t * x->sum[i];

        d2 += d * d;
    }
    return sqrt(d2);
}

/* Error feedback: CZ_STEPS calls on one fixed input. The sum of the results is CZ_STEPS x the
 * exact sum less what the residuals hold at the end (it telescopes), so its distance from it is
 * bounded by the residuals' bound instead of growing with the steps as a biased codec's error
 * does without feedback (5x from step 10 to 50):
 *   - fp16 and int8: element-wise within two encodings' error bound (held[], in units of N A + S);
 *   - every codec: the l2 distance grows from step 10 to 50 by at most grow[] (fp16, int8: not at
 *     all; topk's and sign's residuals settle more slowly: their bound is 2 / delta times the
 *     input, delta >= density or 1 / block, Karimireddy et al. 2019, lemma 3), and is below a
 *     third of the distance without error feedback. */
static int cz_feedback(it_ctx_t *c)
{
    static const char *const specs[] = {"fp16", "int8", "topk:0.1", "sign"};
    /* element-wise bound of the residuals, in units of the scale N A + S: two encodings (the
     * node's contribution, the sum) of values within one step's error of the input */
    static const double held[] = {0x1p-10, 2.0 / 254.0, 0.0, 0.0};
    static const double grow[] = {1.1, 1.1, 1.5, 3.0};
    const char *layout = ((cz_arg_t *)c->arg)->layout;
    cz_exact_t  x;
    double     *acc = malloc(CZ_COUNT * sizeof(double));
    void       *in;
    float      *out = malloc(CZ_COUNT * sizeof(float));

    if (acc == NULL || out == NULL) {
        abort();
    }
    in = cz_fill(strataFloat32, c->rank, CZ_COUNT);
    cz_exact_make(c, layout, CZ_COUNT, &x);
    for (size_t k = 0; k < sizeof(specs) / sizeof(specs[0]); k++) {
        double with_ef = 0.0;

        for (int ef = 1; ef >= 0; ef--) {
            strataCompressParams_t p;
            strataCompressor_t     cz = NULL;
            double                 worst = 0.0, at10 = 0.0, at50;
            char                   what[64];

            if (!IT_OK(strataCompressParse(specs[k], &p))) {
                continue;
            }
            p.errorFeedback = ef;
            if (!IT_OK(strataCompressorCreate(&cz, &p, CZ_COUNT, strataFloat32))) {
                continue;
            }
            memset(acc, 0, CZ_COUNT * sizeof(double));
            for (int s = 1; s <= CZ_STEPS; s++) {
                IT_OK(strataAllReduceCompressed(in, out, CZ_COUNT, strataFloat32, strataSum, cz,
                                                c->comm, NULL));
                for (size_t i = 0; i < CZ_COUNT; i++) {
                    acc[i] += out[i];
                }
                if (s == 10) {
                    at10 = cz_drift(acc, &x, CZ_COUNT, s);
                }
            }
            at50 = cz_drift(acc, &x, CZ_COUNT, CZ_STEPS);
            for (size_t i = 0; i < CZ_COUNT; i++) {
                worst = fmax(worst, fabs(acc[i] - CZ_STEPS * x.sum[i]));
            }
            snprintf(what, sizeof(what), "%s%s (%s)", specs[k], ef ? "" : ",noef", layout);
            if (getenv("IT_VERBOSE") != NULL && c->rank == 0) {
                fprintf(stderr, "feedback %s: worst element %g after %d steps; l2 drift %g after "
                        "10, %g after %d (scale %g)\n", what, worst, CZ_STEPS, at10, at50,
                        CZ_STEPS, x.scale);
            }
            if (ef && held[k] > 0.0) {
                IT_EXPECT(worst <= held[k] * x.scale + CZ_STEPS * 1e-6 * x.scale,
                          "%s: the sum over %d steps is %g from %d x the exact sum; the residual "
                          "should hold at most %g", what, CZ_STEPS, worst, CZ_STEPS,
                          held[k] * x.scale);
            }
            if (ef && x.nnodes > 1) {
                with_ef = at50;
                IT_EXPECT(at50 <= grow[k] * at10 + 1e-3, "%s: the distance from t x the exact "
                          "sum grew from %g (t = 10) to %g (t = %d), more than %gx: the residual "
                          "does not carry what was dropped", what, at10, at50, CZ_STEPS, grow[k]);
            } else if (x.nnodes > 1) {
                IT_EXPECT(with_ef < at50 / 3.0, "%s: with error feedback the distance after %d "
                          "steps (%g) should be below a third of that without (%g)", what,
                          CZ_STEPS, with_ef, at50);
            }
            strataCompressorDestroy(cz);
        }
    }
    free(acc);
    free(in);
    free(out);
    free(x.sum);
    return 0;
}

/* Refusals, each on every rank: strataInvalidArgument with a message. */
static int cz_refusals(it_ctx_t *c)
{
    strataCompressParams_t p;
    strataCompressor_t     cz = NULL, half = NULL;
    strataComm_t           sub = NULL;
    float                  in[64], out[64];

    memset(in, 0, sizeof(in));
    if (!IT_OK(strataCompressParse("int8", &p)) ||
        !IT_OK(strataCompressorCreate(&cz, &p, 64, strataFloat32)) ||
        !IT_OK(strataCompressorCreate(&half, &p, 64, strataFloat16))) {
        return 1;
    }
    IT_RES(strataAllReduceCompressed(in, out, 64, strataFloat32, strataProd, cz, c->comm, NULL),
           strataInvalidArgument);
    IT_RES(strataAllReduceCompressed(in, out, 32, strataFloat32, strataSum, cz, c->comm, NULL),
           strataInvalidArgument);
    IT_RES(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, half, c->comm, NULL),
           strataInvalidArgument);
    IT_RES(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, NULL, c->comm, NULL),
           strataInvalidArgument);
    IT_OK(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, cz, c->comm, NULL));
    /* bound to c->comm now: another communicator is refused */
    if (IT_OK(strataCommSplit(c->comm, 0, c->rank, &sub, NULL))) {
        IT_RES(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, cz, sub, NULL),
               strataInvalidArgument);
        /* strataCompressorReset unbinds it: then the other communicator may take it */
        IT_OK(strataCompressorReset(cz));
        IT_OK(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, cz, sub, NULL));
        strataCommDestroy(sub);
    }
    /* calls queued on a stream hold the compressor: Reset and Destroy refuse until they are done */
    {
        strataStream_t s = NULL;

        IT_OK(strataCompressorReset(cz)); /* bound to sub above: back to c->comm */
        if (IT_OK(strataStreamCreate(&s))) {
            for (int k = 0; k < 4; k++) {
                IT_OK(strataAllReduceCompressed(in, out, 64, strataFloat32, strataSum, cz, c->comm,
                                                s));
            }
            IT_RES(strataCompressorDestroy(cz), strataInvalidUsage);
            IT_RES(strataCompressorReset(cz), strataInvalidUsage);
            IT_OK(strataStreamSynchronize(s));
            IT_OK(strataStreamDestroy(s));
        }
    }
    IT_OK(strataCompressorDestroy(cz));
    IT_OK(strataCompressorDestroy(half));
    return 0;
}

/* Ranks passing different codecs of one wire size (fp16 against bf16), or one codec with other
 * parameters (topk:0.1 against topk:0.2): every rank returns strataInvalidUsage, and the message
 * names both specs. Each on a communicator of its own (a mismatch fails the communicator). */
static int cz_mismatch(it_ctx_t *c)
{
    static const char *const pairs[][2] = {{"bf16", "fp16"}, {"topk:0.1", "topk:0.2"}};
    float                    in[4096], out[4096];

    for (size_t i = 0; i < 4096; i++) {
        in[i] = (float)i;
    }
    for (int k = 0; k < 2; k++) {
        strataCompressParams_t p;
        strataCompressor_t     cz = NULL;
        strataComm_t           sub = NULL;
        const char            *msg;

        if (!IT_OK(strataCommSplit(c->comm, 0, c->rank, &sub, NULL)) ||
            !IT_OK(strataCompressParse(pairs[k][c->rank == 0 ? 0 : 1], &p)) ||
            !IT_OK(strataCompressorCreate(&cz, &p, 4096, strataFloat32))) {
            return 1;
        }
        IT_RES(strataAllReduceCompressed(in, out, 4096, strataFloat32, strataSum, cz, sub, NULL),
               strataInvalidUsage);
        msg = strataGetLastError(sub);
        IT_EXPECT(msg != NULL && strstr(msg, pairs[k][0]) != NULL &&
                      strstr(msg, pairs[k][1]) != NULL,
                  "the mismatch message names both specs (%s, %s): '%s'", pairs[k][0],
                  pairs[k][1], msg != NULL ? msg : "(null)");
        strataCompressorDestroy(cz);
        strataCommDestroy(sub);
    }
    return 0;
}

static void cz_run(const char *layout, it_fn_t fn, int timeout_s)
{
    cz_arg_t  arg = {layout};
    it_opts_t o;

    memset(&o, 0, sizeof(o));
    o.nranks    = 4;
    o.layout    = layout;
    o.env       = CZ_ENV;
    o.timeout_s = timeout_s;
    assert_int_equal(it_run(&o, fn, &arg), 0);
}

static void test_codecs_1x4(void **state) { (void)state; cz_run("1", cz_codecs, 120); }
static void test_codecs_2x2(void **state) { (void)state; cz_run("2x2", cz_codecs, 120); }
static void test_codecs_3p1(void **state) { (void)state; cz_run("3+1", cz_codecs, 120); }
static void test_codecs_4x1(void **state) { (void)state; cz_run("4x1", cz_codecs, 120); }
static void test_feedback_2x2(void **state) { (void)state; cz_run("2x2", cz_feedback, 120); }
static void test_feedback_3p1(void **state) { (void)state; cz_run("3+1", cz_feedback, 120); }
static void test_refusals_2x2(void **state) { (void)state; cz_run("2x2", cz_refusals, 60); }
static void test_mismatch_2x2(void **state) { (void)state; cz_run("2x2", cz_mismatch, 60); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_codecs_1x4),   cmocka_unit_test(test_codecs_2x2),
        cmocka_unit_test(test_codecs_3p1),   cmocka_unit_test(test_codecs_4x1),
        cmocka_unit_test(test_feedback_2x2), cmocka_unit_test(test_feedback_3p1),
        cmocka_unit_test(test_refusals_2x2), cmocka_unit_test(test_mismatch_2x2),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
