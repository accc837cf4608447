/*
 * node.c - node identity from STRATA_HOSTID, or hostname plus boot id (or a thread's own, set by a
 * test whose threads stand for ranks of several nodes).
 *
 * Emulated nodes (network namespaces with their own UTS hostname) share one kernel and so one boot
 * id; their hostnames differ, which is what makes them distinct nodes here.
 */
#include "config.h"
#include "topo/node.h"

#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "base/param.h"

static __thread char st_node_thread_id[ST_NODE_ID_LEN];

void st_node_id_set_thread(const char *id)
{
    snprintf(st_node_thread_id, sizeof(st_node_thread_id), "%s", id != NULL ? id : "");
}

void st_node_id(char *buf, size_t len)
{
    char  host[256] = "unknown";
    char  boot[64]  = "";
    FILE *f;

    if (st_node_thread_id[0] != '\0') {
        snprintf(buf, len, "%s", st_node_thread_id);
        return;
    }
    if (st_core_config.hostid != NULL && st_core_config.hostid[0] != '\0') {
        snprintf(buf, len, "%s", st_core_config.hostid);
        return;
    }
    gethostname(host, sizeof(host) - 1);
    f = fopen("/proc/sys/kernel/random/boot_id", "r");
    if (f != NULL) {
        if (fgets(boot, sizeof(boot), f) != NULL) {
            boot[strcspn(boot, "\n")] = '\0';
        }
        fclose(f);
    }
    snprintf(buf, len, "%s%s%.36s", host, boot[0] ? ":" : "", boot);
}
