/*
 * cuda_ipc_sock.c - handing file descriptors of device memory to node peers: abstract UNIX
 * sockets, SCM_RIGHTS, and a server thread that answers on one.
 *
 * Why a thread: a rank's window must be fetchable while its owner is itself blocked fetching its
 * peers' (every rank of the node attaches at once), and a shareable buffer while its owner runs a
 * collective; serving from inside attach or a collective would deadlock or stall. The thread does
 * no device call (the fds are exported beforehand), so it needs no current device.
 *
 * Only processes of the owner's user are answered (SO_PEERCRED): an abstract name is visible to
 * every process of the network namespace, and the fd gives the whole allocation.
 */
#include "config.h"
#include "transports/cuda_ipc/cuda_ipc.h"

#include <errno.h>
#include <poll.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <time.h>
#include <unistd.h>

#include "base/param.h"
#include "base/sys.h"

#define ST_CIPC_RETRY_MIN_S 0.001 /* connect retries: peers usually listen within milliseconds */
#define ST_CIPC_RETRY_MAX_S 0.05

static pthread_once_t st_cipc_key_once = PTHREAD_ONCE_INIT;
static uint32_t       st_cipc_key;

static void st_cipc_key_draw(void)
{
    uint32_t rnd;

    if (getrandom(&rnd, sizeof(rnd), GRND_NONBLOCK) != (ssize_t)sizeof(rnd)) {
        rnd = (uint32_t)time(NULL) ^ ((uint32_t)getpid() << 16) ^ (uint32_t)clock();
    }
    st_cipc_key = rnd;
}

uint32_t st_cipc_self_key(void)
{
    pthread_once(&st_cipc_key_once, st_cipc_key_draw);
    return st_cipc_key;
}

int st_cipc_is_self(uint32_t pid, uint32_t key)
{
    /* a forked child keeps its parent's key, but not its pid */
    return pid == (uint32_t)getpid() && key == st_cipc_self_key();
}

const st_dev_ops_t *st_cipc_dev(const char *what)
{
    const st_dev_ops_t *dev = st_dev();

    if (dev == NULL) {
        st_error(ST_SUB_IPC, "%s: no device (STRATA_DEVICE=none, or no usable GPU and driver): "
                 "device memory cannot be shared", what);
    }
    return dev;
}

double st_cipc_timeout(void)
{
    double secs = st_core_config.connect_timeout;

    if (secs <= 0) {
        secs = st_core_config.bootstrap_timeout;
    }
    return (secs > 0) ? ST_MAX(secs, 1.0) : ST_PARAM_NO_DEADLINE;
}

/* The abstract address of name: a leading NUL, then the name without its terminator. */
static socklen_t st_cipc_addr(const char *name, struct sockaddr_un *sun)
{
    size_t len = strnlen(name, ST_CIPC_SOCK_NAME_LEN);

    memset(sun, 0, sizeof(*sun));
    sun->sun_family = AF_UNIX;
    memcpy(sun->sun_path + 1, name, len);
    return (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + len);
}

_Static_assert(ST_CIPC_SOCK_NAME_LEN + 1 <= sizeof(((struct sockaddr_un *)0)->sun_path),
               "abstract socket names must fit in sun_path");

st_status_t st_cipc_listen(const char *name, int backlog, int *fd_p)
{
    struct sockaddr_un sun;
    socklen_t          len = st_cipc_addr(name, &sun);
    int                fd;

    fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    if (fd < 0) {
        st_error(ST_SUB_IPC, "socket @%s: socket: %m", name);
        return ST_ERR_IO;
    }
    if (bind(fd, (struct sockaddr *)&sun, len) != 0) {
        st_error(ST_SUB_IPC, "socket @%s: bind: %m%s", name,
                 (errno == EADDRINUSE) ? " (two windows or processes share a name)" : "");
        close(fd);
        return ST_ERR_IO;
    }
    if (listen(fd, backlog) != 0) {
        st_error(ST_SUB_IPC, "socket @%s: listen: %m", name);
        close(fd);
        return ST_ERR_IO;
    }
    *fd_p = fd;
    return ST_OK;
}

/* Waits until fd has events or the deadline passes: ST_OK, ST_ERR_TIMEOUT, ST_ERR_IO. */
static st_status_t st_cipc_wait(int fd, short events, double deadline, const char *name)
{
    struct pollfd pfd = {.fd = fd, .events = events, .revents = 0};

    for (;;) {
        double left = deadline - st_time_now();
        int    ret;

        if (left <= 0) {
            return ST_ERR_TIMEOUT;
        }
        ret = poll(&pfd, 1, (int)ST_MIN(left * 1e3 + 1, 60e3));
        if (ret > 0) {
            return ST_OK;
        }
        if (ret < 0 && errno != EINTR) {
            st_error(ST_SUB_IPC, "socket @%s: poll: %m", name);
            return ST_ERR_IO;
        }
    }
}

st_status_t st_cipc_connect(const char *name, double deadline, int *fd_p)
{
    struct sockaddr_un sun;
    socklen_t          len     = st_cipc_addr(name, &sun);
    double             backoff = ST_CIPC_RETRY_MIN_S;

    for (;;) {
        struct timespec ts;
        int             fd, err;

        fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
        if (fd < 0) {
            st_error(ST_SUB_IPC, "socket @%s: socket: %m", name);
            return ST_ERR_IO;
        }
        if (connect(fd, (struct sockaddr *)&sun, len) == 0) {
            *fd_p = fd;
            return ST_OK;
        }
        err = errno;
        close(fd);
        /* refused: nobody listens there yet; EAGAIN: its backlog is full */
        if (err != ECONNREFUSED && err != EAGAIN && err != EINTR && err != ENOENT) {
            st_error(ST_SUB_IPC, "socket @%s: connect: %s", name, strerror(err));
            return ST_ERR_IO;
        }
        if (st_time_now() + backoff >= deadline) {
            errno = err;
            return ST_ERR_TIMEOUT;
        }
        ts.tv_sec  = 0;
        ts.tv_nsec = (long)(backoff * 1e9);
        nanosleep(&ts, NULL);
        backoff = ST_MIN(backoff * 2, ST_CIPC_RETRY_MAX_S);
    }
}

st_status_t st_cipc_accept(int listen_fd, const char *name, int *fd_p)
{
    struct ucred cred;
    socklen_t    clen = sizeof(cred);
    int          fd;

    *fd_p = -1;
    fd    = accept4(listen_fd, NULL, NULL, SOCK_CLOEXEC | SOCK_NONBLOCK);
    if (fd < 0) {
        if (errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR || errno == ECONNABORTED) {
            return ST_OK;
        }
        st_error(ST_SUB_IPC, "socket @%s: accept: %m", name);
        return ST_ERR_IO;
    }
    if (getsockopt(fd, SOL_SOCKET, SO_PEERCRED, &cred, &clen) != 0 || cred.uid != getuid()) {
        st_info(ST_SUB_IPC, "socket @%s: refused a connection of another user (uid %d)", name,
                (clen == sizeof(cred)) ? (int)cred.uid : -1);
        close(fd);
        return ST_OK;
    }
    *fd_p = fd;
    return ST_OK;
}

st_status_t st_cipc_send_fd(int sock, const void *buf, size_t len, int fd, const char *name)
{
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(sizeof(int))];
    } ctl;
    struct iovec  iov = {.iov_base = (void *)buf, .iov_len = len};
    struct msghdr msg = {.msg_iov = &iov, .msg_iovlen = 1};
    ssize_t       n;

    memset(&ctl, 0, sizeof(ctl));
    if (fd >= 0) {
        struct cmsghdr *c = &ctl.hdr;

        msg.msg_control    = ctl.buf;
        msg.msg_controllen = sizeof(ctl.buf);
        c->cmsg_level      = SOL_SOCKET;
        c->cmsg_type       = SCM_RIGHTS;
        c->cmsg_len        = CMSG_LEN(sizeof(int));
        memcpy(CMSG_DATA(c), &fd, sizeof(int));
    }
    do {
        n = sendmsg(sock, &msg, MSG_DONTWAIT | MSG_NOSIGNAL);
    } while (n < 0 && errno == EINTR);
    if (n == (ssize_t)len) {
        return ST_OK;
    }
    if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
        return ST_ERR_REMOTE;
    }
    /* a fresh socket's buffer holds far more than one answer: a short write is a failure */
    st_error(ST_SUB_IPC, "socket @%s: sendmsg of %zu bytes%s: %s", name, len,
             fd >= 0 ? " and an fd" : "", n < 0 ? strerror(errno) : "short write");
    return ST_ERR_IO;
}

/* Takes the fd out of a received message's control data (closing any extra one). */
static void st_cipc_take_fd(struct msghdr *msg, int *fd_p)
{
    for (struct cmsghdr *c = CMSG_FIRSTHDR(msg); c != NULL; c = CMSG_NXTHDR(msg, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            continue;
        }
        for (size_t i = 0; i < (c->cmsg_len - CMSG_LEN(0)) / sizeof(int); i++) {
            int fd;

            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (*fd_p < 0) {
                *fd_p = fd;
            } else {
                close(fd);
            }
        }
    }
}

st_status_t st_cipc_recv_fd(int sock, void *buf, size_t len, double deadline, const char *name,
                            int *fd_p)
{
    union {
        struct cmsghdr hdr;
        char           buf[CMSG_SPACE(sizeof(int) * 4)];
    } ctl;
    size_t      off = 0;
    int         fd  = -1;
    st_status_t status;

    while (off < len) {
        struct iovec  iov = {.iov_base = (char *)buf + off, .iov_len = len - off};
        struct msghdr msg = {.msg_iov        = &iov,
                             .msg_iovlen     = 1,
                             .msg_control    = ctl.buf,
                             .msg_controllen = sizeof(ctl.buf)};
        ssize_t       n;

        n = recvmsg(sock, &msg, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n > 0) {
            st_cipc_take_fd(&msg, &fd);
            off += (size_t)n;
            if (msg.msg_flags & MSG_CTRUNC) {
                st_error(ST_SUB_IPC, "socket @%s: file descriptors of an answer were dropped "
                         "(control data truncated; RLIMIT_NOFILE reached?)", name);
                status = ST_ERR_IO;
                goto err;
            }
            continue;
        }
        if (n == 0) {
            status = ST_ERR_REMOTE;
            goto err;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            ST_CHECK_GOTO(st_cipc_wait(sock, POLLIN, deadline, name), status, err);
            continue;
        }
        if (errno == ECONNRESET) {
            status = ST_ERR_REMOTE;
            goto err;
        }
        st_error(ST_SUB_IPC, "socket @%s: recvmsg: %m", name);
        status = ST_ERR_IO;
        goto err;
    }
    *fd_p = fd;
    return ST_OK;

err:
    if (fd >= 0) {
        close(fd);
    }
    return status;
}

/* ---- server thread -------------------------------------------------------------------------- */

struct st_cipc_server {
    pthread_t        thread;
    int              listen_fd;
    int              stop_fd; /* eventfd: readable once stop is asked */
    st_cipc_serve_fn fn;
    void            *arg;
    char             name[ST_CIPC_SOCK_NAME_LEN + 1];
};

static void *st_cipc_server_main(void *arg)
{
    st_cipc_server_t *srv = arg;
    struct pollfd     pfd[2];

    pfd[0].fd     = srv->listen_fd;
    pfd[0].events = POLLIN;
    pfd[1].fd     = srv->stop_fd;
    pfd[1].events = POLLIN;
    for (;;) {
        int sock;

        pfd[0].revents = pfd[1].revents = 0;
        if (poll(pfd, 2, -1) < 0) {
            if (errno == EINTR) {
                continue;
            }
            st_error(ST_SUB_IPC, "socket @%s: poll: %m; no longer serving", srv->name);
            break;
        }
        if (pfd[1].revents != 0) {
            break;
        }
        if (pfd[0].revents == 0) {
            continue;
        }
        if (st_cipc_accept(srv->listen_fd, srv->name, &sock) != ST_OK) {
            break;
        }
        if (sock >= 0) {
            srv->fn(srv->arg, sock);
            close(sock);
        }
    }
    return NULL;
}

st_status_t st_cipc_server_start(int listen_fd, const char *name, st_cipc_serve_fn fn, void *arg,
                                 st_cipc_server_t **srv_p)
{
    st_cipc_server_t *srv;
    sigset_t          all, old;
    int               ret;

    srv = calloc(1, sizeof(*srv));
    if (srv == NULL) {
        st_error(ST_SUB_IPC, "socket @%s: out of memory for its server", name);
        close(listen_fd);
        return ST_ERR_NO_MEMORY;
    }
    srv->listen_fd = listen_fd;
    srv->fn        = fn;
    srv->arg       = arg;
    snprintf(srv->name, sizeof(srv->name), "%s", name);
    srv->stop_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (srv->stop_fd < 0) {
        st_error(ST_SUB_IPC, "socket @%s: eventfd: %m", name);
        goto err_free;
    }
    /* the thread takes no signal of the application's */
    sigfillset(&all);
    pthread_sigmask(SIG_SETMASK, &all, &old);
    ret = pthread_create(&srv->thread, NULL, st_cipc_server_main, srv);
    pthread_sigmask(SIG_SETMASK, &old, NULL);
    if (ret != 0) {
        st_error(ST_SUB_IPC, "socket @%s: cannot start its server thread: %s", name,
                 strerror(ret));
        close(srv->stop_fd);
        goto err_free;
    }
    *srv_p = srv;
    return ST_OK;

err_free:
    close(listen_fd);
    free(srv);
    return ST_ERR_IO;
}

void st_cipc_server_stop(st_cipc_server_t *srv)
{
    uint64_t one = 1;

    if (srv == NULL) {
        return;
    }
    if (write(srv->stop_fd, &one, sizeof(one)) != (ssize_t)sizeof(one)) {
        /* an eventfd takes a write unless its counter is at the maximum: never here */
        st_warn(ST_SUB_IPC, "socket @%s: cannot signal its server to stop: %m", srv->name);
    }
    pthread_join(srv->thread, NULL);
    close(srv->listen_fd);
    close(srv->stop_fd);
    free(srv);
}

void st_cipc_server_forget(st_cipc_server_t *srv)
{
    if (srv == NULL) {
        return;
    }
    close(srv->listen_fd);
    close(srv->stop_fd);
    free(srv);
}
