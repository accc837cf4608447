/* test_fakeverbs: checks the fakeverbs stand-in through the real <infiniband/verbs.h> API, as any
 * verbs program would use it (link it against libibverbs.so.1, run it with
 * LD_LIBRARY_PATH=tests/fakeverbs). Each case runs in a process of its own on a fabric of its own
 * ($FAKEVERBS_FABRIC-<case>), so that the fault counters start at zero and the segment can be
 * checked to be gone after the last close. The two-process cases fork a responder that obeys
 * commands sent over a socketpair, so that the requester's side asserts everything.
 *
 *   test_fakeverbs [CASE...]     all cases, or the ones named; exit 0, 1 (a FAIL), 77 (SKIP)
 */
#define _GNU_SOURCE
#include <infiniband/verbs.h>

#include <dlfcn.h>
#include <errno.h>
#include <fcntl.h>
#include <libgen.h>
#include <poll.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>
#include <arpa/inet.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>

#define BUF_SIZE (4u << 20)

#define CHECK(cond, ...)                                                                 \
    do {                                                                                 \
        if (!(cond)) {                                                                   \
            fprintf(stdout, "    %s:%d: check failed: %s: ", __FILE__, __LINE__, #cond); \
            fprintf(stdout, __VA_ARGS__);                                                \
            fprintf(stdout, "\n");                                                       \
            fflush(stdout);                                                              \
            return 1;                                                                    \
        }                                                                                \
    } while (0)

static double now_s(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec + ts.tv_nsec * 1e-9;
}

static void fill(char *p, size_t n, unsigned seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = (char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
}

static size_t count_bad(const char *p, size_t n, unsigned seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != (char)((i * 131u + seed * 7u + (i >> 12)) & 0xff);
    return bad;
}

/* One endpoint: device context, PD, CQ (with a channel), a registered buffer and an RC QP. */
struct ep {
    struct ibv_context *ctx;
    struct ibv_pd *pd;
    struct ibv_comp_channel *ch;
    struct ibv_cq *cq;
    struct ibv_qp *qp;
    struct ibv_mr *mr;
    char *buf;
    uint16_t lid;
    int eth;
};

struct info {
    uint16_t lid;
    uint32_t qpn, psn, rkey;
    uint64_t addr;
    union ibv_gid gid;
};

static struct ibv_context *open_dev(int k)
{
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    struct ibv_context *c = NULL;
    if (l && k < n)
        c = ibv_open_device(l[k]);
    ibv_free_device_list(l);
    return c;
}

static void ep_close(struct ep *e)
{
    if (e->qp)
        ibv_destroy_qp(e->qp);
    if (e->mr)
        ibv_dereg_mr(e->mr);
    if (e->cq)
        ibv_destroy_cq(e->cq);
    if (e->ch)
        ibv_destroy_comp_channel(e->ch);
    if (e->pd)
        ibv_dealloc_pd(e->pd);
    if (e->ctx)
        ibv_close_device(e->ctx);
    free(e->buf);
    memset(e, 0, sizeof(*e));
}

static int ep_open(struct ep *e, int dev, uint32_t max_send_wr, int cqe)
{
    memset(e, 0, sizeof(*e));
    e->ctx = open_dev(dev);
    CHECK(e->ctx, "open fake%d: %s", dev, strerror(errno));
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(e->ctx, 1, &pa) == 0, "query_port");
    e->lid = pa.lid;
    e->eth = pa.link_layer == IBV_LINK_LAYER_ETHERNET;
    CHECK((e->pd = ibv_alloc_pd(e->ctx)), "alloc_pd");
    CHECK((e->ch = ibv_create_comp_channel(e->ctx)), "create_comp_channel");
    CHECK((e->cq = ibv_create_cq(e->ctx, cqe, e, e->ch, 0)), "create_cq: %s", strerror(errno));
    CHECK(posix_memalign((void **)&e->buf, 4096, BUF_SIZE) == 0, "memalign");
    memset(e->buf, 0, BUF_SIZE);
    e->mr = ibv_reg_mr(e->pd, e->buf, BUF_SIZE,
                       IBV_ACCESS_LOCAL_WRITE | IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ);
    CHECK(e->mr, "reg_mr: %s", strerror(errno));
    struct ibv_qp_init_attr ia = {
        .send_cq = e->cq, .recv_cq = e->cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = max_send_wr, .max_recv_wr = 64, .max_send_sge = 2,
                .max_recv_sge = 2, .max_inline_data = 64},
    };
    CHECK((e->qp = ibv_create_qp(e->pd, &ia)), "create_qp: %s", strerror(errno));
    return 0;
}

static struct info ep_info(struct ep *e, uint32_t psn)
{
    struct info i = {.lid = e->lid, .qpn = e->qp->qp_num, .psn = psn, .rkey = e->mr->rkey,
                     .addr = (uintptr_t)e->buf};
    ibv_query_gid(e->ctx, 1, e->eth ? 1 : 0, &i.gid);
    return i;
}

static int qp_init(struct ibv_qp *qp)
{
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE};
    return ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS);
}

static void rtr_attr(struct ibv_qp_attr *a, const struct info *peer, int eth)
{
    memset(a, 0, sizeof(*a));
    a->qp_state = IBV_QPS_RTR;
    a->path_mtu = IBV_MTU_1024;
    a->dest_qp_num = peer->qpn;
    a->rq_psn = peer->psn;
    a->max_dest_rd_atomic = 1;
    a->min_rnr_timer = 1;
    a->ah_attr.port_num = 1;
    a->ah_attr.dlid = peer->lid;
    if (eth) {
        a->ah_attr.is_global = 1;
        a->ah_attr.grh.dgid = peer->gid;
        a->ah_attr.grh.sgid_index = 1;
        a->ah_attr.grh.hop_limit = 255;
    }
}

#define RTR_MASK (IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN | IBV_QP_RQ_PSN | \
                  IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER)
#define RTS_MASK (IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT | \
                  IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC)

/* INIT -> RTR -> RTS towards peer; my_psn is what the peer's rq_psn was set to. */
static int qp_connect(struct ep *e, const struct info *peer, uint32_t my_psn, int timeout, int rnr_retry)
{
    struct ibv_qp_attr a;
    int r = qp_init(e->qp);
    if (r)
        return r;
    rtr_attr(&a, peer, e->eth);
    if ((r = ibv_modify_qp(e->qp, &a, RTR_MASK)))
        return r;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = my_psn;
    a.timeout = (uint8_t)timeout;
    a.retry_cnt = 7;
    a.rnr_retry = (uint8_t)rnr_retry;
    a.max_rd_atomic = 1;
    return ibv_modify_qp(e->qp, &a, RTS_MASK);
}

static int post(struct ep *e, enum ibv_wr_opcode op, size_t off, size_t len, uint64_t raddr,
                uint32_t rkey, uint32_t imm, int flags, uint64_t wr_id)
{
    struct ibv_sge sge = {.addr = (uintptr_t)e->buf + off, .length = (uint32_t)len, .lkey = e->mr->lkey};
    struct ibv_send_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0, .opcode = op,
                             .send_flags = (unsigned)flags, .imm_data = htonl(imm)};
    wr.wr.rdma.remote_addr = raddr;
    wr.wr.rdma.rkey = rkey;
    struct ibv_send_wr *bad = NULL;
    int r = ibv_post_send(e->qp, &wr, &bad);
    if (r && bad != &wr)
        return -1;
    return r;
}

static int post_recv(struct ep *e, uint64_t wr_id, size_t off, size_t len)
{
    struct ibv_sge sge = {.addr = (uintptr_t)e->buf + off, .length = (uint32_t)len, .lkey = e->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = wr_id, .sg_list = &sge, .num_sge = len ? 1 : 0};
    struct ibv_recv_wr *bad = NULL;
    return ibv_post_recv(e->qp, &wr, &bad);
}

/* 0 with one completion, -1 on timeout, -2 if poll_cq failed. */
static int wait_wc(struct ibv_cq *cq, struct ibv_wc *wc, int ms)
{
    double end = now_s() + ms / 1000.0;
    do {
        int n = ibv_poll_cq(cq, 1, wc);
        if (n < 0)
            return -2;
        if (n == 1)
            return 0;
        usleep(50);
    } while (now_s() < end);
    return -1;
}

/* ---- the responder process ---- */
enum { C_CONNECT = 1, C_POST_RECV, C_POLL, C_WAIT_CHAN, C_CHECK, C_ASYNC, C_EXIT };
struct cmd {
    int op;
    uint64_t a, b, c;
    struct info info;
};
struct rep {
    int rc;
    uint64_t x, y;
    struct ibv_wc wc;
    struct info info;
};

static int xfer(int fd, void *p, size_t n, int wr)
{
    char *c = p;
    while (n) {
        ssize_t r = wr ? write(fd, c, n) : read(fd, c, n);
        if (r <= 0)
            return -1;
        c += r;
        n -= (size_t)r;
    }
    return 0;
}

static void serve(int sock, int dev)
{
    struct ep e;
    struct rep rp;
    memset(&rp, 0, sizeof(rp));
    rp.rc = ep_open(&e, dev, 64, 256);
    if (rp.rc == 0)
        rp.info = ep_info(&e, 7777);
    if (xfer(sock, &rp, sizeof(rp), 1) || rp.rc)
        _exit(1);
    struct cmd c;
    while (xfer(sock, &c, sizeof(c), 0) == 0) {
        memset(&rp, 0, sizeof(rp));
        switch (c.op) {
        case C_CONNECT:
            rp.rc = qp_connect(&e, &c.info, 7777, 14, 7);
            break;
        case C_POST_RECV:
            for (uint64_t i = 0; i < c.a && !rp.rc; i++)
                rp.rc = post_recv(&e, 1000 + i, c.b, c.c);
            break;
        case C_POLL:
            rp.rc = wait_wc(e.cq, &rp.wc, (int)c.a);
            break;
        case C_WAIT_CHAN: {
            /* Non-blocking first: nothing yet, so EAGAIN; then block in poll() on the fd. */
            struct ibv_cq *cq;
            void *cqc;
            int fl = fcntl(e.ch->fd, F_GETFL);
            ibv_req_notify_cq(e.cq, 0);
            fcntl(e.ch->fd, F_SETFL, fl | O_NONBLOCK);
            rp.y = ibv_get_cq_event(e.ch, &cq, &cqc) == -1 && errno == EAGAIN;
            fcntl(e.ch->fd, F_SETFL, fl);
            if (ibv_poll_cq(e.cq, 1, &rp.wc) == 1)
                break;  /* arrived already: x stays 0 (did not block) */
            struct pollfd p = {e.ch->fd, POLLIN, 0};
            if (poll(&p, 1, (int)c.a) != 1) {
                rp.rc = -1;
                break;
            }
            if (ibv_get_cq_event(e.ch, &cq, &cqc) != 0 || cq != e.cq || cqc != &e) {
                rp.rc = -3;
                break;
            }
            ibv_ack_cq_events(cq, 1);
            rp.x = 1;
            rp.rc = wait_wc(e.cq, &rp.wc, 1000);
            break;
        }
        case C_CHECK:
            rp.x = count_bad(e.buf + c.a, c.b, (unsigned)c.c);
            break;
        case C_ASYNC: {
            struct pollfd p = {e.ctx->async_fd, POLLIN, 0};
            struct ibv_async_event ev;
            if (poll(&p, 1, (int)c.a) == 1 && ibv_get_async_event(e.ctx, &ev) == 0) {
                rp.x = ev.event_type;
                rp.y = ev.element.qp == e.qp;
                ibv_ack_async_event(&ev);
            } else {
                rp.rc = -1;
            }
            break;
        }
        case C_EXIT:
            ep_close(&e);
            xfer(sock, &rp, sizeof(rp), 1);
            _exit(0);
        }
        if (xfer(sock, &rp, sizeof(rp), 1))
            break;
    }
    ep_close(&e);
    _exit(0);
}

struct peer {
    pid_t pid;
    int sock;
    struct info info;
};

static int cmd(struct peer *p, int op, uint64_t a, uint64_t b, uint64_t c, struct rep *rp)
{
    struct cmd m = {.op = op, .a = a, .b = b, .c = c};
    if (xfer(p->sock, &m, sizeof(m), 1) || xfer(p->sock, rp, sizeof(*rp), 0))
        return -1;
    return rp->rc;
}

/* Forks the responder and connects e's QP to it (requester timeout and rnr_retry given). */
static int start_pair(struct peer *p, struct ep *e, int timeout, int rnr_retry)
{
    int sv[2];
    CHECK(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0, "socketpair");
    p->pid = fork();
    CHECK(p->pid >= 0, "fork");
    if (p->pid == 0) {
        close(sv[0]);
        serve(sv[1], 0);
    }
    close(sv[1]);
    p->sock = sv[0];
    struct rep rp;
    CHECK(xfer(p->sock, &rp, sizeof(rp), 0) == 0 && rp.rc == 0, "responder setup");
    p->info = rp.info;
    if (ep_open(e, 0, 64, 256))
        return 1;
    struct cmd m = {.op = C_CONNECT, .info = ep_info(e, 4242)};
    CHECK(xfer(p->sock, &m, sizeof(m), 1) == 0 && xfer(p->sock, &rp, sizeof(rp), 0) == 0 &&
          rp.rc == 0, "responder connect: %d", rp.rc);
    CHECK(qp_connect(e, &p->info, 4242, timeout, rnr_retry) == 0, "requester connect");
    return 0;
}

static int stop_pair(struct peer *p, struct ep *e)
{
    struct rep rp;
    if (p->pid > 0) {
        cmd(p, C_EXIT, 0, 0, 0, &rp);
        int st;
        waitpid(p->pid, &st, 0);
    }
    close(p->sock);
    ep_close(e);
    return 0;
}

/* ---- cases ---- */

static int case_write_imm(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 7))
        return 1;
    static const size_t sizes[] = {0, 1, 7, 1024, 1025, 4096, 65536 + 3, (1u << 20) + 13, 3u << 20};
    struct rep rp;
    for (unsigned i = 0; i < sizeof(sizes) / sizeof(sizes[0]); i++) {
        size_t n = sizes[i], off = 64 + i;
        fill(e.buf, n, i + 1);
        CHECK(cmd(&p, C_POST_RECV, 1, 0, 0, &rp) == 0, "post_recv");
        CHECK(post(&e, IBV_WR_RDMA_WRITE_WITH_IMM, 0, n, p.info.addr + off, p.info.rkey,
                   0xabc000u + (uint32_t)i, IBV_SEND_SIGNALED, 77 + i) == 0, "post_send");
        struct ibv_wc wc;
        CHECK(wait_wc(e.cq, &wc, 5000) == 0, "send completion");
        CHECK(wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_RDMA_WRITE && wc.wr_id == 77 + i,
              "send wc status %d opcode %d", wc.status, wc.opcode);
        CHECK(cmd(&p, C_POLL, 5000, 0, 0, &rp) == 0, "recv completion");
        CHECK(rp.wc.status == IBV_WC_SUCCESS && rp.wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM,
              "recv wc status %d opcode %d", rp.wc.status, rp.wc.opcode);
        CHECK(rp.wc.byte_len == n && ntohl(rp.wc.imm_data) == 0xabc000u + i &&
              (rp.wc.wc_flags & IBV_WC_WITH_IMM) && rp.wc.src_qp == e.qp->qp_num &&
              rp.wc.qp_num == p.info.qpn && rp.wc.wr_id == 1000,
              "size %zu: byte_len %u imm %#x flags %#x src_qp %u", n, rp.wc.byte_len,
              ntohl(rp.wc.imm_data), rp.wc.wc_flags, rp.wc.src_qp);
        CHECK(cmd(&p, C_CHECK, off, n, i + 1, &rp) == 0 && rp.x == 0, "size %zu: %llu bad bytes",
              n, (unsigned long long)rp.x);
    }
    return stop_pair(&p, &e);
}

static int case_send_recv(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 7))
        return 1;
    struct rep rp;
    struct ibv_wc wc;
    CHECK(cmd(&p, C_POST_RECV, 2, 8192, 1000, &rp) == 0, "post_recv");
    fill(e.buf, 300, 5);
    CHECK(post(&e, IBV_WR_SEND, 0, 300, 0, 0, 0, IBV_SEND_SIGNALED, 1) == 0, "send");
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_SUCCESS && wc.opcode == IBV_WC_SEND,
          "send wc %d", wc.status);
    CHECK(cmd(&p, C_POLL, 5000, 0, 0, &rp) == 0 && rp.wc.status == IBV_WC_SUCCESS &&
          rp.wc.opcode == IBV_WC_RECV && rp.wc.byte_len == 300 && !(rp.wc.wc_flags & IBV_WC_WITH_IMM),
          "recv wc status %d opcode %d len %u", rp.wc.status, rp.wc.opcode, rp.wc.byte_len);
    CHECK(cmd(&p, C_CHECK, 8192, 300, 5, &rp) == 0 && rp.x == 0, "%llu bad bytes", (unsigned long long)rp.x);
    /* Inline send with immediate: the buffer may change right after the post. */
    fill(e.buf + 4096, 40, 9);
    CHECK(post(&e, IBV_WR_SEND_WITH_IMM, 4096, 40, 0, 0, 99, IBV_SEND_SIGNALED | IBV_SEND_INLINE, 2) == 0,
          "inline send");
    memset(e.buf + 4096, 0, 40);
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_SUCCESS, "inline send wc %d", wc.status);
    CHECK(cmd(&p, C_POLL, 5000, 0, 0, &rp) == 0 && rp.wc.opcode == IBV_WC_RECV &&
          rp.wc.byte_len == 40 && (rp.wc.wc_flags & IBV_WC_WITH_IMM) && ntohl(rp.wc.imm_data) == 99,
          "recv wc opcode %d len %u", rp.wc.opcode, rp.wc.byte_len);
    CHECK(cmd(&p, C_CHECK, 8192, 40, 9, &rp) == 0 && rp.x == 0, "inline: %llu bad bytes",
          (unsigned long long)rp.x);
    /* Too long for the receive buffer: LOC_LEN_ERR there, REM_INV_REQ_ERR here. */
    CHECK(cmd(&p, C_POST_RECV, 1, 8192, 1000, &rp) == 0, "post_recv");
    CHECK(post(&e, IBV_WR_SEND, 0, 2000, 0, 0, 0, IBV_SEND_SIGNALED, 3) == 0, "long send");
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_REM_INV_REQ_ERR, "long send wc %d", wc.status);
    CHECK(cmd(&p, C_POLL, 5000, 0, 0, &rp) == 0 && rp.wc.status == IBV_WC_LOC_LEN_ERR,
          "long recv wc %d", rp.wc.status);
    return stop_pair(&p, &e);
}

static int case_channel(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 7))
        return 1;
    struct rep rp;
    CHECK(cmd(&p, C_POST_RECV, 1, 0, 0, &rp) == 0, "post_recv");
    struct cmd m = {.op = C_WAIT_CHAN, .a = 5000};
    double t0 = now_s();
    CHECK(xfer(p.sock, &m, sizeof(m), 1) == 0, "send cmd");
    usleep(200000);  /* the responder is asleep in poll() meanwhile */
    CHECK(post(&e, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 16, p.info.addr, p.info.rkey, 5, 0, 1) == 0, "post");
    CHECK(xfer(p.sock, &rp, sizeof(rp), 0) == 0, "reply");
    double dt = now_s() - t0;
    CHECK(rp.rc == 0 && rp.y == 1, "EAGAIN on the non-blocking fd: rc %d y %llu", rp.rc,
          (unsigned long long)rp.y);
    CHECK(rp.x == 1 && dt > 0.15, "woke through the channel fd: x %llu after %.3f s",
          (unsigned long long)rp.x, dt);
    CHECK(rp.wc.status == IBV_WC_SUCCESS && rp.wc.opcode == IBV_WC_RECV_RDMA_WITH_IMM &&
          ntohl(rp.wc.imm_data) == 5, "wc %d/%d", rp.wc.status, rp.wc.opcode);
    return stop_pair(&p, &e);
}

static int case_bad_rkey(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 7))
        return 1;
    struct rep rp;
    struct ibv_wc wc;
    CHECK(cmd(&p, C_POST_RECV, 1, 0, 0, &rp) == 0, "post_recv");
    CHECK(post(&e, IBV_WR_RDMA_WRITE, 0, 64, p.info.addr, p.info.rkey ^ 0x5a5a00u, 0, 0, 1) == 0, "post");
    CHECK(post(&e, IBV_WR_RDMA_WRITE, 0, 64, p.info.addr, p.info.rkey, 0, IBV_SEND_SIGNALED, 2) == 0, "post 2");
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR && wc.wr_id == 1,
          "unsignaled bad write completes with REM_ACCESS_ERR: %d", wc.status);
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 2,
          "next WR flushed: %d", wc.status);
    CHECK(cmd(&p, C_POLL, 5000, 0, 0, &rp) == 0 && rp.wc.status == IBV_WC_WR_FLUSH_ERR,
          "responder's receive flushed: %d", rp.wc.status);
    CHECK(cmd(&p, C_ASYNC, 5000, 0, 0, &rp) == 0 && rp.x == IBV_EVENT_QP_ACCESS_ERR && rp.y == 1,
          "async event %llu on its QP %llu", (unsigned long long)rp.x, (unsigned long long)rp.y);
    /* Out of bounds with the right key is the same error. */
    return stop_pair(&p, &e);
}

static int case_oob(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 7))
        return 1;
    struct ibv_wc wc;
    CHECK(post(&e, IBV_WR_RDMA_WRITE, 0, 128, p.info.addr + BUF_SIZE - 64, p.info.rkey, 0,
               IBV_SEND_SIGNALED, 1) == 0, "post");
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_REM_ACCESS_ERR, "oob: %d", wc.status);
    return stop_pair(&p, &e);
}

static int case_retry_exc(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 18, 7))
        return 1;
    struct rep rp;
    cmd(&p, C_EXIT, 0, 0, 0, &rp);
    int st;
    waitpid(p.pid, &st, 0);
    p.pid = 0;
    /* 4.096 us * 2^18 * (7 + 1) * FAKEVERBS_TIME_SCALE 0.01 = 85.9 ms */
    double t0 = now_s();
    CHECK(post(&e, IBV_WR_RDMA_WRITE, 0, 64, p.info.addr, p.info.rkey, 0, IBV_SEND_SIGNALED, 1) == 0, "post");
    CHECK(post(&e, IBV_WR_RDMA_WRITE, 0, 64, p.info.addr, p.info.rkey, 0, IBV_SEND_SIGNALED, 2) == 0, "post");
    struct ibv_wc wc;
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_RETRY_EXC_ERR && wc.wr_id == 1,
          "status %d", wc.status);
    double dt = now_s() - t0;
    CHECK(dt > 0.080 && dt < 3.0, "after the computed timeout: %.3f s", dt);
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR, "then flushed: %d", wc.status);
    return stop_pair(&p, &e);
}

static int case_rnr(void)
{
    struct peer p;
    struct ep e;
    if (start_pair(&p, &e, 14, 2))
        return 1;
    struct ibv_wc wc;
    CHECK(post(&e, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 8, p.info.addr, p.info.rkey, 1, IBV_SEND_SIGNALED, 1) == 0,
          "post");
    CHECK(wait_wc(e.cq, &wc, 5000) == 0 && wc.status == IBV_WC_RNR_RETRY_EXC_ERR, "status %d", wc.status);
    return stop_pair(&p, &e);
}

/* Two endpoints of this process connected to each other (the memcpy path). */
static int loop_pair(struct ep *a, struct ep *b, int deva, int devb, uint32_t max_send_wr, int cqe)
{
    if (ep_open(a, deva, max_send_wr, cqe) || ep_open(b, devb, 64, 256))
        return 1;
    struct info ia = ep_info(a, 100), ib = ep_info(b, 200);
    CHECK(qp_connect(a, &ib, 100, 18, 7) == 0, "connect a");
    CHECK(qp_connect(b, &ia, 200, 18, 7) == 0, "connect b");
    return 0;
}

static int case_einval(void)
{
    struct ep a, b;
    if (ep_open(&a, 0, 64, 256) || ep_open(&b, 0, 64, 256))
        return 1;
    struct info ib = ep_info(&b, 1);
    struct ibv_qp_attr at;
    rtr_attr(&at, &ib, 0);
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == EINVAL, "RESET->RTR");
    CHECK(qp_init(a.qp) == 0, "RESET->INIT");
    CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, IBV_SEND_SIGNALED, 1) == EINVAL,
          "post in INIT");
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK & ~IBV_QP_RQ_PSN) == EINVAL, "INIT->RTR without RQ_PSN");
    at.path_mtu = 6;
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == EINVAL, "path_mtu above the port's");
    at.path_mtu = IBV_MTU_4096;
    at.ah_attr.port_num = 2;
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == EINVAL, "bad port");
    at.ah_attr.port_num = 1;
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == 0, "INIT->RTR");
    CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, IBV_SEND_SIGNALED, 1) == EINVAL,
          "post in RTR");
    struct ibv_qp_init_attr ud = {.send_cq = a.cq, .recv_cq = a.cq, .qp_type = IBV_QPT_UD,
                                  .cap = {.max_send_wr = 1, .max_recv_wr = 1, .max_send_sge = 1, .max_recv_sge = 1}};
    errno = 0;
    CHECK(!ibv_create_qp(a.pd, &ud) && (errno == EOPNOTSUPP || errno == EINVAL), "UD QP: errno %d", errno);
    struct ibv_qp_attr err = {.qp_state = IBV_QPS_ERR};
    CHECK(ibv_modify_qp(a.qp, &err, IBV_QP_STATE) == 0, "any->ERR");
    CHECK(post_recv(&a, 5, 0, 8) == 0, "post_recv in ERR");
    struct ibv_wc wc;
    CHECK(wait_wc(a.cq, &wc, 1000) == 0 && wc.status == IBV_WC_WR_FLUSH_ERR && wc.wr_id == 5,
          "receive posted in ERR flushes: %d", wc.status);
    ep_close(&a);
    ep_close(&b);
    return 0;
}

static int case_sq_full(void)
{
    struct ep a, b;
    if (loop_pair(&a, &b, 0, 0, 8, 256))
        return 1;
    struct info ib = ep_info(&b, 0);
    for (int i = 0; i < 8; i++)
        CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, 0, (uint64_t)i) == 0, "post %d", i);
    CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, 0, 8) == ENOMEM,
          "9th unsignaled WR on an 8-deep send queue");
    ep_close(&a);
    ep_close(&b);
    /* A signaled WR's polled completion frees the unsignaled ones before it. */
    if (loop_pair(&a, &b, 0, 0, 8, 256))
        return 1;
    ib = ep_info(&b, 0);
    for (int round = 0; round < 3; round++) {
        for (int i = 0; i < 8; i++)
            CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, i == 7 ? IBV_SEND_SIGNALED : 0,
                       (uint64_t)i) == 0, "round %d post %d", round, i);
        struct ibv_wc wc;
        CHECK(wait_wc(a.cq, &wc, 1000) == 0 && wc.status == IBV_WC_SUCCESS && wc.wr_id == 7,
              "signaled completion");
    }
    /* Receive queue depth. */
    for (int i = 0; i < 64; i++)
        CHECK(post_recv(&b, (uint64_t)i, 0, 8) == 0, "recv %d", i);
    CHECK(post_recv(&b, 64, 0, 8) == ENOMEM, "65th receive on a 64-deep RQ");
    ep_close(&a);
    ep_close(&b);
    return 0;
}

static int case_send_err(void)
{
    /* FAKEVERBS_FAULTS=send_err=12@3,drop_qp@7 in this case's environment. The counters live in
     * the segment: a context held open keeps it (and them) across the two halves. */
    struct ibv_context *hold = open_dev(1);
    CHECK(hold, "open");
    struct ep a, b;
    if (loop_pair(&a, &b, 0, 1, 64, 256))
        return 1;
    struct info ib = ep_info(&b, 0);
    double t0 = now_s();
    for (int i = 1; i <= 5; i++)
        CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, IBV_SEND_SIGNALED, (uint64_t)i) == 0,
              "post %d", i);
    static const int want[] = {0, IBV_WC_SUCCESS, IBV_WC_SUCCESS, IBV_WC_RETRY_EXC_ERR,
                               IBV_WC_WR_FLUSH_ERR, IBV_WC_WR_FLUSH_ERR};
    for (int i = 1; i <= 5; i++) {
        struct ibv_wc wc;
        CHECK(wait_wc(a.cq, &wc, 5000) == 0 && wc.wr_id == (uint64_t)i && (int)wc.status == want[i],
              "WR %d: status %d", i, wc.status);
        if (i == 3)
            CHECK(now_s() - t0 > 0.080, "RETRY_EXC after the timeout: %.3f s", now_s() - t0);
    }
    ep_close(&a);
    ep_close(&b);
    /* drop_qp@7: the 7th send WR of the fabric (the 2nd here) finds its target silent. */
    if (loop_pair(&a, &b, 0, 1, 64, 256))
        return 1;
    ib = ep_info(&b, 0);
    for (int i = 1; i <= 3; i++)
        CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, IBV_SEND_SIGNALED, (uint64_t)i) == 0,
              "post %d", i);
    static const int want2[] = {0, IBV_WC_SUCCESS, IBV_WC_RETRY_EXC_ERR, IBV_WC_WR_FLUSH_ERR};
    for (int i = 1; i <= 3; i++) {
        struct ibv_wc wc;
        CHECK(wait_wc(a.cq, &wc, 5000) == 0 && wc.wr_id == (uint64_t)i && (int)wc.status == want2[i],
              "drop_qp WR %d: status %d", i, wc.status);
    }
    ep_close(&a);
    ep_close(&b);
    ibv_close_device(hold);
    return 0;
}

static int case_reg_fail(void)
{
    /* FAKEVERBS_FAULTS=reg_fail@2 */
    struct ibv_context *c = open_dev(0);
    CHECK(c, "open");
    struct ibv_pd *pd = ibv_alloc_pd(c);
    static char buf[3][4096];
    struct ibv_mr *m1 = ibv_reg_mr(pd, buf[0], 4096, IBV_ACCESS_LOCAL_WRITE);
    errno = 0;
    struct ibv_mr *m2 = ibv_reg_mr(pd, buf[1], 4096, IBV_ACCESS_LOCAL_WRITE);
    int e2 = errno;
    struct ibv_mr *m3 = ibv_reg_mr(pd, buf[2], 4096, IBV_ACCESS_LOCAL_WRITE);
    CHECK(m1 && !m2 && e2 == ENOMEM && m3, "m1 %p m2 %p (errno %d) m3 %p", (void *)m1, (void *)m2, e2,
          (void *)m3);
    CHECK(ibv_dealloc_pd(pd) == EBUSY, "dealloc_pd with MRs");
    ibv_dereg_mr(m1);
    ibv_dereg_mr(m3);
    CHECK(ibv_dealloc_pd(pd) == 0, "dealloc_pd");
    ibv_close_device(c);
    return 0;
}

static int case_memlock(void)
{
    /* Non-root registration beyond RLIMIT_MEMLOCK fails with ENOMEM. As root, become nobody. */
    struct rlimit rl = {1 << 20, 1 << 20};
    CHECK(setrlimit(RLIMIT_MEMLOCK, &rl) == 0, "setrlimit");
    if (geteuid() == 0)
        CHECK(setgid(65534) == 0 && setuid(65534) == 0, "become nobody");
    struct ibv_context *c = open_dev(0);
    CHECK(c, "open as uid %d: %s", (int)geteuid(), strerror(errno));
    struct ibv_pd *pd = ibv_alloc_pd(c);
    char *buf;
    CHECK(posix_memalign((void **)&buf, 4096, 2 << 20) == 0, "alloc");
    errno = 0;
    struct ibv_mr *big = ibv_reg_mr(pd, buf, 2 << 20, IBV_ACCESS_LOCAL_WRITE);
    CHECK(!big && errno == ENOMEM, "2 MiB under a 1 MiB limit: %p errno %d", (void *)big, errno);
    struct ibv_mr *small = ibv_reg_mr(pd, buf, 512 << 10, IBV_ACCESS_LOCAL_WRITE);
    CHECK(small, "512 KiB: %s", strerror(errno));
    ibv_dereg_mr(small);
    ibv_dealloc_pd(pd);
    ibv_close_device(c);
    free(buf);
    return 0;
}

static int case_cq_overrun(void)
{
    struct ep a, b;
    if (loop_pair(&a, &b, 0, 0, 64, 4))
        return 1;
    struct info ib = ep_info(&b, 0);
    for (int i = 0; i < 6; i++)
        CHECK(post(&a, IBV_WR_RDMA_WRITE, 0, 8, ib.addr, ib.rkey, 0, IBV_SEND_SIGNALED, (uint64_t)i) == 0,
              "post %d", i);
    struct ibv_wc wc[8];
    CHECK(ibv_poll_cq(a.cq, 8, wc) < 0, "poll of an overrun CQ fails");
    struct pollfd p = {a.ctx->async_fd, POLLIN, 0};
    struct ibv_async_event ev;
    CHECK(poll(&p, 1, 1000) == 1 && ibv_get_async_event(a.ctx, &ev) == 0, "async event");
    CHECK(ev.event_type == IBV_EVENT_CQ_ERR && ev.element.cq == a.cq, "CQ_ERR on the CQ: %d", ev.event_type);
    ibv_ack_async_event(&ev);
    ep_close(&a);
    ep_close(&b);
    return 0;
}

static int case_nodes(void)
{
    /* FAKEVERBS_PORT_DOWN=fake2, FAKEVERBS_NDEV=3, FAKEVERBS_SCRAMBLE=1 in this case. */
    struct ep a, b;
    setenv("FAKEVERBS_NODE", "alpha", 1);
    if (ep_open(&a, 0, 64, 256))
        return 1;
    setenv("FAKEVERBS_NODE", "beta", 1);
    if (ep_open(&b, 1, 64, 256))
        return 1;
    struct ibv_context *b0 = open_dev(0), *b2 = open_dev(2);
    setenv("FAKEVERBS_NODE", "alpha", 1);
    struct ibv_context *a0 = open_dev(0);
    CHECK(b0 && b2 && a0, "opens");
    struct ibv_port_attr pb0, pa0, pb2;
    CHECK(ibv_query_port(b0, 1, &pb0) == 0 && ibv_query_port(a0, 1, &pa0) == 0 &&
          ibv_query_port(b2, 1, &pb2) == 0, "query_port");
    CHECK(a.lid >= 1 && b.lid >= 1 && pb0.lid >= 1 && a.lid != b.lid && a.lid != pb0.lid && b.lid != pb0.lid,
          "distinct LIDs: alpha/fake0 %u beta/fake1 %u beta/fake0 %u", a.lid, b.lid, pb0.lid);
    CHECK(pa0.lid == a.lid, "same (node, device), same LID: %u %u", pa0.lid, a.lid);
    CHECK(pa0.state == IBV_PORT_ACTIVE && pb2.state == IBV_PORT_DOWN, "port states %d %d", pa0.state,
          pb2.state);
    CHECK(pa0.link_layer == IBV_LINK_LAYER_INFINIBAND && pa0.active_mtu == IBV_MTU_4096, "IB port");
    ibv_close_device(a0);
    ibv_close_device(b0);
    ibv_close_device(b2);
    struct info ia = ep_info(&a, 10), ib = ep_info(&b, 20);
    CHECK(qp_connect(&a, &ib, 10, 18, 7) == 0 && qp_connect(&b, &ia, 20, 18, 7) == 0, "connect");
    CHECK(post_recv(&b, 1, 0, 0) == 0, "recv");
    fill(a.buf, 5 * 4096 + 100, 3);
    CHECK(post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 5 * 4096 + 100, ib.addr + 100, ib.rkey, 1,
               IBV_SEND_SIGNALED, 1) == 0, "post");
    struct ibv_wc wc;
    CHECK(wait_wc(a.cq, &wc, 2000) == 0 && wc.status == IBV_WC_SUCCESS, "send %d", wc.status);
    CHECK(wait_wc(b.cq, &wc, 2000) == 0 && wc.status == IBV_WC_SUCCESS && wc.slid == a.lid,
          "recv %d slid %u", wc.status, wc.slid);
    CHECK(count_bad(b.buf + 100, 5 * 4096 + 100, 3) == 0, "scrambled placement, right bytes");
    ep_close(&a);
    ep_close(&b);
    return 0;
}

static int case_roce(void)
{
    /* FAKEVERBS_LINK=eth in this case. */
    struct ep a, b;
    setenv("FAKEVERBS_NODE", "r1", 1);
    if (ep_open(&a, 0, 64, 256))
        return 1;
    setenv("FAKEVERBS_NODE", "r2", 1);
    if (ep_open(&b, 1, 64, 256))
        return 1;
    struct ibv_port_attr pa;
    CHECK(ibv_query_port(a.ctx, 1, &pa) == 0 && pa.link_layer == IBV_LINK_LAYER_ETHERNET &&
          pa.lid == 0 && pa.gid_tbl_len == 2, "RoCE port: link %d lid %u gids %d", pa.link_layer, pa.lid,
          pa.gid_tbl_len);
    union ibv_gid g0, g1;
    CHECK(ibv_query_gid(b.ctx, 1, 0, &g0) == 0 && ibv_query_gid(b.ctx, 1, 1, &g1) == 0, "query_gid");
    static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
    CHECK(g0.raw[0] == 0xfe && g0.raw[1] == 0x80, "link-local GID 0");
    CHECK(memcmp(g1.raw, v4, 12) == 0 && g1.raw[12] == 10 && g1.raw[13] == 200 && g1.raw[15] == 1,
          "GID 1 ::ffff:10.200.%u.%u", g1.raw[14], g1.raw[15]);
    struct info ia = ep_info(&a, 10), ib = ep_info(&b, 20);
    struct ibv_qp_attr at;
    CHECK(qp_init(a.qp) == 0, "init");
    rtr_attr(&at, &ib, 0);  /* no GRH on RoCE */
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == EINVAL, "RoCE RTR without is_global");
    rtr_attr(&at, &ib, 1);
    at.ah_attr.grh.sgid_index = 5;
    CHECK(ibv_modify_qp(a.qp, &at, RTR_MASK) == EINVAL, "bad sgid_index");
    struct ibv_qp_attr reset = {.qp_state = IBV_QPS_RESET};
    CHECK(ibv_modify_qp(a.qp, &reset, IBV_QP_STATE) == 0, "reset");
    CHECK(qp_connect(&a, &ib, 10, 18, 7) == 0 && qp_connect(&b, &ia, 20, 18, 7) == 0, "connect");
    fill(a.buf, 1000, 4);
    CHECK(post_recv(&b, 1, 0, 0) == 0, "recv");
    CHECK(post(&a, IBV_WR_RDMA_WRITE_WITH_IMM, 0, 1000, ib.addr, ib.rkey, 3, IBV_SEND_SIGNALED, 1) == 0, "post");
    struct ibv_wc wc;
    CHECK(wait_wc(a.cq, &wc, 2000) == 0 && wc.status == IBV_WC_SUCCESS, "send %d", wc.status);
    CHECK(wait_wc(b.cq, &wc, 2000) == 0 && wc.status == IBV_WC_SUCCESS && wc.byte_len == 1000, "recv");
    CHECK(count_bad(b.buf, 1000, 4) == 0, "bytes");
    ep_close(&a);
    ep_close(&b);
    return 0;
}

static int case_symbols(void)
{
    /* How strata's transport reaches the library: dlopen + dlvsym with rdma-core's versions. */
    const char *lib = getenv("STRATA_IBVERBS_LIB");
    void *h = dlopen(lib ? lib : "libibverbs.so.1", RTLD_NOW | RTLD_LOCAL);
    CHECK(h, "dlopen: %s", dlerror());
    int (*qp)(struct ibv_context *, uint8_t, struct ibv_port_attr *) = dlvsym(h, "ibv_query_port", "IBVERBS_1.1");
    void *cc = dlvsym(h, "ibv_create_comp_channel", "IBVERBS_1.0");
    void *rm = dlvsym(h, "ibv_reg_mr", "IBVERBS_1.1");
    void *rm2 = dlvsym(h, "ibv_reg_mr_iova2", "IBVERBS_1.8");
    struct ibv_device **(*gl)(int *) = dlvsym(h, "ibv_get_device_list", "IBVERBS_1.1");
    CHECK(qp && cc && rm && rm2 && gl, "versioned symbols %p %p %p %p %p", (void *)qp, cc, rm, rm2, (void *)gl);
    struct ibv_context *c = open_dev(0);
    CHECK(c, "open");
    struct ibv_port_attr pa;
    memset(&pa, 0, sizeof(pa));
    CHECK(qp(c, 1, &pa) == 0 && pa.lid >= 1 && pa.state == IBV_PORT_ACTIVE, "ibv_query_port@IBVERBS_1.1");
    struct ibv_device_attr da;
    CHECK(ibv_query_device(c, &da) == 0 && da.max_qp_wr >= 16384 && da.phys_port_cnt == 1 &&
          da.max_cqe >= 65536, "query_device");
    CHECK(strcmp(ibv_wc_status_str(IBV_WC_RETRY_EXC_ERR), "transport retry counter exceeded") == 0, "str");
    ibv_close_device(c);
    dlclose(h);
    return 0;
}

/* ---- driver ---- */
struct tcase {
    const char *name;
    int (*fn)(void);
    const char *env;  /* NAME=VALUE;NAME=VALUE set in the case's process */
};

static const struct tcase cases[] = {
    {"symbols", case_symbols, ""},
    {"write_imm", case_write_imm, ""},
    {"send_recv", case_send_recv, ""},
    {"channel", case_channel, ""},
    {"bad_rkey", case_bad_rkey, ""},
    {"oob", case_oob, ""},
    {"retry_exc", case_retry_exc, "FAKEVERBS_TIME_SCALE=0.01"},
    {"rnr_retry_exc", case_rnr, ""},
    {"einval", case_einval, ""},
    {"sq_full", case_sq_full, ""},
    {"send_err", case_send_err, "FAKEVERBS_TIME_SCALE=0.01;FAKEVERBS_FAULTS=send_err=12@3,drop_qp@7"},
    {"reg_fail", case_reg_fail, "FAKEVERBS_FAULTS=reg_fail@2"},
    {"memlock", case_memlock, ""},
    {"cq_overrun", case_cq_overrun, ""},
    {"two_nodes", case_nodes, "FAKEVERBS_NDEV=3;FAKEVERBS_PORT_DOWN=fake2;FAKEVERBS_SCRAMBLE=1"},
    {"roce", case_roce, "FAKEVERBS_LINK=eth"},
};

static int run_case(const struct tcase *t, const char *base)
{
    char fabric[200], path[300];
    snprintf(fabric, sizeof(fabric), "%s-%s", base, t->name);
    snprintf(path, sizeof(path), "/dev/shm/fakeverbs-%s", fabric);
    fflush(stdout);
    pid_t pid = fork();
    if (pid < 0)
        return 1;
    if (pid == 0) {
        setpgid(0, 0);
        alarm(60);  /* a hung case is a failed case */
        setenv("FAKEVERBS_FABRIC", fabric, 1);
        char env[300];
        snprintf(env, sizeof(env), "%s", t->env);
        char *save = NULL;
        for (char *kv = strtok_r(env, ";", &save); kv; kv = strtok_r(NULL, ";", &save)) {
            char *eq = strchr(kv, '=');
            if (eq) {
                *eq = '\0';
                setenv(kv, eq + 1, 1);
            }
        }
        fflush(stdout);
        _exit(t->fn());
    }
    int st = 0;
    waitpid(pid, &st, 0);
    kill(-pid, SIGKILL);  /* responders left behind by a failed case */
    int ok = WIFEXITED(st) && WEXITSTATUS(st) == 0;
    struct stat sb;
    int left = stat(path, &sb) == 0;
    if (left)
        unlink(path);
    if (ok && left) {
        printf("    segment %s left behind after the last close\n", path);
        ok = 0;
    }
    if (!WIFEXITED(st))
        printf("    killed by signal %d\n", WTERMSIG(st));
    printf("%s - %s\n", ok ? "ok" : "FAIL", t->name);
    fflush(stdout);
    return !ok;
}

static int probe(const char *argv0)
{
    char self[4096];
    ssize_t n = readlink("/proc/self/exe", self, sizeof(self) - 1);
    if (n <= 0)
        snprintf(self, sizeof(self), "%s", argv0);
    else
        self[n] = '\0';
    char ctl[4200];
    snprintf(ctl, sizeof(ctl), "%s/fakeverbs-ctl", dirname(self));
    pid_t pid = fork();
    if (pid == 0) {
        execl(ctl, ctl, "probe", (char *)NULL);
        _exit(127);
    }
    int st = 0;
    if (pid < 0 || waitpid(pid, &st, 0) < 0 || !WIFEXITED(st))
        return 99;
    return WEXITSTATUS(st) == 127 ? 99 : WEXITSTATUS(st);
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    int pr = probe(argv[0]);
    if (pr == 77) {
        printf("SKIP: cross-process memory access is denied here (fakeverbs-ctl probe)\n");
        return 77;
    }
    if (pr != 0) {
        printf("FAIL: fakeverbs-ctl probe did not run (%d)\n", pr);
        return 1;
    }
    int n = 0;
    struct ibv_device **l = ibv_get_device_list(&n);
    int fake = l && n > 0 && strncmp(ibv_get_device_name(l[0]), "fake", 4) == 0;
    ibv_free_device_list(l);
    if (!fake) {
        printf("FAIL: not running on fakeverbs (set LD_LIBRARY_PATH to tests/fakeverbs)\n");
        return 1;
    }
    char base[120];
    const char *fb = getenv("FAKEVERBS_FABRIC");
    snprintf(base, sizeof(base), "%s", fb && *fb ? fb : "test");
    if (!fb || !*fb)
        snprintf(base, sizeof(base), "test-%d", (int)getpid());
    int fails = 0, ran = 0;
    for (unsigned i = 0; i < sizeof(cases) / sizeof(cases[0]); i++) {
        int want = argc < 2;
        for (int k = 1; k < argc; k++)
            want |= strcmp(argv[k], cases[i].name) == 0;
        if (!want)
            continue;
        ran++;
        fails += run_case(&cases[i], base);
    }
    printf("%d of %d cases failed\n", fails, ran);
    return fails ? 1 : ran ? 0 : 1;
}
