/*
 * node.h - node identity: which ranks share a node (and so memory, and a NIC).
 */
#ifndef ST_NODE_H
#define ST_NODE_H

#include <stddef.h>

#include "base/status.h"

#define ST_NODE_ID_LEN 64 /* bytes of a node identity, NUL included */

/* Writes this process's node identity into buf: STRATA_HOSTID when set, else the hostname and the
 * kernel's boot id ("host:bootid"), so two hosts with one name still differ. Never fails: on a
 * missing boot id the hostname alone is used. */
void st_node_id(char *buf, size_t len);
/* Sets the calling thread's node identity, which st_node_id then returns in that thread before
 * anything else (NULL or "" clears it): for ranks that are threads of one process standing for
 * ranks of several nodes (tests/unit/test_transports.c runs the inter-node phases so). At most
 * ST_NODE_ID_LEN - 1 bytes are kept. */
void st_node_id_set_thread(const char *id);

#endif
