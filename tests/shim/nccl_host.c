/*
 * nccl_host.c - a program written for NCCL: it includes the real <nccl.h>, calls nccl* functions
 * only (and libc), and is compiled unchanged against NCCL's header and linked with -lnccl
 * (tests/shim/test_nccl_host.sh). Run with strata's libnccl.so.2 (the shim) it exercises the
 * shim on host buffers with stream NULL, which strata serves (NCCL itself would want device
 * buffers): every collective, several datatypes and ops in and out of place, send/recv in a
 * group, split, a nonblocking config init, the scalable init, PreMulSum, ncclMemAlloc's memory,
 * ncclCommInitAll driven from one thread, inits and splits of two ranks in a group of one thread,
 * an asynchronous failure read by another thread (ncclGetLastError(comm)), and the error paths
 * (fp8 and unknown datatypes, the functions strata cannot serve, a bad config), asserting every
 * value.
 *
 *   nccl_host SHIMDIR [NRANKS]   run the checks with NRANKS (default 4) forked ranks, after
 *                                proving from /proc/self/maps that libnccl.so* is mapped from
 *                                SHIMDIR only
 *   nccl_host --which            print the path libnccl.so* is mapped from, and exit
 * Exit 0: every check passed; 1: a check failed (named on stderr); 2: usage.
 */
#include <nccl.h>

#include <limits.h>
#include <pthread.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

static int g_rank = -1;

#define CHECK(_cond, ...)                                                          \
    do {                                                                           \
        if (!(_cond)) {                                                            \
            fprintf(stderr, "nccl_host rank %d: %s:%d: check failed: %s: ", g_rank, \
                    __FILE__, __LINE__, #_cond);                                   \
            fprintf(stderr, __VA_ARGS__);                                          \
            fprintf(stderr, "\n");                                                 \
            exit(1);                                                               \
        }                                                                          \
    } while (0)
#define NCCLOK(_call)                                                                      \
    do {                                                                                   \
        ncclResult_t r_ = (_call);                                                         \
        CHECK(r_ == ncclSuccess, "%s -> %d (%s): %s", #_call, (int)r_,                     \
              ncclGetErrorString(r_), ncclGetLastError(NULL));                             \
    } while (0)

/* The libnccl.so* files mapped into this process (at most 8), one per line in out. */
static int mapped_nccl(char *out, size_t outlen, int *count)
{
    FILE *f = fopen("/proc/self/maps", "r");
    char  line[4096];
    int   n = 0;

    out[0] = '\0';
    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        char *path = strchr(line, '/');
        char *base;

        if (path == NULL) {
            continue;
        }
        path[strcspn(path, "\n")] = '\0';
        base = strrchr(path, '/') + 1;
        if (strncmp(base, "libnccl.so", 10) != 0 || strstr(out, path) != NULL) {
            continue;
        }
        snprintf(out + strlen(out), outlen - strlen(out), "%s\n", path);
        n++;
    }
    fclose(f);
    *count = n;
    return 0;
}

/* ---- one rank ---- */

static void check_floats(const float *got, const float *want, size_t n, const char *what)
{
    for (size_t i = 0; i < n; i++) {
        CHECK(got[i] == want[i], "%s: element %zu is %g, want %g", what, i, got[i], want[i]);
    }
}

/* bfloat16 of a float that it holds exactly (small integers): its top 16 bits */
static uint16_t bf16(float v)
{
    uint32_t u;

    memcpy(&u, &v, 4);
    return (uint16_t)(u >> 16);
}

static void collectives(ncclComm_t comm, int r, int n)
{
    enum { C = 1000 };
    float   *fs = malloc(C * sizeof(float)), *fr = malloc(C * n * sizeof(float));
    float   *want = malloc(C * n * sizeof(float));
    int32_t  is[C], ir[C];
    int64_t  ls[C];
    double   ds[C], dr[C];
    uint8_t  us[C], ur[C];
    uint16_t bs[C], br[C];

    CHECK(fs && fr && want, "out of memory");
    /* all-reduce float sum, out of place */
    for (int i = 0; i < C; i++) {
        fs[i]   = (float)(r + i);
        want[i] = (float)(n * i + n * (n - 1) / 2);
    }
    NCCLOK(ncclAllReduce(fs, fr, C, ncclFloat32, ncclSum, comm, NULL));
    check_floats(fr, want, C, "allreduce float sum");
    /* int32 max, in place */
    for (int i = 0; i < C; i++) {
        is[i] = (i % 2 ? -1 : 1) * (r * 1000 + i);
    }
    NCCLOK(ncclAllReduce(is, is, C, ncclInt32, ncclMax, comm, NULL));
    for (int i = 0; i < C; i++) {
        int32_t w = i % 2 ? -i : (n - 1) * 1000 + i;
        CHECK(is[i] == w, "allreduce int32 max in place: [%d] = %d, want %d", i, is[i], w);
    }
    /* int64 prod, in place */
    for (int i = 0; i < C; i++) {
        ls[i] = (i % 3) + 1;
    }
    NCCLOK(ncclAllReduce(ls, ls, C, ncclInt64, ncclProd, comm, NULL));
    for (int i = 0; i < C; i++) {
        int64_t w = 1;
        for (int k = 0; k < n; k++) {
            w *= (i % 3) + 1;
        }
        CHECK(ls[i] == w, "allreduce int64 prod: [%d] = %lld, want %lld", i, (long long)ls[i],
              (long long)w);
    }
    /* double min */
    for (int i = 0; i < C; i++) {
        ds[i] = 0.5 * (r + 1) + i;
    }
    NCCLOK(ncclAllReduce(ds, dr, C, ncclFloat64, ncclMin, comm, NULL));
    for (int i = 0; i < C; i++) {
        CHECK(dr[i] == 0.5 + i, "allreduce double min: [%d] = %g", i, dr[i]);
    }
    /* uint8 sum wraps */
    for (int i = 0; i < C; i++) {
        us[i] = (uint8_t)(200 + r);
    }
    NCCLOK(ncclAllReduce(us, ur, C, ncclUint8, ncclSum, comm, NULL));
    CHECK(ur[7] == (uint8_t)(200 * n + n * (n - 1) / 2), "allreduce uint8 sum: %u", ur[7]);
    /* bfloat16 sum of small integers (exact) */
    for (int i = 0; i < C; i++) {
        bs[i] = bf16((float)(r + (i % 7)));
    }
    NCCLOK(ncclAllReduce(bs, br, C, ncclBfloat16, ncclSum, comm, NULL));
    for (int i = 0; i < C; i++) {
        uint16_t w = bf16((float)(n * (i % 7) + n * (n - 1) / 2));
        CHECK(br[i] == w, "allreduce bf16 sum: [%d] = 0x%04x, want 0x%04x", i, br[i], w);
    }
    /* float avg */
    for (int i = 0; i < C; i++) {
        fs[i] = (float)(2 * n * r);
    }
    NCCLOK(ncclAllReduce(fs, fr, C, ncclFloat32, ncclAvg, comm, NULL));
    CHECK(fr[3] == (float)(n * (n - 1)), "allreduce float avg: %g, want %g", fr[3],
          (float)(n * (n - 1)));

    /* broadcast out of place from root 1 % n; ncclBcast in place from root 0 */
    for (int i = 0; i < C; i++) {
        fs[i] = (float)(r * 10000 + i);
        fr[i] = -1;
    }
    NCCLOK(ncclBroadcast(fs, fr, C, ncclFloat32, 1 % n, comm, NULL));
    for (int i = 0; i < C; i++) {
        want[i] = (float)((1 % n) * 10000 + i);
    }
    check_floats(fr, want, C, "broadcast");
    NCCLOK(ncclBcast(fs, C, ncclFloat32, 0, comm, NULL));
    for (int i = 0; i < C; i++) {
        want[i] = (float)i;
    }
    check_floats(fs, want, C, "bcast in place");

    /* reduce int32 sum to the last rank */
    for (int i = 0; i < C; i++) {
        is[i] = r + i;
        ir[i] = -7;
    }
    NCCLOK(ncclReduce(is, ir, C, ncclInt32, ncclSum, n - 1, comm, NULL));
    for (int i = 0; i < C; i++) {
        int32_t w = r == n - 1 ? n * i + n * (n - 1) / 2 : -7;
        CHECK(ir[i] == w, "reduce: [%d] = %d, want %d", i, ir[i], w);
    }

    /* all-gather 3 per rank; reduce-scatter 4 per rank; all-to-all 2 per pair */
    for (int i = 0; i < 3; i++) {
        fs[i] = (float)(r * 100 + i);
    }
    NCCLOK(ncclAllGather(fs, fr, 3, ncclFloat32, comm, NULL));
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 3; i++) {
            want[k * 3 + i] = (float)(k * 100 + i);
        }
    }
    check_floats(fr, want, 3 * n, "allgather");
    for (int i = 0; i < 4 * n; i++) {
        fr[i] = (float)(r + i);
    }
    NCCLOK(ncclReduceScatter(fr, fs, 4, ncclFloat32, ncclSum, comm, NULL));
    for (int i = 0; i < 4; i++) {
        want[i] = (float)(n * (r * 4 + i) + n * (n - 1) / 2);
    }
    check_floats(fs, want, 4, "reducescatter");
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 2; i++) {
            fs[k * 2 + i] = (float)(r * 1000 + k * 10 + i); /* from r to k */
        }
    }
    NCCLOK(ncclAlltoAll(fs, fr, 2, ncclFloat32, comm, NULL));
    for (int k = 0; k < n; k++) {
        for (int i = 0; i < 2; i++) {
            want[k * 2 + i] = (float)(k * 1000 + r * 10 + i);
        }
    }
    check_floats(fr, want, 2 * n, "alltoall");

    /* gather to 0, scatter from 0 */
    for (int i = 0; i < 5; i++) {
        fs[i] = (float)(r * 5 + i);
    }
    NCCLOK(ncclGather(fs, r == 0 ? fr : NULL, 5, ncclFloat32, 0, comm, NULL));
    if (r == 0) {
        for (int i = 0; i < 5 * n; i++) {
            want[i] = (float)i;
        }
        check_floats(fr, want, 5 * n, "gather");
    }
    for (int i = 0; i < 5 * n; i++) {
        fr[i] = (float)(3 * i);
    }
    NCCLOK(ncclScatter(r == 0 ? fr : NULL, fs, 5, ncclFloat32, 0, comm, NULL));
    for (int i = 0; i < 5; i++) {
        want[i] = (float)(3 * (r * 5 + i));
    }
    check_floats(fs, want, 5, "scatter");

    /* send/recv around the ring, in a group */
    for (int i = 0; i < C; i++) {
        is[i] = r * 7 + i;
        ir[i] = -1;
    }
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclSend(is, C, ncclInt32, (r + 1) % n, comm, NULL));
    NCCLOK(ncclRecv(ir, C, ncclInt32, (r + n - 1) % n, comm, NULL));
    NCCLOK(ncclGroupEnd());
    for (int i = 0; i < C; i++) {
        CHECK(ir[i] == ((r + n - 1) % n) * 7 + i, "sendrecv: [%d] = %d", i, ir[i]);
    }

    /* PreMulSum: each rank's input times its own scalar (r + 1) */
    {
        ncclRedOp_t op;
        float       scalar = (float)(r + 1);

        for (int i = 0; i < C; i++) {
            fs[i] = (float)(i % 5);
        }
        NCCLOK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarHostImmediate,
                                        comm));
        CHECK((int)op >= (int)ncclNumOps, "premulsum op %d is a builtin", (int)op);
        NCCLOK(ncclAllReduce(fs, fr, C, ncclFloat32, op, comm, NULL));
        for (int i = 0; i < C; i++) {
            want[i] = (float)((i % 5) * n * (n + 1) / 2);
        }
        check_floats(fr, want, C, "allreduce premulsum");
        NCCLOK(ncclRedOpDestroy(op, comm));
        /* a device-resident scalar is not supported by strata */
        CHECK(ncclRedOpCreatePreMulSum(&op, &scalar, ncclFloat32, ncclScalarDevice, comm) ==
                  ncclInvalidArgument, "premulsum with ncclScalarDevice");
    }
    free(fs);
    free(fr);
    free(want);
}

/* The error paths: a value and a message each, never a crash. */
static void errors(ncclComm_t comm)
{
    float       x[4] = {0};
    ncclComm_t  nc   = (ncclComm_t)(uintptr_t)1;
    const char *msg;
    void       *h    = NULL;
    ncclWindow_t win = NULL;
    int          dev = -1;
    ncclResult_t res;

    CHECK(ncclAllReduce(x, x, 4, ncclFloat8e4m3, ncclSum, comm, NULL) == ncclInvalidArgument,
          "fp8 e4m3");
    msg = ncclGetLastError(comm);
    CHECK(strstr(msg, "ncclFloat8e4m3") != NULL, "fp8's message: '%s'", msg);
    CHECK(ncclAllReduce(x, x, 4, ncclFloat8e5m2, ncclSum, comm, NULL) == ncclInvalidArgument,
          "fp8 e5m2");
    CHECK(ncclAllReduce(x, x, 4, (ncclDataType_t)99, ncclSum, comm, NULL) == ncclInvalidArgument,
          "datatype 99");
    CHECK(ncclAllReduce(x, x, 4, ncclFloat32, (ncclRedOp_t)77, comm, NULL) == ncclInvalidArgument,
          "op 77");
    CHECK(ncclCommShrink(comm, NULL, 0, &nc, NULL, NCCL_SHRINK_DEFAULT) == ncclInvalidUsage,
          "ncclCommShrink");
    CHECK(nc == NULL, "shrink left *newcomm %p", (void *)nc);
    msg = ncclGetLastError(comm);
    CHECK(strstr(msg, "ncclCommShrink is not supported") != NULL, "shrink's message: '%s'", msg);
    CHECK(ncclCommRevoke(comm, NCCL_REVOKE_DEFAULT) == ncclInvalidUsage, "ncclCommRevoke");
    CHECK(strstr(ncclGetLastError(comm), "ncclCommRevoke") != NULL, "revoke's message");
    {
        ncclSimInfo_t sim = NCCL_SIM_INFO_INITIALIZER;

        CHECK(ncclGroupSimulateEnd(&sim) == ncclInvalidUsage, "ncclGroupSimulateEnd");
    }
    /* a failing forwarded call makes strata's message the newest again */
    CHECK(ncclAllReduce(NULL, x, 4, ncclFloat32, ncclSum, comm, NULL) == ncclInvalidArgument,
          "NULL sendbuff");
    CHECK(strstr(ncclGetLastError(comm), "ncclGroupSimulateEnd") == NULL,
          "last error still the shim's: '%s'", ncclGetLastError(comm));
    /* registration and windows: tokens */
    NCCLOK(ncclCommRegister(comm, x, sizeof(x), &h));
    CHECK(h != NULL, "register handle");
    NCCLOK(ncclCommDeregister(comm, h));
    NCCLOK(ncclCommWindowRegister(comm, x, sizeof(x), &win, NCCL_WIN_DEFAULT));
    CHECK(win != NULL, "window handle");
    NCCLOK(ncclCommWindowDeregister(comm, win));
    /* the device: none for host buffers here, or the CUDA device that was current */
    res = ncclCommCuDevice(comm, &dev);
    CHECK((res == ncclSuccess && dev >= 0) || (res == ncclInvalidUsage && dev == -1),
          "ncclCommCuDevice -> %d, device %d", (int)res, dev);
    CHECK(ncclCommCount(comm, NULL) == ncclInvalidArgument, "ncclCommCount(NULL)");
    CHECK(strcmp(ncclGetErrorString(ncclInvalidUsage), ncclGetErrorString(ncclSuccess)) != 0,
          "error strings");
    CHECK(strstr(ncclGetErrorString((ncclResult_t)ncclNumResults), "unknown") != NULL,
          "ncclNumResults' string: %s", ncclGetErrorString((ncclResult_t)ncclNumResults));
}

static void rank_main(int r, int n, const ncclUniqueId *ids)
{
    ncclComm_t   comm, sub, cfgcomm, scomm;
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t async;
    int          v;
    float       *mem;

    g_rank = r;
    alarm(60);
    NCCLOK(ncclCommInitRank(&comm, n, ids[0], r));
    NCCLOK(ncclCommCount(comm, &v));
    CHECK(v == n, "count %d", v);
    NCCLOK(ncclCommUserRank(comm, &v));
    CHECK(v == r, "rank %d", v);
    collectives(comm, r, n);
    errors(comm);

    /* ncclMemAlloc's memory (host memory here: no device is current) as buffers */
    NCCLOK(ncclMemAlloc((void **)&mem, 2 * 4096 * sizeof(float)));
    for (int i = 0; i < 4096; i++) {
        mem[i] = (float)(r + 1);
    }
    NCCLOK(ncclAllReduce(mem, mem + 4096, 4096, ncclFloat32, ncclSum, comm, NULL));
    CHECK(mem[4096 + 17] == (float)(n * (n + 1) / 2), "memalloc allreduce %g", mem[4096 + 17]);
    NCCLOK(ncclMemFree(mem));

    /* split: odd and even ranks, reversed by key */
    NCCLOK(ncclCommSplit(comm, r % 2, n - r, &sub, NULL));
    {
        int sn, sr, x = r, sum = 0;

        NCCLOK(ncclCommCount(sub, &sn));
        NCCLOK(ncclCommUserRank(sub, &sr));
        CHECK(sn == (n - r % 2 + 1) / 2, "split count %d", sn);
        CHECK(sr == sn - 1 - r / 2, "split rank %d of %d", sr, sn);
        NCCLOK(ncclAllReduce(&x, &x, 1, ncclInt32, ncclSum, sub, NULL));
        for (int k = r % 2; k < n; k += 2) {
            sum += k;
        }
        CHECK(x == sum, "split allreduce %d, want %d", x, sum);
        NCCLOK(ncclCommDestroy(sub));
    }
    /* a colorless rank gets no communicator */
    NCCLOK(ncclCommSplit(comm, r == 0 ? NCCL_SPLIT_NOCOLOR : 1, 0, &sub, NULL));
    CHECK((r == 0) == (sub == NULL), "NOCOLOR split gave %p", (void *)sub);
    if (sub != NULL) {
        NCCLOK(ncclCommDestroy(sub));
    }
    NCCLOK(ncclCommGetAsyncError(comm, &async));
    CHECK(async == ncclSuccess, "async error %d", (int)async);
    NCCLOK(ncclCommFinalize(comm));
    NCCLOK(ncclCommDestroy(comm));

    /* a config of NCCL's initializer: nonblocking, named, fields strata ignores set */
    cfg.blocking       = 0;
    cfg.commName       = "nccl-host";
    cfg.netName        = "Socket";
    cfg.cgaClusterSize = 4;
    cfg.minCTAs        = 2;
    {
        ncclResult_t res = ncclCommInitRankConfig(&cfgcomm, n, ids[1], r, &cfg);
        int          polls = 0;

        CHECK(res == ncclSuccess || res == ncclInProgress, "nonblocking init -> %d", (int)res);
        do {
            NCCLOK(ncclCommGetAsyncError(cfgcomm, &async));
            if (async == ncclInProgress) {
                usleep(1000);
            }
        } while (async == ncclInProgress && ++polls < 20000);
        CHECK(async == ncclSuccess, "nonblocking init ended with %d", (int)async);
    }
    v = r;
    NCCLOK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclMax, cfgcomm, NULL));
    CHECK(v == n - 1, "config comm allreduce %d", v);
    NCCLOK(ncclCommDestroy(cfgcomm));
    /* a bad magic is refused before anything starts */
    cfg.magic = 0x12345678;
    CHECK(ncclCommInitRankConfig(&cfgcomm, n, ids[2], r, &cfg) == ncclInvalidArgument,
          "bad config magic");
    CHECK(strstr(ncclGetLastError(NULL), "magic") != NULL, "magic's message");

    /* the scalable init with one id */
    cfg = (ncclConfig_t)NCCL_CONFIG_INITIALIZER;
    NCCLOK(ncclCommInitRankScalable(&scomm, n, r, 1, (ncclUniqueId *)&ids[2], &cfg));
    v = 1;
    NCCLOK(ncclAllReduce(&v, &v, 1, ncclInt32, ncclSum, scomm, NULL));
    CHECK(v == n, "scalable comm allreduce %d", v);
    NCCLOK(ncclCommAbort(scomm));
}

/* ncclCommInitAll: two ranks in this process, driven from one thread in a group. */
static void init_all(void)
{
    ncclComm_t comms[2];
    float      a[2][64];

    NCCLOK(ncclCommInitAll(comms, 2, NULL));
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 64; i++) {
            a[k][i] = (float)(k + i);
        }
    }
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclAllReduce(a[k], a[k], 64, ncclFloat32, ncclSum, comms[k], NULL));
    }
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 64; i++) {
            CHECK(a[k][i] == (float)(1 + 2 * i), "initall allreduce [%d][%d] = %g", k, i, a[k][i]);
        }
        NCCLOK(ncclCommDestroy(comms[k]));
    }
}

/* One thread makes both ranks of a communicator in a group (nccl-tests -g 2 across processes,
 * torch up to 2.1): the inits run at the outermost ncclGroupEnd (the inner one of the nested
 * pair runs nothing). Then an all-reduce on both in a group, and a split of both in one group. */
static void group_init(void)
{
    ncclUniqueId id;
    ncclComm_t   comms[2], subs[2];
    int          a[2][16], v;

    NCCLOK(ncclGetUniqueId(&id));
    NCCLOK(ncclGroupStart());
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclCommInitRank(&comms[k], 2, id, k));
    }
    NCCLOK(ncclGroupEnd());
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclCommUserRank(comms[k], &v));
        CHECK(v == k, "group init: comm %d has rank %d", k, v);
        for (int i = 0; i < 16; i++) {
            a[k][i] = 10 * k + i;
        }
    }
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclAllReduce(a[k], a[k], 16, ncclInt32, ncclSum, comms[k], NULL));
    }
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
        for (int i = 0; i < 16; i++) {
            CHECK(a[k][i] == 10 + 2 * i, "group init allreduce [%d][%d] = %d", k, i, a[k][i]);
        }
    }
    /* both in one color, ranks reversed by key */
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclCommSplit(comms[k], 7, 1 - k, &subs[k], NULL));
    }
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
        CHECK(subs[k] != NULL, "group split: comm %d got no communicator", k);
        NCCLOK(ncclCommUserRank(subs[k], &v));
        CHECK(v == 1 - k, "group split: comm %d has rank %d", k, v);
        NCCLOK(ncclCommCount(subs[k], &v));
        CHECK(v == 2, "group split: comm %d has %d ranks", k, v);
        a[k][0] = 1 - k;
    }
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        NCCLOK(ncclAllReduce(a[k], a[k] + 1, 1, ncclInt32, ncclMax, subs[k], NULL));
    }
    NCCLOK(ncclGroupEnd());
    for (int k = 0; k < 2; k++) {
        CHECK(a[k][1] == 1, "group split allreduce [%d] = %d", k, a[k][1]);
        NCCLOK(ncclCommDestroy(subs[k]));
        NCCLOK(ncclCommDestroy(comms[k]));
    }
}

/* An asynchronous failure, read by another thread with the communicator (torch's watchdog:
 * ncclCommGetAsyncError, then ncclGetLastError(comm) on its own thread): two nonblocking inits
 * of rank 0 in one group, so that the root refuses the second to come ("joined twice"). */
static ncclComm_t g_failed;
static char       g_seen[256];

static void *watchdog(void *arg)
{
    (void)arg;
    snprintf(g_seen, sizeof(g_seen), "%s", ncclGetLastError(g_failed));
    return NULL;
}

static void async_failure(void)
{
    ncclUniqueId id;
    ncclComm_t   c[2];
    ncclConfig_t cfg = NCCL_CONFIG_INITIALIZER;
    ncclResult_t async[2] = {ncclInProgress, ncclInProgress}, res;
    pthread_t    t;
    int          bad = -1;

    NCCLOK(ncclGetUniqueId(&id));
    cfg.blocking = 0;
    NCCLOK(ncclGroupStart());
    for (int k = 0; k < 2; k++) {
        res = ncclCommInitRankConfig(&c[k], 3, id, 0, &cfg);
        CHECK(res == ncclInProgress, "nonblocking init in a group -> %d", (int)res);
    }
    res = ncclGroupEnd(); /* ncclInProgress, or the refusal if it came already */
    CHECK(res != ncclSuccess, "ncclGroupEnd of two rank-0 inits -> ncclSuccess");
    for (int polls = 0; bad < 0 && polls < 20000; polls++) {
        for (int k = 0; k < 2 && bad < 0; k++) {
            NCCLOK(ncclCommGetAsyncError(c[k], &async[k]));
            if (async[k] != ncclInProgress) {
                bad = k;
            }
        }
        if (bad < 0) {
            usleep(1000);
        }
    }
    CHECK(bad >= 0, "neither rank-0 init ended");
    CHECK(async[bad] != ncclSuccess, "the refused init succeeded");
    CHECK(async[1 - bad] == ncclInProgress, "the other init ended: %d", (int)async[1 - bad]);
    g_failed = c[bad];
    CHECK(pthread_create(&t, NULL, watchdog, NULL) == 0, "pthread_create");
    CHECK(pthread_join(t, NULL) == 0, "pthread_join");
    CHECK(strstr(g_seen, "joined twice") != NULL, "another thread's ncclGetLastError(comm): '%s'",
          g_seen);
    CHECK(strstr(ncclGetLastError(c[bad]), "joined twice") != NULL, "ncclGetLastError(comm): '%s'",
          ncclGetLastError(c[bad]));
    NCCLOK(ncclCommAbort(c[1 - bad])); /* ends its wait for ranks 1 and 2 at once */
    NCCLOK(ncclCommAbort(c[bad]));
}

int main(int argc, char **argv)
{
    char        maps[4096], want[PATH_MAX], *dir;
    int         n = 4, nmapped = 0, version = 0, fails = 0;
    ncclUniqueId ids[3];
    pid_t       pids[64];

    if (argc == 2 && strcmp(argv[1], "--which") == 0) {
        CHECK(mapped_nccl(maps, sizeof(maps), &nmapped) == 0, "/proc/self/maps");
        printf("%s", nmapped ? maps : "none\n");
        return 0;
    }
    if (argc < 2 || argc > 3 || (argc == 3 && (n = atoi(argv[2])) < 2) || n > 64) {
        fprintf(stderr, "usage: nccl_host SHIMDIR [NRANKS 2..64] | nccl_host --which\n");
        return 2;
    }
    alarm(90);
    /* 1. the library that serves: libnccl.so* from SHIMDIR, and no other */
    dir = realpath(argv[1], want);
    CHECK(dir != NULL, "shim folder %s", argv[1]);
    CHECK(mapped_nccl(maps, sizeof(maps), &nmapped) == 0, "/proc/self/maps");
    CHECK(nmapped == 1, "%d libnccl.so* mapped:\n%s", nmapped, maps);
    {
        char got[PATH_MAX], *slash;

        maps[strcspn(maps, "\n")] = '\0';
        CHECK(realpath(maps, got) != NULL, "mapped %s", maps);
        slash = strrchr(got, '/');
        *slash = '\0';
        CHECK(strcmp(got, want) == 0, "libnccl is mapped from %s, not from the shim's %s", maps,
              want);
        printf("nccl_host: libnccl served by %s (mapped from the shim's folder; no other "
               "libnccl)\n", maps);
    }
    NCCLOK(ncclGetVersion(&version));
    CHECK(version == NCCL_VERSION_CODE, "ncclGetVersion %d, header %d", version,
          NCCL_VERSION_CODE);
    CHECK(ncclGetVersion(NULL) == ncclInvalidArgument, "ncclGetVersion(NULL)");
    CHECK(ncclGetUniqueId(NULL) == ncclInvalidArgument, "ncclGetUniqueId(NULL)");

    /* 2. n forked ranks, after the ids were made (NCCL's pattern) */
    for (int k = 0; k < 3; k++) {
        NCCLOK(ncclGetUniqueId(&ids[k]));
    }
    fflush(stdout);
    for (int r = 0; r < n; r++) {
        pids[r] = fork();
        CHECK(pids[r] >= 0, "fork");
        if (pids[r] == 0) {
            rank_main(r, n, ids);
            _exit(0);
        }
    }
    for (int r = 0; r < n; r++) {
        int st = 0;

        if (waitpid(pids[r], &st, 0) != pids[r] || !WIFEXITED(st) || WEXITSTATUS(st) != 0) {
            fprintf(stderr, "nccl_host: rank %d ended with status 0x%x\n", r, st);
            fails++;
        }
    }
    CHECK(fails == 0, "%d rank(s) failed", fails);
    printf("nccl_host: %d ranks: every collective, split, config, scalable init, premulsum, "
           "memalloc and error path as expected\n", n);

    /* 3. ncclCommInitAll in this process */
    init_all();
    printf("nccl_host: ncclCommInitAll, 2 ranks driven from one thread: as expected\n");

    /* 4. inits and splits in a group, one thread; an asynchronous failure (in a child: its
     * communicator's root waits for ranks that never come) */
    group_init();
    printf("nccl_host: ncclCommInitRank x2 and ncclCommSplit x2 in a group, one thread: as "
           "expected\n");
    fflush(stdout);
    pids[0] = fork();
    CHECK(pids[0] >= 0, "fork");
    if (pids[0] == 0) {
        alarm(30);
        async_failure();
        _exit(0);
    }
    {
        int st = 0;

        CHECK(waitpid(pids[0], &st, 0) == pids[0] && WIFEXITED(st) && WEXITSTATUS(st) == 0,
              "the asynchronous failure's child ended with status 0x%x", st);
    }
    printf("nccl_host: an asynchronous init failure: ncclGetLastError(comm) names it on "
           "another thread\n");
    printf("nccl_host: PASS\n");
    return 0;
}
