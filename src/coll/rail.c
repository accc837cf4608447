/*
 * rail.c - one transfer of an algorithm over the net (see rail.h): post, test, and the one way a
 * failed transfer is said.
 */
#include "config.h"
#include "coll/rail.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

#include "base/log.h"
#include "codec/codec.h"
#include "engine/op.h"

/* Posts x: a send of buf when is_send, else a receive into it. */
static st_status_t st_rail_post(st_comm_t *comm, st_rail_xfer_t *x, int peer, void *buf,
                                size_t len, uint64_t tag, int is_send)
{
    st_net_ep_t *ep = comm->eps[peer];
    st_status_t  status;

    x->peer    = peer;
    x->len     = len;
    x->tag     = tag;
    x->is_send = is_send;
    x->buf     = buf;
    status = is_send ? comm->net->isend(ep, buf, len, tag, NULL, &x->req)
                     : comm->net->irecv(ep, buf, len, tag, NULL, &x->req);
    x->posted = (status == ST_OK);
    return status;
}

st_status_t st_rail_send(st_comm_t *comm, st_rail_xfer_t *x, int peer, const void *buf,
                         size_t len, uint64_t tag)
{
    x->codec = NULL;
    return st_rail_post(comm, x, peer, (void *)buf, len, tag, 1); /* isend only reads it */
}

st_status_t st_rail_recv(st_comm_t *comm, st_rail_xfer_t *x, int peer, void *buf, size_t len,
                         uint64_t tag)
{
    x->codec = NULL;
    return st_rail_post(comm, x, peer, buf, len, tag, 0);
}

st_status_t st_rail_send_coded(st_comm_t *comm, st_rail_xfer_t *x, int peer,
                               const strataCompressParams_t *codec, strataDataType_t dt,
                               const void *src, size_t n, float *residual, void *wire,
                               float *scratch, uint64_t tag)
{
    st_codec_encode(codec, dt, src, n, residual, wire, scratch);
    x->codec = NULL;
    return st_rail_post(comm, x, peer, wire, st_codec_wire_bytes(codec, dt, n), tag, 1);
}

st_status_t st_rail_recv_coded(st_comm_t *comm, st_rail_xfer_t *x, int peer,
                               const strataCompressParams_t *codec, strataDataType_t dt,
                               void *dst, size_t n, void *wire, uint64_t tag)
{
    x->codec = codec; /* before the post: the receive may complete at once */
    x->dtype = dt;
    x->dst   = dst;
    x->n     = n;
    return st_rail_post(comm, x, peer, wire, st_codec_wire_bytes(codec, dt, n), tag, 0);
}

st_status_t st_rail_test(st_rail_xfer_t *x)
{
    if (!x->posted) {
        return ST_OK;
    }
    if (!__atomic_load_n(&x->req.done, __ATOMIC_ACQUIRE)) {
        return ST_INPROGRESS;
    }
    x->posted = 0;
    if (!x->is_send && (x->req.status == ST_ERR_TRUNCATED ||
                        (x->req.status == ST_OK && x->req.len != x->len))) {
        return ST_ERR_USAGE;
    }
    if (x->is_send && x->req.status == ST_ERR_TRUNCATED) {
        return ST_ERR_USAGE; /* a transport that fails both sides (verbs) */
    }
    if (x->req.status == ST_ERR_CANCELED) {
        return ST_ERR_REMOTE; /* cancelled because the communicator is failing: a peer's doing */
    }
    if (x->req.status == ST_OK && x->codec != NULL) {
        st_codec_decode(x->codec, x->dtype, x->buf, x->n, x->dst);
    }
    return x->req.status;
}

st_status_t st_rail_test_all(st_rail_xfer_t *xs, int n, int *at_p)
{
    for (int i = 0; i < n; i++) {
        if (st_rail_busy(&xs[i])) {
            *at_p = i;
            return ST_INPROGRESS;
        }
    }
    for (int i = 0; i < n; i++) {
        st_status_t status = st_rail_test(&xs[i]);

        if (status != ST_OK) {
            *at_p = i;
            return status;
        }
    }
    return ST_OK;
}

int st_rail_reqs(st_rail_xfer_t *xs, int n, st_request_t **reqs)
{
    int k = 0;

    for (int i = 0; i < n; i++) {
        if (st_rail_req(&xs[i]) != NULL) {
            if (reqs != NULL) {
                reqs[k] = st_rail_req(&xs[i]);
            }
            k++;
        }
    }
    return k;
}

st_status_t st_rail_fail(const st_op_t *op, const st_rail_xfer_t *x, st_status_t status,
                         const char *where, ...)
{
    char    place[160];
    va_list ap;

    va_start(ap, where);
    vsnprintf(place, sizeof(place), where, ap);
    va_end(ap);
    /* a transfer to or from a rank whose process has exited failed because it did, whatever
     * error the transport saw on the way (CI, under the sanitizers: UCX failed a send to a killed
     * rank with an I/O error): the peer's failure, strataRemoteError */
    if (status == ST_ERR_IO && x->peer >= 0 && st_comm_peer_exited(op->comm, x->peer)) {
        status = ST_ERR_REMOTE;
    }
    if (status == ST_ERR_USAGE && x->is_send) {
        char takes[48];

        if (x->req.len > 0 && x->req.len < x->len) {
            snprintf(takes, sizeof(takes), "%zu B", x->req.len);
        } else {
            snprintf(takes, sizeof(takes), "less than %zu B", x->len);
        }
        st_error(st_tag_is_p2p(x->tag) ? ST_SUB_P2P : ST_SUB_COLL,
                 "%s #%llu (%s) rank %d: %s: sent %zu B to rank %d, whose receive takes %s: %s",
                 op->coll, (unsigned long long)op->seq, op->comm->name, op->comm->rank, place,
                 x->len, x->peer, takes,
                 st_tag_is_p2p(x->tag) ? "the send and receive counts differ"
                                       : "do all ranks call the same collective with the same "
                                         "count and datatype?");
        return status;
    }
    if (status == ST_ERR_USAGE) {
        char sent[48];

        /* a truncated receive knows the bytes sent when the transport does (else 0); a short
         * one got them all, 0 included */
        if (x->req.status == ST_ERR_TRUNCATED && x->req.len <= x->len) {
            snprintf(sent, sizeof(sent), "more than %zu B", x->len);
        } else {
            snprintf(sent, sizeof(sent), "%zu B", x->req.len);
        }
        st_error(st_tag_is_p2p(x->tag) ? ST_SUB_P2P : ST_SUB_COLL,
                 "%s #%llu (%s) rank %d: %s: expected %zu B from rank %d, rank %d sent %s: %s",
                 op->coll, (unsigned long long)op->seq, op->comm->name, op->comm->rank, place,
                 x->len, x->peer, x->peer, sent,
                 st_tag_is_p2p(x->tag) ? "the send and receive counts differ"
                                       : "do all ranks call the same collective with the same "
                                         "count and datatype?");
        return status;
    }
    /* the transport's reason (verbs: the work completion's status, QP and likely cause) */
    st_error(st_tag_is_p2p(x->tag) ? ST_SUB_P2P : ST_SUB_COLL,
             "%s #%llu (%s) rank %d: %s: %s rank %d failed: %s%s%.384s", op->coll,
             (unsigned long long)op->seq, op->comm->name, op->comm->rank, place,
             x->is_send ? "send to" : "receive from", x->peer,
             st_status_str(x->req.status), x->req.why != NULL ? ": " : "",
             x->req.why != NULL ? x->req.why : "");
    return status;
}
