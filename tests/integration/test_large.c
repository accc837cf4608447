/*
 * test_large.c - B14 of ../shared/cases/README.md: more than 2^31 elements (counts and offsets
 * must be size_t all the way down). Two ranks (1+1) and about 9 GiB of memory in all, so it runs
 * only when STRATA_TEST_LARGE=1 is set; otherwise it exits 77 (automake SKIP) saying why.
 *   AllReduce sum uint8, count 2^31 + 17, out of place: recv[i] = (26 i + 1) mod 256.
 *   ReduceScatter sum uint8, recvcount 2^30 + 3: rank r's element j = (26 (r C + j) + 1) mod 256.
 *   AllGather int8, count 2^30 + 5 (the receive side passes 2^31 bytes): block r = rank r's input.
 * Every element is checked (not only samples), and the guards around every buffer.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <cmocka.h>

#include "harness.h"

#define AR_COUNT ((size_t)(1ull << 31) + 17)
#define RS_COUNT ((size_t)(1ull << 30) + 3)
#define AG_COUNT ((size_t)(1ull << 30) + 5)

static const char *large_env = "STRATA_TIMEOUT=600s";

static int check_u8(const uint8_t *got, size_t count, size_t base, unsigned mul, unsigned add,
                    const char *what)
{
    for (size_t i = 0; i < count; i++) {
        uint8_t want = (uint8_t)(mul * (base + i) + add);

        if (got[i] != want) {
            size_t nbad = 0;

            for (size_t k = i; k < count; k++) {
                nbad += got[k] != (uint8_t)(mul * (base + k) + add);
            }
            IT_FAIL("%s: %zu of %zu elements wrong, first at [%zu] (global %zu): got %u, "
                    "expected %u", what, nbad, count, i, base + i, got[i], want);
            return 0;
        }
    }
    return 1;
}

static int large_allreduce(it_ctx_t *c)
{
    it_buf_t sb, rb;
    uint8_t *send = it_buf_alloc(&sb, AR_COUNT, 0, 0);
    uint8_t *recv = it_buf_alloc(&rb, AR_COUNT, 0, 0xEE);

    for (size_t i = 0; i < AR_COUNT; i++) {
        send[i] = (uint8_t)(13 * i + (size_t)c->rank);
    }
    if (IT_OK(strataAllReduce(send, recv, AR_COUNT, strataUint8, strataSum, c->comm, NULL))) {
        check_u8(recv, AR_COUNT, 0, 26, 1, "B14 AllReduce uint8 count 2^31+17");
        check_u8(send, AR_COUNT, 0, 13, (unsigned)c->rank, "B14 AllReduce sendbuff unchanged");
    }
    it_buf_guards(&sb, "B14 AllReduce send");
    it_buf_guards(&rb, "B14 AllReduce recv");
    it_buf_free(&sb);
    it_buf_free(&rb);
    return 0;
}

static int large_reducescatter(it_ctx_t *c)
{
    size_t   total = RS_COUNT * (size_t)c->nranks;
    it_buf_t sb, rb;
    uint8_t *send = it_buf_alloc(&sb, total, 0, 0);
    uint8_t *recv = it_buf_alloc(&rb, RS_COUNT, 0, 0xEE);

    for (size_t i = 0; i < total; i++) {
        send[i] = (uint8_t)(13 * i + (size_t)c->rank);
    }
    if (IT_OK(strataReduceScatter(send, recv, RS_COUNT, strataUint8, strataSum, c->comm,
                                  NULL))) {
        check_u8(recv, RS_COUNT, (size_t)c->rank * RS_COUNT, 26, 1,
                 "B14 ReduceScatter uint8 recvcount 2^30+3");
    }
    it_buf_guards(&sb, "B14 ReduceScatter send");
    it_buf_guards(&rb, "B14 ReduceScatter recv");
    it_buf_free(&sb);
    it_buf_free(&rb);
    return 0;
}

static int large_allgather(it_ctx_t *c)
{
    size_t   total = AG_COUNT * (size_t)c->nranks;
    it_buf_t sb, rb;
    uint8_t *send = it_buf_alloc(&sb, AG_COUNT, 0, 0);
    uint8_t *recv = it_buf_alloc(&rb, total, 0, 0xEE);

    for (size_t i = 0; i < AG_COUNT; i++) {
        send[i] = (uint8_t)(7 * i + 50 * (size_t)c->rank);
    }
    if (IT_OK(strataAllGather(send, recv, AG_COUNT, strataInt8, c->comm, NULL))) {
        for (int q = 0; q < c->nranks; q++) {
            char what[64];

            snprintf(what, sizeof(what), "B14 AllGather int8 count 2^30+5 block %d", q);
            check_u8(recv + (size_t)q * AG_COUNT, AG_COUNT, 0, 7, 50u * (unsigned)q, what);
        }
    }
    it_buf_guards(&sb, "B14 AllGather send");
    it_buf_guards(&rb, "B14 AllGather recv");
    it_buf_free(&sb);
    it_buf_free(&rb);
    return 0;
}

static void run_large(it_fn_t fn)
{
    it_opts_t o = {.nranks = 2, .layout = "1+1", .env = large_env, .timeout_s = 900};

    assert_int_equal(it_run(&o, fn, NULL), 0);
}

static void test_b14_allreduce(void **state)     { run_large(large_allreduce); }
static void test_b14_reducescatter(void **state) { run_large(large_reducescatter); }
static void test_b14_allgather(void **state)     { run_large(large_allgather); }

static long long mem_available_kib(void)
{
    FILE     *f = fopen("/proc/meminfo", "r");
    char      line[256];
    long long kib = -1;

    if (f == NULL) {
        return -1;
    }
    while (fgets(line, sizeof(line), f) != NULL) {
        if (sscanf(line, "MemAvailable: %lld kB", &kib) == 1) {
            break;
        }
    }
    fclose(f);
    return kib;
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_b14_allreduce),
        cmocka_unit_test(test_b14_reducescatter),
        cmocka_unit_test(test_b14_allgather),
    };
    const char *on    = getenv("STRATA_TEST_LARGE");
    long long   avail = mem_available_kib();

    if (on == NULL || strcmp(on, "1") != 0) {
        printf("SKIP: B14 (more than 2^31 elements) needs about 9 GiB of memory and minutes; "
               "set STRATA_TEST_LARGE=1 to run it\n");
        return 77;
    }
    if (avail >= 0 && avail < 11LL * 1024 * 1024) {
        printf("SKIP: B14 needs about 11 GiB of available memory, this machine has %lld MiB\n",
               avail / 1024);
        return 77;
    }
    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
