/*
 * socket.c - TCP helpers of the bootstrap: interface selection (STRATA_SOCKET_IFNAME, with
 * NCCL_SOCKET_IFNAME's syntax), address parsing and formatting, and socket I/O bounded by absolute
 * deadlines.
 *
 * Every wait here is a poll() with the time left before a deadline, and every send or receive uses
 * MSG_DONTWAIT, so nothing blocks past its deadline even on a socket someone left in blocking
 * mode. Logging follows the house rule: system call failures (ST_ERR_IO) are logged here, where
 * errno is known; a timeout or a peer closing (ST_ERR_TIMEOUT, ST_ERR_REMOTE) is left to the
 * caller, which knows who the peer is and what was being waited for.
 */
#include "config.h"
#include "base/socket.h"

#include <arpa/inet.h>
#include <errno.h>
#include <ifaddrs.h>
#include <limits.h>
#include <math.h>
#include <net/if.h>
#include <netdb.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/ioctl.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <unistd.h>

#include "base/log.h"

/* The selection used when STRATA_SOCKET_IFNAME is empty, and the fallback when it finds nothing:
 * the same choice NCCL makes (loopback and container bridges are useless across nodes). */
#define ST_SOCKET_DEFAULT_SPEC "^docker,lo"
#define ST_SOCKET_FALLBACK_SPEC "lo"

/* Longest "host:port" accepted by st_socket_addr_parse (a DNS name is at most 253 characters). */
#define ST_SOCKET_ADDR_STR_MAX 512

/* Backoff between connection attempts while the root is not listening yet: start fast (ranks
 * launched together usually find the root within milliseconds), never poll faster than 10/s later
 * on so that thousands of waiting ranks do not flood the root's host with SYNs. */
#define ST_SOCKET_RETRY_MIN_S 0.001
#define ST_SOCKET_RETRY_MAX_S 0.1

/* Milliseconds poll() may wait before `deadline`: -1 for an infinite deadline, 0 once it passed.
 * Rounded up so that a poll that returns 0 really is at or past the deadline. */
static int st_socket_poll_ms(double deadline)
{
    double left;

    if (isinf(deadline)) {
        return -1;
    }
    left = deadline - st_time_now();
    if (left <= 0) {
        return 0;
    }
    if (left * 1e3 >= (double)INT_MAX) {
        return INT_MAX;
    }
    return (int)ceil(left * 1e3);
}

/* Spec tokens are walked in place (no copy, no allocation): this is called for every interface. */
int st_socket_ifname_match(const char *spec, const char *ifname)
{
    int    exclude = 0;
    int    exact   = 0;
    int    matched = 0;
    size_t iflen;

    if (spec == NULL || *spec == '\0') {
        return 1;
    }
    if (ifname == NULL) {
        return 0;
    }
    if (*spec == '^') {
        exclude = 1;
        spec++;
    }
    if (*spec == '=') {
        exact = 1;
        spec++;
    }
    iflen = strlen(ifname);
    while (*spec != '\0' && !matched) {
        const char *end    = strchr(spec, ',');
        size_t      toklen = (end != NULL) ? (size_t)(end - spec) : strlen(spec);

        if (toklen > 0) {
            if (exact) {
                matched = (toklen == iflen) && (strncmp(spec, ifname, toklen) == 0);
            } else {
                matched = (strncmp(spec, ifname, toklen) == 0);
            }
        }
        spec += toklen;
        if (*spec == ',') {
            spec++;
        }
    }
    return exclude ? !matched : matched;
}

st_status_t st_socket_ifname_validate(const char *spec)
{
    if (spec == NULL || *spec == '\0') {
        return ST_OK; /* empty means "the default choice" */
    }
    if (*spec == '^') {
        spec++;
    }
    if (*spec == '=') {
        spec++;
    }
    /* Well formed when at least one token is non-empty: ",,", "^" or "^=" name nothing, which is
     * certainly a mistake (an include list of nothing would match no interface at all). */
    for (; *spec != '\0'; spec++) {
        if (*spec != ',') {
            return ST_OK;
        }
    }
    return ST_ERR_INVALID;
}

static int st_socket_is_link_local6(const struct sockaddr_in6 *sin6)
{
    return IN6_IS_ADDR_LINKLOCAL(&sin6->sin6_addr);
}

/* First interface passing spec, IPv4 addresses before IPv6 ones. IPv6 link-local addresses are
 * skipped: they only make sense with a scope id, which differs from host to host. */
static int st_socket_pick_if(const struct ifaddrs *list, const char *spec, char *ifname,
                             st_sockaddr_t *addr)
{
    static const int families[] = {AF_INET, AF_INET6};

    for (size_t f = 0; f < ST_ARRAY_SIZE(families); f++) {
        for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            if (ifa->ifa_addr == NULL || ifa->ifa_addr->sa_family != families[f] ||
                !(ifa->ifa_flags & IFF_UP) || !st_socket_ifname_match(spec, ifa->ifa_name)) {
                continue;
            }
            if (families[f] == AF_INET6 &&
                st_socket_is_link_local6((const struct sockaddr_in6 *)ifa->ifa_addr)) {
                continue;
            }
            memset(addr, 0, sizeof(*addr));
            if (families[f] == AF_INET) {
                addr->sin          = *(const struct sockaddr_in *)ifa->ifa_addr;
                addr->sin.sin_port = 0;
            } else {
                addr->sin6           = *(const struct sockaddr_in6 *)ifa->ifa_addr;
                addr->sin6.sin6_port = 0;
            }
            snprintf(ifname, ST_IFNAME_MAX, "%s", ifa->ifa_name);
            return 1;
        }
    }
    return 0;
}

/* "lo, eth0, ib0" (each name once) for the error message when nothing matches. */
static void st_socket_list_ifs(const struct ifaddrs *list, char *buf, size_t len)
{
    size_t off = 0;

    buf[0] = '\0';
    for (const struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        int seen = 0;

        if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP) ||
            (ifa->ifa_addr->sa_family != AF_INET && ifa->ifa_addr->sa_family != AF_INET6)) {
            continue;
        }
        for (const struct ifaddrs *prev = list; prev != ifa; prev = prev->ifa_next) {
            if (prev->ifa_addr != NULL && (prev->ifa_flags & IFF_UP) &&
                (prev->ifa_addr->sa_family == AF_INET || prev->ifa_addr->sa_family == AF_INET6) &&
                strcmp(prev->ifa_name, ifa->ifa_name) == 0) {
                seen = 1;
                break;
            }
        }
        if (!seen && off < len) {
            int n = snprintf(buf + off, len - off, "%s%s", off > 0 ? ", " : "", ifa->ifa_name);
            off += (n > 0) ? (size_t)n : 0;
        }
    }
    if (buf[0] == '\0') {
        snprintf(buf, len, "none");
    }
}

/* The operstate as the kernel words it (/sys/class/net/IF/operstate: up, down, dormant,
 * lowerlayerdown, unknown...), "" when it cannot be read. */
static void st_socket_operstate(const char *ifname, char *buf, size_t len)
{
    char  path[64 + ST_IFNAME_MAX];
    FILE *f;

    buf[0] = '\0';
    snprintf(path, sizeof(path), "/sys/class/net/%s/operstate", ifname);
    f = fopen(path, "r");
    if (f == NULL) {
        return;
    }
    if (fgets(buf, (int)len, f) == NULL) {
        buf[0] = '\0';
    }
    buf[strcspn(buf, "\n")] = '\0';
    fclose(f);
}

st_socket_if_state_t st_socket_if_state(const char *ifname, char *why, size_t len)
{
    struct ifreq         ifr;
    st_socket_if_state_t state;
    char                 oper[32];
    int                  fd;

    if (ifname == NULL || ifname[0] == '\0' || strlen(ifname) >= sizeof(ifr.ifr_name) ||
        if_nametoindex(ifname) == 0) {
        state = ST_SOCKET_IF_MISSING;
    } else {
        memset(&ifr, 0, sizeof(ifr));
        memcpy(ifr.ifr_name, ifname, strlen(ifname));
        fd = socket(AF_INET, SOCK_DGRAM | SOCK_CLOEXEC, 0);
        if (fd < 0 || ioctl(fd, SIOCGIFFLAGS, &ifr) != 0) {
            /* no socket to ask with: say nothing against the interface */
            state = ST_SOCKET_IF_UP;
        } else if (!(ifr.ifr_flags & IFF_UP)) {
            state = ST_SOCKET_IF_ADMIN_DOWN;
        } else if (!(ifr.ifr_flags & IFF_RUNNING)) {
            state = ST_SOCKET_IF_NO_CARRIER;
        } else {
            state = ST_SOCKET_IF_UP;
        }
        if (fd >= 0) {
            close(fd);
        }
    }
    if (why != NULL && len > 0) {
        st_socket_operstate(ifname, oper, sizeof(oper));
        switch (state) {
        case ST_SOCKET_IF_MISSING:
            snprintf(why, len, "does not exist on this node");
            break;
        case ST_SOCKET_IF_ADMIN_DOWN:
            snprintf(why, len, "is down (administratively: ip link set %s up)", ifname);
            break;
        case ST_SOCKET_IF_NO_CARRIER:
            snprintf(why, len, "is up but has no carrier (operstate %s): its link is down",
                     oper[0] ? oper : "unknown");
            break;
        default:
            snprintf(why, len, "is up");
            break;
        }
    }
    return state;
}

st_status_t st_socket_find_if(const char *spec, char *ifname, st_sockaddr_t *addr)
{
    struct ifaddrs *list;
    char            found_name[ST_IFNAME_MAX];
    char            names[256];
    st_sockaddr_t   found_addr;
    int             found;
    const char     *value = (spec != NULL) ? spec : "";

    if (st_socket_ifname_validate(spec) != ST_OK) {
        st_error(ST_SUB_BOOT,
                 "STRATA_SOCKET_IFNAME '%s' is malformed: it names no interface "
                 "(expected prefixes like 'eth,ib', '^' to exclude, '=' for exact names)",
                 value);
        return ST_ERR_INVALID;
    }
    if (getifaddrs(&list) != 0) {
        st_error(ST_SUB_BOOT, "getifaddrs failed: %m");
        return ST_ERR_IO;
    }
    if (*value != '\0') {
        found = st_socket_pick_if(list, value, found_name, &found_addr);
    } else {
        found = st_socket_pick_if(list, ST_SOCKET_DEFAULT_SPEC, found_name, &found_addr) ||
                st_socket_pick_if(list, ST_SOCKET_FALLBACK_SPEC, found_name, &found_addr);
    }
    if (!found) {
        st_socket_list_ifs(list, names, sizeof(names));
        freeifaddrs(list);
        st_error(ST_SUB_BOOT,
                 "no interface that is up with an address matches "
                 "STRATA_SOCKET_IFNAME '%s' (interfaces up here: %s)",
                 value, names);
        return ST_ERR_NO_DEVICE;
    }
    freeifaddrs(list);
    memcpy(ifname, found_name, ST_IFNAME_MAX);
    *addr = found_addr;
    return ST_OK;
}

/* A decimal port 0..65535, digits only. */
static int st_socket_parse_port(const char *str, uint16_t *port_p)
{
    unsigned long v = 0;

    if (*str == '\0' || strlen(str) > 5) {
        return -1;
    }
    for (const char *p = str; *p != '\0'; p++) {
        if (*p < '0' || *p > '9') {
            return -1;
        }
        v = v * 10 + (unsigned long)(*p - '0');
    }
    if (v > 65535) {
        return -1;
    }
    *port_p = (uint16_t)v;
    return 0;
}

st_status_t st_socket_addr_parse(const char *str, st_sockaddr_t *addr)
{
    char             buf[ST_SOCKET_ADDR_STR_MAX];
    char            *host;
    char            *port_str;
    uint16_t         port;
    struct addrinfo  hints;
    struct addrinfo *res;
    struct addrinfo *pick = NULL;
    st_sockaddr_t    out;

    if (str == NULL || strlen(str) >= sizeof(buf)) {
        return ST_ERR_INVALID;
    }
    memcpy(buf, str, strlen(str) + 1);
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (buf[0] == '[') {
        /* "[v6addr]:port": the brackets are what tell the port's colon from the address's. */
        char *close = strchr(buf, ']');

        if (close == NULL || close[1] != ':') {
            return ST_ERR_INVALID;
        }
        *close          = '\0';
        host            = buf + 1;
        port_str        = close + 2;
        hints.ai_family = AF_INET6;
        hints.ai_flags  = AI_NUMERICHOST;
    } else {
        /* "host:port" with exactly one colon: an IPv6 address without brackets is ambiguous
         * ("::1:80" could be either), so it is refused rather than guessed. */
        port_str = strchr(buf, ':');
        if (port_str == NULL || strchr(port_str + 1, ':') != NULL) {
            return ST_ERR_INVALID;
        }
        *port_str++     = '\0';
        host            = buf;
        hints.ai_family = AF_UNSPEC;
    }
    if (*host == '\0' || st_socket_parse_port(port_str, &port) != 0) {
        return ST_ERR_INVALID;
    }
    if (getaddrinfo(host, NULL, &hints, &res) != 0) {
        return ST_ERR_INVALID;
    }
    /* IPv4 first, as interface selection does, so that every rank resolving the same name ends
     * up with the same address. */
    for (struct addrinfo *ai = res; ai != NULL; ai = ai->ai_next) {
        if (ai->ai_family == AF_INET && ai->ai_addrlen >= sizeof(struct sockaddr_in)) {
            pick = ai;
            break;
        }
        if (pick == NULL && ai->ai_family == AF_INET6 &&
            ai->ai_addrlen >= sizeof(struct sockaddr_in6)) {
            pick = ai;
        }
    }
    if (pick == NULL) {
        freeaddrinfo(res);
        return ST_ERR_INVALID;
    }
    memset(&out, 0, sizeof(out));
    if (pick->ai_family == AF_INET) {
        out.sin          = *(const struct sockaddr_in *)pick->ai_addr;
        out.sin.sin_port = htons(port);
    } else {
        out.sin6           = *(const struct sockaddr_in6 *)pick->ai_addr;
        out.sin6.sin6_port = htons(port);
    }
    freeaddrinfo(res);
    *addr = out;
    return ST_OK;
}

const char *st_socket_addr_str(const st_sockaddr_t *addr, char *buf, size_t len)
{
    char host[INET6_ADDRSTRLEN];

    if (buf == NULL || len == 0) {
        return buf;
    }
    if (addr == NULL) {
        snprintf(buf, len, "(null)");
    } else if (addr->sa.sa_family == AF_INET &&
               inet_ntop(AF_INET, &addr->sin.sin_addr, host, sizeof(host)) != NULL) {
        snprintf(buf, len, "%s:%u", host, (unsigned)ntohs(addr->sin.sin_port));
    } else if (addr->sa.sa_family == AF_INET6 &&
               inet_ntop(AF_INET6, &addr->sin6.sin6_addr, host, sizeof(host)) != NULL) {
        /* The numeric scope keeps a link-local address usable, and getaddrinfo parses it back. */
        if (addr->sin6.sin6_scope_id != 0) {
            snprintf(buf, len, "[%s%%%u]:%u", host, (unsigned)addr->sin6.sin6_scope_id,
                     (unsigned)ntohs(addr->sin6.sin6_port));
        } else {
            snprintf(buf, len, "[%s]:%u", host, (unsigned)ntohs(addr->sin6.sin6_port));
        }
    } else {
        snprintf(buf, len, "<address family %d>", (int)addr->sa.sa_family);
    }
    return buf;
}

static socklen_t st_socket_addr_len(const st_sockaddr_t *addr)
{
    return (addr->sa.sa_family == AF_INET6) ? sizeof(struct sockaddr_in6)
                                            : sizeof(struct sockaddr_in);
}

st_status_t st_socket_listen(st_sockaddr_t *addr, int *fd_p)
{
    char          str[ST_SOCKADDR_STRLEN];
    st_sockaddr_t bound;
    socklen_t     len = sizeof(bound);
    int           one = 1;
    int           fd;

    if (addr->sa.sa_family != AF_INET && addr->sa.sa_family != AF_INET6) {
        st_error(ST_SUB_BOOT, "cannot listen on %s: not an IPv4 or IPv6 address",
                 st_socket_addr_str(addr, str, sizeof(str)));
        return ST_ERR_INVALID;
    }
    fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        st_error(ST_SUB_BOOT, "socket() for %s failed: %m",
                 st_socket_addr_str(addr, str, sizeof(str)));
        return ST_ERR_IO;
    }
    /* A fixed port (STRATA_COMM_ID) is reused by every communicator of a job: without
     * SO_REUSEADDR the next root could not bind while the last one's connections sit in
     * TIME_WAIT. Two live listeners on one port remain impossible (no SO_REUSEPORT). */
    if (setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)) != 0) {
        st_error(ST_SUB_BOOT, "setsockopt(SO_REUSEADDR) failed: %m");
        goto err_close;
    }
    if (bind(fd, &addr->sa, st_socket_addr_len(addr)) != 0) {
        st_error(ST_SUB_BOOT, "bind to %s failed: %m", st_socket_addr_str(addr, str, sizeof(str)));
        goto err_close;
    }
    if (listen(fd, SOMAXCONN) != 0) {
        st_error(ST_SUB_BOOT, "listen on %s failed: %m",
                 st_socket_addr_str(addr, str, sizeof(str)));
        goto err_close;
    }
    if (getsockname(fd, &bound.sa, &len) != 0) {
        st_error(ST_SUB_BOOT, "getsockname failed: %m");
        goto err_close;
    }
    if (addr->sa.sa_family == AF_INET) {
        addr->sin.sin_port = bound.sin.sin_port;
    } else {
        addr->sin6.sin6_port = bound.sin6.sin6_port;
    }
    *fd_p = fd;
    return ST_OK;

err_close:
    close(fd);
    return ST_ERR_IO;
}

/* Waits until fd has `events` (or an error/hangup, which the next call will report), or the
 * deadline passes. */
/* The calling thread's cancel file descriptor (st_socket_set_cancel), -1: none. */
static __thread int st_socket_cancel_fd = -1;

void st_socket_set_cancel(int fd)
{
    st_socket_cancel_fd = fd;
}

static int st_socket_canceled(void)
{
    struct pollfd pfd = {.fd = st_socket_cancel_fd, .events = POLLIN, .revents = 0};

    return st_socket_cancel_fd >= 0 && poll(&pfd, 1, 0) > 0;
}

static st_status_t st_socket_wait(int fd, short events, double deadline)
{
    struct pollfd pfd[2] = {{.fd = fd, .events = events, .revents = 0},
                            {.fd = st_socket_cancel_fd, .events = POLLIN, .revents = 0}};
    int           ret;

    for (;;) {
        ret = poll(pfd, (st_socket_cancel_fd >= 0) ? 2 : 1, st_socket_poll_ms(deadline));
        if (ret > 0 && pfd[1].revents != 0 && st_socket_cancel_fd >= 0) {
            return ST_ERR_CANCELED;
        }
        if (ret > 0) {
            return ST_OK;
        }
        if (ret < 0 && errno != EINTR) {
            st_error(ST_SUB_BOOT, "poll on fd %d failed: %m", fd);
            return ST_ERR_IO;
        }
        if (ret == 0 && st_time_now() >= deadline) {
            return ST_ERR_TIMEOUT;
        }
    }
}

/* Errors after which trying again may succeed: the root is not listening yet (refused), its
 * backlog overflowed (reset, timed out), a route or address is still coming up. */
static int st_socket_connect_retryable(int err)
{
    switch (err) {
    case ECONNREFUSED:
    case ECONNRESET:
    case ECONNABORTED:
    case ETIMEDOUT:
    case EHOSTUNREACH:
    case ENETUNREACH:
    case EADDRNOTAVAIL:
    case EAGAIN:
    case EINTR: return 1;
    default: return 0;
    }
}

/* One attempt: 0 and *fd_p on success, else the errno value; ETIMEDOUT when the deadline passed
 * during the attempt. */
static int st_socket_connect_once(const st_sockaddr_t *addr, double deadline, int *fd_p)
{
    socklen_t errlen = sizeof(int);
    int       err    = 0;
    int       one    = 1;
    int       fd;

    fd = socket(addr->sa.sa_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0) {
        return errno;
    }
    if (connect(fd, &addr->sa, st_socket_addr_len(addr)) != 0) {
        if (errno != EINPROGRESS) {
            err = errno;
            goto out_close;
        }
        if (st_socket_wait(fd, POLLOUT, deadline) != ST_OK) {
            err = ETIMEDOUT;
            goto out_close;
        }
        if (getsockopt(fd, SOL_SOCKET, SO_ERROR, &err, &errlen) != 0) {
            err = errno;
        }
        if (err != 0) {
            goto out_close;
        }
    }
    /* The bootstrap sends a few small messages and waits for each answer: Nagle would only add
     * delayed-ACK latency to every one of them. */
    setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    *fd_p = fd;
    return 0;

out_close:
    close(fd);
    return err;
}

/* On ST_ERR_TIMEOUT, errno holds the error of the last attempt (ECONNREFUSED when the root never
 * listened, ETIMEDOUT when nothing answered), for the caller's message. */
st_status_t st_socket_connect(const st_sockaddr_t *addr, double deadline, int *fd_p)
{
    struct timespec ts;
    char            str[ST_SOCKADDR_STRLEN];
    double          backoff = ST_SOCKET_RETRY_MIN_S;
    int             err;

    for (;;) {
        err = st_socket_connect_once(addr, deadline, fd_p);
        if (err == 0) {
            return ST_OK;
        }
        if (err == ECANCELED || st_socket_canceled()) {
            return ST_ERR_CANCELED;
        }
        if (!st_socket_connect_retryable(err)) {
            st_error(ST_SUB_BOOT, "connect to %s failed: %s",
                     st_socket_addr_str(addr, str, sizeof(str)), strerror(err));
            return ST_ERR_IO;
        }
        st_debug(ST_SUB_BOOT, "connect to %s: %s; retrying",
                 st_socket_addr_str(addr, str, sizeof(str)), strerror(err));
        if (st_time_now() + backoff >= deadline) {
            errno = err;
            return ST_ERR_TIMEOUT;
        }
        if (st_socket_cancel_fd >= 0) {
            struct pollfd pfd = {.fd = st_socket_cancel_fd, .events = POLLIN, .revents = 0};

            if (poll(&pfd, 1, (int)(backoff * 1e3) + 1) > 0) {
                return ST_ERR_CANCELED;
            }
        } else {
            ts.tv_sec  = 0;
            ts.tv_nsec = (long)(backoff * 1e9);
            nanosleep(&ts, NULL);
        }
        backoff = ST_MIN(backoff * 2, ST_SOCKET_RETRY_MAX_S);
    }
}

st_status_t st_socket_send_all(int fd, const void *buf, size_t len, double deadline)
{
    const char *p   = buf;
    size_t      off = 0;
    ssize_t     n;

    while (off < len) {
        n = send(fd, p + off, len - off, MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n < 0 && errno == EINTR) {
            continue;
        }
        if (n < 0 && (errno == EAGAIN || errno == EWOULDBLOCK)) {
            ST_CHECK(st_socket_wait(fd, POLLOUT, deadline));
            continue;
        }
        if (n < 0 && (errno == EPIPE || errno == ECONNRESET)) {
            return ST_ERR_REMOTE;
        }
        st_error(ST_SUB_BOOT, "send of %zu bytes on fd %d failed: %m", len - off, fd);
        return ST_ERR_IO;
    }
    return ST_OK;
}

st_status_t st_socket_recv_all(int fd, void *buf, size_t len, double deadline)
{
    char   *p   = buf;
    size_t  off = 0;
    ssize_t n;

    while (off < len) {
        n = recv(fd, p + off, len - off, MSG_DONTWAIT);
        if (n > 0) {
            off += (size_t)n;
            continue;
        }
        if (n == 0) {
            return ST_ERR_REMOTE;
        }
        if (errno == EINTR) {
            continue;
        }
        if (errno == EAGAIN || errno == EWOULDBLOCK) {
            ST_CHECK(st_socket_wait(fd, POLLIN, deadline));
            continue;
        }
        if (errno == ECONNRESET) {
            return ST_ERR_REMOTE;
        }
        st_error(ST_SUB_BOOT, "recv of %zu bytes on fd %d failed: %m", len - off, fd);
        return ST_ERR_IO;
    }
    return ST_OK;
}
