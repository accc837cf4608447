/*
 * dev.h - the device operations table: everything strata asks of a GPU, in one table with two
 * implementations (like transports/transport.h's tables, libfabric's hmem ops, NCCL's cudawrap):
 *   cuda  (dev_cuda.c) the CUDA driver API, loaded at run time with dlopen("libcuda.so.1"), so
 *         libstrata.so loads and runs host collectives where there is no driver or GPU; the
 *         kernels are reduce/reduce_cuda.cu's fatbin, embedded in the library.
 *   sim   (dev_sim.c) a simulated device for testing without a GPU: device memory is host memory
 *         (memfd, so it is exported and imported as a file descriptor exactly as cuMem memory
 *         is), each stream is a thread executing its queue in order (copies, reduction jobs
 *         through reduce/kernel.h's host decomposition, waits on gate words, events). It runs the
 *         whole device protocol in CI; nothing measured on it is GPU performance.
 * STRATA_DEVICE picks one (auto: cuda when a driver and a device exist, else none; cuda; sim;
 * none). st_dev() is the one in use, NULL for none.
 *
 * Pointers: device memory, and the pinned host memory of host_alloc, have one address valid on
 * the host API and in kernels (CUDA's unified addressing), so copy() takes any direction and a
 * reduction job may mix device and pinned host sources. Sizes are bytes unless named count.
 * Streams are the user's (a cudaStream_t, passed through as st_dev_stream_t *; NULL is the legacy
 * default stream) or strata's own (stream_create: non-blocking, highest priority, so they never
 * queue behind a gate on the legacy default stream). Every call is thread-safe.
 */
#ifndef ST_DEVICE_DEV_H
#define ST_DEVICE_DEV_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "reduce/kernel.h"

typedef struct st_dev_stream st_dev_stream_t; /* a CUstream (cuda), a simulated stream (sim) */
typedef struct st_dev_event  st_dev_event_t;

/* Where a pointer points, as ptr_type says. */
typedef enum {
    ST_DEV_PTR_HOST   = 0, /* host memory (pageable, or pinned by host_alloc), or unknown */
    ST_DEV_PTR_DEVICE = 1  /* device memory of the device *dev_p */
} st_dev_ptr_t;

typedef struct st_dev_ops {
    const char *name; /* "cuda", "sim" */

    /* ---- devices ---- */
    /* Number of devices (>= 1 once st_dev() returned this table). */
    int          (*count)(void);
    /* The calling thread's current device (cuda: the current context's; sim: set_current's,
     * 0 by default), or -1 when none is current. */
    int          (*current)(void);
    /* Makes dev the calling thread's device (cuda: its primary context current). Strata's own
     * threads (stream proxies) call it with the communicator's device. ST_ERR_INVALID. */
    st_status_t  (*set_current)(int dev);
    /* Whether ptr is device memory (*dev_p, may be NULL: its device) or not. Never fails: memory
     * the driver does not know is host memory. */
    st_dev_ptr_t (*ptr_type)(const void *ptr, int *dev_p);

    /* ---- memory ---- */
    /* bytes of device memory on the current device (cudaMalloc's kind: not shareable).
     * ST_ERR_INVALID for 0 bytes, ST_ERR_NO_MEMORY. */
    st_status_t (*mem_alloc)(size_t bytes, void **ptr_p);
    st_status_t (*mem_free)(void *ptr);
    /* Shareable device memory (cuMemCreate with a POSIX file descriptor handle; sim: a memfd):
     * bytes rounded up to the allocation granularity (*alloc_bytes_p, may be NULL), zero-filled.
     * Freed with mem_free_shared. ST_ERR_INVALID, ST_ERR_NO_MEMORY, ST_ERR_UNSUPPORTED (the
     * device cannot export memory). */
    st_status_t (*mem_alloc_shared)(size_t bytes, void **ptr_p, size_t *alloc_bytes_p);
    st_status_t (*mem_free_shared)(void *ptr);
    /* A new file descriptor (the caller closes it) for the shareable allocation that starts at
     * ptr, to hand to another process (SCM_RIGHTS). ST_ERR_INVALID for another pointer. */
    st_status_t (*mem_export)(void *ptr, int *fd_p);
    /* Maps a peer's exported allocation of bytes (its alloc_bytes) into this process on the
     * current device; fd may be closed afterwards. ST_ERR_IO (logged) when it cannot. */
    st_status_t (*mem_import)(int fd, size_t bytes, void **ptr_p);
    void        (*mem_unimport)(void *ptr, size_t bytes);
    /* Pinned host memory the device reads and writes (kernels and gate waits may take its
     * pointers), zero-filled. ST_ERR_NO_MEMORY. */
    st_status_t (*host_alloc)(size_t bytes, void **ptr_p);
    void        (*host_free)(void *ptr);

    /* ---- streams ---- */
    /* A strata-owned stream: non-blocking (never waits for the legacy default stream), highest
     * priority. ST_ERR_NO_MEMORY, ST_ERR_IO. */
    st_status_t (*stream_create)(st_dev_stream_t **s_p);
    void        (*stream_destroy)(st_dev_stream_t *s);
    /* 1 while s is being captured into a CUDA graph, 0 when not, -1 when s is not a valid
     * stream of this device (a destroyed or foreign handle). */
    int         (*stream_capturing)(st_dev_stream_t *s);
    /* Blocks, sleeping rather than spinning, until everything queued on s so far is done, at most
     * timeout_us (< 0: no limit). ST_OK, ST_INPROGRESS (the time passed), ST_ERR_IO (a device
     * error, logged). */
    st_status_t (*stream_sync)(st_dev_stream_t *s, long timeout_us);

    /* ---- work queued on a stream (returns once queued; ST_ERR_IO when the queue refuses) ---- */
    /* bytes from src to dst, any of device, pinned host or (slowly) pageable host memory. */
    st_status_t (*copy)(void *dst, const void *src, size_t bytes, st_dev_stream_t *s);
    /* bytes of zeros at dst. */
    st_status_t (*zero)(void *dst, size_t bytes, st_dev_stream_t *s);
    /* A reduction job (reduce/kernel.h); its pointers must be device or pinned host memory. */
    st_status_t (*reduce)(const st_reduce_job_t *job, st_dev_stream_t *s);
    /* Work queued on s after this waits until *word >= value (a 64-bit word in host_alloc
     * memory; cuStreamWaitValue64 GEQ). */
    st_status_t (*wait_value)(st_dev_stream_t *s, uint64_t *word, uint64_t value);
    /* Host side of a gate: *word = value (release store), waking the device's waiters. */
    void        (*write_value)(uint64_t *word, uint64_t value);

    /* ---- events ---- */
    st_status_t (*event_create)(st_dev_event_t **e_p);
    void        (*event_destroy)(st_dev_event_t *e);
    /* Marks the point of s reached so far; a later record moves the mark. */
    st_status_t (*event_record)(st_dev_event_t *e, st_dev_stream_t *s);
    /* Waits (sleeping) until the work before the mark is done, at most timeout_us (< 0: no
     * limit). ST_OK, ST_INPROGRESS (time passed), ST_ERR_IO (a device error, logged). A never
     * recorded event is done. */
    st_status_t (*event_wait)(st_dev_event_t *e, long timeout_us);
} st_dev_ops_t;

/* The device backend in use (STRATA_DEVICE), or NULL when none: decided once, at the first call.
 * STRATA_DEVICE=cuda with no usable driver or device is logged once, and NULL is returned. */
const st_dev_ops_t *st_dev(void);

/* The builtin backends (NULL when this build lacks one). */
extern const st_dev_ops_t st_dev_sim_ops;
extern const st_dev_ops_t st_dev_cuda_ops;

/* The parameter table of the device layer (STRATA_DEVICE, the simulated device's settings),
 * handed to st_param_init as the transports' are. */
const struct st_config_table *st_dev_config_table(void);

#endif
