/*
 * fabric.c - what `collbench calibrate`, `collbench tune` and `collbench model --profile F
 * --compare` share: the rank (cb_fabric_rank_main), the measurement and the configurations forced
 * through tuning tables; and compare itself (calibrate: calibrate.c, tune: tuning.c; the model and
 * the files: src/tune/, docs/model.md).
 *
 * All three run as ranks (the launch options of the benchmark) and measure all-reduce of float
 * sums only. Every configuration is forced through a tuning table given to a split of the
 * communicator (strataConfig_t.tuneFile), so the library runs exactly the algorithm, chunk,
 * pipeline depth and rail shares under test; STRATA_ALGO, STRATA_HIER_CHUNK_SIZE,
 * STRATA_PIPELINE_DEPTH and STRATA_RAIL_SHARES would override those, so they must be unset.
 * A time is the median over iterations of the slowest rank's time of each (ranks line up on a
 * barrier before every iteration).
 *
 * compare: the table the library makes from the profile (STRATA_PROFILE_FILE: the model's
 *   choice per size), timed at every size of the sweep next to the model's prediction, total and
 *   per phase.
 */
#include "config.h"

#include <math.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "collbench.h"
#include "fabric.h"
#include "tune/tune.h"

#define CB_FAB_TARGET_S    0.3   /* seconds of timed iterations per measurement, about */
#define CB_FAB_WARMUP_S    0.03  /* seconds of warm-up calls per measurement, about */

void cb_fab_die(const cb_fab_t *f, const char *call, strataResult_t res)
{
    fprintf(stderr, "collbench: rank %d: %s failed: %s: %s\n", f->rank, call,
            strataGetErrorString(res), strataGetLastError(f->world));
    fflush(stderr);
    exit(2);
}

void cb_fab_max(cb_fab_t *f, double *v, size_t n)
{
    CB_FAB_CALL(f, strataAllReduce(v, v, n, strataFloat64, strataMax, f->world, NULL));
}

void cb_fab_barrier(cb_fab_t *f)
{
    double x = 0.0;

    cb_fab_max(f, &x, 1);
}

static int cb_fab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

strataComm_t cb_fab_split(cb_fab_t *f, int color, const st_tune_table_t *table)
{
    strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;
    strataComm_t   comm = NULL;
    char           path[256];
    const char    *dir = getenv("TMPDIR");

    snprintf(path, sizeof(path), "%s/collbench-%d-%d.json", dir != NULL ? dir : "/tmp",
             (int)getpid(), f->seq++);
    if (st_tune_table_write(path, table, "collbench: a configuration under test") != ST_OK) {
        fprintf(stderr, "collbench: rank %d: cannot write %s\n", f->rank, path);
        exit(2);
    }
    cfg.tuneFile = path;
    cfg.name     = "collbench-fabric";
    CB_FAB_CALL(f, strataCommSplit(f->world, color, f->rank, &comm, &cfg));
    unlink(path);
    return comm;
}

void cb_fab_force(const cb_fab_t *f, int g, int nodes, int algo, size_t chunk, int depth,
                  int channels, const double *share, st_tune_table_t *t)
{
    memset(t, 0, sizeof(*t));
    t->ranks_per_node = g;
    t->nodes          = nodes;
    t->nrails         = f->nics;
    t->pipeline_depth = (unsigned)depth;
    t->nentries       = 1;
    t->entries[0]     = (st_tune_entry_t){ST_TUNE_NO_LIMIT, algo,
                                          algo == ST_ALGO_HIER ? chunk : 0,
                                          algo == ST_ALGO_RING ? channels : 0};
    if (algo == ST_ALGO_SMALL) {
        /* small only where it fits (the windows' small area; calibrate and tune time it at no
         * larger size): a table giving it every size is one the library rightly warns about */
        t->nentries   = 2;
        t->entries[0] = (st_tune_entry_t){CB_SMALL_MAX, ST_ALGO_SMALL, 0, 0};
        t->entries[1] = (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_RING, 0, 1};
    }
    if (share != NULL && f->nics > 1) {
        memcpy(t->rail_share, share, sizeof(double) * (size_t)f->nics);
    }
}

void cb_fab_shares(const cb_fab_t *f, int prop, double *share)
{
    double sum = 0.0;

    for (int r = 0; r < f->nics; r++) {
        share[r] = prop ? st_model_rail_beta(&f->fabric, r) : 1.0;
        sum += share[r];
    }
    for (int r = 0; r < f->nics; r++) {
        share[r] /= sum;
    }
}

double cb_fab_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cb_fab_cmp);
    return (n % 2) ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

typedef void (*cb_fab_op_t)(cb_fab_t *f, const void *arg);

int cb_fab_warm_calls(double est)
{
    return (2 * est > CB_FAB_WARMUP_S) ? 0 : (int)CB_MIN(CB_FAB_WARMUP_S / CB_MAX(est, 1e-6), 100);
}

/* Times op on every rank of the world at once: warm-up calls for about CB_FAB_WARMUP_S (one when a
 * call takes longer than half of it; the first call on a new communicator also connects its
 * endpoints and touches its windows, and small sizes measured right after it came out up to 2x
 * slow), whose mean sizes the run
 * (about f->target_s of iterations, at least -n, at most CB_FAB_MAX_ITERS: small sizes are noisy
 * on shared cores and want many), then iterations that each start at a barrier. This rank's times
 * go to slot `slot` of nslots; med[k] is the median over iterations of the slowest rank of slot
 * k in each. */
static void cb_fab_measure_once(cb_fab_t *f, cb_fab_op_t op, const void *arg, int slot,
                                int nslots, double *med)
{
    double *t, est, t0;
    int     iters, warm;

    cb_fab_barrier(f);
    t0 = cb_now();
    op(f, arg);
    est = cb_now() - t0;
    cb_fab_max(f, &est, 1);
    warm = cb_fab_warm_calls(est);
    if (warm > 0) {
        t0 = cb_now();
        for (int i = 0; i < warm; i++) {
            op(f, arg);
        }
        est = (cb_now() - t0) / warm;
        cb_fab_max(f, &est, 1);
    }
    iters = (int)CB_MIN(CB_MAX(f->target_s / CB_MAX(est, 1e-6), (double)f->opts->iters),
                        (double)CB_FAB_MAX_ITERS);
    iters = CB_MAX(iters, 3);
    t = calloc((size_t)iters * (size_t)nslots, sizeof(double));
    if (t == NULL) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", f->rank);
        exit(2);
    }
    for (int i = 0; i < iters; i++) {
        cb_fab_barrier(f);
        t0 = cb_now();
        op(f, arg);
        t[slot * iters + i] = cb_now() - t0;
    }
    cb_fab_max(f, t, (size_t)iters * (size_t)nslots);
    for (int k = 0; k < nslots; k++) {
        med[k] = cb_fab_median(t + k * iters, iters);
    }
    free(t);
}

/* cb_fab_measure_once f->reps times (calibrate's short measurements: one whole measurement can be
 * off when the shared cores are busy), the median of each slot. */
static void cb_fab_measure(cb_fab_t *f, cb_fab_op_t op, const void *arg, int slot, int nslots,
                           double *med)
{
    double *all = calloc((size_t)f->reps * (size_t)nslots, sizeof(double));

    if (all == NULL) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", f->rank);
        exit(2);
    }
    for (int k = 0; k < f->reps; k++) {
        cb_fab_measure_once(f, op, arg, slot, nslots, med);
        for (int s = 0; s < nslots; s++) {
            all[s * f->reps + k] = med[s];
        }
    }
    for (int s = 0; s < nslots; s++) {
        med[s] = cb_fab_median(all + s * f->reps, f->reps);
    }
    free(all);
}

void cb_fab_allreduce_op(cb_fab_t *f, const void *arg)
{
    const cb_fab_ar_t *ar = arg;

    CB_FAB_CALL(f, strataAllReduce(f->send, f->recv, ar->count, strataFloat32, strataSum,
                                   ar->comm, NULL));
}

double cb_fab_time(cb_fab_t *f, strataComm_t comm, size_t bytes, double ph[3])
{
    cb_fab_ar_t ar = {comm, CB_MAX(bytes / sizeof(float), (size_t)1)};
    double      med;

    cb_fab_measure(f, cb_fab_allreduce_op, &ar, 0, 1, &med);
    if (ph != NULL) {
        strataPhaseTimes_t pt;

        memset(ph, 0, 3 * sizeof(double));
        if (strataCommGetPhaseTimes(comm, &pt) == strataSuccess &&
            strcmp(pt.algorithm, "hier") == 0) {
            memcpy(ph, pt.seconds, 3 * sizeof(double));
        }
        cb_fab_max(f, ph, 3);
    }
    return med;
}

typedef struct cb_fab_coll {
    strataComm_t comm;
    int          coll;  /* st_model_coll_t */
    size_t       count; /* the call's count argument: elements per rank */
} cb_fab_coll_t;

static void cb_fab_coll_op(cb_fab_t *f, const void *arg)
{
    const cb_fab_coll_t *c = arg;

    switch (c->coll) {
    case ST_MODEL_REDUCESCATTER:
        CB_FAB_CALL(f, strataReduceScatter(f->send, f->recv, c->count, strataFloat32, strataSum,
                                           c->comm, NULL));
        break;
    case ST_MODEL_ALLGATHER:
        CB_FAB_CALL(f, strataAllGather(f->send, f->recv, c->count, strataFloat32, c->comm, NULL));
        break;
    case ST_MODEL_ALLTOALL:
        CB_FAB_CALL(f, strataAlltoAll(f->send, f->recv, c->count, strataFloat32, c->comm, NULL));
        break;
    default:
        CB_FAB_CALL(f, strataAllReduce(f->send, f->recv, c->count, strataFloat32, strataSum,
                                       c->comm, NULL));
        break;
    }
}

double cb_fab_time_coll(cb_fab_t *f, strataComm_t comm, int coll, size_t bytes)
{
    cb_fab_coll_t c = {comm, coll, CB_MAX(bytes / sizeof(float) / (size_t)f->nranks, (size_t)1)};
    double        med;

    cb_fab_measure(f, cb_fab_coll_op, &c, 0, 1, &med);
    return med;
}

typedef struct cb_fab_step {
    int    right, left;
    size_t bytes;
} cb_fab_step_t;

static void cb_fab_step_op(cb_fab_t *f, const void *arg)
{
    const cb_fab_step_t *st = arg;

    CB_FAB_CALL(f, strataGroupStart());
    CB_FAB_CALL(f, strataSend(f->send, st->bytes, strataUint8, st->right, f->world, NULL));
    CB_FAB_CALL(f, strataRecv(f->recv, st->bytes, strataUint8, st->left, f->world, NULL));
    CB_FAB_CALL(f, strataGroupEnd());
}

void cb_fab_exchange(cb_fab_t *f, const int *rank_of, size_t bytes, double *med)
{
    cb_fab_step_t st = {rank_of[((f->node + 1) % f->nnodes) * f->g + f->local],
                        rank_of[((f->node + f->nnodes - 1) % f->nnodes) * f->g + f->local],
                        bytes};

    cb_fab_measure(f, cb_fab_step_op, &st, f->local, f->g, med);
}

/* ---- sizes -------------------------------------------------------------------------------------- */

static int cb_fab_sizes(const cb_opts_t *opts, size_t *sizes, int max)
{
    int n = 0;

    for (size_t s = CB_MAX(opts->minbytes, (size_t)8); s <= opts->maxbytes && n < max;) {
        sizes[n++] = s;
        if (opts->stepfactor > 1) {
            s *= (size_t)opts->stepfactor;
        } else {
            s += CB_MAX(opts->stepbytes, (size_t)1);
        }
    }
    return n;
}

void cb_fab_size_str(size_t s, char *buf, size_t len)
{
    if (s >= ((size_t)1 << 20) && s % ((size_t)1 << 20) == 0) {
        snprintf(buf, len, "%zuM", s >> 20);
    } else if (s >= 1024 && s % 1024 == 0) {
        snprintf(buf, len, "%zuK", s >> 10);
    } else {
        snprintf(buf, len, "%zu", s);
    }
}

void cb_fab_cand_str(const cb_cand_t *c, char *buf, size_t len)
{
    char chunk[32];

    if (c->algo == ST_ALGO_HIER && c->depth > 0) {
        cb_fab_size_str(c->chunk, chunk, sizeof(chunk));
        snprintf(buf, len, "hier/%s/d%d%s", chunk, c->depth, c->prop ? "/prop" : "");
    } else if (c->algo == ST_ALGO_HIER) { /* a table's entry: depth and shares are the table's */
        cb_fab_size_str(c->chunk, chunk, sizeof(chunk));
        snprintf(buf, len, "hier/%s", chunk);
    } else if (c->algo == ST_ALGO_RING && c->channels > 1) {
        snprintf(buf, len, "ring/ch%d", c->channels);
    } else {
        snprintf(buf, len, "%s", st_algo_name(c->algo));
    }
}

/* ---- compare ------------------------------------------------------------------------------------ */

static int cb_fab_compare(cb_fab_t *f, const size_t *sizes, int nsizes)
{
    st_model_fabric_t fab = f->fabric;
    st_tune_table_t   table;
    st_model_split_t  split;
    strataComm_t      comm;
    char              sz[32];

    /* what the library makes of STRATA_PROFILE_FILE on this layout (tune/policy.c) */
    fab.ranks_per_node = f->g;
    fab.nodes          = f->nnodes;
    if (fab.nrails != f->nics) {
        memset(fab.rail_beta, 0, sizeof(fab.rail_beta));
        fab.nrails = f->nics;
    }
    st_tune_table_from_model(&fab, (size_t)128 << 10, ST_TUNE_MODEL_MIN_CHUNK,
                             ST_TUNE_MODEL_MAX_CHUNK, &table);
    table.ranks_per_node = f->g;
    comm = cb_fab_split(f, 0, &table);
    memset(&split, 0, sizeof(split));
    memcpy(split.rail_share, table.rail_share, sizeof(split.rail_share));
    split.small_max = (size_t)128 << 10;
    if (f->rank == 0) {
        printf("# model --compare: the model's choice per size (as STRATA_PROFILE_FILE makes the "
               "library choose), measured (median, slowest rank) vs predicted\n");
        printf("# %10s  %-14s %12s %12s %8s   %s\n", "size", "algorithm", "measured", "predicted",
               "error", "hier phases measured/predicted (us): intra-RS, inter, intra-AG");
    }
    for (int i = 0; i < nsizes; i++) {
        const st_tune_entry_t *e = st_tune_table_lookup(&table, sizes[i]);
        st_model_time_t        pt;
        double                 ph[3], t;
        char                   name[48];
        cb_cand_t              as_cand = {.algo = e->algo, .chunk = e->hier_chunk,
                                          .channels = e->channels};

        split.chunk    = e->hier_chunk;
        split.channels = e->channels;
        f->reps = sizes[i] < CB_FAB_BURST_BYTES ? CB_FAB_CAL_REPS : 1; /* small sizes: noisy */
        t       = cb_fab_time(f, comm, sizes[i], ph);
        f->reps = 1;
        if (st_model_allreduce(&fab, &split, (st_algo_t)e->algo, (double)sizes[i], &pt) !=
            ST_OK) {
            memset(&pt, 0, sizeof(pt));
        }
        if (f->rank == 0) {
            cb_fab_size_str(sizes[i], sz, sizeof(sz));
            cb_fab_cand_str(&as_cand, name, sizeof(name));
            printf("  %10s  %-14s %12.1f %12.1f %+7.1f%%", sz, name, t * 1e6, pt.total * 1e6,
                   pt.total > 0 ? 100.0 * (pt.total - t) / t : 0.0);
            if (e->algo == ST_ALGO_HIER) {
                printf("   %.0f/%.0f, %.0f/%.0f, %.0f/%.0f", ph[0] * 1e6,
                       pt.phase[ST_MODEL_PH_INTRA_RS] * 1e6, ph[1] * 1e6,
                       pt.phase[ST_MODEL_PH_INTER] * 1e6, ph[2] * 1e6,
                       pt.phase[ST_MODEL_PH_INTRA_AG] * 1e6);
            }
            printf("\n");
            fflush(stdout);
        }
    }
    CB_FAB_CALL(f, strataCommDestroy(comm));
    return 0;
}

/* ---- entry -------------------------------------------------------------------------------------- */

int cb_fabric_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id)
{
    cb_fab_t f;
    size_t   sizes[64];
    int      nsizes, gmin, gmax, ret = 0;
    double   v[2];
    char     samples[2048], err[512];

    memset(&f, 0, sizeof(f));
    f.opts     = opts;
    f.target_s = CB_FAB_TARGET_S;
    f.reps     = 1;
    f.rank     = rank;
    f.nranks   = nranks;
    f.nics   = st_tune_count_rails(getenv("STRATA_RAIL_IFNAMES"));
    CB_FAB_CALL(&f, strataCommInitRank(&f.world, nranks, *id, rank));
    CB_FAB_CALL(&f, strataCommTopoRank(f.world, &f.node, &f.nnodes, &f.local, &f.g));
    v[0] = f.g;
    v[1] = -f.g;
    cb_fab_max(&f, v, 2);
    gmax = (int)v[0];
    gmin = (int)-v[1];
    if (gmin != gmax) {
        if (rank == 0) {
            fprintf(stderr, "collbench: nodes of %d to %d ranks: calibrate, tune and compare need "
                    "the same number of ranks on every node\n", gmin, gmax);
        }
        strataCommDestroy(f.world);
        return 2;
    }
    if (nranks < 2 && opts->fab_mode == CB_FAB_CALIBRATE) {
        fprintf(stderr, "collbench: calibrate needs at least 2 ranks: one rank has no window "
                "nor network to measure\n");
        strataCommDestroy(f.world);
        return 2;
    }
    nsizes = cb_fab_sizes(opts, sizes, 64);
    f.bufbytes = CB_MAX(CB_MAX(opts->maxbytes, CB_FAB_INTER_BYTES), (size_t)4096);
    f.send = aligned_alloc(4096, (f.bufbytes + 4095) & ~(size_t)4095);
    f.recv = aligned_alloc(4096, (f.bufbytes + 4095) & ~(size_t)4095);
    if (f.send == NULL || f.recv == NULL) {
        fprintf(stderr, "collbench: rank %d: cannot allocate 2 x %zu bytes\n", rank, f.bufbytes);
        exit(2);
    }
    for (size_t i = 0; i < f.bufbytes / sizeof(float); i++) {
        f.send[i] = (float)(i % 7);
    }
    memset(f.recv, 0, f.bufbytes);
    if (opts->fab_profile != NULL) {
        if (st_profile_read(opts->fab_profile, &f.fabric, err, sizeof(err)) != ST_OK) {
            fprintf(stderr, "collbench: rank %d: %s\n", rank, err);
            exit(2);
        }
    }
    if (rank == 0) {
        printf("# collbench %s: %d ranks, %d node(s) x %d, %d rail(s) (STRATA_RAIL_IFNAMES)\n",
               opts->fab_mode == CB_FAB_CALIBRATE ? "calibrate" : opts->fab_mode == CB_FAB_TUNE
               ? "tune" : "model --compare", nranks, f.nnodes, f.g, f.nics);
        fflush(stdout);
    }
    if (opts->fab_profile == NULL) { /* compare always has one (collbench.c checks) */
        cb_fab_calibrate(&f, samples, sizeof(samples));
        if (rank == 0) {
            cb_fab_print_profile(&f);
            if (opts->fab_mode == CB_FAB_CALIBRATE) {
                if (st_profile_write(opts->fab_out, &f.fabric, samples, "collbench calibrate") !=
                    ST_OK) {
                    fprintf(stderr, "collbench: cannot write the profile %s\n", opts->fab_out);
                    ret = 2;
                } else {
                    printf("# fabric profile written to %s\n", opts->fab_out);
                }
            }
            fflush(stdout);
        }
    }
    if (opts->fab_mode == CB_FAB_TUNE) {
        ret = cb_fab_tune(&f, sizes, nsizes);
    } else if (opts->fab_mode == CB_FAB_COMPARE) {
        ret = cb_fab_compare(&f, sizes, nsizes);
    }
    CB_FAB_CALL(&f, strataCommDestroy(f.world));
    free(f.send);
    free(f.recv);
    return ret;
}
