/*
 * transport.h - the two transport interfaces of strata (see DESIGN.md):
 *
 *  net    (inter-node messages): endpoints to peers, nonblocking tagged send/recv of chunks,
 *         memory registration, progress. Implemented by transports/ucx (and verbs).
 *  window (intra-node load/store): comes with the hierarchical path (transports/shm, cuda_ipc).
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

#include "core/log.h"
#include "core/param.h"
#include "core/status.h"

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
} st_net_config_t;

/* A nonblocking operation. The caller owns it and must keep it alive until done != 0.
 * The transport sets status and len before setting done. */
typedef struct st_request {
    volatile int done;   /* 0 while in flight; 1 when complete (successfully or not) */
    st_status_t  status; /* ST_OK, ST_ERR_REMOTE (peer failed), ST_ERR_CANCELED, ST_ERR_IO */
    size_t       len;    /* bytes received (irecv) */
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
     * request with ST_ERR_INVALID (truncation). */
    st_status_t (*irecv)(st_net_ep_t *ep, void *buf, size_t len, uint64_t tag, st_memh_t *memh,
                         st_request_t *req);
    /* Cancels an in-flight request; it completes (done = 1) with ST_ERR_CANCELED at a later
     * progress call, or at once. Harmless on a completed request. */
    void        (*cancel)(st_net_ctx_t *ctx, st_request_t *req);
    /* Moves everything it can; returns at once. ST_OK when something happened, ST_INPROGRESS when
     * nothing did. */
    st_status_t (*progress)(st_net_ctx_t *ctx);
    /* A file descriptor that becomes readable when the context has work, or -1 if none. */
    int         (*event_fd)(st_net_ctx_t *ctx);
    /* Prepares event_fd for a blocking poll(): ST_OK when armed (safe to sleep), ST_INPROGRESS
     * when events are pending (progress again instead of sleeping). */
    st_status_t (*arm)(st_net_ctx_t *ctx);
} st_net_ops_t;

/* Builtin net transports in priority order, NULL-terminated (transport.c). */
extern const st_net_ops_t *const st_net_transports[];

/* The transport named name in table (NULL-terminated), or NULL. */
const st_net_ops_t *st_net_find(const st_net_ops_t *const *table, const char *name);

#endif
