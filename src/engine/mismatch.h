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
 * On a communicator of one node (comm->board) the same fingerprints meet on the node's board in
 * shared memory instead (engine/comm.h): each rank writes its own into its window, reads every
 * other rank's once all are there, and takes the same (min, max) pair; no network message, and
 * the same messages.
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

/* When args is a collective that needs the agreement (STRATA_CHECK_MISMATCH=1, several ranks, not
 * args->unchecked),
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

/* One node (comm->board): writes the call's fingerprint into the own board entry, without
 * waking anyone; 1 when it is there (now or before), 0 when the check does not use a board. An
 * algorithm that publishes a window counter next calls it first: its publish rings the doorbell
 * for both, and a peer that sees the counter sees the fingerprint (the mismatch fingerprint
 * folded into the data round). st_check_progress posts it otherwise, and rings. */
int         st_check_post(st_check_t *check);

/* One node: the call (the fingerprint's compared part) in two words, its sequence number and a
 * 64-bit mix of the rest, for an algorithm that carries them in the cache line of its data (the
 * small all-reduce): when every rank's words equal this rank's, it calls st_check_agreed and no
 * board entry is read; when any differ, it leaves the check to the board, which names both
 * calls. The board entry is still posted (st_check_post): a rank in another algorithm reads it. */
void        st_check_words(const st_check_t *check, uint64_t words[2]);
/* Ends a board check with success; nothing for a check over the network (a one-node
 * communicator without a board: its rounds run to their end). */
void        st_check_agreed(st_check_t *check);
/* The same for a call run without a check object (coll/small.c's fast path): when the call
 * needs the check and comm has a board, posts args' fingerprint there, sets words and returns 1;
 * else 0. st_check_set_posted then tells a check attached later (a hand-over to the engine) that
 * the entry is there. */
int         st_check_fast_post(const st_coll_args_t *args, uint64_t words[2]);
void        st_check_set_posted(st_check_t *check);

/* One node: starts loading the peers' board entries of the check's collective into the cache
 * (an algorithm that saw their data arrive: the fingerprints were posted before it). */
void        st_check_prefetch(const st_check_t *check);

/* Makes sure comm keeps a board check for its next collective (st_check_attach then allocates
 * nothing): ST_OK, or ST_ERR_NO_MEMORY (not logged). Nothing without a board. */
st_status_t st_check_keep_spare(st_comm_t *comm);
/* Frees the board check comm keeps for its next collective (comm's destruction). */
void        st_check_drop_spare(st_comm_t *comm);

/* Cancels what is in flight (bounded wait) and frees the agreement. Caller holds the comm's lock;
 * call before op->destroy. */
void st_check_destroy(st_check_t *check, st_op_t *op);

#endif
