/*
 * select.c - which algorithm runs a call: STRATA_ALGO, or by size and layout (auto).
 *
 * auto:  all-reduce of at most STRATA_SMALL_THRESHOLD bytes -> small (one round through the
 *        windows); otherwise, when some node holds several ranks -> hier (the intra-node phases
 *        through windows, one inter-node ring per rail); otherwise (one rank per node, or one
 *        rank) -> the flat ring (all-reduce, reduce-scatter, all-gather) or chain (broadcast,
 *        reduce). Every rank computes the same choice from the same count, layout and
 *        parameters, which all ranks must share.
 * With a tuning table (STRATA_TUNE_FILE, strataConfig_t.tuneFile) or a fabric profile
 * (STRATA_PROFILE_FILE), auto takes each all-reduce's algorithm and chunk from it instead
 * (tune/policy.h); STRATA_SMALL_THRESHOLD, when set, still hands the small sizes over. The
 * table's or model's lists for reduce-scatter, all-gather and all-to-all choose ring or hier per
 * size for those collectives the same way.
 * ring, hier, small force one; small applies to all-reduces that fit the windows' small area
 * (128 KiB) and the rest go as under auto; hier needs the node-local windows (several ranks) and
 * is the flat ring without. A forced algorithm that does not apply is said once at WARN per
 * reason (st_coll_forced_unfit).
 *
 * All-to-all runs as hier (the 2D scheme of hier.c) under the same rule as the others (some node
 * holds several ranks, host buffers), else as the flat pairwise exchange of a2a.c (row
 * "pairwise", ST_ALGO_RING, what STRATA_ALGO=ring forces). All-to-all-v, gather and scatter have
 * only the flat exchanges of a2a.c (rows "pairwise" and "direct"): auto and every STRATA_ALGO run
 * them (a forced hier or small is said once at WARN).
 *
 * The algorithms are one table (st_coll_algos): each row names the code that makes the op, the
 * collectives it runs, when it fits a call, and the algorithm STRATA_ALGO, the tuning and the cost
 * model call it by (tune/algo.h). The ring algorithm has four rows: the flat ring (all-reduce,
 * reduce-scatter, all-gather), the chain (broadcast, reduce), the pairwise all-to-all and the
 * direct gather and scatter.
 */
#include "config.h"

#include "base/log.h"
#include "base/param.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "engine/mismatch.h"
#include "topo/topo.h"
#include "tune/policy.h"

_Static_assert(ST_RING_MAX_CHANNELS == ST_TUNE_MAX_CHANNELS,
               "tuning tables and the flat ring agree on the most channels");

#define ST_COLL_BIT(_type) (1u << (_type))

/* One way of running calls: a row of st_coll_algos. */
typedef struct st_coll_algo {
    const char *name;  /* as the op reports it (strataCommGetPhaseTimes, collbench --phases) */
    st_algo_t   algo;  /* what STRATA_ALGO, the tuning and the cost model call it; ST_ALGO_LAST:
                        * none (send and receive) */
    unsigned    colls; /* ST_COLL_BIT(type) of every collective it runs */
    int (*fits)(const st_coll_args_t *args); /* 1 when it can take this call of those
                                              * collectives; NULL: any */
    st_status_t (*create)(const st_coll_args_t *args, st_op_t **op_p);
} st_coll_algo_t;

/* Whether the call's communicator has the node-local windows that hier and small run through
 * (several ranks, windows made at init). */
static int st_coll_has_windows(const st_coll_args_t *args)
{
    return args->comm->nranks > 1 && args->comm->intra != NULL;
}

static const st_coll_algo_t st_coll_algos[] = {
    {"ring", ST_ALGO_RING,
     ST_COLL_BIT(ST_COLL_ALLREDUCE) | ST_COLL_BIT(ST_COLL_REDUCESCATTER) |
         ST_COLL_BIT(ST_COLL_ALLGATHER),
     NULL, st_ring_create},
    {"chain", ST_ALGO_RING, ST_COLL_BIT(ST_COLL_BROADCAST) | ST_COLL_BIT(ST_COLL_REDUCE), NULL,
     st_chain_create},
    {"hier", ST_ALGO_HIER,
     ST_COLL_BIT(ST_COLL_ALLREDUCE) | ST_COLL_BIT(ST_COLL_BROADCAST) |
         ST_COLL_BIT(ST_COLL_REDUCE) | ST_COLL_BIT(ST_COLL_ALLGATHER) |
         ST_COLL_BIT(ST_COLL_REDUCESCATTER) | ST_COLL_BIT(ST_COLL_ALLTOALL),
     st_hier_fits, st_hier_create},
    {"small", ST_ALGO_SMALL, ST_COLL_BIT(ST_COLL_ALLREDUCE), st_small_fits, st_small_create},
    {"p2p", ST_ALGO_LAST, ST_COLL_BIT(ST_COLL_SEND) | ST_COLL_BIT(ST_COLL_RECV), NULL,
     st_p2p_create},
    /* the flat exchanges of a2a.c: STRATA_ALGO=ring forces them, as the flat algorithms */
    {"pairwise", ST_ALGO_RING, ST_COLL_BIT(ST_COLL_ALLTOALL) | ST_COLL_BIT(ST_COLL_ALLTOALLV),
     NULL, st_a2a_create},
    {"direct", ST_ALGO_RING, ST_COLL_BIT(ST_COLL_GATHER) | ST_COLL_BIT(ST_COLL_SCATTER), NULL,
     st_a2a_create},
};

/* The row of algo that runs collective `type`, or NULL when algo runs no such collective. */
static const st_coll_algo_t *st_coll_algo_of(st_algo_t algo, st_coll_type_t type)
{
    for (size_t i = 0; i < sizeof(st_coll_algos) / sizeof(st_coll_algos[0]); i++) {
        if (st_coll_algos[i].algo == algo && (st_coll_algos[i].colls & ST_COLL_BIT(type))) {
            return &st_coll_algos[i];
        }
    }
    return NULL;
}

/* Whether algo can run this call: it runs the collective and the call fits it. */
static int st_coll_algo_fits(st_algo_t algo, const st_coll_args_t *args)
{
    const st_coll_algo_t *a = st_coll_algo_of(algo, args->type);

    return a != NULL && (a->fits == NULL || a->fits(args));
}

st_status_t st_coll_config_check(void)
{
    int cma;

    if (st_algo_parse(st_core_config.algo) == ST_ALGO_LAST) {
        st_error(ST_SUB_COLL, "STRATA_ALGO '%s' is unknown (auto, ring, hier, small)",
                 st_core_config.algo);
        return ST_ERR_INVALID;
    }
    if (st_core_config.chunk_size == ST_SIZE_AUTO || st_core_config.small_threshold ==
                                                         ST_SIZE_AUTO) {
        st_error(ST_SUB_COLL, "STRATA_%s has no 'auto' value (bytes, e.g. 512k)",
                 st_core_config.chunk_size == ST_SIZE_AUTO ? "CHUNK_SIZE" : "SMALL_THRESHOLD");
        return ST_ERR_INVALID;
    }
    if (st_core_config.chunk_size == 0) {
        st_error(ST_SUB_COLL, "STRATA_CHUNK_SIZE 0 is not a chunk size (bytes, e.g. 512k)");
        return ST_ERR_INVALID;
    }
    if (st_core_config.hier_chunk_size == 0 ||
        (st_core_config.hier_chunk_size != ST_SIZE_AUTO &&
         st_core_config.hier_chunk_size > ST_TUNE_MAX_CHUNK)) {
        st_error(ST_SUB_COLL, "STRATA_HIER_CHUNK_SIZE %zu is not a chunk size (bytes, 64 .. %zu, "
                 "e.g. 512k; each local rank's window holds 2 x STRATA_PIPELINE_DEPTH of them)",
                 st_core_config.hier_chunk_size, (size_t)ST_TUNE_MAX_CHUNK);
        return ST_ERR_INVALID;
    }
    if (st_core_config.small_threshold > ST_INTRA_SMALL_MAX) {
        st_error(ST_SUB_COLL, "STRATA_SMALL_THRESHOLD %zu exceeds the %d B the small algorithm "
                 "handles", st_core_config.small_threshold, ST_INTRA_SMALL_MAX);
        return ST_ERR_INVALID;
    }
    if (st_core_config.ring_channels > ST_RING_MAX_CHANNELS) {
        st_error(ST_SUB_COLL, "STRATA_RING_CHANNELS %u is outside [0, %d]",
                 st_core_config.ring_channels, ST_RING_MAX_CHANNELS);
        return ST_ERR_INVALID;
    }
    if (st_core_config.pipeline_depth < 1 || st_core_config.pipeline_depth > ST_PIPE_MAX_DEPTH) {
        st_error(ST_SUB_COLL, "STRATA_PIPELINE_DEPTH %u is outside [1, %d]",
                 st_core_config.pipeline_depth, ST_PIPE_MAX_DEPTH);
        return ST_ERR_INVALID;
    }
    return st_intra_cma_param(&cma); /* STRATA_CMA: auto, 0 or 1 */
}

/* The size of a call as nccl-tests counts it (S, bytes). */
static size_t st_coll_bytes(const st_coll_args_t *args)
{
    size_t bytes = args->count * st_dtype_size(args->dtype);

    if (st_coll_info(args->type)->per_rank) {
        bytes *= (size_t)args->comm->nranks;
    }
    return bytes;
}

/* STRATA_ALGO forced an algorithm that does not apply to this call, which runs `ran` instead:
 * said at WARN once per process for each reason (a user who forced small and sees hier in a
 * profile should not have to guess). */
static void st_coll_forced_unfit(st_algo_t forced, const st_coll_args_t *args, st_algo_t ran)
{
    static int said[ST_ALGO_LAST][4];
    const char *ran_name = st_coll_algo_of(ran, args->type)->name; /* "chain" for a rooted ring */
    int         why;

    if (st_coll_algo_of(forced, args->type) == NULL) {
        why = 0; /* a collective the forced algorithm does not run */
    } else if (forced == ST_ALGO_SMALL && args->comm->intra != NULL) {
        why = 1; /* larger than the windows' small area */
    } else if (forced == ST_ALGO_HIER && st_coll_has_windows(args)) {
        why = 3; /* windows, but the call does not fit them (st_hier_fits) */
    } else {
        why = 2; /* small or hier without node-local windows */
    }
    if (__atomic_exchange_n(&said[forced][why], 1, __ATOMIC_RELAXED) != 0) {
        return;
    }
    if (why == 0) {
        st_warn(ST_SUB_COLL, "STRATA_ALGO %s does not run %s: it and the other collectives %s "
                "does not run go as under auto (%s here; said once)", st_algo_name(forced),
                st_coll_name(args->type), st_algo_name(forced), ran_name);
    } else if (why == 1) {
        st_warn(ST_SUB_COLL, "STRATA_ALGO small applies to all-reduces of at most %d B (the "
                "windows' small area): larger ones run as under auto (%s for %zu B)",
                ST_INTRA_SMALL_MAX, ran_name, st_coll_bytes(args));
    } else if (why == 3) {
        st_warn(ST_SUB_COLL, "STRATA_ALGO hier cannot take this %s: %s (STRATA_HIER_CHUNK_SIZE "
                "%zu B); such calls run as under auto (%s here; said once)",
                st_coll_name(args->type), args->type == ST_COLL_ALLTOALL && args->mem != ST_MEM_HOST
                ? "device buffers (all-to-all runs hier on host memory only)"
                : "a window chunk must hold an element of every rank (all-to-all: nranks^2 bytes)",
                args->comm->intra->chunk_bytes, ran_name);
    } else {
        st_warn(ST_SUB_COLL, "STRATA_ALGO %s needs node-local windows, which %s of %d rank%s "
                "has not: its collectives run %s", st_algo_name(forced), args->comm->name,
                args->comm->nranks, args->comm->nranks == 1 ? "" : "s", ran_name);
    }
}

/* The collective as the cost model and the tuning files name it (tune/model.h), or -1 for one
 * they do not price. */
static int st_coll_model_coll(st_coll_type_t type)
{
    switch (type) {
    case ST_COLL_ALLREDUCE:
        return ST_MODEL_ALLREDUCE;
    case ST_COLL_REDUCESCATTER:
        return ST_MODEL_REDUCESCATTER;
    case ST_COLL_ALLGATHER:
        return ST_MODEL_ALLGATHER;
    case ST_COLL_ALLTOALL:
        return ST_MODEL_ALLTOALL;
    default:
        return -1;
    }
}

/* Bytes up to which auto takes the small algorithm: STRATA_SMALL_THRESHOLD when set; by default
 * 64 KiB, and on one node 128 KiB / local ranks (each rank reads every local rank's contribution,
 * m x S bytes, where hier's traffic per rank does not grow with m). Measured with
 * collbench -np 2|4 all_reduce -b 32K -e 128K -f 2 -n 200 -w 20 -c 1 -z 1, STRATA_ALGO=small
 * against hier, medians of 5 runs, busbw GB/s: 2 ranks small 3.87 / 4.97 / 5.23 against hier
 * 3.64 / 4.42 / 5.43 at 32 / 64 / 128 KiB; 4 ranks on 2 cores small 2.34 / 2.84 / 2.80 against
 * hier 1.74 / 3.18 / 3.99 (bench/selection.sh checks auto against every forced algorithm). */
static size_t st_coll_small_threshold(const st_comm_t *comm)
{
    size_t t = st_core_config.small_threshold;

    if ((comm->tune == NULL || !comm->tune->env_small) && comm->nnodes == 1 &&
        comm->intra != NULL && comm->intra->local_size > 1) {
        t = ST_MIN(t, ((size_t)128 << 10) / (size_t)comm->intra->local_size);
    }
    return t;
}

/* The algorithm of a call; may set args->hier_chunk from the tuning. */
static st_algo_t st_coll_choose_any(st_coll_args_t *args);

static st_algo_t st_coll_choose(st_coll_args_t *args)
{
    st_algo_t forced = args->algo == ST_ALGO_AUTO ? st_algo_parse(st_core_config.algo)
                                                  : args->algo; /* checked at init */
    st_algo_t algo   = st_coll_choose_any(args);

    if ((forced == ST_ALGO_SMALL || forced == ST_ALGO_HIER) && algo != forced &&
        algo != ST_ALGO_LAST && args->comm->nranks > 1) {
        st_coll_forced_unfit(forced, args, algo);
    }
    return algo;
}

static st_algo_t st_coll_choose_any(st_coll_args_t *args)
{
    st_tune_choice_t choice;
    st_comm_t *comm = args->comm;
    st_algo_t  algo = args->algo;

    if (st_coll_info(args->type)->p2p) {
        return ST_ALGO_LAST; /* p2p */
    }
    if (algo == ST_ALGO_AUTO) {
        algo = st_algo_parse(st_core_config.algo); /* checked at init */
    }
    /* flat-ring channels for all-reduce (0: one, unless the tuning says): it is what the tuning
     * sweeps, the model prices and tests/emulation/test_hier_rails.sh checks on two links;
     * reduce-scatter and all-gather keep one ring until their channels' links are checked too
     * (with the first, rotated orders some sizes of them ran all on one link) */
    args->channels = args->type == ST_COLL_ALLREDUCE ? (int)st_core_config.ring_channels : 0;
    if (!st_coll_has_windows(args)) {
        return ST_ALGO_RING; /* what hier and small run through is missing */
    }
    if (algo != ST_ALGO_AUTO && !st_coll_algo_fits(algo, args)) {
        algo = ST_ALGO_AUTO; /* a forced small or hier the call does not fit */
    }
    if (algo == ST_ALGO_AUTO && args->type == ST_COLL_ALLREDUCE &&
        st_tune_policy_allreduce(comm->tune, comm->name, st_coll_bytes(args),
                                 st_coll_algo_fits(ST_ALGO_SMALL, args),
                                 comm->nranks <= 1 || comm->intra != NULL, &choice)) {
        args->hier_chunk = choice.hier_chunk; /* a tuning table's, or the model's */
        args->channels   = st_core_config.ring_channels > 0 ? (int)st_core_config.ring_channels
                                                            : choice.channels;
        return choice.algo;
    }
    if (algo == ST_ALGO_AUTO && st_coll_model_coll(args->type) > ST_MODEL_ALLREDUCE &&
        st_tune_policy_coll(comm->tune, comm->name, st_coll_model_coll(args->type),
                            st_coll_bytes(args), st_coll_algo_fits(ST_ALGO_HIER, args), &algo)) {
        return algo;
    }
    if (algo == ST_ALGO_AUTO) {
        if (st_coll_algo_fits(ST_ALGO_SMALL, args) &&
            st_coll_bytes(args) <= st_coll_small_threshold(comm)) {
            algo = ST_ALGO_SMALL;
        } else if (st_topo_nrails(comm->topo) > 1 && st_coll_algo_fits(ST_ALGO_HIER, args)) {
            algo = ST_ALGO_HIER;
        } else {
            algo = ST_ALGO_RING;
        }
    }
    return algo;
}

size_t st_coll_small_fast_max(st_comm_t *comm)
{
    if (!comm->small_fast_known) {
        st_algo_t algo = st_algo_parse(st_core_config.algo); /* checked at init */
        size_t    max = 0;

        /* what st_coll_choose_any gives an all-reduce of host memory with no algorithm of its
         * own; a tuning table or model decides per size itself (the normal path asks it) */
        if (comm->nranks > 1 && comm->intra != NULL &&
            (comm->tune == NULL || !comm->tune->have_table)) {
            if (algo == ST_ALGO_SMALL) {
                max = ST_INTRA_SMALL_MAX;
            } else if (algo == ST_ALGO_AUTO) {
                max = ST_MIN(st_coll_small_threshold(comm), (size_t)ST_INTRA_SMALL_MAX);
            }
        }
        comm->small_fast_max   = max;
        comm->small_fast_known = 1;
    }
    return comm->small_fast_max;
}

int st_coll_device_native(const st_coll_args_t *args)
{
    st_coll_args_t copy = *args;

    return args->comm->intra != NULL && args->comm->intra->dbase != NULL &&
           !st_coll_info(args->type)->p2p && st_coll_choose_any(&copy) == ST_ALGO_HIER;
}

st_status_t st_coll_op_create(const st_coll_args_t *call, st_op_t **op_p)
{
    st_coll_args_t        copy = *call;
    st_coll_args_t       *args = &copy;
    const st_coll_algo_t *algo;
    st_status_t           status;

    algo = st_coll_algo_of(st_coll_choose(args), args->type);
    if (algo == NULL) { /* a collective no row runs: not one of st_coll_type_t */
        *op_p = NULL;
        st_error(ST_SUB_COLL, "collective %d on %s rank %d: no algorithm runs it", (int)args->type,
                 args->comm->name, args->comm->rank);
        return ST_ERR_INTERNAL;
    }
    status = algo->create(args, op_p);
    if (status == ST_OK && *op_p != NULL) {
        (*op_p)->algo  = algo->name;
        (*op_p)->bytes = st_coll_bytes(args); /* count x size for send and recv */
    }
    if (status == ST_OK) {
        status = st_check_attach(args, op_p); /* STRATA_CHECK_MISMATCH */
    }
    return status;
}
