/*
 * transport.h - the two transport interfaces of strata (docs/architecture.md):
 *
 *  net    (inter-node messages): endpoints to peers, nonblocking tagged send/recv of chunks,
 *         memory registration, progress. Implemented by transports/ucx and transports/verbs.
 *  window (intra-node load/store): every local rank exposes a region its node peers map and read
 *         or write directly, with sequence-number flags inside it for ordering.
 *         Implemented by transports/shm (host memory) and transports/cuda_ipc (device memory).
 *
 * Each interface is a struct of function pointers; every slot has a contract below. An unsupported
 * slot points at a function returning ST_ERR_UNSUPPORTED, never NULL. The builtin transports are
 * listed, in priority order, in st_net_transports (transport.c); selectors take the table as a
 * parameter so tests can hand them a fake transport.
 *
 * Threading: one net context is driven by one thread at a time; the caller serialises (the
 * communicator's lock). Transports use nothing above this layer: only status, log and param.
 */
#ifndef ST_TRANSPORT_H
#define ST_TRANSPORT_H

#include <stddef.h>
#include <stdint.h>

#include "base/log.h"
#include "base/param.h"
#include "base/status.h"
#include "base/sys.h"

typedef struct st_net_ctx st_net_ctx_t; /* one per communicator: a UCX worker, a verbs PD+CQ */
typedef struct st_net_ep  st_net_ep_t;  /* a connection to one peer rank */
typedef struct st_memh    st_memh_t;    /* a registered memory region */

/* Bits of the tag a caller may use; transports may use the bits above for the sender's rank. */
#define ST_NET_TAG_BITS 44
#define ST_NET_TAG_MASK ((UINT64_C(1) << ST_NET_TAG_BITS) - 1)

#define ST_NET_CONNECT_REMOTE 1u

/* Which peers an address is for. */
typedef enum {
    ST_NET_ADDR_ALL      = 0, /* every transport the context has (peers on the same node) */
    ST_NET_ADDR_NET_ONLY = 1  /* network transports only (peers on other nodes: emulated nodes
                                 share a kernel, and UCX would otherwise pick shared memory) */
} st_net_addr_scope_t;

typedef struct st_net_config {
    int    rank;    /* the caller's rank in the communicator */
    int    nranks;
    char   name[64]; /* communicator label for logs */
    const char *devices; /* network devices to limit the context to (a rail's NIC, in the
                            transport's syntax: interface names for UCX's TCP); NULL: default */
} st_net_config_t;

/* A nonblocking operation. The caller owns it and must keep it alive until done != 0.
 * The transport sets status and len before setting done. */
typedef struct st_request {
    volatile int done;   /* 0 while in flight; 1 when complete (successfully or not) */
    st_status_t  status; /* ST_OK, ST_ERR_REMOTE (peer failed), ST_ERR_CANCELED,
                          * ST_ERR_TRUNCATED (a receive; a send too where the transport
                          * knows, verbs), ST_ERR_IO */
    size_t       len;    /* bytes received (irecv); for a truncated receive, the bytes sent
                          * when the transport knows them (else 0); for a send that a
                          * transport failed as truncated (ST_ERR_TRUNCATED: verbs fails both
                          * sides), the bytes the receive takes when known (else 0) */
    int          orphan; /* set by a forced cancel: the transport will never complete it (its
                          * connection was closed where no failure can be reported); what it
                          * refers to must live until the context is closed */
    const char  *why;    /* a failed request: the transport's one-line reason (the work
                          * completion's status and likely cause), valid until its endpoint is
                          * closed; NULL when it has none (the status says it all). Set by
                          * isend/irecv. */
    void        *tl_req; /* transport's own handle, for cancel */
    void        *tl_ep;  /* transport's endpoint of the request */
    struct st_request *tl_prev, *tl_next; /* transport's list of requests in flight */
} st_request_t;

typedef struct st_net_ops {
    const char *name; /* "ucx", "verbs" */
    /* The transport's STRATA_<NAME>_* parameters (may be NULL). */
    const st_config_table_t *config;

    /* Opens a context for one communicator. Blocking, local only. ST_ERR_NO_DEVICE when the
     * transport has no usable device here (the selector then tries the next one). */
    st_status_t (*open)(const st_net_config_t *cfg, st_net_ctx_t **ctx_p);
    /* Writes into buf (capacity len) which devices the context sends through, for messages that
     * must name the interface of a path that failed ("UCX_NET_DEVICES=emu1"). Never fails. */
    void        (*describe)(st_net_ctx_t *ctx, char *buf, size_t len);
    /* Sets the caller's rank after open (a split learns its rank only after publishing its
     * address). Call before connect. */
    void        (*set_rank)(st_net_ctx_t *ctx, int rank);
    /* Frees the context; all endpoints must be closed first. */
    void        (*close)(st_net_ctx_t *ctx);
    /* Writes into buf (capacity *len_p) the address peers use to connect to this context, with
     * the transports of `scope`; sets *len_p. ST_ERR_INVALID when buf is too small (*len_p then
     * holds the size needed). */
    st_status_t (*address)(st_net_ctx_t *ctx, st_net_addr_scope_t scope, void *buf,
                           size_t *len_p);
    /* Creates an endpoint to rank peer whose address is peer_addr. Local only: does not wait for
     * the peer. flags: ST_NET_CONNECT_REMOTE for a peer on another node (its address is a
     * network-only one; the endpoint detects the peer's failure, failing its requests with
     * ST_ERR_REMOTE). Same-node endpoints may use transports without failure detection (UCX's
     * shared memory has none); a dead local peer is then caught by the caller's deadline. */
    st_status_t (*connect)(st_net_ctx_t *ctx, int peer, const void *peer_addr, size_t addr_len,
                           unsigned flags, st_net_ep_t **ep_p);
    /* Closes an endpoint. force = 0 flushes outstanding sends first, waiting at most timeout
     * seconds; force = 1 drops them (abort, dead peer). Never blocks longer than timeout. */
    void        (*disconnect)(st_net_ep_t *ep, int force, double timeout);
    /* Registers [buf, buf+len) for zero-copy. May return a NULL handle when not needed. */
    st_status_t (*mem_reg)(st_net_ctx_t *ctx, void *buf, size_t len, st_memh_t **memh_p);
    st_status_t (*mem_dereg)(st_net_ctx_t *ctx, st_memh_t *memh);
    /* Nonblocking send of len bytes to ep's peer with tag (ST_NET_TAG_BITS bits). buf must stay
     * untouched until req->done. Returns ST_OK once posted (req may already be done), or an
     * error (req untouched). */
    st_status_t (*isend)(st_net_ep_t *ep, const void *buf, size_t len, uint64_t tag,
                         st_memh_t *memh, st_request_t *req);
    /* Nonblocking receive of up to len bytes from ep's peer with tag. A longer message fails the
     * request with ST_ERR_TRUNCATED, len then the bytes sent when the transport knows them. */
    st_status_t (*irecv)(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag, st_memh_t *memh,
                         st_request_t *req);
    /* Nonblocking receive of up to len bytes with tag from whichever peer of ctx sends it first
     * (failure notices: engine/comm.c). Completes like irecv; a longer message fails it with
     * ST_ERR_TRUNCATED. The sender is not reported: put it in the message. */
    st_status_t (*irecv_any)(st_net_ctx_t *ctx, void *buf, size_t len, uint64_t tag,
                             st_request_t *req);
    /* Cancels an in-flight request (of any context of the caller's: the request knows its own);
     * it completes (done = 1) with ST_ERR_CANCELED at a later progress call, or at once.
     * Harmless on a completed request. force 0: only what the transport can take back alone
     * (a send or a matched receive may then wait for its peer); force 1: also what needs the
     * peer, by breaking the request's connection (the caller's communicator must be failed). */
    void        (*cancel)(st_net_ctx_t *ctx, st_request_t *req, int force);
    /* Moves everything it can; returns at once. ST_OK when something happened, ST_INPROGRESS when
     * nothing did. */
    st_status_t (*progress)(st_net_ctx_t *ctx);
    /* A file descriptor that becomes readable when the context has work, or -1 if none. */
    int         (*event_fd)(st_net_ctx_t *ctx);
    /* Prepares event_fd for a blocking poll(): ST_OK when armed (safe to sleep), ST_INPROGRESS
     * when events are pending (progress again instead of sleeping). */
    st_status_t (*arm)(st_net_ctx_t *ctx);
    /* The devices rails may use when STRATA_RAIL_IFNAMES is unset, comma-separated in the
     * syntax open() takes in st_net_config_t.devices (verbs: "=mlx5_0:1,=mlx5_1:1", every active
     * HCA port passing STRATA_IB_HCA): rail l opens the l-th modulo their number. Not
     * collective, no context needed. ST_ERR_UNSUPPORTED when the transport has no such list
     * (UCX: rails need STRATA_RAIL_IFNAMES), ST_ERR_NO_DEVICE when it has none. */
    st_status_t (*rail_devices)(char *buf, size_t len);
} st_net_ops_t;

/* ---- window transports ---------------------------------------------------------------------- */

typedef struct st_win_ctx st_win_ctx_t; /* one per communicator and node: own window + peers' */

/* Where a buffer lives; a window transport serves one type (intra.c picks it by this). */
typedef enum {
    ST_MEM_HOST = 0, /* host memory: shm */
    ST_MEM_CUDA = 1, /* a CUDA device's memory: cuda_ipc (docs/architecture.md) */
    ST_MEM_NTYPES
} st_mem_type_t;

/* A packed memory handle: what one rank publishes so that a node peer can map its shareable
 * buffer (mem_pack, mem_map). Opaque outside its transport; fixed size, so it fits in a window's
 * control area and in wire messages. */
#define ST_WIN_MEMH_BYTES 64
typedef struct st_win_memh {
    uint64_t bytes[ST_WIN_MEMH_BYTES / 8]; /* 8-byte aligned for the transport's own struct */
} st_win_memh_t;

typedef struct st_win_config {
    /* Unique per communicator and node; the transport derives its segment names from it (the
     * caller puts the communicator's secret-derived id and the node identity in it, because
     * emulated nodes share one /dev/shm). [A-Za-z0-9_-] only. */
    char   name[96];
    int    local_rank;  /* the caller's index among the ranks of its node */
    int    local_size;  /* ranks on the node (1 .. ) */
    size_t size;        /* bytes of each local rank's window (every local rank passes the same) */
    int    numa;        /* hwloc logical NUMA index to place the caller's window on; -1: leave it
                           to first touch by the caller */
} st_win_config_t;

typedef struct st_win_ops {
    const char   *name;     /* "shm", "cuda_ipc" */
    st_mem_type_t mem_type; /* the memory its windows and buffers are in */
    /* Creates the caller's window: cfg->size bytes, zero-filled, mappable by the node's other
     * ranks under cfg->name and cfg->local_rank. ST_ERR_INVALID (bad name or size 0),
     * ST_ERR_NO_MEMORY (the segment cannot be sized: /dev/shm full), ST_ERR_IO (other system
     * errors, logged with the segment name and errno). */
    st_status_t (*create)(const st_win_config_t *cfg, st_win_ctx_t **ctx_p);
    /* Maps every local peer's window. Call only after every local rank's create returned (the
     * caller puts a barrier between). ST_ERR_IO (logged, naming the peer and segment) when a
     * peer's window is missing or has the wrong size. A transport that fetches the peers' windows
     * from them (cuda_ipc: each rank serves its own) waits for a peer at most until the wire-up
     * deadline (STRATA_CONNECT_TIMEOUT) and then fails with ST_ERR_TIMEOUT, naming it. */
    st_status_t (*attach)(st_win_ctx_t *ctx);
    /* Removes the caller's segment name; the mappings stay valid. Call once every local rank has
     * attached (a second barrier); harmless twice. After it, nothing is left in /dev/shm even if
     * the process is killed. (cuda_ipc: stops serving its window; its abstract socket goes.) */
    void        (*unlink)(st_win_ctx_t *ctx);
    /* Start of local rank lr's window as mapped in this process (lr = own local rank: the own
     * window). NULL for a bad lr or before attach. */
    void       *(*base)(st_win_ctx_t *ctx, int lr);
    /* Sleeps while *word == val, at most timeout_us microseconds (a futex on the shared word;
     * spurious wake-ups are allowed). word must lie in a window of ctx.
     * A window in device memory (ST_MEM_CUDA) has no control words: the host can neither load
     * nor sleep on device memory, so the intra-node protocol keeps its counters and doorbell in
     * the node's host window; a device transport's wait and wake do nothing (they exist, never
     * NULL, but are not to be relied on). */
    void        (*wait)(st_win_ctx_t *ctx, uint32_t *word, uint32_t val, long timeout_us);
    /* Wakes every rank sleeping in wait() on word. */
    void        (*wake)(st_win_ctx_t *ctx, uint32_t *word);
    /* Unmaps every window and unlinks the own segment if still linked; then (a failed init,
     * destroyed before unlink) also the node peers' segment names of the same set, which a peer
     * killed during init could never remove. */
    void        (*destroy)(st_win_ctx_t *ctx);

    /* Shareable buffers (strataMemAlloc; zero-copy when every local rank's buffers are such):
     * process-wide, not per window. */
    /* Allocates size bytes (rounded up to the transport's unit, zero-filled) that node peers can
     * map, and records it. ST_ERR_INVALID for size 0 or ptr_p NULL, ST_ERR_NO_MEMORY (logged)
     * when it cannot be had. */
    st_status_t (*mem_alloc)(size_t size, void **ptr_p);
    /* Frees what mem_alloc returned; ST_ERR_INVALID (logged) for any other pointer. */
    st_status_t (*mem_free)(void *ptr);
    /* When [ptr, ptr+len) (bytes) lies inside one allocation of mem_alloc: 1, with *memh_p (may
     * be NULL) the packed handle of that allocation for a node peer and *offset_p (may be NULL)
     * ptr's offset in bytes from its start. 0 otherwise (foreign memory, straddling the end).
     * Thread-safe. */
    int         (*mem_pack)(const void *ptr, size_t len, st_win_memh_t *memh_p,
                            size_t *offset_p);
    /* Maps the allocation a peer packed (cached: one mapping per allocation, kept until
     * mem_unmap_all; the owner's own allocation maps to itself). NULL (logged) when it cannot
     * be mapped: the owner is gone or freed it. */
    void       *(*mem_map)(const st_win_memh_t *memh);
    /* Drops every mapping mem_map made (when no communicator is left). */
    void        (*mem_unmap_all)(void);

    /* Cross-memory attach (Linux process_vm_readv): copies len bytes at address remote in process
     * pid (a node peer's; remote is an address there, never dereferenced here, and may be any
     * memory of that process, shareable or not) into dst (len bytes of the caller's), with one or
     * more process_vm_readv calls (a partial read continues where it stopped). Blocking, any
     * thread, no state. The kernel allows it where the caller may ptrace pid (same user; Yama's
     * ptrace_scope; seccomp). ST_OK (also for len 0); ST_ERR_UNSUPPORTED when the kernel refuses
     * (EPERM, ENOSYS: ptrace rules, seccomp, no such call), ST_ERR_IO otherwise (ESRCH: no such
     * process; EFAULT: [remote, remote+len) not mapped there; a read that moves nothing); logged
     * at debug only: the caller knows whose buffer it read and says so. A transport whose memory
     * the host cannot read this way (cuda_ipc) returns ST_ERR_UNSUPPORTED. */
    st_status_t (*peer_read)(int pid, void *dst, const void *remote, size_t len);
    /* The other direction (process_vm_writev): copies len bytes at src (the caller's) to address
     * remote in process pid; the same rules, returns and logging as peer_read (EFAULT: [remote,
     * remote+len) not mapped writable there). */
    st_status_t (*peer_write)(int pid, void *remote, const void *src, size_t len);
} st_win_ops_t;

/* Builtin window transports, NULL-terminated (transport.c): one per memory type at most. */
extern const st_win_ops_t *const st_win_transports[];

/* The window transport of table (NULL-terminated) for memory type, or NULL. */
const st_win_ops_t *st_win_find(const st_win_ops_t *const *table, st_mem_type_t type);

/* Builtin net transports in priority order, NULL-terminated (transport.c). */
extern const st_net_ops_t *const st_net_transports[];

/* The parameter tables of the device layer (src/device/dev.h) and of the builtin transports (those
 * that have one), NULL-terminated: what the library hands to st_param_init. */
const st_config_table_t *const *st_transport_config_tables(void);

/* The transport named name in table (NULL-terminated), or NULL. */
const st_net_ops_t *st_net_find(const st_net_ops_t *const *table, const char *name);

/* The transports a communicator is made with: init takes them as a parameter (core/init.h), so
 * tests can hand it fakes (tests/unit/fake_tl.c); a split inherits its parent's. */
typedef struct st_transports {
    const st_net_ops_t *const *net; /* in priority order, NULL-terminated */
    const st_win_ops_t *const *win; /* NULL-terminated */
} st_transports_t;

/* st_net_transports and st_win_transports. */
extern const st_transports_t st_transports_builtin;

#endif
