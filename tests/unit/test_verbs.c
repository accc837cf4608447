/*
 * test_verbs.c - the verbs transport (transports/verbs) through its st_net_ops_t, on mock_ibv.c:
 * two or three contexts opened in this one thread (ranks 0, 1, 2) form the fabric, their
 * out-of-band handshakes run over loopback TCP, and a progress loop drives them all.
 *
 * Covered: STRATA_IB_HCA's syntax, the rail list and port selection (DOWN ports, exclusion), the
 * QP transitions the connection makes (masks, random PSNs, several QPs per connection), messages
 * byte for byte in both posting orders and at the bounce and zero-copy part boundaries, per-tag
 * FIFO order, a rank's connection to itself, truncation, the any-source receive, zero-copy
 * registrations and their removal through memreg's listener, work completion and registration
 * failures and what they say, cancel, the blocking wait's event fd, teardown without leaks (every
 * test closes its world and checks the mock's live objects and the process's fds) and the
 * library loader's message when libibverbs is missing (in a child: the loader runs once).
 */
#include "config.h"

#include <stdarg.h>
#include <stddef.h>
#include <setjmp.h>
#include <stdint.h>
#include <cmocka.h>

#include <dirent.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "base/log.h"
#include "base/memreg.h"
#include "base/param.h"
#include "base/sys.h"
#include "tests/unit/mock_ibv.h"
#include "transports/transport.h"
#include "transports/verbs/verbs.h"

extern const st_net_ops_t st_verbs_net;

#define MAXR   6
#define WAIT_S 5.0 /* longest a test waits for anything: then it fails, naming what is pending */

static const st_net_ops_t *const ops = &st_verbs_net;
static st_verbs_config_t         config_saved; /* the parsed defaults, restored before each test */

typedef struct world {
    int              n;
    st_net_ctx_t    *ctx[MAXR];
    st_net_ep_t     *ep[MAXR][MAXR]; /* ep[i][j]: rank i's endpoint to rank j, NULL: none */
    st_vb_addr_t     addr[MAXR];
    mock_ibv_stats_t start;          /* before open: what closing everything returns to */
    int              fds;
} world_t;

/* ---- helpers --------------------------------------------------------------------------------- */

static int count_fds(void)
{
    DIR           *d = opendir("/proc/self/fd");
    struct dirent *e;
    int            n = 0;

    assert_non_null(d);
    while ((e = readdir(d)) != NULL) {
        n += (e->d_name[0] != '.');
    }
    closedir(d);
    return n - 1; /* the directory's own fd */
}

/* Byte i of message `seed`: depends on i's higher bits too, so a part landing at the wrong
 * offset (a multiple of 4 KiB) shows. */
static uint8_t pat(unsigned seed, size_t i)
{
    return (uint8_t)(seed * 31u + i * 7u + (i >> 8) * 13u + (i >> 16) * 5u);
}

static void fill(uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        p[i] = pat(seed, i);
    }
}

/* The first index where p differs from message seed, or -1. */
static long diff_at(const uint8_t *p, size_t len, unsigned seed)
{
    for (size_t i = 0; i < len; i++) {
        if (p[i] != pat(seed, i)) {
            return (long)i;
        }
    }
    return -1;
}

static void progress_all(world_t *w, int rounds)
{
    for (int k = 0; k < rounds; k++) {
        for (int r = 0; r < w->n; r++) {
            (void)ops->progress(w->ctx[r]);
        }
    }
}

/* Progresses every context until every request of reqs is done; fails the test after WAIT_S. */
static void wait_reqs(world_t *w, st_request_t **reqs, int n)
{
    double deadline = st_time_now() + WAIT_S;

    for (;;) {
        int pending = 0;

        for (int i = 0; i < n; i++) {
            pending += !__atomic_load_n(&reqs[i]->done, __ATOMIC_ACQUIRE);
        }
        if (pending == 0) {
            return;
        }
        if (st_time_now() > deadline) {
            fail_msg("%d of %d requests still pending after %g s", pending, n, WAIT_S);
        }
        progress_all(w, 1);
    }
}

#define WAIT(_w, ...)                                                                            \
    wait_reqs((_w), (st_request_t *[]){__VA_ARGS__},                                             \
              (int)(sizeof((st_request_t *[]){__VA_ARGS__}) / sizeof(st_request_t *)))

static void world_open(world_t *w, int n)
{
    memset(w, 0, sizeof(*w));
    w->n     = n;
    w->start = mock_ibv_stats();
    w->fds   = count_fds();
    for (int r = 0; r < n; r++) {
        st_net_config_t cfg = {.rank = r, .nranks = n};
        size_t          len = sizeof(w->addr[r]);

        snprintf(cfg.name, sizeof(cfg.name), "tv%d", r);
        assert_int_equal(ops->open(&cfg, &w->ctx[r]), ST_OK);
        assert_int_equal(ops->address(w->ctx[r], ST_NET_ADDR_NET_ONLY, &w->addr[r], &len),
                         ST_OK);
        assert_int_equal(len, sizeof(st_vb_addr_t));
    }
}

static void world_connect_one(world_t *w, int i, int j)
{
    assert_int_equal(ops->connect(w->ctx[i], j, &w->addr[j], sizeof(w->addr[j]),
                                  ST_NET_CONNECT_REMOTE, &w->ep[i][j]), ST_OK);
}

/* Progresses until every endpoint finished its handshake. */
static void world_wait_ready(world_t *w)
{
    double deadline = st_time_now() + WAIT_S;

    for (;;) {
        int waiting = 0;

        for (int i = 0; i < w->n; i++) {
            for (int j = 0; j < w->n; j++) {
                if (w->ep[i][j] != NULL) {
                    assert_int_not_equal(w->ep[i][j]->state, ST_VB_EP_FAILED);
                    waiting += (w->ep[i][j]->state != ST_VB_EP_READY);
                }
            }
        }
        if (waiting == 0) {
            return;
        }
        if (st_time_now() > deadline) {
            fail_msg("%d endpoints still handshaking after %g s", waiting, WAIT_S);
        }
        progress_all(w, 1);
    }
}

/* Every pair both ways (the lower rank initiates the TCP handshake), and self when asked. */
static void world_connect(world_t *w, int self)
{
    for (int i = 0; i < w->n; i++) {
        for (int j = 0; j < w->n; j++) {
            if (i != j || self) {
                world_connect_one(w, i, j);
            }
        }
    }
    world_wait_ready(w);
}

static void world_up(world_t *w, int n)
{
    world_open(w, n);
    world_connect(w, 0);
}

/* Disconnects everything, closes the contexts and checks that nothing leaked: the mock's live
 * QPs, MRs, CQs, PDs and device contexts and the process's fds are back where they were. */
static void world_close(world_t *w, int force, double timeout)
{
    mock_ibv_stats_t s;

    for (int i = 0; i < w->n; i++) {
        for (int j = 0; j < w->n; j++) {
            if (w->ep[i][j] != NULL) {
                ops->disconnect(w->ep[i][j], force, timeout);
                w->ep[i][j] = NULL;
            }
        }
    }
    for (int r = 0; r < w->n; r++) {
        ops->close(w->ctx[r]);
        w->ctx[r] = NULL;
    }
    s = mock_ibv_stats();
    assert_int_equal(s.qps_live, w->start.qps_live);
    assert_int_equal(s.mrs_live, w->start.mrs_live);
    assert_int_equal(s.cqs_live, w->start.cqs_live);
    assert_int_equal(s.pds_live, w->start.pds_live);
    assert_int_equal(s.ctxs_live, w->start.ctxs_live);
    assert_int_equal(count_fds(), w->fds);
}

/* Sends len bytes from rank a to rank b into a receive buffer of cap bytes, the receive posted
 * first or the send posted and progressed first, and checks the bytes, both lengths and that
 * nothing past the message was written. */
static void xfer(world_t *w, int a, int b, size_t len, size_t cap, uint64_t tag, int recv_first,
                 unsigned seed)
{
    uint8_t     *src = malloc(len + 1), *dst = malloc(cap + 1);
    st_request_t rs, rr;

    assert_non_null(src);
    assert_non_null(dst);
    fill(src, len, seed);
    memset(dst, 0xa5, cap + 1);
    if (recv_first) {
        assert_int_equal(ops->irecv(w->ep[b][a], dst, cap, tag, NULL, &rr), ST_OK);
        progress_all(w, 3);
        assert_int_equal(ops->isend(w->ep[a][b], src, len, tag, NULL, &rs), ST_OK);
    } else {
        assert_int_equal(ops->isend(w->ep[a][b], src, len, tag, NULL, &rs), ST_OK);
        progress_all(w, 3);
        assert_false(rs.done); /* receiver-driven: nothing moves before the receive's CTS */
        assert_int_equal(ops->irecv(w->ep[b][a], dst, cap, tag, NULL, &rr), ST_OK);
    }
    WAIT(w, &rs, &rr);
    assert_int_equal(rs.status, ST_OK);
    assert_int_equal(rr.status, ST_OK);
    assert_int_equal(rr.len, len);
    if (diff_at(dst, len, seed) >= 0) {
        fail_msg("%zu B from %d to %d (buffer %zu, %s first): byte %ld differs", len, a, b, cap,
                 recv_first ? "receive" : "send", diff_at(dst, len, seed));
    }
    for (size_t i = len; i <= cap; i++) {
        if (dst[i] != 0xa5) {
            fail_msg("%zu B into %zu: byte %zu past the message was written", len, cap, i);
        }
    }
    free(src);
    free(dst);
}

/* Runs the verbs log at INFO into a temporary file instead of stderr, to read what it said. */
typedef struct capture {
    FILE    *tmp;
    int      saved_fd;
    int      level;
    uint32_t mask;
} capture_t;

static void capture_begin(capture_t *c)
{
    fflush(stderr);
    c->tmp = tmpfile();
    assert_non_null(c->tmp);
    c->saved_fd = dup(2);
    assert_true(c->saved_fd >= 0);
    assert_true(dup2(fileno(c->tmp), 2) == 2);
    c->level     = st_log_level;
    c->mask      = st_log_mask;
    st_log_level = ST_LOG_INFO;
    st_log_mask |= ST_SUB_VERBS;
}

static void capture_end(capture_t *c, char *buf, size_t len)
{
    size_t n;

    fflush(stderr);
    dup2(c->saved_fd, 2);
    close(c->saved_fd);
    st_log_level = c->level;
    st_log_mask  = c->mask;
    rewind(c->tmp);
    n = fread(buf, 1, len - 1, c->tmp);
    buf[n] = '\0';
    fclose(c->tmp);
}

/* Before each test: the mock's two active HCAs, no fault armed, the parsed parameters. */
static int setup(void **state)
{
    st_verbs_ibv_override(mock_ibv_table(2, 0));
    mock_ibv_fail_nth(0, IBV_WC_SUCCESS);
    mock_ibv_reg_fail_nth(0);
    st_verbs_config = config_saved;
    st_verbs_config.bounce_size = 8192; /* small parts: multi-part messages stay small */
    st_log_clear_error();
    return 0;
}

/* ---- 1. STRATA_IB_HCA's syntax ------------------------------------------------------------- */

static void test_hca_match(void **state)
{
    /* a prefix matches every device it starts */
    assert_true(st_vb_hca_match("mlx5", "mlx5_0", 1));
    assert_true(st_vb_hca_match("mlx5", "mlx5_1", 1));
    assert_false(st_vb_hca_match("mlx5", "mlx4_0", 1));
    /* '=': exact names only */
    assert_true(st_vb_hca_match("=mlx5_0", "mlx5_0", 1));
    assert_false(st_vb_hca_match("=mlx5_0", "mlx5_01", 1));
    assert_true(st_vb_hca_match("mlx5_0", "mlx5_01", 1)); /* ...which a prefix does take */
    /* '^': exclusion, of prefixes (mlx5_1*) or, with '=', of exact names */
    assert_false(st_vb_hca_match("^mlx5_1", "mlx5_1", 1));
    assert_false(st_vb_hca_match("^mlx5_1", "mlx5_10", 1));
    assert_true(st_vb_hca_match("^mlx5_1", "mlx5_0", 1));
    assert_true(st_vb_hca_match("^mlx5_1", "mlx5_2", 2));
    assert_true(st_vb_hca_match("^=mlx5_1", "mlx5_10", 1));
    assert_false(st_vb_hca_match("^=mlx5_1", "mlx5_1", 1));
    /* ':port' limits the entry to that port */
    assert_true(st_vb_hca_match("mlx5_0:2", "mlx5_0", 2));
    assert_false(st_vb_hca_match("mlx5_0:2", "mlx5_0", 1));
    assert_false(st_vb_hca_match("mlx5_0:2", "mlx5_1", 2));
    assert_false(st_vb_hca_match("^mlx5_0:2", "mlx5_0", 2));
    assert_true(st_vb_hca_match("^mlx5_0:2", "mlx5_0", 1));
    /* empty or unset: everything */
    assert_true(st_vb_hca_match("", "mlx5_0", 1));
    assert_true(st_vb_hca_match(NULL, "anything", 7));
    /* lists */
    assert_true(st_vb_hca_match("mlx5_0,mlx5_2", "mlx5_0", 1));
    assert_true(st_vb_hca_match("mlx5_0,mlx5_2", "mlx5_2", 1));
    assert_false(st_vb_hca_match("mlx5_0,mlx5_2", "mlx5_1", 1));
    assert_true(st_vb_hca_match("=mlx5_0:1,mlx5_2:2", "mlx5_2", 2));
    assert_false(st_vb_hca_match("=mlx5_0:1,mlx5_2:2", "mlx5_2", 1));
    assert_false(st_vb_hca_match("=mlx5_0,mlx5_2", "mlx5_20", 1));
    assert_false(st_vb_hca_match("^mlx5_0,mlx5_2", "mlx5_2", 1));
    assert_true(st_vb_hca_match("^mlx5_0,mlx5_2", "mlx5_1", 1));
}

/* ---- 2. rail devices and port selection ----------------------------------------------------- */

static void test_rail_devices(void **state)
{
    char            buf[256], log[4096], desc[256];
    capture_t       cap;
    st_net_ctx_t   *ctx = NULL;
    st_net_config_t cfg = {.rank = 0, .nranks = 1, .name = "rail"};
    st_vb_addr_t    addr;
    size_t          len = 4;
    mock_ibv_stats_t start = mock_ibv_stats();

    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_OK);
    assert_string_equal(buf, "=mock0:1,=mock1:1");

    /* a rail opens one entry of that list: the context then is on that HCA */
    cfg.devices = "=mock1:1";
    assert_int_equal(ops->open(&cfg, &ctx), ST_OK);
    ops->describe(ctx, desc, sizeof(desc));
    assert_non_null(strstr(desc, "mock1:1"));
    /* an address buffer too small: ST_ERR_INVALID and the size needed */
    assert_int_equal(ops->address(ctx, ST_NET_ADDR_ALL, &addr, &len), ST_ERR_INVALID);
    assert_int_equal(len, sizeof(st_vb_addr_t));
    ops->close(ctx);

    /* mock1's port DOWN: only mock0 */
    st_verbs_ibv_override(mock_ibv_table(2, 2));
    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_OK);
    assert_string_equal(buf, "=mock0:1");

    /* a device that is no InfiniBand/RoCE HCA (EFA, iWARP: no RC with immediate) is passed
     * over, so STRATA_NET=auto leaves such a host to UCX */
    st_verbs_ibv_override(mock_ibv_table(2, 0));
    mock_ibv_set_transport(0, IBV_TRANSPORT_UNSPECIFIED);
    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_OK);
    assert_string_equal(buf, "=mock1:1");
    mock_ibv_set_transport(1, IBV_TRANSPORT_IWARP);
    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_ERR_NO_DEVICE);
    capture_begin(&cap);
    ctx = NULL;
    assert_int_equal(ops->open(&cfg, &ctx), ST_ERR_NO_DEVICE);
    capture_end(&cap, log, sizeof(log));
    assert_null(ctx);
    assert_non_null(strstr(log, "mock0 is no InfiniBand/RoCE HCA"));
    assert_non_null(strstr(log, "mock1 is no InfiniBand/RoCE HCA"));

    /* STRATA_IB_HCA excludes mock0 */
    st_verbs_ibv_override(mock_ibv_table(2, 0));
    st_verbs_config.hca = (char *)"^mock0";
    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_OK);
    assert_string_equal(buf, "=mock1:1");
    cfg.devices = NULL;
    assert_int_equal(ops->open(&cfg, &ctx), ST_OK);
    ops->describe(ctx, desc, sizeof(desc));
    assert_non_null(strstr(desc, "mock1:1"));
    assert_non_null(strstr(desc, "^mock0"));
    ops->close(ctx);
    st_verbs_config.hca = config_saved.hca;

    /* every port DOWN: no device, and open stands aside saying why at INFO */
    st_verbs_ibv_override(mock_ibv_table(2, 3));
    assert_int_equal(ops->rail_devices(buf, sizeof(buf)), ST_ERR_NO_DEVICE);
    capture_begin(&cap);
    ctx = NULL;
    assert_int_equal(ops->open(&cfg, &ctx), ST_ERR_NO_DEVICE);
    capture_end(&cap, log, sizeof(log));
    assert_null(ctx);
    assert_non_null(strstr(log, "INFO"));
    assert_non_null(strstr(log, "mock0:1 is DOWN"));
    assert_non_null(strstr(log, "mock1:1 is DOWN"));
    /* what the port survey and the two contexts opened, they closed */
    assert_int_equal(mock_ibv_stats().ctxs_live, start.ctxs_live);
    assert_int_equal(mock_ibv_stats().pds_live, start.pds_live);
}

/* ---- 3. connections: transitions, PSNs, several QPs --------------------------------------- */

static void check_connection(int n, int qps_per_conn)
{
    world_t          w;
    mock_ibv_stats_t before, after;
    const int        nqps = n * (n - 1) * qps_per_conn;
    uint32_t         psn0 = 0;
    int              distinct = 0;

    st_verbs_config.qps_per_conn = (unsigned)qps_per_conn;
    world_open(&w, n);
    before = mock_ibv_stats();
    world_connect(&w, 0);
    after = mock_ibv_stats();
    assert_int_equal(after.qps_live - before.qps_live, nqps);
    assert_int_equal(after.modify[0] - before.modify[0], nqps); /* INIT */
    assert_int_equal(after.modify[1] - before.modify[1], nqps); /* RTR */
    assert_int_equal(after.modify[2] - before.modify[2], nqps); /* RTS */
    assert_int_equal(after.modify[3] - before.modify[3], 0);    /* none to ERR */
    assert_int_equal(after.bad_masks - before.bad_masks, 0);
    assert_true(after.rtr_psn_zero - before.rtr_psn_zero < nqps);
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            if (i == j) {
                continue;
            }
            assert_int_equal(w.ep[i][j]->nqps, qps_per_conn);
            for (int q = 0; q < qps_per_conn; q++) {
                assert_true(w.ep[i][j]->psn[q] <= 0xffffff);
                distinct += (w.ep[i][j]->psn[q] != psn0);
                psn0 = w.ep[i][j]->psn[q];
            }
        }
    }
    assert_true(distinct > 1); /* random per QP, not one constant */
    /* messages over every pair, long enough to stripe their parts over the QPs */
    for (int i = 0; i < n; i++) {
        for (int j = 0; j < n; j++) {
            if (i != j) {
                xfer(&w, i, j, 5 * 8192 + 3, 5 * 8192 + 3, 7, (i + j) & 1, (unsigned)(i * 3 + j));
            }
        }
    }
    /* a CQ takes 32 QPs (verbs_dev.c): more peers get more CQs, all polled and armed */
    for (int i = 0; i < n; i++) {
        assert_int_equal(w.ctx[i]->ncqs, ST_DIV_ROUND_UP((n - 1) * qps_per_conn, 32));
    }
    world_close(&w, 0, 1.0);
}

static void test_connection(void **state)
{
    check_connection(3, 1);
}

/* 6 ranks x 8 QPs per connection: 40 QPs per context, two CQs each */
/* A plain-memory send into a zero-copy receive writes each 1 MiB part in 256 pieces of 4 KiB:
 * more than the send queue holds. Data must leave QP 0 room for control messages, so that a
 * receive posted in the other direction meanwhile still sends its CTS (and both complete). */
static void test_sq_reserve(void **state)
{
    const size_t big = 2u << 20;
    world_t      w;
    uint8_t     *src = malloc(big), *zdst = aligned_alloc(4096, big), *back = malloc(64);
    uint8_t      msg[64];
    st_request_t rs, rr, rs2, rr2;

    st_verbs_config.bounce_size = 4096;
    st_verbs_config.zc_part     = 1u << 20;
    world_up(&w, 2);
    assert_true(src != NULL && zdst != NULL && back != NULL);
    st_memreg_add(zdst, big);
    fill(src, big, 91);
    fill(msg, sizeof(msg), 92);
    assert_int_equal(ops->irecv(w.ep[1][0], zdst, big, 9, NULL, &rr), ST_OK);
    assert_int_equal(ops->isend(w.ep[0][1], src, big, 9, NULL, &rs), ST_OK);
    /* rank 0 takes the CTSs (the parts fill its QP 0), then posts a receive from rank 1 */
    ops->progress(w.ctx[1]);
    ops->progress(w.ctx[0]);
    assert_int_equal(ops->irecv(w.ep[0][1], back, sizeof(msg), 10, NULL, &rr2), ST_OK);
    assert_int_equal(ops->isend(w.ep[1][0], msg, sizeof(msg), 10, NULL, &rs2), ST_OK);
    WAIT(&w, &rs, &rr, &rs2, &rr2);
    assert_int_equal(rs.status, ST_OK);
    assert_int_equal(rr.status, ST_OK);
    assert_int_equal(rr.len, big);
    assert_int_equal(rs2.status, ST_OK);
    assert_int_equal(rr2.status, ST_OK);
    assert_int_equal(diff_at(zdst, big, 91), -1);
    assert_int_equal(diff_at(back, sizeof(msg), 92), -1);
    world_close(&w, 0, 1.0);
    st_memreg_del(zdst);
    free(src);
    free(zdst);
    free(back);
}

static void test_connection_two_cqs(void **state)
{
    check_connection(6, 8);
    st_verbs_config.qps_per_conn = 1;
}

static void test_connection_two_qps(void **state)
{
    mock_ibv_stats_t before = mock_ibv_stats(), after;

    check_connection(3, 2);
    st_verbs_config.qps_per_conn = 1;
    after = mock_ibv_stats();
    /* every part of the six 6-part messages arrived as a write with immediate, striped over
     * the two QPs of its connection (the mock refuses a write whose PSN does not follow) */
    assert_true(after.writes_imm - before.writes_imm >= 6 * 6);
    assert_int_equal(after.rnr - before.rnr, 0);
}

/* ---- 4. send/recv byte for byte ------------------------------------------------------------- */

static void test_sizes(void **state)
{
    const size_t b = 8192;
    const size_t sizes[] = {0, 1, 4095, b - 1, b, b + 1, 3 * b + 17, 9 * b + 5};
    world_t      w;
    unsigned     seed = 1;

    world_up(&w, 2);
    for (int order = 0; order < 2; order++) {
        for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]); k++) {
            xfer(&w, 0, 1, sizes[k], sizes[k], 3, order, seed++);
            xfer(&w, 1, 0, sizes[k], sizes[k], 3, !order, seed++);
        }
    }
    /* a receive buffer larger than the message: len is the bytes sent */
    xfer(&w, 0, 1, 5000, 3 * b, 4, 1, seed++);
    xfer(&w, 0, 1, b + 1, 4 * b, 4, 0, seed++);
    xfer(&w, 1, 0, 0, 100, 4, 1, seed++);
    world_close(&w, 0, 1.0);
}

/* Messages of two tags interleaved: each receive gets the oldest send of its tag (MPI's
 * non-overtaking order), whatever the interleaving of the receives and of the sends. */
static void test_tag_order(void **state)
{
    enum { NMSG = 8 };
    static const uint64_t tags[NMSG] = {10, 11, 11, 10, 10, 11, 10, 11}; /* send order */
    static const uint64_t rtags[NMSG] = {11, 10, 11, 11, 10, 10, 11, 10}; /* receive order */
    world_t               w;
    uint8_t              *src[NMSG], *dst[NMSG];
    size_t                len[NMSG];
    st_request_t          rs[NMSG], rr[NMSG];
    int                   sent_of[2][NMSG], nsent[2] = {0, 0}, nrecv[2] = {0, 0};

    world_up(&w, 2);
    for (int i = 0; i < NMSG; i++) {
        len[i] = 700 + (size_t)i * 6000; /* 1 to 7 parts */
        src[i] = malloc(len[i]);
        dst[i] = malloc(48 * 1024);
        fill(src[i], len[i], 100u + (unsigned)i);
        sent_of[tags[i] - 10][nsent[tags[i] - 10]++] = i;
    }
    /* half the receives first, then every send, then the other half */
    for (int i = 0; i < NMSG / 2; i++) {
        assert_int_equal(ops->irecv(w.ep[1][0], dst[i], 48 * 1024, rtags[i], NULL, &rr[i]),
                         ST_OK);
    }
    progress_all(&w, 2);
    for (int i = 0; i < NMSG; i++) {
        assert_int_equal(ops->isend(w.ep[0][1], src[i], len[i], tags[i], NULL, &rs[i]), ST_OK);
        progress_all(&w, 1);
    }
    for (int i = NMSG / 2; i < NMSG; i++) {
        assert_int_equal(ops->irecv(w.ep[1][0], dst[i], 48 * 1024, rtags[i], NULL, &rr[i]),
                         ST_OK);
    }
    for (int i = 0; i < NMSG; i++) {
        WAIT(&w, &rs[i], &rr[i]);
    }
    for (int i = 0; i < NMSG; i++) {
        int t = (int)rtags[i] - 10, m = sent_of[t][nrecv[t]++];

        assert_int_equal(rs[i].status, ST_OK);
        assert_int_equal(rr[i].status, ST_OK);
        assert_int_equal(rr[i].len, len[m]);
        assert_int_equal(diff_at(dst[i], len[m], 100u + (unsigned)m), -1);
    }
    for (int i = 0; i < NMSG; i++) {
        free(src[i]);
        free(dst[i]);
    }
    world_close(&w, 0, 1.0);
}

static void test_self(void **state)
{
    world_t          w;
    mock_ibv_stats_t before;

    world_open(&w, 2);
    before = mock_ibv_stats();
    world_connect(&w, 1);
    /* a rank's own endpoint is its QPs connected to themselves: no handshake, ready at once */
    assert_int_equal(mock_ibv_stats().qps_live - before.qps_live, 4);
    xfer(&w, 0, 0, 3 * 8192 + 17, 3 * 8192 + 17, 9, 1, 41);
    xfer(&w, 0, 0, 3 * 8192 + 17, 4 * 8192, 9, 0, 42);
    xfer(&w, 1, 1, 1, 1, 9, 0, 43);
    xfer(&w, 1, 0, 100, 100, 9, 1, 44); /* and the others still work beside it */
    world_close(&w, 0, 1.0);
}

/* ---- 5. truncation --------------------------------------------------------------------------- */

static void test_truncation(void **state)
{
    world_t      w;
    uint8_t      src[100], dst[100];
    st_request_t rs, rr;

    world_up(&w, 2);
    fill(src, sizeof(src), 5);
    memset(dst, 0xa5, sizeof(dst));
    assert_int_equal(ops->irecv(w.ep[1][0], dst, 50, 1, NULL, &rr), ST_OK);
    assert_int_equal(ops->isend(w.ep[0][1], src, 100, 1, NULL, &rs), ST_OK);
    WAIT(&w, &rs, &rr);
    assert_int_equal(rs.status, ST_ERR_TRUNCATED);
    assert_int_equal(rr.status, ST_ERR_TRUNCATED);
    assert_int_equal(rr.len, 100);
    for (size_t i = 50; i < sizeof(dst); i++) {
        assert_int_equal(dst[i], 0xa5);
    }
    /* the connection goes on: the same tag, then a multi-part message */
    xfer(&w, 0, 1, 50, 50, 1, 1, 6);
    xfer(&w, 0, 1, 3 * 8192, 3 * 8192, 1, 0, 7);
    /* truncated in a later part's range: a multi-part send into a smaller multi-part receive */
    {
        uint8_t *big = malloc(4 * 8192), *small = malloc(2 * 8192);

        fill(big, 4 * 8192, 8);
        assert_int_equal(ops->isend(w.ep[0][1], big, 4 * 8192, 2, NULL, &rs), ST_OK);
        assert_int_equal(ops->irecv(w.ep[1][0], small, 2 * 8192, 2, NULL, &rr), ST_OK);
        WAIT(&w, &rs, &rr);
        assert_int_equal(rs.status, ST_ERR_TRUNCATED);
        assert_int_equal(rr.status, ST_ERR_TRUNCATED);
        assert_int_equal(rr.len, 4 * 8192);
        free(big);
        free(small);
    }
    xfer(&w, 1, 0, 8193, 8193, 2, 1, 9);
    world_close(&w, 0, 1.0);
}

/* ---- 6. any-source receive ------------------------------------------------------------------ */

static void test_any_source(void **state)
{
    static const char m1[] = "from rank 1", m2[] = "rank 2 sends this";
    const uint64_t    tag = 0x5a;
    world_t           w;
    char              buf[64];
    uint8_t           big[5000];
    st_request_t      ra, s1, s2;
    int               first;

    world_up(&w, 3);
    memset(buf, 0, sizeof(buf));
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, sizeof(buf), tag, &ra), ST_OK);
    assert_int_equal(ops->isend(w.ep[1][0], m1, sizeof(m1), tag, NULL, &s1), ST_OK);
    assert_int_equal(ops->isend(w.ep[2][0], m2, sizeof(m2), tag, NULL, &s2), ST_OK);
    WAIT(&w, &ra);
    assert_int_equal(ra.status, ST_OK);
    first = (ra.len == sizeof(m1) && memcmp(buf, m1, sizeof(m1)) == 0)   ? 1
            : (ra.len == sizeof(m2) && memcmp(buf, m2, sizeof(m2)) == 0) ? 2 : 0;
    assert_int_not_equal(first, 0);
    /* the next one takes the other peer's message */
    memset(buf, 0, sizeof(buf));
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, sizeof(buf), tag, &ra), ST_OK);
    WAIT(&w, &ra, &s1, &s2);
    assert_int_equal(ra.status, ST_OK);
    if (first == 1) {
        assert_int_equal(ra.len, sizeof(m2));
        assert_memory_equal(buf, m2, sizeof(m2));
    } else {
        assert_int_equal(ra.len, sizeof(m1));
        assert_memory_equal(buf, m1, sizeof(m1));
    }
    assert_int_equal(s1.status, ST_OK);
    assert_int_equal(s2.status, ST_OK);

    /* longer than the receive's buffer (but within the any-source slot): truncated, with the
     * length sent; the sender's bytes all went, so its request succeeds */
    fill(big, sizeof(big), 3);
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, 16, tag, &ra), ST_OK);
    assert_int_equal(ops->isend(w.ep[1][0], big, 100, tag, NULL, &s1), ST_OK);
    WAIT(&w, &ra, &s1);
    assert_int_equal(ra.status, ST_ERR_TRUNCATED);
    assert_int_equal(ra.len, 100);
    assert_int_equal(s1.status, ST_OK);
    /* longer than the any-source slot itself: both sides truncated */
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, sizeof(buf), tag, &ra), ST_OK);
    assert_int_equal(ops->isend(w.ep[2][0], big, sizeof(big), tag, NULL, &s2), ST_OK);
    WAIT(&w, &ra, &s2);
    assert_int_equal(ra.status, ST_ERR_TRUNCATED);
    assert_int_equal(ra.len, sizeof(big));
    assert_int_equal(s2.status, ST_ERR_TRUNCATED);

    /* cancel of a pending one */
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, sizeof(buf), tag, &ra), ST_OK);
    progress_all(&w, 2);
    assert_false(ra.done);
    ops->cancel(w.ctx[0], &ra, 0);
    WAIT(&w, &ra);
    assert_int_equal(ra.status, ST_ERR_CANCELED);
    /* and a later one still receives */
    memset(buf, 0, sizeof(buf));
    assert_int_equal(ops->irecv_any(w.ctx[0], buf, sizeof(buf), tag, &ra), ST_OK);
    assert_int_equal(ops->isend(w.ep[2][0], m2, sizeof(m2), tag, NULL, &s2), ST_OK);
    WAIT(&w, &ra, &s2);
    assert_int_equal(ra.status, ST_OK);
    assert_int_equal(ra.len, sizeof(m2));
    assert_memory_equal(buf, m2, sizeof(m2));
    world_close(&w, 0, 1.0);
}

/* ---- 7. zero-copy ---------------------------------------------------------------------------- */

static void test_zero_copy(void **state)
{
    const size_t     size = 128 * 1024, zc = 16384;
    world_t          w;
    uint8_t         *zsrc, *zdst, *psrc, *pdst;
    st_request_t     rs, rr;
    mock_ibv_stats_t base, s;
    /* lengths: within a part, a part and a bit, several parts with a short last one */
    const size_t     lens[] = {1, 10000, zc, zc + 5000, 3 * zc + 5000, size};
    const size_t     nlens = sizeof(lens) / sizeof(lens[0]);

    st_verbs_config.bounce_size = 4096;
    st_verbs_config.zc_part     = zc;
    world_up(&w, 2);
    zsrc = aligned_alloc(4096, size);
    zdst = aligned_alloc(4096, size);
    psrc = malloc(size);
    pdst = malloc(size);
    assert_true(zsrc != NULL && zdst != NULL && psrc != NULL && pdst != NULL);
    st_memreg_add(zsrc, size);
    st_memreg_add(zdst, size);
    base = mock_ibv_stats();

    /* zero-copy on both sides: written in place, no bounce buffer anywhere */
    for (size_t k = 0; k < nlens; k++) {
        fill(zsrc, lens[k], 60u + (unsigned)k);
        memset(zdst, 0, size);
        assert_int_equal(ops->irecv(w.ep[1][0], zdst, size, 5, NULL, &rr), ST_OK);
        assert_int_equal(ops->isend(w.ep[0][1], zsrc, lens[k], 5, NULL, &rs), ST_OK);
        WAIT(&w, &rs, &rr);
        assert_int_equal(rs.status, ST_OK);
        assert_int_equal(rr.status, ST_OK);
        assert_int_equal(rr.len, lens[k]);
        assert_int_equal(diff_at(zdst, lens[k], 60u + (unsigned)k), -1);
        assert_int_equal(w.ctx[0]->nslabs, 0);
        assert_int_equal(w.ctx[1]->nslabs, 0);
        /* each buffer registered whole, once, by the context that used it */
        s = mock_ibv_stats();
        assert_int_equal(s.mrs_live - base.mrs_live, 2);
    }
    for (size_t k = 0; k < nlens; k++) {
        /* a plain sender into a zero-copy receive: bounce pieces into the receive's parts */
        fill(psrc, lens[k], 70u + (unsigned)k);
        memset(zdst, 0, size);
        assert_int_equal(ops->irecv(w.ep[1][0], zdst, size, 5, NULL, &rr), ST_OK);
        assert_int_equal(ops->isend(w.ep[0][1], psrc, lens[k], 5, NULL, &rs), ST_OK);
        WAIT(&w, &rs, &rr);
        assert_int_equal(rs.status, ST_OK);
        assert_int_equal(rr.status, ST_OK);
        if (rr.len != lens[k] || diff_at(zdst, lens[k], 70u + (unsigned)k) >= 0) {
            fail_msg("%zu B from a plain buffer into a zero-copy receive: len %zu, byte %ld "
                     "differs", lens[k], rr.len, diff_at(zdst, lens[k], 70u + (unsigned)k));
        }

        /* a zero-copy sender into a plain receive */
        fill(zsrc, lens[k], 80u + (unsigned)k);
        memset(pdst, 0, size);
        assert_int_equal(ops->isend(w.ep[0][1], zsrc, lens[k], 6, NULL, &rs), ST_OK);
        assert_int_equal(ops->irecv(w.ep[1][0], pdst, size, 6, NULL, &rr), ST_OK);
        WAIT(&w, &rs, &rr);
        assert_int_equal(rs.status, ST_OK);
        assert_int_equal(rr.status, ST_OK);
        assert_int_equal(rr.len, lens[k]);
        assert_int_equal(diff_at(pdst, lens[k], 80u + (unsigned)k), -1);
    }
    s = mock_ibv_stats();
    assert_int_equal(s.mrs_live - base.mrs_live, 2 + w.ctx[0]->nslabs + w.ctx[1]->nslabs);
    /* strataMemFree's path: memreg's listener drops both registrations before the memory goes */
    st_memreg_del(zsrc);
    st_memreg_del(zdst);
    s = mock_ibv_stats();
    assert_int_equal(s.mrs_live - base.mrs_live, w.ctx[0]->nslabs + w.ctx[1]->nslabs);
    assert_null(w.ctx[0]->regs);
    assert_null(w.ctx[1]->regs);
    /* the same memory, no longer recorded, still goes (through bounce buffers) */
    xfer(&w, 1, 0, 3 * zc, 3 * zc, 7, 1, 90);
    free(zsrc);
    free(zdst);
    free(psrc);
    free(pdst);
    world_close(&w, 0, 1.0);
}

/* ---- 8. faults ------------------------------------------------------------------------------ */

static void test_wc_error(void **state)
{
    world_t      w;
    uint8_t      src[1000], dst[1000];
    st_request_t rs, rr, r2;
    const char  *err;
    double       deadline;

    world_up(&w, 2);
    fill(src, sizeof(src), 11);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, sizeof(dst), 5, NULL, &rr), ST_OK);
    /* the CTS reaches rank 0 before the fault is armed: the next work request is the write */
    deadline = st_time_now() + WAIT_S;
    while (w.ep[0][1]->cts0 == NULL) {
        assert_true(st_time_now() < deadline);
        progress_all(&w, 1);
    }
    mock_ibv_fail_nth(1, IBV_WC_RETRY_EXC_ERR);
    st_log_clear_error();
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 5, NULL, &rs), ST_OK);
    WAIT(&w, &rs);
    assert_int_equal(rs.status, ST_ERR_REMOTE);
    err = st_log_last_error();
    assert_non_null(strstr(err, "rank 1"));
    assert_non_null(strstr(err, "mock0"));
    assert_non_null(strstr(err, "QP 0x"));
    assert_non_null(strstr(err, "transport retry counter exceeded"));
    assert_non_null(strstr(err, "STRATA_IB_TIMEOUT"));
    /* the failed side closed its socket: the peer's pending receive fails too */
    WAIT(&w, &rr);
    assert_int_equal(rr.status, ST_ERR_REMOTE);
    /* and later operations on either end fail at once */
    assert_int_equal(ops->isend(w.ep[0][1], src, 10, 5, NULL, &r2), ST_OK);
    assert_true(r2.done);
    assert_int_equal(r2.status, ST_ERR_REMOTE);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, 10, 5, NULL, &r2), ST_OK);
    assert_true(r2.done);
    assert_int_equal(r2.status, ST_ERR_REMOTE);
    world_close(&w, 0, 0.2);
}

static void test_reg_error(void **state)
{
    world_t      w;
    uint8_t      src[3000], dst[3000];
    st_request_t rs, rr;

    world_up(&w, 2);
    /* the first bounce slab is registered for this receive's first part: refused */
    mock_ibv_reg_fail_nth(1);
    st_log_clear_error();
    fill(src, sizeof(src), 12);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, sizeof(dst), 5, NULL, &rr), ST_OK);
    assert_non_null(strstr(st_log_last_error(), "ulimit -l"));
    assert_non_null(strstr(st_log_last_error(), "bounce buffers"));
    assert_int_equal(w.ctx[1]->nslabs, 0);
    /* with no buffer at all, none will come (a memlock limit stays): the receive fails at once
     * with the registration's line as its reason, and the peer's send with it (the 'E' frame),
     * instead of both waiting for their deadline */
    assert_true(rr.done);
    assert_int_equal(rr.status, ST_ERR_NO_MEMORY);
    assert_non_null(rr.why);
    assert_non_null(strstr(rr.why, "ulimit -l"));
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 5, NULL, &rs), ST_OK);
    WAIT(&w, &rs);
    assert_int_equal(rs.status, ST_ERR_REMOTE);
    assert_non_null(rs.why);
    assert_non_null(strstr(rs.why, "ulimit -l"));
    world_close(&w, 1, 1.0);
}

/* ---- 9. cancel ------------------------------------------------------------------------------ */

static void test_cancel(void **state)
{
    world_t      w;
    uint8_t      src[300], dst[300], early[300];
    st_request_t rs, rr, re;

    world_open(&w, 2);
    /* rank 1's endpoint first: it waits for rank 0's hello, so these receives send no CTS */
    world_connect_one(&w, 1, 0);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, sizeof(dst), 3, NULL, &rr), ST_OK);
    assert_int_equal(ops->irecv(w.ep[1][0], early, sizeof(early), 4, NULL, &re), ST_OK);
    progress_all(&w, 2);
    assert_false(rr.done);
    ops->cancel(w.ctx[1], &rr, 0);
    assert_true(rr.done);
    assert_int_equal(rr.status, ST_ERR_CANCELED);
    world_connect_one(&w, 0, 1);
    world_wait_ready(&w);

    /* the receive posted before the handshake (not cancelled) gets its message */
    fill(src, sizeof(src), 13);
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 4, NULL, &rs), ST_OK);
    WAIT(&w, &rs, &re);
    assert_int_equal(re.status, ST_OK);
    assert_int_equal(diff_at(early, sizeof(early), 13), -1);
    /* the cancelled one took nothing: tag 3's message goes to the next receive of tag 3 */
    xfer(&w, 0, 1, 300, 300, 3, 0, 14);

    /* an unmatched send: taken back at once */
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 8, NULL, &rs), ST_OK);
    progress_all(&w, 3);
    assert_false(rs.done);
    ops->cancel(w.ctx[0], &rs, 0);
    WAIT(&w, &rs);
    assert_int_equal(rs.status, ST_ERR_CANCELED);
    /* ...so the next receive of its tag waits for the next send of it */
    xfer(&w, 0, 1, 100, 300, 8, 1, 15);

    /* cancel of a completed request: harmless, its outcome stays */
    ops->cancel(w.ctx[0], &rs, 0);
    ops->cancel(w.ctx[0], &rs, 1);
    assert_int_equal(rs.status, ST_ERR_CANCELED);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, sizeof(dst), 9, NULL, &rr), ST_OK);
    assert_int_equal(ops->isend(w.ep[0][1], src, 200, 9, NULL, &rs), ST_OK);
    WAIT(&w, &rs, &rr);
    ops->cancel(w.ctx[1], &rr, 1);
    ops->cancel(w.ctx[0], &rs, 1);
    assert_int_equal(rr.status, ST_OK);
    assert_int_equal(rr.len, 200);
    assert_int_equal(rs.status, ST_OK);
    /* a forced cancel of a completed request breaks nothing */
    assert_int_equal(w.ep[0][1]->state, ST_VB_EP_READY);
    xfer(&w, 1, 0, 10, 10, 9, 1, 16);
    world_close(&w, 0, 1.0);
}

/* ---- 10. blocking wait ---------------------------------------------------------------------- */

static void test_event_fd(void **state)
{
    world_t       w;
    uint8_t       src[2000], dst[2000];
    st_request_t  rs, rr;
    struct pollfd pfd;
    st_status_t   armed = ST_INPROGRESS;
    int           fd;

    world_up(&w, 2);
    fd = ops->event_fd(w.ctx[1]);
    assert_true(fd >= 0);
    assert_int_equal(ops->irecv(w.ep[1][0], dst, sizeof(dst), 5, NULL, &rr), ST_OK);
    progress_all(&w, 5);
    /* nothing in flight on rank 1 (its CTS went; its own completion may need one more pass) */
    for (int i = 0; i < 5 && armed != ST_OK; i++) {
        armed = ops->arm(w.ctx[1]);
    }
    assert_int_equal(armed, ST_OK);
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    assert_int_equal(poll(&pfd, 1, 0), 0);

    /* the peer sends into the posted receive: only rank 0 progresses */
    fill(src, sizeof(src), 17);
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 5, NULL, &rs), ST_OK);
    for (int i = 0; i < 5 && !rs.done; i++) {
        (void)ops->progress(w.ctx[0]);
    }
    assert_true(rs.done);
    assert_false(rr.done);
    pfd = (struct pollfd){.fd = fd, .events = POLLIN};
    if (poll(&pfd, 1, 1000) != 1) {
        assert_int_equal(ops->arm(w.ctx[1]), ST_INPROGRESS);
    } else {
        assert_true(pfd.revents & POLLIN);
    }
    WAIT(&w, &rr);
    assert_int_equal(rr.status, ST_OK);
    assert_int_equal(diff_at(dst, sizeof(dst), 17), -1);
    world_close(&w, 0, 1.0);
}

/* ---- 11. teardown --------------------------------------------------------------------------- */

static void test_teardown(void **state)
{
    world_t      w;
    uint8_t      src[100], dst[100];
    st_request_t rs, rr;
    double       t0;

    /* a send that never matches: a non-forced disconnect waits its timeout, then drops it */
    world_up(&w, 2);
    xfer(&w, 0, 1, 20000, 20000, 1, 1, 18); /* bounce slabs to free as well */
    assert_int_equal(ops->isend(w.ep[0][1], src, sizeof(src), 2, NULL, &rs), ST_OK);
    t0 = st_time_now();
    ops->disconnect(w.ep[0][1], 0, 0.2);
    w.ep[0][1] = NULL;
    assert_true(st_time_now() - t0 >= 0.19);
    assert_true(st_time_now() - t0 < 2.0);
    assert_true(rs.done);
    assert_int_equal(rs.status, ST_ERR_CANCELED);
    world_close(&w, 0, 0.2);

    /* forced, with a receive and a send in flight on each side of a three-rank world */
    world_up(&w, 3);
    assert_int_equal(ops->irecv(w.ep[1][2], dst, sizeof(dst), 3, NULL, &rr), ST_OK);
    assert_int_equal(ops->isend(w.ep[2][0], src, sizeof(src), 3, NULL, &rs), ST_OK);
    progress_all(&w, 3);
    t0 = st_time_now();
    world_close(&w, 1, 0.0);
    assert_true(st_time_now() - t0 < 1.0);
    assert_true(rr.done && rs.done);
    assert_int_equal(rr.status, ST_ERR_CANCELED);
    assert_int_equal(rs.status, ST_ERR_CANCELED);
}

/* ---- 12. loader ----------------------------------------------------------------------------- */

/* In a child (the loader runs once per process): with no mock and STRATA_IBVERBS_LIB naming a
 * missing file, the transport stands aside with ST_ERR_NO_DEVICE and says which file. Exit codes
 * name the check that failed. */
static int loader_child(void)
{
    static const char path[] = "/nonexistent/libibverbs.so.1";
    const st_ibv_t   *ibv = NULL;
    st_net_ctx_t     *ctx = NULL;
    st_net_config_t   cfg = {.rank = 0, .nranks = 1, .name = "loader"};
    capture_t         cap;
    char              why[256], log[4096], buf[64];

    st_verbs_ibv_override(NULL);
    st_verbs_config.lib = (char *)path;
    if (st_verbs_ibv_get(&ibv, why, sizeof(why)) != ST_ERR_NO_DEVICE) {
        return 2;
    }
    if (strstr(why, path) == NULL || strstr(why, "STRATA_IBVERBS_LIB") == NULL) {
        return 3;
    }
    capture_begin(&cap);
    if (ops->open(&cfg, &ctx) != ST_ERR_NO_DEVICE || ctx != NULL) {
        return 4;
    }
    capture_end(&cap, log, sizeof(log));
    /* a library the user named is said at WARN (without one, the missing default is INFO) */
    if (strstr(log, "WARN") == NULL || strstr(log, path) == NULL) {
        return 5;
    }
    if (ops->rail_devices(buf, sizeof(buf)) != ST_ERR_NO_DEVICE || buf[0] != '\0') {
        return 6;
    }
    return 0;
}

static void test_loader(void **state)
{
    pid_t pid;
    int   status = 0;

    fflush(NULL);
    pid = fork();
    assert_true(pid >= 0);
    if (pid == 0) {
        _exit(loader_child());
    }
    assert_int_equal(waitpid(pid, &status, 0), pid);
    assert_true(WIFEXITED(status));
    assert_int_equal(WEXITSTATUS(status), 0);
}

int main(void)
{
    /* the out-of-band listeners stay on loopback; logs go to stderr where tests capture them */
    setenv("STRATA_SOCKET_IFNAME", "lo", 1);
    unsetenv("STRATA_DEBUG_FILE");
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        fprintf(stderr, "st_param_init failed: %s\n", st_log_last_error());
        return 1;
    }
    config_saved = st_verbs_config;
    const struct CMUnitTest tests[] = {
        cmocka_unit_test_setup(test_hca_match, setup),
        cmocka_unit_test_setup(test_rail_devices, setup),
        cmocka_unit_test_setup(test_connection, setup),
        cmocka_unit_test_setup(test_connection_two_qps, setup),
        cmocka_unit_test_setup(test_connection_two_cqs, setup),
        cmocka_unit_test_setup(test_sq_reserve, setup),
        cmocka_unit_test_setup(test_sizes, setup),
        cmocka_unit_test_setup(test_tag_order, setup),
        cmocka_unit_test_setup(test_self, setup),
        cmocka_unit_test_setup(test_truncation, setup),
        cmocka_unit_test_setup(test_any_source, setup),
        cmocka_unit_test_setup(test_zero_copy, setup),
        cmocka_unit_test_setup(test_wc_error, setup),
        cmocka_unit_test_setup(test_reg_error, setup),
        cmocka_unit_test_setup(test_cancel, setup),
        cmocka_unit_test_setup(test_event_fd, setup),
        cmocka_unit_test_setup(test_teardown, setup),
        cmocka_unit_test_setup(test_loader, setup),
    };

    return cmocka_run_group_tests(tests, NULL, NULL);
}
