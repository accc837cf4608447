/*
 * verbs_proto.c - the message protocol of the verbs transport (verbs.h has its outline).
 *
 * Receiver: irecv queues the receive on its endpoint; in posting order each receive takes a slot
 * (1 .. ST_VB_SLOTS-1) and a generation, is split into parts of psize bytes (the zero-copy part
 * size for registered memory, else one bounce buffer) and sends a CTS for each part, at most
 * ST_VB_WINDOW of one receive and ST_VB_MAX_PARTS of the endpoint outstanding. A part arrives as
 * one RDMA_WRITE_WITH_IMM (earlier plain writes of the same part on the same QP are placed before
 * it: RC ordering); a bounce part is copied out; the receive completes when every part up to the
 * one flagged LAST has arrived (the message may be shorter than the buffer: the CTSs of parts
 * past its end are then discarded by the sender, and their bounce buffers released here).
 *
 * Sender: a CTS of part 0 is matched to the oldest unmatched send with its tag (either may come
 * first: both queue); later parts of the slot's generation go to the matched send. A send longer
 * than the receive buffer answers TRUNC and both sides fail with ST_ERR_TRUNCATED. Each part is
 * written from the user's buffer when it is registered, else through bounce buffers (pieces of
 * bounce_size, the last one with the immediate); a part that lacks a resource waits in the
 * endpoint's waitq, in order.
 *
 * Any-source receive (failure notices): each endpoint keeps one CTS for slot 0 out towards its
 * peer, into a registered buffer of ST_VB_ANY_MAX bytes; the first message to arrive on any
 * endpoint completes the context's pending any-source receive, and that endpoint's slot 0 is
 * offered again once its buffer was taken.
 */
#include "config.h"
#include "transports/verbs/verbs.h"

#include <arpa/inet.h>
#include <stdlib.h>
#include <string.h>

#define ST_VB_ANY_OFF(_ep) ((size_t)(_ep)->nqps * ST_VB_RQ_DEPTH * ST_VB_CTL_SIZE + \
                            (size_t)ST_VB_SQ_DEPTH * ST_VB_CTL_SIZE)
#define ST_VB_CTL_OFF(_ep, _i) ((size_t)(_ep)->nqps * ST_VB_RQ_DEPTH * ST_VB_CTL_SIZE + \
                                (size_t)(_i) * ST_VB_CTL_SIZE)
#define ST_VB_RECV_OFF(_q, _i) (((size_t)(_q) * ST_VB_RQ_DEPTH + (size_t)(_i)) * ST_VB_CTL_SIZE)

/* ---- operations ------------------------------------------------------------------------------ */

static void st_vb_q_append(st_vb_op_t **head, st_vb_op_t **tail, st_vb_op_t *op)
{
    op->prev = *tail;
    op->next = NULL;
    if (*tail != NULL) {
        (*tail)->next = op;
    } else {
        *head = op;
    }
    *tail    = op;
    op->queued = 1;
}

static void st_vb_q_del(st_vb_op_t **head, st_vb_op_t **tail, st_vb_op_t *op)
{
    if (!op->queued) {
        return;
    }
    if (op->prev != NULL) {
        op->prev->next = op->next;
    } else {
        *head = op->next;
    }
    if (op->next != NULL) {
        op->next->prev = op->prev;
    } else {
        *tail = op->prev;
    }
    op->prev = op->next = NULL;
    op->queued = 0;
}

static st_vb_op_t *st_vb_op_new(st_net_ep_t *ep, st_request_t *req, int is_send, void *buf,
                                size_t len, uint64_t tag)
{
    st_vb_op_t *op = calloc(1, sizeof(*op));

    if (op == NULL) {
        return NULL;
    }
    op->req     = req;
    op->ep      = ep;
    op->ctx     = (ep != NULL) ? ep->ctx : NULL;
    op->is_send = is_send;
    op->buf     = buf;
    op->len     = len;
    op->tag     = tag & ST_NET_TAG_MASK;
    op->slot    = -1;
    op->last    = -1;
    for (int i = 0; i < ST_VB_WINDOW; i++) {
        op->bufs[i] = -1;
    }
    req->done    = 0;
    req->orphan  = 0;
    req->status  = ST_INPROGRESS;
    req->len     = 0;
    req->why     = NULL;
    req->tl_req  = op;
    req->tl_ep   = ep;
    req->tl_prev = req->tl_next = NULL;
    return op;
}

/* Completes the op's request (if the caller still has it) and frees the op: unlink it first. */
static void st_vb_op_done(st_vb_op_t *op, st_status_t status, size_t len)
{
    st_request_t *req = op->req;

    if (req != NULL) {
        req->status = status;
        req->len    = len;
        req->why    = (status != ST_OK && status != ST_ERR_CANCELED && op->ep != NULL &&
                       op->ep->why[0] != '\0') ? op->ep->why : NULL;
        req->tl_req = NULL;
        __atomic_store_n(&req->done, 1, __ATOMIC_RELEASE);
    }
    free(op);
}

static void st_vb_req_fail_now(st_request_t *req, st_net_ep_t *ep, st_status_t status)
{
    req->orphan  = 0;
    req->tl_req  = NULL;
    req->why     = (ep->why[0] != '\0') ? ep->why : NULL;
    req->tl_ep   = ep;
    req->tl_prev = req->tl_next = NULL;
    req->len     = 0;
    req->status  = status;
    req->done    = 1;
}

/* ---- posting --------------------------------------------------------------------------------- */

/* Posts receive work request i of QP q (its buffer in ep->mem); ibv_post_recv's errno value. */
static int st_vb_post_recv(st_net_ep_t *ep, int q, uint32_t i)
{
    struct ibv_sge     sge = {.addr   = (uintptr_t)(ep->mem + ST_VB_RECV_OFF(q, i)),
                              .length = ST_VB_CTL_SIZE,
                              .lkey   = ep->mr->lkey};
    struct ibv_recv_wr wr = {.wr_id = ST_VB_WRID(ST_VB_WR_RECV, q, i, ep->idx, ep->gen),
                             .sg_list = &sge, .num_sge = 1}, *bad;

    return ep->ctx->ibv->post_recv(ep->qp[q], &wr, &bad);
}

st_status_t st_vb_post_recvs(st_net_ep_t *ep, int q)
{
    for (uint32_t i = 0; i < ST_VB_RQ_DEPTH; i++) {
        int ret = st_vb_post_recv(ep, q, i);

        if (ret != 0) {
            st_error(ST_SUB_VERBS, "%s rank %d: ibv_post_recv on QP 0x%x (%s) failed: %s",
                     ep->ctx->name, ep->ctx->rank, ep->qp[q]->qp_num, ep->ctx->hca,
                     strerror(ret));
            return ST_ERR_IO;
        }
    }
    return ST_OK;
}

static void st_vb_repost(st_net_ep_t *ep, int q, uint32_t i)
{
    int ret = st_vb_post_recv(ep, q, i);

    if (ret != 0) {
        st_vb_ep_fail(ep, ST_ERR_IO, 1, "re-posting a receive on QP 0x%x (%s) to rank %d "
                      "failed: %s", ep->qp[q]->qp_num, ep->ctx->hca, ep->peer, strerror(ret));
    }
}

/* Sends a control message on QP 0. The bounds of verbs.h keep slots and the send queue from
 * running out; if they ever do, the endpoint fails (a bug, said as one). */
static st_status_t st_vb_ctl_send(st_net_ep_t *ep, const st_vb_ctl_t *ctl)
{
    st_net_ctx_t       *ctx = ep->ctx;
    struct ibv_send_wr  wr, *bad;
    struct ibv_sge      sge;
    uint8_t            *slot;
    int                 i, ret;

    if (ep->state != ST_VB_EP_READY) {
        return ST_ERR_REMOTE;
    }
    if (ep->nctl_free == 0 || ep->sq_used[0] >= ST_VB_SQ_DEPTH) {
        st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "control queue to rank %d full (%d sends "
                      "posted): a bound of the protocol was broken", ep->peer, ep->sq_used[0]);
        return ST_ERR_INTERNAL;
    }
    i    = ep->ctl_free[--ep->nctl_free];
    slot = ep->mem + ST_VB_CTL_OFF(ep, i);
    memcpy(slot, ctl, sizeof(*ctl));
    sge.addr   = (uintptr_t)slot;
    sge.length = sizeof(*ctl);
    sge.lkey   = ep->mr->lkey;
    memset(&wr, 0, sizeof(wr));
    wr.wr_id      = ST_VB_WRID(ST_VB_WR_CTL, 0, i, ep->idx, ep->gen);
    wr.sg_list    = &sge;
    wr.num_sge    = 1;
    wr.opcode     = IBV_WR_SEND;
    wr.send_flags = IBV_SEND_SIGNALED;
    ret = ctx->ibv->post_send(ep->qp[0], &wr, &bad);
    if (ret != 0) {
        ep->ctl_free[ep->nctl_free++] = i;
        st_vb_ep_fail(ep, ST_ERR_IO, 1, "ibv_post_send (control) on QP 0x%x (%s) to rank %d "
                      "failed: %s", ep->qp[0]->qp_num, ctx->hca, ep->peer, strerror(ret));
        return ST_ERR_IO;
    }
    ep->sq_used[0]++;
    return ST_OK;
}

/* ---- receive side ---------------------------------------------------------------------------- */

static void st_vb_recv_release(st_net_ep_t *ep, st_vb_op_t *op)
{
    /* parts still outstanding (not arrived): bounce buffers back, credits back */
    for (uint32_t p = op->base; p < op->issued; p++) {
        if (p - op->base < 32 && (op->amask >> (p - op->base)) & 1u) {
            continue;
        }
        ep->parts_out--;
        if (op->bufs[p % ST_VB_WINDOW] >= 0) {
            st_vb_buf_put(ep->ctx, op->bufs[p % ST_VB_WINDOW]);
            op->bufs[p % ST_VB_WINDOW] = -1;
            ep->ctx->recv_bufs--;
        }
    }
    if (op->slot > 0 && ep->rslot[op->slot] == op) {
        ep->rslot[op->slot] = NULL;
    }
    st_vb_q_del(&ep->recvs, &ep->recvs_tail, op);
}

/* Sends what CTSs it can for op; 0 when part 0 could not go (later receives must wait). */
static int st_vb_recv_issue(st_net_ep_t *ep, st_vb_op_t *op)
{
    st_net_ctx_t *ctx = ep->ctx;

    if (op->slot < 0) {
        int s;

        for (s = 1; s < ST_VB_SLOTS && ep->rslot[s] != NULL; s++) {
        }
        if (s == ST_VB_SLOTS) {
            return 0;
        }
        op->slot        = s;
        op->gen         = ++ep->rgen[s];
        ep->rslot[s]    = op;
        op->reg         = (op->len > 0) ? st_vb_reg_find(ctx, op->buf, op->len) : NULL;
        op->psize       = op->reg ? st_verbs_config.zc_part : st_verbs_config.bounce_size;
        if (ctx->port_attr.max_msg_sz > 0 && op->psize > ctx->port_attr.max_msg_sz) {
            op->psize = ctx->port_attr.max_msg_sz;
        }
        op->psize = ST_MIN(op->psize, ST_VB_PART_MAX);
        op->nparts = (op->len == 0) ? 1 : (uint32_t)ST_DIV_ROUND_UP(op->len, op->psize);
    }
    while (op->issued < op->nparts && op->issued < op->base + ST_VB_WINDOW && op->last < 0 &&
           ep->parts_out < ST_VB_MAX_PARTS) {
        uint32_t    p = op->issued;
        size_t      off = (size_t)p * op->psize;
        st_vb_ctl_t ctl;

        memset(&ctl, 0, sizeof(ctl));
        if (op->reg != NULL) {
            ctl.addr = (uintptr_t)op->buf + off;
            ctl.rkey = op->reg->mr->rkey;
        } else if (op->len == 0) {
            ctl.addr = (uintptr_t)(ep->mem + ST_VB_ANY_OFF(ep));
            ctl.rkey = ep->mr->rkey;
        } else {
            int b;

            /* receives hold at most half the pool: sends, which free theirs at their own
             * completion, always find buffers, so no two ranks' receives starve each other's
             * sends (every rank's receives waiting for data its peers cannot send) */
            if (ctx->recv_bufs >= ST_MAX(ctx->maxbufs / 2, ST_VB_WINDOW)) {
                break;
            }
            if ((b = st_vb_buf_get(ctx)) < 0) {
                if (ctx->nbufs == 0) { /* none will ever come: registration failed */
                    st_vb_ep_fail(ep, ST_ERR_NO_MEMORY, 0, "%s", ctx->bounce_why);
                    return 0;
                }
                break;
            }
            ctx->recv_bufs++;
            op->bufs[p % ST_VB_WINDOW] = b;
            ctl.addr = (uintptr_t)ctx->bufs[b].addr;
            ctl.rkey = ctx->bufs[b].rkey;
        }
        ctl.type  = ST_VB_CTL_CTS;
        ctl.slot  = (uint16_t)op->slot;
        ctl.gen   = op->gen;
        ctl.tag   = op->tag;
        ctl.part  = p;
        ctl.plen  = ST_MIN(op->psize, op->len - ST_MIN(off, op->len));
        ctl.total = op->len;
        ctl.psize = op->psize;
        if (st_vb_ctl_send(ep, &ctl) != ST_OK) {
            if (op->bufs[p % ST_VB_WINDOW] >= 0) { /* not issued: release_recv skips it */
                st_vb_buf_put(ctx, op->bufs[p % ST_VB_WINDOW]);
                op->bufs[p % ST_VB_WINDOW] = -1;
                ctx->recv_bufs--;
            }
            return 0; /* the endpoint failed: its ops are completed */
        }
        op->issued++;
        ep->parts_out++;
    }
    return op->issued > 0;
}

static void st_vb_any_issue(st_net_ep_t *ep);

/* Sends the CTSs that can go, in posting order. */
static void st_vb_recvs_issue(st_net_ep_t *ep)
{
    if (ep->state != ST_VB_EP_READY) {
        return;
    }
    st_vb_any_issue(ep);
    for (st_vb_op_t *op = ep->recvs, *next; op != NULL && ep->state == ST_VB_EP_READY;
         op = next) {
        next = op->next;
        if (op->issued < op->nparts || op->slot < 0) {
            if (!st_vb_recv_issue(ep, op)) {
                break;
            }
        }
    }
}

static void st_vb_any_issue(st_net_ep_t *ep)
{
    st_net_ctx_t *ctx = ep->ctx;
    st_vb_ctl_t   ctl;

    if (!ctx->any_tag_set || ep->any_issued || ep->any_full || ep->state != ST_VB_EP_READY ||
        ep->parts_out >= ST_VB_MAX_PARTS) {
        return;
    }
    memset(&ctl, 0, sizeof(ctl));
    ctl.type  = ST_VB_CTL_CTS;
    ctl.slot  = ST_VB_ANY_SLOT;
    ctl.gen   = ++ep->rgen[ST_VB_ANY_SLOT];
    ctl.tag   = ctx->any_tag;
    ctl.addr  = (uintptr_t)(ep->mem + ST_VB_ANY_OFF(ep));
    ctl.rkey  = ep->mr->rkey;
    ctl.part  = 0;
    ctl.plen  = ST_VB_ANY_MAX;
    ctl.total = ST_VB_ANY_MAX;
    ctl.psize = ST_VB_ANY_MAX;
    if (st_vb_ctl_send(ep, &ctl) == ST_OK) {
        ep->any_issued = 1;
        ep->parts_out++;
    }
}

/* Hands a message waiting in an endpoint's any-source buffer to the pending any-source receive. */
static void st_vb_any_match(st_net_ctx_t *ctx)
{
    st_vb_op_t *op = ctx->any_op;

    if (op == NULL) {
        return;
    }
    for (uint32_t i = 0; i < ctx->neps; i++) {
        st_net_ep_t *ep = ctx->eps[i];
        st_status_t  status;

        if (ep == NULL || !ep->any_full) {
            continue;
        }
        status = (ep->any_trunc || ep->any_len > op->len) ? ST_ERR_TRUNCATED : ST_OK;
        if (status == ST_OK) {
            memcpy(op->buf, ep->mem + ST_VB_ANY_OFF(ep), ep->any_len);
        }
        ctx->any_op   = NULL;
        ep->any_full  = 0;
        ep->any_trunc = 0;
        st_vb_op_done(op, status, ep->any_len);
        st_vb_any_issue(ep);
        return;
    }
}

/* A data write with immediate arrived for one of ep's slots. */
static void st_vb_recv_data(st_net_ep_t *ep, uint32_t imm, uint32_t byte_len)
{
    uint32_t    slot = ST_VB_IMM_SLOT(imm), p;
    st_vb_op_t *op;
    size_t      off, plen = ST_VB_IMM_WOFF(imm) + byte_len; /* the part's bytes */

    if (slot == ST_VB_ANY_SLOT) {
        if (!ep->any_issued) {
            st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "rank %d wrote into the any-source slot, "
                          "which was not offered", ep->peer);
            return;
        }
        ep->any_issued = 0;
        ep->any_full   = 1;
        ep->any_len    = plen;
        ep->parts_out--;
        st_vb_any_match(ep->ctx);
        return;
    }
    op = (slot < ST_VB_SLOTS) ? ep->rslot[slot] : NULL;
    if (op == NULL) {
        st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "rank %d wrote into slot %u, which holds no "
                      "receive", ep->peer, slot);
        return;
    }
    p = op->base + ((ST_VB_IMM_PART(imm) - op->base) & ST_VB_IMM_PART_MASK);
    if (p >= op->issued || p - op->base >= ST_VB_WINDOW) {
        st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "rank %d wrote part %u of slot %u, which was not "
                      "offered (parts %u..%u)", ep->peer, p, slot, op->base, op->issued);
        return;
    }
    off = (size_t)p * op->psize;
    if (plen > op->psize || off + plen > op->len) {
        st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "rank %d wrote %zu B into part %u of a %zu B "
                      "receive", ep->peer, plen, p, op->len);
        return;
    }
    if (op->bufs[p % ST_VB_WINDOW] >= 0) {
        int b = op->bufs[p % ST_VB_WINDOW];

        if (op->req != NULL && plen > 0) {
            memcpy((uint8_t *)op->buf + off, ep->ctx->bufs[b].addr, plen);
        }
        st_vb_buf_put(ep->ctx, b);
        ep->ctx->recv_bufs--;
        op->bufs[p % ST_VB_WINDOW] = -1;
    }
    ep->parts_out--;
    op->arrived++;
    op->amask |= 1u << (p - op->base);
    while (op->amask & 1u) {
        op->amask >>= 1;
        op->base++;
    }
    if (imm & ST_VB_IMM_LAST) {
        op->last  = p;
        op->total = off + plen;
    }
    if (op->last >= 0 && (int64_t)op->base > op->last) {
        st_vb_recv_release(ep, op);
        st_vb_op_done(op, ST_OK, op->total);
    }
}

static void st_vb_recv_trunc(st_net_ep_t *ep, const st_vb_ctl_t *ctl)
{
    st_vb_op_t *op;

    if (ctl->slot == ST_VB_ANY_SLOT) {
        if (ep->any_issued) {
            ep->any_issued = 0;
            ep->any_full   = 1;
            ep->any_trunc  = 1;
            ep->any_len    = ctl->total;
            ep->parts_out--;
            st_vb_any_match(ep->ctx);
        }
        return;
    }
    op = (ctl->slot < ST_VB_SLOTS) ? ep->rslot[ctl->slot] : NULL;
    if (op == NULL || op->gen != ctl->gen) {
        return;
    }
    st_warn(ST_SUB_VERBS, "%s rank %d: rank %d sent %llu B with tag 0x%llx to a %zu B "
            "receive: truncated on both sides", ep->ctx->name, ep->ctx->rank, ep->peer,
            (unsigned long long)ctl->total, (unsigned long long)ctl->tag, op->len);
    st_vb_recv_release(ep, op);
    st_vb_op_done(op, ST_ERR_TRUNCATED, ctl->total);
}

/* ---- send side ------------------------------------------------------------------------------- */

static void st_vb_waitq_append(st_net_ep_t *ep, st_vb_cts_t *c)
{
    c->next = NULL;
    if (ep->waitq_tail != NULL) {
        ep->waitq_tail->next = c;
    } else {
        ep->waitq = c;
    }
    ep->waitq_tail = c;
}

static void st_vb_send_finish_check(st_net_ep_t *ep, st_vb_op_t *op)
{
    if (op->final && op->done_wr == op->posted) {
        /* the slot may serve the receiver's next message already (its CTS came before this
         * send's last completion): only this send's own claim goes */
        if (ep->sslot[op->slot].op == op) {
            ep->sslot[op->slot].op = NULL;
        }
        st_vb_q_del(&ep->msends, &ep->msends_tail, op);
        st_vb_op_done(op, ST_OK, op->len);
    }
}

/* Posts what it can of the part in c (for its send c->op): 1 when all of it is posted, 0 when a
 * resource is missing (c keeps its progress), -1 when the endpoint failed. */
static int st_vb_part_post(st_net_ep_t *ep, st_vb_cts_t *c)
{
    st_net_ctx_t *ctx = ep->ctx;
    st_vb_op_t   *op = c->op;
    size_t        off = (size_t)c->ctl.part * c->ctl.psize;
    size_t        n = ST_MIN(c->ctl.plen, op->len - ST_MIN(off, op->len));
    int           last_part = (off + n >= op->len);
    int           q = (int)(c->ctl.part % (uint32_t)ep->nqps);

    do {
        /* whole 4 KiB units but for the part's last write: its immediate gives its offset */
        size_t             piece_max = (op->reg && ctx->port_attr.max_msg_sz > 0)
                                           ? (size_t)ctx->port_attr.max_msg_sz
                                           : st_verbs_config.bounce_size;
        size_t             piece = ST_MIN(n - c->sent, ST_MAX(piece_max / ST_VB_IMM_UNIT, 1) *
                                                           ST_VB_IMM_UNIT);
        int                last_piece = (c->sent + piece >= n);
        struct ibv_send_wr wr, *bad;
        struct ibv_sge     sge;
        int                pi, b = -1, ret;

        if (ep->sq_used[q] >= ST_VB_SQ_DEPTH - (q == 0 ? ST_VB_CTL_RESERVE : 0) ||
            ep->part_free < 0) {
            return 0;
        }
        memset(&wr, 0, sizeof(wr));
        if (piece > 0) {
            if (op->reg != NULL) {
                sge.addr = (uintptr_t)op->buf + off + c->sent;
                sge.lkey = op->reg->mr->lkey;
            } else {
                b = st_vb_buf_get(ctx);
                if (b < 0 && ctx->nbufs == 0) { /* none will ever come: registration failed */
                    st_vb_ep_fail(ep, ST_ERR_NO_MEMORY, 0, "%s", ctx->bounce_why);
                    return -1;
                }
                if (b < 0) {
                    return 0;
                }
                memcpy(ctx->bufs[b].addr, (const uint8_t *)op->buf + off + c->sent, piece);
                sge.addr = (uintptr_t)ctx->bufs[b].addr;
                sge.lkey = ctx->bufs[b].lkey;
            }
            sge.length = (uint32_t)piece;
            wr.sg_list = &sge;
            wr.num_sge = 1;
        }
        pi = ep->part_free;
        ep->part_free      = ep->parts[pi].next;
        ep->parts[pi].op   = op;
        ep->parts[pi].buf  = b;
        ep->parts[pi].next = -1;
        wr.wr_id               = ST_VB_WRID(ST_VB_WR_DATA, q, pi, ep->idx, ep->gen);
        wr.send_flags          = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = c->ctl.addr + c->sent;
        wr.wr.rdma.rkey        = c->ctl.rkey;
        if (last_piece) {
            wr.opcode   = IBV_WR_RDMA_WRITE_WITH_IMM;
            wr.imm_data = htonl(ST_VB_IMM(c->ctl.slot, c->ctl.part, c->sent, last_part));
        } else {
            wr.opcode = IBV_WR_RDMA_WRITE;
        }
        ret = ctx->ibv->post_send(ep->qp[q], &wr, &bad);
        if (ret != 0) {
            ep->parts[pi].op   = NULL;
            ep->parts[pi].next = ep->part_free;
            ep->part_free      = pi;
            if (b >= 0) {
                st_vb_buf_put(ctx, b);
            }
            st_vb_ep_fail(ep, ST_ERR_IO, 1, "ibv_post_send (RDMA write of %zu B) on QP 0x%x "
                          "(%s) to rank %d failed: %s", piece, ep->qp[q]->qp_num, ctx->hca,
                          ep->peer, strerror(ret));
            return -1;
        }
        ep->sq_used[q]++;
        op->posted++;
        c->sent += piece;
        if (last_piece) {
            break;
        }
    } while (1);
    if (last_part) {
        op->final = 1;
        ep->sslot[c->ctl.slot].finished = 1;
    }
    return 1;
}

/* A CTS part for the matched send op: posted now or queued behind earlier waiting parts. */
static void st_vb_send_part(st_net_ep_t *ep, st_vb_op_t *op, const st_vb_ctl_t *ctl)
{
    size_t       off = (size_t)ctl->part * ctl->psize;
    st_vb_cts_t *c;

    if (ep->sslot[ctl->slot].finished || (ctl->part > 0 && off >= op->len)) {
        return; /* a part past the message's end: nothing to send */
    }
    c = calloc(1, sizeof(*c));
    if (c == NULL) {
        st_vb_ep_fail(ep, ST_ERR_NO_MEMORY, 1, "out of memory for a part to rank %d", ep->peer);
        return;
    }
    c->ctl = *ctl;
    c->op  = op;
    if (ep->waitq != NULL) {
        st_vb_waitq_append(ep, c);
        return;
    }
    switch (st_vb_part_post(ep, c)) {
    case 1:
        free(c);
        break;
    case 0:
        st_vb_waitq_append(ep, c);
        break;
    default:
        free(c);
        break;
    }
}

static void st_vb_waitq_run(st_net_ep_t *ep)
{
    while (ep->waitq != NULL && ep->state == ST_VB_EP_READY) {
        st_vb_cts_t *c = ep->waitq;
        int          r = st_vb_part_post(ep, c);

        if (r == 0) {
            return;
        }
        if (r < 0) {
            return; /* failed: the endpoint's queues were emptied */
        }
        ep->waitq = c->next;
        if (ep->waitq == NULL) {
            ep->waitq_tail = NULL;
        }
        free(c);
    }
}

/* Matches send op to the part-0 CTS ctl of slot s. */
static void st_vb_send_match(st_net_ep_t *ep, st_vb_op_t *op, const st_vb_ctl_t *ctl)
{
    st_vb_sslot_t *s = &ep->sslot[ctl->slot];

    st_vb_q_del(&ep->sends, &ep->sends_tail, op);
    op->matched = 1;
    op->slot    = ctl->slot;
    op->gen     = ctl->gen;
    op->rtotal  = ctl->total;
    if (op->len > ctl->total) {
        st_vb_ctl_t t;

        memset(&t, 0, sizeof(t));
        t.type  = ST_VB_CTL_TRUNC;
        t.slot  = ctl->slot;
        t.gen   = ctl->gen;
        t.tag   = op->tag;
        t.total = op->len;
        s->finished = 1;
        st_warn(ST_SUB_VERBS, "%s rank %d: a %zu B send with tag 0x%llx meets a %llu B receive "
                "on rank %d: truncated on both sides", ep->ctx->name, ep->ctx->rank, op->len,
                (unsigned long long)op->tag, (unsigned long long)ctl->total, ep->peer);
        (void)st_vb_ctl_send(ep, &t);
        st_vb_op_done(op, ST_ERR_TRUNCATED, ctl->total); /* len: what the receive takes */
        return;
    }
    if (op->len > 0 && ctl->slot != ST_VB_ANY_SLOT) {
        op->reg = st_vb_reg_find(ep->ctx, op->buf, op->len);
    }
    s->op = op;
    st_vb_q_append(&ep->msends, &ep->msends_tail, op);
    st_vb_send_part(ep, op, ctl);
    while (s->parts != NULL) {
        st_vb_cts_t *c = s->parts;

        s->parts = c->next;
        if (ep->state != ST_VB_EP_FAILED) {
            st_vb_send_part(ep, op, &c->ctl);
        }
        free(c);
    }
    s->parts_tail = NULL;
}

/* Keeps a copy of ctl at the end of the list (head, tail) until its send comes. */
static void st_vb_cts_keep(st_net_ep_t *ep, const st_vb_ctl_t *ctl, st_vb_cts_t **head,
                           st_vb_cts_t **tail)
{
    st_vb_cts_t *c = calloc(1, sizeof(*c));

    if (c == NULL) {
        st_vb_ep_fail(ep, ST_ERR_NO_MEMORY, 1, "out of memory for a CTS of rank %d", ep->peer);
        return;
    }
    c->ctl = *ctl;
    if (*tail != NULL) {
        (*tail)->next = c;
    } else {
        *head = c;
    }
    *tail = c;
}

static void st_vb_cts_take(st_net_ep_t *ep, const st_vb_ctl_t *ctl)
{
    st_vb_sslot_t *s = &ep->sslot[ctl->slot];

    if (ctl->part == 0) {
        st_vb_op_t *op;

        for (st_vb_cts_t *c = s->parts, *next; c != NULL; c = next) { /* stale, never matched */
            next = c->next;
            free(c);
        }
        s->parts = s->parts_tail = NULL;
        s->gen      = ctl->gen;
        s->active   = 1;
        s->finished = 0;
        s->op       = NULL;
        for (op = ep->sends; op != NULL && op->tag != ctl->tag; op = op->next) {
        }
        if (op != NULL) {
            st_vb_send_match(ep, op, ctl);
        } else {
            st_vb_cts_keep(ep, ctl, &ep->cts0, &ep->cts0_tail);
        }
        return;
    }
    if (!s->active || s->gen != ctl->gen || s->finished) {
        return; /* a part past a finished message's end */
    }
    if (s->op != NULL) {
        st_vb_send_part(ep, s->op, ctl);
    } else {
        st_vb_cts_keep(ep, ctl, &s->parts, &s->parts_tail);
    }
}

/* ---- entry points ---------------------------------------------------------------------------- */

st_status_t st_vb_isend(st_net_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                        st_memh_t *memh ST_UNUSED, st_request_t *req)
{
    st_vb_op_t  *op;
    st_vb_cts_t *c, *prev = NULL;

    if (ep->state == ST_VB_EP_FAILED) {
        st_vb_req_fail_now(req, ep, ST_ERR_REMOTE);
        return ST_OK;
    }
    op = st_vb_op_new(ep, req, 1, (void *)buf, len, tag);
    if (op == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    for (c = ep->cts0; c != NULL && c->ctl.tag != op->tag; prev = c, c = c->next) {
    }
    if (c == NULL) {
        st_vb_q_append(&ep->sends, &ep->sends_tail, op);
        return ST_OK;
    }
    if (prev != NULL) {
        prev->next = c->next;
    } else {
        ep->cts0 = c->next;
    }
    if (ep->cts0_tail == c) {
        ep->cts0_tail = prev;
    }
    op->queued = 0;
    st_vb_send_match(ep, op, &c->ctl);
    free(c);
    return ST_OK;
}

st_status_t st_vb_irecv(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag,
                        st_memh_t *memh ST_UNUSED, st_request_t *req)
{
    st_vb_op_t *op;

    if (ep->state == ST_VB_EP_FAILED) {
        st_vb_req_fail_now(req, ep, ST_ERR_REMOTE);
        return ST_OK;
    }
    op = st_vb_op_new(ep, req, 0, buf, len, tag);
    if (op == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    st_vb_q_append(&ep->recvs, &ep->recvs_tail, op);
    st_vb_recvs_issue(ep);
    return ST_OK;
}

st_status_t st_vb_irecv_any(st_net_ctx_t *ctx, void *buf, size_t len, uint64_t tag,
                            st_request_t *req)
{
    st_vb_op_t *op;

    if (ctx->any_op != NULL) {
        st_error(ST_SUB_VERBS, "%s rank %d: a second any-source receive while one is pending "
                 "(the verbs transport keeps one per context)", ctx->name, ctx->rank);
        return ST_ERR_UNSUPPORTED;
    }
    if (ctx->any_tag_set && ctx->any_tag != (tag & ST_NET_TAG_MASK)) {
        st_error(ST_SUB_VERBS, "%s rank %d: any-source receives with two tags (0x%llx, 0x%llx):"
                 " the verbs transport offers one per context", ctx->name, ctx->rank,
                 (unsigned long long)ctx->any_tag, (unsigned long long)tag);
        return ST_ERR_UNSUPPORTED;
    }
    op = st_vb_op_new(NULL, req, 0, buf, len, tag);
    if (op == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    req->tl_ep       = NULL;
    op->ctx          = ctx;
    ctx->any_op      = op;
    ctx->any_tag     = tag & ST_NET_TAG_MASK;
    ctx->any_tag_set = 1;
    for (uint32_t i = 0; i < ctx->neps; i++) {
        if (ctx->eps[i] != NULL) {
            st_vb_any_issue(ctx->eps[i]);
        }
    }
    st_vb_any_match(ctx);
    return ST_OK;
}

void st_vb_cancel(st_net_ctx_t *ctx ST_UNUSED, st_request_t *req, int force)
{
    st_vb_op_t  *op = req->tl_req;
    st_net_ep_t *ep;

    if (req->done || op == NULL) {
        return;
    }
    if (op->ep == NULL) { /* the any-source receive of op->ctx */
        if (op->ctx->any_op == op) {
            op->ctx->any_op = NULL;
        }
        st_vb_op_done(op, ST_ERR_CANCELED, 0);
        return;
    }
    ep = op->ep;
    if (op->is_send) {
        if (!op->matched) {
            st_vb_q_del(&ep->sends, &ep->sends_tail, op);
            st_vb_op_done(op, ST_ERR_CANCELED, 0);
        } else if (force) {
            st_vb_ep_fail(ep, ST_ERR_CANCELED, 0, "send to rank %d cancelled: connection "
                          "closed", ep->peer);
        }
        return;
    }
    if (op->slot < 0) {
        st_vb_q_del(&ep->recvs, &ep->recvs_tail, op);
        st_vb_op_done(op, ST_ERR_CANCELED, 0);
    } else if (op->reg == NULL && op->len > 0) {
        /* its parts land in bounce buffers: the request completes now, the op drains alone (the
         * message its CTS asked for is taken and dropped: cancels come from a failing
         * communicator, whose later receives never run) */
        op->req->status = ST_ERR_CANCELED;
        op->req->tl_req = NULL;
        __atomic_store_n(&op->req->done, 1, __ATOMIC_RELEASE);
        op->req = NULL;
    } else if (force) {
        st_vb_ep_fail(ep, ST_ERR_CANCELED, 0, "receive from rank %d cancelled: connection "
                      "closed", ep->peer);
    }
}

void st_vb_ep_flush_ops(st_net_ep_t *ep, st_status_t status)
{
    while (ep->recvs != NULL) {
        st_vb_op_t *op = ep->recvs;

        st_vb_recv_release(ep, op);
        st_vb_op_done(op, status, 0);
    }
    while (ep->sends != NULL) {
        st_vb_op_t *op = ep->sends;

        st_vb_q_del(&ep->sends, &ep->sends_tail, op);
        st_vb_op_done(op, status, 0);
    }
    for (st_vb_cts_t *c = ep->waitq, *next; c != NULL; c = next) {
        next = c->next;
        free(c);
    }
    ep->waitq = ep->waitq_tail = NULL;
    while (ep->msends != NULL) {
        st_vb_op_t *op = ep->msends;

        st_vb_q_del(&ep->msends, &ep->msends_tail, op);
        for (int i = 0; i < ST_VB_SQ_DEPTH * ep->nqps; i++) {
            if (ep->parts[i].op == op) {
                ep->parts[i].op = NULL; /* its completion (flushed) frees the record */
            }
        }
        st_vb_op_done(op, status, 0);
    }
    for (int s = 0; s < ST_VB_SLOTS; s++) {
        ep->sslot[s].op       = NULL;
        ep->sslot[s].finished = 1;
    }
    ep->any_issued = 0;
}

void st_vb_ep_ready(st_net_ep_t *ep)
{
    st_vb_recvs_issue(ep);
}

/* One work completion. */
static void st_vb_wc(st_net_ctx_t *ctx, const struct ibv_wc *wc)
{
    st_net_ep_t *ep = st_vb_ep_lookup(ctx, ST_VB_WRID_EPI(wc->wr_id), ST_VB_WRID_EPG(wc->wr_id));
    int          kind = ST_VB_WRID_KIND(wc->wr_id), q = ST_VB_WRID_QP(wc->wr_id);
    uint32_t     idx = ST_VB_WRID_IDX(wc->wr_id);

    if (ep == NULL) {
        return; /* an endpoint closed since: its resources went with it */
    }
    if (kind == ST_VB_WR_CTL && idx < ST_VB_SQ_DEPTH) {
        ep->ctl_free[ep->nctl_free++] = (int)idx;
        ep->sq_used[q]--;
    } else if (kind == ST_VB_WR_DATA && idx < (uint32_t)(ST_VB_SQ_DEPTH * ep->nqps)) {
        st_vb_part_t *part = &ep->parts[idx];
        st_vb_op_t   *op = part->op;

        ep->sq_used[q]--;
        if (part->buf >= 0) {
            st_vb_buf_put(ctx, part->buf);
        }
        part->buf  = -1;
        part->op   = NULL;
        part->next = ep->part_free;
        ep->part_free = (int)idx;
        if (op != NULL && wc->status == IBV_WC_SUCCESS) {
            op->done_wr++;
            st_vb_send_finish_check(ep, op);
        }
    }
    if (wc->status != IBV_WC_SUCCESS) {
        if (ep->state != ST_VB_EP_FAILED) {
            int local = (wc->status == IBV_WC_LOC_PROT_ERR || wc->status == IBV_WC_LOC_LEN_ERR);

            char line[320];

            /* the requests' reason (which travels to every rank in the collective's error and
             * the failure notices) is the fact; the likely cause is said here, once */
            snprintf(line, sizeof(line), "%s (work completion status %d, vendor error 0x%x) on "
                     "%s:%u QP 0x%x to rank %d (%s, LID %u), %s",
                     ctx->ibv->wc_status_str(wc->status), (int)wc->status, wc->vendor_err,
                     ctx->hca, ctx->port, wc->qp_num, ep->peer, ep->paddr.hca, ep->paddr.lid,
                     kind == ST_VB_WR_RECV ? "receive"
                                           : (kind == ST_VB_WR_CTL ? "control message"
                                                                   : "RDMA write"));
            st_error(ST_SUB_VERBS, "%s rank %d: %s: %s", ctx->name, ctx->rank, line,
                     st_vb_wc_hint(wc->status));
            st_vb_ep_fail(ep, local ? ST_ERR_IO : ST_ERR_REMOTE, 0, "%s", line);
        }
        return;
    }
    if (kind != ST_VB_WR_RECV || idx >= ST_VB_RQ_DEPTH || q >= ep->nqps ||
        ep->state == ST_VB_EP_FAILED) {
        return;
    }
    if (ep->state == ST_VB_EP_WAIT_READY) {
        /* the initiator's first message: it is at RTS, so the READY byte is news no more */
        st_vb_ep_set_ready(ep);
    }
    if (wc->opcode == IBV_WC_RECV) {
        st_vb_ctl_t ctl;

        memcpy(&ctl, ep->mem + ST_VB_RECV_OFF(q, idx), sizeof(ctl));
        st_vb_repost(ep, q, idx);
        if (ctl.slot >= ST_VB_SLOTS) {
            st_vb_ep_fail(ep, ST_ERR_INTERNAL, 1, "rank %d sent a control message for slot %u",
                          ep->peer, ctl.slot);
        } else if (ctl.type == ST_VB_CTL_CTS) {
            st_vb_cts_take(ep, &ctl);
        } else if (ctl.type == ST_VB_CTL_TRUNC) {
            st_vb_recv_trunc(ep, &ctl);
        }
    } else if (wc->opcode == IBV_WC_RECV_RDMA_WITH_IMM) {
        st_vb_repost(ep, q, idx);
        st_vb_recv_data(ep, ntohl(wc->imm_data), wc->byte_len);
    }
}

int st_vb_cq_poll(st_net_ctx_t *ctx, int max)
{
    struct ibv_wc wcs[32];
    int           total = 0, n;

    for (int c = 0; c < ctx->ncqs; c++) {
        do {
            n = ctx->ibv->poll_cq(ctx->cqs[c], 32, wcs);
            if (n < 0) {
                st_error(ST_SUB_VERBS, "%s rank %d: ibv_poll_cq on %s failed (%d): the "
                         "completion queue overran", ctx->name, ctx->rank, ctx->hca, n);
                for (uint32_t i = 0; i < ctx->neps; i++) {
                    if (ctx->eps[i] != NULL) {
                        st_vb_ep_fail(ctx->eps[i], ST_ERR_IO, 0, "%s's completion queue "
                                      "overran (ibv_poll_cq %d)", ctx->hca, n);
                    }
                }
                return total;
            }
            for (int i = 0; i < n; i++) {
                st_vb_wc(ctx, &wcs[i]);
            }
            total += n;
        } while (n == 32 && total < max);
    }
    return total;
}

st_status_t st_vb_progress(st_net_ctx_t *ctx)
{
    int did = st_vb_cq_poll(ctx, 256);

    /* the sockets and events (handshakes, hang-ups): every call while idle, every 16th while
     * completions flow */
    if (did == 0 || (++ctx->progress_calls & 15) == 0) {
        did += st_vb_conn_progress(ctx);
    }
    for (uint32_t i = 0; i < ctx->neps; i++) {
        st_net_ep_t *ep = ctx->eps[i];

        if (ep != NULL && ep->state == ST_VB_EP_READY) {
            if (ep->waitq != NULL) {
                st_vb_waitq_run(ep);
            }
            if (ep->recvs != NULL ||
                (ctx->any_tag_set && !ep->any_issued && !ep->any_full)) {
                st_vb_recvs_issue(ep);
            }
        }
    }
    if (ctx->any_op != NULL) {
        st_vb_any_match(ctx);
    }
    return did ? ST_OK : ST_INPROGRESS;
}

st_status_t st_vb_arm(st_net_ctx_t *ctx)
{
    st_vb_channel_drain(ctx, 1);
    for (int c = 0; c < ctx->ncqs; c++) {
        if (ctx->ibv->req_notify_cq(ctx->cqs[c], 0) != 0) {
            return ST_INPROGRESS;
        }
    }
    /* completions that arrived before the CQ was armed raise no event: take them now */
    return (st_vb_progress(ctx) == ST_OK) ? ST_INPROGRESS : ST_OK;
}
