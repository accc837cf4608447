/*
 * dev_nocuda.c - st_dev_cuda_ops in a build without CUDA headers (dev_cuda.c otherwise): the
 * probe says no, and every slot answers as a machine without a device would (no pointer is device
 * memory, nothing can be allocated or queued), so that nothing points at NULL.
 */
#include "config.h"
#include "device/dev.h"
#include "device/dev_cuda.h"

#include "base/log.h"

static const char st_nocuda_why[] = "strata was built without CUDA headers";

int st_dev_cuda_probe(void)
{
    st_debug(ST_SUB_INIT, "cuda device backend unusable: %s", st_nocuda_why);
    return 0;
}

const char *st_dev_cuda_why(int *no_driver_p)
{
    if (no_driver_p != NULL) {
        *no_driver_p = 1;
    }
    return st_nocuda_why;
}

void *st_dev_cuda_proc(const char *symbol ST_UNUSED, int version ST_UNUSED)
{
    return NULL;
}

static int st_nocuda_count(void)
{
    return 0;
}

static int st_nocuda_current(void)
{
    return -1;
}

static st_status_t st_nocuda_set_current(int dev ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_dev_ptr_t st_nocuda_ptr_type(const void *ptr ST_UNUSED, int *dev_p ST_UNUSED)
{
    return ST_DEV_PTR_HOST;
}

static st_status_t st_nocuda_alloc(size_t bytes ST_UNUSED, void **ptr_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_free(void *ptr ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_alloc_shared(size_t bytes ST_UNUSED, void **ptr_p ST_UNUSED,
                                          size_t *alloc_bytes_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_export(void *ptr ST_UNUSED, int *fd_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_import(int fd ST_UNUSED, size_t bytes ST_UNUSED,
                                    void **ptr_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static void st_nocuda_unimport(void *ptr ST_UNUSED, size_t bytes ST_UNUSED)
{
}

static void st_nocuda_host_free(void *ptr ST_UNUSED)
{
}

static st_status_t st_nocuda_stream_create(st_dev_stream_t **s_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static void st_nocuda_stream_destroy(st_dev_stream_t *s ST_UNUSED)
{
}

static int st_nocuda_stream_capturing(st_dev_stream_t *s ST_UNUSED)
{
    return -1;
}

static st_status_t st_nocuda_stream_sync(st_dev_stream_t *s ST_UNUSED, long timeout_us ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_copy(void *dst ST_UNUSED, const void *src ST_UNUSED,
                                  size_t bytes ST_UNUSED, st_dev_stream_t *s ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_zero(void *dst ST_UNUSED, size_t bytes ST_UNUSED,
                                  st_dev_stream_t *s ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_reduce(const st_reduce_job_t *job ST_UNUSED,
                                    st_dev_stream_t *s ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_wait_value(st_dev_stream_t *s ST_UNUSED, uint64_t *word ST_UNUSED,
                                        uint64_t value ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static void st_nocuda_write_value(uint64_t *word, uint64_t value)
{
    __atomic_store_n(word, value, __ATOMIC_RELEASE);
}

static st_status_t st_nocuda_event_create(st_dev_event_t **e_p ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static void st_nocuda_event_destroy(st_dev_event_t *e ST_UNUSED)
{
}

static st_status_t st_nocuda_event_record(st_dev_event_t *e ST_UNUSED,
                                          st_dev_stream_t *s ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

static st_status_t st_nocuda_event_wait(st_dev_event_t *e ST_UNUSED, long timeout_us ST_UNUSED)
{
    return ST_ERR_UNSUPPORTED;
}

const st_dev_ops_t st_dev_cuda_ops = {
    .name             = "cuda",
    .count            = st_nocuda_count,
    .current          = st_nocuda_current,
    .set_current      = st_nocuda_set_current,
    .ptr_type         = st_nocuda_ptr_type,
    .mem_alloc        = st_nocuda_alloc,
    .mem_free         = st_nocuda_free,
    .mem_alloc_shared = st_nocuda_alloc_shared,
    .mem_free_shared  = st_nocuda_free,
    .mem_export       = st_nocuda_export,
    .mem_import       = st_nocuda_import,
    .mem_unimport     = st_nocuda_unimport,
    .host_alloc       = st_nocuda_alloc,
    .host_free        = st_nocuda_host_free,
    .stream_create    = st_nocuda_stream_create,
    .stream_destroy   = st_nocuda_stream_destroy,
    .stream_capturing = st_nocuda_stream_capturing,
    .stream_sync      = st_nocuda_stream_sync,
    .copy             = st_nocuda_copy,
    .zero             = st_nocuda_zero,
    .reduce           = st_nocuda_reduce,
    .wait_value       = st_nocuda_wait_value,
    .write_value      = st_nocuda_write_value,
    .event_create     = st_nocuda_event_create,
    .event_destroy    = st_nocuda_event_destroy,
    .event_record     = st_nocuda_event_record,
    .event_wait       = st_nocuda_event_wait,
};
