/*
 * test_colls.c - every collective of the public API on 1..8 forked ranks and several node
 * layouts, with exact expected values, guards around every buffer and cross-rank bitwise checks.
 *
 * One harness run per (nranks, layout) executes a whole battery on one communicator, so process
 * start and init are paid once per layout: AllReduce, ReduceScatter, AllGather, Broadcast, Reduce
 * and grouped Send/Recv, in place and out of place, at counts around nranks and around the
 * internal chunk (STRATA_CHUNK_SIZE, 512k bytes = 131072 fp32 by default; a run with 4k makes many
 * chunks cheaply). A second battery runs AllReduce for every datatype x op, including a
 * strataRedOpCreatePreMulSum op, with inputs whose exact result is known.
 *
 * AlltoAll, AlltoAllv, Gather and Scatter run in the first battery (each count, every root and
 * mode of the rooted ones, AlltoAllv's patterns: zero counts, skewed, all to one rank, uniform,
 * in a group and on a host stream) and once per datatype in the second; every byte of a block is
 * a function of (source rank, destination rank, element, byte), and the gaps between AlltoAllv's
 * received blocks must stay untouched.
 */
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <cmocka.h>

#include "harness.h"

/* Which counts a battery uses. */
typedef enum {
    SET_FULL,   /* 0, 1, n-1, n+1, 1000, 131071, 131072, 131073 */
    SET_SMALL,  /* a subset for 8 ranks on 2 cores */
    SET_CHUNK4K /* run with STRATA_CHUNK_SIZE=4k: around 1024 fp32 and n * 1024 */
} count_set_t;

#define MAX_COUNTS 16

static size_t make_counts(count_set_t set, int n, size_t *counts)
{
    size_t k = 0;
    size_t c = 4096 / sizeof(float);

    switch (set) {
    case SET_FULL:
        counts[k++] = 0;
        counts[k++] = 1;
        counts[k++] = (size_t)n - 1;
        counts[k++] = (size_t)n + 1;
        counts[k++] = 1000;
        counts[k++] = 131071;
        counts[k++] = 131072;
        counts[k++] = 131073;
        break;
    case SET_SMALL:
        counts[k++] = 0;
        counts[k++] = 1;
        counts[k++] = (size_t)n - 1;
        counts[k++] = (size_t)n + 1;
        counts[k++] = 1000;
        counts[k++] = 131073;
        break;
    case SET_CHUNK4K:
        counts[k++] = c - 1;
        counts[k++] = c;
        counts[k++] = c + 1;
        counts[k++] = 2 * c + 7;
        counts[k++] = (size_t)n * c - 1; /* a ring block of exactly one chunk, and around it */
        counts[k++] = (size_t)n * c;
        counts[k++] = (size_t)n * c + 1;
        counts[k++] = 3 * (size_t)n * c + 5;
        break;
    }
    return k;
}

/* Inputs: small integers, so every sum over up to 8 ranks is exact in every type. */
static double xval(int r, size_t i)
{
    return (double)((int)((i * 7 + (size_t)r * 3 + 1) % 9) - 4);
}

/* Unique per (rank, index) for data-movement collectives (int32). */
static int32_t gval(int r, size_t i)
{
    return (int32_t)(((uint32_t)r << 24) | (uint32_t)((i * 2654435761u) & 0xffffffu));
}

typedef struct {
    it_ctx_t *c;
    int       n, r;
} bat_t;

static void *xmalloc(size_t bytes)
{
    void *p = malloc(bytes > 0 ? bytes : 1);

    if (p == NULL) {
        abort();
    }
    return p;
}


/* ------------------------------------------------------------------------------------------ */

static void do_allreduce(bat_t *b, strataDataType_t dt, size_t count, int inplace)
{
    size_t   es = it_dtype_size(dt), bytes = count * es;
    it_buf_t sb, rb;
    char     what[160];
    void    *send = it_buf_alloc(&sb, bytes, 0, 0);
    void    *recv = inplace ? send : it_buf_alloc(&rb, bytes, 0, 0xEE);
    void    *exp  = xmalloc(bytes);
    void    *orig = xmalloc(bytes);

    snprintf(what, sizeof(what), "AllReduce %s sum count %zu %s", it_dtype_name(dt), count,
             inplace ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        double s = 0;

        for (int k = 0; k < b->n; k++) {
            s += xval(k, i);
        }
        it_set(dt, send, i, xval(b->r, i));
        it_set(dt, exp, i, s);
    }
    memcpy(orig, send, bytes);
    if (IT_OK(strataAllReduce(send, recv, count, dt, strataSum, b->c->comm, NULL))) {
        it_expect_equal(dt, recv, exp, count, what);
        if (!inplace) {
            IT_EXPECT(memcmp(send, orig, bytes) == 0, "%s: sendbuff was modified", what);
        }
    }
    it_buf_guards(&sb, what);
    if (!inplace) {
        it_buf_guards(&rb, what);
    }
    it_same_on_all(b->c->comm, recv, bytes, what);
    if (!inplace) {
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
    free(orig);
}

static void do_reducescatter(bat_t *b, size_t count, int inplace)
{
    strataDataType_t dt    = strataFloat32;
    size_t           total = count * (size_t)b->n;
    it_buf_t         sb, rb;
    char             what[160];
    float           *send = it_buf_alloc(&sb, total * sizeof(float), 0, 0);
    float           *recv;
    float           *exp  = xmalloc(count * sizeof(float));
    float           *orig = xmalloc(total * sizeof(float));

    recv = inplace ? send + (size_t)b->r * count
                   : it_buf_alloc(&rb, count * sizeof(float), 0, 0xEE);
    snprintf(what, sizeof(what), "ReduceScatter fp32 sum recvcount %zu %s", count,
             inplace ? "in place" : "out of place");
    for (size_t i = 0; i < total; i++) {
        send[i] = (float)xval(b->r, i);
    }
    for (size_t j = 0; j < count; j++) {
        double s = 0;

        for (int k = 0; k < b->n; k++) {
            s += xval(k, (size_t)b->r * count + j);
        }
        exp[j] = (float)s;
    }
    memcpy(orig, send, total * sizeof(float));
    if (IT_OK(strataReduceScatter(send, recv, count, dt, strataSum, b->c->comm, NULL))) {
        it_expect_equal(dt, recv, exp, count, what);
        if (!inplace) {
            IT_EXPECT(memcmp(send, orig, total * sizeof(float)) == 0, "%s: sendbuff was modified",
                      what);
        }
    }
    it_buf_guards(&sb, what);
    if (!inplace) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
    free(orig);
}

static void do_allgather(bat_t *b, size_t count, int inplace)
{
    size_t   total = count * (size_t)b->n;
    it_buf_t sb, rb;
    char     what[160];
    int32_t *recv = it_buf_alloc(&rb, total * sizeof(int32_t), 0, 0xEE);
    int32_t *send;
    int32_t *exp  = xmalloc(total * sizeof(int32_t));

    send = inplace ? recv + (size_t)b->r * count
                   : it_buf_alloc(&sb, count * sizeof(int32_t), 0, 0);
    snprintf(what, sizeof(what), "AllGather int32 count %zu %s", count,
             inplace ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        send[i] = gval(b->r, i);
    }
    for (int k = 0; k < b->n; k++) {
        for (size_t i = 0; i < count; i++) {
            exp[(size_t)k * count + i] = gval(k, i);
        }
    }
    if (IT_OK(strataAllGather(send, recv, count, strataInt32, b->c->comm, NULL))) {
        it_expect_equal(strataInt32, recv, exp, total, what);
        if (!inplace) {
            it_expect_equal(strataInt32, send, exp + (size_t)b->r * count, count, what);
        }
    }
    it_buf_guards(&rb, what);
    if (!inplace) {
        it_buf_guards(&sb, what);
        it_buf_free(&sb);
    }
    it_same_on_all(b->c->comm, recv, total * sizeof(int32_t), what);
    it_buf_free(&rb);
    free(exp);
}

/* mode 0: out of place, non-root sendbuff NULL; 1: out of place, non-root sendbuff a buffer that
 * must stay untouched; 2: in place. */
static void do_broadcast(bat_t *b, size_t count, int root, int mode)
{
    size_t   bytes = count * sizeof(int32_t);
    it_buf_t sb, rb;
    char     what[160];
    int32_t *recv = it_buf_alloc(&rb, bytes, 0, 0xEE);
    int32_t *send = NULL;
    int32_t *exp  = xmalloc(bytes);
    int      is_root = b->r == root;

    snprintf(what, sizeof(what), "Broadcast int32 count %zu root %d %s", count, root,
             mode == 2 ? "in place" : mode == 1 ? "out of place" : "out of place, NULL sendbuff");
    for (size_t i = 0; i < count; i++) {
        exp[i] = gval(root, i);
    }
    if (mode == 2) {
        send = recv;
        if (is_root) {
            memcpy(recv, exp, bytes);
        }
    } else if (is_root || mode == 1) {
        send = it_buf_alloc(&sb, bytes, 0, 0x33);
        if (is_root) {
            memcpy(send, exp, bytes);
        }
    }
    if (IT_OK(strataBroadcast(send, recv, count, strataInt32, root, b->c->comm, NULL))) {
        it_expect_equal(strataInt32, recv, exp, count, what);
        if (send != NULL && send != recv) {
            if (is_root) {
                it_expect_equal(strataInt32, send, exp, count, what);
            } else {
                for (size_t i = 0; i < bytes; i++) {
                    if (((uint8_t *)send)[i] != 0x33) {
                        IT_FAIL("%s: non-root sendbuff written at byte %zu", what, i);
                        break;
                    }
                }
            }
        }
    }
    it_buf_guards(&rb, what);
    if (send != NULL && send != recv) {
        it_buf_guards(&sb, what);
        it_buf_free(&sb);
    }
    it_same_on_all(b->c->comm, recv, bytes, what);
    it_buf_free(&rb);
    free(exp);
}

static void do_reduce(bat_t *b, size_t count, int root, int inplace)
{
    size_t   bytes = count * sizeof(float);
    it_buf_t sb, rb;
    char     what[160];
    float   *send = it_buf_alloc(&sb, bytes, 0, 0);
    float   *recv = inplace ? send : it_buf_alloc(&rb, bytes, 0, 0xEE);
    float   *exp  = xmalloc(bytes);
    float   *orig = xmalloc(bytes);
    int      is_root = b->r == root;

    snprintf(what, sizeof(what), "Reduce fp32 sum count %zu root %d %s", count, root,
             inplace ? "in place" : "out of place");
    for (size_t i = 0; i < count; i++) {
        double s = 0;

        for (int k = 0; k < b->n; k++) {
            s += xval(k, i);
        }
        send[i] = (float)xval(b->r, i);
        exp[i]  = (float)s;
    }
    memcpy(orig, send, bytes);
    if (IT_OK(strataReduce(send, recv, count, strataFloat32, strataSum, root, b->c->comm, NULL))) {
        if (is_root) {
            it_expect_equal(strataFloat32, recv, exp, count, what);
        } else if (inplace) {
            it_expect_equal(strataFloat32, recv, orig, count, "non-root in-place buffer unchanged");
        } else {
            for (size_t i = 0; i < bytes; i++) {
                if (((uint8_t *)recv)[i] != 0xEE) {
                    IT_FAIL("%s: non-root recvbuff written at byte %zu", what, i);
                    break;
                }
            }
        }
        if (!inplace) {
            IT_EXPECT(memcmp(send, orig, bytes) == 0, "%s: sendbuff was modified", what);
        }
    }
    it_buf_guards(&sb, what);
    if (!inplace) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
    free(orig);
}

/* Ring shift in a group: send to r+1 and r-1, receive from r-1 and r+1 (self pairs when n = 1,
 * the same peer twice when n = 2: matching is in call order). fp64 to vary the element size. */
static void do_sendrecv_group(bat_t *b, size_t count)
{
    int      right = (b->r + 1) % b->n, left = (b->r + b->n - 1) % b->n;
    size_t   bytes = count * sizeof(double);
    it_buf_t s1, s2, r1, r2;
    char     what[160];
    double  *sa = it_buf_alloc(&s1, bytes, 0, 0);
    double  *sbuf = it_buf_alloc(&s2, bytes, 0, 0);
    double  *ra = it_buf_alloc(&r1, bytes, 0, 0xEE);
    double  *rbuf = it_buf_alloc(&r2, bytes, 0, 0xEE);

    snprintf(what, sizeof(what), "grouped Send/Recv fp64 ring shift count %zu", count);
    for (size_t i = 0; i < count; i++) {
        sa[i]   = 1000.0 * b->r + (double)(i % 977);       /* to the right */
        sbuf[i] = -1000.0 * b->r - (double)(i % 977) - 1;  /* to the left */
    }
    IT_OK(strataGroupStart());
    IT_OK(strataSend(sa, count, strataFloat64, right, b->c->comm, NULL));
    IT_OK(strataSend(sbuf, count, strataFloat64, left, b->c->comm, NULL));
    IT_OK(strataRecv(ra, count, strataFloat64, left, b->c->comm, NULL));
    IT_OK(strataRecv(rbuf, count, strataFloat64, right, b->c->comm, NULL));
    if (IT_OK(strataGroupEnd())) {
        size_t bad = 0;

        for (size_t i = 0; i < count && bad == 0; i++) {
            double want_a = 1000.0 * left + (double)(i % 977);
            double want_b = -1000.0 * right - (double)(i % 977) - 1;

            if (ra[i] != want_a || rbuf[i] != want_b) {
                IT_FAIL("%s: [%zu] got %g and %g, expected %g (from %d) and %g (from %d)", what,
                        i, ra[i], rbuf[i], want_a, left, want_b, right);
                bad++;
            }
        }
    }
    it_buf_guards(&s1, what);
    it_buf_guards(&s2, what);
    it_buf_guards(&r1, what);
    it_buf_guards(&r2, what);
    it_buf_free(&s1);
    it_buf_free(&s2);
    it_buf_free(&r1);
    it_buf_free(&r2);
}

/* Blocking Send/Recv outside a group between pairs (0,1), (2,3), ...: the even rank sends first. */
static void do_sendrecv_pairs(bat_t *b, size_t count)
{
    int      peer = b->r ^ 1;
    size_t   bytes = count * sizeof(int32_t);
    it_buf_t sb, rb;
    char     what[160];
    int32_t *send, *recv;

    if (peer >= b->n) {
        return;
    }
    send = it_buf_alloc(&sb, bytes, 0, 0);
    recv = it_buf_alloc(&rb, bytes, 0, 0xEE);
    snprintf(what, sizeof(what), "blocking Send/Recv int32 count %zu with rank %d", count, peer);
    for (size_t i = 0; i < count; i++) {
        send[i] = gval(b->r, i);
    }
    if ((b->r & 1) == 0) {
        IT_OK(strataSend(send, count, strataInt32, peer, b->c->comm, NULL));
        IT_OK(strataRecv(recv, count, strataInt32, peer, b->c->comm, NULL));
    } else {
        IT_OK(strataRecv(recv, count, strataInt32, peer, b->c->comm, NULL));
        IT_OK(strataSend(send, count, strataInt32, peer, b->c->comm, NULL));
    }
    for (size_t i = 0; i < count; i++) {
        if (recv[i] != gval(peer, i)) {
            IT_FAIL("%s: [%zu] got 0x%08x, expected 0x%08x", what, i, (unsigned)recv[i],
                    (unsigned)gval(peer, i));
            break;
        }
    }
    it_buf_guards(&sb, what);
    it_buf_guards(&rb, what);
    it_buf_free(&sb);
    it_buf_free(&rb);
}

/* ------------------------------------------------------------------------------------------ */
/* all-to-all, all-to-all-v, gather, scatter: data movement only, so any datatype is its bytes;  */
/* byte b of element i of the block that rank src sends rank dst is abyte(src, dst, i, b)        */
/* ------------------------------------------------------------------------------------------ */

static uint8_t abyte(int src, int dst, size_t i, size_t b)
{
    uint32_t h = (uint32_t)src * 0x9E3779B1u ^ (uint32_t)dst * 0x85EBCA77u ^
                 (uint32_t)i * 0xC2B2AE3Du ^ (uint32_t)b * 0x27D4EB2Fu;

    h ^= h >> 15;
    h *= 0x2C1B3C6Du;
    h ^= h >> 13;
    return (uint8_t)h;
}

static void afill(void *buf, int src, int dst, size_t count, size_t es)
{
    for (size_t i = 0; i < count; i++) {
        for (size_t b = 0; b < es; b++) {
            ((uint8_t *)buf)[i * es + b] = abyte(src, dst, i, b);
        }
    }
}

/* 1 when count elements at buf are src's block for dst; else one failure naming what. */
static int acheck(const void *buf, int src, int dst, size_t count, size_t es, const char *what)
{
    for (size_t i = 0; i < count; i++) {
        for (size_t b = 0; b < es; b++) {
            uint8_t got = ((const uint8_t *)buf)[i * es + b], want = abyte(src, dst, i, b);

            if (got != want) {
                IT_FAIL("%s: block from rank %d to rank %d, element %zu of %zu, byte %zu: got "
                        "0x%02x, expected 0x%02x", what, src, dst, i, count, b, got, want);
                return 0;
            }
        }
    }
    return 1;
}

/* 1 when bytes at buf all equal fill; else one failure. */
static int auntouched(const void *buf, size_t bytes, int fill, const char *what)
{
    for (size_t i = 0; i < bytes; i++) {
        if (((const uint8_t *)buf)[i] != (uint8_t)fill) {
            IT_FAIL("%s: byte %zu of %zu written (0x%02x), which the call must not touch", what,
                    i, bytes, ((const uint8_t *)buf)[i]);
            return 0;
        }
    }
    return 1;
}

static void do_alltoall(bat_t *b, strataDataType_t dt, size_t count)
{
    size_t   es = it_dtype_size(dt), blk = count * es, all = blk * (size_t)b->n;
    it_buf_t sb, rb, sb2, rb2;
    char     what[160], what2[200];
    uint8_t *send = it_buf_alloc(&sb, all, 3, 0);
    uint8_t *recv = it_buf_alloc(&rb, all, 0, 0xEE);
    uint8_t *send2 = it_buf_alloc(&sb2, all, 3, 0);
    uint8_t *recv2 = it_buf_alloc(&rb2, all, 0, 0xEE);

    snprintf(what, sizeof(what), "AlltoAll %s count %zu", it_dtype_name(dt), count);
    snprintf(what2, sizeof(what2), "%s, the second of two back to back", what);
    /* two calls back to back with other data (the second's block for rank p carries the pattern
     * of (p, r), not (r, p)): a rank that starts the second while a local peer still copies the
     * first out of its window would hand that peer the second's bytes */
    for (int p = 0; p < b->n; p++) {
        afill(send + (size_t)p * blk, b->r, p, count, es);
        afill(send2 + (size_t)p * blk, p, b->r, count, es);
    }
    if (IT_OK(strataAlltoAll(send, recv, count, dt, b->c->comm, NULL)) &&
        IT_OK(strataAlltoAll(send2, recv2, count, dt, b->c->comm, NULL))) {
        for (int p = 0; p < b->n; p++) {
            if (!acheck(recv + (size_t)p * blk, p, b->r, count, es, what) ||
                !acheck(recv2 + (size_t)p * blk, b->r, p, count, es, what2) ||
                !acheck(send + (size_t)p * blk, b->r, p, count, es, "AlltoAll sendbuff")) {
                break;
            }
        }
    }
    it_buf_guards(&sb, what);
    it_buf_guards(&rb, what);
    it_buf_guards(&sb2, what2);
    it_buf_guards(&rb2, what2);
    it_buf_free(&sb);
    it_buf_free(&rb);
    it_buf_free(&sb2);
    it_buf_free(&rb2);
}

/* mode 0: out of place, recvbuff NULL off the root; 1: out of place, recvbuff off the root a
 * buffer that must stay untouched; 2: in place on the root (sendbuff = its block of recvbuff). */
static void do_gather(bat_t *b, strataDataType_t dt, size_t count, int root, int mode)
{
    size_t   es = it_dtype_size(dt), blk = count * es, all = blk * (size_t)b->n;
    int      is_root = (b->r == root);
    it_buf_t sb, rb;
    char     what[160];
    uint8_t *recv = (is_root || mode == 1) ? it_buf_alloc(&rb, all, 0, 0xEE) : NULL;
    uint8_t *send = (mode == 2 && is_root) ? recv + (size_t)root * blk
                                           : it_buf_alloc(&sb, blk, 1, 0);

    snprintf(what, sizeof(what), "Gather %s count %zu root %d %s", it_dtype_name(dt), count, root,
             mode == 2 ? "in place" : mode == 1 ? "out of place" : "out of place, NULL recvbuff");
    afill(send, b->r, root, count, es);
    if (IT_OK(strataGather(send, recv, count, dt, root, b->c->comm, NULL))) {
        if (is_root) {
            for (int p = 0; p < b->n; p++) {
                if (!acheck(recv + (size_t)p * blk, p, root, count, es, what)) {
                    break;
                }
            }
        } else if (recv != NULL) {
            auntouched(recv, all, 0xEE, what);
        }
        if (send != recv + (size_t)root * blk || !is_root) {
            acheck(send, b->r, root, count, es, "Gather sendbuff");
        }
    }
    if (recv != NULL) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
    if (!(mode == 2 && is_root)) {
        it_buf_guards(&sb, what);
        it_buf_free(&sb);
    }
}

/* mode 0: out of place, sendbuff NULL off the root; 1: out of place, sendbuff off the root a
 * buffer that must stay untouched; 2: in place on the root (recvbuff = its block of sendbuff). */
static void do_scatter(bat_t *b, strataDataType_t dt, size_t count, int root, int mode)
{
    size_t   es = it_dtype_size(dt), blk = count * es, all = blk * (size_t)b->n;
    int      is_root = (b->r == root);
    it_buf_t sb, rb;
    char     what[160];
    uint8_t *send = (is_root || mode == 1) ? it_buf_alloc(&sb, all, 0, 0x33) : NULL;
    uint8_t *recv = (mode == 2 && is_root) ? send + (size_t)root * blk
                                           : it_buf_alloc(&rb, blk, 2, 0xEE);

    snprintf(what, sizeof(what), "Scatter %s count %zu root %d %s", it_dtype_name(dt), count, root,
             mode == 2 ? "in place" : mode == 1 ? "out of place" : "out of place, NULL sendbuff");
    if (is_root) {
        for (int p = 0; p < b->n; p++) {
            afill(send + (size_t)p * blk, root, p, count, es);
        }
    }
    if (IT_OK(strataScatter(send, recv, count, dt, root, b->c->comm, NULL))) {
        acheck(recv, root, b->r, count, es, what);
        if (is_root) {
            for (int p = 0; p < b->n; p++) {
                if (!acheck(send + (size_t)p * blk, root, p, count, es, "Scatter sendbuff")) {
                    break;
                }
            }
        } else if (send != NULL) {
            auntouched(send, all, 0x33, what);
        }
    }
    if (send != NULL) {
        it_buf_guards(&sb, what);
        it_buf_free(&sb);
    }
    if (!(mode == 2 && is_root)) {
        it_buf_guards(&rb, what);
        it_buf_free(&rb);
    }
}

/* All-to-all-v patterns: the elements rank src sends rank dst, known to every rank. */
typedef enum {
    AV_ZERO,    /* every count 0 */
    AV_SKEWED,  /* 0 .. 6 x unit, some pairs 0, a diagonal of zeros */
    AV_TO_ONE,  /* every rank sends only to rank n-1, which receives everything */
    AV_UNIFORM  /* unit everywhere (an all-to-all through the v interface) */
} av_pattern_t;

static size_t av_count(av_pattern_t pat, int n, int src, int dst, size_t unit)
{
    switch (pat) {
    case AV_ZERO:
        return 0;
    case AV_SKEWED:
        return (src == dst && n > 1) ? 0 : (size_t)((src * 3 + dst * 5) % 7) * unit;
    case AV_TO_ONE:
        return dst == n - 1 ? unit * (size_t)(src + 1) : 0;
    default:
        return unit;
    }
}

/* Displacements with gaps (3 elements) and the blocks in reverse rank order, so a displacement is
 * no rank's offset; returns the elements the buffer needs. */
static size_t av_layout(const size_t *counts, int n, size_t *displs)
{
    size_t at = 2;

    for (int p = n - 1; p >= 0; p--) {
        displs[p] = at;
        at += counts[p] + 3;
    }
    return at;
}

static void do_alltoallv(bat_t *b, strataDataType_t dt, av_pattern_t pat, size_t unit)
{
    static const char *const names[] = {"zero counts", "skewed", "all to rank n-1", "uniform"};
    int      n = b->n, r = b->r;
    size_t   es = it_dtype_size(dt);
    size_t  *sc = xmalloc(4 * (size_t)n * sizeof(size_t)), *sd = sc + n, *rc = sc + 2 * n,
            *rd = sc + 3 * n;
    size_t   sel, rel;
    it_buf_t sb, rb;
    char     what[160];
    uint8_t *send, *recv;

    for (int p = 0; p < n; p++) {
        sc[p] = av_count(pat, n, r, p, unit);
        rc[p] = av_count(pat, n, p, r, unit);
    }
    sel  = av_layout(sc, n, sd);
    rel  = av_layout(rc, n, rd);
    send = it_buf_alloc(&sb, sel * es, 0, 0x33);
    recv = it_buf_alloc(&rb, rel * es, 5, 0xEE);
    snprintf(what, sizeof(what), "AlltoAllv %s %s unit %zu", it_dtype_name(dt), names[pat], unit);
    for (int p = 0; p < n; p++) {
        afill(send + sd[p] * es, r, p, sc[p], es);
    }
    if (IT_OK(strataAlltoAllv(send, sc, sd, recv, rc, rd, dt, b->c->comm, NULL))) {
        size_t at = 0;

        for (int q = n - 1; q >= 0; q--) { /* blocks in buffer order, gaps between them */
            if (!auntouched(recv + at * es, (rd[q] - at) * es, 0xEE, what) ||
                !acheck(recv + rd[q] * es, q, r, rc[q], es, what)) {
                break;
            }
            at = rd[q] + rc[q];
        }
        auntouched(recv + at * es, (rel - at) * es, 0xEE, what);
    }
    it_buf_guards(&sb, what);
    it_buf_guards(&rb, what);
    it_buf_free(&sb);
    it_buf_free(&rb);
    free(sc);
}

/* AlltoAllv in a group (with a Gather) and on a host stream: the arrays are read during the call
 * only, so they are scrambled (and freed) at once after it; the results must not change. */
static void do_alltoallv_async(bat_t *b)
{
    int              n = b->n, r = b->r;
    size_t           es = sizeof(int32_t), unit = 5;
    size_t          *v = xmalloc(4 * (size_t)n * sizeof(size_t));
    size_t          *sc = v, *sd = v + n, *rc = v + 2 * n, *rd = v + 3 * n, sel, rel;
    strataStream_t   stream;
    it_buf_t         sb, rb, gs, gr;
    char             what[96];
    uint8_t         *send, *recv, *gsend, *grecv;

    for (int p = 0; p < n; p++) {
        sc[p] = av_count(AV_SKEWED, n, r, p, unit);
        rc[p] = av_count(AV_SKEWED, n, p, r, unit);
    }
    sel   = av_layout(sc, n, sd);
    rel   = av_layout(rc, n, rd);
    send  = it_buf_alloc(&sb, sel * es, 0, 0x33);
    recv  = it_buf_alloc(&rb, rel * es, 0, 0xEE);
    gsend = it_buf_alloc(&gs, 9 * es, 0, 0);
    grecv = it_buf_alloc(&gr, 9 * es * (size_t)n, 0, 0xEE);
    for (int p = 0; p < n; p++) {
        afill(send + sd[p] * es, r, p, sc[p], es);
    }
    afill(gsend, r, 0, 9, es);
    for (int mode = 0; mode < 2; mode++) {
        size_t *w = xmalloc(4 * (size_t)n * sizeof(size_t));

        snprintf(what, sizeof(what), "AlltoAllv int32 skewed %s",
                 mode == 0 ? "in a group with a Gather" : "on a host stream");
        memcpy(w, v, 4 * (size_t)n * sizeof(size_t));
        memset(recv, 0xEE, rel * es);
        if (mode == 0) {
            IT_OK(strataGroupStart());
            IT_OK(strataAlltoAllv(send, w, w + n, recv, w + 2 * n, w + 3 * n, strataInt32,
                                  b->c->comm, NULL));
            IT_OK(strataGather(gsend, grecv, 9, strataInt32, 0, b->c->comm, NULL));
            memset(w, 0xff, 4 * (size_t)n * sizeof(size_t));
            free(w);
            IT_OK(strataGroupEnd());
        } else {
            if (!IT_OK(strataStreamCreate(&stream))) {
                free(w);
                break;
            }
            IT_OK(strataAlltoAllv(send, w, w + n, recv, w + 2 * n, w + 3 * n, strataInt32,
                                  b->c->comm, stream));
            memset(w, 0xff, 4 * (size_t)n * sizeof(size_t));
            free(w);
            IT_OK(strataStreamSynchronize(stream));
            IT_OK(strataStreamDestroy(stream));
        }
        for (int q = 0; q < n; q++) {
            if (!acheck(recv + rd[q] * es, q, r, rc[q], es, what)) {
                break;
            }
        }
        if (mode == 0 && r == 0) {
            for (int q = 0; q < n; q++) {
                if (!acheck(grecv + (size_t)q * 9 * es, q, 0, 9, es, "Gather in a group")) {
                    break;
                }
            }
        }
    }
    it_buf_guards(&sb, what);
    it_buf_guards(&rb, what);
    it_buf_guards(&gs, what);
    it_buf_guards(&gr, what);
    it_buf_free(&sb);
    it_buf_free(&rb);
    it_buf_free(&gs);
    it_buf_free(&gr);
    free(v);
}

/* The four collectives at one count (fp32 and int8 in turn), gather and scatter from every root
 * (8 ranks: three per count, every root across the counts) in every mode across the counts. */
static void a2a_battery(bat_t *b, size_t k, size_t cnt)
{
    strataDataType_t dt = (k % 2 == 0) ? strataFloat32 : strataInt8;

    do_alltoall(b, dt, cnt);
    /* every root up to 5 ranks; with more, the ends and one in the middle in turn */
    for (int root = 0; root < b->n; root++) {
        int mid = 1 + (int)(k % (size_t)(b->n > 2 ? b->n - 2 : 1));

        if (b->n > 5 && root != 0 && root != b->n - 1 && root != mid) {
            continue;
        }
        do_gather(b, dt, cnt, root, (int)((k + (size_t)root) % 3));
        do_scatter(b, dt, cnt, root, (int)((k + (size_t)root + 1) % 3));
    }
    if (k < 4) {
        do_alltoallv(b, dt, (av_pattern_t)k, cnt > 0 ? cnt : 1);
    }
    if (k == 4) {
        do_alltoallv_async(b);
    }
}

static int battery(it_ctx_t *c)
{
    count_set_t set = *(const count_set_t *)c->arg;
    bat_t       b   = {c, c->nranks, c->rank};
    size_t      counts[MAX_COUNTS];
    size_t      ncounts = make_counts(set, c->nranks, counts);
    int         roots[3] = {0, 2, c->nranks - 1};

    for (size_t k = 0; k < ncounts; k++) {
        size_t cnt = counts[k];

        do_allreduce(&b, strataFloat32, cnt, 0);
        do_allreduce(&b, strataFloat32, cnt, 1);
        if (k % 2 == 0) {
            do_allreduce(&b, strataInt32, cnt, 0);
        }
        do_reducescatter(&b, cnt, 0);
        do_reducescatter(&b, cnt, 1);
        do_allgather(&b, cnt, 0);
        do_allgather(&b, cnt, 1);
        for (int ri = 0; ri < 3; ri++) {
            int root = roots[ri];

            if (root >= c->nranks || (ri > 0 && root == roots[0]) || (ri > 1 && root == roots[1])) {
                continue;
            }
            do_broadcast(&b, cnt, root, (int)((k + (size_t)ri) % 2));
            do_broadcast(&b, cnt, root, 2);
            do_reduce(&b, cnt, root, 0);
            do_reduce(&b, cnt, root, 1);
        }
        do_sendrecv_group(&b, cnt);
        if (k % 2 == 1) {
            do_sendrecv_pairs(&b, cnt);
        }
        a2a_battery(&b, k, cnt);
    }
    return 0;
}

static const count_set_t set_full = SET_FULL, set_small = SET_SMALL, set_chunk = SET_CHUNK4K;

#define BATTERY(_n, _layout, _set, _env) \
    assert_int_equal(it_run_simple((_n), (_layout), (_env), battery, (void *)&(_set)), 0)

static void test_colls_n1(void **state)        { BATTERY(1, "1", set_full, NULL); }
static void test_colls_n2_1node(void **state)  { BATTERY(2, "2", set_full, NULL); }
static void test_colls_n2_1p1(void **state)    { BATTERY(2, "1+1", set_full, NULL); }
static void test_colls_n3_2p1(void **state)    { BATTERY(3, "2+1", set_full, NULL); }
static void test_colls_n4_2p2(void **state)    { BATTERY(4, "2+2", set_full, NULL); }
static void test_colls_n4_3p1(void **state)    { BATTERY(4, "3+1", set_full, NULL); }
static void test_colls_n4_1p3(void **state)    { BATTERY(4, "1+3", set_full, NULL); }
static void test_colls_n4_rr2(void **state)    { BATTERY(4, "rr2", set_full, NULL); }
static void test_colls_n5_2p3(void **state)    { BATTERY(5, "2+3", set_full, NULL); }
static void test_colls_n5_rr2(void **state)    { BATTERY(5, "rr2", set_full, NULL); }
static void test_colls_n8_2x4(void **state)    { BATTERY(8, "2x4", set_full, NULL); }
static void test_colls_n8_rr3(void **state)    { BATTERY(8, "rr3", set_small, NULL); }
static void test_colls_chunk4k_n1(void **state) { BATTERY(1, "1", set_chunk, "STRATA_CHUNK_SIZE=4k"); }
static void test_colls_chunk4k_n3(void **state)
{
    BATTERY(3, "2+1", set_chunk, "STRATA_CHUNK_SIZE=4k");
}
static void test_colls_chunk4k_n4_rr2(void **state)
{
    BATTERY(4, "rr2", set_chunk, "STRATA_CHUNK_SIZE=4k");
}
static void test_colls_chunk4k_n5(void **state)
{
    BATTERY(5, "3+2", set_chunk, "STRATA_CHUNK_SIZE=4k");
}

/* The hierarchical algorithm forced, with 4 KiB pipeline chunks so that the counts of the chunk
 * set fall around chunk and shard boundaries (a 4 KiB chunk of fp32 is 1024 elements, cut into one
 * shard per rail), and with the default 512 KiB chunks on the full set. */
#define HIER4K "STRATA_ALGO=hier STRATA_HIER_CHUNK_SIZE=4k STRATA_CHUNK_SIZE=4k"
static void test_hier_1x4(void **state)      { BATTERY(4, "4", set_chunk, HIER4K); }
static void test_hier_2x2(void **state)      { BATTERY(4, "2+2", set_chunk, HIER4K); }
static void test_hier_2x4(void **state)      { BATTERY(8, "2x4", set_chunk, HIER4K); }
static void test_hier_3p1(void **state)      { BATTERY(4, "3+1", set_chunk, HIER4K); }
static void test_hier_1p3(void **state)      { BATTERY(4, "1+3", set_chunk, HIER4K); }
static void test_hier_2p3(void **state)      { BATTERY(5, "2+3", set_chunk, HIER4K); }
static void test_hier_rr2(void **state)      { BATTERY(4, "rr2", set_chunk, HIER4K); }
static void test_hier_full_2p3(void **state) { BATTERY(5, "2+3", set_full, "STRATA_ALGO=hier"); }
static void test_ring_2x2(void **state)      { BATTERY(4, "2+2", set_full, "STRATA_ALGO=ring"); }

/* ------------------------------------------------------------------------------------------ */
/* every datatype x op                                                                          */
/* ------------------------------------------------------------------------------------------ */

#define OP_PREMUL ((strataRedOp_t)-1) /* marker: make a PreMulSum op */

static double sval(int r, size_t i, strataDataType_t dt)
{
    int v = (int)((i * 5 + (size_t)r * 3) % 9);

    return it_dtype_is_signed(dt) ? (double)(v - 4) : (double)v;
}

static double pval(int r, size_t i, strataDataType_t dt)
{
    static const double s[3] = {1, 2, -1}, u[3] = {1, 2, 3};
    size_t k = (i + 2 * (size_t)r) % 3;

    return it_dtype_is_signed(dt) ? s[k] : u[k];
}

static double scalar_of(int r, strataDataType_t dt)
{
    return it_dtype_is_float(dt) ? 0.5 * (double)(r % 3 + 1) : (double)(r % 3 + 1);
}

static int is_pow2(int n)
{
    return (n & (n - 1)) == 0;
}

/* Expected element i as a double (floats: exact; integers: exact before wrapping). */
static double expect_elem(strataDataType_t dt, strataRedOp_t op, int n, size_t i, int premul)
{
    double acc;

    if (premul) {
        acc = 0;
        for (int k = 0; k < n; k++) {
            acc += scalar_of(k, dt) * sval(k, i, dt);
        }
        return acc;
    }
    switch (op) {
    case strataProd:
        acc = 1;
        for (int k = 0; k < n; k++) {
            acc *= pval(k, i, dt);
        }
        return acc;
    case strataMax:
    case strataMin:
        acc = sval(0, i, dt);
        for (int k = 1; k < n; k++) {
            double v = sval(k, i, dt);

            acc = op == strataMax ? (v > acc ? v : acc) : (v < acc ? v : acc);
        }
        return acc;
    default: /* sum, avg (divided by the caller) */
        acc = 0;
        for (int k = 0; k < n; k++) {
            acc += sval(k, i, dt);
        }
        return acc;
    }
}

static void do_dtype_op(it_ctx_t *c, strataDataType_t dt, strataRedOp_t op, size_t count,
                        int inplace)
{
    int           n = c->nranks, r = c->rank;
    int           premul = op == OP_PREMUL;
    size_t        es = it_dtype_size(dt), bytes = count * es;
    it_buf_t      sb, rb;
    char          what[160];
    void         *send = it_buf_alloc(&sb, bytes, 0, 0);
    void         *recv = inplace ? send : it_buf_alloc(&rb, bytes, 0, 0xEE);
    void         *exp  = xmalloc(bytes);
    strataRedOp_t use  = op;
    int           approx = 0;

    snprintf(what, sizeof(what), "AllReduce %s %s count %zu %s", it_dtype_name(dt),
             premul ? "premulsum" : it_op_name(op), count, inplace ? "in place" : "out of place");
    if (premul) {
        uint64_t scal = 0;

        it_set(dt, &scal, 0, scalar_of(r, dt));
        if (!IT_OK(strataRedOpCreatePreMulSum(&use, &scal, dt, strataScalarHostImmediate,
                                              c->comm))) {
            goto out;
        }
        IT_EXPECT((int)use >= strataNumOps, "%s: PreMulSum op %d is a built-in op value", what,
                  (int)use);
    }
    for (size_t i = 0; i < count; i++) {
        double e = expect_elem(dt, op, n, i, premul);

        it_set(dt, send, i, op == strataProd ? pval(r, i, dt) : sval(r, i, dt));
        if (op == strataAvg && !premul) {
            if (it_dtype_is_float(dt)) {
                e /= n;
                approx = !is_pow2(n);
            } else {
                int64_t w;

                it_set_i(dt, exp, i, (int64_t)e); /* wrap the sum to the type first */
                w = it_get_i(dt, exp, i);
                e = (double)(w / n);              /* C division truncates toward zero */
            }
        }
        if (it_dtype_is_float(dt)) {
            it_set(dt, exp, i, e);
        } else {
            it_set_i(dt, exp, i, (int64_t)e);
        }
    }
    if (IT_OK(strataAllReduce(send, recv, count, dt, use, c->comm, NULL))) {
        if (!approx) {
            it_expect_equal(dt, recv, exp, count, what);
        } else {
            /* 1/n is inexact: each input is scaled, then summed; allow a few ulps (inputs are
             * at most 4 in magnitude, so the tolerance is absolute). */
            double tol = dt == strataFloat64 ? 1e-14 : dt == strataFloat32 ? 4e-6
                       : dt == strataFloat16 ? 8e-3 : 6e-2;

            for (size_t i = 0; i < count; i++) {
                double got = it_get(dt, recv, i), want = it_get(dt, exp, i);

                if (!(got - want <= tol && want - got <= tol)) {
                    IT_FAIL("%s: [%zu] got %.17g, expected %.17g +- %g", what, i, got, want, tol);
                    break;
                }
            }
        }
    }
    it_buf_guards(&sb, what);
    if (!inplace) {
        it_buf_guards(&rb, what);
    }
    it_same_on_all(c->comm, recv, bytes, what);
    if (premul) {
        IT_OK(strataRedOpDestroy(use, c->comm));
    }
out:
    if (!inplace) {
        it_buf_free(&rb);
    }
    it_buf_free(&sb);
    free(exp);
}

static int dtype_op_battery(it_ctx_t *c)
{
    static const strataRedOp_t ops[] = {strataSum, strataProd, strataMax, strataMin, strataAvg,
                                        OP_PREMUL};
    size_t counts[] = {1, 7, (size_t)c->nranks + 1, 67, 1031, 40009};

    bat_t b = {c, c->nranks, c->rank};

    /* the data-movement collectives move any datatype's bytes alike: each once per type */
    for (int dt = 0; dt < strataNumTypes; dt++) {
        do_alltoall(&b, (strataDataType_t)dt, (size_t)c->nranks + 1);
        do_gather(&b, (strataDataType_t)dt, 33, c->nranks - 1, dt % 3);
        do_scatter(&b, (strataDataType_t)dt, 33, dt % c->nranks, (dt + 1) % 3);
        do_alltoallv(&b, (strataDataType_t)dt, AV_SKEWED, 3);
    }
    for (int dt = 0; dt < strataNumTypes; dt++) {
        for (size_t o = 0; o < sizeof(ops) / sizeof(ops[0]); o++) {
            for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
                do_dtype_op(c, (strataDataType_t)dt, ops[o], counts[k], 0);
            }
            do_dtype_op(c, (strataDataType_t)dt, ops[o], 33, 1);
        }
    }
    return 0;
}

/* Zero-copy: buffers from strataMemAlloc on every rank (the hierarchical all-reduce then reads
 * and writes them across processes), float and int64 sums at counts around the 4k chunks and
 * shards and one past 4 MiB of floats (one node: the push stores with streaming stores from
 * 4 MiB out of place, the count's odd tail after the last whole line), out of place and in place
 * (both zero-copy; in place, local ranks 2 and up stage their own input where they pull), and a
 * call where rank 0's receive buffer is plain malloc'd memory (every rank must leave the mapped
 * flavour: cross-memory attach where the kernel allows it, else the copying path;
 * tests/integration/test_cma checks which). Then int32 avg, whose division by nranks the owner
 * applies once to the piece it stores into every receive buffer. */
static int zero_copy_battery(it_ctx_t *c)
{
    static const strataDataType_t dts[] = {strataFloat32, strataInt64, strataFloat16, strataInt32};
    size_t counts[] = {1, 511, 512, 513, 4096 + 3, 65536 + 17, ((size_t)1 << 20) + 17};

    for (size_t d = 0; d < sizeof(dts) / sizeof(dts[0]); d++) {
        for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
            for (int mode = 0; mode < 3; mode++) {
                strataDataType_t dt = dts[d];
                strataRedOp_t    op = dt == strataInt32 ? strataAvg : strataSum;
                size_t es = it_dtype_size(dt), count = counts[k], bytes = count * es;
                void  *send = NULL, *recv = NULL, *exp = xmalloc(bytes), *orig = xmalloc(bytes);
                int    plain = (mode == 2 && c->rank == 0);
                char   what[160];

                if ((dt != strataFloat32 && count > ((size_t)1 << 20)) ||
                    (dt == strataInt32 && count > 65536 + 17)) {
                    free(exp);
                    free(orig);
                    continue;
                }
                snprintf(what, sizeof(what), "zero-copy AllReduce %s %s count %zu %s",
                         it_dtype_name(dt), op == strataAvg ? "avg" : "sum", count,
                         mode == 0 ? "out of place" : mode == 1 ? "in place" : "rank 0 malloc");
                if (!IT_OK(strataMemAlloc(&send, bytes))) {
                    return 1;
                }
                if (mode == 1) {
                    recv = send;
                } else if (plain) {
                    recv = xmalloc(bytes);
                } else if (!IT_OK(strataMemAlloc(&recv, bytes))) {
                    return 1;
                }
                for (size_t i = 0; i < count; i++) {
                    double sum = 0;

                    for (int r = 0; r < c->nranks; r++) {
                        sum += xval(r, i);
                    }
                    it_set(dt, send, i, xval(c->rank, i));
                    /* integer avg truncates toward zero (strata.h) */
                    it_set(dt, exp, i, op == strataAvg ? (double)(long)(sum / c->nranks) : sum);
                }
                memcpy(orig, send, bytes);
                if (IT_OK(strataAllReduce(send, recv, count, dt, op, c->comm, NULL))) {
                    it_expect_equal(dt, recv, exp, count, what);
                    if (mode != 1) {
                        IT_EXPECT(memcmp(send, orig, bytes) == 0, "%s: sendbuff was modified",
                                  what);
                    }
                }
                it_same_on_all(c->comm, recv, bytes, what);
                if (mode != 1) {
                    if (plain) {
                        free(recv);
                    } else {
                        IT_OK(strataMemFree(recv));
                    }
                }
                IT_OK(strataMemFree(send));
                free(exp);
                free(orig);
            }
        }
    }
    return 0;
}

/* Zero-copy returns only once the node peers finished reading this rank's buffers and storing
 * into them: every rank overwrites its receive buffer the moment a call returned (as a training
 * loop reuses it), so a rank that returned early would hand its peers garbage for the shards they
 * still copy out of it (pulling); and after a small all-reduce (every rank has returned from the
 * big one) the overwritten buffer must still hold what was written, so no owner stored into it
 * after it returned (pushing). Several iterations, so that ranks drift apart. */
static int zero_copy_reuse(it_ctx_t *c)
{
    const size_t count = 65536 + 17, bytes = count * sizeof(float);
    float       *send = NULL, *recv = NULL, *exp = xmalloc(bytes);
    int          bad = 0;

    if (!IT_OK(strataMemAlloc((void **)&send, bytes)) ||
        !IT_OK(strataMemAlloc((void **)&recv, bytes))) {
        return 1;
    }
    for (int it = 0; it < 20 && !bad; it++) {
        char what[96];

        snprintf(what, sizeof(what), "zero-copy AllReduce #%d, receive buffer reused at once", it);
        for (size_t i = 0; i < count; i++) {
            double sum = 0;

            for (int r = 0; r < c->nranks; r++) {
                sum += xval(r, i) + it;
            }
            send[i] = (float)(xval(c->rank, i) + it);
            exp[i]  = (float)sum;
        }
        if (!IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm, NULL))) {
            break;
        }
        bad = !it_expect_equal(strataFloat32, recv, exp, count, what);
        memset(recv, 0xff, bytes); /* NaN everywhere, at once */
        {
            int one = 1, all = 0;
            size_t moved = 0;

            if (!IT_OK(strataAllReduce(&one, &all, 1, strataInt32, strataSum, c->comm, NULL))) {
                break;
            }
            for (size_t i = 0; i < bytes; i++) {
                moved += ((unsigned char *)recv)[i] != 0xff;
            }
            bad |= !IT_EXPECT(moved == 0, "%s: %zu bytes of the receive buffer changed after the "
                              "call returned", what, moved);
        }
    }
    IT_OK(strataMemFree(recv));
    IT_OK(strataMemFree(send));
    free(exp);
    return 0;
}

/* The push on one node at the default chunk (1 MiB: pieces of 2 KiB, several chunks, streaming
 * stores out of place from 4 MiB): float sums of 4 MiB + 68 B and 9 MiB + 4 B, out of place and in
 * place, each checked whole on every rank; the log (STRATA_DEBUG=DEBUG) says every call pushed. */
static int zero_copy_push(it_ctx_t *c)
{
    size_t counts[] = {((size_t)1 << 20) + 17, ((size_t)9 << 18) + 1};
    char  *log;

    for (size_t k = 0; k < sizeof(counts) / sizeof(counts[0]); k++) {
        for (int in_place = 0; in_place < 2; in_place++) {
            size_t count = counts[k], bytes = count * sizeof(float);
            float *send = NULL, *recv = NULL, *exp = xmalloc(bytes);
            char   what[96];

            snprintf(what, sizeof(what), "zero-copy AllReduce float count %zu %s", count,
                     in_place ? "in place" : "out of place");
            if (!IT_OK(strataMemAlloc((void **)&send, bytes)) ||
                (!in_place && !IT_OK(strataMemAlloc((void **)&recv, bytes)))) {
                return 1;
            }
            recv = in_place ? send : recv;
            for (size_t i = 0; i < count; i++) {
                double sum = 0;

                for (int r = 0; r < c->nranks; r++) {
                    sum += xval(r, i) * (r + 1);
                }
                send[i] = (float)(xval(c->rank, i) * (c->rank + 1));
                exp[i]  = (float)sum;
            }
            if (IT_OK(strataAllReduce(send, recv, count, strataFloat32, strataSum, c->comm,
                                      NULL))) {
                it_expect_equal(strataFloat32, recv, exp, count, what);
            }
            it_same_on_all(c->comm, recv, bytes, what);
            if (!in_place) {
                IT_OK(strataMemFree(recv));
            }
            IT_OK(strataMemFree(send));
            free(exp);
        }
    }
    log = it_read_log();
    if (IT_EXPECT(log != NULL, "cannot read this rank's log (STRATA_DEBUG_FILE)")) {
        IT_EXPECT(it_count_lines(log, "zero-copy (every local rank's buffers are shareable)") == 4 &&
                      it_count_lines(log, "; the owners push") == 4,
                  "%zu of 4 all-reduces ran zero-copy, %zu pushed", it_count_lines(log,
                  "zero-copy (every local rank's buffers are shareable)"),
                  it_count_lines(log, "; the owners push"));
        free(log);
    }
    return 0;
}

/* zero_copy_push on n ranks of one node, the log in a directory of its own. */
static void push_run(int n, const char *layout)
{
    char dir[] = "/tmp/strata_test_push_XXXXXX";
    char env[256];
    int  ret;

    assert_non_null(mkdtemp(dir));
    snprintf(env, sizeof(env), "STRATA_ALGO=hier STRATA_DEBUG=DEBUG STRATA_DEBUG_SUBSYS=COLL "
             "STRATA_DEBUG_FILE=%s/%%p.log", dir);
    ret = it_run_simple(n, layout, env, zero_copy_push, NULL);
    it_rm_dir(dir);
    assert_int_equal(ret, 0);
}

#define ZC(_n, _layout) \
    assert_int_equal(it_run_simple((_n), (_layout), HIER4K, zero_copy_battery, NULL), 0)
static void test_zero_copy_push_1x2(void **state) { push_run(2, "2"); }
static void test_zero_copy_push_1x3(void **state) { push_run(3, "3"); }
static void test_zero_copy_1x4(void **state) { ZC(4, "4"); }
static void test_zero_copy_2x2(void **state) { ZC(4, "2+2"); }
static void test_zero_copy_2p3(void **state) { ZC(5, "2+3"); }
static void test_zero_copy_reuse_1x4(void **state)
{
    assert_int_equal(it_run_simple(4, "4", "STRATA_ALGO=hier", zero_copy_reuse, NULL), 0);
}
static void test_zero_copy_reuse_2x2(void **state)
{
    assert_int_equal(it_run_simple(4, "2+2", "STRATA_ALGO=hier", zero_copy_reuse, NULL), 0);
}

#define DTYPES(_n, _layout) \
    assert_int_equal(it_run_simple((_n), (_layout), NULL, dtype_op_battery, NULL), 0)
#define DTYPES_ENV(_n, _layout, _env) \
    assert_int_equal(it_run_simple((_n), (_layout), (_env), dtype_op_battery, NULL), 0)

static void test_dtype_op_n1(void **state)     { DTYPES(1, "1"); }
static void test_dtype_op_n2(void **state)     { DTYPES(2, "1+1"); }
static void test_dtype_op_n3(void **state)     { DTYPES(3, "2+1"); }
static void test_dtype_op_n4(void **state)     { DTYPES(4, "2+2"); }
static void test_dtype_op_n5_rr2(void **state) { DTYPES(5, "rr2"); }
static void test_dtype_op_n8(void **state)     { DTYPES(8, "2x4"); }
static void test_dtype_op_hier_1x4(void **state) { DTYPES_ENV(4, "4", HIER4K); }
static void test_dtype_op_hier_3p1(void **state) { DTYPES_ENV(4, "3+1", HIER4K); }
static void test_dtype_op_hier_rr2(void **state) { DTYPES_ENV(5, "rr2", HIER4K); }
static void test_dtype_op_small_2x2(void **state) { DTYPES_ENV(4, "2+2", "STRATA_ALGO=small"); }
static void test_dtype_op_ring_2x2(void **state) { DTYPES_ENV(4, "2+2", "STRATA_ALGO=ring"); }

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_colls_n1),
        cmocka_unit_test(test_colls_n2_1node),
        cmocka_unit_test(test_colls_n2_1p1),
        cmocka_unit_test(test_colls_n3_2p1),
        cmocka_unit_test(test_colls_n4_2p2),
        cmocka_unit_test(test_colls_n4_3p1),
        cmocka_unit_test(test_colls_n4_1p3),
        cmocka_unit_test(test_colls_n4_rr2),
        cmocka_unit_test(test_colls_n5_2p3),
        cmocka_unit_test(test_colls_n5_rr2),
        cmocka_unit_test(test_colls_n8_2x4),
        cmocka_unit_test(test_colls_n8_rr3),
        cmocka_unit_test(test_colls_chunk4k_n1),
        cmocka_unit_test(test_colls_chunk4k_n3),
        cmocka_unit_test(test_colls_chunk4k_n4_rr2),
        cmocka_unit_test(test_colls_chunk4k_n5),
        cmocka_unit_test(test_dtype_op_n1),
        cmocka_unit_test(test_dtype_op_n2),
        cmocka_unit_test(test_dtype_op_n3),
        cmocka_unit_test(test_dtype_op_n4),
        cmocka_unit_test(test_dtype_op_n5_rr2),
        cmocka_unit_test(test_dtype_op_n8),
        cmocka_unit_test(test_hier_1x4),
        cmocka_unit_test(test_hier_2x2),
        cmocka_unit_test(test_hier_2x4),
        cmocka_unit_test(test_hier_3p1),
        cmocka_unit_test(test_hier_1p3),
        cmocka_unit_test(test_hier_2p3),
        cmocka_unit_test(test_hier_rr2),
        cmocka_unit_test(test_hier_full_2p3),
        cmocka_unit_test(test_ring_2x2),
        cmocka_unit_test(test_dtype_op_hier_1x4),
        cmocka_unit_test(test_dtype_op_hier_3p1),
        cmocka_unit_test(test_dtype_op_hier_rr2),
        cmocka_unit_test(test_dtype_op_small_2x2),
        cmocka_unit_test(test_dtype_op_ring_2x2),
        cmocka_unit_test(test_zero_copy_1x4),
        cmocka_unit_test(test_zero_copy_2x2),
        cmocka_unit_test(test_zero_copy_2p3),
        cmocka_unit_test(test_zero_copy_push_1x2),
        cmocka_unit_test(test_zero_copy_push_1x3),
        cmocka_unit_test(test_zero_copy_reuse_1x4),
        cmocka_unit_test(test_zero_copy_reuse_2x2),
    };

    it_cmocka_filter();
    return cmocka_run_group_tests(tests, NULL, NULL);
}
