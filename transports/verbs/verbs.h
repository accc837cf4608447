/*
 * verbs.h - private to transports/verbs: the RC transport over libibverbs.
 *
 * Files, by object: verbs_ibv.c (the libibverbs table), verbs_dev.c (HCA ports: selection by
 * STRATA_IB_HCA, context = PD + CQ + completion channel + out-of-band listener, addresses),
 * verbs_conn.c (endpoints: QPs and their INIT/RTR/RTS transitions, the out-of-band handshake that
 * stays open as the liveness signal, failure and disconnect), verbs_proto.c (the message
 * protocol: clear-to-send, RDMA write with immediate, tag matching, completions), verbs_mem.c
 * (bounce pool and the registration of strataMemAlloc memory), verbs_net.c (the st_net_ops_t).
 *
 * Protocol (receiver-driven, as NCCL's net_ib; see verbs_proto.c for the details):
 *   irecv: the receiver takes a slot, splits its buffer into parts and sends, as a control message
 *          (IBV_WR_SEND into the peer's pre-posted receive buffers), one CTS per part {slot, gen,
 *          part, tag, addr, rkey, part length, buffer length}; the target is the user's buffer
 *          when it is registered (strataMemAlloc memory, zero-copy), else a bounce buffer.
 *   isend: matched to the oldest CTS of part 0 with its tag (queued either way, so any posting
 *          order works); each part is RDMA writes, the last WITH_IMM (imm = slot, part, that
 *          write's offset in the part, LAST); a message longer than the receiver's buffer sends
 *          TRUNC instead and both sides fail with ST_ERR_TRUNCATED.
 * Every work request is signaled; receive work requests are re-posted as they complete and the
 * peer never has more messages in flight than they cover (the bounds are below).
 */
#ifndef ST_VERBS_H
#define ST_VERBS_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>

#include "base/socket.h"
#include "transports/transport.h"
#include "transports/verbs/verbs_ibv.h"

/* ---- parameters (verbs_net.c) --------------------------------------------------------------- */
typedef struct st_verbs_config {
    char    *lib;          /* STRATA_IBVERBS_LIB */
    char    *hca;          /* STRATA_IB_HCA, NCCL_IB_HCA's syntax */
    unsigned timeout;      /* STRATA_IB_TIMEOUT: 4.096 us * 2^timeout per try */
    unsigned retry_cnt;    /* STRATA_IB_RETRY_CNT */
    int      gid_index;    /* STRATA_IB_GID_INDEX, -1: an IPv4-mapped (RoCE v2) GID */
    unsigned tc;           /* STRATA_IB_TC */
    unsigned sl;           /* STRATA_IB_SL */
    unsigned qps_per_conn; /* STRATA_IB_QPS_PER_CONN */
    size_t   bounce_size;  /* STRATA_IB_BOUNCE_SIZE: bytes per bounce buffer (= part) */
    size_t   bounce_max;   /* STRATA_IB_BOUNCE_MAX: bytes of bounce buffers per context */
    size_t   zc_part;      /* STRATA_IB_ZC_PART: bytes per part of a zero-copy receive */
} st_verbs_config_t;

extern st_verbs_config_t st_verbs_config;

/* ---- limits and their reasons ---------------------------------------------------------------- */
#define ST_VB_MAGIC      0x53545642u /* "STVB" */
#define ST_VB_VERSION    2 /* 2: imm_data with the write's offset in its part */
#define ST_VB_MAX_QPS    8
#define ST_VB_SLOTS      256  /* receive slots per endpoint; slot 0 is the any-source slot */
#define ST_VB_ANY_SLOT   0
#define ST_VB_MAX_PARTS  32   /* CTS parts a receiver has outstanding per endpoint */
#define ST_VB_WINDOW     4    /* parts of one receive outstanding at once */
/* A QP's receive queue takes, from its peer: CTSs of unfinished parts (<= MAX_PARTS), CTSs of
 * parts a finished message left unused (<= (WINDOW-1) * MAX_PARTS, discarded by the sender but
 * consuming a receive each), data writes into this side's parts (<= MAX_PARTS) and TRUNCs
 * (<= MAX_PARTS): 192 at most, so 256 receive work requests never run out. The send queue holds
 * data writes (a part may be several: pieces of bounce_size when it is sent from plain memory)
 * and control messages (CTS and TRUNC, <= 2 * MAX_PARTS + 1): data stops short of
 * ST_VB_CTL_RESERVE entries on QP 0, which carries the control messages. */
#define ST_VB_RQ_DEPTH   256
#define ST_VB_SQ_DEPTH   256
#define ST_VB_CTL_SIZE   64   /* bytes of a control message buffer */
#define ST_VB_ANY_MAX    4096 /* longest message an any-source receive takes */
#define ST_VB_CQ_PER_QP  (ST_VB_RQ_DEPTH + ST_VB_SQ_DEPTH)
#define ST_VB_MAX_CQS    64
/* Send queue entries of QP 0 that data writes leave to control messages: a part written through
 * bounce buffers is several writes (a zero-copy part of zc_part bytes from plain memory: one per
 * bounce_size), so data alone could fill the queue; CTSs (<= MAX_PARTS + the any-source slot)
 * and TRUNCs (<= the peer's MAX_PARTS) always find room. */
#define ST_VB_CTL_RESERVE (2 * ST_VB_MAX_PARTS + 2)

/* imm_data of a data write (host order before htonl): slot (8 bits), part modulo 64 (6), the
 * write's offset in its part in 4 KiB units (17), LAST (1). A part may take several writes (a
 * plain sender's bounce pieces into a zero-copy part, 4 MiB); only the last carries the
 * immediate, and its byte_len covers that write alone: the offset tells the receiver where the
 * part, and for LAST the message, ends. So every write but a part's last is a multiple of
 * 4 KiB, and parts are at most ST_VB_PART_MAX. */
#define ST_VB_IMM_LAST       (1u << 31)
#define ST_VB_IMM_SLOT(_i)   ((_i) & 0xffu)
#define ST_VB_IMM_PART_MASK  0x3fu
#define ST_VB_IMM_PART(_i)   (((_i) >> 8) & ST_VB_IMM_PART_MASK)
#define ST_VB_IMM_UNIT       4096u
#define ST_VB_IMM_WOFF(_i)   ((size_t)(((_i) >> 14) & 0x1ffffu) * ST_VB_IMM_UNIT)
#define ST_VB_IMM(_slot, _part, _woff, _last)                                                  \
    ((uint32_t)(_slot) | (((uint32_t)(_part) & ST_VB_IMM_PART_MASK) << 8) |                   \
     ((uint32_t)((_woff) / ST_VB_IMM_UNIT) << 14) | ((_last) ? ST_VB_IMM_LAST : 0))
#define ST_VB_PART_MAX       ((size_t)256 << 20) /* offsets < 2^17 units */
_Static_assert(ST_VB_SLOTS <= 256 && ST_VB_WINDOW < 64, "imm_data fields too narrow");

/* wr_id: kind (4 bits), QP index (4), index (24), endpoint index (16), endpoint generation (16) */
enum { ST_VB_WR_RECV = 1, ST_VB_WR_CTL = 2, ST_VB_WR_DATA = 3 };
#define ST_VB_WRID(_kind, _qp, _idx, _epi, _epg)                                                \
    ((uint64_t)(_kind) | ((uint64_t)(_qp) << 4) | ((uint64_t)(_idx) << 8) |                    \
     ((uint64_t)(_epi) << 32) | ((uint64_t)(_epg) << 48))
#define ST_VB_WRID_KIND(_w) ((int)((_w) & 0xf))
#define ST_VB_WRID_QP(_w)   ((int)(((_w) >> 4) & 0xf))
#define ST_VB_WRID_IDX(_w)  ((uint32_t)(((_w) >> 8) & 0xffffff))
#define ST_VB_WRID_EPI(_w)  ((uint32_t)(((_w) >> 32) & 0xffff))
#define ST_VB_WRID_EPG(_w)  ((uint16_t)((_w) >> 48))

/* ---- wire formats ---------------------------------------------------------------------------- */
/* The published address: the HCA port and the out-of-band listener. */
typedef struct st_vb_addr {
    uint32_t      magic;
    uint16_t      version;
    uint8_t       port;
    uint8_t       link_layer; /* IBV_LINK_LAYER_* */
    uint16_t      lid;
    uint8_t       mtu;        /* enum ibv_mtu, active */
    uint8_t       gid_index;
    uint8_t       gid[16];
    uint64_t      nonce;      /* the context's, checked by the handshake */
    char          hca[32];
    st_sockaddr_t oob;
} st_vb_addr_t;

/* The out-of-band handshake, one each way (initiator: the lower rank). */
typedef struct st_vb_hello {
    uint32_t magic;
    uint16_t version;
    uint16_t nqps;
    int32_t  from_rank;
    int32_t  to_rank;
    uint64_t from_nonce;
    uint64_t to_nonce;
    uint32_t qpn[ST_VB_MAX_QPS];
    uint32_t psn[ST_VB_MAX_QPS];
} st_vb_hello_t;

enum { ST_VB_CTL_CTS = 1, ST_VB_CTL_TRUNC = 2 };
typedef struct st_vb_ctl {
    uint8_t  type;
    uint8_t  pad;
    uint16_t slot;
    uint32_t gen;
    uint64_t tag;
    uint64_t addr;    /* CTS: where the part goes */
    uint32_t rkey;
    uint32_t part;    /* CTS: part index */
    uint64_t plen;    /* CTS: bytes of the part */
    uint64_t total;   /* CTS: bytes of the receive buffer; TRUNC: bytes of the message */
    uint64_t psize;   /* CTS: bytes per part (part p starts at p * psize) */
} st_vb_ctl_t;

_Static_assert(sizeof(st_vb_ctl_t) <= ST_VB_CTL_SIZE, "control message too large");

/* ---- memory (verbs_mem.c) -------------------------------------------------------------------- */
typedef struct st_vb_buf {
    void    *addr;
    uint32_t lkey;
    uint32_t rkey;
    int      next; /* free list */
} st_vb_buf_t;

/* A registration of a whole strataMemAlloc allocation in this context's PD. */
typedef struct st_vb_reg {
    void              *base;
    size_t             size;
    struct ibv_mr     *mr;
    struct st_vb_reg  *next;
} st_vb_reg_t;

/* ---- operations (verbs_proto.c) -------------------------------------------------------------- */
typedef struct st_vb_op {
    st_request_t    *req;      /* NULL: the caller cancelled it; the op drains alone */
    st_net_ep_t     *ep;       /* NULL: the any-source receive of ctx */
    st_net_ctx_t    *ctx;
    int              is_send;
    void            *buf;
    size_t           len;
    uint64_t         tag;
    st_vb_reg_t     *reg;      /* buf lies in this registration (zero-copy), or NULL */
    struct st_vb_op *prev, *next; /* the endpoint's queue: unmatched sends / receives */
    int              queued;
    /* receive */
    int              slot;     /* -1 until it has one */
    uint32_t         gen;
    size_t           psize;
    uint32_t         nparts;
    uint32_t         issued;   /* parts whose CTS went out */
    uint32_t         arrived;
    uint32_t         base;     /* lowest part not arrived yet */
    uint32_t         amask;    /* parts base.. that arrived (bit 0: base) */
    size_t           total;    /* bytes received, once the LAST part arrived */
    int64_t          last;     /* the part flagged LAST, -1 until it arrives */
    int              bufs[ST_VB_WINDOW]; /* bounce buffer of part (p % WINDOW), -1: none */
    /* send */
    uint64_t         rtotal;   /* receiver's buffer length */
    uint32_t         posted;   /* data writes posted */
    uint32_t         done_wr;  /* data writes completed */
    int              final;    /* the LAST part is posted */
    int              matched;
} st_vb_op_t;

/* A CTS the sender holds: part 0 not yet matched to a send, or a later part waiting for its send's
 * resources (a bounce buffer, a send queue slot). */
typedef struct st_vb_cts {
    st_vb_ctl_t       ctl;
    st_vb_op_t       *op;    /* waitq: the send it belongs to */
    uint64_t          sent;  /* waitq: bytes of the part already posted */
    struct st_vb_cts *next;
} st_vb_cts_t;

/* The sender's view of one of the peer's slots. */
typedef struct st_vb_sslot {
    uint32_t     gen;
    int          active;   /* a CTS of part 0 of gen arrived */
    int          finished; /* the message went (LAST or TRUNC): later parts of gen are stale */
    st_vb_op_t  *op;       /* the send matched to it */
    st_vb_cts_t *parts, *parts_tail; /* parts that arrived before the match */
} st_vb_sslot_t;

/* A data write in flight. */
typedef struct st_vb_part {
    st_vb_op_t *op;
    int         buf; /* bounce buffer, -1: none */
    int         next;
} st_vb_part_t;

/* ---- endpoints and contexts (verbs_conn.c, verbs_dev.c) -------------------------------------- */
typedef enum {
    ST_VB_EP_CONNECTING, /* initiator: TCP connect in progress */
    ST_VB_EP_WAIT_REPLY, /* initiator: hello sent */
    ST_VB_EP_WAIT_HELLO, /* acceptor: no hello from the peer yet */
    ST_VB_EP_WAIT_READY, /* acceptor: reply sent, QPs at RTS; the initiator's READY byte next */
    ST_VB_EP_READY,
    ST_VB_EP_FAILED
} st_vb_ep_state_t;

struct st_net_ep {
    st_net_ctx_t     *ctx;
    int               peer;
    uint32_t          idx;
    uint16_t          gen;
    unsigned          flags;
    st_vb_ep_state_t  state;
    st_vb_addr_t      paddr;
    int               fd;       /* out-of-band socket, -1: none */
    uint8_t           in[400];  /* handshake bytes so far, or a refusal's text */
    size_t            inlen;
    double            hup_at;   /* the peer's socket closed (0: not) */
    char              why[384]; /* why it failed: the requests' reason (st_request_t.why) */
    int               nqps;
    int               cqi;      /* the CQ (ctx->cqs) of its QPs */
    struct ibv_qp    *qp[ST_VB_MAX_QPS];
    uint32_t          psn[ST_VB_MAX_QPS];
    int               sq_used[ST_VB_MAX_QPS];
    uint32_t          next_qp;  /* data parts stripe over the QPs */
    /* registered control memory: per QP RQ_DEPTH receive buffers, SQ_DEPTH send buffers, the
     * any-source buffer */
    uint8_t          *mem;
    size_t            mem_len;
    struct ibv_mr    *mr;
    int               ctl_free[ST_VB_SQ_DEPTH];
    int               nctl_free;
    /* receive side */
    st_vb_op_t       *rslot[ST_VB_SLOTS];
    uint32_t          rgen[ST_VB_SLOTS];
    st_vb_op_t       *recvs, *recvs_tail; /* receives in posting order, until complete */
    int               parts_out;
    int               any_issued; /* a CTS for the any-source slot is out */
    int               any_full;   /* a message sits in the any-source buffer */
    size_t            any_len;
    int               any_trunc;
    /* send side */
    st_vb_sslot_t     sslot[ST_VB_SLOTS];
    st_vb_op_t       *sends, *sends_tail; /* sends not yet matched, in posting order */
    st_vb_op_t       *msends, *msends_tail; /* sends matched, their writes not all complete */
    st_vb_cts_t      *cts0, *cts0_tail;   /* part-0 CTSs not yet matched, in arrival order */
    st_vb_cts_t      *waitq, *waitq_tail; /* matched parts waiting for resources */
    st_vb_part_t     *parts;              /* [ST_VB_SQ_DEPTH * nqps] */
    int               part_free;
};

typedef struct st_vb_pend {
    int      fd;
    uint32_t gen;
    uint8_t  in[sizeof(st_vb_hello_t)];
    size_t   inlen;
} st_vb_pend_t;

#define ST_VB_READY_BYTE 0x01 /* the handshake's last message, initiator to acceptor */
#define ST_VB_MAX_PEND 512 /* handshakes accepted and not yet matched; more wait in the backlog */

struct st_net_ctx {
    const st_ibv_t          *ibv;
    int                      rank;
    char                     name[64];
    char                     hca[64];
    uint8_t                  port;
    struct ibv_port_attr     port_attr;
    struct ibv_device_attr   dev_attr;
    int                      gid_index;
    union ibv_gid            gid;
    struct ibv_context      *dev;
    struct ibv_pd           *pd;
    struct ibv_comp_channel *channel;
    /* CQs, all on the channel, added as peers are (a CQ of cq_len entries takes
     * cq_len / ST_VB_CQ_PER_QP QPs: a communicator of any size fits in ST_VB_MAX_CQS of them) */
    struct ibv_cq           *cqs[ST_VB_MAX_CQS];
    int                      cq_qps[ST_VB_MAX_CQS];     /* QPs on each */
    unsigned                 cq_unacked[ST_VB_MAX_CQS]; /* events to acknowledge on each */
    int                      ncqs;
    int                      cq_len;
    int                      epfd;
    int                      lfd;        /* out-of-band listener */
    st_vb_addr_t             addr;
    /* endpoints by index (wr_id and epoll data name them by index and generation) */
    st_net_ep_t            **eps;
    uint16_t                *ep_gen;
    uint32_t                 neps;
    st_vb_pend_t             pend[ST_VB_MAX_PEND]; /* accepted sockets not yet matched */
    int                      listen_paused;        /* pend is full: the listener is not watched */
    int                      recv_bufs;            /* bounce buffers receives hold */
    /* any-source receive */
    st_vb_op_t              *any_op;
    uint64_t                 any_tag;
    int                      any_tag_set;
    /* bounce buffers */
    st_vb_buf_t             *bufs;
    int                      nbufs, maxbufs, buf_free;
    struct ibv_mr          **slabs;
    void                   **slab_mem;
    int                      nslabs;
    char                     bounce_why[384]; /* why the pool cannot grow (registration) */
    /* registrations of strataMemAlloc memory (the lock: strataMemFree's thread drops them) */
    pthread_mutex_t          reg_lock;
    st_vb_reg_t             *regs;
    int                      reg_disabled; /* no listener slot: bounce buffers only */
    unsigned                 progress_calls;
};

/* verbs_dev.c */
st_status_t st_vb_ctx_open(const st_net_config_t *cfg, st_net_ctx_t **ctx_p);
/* The index of a CQ with room for nqps more QPs, a new one if needed; -1 (logged) when none. */
int         st_vb_cq_get(st_net_ctx_t *ctx, int nqps);
/* Takes the completion channel's events (non-blocking), acknowledging each CQ's once it has
 * ack_at of them (1: all; ibv_ack_cq_events takes a mutex, so not one by one). */
void        st_vb_channel_drain(st_net_ctx_t *ctx, unsigned ack_at);
/* Marks ep ready (both sides at RTS). */
void        st_vb_ep_set_ready(st_net_ep_t *ep);
/* Resumes accepting handshakes once a pending slot is free again. */
void        st_vb_listen_resume(st_net_ctx_t *ctx);
void        st_vb_ctx_close(st_net_ctx_t *ctx);
void        st_vb_ctx_describe(st_net_ctx_t *ctx, char *buf, size_t len);
st_status_t st_vb_rail_devices(char *buf, size_t len);
/* NCCL_IB_HCA's syntax: does device `name` port `port` pass spec? (exported for the unit test) */
int         st_vb_hca_match(const char *spec, const char *name, int port);
/* The likely cause of a work completion status, for its error line. */
const char *st_vb_wc_hint(enum ibv_wc_status status);

/* verbs_conn.c */
st_status_t st_vb_connect(st_net_ctx_t *ctx, int peer, const void *addr, size_t len,
                          unsigned flags, st_net_ep_t **ep_p);
void        st_vb_disconnect(st_net_ep_t *ep, int force, double timeout);
/* Events of the out-of-band sockets (listener, handshakes, hang-ups); 1 when something happened. */
int         st_vb_conn_progress(st_net_ctx_t *ctx);
/* Fails ep: every operation on it completes with status, its QPs go to the error state, its
 * socket closes (so the peer learns at once). why: one line for the log (NULL: not logged). */
void        st_vb_ep_fail(st_net_ep_t *ep, st_status_t status, int loud, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
st_net_ep_t *st_vb_ep_lookup(st_net_ctx_t *ctx, uint32_t idx, uint16_t gen);

/* verbs_proto.c */
st_status_t st_vb_isend(st_net_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                        st_memh_t *memh, st_request_t *req);
st_status_t st_vb_irecv(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag, st_memh_t *memh,
                        st_request_t *req);
st_status_t st_vb_irecv_any(st_net_ctx_t *ctx, void *buf, size_t len, uint64_t tag,
                            st_request_t *req);
void        st_vb_cancel(st_net_ctx_t *ctx, st_request_t *req, int force);
st_status_t st_vb_progress(st_net_ctx_t *ctx);
st_status_t st_vb_arm(st_net_ctx_t *ctx);
/* Polls the CQ until it is empty or max completions were handled; returns how many. */
int         st_vb_cq_poll(st_net_ctx_t *ctx, int max);
/* An endpoint became ready: post what waited for it. */
void        st_vb_ep_ready(st_net_ep_t *ep);
/* Completes every operation of ep with status (ep failed or closing). */
void        st_vb_ep_flush_ops(st_net_ep_t *ep, st_status_t status);
/* Posts the receive work requests of QP q (its buffers in ep->mem). */
st_status_t st_vb_post_recvs(st_net_ep_t *ep, int q);

/* verbs_mem.c */
int         st_vb_buf_get(st_net_ctx_t *ctx);
void        st_vb_buf_put(st_net_ctx_t *ctx, int buf);
void        st_vb_bufs_free(st_net_ctx_t *ctx);
/* The registration covering [buf, buf+len) when it lies in strataMemAlloc memory (registered now
 * if needed), else NULL. */
st_vb_reg_t *st_vb_reg_find(st_net_ctx_t *ctx, const void *buf, size_t len);
void        st_vb_regs_init(st_net_ctx_t *ctx);
void        st_vb_regs_free(st_net_ctx_t *ctx);
/* Registers with the memlock hint on failure. */
struct ibv_mr *st_vb_mr_reg(st_net_ctx_t *ctx, void *addr, size_t len, const char *what);

#endif
