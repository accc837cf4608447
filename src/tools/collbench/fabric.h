/*
 * fabric.h - what the files of `collbench calibrate`, `collbench tune` and `collbench model
 * --profile F --compare` share: the rank's state (cb_fab_t), a measured configuration
 * (cb_cand_t), the measurement and the forced configurations (fabric.c), the calibration
 * (calibrate.c) and the sweep (tuning.c).
 */
#ifndef CB_FABRIC_H
#define CB_FABRIC_H

#include "collbench.h"
#include "tune/tune.h"

#define CB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CB_MAX(a, b) ((a) > (b) ? (a) : (b))

#define CB_FAB_MAX_ITERS   1000
#define CB_FAB_CAL_REPS    3     /* calibrate: measurements per time (but the 16 MiB step) */
#define CB_FAB_INTER_BYTES ((size_t)16 << 20)
#define CB_FAB_BURST_BYTES ((size_t)1 << 20)  /* the largest burst credit exchange */

typedef struct cb_fab {
    const cb_opts_t  *opts;
    int               rank, nranks;
    int               node, nnodes, local, g; /* g: ranks on every node */
    int               nics;                   /* STRATA_RAIL_IFNAMES entries, else 1 */
    strataComm_t      world;
    float            *send, *recv;
    size_t            bufbytes;
    int               seq;                    /* temporary table files */
    st_model_fabric_t fabric;                 /* calibrated or read */
    double            target_s;               /* seconds per measurement (CB_FAB_TARGET_S) */
    int               reps;                   /* measurements per time, their median (1) */
} cb_fab_t;

/* One measured configuration. */
typedef struct cb_cand {
    int    algo;          /* st_algo_t */
    size_t chunk;         /* hier */
    int    depth;         /* hier */
    int    prop;          /* hier: 1 = shares proportional to the rails, 0 = even */
    int    channels;      /* ring: rings at once (0 or 1: one) */
    double t[64];         /* per size; 0 = not measured */
} cb_cand_t;

/* ---- fabric.c -------------------------------------------------------------------------------- */

/* Says which call failed, with strata's error string and the world's last error, and exits 2. */
void cb_fab_die(const cb_fab_t *f, const char *call, strataResult_t res);

#define CB_FAB_CALL(f, call)                                                                   \
    do {                                                                                       \
        strataResult_t _r = (call);                                                            \
        if (_r != strataSuccess) {                                                             \
            cb_fab_die((f), #call, _r);                                                        \
        }                                                                                      \
    } while (0)

/* The element-wise maximum of v[0 .. n-1] over the ranks of the world, in place. */
void cb_fab_max(cb_fab_t *f, double *v, size_t n);
/* Every rank of the world meets here (a one-element cb_fab_max). */
void cb_fab_barrier(cb_fab_t *f);
/* A split of the world (color, key = rank) that runs what `table` says. */
strataComm_t cb_fab_split(cb_fab_t *f, int color, const st_tune_table_t *table);
/* A table forcing one configuration for every size, on a layout of g x nodes. */
void cb_fab_force(const cb_fab_t *f, int g, int nodes, int algo, size_t chunk, int depth,
                  int channels, const double *share, st_tune_table_t *t);
/* Rail shares: proportional to the calibrated rail bandwidths (prop), else even. */
void cb_fab_shares(const cb_fab_t *f, int prop, double *share);
/* The median of t[0 .. n-1] (sorts t). */
double cb_fab_median(double *t, int n);
/* Warm-up calls for about CB_FAB_WARMUP_S of calls of `est` seconds, at most 100; none when a
 * call takes longer than half of it (the first call's extra cost is lost in long calls). */
int cb_fab_warm_calls(double est);

typedef struct cb_fab_ar {
    strataComm_t comm;
    size_t       count;
} cb_fab_ar_t;

/* One float-sum all-reduce of ar->count elements on ar->comm, f->send into f->recv; arg is a
 * cb_fab_ar_t. */
void cb_fab_allreduce_op(cb_fab_t *f, const void *arg);
/* Median time of a float-sum all-reduce of `bytes` on comm (every rank of the world in one of
 * the splits that are timed together), the slowest rank per iteration; the phases of the last
 * call (slowest rank) into ph when not NULL. */
double cb_fab_time(cb_fab_t *f, strataComm_t comm, size_t bytes, double ph[3]);
/* Median time of a float collective `coll` (st_model_coll_t: reduce-scatter, all-gather,
 * all-to-all) of
 * `bytes` (nccl-tests' size) on comm, as cb_fab_time. */
double cb_fab_time_coll(cb_fab_t *f, strataComm_t comm, int coll, size_t bytes);
/* Median time of one ring step on every rail at once, per local rank (med[l], the slowest node
 * of each iteration): each rank sends `bytes` to the rank of the next node with its local rank
 * and receives as many from the previous node's, in a group, over the world communicator (whose
 * endpoints to other nodes go through the rank's own rail). */
void cb_fab_exchange(cb_fab_t *f, const int *rank_of, size_t bytes, double *med);

/* A size as the tables print it: "4M", "64K", or bytes. */
void cb_fab_size_str(size_t s, char *buf, size_t len);
/* A configuration's name as the tables print it: "hier/1M/d4/prop", "ring/ch2", "small". */
void cb_fab_cand_str(const cb_cand_t *c, char *buf, size_t len);

/* ---- calibrate.c ----------------------------------------------------------------------------- */

/* Calibrates f->fabric on this layout (what it measures: calibrate.c); the samples it rests on,
 * a JSON object, into samples. */
void cb_fab_calibrate(cb_fab_t *f, char *samples, size_t len);
/* f->fabric as "# " lines on stdout (the entry prints it on rank 0). */
void cb_fab_print_profile(const cb_fab_t *f);

/* ---- tuning.c ---------------------------------------------------------------------------------- */

/* The sweep, the selection, the table written to --out and the check (what each is: tuning.c).
 * Returns 0, or 2 when rank 0 could not write the table. */
int cb_fab_tune(cb_fab_t *f, const size_t *sizes, int nsizes);

#endif
