/*
 * param.c - parsing of STRATA_* parameters and the list of every parameter table.
 */
#include "config.h"
#include "base/param.h"

#include <ctype.h>
#include <errno.h>
#include <math.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <strings.h>

#include "base/log.h"

st_core_config_t st_core_config;

static const st_config_field_t st_core_config_fields[] = {
    {"DEBUG", "WARN", "log level: NONE, WARN, INFO, DEBUG, TRACE (TRACE needs --enable-debug)",
     offsetof(st_core_config_t, debug), ST_CFG_STRING},
    {"DEBUG_SUBSYS", "ALL", "subsystems to log: INIT,BOOT,TOPO,SHM,IPC,UCX,VERBS,COLL,TUNE,P2P,ENV;"
     " ^ excludes", offsetof(st_core_config_t, debug_subsys), ST_CFG_STRING},
    {"DEBUG_FILE", "", "log to this file instead of stderr (%h host, %p pid)",
     offsetof(st_core_config_t, debug_file), ST_CFG_STRING},
    {"SOCKET_IFNAME", "", "bootstrap interfaces: prefixes (eth,ib), ^ excludes, = exact; "
     "default: any but lo and docker, lo only if nothing else",
     offsetof(st_core_config_t, socket_ifname), ST_CFG_STRING},
    {"COMM_ID", "", "host:port of the bootstrap root (rank 0 listens there); makes "
     "strataGetUniqueId return that address", offsetof(st_core_config_t, comm_id), ST_CFG_STRING},
    {"COMM_SECRET", "", "extra secret mixed into the id made from STRATA_COMM_ID (launchers export "
     "the same value to every rank)", offsetof(st_core_config_t, comm_secret), ST_CFG_STRING},
    {"HOSTID", "", "node identity (default: hostname and boot id); ranks with equal ids are one "
     "node", offsetof(st_core_config_t, hostid), ST_CFG_STRING},
    {"TOPO_FILE", "", "hwloc XML topology to use instead of detecting this machine (as "
     "NCCL_TOPO_FILE)", offsetof(st_core_config_t, topo_file), ST_CFG_STRING},
    {"TOPO_DUMP_FILE", "", "write the detected hwloc XML with strata's view of it here (%h host, "
     "%p pid), once per process, by local rank 0", offsetof(st_core_config_t, topo_dump_file),
     ST_CFG_STRING},
    {"GPU_BUSID", "", "PCI bus id of this rank's GPU (0000:5f:00.0); it picks the nearest NIC "
     "and the ring order", offsetof(st_core_config_t, gpu_busid), ST_CFG_STRING},
    {"BOOTSTRAP_TIMEOUT", "120s", "deadline for all ranks to join a communicator, and then for "
     "init's and split's own exchanges (wire-up, agreements, rails, windows); 0: no deadline",
     offsetof(st_core_config_t, bootstrap_timeout), ST_CFG_TIME},
    {"CONNECT_TIMEOUT", "30s", "deadline for a new communicator's connections: every peer on "
     "another node must answer one message over each endpoint (default and rail) at init and "
     "split, else init fails naming the peer, the rail and the interface; at most the bootstrap "
     "timeout, at least 1s (raised, with a WARN); 0: no deadline of its own (init's)", offsetof(st_core_config_t, connect_timeout), ST_CFG_TIME},
    {"TIMEOUT", "600s", "deadline of every blocking wait in a collective or send/recv, and of "
     "the internal exchanges of init and split; 0: no deadline",
     offsetof(st_core_config_t, timeout), ST_CFG_TIME},
    {"SPIN_TIME", "50us", "how long a waiting rank spins before it blocks in the kernel",
     offsetof(st_core_config_t, spin_time), ST_CFG_TIME},
    {"CHUNK_SIZE", "512k", "bytes per pipeline chunk of the ring algorithms",
     offsetof(st_core_config_t, chunk_size), ST_CFG_SIZE},
    {"PIPELINE_DEPTH", "4", "chunks in flight per ring",
     offsetof(st_core_config_t, pipeline_depth), ST_CFG_UINT},
    {"RING_CHANNELS", "0", "rings the flat ring's all-reduce runs at once, each leaving a node "
     "through a different local rank (and so its rail), 1..8; 0: the tuning's, else 1",
     offsetof(st_core_config_t, ring_channels), ST_CFG_UINT},
    {"ALGO", "auto", "algorithm: auto (by size and layout), ring (flat ring; chain for "
     "broadcast and reduce), hier (intra-node windows + one inter-node ring per rail), small "
     "(latency: one round through the windows, node leaders exchange directly)",
     offsetof(st_core_config_t, algo), ST_CFG_STRING},
    {"HIER_CHUNK_SIZE", "auto", "bytes of the buffer per chunk of the hierarchical pipeline "
     "(auto: 1m on one node, where chunks should stay in cache; across nodes 256k per rail "
     "(each rail's shard is one network message), within 512k..4m); each local rank's window holds PIPELINE_DEPTH chunks "
     "twice; a value that is not a whole number of 64-byte lines is rounded up (said at WARN)",
     offsetof(st_core_config_t, hier_chunk_size), ST_CFG_SIZE},
    {"SMALL_THRESHOLD", "64k", "all-reduces up to this many bytes take the small-message "
     "algorithm under STRATA_ALGO=auto (at most 128k: the windows' small area); unset, on a "
     "communicator of one node with m ranks: the smaller of 64k and 128k/m",
     offsetof(st_core_config_t, small_threshold), ST_CFG_SIZE},
    {"CMA", "auto", "cross-memory attach (Linux process_vm_readv/writev) for the hierarchical "
     "all-reduce on buffers not from strataMemAlloc: the owner of a shard reads it straight from "
     "its node peers' buffers and (one node) writes the result straight into theirs "
     "instead of through copies in the windows; auto: where a probe at init shows every local "
     "rank can read every other's memory (ptrace rules, Yama, seccomp), on nodes with no more "
     "ranks than cores, above 8 MiB only with 2 local ranks (where it was measured faster); "
     "0: never; 1: every all-reduce it can take, a node where it does not work said at "
     "WARN",
     offsetof(st_core_config_t, cma), ST_CFG_STRING},
    {"RAIL_IFNAMES", "", "network interfaces of the rails, comma-separated (rail l uses the "
     "l-th, modulo their number); empty: every rail uses the transport's default devices",
     offsetof(st_core_config_t, rail_ifnames), ST_CFG_STRING},
    {"TUNE_FILE", "", "tuning table (JSON, from `collbench tune`): each all-reduce's algorithm and "
     "chunk by size, pipeline depth, rail shares; parameters set explicitly still win",
     offsetof(st_core_config_t, tune_file), ST_CFG_STRING},
    {"PROFILE_FILE", "", "fabric profile (JSON, from `collbench calibrate`): with no tuning "
     "table, the cost model picks each all-reduce's algorithm and chunk from it",
     offsetof(st_core_config_t, profile_file), ST_CFG_STRING},
    {"RAIL_SHARES", "", "share of the inter-node bytes each rail carries, as weights per "
     "STRATA_RAIL_IFNAMES entry (2,1: two thirds on the first); empty: even, or the tuning's",
     offsetof(st_core_config_t, rail_shares), ST_CFG_STRING},
    {"NET", "auto", "net transport: auto (verbs where an active HCA port exists, else ucx), "
     "verbs or ucx",
     offsetof(st_core_config_t, net), ST_CFG_STRING},
    /* Cost of the check, `collbench all_reduce -np 4` on one node (2 shared cores), medians of 3
     * alternating runs with CHECK_MISMATCH=0 / 1: 8 B (-n 2000 -w 100) 48.9 / 58.9 us
     * out of place, 48.8 / 57.2 us in place (+9-10 us: the agreement's two rounds of 80 B
     * messages); 64 MiB (-n 5) 32.7 / 35.2 ms out of place,
     * 31.7 / 31.2 ms in place (within the noise). Runs at load 7-12 were too noisy to resolve
     * the 8 B difference. A later set at load 1 (5 alternating runs of -n 3000 -w 200): medians
     * 89 / 134 us, spread 54-113 / 65-138 us. Not negligible at 8 B, on by default anyway
     * (issue 5). */
    {"CHECK_MISMATCH", "1", "every collective checks that all ranks made the same call "
     "(collective, count, datatype, op, root, compression codec); a mismatch fails it on every "
     "rank with "
     "strataInvalidUsage naming both calls instead of hanging or returning wrong data",
     offsetof(st_core_config_t, check_mismatch), ST_CFG_BOOL},
    {"STALL_WARN", "60s", "after this long without progress a waiting rank logs once at WARN "
     "what it waits for and from whom, and rank 0 which ranks have not entered the collective; "
     "unset: 60s or half the timeout, whichever is shorter; set to 0, or to a value not below "
     "the timeout, it is off",
     offsetof(st_core_config_t, stall_warn), ST_CFG_TIME},
    {NULL, NULL, NULL, 0, 0}
};

static const st_config_table_t st_core_config_table = {
    "", "core", st_core_config_fields, &st_core_config
};

static st_status_t st_parse_size(const char *str, size_t *dst)
{
    char              *end;
    unsigned long long v;
    unsigned long long mult = 1;

    if (strcmp(str, "auto") == 0) {
        *dst = ST_SIZE_AUTO;
        return ST_OK;
    }
    errno = 0;
    v = strtoull(str, &end, 10);
    if (end == str || errno != 0 || *str == '-') {
        return ST_ERR_INVALID;
    }
    switch (tolower((unsigned char)*end)) {
    case '\0': break;
    case 'k':  mult = 1ull << 10; end++; break;
    case 'm':  mult = 1ull << 20; end++; break;
    case 'g':  mult = 1ull << 30; end++; break;
    default:   return ST_ERR_INVALID;
    }
    if (tolower((unsigned char)*end) == 'b') {
        end++;
    }
    if (*end != '\0' || (v != 0 && mult > SIZE_MAX / v)) {
        return ST_ERR_INVALID;
    }
    *dst = (size_t)(v * mult);
    return ST_OK;
}

static st_status_t st_parse_time(const char *str, double *dst)
{
    char  *end;
    double v;

    if (strcasecmp(str, "inf") == 0 || strcasecmp(str, "infinity") == 0) {
        *dst = INFINITY;
        return ST_OK;
    }
    errno = 0;
    v = strtod(str, &end);
    if (end == str || errno != 0 || v < 0 || isnan(v)) {
        return ST_ERR_INVALID;
    }
    if (strcasecmp(end, "ms") == 0) {
        v /= 1e3;
    } else if (strcasecmp(end, "us") == 0) {
        v /= 1e6;
    } else if (strcasecmp(end, "s") != 0 && *end != '\0') {
        return ST_ERR_INVALID;
    }
    *dst = v;
    return ST_OK;
}

st_status_t st_config_parse_value(st_cfg_type_t type, const char *str, void *dst)
{
    char *end;
    long  v;

    switch (type) {
    case ST_CFG_STRING: {
        char *copy = strdup(str);
        if (copy == NULL) {
            return ST_ERR_NO_MEMORY;
        }
        *(char **)dst = copy;
        return ST_OK;
    }
    case ST_CFG_INT:
    case ST_CFG_UINT:
        errno = 0;
        v = strtol(str, &end, 10);
        if (end == str || *end != '\0' || errno != 0 || v > INT32_MAX || v < INT32_MIN ||
            (type == ST_CFG_UINT && v < 0)) {
            return ST_ERR_INVALID;
        }
        if (type == ST_CFG_INT) {
            *(int *)dst = (int)v;
        } else {
            *(unsigned *)dst = (unsigned)v;
        }
        return ST_OK;
    case ST_CFG_SIZE:
        return st_parse_size(str, (size_t *)dst);
    case ST_CFG_BOOL:
        if (!strcasecmp(str, "y") || !strcasecmp(str, "yes") || !strcmp(str, "1") ||
            !strcasecmp(str, "on") || !strcasecmp(str, "true")) {
            *(int *)dst = 1;
        } else if (!strcasecmp(str, "n") || !strcasecmp(str, "no") || !strcmp(str, "0") ||
                   !strcasecmp(str, "off") || !strcasecmp(str, "false")) {
            *(int *)dst = 0;
        } else {
            return ST_ERR_INVALID;
        }
        return ST_OK;
    case ST_CFG_TIME:
        return st_parse_time(str, (double *)dst);
    }
    return ST_ERR_INVALID;
}

st_status_t st_config_table_parse(const st_config_table_t *table)
{
    char        env_name[128];
    const char *value;
    st_status_t status;

    for (const st_config_field_t *f = table->fields; f->name != NULL; f++) {
        void *dst = (char *)table->opts + f->offset;

        if (f->type == ST_CFG_STRING) { /* parsed again after fork: drop the old copy */
            free(*(char **)dst);
            *(char **)dst = NULL;
        }
        snprintf(env_name, sizeof(env_name), "STRATA_%s%s", table->prefix, f->name);
        value = getenv(env_name);
        if (value != NULL) {
            status = st_config_parse_value(f->type, value, dst);
            if (status == ST_OK) {
                continue;
            }
            st_error(ST_SUB_ENV, "%s '%s' is not a valid value (default %s: %s)", env_name, value,
                     f->dflt, f->doc);
            return ST_ERR_INVALID;
        }
        status = st_config_parse_value(f->type, f->dflt, dst);
        if (status != ST_OK) {
            st_error(ST_SUB_ENV, "bad built-in default '%s' of %s", f->dflt, env_name);
            return ST_ERR_INTERNAL;
        }
    }
    return ST_OK;
}

void st_config_table_release(const st_config_table_t *table)
{
    for (const st_config_field_t *f = table->fields; f->name != NULL; f++) {
        if (f->type == ST_CFG_STRING) {
            char **s = (char **)((char *)table->opts + f->offset);
            free(*s);
            *s = NULL;
        }
    }
}

static void st_config_value_str(const st_config_field_t *f, const void *opts, char *buf,
                                size_t len)
{
    const void *src = (const char *)opts + f->offset;

    switch (f->type) {
    case ST_CFG_STRING: snprintf(buf, len, "%s", *(char *const *)src ? *(char *const *)src : "");
                        break;
    case ST_CFG_INT:    snprintf(buf, len, "%d", *(const int *)src); break;
    case ST_CFG_UINT:   snprintf(buf, len, "%u", *(const unsigned *)src); break;
    case ST_CFG_SIZE:
        if (*(const size_t *)src == ST_SIZE_AUTO) {
            snprintf(buf, len, "auto");
        } else {
            snprintf(buf, len, "%zu", *(const size_t *)src);
        }
        break;
    case ST_CFG_BOOL:   snprintf(buf, len, "%s", *(const int *)src ? "y" : "n"); break;
    case ST_CFG_TIME: {
        double t = *(const double *)src;
        if (t > 0 && t < 1e-3) {
            snprintf(buf, len, "%gus", t * 1e6);
        } else if (t > 0 && t < 1) {
            snprintf(buf, len, "%gms", t * 1e3);
        } else {
            snprintf(buf, len, "%gs", t);
        }
        break;
    }
    }
}

/* The tables of the layers above (the transports'), given to st_param_init: NULL-terminated. */
static const st_config_table_t *const *st_param_more;

/* Every table of the library: core first, then those given to st_param_init. */
static void st_param_for_each(void (*cb)(const st_config_table_t *, void *), void *arg)
{
    cb(&st_core_config_table, arg);
    for (const st_config_table_t *const *t = st_param_more; t != NULL && *t != NULL; t++) {
        cb(*t, arg);
    }
}

static void st_param_print_table(const st_config_table_t *table, void *arg)
{
    FILE *stream = arg;
    char  value[256];

    fprintf(stream, "# %s\n", table->title);
    for (const st_config_field_t *f = table->fields; f->name != NULL; f++) {
        st_config_value_str(f, table->opts, value, sizeof(value));
        fprintf(stream, "STRATA_%s%s=%s\n    default %s: %s\n", table->prefix, f->name, value,
                f->dflt, f->doc);
    }
}

void st_config_print(FILE *stream)
{
    st_param_for_each(st_param_print_table, stream);
}

static void st_param_parse_table(const st_config_table_t *table, void *arg)
{
    st_status_t *status = arg;

    if (*status == ST_OK) {
        *status = st_config_table_parse(table);
    }
}

static void st_param_log_table(const st_config_table_t *table, void *unused ST_UNUSED)
{
    char value[256];

    for (const st_config_field_t *f = table->fields; f->name != NULL; f++) {
        st_config_value_str(f, table->opts, value, sizeof(value));
        st_info(ST_SUB_ENV, "STRATA_%s%s %s", table->prefix, f->name, value);
    }
}

/* The changes st_param_adjusted said already: variable and value used, once each per process. */
#define ST_PARAM_ADJUSTED_MAX 64
static struct {
    char var[64];
    char used[64];
} st_param_adjusted_said[ST_PARAM_ADJUSTED_MAX];
static int             st_param_adjusted_count;
static pthread_mutex_t st_param_adjusted_lock = PTHREAD_MUTEX_INITIALIZER;

int st_param_adjusted(const char *var, st_cfg_type_t type, const void *given, const void *used,
                      const char *why)
{
    st_config_field_t f = {var, "", "", 0, type};
    char              given_str[64], used_str[64];
    const char       *verb = "changed to";
    int               said = 0, first = 1;

    st_config_value_str(&f, given, given_str, sizeof(given_str));
    st_config_value_str(&f, used, used_str, sizeof(used_str));
    switch (type) {
    case ST_CFG_SIZE:
        verb = *(const size_t *)used > *(const size_t *)given ? "raised to" : "lowered to";
        break;
    case ST_CFG_UINT:
        verb = *(const unsigned *)used > *(const unsigned *)given ? "raised to" : "lowered to";
        break;
    case ST_CFG_INT:
        verb = *(const int *)used > *(const int *)given ? "raised to" : "lowered to";
        break;
    case ST_CFG_TIME:
        verb = *(const double *)used > *(const double *)given ? "raised to" : "lowered to";
        break;
    default:
        break;
    }
    if (getenv(var) == NULL) {
        /* the default adapted to this call or layout: nothing the user asked for changed */
        st_info(ST_SUB_ENV, "%s (default) %s %s %s: %s", var, given_str, verb, used_str, why);
        return 0;
    }
    pthread_mutex_lock(&st_param_adjusted_lock);
    for (int i = 0; i < st_param_adjusted_count; i++) {
        if (strcmp(st_param_adjusted_said[i].var, var) == 0 &&
            strcmp(st_param_adjusted_said[i].used, used_str) == 0) {
            first = 0;
            break;
        }
    }
    if (first && st_param_adjusted_count < ST_PARAM_ADJUSTED_MAX) {
        snprintf(st_param_adjusted_said[st_param_adjusted_count].var,
                 sizeof(st_param_adjusted_said[0].var), "%s", var);
        snprintf(st_param_adjusted_said[st_param_adjusted_count].used,
                 sizeof(st_param_adjusted_said[0].used), "%s", used_str);
        st_param_adjusted_count++;
    }
    pthread_mutex_unlock(&st_param_adjusted_lock);
    if (first) {
        st_warn(ST_SUB_ENV, "%s %s %s %s: %s", var, given_str, verb, used_str, why);
        said = 1;
    }
    return said;
}

static pthread_once_t st_param_once = PTHREAD_ONCE_INIT;
static st_status_t    st_param_status;
static char           st_param_errmsg[512]; /* why parsing failed, repeated at every call */
static __thread int   st_param_said;        /* this thread's call parsed and logged it already */

/* A forked child is a new process whose environment may differ (collbench and the tests give each
 * child rank its own STRATA_HOSTID): parse again at its first call. */
static void st_param_atfork_child(void)
{
    st_param_once = (pthread_once_t)PTHREAD_ONCE_INIT;
    /* a new process: its own changes are said again (the lock may have been held at the fork) */
    pthread_mutex_init(&st_param_adjusted_lock, NULL);
    st_param_adjusted_count = 0;
}

static void st_param_init_once(void)
{
    static int atfork_registered;

    if (!atfork_registered) {
        pthread_atfork(NULL, NULL, st_param_atfork_child);
        atfork_registered = 1;
    }
    st_log_init();
    st_param_status = ST_OK;
    st_param_for_each(st_param_parse_table, &st_param_status);
    if (st_param_status == ST_OK) {
        st_param_for_each(st_param_log_table, NULL);
    } else {
        snprintf(st_param_errmsg, sizeof(st_param_errmsg), "%s", st_log_last_error());
        st_param_said = 1;
    }
}

st_status_t st_param_init(const st_config_table_t *const *more)
{
    if (st_param_more == NULL) {
        st_param_more = more; /* the same list from every caller: the first one's is kept */
    }
    pthread_once(&st_param_once, st_param_init_once);
    if (st_param_status != ST_OK && !st_param_said) {
        st_log_error(ST_SUB_ENV, __FILE__, __LINE__, "%s", st_param_errmsg);
    }
    st_param_said = 0;
    return st_param_status;
}
