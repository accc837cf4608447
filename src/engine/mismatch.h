/*
 * mismatch.h - mismatch detection (STRATA_CHECK_MISMATCH): every rank of a collective agrees that
 * all ranks made the same call before the collective may succeed.
 *
 * Each collective's fingerprint is (collective, count, datatype, op, root, sequence number, and
 * whether it runs on the device windows: hier on device buffers against a host call would read
 * different windows); an all-to-all-v's count there is 0, as its ranks' counts differ by design
 * (its algorithm agrees them pair by pair, coll/a2a.c). A
 * small agreement runs next to the data algorithm: a dissemination exchange of the (min, max)
 * fingerprint, each tagged with the rank that holds it, over ceil(log2 n) rounds of 96-byte
 * messages in a tag space of their own (bits 43 and 42 set: no collective or send/recv tag has
 * both). After the last round every rank holds the same minimum and maximum; when they differ the
 * calls disagree and every rank fails the collective with ST_ERR_USAGE (strataInvalidUsage) and
 * the same one-line message naming both calls and their ranks, even when its data algorithm waits
 * for bytes that never come. The engine (exec.c) completes an operation only when its data and its
 * agreement both completed.
 *
 * Stall notices: when a rank's operation stalls (STRATA_STALL_WARN), every rank but 0 tells rank 0
 * that it is inside collective #k; rank 0, stalled too, collects these notices for a moment and
 * names the ranks that sent none: those have not entered collective #k (or are not stalled in it).
 */
#ifndef ST_CHECK_H
#define ST_CHECK_H

#include "engine/exec.h"
#include "engine/op.h"

typedef struct st_check st_check_t;

/* When args is a collective that needs the agreement (STRATA_CHECK_MISMATCH=1, several ranks),
 * attaches one to *op_p; when *op_p is NULL (a collective with no data to move, count 0), makes an
 * op that only runs the agreement. Call after the algorithm made *op_p. On failure (no memory)
 * destroys *op_p and sets it to NULL. */
st_status_t st_check_attach(const st_coll_args_t *args, st_op_t **op_p);

/* Advances the agreement (posts its first messages at the first call). ST_INPROGRESS, ST_OK when
 * every rank made the same call, ST_ERR_USAGE (logged, naming both calls) when not, or the error
 * of a failed transfer (not logged: see st_check_report). Sets op->progressed when a round
 * completed; when data_done, also op's phase, step and peer for stall and timeout messages.
 * Caller holds the comm's lock. */
st_status_t st_check_progress(st_check_t *check, st_op_t *op, int data_done);
/* A transfer of the check failed (st_check_progress returned an error other than
 * ST_ERR_USAGE): logs why. The check never logs such failures itself; exec calls this only when
 * the data part succeeded, so that the data part's error (with its phase) is the one shown. */
void        st_check_report(const st_check_t *check);

/* The op stalled for STRATA_STALL_WARN seconds: rank != 0 sends rank 0 a notice; rank 0 starts
 * collecting notices and, a moment later (from st_check_progress), logs at WARN the ranks that sent
 * none. Caller holds the comm's lock. */
void st_check_stall(st_check_t *check, st_op_t *op);

/* Cancels what is in flight (bounded wait) and frees the agreement. Caller holds the comm's lock;
 * call before op->destroy. */
void st_check_destroy(st_check_t *check, st_op_t *op);

#endif
