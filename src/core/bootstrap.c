/*
 * bootstrap.c - unique ids and a rank's side of the TCP rendezvous (protocol in bootstrap.h): the
 * id names the root's address and a secret; a rank sends its hello there and reads back the table
 * or the root's verdict. The root is in bootstrap_root.c, the wire codec in bootstrap_wire.c.
 */
#include "config.h"
#include "core/bootstrap.h"

#include <errno.h>
#include <stdlib.h>
#include <string.h>
#include <sys/random.h>
#include <unistd.h>

#include "base/log.h"
#include "base/param.h"
#include "core/bootstrap_root.h"
#include "core/bootstrap_wire.h"
#include "transports/transport.h"

/* Rank side: once the root said OK, only the table transfer is left; give it at least this long
 * even when the caller's deadline is nearly spent, rather than fail a successful rendezvous. */
#define ST_BOOT_TABLE_MIN_S 5.0

/* ------------------------------------------------------------------------------------------ */
/* ids                                                                                         */
/* ------------------------------------------------------------------------------------------ */

static st_status_t st_boot_random(uint8_t *buf, size_t len)
{
    size_t  off = 0;
    ssize_t n;

    while (off < len) {
        n = getrandom(buf + off, len - off, 0);
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0) {
            st_error(ST_SUB_BOOT, "getrandom(%zu bytes) for the bootstrap secret failed: %m",
                     len - off);
            return ST_ERR_IO;
        }
        off += (size_t)n;
    }
    return ST_OK;
}

/* The secret of a STRATA_COMM_ID id. Ranks launched by mpirun (or any launcher) each call
 * strataGetUniqueId on their own and never exchange the id, so the secret cannot be random: it
 * is derived from what they all share, the STRATA_COMM_ID string, plus STRATA_COMM_SECRET when the
 * launcher exports one. Without STRATA_COMM_SECRET this only keeps apart jobs that use different
 * COMM_IDs or strata versions (anyone who knows the COMM_ID string can compute it); with it, only
 * holders of STRATA_COMM_SECRET can join. It travels in clear text either way, as NCCL's does: the
 * bootstrap does not defend against someone who can read the traffic.
 * The mix is two independent 64-bit FNV-1a lanes with a final avalanche (splitmix64): not a
 * cryptographic hash, but every byte of the input moves every byte of the output, and it is the
 * same on every host and compiler. */
static uint64_t st_boot_mix64(uint64_t x)
{
    x ^= x >> 30;
    x *= UINT64_C(0xbf58476d1ce4e5b9);
    x ^= x >> 27;
    x *= UINT64_C(0x94d049bb133111eb);
    x ^= x >> 31;
    return x;
}

static void st_boot_derive_secret(const char *comm_id, const char *extra, uint8_t *secret)
{
    static const char domain[] = "strata-bootstrap-comm-id-v1";
    const char *const parts[]  = {domain, comm_id, extra};
    uint64_t          h[2]     = {UINT64_C(0xcbf29ce484222325), UINT64_C(0x84222325cbf29ce4)};

    for (size_t i = 0; i < ST_ARRAY_SIZE(parts); i++) {
        /* The terminating NUL of each part is hashed too, so ("ab","c") != ("a","bc"). */
        for (const char *c = parts[i];; c++) {
            h[0] = (h[0] ^ (uint8_t)*c) * UINT64_C(0x100000001b3);
            h[1] = (h[1] ^ (uint8_t)*c) * UINT64_C(0x100000001b3) + 0x9e37;
            if (*c == '\0') {
                break;
            }
        }
    }
    for (int lane = 0; lane < 2; lane++) {
        uint64_t v = st_boot_mix64(h[lane] ^ st_boot_mix64(h[1 - lane]));

        for (int b = 0; b < 8; b++) {
            secret[lane * 8 + b] = (uint8_t)(v >> (56 - 8 * b));
        }
    }
}

st_status_t st_bootstrap_unique_id(strataUniqueId *id)
{
    st_unique_id_t uid;
    strataUniqueId out;
    char           ifname[ST_IFNAME_MAX];
    char           str[ST_BOOTSTRAP_ADDR_STR];
    const char    *comm_id;

    if (id == NULL) {
        st_error(ST_SUB_BOOT, "unique id: NULL pointer");
        return ST_ERR_INVALID;
    }
    ST_CHECK(st_param_init(st_transport_config_tables()));
    memset(&uid, 0, sizeof(uid));
    uid.magic   = ST_BOOTSTRAP_ID_MAGIC;
    uid.version = ST_BOOTSTRAP_ID_VERSION;
    comm_id     = st_core_config.comm_id;

    if (comm_id != NULL && *comm_id != '\0') {
        const char *extra = getenv("STRATA_COMM_SECRET");

        if (st_socket_addr_parse(comm_id, &uid.root) != ST_OK ||
            (uid.root.sa.sa_family == AF_INET ? uid.root.sin.sin_port : uid.root.sin6.sin6_port) ==
                0) {
            st_error(ST_SUB_BOOT,
                     "STRATA_COMM_ID '%s' is not a usable host:port (IPv6 as "
                     "[addr]:port, port 1-65535, host name resolvable)",
                     comm_id);
            return ST_ERR_INVALID;
        }
        uid.from_env = 1;
        st_boot_derive_secret(comm_id, extra != NULL ? extra : "", uid.secret);
        ST_CHECK(st_bootstrap_id_encode(&uid, &out));
        *id = out;
        st_info(ST_SUB_BOOT, "unique id from STRATA_COMM_ID %s%s", comm_id,
                extra != NULL ? " with STRATA_COMM_SECRET" : "");
        return ST_OK;
    }

    ST_CHECK(st_socket_find_if(st_core_config.socket_ifname, ifname, &uid.root));
    ST_CHECK(st_boot_random(uid.secret, sizeof(uid.secret)));
    ST_CHECK(st_bootstrap_root_spawn(&uid.root, uid.secret, 0,
                                     st_param_deadline(st_core_config.bootstrap_timeout)));
    /* Cannot fail now: the root listens on an IPv4 or IPv6 address, on a port that is not 0. */
    ST_CHECK(st_bootstrap_id_encode(&uid, &out));
    *id = out;
    st_info(ST_SUB_BOOT, "unique id: bootstrap root on %s %s", ifname,
            st_socket_addr_str(&uid.root, str, sizeof(str)));
    return ST_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* a rank                                                                                      */
/* ------------------------------------------------------------------------------------------ */

/* The root's text goes into our log: keep it printable whatever came off the wire. */
static void st_boot_sanitize(char *s)
{
    for (; *s != '\0'; s++) {
        if ((unsigned char)*s < 0x20 || (unsigned char)*s > 0x7e) {
            *s = '?';
        }
    }
}

st_status_t st_bootstrap_exchange(const st_unique_id_t *id, int rank, int nranks, const void *blob,
                                  size_t blob_len, void *table, double timeout)
{
    uint8_t             *hello;
    uint8_t              reply[ST_BOOTSTRAP_REPLY_LEN];
    st_bootstrap_reply_t rep;
    char                 msg[ST_BOOTSTRAP_MSG_MAX + 1];
    char                 root_str[ST_BOOTSTRAP_ADDR_STR];
    double               start = st_time_now();
    double               deadline;
    double               answer_deadline;
    size_t               hello_len;
    uint32_t             code;
    uint32_t             msg_len;
    st_status_t          status;
    st_status_t          send_status;
    int                  fd = -1;

    if (id == NULL || nranks < 1 || nranks > ST_BOOTSTRAP_MAX_RANKS || rank < 0 || rank >= nranks ||
        blob_len > ST_BOOTSTRAP_MAX_BLOB || (blob == NULL && blob_len > 0) ||
        (table == NULL && blob_len > 0) || !(timeout >= 0)) {
        st_error(ST_SUB_BOOT,
                 "bootstrap exchange: invalid arguments (rank %d, nranks %d, blob "
                 "%zu bytes, max %d, timeout %g)",
                 rank, nranks, blob_len, ST_BOOTSTRAP_MAX_BLOB, timeout);
        return ST_ERR_INVALID;
    }
    st_socket_addr_str(&id->root, root_str, sizeof(root_str));
    deadline        = start + timeout;
    answer_deadline = deadline + ST_BOOTSTRAP_REPLY_GRACE_S;

    hello_len = ST_BOOTSTRAP_HELLO_LEN + blob_len;
    hello     = malloc(hello_len);
    if (hello == NULL) {
        st_error(ST_SUB_BOOT, "rank %d: out of memory for a %zu-byte bootstrap hello", rank,
                 hello_len);
        return ST_ERR_NO_MEMORY;
    }
    st_bootstrap_put32(hello, ST_BOOTSTRAP_WIRE_MAGIC);
    st_bootstrap_put32(hello + 4, ST_BOOTSTRAP_WIRE_VERSION);
    memcpy(hello + 8, id->secret, ST_BOOTSTRAP_SECRET_BYTES);
    st_bootstrap_put32(hello + 8 + ST_BOOTSTRAP_SECRET_BYTES, (uint32_t)rank);
    st_bootstrap_put32(hello + 12 + ST_BOOTSTRAP_SECRET_BYTES, (uint32_t)nranks);
    st_bootstrap_put32(hello + 16 + ST_BOOTSTRAP_SECRET_BYTES, (uint32_t)blob_len);
    if (blob_len > 0) {
        memcpy(hello + ST_BOOTSTRAP_HELLO_LEN, blob, blob_len);
    }

    status = st_socket_connect(&id->root, deadline, &fd);
    if (status == ST_ERR_TIMEOUT) {
        st_error(ST_SUB_BOOT, "rank %d: bootstrap root %s unreachable for %g s (%s)", rank,
                 root_str, timeout, strerror(errno));
        goto out_free;
    } else if (status != ST_OK) {
        goto out_free; /* logged */
    }

    /* A root that rejects us may close while the blob is still going out; its reply (the reason)
     * is then already in our receive queue, so a failed send goes on to read the reply. */
    send_status = st_socket_send_all(fd, hello, hello_len, deadline);
    if (send_status == ST_ERR_IO) {
        status = send_status;
        goto out_close;
    }
    status = st_socket_recv_all(fd, reply, sizeof(reply), answer_deadline);
    if (status == ST_ERR_TIMEOUT) {
        if (send_status == ST_ERR_TIMEOUT) {
            st_error(ST_SUB_BOOT,
                     "rank %d: bootstrap root %s accepted the connection but did not "
                     "read the hello within %g s",
                     rank, root_str, timeout);
        } else {
            /* The root's deadline is later than ours (it started later, or with a longer
             * timeout), so it had not yet given up on the missing ranks and could not name them. */
            st_error(ST_SUB_BOOT,
                     "rank %d: bootstrap timed out after %g s waiting for the other "
                     "ranks (%d in all) at root %s (the root had not timed out yet, so it could "
                     "not say which ranks are missing)",
                     rank, timeout, nranks, root_str);
        }
        goto out_close;
    } else if (status == ST_ERR_REMOTE) {
        st_error(ST_SUB_BOOT, "rank %d: bootstrap root %s closed the connection without answering",
                 rank, root_str);
        goto out_close;
    } else if (status != ST_OK) {
        goto out_close;
    }
    if (st_bootstrap_reply_decode(reply, sizeof(reply), &rep) != ST_OK) {
        st_error(ST_SUB_BOOT,
                 "rank %d: malformed reply from bootstrap root %s (magic 0x%08x, "
                 "status %u, message of %u bytes)",
                 rank, root_str, st_bootstrap_get32(reply), st_bootstrap_get32(reply + 4),
                 st_bootstrap_get32(reply + 16));
        status = ST_ERR_IO;
        goto out_close;
    }
    code    = rep.status;
    msg_len = rep.msg_len;
    status = st_socket_recv_all(fd, msg, msg_len, answer_deadline);
    if (status != ST_OK) {
        if (status != ST_ERR_IO) {
            st_error(ST_SUB_BOOT, "rank %d: bootstrap root %s sent a truncated reply", rank,
                     root_str);
            status = ST_ERR_IO;
        }
        goto out_close;
    }
    msg[msg_len] = '\0';
    st_boot_sanitize(msg);

    if (code == ST_BOOTSTRAP_REPLY_TIMEOUT) {
        st_error(ST_SUB_BOOT, "rank %d: %s (bootstrap root %s)", rank, msg, root_str);
        status = ST_ERR_TIMEOUT;
        goto out_close;
    }
    if (code == ST_BOOTSTRAP_REPLY_REJECT) {
        st_error(ST_SUB_BOOT, "rank %d rejected by bootstrap root %s: %s", rank, root_str, msg);
        status = ST_ERR_USAGE;
        goto out_close;
    }
    if (rep.nranks != (uint32_t)nranks || rep.blob_len != (uint32_t)blob_len) {
        st_error(ST_SUB_BOOT,
                 "rank %d: bootstrap root %s sent a table of %u ranks x %u bytes; "
                 "expected %d x %zu",
                 rank, root_str, rep.nranks, rep.blob_len, nranks, blob_len);
        status = ST_ERR_IO;
        goto out_close;
    }
    status = st_socket_recv_all(fd, table, (size_t)nranks * blob_len,
                                ST_MAX(answer_deadline, st_time_now() + ST_BOOT_TABLE_MIN_S));
    if (status != ST_OK) {
        if (status != ST_ERR_IO) {
            st_error(ST_SUB_BOOT,
                     "rank %d: receiving the %zu-byte table from bootstrap root %s "
                     "failed: %s",
                     rank, (size_t)nranks * blob_len, root_str, st_status_str(status));
        }
        goto out_close;
    }
    st_debug(ST_SUB_BOOT, "rank %d of %d: bootstrap through %s done in %.3f s", rank, nranks,
             root_str, st_time_now() - start);

out_close:
    close(fd);
out_free:
    free(hello);
    if (status == ST_ERR_CANCELED) {
        st_error(ST_SUB_BOOT, "rank %d: bootstrap through root %s aborted (strataCommAbort)",
                 rank, root_str);
    }
    return status;
}
