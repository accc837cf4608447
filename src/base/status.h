/*
 * status.h - st_status_t, the internal result of every strata function, and its translation to
 * the public strataResult_t. Positive values are not errors; negative ones are.
 */
#ifndef ST_STATUS_H
#define ST_STATUS_H

#include "strata.h"

typedef enum {
    ST_OK              = 0,
    ST_INPROGRESS      = 1,  /* not an error: call progress again */
    ST_ERR_NO_MEMORY   = -1,
    ST_ERR_INVALID     = -2, /* bad argument: strataInvalidArgument */
    ST_ERR_UNSUPPORTED = -3,
    ST_ERR_NO_DEVICE   = -4,
    ST_ERR_IO          = -5, /* a system call failed: strataSystemError */
    ST_ERR_TIMEOUT     = -6,
    ST_ERR_REMOTE      = -7, /* a peer failed or disconnected */
    ST_ERR_INTERNAL    = -8,
    ST_ERR_USAGE       = -9, /* call not allowed in this state: strataInvalidUsage */
    ST_ERR_CANCELED    = -10, /* an operation abandoned by abort */
    ST_ERR_TRUNCATED   = -11  /* a receive's buffer was shorter than the message (st_request_t's
                               * len: the bytes sent, 0 if unknown): strataInvalidUsage */
} st_status_t;

const char *st_status_str(st_status_t status);
strataResult_t st_status_to_result(st_status_t status);

#define ST_CHECK_GOTO(_expr, _status, _label)                                                    \
    do {                                                                                         \
        (_status) = (_expr);                                                                     \
        if ((_status) < 0) {                                                                     \
            goto _label;                                                                         \
        }                                                                                        \
    } while (0)

#define ST_CHECK(_expr)                                                                          \
    do {                                                                                         \
        st_status_t _st_check_status = (_expr);                                                  \
        if (_st_check_status < 0) {                                                              \
            return _st_check_status;                                                             \
        }                                                                                        \
    } while (0)

#define ST_UNUSED __attribute__((unused)) /* a parameter an interface requires */
#define ST_ARRAY_SIZE(_a) (sizeof(_a) / sizeof((_a)[0]))
#define ST_MIN(_a, _b)    ((_a) < (_b) ? (_a) : (_b))
#define ST_MAX(_a, _b)    ((_a) > (_b) ? (_a) : (_b))
#define ST_DIV_ROUND_UP(_n, _d) (((_n) + (_d) - 1) / (_d))

#endif
