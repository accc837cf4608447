/*
 * memalloc.c - strataMemAlloc / strataMemFree: the public face of the shareable memory of the
 * host window transport (transports/shm/shm_mem.c: node peers map it, so collectives on it skip
 * the copy into the communicator's window). Arguments are checked here, one line saying what and
 * where; the allocator logs its own failures.
 */
#include "config.h"

#include <stddef.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "transports/transport.h"

/* The builtin window transport for host memory (a device one joins with the GPU path). */
static const st_win_ops_t *st_memalloc_win(void)
{
    return st_win_find(st_win_transports, ST_MEM_HOST);
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
    return st_status_to_result(st_memalloc_win()->mem_alloc(size, ptr));
}

STRATA_API strataResult_t strataMemFree(void *ptr)
{
    if (ptr == NULL) {
        return strataSuccess;
    }
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        return strataInvalidArgument;
    }
    return st_status_to_result(st_memalloc_win()->mem_free(ptr));
}
