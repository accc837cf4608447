/*
 * fuzz_root.c - libFuzzer harness over a live bootstrap root: the input is what strangers send to
 * its port. One root (4 ranks, no deadline, a fixed secret that the seed corpus knows) runs on
 * 127.0.0.1 for the whole fuzzing session. Each input is cut into 1 to 3 connections (first byte:
 * how many, and where the cuts are); each connects, sends its part, shuts down its write side and
 * reads until the root closes it.
 *
 * Oracles besides the sanitizers: the root must close every connection within FZ_CLOSE_S of the
 * client's end of input (rejected, dropped or a rank that left, no connection may linger), it must
 * answer only with well-formed replies (st_bootstrap_reply_decode), and it must still be running
 * afterwards (at most 3 of its 4 ranks can be present at once, so it never completes). A hang or
 * a dead root aborts, which libFuzzer reports as a crash with the input that caused it.
 */
#include "config.h"

#include <arpa/inet.h>
#include <errno.h>
#include <math.h>
#include <signal.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <unistd.h>

#include "base/log.h"
#include "base/socket.h"
#include "core/bootstrap.h"

#define FZ_NRANKS   4
#define FZ_MAX_CONN 3
#define FZ_IO_S     2.0 /* to connect and to send */
#define FZ_CLOSE_S  3.0 /* for the root to close a connection after our end of input */

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static st_unique_id_t fz_id;

static void fz_die(const char *what)
{
    fprintf(stderr, "fuzz_root: %s\n", what);
    abort();
}

static void fz_start_root(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t          len = sizeof(sin);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0);

    /* a free port: the root binds it again with SO_REUSEADDR */
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sin, sizeof(sin)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sin, &len) != 0) {
        fz_die("cannot find a free port on 127.0.0.1");
    }
    close(fd);
    memset(&fz_id, 0, sizeof(fz_id));
    fz_id.root.sin = sin;
    memset(fz_id.secret, 0x5a, sizeof(fz_id.secret)); /* the seeds' hellos carry this secret */
    fz_id.from_env = 1;
    if (st_bootstrap_root_start(&fz_id, FZ_NRANKS, INFINITY) != ST_OK) {
        fz_die("cannot start the root");
    }
}

/* Reads what the root answers until it closes; checks a reply header if one came. */
static void fz_read_until_closed(int fd)
{
    uint8_t              buf[4096];
    uint8_t              head[ST_BOOTSTRAP_REPLY_LEN];
    size_t               got = 0;
    double               end = st_time_now() + FZ_CLOSE_S;
    st_bootstrap_reply_t rep;

    for (;;) {
        ssize_t n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);

        if (n > 0) {
            for (ssize_t k = 0; k < n && got < sizeof(head); k++) {
                head[got++] = buf[k];
            }
            continue;
        }
        if (n == 0 || (errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR)) {
            break; /* closed (or reset) by the root */
        }
        if (st_time_now() > end) {
            fz_die("the root kept a connection open after the client's end of input");
        }
        usleep(200);
    }
    if (got > 0) {
        if (got < sizeof(head) || st_bootstrap_reply_decode(head, got, &rep) != ST_OK) {
            fz_die("the root sent a malformed reply");
        }
        if (rep.status == ST_BOOTSTRAP_REPLY_OK) {
            fz_die("the root sent a table to a stranger");
        }
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    signal(SIGPIPE, SIG_IGN);
    st_log_init();
    st_log_level = ST_LOG_NONE; /* every dropped connection would log a warning */
    fz_start_root();
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    int    fds[FZ_MAX_CONN];
    int    nconn;
    size_t off = 1;

    if (size < 1) {
        return 0;
    }
    nconn = 1 + data[0] % FZ_MAX_CONN;
    for (int k = 0; k < nconn; k++) {
        /* equal parts, the last one takes the rest */
        size_t part = (k == nconn - 1) ? size - off : (size - 1) / (size_t)nconn;

        if (st_socket_connect(&fz_id.root, st_time_now() + FZ_IO_S, &fds[k]) != ST_OK) {
            fz_die("cannot connect to the root");
        }
        /* The root may drop us before it has read everything: a failed send is fine. */
        st_socket_send_all(fds[k], data + off, part, st_time_now() + FZ_IO_S);
        off += part;
    }
    for (int k = 0; k < nconn; k++) {
        shutdown(fds[k], SHUT_WR);
    }
    for (int k = 0; k < nconn; k++) {
        fz_read_until_closed(fds[k]);
        close(fds[k]);
    }
    if (st_bootstrap_root_count() != 1) {
        fz_die("the root is gone");
    }
    return 0;
}
