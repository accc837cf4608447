/*
 * transport.c - the table of builtin transports. The only file of the library that tests which
 * optional transports were built (HAVE_VERBS).
 */
#include "config.h"
#include "transports/transport.h"

#include <pthread.h>
#include <string.h>

#include "device/dev.h"

extern const st_net_ops_t st_ucx_net;
#ifdef HAVE_VERBS
extern const st_net_ops_t st_verbs_net;
#endif

/* A transport that needs an optional library is listed under the HAVE_* that configure defines
 * for it (m4/strata_<dep>.m4), before UCX when it should be preferred. verbs comes first: under
 * STRATA_NET=auto it opens where an active HCA port exists and otherwise stands aside (said at
 * INFO) for UCX. */
const st_net_ops_t *const st_net_transports[] = {
#ifdef HAVE_VERBS
    &st_verbs_net,
#endif
    &st_ucx_net,
    NULL
};

extern const st_win_ops_t st_shm_win;
extern const st_win_ops_t st_cuda_ipc_win;

/* cuda_ipc is plain C over the device table (device/dev.h), so it is always built; where st_dev()
 * finds no device its create and mem_alloc refuse with ST_ERR_NO_DEVICE (logged). */
const st_win_ops_t *const st_win_transports[] = {
    &st_shm_win,
    &st_cuda_ipc_win,
    NULL
};

const st_transports_t st_transports_builtin = {
    .net = st_net_transports,
    .win = st_win_transports,
};

static const st_config_table_t *st_transport_tables[8];
static pthread_once_t           st_transport_tables_once = PTHREAD_ONCE_INIT;

/* The device layer's table (STRATA_DEVICE, the simulated device's settings) comes first: it sits
 * below the transports (docs/architecture.md), and this list is what the layers above hand down
 * to st_param_init. */
static void st_transport_tables_fill(void)
{
    int k = 0;

    st_transport_tables[k++] = st_dev_config_table();
    for (const st_net_ops_t *const *tl = st_net_transports; *tl != NULL; tl++) {
        if ((*tl)->config != NULL && k < 7) {
            st_transport_tables[k++] = (*tl)->config;
        }
    }
    st_transport_tables[k] = NULL;
}

const st_config_table_t *const *st_transport_config_tables(void)
{
    pthread_once(&st_transport_tables_once, st_transport_tables_fill);
    return st_transport_tables;
}

const st_net_ops_t *st_net_find(const st_net_ops_t *const *table, const char *name)
{
    for (; *table != NULL; table++) {
        if (strcmp((*table)->name, name) == 0) {
            return *table;
        }
    }
    return NULL;
}

const st_win_ops_t *st_win_find(const st_win_ops_t *const *table, st_mem_type_t type)
{
    for (; *table != NULL; table++) {
        if ((*table)->mem_type == type) {
            return *table;
        }
    }
    return NULL;
}
