/*
 * rail.h - one transfer of an algorithm over the net: the inter-node step that the flat ring
 * (coll.c's pipeline), hier's inter-node rings, small's leaders' exchange and send/recv all post
 * and test here, and nowhere else.
 *
 * This is where what changes the bytes on the wire plugs in: a codec (compression of the
 * inter-node phase) encodes in st_rail_send and decodes in st_rail_test; a transport's memory
 * handle (a registered buffer for zero-copy RDMA) rides with the transfer. A failure is classified
 * once (a peer's failure, a size that is not the one expected) and said once, in one format:
 *   "<coll> #<seq> (<comm>) rank <r>: <where>: receive from rank <p> failed: <why>"
 *   "<coll> #<seq> (<comm>) rank <r>: <where>: expected <n> B from rank <p>, rank <p> sent <m> B:
 *    <hint>"
 */
#ifndef ST_COLL_RAIL_H
#define ST_COLL_RAIL_H

#include <stddef.h>
#include <stdint.h>

#include "base/status.h"
#include "engine/comm.h"
#include "engine/exec.h"
#include "transports/transport.h"

typedef struct st_rail_xfer {
    st_request_t req;
    int          peer;    /* the rank sent to or received from */
    size_t       len;     /* bytes sent, or expected */
    uint64_t     tag;
    int          is_send;
    int          posted;  /* from a post until st_rail_test says it is over */
    /* a coded receive (st_rail_recv_coded): decoded from buf into dst when it lands; else NULL */
    const strataCompressParams_t *codec;
    strataDataType_t dtype;
    void        *buf, *dst;
    size_t       n;       /* elements decoded */
} st_rail_xfer_t;

/* Where a step that receives and sends keeps each (st_rail_xfer_t [2]): the receive first, so
 * that a step waiting on both names the peer it waits to hear from. */
enum { ST_RAIL_RECV = 0, ST_RAIL_SEND = 1 };

/* Posts a send of len bytes (0 allowed: an empty message) at buf to rank peer of comm with tag
 * (engine/op.h's st_tag_*); buf stays untouched until the transfer is over. ST_OK once posted,
 * else the transport's error (x not posted). */
st_status_t st_rail_send(st_comm_t *comm, st_rail_xfer_t *x, int peer, const void *buf,
                         size_t len, uint64_t tag);
/* Posts a receive of exactly len bytes (0 allowed) into buf from rank peer with tag. */
st_status_t st_rail_recv(st_comm_t *comm, st_rail_xfer_t *x, int peer, void *buf, size_t len,
                         uint64_t tag);
/* The compressed inter-node step (codec/codec.h, docs/compression.md): encodes n elements of dt
 * at src (plus residual[0..n), then left holding what the codec dropped, when residual != NULL)
 * into wire (st_codec_wire_bytes bytes; scratch: st_codec_scratch floats) and posts its send;
 * wire stays untouched until the transfer is over. */
st_status_t st_rail_send_coded(st_comm_t *comm, st_rail_xfer_t *x, int peer,
                               const strataCompressParams_t *codec, strataDataType_t dt,
                               const void *src, size_t n, float *residual, void *wire,
                               float *scratch, uint64_t tag);
/* Posts a receive of the encoding of n elements of dt into wire; st_rail_test decodes it into
 * dst when it has landed whole. */
st_status_t st_rail_recv_coded(st_comm_t *comm, st_rail_xfer_t *x, int peer,
                               const strataCompressParams_t *codec, strataDataType_t dt,
                               void *dst, size_t n, void *wire, uint64_t tag);
/* ST_INPROGRESS while x is in flight; ST_OK when it completed as posted, or was never posted;
 * else why it failed, not logged (st_rail_fail says it): ST_ERR_USAGE when a receive got another
 * size than expected (longer: truncated), ST_ERR_REMOTE when the peer failed or the transfer was
 * cancelled (the communicator is failing), the transport's status otherwise. x is over (not
 * posted) once this returned anything but ST_INPROGRESS. A coded receive (st_rail_recv_coded) that
 * completed is decoded into its dst before ST_OK is returned. */
st_status_t st_rail_test(st_rail_xfer_t *x);
/* Logs x's failure `status` (from st_rail_test) once, naming op's collective, sequence number,
 * communicator and rank, where (printf format: the phase and step) and the peer, and returns
 * status to propagate. */
st_status_t st_rail_fail(const st_op_t *op, const st_rail_xfer_t *x, st_status_t status,
                         const char *where, ...) __attribute__((format(printf, 4, 5)));
/* The transfers of one step, tested together: ST_INPROGRESS while any of xs[0..n) is in flight
 * (*at_p: the first such, whose peer the step waits for); else each is taken by st_rail_test in
 * order and ST_OK returned, or the first failure (*at_p: its index) for st_rail_fail. Taking none
 * before all are over keeps a step's received data and its completion together. */
st_status_t st_rail_test_all(st_rail_xfer_t *xs, int n, int *at_p);
/* Appends to reqs (may be NULL: only count) the requests of xs[0..n) still posted (what
 * st_exec_cancel must take back); returns how many. */
int st_rail_reqs(st_rail_xfer_t *xs, int n, st_request_t **reqs);
/* 1 while x is posted and not yet complete (st_rail_test would say ST_INPROGRESS): to wait for
 * both transfers of a step before taking either. */
static inline int st_rail_busy(const st_rail_xfer_t *x)
{
    return x->posted && !__atomic_load_n(&x->req.done, __ATOMIC_ACQUIRE);
}
/* The receive's or send's request, for st_exec_cancel, when x is posted; else NULL. */
static inline st_request_t *st_rail_req(st_rail_xfer_t *x)
{
    return x->posted ? &x->req : NULL;
}

#endif
