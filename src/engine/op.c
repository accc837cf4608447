/*
 * op.c - the table of the collectives (engine/op.h): names, properties, nccl-tests' bus-bandwidth
 * factor and the in-place rule, one row per st_coll_type_t. collbench compiles this file in too.
 */
#include "config.h"

#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "engine/op.h"

#include "codec/codec.h"

#include "engine/comm.h"

/* The bus-bandwidth factors are nccl-tests' (doc/PERFORMANCE.md, "Bus bandwidth"): all-reduce
 * 2(n-1)/n, reduce-scatter, all-gather, all-to-all, gather and scatter (n-1)/n, broadcast and
 * reduce 1, sendrecv 1. The in-place rules are strata.h's ("In place"), which are NCCL's; an
 * all-to-all is never in place. */
const st_coll_info_t st_coll_table[ST_COLL_LAST] = {
    [ST_COLL_ALLREDUCE]     = {.name = "AllReduce", .short_name = "all_reduce", .reduces = 1,
                               .busbw_mul = 2, .busbw_ring = 1, .in_place = ST_INPLACE_SAME},
    [ST_COLL_BROADCAST]     = {.name = "Broadcast", .short_name = "broadcast", .rooted = 1,
                               .busbw_mul = 1, .in_place = ST_INPLACE_SAME},
    [ST_COLL_REDUCE]        = {.name = "Reduce", .short_name = "reduce", .reduces = 1,
                               .rooted = 1, .busbw_mul = 1, .in_place = ST_INPLACE_SAME},
    [ST_COLL_ALLGATHER]     = {.name = "AllGather", .short_name = "all_gather", .per_rank = 1,
                               .busbw_mul = 1, .busbw_ring = 1,
                               .in_place = ST_INPLACE_SEND_AT_RANK},
    [ST_COLL_REDUCESCATTER] = {.name = "ReduceScatter", .short_name = "reduce_scatter",
                               .reduces = 1, .per_rank = 1, .busbw_mul = 1, .busbw_ring = 1,
                               .in_place = ST_INPLACE_RECV_AT_RANK},
    [ST_COLL_SEND]          = {.name = "Send", .short_name = "sendrecv", .p2p = 1,
                               .busbw_mul = 1, .in_place = ST_INPLACE_NONE},
    [ST_COLL_RECV]          = {.name = "Recv", .short_name = "sendrecv", .p2p = 1,
                               .busbw_mul = 1, .in_place = ST_INPLACE_NONE},
    [ST_COLL_ALLTOALL]      = {.name = "AlltoAll", .short_name = "alltoall", .per_rank = 1,
                               .busbw_mul = 1, .busbw_ring = 1, .in_place = ST_INPLACE_NONE},
    /* count: what this rank sends in all (st_coll_args_t), not per rank */
    [ST_COLL_ALLTOALLV]     = {.name = "AlltoAllv", .short_name = "alltoallv", .busbw_mul = 1,
                               .busbw_ring = 1, .in_place = ST_INPLACE_NONE},
    [ST_COLL_GATHER]        = {.name = "Gather", .short_name = "gather", .rooted = 1,
                               .per_rank = 1, .busbw_mul = 1, .busbw_ring = 1,
                               .in_place = ST_INPLACE_SEND_AT_RANK},
    [ST_COLL_SCATTER]       = {.name = "Scatter", .short_name = "scatter", .rooted = 1,
                               .per_rank = 1, .busbw_mul = 1, .busbw_ring = 1,
                               .in_place = ST_INPLACE_RECV_AT_RANK},
};

const st_coll_info_t st_coll_unknown = {.name = "unknown", .short_name = "unknown",
                                               .busbw_mul = 1, .in_place = ST_INPLACE_NONE};

const char *st_coll_name(st_coll_type_t type)
{
    return st_coll_info(type)->name;
}

double st_coll_busbw(st_coll_type_t type, int nranks)
{
    const st_coll_info_t *info = st_coll_info(type);
    double                n    = nranks;

    /* evaluated as nccl-tests writes it (2 * (n - 1) / n): collbench's columns stay bit-exact */
    return info->busbw_ring ? info->busbw_mul * (n - 1) / n : info->busbw_mul;
}

int st_coll_in_place(st_coll_type_t type, const void *sendbuff, const void *recvbuff,
                     size_t block_bytes, int rank)
{
    uintptr_t send = (uintptr_t)sendbuff, recv = (uintptr_t)recvbuff;
    uintptr_t own  = (uintptr_t)rank * block_bytes; /* the rank's block */

    switch (st_coll_info(type)->in_place) {
    case ST_INPLACE_SAME:
        return send == recv;
    case ST_INPLACE_SEND_AT_RANK:
        return send == recv + own;
    case ST_INPLACE_RECV_AT_RANK:
        return recv == send + own;
    default:
        return 0;
    }
}

st_status_t st_coll_args_keep(st_coll_args_t *args)
{
    size_t  n = (size_t)args->comm->nranks;
    size_t *v;

    if (args->compress != NULL && !args->cz_held) {
        __atomic_add_fetch(&args->compress->refs, 1, __ATOMIC_ACQ_REL);
        args->cz_held = 1;
    }
    if (args->type != ST_COLL_ALLTOALLV || args->v_owned != NULL) {
        return ST_OK;
    }
    v = malloc(4 * n * sizeof(*v));
    if (v == NULL) {
        return ST_ERR_NO_MEMORY;
    }
    memcpy(v, args->scounts, n * sizeof(*v));
    memcpy(v + n, args->sdispls, n * sizeof(*v));
    memcpy(v + 2 * n, args->rcounts, n * sizeof(*v));
    memcpy(v + 3 * n, args->rdispls, n * sizeof(*v));
    args->scounts = v;
    args->sdispls = v + n;
    args->rcounts = v + 2 * n;
    args->rdispls = v + 3 * n;
    args->v_owned = v;
    return ST_OK;
}

void st_coll_args_drop(st_coll_args_t *args)
{
    if (args->cz_held) {
        __atomic_sub_fetch(&args->compress->refs, 1, __ATOMIC_ACQ_REL);
        args->cz_held = 0;
    }
    if (args->v_owned != NULL) {
        free(args->v_owned);
        args->v_owned = NULL;
        args->scounts = args->sdispls = args->rcounts = args->rdispls = NULL;
    }
}
