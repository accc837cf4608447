/*
 * nccl.c - libnccl.so.2 over strata: every function the installed nccl.h declares, exported under
 * both its names (ncclXxx, a weak alias of the strong pncclXxx, as NVIDIA's library does; no
 * symbol versioning, as NVIDIA's has none), forwarding to strata's public API. A program built
 * against NCCL runs on strata unchanged with LD_PRELOAD=.../strata-nccl/libnccl.so.2 or with that
 * folder first on LD_LIBRARY_PATH (README "NCCL programs on strata").
 *
 * The shim is a client of include/strata.h and nothing else of strata (docs/architecture.md, the
 * top floor; tests/tools/check_layers.sh holds it to that). It is compiled against the real nccl.h,
 * so the compiler checks each definition against NCCL's own declaration, and the static
 * assertions below check that every enum value it passes through means the same on both sides.
 * strataStream_t and cudaStream_t are one type (struct CUstream_st *): streams pass unchanged.
 *
 * What strata cannot serve (ncclCommShrink, ncclCommRevoke, ncclGroupSimulateEnd, fp8 data)
 * returns ncclInvalidUsage (ncclInvalidArgument for a datatype, as NCCL does for one it does not
 * know), says so on stderr once per function and process, and leaves the reason for
 * ncclGetLastError. Nothing here aborts or exits.
 */
#include <nccl.h>
#include <strata.h>

#include <pthread.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* Exported: the library is built with -fvisibility=hidden, and nccl.h carries no attribute. */
#define ST_NCCL_API __attribute__((visibility("default")))
/* ncclXxx: a weak alias of pncclXxx, declared with pncclXxx's own type, so that the compiler also
 * checks that nccl.h declares both names alike. */
#define ST_NCCL_ALIAS(_fn) \
    extern __typeof__(p##_fn) _fn __attribute__((weak, alias("p" #_fn), visibility("default")))

/* ---- the two headers agree ---- */

_Static_assert(sizeof(ncclUniqueId) == sizeof(strataUniqueId), "ncclUniqueId is 128 bytes");
_Static_assert(NCCL_UNIQUE_ID_BYTES == STRATA_UNIQUE_ID_BYTES, "unique id size");
_Static_assert(sizeof(cudaStream_t) == sizeof(strataStream_t), "streams pass unchanged");
_Static_assert(sizeof(ncclRedOp_t) == sizeof(strataRedOp_t), "op handles pass unchanged");
_Static_assert((int)ncclSuccess == (int)strataSuccess && (int)ncclUnhandledCudaError ==
               (int)strataUnhandledCudaError && (int)ncclSystemError == (int)strataSystemError &&
               (int)ncclInternalError == (int)strataInternalError && (int)ncclInvalidArgument ==
               (int)strataInvalidArgument && (int)ncclInvalidUsage == (int)strataInvalidUsage &&
               (int)ncclRemoteError == (int)strataRemoteError && (int)ncclInProgress ==
               (int)strataInProgress, "ncclResult_t 0..7 are strataResult_t's");
_Static_assert((int)ncclInt8 == (int)strataInt8 && (int)ncclUint8 == (int)strataUint8 &&
               (int)ncclInt32 == (int)strataInt32 && (int)ncclUint32 == (int)strataUint32 &&
               (int)ncclInt64 == (int)strataInt64 && (int)ncclUint64 == (int)strataUint64 &&
               (int)ncclFloat16 == (int)strataFloat16 && (int)ncclFloat32 == (int)strataFloat32 &&
               (int)ncclFloat64 == (int)strataFloat64 && (int)ncclBfloat16 == (int)strataBfloat16,
               "ncclDataType_t 0..9 are strataDataType_t's");
_Static_assert((int)ncclSum == (int)strataSum && (int)ncclProd == (int)strataProd &&
               (int)ncclMax == (int)strataMax && (int)ncclMin == (int)strataMin &&
               (int)ncclAvg == (int)strataAvg && (int)ncclNumOps == (int)strataNumOps &&
               (int)ncclMaxRedOp == (int)strataMaxRedOp, "ncclRedOp_t is strataRedOp_t");
_Static_assert((int)ncclScalarDevice == (int)strataScalarDevice &&
               (int)ncclScalarHostImmediate == (int)strataScalarHostImmediate,
               "ncclScalarResidence_t is strataScalarResidence_t");
_Static_assert(NCCL_SPLIT_NOCOLOR == STRATA_SPLIT_NOCOLOR, "split's no-color");
/* fp8 (NCCL 2.24 on): types strata does not have; refused by st_nccl_type. */
#define ST_NCCL_FP8_E4M3 10
#define ST_NCCL_FP8_E5M2 11
#if NCCL_VERSION_CODE >= 22400
_Static_assert((int)ncclFloat8e4m3 == ST_NCCL_FP8_E4M3 && (int)ncclFloat8e5m2 == ST_NCCL_FP8_E5M2,
               "fp8 values");
#endif

#define ST_NCCL_CONFIG_MAGIC 0xcafebeefu /* NCCL_CONFIG_INITIALIZER's */

/* ---- errors of the shim itself ---- */

/* The calling thread's last error said by the shim, and whether it is newer than strata's own
 * (strataGetLastError): a forwarded call that fails makes strata's the newer one. */
static __thread char st_nccl_msg[256];
static __thread int  st_nccl_msg_newer;

static ncclResult_t st_nccl_fail(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t st_nccl_fail(ncclResult_t res, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st_nccl_msg, sizeof(st_nccl_msg), fmt, ap);
    va_end(ap);
    st_nccl_msg_newer = 1;
    return res;
}

/* A function strata cannot serve: ncclInvalidUsage, the reason for ncclGetLastError, and one line
 * on stderr the first time in the process (*once: the function's own flag). */
static ncclResult_t st_nccl_unsupported(int *once, const char *fn, const char *why)
{
    st_nccl_fail(ncclInvalidUsage, "%s is not supported by strata's NCCL shim: %s", fn, why);
    if (!__atomic_exchange_n(once, 1, __ATOMIC_RELAXED)) {
        fprintf(stderr, "strata nccl shim: %s\n", st_nccl_msg);
    }
    return ncclInvalidUsage;
}

/* strata's result as NCCL's. strataTimeout (a peer did not answer within the deadline; NCCL has
 * no such value) becomes ncclRemoteError, what NCCL says of a peer that failed;
 * ncclGetLastError still names the timeout. */
static ncclResult_t st_nccl_res(strataResult_t res)
{
    if (res != strataSuccess && res != strataInProgress) {
        st_nccl_msg_newer = 0;
    }
    if (res == strataTimeout) {
        return ncclRemoteError;
    }
    if ((int)res < 0 || (int)res >= (int)strataNumResults) {
        return ncclInternalError;
    }
    return (ncclResult_t)res;
}

/* The datatype for strata: fp8 is refused here with its name; values strata does not know are
 * refused by strata (ncclInvalidArgument either way). */
static int st_nccl_type(ncclDataType_t type, const char *fn)
{
    if ((int)type == ST_NCCL_FP8_E4M3 || (int)type == ST_NCCL_FP8_E5M2) {
        st_nccl_fail(ncclInvalidArgument, "%s: datatype %s (%d): strata has no fp8 types", fn,
                     (int)type == ST_NCCL_FP8_E4M3 ? "ncclFloat8e4m3" : "ncclFloat8e5m2",
                     (int)type);
        return 0;
    }
    return 1;
}
#define ST_NCCL_TYPE(_type, _fn)                 \
    do {                                         \
        if (!st_nccl_type((_type), (_fn))) {     \
            return ncclInvalidArgument;          \
        }                                        \
    } while (0)

/* ---- the device of each communicator (ncclCommCuDevice) ---- */

/* strata's public API does not say which device a communicator was made on, so the shim notes it
 * at init: the CUDA device current in the calling thread (strata's rule for device buffers, see
 * strata.h), devlist's for ncclCommInitAll, the parent's for a split; -1 where the CUDA runtime
 * has no device (or the shim was built without it). */
#ifdef ST_SHIM_CUDART
static int st_nccl_current_device(void)
{
    int dev = -1;

    return cudaGetDevice(&dev) == cudaSuccess ? dev : -1;
}
#else
static int st_nccl_current_device(void)
{
    return -1;
}
#endif

typedef struct {
    strataComm_t comm;
    int          dev;
} st_nccl_dev_t;

static pthread_mutex_t st_nccl_devs_lock = PTHREAD_MUTEX_INITIALIZER;
static st_nccl_dev_t  *st_nccl_devs;
static size_t          st_nccl_ndevs, st_nccl_devs_cap;

static void st_nccl_dev_set(strataComm_t comm, int dev)
{
    if (comm == NULL) {
        return;
    }
    pthread_mutex_lock(&st_nccl_devs_lock);
    if (st_nccl_ndevs == st_nccl_devs_cap) {
        size_t         cap = st_nccl_devs_cap ? 2 * st_nccl_devs_cap : 16;
        st_nccl_dev_t *grown = realloc(st_nccl_devs, cap * sizeof(*grown));

        if (grown == NULL) { /* CuDevice will say -1: not worth failing an init for */
            pthread_mutex_unlock(&st_nccl_devs_lock);
            return;
        }
        st_nccl_devs     = grown;
        st_nccl_devs_cap = cap;
    }
    st_nccl_devs[st_nccl_ndevs++] = (st_nccl_dev_t){comm, dev};
    pthread_mutex_unlock(&st_nccl_devs_lock);
}

/* The noted device of comm, or -1; with drop, forgets it (the communicator is gone). */
static int st_nccl_dev_get(strataComm_t comm, int drop)
{
    int dev = -1;

    pthread_mutex_lock(&st_nccl_devs_lock);
    for (size_t i = 0; i < st_nccl_ndevs; i++) {
        if (st_nccl_devs[i].comm == comm) {
            dev = st_nccl_devs[i].dev;
            if (drop) {
                st_nccl_devs[i] = st_nccl_devs[--st_nccl_ndevs];
            }
            break;
        }
    }
    pthread_mutex_unlock(&st_nccl_devs_lock);
    return dev;
}

/* ---- configuration ---- */

/* Whether the caller's config (of any NCCL version: its size says which fields it has) holds
 * field. */
#define ST_NCCL_HAS(_cfg, _field) \
    ((_cfg)->size >= offsetof(ncclConfig_t, _field) + sizeof((_cfg)->_field))

/* ncclConfig_t to strataConfig_t. Accepted: NCCL_CONFIG_INITIALIZER's magic, any size from the
 * oldest config (blocking is its first field) up, so configs of newer headers pass with their
 * unknown fields ignored. Mapped: blocking (0 or 1, else ncclInvalidArgument, as NCCL) and
 * commName (strata's name, in logs and errors). Ignored, as strata has no counterpart: the CTA
 * and channel counts, cgaClusterSize, netName (strata's net is STRATA_NET), splitShare,
 * trafficClass, collnetEnable, CTAPolicy, shrinkShare, nvlsCTAs, nvlinkCentricSched. strata's
 * timeout and tuning file take their STRATA_* defaults. */
static ncclResult_t st_nccl_config(const ncclConfig_t *in, strataConfig_t *out, const char *fn)
{
    strataConfig_t def = STRATA_CONFIG_INITIALIZER;

    *out = def;
    if (in == NULL) {
        return ncclSuccess;
    }
    if (in->magic != ST_NCCL_CONFIG_MAGIC) {
        return st_nccl_fail(ncclInvalidArgument,
                            "%s: config magic 0x%x is not NCCL_CONFIG_INITIALIZER's 0x%x", fn,
                            in->magic, ST_NCCL_CONFIG_MAGIC);
    }
    if (!ST_NCCL_HAS(in, blocking)) {
        return st_nccl_fail(ncclInvalidArgument, "%s: config size %zu is too small", fn,
                            in->size);
    }
    if (in->blocking != NCCL_CONFIG_UNDEF_INT) {
        if (in->blocking != 0 && in->blocking != 1) {
            return st_nccl_fail(ncclInvalidArgument, "%s: config blocking %d is not 0 or 1", fn,
                                in->blocking);
        }
        out->blocking = in->blocking;
    }
    if (ST_NCCL_HAS(in, commName) && in->commName != NULL) {
        out->name = in->commName;
    }
    return ncclSuccess;
}

/* ---- version, errors, ids ---- */

/* The NCCL_VERSION_CODE of the nccl.h the shim was built against (2.28.9: 22809), not strata's
 * version: programs compare it with the header they were built with to decide which API they may
 * use, and the shim exports every function of that header. strata's own is strataGetVersion. */
ST_NCCL_API ncclResult_t pncclGetVersion(int *version)
{
    if (version == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclGetVersion: version is NULL");
    }
    *version = NCCL_VERSION_CODE;
    return ncclSuccess;
}
ST_NCCL_ALIAS(ncclGetVersion);

/* strata's texts for ncclResult_t's values (the same meanings); a value that is no ncclResult_t
 * (8 is strataTimeout's, which the shim never returns) is named as such. */
ST_NCCL_API const char *pncclGetErrorString(ncclResult_t result)
{
    static __thread char unknown[48];

    if ((int)result < 0 || (int)result >= (int)ncclNumResults) {
        snprintf(unknown, sizeof(unknown), "unknown ncclResult_t %d", (int)result);
        return unknown;
    }
    return strataGetErrorString((strataResult_t)result);
}
ST_NCCL_ALIAS(ncclGetErrorString);

/* The shim's own message when it is the thread's newest (an unsupported function, fp8, a bad
 * config), else strata's. */
ST_NCCL_API const char *pncclGetLastError(ncclComm_t comm)
{
    if (st_nccl_msg_newer) {
        return st_nccl_msg;
    }
    return strataGetLastError((strataComm_t)comm);
}
ST_NCCL_ALIAS(ncclGetLastError);

/* Deprecated in NCCL, not part of its API: nothing to reset (strata reads STRATA_DEBUG once). */
ST_NCCL_API void pncclResetDebugInit(void)
{
}
/* spelled out: __typeof__ of a deprecated function counts as a use of it */
extern void ncclResetDebugInit(void)
    __attribute__((weak, alias("pncclResetDebugInit"), visibility("default")));

ST_NCCL_API ncclResult_t pncclGetUniqueId(ncclUniqueId *uniqueId)
{
    return st_nccl_res(strataGetUniqueId((strataUniqueId *)uniqueId));
}
ST_NCCL_ALIAS(ncclGetUniqueId);

/* ---- communicators ---- */

ST_NCCL_API ncclResult_t pncclCommInitRankConfig(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                                int rank, ncclConfig_t *config)
{
    strataConfig_t cfg;
    strataUniqueId id;
    strataResult_t res;
    ncclResult_t   nres;

    nres = st_nccl_config(config, &cfg, "ncclCommInitRankConfig");
    if (nres != ncclSuccess) {
        return nres;
    }
    memcpy(&id, &commId, sizeof(id));
    res = strataCommInitRankConfig((strataComm_t *)comm, nranks, id, rank, &cfg);
    if ((res == strataSuccess || res == strataInProgress) && comm != NULL) {
        st_nccl_dev_set((strataComm_t)*comm, st_nccl_current_device());
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommInitRankConfig);

ST_NCCL_API ncclResult_t pncclCommInitRank(ncclComm_t *comm, int nranks, ncclUniqueId commId,
                                          int rank)
{
    return pncclCommInitRankConfig(comm, nranks, commId, rank, NULL);
}
ST_NCCL_ALIAS(ncclCommInitRank);

/* strata's bootstrap has one root: the first id serves. Every rank holds the same array of nId
 * ids, so every rank meets at commIds[0]; the other ids go unused (their roots, in the processes
 * that made them, give up after STRATA_BOOTSTRAP_TIMEOUT). */
ST_NCCL_API ncclResult_t pncclCommInitRankScalable(ncclComm_t *newcomm, int nranks, int myrank,
                                                  int nId, ncclUniqueId *commIds,
                                                  ncclConfig_t *config)
{
    if (nId < 1 || commIds == NULL) {
        return st_nccl_fail(ncclInvalidArgument,
                            "ncclCommInitRankScalable: nId %d, commIds %p: at least one id", nId,
                            (void *)commIds);
    }
    return pncclCommInitRankConfig(newcomm, nranks, commIds[0], myrank, config);
}
ST_NCCL_ALIAS(ncclCommInitRankScalable);

ST_NCCL_API ncclResult_t pncclCommInitAll(ncclComm_t *comm, int ndev, const int *devlist)
{
    strataResult_t res = strataCommInitAll((strataComm_t *)comm, ndev, devlist);

    if (res == strataSuccess) {
        int cur = devlist == NULL ? st_nccl_current_device() : -1;

        for (int i = 0; i < ndev; i++) {
            /* devlist NULL: rank i on device i, or on host buffers when no device exists */
            st_nccl_dev_set((strataComm_t)comm[i], devlist != NULL ? devlist[i]
                                                   : cur >= 0      ? i
                                                                   : -1);
        }
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommInitAll);

ST_NCCL_API ncclResult_t pncclCommSplit(ncclComm_t comm, int color, int key, ncclComm_t *newcomm,
                                       ncclConfig_t *config)
{
    strataConfig_t cfg;
    strataResult_t res;
    ncclResult_t   nres;

    nres = st_nccl_config(config, &cfg, "ncclCommSplit");
    if (nres != ncclSuccess) {
        return nres;
    }
    /* NULL config: the parent's settings (strata's rule, as NCCL's) */
    res = strataCommSplit((strataComm_t)comm, color, key, (strataComm_t *)newcomm,
                          config != NULL ? &cfg : NULL);
    if ((res == strataSuccess || res == strataInProgress) && newcomm != NULL) {
        st_nccl_dev_set((strataComm_t)*newcomm, st_nccl_dev_get((strataComm_t)comm, 0));
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommSplit);

/* strata has no shrink: the ranks a shrink keeps would have to agree without the excluded ones,
 * which strata's split (collective over every rank) cannot do. */
ST_NCCL_API ncclResult_t pncclCommShrink(ncclComm_t comm, int *excludeRanksList,
                                        int excludeRanksCount, ncclComm_t *newcomm,
                                        ncclConfig_t *config, int shrinkFlags)
{
    static int once;

    (void)comm, (void)excludeRanksList, (void)excludeRanksCount, (void)config, (void)shrinkFlags;
    if (newcomm != NULL) {
        *newcomm = NULL;
    }
    return st_nccl_unsupported(&once, "ncclCommShrink",
                               "strata has no shrink (ncclCommSplit with every rank, or a new "
                               "communicator, instead); returns ncclInvalidUsage");
}
ST_NCCL_ALIAS(ncclCommShrink);

/* strata has no revoke; ncclCommAbort stops a communicator's work (and frees it). */
ST_NCCL_API ncclResult_t pncclCommRevoke(ncclComm_t comm, int revokeFlags)
{
    static int once;

    (void)comm, (void)revokeFlags;
    return st_nccl_unsupported(&once, "ncclCommRevoke",
                               "strata has no revoke (ncclCommAbort stops and frees a "
                               "communicator); returns ncclInvalidUsage");
}
ST_NCCL_ALIAS(ncclCommRevoke);

ST_NCCL_API ncclResult_t pncclCommFinalize(ncclComm_t comm)
{
    return st_nccl_res(strataCommFinalize((strataComm_t)comm));
}
ST_NCCL_ALIAS(ncclCommFinalize);

/* The noted device is forgotten once strata has freed the communicator (on failure strata leaves
 * it allocated, see strata.h). */
ST_NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
    strataResult_t res = strataCommDestroy((strataComm_t)comm);

    if (res == strataSuccess) {
        st_nccl_dev_get((strataComm_t)comm, 1);
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommDestroy);

ST_NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm)
{
    strataResult_t res = strataCommAbort((strataComm_t)comm);

    if (comm != NULL) {
        st_nccl_dev_get((strataComm_t)comm, 1);
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommAbort);

/* The asynchronous error is translated as results are (strataTimeout: ncclRemoteError). */
ST_NCCL_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    strataResult_t async = strataSuccess;
    strataResult_t res   = strataCommGetAsyncError((strataComm_t)comm,
                                                   asyncError != NULL ? &async : NULL);

    if (res == strataSuccess) {
        *asyncError = async == strataTimeout ? ncclRemoteError : (ncclResult_t)async;
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommGetAsyncError);

ST_NCCL_API ncclResult_t pncclCommCount(const ncclComm_t comm, int *count)
{
    return st_nccl_res(strataCommCount((strataComm_t)comm, count));
}
ST_NCCL_ALIAS(ncclCommCount);

ST_NCCL_API ncclResult_t pncclCommUserRank(const ncclComm_t comm, int *rank)
{
    return st_nccl_res(strataCommUserRank((strataComm_t)comm, rank));
}
ST_NCCL_ALIAS(ncclCommUserRank);

/* The CUDA device the communicator was made on (noted at init, see st_nccl_dev_set).
 * ncclInvalidUsage when there is none: a communicator of host buffers, made where the CUDA
 * runtime has no device (the simulated device, STRATA_DEVICE=sim, is not a CUDA device);
 * ncclInvalidArgument for NULL arguments. */
ST_NCCL_API ncclResult_t pncclCommCuDevice(const ncclComm_t comm, int *device)
{
    int dev;

    if (comm == NULL || device == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclCommCuDevice: comm %p, device %p",
                            (void *)comm, (void *)device);
    }
    dev = st_nccl_dev_get((strataComm_t)comm, 0);
    if (dev < 0) {
        return st_nccl_fail(ncclInvalidUsage,
                            "ncclCommCuDevice: the communicator was made where no CUDA device "
                            "was current (host buffers); strata's shim has no device to report");
    }
    *device = dev;
    return ncclSuccess;
}
ST_NCCL_ALIAS(ncclCommCuDevice);

/* ---- registration ---- */

/* Registration is an optimisation in NCCL: collectives work on unregistered buffers. strata has
 * no registration call (strataMemAlloc's memory is what its zero-copy path takes), so the shim
 * hands out a token for the range and collectives run as they would without it. */
typedef struct {
    unsigned magic;
    void    *buff;
    size_t   size;
} st_nccl_reg_t;
#define ST_NCCL_REG_MAGIC 0x5eb1a9edu
#define ST_NCCL_WIN_MAGIC 0x5eb1a9eeu

static ncclResult_t st_nccl_reg_make(unsigned magic, void *buff, size_t size, void **handle,
                                     const char *fn)
{
    st_nccl_reg_t *reg;

    if (handle == NULL || (buff == NULL && size > 0)) {
        return st_nccl_fail(ncclInvalidArgument, "%s: buff %p, size %zu, handle %p", fn, buff,
                            size, (void *)handle);
    }
    reg = malloc(sizeof(*reg));
    if (reg == NULL) {
        return st_nccl_fail(ncclSystemError, "%s: out of memory", fn);
    }
    *reg    = (st_nccl_reg_t){magic, buff, size};
    *handle = reg;
    return ncclSuccess;
}

static ncclResult_t st_nccl_reg_free(unsigned magic, void *handle, const char *fn)
{
    st_nccl_reg_t *reg = handle;

    if (reg == NULL || reg->magic != magic) {
        return st_nccl_fail(ncclInvalidArgument, "%s: %p is not a handle of this call's register",
                            fn, handle);
    }
    reg->magic = 0;
    free(reg);
    return ncclSuccess;
}

/* See st_nccl_reg_make: a token; collectives need none. */
ST_NCCL_API ncclResult_t pncclCommRegister(const ncclComm_t comm, void *buff, size_t size,
                                          void **handle)
{
    if (comm == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclCommRegister: comm is NULL");
    }
    return st_nccl_reg_make(ST_NCCL_REG_MAGIC, buff, size, handle, "ncclCommRegister");
}
ST_NCCL_ALIAS(ncclCommRegister);

ST_NCCL_API ncclResult_t pncclCommDeregister(const ncclComm_t comm, void *handle)
{
    if (comm == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclCommDeregister: comm is NULL");
    }
    return st_nccl_reg_free(ST_NCCL_REG_MAGIC, handle, "ncclCommDeregister");
}
ST_NCCL_ALIAS(ncclCommDeregister);

/* A window is a token too: collectives on the range work as on any buffer (NCCL's symmetric
 * kernels are an optimisation); the device API that reads windows (nccl_device.h's
 * ncclDevCommCreate and the like) is not in nccl.h and not in the shim. */
ST_NCCL_API ncclResult_t pncclCommWindowRegister(ncclComm_t comm, void *buff, size_t size,
                                                ncclWindow_t *win, int winFlags)
{
    (void)winFlags;
    if (comm == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclCommWindowRegister: comm is NULL");
    }
    return st_nccl_reg_make(ST_NCCL_WIN_MAGIC, buff, size, (void **)win,
                            "ncclCommWindowRegister");
}
ST_NCCL_ALIAS(ncclCommWindowRegister);

ST_NCCL_API ncclResult_t pncclCommWindowDeregister(ncclComm_t comm, ncclWindow_t win)
{
    if (comm == NULL) {
        return st_nccl_fail(ncclInvalidArgument, "ncclCommWindowDeregister: comm is NULL");
    }
    return st_nccl_reg_free(ST_NCCL_WIN_MAGIC, win, "ncclCommWindowDeregister");
}
ST_NCCL_ALIAS(ncclCommWindowDeregister);

ST_NCCL_API ncclResult_t pncclMemAlloc(void **ptr, size_t size)
{
    return st_nccl_res(strataMemAlloc(ptr, size));
}
ST_NCCL_ALIAS(ncclMemAlloc);

ST_NCCL_API ncclResult_t pncclMemFree(void *ptr)
{
    return st_nccl_res(strataMemFree(ptr));
}
ST_NCCL_ALIAS(ncclMemFree);

/* ---- reduction operations ---- */

ST_NCCL_API ncclResult_t pncclRedOpCreatePreMulSum(ncclRedOp_t *op, void *scalar,
                                                  ncclDataType_t datatype,
                                                  ncclScalarResidence_t residence,
                                                  ncclComm_t comm)
{
    ST_NCCL_TYPE(datatype, "ncclRedOpCreatePreMulSum");
    return st_nccl_res(strataRedOpCreatePreMulSum((strataRedOp_t *)op, scalar,
                                                  (strataDataType_t)datatype,
                                                  (strataScalarResidence_t)residence,
                                                  (strataComm_t)comm));
}
ST_NCCL_ALIAS(ncclRedOpCreatePreMulSum);

ST_NCCL_API ncclResult_t pncclRedOpDestroy(ncclRedOp_t op, ncclComm_t comm)
{
    return st_nccl_res(strataRedOpDestroy((strataRedOp_t)op, (strataComm_t)comm));
}
ST_NCCL_ALIAS(ncclRedOpDestroy);

/* ---- collectives ---- */

ST_NCCL_API ncclResult_t pncclAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, ncclRedOp_t op, ncclComm_t comm,
                                       cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclAllReduce");
    return st_nccl_res(strataAllReduce(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                       (strataRedOp_t)op, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAllReduce);

ST_NCCL_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclBroadcast");
    return st_nccl_res(strataBroadcast(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                       root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclBroadcast);

/* NCCL's legacy in-place broadcast: ncclBroadcast(buff, buff, ...). */
ST_NCCL_API ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclBcast");
    return st_nccl_res(strataBroadcast(buff, buff, count, (strataDataType_t)datatype, root,
                                       (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclBcast);

ST_NCCL_API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclReduce");
    return st_nccl_res(strataReduce(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                    (strataRedOp_t)op, root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclReduce);

ST_NCCL_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclAllGather");
    return st_nccl_res(strataAllGather(sendbuff, recvbuff, sendcount, (strataDataType_t)datatype,
                                       (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAllGather);

ST_NCCL_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclReduceScatter");
    return st_nccl_res(strataReduceScatter(sendbuff, recvbuff, recvcount,
                                           (strataDataType_t)datatype, (strataRedOp_t)op,
                                           (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclReduceScatter);

ST_NCCL_API ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclAlltoAll");
    return st_nccl_res(strataAlltoAll(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                      (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAlltoAll);

ST_NCCL_API ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclGather");
    return st_nccl_res(strataGather(sendbuff, recvbuff, count, (strataDataType_t)datatype, root,
                                    (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclGather);

ST_NCCL_API ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclScatter");
    return st_nccl_res(strataScatter(sendbuff, recvbuff, count, (strataDataType_t)datatype, root,
                                     (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclScatter);

/* ---- point to point, groups ---- */

ST_NCCL_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclSend");
    return st_nccl_res(strataSend(sendbuff, count, (strataDataType_t)datatype, peer,
                                  (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclSend);

ST_NCCL_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclRecv");
    return st_nccl_res(strataRecv(recvbuff, count, (strataDataType_t)datatype, peer,
                                  (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclRecv);

ST_NCCL_API ncclResult_t pncclGroupStart(void)
{
    return st_nccl_res(strataGroupStart());
}
ST_NCCL_ALIAS(ncclGroupStart);

ST_NCCL_API ncclResult_t pncclGroupEnd(void)
{
    return st_nccl_res(strataGroupEnd());
}
ST_NCCL_ALIAS(ncclGroupEnd);

/* NCCL's simulation of a group (its cost estimate, nothing launched) has no counterpart in
 * strata's API. The group is left as it was: still open inside ncclGroupStart, whose
 * ncclGroupEnd then launches it. */
ST_NCCL_API ncclResult_t pncclGroupSimulateEnd(ncclSimInfo_t *simInfo)
{
    static int once;

    (void)simInfo;
    return st_nccl_unsupported(&once, "ncclGroupSimulateEnd",
                               "strata cannot simulate a group (an open group stays open: end "
                               "it with ncclGroupEnd); returns ncclInvalidUsage");
}
ST_NCCL_ALIAS(ncclGroupSimulateEnd);
