/*
 * test_param.c - STRATA_* parameter parsing, subsystem masks and status translation.
 */
#include "config.h"

#include <math.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "transports/transport.h"

static void test_parse_size(void **state)
{
    size_t v;

    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "512k", &v), ST_OK);
    assert_int_equal(v, 512 * 1024);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "4M", &v), ST_OK);
    assert_int_equal(v, 4 << 20);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "1gb", &v), ST_OK);
    assert_int_equal(v, (size_t)1 << 30);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "17", &v), ST_OK);
    assert_int_equal(v, 17);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "-1", &v), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "12q", &v), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "", &v), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_SIZE, "99999999999999999999g", &v),
                     ST_ERR_INVALID);
}

static void test_parse_time(void **state)
{
    double t;

    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "30s", &t), ST_OK);
    assert_true(t == 30.0);
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "250ms", &t), ST_OK);
    assert_true(fabs(t - 0.25) < 1e-12);
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "50us", &t), ST_OK);
    assert_true(fabs(t - 50e-6) < 1e-15);
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "2", &t), ST_OK);
    assert_true(t == 2.0);
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "inf", &t), ST_OK);
    assert_true(isinf(t));
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "-3", &t), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_TIME, "3 days", &t), ST_ERR_INVALID);
}

static void test_parse_int_bool(void **state)
{
    int      i;
    unsigned u;

    assert_int_equal(st_config_parse_value(ST_CFG_INT, "-7", &i), ST_OK);
    assert_int_equal(i, -7);
    assert_int_equal(st_config_parse_value(ST_CFG_UINT, "-7", &u), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_UINT, "8", &u), ST_OK);
    assert_int_equal(u, 8);
    assert_int_equal(st_config_parse_value(ST_CFG_INT, "8x", &i), ST_ERR_INVALID);
    assert_int_equal(st_config_parse_value(ST_CFG_BOOL, "yes", &i), ST_OK);
    assert_int_equal(i, 1);
    assert_int_equal(st_config_parse_value(ST_CFG_BOOL, "off", &i), ST_OK);
    assert_int_equal(i, 0);
    assert_int_equal(st_config_parse_value(ST_CFG_BOOL, "maybe", &i), ST_ERR_INVALID);
}

typedef struct {
    char  *s;
    size_t z;
} test_opts_t;

static void test_table_env(void **state)
{
    static const st_config_field_t fields[] = {
        {"TSTR", "abc", "a string", offsetof(test_opts_t, s), ST_CFG_STRING},
        {"TSIZE", "1k", "a size", offsetof(test_opts_t, z), ST_CFG_SIZE},
        {NULL, NULL, NULL, 0, 0}
    };
    test_opts_t             opts = {NULL, 0};
    const st_config_table_t table = {"TEST_", "test", fields, &opts};

    unsetenv("STRATA_TEST_TSTR");
    setenv("STRATA_TEST_TSIZE", "2m", 1);
    assert_int_equal(st_config_table_parse(&table), ST_OK);
    assert_string_equal(opts.s, "abc");
    assert_int_equal(opts.z, 2 << 20);
    setenv("STRATA_TEST_TSIZE", "lots", 1);
    assert_int_equal(st_config_table_parse(&table), ST_ERR_INVALID);
    /* the error names the variable and its value */
    assert_non_null(strstr(st_log_last_error(), "STRATA_TEST_TSIZE"));
    assert_non_null(strstr(st_log_last_error(), "lots"));
    st_config_table_release(&table);
    assert_null(opts.s);
    unsetenv("STRATA_TEST_TSIZE");
}

static void test_subsys(void **state)
{
    assert_int_equal(st_log_parse_subsys("INIT,COLL"), ST_SUB_INIT | ST_SUB_COLL);
    assert_int_equal(st_log_parse_subsys("^UCX"), ST_SUB_ALL & ~ST_SUB_UCX);
    assert_int_equal(st_log_parse_subsys("all"), ST_SUB_ALL);
    assert_int_equal(st_log_parse_subsys(""), ST_SUB_ALL);
    assert_true(st_log_parse_subsys("INIT,BOGUS") < 0);
}

static void test_status_map(void **state)
{
    assert_int_equal(st_status_to_result(ST_OK), strataSuccess);
    assert_int_equal(st_status_to_result(ST_ERR_INVALID), strataInvalidArgument);
    assert_int_equal(st_status_to_result(ST_ERR_USAGE), strataInvalidUsage);
    assert_int_equal(st_status_to_result(ST_ERR_TIMEOUT), strataTimeout);
    assert_int_equal(st_status_to_result(ST_ERR_REMOTE), strataRemoteError);
    assert_int_equal(st_status_to_result(ST_ERR_IO), strataSystemError);
    assert_int_equal(st_status_to_result(ST_INPROGRESS), strataInProgress);
    assert_string_equal(st_status_str(ST_ERR_TIMEOUT), "timeout");
}

static void test_core_defaults(void **state)
{
    unsetenv("STRATA_CHUNK_SIZE");
    assert_int_equal(st_param_init(st_transport_config_tables()), ST_OK);
    assert_int_equal(st_core_config.chunk_size, 512 * 1024);
    assert_true(st_core_config.timeout == 600.0);
    assert_string_equal(st_core_config.algo, "auto");
}

/* Every parameter the library knows has a row in the README's table. */
static void test_readme_lists_every_param(void **state)
{
    char   *printed = NULL, *readme = NULL;
    size_t  len = 0, n;
    FILE   *f;
    int     found = 0;

    assert_int_equal(st_param_init(st_transport_config_tables()), ST_OK);
    f = open_memstream(&printed, &len);
    assert_non_null(f);
    st_config_print(f);
    fclose(f);
    f = fopen(ST_TOP_SRCDIR "/README.md", "r");
    assert_non_null(f);
    readme = calloc(1, 1 << 20);
    n = fread(readme, 1, (1 << 20) - 1, f);
    fclose(f);
    assert_true(n > 0);
    for (char *line = strtok(printed, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        char name[128], quoted[160];
        char *eq = strchr(line, '=');

        if (strncmp(line, "STRATA_", 7) != 0 || eq == NULL) {
            continue;
        }
        snprintf(name, sizeof(name), "%.*s", (int)(eq - line), line);
        snprintf(quoted, sizeof(quoted), "| `%s` |", name);
        if (strstr(readme, quoted) == NULL) {
            fail_msg("README.md has no table row for %s", name);
        }
        found++;
    }
    assert_true(found >= 10);
    free(printed);
    free(readme);
}

/* Runs st_param_adjusted with stderr (the log's stream) in a file; out receives its lines. */
static int adjusted_captured(const char *var, st_cfg_type_t type, const void *given,
                             const void *used, char *out, size_t len)
{
    FILE  *tmp = tmpfile();
    int    saved, said, level = st_log_level;
    size_t n;

    assert_non_null(tmp);
    fflush(stderr);
    saved = dup(2);
    assert_true(saved >= 0);
    assert_int_equal(dup2(fileno(tmp), 2), 2);
    st_log_level = ST_LOG_WARN;
    said = st_param_adjusted(var, type, given, used, "the reason");
    st_log_level = level;
    fflush(stderr);
    dup2(saved, 2);
    close(saved);
    rewind(tmp);
    n = fread(out, 1, len - 1, tmp);
    out[n] = '\0';
    fclose(tmp);
    return said;
}

/* A value the library changes is said once at WARN with the variable, both values and why; a
 * variable the user did not set is adapted without a WARN. */
static void test_adjusted_warns_once(void **state)
{
    size_t   given = 7, used = 64, other = 128;
    unsigned depth = 1, depth_used = 4;
    double   t = 0.2, t_used = 1.0;
    char     out[1024];

    assert_int_equal(st_param_init(st_transport_config_tables()), ST_OK);
    setenv("STRATA_TEST_ADJ", "7", 1);
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ", ST_CFG_SIZE, &given, &used, out,
                                       sizeof(out)), 1);
    assert_non_null(strstr(out, " WARN "));
    assert_non_null(strstr(out, "STRATA_TEST_ADJ 7 raised to 64: the reason\n"));
    /* the same change again: silent */
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ", ST_CFG_SIZE, &given, &used, out,
                                       sizeof(out)), 0);
    assert_string_equal(out, "");
    /* another value used is another fact */
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ", ST_CFG_SIZE, &given, &other, out,
                                       sizeof(out)), 1);
    assert_non_null(strstr(out, "STRATA_TEST_ADJ 7 raised to 128: the reason"));
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ", ST_CFG_SIZE, &other, &used, out,
                                       sizeof(out)), 0); /* same used value as the first */
    /* lowered; other types print as --print-config does */
    setenv("STRATA_TEST_ADJ_DEPTH", "4", 1);
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ_DEPTH", ST_CFG_UINT, &depth_used, &depth,
                                       out, sizeof(out)), 1);
    assert_non_null(strstr(out, "STRATA_TEST_ADJ_DEPTH 4 lowered to 1: the reason"));
    setenv("STRATA_TEST_ADJ_TIME", "200ms", 1);
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ_TIME", ST_CFG_TIME, &t, &t_used, out,
                                       sizeof(out)), 1);
    assert_non_null(strstr(out, "STRATA_TEST_ADJ_TIME 200ms raised to 1s: the reason"));
    /* not set by the user: the default adapted, no WARN */
    unsetenv("STRATA_TEST_ADJ_UNSET");
    assert_int_equal(adjusted_captured("STRATA_TEST_ADJ_UNSET", ST_CFG_SIZE, &given, &used, out,
                                       sizeof(out)), 0);
    assert_string_equal(out, "");
    unsetenv("STRATA_TEST_ADJ");
    unsetenv("STRATA_TEST_ADJ_DEPTH");
    unsetenv("STRATA_TEST_ADJ_TIME");
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_parse_size),
        cmocka_unit_test(test_parse_time),
        cmocka_unit_test(test_parse_int_bool),
        cmocka_unit_test(test_table_env),
        cmocka_unit_test(test_subsys),
        cmocka_unit_test(test_status_map),
        cmocka_unit_test(test_core_defaults),
        cmocka_unit_test(test_readme_lists_every_param),
        cmocka_unit_test(test_adjusted_warns_once),
    };

    setenv("STRATA_DEBUG", "NONE", 1);
    return cmocka_run_group_tests(tests, NULL, NULL);
}
