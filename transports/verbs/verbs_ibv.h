/*
 * verbs_ibv.h - private to transports/verbs: every libibverbs call of the transport goes through
 * one table, st_ibv_t, filled at run time (verbs_ibv.c: dlopen of STRATA_IBVERBS_LIB or
 * libibverbs.so.1, dlvsym at rdma-core's symbol versions), so libstrata has no link dependency on
 * rdma-core and loads on a host without it; unit tests hand the transport a mock table instead
 * (st_verbs_ibv_override). This header includes <infiniband/verbs.h> for its types only: the
 * functions the header defines inline (post_send, post_recv, poll_cq, req_notify_cq go through
 * the context's ops) are wrapped by the table's data-path slots, and no file of the transport
 * names an ibv_* function elsewhere (NCCL's ibvsymbols.cc is the model).
 */
#ifndef ST_VERBS_IBV_H
#define ST_VERBS_IBV_H

#include <stddef.h>

#include <infiniband/verbs.h>

#include "transports/transport.h"

typedef struct st_ibv {
    /* control path: the exported functions of libibverbs.so.1 */
    struct ibv_device **(*get_device_list)(int *num);
    void                (*free_device_list)(struct ibv_device **list);
    const char         *(*get_device_name)(struct ibv_device *dev);
    struct ibv_context *(*open_device)(struct ibv_device *dev);
    int                 (*close_device)(struct ibv_context *ctx);
    int                 (*query_device)(struct ibv_context *ctx, struct ibv_device_attr *attr);
    int                 (*query_port)(struct ibv_context *ctx, uint8_t port,
                                      struct ibv_port_attr *attr);
    int                 (*query_gid)(struct ibv_context *ctx, uint8_t port, int index,
                                     union ibv_gid *gid);
    struct ibv_pd      *(*alloc_pd)(struct ibv_context *ctx);
    int                 (*dealloc_pd)(struct ibv_pd *pd);
    struct ibv_mr      *(*reg_mr)(struct ibv_pd *pd, void *addr, size_t len, int access);
    int                 (*dereg_mr)(struct ibv_mr *mr);
    struct ibv_comp_channel *(*create_comp_channel)(struct ibv_context *ctx);
    int                 (*destroy_comp_channel)(struct ibv_comp_channel *channel);
    struct ibv_cq      *(*create_cq)(struct ibv_context *ctx, int cqe, void *cq_context,
                                     struct ibv_comp_channel *channel, int comp_vector);
    int                 (*destroy_cq)(struct ibv_cq *cq);
    int                 (*get_cq_event)(struct ibv_comp_channel *channel, struct ibv_cq **cq,
                                        void **cq_context);
    void                (*ack_cq_events)(struct ibv_cq *cq, unsigned int nevents);
    struct ibv_qp      *(*create_qp)(struct ibv_pd *pd, struct ibv_qp_init_attr *attr);
    int                 (*modify_qp)(struct ibv_qp *qp, struct ibv_qp_attr *attr, int mask);
    int                 (*destroy_qp)(struct ibv_qp *qp);
    int                 (*get_async_event)(struct ibv_context *ctx, struct ibv_async_event *ev);
    void                (*ack_async_event)(struct ibv_async_event *ev);
    const char         *(*wc_status_str)(enum ibv_wc_status status);
    const char         *(*event_type_str)(enum ibv_event_type event);
    /* data path: the header's inline functions (through ctx->ops) */
    int (*post_send)(struct ibv_qp *qp, struct ibv_send_wr *wr, struct ibv_send_wr **bad_wr);
    int (*post_recv)(struct ibv_qp *qp, struct ibv_recv_wr *wr, struct ibv_recv_wr **bad_wr);
    int (*poll_cq)(struct ibv_cq *cq, int num_entries, struct ibv_wc *wc);
    int (*req_notify_cq)(struct ibv_cq *cq, int solicited_only);
} st_ibv_t;

/* The table for this process, loaded once: from STRATA_IBVERBS_LIB when set, else
 * libibverbs.so.1. ST_ERR_NO_DEVICE with why (capacity len) saying what is missing (the library,
 * a symbol) when it cannot be loaded; the caller says it at INFO, since the transport then only
 * stands aside for UCX. A table set with st_verbs_ibv_override wins. */
st_status_t st_verbs_ibv_get(const st_ibv_t **ibv_p, char *why, size_t len);

/* Tests: every later st_verbs_ibv_get returns ibv (NULL: back to the loaded library). */
void st_verbs_ibv_override(const st_ibv_t *ibv);

#endif
