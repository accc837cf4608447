/*
 * bootstrap_root.h - what the rank side of the bootstrap (bootstrap.c) uses of the root
 * (bootstrap_root.c) beyond bootstrap.h: starting a root for a fresh id. Private to
 * src/core/bootstrap*.c.
 */
#ifndef ST_BOOTSTRAP_ROOT_H
#define ST_BOOTSTRAP_ROOT_H

#include <stdint.h>

#include "base/socket.h"
#include "base/status.h"
#include "core/bootstrap.h"

/* Room for an address as the bootstrap's messages print it (the root's, a peer's). */
#define ST_BOOTSTRAP_ADDR_STR 64

/* Opens a listener on *addr (port 0 picks one; *addr gets the bound port) and starts a root thread
 * on it for the ranks whose hellos carry secret (ST_BOOTSTRAP_SECRET_BYTES), nranks of them (0:
 * the first accepted rank fixes it). After timeout seconds (INFINITY: never) it tells the waiting
 * ranks which ranks are missing and exits. Returns once the thread runs. ST_ERR_NO_MEMORY (also
 * when the fork handlers cannot be registered), ST_ERR_IO when the socket or the thread fails,
 * ST_ERR_INVALID for an address neither IPv4 nor IPv6; every error is logged. */
st_status_t st_bootstrap_root_spawn(st_sockaddr_t *addr, const uint8_t *secret, uint32_t nranks,
                                    double timeout);

#endif
