/*
 * bootstrap_wire.c - the bootstrap's bytes: the big-endian integers of the wire, the parsers of
 * the hello and reply headers (protocol in bootstrap.h) and the encoding of a strataUniqueId.
 *
 * The parsers take bytes from outside the process (the network, a launcher, a user's copy of the
 * id), read no more than they are given and keep no state; tests/fuzz/fuzz_wire.c fuzzes them. The
 * root (bootstrap_root.c) and the ranks (bootstrap.c) write and read the wire's integers through
 * st_bootstrap_put32 / st_bootstrap_get32 (bootstrap_wire.h).
 */
#include "config.h"
#include "core/bootstrap_wire.h"

#include <stdio.h>
#include <string.h>

#include "base/log.h"

/* Byte layout of a strataUniqueId (big-endian integers; everything after the last field must be
 * zero, so the format can grow under a new version and garbage is caught). Its magic and version:
 * bootstrap_wire.h. */
#define ST_BOOT_ID_OFF_MAGIC 0
#define ST_BOOT_ID_OFF_VERSION 4
#define ST_BOOT_ID_OFF_SECRET 8
#define ST_BOOT_ID_OFF_FROMENV (ST_BOOT_ID_OFF_SECRET + ST_BOOTSTRAP_SECRET_BYTES)
#define ST_BOOT_ID_OFF_FAMILY (ST_BOOT_ID_OFF_FROMENV + 4)
#define ST_BOOT_ID_OFF_PORT (ST_BOOT_ID_OFF_FAMILY + 2)
#define ST_BOOT_ID_OFF_ADDR (ST_BOOT_ID_OFF_PORT + 2)
#define ST_BOOT_ID_OFF_SCOPE (ST_BOOT_ID_OFF_ADDR + 16)
#define ST_BOOT_ID_LEN (ST_BOOT_ID_OFF_SCOPE + 4)
/* Address families as the id spells them: AF_* values are not the same on every OS. */
#define ST_BOOT_ID_FAMILY_INET 4
#define ST_BOOT_ID_FAMILY_INET6 6

_Static_assert(sizeof(st_unique_id_t) <= sizeof(strataUniqueId),
               "st_unique_id_t must fit in a strataUniqueId");
_Static_assert(ST_BOOT_ID_LEN <= STRATA_UNIQUE_ID_BYTES, "encoded id must fit in strataUniqueId");
_Static_assert(ST_BOOTSTRAP_HELLO_LEN == 36, "hello header is 9 32-bit words");

void st_bootstrap_put32(uint8_t *p, uint32_t v)
{
    p[0] = (uint8_t)(v >> 24);
    p[1] = (uint8_t)(v >> 16);
    p[2] = (uint8_t)(v >> 8);
    p[3] = (uint8_t)v;
}

uint32_t st_bootstrap_get32(const uint8_t *p)
{
    return ((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) | p[3];
}

static void st_boot_put16(uint8_t *p, uint16_t v)
{
    p[0] = (uint8_t)(v >> 8);
    p[1] = (uint8_t)v;
}

static uint16_t st_boot_get16(const uint8_t *p)
{
    return (uint16_t)(((unsigned)p[0] << 8) | p[1]);
}

/* ------------------------------------------------------------------------------------------ */
/* wire messages                                                                               */
/* ------------------------------------------------------------------------------------------ */

st_status_t st_bootstrap_hello_decode(const void *buf, size_t len, st_bootstrap_hello_t *out)
{
    const uint8_t *h = buf;

    if (h == NULL || out == NULL || len < ST_BOOTSTRAP_HELLO_LEN ||
        st_bootstrap_get32(h) != ST_BOOTSTRAP_WIRE_MAGIC) {
        return ST_ERR_INVALID;
    }
    out->version = st_bootstrap_get32(h + 4);
    memcpy(out->secret, h + 8, ST_BOOTSTRAP_SECRET_BYTES);
    out->rank     = st_bootstrap_get32(h + 8 + ST_BOOTSTRAP_SECRET_BYTES);
    out->nranks   = st_bootstrap_get32(h + 12 + ST_BOOTSTRAP_SECRET_BYTES);
    out->blob_len = st_bootstrap_get32(h + 16 + ST_BOOTSTRAP_SECRET_BYTES);
    return ST_OK;
}

st_status_t st_bootstrap_hello_check(const st_bootstrap_hello_t *h, char *why, size_t why_len)
{
    if (h->version != ST_BOOTSTRAP_WIRE_VERSION) {
        snprintf(why, why_len,
                 "bootstrap protocol version %u, the root speaks %u (mixed strata versions?)",
                 h->version, ST_BOOTSTRAP_WIRE_VERSION);
    } else if (h->nranks == 0 || h->nranks > ST_BOOTSTRAP_MAX_RANKS) {
        snprintf(why, why_len, "nranks %u out of range 1..%d", h->nranks, ST_BOOTSTRAP_MAX_RANKS);
    } else if (h->blob_len > ST_BOOTSTRAP_MAX_BLOB) {
        snprintf(why, why_len, "blob of %u bytes exceeds the limit of %d bytes", h->blob_len,
                 ST_BOOTSTRAP_MAX_BLOB);
    } else if (h->rank >= h->nranks) {
        snprintf(why, why_len, "rank %u out of range for nranks %u", h->rank, h->nranks);
    } else {
        return ST_OK;
    }
    return ST_ERR_INVALID;
}

st_status_t st_bootstrap_reply_decode(const void *buf, size_t len, st_bootstrap_reply_t *out)
{
    const uint8_t       *p = buf;
    st_bootstrap_reply_t r;

    if (p == NULL || out == NULL || len < ST_BOOTSTRAP_REPLY_LEN) {
        return ST_ERR_INVALID;
    }
    r.status   = st_bootstrap_get32(p + 4);
    r.nranks   = st_bootstrap_get32(p + 8);
    r.blob_len = st_bootstrap_get32(p + 12);
    r.msg_len  = st_bootstrap_get32(p + 16);
    if (st_bootstrap_get32(p) != ST_BOOTSTRAP_WIRE_MAGIC || r.msg_len > ST_BOOTSTRAP_MSG_MAX ||
        r.status > ST_BOOTSTRAP_REPLY_REJECT) {
        return ST_ERR_INVALID;
    }
    *out = r;
    return ST_OK;
}

/* ------------------------------------------------------------------------------------------ */
/* ids                                                                                         */
/* ------------------------------------------------------------------------------------------ */

st_status_t st_bootstrap_id_encode(const st_unique_id_t *in, strataUniqueId *id)
{
    strataUniqueId out;
    uint8_t       *p = (uint8_t *)out.internal;

    if (in == NULL || id == NULL) {
        return ST_ERR_INVALID;
    }
    memset(&out, 0, sizeof(out));
    st_bootstrap_put32(p + ST_BOOT_ID_OFF_MAGIC, ST_BOOTSTRAP_ID_MAGIC);
    st_bootstrap_put32(p + ST_BOOT_ID_OFF_VERSION, ST_BOOTSTRAP_ID_VERSION);
    memcpy(p + ST_BOOT_ID_OFF_SECRET, in->secret, ST_BOOTSTRAP_SECRET_BYTES);
    st_bootstrap_put32(p + ST_BOOT_ID_OFF_FROMENV, in->from_env ? 1 : 0);
    if (in->root.sa.sa_family == AF_INET) {
        if (in->root.sin.sin_port == 0) {
            return ST_ERR_INVALID;
        }
        st_boot_put16(p + ST_BOOT_ID_OFF_FAMILY, ST_BOOT_ID_FAMILY_INET);
        st_boot_put16(p + ST_BOOT_ID_OFF_PORT, ntohs(in->root.sin.sin_port));
        memcpy(p + ST_BOOT_ID_OFF_ADDR, &in->root.sin.sin_addr, 4);
    } else if (in->root.sa.sa_family == AF_INET6) {
        if (in->root.sin6.sin6_port == 0) {
            return ST_ERR_INVALID;
        }
        st_boot_put16(p + ST_BOOT_ID_OFF_FAMILY, ST_BOOT_ID_FAMILY_INET6);
        st_boot_put16(p + ST_BOOT_ID_OFF_PORT, ntohs(in->root.sin6.sin6_port));
        memcpy(p + ST_BOOT_ID_OFF_ADDR, &in->root.sin6.sin6_addr, 16);
        st_bootstrap_put32(p + ST_BOOT_ID_OFF_SCOPE, in->root.sin6.sin6_scope_id);
    } else {
        return ST_ERR_INVALID;
    }
    *id = out;
    return ST_OK;
}

/* Logged here, once: callers (strataCommInitRank) only propagate. The usual cause is an id that
 * was not passed on byte for byte (a string copy stopping at a zero byte, a short MPI_Bcast). */
st_status_t st_bootstrap_id_decode(const strataUniqueId *id, st_unique_id_t *out)
{
    const uint8_t *p;
    const char    *why = NULL;
    st_unique_id_t uid;
    uint32_t       from_env;
    uint16_t       family;
    uint16_t       port;

    if (id == NULL || out == NULL) {
        st_error(ST_SUB_BOOT, "unique id: NULL pointer");
        return ST_ERR_INVALID;
    }
    p        = (const uint8_t *)id->internal;
    from_env = st_bootstrap_get32(p + ST_BOOT_ID_OFF_FROMENV);
    family   = st_boot_get16(p + ST_BOOT_ID_OFF_FAMILY);
    port     = st_boot_get16(p + ST_BOOT_ID_OFF_PORT);
    if (st_bootstrap_get32(p + ST_BOOT_ID_OFF_MAGIC) != ST_BOOTSTRAP_ID_MAGIC) {
        why = "no strata magic";
    } else if (st_bootstrap_get32(p + ST_BOOT_ID_OFF_VERSION) != ST_BOOTSTRAP_ID_VERSION) {
        why = "made by another strata version";
    } else if (from_env > 1 || port == 0 ||
               (family != ST_BOOT_ID_FAMILY_INET && family != ST_BOOT_ID_FAMILY_INET6)) {
        why = "corrupt address fields";
    }
    /* The unused tail of a v4 address, its scope, and the reserved bytes must all be zero. */
    for (size_t i = (family == ST_BOOT_ID_FAMILY_INET) ? ST_BOOT_ID_OFF_ADDR + 4 : ST_BOOT_ID_LEN;
         why == NULL && i < STRATA_UNIQUE_ID_BYTES; i++) {
        if (p[i] != 0) {
            why = "nonzero reserved bytes";
        }
    }
    if (why != NULL) {
        st_error(ST_SUB_BOOT,
                 "unique id is not valid (%s, magic 0x%08x): pass the bytes made by "
                 "strataGetUniqueId unchanged",
                 why, st_bootstrap_get32(p + ST_BOOT_ID_OFF_MAGIC));
        return ST_ERR_INVALID;
    }
    memset(&uid, 0, sizeof(uid));
    uid.magic    = ST_BOOTSTRAP_ID_MAGIC;
    uid.version  = ST_BOOTSTRAP_ID_VERSION;
    uid.from_env = from_env;
    memcpy(uid.secret, p + ST_BOOT_ID_OFF_SECRET, ST_BOOTSTRAP_SECRET_BYTES);
    if (family == ST_BOOT_ID_FAMILY_INET) {
        uid.root.sin.sin_family = AF_INET;
        uid.root.sin.sin_port   = htons(port);
        memcpy(&uid.root.sin.sin_addr, p + ST_BOOT_ID_OFF_ADDR, 4);
    } else {
        uid.root.sin6.sin6_family   = AF_INET6;
        uid.root.sin6.sin6_port     = htons(port);
        uid.root.sin6.sin6_scope_id = st_bootstrap_get32(p + ST_BOOT_ID_OFF_SCOPE);
        memcpy(&uid.root.sin6.sin6_addr, p + ST_BOOT_ID_OFF_ADDR, 16);
    }
    *out = uid;
    return ST_OK;
}
