/*
 * bootstrap_wire.h - what the files of the bootstrap share of its wire codec (bootstrap_wire.c):
 * the byte order of the wire and of the id, the id's magic and version. Private to
 * src/core/bootstrap*.c; the messages and their parsers are declared in bootstrap.h (the tests and
 * the fuzzers call them too).
 */
#ifndef ST_BOOTSTRAP_WIRE_H
#define ST_BOOTSTRAP_WIRE_H

#include <stdint.h>

#include "core/bootstrap.h"

/* The first two words of an encoded strataUniqueId (its whole byte layout is in bootstrap_wire.c),
 * also those of a decoded st_unique_id_t. */
#define ST_BOOTSTRAP_ID_MAGIC   0x53544944u /* "STID" */
#define ST_BOOTSTRAP_ID_VERSION 1u

/* The integers of the wire and of the id: unsigned 32-bit, big-endian, in the 4 bytes at p (the
 * caller owns them: no bounds check). Writes v there / returns the value there. */
void     st_bootstrap_put32(uint8_t *p, uint32_t v);
uint32_t st_bootstrap_get32(const uint8_t *p);

#endif
