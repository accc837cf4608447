/* fakeverbs: a test-only stand-in for libibverbs (rdma-core 44 ABI). Internal declarations.
 *
 * The "HCA" is the posting process itself: it executes its own send queues at post/poll time,
 * copies bytes into the target process with process_vm_writev and pushes completions into the
 * target's completion queue, which lives in a shared-memory segment (the "fabric") together with
 * every QP, CQ, MR, channel and port of every process using the same FAKEVERBS_FABRIC.
 * Everything in the segment is guarded by one robust process-shared mutex, except the CQ rings,
 * which are single-consumer rings (producers serialised by the mutex) so that a busy poller never
 * takes the fabric lock while nothing arrives. */
#ifndef FAKEVERBS_FV_H
#define FAKEVERBS_FV_H

#include <pthread.h>
#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>
#include <infiniband/verbs.h>

#define FV_MAGIC          0x31766b61666276ULL /* "vbfakv1" */
#define FV_LAYOUT         3u                 /* bumped on any change of the structures below */

#define FV_MAX_DEV        16
#define FV_MAX_PORTS      256
#define FV_MAX_PROCS      512
#define FV_MAX_CTXS       512
#define FV_MAX_CHANS      512
#define FV_CQ_BITS        8
#define FV_MAX_CQS        (1u << FV_CQ_BITS)
#define FV_QP_BITS        9
#define FV_MAX_QPS        (1u << FV_QP_BITS)
#define FV_MR_BITS        13
#define FV_MAX_MRS        (1u << FV_MR_BITS)
#define FV_MAX_SGE        4
#define FV_MAX_CQE        65536
#define FV_MAX_QP_WR      16384
#define FV_MAX_INLINE     256
#define FV_ASYNC_RING     64
#define FV_CHAN_RING      256
#define FV_NODE_LEN       64

/* One port = one (node, device): its LID, GUID and byte counters (never reclaimed: the LIDs of a
 * fabric stay stable for its whole life). */
struct fv_port {
    char     node[FV_NODE_LEN];
    uint32_t used;
    uint32_t dev;       /* device index k of fake<k> */
    uint32_t node_no;   /* order in which the node first appeared: the RoCE address 10.200.<n>.<k> */
    uint16_t lid;
    uint16_t pad;
    uint64_t guid;
    uint64_t tx_bytes, tx_msgs, rx_bytes, rx_msgs;
};

struct fv_proc {
    int32_t  pid;
    uint32_t nopen;     /* devices this process holds open */
};

struct fv_event {
    uint32_t type;      /* enum ibv_event_type */
    uint32_t kind;      /* FV_OBJ_QP or FV_OBJ_CQ */
    uint32_t idx;
    uint32_t serial;
};
enum { FV_OBJ_QP = 1, FV_OBJ_CQ = 2 };

/* A context (open device) of some process: owner of the async event queue and its eventfd. */
struct fv_sctx {
    int32_t  pid;
    uint32_t serial;    /* 0: free */
    int32_t  fd;        /* the owner's async eventfd number */
    uint32_t head, tail;
    struct fv_event ev[FV_ASYNC_RING];
};

/* A completion channel: the eventfd number in its owner, and which CQs fired. */
struct fv_schan {
    int32_t  pid;
    uint32_t serial;
    int32_t  fd;
    uint32_t head, tail;
    uint32_t cq[FV_CHAN_RING];      /* idx | serial << FV_CQ_BITS */
};

struct fv_scq {
    int32_t  pid;
    uint32_t serial;
    uint32_t ctx;       /* owning context's index */
    int32_t  chan;      /* channel index or -1 */
    uint32_t chan_serial;
    uint32_t cap;       /* ring capacity = cqe */
    uint32_t head;      /* consumer (owner) counter: atomic */
    uint32_t tail;      /* producer counter: atomic, written under the fabric lock */
    uint32_t armed;     /* 0, FV_ARM_ALL, FV_ARM_SOLICITED */
    uint32_t overrun;
};
enum { FV_ARM_ALL = 1, FV_ARM_SOLICITED = 2 };

/* One completion as stored in a CQ ring: the WC plus what the consumer needs to free send-queue
 * slots of its QP. */
struct fv_swc {
    struct ibv_wc wc;
    uint32_t qp_idx;
    uint32_t qp_serial; /* 0: not a send completion */
    uint64_t sseq;      /* send sequence number of the WR */
    uint32_t solicited;
    uint32_t pad;
};

struct fv_rwr {
    uint64_t wr_id;
    uint32_t num_sge;
    uint32_t pad;
    struct ibv_sge sge[FV_MAX_SGE];
};

struct fv_sqp {
    int32_t  pid;
    uint32_t serial;
    uint32_t ctx;
    uint32_t qpn;
    uint64_t pd;        /* fabric-wide PD id */
    uint32_t state;     /* enum ibv_qp_state */
    uint32_t port;      /* index into ports[] of its (node, device) */
    uint32_t access;
    uint32_t path_mtu;
    uint32_t dest_qpn;
    uint16_t dlid;
    uint8_t  is_global;
    uint8_t  sgid_index;
    union ibv_gid dgid;
    uint32_t rq_psn, sq_psn;
    uint8_t  timeout, retry_cnt, rnr_retry, min_rnr_timer;
    uint8_t  max_rd_atomic, max_dest_rd_atomic, dropped, pad;
    uint16_t pkey_index;
    uint16_t pad2;
    uint32_t send_cq, recv_cq;
    uint32_t max_send_wr, max_recv_wr, max_send_sge, max_recv_sge, max_inline;
    uint32_t rq_head, rq_tail;  /* receive ring counters, under the fabric lock */
};

struct fv_smr {
    int32_t  pid;
    uint32_t key;       /* 0: free; lkey == rkey; low FV_MR_BITS = index */
    uint64_t pd;
    uint64_t addr, len;
    uint32_t access;
    uint32_t ctx;
};

struct fv_seg {
    uint64_t magic;
    uint32_t layout;
    uint32_t dead;          /* set, under the lock, when the segment was unlinked */
    pthread_mutex_t lock;
    uint64_t next_pd;
    uint32_t next_serial;
    uint32_t next_gen;
    uint64_t send_wrs;      /* send WRs posted in the whole fabric (fault counters) */
    uint64_t reg_mrs;       /* ibv_reg_mr calls in the whole fabric */
    uint32_t nports, nnodes;
    struct fv_port  ports[FV_MAX_PORTS];
    struct fv_proc  procs[FV_MAX_PROCS];
    struct fv_sctx  ctxs[FV_MAX_CTXS];
    struct fv_schan chans[FV_MAX_CHANS];
    struct fv_scq   cqs[FV_MAX_CQS];
    struct fv_sqp   qps[FV_MAX_QPS];
    struct fv_smr   mrs[FV_MAX_MRS];
};

#define FV_PAGE           4096ul
#define FV_HDR_BYTES      ((sizeof(struct fv_seg) + FV_PAGE - 1) & ~(FV_PAGE - 1))
#define FV_CQ_RING_BYTES  ((size_t)FV_MAX_CQE * sizeof(struct fv_swc))
#define FV_RQ_RING_BYTES  ((size_t)FV_MAX_QP_WR * sizeof(struct fv_rwr))
#define FV_SEG_BYTES      (FV_HDR_BYTES + FV_MAX_CQS * FV_CQ_RING_BYTES + \
                           FV_MAX_QPS * FV_RQ_RING_BYTES)

/* Per-process configuration, read from the environment when the first device is opened. */
struct fv_config {
    int    ndev;
    int    eth;                 /* FAKEVERBS_LINK=eth */
    uint32_t port_down;         /* bit k: fake<k> is down */
    uint64_t max_msg;
    double time_scale;
    int    scramble;
    int    keep;      /* FAKEVERBS_KEEP: the last process leaves the segment (stats, clean) */
    int    debug;
    /* FAKEVERBS_FAULTS */
    uint64_t send_err_at;  int send_err_status;
    uint64_t drop_qp_at;
    uint64_t reg_fail_at;
};

extern struct fv_config fv_cfg;
extern struct fv_seg *fv_seg;

/* fv_fabric.c */
void fv_read_config(void);
int  fv_fabric_path(char *buf, size_t len, const char *fabric);
int  fv_attach(void);                    /* 0 or errno; refcounted per process */
void fv_detach(void);
int  fv_open_segment(const char *path, int create, struct fv_seg **out); /* ctl's raw access */
void fv_lock(void);
void fv_unlock(void);
int  fv_pid_alive(pid_t pid);
void fv_reclaim_dead(void);              /* lock held */
int  fv_port_get(const char *node, uint32_t dev); /* lock held: index or -1 */
int  fv_node_name(char *buf, size_t len);
void fv_port_gid(uint32_t port, int index, union ibv_gid *gid);
int  fv_port_by_lid(uint16_t lid);       /* lock held */
int  fv_port_by_gid(const union ibv_gid *gid); /* lock held */
uint32_t fv_new_serial(void);            /* lock held */
void fv_cq_push(uint32_t cq, const struct fv_swc *swc); /* lock held */
void fv_async_push(uint32_t ctx, uint32_t type, uint32_t kind, uint32_t idx, uint32_t serial);
void fv_qp_to_err(uint32_t qp);          /* lock held: ERR + flush of its receive queue */
struct fv_swc *fv_cq_ring(uint32_t cq);
struct fv_rwr *fv_rq_ring(uint32_t qp);
void fv_signal_fd(pid_t pid, int fd, uint32_t serial);
double fv_now(void);
void fv_log(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
#define FV_DBG(...) do { if (fv_cfg.debug) fv_log(__VA_ARGS__); } while (0)

/* Local (per-process) objects. The shm index names an object across processes; the local
 * tables map it back to the application's pointers (events, completions). */
struct fv_device;
struct fv_context {
    int      port;          /* ports[] index */
    uint32_t sctx;          /* ctxs[] index */
    int      dev;
    pthread_mutex_t lock;
    struct verbs_context vctx;  /* must stay last: the ibv_context is its last member */
};

struct fv_pd {
    struct ibv_pd ibpd;
    uint64_t id;
    int      nobj;          /* MRs and QPs on it */
};

struct fv_cq {
    struct ibv_cq ibcq;
    uint32_t idx, serial;
    pthread_mutex_t poll_lock;
    int      nqp;
};

struct fv_chan {
    struct ibv_comp_channel ibch;
    uint32_t idx, serial;
};

struct fv_mr {
    struct ibv_mr ibmr;
    uint64_t locked;        /* bytes counted against RLIMIT_MEMLOCK */
};

/* One send WR as the local send queue keeps it until it is executed. */
struct fv_swr {
    uint64_t wr_id;
    uint64_t seq;
    uint64_t raddr;
    uint32_t rkey;
    uint32_t imm;
    uint32_t opcode;
    uint32_t flags;
    uint32_t num_sge;
    uint32_t len;
    struct ibv_sge sge[FV_MAX_SGE];
    int      inject;        /* status to complete with (send_err) or 0 */
    int      drop;          /* drop_qp fault: black-hole the target */
    int      started;
    int      rnr_count;
    double   deadline;      /* retry deadline once stalled, 0 before */
    double   next_try;      /* RNR: earliest next attempt */
    uint8_t  inl[FV_MAX_INLINE];
};

struct fv_qp {
    struct ibv_qp ibqp;
    uint32_t idx, serial;
    struct fv_context *ctx;
    pthread_mutex_t lock;       /* the send queue */
    struct fv_swr *sq;
    uint32_t sq_cap;
    uint64_t posted, executed, retired;
    struct ibv_qp_init_attr init;
    struct fv_qp *next;
};

/* fv_verbs.c / fv_qp.c */
struct fv_context *fv_ctx_of(struct ibv_context *c);
void  fv_local_register_cq(struct fv_cq *cq);
void  fv_local_unregister_cq(struct fv_cq *cq);
struct fv_cq *fv_local_cq(uint32_t idx, uint32_t serial);
struct fv_qp *fv_local_qp(uint32_t idx, uint32_t serial);
void  fv_progress_all(void);
void  fv_retire(uint32_t qp_idx, uint32_t serial, uint64_t sseq);
int   fv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad);
int   fv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad);
int   fv_qp_busy_cq(struct fv_cq *cq);

#endif
