/*
 * test_tune.c - the tuning table and fabric profile files (src/tune/table.c, jansson) and the
 * table the model makes: round trips, every rejection with its reason, lookup by size, and the
 * model's choice on a fabric worked out by hand.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cmocka.h>

#include "tune/tune.h"

static char tmp_path[64];

static int setup(void **state)
{
    snprintf(tmp_path, sizeof(tmp_path), "/tmp/test_tune-%d.json", (int)getpid());
    return 0;
}

static int teardown(void **state)
{
    unlink(tmp_path);
    return 0;
}

static void write_text(const char *text)
{
    FILE *f = fopen(tmp_path, "w");

    assert_non_null(f);
    fputs(text, f);
    fclose(f);
}

static void sample_table(st_tune_table_t *t)
{
    memset(t, 0, sizeof(*t));
    t->ranks_per_node = 2;
    t->nodes          = 2;
    t->nrails         = 2;
    t->pipeline_depth = 2;
    t->rail_share[0]  = 2.0 / 3.0;
    t->rail_share[1]  = 1.0 / 3.0;
    t->nentries       = 3;
    t->entries[0]     = (st_tune_entry_t){65536, ST_ALGO_SMALL, 0, 0};
    t->entries[1]     = (st_tune_entry_t){1048576, ST_ALGO_RING, 0, 2};
    t->entries[2]     = (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_HIER, 524288, 0};
}

static void test_table_round_trip(void **state)
{
    st_tune_table_t t, back;
    char            err[256] = "";

    sample_table(&t);
    assert_int_equal(st_tune_table_write(tmp_path, &t, "test"), ST_OK);
    assert_int_equal(st_tune_table_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_int_equal(back.ranks_per_node, 2);
    assert_int_equal(back.nodes, 2);
    assert_int_equal(back.nrails, 2);
    assert_int_equal(back.pipeline_depth, 2);
    assert_true(fabs(back.rail_share[0] - 2.0 / 3.0) < 1e-8);
    assert_true(fabs(back.rail_share[1] - 1.0 / 3.0) < 1e-8);
    assert_int_equal(back.nentries, 3);
    assert_int_equal(back.entries[0].algo, ST_ALGO_SMALL);
    assert_int_equal(back.entries[0].max_bytes, 65536);
    assert_int_equal(back.entries[1].algo, ST_ALGO_RING);
    assert_int_equal(back.entries[1].channels, 2);
    assert_int_equal(back.entries[2].algo, ST_ALGO_HIER);
    assert_int_equal(back.entries[2].channels, 0);
    assert_int_equal(back.entries[2].hier_chunk, 524288);
    assert_true(back.entries[2].max_bytes == ST_TUNE_NO_LIMIT);
    /* lookup: boundaries belong to the entry they end */
    assert_ptr_equal(st_tune_table_lookup(&back, 1), &back.entries[0]);
    assert_ptr_equal(st_tune_table_lookup(&back, 65536), &back.entries[0]);
    assert_ptr_equal(st_tune_table_lookup(&back, 65537), &back.entries[1]);
    assert_ptr_equal(st_tune_table_lookup(&back, 1048576), &back.entries[1]);
    assert_ptr_equal(st_tune_table_lookup(&back, (size_t)1 << 40), &back.entries[2]);
}

/* A field that does not apply to an entry's algorithm is read, dropped and named in ignored (the
 * library WARNs it): channels on hier and small, hier_chunk on ring and small. */
static void test_table_dropped_fields(void **state)
{
    st_tune_table_t back;
    char            err[256] = "";

    write_text("{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
               "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"small\",\"max_bytes\":4096,"
               "\"channels\":2,\"hier_chunk\":65536},{\"algo\":\"ring\",\"max_bytes\":65536,"
               "\"hier_chunk\":65536,\"channels\":3},{\"algo\":\"hier\",\"hier_chunk\":"
               "131072,\"channels\":4}]}");
    assert_int_equal(st_tune_table_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_int_equal(back.nentries, 3);
    assert_int_equal(back.entries[0].channels, 0);
    assert_int_equal(back.entries[0].hier_chunk, 0);
    assert_int_equal(back.entries[1].channels, 3);
    assert_int_equal(back.entries[1].hier_chunk, 0);
    assert_int_equal(back.entries[2].channels, 0);
    assert_int_equal(back.entries[2].hier_chunk, 131072);
    assert_string_equal(back.ignored, "allreduce[0].hier_chunk (on small), allreduce[0].channels "
                                      "(on small), allreduce[1].hier_chunk (on ring), "
                                      "allreduce[2].channels (on hier)");
    /* a file with nothing to drop notes nothing */
    write_text("{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
               "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"ring\",\"channels\":2}]}");
    assert_int_equal(st_tune_table_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_string_equal(back.ignored, "");
}

static const char *const override_vars[] = {"STRATA_ALGO", "STRATA_HIER_CHUNK_SIZE",
                                            "STRATA_PIPELINE_DEPTH", "STRATA_SMALL_THRESHOLD",
                                            "STRATA_RAIL_SHARES", "STRATA_RING_CHANNELS"};

static int unset_overrides(void **state)
{
    for (size_t i = 0; i < sizeof(override_vars) / sizeof(override_vars[0]); i++) {
        unsetenv(override_vars[i]);
    }
    return 0;
}

/* st_tune_env_override: the first overriding STRATA_* variable; empty does not count, nor "auto"
 * for the two that take it, nor "0" for STRATA_RING_CHANNELS (the tuning's channels). */
static void test_env_override(void **state)
{
    const char *val = "stale";

    assert_null(st_tune_env_override(&val));
    assert_null(val);
    setenv("STRATA_ALGO", "auto", 1);
    setenv("STRATA_HIER_CHUNK_SIZE", "", 1);
    setenv("STRATA_RING_CHANNELS", "0", 1);
    assert_null(st_tune_env_override(NULL));
    assert_int_equal(st_tune_env_set(ST_TUNE_ENV_ALGO, &val), 0);
    assert_string_equal(val, "auto");
    assert_int_equal(st_tune_env_set(ST_TUNE_ENV_COUNT, NULL), 0);
    setenv("STRATA_RING_CHANNELS", "00", 1);
    assert_null(st_tune_env_override(NULL));
    setenv("STRATA_RING_CHANNELS", "2", 1);
    assert_string_equal(st_tune_env_override(&val), "STRATA_RING_CHANNELS");
    assert_string_equal(val, "2");
    setenv("STRATA_ALGO", "hier", 1);
    assert_string_equal(st_tune_env_override(&val), "STRATA_ALGO");
    assert_string_equal(val, "hier");
    assert_int_equal(st_tune_env_set(ST_TUNE_ENV_ALGO, NULL), 1);
    for (size_t i = 0; i < sizeof(override_vars) / sizeof(override_vars[0]); i++) {
        unset_overrides(state);
        setenv(override_vars[i], "1", 1);
        assert_string_equal(st_tune_env_override(&val), override_vars[i]);
        assert_string_equal(val, "1");
    }
}

/* Many dropped fields: the note ends with "..." instead of a name cut in the middle. */
static void test_table_ignored_truncated(void **state)
{
    st_tune_table_t back;
    char            err[256] = "", text[4096];
    size_t          pos, len;

    pos = (size_t)snprintf(text, sizeof(text), "{\"format\":\"strata-tune-table\",\"version\":1,"
                           "\"layout\":{\"ranks_per_node\":2,\"nodes\":2,\"rails\":1},"
                           "\"allreduce\":[");
    for (int i = 0; i < 19; i++) {
        pos += (size_t)snprintf(text + pos, sizeof(text) - pos, "{\"algo\":\"hier\",\"max_bytes\":"
                                "%d,\"channels\":2},", 1024 * (i + 1));
    }
    snprintf(text + pos, sizeof(text) - pos, "{\"algo\":\"hier\",\"channels\":2}]}");
    write_text(text);
    assert_int_equal(st_tune_table_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_int_equal(back.nentries, 20);
    len = strlen(back.ignored);
    assert_true(len < sizeof(back.ignored));
    assert_true(len > 100);
    assert_string_equal(back.ignored + len - 5, ", ...");
    assert_true(strncmp(back.ignored, "allreduce[0].channels (on hier), allreduce[1].channels "
                        "(on hier), ", 66) == 0);
    /* every name before the "..." is whole */
    assert_string_equal(back.ignored + len - 14, "(on hier), ...");
}

/* Each bad file is refused, with a reason that names what is wrong. */
static void test_table_rejects(void **state)
{
    static const struct {
        const char *text;
        const char *reason;
    } bad[] = {
        {"{", "end of file"},
        {"[]", "not a strata-tune-table"},
        {"{\"format\":\"strata-fabric-profile\",\"version\":1}", "not a strata-tune-table"},
        {"{\"format\":\"strata-tune-table\",\"version\":2}", "version 1"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"allreduce\":[]}", "layout"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[]}", "1..64 entries"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"tree\"}]}", "ring, hier or small"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"auto\"}]}", "ring, hier or small"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"max_bytes\":100,\"algo\":\"ring\"}]}",
         "must be null"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"max_bytes\":100,\"algo\":\"ring\"},"
         "{\"max_bytes\":50,\"algo\":\"hier\"},{\"algo\":\"hier\"}]}", "does not exceed"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":2},\"rail_shares\":[0.5,0.6],\"allreduce\":[{\"algo\":\"ring\"}]}",
         "sum to"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":2},\"rail_shares\":[1],\"allreduce\":[{\"algo\":\"ring\"}]}",
         "array of 2"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"pipeline_depth\":17,\"allreduce\":[{\"algo\":\"ring\"}]}",
         "pipeline_depth"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"hier\",\"hier_chunk\":8}]}",
         "hier_chunk"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"format\":\"x\"}", "duplicate"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"ring\",\"channels\":9}]}",
         "channels"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"ring\",\"channels\":\"2\"}]}",
         "channels"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"hier\",\"hier_chunk\":"
         "4611686018427387904}]}", "hier_chunk"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"pipeline_depth\":0,\"allreduce\":[{\"algo\":\"ring\"}]}",
         "pipeline_depth"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[7]}", "not an object"},
        {"{\"format\":\"strata-tune-table\",\"version\":1,\"layout\":{\"ranks_per_node\":2,"
         "\"nodes\":2,\"rails\":1},\"allreduce\":[{\"algo\":\"ring\"},{\"algo\":\"hier\"}]}",
         "only the last entry"},
    };
    st_tune_table_t t;
    char            err[512];

    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        write_text(bad[i].text);
        err[0] = '\0';
        if (st_tune_table_read(tmp_path, &t, err, sizeof(err)) != ST_ERR_INVALID) {
            fail_msg("case %zu was accepted: %s", i, bad[i].text);
        }
        if (strstr(err, bad[i].reason) == NULL || strstr(err, tmp_path) == NULL) {
            fail_msg("case %zu: reason \"%s\" lacks \"%s\" or the path", i, err, bad[i].reason);
        }
    }
    unlink(tmp_path);
    assert_int_equal(st_tune_table_read(tmp_path, &t, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "cannot read it: No such file"));
    /* a directory (reads as empty) and a FIFO (would block) are not read */
    assert_int_equal(st_tune_table_read("/tmp", &t, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "not a regular file"));
    assert_int_equal(mkfifo(tmp_path, 0600), 0);
    assert_int_equal(st_tune_table_read(tmp_path, &t, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "not a regular file"));
    unlink(tmp_path);
}

/* A valid one-rail profile with `extra` members added is refused by st_profile_read with a reason
 * that contains `reason`. */
static void profile_refused(const char *extra, const char *reason)
{
    st_model_fabric_t back;
    char              err[256] = "", text[1024];

    snprintf(text, sizeof(text), "{\"format\":\"strata-fabric-profile\",\"version\":1,"
             "\"layout\":{\"ranks_per_node\":2,\"nodes\":2,\"rails\":1},\"intra\":"
             "{\"alpha_s\":0,\"beta_Bps\":1,\"gamma_Bps\":0},\"inter\":{\"alpha_s\":0,"
             "\"beta_Bps\":1,\"gamma_Bps\":0}%s}", extra);
    write_text(text);
    assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_ERR_INVALID);
    if (strstr(err, reason) == NULL) {
        fail_msg("profile with %s: reason \"%s\" lacks \"%s\"", extra, err, reason);
    }
}

static void test_profile_round_trip(void **state)
{
    st_model_fabric_t f, back;
    char              err[256];

    memset(&f, 0, sizeof(f));
    f.ranks_per_node = 2;
    f.nodes          = 2;
    f.nrails         = 2;
    f.intra          = (st_model_level_t){30e-6, 3e9, 2.5e9};
    f.inter          = (st_model_level_t){50e-6, 187.5e6, 0.0};
    f.rail_beta[0]   = 250e6;
    f.rail_beta[1]   = 125e6;
    f.rail_burst[0]  = 65536;
    f.exchange_alpha = 40e-6;
    f.rail_credit[0] = (st_model_credit_t){2, {16384, 65536}, {1000, 65536}};
    f.small_credit   = (st_model_credit_t){1, {4096}, {4000}};
    f.hier_rest      = (st_model_rest_t){2, {65536, 262144}, {1e-4, 3e-4}};
    assert_int_equal(st_profile_write(tmp_path, &f, "{\"t8\": 1e-4}", "test"), ST_OK);
    assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_int_equal(back.ranks_per_node, 2);
    assert_int_equal(back.nrails, 2);
    assert_true(fabs(back.intra.alpha - 30e-6) < 1e-14);
    assert_true(fabs(back.intra.gamma - 2.5e9) < 1);
    assert_true(fabs(back.inter.beta - 187.5e6) < 1e-3);
    assert_true(fabs(back.rail_beta[1] - 125e6) < 1e-3);
    assert_true(back.rail_burst[0] == 65536 && back.rail_burst[1] == 0);
    assert_true(fabs(back.exchange_alpha - 40e-6) < 1e-14);
    assert_int_equal(back.rail_credit[0].n, 2);
    assert_int_equal(back.rail_credit[1].n, 0);
    assert_true(back.rail_credit[0].bytes[1] == 65536 && back.rail_credit[0].credit[0] == 1000);
    assert_true(back.small_credit.n == 1 && back.small_credit.credit[0] == 4000);
    assert_true(back.hier_rest.n == 2 && back.hier_rest.bytes[1] == 262144 &&
                fabs(back.hier_rest.seconds[1] - 3e-4) < 1e-15);
    /* a credit curve that does not match the rails, or whose points disagree, is refused */
    profile_refused(",\"rail_credit\":[{\"bytes\":[1,2],\"credit_bytes\":[0]}]",
                    "2 bytes and 1 credit_bytes");
    profile_refused(",\"rail_credit\":[{\"bytes\":[2,1],\"credit_bytes\":[0,0]}]",
                    "rail_credit[0].bytes[1] = 1: the bytes must increase");
    profile_refused(",\"small_credit\":{\"bytes\":[4096],\"credit_bytes\":[5000]}",
                    "small_credit.credit_bytes[0] = 5000 exceeds its bytes");
    profile_refused(",\"exchange_alpha_s\":-1", "exchange_alpha_s");
    /* codec costs: written and read back; a profile without them (older) takes the defaults, one
     * that names only some codecs keeps the defaults of the others */
    {
        st_model_codec_cost_t def[ST_MODEL_NCODECS];

        st_model_codec_defaults(def);
        f.codec[strataCodecInt8] = (st_model_codec_cost_t){3.25e-9, 0.5e-9};
        assert_int_equal(st_profile_write(tmp_path, &f, NULL, "test"), ST_OK);
        assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_OK);
        assert_true(fabs(back.codec[strataCodecInt8].encode - 3.25e-9) < 1e-20);
        assert_true(fabs(back.codec[strataCodecInt8].decode - 0.5e-9) < 1e-20);
        assert_true(back.codec[strataCodecSign].encode == 0); /* f's, written as 0 */
        write_text("{\"format\":\"strata-fabric-profile\",\"version\":1,\"layout\":"
                   "{\"ranks_per_node\":2,\"nodes\":2,\"rails\":1},\"intra\":{\"alpha_s\":0,"
                   "\"beta_Bps\":1,\"gamma_Bps\":0},\"inter\":{\"alpha_s\":0,\"beta_Bps\":1,"
                   "\"gamma_Bps\":0}}");
        assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_OK);
        assert_memory_equal(back.codec, def, sizeof(def));
        write_text("{\"format\":\"strata-fabric-profile\",\"version\":1,\"layout\":"
                   "{\"ranks_per_node\":2,\"nodes\":2,\"rails\":1},\"intra\":{\"alpha_s\":0,"
                   "\"beta_Bps\":1,\"gamma_Bps\":0},\"inter\":{\"alpha_s\":0,\"beta_Bps\":1,"
                   "\"gamma_Bps\":0},\"codec_s_per_element\":{\"topk\":{\"encode\":1e-8,"
                   "\"decode\":0}}}");
        assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_OK);
        assert_true(back.codec[strataCodecTopk].encode == 1e-8);
        assert_true(back.codec[strataCodecTopk].decode == 0);
        assert_memory_equal(&back.codec[strataCodecInt8], &def[strataCodecInt8],
                            sizeof(def[0]));
        profile_refused(",\"codec_s_per_element\":{\"zip\":{\"encode\":1,\"decode\":1}}",
                        "codec_s_per_element.zip: not a codec");
        profile_refused(",\"codec_s_per_element\":{\"int8\":{\"encode\":-1,\"decode\":1}}",
                        "codec_s_per_element.int8 needs \"encode\" and \"decode\"");
        profile_refused(",\"codec_s_per_element\":[1]", "must be an object of codecs");
        memset(f.codec, 0, sizeof(f.codec));
    }
    /* samples must be JSON */
    assert_int_equal(st_profile_write(tmp_path, &f, "{not json", "test"), ST_ERR_INVALID);
    /* a profile without a positive bandwidth is refused */
    write_text("{\"format\":\"strata-fabric-profile\",\"version\":1,\"layout\":{\"ranks_per_node\":"
               "2,\"nodes\":2,\"rails\":1},\"intra\":{\"alpha_s\":0,\"beta_Bps\":0,\"gamma_Bps\":0},"
               "\"inter\":{\"alpha_s\":0,\"beta_Bps\":1,\"gamma_Bps\":0}}");
    assert_int_equal(st_profile_read(tmp_path, &back, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "beta_Bps > 0"));
}

/* The model's table on a fabric where the choice is clear by hand: 2 ranks per node x 2 nodes,
 * intra alpha 10 us at 10 GB/s, inter alpha 50 us at 250 MB/s, rails 250 and 125 MB/s.
 * Small at 8 B: 10 + 50 + 10 us plus next to nothing = 70 us; hier at 8 B: two intra alphas and
 * two inter alphas per rail ring (2(N-1) = 2): 20 + 100 = 120 us; ring (n = 4): 6 steps of
 * max(alpha) 50 us = 300 us. So the table starts with small; at 64 MiB hier (inter bytes split
 * over two rails) beats the flat ring (all bytes through one ring on rail 0). Shares follow the
 * rails: 2/3 and 1/3. */
static void test_table_from_model(void **state)
{
    st_model_fabric_t f;
    st_tune_table_t   t;
    char              err[256];

    memset(&f, 0, sizeof(f));
    f.ranks_per_node = 2;
    f.nodes          = 2;
    f.nrails         = 2;
    f.intra          = (st_model_level_t){10e-6, 10e9, 0.0};
    f.inter          = (st_model_level_t){50e-6, 250e6, 0.0};
    f.rail_beta[0]   = 250e6;
    f.rail_beta[1]   = 125e6;
    st_tune_table_from_model(&f, 128 << 10, ST_TUNE_MODEL_MIN_CHUNK, ST_TUNE_MODEL_MAX_CHUNK, &t);
    assert_int_equal(st_tune_table_check(&t, err, sizeof(err)), ST_OK);
    assert_int_equal(st_tune_table_lookup(&t, 8)->algo, ST_ALGO_SMALL);
    assert_int_equal(st_tune_table_lookup(&t, (size_t)64 << 20)->algo, ST_ALGO_HIER);
    assert_true(st_tune_table_lookup(&t, (size_t)64 << 20)->hier_chunk >= ST_TUNE_MODEL_MIN_CHUNK);
    assert_true(st_tune_table_lookup(&t, (size_t)64 << 20)->hier_chunk <= ST_TUNE_MODEL_MAX_CHUNK);
    assert_true(fabs(t.rail_share[0] - 2.0 / 3.0) < 1e-12);
    assert_true(fabs(t.rail_share[1] - 1.0 / 3.0) < 1e-12);
    assert_int_equal(t.ranks_per_node, 2);
    assert_int_equal(t.nrails, 2);
    /* the names of the algorithms (tune/algo.h); a table entry names one that runs, not auto */
    assert_int_equal(st_algo_parse("hier"), ST_ALGO_HIER);
    assert_int_equal(st_algo_parse("auto"), ST_ALGO_AUTO);
    assert_int_equal(st_algo_parse("tree"), ST_ALGO_LAST);
    assert_int_equal(st_algo_parse(NULL), ST_ALGO_LAST);
    assert_string_equal(st_algo_name(ST_ALGO_SMALL), "small");
    assert_string_equal(st_algo_name(ST_ALGO_LAST), "unknown");
    /* the other collectives: hier for large reduce-scatters and all-gathers (half the bytes of
     * the flat ring over the link), a list ending unbounded for each */
    for (int c = ST_MODEL_REDUCESCATTER; c < ST_MODEL_NCOLLS; c++) {
        assert_true(t.colls[c].n >= 1);
        assert_true(t.colls[c].entries[t.colls[c].n - 1].max_bytes == ST_TUNE_NO_LIMIT);
    }
    assert_int_equal(st_tune_table_lookup_coll(&t, ST_MODEL_REDUCESCATTER, (size_t)64 << 20)->algo,
                     ST_ALGO_HIER);
    assert_int_equal(st_tune_table_lookup_coll(&t, ST_MODEL_ALLGATHER, (size_t)64 << 20)->algo,
                     ST_ALGO_HIER);
    assert_null(st_tune_table_lookup_coll(&t, ST_MODEL_ALLREDUCE, 8));
    t.colls[ST_MODEL_ALLTOALL].entries[0].algo = ST_ALGO_SMALL;
    assert_int_equal(st_tune_table_check(&t, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "alltoall[0]: algorithm 3 is not ring or hier"));
    t.colls[ST_MODEL_ALLTOALL].entries[0].algo = ST_ALGO_RING;
    t.entries[0].algo = ST_ALGO_AUTO;
    assert_int_equal(st_tune_table_check(&t, err, sizeof(err)), ST_ERR_INVALID);
    assert_non_null(strstr(err, "is not ring, hier or small"));
}

/* The lists of reduce-scatter, all-gather and all-to-all: written, read back, looked up, and
 * refused when malformed. */
static void test_table_coll_lists(void **state)
{
    static const char *const bad[] = {
        "\"alltoall\": {}",
        "\"alltoall\": []",
        "\"alltoall\": [{\"algo\": \"small\", \"max_bytes\": null}]",
        "\"alltoall\": [{\"algo\": \"ring\", \"max_bytes\": 4096}]",
        "\"all_gather\": [{\"algo\": \"hier\", \"max_bytes\": 4096}, {\"algo\": \"ring\", "
        "\"max_bytes\": 4096}, {\"algo\": \"hier\"}]",
        "\"reduce_scatter\": [{\"algo\": \"ring\"}, {\"algo\": \"hier\"}]",
        "\"reduce_scatter\": [{\"algo\": \"hier\", \"max_bytes\": -1}, {\"algo\": \"ring\"}]",
    };
    st_tune_table_t t, back;
    char            err[256];
    FILE           *fp;

    memset(&t, 0, sizeof(t));
    t.ranks_per_node = 4;
    t.nodes          = 2;
    t.nrails         = 1;
    t.nentries       = 1;
    t.entries[0]     = (st_tune_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_HIER, 0, 0};
    t.colls[ST_MODEL_REDUCESCATTER].n = 2;
    t.colls[ST_MODEL_REDUCESCATTER].entries[0] = (st_tune_coll_entry_t){65536, ST_ALGO_RING};
    t.colls[ST_MODEL_REDUCESCATTER].entries[1] =
        (st_tune_coll_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_HIER};
    t.colls[ST_MODEL_ALLTOALL].n = 1;
    t.colls[ST_MODEL_ALLTOALL].entries[0] = (st_tune_coll_entry_t){ST_TUNE_NO_LIMIT, ST_ALGO_RING};
    assert_int_equal(st_tune_table_write(tmp_path, &t, "test"), ST_OK);
    assert_int_equal(st_tune_table_read(tmp_path, &back, err, sizeof(err)), ST_OK);
    assert_int_equal(back.colls[ST_MODEL_REDUCESCATTER].n, 2);
    assert_int_equal(back.colls[ST_MODEL_ALLGATHER].n, 0);
    assert_int_equal(back.colls[ST_MODEL_ALLTOALL].n, 1);
    assert_int_equal(st_tune_table_lookup_coll(&back, ST_MODEL_REDUCESCATTER, 65536)->algo,
                     ST_ALGO_RING);
    assert_int_equal(st_tune_table_lookup_coll(&back, ST_MODEL_REDUCESCATTER, 65537)->algo,
                     ST_ALGO_HIER);
    assert_null(st_tune_table_lookup_coll(&back, ST_MODEL_ALLGATHER, 65536));
    assert_int_equal(st_tune_table_lookup_coll(&back, ST_MODEL_ALLTOALL, 1)->algo, ST_ALGO_RING);
    for (size_t i = 0; i < sizeof(bad) / sizeof(bad[0]); i++) {
        fp = fopen(tmp_path, "w");
        assert_non_null(fp);
        fprintf(fp, "{\"format\": \"strata-tune-table\", \"version\": 1, \"layout\": "
                "{\"ranks_per_node\": 4, \"nodes\": 2, \"rails\": 1}, \"allreduce\": "
                "[{\"algo\": \"ring\"}], %s}", bad[i]);
        fclose(fp);
        if (st_tune_table_read(tmp_path, &back, err, sizeof(err)) != ST_ERR_INVALID) {
            fail_msg("accepted: %s", bad[i]);
        }
        assert_non_null(strstr(err, tmp_path)); /* the reason names the file */
    }
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup_teardown(test_table_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_rejects, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_dropped_fields, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_ignored_truncated, setup, teardown),
        cmocka_unit_test_setup_teardown(test_env_override, unset_overrides, unset_overrides),
        cmocka_unit_test_setup_teardown(test_profile_round_trip, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_from_model, setup, teardown),
        cmocka_unit_test_setup_teardown(test_table_coll_lists, setup, teardown),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
