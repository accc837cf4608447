/*
 * comm.h - the communicator at run time: who the ranks are, how to reach them, and the state
 * every operation on it shares (sequence numbers, the lock that serialises driving its net
 * context, its errors, failure notices). Its lifecycle is core's (core/init.h).
 */
#ifndef ST_COMM_H
#define ST_COMM_H

#include <pthread.h>
#include <stdint.h>

/* a communicator timeout meaning "no deadline" (STRATA_TIMEOUT=0) */
#define ST_TIMEOUT_NONE ST_PARAM_NO_DEADLINE

#include "base/param.h"
#include "base/status.h"
#include "reduce/reduce.h"
#include "strata.h"
#include "topo/node.h"
#include "topo/topo.h"
#include "transports/transport.h"

#define ST_COMM_MAX_PREMUL 64

typedef enum {
    ST_COMM_INITIALIZING = 0,
    ST_COMM_READY,
    ST_COMM_FINALIZED,
    ST_COMM_FAILED,  /* an operation failed: further collectives are refused */
    ST_COMM_ABORTED
} st_comm_state_t;

/* What every rank publishes about itself at init. */
typedef struct st_peer_info {
    char     node_id[ST_NODE_ID_LEN]; /* ranks with equal node ids are on one node */
    uint32_t pid;
    int      same_pidns; /* shares this process's pid namespace: pid can be probed (kill 0) */
} st_peer_info_t;

struct st_intra;

/* The node's fingerprint board: on a communicator whose ranks all share one node (and its
 * windows, coll/intra.h), the mismatch check (engine/mismatch.c) agrees through shared memory
 * instead of network messages. Each rank has nslots entries of ST_BOARD_ENTRY_BYTES in its
 * window; entry (seq mod nslots) holds collective #seq's fingerprint once its first 8 bytes (a
 * stamp) read seq + 1 (a release store after the fingerprint). Filled by the windows' creation
 * (coll/intra.c); NULL on communicators of several nodes or of one rank. */
#define ST_BOARD_ENTRY_BYTES 128
typedef struct st_board {
    char     **entries; /* [n] rank r's first entry, as mapped here */
    int        me, n, nslots;
    void     (*ring)(void *arg); /* wakes the node's ranks asleep on their windows' doorbell */
    void      *ring_arg;
    void      *sleep_on; /* the engine's sleep hook on that doorbell (st_op_t's sleep_on, sleep) */
    void     (*sleep)(void *on, uint32_t seen, long timeout_us);
    void     (*arm)(void *on, int delta);
    uint32_t (*bell)(void *on); /* the doorbell's value, read before a check of the entries */
} st_board_t;

typedef struct st_premul_slot {
    int        used;
    st_redop_t redop;
} st_premul_slot_t;

struct st_comm {
    uint64_t             magic;
    int                  rank;
    int                  nranks;
    char                 name[64];
    double               timeout;      /* seconds; every wait of an operation */
    double               setup_deadline; /* st_time_now() by which init's or split's own
                                          * exchanges must end (0: none; exec.c) */
    volatile int         state;        /* st_comm_state_t */
    volatile int         async_error;  /* strataResult_t of the first asynchronous failure */
    int                  made;         /* 1 once init completed (READY): a later failure's
                                        * peers were connected and alive then */
    volatile int         active;       /* operations being driven right now (abort waits) */
    int                  blocking;     /* 1 while a thread is in a blocking call on this comm
                                        * (a collective or split outside groups and streams) */
    volatile int         queued;       /* work items queued on host streams, not yet done */
    uint8_t              root_secret[16]; /* the id's secret, when this rank started its
                                           * bootstrap root (root_started): abort ends it */
    int                  root_started;
    int                  cancel_fd;    /* eventfd written by strataCommAbort: ends init's
                                          * bootstrap waits at once (st_socket_set_cancel) */
    pthread_t            init_thread;  /* nonblocking init */
    int                  init_thread_live;

    const st_transports_t *tl;         /* what init was given to choose from (NULL before) */
    const st_net_ops_t  *net;
    st_net_ctx_t        *net_ctx;
    st_net_ep_t        **eps;          /* [nranks], connected at init: what traffic to rank r uses */
    st_net_ctx_t        *rail_ctx;     /* this rank's rail (STRATA_RAIL_IFNAMES), or NULL: its
                                          endpoints replace those of remote peers in eps */
    st_net_ep_t        **spare_eps;    /* [nranks] endpoints replaced by rail ones (closed at free) */
    st_peer_info_t      *peers;        /* [nranks] */
    st_topo_t           *topo;         /* the hierarchy (nodes, rails, ring order) */
    int                  node;         /* st_topo_node(topo, rank) */
    int                  nnodes;

    pthread_mutex_t      lock;         /* serialises progress of net_ctx and op state */
    uint64_t             coll_seq;     /* collectives issued so far (tags, error messages) */
    /* Issue order (st_comm_order_*): collective #s of comm starts only once coll_done == s, so
     * one communicator's collectives run one after the other in the order they were issued,
     * whichever streams, groups or threads carry them. */
    pthread_mutex_t      order_lock;
    volatile uint64_t    coll_done;    /* collectives finished, in issue order */
    uint64_t             done_ahead;   /* bit i: #coll_done + 1 + i also finished (it could not
                                          be queued), to be counted when its turn comes */
    uint64_t            *p2p_send_seq; /* [nranks] sends issued to each peer */
    uint64_t            *p2p_recv_seq; /* [nranks] receives issued from each peer */
    uint32_t             split_seq;    /* splits issued (each split's new comm gets its own id) */
    uint64_t             uid;          /* equal on all ranks, differs between communicators:
                                          names of the node's shared memory */
    struct st_intra     *intra;        /* the node's windows (coll/intra.h) */
    st_board_t          *board;        /* one node: the mismatch check's board (above), or NULL */
    size_t               small_fast_max; /* all-reduces up to this many bytes take the small
                                          * algorithm's fast path (coll/small.c); set at the
                                          * first call (small_fast_known) */
    int                  small_fast_known;
    int                  intra_oversub; /* more ranks share this host's pid namespace than the
                                         * node's ranks have CPUs (the union of their affinity
                                         * masks, coll/intra.c): waits yield the core at once */
    int                  host_ranks;    /* ranks in this host's pid namespace, this one included */
    struct st_check     *spare_check;  /* a board check kept for the next collective (mismatch.c) */
    struct st_tune_policy *tune;       /* where its choices come from (tune/policy.h) */
    char                *tune_file;    /* strataConfig_t.tuneFile, or NULL */
    strataPhaseTimes_t   times;        /* of the last completed collective (strataCommGetPhaseTimes) */
    int                  have_times;

    st_premul_slot_t     premul[ST_COMM_MAX_PREMUL];

    /* Failure notices (st_comm_notice_*): the first rank whose operation fails tells every
     * peer, which fails its own waiting operations within about a second. */
    struct st_notice_state *notice;
    volatile double      notice_at;    /* st_time_now() when a peer's notice arrived; 0: none */
    int                  notice_rank;  /* the rank that sent it */
    int                  notice_result; /* its strataResult_t (strataInvalidUsage: a mismatch) */
    int                  not_run_said;  /* queued work skipped after a failure was logged */
    char                 notice_msg[488];

    /* The device path (core/stream.c): the device current when the communicator was made (the
     * device its device buffers must be on), -1 when none was; the queue that runs its calls on
     * device buffers, ordered on the user's CUDA streams (made at the first such call). */
    int                  dev_id;
    struct st_stream    *devq;
    char                 async_msg[512]; /* the first device-queue failure's message, or a
                                          * nonblocking init's (given to
                                          * strataCommGetAsyncError's caller as its last error) */

    /* Memory of cancelled operations that the transport still holds (st_comm_defer), freed
     * once the transport is closed. */
    struct st_comm_deferred *deferred;
};
typedef struct st_comm st_comm_t;

#define ST_COMM_MAGIC       UINT64_C(0x57a7a0c0bb1e0001)

/* Progresses every net context of comm (the default one and the rail's): ST_OK when anything
 * happened, ST_INPROGRESS otherwise. Caller holds comm->lock. */
st_status_t st_comm_progress(st_comm_t *comm);
/* Net contexts of comm (1 or 2) into ctxs; returns how many. */
int st_comm_net_ctxs(const st_comm_t *comm, st_net_ctx_t **ctxs);


/* The registry of live communicators: a destroyed handle is recognised without dereferencing it. */
void st_comm_register(st_comm_t *comm);
void st_comm_unregister(st_comm_t *comm);
int  st_comm_is_live(const st_comm_t *comm);

/* Issue order of collectives. st_comm_order_ready: 1 when collective #seq may start (every
 * collective issued before it on comm has finished). st_comm_order_done: #seq finished (or will
 * never run: it failed, was skipped or could not be queued); idempotent. Collectives, not
 * send/recv (their own per-peer sequence numbers order them). */
int  st_comm_order_ready(st_comm_t *comm, uint64_t seq);
void st_comm_order_done(st_comm_t *comm, uint64_t seq);


/* Failure notices. start: posts the any-source receive of a peer's notice on each net context
 * (at the end of init and split; without it the communicator only lacks the notices). poll:
 * after progress, with comm->lock held: records a notice that arrived (notice_at, notice_rank,
 * notice_msg; logged once). send: with comm->lock held, once per communicator and only when no
 * peer's notice arrived first (so that n ranks do not send n^2): tells every other rank that
 * comm cannot complete, and why (NULL: this thread's last error). stop: before the endpoints
 * close. */
void st_comm_notice_start(st_comm_t *comm);
void st_comm_notice_poll(st_comm_t *comm);
void st_comm_notice_send(st_comm_t *comm, const char *why);
void st_comm_notice_stop(st_comm_t *comm);
/* 1 when rank r's process is known to have exited (same pid namespace only). */
int st_comm_peer_exited(const st_comm_t *comm, int r);

/* Marks comm failed (further collectives refused) and records the first async error. */
void st_comm_set_error(st_comm_t *comm, st_status_t status);

/* Calls fn(arg) when comm is freed, after its transport contexts are closed: how an operation
 * whose transfers did not cancel (st_exec_cancel returned 0) releases memory the transport may
 * still write. Without memory for the record, arg is leaked (logged at WARN). */
void st_comm_defer(st_comm_t *comm, void (*fn)(void *), void *arg);
/* Runs what st_comm_defer recorded (st_comm_free, after closing the transport contexts). */
void st_comm_run_deferred(st_comm_t *comm);

/* This process's pid namespace as text (what a peer compares to know it may probe our pid). */
void st_comm_pidns(char *buf, size_t len);

#endif
