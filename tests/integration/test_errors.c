/*
 * test_errors.c - errors through the public API: each bad call must return the result that
 * include/strata.h documents, with a non-empty strataGetLastError, without crashing or hanging,
 * and must leave a good communicator usable. Also the bootstrap failures: a corrupted secret in
 * the unique id, and a rank that never joins (STRATA_BOOTSTRAP_TIMEOUT=3s); a missing or corrupt
 * STRATA_TOPO_FILE.
 *
 * Only calls that fail on every rank alike are made on multi-rank communicators (a call that
 * fails on one rank only would leave the others waiting in the collective); root-only argument
 * errors are tested on a one-rank communicator.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define BAD_ARG strataInvalidArgument
#define BAD_USE strataInvalidUsage

/* the communicator works: AllReduce sum int32 of rank+1 */
static void still_works(strataComm_t comm, const char *after)
{
    int     n = 0, r = 0;
    int32_t x, y = 0;

    if (!IT_OK(strataCommCount(comm, &n)) || !IT_OK(strataCommUserRank(comm, &r))) {
        return;
    }
    x = r + 1;
    if (IT_OK(strataAllReduce(&x, &y, 1, strataInt32, strataSum, comm, NULL))) {
        IT_EXPECT(y == n * (n + 1) / 2, "AllReduce after %s = %d, expected %d", after, y,
                  n * (n + 1) / 2);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* argument errors on a live communicator (every rank makes the same bad calls)                */
/* ------------------------------------------------------------------------------------------ */

static int bad_args(it_ctx_t *c)
{
    strataComm_t comm = c->comm;
    int          n    = c->nranks;
    float        s[8] = {0}, rcv[64] = {0};
    int          v    = 0;

    /* NULL buffers with count > 0 */
    IT_RES(strataAllReduce(NULL, rcv, 4, strataFloat32, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataAllReduce(s, NULL, 4, strataFloat32, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataAllGather(NULL, rcv, 4, strataFloat32, comm, NULL), BAD_ARG);
    IT_RES(strataAllGather(s, NULL, 4, strataFloat32, comm, NULL), BAD_ARG);
    IT_RES(strataReduceScatter(NULL, rcv, 4, strataFloat32, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataReduceScatter(rcv, NULL, 4, strataFloat32, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataBroadcast(s, NULL, 4, strataFloat32, 0, comm, NULL), BAD_ARG);
    IT_RES(strataReduce(NULL, rcv, 4, strataFloat32, strataSum, 0, comm, NULL), BAD_ARG);
    IT_RES(strataSend(NULL, 4, strataFloat32, 0, comm, NULL), BAD_ARG);
    IT_RES(strataRecv(NULL, 4, strataFloat32, 0, comm, NULL), BAD_ARG);
    /* count 0 with NULL buffers is fine */
    IT_RES(strataAllReduce(NULL, NULL, 0, strataFloat32, strataSum, comm, NULL), strataSuccess);
    IT_RES(strataAllGather(NULL, NULL, 0, strataFloat32, comm, NULL), strataSuccess);

    /* unknown datatype */
    IT_RES(strataAllReduce(s, rcv, 4, strataNumTypes, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataAllReduce(s, rcv, 4, (strataDataType_t)-1, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataAllGather(s, rcv, 4, strataNumTypes, comm, NULL), BAD_ARG);
    IT_RES(strataBroadcast(s, rcv, 4, strataNumTypes, 0, comm, NULL), BAD_ARG);
    IT_RES(strataReduce(s, rcv, 4, strataNumTypes, strataSum, 0, comm, NULL), BAD_ARG);
    IT_RES(strataReduceScatter(rcv, s, 4, strataNumTypes, strataSum, comm, NULL), BAD_ARG);
    IT_RES(strataSend(s, 4, strataNumTypes, 0, comm, NULL), BAD_ARG);
    IT_RES(strataRecv(rcv, 4, strataNumTypes, 0, comm, NULL), BAD_ARG);

    /* unknown op: 99, a handle value no PreMulSum made, the max value */
    IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, (strataRedOp_t)99, comm, NULL), BAD_ARG);
    IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, strataNumOps, comm, NULL), BAD_ARG);
    IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, strataMaxRedOp, comm, NULL), BAD_ARG);
    IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, (strataRedOp_t)-3, comm, NULL), BAD_ARG);
    IT_RES(strataReduce(s, rcv, 4, strataFloat32, (strataRedOp_t)99, 0, comm, NULL), BAD_ARG);
    IT_RES(strataReduceScatter(rcv, s, 4, strataFloat32, (strataRedOp_t)99, comm, NULL), BAD_ARG);

    /* root out of range */
    IT_RES(strataBroadcast(s, rcv, 4, strataFloat32, -1, comm, NULL), BAD_ARG);
    IT_RES(strataBroadcast(s, rcv, 4, strataFloat32, n, comm, NULL), BAD_ARG);
    IT_RES(strataReduce(s, rcv, 4, strataFloat32, strataSum, -1, comm, NULL), BAD_ARG);
    IT_RES(strataReduce(s, rcv, 4, strataFloat32, strataSum, n, comm, NULL), BAD_ARG);

    /* peer out of range, outside and inside a group */
    IT_RES(strataSend(s, 4, strataFloat32, n, comm, NULL), BAD_ARG);
    IT_RES(strataSend(s, 4, strataFloat32, -1, comm, NULL), BAD_ARG);
    IT_RES(strataRecv(rcv, 4, strataFloat32, n, comm, NULL), BAD_ARG);
    IT_RES(strataRecv(rcv, 4, strataFloat32, -1, comm, NULL), BAD_ARG);
    {
        strataResult_t r1, r2;

        IT_OK(strataGroupStart());
        r1 = strataSend(s, 4, strataFloat32, n + 5, comm, NULL);
        r2 = strataGroupEnd();
        IT_EXPECT(r1 == BAD_ARG || r2 == BAD_ARG, "Send to peer %d in a group: call %d, "
                  "GroupEnd %d; expected strataInvalidArgument from one of them", n + 5,
                  (int)r1, (int)r2);
    }

    /* all-to-all, all-to-all-v, gather, scatter (every rank alike) */
    {
        size_t cnt[64], dsp[64], zero[64] = {0};
        char  *big = calloc(4 * (size_t)n * 16 + 64, 1);

        for (int p = 0; p < n; p++) {
            cnt[p] = 2;
            dsp[p] = 2 * (size_t)p;
        }
        IT_RES(strataAlltoAll(NULL, rcv, 1, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(s, NULL, 1, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(rcv, rcv, 1, strataFloat32, comm, NULL), BAD_ARG); /* in place */
        IT_RES(strataAlltoAll(rcv, rcv + n - 1, 1, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(s, rcv, 1, strataNumTypes, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(s, rcv, (size_t)1 << 62, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(s, rcv, 1, strataFloat32, NULL, NULL), BAD_ARG);
        IT_RES(strataAlltoAll(NULL, NULL, 0, strataFloat32, comm, NULL), strataSuccess);
        IT_RES(strataAlltoAllv(big, NULL, dsp, rcv, cnt, dsp, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, NULL, rcv, cnt, dsp, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, NULL, dsp, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, cnt, NULL, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(NULL, cnt, dsp, rcv, cnt, dsp, strataFloat32, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, dsp, NULL, cnt, dsp, strataFloat32, comm, NULL), BAD_ARG);
        /* received blocks overlapping each other (every block at 0), or the blocks sent */
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, cnt, zero, strataFloat32, comm, NULL),
               n > 1 ? BAD_ARG : strataSuccess);
        IT_RES(strataAlltoAllv(rcv, cnt, dsp, rcv + 1, cnt, dsp, strataFloat32, comm, NULL),
               BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, cnt, dsp, strataNumTypes, comm, NULL), BAD_ARG);
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, cnt, dsp, strataFloat32, NULL, NULL), BAD_ARG);
        cnt[n - 1] = (size_t)1 << 61;
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, zero, dsp, strataFloat32, comm, NULL),
               BAD_ARG);
        cnt[n - 1] = 2;
        dsp[0] = SIZE_MAX - 1;
        IT_RES(strataAlltoAllv(big, cnt, dsp, rcv, zero, zero, strataFloat32, comm, NULL),
               BAD_ARG);
        dsp[0] = 0;
        /* zero counts: NULL buffers and any displacements are fine */
        IT_RES(strataAlltoAllv(NULL, zero, dsp, NULL, zero, zero, strataFloat32, comm, NULL),
               strataSuccess);
        IT_RES(strataGather(NULL, rcv, 4, strataFloat32, 0, comm, NULL), BAD_ARG);
        IT_RES(strataGather(s, rcv, 4, strataFloat32, -1, comm, NULL), BAD_ARG);
        IT_RES(strataGather(s, rcv, 4, strataFloat32, n, comm, NULL), BAD_ARG);
        IT_RES(strataGather(s, rcv, 4, strataNumTypes, 0, comm, NULL), BAD_ARG);
        IT_RES(strataGather(s, rcv, 4, strataFloat32, 0, NULL, NULL), BAD_ARG);
        IT_RES(strataScatter(s, NULL, 4, strataFloat32, 0, comm, NULL), BAD_ARG);
        IT_RES(strataScatter(s, rcv, 4, strataFloat32, -1, comm, NULL), BAD_ARG);
        IT_RES(strataScatter(s, rcv, 4, strataFloat32, n, comm, NULL), BAD_ARG);
        IT_RES(strataScatter(s, rcv, 4, strataNumTypes, 0, comm, NULL), BAD_ARG);
        IT_RES(strataScatter(s, rcv, 4, strataFloat32, 0, NULL, NULL), BAD_ARG);
        IT_RES(strataGather(NULL, NULL, 0, strataFloat32, 0, comm, NULL), strataSuccess);
        IT_RES(strataScatter(NULL, NULL, 0, strataFloat32, n - 1, comm, NULL), strataSuccess);
        free(big);
    }

    /* NULL communicator */
    IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, strataSum, NULL, NULL), BAD_ARG);
    IT_RES(strataAllGather(s, rcv, 4, strataFloat32, NULL, NULL), BAD_ARG);
    IT_RES(strataBroadcast(s, rcv, 4, strataFloat32, 0, NULL, NULL), BAD_ARG);
    IT_RES(strataReduce(s, rcv, 4, strataFloat32, strataSum, 0, NULL, NULL), BAD_ARG);
    IT_RES(strataReduceScatter(rcv, s, 4, strataFloat32, strataSum, NULL, NULL), BAD_ARG);
    IT_RES(strataSend(s, 4, strataFloat32, 0, NULL, NULL), BAD_ARG);
    IT_RES(strataRecv(rcv, 4, strataFloat32, 0, NULL, NULL), BAD_ARG);
    IT_RES(strataCommCount(NULL, &v), BAD_ARG);
    IT_RES(strataCommCount(comm, NULL), BAD_ARG);
    IT_RES(strataCommUserRank(NULL, &v), BAD_ARG);
    IT_RES(strataCommUserRank(comm, NULL), BAD_ARG);
    {
        strataResult_t ae;

        IT_RES(strataCommGetAsyncError(NULL, &ae), BAD_ARG);
        IT_RES(strataCommGetAsyncError(comm, NULL), BAD_ARG);
    }
    IT_RES(strataCommDestroy(NULL), BAD_USE);
    IT_RES(strataCommFinalize(NULL), BAD_USE);
    IT_RES(strataCommAbort(NULL), BAD_USE);
    IT_RES(strataCommSplit(comm, 0, 0, NULL, NULL), BAD_ARG);

    /* PreMulSum */
    {
        float         fs  = 2.0f;
        strataRedOp_t op  = strataSum, op2;
        double        dsend[4] = {1, 2, 3, 4}, drecv[4];

        IT_RES(strataRedOpCreatePreMulSum(NULL, &fs, strataFloat32, strataScalarHostImmediate,
                                          comm), BAD_ARG);
        IT_RES(strataRedOpCreatePreMulSum(&op2, NULL, strataFloat32, strataScalarHostImmediate,
                                          comm), BAD_ARG);
        IT_RES(strataRedOpCreatePreMulSum(&op2, &fs, strataNumTypes, strataScalarHostImmediate,
                                          comm), BAD_ARG);
        IT_RES(strataRedOpCreatePreMulSum(&op2, &fs, strataFloat32, strataScalarDevice, comm),
               BAD_ARG);
        IT_RES(strataRedOpCreatePreMulSum(&op2, &fs, strataFloat32, strataScalarHostImmediate,
                                          NULL), BAD_ARG);
        if (IT_OK(strataRedOpCreatePreMulSum(&op, &fs, strataFloat32, strataScalarHostImmediate,
                                             comm))) {
            /* made for float, used with double */
            IT_RES(strataAllReduce(dsend, drecv, 4, strataFloat64, op, comm, NULL), BAD_ARG);
            IT_RES(strataReduceScatter(dsend, drecv, 1, strataFloat64, op, comm, NULL), BAD_ARG);
            /* with float it works */
            {
                float fx[3] = {1, 2, 3}, fy[3] = {0};

                if (IT_OK(strataAllReduce(fx, fy, 3, strataFloat32, op, comm, NULL))) {
                    for (int k = 0; k < 3; k++) {
                        IT_EXPECT(fy[k] == 2.0f * (float)n * fx[k], "PreMulSum(2) [%d] = %g", k,
                                  fy[k]);
                    }
                }
            }
            IT_OK(strataRedOpDestroy(op, comm));
            /* a destroyed op */
            IT_RES(strataRedOpDestroy(op, comm), BAD_ARG);
            IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, op, comm, NULL), BAD_ARG);
        }
        IT_RES(strataRedOpDestroy(strataSum, comm), BAD_ARG);
        /* 64 op slots per communicator, the 65th is refused */
        {
            strataRedOp_t ops[65];
            int           made = 0;

            for (int k = 0; k < 64; k++) {
                if (!IT_OK(strataRedOpCreatePreMulSum(&ops[k], &fs, strataFloat32,
                                                      strataScalarHostImmediate, comm))) {
                    break;
                }
                made++;
            }
            if (made == 64) {
                IT_RES(strataRedOpCreatePreMulSum(&ops[64], &fs, strataFloat32,
                                                  strataScalarHostImmediate, comm), BAD_USE);
            }
            for (int k = 0; k < made; k++) {
                IT_OK(strataRedOpDestroy(ops[k], comm));
            }
            /* slots are reusable */
            if (IT_OK(strataRedOpCreatePreMulSum(&ops[0], &fs, strataFloat32,
                                                 strataScalarHostImmediate, comm))) {
                IT_OK(strataRedOpDestroy(ops[0], comm));
            }
        }
    }

    /* process-wide calls */
    IT_RES(strataGetVersion(NULL), BAD_ARG);
    IT_OK(strataGetVersion(&v));
    IT_EXPECT(v == STRATA_VERSION_CODE, "strataGetVersion = %d, header says %d", v,
              STRATA_VERSION_CODE);
    IT_EXPECT(strataGetErrorString((strataResult_t)99) != NULL &&
              strataGetErrorString((strataResult_t)99)[0] != '\0',
              "strataGetErrorString(99) is empty");
    for (int k = 0; k < strataNumResults; k++) {
        IT_EXPECT(strataGetErrorString((strataResult_t)k) != NULL,
                  "strataGetErrorString(%d) is NULL", k);
    }
    IT_RES(strataGetUniqueId(NULL), BAD_ARG);
    IT_RES(strataStreamCreate(NULL), BAD_ARG);
    IT_RES(strataStreamSynchronize(NULL), BAD_ARG);
    IT_RES(strataStreamQuery(NULL), BAD_ARG);
    IT_RES(strataStreamDestroy(NULL), BAD_ARG);
    IT_RES(strataGroupEnd(), BAD_USE);
    IT_RES(strataParamsPrint(NULL), BAD_ARG);
    {
        FILE *f = fopen("/dev/null", "w");

        if (f != NULL) {
            IT_OK(strataParamsPrint(f));
            fclose(f);
        }
    }
    /* a destroyed stream */
    {
        strataStream_t st = NULL;

        if (IT_OK(strataStreamCreate(&st)) && IT_OK(strataStreamDestroy(st))) {
            IT_RES(strataAllReduce(s, rcv, 4, strataFloat32, strataSum, comm, st), BAD_ARG);
        }
    }

    still_works(comm, "the argument errors");
    return 0;
}

/* The expected errors would each log a WARN line; strataGetLastError still has every message
 * (and IT_RES prints it when a result is not the expected one). */
#define QUIET "STRATA_DEBUG=NONE"

static void test_bad_args_n2(void **state)
{
    assert_int_equal(it_run_simple(2, "1+1", QUIET, bad_args, NULL), 0);
}

static void test_bad_args_n3(void **state)
{
    assert_int_equal(it_run_simple(3, "rr2", QUIET, bad_args, NULL), 0);
}

/* The table of what each call must refuse that bad_args does not cover: counts whose byte size
 * overflows (every collective and send/recv, each dtype size), point-to-point to oneself outside
 * a group, and a message for each (strataGetLastError names the function). The same calls on
 * every rank, so no rank is left waiting. */
static int bad_input_table(it_ctx_t *c)
{
    strataComm_t comm = c->comm;
    int          n    = c->nranks, me = c->rank;
    float        buf[8] = {0};
    struct {
        strataDataType_t dt;
        size_t           count;
    } big[] = {
        {strataInt8, SIZE_MAX},          {strataFloat32, SIZE_MAX / 2},
        {strataFloat64, SIZE_MAX / 8 + 1}, {strataFloat16, (SIZE_MAX >> 1) + 1},
        {strataInt8, (size_t)1 << 49},  {strataFloat32, ((size_t)1 << 48) / 4 + 1},
    };

    for (size_t i = 0; i < sizeof(big) / sizeof(big[0]); i++) {
        strataDataType_t dt = big[i].dt;
        size_t           k  = big[i].count;

        IT_RES(strataAllReduce(buf, buf, k, dt, strataSum, comm, NULL), BAD_ARG);
        IT_RES(strataReduce(buf, buf, k, dt, strataSum, 0, comm, NULL), BAD_ARG);
        IT_RES(strataBroadcast(buf, buf, k, dt, 0, comm, NULL), BAD_ARG);
        IT_RES(strataAllGather(buf, buf, k, dt, comm, NULL), BAD_ARG);
        IT_RES(strataReduceScatter(buf, buf, k, dt, strataSum, comm, NULL), BAD_ARG);
        IT_RES(strataSend(buf, k, dt, (me + 1) % n, comm, NULL), BAD_ARG);
        IT_RES(strataRecv(buf, k, dt, (me + n - 1) % n, comm, NULL), BAD_ARG);
        IT_EXPECT(strstr(strataGetLastError(comm), "overflows") != NULL,
                  "the message for count %zu does not say it overflows: \"%s\"", k,
                  strataGetLastError(comm));
    }
    /* all-gather's receive side is nranks times the count: a count fine for all-reduce can
     * overflow it */
    {
        size_t k = ((size_t)1 << 48) / (size_t)n / 4 + 1;

        if (n > 1) {
            IT_RES(strataAllGather(buf, buf, k, strataFloat32, comm, NULL), BAD_ARG);
            IT_RES(strataReduceScatter(buf, buf, k, strataFloat32, strataSum, comm, NULL),
                   BAD_ARG);
        }
    }
    /* to oneself outside a group, no stream: would wait forever */
    IT_RES(strataSend(buf, 4, strataFloat32, me, comm, NULL), BAD_USE);
    IT_EXPECT(strstr(strataGetLastError(comm), "outside a group") != NULL,
              "self-send message: \"%s\"", strataGetLastError(comm));
    IT_RES(strataRecv(buf, 4, strataFloat32, me, comm, NULL), BAD_USE);
    IT_RES(strataSend(buf, 0, strataFloat32, me, comm, NULL), BAD_USE);
    /* ... and inside one it is fine: the data arrives */
    {
        int32_t out[5] = {me * 10, me * 10 + 1, me * 10 + 2, me * 10 + 3, me * 10 + 4};
        int32_t in[5]  = {-1, -1, -1, -1, -1};

        IT_OK(strataGroupStart());
        IT_OK(strataSend(out, 5, strataInt32, me, comm, NULL));
        IT_OK(strataRecv(in, 5, strataInt32, me, comm, NULL));
        if (IT_OK(strataGroupEnd())) {
            IT_EXPECT(memcmp(in, out, sizeof(in)) == 0, "self send/recv in a group: got "
                      "[%d %d %d %d %d]", in[0], in[1], in[2], in[3], in[4]);
        }
    }
    still_works(comm, "the bad-input table");
    return 0;
}

/* STRATA_TIMEOUT=0 means no deadline (strata.h): init, split's exchanges and collectives work */
static int timeout_zero(it_ctx_t *c)
{
    still_works(c->comm, "init with STRATA_TIMEOUT=0");
    return 0;
}

static void test_timeout_zero_n2(void **state)
{
    assert_int_equal(it_run_simple(2, "1+1", "STRATA_TIMEOUT=0", timeout_zero, NULL), 0);
}

/* 0 means no deadline for every deadline variable (issue 16): with STRATA_BOOTSTRAP_TIMEOUT=0
 * and STRATA_CONNECT_TIMEOUT=0, a rank that joins 1.5 s late is waited for, and the
 * communicator works. */
static int deadlines_zero(it_ctx_t *c)
{
    strataComm_t comm = NULL;
    double       t0 = it_now();

    if (c->rank == 1) {
        usleep(1500 * 1000);
    }
    if (!IT_OK(strataCommInitRank(&comm, c->nranks, c->id, c->rank))) {
        return 1;
    }
    IT_EXPECT(c->rank != 0 || it_now() - t0 > 1.4, "rank 0's init returned after %.2f s, before "
              "the late rank joined", it_now() - t0);
    still_works(comm, "init with STRATA_BOOTSTRAP_TIMEOUT=0 and a late rank");
    IT_OK(strataCommDestroy(comm));
    return 0;
}

static void test_deadlines_zero_n2(void **state)
{
    it_opts_t o = {.nranks = 2, .layout = "1+1", .no_init = 1, .timeout_s = 60,
                   .env = "STRATA_BOOTSTRAP_TIMEOUT=0 STRATA_CONNECT_TIMEOUT=0"};

    assert_int_equal(it_run(&o, deadlines_zero, NULL), 0);
}

/* A deadline too short to meet (STRATA_TIMEOUT=1ms) gives strataTimeout saying which deadline
 * (or strataRemoteError naming the rank whose own deadline passed first and broke its
 * connections), or init succeeds on a quick machine; never another error (it gave
 * strataSystemError, "Destination is unreachable"). */
static int timeout_tiny(it_ctx_t *c)
{
    strataComm_t   comm = NULL;
    strataResult_t res;

    for (int k = 0; k < 3; k++) {
        comm = NULL;
        res  = strataCommInitRank(&comm, c->nranks, c->ids[k], c->rank);
        if (res == strataSuccess) {
            strataCommDestroy(comm);
            continue;
        }
        IT_EXPECT(res == strataTimeout || res == strataRemoteError, "init %d with "
                  "STRATA_TIMEOUT=1ms returned %d (%s), expected strataTimeout: %s", k, (int)res,
                  strataGetErrorString(res), strataGetLastError(NULL));
        IT_EXPECT(res != strataTimeout || strstr(strataGetLastError(NULL), "STRATA_TIMEOUT"),
                  "init %d's timeout does not name its deadline: \"%s\"", k,
                  strataGetLastError(NULL));
        IT_EXPECT(res != strataRemoteError || strstr(strataGetLastError(NULL), "rank "),
                  "init %d's remote error does not name the rank: \"%s\"", k,
                  strataGetLastError(NULL));
    }
    return 0;
}

static void test_timeout_tiny_n4(void **state)
{
    it_opts_t o = {.nranks = 4, .layout = "2x2", .no_init = 1, .timeout_s = 60, .nids = 3,
                   .env = "STRATA_TIMEOUT=1ms " QUIET};

    assert_int_equal(it_run(&o, timeout_tiny, NULL), 0);
}

/* A timeout in small's leaders' exchange names the leader waited for (issue 16): 2 x 2, rank 2
 * (node 1's leader) never calls the 8-byte all-reduce; rank 0, node 0's leader, times out in the
 * exchange naming rank 2. */
static int small_exchange_timeout(it_ctx_t *c)
{
    int32_t        x = 1, y = 0;
    strataResult_t res;
    const char    *msg;

    if (c->rank == 2) {
        usleep(3500 * 1000); /* past the others' deadline, then leaves */
        return 0;
    }
    res = strataAllReduce(&x, &y, 1, strataInt32, strataSum, c->comm, NULL);
    msg = strataGetLastError(c->comm);
    IT_EXPECT(res == strataTimeout || res == strataRemoteError, "the all-reduce rank 2 never "
              "joined returned %d (%s): %s", (int)res, strataGetErrorString(res), msg);
    IT_EXPECT(c->rank != 0 || (strstr(msg, "leaders' exchange") != NULL &&
                               strstr(msg, "rank 2") != NULL),
              "rank 0's error does not name the leaders' exchange and rank 2: \"%s\"", msg);
    return 0;
}

static void test_small_exchange_timeout_2x2(void **state)
{
    it_opts_t o = {.nranks = 4, .layout = "2x2", .timeout_s = 60,
                   .env = "STRATA_TIMEOUT=2s STRATA_ALGO=small STRATA_CHECK_MISMATCH=0"};

    assert_int_equal(it_run(&o, small_exchange_timeout, NULL), 0);
}

static void test_bad_input_table_n2(void **state)
{
    assert_int_equal(it_run_simple(2, "1+1", QUIET, bad_input_table, NULL), 0);
}

static void test_bad_input_table_n3(void **state)
{
    assert_int_equal(it_run_simple(3, "2+1", QUIET, bad_input_table, NULL), 0);
}

/* strata.h: strataGetLastError explains "the last failure of the calling thread" and "stays valid
 * until the thread's next failing strata call": successful calls in between must not erase it. */
static int last_error_persists(it_ctx_t *c)
{
    float         s[4] = {0}, r[4];
    float         two = 2.0f;
    strataRedOp_t op;
    char          first[512];
    FILE         *f = fopen("/dev/null", "w");

    IT_RES(strataAllReduce(NULL, r, 4, strataFloat32, strataSum, c->comm, NULL), BAD_ARG);
    snprintf(first, sizeof(first), "%s", strataGetLastError(NULL));
    IT_OK(strataAllReduce(s, r, 4, strataFloat32, strataSum, c->comm, NULL));
    IT_EXPECT(strcmp(strataGetLastError(NULL), first) == 0, "after a successful AllReduce the last "
              "error is \"%s\", was \"%s\"", strataGetLastError(NULL), first);
    if (f != NULL) {
        IT_OK(strataParamsPrint(f));
        fclose(f);
        IT_EXPECT(strcmp(strataGetLastError(NULL), first) == 0, "after a successful "
                  "strataParamsPrint the last error is \"%s\", was \"%s\"",
                  strataGetLastError(NULL), first);
    }
    if (IT_OK(strataRedOpCreatePreMulSum(&op, &two, strataFloat32, strataScalarHostImmediate,
                                         c->comm))) {
        IT_OK(strataRedOpDestroy(op, c->comm));
        IT_EXPECT(strcmp(strataGetLastError(NULL), first) == 0, "after a successful "
                  "strataRedOpCreatePreMulSum/Destroy the last error is \"%s\", was \"%s\"",
                  strataGetLastError(NULL), first);
    }
    return 0;
}

static void test_last_error_persists(void **state)
{
    assert_int_equal(it_run_simple(1, "1", QUIET, last_error_persists, NULL), 0);
}

/* root-only arguments, on one rank */
static int bad_root_args(it_ctx_t *c)
{
    float s[4] = {1, 2, 3, 4}, r[4];

    IT_RES(strataBroadcast(NULL, r, 4, strataFloat32, 0, c->comm, NULL), BAD_ARG);
    IT_RES(strataReduce(s, NULL, 4, strataFloat32, strataSum, 0, c->comm, NULL), BAD_ARG);
    IT_RES(strataSend(s, 4, strataFloat32, 1, c->comm, NULL), BAD_ARG);
    IT_RES(strataGather(s, NULL, 4, strataFloat32, 0, c->comm, NULL), BAD_ARG);
    IT_RES(strataScatter(NULL, r, 4, strataFloat32, 0, c->comm, NULL), BAD_ARG);
    {
        size_t one[1] = {4}, three[1] = {3}, zero[1] = {0};

        /* one rank: its own pair must agree, or strataInvalidUsage naming both counts */
        IT_RES(strataAlltoAllv(s, one, zero, r, three, zero, strataFloat32, c->comm, NULL),
               BAD_USE);
    }
    still_works(c->comm, "the root argument errors");
    return 0;
}

static void test_bad_root_args_n1(void **state)
{
    assert_int_equal(it_run_simple(1, "1", QUIET, bad_root_args, NULL), 0);
}

/* Errors inside a group: a call rejected at queue time fails strataGroupEnd too, and a stream
 * destroyed while a call waits in the open group fails it instead of dropping the call silently. */
static int group_errors(it_ctx_t *c)
{
    float          s[4] = {1, 2, 3, 4}, r[4] = {0};
    strataStream_t stream;

    IT_OK(strataGroupStart());
    IT_OK(strataAllReduce(s, r, 4, strataFloat32, strataSum, c->comm, NULL));
    IT_RES(strataAllReduce(s, NULL, 4, strataFloat32, strataSum, c->comm, NULL), BAD_ARG);
    IT_RES(strataGroupEnd(), BAD_ARG);
    IT_EXPECT(r[3] == 4.0f, "the valid call of the group did not run (r[3] = %g)", r[3]);

    IT_OK(strataStreamCreate(&stream));
    IT_OK(strataGroupStart());
    IT_OK(strataAllReduce(s, r, 4, strataFloat32, strataSum, c->comm, stream));
    IT_OK(strataStreamDestroy(stream));
    IT_RES(strataGroupEnd(), BAD_ARG);
    IT_RES(strataGroupEnd(), BAD_USE); /* no group open any more */
    still_works(c->comm, "the group errors");
    return 0;
}

static void test_group_errors_n1(void **state)
{
    assert_int_equal(it_run_simple(1, "1", QUIET, group_errors, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* init arguments (with a second id, so a call wrongly accepted cannot disturb the first)       */
/* ------------------------------------------------------------------------------------------ */

static int bad_init_args(it_ctx_t *c)
{
    strataComm_t   x = NULL;
    strataComm_t   all[3];
    strataUniqueId id = c->ids[1];
    double         t0 = it_now();

    IT_RES(strataCommInitRank(NULL, 2, id, 0), BAD_ARG);
    IT_RES(strataCommInitRank(&x, 0, id, 0), BAD_ARG);
    IT_RES(strataCommInitRank(&x, -1, id, 0), BAD_ARG);
    IT_RES(strataCommInitRank(&x, 2, id, 2), BAD_ARG);
    IT_RES(strataCommInitRank(&x, 2, id, 7), BAD_ARG);
    IT_RES(strataCommInitRank(&x, 2, id, -1), BAD_ARG);
    IT_RES(strataCommInitAll(NULL, 3, NULL), BAD_ARG);
    IT_RES(strataCommInitAll(all, 0, NULL), BAD_ARG);
    {
        strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;

        cfg.magic = 0x12345678u;
        IT_RES(strataCommInitRankConfig(&x, 2, id, c->rank, &cfg), BAD_ARG);
    }
    {
        strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;

        cfg.size = 3;
        IT_RES(strataCommInitRankConfig(&x, 2, id, c->rank, &cfg), BAD_ARG);
    }
    {
        strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;

        cfg.timeoutMs = -5;
        IT_RES(strataCommInitRankConfig(&x, 2, id, c->rank, &cfg), BAD_ARG);
    }
    IT_EXPECT(it_now() - t0 < 2.0, "argument errors of init took %.2f s (they must not wait for "
              "the bootstrap)", it_now() - t0);
    IT_EXPECT(x == NULL, "a failed init set *comm");
    still_works(c->comm, "the init argument errors");
    return 0;
}

static void test_bad_init_args(void **state)
{
    it_opts_t o = {.nranks = 2, .layout = "1+1", .nids = 2,
                   .env = "STRATA_BOOTSTRAP_TIMEOUT=5s " QUIET, .timeout_s = 60};

    assert_int_equal(it_run(&o, bad_init_args, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* a bad STRATA_TOPO_FILE                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* Every rank has the same bad file: init fails at once (before the bootstrap) with
 * strataInvalidArgument naming the variable, the file and the cause, and sets no comm. */
static int bad_topo_file(it_ctx_t *c)
{
    const char  *why = c->arg;
    const char  *file = getenv("STRATA_TOPO_FILE");
    strataComm_t comm = NULL;
    double       t0 = it_now();

    IT_RES(strataCommInitRank(&comm, c->nranks, c->id, c->rank), BAD_ARG);
    IT_EXPECT(comm == NULL, "a failed init set *comm");
    IT_EXPECT(file != NULL && strstr(strataGetLastError(NULL), file) != NULL &&
              strstr(strataGetLastError(NULL), "STRATA_TOPO_FILE") != NULL &&
              strstr(strataGetLastError(NULL), why) != NULL,
              "the error \"%s\" does not name STRATA_TOPO_FILE, the file and \"%s\"",
              strataGetLastError(NULL), why);
    IT_EXPECT(it_now() - t0 < 5.0, "a bad topology file took %.1f s to fail init",
              it_now() - t0);
    return 0;
}

static void test_bad_topo_file(void **state)
{
    char        path[128], env[512];
    const char *tmp = getenv("TMPDIR");
    FILE       *f;
    it_opts_t   o = {.nranks = 2, .layout = "1+1", .no_init = 1, .env = env, .timeout_s = 60};

    snprintf(env, sizeof(env), "STRATA_TOPO_FILE=/nonexistent/strata/topo.xml "
             "STRATA_BOOTSTRAP_TIMEOUT=5s " QUIET);
    assert_int_equal(it_run(&o, bad_topo_file, (void *)"No such file or directory"), 0);

    snprintf(path, sizeof(path), "%s/strata-test-corrupt-%d.xml", tmp ? tmp : "/tmp",
             (int)getpid());
    f = fopen(path, "w");
    assert_non_null(f);
    fputs("<?xml version=\"1.0\"?>\n<topology version=\"2.0\">\n  <object type=\"Machine\"", f);
    fclose(f);
    snprintf(env, sizeof(env), "STRATA_TOPO_FILE=%s STRATA_BOOTSTRAP_TIMEOUT=5s " QUIET, path);
    assert_int_equal(it_run(&o, bad_topo_file, (void *)"truncated"), 0);
    unlink(path);
}

/* ------------------------------------------------------------------------------------------ */
/* bad algorithm parameters: init fails on every rank with strataInvalidArgument naming them     */
/* ------------------------------------------------------------------------------------------ */

static int bad_algo_param(it_ctx_t *c)
{
    const char  *want = c->arg;
    strataComm_t comm = NULL;

    IT_RES(strataCommInitRank(&comm, c->nranks, c->id, c->rank), BAD_ARG);
    IT_EXPECT(comm == NULL, "a failed init set *comm");
    IT_EXPECT(strstr(strataGetLastError(NULL), want) != NULL,
              "the error \"%s\" does not name %s", strataGetLastError(NULL), want);
    if (comm != NULL) {
        strataCommDestroy(comm);
    }
    return 0;
}

/* strataGetErrorString of a value that is no strataResult_t names the type and the value. */
static void test_error_strings(void **state)
{
    assert_string_equal(strataGetErrorString((strataResult_t)99), "unknown strataResult_t 99");
    assert_string_equal(strataGetErrorString((strataResult_t)-1), "unknown strataResult_t -1");
    assert_string_equal(strataGetErrorString(strataSuccess), "no error");
    assert_string_equal(strataGetErrorString(strataInvalidArgument), "invalid argument");
}

static void test_bad_algo_params(void **state)
{
    static const char *const cases[][2] = {
        {"STRATA_ALGO=tree", "STRATA_ALGO 'tree'"},
        {"STRATA_HIER_CHUNK_SIZE=0", "STRATA_HIER_CHUNK_SIZE"},
        {"STRATA_SMALL_THRESHOLD=1m", "STRATA_SMALL_THRESHOLD"},
        {"STRATA_CMA=sometimes", "STRATA_CMA 'sometimes'"},
        /* a rail interface that does not exist: every rank of both nodes fails alike */
        {"STRATA_RAIL_IFNAMES=nonexistent0", "nonexistent0"},
        /* only separators, or an empty entry: refused naming the variable and the entry */
        {"STRATA_RAIL_IFNAMES=,,", "STRATA_RAIL_IFNAMES ',,': entry 0 is empty"},
        {"STRATA_RAIL_IFNAMES=lo,", "STRATA_RAIL_IFNAMES 'lo,': entry 1 is empty"},
    };
    char env[256];

    for (size_t i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        it_opts_t o = {.nranks = 4, .layout = "2+2", .no_init = 1, .env = env, .timeout_s = 60};

        snprintf(env, sizeof(env), "%s STRATA_BOOTSTRAP_TIMEOUT=10s " QUIET, cases[i][0]);
        assert_int_equal(it_run(&o, bad_algo_param, (void *)cases[i][1]), 0);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* finalized and destroyed communicators                                                        */
/* ------------------------------------------------------------------------------------------ */

static int finalize_destroy(it_ctx_t *c)
{
    int32_t      x = 1, y = 0;
    strataComm_t sub = NULL, stale;

    still_works(c->comm, "init");
    /* a split child, finalized: collectives refused, destroy fine */
    if (IT_OK(strataCommSplit(c->comm, 0, 0, &sub, NULL)) && sub != NULL) {
        still_works(sub, "split");
        IT_OK(strataCommFinalize(sub));
        IT_RES(strataAllReduce(&x, &y, 1, strataInt32, strataSum, sub, NULL), BAD_USE);
        IT_OK(strataCommDestroy(sub));
    }
    /* the harness communicator, destroyed, then used */
    stale   = c->comm;
    c->comm = NULL;
    IT_OK(strataCommDestroy(stale));
    IT_RES(strataAllReduce(&x, &y, 1, strataInt32, strataSum, stale, NULL), BAD_USE);
    IT_RES(strataBroadcast(&x, &y, 1, strataInt32, 0, stale, NULL), BAD_USE);
    IT_RES(strataSend(&x, 1, strataInt32, 0, stale, NULL), BAD_USE);
    {
        strataRedOp_t op;
        float         f = 1;

        IT_RES(strataRedOpCreatePreMulSum(&op, &f, strataFloat32, strataScalarHostImmediate,
                                          stale), BAD_USE);
    }
    {
        strataComm_t nc = NULL;

        IT_RES(strataCommSplit(stale, 0, 0, &nc, NULL), BAD_USE);
    }
    return 0;
}

static void test_finalize_destroy_n2(void **state)
{
    assert_int_equal(it_run_simple(2, "1+1", NULL, finalize_destroy, NULL), 0);
}

/* ------------------------------------------------------------------------------------------ */
/* bootstrap: a wrong secret; a rank that never joins                                           */
/* ------------------------------------------------------------------------------------------ */

#define ID_SECRET_OFFSET 8 /* src/core/bootstrap_wire.c: magic (4), version (4), secret (16) */

static int wrong_secret(it_ctx_t *c)
{
    strataUniqueId id   = c->id;
    strataComm_t   comm = NULL;
    strataResult_t res;
    double         t0, dt;
    const char    *msg;

    if (c->rank == 1) {
        id.internal[ID_SECRET_OFFSET + 3] ^= 0x5a;
    }
    t0  = it_now();
    res = strataCommInitRank(&comm, 2, id, c->rank);
    dt  = it_now() - t0;
    msg = strataGetLastError(NULL);
    if (c->rank == 1) {
        IT_EXPECT(res == strataInvalidUsage, "rank with a wrong secret: init returned %d (%s), "
                  "expected strataInvalidUsage: %s", (int)res, strataGetErrorString(res), msg);
        IT_EXPECT(dt < 5.0, "rank with a wrong secret: refused after %.2f s", dt);
    } else {
        IT_EXPECT(res == strataTimeout, "rank 0 (its peer had a wrong secret): init returned %d "
                  "(%s), expected strataTimeout: %s", (int)res, strataGetErrorString(res), msg);
        IT_EXPECT(dt < 3.0 + 3.0, "rank 0: timed out after %.2f s (bootstrap timeout 3 s)", dt);
        IT_EXPECT(strstr(msg, "rank 1") != NULL || strstr(msg, "ranks 1") != NULL,
                  "rank 0: last error does not name rank 1 as missing: \"%s\"", msg);
    }
    IT_EXPECT(msg[0] != '\0', "strataGetLastError is empty after the failed init");
    if (res == strataSuccess && comm != NULL) {
        strataCommDestroy(comm);
    }
    return 0;
}

static void test_wrong_secret(void **state)
{
    it_opts_t o = {.nranks = 2, .layout = "1+1", .no_init = 1,
                   .env = "STRATA_BOOTSTRAP_TIMEOUT=3s", .timeout_s = 30};

    assert_int_equal(it_run(&o, wrong_secret, NULL), 0);
}

static int missing_rank(it_ctx_t *c)
{
    strataComm_t   comm = NULL;
    strataResult_t res;
    double         t0 = it_now(), dt;
    const char    *msg;

    res = strataCommInitRank(&comm, 4, c->id, c->rank);
    dt  = it_now() - t0;
    msg = strataGetLastError(NULL);
    IT_EXPECT(res == strataTimeout, "3 of 4 ranks joined: init returned %d (%s), expected "
              "strataTimeout: %s", (int)res, strataGetErrorString(res), msg);
    IT_EXPECT(dt < 3.0 + 3.0, "timed out after %.2f s (bootstrap timeout 3 s)", dt);
    IT_EXPECT(dt > 1.5, "gave up after %.2f s, before the 3 s bootstrap timeout", dt);
    IT_EXPECT(strstr(msg, "rank 3") != NULL || strstr(msg, "ranks 3") != NULL,
              "last error does not name the missing rank 3: \"%s\"", msg);
    IT_EXPECT(comm == NULL, "failed init set *comm");
    if (res == strataSuccess && comm != NULL) {
        strataCommDestroy(comm);
    }
    return 0;
}

static void test_missing_rank(void **state)
{
    it_opts_t o = {.nranks = 4, .nprocs = 3, .layout = "2+2", .no_init = 1,
                   .env = "STRATA_BOOTSTRAP_TIMEOUT=3s", .timeout_s = 30};

    assert_int_equal(it_run(&o, missing_rank, NULL), 0);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_bad_args_n2),
        cmocka_unit_test(test_bad_args_n3),
        cmocka_unit_test(test_bad_input_table_n2),
        cmocka_unit_test(test_bad_input_table_n3),
        cmocka_unit_test(test_timeout_zero_n2),
        cmocka_unit_test(test_deadlines_zero_n2),
        cmocka_unit_test(test_timeout_tiny_n4),
        cmocka_unit_test(test_small_exchange_timeout_2x2),
        cmocka_unit_test(test_bad_root_args_n1),
        cmocka_unit_test(test_group_errors_n1),
        cmocka_unit_test(test_last_error_persists),
        cmocka_unit_test(test_bad_init_args),
        cmocka_unit_test(test_bad_topo_file),
        cmocka_unit_test(test_bad_algo_params),
        cmocka_unit_test(test_error_strings),
        cmocka_unit_test(test_finalize_destroy_n2),
        cmocka_unit_test(test_wrong_secret),
        cmocka_unit_test(test_missing_rank),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
