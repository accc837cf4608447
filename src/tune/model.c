/*
 * model.c - the alpha-beta-gamma cost model of strata's all-reduce algorithms (see model.h and
 * docs/model.md, which give every formula with its units and source).
 *
 * The model prices what the code does, phase by phase: a phase is alpha times its steps plus its
 * bytes over the bandwidth of the link it crosses plus the bytes it reduces over gamma. hier's
 * three phases run as a pipeline over chunks, so its time is the slowest phase in steady state
 * plus the fill and drain of the others. Nothing here reads a file, the clock or the environment:
 * the library can call it to choose, and tests can check it against numbers worked out by hand.
 *
 * The compressed all-reduce (strataAllReduceCompressed) is hier with the coded inter-node step:
 * the codec's wire ratio scales the bytes on the rails, its encode and decode time per element
 * joins the reduction in the inter-node phase, and st_model_compress_breakeven finds where that
 * stops paying against the fastest uncompressed all-reduce.
 *
 * The second half keeps the arithmetic of the communication texts strata grew from, with their
 * simplifications, in the order they compute it: `collbench model --preset seed` must print their
 * figures to the digit, and the figures sit on rounding edges (8.205 s prints 8.21 only because
 * the double nearest 2.205 lies above it), so the operations below are not to be reordered.
 */
#include "config.h"

#include <math.h>
#include <string.h>

#include "codec/codec.h"
#include "reduce/reduce.h"
#include "tune/model.h"

_Static_assert(ST_MODEL_NCODECS == strataNumCodecs, "one codec cost per strataCodec_t");

static int st_model_split_ok(const st_model_fabric_t *fabric, const st_model_split_t *split);
static int st_model_credit_ok(const st_model_credit_t *c);
static int st_model_rest_ok(const st_model_rest_t *r);

st_status_t st_model_fabric_check(const st_model_fabric_t *fabric)
{
    int r;

    if (fabric == NULL || fabric->ranks_per_node < 1 || fabric->nodes < 1 ||
        fabric->nrails < 1 || fabric->nrails > ST_MODEL_MAX_RAILS ||
        !(fabric->intra.beta > 0) || !(fabric->intra.alpha >= 0) ||
        !(fabric->inter.alpha >= 0) || !(fabric->intra.gamma >= 0) ||
        !(fabric->inter.gamma >= 0)) {
        return ST_ERR_INVALID;
    }
    if (!(fabric->exchange_alpha >= 0) || !st_model_credit_ok(&fabric->small_credit) ||
        !st_model_rest_ok(&fabric->hier_rest)) {
        return ST_ERR_INVALID;
    }
    for (int c = 0; c < ST_MODEL_NCODECS; c++) {
        if (!(fabric->codec[c].encode >= 0 && fabric->codec[c].encode < INFINITY) ||
            !(fabric->codec[c].decode >= 0 && fabric->codec[c].decode < INFINITY)) {
            return ST_ERR_INVALID;
        }
    }
    for (r = 0; r < fabric->nrails; r++) {
        if (!(st_model_rail_beta(fabric, r) > 0) || !(fabric->rail_burst[r] >= 0) ||
            !st_model_credit_ok(&fabric->rail_credit[r])) {
            return ST_ERR_INVALID;
        }
    }
    return ST_OK;
}

/* This project's own: a token bucket (tc tbf on the emulated links, a policer on a real one)
 * lets some bytes through at once after an idle moment, so an operation that moves D bytes over
 * the rail finishes credit/beta earlier than D/beta says. How much depends on D and on how long
 * the rail rested (the bucket refills at the rate between operations), so calibrate measures the
 * credit of exchanges of several sizes and the model interpolates (docs/model.md); a profile
 * with one constant burst (rail_burst) takes min(burst, D). A link that is not shaped measures
 * about 0. */
static double st_model_credit_at(const st_model_credit_t *c, double burst, double bytes)
{
    double d = fmax(bytes, 0.0), credit, b0 = 0.0, c0 = 0.0;

    if (c->n == 0) {
        credit = burst;
    } else {
        credit = c->credit[c->n - 1];
        for (int i = 0; i < c->n; i++) {
            if (d <= c->bytes[i]) {
                credit = c0 + (c->credit[i] - c0) * (d - b0) / (c->bytes[i] - b0);
                break;
            }
            b0 = c->bytes[i];
            c0 = c->credit[i];
        }
    }
    return fmin(credit, d);
}

double st_model_rail_credit(const st_model_fabric_t *fabric, int rail, double bytes)
{
    return st_model_credit_at(&fabric->rail_credit[rail], fabric->rail_burst[rail], bytes) /
           st_model_rail_beta(fabric, rail);
}

/* hier_rest at `bytes`: linear between the points, constant outside them. */
static double st_model_rest_at(const st_model_rest_t *r, double bytes)
{
    if (bytes <= r->bytes[0]) {
        return r->seconds[0];
    }
    for (int i = 1; i < r->n; i++) {
        if (bytes <= r->bytes[i]) {
            return r->seconds[i - 1] + (r->seconds[i] - r->seconds[i - 1]) *
                                           (bytes - r->bytes[i - 1]) /
                                           (r->bytes[i] - r->bytes[i - 1]);
        }
    }
    return r->seconds[r->n - 1];
}

/* A measured curve's checks: at most ST_MODEL_CREDIT_POINTS points, x (bytes) increasing from
 * > 0, each y >= 0 and, with y_within_x (a credit in bytes), y <= x. */
static int st_model_points_ok(int n, const double *x, const double *y, int y_within_x)
{
    if (n < 0 || n > ST_MODEL_CREDIT_POINTS) {
        return 0;
    }
    for (int i = 0; i < n; i++) {
        if (!(x[i] > (i > 0 ? x[i - 1] : 0.0)) || !(y[i] >= 0) || (y_within_x && !(y[i] <= x[i]))) {
            return 0;
        }
    }
    return 1;
}

static int st_model_rest_ok(const st_model_rest_t *r)
{
    return st_model_points_ok(r->n, r->bytes, r->seconds, 0);
}

static int st_model_credit_ok(const st_model_credit_t *c)
{
    return st_model_points_ok(c->n, c->bytes, c->credit, 1);
}

double st_model_rail_beta(const st_model_fabric_t *fabric, int rail)
{
    return (fabric->rail_beta[rail] > 0) ? fabric->rail_beta[rail] : fabric->inter.beta;
}

/* bytes / gamma, or 0 when the reduction is not counted */
static double st_model_reduce_time(double bytes, double gamma)
{
    return (gamma > 0) ? bytes / gamma : 0.0;
}

/* Thakur, Rabenseifner & Gropp 2005, section 4 (ring / "Rabenseifner" reduce-scatter + all-gather):
 * every rank sends and receives 2(n-1) messages of bytes/n; the reduce-scatter half reduces (n-1)
 * of them. Patarasuk & Yuan 2009 show 2(n-1)/n bytes per rank is the least any all-reduce sends. */
double st_model_ring_allreduce(int n, double bytes, const st_model_level_t *level)
{
    if (n <= 1) {
        return 0.0;
    }
    return 2.0 * (n - 1) * level->alpha + 2.0 * (n - 1) / n * bytes / level->beta +
           st_model_reduce_time((double)(n - 1) / n * bytes, level->gamma);
}

/* Thakur et al. 2005: ring reduce-scatter, (n-1) steps of bytes/n, each reduced. */
double st_model_ring_reduce_scatter(int n, double bytes, const st_model_level_t *level)
{
    if (n <= 1) {
        return 0.0;
    }
    return (n - 1) * level->alpha + (double)(n - 1) / n * bytes / level->beta +
           st_model_reduce_time((double)(n - 1) / n * bytes, level->gamma);
}

/* Thakur et al. 2005: ring all-gather, (n-1) steps of bytes/n. */
double st_model_ring_allgather(int n, double bytes, const st_model_level_t *level)
{
    if (n <= 1) {
        return 0.0;
    }
    return (n - 1) * level->alpha + (double)(n - 1) / n * bytes / level->beta;
}

/* This project's own: the classic pipeline bound. The first chunk passes every stage (fill), the
 * last leaves the slowest stage and passes the ones after it (drain); in between one chunk leaves
 * the slowest stage per its time. Exact for equal chunks and a stage that never waits. */
double st_model_pipeline(const double *phase, int nphases, double chunks)
{
    double sum = 0.0, max = 0.0;
    int    i;

    for (i = 0; i < nphases; i++) {
        sum += phase[i];
        max  = (phase[i] > max) ? phase[i] : max;
    }
    return (chunks > 1) ? sum + (chunks - 1) * max : sum;
}

/* Share of the inter-node bytes rail r carries: split->rail_share, or 1/R. */
static double st_model_share(const st_model_fabric_t *fabric, const st_model_split_t *split,
                             int rail)
{
    double sum = 0.0;
    int    r;

    for (r = 0; r < fabric->nrails; r++) {
        sum += split->rail_share[r];
    }
    return (sum > 0) ? split->rail_share[rail] / sum : 1.0 / fabric->nrails;
}

/* Flat ring (ring.c) over n = g N ranks in node order, `channels` rings at once. The hop that
 * leaves a node is sent by its last local rank, g-1, whose rail (STRATA_RAIL_IFNAMES: local rank
 * l sends through rail l mod R) carries the ring: channel c crosses on rail (g-1+c) mod R (with
 * several channels ring.c's snake order leaves even nodes on that rail and odd ones on rail
 * c mod R: with two nodes each direction of a channel on one of them, and the slowest sets the
 * pace as this one rail's does when the channels cover the rails evenly). Each
 * ring carries bytes/channels and its slowest link sets its pace: a node boundary, on a rail
 * shared by the channels mapped to it (or the window copy when there is one node). Latency:
 * every step waits for the slowest hop. The level one channel sees: */
static int st_model_flat_rail(const st_model_fabric_t *fabric, int c)
{
    return (fabric->ranks_per_node - 1 + c) % fabric->nrails;
}

static void st_model_flat_level(const st_model_fabric_t *fabric, int channels, int c,
                                st_model_level_t *level)
{
    int on_rail = 0, rail = st_model_flat_rail(fabric, c);

    level->gamma = 0.0; /* counted once per rank by the callers */
    if (fabric->nodes > 1) {
        for (int k = 0; k < channels; k++) {
            on_rail += st_model_flat_rail(fabric, k) == rail;
        }
        level->beta  = fmin(st_model_rail_beta(fabric, rail) / on_rail,
                            fabric->intra.beta / channels);
        level->alpha = fmax(fabric->inter.alpha, fabric->intra.alpha);
    } else {
        level->beta  = fabric->intra.beta / channels;
        level->alpha = fabric->intra.alpha;
    }
}

/* The slowest of the flat ring's channels, each running `ring` (the textbook all-reduce or
 * all-gather) over all n ranks on its bytes/channels. */
static double st_model_flat_worst(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                  double bytes,
                                  double (*ring)(int, double, const st_model_level_t *))
{
    int              n        = fabric->ranks_per_node * fabric->nodes;
    int              channels = (split->channels > 0) ? split->channels : 1;
    double           worst    = 0.0;
    st_model_level_t level;

    for (int c = 0; c < channels; c++) {
        st_model_flat_level(fabric, channels, c, &level);
        worst = fmax(worst, ring(n, bytes / channels, &level));
    }
    return worst;
}

/* The flat ring all-reduce: the slowest channel, plus the rank's reduction of all channels. */
static double st_model_ring_flat(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                 double bytes)
{
    int n = fabric->ranks_per_node * fabric->nodes;

    if (n <= 1) {
        return 0.0;
    }
    return st_model_flat_worst(fabric, split, bytes, st_model_ring_allreduce) +
           st_model_reduce_time((double)(n - 1) / n * bytes,
                                fabric->nodes > 1 ? fabric->inter.gamma : fabric->intra.gamma);
}

/* hier (hier.c) on one chunk of `bytes`, phase by phase. This project's own composition of
 * Thakur et al.'s terms:
 *   intra reduce-scatter: local rank l reads shard l (bytes/g) from each of its g-1 peers' windows
 *     and reduces it: alpha_intra + (g-1)/g bytes/beta_intra + (g-1)/g bytes/gamma_intra;
 *   inter all-reduce: every local rank runs a ring over the N nodes on its shard; rail r carries
 *     the shards of the local ranks mapped to it, share_r of the bytes, so the phase lasts as long
 *     as the slowest rail: max_r 2(N-1) alpha_inter + 2(N-1)/N share_r bytes/beta_r, plus each
 *     rank's reduction (N-1)/N (bytes/g)/gamma_inter;
 *   intra all-gather: alpha_intra + (g-1)/g bytes/beta_intra.
 * With a codec (the compressed all-reduce, docs/model.md formula 14) the inter phase is hier.c's
 * coded step: two rounds of direct messages, all in flight, of the ring's bytes times the codec's
 * ratio, 2 alpha_inter + 2(N-1)/N share_r ratio bytes/beta_r per rail, plus the reduction and
 * the rank's codec work on its shard, (bytes/g/es) (encode + (2N-1)/N decode). */
static void st_model_hier_chunk(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                st_model_coll_t coll, const st_model_codec_t *codec, double bytes,
                                double *phase)
{
    int              g = fabric->ranks_per_node, N = fabric->nodes, r;
    double           n = (double)g * N, t, share;
    st_model_level_t level;

    phase[ST_MODEL_PH_INTRA_RS] = 0.0;
    phase[ST_MODEL_PH_INTRA_AG] = 0.0;
    phase[ST_MODEL_PH_INTER]    = 0.0;
    if (g > 1 && coll == ST_MODEL_ALLGATHER) { /* the own piece in, the node's part gathered */
        phase[ST_MODEL_PH_INTRA_RS] = fabric->intra.alpha + 2.0 * bytes / n / fabric->intra.beta;
        phase[ST_MODEL_PH_INTRA_AG] =
            fabric->intra.alpha + (n - 1) / n * bytes / fabric->intra.beta;
    } else if (g > 1 && coll == ST_MODEL_ALLTOALL) { /* in, gathered per node; out */
        phase[ST_MODEL_PH_INTRA_RS] = fabric->intra.alpha + 2.0 * bytes / fabric->intra.beta;
        phase[ST_MODEL_PH_INTRA_AG] = fabric->intra.alpha + bytes / fabric->intra.beta;
    } else if (g > 1) {
        phase[ST_MODEL_PH_INTRA_RS] =
            fabric->intra.alpha + (double)(g - 1) / g * bytes / fabric->intra.beta +
            st_model_reduce_time((double)(g - 1) / g * bytes, fabric->intra.gamma);
        phase[ST_MODEL_PH_INTRA_AG] =
            fabric->intra.alpha +
            (coll == ST_MODEL_REDUCESCATTER ? bytes / n : (double)(g - 1) / g * bytes) /
                fabric->intra.beta;
    }
    if (N > 1) {
        for (r = 0; r < fabric->nrails; r++) {
            share = st_model_share(fabric, split, r);
            if (share <= 0) {
                continue; /* an idle rail costs no latency either */
            }
            level.alpha = fabric->inter.alpha;
            level.beta  = st_model_rail_beta(fabric, r);
            level.gamma = 0.0;
            if (codec != NULL) { /* hier.c's coded step: two rounds of N-1 messages in flight */
                t = 2.0 * level.alpha +
                    2.0 * (N - 1) / N * share * codec->ratio * bytes / level.beta;
                phase[ST_MODEL_PH_INTER] = fmax(phase[ST_MODEL_PH_INTER], t);
                continue;
            }
            switch (coll) {
            case ST_MODEL_REDUCESCATTER:
                t = st_model_ring_reduce_scatter(N, share * bytes, &level);
                break;
            case ST_MODEL_ALLGATHER:
                t = st_model_ring_allgather(N, share * bytes, &level);
                break;
            case ST_MODEL_ALLTOALL: /* the node's g chunks, (N-1)/N of them leave, one message
                                     * per node pair and rail, all in flight */
                t = level.alpha + (double)(N - 1) / N * share * g * bytes / level.beta;
                break;
            default:
                t = st_model_ring_allreduce(N, share * bytes, &level);
                break;
            }
            phase[ST_MODEL_PH_INTER] = fmax(phase[ST_MODEL_PH_INTER], t);
        }
        if (coll == ST_MODEL_ALLREDUCE || coll == ST_MODEL_REDUCESCATTER) {
            phase[ST_MODEL_PH_INTER] +=
                st_model_reduce_time((double)(N - 1) / N * bytes / g, fabric->inter.gamma);
        }
        if (codec != NULL) { /* each element of the rank's shard encoded once; the others'
                              * blocks of it decoded in each round, its own encoded sum too */
            phase[ST_MODEL_PH_INTER] += bytes / g / codec->elem_bytes *
                                        (codec->encode + (2.0 * N - 1) / N * codec->decode);
        }
    }
}

/* The bytes each node sends out per byte of a hierarchical collective's size: all-reduce
 * 2(N-1)/N, reduce-scatter and all-gather (N-1)/N, all-to-all g (N-1)/N (every local rank's
 * buffer, less the part for its own node). */
static double st_model_hier_out(const st_model_fabric_t *fabric, st_model_coll_t coll)
{
    double N = fabric->nodes;

    switch (coll) {
    case ST_MODEL_REDUCESCATTER:
    case ST_MODEL_ALLGATHER:
        return (N - 1) / N;
    case ST_MODEL_ALLTOALL:
        return fabric->ranks_per_node * (N - 1) / N;
    default:
        return 2.0 * (N - 1) / N;
    }
}

/* small (small.c), this project's own: every rank writes its bytes to its window (one
 * synchronisation), reads and reduces the g-1 others; with several nodes the leader then sends its
 * partial to the N-1 other leaders and receives theirs over rail 0 (one latency, exchange_alpha
 * when measured, all messages in flight), reduces them, and the node reads the result (one more
 * synchronisation). */
static double st_model_small(const st_model_fabric_t *fabric, double bytes)
{
    int    g = fabric->ranks_per_node, N = fabric->nodes;
    double t;

    t = fabric->intra.alpha + (g - 1) * bytes / fabric->intra.beta +
        st_model_reduce_time((g - 1) * bytes, fabric->intra.gamma);
    if (N > 1) {
        t += (fabric->exchange_alpha > 0 ? fabric->exchange_alpha : fabric->inter.alpha) +
             (N - 1) * bytes / st_model_rail_beta(fabric, 0) -
             (fabric->small_credit.n > 0
                  ? st_model_credit_at(&fabric->small_credit, 0.0, (N - 1) * bytes) /
                        st_model_rail_beta(fabric, 0)
                  : st_model_rail_credit(fabric, 0, (N - 1) * bytes)) +
             st_model_reduce_time((N - 1) * bytes, fabric->inter.gamma) + fabric->intra.alpha +
             bytes / fabric->intra.beta;
    }
    return t;
}

/* What the rails' burst credits save a hierarchical all-reduce of `bytes`, once per operation:
 * the rails end together no earlier than the slowest of (its bytes/beta - its credit), so the
 * gain is max_r D_r/beta_r - max_r (D_r/beta_r - credit_r), D_r = 2(N-1)/N share_r wire bytes
 * (wire: the codec's ratio, 1 uncompressed). A rail's credit in time is min(D_r/beta_r, rest)
 * with a measured hier_rest, else its credit curve's. */
static double st_model_hier_credit(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                   st_model_coll_t coll, double wire, double bytes)
{
    double tmax = 0.0, tcred = 0.0;
    double rest = fabric->hier_rest.n > 0 ? st_model_rest_at(&fabric->hier_rest, bytes) : -1.0;

    for (int r = 0; r < fabric->nrails; r++) {
        double d =
            st_model_hier_out(fabric, coll) * st_model_share(fabric, split, r) * wire * bytes;
        double t = d / st_model_rail_beta(fabric, r);

        if (d > 0) {
            double credit = (rest >= 0) ? fmin(t, rest) : st_model_rail_credit(fabric, r, d);

            tmax  = fmax(tmax, t);
            tcred = fmax(tcred, t - credit);
        }
    }
    return tmax - tcred;
}

/* The flat pairwise all-to-all (coll/a2a.c), own: every rank sends n-1 blocks of S/n, all in
 * flight; the g (N-1)/N S that leave each node cross its rails, local rank l on rail l mod R, so
 * rail r carries the blocks of its ranks and sets the pace; the (g-1)/n S inside the node go
 * through the node's shared memory at the same time; each message costs its latency. */
static double st_model_pairwise(const st_model_fabric_t *fabric, double bytes)
{
    int    g = fabric->ranks_per_node, N = fabric->nodes, n = g * N;
    double inter = 0.0, intra;

    if (n <= 1) {
        return 0.0;
    }
    intra = (double)(g - 1) / n * bytes / fabric->intra.beta;
    for (int r = 0; r < fabric->nrails && N > 1; r++) {
        int on_rail = 0;

        for (int l = 0; l < g; l++) {
            on_rail += l % fabric->nrails == r;
        }
        inter = fmax(inter, on_rail * (double)(N - 1) / N * bytes / st_model_rail_beta(fabric, r));
    }
    return (g - 1) * fabric->intra.alpha + (n - g) * fabric->inter.alpha + fmax(inter, intra);
}

/* hier (any collective; with a codec the compressed all-reduce) of `bytes`: the pipeline of
 * st_model_hier_chunk's phases over the chunks, less the rails' burst credit. */
static void st_model_hier(const st_model_fabric_t *fabric, const st_model_split_t *split,
                          st_model_coll_t coll, const st_model_codec_t *codec, double bytes,
                          st_model_time_t *time)
{
    double chunk_phase[ST_MODEL_NPHASES], chunks = 1.0;

    if (split->chunk > 0 && bytes > (double)split->chunk) {
        chunks = ceil(bytes / (double)split->chunk);
    }
    st_model_hier_chunk(fabric, split, coll, codec, bytes / chunks, chunk_phase);
    for (int i = 0; i < ST_MODEL_NPHASES; i++) {
        time->phase[i] = chunk_phase[i] * chunks;
    }
    time->chunks = chunks;
    time->total  = st_model_pipeline(chunk_phase, ST_MODEL_NPHASES, chunks);
    if (fabric->nodes > 1) {
        double credit =
            fmin(st_model_hier_credit(fabric, split, coll, codec != NULL ? codec->ratio : 1.0,
                                      bytes),
                 0.9 * time->phase[ST_MODEL_PH_INTER]);

        time->phase[ST_MODEL_PH_INTER] -= credit;
        time->total -= credit;
    }
}

/* A split the model can price on this fabric: not NULL, no negative rail share. */
static int st_model_split_ok(const st_model_fabric_t *fabric, const st_model_split_t *split)
{
    if (split == NULL) {
        return 0;
    }
    for (int r = 0; r < fabric->nrails; r++) {
        if (!(split->rail_share[r] >= 0)) {
            return 0;
        }
    }
    return 1;
}

const char *st_model_coll_name(int coll)
{
    static const char *const names[ST_MODEL_NCOLLS] = {"allreduce", "reduce_scatter",
                                                       "all_gather", "alltoall"};

    return (coll >= 0 && coll < ST_MODEL_NCOLLS) ? names[coll] : NULL;
}

st_status_t st_model_allreduce(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               st_algo_t algo, double bytes, st_model_time_t *time_p)
{
    return st_model_collective(fabric, split, ST_MODEL_ALLREDUCE, algo, bytes, time_p);
}

st_status_t st_model_collective(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                st_model_coll_t coll, st_algo_t algo, double bytes,
                                st_model_time_t *time_p)
{
    st_model_time_t time;
    double          chunks = 1.0;

    if (st_model_fabric_check(fabric) != ST_OK || !st_model_split_ok(fabric, split) ||
        !(bytes >= 0) || (unsigned)coll >= ST_MODEL_NCOLLS) {
        return ST_ERR_INVALID;
    }
    memset(&time, 0, sizeof(time));
    switch (algo) {
    case ST_ALGO_RING: {
        int    n = fabric->ranks_per_node * fabric->nodes;
        double ch = (split->channels > 0) ? split->channels : 1, out = 2.0 * (n - 1) / n;

        switch (coll) {
        case ST_MODEL_REDUCESCATTER: /* one channel (coll/select.c), ring.c's reduce-scatter */
            ch = 1;
            out = (double)(n - 1) / n;
            time.phase[ST_MODEL_PH_INTER] =
                n <= 1 ? 0.0
                       : st_model_flat_worst(fabric, &(st_model_split_t){.channels = 1}, bytes,
                                             st_model_ring_reduce_scatter) +
                             st_model_reduce_time(out * bytes, fabric->nodes > 1
                                                                   ? fabric->inter.gamma
                                                                   : fabric->intra.gamma);
            break;
        case ST_MODEL_ALLGATHER:
            ch = 1;
            out = (double)(n - 1) / n;
            time.phase[ST_MODEL_PH_INTER] =
                n <= 1 ? 0.0
                       : st_model_flat_worst(fabric, &(st_model_split_t){.channels = 1}, bytes,
                                             st_model_ring_allgather);
            break;
        case ST_MODEL_ALLTOALL:
            ch = 1;
            out = fabric->ranks_per_node * (double)(fabric->nodes - 1) / fabric->nodes;
            time.phase[ST_MODEL_PH_INTER] = st_model_pairwise(fabric, bytes);
            break;
        default:
            time.phase[ST_MODEL_PH_INTER] = st_model_ring_flat(fabric, split, bytes);
            break;
        }
        if (fabric->nodes > 1) {
            time.phase[ST_MODEL_PH_INTER] -=
                fmin(st_model_rail_credit(fabric, st_model_flat_rail(fabric, 0), out * bytes / ch),
                     0.9 * time.phase[ST_MODEL_PH_INTER]);
        }
        time.total                    = time.phase[ST_MODEL_PH_INTER];
        break;
    }
    case ST_ALGO_HIER:
        st_model_hier(fabric, split, coll, NULL, bytes, &time);
        chunks = time.chunks;
        break;
    case ST_ALGO_SMALL:
        if (coll != ST_MODEL_ALLREDUCE || bytes > (double)split->small_max) {
            return ST_ERR_UNSUPPORTED;
        }
        time.phase[ST_MODEL_PH_INTER] = st_model_small(fabric, bytes);
        time.total                    = time.phase[ST_MODEL_PH_INTER];
        break;
    default:
        return ST_ERR_INVALID;
    }
    time.chunks = chunks;
    *time_p     = time;
    return ST_OK;
}

st_status_t st_model_choose(const st_model_fabric_t *fabric, const st_model_split_t *split,
                            double bytes, st_algo_t *algo_p, st_model_time_t *time_p)
{
    return st_model_choose_coll(fabric, split, ST_MODEL_ALLREDUCE, bytes, algo_p, time_p);
}

st_status_t st_model_choose_coll(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                 st_model_coll_t coll, double bytes, st_algo_t *algo_p,
                                 st_model_time_t *time_p)
{
    st_model_time_t best, t;
    st_algo_t       best_algo = ST_ALGO_LAST;
    int             a;

    memset(&best, 0, sizeof(best));
    for (a = ST_ALGO_FIRST; a < ST_ALGO_LAST; a++) {
        if (st_model_collective(fabric, split, coll, (st_algo_t)a, bytes, &t) != ST_OK) {
            continue;
        }
        if (best_algo == ST_ALGO_LAST || t.total < best.total) {
            best      = t;
            best_algo = (st_algo_t)a;
        }
    }
    if (best_algo == ST_ALGO_LAST) {
        return ST_ERR_INVALID;
    }
    *algo_p = best_algo;
    *time_p = best;
    return ST_OK;
}

st_status_t st_model_best_chunk(const st_model_fabric_t *fabric, const st_model_split_t *split,
                                double bytes, size_t min_chunk, size_t max_chunk,
                                size_t *chunk_p, st_model_time_t *time_p)
{
    st_model_split_t s = *split;
    st_model_time_t  best, t;
    size_t           chunk, best_chunk = 0;
    st_status_t      status;

    memset(&best, 0, sizeof(best));
    if (min_chunk == 0 || min_chunk > max_chunk) {
        return ST_ERR_INVALID;
    }
    for (chunk = min_chunk; chunk <= max_chunk && chunk != 0; chunk *= 2) {
        s.chunk = chunk;
        status  = st_model_allreduce(fabric, &s, ST_ALGO_HIER, bytes, &t);
        if (status != ST_OK) {
            return status;
        }
        if (best_chunk == 0 || t.total < best.total) {
            best       = t;
            best_chunk = chunk;
        }
        if ((double)chunk >= bytes) {
            break; /* larger chunks are all one chunk */
        }
    }
    *chunk_p = best_chunk;
    *time_p  = best;
    return ST_OK;
}

/* Thakur et al. 2005 ring all-gather of n * bytes_per_rank (every rank ends with all of it), over
 * the flat ring's channels: the same links and pace as st_model_ring_flat, no reduction. */
double st_model_flat_allgather(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               double bytes_per_rank)
{
    double n = (double)fabric->ranks_per_node * fabric->nodes;

    return st_model_flat_worst(fabric, split, n * bytes_per_rank, st_model_ring_allgather);
}

/* ---- compression ------------------------------------------------------------------------- */

/* Measured on the machine strata is developed on (2 cores of an Intel Xeon, the -O3 build, one
 * rank alone, as on a node with a core per rank; 4 MiB of gradient-like float32 with the error
 * feedback's residual, the input and the timing of `collbench calibrate`): the casts, int8 and
 * sign vectorise (about a nanosecond an element, none's encode being the copy with the residual
 * added), topk's encode is a quickselect, ten times slower. Two ranks sharing the two cores
 * measured up to twice these. A profile from calibrate replaces them with the fabric's own. */
void st_model_codec_defaults(st_model_codec_cost_t cost[ST_MODEL_NCODECS])
{
    static const st_model_codec_cost_t def[ST_MODEL_NCODECS] = {
        [strataCodecNone] = {1.1e-9, 0.27e-9},  [strataCodecFp16] = {2.0e-9, 0.37e-9},
        [strataCodecBf16] = {1.25e-9, 0.22e-9}, [strataCodecInt8] = {1.3e-9, 0.2e-9},
        [strataCodecTopk] = {10.6e-9, 0.3e-9},  [strataCodecSign] = {1.75e-9, 0.8e-9},
    };

    memcpy(cost, def, sizeof(def));
}

double st_model_codec_ratio(const strataCompressParams_t *p, strataDataType_t dt, double elems)
{
    double n = fmax(1.0, floor(elems + 0.5));

    if (p == NULL || st_codec_check(p) != NULL || !st_codec_dtype_ok(dt) || !(n < 0x1p52)) {
        return 0.0;
    }
    return (double)st_codec_wire_bytes(p, dt, (size_t)n) / (n * (double)st_dtype_size(dt));
}

st_status_t st_model_codec_for(const st_model_fabric_t *fabric, const st_model_split_t *split,
                               const strataCompressParams_t *p, strataDataType_t dt,
                               double bytes, st_model_codec_t *codec_p)
{
    st_model_codec_t c;
    double           chunk;

    if (st_model_fabric_check(fabric) != ST_OK || split == NULL || !(bytes >= 0)) {
        return ST_ERR_INVALID;
    }
    chunk = (split->chunk > 0 && bytes > (double)split->chunk) ? (double)split->chunk : bytes;
    c.elem_bytes = st_codec_dtype_ok(dt) ? (double)st_dtype_size(dt) : 0.0;
    c.ratio = st_model_codec_ratio(p, dt, chunk / c.elem_bytes /
                                              ((double)fabric->ranks_per_node * fabric->nodes));
    if (!(c.ratio > 0)) {
        return ST_ERR_INVALID;
    }
    c.encode = fabric->codec[p->codec].encode;
    c.decode = fabric->codec[p->codec].decode;
    *codec_p = c;
    return ST_OK;
}

st_status_t st_model_allreduce_compressed(const st_model_fabric_t *fabric,
                                          const st_model_split_t *split,
                                          const st_model_codec_t *codec, double bytes,
                                          st_model_time_t *time_p)
{
    st_model_time_t time;

    if (st_model_fabric_check(fabric) != ST_OK || !st_model_split_ok(fabric, split) ||
        !(bytes >= 0) || codec == NULL || !(codec->ratio > 0 && codec->ratio < INFINITY) ||
        !(codec->elem_bytes > 0) || !(codec->encode >= 0) || !(codec->decode >= 0)) {
        return ST_ERR_INVALID;
    }
    memset(&time, 0, sizeof(time));
    /* one node: strataAllReduceCompressed is strataAllReduce, priced here as hier */
    st_model_hier(fabric, split, ST_MODEL_ALLREDUCE, fabric->nodes > 1 ? codec : NULL, bytes,
                  &time);
    *time_p = time;
    return ST_OK;
}

/* The compressed all-reduce's time less the fastest uncompressed one's (negative: it pays). */
static st_status_t st_model_compress_gain(const st_model_fabric_t *fabric,
                                          const st_model_split_t *split,
                                          const strataCompressParams_t *p, strataDataType_t dt,
                                          double bytes, double *diff_p)
{
    st_model_codec_t codec;
    st_model_time_t  tc, tu;
    st_algo_t        algo;
    st_status_t      status;

    status = st_model_codec_for(fabric, split, p, dt, bytes, &codec);
    if (status == ST_OK) {
        status = st_model_allreduce_compressed(fabric, split, &codec, bytes, &tc);
    }
    if (status == ST_OK) {
        status = st_model_choose(fabric, split, bytes, &algo, &tu);
    }
    if (status == ST_OK) {
        *diff_p = tc.total - tu.total;
    }
    return status;
}

/* fabric with every rail's bandwidth scaled so that their mean is beta */
static void st_model_scale_rails(const st_model_fabric_t *fabric, double beta,
                                 st_model_fabric_t *f)
{
    double mean = 0.0, k;

    for (int r = 0; r < fabric->nrails; r++) {
        mean += st_model_rail_beta(fabric, r) / fabric->nrails;
    }
    k  = beta / mean;
    *f = *fabric;
    f->inter.beta *= k;
    for (int r = 0; r < fabric->nrails; r++) {
        f->rail_beta[r] *= k;
    }
}

/* Where the sign of the gain changes, x on a geometric scan from lo to hi by 2: pays(x) is
 * "compression pays at x". With pays_below (bandwidth), the largest x that pays, made exact by
 * bisection against the next point: 0 when none does, INFINITY when hi does. Otherwise (size) the
 * smallest x from which every point up to hi pays: 0 when lo does, INFINITY when hi does not. */
typedef struct st_model_be_arg {
    const st_model_fabric_t      *fabric;
    const st_model_split_t       *split;
    const strataCompressParams_t *p;
    strataDataType_t              dt;
    double                        bytes;
    int                           by_beta;
} st_model_be_arg_t;

static st_status_t st_model_be_pays(const st_model_be_arg_t *a, double x, int *pays_p)
{
    st_model_fabric_t f;
    double            diff;
    st_status_t       status;

    if (a->by_beta) {
        st_model_scale_rails(a->fabric, x, &f);
        status = st_model_compress_gain(&f, a->split, a->p, a->dt, a->bytes, &diff);
    } else {
        status = st_model_compress_gain(a->fabric, a->split, a->p, a->dt, x, &diff);
    }
    *pays_p = status == ST_OK && diff < 0;
    return status;
}

static st_status_t st_model_be_find(const st_model_be_arg_t *a, double lo, double hi,
                                    double *x_p)
{
    double      x, last = 0.0; /* by_beta: the last that pays; else the last that does not */
    int         pays, top = 0;
    st_status_t status;

    for (x = lo; x <= hi; x *= 2) {
        status = st_model_be_pays(a, x, &pays);
        if (status != ST_OK) {
            return status;
        }
        if (pays == a->by_beta) {
            last = x;
        }
        top = pays;
    }
    if (a->by_beta ? (last == 0.0 || top) : (last == 0.0 || !top)) {
        *x_p = a->by_beta ? (top ? INFINITY : 0.0) : (top ? 0.0 : INFINITY);
        return ST_OK;
    }
    /* the crossing lies between last and 2 last: bisect in the logarithm */
    for (double l = last, h = 2 * last; h / l - 1 > 1e-7;) {
        double m = sqrt(l * h);

        status = st_model_be_pays(a, m, &pays);
        if (status != ST_OK) {
            return status;
        }
        *(pays == a->by_beta ? &l : &h) = m;
        *x_p = a->by_beta ? l : h;
    }
    return ST_OK;
}

st_status_t st_model_compress_breakeven(const st_model_fabric_t *fabric,
                                        const st_model_split_t *split,
                                        const strataCompressParams_t *p, strataDataType_t dt,
                                        double bytes, st_model_breakeven_t *be_p)
{
    st_model_be_arg_t    a = {fabric, split, p, dt, bytes, 1};
    st_model_breakeven_t be;
    st_model_codec_t     codec;
    st_status_t          status;

    if (!(bytes > 0) || st_model_codec_for(fabric, split, p, dt, bytes, &codec) != ST_OK) {
        return ST_ERR_INVALID;
    }
    status = st_model_be_find(&a, 1e3, 1e13, &be.beta_max);
    if (status == ST_OK) {
        a.by_beta = 0;
        status    = st_model_be_find(&a, 1.0, 0x1p50, &be.bytes_min);
    }
    if (status == ST_OK) {
        *be_p = be;
    }
    return status;
}

/* This project's own: `buckets` equal buckets of comm/buckets each; bucket i (1-based) is ready at
 * i backward/buckets and goes after bucket i-1, so the last one ends at
 * max_i (i backward/buckets + (buckets - i + 1) comm/buckets), at i = 1 when comm >= backward and
 * at i = buckets otherwise. Exposed = that end - backward. */
double st_model_bucket_exposed(double comm, double backward, int buckets)
{
    double b = (buckets > 0) ? buckets : 1;

    return fmax(comm / b, comm - backward * (b - 1) / b);
}

/* Vogels, Karimireddy & Jaggi 2019 (PowerSGD): a rows x cols gradient matrix M is sent as
 * P = M Q (rows x r) and Q = M^T P (cols x r), two all-reduces; vectors are all-reduced as they
 * are. Elements per matrix: r (rows + cols) instead of rows cols. */
void st_model_powersgd(const st_model_matrix_t *m, int n, int rank, double *p_elems_p,
                       double *q_elems_p, double *dense_p)
{
    double p = 0.0, q = 0.0, dense = 0.0;
    int    i;

    for (i = 0; i < n; i++) {
        dense += m[i].rows * m[i].cols * m[i].count;
        if (m[i].cols <= 1 || m[i].rows <= 1) {
            p += m[i].rows * m[i].cols * m[i].count;
        } else {
            p += (double)rank * m[i].rows * m[i].count;
            q += (double)rank * m[i].cols * m[i].count;
        }
    }
    *p_elems_p = p;
    *q_elems_p = q;
    *dense_p   = dense;
}

/* ---- the communication texts' arithmetic ----------------------------------------------------- */

void st_model_seed_preset(st_model_seed_in_t *in)
{
    static const double ratio[ST_MODEL_SEED_NCOMP] = {1, 100, 1000, 4, 32, 1};
    static const double over[ST_MODEL_SEED_NCOMP]  = {0, 20e-3, 25e-3, 10e-3, 15e-3, 30e-3};

    memset(in, 0, sizeof(*in));
    in->ranks_per_node = 8;
    in->nodes          = 8;
    in->params         = 7e9;
    in->dtype_bytes    = 4;
    in->intra_beta     = 600e9;
    in->inter_beta     = 25e9;
    in->forward        = 2.0;
    in->backward       = 4.0;
    in->buckets        = 20;
    in->overlap_half   = 0.5;
    memcpy(in->comp_ratio, ratio, sizeof(ratio));
    memcpy(in->comp_overhead, over, sizeof(over));
}

/* One step of the texts: compute + comm + overhead, compared with the baseline step. */
static void st_model_seed_step(const st_model_seed_out_t *out, double compute, double bytes,
                               double comm, double overhead, st_model_seed_step_t *s)
{
    s->bytes   = bytes;
    s->comm    = comm;
    s->step    = compute + comm + overhead;
    s->speedup = out->step / s->step;
}

/* The texts' formulas, simplifications kept (docs/model.md, "The seed preset"):
 *   flat ring: 2(n-1)/n of the gradient per GPU, all of it at the inter-node beta, no alpha;
 *   compression: bytes and time divided by the ratio, overhead added, nothing else changes;
 *   overlap: exposed = (1 - overlap) comm, with full bucketing at (buckets-1)/buckets;
 *   hierarchical: the shard is gradient / nodes, and the intra-node phases move (g-1)/g of that
 *   shard (not of the gradient) at the intra-node beta. */
void st_model_seed_compute(const st_model_seed_in_t *in, st_model_seed_out_t *out)
{
    int    n = in->ranks_per_node * in->nodes, g = in->ranks_per_node, N = in->nodes, i;
    double compute, shard, hier_comm;

    memset(out, 0, sizeof(*out));
    out->gradient   = in->params * in->dtype_bytes;
    out->ring_bytes = 2 * (n - 1) / (double)n * out->gradient;
    out->ring_time  = out->ring_bytes / in->inter_beta;
    compute         = in->forward + in->backward;
    out->step       = compute + out->ring_time;
    out->comm_share = out->ring_time / out->step;

    for (i = 0; i < ST_MODEL_SEED_NCOMP; i++) {
        st_model_seed_step(out, compute, out->gradient / in->comp_ratio[i],
                           out->ring_time / in->comp_ratio[i], in->comp_overhead[i],
                           &out->comp[i]);
    }

    out->overlap[0] = 0.0;
    out->overlap[1] = in->overlap_half;
    out->overlap[2] = (in->buckets - 1) / (double)in->buckets;
    for (i = 0; i < ST_MODEL_SEED_NOVERLAP; i++) {
        st_model_seed_step(out, compute, out->gradient, (1 - out->overlap[i]) * out->ring_time,
                           0.0, &out->over[i]);
    }

    shard              = out->gradient / N;
    out->hier_phase[0] = (g - 1) / (double)g * shard / in->intra_beta;
    out->hier_phase[1] = 2 * (N - 1) / (double)N * shard / in->inter_beta;
    out->hier_phase[2] = out->hier_phase[0];
    out->hier_time     = out->hier_phase[0] + out->hier_phase[1] + out->hier_phase[2];
    out->hier_speedup  = out->ring_time / out->hier_time;

    /* flat ring; hierarchical; hierarchical + top-1%; the same with full bucketing */
    st_model_seed_step(out, compute, out->gradient, out->ring_time, 0.0, &out->combined[0]);
    st_model_seed_step(out, compute, out->gradient, out->hier_time, 0.0, &out->combined[1]);
    hier_comm = out->hier_time / in->comp_ratio[1];
    st_model_seed_step(out, compute, out->gradient / in->comp_ratio[1], hier_comm,
                       in->comp_overhead[1], &out->combined[2]);
    st_model_seed_step(out, compute, out->gradient / in->comp_ratio[1],
                       (1 - out->overlap[2]) * hier_comm, in->comp_overhead[1],
                       &out->combined[3]);
    out->comm_overhead_final = out->combined[3].comm + in->comp_overhead[1];
    out->comm_reduction      = out->ring_time / out->comm_overhead_final;
}
