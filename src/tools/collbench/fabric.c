/*
 * fabric.c - `collbench calibrate`, `collbench tune` and `collbench model --profile F --compare`:
 * measuring the fabric for the cost model, sweeping the phase split, and checking the model
 * against the measurement (the model and the files: src/tune/, docs/model.md).
 *
 * All three run as ranks (the launch options of the benchmark) and measure all-reduce of float
 * sums only. Every configuration is forced through a tuning table given to a split of the
 * communicator (strataConfig_t.tuneFile), so the library runs exactly the algorithm, chunk,
 * pipeline depth and rail shares under test; STRATA_ALGO, STRATA_HIER_CHUNK_SIZE,
 * STRATA_PIPELINE_DEPTH and STRATA_RAIL_SHARES would override those, so they must be unset.
 * A time is the median over iterations of the slowest rank's time of each (ranks line up on a
 * barrier before every iteration).
 *
 * calibrate (per level; formulas of src/tune/model.h):
 *   intra   the ranks of each node, hier forced with one chunk: the synchronisation latency
 *           alpha = t(8 B) / 2 (two window synchronisations), the window bandwidth beta from the
 *           all-gather phase ((g-1)/g S / t_AG) and the reduction throughput gamma from what the
 *           reduce-scatter phase takes beyond it, both scaled so that the model gives the
 *           measured total at S = 4 MiB;
 *   inter   one ring step on every rail at once (each rank sends to the next node's rank of its
 *           local rank and receives from the previous node's, over its own rail, as the
 *           hierarchical inter-node phase does): each local rank's beta = S / (t(S) - t(8 B)) at
 *           S = 16 MiB, the betas of the local ranks sharing a NIC added into that rail's;
 *           gamma_inter = gamma_intra (the same cores reduce); each rail's burst credit (bytes a
 *           token-bucket shaper passes at once after the rest between operations) = D - (t(D) -
 *           t(8 B)) beta_rail for the D bytes of exchanges of 4 KiB .. 1 MiB per local rank;
 *           alpha_inter and the hierarchical path's rest from hier itself at 8 B .. 1 MiB
 *           (cb_fab_calibrate_hier); the small algorithm's exchange alpha and credit from small
 *           itself at 8 B .. 64 KiB (docs/model.md, Calibrate).
 * tune: for every size of the sweep, small (up to 128 KiB), ring, and hier with every chunk of
 *   256 KiB .. 4 MiB and pipeline depth 2 or 4, with even rail shares and with shares
 *   proportional to the calibrated rail bandwidths (several NICs only), timed once each (the
 *   sweep). Selection, largest size first: the sweep's CB_FAB_TOP fastest (and at the largest size
 *   the best hier of each share set) are timed again, interleaved iteration by iteration; the
 *   fastest hier at the largest size fixes the shares and the pipeline depth (one per table), and
 *   every smaller size chooses among configurations compatible with them. Written as a tuning
 *   table; then the tuned library (a split with the table) and each size's chosen configuration
 *   are timed against each other, interleaved (the check).
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
#include "tune/tune.h"

#define CB_MIN(a, b) ((a) < (b) ? (a) : (b))
#define CB_MAX(a, b) ((a) > (b) ? (a) : (b))

#define CB_FAB_MAX_ITERS   1000
#define CB_FAB_TARGET_S    0.3   /* seconds of timed iterations per measurement, about */
#define CB_FAB_WARMUP_S    0.03  /* seconds of warm-up calls per measurement, about */
#define CB_FAB_CAL_REPS    3     /* calibrate: measurements per time (but the 16 MiB step) */
#define CB_FAB_SMALL_CREDIT_MAX ((size_t)64 << 10) /* small's credit: 4, 16, 64 KiB */
#define CB_FAB_REST_MIN    ((size_t)16 << 10)  /* hier's rest: 16 KiB, 64 KiB, 256 KiB, 1 MiB */
#define CB_FAB_REST_MAX    ((size_t)1 << 20)
#define CB_FAB_INTRA_BYTES ((size_t)4 << 20)
#define CB_FAB_INTER_BYTES ((size_t)16 << 20)
#define CB_FAB_BURST_BYTES ((size_t)1 << 20)  /* the largest burst credit exchange */
#define CB_FAB_CREDIT_POINTS 5                 /* credit exchanges: 4 KiB .. 1 MiB, x4 */
#define CB_FAB_MAX_CANDS   32
#define CB_FAB_MAX_RANKS   4096
#define CB_FAB_TOP         3     /* forced configurations timed again against the tuned one */
#define CB_FAB_PAIRED_S    1.0   /* seconds of iterations per configuration timed interleaved */

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
    int    algo;          /* st_model_algo_t */
    size_t chunk;         /* hier */
    int    depth;         /* hier */
    int    prop;          /* hier: 1 = shares proportional to the rails, 0 = even */
    int    channels;      /* ring: rings at once (0 or 1: one) */
    double t[64];         /* per size; 0 = not measured */
} cb_cand_t;

static void cb_fab_die(const cb_fab_t *f, const char *call, strataResult_t res)
{
    fprintf(stderr, "collbench: rank %d: %s failed: %s: %s\n", f->rank, call,
            strataGetErrorString(res), strataGetLastError(f->world));
    fflush(stderr);
    exit(2);
}

#define CB_FAB_CALL(f, call)                                                                   \
    do {                                                                                       \
        strataResult_t _r = (call);                                                            \
        if (_r != strataSuccess) {                                                             \
            cb_fab_die((f), #call, _r);                                                        \
        }                                                                                      \
    } while (0)

static void cb_fab_max(cb_fab_t *f, double *v, size_t n)
{
    CB_FAB_CALL(f, strataAllReduce(v, v, n, strataFloat64, strataMax, f->world, NULL));
}

static void cb_fab_barrier(cb_fab_t *f)
{
    double x = 0.0;

    cb_fab_max(f, &x, 1);
}

static int cb_fab_cmp(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;

    return (x > y) - (x < y);
}

/* A split of the world (color, key = rank) that runs what `table` says. */
static strataComm_t cb_fab_split(cb_fab_t *f, int color, const st_tune_table_t *table)
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

/* A table forcing one configuration for every size, on a layout of g x nodes. */
static void cb_fab_force(const cb_fab_t *f, int g, int nodes, int algo, size_t chunk, int depth,
                         int channels, const double *share, st_tune_table_t *t)
{
    memset(t, 0, sizeof(*t));
    t->ranks_per_node = g;
    t->nodes          = nodes;
    t->nrails         = f->nics;
    t->pipeline_depth = (unsigned)depth;
    t->nentries       = 1;
    t->entries[0]     = (st_tune_entry_t){ST_TUNE_NO_LIMIT, algo,
                                          algo == ST_MODEL_HIER ? chunk : 0,
                                          algo == ST_MODEL_RING ? channels : 0};
    if (algo == ST_MODEL_SMALL) {
        /* small only where it fits (the windows' small area; calibrate and tune time it at no
         * larger size): a table giving it every size is one the library rightly warns about */
        t->nentries   = 2;
        t->entries[0] = (st_tune_entry_t){CB_SMALL_MAX, ST_MODEL_SMALL, 0, 0};
        t->entries[1] = (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_MODEL_RING, 0, 1};
    }
    if (share != NULL && f->nics > 1) {
        memcpy(t->rail_share, share, sizeof(double) * (size_t)f->nics);
    }
}

static double cb_fab_median(double *t, int n)
{
    qsort(t, (size_t)n, sizeof(double), cb_fab_cmp);
    return (n % 2) ? t[n / 2] : 0.5 * (t[n / 2 - 1] + t[n / 2]);
}

typedef void (*cb_fab_op_t)(cb_fab_t *f, const void *arg);

/* Warm-up calls for about CB_FAB_WARMUP_S of calls of `est` seconds, at most 100; none when a
 * call takes longer than half of it (the first call's extra cost is lost in long calls). */
static int cb_fab_warm_calls(double est)
{
    return (2 * est > CB_FAB_WARMUP_S) ? 0 : (int)CB_MIN(CB_FAB_WARMUP_S / CB_MAX(est, 1e-6), 100);
}

/* The model's fabric without any burst credit: what calibrate compares measured times with to
 * find the credit (or the rest) an algorithm got. */
static st_model_fabric_t cb_fab_nocredit(const st_model_fabric_t *fab)
{
    st_model_fabric_t f = *fab;

    memset(f.rail_credit, 0, sizeof(f.rail_credit));
    memset(f.rail_burst, 0, sizeof(f.rail_burst));
    memset(&f.small_credit, 0, sizeof(f.small_credit));
    memset(&f.hier_rest, 0, sizeof(f.hier_rest));
    return f;
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

typedef struct cb_fab_ar {
    strataComm_t comm;
    size_t       count;
} cb_fab_ar_t;

static void cb_fab_allreduce_op(cb_fab_t *f, const void *arg)
{
    const cb_fab_ar_t *ar = arg;

    CB_FAB_CALL(f, strataAllReduce(f->send, f->recv, ar->count, strataFloat32, strataSum,
                                   ar->comm, NULL));
}

/* Median time of a float-sum all-reduce of `bytes` on comm (every rank of the world in one of
 * the splits that are timed together), the slowest rank per iteration; the phases of the last
 * call (slowest rank) into ph when not NULL. */
static double cb_fab_time(cb_fab_t *f, strataComm_t comm, size_t bytes, double ph[3])
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

/* Median time of one ring step on every rail at once, per local rank (med[l], the slowest node
 * of each iteration): each rank sends `bytes` to the rank of the next node with its local rank
 * and receives as many from the previous node's, in a group, over the world communicator (whose
 * endpoints to other nodes go through the rank's own rail). */
static void cb_fab_exchange(cb_fab_t *f, const int *rank_of, size_t bytes, double *med)
{
    cb_fab_step_t st = {rank_of[((f->node + 1) % f->nnodes) * f->g + f->local],
                        rank_of[((f->node + f->nnodes - 1) % f->nnodes) * f->g + f->local],
                        bytes};

    cb_fab_measure(f, cb_fab_step_op, &st, f->local, f->g, med);
}

/* ---- calibrate ---------------------------------------------------------------------------------- */

/* A measured credit curve, made physical: after the same rest a larger transfer cannot have a
 * larger share of its bytes credited than a smaller one, so the credited fraction is made
 * non-increasing from the largest point down (credit_i >= credit_{i+1} bytes_i / bytes_{i+1}). The
 * small points come from differences of 50-100 us between two noisy times, and came out near 0
 * where the operations ran at full credit.
 * With same_idle (the operations of the curve leave the rail idle about as long each, as small's
 * at 4-64 KiB, where the latencies of the barrier and of the synchronisations dwarf the window
 * copies' few us: an 8 B small all-reduce alone takes about 90 us): repeated back to back, a token
 * bucket gives each operation min(D, rate x idle), its bytes or what the idle time refilled, so a
 * smaller operation gets at least min(bytes_i, credit_{i+1}). An empirical floor as much as a law:
 * it rests on the idle times being equal, and it keeps one launch's slow scheduling out of the
 * curve. On 2 Gbit/s a calibration whose small at 16 KiB ran 1.45x slower than at the next launch
 * (133.6 us, then 92.2 us) had credited 11 of its 16 KiB but 42 of 64 KiB, and the model was 43 %
 * slow at 16 KiB. The flat ring's curves (to 2 MiB per rank) break the rule where measured (34 KiB
 * credited at 512 KiB, 87 at 2 MiB, after the same barrier): TCP's window and the two buckets in
 * series (the node's, the switch port's) are not one bucket at those sizes, so they keep only the
 * first rule. */
static void cb_fab_credit_fix(st_model_credit_t *c, int same_idle)
{
    for (int i = c->n - 2; i >= 0; i--) {
        c->credit[i] = CB_MAX(c->credit[i], c->credit[i + 1] * c->bytes[i] / c->bytes[i + 1]);
        if (same_idle) {
            c->credit[i] = CB_MAX(c->credit[i], CB_MIN(c->bytes[i], c->credit[i + 1]));
        }
    }
}

/* Rail shares: proportional to the calibrated rail bandwidths (prop), else even. */
static void cb_fab_shares(const cb_fab_t *f, int prop, double *share)
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

/* The hierarchical path as it runs, hier forced with one chunk over all ranks, with the shares the
 * model's tables give it (proportional to the rails, calibrated above):
 *   at 8 B, two window synchronisations and 2(N-1) ring steps, so alpha_inter =
 *   (t - 2 alpha_intra) / (2(N-1)) (the 8 B exchange on every rail at once costs more: every
 *   rank drives the network at once, without the window phases around it);
 *   at 16 KiB, 64 KiB, 256 KiB and 1 MiB, how long the rails rested before its inter-node
 *   bytes: rest = what t falls short of the model without any credit (hier_rest). The rest grows
 *   with the size (the window phases around the transfer are part of it): taken constant below
 *   64 KiB, the model was 14-30 % fast at 16 KiB.
 * Writes its samples (JSON members) to buf; returns their length. */
static size_t cb_fab_calibrate_hier(cb_fab_t *f, char *buf, size_t len)
{
    st_model_fabric_t *fab = &f->fabric, nocredit;
    st_model_split_t   split;
    st_model_time_t    p;
    st_tune_table_t    t;
    strataComm_t       comm;
    int                N = f->nnodes;
    size_t             pos = 0;
    double             th, share[ST_MODEL_MAX_RAILS] = {0};

    cb_fab_shares(f, 1, share);
    cb_fab_force(f, f->g, N, ST_MODEL_HIER, CB_FAB_INTRA_BYTES, 1, 0, share, &t);
    comm = cb_fab_split(f, 0, &t);
    th   = cb_fab_time(f, comm, 8, NULL);
    fab->inter.alpha = CB_MAX(th - 2 * fab->intra.alpha, 0.25 * th) / (2.0 * (N - 1));
    pos += (size_t)snprintf(buf + pos, len - pos, "\"hier8_s\": %.9g, ", th);
    nocredit = cb_fab_nocredit(fab);
    memset(&split, 0, sizeof(split));
    split.chunk = CB_FAB_INTRA_BYTES;
    memcpy(split.rail_share, share, sizeof(share));
    for (size_t s = CB_FAB_REST_MIN; s <= CB_FAB_REST_MAX; s *= 4) {
        double ts = cb_fab_time(f, comm, s, NULL);

        st_model_allreduce(&nocredit, &split, ST_MODEL_HIER, (double)s, &p);
        fab->hier_rest.bytes[fab->hier_rest.n]     = (double)s;
        fab->hier_rest.seconds[fab->hier_rest.n++] = CB_MAX(p.total - ts, 0.0);
        pos += (size_t)snprintf(buf + pos, len - pos, "\"hier%zu_s\": %.9g, ", s, ts);
    }
    CB_FAB_CALL(f, strataCommDestroy(comm));
    return pos;
}

static void cb_fab_calibrate(cb_fab_t *f, char *samples, size_t len)
{
    st_model_fabric_t *fab = &f->fabric;
    st_tune_table_t    t;
    strataComm_t       comm;
    static double      t8_l[CB_FAB_MAX_RANKS], tS_l[CB_FAB_MAX_RANKS], tB_l[CB_FAB_MAX_RANKS];
    double             t8, tS, ph[3], fr, scale;
    int                N = f->nnodes, g = f->g;
    size_t             pos = 0;

    memset(fab, 0, sizeof(*fab));
    fab->ranks_per_node = g;
    fab->nodes          = N;
    fab->nrails         = f->nics;
    f->reps             = CB_FAB_CAL_REPS;
    pos += (size_t)snprintf(samples + pos, len - pos, "{");
    /* intra: every node's ranks at once */
    fab->intra = (st_model_level_t){1e-6, 1e10, 0.0};
    if (g > 1) {
        cb_fab_force(f, g, 1, ST_MODEL_HIER, CB_FAB_INTRA_BYTES, 1, 0, NULL, &t);
        comm = cb_fab_split(f, f->node, &t);
        t8   = cb_fab_time(f, comm, 8, NULL);
        tS   = cb_fab_time(f, comm, CB_FAB_INTRA_BYTES, ph);
        CB_FAB_CALL(f, strataCommDestroy(comm));
        fr = (double)(g - 1) / g * (double)CB_FAB_INTRA_BYTES;
        fab->intra.alpha = t8 / 2;
        if (ph[2] > 0 && ph[0] > 0) {
            /* the busy times of the phases, scaled to the measured total */
            scale             = CB_MAX(tS - 2 * fab->intra.alpha, 1e-9) / (ph[0] + ph[2]);
            fab->intra.beta   = fr / (ph[2] * scale);
            fab->intra.gamma  = (ph[0] > ph[2]) ? fr / ((ph[0] - ph[2]) * scale) : 0.0;
        } else {
            fab->intra.beta = 2 * fr / CB_MAX(tS - 2 * fab->intra.alpha, 1e-9);
        }
        pos += (size_t)snprintf(samples + pos, len - pos, "\"intra_t8_s\": %.9g, "
                                "\"intra_t4M_s\": %.9g, \"intra_rs_s\": %.9g, \"intra_ag_s\": "
                                "%.9g, ", t8, tS, ph[0], ph[2]);
    }
    /* inter: a ring step on every rail at once, both directions */
    fab->inter = fab->intra;
    if (N > 1) {
        double rank_of[CB_FAB_MAX_RANKS];
        int    irank_of[CB_FAB_MAX_RANKS];

        if (N * g > CB_FAB_MAX_RANKS) {
            fprintf(stderr, "collbench: calibrate handles up to %d ranks\n", CB_FAB_MAX_RANKS);
            exit(2);
        }
        for (int i = 0; i < N * g; i++) {
            rank_of[i] = -1.0;
        }
        rank_of[f->node * g + f->local] = f->rank;
        cb_fab_max(f, rank_of, (size_t)(N * g));
        for (int i = 0; i < N * g; i++) {
            irank_of[i] = (int)rank_of[i];
        }
        cb_fab_exchange(f, irank_of, 8, t8_l);
        f->reps = 1; /* 0.1-0.5 s a call on these links: long enough to be steady */
        cb_fab_exchange(f, irank_of, CB_FAB_INTER_BYTES, tS_l);
        f->reps = CB_FAB_CAL_REPS;
        t8 = tS = 0.0;
        fab->inter.beta = 0.0;
        for (int l = 0; l < g; l++) {
            t8 = CB_MAX(t8, t8_l[l]);
            tS = CB_MAX(tS, tS_l[l]);
            /* local rank l's step bandwidth, added into its NIC's */
            fab->rail_beta[l % f->nics] += (double)CB_FAB_INTER_BYTES /
                                           CB_MAX(tS_l[l] - t8_l[l], 1e-9);
        }
        fab->inter.gamma = fab->intra.gamma; /* the same cores reduce the received blocks */
        for (int r = 0; r < f->nics; r++) {
            fab->inter.beta += fab->rail_beta[r] / f->nics;
        }
        /* a shaped rail's burst credit: what exchanges of 4 KiB .. 1 MiB per local rank (after
         * the idle moment of the barrier, as between the operations of a measurement) get
         * through beyond alpha + D/beta, D the bytes of the rail's local ranks */
        pos += (size_t)snprintf(samples + pos, len - pos, "\"inter_step8_s\": %.9g, "
                                "\"inter_step16M_s\": %.9g, ", t8, tS);
        for (int k = 0; k < CB_FAB_CREDIT_POINTS; k++) {
            size_t d1 = CB_FAB_BURST_BYTES >> (2 * (CB_FAB_CREDIT_POINTS - 1 - k));

            cb_fab_exchange(f, irank_of, d1, tB_l);
            for (int r = 0; r < f->nics; r++) {
                st_model_credit_t *c = &fab->rail_credit[r];
                double             d = 0.0, tmax = 0.0;

                for (int l = r; l < g; l += f->nics) {
                    d += (double)d1;
                    tmax = CB_MAX(tmax, tB_l[l]);
                }
                if (d > 0 && fab->rail_beta[r] > 0) {
                    c->bytes[c->n]  = d;
                    c->credit[c->n] = CB_MIN(CB_MAX(d - (tmax - t8) * fab->rail_beta[r], 0.0), d);
                    fab->rail_burst[r] = c->credit[c->n++]; /* the largest point */
                }
            }
            pos += (size_t)snprintf(samples + pos, len - pos, "\"inter_step%zu_s\": %.9g, ", d1,
                                    tB_l[0]);
        }
        for (int r = 0; r < f->nics; r++) {
            cb_fab_credit_fix(&fab->rail_credit[r], 0);
        }
        /* the small algorithm's leader exchange on its own: small forced at 8 B on the world,
         * less its two window synchronisations; then its burst credit at 4, 16 and 64 KiB: what
         * t(S) - t(8 B) falls short of the model without credit, times rail 0's bandwidth */
        {
            st_model_split_t  split;
            st_model_fabric_t nocredit;
            st_model_time_t   p8, pS;
            double            tsm, ts;

            cb_fab_force(f, g, N, ST_MODEL_SMALL, 0, 1, 0, NULL, &t);
            comm = cb_fab_split(f, 0, &t);
            tsm  = cb_fab_time(f, comm, 8, NULL);
            fab->exchange_alpha = CB_MAX(tsm - 2 * fab->intra.alpha, 0.25 * tsm);
            pos += (size_t)snprintf(samples + pos, len - pos, "\"small8_s\": %.9g, ", tsm);
            memset(&split, 0, sizeof(split));
            split.small_max = CB_FAB_SMALL_CREDIT_MAX;
            nocredit        = cb_fab_nocredit(fab);
            st_model_allreduce(&nocredit, &split, ST_MODEL_SMALL, 8.0, &p8);
            for (size_t s = CB_FAB_SMALL_CREDIT_MAX >> 4; s <= CB_FAB_SMALL_CREDIT_MAX; s *= 4) {
                st_model_credit_t *c = &fab->small_credit;
                double             d = (double)(N - 1) * (double)s;

                ts = cb_fab_time(f, comm, s, NULL);
                st_model_allreduce(&nocredit, &split, ST_MODEL_SMALL, (double)s, &pS);
                c->bytes[c->n]  = d;
                c->credit[c->n] = CB_MIN(CB_MAX(((pS.total - p8.total) - (ts - tsm)) *
                                                    st_model_rail_beta(fab, 0), 0.0), d);
                c->n++;
                pos += (size_t)snprintf(samples + pos, len - pos, "\"small%zu_s\": %.9g, ", s, ts);
            }
            cb_fab_credit_fix(&fab->small_credit, 1);
            CB_FAB_CALL(f, strataCommDestroy(comm));
        }
        pos += cb_fab_calibrate_hier(f, samples + pos, len - pos);
    }
    snprintf(samples + pos, len - pos, "\"method\": \"collbench calibrate (src/tools/collbench/"
             "fabric.c)\"}");
    f->reps = 1;
}

/* "# <what> (KiB credited of KiB moved): c/b c/b ...", without the newline. */
static void cb_fab_print_credit(const char *what, const st_model_credit_t *c)
{
    printf("# %s (KiB credited of KiB moved):", what);
    for (int i = 0; i < c->n; i++) {
        printf(" %.0f/%.0f", c->credit[i] / 1024.0, c->bytes[i] / 1024.0);
    }
}

static void cb_fab_print_profile(const cb_fab_t *f)
{
    const st_model_fabric_t *fab = &f->fabric;

    printf("# fabric: %d ranks per node x %d nodes, %d rail(s)\n", fab->ranks_per_node,
           fab->nodes, fab->nrails);
    printf("# intra: alpha %.2f us, beta %.3f GB/s, ", fab->intra.alpha * 1e6,
           fab->intra.beta / 1e9);
    if (fab->intra.gamma > 0) {
        printf("gamma %.3f GB/s", fab->intra.gamma / 1e9);
    } else {
        printf("gamma 0 (reduction not counted)");
    }
    printf("%s\n", fab->ranks_per_node > 1 ? "" :
           " (one rank per node: not measured, placeholders the model never uses here)");
    printf("# inter: alpha %.2f us, beta %.4f GB/s", fab->inter.alpha * 1e6,
           fab->inter.beta / 1e9);
    for (int r = 0; r < fab->nrails; r++) {
        printf("%s%.4f", r ? ", " : "; rails ", st_model_rail_beta(fab, r) / 1e9);
    }
    printf(" GB/s; exchange alpha %.2f us\n", fab->exchange_alpha * 1e6);
    for (int r = 0; r < fab->nrails; r++) {
        char what[48];

        snprintf(what, sizeof(what), "rail %d burst credit", r);
        cb_fab_print_credit(what, &fab->rail_credit[r]);
        if (fab->rail_credit[r].n == 0) {
            printf(" %.0f KiB at most", fab->rail_burst[r] / 1024.0);
        }
        printf("\n");
    }
    if (fab->hier_rest.n > 0) {
        printf("# hier's rails rest before the inter-node bytes (us at KiB):");
        for (int i = 0; i < fab->hier_rest.n; i++) {
            printf(" %.0f@%.0f", fab->hier_rest.seconds[i] * 1e6, fab->hier_rest.bytes[i] / 1024.0);
        }
        printf("\n");
    }
    if (fab->small_credit.n > 0) {
        cb_fab_print_credit("small's exchange burst credit on rail 0", &fab->small_credit);
        printf("\n");
    }
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

static void cb_fab_size_str(size_t s, char *buf, size_t len)
{
    if (s >= ((size_t)1 << 20) && s % ((size_t)1 << 20) == 0) {
        snprintf(buf, len, "%zuM", s >> 20);
    } else if (s >= 1024 && s % 1024 == 0) {
        snprintf(buf, len, "%zuK", s >> 10);
    } else {
        snprintf(buf, len, "%zu", s);
    }
}

static void cb_fab_cand_str(const cb_cand_t *c, char *buf, size_t len)
{
    char chunk[32];

    if (c->algo == ST_MODEL_HIER && c->depth > 0) {
        cb_fab_size_str(c->chunk, chunk, sizeof(chunk));
        snprintf(buf, len, "hier/%s/d%d%s", chunk, c->depth, c->prop ? "/prop" : "");
    } else if (c->algo == ST_MODEL_HIER) { /* a table's entry: depth and shares are the table's */
        cb_fab_size_str(c->chunk, chunk, sizeof(chunk));
        snprintf(buf, len, "hier/%s", chunk);
    } else if (c->algo == ST_MODEL_RING && c->channels > 1) {
        snprintf(buf, len, "ring/ch%d", c->channels);
    } else {
        snprintf(buf, len, "%s", st_tune_algo_name(c->algo));
    }
}

/* ---- tune --------------------------------------------------------------------------------------- */

static strataComm_t cb_fab_cand_comm(cb_fab_t *f, const cb_cand_t *c)
{
    st_tune_table_t t;
    double          share[ST_MODEL_MAX_RAILS];

    cb_fab_shares(f, c->prop, share);
    cb_fab_force(f, f->g, f->nnodes, c->algo, c->chunk, c->depth, c->channels, share, &t);
    return cb_fab_split(f, 0, &t);
}

static int cb_fab_in(const int *set, int n, int c)
{
    for (int j = 0; j < n; j++) {
        if (set[j] == c) {
            return 1;
        }
    }
    return 0;
}

/* Times all-reduces of `bytes` on the n communicators interleaved: every iteration runs each once,
 * each after a barrier, in an order rotated from one iteration to the next, so that all of them
 * meet the same state of the cores and links (other load, a shaped link's bucket), which
 * measurements one after the other did not: in rounds of separate measurements the same
 * configuration on two communicators came out up to 1.7x apart at 64 KiB. After warm-up calls
 * (CB_FAB_WARMUP_S, as cb_fab_measure), about CB_FAB_PAIRED_S of iterations per communicator,
 * at least -n and 5, at most CB_FAB_MAX_ITERS. med[j]: the median over iterations of the slowest
 * rank's time on comms[j]. */
static void cb_fab_interleave(cb_fab_t *f, const strataComm_t *comms, int n, size_t bytes,
                              double *med)
{
    size_t  count = CB_MAX(bytes / sizeof(float), (size_t)1);
    double  est = 0.0, t0, *t;
    int     iters, warm;

    for (int j = 0; j < n; j++) {
        cb_fab_ar_t ar = {comms[j], count};

        cb_fab_barrier(f);
        t0 = cb_now();
        cb_fab_allreduce_op(f, &ar);
        est = CB_MAX(est, cb_now() - t0);
    }
    cb_fab_max(f, &est, 1);
    warm = cb_fab_warm_calls(est);
    for (int i = 0; i < warm; i++) {
        for (int j = 0; j < n; j++) {
            cb_fab_ar_t ar = {comms[j], count};

            cb_fab_allreduce_op(f, &ar);
        }
    }
    iters = (int)CB_MIN(CB_MAX(CB_FAB_PAIRED_S / CB_MAX(est, 1e-6),
                               (double)CB_MAX(f->opts->iters, 5)), (double)CB_FAB_MAX_ITERS);
    t = calloc((size_t)iters * (size_t)n, sizeof(double));
    if (t == NULL) {
        fprintf(stderr, "collbench: rank %d: out of memory\n", f->rank);
        exit(2);
    }
    for (int i = 0; i < iters; i++) {
        for (int jj = 0; jj < n; jj++) {
            int         j  = (i + jj) % n;
            cb_fab_ar_t ar = {comms[j], count};

            cb_fab_barrier(f);
            t0 = cb_now();
            cb_fab_allreduce_op(f, &ar);
            t[j * iters + i] = cb_now() - t0;
        }
    }
    cb_fab_max(f, t, (size_t)iters * (size_t)n);
    for (int j = 0; j < n; j++) {
        med[j] = cb_fab_median(t + j * iters, iters);
    }
    free(t);
}

/* Times the candidates of set (and `tuned` when not NULL) at `bytes` against each other,
 * interleaved (cb_fab_interleave); their medians into med[] (and *tuned_med). */
static void cb_fab_retime(cb_fab_t *f, const cb_cand_t *cands, const int *set, int nset,
                          strataComm_t tuned, size_t bytes, double *med, double *tuned_med)
{
    strataComm_t comms[CB_FAB_TOP + 3];
    double       t[CB_FAB_TOP + 3];

    for (int j = 0; j < nset; j++) {
        comms[j] = cb_fab_cand_comm(f, &cands[set[j]]);
    }
    if (tuned != NULL) {
        comms[nset] = tuned;
    }
    cb_fab_interleave(f, comms, nset + (tuned != NULL), bytes, t);
    for (int j = 0; j < nset; j++) {
        med[j] = t[j];
        CB_FAB_CALL(f, strataCommDestroy(comms[j]));
    }
    if (tuned != NULL) {
        *tuned_med = t[nset];
    }
}

static int cb_fab_tune(cb_fab_t *f, const size_t *sizes, int nsizes)
{
    static cb_cand_t cands[CB_FAB_MAX_CANDS];
    int              ncand = 0, best[64], prop_win = 0, depth_win = 4, ret = 0;
    double           te = 0, tp = 0;
    st_tune_table_t  table;
    strataComm_t     comm;
    char             name[64], sz[32];
    const char      *out = f->opts->fab_out;
    double           share[ST_MODEL_MAX_RAILS];

    memset(cands, 0, sizeof(cands));
    cands[ncand++] = (cb_cand_t){.algo = ST_MODEL_SMALL};
    cands[ncand++] = (cb_cand_t){.algo = ST_MODEL_RING};
    for (int ch = 2; ch <= CB_MIN(f->nics, ST_TUNE_MAX_CHANNELS) && f->nnodes > 1; ch++) {
        cands[ncand++] = (cb_cand_t){.algo = ST_MODEL_RING, .channels = ch}; /* one per rail */
    }
    for (int prop = 0; prop <= (f->nics > 1 && f->nnodes > 1); prop++) {
        for (size_t chunk = (size_t)256 << 10; chunk <= ((size_t)4 << 20); chunk *= 2) {
            for (int depth = 2; depth <= 4; depth += 2) {
                cands[ncand++] = (cb_cand_t){.algo = ST_MODEL_HIER, .chunk = chunk,
                                             .depth = depth, .prop = prop};
            }
        }
    }
    if (f->rank == 0) {
        printf("# tune: %d configurations x %d sizes (median of the slowest rank's time per "
               "iteration)\n", ncand, nsizes);
        fflush(stdout);
    }
    for (int c = 0; c < ncand; c++) {
        if (cands[c].algo == ST_MODEL_HIER && f->g == 1 && f->nnodes > 1) {
            continue; /* one rank per node: hier has no windows to run in */
        }
        comm = cb_fab_cand_comm(f, &cands[c]);
        for (int i = 0; i < nsizes; i++) {
            if (cands[c].algo == ST_MODEL_SMALL && sizes[i] > CB_SMALL_MAX) {
                continue; /* beyond the windows' small area */
            }
            if (cands[c].algo == ST_MODEL_HIER && cands[c].chunk > sizes[i] &&
                cands[c].chunk > ((size_t)256 << 10)) {
                continue; /* one chunk either way: the 256 KiB row stands for it */
            }
            cands[c].t[i] = cb_fab_time(f, comm, sizes[i], NULL);
        }
        CB_FAB_CALL(f, strataCommDestroy(comm));
        if (f->rank == 0) {
            cb_fab_cand_str(&cands[c], name, sizeof(name));
            printf("#   %-22s", name);
            for (int i = 0; i < nsizes; i++) {
                if (cands[c].t[i] > 0) {
                    printf(" %9.1f", cands[c].t[i] * 1e6);
                } else {
                    printf(" %9s", "-");
                }
            }
            printf("  us\n");
            fflush(stdout);
        }
    }
    /* selection: re-time the sweep's fastest, largest size first, where the shares and the
     * pipeline depth (one per table) are decided */
    for (int i = nsizes - 1; i >= 0; i--) {
        int    set[CB_FAB_TOP + 2], nset = 0, ce = -1, cp = -1;
        double med[CB_FAB_TOP + 2];

        for (int k = 0; k < CB_FAB_TOP; k++) {
            int pick = -1;

            for (int c = 0; c < ncand; c++) {
                if (cands[c].t[i] > 0 && !cb_fab_in(set, nset, c) &&
                    (i == nsizes - 1 || cands[c].algo != ST_MODEL_HIER ||
                     (cands[c].prop == prop_win && cands[c].depth == depth_win)) &&
                    (pick < 0 || cands[c].t[i] < cands[pick].t[i])) {
                    pick = c;
                }
            }
            if (pick >= 0) {
                set[nset++] = pick;
            }
        }
        if (i == nsizes - 1) { /* the best hier of each share set joins, to decide the shares */
            for (int c = 0; c < ncand; c++) {
                int *w = cands[c].prop ? &cp : &ce;

                if (cands[c].algo == ST_MODEL_HIER && cands[c].t[i] > 0 &&
                    (*w < 0 || cands[c].t[i] < cands[*w].t[i])) {
                    *w = c;
                }
            }
            if (ce >= 0 && !cb_fab_in(set, nset, ce)) {
                set[nset++] = ce;
            }
            if (cp >= 0 && !cb_fab_in(set, nset, cp)) {
                set[nset++] = cp;
            }
        }
        cb_fab_retime(f, cands, set, nset, NULL, sizes[i], med, NULL);
        best[i] = -1;
        for (int j = 0; j < nset; j++) {
            if (best[i] < 0 || med[j] < cands[best[i]].t[i]) {
                best[i] = set[j];
            }
            cands[set[j]].t[i] = med[j]; /* the re-timed median replaces the sweep's */
        }
        if (i == nsizes - 1) {
            int hb = -1; /* the fastest hier decides shares and depth */

            for (int j = 0; j < nset; j++) {
                if (cands[set[j]].algo == ST_MODEL_HIER &&
                    (hb < 0 || cands[set[j]].t[i] < cands[hb].t[i])) {
                    hb = set[j];
                }
            }
            if (hb >= 0) {
                prop_win  = cands[hb].prop;
                depth_win = cands[hb].depth;
            }
            te = ce >= 0 ? cands[ce].t[i] : 0.0;
            tp = cp >= 0 ? cands[cp].t[i] : 0.0;
        }
    }
    /* the table: one entry per size, merged where the configuration repeats */
    memset(&table, 0, sizeof(table));
    table.ranks_per_node = f->g;
    table.nodes          = f->nnodes;
    table.nrails         = f->nics;
    table.pipeline_depth = (unsigned)depth_win;
    for (int i = 0; i < nsizes; i++) {
        const cb_cand_t *c = &cands[best[i]];
        st_tune_entry_t  e = {sizes[i], c->algo, c->algo == ST_MODEL_HIER ? c->chunk : 0,
                              c->algo == ST_MODEL_RING ? c->channels : 0};

        if (table.nentries > 0 && table.entries[table.nentries - 1].algo == e.algo &&
            table.entries[table.nentries - 1].hier_chunk == e.hier_chunk &&
            table.entries[table.nentries - 1].channels == e.channels) {
            table.entries[table.nentries - 1].max_bytes = e.max_bytes;
        } else {
            table.entries[table.nentries++] = e;
        }
    }
    table.entries[table.nentries - 1].max_bytes = ST_TUNE_NO_LIMIT;
    if (table.entries[table.nentries - 1].algo == ST_MODEL_SMALL &&
        table.nentries < ST_TUNE_MAX_ENTRIES) {
        /* small won the largest size: it holds up to its limit, and the sizes above (not timed)
         * take the fastest other configuration at the largest size, rather than a table that
         * gives small every size and so draws a WARN at each use */
        int other = -1;

        for (int c = 0; c < ncand; c++) {
            if (cands[c].algo != ST_MODEL_SMALL && cands[c].t[nsizes - 1] > 0 &&
                (cands[c].algo != ST_MODEL_HIER ||
                 (cands[c].prop == prop_win && cands[c].depth == depth_win)) &&
                (other < 0 || cands[c].t[nsizes - 1] < cands[other].t[nsizes - 1])) {
                other = c;
            }
        }
        table.entries[table.nentries - 1].max_bytes = CB_SMALL_MAX;
        table.entries[table.nentries++] = other < 0
            ? (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_MODEL_RING, 0, 1}
            : (st_tune_entry_t){ST_TUNE_NO_LIMIT, cands[other].algo,
                                cands[other].algo == ST_MODEL_HIER ? cands[other].chunk : 0,
                                cands[other].algo == ST_MODEL_RING ? cands[other].channels : 0};
    }
    if (f->nics > 1 && f->nnodes > 1) {
        cb_fab_shares(f, prop_win, table.rail_share);
    }
    if (f->rank == 0) {
        if (st_tune_table_write(out, &table, "collbench tune") != ST_OK) {
            fprintf(stderr, "collbench: cannot write the tuning table %s\n", out);
            ret = 2;
        } else {
            printf("# tuning table written to %s (%d entries, pipeline depth %u, rail shares %s)\n",
                   out, table.nentries, table.pipeline_depth, f->nics > 1 ?
                   (prop_win ? "proportional to the rails" : "even") : "n/a");
        }
        fflush(stdout);
    }
    {
        double failed = ret; /* every rank ends if rank 0 could not write the table */

        cb_fab_max(f, &failed, 1);
        if (failed != 0) {
            return 2;
        }
    }
    /* check: the tuned library (a split with the table) against each size's chosen forced
     * configuration, in alternating rounds */
    {
        strataConfig_t cfg = STRATA_CONFIG_INITIALIZER;
        strataComm_t   tuned;
        double         tt[64], tb[64];

        cfg.tuneFile = out;
        cfg.name     = "collbench-tuned";
        CB_FAB_CALL(f, strataCommSplit(f->world, 0, f->rank, &tuned, &cfg));
        for (int i = 0; i < nsizes; i++) {
            cb_fab_retime(f, cands, &best[i], 1, tuned, sizes[i], &tb[i], &tt[i]);
        }
        CB_FAB_CALL(f, strataCommDestroy(tuned));
        if (f->rank == 0) {
            printf("#\n# %10s  %-22s %12s %12s %9s\n", "size", "best forced", "forced (us)",
                   "tuned (us)", "tuned/best");
            for (int i = 0; i < nsizes; i++) {
                cb_fab_size_str(sizes[i], sz, sizeof(sz));
                cb_fab_cand_str(&cands[best[i]], name, sizeof(name));
                printf("  %10s  %-22s %12.1f %12.1f %9.3f\n", sz, name, tb[i] * 1e6, tt[i] * 1e6,
                       tt[i] / tb[i]);
            }
            if (te > 0 && tp > 0) {
                cb_fab_shares(f, 1, share);
                cb_fab_size_str(sizes[nsizes - 1], sz, sizeof(sz));
                printf("# rail shares at %s: proportional (", sz);
                for (int r = 0; r < f->nics; r++) {
                    printf("%s%.3f", r ? ", " : "", share[r]);
                }
                printf(") %.1f us, even %.1f us: proportional is %.2fx faster\n", tp * 1e6,
                       te * 1e6, te / tp);
            }
            fflush(stdout);
        }
    }
    return 0;
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
        if (st_model_allreduce(&fab, &split, (st_model_algo_t)e->algo, (double)sizes[i], &pt) !=
            ST_OK) {
            memset(&pt, 0, sizeof(pt));
        }
        if (f->rank == 0) {
            cb_fab_size_str(sizes[i], sz, sizeof(sz));
            cb_fab_cand_str(&as_cand, name, sizeof(name));
            printf("  %10s  %-14s %12.1f %12.1f %+7.1f%%", sz, name, t * 1e6, pt.total * 1e6,
                   pt.total > 0 ? 100.0 * (pt.total - t) / t : 0.0);
            if (e->algo == ST_MODEL_HIER) {
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
