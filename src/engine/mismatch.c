/*
 * mismatch.c - the mismatch agreement that runs next to every collective (see check.h), and rank 0's
 * report of the ranks that have not entered a stalled collective.
 *
 * Dissemination: in round k rank r sends its running (min, max) to r + 2^k and merges what r - 2^k
 * sent; after ceil(log2 n) rounds every rank has merged every rank's fingerprint (some twice, which
 * min and max do not mind). It costs log2 n message latencies, which overlap the data transfers,
 * and no rank handles more than 2 log2 n messages, however many ranks there are. Ties break by the
 * lowest rank, so every rank ends with the same pair and prints the same message.
 */
#include "config.h"
#include "engine/mismatch.h"

#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/log.h"
#include "base/param.h"
#include "base/socket.h"
#include "codec/codec.h"

#define ST_CHECK_MAX_ROUNDS 32
#define ST_CHECK_SUB_NOTICE 0xff
#define ST_CHECK_NOTICE_S   1.0 /* how long rank 0 collects stall notices before it reports */

/* Bits 43 and 42: no collective (bit 43 clear) nor send/recv tag (43 bits of sequence number
 * below 2^42) has both. Then 20 bits of sequence number and 8 of round. */
static inline uint64_t st_check_tag(uint64_t seq, unsigned sub)
{
    return (UINT64_C(3) << 42) | ((seq & 0xfffff) << 8) | (sub & 0xff);
}

/* One rank's call as it travels (fixed size, host byte order: all ranks run this build). */
typedef struct st_check_fp {
    uint64_t seq;
    uint64_t count;
    int32_t  type;
    int32_t  dtype;
    int32_t  op;    /* st_check_op_code; -1 for collectives without one */
    int32_t  root;  /* -1 for collectives without one */
    int32_t  mem;   /* 1: run on the device windows (hier on device buffers): such a call and a
                     * host one would read different windows */
    int32_t  codec; /* compressed all-reduce: the codec + 1 (st_check_codec); 0 uncompressed */
    uint64_t codec_density; /* its topk density's bits, else 0 */
    uint64_t codec_block;   /* its int8 or sign block, else 0 */
    /* the fields above are the call (ST_CHECK_KEY_BYTES, compared as bytes on the board); the
     * two below are not part of the comparison */
    int32_t  rank;  /* who made this call */
    int32_t  name;  /* st_check_op_names index for messages */
} st_check_fp_t;

/* The compared part of a fingerprint: with the board's 8-byte stamp, one cache line. */
#define ST_CHECK_KEY_BYTES offsetof(st_check_fp_t, rank)
_Static_assert(ST_CHECK_KEY_BYTES == 56, "a fingerprint's call is 56 bytes, without padding");

typedef struct st_check_msg {
    st_check_fp_t min;
    st_check_fp_t max;
} st_check_msg_t;

typedef struct st_check_notice {
    int32_t  rank;
    int32_t  pad;
    uint64_t seq;
} st_check_notice_t;

struct st_check {
    st_comm_t      *comm;
    /* One node (comm->board): the agreement runs on the node's board (engine/comm.h) instead of
     * the network; posted once the own entry is written. */
    const st_board_t *board;
    int             posted;
    uint64_t        seq;
    int             nrounds;
    int             started;
    int             round;          /* rounds merged so far */
    st_status_t     result;         /* ST_INPROGRESS until decided */
    st_check_msg_t  cur;
    /* [nrounds] each, in the check's own allocation (st_check_attach): sized by the rounds the
     * communicator needs, not by ST_CHECK_MAX_ROUNDS, since every collective makes and zeroes
     * one (callgrind, 2 ranks, 4 KiB all-reduce: 13.5k instructions per call in calloc before,
     * of about 20k per call) */
    st_check_msg_t *out, *in;
    st_request_t   *sreq, *rreq;
    int            *sposted, *rposted;
    /* stall notices: rank != 0 sends one; rank 0 receives up to n-1 */
    int                notice_state;  /* 0 none; 1 sent / collecting; 2 reported */
    double             notice_since;
    st_check_notice_t  notice_out;
    st_check_notice_t *notice_in;     /* [nranks] (rank 0) */
    st_request_t      *notice_req;    /* [nranks] (rank 0) or [1] */
    /* last, so that a board check is reset without it (st_check_attach) */
    char            failure[512]; /* why a transfer of the check failed; logged by exec only
                                   * when it is the error that stands (st_check_report) */
};

/* Ops named as users name them; "avg" is what st_redop_init makes of strataAvg. */
static const char *const st_check_op_names[] = {"sum", "prod", "max", "min", "avg", "premulsum"};

/* What the ranks must agree on: the reduction the data undergoes. A float avg is a sum
 * premultiplied by 1/n and ranks may premultiply by scalars of their own, so avg and premulsum
 * compare equal on floats (code 5); *name_p gets the name to print. */
static int st_check_op_code(const st_coll_args_t *args, int *name_p)
{
    const st_redop_t *r = &args->redop;
    st_redop_t        avg;

    *name_p = -1;
    if (!st_coll_info(args->type)->reduces) {
        return -1;
    }
    if (r->postdiv > 1) {
        *name_p = 4;
        return 4;
    }
    if (r->premul && r->kind == ST_RED_SUM) {
        *name_p = (st_redop_init(&avg, strataAvg, r->dtype, args->comm->nranks) == ST_OK &&
                   memcmp(&avg.scalar, &r->scalar, st_dtype_size(r->dtype)) == 0) ? 4 : 5;
        return 5;
    }
    *name_p = (int)r->kind; /* ST_RED_SUM .. ST_RED_MIN are 0..3 */
    return (int)r->kind;
}

/* A compressed call's codec in the fingerprint: what must agree for the wire to agree (the codec,
 * a topk density, an int8 or sign block), not the error feedback, which is each rank's own. */
static void st_check_codec(const st_compressor_t *cz, st_check_fp_t *fp)
{
    fp->codec = 0;
    fp->codec_block = 0;
    fp->codec_density = 0;
    if (cz == NULL) {
        return;
    }
    fp->codec = (int32_t)cz->params.codec + 1;
    if (cz->params.codec == strataCodecTopk) {
        memcpy(&fp->codec_density, &cz->params.density, sizeof(fp->codec_density));
    }
    if (cz->params.codec == strataCodecInt8 || cz->params.codec == strataCodecSign) {
        fp->codec_block = (uint64_t)cz->params.block;
    }
}

/* The fingerprint of this rank's call. */
static void st_check_fp_fill(const st_coll_args_t *args, st_check_fp_t *fp)
{
    int name;

    memset(fp, 0, sizeof(*fp));
    fp->seq   = args->seq;
    /* an all-to-all-v's count is what this rank sends, which differs between ranks: its counts
     * are agreed pair by pair by the algorithm (coll/a2a.c) */
    fp->count = (args->type == ST_COLL_ALLTOALLV) ? 0 : args->count;
    fp->type  = (int32_t)args->type;
    fp->dtype = (int32_t)args->dtype;
    fp->op    = st_check_op_code(args, &name);
    fp->name  = name;
    fp->root  = st_coll_info(args->type)->rooted ? args->root : -1;
    fp->mem   = (args->mem == ST_MEM_CUDA);
    st_check_codec(args->compress, fp);
    fp->rank  = args->comm->rank;
}

/* Compares the calls, not who made them. */
static int st_check_fp_cmp(const st_check_fp_t *a, const st_check_fp_t *b)
{
#define ST_CHECK_CMP_FIELD(_f)                                                                   \
    if (a->_f != b->_f) {                                                                        \
        return (a->_f < b->_f) ? -1 : 1;                                                         \
    }
    ST_CHECK_CMP_FIELD(seq)
    ST_CHECK_CMP_FIELD(type)
    ST_CHECK_CMP_FIELD(count)
    ST_CHECK_CMP_FIELD(dtype)
    ST_CHECK_CMP_FIELD(op)
    ST_CHECK_CMP_FIELD(root)
    ST_CHECK_CMP_FIELD(mem)
    ST_CHECK_CMP_FIELD(codec)
    ST_CHECK_CMP_FIELD(codec_density)
    ST_CHECK_CMP_FIELD(codec_block)
#undef ST_CHECK_CMP_FIELD
    return 0;
}

static void st_check_merge(st_check_msg_t *cur, const st_check_msg_t *in)
{
    int c = st_check_fp_cmp(&in->min, &cur->min);

    if (c < 0 || (c == 0 && in->min.rank < cur->min.rank)) {
        cur->min = in->min;
    }
    c = st_check_fp_cmp(&in->max, &cur->max);
    if (c > 0 || (c == 0 && in->max.rank < cur->max.rank)) {
        cur->max = in->max;
    }
}

/* "AllReduce #3 count 1000 float sum" */
static void st_check_describe(const st_check_fp_t *fp, char *buf, size_t len)
{
    int n = snprintf(buf, len, "%s #%llu count %llu %s", st_coll_name((st_coll_type_t)fp->type),
                     (unsigned long long)fp->seq, (unsigned long long)fp->count,
                     st_dtype_name((strataDataType_t)fp->dtype));

    if (fp->name >= 0 && fp->name < (int)ST_ARRAY_SIZE(st_check_op_names) && n > 0 &&
        (size_t)n < len) {
        n += snprintf(buf + n, len - (size_t)n, " %s", st_check_op_names[fp->name]);
    }
    if (fp->root >= 0 && n > 0 && (size_t)n < len) {
        n += snprintf(buf + n, len - (size_t)n, " root %d", fp->root);
    }
    if (fp->mem && n > 0 && (size_t)n < len) {
        n += snprintf(buf + n, len - (size_t)n, " on device buffers");
    }
    if (fp->codec != 0 && n > 0 && (size_t)n < len) {
        strataCompressParams_t p;
        char                   spec[48];

        memset(&p, 0, sizeof(p));
        p.codec         = (strataCodec_t)(fp->codec - 1);
        p.block         = (size_t)fp->codec_block;
        p.errorFeedback = 1;
        memcpy(&p.density, &fp->codec_density, sizeof(p.density));
        if (st_codec_check(&p) != NULL || !st_codec_format(&p, spec, sizeof(spec))) {
            snprintf(spec, sizeof(spec), "%s", st_codec_name(p.codec));
        }
        snprintf(buf + n, len - (size_t)n, " compressed %s", spec);
    }
}

static inline int st_check_peer(const st_check_t *check, int round, int dir)
{
    int n = check->comm->nranks;

    return (int)(((long)check->comm->rank + dir * (1L << round) % n + n) % n);
}

/* A transfer of the check failed: kept, not logged. The data part usually fails on the same
 * peer, and its error (naming the phase) is the one the user should read. */
/* why: the transport's reason (st_request_t.why), or NULL. */
static void st_check_fail(st_check_t *check, const char *what, int peer, st_status_t status,
                          const char *why)
{
    if (check->failure[0] == '\0') {
        snprintf(check->failure, sizeof(check->failure), "mismatch check of collective #%llu on "
                 "%s rank %d: %s rank %d failed: %s%s%.300s", (unsigned long long)check->seq,
                 check->comm->name, check->comm->rank, what, peer, st_status_str(status),
                 why != NULL ? ": " : "", why != NULL ? why : "");
    }
}

void st_check_report(const st_check_t *check)
{
    if (check->failure[0] != '\0') {
        st_error(ST_SUB_COLL, "%s", check->failure);
    }
}

static st_status_t st_check_send(st_check_t *check, int round)
{
    st_comm_t  *comm = check->comm;
    st_status_t status;

    check->out[round] = check->cur;
    status = comm->net->isend(comm->eps[st_check_peer(check, round, +1)], &check->out[round],
                              sizeof(check->out[round]), st_check_tag(check->seq, (unsigned)round),
                              NULL, &check->sreq[round]);
    if (status != ST_OK) {
        st_check_fail(check, "send to", st_check_peer(check, round, +1), status, NULL);
        return status;
    }
    check->sposted[round] = 1;
    return ST_OK;
}

static st_status_t st_check_start(st_check_t *check)
{
    st_comm_t  *comm = check->comm;
    st_status_t status;

    check->started = 1;
    for (int k = 0; k < check->nrounds; k++) {
        int from = st_check_peer(check, k, -1);

        status = comm->net->irecv(comm->eps[from], &check->in[k], sizeof(check->in[k]),
                                  st_check_tag(check->seq, (unsigned)k), NULL, &check->rreq[k]);
        if (status != ST_OK) {
            st_check_fail(check, "receive from", from, status, NULL);
            return status;
        }
        check->rposted[k] = 1;
    }
    return st_check_send(check, 0);
}

static st_status_t st_check_verdict(st_check_t *check)
{
    char a[160], b[160];

    if (st_check_fp_cmp(&check->cur.min, &check->cur.max) == 0) {
        return ST_OK;
    }
    st_check_describe(&check->cur.min, a, sizeof(a));
    st_check_describe(&check->cur.max, b, sizeof(b));
    st_error(ST_SUB_COLL, "mismatched collectives on %s (seen by rank %d): %s on rank %d vs %s on "
             "rank %d (STRATA_CHECK_MISMATCH)", check->comm->name, check->comm->rank, a,
             check->cur.min.rank, b, check->cur.max.rank);
    return ST_ERR_USAGE;
}

/* Appends "3, 5, 7" (at most 16 ranks, then "and N more") of ranks with flag[r] == want. */
static int st_check_rank_list(const char *flag, int n, char want, char *buf, size_t len)
{
    size_t pos = 0;
    int    count = 0;

    buf[0] = '\0';
    for (int r = 0; r < n; r++) {
        if (flag[r] != want) {
            continue;
        }
        if (count < 16 && pos < len) {
            pos += (size_t)snprintf(buf + pos, len - pos, "%s%d", count ? ", " : "", r);
        }
        count++;
    }
    if (count > 16 && pos < len) {
        snprintf(buf + pos, len - pos, " and %d more", count - 16);
    }
    return count;
}

/* Rank 0: after collecting notices for ST_CHECK_NOTICE_S (or all of them), names the ranks that
 * sent none. */
static void st_check_notice_report(st_check_t *check, st_op_t *op)
{
    st_comm_t *comm = check->comm;
    int        n = comm->nranks, got = 0;
    char      *flag, in[256], out[256];

    for (int r = 1; r < n; r++) {
        got += check->notice_req[r].done && check->notice_req[r].status == ST_OK;
    }
    if (got < n - 1 && st_time_now() - check->notice_since < ST_CHECK_NOTICE_S) {
        return;
    }
    check->notice_state = 2;
    flag = calloc((size_t)n, 1);
    if (flag == NULL) {
        return;
    }
    flag[0] = 1;
    for (int r = 1; r < n; r++) {
        flag[r] = check->notice_req[r].done && check->notice_req[r].status == ST_OK;
    }
    st_check_rank_list(flag, n, 1, in, sizeof(in));
    if (st_check_rank_list(flag, n, 0, out, sizeof(out)) == 0) {
        st_warn(ST_SUB_COLL, "%s #%llu on %s: every rank has entered it and is waiting (a peer "
                "stuck in its transport, or a rank of its data path is gone?)", op->coll,
                (unsigned long long)op->seq, comm->name);
    } else {
        st_warn(ST_SUB_COLL, "%s #%llu on %s: rank(s) %s have not entered it after %.1f s "
                "(ranks %s are waiting in it; STRATA_STALL_WARN)", op->coll,
                (unsigned long long)op->seq, comm->name, out, st_time_now() - op->t_start, in);
    }
    free(flag);
}

/* ---- the node's board (one-node communicators) ---------------------------------------------- */

/* An entry: the stamp (collective # + 1) and the fingerprint's call in its first cache line,
 * which is all a peer reads when the calls agree; who made it in the second. */
_Static_assert(8 + sizeof(st_check_fp_t) <= ST_BOARD_ENTRY_BYTES && 8 + ST_CHECK_KEY_BYTES == 64,
               "a board entry holds a stamp and a fingerprint, the compared part in one line");

static inline char *st_check_entry(const st_board_t *b, int r, uint64_t seq)
{
    return b->entries[r] + (size_t)(seq % (uint64_t)b->nslots) * ST_BOARD_ENTRY_BYTES;
}

static inline uint64_t st_check_stamp(const st_board_t *b, int r, uint64_t seq)
{
    return __atomic_load_n((uint64_t *)(void *)st_check_entry(b, r, seq), __ATOMIC_ACQUIRE);
}

int st_check_post(st_check_t *check)
{
    const st_board_t *b = check->board;
    uint64_t          seq = check->seq;
    char             *e;

    if (b == NULL || check->posted) {
        return b != NULL;
    }
    /* The entry held #seq - nslots, which every rank has read if it needed to: one
     * communicator's collectives run one after another, and none completes before its check saw
     * every rank's fingerprint (here, or next to the data: st_check_agreed). So no rank is more
     * than one collective ahead of another, and nslots >= 2 entries never hold one still read. */
    e = st_check_entry(b, b->me, seq);
    memcpy(e + 8, &check->cur.min, sizeof(check->cur.min));
    __atomic_store_n((uint64_t *)(void *)e, seq + 1, __ATOMIC_RELEASE);
    check->posted = 1;
    return 1;
}

static void st_check_fp_words(const st_check_fp_t *fp, uint64_t words[2])
{
    uint64_t key[ST_CHECK_KEY_BYTES / 8], h = 0;

    memcpy(key, fp, sizeof(key));
    for (size_t i = 0; i < sizeof(key) / sizeof(key[0]); i++) {
        h = (h ^ key[i]) * UINT64_C(0x9e3779b97f4a7c15); /* Fibonacci hashing's multiplier */
        h ^= h >> 29;
    }
    words[0] = fp->seq;
    words[1] = h;
}

void st_check_words(const st_check_t *check, uint64_t words[2])
{
    st_check_fp_words(&check->cur.min, words);
}

int st_check_fast_post(const st_coll_args_t *args, uint64_t words[2])
{
    const st_board_t *b = args->comm->board;
    st_check_fp_t     fp;
    char             *e;

    if (!st_core_config.check_mismatch || b == NULL) {
        return 0;
    }
    st_check_fp_fill(args, &fp);
    e = st_check_entry(b, b->me, args->seq);
    memcpy(e + 8, &fp, sizeof(fp));
    __atomic_store_n((uint64_t *)(void *)e, args->seq + 1, __ATOMIC_RELEASE);
    st_check_fp_words(&fp, words);
    return 1;
}

void st_check_set_posted(st_check_t *check)
{
    check->posted = check->board != NULL;
}

void st_check_agreed(st_check_t *check)
{
    if (check->board != NULL && check->result == ST_INPROGRESS) {
        check->result = ST_OK;
    }
}

void st_check_prefetch(const st_check_t *check)
{
    const st_board_t *b = check->board;

    if (b != NULL) {
        for (int r = 0; r < b->n; r++) {
            __builtin_prefetch(st_check_entry(b, r, check->seq), 0, 3);
        }
    }
}

/* The board's agreement: post, then compare every rank's entry once all are there. */
static st_status_t st_check_board_progress(st_check_t *check, st_op_t *op, int data_done)
{
    const st_board_t *b = check->board;
    uint32_t          bell = b->bell(b->sleep_on);
    const char       *own;
    st_check_msg_t    in;
    int               late = -1, differ = 0;

    if (!check->posted) {
        (void)st_check_post(check);
        b->ring(b->ring_arg);
        op->progressed = 1;
    }
    own = st_check_entry(b, b->me, check->seq) + 8;
    for (int r = 0; r < b->n && late < 0; r++) {
        if (r == b->me) {
            continue;
        }
        if (st_check_stamp(b, r, check->seq) != check->seq + 1) {
            late = r;
        } else {
            differ |= memcmp(st_check_entry(b, r, check->seq) + 8, own, ST_CHECK_KEY_BYTES);
        }
    }
    if (late >= 0) {
        op->win_wait = 1;
        if (data_done) {
            /* nothing else runs: sleep on the doorbell that the late rank's post rings */
            op->phase      = "mismatch check";
            op->step       = 1;
            op->nsteps     = 1;
            op->wait_peer  = late; /* one node: local rank = rank (st_intra_board_init) */
            op->sleepable  = 1;
            op->sleep_seen = bell;
            op->sleep_on   = b->sleep_on;
            op->sleep      = b->sleep;
            op->arm        = b->arm;
        }
        return ST_INPROGRESS;
    }
    op->progressed = 1;
    if (!differ) {
        return check->result = ST_OK;
    }
    for (int r = 0; r < b->n; r++) { /* the same (min, max) pair on every rank */
        if (r != b->me) {
            memcpy(&in.min, st_check_entry(b, r, check->seq) + 8, sizeof(in.min));
            in.max = in.min;
            st_check_merge(&check->cur, &in);
        }
    }
    return check->result = st_check_verdict(check);
}

st_status_t st_check_progress(st_check_t *check, st_op_t *op, int data_done)
{
    st_comm_t *comm = check->comm;

    if (check->notice_state == 1 && comm->rank == 0) {
        st_check_notice_report(check, op);
    }
    if (check->result != ST_INPROGRESS) {
        return check->result;
    }
    if (check->board != NULL) {
        return st_check_board_progress(check, op, data_done);
    }
    if (!check->started) {
        st_status_t status = st_check_start(check);

        if (status != ST_OK) {
            return check->result = status;
        }
        op->progressed = 1;
    }
    while (check->round < check->nrounds) {
        int k = check->round;

        if (!check->rreq[k].done) {
            break;
        }
        check->rposted[k] = 0;
        if (check->rreq[k].status != ST_OK || check->rreq[k].len != sizeof(check->in[k])) {
            /* a wrong length (ST_OK): a message of another build or protocol */
            st_check_fail(check, "receive from", st_check_peer(check, k, -1),
                          check->rreq[k].status != ST_OK ? check->rreq[k].status : ST_ERR_INTERNAL,
                          check->rreq[k].status != ST_OK ? check->rreq[k].why : NULL);
            return check->result = (check->rreq[k].status == ST_OK) ? ST_ERR_INTERNAL
                                                                    : ST_ERR_REMOTE;
        }
        st_check_merge(&check->cur, &check->in[k]);
        check->round++;
        op->progressed = 1;
        if (check->round < check->nrounds) {
            st_status_t status = st_check_send(check, check->round);

            if (status != ST_OK) {
                return check->result = status;
            }
        }
    }
    for (int k = 0; k < check->nrounds; k++) {
        if (check->sposted[k] && check->sreq[k].done) {
            check->sposted[k] = 0;
            if (check->sreq[k].status != ST_OK) {
                st_check_fail(check, "send to", st_check_peer(check, k, +1), check->sreq[k].status,
                              check->sreq[k].why);
                return check->result = ST_ERR_REMOTE;
            }
        }
        if (check->sposted[k]) {
            return ST_INPROGRESS; /* the peer needs these bytes: never cancel them */
        }
    }
    if (check->round < check->nrounds) {
        if (data_done) {
            op->phase     = "mismatch check";
            op->step      = check->round + 1;
            op->nsteps    = check->nrounds;
            op->wait_peer = st_check_peer(check, check->round, -1);
        }
        return ST_INPROGRESS;
    }
    return check->result = st_check_verdict(check);
}

void st_check_stall(st_check_t *check, st_op_t *op)
{
    st_comm_t  *comm = check->comm;
    int         n = comm->nranks;
    st_status_t status = ST_OK;

    if (check->notice_state != 0 || !(check->started || check->posted)) {
        return;
    }
    check->notice_state = 1;
    check->notice_since = st_time_now();
    if (comm->rank != 0) {
        check->notice_req = calloc(1, sizeof(*check->notice_req));
        if (check->notice_req == NULL) {
            return;
        }
        check->notice_out.rank = comm->rank;
        check->notice_out.seq  = check->seq;
        status = comm->net->isend(comm->eps[0], &check->notice_out, sizeof(check->notice_out),
                                  st_check_tag(check->seq, ST_CHECK_SUB_NOTICE), NULL,
                                  &check->notice_req[0]);
        if (status != ST_OK) {
            check->notice_req[0].done = 1; /* nothing to cancel */
        }
        return;
    }
    check->notice_in  = calloc((size_t)n, sizeof(*check->notice_in));
    check->notice_req = calloc((size_t)n, sizeof(*check->notice_req));
    if (check->notice_in == NULL || check->notice_req == NULL) {
        check->notice_state = 2;
        return;
    }
    check->notice_req[0].done = 1;
    for (int r = 1; r < n; r++) {
        status = comm->net->irecv(comm->eps[r], &check->notice_in[r], sizeof(check->notice_in[r]),
                                  st_check_tag(check->seq, ST_CHECK_SUB_NOTICE), NULL,
                                  &check->notice_req[r]);
        if (status != ST_OK) {
            check->notice_req[r].done   = 1;
            check->notice_req[r].status = status;
        }
    }
    st_check_notice_report(check, op);
}

static void st_check_free(void *arg)
{
    st_check_t *check = arg;

    free(check->notice_in);
    free(check->notice_req);
    if (check->board != NULL && check->comm->board != NULL && check->comm->spare_check == NULL) {
        check->comm->spare_check = check; /* the next collective's (st_check_attach) */
        return;
    }
    free(check);
}

st_status_t st_check_keep_spare(st_comm_t *comm)
{
    if (comm->board != NULL && comm->spare_check == NULL) {
        comm->spare_check = malloc(sizeof(*comm->spare_check));
        if (comm->spare_check == NULL) {
            return ST_ERR_NO_MEMORY;
        }
    }
    return ST_OK;
}

void st_check_drop_spare(st_comm_t *comm)
{
    free(comm->spare_check);
    comm->spare_check = NULL;
}

void st_check_destroy(st_check_t *check, st_op_t *op)
{
    st_request_t *reqs[2 * ST_CHECK_MAX_ROUNDS];
    int           n = 0, ok;

    if (check == NULL) {
        return;
    }
    for (int k = 0; k < check->nrounds; k++) {
        if (check->rposted[k]) {
            reqs[n++] = &check->rreq[k];
        }
        if (check->sposted[k]) {
            reqs[n++] = &check->sreq[k];
        }
    }
    ok = st_exec_cancel(op, reqs, n, 2.0);
    if (check->notice_req != NULL) {
        int nn = (check->comm->rank == 0) ? check->comm->nranks : 1;

        for (int r = 0; r < nn; r++) {
            st_request_t *req = &check->notice_req[r];

            ok &= st_exec_cancel(op, &req, 1, 2.0);
        }
    }
    if (!ok) {
        st_comm_defer(check->comm, st_check_free, check); /* the transport may still write it */
        return;
    }
    st_check_free(check);
}

/* The op of a collective with no data (count 0): only the agreement. */
static st_status_t st_check_op_progress(st_op_t *op ST_UNUSED)
{
    return ST_OK;
}

static void st_check_op_destroy(st_op_t *op)
{
    free(op);
}

st_status_t st_check_attach(const st_coll_args_t *args, st_op_t **op_p)
{
    st_comm_t  *comm = args->comm;
    st_check_t *check;
    int         nrounds = 0;

    if (!st_core_config.check_mismatch || args->unchecked || comm->nranks < 2 ||
        st_coll_info(args->type)->p2p) {
        return ST_OK;
    }
    while ((1L << nrounds) < comm->nranks) {
        nrounds++;
    }
    if (comm->board != NULL) {
        /* one node: no messages, so no rounds; the last one's memory when free */
        check = comm->spare_check != NULL ? comm->spare_check : malloc(sizeof(*check));
        comm->spare_check = NULL;
        if (check == NULL) {
            goto err_nomem;
        }
        memset(check, 0, offsetof(st_check_t, failure));
        check->failure[0] = '\0';
        check->board = comm->board;
        nrounds      = 0;
    } else {
        size_t r = (size_t)nrounds;
        char  *p = calloc(1, sizeof(*check) + r * (2 * sizeof(st_check_msg_t) +
                                                   2 * sizeof(st_request_t) + 2 * sizeof(int)));

        if (p == NULL) {
            goto err_nomem;
        }
        check = (st_check_t *)(void *)p;
        p += sizeof(*check); /* the arrays after it, the 8-byte-aligned ones first */
        check->out     = (st_check_msg_t *)(void *)p;
        check->in      = check->out + r;
        check->sreq    = (st_request_t *)(void *)(check->in + r);
        check->rreq    = check->sreq + r;
        check->sposted = (int *)(void *)(check->rreq + r);
        check->rposted = check->sposted + r;
    }
    if (*op_p == NULL) {
        st_op_t *op = calloc(1, sizeof(*op));

        if (op == NULL) {
            free(check);
            goto err_nomem;
        }
        op->comm      = comm;
        op->coll      = st_coll_name(args->type);
        op->seq       = args->seq;
        op->phase     = "mismatch check";
        op->wait_peer = -1;
        op->times_set = 1; /* nothing to time, as without the check */
        op->algo      = "none";
        op->progress  = st_check_op_progress;
        op->destroy   = st_check_op_destroy;
        *op_p         = op;
    }
    check->comm        = comm;
    check->seq         = args->seq;
    check->nrounds     = nrounds;
    check->result      = ST_INPROGRESS;
    st_check_fp_fill(args, &check->cur.min);
    check->cur.max     = check->cur.min;
    (*op_p)->check       = check;
    return ST_OK;

err_nomem:
    st_error(ST_SUB_COLL, "%s #%llu on %s rank %d: no memory for the mismatch check",
             st_coll_name(args->type), (unsigned long long)args->seq, comm->name, comm->rank);
    if (*op_p != NULL) {
        pthread_mutex_lock(&comm->lock);
        (*op_p)->destroy(*op_p);
        pthread_mutex_unlock(&comm->lock);
        *op_p = NULL;
    }
    return ST_ERR_NO_MEMORY;
}
