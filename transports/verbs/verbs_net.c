/*
 * verbs_net.c - the verbs transport's st_net_ops_t and its STRATA_IB_* parameters.
 * Contracts: transports/transport.h; the design: verbs.h.
 */
#include "config.h"
#include "transports/verbs/verbs.h"

#include <stddef.h>
#include <string.h>

st_verbs_config_t st_verbs_config;

/* Defaults follow NCCL's net_ib where it has one (NCCL_IB_RETRY_CNT 7, NCCL_IB_TC/SL 0,
 * NCCL_IB_QPS_PER_CONNECTION 1); the timeout is lower than NCCL's 20 (4.3 s per try, about 34 s
 * with 7 retries): the out-of-band socket already reports a dead process at once, and 18 (1.07 s
 * per try, about 8.6 s) still rides out congestion. */
static const st_config_field_t st_verbs_fields[] = {
    {"VERBS_LIB", "", "libibverbs to load (dlopen) instead of libibverbs.so.1, as "
     "NCCL_IBVERBS_LIB (STRATA_IBVERBS_LIB)",
     offsetof(st_verbs_config_t, lib), ST_CFG_STRING},
    {"_HCA", "", "HCA ports the verbs transport may use, NCCL_IB_HCA's syntax: prefixes "
     "(mlx5_0,mlx5_1), exact names with a leading '=', exclusion with a leading '^', a port after "
     "':' (mlx5_0:1); empty: every active port",
     offsetof(st_verbs_config_t, hca), ST_CFG_STRING},
    {"_TIMEOUT", "18", "InfiniBand ACK timeout exponent: 4.096 us * 2^value per try (18: 1.07 s)",
     offsetof(st_verbs_config_t, timeout), ST_CFG_UINT},
    {"_RETRY_CNT", "7", "retries before a work request fails with RETRY_EXC_ERR (0..7)",
     offsetof(st_verbs_config_t, retry_cnt), ST_CFG_UINT},
    {"_GID_INDEX", "-1", "GID index on RoCE; -1: the port's IPv4-mapped GID (RoCE v2)",
     offsetof(st_verbs_config_t, gid_index), ST_CFG_INT},
    {"_TC", "0", "traffic class of RoCE packets (GRH)",
     offsetof(st_verbs_config_t, tc), ST_CFG_UINT},
    {"_SL", "0", "InfiniBand service level",
     offsetof(st_verbs_config_t, sl), ST_CFG_UINT},
    {"_QPS_PER_CONN", "1", "RC queue pairs per connection (1..8); a message's parts stripe "
     "over them", offsetof(st_verbs_config_t, qps_per_conn), ST_CFG_UINT},
    {"_BOUNCE_SIZE", "256k", "bytes per bounce buffer: a part of a message to or from memory "
     "that strataMemAlloc did not give",
     offsetof(st_verbs_config_t, bounce_size), ST_CFG_SIZE},
    {"_BOUNCE_MAX", "64m", "registered bounce buffer bytes per connection context at most "
     "(allocated as needed)", offsetof(st_verbs_config_t, bounce_max), ST_CFG_SIZE},
    {"_ZC_PART", "4m", "bytes per part of a zero-copy (strataMemAlloc) receive",
     offsetof(st_verbs_config_t, zc_part), ST_CFG_SIZE},
    {NULL, NULL, NULL, 0, ST_CFG_STRING}
};

static const st_config_table_t st_verbs_table = {"IB", "verbs transport", st_verbs_fields,
                                                 &st_verbs_config};

static st_status_t st_verbs_open(const st_net_config_t *cfg, st_net_ctx_t **ctx_p)
{
    static const struct {
        const char *var;
        size_t      offset;
        size_t      min, max;
    } ranges[] = {
        /* the fields of the InfiniBand headers they go into: 5-bit timeout, 3-bit retry count,
         * 4-bit service level, 8-bit traffic class */
        {"STRATA_IB_TIMEOUT", offsetof(st_verbs_config_t, timeout), 0, 31},
        {"STRATA_IB_RETRY_CNT", offsetof(st_verbs_config_t, retry_cnt), 0, 7},
        {"STRATA_IB_SL", offsetof(st_verbs_config_t, sl), 0, 15},
        {"STRATA_IB_TC", offsetof(st_verbs_config_t, tc), 0, 255},
        {"STRATA_IB_QPS_PER_CONN", offsetof(st_verbs_config_t, qps_per_conn), 1, ST_VB_MAX_QPS},
    };
    st_status_t status;

    if (st_verbs_config.bounce_size < 4096 || st_verbs_config.zc_part < 4096) {
        st_error(ST_SUB_VERBS, "%s=%zu: at least 4k", st_verbs_config.bounce_size < 4096
                 ? "STRATA_IB_BOUNCE_SIZE" : "STRATA_IB_ZC_PART",
                 st_verbs_config.bounce_size < 4096 ? st_verbs_config.bounce_size
                                                    : st_verbs_config.zc_part);
        return ST_ERR_INVALID;
    }
    for (size_t i = 0; i < ST_ARRAY_SIZE(ranges); i++) {
        unsigned v = *(const unsigned *)((const char *)&st_verbs_config + ranges[i].offset);

        if (v < ranges[i].min || v > ranges[i].max) {
            st_error(ST_SUB_VERBS, "%s=%u: must be %zu..%zu", ranges[i].var, v, ranges[i].min,
                     ranges[i].max);
            return ST_ERR_INVALID;
        }
    }
    status = st_vb_ctx_open(cfg, ctx_p);
    if (status == ST_OK) {
        st_vb_regs_init(*ctx_p);
    }
    return status;
}

static void st_verbs_set_rank(st_net_ctx_t *ctx, int rank)
{
    ctx->rank = rank;
}

static st_status_t st_verbs_address(st_net_ctx_t *ctx, st_net_addr_scope_t scope ST_UNUSED,
                                    void *buf, size_t *len_p)
{
    size_t cap = *len_p;

    *len_p = sizeof(ctx->addr);
    if (cap < sizeof(ctx->addr)) {
        return ST_ERR_INVALID;
    }
    memcpy(buf, &ctx->addr, sizeof(ctx->addr));
    return ST_OK;
}

static st_status_t st_verbs_mem_reg(st_net_ctx_t *ctx ST_UNUSED, void *buf ST_UNUSED,
                                    size_t len ST_UNUSED, st_memh_t **memh_p)
{
    *memh_p = NULL; /* the transport registers what it can itself (verbs_mem.c) */
    return ST_OK;
}

static st_status_t st_verbs_mem_dereg(st_net_ctx_t *ctx ST_UNUSED, st_memh_t *memh ST_UNUSED)
{
    return ST_OK;
}

static int st_verbs_event_fd(st_net_ctx_t *ctx)
{
    return ctx->epfd;
}

const st_net_ops_t st_verbs_net = {
    .name         = "verbs",
    .config       = &st_verbs_table,
    .open         = st_verbs_open,
    .describe     = st_vb_ctx_describe,
    .set_rank     = st_verbs_set_rank,
    .close        = st_vb_ctx_close,
    .address      = st_verbs_address,
    .connect      = st_vb_connect,
    .disconnect   = st_vb_disconnect,
    .mem_reg      = st_verbs_mem_reg,
    .mem_dereg    = st_verbs_mem_dereg,
    .isend        = st_vb_isend,
    .irecv        = st_vb_irecv,
    .irecv_any    = st_vb_irecv_any,
    .cancel       = st_vb_cancel,
    .progress     = st_vb_progress,
    .event_fd     = st_verbs_event_fd,
    .arm          = st_vb_arm,
    .rail_devices = st_vb_rail_devices,
};
