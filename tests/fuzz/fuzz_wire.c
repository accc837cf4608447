/*
 * fuzz_wire.c - libFuzzer harness over the parsers of bytes that come from outside the process:
 * the unique id (any bytes a user or launcher passes on), the bootstrap hello and reply headers,
 * and the address and interface strings (STRATA_COMM_ID, STRATA_SOCKET_IFNAME). The first input
 * byte picks the parser; the rest is its input.
 *
 * Besides "no crash, no sanitizer report" it checks what the parsers promise: an id that decodes
 * encodes back to the same 128 bytes (so no two ids decode alike and nothing is ignored), and a
 * hello or reply that passes the checks has every length and rank within its limits.
 *
 * Build: configure CC=clang --enable-fuzzers; run: tests/fuzz/fuzz_wire tests/fuzz/corpus/fuzz_wire
 */
#include "config.h"

#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/socket.h"
#include "core/bootstrap.h"

#define FZ_STR_MAX 256

int LLVMFuzzerInitialize(int *argc, char ***argv);
int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

#define FZ_ASSERT(_cond)                                                                           \
    do {                                                                                           \
        if (!(_cond)) {                                                                            \
            abort();                                                                               \
        }                                                                                          \
    } while (0)

static void fz_id(const uint8_t *data, size_t size)
{
    strataUniqueId id;
    strataUniqueId again;
    st_unique_id_t uid;
    char           str[ST_SOCKADDR_STRLEN];

    memset(&id, 0, sizeof(id));
    memcpy(id.internal, data, size < sizeof(id) ? size : sizeof(id));
    if (st_bootstrap_id_decode(&id, &uid) != ST_OK) {
        return;
    }
    FZ_ASSERT(st_bootstrap_id_encode(&uid, &again) == ST_OK);
    FZ_ASSERT(memcmp(&id, &again, sizeof(id)) == 0);
    FZ_ASSERT(uid.from_env <= 1);
    st_socket_addr_str(&uid.root, str, sizeof(str));
    FZ_ASSERT(memchr(str, '\0', sizeof(str)) != NULL);
    if (uid.root.sa.sa_family == AF_INET) {
        st_sockaddr_t back;

        /* a numeric IPv4 address: parsing it needs no name service */
        FZ_ASSERT(st_socket_addr_parse(str, &back) == ST_OK);
        FZ_ASSERT(back.sin.sin_port == uid.root.sin.sin_port);
        FZ_ASSERT(back.sin.sin_addr.s_addr == uid.root.sin.sin_addr.s_addr);
    }
}

static void fz_hello(const uint8_t *data, size_t size)
{
    st_bootstrap_hello_t h;
    char                 why[ST_BOOTSTRAP_MSG_MAX];

    if (st_bootstrap_hello_decode(data, size, &h) != ST_OK) {
        FZ_ASSERT(size < ST_BOOTSTRAP_HELLO_LEN || data[0] != 0x53 || data[1] != 0x54 ||
                  data[2] != 0x42 || data[3] != 0x53);
        return;
    }
    why[0] = '\0';
    if (st_bootstrap_hello_check(&h, why, sizeof(why)) == ST_OK) {
        FZ_ASSERT(h.version == ST_BOOTSTRAP_WIRE_VERSION);
        FZ_ASSERT(h.nranks >= 1 && h.nranks <= ST_BOOTSTRAP_MAX_RANKS);
        FZ_ASSERT(h.rank < h.nranks);
        FZ_ASSERT(h.blob_len <= ST_BOOTSTRAP_MAX_BLOB);
    } else {
        FZ_ASSERT(why[0] != '\0' && memchr(why, '\0', sizeof(why)) != NULL);
    }
}

static void fz_reply(const uint8_t *data, size_t size)
{
    st_bootstrap_reply_t r;

    if (st_bootstrap_reply_decode(data, size, &r) != ST_OK) {
        return;
    }
    FZ_ASSERT(size >= ST_BOOTSTRAP_REPLY_LEN);
    FZ_ASSERT(r.msg_len <= ST_BOOTSTRAP_MSG_MAX);
    FZ_ASSERT(r.status <= ST_BOOTSTRAP_REPLY_REJECT);
}

/* Name lookups would make the harness slow and depend on the network: only numeric hosts
 * ("[v6]:port", or digits and dots) go to st_socket_addr_parse. */
static int fz_numeric_host(const char *s)
{
    const char *colon;

    if (s[0] == '[') {
        return 1;
    }
    colon = strchr(s, ':');
    if (colon == NULL) {
        return 0;
    }
    for (const char *p = s; p < colon; p++) {
        if ((*p < '0' || *p > '9') && *p != '.') {
            return 0;
        }
    }
    return 1;
}

static void fz_strings(const uint8_t *data, size_t size)
{
    static const char *const names[] = {"lo", "eth0", "ib0", "docker0", "enp1s0f1", ""};
    char                     s[FZ_STR_MAX];
    size_t                   n = size < sizeof(s) - 1 ? size : sizeof(s) - 1;
    st_sockaddr_t            addr;
    char                     back[ST_SOCKADDR_STRLEN];

    memcpy(s, data, n);
    s[n] = '\0';
    st_socket_ifname_validate(s);
    for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
        int m = st_socket_ifname_match(s, names[i]);

        FZ_ASSERT(m == 0 || m == 1);
    }
    if (fz_numeric_host(s) && st_socket_addr_parse(s, &addr) == ST_OK) {
        FZ_ASSERT(addr.sa.sa_family == AF_INET || addr.sa.sa_family == AF_INET6);
        st_socket_addr_str(&addr, back, sizeof(back));
    }
}

int LLVMFuzzerInitialize(int *argc, char ***argv)
{
    (void)argc;
    (void)argv;
    st_log_init();
    st_log_level = ST_LOG_NONE; /* every rejected id would log a line */
    return 0;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1) {
        return 0;
    }
    switch (data[0] % 4) {
    case 0: fz_id(data + 1, size - 1); break;
    case 1: fz_hello(data + 1, size - 1); break;
    case 2: fz_reply(data + 1, size - 1); break;
    default: fz_strings(data + 1, size - 1); break;
    }
    return 0;
}
