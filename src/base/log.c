/*
 * log.c - the logger: one line per message, "host:pid:tid [level] SUBSYS file:line message",
 * to stderr or to STRATA_DEBUG_FILE (%h = host, %p = pid). The last error of each thread is kept in
 * thread-local storage so strataGetLastError can return it without locks.
 */
#include "config.h"
#include "base/log.h"
#include "base/sys.h"

#include <pthread.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>
#include <sys/syscall.h>
#include <time.h>
#include <unistd.h>

int      st_log_level = ST_LOG_WARN;
uint32_t st_log_mask  = ST_SUB_ALL;

static FILE           *st_log_stream;
static char            st_log_host[64];
static pthread_once_t  st_log_once = PTHREAD_ONCE_INIT;
static pthread_mutex_t st_log_lock = PTHREAD_MUTEX_INITIALIZER;
static __thread char   st_last_error[512];

static const char *const st_subsys_names[] = {
    "INIT", "BOOT", "TOPO", "SHM", "IPC", "UCX", "VERBS", "COLL", "TUNE", "P2P", "ENV"
};

int64_t st_log_parse_subsys(const char *list)
{
    char     buf[256];
    char    *save = NULL;
    uint32_t mask = 0;
    int      invert = 0;

    if (list == NULL || *list == '\0') {
        return ST_SUB_ALL;
    }
    if (*list == '^') {
        invert = 1;
        list++;
    }
    snprintf(buf, sizeof(buf), "%s", list);
    for (char *tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        size_t i;
        if (strcasecmp(tok, "ALL") == 0) {
            mask |= ST_SUB_ALL;
            continue;
        }
        for (i = 0; i < sizeof(st_subsys_names) / sizeof(st_subsys_names[0]); i++) {
            if (strcasecmp(tok, st_subsys_names[i]) == 0) {
                mask |= 1u << i;
                break;
            }
        }
        if (i == sizeof(st_subsys_names) / sizeof(st_subsys_names[0])) {
            return -1;
        }
    }
    return invert ? (ST_SUB_ALL & ~mask) : mask;
}

static void st_log_open_file(const char *pattern)
{
    char path[512];

    st_path_expand(pattern, st_log_host, path, sizeof(path));
    st_log_stream = fopen(path, "w");
    if (st_log_stream != NULL) {
        setvbuf(st_log_stream, NULL, _IOLBF, 0);
    }
}

/* Another thread may hold the lock when the process forks: take it across fork so the child's
 * copy is never left locked. */
static void st_log_atfork_prepare(void)
{
    pthread_mutex_lock(&st_log_lock);
}

static void st_log_atfork_release(void)
{
    pthread_mutex_unlock(&st_log_lock);
}

static void st_log_init_once(void)
{
    const char *level = getenv("STRATA_DEBUG");
    const char *subsys = getenv("STRATA_DEBUG_SUBSYS");
    const char *file = getenv("STRATA_DEBUG_FILE");
    int64_t     mask;

    pthread_atfork(st_log_atfork_prepare, st_log_atfork_release, st_log_atfork_release);
    gethostname(st_log_host, sizeof(st_log_host) - 1);
    st_log_stream = stderr;
    if (level != NULL) {
        if (strcasecmp(level, "NONE") == 0 || strcasecmp(level, "VERSION") == 0) {
            st_log_level = ST_LOG_NONE;
        } else if (strcasecmp(level, "WARN") == 0) {
            st_log_level = ST_LOG_WARN;
        } else if (strcasecmp(level, "INFO") == 0) {
            st_log_level = ST_LOG_INFO;
        } else if (strcasecmp(level, "DEBUG") == 0) {
            st_log_level = ST_LOG_DEBUG;
        } else if (strcasecmp(level, "TRACE") == 0) {
            st_log_level = ST_LOG_TRACE;
        } else {
            fprintf(stderr, "strata: STRATA_DEBUG '%s' unknown (NONE, WARN, INFO, DEBUG, TRACE); "
                            "using WARN\n", level);
        }
    }
    mask = st_log_parse_subsys(subsys);
    if (mask < 0) {
        fprintf(stderr, "strata: STRATA_DEBUG_SUBSYS '%s' has an unknown subsystem; using ALL\n",
                subsys);
        mask = ST_SUB_ALL;
    }
    st_log_mask = (uint32_t)mask;
    if (file != NULL && *file != '\0') {
        st_log_open_file(file);
        if (st_log_stream == NULL) {
            st_log_stream = stderr;
            fprintf(stderr, "strata: cannot open STRATA_DEBUG_FILE '%s'; logging to stderr\n",
                    file);
        }
    }
}

void st_log_init(void)
{
    pthread_once(&st_log_once, st_log_init_once);
}

static const char *st_log_subsys_name(uint32_t sub)
{
    for (unsigned i = 0; i < sizeof(st_subsys_names) / sizeof(st_subsys_names[0]); i++) {
        if (sub & (1u << i)) {
            return st_subsys_names[i];
        }
    }
    return "?";
}

static void st_log_vemit(int level, uint32_t sub, const char *file, int line, const char *msg)
{
    static const char *const names[] = {"", "WARN", "INFO", "DEBUG", "TRACE"};
    const char *base = strrchr(file, '/');

    st_log_init();
    pthread_mutex_lock(&st_log_lock);
    fprintf(st_log_stream != NULL ? st_log_stream : stderr, "%s:%d:%ld strata %s %s %s:%d %s\n",
            st_log_host, (int)getpid(), (long)syscall(SYS_gettid), names[level],
            st_log_subsys_name(sub), base != NULL ? base + 1 : file, line, msg);
    pthread_mutex_unlock(&st_log_lock);
}

void st_log_emit(int level, uint32_t sub, const char *file, int line, const char *fmt, ...)
{
    char    msg[1024];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    st_log_vemit(level, sub, file, line, msg);
}

void st_log_error(uint32_t sub, const char *file, int line, const char *fmt, ...)
{
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st_last_error, sizeof(st_last_error), fmt, ap);
    va_end(ap);
    st_log_init();
    if (ST_LOG_WARN <= st_log_level && (sub & st_log_mask)) {
        st_log_vemit(ST_LOG_WARN, sub, file, line, st_last_error);
    }
}

void st_log_append_error(const char *fmt, ...)
{
    size_t  len = strlen(st_last_error);
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(st_last_error + len, sizeof(st_last_error) - len, fmt, ap);
    va_end(ap);
}

const char *st_log_last_error(void)
{
    return st_last_error;
}

void st_log_clear_error(void)
{
    st_last_error[0] = '\0';
}
