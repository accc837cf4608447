/*
 * api.c - the public entry points of strata.h: argument checks (every bad input gets
 * strataInvalidArgument or strataInvalidUsage and one line saying what and where), then the
 * communicator lifecycle or the routing of a call (enqueue.h).
 */
#include "config.h"

#include <math.h>
#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "codec/codec.h"
#include "core/bootstrap.h"
#include "core/enqueue.h"
#include "device/dev.h"
#include "engine/comm.h"
#include "topo/topo.h"
#include "transports/transport.h"
#include "core/init.h"

#define ST_API_INIT()                                                                            \
    do {                                                                                         \
        if (st_param_init(st_transport_config_tables()) != ST_OK) {                              \
            return strataInvalidArgument;                                                        \
        }                                                                                        \
    } while (0)

/* ---------------------------------------------------------------------------------------------- */
/* Version, errors                                                                                */
/* ---------------------------------------------------------------------------------------------- */

STRATA_API strataResult_t strataGetVersion(int *version)
{
    if (version == NULL) {
        st_error(ST_SUB_INIT, "strataGetVersion: version is NULL");
        return strataInvalidArgument;
    }
    *version = STRATA_VERSION_CODE;
    return strataSuccess;
}

STRATA_API const char *strataGetLastError(strataComm_t comm ST_UNUSED)
{
    return st_log_last_error();
}

STRATA_API strataResult_t strataParamsPrint(FILE *stream)
{
    if (stream == NULL) {
        st_error(ST_SUB_ENV, "strataParamsPrint: stream is NULL");
        return strataInvalidArgument;
    }
    ST_API_INIT();
    st_config_print(stream);
    return strataSuccess;
}

/* ---------------------------------------------------------------------------------------------- */
/* Communicators                                                                                  */
/* ---------------------------------------------------------------------------------------------- */

/* A usable communicator, or the result explaining why not (logged). */
/* A blocking call (no group, no stream) holds comm->blocking for its duration: a second thread's
 * blocking call on the same communicator meanwhile gets strataInvalidUsage instead of running
 * concurrently (its ranks could pair the two threads' calls differently). 1 when taken. */
static int st_api_blocking_enter(st_comm_t *comm, const char *fn)
{
    if (__atomic_exchange_n(&comm->blocking, 1, __ATOMIC_ACQ_REL) == 0) {
        return 1;
    }
    st_error(ST_SUB_COLL, "%s (rank %d): %s is in a blocking call of another thread; a "
             "communicator is used by one thread at a time (use one communicator per thread, "
             "or streams)", fn, comm->rank, comm->name);
    return 0;
}

static void st_api_blocking_leave(st_comm_t *comm)
{
    __atomic_store_n(&comm->blocking, 0, __ATOMIC_RELEASE);
}

static strataResult_t st_api_check_comm(const st_comm_t *comm, const char *fn)
{
    if (comm == NULL) {
        st_error(ST_SUB_INIT, "%s: comm is NULL", fn);
        return strataInvalidArgument;
    }
    if (!st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "%s: communicator %p was destroyed (or never created)", fn,
                 (const void *)comm);
        return strataInvalidUsage;
    }
    switch (comm->state) {
    case ST_COMM_READY:
        return strataSuccess;
    case ST_COMM_INITIALIZING:
        st_error(ST_SUB_INIT, "%s: communicator %s is still initializing (nonblocking init)", fn,
                 comm->name);
        return strataInvalidUsage;
    case ST_COMM_FINALIZED:
        st_error(ST_SUB_INIT, "%s: communicator %s was finalized", fn, comm->name);
        return strataInvalidUsage;
    case ST_COMM_ABORTED:
        st_error(ST_SUB_INIT, "%s: communicator %s was aborted", fn, comm->name);
        return strataInvalidUsage;
    default:
        st_error(ST_SUB_INIT, "%s: communicator %s failed earlier (%s); destroy it", fn,
                 comm->name, strataGetErrorString(comm->async_error));
        return strataInvalidUsage;
    }
}

STRATA_API strataResult_t strataCommTopoPrint(strataComm_t comm, FILE *stream, int json)
{
    strataResult_t result;

    ST_API_INIT();
    if (stream == NULL) {
        st_error(ST_SUB_TOPO, "strataCommTopoPrint: stream is NULL");
        return strataInvalidArgument;
    }
    /* a comm that failed or was finalized still has its hierarchy, worth printing */
    if (comm == NULL || !st_comm_is_live(comm) || comm->state == ST_COMM_INITIALIZING ||
        comm->state == ST_COMM_ABORTED || comm->topo == NULL) {
        result = st_api_check_comm(comm, "strataCommTopoPrint");
        return (result != strataSuccess) ? result : strataInternalError;
    }
    st_topo_print(comm->topo, stream, json);
    return strataSuccess;
}

STRATA_API strataResult_t strataCommTopoRank(strataComm_t comm, int *node, int *nnodes,
                                             int *localRank, int *localSize)
{
    strataResult_t result;

    ST_API_INIT();
    if (comm == NULL || !st_comm_is_live(comm) || comm->state == ST_COMM_INITIALIZING ||
        comm->state == ST_COMM_ABORTED || comm->topo == NULL) {
        result = st_api_check_comm(comm, "strataCommTopoRank");
        return (result != strataSuccess) ? result : strataInternalError;
    }
    if (node != NULL) {
        *node = comm->node;
    }
    if (nnodes != NULL) {
        *nnodes = comm->nnodes;
    }
    if (localRank != NULL) {
        *localRank = st_topo_local_rank(comm->topo, comm->rank);
    }
    if (localSize != NULL) {
        *localSize = st_topo_local_size(comm->topo, comm->node);
    }
    return strataSuccess;
}

STRATA_API strataResult_t strataCommGetPhaseTimes(strataComm_t comm, strataPhaseTimes_t *times)
{
    strataResult_t result;

    ST_API_INIT();
    if (times == NULL) {
        st_error(ST_SUB_COLL, "strataCommGetPhaseTimes: times is NULL");
        return strataInvalidArgument;
    }
    if (comm == NULL || !st_comm_is_live(comm) || comm->state == ST_COMM_INITIALIZING ||
        comm->state == ST_COMM_ABORTED) {
        result = st_api_check_comm(comm, "strataCommGetPhaseTimes");
        return (result != strataSuccess) ? result : strataInternalError;
    }
    pthread_mutex_lock(&comm->lock);
    if (!comm->have_times) {
        pthread_mutex_unlock(&comm->lock);
        st_error(ST_SUB_COLL, "strataCommGetPhaseTimes: %s has completed no collective yet",
                 comm->name);
        return strataInvalidUsage;
    }
    *times = comm->times;
    pthread_mutex_unlock(&comm->lock);
    return strataSuccess;
}

STRATA_API strataResult_t strataTopoFilePrint(const char *xmlPath, FILE *stream, int json)
{
    ST_API_INIT();
    if (stream == NULL) {
        st_error(ST_SUB_TOPO, "strataTopoFilePrint: stream is NULL");
        return strataInvalidArgument;
    }
    /* NULL: the machine an init would use */
    if (xmlPath == NULL && st_core_config.topo_file != NULL && st_core_config.topo_file[0]) {
        xmlPath = st_core_config.topo_file;
    }
    return st_status_to_result(st_topo_file_print(xmlPath, stream, json));
}

STRATA_API strataResult_t strataGetUniqueId(strataUniqueId *uniqueId)
{
    ST_API_INIT();
    if (uniqueId == NULL) {
        st_error(ST_SUB_INIT, "strataGetUniqueId: uniqueId is NULL");
        return strataInvalidArgument;
    }
    return st_status_to_result(st_bootstrap_unique_id(uniqueId));
}

typedef struct st_init_job {
    st_comm_t             *comm;
    strataUniqueId         id;
    double                 timeout;
    const st_transports_t *tl;
} st_init_job_t;

static void *st_api_init_thread(void *arg)
{
    st_init_job_t *job = arg;
    st_status_t    status = st_comm_init(job->comm, &job->id, job->timeout, job->tl);

    if (status != ST_OK) {
        /* the words are this thread's: keep them for strataCommGetAsyncError's caller (no device
         * queue writes async_msg before the communicator is ready) */
        snprintf(job->comm->async_msg, sizeof(job->comm->async_msg), "%s", st_log_last_error());
        st_comm_set_error(job->comm, status);
        job->comm->state = ST_COMM_FAILED;
    }
    free(job);
    return NULL;
}

/* A config from STRATA_CONFIG_INITIALIZER: of this header, or of 0.1.0's, which ended before
 * tuneFile (callers built against it keep working). */
static int st_api_config_ok(const strataConfig_t *config)
{
    return config->magic == STRATA_CONFIG_MAGIC &&
           (config->size == sizeof(strataConfig_t) ||
            config->size == offsetof(strataConfig_t, tuneFile));
}

static const char *st_api_config_tune_file(const strataConfig_t *config)
{
    return config->size >= offsetof(strataConfig_t, tuneFile) + sizeof(config->tuneFile)
               ? config->tuneFile : NULL;
}

static strataResult_t st_api_init_rank(strataComm_t *comm_p, int nranks, strataUniqueId commId,
                                       int rank, const strataConfig_t *config,
                                       const st_transports_t *tl, const char *fn)
{
    double      op_timeout = st_core_config.timeout;
    const char *name = "strata";
    const char *tune_file = NULL;
    int         blocking = 1;
    st_comm_t  *comm;
    st_status_t status;

    if (comm_p == NULL) {
        st_error(ST_SUB_INIT, "%s: comm is NULL", fn);
        return strataInvalidArgument;
    }
    if (nranks < 1) {
        st_error(ST_SUB_INIT, "%s: nranks %d is below 1", fn, nranks);
        return strataInvalidArgument;
    }
    if (nranks > ST_BOOTSTRAP_MAX_RANKS) {
        st_error(ST_SUB_INIT, "%s: nranks %d exceeds %d", fn, nranks, ST_BOOTSTRAP_MAX_RANKS);
        return strataInvalidArgument;
    }
    if (rank < 0 || rank >= nranks) {
        st_error(ST_SUB_INIT, "%s: rank %d is outside [0, %d)", fn, rank, nranks);
        return strataInvalidArgument;
    }
    if (config != NULL) {
        if (!st_api_config_ok(config)) {
            st_error(ST_SUB_INIT, "%s: config was not initialised with STRATA_CONFIG_INITIALIZER",
                     fn);
            return strataInvalidArgument;
        }
        if (config->blocking != STRATA_CONFIG_UNDEF_INT) {
            if (config->blocking != 0 && config->blocking != 1) {
                st_error(ST_SUB_INIT, "%s: config->blocking %d is not 0 or 1", fn,
                         config->blocking);
                return strataInvalidArgument;
            }
            blocking = config->blocking;
        }
        if (config->timeoutMs != STRATA_CONFIG_UNDEF_INT) {
            if (config->timeoutMs <= 0) {
                st_error(ST_SUB_INIT, "%s: config->timeoutMs %d is not positive", fn,
                         config->timeoutMs);
                return strataInvalidArgument;
            }
            op_timeout = config->timeoutMs / 1000.0;
        }
        if (config->name != NULL) {
            name = config->name;
        }
        tune_file = st_api_config_tune_file(config);
    }
    if (op_timeout <= 0) {
        op_timeout = ST_TIMEOUT_NONE; /* STRATA_TIMEOUT=0: no deadline */
    }
    comm = st_comm_alloc(rank, nranks, op_timeout, name);
    if (comm != NULL && tune_file != NULL && (comm->tune_file = strdup(tune_file)) == NULL) {
        st_comm_free(comm, 1);
        comm = NULL;
    }
    if (comm == NULL) {
        st_error(ST_SUB_INIT, "%s: out of memory", fn);
        return strataSystemError;
    }
    st_comm_register(comm);
    if (!blocking) {
        st_init_job_t *job = malloc(sizeof(*job));
        int            ret;

        if (job == NULL) {
            goto err_nomem;
        }
        job->comm    = comm;
        job->id      = commId;
        job->tl      = tl;
        job->timeout = st_param_deadline(st_core_config.bootstrap_timeout); /* the join; what follows: op_timeout too */
        ret = pthread_create(&comm->init_thread, NULL, st_api_init_thread, job);
        if (ret != 0) {
            free(job);
            st_error(ST_SUB_INIT, "%s: cannot start the init thread: %s", fn, strerror(ret));
            goto err_unregister;
        }
        comm->init_thread_live = 1;
        *comm_p = comm;
        return strataInProgress;
    }
    status = st_comm_init(comm, &commId, st_param_deadline(st_core_config.bootstrap_timeout), tl);
    if (status != ST_OK) {
        st_comm_unregister(comm);
        st_comm_free(comm, 1);
        return st_status_to_result(status);
    }
    *comm_p = comm;
    return strataSuccess;

err_nomem:
    st_error(ST_SUB_INIT, "%s: out of memory", fn);
err_unregister:
    st_comm_unregister(comm);
    st_comm_free(comm, 1);
    return strataSystemError;
}

STRATA_API strataResult_t strataCommInitRank(strataComm_t *comm, int nranks,
                                             strataUniqueId commId, int rank)
{
    ST_API_INIT();
    return st_api_init_rank(comm, nranks, commId, rank, NULL, &st_transports_builtin,
                            "strataCommInitRank");
}

STRATA_API strataResult_t strataCommInitRankConfig(strataComm_t *comm, int nranks,
                                                   strataUniqueId commId, int rank,
                                                   strataConfig_t *config)
{
    ST_API_INIT();
    return st_api_init_rank(comm, nranks, commId, rank, config, &st_transports_builtin,
                            "strataCommInitRankConfig");
}

strataResult_t st_comm_init_rank_tl(strataComm_t *comm, int nranks, strataUniqueId id, int rank,
                                    const st_transports_t *tl)
{
    ST_API_INIT();
    if (tl == NULL || tl->net == NULL || tl->win == NULL) {
        st_error(ST_SUB_INIT, "st_comm_init_rank_tl: no transport tables");
        return strataInvalidArgument;
    }
    return st_api_init_rank(comm, nranks, id, rank, NULL, tl, "strataCommInitRank");
}

typedef struct st_init_all_job {
    strataComm_t  *comm;
    int            dev;    /* the device to make current first, or -1 */
    strataUniqueId id;
    int            nranks;
    int            rank;
    strataResult_t result;
    char           errmsg[512];
} st_init_all_job_t;

static void *st_api_init_all_thread(void *arg)
{
    st_init_all_job_t *job = arg;

    if (job->dev >= 0 && st_dev()->set_current(job->dev) != ST_OK) {
        job->result = strataInvalidArgument;
        snprintf(job->errmsg, sizeof(job->errmsg), "strataCommInitAll: rank %d cannot use "
                 "device %d", job->rank, job->dev);
        return NULL;
    }
    job->result = st_api_init_rank(job->comm, job->nranks, job->id, job->rank, NULL,
                                   &st_transports_builtin, "strataCommInitAll");
    snprintf(job->errmsg, sizeof(job->errmsg), "%s", st_log_last_error());
    return NULL;
}

STRATA_API strataResult_t strataCommInitAll(strataComm_t *comms, int ndev,
                                             const int *devlist)
{
    st_init_all_job_t *jobs;
    pthread_t         *threads;
    strataUniqueId     id;
    strataResult_t     result;
    int                started = 0;

    ST_API_INIT();
    if (comms == NULL) {
        st_error(ST_SUB_INIT, "strataCommInitAll: comms is NULL");
        return strataInvalidArgument;
    }
    if (ndev < 1) {
        st_error(ST_SUB_INIT, "strataCommInitAll: ndev %d is below 1", ndev);
        return strataInvalidArgument;
    }
    if (devlist == NULL && st_dev() != NULL && st_dev()->current() >= 0 &&
        ndev > st_dev()->count()) {
        st_error(ST_SUB_INIT, "strataCommInitAll: devlist NULL means devices 0..%d, as in NCCL, "
                 "and there are %d: pass a devlist (ranks may share a GPU: {0, 0, ...})",
                 ndev - 1, st_dev()->count());
        return strataInvalidArgument;
    }
    if (devlist != NULL) {
        const st_dev_ops_t *dev = st_dev();

        for (int i = 0; i < ndev; i++) {
            if (dev == NULL || devlist[i] < 0 || devlist[i] >= dev->count()) {
                st_error(ST_SUB_INIT, "strataCommInitAll: devlist[%d] = %d is not a device (%d "
                         "here)", i, devlist[i], dev != NULL ? dev->count() : 0);
                return strataInvalidArgument;
            }
        }
    }
    result = strataGetUniqueId(&id);
    if (result != strataSuccess) {
        return result;
    }
    jobs    = calloc((size_t)ndev, sizeof(*jobs));
    threads = calloc((size_t)ndev, sizeof(*threads));
    if (jobs == NULL || threads == NULL) {
        free(jobs);
        free(threads);
        return strataSystemError;
    }
    for (int i = 0; i < ndev; i++) {
        comms[i]       = NULL;
        jobs[i].comm   = &comms[i];
        jobs[i].id     = id;
        /* NULL devlist: rank i on device i (NCCL's rule), or no device at all when none is
         * current in the caller (ranks on host buffers) */
        jobs[i].dev    = (devlist != NULL) ? devlist[i]
                         : (st_dev() != NULL && st_dev()->current() >= 0 ? i : -1);
        jobs[i].nranks = ndev;
        jobs[i].rank   = i;
        jobs[i].result = strataSystemError;
        if (pthread_create(&threads[i], NULL, st_api_init_all_thread, &jobs[i]) != 0) {
            break; /* the rest never join: the started ones time out */
        }
        started++;
    }
    result = (started == ndev) ? strataSuccess : strataSystemError;
    for (int i = 0; i < started; i++) {
        pthread_join(threads[i], NULL);
        if (jobs[i].result != strataSuccess && result == strataSuccess) {
            result = jobs[i].result;
            st_error(ST_SUB_INIT, "%s", jobs[i].errmsg);
        }
    }
    if (result != strataSuccess) {
        for (int i = 0; i < ndev; i++) {
            if (comms[i] != NULL) {
                strataCommDestroy(comms[i]);
                comms[i] = NULL;
            }
        }
    }
    free(jobs);
    free(threads);
    return result;
}

STRATA_API strataResult_t strataCommSplit(strataComm_t comm, int color, int key,
                                          strataComm_t *newcomm, strataConfig_t *config)
{
    strataResult_t result;
    double         op_timeout;
    const char    *name, *tune_file = NULL;
    st_comm_t     *child = NULL;
    st_status_t    status;

    ST_API_INIT();
    if (newcomm == NULL) {
        st_error(ST_SUB_INIT, "strataCommSplit: newcomm is NULL");
        return strataInvalidArgument;
    }
    result = st_api_check_comm(comm, "strataCommSplit");
    if (result != strataSuccess) {
        return result;
    }
    op_timeout = comm->timeout;
    name       = comm->name;
    if (config != NULL) {
        if (!st_api_config_ok(config)) {
            st_error(ST_SUB_INIT, "strataCommSplit: config was not initialised with "
                     "STRATA_CONFIG_INITIALIZER");
            return strataInvalidArgument;
        }
        if (config->timeoutMs != STRATA_CONFIG_UNDEF_INT && config->timeoutMs > 0) {
            op_timeout = config->timeoutMs / 1000.0;
        }
        if (config->name != NULL) {
            name = config->name;
        }
        tune_file = st_api_config_tune_file(config);
    }
    if (!st_api_blocking_enter(comm, "strataCommSplit")) {
        return strataInvalidUsage;
    }
    status = st_comm_split(comm, color, key, op_timeout, name, tune_file, &child);
    st_api_blocking_leave(comm);
    if (status != ST_OK) {
        return st_status_to_result(status);
    }
    if (child != NULL) {
        st_comm_register(child);
    }
    *newcomm = child;
    return strataSuccess;
}

/* Waits until comm has no queued stream work, no operation being driven and no thread inside a
 * blocking call on it (a split or collective that an abort just ended still touches comm on its
 * way out), at most timeout seconds. 1 when drained. */
static int st_api_wait_queued(st_comm_t *comm, double timeout)
{
    double deadline = st_time_now() + timeout;

    while (__atomic_load_n(&comm->queued, __ATOMIC_SEQ_CST) > 0 ||
           __atomic_load_n(&comm->active, __ATOMIC_SEQ_CST) > 0 ||
           __atomic_load_n(&comm->blocking, __ATOMIC_SEQ_CST) != 0) {
        if (st_time_now() > deadline) {
            return 0;
        }
        usleep(1000);
    }
    return 1;
}

STRATA_API strataResult_t strataCommFinalize(strataComm_t comm)
{
    ST_API_INIT();
    if (comm == NULL || !st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "strataCommFinalize: communicator %p is NULL or destroyed",
                 (void *)comm);
        return strataInvalidUsage;
    }
    if (!st_api_wait_queued(comm, comm->timeout)) {
        st_error(ST_SUB_INIT, "strataCommFinalize: %s still has queued work after %g s",
                 comm->name, comm->timeout);
        return strataTimeout;
    }
    if (comm->state == ST_COMM_READY) {
        comm->state = ST_COMM_FINALIZED;
    }
    return (strataResult_t)comm->async_error;
}

static strataResult_t st_api_destroy(strataComm_t comm, int force, const char *fn)
{
    if (comm == NULL || !st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "%s: communicator %p is NULL or destroyed", fn, (void *)comm);
        return strataInvalidUsage;
    }
    if (force) {
        st_comm_cancel(comm); /* a waiting init returns at once, blocked calls within 100 ms */
    }
    if (comm->init_thread_live) {
        pthread_join(comm->init_thread, NULL);
        comm->init_thread_live = 0;
    }
    if (!st_api_wait_queued(comm, force ? 5.0 : comm->timeout)) {
        /* Something still uses comm: freeing it would be a use after free. */
        comm->state = ST_COMM_ABORTED;
        st_comm_unregister(comm);
        int queued = __atomic_load_n(&comm->queued, __ATOMIC_SEQ_CST);

        st_error(ST_SUB_INIT, "%s: %s is still in use after %g s (%d call(s) queued%s, or another "
                 "thread's); abandoned", fn, comm->name, force ? 5.0 : comm->timeout, queued,
                 comm->devq != NULL && queued > 0 ? ": a call on device buffers waits until its "
                 "CUDA stream reaches it" : "");
        return strataInvalidUsage;
    }
    st_comm_unregister(comm);
    /* A made communicator that an operation failed with strataInvalidUsage (the ranks' wrong
     * calls: a mismatch) has live peers, still reading what this rank sent them (its failure
     * notice): its connections are flushed, not reset, so that a peer slower to read does not
     * lose the notice and report the broken connection instead of the mismatch (CI: 'Endpoint
     * timeout' under the sanitizers). Within the close's deadline (about 2 s for all); a
     * connection already failed, or broken by the op's own cancel, closes at once. */
    st_comm_free(comm, force || (comm->state != ST_COMM_READY &&
                                 !(comm->made && comm->async_error == strataInvalidUsage)));
    return strataSuccess;
}

STRATA_API strataResult_t strataCommDestroy(strataComm_t comm)
{
    ST_API_INIT();
    return st_api_destroy(comm, 0, "strataCommDestroy");
}

STRATA_API strataResult_t strataCommAbort(strataComm_t comm)
{
    ST_API_INIT();
    return st_api_destroy(comm, 1, "strataCommAbort");
}

STRATA_API strataResult_t strataCommGetAsyncError(strataComm_t comm, strataResult_t *asyncError)
{
    if (comm == NULL || asyncError == NULL) {
        st_error(ST_SUB_INIT, "strataCommGetAsyncError: %s is NULL",
                 comm == NULL ? "comm" : "asyncError");
        return strataInvalidArgument;
    }
    if (!st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "strataCommGetAsyncError: communicator %p was destroyed",
                 (void *)comm);
        return strataInvalidUsage;
    }
    if (comm->state == ST_COMM_INITIALIZING) {
        *asyncError = strataInProgress;
    } else {
        *asyncError = (strataResult_t)comm->async_error;
        if (*asyncError != strataSuccess && comm->async_msg[0] != '\0') {
            /* a call on device buffers failed in the device queue's thread: its words become
             * this thread's last error (strataGetLastError) */
            st_log_clear_error();
            st_log_append_error("%s", comm->async_msg);
        }
    }
    return strataSuccess;
}

STRATA_API strataResult_t strataCommCount(const strataComm_t comm, int *count)
{
    if (comm == NULL || count == NULL) {
        st_error(ST_SUB_INIT, "strataCommCount: %s is NULL", comm == NULL ? "comm" : "count");
        return strataInvalidArgument;
    }
    if (!st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "strataCommCount: communicator %p was destroyed", (void *)comm);
        return strataInvalidUsage;
    }
    *count = comm->nranks;
    return strataSuccess;
}

STRATA_API strataResult_t strataCommUserRank(const strataComm_t comm, int *rank)
{
    if (comm == NULL || rank == NULL) {
        st_error(ST_SUB_INIT, "strataCommUserRank: %s is NULL", comm == NULL ? "comm" : "rank");
        return strataInvalidArgument;
    }
    if (!st_comm_is_live(comm)) {
        st_error(ST_SUB_INIT, "strataCommUserRank: communicator %p was destroyed",
                 (void *)comm);
        return strataInvalidUsage;
    }
    *rank = comm->rank;
    return strataSuccess;
}

/* ---------------------------------------------------------------------------------------------- */
/* Reduction operations                                                                           */
/* ---------------------------------------------------------------------------------------------- */

STRATA_API strataResult_t strataRedOpCreatePreMulSum(strataRedOp_t *op, void *scalar,
                                                     strataDataType_t datatype,
                                                     strataScalarResidence_t residence,
                                                     strataComm_t comm)
{
    strataResult_t result;

    ST_API_INIT();
    if (op == NULL || scalar == NULL) {
        st_error(ST_SUB_COLL, "strataRedOpCreatePreMulSum: %s is NULL",
                 op == NULL ? "op" : "scalar");
        return strataInvalidArgument;
    }
    if ((unsigned)datatype >= strataNumTypes) {
        st_error(ST_SUB_COLL, "strataRedOpCreatePreMulSum: unknown datatype %d", (int)datatype);
        return strataInvalidArgument;
    }
    if (residence != strataScalarHostImmediate) {
        st_error(ST_SUB_COLL, "strataRedOpCreatePreMulSum: residence %d unsupported for host "
                 "memory (use strataScalarHostImmediate)", (int)residence);
        return strataInvalidArgument;
    }
    result = st_api_check_comm(comm, "strataRedOpCreatePreMulSum");
    if (result != strataSuccess) {
        return (comm == NULL) ? strataInvalidArgument : result;
    }
    for (int i = 0; i < ST_COMM_MAX_PREMUL; i++) {
        if (!comm->premul[i].used) {
            if (st_redop_init_premul(&comm->premul[i].redop, datatype, scalar) != ST_OK) {
                return strataInvalidArgument;
            }
            comm->premul[i].used = 1;
            *op = (strataRedOp_t)(strataNumOps + i);
            return strataSuccess;
        }
    }
    st_error(ST_SUB_COLL, "strataRedOpCreatePreMulSum: all %d op slots of %s are in use",
             ST_COMM_MAX_PREMUL, comm->name);
    return strataInvalidUsage;
}

STRATA_API strataResult_t strataRedOpDestroy(strataRedOp_t op, strataComm_t comm)
{
    strataResult_t result = st_api_check_comm(comm, "strataRedOpDestroy");
    int            slot = (int)op - strataNumOps;

    if (result != strataSuccess && (comm == NULL || !st_comm_is_live(comm))) {
        return result;
    }
    if (slot < 0 || slot >= ST_COMM_MAX_PREMUL || !comm->premul[slot].used) {
        st_error(ST_SUB_COLL, "strataRedOpDestroy: op %d is not a live op of %s", (int)op,
                 comm->name);
        return strataInvalidArgument;
    }
    comm->premul[slot].used = 0;
    return strataSuccess;
}

/* ---------------------------------------------------------------------------------------------- */
/* Collectives                                                                                    */
/* ---------------------------------------------------------------------------------------------- */

/* The buffers a call of args touches on this rank (a broadcast's and a scatter's sendbuff only on
 * the root, a reduce's and a gather's recvbuff only there; an all-to-all-v's where a count into
 * it is nonzero), with their names; returns how many (0 for count 0). */
static int st_api_touched(const st_coll_args_t *args, const void **bufs, const char **names)
{
    int root = (args->comm->rank == args->root);
    int n    = 0;

    if (args->type == ST_COLL_ALLTOALLV) {
        int sends = 0, recvs = 0;

        for (int p = 0; p < args->comm->nranks; p++) {
            sends |= (args->scounts[p] > 0);
            recvs |= (args->rcounts[p] > 0);
        }
        if (sends) {
            bufs[n]    = args->sendbuff;
            names[n++] = "sendbuff";
        }
        if (recvs) {
            bufs[n]    = args->recvbuff;
            names[n++] = "recvbuff";
        }
        return n;
    }
    if (args->count == 0) {
        return 0;
    }
    if (args->type != ST_COLL_RECV &&
        ((args->type != ST_COLL_BROADCAST && args->type != ST_COLL_SCATTER) || root)) {
        bufs[n]    = args->sendbuff;
        names[n++] = "sendbuff";
    }
    if (args->type != ST_COLL_SEND &&
        ((args->type != ST_COLL_REDUCE && args->type != ST_COLL_GATHER) || root)) {
        bufs[n]    = args->recvbuff;
        names[n++] = "recvbuff";
    }
    return n;
}

/* Decides where the call's buffers are (args->mem) and checks that the stream and the
 * communicator fit them: device buffers on the communicator's device, ordered on a CUDA stream
 * (or NULL: the legacy default stream) that is not being captured; host buffers with NULL or a
 * strata host stream. */
static strataResult_t st_api_mem_check(st_coll_args_t *args, const char *fn,
                                       strataStream_t stream)
{
    st_comm_t          *comm        = args->comm;
    const st_dev_ops_t *dev         = st_dev();
    int                 host_stream = (stream != NULL && st_stream_is_live(stream));
    const void         *bufs[2];
    const char         *names[2];
    int                 on_dev[2], devno[2] = {-1, -1};
    int                 n = 0, ndev = 0;

    args->mem = ST_MEM_HOST;
    if (dev != NULL) {
        int all = st_api_touched(args, bufs, names);

        /* a NULL buffer is no kind of memory: the caller's NULL check names it */
        for (int i = 0; i < all; i++) {
            if (bufs[i] != NULL) {
                bufs[n]  = bufs[i];
                names[n] = names[i];
                on_dev[n] = (dev->ptr_type(bufs[n], &devno[n]) == ST_DEV_PTR_DEVICE);
                ndev += on_dev[n++];
            }
        }
    }
    if (ndev > 0 && ndev < n) {
        int d = on_dev[0] ? 0 : 1;

        st_error(ST_SUB_COLL, "%s (rank %d): %s %p is device memory (device %d) but %s %p is "
                 "host memory: one call takes buffers of one kind", fn, comm->rank, names[d],
                 bufs[d], devno[d], names[1 - d], bufs[1 - d]);
        return strataInvalidArgument;
    }
    if (ndev > 0) {
        if (comm->dev_id < 0) {
            st_error(ST_SUB_COLL, "%s (rank %d): device buffers, but no device was current when "
                     "communicator %s was made (call cudaSetDevice before strataCommInitRank)",
                     fn, comm->rank, comm->name);
            return strataInvalidUsage;
        }
        for (int i = 0; i < n; i++) {
            if (devno[i] != comm->dev_id) {
                st_error(ST_SUB_COLL, "%s (rank %d): %s %p is on device %d, communicator %s on "
                         "device %d", fn, comm->rank, names[i], bufs[i], devno[i], comm->name,
                         comm->dev_id);
                return strataInvalidArgument;
            }
        }
        if (host_stream) {
            st_error(ST_SUB_COLL, "%s (rank %d): device buffers are ordered on a CUDA stream, not "
                     "on strata host stream %p", fn, comm->rank, (void *)stream);
            return strataInvalidUsage;
        }
    } else if (stream == NULL || host_stream) {
        return strataSuccess; /* host buffers (or none), as before */
    }
    /* device buffers, or a stream that is no host stream: it must be a CUDA stream */
    if (stream != NULL) {
        int capturing = (dev != NULL) ? dev->stream_capturing((st_dev_stream_t *)stream) : -1;

        if (capturing < 0) {
            st_error(ST_SUB_COLL, "%s (rank %d): stream %p is neither a live strata host stream "
                     "nor a CUDA stream%s", fn, comm->rank, (void *)stream,
                     dev != NULL ? " of this device" : " (no device layer: STRATA_DEVICE)");
            return strataInvalidArgument;
        }
        if (capturing > 0) {
            st_error(ST_SUB_COLL, "%s (rank %d): CUDA stream %p is being captured into a graph: "
                     "strata cannot be captured yet (call it outside the capture)", fn,
                     comm->rank, (void *)stream);
            return strataInvalidUsage;
        }
        if (ndev == 0 && n > 0) {
            st_error(ST_SUB_COLL, "%s (rank %d): host buffers with CUDA stream %p: host memory "
                     "takes NULL or a strata host stream (strataStreamCreate), a CUDA stream "
                     "takes device buffers", fn, comm->rank, (void *)stream);
            return strataInvalidUsage;
        }
        if (comm->dev_id < 0) {
            st_error(ST_SUB_COLL, "%s (rank %d): CUDA stream %p, but no device was current when "
                     "communicator %s was made", fn, comm->rank, (void *)stream, comm->name);
            return strataInvalidUsage;
        }
    }
    args->mem = ST_MEM_CUDA; /* device buffers, or count 0 on a CUDA stream: still ordered */
    return strataSuccess;
}

/* Checks a call and fills args (without its sequence number): the root of a rooted collective
 * and the reduction op of a reducing one (engine/op.h's table; op is ignored otherwise). */
static strataResult_t st_api_coll_check(st_coll_args_t *args, const char *fn, strataRedOp_t op,
                                        strataStream_t stream)
{
    st_comm_t            *comm   = args->comm;
    const st_coll_info_t *info   = st_coll_info(args->type);
    strataResult_t        result = st_api_check_comm(comm, fn);
    size_t                esize, total;

    if (result != strataSuccess) {
        return result;
    }
    if ((unsigned)args->dtype >= strataNumTypes) {
        st_error(ST_SUB_COLL, "%s (rank %d): unknown datatype %d", fn, comm->rank,
                 (int)args->dtype);
        return strataInvalidArgument;
    }
    esize = st_dtype_size(args->dtype);
    total = info->per_rank ? (size_t)comm->nranks : 1;
    /* No machine maps 2^48 bytes (x86-64 and aarch64 user space is 2^47): a larger buffer is a
     * bad count, not a transfer to attempt. */
    if (args->count > (UINT64_C(1) << 48) / esize / total) {
        st_error(ST_SUB_COLL, "%s (rank %d): count %zu of %s overflows the address space", fn,
                 comm->rank, args->count, st_dtype_name(args->dtype));
        return strataInvalidArgument;
    }
    if (info->rooted && (args->root < 0 || args->root >= comm->nranks)) {
        st_error(ST_SUB_COLL, "%s (rank %d): root %d is outside [0, %d)", fn, comm->rank,
                 args->root, comm->nranks);
        return strataInvalidArgument;
    }
    if (info->reduces) {
        if ((int)op >= 0 && (int)op < strataNumOps) {
            if (st_redop_init(&args->redop, op, args->dtype, comm->nranks) != ST_OK) {
                st_error(ST_SUB_COLL, "%s (rank %d): op %d unsupported for %s", fn, comm->rank,
                         (int)op, st_dtype_name(args->dtype));
                return strataInvalidArgument;
            }
        } else {
            int slot = (int)op - strataNumOps;
            if (slot < 0 || slot >= ST_COMM_MAX_PREMUL || !comm->premul[slot].used) {
                st_error(ST_SUB_COLL, "%s (rank %d): unknown reduction op %d", fn, comm->rank,
                         (int)op);
                return strataInvalidArgument;
            }
            if (comm->premul[slot].redop.dtype != args->dtype) {
                st_error(ST_SUB_COLL, "%s (rank %d): op %d was made for %s, not %s", fn,
                         comm->rank, (int)op, st_dtype_name(comm->premul[slot].redop.dtype),
                         st_dtype_name(args->dtype));
                return strataInvalidArgument;
            }
            args->redop = comm->premul[slot].redop;
        }
    } else {
        args->redop.dtype = args->dtype;
    }
    return st_api_mem_check(args, fn, stream);
}

static strataResult_t st_api_null_buffer(const st_coll_args_t *args, const char *fn,
                                         const char *which)
{
    st_error(ST_SUB_COLL, "%s (rank %d): %s is NULL with count %zu", fn, args->comm->rank, which,
             args->count);
    return strataInvalidArgument;
}

/* Assigns the sequence number and routes the call. */
static strataResult_t st_api_launch(st_coll_args_t *args, strataStream_t stream)
{
    st_comm_t  *comm = args->comm;
    st_status_t status;
    int         blocking = (stream == NULL && args->mem != ST_MEM_CUDA && st_group_depth() == 0);

    if (blocking && !st_api_blocking_enter(comm, st_coll_name(args->type))) {
        return strataInvalidUsage;
    }
    pthread_mutex_lock(&comm->lock);
    if (args->type == ST_COLL_SEND) {
        args->seq = comm->p2p_send_seq[args->peer]++;
    } else if (args->type == ST_COLL_RECV) {
        args->seq = comm->p2p_recv_seq[args->peer]++;
    } else {
        args->seq = comm->coll_seq++;
    }
    pthread_mutex_unlock(&comm->lock);
    status = st_enqueue(args, stream);
    if (status != ST_OK && !st_coll_info(args->type)->p2p) {
        /* not queued (out of memory): later collectives must not wait for it; harmless when
         * it ran and failed (st_comm_order_done is idempotent) */
        st_comm_order_done(comm, args->seq);
    }
    if (blocking) {
        st_api_blocking_leave(comm);
    }
    return st_status_to_result(status);
}

st_status_t st_enqueue(const st_coll_args_t *args, strataStream_t stream)
{
    if (st_group_depth() > 0) {
        return st_group_add(args, stream);
    }
    if (args->mem == ST_MEM_CUDA) {
        return st_devq_push(&stream, 1, args, 1);
    }
    if (stream != NULL) {
        return st_stream_push(stream, args, 1);
    }
    return st_coll_run(args, 1);
}

#define ST_API_ARGS(_type, _comm, _send, _recv, _count, _dtype)                                  \
    st_coll_args_t args;                                                                         \
    strataResult_t result;                                                                       \
    ST_API_INIT();                                                                               \
    memset(&args, 0, sizeof(args));                                                              \
    args.type     = (_type);                                                                     \
    args.comm     = (_comm);                                                                     \
    args.sendbuff = (_send);                                                                     \
    args.recvbuff = (_recv);                                                                     \
    args.count    = (_count);                                                                    \
    args.dtype    = (_dtype);                                                                    \
    args.root     = -1;                                                                          \
    args.peer     = -1

STRATA_API strataResult_t strataAllReduce(const void *sendbuff, void *recvbuff, size_t count,
                                          strataDataType_t datatype, strataRedOp_t op,
                                          strataComm_t comm, strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype);
    result = st_api_coll_check(&args, "strataAllReduce", op, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataAllReduce", "sendbuff"));
    }
    if (count > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataAllReduce", "recvbuff"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataAllReduceCompressed(const void *sendbuff, void *recvbuff,
                                                    size_t count, strataDataType_t datatype,
                                                    strataRedOp_t op,
                                                    strataCompressor_t compressor,
                                                    strataComm_t comm, strataStream_t stream)
{
    static const char fn[] = "strataAllReduceCompressed";

    ST_API_ARGS(ST_COLL_ALLREDUCE, comm, sendbuff, recvbuff, count, datatype);
    result = st_api_coll_check(&args, fn, op, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (compressor == NULL) {
        st_error(ST_SUB_COLL, "%s (rank %d): compressor is NULL (strataCompressorCreate makes one)",
                 fn, comm->rank);
        return st_group_note(strataInvalidArgument);
    }
    if (compressor->count != count || compressor->dtype != datatype) {
        st_error(ST_SUB_COLL, "%s (rank %d): the compressor was made for count %zu of %s, the call "
                 "is count %zu of %s (one compressor per bucket)", fn, comm->rank,
                 compressor->count, st_dtype_name(compressor->dtype), count,
                 st_dtype_name(datatype));
        return st_group_note(strataInvalidArgument);
    }
    if (op != strataSum && op != strataAvg) {
        st_error(ST_SUB_COLL, "%s (rank %d): op %d: a compressed all-reduce sums (strataSum) or "
                 "averages (strataAvg)", fn, comm->rank, (int)op);
        return st_group_note(strataInvalidArgument);
    }
    if (args.mem == ST_MEM_CUDA) {
        st_error(ST_SUB_COLL, "%s (rank %d): device buffers: compression runs on host buffers "
                 "for now", fn, comm->rank);
        return st_group_note(strataInvalidUsage);
    }
    if (count > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "sendbuff"));
    }
    if (count > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "recvbuff"));
    }
    /* bound at the first call that passed the checks (its residual is this rank's share on
     * this communicator) */
    if (__atomic_load_n(&compressor->comm, __ATOMIC_ACQUIRE) != comm) {
        void *none = NULL;

        if (!__atomic_compare_exchange_n(&compressor->comm, &none, (void *)comm, 0,
                                         __ATOMIC_ACQ_REL, __ATOMIC_ACQUIRE) &&
            none != comm) {
            st_error(ST_SUB_COLL, "%s (rank %d): the compressor is bound to another "
                     "communicator (the one of its first call), not to this one (%s): its "
                     "residual is this rank's share there; one compressor per bucket and "
                     "communicator, or strataCompressorReset to rebind it", fn, comm->rank,
                     comm->name);
            return st_group_note(strataInvalidArgument);
        }
    }
    /* only the inter-node step is compressed: on one node the call is strataAllReduce */
    if (comm->nnodes > 1) {
        args.compress = compressor;
        args.algo     = ST_ALGO_HIER;
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataBroadcast(const void *sendbuff, void *recvbuff, size_t count,
                                          strataDataType_t datatype, int root, strataComm_t comm,
                                          strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_BROADCAST, comm, sendbuff, recvbuff, count, datatype);
    args.root = root;
    result = st_api_coll_check(&args, "strataBroadcast", strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && comm->rank == root && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataBroadcast", "sendbuff (on root)"));
    }
    if (count > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataBroadcast", "recvbuff"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataReduce(const void *sendbuff, void *recvbuff, size_t count,
                                       strataDataType_t datatype, strataRedOp_t op, int root,
                                       strataComm_t comm, strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_REDUCE, comm, sendbuff, recvbuff, count, datatype);
    args.root = root;
    result = st_api_coll_check(&args, "strataReduce", op, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataReduce", "sendbuff"));
    }
    if (count > 0 && comm->rank == root && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataReduce", "recvbuff (on root)"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataAllGather(const void *sendbuff, void *recvbuff, size_t sendcount,
                                          strataDataType_t datatype, strataComm_t comm,
                                          strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_ALLGATHER, comm, sendbuff, recvbuff, sendcount, datatype);
    result = st_api_coll_check(&args, "strataAllGather", strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (sendcount > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataAllGather", "sendbuff"));
    }
    if (sendcount > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataAllGather", "recvbuff"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataReduceScatter(const void *sendbuff, void *recvbuff,
                                              size_t recvcount, strataDataType_t datatype,
                                              strataRedOp_t op, strataComm_t comm,
                                              strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_REDUCESCATTER, comm, sendbuff, recvbuff, recvcount, datatype);
    result = st_api_coll_check(&args, "strataReduceScatter", op, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (recvcount > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataReduceScatter", "sendbuff"));
    }
    if (recvcount > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, "strataReduceScatter", "recvbuff"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataAlltoAll(const void *sendbuff, void *recvbuff, size_t count,
                                         strataDataType_t datatype, strataComm_t comm,
                                         strataStream_t stream)
{
    const char *fn = "strataAlltoAll";
    size_t      bytes;

    ST_API_ARGS(ST_COLL_ALLTOALL, comm, sendbuff, recvbuff, count, datatype);
    result = st_api_coll_check(&args, fn, strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "sendbuff"));
    }
    if (count > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "recvbuff"));
    }
    bytes = count * st_dtype_size(datatype) * (size_t)comm->nranks;
    if (count > 0 && (const char *)sendbuff < (const char *)recvbuff + bytes &&
        (const char *)recvbuff < (const char *)sendbuff + bytes) {
        st_error(ST_SUB_COLL, "%s (rank %d): sendbuff %p and recvbuff %p overlap (%zu B each): an "
                 "all-to-all is never in place", fn, comm->rank, sendbuff, recvbuff, bytes);
        return st_group_note(strataInvalidArgument);
    }
    return st_group_note(st_api_launch(&args, stream));
}

/* One block of an all-to-all-v on this rank, for the overlap check. */
typedef struct st_api_range {
    uintptr_t lo, hi; /* [lo, hi) bytes */
    int       peer;
    int       recv;   /* 1: a block of recvbuff, 0: of sendbuff */
} st_api_range_t;

static int st_api_range_cmp(const void *a, const void *b)
{
    const st_api_range_t *x = a, *y = b;

    return (x->lo > y->lo) - (x->lo < y->lo);
}

/* Checks the arrays of an all-to-all-v against the buffers: every nonzero block within 2^48 B, a
 * buffer for it, no two received blocks overlapping, no received block overlapping a block that
 * is sent (blocks sent may overlap each other: they are only read). Sets args->count to the
 * elements sent in all. */
static strataResult_t st_api_alltoallv_ranges(st_coll_args_t *args, const char *fn)
{
    st_comm_t      *comm = args->comm;
    int             n = comm->nranks, nr = 0;
    size_t          es = st_dtype_size(args->dtype), limit = (UINT64_C(1) << 48) / es;
    size_t          total = 0;
    st_api_range_t *r;
    uintptr_t       hi[2] = {0, 0};
    int             hi_peer[2] = {-1, -1};

    r = malloc(2 * (size_t)n * sizeof(*r));
    if (r == NULL) {
        st_error(ST_SUB_COLL, "%s (rank %d): out of memory checking %d ranks' blocks", fn,
                 comm->rank, n);
        return strataSystemError;
    }
    for (int p = 0; p < n; p++) {
        for (int recv = 0; recv < 2; recv++) {
            size_t      cnt  = recv ? args->rcounts[p] : args->scounts[p];
            size_t      disp = recv ? args->rdispls[p] : args->sdispls[p];
            const char *buf  = recv ? args->recvbuff : args->sendbuff;

            if (cnt == 0) {
                continue;
            }
            if (buf == NULL) {
                st_error(ST_SUB_COLL, "%s (rank %d): %s is NULL with %s[%d] = %zu", fn,
                         comm->rank, recv ? "recvbuff" : "sendbuff",
                         recv ? "recvcounts" : "sendcounts", p, cnt);
                free(r);
                return strataInvalidArgument;
            }
            if (cnt > limit || disp > limit - cnt) {
                st_error(ST_SUB_COLL, "%s (rank %d): %s[%d] %zu + %s[%d] %zu of %s overflows the "
                         "address space", fn, comm->rank, recv ? "rdispls" : "sdispls", p, disp,
                         recv ? "recvcounts" : "sendcounts", p, cnt, st_dtype_name(args->dtype));
                free(r);
                return strataInvalidArgument;
            }
            r[nr].lo   = (uintptr_t)buf + disp * es;
            r[nr].hi   = r[nr].lo + cnt * es;
            r[nr].peer = p;
            r[nr].recv = recv;
            nr++;
            if (!recv) {
                total = (total + cnt < total) ? SIZE_MAX : total + cnt;
            }
        }
    }
    /* sorted by start, a block overlaps an earlier one exactly when it starts before the end of
     * the furthest-reaching earlier block of that kind */
    qsort(r, (size_t)nr, sizeof(*r), st_api_range_cmp);
    for (int i = 0; i < nr; i++) {
        for (int kind = 0; kind < 2; kind++) {
            if ((r[i].recv || kind == 1) && hi_peer[kind] >= 0 && r[i].lo < hi[kind]) {
                int a = hi_peer[kind], b = r[i].peer;

                st_error(ST_SUB_COLL, "%s (rank %d): the block %s rank %d (%s) overlaps the block "
                         "%s rank %d (%s): received blocks may overlap no other block", fn,
                         comm->rank, kind ? "received from" : "sent to", a,
                         kind ? "recvbuff, rdispls" : "sendbuff, sdispls",
                         r[i].recv ? "received from" : "sent to", b,
                         r[i].recv ? "recvbuff, rdispls" : "sendbuff, sdispls");
                free(r);
                return strataInvalidArgument;
            }
        }
        if (r[i].hi > hi[r[i].recv]) {
            hi[r[i].recv]      = r[i].hi;
            hi_peer[r[i].recv] = r[i].peer;
        }
    }
    free(r);
    args->count = total;
    return strataSuccess;
}

STRATA_API strataResult_t strataAlltoAllv(const void *sendbuff, const size_t sendcounts[],
                                          const size_t sdispls[], void *recvbuff,
                                          const size_t recvcounts[], const size_t rdispls[],
                                          strataDataType_t datatype, strataComm_t comm,
                                          strataStream_t stream)
{
    const char *fn = "strataAlltoAllv";
    const char *null_array = NULL;

    ST_API_ARGS(ST_COLL_ALLTOALLV, comm, sendbuff, recvbuff, 0, datatype);
    result = st_api_check_comm(comm, fn);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    null_array = sendcounts == NULL ? "sendcounts" : sdispls == NULL ? "sdispls"
               : recvcounts == NULL ? "recvcounts" : rdispls == NULL ? "rdispls" : NULL;
    if (null_array != NULL) {
        st_error(ST_SUB_COLL, "%s (rank %d): %s is NULL (four arrays of %d entries are needed)",
                 fn, comm->rank, null_array, comm->nranks);
        return st_group_note(strataInvalidArgument);
    }
    args.scounts = sendcounts;
    args.sdispls = sdispls;
    args.rcounts = recvcounts;
    args.rdispls = rdispls;
    result = st_api_coll_check(&args, fn, strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    result = st_api_alltoallv_ranges(&args, fn);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    /* the arrays are the caller's until this returns: a group or a stream keeps its own copy */
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataGather(const void *sendbuff, void *recvbuff, size_t count,
                                       strataDataType_t datatype, int root, strataComm_t comm,
                                       strataStream_t stream)
{
    const char *fn = "strataGather";

    ST_API_ARGS(ST_COLL_GATHER, comm, sendbuff, recvbuff, count, datatype);
    args.root = root;
    result = st_api_coll_check(&args, fn, strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "sendbuff"));
    }
    if (count > 0 && comm->rank == root && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "recvbuff (on root)"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

STRATA_API strataResult_t strataScatter(const void *sendbuff, void *recvbuff, size_t count,
                                        strataDataType_t datatype, int root, strataComm_t comm,
                                        strataStream_t stream)
{
    const char *fn = "strataScatter";

    ST_API_ARGS(ST_COLL_SCATTER, comm, sendbuff, recvbuff, count, datatype);
    args.root = root;
    result = st_api_coll_check(&args, fn, strataSum, stream);
    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (count > 0 && comm->rank == root && sendbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "sendbuff (on root)"));
    }
    if (count > 0 && recvbuff == NULL) {
        return st_group_note(st_api_null_buffer(&args, fn, "recvbuff"));
    }
    return st_group_note(st_api_launch(&args, stream));
}

static strataResult_t st_api_p2p(st_coll_args_t *args, const char *fn, int peer,
                                 strataStream_t stream)
{
    strataResult_t result = st_api_coll_check(args, fn, strataSum, stream);

    if (result != strataSuccess) {
        return st_group_note(result);
    }
    if (peer < 0 || peer >= args->comm->nranks) {
        st_error(ST_SUB_P2P, "%s (rank %d): peer %d is outside [0, %d)", fn, args->comm->rank,
                 peer, args->comm->nranks);
        return strataInvalidArgument;
    }
    args->peer = peer;
    if (args->count > 0 && (args->type == ST_COLL_SEND ? args->sendbuff == NULL
                                                       : args->recvbuff == NULL)) {
        return st_group_note(st_api_null_buffer(args, fn, args->type == ST_COLL_SEND ? "sendbuff"
                                                                        : "recvbuff"));
    }
    if (peer == args->comm->rank && (stream == NULL || args->mem == ST_MEM_CUDA) &&
        st_group_depth() == 0) {
        /* blocking until matched: the matching call of this thread can never come */
        st_error(ST_SUB_P2P, "%s (rank %d): to itself outside a group with no stream (or on "
                 "device buffers) would wait forever; put the send and the receive in one "
                 "strataGroupStart/End", fn, peer);
        return strataInvalidUsage;
    }
    return st_api_launch(args, stream);
}

STRATA_API strataResult_t strataSend(const void *sendbuff, size_t count,
                                     strataDataType_t datatype, int peer, strataComm_t comm,
                                     strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_SEND, comm, sendbuff, NULL, count, datatype);
    (void)result;
    return st_group_note(st_api_p2p(&args, "strataSend", peer, stream));
}

STRATA_API strataResult_t strataRecv(void *recvbuff, size_t count, strataDataType_t datatype,
                                     int peer, strataComm_t comm, strataStream_t stream)
{
    ST_API_ARGS(ST_COLL_RECV, comm, NULL, recvbuff, count, datatype);
    (void)result;
    return st_group_note(st_api_p2p(&args, "strataRecv", peer, stream));
}
