/*
 * table.c - the tuning table and the fabric profile as JSON files (jansson), and the table the
 * cost model predicts. Formats: docs/model.md, "Files".
 */
#include "config.h"

#include <jansson.h>
#include <math.h>
#include <errno.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "codec/codec.h"
#include "tune/tune.h"

#define ST_TUNE_TABLE_FORMAT   "strata-tune-table"
#define ST_TUNE_PROFILE_FORMAT "strata-fabric-profile"
#define ST_TUNE_FORMAT_VERSION 1

int st_tune_count_rails(const char *list)
{
    int n = 1;

    if (list == NULL || list[0] == '\0') {
        return 1;
    }
    for (; *list != '\0'; list++) {
        n += (*list == ',');
    }
    return (n < ST_MODEL_MAX_RAILS) ? n : ST_MODEL_MAX_RAILS;
}

/* The algorithm a table entry names (tune/algo.h): ring, hier or small, never auto; -1 for any
 * other name. */
static int st_tune_entry_algo(const char *name)
{
    st_algo_t algo = st_algo_parse(name);

    return (algo >= ST_ALGO_FIRST && algo < ST_ALGO_LAST) ? (int)algo : -1;
}

/* The variables of st_tune_env_set, each with the value that means "no override" (NULL: any
 * non-empty value overrides). */
static const struct {
    const char *name, *none;
} st_tune_env[ST_TUNE_ENV_COUNT] = {
    [ST_TUNE_ENV_ALGO]     = {"STRATA_ALGO", "auto"},
    [ST_TUNE_ENV_CHUNK]    = {"STRATA_HIER_CHUNK_SIZE", "auto"},
    [ST_TUNE_ENV_DEPTH]    = {"STRATA_PIPELINE_DEPTH", NULL},
    [ST_TUNE_ENV_SMALL]    = {"STRATA_SMALL_THRESHOLD", NULL},
    [ST_TUNE_ENV_SHARES]   = {"STRATA_RAIL_SHARES", NULL},
    [ST_TUNE_ENV_CHANNELS] = {"STRATA_RING_CHANNELS", "0"},
};

int st_tune_env_set(int k, const char **value)
{
    const char *v;

    if (k < 0 || k >= ST_TUNE_ENV_COUNT) {
        return 0;
    }
    v = getenv(st_tune_env[k].name);
    if (value != NULL) {
        *value = v;
    }
    if (v == NULL || v[0] == '\0' || st_tune_env[k].none == NULL) {
        return v != NULL && v[0] != '\0';
    }
    if (strcmp(st_tune_env[k].none, "0") == 0) {
        return strspn(v, "0") != strlen(v); /* "00" is 0 too */
    }
    return strcmp(v, st_tune_env[k].none) != 0;
}

const char *st_tune_env_override(const char **value)
{
    for (int k = 0; k < ST_TUNE_ENV_COUNT; k++) {
        if (st_tune_env_set(k, value)) {
            return st_tune_env[k].name;
        }
    }
    if (value != NULL) {
        *value = NULL;
    }
    return NULL;
}

/* Notes in t->ignored that entry i's `field` was dropped (it does not apply to algo); a note that
 * does not fit ends the text with "...". */
static void st_tune_ignored(st_tune_table_t *t, size_t i, const char *field, const char *algo)
{
    size_t len = strlen(t->ignored), room = sizeof(t->ignored) - len;
    int    n;

    if (len >= 3 && strcmp(t->ignored + len - 3, "...") == 0) {
        return; /* full already */
    }
    n = snprintf(t->ignored + len, room, "%sallreduce[%zu].%s (on %s)", len > 0 ? ", " : "", i,
                 field, algo);
    if (n < 0 || (size_t)n >= room) { /* this note replaced by ", ..." (5 bytes and the NUL) */
        size_t cut = (len < sizeof(t->ignored) - 6) ? len : sizeof(t->ignored) - 6;

        snprintf(t->ignored + cut, sizeof(t->ignored) - cut, "%s...", cut > 0 ? ", " : "");
    }
}

static st_status_t st_tune_fail(char *err, size_t errlen, const char *fmt, ...)
{
    va_list ap;

    if (err != NULL && errlen > 0) {
        va_start(ap, fmt);
        vsnprintf(err, errlen, fmt, ap);
        va_end(ap);
    }
    return ST_ERR_INVALID;
}

/* ---- checks ------------------------------------------------------------------------------------ */

static st_status_t st_tune_layout_check(int ranks_per_node, int nodes, int nrails, char *err,
                                        size_t errlen)
{
    if (ranks_per_node < 1 || nodes < 1 || nrails < 1 || nrails > ST_MODEL_MAX_RAILS) {
        return st_tune_fail(err, errlen, "layout %d ranks per node x %d nodes, %d rails is out of "
                            "range (rails 1..%d)", ranks_per_node, nodes, nrails,
                            ST_MODEL_MAX_RAILS);
    }
    return ST_OK;
}

st_status_t st_tune_table_check(const st_tune_table_t *t, char *err, size_t errlen)
{
    double sum = 0.0;
    int    nonzero = 0;

    if (st_tune_layout_check(t->ranks_per_node, t->nodes, t->nrails, err, errlen) != ST_OK) {
        return ST_ERR_INVALID;
    }
    if (t->pipeline_depth > 16) {
        return st_tune_fail(err, errlen, "pipeline_depth %u is above 16", t->pipeline_depth);
    }
    for (int r = 0; r < ST_MODEL_MAX_RAILS; r++) {
        if (!(t->rail_share[r] >= 0.0) || (r >= t->nrails && t->rail_share[r] != 0.0)) {
            return st_tune_fail(err, errlen, "rail_shares[%d] = %g is negative or beyond the %d "
                                "rails", r, t->rail_share[r], t->nrails);
        }
        sum += t->rail_share[r];
        nonzero += t->rail_share[r] > 0.0;
    }
    if (nonzero > 0 && fabs(sum - 1.0) > 1e-3) {
        return st_tune_fail(err, errlen, "rail_shares sum to %.9g, not 1 (within 1e-3)", sum);
    }
    if (t->nentries < 1 || t->nentries > ST_TUNE_MAX_ENTRIES) {
        return st_tune_fail(err, errlen, "%d entries (1..%d)", t->nentries, ST_TUNE_MAX_ENTRIES);
    }
    for (int i = 0; i < t->nentries; i++) {
        const st_tune_entry_t *e = &t->entries[i];

        if (e->algo < ST_ALGO_FIRST || e->algo >= ST_ALGO_LAST) {
            return st_tune_fail(err, errlen, "allreduce[%d]: algorithm %d is not ring, hier or "
                                "small", i, e->algo);
        }
        if (e->hier_chunk != 0 && (e->hier_chunk < 64 || e->hier_chunk > ST_TUNE_MAX_CHUNK)) {
            return st_tune_fail(err, errlen, "allreduce[%d]: hier_chunk %zu is outside 64 B .. "
                                "%zu B", i, e->hier_chunk, (size_t)ST_TUNE_MAX_CHUNK);
        }
        if (e->channels < 0 || e->channels > ST_TUNE_MAX_CHANNELS) {
            return st_tune_fail(err, errlen, "allreduce[%d]: channels %d is outside 1 .. %d", i,
                                e->channels, ST_TUNE_MAX_CHANNELS);
        }
        if (i + 1 < t->nentries && e->max_bytes == ST_TUNE_NO_LIMIT) {
            return st_tune_fail(err, errlen, "allreduce[%d]: only the last entry may have no "
                                "max_bytes (or null)", i);
        }
        if (i > 0 && e->max_bytes <= t->entries[i - 1].max_bytes) {
            return st_tune_fail(err, errlen, "allreduce[%d]: max_bytes %zu does not exceed the "
                                "previous entry's %zu", i, e->max_bytes,
                                t->entries[i - 1].max_bytes);
        }
    }
    if (t->entries[t->nentries - 1].max_bytes != ST_TUNE_NO_LIMIT) {
        return st_tune_fail(err, errlen, "the last entry has max_bytes %zu: it must be null (no "
                            "limit)", t->entries[t->nentries - 1].max_bytes);
    }
    for (int c = ST_MODEL_REDUCESCATTER; c < ST_MODEL_NCOLLS; c++) {
        const st_tune_coll_list_t *l = &t->colls[c];
        const char                *name = st_model_coll_name(c);

        if (l->n < 0 || l->n > ST_TUNE_MAX_COLL_ENTRIES) {
            return st_tune_fail(err, errlen, "%s: %d entries (0..%d)", name, l->n,
                                ST_TUNE_MAX_COLL_ENTRIES);
        }
        for (int i = 0; i < l->n; i++) {
            const st_tune_coll_entry_t *e = &l->entries[i];

            if (e->algo != ST_ALGO_RING && e->algo != ST_ALGO_HIER) {
                return st_tune_fail(err, errlen, "%s[%d]: algorithm %d is not ring or hier", name,
                                    i, e->algo);
            }
            if ((i + 1 < l->n) == (e->max_bytes == ST_TUNE_NO_LIMIT)) {
                return st_tune_fail(err, errlen, "%s[%d]: %s", name, i, i + 1 < l->n
                                    ? "only the last entry may have no max_bytes (or null)"
                                    : "the last entry's max_bytes must be null (no limit)");
            }
            if (i > 0 && e->max_bytes <= l->entries[i - 1].max_bytes) {
                return st_tune_fail(err, errlen, "%s[%d]: max_bytes %zu does not exceed the "
                                    "previous entry's %zu", name, i, e->max_bytes,
                                    l->entries[i - 1].max_bytes);
            }
        }
    }
    return ST_OK;
}

const st_tune_coll_entry_t *st_tune_table_lookup_coll(const st_tune_table_t *t, int coll,
                                                      size_t bytes)
{
    const st_tune_coll_list_t *l;

    if (coll <= ST_MODEL_ALLREDUCE || coll >= ST_MODEL_NCOLLS || t->colls[coll].n == 0) {
        return NULL;
    }
    l = &t->colls[coll];
    for (int i = 0; i < l->n; i++) {
        if (bytes <= l->entries[i].max_bytes) {
            return &l->entries[i];
        }
    }
    return &l->entries[l->n - 1];
}

const st_tune_entry_t *st_tune_table_lookup(const st_tune_table_t *t, size_t bytes)
{
    for (int i = 0; i < t->nentries; i++) {
        if (bytes <= t->entries[i].max_bytes) {
            return &t->entries[i];
        }
    }
    return &t->entries[t->nentries - 1];
}

/* ---- JSON helpers ------------------------------------------------------------------------------ */

/* A non-negative integer member (size_t); missing: dflt when allow_missing. */
static int st_json_size(json_t *obj, const char *key, size_t *dst, int allow_missing, size_t dflt)
{
    json_t *v = json_object_get(obj, key);

    if (v == NULL) {
        *dst = dflt;
        return allow_missing;
    }
    if (!json_is_integer(v) || json_integer_value(v) < 0) {
        return 0;
    }
    *dst = (size_t)json_integer_value(v);
    return 1;
}

static int st_json_int(json_t *obj, const char *key, int *dst)
{
    json_t *v = json_object_get(obj, key);

    if (!json_is_integer(v) || json_integer_value(v) < 0 || json_integer_value(v) > 1 << 24) {
        return 0;
    }
    *dst = (int)json_integer_value(v);
    return 1;
}

/* A positive number member (or 0 when allow_zero). */
static int st_json_num(json_t *obj, const char *key, double *dst, int allow_zero)
{
    json_t *v = json_object_get(obj, key);

    if (!json_is_number(v)) {
        return 0;
    }
    *dst = json_number_value(v);
    return isfinite(*dst) && (*dst > 0 || (allow_zero && *dst == 0));
}

static json_t *st_json_load(const char *path, const char *format, char *err, size_t errlen)
{
    json_error_t jerr;
    json_t      *root, *fmt, *ver;
    struct stat  st;

    /* a FIFO would block the read, a directory reads as an empty file */
    if (stat(path, &st) != 0) {
        st_tune_fail(err, errlen, "%s: cannot read it: %s", path, strerror(errno));
        return NULL;
    }
    if (!S_ISREG(st.st_mode)) {
        st_tune_fail(err, errlen, "%s: not a regular file", path);
        return NULL;
    }
    root = json_load_file(path, JSON_REJECT_DUPLICATES, &jerr);
    if (root == NULL) {
        st_tune_fail(err, errlen, "%s:%d:%d: %s", path, jerr.line, jerr.column, jerr.text);
        return NULL;
    }
    fmt = json_object_get(root, "format");
    ver = json_object_get(root, "version");
    if (!json_is_object(root) || !json_is_string(fmt) || strcmp(json_string_value(fmt), format) ||
        !json_is_integer(ver) || json_integer_value(ver) != ST_TUNE_FORMAT_VERSION) {
        st_tune_fail(err, errlen, "%s: not a %s file of version %d (members \"format\" and "
                     "\"version\")", path, format, ST_TUNE_FORMAT_VERSION);
        json_decref(root);
        return NULL;
    }
    return root;
}

static int st_json_layout(json_t *root, int *g, int *n, int *r)
{
    json_t *layout = json_object_get(root, "layout");

    return json_is_object(layout) && st_json_int(layout, "ranks_per_node", g) &&
           st_json_int(layout, "nodes", n) && st_json_int(layout, "rails", r);
}

/* An array of at most `max` finite numbers >= 0 into dst; the count, or -1 (err set). */
static int st_json_numbers(json_t *arr, int max, double *dst, const char *path, const char *what,
                           char *err, size_t errlen)
{
    json_t *e;
    size_t  i;

    if (!json_is_array(arr) || json_array_size(arr) > (size_t)max) {
        st_tune_fail(err, errlen, "%s: %s must be an array of at most %d numbers", path, what, max);
        return -1;
    }
    json_array_foreach(arr, i, e) {
        if (!json_is_number(e) || !(json_number_value(e) >= 0) ||
            !isfinite(json_number_value(e))) {
            st_tune_fail(err, errlen, "%s: %s[%zu] is not a number >= 0", path, what, i);
            return -1;
        }
        dst[i] = json_number_value(e);
    }
    return (int)json_array_size(arr);
}

/* An optional member `key` (absent or null: dst untouched): an array of n finite numbers >= 0,
 * one per rail. 0, with the reason in err, when it is anything else. */
static int st_json_rail_numbers(json_t *root, const char *key, int n, double *dst,
                                const char *path, char *err, size_t errlen)
{
    json_t *arr = json_object_get(root, key);

    if (arr == NULL || json_is_null(arr)) {
        return 1;
    }
    if (!json_is_array(arr) || json_array_size(arr) != (size_t)n || n > ST_MODEL_MAX_RAILS) {
        st_tune_fail(err, errlen, "%s: \"%s\" must be an array of %d numbers (one per rail)",
                     path, key, n);
        return 0;
    }
    return st_json_numbers(arr, n, dst, path, key, err, errlen) >= 0;
}

/* A curve of up to ST_MODEL_CREDIT_POINTS points, {"bytes": [...], "<ykey>": [...]}, into x[],
 * y[], *n: bytes increasing from > 0, y >= 0, and y <= bytes when y_within_x (a credit in bytes).
 * `what` names the curve in errors ("rail_credit[1]"). 0, with the reason in err, otherwise. */
static int st_json_points(json_t *e, const char *ykey, int y_within_x, double *x, double *y,
                          int *n, const char *path, const char *what, char *err, size_t errlen)
{
    char xs[64], ys[64];
    int  nx, ny;

    if (!json_is_object(e)) {
        st_tune_fail(err, errlen, "%s: %s is not an object", path, what);
        return 0;
    }
    snprintf(xs, sizeof(xs), "%s.bytes", what);
    snprintf(ys, sizeof(ys), "%s.%s", what, ykey);
    nx = st_json_numbers(json_object_get(e, "bytes"), ST_MODEL_CREDIT_POINTS, x, path, xs, err,
                         errlen);
    ny = (nx < 0) ? -1 : st_json_numbers(json_object_get(e, ykey), ST_MODEL_CREDIT_POINTS, y,
                                         path, ys, err, errlen);
    if (nx < 0 || ny < 0) {
        return 0;
    }
    if (nx != ny) {
        st_tune_fail(err, errlen, "%s: %s has %d bytes and %d %s", path, what, nx, ny, ykey);
        return 0;
    }
    for (int i = 0; i < nx; i++) {
        if (!(x[i] > (i > 0 ? x[i - 1] : 0.0))) {
            st_tune_fail(err, errlen, "%s: %s[%d] = %g: the bytes must increase from above 0",
                         path, xs, i, x[i]);
            return 0;
        }
        if (y_within_x && y[i] > x[i]) {
            st_tune_fail(err, errlen, "%s: %s[%d] = %g exceeds its bytes, %g", path, ys, i, y[i],
                         x[i]);
            return 0;
        }
    }
    *n = nx;
    return 1;
}

/* "rail_credit": null, or one {"bytes", "credit_bytes"} curve per rail; "small_credit": null or
 * one such curve; "hier_rest": null or {"bytes": [...], "seconds": [...]}. */
static int st_json_credits(json_t *root, int nrails, st_model_fabric_t *f, const char *path,
                           char *err, size_t errlen)
{
    json_t *arr = json_object_get(root, "rail_credit"), *e;
    size_t  r;
    char    what[48];

    if (arr != NULL && !json_is_null(arr)) {
        if (!json_is_array(arr) || json_array_size(arr) != (size_t)nrails) {
            st_tune_fail(err, errlen, "%s: \"rail_credit\" must be an array of %d objects (one "
                         "per rail)", path, nrails);
            return 0;
        }
        json_array_foreach(arr, r, e) {
            st_model_credit_t *c = &f->rail_credit[r];

            snprintf(what, sizeof(what), "rail_credit[%zu]", r);
            if (!st_json_points(e, "credit_bytes", 1, c->bytes, c->credit, &c->n, path, what, err,
                                errlen)) {
                return 0;
            }
        }
    }
    e = json_object_get(root, "small_credit");
    if (e != NULL && !json_is_null(e) &&
        !st_json_points(e, "credit_bytes", 1, f->small_credit.bytes, f->small_credit.credit,
                        &f->small_credit.n, path, "small_credit", err, errlen)) {
        return 0;
    }
    e = json_object_get(root, "hier_rest");
    return e == NULL || json_is_null(e) ||
           st_json_points(e, "seconds", 0, f->hier_rest.bytes, f->hier_rest.seconds,
                          &f->hier_rest.n, path, "hier_rest", err, errlen);
}

static json_t *st_json_layout_new(int g, int n, int r)
{
    return json_pack("{s:i, s:i, s:i}", "ranks_per_node", g, "nodes", n, "rails", r);
}

static st_status_t st_json_save(json_t *root, const char *path)
{
    int rc = json_dump_file(root, path, JSON_INDENT(2) | JSON_PRESERVE_ORDER | JSON_REAL_PRECISION(9));

    json_decref(root);
    return rc == 0 ? ST_OK : ST_ERR_IO;
}

/* ---- tuning table ------------------------------------------------------------------------------ */

/* The optional list of collective c (st_model_coll_t other than all-reduce) into t->colls[c]:
 * absent or null leaves it empty; ranges and order are st_tune_table_check's. 0 with err set when
 * it is not an array of {"max_bytes": bytes or null, "algo": "ring" | "hier"}. */
static int st_json_coll_list(json_t *root, int c, st_tune_table_t *t, const char *path, char *err,
                             size_t errlen)
{
    const char *name = st_model_coll_name(c);
    json_t     *arr = json_object_get(root, name), *e;
    size_t      i;

    if (arr == NULL || json_is_null(arr)) {
        return 1;
    }
    if (!json_is_array(arr) || json_array_size(arr) == 0 ||
        json_array_size(arr) > ST_TUNE_MAX_COLL_ENTRIES) {
        st_tune_fail(err, errlen, "%s: \"%s\" must be an array of 1..%d entries", path, name,
                     ST_TUNE_MAX_COLL_ENTRIES);
        return 0;
    }
    json_array_foreach(arr, i, e) {
        st_tune_coll_entry_t *te = &t->colls[c].entries[i];
        json_t               *mb = json_object_get(e, "max_bytes");
        json_t               *al = json_object_get(e, "algo");

        te->algo = json_is_string(al) ? st_tune_entry_algo(json_string_value(al)) : -1;
        if (!json_is_object(e) || (te->algo != ST_ALGO_RING && te->algo != ST_ALGO_HIER)) {
            st_tune_fail(err, errlen, "%s: %s[%zu] must be an object with \"algo\" ring or hier",
                         path, name, i);
            return 0;
        }
        if (mb == NULL || json_is_null(mb)) {
            te->max_bytes = ST_TUNE_NO_LIMIT;
        } else if (!st_json_size(e, "max_bytes", &te->max_bytes, 0, 0)) {
            st_tune_fail(err, errlen, "%s: %s[%zu]: \"max_bytes\" must be a byte count or null",
                         path, name, i);
            return 0;
        }
        t->colls[c].n++;
    }
    return 1;
}

st_status_t st_tune_table_read(const char *path, st_tune_table_t *table, char *err, size_t errlen)
{
    st_tune_table_t t;
    json_t         *root, *entries, *jdepth, *e;
    size_t          i;
    st_status_t     status = ST_ERR_INVALID;

    memset(&t, 0, sizeof(t));
    root = st_json_load(path, ST_TUNE_TABLE_FORMAT, err, errlen);
    if (root == NULL) {
        return ST_ERR_INVALID;
    }
    if (!st_json_layout(root, &t.ranks_per_node, &t.nodes, &t.nrails)) {
        st_tune_fail(err, errlen, "%s: \"layout\" needs integers ranks_per_node, nodes, rails",
                     path);
        goto out;
    }
    jdepth = json_object_get(root, "pipeline_depth"); /* absent or null: STRATA_PIPELINE_DEPTH */
    if (jdepth != NULL && !json_is_null(jdepth) &&
        (!json_is_integer(jdepth) || json_integer_value(jdepth) < 1 ||
         json_integer_value(jdepth) > 16)) {
        st_tune_fail(err, errlen, "%s: \"pipeline_depth\" must be an integer in 1..16", path);
        goto out;
    }
    t.pipeline_depth = json_is_integer(jdepth) ? (unsigned)json_integer_value(jdepth) : 0;
    if (!st_json_rail_numbers(root, "rail_shares", t.nrails, t.rail_share, path, err, errlen)) {
        goto out;
    }
    entries = json_object_get(root, "allreduce");
    if (!json_is_array(entries) || json_array_size(entries) == 0 ||
        json_array_size(entries) > ST_TUNE_MAX_ENTRIES) {
        st_tune_fail(err, errlen, "%s: \"allreduce\" must be an array of 1..%d entries", path,
                     ST_TUNE_MAX_ENTRIES);
        goto out;
    }
    json_array_foreach(entries, i, e) {
        st_tune_entry_t *te = &t.entries[i];
        json_t          *mb = json_object_get(e, "max_bytes");
        json_t          *al = json_object_get(e, "algo");

        if (!json_is_object(e)) {
            st_tune_fail(err, errlen, "%s: allreduce[%zu] is not an object", path, i);
            goto out;
        }
        if (!json_is_string(al) || (te->algo = st_tune_entry_algo(json_string_value(al))) < 0) {
            st_tune_fail(err, errlen, "%s: allreduce[%zu]: \"algo\" must be ring, hier or small",
                         path, i);
            goto out;
        }
        if (mb == NULL || json_is_null(mb)) {
            te->max_bytes = ST_TUNE_NO_LIMIT;
        } else if (!st_json_size(e, "max_bytes", &te->max_bytes, 0, 0)) {
            st_tune_fail(err, errlen, "%s: allreduce[%zu]: \"max_bytes\" must be a byte count or "
                         "null", path, i);
            goto out;
        }
        if (!st_json_size(e, "hier_chunk", &te->hier_chunk, 1, 0)) { /* range: table_check */
            st_tune_fail(err, errlen, "%s: allreduce[%zu]: \"hier_chunk\" must be a byte count",
                         path, i);
            goto out;
        }
        if (te->algo != ST_ALGO_HIER && te->hier_chunk != 0) {
            st_tune_ignored(&t, i, "hier_chunk", json_string_value(al));
            te->hier_chunk = 0;
        }
        if (json_object_get(e, "channels") != NULL) {
            json_t *ch = json_object_get(e, "channels");

            if (!json_is_integer(ch) || json_integer_value(ch) < 1 ||
                json_integer_value(ch) > ST_TUNE_MAX_CHANNELS) {
                st_tune_fail(err, errlen, "%s: allreduce[%zu]: \"channels\" must be an integer "
                             "1 .. %d", path, i, ST_TUNE_MAX_CHANNELS);
                goto out;
            }
            te->channels = te->algo == ST_ALGO_RING ? (int)json_integer_value(ch) : 0;
            if (te->algo != ST_ALGO_RING) {
                st_tune_ignored(&t, i, "channels", json_string_value(al));
            }
        }
        t.nentries++;
    }
    for (int c = ST_MODEL_REDUCESCATTER; c < ST_MODEL_NCOLLS; c++) {
        if (!st_json_coll_list(root, c, &t, path, err, errlen)) {
            goto out;
        }
    }
    if (st_tune_table_check(&t, err, errlen) != ST_OK) {
        char why[256];

        snprintf(why, sizeof(why), "%s", err != NULL ? err : "");
        st_tune_fail(err, errlen, "%s: %s", path, why);
        goto out;
    }
    *table = t;
    status = ST_OK;
out:
    json_decref(root);
    return status;
}

st_status_t st_tune_table_write(const char *path, const st_tune_table_t *t, const char *comment)
{
    json_t *root, *entries, *shares = json_null();
    int     any_share = 0;

    for (int r = 0; r < t->nrails; r++) {
        any_share |= t->rail_share[r] > 0.0;
    }
    if (any_share) {
        shares = json_array();
        for (int r = 0; r < t->nrails; r++) {
            json_array_append_new(shares, json_real(t->rail_share[r]));
        }
    }
    entries = json_array();
    for (int i = 0; i < t->nentries; i++) {
        const st_tune_entry_t *e = &t->entries[i];
        json_t *je = json_object();

        json_object_set_new(je, "max_bytes", e->max_bytes == ST_TUNE_NO_LIMIT
                                                 ? json_null() : json_integer((json_int_t)e->max_bytes));
        json_object_set_new(je, "algo", json_string(st_algo_name(e->algo)));
        if (e->algo == ST_ALGO_HIER && e->hier_chunk != 0) {
            json_object_set_new(je, "hier_chunk", json_integer((json_int_t)e->hier_chunk));
        }
        if (e->algo == ST_ALGO_RING && e->channels > 1) {
            json_object_set_new(je, "channels", json_integer(e->channels));
        }
        json_array_append_new(entries, je);
    }
    root = json_object();
    json_object_set_new(root, "format", json_string(ST_TUNE_TABLE_FORMAT));
    json_object_set_new(root, "version", json_integer(ST_TUNE_FORMAT_VERSION));
    json_object_set_new(root, "comment", json_string(comment != NULL ? comment : ""));
    json_object_set_new(root, "layout", st_json_layout_new(t->ranks_per_node, t->nodes, t->nrails));
    if (t->pipeline_depth != 0) {
        json_object_set_new(root, "pipeline_depth", json_integer(t->pipeline_depth));
    }
    json_object_set_new(root, "rail_shares", shares);
    json_object_set_new(root, "allreduce", entries);
    for (int c = ST_MODEL_REDUCESCATTER; c < ST_MODEL_NCOLLS; c++) {
        json_t *list;

        if (t->colls[c].n == 0) {
            continue;
        }
        list = json_array();
        for (int i = 0; i < t->colls[c].n; i++) {
            const st_tune_coll_entry_t *e = &t->colls[c].entries[i];
            json_t                     *je = json_object();

            json_object_set_new(je, "max_bytes", e->max_bytes == ST_TUNE_NO_LIMIT
                                    ? json_null() : json_integer((json_int_t)e->max_bytes));
            json_object_set_new(je, "algo", json_string(st_algo_name(e->algo)));
            json_array_append_new(list, je);
        }
        json_object_set_new(root, st_model_coll_name(c), list);
    }
    return st_json_save(root, path);
}

/* ---- fabric profile ---------------------------------------------------------------------------- */

static int st_json_level(json_t *root, const char *key, st_model_level_t *level)
{
    json_t *o = json_object_get(root, key);

    return json_is_object(o) && st_json_num(o, "alpha_s", &level->alpha, 1) &&
           st_json_num(o, "beta_Bps", &level->beta, 0) &&
           st_json_num(o, "gamma_Bps", &level->gamma, 1);
}

/* "codec_s_per_element" (optional; absent or null: st_model_codec_defaults): an object of codec
 * names (none, fp16, bf16, int8, topk, sign), each {"encode": s, "decode": s}, numbers >= 0; a
 * codec it does not name keeps its default, a name it does not know is refused. */
static int st_json_codecs(json_t *root, st_model_fabric_t *f, const char *path, char *err,
                          size_t errlen)
{
    json_t     *obj = json_object_get(root, "codec_s_per_element"), *e;
    const char *key;
    int         c;

    st_model_codec_defaults(f->codec);
    if (obj == NULL || json_is_null(obj)) {
        return 1;
    }
    if (!json_is_object(obj)) {
        st_tune_fail(err, errlen, "%s: \"codec_s_per_element\" must be an object of codecs", path);
        return 0;
    }
    json_object_foreach(obj, key, e) {
        for (c = 0; c < ST_MODEL_NCODECS && strcmp(key, st_codec_name((strataCodec_t)c)) != 0;
             c++) {
        }
        if (c == ST_MODEL_NCODECS) {
            st_tune_fail(err, errlen, "%s: codec_s_per_element.%s: not a codec (none, fp16, "
                         "bf16, int8, topk, sign)", path, key);
            return 0;
        }
        if (!json_is_object(e) || !st_json_num(e, "encode", &f->codec[c].encode, 1) ||
            !st_json_num(e, "decode", &f->codec[c].decode, 1)) {
            st_tune_fail(err, errlen, "%s: codec_s_per_element.%s needs \"encode\" and "
                         "\"decode\", seconds per element >= 0", path, key);
            return 0;
        }
    }
    return 1;
}

st_status_t st_profile_read(const char *path, st_model_fabric_t *fabric, char *err, size_t errlen)
{
    st_model_fabric_t f;
    json_t           *root;
    st_status_t       status = ST_ERR_INVALID;

    memset(&f, 0, sizeof(f));
    root = st_json_load(path, ST_TUNE_PROFILE_FORMAT, err, errlen);
    if (root == NULL) {
        return ST_ERR_INVALID;
    }
    if (!st_json_layout(root, &f.ranks_per_node, &f.nodes, &f.nrails) ||
        st_tune_layout_check(f.ranks_per_node, f.nodes, f.nrails, NULL, 0) != ST_OK) {
        st_tune_fail(err, errlen, "%s: \"layout\" needs ranks_per_node >= 1, nodes >= 1, rails "
                     "1..%d", path, ST_MODEL_MAX_RAILS);
        goto out;
    }
    if (!st_json_level(root, "intra", &f.intra) || !st_json_level(root, "inter", &f.inter)) {
        st_tune_fail(err, errlen, "%s: \"intra\" and \"inter\" need alpha_s >= 0, beta_Bps > 0 "
                     "and gamma_Bps >= 0 (numbers)", path);
        goto out;
    }
    if (!st_json_rail_numbers(root, "rail_beta_Bps", f.nrails, f.rail_beta, path, err,
                              errlen) ||
        !st_json_rail_numbers(root, "rail_burst_bytes", f.nrails, f.rail_burst, path, err,
                              errlen) ||
        !st_json_credits(root, f.nrails, &f, path, err, errlen) ||
        !st_json_codecs(root, &f, path, err, errlen)) {
        goto out;
    }
    if (json_object_get(root, "exchange_alpha_s") != NULL &&
        !st_json_num(root, "exchange_alpha_s", &f.exchange_alpha, 1)) {
        st_tune_fail(err, errlen, "%s: \"exchange_alpha_s\" must be a number >= 0", path);
        goto out;
    }
    if (st_model_fabric_check(&f) != ST_OK) {
        st_tune_fail(err, errlen, "%s: the fabric it describes is not valid", path);
        goto out;
    }
    *fabric = f;
    status  = ST_OK;
out:
    json_decref(root);
    return status;
}

/* st_json_points' counterpart: {"bytes": [x...], "<ykey>": [y...]}. */
static json_t *st_json_points_new(int n, const double *x, const double *y, const char *ykey)
{
    json_t *xs = json_array(), *ys = json_array();

    for (int i = 0; i < n; i++) {
        json_array_append_new(xs, json_real(x[i]));
        json_array_append_new(ys, json_real(y[i]));
    }
    return json_pack("{s:o, s:o}", "bytes", xs, ykey, ys);
}

static json_t *st_json_credit_new(const st_model_credit_t *c)
{
    return st_json_points_new(c->n, c->bytes, c->credit, "credit_bytes");
}

static json_t *st_json_level_new(const st_model_level_t *l)
{
    return json_pack("{s:f, s:f, s:f}", "alpha_s", l->alpha, "beta_Bps", l->beta, "gamma_Bps",
                     l->gamma);
}

st_status_t st_profile_write(const char *path, const st_model_fabric_t *f,
                             const char *samples_json, const char *comment)
{
    json_t      *root, *rails, *codecs, *samples = NULL;
    json_error_t jerr;

    if (st_model_fabric_check(f) != ST_OK) {
        return ST_ERR_INVALID;
    }
    if (samples_json != NULL) {
        samples = json_loads(samples_json, 0, &jerr);
        if (samples == NULL) {
            return ST_ERR_INVALID;
        }
    }
    json_t *bursts = json_array(), *credits = json_array();
    int     ncredit = 0;

    rails = json_array();
    for (int r = 0; r < f->nrails; r++) {
        json_array_append_new(rails, json_real(st_model_rail_beta(f, r)));
        json_array_append_new(bursts, json_real(f->rail_burst[r]));
        json_array_append_new(credits, st_json_credit_new(&f->rail_credit[r]));
        ncredit += f->rail_credit[r].n;
    }
    root = json_object();
    json_object_set_new(root, "format", json_string(ST_TUNE_PROFILE_FORMAT));
    json_object_set_new(root, "version", json_integer(ST_TUNE_FORMAT_VERSION));
    json_object_set_new(root, "comment", json_string(comment != NULL ? comment : ""));
    json_object_set_new(root, "layout", st_json_layout_new(f->ranks_per_node, f->nodes, f->nrails));
    json_object_set_new(root, "intra", st_json_level_new(&f->intra));
    json_object_set_new(root, "inter", st_json_level_new(&f->inter));
    json_object_set_new(root, "rail_beta_Bps", rails);
    json_object_set_new(root, "rail_burst_bytes", bursts);
    if (ncredit > 0) {
        json_object_set_new(root, "rail_credit", credits);
    } else {
        json_decref(credits);
    }
    if (f->exchange_alpha > 0) {
        json_object_set_new(root, "exchange_alpha_s", json_real(f->exchange_alpha));
    }
    if (f->small_credit.n > 0) {
        json_object_set_new(root, "small_credit", st_json_credit_new(&f->small_credit));
    }
    if (f->hier_rest.n > 0) {
        json_object_set_new(root, "hier_rest",
                            st_json_points_new(f->hier_rest.n, f->hier_rest.bytes,
                                               f->hier_rest.seconds, "seconds"));
    }
    codecs = json_object();
    for (int c = 0; c < ST_MODEL_NCODECS; c++) {
        json_object_set_new(codecs, st_codec_name((strataCodec_t)c),
                            json_pack("{s:f, s:f}", "encode", f->codec[c].encode, "decode",
                                      f->codec[c].decode));
    }
    json_object_set_new(root, "codec_s_per_element", codecs);
    if (samples != NULL) {
        json_object_set_new(root, "samples", samples);
    }
    return st_json_save(root, path);
}

/* ---- the model's table ------------------------------------------------------------------------- */

void st_tune_table_from_model(const st_model_fabric_t *fabric, size_t small_max, size_t min_chunk,
                              size_t max_chunk, st_tune_table_t *t)
{
    st_model_split_t split;
    double           sum = 0.0;

    memset(t, 0, sizeof(*t));
    memset(&split, 0, sizeof(split));
    t->ranks_per_node = fabric->ranks_per_node;
    t->nodes          = fabric->nodes;
    t->nrails         = fabric->nrails;
    for (int r = 0; r < fabric->nrails; r++) {
        sum += st_model_rail_beta(fabric, r);
    }
    for (int r = 0; r < fabric->nrails && fabric->nrails > 1; r++) {
        t->rail_share[r] = st_model_rail_beta(fabric, r) / sum;
        split.rail_share[r] = t->rail_share[r];
    }
    split.small_max = small_max;
    for (int k = 3; k <= 30; k++) {
        size_t           bytes = (size_t)1 << k;
        st_tune_entry_t  e = {bytes, ST_ALGO_RING, 0, 0};
        st_model_time_t  best, th;
        st_algo_t        algo;
        size_t           chunk = 0;

        /* the flat ring's channels: one per rail at most helps (channel c crosses on rail
         * (g-1+c) mod R) */
        split.channels = 1;
        for (int c = 2; c <= fabric->nrails && c <= ST_TUNE_MAX_CHANNELS; c++) {
            st_model_split_t sc = split;
            st_model_time_t  tb, tc;

            sc.channels = c;
            if (st_model_allreduce(fabric, &split, ST_ALGO_RING, (double)bytes, &tb) == ST_OK &&
                st_model_allreduce(fabric, &sc, ST_ALGO_RING, (double)bytes, &tc) == ST_OK &&
                tc.total < tb.total) {
                split.channels = c;
            }
        }
        if (st_model_choose(fabric, &split, (double)bytes, &algo, &best) != ST_OK) {
            continue;
        }
        e.algo = algo;
        if (st_model_best_chunk(fabric, &split, (double)bytes, min_chunk, max_chunk, &chunk,
                                &th) == ST_OK && th.total < best.total) {
            e.algo = ST_ALGO_HIER;
        }
        e.hier_chunk = e.algo == ST_ALGO_HIER ? chunk : 0;
        e.channels   = (e.algo == ST_ALGO_RING && split.channels > 1) ? split.channels : 0;
        if (t->nentries > 0 && t->entries[t->nentries - 1].algo == e.algo &&
            t->entries[t->nentries - 1].hier_chunk == e.hier_chunk &&
            t->entries[t->nentries - 1].channels == e.channels) {
            t->entries[t->nentries - 1].max_bytes = bytes; /* extend the range */
        } else if (t->nentries < ST_TUNE_MAX_ENTRIES) {
            t->entries[t->nentries++] = e;
        }
    }
    if (t->nentries == 0) {
        t->entries[t->nentries++] = (st_tune_entry_t){0, ST_ALGO_RING, 0, 0};
    }
    t->entries[t->nentries - 1].max_bytes = ST_TUNE_NO_LIMIT;
    /* the other collectives: ring or hier per size, hier at the largest chunk the model takes */
    split.channels = 1;
    split.chunk    = max_chunk;
    for (int c = ST_MODEL_REDUCESCATTER; c < ST_MODEL_NCOLLS; c++) {
        st_tune_coll_list_t *l = &t->colls[c];

        l->n = 0;
        for (int k = 3; k <= 30; k++) {
            size_t          bytes = (size_t)1 << k;
            st_model_time_t tr, th;
            int             algo = ST_ALGO_RING;

            if (st_model_collective(fabric, &split, (st_model_coll_t)c, ST_ALGO_RING,
                                    (double)bytes, &tr) != ST_OK) {
                continue;
            }
            if (fabric->ranks_per_node > 1 &&
                st_model_collective(fabric, &split, (st_model_coll_t)c, ST_ALGO_HIER,
                                    (double)bytes, &th) == ST_OK && th.total < tr.total) {
                algo = ST_ALGO_HIER;
            }
            if (l->n > 0 && l->entries[l->n - 1].algo == algo) {
                l->entries[l->n - 1].max_bytes = bytes;
            } else if (l->n < ST_TUNE_MAX_COLL_ENTRIES) {
                l->entries[l->n++] = (st_tune_coll_entry_t){bytes, algo};
            }
        }
        if (l->n > 0) {
            l->entries[l->n - 1].max_bytes = ST_TUNE_NO_LIMIT;
        }
    }
}
