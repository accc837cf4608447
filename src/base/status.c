/*
 * status.c - names of internal statuses, their mapping to the public strataResult_t, and the
 * public text of each result (strataGetErrorString).
 */
#include "base/status.h"

#include <stdio.h>

const char *st_status_str(st_status_t status)
{
    switch (status) {
    case ST_OK:              return "success";
    case ST_INPROGRESS:      return "in progress";
    case ST_ERR_NO_MEMORY:   return "out of memory";
    case ST_ERR_INVALID:     return "invalid argument";
    case ST_ERR_UNSUPPORTED: return "unsupported";
    case ST_ERR_NO_DEVICE:   return "no such device";
    case ST_ERR_IO:          return "system call failed";
    case ST_ERR_TIMEOUT:     return "timeout";
    case ST_ERR_REMOTE:      return "remote peer failed";
    case ST_ERR_INTERNAL:    return "internal error";
    case ST_ERR_USAGE:       return "invalid usage";
    case ST_ERR_CANCELED:    return "canceled";
    case ST_ERR_TRUNCATED:   return "message longer than the receive buffer";
    }
    return "unknown status";
}

strataResult_t st_status_to_result(st_status_t status)
{
    switch (status) {
    case ST_OK:              return strataSuccess;
    case ST_INPROGRESS:      return strataInProgress;
    case ST_ERR_INVALID:     return strataInvalidArgument;
    case ST_ERR_USAGE:
    case ST_ERR_TRUNCATED:   return strataInvalidUsage;
    case ST_ERR_TIMEOUT:     return strataTimeout;
    case ST_ERR_REMOTE:      return strataRemoteError;
    case ST_ERR_CANCELED:    return strataRemoteError;
    case ST_ERR_NO_MEMORY:
    case ST_ERR_IO:          return strataSystemError;
    case ST_ERR_UNSUPPORTED:
    case ST_ERR_NO_DEVICE:   return strataInvalidUsage;
    case ST_ERR_INTERNAL:    return strataInternalError;
    }
    return strataInternalError;
}

/* The public text of a result (strata.h); here, below every caller, so that the library's own
 * messages can quote it from any floor. */
STRATA_API const char *strataGetErrorString(strataResult_t result)
{
    switch (result) {
    case strataSuccess:            return "no error";
    case strataUnhandledCudaError: return "unhandled cuda error";
    case strataSystemError:        return "unhandled system error (socket, memory, thread)";
    case strataInternalError:      return "internal error - please report this issue";
    case strataInvalidArgument:    return "invalid argument";
    case strataInvalidUsage:       return "invalid usage";
    case strataRemoteError:        return "remote process exited or there was a network error";
    case strataInProgress:         return "operation in progress";
    case strataTimeout:            return "timeout: a peer did not answer within the deadline";
    default: {
        static __thread char unknown[48]; /* per thread: the caller may print it at leisure */

        snprintf(unknown, sizeof(unknown), "unknown strataResult_t %d", (int)result);
        return unknown;
    }
    }
}
