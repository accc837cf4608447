/*
 * test_bootstrap.c - socket helpers and the bootstrap rendezvous: interface filters, address
 * parsing, id encoding, and real rendezvous over loopback with rank threads in this process,
 * plus strangers on the root's port (wrong secret, garbage, silence, oversized lengths) that must
 * not disturb the real ranks. Every rendezvous test checks that the root closed all its sockets.
 * Ranks also run as forked processes, the way launchers start them: the id is made (and its root
 * started) first, then the ranks are forked and inherit it. test_rogues_real_init puts all kinds
 * of strangers on the port while a real 4-rank communicator forms through the public API.
 *
 * The rendezvous runs on lo (STRATA_SOCKET_IFNAME=lo is set before st_param_init): tests never
 * depend on the host's real interfaces. Without an lo that is up, those tests are skipped.
 */
#include "config.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <errno.h>
#include <ifaddrs.h>
#include <math.h>
#include <net/if.h>
#include <poll.h>
#include <pthread.h>
#include <setjmp.h>
#include <stdarg.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include <cmocka.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "core/bootstrap.h"
#include "transports/transport.h"

_Static_assert(sizeof(st_unique_id_t) <= sizeof(strataUniqueId), "id must fit");

#define BLOB_LEN 48
#define MAX_THREADS 16
#define ROOT_WAIT_S 5.0

static int lo_up;

/* ------------------------------------------------------------------------------------------ */
/* helpers                                                                                     */
/* ------------------------------------------------------------------------------------------ */

static int count_fds(void)
{
    DIR           *dir = opendir("/proc/self/fd");
    struct dirent *de;
    int            n = 0;

    assert_non_null(dir);
    while ((de = readdir(dir)) != NULL) {
        if (de->d_name[0] != '.') {
            n++;
        }
    }
    closedir(dir);
    return n;
}

static void sleep_s(double s)
{
    struct timespec ts = {.tv_sec = (time_t)s, .tv_nsec = (long)((s - floor(s)) * 1e9)};

    nanosleep(&ts, NULL);
}

/* Roots exit right after the last rank has read its reply; wait for that before counting fds. */
static void wait_roots_gone(void)
{
    double end = st_time_now() + ROOT_WAIT_S;

    while (st_bootstrap_root_count() > 0 && st_time_now() < end) {
        sleep_s(0.01);
    }
    assert_int_equal(st_bootstrap_root_count(), 0);
}

static void make_blob(int rank, uint8_t *buf, size_t len)
{
    for (size_t i = 0; i < len; i++) {
        buf[i] = (uint8_t)(rank * 31 + i * 7 + 1);
    }
}

/* A port nothing listens on (for a moment): bind port 0, read it back, close. */
static uint16_t free_port(void)
{
    struct sockaddr_in sin = {.sin_family = AF_INET};
    socklen_t          len = sizeof(sin);
    int                fd  = socket(AF_INET, SOCK_STREAM, 0);

    assert_true(fd >= 0);
    sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    assert_int_equal(bind(fd, (struct sockaddr *)&sin, sizeof(sin)), 0);
    assert_int_equal(getsockname(fd, (struct sockaddr *)&sin, &len), 0);
    close(fd);
    return ntohs(sin.sin_port);
}

static st_unique_id_t new_id(void)
{
    strataUniqueId id;
    st_unique_id_t uid;

    assert_int_equal(st_bootstrap_unique_id(&id), ST_OK);
    assert_int_equal(st_bootstrap_id_decode(&id, &uid), ST_OK);
    return uid;
}

typedef struct rank_arg {
    st_unique_id_t id;
    int            rank;
    int            nranks;
    size_t         blob_len;
    double         timeout;
    uint8_t        blob[BLOB_LEN + 16];
    uint8_t       *table;
    st_status_t    status;
    double         elapsed;
    char           error[512];
    pthread_t      thread;
} rank_arg_t;

static void *rank_main(void *p)
{
    rank_arg_t *a     = p;
    double      start = st_time_now();

    st_log_clear_error();
    make_blob(a->rank, a->blob, a->blob_len);
    a->status  = st_bootstrap_exchange(&a->id, a->rank, a->nranks, a->blob, a->blob_len, a->table,
                                       a->timeout);
    a->elapsed = st_time_now() - start;
    snprintf(a->error, sizeof(a->error), "%s", st_log_last_error());
    return NULL;
}

static void rank_start(rank_arg_t *a, const st_unique_id_t *id, int rank, int nranks,
                       size_t blob_len, double timeout)
{
    memset(a, 0, sizeof(*a));
    a->id       = *id;
    a->rank     = rank;
    a->nranks   = nranks;
    a->blob_len = blob_len;
    a->timeout  = timeout;
    a->table    = calloc((size_t)nranks, blob_len + 1);
    assert_non_null(a->table);
    assert_int_equal(pthread_create(&a->thread, NULL, rank_main, a), 0);
}

static void rank_join(rank_arg_t *a)
{
    assert_int_equal(pthread_join(a->thread, NULL), 0);
}

/* Starts ranks 0..nranks-1 except those in `skip` (a bit mask), joins them. */
static void run_world(rank_arg_t *args, const st_unique_id_t *id, int nranks, uint32_t skip,
                      double timeout)
{
    for (int r = 0; r < nranks; r++) {
        if (!(skip & (1u << r))) {
            rank_start(&args[r], id, r, nranks, BLOB_LEN, timeout);
        }
    }
    for (int r = 0; r < nranks; r++) {
        if (!(skip & (1u << r))) {
            rank_join(&args[r]);
        }
    }
}

/* Every rank succeeded and holds the same table: rank r's blob at r * BLOB_LEN. */
static void check_world(rank_arg_t *args, int nranks)
{
    uint8_t expect[BLOB_LEN];

    for (int r = 0; r < nranks; r++) {
        assert_int_equal(args[r].status, ST_OK);
        for (int q = 0; q < nranks; q++) {
            make_blob(q, expect, BLOB_LEN);
            assert_memory_equal(args[r].table + (size_t)q * BLOB_LEN, expect, BLOB_LEN);
        }
        assert_memory_equal(args[r].table, args[0].table, (size_t)nranks * BLOB_LEN);
    }
}

static void free_world(rank_arg_t *args, int nranks)
{
    for (int r = 0; r < nranks; r++) {
        free(args[r].table);
        args[r].table = NULL;
    }
}

/* A 3-rank rendezvous on id that must succeed, then every resource back: no root thread left and
 * as many open fds as before the test (fds). */
static void run_world_checked(rank_arg_t *args, const st_unique_id_t *id, int fds)
{
    run_world(args, id, 3, 0, 10.0);
    check_world(args, 3);
    free_world(args, 3);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static int raw_connect(const st_unique_id_t *id)
{
    int fd = -1;

    assert_int_equal(st_socket_connect(&id->root, st_time_now() + 2.0, &fd), ST_OK);
    return fd;
}

static void put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

static uint32_t get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

/* A hand-made hello header (no blob), as documented in bootstrap.h. */
static void make_hello(uint8_t *h, const st_unique_id_t *id, uint32_t version, uint32_t rank,
                       uint32_t nranks, uint32_t blob_len)
{
    put32(h, ST_BOOTSTRAP_WIRE_MAGIC);
    put32(h + 4, version);
    memcpy(h + 8, id->secret, ST_BOOTSTRAP_SECRET_BYTES);
    put32(h + 8 + ST_BOOTSTRAP_SECRET_BYTES, rank);
    put32(h + 12 + ST_BOOTSTRAP_SECRET_BYTES, nranks);
    put32(h + 16 + ST_BOOTSTRAP_SECRET_BYTES, blob_len);
}

/* Sends a raw hello header and reads the reply; returns its status code, reason in msg. */
static uint32_t raw_hello_reply(const st_unique_id_t *id, uint32_t version, uint32_t rank,
                                uint32_t nranks, uint32_t blob_len, char *msg, size_t msg_size)
{
    uint8_t  h[ST_BOOTSTRAP_HELLO_LEN];
    uint8_t  reply[ST_BOOTSTRAP_REPLY_LEN];
    uint32_t len;
    int      fd = raw_connect(id);

    make_hello(h, id, version, rank, nranks, blob_len);
    assert_int_equal(st_socket_send_all(fd, h, sizeof(h), st_time_now() + 2.0), ST_OK);
    assert_int_equal(st_socket_recv_all(fd, reply, sizeof(reply), st_time_now() + 2.0), ST_OK);
    assert_int_equal(get32(reply), ST_BOOTSTRAP_WIRE_MAGIC);
    len = get32(reply + 16);
    assert_true(len < msg_size);
    assert_int_equal(st_socket_recv_all(fd, msg, len, st_time_now() + 2.0), ST_OK);
    msg[len] = '\0';
    close(fd);
    return get32(reply + 4);
}

/* Waits until the root closes fd (EOF or reset); returns 1 when it did within `s` seconds. */
static int closed_by_peer(int fd, double s)
{
    char    buf[256];
    double  end = st_time_now() + s;
    ssize_t n;

    while (st_time_now() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};

        if (poll(&pfd, 1, 50) > 0) {
            n = recv(fd, buf, sizeof(buf), MSG_DONTWAIT);
            if (n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK)) {
                return 1;
            }
        }
    }
    return 0;
}

#define SKIP_WITHOUT_LO()                                                                          \
    do {                                                                                           \
        if (!lo_up) {                                                                              \
            skip();                                                                                \
        }                                                                                          \
    } while (0)

/* ------------------------------------------------------------------------------------------ */
/* interface filters                                                                           */
/* ------------------------------------------------------------------------------------------ */

static void test_ifname_match(void **state)
{
    static const struct {
        const char *spec;
        const char *ifname;
        int         match;
    } cases[] = {
        {NULL, "eth0", 1},         {"", "lo", 1},
        {"eth", "eth0", 1},        {"eth", "ib0", 0},
        {"eth,ib", "ib1", 1},      {"eth,ib", "enp1s0", 0},
        {"^docker", "docker0", 0}, {"^docker", "eth0", 1},
        {"^docker,lo", "lo", 0},   {"^docker,lo", "eth1", 1},
        {"=eth0", "eth0", 1},      {"=eth0", "eth01", 0},
        {"=eth", "eth0", 0},       {"=eth0,ib0", "ib0", 1},
        {"^=lo", "lo", 0},         {"^=lo", "lo0", 1},
        {"^lo", "lo", 0},          {"^lo", "lo0", 0},
        {",,", "eth0", 0},         {"eth,,ib", "ib0", 1},
        {",eth", "eth2", 1},       {"eth", "", 0},
        {"lo", NULL, 0},
    };

    (void)state;
    for (size_t i = 0; i < ST_ARRAY_SIZE(cases); i++) {
        int got = st_socket_ifname_match(cases[i].spec, cases[i].ifname);

        if (got != cases[i].match) {
            fail_msg("match('%s', '%s') = %d, expected %d", cases[i].spec ? cases[i].spec : "NULL",
                     cases[i].ifname ? cases[i].ifname : "NULL", got, cases[i].match);
        }
    }
}

static void test_ifname_validate(void **state)
{
    static const struct {
        const char *spec;
        st_status_t status;
    } cases[] = {
        {NULL, ST_OK},           {"", ST_OK},
        {"eth", ST_OK},          {"^docker", ST_OK},
        {"=eth0", ST_OK},        {"^=lo", ST_OK},
        {"eth,,ib", ST_OK},      {",,", ST_ERR_INVALID},
        {",", ST_ERR_INVALID},   {"^", ST_ERR_INVALID},
        {"=", ST_ERR_INVALID},   {"^=", ST_ERR_INVALID},
        {"^,,", ST_ERR_INVALID}, {"^=,", ST_ERR_INVALID},
    };

    (void)state;
    for (size_t i = 0; i < ST_ARRAY_SIZE(cases); i++) {
        st_status_t got = st_socket_ifname_validate(cases[i].spec);

        if (got != cases[i].status) {
            fail_msg("validate('%s') = %d, expected %d", cases[i].spec ? cases[i].spec : "NULL",
                     got, cases[i].status);
        }
    }
}

static void test_find_if_explicit(void **state)
{
    char          name[ST_IFNAME_MAX];
    char          str[64];
    st_sockaddr_t addr;

    (void)state;
    SKIP_WITHOUT_LO();
    memset(name, 0, sizeof(name));
    assert_int_equal(st_socket_find_if("lo", name, &addr), ST_OK);
    assert_string_equal(name, "lo");
    assert_int_equal(addr.sa.sa_family, AF_INET);
    assert_string_equal(st_socket_addr_str(&addr, str, sizeof(str)), "127.0.0.1:0");
    assert_int_equal(st_socket_find_if("=lo", name, &addr), ST_OK);
    assert_string_equal(name, "lo");
}

static void test_find_if_errors(void **state)
{
    struct ifaddrs *list;
    char            spec[1024] = "^=";
    char            name[ST_IFNAME_MAX];
    st_sockaddr_t   addr;

    (void)state;
    st_log_clear_error();
    assert_int_equal(st_socket_find_if("nosuchif", name, &addr), ST_ERR_NO_DEVICE);
    assert_non_null(strstr(st_log_last_error(), "STRATA_SOCKET_IFNAME"));
    assert_non_null(strstr(st_log_last_error(), "'nosuchif'"));

    st_log_clear_error();
    assert_int_equal(st_socket_find_if(",,", name, &addr), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "STRATA_SOCKET_IFNAME ',,'"));

    /* Excluding every interface there is: what "^lo" is on a box with only lo. */
    assert_int_equal(getifaddrs(&list), 0);
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (strlen(spec) + strlen(ifa->ifa_name) + 2 < sizeof(spec)) {
            strcat(spec, ifa->ifa_name);
            strcat(spec, ",");
        }
    }
    freeifaddrs(list);
    st_log_clear_error();
    assert_int_equal(st_socket_find_if(spec, name, &addr), ST_ERR_NO_DEVICE);
    assert_non_null(strstr(st_log_last_error(), "STRATA_SOCKET_IFNAME"));
    assert_non_null(strstr(st_log_last_error(), spec));
}

/* The default skips lo and docker*, and takes lo only when nothing else is up. */
static void test_find_if_default(void **state)
{
    struct ifaddrs *list;
    char            name[ST_IFNAME_MAX];
    st_sockaddr_t   addr;
    int             other = 0;
    st_status_t     status;

    (void)state;
    assert_int_equal(getifaddrs(&list), 0);
    for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
        if (ifa->ifa_addr == NULL || !(ifa->ifa_flags & IFF_UP) ||
            strncmp(ifa->ifa_name, "lo", 2) == 0 || strncmp(ifa->ifa_name, "docker", 6) == 0) {
            continue;
        }
        if (ifa->ifa_addr->sa_family == AF_INET ||
            (ifa->ifa_addr->sa_family == AF_INET6 &&
             !IN6_IS_ADDR_LINKLOCAL(&((struct sockaddr_in6 *)ifa->ifa_addr)->sin6_addr))) {
            other = 1;
        }
    }
    freeifaddrs(list);
    status = st_socket_find_if("", name, &addr);
    if (!other && !lo_up) {
        assert_int_equal(status, ST_ERR_NO_DEVICE);
        return;
    }
    assert_int_equal(status, ST_OK);
    assert_true(strncmp(name, "docker", 6) != 0);
    if (other) {
        assert_true(strncmp(name, "lo", 2) != 0);
    } else {
        assert_string_equal(name, "lo");
    }
}

/* ------------------------------------------------------------------------------------------ */
/* addresses                                                                                   */
/* ------------------------------------------------------------------------------------------ */

static void test_addr_roundtrip(void **state)
{
    static const char *const canon[] = {
        "127.0.0.1:4242", "10.1.2.3:65535", "192.0.2.7:1",
        "[::1]:80",       "[fd00::2]:4242", "[2001:db8::8:800:200c:417a]:12345",
    };
    st_sockaddr_t addr;
    st_sockaddr_t again;
    char          str[64];

    (void)state;
    for (size_t i = 0; i < ST_ARRAY_SIZE(canon); i++) {
        assert_int_equal(st_socket_addr_parse(canon[i], &addr), ST_OK);
        assert_string_equal(st_socket_addr_str(&addr, str, sizeof(str)), canon[i]);
        assert_int_equal(st_socket_addr_parse(str, &again), ST_OK);
        assert_memory_equal(&addr, &again, sizeof(addr));
    }
    assert_int_equal(st_socket_addr_parse("127.0.0.1:4242", &addr), ST_OK);
    assert_int_equal(addr.sa.sa_family, AF_INET);
    assert_int_equal(ntohs(addr.sin.sin_port), 4242);
    assert_int_equal(ntohl(addr.sin.sin_addr.s_addr), INADDR_LOOPBACK);
    assert_int_equal(st_socket_addr_parse("[::1]:80", &addr), ST_OK);
    assert_int_equal(addr.sa.sa_family, AF_INET6);
    assert_true(IN6_IS_ADDR_LOOPBACK(&addr.sin6.sin6_addr));
    assert_int_equal(ntohs(addr.sin6.sin6_port), 80);

    /* A host name (from /etc/hosts: no DNS in a unit test). */
    assert_int_equal(st_socket_addr_parse("localhost:1234", &addr), ST_OK);
    if (addr.sa.sa_family == AF_INET) {
        assert_int_equal(ntohl(addr.sin.sin_addr.s_addr), INADDR_LOOPBACK);
        assert_int_equal(ntohs(addr.sin.sin_port), 1234);
    } else {
        assert_int_equal(addr.sa.sa_family, AF_INET6);
        assert_true(IN6_IS_ADDR_LOOPBACK(&addr.sin6.sin6_addr));
        assert_int_equal(ntohs(addr.sin6.sin6_port), 1234);
    }
}

static void test_addr_malformed(void **state)
{
    static const char *const bad[] = {
        "",
        "127.0.0.1",
        "127.0.0.1:",
        ":80",
        "127.0.0.1:65536",
        "127.0.0.1:-1",
        "127.0.0.1:80x",
        "127.0.0.1: 80",
        "127.0.0.1:123456",
        "[::1]80",
        "[::1",
        "[::1]:",
        "::1:80",
        "fe80::1",
        "[127.0.0.1]:80",
        "[]:80",
        "[zz::1]:80",
        "a:b:c",
    };
    char          longstr[2048];
    st_sockaddr_t addr;

    (void)state;
    for (size_t i = 0; i < ST_ARRAY_SIZE(bad); i++) {
        if (st_socket_addr_parse(bad[i], &addr) != ST_ERR_INVALID) {
            fail_msg("'%s' was accepted", bad[i]);
        }
    }
    assert_int_equal(st_socket_addr_parse(NULL, &addr), ST_ERR_INVALID);
    memset(longstr, 'a', sizeof(longstr) - 1);
    longstr[sizeof(longstr) - 1] = '\0';
    longstr[sizeof(longstr) - 4] = ':';
    assert_int_equal(st_socket_addr_parse(longstr, &addr), ST_ERR_INVALID);
}

/* ------------------------------------------------------------------------------------------ */
/* ids                                                                                         */
/* ------------------------------------------------------------------------------------------ */

static void test_id_roundtrip(void **state)
{
    static const char *const addrs[] = {"10.0.0.1:4242", "[fd00::2]:9"};
    st_unique_id_t           in;
    st_unique_id_t           out;
    strataUniqueId           id;

    (void)state;
    for (size_t a = 0; a < ST_ARRAY_SIZE(addrs); a++) {
        memset(&in, 0, sizeof(in));
        for (int i = 0; i < ST_BOOTSTRAP_SECRET_BYTES; i++) {
            in.secret[i] = (uint8_t)(i * 17 + 3);
        }
        in.from_env = (uint32_t)a;
        assert_int_equal(st_socket_addr_parse(addrs[a], &in.root), ST_OK);
        assert_int_equal(st_bootstrap_id_encode(&in, &id), ST_OK);
        assert_int_equal(st_bootstrap_id_decode(&id, &out), ST_OK);
        assert_memory_equal(out.secret, in.secret, ST_BOOTSTRAP_SECRET_BYTES);
        assert_int_equal(out.from_env, in.from_env);
        assert_memory_equal(&out.root, &in.root, sizeof(in.root));
    }
    /* Unencodable: no port, no address family. */
    in.root.sin.sin_family = AF_INET;
    in.root.sin.sin_port   = 0;
    assert_int_equal(st_bootstrap_id_encode(&in, &id), ST_ERR_INVALID);
    in.root.sa.sa_family = AF_UNIX;
    assert_int_equal(st_bootstrap_id_encode(&in, &id), ST_ERR_INVALID);
}

static void test_id_garbage(void **state)
{
    st_unique_id_t in;
    st_unique_id_t out;
    strataUniqueId good;
    strataUniqueId id;
    unsigned       seed        = 12345;
    int            saved_level = st_log_level;

    (void)state;
    memset(&id, 0, sizeof(id));
    st_log_clear_error();
    assert_int_equal(st_bootstrap_id_decode(&id, &out), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "unique id is not valid"));
    assert_int_equal(st_bootstrap_id_decode(NULL, &out), ST_ERR_INVALID);
    /* Each rejection is logged; keep a thousand of them out of the test log. */
    st_log_level = ST_LOG_NONE;
    for (int k = 0; k < 1000; k++) {
        for (size_t i = 0; i < sizeof(id.internal); i++) {
            id.internal[i] = (char)(rand_r(&seed) & 0xff);
        }
        assert_int_equal(st_bootstrap_id_decode(&id, &out), ST_ERR_INVALID);
    }

    memset(&in, 0, sizeof(in));
    assert_int_equal(st_socket_addr_parse("10.0.0.1:4242", &in.root), ST_OK);
    assert_int_equal(st_bootstrap_id_encode(&in, &good), ST_OK);
    /* Each single corruption of a good id is caught: magic, version, from_env, family, port,
     * a stray byte in the unused v4 address tail, a stray byte in the reserved tail. */
    {
        static const struct {
            size_t  off;
            uint8_t val;
        } pokes[] = {{0, 0x00}, {7, 0x02}, {27, 0x02}, {29, 0x05}, {30, 0}, {37, 1}, {127, 1}};

        for (size_t p = 0; p < ST_ARRAY_SIZE(pokes); p++) {
            id = good;
            if (pokes[p].off == 30) {
                id.internal[30] = 0;
                id.internal[31] = 0;
            } else {
                id.internal[pokes[p].off] = (char)pokes[p].val;
            }
            if (st_bootstrap_id_decode(&id, &out) != ST_ERR_INVALID) {
                fail_msg("corruption at byte %zu accepted", pokes[p].off);
            }
        }
    }
    st_log_level = saved_level;
    assert_int_equal(st_bootstrap_id_decode(&good, &out), ST_OK);
}

/* ------------------------------------------------------------------------------------------ */
/* rendezvous                                                                                  */
/* ------------------------------------------------------------------------------------------ */

static void rendezvous(int nranks)
{
    rank_arg_t     args[MAX_THREADS];
    st_unique_id_t id;
    int            fds;

    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    id  = new_id();
    assert_int_equal(id.from_env, 0);
    assert_int_equal(id.root.sa.sa_family, AF_INET);
    assert_int_equal(ntohl(id.root.sin.sin_addr.s_addr), INADDR_LOOPBACK);
    assert_true(st_bootstrap_root_count() >= 1);
    run_world(args, &id, nranks, 0, 10.0);
    check_world(args, nranks);
    free_world(args, nranks);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static void test_rendezvous_1(void **state)
{
    (void)state;
    rendezvous(1);
}

static void test_rendezvous_3(void **state)
{
    (void)state;
    rendezvous(3);
}

static void test_rendezvous_8(void **state)
{
    (void)state;
    rendezvous(8);
}

static void test_unique_ids_differ(void **state)
{
    rank_arg_t     a;
    st_unique_id_t id1;
    st_unique_id_t id2;

    (void)state;
    SKIP_WITHOUT_LO();
    id1 = new_id();
    id2 = new_id();
    assert_memory_not_equal(id1.secret, id2.secret, ST_BOOTSTRAP_SECRET_BYTES);
    assert_int_not_equal(id1.root.sin.sin_port, id2.root.sin.sin_port);
    /* Serve both roots so they exit now rather than at their deadline. */
    run_world(&a, &id1, 1, 0, 5.0);
    assert_int_equal(a.status, ST_OK);
    free_world(&a, 1);
    run_world(&a, &id2, 1, 0, 5.0);
    assert_int_equal(a.status, ST_OK);
    free_world(&a, 1);
    wait_roots_gone();
}

static void test_wrong_secret(void **state)
{
    rank_arg_t     args[3];
    rank_arg_t     bad;
    st_unique_id_t id;
    st_unique_id_t wrong;
    int            fds;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds   = count_fds();
    id    = new_id();
    wrong = id;
    wrong.secret[5] ^= 0x40;
    /* The impostor goes first: it must neither fix nranks nor take rank 0's slot. */
    rank_start(&bad, &wrong, 0, 3, BLOB_LEN, 5.0);
    rank_join(&bad);
    assert_int_equal(bad.status, ST_ERR_USAGE);
    assert_non_null(strstr(bad.error, "secret"));
    run_world(args, &id, 3, 0, 10.0);
    check_world(args, 3);
    free_world(args, 3);
    free_world(&bad, 1);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static void test_garbage_and_silent(void **state)
{
    static const char junk[] = "GET / HTTP/1.1\r\nHost: strata\r\nUser-Agent: scanner\r\n\r\n";
    rank_arg_t        args[3];
    st_unique_id_t    id;
    uint8_t           part[10];
    int               fds;
    int               silent;
    int               garbage;
    int               slow;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds     = count_fds();
    id      = new_id();
    silent  = raw_connect(&id);
    slow    = raw_connect(&id);
    garbage = raw_connect(&id);
    /* A slow peer: the start of a real hello, then nothing. */
    put32(part, ST_BOOTSTRAP_WIRE_MAGIC);
    memcpy(part + 4, id.secret, sizeof(part) - 4);
    assert_int_equal(st_socket_send_all(slow, part, sizeof(part), st_time_now() + 1.0), ST_OK);
    assert_int_equal(st_socket_send_all(garbage, junk, sizeof(junk), st_time_now() + 1.0), ST_OK);
    assert_true(closed_by_peer(garbage, 2.0)); /* dropped at once, not at a deadline */

    run_world(args, &id, 3, 0, 10.0);
    check_world(args, 3);
    /* The root closed the strangers when it finished. */
    assert_true(closed_by_peer(silent, 2.0));
    assert_true(closed_by_peer(slow, 2.0));
    close(silent);
    close(slow);
    close(garbage);
    free_world(args, 3);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static void test_bad_hellos(void **state)
{
    rank_arg_t     args[3];
    st_unique_id_t id;
    char           msg[ST_BOOTSTRAP_MSG_MAX + 1];
    int            fds;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    id  = new_id();
    assert_int_equal(raw_hello_reply(&id, ST_BOOTSTRAP_WIRE_VERSION, 0, 3,
                                     ST_BOOTSTRAP_MAX_BLOB + 1, msg, sizeof(msg)),
                     ST_BOOTSTRAP_REPLY_REJECT);
    assert_non_null(strstr(msg, "exceeds"));
    assert_int_equal(
        raw_hello_reply(&id, ST_BOOTSTRAP_WIRE_VERSION, 0, 0xffffffffu, BLOB_LEN, msg, sizeof(msg)),
        ST_BOOTSTRAP_REPLY_REJECT);
    assert_non_null(strstr(msg, "nranks 4294967295 out of range"));
    assert_int_equal(
        raw_hello_reply(&id, ST_BOOTSTRAP_WIRE_VERSION, 0, 0, BLOB_LEN, msg, sizeof(msg)),
        ST_BOOTSTRAP_REPLY_REJECT);
    assert_int_equal(
        raw_hello_reply(&id, ST_BOOTSTRAP_WIRE_VERSION, 7, 3, BLOB_LEN, msg, sizeof(msg)),
        ST_BOOTSTRAP_REPLY_REJECT);
    assert_non_null(strstr(msg, "rank 7 out of range"));
    assert_int_equal(raw_hello_reply(&id, 99, 0, 3, BLOB_LEN, msg, sizeof(msg)),
                     ST_BOOTSTRAP_REPLY_REJECT);
    assert_non_null(strstr(msg, "version 99"));

    run_world_checked(args, &id, fds);
}

/* nranks, blob size or rank disagreeing with the ranks already there: rejected with a reason, and
 * the real communicator still forms. */
static void test_mismatch(void **state)
{
    rank_arg_t     first;
    rank_arg_t     other;
    st_unique_id_t id;
    uint8_t        blob[BLOB_LEN + 8];
    uint8_t        table[4 * (BLOB_LEN + 8)];
    int            fds;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    id  = new_id();
    memset(blob, 0, sizeof(blob));
    rank_start(&first, &id, 1, 2, BLOB_LEN, 10.0);
    /* Rank 1 must be the first to join (nothing tells when the root has read its hello; half a
     * second is ample for one local connection even on a loaded machine). */
    sleep_s(0.5);

    st_log_clear_error();
    assert_int_equal(st_bootstrap_exchange(&id, 1, 2, blob, BLOB_LEN, table, 5.0), ST_ERR_USAGE);
    assert_non_null(strstr(st_log_last_error(), "rank 1 joined twice"));
    st_log_clear_error();
    assert_int_equal(st_bootstrap_exchange(&id, 0, 3, blob, BLOB_LEN, table, 5.0), ST_ERR_USAGE);
    assert_non_null(strstr(st_log_last_error(), "nranks 3"));
    st_log_clear_error();
    assert_int_equal(st_bootstrap_exchange(&id, 0, 2, blob, BLOB_LEN + 8, table, 5.0),
                     ST_ERR_USAGE);
    assert_non_null(strstr(st_log_last_error(), "blob of 56 bytes"));

    rank_start(&other, &id, 0, 2, BLOB_LEN, 10.0);
    rank_join(&other);
    rank_join(&first);
    assert_int_equal(first.status, ST_OK);
    assert_int_equal(other.status, ST_OK);
    assert_memory_equal(first.table, other.table, 2 * BLOB_LEN);
    make_blob(0, blob, BLOB_LEN);
    assert_memory_equal(first.table, blob, BLOB_LEN);
    make_blob(1, blob, BLOB_LEN);
    assert_memory_equal(first.table + BLOB_LEN, blob, BLOB_LEN);
    free_world(&first, 1);
    free_world(&other, 1);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

/* A rank that joined and died frees its slot: the restarted rank takes it. */
static void test_rank_rejoins(void **state)
{
    rank_arg_t     args[2];
    st_unique_id_t id;
    uint8_t        hello[ST_BOOTSTRAP_HELLO_LEN + BLOB_LEN];
    int            fds;
    int            fd;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    id  = new_id();
    fd  = raw_connect(&id);
    make_hello(hello, &id, ST_BOOTSTRAP_WIRE_VERSION, 1, 2, BLOB_LEN);
    memset(hello + ST_BOOTSTRAP_HELLO_LEN, 0xee, BLOB_LEN);
    assert_int_equal(st_socket_send_all(fd, hello, sizeof(hello), st_time_now() + 1.0), ST_OK);
    sleep_s(0.2);
    close(fd);
    sleep_s(0.5); /* until the root has seen the close, rank 1 would be a duplicate */
    run_world(args, &id, 2, 0, 10.0);
    check_world(args, 2); /* rank 1's blob is the new one, not 0xee */
    free_world(args, 2);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static void test_timeout_missing(void **state)
{
    const double   timeout = 1.5;
    rank_arg_t     args[8];
    st_unique_id_t id;
    double         saved = st_core_config.bootstrap_timeout;
    uint32_t       skip  = (1u << 3) | (1u << 5) | (1u << 6) | (1u << 7);
    int            fds;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds                              = count_fds();
    st_core_config.bootstrap_timeout = timeout;
    id                               = new_id();
    st_core_config.bootstrap_timeout = saved;
    run_world(args, &id, 8, skip, timeout);
    for (int r = 0; r < 8; r++) {
        if (skip & (1u << r)) {
            continue;
        }
        assert_int_equal(args[r].status, ST_ERR_TIMEOUT);
        assert_true(args[r].elapsed > timeout - 0.5);
        assert_true(args[r].elapsed < timeout + 1.0);
        if (strstr(args[r].error, "ranks 3, 5-7 never joined") == NULL) {
            fail_msg("rank %d: '%s' does not name the missing ranks", r, args[r].error);
        }
    }
    for (int r = 0; r < 8; r++) {
        if (!(skip & (1u << r))) {
            free(args[r].table);
        }
    }
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

static void test_unreachable(void **state)
{
    st_unique_id_t id;
    uint8_t        blob[8] = {0};
    uint8_t        table[8];
    double         start;
    int            fds;

    (void)state;
    SKIP_WITHOUT_LO();
    fds = count_fds();
    memset(&id, 0, sizeof(id));
    id.root.sin.sin_family      = AF_INET;
    id.root.sin.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    id.root.sin.sin_port        = htons(free_port());
    st_log_clear_error();
    start = st_time_now();
    assert_int_equal(st_bootstrap_exchange(&id, 0, 1, blob, sizeof(blob), table, 0.5),
                     ST_ERR_TIMEOUT);
    assert_true(st_time_now() - start < 1.5);
    assert_non_null(strstr(st_log_last_error(), "unreachable for 0.5 s"));
    assert_int_equal(count_fds(), fds);
}

static void test_exchange_invalid(void **state)
{
    st_unique_id_t id;
    uint8_t        blob[8] = {0};
    uint8_t        table[64];

    (void)state;
    memset(&id, 0, sizeof(id));
    assert_int_equal(st_bootstrap_exchange(NULL, 0, 1, blob, 8, table, 1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, -1, 1, blob, 8, table, 1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 2, 2, blob, 8, table, 1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 0, 0, blob, 8, table, 1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 0, 1, blob, ST_BOOTSTRAP_MAX_BLOB + 1, table, 1),
                     ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 0, 1, NULL, 8, table, 1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 0, 1, blob, 8, table, -1), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_exchange(&id, 0, 1, blob, 8, table, NAN), ST_ERR_INVALID);
    assert_int_equal(st_bootstrap_root_start(&id, 0, 1.0), ST_ERR_INVALID);
}

/* The same rendezvous over IPv6 loopback, through an id made by hand and root_start. */
static void test_rendezvous_ipv6(void **state)
{
    rank_arg_t     args[3];
    st_unique_id_t id;
    strataUniqueId raw;
    st_unique_id_t back;
    st_status_t    status;
    int            saved_level = st_log_level;
    int            fds;
    int            fd;

    (void)state;
    wait_roots_gone();
    fds = count_fds();
    memset(&id, 0, sizeof(id));
    assert_int_equal(st_socket_addr_parse("[::1]:1", &id.root), ST_OK);
    id.root.sin6.sin6_port = 0;
    st_log_level           = ST_LOG_NONE; /* a host without IPv6 fails here: skip quietly */
    status                 = st_socket_listen(&id.root, &fd);
    st_log_level           = saved_level;
    if (status != ST_OK) {
        skip();
    }
    close(fd); /* keep the port number, free the port for the root */
    memset(id.secret, 0x5a, sizeof(id.secret));
    id.from_env = 1;
    assert_int_equal(st_bootstrap_id_encode(&id, &raw), ST_OK);
    assert_int_equal(st_bootstrap_id_decode(&raw, &back), ST_OK);
    assert_memory_equal(&back.root, &id.root, sizeof(id.root));
    assert_int_equal(st_bootstrap_root_start(&back, 3, 10.0), ST_OK);
    run_world_checked(args, &back, fds);
}

/* STRATA_COMM_ID: the id names that address, nothing starts until rank 0 calls root_start, every
 * rank derives the same secret, and ranks that come before the root retry until it listens. */
static void test_comm_id(void **state)
{
    rank_arg_t     args[3];
    strataUniqueId raw1;
    strataUniqueId raw2;
    strataUniqueId raw3;
    st_unique_id_t id;
    char           spec[64];
    char           bad[] = "not-an-address";
    char          *saved = st_core_config.comm_id;
    uint16_t       port;
    int            roots;
    int            fds;
    int            busy;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds   = count_fds();
    port  = free_port();
    roots = st_bootstrap_root_count();
    snprintf(spec, sizeof(spec), "127.0.0.1:%u", port);
    st_core_config.comm_id = spec;
    assert_int_equal(st_bootstrap_unique_id(&raw1), ST_OK);
    assert_int_equal(st_bootstrap_unique_id(&raw2), ST_OK);
    assert_memory_equal(&raw1, &raw2, sizeof(raw1));
    assert_int_equal(setenv("STRATA_COMM_SECRET", "s3cr3t", 1), 0);
    assert_int_equal(st_bootstrap_unique_id(&raw3), ST_OK);
    unsetenv("STRATA_COMM_SECRET");
    assert_memory_not_equal(&raw1, &raw3, sizeof(raw1));
    assert_int_equal(st_bootstrap_root_count(), roots);
    assert_int_equal(st_bootstrap_id_decode(&raw1, &id), ST_OK);
    assert_int_equal(id.from_env, 1);
    assert_int_equal(ntohs(id.root.sin.sin_port), port);

    st_core_config.comm_id = bad;
    st_log_clear_error();
    assert_int_equal(st_bootstrap_unique_id(&raw3), ST_ERR_INVALID);
    assert_non_null(strstr(st_log_last_error(), "STRATA_COMM_ID 'not-an-address'"));
    st_core_config.comm_id = saved;

    for (int r = 0; r < 3; r++) {
        rank_start(&args[r], &id, r, 3, BLOB_LEN, 10.0);
    }
    sleep_s(0.3); /* the ranks are being refused now */
    assert_int_equal(st_bootstrap_root_start(&id, 3, 10.0), ST_OK);
    for (int r = 0; r < 3; r++) {
        rank_join(&args[r]);
    }
    check_world(args, 3);
    free_world(args, 3);
    wait_roots_gone();

    /* The port is taken: ST_ERR_IO, and no thread left behind. */
    busy = -1;
    {
        st_sockaddr_t addr = id.root;

        assert_int_equal(st_socket_listen(&addr, &busy), ST_OK);
    }
    assert_int_equal(st_bootstrap_root_start(&id, 3, 1.0), ST_ERR_IO);
    assert_int_equal(st_bootstrap_root_count(), 0);
    close(busy);
    assert_int_equal(count_fds(), fds);
}

/* ------------------------------------------------------------------------------------------ */
/* fork                                                                                        */
/* ------------------------------------------------------------------------------------------ */

#define FORK_ROUNDS 20
#define FORK_RANKS 8
#define FORK_WAIT_S 30.0

/* Exit codes of a forked rank (cmocka's asserts cannot report from another process). */
enum {
    FORK_OK = 0,
    FORK_HOLDS_ROOT_SOCKET,
    FORK_SEES_ROOT,
    FORK_FDS,
    FORK_EXCHANGE,
    FORK_TABLE,
    FORK_OWN_ID,
    FORK_OWN_EXCHANGE,
    FORK_OWN_ROOT_LEFT
};

static const char *fork_code_str(int code)
{
    static const char *const str[] = {
        "ok",
        "holds a socket of the parent's root (listener or accepted connection)",
        "st_bootstrap_root_count() is not 0 in the child",
        "open fds differ from the parent's before the id was made",
        "rendezvous through the inherited id failed",
        "wrong table",
        "cannot make an id of its own",
        "rendezvous through its own id failed",
        "its own root did not go away"};

    return (code >= 0 && code < (int)ST_ARRAY_SIZE(str)) ? str[code] : "unknown exit code";
}

/* Like count_fds, without cmocka (for forked children); -1 when /proc cannot be read. When port is
 * not 0, counts only the sockets bound to that port instead. */
static int child_count_fds(uint16_t port)
{
    DIR           *dir = opendir("/proc/self/fd");
    struct dirent *de;
    int            n = 0;

    if (dir == NULL) {
        return -1;
    }
    while ((de = readdir(dir)) != NULL) {
        st_sockaddr_t addr;
        socklen_t     len = sizeof(addr);
        int           fd  = atoi(de->d_name);

        if (de->d_name[0] == '.') {
            continue;
        }
        if (port == 0) {
            n++;
        } else if (fd != dirfd(dir) && getsockname(fd, &addr.sa, &len) == 0 &&
                   addr.sa.sa_family == AF_INET && ntohs(addr.sin.sin_port) == port) {
            n++;
        }
    }
    closedir(dir);
    return n;
}

/* A forked rank, doing what a launcher's child does with the id it inherited; then (rank 0 only)
 * a rendezvous of its own, which needs the bootstrap's lock and root list usable after fork. */
static int fork_rank_main(const st_unique_id_t *id, int rank, int fds)
{
    uint8_t        blob[BLOB_LEN];
    uint8_t        expect[BLOB_LEN];
    uint8_t        table[FORK_RANKS * BLOB_LEN];
    strataUniqueId raw;
    st_unique_id_t own;
    double         end;

    if (child_count_fds(ntohs(id->root.sin.sin_port)) != 0) {
        return FORK_HOLDS_ROOT_SOCKET;
    }
    if (st_bootstrap_root_count() != 0) {
        return FORK_SEES_ROOT;
    }
    if (child_count_fds(0) != fds) {
        return FORK_FDS;
    }
    make_blob(rank, blob, BLOB_LEN);
    if (st_bootstrap_exchange(id, rank, FORK_RANKS, blob, BLOB_LEN, table, 10.0) != ST_OK) {
        return FORK_EXCHANGE;
    }
    for (int q = 0; q < FORK_RANKS; q++) {
        make_blob(q, expect, BLOB_LEN);
        if (memcmp(table + (size_t)q * BLOB_LEN, expect, BLOB_LEN) != 0) {
            return FORK_TABLE;
        }
    }
    if (rank != 0) {
        return FORK_OK;
    }
    if (st_bootstrap_unique_id(&raw) != ST_OK || st_bootstrap_id_decode(&raw, &own) != ST_OK) {
        return FORK_OWN_ID;
    }
    if (st_bootstrap_exchange(&own, 0, 1, blob, BLOB_LEN, table, 5.0) != ST_OK ||
        memcmp(table, blob, BLOB_LEN) != 0) {
        return FORK_OWN_EXCHANGE;
    }
    end = st_time_now() + ROOT_WAIT_S;
    while (st_bootstrap_root_count() > 0 && st_time_now() < end) {
        sleep_s(0.01);
    }
    if (st_bootstrap_root_count() != 0 || child_count_fds(0) != fds) {
        return FORK_OWN_ROOT_LEFT;
    }
    return FORK_OK;
}

/* Waits for the children; a child still running after FORK_WAIT_S is killed and counts as hung
 * (-1). Returns the first failure as an exit code, or 0. */
static int fork_wait_all(pid_t *pids, int n, int *failed_rank_p)
{
    double end   = st_time_now() + FORK_WAIT_S;
    int    first = 0;
    int    left  = n;

    while (left > 0) {
        int   status;
        pid_t pid = waitpid(-1, &status, WNOHANG);

        if (pid == 0 && st_time_now() < end) {
            sleep_s(0.005);
            continue;
        }
        if (pid == 0) { /* hung: kill the rest and report the first of them */
            for (int r = 0; r < n; r++) {
                if (pids[r] > 0) {
                    kill(pids[r], SIGKILL);
                    waitpid(pids[r], NULL, 0);
                    if (first == 0) {
                        first          = -1;
                        *failed_rank_p = r;
                    }
                    pids[r] = 0;
                }
            }
            break;
        }
        assert_true(pid > 0);
        for (int r = 0; r < n; r++) {
            if (pids[r] != pid) {
                continue;
            }
            pids[r] = 0;
            left--;
            if (first == 0 && !(WIFEXITED(status) && WEXITSTATUS(status) == FORK_OK)) {
                first          = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
                *failed_rank_p = r;
            }
        }
    }
    return first;
}

/* The launcher pattern: make the id (the root starts in this process), then fork the ranks while
 * the root runs. Forks come while the root is accepting and reading the earlier ranks, so later
 * children are forked with accepted connections open. No child may hold any of the root's
 * sockets, every rendezvous must succeed, and afterwards this process has its fds back. */
static void test_fork_ranks(void **state)
{
    pid_t pids[FORK_RANKS];
    int   fds;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    for (int round = 0; round < FORK_ROUNDS; round++) {
        st_unique_id_t id          = new_id();
        int            failed_rank = -1;
        int            code;

        fflush(NULL); /* or the children would flush our buffered output again */
        for (int r = 0; r < FORK_RANKS; r++) {
            pids[r] = fork();
            assert_true(pids[r] >= 0);
            if (pids[r] == 0) {
                _exit(fork_rank_main(&id, r, fds));
            }
        }
        code = fork_wait_all(pids, FORK_RANKS, &failed_rank);
        if (code < 0) {
            fail_msg("round %d: rank %d hung", round, failed_rank);
        } else if (code > 0) {
            fail_msg("round %d: rank %d: exit status %d (%s)", round, failed_rank, code,
                     code >= 128 ? "killed by a signal" : fork_code_str(code));
        }
        wait_roots_gone();
        assert_int_equal(count_fds(), fds);
    }
}

/* ------------------------------------------------------------------------------------------ */
/* strangers during a real init                                                                */
/* ------------------------------------------------------------------------------------------ */

#define ROGUE_RANKS 4

/* A forked rank of a real communicator: init, AllReduce int32 of rank + 1 (= 10), destroy. */
static int rogue_rank_main(const strataUniqueId *id, int rank)
{
    strataComm_t comm = NULL;
    int32_t      x    = rank + 1;
    int32_t      y    = 0;

    if (strataCommInitRank(&comm, ROGUE_RANKS, *id, rank) != strataSuccess) {
        return 2;
    }
    if (strataAllReduce(&x, &y, 1, strataInt32, strataSum, comm, NULL) != strataSuccess) {
        return 3;
    }
    if (y != ROGUE_RANKS * (ROGUE_RANKS + 1) / 2) {
        return 4;
    }
    return strataCommDestroy(comm) == strataSuccess ? 0 : 5;
}

/* A hello header with the given secret, rank 0 of ROGUE_RANKS, and blob_len; returns the fd. */
static int rogue_hello(const st_unique_id_t *id, const uint8_t *secret, uint32_t blob_len)
{
    st_unique_id_t forged = *id;
    uint8_t        h[ST_BOOTSTRAP_HELLO_LEN];
    int            fd     = raw_connect(id);

    memcpy(forged.secret, secret, ST_BOOTSTRAP_SECRET_BYTES);
    make_hello(h, &forged, ST_BOOTSTRAP_WIRE_VERSION, 0, ROGUE_RANKS, blob_len);
    assert_int_equal(st_socket_send_all(fd, h, sizeof(h), st_time_now() + 1.0), ST_OK);
    return fd;
}

/* Reads the root's answer to a rogue hello: a REJECT whose reason contains `reason`. */
static void expect_reject(int fd, const char *reason)
{
    uint8_t reply[ST_BOOTSTRAP_REPLY_LEN];
    char    msg[ST_BOOTSTRAP_MSG_MAX + 1];
    size_t  len;

    assert_int_equal(st_socket_recv_all(fd, reply, sizeof(reply), st_time_now() + 5.0), ST_OK);
    assert_int_equal(get32(reply), ST_BOOTSTRAP_WIRE_MAGIC);
    assert_int_equal(get32(reply + 4), ST_BOOTSTRAP_REPLY_REJECT);
    len = get32(reply + 16);
    assert_true(len <= ST_BOOTSTRAP_MSG_MAX);
    assert_int_equal(st_socket_recv_all(fd, msg, len, st_time_now() + 5.0), ST_OK);
    msg[len] = '\0';
    if (strstr(msg, reason) == NULL) {
        fail_msg("rejection '%s' does not say '%s'", msg, reason);
    }
}

/* Issue 5: strangers on the root's port while a real 4-rank communicator forms through the public
 * API (strataCommInitRank in 4 forked processes): a hello without the secret (all zero), one with
 * a wrong secret and an oversized length field, one with the right secret and an oversized length
 * field, garbage bytes, a connection that stays silent, and one that stops inside its hello. The
 * ranks must all succeed and sum correctly, well before the strangers' own hello deadline
 * (ST_BOOT_HELLO_TIMEOUT_S, 5 s: nobody waits for a silent stranger); the malformed hellos are
 * answered with a rejection or dropped, and the silent ones are closed by the root when it ends. */
static void test_rogues_real_init(void **state)
{
    static const char junk[] = "\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03"
                               " a TLS hello, not a strata one, and longer than a hello header";
    uint8_t           zero[ST_BOOTSTRAP_SECRET_BYTES] = {0};
    uint8_t           wrong[ST_BOOTSTRAP_SECRET_BYTES];
    strataUniqueId    raw;
    st_unique_id_t    id;
    pid_t             pids[ROGUE_RANKS];
    int               no_secret, bad_secret, oversized, garbage, silent, slow;
    int               failed_rank = -1;
    int               code;
    int               fds;
    double            start;
    double            elapsed;

    (void)state;
    SKIP_WITHOUT_LO();
    wait_roots_gone();
    fds = count_fds();
    assert_int_equal(st_bootstrap_unique_id(&raw), ST_OK);
    assert_int_equal(st_bootstrap_id_decode(&raw, &id), ST_OK);
    memcpy(wrong, id.secret, sizeof(wrong));
    wrong[0] ^= 0x01;

    silent     = raw_connect(&id);
    slow       = raw_connect(&id);
    garbage    = raw_connect(&id);
    no_secret  = rogue_hello(&id, zero, BLOB_LEN);
    bad_secret = rogue_hello(&id, wrong, 0xfffffff0u);
    oversized  = rogue_hello(&id, id.secret, 0xfffffff0u);
    assert_int_equal(st_socket_send_all(slow, "STBS\0\0", 6, st_time_now() + 1.0), ST_OK);
    assert_int_equal(st_socket_send_all(garbage, junk, sizeof(junk), st_time_now() + 1.0), ST_OK);
    expect_reject(no_secret, "wrong secret");
    expect_reject(bad_secret, "wrong secret");
    expect_reject(oversized, "exceeds the limit");
    assert_true(closed_by_peer(garbage, 2.0));

    start = st_time_now();
    fflush(NULL);
    for (int r = 0; r < ROGUE_RANKS; r++) {
        pids[r] = fork();
        assert_true(pids[r] >= 0);
        if (pids[r] == 0) {
            _exit(rogue_rank_main(&raw, r));
        }
    }
    code    = fork_wait_all(pids, ROGUE_RANKS, &failed_rank);
    elapsed = st_time_now() - start;
    if (code != 0) {
        fail_msg("rank %d of the real communicator: %s %d", failed_rank,
                 code < 0 ? "hung" : "exit status", code);
    }
    print_message("real 4-rank init with 6 strangers on the port: %.2f s\n", elapsed);
    assert_true(elapsed < 4.5); /* less than a silent stranger's hello deadline */
    assert_true(closed_by_peer(silent, 2.0));
    assert_true(closed_by_peer(slow, 2.0));
    close(silent);
    close(slow);
    close(garbage);
    close(no_secret);
    close(bad_secret);
    close(oversized);
    wait_roots_gone();
    assert_int_equal(count_fds(), fds);
}

int main(void)
{
    const struct CMUnitTest tests[] = {
        cmocka_unit_test(test_ifname_match),     cmocka_unit_test(test_ifname_validate),
        cmocka_unit_test(test_find_if_explicit), cmocka_unit_test(test_find_if_errors),
        cmocka_unit_test(test_find_if_default),  cmocka_unit_test(test_addr_roundtrip),
        cmocka_unit_test(test_addr_malformed),   cmocka_unit_test(test_id_roundtrip),
        cmocka_unit_test(test_id_garbage),       cmocka_unit_test(test_exchange_invalid),
        cmocka_unit_test(test_rendezvous_1),     cmocka_unit_test(test_rendezvous_3),
        cmocka_unit_test(test_rendezvous_8),     cmocka_unit_test(test_unique_ids_differ),
        cmocka_unit_test(test_wrong_secret),     cmocka_unit_test(test_garbage_and_silent),
        cmocka_unit_test(test_bad_hellos),       cmocka_unit_test(test_mismatch),
        cmocka_unit_test(test_rank_rejoins),     cmocka_unit_test(test_rendezvous_ipv6),
        cmocka_unit_test(test_timeout_missing),  cmocka_unit_test(test_unreachable),
        cmocka_unit_test(test_comm_id),          cmocka_unit_test(test_fork_ranks),
        cmocka_unit_test(test_rogues_real_init),
    };
    struct ifaddrs *list;

    /* Loopback only, and a short default deadline so a root left unused by a failing test goes
     * away quickly. Both must be set before the one st_param_init of the process. */
    setenv("STRATA_SOCKET_IFNAME", "lo", 1);
    setenv("STRATA_BOOTSTRAP_TIMEOUT", "10s", 1);
    unsetenv("STRATA_COMM_ID");
    unsetenv("STRATA_COMM_SECRET");
    if (st_param_init(st_transport_config_tables()) != ST_OK) {
        fprintf(stderr, "st_param_init failed: %s\n", st_log_last_error());
        return 1;
    }
    if (getifaddrs(&list) == 0) {
        for (struct ifaddrs *ifa = list; ifa != NULL; ifa = ifa->ifa_next) {
            if (strcmp(ifa->ifa_name, "lo") == 0 && ifa->ifa_addr != NULL &&
                ifa->ifa_addr->sa_family == AF_INET && (ifa->ifa_flags & IFF_UP)) {
                lo_up = 1;
            }
        }
        freeifaddrs(list);
    }
    return cmocka_run_group_tests(tests, NULL, NULL);
}
