/*
 * tuning.c - `collbench tune`: sweeping the configurations (algorithm, chunk, pipeline depth, rail
 * shares), writing the fastest per size as a tuning table and timing the tuned library against
 * them (the measurement and the forced configurations: fabric.c; the model and the files:
 * src/tune/, docs/model.md).
 *
 * tune: for every size of the sweep, small (up to 128 KiB), ring, and hier with every chunk of
 *   256 KiB .. 4 MiB and pipeline depth 2 or 4, with even rail shares and with shares
 *   proportional to the calibrated rail bandwidths (several NICs only), timed once each (the
 *   sweep). Selection, largest size first: the sweep's CB_FAB_TOP fastest (and at the largest size
 *   the best hier of each share set) are timed again, interleaved iteration by iteration; the
 *   fastest hier at the largest size fixes the shares and the pipeline depth (one per table), and
 *   every smaller size chooses among configurations compatible with them. Written as a tuning
 *   table; then the tuned library (a split with the table) and each size's chosen configuration
 *   are timed against each other, interleaved (the check). Before the table is written,
 *   reduce-scatter, all-gather and all-to-all: ring (pairwise) against hier at every size, the
 *   faster per size in the table's lists for them (cb_fab_tune_colls).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "collbench.h"
#include "fabric.h"
#include "tune/tune.h"

#define CB_FAB_MAX_CANDS   32
#define CB_FAB_TOP         3     /* forced configurations timed again against the tuned one */
#define CB_FAB_PAIRED_S    1.0   /* seconds of iterations per configuration timed interleaved */

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

/* The other collectives (reduce-scatter, all-gather, all-to-all): the flat ring (for all-to-all
 * the pairwise exchange) and hier (the table's
 * pipeline depth and shares, the window's chunk), each forced on a split of its own, timed at every
 * size one after the other (ring, hier, ring again: the ring's median of its two stands against
 * hier's, so a drift of the shared cores during the pair falls on both); the faster per size
 * makes the collective's list of `table`, merged into ranges. Printed on rank 0. */
static void cb_fab_tune_colls(cb_fab_t *f, const size_t *sizes, int nsizes, st_tune_table_t *table)
{
    static const int colls[] = {ST_MODEL_REDUCESCATTER, ST_MODEL_ALLGATHER, ST_MODEL_ALLTOALL};
    char             sz[32];

    if (f->g == 1 && f->nnodes > 1) {
        return; /* one rank per node: no windows for hier; the defaults take the ring */
    }
    for (size_t k = 0; k < sizeof(colls) / sizeof(colls[0]); k++) {
        int                  c = colls[k];
        st_tune_table_t      tr = *table, th = *table;
        st_tune_coll_list_t *l = &table->colls[c];
        strataComm_t         ring, hier;

        tr.colls[c] = (st_tune_coll_list_t){1, {{ST_TUNE_NO_LIMIT, ST_ALGO_RING}}};
        th.colls[c] = (st_tune_coll_list_t){1, {{ST_TUNE_NO_LIMIT, ST_ALGO_HIER}}};
        ring = cb_fab_split(f, 0, &tr);
        hier = cb_fab_split(f, 0, &th);
        if (f->rank == 0) {
            printf("# tune: %s, ring against hier\n#   %10s %12s %12s  %s\n",
                   st_model_coll_name(c), "size", "ring (us)", "hier (us)", "chosen");
        }
        l->n = 0;
        for (int i = 0; i < nsizes; i++) {
            double r1 = cb_fab_time_coll(f, ring, c, sizes[i]);
            double th_s = cb_fab_time_coll(f, hier, c, sizes[i]);
            double r2 = cb_fab_time_coll(f, ring, c, sizes[i]);
            double tr_s = 0.5 * (r1 + r2);
            int    algo = th_s < tr_s ? ST_ALGO_HIER : ST_ALGO_RING;

            if (l->n > 0 && l->entries[l->n - 1].algo == algo) {
                l->entries[l->n - 1].max_bytes = sizes[i];
            } else if (l->n < ST_TUNE_MAX_COLL_ENTRIES) {
                l->entries[l->n++] = (st_tune_coll_entry_t){sizes[i], algo};
            }
            if (f->rank == 0) {
                cb_fab_size_str(sizes[i], sz, sizeof(sz));
                printf("    %10s %12.1f %12.1f  %s\n", sz, tr_s * 1e6, th_s * 1e6,
                       st_algo_name(algo));
                fflush(stdout);
            }
        }
        if (l->n > 0) {
            l->entries[l->n - 1].max_bytes = ST_TUNE_NO_LIMIT;
        }
        CB_FAB_CALL(f, strataCommDestroy(ring));
        CB_FAB_CALL(f, strataCommDestroy(hier));
    }
}

int cb_fab_tune(cb_fab_t *f, const size_t *sizes, int nsizes)
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
    cands[ncand++] = (cb_cand_t){.algo = ST_ALGO_SMALL};
    cands[ncand++] = (cb_cand_t){.algo = ST_ALGO_RING};
    for (int ch = 2; ch <= CB_MIN(f->nics, ST_TUNE_MAX_CHANNELS) && f->nnodes > 1; ch++) {
        cands[ncand++] = (cb_cand_t){.algo = ST_ALGO_RING, .channels = ch}; /* one per rail */
    }
    for (int prop = 0; prop <= (f->nics > 1 && f->nnodes > 1); prop++) {
        for (size_t chunk = (size_t)256 << 10; chunk <= ((size_t)4 << 20); chunk *= 2) {
            for (int depth = 2; depth <= 4; depth += 2) {
                cands[ncand++] = (cb_cand_t){.algo = ST_ALGO_HIER, .chunk = chunk,
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
        if (cands[c].algo == ST_ALGO_HIER && f->g == 1 && f->nnodes > 1) {
            continue; /* one rank per node: hier has no windows to run in */
        }
        comm = cb_fab_cand_comm(f, &cands[c]);
        for (int i = 0; i < nsizes; i++) {
            if (cands[c].algo == ST_ALGO_SMALL && sizes[i] > CB_SMALL_MAX) {
                continue; /* beyond the windows' small area */
            }
            if (cands[c].algo == ST_ALGO_HIER && cands[c].chunk > sizes[i] &&
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
                    (i == nsizes - 1 || cands[c].algo != ST_ALGO_HIER ||
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

                if (cands[c].algo == ST_ALGO_HIER && cands[c].t[i] > 0 &&
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
                if (cands[set[j]].algo == ST_ALGO_HIER &&
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
        st_tune_entry_t  e = {sizes[i], c->algo, c->algo == ST_ALGO_HIER ? c->chunk : 0,
                              c->algo == ST_ALGO_RING ? c->channels : 0};

        if (table.nentries > 0 && table.entries[table.nentries - 1].algo == e.algo &&
            table.entries[table.nentries - 1].hier_chunk == e.hier_chunk &&
            table.entries[table.nentries - 1].channels == e.channels) {
            table.entries[table.nentries - 1].max_bytes = e.max_bytes;
        } else {
            table.entries[table.nentries++] = e;
        }
    }
    table.entries[table.nentries - 1].max_bytes = ST_TUNE_NO_LIMIT;
    if (table.entries[table.nentries - 1].algo == ST_ALGO_SMALL &&
        table.nentries < ST_TUNE_MAX_ENTRIES) {
        /* small won the largest size: it holds up to its limit, and the sizes above (not timed)
         * take the fastest other configuration at the largest size, rather than a table that
         * gives small every size and so draws a WARN at each use */
        int other = -1;

        for (int c = 0; c < ncand; c++) {
            if (cands[c].algo != ST_ALGO_SMALL && cands[c].t[nsizes - 1] > 0 &&
                (cands[c].algo != ST_ALGO_HIER ||
                 (cands[c].prop == prop_win && cands[c].depth == depth_win)) &&
                (other < 0 || cands[c].t[nsizes - 1] < cands[other].t[nsizes - 1])) {
                other = c;
            }
        }
        table.entries[table.nentries - 1].max_bytes = CB_SMALL_MAX;
        table.entries[table.nentries++] = other < 0
            ? (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_RING, 0, 1}
            : (st_tune_entry_t){ST_TUNE_NO_LIMIT, cands[other].algo,
                                cands[other].algo == ST_ALGO_HIER ? cands[other].chunk : 0,
                                cands[other].algo == ST_ALGO_RING ? cands[other].channels : 0};
    }
    if (f->nics > 1 && f->nnodes > 1) {
        cb_fab_shares(f, prop_win, table.rail_share);
    }
    cb_fab_tune_colls(f, sizes, nsizes, &table);
    if (f->rank == 0) {
        if (st_tune_table_write(out, &table, "collbench tune") != ST_OK) {
            fprintf(stderr, "collbench: cannot write the tuning table %s\n", out);
            ret = 2;
        } else {
            printf("# tuning table written to %s (%d all-reduce entries; reduce_scatter %d, "
                   "all_gather %d, alltoall %d; pipeline depth %u, rail shares %s)\n",
                   out, table.nentries, table.colls[ST_MODEL_REDUCESCATTER].n,
                   table.colls[ST_MODEL_ALLGATHER].n, table.colls[ST_MODEL_ALLTOALL].n,
                   table.pipeline_depth, f->nics > 1 ?
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
