/*
 * policy.c - a communicator's tuning: which file or model its choices come from, and the choices
 * (precedence and formats: tune/tune.h, docs/model.md). It sees the communicator only as its
 * layout (st_tune_layout_t): the tuning floor knows no communicator.
 */
#include "config.h"

#include <math.h>
#include <stddef.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/sys.h"
#include "topo/topo.h"
#include "tune/policy.h"

/* "2,1" -> shares 2/3, 1/3 of nics rails. ST_ERR_INVALID (logged) when malformed. */
static st_status_t st_tune_parse_shares(const char *str, int nics, double *share)
{
    double sum = 0.0;
    int    n = 0;
    char  *end;

    for (const char *p = str; *p != '\0'; n++) {
        double v = strtod(p, &end);

        if (end == p || !(v >= 0) || !isfinite(v) || n >= ST_MODEL_MAX_RAILS ||
            (*end != ',' && *end != '\0')) {
            st_error(ST_SUB_TUNE, "STRATA_RAIL_SHARES '%s' is malformed (expected non-negative "
                     "weights, one per rail, e.g. '2,1')", str);
            return ST_ERR_INVALID;
        }
        share[n] = v;
        sum += v;
        p = (*end == ',') ? end + 1 : end;
        if (*end == ',' && *p == '\0') {
            n = -1; /* "1,2,": a weight is missing */
            break;
        }
    }
    if (n < 0) {
        st_error(ST_SUB_TUNE, "STRATA_RAIL_SHARES '%s' is malformed (a weight after the last ',' is "
                 "missing)", str);
        return ST_ERR_INVALID;
    }
    if (n != nics || !(sum > 0)) {
        st_error(ST_SUB_TUNE, "STRATA_RAIL_SHARES '%s' gives %d weights summing to %g: it needs "
                 "one per rail (%d, from STRATA_RAIL_IFNAMES) and a positive sum", str, n, sum,
                 nics);
        return ST_ERR_INVALID;
    }
    for (int r = 0; r < n; r++) {
        share[r] /= sum;
    }
    return ST_OK;
}

/* Shard j of a chunk goes over the rail of its owner (local rank j), rail j mod nics: each shard
 * gets its rail's share divided among the rail's shards. Only with equal nodes (otherwise a
 * shard's owners sit on different rails of different nodes). */
static void st_tune_set_shares(st_tune_policy_t *p, const st_tune_layout_t *lay, int equal,
                               const double *share)
{
    int per_rail[ST_MODEL_MAX_RAILS] = {0};

    if (!equal || lay->nnodes < 2 || p->nics < 2 ||
        p->nshards > (int)(sizeof(p->shard_cum) / sizeof(p->shard_cum[0])) - 1) {
        return;
    }
    for (int j = 0; j < p->nshards; j++) {
        per_rail[j % p->nics]++;
    }
    p->shard_cum[0] = 0.0;
    for (int j = 0; j < p->nshards; j++) {
        int r = j % p->nics;

        p->shard_cum[j + 1] = p->shard_cum[j] + (per_rail[r] ? share[r] / per_rail[r] : 0.0);
    }
    for (int j = 1; j <= p->nshards; j++) {
        p->shard_cum[j] /= p->shard_cum[p->nshards];
    }
    p->shard_cum[p->nshards] = 1.0;
    p->have_shares = 1;
}

static void st_tune_format_shares(const double *share, int n, char *buf, size_t len)
{
    size_t pos = 0;

    buf[0] = '\0';
    for (int r = 0; r < n && pos < len; r++) {
        pos += (size_t)snprintf(buf + pos, len - pos, "%s%.3f", r ? "," : "", share[r]);
    }
}

st_status_t st_tune_policy_init(const st_tune_layout_t *lay, const char *tune_file,
                                st_tune_policy_t **p_out)
{
    st_tune_policy_t *p;
    st_model_fabric_t fabric;
    double            share[ST_MODEL_MAX_RAILS] = {0};
    const char       *profile = st_core_config.profile_file;
    char              err[1024], shares[128], window[32];
    int               have_share = 0, equal = 1;
    int               env_depth = st_tune_env_set(ST_TUNE_ENV_DEPTH, NULL);

    p = calloc(1, sizeof(*p));
    if (p == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    *p_out          = p; /* the caller frees it, also on failure */
    p->depth        = st_core_config.pipeline_depth;
    p->depth_auto   = !env_depth;
    p->window_chunk = 0;
    p->nshards      = st_topo_nrails(lay->topo);
    p->nics         = st_tune_count_rails(st_core_config.rail_ifnames);
    p->env_algo     = st_tune_env_set(ST_TUNE_ENV_ALGO, NULL);
    p->env_chunk    = st_tune_env_set(ST_TUNE_ENV_CHUNK, NULL);
    p->env_small    = st_tune_env_set(ST_TUNE_ENV_SMALL, NULL);
    snprintf(p->source, sizeof(p->source), "built-in defaults");
    if (tune_file == NULL) {
        tune_file = st_core_config.tune_file; /* "" from the config: no table */
    }
    for (int node = 0; node < lay->nnodes; node++) {
        equal &= st_topo_local_size(lay->topo, node) == p->nshards;
    }
    if (tune_file != NULL && tune_file[0] != '\0') {
        if (st_tune_table_read(tune_file, &p->table, err, sizeof(err)) != ST_OK) {
            st_warn(ST_SUB_TUNE, "%s: tuning table not used: %s", lay->name, err);
        } else if (!equal || p->table.ranks_per_node != p->nshards ||
                   p->table.nodes != lay->nnodes || p->table.nrails != p->nics) {
            st_warn(ST_SUB_TUNE, "%s: tuning table %s not used: it was tuned for %d ranks per "
                    "node x %d nodes, %d rails; this communicator has %s%d x %d, %d rails",
                    lay->name, tune_file, p->table.ranks_per_node, p->table.nodes,
                    p->table.nrails, equal ? "" : "nodes of unequal size, up to ", p->nshards,
                    lay->nnodes, p->nics);
        } else {
            p->have_table = 1;
            snprintf(p->source, sizeof(p->source), "tuning table %s", tune_file);
            if (p->table.ignored[0] != '\0') {
                st_warn(ST_SUB_TUNE, "%s: tuning table %s: ignored %s: they apply to another "
                        "algorithm", lay->name, tune_file, p->table.ignored);
            }
            for (int i = 0; i < p->table.nentries; i++) {
                const st_tune_entry_t *e = &p->table.entries[i];

                if (e->algo == ST_ALGO_SMALL && e->max_bytes > lay->small_max) {
                    char upto[32] = "any size";

                    if (e->max_bytes != ST_TUNE_NO_LIMIT) {
                        snprintf(upto, sizeof(upto), "%zu B", e->max_bytes);
                    }
                    st_warn(ST_SUB_TUNE, "%s: tuning table %s: entry %d gives small up to %s, "
                            "but small fits only up to %zu B (the windows' small area): above "
                            "that the default rule chooses", lay->name, tune_file, i, upto,
                            lay->small_max);
                    break;
                }
            }
        }
    }
    if (!p->have_table && profile != NULL && profile[0] != '\0') {
        if (st_profile_read(profile, &fabric, err, sizeof(err)) != ST_OK) {
            st_warn(ST_SUB_TUNE, "%s: fabric profile not used: %s", lay->name, err);
        } else {
            /* the levels are the fabric's; the layout is this communicator's */
            if (fabric.nrails != p->nics) {
                memset(fabric.rail_beta, 0, sizeof(fabric.rail_beta));
            }
            fabric.ranks_per_node = p->nshards;
            fabric.nodes          = lay->nnodes;
            fabric.nrails         = p->nics;
            st_tune_table_from_model(&fabric, p->env_small ? st_core_config.small_threshold
                                                           : lay->small_max,
                                     ST_TUNE_MODEL_MIN_CHUNK, ST_TUNE_MODEL_MAX_CHUNK, &p->table);
            p->have_table = 1;
            snprintf(p->source, sizeof(p->source), "cost model of fabric profile %s", profile);
        }
    }
    if (!p->have_table) {
        memset(&p->table, 0, sizeof(p->table)); /* a file read but not used (digest) */
    } else {
        size_t max_chunk = 0;

        for (int i = 0; i < p->table.nentries; i++) {
            max_chunk = ST_MAX(max_chunk, p->table.entries[i].hier_chunk);
        }
        if (!p->env_chunk) {
            p->window_chunk = max_chunk;
        }
        if (!env_depth && p->table.pipeline_depth > 0) {
            p->depth      = p->table.pipeline_depth;
            p->depth_auto = 0;
        }
        for (int r = 0; r < p->nics; r++) {
            share[r] = p->table.rail_share[r];
            have_share |= share[r] > 0;
        }
    }
    if (st_core_config.rail_shares != NULL && st_core_config.rail_shares[0] != '\0') {
        if (st_tune_parse_shares(st_core_config.rail_shares, p->nics, share) != ST_OK) {
            return ST_ERR_INVALID;
        }
        have_share = 1;
        strncat(p->source, ", rail shares from STRATA_RAIL_SHARES",
                sizeof(p->source) - strlen(p->source) - 1);
    }
    if (have_share) {
        st_tune_set_shares(p, lay, equal, share);
    }
    if (p->have_shares) {
        /* what the shards really get (a NIC's share divided among its local ranks) */
        double shard[ST_MODEL_MAX_RAILS * 4];

        for (int j = 0; j < p->nshards; j++) {
            shard[j] = p->shard_cum[j + 1] - p->shard_cum[j];
        }
        st_tune_format_shares(shard, p->nshards, shares, sizeof(shares));
    } else {
        snprintf(shares, sizeof(shares), "even%s", have_share ? (equal ? " (one rail)"
                                                                : " (nodes of unequal size)")
                                                              : "");
    }
    if (p->window_chunk != 0) {
        snprintf(window, sizeof(window), "at least %zu B", p->window_chunk);
    } else {
        snprintf(window, sizeof(window), "%s", p->env_chunk ? "STRATA_HIER_CHUNK_SIZE" : "auto");
    }
    st_info(ST_SUB_TUNE, "%s: tuning from %s; pipeline depth %u%s, window slots %s, shard shares "
            "%s%s%s%s", lay->name, p->source, p->depth,
            env_depth ? " (STRATA_PIPELINE_DEPTH)" : "", window,
            shares, p->env_algo ? "; STRATA_ALGO overrides the algorithm" : "",
            p->env_chunk && p->have_table ? "; STRATA_HIER_CHUNK_SIZE overrides the chunks" : "",
            p->env_small && p->have_table ? "; STRATA_SMALL_THRESHOLD overrides the handover"
                                          : "");
    if (p->have_table) {
        for (int i = 0; i < p->table.nentries; i++) {
            const st_tune_entry_t *e = &p->table.entries[i];
            char                   upto[48], chunk[48] = "";

            if (e->max_bytes == ST_TUNE_NO_LIMIT) {
                snprintf(upto, sizeof(upto), "any larger size");
            } else {
                snprintf(upto, sizeof(upto), "up to %zu B", e->max_bytes);
            }
            if (e->algo == ST_ALGO_HIER && e->hier_chunk == 0) {
                snprintf(chunk, sizeof(chunk), ", the window's chunk");
            } else if (e->algo == ST_ALGO_HIER) {
                snprintf(chunk, sizeof(chunk), ", chunk %zu B", e->hier_chunk);
            } else if (e->algo == ST_ALGO_RING && e->channels > 1) {
                snprintf(chunk, sizeof(chunk), ", %d channels", e->channels);
            }
            st_info(ST_SUB_TUNE, "%s: all-reduce %s: %s%s", lay->name, upto,
                    st_algo_name(e->algo), chunk);
        }
    }
    return ST_OK;
}

void st_tune_policy_free(st_tune_policy_t *p)
{
    free(p);
}

int st_tune_policy_allreduce(st_tune_policy_t *p, const char *name, size_t bytes, int small_fits,
                             int windows, st_tune_choice_t *choice)
{
    const st_tune_entry_t *e;
    int                    i;

    if (p == NULL || !p->have_table) {
        return 0;
    }
    if (p->env_small && small_fits && bytes <= st_core_config.small_threshold) {
        return 0; /* the user's handover: the default rule takes it */
    }
    e = st_tune_table_lookup(&p->table, bytes);
    i = (int)(e - p->table.entries);
    if ((e->algo == ST_ALGO_SMALL && (!small_fits || p->env_small)) ||
        (e->algo != ST_ALGO_RING && !windows)) {
        return 0;
    }
    choice->algo       = e->algo;
    choice->hier_chunk = p->env_chunk ? 0 : e->hier_chunk;
    choice->channels   = e->channels;
    if (!p->used[i]) {
        p->used[i] = 1;
        if (e->algo == ST_ALGO_HIER && p->env_chunk) {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: hier, chunk from "
                    "STRATA_HIER_CHUNK_SIZE (entry %d of %s)", name, bytes, i, p->source);
        } else if (e->algo == ST_ALGO_HIER && choice->hier_chunk == 0) {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: hier, the window's chunk (entry %d of "
                    "%s gives none)", name, bytes, i, p->source);
        } else if (e->algo == ST_ALGO_HIER) {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: hier, chunk %zu B (entry %d of %s)",
                    name, bytes, choice->hier_chunk, i, p->source);
        } else if (e->algo == ST_ALGO_RING && st_core_config.ring_channels > 0) {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: ring, %u channels from "
                    "STRATA_RING_CHANNELS (the entry says %d; entry %d of %s)", name, bytes,
                    st_core_config.ring_channels, e->channels > 1 ? e->channels : 1, i,
                    p->source);
        } else if (e->algo == ST_ALGO_RING && e->channels > 1) {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: ring, %d channels (entry %d of %s)",
                    name, bytes, e->channels, i, p->source);
        } else {
            st_info(ST_SUB_TUNE, "%s: all-reduce of %zu B: %s (entry %d of %s)", name,
                    bytes, st_algo_name(e->algo), i, p->source);
        }
    }
    return 1;
}

int st_tune_policy_coll(st_tune_policy_t *p, const char *name, int coll, size_t bytes, int windows,
                        st_algo_t *algo_p)
{
    const st_tune_coll_entry_t *e;
    int                         i;

    if (p == NULL || !p->have_table ||
        (e = st_tune_table_lookup_coll(&p->table, coll, bytes)) == NULL ||
        (e->algo == ST_ALGO_HIER && !windows)) {
        return 0;
    }
    i = (int)(e - p->table.colls[coll].entries);
    if (!p->coll_used[coll][i]) {
        p->coll_used[coll][i] = 1;
        st_info(ST_SUB_TUNE, "%s: %s of %zu B: %s (%s[%d] of %s)", name, st_model_coll_name(coll),
                bytes, st_algo_name(e->algo), st_model_coll_name(coll), i, p->source);
    }
    *algo_p = (st_algo_t)e->algo;
    return 1;
}

void st_tune_policy_shard(const st_tune_policy_t *p, size_t units, int nshards, int j,
                          size_t *first_p, size_t *count_p)
{
    size_t a, b;

    if (p != NULL && p->have_shares && nshards == p->nshards) {
        a = (size_t)llround((double)units * p->shard_cum[j]);
        b = (size_t)llround((double)units * p->shard_cum[j + 1]);
        a = ST_MIN(a, units);
        b = ST_MIN(ST_MAX(b, a), units);
    } else {
        size_t per = units / (size_t)nshards, rest = units % (size_t)nshards;

        a = (size_t)j * per + ST_MIN((size_t)j, rest);
        b = a + per + ((size_t)j < rest);
    }
    *first_p = a;
    *count_p = b - a;
}

size_t st_tune_policy_shard_max(const st_tune_policy_t *p, size_t units, int nshards)
{
    size_t best = 0, first, count;

    for (int j = 0; j < nshards; j++) {
        st_tune_policy_shard(p, units, nshards, j, &first, &count);
        best = ST_MAX(best, count);
    }
    return best;
}

uint32_t st_tune_policy_hash(const st_tune_policy_t *p)
{
    uint64_t h = ST_HASH_SEED;

    if (p == NULL) {
        return 0; /* init ran out of memory: its status says so */
    }
    h = st_hash(h, &p->have_table, sizeof(p->have_table));
    h = st_hash(h, &p->table, offsetof(st_tune_table_t, ignored)); /* decisions only */
    h = st_hash(h, &p->depth, sizeof(p->depth));
    h = st_hash(h, &p->depth_auto, sizeof(p->depth_auto));
    h = st_hash(h, &p->window_chunk, sizeof(p->window_chunk));
    h = st_hash(h, &p->have_shares, sizeof(p->have_shares));
    h = st_hash(h, p->shard_cum, sizeof(p->shard_cum));
    return (uint32_t)(h ^ (h >> 32)) & 0x7fffffffu;
}

void st_tune_policy_reset(st_tune_policy_t *p)
{
    p->have_table   = 0;
    p->have_shares  = 0;
    p->depth        = st_core_config.pipeline_depth;
    p->depth_auto   = 0;
    p->window_chunk = 0;
    snprintf(p->source, sizeof(p->source), "built-in defaults (the ranks' tuning differed)");
}
