/*
 * device.c - collbench's --device: the run's buffers in device memory, ordered on a device stream.
 *
 * With --device sim or cuda, main() sets STRATA_DEVICE before any rank starts (as -A sets
 * STRATA_ALGO), so every rank's strata picks that device layer, and each rank then works through
 * st_dev(), the library's own device table (collbench links the library's convenience archive,
 * so it shares the one instance of the layer: the simulated device knows its memory and streams
 * by a process-wide table, and a second copy of it would not know the library's). A rank makes
 * device (local rank % devices) current before its communicator (strata takes the communicator's
 * device from the current one, as NCCL does), allocates its two buffers in device memory
 * (mem_alloc; strataMemAlloc with --mem-alloc, which gives device memory when a device is
 * current) and two pinned host mirrors of them. data.c fills and checks the mirrors; the inputs
 * are copied in before each call and the result copied out after the checked call. Calls go on a
 * stream of collbench's own (stream_create: the role of the user's cudaStream_t), or on the legacy
 * default stream (NULL) with -z 1; a timed region ends with stream_sync, which returns when the
 * gate strata put on the stream has opened, i.e. when the last call is over.
 *
 * The checked call of every row is ordered by the stream alone, as a user's program orders its
 * kernels around a collective: the inputs are copied into two staging buffers, a producer kernel
 * (a reduction job of one source, which is a copy, reduce/kernel.h) writes them into the call's
 * buffers, the collective runs, a consumer kernel copies the receive buffer into staging and a
 * copy brings it to the host, all queued back to back with a single stream_sync at the end. A
 * collective that started before its stream reached it, or a gate that opened early, shows as
 * #wrong (the buffers still hold the previous call's data). A CUDA build without the GPU kernels
 * uses copies for producer and consumer instead, and says so.
 *
 * The -np parent never touches the device layer (a CUDA context does not survive fork): it asks a
 * short-lived child whether the layer exists, so that a missing driver is one line, not one
 * failure per rank.
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "collbench.h"
#include "device/dev.h"

struct cb_device {
    const st_dev_ops_t *dev;
    int                 kind;     /* cb_device_kind_t */
    int                 ordinal;  /* the rank's device */
    st_dev_stream_t    *stream;   /* collbench's stream; NULL: the legacy default stream */
    int                 shared;   /* buffers from strataMemAlloc */
    void               *dbuf[2];  /* device send, recv */
    void               *hbuf[2];  /* pinned host mirrors */
    void               *stage[2]; /* device staging of the checked call's producer and consumer */
    int                 kernels;  /* 1: producer and consumer are reduction kernels */
};

static const char *const cb_device_names[] = {"host", "sim", "cuda"};

/* The rank's index on its node, when the launcher knows it (launch.c sets it for -np). */
int cb_local_rank = -1;

int cb_device_parse(const char *arg)
{
    for (int i = 0; i < (int)(sizeof(cb_device_names) / sizeof(cb_device_names[0])); i++) {
        if (strcmp(arg, cb_device_names[i]) == 0) {
            return i;
        }
    }
    return -1;
}

const char *cb_device_name(int kind)
{
    return (kind >= 0 && kind <= CB_DEVICE_CUDA) ? cb_device_names[kind] : "?";
}

const char *cb_device_order(const cb_device_t *d)
{
    return d->kernels ? "producer kernel -> call -> consumer kernel" : "copy -> call -> copy";
}

const char *cb_device_caption(int kind)
{
    switch (kind) {
    case CB_DEVICE_SIM: return "sim (simulated on the CPU: not GPU performance)";
    case CB_DEVICE_CUDA: return "cuda (buffers in GPU memory, calls on a CUDA stream)";
    default: return "host (buffers in host memory)";
    }
}

/* The rank's place on its node: what -np told us, else a launcher's variable, else 0. */
static int cb_device_local_rank(void)
{
    static const char *const vars[] = {"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID",
                                       "SLURM_LOCALID", "LOCAL_RANK"};
    const char              *v;

    if (cb_local_rank >= 0) {
        return cb_local_rank;
    }
    for (size_t i = 0; i < sizeof(vars) / sizeof(vars[0]); i++) {
        v = getenv(vars[i]);
        if (v != NULL && v[0] != '\0') {
            return atoi(v);
        }
    }
    return 0;
}

/* The one line that says why there is no device layer (strata's own explanation). */
static void cb_device_missing(const cb_opts_t *opts, const char *who)
{
    const char *why = strataGetLastError(NULL);

    fprintf(stderr, "%s: %s--device %s: no device layer (%s)\n", opts->prog, who,
            cb_device_name(opts->device),
            (why != NULL && why[0] != '\0')
                ? why
                : (opts->device == CB_DEVICE_CUDA ? "no usable CUDA driver or GPU"
                                                  : "this build has no such device"));
}

int cb_device_probe(const cb_opts_t *opts)
{
    pid_t pid;
    int   st;

    if (opts->device == CB_DEVICE_HOST) {
        return 0;
    }
    fflush(NULL);
    pid = fork();
    if (pid < 0) {
        return 0; /* the ranks will find out themselves */
    }
    if (pid == 0) {
        int ok;

        setenv("STRATA_DEBUG", "NONE", 1); /* the line below says it once */
        ok = st_dev() != NULL;
        if (!ok) {
            cb_device_missing(opts, "");
        }
        fflush(NULL);
        _exit(ok ? 0 : 3);
    }
    while (waitpid(pid, &st, 0) < 0) {
    }
    return (WIFEXITED(st) && WEXITSTATUS(st) == 3) ? 2 : 0;
}

int cb_device_open(const cb_opts_t *opts, int rank, cb_device_t **d_p)
{
    cb_device_t *d;
    st_status_t  status;
    char         who[32];

    snprintf(who, sizeof(who), "rank %d: ", rank);
    d = calloc(1, sizeof(*d));
    if (d == NULL) {
        fprintf(stderr, "%s: %sout of memory\n", opts->prog, who);
        return -1;
    }
    d->kind = opts->device;
    d->dev  = st_dev();
    if (d->dev == NULL) {
        cb_device_missing(opts, who);
        free(d);
        return -1;
    }
    if (strcmp(d->dev->name, cb_device_name(opts->device)) != 0) {
        fprintf(stderr, "%s: %s--device %s but strata's device layer is %s (STRATA_DEVICE)\n",
                opts->prog, who, cb_device_name(opts->device), d->dev->name);
        free(d);
        return -1;
    }
    d->ordinal = cb_device_local_rank() % d->dev->count();
    status     = d->dev->set_current(d->ordinal);
    if (status != ST_OK) {
        fprintf(stderr, "%s: %scannot make device %d current: %s\n", opts->prog, who, d->ordinal,
                strataGetLastError(NULL));
        free(d);
        return -1;
    }
    if (!opts->blocking) {
        status = d->dev->stream_create(&d->stream);
        if (status != ST_OK) {
            fprintf(stderr, "%s: %scannot create a device stream: %s\n", opts->prog, who,
                    strataGetLastError(NULL));
            free(d);
            return -1;
        }
    }
    *d_p = d;
    return 0;
}

int cb_device_ordinal(const cb_device_t *d)
{
    return d->ordinal;
}

strataStream_t cb_device_stream(const cb_device_t *d)
{
    return (strataStream_t)d->stream; /* a device stream is what cudaStream_t is */
}

int cb_device_alloc(cb_device_t *d, const cb_opts_t *opts, int rank, size_t bytes, char **send_p,
                    char **recv_p, char **hsend_p, char **hrecv_p)
{
    const char *what = opts->mem_alloc ? "strataMemAlloc" : "device mem_alloc";
    int         devno;

    d->shared = opts->mem_alloc;
    for (int i = 0; i < 2; i++) {
        if (d->shared) {
            if (strataMemAlloc(&d->dbuf[i], bytes) != strataSuccess) {
                d->dbuf[i] = NULL;
            }
        } else if (d->dev->mem_alloc(bytes, &d->dbuf[i]) != ST_OK) {
            d->dbuf[i] = NULL;
        }
        if (d->dbuf[i] == NULL) {
            fprintf(stderr, "%s: rank %d: %s of 2 x %zu bytes failed (lower -e): %s\n", opts->prog,
                    rank, what, bytes, strataGetLastError(NULL));
            return -1;
        }
        if (d->dev->ptr_type(d->dbuf[i], &devno) != ST_DEV_PTR_DEVICE || devno != d->ordinal) {
            fprintf(stderr,
                    "%s: rank %d: %s gave host memory, not memory of device %d (this "
                    "build has no device window transport for --mem-alloc)\n",
                    opts->prog, rank, what, d->ordinal);
            return -1;
        }
        if (d->dev->host_alloc(bytes, &d->hbuf[i]) != ST_OK) {
            d->hbuf[i] = NULL;
            fprintf(stderr,
                    "%s: rank %d: 2 x %zu bytes of pinned host memory failed (lower -e): "
                    "%s\n",
                    opts->prog, rank, bytes, strataGetLastError(NULL));
            return -1;
        }
    }
    for (int i = 0; i < 2; i++) {
        if (d->dev->mem_alloc(bytes, &d->stage[i]) != ST_OK) {
            d->stage[i] = NULL;
            fprintf(stderr,
                    "%s: rank %d: 2 staging buffers of %zu bytes on the device failed "
                    "(lower -e): %s\n",
                    opts->prog, rank, bytes, strataGetLastError(NULL));
            return -1;
        }
    }
    /* the simulated device runs jobs on the CPU; a CUDA build may lack the kernels */
    d->kernels = d->kind == CB_DEVICE_SIM || st_reduce_fatbin_size > 0;
    *send_p    = d->dbuf[0];
    *recv_p    = d->dbuf[1];
    *hsend_p   = d->hbuf[0];
    *hrecv_p   = d->hbuf[1];
    return 0;
}

int cb_device_sync(const cb_device_t *d)
{
    return d->dev->stream_sync(d->stream, -1) == ST_OK ? 0 : -1;
}

int cb_device_copy(const cb_device_t *d, void *dst, const void *src, size_t bytes)
{
    if (bytes == 0) {
        return 0;
    }
    return d->dev->copy(dst, src, bytes, d->stream) == ST_OK ? 0 : -1;
}

/* Queues a copy of bytes from src to dst through the device: a reduction job of one source (a
 * copy, run as a kernel) where the build has kernels, else a copy. */
static int cb_device_kernel_copy(const cb_device_t *d, void *dst, const void *src, size_t bytes)
{
    st_reduce_job_t job;

    if (!d->kernels) {
        return cb_device_copy(d, dst, src, bytes);
    }
    memset(&job, 0, sizeof(job));
    if (bytes == 0 || st_redop_init(&job.redop, strataSum, strataUint8, 1) != ST_OK) {
        return (bytes == 0) ? 0 : -1;
    }
    job.dst     = dst;
    job.srcs[0] = src;
    job.nsrcs   = 1;
    job.count   = bytes;
    return d->dev->reduce(&job, d->stream) == ST_OK ? 0 : -1;
}

int cb_device_produce(const cb_device_t *d, size_t bytes)
{
    for (int i = 0; i < 2; i++) {
        if (cb_device_copy(d, d->stage[i], d->hbuf[i], bytes) != 0 ||
            cb_device_kernel_copy(d, d->dbuf[i], d->stage[i], bytes) != 0) {
            return -1;
        }
    }
    return 0;
}

int cb_device_consume(const cb_device_t *d, size_t bytes)
{
    if (cb_device_kernel_copy(d, d->stage[1], d->dbuf[1], bytes) != 0 ||
        cb_device_copy(d, d->hbuf[1], d->stage[1], bytes) != 0) {
        return -1;
    }
    return 0;
}

void cb_device_close(cb_device_t *d)
{
    if (d == NULL) {
        return;
    }
    for (int i = 0; i < 2; i++) {
        if (d->dbuf[i] != NULL) {
            if (d->shared) {
                strataMemFree(d->dbuf[i]);
            } else {
                d->dev->mem_free(d->dbuf[i]);
            }
        }
        if (d->hbuf[i] != NULL) {
            d->dev->host_free(d->hbuf[i]);
        }
        if (d->stage[i] != NULL) {
            d->dev->mem_free(d->stage[i]);
        }
    }
    if (d->stream != NULL) {
        d->dev->stream_destroy(d->stream);
    }
    free(d);
}
