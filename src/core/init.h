/*
 * init.h - the communicator's lifecycle: allocation, init (bootstrap, transport, endpoints, the
 * wire-up check, rails, windows, tuning), split, abort and free (core/init.c). What an
 * operation uses at run time is the engine's (engine/comm.h).
 */
#ifndef ST_INIT_H
#define ST_INIT_H

#include "engine/comm.h"

/* Allocates a communicator shell for rank of nranks (state INITIALIZING); NULL without memory. */
st_comm_t *st_comm_alloc(int rank, int nranks, double op_timeout, const char *name);
/* Bootstrap, net context and endpoints of an allocated comm; state READY on success. The caller
 * frees the comm on failure. timeout: seconds for the bootstrap (the join:
 * STRATA_BOOTSTRAP_TIMEOUT); the exchanges after it end within the smaller of timeout and the
 * comm's operation timeout. strataCommAbort (st_comm_cancel) ends any of its waits at once.
 * tl: the transports to choose from (&st_transports_builtin; tests hand in fakes); it must
 * outlive the communicator and its splits. */
st_status_t st_comm_init(st_comm_t *comm, const strataUniqueId *id, double timeout,
                         const st_transports_t *tl);
/* strataCommInitRank over the transports tl (core/api.c): how a test runs the whole library over
 * fake transports (tests/unit/test_transports.c). Same results and errors as strataCommInitRank. */
strataResult_t st_comm_init_rank_tl(strataComm_t *comm, int nranks, strataUniqueId id, int rank,
                                    const st_transports_t *tl);
/* Creates the communicator of a split (called by every rank of parent). *comm_p is NULL for
 * color < 0. tune_file: its tuning table (NULL: the parent's). */
st_status_t st_comm_split(st_comm_t *parent, int color, int key, double op_timeout,
                          const char *name, const char *tune_file, st_comm_t **comm_p);

/* Agreement at init: every rank passes its status; returns ST_OK when all passed ST_OK, else
 * the lowest (first in st_status_t order) error, on every rank. An all-reduce over comm's net. */
st_status_t st_comm_agree(st_comm_t *comm, st_status_t status);
/* Frees everything; force = 1 drops in-flight traffic (abort). */
void st_comm_free(st_comm_t *comm, int force);

/* Abort: marks comm aborted and wakes whatever waits in its init (bootstrap, wire-up) or its
 * operations, which then end with ST_ERR_CANCELED or the abort's error. Any thread. */
void st_comm_cancel(st_comm_t *comm);

#endif
