/*
 * calibrate.c - `collbench calibrate` (and what `collbench tune` runs first without --profile):
 * measuring the fabric for the cost model, and printing the profile (the measurement and the
 * forced configurations: fabric.c; the model and the files: src/tune/, docs/model.md).
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
 *           itself at 8 B .. 64 KiB (docs/model.md, Calibrate);
 *   codecs  every rank at once, as the compressed inter-node step runs them: st_codec_encode (with
 *           the error feedback's residual) and st_codec_decode of 1 Mi float32 (4 MiB) with each
 *           codec (topk at density 0.01, int8 and sign with blocks of 256), the least of 3 timed
 *           calls after a first that touches the buffers, per element, the slowest rank's
 *           (cb_fab_calibrate_codecs: about 0.1 s).
 */
#include "config.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "collbench.h"
#include "fabric.h"
#include "tune/tune.h"

#define CB_FAB_SMALL_CREDIT_MAX ((size_t)64 << 10) /* small's credit: 4, 16, 64 KiB */
#define CB_FAB_REST_MIN    ((size_t)16 << 10)  /* hier's rest: 16 KiB, 64 KiB, 256 KiB, 1 MiB */
#define CB_FAB_REST_MAX    ((size_t)1 << 20)
#define CB_FAB_INTRA_BYTES ((size_t)4 << 20)
#define CB_FAB_CREDIT_POINTS 5                 /* credit exchanges: 4 KiB .. 1 MiB, x4 */
#define CB_FAB_MAX_RANKS   4096
#define CB_FAB_CODEC_ELEMS ((size_t)1 << 20)   /* codecs: 4 MiB of float32 */
#define CB_FAB_CODEC_REPS  3

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
    cb_fab_force(f, f->g, N, ST_ALGO_HIER, CB_FAB_INTRA_BYTES, 1, 0, share, &t);
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

        st_model_allreduce(&nocredit, &split, ST_ALGO_HIER, (double)s, &p);
        fab->hier_rest.bytes[fab->hier_rest.n]     = (double)s;
        fab->hier_rest.seconds[fab->hier_rest.n++] = CB_MAX(p.total - ts, 0.0);
        pos += (size_t)snprintf(buf + pos, len - pos, "\"hier%zu_s\": %.9g, ", s, ts);
    }
    CB_FAB_CALL(f, strataCommDestroy(comm));
    return pos;
}

/* The codecs' encode and decode costs per element into fab->codec (the model's defaults where
 * memory runs out). Every rank measures at once, as every rank of a node encodes at once in the
 * compressed step, so cores shared by the ranks show; the slowest rank's counts. The input looks
 * like a gradient: magnitudes spread over decades, signs mixed, so topk's selection and int8's
 * scales work as they would. Writes its samples (JSON members, ns per element) to buf; returns
 * their length. */
static size_t cb_fab_calibrate_codecs(cb_fab_t *f, char *buf, size_t len)
{
    static const char *const specs[ST_MODEL_NCODECS] = {"none", "fp16", "bf16",
                                                        "int8", "topk:0.01", "sign"};
    st_model_fabric_t       *fab = &f->fabric;
    size_t                   n = CB_FAB_CODEC_ELEMS, pos = 0;
    double                   t[2 * ST_MODEL_NCODECS];
    float                   *src = malloc(n * sizeof(float)), *res = calloc(n, sizeof(float));
    float                   *dst = malloc(n * sizeof(float));
    uint32_t                 x = 12345;

    st_model_codec_defaults(fab->codec);
    for (int i = 0; i < 2 * ST_MODEL_NCODECS; i++) {
        t[i] = 0.0;
    }
    for (size_t i = 0; src != NULL && i < n; i++) {
        x      = x * 1664525u + 1013904223u;
        src[i] = (float)((int32_t)x) * 0x1p-31f * (float)(1u << (x >> 28)) * 1e-4f;
    }
    cb_fab_barrier(f);
    for (int c = 0; c < ST_MODEL_NCODECS && src != NULL && res != NULL && dst != NULL; c++) {
        strataCompressParams_t p;
        char                  *wire;
        float                 *scratch;

        st_codec_parse(specs[c], &p);
        wire    = malloc(st_codec_wire_bytes(&p, strataFloat32, n));
        scratch = malloc(st_codec_scratch(&p, n) * sizeof(float));
        for (int r = 0; wire != NULL && scratch != NULL && r <= CB_FAB_CODEC_REPS; r++) {
            double t0 = cb_now(), t1, t2;

            st_codec_encode(&p, strataFloat32, src, n, res, wire, scratch);
            t1 = cb_now();
            st_codec_decode(&p, strataFloat32, wire, n, dst);
            t2 = cb_now();
            if (r > 0) { /* the first touches the buffers */
                t[2 * c]     = (r == 1) ? t1 - t0 : CB_MIN(t[2 * c], t1 - t0);
                t[2 * c + 1] = (r == 1) ? t2 - t1 : CB_MIN(t[2 * c + 1], t2 - t1);
            }
        }
        free(wire);
        free(scratch);
    }
    free(src);
    free(res);
    free(dst);
    cb_fab_max(f, t, 2 * ST_MODEL_NCODECS);
    for (int c = 0; c < ST_MODEL_NCODECS; c++) {
        if (t[2 * c] > 0 && t[2 * c + 1] > 0) {
            fab->codec[c].encode = t[2 * c] / (double)n;
            fab->codec[c].decode = t[2 * c + 1] / (double)n;
        }
        pos += (size_t)snprintf(buf + pos, len - pos, "\"%s_encode_ns\": %.4g, \"%s_decode_ns\": "
                                "%.4g, ", st_codec_name((strataCodec_t)c),
                                fab->codec[c].encode * 1e9, st_codec_name((strataCodec_t)c),
                                fab->codec[c].decode * 1e9);
    }
    return pos;
}

void cb_fab_calibrate(cb_fab_t *f, char *samples, size_t len)
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
        cb_fab_force(f, g, 1, ST_ALGO_HIER, CB_FAB_INTRA_BYTES, 1, 0, NULL, &t);
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

            cb_fab_force(f, g, N, ST_ALGO_SMALL, 0, 1, 0, NULL, &t);
            comm = cb_fab_split(f, 0, &t);
            tsm  = cb_fab_time(f, comm, 8, NULL);
            fab->exchange_alpha = CB_MAX(tsm - 2 * fab->intra.alpha, 0.25 * tsm);
            pos += (size_t)snprintf(samples + pos, len - pos, "\"small8_s\": %.9g, ", tsm);
            memset(&split, 0, sizeof(split));
            split.small_max = CB_FAB_SMALL_CREDIT_MAX;
            nocredit        = cb_fab_nocredit(fab);
            st_model_allreduce(&nocredit, &split, ST_ALGO_SMALL, 8.0, &p8);
            for (size_t s = CB_FAB_SMALL_CREDIT_MAX >> 4; s <= CB_FAB_SMALL_CREDIT_MAX; s *= 4) {
                st_model_credit_t *c = &fab->small_credit;
                double             d = (double)(N - 1) * (double)s;

                ts = cb_fab_time(f, comm, s, NULL);
                st_model_allreduce(&nocredit, &split, ST_ALGO_SMALL, (double)s, &pS);
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
    pos += cb_fab_calibrate_codecs(f, samples + pos, len - pos);
    snprintf(samples + pos, len - pos, "\"method\": \"collbench calibrate (src/tools/collbench/"
             "calibrate.c)\"}");
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

void cb_fab_print_profile(const cb_fab_t *f)
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
    printf("# codecs, ns per float32 element encoded/decoded:");
    for (int c = 0; c < ST_MODEL_NCODECS; c++) {
        printf(" %s %.2f/%.2f", st_codec_name((strataCodec_t)c), fab->codec[c].encode * 1e9,
               fab->codec[c].decode * 1e9);
    }
    printf("\n");
}
