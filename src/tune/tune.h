/*
 * tune.h - fabric profiles and tuning tables: the two JSON files of issue 6 (read and written
 * with jansson), and the all-reduce choice the library makes from them.
 *
 * A fabric profile (`collbench calibrate -o F`, STRATA_PROFILE_FILE=F) is what was measured on a
 * fabric: the alpha, beta and gamma of each level (src/tune/model.h) and each rail's bandwidth.
 * A tuning table (`collbench tune -o F`, STRATA_TUNE_FILE=F) is what was found best on it: for
 * each size range of all-reduce, the algorithm and hierarchical chunk, plus the pipeline depth and
 * the share of the inter-node bytes each rail carries. Both are documented in docs/model.md
 * ("Files"); both carry the layout they were made on (ranks per node, nodes, rails), and the
 * library uses one only on that layout.
 *
 * Precedence in the library (st_tune_init, st_tune_allreduce):
 *   1. a STRATA_* parameter the user set (STRATA_ALGO other than auto, STRATA_HIER_CHUNK_SIZE other
 *      than auto, STRATA_SMALL_THRESHOLD, STRATA_PIPELINE_DEPTH, STRATA_RAIL_SHARES,
 *      STRATA_RING_CHANNELS) wins for what it sets;
 *   2. a tuning table (strataConfig_t.tuneFile, else STRATA_TUNE_FILE);
 *   3. the cost model fed by a fabric profile (STRATA_PROFILE_FILE): per size, the algorithm and
 *      chunk it predicts fastest, rail shares proportional to the rails' bandwidths;
 *   4. the built-in defaults (coll/select.c, coll/intra.c).
 * Every choice is logged at STRATA_DEBUG=INFO (subsystem TUNE): the source at init, each table
 * entry the first time a call uses it.
 */
#ifndef ST_TUNE_TUNE_H
#define ST_TUNE_TUNE_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "tune/model.h"

#define ST_TUNE_MAX_ENTRIES 64
#define ST_TUNE_NO_LIMIT    SIZE_MAX
/* the largest hier_chunk a table may give: each local rank's window holds 2 x depth of them */
#define ST_TUNE_MAX_CHUNK   ((size_t)16 << 20)
/* the most flat-ring channels a table may give (coll/coll.h: ST_RING_MAX_CHANNELS) */
#define ST_TUNE_MAX_CHANNELS 8

/* One size range of all-reduce. */
typedef struct st_tune_entry {
    size_t max_bytes;  /* all-reduces of at most this many bytes (nccl-tests' size: count x
                        * dtype size) and more than the previous entry's; ST_TUNE_NO_LIMIT: any */
    int    algo;       /* st_algo_t (tune/algo.h): ring, hier or small; the files name it */
    size_t hier_chunk; /* bytes per hierarchical pipeline chunk; 0: the window's chunk */
    int    channels;   /* flat ring (ring entries): rings at once, 1..ST_TUNE_MAX_CHANNELS;
                        * 0: one */
} st_tune_entry_t;

/* One size range of a collective other than all-reduce (reduce-scatter, all-gather, all-to-all):
 * its algorithm, ring (for all-to-all: the flat pairwise exchange) or hier. */
typedef struct st_tune_coll_entry {
    size_t max_bytes; /* calls of at most this many bytes (nccl-tests' size) and more than the
                       * previous entry's; ST_TUNE_NO_LIMIT: any */
    int    algo;      /* ST_ALGO_RING or ST_ALGO_HIER */
} st_tune_coll_entry_t;

#define ST_TUNE_MAX_COLL_ENTRIES 16

/* A collective's entries; n = 0: the table says nothing of it (the defaults choose). */
typedef struct st_tune_coll_list {
    int                  n;
    st_tune_coll_entry_t entries[ST_TUNE_MAX_COLL_ENTRIES];
} st_tune_coll_list_t;

typedef struct st_tune_table {
    int             ranks_per_node; /* the layout it was tuned on */
    int             nodes;
    int             nrails;
    unsigned        pipeline_depth; /* window slots; 0: STRATA_PIPELINE_DEPTH */
    double          rail_share[ST_MODEL_MAX_RAILS]; /* of the inter-node bytes; all 0: even */
    int             nentries;       /* >= 1; ascending max_bytes, the last ST_TUNE_NO_LIMIT */
    st_tune_entry_t entries[ST_TUNE_MAX_ENTRIES];
    st_tune_coll_list_t colls[ST_MODEL_NCOLLS]; /* by st_model_coll_t; [ST_MODEL_ALLREDUCE] is
                                                 * unused (entries above) */
    char            ignored[192];   /* st_tune_table_read: the fields it dropped, for the
                                     * reader's WARN ("" when none). Kept last: the ranks'
                                     * agreement on the tuning (policy.c) hashes the fields
                                     * before it only */
} st_tune_table_t;

/* ---- files (jansson) -------------------------------------------------------------------------- */

/* Reads a tuning table. ST_ERR_INVALID, with the reason in err (path, what, where), when the file
 * is not a regular file or cannot be read, is not JSON, lacks a field, has a value out of range
 * (algorithm not ring, hier or small; hier_chunk outside 64 B .. ST_TUNE_MAX_CHUNK; channels
 * outside 1 .. ST_TUNE_MAX_CHANNELS; entries not
 * ascending; an entry other than the last without max_bytes; the last entry bounded; more than
 * ST_TUNE_MAX_ENTRIES; shares negative or not summing to 1 within 1e-3 over nrails;
 * pipeline_depth outside 1..16; in the optional lists "reduce_scatter", "all_gather" and
 * "alltoall" (docs/model.md), an algorithm other than ring or hier, entries not ascending, the
 * last bounded, more than ST_TUNE_MAX_COLL_ENTRIES). A hier_chunk on a ring or small entry, and channels on a hier
 * or small one, are dropped and named in table->ignored (the library WARNs it). */
st_status_t st_tune_table_read(const char *path, st_tune_table_t *table, char *err, size_t errlen);
/* Writes it (indented JSON, max_bytes of the last entry as null), with a free-text comment.
 * ST_ERR_IO when the file cannot be written. */
st_status_t st_tune_table_write(const char *path, const st_tune_table_t *table,
                                const char *comment);
/* The entry for an all-reduce of `bytes` (never NULL for a table that passed
 * st_tune_table_check). */
const st_tune_entry_t *st_tune_table_lookup(const st_tune_table_t *table, size_t bytes);
/* The entry for a call of collective `coll` (reduce-scatter, all-gather, all-to-all) of `bytes`,
 * or NULL when the table has none for that collective (or coll is all-reduce or out of range). */
const st_tune_coll_entry_t *st_tune_table_lookup_coll(const st_tune_table_t *table, int coll,
                                                      size_t bytes);
/* The checks of st_tune_table_read on a table in memory. */
st_status_t st_tune_table_check(const st_tune_table_t *table, char *err, size_t errlen);

/* Reads a fabric profile into fabric (layout and levels). ST_ERR_INVALID with the reason in err
 * when unreadable, not JSON, missing a field, or failing st_model_fabric_check. */
st_status_t st_profile_read(const char *path, st_model_fabric_t *fabric, char *err,
                            size_t errlen);
/* Writes a fabric profile; `samples_json`, when not NULL, is a JSON text (the raw measurements)
 * stored under "samples". ST_ERR_INVALID for bad samples_json or fabric, ST_ERR_IO when the
 * file cannot be written. */
st_status_t st_profile_write(const char *path, const st_model_fabric_t *fabric,
                             const char *samples_json, const char *comment);

/* Distinct rails named by a STRATA_RAIL_IFNAMES value (its comma-separated entries, at most
 * ST_MODEL_MAX_RAILS), or 1 when it is NULL or empty. */
int st_tune_count_rails(const char *list);

/* The STRATA_* variables that override a communicator's tuned or modelled choices (STRATA_ALGO
 * and friends, docs/model.md): one list for the library (tune/policy.c) and for collbench's
 * calibrate, tune and compare, which refuse to run under one. */
enum {
    ST_TUNE_ENV_ALGO,     /* STRATA_ALGO, but "auto" */
    ST_TUNE_ENV_CHUNK,    /* STRATA_HIER_CHUNK_SIZE, but "auto" */
    ST_TUNE_ENV_DEPTH,    /* STRATA_PIPELINE_DEPTH */
    ST_TUNE_ENV_SMALL,    /* STRATA_SMALL_THRESHOLD */
    ST_TUNE_ENV_SHARES,   /* STRATA_RAIL_SHARES */
    ST_TUNE_ENV_CHANNELS, /* STRATA_RING_CHANNELS, but "0" */
    ST_TUNE_ENV_COUNT
};

/* Whether variable k (ST_TUNE_ENV_*) is set in the environment to a value that overrides (not
 * empty, not the value that means the default: "auto", or "0" for STRATA_RING_CHANNELS); its
 * value, or NULL, in *value when value is not NULL. 0 for k out of range. */
int st_tune_env_set(int k, const char **value);

/* The full name of the first variable of the list that st_tune_env_set finds set, with its value
 * in *value (when value is not NULL); NULL, and *value NULL, when none is. */
const char *st_tune_env_override(const char **value);

/* The chunks the model chooses among (st_tune_table_from_model in the library and in collbench
 * model --compare). Above 1 MiB a chunk's shards cross the network as messages so large that the
 * pipeline overlaps less than the model assumes: in the 2 Gbit/s sweep of bench/tune_fabrics.sh
 * (2 emulated nodes x 2 ranks) a 64 MiB all-reduce took 306-325 ms with 4 MiB chunks and 273 ms
 * with 512 KiB chunks, where the link allows 268 ms; the model put them within 1 %. */
#define ST_TUNE_MODEL_MIN_CHUNK ((size_t)64 << 10)
#define ST_TUNE_MODEL_MAX_CHUNK ((size_t)1 << 20)

/* The table the model predicts best for `fabric`: for sizes 2^k bytes up to 1 GiB, the fastest
 * algorithm with the best chunk among powers of two in [min_chunk, max_chunk] (small only up to
 * small_max), merged into ranges; for reduce-scatter, all-gather and all-to-all the faster of
 * ring and hier (hier with max_chunk chunks) per size; rail shares proportional to the rails'
 * bandwidths; the layout of fabric. */
void st_tune_table_from_model(const st_model_fabric_t *fabric, size_t small_max, size_t min_chunk,
                              size_t max_chunk, st_tune_table_t *table);

#endif
