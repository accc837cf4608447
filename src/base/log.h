/*
 * log.h - subsystem logging (STRATA_DEBUG, STRATA_DEBUG_SUBSYS, STRATA_DEBUG_FILE) and the
 * per-thread last error behind strataGetLastError.
 *
 * The macros test the level and the subsystem mask before formatting, so a disabled log costs one
 * branch. st_error() both logs at WARN and records the message as the calling thread's last error:
 * call it once, where the error is first understood; callers only propagate the status.
 */
#ifndef ST_LOG_H
#define ST_LOG_H

#include <stdint.h>

typedef enum {
    ST_SUB_INIT  = 1u << 0,
    ST_SUB_BOOT  = 1u << 1,
    ST_SUB_TOPO  = 1u << 2,
    ST_SUB_SHM   = 1u << 3,
    ST_SUB_IPC   = 1u << 4,
    ST_SUB_UCX   = 1u << 5,
    ST_SUB_VERBS = 1u << 6,
    ST_SUB_COLL  = 1u << 7,
    ST_SUB_TUNE  = 1u << 8,
    ST_SUB_P2P   = 1u << 9,
    ST_SUB_ENV   = 1u << 10,
    ST_SUB_ALL   = 0x7ffu
} st_subsys_t;

typedef enum {
    ST_LOG_NONE  = 0,
    ST_LOG_WARN  = 1,
    ST_LOG_INFO  = 2,
    ST_LOG_DEBUG = 3,
    ST_LOG_TRACE = 4
} st_log_level_t;

extern int      st_log_level;
extern uint32_t st_log_mask;

/* Reads STRATA_DEBUG, STRATA_DEBUG_SUBSYS, STRATA_DEBUG_FILE once; later calls do nothing. */
void st_log_init(void);
/* Parses a subsystem list ("INIT,COLL", "^UCX", "ALL") into a mask; -1 on an unknown name. */
int64_t st_log_parse_subsys(const char *list);
void st_log_emit(int level, uint32_t sub, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 5, 6)));
/* Records (and logs at WARN) the calling thread's last error. */
void st_log_error(uint32_t sub, const char *file, int line, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* Appends to the calling thread's last error without logging (a fact found after the error was
 * logged, which the caller logs itself). */
void st_log_append_error(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
/* The calling thread's last error message ("" if none). */
const char *st_log_last_error(void);
void st_log_clear_error(void);

#define st_log(_level, _sub, _fmt, ...)                                                          \
    do {                                                                                         \
        if ((_level) <= st_log_level && ((_sub) & st_log_mask)) {                               \
            st_log_emit((_level), (_sub), __FILE__, __LINE__, _fmt, ##__VA_ARGS__);              \
        }                                                                                        \
    } while (0)

#define st_error(_sub, _fmt, ...) st_log_error((_sub), __FILE__, __LINE__, _fmt, ##__VA_ARGS__)
#define st_warn(_sub, _fmt, ...)  st_log(ST_LOG_WARN, _sub, _fmt, ##__VA_ARGS__)
#define st_info(_sub, _fmt, ...)  st_log(ST_LOG_INFO, _sub, _fmt, ##__VA_ARGS__)
#define st_debug(_sub, _fmt, ...) st_log(ST_LOG_DEBUG, _sub, _fmt, ##__VA_ARGS__)
#ifdef ST_ENABLE_TRACE
#define st_trace(_sub, _fmt, ...) st_log(ST_LOG_TRACE, _sub, _fmt, ##__VA_ARGS__)
#else
#define st_trace(_sub, _fmt, ...) do { } while (0)
#endif

#endif
