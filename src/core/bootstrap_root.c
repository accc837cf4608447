/*
 * bootstrap_root.c - the root of the TCP rendezvous: gathers the hellos of one communicator's
 * ranks and sends every rank the table (protocol in bootstrap.h, wire codec in bootstrap_wire.c).
 *
 * The root is one detached thread per communicator. It runs a poll() loop over nonblocking sockets
 * because the port it listens on is reachable by anything on the network: a port scanner that
 * connects and says nothing, a peer trickling bytes, a rank of another job holding a stale id.
 * None of them may hold up the real ranks, so no read or write of the root ever blocks, every
 * connection has its own deadline, every length read from the wire is checked against a limit
 * before it is used, and a misbehaving connection costs one warning and one close.
 *
 * A connection goes through these states:
 *   HELLO   reading the hello (header, then blob); closed at ST_BOOT_HELLO_TIMEOUT_S
 *   WAIT    a rank whose hello is complete, waiting for the others
 *   REPLY   sending the reply (the table, a timeout verdict or a rejection), draining input
 *   LINGER  reply sent and write side shut; waiting for the peer to close (or a deadline), so
 *           that closing with unread input never turns into a RST that destroys the reply
 * The root exits once the table or the timeout verdict has gone out and every connection closed.
 *
 * Forking while a root runs is the normal case, not an edge case: launchers (collbench -np, the
 * test harnesses) call strataGetUniqueId and then fork the ranks. Two things must then hold, and
 * the fork handlers below see to both:
 *   - the child holds no socket of the parent's roots. It has no root thread, so an inherited
 *     listener would stay open with nobody accepting, and an inherited connection would never
 *     send its FIN when the parent's root closes it.
 *   - no root thread is inside malloc, mmap or the log when the process forks. The child gets
 *     a copy of every lock such a thread holds, held by a thread it does not have. UCX's memory
 *     hooks (libucm, armed when libucs loads) wrap every mmap, munmap and madvise in a rwlock:
 *     a root creating its malloc arena at that moment left children blocked forever in
 *     ucp_init. So a root holds st_boot_lock whenever it is not waiting in poll(), and the
 *     prepare handler takes that lock.
 */
#include "config.h"
#include "core/bootstrap_root.h"

#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <math.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/uio.h>
#include <unistd.h>

#include "base/log.h"
#include "core/bootstrap_wire.h"

/* Root timing. A real rank sends its whole hello right after connecting, so a few seconds is
 * plenty; anything slower is a stranger holding a socket. */
#define ST_BOOT_HELLO_TIMEOUT_S 5.0
#define ST_BOOT_REJECT_LINGER_S 2.0 /* to deliver a rejection or a timeout verdict */
#define ST_BOOT_TABLE_LINGER_S 30.0 /* to deliver the table to a slow reader */

/* Connections still in their hello are capped: past this the root stops accepting (the kernel's
 * backlog holds the rest) until hellos complete or expire, so a flood cannot exhaust the fds. */
#define ST_BOOT_MAX_PENDING 4096
#define ST_BOOT_ACCEPT_BURST 128   /* accepts per loop, so reads are served between bursts */
#define ST_BOOT_ACCEPT_PAUSE_S 0.1 /* after EMFILE and friends */
#define ST_BOOT_DRAIN_READS 16     /* reads of discarded input per wakeup */

typedef enum {
    ST_BOOT_CONN_HELLO,
    ST_BOOT_CONN_WAIT,
    ST_BOOT_CONN_REPLY,
    ST_BOOT_CONN_LINGER
} st_boot_conn_state_t;

typedef struct st_boot_conn {
    int                  fd;
    st_boot_conn_state_t state;
    double               deadline; /* HELLO: complete by then; REPLY, LINGER: give up then */
    char                 peer[ST_BOOTSTRAP_ADDR_STR];
    uint8_t              hello[ST_BOOTSTRAP_HELLO_LEN];
    size_t               hello_got;
    int                  rank; /* -1 until the hello header is accepted; then owns slots[rank] */
    uint8_t             *blob;
    size_t               blob_got;
    uint8_t             *out; /* reply header and message (owned) */
    size_t               out_len;
    const uint8_t       *table; /* the root's table (not owned), for an OK reply */
    size_t               table_len;
    size_t               sent; /* bytes of out, then of table, sent */
} st_boot_conn_t;

typedef enum {
    ST_BOOT_GATHER, /* accepting ranks */
    ST_BOOT_FLUSH   /* listener closed; delivering replies */
} st_boot_phase_t;

typedef struct st_boot_root st_boot_root_t;

struct st_boot_root {
    st_boot_root_t  *next; /* in st_boot_roots */
    pthread_t        thread;
    int              started; /* the thread runs its own code (see st_bootstrap_root_spawn) */
    int              done; /* sockets closed, lock released for good: only the join is left */
    int              listen_fd;
    int              aborted;    /* st_bootstrap_root_abort: expire at once */
    char             addr[ST_BOOTSTRAP_ADDR_STR];
    uint8_t          secret[ST_BOOTSTRAP_SECRET_BYTES];
    double           timeout;
    double           deadline;
    st_boot_phase_t  phase;
    uint32_t         nranks;       /* 0 until fixed by root_start or the first accepted rank */
    int              nranks_fixed; /* nranks came from root_start, not from a rank */
    uint32_t         blob_len;
    int              blob_len_set;
    int              first_rank; /* the rank that fixed nranks / blob_len, for messages */
    char             first_peer[ST_BOOTSTRAP_ADDR_STR];
    st_boot_conn_t **slots;   /* nranks entries: the connection of each rank, or NULL */
    uint32_t         arrived; /* ranks in WAIT (complete hellos) */
    st_boot_conn_t **conns;
    size_t           nconns;
    size_t           conns_cap;
    struct pollfd   *pfds;
    size_t           pfds_cap;
    uint8_t         *table;
    double           accept_pause_until;
    int              accept_warned;
};

/* Every root of this process that has not been joined yet. st_boot_lock guards the list and every
 * root's state: a root thread holds it except while it waits in poll(). */
static pthread_mutex_t st_boot_lock = PTHREAD_MUTEX_INITIALIZER;
static st_boot_root_t *st_boot_roots;
static int             st_boot_roots_live; /* roots not done */
static pthread_cond_t  st_boot_started_cond = PTHREAD_COND_INITIALIZER;
static pthread_once_t  st_boot_atfork_once = PTHREAD_ONCE_INIT;
static int             st_boot_atfork_ret;

/* Constant time: how many leading bytes of a guess are right must not show in the timing. */
static int st_boot_secret_equal(const uint8_t *a, const uint8_t *b)
{
    volatile uint8_t diff = 0;

    for (size_t i = 0; i < ST_BOOTSTRAP_SECRET_BYTES; i++) {
        diff |= a[i] ^ b[i];
    }
    return diff == 0;
}

/* ------------------------------------------------------------------------------------------ */
/* the root                                                                                    */
/* ------------------------------------------------------------------------------------------ */

static int st_boot_poll_ms(double deadline, double now)
{
    if (isinf(deadline)) {
        return -1;
    }
    if (deadline <= now) {
        return 0;
    }
    if ((deadline - now) * 1e3 >= (double)INT_MAX) {
        return INT_MAX;
    }
    return (int)ceil((deadline - now) * 1e3);
}

/* Closes conns[i] and gives its rank's slot back: a rank that disconnects before the table is
 * ready may connect again (a restarted process) instead of failing the whole communicator. */
static void st_boot_conn_close(st_boot_root_t *root, size_t i)
{
    st_boot_conn_t *c = root->conns[i];

    if (c->rank >= 0 && root->slots != NULL && root->slots[c->rank] == c) {
        root->slots[c->rank] = NULL;
        if (c->state == ST_BOOT_CONN_WAIT) {
            root->arrived--;
        }
    }
    close(c->fd);
    free(c->blob);
    free(c->out);
    free(c);
    root->conns[i] = root->conns[--root->nconns];
}

static void st_boot_conn_drop(st_boot_root_t *root, size_t i, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

/* Drops a connection that is not worth an answer, with one warning naming the peer. */
static void st_boot_conn_drop(st_boot_root_t *root, size_t i, const char *fmt, ...)
{
    char    why[256];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    st_warn(ST_SUB_BOOT, "bootstrap root %s: dropping connection from %s: %s", root->addr,
            root->conns[i]->peer, why);
    st_boot_conn_close(root, i);
}

/* Queues a reply on c: header, msg, and for OK the table. c switches to REPLY; input is drained
 * from then on. Out of memory leaves a reply-less connection that is closed at its deadline. */
static void st_boot_conn_reply(st_boot_root_t *root, st_boot_conn_t *c, uint32_t code,
                               const char *msg, double deadline)
{
    size_t msg_len = (msg != NULL) ? ST_MIN(strlen(msg), (size_t)ST_BOOTSTRAP_MSG_MAX) : 0;

    free(c->out);
    c->out       = malloc(ST_BOOTSTRAP_REPLY_LEN + msg_len);
    c->out_len   = 0;
    c->sent      = 0;
    c->table     = NULL;
    c->table_len = 0;
    c->state     = ST_BOOT_CONN_REPLY;
    c->deadline  = deadline;
    if (c->out == NULL) {
        st_warn(ST_SUB_BOOT, "bootstrap root %s: out of memory for the reply to %s", root->addr,
                c->peer);
        return;
    }
    st_bootstrap_put32(c->out + 0, ST_BOOTSTRAP_WIRE_MAGIC);
    st_bootstrap_put32(c->out + 4, code);
    st_bootstrap_put32(c->out + 8, root->nranks);
    st_bootstrap_put32(c->out + 12, root->blob_len);
    st_bootstrap_put32(c->out + 16, (uint32_t)msg_len);
    if (msg_len > 0) {
        memcpy(c->out + ST_BOOTSTRAP_REPLY_LEN, msg, msg_len);
    }
    c->out_len = ST_BOOTSTRAP_REPLY_LEN + msg_len;
    if (code == ST_BOOTSTRAP_REPLY_OK) {
        c->table     = root->table;
        c->table_len = (size_t)root->nranks * root->blob_len;
    }
}

static void st_boot_conn_reject(st_boot_root_t *root, st_boot_conn_t *c, double now,
                                const char *fmt, ...) __attribute__((format(printf, 4, 5)));

/* Refuses a hello that was well formed enough to deserve a reason: the rank reports it as
 * ST_ERR_USAGE, which beats a bare "connection closed" when ids get mixed up. */
static void st_boot_conn_reject(st_boot_root_t *root, st_boot_conn_t *c, double now,
                                const char *fmt, ...)
{
    char    why[ST_BOOTSTRAP_MSG_MAX];
    va_list ap;

    va_start(ap, fmt);
    vsnprintf(why, sizeof(why), fmt, ap);
    va_end(ap);
    st_warn(ST_SUB_BOOT, "bootstrap root %s: rejecting %s: %s", root->addr, c->peer, why);
    st_boot_conn_reply(root, c, ST_BOOTSTRAP_REPLY_REJECT, why, now + ST_BOOT_REJECT_LINGER_S);
}

/* Reads and discards input. -1 when the peer closed or failed, else 0. */
static int st_boot_conn_drain(st_boot_conn_t *c)
{
    uint8_t scratch[4096];
    ssize_t n;

    for (int i = 0; i < ST_BOOT_DRAIN_READS; i++) {
        n = recv(c->fd, scratch, sizeof(scratch), MSG_DONTWAIT);
        if (n > 0) {
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        return (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) ? 0 : -1;
    }
    return 0;
}

/* Sends what the socket takes. 1: all sent; 0: more to send; -1: the peer is gone. */
static int st_boot_conn_flush(st_boot_conn_t *c)
{
    size_t  total = c->out_len + c->table_len;
    ssize_t n;

    while (c->sent < total) {
        struct iovec  iov[2];
        struct msghdr mh;
        int           niov = 0;

        if (c->sent < c->out_len) {
            iov[niov].iov_base = c->out + c->sent;
            iov[niov].iov_len  = c->out_len - c->sent;
            niov++;
            if (c->table_len > 0) {
                iov[niov].iov_base = (void *)c->table;
                iov[niov].iov_len  = c->table_len;
                niov++;
            }
        } else {
            iov[niov].iov_base = (void *)(c->table + (c->sent - c->out_len));
            iov[niov].iov_len  = total - c->sent;
            niov++;
        }
        memset(&mh, 0, sizeof(mh));
        mh.msg_iov    = iov;
        mh.msg_iovlen = (size_t)niov;
        n             = sendmsg(c->fd, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            c->sent += (size_t)n;
        } else if (n < 0 && errno == EINTR) {
            continue;
        } else if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return 0;
        } else {
            return -1;
        }
    }
    return 1;
}

/* A complete hello header: decide. Returns 0 to keep the connection (accepted or rejected with a
 * reply), -1 when it was dropped (conns[i] is gone). */
static int st_boot_check_hello(st_boot_root_t *root, size_t i, double now)
{
    st_boot_conn_t      *c = root->conns[i];
    st_bootstrap_hello_t h;
    char                 why[ST_BOOTSTRAP_MSG_MAX];
    uint32_t             rank;
    uint32_t             nranks;
    uint32_t             blob_len;

    if (st_bootstrap_hello_decode(c->hello, sizeof(c->hello), &h) != ST_OK) {
        st_boot_conn_drop(root, i, "not a strata bootstrap hello (magic 0x%08x)",
                          st_bootstrap_get32(c->hello));
        return -1;
    }
    rank     = h.rank;
    nranks   = h.nranks;
    blob_len = h.blob_len;
    /* The secret before the other fields (the version aside, which says why the secret may
     * not match): a stranger learns nothing of this communicator from the answer. */
    if (h.version == ST_BOOTSTRAP_WIRE_VERSION && !st_boot_secret_equal(h.secret, root->secret)) {
        st_boot_conn_reject(root, c, now,
                            "wrong secret: the unique id belongs to another "
                            "communicator or job (or STRATA_COMM_SECRET differs)");
        return 0;
    }
    if (st_bootstrap_hello_check(&h, why, sizeof(why)) != ST_OK) {
        st_boot_conn_reject(root, c, now, "%s", why);
        return 0;
    }
    if (root->nranks != 0 && nranks != root->nranks) {
        if (root->nranks_fixed) {
            st_boot_conn_reject(root, c, now,
                                "rank %u says nranks %u, the root was started for "
                                "%u ranks",
                                rank, nranks, root->nranks);
        } else {
            st_boot_conn_reject(root, c, now,
                                "rank %u says nranks %u, rank %d (from %s) said "
                                "%u first",
                                rank, nranks, root->first_rank, root->first_peer, root->nranks);
        }
        return 0;
    }
    if (root->blob_len_set && blob_len != root->blob_len) {
        st_boot_conn_reject(root, c, now,
                            "rank %u sent a blob of %u bytes, rank %d (from %s) one "
                            "of %u bytes first",
                            rank, blob_len, root->first_rank, root->first_peer, root->blob_len);
        return 0;
    }
    if (root->slots != NULL && root->slots[rank] != NULL) {
        st_boot_conn_reject(root, c, now, "rank %u joined twice (first from %s)", rank,
                            root->slots[rank]->peer);
        return 0;
    }
    if (root->slots == NULL) {
        root->slots = calloc(nranks, sizeof(*root->slots));
        if (root->slots == NULL) {
            st_boot_conn_reject(root, c, now, "the root is out of memory for %u ranks", nranks);
            return 0;
        }
        root->nranks = nranks;
    }
    if (blob_len > 0) {
        c->blob = malloc(blob_len);
        if (c->blob == NULL) {
            st_boot_conn_reject(root, c, now, "the root is out of memory for a blob of %u bytes",
                                blob_len);
            return 0;
        }
    }
    if (!root->blob_len_set) {
        root->blob_len     = blob_len;
        root->blob_len_set = 1;
        root->first_rank   = (int)rank;
        memcpy(root->first_peer, c->peer, sizeof(root->first_peer));
    }
    root->slots[rank] = c;
    c->rank           = (int)rank;
    c->deadline       = ST_MIN(now + ST_BOOT_HELLO_TIMEOUT_S, root->deadline); /* for the blob */
    return 0;
}

/* Reads the hello of conns[i] as far as the socket allows. Reads never go past what the hello
 * says is there, so extra bytes (a protocol violation) show up later, in WAIT. */
static void st_boot_conn_read_hello(st_boot_root_t *root, size_t i, double now)
{
    st_boot_conn_t *c = root->conns[i];
    ssize_t         n;

    while (c->state == ST_BOOT_CONN_HELLO) {
        int header = (c->hello_got < ST_BOOTSTRAP_HELLO_LEN);

        if (!header && c->blob_got == root->blob_len) {
            c->state = ST_BOOT_CONN_WAIT;
            root->arrived++;
            st_debug(ST_SUB_BOOT, "bootstrap root %s: rank %d of %u joined from %s (%u so far)",
                     root->addr, c->rank, root->nranks, c->peer, root->arrived);
            return;
        }
        if (header) {
            n = recv(c->fd, c->hello + c->hello_got, ST_BOOTSTRAP_HELLO_LEN - c->hello_got,
                     MSG_DONTWAIT);
        } else {
            n = recv(c->fd, c->blob + c->blob_got, root->blob_len - c->blob_got, MSG_DONTWAIT);
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            return;
        }
        if (n <= 0) {
            st_boot_conn_drop(root, i, "%s after %zu of %zu hello bytes",
                              n == 0 ? "closed" : strerror(errno), c->hello_got + c->blob_got,
                              (size_t)ST_BOOTSTRAP_HELLO_LEN + (header ? 0 : root->blob_len));
            return;
        }
        if (header) {
            c->hello_got += (size_t)n;
            if (c->hello_got == ST_BOOTSTRAP_HELLO_LEN && st_boot_check_hello(root, i, now) < 0) {
                return;
            }
        } else {
            c->blob_got += (size_t)n;
        }
    }
}

/* A rank in WAIT has nothing to say until the table comes; input means it closed or broke the
 * protocol. Either way its slot is freed so that the rank may connect again. */
static void st_boot_conn_check_wait(st_boot_root_t *root, size_t i)
{
    st_boot_conn_t *c = root->conns[i];
    uint8_t         byte;
    ssize_t         n;

    do {
        n = recv(c->fd, &byte, 1, MSG_DONTWAIT);
    } while (n < 0 && errno == EINTR);
    if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
        return;
    }
    st_boot_conn_drop(root, i, "rank %d %s before all ranks arrived; its slot is free again",
                      c->rank,
                      n == 0  ? "disconnected"
                      : n > 0 ? "sent unexpected bytes"
                              : strerror(errno));
}

/* "ranks 3, 5-7" (or "rank 3") for the ranks that have not completed their hello. */
static void st_boot_format_missing(const st_boot_root_t *root, char *buf, size_t len)
{
    uint32_t missing = root->nranks - root->arrived;
    size_t   off;
    uint32_t r     = 0;
    int      first = 1;

    off = (size_t)snprintf(buf, len, "%s ", missing == 1 ? "rank" : "ranks");
    while (r < root->nranks) {
        uint32_t start;
        int      n;

        if (root->slots[r] != NULL && root->slots[r]->state == ST_BOOT_CONN_WAIT) {
            r++;
            continue;
        }
        start = r;
        while (r + 1 < root->nranks &&
               !(root->slots[r + 1] != NULL && root->slots[r + 1]->state == ST_BOOT_CONN_WAIT)) {
            r++;
        }
        /* Leave room for the ellipsis: a job missing every other rank of thousands still gets a
         * message that fits. */
        if (off + 32 >= len) {
            snprintf(buf + off, len - off, ", ...");
            return;
        }
        if (start == r) {
            n = snprintf(buf + off, len - off, "%s%u", first ? "" : ", ", start);
        } else {
            n = snprintf(buf + off, len - off, "%s%u-%u", first ? "" : ", ", start, r);
        }
        off += (size_t)n;
        first = 0;
        r++;
    }
}

/* All ranks are in: build the table, answer every rank, stop listening. */
static void st_boot_root_complete(st_boot_root_t *root, double now)
{
    size_t table_len = (size_t)root->nranks * root->blob_len;

    close(root->listen_fd);
    root->listen_fd = -1;
    root->phase     = ST_BOOT_FLUSH;
    root->table     = malloc(table_len > 0 ? table_len : 1);
    if (root->table != NULL) {
        for (uint32_t r = 0; r < root->nranks && root->blob_len > 0; r++) {
            memcpy(root->table + (size_t)r * root->blob_len, root->slots[r]->blob, root->blob_len);
        }
        st_info(ST_SUB_BOOT, "bootstrap root %s: all %u ranks joined; sending the %zu-byte table",
                root->addr, root->nranks, table_len);
    } else {
        st_warn(ST_SUB_BOOT, "bootstrap root %s: out of memory for the %zu-byte table of %u ranks",
                root->addr, table_len, root->nranks);
    }
    for (size_t i = root->nconns; i-- > 0;) {
        st_boot_conn_t *c = root->conns[i];

        if (c->state == ST_BOOT_CONN_HELLO) {
            st_boot_conn_close(root, i); /* a stranger still in its hello: no rank is missing */
        } else if (c->state == ST_BOOT_CONN_WAIT) {
            free(c->blob);
            c->blob = NULL;
            if (root->table != NULL) {
                st_boot_conn_reply(root, c, ST_BOOTSTRAP_REPLY_OK, NULL,
                                   now + ST_BOOT_TABLE_LINGER_S);
            } else {
                st_boot_conn_reply(root, c, ST_BOOTSTRAP_REPLY_REJECT,
                                   "the bootstrap root ran out of memory for the table",
                                   now + ST_BOOT_REJECT_LINGER_S);
            }
        }
    }
}

/* The deadline passed with ranks missing: tell the waiting ranks which ones, stop listening. */
static void st_boot_root_expire(st_boot_root_t *root, double now)
{
    char missing[ST_BOOTSTRAP_MSG_MAX - 128];
    char msg[ST_BOOTSTRAP_MSG_MAX];

    close(root->listen_fd);
    root->listen_fd = -1;
    root->phase     = ST_BOOT_FLUSH;
    if (root->aborted) {
        snprintf(msg, sizeof(msg), "the communicator was aborted on rank 0 (strataCommAbort) "
                 "before all ranks joined");
        st_info(ST_SUB_BOOT, "bootstrap root %s: %s; exiting", root->addr, msg);
    } else if (root->nranks == 0) {
        /* Nobody used the id (or only strangers came): normal when an id is thrown away. */
        st_info(ST_SUB_BOOT, "bootstrap root %s: no rank joined within %g s; exiting", root->addr,
                root->timeout);
        msg[0] = '\0';
    } else {
        st_boot_format_missing(root, missing, sizeof(missing));
        snprintf(msg, sizeof(msg),
                 "bootstrap timed out after %g s: %s never joined (%u of %u "
                 "ranks arrived)",
                 root->timeout, missing, root->arrived, root->nranks);
        st_warn(ST_SUB_BOOT, "bootstrap root %s: %s", root->addr, msg);
    }
    for (size_t i = root->nconns; i-- > 0;) {
        st_boot_conn_t *c = root->conns[i];

        if (c->rank >= 0 && (c->state == ST_BOOT_CONN_HELLO || c->state == ST_BOOT_CONN_WAIT)) {
            st_boot_conn_reply(root, c, ST_BOOTSTRAP_REPLY_TIMEOUT, msg,
                               now + ST_BOOT_REJECT_LINGER_S);
        } else if (c->state == ST_BOOT_CONN_HELLO) {
            st_boot_conn_close(root, i);
        }
    }
}

/* Per-connection deadlines. */
static void st_boot_root_expire_conns(st_boot_root_t *root, double now)
{
    for (size_t i = root->nconns; i-- > 0;) {
        st_boot_conn_t *c = root->conns[i];

        if (c->state == ST_BOOT_CONN_WAIT || now < c->deadline) {
            continue;
        }
        if (c->state == ST_BOOT_CONN_HELLO) {
            st_boot_conn_drop(root, i, "no complete hello within %g s (%zu bytes received)",
                              ST_BOOT_HELLO_TIMEOUT_S, c->hello_got + c->blob_got);
        } else if (c->table_len > 0 && c->sent < c->out_len + c->table_len) {
            st_boot_conn_drop(root, i, "rank %d did not read the table within %g s", c->rank,
                              ST_BOOT_TABLE_LINGER_S);
        } else {
            st_debug(ST_SUB_BOOT, "bootstrap root %s: closing %s after its reply", root->addr,
                     c->peer);
            st_boot_conn_close(root, i);
        }
    }
}

static void st_boot_root_accept(st_boot_root_t *root, double now)
{
    for (int k = 0; k < ST_BOOT_ACCEPT_BURST; k++) {
        st_sockaddr_t   peer;
        socklen_t       plen = sizeof(peer);
        st_boot_conn_t *c;
        int             one = 1;
        int             fd;

        memset(&peer, 0, sizeof(peer));
        fd = accept4(root->listen_fd, &peer.sa, &plen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0) {
            int err = errno;

            if (err == EINTR || err == ECONNABORTED || err == EPROTO) {
                continue; /* that one connection is gone; the next may be fine */
            }
            if (err == EMFILE || err == ENFILE || err == ENOBUFS || err == ENOMEM) {
                /* The pending connection stays in the backlog and would wake poll at once:
                 * pause instead of spinning, and say why once. */
                if (!root->accept_warned) {
                    st_warn(ST_SUB_BOOT,
                            "bootstrap root %s: accept failed with %u ranks "
                            "connected: %s (raise ulimit -n?)",
                            root->addr, root->arrived, strerror(err));
                    root->accept_warned = 1;
                }
                root->accept_pause_until = now + ST_BOOT_ACCEPT_PAUSE_S;
            } else if (err != EAGAIN && err != EWOULDBLOCK) {
                st_warn(ST_SUB_BOOT, "bootstrap root %s: accept failed: %s", root->addr,
                        strerror(err));
                root->accept_pause_until = now + ST_BOOT_ACCEPT_PAUSE_S;
            }
            return;
        }
        if (root->nconns == root->conns_cap) {
            size_t           cap   = ST_MAX(root->conns_cap * 2, (size_t)64);
            st_boot_conn_t **conns = realloc(root->conns, cap * sizeof(*conns));

            if (conns == NULL) {
                st_warn(ST_SUB_BOOT, "bootstrap root %s: out of memory for connection %zu",
                        root->addr, root->nconns);
                close(fd);
                return;
            }
            root->conns     = conns;
            root->conns_cap = cap;
        }
        c = calloc(1, sizeof(*c));
        if (c == NULL) {
            st_warn(ST_SUB_BOOT, "bootstrap root %s: out of memory for a connection", root->addr);
            close(fd);
            return;
        }
        setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
        c->fd       = fd;
        c->rank     = -1;
        c->state    = ST_BOOT_CONN_HELLO;
        c->deadline = ST_MIN(now + ST_BOOT_HELLO_TIMEOUT_S, root->deadline);
        st_socket_addr_str(&peer, c->peer, sizeof(c->peer));
        root->conns[root->nconns++] = c;
    }
}

/* Serves connections until the phase is FLUSH and nothing is left. Called and returns with
 * st_boot_lock held. */
static void st_boot_root_run(st_boot_root_t *root)
{
    for (;;) {
        double         now = st_time_now();
        double         wake;
        size_t         pending = 0;
        struct pollfd *pfds;
        nfds_t         npfds;
        int            ms;
        int            ret;
        int            err;

        if (root->phase == ST_BOOT_GATHER) {
            if (root->nranks > 0 && root->arrived == root->nranks) {
                st_boot_root_complete(root, now);
            } else if (now >= root->deadline) {
                st_boot_root_expire(root, now);
            }
        }
        st_boot_root_expire_conns(root, now);
        if (root->phase == ST_BOOT_FLUSH && root->nconns == 0) {
            return;
        }

        if (root->pfds_cap < root->nconns + 1) {
            size_t         cap  = ST_MAX(root->conns_cap, root->nconns) + 1;
            struct pollfd *grown = realloc(root->pfds, cap * sizeof(*grown));

            if (grown == NULL) {
                st_warn(ST_SUB_BOOT,
                        "bootstrap root %s: out of memory for %zu poll entries; "
                        "giving up",
                        root->addr, cap);
                return;
            }
            root->pfds     = grown;
            root->pfds_cap = cap;
        }
        wake = (root->phase == ST_BOOT_GATHER) ? root->deadline : INFINITY;
        for (size_t i = 0; i < root->nconns; i++) {
            st_boot_conn_t *c = root->conns[i];

            root->pfds[i + 1].fd      = c->fd;
            root->pfds[i + 1].revents = 0;
            root->pfds[i + 1].events  = POLLIN;
            if (c->state == ST_BOOT_CONN_REPLY && c->out_len > 0) {
                root->pfds[i + 1].events |= POLLOUT;
            }
            if (c->state != ST_BOOT_CONN_WAIT) {
                wake = ST_MIN(wake, c->deadline);
            }
            if (c->state == ST_BOOT_CONN_HELLO && c->rank < 0) {
                pending++;
            }
        }
        /* A negative fd is ignored by poll: that is how accepting pauses. */
        root->pfds[0].fd      = root->listen_fd;
        root->pfds[0].events  = POLLIN;
        root->pfds[0].revents = 0;
        if (root->listen_fd >= 0 && now < root->accept_pause_until) {
            root->pfds[0].fd = -1;
            wake             = ST_MIN(wake, root->accept_pause_until);
        } else if (pending >= ST_BOOT_MAX_PENDING) {
            root->pfds[0].fd = -1;
        }

        /* The one wait of the root, and the only time it runs without st_boot_lock (so it reads
         * nothing of root meanwhile): a fork happens while every root sits here (see
         * st_boot_atfork_prepare). */
        pfds  = root->pfds;
        npfds = root->nconns + 1;
        ms    = st_boot_poll_ms(wake, now);
        pthread_mutex_unlock(&st_boot_lock);
        ret = poll(pfds, npfds, ms);
        err = errno;
        pthread_mutex_lock(&st_boot_lock);
        if (ret < 0 && err != EINTR) {
            st_warn(ST_SUB_BOOT, "bootstrap root %s: poll failed: %s; giving up", root->addr,
                    strerror(err));
            return;
        }
        if (ret <= 0) {
            continue;
        }
        now = st_time_now();
        /* Backwards, so that closing conns[i] (which moves the last connection into i) never
         * skips one that poll reported. Connections accepted below have no events yet. */
        for (size_t i = root->nconns; i-- > 0;) {
            st_boot_conn_t *c  = root->conns[i];
            short           ev = root->pfds[i + 1].revents;

            if (ev == 0) {
                continue;
            }
            switch (c->state) {
            case ST_BOOT_CONN_HELLO: st_boot_conn_read_hello(root, i, now); break;
            case ST_BOOT_CONN_WAIT: st_boot_conn_check_wait(root, i); break;
            case ST_BOOT_CONN_REPLY:
                if ((ev & (POLLIN | POLLHUP | POLLERR)) && st_boot_conn_drain(c) < 0) {
                    st_debug(ST_SUB_BOOT,
                             "bootstrap root %s: %s closed before its reply was "
                             "sent",
                             root->addr, c->peer);
                    st_boot_conn_close(root, i);
                    break;
                }
                if (c->out_len == 0) {
                    break; /* no reply to send (out of memory): wait for the deadline */
                }
                ret = st_boot_conn_flush(c);
                if (ret < 0) {
                    st_boot_conn_close(root, i);
                } else if (ret > 0) {
                    /* Our side is done; the peer's close tells us it has read everything. */
                    shutdown(c->fd, SHUT_WR);
                    c->state = ST_BOOT_CONN_LINGER;
                }
                break;
            case ST_BOOT_CONN_LINGER:
                if (st_boot_conn_drain(c) < 0) {
                    st_boot_conn_close(root, i);
                }
                break;
            }
        }
        if (root->listen_fd >= 0 && (root->pfds[0].revents & POLLIN)) {
            st_boot_root_accept(root, now);
        }
    }
}

/* Closes every socket of the root and frees what it allocated, except the root itself (still on
 * st_boot_roots until joined). Only close(): in a forked child the sockets are shared with the
 * parent's root, and shutdown() would cut the parent's connections too. */
static void st_boot_root_cleanup(st_boot_root_t *root)
{
    while (root->nconns > 0) {
        st_boot_conn_close(root, root->nconns - 1);
    }
    if (root->listen_fd >= 0) {
        close(root->listen_fd);
        root->listen_fd = -1;
    }
    free(root->conns);
    free(root->pfds);
    free(root->slots);
    free(root->table);
    root->conns = NULL;
    root->pfds  = NULL;
    root->slots = NULL;
    root->table = NULL;
}

static void *st_boot_root_main(void *arg)
{
    st_boot_root_t *root = arg;

    /* Before anything else: this thread's first malloc creates its arena with mmap. */
    pthread_mutex_lock(&st_boot_lock);
    root->started = 1;
    pthread_cond_broadcast(&st_boot_started_cond);
    pthread_setname_np(pthread_self(), "strata-boot");
    st_debug(ST_SUB_BOOT, "bootstrap root %s: listening (timeout %g s)", root->addr, root->timeout);
    st_boot_root_run(root);
    st_boot_root_cleanup(root);
    root->done = 1;
    st_boot_roots_live--;
    pthread_mutex_unlock(&st_boot_lock);
    return NULL;
}

/* Joins the roots that are done and frees them; st_boot_lock held. A done root never takes the
 * lock again, so this only waits for the rest of its thread's exit. */
static void st_boot_reap(void)
{
    st_boot_root_t **link = &st_boot_roots;

    while (*link != NULL) {
        st_boot_root_t *root = *link;

        if (!root->done) {
            link = &root->next;
            continue;
        }
        *link = root->next;
        pthread_join(root->thread, NULL);
        free(root);
    }
}

/* Fork handlers (see the top of this file). The prepare handler runs in the forking thread: once
 * it holds st_boot_lock every root waits in poll() or for the lock, inside no malloc, mmap or log
 * call. Roots that are done are joined first, because a thread that is exiting still unmaps and
 * madvises its stack. These handlers are registered after the log's, and prepare handlers run in
 * reverse order, so this one runs before the log's takes st_log_lock: a root may wait for
 * st_log_lock while it holds st_boot_lock, and here the two are taken in that same order. */
static void st_boot_atfork_prepare(void)
{
    pthread_mutex_lock(&st_boot_lock);
    st_boot_reap();
}

static void st_boot_atfork_parent(void)
{
    pthread_mutex_unlock(&st_boot_lock);
}

/* The child has none of the root threads: close their sockets and forget them. An id made before
 * the fork keeps working in the child, because the parent's root still serves it. */
static void st_boot_atfork_child(void)
{
    while (st_boot_roots != NULL) {
        st_boot_root_t *root = st_boot_roots;

        st_boot_roots = root->next;
        if (!root->done) {
            st_boot_root_cleanup(root);
        }
        free(root);
    }
    st_boot_roots_live = 0;
    pthread_mutex_unlock(&st_boot_lock);
}

static void st_boot_atfork_register(void)
{
    st_log_init(); /* the log's handlers first: see st_boot_atfork_prepare */
    st_boot_atfork_ret =
        pthread_atfork(st_boot_atfork_prepare, st_boot_atfork_parent, st_boot_atfork_child);
}

int st_bootstrap_root_count(void)
{
    int count;

    pthread_mutex_lock(&st_boot_lock);
    st_boot_reap();
    count = st_boot_roots_live;
    pthread_mutex_unlock(&st_boot_lock);
    return count;
}

/* The listener and the thread are made under st_boot_lock, so that a fork in another thread never
 * copies a listener that is not on st_boot_roots yet. */
st_status_t st_bootstrap_root_spawn(st_sockaddr_t *addr, const uint8_t *secret, uint32_t nranks,
                                    double timeout)
{
    st_boot_root_t *root;
    st_status_t     status;
    sigset_t        all;
    sigset_t        old;
    int             flags;
    int             ret;

    pthread_once(&st_boot_atfork_once, st_boot_atfork_register);
    if (st_boot_atfork_ret != 0) {
        st_error(ST_SUB_BOOT, "pthread_atfork for the bootstrap root failed: %s",
                 strerror(st_boot_atfork_ret));
        return ST_ERR_NO_MEMORY;
    }
    root = calloc(1, sizeof(*root));
    if (root == NULL) {
        st_error(ST_SUB_BOOT, "out of memory for the bootstrap root");
        return ST_ERR_NO_MEMORY;
    }
    root->timeout      = timeout;
    root->phase        = ST_BOOT_GATHER;
    root->nranks       = nranks;
    root->nranks_fixed = (nranks > 0);
    root->first_rank   = -1;
    memcpy(root->secret, secret, ST_BOOTSTRAP_SECRET_BYTES);
    if (nranks > 0) {
        root->slots = calloc(nranks, sizeof(*root->slots));
        if (root->slots == NULL) {
            st_error(ST_SUB_BOOT, "out of memory for a bootstrap root of %u ranks", nranks);
            status = ST_ERR_NO_MEMORY;
            goto err_free;
        }
    }

    pthread_mutex_lock(&st_boot_lock);
    st_boot_reap();
    ST_CHECK_GOTO(st_socket_listen(addr, &root->listen_fd), status, err_unlock);
    /* The loop must never block in accept: a peer can reset between poll and accept. */
    flags = fcntl(root->listen_fd, F_GETFL);
    if (flags < 0 || fcntl(root->listen_fd, F_SETFL, flags | O_NONBLOCK) != 0) {
        st_error(ST_SUB_BOOT, "fcntl(O_NONBLOCK) on the bootstrap listener failed: %m");
        status = ST_ERR_IO;
        goto err_close;
    }
    st_socket_addr_str(addr, root->addr, sizeof(root->addr));
    root->deadline = st_time_now() + timeout; /* inf stays inf */

    /* The root inherits a full signal mask, so the application's signals land on its own
     * threads, never on this one. */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ret = pthread_create(&root->thread, NULL, st_boot_root_main, root);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        st_error(ST_SUB_BOOT, "cannot start the bootstrap root thread: %s", strerror(ret));
        status = ST_ERR_IO;
        goto err_close;
    }
    root->next    = st_boot_roots;
    st_boot_roots = root;
    st_boot_roots_live++;
    /* Return only once the thread runs its own code (it has taken st_boot_lock, which the wait
     * releases): the start of a thread, before that, is not covered by the fork handlers. An
     * allocator that does not lock itself around fork (AddressSanitizer's, in gcc 12) is busy
     * there, and a process forking right after strataGetUniqueId handed its children a locked
     * allocator mutex: their first thread hung at its start. */
    while (!root->started) {
        pthread_cond_wait(&st_boot_started_cond, &st_boot_lock);
    }
    pthread_mutex_unlock(&st_boot_lock);
    return ST_OK;

err_close:
    close(root->listen_fd);
err_unlock:
    pthread_mutex_unlock(&st_boot_lock);
err_free:
    free(root->slots);
    free(root);
    return status;
}

st_status_t st_bootstrap_root_start(const st_unique_id_t *id, int nranks, double timeout)
{
    st_sockaddr_t addr;
    char          str[ST_BOOTSTRAP_ADDR_STR];

    if (id == NULL || nranks < 1 || nranks > ST_BOOTSTRAP_MAX_RANKS || !(timeout >= 0)) {
        st_error(ST_SUB_BOOT, "bootstrap root: invalid arguments (id %p, nranks %d, timeout %g)",
                 (const void *)id, nranks, timeout);
        return ST_ERR_INVALID;
    }
    addr = id->root;
    ST_CHECK(st_bootstrap_root_spawn(&addr, id->secret, (uint32_t)nranks, timeout)); /* logged */
    st_info(ST_SUB_BOOT, "bootstrap root for %d ranks listening on %s", nranks,
            st_socket_addr_str(&addr, str, sizeof(str)));
    return ST_OK;
}

void st_bootstrap_root_abort(const uint8_t *secret)
{
    pthread_mutex_lock(&st_boot_lock);
    for (st_boot_root_t *root = st_boot_roots; root != NULL; root = root->next) {
        if (root->phase == ST_BOOT_GATHER && !root->aborted &&
            memcmp(root->secret, secret, ST_BOOTSTRAP_SECRET_BYTES) == 0) {
            root->aborted  = 1;
            root->deadline = st_time_now();
            if (root->listen_fd >= 0) {
                shutdown(root->listen_fd, SHUT_RDWR); /* wakes the root's poll at once */
            }
        }
    }
    pthread_mutex_unlock(&st_boot_lock);
}
