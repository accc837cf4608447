/*
 * memalloc.c - strataMemAlloc / strataMemFree: the public face of the shareable host memory of
 * transports/shm/shm_mem.c (node peers map it, so collectives on it skip the copy into the
 * communicator's window). Arguments are checked here, one line saying what and where; the
 * allocator logs its own failures.
 */
#include "config.h"

#include <stddef.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "transports/transport.h"

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
    return st_status_to_result(st_mem_alloc(size, ptr));
}

STRATA_API strataResult_t strataMemFree(void *ptr)
{
    if (ptr == NULL) {
        return strataSuccess;
    }
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        return strataInvalidArgument;
    }
    return st_status_to_result(st_mem_free(ptr));
}
