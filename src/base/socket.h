/*
 * socket.h - TCP helpers for the bootstrap: interface selection with NCCL_SOCKET_IFNAME's syntax,
 * address formatting and parsing, and socket I/O with deadlines (never an endless wait).
 */
#ifndef ST_SOCKET_H
#define ST_SOCKET_H

#include <netinet/in.h>
#include <stddef.h>
#include <sys/socket.h>

#include "base/status.h"
#include "base/sys.h"

/* A socket address of either family, small enough to fit in a unique id. */
typedef union st_sockaddr {
    struct sockaddr     sa;
    struct sockaddr_in  sin;
    struct sockaddr_in6 sin6;
} st_sockaddr_t;

#define ST_IFNAME_MAX 16
/* Room for the longest st_socket_addr_str: "[" v6 "%" scope "]:" port. */
#define ST_SOCKADDR_STRLEN (INET6_ADDRSTRLEN + 20)

/* Does interface name `ifname` pass the filter `spec` (STRATA_SOCKET_IFNAME syntax)?
 *   "eth,ib"   prefixes: eth0, ib1 match
 *   "^docker"  excludes interfaces starting with docker (everything else matches)
 *   "=eth0"    exact names only ("^=lo" excludes exactly lo)
 * Returns 1 or 0. An empty or NULL spec matches everything. */
int st_socket_ifname_match(const char *spec, const char *ifname);

/* Checks that spec is well formed (not empty tokens only, like ",,"). ST_ERR_INVALID otherwise. */
st_status_t st_socket_ifname_validate(const char *spec);

/* Finds the first interface (in getifaddrs order, IPv4 before IPv6) that is up, has an address and
 * passes spec. With an empty spec: any interface but lo and docker*; lo only when nothing else
 * exists. Writes its name (ST_IFNAME_MAX bytes) and address (port 0).
 * Returns ST_ERR_NO_DEVICE with a logged error naming STRATA_SOCKET_IFNAME and its value when none
 * matches; ST_ERR_INVALID for a malformed spec. */
st_status_t st_socket_find_if(const char *spec, char *ifname, st_sockaddr_t *addr);

/* The state of network interface ifname, for messages that must say why a link cannot carry
 * traffic: ST_SOCKET_IF_UP (administratively up and operationally running: IFF_UP and
 * IFF_RUNNING, which Linux sets from operstate UP, RFC 2863), ST_SOCKET_IF_MISSING (no such
 * interface), ST_SOCKET_IF_ADMIN_DOWN (`ip link set IF down`), ST_SOCKET_IF_NO_CARRIER (up but not
 * running: no carrier, a veth whose peer is down, a carrier not yet raised). Writes a short
 * description ("is down", "has no carrier (operstate down)") into why (may be NULL). */
typedef enum {
    ST_SOCKET_IF_UP = 0,
    ST_SOCKET_IF_MISSING,
    ST_SOCKET_IF_ADMIN_DOWN,
    ST_SOCKET_IF_NO_CARRIER
} st_socket_if_state_t;
st_socket_if_state_t st_socket_if_state(const char *ifname, char *why, size_t len);

/* Parses "host:port", "[v6addr]:port" or "v6addr:port"-less forms into addr (numeric addresses or
 * a host name resolved with getaddrinfo). ST_ERR_INVALID when malformed or unresolvable. */
st_status_t st_socket_addr_parse(const char *str, st_sockaddr_t *addr);
/* "10.0.0.1:4242" / "[fe80::1]:4242" into buf. Returns buf. */
const char *st_socket_addr_str(const st_sockaddr_t *addr, char *buf, size_t len);

/* A listening TCP socket bound to addr (port 0 picks one; SO_REUSEADDR, so a fixed port can be
 * reused right after the last communicator); *addr gets the bound port. */
st_status_t st_socket_listen(st_sockaddr_t *addr, int *fd_p);
/* Connects to addr, retrying refused connections until the absolute deadline (st_time_now()
 * seconds). ST_ERR_TIMEOUT when the deadline passes; errno then holds the last attempt's error
 * (ECONNREFUSED, ETIMEDOUT...) for the caller's message. The socket is nonblocking, TCP_NODELAY,
 * close-on-exec. */
st_status_t st_socket_connect(const st_sockaddr_t *addr, double deadline, int *fd_p);
/* Sends / receives exactly len bytes before the absolute deadline. ST_ERR_TIMEOUT at the deadline,
 * ST_ERR_REMOTE when the peer closed, ST_ERR_IO on other errors. Blocking and nonblocking sockets
 * alike never wait past the deadline.
 * Logging (all functions here): ST_ERR_IO is logged where the system call failed; ST_ERR_TIMEOUT
 * and ST_ERR_REMOTE are not, since only the caller knows who the peer is. */
st_status_t st_socket_send_all(int fd, const void *buf, size_t len, double deadline);
st_status_t st_socket_recv_all(int fd, void *buf, size_t len, double deadline);

/* Makes every wait of the calling thread's socket calls (connect, its retries, send_all,
 * recv_all) also end, with ST_ERR_CANCELED (not logged), once fd becomes readable: an eventfd
 * that strataCommAbort writes, so that an abort interrupts a waiting init at once. -1: none. */
void st_socket_set_cancel(int fd);

#endif
