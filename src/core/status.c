/*
 * status.c - names of internal statuses and their mapping to the public strataResult_t.
 */
#include "core/status.h"

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
