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
#include <time.h>

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
/* When the calling thread last saw a failure (a value of st_nccl_seq; 0: never), to tell it from
 * a communicator's failure recorded since (ncclGetLastError(comm), st_nccl_comm_fail). */
static unsigned long          st_nccl_seq;
static __thread unsigned long st_nccl_msg_seq;

static unsigned long st_nccl_seq_next(void)
{
    return __atomic_add_fetch(&st_nccl_seq, 1, __ATOMIC_RELAXED);
}

static ncclResult_t st_nccl_fail(ncclResult_t res, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static ncclResult_t st_nccl_fail(ncclResult_t res, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st_nccl_msg, sizeof(st_nccl_msg), fmt, ap);
    va_end(ap);
    st_nccl_msg_newer = 1;
    st_nccl_msg_seq   = st_nccl_seq_next();
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
        st_nccl_msg_seq   = st_nccl_seq_next();
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

/* The shim's record of each communicator it made: its device, and the words of the
 * communicator's first failure (st_nccl_comm_fail). An entry goes when the communicator is
 * destroyed or aborted, whatever strata answers (a pointer strata frees may come back for the
 * next communicator). */
typedef struct {
    strataComm_t  comm;
    int           dev;
    unsigned long seq;      /* when msg was recorded (st_nccl_seq); 0: no failure yet */
    char          msg[256]; /* the first failure's message */
} st_nccl_rec_t;

static pthread_mutex_t st_nccl_recs_lock = PTHREAD_MUTEX_INITIALIZER;
static st_nccl_rec_t  *st_nccl_recs;
static size_t          st_nccl_nrecs, st_nccl_recs_cap;

/* The entry of comm, or NULL; under st_nccl_recs_lock. */
static st_nccl_rec_t *st_nccl_rec_find(strataComm_t comm)
{
    for (size_t i = 0; i < st_nccl_nrecs; i++) {
        if (st_nccl_recs[i].comm == comm) {
            return &st_nccl_recs[i];
        }
    }
    return NULL;
}

static void st_nccl_dev_set(strataComm_t comm, int dev)
{
    st_nccl_rec_t *rec;

    if (comm == NULL) {
        return;
    }
    pthread_mutex_lock(&st_nccl_recs_lock);
    rec = st_nccl_rec_find(comm); /* a stale entry (freed without the shim): made anew */
    if (rec == NULL && st_nccl_nrecs == st_nccl_recs_cap) {
        size_t         cap = st_nccl_recs_cap ? 2 * st_nccl_recs_cap : 16;
        st_nccl_rec_t *grown = realloc(st_nccl_recs, cap * sizeof(*grown));

        if (grown == NULL) { /* CuDevice will say -1: not worth failing an init for */
            pthread_mutex_unlock(&st_nccl_recs_lock);
            return;
        }
        st_nccl_recs     = grown;
        st_nccl_recs_cap = cap;
    }
    if (rec == NULL) {
        rec = &st_nccl_recs[st_nccl_nrecs++];
    }
    rec->comm   = comm;
    rec->dev    = dev;
    rec->seq    = 0;
    rec->msg[0] = '\0';
    pthread_mutex_unlock(&st_nccl_recs_lock);
}

/* The noted device of comm, or -1. */
static int st_nccl_dev_get(strataComm_t comm)
{
    st_nccl_rec_t *rec;
    int            dev;

    pthread_mutex_lock(&st_nccl_recs_lock);
    rec = st_nccl_rec_find(comm);
    dev = rec != NULL ? rec->dev : -1;
    pthread_mutex_unlock(&st_nccl_recs_lock);
    return dev;
}

/* Forgets comm (destroyed or aborted). */
static void st_nccl_comm_drop(strataComm_t comm)
{
    st_nccl_rec_t *rec;

    pthread_mutex_lock(&st_nccl_recs_lock);
    rec = st_nccl_rec_find(comm);
    if (rec != NULL) {
        *rec = st_nccl_recs[--st_nccl_nrecs];
    }
    pthread_mutex_unlock(&st_nccl_recs_lock);
}

/* Records msg as the failure of comm, unless one is recorded already (the first failure is the
 * cause; what follows is its consequence). Any thread's ncclGetLastError(comm) says it from then
 * on, unless that thread saw a failure of its own since (NCCL's last error is one per process:
 * torch's watchdog reads it on its own thread after ncclCommGetAsyncError). seq: the failure's
 * stamp, 0 for a new one. */
static void st_nccl_comm_fail(strataComm_t comm, const char *msg, unsigned long seq)
{
    st_nccl_rec_t *rec;

    pthread_mutex_lock(&st_nccl_recs_lock);
    rec = st_nccl_rec_find(comm);
    if (rec != NULL && rec->seq == 0) {
        snprintf(rec->msg, sizeof(rec->msg), "%s", msg);
        rec->seq = seq != 0 ? seq : st_nccl_seq_next();
    }
    pthread_mutex_unlock(&st_nccl_recs_lock);
}

/* st_nccl_res for a call on comm: a failure of the communicator's work (not of the call's
 * arguments or usage: strataInvalidArgument, strataInvalidUsage) is recorded as comm's failure. */
static ncclResult_t st_nccl_res_on(const void *comm, strataResult_t res)
{
    ncclResult_t nres = st_nccl_res(res);

    if (res != strataSuccess && res != strataInProgress && res != strataInvalidArgument &&
        res != strataInvalidUsage && comm != NULL) {
        st_nccl_comm_fail((strataComm_t)comm, strataGetLastError(NULL), st_nccl_msg_seq);
    }
    return nres;
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
 * config), else strata's; with a communicator, its failure instead when that came later than
 * the thread's own (recorded by st_nccl_comm_fail in any thread: strata's last error is the
 * calling thread's, NCCL's one per process). */
ST_NCCL_API const char *pncclGetLastError(ncclComm_t comm)
{
    static __thread char of_comm[256];
    int                  use = 0;

    if (comm != NULL) {
        st_nccl_rec_t *rec;

        pthread_mutex_lock(&st_nccl_recs_lock);
        rec = st_nccl_rec_find((strataComm_t)comm);
        if (rec != NULL && rec->seq > st_nccl_msg_seq) {
            snprintf(of_comm, sizeof(of_comm), "%s", rec->msg);
            use = 1;
        }
        pthread_mutex_unlock(&st_nccl_recs_lock);
    }
    if (use) {
        return of_comm;
    }
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

/* ---- inits and splits inside a group ---- */

/* NCCL runs the inits and splits called between ncclGroupStart and ncclGroupEnd at the outermost
 * ncclGroupEnd, together: one thread may make several ranks of one communicator (nccl-tests -g 2
 * across processes, torch up to 2.1: ncclGroupStart; for each GPU: cudaSetDevice,
 * ncclCommInitRank; ncclGroupEnd). strata's init and split wait for every rank, so inside a
 * group the shim starts each init nonblocking (strataConfig_t.blocking = 0: strata's init thread,
 * on the device current at the call) and keeps each split for ncclGroupEnd, which runs the
 * splits on threads of their own and waits for all, inits included (strata's init deadline,
 * STRATA_BOOTSTRAP_TIMEOUT, bounds the wait). An init whose config says blocking = 0 is not
 * waited for: ncclGroupEnd says ncclInProgress and the caller polls ncclCommGetAsyncError, as
 * with NCCL. strata's split has no nonblocking form: ncclGroupEnd returns once a split is done,
 * whatever its config. A collective in the same group on a communicator made there is refused
 * (strata: the communicator is still initializing); call it after ncclGroupEnd. */
typedef struct {
    int            split;     /* 0: an init (comm), 1: a split (the fields below) */
    strataComm_t   comm;      /* init: the communicator being made */
    int            wait;      /* init: blocking for the caller, so ncclGroupEnd waits */
    strataComm_t   parent;    /* split: its arguments */
    int            color, key;
    ncclComm_t    *newcomm;
    strataConfig_t cfg;
    int            has_cfg;
    char          *name;      /* the config's commName, copied */
    strataComm_t   child;     /* split: its result */
    strataResult_t res;
    char           msg[256];
    pthread_t      thread;
} st_nccl_deferred_t;

static __thread int                 st_nccl_group_depth;
static __thread st_nccl_deferred_t *st_nccl_deferred;
static __thread int                 st_nccl_ndeferred, st_nccl_deferred_cap;

/* A new entry of the group's list, zeroed, or NULL (out of memory). */
static st_nccl_deferred_t *st_nccl_defer(void)
{
    if (st_nccl_ndeferred == st_nccl_deferred_cap) {
        int                 cap = st_nccl_deferred_cap ? 2 * st_nccl_deferred_cap : 8;
        st_nccl_deferred_t *grown = realloc(st_nccl_deferred, (size_t)cap * sizeof(*grown));

        if (grown == NULL) {
            return NULL;
        }
        st_nccl_deferred     = grown;
        st_nccl_deferred_cap = cap;
    }
    memset(&st_nccl_deferred[st_nccl_ndeferred], 0, sizeof(*st_nccl_deferred));
    return &st_nccl_deferred[st_nccl_ndeferred++];
}

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
    if (st_nccl_group_depth > 0) { /* started here, waited for by ncclGroupEnd */
        st_nccl_deferred_t *d = st_nccl_defer();
        int                 wait = (cfg.blocking != 0);

        if (d == NULL) {
            return st_nccl_fail(ncclSystemError, "ncclCommInitRankConfig: out of memory");
        }
        cfg.blocking = 0;
        res          = strataCommInitRankConfig((strataComm_t *)comm, nranks, id, rank, &cfg);
        if (res != strataSuccess && res != strataInProgress) {
            st_nccl_ndeferred--;
            return st_nccl_res(res);
        }
        d->comm = (strataComm_t)*comm;
        d->wait = wait;
        st_nccl_dev_set(d->comm, st_nccl_current_device());
        return wait || res == strataSuccess ? ncclSuccess : ncclInProgress;
    }
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
    if (st_nccl_group_depth > 0) { /* run by ncclGroupEnd */
        st_nccl_deferred_t *d;

        if (newcomm == NULL) {
            return st_nccl_fail(ncclInvalidArgument, "ncclCommSplit: newcomm is NULL");
        }
        d = st_nccl_defer();
        if (d == NULL || (cfg.name != NULL && (d->name = strdup(cfg.name)) == NULL)) {
            if (d != NULL) {
                st_nccl_ndeferred--;
            }
            return st_nccl_fail(ncclSystemError, "ncclCommSplit: out of memory");
        }
        d->split    = 1;
        d->parent   = (strataComm_t)comm;
        d->color    = color;
        d->key      = key;
        d->newcomm  = newcomm;
        d->cfg      = cfg;
        d->cfg.name = d->name;
        d->has_cfg  = (config != NULL);
        *newcomm    = NULL;
        return ncclSuccess;
    }
    /* NULL config: the parent's settings (strata's rule, as NCCL's) */
    res = strataCommSplit((strataComm_t)comm, color, key, (strataComm_t *)newcomm,
                          config != NULL ? &cfg : NULL);
    if ((res == strataSuccess || res == strataInProgress) && newcomm != NULL) {
        st_nccl_dev_set((strataComm_t)*newcomm, st_nccl_dev_get((strataComm_t)comm));
    }
    return st_nccl_res_on(comm, res);
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
    return st_nccl_res_on(comm, strataCommFinalize((strataComm_t)comm));
}
ST_NCCL_ALIAS(ncclCommFinalize);

/* The shim's record of the communicator goes whatever strata answers (a destroy that failed
 * leaves comm for ncclCommAbort, which needs no record). */
ST_NCCL_API ncclResult_t pncclCommDestroy(ncclComm_t comm)
{
    strataResult_t res = strataCommDestroy((strataComm_t)comm);

    st_nccl_comm_drop((strataComm_t)comm);
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommDestroy);

ST_NCCL_API ncclResult_t pncclCommAbort(ncclComm_t comm)
{
    strataResult_t res = strataCommAbort((strataComm_t)comm);

    st_nccl_comm_drop((strataComm_t)comm);
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclCommAbort);

/* The asynchronous error is translated as results are (strataTimeout: ncclRemoteError). An
 * error is recorded as the communicator's failure (ncclGetLastError(comm), from any thread):
 * strata's words for it where strata gave this thread some (a call on device buffers that failed
 * in the device queue, an init that failed on its thread), else its result's name. */
ST_NCCL_API ncclResult_t pncclCommGetAsyncError(ncclComm_t comm, ncclResult_t *asyncError)
{
    char           before[256];
    strataResult_t async = strataSuccess;
    strataResult_t res;

    snprintf(before, sizeof(before), "%s", strataGetLastError(NULL));
    res = strataCommGetAsyncError((strataComm_t)comm, asyncError != NULL ? &async : NULL);
    if (res == strataSuccess) {
        *asyncError = async == strataTimeout ? ncclRemoteError : (ncclResult_t)async;
        if (async != strataSuccess && async != strataInProgress) {
            const char *now = strataGetLastError(NULL);

            if (strcmp(now, before) != 0) { /* strata's words: the thread's newest too */
                st_nccl_msg_newer = 0;
                st_nccl_comm_fail((strataComm_t)comm, now, 0);
            } else {
                char generic[128];

                snprintf(generic, sizeof(generic), "the communicator failed: %s",
                         strataGetErrorString(async));
                st_nccl_comm_fail((strataComm_t)comm, generic, 0);
            }
        }
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
    dev = st_nccl_dev_get((strataComm_t)comm);
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
    return st_nccl_res_on(comm,
                          strataAllReduce(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                          (strataRedOp_t)op, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAllReduce);

ST_NCCL_API ncclResult_t pncclBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                       ncclDataType_t datatype, int root, ncclComm_t comm,
                                       cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclBroadcast");
    return st_nccl_res_on(comm,
                          strataBroadcast(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                          root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclBroadcast);

/* NCCL's legacy in-place broadcast: ncclBroadcast(buff, buff, ...). */
ST_NCCL_API ncclResult_t pncclBcast(void *buff, size_t count, ncclDataType_t datatype, int root,
                                   ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclBcast");
    return st_nccl_res_on(comm, strataBroadcast(buff, buff, count, (strataDataType_t)datatype, root,
                                                (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclBcast);

ST_NCCL_API ncclResult_t pncclReduce(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, ncclRedOp_t op, int root,
                                    ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclReduce");
    return st_nccl_res_on(comm, strataReduce(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                             (strataRedOp_t)op, root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclReduce);

ST_NCCL_API ncclResult_t pncclAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                       ncclDataType_t datatype, ncclComm_t comm,
                                       cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclAllGather");
    return st_nccl_res_on(comm,
                          strataAllGather(sendbuff, recvbuff, sendcount, (strataDataType_t)datatype,
                                          (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAllGather);

ST_NCCL_API ncclResult_t pncclReduceScatter(const void *sendbuff, void *recvbuff, size_t recvcount,
                                           ncclDataType_t datatype, ncclRedOp_t op,
                                           ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclReduceScatter");
    return st_nccl_res_on(comm, strataReduceScatter(sendbuff, recvbuff, recvcount,
                                                    (strataDataType_t)datatype, (strataRedOp_t)op,
                                                    (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclReduceScatter);

ST_NCCL_API ncclResult_t pncclAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                      ncclDataType_t datatype, ncclComm_t comm,
                                      cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclAlltoAll");
    return st_nccl_res_on(comm,
                          strataAlltoAll(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                         (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclAlltoAll);

ST_NCCL_API ncclResult_t pncclGather(const void *sendbuff, void *recvbuff, size_t count,
                                    ncclDataType_t datatype, int root, ncclComm_t comm,
                                    cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclGather");
    return st_nccl_res_on(comm, strataGather(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                             root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclGather);

ST_NCCL_API ncclResult_t pncclScatter(const void *sendbuff, void *recvbuff, size_t count,
                                     ncclDataType_t datatype, int root, ncclComm_t comm,
                                     cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclScatter");
    return st_nccl_res_on(comm, strataScatter(sendbuff, recvbuff, count, (strataDataType_t)datatype,
                                              root, (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclScatter);

/* ---- point to point, groups ---- */

ST_NCCL_API ncclResult_t pncclSend(const void *sendbuff, size_t count, ncclDataType_t datatype,
                                  int peer, ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclSend");
    return st_nccl_res_on(comm, strataSend(sendbuff, count, (strataDataType_t)datatype, peer,
                                           (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclSend);

ST_NCCL_API ncclResult_t pncclRecv(void *recvbuff, size_t count, ncclDataType_t datatype, int peer,
                                  ncclComm_t comm, cudaStream_t stream)
{
    ST_NCCL_TYPE(datatype, "ncclRecv");
    return st_nccl_res_on(comm, strataRecv(recvbuff, count, (strataDataType_t)datatype, peer,
                                           (strataComm_t)comm, stream));
}
ST_NCCL_ALIAS(ncclRecv);

ST_NCCL_API ncclResult_t pncclGroupStart(void)
{
    strataResult_t res = strataGroupStart();

    if (res == strataSuccess) {
        st_nccl_group_depth++;
    }
    return st_nccl_res(res);
}
ST_NCCL_ALIAS(ncclGroupStart);

static void *st_nccl_split_thread(void *arg)
{
    st_nccl_deferred_t *d = arg;

    d->res = strataCommSplit(d->parent, d->color, d->key, &d->child,
                             d->has_cfg ? &d->cfg : NULL);
    if (d->res != strataSuccess) {
        snprintf(d->msg, sizeof(d->msg), "%s", strataGetLastError(NULL));
    }
    return NULL;
}

/* Notes a failure of the group: the first one is ncclGroupEnd's result and message. */
static void st_nccl_group_fail(strataResult_t res, const char *msg, strataResult_t *first,
                               char *first_msg, size_t len)
{
    if (*first == strataSuccess) {
        *first = res;
        snprintf(first_msg, len, "%s", msg);
    }
}

/* The deferred inits and splits (see "inits and splits inside a group"), after strata's group
 * launched its calls: those are on communicators that existed before the group, and a split
 * exchanges over its parent, after them in the parent's order. Returns the first failure, else
 * strataInProgress while a nonblocking init is still running, else strataSuccess. */
static strataResult_t st_nccl_group_run(char *first_msg, size_t len)
{
    strataResult_t first = strataSuccess;
    int            splits = 0, pending = 0;

    for (int i = 0; i < st_nccl_ndeferred; i++) {
        splits += st_nccl_deferred[i].split;
    }
    for (int i = 0; i < st_nccl_ndeferred; i++) {
        st_nccl_deferred_t *d = &st_nccl_deferred[i];
        strataResult_t      async = strataInProgress, res;

        if (d->split) {
            continue;
        }
        /* a split may name a communicator made in this group: every init ends first then */
        while ((res = strataCommGetAsyncError(d->comm, &async)) == strataSuccess &&
               async == strataInProgress && (d->wait || splits > 0)) {
            struct timespec ms = {0, 1000000};

            nanosleep(&ms, NULL);
        }
        if (res != strataSuccess) {
            st_nccl_group_fail(res, strataGetLastError(NULL), &first, first_msg, len);
        } else if (async == strataInProgress) {
            pending = 1;
        } else if (async != strataSuccess) {
            st_nccl_comm_fail(d->comm, strataGetLastError(NULL), 0);
            st_nccl_group_fail(async, strataGetLastError(NULL), &first, first_msg, len);
        }
    }
    for (int i = 0; i < st_nccl_ndeferred; i++) {
        st_nccl_deferred_t *d = &st_nccl_deferred[i];

        if (d->split && pthread_create(&d->thread, NULL, st_nccl_split_thread, d) != 0) {
            d->res = strataSystemError;
            snprintf(d->msg, sizeof(d->msg), "ncclGroupEnd: cannot start a thread for a split");
            d->split = 2; /* not started */
        }
    }
    for (int i = 0; i < st_nccl_ndeferred; i++) {
        st_nccl_deferred_t *d = &st_nccl_deferred[i];

        if (d->split == 1) {
            pthread_join(d->thread, NULL);
        }
        if (d->split && d->res == strataSuccess) {
            *d->newcomm = (ncclComm_t)d->child;
            st_nccl_dev_set(d->child, st_nccl_dev_get(d->parent));
        } else if (d->split) {
            if (d->res != strataInvalidArgument && d->res != strataInvalidUsage) {
                st_nccl_comm_fail(d->parent, d->msg, 0);
            }
            st_nccl_group_fail(d->res, d->msg, &first, first_msg, len);
        }
        free(d->name);
    }
    st_nccl_ndeferred = 0;
    return first != strataSuccess ? first : pending ? strataInProgress : strataSuccess;
}

/* The outermost ncclGroupEnd: strata's group, then the deferred inits and splits. Its result is
 * the first failure (the group's, then the inits' and splits' in call order), with its message
 * for ncclGetLastError; ncclInProgress while an init the caller made nonblocking still runs. */
ST_NCCL_API ncclResult_t pncclGroupEnd(void)
{
    strataResult_t res, dres;
    ncclResult_t   nres;
    char           msg[256], dmsg[256];

    if (st_nccl_group_depth == 0) {
        return st_nccl_res(strataGroupEnd()); /* strata says why */
    }
    res = strataGroupEnd();
    if (--st_nccl_group_depth > 0 || st_nccl_ndeferred == 0) {
        return st_nccl_res(res);
    }
    snprintf(msg, sizeof(msg), "%s", res != strataSuccess ? strataGetLastError(NULL) : "");
    dres = st_nccl_group_run(dmsg, sizeof(dmsg));
    if (res == strataSuccess) {
        res = dres;
        memcpy(msg, dmsg, sizeof(msg));
    }
    nres = st_nccl_res(res);
    if (res == strataSuccess || res == strataInProgress) {
        return nres;
    }
    return st_nccl_fail(nres, "%s", msg);
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
