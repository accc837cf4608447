/*
 * test_model.c - the cost model (src/tune/model.c) and `collbench model`'s tables.
 *
 * Two kinds of checks. The faithful formulas against cases worked out by hand in the comments
 * (small numbers, so a wrong factor of (n-1)/n, a lost alpha or a rail share applied to the wrong
 * rail shows). And the seed preset's printed figures, which issue 6 lists to the digit: the test
 * runs `collbench model --preset seed` into a memory stream and compares every figure as printed,
 * table by table, so a change of formula, of the order of the floating-point operations or of a
 * format that moves one digit fails here.
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
#include <unistd.h>

#include <cmocka.h>

#include "tools/collbench/collbench.h"
#include "tune/model.h"
#include "tune/tune.h"

/* relative tolerance: the hand computations are exact decimals, the model's doubles are not */
#define assert_close(_got, _want)                                                              \
    do {                                                                                       \
        double _g = (_got), _w = (_want);                                                      \
        if (!(fabs(_g - _w) <= 1e-9 * fabs(_w) + 1e-15)) {                                     \
            fail_msg("%s = %.12g, want %.12g", #_got, _g, _w);                                 \
        }                                                                                      \
    } while (0)

/* ---- textbook terms -------------------------------------------------------------------------- */

static void test_ring_allreduce(void **state)
{
    st_model_level_t l = {.alpha = 10e-6, .beta = 1e9, .gamma = 0};

    /* n = 4, S = 1 MiB = 1048576 B, alpha 10 us, beta 1e9 B/s:
     * 2(n-1) alpha = 6 x 10 us = 60 us; 2(n-1)/n S/beta = 1.5 x 1048576 / 1e9 = 1572.864 us;
     * total 1632.864 us */
    assert_close(st_model_ring_allreduce(4, 1048576, &l), 1632.864e-6);
    /* gamma 2e9 B/s adds (n-1)/n S/gamma = 0.75 x 1048576 / 2e9 = 393.216 us: 2026.08 us */
    l.gamma = 2e9;
    assert_close(st_model_ring_allreduce(4, 1048576, &l), 2026.08e-6);
    /* one rank: nothing moves */
    assert_close(st_model_ring_allreduce(1, 1048576, &l), 0.0);
    l.gamma = 0;
    /* reduce-scatter: (n-1) alpha + (n-1)/n S/beta = 30 us + 786.432 us = 816.432 us;
     * all-gather the same without reduction */
    assert_close(st_model_ring_reduce_scatter(4, 1048576, &l), 816.432e-6);
    assert_close(st_model_ring_allgather(4, 1048576, &l), 816.432e-6);
}

static void test_pipeline(void **state)
{
    const double ph[3] = {1, 3, 2};

    /* fill + drain 1 + 3 + 2 = 6, then 3 more chunks at the slowest phase, 3 each: 15 */
    assert_close(st_model_pipeline(ph, 3, 4), 15.0);
    assert_close(st_model_pipeline(ph, 3, 1), 6.0);
}

/* 2 nodes x 4 ranks, rails of 10e9 and 5e9 B/s, windows 100e9 B/s; alpha 1 us intra, 5 us inter */
static void fabric_2x4(st_model_fabric_t *f, st_model_split_t *s)
{
    memset(f, 0, sizeof(*f));
    memset(s, 0, sizeof(*s));
    f->ranks_per_node = 4;
    f->nodes          = 2;
    f->nrails         = 2;
    f->intra.alpha    = 1e-6;
    f->intra.beta     = 100e9;
    f->inter.alpha    = 5e-6;
    f->inter.beta     = 10e9;
    f->rail_beta[1]   = 5e9;
    s->channels       = 1;
    s->small_max      = 128 << 10;
}

static void test_hier(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t;

    fabric_2x4(&f, &s);
    /* S = 8e6 B, one chunk, even split.
     * intra RS: alpha + (g-1)/g S/beta = 1 us + 0.75 x 8e6 / 100e9 = 1 + 60 = 61 us; AG the same.
     * inter: each rail carries half, 4e6 B; ring over N = 2: 2(N-1) alpha + 2(N-1)/N 4e6/beta_r:
     * rail 0: 10 us + 4e6 / 10e9 = 410 us; rail 1: 10 us + 4e6 / 5e9 = 810 us; the slow one sets
     * the phase: 810 us. Total 61 + 810 + 61 = 932 us. */
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 8e6, &t), ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTRA_RS], 61e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], 810e-6);
    assert_close(t.phase[ST_MODEL_PH_INTRA_AG], 61e-6);
    assert_close(t.total, 932e-6);

    /* shares 2:1, as the rails' rates: 16/3e6 B on rail 0 -> 10 + 533.333 us, 8/3e6 B on rail 1
     * -> 10 + 533.333 us; both 543.333 us; total 61 + 543.333 + 61 = 665.333 us */
    s.rail_share[0] = 2;
    s.rail_share[1] = 1;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 8e6, &t), ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTER], 10e-6 + 16e6 / 3 / 10e9);
    assert_close(t.total, 122e-6 + 10e-6 + 16e6 / 3 / 10e9);

    /* even split, chunks of 2e6 B: 4 chunks. Per chunk: RS 1 + 15 = 16 us, inter (rail 1)
     * 10 + 1e6 / 5e9 = 210 us, AG 16 us. Pipeline: 16 + 210 + 16 + 3 x 210 = 872 us; the inter
     * phase over the buffer 4 x 210 = 840 us. */
    s.rail_share[0] = 0;
    s.rail_share[1] = 0;
    s.chunk         = 2000000;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 8e6, &t), ST_OK);
    assert_close(t.chunks, 4);
    assert_close(t.phase[ST_MODEL_PH_INTER], 840e-6);
    assert_close(t.total, 872e-6);
}

static void test_collectives(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t;
    st_algo_t         algo;

    fabric_2x4(&f, &s); /* g = 4, N = 2, n = 8; rails 10e9 and 5e9 B/s, alpha 5 us; intra 100e9 */
    /* hier reduce-scatter, S = 8e6 B (the send buffer), one chunk, even split:
     * intra RS as all-reduce's, 61 us; inter: half a ring per rail, share 4e6 B:
     * (N-1) alpha + (N-1)/N 4e6/beta_r = 5 + 200 us (rail 0), 5 + 400 us (rail 1): 405 us;
     * intra: the own piece out, alpha + S/n / beta_intra = 1 + 10 us = 11 us. 477 us. */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_REDUCESCATTER, ST_ALGO_HIER, 8e6, &t),
                     ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTRA_RS], 61e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], 405e-6);
    assert_close(t.phase[ST_MODEL_PH_INTRA_AG], 11e-6);
    assert_close(t.total, 477e-6);
    /* hier all-gather, S = 8e6 B (the receive buffer): in, the own piece and the node's part of
     * the shard, alpha + 2 S/n / beta = 1 + 20 us; inter as above, 405 us; out, every other
     * rank's piece, alpha + (n-1)/n S / beta = 1 + 70 us. 497 us. */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_ALLGATHER, ST_ALGO_HIER, 8e6, &t), ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTRA_RS], 21e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], 405e-6);
    assert_close(t.phase[ST_MODEL_PH_INTRA_AG], 71e-6);
    assert_close(t.total, 497e-6);
    /* the flat ring's reduce-scatter and all-gather: one channel, crossing on rail (g-1) mod R =
     * 1 at 5e9: (n-1) alpha + (n-1)/n S/beta = 35 + 1400 us = 1435 us */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_REDUCESCATTER, ST_ALGO_RING, 8e6, &t),
                     ST_OK);
    assert_close(t.total, 1435e-6);
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_ALLGATHER, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 1435e-6);
    assert_int_equal(st_model_choose_coll(&f, &s, ST_MODEL_REDUCESCATTER, 8e6, &algo, &t), ST_OK);
    assert_int_equal(algo, ST_ALGO_HIER);
    /* all-to-all, S = 8e6 B per rank. Pairwise: (g-1) alpha_intra + (n-g) alpha_inter = 3 + 20
     * us, plus the slower of the node's shared memory, (g-1)/n S/beta_intra = 30 us, and its
     * rails: local ranks 0, 2 on rail 0 and 1, 3 on rail 1, each sending (N-1)/N S = 4e6 B out:
     * 8e6 B per rail, 800 us on rail 0, 1600 us on rail 1. 1623 us. */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_ALLTOALL, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 1623e-6);
    /* hier: in and gathered per node, 1 + 2 x 80 us = 161 us; inter: the node's g S (N-1)/N =
     * 16e6 B, half per rail, one message per node pair and rail: 5 + 800 us, 5 + 1600 us: 1605
     * us; out 1 + 80 us. 1847 us: the same bytes cross the rails, and the copies through the
     * windows cost more than the latencies saved, so pairwise wins at this size. */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_ALLTOALL, ST_ALGO_HIER, 8e6, &t), ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTRA_RS], 161e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], 1605e-6);
    assert_close(t.total, 1847e-6);
    assert_int_equal(st_model_choose_coll(&f, &s, ST_MODEL_ALLTOALL, 8e6, &algo, &t), ST_OK);
    assert_int_equal(algo, ST_ALGO_RING);
    /* small runs all-reduce only; the collectives outside the model are invalid */
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_ALLGATHER, ST_ALGO_SMALL, 8, &t),
                     ST_ERR_UNSUPPORTED);
    assert_int_equal(st_model_collective(&f, &s, ST_MODEL_NCOLLS, ST_ALGO_RING, 8, &t),
                     ST_ERR_INVALID);
    assert_string_equal(st_model_coll_name(ST_MODEL_ALLTOALL), "alltoall");
    assert_null(st_model_coll_name(ST_MODEL_NCOLLS));
}

static void test_ring_channels(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t;

    fabric_2x4(&f, &s);
    /* n = 8, S = 8e6 B, one channel: it leaves each node from local rank g-1 = 3, on rail
     * 3 mod 2 = 1 (5e9, the windows are faster): per step the inter alpha 5 us: 2 x 7 x 5 =
     * 70 us, + 2 x 7/8 x 8e6 / 5e9 = 2800 us: 2870 us */
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 2870e-6);
    /* two channels, 4e6 B each: channel 1 on rail 0: 70 + 700 = 770 us, channel 0 on rail 1:
     * 70 + 1400 = 1470 us: equal channels are paced by the slow rail */
    s.channels = 2;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 1470e-6);
    /* equal rails of 10e9: 2 channels halve the bandwidth term: 70 + 700 = 770 us */
    f.rail_beta[1] = 0;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 770e-6);
    /* 4 channels on 2 rails share them: each 2e6 B at 5e9: 70 + 1.75 x 400 = 770 us again */
    s.channels = 4;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_RING, 8e6, &t), ST_OK);
    assert_close(t.total, 770e-6);
}

static void test_small_and_choose(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t;
    st_algo_t         a;

    fabric_2x4(&f, &s);
    /* 64 KiB = 65536 B: windows alpha 1 us + 3 x 65536 / 100e9 = 1.96608 us; leaders 5 us +
     * 65536 / 10e9 = 6.5536 us; the node reads the result: 1 us + 0.65536 us. Total 16.17504 us */
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 16.17504e-6);
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 1 << 20, &t),
                     ST_ERR_UNSUPPORTED);
    assert_int_equal(st_model_choose(&f, &s, 65536, &a, &t), ST_OK);
    assert_int_equal(a, ST_ALGO_SMALL);
    /* 64 MB: hier's rails carry 2 x 7/8 x ... less than the one ring's link: hier */
    assert_int_equal(st_model_choose(&f, &s, 64e6, &a, &t), ST_OK);
    assert_int_equal(a, ST_ALGO_HIER);
    f.nrails = 0;
    assert_int_equal(st_model_choose(&f, &s, 64e6, &a, &t), ST_ERR_INVALID);
    fabric_2x4(&f, &s);
    f.intra.beta = 0;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
}

/* The burst credit of a shaped rail (st_model_rail_credit), on fabric_2x4 (rails 10e9 and 5e9
 * B/s). Small at 64 KiB was 16.17504 us; its leaders send (N-1) x 65536 = 65536 B over rail 0.
 * A 32768 B burst saves 32768 / 10e9 = 3.2768 us: 12.89824 us. A 1e6 B burst saves all 65536 B:
 * 6.5536 us: 9.62144 us. Hier at 64e6 B: even shares, the slower rail 1 (0.5/5e9 > 0.5/10e9)
 * moves 2(N-1)/N x 0.5 x 64e6 = 32e6 B; a 1e6 B burst there saves 1e6 / 5e9 = 200 us of its
 * inter phase and of the total; a burst on rail 0 only saves nothing (rail 1 still ends last). */
static void test_burst_credit(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t0, t;

    fabric_2x4(&f, &s);
    assert_close(st_model_rail_credit(&f, 0, 65536), 0.0);
    f.rail_burst[0] = 32768;
    assert_close(st_model_rail_credit(&f, 0, 65536), 3.2768e-6);
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 12.89824e-6);
    f.rail_burst[0] = 1e6;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 9.62144e-6);
    fabric_2x4(&f, &s);
    s.chunk = 1 << 20;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t0), ST_OK);
    f.rail_burst[0] = 1e6;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t), ST_OK);
    assert_close(t.total, t0.total);
    f.rail_burst[1] = 1e6;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t), ST_OK);
    assert_close(t.total, t0.total - 200e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], t0.phase[ST_MODEL_PH_INTER] - 200e-6);
    /* shares 2/3 and 1/3 balance the rails: each moves its bytes in 32e6 x 2/3 / 10e9 =
     * 32e6 x 1/3 / 5e9 = 2133.33 us; credits of 1e6 / 10e9 = 100 us on rail 0 and 1e6 / 5e9 =
     * 200 us on rail 1 end them at 2033.33 and 1933.33 us: the operation gains 100 us, the
     * smaller credit, not the slow rail's 200 */
    s.rail_share[0] = 2.0 / 3.0;
    s.rail_share[1] = 1.0 / 3.0;
    f.rail_burst[0] = f.rail_burst[1] = 0;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t0), ST_OK);
    f.rail_burst[0] = f.rail_burst[1] = 1e6;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t), ST_OK);
    assert_close(t.total, t0.total - 100e-6);
    f.rail_burst[1] = -1;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
}

/* A measured credit curve (rail_credit) replaces the constant burst: points (16384, 0) and
 * (65536, 30000) B on rail 0 (10e9 B/s). At 8192 B: on the line from (0, 0) to the first point,
 * 0; at 40960 B: half way from 0 to 30000, 15000 B = 1.5 us; at 1e6 B (beyond the last point):
 * 30000 B = 3 us; at 20000 B the credit would be 1708 B < 20000: 0.1708 us. Small at 64 KiB
 * (16.17504 us without a credit) loses 3 us: 13.17504 us; with exchange_alpha 20 us instead of
 * inter.alpha (5 us: fabric_2x4) it takes 15 us more: 28.17504 us. Points out of order, a credit
 * above its bytes or more points than ST_MODEL_CREDIT_POINTS are refused. */
static void test_credit_curve(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t;

    fabric_2x4(&f, &s);
    f.rail_burst[0]           = 1e9; /* ignored once there are points */
    f.rail_credit[0].n        = 2;
    f.rail_credit[0].bytes[0] = 16384;
    f.rail_credit[0].bytes[1] = 65536;
    f.rail_credit[0].credit[0] = 0;
    f.rail_credit[0].credit[1] = 30000;
    assert_int_equal(st_model_fabric_check(&f), ST_OK);
    assert_close(st_model_rail_credit(&f, 0, 8192), 0.0);
    assert_close(st_model_rail_credit(&f, 0, 40960), 1.5e-6);
    assert_close(st_model_rail_credit(&f, 0, 1e6), 3e-6);
    assert_close(st_model_rail_credit(&f, 0, 20000), 30000.0 * (20000 - 16384) / 49152 / 10e9);
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 13.17504e-6);
    f.exchange_alpha = 20e-6;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 28.17504e-6);
    f.rail_credit[0].bytes[1] = 16384;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
    f.rail_credit[0].bytes[1]  = 65536;
    f.rail_credit[0].credit[1] = 70000;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
    f.rail_credit[0].credit[1] = 30000;
    f.rail_credit[0].n         = ST_MODEL_CREDIT_POINTS + 1;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
    f.rail_credit[0].n = 2;
    f.exchange_alpha   = -1;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
}

/* The algorithms' own credits. hier_rest: hier at 64e6 B in 1 MiB chunks on fabric_2x4, even
 * shares: each rail moves 2(N-1)/N x 0.5 x 64e6 = 32e6 B, rail 0 (10e9 B/s) in 3.2 ms, rail 1
 * (5e9) in 6.4 ms. A rest of 200 us lets each rail pass 200 us of its bytes at once: the
 * operation ends 200 us earlier (the slow rail's credit), whatever rail_burst says. Two points
 * (1e6 B, 100 us) and (1e8 B, 300 us) give 100 + 200 x 63/99 = 227.27 us at 64e6 B, and 300 us
 * beyond the last point (4e8 B); one point is a constant. small_credit: small at 64 KiB (16.17504 us without credit) with its 65536
 * exchanged bytes fully credited saves 6.5536 us: 9.62144 us, the rails' curves aside. */
static void test_algorithm_credits(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_time_t   t0, t;

    fabric_2x4(&f, &s);
    s.chunk = 1 << 20;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t0), ST_OK);
    f.rail_burst[0] = f.rail_burst[1] = 1e9; /* ignored once hier_rest has points */
    f.hier_rest     = (st_model_rest_t){1, {1e6}, {200e-6}};
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t), ST_OK);
    assert_close(t.total, t0.total - 200e-6);
    f.hier_rest = (st_model_rest_t){2, {1e6, 1e8}, {100e-6, 300e-6}};
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 64e6, &t), ST_OK);
    assert_close(t.total, t0.total - (100e-6 + 200e-6 * 63.0 / 99.0));
    f.hier_rest.n   = 0;
    f.rail_burst[0] = f.rail_burst[1] = 0;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 4e8, &t0), ST_OK);
    f.hier_rest.n = 2;
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 4e8, &t), ST_OK);
    assert_close(t.total, t0.total - 300e-6);
    f.hier_rest.seconds[1] = -1;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
    f.hier_rest = (st_model_rest_t){2, {1e6, 1e6}, {0, 0}};
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);

    fabric_2x4(&f, &s);
    f.rail_burst[0]  = 1e9; /* ignored by small once small_credit has points */
    f.small_credit   = (st_model_credit_t){1, {65536}, {65536}};
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 9.62144e-6);
    f.small_credit = (st_model_credit_t){1, {65536}, {0}};
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_SMALL, 65536, &t), ST_OK);
    assert_close(t.total, 16.17504e-6);
    f.small_credit.credit[0] = 70000;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);
}

/* ---- compression (docs/model.md, formulas 14-15) --------------------------------------------- */

/* The wire ratio of one encoded range, from the codecs' own byte counts (include/strata.h). */
static void test_codec_ratio(void **state)
{
    strataCompressParams_t p;

    /* int8, block 256, 1024 float32: 1024 B of values + 4 scales of 4 B = 1040 of 4096 B */
    assert_int_equal(strataCompressParse("int8", &p), strataSuccess);
    assert_close(st_model_codec_ratio(&p, strataFloat32, 1024), 1040.0 / 4096);
    /* fp16: 2 of 4 B per float32; of a bfloat16 nothing is saved */
    assert_int_equal(strataCompressParse("fp16", &p), strataSuccess);
    assert_close(st_model_codec_ratio(&p, strataFloat32, 1000), 0.5);
    assert_close(st_model_codec_ratio(&p, strataBfloat16, 1000), 1.0);
    /* topk 1 %: of 1000 float32, k = 10 (index + value, 8 B each): 80 of 4000 B; of 50, k = 1
     * (at least one element): 8 of 200 B */
    assert_int_equal(strataCompressParse("topk:0.01", &p), strataSuccess);
    assert_close(st_model_codec_ratio(&p, strataFloat32, 1000), 0.02);
    assert_close(st_model_codec_ratio(&p, strataFloat32, 50), 0.04);
    /* sign, block 256, 512 float32: 64 B of bits + 2 scales = 72 of 2048 B */
    assert_int_equal(strataCompressParse("sign", &p), strataSuccess);
    assert_close(st_model_codec_ratio(&p, strataFloat32, 512), 72.0 / 2048);
    /* no ratio for a datatype no codec takes, or bad params */
    assert_close(st_model_codec_ratio(&p, strataInt32, 512), 0.0);
    p.codec   = strataCodecTopk;
    p.density = 0;
    assert_close(st_model_codec_ratio(&p, strataFloat32, 512), 0.0);
}

static void test_compressed_hier(void **state)
{
    st_model_fabric_t      f;
    st_model_split_t       s;
    st_model_time_t        t, th;
    st_model_codec_t       c = {.ratio = 0.25, .elem_bytes = 4, .encode = 0.1e-9,
                                .decode = 0.2e-9};
    strataCompressParams_t p;

    fabric_2x4(&f, &s);
    /* S = 8e6 B, one chunk, even shares (as test_hier: intra phases 61 us each).
     * inter: two rounds, 2 alpha = 10 us, and 2(N-1)/N share ratio S = 0.5 x 0.25 x 8e6 = 1e6 B
     * per rail: rail 0 10 + 100 us, rail 1 10 + 200 us: 210 us; codec work of one rank on its
     * shard of S/g/4 = 5e5 elements: encode 0.1 ns + (2N-1)/N = 1.5 decodes of 0.2 ns = 0.4 ns
     * each, 200 us. Inter 410 us, total 61 + 410 + 61 = 532 us (uncompressed: 932 us). */
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_OK);
    assert_close(t.phase[ST_MODEL_PH_INTRA_RS], 61e-6);
    assert_close(t.phase[ST_MODEL_PH_INTER], 410e-6);
    assert_close(t.phase[ST_MODEL_PH_INTRA_AG], 61e-6);
    assert_close(t.total, 532e-6);

    /* chunks of 2e6 B: 4 chunks of RS 16 us, inter 10 + 50 (rail 1) + 50 (codec) = 110 us, AG
     * 16 us: 16 + 110 + 16 + 3 x 110 = 472 us; the inter phase 4 x 110 = 440 us */
    s.chunk = 2000000;
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_OK);
    assert_close(t.chunks, 4);
    assert_close(t.phase[ST_MODEL_PH_INTER], 440e-6);
    assert_close(t.total, 472e-6);

    /* a shaped rail 1 (burst 1e5 B) credits the compressed bytes it carries: 1e6 B at 5e9 B/s
     * = 200 us, less 1e5 / 5e9 = 20 us; rail 0 (100 us) is not the slowest: 532 - 20 = 512 us */
    s.chunk         = 0;
    f.rail_burst[1] = 1e5;
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_OK);
    assert_close(t.total, 512e-6);
    f.rail_burst[1] = 0;

    /* one node: nothing is compressed, hier's time */
    f.nodes = 1;
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_OK);
    assert_int_equal(st_model_allreduce(&f, &s, ST_ALGO_HIER, 8e6, &th), ST_OK);
    assert_close(t.total, th.total);
    f.nodes = 2;

    /* refusals: a ratio of 0, negative costs, a negative codec cost in the fabric */
    c.ratio = 0;
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_ERR_INVALID);
    c.ratio  = 0.25;
    c.encode = -1;
    assert_int_equal(st_model_allreduce_compressed(&f, &s, &c, 8e6, &t), ST_ERR_INVALID);
    f.codec[strataCodecInt8].decode = -1e-9;
    assert_int_equal(st_model_fabric_check(&f), ST_ERR_INVALID);

    /* the codec of an all-reduce: int8 at 8e6 B in chunks of 2e6 on 4 x 2 ranks encodes blocks of
     * 2e6 / 4 B / 8 = 62500 float32: 62500 B + ceil(62500 / 256) = 245 scales of 4 B, of 250000 B;
     * its costs are the fabric's */
    f.codec[strataCodecInt8] = (st_model_codec_cost_t){3e-9, 1e-9};
    s.chunk                  = 2000000;
    assert_int_equal(strataCompressParse("int8", &p), strataSuccess);
    assert_int_equal(st_model_codec_for(&f, &s, &p, strataFloat32, 8e6, &c), ST_OK);
    assert_close(c.ratio, 63480.0 / 250000);
    assert_close(c.elem_bytes, 4);
    assert_close(c.encode, 3e-9);
    assert_close(c.decode, 1e-9);
    assert_int_equal(st_model_codec_for(&f, &s, &p, strataInt8, 8e6, &c), ST_ERR_INVALID);

    /* this machine's defaults are all positive, and what a profile without them takes */
    st_model_codec_defaults(f.codec);
    for (int i = 0; i < ST_MODEL_NCODECS; i++) {
        assert_true(f.codec[i].encode > 0 && f.codec[i].decode > 0);
    }
    assert_int_equal(st_model_fabric_check(&f), ST_OK);
}

/* One rank per node on 2 nodes, one rail: the uncompressed all-reduce (ring and hier alike) is
 * 2 alpha + S/beta, small (where allowed) alpha_exch + S/beta + S/beta_intra. */
static void fabric_1x2(st_model_fabric_t *f, st_model_split_t *s)
{
    memset(f, 0, sizeof(*f));
    memset(s, 0, sizeof(*s));
    f->ranks_per_node = 1;
    f->nodes          = 2;
    f->nrails         = 1;
    f->intra.beta     = 1e12;
    f->inter.beta     = 1e8;
    s->channels       = 1;
}

static void test_compress_breakeven(void **state)
{
    st_model_fabric_t      f;
    st_model_split_t       s;
    st_model_breakeven_t   be;
    strataCompressParams_t p;

    /* fp16 on float32 (ratio 0.5) costing 1 ns to encode and 1 ns to decode, no latency, no
     * small: uncompressed S/beta, compressed 0.5 S/beta + S/4 (1 + 1.5 x 1) ns. It pays below
     * beta = 0.5 / 0.625e-9 = 8e8 B/s (6.4 Gbit/s), at any size; at 1e8 B/s from the first byte. */
    fabric_1x2(&f, &s);
    f.codec[strataCodecFp16] = (st_model_codec_cost_t){1e-9, 1e-9};
    assert_int_equal(strataCompressParse("fp16", &p), strataSuccess);
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 1 << 20, &be), ST_OK);
    if (!(fabs(be.beta_max / 8e8 - 1) < 1e-6)) {
        fail_msg("beta_max %.9g, want 8e8", be.beta_max);
    }
    assert_close(be.bytes_min, 0.0);

    /* with latency and small up to 1 GiB (alpha_inter = alpha_exch = 10 us, free codec): small is
     * 10 us + S/1e8 + S/1e12, compressed 20 us + 0.5 S/1e8. Compressed pays above
     * S = 10 us / (0.5e-8 + 1e-12) = 1999.6 B; at 1 MiB below
     * beta = 0.5 x 1048576 / (10 us - 1048576 / 1e12) = 5.857e10 B/s. */
    f.inter.alpha            = 10e-6;
    f.exchange_alpha         = 10e-6;
    s.small_max              = (size_t)1 << 30;
    f.codec[strataCodecFp16] = (st_model_codec_cost_t){0, 0};
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 1048576, &be), ST_OK);
    if (!(fabs(be.bytes_min / (10e-6 / (0.5e-8 + 1e-12)) - 1) < 1e-6)) {
        fail_msg("bytes_min %.9g, want %.9g", be.bytes_min, 10e-6 / (0.5e-8 + 1e-12));
    }
    if (!(fabs(be.beta_max / (0.5 * 1048576 / (10e-6 - 1048576e-12)) - 1) < 1e-6)) {
        fail_msg("beta_max %.9g, want %.9g", be.beta_max, 0.5 * 1048576 / (10e-6 - 1048576e-12));
    }

    /* codec none costs time and saves nothing: it never pays */
    fabric_1x2(&f, &s);
    f.codec[strataCodecNone] = (st_model_codec_cost_t){1e-9, 1e-9};
    assert_int_equal(strataCompressParse("none", &p), strataSuccess);
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 1 << 20, &be), ST_OK);
    assert_close(be.beta_max, 0.0);
    assert_true(isinf(be.bytes_min));
    /* a free fp16 on a link without latency always pays */
    f.codec[strataCodecFp16] = (st_model_codec_cost_t){0, 0};
    assert_int_equal(strataCompressParse("fp16", &p), strataSuccess);
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 1 << 20, &be), ST_OK);
    assert_true(isinf(be.beta_max));
    assert_close(be.bytes_min, 0.0);
    /* refusals */
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 0, &be),
                     ST_ERR_INVALID);
    p.codec   = strataCodecTopk;
    p.density = 2;
    assert_int_equal(st_model_compress_breakeven(&f, &s, &p, strataFloat32, 1 << 20, &be),
                     ST_ERR_INVALID);
}

static void test_allgather_bucket_powersgd(void **state)
{
    st_model_fabric_t f;
    st_model_split_t  s;
    st_model_matrix_t m[2] = {{"w", 4096, 4096, 1}, {"norm", 4096, 1, 1}};
    double            p, q, dense;

    /* 4 nodes of 1 rank, 1e9 B/s, alpha 10 us; each rank gives 1e6 B: a ring all-gather of 4e6 B,
     * (n-1) alpha + (n-1)/n 4e6 / 1e9 = 30 us + 3000 us = 3030 us */
    memset(&f, 0, sizeof(f));
    memset(&s, 0, sizeof(s));
    f.ranks_per_node = 1;
    f.nodes          = 4;
    f.nrails         = 1;
    f.intra.beta     = 100e9;
    f.inter.alpha    = 10e-6;
    f.inter.beta     = 1e9;
    s.channels       = 1;
    assert_close(st_model_flat_allgather(&f, &s, 1e6), 3030e-6);

    /* comm 2.205 s under 4 s of backward in 20 buckets: only the last bucket shows, 0.11025 s;
     * comm 5 s over 4 s in 4 buckets: 5 - 4 x 3/4 = 2 s (more than 5/4) */
    assert_close(st_model_bucket_exposed(2.205, 4.0, 20), 0.11025);
    assert_close(st_model_bucket_exposed(5.0, 4.0, 4), 2.0);

    /* rank 4 on 4096 x 4096: P 4 x 4096, Q 4 x 4096 = 32768 of 16777216 elements (1/512); the
     * 4096 norm weights go uncompressed with P */
    st_model_powersgd(m, 2, 4, &p, &q, &dense);
    assert_close(p, 16384 + 4096);
    assert_close(q, 16384);
    assert_close(dense, 16777216 + 4096);
}

/* ---- the seed preset, as printed ------------------------------------------------------------- */

/* Runs `collbench model ARGS` into a string (caller frees); *rc_p its exit status. */
static char *run_model(int argc, const char **argv, int *rc_p, char **err_p)
{
    char  *out = NULL, *err = NULL;
    size_t len, elen;
    FILE  *fo  = open_memstream(&out, &len);
    FILE  *fe  = open_memstream(&err, &elen);

    assert_non_null(fo);
    assert_non_null(fe);
    *rc_p = cb_model_run(fo, fe, argc, (char **)argv, "collbench");
    fclose(fo);
    fclose(fe);
    if (err_p != NULL) {
        *err_p = err;
    } else {
        free(err);
    }
    return out;
}

/* The line after `section` (a line that starts with it) that starts with `label` followed by two
 * spaces; its whitespace-separated figures must be want[0..n). */
static void check_row(const char *out, const char *section, const char *label, int n,
                      const char *const *want)
{
    const char *p = out, *line = NULL;
    char        buf[256], *tok, *save = NULL;
    size_t      llen = strlen(label);
    int         i;

    if (section != NULL) {
        p = strstr(out, section);
        if (p == NULL) {
            fail_msg("no section '%s' in:\n%s", section, out);
        }
    }
    for (; p != NULL && *p != '\0'; p = strchr(p, '\n'), p = (p != NULL) ? p + 1 : NULL) {
        if (strncmp(p, label, llen) == 0 && strncmp(p + llen, "  ", 2) == 0) {
            line = p;
            break;
        }
    }
    if (line == NULL) {
        fail_msg("no row '%s' after '%s' in:\n%s", label, section ? section : "", out);
    }
    snprintf(buf, sizeof(buf), "%.*s", (int)strcspn(line + llen, "\n"), line + llen);
    for (i = 0, tok = strtok_r(buf, " ", &save); i < n; i++, tok = strtok_r(NULL, " ", &save)) {
        if (tok == NULL || strcmp(tok, want[i]) != 0) {
            fail_msg("row '%s': figure %d is '%s', issue 6 says '%s'", label, i,
                     tok ? tok : "(none)", want[i]);
        }
    }
}

#define ROW(_out, _sec, _label, ...)                                                           \
    do {                                                                                       \
        const char *const _w[] = {__VA_ARGS__};                                                \
        check_row(_out, _sec, _label, (int)(sizeof(_w) / sizeof(_w[0])), _w);                 \
    } while (0)

static void test_seed_preset_printed(void **state)
{
    const char *argv[] = {"model", "--preset", "seed", "--only", "texts"};
    int         rc;
    char       *out    = run_model(5, argv, &rc, NULL);

    assert_int_equal(rc, 0);
    /* every figure issue 6 lists */
    ROW(out, NULL, "gradient", "28.0", "GB");
    ROW(out, NULL, "ring data per GPU, 2(n-1)/n x gradient", "55.1", "GB");
    ROW(out, NULL, "flat ring all-reduce, data / inter bw", "2205", "ms");
    ROW(out, NULL, "step = forward + backward + comm", "8205", "ms");
    ROW(out, NULL, "communication", "26.9", "%");

    ROW(out, "compression", "none", "28.00", "2.21", "8.21", "1.00x");
    ROW(out, "compression", "top-1%", "0.28", "0.02", "6.04", "1.36x");
    ROW(out, "compression", "top-0.1%", "0.03", "0.00", "6.03", "1.36x");
    ROW(out, "compression", "8-bit", "7.00", "0.55", "6.56", "1.25x");
    ROW(out, "compression", "1-bit", "0.88", "0.07", "6.08", "1.35x");
    ROW(out, "compression", "PowerSGD rank 4 (texts' formula)", "28.00", "2.21", "8.23",
        "1.00x");

    ROW(out, "overlap", "none", "2.21", "8.21", "1.00x");
    ROW(out, "overlap", "50%", "1.10", "7.10", "1.16x");
    ROW(out, "overlap", "full bucketing (95%)", "0.11", "6.11", "1.34x");

    assert_non_null(strstr(out, "\n    5.1 ms + 245.0 ms + 5.1 ms = 255.2 ms, 8.6x over the "
                                "flat ring\n"));

    ROW(out, "combined scenarios", "flat ring", "8.21", "1.00x");
    ROW(out, "combined scenarios", "hierarchical", "6.26", "1.31x");
    ROW(out, "combined scenarios", "hierarchical + top-1%", "6.02", "1.36x");
    ROW(out, "combined scenarios", "hierarchical + top-1% + full bucketing (95%)", "6.02",
        "1.36x");
    assert_non_null(strstr(out, "\ncommunication overhead (step - compute) 2205 ms -> 20.1 ms: "
                                "reduced 110x\n"));
    /* --only texts prints no faithful table */
    assert_null(strstr(out, "Faithful"));
    free(out);
}

static void test_seed_values(void **state)
{
    st_model_seed_in_t  in;
    st_model_seed_out_t r;

    /* the same figures unrounded, as the texts' arithmetic gives them */
    st_model_seed_preset(&in);
    st_model_seed_compute(&in, &r);
    assert_close(r.gradient, 28e9);
    assert_close(r.ring_bytes, 126.0 / 64 * 28e9);           /* 55.125 GB */
    assert_close(r.ring_time, 2.205);
    assert_close(r.step, 8.205);
    assert_close(r.comp[5].step, 8.235);                     /* prints 8.23: see docs */
    assert_close(r.hier_phase[0], 0.875 * 3.5e9 / 600e9);    /* 5.104 ms */
    assert_close(r.hier_phase[1], 1.75 * 3.5e9 / 25e9);      /* 245 ms */
    assert_close(r.comm_overhead_final, 20e-3 + 0.05 * r.hier_time / 100);
}

static void test_faithful_printed(void **state)
{
    const char *argv[] = {"model", "--preset", "seed"};
    const char *bad[]  = {"model", "--rails", "0"};
    char       *out, *err;
    int         rc;

    out = run_model(3, argv, &rc, NULL);
    assert_int_equal(rc, 0);
    /* both, texts first */
    assert_non_null(strstr(out, "reduced 110x"));
    assert_true(strstr(out, "reduced 110x") < strstr(out, "Faithful"));
    /* by hand: 2205 ms + 2 x 63 x 5 us = 2205.63 ms */
    ROW(out, "all-reduce of the gradient", "flat ring, 1 channel", "2205.6");
    /* 8 channels on 8 rails of 25 GB/s: 1.96875 x 3.5e9 / 25e9 = 275.625 ms + 0.63 ms */
    ROW(out, "all-reduce of the gradient", "flat ring, one channel per NIC", "276.3");
    /* intra RS: 1 us + 7/8 x 28e9 / 600e9 = 40.834 ms; inter: shard 28e9 / 8 ranks per node on
     * each rail, 2 x 7/8 x 3.5e9 / 25e9 = 245 ms + 2 x 7 x 5 us = 245.07 ms */
    assert_non_null(strstr(out, "\n    intra reduce-scatter 40.8 ms + inter all-reduce 245.1 ms "
                                "+ intra all-gather 40.8 ms\n"));
    /* each correction says what it corrects */
    assert_non_null(strstr(out, "    corrects: inter-node shard = gradient / 8 ranks per node, per "
                                "rail (3.50 GB;\n    the texts divide by the 8 nodes"));
    assert_non_null(strstr(out, "the texts' 8.6x holds only against one ring"));
    assert_non_null(strstr(out, "4 B of index with each value"));
    assert_non_null(strstr(out, "r(m+n)/(mn) per weight matrix"));
    free(out);

    out = run_model(3, bad, &rc, &err);
    assert_int_equal(rc, 2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "invalid count '0'"));
    free(out);
    free(err);
}

/* One node: "1 node", no inter-node notes and no hierarchical speedup over the network, the
 * model's intra-node figures instead. */
static void test_one_node_printed(void **state)
{
    const char *argv[] = {"model", "--nodes", "1"};
    char       *out;
    int         rc;

    out = run_model(3, argv, &rc, NULL);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "pipelining. 1 node x 8 ranks,"));
    assert_null(strstr(out, "1 nodes"));
    assert_null(strstr(out, "hierarchical (pipelined) over the flat ring"));
    assert_null(strstr(out, "inter-node shard"));
    assert_null(strstr(out, "move the same inter-node bytes"));
    /* ring: 1 us x 14 + 2 x 7/8 x 28e9 / 600e9 = 81.68 ms; hier pipelined as printed above */
    ROW(out, "all-reduce of the gradient", "flat ring, 1 channel", "81.7");
    ROW(out, "all-reduce of the gradient", "hierarchical, pipelined", "41.2");
    assert_non_null(strstr(out, "\none node: no inter-node phase; hierarchical is the intra-node "
                                "reduce-scatter and all-gather\n    only, 41.2 ms pipelined "
                                "against the flat ring's 81.7 ms within the node"));
    assert_non_null(strstr(out, "no inter-node speedup to claim\n"));
    free(out);
}

/* `model --compress`: one rank per node on 2 nodes, one 8 Gbit/s (1e9 B/s) rail, no latency;
 * fp16 (ratio 0.5 of float32) costing 2 ns to encode and 2 ns to decode per element, read from a
 * profile (--codec-costs). 1e6 parameters, 4e6 B:
 *   uncompressed (ring and hier alike): S/beta = 4 ms; compressed: 0.5 S/beta = 2 ms + one rank's
 *   1e6 elements x (2 + (2N-1)/N x 2 = 5 ns) = 5 ms: 7 ms, 0.57x;
 *   4 buckets of 1e6 B: 1 ms and 1.75 ms;
 *   step, forward 1 + backward 2 ms: 7 and 10 ms, 0.70x; bucketed, exposed max(comm/4,
 *   comm - 2 x 3/4): 2.5 ms and 5.5 ms: 5.5 and 8.5 ms, 0.65x;
 *   break-even: 0.5 S/beta = S/4 x 5 ns at beta = 4e8 B/s = 3.2 Gbit/s; at 8 Gbit/s no size. */
static void test_compress_printed(void **state)
{
    const char *argv[] = {"model", "--nodes", "2", "--ranks-per-node", "1", "--rails", "1",
                          "--inter-gbps", "8", "--alpha-inter", "0", "--alpha-intra", "0",
                          "--params", "1e6", "--buckets", "4", "--forward", "1", "--backward",
                          "2", "--compress", "fp16", "--codec-costs", NULL};
    const char *bad1[] = {"model", "--compress", "topk"};
    const char *bad2[] = {"model", "--compress", "int8", "--dtype-bytes", "8"};
    const char *bad3[] = {"model", "--compress", "int8", "--codec-costs", "/nonexistent.json"};
    const char *seed[] = {"model", "--preset", "seed"};
    char        path[] = "/tmp/test_model_costs.XXXXXX", *out, *err;
    int         rc, fd = mkstemp(path);
    st_model_fabric_t f;
    st_model_split_t  s;

    assert_true(fd >= 0);
    close(fd);
    fabric_1x2(&f, &s);
    f.codec[strataCodecFp16] = (st_model_codec_cost_t){2e-9, 2e-9};
    assert_int_equal(st_profile_write(path, &f, NULL, "test_model"), ST_OK);
    argv[24] = path;
    out      = run_model(25, argv, &rc, NULL);
    unlink(path);
    assert_int_equal(rc, 0);
    assert_non_null(strstr(out, "# wire: 2 B per 4 B element (ratio 0.5"));
    assert_non_null(strstr(out, "# encode 2.00 ns, decode 2.00 ns per element (from "));
    ROW(out, "all-reduce", "gradient", "3.81", "MiB", "4.000");
    assert_non_null(strstr(out, "       7.000    0.57x\nbucket (x 4)"));
    ROW(out, "all-reduce", "bucket (x 4)", "977", "KiB", "1.000");
    assert_non_null(strstr(out, "       1.750    0.57x\n"));
    ROW(out, "step", "one all-reduce after backward", "7.000", "10.000", "0.70x");
    ROW(out, "step", "4 buckets overlapping backward", "5.500", "8.500", "0.65x");
    assert_non_null(strstr(out, "\ncompression stops paying above 3.2 Gbit/s per node link / at "
                                "every bucket size on these links\n"));
    assert_null(strstr(out, "Faithful")); /* --compress alone: its section only */
    free(out);

    /* bad specs and files are refused on one line */
    out = run_model(3, bad1, &rc, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "invalid --compress 'topk': topk needs a density"));
    free(out);
    free(err);
    out = run_model(5, bad2, &rc, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--compress takes 4-byte"));
    free(out);
    free(err);
    out = run_model(5, bad3, &rc, &err);
    assert_int_equal(rc, 2);
    assert_non_null(strstr(err, "--codec-costs: /nonexistent.json"));
    free(out);
    free(err);

    /* --preset seed: a row per codec under the faithful model, at the defaults; int8 (block 256)
     * puts 1 + 4/256 B on the wire per float32 */
    out = run_model(3, seed, &rc, NULL);
    assert_int_equal(rc, 0);
    ROW(out, "strata's codecs", "int8", "1.016", "1.30/0.20");
    ROW(out, "strata's codecs", "topk:0.01", "0.080");
    ROW(out, "strata's codecs", "none", "4.000", "1.10/0.27");
    free(out);
}

/* --profile belongs to --compare: a plain model run says so, naming both options. */
static void test_profile_needs_compare(void **state)
{
    const char *argv[] = {"model", "--profile", "p.json"};
    char       *out, *err;
    int         rc;

    out = run_model(3, argv, &rc, &err);
    assert_int_equal(rc, 2);
    assert_string_equal(out, "");
    assert_non_null(strstr(err, "collbench: model: --profile needs --compare"));
    assert_null(strstr(err, "invalid option"));
    assert_ptr_equal(strchr(err, '\n'), err + strlen(err) - 1); /* one line */
    free(out);
    free(err);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ring_allreduce),
        cmocka_unit_test(test_pipeline),
        cmocka_unit_test(test_hier),
        cmocka_unit_test(test_collectives),
        cmocka_unit_test(test_ring_channels),
        cmocka_unit_test(test_small_and_choose),
        cmocka_unit_test(test_burst_credit),
        cmocka_unit_test(test_credit_curve),
        cmocka_unit_test(test_algorithm_credits),
        cmocka_unit_test(test_codec_ratio),
        cmocka_unit_test(test_compressed_hier),
        cmocka_unit_test(test_compress_breakeven),
        cmocka_unit_test(test_allgather_bucket_powersgd),
        cmocka_unit_test(test_seed_preset_printed),
        cmocka_unit_test(test_seed_values),
        cmocka_unit_test(test_faithful_printed),
        cmocka_unit_test(test_one_node_printed),
        cmocka_unit_test(test_compress_printed),
        cmocka_unit_test(test_profile_needs_compare),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
