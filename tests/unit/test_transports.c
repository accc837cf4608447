/*
 * test_transports.c - the collective battery over every pair of net and window transports: the
 * builtin ones of this build (st_transports_builtin) and the fakes of fake_tl.c, in one process
 * (ranks are threads; UCX's gtest runs its tests over every transport the same way). A transport
 * that joins the tables (verbs) is covered by adding nothing here; a window of device memory
 * (cuda_ipc) is passed over, the battery's buffers being host memory. The verbs transport runs on
 * mock_ibv.c, an in-process stand-in for libibverbs with two HCAs.
 *
 * Each battery runs NRANKS ranks through the public API, initialised over the pair
 * (st_comm_init_rank_tl), on one node and on two (each rank thread takes its node's identity:
 * st_node_id_set_thread), with each algorithm forced in turn: ring, hier (intra-node phases over
 * the windows, inter-node rings over the net) and small (leaders' exchange over the net), with
 * chunks small enough that the pipelines reuse their columns and window slots: all-reduce in and
 * out of place (zero-copy on the window's shareable buffers), reduce-scatter and all-gather in
 * and out of place, broadcast, reduce, send/recv in a group, and a split over the parent's
 * transports. The fake net runs eager and rendezvous (a send completes only once matched).
 * Every result is checked element by element against values computed here; integer values in
 * float keep every sum exact. The fakes' counters must show that they carried the traffic (and
 * in rendezvous mode that sends waited for their match), and that hier's zero-copy negotiation
 * mapped the fake window's shareable buffers.
 *
 * test_rail_outcomes checks the one inter-node step (coll/rail.c) on hand-made requests: how each
 * transport outcome is classified and said.
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "coll/rail.h"
#include "core/init.h"
#include "engine/op.h"
#include "tests/unit/fake_tl.h"
#ifdef HAVE_VERBS
#include "tests/unit/mock_ibv.h"
#endif
#include "topo/node.h"

#define NRANKS 4

typedef struct battery {
    const st_transports_t *tl;
    strataUniqueId         id;
    int                    nodes;    /* 1, or 2: ranks 0 .. NRANKS/2-1 on the first */
    const char            *algo;     /* forced algorithm: what strataCommGetPhaseTimes must say */
    int                    failures; /* summed over ranks (atomic) */
    char                   first[256];
    pthread_mutex_t        lock;
} battery_t;

typedef struct rank_job {
    battery_t *b;
    int        rank;
} rank_job_t;

static void bt_fail(battery_t *b, const char *fmt, ...)
{
    va_list ap;

    pthread_mutex_lock(&b->lock);
    if (b->failures++ == 0) {
        va_start(ap, fmt);
        vsnprintf(b->first, sizeof(b->first), fmt, ap);
        va_end(ap);
    }
    pthread_mutex_unlock(&b->lock);
}

/* Rank r's value at index i: small integers, exact in float. */
static float val(int r, size_t i)
{
    return (float)((r + 1) * (int)(i % 7 + 1));
}

#define CALL(_b, _r, _what, _call)                                                                 \
    do {                                                                                           \
        strataResult_t _res = (_call);                                                             \
        if (_res != strataSuccess) {                                                               \
            bt_fail(_b, "rank %d: %s: %s", _r, _what, strataGetErrorString(_res));                    \
            goto out;                                                                              \
        }                                                                                          \
    } while (0)

/* The algorithm the last collective ran, as strataCommGetPhaseTimes reports it. */
static void expect_algo(battery_t *b, int r, strataComm_t comm, const char *coll,
                        const char *want)
{
    strataPhaseTimes_t t;

    memset(&t, 0, sizeof(t));
    if (strataCommGetPhaseTimes(comm, &t) != strataSuccess || strcmp(t.algorithm, want) != 0) {
        bt_fail(b, "rank %d: %s ran '%s', not '%s'", r, coll, t.algorithm, want);
    }
}

static void run_battery(battery_t *b, int r, strataComm_t comm, float *send, float *recv,
                        size_t n)
{
    const int p = NRANKS;
    int32_t   isend[64], irecv[64 * NRANKS];

    /* all-reduce, out of place (zero-copy when the buffers are the window's shareable ones) */
    for (size_t i = 0; i < n; i++) {
        send[i] = val(r, i);
        recv[i] = -1;
    }
    CALL(b, r, "all-reduce", strataAllReduce(send, recv, n, strataFloat32, strataSum, comm, NULL));
    expect_algo(b, r, comm, "all-reduce", b->algo);
    for (size_t i = 0; i < n; i++) {
        if (recv[i] != (float)(p * (p + 1) / 2 * (int)(i % 7 + 1))) {
            bt_fail(b, "rank %d: all-reduce [%zu] = %g", r, i, recv[i]);
            break;
        }
    }
    /* all-reduce in place, max over int32 */
    for (int i = 0; i < 64; i++) {
        isend[i] = (i * 13 + r * 5) % 17;
    }
    CALL(b, r, "all-reduce max", strataAllReduce(isend, isend, 64, strataInt32, strataMax, comm,
                                                NULL));
    for (int i = 0; i < 64; i++) {
        int32_t m = 0;

        for (int q = 0; q < p; q++) {
            m = ((i * 13 + q * 5) % 17 > m) ? (i * 13 + q * 5) % 17 : m;
        }
        if (isend[i] != m) {
            bt_fail(b, "rank %d: all-reduce max [%d] = %d, not %d", r, i, isend[i], m);
            break;
        }
    }
    /* reduce-scatter, out of place then in place (recvbuff = sendbuff + r * count): rank r gets
     * block r of the sum; blocks of 3000 floats span several 4 KiB pipeline chunks */
    for (int inplace = 0; inplace < 2; inplace++) {
        const size_t c = 3000;
        float       *out = inplace ? send + (size_t)r * c : recv;

        for (size_t i = 0; i < (size_t)p * c; i++) {
            send[i] = val(r, i);
        }
        CALL(b, r, "reduce-scatter", strataReduceScatter(send, out, c, strataFloat32, strataSum,
                                                         comm, NULL));
        for (size_t i = 0; i < c; i++) {
            if (out[i] != (float)(p * (p + 1) / 2 * (int)(((size_t)r * c + i) % 7 + 1))) {
                bt_fail(b, "rank %d: reduce-scatter%s [%zu] = %g", r, inplace ? " in place" : "",
                        i, out[i]);
                break;
            }
        }
    }
    /* all-gather of 3000 floats per rank, out of place then in place (sendbuff = recvbuff +
     * r * count) */
    for (int inplace = 0; inplace < 2; inplace++) {
        const size_t c = 3000;
        float       *in = inplace ? recv + (size_t)r * c : send;

        for (size_t i = 0; i < (size_t)p * c; i++) {
            recv[i] = -1;
        }
        for (size_t i = 0; i < c; i++) {
            in[i] = (float)(r * 10000 + (int)i);
        }
        CALL(b, r, "all-gather", strataAllGather(in, recv, c, strataFloat32, comm, NULL));
        for (size_t i = 0; i < (size_t)p * c; i++) {
            if (recv[i] != (float)((int)(i / c) * 10000 + (int)(i % c))) {
                bt_fail(b, "rank %d: all-gather%s [%zu] = %g", r, inplace ? " in place" : "", i,
                        recv[i]);
                break;
            }
        }
    }
    /* broadcast from rank 1, reduce to rank 2 */
    for (size_t i = 0; i < n; i++) {
        send[i] = (r == 1) ? val(7, i) : -2;
    }
    CALL(b, r, "broadcast", strataBroadcast(send, send, n, strataFloat32, 1, comm, NULL));
    for (size_t i = 0; i < n; i++) {
        if (send[i] != val(7, i)) {
            bt_fail(b, "rank %d: broadcast [%zu] = %g", r, i, send[i]);
            break;
        }
    }
    for (size_t i = 0; i < n; i++) {
        send[i] = val(r, i);
        recv[i] = -3;
    }
    CALL(b, r, "reduce", strataReduce(send, recv, n, strataFloat32, strataSum, 2, comm, NULL));
    for (size_t i = 0; r == 2 && i < n; i++) {
        if (recv[i] != (float)(p * (p + 1) / 2 * (int)(i % 7 + 1))) {
            bt_fail(b, "rank %d: reduce [%zu] = %g", r, i, recv[i]);
            break;
        }
    }
    /* send/recv: a shift to the right in a group */
    for (int i = 0; i < 64; i++) {
        isend[i] = r * 100 + i;
        irecv[i] = -1;
    }
    CALL(b, r, "group start", strataGroupStart());
    CALL(b, r, "send", strataSend(isend, 64, strataInt32, (r + 1) % p, comm, NULL));
    CALL(b, r, "recv", strataRecv(irecv, 64, strataInt32, (r + p - 1) % p, comm, NULL));
    CALL(b, r, "group end", strataGroupEnd());
    for (int i = 0; i < 64; i++) {
        if (irecv[i] != ((r + p - 1) % p) * 100 + i) {
            bt_fail(b, "rank %d: recv [%d] = %d", r, i, irecv[i]);
            break;
        }
    }
    /* all-to-all of 3000 floats per pair (forced ring: pairwise; otherwise, as under auto with
     * several ranks per node, hier's 2D scheme through the windows), then
     * all-to-all-v with rank-dependent counts, gather to rank 3 and scatter from rank 1 */
    {
        const size_t c = 3000;
        size_t       v[4 * NRANKS];

        for (size_t i = 0; i < (size_t)p * c; i++) {
            send[i] = (float)(r * 100000 + (int)(i / c) * 1000 + (int)(i % c % 1000));
            recv[i] = -1;
        }
        CALL(b, r, "all-to-all", strataAlltoAll(send, recv, c, strataFloat32, comm, NULL));
        expect_algo(b, r, comm, "all-to-all", strcmp(b->algo, "ring") == 0 ? "pairwise" : "hier");
        for (size_t i = 0; i < (size_t)p * c; i++) {
            if (recv[i] != (float)((int)(i / c) * 100000 + r * 1000 + (int)(i % c % 1000))) {
                bt_fail(b, "rank %d: all-to-all [%zu] = %g", r, i, recv[i]);
                break;
            }
        }
        /* rank q sends rank d (q + d) * 700 elements (0 from rank 0 to itself) */
        for (int q = 0; q < p; q++) {
            v[q]              = (size_t)(r + q) * 700;          /* sendcounts */
            v[NRANKS + q]     = (size_t)q * 7 * 700;            /* sdispls */
            v[2 * NRANKS + q] = (size_t)(q + r) * 700;          /* recvcounts */
            v[3 * NRANKS + q] = (size_t)(p - 1 - q) * 7 * 700;  /* rdispls, blocks reversed */
        }
        for (int q = 0; q < p; q++) {
            for (size_t i = 0; i < v[q]; i++) {
                send[v[NRANKS + q] + i] = (float)(r * 100000 + q * 10000 + (int)(i % 9999));
            }
        }
        CALL(b, r, "all-to-all-v", strataAlltoAllv(send, v, v + NRANKS, recv, v + 2 * NRANKS,
                                                   v + 3 * NRANKS, strataFloat32, comm, NULL));
        for (int q = 0; q < p; q++) {
            for (size_t i = 0; i < v[2 * NRANKS + q]; i++) {
                if (recv[v[3 * NRANKS + q] + i] !=
                    (float)(q * 100000 + r * 10000 + (int)(i % 9999))) {
                    bt_fail(b, "rank %d: all-to-all-v from rank %d [%zu] = %g", r, q, i,
                            recv[v[3 * NRANKS + q] + i]);
                    q = p;
                    break;
                }
            }
        }
        for (size_t i = 0; i < c; i++) {
            send[i] = (float)(r * 10000 + (int)i);
        }
        CALL(b, r, "gather", strataGather(send, recv, c, strataFloat32, 3, comm, NULL));
        for (size_t i = 0; r == 3 && i < (size_t)p * c; i++) {
            if (recv[i] != (float)((int)(i / c) * 10000 + (int)(i % c))) {
                bt_fail(b, "rank %d: gather [%zu] = %g", r, i, recv[i]);
                break;
            }
        }
        for (size_t i = 0; i < (size_t)p * c; i++) {
            send[i] = (float)(r * 100000 + (int)i);
        }
        CALL(b, r, "scatter", strataScatter(send, recv, c, strataFloat32, 1, comm, NULL));
        for (size_t i = 0; i < c; i++) {
            if (recv[i] != (float)(100000 + r * (int)c + (int)i)) {
                bt_fail(b, "rank %d: scatter [%zu] = %g", r, i, recv[i]);
                break;
            }
        }
    }
    /* a split (ranks in reverse order) runs over its parent's transports */
    {
        strataComm_t sub = NULL;
        int32_t      x = r + 1, sum = 0;
        int          subrank = -1;

        CALL(b, r, "split", strataCommSplit(comm, 0, -r, &sub, NULL));
        if (strataCommUserRank(sub, &subrank) != strataSuccess || subrank != p - 1 - r) {
            bt_fail(b, "rank %d: rank %d in the split, not %d", r, subrank, p - 1 - r);
        }
        if (strataAllReduce(&x, &sum, 1, strataInt32, strataSum, sub, NULL) != strataSuccess ||
            sum != p * (p + 1) / 2) {
            bt_fail(b, "rank %d: all-reduce in the split gave %d", r, sum);
        }
        if (strataCommDestroy(sub) != strataSuccess) {
            bt_fail(b, "rank %d: destroying the split failed", r);
        }
    }
out:
    return;
}

static void *rank_main(void *arg)
{
    rank_job_t            *job = arg;
    battery_t             *b = job->b;
    const st_win_ops_t    *win = b->tl->win[0];
    strataComm_t           comm = NULL;
    float                 *send = NULL, *recv = NULL;
    const size_t           n = 20000; /* 80 KB: within small's limit; 10 hier chunks of 8 KiB */
    int                    r = job->rank;

    st_node_id_set_thread(b->nodes == 1 ? NULL : r < NRANKS / 2 ? "fake-node-a" : "fake-node-b");
    CALL(b, r, "init", st_comm_init_rank_tl(&comm, NRANKS, b->id, r, b->tl));
    {
        int node = -1, nnodes = -1;

        if (strataCommTopoRank(comm, &node, &nnodes, NULL, NULL) != strataSuccess ||
            nnodes != b->nodes || node != r * b->nodes / NRANKS) {
            bt_fail(b, "rank %d: node %d of %d, not %d of %d", r, node, nnodes,
                    r * b->nodes / NRANKS, b->nodes);
        }
    }
    /* the window transport's shareable buffers: hier's all-reduce runs zero-copy on them */
    if (win->mem_alloc(NRANKS * n * sizeof(float), (void **)&send) != ST_OK ||
        win->mem_alloc(NRANKS * n * sizeof(float), (void **)&recv) != ST_OK) {
        bt_fail(b, "rank %d: %s's mem_alloc failed", r, win->name);
        goto out;
    }
    run_battery(b, r, comm, send, recv, n);
out:
    if (comm != NULL && strataCommDestroy(comm) != strataSuccess) {
        bt_fail(b, "rank %d: destroy failed", r);
    }
    if (send != NULL) {
        win->mem_free(send);
    }
    if (recv != NULL) {
        win->mem_free(recv);
    }
    st_node_id_set_thread(NULL);
    return NULL;
}

/* Runs the battery on NRANKS threads over net and win, on nodes nodes, with algorithm algo forced
 * and the fake net in rendezvous mode or not; checks the fakes' counters. */
static void battery(const st_net_ops_t *net, const st_win_ops_t *win, const char *algo,
                    int nodes, int rendezvous)
{
    const st_net_ops_t *nets[] = {net, NULL};
    const st_win_ops_t *wins[] = {win, NULL};
    st_transports_t     tl = {nets, wins};
    battery_t           b;
    rank_job_t          jobs[NRANKS];
    pthread_t           threads[NRANKS];
    st_core_config_t    saved;
    long                opens = atomic_load(&fake_tl_counts.net_opens);
    long                sends = atomic_load(&fake_tl_counts.net_sends);
    long                wcreates = atomic_load(&fake_tl_counts.win_creates);
    long                maps = atomic_load(&fake_tl_counts.mem_maps);
    long                matched = atomic_load(&fake_tl_counts.net_matched);

    memset(&b, 0, sizeof(b));
    pthread_mutex_init(&b.lock, NULL);
    b.tl    = &tl;
    b.algo  = algo;
    b.nodes = nodes;
    assert_int_equal(strataGetUniqueId(&b.id), strataSuccess); /* parameters read by now */
    /* for these communicators: STRATA_ALGO (read when each collective is chosen), chunks small
     * enough that the pipelines wrap (STRATA_CHUNK_SIZE, STRATA_HIER_CHUNK_SIZE: read at init and
     * per call), and a deadline that ends a broken battery in seconds, not minutes */
    saved                           = st_core_config;
    st_core_config.algo             = (char *)algo;
    st_core_config.chunk_size       = 4096;
    st_core_config.hier_chunk_size  = 8192;
    st_core_config.timeout          = 30;
    fake_tl_rendezvous              = rendezvous;
    for (int r = 0; r < NRANKS; r++) {
        jobs[r].b    = &b;
        jobs[r].rank = r;
        assert_int_equal(pthread_create(&threads[r], NULL, rank_main, &jobs[r]), 0);
    }
    for (int r = 0; r < NRANKS; r++) {
        pthread_join(threads[r], NULL);
    }
    st_core_config     = saved;
    fake_tl_rendezvous = 0;
    if (b.failures != 0) {
        fail_msg("net %s, window %s, %s, %d node(s)%s: %d failures; first: %s", net->name,
                 win->name, algo, nodes, rendezvous ? ", rendezvous" : "", b.failures, b.first);
    }
    pthread_mutex_destroy(&b.lock);
    /* the communicator and its split each opened a net context per rank and a window per rank
     * (every layout here has 2 or more ranks per node) through the transports they were given,
     * and through no other */
    assert_int_equal(atomic_load(&fake_tl_counts.net_opens) - opens,
                     net == &fake_net ? 2 * NRANKS : 0);
    assert_int_equal(atomic_load(&fake_tl_counts.win_creates) - wcreates,
                     win == &fake_win ? 2 * NRANKS : 0);
    if (net == &fake_net) {
        assert_true(atomic_load(&fake_tl_counts.net_sends) > sends);
        /* rendezvous: sends did wait for their match; eager: none did */
        assert_true(rendezvous ? atomic_load(&fake_tl_counts.net_matched) > matched
                               : atomic_load(&fake_tl_counts.net_matched) == matched);
    }
    if (win == &fake_win && strcmp(algo, "hier") == 0) {
        /* zero-copy: every rank mapped its local peers' send and receive buffers */
        assert_true(atomic_load(&fake_tl_counts.mem_maps) - maps >= 2 * NRANKS);
    }
}

static void all_algos(const st_net_ops_t *net, const st_win_ops_t *win)
{
    const char *algos[] = {"ring", "hier", "small"};

    /* the battery's buffers are host memory, which a device window (cuda_ipc, ST_MEM_CUDA)
     * serves none of: such a window is tested by its own test (test_cuda_ipc) until the
     * algorithms' device path gives it a battery of device buffers */
    if (win->mem_type != ST_MEM_HOST) {
        return;
    }

    for (int nodes = 1; nodes <= 2; nodes++) {
        for (int a = 0; a < 3; a++) {
            battery(net, win, algos[a], nodes, 0);
            if (net == &fake_net) {
                battery(net, win, algos[a], nodes, 1);
            }
        }
    }
    assert_int_equal(fake_tl_live(), 0);
}

/* Both fakes: nothing of the builtin transports is used. */
static void test_fake_net_fake_window(void **state)
{
    all_algos(&fake_net, &fake_win);
}

/* Every builtin net transport with the fake window, every builtin window with the fake net,
 * and every builtin pair. */
static void test_builtin_net_fake_window(void **state)
{
    for (const st_net_ops_t *const *net = st_transports_builtin.net; *net != NULL; net++) {
        all_algos(*net, &fake_win);
    }
}

static void test_fake_net_builtin_window(void **state)
{
    for (const st_win_ops_t *const *win = st_transports_builtin.win; *win != NULL; win++) {
        all_algos(&fake_net, *win);
    }
}

static void test_builtin_pairs(void **state)
{
    for (const st_net_ops_t *const *net = st_transports_builtin.net; *net != NULL; net++) {
        for (const st_win_ops_t *const *win = st_transports_builtin.win; *win != NULL; win++) {
            all_algos(*net, *win);
        }
    }
}

/* A posted transfer whose request the transport completed with status and len. */
static st_rail_xfer_t done_xfer(int is_send, size_t expect, st_status_t status, size_t len,
                                uint64_t tag)
{
    st_rail_xfer_t x;

    memset(&x, 0, sizeof(x));
    x.peer       = 2;
    x.len        = expect;
    x.tag        = tag;
    x.is_send    = is_send;
    x.posted     = 1;
    x.req.status = status;
    x.req.len    = len;
    x.req.done   = 1;
    return x;
}

/* st_rail_fail of x's outcome st_rail_test gave; 1 when the logged line holds every one of the
 * NULL-terminated words. */
static int said(const st_op_t *op, st_rail_xfer_t *x, st_status_t status, ...)
{
    const char *line, *w;
    va_list     ap;
    int         ok = 1;

    assert_int_equal(st_rail_fail(op, x, status, "step %d/%d", 2, 6), status);
    line = st_log_last_error();
    va_start(ap, status);
    while ((w = va_arg(ap, const char *)) != NULL) {
        if (strstr(line, w) == NULL) {
            print_error("\"%s\" is not in \"%s\"\n", w, line);
            ok = 0;
        }
    }
    va_end(ap);
    return ok;
}

static void test_rail_outcomes(void **state)
{
    st_comm_t     *comm = calloc(1, sizeof(*comm));
    st_op_t        op;
    st_rail_xfer_t x;
    uint64_t       coll = st_tag_coll(7, 3), p2p = st_tag_p2p(7);

    assert_non_null(comm);
    snprintf(comm->name, sizeof(comm->name), "battery");
    comm->rank = 1;
    memset(&op, 0, sizeof(op));
    op.comm = comm;
    op.coll = "AllReduce";
    op.seq  = 7;

    /* in flight; never posted; complete as expected (consumed: a second test finds it over) */
    x = done_xfer(0, 400, ST_OK, 400, coll);
    x.req.done = 0;
    assert_true(st_rail_busy(&x));
    assert_int_equal(st_rail_test(&x), ST_INPROGRESS);
    assert_true(x.posted);
    assert_ptr_equal(st_rail_req(&x), &x.req);
    x.req.done = 1;
    assert_false(st_rail_busy(&x));
    assert_int_equal(st_rail_test(&x), ST_OK);
    assert_false(x.posted);
    assert_null(st_rail_req(&x));
    assert_int_equal(st_rail_test(&x), ST_OK);

    /* a short receive, a truncated one with and without the bytes sent: a usage error naming
     * both sizes and the hint for collectives or for send/recv */
    x = done_xfer(0, 400, ST_OK, 200, coll);
    assert_int_equal(st_rail_test(&x), ST_ERR_USAGE);
    assert_true(said(&op, &x, ST_ERR_USAGE, "AllReduce #7 (battery) rank 1: step 2/6",
                     "expected 400 B from rank 2, rank 2 sent 200 B", "same collective", NULL));
    x = done_xfer(0, 400, ST_OK, 0, p2p); /* the peer sent an empty message */
    assert_int_equal(st_rail_test(&x), ST_ERR_USAGE);
    assert_true(said(&op, &x, ST_ERR_USAGE, "rank 2 sent 0 B", NULL));
    x = done_xfer(0, 400, ST_ERR_TRUNCATED, 800, coll);
    assert_int_equal(st_rail_test(&x), ST_ERR_USAGE);
    assert_true(said(&op, &x, ST_ERR_USAGE, "rank 2 sent 800 B", NULL));
    x = done_xfer(0, 400, ST_ERR_TRUNCATED, 0, p2p);
    assert_int_equal(st_rail_test(&x), ST_ERR_USAGE);
    assert_true(said(&op, &x, ST_ERR_USAGE, "rank 2 sent more than 400 B",
                     "the send and receive counts differ", NULL));
    /* a send's length is not checked (the transport reports the receiver's side) */
    x = done_xfer(1, 400, ST_OK, 0, coll);
    assert_int_equal(st_rail_test(&x), ST_OK);

    /* cancelled (the communicator is failing) and a peer's failure: remote errors, said with the
     * direction and the transport's words */
    x = done_xfer(1, 400, ST_ERR_CANCELED, 0, coll);
    assert_int_equal(st_rail_test(&x), ST_ERR_REMOTE);
    assert_true(said(&op, &x, ST_ERR_REMOTE, "step 2/6: send to rank 2 failed",
                     st_status_str(ST_ERR_CANCELED), NULL));
    x = done_xfer(0, 400, ST_ERR_REMOTE, 0, coll);
    assert_int_equal(st_rail_test(&x), ST_ERR_REMOTE);
    assert_true(said(&op, &x, ST_ERR_REMOTE, "receive from rank 2 failed", NULL));
    x = done_xfer(0, 400, ST_ERR_IO, 0, coll);
    assert_int_equal(st_rail_test(&x), ST_ERR_IO);

    /* a step of two: nothing is taken while one is in flight; then the first failure */
    {
        st_rail_xfer_t step[2] = {done_xfer(0, 400, ST_OK, 400, coll),
                                  done_xfer(1, 400, ST_ERR_REMOTE, 0, coll)};
        st_request_t  *reqs[2];
        int            at = -1;

        step[1].req.done = 0;
        assert_int_equal(st_rail_test_all(step, 2, &at), ST_INPROGRESS);
        assert_int_equal(at, 1);
        assert_true(step[0].posted); /* the finished receive is not taken alone */
        assert_int_equal(st_rail_reqs(step, 2, reqs), 2);
        step[1].req.done = 1;
        assert_int_equal(st_rail_test_all(step, 2, &at), ST_ERR_REMOTE);
        assert_int_equal(at, 1);
        assert_int_equal(st_rail_reqs(step, 2, NULL), 0);
    }
    free(comm);
}

int main(void)
{
    /* ranks are threads here, and their nodes' links must stay on lo */
    setenv("STRATA_SOCKET_IFNAME", "lo", 0);
#ifdef HAVE_VERBS
    /* the verbs transport runs on the in-process stand-in (mock_ibv.c): two HCAs */
    st_verbs_ibv_override(mock_ibv_table(2, 0));
#endif
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_fake_net_fake_window),
        cmocka_unit_test(test_builtin_net_fake_window),
        cmocka_unit_test(test_fake_net_builtin_window),
        cmocka_unit_test(test_builtin_pairs),
        cmocka_unit_test(test_rail_outcomes),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
