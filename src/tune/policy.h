/*
 * policy.h - what a communicator's tuning is and where it comes from: a tuning table, the cost
 * model fed by a fabric profile, or the built-in defaults, with the user's STRATA_* parameters
 * over all of them (precedence: tune/tune.h). Made once per communicator at init from its layout
 * (core/init.c), read by coll/select.c (algorithm and chunk of each all-reduce), coll/intra.c
 * (window depth and chunk) and coll/hier.c (each rail's share of the inter-node bytes).
 */
#ifndef ST_TUNE_POLICY_H
#define ST_TUNE_POLICY_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "topo/topo.h"
#include "tune/tune.h"

/* A communicator as its tuning sees it (the tuning floor knows no communicator). */
typedef struct st_tune_layout {
    const char       *name;      /* the communicator's, for logs */
    int               nnodes;
    const st_topo_t  *topo;      /* its hierarchy: local ranks per node, shards of a chunk */
    size_t            small_max; /* the largest all-reduce the small algorithm takes (bytes) */
} st_tune_layout_t;

typedef struct st_tune_policy {
    char            source[384];   /* where the choices come from, for logs and collbench */
    int             have_table;    /* table holds the all-reduce choices */
    st_tune_table_t table;
    unsigned char   used[ST_TUNE_MAX_ENTRIES]; /* entry logged at its first use */
    unsigned char   coll_used[ST_MODEL_NCOLLS][ST_TUNE_MAX_COLL_ENTRIES]; /* the same, per
                                                                           * collective */
    unsigned        depth;         /* window slots (pipeline depth) */
    int             depth_auto;    /* neither STRATA_PIPELINE_DEPTH nor the table set depth: the
                                    * windows may double it across nodes (coll/intra.c) */
    size_t          window_chunk;  /* the table's largest hier chunk (window slots are at least
                                    * this big), 0: none */
    int             nshards;       /* shards of a hierarchical chunk (st_topo_nrails) */
    double          shard_cum[ST_MODEL_MAX_RAILS * 4 + 1]; /* cumulative shares; [0] = 0 */
    int             have_shares;   /* else shards are even */
    int             nics;          /* distinct rails (STRATA_RAIL_IFNAMES entries, else 1) */
    int             env_algo, env_chunk, env_small; /* set by the user: the table yields */
} st_tune_policy_t;

/* The choice for one all-reduce under STRATA_ALGO=auto. */
typedef struct st_tune_choice {
    st_algo_t algo;       /* ring, hier or small (tune/algo.h) */
    size_t    hier_chunk; /* bytes; 0: coll/hier.c's rule from the window's chunk */
    int       channels;   /* flat ring: rings at once; 0: one */
} st_tune_choice_t;

/* Decides a communicator's tuning into *p_out (set as soon as it is allocated: the caller frees
 * it with st_tune_policy_free, also when this fails): reads the table (tune_file; NULL:
 * STRATA_TUNE_FILE; "": no table) or the profile (STRATA_PROFILE_FILE) and checks them against
 * the layout; a file that cannot be used is logged at WARN and the next source is taken (a
 * tuning file never fails a communicator), except a malformed STRATA_RAIL_SHARES:
 * ST_ERR_INVALID. Logs the source at INFO. Call after the topology is known, before the windows
 * are made. ST_ERR_NO_MEMORY. */
st_status_t st_tune_policy_init(const st_tune_layout_t *lay, const char *tune_file,
                                st_tune_policy_t **p_out);
void        st_tune_policy_free(st_tune_policy_t *p);

/* For an all-reduce of `bytes` (nccl-tests' size) that the algorithm selection leaves to the
 * tuning: the table's or model's entry (logged at INFO, naming the communicator `name`, the first
 * time it is used), or returns 0 when there is none (defaults apply; also when p is NULL).
 * small_fits: whether the small algorithm can take it; windows: whether the node windows that
 * hier and small need exist. */
int st_tune_policy_allreduce(st_tune_policy_t *p, const char *name, size_t bytes, int small_fits,
                             int windows, st_tune_choice_t *choice);

/* For a call of collective `coll` (st_model_coll_t: reduce-scatter, all-gather, all-to-all) of
 * `bytes` (nccl-tests' size) under STRATA_ALGO=auto: 1 and the table's or model's algorithm (ring
 * or hier) in *algo_p (logged at INFO the first time an entry is used), or 0 when there is none
 * or it names hier and windows (hier can take the call) is 0 (defaults apply; also for p
 * NULL). */
int st_tune_policy_coll(st_tune_policy_t *p, const char *name, int coll, size_t bytes, int windows,
                        st_algo_t *algo_p);

/* Shard j of `units` units of a hierarchical chunk: first unit and count, by the rail shares
 * (else even; p may be NULL). Every rank computes the same split from the same policy. */
void st_tune_policy_shard(const st_tune_policy_t *p, size_t units, int nshards, int j,
                          size_t *first_p, size_t *count_p);

/* A digest of what the policy decides (equal on ranks that decided alike; 0 for NULL), and the
 * return to the built-in defaults when the ranks did not (init agrees on the digest). */
uint32_t st_tune_policy_hash(const st_tune_policy_t *p);
void     st_tune_policy_reset(st_tune_policy_t *p);

/* The largest shard of `units` units (staging sizes). */
size_t st_tune_policy_shard_max(const st_tune_policy_t *p, size_t units, int nshards);

#endif
