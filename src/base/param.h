/*
 * param.h - STRATA_* parameters: table-driven, parsed once, documented where they are declared.
 *
 * A table is a NULL-terminated array of fields; the environment name of a field is "STRATA_" +
 * the table's prefix + the field's name (prefix "UCX_" + "RNDV_THRESH" = STRATA_UCX_RNDV_THRESH).
 * Every table of the library is listed in st_param_tables (param.c), so `collbench --print-config`
 * and the INFO log show them all.
 */
#ifndef ST_PARAM_H
#define ST_PARAM_H

#include <stddef.h>
#include <stdio.h>

#include "base/status.h"

typedef enum {
    ST_CFG_STRING, /* char * (malloc'd; "" allowed) */
    ST_CFG_INT,    /* int, decimal */
    ST_CFG_UINT,   /* unsigned, decimal */
    ST_CFG_SIZE,   /* size_t, bytes, with optional k/m/g suffix (powers of 1024); "auto" gives
                      ST_SIZE_AUTO, for the user of the value to resolve */
    ST_CFG_BOOL,   /* int 0/1: y/n, yes/no, 1/0, on/off, true/false */
    ST_CFG_TIME    /* double, seconds, with optional ms/us/s suffix; "inf" = infinite */
} st_cfg_type_t;

typedef struct st_config_field {
    const char   *name;   /* NULL terminates the table */
    const char   *dflt;   /* default, as a string */
    const char   *doc;    /* one line for the README table and --print-config */
    size_t        offset; /* offsetof the destination field in the options struct */
    st_cfg_type_t type;
} st_config_field_t;

typedef struct st_config_table {
    const char              *prefix; /* after "STRATA_": "" for core, "UCX_" for ucx */
    const char              *title;  /* "core", "ucx transport" */
    const st_config_field_t *fields;
    void                    *opts;   /* the options struct the table fills */
} st_config_table_t;

/* Parses one value of type `type` from str into dst. ST_ERR_INVALID when malformed. */
st_status_t st_config_parse_value(st_cfg_type_t type, const char *str, void *dst);
/* Fills table->opts from defaults and the environment. ST_ERR_INVALID (logged with the variable
 * and its value) on a malformed value. */
st_status_t st_config_table_parse(const st_config_table_t *table);
/* Frees the strings a parsed table holds. */
void st_config_table_release(const st_config_table_t *table);
/* Writes every table: name, current value, default and doc. */
void st_config_print(FILE *stream);

/* The core parameters. */
typedef struct st_core_config {
    char  *debug;             /* read by log.c; listed for the documentation */
    char  *debug_subsys;
    char  *debug_file;
    char  *socket_ifname;     /* bootstrap interface selection (NCCL_SOCKET_IFNAME syntax) */
    char  *comm_id;           /* host:port of the bootstrap root, instead of a unique id's own */
    char  *comm_secret;       /* mixed into the secret of an id made from comm_id */
    char  *hostid;            /* node identity override */
    char  *topo_file;         /* hwloc XML to use instead of the live machine */
    char  *topo_dump_file;    /* where to write the detected topology and strata's view */
    char  *gpu_busid;         /* PCI bus id of this rank's GPU (overrides the CUDA device) */
    double bootstrap_timeout; /* seconds */
    double connect_timeout;   /* seconds for a new communicator's wire-up messages */
    double timeout;           /* seconds, every blocking wait of a collective */
    double spin_time;         /* seconds of spinning before a waiter blocks */
    size_t chunk_size;        /* bytes per pipeline chunk */
    unsigned pipeline_depth;  /* chunks in flight per ring */
    unsigned ring_channels;   /* flat-ring channels; 0: the tuning's, else 1 */
    char  *algo;              /* algorithm choice */
    size_t hier_chunk_size;   /* bytes of the buffer per hierarchical pipeline chunk */
    size_t small_threshold;   /* all-reduce bytes up to which auto takes the small algorithm */
    char  *cma;               /* cross-memory attach: auto, 0, 1 (coll/intra.h) */
    char  *rail_ifnames;      /* comma-separated interfaces, one per rail */
    char  *net;               /* net transport choice */
    char  *tune_file;         /* tuning table (tune/policy.h) */
    char  *profile_file;      /* fabric profile (tune/policy.h) */
    char  *rail_shares;       /* weights of the rails' inter-node shares */
    int    check_mismatch;    /* agree on every collective's fingerprint (engine/mismatch.h) */
    double stall_warn;        /* seconds without progress before a WARN line; 0 = off */
} st_core_config_t;

extern st_core_config_t st_core_config;

/* A deadline variable's value in seconds as a wait uses it: 0 (or less) means no deadline, the
 * same for STRATA_TIMEOUT, STRATA_BOOTSTRAP_TIMEOUT and STRATA_CONNECT_TIMEOUT (which then has
 * none of its own: init's applies). ST_PARAM_NO_DEADLINE is finite, so that now + it stays a
 * number; waits clamp it to what poll takes. */
#define ST_PARAM_NO_DEADLINE 1e30
static inline double st_param_deadline(double seconds)
{
    return (seconds > 0) ? seconds : ST_PARAM_NO_DEADLINE;
}

#define ST_SIZE_AUTO ((size_t)-1)

/* A value the user gave (var set in the environment) that the library uses changed: raised to a
 * minimum, lowered to a maximum or rounded to what the code can use. Every such change goes
 * through here, so that it is said at WARN once per process for each variable and value used,
 * naming the variable, the value given, the value used and why (`why`: a clause, "a whole number
 * of 64-byte lines"). A variable left at its default is adapted silently (INFO): the user asked
 * for nothing. given and used point at values of `type`. Returns 1 when this call logged at WARN. */
int st_param_adjusted(const char *var, st_cfg_type_t type, const void *given, const void *used,
                      const char *why);

/* Parses the core table and the NULL-terminated tables `more` (the transports': the layers above
 * hand theirs down, st_transport_config_tables), once per process; later calls return the first
 * result. Also initialises logging. st_config_print prints the same tables. */
st_status_t st_param_init(const st_config_table_t *const *more);

#endif
