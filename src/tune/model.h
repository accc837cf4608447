/*
 * model.h - the alpha-beta-gamma cost model of strata's all-reduce algorithms (issue 6).
 *
 * Pure functions of their arguments: no I/O, no logging, no global state, so the library's
 * algorithm selection, collbench and the tests call the same code. Every time is in seconds, every
 * size in bytes, every bandwidth (beta) and reduction throughput (gamma) in bytes per second, every
 * latency (alpha) in seconds per step. docs/model.md states each formula, its units and its source.
 *
 * The fabric is described per level, as `collbench calibrate` will measure it: the node-local
 * level (windows: copy bandwidth, reduce throughput, synchronisation latency) and the inter-node
 * level (network latency and reduce throughput, and each rail's own bandwidth, since a node may
 * have a fast and a slow NIC). How the data is spread over phases, chunks, channels and rails is a
 * separate input, the split, which `collbench tune` will sweep.
 *
 * This file also keeps the simplified arithmetic of the communication texts strata grew from
 * (st_model_seed_*): `collbench model --preset seed` prints it to check the figures those texts
 * quote, next to the faithful model that corrects them.
 */
#ifndef ST_TUNE_MODEL_H
#define ST_TUNE_MODEL_H

#include <stddef.h>

#include <strata.h>

#include "base/status.h"
#include "tune/algo.h"

#define ST_MODEL_MAX_RAILS 16
#define ST_MODEL_NCODECS   6 /* strataNumCodecs: none, fp16, bf16, int8, topk, sign */

/* One level of the fabric. */
typedef struct st_model_level {
    double alpha; /* seconds per step: one message (inter) or one flag synchronisation (intra) */
    double beta;  /* bytes/s one rank moves on this level, each direction (intra); the default
                   * rail bandwidth (inter) for rails whose rail_beta is 0 */
    double gamma; /* bytes/s one rank reduces; 0: reduction not counted (fused, or unknown) */
} st_model_level_t;

#define ST_MODEL_CREDIT_POINTS 8

/* A shaped rail's measured burst credit as a function of the bytes an operation moves over it
 * (calibrate's exchanges at several sizes): credit[i] bytes pass "for free" when bytes[i] are
 * moved; linear in between, from (0, 0), constant beyond the last point, never above the bytes
 * moved (docs/model.md). */
typedef struct st_model_credit {
    int    n;                               /* points; 0: rail_burst alone */
    double bytes[ST_MODEL_CREDIT_POINTS];   /* increasing, > 0 */
    double credit[ST_MODEL_CREDIT_POINTS];  /* 0 .. bytes[i] */
} st_model_credit_t;

/* How long the rails rest before a hierarchical all-reduce's inter-node bytes, as a function of
 * the operation's bytes (calibrate measures hier itself at several sizes): a shaped rail r then
 * passes min(D_r, beta_r x rest) of its D_r bytes at once. Linear in between, constant outside
 * the points (docs/model.md). */
typedef struct st_model_rest {
    int    n;                               /* points; 0: the rails' credit curves */
    double bytes[ST_MODEL_CREDIT_POINTS];   /* all-reduce bytes, increasing, > 0 */
    double seconds[ST_MODEL_CREDIT_POINTS]; /* >= 0 */
} st_model_rest_t;

/* What one rank spends per element to encode and to decode with a codec (strataCodec_t), the
 * error feedback's residual included: measured by `collbench calibrate` on float32 (topk at
 * density 0.01, int8 and sign with blocks of 256), st_model_codec_defaults otherwise. */
typedef struct st_model_codec_cost {
    double encode; /* seconds per element; 0: not counted */
    double decode; /* seconds per element; 0: not counted */
} st_model_codec_cost_t;

/* The machine: what a measured fabric profile will fill in. */
typedef struct st_model_fabric {
    int              ranks_per_node; /* g >= 1 */
    int              nodes;          /* N >= 1 */
    int              nrails;         /* R NICs per node, 1 .. ST_MODEL_MAX_RAILS */
    st_model_level_t intra;          /* node-local windows */
    st_model_level_t inter;          /* the network */
    double           rail_beta[ST_MODEL_MAX_RAILS]; /* bytes/s of rail r, each direction;
                                                     * 0: inter.beta */
    double           rail_burst[ST_MODEL_MAX_RAILS]; /* bytes a token-bucket-shaped rail
                                                      * passes at once after the idle moment
                                                      * between operations (tc tbf, policers);
                                                      * 0: not shaped (docs/model.md) */
    st_model_credit_t rail_credit[ST_MODEL_MAX_RAILS]; /* measured per size; n = 0: the
                                                         * constant rail_burst */
    double           exchange_alpha; /* seconds: one message between node leaders with the
                                      * rails otherwise idle (the small algorithm's exchange);
                                      * 0: inter.alpha */
    st_model_credit_t small_credit;  /* the burst credit of the small algorithm's exchange on
                                      * rail 0, measured with small itself (only the leaders
                                      * send, and the rail rests during the window phases);
                                      * n = 0: rail_credit[0] */
    st_model_rest_t  hier_rest;      /* the hierarchical path's burst credit, measured with
                                      * hier itself; n = 0: rail_credit */
    st_model_codec_cost_t codec[ST_MODEL_NCODECS]; /* per strataCodec_t; all 0 (a zeroed
                                                    * fabric): the codecs cost no time */
} st_model_fabric_t;

/* How an all-reduce is split over phases, chunks, channels and rails: what tune will sweep. */
typedef struct st_model_split {
    size_t chunk;      /* hier pipeline chunk in bytes; 0: the whole buffer is one chunk */
    int    channels;   /* flat ring: concurrent rings, channel c on rail (g-1+c) % R
                        * (a node's last local rank sends the hop out; coll/ring.c); 0 is
                        * taken as 1 */
    size_t small_max;  /* largest all-reduce the small-message algorithm takes; 0: none */
    double rail_share[ST_MODEL_MAX_RAILS]; /* share of the inter-node bytes rail r carries;
                                            * all 0: an even split (what hier does today) */
} st_model_split_t;

/* Phases of one algorithm. */
enum { ST_MODEL_PH_INTRA_RS = 0, ST_MODEL_PH_INTER, ST_MODEL_PH_INTRA_AG, ST_MODEL_NPHASES };

typedef struct st_model_time {
    double phase[ST_MODEL_NPHASES]; /* seconds of each phase over the whole buffer, as if alone;
                                     * ring and small put everything in ST_MODEL_PH_INTER */
    double chunks;                  /* pipeline chunks (hier), 1 otherwise */
    double total;                   /* seconds, pipelining counted */
} st_model_time_t;

/* ST_OK, or ST_ERR_INVALID when a count is out of range or a bandwidth is not positive. */
st_status_t st_model_fabric_check(const st_model_fabric_t *fabric);
/* Bandwidth of rail r in bytes/s (rail_beta[r], or inter.beta when that is 0). */
double st_model_rail_beta(const st_model_fabric_t *fabric, int rail);

/* ---- the textbook terms (Thakur, Rabenseifner & Gropp 2005) ---------------------------------- */

/* Ring all-reduce of `bytes` over n ranks on one level: reduce-scatter then all-gather,
 * 2(n-1) alpha + 2(n-1)/n bytes/beta + (n-1)/n bytes/gamma. */
double st_model_ring_allreduce(int n, double bytes, const st_model_level_t *level);
/* Ring reduce-scatter of `bytes` (the whole vector) over n ranks:
 * (n-1) alpha + (n-1)/n bytes/beta + (n-1)/n bytes/gamma. */
double st_model_ring_reduce_scatter(int n, double bytes, const st_model_level_t *level);
/* Ring all-gather ending with `bytes` on every rank (bytes/n from each):
 * (n-1) alpha + (n-1)/n bytes/beta. */
double st_model_ring_allgather(int n, double bytes, const st_model_level_t *level);
/* A pipeline of nphases stages over `chunks` equal chunks, phase[i] the time of one chunk in stage
 * i: fill and drain plus the steady state of the slowest stage,
 * sum_i phase[i] + (chunks - 1) max_i phase[i]. */
double st_model_pipeline(const double *phase, int nphases, double chunks);

/* ---- strata's algorithms --------------------------------------------------------------------- */

/* The time an operation that sends `bytes` over rail r in each direction saves on a shaped rail:
 * credit / beta_r, credit = rail_credit[r] interpolated at `bytes` when it has points, else
 * min(rail_burst[r], bytes); never more than bytes (0 when the rail is not shaped). */
double st_model_rail_credit(const st_model_fabric_t *fabric, int rail, double bytes);

/* Time of an all-reduce of `bytes` with `algo` (ring, hier or small) on this fabric and split.
 * ST_ERR_INVALID for a bad fabric or algorithm (auto among them), ST_ERR_UNSUPPORTED for small
 * above split->small_max. */
st_status_t st_model_allreduce(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               st_algo_t algo, double bytes, st_model_time_t *time_p);
/* The fastest algorithm for `bytes` (ties to the lower value of tune/algo.h) and its time. */
st_status_t st_model_choose(const st_model_fabric_t *fabric, const st_model_split_t *split,
                            double bytes, st_algo_t *algo_p, st_model_time_t *time_p);
/* The hier chunk among powers of two from min_chunk to max_chunk that gives the least time (the
 * first one on ties); split->chunk is ignored. */
st_status_t st_model_best_chunk(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                double bytes, size_t min_chunk, size_t max_chunk,
                                size_t *chunk_p, st_model_time_t *time_p);
/* The collectives the model prices beside all-reduce (its own names: this floor knows no
 * engine). `bytes` is always nccl-tests' size: reduce-scatter the send buffer (nranks blocks),
 * all-gather the receive buffer, all-to-all one rank's send buffer (nranks blocks). */
typedef enum {
    ST_MODEL_ALLREDUCE = 0,
    ST_MODEL_REDUCESCATTER,
    ST_MODEL_ALLGATHER,
    ST_MODEL_ALLTOALL,
    ST_MODEL_NCOLLS
} st_model_coll_t;

/* Time of collective `coll` of `bytes` with `algo` (ring: the flat ring, or for all-to-all the
 * flat pairwise exchange; hier: the hierarchical pipeline; small: all-reduce only), as
 * st_model_allreduce (which is coll ST_MODEL_ALLREDUCE). docs/model.md, formulas 11-13.
 * ST_ERR_INVALID for a bad fabric, coll or algorithm; ST_ERR_UNSUPPORTED for an algorithm that
 * does not run that collective (small beyond all-reduce). */
st_status_t st_model_collective(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                st_model_coll_t coll, st_algo_t algo, double bytes,
                                st_model_time_t *time_p);
/* The fastest algorithm for `coll` of `bytes` (ties to the lower value of tune/algo.h). */
st_status_t st_model_choose_coll(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                 st_model_coll_t coll, double bytes, st_algo_t *algo_p,
                                 st_model_time_t *time_p);
/* The collective's name as the tuning files spell it: "allreduce", "reduce_scatter",
 * "all_gather", "alltoall"; NULL out of range. */
const char *st_model_coll_name(int coll);

/* Ring all-gather over all ranks, flat ring over split->channels channels, every rank
 * contributing `bytes_per_rank` (what a sparse all-reduce by all-gather sends). */
double st_model_flat_allgather(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               double bytes_per_rank);

/* ---- compression of the hierarchical all-reduce's inter-node step (docs/model.md, 14-15) ----- */

/* A codec as the model prices it. */
typedef struct st_model_codec {
    double ratio;      /* wire bytes / uncompressed bytes of what crosses the network, > 0 */
    double elem_bytes; /* bytes per element of the datatype (4 for float32), > 0 */
    double encode;     /* seconds per element one rank encodes, >= 0 */
    double decode;     /* seconds per element one rank decodes, >= 0 */
} st_model_codec_t;

/* This machine's codec costs (docs/model.md, "Compression"), what a profile without measured
 * ones takes: cost[strataCodecNone .. strataCodecSign]. */
void st_model_codec_defaults(st_model_codec_cost_t cost[ST_MODEL_NCODECS]);
/* The wire ratio of one encoded range of `elems` elements of dt (>= 1; rounded to a whole count):
 * st_codec_wire_bytes / (elems x size of dt). 0 for bad params or a datatype no codec takes. */
double st_model_codec_ratio(const strataCompressParams_t *p, strataDataType_t dt, double elems);
/* The codec of an all-reduce of `bytes` of dt on this fabric and split: its ratio at the block
 * one encoding covers (a chunk's shard per local rank, divided among the N nodes:
 * min(chunk, bytes) / (g N) bytes; hier.c), its costs fabric->codec[p->codec].
 * ST_ERR_INVALID for bad params, datatype or fabric. */
st_status_t st_model_codec_for(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               const strataCompressParams_t *p, strataDataType_t dt,
                               double bytes, st_model_codec_t *codec_p);
/* Time of a compressed all-reduce of `bytes` (strataAllReduceCompressed: hier with the coded
 * inter-node step, hier.c) priced as st_model_allreduce prices hier, with the inter-node phase per
 * chunk of C bytes (E = C / elem_bytes elements)
 *   max_r [2 alpha_inter + 2(N-1)/N share_r ratio C / beta_r]          two rounds, all in flight
 *   + (N-1)/N (C/g) / gamma_inter                                       the sum of the blocks
 *   + (E/g) [encode + (2N-1)/N decode]                                   one rank's codec work
 * and the burst credit of the ratio x bytes on the rails. One node: hier's time (nothing is
 * compressed). ST_ERR_INVALID for a bad fabric, split or codec. */
st_status_t st_model_allreduce_compressed(const st_model_fabric_t *fabric,
                                          const st_model_split_t *split,
                                          const st_model_codec_t *codec, double bytes,
                                          st_model_time_t *time_p);

/* Where compression stops paying, against the fastest uncompressed all-reduce the model knows
 * (st_model_choose: ring, hier, small) with the same split. */
typedef struct st_model_breakeven {
    double beta_max;  /* bytes/s per rail: at the all-reduce's bytes the compressed one is
                       * faster on rails below it, every rail scaled by one factor (the rails'
                       * mean bandwidth at the crossing); 0: on no rail from 1 kB/s;
                       * INFINITY: on every rail up to 1e13 B/s */
    double bytes_min; /* bytes: on this fabric the compressed all-reduce is faster from this
                       * size up (the last crossing below 2^50 B); 0: at every size from 1 B;
                       * INFINITY: at no size up to 2^50 B */
} st_model_breakeven_t;

/* The break-even of codec p on dt: beta_max at `bytes`, bytes_min at the fabric's rails, each to
 * 1e-6 relative by bisection between points of a geometric scan (x2), the ratio taken at each
 * size's block (st_model_codec_for). ST_ERR_INVALID as st_model_codec_for, or for bytes <= 0. */
st_status_t st_model_compress_breakeven(const st_model_fabric_t *fabric,
                                        const st_model_split_t *split,
                                        const strataCompressParams_t *p, strataDataType_t dt,
                                        double bytes, st_model_breakeven_t *be_p);

/* ---- data-parallel training step ------------------------------------------------------------- */

/* Communication left exposed when the gradient is all-reduced in `buckets` equal buckets, each
 * started as backward produces it: bucket i is ready at i*backward/buckets and the buckets share
 * the links in order, so exposed = max(comm/buckets, comm - backward*(buckets-1)/buckets), where
 * comm is the time of all buckets back to back. */
double st_model_bucket_exposed(double comm, double backward, int buckets);

/* A weight matrix of a model, rows x cols, `count` of them; cols == 1 for vectors (norms, biases),
 * which PowerSGD sends uncompressed. */
typedef struct st_model_matrix {
    const char *name;
    double      rows;
    double      cols;
    int         count;
} st_model_matrix_t;

/* PowerSGD of rank r (Vogels, Karimireddy & Jaggi 2019) over `n` matrix kinds: elements sent as P
 * (rows x r, plus the uncompressed vectors) and as Q (cols x r), and the dense element count. */
void st_model_powersgd(const st_model_matrix_t *m, int n, int rank, double *p_elems_p,
                       double *q_elems_p, double *dense_p);

/* ---- the communication texts' arithmetic (collbench model --preset seed) --------------------- */

#define ST_MODEL_SEED_NCOMP 6 /* none, top-1%, top-0.1%, 8-bit, 1-bit, PowerSGD */

typedef struct st_model_seed_in {
    int    ranks_per_node;
    int    nodes;
    double params;          /* parameters */
    double dtype_bytes;     /* bytes per gradient element */
    double intra_beta;      /* bytes/s */
    double inter_beta;      /* bytes/s */
    double forward;         /* seconds */
    double backward;        /* seconds */
    int    buckets;
    double comp_ratio[ST_MODEL_SEED_NCOMP];    /* bytes divided by; 1 for none */
    double comp_overhead[ST_MODEL_SEED_NCOMP]; /* seconds added to the step; 0 for none */
    double overlap_half;    /* the "50 %" overlap row, as a fraction */
} st_model_seed_in_t;

typedef struct st_model_seed_step {
    double bytes;   /* sent per rank, before the ring factor */
    double comm;    /* seconds of communication (compression rows) or exposed (overlap rows) */
    double step;    /* seconds */
    double speedup; /* baseline step / step */
} st_model_seed_step_t;

#define ST_MODEL_SEED_NOVERLAP  3 /* none, overlap_half, bucketing (buckets-1)/buckets */
#define ST_MODEL_SEED_NCOMBINED 4 /* flat ring; hier; hier + top-1%; hier + top-1% + bucketing */

typedef struct st_model_seed_out {
    double gradient;      /* bytes */
    double ring_bytes;    /* bytes each rank sends in the flat ring: 2(n-1)/n gradient */
    double ring_time;     /* seconds */
    double step;          /* forward + backward + ring_time */
    double comm_share;    /* ring_time / step */
    st_model_seed_step_t comp[ST_MODEL_SEED_NCOMP];
    double overlap[ST_MODEL_SEED_NOVERLAP];  /* fractions of the rows below */
    st_model_seed_step_t over[ST_MODEL_SEED_NOVERLAP];
    double hier_phase[3]; /* seconds: intra reduce-scatter, inter all-reduce, intra all-gather */
    double hier_time;     /* their sum */
    double hier_speedup;  /* ring_time / hier_time */
    st_model_seed_step_t combined[ST_MODEL_SEED_NCOMBINED];
    double comm_overhead_final; /* step - compute of the last combined row, seconds */
    double comm_reduction;      /* ring_time / comm_overhead_final */
} st_model_seed_out_t;

/* The preset of issue 6: 8 nodes x 8 GPUs, 7e9 fp32 parameters, 600 / 25 GB/s, 2 + 4 s, 20 buckets,
 * overheads 20/25/10/15/30 ms. */
void st_model_seed_preset(st_model_seed_in_t *in);
/* The texts' arithmetic, simplifications included (docs/model.md lists them). */
void st_model_seed_compute(const st_model_seed_in_t *in, st_model_seed_out_t *out);

#endif
