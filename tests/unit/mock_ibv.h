/*
 * mock_ibv.h - an in-process stand-in for libibverbs, handed to the verbs transport as its table
 * (st_verbs_ibv_override), so the whole transport runs in unit tests with ranks as threads: QPs
 * of every context of the process form one fabric; an RDMA write is a memcpy after the checks
 * hardware makes (rkey, PD, access, bounds, QP states, the peer connected back, PSNs), with the
 * real work-completion statuses, and completions raise the completion channel's eventfd.
 * It also records what the transport asked of it (attribute masks, counts) for the tests to
 * assert. Not the multi-process stand-in (tests/fakeverbs): that one crosses processes.
 */
#ifndef ST_MOCK_IBV_H
#define ST_MOCK_IBV_H

#include <stdint.h>

#include "transports/verbs/verbs_ibv.h"

typedef struct mock_ibv_stats {
    int      modify[4];      /* transitions asked: to INIT, RTR, RTS, ERR */
    int      bad_masks;      /* transitions refused for a missing or stray attribute */
    int      rtr_psn_zero;   /* RTR with rq_psn 0 (PSNs should be random) */
    long     writes, writes_imm, sends, recvs_posted;
    long     bytes;
    long     rnr;            /* a write with immediate or a send found no receive posted */
    int      qps_live, mrs_live, cqs_live, pds_live, ctxs_live;
} mock_ibv_stats_t;

/* The table. ndev devices named mock0.., port 1 ACTIVE (ports in down_mask DOWN). */
const st_ibv_t *mock_ibv_table(int ndev, unsigned down_mask);

/* The n-th data work request posted from now on (counted over the process, 1-based) completes
 * with status instead (the QP then goes to the error state and flushes); 0 disables. */
void mock_ibv_fail_nth(long n, enum ibv_wc_status status);

/* reg_mr fails with ENOMEM for the n-th registration from now on (1-based); 0 disables. */
void mock_ibv_reg_fail_nth(long n);

/* The transport type device dev reports (mock_ibv_table resets every device to IB). */
void mock_ibv_set_transport(int dev, enum ibv_transport_type type);

/* A copy of the counters. */
mock_ibv_stats_t mock_ibv_stats(void);

#endif
