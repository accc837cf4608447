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
 * (tune/policy.h); STRATA_SMALL_THRESHOLD, when set, still hands the small sizes over.
 * ring, hier, small force one; small applies to all-reduces that fit the windows' small area
 * (128 KiB) and the rest go as under auto; hier needs the node-local windows (several ranks) and
 * is the flat ring without. A forced algorithm that does not apply is said once at WARN per
 * reason (st_coll_forced_unfit).
 */
#include "config.h"

#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "coll/coll.h"
#include "coll/intra.h"
#include "engine/mismatch.h"
#include "topo/topo.h"
#include "tune/policy.h"

_Static_assert(ST_RING_MAX_CHANNELS == ST_TUNE_MAX_CHANNELS,
               "tuning tables and the flat ring agree on the most channels");

static const char *const st_algo_names[] = {"auto", "ring", "hier", "small"};

st_algo_t st_algo_parse(const char *name)
{
    for (int a = 0; a < ST_ALGO_LAST; a++) {
        if (strcmp(name, st_algo_names[a]) == 0) {
            return (st_algo_t)a;
        }
    }
    return ST_ALGO_LAST;
}

const char *st_algo_name(st_algo_t algo)
{
    return (algo < ST_ALGO_LAST) ? st_algo_names[algo] : "unknown";
}

st_status_t st_coll_config_check(void)
{
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
    return ST_OK;
}

/* The size of a call as nccl-tests counts it (S, bytes). */
static size_t st_coll_bytes(const st_coll_args_t *args)
{
    size_t bytes = args->count * st_dtype_size(args->dtype);

    if (args->type == ST_COLL_ALLGATHER || args->type == ST_COLL_REDUCESCATTER) {
        bytes *= (size_t)args->comm->nranks;
    }
    return bytes;
}

/* STRATA_ALGO forced an algorithm that does not apply to this call, which runs `ran` instead:
 * said at WARN once per process for each reason (a user who forced small and sees hier in a
 * profile should not have to guess). */
static void st_coll_forced_unfit(st_algo_t forced, const st_coll_args_t *args, st_algo_t ran)
{
    static int said[ST_ALGO_LAST][3];
    const char *ran_name = (ran == ST_ALGO_RING && (args->type == ST_COLL_BROADCAST ||
                                                    args->type == ST_COLL_REDUCE))
                               ? "chain" : st_algo_name(ran);
    int         why;

    if (forced == ST_ALGO_SMALL) {
        why = args->type != ST_COLL_ALLREDUCE ? 0 : args->comm->intra == NULL ? 2 : 1;
    } else {
        why = 2; /* hier without node-local windows */
    }
    if (__atomic_exchange_n(&said[forced][why], 1, __ATOMIC_RELAXED) != 0) {
        return;
    }
    if (why == 0) {
        st_warn(ST_SUB_COLL, "STRATA_ALGO small applies to all-reduce only: %s and the other "
                "collectives run as under auto (%s here)", st_coll_name(args->type), ran_name);
    } else if (why == 1) {
        st_warn(ST_SUB_COLL, "STRATA_ALGO small applies to all-reduces of at most %d B (the "
                "windows' small area): larger ones run as under auto (%s for %zu B)",
                ST_INTRA_SMALL_MAX, ran_name, st_coll_bytes(args));
    } else {
        st_warn(ST_SUB_COLL, "STRATA_ALGO %s needs node-local windows, which %s of %d rank%s "
                "has not: its collectives run %s", st_algo_name(forced), args->comm->name,
                args->comm->nranks, args->comm->nranks == 1 ? "" : "s", ran_name);
    }
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

    if (args->type == ST_COLL_SEND || args->type == ST_COLL_RECV) {
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
    if (comm->nranks == 1 || comm->intra == NULL) {
        return ST_ALGO_RING;
    }
    if (algo == ST_ALGO_SMALL && !st_small_fits(args)) {
        algo = ST_ALGO_AUTO;
    }
    if (algo == ST_ALGO_AUTO && args->type == ST_COLL_ALLREDUCE &&
        st_tune_policy_allreduce(comm->tune, comm->name, st_coll_bytes(args),
                                 st_small_fits(args), comm->nranks <= 1 || comm->intra != NULL,
                                 &choice)) {
        args->hier_chunk = choice.hier_chunk; /* a tuning table's, or the model's */
        args->channels   = st_core_config.ring_channels > 0 ? (int)st_core_config.ring_channels
                                                            : choice.channels;
        return choice.algo == ST_MODEL_SMALL ? ST_ALGO_SMALL
               : choice.algo == ST_MODEL_HIER ? ST_ALGO_HIER : ST_ALGO_RING;
    }
    if (algo == ST_ALGO_AUTO) {
        if (args->type == ST_COLL_ALLREDUCE && st_small_fits(args) &&
            st_coll_bytes(args) <= st_core_config.small_threshold) {
            algo = ST_ALGO_SMALL;
        } else if (st_topo_nrails(comm->topo) > 1) {
            algo = ST_ALGO_HIER;
        } else {
            algo = ST_ALGO_RING;
        }
    }
    return algo;
}

st_status_t st_coll_op_create(const st_coll_args_t *call, st_op_t **op_p)
{
    st_coll_args_t  copy = *call;
    st_coll_args_t *args = &copy;
    st_status_t     status;
    const char     *name;

    switch (st_coll_choose(args)) {
    case ST_ALGO_LAST:
        status = st_p2p_create(args, op_p);
        name   = "p2p";
        break;
    case ST_ALGO_SMALL:
        status = st_small_create(args, op_p);
        name   = "small";
        break;
    case ST_ALGO_HIER:
        status = st_hier_create(args, op_p);
        name   = "hier";
        break;
    default:
        if (args->type == ST_COLL_BROADCAST || args->type == ST_COLL_REDUCE) {
            status = st_chain_create(args, op_p);
            name   = "chain";
        } else {
            status = st_ring_create(args, op_p);
            name   = "ring";
        }
        break;
    }
    if (status == ST_OK && *op_p != NULL) {
        (*op_p)->algo  = name;
        (*op_p)->bytes = (args->type == ST_COLL_SEND || args->type == ST_COLL_RECV)
                             ? args->count * st_dtype_size(args->dtype) : st_coll_bytes(args);
    }
    if (status == ST_OK) {
        status = st_check_attach(args, op_p); /* STRATA_CHECK_MISMATCH */
    }
    return status;
}
