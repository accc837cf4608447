/*
 * bootstrap.h - the unique id and the TCP rendezvous that lets the ranks of a new communicator
 * find each other.
 *
 * strataGetUniqueId picks an interface (STRATA_SOCKET_IFNAME), opens a listening socket there and
 * starts a root thread that serves ONE communicator: each rank connects, presents the secret of
 * the id, its rank, nranks and a fixed-size blob (its transport addresses, node id); once all
 * nranks have arrived the root sends every rank the table of all blobs, ordered by rank, and
 * exits. Anything else on that port (wrong secret, garbage, oversized lengths, silence) is dropped
 * and logged without disturbing the real ranks. When the deadline passes with ranks missing, the
 * root tells every waiting rank which ranks never arrived.
 *
 * With STRATA_COMM_ID=host:port the id names that address instead (no root is started by
 * strataGetUniqueId); rank 0 of strataCommInitRank starts the root there, as NCCL_COMM_ID does.
 *
 * The process may fork while its roots run; that is how launchers start ranks (make the id, then
 * fork the ranks, which inherit it). The root stays with the parent and serves the children; a
 * child holds none of the root's sockets and none of its locks, and may make ids of its own. The
 * sockets are also close-on-exec.
 */
#ifndef ST_BOOTSTRAP_H
#define ST_BOOTSTRAP_H

#include <stddef.h>
#include <stdint.h>

#include "base/socket.h"
#include "base/status.h"
#include "strata.h"

#define ST_BOOTSTRAP_SECRET_BYTES 16
#define ST_BOOTSTRAP_MAX_BLOB     (64 * 1024)  /* largest per-rank blob accepted from the wire */
#define ST_BOOTSTRAP_MAX_RANKS    (1 << 20)

/* The decoded contents of a strataUniqueId. */
typedef struct st_unique_id {
    uint32_t      magic;
    uint32_t      version;
    uint8_t       secret[ST_BOOTSTRAP_SECRET_BYTES];
    uint32_t      from_env;  /* 1: the address came from STRATA_COMM_ID; rank 0 starts the root */
    st_sockaddr_t root;      /* where the root listens */
} st_unique_id_t;

/* The wire protocol, for tests and for anyone reading a packet capture. All integers are
 * unsigned 32-bit, big-endian.
 *   rank -> root, the hello:  magic, version, secret (16 bytes), rank, nranks, blob_len; then the
 *                             blob (blob_len bytes)
 *   root -> rank, the reply:  magic, status (ST_BOOTSTRAP_REPLY_*), nranks, blob_len, msg_len;
 *                             then msg_len bytes of text (no NUL; the reason for a non-OK status);
 *                             then, with status OK only, the table (nranks * blob_len bytes).
 * The root closes a connection whose first bytes are not a hello of this magic without answering;
 * any other hello it cannot accept gets a REJECT reply saying why. */
#define ST_BOOTSTRAP_WIRE_MAGIC   0x53544253u /* "STBS" */
#define ST_BOOTSTRAP_WIRE_VERSION 1u
#define ST_BOOTSTRAP_HELLO_LEN    (5 * 4 + ST_BOOTSTRAP_SECRET_BYTES)
#define ST_BOOTSTRAP_REPLY_LEN    (5 * 4)
#define ST_BOOTSTRAP_MSG_MAX      1024 /* longest reason text a rank accepts */

typedef enum {
    ST_BOOTSTRAP_REPLY_OK      = 0, /* the table follows */
    ST_BOOTSTRAP_REPLY_TIMEOUT = 1, /* the root's deadline passed; msg names the missing ranks */
    ST_BOOTSTRAP_REPLY_REJECT  = 2  /* this hello was refused; msg says why */
} st_bootstrap_reply_status_t;

/* The parsers of the wire messages, callable on any bytes (the root and the ranks use them; so
 * does the fuzzer in tests/fuzz/). They read exactly the header length and never more. */
typedef struct st_bootstrap_hello {
    uint32_t version;
    uint8_t  secret[ST_BOOTSTRAP_SECRET_BYTES];
    uint32_t rank;
    uint32_t nranks;
    uint32_t blob_len;
} st_bootstrap_hello_t;

typedef struct st_bootstrap_reply {
    uint32_t status; /* st_bootstrap_reply_status_t */
    uint32_t nranks;
    uint32_t blob_len;
    uint32_t msg_len; /* <= ST_BOOTSTRAP_MSG_MAX */
} st_bootstrap_reply_t;

/* Decodes a hello header from len bytes of buf. ST_ERR_INVALID when len < ST_BOOTSTRAP_HELLO_LEN
 * or the magic is not strata's (the root drops such a connection unanswered); else ST_OK, also for
 * fields that st_bootstrap_hello_check refuses. Not logged. */
st_status_t st_bootstrap_hello_decode(const void *buf, size_t len, st_bootstrap_hello_t *out);

/* The checks of a hello that need no state: the version, nranks in 1..ST_BOOTSTRAP_MAX_RANKS,
 * blob_len <= ST_BOOTSTRAP_MAX_BLOB, rank < nranks. ST_OK, or ST_ERR_INVALID with the reason
 * (one line) in why. Not logged. */
st_status_t st_bootstrap_hello_check(const st_bootstrap_hello_t *h, char *why, size_t why_len);

/* Decodes a reply header from len bytes of buf. ST_ERR_INVALID when len < ST_BOOTSTRAP_REPLY_LEN,
 * the magic is wrong, the status unknown or msg_len > ST_BOOTSTRAP_MSG_MAX. Not logged. */
st_status_t st_bootstrap_reply_decode(const void *buf, size_t len, st_bootstrap_reply_t *out);

/* Makes a new id (see above). ST_ERR_NO_DEVICE / ST_ERR_INVALID when no interface matches
 * STRATA_SOCKET_IFNAME (logged with the value), ST_ERR_IO when the socket or thread fails. */
st_status_t st_bootstrap_unique_id(strataUniqueId *id);

/* Encodes an id (for STRATA_COMM_ID ids, and tests that build ids by hand). The byte layout is
 * fixed and in network byte order, so ids pass between hosts of any endianness. ST_ERR_INVALID for
 * an address that is neither IPv4 nor IPv6, or a zero port. */
st_status_t st_bootstrap_id_encode(const st_unique_id_t *in, strataUniqueId *id);

/* Decodes and checks an id (magic, version, address family). ST_ERR_INVALID for garbage. */
st_status_t st_bootstrap_id_decode(const strataUniqueId *id, st_unique_id_t *out);

/* Starts the root for an id whose address came from STRATA_COMM_ID (called by rank 0), bound to
 * that address, for exactly nranks ranks (1..ST_BOOTSTRAP_MAX_RANKS). After `timeout` seconds
 * (INFINITY: never) it tells the waiting ranks which ranks are missing and exits.
 * ST_ERR_IO when it cannot listen there (logged: typically the port is taken); ST_ERR_INVALID for
 * bad arguments. */
st_status_t st_bootstrap_root_start(const st_unique_id_t *id, int nranks, double timeout);
/* Ends the root started for the id whose secret is `secret` (ST_BOOTSTRAP_SECRET_BYTES), if it is
 * still gathering: it stops listening at once (so the port can serve a new root) and answers the
 * ranks waiting at it that the communicator was aborted. For strataCommAbort of a rank 0 whose
 * init still waits; harmless when no such root runs. */
void st_bootstrap_root_abort(const uint8_t *secret);

/* Number of roots still running in this process (each exits after serving its communicator, or at
 * its deadline). For tests and leak checks: 0 means every bootstrap socket the roots opened is
 * closed and their threads have been joined. A forked child starts at 0. */
int st_bootstrap_root_count(void);

/* How long past its own deadline a rank keeps waiting for the root's answer (see below). */
#define ST_BOOTSTRAP_REPLY_GRACE_S 0.5

/* The rendezvous: sends (rank, nranks, blob of blob_len bytes) to the root of id and receives the
 * blobs of all ranks into table (nranks * blob_len bytes, rank r's at r * blob_len). Blocks until
 * all ranks have arrived or `timeout` seconds have passed.
 * ST_ERR_TIMEOUT when ranks are missing at the deadline (the error names them, e.g. "ranks 3, 5
 * never joined") or the root could not be reached; ST_ERR_USAGE when the root rejected this rank
 * (wrong secret, nranks differing from other ranks, a rank joining twice, blob sizes differing);
 * ST_ERR_REMOTE when the root closed the connection without answering; ST_ERR_IO on socket
 * failures; ST_ERR_INVALID for bad arguments. Every error is logged (st_error) with this rank and
 * the root's address. table may hold partial data after an error. The wait for the root's answer
 * lasts up to ST_BOOTSTRAP_REPLY_GRACE_S past `timeout`, so that a root whose deadline is a
 * little later than this rank's can still say which ranks are missing. */
st_status_t st_bootstrap_exchange(const st_unique_id_t *id, int rank, int nranks, const void *blob,
                                  size_t blob_len, void *table, double timeout);

#endif
