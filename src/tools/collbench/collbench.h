/*
 * collbench.h - shared declarations of collbench, the nccl-tests of strata.
 *
 * collbench is split by task: collbench.c parses the command line; launch.c decides how the
 * ranks come to exist (forked here as emulated nodes, under mpirun/srun, or started one by one
 * with --rank) and hands each of them the unique id; bench.c runs the benchmark of one rank (sizes,
 * timing, checks, the nccl-tests table); data.c builds inputs whose exact results are known for
 * every datatype and op, and counts the wrong elements; device.c puts the buffers in device memory
 * for --device; topo.c is the `topo` subcommand, which prints the topology of a communicator or of
 * an hwloc XML file; model.c is the `model` subcommand, the step-time tables of the cost model. The
 * benchmark calls only the public API (strata.h), so it is also an example of a port from
 * nccl-tests, plus the header-only fp16/bf16 conversions of reduce/half.h; the exceptions are the
 * cost model (src/tune/model.c, pure functions, no state), the tuning files (src/tune/table.c),
 * the algorithms' names (src/tune/algo.c), the table of the collectives (src/engine/op.c: names,
 * properties, bus-bandwidth factors, in-place rules), --compress's spec parser (src/codec/codec.c,
 * st_codec_parse: a pure function, so that the parent can refuse a bad spec with its reason before
 * any rank starts without initialising strata, as strataCompressParse would) and, for --device,
 * the device table (device/dev.h: memory, copies, streams, in the role that the CUDA runtime plays
 * in nccl-tests).
 * collbench links the library's convenience archive (libstrata_internal.la), not libstrata.so,
 * which hides those: with one copy of the library in the process, the device layer collbench
 * allocates from is the one the collectives see.
 */
#ifndef CB_COLLBENCH_H
#define CB_COLLBENCH_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>

#include "engine/op.h"
#include "strata.h"

/* The collectives collbench runs, in the order `all` runs them (nccl-tests', then the
 * all-to-alls, gather and scatter), as rows of engine/op.h's table; ST_COLL_SEND stands for
 * nccl-tests' sendrecv (a ring shift of sends and receives in one group), which the table names
 * "sendrecv". */
#define CB_NUM_COLLS 10
extern const st_coll_type_t cb_colls[CB_NUM_COLLS];

/* Reduction ops as nccl-tests numbers them (mulsum is the premul-sum made per test). CB_OP_NONE is
 * for the collectives that only move data. */
typedef enum {
    CB_OP_SUM = 0,
    CB_OP_PROD,
    CB_OP_MAX,
    CB_OP_MIN,
    CB_OP_AVG,
    CB_OP_PREMULSUM,
    CB_NUM_OPS,
    CB_OP_NONE = -1
} cb_op_t;

#define CB_MAX_NODES 4096

typedef enum { CB_FAB_NONE = 0, CB_FAB_CALIBRATE, CB_FAB_TUNE, CB_FAB_COMPARE } cb_fab_mode_t;

/* Everything the command line says. Launch fields are read by launch.c only. */
typedef struct cb_opts {
    unsigned    colls;       /* bit (1 << st_coll_type_t) per collective of cb_colls to run */
    size_t      minbytes;
    size_t      maxbytes;
    size_t      stepbytes;   /* used when stepfactor <= 1 */
    int         stepfactor;
    int         iters;
    int         warmup;
    int         check;       /* 1: verify every result and print #wrong */
    int         blocking;    /* 1: NULL stream; 0: queue on a host stream and synchronize */
    unsigned    dtypes;      /* bit (1 << strataDataType_t) per datatype */
    unsigned    ops;         /* bit (1 << cb_op_t) per op */
    int         root;        /* -1: every root */
    double      skew;        /* --skew: alltoallv's load on its hot destination, in means
                              * (1: every rank pair the same; bench.c, cb_a2av_load) */
    const char *algo;        /* -A: STRATA_ALGO for the ranks (set by main before any rank
                              * starts); NULL: what the environment says */
    int         phases;      /* --phases: print strataCommGetPhaseTimes under every row */
    int         mem_alloc;   /* --mem-alloc: buffers from strataMemAlloc (zero-copy path) */
    int         device;      /* --device: cb_device_kind_t, where the buffers live */
    const char *compress;    /* --compress: the spec as given; NULL: plain all-reduce only */
    strataCompressParams_t codec; /* --compress's codec (st_codec_parse), when compress != NULL */
    /* topo subcommand */
    int         topo;        /* 1: print the topology instead of benchmarking */
    const char *topo_file;   /* --topo-file: an hwloc XML, no ranks */
    int         json;        /* --json */
    /* calibrate, tune, model --compare (fabric.c, calibrate.c, tuning.c) */
    int         fab_mode;    /* cb_fab_mode_t */
    const char *fab_out;     /* --out: the profile or table written */
    const char *fab_profile; /* --profile: a fabric profile to read instead of calibrating */
    /* launch */
    int         np;          /* > 0: fork np ranks here */
    int         nnodes;      /* emulated nodes of -np (0: one) */
    int         layout[CB_MAX_NODES]; /* ranks per emulated node when given by --layout */
    int         nlayout;
    int         layout_rr;   /* --layout rr[K]: rank r on node r % K */
    int         rr_nodes;    /* the K of rrK, 0 when not given */
    int         rank;        /* --rank, -1 when not given */
    int         nranks;      /* --nranks, 0 when not given */
    double      timeout;     /* seconds for the whole run; <= 0: none */
    const char *prog;        /* argv[0] for messages */
} cb_opts_t;

/* ---- collbench.c, bench.c -------------------------------------------------------------------- */

/* Runs the benchmark as rank `rank` of `nranks` over the communicator of `id`; returns the exit
 * status of the rank: 0 all good, 1 some #wrong != 0, 2 a strata call failed. */
int cb_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id);

/* ---- fabric.c ------------------------------------------------------------------------------- */

/* `collbench calibrate`, `collbench tune`, `collbench model --profile F --compare` as one rank
 * (what each measures: fabric.c, calibrate.c, tuning.c). Returns 0, or 2 when a call or a file
 * fails. */
int cb_fabric_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id);

/* ---- topo.c ---------------------------------------------------------------------------------- */

/* `collbench topo` as one rank: init the communicator, rank 0 prints its topology (--json). Returns
 * the rank's exit status (0, or 2 when a strata call failed). */
int cb_topo_rank_main(const cb_opts_t *opts, int rank, int nranks, const strataUniqueId *id);
/* `collbench topo --topo-file F` (or without launch options: this machine), no ranks. Returns 0,
 * or 2 with a one-line reason on stderr. */
int cb_topo_file(const cb_opts_t *opts);

/* ---- model.c --------------------------------------------------------------------------------- */

/* `collbench model ...`: argv[0] is "model", the rest its options (see its --help). Prints the
 * tables to out, a one-line error to err; returns the exit status (0, or 2 for a bad option).
 * No rank is started. */
int cb_model_run(FILE *out, FILE *err, int argc, char **argv, const char *prog);
/* Bytes with an optional k/M/G/T suffix (powers of 1024), optionally "B" or "iB" after it.
 * Returns 0 and stores *size_p, or -1 for anything else (collbench.c). */
int cb_parse_size(const char *arg, size_t *size_p);

/* Seconds of CLOCK_MONOTONIC. */
double cb_now(void);

/* The most bytes of an all-reduce the small algorithm takes: the windows' small area
 * (ST_INTRA_SMALL_MAX in coll/intra.h; README, STRATA_SMALL_THRESHOLD). */
#define CB_SMALL_MAX ((size_t)128 << 10)
/* STRATA_ALGO (which -A sets) when it forces an algorithm that does not apply to every call:
 * "small" or "hier"; NULL otherwise (unset, auto, ring). */
const char *cb_algo_forced(void);
/* One clause on where that algorithm applies and what runs elsewhere, for the header and the
 * '#  ^ ran' lines under rows. */
const char *cb_algo_scope(const char *forced);

/* ---- launch.c -------------------------------------------------------------------------------- */

/* Starts or joins the ranks as the options and the environment say, runs cb_rank_main in each
 * rank of this process, and returns the process exit status. */
int cb_launch(const cb_opts_t *opts);

/* ---- device.c ------------------------------------------------------------------------------ */

/* --device: host memory, or device memory of strata's device layer (STRATA_DEVICE). */
typedef enum { CB_DEVICE_HOST = 0, CB_DEVICE_SIM, CB_DEVICE_CUDA } cb_device_kind_t;

/* One rank's device: its ordinal, its stream, its device buffers and their host mirrors. */
typedef struct cb_device cb_device_t;

/* The rank's index on its node, set by launch.c for forked ranks (-1: unknown, then a launcher's
 * LOCAL_RANK-like variable, else 0, chooses); the rank's device is it modulo the device count. */
extern int cb_local_rank;
/* launch.c: a rank forked by -np spreads itself over the CPUs (cb_spread) at fork and once its
 * communicator is up; cb_spread_rank is its rank then, else -1. */
extern int cb_spread_rank;
void       cb_spread(int rank);

/* "host", "sim", "cuda" to cb_device_kind_t; -1 for anything else. */
int         cb_device_parse(const char *arg);
const char *cb_device_name(int kind);
/* What the table's header says of the device, e.g. "sim (simulated on the CPU: not GPU
 * performance)". */
const char *cb_device_caption(int kind);
/* In the -np parent, before any rank is forked: whether opts->device's layer exists, asked in a
 * child that exits (the parent never initialises a device). 0, or 2 after one line on stderr. */
int         cb_device_probe(const cb_opts_t *opts);
/* In a rank, before its communicator: the device layer, its device made current, the stream
 * (none with -z 1: the legacy default stream). 0, or -1 after one line on stderr. */
int         cb_device_open(const cb_opts_t *opts, int rank, cb_device_t **d_p);
int         cb_device_ordinal(const cb_device_t *d);
/* The stream the calls take: collbench's device stream, or NULL (legacy default) with -z 1. */
strataStream_t cb_device_stream(const cb_device_t *d);
/* Two device buffers of bytes (mem_alloc, or strataMemAlloc with --mem-alloc), two pinned host
 * mirrors and two staging buffers for the checked call. 0, or -1 after one line on stderr. */
int         cb_device_alloc(cb_device_t *d, const cb_opts_t *opts, int rank, size_t bytes,
                            char **send_p, char **recv_p, char **hsend_p, char **hrecv_p);
/* Queues a copy of bytes on the rank's stream (any direction). 0, or -1. */
int         cb_device_copy(const cb_device_t *d, void *dst, const void *src, size_t bytes);
/* Waits for everything queued on the rank's stream. 0, or -1 (a device error, logged). */
int         cb_device_sync(const cb_device_t *d);
/* The checked call, ordered by the stream alone: produce queues the host mirrors' first bytes into
 * staging and from there, by a producer kernel, into the device buffers; consume queues a consumer
 * kernel from the receive buffer into staging and a copy to its mirror. 0, or -1. */
int         cb_device_produce(const cb_device_t *d, size_t bytes);
int         cb_device_consume(const cb_device_t *d, size_t bytes);
/* What produce and consume run: "producer kernel -> call -> consumer kernel", or copies. */
const char *cb_device_order(const cb_device_t *d);
/* Frees buffers, mirrors and stream (after the communicator is destroyed). NULL: nothing. */
void        cb_device_close(cb_device_t *d);

/* ---- data.c ---------------------------------------------------------------------------------- */

/* How one test (datatype x op x nranks) draws its inputs; see data.c for the patterns. */
typedef struct cb_data {
    strataDataType_t dtype;
    int              op;        /* cb_op_t; CB_OP_NONE for the collectives that only move
                                 * data (broadcast, all_gather, sendrecv, the all-to-alls,
                                 * gather, scatter) */
    int              nranks;
    uint64_t         seed;      /* changes for every checked call, identical on all ranks */
    size_t           tsize;     /* bytes per element */
    int              is_float;
    int              is_signed; /* integer types */
    /* floating types only */
    int              nz;        /* ranks with a nonzero input at each element */
    double           amp;       /* draws are integers in [-amp, amp] */
    double           mult;      /* input = mult * draw */
    double           avg_scale; /* 1/nranks rounded to dtype, as strata's avg applies it */
    int              avg_exact; /* 1: nranks is a power of two, every scaled input is exact */
    int              prod_twos; /* most factors 2 a product may hold */
} cb_data_t;

/* Bytes of one element; 0 for an unknown type. */
size_t cb_dtype_size(strataDataType_t dtype);
/* nccl-tests' names: "int8" .. "bfloat16". */
const char *cb_dtype_name(strataDataType_t dtype);
/* "sum", "prod", "max", "min", "avg", "mulsum"; "" for CB_OP_NONE. */
const char *cb_op_name(int op);

void cb_data_init(cb_data_t *data, strataDataType_t dtype, int op, int nranks, uint64_t seed);
/* cb_data_init for --compress: |partial sums| <= 2^15 (inside fp16's range) for every dtype. */
void cb_data_init_coded(cb_data_t *data, strataDataType_t dtype, int op, int nranks,
                        uint64_t seed);
/* The premul-sum scalar of `rank` (one element of dtype) into scalar (16 bytes suffice). */
void cb_data_premul_scalar(strataDataType_t dtype, int rank, void *scalar);
/* Writes rank's inputs for global elements first .. first + count - 1 into buf. */
void cb_data_fill(const cb_data_t *data, int rank, void *buf, size_t first, size_t count);
/* Fills bytes with a pattern no checked result can take, so unwritten output shows as wrong. */
void cb_data_poison(void *buf, size_t bytes);
/* Elements of buf that differ from rank src's inputs first .. first + count - 1. */
size_t cb_data_check_copy(const cb_data_t *data, int src, const void *buf, size_t first,
                          size_t count);
/* Elements of buf that differ from the reduction over all ranks of elements first ... */
size_t cb_data_check_reduce(const cb_data_t *data, const void *buf, size_t first, size_t count);
/* Elements of buf (count elements) that are no longer the poison pattern. */
size_t cb_data_check_poison(const cb_data_t *data, const void *buf, size_t count);
/* --compress: eps of the check's bound for the codec on dtype: none 0; fp16 2^-11, bf16 2^-8,
 * int8 1/254, each + the unit roundoff u of dtype (float 2^-24, half 2^-11, bfloat16 2^-8); topk
 * and sign 1. */
double cb_data_codec_eps(const strataCompressParams_t *params, strataDataType_t dtype);
/* --compress, a sum or avg over nnodes nodes of at most node_max ranks each: elements of buf
 * farther from the exact result than bound = eps x (N x A + S), N = nnodes, A = node_max x the
 * largest |input| (avg: scaled) bounding any node's partial sum, S = max |exact result| over the
 * count elements (plus collbench's tolerance of the exact check, 0); NaN is always wrong. The
 * bound is stored in *bound_p (may be NULL). */
size_t cb_data_check_bound(const cb_data_t *data, const void *buf, size_t first, size_t count,
                           double eps, int nnodes, int node_max, double *bound_p);

#endif
