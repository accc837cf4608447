/*
 * memalloc.c - strataMemAlloc / strataMemFree: the public face of the shareable memory of the
 * window transports (node peers map it, so collectives on it skip the copy into the
 * communicator's windows): device memory from the window transport of ST_MEM_CUDA (cuda_ipc)
 * when a device is current, as ncclMemAlloc does, else host memory from shm's. Arguments are
 * checked here, one line saying what and where; the allocators log their own failures.
 */
#include "config.h"

#include <stddef.h>

#include "base/log.h"
#include "base/memreg.h"
#include "base/param.h"
#include "base/status.h"
#include "device/dev.h"
#include "transports/transport.h"

/* The builtin window transport of memory type `type`. */
static const st_win_ops_t *st_memalloc_win(st_mem_type_t type)
{
    return st_win_find(st_win_transports, type);
}

/* The memory type strataMemAlloc gives now: device memory when a device is current. */
static st_mem_type_t st_memalloc_type(void)
{
    const st_dev_ops_t *dev = st_dev();

    if (dev != NULL && dev->current() >= 0 && st_memalloc_win(ST_MEM_CUDA) != NULL) {
        return ST_MEM_CUDA;
    }
    return ST_MEM_HOST;
}

STRATA_API strataResult_t strataMemAlloc(void **ptr, size_t size)
{
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        return strataInvalidArgument;
    }
    if (ptr == NULL) {
        st_error(ST_SUB_SHM, "strataMemAlloc: ptr is NULL");
        return strataInvalidArgument;
    }
    if (size == 0) {
        st_error(ST_SUB_SHM, "strataMemAlloc: size is 0");
        return strataInvalidArgument;
    }
    {
        st_mem_type_t type = st_memalloc_type();
        st_status_t   status = st_memalloc_win(type)->mem_alloc(size, ptr);

        /* host memory is what an HCA can register whole (transports/verbs: zero-copy) */
        if (status == ST_OK && type == ST_MEM_HOST) {
            st_memreg_add(*ptr, size);
        }
        return st_status_to_result(status);
    }
}

STRATA_API strataResult_t strataMemFree(void *ptr)
{
    if (ptr == NULL) {
        return strataSuccess;
    }
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        return strataInvalidArgument;
    }
    {
        const st_dev_ops_t *dev  = st_dev();
        st_mem_type_t       type = ST_MEM_HOST;

        if (dev != NULL && dev->ptr_type(ptr, NULL) == ST_DEV_PTR_DEVICE &&
            st_memalloc_win(ST_MEM_CUDA) != NULL) {
            type = ST_MEM_CUDA;
        }
        if (type == ST_MEM_HOST) {
            st_memreg_del(ptr); /* registrations of it go first (their pages are pinned) */
        }
        return st_status_to_result(st_memalloc_win(type)->mem_free(ptr));
    }
}
