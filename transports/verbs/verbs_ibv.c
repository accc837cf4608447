/*
 * verbs_ibv.c - the libibverbs table (verbs_ibv.h): dlopen + dlvsym at the symbol versions of
 * rdma-core (objdump -T libibverbs.so.1: most functions are IBVERBS_1.1, the completion
 * channel's only IBVERBS_1.0), as NCCL's ibvsymbols.cc does, so a host without rdma-core still
 * loads libstrata and runs over UCX. ibv_query_port and ibv_reg_mr are macros in the header;
 * their exported symbols are taken by name, never the macros.
 */
#include "config.h"
#include "transports/verbs/verbs_ibv.h"
#include "transports/verbs/verbs.h"

#include <dlfcn.h>
#include <pthread.h>
#include <stdio.h>
#include <string.h>

static st_ibv_t         st_ibv_loaded;
static const st_ibv_t  *st_ibv_test;
static st_status_t      st_ibv_status = ST_ERR_NO_DEVICE;
static char             st_ibv_why[256];
static pthread_once_t   st_ibv_once = PTHREAD_ONCE_INIT;

static int st_ibv_post_send(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad)
{
    return qp->context->ops.post_send(qp, wr, bad);
}

static int st_ibv_post_recv(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad)
{
    return qp->context->ops.post_recv(qp, wr, bad);
}

static int st_ibv_poll_cq(struct ibv_cq *cq, int n, struct ibv_wc *wc)
{
    return cq->context->ops.poll_cq(cq, n, wc);
}

static int st_ibv_req_notify_cq(struct ibv_cq *cq, int solicited_only)
{
    return cq->context->ops.req_notify_cq(cq, solicited_only);
}

/* One symbol at its version, falling back to the default version (a stand-in library built
 * without a version script still works). */
static void *st_ibv_sym(void *handle, const char *name, const char *version)
{
    void *sym = dlvsym(handle, name, version);

    return (sym != NULL) ? sym : dlsym(handle, name);
}

#define ST_IBV_SYM(_field, _name, _version)                                                      \
    do {                                                                                         \
        *(void **)&st_ibv_loaded._field = st_ibv_sym(handle, _name, _version);                   \
        if (st_ibv_loaded._field == NULL) {                                                      \
            snprintf(st_ibv_why, sizeof(st_ibv_why), "%s has no %s@%s", lib, _name, _version);   \
            goto err_close;                                                                      \
        }                                                                                        \
    } while (0)

static void st_ibv_load(void)
{
    const char *lib = (st_verbs_config.lib != NULL && st_verbs_config.lib[0] != '\0')
                          ? st_verbs_config.lib : "libibverbs.so.1";
    void       *handle;

    handle = dlopen(lib, RTLD_NOW | RTLD_LOCAL);
    if (handle == NULL) {
        snprintf(st_ibv_why, sizeof(st_ibv_why), "cannot load %s%s: %s", lib,
                 (st_verbs_config.lib != NULL && st_verbs_config.lib[0] != '\0')
                     ? " (STRATA_IBVERBS_LIB)" : " (is rdma-core's libibverbs1 installed?)",
                 dlerror());
        return;
    }
    ST_IBV_SYM(get_device_list, "ibv_get_device_list", "IBVERBS_1.1");
    ST_IBV_SYM(free_device_list, "ibv_free_device_list", "IBVERBS_1.1");
    ST_IBV_SYM(get_device_name, "ibv_get_device_name", "IBVERBS_1.1");
    ST_IBV_SYM(open_device, "ibv_open_device", "IBVERBS_1.1");
    ST_IBV_SYM(close_device, "ibv_close_device", "IBVERBS_1.1");
    ST_IBV_SYM(query_device, "ibv_query_device", "IBVERBS_1.1");
    ST_IBV_SYM(query_port, "ibv_query_port", "IBVERBS_1.1");
    ST_IBV_SYM(query_gid, "ibv_query_gid", "IBVERBS_1.1");
    ST_IBV_SYM(alloc_pd, "ibv_alloc_pd", "IBVERBS_1.1");
    ST_IBV_SYM(dealloc_pd, "ibv_dealloc_pd", "IBVERBS_1.1");
    ST_IBV_SYM(reg_mr, "ibv_reg_mr", "IBVERBS_1.1");
    ST_IBV_SYM(dereg_mr, "ibv_dereg_mr", "IBVERBS_1.1");
    ST_IBV_SYM(create_comp_channel, "ibv_create_comp_channel", "IBVERBS_1.0");
    ST_IBV_SYM(destroy_comp_channel, "ibv_destroy_comp_channel", "IBVERBS_1.0");
    ST_IBV_SYM(create_cq, "ibv_create_cq", "IBVERBS_1.1");
    ST_IBV_SYM(destroy_cq, "ibv_destroy_cq", "IBVERBS_1.1");
    ST_IBV_SYM(get_cq_event, "ibv_get_cq_event", "IBVERBS_1.1");
    ST_IBV_SYM(ack_cq_events, "ibv_ack_cq_events", "IBVERBS_1.1");
    ST_IBV_SYM(create_qp, "ibv_create_qp", "IBVERBS_1.1");
    ST_IBV_SYM(modify_qp, "ibv_modify_qp", "IBVERBS_1.1");
    ST_IBV_SYM(destroy_qp, "ibv_destroy_qp", "IBVERBS_1.1");
    ST_IBV_SYM(get_async_event, "ibv_get_async_event", "IBVERBS_1.1");
    ST_IBV_SYM(ack_async_event, "ibv_ack_async_event", "IBVERBS_1.1");
    ST_IBV_SYM(wc_status_str, "ibv_wc_status_str", "IBVERBS_1.1");
    ST_IBV_SYM(event_type_str, "ibv_event_type_str", "IBVERBS_1.1");
    st_ibv_loaded.post_send     = st_ibv_post_send;
    st_ibv_loaded.post_recv     = st_ibv_post_recv;
    st_ibv_loaded.poll_cq       = st_ibv_poll_cq;
    st_ibv_loaded.req_notify_cq = st_ibv_req_notify_cq;
    st_ibv_status = ST_OK;
    /* the handle stays open for the life of the process: contexts may outlive any one user */
    return;

err_close:
    dlclose(handle);
}

st_status_t st_verbs_ibv_get(const st_ibv_t **ibv_p, char *why, size_t len)
{
    if (st_ibv_test != NULL) {
        *ibv_p = st_ibv_test;
        return ST_OK;
    }
    pthread_once(&st_ibv_once, st_ibv_load);
    if (st_ibv_status != ST_OK) {
        snprintf(why, len, "%s", st_ibv_why);
        return st_ibv_status;
    }
    *ibv_p = &st_ibv_loaded;
    return ST_OK;
}

void st_verbs_ibv_override(const st_ibv_t *ibv)
{
    st_ibv_test = ibv;
}
