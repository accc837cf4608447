/*
 * test_device.c - collectives on device buffers, run on the simulated device (STRATA_DEVICE=sim,
 * src/device/dev_sim.c) in several processes and across emulated nodes: every collective, every
 * dtype and op, in place and out, each result compared bit for bit with the same call on host
 * buffers (the host path, which test_colls checks against references); the order on the user's
 * stream (inputs produced on the stream before the call, results read after it, no host
 * synchronisation in between, with the simulated streams' random delays on); the API's refusals
 * (mixed memory, another device, a host stream, a stream being captured, no stream at all); abort,
 * a killed peer and a peer that never calls: the user's stream is released within the deadline
 * and the communicator's asynchronous error says why.
 *
 * Nothing here measures speed: the simulated device is a testing aid (README "GPU").
 */
#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "device/dev.h"
#include "device/dev_sim.h"
#include "harness.h"

#define SIM_ENV "STRATA_DEVICE=sim STRATA_SIM_DELAY_US=0"

static const st_dev_ops_t *dev_ops(void)
{
    const st_dev_ops_t *dev = st_dev();

    if (dev == NULL || strcmp(dev->name, "sim") != 0) {
        IT_FAIL("STRATA_DEVICE=sim did not give the simulated device");
        return NULL;
    }
    return dev;
}

/* Device memory of bytes (at least 1), zero-filled. */
static void *dmalloc(const st_dev_ops_t *dev, size_t bytes)
{
    void *p = NULL;

    if (dev->mem_alloc(bytes ? bytes : 1, &p) != ST_OK) {
        IT_FAIL("mem_alloc(%zu) failed", bytes);
        return NULL;
    }
    return p;
}

static void h2d(const st_dev_ops_t *dev, st_dev_stream_t *s, void *d, const void *h, size_t n)
{
    if (n > 0) {
        IT_EXPECT(dev->copy(d, h, n, s) == ST_OK, "copy to the device failed");
    }
}

static int ssync(const st_dev_ops_t *dev, st_dev_stream_t *s, double seconds)
{
    st_status_t st = dev->stream_sync(s, (long)(seconds * 1e6));

    return IT_EXPECT(st == ST_OK, "stream_sync gave %d after %.0f s", (int)st, seconds);
}

/* Deterministic input of rank, element i, for dt: small values (products stay exact for a few
 * ranks), some negative; floating types also get NaN and Inf now and then. */
static void fill(strataDataType_t dt, void *buf, size_t n, int rank, int salt)
{
    for (size_t i = 0; i < n; i++) {
        uint32_t h = (uint32_t)(i * 2654435761u) ^ (uint32_t)(rank * 40503 + salt * 977);
        double   v = (double)((int)(h % 7u) - 2) + (it_dtype_is_float(dt) ? 0.25 * (h % 3u) : 0);

        if (it_dtype_is_float(dt) && h % 1009u == 5u) {
            v = (h & 1u) ? NAN : INFINITY;
        }
        if (!it_dtype_is_signed(dt) && !it_dtype_is_float(dt) && v < 0) {
            v = -v;
        }
        it_set(dt, buf, i, v);
    }
}

typedef enum { C_AR, C_RS, C_AG, C_BC, C_RED, C_P2P, C_N } coll_t;
static const char *const coll_names[C_N] = {"all_reduce", "reduce_scatter", "all_gather",
                                            "broadcast", "reduce", "send/recv ring"};

/* One call of coll on (send, recv) with the stream; count as the API takes it. */
static strataResult_t call(coll_t c, const void *send, void *recv, size_t count,
                           strataDataType_t dt, strataRedOp_t op, strataComm_t comm, int rank,
                           int nranks, strataStream_t s)
{
    size_t es = it_dtype_size(dt);

    switch (c) {
    case C_AR: return strataAllReduce(send, recv, count, dt, op, comm, s);
    case C_RS: return strataReduceScatter(send, recv, count, dt, op, comm, s);
    case C_AG: return strataAllGather(send, recv, count, dt, comm, s);
    case C_BC: return strataBroadcast(send, recv, count, dt, nranks - 1, comm, s);
    case C_RED: return strataReduce(send, recv, count, dt, op, 0, comm, s);
    case C_P2P: {
        strataResult_t r1, r2, r3;

        (void)es;
        strataGroupStart();
        r1 = strataSend(send, count, dt, (rank + 1) % nranks, comm, s);
        r2 = strataRecv(recv, count, dt, (rank + nranks - 1) % nranks, comm, s);
        r3 = strataGroupEnd();
        return r1 != strataSuccess ? r1 : (r2 != strataSuccess ? r2 : r3);
    }
    default: return strataInternalError;
    }
}

/* Send and receive sizes (bytes) of a call of c with count. */
static void sizes(coll_t c, size_t count, size_t es, int nranks, size_t *sb, size_t *rb)
{
    *sb = count * es;
    *rb = count * es;
    if (c == C_RS) {
        *sb *= (size_t)nranks;
    } else if (c == C_AG) {
        *rb *= (size_t)nranks;
    }
}

typedef struct case_set {
    int full; /* every dtype x op for all-reduce (else a few) */
} case_set_t;

/* Runs coll on device buffers (stream s) and on host buffers (NULL stream) with the same inputs,
 * in place or not, and compares the receive buffers bit for bit. Returns 1 when equal. */
static int one_case(it_ctx_t *c, const st_dev_ops_t *dev, st_dev_stream_t *s, coll_t coll,
                    strataDataType_t dt, strataRedOp_t op, size_t count, int in_place)
{
    size_t   es = it_dtype_size(dt), sb, rb, off = 0;
    uint8_t *hs, *hr, *back;
    uint8_t *ds, *dr;
    int      ok = 1;

    if (in_place && (coll == C_RED || coll == C_P2P)) {
        return 1; /* reduce in place is covered by all-reduce; a ring in place is not NCCL's */
    }
    sizes(coll, count, es, c->nranks, &sb, &rb);
    /* in place: one buffer of the larger size; the send part at NCCL's offset */
    if (in_place && coll == C_AG) {
        off = (size_t)c->rank * count * es; /* send = recv + rank * count */
    } else if (in_place && coll == C_RS) {
        off = (size_t)c->rank * count * es; /* recv = send + rank * count */
    }
    {
        size_t big = sb > rb ? sb : rb;

        hs   = calloc(1, big + 1);
        hr   = calloc(1, big + 1);
        back = calloc(1, big + 1);
        ds   = dmalloc(dev, big);
        dr   = in_place ? ds : dmalloc(dev, big);
    }
    if (hs == NULL || hr == NULL || back == NULL || ds == NULL || dr == NULL) {
        IT_FAIL("out of memory");
        return 0;
    }
    /* inputs: in place, the send part inside the one buffer */
    {
        uint8_t *hsend = (in_place && coll == C_AG) ? hs + off : hs;

        fill(dt, hsend, sb / es, c->rank, (int)coll);
        h2d(dev, s, (in_place && coll == C_AG) ? ds + off : ds, hsend, sb);
        if (!in_place) {
            memset(hr, 0x5a, rb);
            h2d(dev, s, dr, hr, rb);
        }
    }
    /* device */
    {
        const void *dsend = (in_place && coll == C_AG) ? (const void *)(ds + off) : ds;
        void       *drecv = (in_place && coll == C_RS) ? (void *)(ds + off) : dr;

        if (!IT_OK(call(coll, dsend, drecv, count, dt, op, c->comm, c->rank, c->nranks,
                        (strataStream_t)s))) {
            ok = 0;
        }
        IT_EXPECT(dev->copy(back, in_place ? ds : dr, rb > sb ? rb : sb, s) == ST_OK,
                  "copy back failed");
        ok &= ssync(dev, s, 60);
    }
    /* host */
    {
        const void *hsend = (in_place && coll == C_AG) ? (const void *)(hs + off) : hs;
        void       *hrecv = in_place ? (coll == C_RS ? (void *)(hs + off) : (void *)hs) : hr;

        if (!IT_OK(call(coll, hsend, hrecv, count, dt, op, c->comm, c->rank, c->nranks, NULL))) {
            ok = 0;
        }
    }
    if (ok) {
        const uint8_t *want = in_place ? (coll == C_RS ? hs + off : hs) : hr;
        const uint8_t *got  = in_place ? (coll == C_RS ? back + off : back) : back;
        size_t         n    = rb; /* a reduce's non-root buffer too: left untouched */

        for (size_t i = 0; i < n; i++) {
            if (want[i] != got[i]) {
                IT_FAIL("%s %s %s count %zu %s: byte %zu differs: device 0x%02x, host 0x%02x",
                        coll_names[coll], it_dtype_name(dt), it_op_name(op), count,
                        in_place ? "in place" : "out of place", i, got[i], want[i]);
                ok = 0;
                break;
            }
        }
    }
    free(hs);
    free(hr);
    free(back);
    dev->mem_free(ds);
    if (!in_place) {
        dev->mem_free(dr);
    }
    return ok;
}

static const strataDataType_t all_types[] = {strataInt8,    strataUint8,   strataInt32,
                                             strataUint32,  strataInt64,   strataUint64,
                                             strataFloat16, strataFloat32, strataFloat64,
                                             strataBfloat16};
static const strataRedOp_t all_ops[] = {strataSum, strataProd, strataMax, strataMin, strataAvg};

/* AlltoAll, AlltoAllv (blocks with gaps, which must stay untouched), Gather and Scatter (root
 * n-1; the buffers a non-root rank does not use are NULL) on device buffers, each compared bit
 * for bit with the same call on host buffers. They run on host copies (core/stream.c). */
static void a2a_cases(it_ctx_t *c, const st_dev_ops_t *dev, st_dev_stream_t *s)
{
    static const char *const names[4] = {"AlltoAll", "AlltoAllv", "Gather", "Scatter"};
    int      n = c->nranks, r = c->rank, root = n - 1;
    size_t   count = 1031, es = sizeof(int32_t), bytes = (size_t)n * count * es;
    size_t  *v = calloc(4 * (size_t)n, sizeof(size_t));
    uint8_t *hs = calloc(1, bytes), *hr = calloc(1, bytes), *back = calloc(1, bytes);
    uint8_t *ds = dmalloc(dev, bytes), *dr = dmalloc(dev, bytes);

    if (v == NULL || hs == NULL || hr == NULL || back == NULL || ds == NULL || dr == NULL) {
        IT_FAIL("out of memory");
        goto out;
    }
    for (int p = 0; p < n; p++) {
        v[p]         = (size_t)((r + 2 * p) % 5) * 7;       /* sendcounts */
        v[n + p]     = (size_t)p * 40 + 1;                  /* sdispls */
        v[2 * n + p] = (size_t)((p + 2 * r) % 5) * 7;       /* recvcounts */
        v[3 * n + p] = (size_t)(n - 1 - p) * 40 + 3;        /* rdispls, blocks reversed */
    }
    for (int k = 0; k < 4; k++) {
        const uint8_t *dsend = (k == 3 && r != root) ? NULL : ds;
        uint8_t       *drecv = (k == 2 && r != root) ? NULL : dr;
        const uint8_t *hsend = (k == 3 && r != root) ? NULL : hs;
        uint8_t       *hrecv = (k == 2 && r != root) ? NULL : hr;
        strataResult_t res[2];

        fill(strataInt32, hs, bytes / es, r, 40 + k);
        memset(hr, 0x5a, bytes);
        h2d(dev, s, ds, hs, bytes);
        h2d(dev, s, dr, hr, bytes);
        for (int dev_run = 1; dev_run >= 0; dev_run--) {
            const void    *sb = dev_run ? (const void *)dsend : (const void *)hsend;
            void          *rb = dev_run ? (void *)drecv : (void *)hrecv;
            strataStream_t st = dev_run ? (strataStream_t)s : NULL;

            switch (k) {
            case 0:
                res[dev_run] = strataAlltoAll(sb, rb, count, strataInt32, c->comm, st);
                break;
            case 1:
                res[dev_run] = strataAlltoAllv(sb, v, v + n, rb, v + 2 * n, v + 3 * n,
                                               strataInt32, c->comm, st);
                break;
            case 2:
                res[dev_run] = strataGather(sb, rb, count, strataInt32, root, c->comm, st);
                break;
            default:
                res[dev_run] = strataScatter(sb, rb, count, strataInt32, root, c->comm, st);
                break;
            }
            IT_EXPECT(res[dev_run] == strataSuccess, "%s on %s buffers returned %d: %s",
                      names[k], dev_run ? "device" : "host", (int)res[dev_run],
                      strataGetLastError(c->comm));
            if (dev_run) {
                IT_EXPECT(dev->copy(back, dr, bytes, s) == ST_OK, "copy back failed");
                ssync(dev, s, 60);
            }
        }
        for (size_t i = 0; i < bytes; i++) {
            if (back[i] != hr[i]) {
                IT_FAIL("%s int32: byte %zu of the receive buffer differs: device 0x%02x, host "
                        "0x%02x", names[k], i, back[i], hr[i]);
                break;
            }
        }
    }
out:
    free(v);
    free(hs);
    free(hr);
    free(back);
    if (ds != NULL) {
        dev->mem_free(ds);
    }
    if (dr != NULL) {
        dev->mem_free(dr);
    }
}

static int rank_battery(it_ctx_t *c)
{
    const case_set_t   *cs  = c->arg;
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    static const size_t counts[] = {1, 4097, 70001};
    int                 ncases = 0;

    if (dev == NULL || !IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create failed")) {
        return 1;
    }
    for (size_t ci = 0; ci < sizeof(counts) / sizeof(counts[0]); ci++) {
        for (int coll = 0; coll < C_N; coll++) {
            for (int ip = 0; ip < 2; ip++) {
                for (size_t t = 0; t < sizeof(all_types) / sizeof(all_types[0]); t++) {
                    for (size_t o = 0; o < sizeof(all_ops) / sizeof(all_ops[0]); o++) {
                        int reduces = (coll == C_AR || coll == C_RS || coll == C_RED);

                        if (!reduces && o > 0) {
                            break;
                        }
                        /* every dtype x op up to 4097 elements in the full sets; a few beyond */
                        if ((!cs->full || ci == 2) &&
                            !(t == 7 || (t == 9 && o == 4) || (t == 0 && o == 2))) {
                            continue;
                        }
                        ncases++;
                        if (!one_case(c, dev, s, (coll_t)coll, all_types[t], all_ops[o],
                                      counts[ci], ip)) {
                            goto out;
                        }
                    }
                }
            }
        }
    }
    a2a_cases(c, dev, s);
    /* a premul-sum on device buffers */
    {
        strataRedOp_t op;
        float         scalar = 0.5f;

        if (IT_OK(strataRedOpCreatePreMulSum(&op, &scalar, strataFloat32,
                                             strataScalarHostImmediate, c->comm))) {
            one_case(c, dev, s, C_AR, strataFloat32, op, 4097, 0);
            one_case(c, dev, s, C_RS, strataFloat32, op, 4097, 1);
            IT_OK(strataRedOpDestroy(op, c->comm));
        }
    }
out:
    if (getenv("IT_VERBOSE") != NULL && c->rank == 0) {
        fprintf(stderr, "rank 0: %d cases on device and host buffers\n", ncases);
    }
    dev->stream_destroy(s);
    return 0;
}

static void test_battery_2x2(void **state)
{
    static const case_set_t cs = {1};
    assert_int_equal(it_run_simple(4, "2x2", SIM_ENV, rank_battery, (void *)&cs), 0);
}

/* hier forced: every collective over the device windows (3+1: a node of one rank owns two
 * shards) */
static void test_battery_3p1(void **state)
{
    static const case_set_t cs = {1};
    assert_int_equal(it_run_simple(4, "3+1", SIM_ENV " STRATA_ALGO=hier", rank_battery,
                                   (void *)&cs),
                     0);
}

/* One node of 3 ranks, the flat ring forced: the staged path for every collective. */
static void test_battery_ring(void **state)
{
    static const case_set_t cs = {0};
    assert_int_equal(it_run_simple(3, "1", SIM_ENV " STRATA_ALGO=ring", rank_battery, (void *)&cs),
                     0);
}

/* Random delays in every simulated stream command: ordering bugs show as wrong bytes. */
static void test_battery_delays(void **state)
{
    static const case_set_t cs = {0};
    assert_int_equal(it_run_simple(4, "2x2",
                                   "STRATA_DEVICE=sim STRATA_SIM_DELAY_US=300 STRATA_ALGO=hier",
                                   rank_battery, (void *)&cs),
                     0);
}

/* ---- stream order: produce, reduce, consume, all on one stream, one synchronize at the end -- */

static int rank_order(it_ctx_t *c)
{
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    enum { N = 100003, ROUNDS = 6 };
    float              *h   = malloc(N * sizeof(float) * (ROUNDS + 1));
    float              *d   = dev != NULL ? dmalloc(dev, N * sizeof(float)) : NULL;
    float              *d2  = dev != NULL ? dmalloc(dev, N * sizeof(float)) : NULL;

    if (h == NULL || d == NULL || d2 == NULL ||
        !IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create failed")) {
        return 1;
    }
    for (size_t i = 0; i < N; i++) {
        h[i] = (float)((c->rank + 1) * ((i % 13) + 1));
    }
    h2d(dev, s, d, h, N * sizeof(float));
    for (int r = 0; r < ROUNDS; r++) {
        /* out of place, then in place, each result copied out right behind it */
        IT_OK(strataAllReduce(d, d2, N, strataFloat32, strataSum, c->comm, (strataStream_t)s));
        IT_OK(strataAllReduce(d2, d2, N, strataFloat32, strataMax, c->comm, (strataStream_t)s));
        IT_EXPECT(dev->copy(h + (size_t)(r + 1) * N, d2, N * sizeof(float), s) == ST_OK, "copy");
        IT_EXPECT(dev->copy(d, d2, N * sizeof(float), s) == ST_OK, "copy");
        IT_OK(strataAllReduce(d, d, N, strataFloat32, strataMin, c->comm, (strataStream_t)s));
    }
    ssync(dev, s, 120);
    {
        double tri = 0;

        for (int r = 1; r <= c->nranks; r++) {
            tri += r;
        }
        for (int r = 0; r < ROUNDS; r++) {
            const float *res = h + (size_t)(r + 1) * N;
            double       mul = tri * pow(c->nranks, r);

            for (size_t i = 0; i < N; i += 997) {
                double want = mul * (double)((i % 13) + 1);

                if (!IT_EXPECT(res[i] == (float)want, "round %d element %zu: %g, expected %g", r,
                               i, (double)res[i], want)) {
                    break;
                }
            }
        }
    }
    dev->stream_destroy(s);
    dev->mem_free(d);
    dev->mem_free(d2);
    free(h);
    return 0;
}

static void test_stream_order(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", "STRATA_DEVICE=sim STRATA_SIM_DELAY_US=200",
                                   rank_order, NULL),
                     0);
}

/* ---- zero-copy on strataMemAlloc device memory ----------------------------------------------- */

static int rank_zero_copy(it_ctx_t *c)
{
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    enum { N = 300001 };
    int32_t            *d_in = NULL, *d_out = NULL, *h = calloc(N, sizeof(int32_t));

    if (dev == NULL || h == NULL || !IT_OK(strataMemAlloc((void **)&d_in, N * 4)) ||
        !IT_OK(strataMemAlloc((void **)&d_out, N * 4))) {
        return 1;
    }
    IT_EXPECT(dev->ptr_type(d_in, NULL) == ST_DEV_PTR_DEVICE,
              "strataMemAlloc with a current device did not give device memory");
    IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create");
    for (size_t i = 0; i < N; i++) {
        h[i] = (int32_t)(i % 1000) * (c->rank + 1);
    }
    for (int round = 0; round < 3; round++) {
        h2d(dev, s, d_in, h, N * 4);
        IT_OK(strataAllReduce(d_in, d_out, N, strataInt32, strataSum, c->comm,
                              (strataStream_t)s));
        IT_EXPECT(dev->copy(h, d_out, N * 4, s) == ST_OK, "copy");
        ssync(dev, s, 60);
        for (size_t i = 0; i < N; i += 101) {
            int64_t tri = (int64_t)c->nranks * (c->nranks + 1) / 2;
            int64_t want = (int64_t)(i % 1000) * tri;

            for (int k = 0; k < round; k++) {
                want *= c->nranks; /* each round reduces the previous result, equal everywhere */
            }
            if (!IT_EXPECT(h[i] == (int32_t)want, "round %d element %zu: %d, expected %lld",
                           round, i, h[i], (long long)want)) {
                break;
            }
        }
    }
    dev->stream_destroy(s);
    IT_OK(strataMemFree(d_in));
    IT_OK(strataMemFree(d_out));
    free(h);
    return 0;
}

static void test_zero_copy(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", SIM_ENV " STRATA_ALGO=hier", rank_zero_copy, NULL),
                     0);
}

/* ---- a group whose send and receive name two streams (NCCL allows it): one unit -------- */

static int rank_two_streams(it_ctx_t *c)
{
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *a = NULL, *b = NULL;
    enum { N = 1 << 20 };
    float              *h  = malloc(N * sizeof(float));
    float              *ds = dev != NULL ? dmalloc(dev, N * sizeof(float)) : NULL;
    float              *dr = dev != NULL ? dmalloc(dev, N * sizeof(float)) : NULL;
    int                 prev = (c->rank + c->nranks - 1) % c->nranks;

    if (h == NULL || ds == NULL || dr == NULL || dev->stream_create(&a) != ST_OK ||
        dev->stream_create(&b) != ST_OK) {
        IT_FAIL("setup failed");
        return 1;
    }
    for (size_t i = 0; i < N; i++) {
        h[i] = (float)(c->rank * 1000 + (int)(i % 997));
    }
    h2d(dev, a, ds, h, N * sizeof(float));
    strataGroupStart();
    IT_OK(strataSend(ds, N, strataFloat32, (c->rank + 1) % c->nranks, c->comm,
                     (strataStream_t)a));
    IT_OK(strataRecv(dr, N, strataFloat32, prev, c->comm, (strataStream_t)b));
    IT_OK(strataGroupEnd());
    IT_EXPECT(dev->copy(h, dr, N * sizeof(float), b) == ST_OK, "copy");
    ssync(dev, a, 30);
    ssync(dev, b, 30);
    for (size_t i = 0; i < N; i += 1009) {
        if (!IT_EXPECT(h[i] == (float)(prev * 1000 + (int)(i % 997)), "element %zu: %g from "
                       "rank %d", i, (double)h[i], prev)) {
            break;
        }
    }
    dev->stream_destroy(a);
    dev->stream_destroy(b);
    dev->mem_free(ds);
    dev->mem_free(dr);
    free(h);
    return 0;
}

static void test_group_two_streams(void **state)
{
    assert_int_equal(it_run_simple(2, "1", SIM_ENV " STRATA_TIMEOUT=20", rank_two_streams, NULL),
                     0);
}

/* ---- a split communicator inherits the device (and makes its own device windows) ---------- */

static int rank_split(it_ctx_t *c)
{
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    strataComm_t        sub = NULL;
    it_ctx_t            subc;

    if (dev == NULL || !IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create") ||
        !IT_OK(strataCommSplit(c->comm, c->rank % 2, c->rank, &sub, NULL))) {
        return 1;
    }
    subc        = *c;
    subc.comm   = sub;
    IT_OK(strataCommUserRank(sub, &subc.rank));
    IT_OK(strataCommCount(sub, &subc.nranks));
    one_case(&subc, dev, s, C_AR, strataFloat32, strataSum, 70001, 0);
    one_case(&subc, dev, s, C_RS, strataBfloat16, strataAvg, 4097, 1);
    one_case(&subc, dev, s, C_AG, strataInt8, strataSum, 4097, 0);
    IT_OK(strataCommDestroy(sub));
    dev->stream_destroy(s);
    return 0;
}

static void test_split(void **state)
{
    assert_int_equal(it_run_simple(4, "2x2", SIM_ENV " STRATA_ALGO=hier", rank_split, NULL), 0);
}

/* ---- refusals ------------------------------------------------------------------------------- */

static int has(const char *msg, const char *what)
{
    return IT_EXPECT(msg != NULL && strstr(msg, what) != NULL, "the error \"%s\" does not say '%s'",
                     msg ? msg : "(null)", what);
}

static int rank_refusals(it_ctx_t *c)
{
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    strataStream_t      hs  = NULL;
    float               host[16] = {0};
    float              *d0, *d1 = NULL;

    if (dev == NULL || !IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create")) {
        return 1;
    }
    d0 = dmalloc(dev, 64);
    IT_EXPECT(dev->set_current(1) == ST_OK, "set_current(1)");
    d1 = dmalloc(dev, 64);
    IT_EXPECT(dev->set_current(0) == ST_OK, "set_current(0)");
    /* mixed memory */
    if (IT_RES(strataAllReduce(d0, host, 16, strataFloat32, strataSum, c->comm,
                               (strataStream_t)s),
               strataInvalidArgument)) {
        has(strataGetLastError(c->comm), "host memory");
    }
    /* another device's buffer */
    if (IT_RES(strataAllReduce(d1, d1, 16, strataFloat32, strataSum, c->comm, (strataStream_t)s),
               strataInvalidArgument)) {
        has(strataGetLastError(c->comm), "device 1");
    }
    /* a strata host stream with device buffers */
    if (IT_OK(strataStreamCreate(&hs))) {
        if (IT_RES(strataAllReduce(d0, d0, 16, strataFloat32, strataSum, c->comm, hs),
                   strataInvalidUsage)) {
            has(strataGetLastError(c->comm), "host stream");
        }
        IT_OK(strataStreamDestroy(hs));
    }
    /* host buffers with a CUDA stream */
    if (IT_RES(strataAllReduce(host, host, 16, strataFloat32, strataSum, c->comm,
                               (strataStream_t)s),
               strataInvalidUsage)) {
        has(strataGetLastError(c->comm), "host buffers with CUDA stream");
    }
    /* a stream being captured */
    IT_EXPECT(st_dev_sim_set_capturing(s, 1) == ST_OK, "set_capturing");
    if (IT_RES(strataAllReduce(d0, d0, 16, strataFloat32, strataSum, c->comm, (strataStream_t)s),
               strataInvalidUsage)) {
        has(strataGetLastError(c->comm), "captured");
    }
    IT_EXPECT(st_dev_sim_set_capturing(s, 0) == ST_OK, "set_capturing");
    /* no stream at all */
    {
        static char not_a_stream[256];

        if (IT_RES(strataAllReduce(d0, d0, 16, strataFloat32, strataSum, c->comm,
                                   (strataStream_t)(void *)not_a_stream),
                   strataInvalidArgument)) {
            has(strataGetLastError(c->comm), "neither");
        }
    }
    /* a send to itself outside a group on device buffers would wait forever */
    if (IT_RES(strataSend(d0, 16, strataFloat32, c->rank, c->comm, (strataStream_t)s),
               strataInvalidUsage)) {
        has(strataGetLastError(c->comm), "to itself");
    }
    /* still usable: one good call on the stream */
    IT_OK(strataAllReduce(d0, d0, 16, strataFloat32, strataSum, c->comm, (strataStream_t)s));
    ssync(dev, s, 30);
    dev->mem_free(d0);
    dev->mem_free(d1);
    dev->stream_destroy(s);
    return 0;
}

static void test_refusals(void **state)
{
    assert_int_equal(it_run_simple(2, "1", SIM_ENV, rank_refusals, NULL), 0);
}

/* ---- abort, a killed peer, a peer that never calls: the stream is released ----------------- */

typedef enum { F_ABORT, F_EXIT, F_SILENT } fault_t;

static int rank_fault(it_ctx_t *c)
{
    fault_t             f   = (fault_t)(intptr_t)c->arg;
    const st_dev_ops_t *dev = dev_ops();
    st_dev_stream_t    *s   = NULL;
    float              *d;
    strataResult_t      ae  = strataSuccess;
    double              t0;

    if (dev == NULL || !IT_EXPECT(dev->stream_create(&s) == ST_OK, "stream_create")) {
        return 1;
    }
    d = dmalloc(dev, 1 << 20);
    if (c->rank == 1) {
        if (f == F_EXIT) {
            _exit(0); /* dies without a word */
        }
        sleep(f == F_SILENT ? 12 : 4); /* never calls */
        return 0;                      /* the harness destroys (the comm has failed) */
    }
    t0 = it_now();
    IT_OK(strataAllReduce(d, d, 1 << 18, strataFloat32, strataSum, c->comm, (strataStream_t)s));
    /* queued, not run: the stream still holds it (the live peer has not called; a dead one
     * may already have been noticed) */
    IT_EXPECT(f == F_EXIT || dev->stream_sync(s, 0) == ST_INPROGRESS,
              "the call did not leave its work queued");
    IT_EXPECT(it_now() - t0 < 10.0, "the call did not return at once (%.2f s)", it_now() - t0);
    if (f == F_ABORT) {
        sleep(1);
        t0 = it_now();
        IT_OK(strataCommAbort(c->comm));
        c->comm = NULL;
        ssync(dev, s, 10); /* released within 10 s of the abort */
    } else {
        ssync(dev, s, 60); /* STRATA_TIMEOUT=4 */
        IT_EXPECT(it_now() - t0 < 40.0, "the stream was released only after %.1f s",
                  it_now() - t0);
        if (IT_OK(strataCommGetAsyncError(c->comm, &ae))) {
            IT_EXPECT(ae == strataRemoteError || ae == strataTimeout || ae == strataSystemError,
                      "async error %d (%s) after a %s peer", (int)ae, strataGetErrorString(ae),
                      f == F_EXIT ? "dead" : "silent");
        }
        has(strataGetLastError(c->comm), "rank 1");
    }
    dev->mem_free(d);
    dev->stream_destroy(s);
    return 0;
}

static void test_abort_releases_stream(void **state)
{
    assert_int_equal(it_run_simple(2, "1", SIM_ENV, rank_fault, (void *)(intptr_t)F_ABORT), 0);
}

static void test_dead_peer_releases_stream(void **state)
{
    assert_int_equal(it_run_simple(2, "1", SIM_ENV " STRATA_TIMEOUT=4", rank_fault,
                                   (void *)(intptr_t)F_EXIT),
                     0);
}

static void test_silent_peer_releases_stream(void **state)
{
    assert_int_equal(it_run_simple(2, "1", SIM_ENV " STRATA_TIMEOUT=4", rank_fault,
                                   (void *)(intptr_t)F_SILENT),
                     0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_refusals),
        cmocka_unit_test(test_battery_2x2),
        cmocka_unit_test(test_battery_3p1),
        cmocka_unit_test(test_battery_ring),
        cmocka_unit_test(test_battery_delays),
        cmocka_unit_test(test_stream_order),
        cmocka_unit_test(test_zero_copy),
        cmocka_unit_test(test_split),
        cmocka_unit_test(test_group_two_streams),
        cmocka_unit_test(test_abort_releases_stream),
        cmocka_unit_test(test_dead_peer_releases_stream),
        cmocka_unit_test(test_silent_peer_releases_stream),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
