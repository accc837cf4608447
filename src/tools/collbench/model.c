/*
 * model.c - `collbench model`: the step-time tables of the cost model (src/tune/model.h).
 *
 * Two sets of tables for one set of parameters (by default those of the seed preset: 8 nodes x 8
 * GPUs, 7e9 fp32 parameters, 600 / 25 GB/s, forward 2 s, backward 4 s, 20 buckets):
 *   - with --preset seed, first the tables of the communication texts strata grew from, computed
 *     with their simplifications so that every figure they quote comes out to the printed digit
 *     (tests/unit/test_model.c asserts them);
 *   - then, always, the faithful model: strata's model of its own algorithms, alpha terms,
 *     channels, rails and pipelining included, each row saying what it corrects.
 * With --compress SPEC, the compressed all-reduce (strataAllReduceCompressed) of the gradient and
 * of its buckets next to the uncompressed one, the step times, and where compression stops paying
 * (st_model_compress_breakeven); with --preset seed also a row per codec under the faithful model.
 * Nothing runs on a network: no rank is started and no strata call is made. The model's code is
 * compiled into collbench as well as into the library (it is pure functions, and collbench uses
 * only the public API of libstrata.so, where the model's symbols are hidden).
 * cb_model_run takes its output streams as arguments so that the test can read what it prints.
 */
#include "config.h"

#include <ctype.h>
#include <errno.h>
#include <getopt.h>
#include <math.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "codec/codec.h"
#include "collbench.h"
#include "tune/model.h"
#include "tune/tune.h"

#define CB_MODEL_GB  1e9 /* GB and GB/s are decimal, as the texts and busbw use them */
#define CB_MODEL_MIN_CHUNK (64ULL << 10)
#define CB_MODEL_MAX_CHUNK (1ULL << 30)

/* The shapes the faithful PowerSGD row uses: a 7B decoder-only transformer with LLaMA-7B's
 * published dimensions (Touvron et al. 2023: 32 layers, hidden 4096, SwiGLU FFN 11008, vocabulary
 * 32000, RMSNorm, untied embedding and output). 6.74e9 parameters in all. */
static const st_model_matrix_t cb_model_7b[] = {
    {"attention q, k, v, o (4096 x 4096)", 4096, 4096, 4 * 32},
    {"FFN gate, up (4096 x 11008)", 4096, 11008, 2 * 32},
    {"FFN down (11008 x 4096)", 11008, 4096, 32},
    {"RMSNorm weights (4096)", 4096, 1, 2 * 32 + 1},
    {"embedding (32000 x 4096)", 32000, 4096, 1},
    {"output (4096 x 32000)", 4096, 32000, 1},
};

enum { CB_MODEL_ONLY_BOTH = 0, CB_MODEL_ONLY_TEXTS, CB_MODEL_ONLY_FAITHFUL };

typedef struct cb_model_opts {
    st_model_seed_in_t     seed;         /* the parameters common to both models */
    int                    preset_seed;  /* --preset seed: print the texts' tables too */
    int                    only;         /* CB_MODEL_ONLY_* */
    int                    nrails;       /* 0: one per rank of a node */
    double                 rail_beta[ST_MODEL_MAX_RAILS]; /* bytes/s, 0: inter_beta */
    double                 alpha_intra;  /* seconds */
    double                 alpha_inter;  /* seconds */
    double                 gamma;        /* bytes/s, 0: not counted */
    size_t                 chunk;        /* 0: the best power of two */
    int                    psgd_rank;
    double                 index_bytes;  /* top-k index size */
    size_t                 bucket_bytes; /* --bucket-bytes: DDP's cap; 0: seed.buckets alike */
    int                    compress;     /* --compress given */
    strataCompressParams_t codec;        /* its codec */
    const char            *costs_from;   /* --codec-costs F, or NULL: the defaults */
    st_model_codec_cost_t  costs[ST_MODEL_NCODECS];
} cb_model_opts_t;

enum {
    CB_MOPT_PRESET = 256,
    CB_MOPT_ONLY,
    CB_MOPT_RPN,
    CB_MOPT_NODES,
    CB_MOPT_PARAMS,
    CB_MOPT_DTYPE_BYTES,
    CB_MOPT_INTRA_BW,
    CB_MOPT_INTER_BW,
    CB_MOPT_RAILS,
    CB_MOPT_RAIL_BW,
    CB_MOPT_ALPHA_INTRA,
    CB_MOPT_ALPHA_INTER,
    CB_MOPT_GAMMA,
    CB_MOPT_FORWARD,
    CB_MOPT_BACKWARD,
    CB_MOPT_BUCKETS,
    CB_MOPT_OVERHEADS,
    CB_MOPT_CHUNK,
    CB_MOPT_PSGD_RANK,
    CB_MOPT_INDEX_BYTES,
    CB_MOPT_INTER_GBPS,
    CB_MOPT_BUCKET_BYTES,
    CB_MOPT_COMPRESS,
    CB_MOPT_CODEC_COSTS
};

static const struct option cb_model_long_opts[] = {
    {"preset",           required_argument, NULL, CB_MOPT_PRESET},
    {"only",             required_argument, NULL, CB_MOPT_ONLY},
    {"ranks-per-node",   required_argument, NULL, CB_MOPT_RPN},
    {"nodes",            required_argument, NULL, CB_MOPT_NODES},
    {"params",           required_argument, NULL, CB_MOPT_PARAMS},
    {"dtype-bytes",      required_argument, NULL, CB_MOPT_DTYPE_BYTES},
    {"intra-bw",         required_argument, NULL, CB_MOPT_INTRA_BW},
    {"inter-bw",         required_argument, NULL, CB_MOPT_INTER_BW},
    {"rails",            required_argument, NULL, CB_MOPT_RAILS},
    {"rail-bw",          required_argument, NULL, CB_MOPT_RAIL_BW},
    {"alpha-intra",      required_argument, NULL, CB_MOPT_ALPHA_INTRA},
    {"alpha-inter",      required_argument, NULL, CB_MOPT_ALPHA_INTER},
    {"gamma",            required_argument, NULL, CB_MOPT_GAMMA},
    {"forward",          required_argument, NULL, CB_MOPT_FORWARD},
    {"backward",         required_argument, NULL, CB_MOPT_BACKWARD},
    {"buckets",          required_argument, NULL, CB_MOPT_BUCKETS},
    {"overheads",        required_argument, NULL, CB_MOPT_OVERHEADS},
    {"chunk",            required_argument, NULL, CB_MOPT_CHUNK},
    {"powersgd-rank",    required_argument, NULL, CB_MOPT_PSGD_RANK},
    {"topk-index-bytes", required_argument, NULL, CB_MOPT_INDEX_BYTES},
    {"inter-gbps",       required_argument, NULL, CB_MOPT_INTER_GBPS},
    {"bucket-bytes",     required_argument, NULL, CB_MOPT_BUCKET_BYTES},
    {"compress",         required_argument, NULL, CB_MOPT_COMPRESS},
    {"codec-costs",      required_argument, NULL, CB_MOPT_CODEC_COSTS},
    {"help",             no_argument,       NULL, 'h'},
    {NULL,               0,                 NULL, 0}
};

static void cb_model_usage(FILE *out, const char *prog)
{
    fprintf(out,
"Usage: %s model [--preset seed] [--only texts|faithful] [parameters]\n"
"  Step-time tables of data-parallel training from the cost model (src/tune, docs/model.md).\n"
"  No rank is started. Defaults are the seed preset's parameters.\n"
"  --preset seed            first the tables of the texts on data-parallel communication that\n"
"                           strata grew from (docs/model.md), with their simplifications (their\n"
"                           figures to the printed digit), then\n"
"                           the faithful model, which says what it corrects\n"
"  --only texts|faithful    print one of the two\n"
"  --ranks-per-node <g>     GPUs per node (8)          --nodes <N>        nodes (8)\n"
"  --params <P>             parameters (7e9)           --dtype-bytes <B>  bytes each (4)\n"
"  --intra-bw <GB/s>        intra-node beta (600)      --inter-bw <GB/s>  per rail (25)\n"
"  --rails <R>              NICs per node (g)          --rail-bw <a,b..>  each rail's GB/s\n"
"  --alpha-intra <us>       window sync latency (1)    --alpha-inter <us> network latency (5)\n"
"  --gamma <GB/s>           reduction throughput (0: not counted)\n"
"  --forward <ms> (2000)    --backward <ms> (4000)     --buckets <b> (20)\n"
"  --overheads <ms,...>     top-1%%, top-0.1%%, 8-bit, 1-bit, PowerSGD (20,25,10,15,30)\n"
"  --chunk <size>           hier pipeline chunk (default: the best power of two, 64k..1G)\n"
"  --powersgd-rank <r> (4)  --topk-index-bytes <B> (4)\n"
"  --inter-gbps <Gbit/s>    per rail, as the emulated links' rates (instead of --inter-bw)\n"
"  --bucket-bytes <size>    buckets of at most this size, as DDP's bucket_cap (instead of\n"
"                           --buckets: ceil(gradient / size) buckets, the last the remainder)\n"
"  --compress <spec>        none|fp16|bf16|int8[:block]|topk:<density>|sign[:block]: the\n"
"                           compressed all-reduce (hierarchical, inter-node step encoded) of the\n"
"                           gradient and of its buckets next to the uncompressed one, the step,\n"
"                           and where compression stops paying (link speed, bucket size);\n"
"                           with --preset seed also one row per codec under the faithful model\n"
"  --codec-costs F          encode/decode costs from fabric profile F (collbench calibrate);\n"
"                           default: this machine's (docs/model.md, \"Compression\")\n"
"  e.g. examples/ddp_table.sh's 2 x 2 emulated run at 100 Mbit/s (MLP 64-256-256-10, buckets\n"
"  <= 0.1 MB; forward and backward from its timing lines):\n"
"    model --nodes 2 --ranks-per-node 2 --rails 1 --inter-gbps 0.1 --params 85002\n"
"          --bucket-bytes 104857 --forward 1 --backward 2 --compress int8\n"
"  --profile F is for --compare only: the tables here take the fabric from the parameters.\n"
"Usage: %s model --profile F --compare [launch options] [-b -e -f -n]\n"
"  Starts ranks (as the benchmark does) and prints, per size, the all-reduce the model of the\n"
"  fabric profile F (from collbench calibrate) chooses, measured next to predicted, with the\n"
"  error in percent and the hier phases (see collbench --help, \"Fabric\").\n", prog, prog);
}

static int cb_model_bad(FILE *err, const char *prog, const char *what, const char *arg)
{
    fprintf(err, "%s: model: invalid %s '%s' (see model --help)\n", prog, what, arg);
    return -1;
}

/* A finite double in [min, max]. */
static int cb_model_double(const char *arg, double min, double max, double *value_p)
{
    char  *end;
    double v;

    errno = 0;
    v     = strtod(arg, &end);
    if (end == arg || *end != '\0' || errno != 0 || !(v >= min && v <= max)) {
        return -1;
    }
    *value_p = v;
    return 0;
}

/* A comma list of at most max doubles in [min, inf) times scale; returns the count or -1. */
static int cb_model_list(const char *arg, double min, double scale, double *values, int max)
{
    char buf[512], *tok, *save = NULL;
    int  n = 0;

    if (snprintf(buf, sizeof(buf), "%s", arg) >= (int)sizeof(buf)) {
        return -1;
    }
    for (tok = strtok_r(buf, ",", &save); tok != NULL; tok = strtok_r(NULL, ",", &save)) {
        if (n == max || cb_model_double(tok, min, 1e300, &values[n]) != 0) {
            return -1;
        }
        values[n++] *= scale;
    }
    return n;
}

/* Returns 0 to print, 1 when done (help), -1 on error (one line on err). */
static int cb_model_parse(int argc, char **argv, FILE *out, FILE *err, const char *prog,
                          cb_model_opts_t *o)
{
    double v, list[ST_MODEL_MAX_RAILS];
    int    c, n, i, rails_given = 0, nrail_bw = 0;

    memset(o, 0, sizeof(*o));
    st_model_seed_preset(&o->seed);
    o->alpha_intra = 1e-6;
    o->alpha_inter = 5e-6;
    o->psgd_rank   = 4;
    o->index_bytes = 4;
    o->only        = CB_MODEL_ONLY_FAITHFUL;
    st_model_codec_defaults(o->costs);

    optind = 0; /* glibc: start afresh (the test calls this more than once) */
    opterr = 0;
    while ((c = getopt_long(argc, argv, "h", cb_model_long_opts, NULL)) != -1) {
        switch (c) {
        case CB_MOPT_PRESET:
            if (strcmp(optarg, "seed") != 0) {
                return cb_model_bad(err, prog, "preset (seed)", optarg);
            }
            o->preset_seed = 1;
            if (o->only == CB_MODEL_ONLY_FAITHFUL) {
                o->only = CB_MODEL_ONLY_BOTH;
            }
            break;
        case CB_MOPT_ONLY:
            if (strcmp(optarg, "texts") == 0) {
                o->only = CB_MODEL_ONLY_TEXTS;
            } else if (strcmp(optarg, "faithful") == 0) {
                o->only = CB_MODEL_ONLY_FAITHFUL;
            } else {
                return cb_model_bad(err, prog, "--only (texts or faithful)", optarg);
            }
            break;
        case CB_MOPT_RPN:
        case CB_MOPT_NODES:
        case CB_MOPT_RAILS:
        case CB_MOPT_BUCKETS:
        case CB_MOPT_PSGD_RANK:
            if (cb_model_double(optarg, 1, c == CB_MOPT_RAILS ? ST_MODEL_MAX_RAILS : 1 << 20,
                                &v) != 0 || v != floor(v)) {
                return cb_model_bad(err, prog, "count", optarg);
            }
            if (c == CB_MOPT_RPN) {
                o->seed.ranks_per_node = (int)v;
            } else if (c == CB_MOPT_NODES) {
                o->seed.nodes = (int)v;
            } else if (c == CB_MOPT_RAILS) {
                o->nrails   = (int)v;
                rails_given = 1;
            } else if (c == CB_MOPT_BUCKETS) {
                o->seed.buckets = (int)v;
            } else {
                o->psgd_rank = (int)v;
            }
            break;
        case CB_MOPT_PARAMS:
            if (cb_model_double(optarg, 1, 1e15, &o->seed.params) != 0) {
                return cb_model_bad(err, prog, "--params", optarg);
            }
            break;
        case CB_MOPT_DTYPE_BYTES:
            if (cb_model_double(optarg, 0.125, 64, &o->seed.dtype_bytes) != 0) {
                return cb_model_bad(err, prog, "--dtype-bytes", optarg);
            }
            break;
        case CB_MOPT_INTRA_BW:
        case CB_MOPT_INTER_BW:
        case CB_MOPT_GAMMA:
            if (cb_model_double(optarg, c == CB_MOPT_GAMMA ? 0 : 1e-9, 1e9, &v) != 0) {
                return cb_model_bad(err, prog, "bandwidth (GB/s)", optarg);
            }
            if (c == CB_MOPT_INTRA_BW) {
                o->seed.intra_beta = v * CB_MODEL_GB;
            } else if (c == CB_MOPT_INTER_BW) {
                o->seed.inter_beta = v * CB_MODEL_GB;
            } else {
                o->gamma = v * CB_MODEL_GB;
            }
            break;
        case CB_MOPT_RAIL_BW:
            nrail_bw = cb_model_list(optarg, 1e-9, CB_MODEL_GB, list, ST_MODEL_MAX_RAILS);
            if (nrail_bw <= 0) {
                return cb_model_bad(err, prog, "--rail-bw (GB/s per rail, commas)", optarg);
            }
            memset(o->rail_beta, 0, sizeof(o->rail_beta));
            memcpy(o->rail_beta, list, (size_t)nrail_bw * sizeof(double));
            break;
        case CB_MOPT_ALPHA_INTRA:
        case CB_MOPT_ALPHA_INTER:
            if (cb_model_double(optarg, 0, 1e9, &v) != 0) {
                return cb_model_bad(err, prog, "latency (us)", optarg);
            }
            *(c == CB_MOPT_ALPHA_INTRA ? &o->alpha_intra : &o->alpha_inter) = v * 1e-6;
            break;
        case CB_MOPT_FORWARD:
        case CB_MOPT_BACKWARD:
            if (cb_model_double(optarg, 0, 1e12, &v) != 0) {
                return cb_model_bad(err, prog, "time (ms)", optarg);
            }
            *(c == CB_MOPT_FORWARD ? &o->seed.forward : &o->seed.backward) = v / 1000;
            break;
        case CB_MOPT_OVERHEADS:
            n = cb_model_list(optarg, 0, 1, list, ST_MODEL_SEED_NCOMP - 1);
            if (n != ST_MODEL_SEED_NCOMP - 1) {
                return cb_model_bad(err, prog, "--overheads (5 times in ms)", optarg);
            }
            for (i = 0; i < n; i++) {
                o->seed.comp_overhead[i + 1] = list[i] / 1000;
            }
            break;
        case CB_MOPT_CHUNK:
            if (cb_parse_size(optarg, &o->chunk) != 0 || o->chunk == 0 ||
                o->chunk > ((size_t)1 << 40)) {
                return cb_model_bad(err, prog, "--chunk", optarg);
            }
            break;
        case CB_MOPT_INTER_GBPS:
            if (cb_model_double(optarg, 1e-9, 1e9, &v) != 0) {
                return cb_model_bad(err, prog, "--inter-gbps (Gbit/s)", optarg);
            }
            o->seed.inter_beta = v * CB_MODEL_GB / 8;
            break;
        case CB_MOPT_BUCKET_BYTES:
            if (cb_parse_size(optarg, &o->bucket_bytes) != 0 || o->bucket_bytes == 0) {
                return cb_model_bad(err, prog, "--bucket-bytes", optarg);
            }
            break;
        case CB_MOPT_COMPRESS: {
            const char *why = st_codec_parse(optarg, &o->codec);

            if (why != NULL) {
                fprintf(err, "%s: model: invalid --compress '%s': %s\n", prog, optarg, why);
                return -1;
            }
            o->compress = 1;
            break;
        }
        case CB_MOPT_CODEC_COSTS: {
            st_model_fabric_t f;
            char              why[512];

            if (st_profile_read(optarg, &f, why, sizeof(why)) != ST_OK) {
                fprintf(err, "%s: model: --codec-costs: %s\n", prog, why);
                return -1;
            }
            memcpy(o->costs, f.codec, sizeof(o->costs));
            o->costs_from = optarg;
            break;
        }
        case CB_MOPT_INDEX_BYTES:
            if (cb_model_double(optarg, 0, 64, &o->index_bytes) != 0) {
                return cb_model_bad(err, prog, "--topk-index-bytes", optarg);
            }
            break;
        case 'h':
            cb_model_usage(out, prog);
            return 1;
        default:
            if (strcmp(argv[optind - 1], "--profile") == 0 ||
                strncmp(argv[optind - 1], "--profile=", 10) == 0) {
                /* the tables take the fabric from the parameters; a profile drives --compare */
                fprintf(err, "%s: model: --profile needs --compare (it compares a calibrated "
                        "profile's choices with measured runs; the tables take the fabric from "
                        "--intra-bw, --inter-bw, --alpha-intra, --alpha-inter; --codec-costs F "
                        "takes a profile's codec costs)\n", prog);
                return -1;
            }
            return cb_model_bad(err, prog, "option", argv[optind - 1]);
        }
    }
    if (optind < argc) {
        return cb_model_bad(err, prog, "argument", argv[optind]);
    }
    if (o->only == CB_MODEL_ONLY_TEXTS && !o->preset_seed) {
        o->preset_seed = 1;
    }
    if (o->compress && o->seed.dtype_bytes != 4 && o->seed.dtype_bytes != 2) {
        fprintf(err, "%s: model: --compress takes 4-byte (float32) or 2-byte (bfloat16) "
                "elements, not --dtype-bytes %g\n", prog, o->seed.dtype_bytes);
        return -1;
    }
    if (!rails_given) {
        o->nrails = (nrail_bw > 0) ? nrail_bw
                  : (o->seed.ranks_per_node < ST_MODEL_MAX_RAILS ? o->seed.ranks_per_node
                                                                 : ST_MODEL_MAX_RAILS);
    } else if (nrail_bw > 0 && nrail_bw != o->nrails) {
        fprintf(err, "%s: model: --rails %d but --rail-bw gives %d rails\n", prog, o->nrails,
                nrail_bw);
        return -1;
    }
    return 0;
}

/* ---- the texts' tables ----------------------------------------------------------------------- */

static const char *const cb_model_comp_names[ST_MODEL_SEED_NCOMP] = {
    "none", "top-1%", "top-0.1%", "8-bit", "1-bit", "PowerSGD rank"};

/* The row label of compression i: the name, and PowerSGD's rank. */
static void cb_model_comp_label(const cb_model_opts_t *o, int i, char *label, size_t len)
{
    if (i == ST_MODEL_SEED_NCOMP - 1) {
        snprintf(label, len, "%s %d", cb_model_comp_names[i], o->psgd_rank);
    } else {
        snprintf(label, len, "%s", cb_model_comp_names[i]);
    }
}

static void cb_model_print_texts(FILE *out, const cb_model_opts_t *o)
{
    const st_model_seed_in_t *in = &o->seed;
    st_model_seed_out_t       r;
    char                      label[64];
    int                       n = in->ranks_per_node * in->nodes, i;

    st_model_seed_compute(in, &r);
    fprintf(out, "# The communication texts' model (--preset seed), their simplifications kept\n");
    fprintf(out, "# %d GPUs as %d node%s x %d, %.3g parameters x %g B, intra-node %g GB/s, "
            "inter-node %g GB/s,\n# forward %.0f ms, backward %.0f ms, %d buckets\n", n,
            in->nodes, in->nodes == 1 ? "" : "s", in->ranks_per_node, in->params, in->dtype_bytes,
            in->intra_beta / CB_MODEL_GB, in->inter_beta / CB_MODEL_GB, in->forward * 1e3,
            in->backward * 1e3, in->buckets);
    fprintf(out, "gradient                                %.1f GB\n", r.gradient / CB_MODEL_GB);
    fprintf(out, "ring data per GPU, 2(n-1)/n x gradient  %.1f GB\n", r.ring_bytes / CB_MODEL_GB);
    fprintf(out, "flat ring all-reduce, data / inter bw   %.0f ms\n", r.ring_time * 1e3);
    fprintf(out, "step = forward + backward + comm        %.0f ms\n", r.step * 1e3);
    fprintf(out, "communication                           %.1f %%\n", r.comm_share * 100);

    fprintf(out, "\n%-32s %8s %8s %8s %8s\n", "compression", "GB", "comm s", "step s",
            "speedup");
    for (i = 0; i < ST_MODEL_SEED_NCOMP; i++) {
        cb_model_comp_label(o, i, label, sizeof(label));
        if (i == ST_MODEL_SEED_NCOMP - 1) {
            strcat(label, " (texts' formula)");
        }
        fprintf(out, "%-32s %8.2f %8.2f %8.2f %7.2fx\n", label, r.comp[i].bytes / CB_MODEL_GB,
                r.comp[i].comm, r.comp[i].step, r.comp[i].speedup);
    }

    fprintf(out, "\n%-32s %8s %8s %8s\n", "overlap", "exposed s", "step s", "speedup");
    for (i = 0; i < ST_MODEL_SEED_NOVERLAP; i++) {
        if (i == 0) {
            snprintf(label, sizeof(label), "none");
        } else if (i == 1) {
            snprintf(label, sizeof(label), "%.0f%%", r.overlap[i] * 100);
        } else {
            snprintf(label, sizeof(label), "full bucketing (%.0f%%)", r.overlap[i] * 100);
        }
        fprintf(out, "%-32s %8.2f %8.2f %7.2fx\n", label, r.over[i].comm, r.over[i].step,
                r.over[i].speedup);
    }

    fprintf(out, "\nhierarchical phases (intra reduce-scatter + inter all-reduce + intra "
            "all-gather):\n    %.1f ms + %.1f ms + %.1f ms = %.1f ms, %.1fx over the flat ring\n",
            r.hier_phase[0] * 1e3, r.hier_phase[1] * 1e3, r.hier_phase[2] * 1e3,
            r.hier_time * 1e3, r.hier_speedup);

    fprintf(out, "\n%-44s %8s %8s\n", "combined scenarios", "step s", "speedup");
    fprintf(out, "%-44s %8.2f %7.2fx\n", "flat ring", r.combined[0].step, r.combined[0].speedup);
    fprintf(out, "%-44s %8.2f %7.2fx\n", "hierarchical", r.combined[1].step,
            r.combined[1].speedup);
    fprintf(out, "%-44s %8.2f %7.2fx\n", "hierarchical + top-1%", r.combined[2].step,
            r.combined[2].speedup);
    snprintf(label, sizeof(label), "hierarchical + top-1%% + full bucketing (%.0f%%)",
             r.overlap[2] * 100);
    fprintf(out, "%-44s %8.2f %7.2fx\n", label, r.combined[3].step, r.combined[3].speedup);
    fprintf(out, "communication overhead (step - compute) %.0f ms -> %.1f ms: reduced %.0fx\n",
            r.ring_time * 1e3, r.comm_overhead_final * 1e3, r.comm_reduction);
}

/* ---- the faithful model ---------------------------------------------------------------------- */

static void cb_model_fabric(const cb_model_opts_t *o, st_model_fabric_t *f, st_model_split_t *s)
{
    memset(f, 0, sizeof(*f));
    memset(s, 0, sizeof(*s));
    f->ranks_per_node = o->seed.ranks_per_node;
    f->nodes          = o->seed.nodes;
    f->nrails         = o->nrails;
    f->intra.alpha    = o->alpha_intra;
    f->intra.beta     = o->seed.intra_beta;
    f->intra.gamma    = o->gamma;
    f->inter.alpha    = o->alpha_inter;
    f->inter.beta     = o->seed.inter_beta;
    f->inter.gamma    = o->gamma;
    memcpy(f->rail_beta, o->rail_beta, sizeof(f->rail_beta));
    memcpy(f->codec, o->costs, sizeof(f->codec));
    s->channels  = 1;
    s->small_max = 128 << 10; /* the windows' small area (coll/intra.h ST_INTRA_SMALL_MAX) */
}

/* Best time of a dense all-reduce of `bytes`: hier at its best chunk (or --chunk), ring over as
 * many channels as rails, small where it applies. */
static st_algo_t cb_model_best(const cb_model_opts_t *o, const st_model_fabric_t *f,
                               const st_model_split_t *s0, double bytes, st_model_time_t *t_p,
                               size_t *chunk_p)
{
    st_model_split_t s = *s0;
    st_model_time_t  t;
    st_algo_t        algo = ST_ALGO_HIER;

    *chunk_p = o->chunk;
    if (o->chunk == 0) {
        st_model_best_chunk(f, &s, bytes, CB_MODEL_MIN_CHUNK, CB_MODEL_MAX_CHUNK, chunk_p, t_p);
    } else {
        s.chunk = o->chunk;
        st_model_allreduce(f, &s, ST_ALGO_HIER, bytes, t_p);
    }
    s.channels = f->nrails;
    if (st_model_allreduce(f, &s, ST_ALGO_RING, bytes, &t) == ST_OK && t.total < t_p->total) {
        *t_p = t;
        algo = ST_ALGO_RING;
    }
    if (st_model_allreduce(f, &s, ST_ALGO_SMALL, bytes, &t) == ST_OK && t.total < t_p->total) {
        *t_p = t;
        algo = ST_ALGO_SMALL;
    }
    return algo;
}

/* Time of the gradient all-reduced in `buckets` buckets one after another (no overlap). */
static double cb_model_bucketed(const cb_model_opts_t *o, const st_model_fabric_t *f,
                                const st_model_split_t *s, double bytes, int buckets,
                                st_algo_t *algo_p)
{
    st_model_time_t t;
    size_t          chunk;

    *algo_p = cb_model_best(o, f, s, bytes / buckets, &t, &chunk);
    return buckets * t.total;
}

/* "64 KiB", "4 MiB", "1 GiB" */
static const char *cb_model_size_str(size_t bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB"};
    int                      u       = 0;

    while (u < 3 && bytes >= 1024 && bytes % 1024 == 0) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, "%zu %s", bytes, units[u]);
    return buf;
}

/* What a faithful row corrects, under it. */
static void cb_model_note(FILE *out, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));
static void cb_model_note(FILE *out, const char *fmt, ...)
{
    va_list ap;

    fprintf(out, "    corrects: ");
    va_start(ap, fmt);
    vfprintf(out, fmt, ap);
    va_end(ap);
    fprintf(out, "\n");
}

/* ---- compression (docs/model.md, "Compression") ------------------------------------------- */

/* The codecs of the per-codec rows, topk at the texts' 1 %. */
static const char *const cb_model_codec_specs[ST_MODEL_NCODECS] = {"none", "fp16", "bf16",
                                                                  "int8", "topk:0.01", "sign"};

/* What the codecs see: float32 for 4-byte elements, bfloat16 for 2-byte ones. */
static strataDataType_t cb_model_dtype(const cb_model_opts_t *o)
{
    return o->seed.dtype_bytes == 2 ? strataBfloat16 : strataFloat32;
}

/* The compressed all-reduce of `bytes` at its best chunk (powers of two as cb_model_best's hier),
 * or at --chunk. */
static void cb_model_compressed(const cb_model_opts_t *o, const st_model_fabric_t *f,
                                const st_model_split_t *s0, const strataCompressParams_t *p,
                                double bytes, st_model_time_t *t_p, size_t *chunk_p)
{
    st_model_split_t s = *s0;
    st_model_codec_t c;
    st_model_time_t  t;
    size_t           lo = o->chunk ? o->chunk : CB_MODEL_MIN_CHUNK;
    size_t           hi = o->chunk ? o->chunk : CB_MODEL_MAX_CHUNK;

    *chunk_p = 0;
    for (size_t chunk = lo; chunk <= hi; chunk *= 2) {
        s.chunk = chunk;
        if (st_model_codec_for(f, &s, p, cb_model_dtype(o), bytes, &c) == ST_OK &&
            st_model_allreduce_compressed(f, &s, &c, bytes, &t) == ST_OK &&
            (*chunk_p == 0 || t.total < t_p->total)) {
            *t_p     = t;
            *chunk_p = chunk;
        }
        if ((double)chunk >= bytes) {
            break;
        }
    }
}

/* The gradient's buckets: kinds of (size, how many); --bucket-bytes cuts it as DDP's cap does
 * (full buckets, the last the remainder), else seed.buckets equal ones. Returns the kinds. */
typedef struct cb_model_bucket {
    double bytes;
    int    count;
} cb_model_bucket_t;

static int cb_model_buckets(const cb_model_opts_t *o, double S, cb_model_bucket_t b[2])
{
    double cap = (double)o->bucket_bytes, full;

    if (o->bucket_bytes == 0 || cap >= S) {
        b[0].count = o->bucket_bytes == 0 ? o->seed.buckets : 1;
        b[0].bytes = S / b[0].count;
        return 1;
    }
    full       = floor(S / cap);
    b[0].bytes = cap;
    b[0].count = (int)full;
    b[1].bytes = S - full * cap;
    b[1].count = 1;
    return b[1].bytes > 0 ? 2 : 1;
}

/* "12.3 KiB", "4.5 MiB": bytes in the largest binary unit that leaves at least 1 */
static const char *cb_model_bytes_str(double bytes, char *buf, size_t len)
{
    static const char *const units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
    int                      u       = 0;

    while (u < 4 && bytes >= 1024) {
        bytes /= 1024;
        u++;
    }
    snprintf(buf, len, "%.3g %s", bytes, units[u]);
    return buf;
}

/* The two halves of the break-even line: "above 8.02 Gbit/s per node link", "below 12.3 KiB
 * buckets", or what holds instead when the compressed all-reduce wins or loses throughout. */
static void cb_model_breakeven_strs(const st_model_breakeven_t *be, char *link, size_t llen,
                                    char *size, size_t slen)
{
    char b[32];

    if (be->beta_max == 0) {
        snprintf(link, llen, "on every link (it pays on none from 8 kbit/s)");
    } else if (isinf(be->beta_max)) {
        snprintf(link, llen, "on no link up to 80000 Gbit/s");
    } else {
        snprintf(link, llen, "above %.3g Gbit/s per node link", be->beta_max * 8 / CB_MODEL_GB);
    }
    if (be->bytes_min == 0) {
        snprintf(size, slen, "at no bucket size (it pays from 1 B)");
    } else if (isinf(be->bytes_min)) {
        snprintf(size, slen, "at every bucket size on these links");
    } else {
        snprintf(size, slen, "below %s buckets", cb_model_bytes_str(be->bytes_min, b, sizeof(b)));
    }
}

/* The codec in words: "int8 (block 256, error feedback)". */
static void cb_model_codec_words(const strataCompressParams_t *p, char *buf, size_t len)
{
    if (p->codec == strataCodecInt8 || p->codec == strataCodecSign) {
        snprintf(buf, len, "%s (block %zu, %s)", st_codec_name(p->codec), p->block,
                 p->errorFeedback ? "error feedback" : "no error feedback");
    } else if (p->codec == strataCodecTopk) {
        snprintf(buf, len, "%s (density %g, %s)", st_codec_name(p->codec), p->density,
                 p->errorFeedback ? "error feedback" : "no error feedback");
    } else {
        snprintf(buf, len, "%s (%s)", st_codec_name(p->codec),
                 p->errorFeedback ? "error feedback" : "no error feedback");
    }
}

/* --compress: the compressed all-reduce of the gradient and of its buckets next to the
 * uncompressed one (the fastest the model knows), the step both ways, and the break-even. */
static void cb_model_print_compress(FILE *out, const cb_model_opts_t *o)
{
    const st_model_seed_in_t *in = &o->seed;
    const strataCompressParams_t *p = &o->codec;
    st_model_fabric_t  f;
    st_model_split_t   s, sb;
    st_model_time_t    tu, tc;
    st_model_codec_t   c;
    st_model_breakeven_t be;
    cb_model_bucket_t  b[2];
    size_t             chunk;
    st_algo_t          algo;
    double S = in->params * in->dtype_bytes, compute = in->forward + in->backward;
    double comm_u = 0, comm_c = 0, exp_u, exp_c;
    int    nk, nb = 0, R = o->nrails, g = in->ranks_per_node, N = in->nodes;
    char   words[64], label[64], bs[32], link[64], size[64];

    cb_model_fabric(o, &f, &s);
    if (st_model_fabric_check(&f) != ST_OK) {
        fprintf(out, "# compression: the fabric is not valid\n");
        return;
    }
    s.channels = R; /* the flat ring over every NIC, as cb_model_best */
    cb_model_codec_words(p, words, sizeof(words));
    fprintf(out, "# Compressed all-reduce with %s:\n# strataAllReduceCompressed, the "
            "hierarchical path with its inter-node step encoded\n# (docs/model.md, formulas "
            "14-15), against the fastest uncompressed all-reduce.\n# %d node%s x %d rank%s, %d "
            "rail%s per node of %g Gbit/s (%g GB/s), intra-node %g GB/s,\n# alpha %g us intra, "
            "%g us inter\n", words,
            N, N == 1 ? "" : "s", g, g == 1 ? "" : "s", R, R == 1 ? "" : "s",
            in->inter_beta * 8 / CB_MODEL_GB,
            in->inter_beta / CB_MODEL_GB, in->intra_beta / CB_MODEL_GB, o->alpha_intra * 1e6,
            o->alpha_inter * 1e6);
    cb_model_compressed(o, &f, &s, p, S, &tc, &chunk);
    s.chunk = chunk;
    st_model_codec_for(&f, &s, p, cb_model_dtype(o), S, &c);
    fprintf(out, "# wire: %.4g B per %g B element (ratio %.4g, blocks of the gradient's %s "
            "chunks);\n# encode %.2f ns, decode %.2f ns per element (%s%s)\n",
            c.ratio * in->dtype_bytes, in->dtype_bytes, c.ratio,
            cb_model_bytes_str((double)chunk, bs, sizeof(bs)), c.encode * 1e9, c.decode * 1e9,
            o->costs_from ? "from " : "this machine's defaults", o->costs_from ? o->costs_from
                                                                               : "");
    if (N == 1) {
        fprintf(out, "one node: nothing crosses a network, nothing is compressed "
                "(strataAllReduceCompressed is strataAllReduce)\n");
        return;
    }

    fprintf(out, "\n%-30s %10s %12s %6s %12s %8s\n", "all-reduce", "bytes", "uncompr ms",
            "algo", "compr ms", "speedup");
    algo = cb_model_best(o, &f, &s, S, &tu, &chunk);
    cb_model_compressed(o, &f, &s, p, S, &tc, &chunk);
    fprintf(out, "%-30s %10s %12.3f %6s %12.3f %7.2fx\n", "gradient",
            cb_model_bytes_str(S, bs, sizeof(bs)), tu.total * 1e3, st_algo_name(algo),
            tc.total * 1e3, tu.total / tc.total);
    nk = cb_model_buckets(o, S, b);
    for (int k = 0; k < nk; k++) {
        algo = cb_model_best(o, &f, &s, b[k].bytes, &tu, &chunk);
        cb_model_compressed(o, &f, &s, p, b[k].bytes, &tc, &chunk);
        snprintf(label, sizeof(label), k == 1 ? "last bucket" : "bucket (x %d)", b[k].count);
        fprintf(out, "%-30s %10s %12.3f %6s %12.3f %7.2fx\n", label,
                cb_model_bytes_str(b[k].bytes, bs, sizeof(bs)), tu.total * 1e3,
                st_algo_name(algo), tc.total * 1e3, tu.total / tc.total);
        comm_u += b[k].count * tu.total;
        comm_c += b[k].count * tc.total;
        nb += b[k].count;
    }

    cb_model_best(o, &f, &s, S, &tu, &chunk);
    cb_model_compressed(o, &f, &s, p, S, &tc, &chunk);
    exp_u = st_model_bucket_exposed(comm_u, in->backward, nb);
    exp_c = st_model_bucket_exposed(comm_c, in->backward, nb);
    fprintf(out, "\n%-40s %12s %12s %8s\n", "step: forward + backward + comm", "uncompr ms",
            "compr ms", "speedup");
    fprintf(out, "%-40s %12.3f %12.3f %7.2fx\n", "one all-reduce after backward",
            (compute + tu.total) * 1e3, (compute + tc.total) * 1e3,
            (compute + tu.total) / (compute + tc.total));
    snprintf(label, sizeof(label), "%d bucket%s overlapping backward", nb, nb == 1 ? "" : "s");
    fprintf(out, "%-40s %12.3f %12.3f %7.2fx\n", label, (compute + exp_u) * 1e3,
            (compute + exp_c) * 1e3, (compute + exp_u) / (compute + exp_c));
    fprintf(out, "    exposed (formula 10): %.3f ms uncompressed, %.3f ms compressed,\n    of "
            "%.3f and %.3f ms back to back\n", exp_u * 1e3, exp_c * 1e3, comm_u * 1e3,
            comm_c * 1e3);

    /* the break-even at the (largest) bucket, with the split its compressed all-reduce takes */
    sb = s;
    cb_model_compressed(o, &f, &s, p, b[0].bytes, &tc, &sb.chunk);
    if (st_model_compress_breakeven(&f, &sb, p, cb_model_dtype(o), b[0].bytes, &be) != ST_OK) {
        fprintf(out, "compression: no break-even (the model refused the codec)\n");
        return;
    }
    cb_model_breakeven_strs(&be, link, sizeof(link), size, sizeof(size));
    fprintf(out, "compression stops paying %s / %s\n", link, size);
    fprintf(out, "    (the link at %s buckets, the bucket at %g Gbit/s links; against the fastest "
            "uncompressed\n    all-reduce, encode and decode included)\n",
            cb_model_bytes_str(b[0].bytes, bs, sizeof(bs)), in->inter_beta * 8 / CB_MODEL_GB);
}

/* --preset seed: the compressed all-reduce of the gradient with each of strata's codecs, under the
 * faithful model's compression table; base_step is its dense step. */
static void cb_model_print_codecs(FILE *out, const cb_model_opts_t *o, const st_model_fabric_t *f,
                                  double base_step)
{
    const st_model_seed_in_t *in = &o->seed;
    double S = in->params * in->dtype_bytes, compute = in->forward + in->backward;
    st_model_split_t s;
    char link[64], size[64];

    memset(&s, 0, sizeof(s));
    s.channels  = o->nrails;
    s.small_max = CB_SMALL_MAX;
    fprintf(out, "\nstrata's codecs: the compressed all-reduce of the gradient (formulas 14-15), "
            "encode/decode\nper element %s%s\n", o->costs_from ? "from " : "of this machine "
            "(defaults)", o->costs_from ? o->costs_from : "");
    fprintf(out, "%-12s %7s %11s %9s %8s %8s %13s %10s\n", "codec", "B/elem", "enc/dec ns",
            "comm ms", "step s", "speedup", "pays below", "pays from");
    for (int i = 0; i < ST_MODEL_NCODECS; i++) {
        strataCompressParams_t p;
        st_model_codec_t       c;
        st_model_time_t        t;
        st_model_breakeven_t   be;
        char                   ns[24];

        st_codec_parse(cb_model_codec_specs[i], &p);
        cb_model_compressed(o, f, &s, &p, S, &t, &s.chunk);
        st_model_codec_for(f, &s, &p, cb_model_dtype(o), S, &c);
        snprintf(ns, sizeof(ns), "%.2f/%.2f", c.encode * 1e9, c.decode * 1e9);
        fprintf(out, "%-12s %7.3f %11s %9.1f %8.2f %7.2fx  ", cb_model_codec_specs[i],
                c.ratio * in->dtype_bytes, ns, t.total * 1e3, compute + t.total,
                base_step / (compute + t.total));
        if (in->nodes > 1 &&
            st_model_compress_breakeven(f, &s, &p, cb_model_dtype(o), S, &be) == ST_OK) {
            if (be.beta_max == 0 || isinf(be.beta_max)) {
                snprintf(link, sizeof(link), "%s", be.beta_max == 0 ? "no link" : "any link");
            } else {
                snprintf(link, sizeof(link), "%.3g Gbit/s", be.beta_max * 8 / CB_MODEL_GB);
            }
            if (be.bytes_min == 0 || isinf(be.bytes_min)) {
                snprintf(size, sizeof(size), "%s", be.bytes_min == 0 ? "any size" : "no size");
            } else {
                cb_model_bytes_str(be.bytes_min, size, sizeof(size));
            }
            fprintf(out, "%13s %10s\n", link, size);
        } else {
            fprintf(out, "%13s %10s\n", "-", "-");
        }
        s.chunk = 0;
    }
    cb_model_note(out, "the rows above keep the texts' ratios and overheads: here each codec's "
                  "own\n    wire bytes and measured encode/decode per element on the hierarchical "
                  "path, whose\n    inter-node step it encodes (2 rounds, not 2(N-1) steps; topk "
                  "sums densely there, not\n    by all-gather). Pays below: the link speed (per "
                  "rail) under which it beats the\n    fastest uncompressed all-reduce of the "
                  "gradient; pays from: the size from which it\n    does on these links");
}

static void cb_model_print_faithful(FILE *out, const cb_model_opts_t *o)
{
    const st_model_seed_in_t *in = &o->seed;
    st_model_seed_out_t       texts;
    st_model_fabric_t         f, f0;
    st_model_split_t          s;
    st_model_time_t           t1, tc, th, thp, t;
    st_algo_t                 algo;
    size_t                    chunk;
    double S = in->params * in->dtype_bytes, compute = in->forward + in->backward;
    double base_comm, base_step, comm, bytes, k, p, q, dense, ratio, exp_comm, flat_step;
    int    g = in->ranks_per_node, N = in->nodes, n = g * N, R = o->nrails, r, i;
    int    b = in->buckets;
    char   label[64], sizebuf[32];
    static const double bucket_bytes[] = {0, 25e6, 1e6, 64e3};

    st_model_seed_compute(in, &texts);
    cb_model_fabric(o, &f, &s);
    if (st_model_fabric_check(&f) != ST_OK) {
        fprintf(out, "# faithful model: the fabric is not valid\n");
        return;
    }
    fprintf(out, "# Faithful model (src/tune/model.c, docs/model.md): strata's algorithms with "
            "alpha terms,\n# channels, rails and pipelining. %d node%s x %d ranks, %d rail%s per "
            "node (", N, N == 1 ? "" : "s", g, R, R == 1 ? "" : "s");
    for (r = 1; r < R && st_model_rail_beta(&f, r) == st_model_rail_beta(&f, 0); r++) {
    }
    if (r == R) { /* all alike */
        fprintf(out, "%g GB/s each", st_model_rail_beta(&f, 0) / CB_MODEL_GB);
    } else {
        for (r = 0; r < R; r++) {
            fprintf(out, "%s%g", r ? "+" : "", st_model_rail_beta(&f, r) / CB_MODEL_GB);
        }
        fprintf(out, " GB/s");
    }
    fprintf(out, "),\n# intra-node %g GB/s; alpha intra %g us, inter %g us (assumed: replace "
            "with a\n# measured profile); gamma %s\n", in->intra_beta / CB_MODEL_GB,
            o->alpha_intra * 1e6, o->alpha_inter * 1e6,
            o->gamma > 0 ? "counted" : "not counted (reduction fused into the copy)");
    if (o->gamma > 0) {
        fprintf(out, "# gamma %g GB/s\n", o->gamma / CB_MODEL_GB);
    }

    /* dense all-reduce of the whole gradient */
    fprintf(out, "\n%-44s %10s\n", "all-reduce of the gradient", "ms");
    st_model_allreduce(&f, &s, ST_ALGO_RING, S, &t1);
    fprintf(out, "%-44s %10.1f\n", "flat ring, 1 channel", t1.total * 1e3);
    cb_model_note(out, "the texts' flat ring, plus 2(n-1) = %d alpha steps", 2 * (n - 1));
    s.channels = R;
    st_model_allreduce(&f, &s, ST_ALGO_RING, S, &tc);
    s.channels = 1;
    fprintf(out, "%-44s %10.1f\n", "flat ring, one channel per NIC", tc.total * 1e3);
    if (N > 1) {
        cb_model_note(out, "channels over all %d NICs move the same inter-node bytes as the\n"
                      "    hierarchical path: the texts' %.1fx holds only against one ring", R,
                      texts.hier_speedup);
    }
    st_model_allreduce(&f, &s, ST_ALGO_HIER, S, &th);
    fprintf(out, "%-44s %10.1f\n", "hierarchical, phases one after another", th.total * 1e3);
    fprintf(out, "    intra reduce-scatter %.1f ms + inter all-reduce %.1f ms + intra all-gather "
            "%.1f ms\n", th.phase[0] * 1e3, th.phase[1] * 1e3, th.phase[2] * 1e3);
    if (N > 1) {
        cb_model_note(out, "inter-node shard = gradient / %d ranks per node, per rail (%.2f GB;\n"
                      "    the texts divide by the %d nodes: %.2f GB, the same only when the "
                      "counts are);\n    the intra-node phases move (g-1)/g of the gradient, not "
                      "of the shard", g, S / g / CB_MODEL_GB, N, S / N / CB_MODEL_GB);
    }
    cb_model_best(o, &f, &s, S, &thp, &chunk);
    s.chunk = chunk;
    st_model_allreduce(&f, &s, ST_ALGO_HIER, S, &thp);
    s.chunk = 0;
    fprintf(out, "%-44s %10.1f\n", "hierarchical, pipelined", thp.total * 1e3);
    cb_model_note(out, "phases overlap: the slowest in steady state, plus fill, drain and\n"
                  "    alpha per chunk (%.0f chunks of %s)", thp.chunks,
                  cb_model_size_str(chunk, sizebuf, sizeof(sizebuf)));
    if (N > 1) {
        fprintf(out, "hierarchical (pipelined) over the flat ring: %.1fx against 1 channel, "
                "%.2fx against %d\n", t1.total / thp.total, tc.total / thp.total, R);
    } else {
        /* one node: no network phase, so nothing for a hierarchy over nodes to win; what is
         * left is the model overlapping the two intra-node phases, not a network speedup */
        fprintf(out, "one node: no inter-node phase; hierarchical is the intra-node "
                "reduce-scatter and all-gather\n    only, %.1f ms pipelined against the flat "
                "ring's %.1f ms within the node (the model\n    overlaps the two phases on the "
                "%g GB/s intra-node path): no inter-node speedup to claim\n",
                thp.total * 1e3, t1.total * 1e3, in->intra_beta / CB_MODEL_GB);
    }

    /* compression, on the best dense algorithm, one all-reduce per step */
    base_comm = fmin(thp.total, tc.total);
    base_step = compute + base_comm;
    fprintf(out, "\n%-28s %9s %9s %8s %8s\n", "compression", "GB/rank", "comm ms", "step s",
            "speedup");
    fprintf(out, "%-28s %9.2f %9.1f %8.2f %7.2fx\n", "none", S / CB_MODEL_GB, base_comm * 1e3,
            base_step, 1.0);
    cb_model_note(out, "dense, on the best algorithm above");
    for (i = 1; i <= 2; i++) {
        k          = in->params / in->comp_ratio[i];
        bytes      = k * (in->dtype_bytes + o->index_bytes);
        s.channels = R;
        comm       = st_model_flat_allgather(&f, &s, bytes);
        s.channels = 1;
        fprintf(out, "%-28s %9.2f %9.1f %8.2f %7.2fx\n", cb_model_comp_names[i],
                bytes / CB_MODEL_GB, comm * 1e3, compute + comm + in->comp_overhead[i],
                base_step / (compute + comm + in->comp_overhead[i]));
        cb_model_note(out, "%g B of index with each value; sparse sums do not add in place:\n"
                      "    an all-gather, each rank receives the n-1 others' pairs, growing "
                      "with n", o->index_bytes);
    }
    for (i = 3; i <= 4; i++) {
        bytes = S / in->comp_ratio[i];
        cb_model_best(o, &f, &s, bytes, &t, &chunk);
        fprintf(out, "%-28s %9.2f %9.1f %8.2f %7.2fx\n", cb_model_comp_names[i],
                bytes / CB_MODEL_GB, t.total * 1e3, compute + t.total + in->comp_overhead[i],
                base_step / (compute + t.total + in->comp_overhead[i]));
        cb_model_note(out, "alpha counts (the ratio is kept: re-quantised at each hop)");
    }
    st_model_powersgd(cb_model_7b, (int)(sizeof(cb_model_7b) / sizeof(cb_model_7b[0])),
                      o->psgd_rank, &p, &q, &dense);
    ratio = (p + q) / dense;
    cb_model_best(o, &f, &s, S * p / dense, &t, &chunk);
    comm = t.total;
    cb_model_best(o, &f, &s, S * q / dense, &t, &chunk);
    comm += t.total;
    cb_model_comp_label(o, 5, label, sizeof(label));
    fprintf(out, "%-28s %9.3f %9.1f %8.2f %7.2fx\n", label, S * ratio / CB_MODEL_GB, comm * 1e3,
            compute + comm + in->comp_overhead[5],
            base_step / (compute + comm + in->comp_overhead[5]));
    cb_model_note(out, "r(m+n)/(mn) per weight matrix, 1/%.0f over a 7B transformer's shapes\n"
                  "    (%.3g parameters; the ratio is applied to the %.3g here), P and Q "
                  "all-reduced apart:", 1 / ratio, dense, in->params);
    for (i = 0; i < (int)(sizeof(cb_model_7b) / sizeof(cb_model_7b[0])); i++) {
        fprintf(out, "      %3d x %s\n", cb_model_7b[i].count, cb_model_7b[i].name);
    }

    if (o->preset_seed) {
        cb_model_print_codecs(out, o, &f, base_step);
    }

    /* overlap with backward, by buckets */
    comm     = cb_model_bucketed(o, &f, &s, S, b, &algo);
    exp_comm = st_model_bucket_exposed(comm, in->backward, b);
    fprintf(out, "\n%-28s %10s %8s %8s\n", "overlap", "exposed ms", "step s", "speedup");
    fprintf(out, "%-28s %10.1f %8.2f %7.2fx\n", "none", base_comm * 1e3, base_step, 1.0);
    snprintf(label, sizeof(label), "bucketed, b = %d", b);
    fprintf(out, "%-28s %10.1f %8.2f %7.2fx\n", label, exp_comm * 1e3, compute + exp_comm,
            base_step / (compute + exp_comm));
    cb_model_note(out, "exposed = max(comm/b, comm - backward (b-1)/b), not a fixed share;\n"
                  "    each bucket pays its own alpha (%s)", st_algo_name(algo));

    /* latency: the same gradient in smaller buckets */
    f0             = f;
    f0.intra.alpha = 0;
    f0.inter.alpha = 0;
    fprintf(out, "\nlatency terms matter for small buckets: the gradient in b buckets, back to "
            "back\n%-10s %12s %6s %10s %8s\n", "buckets", "bucket", "algo", "comm ms", "alpha %");
    for (i = 0; i < (int)(sizeof(bucket_bytes) / sizeof(bucket_bytes[0])); i++) {
        double          nb = (i == 0) ? b : ceil(S / bucket_bytes[i]), c0;
        st_algo_t       algo0;

        comm = cb_model_bucketed(o, &f, &s, S, (int)nb, &algo);
        c0   = cb_model_bucketed(o, &f0, &s, S, (int)nb, &algo0); /* bandwidth terms only */
        fprintf(out, "%-10.0f %9.4g MB %6s %10.1f %7.1f%%\n", nb, S / nb / 1e6,
                st_algo_name(algo), comm * 1e3, 100 * (1 - c0 / comm));
    }

    /* combined */
    flat_step = compute + t1.total;
    fprintf(out, "\n%-44s %8s %8s\n", "combined", "step s", "speedup");
    fprintf(out, "%-44s %8.2f %7.2fx\n", "flat ring, 1 channel", flat_step, 1.0);
    fprintf(out, "%-44s %8.2f %7.2fx\n", "flat ring, one channel per NIC", compute + tc.total,
            flat_step / (compute + tc.total));
    fprintf(out, "%-44s %8.2f %7.2fx\n", "hierarchical, pipelined", compute + thp.total,
            flat_step / (compute + thp.total));
    snprintf(label, sizeof(label), "best dense, bucketed b = %d", b);
    fprintf(out, "%-44s %8.2f %7.2fx\n", label, compute + exp_comm,
            flat_step / (compute + exp_comm));
    k          = in->params / in->comp_ratio[1] / b;
    s.channels = R;
    comm       = b * st_model_flat_allgather(&f, &s, k * (in->dtype_bytes + o->index_bytes));
    s.channels = 1;
    comm       = st_model_bucket_exposed(comm, in->backward, b) + in->comp_overhead[1];
    snprintf(label, sizeof(label), "top-1%% (all-gather), bucketed b = %d", b);
    fprintf(out, "%-44s %8.2f %7.2fx\n", label, compute + comm, flat_step / (compute + comm));
    fprintf(out, "communication overhead (step - compute) %.0f ms -> %.1f ms: reduced %.0fx "
            "(dense, bucketed)\n", t1.total * 1e3, exp_comm * 1e3, t1.total / exp_comm);
}

int cb_model_run(FILE *out, FILE *err, int argc, char **argv, const char *prog)
{
    cb_model_opts_t o;
    int             ret;

    ret = cb_model_parse(argc, argv, out, err, prog, &o);
    if (ret != 0) {
        return (ret > 0) ? 0 : 2;
    }
    if (o.only != CB_MODEL_ONLY_FAITHFUL) {
        cb_model_print_texts(out, &o);
    }
    if (o.only == CB_MODEL_ONLY_BOTH) {
        fprintf(out, "\n");
    }
    if (o.only != CB_MODEL_ONLY_TEXTS && (!o.compress || o.preset_seed)) {
        cb_model_print_faithful(out, &o);
    }
    if (o.compress) {
        if (o.preset_seed) {
            fprintf(out, "\n");
        }
        cb_model_print_compress(out, &o);
    }
    return 0;
}
